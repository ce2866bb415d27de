/* SPDX-License-Identifier: MIT */
/*
 * The store's index (index.c): liburcu's lock-free RCU hash table of
 * shards keyed by (namespace, 16-byte key, shard), its keyed hash, its
 * size, and the resizer thread that changes that size.  It knows shards
 * and blocks as data (store/types.h), nothing of the store.
 *
 * Locking: lookups and walks need an RCU read-side section (or the store
 * lock with one, as writers take it); index_add() and index_del() need
 * the store lock, which serialises the node count.  The resizer's own
 * lock (rlock) nests inside the store lock.
 */
#ifndef KVS_STORE_INDEX_H
#define KVS_STORE_INDEX_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/types.h"

/*
 * ThreadSanitizer cannot see liburcu's grace periods (the library is not
 * instrumented), so it takes every deferred free for a race with the last
 * reader, and reporting thousands of those made a TSan kvstashd take
 * minutes to exit.  Say what the grace period guarantees: the destroyer's
 * accesses and every lock-free reader's section happen before the free.
 */
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#define tsan_release(p) __tsan_release(p)
#define tsan_acquire(p) __tsan_acquire(p)
#else
#define tsan_release(p) ((void)(p))
#define tsan_acquire(p) ((void)(p))
#endif
/*
 * TSan's stand-in for "a grace period passed": one for the process, as
 * liburcu's grace periods are (every store shares the one RCU flavour).
 */
extern int index_readers_done;

/* End a read-side section of the store: before any free of what it saw. */
static inline void index_read_unlock(void)
{
	urcu_memb_read_unlock();
	tsan_release(&index_readers_done);
}

struct store_index {
	struct cds_lfht *ht;
	uint64_t seed[2];      /* keyed hash against collision floods */
	unsigned long nodes;   /* shards in the index (store lock) */
	unsigned long buckets; /* size last asked for (store lock) */
	pthread_t resizer;
	bool running;
	pthread_mutex_t rlock; /* the resizer's: nests inside the store lock */
	pthread_cond_t rcond;
	unsigned long resize_to; /* rlock; 0: nothing asked */
	bool stop;		 /* rlock */
};

/* An empty table and its hash keys; no resizer yet (index_start()). */
int index_init(struct store_index *ix);
/* Start the resizer thread: last, once what it may see is set. */
int index_start(struct store_index *ix);
/* Stop the resizer (before the last deletes: they then resize nothing). */
void index_stop(struct store_index *ix);
/* Destroy the table, empty, after the grace periods of its deletes. */
void index_fini(struct store_index *ix);

/* The keyed hash of (@ns_id, @shard, @key): the index's, and the S3-FIFO ghosts'. */
unsigned long index_hash(const struct store_index *ix, uint32_t ns_id, uint32_t shard,
			 const uint8_t *key);
/* Shard @shard of (@ns_id, @key), or NULL.  RCU read side (or the store lock). */
struct shard *index_lookup(const struct store_index *ix, uint32_t ns_id, uint32_t shard,
			   const uint8_t *key);
/* Store lock held: @sh (its block's namespace and key, its idx) in, or out. */
void index_add(struct store_index *ix, struct shard *sh);
void index_del(struct store_index *ix, struct shard *sh);
/* Every shard in the table, deleted ones maybe too (check their state).  Read side. */
struct shard *index_first(const struct store_index *ix, struct cds_lfht_iter *it);
struct shard *index_next(const struct store_index *ix, struct cds_lfht_iter *it);

#endif /* KVS_STORE_INDEX_H */
