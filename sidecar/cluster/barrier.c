/* SPDX-License-Identifier: MIT */
/*
 * What producers call, and the FLUSH barrier.  registry_insert(),
 * registry_remove() and registry_mark() run on any thread (the engines'
 * workers, the store's hooks): they push onto the queue's producer side
 * (queue.h) and count in the caller's tally (ledger.h), nothing else.
 * registry_flush() and the tallies' lifetime are the control thread's: a
 * flush waits for its mark to resolve (pipeline.c resolves in position
 * order) and completes from pump_run() (barrier_complete()), never from the
 * call that asked for it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "cluster/barrier.h"
#include "cluster/ledger.h"
#include "cluster/queue.h"
#include "cluster/registry-internal.h"

/* A producer's changes: queued, then counted (any thread). */
static uint32_t push(struct registry *r, uint8_t op, struct registry_tally *t,
		     const uint8_t ns[REG_DIGEST_SIZE], const uint8_t (*keys)[REG_KEY_SIZE],
		     uint32_t n)
{
	uint32_t done = rq_push(&r->q, op, t, ns, keys, n);

	/* After the push: a mark taken after this call sees the count (ledger_mark_new()). */
	ledger_count(t, done, n - done);
	return done;
}

uint32_t registry_insert(struct registry *r, struct registry_tally *t,
			 const uint8_t ns[REG_DIGEST_SIZE], const uint8_t (*keys)[REG_KEY_SIZE],
			 uint32_t n)
{
	return push(r, RQ_INSERT, t, ns, keys, n);
}

uint32_t registry_remove(struct registry *r, struct registry_tally *t,
			 const uint8_t ns[REG_DIGEST_SIZE], const uint8_t (*keys)[REG_KEY_SIZE],
			 uint32_t n)
{
	return push(r, RQ_REMOVE, t, ns, keys, n);
}

int registry_mark(struct registry *r, struct registry_tally *t, struct registry_mark *ret)
{
	struct reg_mark *m = ledger_mark_new(&r->led, t);

	if (!m)
		return -ENOMEM;
	/*
	 * Its counts were read first: every change its caller made before
	 * is both counted there and queued before it.  The push's
	 * store-release publishes the mark's fields to the consumer.
	 */
	if (!rq_push_mark(&r->q, m)) {
		free(m);
		return -EAGAIN;
	}
	ret->m = m;
	return 0;
}

int registry_flush(struct registry *r, const struct registry_mark *mark, uint32_t timeout_ms,
		   registry_flush_cb *cb, void *arg)
{
	uint64_t deadline = now_ns() + (uint64_t)(timeout_ms ? timeout_ms : r->flush_ms) * MS;

	ledger_wait(&r->led, mark->m, deadline, cb, arg);
	ST_ADD(r, flushes, 1);
	kick(r); /* completes from registry_dispatch(), never from here */
	return 0;
}

struct registry_tally *registry_tally_new(struct registry *r, struct registry_tally *parent)
{
	return ledger_tally_new(&r->led, parent);
}

void registry_tally_put(struct registry *r, struct registry_tally *t)
{
	if (r)
		ledger_tally_put(&r->led, t, rq_tail(&r->q));
}

void barrier_complete(struct registry *r, uint64_t now, int shutting)
{
	ledger_complete(&r->led, now, shutting);
	/* Tallies whose last change resolved: their owners put them. */
	ledger_gc(&r->led);
}
