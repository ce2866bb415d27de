/* SPDX-License-Identifier: MIT */
/*
 * Peer transfer of sharded and replicated layouts, two kvstashd nodes with
 * the peer service on one real redis-server:
 *   - tensor parallel 2 (page-first): both ranks of an instance on node a
 *     save 64 blocks (each rank its own bytes), rank 0 FLUSHes the
 *     instance with the cluster flag; on node b, rank 0's fetching QUERY
 *     through the registry answers 64, and both ranks of b's instance LOAD
 *     the lease into other block ids: each rank gets exactly its own
 *     shard, every byte compared (a swapped or missing shard fails);
 *   - a replicated (MLA) layout at tp 2: rank 0 of a saves, so each block
 *     is one shard; b's scheduler fetches with a node hint (the P/D
 *     handoff), and both of b's ranks LOAD the same bytes;
 *   - a block only one rank of a saved is not sealed there, so never
 *     served: the fetch stops before it.
 */
#include <errno.h>
#include <string.h>

#include "ctest.h"

#define NS_TP  "llama-70b/bf16/tp2"
#define NS_MLA "deepseek-v3/fp8/mla"
#define N      64
#define LAYERS 3
#define BLOCKS 160
#define SEG    8192
#define RANK_SEED 500000u /* rank r's bytes: seed + r * RANK_SEED */

struct rank {
	struct kvs_client *c;
	struct test_kv kv;
};

static void flush_instance(struct kvs_client *c, uint64_t at_least)
{
	uint64_t reg = 0, drop = 0;
	int r = kvs_flush_cluster_sync(c, KVS_FLUSH_INSTANCE, CT_OP_MS, &reg, &drop);

	CHECK(r == 0 && reg >= at_least && drop == 0,
	      "cluster FLUSH of the instance: res %d (%s) registered %llu dropped %llu", r,
	      kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop);
}

/* Both ranks LOAD @lease's @n blocks into ids (first + i) % BLOCKS and compare. */
static void load_ranks(struct rank *rk, uint64_t lease, uint32_t n, uint32_t first, uint64_t seed,
		       bool replicated, const char *what)
{
	uint32_t ids[N];

	for (uint32_t i = 0; i < n; i++)
		ids[i] = (first + i) % BLOCKS;
	for (unsigned r = 0; r < 2; r++) {
		uint64_t s = seed + (replicated ? 0 : r * RANK_SEED);
		int res;

		for (uint32_t i = 0; i < n; i++)
			test_kv_poison(&rk[r].kv, ids[i], 0x5a);
		res = kvs_load_sync(rk[r].c, lease, ids, n, 0, 0, CT_OP_MS);
		CHECK(res == (int)n, "%s: rank %u LOAD: %d (%s)", what, r, res,
		      res < 0 ? kvs_strerror(res) : "count");
		for (uint32_t i = 0; i < n; i++)
			CHECK(test_kv_check(&rk[r].kv, ids[i], s + i),
			      "%s: rank %u block %u (key %u) is not what rank %u of a saved", what,
			      r, ids[i], i, replicated ? 0 : r);
	}
}

static void ranks(struct rank *rk, const struct cnode *n, const char *ns, const char *inst,
		  enum test_layout_kind kind)
{
	for (unsigned r = 0; r < 2; r++)
		rk[r].c = ct_worker_kind(n, ns, inst, r, 2, kind, &rk[r].kv, LAYERS, BLOCKS, SEG);
}

static void close_ranks(struct rank *rk)
{
	for (unsigned r = 0; r < 2; r++) {
		kvs_close(rk[r].c);
		test_kv_free(&rk[r].kv);
	}
}

int main(void)
{
	static uint8_t k1[N * 16], k2[N * 16], k3[N * 16];
	struct redis rd = { 0 };
	struct cnode a, b;
	struct rank at[2], bt[2], am[2], bm[2];
	struct kvs_client *sched;
	uint64_t lease = 0;
	int r;

	ct_init(300);
	test_keys(k1, N, 41);
	test_keys(k2, N, 42);
	test_keys(k3, N, 43);
	ct_redis_start(&rd);
	cnode_start_peer(&a, &rd, "a", NULL, NULL);
	cnode_start_peer(&b, &rd, "b", NULL, NULL);
	ct_wait_lease(&rd, "a", 0);
	ct_wait_lease(&rd, "b", 0);

	/* ---- tp 2, through the registry ---- */
	ranks(at, &a, NS_TP, "prefill", LAYOUT_PAGE_FIRST);
	ranks(bt, &b, NS_TP, "decode", LAYOUT_PAGE_FIRST);
	ct_save(at[0].c, &at[0].kv, k1, N, 1000);
	ct_save(at[1].c, &at[1].kv, k1, N, 1000 + RANK_SEED);
	flush_instance(at[0].c, N);
	r = kvs_query_fetch_sync(bt[0].c, k1, N, 0, 0, NULL, CT_OP_MS, &lease);
	CHECK(r == N && lease, "tp 2 fetch through the registry: %d (%s)", r,
	      r < 0 ? kvs_strerror(r) : "hits");
	load_ranks(bt, lease, N, 90, 1000, false, "tp 2");
	printf("ok - tp 2: both shards of 64 blocks fetched, each rank its own bytes\n");

	/* ---- a block one rank of a never saved is not served ---- */
	ct_save(at[0].c, &at[0].kv, k3, N, 3000);
	ct_save(at[1].c, &at[1].kv, k3, 20, 3000 + RANK_SEED);
	r = kvs_query_fetch_sync(bt[1].c, k3, N, 0, 0, a.peer, CT_OP_MS, &lease);
	CHECK(r == 20, "rank 1 of a saved 20 of 64: fetched %d (%s)", r,
	      r < 0 ? kvs_strerror(r) : "hits");
	load_ranks(bt, lease, 20, 7, 3000, false, "tp 2, partial on a");
	printf("ok - tp 2: the fetch stops at the first block not sealed on the peer\n");

	/* ---- MLA (replicated), a scheduler with the node hint ---- */
	ranks(am, &a, NS_MLA, "prefill-mla", LAYOUT_MLA);
	ranks(bm, &b, NS_MLA, "decode-mla", LAYOUT_MLA);
	ct_save(am[0].c, &am[0].kv, k2, N, 2000);
	sched = ct_connect(&b, KVS_ROLE_SCHEDULER, NS_MLA, "decode-mla", 0, 2);
	r = kvs_query_fetch_sync(sched, k2, N, 0, 0, a.peer, CT_OP_MS, &lease);
	CHECK(r == N && lease, "MLA fetch by b's scheduler with the hint: %d (%s)", r,
	      r < 0 ? kvs_strerror(r) : "hits");
	load_ranks(bm, lease, N, 3, 2000, true, "MLA");
	printf("ok - replicated layout: fetched once, both ranks load the same bytes\n");

	kvs_close(sched);
	close_ranks(am);
	close_ranks(bm);
	close_ranks(at);
	close_ranks(bt);
	cnode_stop(&a);
	cnode_stop(&b);
	ct_pass("peer fetch of tp 2 and MLA layouts");
}
