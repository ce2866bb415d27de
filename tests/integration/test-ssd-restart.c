/* SPDX-License-Identifier: MIT */
/*
 * SSD tier restarts: after a clean close every block comes back
 * byte-exact from the region summaries alone (the superblock says the
 * stop was clean); after an abandon (no seal, no sync, no clean mark:
 * what kill -9 leaves) the open region is walked header by header and
 * every completed block comes back too; blocks of regions reused before
 * the restart stay gone; a changed drive geometry formats the drive
 * (all misses); a namespace whose geometry changed finds nothing.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssdtest.h"

#define MiB (1ull << 20)
#define N   60

static void write_all(struct st *t, uint32_t ns, unsigned from, unsigned n)
{
	for (unsigned i = from; i < from + n; i++)
		ck_assert_int_eq(st_put(t, ns, i, st_len(i, 1000, 300000)), 0);
}

static unsigned read_all(struct st *t, uint32_t ns, unsigned from, unsigned n)
{
	unsigned found = 0;

	for (unsigned i = from; i < from + n; i++) {
		int r = st_get(t, ns, i, st_len(i, 1000, 300000));

		ck_assert_msg(r == 0 || r == -ENOENT, "key %u: %d", i, r);
		found += r == 0;
	}
	return found;
}

START_TEST(test_clean_restart)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint32_t ns;

	st_config(&t, 1, 64 * MiB, 4 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "model", 8192);
	write_all(&t, ns, 0, N);
	st_close(&t);

	for (unsigned round = 0; round < 3; round++) {
		ck_assert_int_eq(st_open(&t), 0);
		ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
		ssd_get_stats(t.ssd, &s);
		ck_assert(s.drive[0].last_clean);
		ck_assert(!s.drive[0].formatted);
		ck_assert_uint_eq(s.drive[0].recovered_blocks, N);
		ck_assert_uint_eq(s.drive[0].recovery_bad, 0);
		/* Sealed regions only: headers and summaries, never a payload. */
		ck_assert_uint_lt(s.drive[0].recovery_bytes_read, 64 * MiB / 8);
		ns = st_ns(&t, "model", 8192);
		ck_assert_uint_eq(read_all(&t, ns, 0, N), N);
		st_close(&t);
	}
}
END_TEST

START_TEST(test_abandoned_restart)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint32_t ns;

	st_config(&t, 1, 64 * MiB, 4 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "model", 8192);
	write_all(&t, ns, 0, N);
	st_abandon(&t);

	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ssd_get_stats(t.ssd, &s);
	ck_assert(!s.drive[0].last_clean);
	ck_assert_uint_eq(s.drive[0].recovered_blocks, N);
	ns = st_ns(&t, "model", 8192);
	ck_assert_uint_eq(read_all(&t, ns, 0, N), N);
	/* New writes go to a new region; both survive another abandon. */
	write_all(&t, ns, N, 10);
	st_abandon(&t);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "model", 8192);
	ck_assert_uint_eq(read_all(&t, ns, 0, N + 10), N + 10);
	st_close(&t);
}
END_TEST

START_TEST(test_reused_regions_stay_gone)
{
	struct st t = { 0 };
	unsigned before, after;
	uint32_t ns;
	bool *had = calloc(400, sizeof(bool));

	st_config(&t, 1, 9 * MiB, 1 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "wrap", 1);
	for (unsigned i = 0; i < 400; i++)
		ck_assert_int_eq(st_put(&t, ns, i, st_len(i, 20000, 90000)), 0);
	before = 0;
	for (unsigned i = 0; i < 400; i++) {
		struct ssd_loc loc;
		uint8_t key[16];

		st_key(i, key);
		had[i] = ssd_lookup(t.ssd, ns, key, 0, &loc) == 0;
		before += had[i];
	}
	st_abandon(&t);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "wrap", 1);
	after = 0;
	for (unsigned i = 0; i < 400; i++) {
		int r = st_get(&t, ns, i, st_len(i, 20000, 90000));

		/* Nothing evicted before the crash comes back after it. */
		ck_assert_msg(r == -ENOENT || had[i], "key %u: evicted, then back after restart",
			      i);
		after += r == 0;
	}
	ck_assert_uint_eq(after, before);
	st_close(&t);
	free(had);
}
END_TEST

START_TEST(test_drive_geometry_changed)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint32_t ns;

	st_config(&t, 1, 32 * MiB, 4 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "g", 1);
	write_all(&t, ns, 0, 20);
	st_close(&t);
	t.cfg.region_size = 2 * MiB;
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ssd_get_stats(t.ssd, &s);
	ck_assert(s.drive[0].formatted);
	ck_assert_uint_eq(s.drive[0].recovered_blocks, 0);
	ns = st_ns(&t, "g", 1);
	ck_assert_uint_eq(read_all(&t, ns, 0, 20), 0);
	st_close(&t);
	/* Back to the first geometry: the reformat was final, nothing old returns. */
	t.cfg.region_size = 4 * MiB;
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "g", 1);
	ck_assert_uint_eq(read_all(&t, ns, 0, 20), 0);
	st_close(&t);
}
END_TEST

START_TEST(test_namespace_geometry_changed)
{
	struct st t = { 0 };
	uint32_t ns, other;

	st_config(&t, 1, 32 * MiB, 4 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "llama", 65536);
	write_all(&t, ns, 0, 20);
	st_close(&t);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	/* Same name, another slot size: another identity, only misses. */
	other = st_ns(&t, "llama", 131072);
	ck_assert_uint_eq(read_all(&t, other, 0, 20), 0);
	other = st_ns(&t, "llamb", 65536);
	ck_assert_uint_eq(read_all(&t, other, 0, 20), 0);
	ns = st_ns(&t, "llama", 65536);
	ck_assert_uint_eq(read_all(&t, ns, 0, 20), 20);
	st_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssd-restart");
	TCase *tc = tcase_create("restart");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, test_clean_restart);
	tcase_add_test(tc, test_abandoned_restart);
	tcase_add_test(tc, test_reused_regions_stay_gone);
	tcase_add_test(tc, test_drive_geometry_changed);
	tcase_add_test(tc, test_namespace_geometry_changed);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
