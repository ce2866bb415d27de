/* SPDX-License-Identifier: MIT */
/*
 * Regions are erased ahead of the writes, in batches, with one datasync
 * per batch (erase_ahead() in sidecar/ssd/reclaim.c): a write storm through
 * many regions takes at least one datasync and at most one per two
 * regions, and every block of it reads back byte-exact; blocks of regions
 * erased ahead (dropped from the index, never rewritten) stay gone after
 * a kill -9 and a restart (the kernel keeps what landed, so this checks
 * the index, not the drive's cache: a power cut is not simulated here); a
 * failed datasync skips the regions it covered, none of them gets a
 * block, it counts one error, and the writes go on in the next batch, all
 * of them readable, before and after a restart; a datasync failing with
 * ENODEV takes the drive offline; a sync rule other than eio or enodev
 * is refused.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssdtest.h"
#include "tests/unit/unit.h"

#define MiB (1ull << 20)

/* 2-3 blocks per 1 MiB region; 64 MiB of them: 63 regions, 7 erased ahead. */
#define LEN_MIN 200000
#define LEN_MAX 330000

static uint32_t len_of(unsigned i)
{
	return st_len(i, LEN_MIN, LEN_MAX);
}

static unsigned read_all(struct st *t, uint32_t ns, unsigned n)
{
	unsigned found = 0;

	for (unsigned i = 0; i < n; i++) {
		int r = st_get(t, ns, i, len_of(i));

		ck_assert_msg(r == 0 || r == -ENOENT, "key %u: %d", i, r);
		found += r == 0;
	}
	return found;
}

/* Start the drive configured in @t and write keys 0..n-1 of namespace @name. */
static uint32_t start_and_fill(struct st *t, const char *name, unsigned n)
{
	uint32_t ns;

	st_start(t);
	ns = st_ns(t, name, 1);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(st_put(t, ns, i, len_of(i)), 0);
	return ns;
}

START_TEST(test_one_datasync_per_batch)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint32_t ns;

	st_config(&t, 1, 64 * MiB, 1 * MiB);
	ns = start_and_fill(&t, "batch", 120);
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_ge(s.drive[0].regions_opened, 30);
	/* Batches: fewer datasyncs than half the regions... */
	ck_assert_uint_le(s.drive[0].erase_syncs * 2, s.drive[0].regions_opened + 1);
	/* ...and none skipped: at most 8 regions a batch, the last may be waiting. */
	ck_assert_uint_ge(s.drive[0].erase_syncs * 8 + 8, s.drive[0].regions_opened);
	ck_assert_uint_eq(s.drive[0].write_errors, 0);
	ck_assert_uint_eq(read_all(&t, ns, 120), 120);
	st_close(&t);
}
END_TEST

START_TEST(test_erased_ahead_stay_gone)
{
	struct st t = { 0 };
	bool *had = calloc(300, sizeof(bool));
	struct ssd_stats s;
	unsigned before;
	uint32_t ns;

	st_config(&t, 1, 64 * MiB, 1 * MiB);
	/* Around the ring more than once: the oldest regions are reused. */
	ns = start_and_fill(&t, "wrap", 300);
	before = st_present(&t, ns, 300, had);
	ssd_get_stats(t.ssd, &s);
	/* The ring wrapped: blocks were dropped, by reuse and by erasing ahead. */
	ck_assert_uint_gt(s.drive[0].regions_reclaimed, 0);
	ck_assert_uint_lt(before, 300);
	st_abandon(&t);
	st_start(&t);
	ns = st_ns(&t, "wrap", 1);
	ck_assert_uint_eq(st_only_present(&t, ns, 300, had, LEN_MIN, LEN_MAX), before);
	st_close(&t);
	free(had);
}
END_TEST

START_TEST(test_failed_datasync_skips_its_regions)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint32_t ns;

	st_config(&t, 1, 64 * MiB, 1 * MiB);
	t.cfg.faults = "sync@1=eio";
	t.cfg.max_errors = 100;
	t.quiet = true;
	ns = start_and_fill(&t, "skip", 30);
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.drive[0].write_errors, 1);
	/* The whole first batch, regions 0-6 of a fresh drive: every region it had erased. */
	ck_assert_uint_eq(s.drive[0].regions_abandoned, 7);
	ck_assert_uint_ge(s.drive[0].erase_syncs, 1);
	ck_assert_uint_eq(s.drive[0].state, SSD_DRIVE_ONLINE);
	/* No block went into them: every one waited for the next batch's datasync. */
	for (unsigned i = 0; i < 30; i++) {
		struct ssd_loc loc;
		uint8_t key[16];

		st_key(i, key);
		ck_assert_int_eq(ssd_lookup(t.ssd, ns, key, 0, &loc), 0);
		ck_assert_msg(loc.region >= 7, "key %u in region %u, whose erase never synced", i,
			      loc.region);
	}
	ck_assert_uint_eq(read_all(&t, ns, 30), 30);
	st_close(&t);
	t.cfg.faults = "";
	st_start(&t);
	ns = st_ns(&t, "skip", 1);
	ck_assert_uint_eq(read_all(&t, ns, 30), 30);
	st_close(&t);
}
END_TEST

START_TEST(test_datasync_enodev_goes_offline)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint32_t ns;
	int r;

	st_config(&t, 1, 64 * MiB, 1 * MiB);
	t.cfg.faults = "sync@1=enodev";
	t.quiet = true;
	st_start(&t);
	ns = st_ns(&t, "gone", 1);
	/* Queued behind the first batch, which never becomes writable. */
	r = st_put(&t, ns, 0, len_of(0));
	ck_assert_int_lt(r, 0);
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.drive[0].state, SSD_DRIVE_OFFLINE);
	ck_assert_int_eq(st_get(&t, ns, 0, len_of(0)), -ENOENT);
	st_close(&t);
}
END_TEST

START_TEST(test_sync_rule_only_fails)
{
	struct st t = { 0 };
	struct ssd *ssd;
	char err[256];

	st_config(&t, 1, 64 * MiB, 1 * MiB);
	t.cfg.faults = "sync@1=tear";
	ck_assert_int_eq(ssd_open(&t.cfg, &ssd, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "sync@1=tear"), "%s", err);
}
END_TEST

UNIT_TESTS(test_sync_rule_only_fails, test_one_datasync_per_batch, test_erased_ahead_stay_gone,
	   test_failed_datasync_skips_its_regions, test_datasync_enodev_goes_offline)

const struct unit_suite unit_suite = {
	.name = "ssd-erase",
	.timeout_s = 180,
	.add_tests = add_tests,
};
