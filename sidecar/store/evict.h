/* SPDX-License-Identifier: MIT */
/*
 * S3-FIFO eviction queue (Yang et al., "FIFO queues are all you need for
 * cache eviction", SOSP '23); kvstashd keeps one per pool class:
 *
 *   small  a probation FIFO that takes new entries, ~10 % of them;
 *   main   a FIFO scanned like a CLOCK: each entry has a use count that
 *          saturates at 3;
 *   ghost  fingerprints of entries recently evicted from small, no data.
 *
 * An entry used while in small moves to main when it reaches small's old
 * end; one never used is evicted there and leaves its fingerprint in the
 * ghost.  An entry inserted while its fingerprint is a ghost goes straight
 * to main (it was evicted too early once).  Main's oldest entry is
 * evicted when its count is 0; else the count drops by one and the entry
 * goes round again.
 *
 * Why S3-FIFO: kvstashd used SIEVE first, and tools/kvstash-evict-sim
 * (docs/PERFORMANCE.md) found it collapsing on multi-turn chat traces
 * above 10 % cache (hit ratio 0.41 against LRU's 0.84 at 15 %): every
 * resident history block is re-read by its conversation's next turn, so
 * SIEVE's hand only ever meets just-inserted blocks and the cache
 * freezes.  S3-FIFO was the best measured policy on the Zipf-shared and
 * scan traces (where SIEVE beat LRU by up to 6 points) and has no cliff
 * on chat.  Its hit is as cheap as SIEVE's: one relaxed store, no list
 * move, no lock, so QUERY's RCU lookup path stays lock-free (LRU would
 * need a locked list move per hit).
 *
 * Locking: everything but s3fifo_hit() needs the owner's lock (the store
 * lock); s3fifo_hit() needs none and may race with everything.
 */
#ifndef KVS_EVICT_H
#define KVS_EVICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urcu/list.h>

#define S3FIFO_FREQ_MAX 3
/* Small's share of the entries, in percent (the paper's 10 %). */
#define S3FIFO_SMALL_PCT 10
/*
 * The ghost remembers as many evictions as main has room for (the paper's
 * choice), but never more than this: 32 bytes each, so at most 64 MiB per
 * queue, reached only by a class of 2.3M resident blocks (72 GiB of 32 KiB
 * slots).  A power of two.
 */
#define S3FIFO_GHOST_MAX (1u << 21)

enum s3fifo_where {
	S3FIFO_NONE,
	S3FIFO_SMALL,
	S3FIFO_MAIN,
};

struct s3fifo_node {
	struct cds_list_head link;
	uint8_t freq;  /* uses, 0..3: readers add (relaxed), the owner spends */
	uint8_t where; /* enum s3fifo_where (owner's lock) */
};

/*
 * The ghost: a FIFO of fingerprints (a ring, numbered by push) with a
 * hash table beside it for O(1) membership.  A fingerprint leaves the
 * table when it is re-admitted or when its ring entry is pushed out; a
 * ring entry whose fingerprint was re-admitted stays until then, stale
 * (the table keeps the number of each fingerprint's live entry).
 */
struct s3fifo_ghost {
	uint64_t *ring;	       /* fingerprints, at number & (cap - 1) */
	uint64_t *fps;	       /* the table (2 cap cells, linear probing; 0: empty) */
	uint32_t *nums;	       /* fps[i]'s ring number, low 32 bits */
	size_t cap;	       /* ring slots: a power of two, 0 until the first push */
	uint64_t oldest, next; /* numbers of the oldest ring entry and of the next */
	size_t members;	       /* fingerprints in the table */
};

struct s3fifo {
	struct cds_list_head small, main; /* head = newest, tail = oldest */
	size_t nsmall, nmain, n;	  /* n = nsmall + nmain */
	struct s3fifo_ghost ghost;
};

static inline void s3fifo_init(struct s3fifo *q)
{
	CDS_INIT_LIST_HEAD(&q->small);
	CDS_INIT_LIST_HEAD(&q->main);
	q->nsmall = q->nmain = q->n = 0;
	q->ghost = (struct s3fifo_ghost){ 0 };
}

/* Free the ghost.  Queued entries are the caller's: they stay as they are. */
void s3fifo_fini(struct s3fifo *q);

/*
 * A hit: the count goes up by one, saturating at 3.  A load and a relaxed
 * store, not an atomic add: the count is a hint, and the saturated case
 * (hot blocks, the common one) then writes nothing, so readers on other
 * CPUs keep the line shared.  Two racing hits may count as one, and a hit
 * racing with s3fifo_pick()'s spending of the count (its partner, under
 * the owner's lock) may be lost or may undo that spending: either costs
 * an entry one round of main at most, never correctness.
 */
static inline void s3fifo_hit(struct s3fifo_node *n)
{
	uint8_t f = __atomic_load_n(&n->freq, __ATOMIC_RELAXED);

	if (f < S3FIFO_FREQ_MAX)
		__atomic_store_n(&n->freq, (uint8_t)(f + 1), __ATOMIC_RELAXED);
}

/*
 * Queue @n, unused, in main if @fp (the entry's key fingerprint: a 64-bit
 * hash, equal for equal keys) is a ghost, else in small.
 */
void s3fifo_insert(struct s3fifo *q, struct s3fifo_node *n, uint64_t fp);

/* Unqueue @n (no-op when not queued): an entry dropped, not evicted. */
void s3fifo_remove(struct s3fifo *q, struct s3fifo_node *n);

/*
 * Unqueue @n because it was evicted (a victim of s3fifo_pick() or any
 * other eviction): from small, its fingerprint @fp joins the ghost.
 */
void s3fifo_evict(struct s3fifo *q, struct s3fifo_node *n, uint64_t fp);

/*
 * Find the next victim.  From small when small holds its share or more
 * (or main has nothing to offer), else from main.  Small's oldest entry:
 * used, it moves to main with its count reset; else it is the victim.
 * Main's oldest: with a count, the count drops by one and it goes round;
 * else it is the victim.  A victim candidate goes to @evictable first,
 * which may refuse it (pinned) or claim it (e.g. by a CAS on a pin
 * count); a refused entry goes to the new end of its queue keeping its
 * count.  An entry promoted once main has refused all it holds is
 * offered at once, as main's only candidate.  Looks at most @max_scan
 * entries (0: 5 per entry, enough for every count to run out and a lap
 * of refusals on top).  Returns the victim, still queued (the caller
 * passes it to s3fifo_evict()), or NULL when everything was refused or
 * the scan ran out.
 */
struct s3fifo_node *s3fifo_pick(struct s3fifo *q, bool (*evictable)(struct s3fifo_node *, void *),
				void *arg, size_t max_scan);

/*
 * The entries nearest eviction, without changing anything: small's and
 * then main's, each oldest first.  (Counts are not looked at: they only
 * delay an entry by a round or a promotion, and a walk that passed over
 * used entries would miss every block of a cache where all were used.)
 * Calls @visit on each until it returns false or @max entries were
 * looked at; returns how many were.  For work ahead of eviction (the SSD
 * tier writing blocks before they go, so that their eviction costs
 * nothing).
 */
size_t s3fifo_walk_coldest(struct s3fifo *q, bool (*visit)(struct s3fifo_node *, void *),
			   void *arg, size_t max);

/* Whether @fp is a ghost (for tests and tools). */
bool s3fifo_ghost_has(const struct s3fifo *q, uint64_t fp);

#endif /* KVS_EVICT_H */
