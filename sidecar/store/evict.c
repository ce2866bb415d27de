/* SPDX-License-Identifier: MIT */
#include <stdlib.h>

#include "store/evict.h"

/* ---- the ghost --------------------------------------------------------- */

/* 0 marks an empty table cell: a fingerprint 0 is taken as 1 (one more collision). */
static inline uint64_t fp_nz(uint64_t fp)
{
	return fp ? fp : 1;
}

/* Callers' fingerprints are hashes, but the simulator's are not: mix. */
static inline size_t fp_home(uint64_t fp, size_t mask)
{
	fp ^= fp >> 33;
	fp *= 0xff51afd7ed558ccdull;
	fp ^= fp >> 33;
	fp *= 0xc4ceb9fe1a85ec53ull;
	fp ^= fp >> 33;
	return (size_t)fp & mask;
}

/* The cell of @fp, or the empty cell where it would go. */
static size_t ghost_cell(const struct s3fifo_ghost *g, uint64_t fp)
{
	size_t mask = 2 * g->cap - 1, i = fp_home(fp, mask);

	while (g->fps[i] && g->fps[i] != fp)
		i = (i + 1) & mask;
	return i;
}

/* Empty cell @i; backward-shift deletion keeps every probe sequence unbroken. */
static void ghost_del_cell(struct s3fifo_ghost *g, size_t i)
{
	size_t mask = 2 * g->cap - 1, j = i;

	for (;;) {
		size_t home;

		j = (j + 1) & mask;
		if (!g->fps[j])
			break;
		home = fp_home(g->fps[j], mask);
		/* j stays unless its home lies cyclically in (i, j]. */
		if (i <= j ? (home > i && home <= j) : (home > i || home <= j))
			continue;
		g->fps[i] = g->fps[j];
		g->nums[i] = g->nums[j];
		i = j;
	}
	g->fps[i] = 0;
	g->members--;
}

static void ghost_put(struct s3fifo_ghost *g, uint64_t fp, uint64_t num)
{
	size_t i = ghost_cell(g, fp);

	if (!g->fps[i]) {
		g->fps[i] = fp;
		g->members++;
	}
	/* Two keys with one fingerprint: the newer entry stands for both. */
	g->nums[i] = (uint32_t)num;
}

/*
 * Room for @want entries (at most S3FIFO_GHOST_MAX).  Allocation failure
 * keeps the ghost as it is: it only remembers less.
 */
static void ghost_grow(struct s3fifo_ghost *g, size_t want)
{
	struct s3fifo_ghost ng = *g;
	size_t cap = 16;

	while (cap < want && cap < S3FIFO_GHOST_MAX)
		cap *= 2;
	if (cap <= g->cap)
		return;
	ng.cap = cap;
	ng.ring = malloc(cap * sizeof(*ng.ring));
	ng.fps = calloc(2 * cap, sizeof(*ng.fps));
	ng.nums = malloc(2 * cap * sizeof(*ng.nums));
	if (!ng.ring || !ng.fps || !ng.nums) {
		free(ng.ring);
		free(ng.fps);
		free(ng.nums);
		return;
	}
	ng.members = 0;
	for (uint64_t num = g->oldest; num != g->next; num++)
		ng.ring[num & (cap - 1)] = g->ring[num & (g->cap - 1)];
	for (size_t i = 0; i < 2 * g->cap; i++)
		if (g->fps[i])
			ghost_put(&ng, g->fps[i], g->nums[i]);
	free(g->ring);
	free(g->fps);
	free(g->nums);
	*g = ng;
}

/* Push the oldest ring entry out; its fingerprint goes unless re-pushed since. */
static void ghost_pop(struct s3fifo_ghost *g)
{
	size_t i = ghost_cell(g, g->ring[g->oldest & (g->cap - 1)]);

	/*
	 * Numbers of live entries are within cap of each other, so their low
	 * 32 bits tell them apart.
	 */
	if (g->fps[i] && g->nums[i] == (uint32_t)g->oldest)
		ghost_del_cell(g, i);
	g->oldest++;
}

/* Remember @fp, keeping at most @bound entries (stale ones count). */
static void ghost_push(struct s3fifo_ghost *g, uint64_t fp, size_t bound)
{
	if (bound > S3FIFO_GHOST_MAX)
		bound = S3FIFO_GHOST_MAX;
	if (g->cap < bound)
		ghost_grow(g, bound);
	if (!g->cap)
		return;
	if (bound > g->cap)
		bound = g->cap;
	while (g->next - g->oldest >= bound)
		ghost_pop(g);
	g->ring[g->next & (g->cap - 1)] = fp;
	ghost_put(g, fp, g->next);
	g->next++;
}

/* Forget @fp if it is a ghost (its ring entry stays, stale); true if it was. */
static bool ghost_take(struct s3fifo_ghost *g, uint64_t fp)
{
	size_t i;

	if (!g->cap)
		return false;
	i = ghost_cell(g, fp);
	if (!g->fps[i])
		return false;
	ghost_del_cell(g, i);
	return true;
}

bool s3fifo_ghost_has(const struct s3fifo *q, uint64_t fp)
{
	return q->ghost.cap && q->ghost.fps[ghost_cell(&q->ghost, fp_nz(fp))];
}

void s3fifo_fini(struct s3fifo *q)
{
	free(q->ghost.ring);
	free(q->ghost.fps);
	free(q->ghost.nums);
	q->ghost = (struct s3fifo_ghost){ 0 };
}

/* ---- the queues -------------------------------------------------------- */

static size_t small_share(size_t n)
{
	size_t s = n * S3FIFO_SMALL_PCT / 100;

	return s ? s : 1;
}

static struct s3fifo_node *oldest(struct cds_list_head *list)
{
	return cds_list_entry(list->prev, struct s3fifo_node, link);
}

void s3fifo_insert(struct s3fifo *q, struct s3fifo_node *n, uint64_t fp)
{
	/* Not yet visible to readers (the store publishes it after this). */
	__atomic_store_n(&n->freq, 0, __ATOMIC_RELAXED);
	if (ghost_take(&q->ghost, fp_nz(fp))) {
		n->where = S3FIFO_MAIN;
		cds_list_add(&n->link, &q->main);
		q->nmain++;
	} else {
		n->where = S3FIFO_SMALL;
		cds_list_add(&n->link, &q->small);
		q->nsmall++;
	}
	q->n++;
}

void s3fifo_remove(struct s3fifo *q, struct s3fifo_node *n)
{
	if (n->where == S3FIFO_NONE)
		return;
	if (n->where == S3FIFO_SMALL)
		q->nsmall--;
	else
		q->nmain--;
	cds_list_del(&n->link);
	n->where = S3FIFO_NONE;
	q->n--;
}

void s3fifo_evict(struct s3fifo *q, struct s3fifo_node *n, uint64_t fp)
{
	/* As many ghosts as main holds at its share of a queue this full. */
	if (n->where == S3FIFO_SMALL) {
		size_t bound = q->n - small_share(q->n);

		ghost_push(&q->ghost, fp_nz(fp), bound ? bound : 1);
	}
	s3fifo_remove(q, n);
}

size_t s3fifo_walk_coldest(struct s3fifo *q, bool (*visit)(struct s3fifo_node *, void *),
			   void *arg, size_t max)
{
	struct cds_list_head *lists[] = { &q->small, &q->main };
	size_t seen = 0;

	for (unsigned l = 0; l < 2; l++) {
		struct s3fifo_node *n;

		/* Oldest first: from the tail; nothing moves, so the walk is stable. */
		for (n = cds_list_entry(lists[l]->prev, struct s3fifo_node, link);
		     &n->link != lists[l] && seen < max;
		     n = cds_list_entry(n->link.prev, struct s3fifo_node, link)) {
			seen++;
			if (!visit(n, arg))
				return seen;
		}
	}
	return seen;
}

struct s3fifo_node *s3fifo_pick(struct s3fifo *q, bool (*evictable)(struct s3fifo_node *, void *),
				void *arg, size_t max_scan)
{
	size_t share = small_share(q->n);
	/*
	 * Refusals in a row.  Refused entries go to the new end, so once
	 * small has refused as many as it holds it has nothing to offer
	 * (promotions only shrink it); main's count restarts when a count is
	 * spent, as that entry may be a victim on the next lap.
	 */
	size_t small_refused = 0, main_refused = 0;

	if (!max_scan)
		max_scan = 5 * q->n + 1;
	for (size_t i = 0; i < max_scan; i++) {
		bool small_ok = small_refused < q->nsmall, main_ok = main_refused < q->nmain;
		struct s3fifo_node *n;
		uint8_t f;

		if (small_ok && (q->nsmall >= share || !main_ok)) {
			n = oldest(&q->small);
			/* Pairs with s3fifo_hit(): relaxed, a lost race costs a round. */
			f = __atomic_load_n(&n->freq, __ATOMIC_RELAXED);
			if (f) {
				__atomic_store_n(&n->freq, 0, __ATOMIC_RELAXED);
				cds_list_move(&n->link, &q->main);
				n->where = S3FIFO_MAIN;
				q->nsmall--;
				q->nmain++;
				if (main_ok || !main_refused) {
					main_refused = 0;
					continue;
				}
				/*
				 * Main refused everything it held: the newcomer is
				 * its only candidate, so offer it now.  Lapping
				 * the refused entries again to reach it, once per
				 * promotion, would make the scan quadratic and run
				 * it out (NULL) with evictable entries in small.
				 */
				if (evictable(n, arg))
					return n;
				main_refused++;
				continue;
			}
			if (evictable(n, arg))
				return n;
			cds_list_move(&n->link, &q->small);
			small_refused++;
			continue;
		}
		if (!main_ok)
			break;
		n = oldest(&q->main);
		f = __atomic_load_n(&n->freq, __ATOMIC_RELAXED);
		if (f) {
			__atomic_store_n(&n->freq, (uint8_t)(f - 1), __ATOMIC_RELAXED);
			main_refused = 0;
		} else if (evictable(n, arg)) {
			return n;
		} else {
			main_refused++;
		}
		cds_list_move(&n->link, &q->main);
	}
	return NULL;
}
