/* SPDX-License-Identifier: MIT */
/*
 * The SSD region allocator (sidecar/ssd/region.c): blocks are placed back
 * to back from a region's start and a region refuses the block that would
 * leave no room for the summary and trailer, so a full region can always
 * be sealed; FIFO order wraps from the last region to the first; recovery
 * picks the newest region by serial order, also across the wrap of the
 * region sequence from 0xffffffff to 0.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssd/region.h"

static struct ssd_geom geom;

static void setup(void)
{
	ck_assert_int_eq(ssd_geom_init(1ull << 20 | 4ull << 20, 1ull << 20, &geom), 0);
}

START_TEST(test_place_until_full)
{
	struct ssd_region r;
	unsigned seed = 7;
	uint64_t off, expect = 0;
	uint32_t bseq, n = 0;

	memset(&r, 0, sizeof(r));
	ssd_region_open(&r, 5);
	ck_assert_uint_eq(r.seq, 5);
	ck_assert_uint_eq(r.state, SSD_R_OPEN);
	for (;;) {
		uint32_t len;
		int rc;

		seed = seed * 1103515245u + 12345u;
		len = 1 + (seed >> 8) % 40000;
		rc = ssd_region_place(&r, &geom, len, &off, &bseq);
		if (rc == -ENOSPC)
			break;
		ck_assert_int_eq(rc, 0);
		ck_assert_uint_eq(off, expect); /* back to back */
		ck_assert_uint_eq(off % SSD_UNIT, 0);
		ck_assert_uint_eq(bseq, n);
		expect += ssd_block_bytes(len);
		n++;
	}
	ck_assert_uint_gt(n, 10);
	/* What is placed, its summary and the trailer fit the region. */
	ck_assert_uint_le(r.used + ssd_summary_bytes(r.nblocks) + SSD_UNIT, geom.region_bytes);
	ck_assert_uint_eq(r.nblocks, n);
	/* Refused blocks change nothing. */
	ck_assert_int_eq(ssd_region_place(&r, &geom, 40000, &off, &bseq), -ENOSPC);
	ck_assert_uint_eq(r.nblocks, n);
}
END_TEST

START_TEST(test_place_limits)
{
	struct ssd_region r;
	uint64_t off;
	uint32_t bseq;
	uint64_t max = ssd_region_max_payload(&geom);

	memset(&r, 0, sizeof(r));
	ssd_region_open(&r, 1);
	ck_assert_int_eq(ssd_region_place(&r, &geom, 0, &off, &bseq), -E2BIG);
	ck_assert_int_eq(ssd_region_place(&r, &geom, (uint32_t)max + 1, &off, &bseq), -E2BIG);
	/* The largest block fits an empty region, with its summary and trailer. */
	ck_assert_int_eq(ssd_region_place(&r, &geom, (uint32_t)max, &off, &bseq), 0);
	ck_assert_uint_eq(r.used + ssd_summary_bytes(1) + SSD_UNIT, geom.region_bytes);
	ck_assert_int_eq(ssd_region_place(&r, &geom, 1, &off, &bseq), -ENOSPC);
}
END_TEST

START_TEST(test_summary)
{
	struct ssd_region r;
	uint8_t hdr[SSD_HDR_SIZE];
	uint64_t off;
	uint32_t bseq;

	memset(&r, 0, sizeof(r));
	ssd_region_open(&r, 1);
	ck_assert_int_eq(ssd_region_add_summary(&r, &geom, hdr), -ENOSPC); /* nothing placed */
	for (unsigned i = 0; i < 100; i++) {
		ck_assert_int_eq(ssd_region_place(&r, &geom, 512, &off, &bseq), 0);
		memset(hdr, (int)i, sizeof(hdr));
		ck_assert_int_eq(ssd_region_add_summary(&r, &geom, hdr), 0);
	}
	ck_assert_uint_eq(r.nsummary, 100);
	for (unsigned i = 0; i < 100; i++)
		ck_assert_uint_eq(r.summary[i * SSD_HDR_SIZE + 17], (uint8_t)i);
	ck_assert_int_eq(ssd_region_add_summary(&r, &geom, hdr), -ENOSPC);
	/* A new cycle starts empty and keeps the buffer. */
	ssd_region_open(&r, 2);
	ck_assert_uint_eq(r.nsummary, 0);
	ck_assert_uint_eq(r.nblocks, 0);
	ck_assert_uint_eq(r.used, 0);
	ck_assert_uint_eq(r.entries, SSD_NO_ENTRY);
	free(r.summary);
}
END_TEST

START_TEST(test_ring)
{
	ck_assert_uint_eq(geom.nr_regions, 4);
	ck_assert_uint_eq(ssd_ring_next(&geom, 0), 1);
	ck_assert_uint_eq(ssd_ring_next(&geom, 2), 3);
	ck_assert_uint_eq(ssd_ring_next(&geom, 3), 0);
}
END_TEST

START_TEST(test_pick_head)
{
	uint32_t seq[6] = { 10, 11, 12, 7, 8, 9 };
	bool valid[6] = { true, true, true, true, true, true };
	uint32_t head = 99;

	ck_assert_int_eq(ssd_pick_head(seq, valid, 6, &head), 0);
	ck_assert_uint_eq(head, 2);
	valid[2] = false;
	ck_assert_int_eq(ssd_pick_head(seq, valid, 6, &head), 0);
	ck_assert_uint_eq(head, 1);
	memset(valid, 0, sizeof(valid));
	head = 99;
	ck_assert_int_eq(ssd_pick_head(seq, valid, 6, &head), -ENOENT);
	ck_assert_uint_eq(head, 99); /* untouched on failure */
}
END_TEST

START_TEST(test_pick_head_wrap)
{
	/* Written in ring order across the wrap: ..., 0xfffffffe, 0xffffffff, 0, 1. */
	uint32_t seq[5] = { 0xfffffffdu, 0xfffffffeu, 0xffffffffu, 0, 1 };
	bool valid[5] = { true, true, true, true, true };
	uint32_t head = 99;

	ck_assert_int_eq(ssd_pick_head(seq, valid, 5, &head), 0);
	ck_assert_uint_eq(head, 4);
	/* Rotated: the head is where the sequence is newest, not the largest number. */
	{
		uint32_t s2[4] = { 0, 0xfffffffdu, 0xfffffffeu, 0xffffffffu };
		bool v2[4] = { true, true, true, true };

		ck_assert_int_eq(ssd_pick_head(s2, v2, 4, &head), 0);
		ck_assert_uint_eq(head, 0);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssd-region");
	TCase *tc = tcase_create("region");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_place_until_full);
	tcase_add_test(tc, test_place_limits);
	tcase_add_test(tc, test_summary);
	tcase_add_test(tc, test_ring);
	tcase_add_test(tc, test_pick_head);
	tcase_add_test(tc, test_pick_head_wrap);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
