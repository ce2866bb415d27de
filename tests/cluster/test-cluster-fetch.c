/* SPDX-License-Identifier: MIT */
/*
 * Peer transfer through the whole stack: two kvstashd nodes with the peer
 * service (loopback addresses of this run's own, the TCP transport) on
 * one real redis-server, real engines on host memory:
 *   - node a saves 64 blocks of a page-first layout and FLUSHes with the
 *     cluster flag; node b's fetching QUERY without a hint (the registry
 *     names a) answers 64 hits with a lease, and b LOADs them into other
 *     block ids, poisoned first: every byte compared with what a saved;
 *   - the same with a node hint (a's peer_listen) and keys a never
 *     registered (no cluster FLUSH): the hint alone finds them;
 *   - b holding the first 10 keys itself: 10 local + 54 fetched;
 *   - the fetched copies are b's own from then on: a plain QUERY hits
 *     them, and b's registry entry names b for a third node;
 *   - keys a does not hold: 0 fetched, answered at once;
 *   - a namespace of another geometry on b never fetches a's blocks;
 *   - a SIGKILLed: b's fetching QUERY answers its local prefix (0)
 *     within fetch_timeout, with and without the hint;
 *   - Redis killed: a fetch without a hint answers the local prefix;
 *     with the hint it still fetches.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "ctest.h"

#define NS     "qwen3-8b/bf16/fetch"
#define N      64
#define LAYERS 4
#define BLOCKS 200
#define SEG    4096

/* Short deadlines for the dead-peer cases: the test must not wait 2 s each. */
static const char cluster_ini[] = "fetch_timeout = 3s\n";

/* A fetching QUERY with a lease; the hits, the lease in *ret_lease. */
static int fquery(struct kvs_client *c, const uint8_t *keys, uint32_t n, const char *hint,
		  uint64_t *ret_lease)
{
	uint64_t lease = 0;
	int r = kvs_query_fetch_sync(c, keys, n, 0, 0, hint, CT_OP_MS, &lease);

	*ret_lease = lease;
	return r;
}

/*
 * LOAD the lease's @n blocks into ids (first + i) % BLOCKS of @kv, poisoned
 * first, and compare each with what ct_save(..., seed) wrote for key i.
 */
static void load_check(struct kvs_client *c, struct test_kv *kv, uint64_t lease, uint32_t n,
		       uint32_t first, uint64_t seed, const char *what)
{
	uint32_t ids[N];
	int r;

	for (uint32_t i = 0; i < n; i++) {
		ids[i] = (first + i) % BLOCKS;
		test_kv_poison(kv, ids[i], 0xa5);
	}
	r = kvs_load_sync(c, lease, ids, n, 0, 0, CT_OP_MS);
	CHECK(r == (int)n, "%s: LOAD of %u fetched blocks: %d (%s)", what, n, r,
	      r < 0 ? kvs_strerror(r) : "count");
	for (uint32_t i = 0; i < n; i++)
		CHECK(test_kv_check(kv, ids[i], seed + i),
		      "%s: block %u (key %u) differs from what node a saved", what, ids[i], i);
	r = kvs_release_sync(c, lease, CT_OP_MS);
	CHECK(r == 0 || r == -ENOENT, "%s: RELEASE: %s", what, kvs_strerror(r));
}

static void flush_ok(struct kvs_client *c, uint64_t at_least)
{
	uint64_t reg, drop;
	int r = ct_cflush(c, &reg, &drop);

	CHECK(r == 0 && reg >= at_least && drop == 0,
	      "cluster FLUSH: res %d (%s) registered %llu dropped %llu", r, kvs_strerror(r),
	      (unsigned long long)reg, (unsigned long long)drop);
}

int main(void)
{
	static uint8_t k1[N * 16], k2[N * 16], k3[N * 16], k4[N * 16], k5[N * 16], k6[N * 16];
	struct redis rd = { 0 };
	struct cnode a, b, c;
	struct test_kv kva, kvb, kvc, kvg;
	struct kvs_client *ca, *cb, *cc, *cg;
	struct kvs_cluster_answer ans;
	const struct kvs_cluster_holder *h;
	uint64_t lease, t0, ms;
	int r;

	ct_init(300);
	test_keys(k1, N, 31);
	test_keys(k2, N, 32);
	test_keys(k3, N, 33);
	test_keys(k4, N, 34);
	test_keys(k5, N, 35);
	test_keys(k6, N, 36);
	ct_redis_start(&rd);
	cnode_start_peer(&a, &rd, "a", cluster_ini, NULL);
	cnode_start_peer(&b, &rd, "b", cluster_ini, NULL);
	cnode_start_peer(&c, &rd, "c", cluster_ini, NULL);
	ct_wait_lease(&rd, "a", 0);
	ct_wait_lease(&rd, "b", 0);
	ct_wait_lease(&rd, "c", 0);
	ca = ct_worker(&a, NS, &kva, LAYERS, BLOCKS, SEG);
	cb = ct_worker(&b, NS, &kvb, LAYERS, BLOCKS, SEG);
	cc = ct_worker(&c, NS, &kvc, LAYERS, BLOCKS, SEG);

	/* ---- through the registry ---- */
	ct_save(ca, &kva, k1, N, 1000);
	flush_ok(ca, N);
	CHECK(ct_query(cb, k1, N) == 0, "b holds k1 before any fetch");
	r = fquery(cb, k1, N, NULL, &lease);
	CHECK(r == N && lease, "fetch through the registry: %d (%s), lease %llu", r,
	      r < 0 ? kvs_strerror(r) : "hits", (unsigned long long)lease);
	load_check(cb, &kvb, lease, N, 70, 1000, "registry fetch");
	printf("ok - 64 blocks fetched through the registry, every byte as saved\n");

	/* Now b's own: a plain QUERY hits them, and the registry names b too. */
	CHECK(ct_query(cb, k1, N) == N, "fetched blocks are not resident on b");
	flush_ok(cb, N);
	r = ct_cquery(cc, k1, N, &ans);
	h = ct_holder(&ans, "b");
	CHECK(r == 0 && h && h->blocks == N, "c is not told b holds the fetched blocks: %s",
	      ct_answer_str(r, &ans));
	printf("ok - the fetched copies are resident and registered under b\n");

	/* ---- the node hint, keys never registered ---- */
	ct_save(ca, &kva, k2, N, 2000);
	r = fquery(cb, k2, N, a.peer, &lease);
	CHECK(r == N, "fetch with the hint %s: %d (%s)", a.peer, r,
	      r < 0 ? kvs_strerror(r) : "hits");
	load_check(cb, &kvb, lease, N, 10, 2000, "hinted fetch");
	printf("ok - 64 blocks fetched from the hinted node without the registry\n");

	/* ---- a local prefix, the rest fetched ---- */
	ct_save(ca, &kva, k3, N, 3000);
	ct_save(cb, &kvb, k3, 10, 3000);
	r = fquery(cb, k3, N, a.peer, &lease);
	CHECK(r == N, "10 local + 54 fetched: %d (%s)", r, r < 0 ? kvs_strerror(r) : "hits");
	load_check(cb, &kvb, lease, N, 120, 3000, "local prefix + fetch");
	printf("ok - 10 local hits and 54 fetched blocks in one lease\n");

	/* ---- what the peer does not hold ---- */
	t0 = now_ms();
	r = fquery(cb, k4, N, a.peer, &lease);
	ms = now_ms() - t0;
	CHECK(r == 0 && lease == 0, "keys a does not hold: %d hits, lease %llu", r,
	      (unsigned long long)lease);
	CHECK(ms < 2000, "an empty fetch took %llu ms", (unsigned long long)ms);
	/* Its first half only. */
	ct_save(ca, &kva, k4, N / 2, 4000);
	r = fquery(cb, k4, N, a.peer, &lease);
	CHECK(r == N / 2, "a holds half: %d (%s)", r, r < 0 ? kvs_strerror(r) : "hits");
	load_check(cb, &kvb, lease, N / 2, 0, 4000, "half fetched");
	printf("ok - a peer holding nothing or half: 0 at once, 32 of 64\n");

	/* ---- another geometry never matches ---- */
	cg = ct_worker(&b, NS "/g2", &kvg, LAYERS, BLOCKS, 2 * SEG);
	{
		struct kvs_client *ag;
		struct test_kv kvag;

		ag = ct_worker(&a, NS "/g2", &kvag, LAYERS, BLOCKS, SEG);
		ct_save(ag, &kvag, k5, N, 5000);
		r = fquery(cg, k5, N, a.peer, &lease);
		CHECK(r == 0, "another geometry fetched %d blocks", r);
		kvs_close(ag);
		test_kv_free(&kvag);
	}
	printf("ok - a namespace of another geometry fetches nothing\n");

	/* ---- Redis killed: the registry path answers locally, the hint still works ---- */
	ct_save(ca, &kva, k6, N, 6000);
	flush_ok(ca, N);
	redis_stop(&rd);
	r = fquery(cc, k6, N, NULL, &lease);
	CHECK(r == 0, "no registry, no hint: %d (%s)", r, r < 0 ? kvs_strerror(r) : "hits");
	r = fquery(cc, k6, N, a.peer, &lease);
	CHECK(r == N, "no registry, with the hint: %d (%s)", r, r < 0 ? kvs_strerror(r) : "hits");
	load_check(cc, &kvc, lease, N, 33, 6000, "hint without Redis");
	printf("ok - Redis killed: local answer without a hint, the hint still fetches\n");

	/* ---- the serving node SIGKILLed ---- */
	cnode_kill(&a);
	t0 = now_ms();
	r = fquery(cb, k5, N, a.peer, &lease);
	ms = now_ms() - t0;
	CHECK(r == 0, "a dead peer: %d (%s)", r, r < 0 ? kvs_strerror(r) : "hits");
	CHECK(ms < 5000, "a dead peer's fetch took %llu ms", (unsigned long long)ms);
	printf("ok - a killed peer: the local prefix within the deadline\n");

	kvs_close(cg);
	test_kv_free(&kvg);
	kvs_close(ca);
	test_kv_free(&kva);
	kvs_close(cc);
	test_kv_free(&kvc);
	kvs_close(cb);
	test_kv_free(&kvb);
	cnode_stop(&b);
	cnode_stop(&c);
	ct_pass("peer fetch through kvstashd");
}
