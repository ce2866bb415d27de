/* SPDX-License-Identifier: MIT */
/*
 * A scheduler session (no memory, e.g. vLLM's scheduler process) QUERYs
 * on behalf of a TP=1 worker of the same instance: the worker LOADs with
 * the scheduler's lease and gets the bytes; the scheduler RELEASEs a lease
 * it will not use (the worker then cannot LOAD it); SAVE and LOAD from the
 * scheduler are -EPERM and touch nothing; RELEASE of a consumed or
 * released lease is -ENOENT, never silent.
 */
#include <stdio.h>
#include <string.h>

#include "itest.h"

#define BLOCKS 16u
#define N 5u

int main(void)
{
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N];
	struct kvs_msg_stats_global g0, g1;
	struct kvs_client *w, *s;
	struct test_kv kv;
	struct kvsd d;
	struct kvs_cqe q1, q2, e;
	int r;

	it_watchdog(60);
	it_start(&d, NULL);
	w = it_worker(&d, "sched-inst", "model-sched", 0, 1, &kv, LAYOUT_PAGE_FIRST, 12, BLOCKS,
		      4096);
	r = test_connect(&d, KVS_ROLE_SCHEDULER, "sched-inst", "model-sched", 0, 1, &s);
	CHECK(r == 0, "scheduler connect: %s", kvs_strerror(r));

	it_keys(keys, N, 31337);
	it_ids(src, N, 0);
	it_ids(dst, N, N);
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(&kv, src[i], it_seed(31, i));
	for (unsigned b = N; b < BLOCKS; b++)
		test_kv_poison(&kv, b, POISON);
	e = it_save(w, keys, src, N);
	CHECK_RES(e.res, N, "worker SAVE");
	it_flush(w);

	/* The scheduler's QUERY pins the prefix under a lease of the instance. */
	q1 = it_query(s, keys, N, 0);
	CHECK_RES(q1.res, N, "scheduler QUERY");
	CHECK(q1.result0 != 0, "scheduler QUERY gave no lease");
	e = it_load(w, q1.result0, dst, N, 0, 0);
	CHECK_RES(e.res, N, "worker LOAD with the scheduler's lease");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kv, dst[i], it_seed(31, i)), "block %u differs", dst[i]);
	it_ok("the worker loads with a lease the scheduler took");

	/* A lease the scheduler gives back is gone for the worker too. */
	g0 = it_stats(&d);
	q2 = it_query(s, keys, N - 1, 0);
	CHECK_RES(q2.res, N - 1, "second scheduler QUERY");
	CHECK(q2.result0 != 0 && q2.result0 != q1.result0, "lease %llx after %llx",
	      (unsigned long long)q2.result0, (unsigned long long)q1.result0);
	e = it_release(s, q2.result0);
	CHECK_RES(e.res, 0, "scheduler RELEASE");
	g1 = it_stats(&d);
	CHECK(g1.leases_released == g0.leases_released + 1 && g1.leases_live == 0,
	      "released %llu -> %llu, live %llu", (unsigned long long)g0.leases_released,
	      (unsigned long long)g1.leases_released, (unsigned long long)g1.leases_live);
	for (unsigned b = N; b < BLOCKS; b++)
		test_kv_poison(&kv, b, POISON);
	e = it_load(w, q2.result0, dst, N - 1, 0, 0);
	CHECK_RES(e.res, -ENOENT, "worker LOAD of a released lease");
	e = it_release(s, q2.result0);
	CHECK_RES(e.res, -ENOENT, "RELEASE of a released lease");
	it_ok("the scheduler releases a lease; it is gone for the worker");

	/* A scheduler has no memory: SAVE and LOAD are refused before anything happens. */
	q2 = it_query(s, keys, N, 0);
	CHECK_RES(q2.res, N, "third scheduler QUERY");
	g0 = it_stats(&d);
	e = it_save(s, keys, src, N);
	CHECK_RES(e.res, -EPERM, "scheduler SAVE");
	e = it_load(s, q2.result0, dst, N, 0, 0);
	CHECK_RES(e.res, -EPERM, "scheduler LOAD");
	g1 = it_stats(&d);
	CHECK(g1.save_blocks_stored == g0.save_blocks_stored &&
		      g1.save_blocks_skipped == g0.save_blocks_skipped &&
		      g1.load_blocks == g0.load_blocks && g1.blocks_partial == 0,
	      "a refused scheduler op moved data: stored +%llu skipped +%llu loaded +%llu",
	      (unsigned long long)(g1.save_blocks_stored - g0.save_blocks_stored),
	      (unsigned long long)(g1.save_blocks_skipped - g0.save_blocks_skipped),
	      (unsigned long long)(g1.load_blocks - g0.load_blocks));
	/* The refused LOAD did not spend the worker's share. */
	e = it_load(w, q2.result0, dst, N, 0, 0);
	CHECK_RES(e.res, N, "worker LOAD after the scheduler's refused LOAD");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kv, dst[i], it_seed(31, i)), "block %u differs", dst[i]);
	it_ok("scheduler SAVE and LOAD are -EPERM and spend nothing");

	/* Consumed leases cannot be released. */
	e = it_release(s, q1.result0);
	CHECK_RES(e.res, -ENOENT, "RELEASE of a consumed lease");
	e = it_release(s, q2.result0);
	CHECK_RES(e.res, -ENOENT, "RELEASE of the other consumed lease");
	for (unsigned b = 2 * N; b < BLOCKS; b++)
		CHECK(test_kv_is_poison(&kv, b, POISON), "bystander block %u written", b);
	g1 = it_stats(&d);
	CHECK(g1.leases_live == 0, "%llu leases live", (unsigned long long)g1.leases_live);
	it_ok("RELEASE of a consumed lease is -ENOENT");

	kvs_close(s);
	kvs_close(w);
	test_kv_free(&kv);
	it_stop(&d);
	return 0;
}
