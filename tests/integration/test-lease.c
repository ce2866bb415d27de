/* SPDX-License-Identifier: MIT */
/*
 * Leases:
 *   - TTL: with ttl = 300ms, a lease nobody uses is swept; a LOAD or a
 *     RELEASE with it is -ENOENT afterwards (and writes nothing), and the
 *     leases_expired counter says so;
 *   - RELEASE of a lease never issued is -ENOENT;
 *   - a lease of another instance is -EACCES for LOAD and RELEASE, and
 *     does not spend the owner's share;
 *   - max_leases per instance: the next leased QUERY is -EBUSY (other
 *     instances are not affected) until one is released;
 *   - leased blocks survive eviction pressure: with both leases held,
 *     eight pools' worth of other blocks (each hit once, so each moves to
 *     S3-FIFO's main queue, which then evicts its oldest) evict an equally
 *     hit but unleased prompt, while the leased prompts still LOAD
 *     byte-exact.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"

#define BLOCKS 64u
#define N 8u
#define LAYERS 4u
#define SEG 8192u /* 32 KiB blocks: 128 fit the 4 MiB pool */

static void ttl(void)
{
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N];
	struct kvs_msg_stats_global g0, g;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	struct kvs_cqe q, e;
	uint64_t t0;

	it_start(&d, "[lease]\nttl = 300ms\n");
	c = it_worker(&d, "lease-ttl", "model-lease", 0, 1, &kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      SEG);
	it_keys(keys, N, 1);
	it_ids(src, N, 0);
	it_ids(dst, N, N);
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(&kv, src[i], it_seed(1, i));
	for (unsigned b = N; b < BLOCKS; b++)
		test_kv_poison(&kv, b, POISON);
	e = it_save(c, keys, src, N);
	CHECK_RES(e.res, N, "SAVE");
	it_flush(c);

	g0 = it_stats(&d);
	t0 = test_now_ns(); /* before the lease exists: a sound lower bound */
	q = it_query(c, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY");
	CHECK(q.result0 != 0 && q.result1 == 300, "lease %llx, expiry in %llu ms",
	      (unsigned long long)q.result0, (unsigned long long)q.result1);
	/* Wait for the sweep (every 100 ms) rather than guess when it ran. */
	do {
		usleep(50000);
		g = it_stats(&d);
		CHECK(test_now_ns() - t0 < 20000000000ull, "the lease never expired");
	} while (g.leases_expired == g0.leases_expired);
	CHECK(test_now_ns() - t0 >= 300000000ull, "lease expired %llu ms after the QUERY",
	      (unsigned long long)((test_now_ns() - t0) / 1000000));
	CHECK(g.leases_expired == g0.leases_expired + 1 && g.leases_live == 0,
	      "expired %llu -> %llu, live %llu", (unsigned long long)g0.leases_expired,
	      (unsigned long long)g.leases_expired, (unsigned long long)g.leases_live);
	e = it_load(c, q.result0, dst, N, 0, 0);
	CHECK_RES(e.res, -ENOENT, "LOAD with an expired lease");
	for (unsigned b = N; b < BLOCKS; b++)
		CHECK(test_kv_is_poison(&kv, b, POISON), "a LOAD with an expired lease wrote %u",
		      b);
	e = it_release(c, q.result0);
	CHECK_RES(e.res, -ENOENT, "RELEASE of an expired lease");
	e = it_release(c, q.result0 ^ (1ull << 62));
	CHECK_RES(e.res, -ENOENT, "RELEASE of a lease never issued");
	e = it_release(c, ~0ull);
	CHECK_RES(e.res, -ENOENT, "RELEASE of lease ~0");
	/*
	 * The expiry dropped the lease, not the blocks.  (No LOAD with a new
	 * lease here: on a slow machine it could expire first, 300 ms is short.)
	 */
	q = it_query(c, keys, N, KVS_QUERY_NOLEASE);
	CHECK_RES(q.res, N, "QUERY after the expiry");
	it_ok("a lease expires after its TTL: LOAD and RELEASE -ENOENT, counted as expired");

	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
}

static void fill_prompt(struct test_kv *kv, uint8_t *keys, uint32_t *ids, uint64_t prompt,
			uint32_t first)
{
	it_keys(keys, N, prompt);
	it_ids(ids, N, first);
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(kv, ids[i], it_seed(prompt, i));
}

static void scope_limit_pressure(void)
{
	uint8_t k1[N * KVS_KEY_SIZE], k2[N * KVS_KEY_SIZE], k3[N * KVS_KEY_SIZE];
	uint8_t other[16 * KVS_KEY_SIZE];
	uint32_t i1[N], i2[N], i3[N], dst[N];
	struct kvs_msg_stats_global g0, g;
	struct kvs_client *a, *b;
	struct test_kv kva, kvb;
	struct kvsd d;
	struct kvs_cqe q1, q2, e;

	it_start(&d, "[lease]\nmax_leases = 2\n[pool]\nsize = 4M\nextent_size = 256K\n");
	a = it_worker(&d, "lease-a", "model-lease", 0, 1, &kva, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      SEG);
	b = it_worker(&d, "lease-b", "model-lease", 0, 1, &kvb, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      SEG);
	fill_prompt(&kva, k1, i1, 11, 0);
	fill_prompt(&kva, k2, i2, 12, N);
	fill_prompt(&kva, k3, i3, 13, 2 * N);
	it_ids(dst, N, 3 * N);
	for (unsigned x = 3 * N; x < BLOCKS; x++) {
		test_kv_poison(&kva, x, POISON);
		test_kv_poison(&kvb, x, POISON);
	}
	e = it_save(a, k1, i1, N);
	CHECK_RES(e.res, N, "SAVE prompt 1");
	e = it_save(a, k2, i2, N);
	CHECK_RES(e.res, N, "SAVE prompt 2");
	e = it_save(a, k3, i3, N);
	CHECK_RES(e.res, N, "SAVE prompt 3");
	it_flush(a);

	/* Another instance (same namespace: it sees the blocks) cannot use a's lease. */
	q1 = it_query(a, k1, N, 0);
	CHECK_RES(q1.res, N, "QUERY by a");
	e = it_load(b, q1.result0, dst, N, 0, 0);
	CHECK_RES(e.res, -EACCES, "LOAD with another instance's lease");
	e = it_release(b, q1.result0);
	CHECK_RES(e.res, -EACCES, "RELEASE of another instance's lease");
	for (unsigned x = 3 * N; x < BLOCKS; x++)
		CHECK(test_kv_is_poison(&kvb, x, POISON), "a refused LOAD wrote b's block %u", x);
	e = it_load(a, q1.result0, dst, N, 0, 0);
	CHECK_RES(e.res, N, "LOAD by the owner after the refusals");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kva, dst[i], it_seed(11, i)), "block %u differs", dst[i]);
	it_ok("a lease of another instance is -EACCES and costs the owner nothing");

	/* Two leases per instance. */
	q1 = it_query(a, k1, N, 0);
	CHECK_RES(q1.res, N, "first lease");
	q2 = it_query(a, k2, N, 0);
	CHECK_RES(q2.res, N, "second lease");
	e = it_query(a, k3, N, 0);
	CHECK_RES(e.res, -EBUSY, "third lease above max_leases = 2");
	e = it_query(a, k3, N, KVS_QUERY_NOLEASE);
	CHECK_RES(e.res, N, "a NOLEASE QUERY needs no lease");
	e = it_query(b, k3, N, 0);
	CHECK_RES(e.res, N, "another instance's lease");
	CHECK_RES(it_release(b, e.result0).res, 0, "RELEASE by b");
	g = it_stats(&d);
	CHECK(g.leases_live == 2, "%llu leases live", (unsigned long long)g.leases_live);
	CHECK_RES(it_release(a, q1.result0).res, 0, "RELEASE of the first lease");
	q1 = it_query(a, k1, N, 0);
	CHECK_RES(q1.res, N, "a lease again after a RELEASE");
	it_ok("max_leases: the third leased QUERY of an instance is -EBUSY");

	/*
	 * Pressure: q1 pins prompt 1, q2 prompt 2; prompt 3 was hit as often
	 * but is not leased.  Every new block is hit once after its SAVE, so
	 * small promotes every block to main with its count reset, and main
	 * evicts its oldest blocks that are not pinned, prompt 3 among them.
	 */
	g0 = it_stats(&d);
	for (unsigned round = 0; round < 64; round++) {
		uint32_t oids[16];

		it_keys(other, 16, 500000 + round);
		it_ids(oids, 16, 3 * N + 16 * (round % 2));
		e = it_save(a, other, oids, 16);
		CHECK_RES(e.res, 16, "SAVE under pressure");
		e = it_query(a, other, 16, KVS_QUERY_NOLEASE);
		CHECK_RES(e.res, 16, "QUERY of just-saved blocks");
	}
	g = it_stats(&d);
	CHECK(g.evictions >= g0.evictions + 64 * 16 - 128, "only %llu evictions",
	      (unsigned long long)(g.evictions - g0.evictions));
	e = it_query(a, k3, N, KVS_QUERY_NOLEASE);
	CHECK(e.res < (int32_t)N, "the unleased prompt survived the pressure whole: "
	      "this workload proves nothing about pins");
	for (unsigned x = 3 * N; x < BLOCKS; x++)
		test_kv_poison(&kva, x, POISON);
	e = it_load(a, q1.result0, dst, N, 0, 0);
	CHECK_RES(e.res, N, "LOAD of leased prompt 1 after the pressure");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kva, dst[i], it_seed(11, i)), "leased block %u differs",
		      dst[i]);
	e = it_load(a, q2.result0, dst, N, 0, 0);
	CHECK_RES(e.res, N, "LOAD of leased prompt 2 after the pressure");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kva, dst[i], it_seed(12, i)), "leased block %u differs",
		      dst[i]);
	g = it_stats(&d);
	CHECK(g.leases_live == 0, "%llu leases live", (unsigned long long)g.leases_live);
	it_ok("leased blocks survive %llu evictions and LOAD byte-exact",
	      (unsigned long long)(g.evictions - g0.evictions));

	kvs_close(a);
	kvs_close(b);
	test_kv_free(&kva);
	test_kv_free(&kvb);
	it_stop(&d);
}

int main(void)
{
	it_watchdog(120);
	ttl();
	scope_limit_pressure();
	return 0;
}
