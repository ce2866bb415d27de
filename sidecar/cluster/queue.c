/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/mem.h"
#include "cluster/queue.h"

int rq_init(struct rq *q, uint32_t entries, uint32_t reserve, int wake_fd)
{
	struct rq_cell *c;

	if (entries < 2 || (entries & (entries - 1)) || reserve >= entries)
		return -EINVAL;
	c = aligned_alloc(64, (size_t)entries * sizeof(*c));
	if (!c)
		return -ENOMEM;
	memset(q, 0, sizeof(*q));
	for (uint32_t i = 0; i < entries; i++)
		c[i].seq = i;
	q->cells = c;
	q->mask = entries - 1;
	q->reserve = reserve;
	q->wake_fd = wake_fd;
	return 0;
}

void rq_fini(struct rq *q)
{
	if (!q)
		return;
	q->cells = mfree(q->cells);
}

static void rq_wake(struct rq *q)
{
	uint64_t one = 1;

	/*
	 * Fence: orders the store-release that published our cells before
	 * the load of need_wake; pairs with the fence in rq_arm_wake(), which
	 * orders its store of need_wake before its look at the head cell.
	 */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&q->need_wake, __ATOMIC_RELAXED))
		return;
	/* One producer wins the wake-up; the others see 0. */
	if (__atomic_exchange_n(&q->need_wake, 0, __ATOMIC_RELAXED) && q->wake_fd >= 0) {
		ssize_t w = write(q->wake_fd, &one, sizeof(one));

		(void)w; /* EAGAIN: the counter is already non-zero, a wake-up is pending */
	}
}

/*
 * Claim a position with @free cells free from it on (the reserve for a
 * change, 0 for a mark): its cell, or NULL when the queue is that full.
 */
static struct rq_cell *claim(struct rq *q, uint64_t free, uint64_t *ret_pos)
{
	uint64_t pos = __atomic_load_n(&q->tail, __ATOMIC_RELAXED);

	for (;;) {
		struct rq_cell *c = &q->cells[pos & q->mask];
		uint64_t seq;
		int64_t dif;

		/*
		 * Load-acquire of the cell's turn pairs with the consumer's
		 * store-release in rq_pop(): its reads of the previous lap's
		 * entry are done before we write.
		 */
		seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
		dif = (int64_t)(seq - pos);
		if (dif == 0) {
			/*
			 * The reserve: the cell @free ahead must be free for its
			 * position too (the previous lap's entry there is taken).
			 * Acquire as above; a stale look only refuses early.
			 */
			if (free) {
				const struct rq_cell *f = &q->cells[(pos + free) & q->mask];

				if ((int64_t)(__atomic_load_n(&f->seq, __ATOMIC_ACQUIRE) -
					      (pos + free)) < 0)
					return NULL;
			}
			/* Claim pos; relaxed: the cell's seq orders the data. */
			if (__atomic_compare_exchange_n(&q->tail, &pos, pos + 1, true,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
				*ret_pos = pos;
				return c;
			}
		} else if (dif < 0) {
			return NULL; /* the previous lap's entry is still there */
		} else {
			pos = __atomic_load_n(&q->tail, __ATOMIC_RELAXED);
		}
	}
}

uint32_t rq_push(struct rq *q, uint8_t op, void *tag, const uint8_t ns[16],
		 const uint8_t (*keys)[16], uint32_t n)
{
	uint32_t done = 0;

	for (; done < n; done++) {
		uint64_t pos;
		struct rq_cell *c = claim(q, q->reserve, &pos);

		if (!c)
			break;
		c->op = op;
		c->tag = tag;
		memcpy(c->ns, ns, 16);
		memcpy(c->key, keys[done], 16);
		/* Store-release publishes the entry; pairs with rq_pop()'s load-acquire. */
		__atomic_store_n(&c->seq, pos + 1, __ATOMIC_RELEASE);
	}
	if (done < n)
		__atomic_fetch_add(&q->overflow, n - done, __ATOMIC_RELAXED);
	if (done) {
		__atomic_fetch_add(&q->enqueued, done, __ATOMIC_RELAXED);
		rq_wake(q);
	}
	return done;
}

bool rq_push_mark(struct rq *q, void *tag)
{
	uint64_t pos;
	struct rq_cell *c = claim(q, 0, &pos);

	if (!c)
		return false;
	c->op = RQ_MARK;
	c->tag = tag;
	/* Store-release publishes the mark; pairs with rq_pop()'s load-acquire. */
	__atomic_store_n(&c->seq, pos + 1, __ATOMIC_RELEASE);
	rq_wake(q);
	return true;
}

bool rq_pop(struct rq *q, struct rq_item *ret)
{
	struct rq_cell *c = &q->cells[q->head & q->mask];
	/* Load-acquire pairs with the producer's store-release in rq_push(). */
	uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);

	if (seq != q->head + 1)
		return false; /* empty, or claimed and not yet published */
	ret->pos = q->head;
	ret->tag = c->tag;
	ret->op = c->op;
	memcpy(ret->ns, c->ns, 16);
	memcpy(ret->key, c->key, 16);
	/*
	 * Store-release hands the cell to the producer of the next lap; pairs
	 * with the load-acquire in rq_push(): our reads above come first.
	 */
	__atomic_store_n(&c->seq, q->head + q->mask + 1, __ATOMIC_RELEASE);
	/* Relaxed: rq_depth() readers want an estimate only. */
	__atomic_store_n(&q->head, q->head + 1, __ATOMIC_RELAXED);
	return true;
}

bool rq_arm_wake(struct rq *q)
{
	struct rq_cell *c = &q->cells[q->head & q->mask];

	__atomic_store_n(&q->need_wake, 1, __ATOMIC_RELAXED);
	/*
	 * Fence: pairs with the one in rq_wake() (queue.h, "Wake-up"): either
	 * we see the entry published here, or its producer sees need_wake and
	 * writes the eventfd.  A cell claimed but not yet published is the
	 * second case.
	 */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->seq, __ATOMIC_ACQUIRE) == q->head + 1) {
		__atomic_store_n(&q->need_wake, 0, __ATOMIC_RELAXED);
		return true;
	}
	return false;
}

uint64_t rq_tail(struct rq *q)
{
	/* Acquire: a mark taken after an enqueue returned sees its claim (coherence). */
	return __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
}

uint64_t rq_depth(const struct rq *q)
{
	uint64_t t = __atomic_load_n(&q->tail, __ATOMIC_RELAXED);
	uint64_t h = __atomic_load_n(&q->head, __ATOMIC_RELAXED);

	return t > h ? t - h : 0;
}
