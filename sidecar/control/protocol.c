/* SPDX-License-Identifier: MIT */
/*
 * The control protocol of one connection, from accept to free: HELLO
 * (the session's region and its worker), REGISTER / UNREGISTER, the
 * admin requests, closing and the worker's acks.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/wireio.h"
#include "store/store.h"
#include "control/cluster.h"
#include "control/daemon.h"
#include "control/instance.h"
#include "wire/layout.h"
#include "store/lease.h"
#include "obs/log.h"
#include "io/mem.h"
#include "io/mover.h"
#include "control/nspace.h"
#include "control/protocol.h"
#include "control/session.h"
#include "control/admin.h"
#include "obs/account.h"
#include "base/util.h"

static void on_event(struct ev_source *src, uint32_t events);

struct session *session_new(struct daemon *d, int fd, pid_t pid, uid_t uid, gid_t gid)
{
	struct session *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->id = ++d->next_session_id;
	s->ev.fd = fd;
	s->ev.fn = on_event;
	s->pid = pid;
	s->uid = uid;
	s->gid = gid;
	s->d = d;
	s->state = S_NEW;
	s->created_ns = now_ns();
	s->sl.kind = SLOT_NONE;
	CDS_INIT_LIST_HEAD(&s->inst_node);
	CDS_INIT_LIST_HEAD(&s->w.saves);
	/* The view's constant part: what the worker reads of the session itself. */
	s->w.id = s->id;
	s->w.uid = s->uid;
	s->w.prefix = s->prefix;
	s->w.st = &s->st;
	session_set_prefix(s);
	cds_list_add_tail(&s->node, &d->sessions);
	d->nr_sessions++;
	return s;
}

/* ---- replies ------------------------------------------------------- */

static int send_msg(struct session *s, const void *msg, size_t len, const int *fds, unsigned nfds)
{
	/*
	 * Non-blocking: a client that never reads must not stall the control
	 * thread.  A full buffer ends that session instead.
	 */
	int r = wireio_send(s->ev.fd, msg, len, fds, nfds, MSG_DONTWAIT);

	if (r < 0)
		slog_info_errno_rl(&s->log_rl, s, r, "cannot send a reply; closing");
	return r;
}

static int reply(struct session *s, uint32_t seq, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int reply(struct session *s, uint32_t seq, int status, const char *fmt, ...)
{
	struct kvs_msg_reply r;
	char text[KVS_TEXT_MAX] = "";

	if (fmt) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(text, sizeof(text), fmt, ap);
		va_end(ap);
	}
	proto_make_reply(&r, seq, status, text);
	return send_msg(s, &r, sizeof(r), NULL, 0);
}

/* ---- HELLO --------------------------------------------------------- */

static uint32_t pick_entries(uint32_t want, uint32_t def, uint32_t max)
{
	if (want == 0)
		return def;
	/*
	 * The client's number is anything up to 2^32-1: clamp before rounding,
	 * as next_pow2_u32() of a value above 2^31 would shift by 32.
	 */
	if (want >= max)
		return max;
	return MIN(next_pow2_u32(MAX(want, 2u)), max);
}

/*
 * The fence slots (KVS_HELLO_FENCES): pinned for the devices' copy
 * streams, which write a LOAD's progress into them (mapped, identity
 * device address: cuda_pin() checks).  Without a mover that pins (no
 * GPU) the worker alone writes them, from the host.
 */
static int map_fences(struct session *s, char *why, size_t wl)
{
	uint64_t bytes;
	void *f;
	int r = shmq_region_area(s->region, KVS_PART_FENCES, &f, &bytes);

	if (r < 0)
		return r;
	if (movers_pin_memory()) {
		r = movers_pin(f, bytes);
		if (r < 0) {
			snprintf(why, wl, "cannot register the fence slots with the GPU: %s",
				 strerror(-r));
			return r;
		}
		s->fences_pinned = true;
	}
	s->w.fences = f;
	s->w.nr_fences = KVS_FENCE_SLOTS;
	return 0;
}

static int create_region(struct session *s, char *why, size_t wl)
{
	const struct kvs_config *cfg = s->d->cfg;
	struct shmq_part_spec parts[5];
	unsigned nparts = 3;
	uint64_t argb;
	void *args;
	int r;

	s->sq_entries = pick_entries(s->hello.sq_entries, cfg->sq_entries, cfg->sq_entries_max);
	s->cq_entries = pick_entries(MAX(s->hello.cq_entries, 2 * s->sq_entries),
				     2 * s->sq_entries, 2 * cfg->sq_entries_max);
	argb = s->hello.arg_bytes ? s->hello.arg_bytes : cfg->arg_bytes;
	argb = round_up_u64(MIN(MAX(argb, 4096u), cfg->arg_bytes_max), 4096);
	s->arg_bytes = argb;
	s->max_inflight = MIN(cfg->max_inflight, s->cq_entries);

	parts[0] = (struct shmq_part_spec){ SHMQ_PART_RING, KVS_PART_SQ, sizeof(struct kvs_sqe),
					    s->sq_entries, 0 };
	parts[1] = (struct shmq_part_spec){ SHMQ_PART_RING, KVS_PART_CQ, sizeof(struct kvs_cqe),
					    s->cq_entries, 0 };
	parts[2] = (struct shmq_part_spec){ SHMQ_PART_AREA, KVS_PART_ARGS, 0, 0, argb };
	/* The cluster answers, one per CQ entry, only for a session that asked. */
	if (s->hello.flags & KVS_HELLO_CLUSTER)
		parts[nparts++] =
			(struct shmq_part_spec){ SHMQ_PART_AREA, KVS_PART_CLUSTER, 0, 0,
						 (uint64_t)s->cq_entries *
							 sizeof(struct kvs_cluster_answer) };
	if (s->hello.flags & KVS_HELLO_FENCES)
		parts[nparts++] = (struct shmq_part_spec){ SHMQ_PART_AREA, KVS_PART_FENCES, 0, 0,
							   (uint64_t)KVS_FENCE_SLOTS *
								   sizeof(struct kvs_fence) };
	r = shmq_region_create("kvstash-session", KVS_REGION_MAGIC, KVS_REGION_VERSION, parts,
			       nparts, &s->region);
	if (r < 0) {
		snprintf(why, wl, "cannot create the session region: %s", strerror(-r));
		return r;
	}
	r = shmq_ring_init(&s->w.sq, s->region, KVS_PART_SQ, SHMQ_CONSUMER);
	if (!r)
		r = shmq_ring_init(&s->w.cq, s->region, KVS_PART_CQ, SHMQ_PRODUCER);
	if (!r)
		r = shmq_region_area(s->region, KVS_PART_ARGS, &args, &argb);
	if (!r && (s->hello.flags & KVS_HELLO_CLUSTER)) {
		void *ans;
		uint64_t ansb;

		r = shmq_region_area(s->region, KVS_PART_CLUSTER, &ans, &ansb);
		s->w.answers = r ? NULL : ans;
	}
	if (!r && (s->hello.flags & KVS_HELLO_FENCES))
		r = map_fences(s, why, wl);
	if (r < 0) {
		snprintf(why, wl, "session region: %s", strerror(-r));
		return r;
	}
	s->w.args = args;
	s->w.args_size = argb;
	s->w.max_inflight = s->max_inflight;
	s->w.bl_cap = s->max_inflight;
	s->w.backlog = calloc(s->w.bl_cap, sizeof(*s->w.backlog));
	if (!s->w.backlog) {
		snprintf(why, wl, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* An admin session: its own pool (it never takes an engine's slot), no region, no worker. */
static int hello_admin(struct session *s, uint32_t seq)
{
	struct kvs_msg_hello_reply rep;
	char why[KVS_TEXT_MAX] = "";

	slots_hello(&s->sl, SLOT_ADMIN, why, sizeof(why));
	s->state = S_ACTIVE;
	memset(&rep, 0, sizeof(rep));
	proto_make_reply(&rep.r, seq, 0, NULL);
	rep.r.hdr.type = KVS_MSG_HELLO_REPLY;
	rep.r.hdr.size = sizeof(rep);
	rep.session_id = s->id;
	return send_msg(s, &rep, sizeof(rep), NULL, 0);
}

/*
 * What an engine session holds, in order: its slot and fds, the worker of
 * the device it named (into *@ret_wid), its namespace, its instance, its
 * registry tally and its region.  -errno with the reason in @why.
 */
static int hello_join(struct session *s, unsigned *ret_wid, char *why, size_t wl)
{
	struct daemon *d = s->d;
	int r;

	/* The session's socket and its region's memfd count against the uid's fds. */
	if ((r = slots_hello(&s->sl, SLOT_ENGINE, why, wl)) < 0 ||
	    (r = slots_take_fds(&s->sl, 2, why, wl)) < 0) {
		/* why set */
	} else if ((r = mover_route(s->hello.device_kind, s->hello.device_uuid, ret_wid, why,
				    wl)) < 0) {
		/* why set */
	} else if ((r = nspace_get(d->nspaces, s->hello.ns, &s->ns)) < 0) {
		snprintf(why, wl, "namespace %s: %s", s->hello.ns,
			 r == -EUSERS ? "too many namespaces" : strerror(-r));
	} else if ((r = instance_join(d->instances, s, why, wl, &s->inst)) < 0) {
		/* why set */
	} else if ((r = cluster_session_open(d, s)) < 0) {
		snprintf(why, wl, "registry tally: %s", strerror(-r));
	} else {
		r = create_region(s, why, wl);
	}
	return r;
}

/* The HELLO reply of an engine session served by @w, with its region's fd. */
static int hello_reply(struct session *s, uint32_t seq, const struct worker *w)
{
	const struct kvs_config *cfg = s->d->cfg;
	struct kvs_msg_hello_reply rep;
	int fd;

	memset(&rep, 0, sizeof(rep));
	proto_make_reply(&rep.r, seq, 0, NULL);
	rep.r.hdr.type = KVS_MSG_HELLO_REPLY;
	rep.r.hdr.size = sizeof(rep);
	rep.session_id = s->id;
	rep.sq_entries = s->sq_entries;
	rep.cq_entries = s->cq_entries;
	rep.arg_bytes = s->arg_bytes;
	rep.region_size = shmq_region_size(s->region);
	rep.max_keys = cfg->max_keys;
	rep.max_inflight = s->max_inflight;
	rep.max_layers = cfg->max_layers;
	rep.lease_ttl_ms = cfg->lease_ttl_ms;
	rep.worker = w->id;
	fd = shmq_region_fd(s->region);
	return send_msg(s, &rep, sizeof(rep), &fd, 1);
}

/* An engine session that got its reply: active, and given to worker @w. */
static void hello_attach(struct session *s, struct worker *w)
{
	s->worker = w;
	s->state = S_ACTIVE;
	account_session_open(&s->d->ctr);
	slog_info(s, "connected: uid %u, namespace %s, tp %u/%u, %s, SQ %u CQ %u args %" PRIu64
		  " KiB", s->uid, s->hello.ns, s->hello.tp_rank, s->hello.tp_size,
		  s->hello.role == KVS_ROLE_WORKER ? "worker" : "scheduler", s->sq_entries,
		  s->cq_entries, s->arg_bytes >> 10);
	/*
	 * The rest of the worker's view, from HELLO, the instance and the
	 * namespace joined above; ATTACH (worker_command()'s mutex) orders it
	 * before the worker reads it.
	 */
	s->w.role = s->hello.role;
	s->w.tp_rank = s->hello.tp_rank;
	s->w.order = &s->inst->saves;
	s->w.sealed = &s->inst->sealed;
	s->w.tenant = s->inst->tenant;
	s->w.lh = &s->inst->lh;
	s->w.ns = &s->ns->in_store;
	worker_command(s->worker, WCMD_ATTACH, &s->w);
}

static int handle_hello(struct session *s, const void *buf, size_t len, uint32_t seq)
{
	struct daemon *d = s->d;
	char why[KVS_TEXT_MAX] = "";
	struct worker *w;
	unsigned wid = 0;
	int r;

	if (s->state != S_NEW) {
		reply(s, seq, -EISCONN, "HELLO was already said");
		return -EPROTO;
	}
	r = proto_parse_hello(buf, len, &s->hello, why, sizeof(why));
	if (r < 0) {
		clog_warning(&s->sl, "HELLO refused: %s", why);
		account_session_refused(&d->ctr);
		reply(s, seq, r, "%s", why);
		return r;
	}
	session_set_prefix(s);
	if (!s->peer_allowed) {
		clog_warning(&s->sl, "uid %u gid %u is not in the allow-list: refused", s->uid, s->gid);
		account_session_refused(&d->ctr);
		reply(s, seq, -EACCES, "uid %u is not allowed to use this kvstashd", s->uid);
		return -EACCES;
	}
	if (s->hello.role == KVS_ROLE_ADMIN)
		return hello_admin(s, seq);
	r = hello_join(s, &wid, why, sizeof(why));
	if (r < 0) {
		clog_warning_errno(&s->sl, r, "HELLO refused: %s", why);
		account_session_refused(&d->ctr);
		reply(s, seq, r, "%s", why);
		return r;
	}
	/* The worker of the device it named (start_workers() made one per device, in order). */
	w = d->workers[wid];
	r = hello_reply(s, seq, w);
	/*
	 * The engine may be gone already (killed right after its HELLO).  The
	 * session has no worker yet, so session_close() frees it at once; a
	 * worker set here would wait for ever for the DETACH of a session it
	 * was never given, leaking the region and the instance's rank.
	 */
	if (r < 0)
		return r;
	hello_attach(s, w);
	return 0;
}

/* ---- REGISTER / UNREGISTER ---------------------------------------- */

/*
 * The bounds on host engine memory mapped, with 0 meaning automatic: a
 * quarter of the host's RAM per session, half of it per uid.  A legitimate
 * engine's memory is resident already (it is the engine's), so mapping it
 * costs kvstashd page tables only; the bound is for the holes, whose pages
 * kvstashd's copies would fault in and be charged for.  On a GPU host the
 * engines register GPU memory and map nothing here.
 */
static uint64_t ram_fraction(unsigned div)
{
	long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || pg <= 0)
		return UINT64_MAX; /* unknown: no automatic bound rather than a wrong one */
	return (uint64_t)pages * (uint64_t)pg / div;
}

static uint64_t max_mapped_session(const struct kvs_config *cfg)
{
	return cfg->max_mapped_bytes ? cfg->max_mapped_bytes : ram_fraction(4);
}

static uint64_t max_mapped_uid(const struct kvs_config *cfg)
{
	return cfg->max_mapped_bytes_per_uid ? cfg->max_mapped_bytes_per_uid : ram_fraction(2);
}

/* Host bytes mapped for @uid's sessions, registrations being retired included. */
static uint64_t mapped_of_uid(struct daemon *d, uid_t uid)
{
	struct session *s;
	uint64_t n = 0;

	cds_list_for_each_entry(s, &d->sessions, node)
		if (s->uid == uid)
			n += s->mapped_host;
	return n;
}

/*
 * May session @arg map @want more bytes of host memory?  Checked before
 * anything is mapped, so a refused REGISTER costs the daemon nothing.
 */
static int check_mapped(void *arg, uint64_t want, char *why, size_t wl)
{
	struct session *s = arg;
	const struct kvs_config *cfg = s->d->cfg;
	uint64_t cap = max_mapped_session(cfg), ucap = max_mapped_uid(cfg), held, total;

	if (want > cap) {
		snprintf(why, wl,
			 "the views reach %" PRIu64 " bytes of host memory, more than a "
			 "session may map ([session] max_mapped_bytes = %" PRIu64 ")",
			 want, cap);
		return -E2BIG;
	}
	held = mapped_of_uid(s->d, s->uid);
	if (__builtin_add_overflow(held, want, &total) || total > ucap) {
		snprintf(why, wl,
			 "uid %u has %" PRIu64 " bytes of host memory mapped; %" PRIu64
			 " more pass [server] max_mapped_bytes_per_uid = %" PRIu64,
			 s->uid, held, want, ucap);
		return -EDQUOT;
	}
	return 0;
}

static int build_registration(struct session *s, const struct reg_req *req, int *fds,
			      struct registration **ret, char *why, size_t wl)
{
	const struct registration_spec spec = {
		.req = req,
		.fds = fds,
		.device_kind = s->hello.device_kind,
		.dev = s->worker->dev,
		.node = s->worker->node,
		.tp_rank = s->hello.tp_rank,
		.tp_size = s->hello.tp_size,
		.ns = s->ns,
		.store = s->d->store,
		.may_map = check_mapped,
		.may_map_arg = s,
	};

	return registration_build(&spec, ret, why, wl);
}

static int handle_register(struct session *s, const void *buf, size_t len, int *fds,
			   unsigned nfds, uint32_t seq)
{
	struct registration *reg = NULL;
	struct reg_req req = { 0 };
	char why[KVS_TEXT_MAX] = "";
	int r;

	if (s->hello.role != KVS_ROLE_WORKER) {
		r = -EPERM;
		snprintf(why, sizeof(why), "only worker sessions register memory");
	} else if (s->w.reg || s->waiting) {
		r = -EBUSY;
		snprintf(why, sizeof(why), "memory is already registered: UNREGISTER first");
	} else if ((r = slots_take_fds(&s->sl, nfds, why, sizeof(why))) < 0) {
		/* why set: nothing of the uid's memory is mapped beyond its share */
	} else {
		r = proto_parse_register(buf, len, nfds, s->d->cfg->max_layers, &req, why,
					 sizeof(why));
		if (r == 0) {
			r = build_registration(s, &req, fds, &reg, why, sizeof(why));
			proto_reg_free(&req);
		}
		/* Counted as they came; what the registration keeps stays counted. */
		slots_put_fds(&s->sl, nfds - (r == 0 ? MIN(reg->nr_fds, nfds) : 0));
	}
	if (r == 0) {
		r = instance_register(s->inst, reg->layout->fingerprint, why, sizeof(why));
		if (r < 0) {
			slots_put_fds(&s->sl, reg->nr_fds);
			registration_free(reg);
		} else {
			if (s->hello.device_kind == KVS_DEVICE_HOST)
				s->mapped_host = reg->mapped_bytes;
			session_publish_reg(s, reg);
			slog_info(s,
				  "registered %u layers in %u allocations (%" PRIu64
				  " KiB mapped), %" PRIu64 "-byte blocks, %u blocks%s%s",
				  reg->layout->nr_layers, reg->nr_mems, reg->mapped_bytes >> 10,
				  reg->layout->slot_bytes, reg->layout->num_blocks,
				  reg->layout->replicated ? ", replicated" : "",
				  r == 1 ? "; instance sealed" : "");
			r = 0;
		}
	}
	if (r < 0) {
		/* A client may retry in a loop: its lines are rate-limited. */
		slog_warning_errno_rl(&s->log_rl, s, r, "REGISTER refused: %s", why);
		return reply(s, seq, r, "%s", why) < 0 ? -EPIPE : 0;
	}
	return reply(s, seq, 0, NULL);
}

static int handle_unregister(struct session *s, uint32_t seq)
{
	if (s->hello.role != KVS_ROLE_WORKER)
		return reply(s, seq, -EPERM, "only worker sessions register memory");
	if (!s->w.reg)
		return reply(s, seq, 0, "nothing registered");
	/* Unseal now so no new data operation starts; the worker drains the rest. */
	instance_unregister(s->inst);
	s->waiting = true;
	s->waiting_seq = seq;
	s->waiting_type = KVS_MSG_UNREGISTER;
	session_update_events(s);
	worker_command(s->worker, WCMD_UNREGISTER, &s->w);
	return 0;
}

/* ---- messages ------------------------------------------------------ */

int session_handle_input(struct session *s)
{
	static __thread uint8_t buf[KVS_MSG_MAX];
	int fds[KVS_MAX_FDS];
	unsigned nfds = 0;
	uint32_t type, seq;
	ssize_t n;
	char why[KVS_TEXT_MAX] = "";
	int r;

	n = wireio_recv(s->ev.fd, buf, sizeof(buf), fds, KVS_MAX_FDS, &nfds, MSG_DONTWAIT);
	if (n == -EAGAIN)
		return 0;
	if (n == 0)
		return -ECONNRESET;
	if (n < 0) {
		if (n == -EMSGSIZE) {
			clog_warning(&s->sl, "oversized message or too many fds: closing");
			reply(s, 0, -EMSGSIZE, "message larger than %u bytes or more than %u fds",
			      KVS_MSG_MAX, KVS_MAX_FDS);
			return -EMSGSIZE;
		}
		return (int)n;
	}
	if (s->sl.kind == SLOT_ADMIN)
		slots_touch(&s->sl);
	r = proto_check_header(buf, (size_t)n, &type, &seq);
	if (r < 0) {
		clog_warning(&s->sl, "malformed message header (%zd bytes): closing", n);
		reply(s, 0, r, "malformed message header");
		wireio_close_fds(fds, nfds);
		return r;
	}
	if (s->state == S_NEW && type != KVS_MSG_HELLO) {
		reply(s, seq, -EPROTO, "HELLO first");
		wireio_close_fds(fds, nfds);
		return -EPROTO;
	}
	if (type != KVS_MSG_REGISTER && nfds) {
		clog_warning(&s->sl, "message type %u carries %u unexpected fds: closing", type, nfds);
		reply(s, seq, -EBADF, "unexpected fds");
		wireio_close_fds(fds, nfds);
		return -EBADF;
	}
	switch (type) {
	case KVS_MSG_HELLO:
		r = handle_hello(s, buf, (size_t)n, seq);
		break;
	case KVS_MSG_REGISTER:
		if (s->hello.role == KVS_ROLE_ADMIN)
			goto bad_role;
		r = handle_register(s, buf, (size_t)n, fds, nfds, seq);
		wireio_close_fds(fds, nfds);
		break;
	case KVS_MSG_UNREGISTER:
	case KVS_MSG_GOODBYE:
	case KVS_MSG_STATUS:
	case KVS_MSG_STATS:
		r = proto_parse_empty(buf, (size_t)n, why, sizeof(why));
		if (r < 0) {
			clog_warning(&s->sl, "malformed message type %u: %s", type, why);
			reply(s, seq, r, "%s", why);
			break;
		}
		if (type == KVS_MSG_GOODBYE) {
			/* The client may have closed already: no reply, no noise. */
			r = -ECONNRESET; /* close as on EOF */
		} else if (type == KVS_MSG_UNREGISTER) {
			if (s->hello.role == KVS_ROLE_ADMIN)
				goto bad_role;
			r = handle_unregister(s, seq);
		} else if (s->hello.role != KVS_ROLE_ADMIN) {
			r = reply(s, seq, -EPERM, "status and stats need an admin session");
		} else if (type == KVS_MSG_STATUS) {
			r = admin_send_status(s->d, s, seq);
		} else {
			r = admin_send_stats(s->d, s, seq);
		}
		break;
	default:
		clog_warning(&s->sl, "unknown message type %u: closing", type);
		reply(s, seq, -EBADMSG, "unknown message type %u", type);
		wireio_close_fds(fds, nfds);
		r = -EBADMSG;
	}
	return r;
bad_role:
	reply(s, seq, -EPERM, "not for an admin session");
	wireio_close_fds(fds, nfds); /* a REGISTER's fds: ours to close */
	return -EPERM;
}

/* ---- events --------------------------------------------------------- */

/* The socket's events (control loop). */
static void on_event(struct ev_source *src, uint32_t e)
{
	struct session *s = container_of(src, struct session, ev);
	int r = 0;

	/* Closed by an earlier event of this batch: nothing to read. */
	if (s->state == S_CLOSING)
		return;
	if (e & EPOLLOUT)
		r = session_flush(s);
	if (r == 0 && (e & EPOLLIN))
		r = session_handle_input(s);
	else if (r == 0 && (e & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)))
		r = -ECONNRESET;
	if (r < 0)
		session_close(s, r);
}

/* ---- closing ------------------------------------------------------- */

static void free_memory(struct ev_deferred *dead)
{
	free(container_of(dead, struct session, dead));
}

static void session_free(struct session *s)
{
	struct daemon *d = s->d;

	/* Sessions given to a worker (HELLO answered) were counted in sessions_total. */
	if (s->worker)
		account_session_closed(&d->ctr);
	lease_drop_creator(d->leases, s->id);
	if (s->w.reg) {
		instance_unregister(s->inst);
		registration_free(s->w.reg);
		s->w.reg = NULL;
	}
	registration_free(s->w.retired);
	cluster_session_close(d, s);
	instance_leave(s);
	nspace_put(s->ns);
	/* After the DETACH ack: no copy stream of the worker writes the slots any more. */
	if (s->fences_pinned)
		movers_unpin(s->w.fences);
	shmq_region_destroy(s->region);
	/* A session that ended with completions waiting: their answers go too. */
	for (uint32_t i = 0; s->w.backlog && i < s->w.bl_n; i++)
		free(s->w.backlog[(s->w.bl_head + i) % s->w.bl_cap].ans);
	free(s->w.backlog);
	free(s->out.buf);
	if (s->ev.fd >= 0)
		close(s->ev.fd);
	/* The worker's state: its DETACH ack (or no worker at all) orders this read. */
	log_ratelimit_flush(&s->w.log_rl, s->prefix);
	log_ratelimit_flush(&s->log_rl, s->prefix);
	slots_release(&s->sl);
	cds_list_del(&s->node);
	d->nr_sessions--;
	/* Freed after the event batch: a later event of it may name this session. */
	ev_defer(&d->loop, &s->dead, free_memory);
}

void session_close(struct session *s, int why)
{
	if (s->state == S_CLOSING)
		return;
	if (s->state == S_ACTIVE && s->hello.role != KVS_ROLE_ADMIN) {
		if (why == -ECONNRESET)
			slog_info(s, "disconnected");
		else if (why == -ESHUTDOWN)
			slog_info(s, "closed: kvstashd is shutting down");
		else
			slog_info_errno(s, why, "disconnected after an error");
	}
	s->state = S_CLOSING;
	ev_del(&s->d->loop, &s->ev);
	/*
	 * Shut the socket at once, so the engine sees EOF now even while its
	 * copies drain; the fd itself is closed with the session.
	 */
	shutdown(s->ev.fd, SHUT_RDWR);
	if (s->worker && s->region)
		worker_command(s->worker, WCMD_DETACH, &s->w);
	else
		session_free(s);
}

void session_on_ack(struct session *s, enum wcmd_type type)
{
	switch (type) {
	case WCMD_DETACH:
		session_free(s);
		break;
	case WCMD_UNREGISTER:
		if (s->w.retired)
			slots_put_fds(&s->sl, s->w.retired->nr_fds);
		registration_free(s->w.retired);
		s->w.retired = NULL;
		s->mapped_host = 0;
		if (s->state == S_CLOSING)
			break;
		s->waiting = false;
		slog_info(s, "unregistered");
		if (reply(s, s->waiting_seq, 0, NULL) < 0) {
			session_close(s, -EPIPE);
			break;
		}
		session_update_events(s);
		break;
	case WCMD_BROKEN:
		account_protocol_error(&s->d->ctr);
		session_close(s, -EPROTO);
		break;
	default:
		break;
	}
}
