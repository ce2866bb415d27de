/* SPDX-License-Identifier: MIT */
/*
 * The store's side of its second tier (sidecar/ssd/): the only file of
 * the store that talks to ssd/ssd.h.  spill.c writes evicted blocks to
 * the SSD (spill_block()) and, while the drives are idle, resident ones
 * ahead of their eviction (spill_idle()), ends those writes
 * (spill_write_done()), finds blocks there and starts their reads
 * (spill_has(), spill_read()), and counts what it did.
 *
 * The seam: the store core calls these functions; this module calls the
 * core back only through struct spill_cbs, given when the tier is made
 * (spill_init()), as CacheLib's navy RegionManager calls BlockCache back
 * through its RegionEvictCallback.  It includes the store's data
 * (store/types.h), never its code, so the two form no circle.
 *
 * Locking: unless a function says otherwise its caller holds the store
 * lock, which serialises every field below but the atomics named.
 */
#ifndef KVS_STORE_SPILL_H
#define KVS_STORE_SPILL_H

#include <stdbool.h>
#include <stdint.h>

#include "store/evict.h"
#include "store/pool.h"
#include "store/types.h"

struct ssd;

/* What the tier calls the store core back with; the store lock is held for each. */
struct spill_cbs {
	/* The last write of evicted @b ended and no QUERY took it back: it goes. */
	void (*drop)(void *core, struct block *b);
	/* @b, taken back by a QUERY mid-write (rescued), is evictable again: back in its queue. */
	void (*requeue)(void *core, struct block *b);
	void *core;
};

/* The tier's counters (relaxed atomics): struct store_stats's SSD fields. */
struct spill_stats {
	uint64_t spilled;
	uint64_t skipped;
	uint64_t failed;
	uint64_t dropped;
	uint64_t spilling_bytes; /* a gauge */
	uint64_t written_ahead;
};

/* Embedded in the store, which owns it; spill.c alone touches its fields. */
struct spill {
	struct ssd *ssd; /* NULL: no second tier */
	struct pool *pool;
	struct s3fifo *queues; /* the store's, one per class: walked by spill_idle() */
	struct spill_cbs cbs;
	void (*wake)(void *arg);
	void *wake_arg;
	uint64_t cap;	      /* pool bytes writes to SSD may hold */
	bool write_ahead;     /* spill_idle() writes (release/acquire) */
	uint64_t ahead_bytes; /* of writes ahead in flight (store lock; relaxed reads) */
	uint64_t dirty;	      /* sealed blocks saved, not known on SSD (likewise) */
	struct spill_stats stats;
};

/* No tier yet (spill_attach()); @queues and @cbs the store's, outliving @sp.  No lock. */
void spill_init(struct spill *sp, struct pool *pool, struct s3fifo *queues,
		const struct spill_cbs *cbs);
/*
 * The tier is @ssd (store_set_ssd()): once, before any SAVE or QUERY, no
 * lock; its store-release of write_ahead publishes the rest to the drive
 * threads' spill_idle_wanted().
 */
void spill_attach(struct spill *sp, struct ssd *ssd, bool write_ahead, void (*wake)(void *arg),
		  void *wake_arg);

/*
 * A tier is attached and @ns has its place there (load-acquire, pairing
 * with the store-release in spill_ns()).  Any thread, no lock.
 */
bool spill_on(const struct spill *sp, const struct store_ns *ns);
/* @ns's identity in the tier (store_ns_tier()); no tier: 0.  Control thread, no lock. */
int spill_ns(struct spill *sp, struct store_ns *ns, const char *name, uint64_t fingerprint,
	     uint64_t slot_bytes, uint32_t tp_size, bool replicated);

/*
 * Evicted @b (claimed) goes to SSD: true when a write is queued, and then
 * its slots stay until the writes end (the core's drop or requeue).
 */
bool spill_block(struct spill *sp, struct block *b);
/* Evicted @b goes unwritten, needed at once: counted if the tier would have kept it. */
void spill_note_dropped(struct spill *sp, const struct block *b);
/*
 * Should eviction run ahead of need, one victim of @slot_bytes more, with
 * @free_bytes free in the region (spill_ahead())?  No tier: never.
 */
bool spill_wants_ahead(const struct spill *sp, uint64_t free_bytes, uint64_t slot_bytes);

/* Sealed @b is in DRAM only (not on SSD): spill_idle()'s to write. */
void spill_block_sealed(struct spill *sp);
/* @b leaves the store (not counted there if it was on SSD). */
void spill_block_gone(struct spill *sp, const struct block *b);

/* A write to SSD of @cookie's (a shard) ended with @res (drive thread). */
void spill_write_done(struct spill *sp, void *cookie, int res);
/* Whether spill_idle() has anything to do (drive thread, no lock: relaxed hints). */
bool spill_idle_wanted(const struct spill *sp);
/* Idle drives: write the coldest resident blocks not on SSD yet, a bounded few. */
void spill_idle(struct spill *sp);

/* Every shard of (@ns, @key) is on SSD: -ENOENT if one is not.  Any thread, no lock needed. */
int spill_has(const struct spill *sp, const struct store_ns *ns, const uint8_t *key);
/*
 * Start the read of shard @shard of (@ns, @key) into @buf (@len bytes);
 * its end comes to store_ssd_read_done() with @cookie, unless this
 * returns -errno (refused at once: no callback).
 */
int spill_read(const struct spill *sp, const struct store_ns *ns, const uint8_t *key,
	       uint32_t shard, void *buf, uint64_t len, void *cookie);
/* Reads ended: waiting LOADs go on (any thread, without the store lock). */
void spill_wake(const struct spill *sp);

void spill_get_stats(const struct spill *sp, struct spill_stats *ret);

#endif /* KVS_STORE_SPILL_H */
