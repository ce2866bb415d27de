/* SPDX-License-Identifier: MIT */
/*
 * The SSD index (sidecar/ssd/index.c): a block is found only once its
 * write committed (WRITING entries are invisible but block duplicates);
 * aborted and killed entries miss; reusing a region drops exactly its
 * entries; recovery keeps the newer copy of a key; namespaces are exact
 * byte strings; the table grows and everything stays findable; and it
 * takes at most 60 bytes of DRAM per block at scale.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssd/crc32c.h"
#include "ssd/index.h"

static struct ssd_index idx;

static void setup(void)
{
	crc32c_init();
	ck_assert_int_eq(ssd_index_init(&idx, 64, 1u << 22), 0);
}

static void teardown(void)
{
	ssd_index_fini(&idx);
}

static void key_of(uint32_t i, uint8_t key[16])
{
	memset(key, 0, 16);
	memcpy(key, &i, 4);
	key[15] = 0xa5;
}

static struct ssd_loc loc_at(uint32_t region, uint32_t seq, uint32_t off)
{
	struct ssd_loc l = { .drive = 0,
			     .region = region,
			     .region_seq = seq,
			     .off_units = off,
			     .len = 4096,
			     .crc = off * 3 };

	return l;
}

static struct ssd_region region(void)
{
	struct ssd_region r;

	memset(&r, 0, sizeof(r));
	r.entries = SSD_NO_ENTRY;
	return r;
}

START_TEST(test_write_then_visible)
{
	struct ssd_region r = region();
	struct ssd_loc l = loc_at(3, 9, 2), got;
	uint8_t key[16];
	uint32_t ns, e, e2;

	ck_assert_int_eq(ssd_index_ns(&idx, "ns-a", 4, &ns), 0);
	key_of(1, key);
	ck_assert_int_eq(ssd_index_begin(&idx, ns, key, 0, 0, &e), 0);
	ck_assert_int_eq(ssd_index_lookup(&idx, ns, key, 0, &got), -ENOENT); /* still writing */
	ck_assert(ssd_index_contains(&idx, ns, key, 0));
	ck_assert_int_eq(ssd_index_begin(&idx, ns, key, 0, 0, &e2), -EEXIST);
	ssd_index_commit(&idx, e, &r, &l);
	ck_assert_int_eq(ssd_index_lookup(&idx, ns, key, 0, &got), 0);
	ck_assert_uint_eq(got.region, 3);
	ck_assert_uint_eq(got.region_seq, 9);
	ck_assert_uint_eq(got.off_units, 2);
	ck_assert_uint_eq(got.crc, 6);
	ck_assert_uint_eq(got.ent, e);
	/* Other shard, other namespace: misses. */
	ck_assert_int_eq(ssd_index_lookup(&idx, ns, key, 1, &got), -ENOENT);
	ck_assert_int_eq(ssd_index_lookup(&idx, ns + 1, key, 0, &got), -ENOENT);
	ck_assert_int_eq(ssd_index_begin(&idx, ns, key, 0, 0, &e2), -EEXIST);
	ck_assert_uint_eq(r.entries, e);
}
END_TEST

START_TEST(test_abort_and_kill)
{
	struct ssd_region r = region();
	struct ssd_loc l = loc_at(1, 1, 0), got;
	uint8_t key[16];
	uint32_t e;

	key_of(2, key);
	ck_assert_int_eq(ssd_index_begin(&idx, 0, key, 0, 0, &e), 0);
	ssd_index_abort(&idx, e);
	ck_assert(!ssd_index_contains(&idx, 0, key, 0));
	ck_assert_int_eq(ssd_index_begin(&idx, 0, key, 0, 0, &e), 0);
	ssd_index_commit(&idx, e, &r, &l);
	ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, 0, &got), 0);
	/* A kill naming another cycle of the region does nothing. */
	got.region_seq++;
	ssd_index_kill(&idx, &got);
	ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, 0, &got), 0);
	ssd_index_kill(&idx, &got);
	ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, 0, &got), -ENOENT);
	/* The dead entry waits on its region's list; a new write of the key is allowed. */
	ck_assert_int_eq(ssd_index_begin(&idx, 0, key, 0, 0, &e), 0);
	ck_assert_uint_eq(ssd_index_drop_region(&idx, &r), 0);
	ck_assert(ssd_index_contains(&idx, 0, key, 0));
}
END_TEST

START_TEST(test_drop_region)
{
	struct ssd_region ra = region(), rb = region();
	struct ssd_loc got;
	uint8_t key[16];
	uint32_t e;

	for (uint32_t i = 0; i < 1000; i++) {
		struct ssd_loc l = loc_at(i % 2, 1, i);

		key_of(i, key);
		ck_assert_int_eq(ssd_index_begin(&idx, 0, key, 0, 0, &e), 0);
		ssd_index_commit(&idx, e, i % 2 ? &rb : &ra, &l);
	}
	ck_assert_uint_eq(ssd_index_drop_region(&idx, &ra), 500);
	ck_assert_uint_eq(ra.entries, SSD_NO_ENTRY);
	for (uint32_t i = 0; i < 1000; i++) {
		key_of(i, key);
		ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, 0, &got), i % 2 ? 0 : -ENOENT);
	}
	ck_assert_uint_eq(ssd_index_drop_region(&idx, &rb), 500);
	ck_assert_uint_eq(__atomic_load_n(&idx.nvalid, __ATOMIC_RELAXED), 0);
	ck_assert_uint_eq(idx.nalloc, 0);
}
END_TEST

START_TEST(test_recover_newer_wins)
{
	struct ssd_region r1 = region(), r2 = region();
	struct ssd_loc old = loc_at(1, 5, 10), newer = loc_at(2, 6, 3), got;
	uint8_t key[16];

	key_of(7, key);
	ck_assert_int_eq(ssd_index_recover(&idx, 0, key, 0, &r2, &newer), 1);
	ck_assert_int_eq(ssd_index_recover(&idx, 0, key, 0, &r1, &old), 0);
	ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, 0, &got), 0);
	ck_assert_uint_eq(got.region, 2);
	/* The other order: the newer one replaces the older one. */
	key_of(8, key);
	ck_assert_int_eq(ssd_index_recover(&idx, 0, key, 0, &r1, &old), 1);
	ck_assert_int_eq(ssd_index_recover(&idx, 0, key, 0, &r2, &newer), 1);
	ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, 0, &got), 0);
	ck_assert_uint_eq(got.region, 2);
	/* Reusing region 1 leaves region 2's copies. */
	ssd_index_drop_region(&idx, &r1);
	key_of(7, key);
	ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, 0, &got), 0);
	key_of(8, key);
	ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, 0, &got), 0);
	ck_assert_uint_eq(ssd_index_drop_region(&idx, &r2), 2);
	ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, 0, &got), -ENOENT);
}
END_TEST

START_TEST(test_namespaces)
{
	uint32_t a, b, c, a2;
	uint16_t len;
	const uint8_t *p;
	char big[SSD_NS_MAX + 1];

	ck_assert_int_eq(ssd_index_ns(&idx, "model|geomA", 11, &a), 0);
	ck_assert_int_eq(ssd_index_ns(&idx, "model|geomB", 11, &b), 0);
	ck_assert_int_eq(ssd_index_ns(&idx, "model|geomA\0", 12, &c), 0);
	ck_assert_int_eq(ssd_index_ns(&idx, "model|geomA", 11, &a2), 0);
	ck_assert_uint_eq(a, a2);
	ck_assert_uint_ne(a, b);
	ck_assert_uint_ne(a, c);
	p = ssd_index_ns_ident(&idx, b, &len);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(len, 11);
	ck_assert_mem_eq(p, "model|geomB", 11);
	ck_assert_ptr_null(ssd_index_ns_ident(&idx, 1000, &len));
	memset(big, 'x', sizeof(big));
	ck_assert_int_eq(ssd_index_ns(&idx, big, sizeof(big), &a), -EINVAL);
	ck_assert_int_eq(ssd_index_ns(&idx, big, 0, &a), -EINVAL);
}
END_TEST

START_TEST(test_grow_and_memory)
{
	const uint32_t n = 1u << 20;
	struct ssd_region r = region();
	struct ssd_loc got;
	uint8_t key[16];
	uint32_t e;
	uint64_t bytes;

	for (uint32_t i = 0; i < n; i++) {
		struct ssd_loc l = loc_at(0, 1, i);

		key_of(i, key);
		ck_assert_int_eq(ssd_index_recover(&idx, 0, key, (uint16_t)(i & 1), &r, &l), 1);
	}
	ck_assert_uint_ge(idx.nbuckets, n / 2); /* grew from 64 buckets */
	for (uint32_t i = 0; i < n; i += 7) {
		key_of(i, key);
		ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, (uint16_t)(i & 1), &got), 0);
		ck_assert_uint_eq(got.off_units, i);
		ck_assert_int_eq(ssd_index_lookup(&idx, 0, key, (uint16_t) !(i & 1), &got),
				 -ENOENT);
	}
	bytes = ssd_index_bytes(&idx);
	/* 10 TB of 2 MiB blocks = 5.2 M blocks: at 60 B each, 315 MB. */
	ck_assert_msg(bytes / n <= 60, "%llu bytes per block", (unsigned long long)(bytes / n));
	ck_assert_int_eq(ssd_index_begin(&idx, 0, key, 5, 0, &e), 0);
	ssd_index_abort(&idx, e);
	ssd_index_drop_region(&idx, &r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssd-index");
	TCase *tc = tcase_create("index");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_write_then_visible);
	tcase_add_test(tc, test_abort_and_kill);
	tcase_add_test(tc, test_drop_region);
	tcase_add_test(tc, test_recover_newer_wins);
	tcase_add_test(tc, test_namespaces);
	tcase_add_test(tc, test_grow_and_memory);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
