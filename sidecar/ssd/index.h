/* SPDX-License-Identifier: MIT */
/*
 * The SSD index: where each block on SSD is, keyed by (namespace id,
 * 16-byte key, shard), over every drive of the tier.  52 bytes per block
 * plus a 4-byte bucket: 10 TB of 2 MiB blocks (5.2 M blocks) take about
 * 290 MB.  Entries live in chunks of 64 Ki entries, addressed by a u32
 * index (no pointers, so an entry costs no more than its fields); hash
 * chains and region lists are u32 links.
 *
 * States: a WRITING entry exists from ssd_write() until its write
 * completed, so the same block is not queued twice, but ssd_lookup()
 * does not see it; VALID is visible; a DEAD entry (its payload failed a
 * checksum) is out of the hash and waits on its region's list for the
 * region to be reused.
 *
 * Locking: the hash is split into 32 stripes, each with its own mutex;
 * lookups and inserts take one stripe lock.  Region lists belong to the
 * drive thread that owns the region (region.h) and are not locked.  A
 * resize takes every stripe lock in order, under whatever its caller
 * holds (kvstashd's store lock: evictions queue writes under it): 32
 * keeps that within what lock checkers follow per thread (TSan: 64),
 * and one lookup per missed key contends little more than with 64.  The entry allocator has its
 * own lock, never held with a stripe lock.  Namespaces are interned
 * under their own lock.
 *
 * Lock order: stripe lock, then nothing (the allocator is called after
 * the stripe lock is dropped, or before it is taken).
 */
#ifndef KVS_SSD_INDEX_H
#define KVS_SSD_INDEX_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ssd/format.h"
#include "ssd/region-alloc.h"

#define SSD_INDEX_STRIPES  32u
#define SSD_CHUNK_SHIFT	   16u
#define SSD_CHUNK_ENTRIES  (1u << SSD_CHUNK_SHIFT)
#define SSD_MAX_NAMESPACES 65536u

enum ssd_ent_state {
	SSD_E_FREE,
	SSD_E_WRITING,
	SSD_E_VALID,
	SSD_E_DEAD,
};

struct ssd_ent {
	uint8_t key[SSD_KEY_SIZE];
	uint32_t ns;
	uint16_t shard;
	uint8_t drive;
	uint8_t state;
	uint32_t region;
	uint32_t region_seq;
	uint32_t off_units; /* header offset from the region's start, in SSD_UNITs */
	uint32_t len;
	uint32_t crc;
	uint32_t hnext; /* hash chain (or free list) */
	uint32_t rnext; /* region list */
};
_Static_assert(sizeof(struct ssd_ent) == 52, "an SSD index entry stays small");

/* Where a VALID block is: what ssd_lookup() returns. */
struct ssd_loc {
	uint32_t drive;
	uint32_t region;
	uint32_t region_seq;
	uint32_t off_units;
	uint32_t len;
	uint32_t crc;
	uint32_t ent;
};

struct ssd_ns_ent;

struct ssd_index {
	pthread_mutex_t stripe[SSD_INDEX_STRIPES];
	uint32_t *buckets; /* SSD_NO_ENTRY-terminated chains; stripe = bucket % STRIPES */
	uint32_t nbuckets; /* power of two */
	uint64_t seed[2];
	uint64_t nvalid;   /* atomic (relaxed): statistics */
	uint64_t nwriting; /* atomic (relaxed) */

	pthread_mutex_t alloc_lock;
	struct ssd_ent **chunks; /* chunk table; a chunk pointer is set once */
	uint32_t nchunks;
	uint32_t max_chunks;
	uint32_t free_head;
	uint64_t nalloc; /* entries handed out */

	pthread_mutex_t ns_lock;
	struct ssd_ns_ent **ns_by_id;
	uint32_t nr_ns;
	uint32_t *ns_buckets;
	uint32_t ns_nbuckets;
};

/* @expect: blocks expected (sizes the hash; it grows past it). */
int ssd_index_init(struct ssd_index *idx, uint64_t expect, uint64_t max_entries);
void ssd_index_fini(struct ssd_index *idx);

static inline struct ssd_ent *ssd_ent_at(struct ssd_index *idx, uint32_t i)
{
	return &idx->chunks[i >> SSD_CHUNK_SHIFT][i & (SSD_CHUNK_ENTRIES - 1)];
}

/* Intern a namespace identity: the same bytes always give the same id. */
int ssd_index_ns(struct ssd_index *idx, const void *ident, size_t len, uint32_t *ret_id);
/* The identity of @id (valid for the index's life). */
const uint8_t *ssd_index_ns_ident(struct ssd_index *idx, uint32_t id, uint16_t *ret_len);

/*
 * Insert a WRITING entry for (ns, key, shard) on @drive.  -EEXIST when an
 * entry (WRITING or VALID) is there already; -ENOMEM.
 */
int ssd_index_begin(struct ssd_index *idx, uint32_t ns, const uint8_t *key, uint16_t shard,
		    uint8_t drive, uint32_t *ret_ent);

/* A WRITING entry's write completed: VALID at @loc, linked on @r's list. */
void ssd_index_commit(struct ssd_index *idx, uint32_t ent, struct ssd_region *r,
		      const struct ssd_loc *loc);

/* Drop a WRITING entry (write failed or dropped): out of the hash, freed. */
void ssd_index_abort(struct ssd_index *idx, uint32_t ent);

/*
 * Recovery: insert a VALID block found on disk.  If the key is already
 * there, the newer copy (region sequence, then offset) wins; the loser is
 * DEAD.  Returns 1 if inserted, 0 if an existing newer copy won.
 */
int ssd_index_recover(struct ssd_index *idx, uint32_t ns, const uint8_t *key, uint16_t shard,
		      struct ssd_region *r, const struct ssd_loc *loc);

/* Find a VALID entry. 0 and *@ret_loc, or -ENOENT. */
int ssd_index_lookup(struct ssd_index *idx, uint32_t ns, const uint8_t *key, uint16_t shard,
		     struct ssd_loc *ret_loc);

/* Is there any entry (WRITING or VALID)? */
bool ssd_index_contains(struct ssd_index *idx, uint32_t ns, const uint8_t *key, uint16_t shard);

/*
 * A VALID entry's payload failed its checksum: out of the hash, DEAD
 * (if it is still the entry @loc names: same region and sequence).  Only
 * on the thread of the drive that holds it (the only one that frees its
 * entries).
 */
void ssd_index_kill(struct ssd_index *idx, const struct ssd_loc *loc);

/* Region @r is being reused: every entry on its list out and freed; returns how many were VALID. */
uint32_t ssd_index_drop_region(struct ssd_index *idx, struct ssd_region *r);

/* Bytes of DRAM the index takes (entries, chunks and buckets). */
uint64_t ssd_index_bytes(const struct ssd_index *idx);

#endif /* KVS_SSD_INDEX_H */
