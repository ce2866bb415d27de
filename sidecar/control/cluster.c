/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <syslog.h>

#include "base/util.h"
#include "cluster/registry.h"
#include "control/cluster.h"
#include "control/daemon.h"
#include "control/instance.h"
#include "control/peer-host.h"
#include "control/session.h"
#include "obs/log.h"
#include "store/store.h"

_Static_assert(REG_DIGEST_SIZE == KVS_KEY_SIZE && REG_KEY_SIZE == KVS_KEY_SIZE,
	       "a namespace tag is a registry digest, a block key a registry key");
_Static_assert(REG_NAME_MAX == KVS_CLUSTER_NAME_MAX && REG_ADDR_MAX == KVS_CLUSTER_ADDR_MAX &&
		       REG_MAX_HOLDERS == KVS_CLUSTER_HOLDERS,
	       "a cluster answer carries the registry's holders as they are");

#define BACKFILL_CHUNK 256u /* store_scan() per round: the store lock is held that long */

/* ---- the store's hooks (any thread, store lock held) ---------------- */

static void on_visible(void *arg, const uint8_t tag[KVS_KEY_SIZE], const uint8_t key[KVS_KEY_SIZE],
		       void *owner)
{
	struct daemon *d = arg;

	/*
	 * Set before the workers start, freed after they stopped (lifecycle.c).
	 * @owner: the tally of the session whose SAVE sealed it (its worker's
	 * save_finish()), or NULL.
	 */
	if (d->reg)
		registry_insert(d->reg, owner, tag, (const uint8_t(*)[REG_KEY_SIZE])key, 1);
}

static void on_gone(void *arg, const uint8_t tag[KVS_KEY_SIZE], const uint8_t key[KVS_KEY_SIZE])
{
	struct daemon *d = arg;

	if (d->reg)
		registry_remove(d->reg, NULL, tag, (const uint8_t(*)[REG_KEY_SIZE])key, 1);
}

void cluster_store_hooks(struct daemon *d, struct store_hooks *ret)
{
	*ret = (struct store_hooks){ .visible = on_visible, .gone = on_gone, .arg = d };
}

/* ---- the registry's callbacks (control thread) ------------------------ */

static uint32_t backfill(void *arg, uint64_t *cursor, struct registry_entry *out, uint32_t max)
{
	struct daemon *d = arg;
	struct store_scan_ent ents[BACKFILL_CHUNK];
	uint32_t n = 0;

	while (n < max) {
		unsigned got = store_scan(d->store, cursor, ents, MIN(max - n, BACKFILL_CHUNK));

		if (got == 0)
			break;
		for (unsigned i = 0; i < got; i++, n++) {
			memcpy(out[n].ns, ents[i].tag, REG_DIGEST_SIZE);
			memcpy(out[n].key, ents[i].key, REG_KEY_SIZE);
		}
	}
	return n;
}

static void reg_log(void *arg, int level, int err, const char *msg)
{
	(void)arg;
	/* One line per state change (registry.h), never with the password. */
	log_full(level, err, NULL, "%s", msg);
}

static void reg_leased(void *arg, uint64_t epoch)
{
	/* Peers compare a registry entry's epoch with the one our service tells them. */
	peer_set_epoch(arg, epoch);
}

static void on_registry(struct ev_source *src, uint32_t events)
{
	struct daemon *d = container_of(src, struct daemon, reg_ev);

	(void)events;
	registry_dispatch(d->reg);
}

/* ---- lifetime ---------------------------------------------------------- */

int cluster_check_config(const struct kvs_config *cfg, char *why, size_t wl)
{
	char host[REG_NAME_MAX];
	struct registry_secrets secrets;
	struct registry_config rc;
	int r;

	why[0] = '\0';
	r = registry_config_from(cfg, &rc, host, sizeof(host), &secrets, why, wl);
	explicit_bzero(&secrets, sizeof(secrets));
	return r < 0 ? r : 0;
}

/* The workers' view of the registry (io/worker.h, struct worker_cluster). */
static int worker_mark(void *arg, struct registry_tally *tally, void **ret_mark)
{
	struct registry_mark m;
	int r = registry_mark(arg, tally, &m);

	if (r == 0)
		*ret_mark = m.m;
	return r;
}

int cluster_init(struct daemon *d)
{
	const struct registry_ops ops = {
		.backfill = backfill, .log = reg_log, .leased = reg_leased, .arg = d
	};
	char host[REG_NAME_MAX], why[256] = "";
	struct registry_secrets secrets;
	struct registry_config rc;
	int r;

	d->reg_ev.fd = -1;
	r = registry_config_from(d->cfg, &rc, host, sizeof(host), &secrets, why, sizeof(why));
	if (r == 1)
		r = registry_new(&rc, &ops, &d->reg, why, sizeof(why));
	explicit_bzero(&secrets, sizeof(secrets));
	if (r < 0)
		return log_error_errno(r, "%s", why[0] ? why : "cannot start the cluster registry");
	if (!d->reg)
		return 0; /* no [cluster]: exactly as without the module */
	d->wcluster = (struct worker_cluster){ .mark = worker_mark, .arg = d->reg };
	d->reg_ev.fd = registry_fd(d->reg);
	d->reg_ev.fn = on_registry;
	r = ev_add(&d->loop, &d->reg_ev, EPOLLIN);
	if (r < 0)
		return log_error_errno(r, "cannot watch the registry");
	if (rc.sentinels && rc.sentinels[0])
		log_info("cluster %s: node %s, registry: the master of %s, from sentinels %s",
			 rc.cluster, rc.node, rc.master_name, rc.sentinels);
	else
		log_info("cluster %s: node %s, registry %s", rc.cluster, rc.node, rc.redis);
	return 0;
}

void cluster_shutdown(struct daemon *d)
{
	if (!d->reg || d->reg_closing)
		return;
	d->reg_closing = true;
	/* Runs the pending ops' callbacks: they go back to their workers now. */
	registry_shutdown(d->reg);
}

bool cluster_closed(const struct daemon *d)
{
	return !d->reg || registry_closed(d->reg);
}

void cluster_fini(struct daemon *d)
{
	if (!d->reg)
		return;
	if (d->reg_ev.fd >= 0)
		ev_del(&d->loop, &d->reg_ev);
	registry_free(d->reg);
	d->reg = NULL;
	d->reg_ev.fd = -1;
}

/* ---- operations -------------------------------------------------------- */

static void flush_cb(void *arg, const struct registry_flush_result *res)
{
	struct op *op = arg;

	/*
	 * The mark's tally's counts since its previous flush: what this
	 * session (or instance, KVS_FLUSH_INSTANCE) registered and dropped,
	 * nobody else's.
	 */
	op->res = res->status;
	op->r0 = res->delivered;
	op->r1 = res->dropped;
	worker_cluster_done(op);
}

static void query_cb(void *arg, const struct registry_query_result *res)
{
	struct op *op = arg;
	struct kvs_cluster_answer *a = op->ans;

	memset(a, 0, sizeof(*a));
	a->status = res->status;
	a->round_trips = res->round_trips;
	if (res->status == 0) {
		a->best = MIN(res->best, op->nckeys);
		a->nr_holders = MIN(res->nr_holders, KVS_CLUSTER_HOLDERS);
	}
	for (uint32_t i = 0; i < a->nr_holders; i++) {
		const struct registry_holder *h = &res->holders[i];

		memcpy(a->holders[i].node, h->node, sizeof(a->holders[i].node));
		memcpy(a->holders[i].addr, h->addr, sizeof(a->holders[i].addr));
		a->holders[i].node[KVS_CLUSTER_NAME_MAX - 1] = '\0';
		a->holders[i].addr[KVS_CLUSTER_ADDR_MAX - 1] = '\0';
		a->holders[i].epoch = h->epoch;
		a->holders[i].blocks = MIN(h->blocks, a->best);
	}
	if (op->flags & KVS_QUERY_FETCH) {
		/*
		 * Fetch from the best holder that says where it serves; it
		 * must still be that node at that epoch (a stale entry of a
		 * restarted node ends at once).
		 */
		const struct kvs_cluster_holder *h = a->nr_holders ? &a->holders[0] : NULL;

		if (h && h->addr[0] && h->blocks) {
			peer_fetch(op->w_daemon, op, h->addr, h->node, h->epoch, h->blocks);
			return;
		}
		op->fetch_err = a->status ? a->status : -ENOENT;
	}
	worker_cluster_done(op);
}

/* A fetching QUERY: from the hinted node, else from the holder the registry names. */
static void fetch_op(struct daemon *d, struct op *op)
{
	int r = -ENOENT;

	op->w_daemon = d;
	if (op->hint[0]) {
		peer_fetch(d, op, op->hint, NULL, 0, op->nckeys - op->hits0);
		return;
	}
	if (d->reg && !d->reg_closing) {
		r = registry_query(d->reg, op->tag,
				   (const uint8_t(*)[REG_KEY_SIZE])(op->ckeys + op->hits0),
				   op->nckeys - op->hits0, 0, query_cb, op);
		if (r == 0)
			return; /* query_cb goes on */
	}
	op->fetch_err = r;
	worker_cluster_done(op);
}

void cluster_on_op(struct daemon *d, struct op *op)
{
	int r = -ESHUTDOWN;

	if (op->opcode == KVS_OP_QUERY && (op->flags & KVS_QUERY_FETCH)) {
		fetch_op(d, op);
		return;
	}

	/*
	 * Every mark completes: at shutdown the registry drops what it still
	 * holds (the marks snap, with those changes dropped), and a mark not
	 * reached completes with -ESHUTDOWN.
	 */
	if (d->reg && op->opcode == KVS_OP_FLUSH) {
		const struct registry_mark m = { op->cmark };

		registry_flush(d->reg, &m, 0, flush_cb, op);
		return;
	}
	if (d->reg && !d->reg_closing) {
		r = registry_query(d->reg, op->tag, (const uint8_t(*)[REG_KEY_SIZE])op->ckeys,
				   op->nckeys, 0, query_cb, op);
		if (r == 0)
			return; /* the callback sends it back */
	}
	/* Not started: done here, with nothing delivered and nothing asked. */
	if (op->opcode == KVS_OP_FLUSH) {
		op->res = r;
		op->r0 = op->r1 = 0;
	} else {
		/* The local hits stand (their lease is made); the cluster part says why not. */
		memset(op->ans, 0, sizeof(*op->ans));
		op->ans->status = r == -ENOMEM ? -ENOTCONN : r;
	}
	worker_cluster_done(op);
}

/* ---- sessions' tallies ------------------------------------------------------ */

int cluster_session_open(struct daemon *d, struct session *s)
{
	struct instance *inst = s->inst;

	/*
	 * Every session, KVS_HELLO_CLUSTER or not: any may FLUSH with
	 * KVS_FLUSH_CLUSTER, and its report is its own (abi.h).
	 */
	if (!d->reg)
		return 0;
	if (!inst->reg_tally) {
		inst->reg_tally = registry_tally_new(d->reg, NULL);
		if (!inst->reg_tally)
			return -ENOMEM;
	}
	s->w.reg_tally = registry_tally_new(d->reg, inst->reg_tally);
	if (!s->w.reg_tally) {
		if (!inst->reg_users) {
			registry_tally_put(d->reg, inst->reg_tally);
			inst->reg_tally = NULL;
		}
		return -ENOMEM;
	}
	s->w.reg_itally = inst->reg_tally;
	inst->reg_users++;
	return 0;
}

void cluster_session_close(struct daemon *d, struct session *s)
{
	struct instance *inst = s->inst;

	if (!s->w.reg_tally)
		return;
	/* After the DETACH ack: its worker makes no change under them any more. */
	registry_tally_put(d->reg, s->w.reg_tally);
	s->w.reg_tally = s->w.reg_itally = NULL;
	if (--inst->reg_users == 0) {
		registry_tally_put(d->reg, inst->reg_tally);
		inst->reg_tally = NULL;
	}
}
