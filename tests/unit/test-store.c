/* SPDX-License-Identifier: MIT */
/*
 * The DRAM tier of the block store (sidecar/store/), as a handle
 * over a small pool (storetest.h: 128 slots of 64 KiB):
 *   - SAVE begin/end: a shard being copied is in the index (a second
 *     SAVE skips it) but not visible to QUERY; a finished copy seals a
 *     one-shard block; a failed one gives the slot back;
 *   - a block of several shards seals only when every shard is saved, in
 *     any order, a failed shard's copy leaving the block partial;
 *   - QUERY answers the longest resident prefix, in the asked namespace
 *     only, and pins what it returns (the pool bytes they hold);
 *   - eviction takes unpinned sealed blocks only; with everything pinned
 *     a SAVE stores nothing (-ENOSPC's count) until the pins go;
 *   - partial blocks older than the timeout are reclaimed, never one
 *     being copied;
 *   - tenants: past [pool] unsealed_share of a region a tenant's keys are
 *     refused (one block always allowed), each tenant counted alone,
 *     sealed blocks no longer counted; a SAVE that finds nothing to
 *     evict reclaims the partial blocks of whoever holds more unsealed
 *     bytes than itself, never of a smaller holder;
 *   - a namespace's blocks are dropped with it; an unused block size
 *     gives its class up when all 64 are taken;
 *   - two stores are two stores: nothing of one is seen in the other.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storetest.h"
#include "unit.h"

static struct pool *pool;
static struct store *st;
/* Namespaces outlive their blocks: these outlive the store (teardown). */
static struct store_ns ns, other;

static void setup(void)
{
	st_setup();
	pool = st_pool_new();
	st = st_store_new(pool, 100, NULL);
	store_ns_init(&ns, 1);
	store_ns_init(&other, 2);
}

static void teardown(void)
{
	store_free(st);
	pool_destroy(pool);
	st_teardown();
}

static struct store_stats stats(void)
{
	struct store_stats s;

	store_get_stats(st, &s);
	return s;
}

/* A key's presence in @n, alone (not as part of a prefix). */
static bool resident(const struct store_ns *n, uint32_t key)
{
	return st_query(st, n, key, 1, NULL, NULL) == 1;
}

/* ---- SAVE and QUERY --------------------------------------------------------- */

START_TEST(test_save_query)
{
	struct store_place p = st_place(st, ST_SLOT, 0, 1);
	static struct st_save s, again;
	struct block *b[16];
	uint64_t bytes;
	const struct pool_region *r = &pool->regions[0];

	st_save_begin(st, NULL, &ns, &p, 0, 16, &s);
	ck_assert_uint_eq(s.nents, 16);
	for (uint32_t i = 0; i < 16; i++) {
		uint8_t *a = s.ents[i].shard->slot.addr;

		ck_assert_uint_eq(s.ents[i].block_id, i);
		ck_assert(a >= r->base && a + ST_SLOT <= r->base + r->size);
		for (uint32_t j = 0; j < i; j++)
			ck_assert_ptr_ne(s.ents[j].shard->slot.addr, a);
		memset(a, (int)i + 1, ST_SLOT); /* the copy */
	}
	/* Being copied: in the index (a second SAVE skips it), not visible to QUERY. */
	ck_assert_uint_eq(st_query(st, &ns, 0, 16, NULL, NULL), 0);
	st_save_begin(st, NULL, &ns, &p, 0, 16, &again);
	ck_assert_uint_eq(again.skipped, 16);
	ck_assert_uint_eq(again.nents, 0);
	ck_assert_uint_eq(stats().partial, 16);
	ck_assert_uint_eq(stats().resident, 0);

	store_save_end(st, s.ents, s.nents, true, NULL);
	ck_assert_uint_eq(stats().partial, 0);
	ck_assert_uint_eq(stats().resident, 16);
	ck_assert_uint_eq(__atomic_load_n(&ns.blocks, __ATOMIC_RELAXED), 16);
	ck_assert_uint_eq(st_query(st, &ns, 0, 16, NULL, NULL), 16);
	/* Pinned: the blocks, their bytes, their data. */
	ck_assert_uint_eq(st_query(st, &ns, 0, 16, b, &bytes), 16);
	ck_assert_uint_eq(bytes, 16 * ST_SLOT);
	for (uint32_t i = 0; i < 16; i++) {
		ck_assert_int_eq(b[i]->pins, 1);
		ck_assert_uint_eq(b[i]->shards[0].slot.addr[ST_SLOT - 1], i + 1);
	}
	st_unpin(b, 16);
	ck_assert_int_eq(b[0]->pins, 0);
	/* The longest prefix: keys 8..15 are there, 16 is not. */
	ck_assert_uint_eq(st_query(st, &ns, 8, 16, NULL, NULL), 8);
	ck_assert_uint_eq(st_query(st, &ns, 16, 4, NULL, NULL), 0);
	/* Another namespace sees none of them. */
	ck_assert_uint_eq(st_query(st, &other, 0, 16, NULL, NULL), 0);
	ck_assert_uint_eq(st_save(st, NULL, &other, &p, 0, 4), 4);
	ck_assert_uint_eq(st_query(st, &other, 0, 16, NULL, NULL), 4);
	/* Saved again: resident keys are skipped, new ones stored. */
	st_save_begin(st, NULL, &ns, &p, 0, 20, &again);
	ck_assert_uint_eq(again.skipped, 16);
	ck_assert_uint_eq(again.nents, 4);
	store_save_end(st, again.ents, again.nents, true, NULL);
	ck_assert_uint_eq(st_query(st, &ns, 0, 32, NULL, NULL), 20);
	ck_assert_uint_eq(stats().resident, 24);
	ck_assert_uint_eq(pool_used_bytes(pool), 24 * ST_SLOT);
}
END_TEST

START_TEST(test_save_failed)
{
	struct store_place p = st_place(st, ST_SLOT, 0, 1);
	static struct st_save s;

	st_save_begin(st, NULL, &ns, &p, 0, 8, &s);
	ck_assert_uint_eq(s.nents, 8);
	ck_assert_uint_eq(pool_used_bytes(pool), 8 * ST_SLOT);
	store_save_end(st, s.ents, s.nents, false, NULL);
	/* Nothing of it is left: no block, no slot, no count. */
	ck_assert_uint_eq(st_query(st, &ns, 0, 8, NULL, NULL), 0);
	ck_assert_uint_eq(pool_used_bytes(pool), 0);
	ck_assert_uint_eq(stats().partial, 0);
	ck_assert_uint_eq(stats().resident, 0);
	ck_assert_uint_eq(__atomic_load_n(&ns.blocks, __ATOMIC_RELAXED), 0);
	ck_assert(cds_list_empty(&ns.list));
	/* And the keys are new to the next SAVE. */
	st_save_begin(st, NULL, &ns, &p, 0, 8, &s);
	ck_assert_uint_eq(s.nents, 8);
	ck_assert_uint_eq(s.skipped, 0);
	store_save_end(st, s.ents, s.nents, true, NULL);
	ck_assert_uint_eq(st_query(st, &ns, 0, 8, NULL, NULL), 8);
}
END_TEST

/* ---- sealing across shards -------------------------------------------------------- */

#define SEAL_KEYS 8u

static const struct seal_case {
	uint32_t nshards;
	uint32_t order[4]; /* the shards, in the order their SAVEs come */
	int fail;	   /* the SAVE (index in order) whose first copy fails; -1: none */
} seal_cases[] = {
	{ 1, { 0 }, -1 },	   { 2, { 0, 1 }, -1 }, { 2, { 1, 0 }, -1 },
	{ 4, { 2, 0, 3, 1 }, -1 }, { 2, { 0, 1 }, 1 },	{ 4, { 3, 1, 2, 0 }, 0 },
	{ 4, { 0, 1, 2, 3 }, 3 },
};

START_TEST(test_seal_across_shards)
{
	const struct seal_case *c = &seal_cases[_i];
	static struct st_save s;
	struct block *b[SEAL_KEYS];
	uint64_t bytes;

	for (uint32_t k = 0; k < c->nshards; k++) {
		struct store_place p = st_place(st, ST_SLOT, c->order[k], c->nshards);
		bool last = k == c->nshards - 1;

		st_save_begin(st, NULL, &ns, &p, 0, SEAL_KEYS, &s);
		ck_assert_uint_eq(s.nents, SEAL_KEYS);
		ck_assert_uint_eq(st_query(st, &ns, 0, SEAL_KEYS, NULL, NULL), 0);
		if ((int)k == c->fail) {
			/* A failed copy of one shard: the others stay, the block partial. */
			store_save_end(st, s.ents, s.nents, false, NULL);
			ck_assert_uint_eq(st_query(st, &ns, 0, SEAL_KEYS, NULL, NULL), 0);
			ck_assert_uint_eq(stats().partial, k ? SEAL_KEYS : 0);
			ck_assert_uint_eq(pool_used_bytes(pool), k * SEAL_KEYS * ST_SLOT);
			st_save_begin(st, NULL, &ns, &p, 0, SEAL_KEYS, &s);
			ck_assert_uint_eq(s.nents, SEAL_KEYS);
		}
		store_save_end(st, s.ents, s.nents, true, NULL);
		ck_assert_uint_eq(pool_used_bytes(pool), (k + 1) * SEAL_KEYS * ST_SLOT);
		ck_assert_uint_eq(__atomic_load_n(&ns.blocks, __ATOMIC_RELAXED), SEAL_KEYS);
		if (!last) {
			ck_assert_uint_eq(st_query(st, &ns, 0, SEAL_KEYS, NULL, NULL), 0);
			ck_assert_uint_eq(stats().partial, SEAL_KEYS);
			ck_assert_uint_eq(stats().resident, 0);
		}
	}
	/* Every shard saved: sealed, visible, each pin holding all its shards' bytes. */
	ck_assert_uint_eq(stats().partial, 0);
	ck_assert_uint_eq(stats().resident, SEAL_KEYS);
	ck_assert_uint_eq(st_query(st, &ns, 0, SEAL_KEYS, b, &bytes), SEAL_KEYS);
	ck_assert_uint_eq(bytes, (uint64_t)SEAL_KEYS * c->nshards * ST_SLOT);
	for (uint32_t i = 0; i < SEAL_KEYS; i++) {
		ck_assert_uint_eq(b[i]->nshards, c->nshards);
		ck_assert_uint_eq(b[i]->present, c->nshards);
		ck_assert(b[i]->sealed);
	}
	st_unpin(b, SEAL_KEYS);
}
END_TEST

/* ---- pins and eviction ------------------------------------------------------------------ */

START_TEST(test_evict_with_pins)
{
	struct store_place p = st_place(st, ST_SLOT, 0, 1);
	static struct block *old[ST_SLOTS / 2], *young[ST_SLOTS / 2];
	static struct st_save s;
	const uint32_t half = ST_SLOTS / 2;

	ck_assert_uint_eq(st_save(st, NULL, &ns, &p, 0, ST_SLOTS), ST_SLOTS);
	ck_assert_uint_eq(pool_used_bytes(pool), ST_POOL);
	ck_assert_uint_eq(stats().evictions, 0);
	/* The first half pinned: the next SAVE can only take the second half's slots. */
	ck_assert_uint_eq(st_query(st, &ns, 0, half, old, NULL), half);
	ck_assert_uint_eq(st_save(st, NULL, &ns, &p, 1000, half), half);
	ck_assert_uint_eq(stats().evictions, half);
	ck_assert_uint_eq(st_query(st, &ns, 0, half, NULL, NULL), half);
	for (uint32_t i = half; i < ST_SLOTS; i++)
		ck_assert(!resident(&ns, i));
	ck_assert_uint_eq(st_query(st, &ns, 1000, half, NULL, NULL), half);

	/* Everything pinned: nothing stored, each key counted as no space. */
	ck_assert_uint_eq(st_query(st, &ns, 1000, half, young, NULL), half);
	st_save_begin(st, NULL, &ns, &p, 2000, 8, &s);
	ck_assert_uint_eq(s.nents, 0);
	ck_assert_uint_eq(s.nospace, 8);
	ck_assert_uint_eq(stats().evictions, half);
	ck_assert_uint_eq(stats().resident, ST_SLOTS);
	/* A QUERY without a lease does not count as a pin. */
	ck_assert_uint_eq(st_query(st, &ns, 0, half, NULL, NULL), half);
	/* Pins gone: room again. */
	st_unpin(young, half);
	ck_assert_uint_eq(st_save(st, NULL, &ns, &p, 2000, 8), 8);
	ck_assert_uint_eq(stats().evictions, half + 8);
	ck_assert_uint_eq(st_query(st, &ns, 0, half, NULL, NULL), half);
	st_unpin(old, half);
}
END_TEST

/* ---- partial blocks ---------------------------------------------------------------------- */

START_TEST(test_reclaim_partial)
{
	struct store_place p0 = st_place(st, ST_SLOT, 0, 2), p1 = st_place(st, ST_SLOT, 1, 2);
	static struct st_save writing;

	ck_assert_uint_eq(st_save(st, NULL, &ns, &p0, 0, 8), 8);
	st_save_begin(st, NULL, &ns, &p0, 8, 2, &writing);
	ck_assert_uint_eq(stats().partial, 10);
	/* None is older than forever. */
	ck_assert_uint_eq(store_reclaim_partial(st, UINT64_MAX), 0);
	ck_assert_uint_eq(stats().partial, 10);
	/* All are older than 0 ns, but a copy still writes two of them. */
	ck_assert_uint_eq(store_reclaim_partial(st, 0), 8);
	ck_assert_uint_eq(stats().partial_reclaimed, 8);
	ck_assert_uint_eq(stats().partial, 2);
	ck_assert_uint_eq(__atomic_load_n(&ns.blocks, __ATOMIC_RELAXED), 2);
	ck_assert_uint_eq(pool_used_bytes(pool), 2 * ST_SLOT);
	/* Gone: the other rank's shard starts a new block. */
	ck_assert_uint_eq(st_save(st, NULL, &ns, &p1, 0, 1), 1);
	ck_assert_uint_eq(st_query(st, &ns, 0, 1, NULL, NULL), 0);
	store_save_end(st, writing.ents, writing.nents, true, NULL);
	ck_assert_uint_eq(store_reclaim_partial(st, 0), 3);
	ck_assert_uint_eq(stats().partial, 0);
	ck_assert_uint_eq(pool_used_bytes(pool), 0);
	ck_assert_uint_eq(__atomic_load_n(&ns.blocks, __ATOMIC_RELAXED), 0);
	/* Sealed blocks are never reclaimed as partial. */
	ck_assert_uint_eq(st_save(st, NULL, &ns, &p0, 0, 4), 4);
	ck_assert_uint_eq(st_save(st, NULL, &ns, &p1, 0, 4), 4);
	ck_assert_uint_eq(store_reclaim_partial(st, 0), 0);
	ck_assert_uint_eq(st_query(st, &ns, 0, 4, NULL, NULL), 4);
}
END_TEST

/* ---- tenants ------------------------------------------------------------------------------ */

/*
 * [pool] unsealed_share of the region (8 MiB = 128 slots of 64 KiB), per
 * tenant: n keys of shard 0 of nshards, in one SAVE.
 */
static const struct share_case {
	uint32_t share, nshards, n;
	uint32_t stored, quota;
} share_cases[] = {
	{ 100, 2, 48, 48, 0 }, /* no share but the pool */
	{ 25, 2, 48, 32, 16 }, /* 2 MiB: 32 slots */
	{ 50, 2, 80, 64, 16 }, /* 64 slots */
	{ 1, 2, 4, 1, 3 },     /* 83886 bytes: one slot */
	{ 0, 2, 4, 1, 3 },     /* nothing, but one block always */
	{ 25, 1, 48, 32, 16 }, /* blocks of one shard count while being copied */
};

START_TEST(test_tenant_share)
{
	const struct share_case *c = &share_cases[_i];
	struct store_tenant *a, *b;
	struct store_place p0;
	static struct st_save sa, sb;

	/* The fixture's store, with this share. */
	store_free(st);
	st = st_store_new(pool, c->share, NULL);
	p0 = st_place(st, ST_SLOT, 0, c->nshards);
	a = store_tenant_new(st, "a", NULL);
	b = store_tenant_new(st, "b", NULL);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_eq(a->st, st);
	ck_assert_str_eq(a->name, "a");
	st_save_begin(st, a, &ns, &p0, 0, c->n, &sa);
	ck_assert_uint_eq(sa.nents, c->stored);
	ck_assert_uint_eq(sa.quota, c->quota);
	ck_assert_uint_eq(sa.nospace, 0);
	ck_assert_uint_eq(a->unsealed, c->stored * ST_SLOT);
	/* Another tenant has a share of its own; a failed copy gives it back. */
	st_save_begin(st, b, &ns, &p0, 1000, c->n, &sb);
	ck_assert_uint_eq(sb.nents, c->stored);
	ck_assert_uint_eq(sb.quota, c->quota);
	store_save_end(st, sb.ents, sb.nents, false, NULL);
	ck_assert_uint_eq(b->unsealed, 0);
	/* A finished copy still counts while the block waits for other shards... */
	store_save_end(st, sa.ents, sa.nents, true, NULL);
	ck_assert_uint_eq(a->unsealed, c->nshards > 1 ? c->stored * ST_SLOT : 0);
	/* ... and no longer once it is sealed: a sealed block is nobody's. */
	for (uint32_t k = 1; k < c->nshards; k++) {
		struct store_place pk = st_place(st, ST_SLOT, k, c->nshards);

		ck_assert_uint_eq(st_save(st, NULL, &ns, &pk, 0, c->stored), c->stored);
	}
	ck_assert_uint_eq(a->unsealed, 0);
	ck_assert_uint_eq(st_query(st, &ns, 0, c->n, NULL, NULL), c->stored);
	/* The whole share again. */
	st_save_begin(st, a, &ns, &p0, 2000, c->n, &sa);
	ck_assert_uint_eq(sa.nents, c->stored);
	ck_assert_uint_eq(sa.quota, c->quota);
	store_save_end(st, sa.ents, sa.nents, true, NULL);
	/*
	 * Gone while still charged (a, when its blocks wait for shards): the
	 * account lives until its last charge goes, here with the store.
	 */
	store_tenant_put(a);
	store_tenant_put(b);
	store_tenant_put(NULL);
}
END_TEST

/* Nothing sealed to evict: a SAVE takes the partial blocks of whoever holds more than itself. */
START_TEST(test_reclaim_for_room)
{
	struct store_place p = st_place(st, ST_SLOT, 0, 2);
	struct store_tenant *a = store_tenant_new(st, "a", NULL),
			    *b = store_tenant_new(st, "b", NULL),
			    *c = store_tenant_new(st, "c", NULL);
	static struct st_save s;

	/* a fills the pool with partial blocks. */
	ck_assert_uint_eq(st_save(st, a, &ns, &p, 0, ST_SLOTS), ST_SLOTS);
	ck_assert_uint_eq(pool_used_bytes(pool), ST_POOL);
	/* b takes a's oldest while a holds more: up to half each, then -ENOSPC. */
	st_save_begin(st, b, &ns, &p, 1000, 100, &s);
	ck_assert_uint_eq(s.nents, ST_SLOTS / 2);
	ck_assert_uint_eq(s.nospace, 100 - ST_SLOTS / 2);
	store_save_end(st, s.ents, s.nents, true, NULL);
	ck_assert_uint_eq(stats().partial_reclaimed, ST_SLOTS / 2);
	ck_assert_uint_eq(a->unsealed, b->unsealed);
	/* The oldest went (a's first half), the newest stayed. */
	st_save_begin(st, a, &ns, &p, ST_SLOTS / 2, ST_SLOTS / 2, &s);
	ck_assert_uint_eq(s.skipped, ST_SLOTS / 2);
	/* And a holder never takes from one no bigger than itself, nor from itself. */
	st_save_begin(st, a, &ns, &p, 0, ST_SLOTS / 2, &s);
	ck_assert_uint_eq(s.skipped, 0);
	ck_assert_uint_eq(s.nents, 0);
	ck_assert_uint_eq(s.nospace, ST_SLOTS / 2);
	ck_assert_uint_eq(stats().partial_reclaimed, ST_SLOTS / 2);
	/* A third, holding nothing, takes from the biggest, the oldest first (a's). */
	ck_assert_uint_eq(st_save(st, c, &ns, &p, 2000, 1), 1);
	ck_assert_uint_eq(stats().partial_reclaimed, ST_SLOTS / 2 + 1);
	ck_assert_uint_eq(a->unsealed, (ST_SLOTS / 2 - 1) * ST_SLOT);
	ck_assert_uint_eq(b->unsealed, ST_SLOTS / 2 * ST_SLOT);
	store_tenant_put(a);
	store_tenant_put(b);
	store_tenant_put(c);
}
END_TEST

/* ---- namespaces and classes ------------------------------------------------------------------ */

START_TEST(test_drop_nspace)
{
	struct store_place p = st_place(st, ST_SLOT, 0, 1), p0 = st_place(st, ST_SLOT, 0, 2);

	ck_assert_uint_eq(st_save(st, NULL, &ns, &p, 0, 8), 8);
	ck_assert_uint_eq(st_save(st, NULL, &ns, &p0, 100, 2), 2);
	ck_assert_uint_eq(st_save(st, NULL, &other, &p, 0, 8), 8);
	ck_assert_uint_eq(__atomic_load_n(&ns.blocks, __ATOMIC_RELAXED), 10);
	ck_assert_uint_eq(store_drop_nspace(st, &ns), 10);
	ck_assert_uint_eq(__atomic_load_n(&ns.blocks, __ATOMIC_RELAXED), 0);
	ck_assert(cds_list_empty(&ns.list));
	ck_assert_uint_eq(st_query(st, &ns, 0, 8, NULL, NULL), 0);
	ck_assert_uint_eq(stats().evictions, 8);
	ck_assert_uint_eq(stats().partial_reclaimed, 2);
	/* The other namespace keeps all of its own, though it has the same keys. */
	ck_assert_uint_eq(st_query(st, &other, 0, 8, NULL, NULL), 8);
	ck_assert_uint_eq(__atomic_load_n(&other.blocks, __ATOMIC_RELAXED), 8);
	ck_assert_uint_eq(stats().resident, 8);
	ck_assert_uint_eq(store_drop_nspace(st, &ns), 0);
}
END_TEST

START_TEST(test_class_reclaim)
{
	uint32_t cls[POOL_MAX_CLASSES], id;

	for (uint32_t i = 0; i < POOL_MAX_CLASSES; i++) {
		struct store_place p = st_place(st, 512 * (i + 1), 0, 1);

		cls[i] = p.class_id;
		/* The first 16 sizes hold a block each (one extent each). */
		if (i < 16)
			ck_assert_uint_eq(st_save(st, NULL, &ns, &p, i, 1), 1);
	}
	/* All 64 in use: a new size is refused, nothing evicted. */
	ck_assert_int_eq(store_class_get(st, 512 * 100, &id), -ENOSPC);
	ck_assert_uint_eq(stats().evictions, 0);
	/* The 16 with blocks lose their users; the blocks keep the classes. */
	for (uint32_t i = 0; i < 16; i++)
		store_class_put(st, cls[i]);
	ck_assert_uint_eq(pool->classes[cls[0]].slot_bytes, 512);
	/* Now a new size takes an unused one's slot, dropping its block. */
	ck_assert_int_eq(store_class_get(st, 512 * 100, &id), 0);
	ck_assert_uint_eq(pool->classes[id].slot_bytes, 512 * 100);
	ck_assert_uint_eq(stats().evictions, 1);
	ck_assert_uint_eq(stats().resident, 15);
}
END_TEST

/* ---- two stores -------------------------------------------------------------------------------- */

START_TEST(test_two_stores)
{
	struct pool *pool2 = st_pool_new();
	struct store *st2 = st_store_new(pool2, 100, NULL);
	struct store_place p = st_place(st, ST_SLOT, 0, 1), p2 = st_place(st2, 4 * ST_KiB, 0, 1);
	struct store_stats s2;

	ck_assert_uint_eq(st_save(st, NULL, &ns, &p, 0, 8), 8);
	/* The same namespace id and keys, another store: nothing there. */
	ck_assert_uint_eq(st_query(st2, &ns, 0, 8, NULL, NULL), 0);
	store_get_stats(st2, &s2);
	ck_assert_uint_eq(s2.resident, 0);
	ck_assert_uint_eq(pool_used_bytes(pool2), 0);
	/* Its own blocks, in its own pool, of its own class. */
	ck_assert_uint_eq(st_save(st2, NULL, &ns, &p2, 4, 8), 8);
	ck_assert_uint_eq(pool_used_bytes(pool2), 8 * 4 * ST_KiB);
	ck_assert_uint_eq(pool_used_bytes(pool), 8 * ST_SLOT);
	ck_assert_uint_eq(st_query(st, &ns, 0, 12, NULL, NULL), 8);
	store_free(st2);
	ck_assert_uint_eq(st_query(st, &ns, 0, 12, NULL, NULL), 8);
	pool_destroy(pool2);
	store_free(NULL);
}
END_TEST

/* ---- region figures ------------------------------------------------------------------------------ */

START_TEST(test_region_stats)
{
	struct store_place p = st_place(st, ST_SLOT, 0, 1);
	struct store_region_stats rs[POOL_MAX_REGIONS];

	ck_assert_uint_eq(st_save(st, NULL, &ns, &p, 0, 6), 6);
	ck_assert_uint_eq(store_region_stats(st, rs, POOL_MAX_REGIONS), 1);
	ck_assert_int_eq(rs[0].node, -1);
	ck_assert(!rs[0].huge);
	ck_assert_uint_eq(rs[0].capacity_bytes, ST_POOL);
	ck_assert_uint_eq(rs[0].used_bytes, 6 * ST_SLOT);
	ck_assert_uint_eq(rs[0].extents_total, ST_POOL / ST_EXTENT);
	ck_assert_uint_eq(rs[0].extents_free, ST_POOL / ST_EXTENT - 2);
	ck_assert_uint_eq(store_region_stats(st, rs, 0), 0);
}
END_TEST

static void add_tests(TCase *tc)
{
	tcase_add_test(tc, test_save_query);
	tcase_add_test(tc, test_save_failed);
	tcase_add_loop_test(tc, test_seal_across_shards, 0, ST_CASES(seal_cases));
	tcase_add_test(tc, test_evict_with_pins);
	tcase_add_test(tc, test_reclaim_partial);
	tcase_add_loop_test(tc, test_tenant_share, 0, ST_CASES(share_cases));
	tcase_add_test(tc, test_reclaim_for_room);
	tcase_add_test(tc, test_drop_nspace);
	tcase_add_test(tc, test_class_reclaim);
	tcase_add_test(tc, test_two_stores);
	tcase_add_test(tc, test_region_stats);
}

const struct unit_suite unit_suite = {
	.name = "store",
	.setup = setup,
	.teardown = teardown,
	.timeout_s = 30,
	.add_tests = add_tests,
};
