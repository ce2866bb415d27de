/* SPDX-License-Identifier: MIT */
/*
 * The host pool (sidecar/store/pool.c) on small, unbound regions: creation and
 * its size checks, slot classes, allocation until the pool is full (slots
 * aligned, inside the region, never shared), extents going back to the
 * region when emptied, several slot sizes at once, and the fair-share
 * rules that let a class take an extent from another.
 *
 * The regions are 8 MiB with 256 KiB extents (32 of them), NUMA off, no
 * hugepages: small enough for any test machine to map and pre-fault.
 * The start-up's pins (struct pool_pin, the movers' cudaHostRegister in
 * kvstashd) are recorded: ranges of whole extents that cover the region,
 * each pinned once, only after all its pages were touched, and unpinned
 * once by pool_destroy(); chunks larger than a pin unit pinned unit by
 * unit; and nothing left pinned when one pin fails.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/conf.h"
#include "store/pool.h"
#include "unit.h"

#define MiB (1ull << 20)
#define KiB (1ull << 10)
#define EXTENT (256 * KiB)
#define NR_EXTENTS 32u

static struct kvs_config cfg_with(uint64_t size, uint64_t extent)
{
	struct kvs_config c;
	char err[256], v[64];

	ck_assert_int_eq(config_init(&c), 0);
	ck_assert_int_eq(config_set(&c, "pool", "numa", "off", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&c, "pool", "hugepages", "no", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&c, "pool", "prefault_threads", "2", err, sizeof(err)), 0);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)size);
	ck_assert_int_eq(config_set(&c, "pool", "size", v, err, sizeof(err)), 0);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)extent);
	ck_assert_int_eq(config_set(&c, "pool", "extent_size", v, err, sizeof(err)), 0);
	return c;
}

static struct pool *small_pool(void)
{
	struct kvs_config c = cfg_with(8 * MiB, EXTENT);
	const int node = -1;
	struct pool *p = NULL;

	ck_assert_int_eq(pool_create(&c, &node, 1, NULL, &p), 0);
	ck_assert_ptr_nonnull(p);
	config_free(&c);
	return p;
}

static uint32_t class_of(struct pool *p, uint64_t slot_bytes)
{
	uint32_t id = POOL_NO_CLASS;

	ck_assert_int_eq(pool_class_get(p, slot_bytes, &id), 0);
	ck_assert_uint_ne(id, POOL_NO_CLASS);
	return id;
}

static int cmp_slot_addr(const void *a, const void *b)
{
	const struct slot *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* ---- creation ------------------------------------------------------------- */

START_TEST(test_create)
{
	struct pool *p = small_pool();
	struct pool_region *r = &p->regions[0];

	ck_assert_uint_eq(p->nr_regions, 1);
	ck_assert_uint_eq(p->extent_size, EXTENT);
	ck_assert_uint_eq(p->capacity_bytes, 8 * MiB);
	ck_assert_int_eq(r->node, -1);
	ck_assert(!r->huge);
	ck_assert_ptr_nonnull(r->base);
	ck_assert_uint_eq(r->size, 8 * MiB);
	ck_assert_uint_eq(r->nr_extents, NR_EXTENTS);
	ck_assert_uint_eq(r->nr_free_extents, NR_EXTENTS);
	ck_assert_uint_eq(pool_used_bytes(p), 0);
	for (uint32_t i = 0; i < NR_EXTENTS; i++) {
		ck_assert_ptr_eq(r->extents[i].base, r->base + i * EXTENT);
		ck_assert_uint_eq(r->extents[i].class_id, POOL_NO_CLASS);
	}
	/* The memory is there, writable and pre-faulted to zero. */
	ck_assert_uint_eq(r->base[0], 0);
	ck_assert_uint_eq(r->base[8 * MiB - 1], 0);
	r->base[8 * MiB - 1] = 1;
	ck_assert_uint_eq(pool_region_for_node(p, -1), 0);
	ck_assert_uint_eq(pool_region_for_node(p, 3), 0); /* none matches: the first */
	pool_destroy(p);
	pool_destroy(NULL);
}
END_TEST

START_TEST(test_create_sizes)
{
	const int nodes[POOL_MAX_REGIONS + 1] = { -1, -1 };
	struct kvs_config c;
	struct pool *p;

	/* Two regions split the size; a remainder smaller than an extent is not used. */
	c = cfg_with(8 * MiB + 200 * KiB, EXTENT);
	ck_assert_int_eq(pool_create(&c, nodes, 2, NULL, &p), 0);
	ck_assert_uint_eq(p->nr_regions, 2);
	ck_assert_uint_eq(p->regions[0].nr_extents, 16);
	ck_assert_uint_eq(p->regions[1].nr_extents, 16);
	ck_assert_uint_eq(p->regions[1].size, 4 * MiB);
	ck_assert_uint_eq(p->capacity_bytes, 8 * MiB);
	ck_assert_ptr_ne(p->regions[0].base, p->regions[1].base);
	pool_destroy(p);
	config_free(&c);

	/* An automatic extent: 1/64 of the region, at least 64 KiB. */
	c = cfg_with(8 * MiB, 0);
	ck_assert_int_eq(pool_create(&c, nodes, 1, NULL, &p), 0);
	ck_assert_uint_eq(p->extent_size, 128 * KiB);
	ck_assert_uint_eq(p->regions[0].nr_extents, 64);
	pool_destroy(p);
	config_free(&c);

	/* Refused: no region, too many, an extent not a multiple of 512, larger than the region. */
	c = cfg_with(8 * MiB, EXTENT);
	ck_assert_int_eq(pool_create(&c, nodes, 0, NULL, &p), -EINVAL);
	ck_assert_int_eq(pool_create(&c, nodes, POOL_MAX_REGIONS + 1, NULL, &p), -EINVAL);
	config_free(&c);
	c = cfg_with(8 * MiB, EXTENT + 100);
	ck_assert_int_eq(pool_create(&c, nodes, 1, NULL, &p), -EINVAL);
	config_free(&c);
	c = cfg_with(8 * MiB, 16 * MiB);
	ck_assert_int_eq(pool_create(&c, nodes, 1, NULL, &p), -EINVAL);
	config_free(&c);
	c = cfg_with(8 * MiB, 8 * MiB); /* exactly one extent is fine */
	ck_assert_int_eq(pool_create(&c, nodes, 1, NULL, &p), 0);
	ck_assert_uint_eq(p->regions[0].nr_extents, 1);
	pool_destroy(p);
	config_free(&c);
}
END_TEST

/* ---- classes ------------------------------------------------------------------ */

START_TEST(test_classes)
{
	struct pool *p = small_pool();
	uint32_t a, b, id;

	a = class_of(p, 4096);
	ck_assert_uint_eq(p->classes[a].slot_bytes, 4096);
	ck_assert_uint_eq(p->classes[a].slots_per_extent, EXTENT / 4096);
	ck_assert_uint_eq(p->classes[a].users, 1);
	/* The same size is the same class, one more user. */
	ck_assert_uint_eq(class_of(p, 4096), a);
	ck_assert_uint_eq(p->classes[a].users, 2);
	b = class_of(p, 6144);
	ck_assert_uint_ne(b, a);
	ck_assert_uint_eq(p->classes[b].slots_per_extent, EXTENT / 6144);
	/* A slot must fit an extent: equal is the largest. */
	ck_assert_uint_ne(class_of(p, EXTENT), POOL_NO_CLASS);
	ck_assert_int_eq(pool_class_get(p, EXTENT + 512, &id), -E2BIG);
	ck_assert_int_eq(pool_class_get(p, 0, &id), -E2BIG);
	ck_assert_uint_eq(p->classes[class_of(p, EXTENT)].slots_per_extent, 1);

	/* Users go; the class goes with the last one (it holds no extent). */
	pool_class_put(p, a);
	ck_assert_uint_eq(p->classes[a].slot_bytes, 4096);
	pool_class_put(p, a);
	ck_assert_uint_eq(p->classes[a].slot_bytes, 0);
	/* Its id is taken by the next new size. */
	ck_assert_uint_eq(class_of(p, 8192), a);
	pool_destroy(p);
}
END_TEST

START_TEST(test_class_limit)
{
	struct pool *p = small_pool();
	uint32_t id, first = POOL_NO_CLASS;

	for (uint32_t i = 0; i < POOL_MAX_CLASSES; i++) {
		id = class_of(p, 512 * (i + 1));
		if (i == 0)
			first = id;
	}
	ck_assert_uint_eq(p->nr_classes, POOL_MAX_CLASSES);
	ck_assert_int_eq(pool_class_get(p, 512 * (POOL_MAX_CLASSES + 1), &id), -ENOSPC);
	/* An existing size still gets its class. */
	ck_assert_int_eq(pool_class_get(p, 512, &id), 0);
	ck_assert_uint_eq(id, first);
	/* Freeing one makes room for one. */
	pool_class_put(p, first);
	pool_class_put(p, first);
	ck_assert_int_eq(pool_class_get(p, 512 * (POOL_MAX_CLASSES + 1), &id), 0);
	ck_assert_uint_eq(id, first);
	ck_assert_int_eq(pool_class_get(p, 512 * (POOL_MAX_CLASSES + 2), &id), -ENOSPC);
	pool_destroy(p);
}
END_TEST

/* ---- allocation ---------------------------------------------------------------- */

/* Take every slot of @cls; check each and that no two share a byte. */
static unsigned fill(struct pool *p, uint32_t cls, struct slot *slots, unsigned max)
{
	const struct pool_region *r = &p->regions[0];
	uint64_t sb = p->classes[cls].slot_bytes;
	unsigned n = 0;
	struct slot s;
	int err;

	while ((err = pool_alloc(p, 0, cls, &slots[n], &s)) == 0) {
		const struct pool_extent *e = &r->extents[s.ext];

		ck_assert_uint_lt(n, max);
		ck_assert_uint_eq((uintptr_t)s.addr % 512, 0);
		ck_assert(s.addr >= r->base);
		ck_assert(s.addr + sb <= r->base + r->size);
		ck_assert_uint_lt(s.ext, r->nr_extents);
		ck_assert_uint_eq(s.region, 0);
		ck_assert_uint_eq(e->class_id, cls);
		ck_assert_ptr_eq(s.addr, e->base + s.idx * sb);
		ck_assert(s.addr + sb <= e->base + p->extent_size);
		ck_assert_ptr_eq(e->owners[s.idx], &slots[n]); /* the owner is recorded */
		slots[n++] = s;
	}
	ck_assert_int_eq(err, -ENOSPC);
	qsort(slots, n, sizeof(*slots), cmp_slot_addr);
	for (unsigned i = 1; i < n; i++)
		ck_assert(slots[i].addr >= slots[i - 1].addr + sb);
	return n;
}

START_TEST(test_alloc_until_full)
{
	struct pool *p = small_pool();
	uint32_t cls = class_of(p, 64 * KiB);
	static struct slot slots[NR_EXTENTS * 4 + 1];
	struct pool_region *r = &p->regions[0];
	unsigned n = fill(p, cls, slots, NR_EXTENTS * 4);

	ck_assert_uint_eq(n, NR_EXTENTS * 4);
	ck_assert_uint_eq(r->nr_free_extents, 0);
	ck_assert_uint_eq(r->cls[cls].nr_extents, NR_EXTENTS);
	ck_assert_uint_eq(pool_used_bytes(p), 8 * MiB);
	/* Full: still -ENOSPC. */
	ck_assert_int_eq(pool_alloc(p, 0, cls, NULL, &slots[n]), -ENOSPC);
	/* Every byte of every slot is usable. */
	for (unsigned i = 0; i < n; i++)
		memset(slots[i].addr, (int)i, 64 * KiB);
	pool_destroy(p);
}
END_TEST

/* A slot size that does not divide the extent: the tail of each extent stays unused. */
START_TEST(test_alloc_odd_size)
{
	struct pool *p = small_pool();
	uint32_t cls = class_of(p, 100 * 512);
	static struct slot slots[NR_EXTENTS * 5 + 1];

	ck_assert_uint_eq(p->classes[cls].slots_per_extent, 5);
	ck_assert_uint_eq(fill(p, cls, slots, NR_EXTENTS * 5), NR_EXTENTS * 5);
	ck_assert_uint_eq(pool_used_bytes(p), NR_EXTENTS * 5 * 100 * 512);
	pool_destroy(p);
}
END_TEST

/*
 * A slot's generation changes exactly when it was freed, so a peer that
 * read it across a free and a reuse sees it (pool_slot_generation()).
 */
START_TEST(test_slot_generation)
{
	struct pool *p = small_pool();
	uint32_t cls = class_of(p, 64 * KiB);
	struct slot a, b, c;

	ck_assert_int_eq(pool_alloc(p, 0, cls, NULL, &a), 0);
	ck_assert_int_eq(pool_alloc(p, 0, cls, NULL, &b), 0);
	ck_assert_uint_eq(pool_slot_generation(p, &a), 0);
	ck_assert_uint_eq(pool_slot_generation(p, &b), 0);
	pool_free(p, &a);
	/* The free stack hands the same slot out again: one generation later. */
	ck_assert_int_eq(pool_alloc(p, 0, cls, NULL, &c), 0);
	ck_assert_ptr_eq(c.addr, a.addr);
	ck_assert_uint_eq(pool_slot_generation(p, &c), 1);
	/* Its neighbour was not touched. */
	ck_assert_uint_eq(pool_slot_generation(p, &b), 0);
	pool_free(p, &c);
	pool_free(p, &b);
	pool_destroy(p);
}
END_TEST

START_TEST(test_free_returns_extents)
{
	struct pool *p = small_pool();
	uint32_t cls = class_of(p, 64 * KiB);
	static struct slot slots[NR_EXTENTS * 4];
	struct pool_region *r = &p->regions[0];
	unsigned n = fill(p, cls, slots, NR_EXTENTS * 4);
	struct slot s;

	/* Three of an extent's four slots freed: the extent stays with the class. */
	for (unsigned i = 0; i < 3; i++)
		pool_free(p, &slots[i]);
	ck_assert_uint_eq(r->nr_free_extents, 0);
	ck_assert_uint_eq(r->extents[slots[3].ext].nused, 1);
	/* Those slots come back before any new extent would be taken. */
	for (unsigned i = 0; i < 3; i++) {
		ck_assert_int_eq(pool_alloc(p, 0, cls, NULL, &s), 0);
		ck_assert_uint_eq(s.ext, slots[3].ext);
		slots[i] = s;
	}
	ck_assert_int_eq(pool_alloc(p, 0, cls, NULL, &s), -ENOSPC);
	/* The fourth freed: the extent goes back to the region. */
	for (unsigned i = 0; i < 4; i++)
		pool_free(p, &slots[i]);
	ck_assert_uint_eq(r->nr_free_extents, 1);
	ck_assert_uint_eq(r->extents[slots[3].ext].class_id, POOL_NO_CLASS);
	ck_assert_uint_eq(r->cls[cls].nr_extents, NR_EXTENTS - 1);
	for (unsigned i = 4; i < n; i++)
		pool_free(p, &slots[i]);
	ck_assert_uint_eq(r->nr_free_extents, NR_EXTENTS);
	ck_assert_uint_eq(r->cls[cls].nr_extents, 0);
	ck_assert_uint_eq(pool_used_bytes(p), 0);
	/* The class outlives its extents while it has users... */
	ck_assert_uint_eq(p->classes[cls].slot_bytes, 64 * KiB);
	/* ... and everything can be taken again. */
	ck_assert_uint_eq(fill(p, cls, slots, NR_EXTENTS * 4), NR_EXTENTS * 4);
	pool_destroy(p);
}
END_TEST

/* A class whose last user left lives until its last slot is freed. */
START_TEST(test_class_outlives_users)
{
	struct pool *p = small_pool();
	uint32_t cls = class_of(p, 8 * KiB), id;
	struct slot s;

	ck_assert_int_eq(pool_alloc(p, 0, cls, NULL, &s), 0);
	pool_class_put(p, cls);
	ck_assert_uint_eq(p->classes[cls].slot_bytes, 8 * KiB);
	/* Not reused for another size while its slot lives. */
	id = class_of(p, 16 * KiB);
	ck_assert_uint_ne(id, cls);
	pool_free(p, &s);
	ck_assert_uint_eq(p->classes[cls].slot_bytes, 0);
	ck_assert_uint_eq(p->regions[0].nr_free_extents, NR_EXTENTS);
	pool_destroy(p);
}
END_TEST

START_TEST(test_mixed_sizes)
{
	struct pool *p = small_pool();
	uint32_t big = class_of(p, 64 * KiB), small = class_of(p, 4 * KiB);
	struct pool_region *r = &p->regions[0];
	static struct slot bs[NR_EXTENTS * 4], ss[64 + 1];
	unsigned nb = 0, ns = 0;
	struct slot s;

	/* One extent each. */
	for (unsigned i = 0; i < 4; i++)
		ck_assert_int_eq(pool_alloc(p, 0, big, NULL, &bs[nb++]), 0);
	for (unsigned i = 0; i < 64; i++)
		ck_assert_int_eq(pool_alloc(p, 0, small, NULL, &ss[ns++]), 0);
	ck_assert_uint_eq(r->nr_free_extents, NR_EXTENTS - 2);
	ck_assert_uint_ne(bs[0].ext, ss[0].ext);
	for (unsigned i = 1; i < 4; i++)
		ck_assert_uint_eq(bs[i].ext, bs[0].ext);
	for (unsigned i = 1; i < 64; i++)
		ck_assert_uint_eq(ss[i].ext, ss[0].ext);
	ck_assert_uint_eq(pool_used_bytes(p), 4 * 64 * KiB + 64 * 4 * KiB);
	/* The big class takes every remaining extent... */
	while (pool_alloc(p, 0, big, NULL, &s) == 0)
		bs[nb++] = s;
	ck_assert_uint_eq(nb, 4 * (NR_EXTENTS - 1));
	/* ... and the small one, its extent full, has nowhere to go. */
	ck_assert_int_eq(pool_alloc(p, 0, small, NULL, &s), -ENOSPC);
	/* A freed small slot is reused; a freed big extent serves the small class. */
	pool_free(p, &ss[10]);
	ck_assert_int_eq(pool_alloc(p, 0, small, NULL, &s), 0);
	ck_assert_ptr_eq(s.addr, ss[10].addr);
	for (unsigned i = 0; i < 4; i++)
		pool_free(p, &bs[i]);
	ck_assert_uint_eq(r->nr_free_extents, 1);
	ck_assert_int_eq(pool_alloc(p, 0, small, NULL, &s), 0);
	ck_assert_uint_eq(s.ext, bs[0].ext);
	ck_assert_uint_eq(r->extents[s.ext].class_id, small);
	ck_assert_uint_eq(r->extents[s.ext].nslots, 64);
	pool_destroy(p);
}
END_TEST

/* ---- fair share and stealing -------------------------------------------------------- */

static bool all_evictable(void *owner, void *arg)
{
	(*(unsigned *)arg)++;
	return true;
}

static bool none_evictable(void *owner, void *arg)
{
	return false;
}

static void *pinned_owner;

static bool not_pinned(void *owner, void *arg)
{
	return owner != pinned_owner;
}

START_TEST(test_under_share)
{
	struct pool *p = small_pool();
	uint32_t a = class_of(p, 64 * KiB), b = class_of(p, 64 * KiB + 512);
	static struct slot sa[NR_EXTENTS * 4], sb[1];
	unsigned na = 0;

	/* No demand yet: a class with nothing is under its share. */
	ck_assert(pool_class_under_share(p, 0, a));
	ck_assert(pool_class_under_share(p, 0, b));
	/* A alone asks: it deserves the whole region, minus the extent it would take. */
	for (; na < 4 * (NR_EXTENTS - 2); na++)
		ck_assert_int_eq(pool_alloc(p, 0, a, &sa[na], &sa[na]), 0);
	ck_assert_uint_eq(p->regions[0].cls[a].nr_extents, NR_EXTENTS - 2);
	ck_assert(pool_class_under_share(p, 0, a));
	ck_assert(!pool_class_under_share(p, 0, b)); /* no demand, no share */
	/* The 31st extent: 31 + 1 <= 32, still under. */
	for (unsigned j = 0; j < 4; j++, na++)
		ck_assert_int_eq(pool_alloc(p, 0, a, &sa[na], &sa[na]), 0);
	ck_assert_uint_eq(p->regions[0].cls[a].nr_extents, NR_EXTENTS - 1);
	ck_assert(pool_class_under_share(p, 0, a));
	while (pool_alloc(p, 0, a, &sa[na], &sa[na]) == 0)
		na++;
	ck_assert_uint_eq(p->regions[0].cls[a].nr_extents, NR_EXTENTS);
	ck_assert(!pool_class_under_share(p, 0, a));
	/* B starts asking (it gets nothing: the region is full) and its share grows. */
	for (unsigned i = 0; i < na; i++)
		ck_assert_int_eq(pool_alloc(p, 0, b, NULL, &sb[0]), -ENOSPC);
	ck_assert(pool_class_under_share(p, 0, b));
	ck_assert(!pool_class_under_share(p, 0, a));
	pool_destroy(p);
}
END_TEST

START_TEST(test_pick_extent)
{
	struct pool *p = small_pool();
	uint32_t a = class_of(p, 64 * KiB), b = class_of(p, 4 * KiB);
	static struct slot sa[NR_EXTENTS * 4];
	struct pool_region *r = &p->regions[0];
	struct pool_extent *e, *e2;
	unsigned na = 0, calls = 0;
	struct slot s;

	/* A fills the region; B has one extent's worth of demand and nothing. */
	while (pool_alloc(p, 0, a, &sa[na], &sa[na]) == 0)
		na++;
	ck_assert_uint_eq(na, 4 * NR_EXTENTS);
	for (unsigned i = 0; i < 2 * na; i++)
		ck_assert_int_eq(pool_alloc(p, 0, b, NULL, &s), -ENOSPC);
	ck_assert(pool_class_under_share(p, 0, b));

	/* An extent of A, every owner asked. */
	e = pool_pick_extent(p, 0, b, all_evictable, &calls);
	ck_assert_ptr_nonnull(e);
	ck_assert_uint_eq(e->class_id, a);
	ck_assert_uint_eq(calls, 4);
	/* The hand moves on: the next pick is another extent. */
	e2 = pool_pick_extent(p, 0, b, all_evictable, &calls);
	ck_assert_ptr_nonnull(e2);
	ck_assert_ptr_ne(e2, e);
	/* Nothing evictable: nothing picked. */
	ck_assert_ptr_null(pool_pick_extent(p, 0, b, none_evictable, NULL));
	/* One pinned block keeps its whole extent. */
	pinned_owner = &sa[0];
	for (unsigned i = 0; i < 2 * NR_EXTENTS; i++) {
		e = pool_pick_extent(p, 0, b, not_pinned, NULL);
		ck_assert_ptr_nonnull(e);
		ck_assert_uint_ne(e - r->extents, sa[0].ext);
	}
	/* A never takes from itself, nor from B (which is under its share and holds nothing). */
	ck_assert_ptr_null(pool_pick_extent(p, 0, a, all_evictable, &calls));
	pool_destroy(p);
}
END_TEST

/* A class at its share is not stolen from; one extent over, it is. */
START_TEST(test_pick_respects_share)
{
	struct pool *p = small_pool();
	uint32_t a = class_of(p, 64 * KiB), b = class_of(p, 4 * KiB);
	static struct slot sa[NR_EXTENTS * 4], sb[64];
	unsigned na = 0, nb = 0, calls = 0;

	/* Equal demand (64 allocations each): a share of 16 extents each. */
	for (unsigned i = 0; i < 16; i++) {
		for (unsigned j = 0; j < 4; j++, na++)
			ck_assert_int_eq(pool_alloc(p, 0, a, &sa[na], &sa[na]), 0);
		for (unsigned j = 0; j < 4; j++, nb++)
			ck_assert_int_eq(pool_alloc(p, 0, b, &sb[nb], &sb[nb]), 0);
	}
	/* B's 64 small slots fill one extent, A's 64 big ones 16. */
	ck_assert_uint_eq(p->regions[0].cls[a].nr_extents, 16);
	ck_assert_uint_eq(p->regions[0].cls[b].nr_extents, 1);
	ck_assert(pool_class_under_share(p, 0, b));
	ck_assert(!pool_class_under_share(p, 0, a)); /* 16 + 1 > 16 */
	/* A holds exactly its share: B may not take from it. */
	ck_assert_ptr_null(pool_pick_extent(p, 0, b, all_evictable, &calls));
	ck_assert_uint_eq(calls, 0);
	/* One more A extent (demand 68 of 132: a share of 16.5) puts A over. */
	for (unsigned j = 0; j < 4; j++, na++)
		ck_assert_int_eq(pool_alloc(p, 0, a, &sa[na], &sa[na]), 0);
	ck_assert_uint_eq(p->regions[0].cls[a].nr_extents, 17);
	ck_assert_ptr_nonnull(pool_pick_extent(p, 0, b, all_evictable, &calls));
	/* B, far under its share, is never a victim. */
	ck_assert_ptr_null(pool_pick_extent(p, 0, a, all_evictable, &calls));
	pool_destroy(p);
}
END_TEST

/* ---- pinning at start-up ------------------------------------------------------ */

#define MAX_PINS 128

static struct {
	pthread_mutex_t lock;
	struct {
		uint8_t *base;
		uint64_t size;
		int pins, unpins;
	} c[MAX_PINS];
	unsigned n, calls;
	unsigned fail_call; /* the pin call of this number (from 1) fails; 0: none */
	unsigned not_resident; /* pins of a range with a page not yet touched */
} rec = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Every page of [base, base + size) is in memory: its faulter is past it. */
static bool resident(void *base, uint64_t size)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), n = (size + page - 1) / page;
	unsigned char *v = malloc(n);
	bool all = v && mincore(base, size, v) == 0;

	for (uint64_t i = 0; all && i < n; i++)
		all = v[i] & 1;
	free(v);
	return all;
}

static int rec_pin(void *base, uint64_t size)
{
	bool touched = resident(base, size);
	int r = 0;

	pthread_mutex_lock(&rec.lock);
	rec.not_resident += !touched;
	if (++rec.calls == rec.fail_call) {
		r = -ENOMEM;
	} else {
		ck_assert_uint_lt(rec.n, MAX_PINS);
		rec.c[rec.n].base = base;
		rec.c[rec.n].size = size;
		rec.c[rec.n].pins = 1;
		rec.c[rec.n].unpins = 0;
		rec.n++;
	}
	pthread_mutex_unlock(&rec.lock);
	return r;
}

static void rec_unpin(void *base)
{
	unsigned i;

	pthread_mutex_lock(&rec.lock);
	for (i = 0; i < rec.n && rec.c[i].base != base; i++)
		;
	ck_assert_msg(i < rec.n, "unpinned %p, never pinned", base);
	rec.c[i].unpins++;
	pthread_mutex_unlock(&rec.lock);
}

static const struct pool_pin rec_ops = { rec_pin, rec_unpin };

static int by_base(const void *a, const void *b)
{
	const uint8_t *x = *(uint8_t *const *)a, *y = *(uint8_t *const *)b;

	return (x > y) - (x < y);
}

/* The pins recorded cover [base, base + size) in chunks of whole extents, no overlap. */
static void check_cover(uint8_t *base, uint64_t size, uint64_t extent)
{
	uint8_t *bases[MAX_PINS];
	uint64_t off = 0;

	for (unsigned i = 0; i < rec.n; i++)
		bases[i] = rec.c[i].base;
	qsort(bases, rec.n, sizeof(bases[0]), by_base);
	for (unsigned i = 0; i < rec.n; i++) {
		unsigned j;

		for (j = 0; rec.c[j].base != bases[i]; j++)
			;
		ck_assert_ptr_eq(bases[i], base + off);
		ck_assert_uint_eq(off % extent, 0);
		ck_assert_uint_gt(rec.c[j].size, 0);
		ck_assert(i == rec.n - 1 || rec.c[j].size % extent == 0);
		off += rec.c[j].size;
	}
	ck_assert_uint_eq(off, size);
}

START_TEST(test_pin_chunks)
{
	struct kvs_config c = cfg_with(8 * MiB, EXTENT);
	char err[256];
	const int node = -1;
	struct pool *p = NULL;

	/* Three threads: chunks of 11, 11 and 10 extents, pinned once each. */
	ck_assert_int_eq(config_set(&c, "pool", "prefault_threads", "3", err, sizeof(err)), 0);
	rec.n = 0;
	rec.fail_call = 0;
	rec.not_resident = 0;
	ck_assert_int_eq(pool_create(&c, &node, 1, &rec_ops, &p), 0);
	ck_assert_uint_eq(rec.n, 3);
	ck_assert_uint_eq(rec.not_resident, 0);
	ck_assert_uint_eq(p->regions[0].nr_chunks, 3);
	ck_assert_uint_eq(p->regions[0].nr_pins, 3);
	ck_assert(p->regions[0].pinned);
	check_cover(p->regions[0].base, p->regions[0].size, EXTENT);
	for (unsigned i = 0; i < rec.n; i++)
		ck_assert_int_eq(rec.c[i].unpins, 0);
	pool_destroy(p);
	for (unsigned i = 0; i < rec.n; i++)
		ck_assert_int_eq(rec.c[i].unpins, 1);

	/* More threads than extents: one extent each, never part of one. */
	ck_assert_int_eq(config_set(&c, "pool", "prefault_threads", "1000", err, sizeof(err)), 0);
	rec.n = 0;
	ck_assert_int_eq(pool_create(&c, &node, 1, &rec_ops, &p), 0);
	ck_assert_uint_eq(rec.n, NR_EXTENTS);
	check_cover(p->regions[0].base, p->regions[0].size, EXTENT);
	pool_destroy(p);
	for (unsigned i = 0; i < rec.n; i++)
		ck_assert_int_eq(rec.c[i].unpins, 1);

	/* No pin: locked, nothing pinned, nothing unpinned. */
	rec.n = 0;
	ck_assert_int_eq(pool_create(&c, &node, 1, NULL, &p), 0);
	ck_assert(!p->regions[0].pinned);
	pool_destroy(p);
	ck_assert_uint_eq(rec.n, 0);
	config_free(&c);
}
END_TEST

START_TEST(test_pin_fails)
{
	struct kvs_config c = cfg_with(8 * MiB, EXTENT);
	char err[256];
	const int node = -1;
	struct pool *p = NULL;

	/* Four chunks, the second pin (whichever thread's) fails. */
	ck_assert_int_eq(config_set(&c, "pool", "prefault_threads", "4", err, sizeof(err)), 0);
	rec.n = 0;
	rec.calls = 0;
	rec.fail_call = 2;
	ck_assert_int_eq(pool_create(&c, &node, 1, &rec_ops, &p), -ENOMEM);
	ck_assert_ptr_null(p);
	ck_assert_uint_eq(rec.calls, 4);
	/* The other three pinned, and each unpinned again. */
	ck_assert_uint_eq(rec.n, 3);
	for (unsigned i = 0; i < rec.n; i++)
		ck_assert_int_eq(rec.c[i].unpins, 1);
	rec.fail_call = 0;
	config_free(&c);
}
END_TEST

/* Chunks of several pin units: each unit pinned on its own, once touched. */
START_TEST(test_pin_units)
{
	struct kvs_config c = cfg_with(768 * MiB, EXTENT);
	const int node = -1;
	struct pool *p = NULL;

	/* Two threads: chunks of 512 and 256 MiB, pinned in 256 MiB units. */
	rec.n = 0;
	rec.calls = 0;
	rec.fail_call = 0;
	rec.not_resident = 0;
	ck_assert_int_eq(pool_create(&c, &node, 1, &rec_ops, &p), 0);
	ck_assert_uint_eq(rec.n, 3);
	ck_assert_uint_eq(rec.not_resident, 0);
	ck_assert_uint_eq(p->regions[0].nr_chunks, 2);
	ck_assert_uint_eq(p->regions[0].nr_pins, 3);
	ck_assert_uint_eq(p->regions[0].pin_unit, 256 * MiB);
	check_cover(p->regions[0].base, p->regions[0].size, EXTENT);
	for (unsigned i = 0; i < rec.n; i++)
		ck_assert_uint_eq(rec.c[i].size, 256 * MiB);
	pool_destroy(p);
	for (unsigned i = 0; i < rec.n; i++)
		ck_assert_int_eq(rec.c[i].unpins, 1);
	config_free(&c);
}
END_TEST

/* A unit's pin fails: the chunk's later units are not pinned, the rest undone. */
START_TEST(test_pin_unit_fails)
{
	struct kvs_config c = cfg_with(768 * MiB, EXTENT);
	char err[256];
	const int node = -1;
	struct pool *p = NULL;

	ck_assert_int_eq(config_set(&c, "pool", "prefault_threads", "1", err, sizeof(err)), 0);
	rec.n = 0;
	rec.calls = 0;
	rec.fail_call = 2;
	ck_assert_int_eq(pool_create(&c, &node, 1, &rec_ops, &p), -ENOMEM);
	ck_assert_ptr_null(p);
	ck_assert_uint_eq(rec.calls, 2);
	ck_assert_uint_eq(rec.n, 1);
	ck_assert_int_eq(rec.c[0].unpins, 1);
	rec.fail_call = 0;
	config_free(&c);
}
END_TEST

UNIT_TESTS(test_create, test_create_sizes, test_classes, test_class_limit, test_alloc_until_full,
	   test_alloc_odd_size, test_slot_generation, test_free_returns_extents,
	   test_class_outlives_users, test_mixed_sizes, test_under_share, test_pick_extent,
	   test_pick_respects_share, test_pin_chunks, test_pin_fails, test_pin_units,
	   test_pin_unit_fails)

const struct unit_suite unit_suite = {
	.name = "pool",
	.add_tests = add_tests,
};
