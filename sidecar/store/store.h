/* SPDX-License-Identifier: MIT */
/*
 * The block store: which KV blocks are resident, where their bytes are,
 * who may see them, and which one goes when space runs out.
 *
 * Index: liburcu's lock-free RCU hash table keyed by (namespace, 16-byte
 * key, shard); each entry is one shard of a block, stored in one pool
 * slot.  A block gathers the shards of one key (tp_size of them, or one
 * for a replicated layout) and becomes visible to QUERY ("sealed") only
 * when every shard is saved.  Lookups take no lock.
 *
 * Pins: a lease pins the blocks it covers; a pinned block is never
 * evicted.  pins is an atomic count; an evictor claims a block by moving
 * it from 0 to BLOCK_EVICTING with a CAS, and a pinner never moves it
 * away from BLOCK_EVICTING, so the two cannot both win.
 *
 * Locking: the store lock serialises everything that changes the index,
 * the pool or the S3-FIFO queues (save begin/end, eviction, reclaim).
 * QUERY and pin/unpin take no lock.
 *
 * Tenants: what a SAVE cannot evict is pinned (a lease, a LOAD), partial
 * (waiting for other ranks' shards) or in flight (being copied).  Each
 * instance is a tenant: the store charges it the pool bytes of every
 * shard it took for a block not sealed yet ("unsealed": in flight or
 * partial) and refuses a SAVE's keys past [pool] unsealed_share of the
 * pool (-EDQUOT).  When a SAVE finds nothing to evict, it takes from
 * whoever holds more than its own instance: the oldest partial blocks of
 * the tenant holding the most unsealed bytes, then (lease.c) the oldest
 * unused leases of the instance pinning the most.  Pins stay unbounded
 * while nobody needs the room: a lease is only revoked for a SAVE that
 * would fail otherwise.
 */
#ifndef KVS_BLOCK_H
#define KVS_BLOCK_H

#include <stdbool.h>
#include <stdint.h>

/* The flavour first: rculfhash.h builds on it. */
#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

#include <kvstash/abi.h>
#include <kvstash/wire.h>

#include "store/evict.h"
#include "store/pool.h"

#define BLOCK_EVICTING (-1)

struct nspace;
struct registration;
struct kvs_config;
struct instance;

/*
 * A tenant's account in the store (one per instance).  The instance
 * makes it and gives it up with store_tenant_put(); it is freed once
 * that happened and nothing is charged to it any more, so a partial
 * block may outlive the instance that saved it.  Store lock.
 */
struct store_tenant {
	uint64_t unsealed;	   /* pool bytes of its shards in unsealed blocks */
	struct cds_list_head node; /* in the store's list while unsealed > 0 */
	bool gone;		   /* store_tenant_put() was called */
	char name[KVS_NAME_MAX];   /* the instance's, for logs */
};

enum shard_state {
	SHARD_EMPTY,
	SHARD_WRITING, /* in the index; its copy is in flight */
	SHARD_DONE,
};

struct shard {
	struct cds_lfht_node hnode;
	struct block *blk;
	struct slot slot;
	uint16_t idx;
	uint16_t state;
	struct store_tenant *tenant; /* charged for the slot until the block seals (store lock) */
};

struct block {
	struct s3fifo_node qn; /* in the class's S3-FIFO queue once sealed */
	struct nspace *ns;
	/*
	 * A copy of ns->id for lock-free lookups: a reader still walking a
	 * deleted node must not touch the namespace, which may be gone once
	 * its last block went (nspace_sweep() does not wait for readers).
	 */
	uint32_t ns_id;
	uint8_t key[KVS_KEY_SIZE];
	uint32_t class_id;
	uint32_t nshards;
	uint32_t present;	/* shards DONE (store lock) */
	uint32_t writers;	/* shards WRITING (store lock) */
	int32_t pins;		/* atomic; BLOCK_EVICTING when claimed */
	uint8_t sealed;		/* release/acquire: see seal() in store.c */
	uint64_t bytes;		/* pool bytes of all its shards: what a pin holds */
	uint64_t created_ns;
	struct cds_list_head partial; /* in the partial list until sealed */
	struct cds_list_head ns_node; /* in its namespace's block list (store lock) */
	struct rcu_head rcu;
	struct shard shards[];
};

struct save_ent {
	struct shard *shard;
	uint32_t block_id;
};

struct store_stats {
	uint64_t resident;	    /* sealed blocks */
	uint64_t partial;	    /* blocks waiting for shards */
	uint64_t evictions;
	uint64_t partial_reclaimed;
};

int store_init(struct pool *pool, const struct kvs_config *cfg);
void store_fini(void);
struct pool *store_pool(void);

/*
 * SAVE, phase 1: for each key (with the engine's block id), skip it if
 * this shard is already in the index, else take a slot (evicting if
 * needed) and insert the shard as WRITING, charged to @inst's tenant.
 * @ents (n entries) receives the shards to copy; counts come back in the
 * ret_ values.  Keys that get no slot are counted in *@ret_nospace, keys
 * past the tenant's unsealed share in *@ret_quota.  May revoke leases of
 * other instances (see Tenants above), with the store lock dropped.
 */
void store_save_begin(struct instance *inst, struct nspace *ns, const struct registration *reg,
		      const uint8_t *keys, const uint32_t *block_ids, uint32_t n,
		      struct save_ent *ents, uint32_t *ret_nents, uint32_t *ret_skipped,
		      uint32_t *ret_nospace, uint32_t *ret_quota);

/* SAVE, phase 2 (after the copy): DONE and seal when @ok, else drop. */
void store_save_end(struct save_ent *ents, uint32_t n, bool ok);

/*
 * QUERY: the longest prefix of @keys whose blocks are sealed in @ns.
 * With @pin, each hit is pinned and stored in @ret_blocks, and the pool
 * bytes they hold are added up in *@ret_bytes.  No lock.
 */
uint32_t store_query(struct nspace *ns, const uint8_t *keys, uint32_t n, bool pin,
		     struct block **ret_blocks, uint64_t *ret_bytes);

void block_unpin(struct block *b);

/* Reclaim partial blocks older than @timeout_ns; returns how many. */
unsigned store_reclaim_partial(uint64_t timeout_ns);

void store_get_stats(struct store_stats *ret);

/* A tenant for instance @name (no lock: nothing sees it before its first charge). */
struct store_tenant *store_tenant_new(const char *name);
/* The instance is gone: free the account once nothing is charged to it.  NULL is fine. */
void store_tenant_put(struct store_tenant *t);

/*
 * Drop every block of @ns, a namespace no session uses any more (so none
 * is pinned or being copied), to give its slot in the namespace table
 * to a new one.  Returns how many blocks went.
 */
unsigned store_drop_nspace(struct nspace *ns);

/*
 * Pool classes (taken under the store lock, for the control thread).
 * With every class taken, an unused one (no registration) gives its slot
 * up: its blocks are evicted, the one of least recent demand first.
 */
int store_class_get(uint64_t slot_bytes, uint32_t *ret_class);
void store_class_put(uint32_t class_id);

/* Pool figures per region, under the store lock. */
struct store_region_stats {
	int node;
	bool huge;
	uint64_t capacity_bytes;
	uint64_t used_bytes;
	uint32_t extents_total;
	uint32_t extents_free;
};
unsigned store_region_stats(struct store_region_stats *ret, unsigned max);

/* Drop every block (shutdown). */
void store_clear(void);

#endif /* KVS_BLOCK_H */
