/* SPDX-License-Identifier: MIT */
/*
 * The session: kvs_connect(), kvs_reconnect() and kvs_close().  Owns the
 * HELLO handshake and the checks of its reply, attaching the session
 * region kvstashd sends, and the per-operation tables sized from the
 * reply (alloc_state(), free_state()).  Runs on the application's
 * (engine's) thread that uses the client; the fence watchdog it starts
 * is fence.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/mem.h"
#include "client.h"
#include "common/bits.h"
#include "common/wireio.h"

/*
 * The most bytes a session region of these sizes takes: the header page,
 * then each part's payload with a page for its control block and a page
 * of rounding.  A bound, not libshmq's exact layout, so that it holds for
 * any libshmq that lays the same parts out.  The cluster answer area
 * (wire minor 1) is counted for every session: a daemon may lay it out
 * whether or not it was asked, and a session that did not ask ignores it.
 */
static uint64_t region_bound(uint32_t sq, uint32_t cq, uint64_t arg_bytes)
{
	return SHMQ_PART_ALIGN + (uint64_t)sq * sizeof(struct kvs_sqe) +
	       (uint64_t)cq * sizeof(struct kvs_cqe) + arg_bytes +
	       (uint64_t)cq * sizeof(struct kvs_cluster_answer) + 8ull * SHMQ_PART_ALIGN;
}

/*
 * Every field of a successful HELLO reply, before anything is mapped or
 * allocated from it: the library sizes its own tables by these numbers
 * (max_inflight, sq_entries), so none may be absurd.  session_id, worker
 * and lease_ttl_ms are only reported to the application; the reserved
 * words are for later minors to fill.  0, or -EBADMSG with @why set.
 */
static int check_hello_reply(const struct kvs_msg_hello_reply *rep, const char **why)
{
	if (!is_pow2(rep->sq_entries) || rep->sq_entries < 2 || rep->sq_entries > CLIENT_SQ_MAX)
		*why = "SQ entries not a power of two in [2, 65536]";
	else if (!is_pow2(rep->cq_entries) || rep->cq_entries / 2 < rep->sq_entries ||
		 rep->cq_entries > 2 * CLIENT_SQ_MAX)
		*why = "CQ entries not a power of two of at least twice the SQ's";
	else if (rep->arg_bytes < SHMQ_PART_ALIGN || rep->arg_bytes > CLIENT_ARG_MAX)
		*why = "argument area size outside [4 KiB, 1 GiB]";
	else if (rep->max_inflight == 0 || rep->max_inflight > rep->cq_entries)
		*why = "max_inflight outside [1, CQ entries]";
	else if (rep->max_keys == 0 || rep->max_layers == 0)
		*why = "max_keys or max_layers is 0";
	else if (rep->region_size < SHMQ_PART_ALIGN ||
		 rep->region_size > region_bound(rep->sq_entries, rep->cq_entries, rep->arg_bytes))
		*why = "region size does not fit the rings and the argument and answer areas";
	else
		return 0;
	return -EBADMSG;
}

/* The cluster answer area of a CQ of @cq entries, as libshmq sizes it (a page multiple). */
static uint64_t ans_area_size(uint32_t cq)
{
	uint64_t b = (uint64_t)cq * sizeof(struct kvs_cluster_answer);

	return (b + SHMQ_PART_ALIGN - 1) & ~(uint64_t)(SHMQ_PART_ALIGN - 1);
}

/*
 * Attach the region kvstashd sent and check it is the session the reply
 * describes: its real size (the fd's) is the size the reply names, the
 * rings have the reply's capacities and kvstash's entry sizes, the
 * argument area the reply's size, both rings start empty, and with
 * KVS_CONNECT_CLUSTER the answer area has one answer per CQ entry.  libshmq
 * has checked the seals and every part's bounds against the fd's size.
 */
static int attach_region(struct kvs_client *c, int fd, const struct kvs_msg_hello_reply *rep)
{
	struct shmq_region *region = NULL;
	struct shmq_ring sq, cq;
	const char *why = NULL;
	uint64_t argsz, anssz, fencesz = 0;
	void *args, *ans = NULL, *fences = NULL;
	struct stat st;
	uint32_t idx;
	int r;

	/* Before mapping anything: the fd's size is the size the reply names. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != rep->region_size) {
		client_log(c, KVS_LOG_ERR,
			   "the session region is not a file of the %llu bytes the reply names",
			   (unsigned long long)rep->region_size);
		return -EBADMSG;
	}
	r = shmq_region_attach(fd, KVS_REGION_MAGIC, &region);
	if (r < 0) {
		client_log(c, KVS_LOG_ERR, "cannot attach the session region: %s", strerror(-r));
		/* Ours (memory) or a newer layout say so; every other refusal is a bad region. */
		return r == -ENOMEM || r == -EPROTONOSUPPORT ? r : -EBADMSG;
	}
	if (shmq_region_app_version(region) != KVS_REGION_VERSION) {
		why = "another session region version";
		r = -EPROTONOSUPPORT;
	} else if (shmq_ring_init(&sq, region, KVS_PART_SQ, SHMQ_PRODUCER) < 0 ||
		   shmq_ring_init(&cq, region, KVS_PART_CQ, SHMQ_CONSUMER) < 0 ||
		   shmq_region_area(region, KVS_PART_ARGS, &args, &argsz) < 0) {
		why = "a ring or the argument area is missing";
	} else if (shmq_region_size(region) != rep->region_size ||
		   shmq_ring_capacity(&sq) != rep->sq_entries ||
		   shmq_ring_capacity(&cq) != rep->cq_entries || argsz != rep->arg_bytes) {
		why = "the region's rings or argument area differ from the reply";
	} else if ((uint8_t *)shmq_ring_entry(&sq, 1) - (uint8_t *)shmq_ring_entry(&sq, 0) !=
			   sizeof(struct kvs_sqe) ||
		   (uint8_t *)shmq_ring_entry(&cq, 1) - (uint8_t *)shmq_ring_entry(&cq, 0) !=
			   sizeof(struct kvs_cqe)) {
		/* A smaller entry would make every SQE we write spill into its neighbours. */
		why = "ring entries are not kvstash's SQE and CQE";
	} else if (shmq_prod_inflight(&sq) != 0 || shmq_cons_peek(&cq, 1, &idx) != 0) {
		why = "the rings of a new session are not empty";
	} else if ((c->opts.flags & KVS_CONNECT_CLUSTER) &&
		   (shmq_region_area(region, KVS_PART_CLUSTER, &ans, &anssz) < 0 ||
		    anssz != ans_area_size(rep->cq_entries))) {
		/*
		 * One answer per CQ entry, the page rounding libshmq gives every
		 * area and no more: an answer is read at a CQE's ring index, so
		 * a smaller area would be read past its end.
		 */
		why = "no cluster answer area of one answer per CQ entry";
	} else if ((c->opts.flags & KVS_CONNECT_FENCES) &&
		   (shmq_region_area(region, KVS_PART_FENCES, &fences, &fencesz) < 0 ||
		    fencesz < (uint64_t)KVS_FENCE_SLOTS * sizeof(struct kvs_fence))) {
		why = "no fence area of KVS_FENCE_SLOTS slots";
	}
	if (why) {
		client_log(c, KVS_LOG_ERR, "kvstashd sent a bad session region: %s", why);
		shmq_region_destroy(region);
		return r < 0 ? r : -EBADMSG;
	}
	c->region = region;
	c->sq = sq;
	c->cq = cq;
	c->args = args;
	c->args_size = argsz;
	/* Not asked: an area the daemon laid out anyway is never read. */
	c->ans_part = (c->opts.flags & KVS_CONNECT_CLUSTER) ? ans : NULL;
	if (fences)
		return client_fences_attach(c, fences, fencesz);
	return 0;
}

/* @flag (@what) asked of a kvstashd of wire minor @minor, older than @need. */
static int too_old(struct kvs_client *c, unsigned minor, const char *what, unsigned need,
		   const char *flag)
{
	client_log(c, KVS_LOG_ERR, "kvstashd speaks wire minor %u, %s needs %u: %s refused", minor,
		   what, need, flag);
	return -EOPNOTSUPP;
}

#define no_cluster(c, minor) too_old(c, minor, "the cluster", 1, "KVS_CONNECT_CLUSTER")
#define no_fences(c, minor) too_old(c, minor, "stream ordering", 4, "KVS_CONNECT_FENCES")

static int say_hello(struct kvs_client *c)
{
	bool cluster = c->opts.flags & KVS_CONNECT_CLUSTER;
	bool fences = c->opts.flags & KVS_CONNECT_FENCES;
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	const char *why = NULL;
	int fd = -1;
	ssize_t n;
	int r;

	memset(&h, 0, sizeof(h));
	h.hdr.type = KVS_MSG_HELLO;
	h.hdr.size = sizeof(h);
	h.rev_major = KVS_WIRE_MAJOR;
	h.rev_minor = KVS_WIRE_MINOR;
	h.role = c->opts.role;
	h.tp_rank = c->opts.tp_rank;
	h.tp_size = c->opts.tp_size;
	h.world_size = c->opts.world_size ? c->opts.world_size : c->opts.tp_size;
	h.device_kind = c->opts.device_kind;
	memcpy(h.device_uuid, c->opts.device_uuid, sizeof(h.device_uuid));
	h.sq_entries = c->opts.sq_entries;
	h.cq_entries = c->opts.cq_entries;
	h.arg_bytes = c->opts.arg_bytes;
	h.flags = (cluster ? KVS_HELLO_CLUSTER : 0) | (fences ? KVS_HELLO_FENCES : 0);
	memcpy(h.instance, c->instance, sizeof(h.instance));
	memcpy(h.ns, c->ns, sizeof(h.ns));

	memset(&rep, 0, sizeof(rep));
	n = client_request(c, &h, sizeof(h), NULL, 0, &rep, sizeof(rep), &fd);
	if (n < 0)
		return (int)n;
	/* client_request() saw at least a struct kvs_msg_reply. */
	if (!client_status_plausible(rep.r.status)) {
		why = "a status that is no -errno";
		r = -EBADMSG;
	} else if (rep.r.status < 0) {
		rep.r.text[sizeof(rep.r.text) - 1] = '\0';
		client_log(c, KVS_LOG_ERR, "kvstashd refused the session: %s (%s)",
			   rep.r.text[0] ? rep.r.text : "no reason given",
			   kvs_strerror(rep.r.status));
		r = rep.r.status;
		/* A daemon before minor 1 refuses the flag it does not know. */
		if (r == -EINVAL && cluster && rep.r.rev_major == KVS_WIRE_MAJOR &&
		    rep.r.rev_minor < 1)
			r = no_cluster(c, rep.r.rev_minor);
		else if (r == -EINVAL && fences && rep.r.rev_major == KVS_WIRE_MAJOR &&
			 rep.r.rev_minor < 4)
			r = no_fences(c, rep.r.rev_minor);
	} else if ((size_t)n != sizeof(rep) || rep.r.hdr.size != (size_t)n ||
		   rep.r.hdr.type != KVS_MSG_HELLO_REPLY) {
		why = "not a HELLO reply, or truncated";
		r = -EBADMSG;
	} else if (rep.r.rev_major != KVS_WIRE_MAJOR) {
		why = "another wire revision in a successful reply";
		r = -EPROTONOSUPPORT;
	} else if (cluster && rep.r.rev_minor < 1) {
		/* It ignored the flag: its region has no answer area. */
		r = no_cluster(c, rep.r.rev_minor);
	} else if (fences && rep.r.rev_minor < 4) {
		r = no_fences(c, rep.r.rev_minor);
	} else if (c->opts.role == KVS_ROLE_ADMIN) {
		/* An admin session has no region: a file sent along is not ours to keep. */
		if (fd >= 0) {
			why = "a region for an admin session";
			r = -EBADMSG;
		} else {
			r = 0;
		}
	} else if (fd < 0) {
		why = "no session region";
		r = -EBADMSG;
	} else {
		r = check_hello_reply(&rep, &why);
	}
	if (r == 0 && c->opts.role != KVS_ROLE_ADMIN)
		r = attach_region(c, fd, &rep);
	if (fd >= 0)
		close(fd); /* the region holds its own duplicate */
	if (r < 0) {
		if (why)
			client_log(c, KVS_LOG_ERR, "malformed HELLO reply from kvstashd: %s", why);
		return r;
	}
	c->info = (struct kvs_session_info){
		.session_id = rep.session_id,
		.sq_entries = rep.sq_entries,
		.cq_entries = rep.cq_entries,
		.arg_bytes = rep.arg_bytes,
		.max_keys = rep.max_keys,
		.max_inflight = rep.max_inflight,
		.max_layers = rep.max_layers,
		.lease_ttl_ms = rep.lease_ttl_ms,
		.daemon_rev_major = rep.r.rev_major,
		.daemon_rev_minor = rep.r.rev_minor,
	};
	return 0;
}

/* The per-operation tables alloc_state() sizes from the daemon's HELLO reply. */
static void free_state(struct kvs_client *c)
{
	c->pend = mfree(c->pend);
	c->pend_free = mfree(c->pend_free);
	c->lq = mfree(c->lq);
	c->arg_end = mfree(c->arg_end);
	c->resv = mfree(c->resv);
	c->dead_sqes = mfree(c->dead_sqes);
	c->ans = mfree(c->ans);
	c->ans_free = mfree(c->ans_free);
	c->ans_cap = c->ans_nfree = 0;
}

static int alloc_state(struct kvs_client *c)
{
	uint32_t cap = c->info.max_inflight ? c->info.max_inflight : 1;

	free_state(c);
	c->pend_cap = cap;
	c->pend = calloc(cap, sizeof(*c->pend));
	c->pend_free = calloc(cap, sizeof(*c->pend_free));
	c->lq_cap = cap + 1;
	c->lq = calloc(c->lq_cap, sizeof(*c->lq));
	c->arg_end = calloc(c->info.sq_entries ? c->info.sq_entries : 1, sizeof(*c->arg_end));
	c->resv = calloc(c->info.sq_entries ? c->info.sq_entries : 1, sizeof(*c->resv));
	c->dead_sqes = calloc(c->info.sq_entries ? c->info.sq_entries : 1, sizeof(struct kvs_sqe));
	if (c->opts.flags & KVS_CONNECT_CLUSTER) {
		/* Every operation slot's completion kept, and the CQE looked at (client.h). */
		c->ans_cap = cap + 2;
		c->ans = calloc(c->ans_cap, sizeof(*c->ans));
		c->ans_free = calloc(c->ans_cap, sizeof(*c->ans_free));
		if (!c->ans || !c->ans_free)
			return -ENOMEM;
		for (uint32_t i = 0; i < c->ans_cap; i++)
			c->ans_free[i] = i;
		c->ans_nfree = c->ans_cap;
	}
	if (!c->pend || !c->pend_free || !c->lq || !c->arg_end || !c->resv ||
	    !c->dead_sqes)
		return -ENOMEM;
	for (uint32_t i = 0; i < cap; i++)
		c->pend_free[i] = cap - 1 - i;
	c->pend_nfree = cap;
	c->lq_head = c->lq_n = 0;
	c->arg_head = c->arg_tail = 0;
	c->sq_tail = c->sq_freed = 0;
	c->sq_reserved = 0;
	c->cur = NULL;
	c->cur_ans = ANS_NONE;
	return 0;
}

static int open_socket(struct kvs_client *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	memcpy(sa.sun_path, c->path, sizeof(c->path));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;

		close(fd);
		client_log(c, KVS_LOG_ERR, "cannot connect to %s: %s", c->path, strerror(-err));
		return err;
	}
	c->fd = fd;
	c->dead = false;
	return 0;
}

/* The socket and the session region go (a failed start, kvs_reconnect()). */
static void drop_session(struct kvs_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	/* Streams may still wait on its fence slots (released): those stay mapped. */
	if (!client_fences_retire(c, c->region))
		shmq_region_destroy(c->region);
	c->region = NULL;
	c->ans_part = NULL;
}

static int start_session(struct kvs_client *c)
{
	int r = open_socket(c);

	if (r < 0)
		return r;
	r = say_hello(c);
	if (r == 0)
		r = alloc_state(c);
	if (r < 0) {
		drop_session(c);
		c->dead = true;
	}
	return r;
}

int kvs_connect(const char *path, const struct kvs_connect_opts *opts,
		struct kvs_client **ret_client)
{
	struct kvs_client *c;
	int r;

	/*
	 * Unknown flags, the cluster for a session with no region (admin),
	 * fences for one with neither SAVE nor LOAD.
	 */
	if (!opts || !ret_client || (opts->flags & ~(KVS_CONNECT_CLUSTER | KVS_CONNECT_FENCES)) ||
	    ((opts->flags & KVS_CONNECT_CLUSTER) && opts->role == KVS_ROLE_ADMIN) ||
	    ((opts->flags & KVS_CONNECT_FENCES) && opts->role != KVS_ROLE_WORKER))
		return -EINVAL;
	if (!path || !*path)
		path = getenv("KVSTASH_SOCKET");
	if (!path || !*path)
		path = KVS_DEFAULT_SOCKET; /* unset and empty mean the same */
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = -1;
	c->cur_ans = ANS_NONE;
	c->opts = *opts;
	if (c->opts.timeout_ms <= 0)
		c->opts.timeout_ms = 5000;
	if (strlen(path) >= sizeof(c->path) ||
	    (opts->role != KVS_ROLE_ADMIN &&
	     (!opts->instance || !opts->ns || strlen(opts->instance) >= sizeof(c->instance) ||
	      strlen(opts->ns) >= sizeof(c->ns)))) {
		client_log(c, KVS_LOG_ERR, "socket path, instance and namespace are required and bounded");
		free(c);
		return -EINVAL;
	}
	snprintf(c->path, sizeof(c->path), "%s", path);
	if (opts->instance)
		snprintf(c->instance, sizeof(c->instance), "%s", opts->instance);
	if (opts->ns)
		snprintf(c->ns, sizeof(c->ns), "%s", opts->ns);
	c->opts.instance = c->instance;
	c->opts.ns = c->ns;
	r = (opts->flags & KVS_CONNECT_FENCES) ? client_fences_new(c) : 0;
	if (r == 0)
		r = start_session(c);
	if (r < 0) {
		kvs_close(c);
		return r;
	}
	*ret_client = c;
	return 0;
}

int kvs_reconnect(struct kvs_client *c)
{
	struct kvs_cluster_answer *keep_ans = NULL;
	struct local_cqe *keep = NULL;
	uint32_t nkeep = 0;
	int r;

	/* Everything pending of the old session completes with -ECONNRESET. */
	client_mark_dead(c);
	if (c->cur)
		return -EBUSY; /* a CQE is being looked at: kvs_cqe_seen() it first */
	if (c->lq_n) {
		keep = malloc(c->lq_n * sizeof(*keep));
		keep_ans = c->ans ? malloc(c->lq_n * sizeof(*keep_ans)) : NULL;
		if (!keep || (c->ans && !keep_ans)) {
			free(keep);
			free(keep_ans);
			return -ENOMEM;
		}
		while (c->lq_n) {
			struct local_cqe *l = &c->lq[c->lq_head];

			/* The answer pool is made anew with the session: copy, give back. */
			if (l->ans != ANS_NONE) {
				keep_ans[nkeep] = c->ans[l->ans];
				client_ans_put(c, l->ans);
			}
			keep[nkeep++] = *l;
			c->lq_head = (c->lq_head + 1) % c->lq_cap;
			c->lq_n--;
		}
	}
	drop_session(c);
	r = start_session(c);
	if (r == 0 && c->registered)
		r = client_send_registration(c);
	for (uint32_t i = 0; i < nkeep && c->lq; i++) {
		/* Old completions keep no slot: their tags cannot match anything new. */
		keep[i].tag = UINT64_MAX;
		if (c->lq_n >= c->lq_cap)
			continue;
		if (keep[i].ans != ANS_NONE) {
			keep[i].ans = c->ans ? client_ans_get(c) : ANS_NONE;
			if (keep[i].ans != ANS_NONE)
				c->ans[keep[i].ans] = keep_ans[i];
			else /* out of memory (alloc_state()): no answer */
				keep[i].cqe.flags &= ~KVS_CQE_CLUSTER;
		}
		client_defer(c, &keep[i]);
	}
	free(keep);
	free(keep_ans);
	return r;
}

void kvs_close(struct kvs_client *c)
{
	if (!c)
		return;
	if (c->fd >= 0 && !c->dead) {
		struct kvs_msg_hdr bye = { .type = KVS_MSG_GOODBYE, .size = sizeof(bye) };

		/* Best effort: kvstashd cleans up on EOF all the same. */
		wireio_send(c->fd, &bye, sizeof(bye), NULL, 0, MSG_DONTWAIT);
	}
	/* Before the region: it releases what is armed in its slots. */
	client_fences_free(c);
	if (c->fd >= 0)
		close(c->fd);
	shmq_region_destroy(c->region);
	client_free_registration(c);
	free_state(c);
	free(c);
}
