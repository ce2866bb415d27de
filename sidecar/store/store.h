/* SPDX-License-Identifier: MIT */
/*
 * The DRAM tier of the block store: which KV blocks are resident in the
 * host pool, where their bytes are, who may see them, and which one goes
 * when space runs out.  A handle (struct store), so another tier (SSD)
 * can stand beside it with its own index and read into its slots.
 *
 * What it is given is only what it needs: a pool (store_new()), and per
 * SAVE a tenant, a namespace (struct store_ns) and where the shards go
 * (struct store_place: slot class, pool region, shard, shard count).  It
 * includes nothing of the control plane; the control plane embeds and
 * fills these types (control/reg-build.h, control/nspace.h,
 * control/instance.h).
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
 * Locking: the store lock (one per store) serialises everything that
 * changes its index, its pool or its S3-FIFO queues (save begin/end,
 * eviction, reclaim).  QUERY and pin/unpin take no lock.  Every thread
 * calling in must be a registered RCU reader (urcu_memb_register_thread()).
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
#ifndef KVS_STORE_H
#define KVS_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "store/types.h"

void store_ns_init(struct store_ns *ns, uint32_t id);

/* One sealed block, as store_scan() reports it. */
struct store_scan_ent {
	uint8_t tag[KVS_KEY_SIZE];
	uint8_t key[KVS_KEY_SIZE];
};

/* What a store is made of. */
struct store_params {
	struct pool *pool;	 /* its slots: the caller's, outliving the store */
	uint32_t unsealed_share; /* percent of a region one tenant may hold unsealed */
	/*
	 * A SAVE of @saver found nothing to evict: unpin others' blocks
	 * (lease_revoke_for() on @leases), returning how many leases went.
	 * Called without the store lock.  NULL: nothing is revoked.  A hook,
	 * not a call, so the store does not depend on the lease table that
	 * depends on it (leases pin its blocks).
	 */
	unsigned (*revoke)(struct lease_table *leases, const struct lease_holder *saver,
			   uint64_t need);
	struct lease_table *leases;
	/* Optional: the caller's, outliving the store (NULL: none). */
	const struct store_hooks *hooks;
	/* Threads that help long QUERYs look up their keys, besides their worker (at most 15). */
	unsigned query_helpers;
};

/* A store over @p->pool, with its index and its resizer thread. */
int store_new(const struct store_params *p, struct store **ret);
/* Drop every block, stop the resizer; the pool stays (the caller's).  NULL is fine. */
void store_free(struct store *st);
struct pool *store_pool(const struct store *st);

/*
 * SAVE, phase 1: for each key (with the engine's block id), skip it if
 * shard @p->shard of it is already in the index, else take a slot
 * (evicting if needed) and insert the shard as WRITING, charged to @t
 * (NULL: nobody).  @ents (n entries) receives the shards to copy; counts
 * come back in the ret_ values.  Keys that get no slot are counted in
 * *@ret_nospace, keys past the tenant's unsealed share in *@ret_quota.
 * May revoke leases of other instances (see Tenants above), with the
 * store lock dropped.
 */
void store_save_begin(struct store *st, struct store_tenant *t, struct store_ns *ns,
		      const struct store_place *p, const uint8_t *keys, const uint32_t *block_ids,
		      uint32_t n, struct save_ent *ents, uint32_t *ret_nents, uint32_t *ret_skipped,
		      uint32_t *ret_nospace, uint32_t *ret_quota);

/*
 * SAVE, phase 2 (after the copy): DONE and seal when @ok, else drop.
 */
void store_save_end(struct store *st, struct save_ent *ents, uint32_t n, bool ok, void *owner);

/*
 * QUERY: the longest prefix of @keys whose blocks are sealed in @ns.
 * With @pin, each hit is pinned and stored in @ret_blocks, and the pool
 * bytes they hold are added up in *@ret_bytes.  No lock.
 */
uint32_t store_query(struct store *st, const struct store_ns *ns, const uint8_t *keys, uint32_t n,
		     bool pin, struct block **ret_blocks, uint64_t *ret_bytes);

/*
 * QUERY across both tiers.  The DRAM walk is store_query()'s; where it
 * ends, with an SSD tier and @dram_only false, the prefix goes on through
 * the blocks every shard of which is on SSD: with @pin each becomes a
 * block READING into slots of @region (the store lock, once, for all of
 * them), its reads started at once in prefix order; without @pin they
 * are only counted.  A block already READING (another QUERY's) is joined.
 */
void store_query_tiers(struct store *st, const struct store_query_req *q,
		       struct store_query_res *ret);

/* A pin from store_query() goes (any thread, no store needed). */
void block_unpin(struct block *b);

/*
 * The SSD tier (sidecar/ssd/): evicted blocks spill to it, QUERY reads
 * from it.  Set once, before any SAVE or QUERY; @ssd outlives the store's
 * use of it (ssd_close() before store_free(): its last callbacks free
 * slots).  With @write_ahead, idle drives write the coldest resident
 * blocks before their eviction (store_ssd_idle()).  @wake(@wake_arg) runs
 * when reads end (LOADs waiting on them go on); from a drive thread,
 * without the store lock.
 */
struct ssd;
void store_set_ssd(struct store *st, struct ssd *ssd, bool write_ahead, void (*wake)(void *arg),
		   void *wake_arg);

/*
 * The SSD tier's callbacks (struct ssd_config), @arg the store; the idle
 * hook may run before store_set_ssd() (it does nothing then).
 */
void store_ssd_write_done(void *arg, void *cookie, int res);
void store_ssd_read_done(void *arg, void *cookie, int res);
void store_ssd_idle(void *arg);

/*
 * Give @ns its identity in the SSD tier (name and geometry: a changed
 * geometry is another namespace there, so its old blocks are misses).
 * Owner, once, when the geometry is first set; no SSD tier: nothing.
 */
int store_ns_tier(struct store *st, struct store_ns *ns, const char *name, uint64_t fingerprint,
		  uint64_t slot_bytes, uint32_t tp_size, bool replicated);

/*
 * Reclaim partial blocks older than @timeout_ns, and blocks whose read
 * from SSD failed once nothing pins them; returns how many.
 */
unsigned store_reclaim_partial(struct store *st, uint64_t timeout_ns);

void store_get_stats(struct store *st, struct store_stats *ret);

/*
 * A tenant for instance @name, whose leases are @leases (see struct
 * store_tenant).  No lock: nothing sees it before its first charge.
 */
struct store_tenant *store_tenant_new(struct store *st, const char *name,
				      struct lease_holder *leases);
/* The instance is gone: free the account once nothing is charged to it.  NULL is fine. */
void store_tenant_put(struct store_tenant *t);

/*
 * Drop every block of @ns, a namespace no session uses any more (so none
 * is pinned or being copied), to give its slot in the namespace table
 * to a new one.  Returns how many blocks went.
 */
unsigned store_drop_nspace(struct store *st, struct store_ns *ns);

/*
 * Pool classes (taken under the store lock, for the control thread).
 * With every class taken, an unused one (no registration) gives its slot
 * up: its blocks are evicted, the one of least recent demand first.
 */
int store_class_get(struct store *st, uint64_t slot_bytes, uint32_t *ret_class);
void store_class_put(struct store *st, uint32_t class_id);

/* Pool figures per region, under the store lock. */
struct store_region_stats {
	int node;
	bool huge;
	uint64_t capacity_bytes;
	uint64_t used_bytes;
	uint32_t extents_total;
	uint32_t extents_free;
};
unsigned store_region_stats(struct store *st, struct store_region_stats *ret, unsigned max);

/* Drop every block (shutdown). */
void store_clear(struct store *st);

/*
 * The sealed blocks of tagged namespaces, in pool order from *@cursor
 * (0: the start): up to @max into @out, *@cursor advanced past them;
 * returns how many (0: the end).  Takes the store lock per call, so a
 * caller bounds the work of one call with @max.
 */
unsigned store_scan(struct store *st, uint64_t *cursor, struct store_scan_ent *out, unsigned max);

#endif /* KVS_STORE_H */
