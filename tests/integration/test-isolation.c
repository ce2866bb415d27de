/* SPDX-License-Identifier: MIT */
/*
 * A session reaches only its own instance's leases and its own
 * namespace's blocks:
 *   - keys saved in one namespace never hit from another (same keys, same
 *     layout), and the same keys saved in both keep both namespaces' bytes;
 *   - a lease is used (LOAD) or given back (RELEASE) only by sessions of
 *     the instance that made it: a worker of another instance, in another
 *     namespace or the same one, and a scheduler of another instance get
 *     -EACCES, which spends nothing; the owner's scheduler may RELEASE it;
 *   - an instance is bound to its namespace: joining it with another is
 *     -EXDEV, and a namespace to its layout: registering another is -EXDEV.
 * Engine memory is poisoned around every refusal and checked after.
 */
#include <stdio.h>
#include <string.h>

#include "itest.h"

#define N      8u
#define LAYERS 4u
#define BLOCKS 32u
#define SEG    4096u

static void fill(struct test_kv *kv, uint64_t seed)
{
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(kv, i, it_seed(seed, i));
}

static void poison_dst(struct test_kv *kv)
{
	for (unsigned b = N; b < BLOCKS; b++)
		test_kv_poison(kv, b, POISON);
}

static bool dst_poisoned(struct test_kv *kv)
{
	for (unsigned b = N; b < BLOCKS; b++)
		if (!test_kv_is_poison(kv, b, POISON))
			return false;
	return true;
}

int main(void)
{
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N];
	struct kvs_client *a, *b, *a2, *sa, *sc, *x, *z = NULL;
	struct test_kv kva, kvb, kva2, kvx;
	struct kvs_msg_stats_global g0, g;
	struct kvs_cqe q, e;
	uint64_t la;
	struct kvsd d;

	it_watchdog(60);
	it_start(&d, NULL);
	a = it_worker(&d, "iso-a", "iso-one/pf", 0, 1, &kva, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      SEG);
	b = it_worker(&d, "iso-b", "iso-two/pf", 0, 1, &kvb, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      SEG);
	a2 = it_worker(&d, "iso-a2", "iso-one/pf", 0, 1, &kva2, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		       SEG);
	CHECK(test_connect(&d, KVS_ROLE_SCHEDULER, "iso-a", "iso-one/pf", 0, 1, &sa) == 0,
	      "scheduler of iso-a");
	CHECK(test_connect(&d, KVS_ROLE_SCHEDULER, "iso-c", "iso-one/pf", 0, 1, &sc) == 0,
	      "scheduler of iso-c");
	/* iso-c needs a worker to be sealed: give it one in the namespace. */
	x = it_worker(&d, "iso-c", "iso-one/pf", 0, 1, &kvx, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      SEG);
	it_keys(keys, N, 77);
	it_ids(src, N, 0);
	it_ids(dst, N, N);

	/* Namespaces: a's blocks are not b's. */
	fill(&kva, 1);
	CHECK_RES(it_save(a, keys, src, N).res, N, "SAVE in iso-one");
	it_flush(a);
	CHECK_RES(it_query(b, keys, N, KVS_QUERY_NOLEASE).res, 0,
		  "QUERY of iso-one's keys from iso-two");
	fill(&kvb, 2);
	CHECK_RES(it_save(b, keys, src, N).res, N, "the same keys saved in iso-two (not skipped)");
	it_flush(b);
	CHECK(it_save(b, keys, src, N).result1 == N, "iso-two's copy is resident");
	it_ok("keys saved in one namespace never hit from another");

	/* Leases: a's lease, tried by everyone else. */
	q = it_query(a, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY by iso-a");
	la = q.result0;
	poison_dst(&kva);
	poison_dst(&kvb);
	poison_dst(&kva2);
	poison_dst(&kvx);
	g0 = it_stats(&d);
	CHECK_RES(it_load(b, la, dst, N, 0, 0).res, -EACCES, "LOAD of iso-a's lease by iso-b");
	CHECK_RES(it_release(b, la).res, -EACCES, "RELEASE of iso-a's lease by iso-b");
	CHECK_RES(it_load(a2, la, dst, N, 0, 0).res, -EACCES,
		  "LOAD of iso-a's lease by iso-a2 (same namespace)");
	CHECK_RES(it_release(a2, la).res, -EACCES, "RELEASE of it by iso-a2");
	CHECK_RES(it_release(sc, la).res, -EACCES, "RELEASE of it by iso-c's scheduler");
	CHECK_RES(it_load(x, la, dst, N, 2, 1).res, -EACCES, "LOAD of a layer of it by iso-c");
	CHECK(dst_poisoned(&kvb) && dst_poisoned(&kva2) && dst_poisoned(&kva) && dst_poisoned(&kvx),
	      "a refused LOAD wrote engine memory");
	g = it_stats(&d);
	CHECK(g.leases_live == g0.leases_live && g.load_blocks == g0.load_blocks,
	      "a refusal spent something: %llu -> %llu leases, %llu blocks loaded",
	      (unsigned long long)g0.leases_live, (unsigned long long)g.leases_live,
	      (unsigned long long)(g.load_blocks - g0.load_blocks));
	/* Unspent: the owner loads its own bytes, not iso-two's. */
	e = it_load(a, la, dst, N, 0, 0);
	CHECK_RES(e.res, N, "LOAD by the owner after the refusals");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kva, dst[i], it_seed(1, i)), "iso-a loaded block %u wrong", i);
	/* iso-two's copy of the keys has iso-two's bytes. */
	q = it_query(b, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY by iso-b");
	CHECK_RES(it_load(b, q.result0, dst, N, 0, 0).res, N, "LOAD by iso-b");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kvb, dst[i], it_seed(2, i)), "iso-b loaded block %u wrong", i);
	/* The owner's scheduler may give a lease back; another instance's may not. */
	q = it_query(a, keys, N, 0);
	CHECK_RES(it_release(sc, q.result0).res, -EACCES, "RELEASE by another scheduler");
	CHECK_RES(it_release(sa, q.result0).res, 0, "RELEASE by the instance's scheduler");
	it_ok("a lease is only its instance's: -EACCES for others, nothing spent or written");

	/* An instance has one namespace; a namespace one layout. */
	CHECK_RES(test_connect(&d, KVS_ROLE_SCHEDULER, "iso-a", "iso-two/pf", 0, 1, &z), -EXDEV,
		  "joining iso-a in another namespace");
	{
		struct kvs_client *y;
		struct test_kv kvy;
		int r;

		CHECK(test_kv_alloc(&kvy, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, 2 * SEG) == 0,
		      "alloc");
		CHECK(test_connect(&d, KVS_ROLE_WORKER, "iso-y", "iso-one/pf", 0, 1, &y) == 0,
		      "iso-y");
		r = test_kv_register(y, &kvy);
		CHECK_RES(r, -EXDEV, "another layout in iso-one");
		kvs_close(y);
		test_kv_free(&kvy);
	}
	it_ok("an instance is bound to its namespace, a namespace to its layout");

	kvs_close(sa);
	kvs_close(sc);
	kvs_close(a);
	kvs_close(a2);
	kvs_close(b);
	kvs_close(x);
	test_kv_free(&kvx);
	test_kv_free(&kva);
	test_kv_free(&kva2);
	test_kv_free(&kvb);
	it_stop(&d);
	return 0;
}
