/* SPDX-License-Identifier: MIT */
/*
 * SIEVE eviction queue (Zhang et al., NSDI '24): a FIFO with one
 * "visited" bit per entry and a hand that walks from the oldest entry
 * towards the newest.  A visited entry the hand passes loses its bit and
 * stays; the first unvisited (and evictable) one is the victim.
 *
 * Why SIEVE: a hit is one relaxed store of the visited bit, with no list
 * move and no lock, so QUERY's RCU lookup path stays lock-free; LRU would
 * need a locked list move per hit.  tools/kvstash-evict-sim compares it
 * with LRU on traces (docs/PERFORMANCE.md).
 *
 * Locking: insert/remove/pick need the owner's lock (the store lock);
 * sieve_hit() needs none.
 */
#ifndef KVS_EVICT_H
#define KVS_EVICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urcu/list.h>

struct sieve_node {
	struct cds_list_head link;
	uint8_t visited; /* set by readers (relaxed), cleared by the hand */
	uint8_t queued;
};

struct sieve {
	struct cds_list_head list; /* head = newest, tail = oldest */
	struct sieve_node *hand;   /* NULL: start at the tail */
	size_t n;
};

static inline void sieve_init(struct sieve *q)
{
	CDS_INIT_LIST_HEAD(&q->list);
	q->hand = NULL;
	q->n = 0;
}

/*
 * A hit.  Relaxed: the bit is a hint; a racing hand that clears it just
 * gives the entry one less round, never a correctness problem.
 */
static inline void sieve_hit(struct sieve_node *n)
{
	if (!__atomic_load_n(&n->visited, __ATOMIC_RELAXED))
		__atomic_store_n(&n->visited, 1, __ATOMIC_RELAXED);
}

void sieve_insert(struct sieve *q, struct sieve_node *n);
void sieve_remove(struct sieve *q, struct sieve_node *n);

/*
 * Move the hand to the next victim: the first entry that is neither
 * visited nor refused by @evictable (which may also claim it, e.g. by a
 * CAS on a pin count).  Visited entries passed over lose their bit;
 * refused ones keep it.  Looks at most @max_scan entries (0: two laps).
 * Returns the victim, still queued (the caller removes it), or NULL.
 */
struct sieve_node *sieve_pick(struct sieve *q, bool (*evictable)(struct sieve_node *, void *),
			      void *arg, size_t max_scan);

#endif /* KVS_EVICT_H */
