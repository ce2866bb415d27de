/* SPDX-License-Identifier: MIT */
/*
 * Eviction under pressure:
 *   - a 4 MiB pool (128 blocks of 32 KiB) takes eight pools' worth of
 *     distinct blocks: every SAVE succeeds (nothing is pinned), the
 *     resident blocks never need more bytes than the pool has, and the
 *     evictions counter accounts for every block that had to go;
 *   - S3-FIFO: a small hot set QUERY'd between the saves keeps all its
 *     blocks through a scan of one-off keys, and the scanned keys are the
 *     ones that go: hit while in the probation queue (small), the hot
 *     blocks move to main, which gives up nothing while small holds its
 *     share.  Plain FIFO would evict the hot set first;
 *   - S3-FIFO's ghost: blocks saved once, evicted unused, then saved
 *     again go straight to main, and survive more one-off saves than the
 *     pool holds without a single QUERY (FIFO order would evict them
 *     after 112).  This also checks that a block's fingerprint is the
 *     same when it is evicted and when it is saved again;
 *   - one SAVE of more blocks than the pool holds, with the instance's
 *     share of unsealed blocks raised to the whole pool ([pool]
 *     unsealed_share = 100; test-tenant-share checks the default):
 *     -ENOSPC only for the blocks left over once every slot holds one of
 *     its own (in-flight blocks are as unevictable as pinned ones); those
 *     it stored are resident and load byte-exact;
 *   - two block sizes (100 KiB and 36 KiB slots) in one 32 MiB pool of
 *     1 MiB extents, each namespace saving far more than fits: the pool
 *     ends at least 90 % used, and both namespaces keep resident blocks.
 */
#include <stdio.h>
#include <string.h>

#include "itest.h"

#define BLOCKS 64u
#define HOT 16u
#define BATCH 16u
#define ROUNDS 64u
#define SLOT (4u * 8192u)

static void check_bounds(const struct kvsd *d, struct kvs_msg_stats_global *g)
{
	*g = it_stats(d);
	CHECK(g->pool_capacity_bytes == 4u << 20, "capacity %llu",
	      (unsigned long long)g->pool_capacity_bytes);
	CHECK(g->blocks_resident * SLOT <= g->pool_capacity_bytes &&
		      g->pool_used_bytes <= g->pool_capacity_bytes,
	      "%llu resident blocks of %u bytes, %llu bytes used, in a pool of %llu",
	      (unsigned long long)g->blocks_resident, SLOT,
	      (unsigned long long)g->pool_used_bytes,
	      (unsigned long long)g->pool_capacity_bytes);
	CHECK(g->pool_used_bytes == (g->blocks_resident + g->blocks_partial) * SLOT,
	      "%llu bytes used for %llu blocks", (unsigned long long)g->pool_used_bytes,
	      (unsigned long long)(g->blocks_resident + g->blocks_partial));
}

static void hot_and_scan(void)
{
	static uint8_t scan[ROUNDS][BATCH * KVS_KEY_SIZE];
	uint8_t hot[HOT * KVS_KEY_SIZE];
	uint32_t ids[BATCH];
	struct kvs_msg_stats_global g0, g;
	unsigned hot_hits = 0, hot_left = 0, scan_left = 0;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	struct kvs_cqe e;

	it_start(&d, "[pool]\nsize = 4M\nextent_size = 256K\n");
	c = it_worker(&d, "evict-hot", "model-evict", 0, 1, &kv, LAYOUT_PAGE_FIRST, 4, BLOCKS,
		      8192);
	for (unsigned b = 0; b < BLOCKS; b++)
		test_kv_fill(&kv, b, it_seed(3, b));
	it_keys(hot, HOT, 1);
	it_ids(ids, HOT, 0);
	e = it_save(c, hot, ids, HOT);
	CHECK_RES(e.res, HOT, "SAVE of the hot set");
	it_flush(c);
	g0 = it_stats(&d);

	for (unsigned r = 0; r < ROUNDS; r++) {
		it_keys(scan[r], BATCH, 1000 + r);
		it_ids(ids, BATCH, 16 + (r % 3) * 16);
		e = it_save(c, scan[r], ids, BATCH);
		CHECK_RES(e.res, BATCH, "SAVE of one-off keys (nothing is pinned)");
		CHECK(e.result0 == BATCH, "stored %llu of %u new keys",
		      (unsigned long long)e.result0, BATCH);
		it_flush(c);
		check_bounds(&d, &g);
		/* The engine asks for its hot prefixes again and again. */
		for (unsigned h = 0; h < HOT; h++) {
			e = it_query(c, hot + h * KVS_KEY_SIZE, 1, KVS_QUERY_NOLEASE);
			CHECK(e.res == 0 || e.res == 1, "QUERY res %d", e.res);
			hot_hits += (unsigned)e.res;
		}
	}
	g = it_stats(&d);
	/* Everything saved beyond the pool's 128 blocks was evicted, no more, no less. */
	CHECK(g0.evictions == 0 && g.evictions == HOT + ROUNDS * BATCH - g.blocks_resident,
	      "%llu evictions for %u blocks through a pool of 128",
	      (unsigned long long)(g.evictions - g0.evictions), HOT + ROUNDS * BATCH);
	CHECK(g.blocks_resident == 128, "%llu resident", (unsigned long long)g.blocks_resident);

	for (unsigned h = 0; h < HOT; h++)
		hot_left += (unsigned)it_query(c, hot + h * KVS_KEY_SIZE, 1, KVS_QUERY_NOLEASE).res;
	for (unsigned r = 0; r < ROUNDS; r++)
		for (unsigned i = 0; i < BATCH; i++)
			scan_left += (unsigned)it_query(c, scan[r] + i * KVS_KEY_SIZE, 1,
							KVS_QUERY_NOLEASE).res;
	printf("# hot set: %u of %u QUERYs hit, %u of %u blocks left; scan: %u of %u left\n",
	       hot_hits, ROUNDS * HOT, hot_left, HOT, scan_left, ROUNDS * BATCH);
	/* Nothing but one-off keys competes with main: S3-FIFO keeps every hot block. */
	CHECK(hot_hits == ROUNDS * HOT, "the hot set hit %u of %u times", hot_hits, ROUNDS * HOT);
	CHECK(hot_left == HOT, "%u of %u hot blocks left", hot_left, HOT);
	CHECK(scan_left * HOT * 2 < hot_left * ROUNDS * BATCH,
	      "scanned keys kept %u of %u, the hot set %u of %u: no better than a scan",
	      scan_left, ROUNDS * BATCH, hot_left, HOT);
	/* The survivors are the bytes that were saved. */
	{
		struct kvs_cqe q = it_query(c, hot, 4, 0);
		uint32_t dst[4] = { 60, 61, 62, 63 };

		CHECK_RES(q.res, 4, "QUERY of the hot prefix");
		for (unsigned i = 0; i < 4; i++)
			test_kv_poison(&kv, dst[i], POISON);
		CHECK_RES(it_load(c, q.result0, dst, 4, 0, 0).res, 4, "LOAD of the hot prefix");
		for (unsigned i = 0; i < 4; i++)
			CHECK(test_kv_check(&kv, dst[i], it_seed(3, i)), "hot block %u differs", i);
	}
	it_ok("%u blocks through a pool of 128: every SAVE stored, hot set kept %u of %u "
	      "(hit %u of %u), scan kept %u of %u",
	      HOT + ROUNDS * BATCH, hot_left, HOT, hot_hits, ROUNDS * HOT, scan_left,
	      ROUNDS * BATCH);
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
}

/* How many of @n keys are resident (one QUERY each: a prefix would stop at the first miss). */
static unsigned resident(struct kvs_client *c, const uint8_t *keys, unsigned n)
{
	unsigned left = 0;

	for (unsigned i = 0; i < n; i++)
		left += (unsigned)it_query(c, keys + i * KVS_KEY_SIZE, 1, KVS_QUERY_NOLEASE).res;
	return left;
}

/* @rounds batches of BATCH one-off keys (seeds from @seed), never QUERY'd. */
static void one_off(struct kvs_client *c, uint64_t seed, unsigned rounds)
{
	uint8_t keys[BATCH * KVS_KEY_SIZE];
	uint32_t ids[BATCH];

	for (unsigned r = 0; r < rounds; r++) {
		it_keys(keys, BATCH, seed + r);
		it_ids(ids, BATCH, 16 + (r % 3) * 16);
		CHECK_RES(it_save(c, keys, ids, BATCH).res, BATCH, "SAVE of one-off keys");
		it_flush(c);
	}
}

/*
 * The pool holds 128 blocks; small's share is 12 of them.  E (16 blocks,
 * never QUERY'd) is saved, then 128 one-off blocks: E is the oldest and
 * unused, so it goes first, into the ghost.  E saved again: straight to
 * main.  Then 128 more one-off blocks, none QUERY'd: they pass through
 * small, and E stays whole; by insertion order it would have gone after
 * 112.
 */
static void ghost_readmit(void)
{
	uint8_t e[BATCH * KVS_KEY_SIZE], first[BATCH * KVS_KEY_SIZE];
	uint32_t ids[BATCH];
	struct kvs_msg_stats_global g;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	unsigned e_left, first_left;

	it_start(&d, "[pool]\nsize = 4M\nextent_size = 256K\n");
	c = it_worker(&d, "evict-ghost", "model-evict", 0, 1, &kv, LAYOUT_PAGE_FIRST, 4, BLOCKS,
		      8192);
	for (unsigned b = 0; b < BLOCKS; b++)
		test_kv_fill(&kv, b, it_seed(5, b));
	it_keys(e, BATCH, 5);
	it_keys(first, BATCH, 6000); /* the first one-off batch after E's second save */
	it_ids(ids, BATCH, 0);
	CHECK_RES(it_save(c, e, ids, BATCH).res, BATCH, "SAVE of E");
	it_flush(c);
	one_off(c, 5000, 8);
	g = it_stats(&d);
	CHECK(g.blocks_resident == 128 && g.evictions == BATCH,
	      "%llu resident, %llu evictions after 144 saves into 128",
	      (unsigned long long)g.blocks_resident, (unsigned long long)g.evictions);
	e_left = resident(c, e, BATCH);
	CHECK(e_left == 0, "E, oldest and never used, kept %u of %u blocks", e_left, BATCH);

	CHECK_RES(it_save(c, e, ids, BATCH).res, BATCH, "SAVE of E again");
	it_flush(c);
	one_off(c, 6000, 8);
	g = it_stats(&d);
	CHECK(g.blocks_resident == 128 && g.evictions == 2 * BATCH + 16 * BATCH - 128,
	      "%llu resident, %llu evictions after 288 saves into 128",
	      (unsigned long long)g.blocks_resident, (unsigned long long)g.evictions);
	e_left = resident(c, e, BATCH);
	first_left = resident(c, first, BATCH);
	printf("# ghost: E saved again kept %u of %u blocks through 128 one-off saves; the "
	       "first one-off batch after it kept %u\n",
	       e_left, BATCH, first_left);
	CHECK(e_left == BATCH, "E, saved again after its eviction, kept %u of %u blocks", e_left,
	      BATCH);
	/* The control: one-off blocks saved after E went, E did not. */
	CHECK(first_left == 0, "the one-off batch saved after E kept %u of %u", first_left, BATCH);
	it_ok("blocks saved again after their eviction go to main: kept whole through 128 "
	      "unqueried one-off saves into a pool of 128");
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
}

static void bigger_than_pool(void)
{
	static uint8_t keys[200 * KVS_KEY_SIZE];
	uint32_t ids[200], dst[8];
	struct kvs_msg_stats_global g;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	struct kvs_cqe e, q;

	it_start(&d, "[pool]\nsize = 4M\nextent_size = 256K\nunsealed_share = 100\n");
	c = it_worker(&d, "evict-big-save", "model-evict", 0, 1, &kv, LAYOUT_PAGE_FIRST, 4, BLOCKS,
		      8192);
	for (unsigned b = 0; b < BLOCKS; b++)
		test_kv_fill(&kv, b, it_seed(4, b));
	/* Some older blocks, one of them hit: all must make room. */
	it_keys(keys, 40, 41);
	it_ids(ids, 40, 0);
	CHECK_RES(it_save(c, keys, ids, 40).res, 40, "SAVE of older blocks");
	it_flush(c);
	CHECK_RES(it_query(c, keys, 1, KVS_QUERY_NOLEASE).res, 1, "QUERY of an older block");
	it_keys(keys, 200, 42);
	for (unsigned i = 0; i < 200; i++)
		ids[i] = i % BLOCKS;
	e = it_save(c, keys, ids, 200);
	CHECK_RES(e.res, -ENOSPC, "SAVE of 200 blocks into a pool of 128");
	CHECK(e.result0 == 128 && e.result1 == 0, "stored %llu skipped %llu of 200",
	      (unsigned long long)e.result0, (unsigned long long)e.result1);
	it_flush(c);
	g = it_stats(&d);
	CHECK(g.blocks_resident == 128 && g.blocks_partial == 0 && g.evictions == 40,
	      "%llu resident, %llu partial, %llu evictions", (unsigned long long)g.blocks_resident,
	      (unsigned long long)g.blocks_partial, (unsigned long long)g.evictions);
	q = it_query(c, keys, 200, 0);
	CHECK_RES(q.res, 128, "QUERY of the 200 keys");
	for (unsigned i = 0; i < 8; i++)
		dst[i] = BLOCKS - 8 + i;
	for (unsigned b = BLOCKS - 8; b < BLOCKS; b++)
		test_kv_poison(&kv, b, POISON);
	CHECK_RES(it_load(c, q.result0, dst, 8, 0, 0).res, 8, "LOAD of the first 8");
	for (unsigned i = 0; i < 8; i++)
		CHECK(test_kv_check(&kv, dst[i], it_seed(4, i)), "block %u differs", i);
	it_ok("one SAVE of 200 blocks into a pool of 128: 128 stored, -ENOSPC for the rest");
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
}

/*
 * Two block sizes sharing 32 extents of 1 MiB: 25 x 4 KiB = 100 KiB (10
 * per extent, 97.7 % of it) and 9 x 4 KiB = 36 KiB (28 per extent,
 * 98.4 %).  Together they save ~6 pools' worth.
 */
#define MIX_ROUNDS 120u

static void mixed_sizes(void)
{
	uint8_t ka[10 * KVS_KEY_SIZE], kb[28 * KVS_KEY_SIZE];
	uint32_t ids[28];
	struct kvs_msg_stats_global g;
	struct kvs_client *a, *b;
	struct test_kv kva, kvb;
	struct kvsd d;
	struct kvs_cqe e;
	double util;

	it_start(&d, "[pool]\nsize = 32M\nextent_size = 1M\n");
	a = it_worker(&d, "evict-big", "model-big", 0, 1, &kva, LAYOUT_PAGE_FIRST, 25, 32, 4096);
	b = it_worker(&d, "evict-small", "model-small", 0, 1, &kvb, LAYOUT_PAGE_FIRST, 9, 32,
		      4096);
	for (unsigned x = 0; x < 32; x++) {
		test_kv_fill(&kva, x, it_seed(7, x));
		test_kv_fill(&kvb, x, it_seed(8, x));
	}
	it_ids(ids, 28, 0);
	for (unsigned r = 0; r < MIX_ROUNDS; r++) {
		it_keys(ka, 10, 70000 + r);
		it_keys(kb, 28, 80000 + r);
		e = it_save(a, ka, ids, 10);
		CHECK_RES(e.res, 10, "SAVE of 100 KiB blocks");
		e = it_save(b, kb, ids, 28);
		CHECK_RES(e.res, 28, "SAVE of 36 KiB blocks");
	}
	it_flush(a);
	it_flush(b);
	g = it_stats(&d);
	util = (double)g.pool_used_bytes / (double)g.pool_capacity_bytes;
	printf("# mixed sizes: %llu of %llu bytes used (%.1f %%), %llu resident, %llu evictions\n",
	       (unsigned long long)g.pool_used_bytes, (unsigned long long)g.pool_capacity_bytes,
	       100 * util, (unsigned long long)g.blocks_resident,
	       (unsigned long long)g.evictions);
	CHECK(g.pool_capacity_bytes == 32u << 20, "capacity %llu",
	      (unsigned long long)g.pool_capacity_bytes);
	CHECK(util >= 0.90, "pool utilisation %.1f %% with two block sizes", 100 * util);
	/* The last batch of each namespace is resident. */
	e = it_query(a, ka, 10, KVS_QUERY_NOLEASE);
	CHECK(e.res > 0, "the 100 KiB namespace lost everything (%d)", e.res);
	e = it_query(b, kb, 28, KVS_QUERY_NOLEASE);
	CHECK(e.res > 0, "the 36 KiB namespace lost everything (%d)", e.res);
	it_ok("two block sizes in one pool: %.1f %% used, both namespaces resident", 100 * util);
	kvs_close(a);
	kvs_close(b);
	test_kv_free(&kva);
	test_kv_free(&kvb);
	it_stop(&d);
}

int main(void)
{
	it_watchdog(120);
	hot_and_scan();
	ghost_readmit();
	bigger_than_pool();
	mixed_sizes();
	return 0;
}
