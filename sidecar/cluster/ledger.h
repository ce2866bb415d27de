/* SPDX-License-Identifier: MIT */
/*
 * The registry's ledger: what became of every change in the queue, and
 * so what a flush reports.  Changes resolve (delivered, or dropped after a
 * failed attempt) in position order (pipeline.c: one connection, FIFO
 * replies); each was made by someone, a tally (a session, an instance, or
 * nobody: evictions, the backfill), which counts what became of its
 * changes.  A flush is a mark in the queue (RQ_MARK); no batch spans one,
 * so when resolution reaches a mark every change before it is resolved
 * and its tally's counts at that moment are exactly those of its changes
 * before the mark.  The report is what came since the tally's previous
 * report.
 *
 * Threads: ledger_mark_new() and the tallies' producer counters (enq, ovf)
 * are any thread's; everything else is the control thread's (the
 * registry's consumer side).
 */
#ifndef KVS_REG_LEDGER_H
#define KVS_REG_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/flush.h"

/* What became of one owner's changes (registry.h, struct registry_tally). */
struct registry_tally {
	struct registry_tally *parent; /* counted there too (an instance); NULL */
	/* Producers (any thread), relaxed atomics: changes queued, refused (full). */
	uint64_t enq, ovf;
	/* The control thread's. */
	uint64_t del, drop;	    /* resolved: delivered, dropped */
	uint64_t rep_del, rep_drop; /* what its last flush reported, cumulative */
	uint64_t retire_pos;	    /* put: freed once every position below resolved */
	bool retired;
	struct registry_tally *next; /* ledger.tallies */
};

/* Consecutive changes of one tally in a batch. */
struct ledger_run {
	struct registry_tally *t; /* NULL: nobody's */
	uint32_t n;
};

/* A flush's mark: made by ledger_mark_new(), queued as RQ_MARK. */
struct reg_mark {
	struct registry_tally *t;
	uint64_t enq_at, ovf_at; /* t's when the mark was taken */
	uint64_t pos;		 /* its place, once taken from the queue */
	bool popped, snapped, waiting, done;
	struct registry_flush_result res; /* at the snap */
	uint64_t deadline;
	registry_flush_cb *cb;
	void *arg;
	struct reg_mark *mnext; /* ledger.marks, position order (popped) */
	struct reg_mark *wnext; /* ledger.waits (registry_flush() called) */
};

struct ledger {
	uint64_t resolved; /* every position below is resolved */
	/* Everyone's changes: the tally of a mark taken without one. */
	struct registry_tally all;
	const uint64_t *q_enq, *q_ovf; /* the queue's counters: all's producers */
	struct registry_tally *tallies;
	/* The batch being built: its runs, at most @cap. */
	struct ledger_run *runs;
	uint32_t nruns, cap;
	struct reg_mark *marks, **marks_tail, *mark_next; /* first not snapped */
	struct reg_mark *waits;
};

/* Runs for batches of up to @cap changes; the queue's enqueued and overflow counters. */
int ledger_init(struct ledger *l, uint32_t cap, const uint64_t *q_enq, const uint64_t *q_ovf);
/* Every tally and mark freed (the registry is freed: nobody waits any more). */
void ledger_fini(struct ledger *l);

struct registry_tally *ledger_tally_new(struct ledger *l, struct registry_tally *parent);
/* Freed once every change queued before @tail resolved (ledger_gc()). */
void ledger_tally_put(struct ledger *l, struct registry_tally *t, uint64_t tail);
/* Any thread: a change of @t was queued (@n), or refused (@refused). */
void ledger_count(struct registry_tally *t, uint32_t n, uint32_t refused);

/* The batch being built took a change of @t; false when its runs are full. */
bool ledger_run_add(struct ledger *l, struct registry_tally *t);
/* Would ledger_run_add() take a change of @t? */
bool ledger_run_fits(const struct ledger *l, const struct registry_tally *t);
/* Its runs, moved into a copy of their own for the batch (NULL: none, or no memory). */
struct ledger_run *ledger_take_runs(struct ledger *l, uint32_t *ret_n);
void ledger_clear_runs(struct ledger *l);

/*
 * Positions [start, end) resolved, @ok or dropped, their changes those of
 * @runs: counted to their tallies, then every mark resolution reaches is
 * snapped.  Returns the count of positions.
 */
uint64_t ledger_resolve(struct ledger *l, uint64_t start, uint64_t end, bool ok,
			const struct ledger_run *runs, uint32_t nruns);

/* Any thread: a mark of @t (NULL: everyone's), before it is queued.  NULL: no memory. */
struct reg_mark *ledger_mark_new(struct ledger *l, struct registry_tally *t);
/* Taken from the queue at @pos (snapped at once when everything before resolved). */
void ledger_mark_popped(struct ledger *l, struct reg_mark *m, uint64_t pos);
/* registry_flush(): @cb once the mark snapped, or at @deadline, or at shutdown. */
void ledger_wait(struct ledger *l, struct reg_mark *m, uint64_t deadline, registry_flush_cb *cb,
		 void *arg);
/* Run the callbacks due (all, @shutting: -ESHUTDOWN), then free what nobody needs. */
void ledger_complete(struct ledger *l, uint64_t now, bool shutting);
/* The earliest deadline of a waiting flush, or UINT64_MAX. */
uint64_t ledger_next_deadline(const struct ledger *l);
/* Free the retired tallies everything before whose put resolved. */
void ledger_gc(struct ledger *l);

#endif /* KVS_REG_LEDGER_H */
