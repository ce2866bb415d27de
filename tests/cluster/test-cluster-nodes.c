/* SPDX-License-Identifier: MIT */
/*
 * Three kvstashd nodes on one real redis-server, two namespaces and two
 * geometries (same layers, another block size):
 *   n1: X (geometry G1), Y (G1)   n2: X (G1), Y (G1)   n3: X (G2), Y (G1)
 * - blocks n1 saved in X are found by n2's cluster QUERY in X, held by n1
 *   alone: n3 saved the same keys in X, but with G2, which never matches;
 * - the same keys asked in Y (another name) are not found;
 * - keys n1 and n3 both saved in Y: both named, each with its run;
 * - n3 (X with G2) never finds what n1 saved in X with G1;
 * - n1 holding the first 5 keys and n2 the first 8: n1's cluster QUERY
 *   answers 5 local hits and n2 holding the 3 after them (of 12 asked:
 *   not the 7 a run counted from the first key would be);
 * - a node never answers itself: n1's QUERY of its own keys is N local
 *   hits, cluster best 0; and with Redis made to say that n1 (its live
 *   epoch) also holds what n2 holds, n1's answer still names n2 only,
 *   while n3's names both (so the entries n1 is not told about are live);
 * - a scheduler's cluster QUERY (no memory of its own) answers as a
 *   worker's;
 * - tensor parallel (Z: instances of 2 ranks on n1 and n2, tp 1 on n3):
 *   a block both ranks of n1 saved is found by both ranks of n2 after
 *   one cluster FLUSH with KVS_FLUSH_INSTANCE; a block only rank 0 saved
 *   is found by nobody; tp 1 and tp 2 never match.
 */
#include <errno.h>
#include <string.h>

#include "ctest.h"

#define NSX    "llama-8b/bf16/x"
#define NSY    "llama-8b/bf16/y"
#define NSZ    "llama-8b/bf16/z"
#define N      16
#define G1_SEG 4096
#define G2_SEG 8192

struct eng {
	struct kvs_client *c;
	struct test_kv kv;
};

static struct cnode n1, n2, n3;

static void flush_ok(struct eng *e, const char *who, uint64_t at_least)
{
	uint64_t reg, drop;
	int r = ct_cflush(e->c, &reg, &drop);

	CHECK(r == 0 && reg >= at_least && drop == 0,
	      "%s: cluster FLUSH res %d (%s) registered %llu dropped %llu (want >= %llu, 0)", who,
	      r, kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop,
	      (unsigned long long)at_least);
}

/* Exactly one holder, @node, holding @blocks; res must be @hits. */
static void want_one(struct eng *e, const uint8_t *keys, uint32_t n, int hits, const char *node,
		     const char *addr, uint32_t blocks, const char *what)
{
	struct kvs_cluster_answer a;
	const struct kvs_cluster_holder *h;
	int r = ct_cquery(e->c, keys, n, &a);

	h = ct_holder(&a, node);
	CHECK(r == hits && a.status == 0 && a.best == blocks && a.nr_holders == 1 && h &&
		      h->blocks == blocks && !strcmp(h->addr, addr),
	      "%s: want %d hits, %s@%s holding %u alone: %s", what, hits, node, addr, blocks,
	      ct_answer_str(r, &a));
}

static void want_none(struct eng *e, const uint8_t *keys, uint32_t n, int hits, const char *what)
{
	struct kvs_cluster_answer a;
	int r = ct_cquery(e->c, keys, n, &a);

	CHECK(r == hits && a.status == 0 && a.best == 0 && a.nr_holders == 0,
	      "%s: want %d hits and no holder: %s", what, hits, ct_answer_str(r, &a));
}

int main(void)
{
	static uint8_t k1[N * 16], k2[N * 16], k3[N * 16], k4[12 * 16], k6[8 * 16], k7[N * 16],
		k8[N * 16], k9[N * 16];
	struct redis rd = { 0 };
	struct eng ax, ay, bx, by, cx, cy, az[2], bz[2], cz;
	struct kvs_client *sched;
	uint64_t reg, drop, lease = 0;
	uint32_t ids[5];
	struct kvs_cluster_answer a;
	const struct kvs_cluster_holder *h1, *h3;
	char out[256];
	uint64_t e1;
	int r;

	ct_init(240);
	ct_redis_start(&rd);
	cnode_start(&n1, &rd, "n1", NULL, NULL);
	cnode_start(&n2, &rd, "n2", NULL, NULL);
	cnode_start(&n3, &rd, "n3", NULL, NULL);
	e1 = ct_wait_lease(&rd, "n1", 0);
	ct_wait_lease(&rd, "n2", 0);
	ct_wait_lease(&rd, "n3", 0);
	ax.c = ct_worker(&n1, NSX, &ax.kv, 2, 64, G1_SEG);
	ay.c = ct_worker(&n1, NSY, &ay.kv, 2, 64, G1_SEG);
	bx.c = ct_worker_rank(&n2, NSX, "n2-x", 0, 1, &bx.kv, 2, 64, G1_SEG);
	by.c = ct_worker(&n2, NSY, &by.kv, 2, 64, G1_SEG);
	cx.c = ct_worker(&n3, NSX, &cx.kv, 2, 64, G2_SEG);
	cy.c = ct_worker(&n3, NSY, &cy.kv, 2, 64, G1_SEG);
	test_keys(k1, N, 11);
	test_keys(k2, N, 12);
	test_keys(k3, N, 13);
	test_keys(k4, 12, 14);
	test_keys(k6, 8, 16);

	/* ---- namespaces and geometries ---- */
	ct_save(ax.c, &ax.kv, k1, N, 1);
	ct_save(ax.c, &ax.kv, k3, N, 3);
	ct_save(cx.c, &cx.kv, k1, N, 1);
	ct_save(ay.c, &ay.kv, k2, N, 2);
	ct_save(cy.c, &cy.kv, k2, N, 2);
	flush_ok(&ax, "n1 X", 2 * N);
	flush_ok(&ay, "n1 Y", 0);
	flush_ok(&cx, "n3 X", N);
	flush_ok(&cy, "n3 Y", 0);

	want_one(&bx, k1, N, 0, "n1", n1.peer, N, "n2 X asks what n1 (G1) and n3 (G2) saved in X");
	want_none(&by, k1, N, 0, "n2 Y asks what was saved in X only");
	want_one(&bx, k3, N, 0, "n1", n1.peer, N, "n2 X asks what n1 saved in X");
	want_none(&cx, k3, N, 0, "n3 X with G2 asks what n1 saved in X with G1");
	r = ct_cquery(by.c, k2, N, &a);
	h1 = ct_holder(&a, "n1");
	h3 = ct_holder(&a, "n3");
	CHECK(r == 0 && a.status == 0 && a.best == N && a.nr_holders == 2 && h1 && h3 &&
		      h1->blocks == N && h3->blocks == N && !strcmp(h1->addr, n1.peer) &&
		      !strcmp(h3->addr, n3.peer),
	      "n2 Y asks what n1 and n3 saved in Y: want both holding %d: %s", N,
	      ct_answer_str(r, &a));
	printf("ok - namespaces and geometries\n");

	/* ---- the answer starts at the local hits ---- */
	ct_save(ax.c, &ax.kv, k4, 5, 4);
	ct_save(bx.c, &bx.kv, k4, 8, 4);
	flush_ok(&ax, "n1 X", 5);
	flush_ok(&bx, "n2 X", 8);
	/* 12 asked, the last 4 held by nobody: the run counts from key 5, not key 0. */
	want_one(&ax, k4, 12, 5, "n2", n2.peer, 3, "n1 X holding 5 of 12, n2 holding 8");
	/* The local hits of a cluster QUERY are leased as a QUERY's: they load. */
	r = kvs_query_cluster_sync(ax.c, k4, 12, 0, 0, CT_OP_MS, &lease, &a);
	CHECK(r == 5 && lease != 0 && a.best == 3, "leased cluster QUERY: lease %llu %s",
	      (unsigned long long)lease, ct_answer_str(r, &a));
	for (uint32_t i = 0; i < 5; i++) {
		ids[i] = 32 + i;
		test_kv_poison(&ax.kv, ids[i], 0xa5);
	}
	r = kvs_load_sync(ax.c, lease, ids, 5, 0, 2, CT_OP_MS);
	CHECK(r == 5, "LOAD of a cluster QUERY's lease: %d (%s)", r, r < 0 ? kvs_strerror(r) : "");
	for (uint32_t i = 0; i < 5; i++)
		CHECK(test_kv_check(&ax.kv, ids[i], 4 + i), "block %u loaded wrong", i);
	printf("ok - from the local hits on\n");

	/* ---- a node never answers itself ---- */
	want_none(&ax, k1, N, N, "n1 X asks its own keys");
	ct_save(ay.c, &ay.kv, k6, 2, 6);
	ct_save(by.c, &by.kv, k6, 8, 6);
	flush_ok(&ay, "n1 Y", 2);
	flush_ok(&by, "n2 Y", 8);
	/*
	 * Redis now says n1, under its live epoch, holds every block n2
	 * holds: k6[2..8) among them, which n1 does not have.
	 */
	CHECK(e1 == ct_lease_epoch(&rd, "n1"), "n1 changed its epoch");
	/* n2's run sets (sidecar/cluster/scripts.h) copied into n1's of its live epoch. */
	r = redis_cmd(&rd, out, sizeof(out), "EVAL %s 0 kvs:%s:n:n2:* kvs:%s:n:n1:%llu:",
		      "local n = 0 "
		      "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do "
		      "local d = ARGV[2] .. string.sub(k, -16) "
		      "n = n + redis.call('SUNIONSTORE', d, d, k) end "
		      "return n",
		      ct_cluster(), ct_cluster(), (unsigned long long)e1);
	CHECK(r == 0 && strtoul(out, NULL, 10) >= 8, "forging n1's entries: %d %s", r, out);
	r = ct_cquery(cy.c, k6, 8, &a);
	h1 = ct_holder(&a, "n1");
	CHECK(r == 0 && a.status == 0 && a.best == 8 && a.nr_holders == 2 && h1 && h1->blocks == 8,
	      "n3 Y: the forged entries of n1 are live answers (want n1 and n2 holding 8): %s",
	      ct_answer_str(r, &a));
	want_one(&ay, k6, 8, 2, "n2", n2.peer, 6, "n1 Y, Redis saying n1 holds all 8");
	printf("ok - never itself\n");

	/* ---- a scheduler asks too ---- */
	/* Beside n2's X worker: a scheduler serves an instance that has one. */
	sched = ct_connect(&n2, KVS_ROLE_SCHEDULER, NSX, "n2-x", 0, 1);
	r = ct_cquery(sched, k1, N, &a);
	h1 = ct_holder(&a, "n1");
	CHECK(r == 0 && a.status == 0 && a.best == N && a.nr_holders == 1 && h1,
	      "n2's scheduler asks what n1 saved in X: %s", ct_answer_str(r, &a));
	kvs_close(sched);
	printf("ok - a scheduler's cluster QUERY\n");

	/* ---- tensor parallel: registered once every shard is sealed ---- */
	for (uint32_t rk = 0; rk < 2; rk++) {
		az[rk].c = ct_worker_rank(&n1, NSZ, "n1-tp", rk, 2, &az[rk].kv, 2, 64, G1_SEG);
		bz[rk].c = ct_worker_rank(&n2, NSZ, "n2-tp", rk, 2, &bz[rk].kv, 2, 64, G1_SEG);
	}
	cz.c = ct_worker(&n3, NSZ, &cz.kv, 2, 64, G1_SEG); /* tp 1: one shard, another geometry */
	test_keys(k7, N, 17);
	test_keys(k8, N, 18);
	ct_save(az[0].c, &az[0].kv, k7, N, 7);
	ct_save(az[1].c, &az[1].kv, k7, N, 70);
	ct_save(az[0].c, &az[0].kv, k8, N, 8); /* rank 1 never saves these: never visible */
	ct_save(cz.c, &cz.kv, k7, N, 7);
	r = kvs_flush_cluster_sync(az[0].c, KVS_FLUSH_INSTANCE, CT_POLL_MS + CT_OP_MS, &reg, &drop);
	CHECK(r == 0 && reg >= N && drop == 0,
	      "n1 rank 0: cluster FLUSH of the instance: res %d (%s) registered %llu dropped %llu",
	      r, kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop);
	flush_ok(&cz, "n3 Z", N);
	for (uint32_t rk = 0; rk < 2; rk++)
		want_one(&bz[rk], k7, N, 0, "n1", n1.peer, N,
			 rk ? "n2 rank 1 asks what both ranks of n1 saved"
			    : "n2 rank 0 asks what both ranks of n1 saved");
	want_none(&bz[0], k8, N, 0, "n2 asks what only rank 0 of n1 saved");
	want_none(&cz, k8, N, 0, "n3 (tp 1) asks what only rank 0 of n1 saved");
	test_keys(k9, N, 19);
	ct_save(cz.c, &cz.kv, k9, N, 9);
	flush_ok(&cz, "n3 Z", N);
	want_none(&bz[0], k9, N, 0, "n2 (tp 2) asks what n3 (tp 1) saved in Z");
	printf("ok - tensor parallel\n");
	for (uint32_t rk = 0; rk < 2; rk++) {
		kvs_close(az[rk].c);
		kvs_close(bz[rk].c);
		test_kv_free(&az[rk].kv);
		test_kv_free(&bz[rk].kv);
	}
	kvs_close(cz.c);
	test_kv_free(&cz.kv);

	kvs_close(ax.c);
	kvs_close(ay.c);
	kvs_close(bx.c);
	kvs_close(by.c);
	kvs_close(cx.c);
	kvs_close(cy.c);
	cnode_stop(&n1);
	cnode_stop(&n2);
	cnode_stop(&n3);
	ct_pass("cluster nodes: three nodes, namespaces, geometries, prefixes, never itself");
}
