/* SPDX-License-Identifier: MIT */
/*
 * The SSD region allocator (sidecar/ssd/region-alloc.c): payloads are placed back
 * to back from a region's start, never over its header zone and never more
 * than the zone has entries; entries land in the zone image where the disk
 * has them and mark their unit dirty; FIFO order wraps from the last
 * region to the first; recovery
 * picks the newest region by serial order, also across the wrap of the
 * region sequence from 0xffffffff to 0.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssd/region-alloc.h"
#include "unit.h"

static struct ssd_geom geom;

static void setup(void)
{
	ck_assert_int_eq(ssd_geom_init(2ull << 20 | 4ull << 20, 1ull << 20, &geom), 0);
}

static unsigned fill(struct ssd_region *r, uint32_t maxlen, unsigned seed)
{
	uint64_t off, expect = 0;
	uint32_t bseq, n = 0;

	for (;;) {
		uint32_t len;
		int rc;

		seed = seed * 1103515245u + 12345u;
		len = 1 + (seed >> 8) % maxlen;
		rc = ssd_region_place(r, &geom, len, &off, &bseq);
		if (rc == -ENOSPC)
			break;
		ck_assert_int_eq(rc, 0);
		ck_assert_uint_eq(off, expect); /* back to back */
		ck_assert_uint_eq(off % SSD_UNIT, 0);
		ck_assert_uint_eq(bseq, n);
		expect += ssd_block_bytes(len);
		n++;
	}
	ck_assert_uint_le(r->used, geom.payload_bytes);
	ck_assert_uint_le(r->nblocks, geom.zone_entries);
	ck_assert_uint_eq(r->nblocks, n);
	return n;
}

START_TEST(test_place_until_full)
{
	struct ssd_region r;
	uint64_t off;
	uint32_t bseq;

	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(ssd_region_open(&r, &geom, 5), 0);
	ck_assert_uint_eq(r.seq, 5);
	ck_assert_uint_eq(r.state, SSD_R_OPEN);
	/* Small blocks: the zone's entries run out first. */
	ck_assert_uint_eq(fill(&r, 20000, 7), geom.zone_entries);
	ck_assert_int_eq(ssd_region_place(&r, &geom, 1, &off, &bseq), -ENOSPC);
	/* Large ones: the payload area does. */
	ck_assert_int_eq(ssd_region_open(&r, &geom, 6), 0);
	ck_assert_uint_lt(fill(&r, 300000, 9), geom.zone_entries);
	ck_assert_uint_gt(r.used + 300000, geom.payload_bytes - 300000);
	ssd_region_close(&r);
	ck_assert_ptr_null(r.zone);
}
END_TEST

START_TEST(test_place_limits)
{
	struct ssd_region r;
	uint64_t off;
	uint32_t bseq;
	uint64_t max = ssd_region_max_payload(&geom);

	memset(&r, 0, sizeof(r));
	ck_assert_uint_eq(max, geom.payload_bytes);
	ck_assert_int_eq(ssd_region_open(&r, &geom, 1), 0);
	ck_assert_int_eq(ssd_region_place(&r, &geom, 0, &off, &bseq), -E2BIG);
	ck_assert_int_eq(ssd_region_place(&r, &geom, (uint32_t)max + 1, &off, &bseq), -E2BIG);
	/* The largest block fits an empty region, up to the zone. */
	ck_assert_int_eq(ssd_region_place(&r, &geom, (uint32_t)max, &off, &bseq), 0);
	ck_assert_uint_eq(r.used, geom.payload_bytes);
	ck_assert_int_eq(ssd_region_place(&r, &geom, 1, &off, &bseq), -ENOSPC);
	ssd_region_close(&r);
}
END_TEST

START_TEST(test_zone_entries)
{
	struct ssd_region r;
	uint8_t hdr[SSD_HDR_SIZE] = { 0 };

	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(ssd_region_set_entry(&r, &geom, 0, hdr), -ERANGE); /* no image */
	ck_assert_int_eq(ssd_region_open(&r, &geom, 1), 0);
	for (uint32_t i = 0; i < geom.zone_entries; i++) {
		memset(hdr, (int)(i + 1), sizeof(hdr));
		ck_assert_int_eq(ssd_region_set_entry(&r, &geom, i, hdr), 0);
	}
	ck_assert_int_eq(ssd_region_set_entry(&r, &geom, geom.zone_entries, hdr), -ERANGE);
	/* Entry i lies 512 (i + 1) bytes before the trailer, as on disk. */
	for (uint32_t i = 0; i < geom.zone_entries; i++) {
		uint64_t disk = ssd_entry_off(&geom, i) - geom.payload_bytes;

		ck_assert_uint_eq(r.zone[disk], (uint8_t)(i + 1));
		ck_assert_uint_eq(r.zone[disk + SSD_HDR_SIZE - 1], (uint8_t)(i + 1));
		/* ...in the unit ssd_entry_unit() names, where ssd_region_unit() finds it. */
		ck_assert_uint_eq(
			ssd_region_unit(
				&r, &geom,
				ssd_entry_unit(
					i))[SSD_UNIT - (i % SSD_HDRS_PER_UNIT + 1) * SSD_HDR_SIZE],
			(uint8_t)(i + 1));
		ck_assert_uint_eq(ssd_zone_unit_off(&geom, ssd_entry_unit(i)) + SSD_UNIT -
					  (i % SSD_HDRS_PER_UNIT + 1) * SSD_HDR_SIZE,
				  ssd_entry_off(&geom, i));
	}
	for (uint32_t u = 0; u < ssd_zone_units(&geom); u++)
		ck_assert_uint_eq(r.units[u], SSD_UNIT_DIRTY);
	ck_assert_int_eq(ssd_region_set_entry(&r, &geom, 3, NULL), 0);
	ck_assert_uint_eq(r.zone[ssd_entry_off(&geom, 3) - geom.payload_bytes], 0);
	/* A new cycle starts empty. */
	ck_assert_int_eq(ssd_region_open(&r, &geom, 2), 0);
	ck_assert_uint_eq(r.nblocks, 0);
	ck_assert_uint_eq(r.used, 0);
	ck_assert_uint_eq(r.units[0], 0);
	ck_assert_uint_eq(r.zone[0], 0);
	ck_assert_uint_eq(r.entries, SSD_NO_ENTRY);
	ssd_region_close(&r);
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

UNIT_TESTS(test_place_until_full, test_place_limits, test_zone_entries, test_ring, test_pick_head,
	   test_pick_head_wrap)

const struct unit_suite unit_suite = {
	.name = "ssd-region",
	.setup = setup,
	.add_tests = add_tests,
};
