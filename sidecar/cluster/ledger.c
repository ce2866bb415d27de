/* SPDX-License-Identifier: MIT */
/*
 * The registry's ledger (ledger.h): tallies, the runs of a batch, flush
 * marks and their reports.  The control thread's, but for the producers'
 * counters of a tally and ledger_mark_new(), which the I/O workers call.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "cluster/ledger.h"

static uint64_t sub0(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

int ledger_init(struct ledger *l, uint32_t cap, const uint64_t *q_enq, const uint64_t *q_ovf)
{
	memset(l, 0, sizeof(*l));
	l->runs = calloc(cap, sizeof(*l->runs));
	if (!l->runs)
		return -ENOMEM;
	l->cap = cap;
	l->q_enq = q_enq;
	l->q_ovf = q_ovf;
	l->marks_tail = &l->marks;
	return 0;
}

void ledger_fini(struct ledger *l)
{
	while (l->marks) {
		struct reg_mark *m = l->marks;

		l->marks = m->mnext;
		free(m);
	}
	while (l->tallies) {
		struct registry_tally *t = l->tallies;

		l->tallies = t->next;
		free(t);
	}
	l->runs = mfree(l->runs);
}

/* ---- tallies ------------------------------------------------------------ */

struct registry_tally *ledger_tally_new(struct ledger *l, struct registry_tally *parent)
{
	struct registry_tally *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->parent = parent;
	t->next = l->tallies;
	l->tallies = t;
	return t;
}

void ledger_tally_put(struct ledger *l, struct registry_tally *t, uint64_t tail)
{
	(void)l;
	if (!t)
		return;
	/*
	 * Its owner queues nothing after this (a session's worker detached
	 * first), so every change of it is below @tail: batches in flight may
	 * point at it until those positions resolved.
	 */
	t->retired = true;
	t->retire_pos = tail;
}

void ledger_gc(struct ledger *l)
{
	struct registry_tally **pp = &l->tallies;

	while (*pp) {
		struct registry_tally *t = *pp;

		if (t->retired && t->retire_pos <= l->resolved) {
			*pp = t->next;
			free(t);
		} else {
			pp = &t->next;
		}
	}
}

void ledger_count(struct registry_tally *t, uint32_t n, uint32_t refused)
{
	/* Relaxed: counts read by a mark of the same producer (program order), or approximate. */
	for (; t; t = t->parent) {
		if (n)
			__atomic_fetch_add(&t->enq, n, __ATOMIC_RELAXED);
		if (refused)
			__atomic_fetch_add(&t->ovf, refused, __ATOMIC_RELAXED);
	}
}

/* ---- runs --------------------------------------------------------------- */

bool ledger_run_fits(const struct ledger *l, const struct registry_tally *t)
{
	return l->nruns < l->cap || l->runs[l->nruns - 1].t == t;
}

bool ledger_run_add(struct ledger *l, struct registry_tally *t)
{
	if (l->nruns && l->runs[l->nruns - 1].t == t) {
		l->runs[l->nruns - 1].n++;
		return true;
	}
	if (l->nruns == l->cap)
		return false;
	l->runs[l->nruns++] = (struct ledger_run){ t, 1 };
	return true;
}

struct ledger_run *ledger_take_runs(struct ledger *l, uint32_t *ret_n)
{
	struct ledger_run *r = NULL;

	*ret_n = 0;
	if (l->nruns) {
		r = malloc(l->nruns * sizeof(*r));
		if (r) {
			memcpy(r, l->runs, l->nruns * sizeof(*r));
			*ret_n = l->nruns;
		}
	}
	return r;
}

void ledger_clear_runs(struct ledger *l)
{
	l->nruns = 0;
}

/* ---- resolution and marks --------------------------------------------------- */

/*
 * Everything before @m resolved: its tally's counts now are those of its
 * changes before the mark.  The report is what came since the tally's
 * previous one, and this is that one for the next.
 */
static void snap(struct reg_mark *m)
{
	struct registry_tally *t = m->t;
	uint64_t dropped = t->drop + m->ovf_at;

	m->res = (struct registry_flush_result){
		.status = 0,
		.delivered = sub0(t->del, t->rep_del),
		.dropped = sub0(dropped, t->rep_drop),
	};
	t->rep_del = max64(t->rep_del, t->del);
	t->rep_drop = max64(t->rep_drop, dropped);
	m->snapped = true;
}

/* Marks whose place resolution reached; a mark's own position resolves with it. */
static void snap_reached(struct ledger *l)
{
	struct reg_mark *m;

	while ((m = l->mark_next) && m->pos <= l->resolved) {
		snap(m);
		if (m->pos == l->resolved)
			l->resolved = m->pos + 1;
		l->mark_next = m->mnext;
	}
}

uint64_t ledger_resolve(struct ledger *l, uint64_t start, uint64_t end, bool ok,
			const struct ledger_run *runs, uint32_t nruns)
{
	uint64_t n;

	/* Batches resolve in position order (one connection, FIFO replies). */
	if (start != l->resolved)
		start = l->resolved;
	if (end <= start)
		return 0;
	n = end - start;
	if (ok)
		l->all.del += n;
	else
		l->all.drop += n;
	for (uint32_t i = 0; i < nruns; i++)
		for (struct registry_tally *t = runs[i].t; t; t = t->parent) {
			if (ok)
				t->del += runs[i].n;
			else
				t->drop += runs[i].n;
		}
	l->resolved = end;
	snap_reached(l);
	return n;
}

struct reg_mark *ledger_mark_new(struct ledger *l, struct registry_tally *t)
{
	struct reg_mark *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	/*
	 * What came before the mark: the caller's changes were counted before
	 * this call returned to it (ledger_count() after rq_push()), so a
	 * mark taken after them sees them.
	 */
	m->t = t ? t : &l->all;
	m->enq_at = __atomic_load_n(t ? &t->enq : l->q_enq, __ATOMIC_RELAXED);
	m->ovf_at = __atomic_load_n(t ? &t->ovf : l->q_ovf, __ATOMIC_RELAXED);
	return m;
}

void ledger_mark_popped(struct ledger *l, struct reg_mark *m, uint64_t pos)
{
	m->pos = pos;
	m->popped = true;
	*l->marks_tail = m;
	l->marks_tail = &m->mnext;
	if (!l->mark_next)
		l->mark_next = m;
	snap_reached(l);
}

void ledger_wait(struct ledger *l, struct reg_mark *m, uint64_t deadline, registry_flush_cb *cb,
		 void *arg)
{
	m->deadline = deadline;
	m->cb = cb;
	m->arg = arg;
	m->waiting = true;
	m->wnext = l->waits;
	l->waits = m;
}

/*
 * Not snapped by its deadline (or at shutdown): what resolution said so
 * far of the tally's changes before the mark, the rest dropped.  Every
 * change resolved so far is before the mark (resolution has not reached
 * it).  Not a report for the next flush: the snap, later, is.
 */
static struct registry_flush_result unfinished(const struct reg_mark *m, int status)
{
	const struct registry_tally *t = m->t;

	return (struct registry_flush_result){
		.status = status,
		.delivered = sub0(t->del, t->rep_del),
		.dropped = sub0(sub0(m->enq_at + m->ovf_at, t->del), t->rep_drop),
	};
}

void ledger_complete(struct ledger *l, uint64_t now, bool shutting)
{
	struct reg_mark **pp = &l->waits, *due = NULL, **dt = &due;

	/* Collect first: a callback may ask for another flush (ledger_wait()). */
	while (*pp) {
		struct reg_mark *m = *pp;

		if (m->snapped || shutting || now >= m->deadline) {
			*pp = m->wnext;
			m->wnext = NULL;
			if (!m->snapped)
				m->res = unfinished(m, shutting ? -ESHUTDOWN : -ETIMEDOUT);
			m->waiting = false;
			*dt = m;
			dt = &m->wnext;
		} else {
			pp = &m->wnext;
		}
	}
	while (due) {
		struct reg_mark *m = due;

		due = m->wnext;
		m->done = true;
		m->cb(m->arg, &m->res);
	}
	/* Snapped and answered: nobody needs it any more. */
	for (pp = &l->marks; *pp;) {
		struct reg_mark *m = *pp;

		if (m->snapped && m->done) {
			*pp = m->mnext;
			if (l->marks_tail == &m->mnext)
				l->marks_tail = pp;
			free(m);
		} else {
			pp = &m->mnext;
		}
	}
}

uint64_t ledger_next_deadline(const struct ledger *l)
{
	uint64_t t = UINT64_MAX;

	for (const struct reg_mark *m = l->waits; m; m = m->wnext)
		if (m->deadline < t)
			t = m->deadline;
	return t;
}
