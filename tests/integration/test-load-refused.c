/* SPDX-License-Identifier: MIT */
/*
 * A refused LOAD spends nothing (issue 11, item 12): a LOAD with more
 * block ids than its lease has hits is -EINVAL before it takes the
 * rank's share, so the corrected LOAD of the same rank succeeds:
 *   - TP1: the refused LOAD writes nothing, the corrected one is
 *     byte-exact and consumes the lease (a third LOAD is -ENOENT);
 *   - TP2: rank 1's refused LOAD leaves both shares; rank 1 and then
 *     rank 0 load their shards; only then is the lease gone.
 */
#include <stdio.h>
#include <string.h>

#include "itest.h"

#define BLOCKS 16u
#define N      4u

static void tp1(void)
{
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N + 1];
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	struct kvs_cqe q, e;

	it_start(&d, NULL);
	c = it_worker(&d, "refused-tp1", "refused/tp1", 0, 1, &kv, LAYOUT_PAGE_FIRST, 2, BLOCKS,
		      4096);
	it_keys(keys, N, 1);
	it_ids(src, N, 0);
	it_ids(dst, N + 1, N);
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(&kv, src[i], it_seed(1, i));
	for (unsigned b = N; b < BLOCKS; b++)
		test_kv_poison(&kv, b, POISON);
	CHECK_RES(it_save(c, keys, src, N).res, N, "SAVE");
	it_flush(c);
	q = it_query(c, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY");

	e = it_load(c, q.result0, dst, N + 1, 0, 0);
	CHECK_RES(e.res, -EINVAL, "LOAD of more blocks than the lease has");
	for (unsigned b = N; b < BLOCKS; b++)
		CHECK(test_kv_is_poison(&kv, b, POISON), "the refused LOAD wrote block %u", b);
	e = it_load(c, q.result0, dst, N, 0, 0);
	CHECK_RES(e.res, N, "the corrected LOAD after a refused one");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kv, dst[i], it_seed(1, i)), "block %u differs", i);
	CHECK_RES(it_load(c, q.result0, dst, N, 0, 0).res, -ENOENT, "a LOAD of a consumed lease");
	it_ok("TP1: a LOAD refused with -EINVAL leaves the share; the corrected LOAD is exact");
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
}

static void tp2(void)
{
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N + 1];
	struct kvs_client *c[2];
	struct test_kv kv[2];
	struct kvsd d;
	struct kvs_cqe q;

	it_start(&d, NULL);
	it_keys(keys, N, 2);
	it_ids(src, N, 0);
	it_ids(dst, N + 1, N);
	for (unsigned r = 0; r < 2; r++)
		c[r] = it_worker(&d, "refused-tp2", "refused/tp2", r, 2, &kv[r], LAYOUT_PAGE_FIRST,
				 2, BLOCKS, 4096);
	for (unsigned r = 0; r < 2; r++) {
		for (unsigned i = 0; i < N; i++)
			test_kv_fill(&kv[r], src[i], it_seed(10 + r, i));
		for (unsigned b = N; b < BLOCKS; b++)
			test_kv_poison(&kv[r], b, POISON);
		CHECK_RES(it_save(c[r], keys, src, N).res, N, "SAVE of a rank's shards");
		it_flush(c[r]);
	}
	q = it_query(c[0], keys, N, 0);
	CHECK_RES(q.res, N, "QUERY");
	CHECK_RES(it_load(c[1], q.result0, dst, N + 1, 0, 0).res, -EINVAL,
		  "rank 1's LOAD of more blocks than the lease has");
	for (unsigned b = N; b < BLOCKS; b++)
		CHECK(test_kv_is_poison(&kv[1], b, POISON), "the refused LOAD wrote block %u", b);
	CHECK_RES(it_load(c[1], q.result0, dst, N, 0, 0).res, N, "rank 1's corrected LOAD");
	CHECK_RES(it_load(c[1], q.result0, dst, N, 0, 0).res, -EALREADY, "rank 1's second LOAD");
	CHECK_RES(it_load(c[0], q.result0, dst, N, 0, 0).res, N, "rank 0's LOAD");
	for (unsigned r = 0; r < 2; r++)
		for (unsigned i = 0; i < N; i++)
			CHECK(test_kv_check(&kv[r], dst[i], it_seed(10 + r, i)),
			      "rank %u block %u differs", r, i);
	CHECK_RES(it_release(c[0], q.result0).res, -ENOENT, "RELEASE of a consumed lease");
	it_ok("TP2: rank 1's refused LOAD spends no share: both ranks load their shards exactly");
	for (unsigned r = 0; r < 2; r++) {
		kvs_close(c[r]);
		test_kv_free(&kv[r]);
	}
	it_stop(&d);
}

int main(void)
{
	it_watchdog(300);
	tp1();
	tp2();
	return 0;
}
