/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/mem.h"
#include "client.h"
#include "common/bits.h"
#include "common/wireio.h"

/* Busy-poll the CQ this long before sleeping on it: kvs_connect_opts.wait_spin_us, or this. */
#define SPIN_NS 50000

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void client_log(struct kvs_client *c, int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!c->opts.log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->opts.log(c->opts.log_arg, level, msg);
}

const char *kvs_version(void)
{
	return KVSTASH_VERSION;
}

const char *kvs_strerror(int err)
{
	if (err == INT_MIN)
		return "Unknown error"; /* -INT_MIN does not exist */
	err = err < 0 ? -err : err;
	switch (err) {
	case KVS_EUNSEALED:
		return "instance not sealed: memory not registered or ranks missing";
	case ECONNRESET:
		return "kvstashd went away";
	case EPROTONOSUPPORT:
		return "kvstashd speaks another wire revision";
	case EXDEV:
		return "layout differs from the instance's or namespace's";
	case ENOTUNIQ:
		return "layer views overlap";
	default:
		return strerror(err);
	}
}

void kvs_connect_opts_init(struct kvs_connect_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->role = KVS_ROLE_WORKER;
	o->tp_size = 1;
	o->world_size = 0; /* tp_size */
	o->device_kind = KVS_DEVICE_HOST;
	o->timeout_ms = 5000;
}

/* ---- socket -------------------------------------------------------- */

ssize_t client_request(struct kvs_client *c, void *msg, size_t len, const int *fds, unsigned nfds,
		       void *reply, size_t cap, int *ret_fd)
{
	struct kvs_msg_hdr *h = msg;
	uint64_t deadline = mono_ns() + (uint64_t)c->opts.timeout_ms * 1000000ull;
	int rfds[KVS_MAX_FDS];
	unsigned nr = 0;
	ssize_t n;
	int r;

	if (c->dead)
		return -ECONNRESET;
	h->seq = ++c->seq;
	r = wireio_send(c->fd, msg, len, fds, nfds, 0);
	if (r < 0) {
		if (r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN)
			client_mark_dead(c);
		return r == -EPIPE || r == -ENOTCONN ? -ECONNRESET : r;
	}
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int64_t left = (int64_t)(deadline - mono_ns());

		if (left <= 0)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)(left / 1000000 + 1));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
		n = wireio_recv(c->fd, reply, cap, rfds, KVS_MAX_FDS, &nr, 0);
		if (n == 0 || n == -ECONNRESET) {
			client_mark_dead(c);
			return -ECONNRESET;
		}
		if (n < 0)
			return n;
		if ((size_t)n < sizeof(struct kvs_msg_reply) ||
		    ((struct kvs_msg_hdr *)reply)->seq != h->seq) {
			wireio_close_fds(rfds, nr);
			if ((size_t)n >= sizeof(struct kvs_msg_hdr) &&
			    ((struct kvs_msg_hdr *)reply)->seq < h->seq)
				continue; /* a late reply to an earlier, timed-out request */
			return -EBADMSG;
		}
		if (ret_fd && nr == 1) {
			*ret_fd = rfds[0];
		} else {
			wireio_close_fds(rfds, nr);
		}
		return n;
	}
}

static bool status_plausible(int32_t status)
{
	return status <= 0 && status >= -CLIENT_ERRNO_MAX;
}

int client_reply_status(struct kvs_client *c, const struct kvs_msg_reply *rep, size_t n,
			const char *what)
{
	if (n != sizeof(*rep) || rep->hdr.size != n || rep->hdr.type != KVS_MSG_REPLY ||
	    !status_plausible(rep->status)) {
		client_log(
			c, KVS_LOG_ERR,
			"kvstashd answered %s with a malformed reply (type %u, %zu bytes, status %d)",
			what, rep->hdr.type, n, rep->status);
		return -EBADMSG;
	}
	return rep->status;
}

/* ---- completions --------------------------------------------------- */

/*
 * Does @tag name an operation that was submitted and has not completed?
 * Only such an operation may complete: an SQE still being prepared has a
 * tag in shared memory already, and completing it would free its slot
 * twice (once here, once when its prep fails or it is submitted).
 */
static bool tag_valid(struct kvs_client *c, uint64_t tag)
{
	uint32_t slot = (uint32_t)tag;

	return slot < c->pend_cap && c->pend[slot].state == PEND_SUBMITTED &&
	       c->pend[slot].gen == (uint32_t)(tag >> 32);
}

static void pend_put(struct kvs_client *c, uint32_t slot)
{
	c->pend[slot].state = PEND_FREE;
	c->pend[slot].gen++;
	c->pend_free[c->pend_nfree++] = slot;
}

uint64_t client_last_tag(const struct kvs_client *c)
{
	uint32_t slot = c->resv[c->sq_reserved - 1].slot;

	return ((uint64_t)c->pend[slot].gen << 32) | slot;
}

/*
 * Could kvstashd have sent @e for operation @p?  res is -errno or, for the
 * operations that count, at most their count (an engine indexes its block
 * arrays with it); a SAVE's stored and skipped blocks add up to at most
 * its count (abi.h).
 */
static bool cqe_plausible(const struct pending *p, const struct kvs_cqe *e)
{
	if (e->res < -CLIENT_ERRNO_MAX)
		return false;
	switch (p->opcode) {
	case KVS_OP_SAVE:
		return (e->res < 0 || (uint32_t)e->res <= p->count) && e->result0 <= p->count &&
		       e->result1 <= p->count - e->result0;
	case KVS_OP_QUERY:
		if (e->res < 0)
			return true;
		/* Hits still being read from SSD are some of the hits (abi.h, KVS_CQE_PENDING). */
		return (uint32_t)e->res <= p->count &&
		       KVS_CQE_PENDING(e->flags) <= (uint32_t)e->res;
	case KVS_OP_LOAD:
		return e->res < 0 || (uint32_t)e->res <= p->count;
	default:
		return e->res <= 0;
	}
}

/*
 * Could kvstashd have sent @a as the answer of a cluster QUERY of @keys
 * keys with @hits local hits (abi.h, struct kvs_cluster_answer)?  @a is
 * the library's copy.  NULL, or what is wrong with it.  An engine indexes
 * its key and block arrays with best and the holders' blocks, and prints
 * their names: every count is bounded by the keys the answer covers and
 * every string ends inside its array.
 */
static const char *answer_wrong(const struct kvs_cluster_answer *a, uint32_t keys, uint32_t hits)
{
	switch (a->status) {
	case 0:
		break;
	case -ENOTCONN:
	case -ETIMEDOUT:
	case -ESHUTDOWN:
	case -EPROTO:
		/* Local hits only: a partial run would have come with status 0. */
		if (a->best || a->nr_holders)
			return "holders with a failure status";
		break;
	default:
		return "a status that is none of 0, -ENOTCONN, -ETIMEDOUT, -ESHUTDOWN, -EPROTO";
	}
	if (a->nr_holders > KVS_CLUSTER_HOLDERS)
		return "more holders than KVS_CLUSTER_HOLDERS";
	if (a->best > keys - hits)
		return "a best run longer than the keys after the local hits";
	if ((a->best > 0) != (a->nr_holders > 0))
		return "a best run without holders, or holders without one";
	if (a->resv[0] || a->resv[1])
		return "reserved words set";
	/* Bounded by the array too: checked above, but no loop here trusts a count. */
	for (uint32_t i = 0; i < a->nr_holders && i < KVS_CLUSTER_HOLDERS; i++) {
		const struct kvs_cluster_holder *h = &a->holders[i];

		if (h->blocks == 0 || h->blocks > a->best)
			return "a holder's blocks outside [1, best]";
		if (i == 0 ? h->blocks != a->best : h->blocks > a->holders[i - 1].blocks)
			return "holders not by blocks descending from best";
		if (!memchr(h->node, '\0', sizeof(h->node)) ||
		    !memchr(h->addr, '\0', sizeof(h->addr)))
			return "a holder's node name or address without its NUL";
		if (h->resv0)
			return "a holder's reserved word set";
	}
	return NULL;
}

/*
 * Is @e's cluster part what operation @p may carry?  @ans is the copy of
 * the answer at @e's ring index, NULL when the session has no answer part.
 * NULL, or what is wrong.
 */
static const char *cluster_wrong(const struct pending *p, const struct kvs_cqe *e,
				 const struct kvs_cluster_answer *ans)
{
	if (!(e->flags & KVS_CQE_CLUSTER)) {
		/* A failed cluster QUERY has no answer; a successful one always has. */
		return p->cluster && e->res >= 0 ? "a cluster QUERY's completion without its answer"
						 : NULL;
	}
	if (!p->cluster || !ans)
		return "a cluster answer on an operation that asked for none";
	if (e->res < 0)
		return "a cluster answer on a failed QUERY";
	return answer_wrong(ans, p->count, (uint32_t)e->res);
}

static uint32_t ans_get(struct kvs_client *c)
{
	return c->ans_nfree ? c->ans_free[--c->ans_nfree] : ANS_NONE;
}

void client_ans_put(struct kvs_client *c, uint32_t ans)
{
	if (ans != ANS_NONE)
		c->ans_free[c->ans_nfree++] = ans;
}

/*
 * Complete the operation @e names (tag checked) into @ret from @e, a
 * private copy, and @ans, the private copy of its cluster answer (NULL
 * when the session has none): the caller's user_data back in,
 * KVS_CQE_LOCAL ours alone, and a result no operation could have given
 * replaced by -EBADMSG, with no cluster answer.
 */
static void complete_from(struct kvs_client *c, const struct kvs_cqe *e,
			  const struct kvs_cluster_answer *ans, struct local_cqe *ret)
{
	uint32_t slot = (uint32_t)e->user_data;
	const struct pending *p = &c->pend[slot];
	const char *why = NULL;
	bool bad = false;

	ret->cqe = *e;
	ret->tag = e->user_data;
	ret->ans = ANS_NONE;
	ret->cqe.user_data = p->user_data;
	ret->cqe.flags &= ~KVS_CQE_LOCAL; /* the library's mark: kvstashd cannot set it */
	if (!cqe_plausible(p, e)) {
		client_log(
			c, KVS_LOG_ERR,
			"kvstashd completed opcode %u of %u keys with res %d (results %llu, %llu): "
			"reported as -EBADMSG",
			p->opcode, p->count, e->res, (unsigned long long)e->result0,
			(unsigned long long)e->result1);
		bad = true;
	} else if ((why = cluster_wrong(p, e, ans))) {
		client_log(c, KVS_LOG_ERR,
			   "kvstashd completed opcode %u of %u keys (res %d) with %s: reported as "
			   "-EBADMSG",
			   p->opcode, p->count, e->res, why);
		bad = true;
	} else if (e->flags & KVS_CQE_CLUSTER) {
		ret->ans = ans_get(c);
		if (ret->ans == ANS_NONE) {
			/* Cannot happen (ans_cap, client.h); a wrong answer is worse than none. */
			client_log(c, KVS_LOG_ERR,
				   "no room for a cluster answer: reported as -EBADMSG");
			bad = true;
		} else {
			struct kvs_cluster_answer *a = &c->ans[ret->ans];

			*a = *ans;
			/* Past nr_holders: nothing the application should read. */
			memset(&a->holders[a->nr_holders], 0,
			       (KVS_CLUSTER_HOLDERS - a->nr_holders) * sizeof(a->holders[0]));
		}
	}
	if (bad) {
		ret->cqe.res = -EBADMSG;
		/* No answer, and no hits still being read: there are none. */
		ret->cqe.flags &= ~(KVS_CQE_CLUSTER | KVS_CQE_PENDING_MAX << KVS_CQE_PENDING_SHIFT);
		ret->cqe.flags |= KVS_CQE_LOCAL;
		ret->cqe.result0 = ret->cqe.result1 = 0;
	}
	client_fence_end(c, p->fence, ret->cqe.res);
	pend_put(c, slot);
}

/*
 * Take the oldest completion of the ring into @ret.  0; -EAGAIN when the
 * ring holds none for a submitted operation; -EPROTO when kvstashd wrote
 * an impossible tail (the caller ends the session).
 *
 * Each entry is copied once and only the copy is looked at: kvstashd may
 * rewrite the entry at any moment, so a check of the shared entry would
 * say nothing about what is read after it.  The copy is made before
 * shmq_cons_release()'s store-release of the head (C2 in shmq/ring.c,
 * paired with the load-acquire P2 that kvstashd's shmq_prod_reserve()
 * does before it refills the slot), so an honest daemon never writes the
 * entry while we copy it, and nothing after the release reads it again.
 * The cluster answer at the same ring index is copied likewise, before
 * the same release: kvstashd writes it before it publishes the CQE (the
 * tail's store-release P1, paired with shmq_cons_peek()'s load-acquire
 * C1) and may rewrite it for the next lap's CQE once the head passes it.
 * CQEs that match no submitted operation are dropped; at most one ring's
 * worth per call, so a daemon that writes them as fast as they are
 * dropped cannot hold the caller here.
 */
static int ring_take(struct kvs_client *c, struct local_cqe *ret)
{
	for (uint32_t i = 0; i < shmq_ring_capacity(&c->cq); i++) {
		struct kvs_cluster_answer ans;
		bool has_ans = false;
		struct kvs_cqe e;
		uint32_t idx;
		int n = shmq_cons_peek(&c->cq, 1, &idx);

		if (n <= 0)
			return n == 0 ? -EAGAIN : n;
		memcpy(&e, shmq_ring_entry(&c->cq, idx), sizeof(e));
		if ((e.flags & KVS_CQE_CLUSTER) && c->ans_part) {
			memcpy(&ans, &c->ans_part[idx & (shmq_ring_capacity(&c->cq) - 1)],
			       sizeof(ans));
			has_ans = true;
		}
		shmq_cons_release(&c->cq, 1);
		if (!tag_valid(c, e.user_data)) {
			client_log(c, KVS_LOG_ERR, "completion for an unknown operation: ignored");
			continue;
		}
		if (c->pend[(uint32_t)e.user_data].swallow) {
			pend_put(c, (uint32_t)e.user_data); /* a NOP of ours (prep_fail()) */
			continue;
		}
		complete_from(c, &e, has_ans ? &ans : NULL, ret);
		return 0;
	}
	return -EAGAIN;
}

void client_defer(struct kvs_client *c, const struct local_cqe *l)
{
	/*
	 * Never overflows: kvs_get_sqe() keeps pending operations plus kept
	 * completions at most pend_cap, and lq holds pend_cap + 1.
	 */
	c->lq[(c->lq_head + c->lq_n) % c->lq_cap] = *l;
	c->lq_n++;
}

/* Complete operation @slot locally with -ECONNRESET: kvstashd is gone. */
static void complete_reset(struct kvs_client *c, uint32_t slot)
{
	struct local_cqe l = { { 0 } };

	if (c->pend[slot].swallow) {
		pend_put(c, slot); /* nobody waits for it (prep_fail()) */
		return;
	}
	l.cqe.user_data = c->pend[slot].user_data;
	l.cqe.res = -ECONNRESET;
	l.cqe.flags = KVS_CQE_LOCAL;
	l.tag = ((uint64_t)c->pend[slot].gen << 32) | slot;
	l.ans = ANS_NONE;
	client_fence_end(c, c->pend[slot].fence, -ECONNRESET);
	pend_put(c, slot);
	client_defer(c, &l);
}

/* Take every completion in the ring into the local queue (death). */
static void drain_ring(struct kvs_client *c)
{
	struct local_cqe l;

	/*
	 * No region yet (kvstashd hung up on the HELLO, e.g. with every
	 * handshake slot taken): no ring to drain; c->cq is not attached.
	 * What ring_take() leaves (a corrupt tail, more junk than a ring's
	 * worth) completes with -ECONNRESET below.
	 */
	if (!c->region)
		return;
	while (ring_take(c, &l) == 0)
		client_defer(c, &l);
}

void client_mark_dead(struct kvs_client *c)
{
	if (c->dead)
		return;
	c->dead = true;
	client_log(c, KVS_LOG_WARNING, "kvstashd went away: completing %u pending operations",
		   c->pend_cap - c->pend_nfree);
	drain_ring(c);
	for (uint32_t i = 0; i < c->pend_cap; i++) {
		/* A submitted SQE only: one still being prepared is cancelled by its owner. */
		if (c->pend[i].state == PEND_SUBMITTED)
			complete_reset(c, i);
	}
}

/* Is kvstashd still there?  It never writes unasked, so readable = EOF. */
static bool peer_alive(struct kvs_client *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN | POLLRDHUP };

	if (c->dead)
		return false;
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR))) {
		client_mark_dead(c);
		return false;
	}
	return true;
}

int client_reap(struct kvs_client *c, struct local_cqe *ret)
{
	int r;

	if (c->lq_n) {
		*ret = c->lq[c->lq_head];
		c->lq_head = (c->lq_head + 1) % c->lq_cap;
		c->lq_n--;
		return 0;
	}
	if (c->dead)
		return -EAGAIN;
	r = ring_take(c, ret);
	if (r == -EPROTO) {
		client_log(c, KVS_LOG_ERR, "completion ring corrupt: dropping the session");
		client_mark_dead(c);
		return client_reap(c, ret);
	}
	return r;
}

int client_wait(struct kvs_client *c, int64_t timeout_ns)
{
	int64_t spin_ns = c->opts.wait_spin_us ? (int64_t)c->opts.wait_spin_us * 1000 : SPIN_NS;
	struct shmq_spin spin = { spin_ns, (int64_t)KVS_DEATH_POLL_MS * 1000000 };
	int64_t poll_ns = (int64_t)KVS_DEATH_POLL_MS * 1000000;
	/* Return at least every KVS_DEATH_POLL_MS to look at the socket. */
	int64_t slice = timeout_ns < poll_ns ? timeout_ns : poll_ns;
	int r;

	if (c->dead || c->lq_n)
		return 0;
	r = shmq_cons_wait_adaptive(&c->cq, &spin, slice);
	if (r == -EPROTO) {
		client_mark_dead(c);
		return 0;
	}
	if (r == -ETIMEDOUT)
		peer_alive(c);
	return r < 0 && r != -EINTR ? r : 0;
}

int kvs_peek_cqe(struct kvs_client *c, struct kvs_cqe **ret_cqe)
{
	struct local_cqe l;
	int r;

	if (c->cur) {
		*ret_cqe = c->cur;
		return 0;
	}
	if (c->lq_n) {
		c->cur = &c->lq[c->lq_head].cqe;
		c->cur_local = true;
		c->cur_ans = c->lq[c->lq_head].ans;
		*ret_cqe = c->cur;
		return 0;
	}
	if (c->dead)
		return -EAGAIN;
	r = ring_take(c, &l);
	if (r == -EPROTO) {
		client_log(c, KVS_LOG_ERR, "completion ring corrupt: dropping the session");
		client_mark_dead(c);
		return kvs_peek_cqe(c, ret_cqe);
	}
	if (r < 0)
		return r;
	/*
	 * Hand out the library's copy, never the ring entry: kvstashd could
	 * rewrite that while the application reads it (or after the tag was
	 * checked).  The copy stays until kvs_cqe_seen().
	 */
	c->cur_cqe = l.cqe;
	c->cur = &c->cur_cqe;
	c->cur_local = false;
	c->cur_ans = l.ans;
	*ret_cqe = c->cur;
	return 0;
}

void kvs_cqe_seen(struct kvs_client *c, struct kvs_cqe *cqe)
{
	if (!c->cur || cqe != c->cur)
		return;
	if (c->cur_local) {
		c->lq_head = (c->lq_head + 1) % c->lq_cap;
		c->lq_n--;
	}
	/* A ring CQE was released when it was copied (ring_take()); its answer goes now. */
	client_ans_put(c, c->cur_ans);
	c->cur_ans = ANS_NONE;
	c->cur = NULL;
}

int kvs_cqe_cluster(struct kvs_client *c, const struct kvs_cqe *cqe,
		    struct kvs_cluster_answer *ret_answer)
{
	if (!c || !cqe || !ret_answer || cqe != c->cur)
		return -EINVAL;
	if (c->cur_ans == ANS_NONE)
		return -ENOENT;
	*ret_answer = c->ans[c->cur_ans];
	return 0;
}

int kvs_wait_cqe(struct kvs_client *c, struct kvs_cqe **ret_cqe, int timeout_ms)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : mono_ns() + (uint64_t)timeout_ms * 1000000;

	for (;;) {
		int r = kvs_peek_cqe(c, ret_cqe);
		uint64_t now;

		if (r != -EAGAIN)
			return r;
		if (c->dead && c->lq_n == 0)
			return -ECONNRESET; /* nothing pending can ever complete */
		now = mono_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		r = client_wait(c, deadline - now > (uint64_t)INT64_MAX ? INT64_MAX :
							      (int64_t)(deadline - now));
		if (r < 0 && r != -ETIMEDOUT)
			return r;
	}
}

unsigned kvs_pending(const struct kvs_client *c)
{
	return c->pend_cap - c->pend_nfree + c->lq_n;
}

int kvs_connected(struct kvs_client *c)
{
	return peer_alive(c) ? 1 : 0;
}

int kvs_session_info(const struct kvs_client *c, struct kvs_session_info *ret)
{
	*ret = c->info;
	return 0;
}

/* ---- submission ---------------------------------------------------- */

struct kvs_sqe *kvs_get_sqe(struct kvs_client *c)
{
	struct kvs_sqe *sqe;
	uint32_t idx, slot;

	/*
	 * Completions the library keeps (lq) have given their slot back but
	 * not yet reached the application: they count as pending, so lq can
	 * never hold more than pend_cap (kvstashd's death completes them all).
	 */
	if (c->pend_nfree <= c->lq_n)
		return NULL;
	if (c->dead) {
		if (c->sq_reserved == c->info.sq_entries)
			return NULL;
		sqe = &c->dead_sqes[c->sq_reserved];
	} else {
		if (shmq_prod_reserve(&c->sq, 1, &idx) != 1)
			return NULL; /* full (or a corrupt head: found at the next wait) */
		sqe = shmq_ring_entry(&c->sq, idx);
	}
	slot = c->pend_free[--c->pend_nfree];
	c->pend[slot].state = PEND_RESERVED;
	c->pend[slot].user_data = 0;
	c->pend[slot].count = 0;
	c->pend[slot].cluster = false;
	c->pend[slot].swallow = false;
	c->pend[slot].fence = -1;
	c->resv[c->sq_reserved++] = (struct client_resv){ .sqe = sqe, .slot = slot };
	memset(sqe, 0, sizeof(*sqe));
	sqe->user_data = ((uint64_t)c->pend[slot].gen << 32) | slot;
	return sqe;
}

/*
 * Which SQE handed out is @sqe: the newest first (one prep right after
 * each get is the common case), but any order works, as with liburing's
 * get-several-then-prep.  NULL: not one of ours, or given back.
 */
static struct client_resv *resv_of(struct kvs_client *c, const struct kvs_sqe *sqe)
{
	for (uint32_t k = c->sq_reserved; k-- > 0;)
		if (c->resv[k].sqe == sqe)
			return c->pend[c->resv[k].slot].swallow ? NULL : &c->resv[k];
	return NULL;
}

/* Give the newest SQE back to the ring. */
static void cancel_newest(struct kvs_client *c)
{
	pend_put(c, c->resv[--c->sq_reserved].slot);
	if (!c->dead)
		shmq_prod_cancel(&c->sq, 1);
}

/*
 * A prep of @sqe failed with @err: the SQE is the library's again.  The
 * newest goes back to the ring (and any given back before it that are
 * the newest then); one with SQEs handed out after it cannot, so it goes
 * as a NOP whose completion the library takes (ring_take()).
 */
static int prep_fail(struct kvs_client *c, struct kvs_sqe *sqe, int err)
{
	struct client_resv *r = resv_of(c, sqe);
	struct pending *p;

	if (!r)
		return err;
	if (r == &c->resv[c->sq_reserved - 1]) {
		cancel_newest(c);
		while (c->sq_reserved && c->pend[c->resv[c->sq_reserved - 1].slot].swallow)
			cancel_newest(c);
		return err;
	}
	p = &c->pend[r->slot];
	p->swallow = true;
	p->fence = -1; /* a fence it armed was ended by the prep that failed */
	p->opcode = KVS_OP_NOP;
	p->count = 0;
	r->args = false;
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = KVS_OP_NOP;
	sqe->user_data = ((uint64_t)p->gen << 32) | r->slot;
	return err;
}

/* The pending operation of an SQE prepared just now (prep() succeeded). */
static struct pending *pend_of(struct kvs_client *c, const struct kvs_sqe *sqe)
{
	return &c->pend[resv_of(c, sqe)->slot];
}

/* Reclaim arguments of SQEs kvstashd has consumed (their head passed them). */
static void reclaim_args(struct kvs_client *c)
{
	int inflight = shmq_prod_inflight(&c->sq);
	uint32_t head;

	if (inflight < 0)
		return;
	head = c->sq_tail - (uint32_t)inflight;
	if (head != c->sq_freed) {
		c->arg_head = c->arg_end[(head - 1) & (c->info.sq_entries - 1)];
		c->sq_freed = head;
	}
	if (c->sq_reserved == 0 && inflight == 0)
		c->arg_head = c->arg_tail; /* nothing outstanding at all */
}

static int alloc_args(struct kvs_client *c, struct client_resv *r, uint64_t len, void **ret)
{
	struct kvs_sqe *sqe = r->sqe;
	uint64_t pos, size = c->args_size;

	if (len > size)
		return -E2BIG;
	for (int pass = 0; pass < 2; pass++) {
		pos = (c->arg_tail + KVS_ARG_ALIGN - 1) & ~(uint64_t)(KVS_ARG_ALIGN - 1);
		if (pos % size + len > size)
			pos += size - pos % size; /* does not fit before the end: wrap */
		if (pos + len - c->arg_head <= size)
			break;
		if (pass)
			return -ENOSPC;
		reclaim_args(c);
	}
	c->arg_tail = pos + len;
	/* Another prep of the same SQE: the bytes of the first are freed with those before. */
	r->args = true;
	r->arg_start = pos;
	sqe->arg_off = (uint32_t)(pos % size);
	sqe->arg_len = (uint32_t)len;
	*ret = c->args + pos % size;
	return 0;
}

static int prep(struct kvs_client *c, struct kvs_sqe *sqe, uint8_t op, uint32_t n,
		uint64_t user_data, uint64_t argbytes, void **ret_args)
{
	struct client_resv *res = resv_of(c, sqe);
	struct pending *p;
	int r;

	if (!res)
		return -EINVAL; /* not an SQE of this client's, or given back */
	p = &c->pend[res->slot];
	/* SAVE, QUERY and LOAD carry arguments, so n == 0 (argbytes 0) is no request. */
	if (op == KVS_OP_SAVE || op == KVS_OP_QUERY || op == KVS_OP_LOAD) {
		if (n == 0)
			return prep_fail(c, sqe, -EINVAL);
		if (n > c->info.max_keys)
			return prep_fail(c, sqe, -E2BIG);
		if (c->dead) {
			/* Arguments will never be read: do not touch the region. */
			*ret_args = NULL;
		} else {
			r = alloc_args(c, res, argbytes, ret_args);
			if (r < 0)
				return prep_fail(c, sqe, r);
		}
	}
	sqe->opcode = op;
	sqe->count = n;
	p->user_data = user_data;
	p->opcode = op;
	p->count = n;
	return 0;
}

int kvs_prep_nop(struct kvs_client *c, struct kvs_sqe *sqe, uint64_t user_data)
{
	return prep(c, sqe, KVS_OP_NOP, 0, user_data, 0, NULL);
}

int kvs_prep_save(struct kvs_client *c, struct kvs_sqe *sqe, const void *keys,
		  const uint32_t *block_ids, uint32_t n, uint64_t user_data)
{
	uint8_t *a = NULL;
	int r = prep(c, sqe, KVS_OP_SAVE, n, user_data, (uint64_t)n * KVS_SAVE_ARG_SIZE,
		     (void **)&a);

	if (r == 0 && a) {
		memcpy(a, keys, (size_t)n * KVS_KEY_SIZE);
		memcpy(a + (size_t)n * KVS_KEY_SIZE, block_ids, (size_t)n * 4);
	}
	return r;
}

int kvs_prep_query(struct kvs_client *c, struct kvs_sqe *sqe, const void *keys, uint32_t n,
		   uint64_t req_id, uint32_t flags, uint64_t user_data)
{
	uint8_t *a = NULL;
	int r;

	/*
	 * Only a session with the answer part can be given an answer: refused
	 * here, before the arguments are placed, like any failed prep.
	 */
	if ((flags & KVS_QUERY_CLUSTER) && !(c->opts.flags & KVS_CONNECT_CLUSTER)) {
		client_log(c, KVS_LOG_ERR,
			   "KVS_QUERY_CLUSTER on a session connected without KVS_CONNECT_CLUSTER");
		return prep_fail(c, sqe, -EINVAL);
	}
	r = prep(c, sqe, KVS_OP_QUERY, n, user_data, (uint64_t)n * KVS_QUERY_ARG_SIZE, (void **)&a);
	if (r == 0) {
		if (a)
			memcpy(a, keys, (size_t)n * KVS_KEY_SIZE);
		sqe->req_id = req_id;
		sqe->flags = (uint8_t)flags;
		pend_of(c, sqe)->cluster = (flags & KVS_QUERY_CLUSTER) != 0;
	}
	return r;
}

int kvs_prep_query_fetch(struct kvs_client *c, struct kvs_sqe *sqe, const void *keys, uint32_t n,
			 uint64_t req_id, uint32_t flags, const char *hint, uint64_t user_data)
{
	size_t hlen = hint ? strlen(hint) : 0;
	/* The hint's string with its NUL, zero-padded to 8s (abi.h). */
	uint64_t pad = hint ? (hlen + 1 + 7) / 8 * 8 : 0;
	uint8_t *a = NULL;
	int r;

	if ((flags & ~(uint32_t)(KVS_QUERY_NOLEASE | KVS_QUERY_DRAM)) ||
	    (hint && (hlen == 0 || pad > KVS_FETCH_HINT_MAX))) {
		client_log(c, KVS_LOG_ERR,
			   "kvs_prep_query_fetch: flags other than NOLEASE and DRAM, or a node hint "
			   "empty or longer than %u bytes",
			   KVS_FETCH_HINT_MAX - 1);
		return prep_fail(c, sqe, -EINVAL);
	}
	if (c->info.daemon_rev_minor < 3) {
		client_log(c, KVS_LOG_ERR, "kvstashd speaks wire minor %u, a fetch needs 3",
			   c->info.daemon_rev_minor);
		return prep_fail(c, sqe, -EOPNOTSUPP);
	}
	r = prep(c, sqe, KVS_OP_QUERY, n, user_data, (uint64_t)n * KVS_QUERY_ARG_SIZE + pad,
		 (void **)&a);
	if (r == 0) {
		if (a) {
			memcpy(a, keys, (size_t)n * KVS_KEY_SIZE);
			if (hint) {
				memset(a + (size_t)n * KVS_KEY_SIZE, 0, pad);
				memcpy(a + (size_t)n * KVS_KEY_SIZE, hint, hlen);
			}
		}
		sqe->req_id = req_id;
		sqe->flags = (uint8_t)(flags | KVS_QUERY_FETCH);
	}
	return r;
}

int kvs_prep_load(struct kvs_client *c, struct kvs_sqe *sqe, uint64_t lease,
		  const uint32_t *block_ids, uint32_t n, uint32_t layer_begin, uint32_t layer_count,
		  uint64_t user_data)
{
	uint8_t *a = NULL;
	int r = prep(c, sqe, KVS_OP_LOAD, n, user_data, (uint64_t)n * KVS_LOAD_ARG_SIZE,
		     (void **)&a);

	if (r == 0) {
		if (a)
			memcpy(a, block_ids, (size_t)n * 4);
		sqe->lease = lease;
		sqe->layer_begin = layer_begin;
		sqe->layer_count = layer_count;
	}
	return r;
}

/* Arm a fence for the SQE just prepared, or give the SQE back. */
static int prep_fence(struct kvs_client *c, struct kvs_sqe *sqe, int kind, uint32_t count,
		      struct kvs_fence_ref *ret)
{
	struct kvs_fence_ref f;
	int r = client_fence_arm(c, kind, count, &f);

	if (r < 0)
		return prep_fail(c, sqe, r);
	sqe->flags |= kind == FENCE_SAVE ? KVS_SAVE_AFTER : KVS_LOAD_PROGRESS;
	sqe->fence_slot = f.slot;
	sqe->fence_value = kind == FENCE_SAVE ? f.base + count : f.base;
	pend_of(c, sqe)->fence = (int32_t)f.slot;
	*ret = f;
	return 0;
}

int kvs_prep_save_after(struct kvs_client *c, struct kvs_sqe *sqe, const void *keys,
			const uint32_t *block_ids, uint32_t n, struct kvs_fence_ref *ret_fence,
			uint64_t user_data)
{
	int r = kvs_prep_save(c, sqe, keys, block_ids, n, user_data);

	return r < 0 ? r : prep_fence(c, sqe, FENCE_SAVE, 1, ret_fence);
}

int kvs_prep_save_stream(struct kvs_client *c, struct kvs_sqe *sqe, const void *keys,
			 const uint32_t *block_ids, uint32_t n, void *stream, uint64_t user_data)
{
	struct kvs_fence_ref f;
	int r = kvs_prep_save_after(c, sqe, keys, block_ids, n, &f, user_data);

	if (r == 0) {
		r = kvs_fence_signal(c, &f, stream);
		if (r < 0) {
			/*
			 * Nothing could be enqueued: the SAVE would only time out.
			 * The value it would have had is written here, so the slot
			 * is not kept waiting for a signal that never comes.
			 */
			kvs_fence_signal_host(c, &f);
			client_fence_end(c, (int32_t)f.slot, r);
			prep_fail(c, sqe, r);
		}
	}
	return r;
}

int kvs_prep_load_progress(struct kvs_client *c, struct kvs_sqe *sqe, uint64_t lease,
			   const uint32_t *block_ids, uint32_t n, uint32_t layer_begin,
			   uint32_t layer_count, struct kvs_fence_ref *ret_fence,
			   uint64_t user_data)
{
	unsigned layers = client_registered_layers(c);
	int r;

	/* The end value is base + layer_count: kvstashd must be told the count itself. */
	if (layer_count == 0)
		layer_count = layer_begin < layers ? layers - layer_begin : 0;
	if (layer_count == 0)
		return prep_fail(c, sqe, -EINVAL);
	r = kvs_prep_load(c, sqe, lease, block_ids, n, layer_begin, layer_count, user_data);
	return r < 0 ? r : prep_fence(c, sqe, FENCE_LOAD, layer_count, ret_fence);
}

int kvs_prep_release(struct kvs_client *c, struct kvs_sqe *sqe, uint64_t lease,
		     uint64_t user_data)
{
	int r = prep(c, sqe, KVS_OP_RELEASE, 0, user_data, 0, NULL);

	if (r == 0)
		sqe->lease = lease;
	return r;
}

int kvs_prep_flush(struct kvs_client *c, struct kvs_sqe *sqe, uint32_t flags, uint64_t user_data)
{
	int r = prep(c, sqe, KVS_OP_FLUSH, 0, user_data, 0, NULL);

	if (r == 0)
		sqe->flags = (uint8_t)flags;
	return r;
}

int kvs_submit(struct kvs_client *c)
{
	uint32_t n = c->sq_reserved, mask = c->info.sq_entries - 1;
	uint64_t bound = c->arg_tail;

	if (n == 0)
		return 0;
	c->sq_reserved = 0;
	if (c->dead) {
		for (uint32_t i = 0; i < n; i++)
			complete_reset(c, c->resv[i].slot);
		return (int)n;
	}
	/*
	 * The one writer of arg_end: once kvstashd consumed SQE k, every
	 * argument byte below the first of the SQEs after it is free.  The
	 * preps may have placed their arguments in any order; later ones go
	 * above arg_tail.  Indexed by our own count of SQEs (sq_tail), not the
	 * ring's index, which started wherever kvstashd's region said.
	 */
	for (uint32_t k = n; k-- > 0;) {
		c->arg_end[(c->sq_tail + k) & mask] = bound;
		if (c->resv[k].args && c->resv[k].arg_start < bound)
			bound = c->resv[k].arg_start;
	}
	for (uint32_t i = 0; i < n; i++)
		c->pend[c->resv[i].slot].state = PEND_SUBMITTED;
	/* One store-release of the tail for the batch; a futex wake only if the worker sleeps. */
	shmq_prod_commit(&c->sq, 0);
	c->sq_tail += n;
	return (int)n;
}

/* ---- connect ------------------------------------------------------- */

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
	if (!status_plausible(rep.r.status)) {
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

static int start_session(struct kvs_client *c)
{
	int r = open_socket(c);

	if (r < 0)
		return r;
	r = say_hello(c);
	if (r == 0)
		r = alloc_state(c);
	if (r < 0) {
		close(c->fd);
		c->fd = -1;
		if (!client_fences_retire(c, c->region))
			shmq_region_destroy(c->region);
		c->region = NULL;
		c->ans_part = NULL;
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
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	/* Streams may still wait on its fence slots (released): those stay mapped. */
	if (!client_fences_retire(c, c->region))
		shmq_region_destroy(c->region);
	c->region = NULL;
	c->ans_part = NULL;
	r = start_session(c);
	if (r == 0 && c->registered)
		r = client_send_registration(c);
	for (uint32_t i = 0; i < nkeep && c->lq; i++) {
		/* Old completions keep no slot: their tags cannot match anything new. */
		keep[i].tag = UINT64_MAX;
		if (c->lq_n >= c->lq_cap)
			continue;
		if (keep[i].ans != ANS_NONE) {
			keep[i].ans = c->ans ? ans_get(c) : ANS_NONE;
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
