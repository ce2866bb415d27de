/* SPDX-License-Identifier: MIT */
/*
 * kvs_prep_*() act on the SQE they are given, in any order (liburing's
 * get-several-then-prep), against a real kvstashd:
 *   - four SQEs taken, then prepared last to first as SAVEs of four
 *     prompts of different lengths: each CQE carries its own user_data and
 *     count, each prompt is found whole by QUERY, and its blocks LOAD
 *     byte-exact into other blocks (the keys and block ids of each SQE are
 *     its own);
 *   - a prep that fails on an SQE with others taken after it gives it back
 *     without a completion for the application, and a prep of an SQE given
 *     back is refused;
 *   - a 4 KiB argument area wrapped hundreds of times by rounds of eight
 *     SQEs prepared in a shuffled order: every prompt of every round is
 *     found whole (no argument bytes freed before kvstashd read them).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"

#define LAYERS 2u
#define BLOCKS 64u
#define SEG    4096u
#define ROUNDS 300u
#define PER    8u /* SQEs a round */

static const char ini[] = "[session]\narg_bytes = 4096\n";

static struct kvs_cqe reap(struct kvs_client *c)
{
	struct kvs_cqe *cqe, ret;
	int r = kvs_wait_cqe(c, &cqe, 10000);

	CHECK(r == 0, "kvs_wait_cqe: %s", kvs_strerror(r));
	ret = *cqe;
	kvs_cqe_seen(c, cqe);
	return ret;
}

static void must_hit(struct kvs_client *c, const uint8_t *keys, uint32_t n, const char *what)
{
	struct kvs_cqe q = it_query(c, keys, n, KVS_QUERY_NOLEASE);

	CHECK_RES(q.res, (long)n, what);
}

/* Four prompts of 2..5 blocks, prepared last SQE first. */
static void reverse(struct kvs_client *c, struct test_kv *kv)
{
	uint8_t keys[4][5 * KVS_KEY_SIZE];
	uint32_t ids[4][5], back[5];
	struct kvs_sqe *sqe[4];
	bool seen[4] = { false };

	for (unsigned i = 0; i < 4; i++) {
		it_keys(keys[i], 2 + i, 100 + i);
		for (unsigned b = 0; b < 2 + i; b++) {
			ids[i][b] = i * 5 + b;
			test_kv_fill(kv, ids[i][b], it_seed(100 + i, b));
		}
	}
	for (unsigned i = 0; i < 4; i++)
		CHECK(sqe[i] = kvs_get_sqe(c), "SQE %u", i);
	for (unsigned i = 4; i-- > 0;)
		CHECK_RES(kvs_prep_save(c, sqe[i], keys[i], ids[i], 2 + i, 100 + i), 0,
			  "kvs_prep_save, last SQE first");
	CHECK_RES(kvs_submit(c), 4, "kvs_submit");
	for (unsigned n = 0; n < 4; n++) {
		struct kvs_cqe e = reap(c);
		unsigned i = (unsigned)(e.user_data - 100);

		CHECK(e.user_data >= 100 && i < 4 && !seen[i], "a CQE with user_data %llu",
		      (unsigned long long)e.user_data);
		seen[i] = true;
		CHECK(e.res == (int)(2 + i) && e.result0 == 2 + i,
		      "SAVE %u (%u blocks): res %d, stored %llu", i, 2 + i, e.res,
		      (unsigned long long)e.result0);
	}
	it_flush(c);
	for (unsigned i = 0; i < 4; i++) {
		struct kvs_cqe q = it_query(c, keys[i], 2 + i, 0), l;

		CHECK_RES(q.res, (long)(2 + i), "QUERY of a prompt saved out of order");
		it_ids(back, 2 + i, 40);
		l = it_load(c, q.result0, back, 2 + i, 0, 0);
		CHECK_RES(l.res, (long)(2 + i), "LOAD");
		for (unsigned b = 0; b < 2 + i; b++)
			CHECK(test_kv_check(kv, 40 + b, it_seed(100 + i, b)),
			      "prompt %u block %u loaded the wrong bytes", i, b);
	}
	it_ok("four SQEs prepared last first: each its own user_data, keys and blocks");
}

/* A failed prep on an SQE taken before another: given back, no CQE. */
static void fail_middle(struct kvs_client *c)
{
	uint8_t keys[3 * KVS_KEY_SIZE];
	uint32_t ids[3] = { 0, 1, 2 };
	struct kvs_sqe *a, *b;
	struct kvs_cqe e;

	it_keys(keys, 3, 200);
	CHECK((a = kvs_get_sqe(c)) && (b = kvs_get_sqe(c)), "two SQEs");
	CHECK_RES(kvs_prep_save(c, b, keys, ids, 3, 7), 0, "prep of the second");
	CHECK_RES(kvs_prep_save(c, a, keys, ids, 0, 6), -EINVAL, "a SAVE of no keys");
	CHECK_RES(kvs_prep_nop(c, a, 6), -EINVAL, "a prep of the SQE given back");
	CHECK_RES(kvs_submit(c), 2, "kvs_submit");
	e = reap(c);
	CHECK(e.user_data == 7 && e.res == 3, "the one CQE: user_data %llu res %d",
	      (unsigned long long)e.user_data, e.res);
	/* The given-back SQE's NOP completes inside the library: nothing is left. */
	e = it_query(c, keys, 3, KVS_QUERY_NOLEASE);
	CHECK_RES(e.res, 3, "QUERY after");
	for (unsigned t = 0; kvs_pending(c) && t < 2000; t++) {
		struct kvs_cqe *x;

		CHECK_RES(kvs_peek_cqe(c, &x), -EAGAIN, "a CQE for the SQE given back");
		usleep(1000);
	}
	CHECK_RES(kvs_pending(c), 0, "operations pending after every CQE");
	it_ok("a failed prep before a prepared SQE: given back, no completion");
}

/* The argument area wraps many times under shuffled preps. */
static void wrap(struct kvs_client *c, struct test_kv *kv)
{
	static uint8_t keys[PER][PER * KVS_KEY_SIZE];
	uint32_t ids[PER];

	it_ids(ids, PER, 0);
	for (unsigned b = 0; b < PER; b++)
		test_kv_fill(kv, b, it_seed(9, b));
	for (unsigned r = 0; r < ROUNDS; r++) {
		struct kvs_sqe *sqe[PER];

		for (unsigned i = 0; i < PER; i++) {
			it_keys(keys[i], 1 + i, 1000 + r * PER + i);
			CHECK(sqe[i] = kvs_get_sqe(c), "SQE %u of round %u", i, r);
		}
		/* Odd ones first, then the even ones last to first. */
		for (unsigned i = 1; i < PER; i += 2)
			CHECK_RES(kvs_prep_save(c, sqe[i], keys[i], ids, 1 + i, i), 0, "prep");
		for (unsigned i = PER; i-- > 0;)
			if (!(i & 1))
				CHECK_RES(kvs_prep_save(c, sqe[i], keys[i], ids, 1 + i, i), 0,
					  "prep");
		CHECK_RES(kvs_submit(c), (long)PER, "kvs_submit");
		for (unsigned n = 0; n < PER; n++) {
			struct kvs_cqe e = reap(c);

			CHECK(e.user_data < PER && e.res == (int)(1 + e.user_data),
			      "round %u: CQE user_data %llu res %d", r,
			      (unsigned long long)e.user_data, e.res);
		}
		for (unsigned i = 0; i < PER; i++)
			must_hit(c, keys[i], 1 + i, "a prompt of a shuffled round, whole");
	}
	it_ok("%u rounds of %u shuffled preps through a 4 KiB argument area: every prompt whole",
	      ROUNDS, PER);
}

int main(void)
{
	struct test_kv kv;
	struct kvs_client *c;
	struct kvsd d;

	it_watchdog(240);
	it_start(&d, ini);
	c = it_worker(&d, "prep-order", "model-prep-order", 0, 1, &kv, LAYOUT_PAGE_FIRST, LAYERS,
		      BLOCKS, SEG);
	reverse(c, &kv);
	fail_middle(c);
	wrap(c, &kv);
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
	it_ok("preps act on the SQE they are given");
	return 0;
}
