/* SPDX-License-Identifier: MIT */
/*
 * The core of libkvstash: logging, the request/reply exchange on the
 * socket, and completions: the pending-operation slots, the CQ consumer
 * side with its checks (ring_take(), cqe_plausible()), the local queue,
 * kvstashd's death (client_mark_dead()) and kvs_peek_cqe() /
 * kvs_wait_cqe().  Runs on the application's (engine's) thread that uses
 * the client.  Submission is prep.c's, the session (connect, reconnect,
 * close) connect.c's.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "client.h"
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

bool client_status_plausible(int32_t status)
{
	return status <= 0 && status >= -CLIENT_ERRNO_MAX;
}

int client_reply_status(struct kvs_client *c, const struct kvs_msg_reply *rep, size_t n,
			const char *what)
{
	if (n != sizeof(*rep) || rep->hdr.size != n || rep->hdr.type != KVS_MSG_REPLY ||
	    !client_status_plausible(rep->status)) {
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

void client_pend_put(struct kvs_client *c, uint32_t slot)
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

uint32_t client_ans_get(struct kvs_client *c)
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
		ret->ans = client_ans_get(c);
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
	client_pend_put(c, slot);
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
			client_pend_put(c, (uint32_t)e.user_data); /* a NOP of ours (prep_fail()) */
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
void client_complete_reset(struct kvs_client *c, uint32_t slot)
{
	struct local_cqe l = { { 0 } };

	if (c->pend[slot].swallow) {
		client_pend_put(c, slot); /* nobody waits for it (prep_fail()) */
		return;
	}
	l.cqe.user_data = c->pend[slot].user_data;
	l.cqe.res = -ECONNRESET;
	l.cqe.flags = KVS_CQE_LOCAL;
	l.tag = ((uint64_t)c->pend[slot].gen << 32) | slot;
	l.ans = ANS_NONE;
	client_fence_end(c, c->pend[slot].fence, -ECONNRESET);
	client_pend_put(c, slot);
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
			client_complete_reset(c, i);
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
