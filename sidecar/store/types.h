/* SPDX-License-Identifier: MIT */
/*
 * The store's shared data: the types its files (store.c, core.c,
 * spill.c, query.c, index.c) and its users (io/, control/) see, and no
 * functions but inline accessors.  Data only, so the SSD tier's side
 * (spill.c) can know a block without including the store that calls it
 * (store.h, core.h): store.h includes this, and so does every file of
 * the store; this includes nothing of them.  What the fields mean, and
 * who may touch them when, is in store.h's comment.
 */
#ifndef KVS_STORE_TYPES_H
#define KVS_STORE_TYPES_H

#include <stdbool.h>
#include <stdint.h>

/* The flavour first: rculfhash.h builds on it. */
#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

#include <kvstash/abi.h>
#include <kvstash/stats.h>
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
	uint8_t sealed;	   /* release/acquire: see seal() in core.c */
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
	/*
	 * The SSD tier as the store uses it (spills, SSD hits; ssd_get_stats()
	 * has the drives' side): the rows of source STORE of KVS_STATS_SSD
	 * (<kvstash/stats.h>), so a counter is one row there.
	 */
	KVS_STATS_SSD(KVS_STATS_STORE_MEMBER_)
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

/* A QUERY across both tiers: store_query_tiers() (store.h). */
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

/* BLOCK_RESIDENT, BLOCK_READING or BLOCK_FAILED; load-acquire (pairs with the read's end). */
static inline enum block_tier block_tier(const struct block *b)
{
	return (enum block_tier)__atomic_load_n(&b->tier, __ATOMIC_ACQUIRE);
}

#endif /* KVS_STORE_TYPES_H */
