/* SPDX-License-Identifier: MIT */
/*
 * A tensor-parallel instance of two ranks, each its own engine process
 * with its own memory, saving its own shard of every block:
 *   - a block that only rank 0 saved is invisible to QUERY (it is
 *     partial), and becomes visible, prefix by prefix, as rank 1 saves;
 *   - one lease serves exactly two LOADs, one per rank, each rank getting
 *     its own shard's bytes (the ranks fill different data);
 *   - a second LOAD by the same rank is -EALREADY, any LOAD after both
 *     ranks consumed the lease -ENOENT, and neither writes anything.
 * Run for the page-first and the split K/V layout.  A replicated (MLA)
 * layout stores one shard for all ranks: what rank 0 saves is visible at
 * once, rank 1's SAVE of it is skipped, and both ranks load rank 0's bytes.
 */
#include <stdio.h>
#include <string.h>

#include "itest.h"

#define BLOCKS 24u
#define N 6u
#define FIRST 3u /* rank 1 saves this prefix first */

struct shared {
	struct it_barrier *bar;
	const struct kvsd *d;
	enum test_layout_kind kind;
	const char *name;
	uint64_t lease;
};

static uint64_t rank_prompt(unsigned rank)
{
	return 7000 + 1000 * rank; /* each rank's shard holds different bytes */
}

static struct kvs_msg_stats_global step(struct shared *sh)
{
	it_barrier_wait(sh->bar);
	return it_stats(sh->d);
}

static int rank_main(void *arg, unsigned rank)
{
	struct shared *sh = arg;
	char inst[32], ns[64];
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N], dst2[N];
	struct kvs_msg_stats_global g;
	struct test_kv kv;
	struct kvs_client *c;
	struct kvs_cqe e;

	snprintf(inst, sizeof(inst), "tp2-%s", sh->name);
	snprintf(ns, sizeof(ns), "model-tp2/%s", sh->name);
	c = it_worker(sh->d, inst, ns, rank, 2, &kv, sh->kind, 6, BLOCKS, 4096);
	it_keys(keys, N, 4242); /* both ranks hash the same prompt */
	it_ids(src, N, 0);
	it_ids(dst, N, N);
	it_ids(dst2, N, 2 * N);
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(&kv, src[i], it_seed(rank_prompt(rank), i));
	for (unsigned b = N; b < BLOCKS; b++)
		test_kv_poison(&kv, b, POISON);

	/* Both registered: the instance is sealed. */
	it_barrier_wait(sh->bar);
	if (rank == 0) {
		e = it_save(c, keys, src, N);
		CHECK_RES(e.res, N, "rank 0 SAVE");
		it_flush(c);
	}
	g = step(sh);
	CHECK(g.blocks_partial == N && g.blocks_resident == 0,
	      "after rank 0 alone: %llu partial, %llu resident",
	      (unsigned long long)g.blocks_partial, (unsigned long long)g.blocks_resident);
	e = it_query(c, keys, N, 0);
	CHECK_RES(e.res, 0, "QUERY of blocks only rank 0 saved");
	CHECK(e.result0 == 0, "a QUERY without hits gave lease %llx",
	      (unsigned long long)e.result0);
	e = it_query(c, keys, N, KVS_QUERY_NOLEASE);
	CHECK_RES(e.res, 0, "NOLEASE QUERY of blocks only rank 0 saved");

	it_barrier_wait(sh->bar);
	if (rank == 1) {
		e = it_save(c, keys, src, FIRST);
		CHECK_RES(e.res, FIRST, "rank 1 SAVE of the first blocks");
		it_flush(c);
	}
	g = step(sh);
	CHECK(g.blocks_partial == N - FIRST && g.blocks_resident == FIRST,
	      "after rank 1 saved %u: %llu partial, %llu resident", FIRST,
	      (unsigned long long)g.blocks_partial, (unsigned long long)g.blocks_resident);
	e = it_query(c, keys, N, KVS_QUERY_NOLEASE);
	CHECK_RES(e.res, FIRST, "QUERY with the first blocks complete");

	it_barrier_wait(sh->bar);
	if (rank == 1) {
		e = it_save(c, keys + FIRST * KVS_KEY_SIZE, src + FIRST, N - FIRST);
		CHECK_RES(e.res, N - FIRST, "rank 1 SAVE of the rest");
		it_flush(c);
	}
	it_barrier_wait(sh->bar);
	if (rank == 0) {
		e = it_query(c, keys, N, 0);
		CHECK_RES(e.res, N, "QUERY once both ranks saved");
		CHECK(e.result0 != 0, "no lease");
		sh->lease = e.result0;
	}

	/* Rank 0 loads; its second LOAD is refused, the lease stays for rank 1. */
	it_barrier_wait(sh->bar);
	if (rank == 0) {
		e = it_load(c, sh->lease, dst, N, 0, 0);
		CHECK_RES(e.res, N, "rank 0 LOAD");
		for (unsigned i = 0; i < N; i++)
			CHECK(test_kv_check(&kv, dst[i], it_seed(rank_prompt(0), i)),
			      "%s rank 0: block %u is not rank 0's shard", sh->name, dst[i]);
		e = it_load(c, sh->lease, dst2, N, 0, 0);
		CHECK_RES(e.res, -EALREADY, "rank 0 LOAD again");
	}
	g = step(sh);
	CHECK(g.leases_live == 1, "%llu leases live with rank 1's share left",
	      (unsigned long long)g.leases_live);
	it_barrier_wait(sh->bar);
	if (rank == 1) {
		e = it_load(c, sh->lease, dst, N, 0, 0);
		CHECK_RES(e.res, N, "rank 1 LOAD");
		for (unsigned i = 0; i < N; i++)
			CHECK(test_kv_check(&kv, dst[i], it_seed(rank_prompt(1), i)),
			      "%s rank 1: block %u is not rank 1's shard", sh->name, dst[i]);
	}

	/* Both shares spent: the lease is gone for everyone. */
	it_barrier_wait(sh->bar);
	e = it_load(c, sh->lease, dst2, N, 0, 0);
	CHECK_RES(e.res, -ENOENT, "LOAD after both ranks consumed the lease");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_is_poison(&kv, dst2[i], POISON),
		      "%s rank %u: a refused LOAD wrote block %u", sh->name, rank, dst2[i]);
	for (unsigned b = 3 * N; b < BLOCKS; b++)
		CHECK(test_kv_is_poison(&kv, b, POISON), "%s rank %u: bystander %u written",
		      sh->name, rank, b);
	g = step(sh);
	CHECK(g.leases_live == 0, "%llu leases live", (unsigned long long)g.leases_live);
	CHECK(g.blocks_resident == N, "%llu resident", (unsigned long long)g.blocks_resident);

	it_barrier_wait(sh->bar);
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

static int mla_rank_main(void *arg, unsigned rank)
{
	struct shared *sh = arg;
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N];
	struct kvs_msg_stats_global g;
	struct test_kv kv;
	struct kvs_client *c;
	struct kvs_cqe e;

	c = it_worker(sh->d, "tp2-mla", "model-tp2/mla", rank, 2, &kv, LAYOUT_MLA, 6, BLOCKS, 4096);
	it_keys(keys, N, 4343);
	it_ids(src, N, 0);
	it_ids(dst, N, N);
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(&kv, src[i], it_seed(rank_prompt(rank), i));
	for (unsigned b = N; b < BLOCKS; b++)
		test_kv_poison(&kv, b, POISON);

	it_barrier_wait(sh->bar);
	if (rank == 0) {
		e = it_save(c, keys, src, N);
		CHECK_RES(e.res, N, "rank 0 SAVE");
		CHECK(e.result0 == N, "rank 0 stored %llu", (unsigned long long)e.result0);
		it_flush(c);
	}
	g = step(sh);
	CHECK(g.blocks_resident == N && g.blocks_partial == 0,
	      "replicated, rank 0 alone: %llu resident, %llu partial",
	      (unsigned long long)g.blocks_resident, (unsigned long long)g.blocks_partial);
	if (rank == 1) {
		e = it_save(c, keys, src, N);
		CHECK_RES(e.res, N, "rank 1 SAVE");
		CHECK(e.result0 == 0 && e.result1 == N, "rank 1 stored %llu skipped %llu",
		      (unsigned long long)e.result0, (unsigned long long)e.result1);
		it_flush(c);
		e = it_query(c, keys, N, 0);
		CHECK_RES(e.res, N, "QUERY");
		sh->lease = e.result0;
	}
	it_barrier_wait(sh->bar);
	e = it_load(c, sh->lease, dst, N, 0, 0);
	CHECK_RES(e.res, N, "LOAD of the replicated shard");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kv, dst[i], it_seed(rank_prompt(0), i)),
		      "mla rank %u: block %u is not the one shard rank 0 saved", rank, dst[i]);
	e = it_load(c, sh->lease, dst, N, 0, 0);
	CHECK(e.res == -EALREADY || e.res == -ENOENT, "second LOAD by rank %u: %d", rank, e.res);
	g = step(sh);
	CHECK(g.leases_live == 0 && g.blocks_resident == N, "%llu leases live, %llu resident",
	      (unsigned long long)g.leases_live, (unsigned long long)g.blocks_resident);
	it_barrier_wait(sh->bar);
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

static void run(enum test_layout_kind kind, const char *name)
{
	struct shared *sh = it_shared(sizeof(*sh));
	struct kvsd d;

	it_start(&d, NULL);
	sh->bar = it_barrier_new(2);
	sh->d = &d;
	sh->kind = kind;
	sh->name = name;
	it_spawn(kind == LAYOUT_MLA ? mla_rank_main : rank_main, sh, 0);
	it_spawn(kind == LAYOUT_MLA ? mla_rank_main : rank_main, sh, 1);
	it_wait_all();
	it_stop(&d);
	if (kind == LAYOUT_MLA)
		it_ok("mla: one shard for both ranks, visible once rank 0 saved it");
	else
		it_ok("%s: a block is visible only with both shards; one lease, one LOAD per "
		      "rank, each its own shard", name);
}

int main(void)
{
	it_watchdog(120);
	run(LAYOUT_PAGE_FIRST, "page-first");
	run(LAYOUT_SPLIT_KV, "split-kv");
	run(LAYOUT_MLA, "mla");
	return 0;
}
