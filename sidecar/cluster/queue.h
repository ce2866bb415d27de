/* SPDX-License-Identifier: MIT */
/*
 * The registration queue: bounded, multi-producer (the I/O workers, the
 * peer service thread, the SSD drive threads: whoever seals or drops a block),
 * single-consumer (the control thread), lock-free, after Dmitry Vyukov's
 * bounded MPMC queue: every cell carries a sequence number that says whose
 * turn it is, so a producer claims a position with one CAS and publishes
 * the cell with one store-release, and a full queue is seen without
 * waiting.  The position a producer claims is the change's place in the
 * stream that flush marks refer to (registry_mark()).
 *
 * Besides changes it carries marks (RQ_MARK: registry_mark(), a flush
 * barrier's place in the stream), for which the last cells are kept: a
 * change is refused while @reserve cells or fewer are free, a mark only
 * when none is.  Each entry has a tag, its producer's (a change: whose it
 * is, struct registry_tally; a mark: its flush).
 *
 * Wake-up: the consumer sleeps in epoll.  Before it sleeps it sets
 * need_wake and looks at the queue once more; a producer that published
 * looks at need_wake and, if set, takes it and writes the eventfd.  Both
 * sides order their store before their load with a seq_cst fence (a
 * Dekker pair), so either the consumer sees the new entry or the producer
 * sees need_wake: no entry sleeps in the queue.
 */
#ifndef KVS_REG_QUEUE_H
#define KVS_REG_QUEUE_H

#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>

#define RQ_INSERT 1
#define RQ_REMOVE 2
#define RQ_MARK	  3

struct rq_cell {
	uint64_t seq; /* atomic: pos when free for position pos, pos + 1 when full */
	void *tag;
	uint8_t op; /* RQ_INSERT, RQ_REMOVE, RQ_MARK */
	uint8_t ns[16];
	uint8_t key[16];
};

struct rq_item {
	uint64_t pos;
	void *tag;
	uint8_t op;
	uint8_t ns[16];
	uint8_t key[16];
};

struct rq {
	/* producers' line */
	alignas(128) uint64_t tail; /* atomic: next position to claim */
	uint64_t overflow;	    /* atomic: entries refused, queue full */
	uint64_t enqueued;	    /* atomic */
	/* consumer's line */
	alignas(128) uint64_t head; /* next position to take (consumer only) */
	uint32_t need_wake;	    /* atomic: the consumer is about to sleep */
	int wake_fd;		    /* eventfd, or -1 */
	alignas(128) uint64_t mask;
	uint64_t reserve; /* cells only marks may take */
	struct rq_cell *cells;
};

/* @entries: a power of two >= 2, @reserve below it.  -EINVAL, -ENOMEM. */
int rq_init(struct rq *q, uint32_t entries, uint32_t reserve, int wake_fd);
void rq_fini(struct rq *q);

/*
 * Producers: queue @n changes (RQ_INSERT, RQ_REMOVE) of @tag; returns how
 * many fit, counts the rest as overflow.
 */
uint32_t rq_push(struct rq *q, uint8_t op, void *tag, const uint8_t ns[16],
		 const uint8_t (*keys)[16], uint32_t n);
/* Producers: queue a mark (its flush @tag); false when no cell is free at all. */
bool rq_push_mark(struct rq *q, void *tag);

/* Consumer: take the next published entry; false when there is none (yet). */
bool rq_pop(struct rq *q, struct rq_item *ret);

/*
 * Consumer, before sleeping: arm the wake-up; returns true when entries
 * arrived meanwhile (the consumer should not sleep; need_wake is cleared).
 */
bool rq_arm_wake(struct rq *q);

/* Any thread: entries claimed so far (a flush mark), and queued now. */
uint64_t rq_tail(struct rq *q);
uint64_t rq_depth(const struct rq *q);

#endif /* KVS_REG_QUEUE_H */
