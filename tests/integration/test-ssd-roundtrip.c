/* SPDX-License-Identifier: MIT */
/*
 * SSD tier round trip with real files and O_DIRECT: blocks of every size
 * (sector multiples, odd lengths, 2 MiB) written through io_uring come back
 * byte-exact, into buffers with room to spare and into tight ones (the
 * last partial sector through the bounce unit), from registered (fixed)
 * buffers and from plain ones, over two drives; a block is visible only
 * once its write completed; a second write of it is -EEXIST; blocks that
 * do not fit a region are refused; when the log wraps, the oldest region's
 * blocks become misses and the rest stay byte-exact.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssdtest.h"

#define MiB (1ull << 20)

START_TEST(test_sizes_round_trip)
{
	static const uint32_t lens[] = { 512,	4096,	1,	 777,		4097,
					 65536, 100000, 2 * MiB, 2 * MiB - 512, 3 * MiB + 13 };
	struct st t = { 0 };
	uint32_t ns;

	st_config(&t, 1, 64 * MiB, 8 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "model-a", 4096);
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		ck_assert_int_eq(st_put(&t, ns, i, lens[i]), 0);
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		ck_assert_int_eq(st_get(&t, ns, i, lens[i]), 0);
	/* Tight buffers: exactly the length, not a sector multiple. */
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		struct ssd_loc loc;
		uint8_t key[16], *buf = st_alloc(lens[i]);

		st_key(i, key);
		ck_assert_int_eq(ssd_lookup(t.ssd, ns, key, 0, &loc), 0);
		ck_assert_int_eq(ssd_read(t.ssd, &loc, buf, lens[i], (void *)(uintptr_t)(100 + i)),
				 0);
		ck_assert_int_eq(st_wait_read(&t, 100 + i), 0);
		ck_assert_int_eq(st_check(i, buf, lens[i]), 0);
		ck_assert_int_eq(ssd_read(t.ssd, &loc, buf, lens[i] - 1, NULL), -EINVAL);
		free(buf);
	}
	{
		struct ssd_stats s;

		ssd_get_stats(t.ssd, &s);
		ck_assert_uint_eq(s.drive[0].writes, sizeof(lens) / sizeof(lens[0]));
		ck_assert_uint_eq(s.drive[0].crc_errors, 0);
		ck_assert_uint_eq(s.drive[0].state, SSD_DRIVE_ONLINE);
		ck_assert_uint_ne(s.drive[0].setup_flags, 0); /* the kernel's flags were found */
		ck_assert(s.drive[0].fixed_file);
		ck_assert_uint_gt(s.drive[0].bytes_read, 0);
	}
	st_close(&t);
}
END_TEST

START_TEST(test_unaligned_source)
{
	struct st t = { 0 };
	uint8_t *raw = st_alloc(70000), *src = raw + 3;
	uint8_t key[16];
	uint32_t ns;

	st_config(&t, 1, 32 * MiB, 4 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "m", 1);
	st_fill(42, src, 60000);
	st_key(42, key);
	ck_assert_int_eq(st_write(&t, ns, 42, 1, src, 60000, 1, 1, NULL), 0);
	ck_assert_int_eq(st_wait_write(&t, 1), 0);
	ck_assert_int_eq(st_get(&t, ns, 42, 60000), 0);
	/* Into an unaligned destination too. */
	{
		struct ssd_loc loc;

		memset(raw, 0, 70000);
		ck_assert_int_eq(ssd_lookup(t.ssd, ns, key, 0, &loc), 0);
		ck_assert_int_eq(ssd_read(t.ssd, &loc, src, 60000, (void *)7), 0);
		ck_assert_int_eq(st_wait_read(&t, 7), 0);
		ck_assert_int_eq(st_check(42, src, 60000), 0);
	}
	st_close(&t);
	free(raw);
}
END_TEST

START_TEST(test_fixed_buffers)
{
	struct st t = { 0 };
	size_t arena_len = 16 * MiB;
	uint8_t *arena = st_alloc(arena_len);
	struct ssd_buf b = { arena, arena_len };
	uint32_t ns;
	struct ssd_stats s;

	st_config(&t, 1, 64 * MiB, 8 * MiB);
	t.cfg.bufs = &b;
	t.cfg.nr_bufs = 1;
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ssd_get_stats(t.ssd, &s);
	ck_assert_msg(s.drive[0].fixed_buffers, "buffers not registered (RLIMIT_MEMLOCK?)");
	ns = st_ns(&t, "fixed", 1);
	for (unsigned i = 0; i < 6; i++) {
		uint8_t *slot = arena + i * 2 * MiB;

		st_fill(1000 + i, slot, 2 * MiB - 4096 * i);
		ck_assert_int_eq(
			st_write(&t, ns, 1000 + i, 200 + i, slot, 2 * MiB - 4096 * i, 1, 1, NULL),
			0);
	}
	for (unsigned i = 0; i < 6; i++)
		ck_assert_int_eq(st_wait_write(&t, 200 + i), 0);
	memset(arena, 0, arena_len);
	for (unsigned i = 0; i < 6; i++) {
		struct ssd_loc loc;
		uint8_t key[16];

		st_key(1000 + i, key);
		ck_assert_int_eq(ssd_lookup(t.ssd, ns, key, 0, &loc), 0);
		ck_assert_int_eq(ssd_read(t.ssd, &loc, arena + i * 2 * MiB, 2 * MiB,
					  (void *)(uintptr_t)(300 + i)),
				 0);
	}
	for (unsigned i = 0; i < 6; i++) {
		ck_assert_int_eq(st_wait_read(&t, 300 + i), 0);
		ck_assert_int_eq(st_check(1000 + i, arena + i * 2 * MiB, 2 * MiB - 4096 * i), 0);
	}
	st_close(&t);
	free(arena);
}
END_TEST

START_TEST(test_visibility_and_refusals)
{
	struct st t = { 0 };
	uint8_t *buf = st_alloc(8 * MiB);
	uint8_t key[16];
	struct ssd_loc loc;
	uint32_t ns;

	st_config(&t, 1, 64 * MiB, 4 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "vis", 1);
	st_fill(5, buf, 65536);
	st_key(5, key);
	ck_assert_int_eq(st_write(&t, ns, 5, 9, buf, 65536, 1, 1, NULL), 0);
	/* Until write_done, a lookup misses (it is not yet complete on disk)... */
	pthread_mutex_lock(&t.lock);
	if (t.wres[9] == INT32_MIN)
		ck_assert_int_eq(ssd_lookup(t.ssd, ns, key, 0, &loc), -ENOENT);
	pthread_mutex_unlock(&t.lock);
	/* ...and a second write of the same block is refused at once. */
	ck_assert_int_eq(st_write(&t, ns, 5, 10, buf, 65536, 1, 1, NULL), -EEXIST);
	ck_assert_int_eq(st_wait_write(&t, 9), 0);
	ck_assert_int_eq(ssd_lookup(t.ssd, ns, key, 0, &loc), 0);
	ck_assert_int_eq(st_write(&t, ns, 5, 10, buf, 65536, 1, 1, NULL), -EEXIST);
	/* Larger than a region: refused, nothing queued. */
	ck_assert_int_eq(st_write(&t, ns, 6, 11, buf, 4 * MiB, 1, 1, NULL), -E2BIG);
	ck_assert_int_eq(st_write(&t, ns, 6, 11, buf, 0, 1, 1, NULL), -EINVAL);
	ck_assert_int_eq(st_write(&t, ns + 100, 6, 11, buf, 100, 1, 1, NULL), -EINVAL);
	{
		struct ssd_write w = {
			.ns = ns, .key = key, .shard = 70000, .buf = buf, .len = 10
		};

		ck_assert_int_eq(ssd_write(t.ssd, &w, NULL), -EINVAL);
	}
	/* A made-up location is refused, not followed. */
	loc.region = 1000000;
	ck_assert_int_eq(ssd_read(t.ssd, &loc, buf, 65536, NULL), -EINVAL);
	loc.drive = 9;
	ck_assert_int_eq(ssd_read(t.ssd, &loc, buf, 65536, NULL), -EINVAL);
	st_close(&t);
	free(buf);
}
END_TEST

START_TEST(test_log_wraps)
{
	/* 8 regions of 1 MiB; 200 blocks of 100-200 KiB fill it several times. */
	struct st t = { 0 };
	const unsigned n = 200;
	unsigned found = 0, missing_tail = 0;
	struct ssd_stats s;
	uint32_t ns;

	st_config(&t, 1, 9 * MiB, 1 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "wrap", 1);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(st_put(&t, ns, i, st_len(i, 100000, 200000)), 0);
	for (unsigned i = 0; i < n; i++) {
		int r = st_get(&t, ns, i, st_len(i, 100000, 200000));

		ck_assert_msg(r == 0 || r == -ENOENT, "key %u: %d", i, r);
		if (r == 0)
			found++;
		else if (i >= n - 20)
			missing_tail++;
	}
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(missing_tail, 0); /* the newest blocks are all there */
	ck_assert_uint_gt(found, 20);
	ck_assert_uint_lt(found, n); /* the oldest went with their regions */
	ck_assert_uint_gt(s.drive[0].regions_reclaimed, 8);
	ck_assert_uint_eq(s.drive[0].blocks_evicted + found, n);
	st_close(&t);
}
END_TEST

START_TEST(test_two_drives)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint32_t ns;

	st_config(&t, 2, 32 * MiB, 2 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "two", 1);
	for (unsigned i = 0; i < 40; i++)
		ck_assert_int_eq(st_put(&t, ns, i, 50000 + i), 0);
	for (unsigned i = 0; i < 40; i++)
		ck_assert_int_eq(st_get(&t, ns, i, 50000 + i), 0);
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.nr_drives, 2);
	ck_assert_uint_gt(s.drive[0].writes, 0);
	ck_assert_uint_gt(s.drive[1].writes, 0);
	ck_assert_uint_eq(s.drive[0].writes + s.drive[1].writes, 40);
	st_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssd-roundtrip");
	TCase *tc = tcase_create("roundtrip");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_sizes_round_trip);
	tcase_add_test(tc, test_unaligned_source);
	tcase_add_test(tc, test_fixed_buffers);
	tcase_add_test(tc, test_visibility_and_refusals);
	tcase_add_test(tc, test_log_wraps);
	tcase_add_test(tc, test_two_drives);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
