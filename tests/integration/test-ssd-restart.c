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
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssdtest.h"
#include "tests/unit/unit.h"

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
	st_start(&t);
	ns = st_ns(&t, "model", 8192);
	write_all(&t, ns, 0, N);
	st_close(&t);

	for (unsigned round = 0; round < 3; round++) {
		st_start(&t);
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
	st_start(&t);
	ns = st_ns(&t, "model", 8192);
	write_all(&t, ns, 0, N);
	st_abandon(&t);

	st_start(&t);
	ssd_get_stats(t.ssd, &s);
	ck_assert(!s.drive[0].last_clean);
	ck_assert_uint_eq(s.drive[0].recovered_blocks, N);
	ns = st_ns(&t, "model", 8192);
	ck_assert_uint_eq(read_all(&t, ns, 0, N), N);
	/* New writes go to a new region; both survive another abandon. */
	write_all(&t, ns, N, 10);
	st_abandon(&t);
	st_start(&t);
	ns = st_ns(&t, "model", 8192);
	ck_assert_uint_eq(read_all(&t, ns, 0, N + 10), N + 10);
	st_close(&t);
}
END_TEST

START_TEST(test_reused_regions_stay_gone)
{
	struct st t = { 0 };
	unsigned before;
	uint32_t ns;
	bool *had = calloc(400, sizeof(bool));

	st_config(&t, 1, 9 * MiB, 1 * MiB);
	st_start(&t);
	ns = st_ns(&t, "wrap", 1);
	for (unsigned i = 0; i < 400; i++)
		ck_assert_int_eq(st_put(&t, ns, i, st_len(i, 20000, 90000)), 0);
	before = st_present(&t, ns, 400, had);
	st_abandon(&t);
	st_start(&t);
	ns = st_ns(&t, "wrap", 1);
	/* Nothing evicted before the crash comes back after it. */
	ck_assert_uint_eq(st_only_present(&t, ns, 400, had, 20000, 90000), before);
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
	st_start(&t);
	ns = st_ns(&t, "g", 1);
	write_all(&t, ns, 0, 20);
	st_close(&t);
	t.cfg.region_size = 2 * MiB;
	st_start(&t);
	ssd_get_stats(t.ssd, &s);
	ck_assert(s.drive[0].formatted);
	ck_assert_uint_eq(s.drive[0].recovered_blocks, 0);
	ns = st_ns(&t, "g", 1);
	ck_assert_uint_eq(read_all(&t, ns, 0, 20), 0);
	st_close(&t);
	/* Back to the first geometry: the reformat was final, nothing old returns. */
	t.cfg.region_size = 4 * MiB;
	st_start(&t);
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
	st_start(&t);
	ns = st_ns(&t, "llama", 65536);
	write_all(&t, ns, 0, 20);
	st_close(&t);
	st_start(&t);
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

UNIT_TESTS(test_clean_restart, test_abandoned_restart, test_reused_regions_stay_gone,
	   test_drive_geometry_changed, test_namespace_geometry_changed)

const struct unit_suite unit_suite = {
	.name = "ssd-restart",
	.timeout_s = 180,
	.add_tests = add_tests,
};
