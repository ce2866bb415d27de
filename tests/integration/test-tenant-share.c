/* SPDX-License-Identifier: MIT */
/*
 * No instance starves another of the pool (issue 11, item 6).  What a
 * SAVE cannot evict is pinned (a lease or a LOAD), partial (waiting for
 * the other ranks' shards) or in flight (being copied).  Each scenario
 * fills a pool with one of them from one instance, then checks that
 * another namespace's SAVE still stores everything it asked for:
 *   - pins: 8 leases of instance A pin every block of a 4 MiB pool; B's
 *     SAVE revokes A's oldest leases (A holds the most pins) and stores,
 *     byte-exact; A's LOAD with a revoked lease is -ENOENT and writes
 *     nothing, its newest lease still LOADs byte-exact;
 *   - partials: rank 0 of a TP2 instance whose rank 1 never saves stops
 *     at its share of the pool ([pool] unsealed_share, 50 %) with
 *     -EDQUOT; a second such instance fills the rest; B's SAVE then
 *     reclaims the partial blocks of whoever holds most and stores;
 *   - in flight: an engine keeps 16 SAVEs of 4 MiB blocks in flight
 *     back to back into a 64 MiB pool; 150 SAVEs of a bystander in
 *     another namespace all store (before: 71 % were -ENOSPC).
 * None depends on timing: the shares are exact (counted under the store
 * lock) and what a bystander needs is checked against them, not raced.
 */
#include <stdio.h>
#include <string.h>

#include "itest.h"

#define LAYERS	     4u
#define SEG	     8192u /* 32 KiB blocks: 128 fill the 4 MiB pool */
#define POOL_BLOCKS  128u
#define BLOCKS	     64u
#define LEASE_BLOCKS 16u
#define NLEASES	     (POOL_BLOCKS / LEASE_BLOCKS)

/* Save prompt @seed's blocks [first, first + n) in batches of 16, each to engine block i % 64. */
static void save_prompt(struct kvs_client *c, struct test_kv *kv, uint64_t seed, unsigned first,
			unsigned n, uint8_t *keys)
{
	for (unsigned i = 0; i < n; i += 16) {
		uint32_t ids[16];

		for (unsigned j = 0; j < 16; j++) {
			ids[j] = (first + i + j) % BLOCKS;
			test_kv_fill(kv, ids[j], it_seed(seed, first + i + j));
		}
		CHECK_RES(it_save(c, keys + (size_t)(first + i) * KVS_KEY_SIZE, ids, 16).res, 16,
			  "SAVE of 16 blocks");
		it_flush(c);
	}
}

static void pins(void)
{
	static uint8_t keys[POOL_BLOCKS * KVS_KEY_SIZE], bkeys[32 * KVS_KEY_SIZE];
	uint64_t leases[NLEASES];
	uint32_t ids[32];
	struct kvs_client *a, *b;
	struct test_kv kva, kvb;
	struct kvs_msg_stats_global g;
	struct kvsd d;
	struct kvs_cqe e;

	it_start(&d, "[pool]\nsize = 4M\nextent_size = 256K\n");
	a = it_worker(&d, "share-pin-a", "share/a", 0, 1, &kva, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      SEG);
	b = it_worker(&d, "share-pin-b", "share/b", 0, 1, &kvb, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      SEG);
	/* A fills the pool, 16 blocks at a time (each SAVE within its share), and leases all. */
	it_keys(keys, POOL_BLOCKS, 1);
	save_prompt(a, &kva, 1, 0, POOL_BLOCKS, keys);
	for (unsigned l = 0; l < NLEASES; l++) {
		e = it_query(a, keys + (size_t)l * LEASE_BLOCKS * KVS_KEY_SIZE, LEASE_BLOCKS, 0);
		CHECK_RES(e.res, LEASE_BLOCKS, "QUERY with a lease");
		leases[l] = e.result0;
	}
	g = it_stats(&d);
	CHECK(g.blocks_resident == POOL_BLOCKS && g.leases_live == NLEASES,
	      "%llu resident, %llu leases", (unsigned long long)g.blocks_resident,
	      (unsigned long long)g.leases_live);

	/* B's SAVE finds nothing to evict: A, holding every pin, gives up its oldest leases. */
	it_keys(bkeys, 32, 2);
	it_ids(ids, 32, 0);
	for (unsigned i = 0; i < 32; i++)
		test_kv_fill(&kvb, ids[i], it_seed(2, i));
	e = it_save(b, bkeys, ids, 32);
	CHECK_RES(e.res, 32, "SAVE of another namespace into a pool A pins whole");
	CHECK(e.result0 == 32, "stored %llu of 32", (unsigned long long)e.result0);
	it_flush(b);
	CHECK(kvsd_log_contains(&d, "revoked"), "the log does not say which leases went");
	/* B's blocks are there and are B's bytes. */
	e = it_query(b, bkeys, 32, 0);
	CHECK_RES(e.res, 32, "QUERY of B's blocks");
	for (unsigned i = 0; i < 32; i++)
		test_kv_poison(&kvb, 32 + i, POISON);
	it_ids(ids, 32, 32);
	CHECK_RES(it_load(b, e.result0, ids, 32, 0, 0).res, 32, "LOAD of B's blocks");
	for (unsigned i = 0; i < 32; i++)
		CHECK(test_kv_check(&kvb, 32 + i, it_seed(2, i)), "B's block %u differs", i);

	/* A's oldest lease went (its LOAD writes nothing); its newest still loads. */
	for (unsigned i = 0; i < LEASE_BLOCKS; i++)
		test_kv_poison(&kva, i, POISON);
	it_ids(ids, LEASE_BLOCKS, 0);
	CHECK_RES(it_load(a, leases[0], ids, LEASE_BLOCKS, 0, 0).res, -ENOENT,
		  "LOAD with A's oldest, revoked lease");
	for (unsigned i = 0; i < LEASE_BLOCKS; i++)
		CHECK(test_kv_is_poison(&kva, i, POISON), "a revoked lease's LOAD wrote block %u",
		      i);
	CHECK_RES(it_load(a, leases[NLEASES - 1], ids, LEASE_BLOCKS, 0, 0).res, LEASE_BLOCKS,
		  "LOAD with A's newest lease");
	for (unsigned i = 0; i < LEASE_BLOCKS; i++)
		CHECK(test_kv_check(&kva, i, it_seed(1, (NLEASES - 1) * LEASE_BLOCKS + i)),
		      "A's leased block %u differs", i);
	g = it_stats(&d);
	CHECK(g.leases_live + 1 < NLEASES, "%llu of A's %u leases live after B's SAVE",
	      (unsigned long long)g.leases_live, NLEASES);
	it_ok("8 leases pinning a whole pool: another namespace's SAVE of 32 blocks stores all, "
	      "revoking the oldest leases of the instance that pins most (%llu of %u left)",
	      (unsigned long long)g.leases_live, NLEASES - 1);
	kvs_close(a);
	kvs_close(b);
	test_kv_free(&kva);
	test_kv_free(&kvb);
	it_stop(&d);
}

/* Rank 0 of a TP2 instance saving @n blocks whose rank 1 never saves; returns the CQE. */
static struct kvs_cqe save_partial(struct kvs_client *c, struct test_kv *kv, uint64_t seed,
				   unsigned n)
{
	static uint8_t keys[POOL_BLOCKS * KVS_KEY_SIZE];
	uint32_t ids[POOL_BLOCKS];
	struct kvs_cqe e;

	it_keys(keys, n, seed);
	for (unsigned i = 0; i < n; i++)
		ids[i] = i % BLOCKS;
	e = it_save(c, keys, ids, n);
	it_flush(c);
	return e;
}

static void partials(void)
{
	uint8_t bkeys[32 * KVS_KEY_SIZE];
	uint32_t ids[32];
	struct kvs_client *a, *a2, *b, *a1;
	struct test_kv kva, kva2, kvb;
	struct kvs_msg_stats_global g;
	struct kvsd d;
	struct kvs_cqe e;

	it_start(&d, "[pool]\nsize = 4M\nextent_size = 256K\n");
	/* Rank 1 connects (the instance must be sealed) but never saves. */
	a = it_worker(&d, "share-part-a", "share/tp2", 0, 2, &kva, LAYOUT_PAGE_FIRST, LAYERS,
		      BLOCKS, SEG);
	{
		struct test_kv kv1;

		a1 = it_worker(&d, "share-part-a", "share/tp2", 1, 2, &kv1, LAYOUT_PAGE_FIRST,
			       LAYERS, BLOCKS, SEG);
		test_kv_free(&kv1);
	}
	e = save_partial(a, &kva, 3, POOL_BLOCKS);
	CHECK_RES(e.res, -EDQUOT, "a rank saving a pool of shards nobody completes");
	CHECK(e.result0 == POOL_BLOCKS / 2, "stored %llu of %u shards: the share is half the pool",
	      (unsigned long long)e.result0, POOL_BLOCKS);
	g = it_stats(&d);
	CHECK(g.blocks_partial == POOL_BLOCKS / 2, "%llu partial blocks",
	      (unsigned long long)g.blocks_partial);

	/* A second instance of the same kind takes the other half. */
	a2 = it_worker(&d, "share-part-a2", "share/tp2", 0, 2, &kva2, LAYOUT_PAGE_FIRST, LAYERS,
		       BLOCKS, SEG);
	{
		struct test_kv kv1;
		struct kvs_client *r1 = it_worker(&d, "share-part-a2", "share/tp2", 1, 2, &kv1,
						  LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG);

		e = save_partial(a2, &kva2, 4, POOL_BLOCKS / 2);
		CHECK_RES(e.res, POOL_BLOCKS / 2, "the second instance's shards");
		g = it_stats(&d);
		CHECK(g.blocks_partial == POOL_BLOCKS && g.pool_used_bytes == g.pool_capacity_bytes,
		      "%llu partial blocks, %llu of %llu bytes used",
		      (unsigned long long)g.blocks_partial, (unsigned long long)g.pool_used_bytes,
		      (unsigned long long)g.pool_capacity_bytes);

		/* The pool is all partial: B's SAVE reclaims partial blocks of the biggest holder. */
		b = it_worker(&d, "share-part-b", "share/b", 0, 1, &kvb, LAYOUT_PAGE_FIRST, LAYERS,
			      BLOCKS, SEG);
		it_keys(bkeys, 32, 5);
		it_ids(ids, 32, 0);
		for (unsigned i = 0; i < 32; i++)
			test_kv_fill(&kvb, ids[i], it_seed(5, i));
		e = it_save(b, bkeys, ids, 32);
		CHECK_RES(e.res, 32, "SAVE of another namespace into a pool of partial blocks");
		it_flush(b);
		e = it_query(b, bkeys, 32, 0);
		CHECK_RES(e.res, 32, "QUERY of B's blocks");
		for (unsigned i = 0; i < 32; i++)
			test_kv_poison(&kvb, 32 + i, POISON);
		it_ids(ids, 32, 32);
		CHECK_RES(it_load(b, e.result0, ids, 32, 0, 0).res, 32, "LOAD of B's blocks");
		for (unsigned i = 0; i < 32; i++)
			CHECK(test_kv_check(&kvb, 32 + i, it_seed(5, i)), "B's block %u differs",
			      i);
		g = it_stats(&d);
		CHECK(g.blocks_partial == POOL_BLOCKS - 32 && g.partial_reclaimed == 32,
		      "%llu partial blocks left, %llu reclaimed",
		      (unsigned long long)g.blocks_partial,
		      (unsigned long long)g.partial_reclaimed);
		kvs_close(r1);
		test_kv_free(&kv1);
	}
	it_ok("a rank nobody completes holds at most half the pool (-EDQUOT past it); with two "
	      "such instances filling the pool, another namespace's SAVE stores all 32 blocks");
	kvs_close(a1);
	kvs_close(a);
	kvs_close(a2);
	kvs_close(b);
	test_kv_free(&kva);
	test_kv_free(&kva2);
	test_kv_free(&kvb);
	it_stop(&d);
}

/* ---- in flight ------------------------------------------------------ */

#define BIG_SEG		(1u << 20) /* 4 MiB blocks: 16 fill the 64 MiB pool */
#define BIG_BLOCKS	16u
#define QDEPTH		16u
#define BYSTANDER_SAVES 150u

struct flood {
	struct kvsd *d;
	struct it_barrier *bar;
	uint32_t stop;	/* the parent's store-release, the child's load-acquire */
	uint64_t saves; /* completed SAVEs, for the parent's progress check */
};

/* The engine that floods: QDEPTH SAVEs of fresh 4 MiB blocks in flight at all times. */
static int flooder(void *arg, unsigned i)
{
	struct flood *f = arg;
	struct kvs_client *c;
	struct test_kv kv;
	uint64_t seq = 0;

	(void)i;
	c = it_worker(f->d, "share-flood", "share/flood", 0, 1, &kv, LAYOUT_PAGE_FIRST, LAYERS,
		      BIG_BLOCKS, BIG_SEG);
	it_barrier_wait(f->bar);
	while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
		struct kvs_cqe *cqe;

		while (kvs_pending(c) < QDEPTH) {
			uint8_t key[KVS_KEY_SIZE];
			uint32_t id = (uint32_t)(seq % BIG_BLOCKS);
			struct kvs_sqe *sqe = kvs_get_sqe(c);

			if (!sqe)
				break;
			it_keys(key, 1, 1000000 + seq++);
			CHECK(kvs_prep_save(c, sqe, key, &id, 1, seq) == 0, "prep SAVE");
		}
		kvs_submit(c);
		if (kvs_wait_cqe(c, &cqe, OP_TIMEOUT_MS) == 0) {
			/* Stored, or refused for the share: what matters is the others' SAVEs. */
			CHECK(cqe->res == 1 || cqe->res == -EDQUOT || cqe->res == -ENOSPC,
			      "flood SAVE: %d", cqe->res);
			kvs_cqe_seen(c, cqe);
			__atomic_fetch_add(&f->saves, 1, __ATOMIC_RELAXED);
		}
	}
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

static void in_flight(void)
{
	struct flood *f = it_shared(sizeof(*f));
	unsigned failed = 0, first_err = 0;
	struct kvs_client *b;
	struct test_kv kvb;
	struct kvsd d;
	uint64_t t0;

	it_start(&d, "[pool]\nsize = 64M\nextent_size = 4M\n");
	f->d = &d;
	f->bar = it_barrier_new(2);
	/* The bystander: 1 MiB blocks, another size and namespace. */
	b = it_worker(&d, "share-bystander", "share/bystander", 0, 1, &kvb, LAYOUT_PAGE_FIRST,
		      LAYERS, 8, BIG_SEG / 4);
	it_spawn(flooder, f, 0);
	it_barrier_wait(f->bar);
	/* Let the flood reach its depth: a few pools' worth of SAVEs completed. */
	t0 = test_now_ns();
	while (__atomic_load_n(&f->saves, __ATOMIC_RELAXED) < 4 * BIG_BLOCKS)
		CHECK(test_now_ns() - t0 < 60000000000ull, "the flood does not flow");
	for (unsigned i = 0; i < BYSTANDER_SAVES; i++) {
		uint8_t key[KVS_KEY_SIZE];
		uint32_t id = i % 8;
		struct kvs_cqe e;

		test_kv_fill(&kvb, id, it_seed(7, i));
		it_keys(key, 1, 7000 + i);
		e = it_save(b, key, &id, 1);
		if (e.res != 1) {
			if (!failed)
				first_err = (unsigned)-e.res;
			failed++;
		}
	}
	__atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
	it_wait_all();
	printf("# %u of %u bystander SAVEs failed during the flood (%llu flood SAVEs)\n", failed,
	       BYSTANDER_SAVES, (unsigned long long)f->saves);
	CHECK(failed == 0,
	      "%u of %u bystander SAVEs failed during a flood of 4 MiB SAVEs, the first "
	      "with %s",
	      failed, BYSTANDER_SAVES, kvs_strerror(-(int)first_err));
	it_ok("16 SAVEs of 4 MiB blocks always in flight into a 64 MiB pool: all %u SAVEs of a "
	      "bystander stored",
	      BYSTANDER_SAVES);
	kvs_close(b);
	test_kv_free(&kvb);
	it_stop(&d);
}

/* With an argument, only the scenario of that name (e.g. in_flight). */
static bool wanted(int argc, char **argv, const char *name)
{
	return argc < 2 || strcmp(argv[1], name) == 0;
}

int main(int argc, char **argv)
{
	it_watchdog(600);
	if (wanted(argc, argv, "pins"))
		pins();
	if (wanted(argc, argv, "partials"))
		partials();
	if (wanted(argc, argv, "in_flight"))
		in_flight();
	return 0;
}
