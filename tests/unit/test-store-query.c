/* SPDX-License-Identifier: MIT */
/*
 * Long QUERYs looked up on several threads (store.c query_par(): from 4096
 * keys, chunks of 1024 that the worker and the store's query helpers take
 * in turn).  Against a store without helpers, over the same blocks: the
 * same prefix and bytes wherever the first miss falls (inside a chunk, at
 * a chunk's start, at the very first key, none at all, a last chunk cut
 * short), every block of the prefix pinned once and in key order, and no
 * pin left on the resident blocks past the prefix that a chunk after the
 * miss had taken.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storetest.h"
#include "unit.h"

#define SLOT 512u   /* 16384 slots in the 8 MiB pool */
#define NKEYS 15000u
#define GAP1 3000u  /* keys never saved */
#define GAP2 9000u

static struct pool *pools[2];
static struct store *stores[2]; /* [0]: no helpers; [1]: three */
static struct store_ns nss[2];
static uint8_t *keys;
static struct block **blocks;

static void save_all(struct store *st, struct store_ns *ns)
{
	struct store_place p = st_place(st, SLOT, 0, 1);

	/* In runs of at most ST_MAX, around the gaps. */
	for (uint32_t first = 0; first < NKEYS;) {
		uint32_t end = first + ST_MAX < NKEYS ? first + ST_MAX : NKEYS;

		if (first <= GAP1 && GAP1 < end)
			end = GAP1;
		if (first <= GAP2 && GAP2 < end)
			end = GAP2;
		if (end > first)
			ck_assert_uint_eq(st_save(st, NULL, ns, &p, first, end - first), end - first);
		first = end == GAP1 || end == GAP2 ? end + 1 : end;
	}
}

static void setup(void)
{
	st_setup();
	for (unsigned i = 0; i < 2; i++) {
		const struct store_params sp = { .pool = NULL, .unsealed_share = 100,
						 .query_helpers = i ? 3 : 0 };
		struct store_params p = sp;

		pools[i] = st_pool_new();
		p.pool = pools[i];
		ck_assert_int_eq(store_new(&p, &stores[i]), 0);
		store_ns_init(&nss[i], 1);
		save_all(stores[i], &nss[i]);
	}
	keys = calloc(NKEYS, KVS_KEY_SIZE);
	blocks = calloc(NKEYS, sizeof(*blocks));
	ck_assert(keys && blocks);
}

static void teardown(void)
{
	for (unsigned i = 0; i < 2; i++) {
		store_free(stores[i]);
		pool_destroy(pools[i]);
	}
	free(keys);
	free(blocks);
	st_teardown();
}

/* QUERY keys @first.. (@n of them) in store @i; pinned into blocks[] with @pin. */
static uint32_t query(unsigned i, uint32_t first, uint32_t n, bool pin, uint64_t *ret_bytes)
{
	uint64_t bytes = 0;
	uint32_t hits;

	for (uint32_t k = 0; k < n; k++)
		st_key(keys + (size_t)k * KVS_KEY_SIZE, first + k);
	hits = store_query(stores[i], &nss[i], keys, n, pin, pin ? blocks : NULL, &bytes);
	if (ret_bytes)
		*ret_bytes = bytes;
	return hits;
}

/* Pins on the block of @key in store @i, not counting the one this check takes. */
static int32_t pins_of(unsigned i, uint32_t key)
{
	struct block *b;
	uint64_t bytes;
	int32_t pins;

	st_key(keys, key);
	ck_assert_uint_eq(store_query(stores[i], &nss[i], keys, 1, true, &b, &bytes), 1);
	pins = b->pins - 1;
	block_unpin(b);
	return pins;
}

static void check_case(uint32_t first, uint32_t n, uint32_t want)
{
	uint64_t bytes0, bytes1;
	uint32_t hits0, hits1;

	hits0 = query(0, first, n, true, &bytes0);
	st_unpin(blocks, hits0);
	hits1 = query(1, first, n, true, &bytes1);
	ck_assert_uint_eq(hits0, want);
	ck_assert_msg(hits1 == want, "keys %u+%u: %u hits with helpers, want %u", first, n, hits1,
		      want);
	ck_assert_uint_eq(bytes1, bytes0);
	ck_assert_uint_eq(bytes1, (uint64_t)want * SLOT);
	for (uint32_t k = 0; k < hits1; k++) {
		uint8_t key[KVS_KEY_SIZE];

		st_key(key, first + k);
		ck_assert_msg(memcmp(blocks[k]->key, key, KVS_KEY_SIZE) == 0, "block %u out of order",
			      k);
		ck_assert_int_eq(blocks[k]->pins, 1);
	}
	st_unpin(blocks, hits1);
	/* Past the miss: resident blocks the later chunks pinned are unpinned again. */
	for (uint32_t k = want + 1; k < n; k += 97)
		if (first + k != GAP1 && first + k != GAP2)
			ck_assert_msg(pins_of(1, first + k) == 0, "key %u left pinned", first + k);
	/* Without pins: the same prefix. */
	ck_assert_uint_eq(query(1, first, n, false, NULL), want);
}

START_TEST(test_prefix_everywhere)
{
	check_case(GAP1 + 1, 5000, 5000);	 /* no miss, five chunks */
	check_case(0, 8000, GAP1);		 /* the miss inside the third chunk */
	check_case(GAP2 - 4096, 6000, 4096);	 /* the miss at the fifth chunk's start */
	check_case(GAP2 + 1, NKEYS - GAP2 - 1, NKEYS - GAP2 - 1); /* a short last chunk */
	check_case(GAP1 - 1, 4096, 1);		 /* the miss at the second key */
	check_case(GAP1, 4200, 0);		 /* at the first */
	check_case(GAP2 - 100, 4096, 100);	 /* in the first chunk, later chunks all hit */
}
END_TEST

/* Two threads querying at once share the helpers; each gets its own answer. */
static void *other_query(void *arg)
{
	uint8_t *k = calloc(6000, KVS_KEY_SIZE);
	struct block **b = calloc(6000, sizeof(*b));
	uint64_t bytes;
	uint32_t hits = 0;

	(void)arg;
	urcu_memb_register_thread();
	for (uint32_t i = 0; i < 6000; i++)
		st_key(k + (size_t)i * KVS_KEY_SIZE, GAP1 + 1 + i);
	for (int r = 0; r < 50; r++) {
		hits = store_query(stores[1], &nss[1], k, 6000, true, b, &bytes);
		st_unpin(b, hits);
		if (hits != GAP2 - GAP1 - 1)
			break;
	}
	urcu_memb_unregister_thread();
	free(k);
	free(b);
	return (void *)(uintptr_t)hits;
}

START_TEST(test_concurrent)
{
	pthread_t t;
	void *ret;

	ck_assert_int_eq(pthread_create(&t, NULL, other_query, NULL), 0);
	for (int r = 0; r < 50; r++) {
		uint32_t hits = query(1, 0, 8000, true, NULL);

		st_unpin(blocks, hits);
		ck_assert_uint_eq(hits, GAP1);
	}
	pthread_join(t, &ret);
	ck_assert_uint_eq((uintptr_t)ret, GAP2 - GAP1 - 1);
}
END_TEST

UNIT_TESTS(test_prefix_everywhere, test_concurrent)

const struct unit_suite unit_suite = {
	.name = "store-query",
	.add_tests = add_tests,
	.setup = setup,
	.teardown = teardown,
	.timeout_s = 60,
};
