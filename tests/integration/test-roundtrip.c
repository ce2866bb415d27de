/* SPDX-License-Identifier: MIT */
/*
 * Byte-exact round trip through kvstashd for each layout kind an engine
 * may register: page-first fused (Qwen3-like, 36 layers of one segment),
 * split K/V (two segments per layer, one allocation per layer) and MLA
 * (replicated, one segment).  SAVE, FLUSH, QUERY, then LOAD into other
 * block ids and compare every byte; blocks nobody loaded into stay
 * poisoned.  A layer-range LOAD writes only its layers, a LOAD of fewer
 * blocks than the lease covers only those.  A second SAVE of resident
 * keys stores nothing and says so; a key twice in one SAVE is stored once.
 */
#include <stdio.h>
#include <string.h>

#include "itest.h"

#define BLOCKS 32u
#define N 8u

struct kind_case {
	enum test_layout_kind kind;
	const char *name;
	unsigned layers;
	uint64_t seg;
	unsigned l0, lc; /* the layer range of the partial LOAD */
};

static const struct kind_case cases[] = {
	{ LAYOUT_PAGE_FIRST, "page-first", 36, 2048, 5, 11 },
	{ LAYOUT_SPLIT_KV, "split-kv", 8, 4096, 2, 3 },
	{ LAYOUT_MLA, "mla", 8, 4096, 7, 1 },
};

static void roundtrip(const struct kvsd *d, const struct kind_case *k, unsigned idx)
{
	uint64_t prompt = 100 + idx;
	uint64_t block_bytes = (uint64_t)k->layers * (k->kind == LAYOUT_SPLIT_KV ? 2 : 1) * k->seg;
	uint64_t range_bytes = (uint64_t)k->lc * (k->kind == LAYOUT_SPLIT_KV ? 2 : 1) * k->seg;
	char inst[32], ns[64];
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N], part[N];
	struct kvs_msg_stats_global g0, g1;
	struct test_kv kv;
	struct kvs_client *c;
	struct kvs_cqe q, e;

	snprintf(inst, sizeof(inst), "rt-%s", k->name);
	snprintf(ns, sizeof(ns), "model-rt/%s", k->name);
	c = it_worker(d, inst, ns, 0, 1, &kv, k->kind, k->layers, BLOCKS, k->seg);
	it_keys(keys, N, prompt);
	it_ids(src, N, 0);
	/* Reversed and strided: nothing adjacent to merge, order must be kept. */
	for (unsigned i = 0; i < N; i++)
		dst[i] = BLOCKS - 1 - 2 * i;
	it_ids(part, N, N);
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(&kv, src[i], it_seed(prompt, i));
	for (unsigned b = N; b < BLOCKS; b++)
		test_kv_poison(&kv, b, POISON);

	g0 = it_stats(d);
	e = it_save(c, keys, src, N);
	CHECK_RES(e.res, N, "SAVE");
	CHECK(e.result0 == N && e.result1 == 0, "SAVE stored %llu skipped %llu",
	      (unsigned long long)e.result0, (unsigned long long)e.result1);
	it_flush(c);
	g1 = it_stats(d);
	CHECK(g1.blocks_resident == g0.blocks_resident + N, "resident %llu -> %llu",
	      (unsigned long long)g0.blocks_resident, (unsigned long long)g1.blocks_resident);
	CHECK(g1.bytes_saved == g0.bytes_saved + N * block_bytes, "bytes_saved grew by %llu",
	      (unsigned long long)(g1.bytes_saved - g0.bytes_saved));

	q = it_query(c, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY");
	CHECK(q.result0 != 0, "QUERY with hits gave no lease");
	CHECK(q.result1 > 0, "QUERY lease has no expiry");

	e = it_load(c, q.result0, dst, N, 0, 0);
	CHECK_RES(e.res, N, "LOAD");
	CHECK(e.result0 == N * block_bytes, "LOAD copied %llu bytes, want %llu",
	      (unsigned long long)e.result0, (unsigned long long)(N * block_bytes));
	for (unsigned i = 0; i < N; i++) {
		CHECK(test_kv_check(&kv, dst[i], it_seed(prompt, i)),
		      "%s: block %u (key %u) differs after LOAD", k->name, dst[i], i);
		CHECK(test_kv_check(&kv, src[i], it_seed(prompt, i)),
		      "%s: source block %u changed", k->name, src[i]);
	}
	for (unsigned b = N; b < BLOCKS; b++) {
		bool loaded = b >= BLOCKS - 2 * N + 1 && (BLOCKS - 1 - b) % 2 == 0;

		if (!loaded)
			CHECK(test_kv_is_poison(&kv, b, POISON), "%s: bystander block %u written",
			      k->name, b);
	}
	/* TP=1: the one LOAD consumed the lease. */
	e = it_load(c, q.result0, dst, N, 0, 0);
	CHECK_RES(e.res, -ENOENT, "second LOAD of a consumed lease");

	/* A layer range: only layers [l0, l0+lc) of the targets change. */
	q = it_query(c, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY again");
	e = it_load(c, q.result0, part, N, k->l0, k->lc);
	CHECK_RES(e.res, N, "layer-range LOAD");
	CHECK(e.result0 == N * range_bytes, "layer-range LOAD copied %llu bytes, want %llu",
	      (unsigned long long)e.result0, (unsigned long long)(N * range_bytes));
	for (unsigned i = 0; i < N; i++) {
		CHECK(test_kv_check_layers(&kv, part[i], it_seed(prompt, i), k->l0, k->lc),
		      "%s: block %u layers %u+%u differ", k->name, part[i], k->l0, k->lc);
		for (unsigned l = 0; l < k->layers; l++)
			if (l < k->l0 || l >= k->l0 + k->lc)
				CHECK(test_kv_layer_is_poison(&kv, l, part[i], POISON),
				      "%s: block %u layer %u outside the range was written",
				      k->name, part[i], l);
		CHECK(test_kv_check(&kv, dst[i], it_seed(prompt, i)),
		      "%s: block %u of the first LOAD changed", k->name, dst[i]);
	}

	/* A prefix of the lease: the first 3 blocks, into even ids 16, 18, 20. */
	q = it_query(c, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY for a shorter LOAD");
	for (unsigned i = 0; i < 3; i++)
		part[i] = BLOCKS - 2 * N + 2 * i;
	e = it_load(c, q.result0, part, 3, 0, 0);
	CHECK_RES(e.res, 3, "LOAD of 3 blocks of an 8-block lease");
	for (unsigned i = 0; i < 3; i++)
		CHECK(test_kv_check(&kv, part[i], it_seed(prompt, i)), "%s: block %u differs",
		      k->name, part[i]);
	for (unsigned b = BLOCKS - 2 * N + 6; b < BLOCKS; b += 2)
		CHECK(test_kv_is_poison(&kv, b, POISON), "%s: bystander block %u written",
		      k->name, b);
	CHECK_RES(it_load(c, q.result0, part, 3, 0, 0).res, -ENOENT, "LOAD of a spent lease");

	/* Resident keys: skipped, nothing stored, nothing copied. */
	g0 = it_stats(d);
	e = it_save(c, keys, src, N);
	CHECK_RES(e.res, N, "SAVE of resident keys");
	CHECK(e.result0 == 0 && e.result1 == N, "SAVE of resident keys: stored %llu skipped %llu",
	      (unsigned long long)e.result0, (unsigned long long)e.result1);
	it_flush(c);
	g1 = it_stats(d);
	CHECK(g1.save_blocks_skipped == g0.save_blocks_skipped + N &&
		      g1.save_blocks_stored == g0.save_blocks_stored &&
		      g1.bytes_saved == g0.bytes_saved && g1.blocks_resident == g0.blocks_resident,
	      "skipped %llu stored %llu bytes %llu resident %llu",
	      (unsigned long long)(g1.save_blocks_skipped - g0.save_blocks_skipped),
	      (unsigned long long)(g1.save_blocks_stored - g0.save_blocks_stored),
	      (unsigned long long)(g1.bytes_saved - g0.bytes_saved),
	      (unsigned long long)g1.blocks_resident);
	CHECK(g1.leases_live == 0, "%llu leases live after both were consumed",
	      (unsigned long long)g1.leases_live);

	/* One new key twice in a SAVE: stored once, skipped once, one block's bytes. */
	{
		uint8_t twice[2 * KVS_KEY_SIZE];
		uint32_t from[2] = { 0, 1 }, into = BLOCKS - 2;

		it_keys(twice, 1, prompt + 1000);
		memcpy(twice + KVS_KEY_SIZE, twice, KVS_KEY_SIZE);
		e = it_save(c, twice, from, 2);
		CHECK_RES(e.res, 2, "SAVE of one key twice");
		CHECK(e.result0 == 1 && e.result1 == 1, "one key twice: stored %llu skipped %llu",
		      (unsigned long long)e.result0, (unsigned long long)e.result1);
		it_flush(c);
		q = it_query(c, twice, 2, 0);
		CHECK_RES(q.res, 2, "QUERY of one key twice");
		e = it_load(c, q.result0, &into, 1, 0, 0);
		CHECK_RES(e.res, 1, "LOAD of the key saved twice");
		CHECK(test_kv_check(&kv, into, it_seed(prompt, 0)) ||
			      test_kv_check(&kv, into, it_seed(prompt, 1)),
		      "%s: a key saved from two blocks at once holds neither's bytes", k->name);
	}

	kvs_close(c);
	test_kv_free(&kv);
	it_ok("%s: %u blocks of %llu bytes round trip byte-exact, layers %u+%u alone", k->name,
	      N, (unsigned long long)block_bytes, k->l0, k->lc);
}

int main(void)
{
	struct kvsd d;

	it_watchdog(120);
	it_start(&d, NULL);
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		roundtrip(&d, &cases[i], i);
	it_stop(&d);
	return 0;
}
