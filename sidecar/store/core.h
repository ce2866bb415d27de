/* SPDX-License-Identifier: MIT */
/*
 * The store's core (core.c): the state of a store (struct store) and a
 * block's life under the store lock: made, given slots (evicting,
 * reclaiming, spilling ahead for them), charged to its tenants, sealed,
 * read back from SSD, evicted, destroyed.  store.c builds the public
 * calls of store.h on it; core.c calls down into the index, the DRAM
 * query walk, the pool, the S3-FIFO queues and the SSD tier's side
 * (spill.h), which calls it back only through the struct spill_cbs it is
 * given (core_tier_init()).  Nothing includes this but the store's own
 * files above it (store.c).
 *
 * Locking: every function below needs the store lock (store_lock())
 * unless it says otherwise.
 */
#ifndef KVS_STORE_CORE_H
#define KVS_STORE_CORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/evict.h"
#include "store/index.h"
#include "store/pool.h"
#include "store/query.h"
#include "store/spill.h"
#include "store/types.h"

#define EVICT_TRIES 64
/* Victims spilled ahead per slot taken: a bounded step (spill_ahead()). */
#define SPILL_AHEAD_MAX 16

struct store {
	pthread_mutex_t lock; /* the store lock */
	struct store_index index;
	/* The query helpers (query.h), waiting for long QUERYs' chunks. */
	struct query_pool query;

	struct pool *pool; /* the caller's */
	/* store_params.revoke and its table (may be NULL: nothing revoked). */
	unsigned (*revoke)(struct lease_table *, const struct lease_holder *, uint64_t);
	struct lease_table *leases;
	const struct store_hooks *hooks;	/* store_params.hooks; NULL: none */
	struct s3fifo queues[POOL_MAX_CLASSES]; /* sealed blocks per class */
	struct cds_list_head partial;		/* oldest first */
	struct cds_list_head tenants;		/* tenants with unsealed bytes */
	uint64_t unsealed_cap;			/* bytes one tenant may hold unsealed */
	struct store_stats stats;    /* counters: relaxed atomics (the SSD ones are the tier's) */
	struct cds_list_head failed; /* blocks whose read failed, until unpinned (store lock) */
	/* The SSD tier (store_set_ssd()), called through spill.h; it calls back through spill_cbs. */
	struct spill tier;
};

static inline void stat_add(uint64_t *c, int64_t v)
{
	__atomic_fetch_add(c, (uint64_t)v, __ATOMIC_RELAXED);
}

/*
 * Take and drop the store lock with the RCU read side writers need to
 * traverse the table (any thread, registered as an RCU reader).
 */
void store_lock(struct store *st);
void store_unlock(struct store *st);

/* No lock (store_new()): the tier's side, not attached yet, with the core's callbacks. */
void core_tier_init(struct store *st);

/* @t pays for @sh's slot until its block seals or the shard goes. */
void charge(struct store *st, struct shard *sh, struct store_tenant *t);
void uncharge(struct store *st, struct shard *sh);

/* Remove the block's shards, free their slots and it (after a grace period). */
void block_destroy(struct store *st, struct block *b);
/* A partial block goes, counted as reclaimed. */
void reclaim(struct store *st, struct block *b);
/*
 * Claim for eviction: sealed, unpinned and not still being written to
 * SSD, moved to BLOCK_EVICTING (the CAS pairs with query_pin()'s).
 */
bool claim(struct block *b);
/* A failed read's block, once unpinned: moved to BLOCK_EVICTING, as claim() does. */
bool claim_failed(struct block *b);
/*
 * @b claimed: evicted, remembered by its queue's ghost.  With @may_spill
 * it may go to SSD first: then its slots are freed only when the writes
 * end, and this returns false.
 */
bool evict(struct store *st, struct block *b, bool may_spill);

/* A slot of @p's class in its region for @sh, evicting if needed (for @t's SAVE). */
int take_slot(struct store *st, const struct store_place *p, const struct store_tenant *t,
	      struct shard *sh);
/* The block for (ns, key), found through any shard, or a new partial one (NULL: no memory). */
struct block *find_or_create(struct store *st, struct store_ns *ns, const struct store_place *p,
			     const uint8_t *key);
/* Every shard is DONE: publish the block (@owner: the hook's). */
void seal(struct store *st, struct block *b, void *owner);

/* @b claimed: if it is being written to SSD, taken back for a QUERY, pinned. */
bool rescue(struct block *b);
/* The class of @slot_bytes some registration holds, or POOL_NO_CLASS. */
uint32_t class_of_bytes(const struct store *st, uint64_t slot_bytes);
/*
 * (@q->ns, @key) is on SSD in every shard: a new block READING into slots
 * of @cls, pinned for the QUERY, its reads started.  NULL when it cannot
 * be: the prefix ends there.  *@ret_ended: a read ended here.
 */
struct block *read_back(struct store *st, const struct store_query_req *q, const uint8_t *key,
			uint32_t cls, bool *ret_ended);
/* One shard's read ended with @res; true once the block's last one did. */
bool read_end(struct store *st, struct shard *sh, int res);

/* Every class taken: give up the slot of an unused one; false if none could go. */
bool reclaim_class(struct store *st);

#endif /* KVS_STORE_CORE_H */
