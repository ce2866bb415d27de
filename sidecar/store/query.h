/* SPDX-License-Identifier: MIT */
/*
 * QUERY's DRAM walk (query.c): the lock-free lookups of a prefix of keys
 * in the index, each hit pinned or counted, on the caller's thread and,
 * for long QUERYs, on the store's query helper threads; and the pin
 * protocol itself (query_pin(), query_unpin()).  It sees the index and
 * the blocks (store/index.h, store/types.h), nothing of the store: the
 * store's QUERY across tiers (store_query_tiers()) calls it.
 */
#ifndef KVS_STORE_QUERY_H
#define KVS_STORE_QUERY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/index.h"
#include "store/types.h"

#define QUERY_MAX_HELPERS 15u

/* The query helpers, waiting for jobs under qlock. */
struct query_pool {
	const struct store_index *ix;
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct cds_list_head qjobs;
	bool qstop; /* qlock */
	unsigned nhelpers;
	pthread_t helpers[QUERY_MAX_HELPERS];
};

/* No helpers yet; lookups go to @ix (which outlives the pool). */
void query_pool_init(struct query_pool *qp, const struct store_index *ix);
/* Start up to @n helpers (at most QUERY_MAX_HELPERS): as many as start, none is fine. */
void query_pool_start(struct query_pool *qp, unsigned n);
/* Stop and join the helpers. */
void query_pool_stop(struct query_pool *qp);
void query_pool_fini(struct query_pool *qp);

/*
 * The DRAM prefix of @q from its first key: hits pinned into
 * @q->ret_blocks with @q->pin, else counted; the helpers take part from
 * QUERY_PAR_MIN keys.  Outside any read-side section (it takes its own).
 */
void query_dram(struct query_pool *qp, const struct store_query_req *q,
		struct store_query_res *ret);

/*
 * One key of a QUERY: @b counts as a hit (pinned into ret_blocks with
 * @q->pin) or ends the prefix.  A block READING from SSD is a hit still
 * pending: the LOAD waits for it.  RCU read side or the store lock.
 */
bool query_hit(struct block *b, const struct store_query_req *q, struct store_query_res *r);
/* A hit on @b, pinned if the QUERY pins: its bytes, its use. */
void query_counted(struct block *b, struct store_query_res *r);
/* Pin @b unless an evictor claimed it (pairs with the CAS in the store's claim()). */
bool query_pin(struct block *b);
/* A pin goes (any thread). */
void query_unpin(struct block *b);

#endif /* KVS_STORE_QUERY_H */
