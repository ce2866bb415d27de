/* SPDX-License-Identifier: MIT */
/*
 * What each event of kvstashd counts: every counter of the global and
 * per-session groups (obs/counters.h) is moved here and nowhere else, so
 * one file says what a figure of `kvstash stats` or /metrics means.  The
 * I/O workers call the data-path events, the control thread the session
 * events; all are relaxed atomics (obs/counters.h says why that is enough).
 */
#ifndef KVS_ACCOUNT_H
#define KVS_ACCOUNT_H

#include <stdint.h>

#include "obs/counters.h"

/* ---- data path (I/O workers) --------------------------------------- */

/* An SQE was taken from the session's SQ. */
static inline void account_sqe(struct counters_session *s)
{
	counter_add(&s->ops, 1);
}

/* An operation completed with @res < 0. */
static inline void account_error(struct counters_global *g, struct counters_session *s, int res)
{
	counter_add(&s->errors, 1);
	counter_add(&g->errors, 1);
	counter_add(&g->errors_by_kind[err_kind_of(res)], 1);
}

/* A QUERY of @asked keys found a resident prefix of @hits. */
static inline void account_query(struct counters_global *g, struct counters_session *s,
				 uint32_t hits, uint32_t asked)
{
	counter_add(&g->query_ops, 1);
	counter_add(&g->query_blocks_hit, hits);
	counter_add(&g->query_blocks_missed, asked - hits);
	counter_add(&s->query_hits, hits);
	counter_add(&s->query_misses, asked - hits);
}

/* A SAVE was decoded (counted before it can fail). */
static inline void account_save(struct counters_global *g)
{
	counter_add(&g->save_ops, 1);
}

/* A SAVE found @skipped of its keys resident already. */
static inline void account_save_skipped(struct counters_global *g, uint32_t skipped)
{
	counter_add(&g->save_blocks_skipped, skipped);
}

/* A SAVE's copy of @blocks blocks, @bytes bytes, finished after @ns. */
static inline void account_save_done(struct counters_global *g, struct counters_session *s,
				     uint32_t blocks, uint64_t bytes, uint64_t ns)
{
	counter_add(&g->save_blocks_stored, blocks);
	counter_add(&g->bytes_saved, bytes);
	counter_add(&g->save_ns, ns);
	hist_observe(&g->save_hist, ns);
	counter_add(&s->bytes_saved, bytes);
	counter_add(&s->save_blocks, blocks);
}

/* A LOAD was decoded (counted before its lease is checked). */
static inline void account_load(struct counters_global *g)
{
	counter_add(&g->load_ops, 1);
}

/* A LOAD's copy of @blocks blocks, @bytes bytes, finished after @ns. */
static inline void account_load_done(struct counters_global *g, struct counters_session *s,
				     uint32_t blocks, uint64_t bytes, uint64_t ns)
{
	counter_add(&g->load_blocks, blocks);
	counter_add(&g->bytes_loaded, bytes);
	counter_add(&g->load_ns, ns);
	hist_observe(&g->load_hist, ns);
	counter_add(&s->load_blocks, blocks);
	counter_add(&s->bytes_loaded, bytes);
}

/* ---- sessions (control thread) ------------------------------------- */

/* A HELLO was refused, or a connection closed to make room for another. */
static inline void account_session_refused(struct counters_global *g)
{
	counter_add(&g->sessions_refused, 1);
}

/* An engine or scheduler session was handed to its worker. */
static inline void account_session_open(struct counters_global *g)
{
	counter_add(&g->sessions_total, 1);
}

/* A session counted by account_session_open() was freed. */
static inline void account_session_closed(struct counters_global *g)
{
	counter_add(&g->sessions_closed, 1);
}

/* A session was ended for breaking the ring protocol. */
static inline void account_protocol_error(struct counters_global *g)
{
	counter_add(&g->protocol_errors, 1);
}

#endif /* KVS_ACCOUNT_H */
