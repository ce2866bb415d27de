/* SPDX-License-Identifier: MIT */
/*
 * QUERY answers the longest resident prefix:
 *   - k0..k9 saved except k4: QUERY of k0..k9 hits 4, and the lease
 *     covers exactly those 4 (they LOAD byte-exact);
 *   - another namespace (a second instance with its own ns) never hits
 *     the first one's blocks, even for the very same keys, and each
 *     namespace loads its own bytes;
 *   - KVS_QUERY_NOLEASE counts the prefix with lease 0 and pins nothing:
 *     no lease is created, and a pool full of blocks it counted still
 *     makes room for a SAVE (a leased QUERY of them makes it -ENOSPC).
 */
#include <stdio.h>
#include <string.h>

#include "itest.h"

#define BLOCKS 64u
#define K 10u
#define LAYERS 4u
#define SEG 8192u /* 32 KiB blocks: 128 fit the 4 MiB pool */
#define POOL_BLOCKS 128u

static const char ini[] = "[pool]\nsize = 4M\nextent_size = 256K\n";

/*
 * NOLEASE: a count, lease 0, no lease made, no pin.  A fresh daemon whose
 * pool holds exactly POOL_BLOCKS blocks of this size, all of one prompt:
 * when a leased QUERY pins them all, a SAVE of more blocks finds nothing
 * to evict (-ENOSPC); after a NOLEASE QUERY of the very same blocks the
 * SAVE succeeds.  (Under-pressure survival is no proof: S3-FIFO keeps a
 * used block, in main, through any number of one-off saves.)
 */
static void nolease(void)
{
	uint8_t keys[POOL_BLOCKS * KVS_KEY_SIZE], more[8 * KVS_KEY_SIZE];
	uint32_t ids[POOL_BLOCKS];
	struct kvs_msg_stats_global g0, g1;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	struct kvs_cqe q, e;

	it_start(&d, ini);
	c = it_worker(&d, "prefix-c", "model-prefix-c", 0, 1, &kv, LAYOUT_PAGE_FIRST, LAYERS,
		      BLOCKS, SEG);
	it_keys(keys, POOL_BLOCKS, 5);
	it_keys(more, 8, 6);
	for (unsigned i = 0; i < POOL_BLOCKS; i++)
		ids[i] = i % BLOCKS;
	for (unsigned x = 0; x < BLOCKS; x++)
		test_kv_fill(&kv, x, it_seed(5, x));
	for (unsigned i = 0; i < POOL_BLOCKS; i += BLOCKS) {
		e = it_save(c, keys + i * KVS_KEY_SIZE, ids + i, BLOCKS);
		CHECK_RES(e.res, BLOCKS, "SAVE filling the pool");
	}
	it_flush(c);
	g0 = it_stats(&d);
	CHECK(g0.blocks_resident == POOL_BLOCKS && g0.evictions == 0 &&
		      g0.pool_used_bytes == g0.pool_capacity_bytes,
	      "pool of %u blocks: %llu resident, %llu evicted, %llu of %llu bytes used",
	      POOL_BLOCKS, (unsigned long long)g0.blocks_resident,
	      (unsigned long long)g0.evictions, (unsigned long long)g0.pool_used_bytes,
	      (unsigned long long)g0.pool_capacity_bytes);

	/* Control: pinned by a lease, nothing can go. */
	q = it_query(c, keys, POOL_BLOCKS, 0);
	CHECK_RES(q.res, POOL_BLOCKS, "QUERY of the whole pool");
	e = it_save(c, more, ids, 8);
	CHECK_RES(e.res, -ENOSPC, "SAVE with every block pinned");
	CHECK(e.result0 == 0, "stored %llu with every block pinned",
	      (unsigned long long)e.result0);
	e = it_release(c, q.result0);
	CHECK_RES(e.res, 0, "RELEASE");

	g0 = it_stats(&d);
	q = it_query(c, keys, POOL_BLOCKS, KVS_QUERY_NOLEASE);
	CHECK_RES(q.res, POOL_BLOCKS, "NOLEASE QUERY of the whole pool");
	CHECK(q.result0 == 0, "NOLEASE QUERY gave lease %llx", (unsigned long long)q.result0);
	g1 = it_stats(&d);
	CHECK(g1.leases_created == g0.leases_created && g1.leases_live == 0,
	      "NOLEASE QUERY created %llu leases",
	      (unsigned long long)(g1.leases_created - g0.leases_created));
	e = it_save(c, more, ids, 8);
	CHECK_RES(e.res, 8, "SAVE after a NOLEASE QUERY of every block: they were pinned");
	g1 = it_stats(&d);
	CHECK(g1.evictions == 8, "%llu evictions", (unsigned long long)g1.evictions);
	it_ok("NOLEASE counts %u with lease 0 and pins nothing", POOL_BLOCKS);

	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
}

int main(void)
{
	uint8_t keys[K * KVS_KEY_SIZE];
	uint32_t ids[K], dst[K];
	struct kvs_client *a, *b;
	struct test_kv kva, kvb;
	struct kvsd d;
	struct kvs_cqe e;

	it_watchdog(60);
	it_start(&d, ini);
	a = it_worker(&d, "prefix-a", "model-prefix-a", 0, 1, &kva, LAYOUT_PAGE_FIRST, LAYERS,
		      BLOCKS, SEG);
	b = it_worker(&d, "prefix-b", "model-prefix-b", 0, 1, &kvb, LAYOUT_PAGE_FIRST, LAYERS,
		      BLOCKS, SEG);
	it_keys(keys, K, 99);
	it_ids(ids, K, 0);
	it_ids(dst, K, K);
	for (unsigned i = 0; i < K; i++) {
		test_kv_fill(&kva, ids[i], it_seed(1, i));
		test_kv_fill(&kvb, ids[i], it_seed(2, i));
	}
	for (unsigned x = K; x < BLOCKS; x++) {
		test_kv_poison(&kva, x, POISON);
		test_kv_poison(&kvb, x, POISON);
	}

	/* k0..k3 and k5..k9: the hole at k4 ends the prefix. */
	e = it_save(a, keys, ids, 4);
	CHECK_RES(e.res, 4, "SAVE k0..k3");
	e = it_save(a, keys + 5 * KVS_KEY_SIZE, ids + 5, K - 5);
	CHECK_RES(e.res, K - 5, "SAVE k5..k9");
	it_flush(a);
	e = it_query(a, keys, K, 0);
	CHECK_RES(e.res, 4, "QUERY k0..k9 with k4 missing");
	CHECK(e.result0 != 0, "no lease");
	/* The lease covers the 4 blocks of the prefix. */
	{
		struct kvs_cqe l = it_load(a, e.result0, dst, 4, 0, 0);

		CHECK_RES(l.res, 4, "LOAD of the prefix");
		for (unsigned i = 0; i < 4; i++)
			CHECK(test_kv_check(&kva, dst[i], it_seed(1, i)), "block %u differs",
			      dst[i]);
		for (unsigned x = K + 4; x < BLOCKS; x++)
			CHECK(test_kv_is_poison(&kva, x, POISON), "bystander %u written", x);
	}
	e = it_query(a, keys + 5 * KVS_KEY_SIZE, K - 5, KVS_QUERY_NOLEASE);
	CHECK_RES(e.res, K - 5, "QUERY k5..k9");
	it_ok("k0..k9 without k4: QUERY hits 4, the lease loads exactly those");

	/* Namespace b never sees namespace a's blocks. */
	e = it_query(b, keys, K, 0);
	CHECK_RES(e.res, 0, "QUERY of another namespace's keys");
	CHECK(e.result0 == 0, "a QUERY without hits gave a lease");
	e = it_save(b, keys, ids, K);
	CHECK_RES(e.res, K, "SAVE of the same keys in namespace b");
	CHECK(e.result0 == K && e.result1 == 0, "namespace b: stored %llu skipped %llu",
	      (unsigned long long)e.result0, (unsigned long long)e.result1);
	it_flush(b);
	e = it_query(a, keys, K, KVS_QUERY_NOLEASE);
	CHECK_RES(e.res, 4, "namespace a after b saved the same keys");
	e = it_query(b, keys, K, 0);
	CHECK_RES(e.res, K, "namespace b's own keys");
	e = it_load(b, e.result0, dst, K, 0, 0);
	CHECK_RES(e.res, K, "namespace b LOAD");
	for (unsigned i = 0; i < K; i++)
		CHECK(test_kv_check(&kvb, dst[i], it_seed(2, i)), "namespace b block %u differs",
		      dst[i]);
	e = it_query(a, keys, K, 0);
	CHECK_RES(e.res, 4, "namespace a QUERY again");
	for (unsigned x = K; x < BLOCKS; x++)
		test_kv_poison(&kva, x, POISON);
	e = it_load(a, e.result0, dst, 4, 0, 0);
	CHECK_RES(e.res, 4, "namespace a LOAD again");
	for (unsigned i = 0; i < 4; i++)
		CHECK(test_kv_check(&kva, dst[i], it_seed(1, i)),
		      "namespace a block %u holds other bytes", dst[i]);
	it_ok("the same keys in two namespaces are two blocks each, never mixed");

	kvs_close(a);
	kvs_close(b);
	test_kv_free(&kva);
	test_kv_free(&kvb);
	it_stop(&d);
	nolease();
	return 0;
}
