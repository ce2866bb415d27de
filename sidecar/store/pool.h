/* SPDX-License-Identifier: MIT */
/*
 * Host pool: one region of pinned host memory per NUMA node that serves a
 * device, bound to that node (libnuma), hugetlb pages when configured
 * (else transparent hugepages advised), pre-faulted in parallel by
 * threads running on the node.
 *
 * Allocation: each region is cut into equal extents; an extent is given
 * to one slot class (one slot size, e.g. one model's block) and cut into
 * slots of that size.  Allocating and freeing a slot is O(1): a per
 * (region, class) list of extents with free slots, and a free-index stack
 * inside each extent.  An emptied extent goes back to the region, so
 * several slot sizes share the memory; pool_pick_extent() finds an extent
 * to take from an over-provisioned class when a class needs room.
 *
 * Locking: the pool is not thread-safe by itself; the store (store.c)
 * calls it under its lock.  Counters readable without the lock are
 * updated with relaxed atomics.
 */
#ifndef KVS_POOL_H
#define KVS_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include <urcu/list.h>

#define POOL_MAX_CLASSES 64u
#define POOL_MAX_REGIONS 16u
#define POOL_NO_CLASS UINT32_MAX

struct kvs_config;

struct slot {
	uint8_t *addr;
	uint32_t ext; /* extent index within its region */
	uint16_t region;
	uint16_t resv;
	uint32_t idx; /* slot index within its extent */
};

struct pool_extent {
	uint8_t *base;
	uint32_t class_id; /* POOL_NO_CLASS when free */
	uint32_t nslots;
	uint32_t nused;
	uint32_t free_top;	/* entries in free_stack */
	uint32_t *free_stack;	/* slot indices */
	void **owners;		/* per slot: the store's object, or NULL */
	/*
	 * Per slot: bumped each time it is freed, before it can be handed
	 * out again (pool_slot_generation()).  A peer that was sent a slot's
	 * bytes checks it did not change meanwhile: the seqlock of
	 * libkvspeer's generation() host op (include/kvstash/peer.h).
	 */
	uint64_t *gens;
	struct cds_list_head node; /* in the class's partial list */
	bool in_partial;
};

struct pool_region_class {
	struct cds_list_head partial; /* extents with a free slot */
	uint32_t nr_extents;
};

struct pool_region {
	int node; /* NUMA node; -1: not bound */
	bool huge;
	uint8_t *base;
	uint64_t size;
	uint32_t nr_extents;
	struct pool_extent *extents;
	uint32_t *free_extents; /* stack of free extent indices */
	uint32_t nr_free_extents;
	uint32_t steal_hand;
	uint64_t used_bytes;	/* slot bytes handed out (relaxed atomic) */
	uint64_t ready_ns;	/* time taken to map, pre-fault and pin or lock */
	/*
	 * Start-up (pool.c prefault()): chunks of whole pin units, one per
	 * CPU, each faulted by one thread and pinned unit by unit by another.
	 */
	uint64_t pin_unit;	/* bytes per pin (whole extents; the last one may be shorter) */
	unsigned nr_pins;	/* pins of pin_unit bytes from base, undone by pool_destroy() */
	unsigned nr_chunks;	/* chunks, i.e. faulting threads */
	bool pinned;		/* the whole region pinned by pool->pin */
	uint64_t fault_ns;	/* the slowest chunk's faulting */
	uint64_t pin_ns;	/* the slowest chunk's pinning, which runs alongside */
	struct pool_region_class cls[POOL_MAX_CLASSES];
};

struct pool_class {
	uint64_t slot_bytes;
	uint32_t slots_per_extent;
	uint32_t users;	   /* layouts using the class */
	uint64_t demand;   /* decayed allocation count: the fair share */
};

/*
 * Pins pool memory for the movers (e.g. cudaHostRegister), called by the
 * start-up threads at once, each on its own range of already touched
 * pages (whole extents, so a slot never spans two pins); unpin() gets a
 * range's base.  pin() returns 0 or -errno and leaves nothing pinned on
 * failure.
 */
struct pool_pin {
	int (*pin)(void *base, uint64_t size);
	void (*unpin)(void *base);
};

#define POOL_MAX_THREADS 64u

struct pool {
	const struct pool_pin *pin; /* NULL: nothing pins the pool */
	uint64_t extent_size;
	uint32_t nr_regions;
	struct pool_region regions[POOL_MAX_REGIONS];
	uint32_t nr_classes;
	struct pool_class classes[POOL_MAX_CLASSES];
	uint64_t allocs_since_decay;
	uint64_t capacity_bytes;
};

/*
 * Create the pool over @nodes (nr_nodes regions; node -1: unbound), each
 * of size/nr_nodes bytes, mapped, bound, pre-faulted and pinned by @pin
 * (NULL: locked instead) by threads on the region's node.  Logs progress
 * and the time taken.  -ENOMEM with a clear log line when hugepages are
 * short; @pin's error with nothing left pinned.  pool_destroy() unpins.
 */
int pool_create(const struct kvs_config *cfg, const int *nodes, unsigned nr_nodes,
		const struct pool_pin *pin, struct pool **ret_pool);
/* Free 2 MiB hugetlb pages on NUMA @node (-1: the whole host); 0 if unknown. */
unsigned pool_free_hugepages(int node);
void pool_destroy(struct pool *pool);

/* Region serving NUMA node @node (the first one when none matches). */
unsigned pool_region_for_node(const struct pool *pool, int node);

/*
 * Class for slots of @slot_bytes (created on first use; users counted).
 * -E2BIG if a slot would not fit an extent, -ENOSPC with too many sizes.
 */
int pool_class_get(struct pool *pool, uint64_t slot_bytes, uint32_t *ret_class);
void pool_class_put(struct pool *pool, uint32_t class_id);

/* Take a slot; -ENOSPC when neither a free slot nor a free extent is left. */
int pool_alloc(struct pool *pool, unsigned region, uint32_t class_id, void *owner,
	       struct slot *ret_slot);
void pool_free(struct pool *pool, const struct slot *slot);

/*
 * The generation of a slot in use (any thread, no lock: the caller holds
 * what keeps the slot allocated, e.g. a pin on its block, so its extent
 * keeps its class and arrays).  Load-acquire, pairing with the bump and
 * release fence in pool_free().
 */
static inline uint64_t pool_slot_generation(const struct pool *pool, const struct slot *slot)
{
	const struct pool_extent *e = &pool->regions[slot->region].extents[slot->ext];

	return __atomic_load_n(&e->gens[slot->idx], __ATOMIC_ACQUIRE);
}

/*
 * Should @class_id grow by taking an extent from another class instead of
 * evicting its own blocks?  True when it holds fewer extents of the region
 * than its share of recent demand.
 */
bool pool_class_under_share(const struct pool *pool, unsigned region, uint32_t class_id);

/*
 * An extent of another, over-provisioned class in @region whose every
 * used slot's owner passes @evictable; NULL if none.  Advances a hand so
 * successive calls spread over the region.
 */
struct pool_extent *pool_pick_extent(struct pool *pool, unsigned region, uint32_t class_id,
				     bool (*evictable)(void *owner, void *arg), void *arg);

/*
 * The same from any other class, whatever its share: the last resort of a
 * class that has nothing of its own to evict.  Shares follow decayed
 * demand, so a class that just became busy deserves less than one SAVE
 * needs; without this, that SAVE failed with -ENOSPC in a pool full of
 * idle blocks of another class.
 */
struct pool_extent *pool_pick_extent_any(struct pool *pool, unsigned region, uint32_t class_id,
					 bool (*evictable)(void *owner, void *arg), void *arg);

uint64_t pool_used_bytes(const struct pool *pool);

#endif /* KVS_POOL_H */
