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
 * fills these types (control/registration.h, control/nspace.h,
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

/* The flavour first: rculfhash.h builds on it. */
#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

#include <kvstash/abi.h>
#include <kvstash/wire.h>

#include "store/evict.h"
#include "store/pool.h"

#define BLOCK_EVICTING (-1)

struct store;
struct lease_table;
struct lease_holder;

/*
 * A namespace as the store sees it: the id in every index key of its
 * blocks, and those blocks.  Its owner (control/nspace.c) embeds it,
 * gives each live namespace its own id, and frees it only once `blocks`
 * read 0 with load-acquire (pairing with the release in the store's
 * block_destroy()) while nothing can add a block to it.
 */
struct store_ns {
	uint32_t id;
	uint64_t blocks;	   /* atomic: its blocks (resident or partial) */
	struct cds_list_head list; /* its blocks (store lock) */
	/*
	 * Its identity beyond this store (the cluster registry's digest of
	 * name and geometry), what the hooks report; set by the owner before
	 * the namespace's first SAVE (the registration's store-release
	 * publishes it to the workers) and constant after.  tagged false: the
	 * hooks skip its blocks.
	 */
	bool tagged;
	uint8_t tag[KVS_KEY_SIZE];
	/*
	 * Its place in the SSD tier (store_ns_tier()): its identity there
	 * and what a block read back needs in DRAM.  Written once, before
	 * the store-release of on_ssd; read after its load-acquire.
	 */
	bool on_ssd;
	uint32_t ssd_ns;
	uint64_t slot_bytes;
	uint32_t nshards;
};

void store_ns_init(struct store_ns *ns, uint32_t id);

/*
 * Where a session's shards go: its layout's slot class (held with
 * store_class_get()), the pool region (NUMA node) of its worker, and its
 * shard of each block.  Immutable while any SAVE uses it.
 */
struct store_place {
	uint32_t class_id;
	unsigned region;
	uint32_t shard;	  /* tp_rank, or 0 if replicated */
	uint32_t nshards; /* tp_size, or 1 if replicated */
};

/*
 * A tenant's account in the store (one per instance).  The instance
 * makes it and gives it up with store_tenant_put(); it is freed once
 * that happened and nothing is charged to it any more, so a partial
 * block may outlive the instance that saved it.  Store lock.
 */
struct store_tenant {
	struct store *st;
	uint64_t unsealed;	   /* pool bytes of its shards in unsealed blocks */
	struct cds_list_head node; /* in the store's list while unsealed > 0 */
	bool gone;		   /* store_tenant_put() was called */
	/*
	 * The instance's lease holder: what it pins itself, when its SAVEs
	 * revoke the leases of those pinning more (store_params.revoke).
	 * Read only by store_save_begin(), whose caller holds the instance,
	 * so never after store_tenant_put().  NULL: its SAVEs revoke nothing.
	 */
	struct lease_holder *leases;
	char name[KVS_NAME_MAX]; /* the instance's, for logs */
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

/*
 * Where a block's bytes are (block.tier, release/acquire): in DRAM, or
 * still being read from SSD into its slots (a QUERY's SSD hit, pinned by
 * the lease like any hit, invisible to SAVE's eviction), or gone because
 * that read failed (its slots are free; the block stays only until the
 * last pin goes, so a LOAD sees the failure: store_reclaim_partial()).
 */
enum block_tier {
	BLOCK_RESIDENT,
	BLOCK_READING,
	BLOCK_FAILED,
};

struct block {
	struct s3fifo_node qn; /* in the class's S3-FIFO queue once sealed */
	struct store_ns *ns;
	/*
	 * A copy of ns->id for lock-free lookups: a reader still walking a
	 * deleted node must not touch the namespace, which may be gone once
	 * its last block went (nspace_sweep() does not wait for readers).
	 */
	uint32_t ns_id;
	uint8_t key[KVS_KEY_SIZE];
	uint32_t class_id;
	uint32_t nshards;
	uint32_t present;  /* shards DONE (store lock) */
	uint32_t writers;  /* shards WRITING (store lock) */
	int32_t pins;	   /* atomic; BLOCK_EVICTING when claimed */
	uint8_t sealed;	   /* release/acquire: see seal() in store.c */
	uint8_t tier;	   /* enum block_tier: release/acquire */
	uint8_t read_err;  /* a shard's read from SSD failed (store lock) */
	uint32_t spilling; /* evicted: shards still being written to SSD (store lock) */
	uint8_t rescued;   /* taken back by a QUERY while spilling (store lock) */
	uint8_t ahead;	   /* resident, shards being written ahead of eviction (store lock) */
	uint8_t ahead_err; /* one of those writes did not make it (store lock) */
	uint8_t on_ssd;	   /* a copy was written or read back: a hint, the index decides */
	uint32_t uses;	   /* QUERY hits (relaxed): its value when it spills */
	uint64_t bytes;	   /* pool bytes of all its shards: what a pin holds */
	uint64_t created_ns;
	struct cds_list_head partial; /* in the partial list until sealed */
	struct cds_list_head ns_node; /* in its namespace's list (store lock) */
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
	/* The SSD tier, as the store uses it (ssd_get_stats() has the drives' side). */
	uint64_t spilled;	/* evicted blocks whose shards were queued for SSD */
	uint64_t spill_skipped; /* evicted and not kept: already on SSD, refused, no room */
	uint64_t spill_failed;	/* queued, and the write did not make it */
	uint64_t spill_dropped; /* evicted unwritten, needed at once: the drive was behind */
	uint64_t ssd_hits; /* QUERY hits found on SSD (read back or, without a lease, counted) */
	uint64_t ssd_read_failed; /* blocks whose read back failed: a shorter prefix */
	uint64_t spilling_bytes;  /* pool bytes held by writes to SSD (gauge) */
	uint64_t written_ahead;	  /* resident blocks written to SSD while the drives were idle */
};

/*
 * What the store tells a listener (the cluster registry) about blocks
 * becoming visible and going: visible() when a block seals (every shard
 * saved), gone() when a sealed block leaves (evicted, dropped, cleared).
 * Called with the store lock held, from whichever thread changed the
 * block: they must not block and must not call into the store.  Only for
 * namespaces with a tag.  Together with store_scan() they let a listener
 * mirror the resident set: a scan started at any time plus the hooks from
 * then on see every change.
 */
struct store_hooks {
	/*
	 * @owner: store_save_end()'s, whose SAVE (or peer fetch: the fetching
	 * session's) sealed it; NULL: nobody's (a read back from the SSD).
	 */
	void (*visible)(void *arg, const uint8_t tag[KVS_KEY_SIZE], const uint8_t key[KVS_KEY_SIZE],
			void *owner);
	void (*gone)(void *arg, const uint8_t tag[KVS_KEY_SIZE], const uint8_t key[KVS_KEY_SIZE]);
	void *arg;
};

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

/* SAVE, phase 2 (after the copy): DONE and seal when @ok, else drop. */
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
struct store_query_req {
	const struct store_ns *ns;
	const uint8_t *keys;
	uint32_t n;
	bool pin;
	bool dram_only;
	unsigned region;	   /* pool region for blocks read back */
	struct block **ret_blocks; /* with @pin: n entries */
};

struct store_query_res {
	uint32_t hits;	  /* the prefix, both tiers */
	uint32_t ssd;	  /* of them, found on SSD by this QUERY */
	uint32_t pending; /* of them, still being read (a LOAD waits for them) */
	uint64_t bytes;	  /* with @pin: pool bytes the hits hold */
};

void store_query_tiers(struct store *st, const struct store_query_req *q,
		       struct store_query_res *ret);

/* BLOCK_RESIDENT, BLOCK_READING or BLOCK_FAILED; load-acquire (pairs with the read's end). */
static inline enum block_tier block_tier(const struct block *b)
{
	return (enum block_tier)__atomic_load_n(&b->tier, __ATOMIC_ACQUIRE);
}

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
