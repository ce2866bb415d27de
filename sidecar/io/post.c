/* SPDX-License-Identifier: MIT */
/*
 * What a worker posts: the CQEs of its sessions' operations into their
 * CQs, kept in a session's backlog while its CQ is full and published
 * once per round (post_publish()), and the acks to the control thread
 * (post_ack()).  Worker thread: each session's CQ has one producer, the
 * worker serving it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/mem.h"
#include "obs/account.h"
#include "obs/log.h"
#include "io/post.h"

/* Tell the control thread about @s through @a (any worker thread). */
void post_ack(struct worker *w, struct wmsg *a, struct wsession *s, enum wcmd_type type)
{
	uint64_t one = 1;
	ssize_t r;

	a->type = type;
	a->s = s;
	/* The unlock orders this session's state before the control thread's take. */
	pthread_mutex_lock(&w->acks->lock);
	cds_list_add_tail(&a->node, &w->acks->list);
	pthread_mutex_unlock(&w->acks->lock);
	r = write(w->acks->efd, &one, sizeof(one));
	(void)r; /* full only past 2^64-2 unread acks */
}

/* @ans: the CQE's cluster answer (KVS_CQE_CLUSTER), or NULL. */
static bool cq_put(struct wsession *s, const struct kvs_cqe *cqe,
		   const struct kvs_cluster_answer *ans)
{
	uint32_t idx;
	int r = shmq_prod_reserve(&s->cq, 1, &idx);

	if (r < 0) {
		/* The engine wrote an impossible CQ head: it broke the protocol. */
		s->broken = true;
		return true;
	}
	if (r == 0)
		return false;
	/*
	 * The answer first: the CQ tail's store-release in post_publish()
	 * publishes it with the CQE (the engine copies both before it
	 * releases the entry, libkvstash's ring_take()).
	 */
	if (ans)
		s->answers[idx & (shmq_ring_capacity(&s->cq) - 1)] = *ans;
	memcpy(shmq_ring_entry(&s->cq, idx), cqe, sizeof(*cqe));
	s->cq_dirty = true;
	return true;
}

void post_cqe(struct worker *w, struct wsession *s, struct kvs_cqe *cqe,
	      const struct kvs_cluster_answer *ans)
{
	struct bl_ent *e;

	/* Single writer (this worker); `kvstash stats` reads it (relaxed). */
	__atomic_store_n(&s->inflight, s->inflight - 1, __ATOMIC_RELAXED);
	if (cqe->res < 0) {
		account_error(w->ctr, s->st, cqe->res);
		if (log_enabled(LOG_DEBUG))
			slog_debug(s, "op completed with %s", strerror(-cqe->res));
	}
	if (s->detaching || s->broken)
		return; /* nobody to read it */
	if (s->bl_n == 0 && cq_put(s, cqe, ans))
		return;
	/* CQ full: keep it; the session takes no new SQE until it drains. */
	e = &s->backlog[(s->bl_head + s->bl_n) % s->bl_cap];
	e->cqe = *cqe;
	e->ans = NULL;
	if (ans && !(e->ans = malloc(sizeof(*ans)))) {
		/* No answer to go with it: the CQE must not claim one. */
		e->cqe = (struct kvs_cqe){ .user_data = cqe->user_data, .res = -ENOMEM };
		account_error(w->ctr, s->st, -ENOMEM);
	} else if (ans) {
		*e->ans = *ans;
	}
	s->bl_n++;
}

void post_flags(struct worker *w, struct wsession *s, uint64_t user_data, int32_t res, uint64_t r0,
		uint64_t r1, uint32_t flags)
{
	struct kvs_cqe cqe = {
		.user_data = user_data,
		.res = res,
		.flags = flags,
		.result0 = r0,
		.result1 = r1,
	};

	post_cqe(w, s, &cqe, NULL);
}

void post(struct worker *w, struct wsession *s, uint64_t user_data, int32_t res, uint64_t r0,
	  uint64_t r1)
{
	post_flags(w, s, user_data, res, r0, r1, 0);
}

bool post_backlog(struct wsession *s)
{
	bool any = false;

	while (s->bl_n && !s->broken) {
		struct bl_ent *e = &s->backlog[s->bl_head];

		if (!cq_put(s, &e->cqe, e->ans))
			break;
		e->ans = mfree(e->ans);
		s->bl_head = (s->bl_head + 1) % s->bl_cap;
		s->bl_n--;
		any = true;
	}
	return any;
}

/*
 * Publish the CQEs posted this round: one release store of each CQ's tail
 * (shmq_prod_commit(), pairing with the engine's load-acquire of it) for
 * all of them, waking the engine if it asked.  Before any ack of the round
 * (settle_sessions()), so an UNREGISTER reply never overtakes a completion.
 */
void post_publish(struct worker *w)
{
	struct wsession *s;

	cds_list_for_each_entry(s, &w->sessions, wnode) {
		if (!s->cq_dirty)
			continue;
		s->cq_dirty = false;
		shmq_prod_commit(&s->cq, 0);
	}
}
