/* SPDX-License-Identifier: MIT */
/*
 * The SSD tier's on-disk format (sidecar/ssd/format.c): superblocks,
 * block headers and region trailers survive an encode/decode round trip
 * field for field; any flipped byte is refused (checksum); fields out of
 * bounds, another file's identity or another place are refused even with
 * a good checksum; of two superblock copies the newest valid one wins,
 * across the generation's wrap from 0xffffffff to 0.
 */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssd/crc32c.h"
#include "ssd/format.h"

static uint8_t fid[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
static struct ssd_geom geom;

static void setup(void)
{
	crc32c_init();
	ck_assert_int_eq(ssd_geom_init(64ull << 20, 4ull << 20, &geom), 0);
}

static struct ssd_super make_super(uint32_t gen)
{
	struct ssd_super sb;

	memset(&sb, 0, sizeof(sb));
	sb.generation = gen;
	sb.flags = SSD_SB_CLEAN;
	memcpy(sb.file_id, fid, 16);
	memset(sb.host_id, 0xab, 16);
	sb.geom = geom;
	sb.io_align = 512;
	sb.dev = 0x801;
	sb.ino = 12345;
	sb.format_time = 1700000000;
	sb.open_time = 1700000100;
	return sb;
}

static struct ssd_block_hdr make_hdr(uint32_t region, uint64_t off_in_region, uint32_t len)
{
	struct ssd_block_hdr h;

	memset(&h, 0, sizeof(h));
	memcpy(h.file_id, fid, 16);
	h.region = region;
	h.region_seq = 77;
	h.block_seq = 3;
	h.offset = ssd_region_off(&geom, region) + off_in_region;
	h.payload_len = len;
	h.payload_crc = 0xdeadbeef;
	for (unsigned i = 0; i < SSD_KEY_SIZE; i++)
		h.key[i] = (uint8_t)(i * 7);
	h.shard = 1;
	h.ns_len = 20;
	memcpy(h.ns, "model-x|fp=1234|tp=2", 20);
	return h;
}

START_TEST(test_geometry)
{
	struct ssd_geom g;

	ck_assert_int_eq(geom.data_off, 2u << 20); /* regions on 2 MiB boundaries */
	ck_assert_uint_eq(geom.nr_regions, (64 - 2) / 4);
	ck_assert_uint_eq(geom.zone_entries, (4u << 20) / (64u << 10));
	ck_assert_uint_eq(geom.zone_bytes, geom.zone_entries * SSD_HDR_SIZE);
	ck_assert_uint_eq(geom.payload_bytes, geom.region_bytes - SSD_UNIT - geom.zone_bytes);
	ck_assert_int_eq(ssd_geom_init(64ull << 20, 4097, &g), -EINVAL);
	ck_assert_int_eq(ssd_geom_init(64ull << 20, 8192, &g), -EINVAL); /* < 4 units */
	ck_assert_int_eq(ssd_geom_init((10ull << 20) - 1, 4ull << 20, &g),
			 -ENOSPC); /* one region */
	ck_assert_int_eq(ssd_geom_init(10ull << 20, 4ull << 20, &g), 0);
	ck_assert_uint_eq(g.nr_regions, 2);
	/* Small regions still get a unit of entries. */
	ck_assert_int_eq(ssd_geom_init(64ull << 20, 16384, &g), 0);
	ck_assert_uint_eq(g.zone_entries, SSD_HDRS_PER_UNIT);
	ck_assert_uint_eq(g.payload_bytes, 8192);
}
END_TEST

START_TEST(test_super_round_trip)
{
	uint8_t buf[SSD_UNIT] = { 0 };
	struct ssd_super sb = make_super(41), out;

	ssd_super_encode(&sb, buf);
	ck_assert_int_eq(ssd_super_decode(buf, &out), 0);
	ck_assert_uint_eq(out.generation, 41);
	ck_assert_uint_eq(out.flags, SSD_SB_CLEAN);
	ck_assert_mem_eq(out.file_id, fid, 16);
	ck_assert_mem_eq(out.host_id, sb.host_id, 16);
	ck_assert_uint_eq(out.geom.file_bytes, geom.file_bytes);
	ck_assert_uint_eq(out.geom.region_bytes, geom.region_bytes);
	ck_assert_uint_eq(out.geom.nr_regions, geom.nr_regions);
	ck_assert_uint_eq(out.geom.data_off, geom.data_off);
	ck_assert_uint_eq(out.io_align, 512);
	ck_assert_uint_eq(out.dev, 0x801);
	ck_assert_uint_eq(out.ino, 12345);
	ck_assert_uint_eq(out.format_time, 1700000000);
	ck_assert_uint_eq(out.open_time, 1700000100);
	/* Little-endian on disk whatever the host: the magic's first byte is 'K'. */
	ck_assert_int_eq(buf[0], 'K');
	ck_assert_uint_eq(le32toh(*(uint32_t *)(buf + 8)), 41);
}
END_TEST

START_TEST(test_super_every_byte)
{
	uint8_t buf[SSD_UNIT] = { 0 }, bad[SSD_UNIT];
	struct ssd_super sb = make_super(5), out;

	ssd_super_encode(&sb, buf);
	for (size_t i = 0; i < sizeof(struct ssd_super_disk); i++) {
		memcpy(bad, buf, sizeof(bad));
		bad[i] ^= 0x01;
		ck_assert_msg(ssd_super_decode(bad, &out) < 0, "byte %zu flipped and accepted", i);
	}
}
END_TEST

/* Re-seal a damaged superblock with a valid CRC: bounds must still refuse it. */
static int decode_forged(struct ssd_super_disk *d)
{
	uint8_t buf[SSD_UNIT] = { 0 };
	struct ssd_super out;

	d->crc = htole32(crc32c(0, d, offsetof(struct ssd_super_disk, crc)));
	memcpy(buf, d, sizeof(*d));
	return ssd_super_decode(buf, &out);
}

START_TEST(test_super_bounds)
{
	uint8_t buf[SSD_UNIT] = { 0 };
	struct ssd_super sb = make_super(5);
	struct ssd_super_disk d, o;

	ssd_super_encode(&sb, buf);
	memcpy(&o, buf, sizeof(o));
	d = o;
	d.version = htole16(2);
	ck_assert_int_eq(decode_forged(&d), -EPROTO);
	d = o;
	d.nr_regions = htole32(geom.nr_regions + 1); /* more regions than the file holds */
	ck_assert_int_eq(decode_forged(&d), -ERANGE);
	d = o;
	d.region_bytes = htole64(12345);
	ck_assert_int_eq(decode_forged(&d), -ERANGE);
	d = o;
	d.data_off = htole64(0);
	ck_assert_int_eq(decode_forged(&d), -ERANGE);
	d = o;
	d.unit = htole32(512);
	ck_assert_int_eq(decode_forged(&d), -ERANGE);
	d = o;
	ck_assert_int_eq(decode_forged(&d), 0);
}
END_TEST

START_TEST(test_super_pick)
{
	uint8_t a[SSD_UNIT] = { 0 }, b[SSD_UNIT] = { 0 }, junk[SSD_UNIT];
	struct ssd_super out, sb;

	memset(junk, 0x5a, sizeof(junk));
	sb = make_super(10);
	ssd_super_encode(&sb, a);
	sb = make_super(11);
	ssd_super_encode(&sb, b);
	ck_assert_int_eq(ssd_super_pick(a, b, &out), 1);
	ck_assert_uint_eq(out.generation, 11);
	ck_assert_int_eq(ssd_super_pick(b, a, &out), 0);
	ck_assert_uint_eq(out.generation, 11);
	/* A torn newest copy: the older one wins. */
	ck_assert_int_eq(ssd_super_pick(a, junk, &out), 0);
	ck_assert_uint_eq(out.generation, 10);
	ck_assert_int_eq(ssd_super_pick(junk, b, &out), 1);
	ck_assert_int_eq(ssd_super_pick(junk, junk, &out), -EBADMSG);

	/* Sequence wrap: generation 0 comes after 0xffffffff. */
	sb = make_super(0xffffffffu);
	ssd_super_encode(&sb, a);
	sb = make_super(0);
	ssd_super_encode(&sb, b);
	ck_assert_int_eq(ssd_super_pick(a, b, &out), 1);
	ck_assert_uint_eq(out.generation, 0);
	sb = make_super(1);
	ssd_super_encode(&sb, a);
	ck_assert_int_eq(ssd_super_pick(a, b, &out), 0);
	ck_assert_uint_eq(out.generation, 1);

	/* A newer copy from another format of the file never wins over copy A. */
	sb = make_super(3);
	ssd_super_encode(&sb, a);
	sb = make_super(9);
	sb.file_id[0] ^= 1;
	ssd_super_encode(&sb, b);
	ck_assert_int_eq(ssd_super_pick(a, b, &out), 0);
	ck_assert_mem_eq(out.file_id, fid, 16);
}
END_TEST

START_TEST(test_hdr_round_trip)
{
	uint8_t buf[SSD_UNIT] = { 0 };
	struct ssd_block_hdr h = make_hdr(2, 8 * SSD_UNIT, 100000), out;

	ssd_block_hdr_encode(&h, buf);
	ck_assert_int_eq(ssd_block_hdr_decode(buf, fid, &geom, 2, 3, &out), 0);
	ck_assert_int_eq(ssd_block_hdr_decode(buf, fid, &geom, UINT32_MAX, UINT32_MAX, &out), 0);
	ck_assert_int_eq(ssd_block_hdr_decode(buf, fid, &geom, 1, 3, &out), -ERANGE);
	ck_assert_int_eq(ssd_block_hdr_decode(buf, fid, &geom, 2, 4, &out), -ERANGE);
	ck_assert_uint_eq(out.region, 2);
	ck_assert_uint_eq(out.region_seq, 77);
	ck_assert_uint_eq(out.block_seq, 3);
	ck_assert_uint_eq(out.offset, h.offset);
	ck_assert_uint_eq(out.payload_len, 100000);
	ck_assert_uint_eq(out.payload_crc, 0xdeadbeef);
	ck_assert_mem_eq(out.key, h.key, SSD_KEY_SIZE);
	ck_assert_uint_eq(out.shard, 1);
	ck_assert_uint_eq(out.ns_len, 20);
	ck_assert_mem_eq(out.ns, h.ns, 20);
}
END_TEST

START_TEST(test_hdr_every_byte)
{
	uint8_t buf[SSD_UNIT] = { 0 }, bad[SSD_UNIT];
	struct ssd_block_hdr h = make_hdr(1, 0, 4096), out;

	ssd_block_hdr_encode(&h, buf);
	for (size_t i = 0; i < SSD_HDR_SIZE; i++) {
		memcpy(bad, buf, sizeof(bad));
		bad[i] ^= 0x80;
		ck_assert_msg(ssd_block_hdr_decode(bad, fid, &geom, UINT32_MAX, UINT32_MAX, &out) <
				      0,
			      "byte %zu flipped and accepted", i);
	}
}
END_TEST

START_TEST(test_hdr_bounds)
{
	uint8_t buf[SSD_UNIT];
	struct ssd_block_hdr h, out;
	uint8_t other[16];

	memcpy(other, fid, 16);
	other[15] ^= 0xff;
#define REFUSED(expr, off)                                                                        \
	do {                                                                                      \
		memset(buf, 0, sizeof(buf));                                                      \
		h = make_hdr(1, 0, 4096);                                                         \
		expr;                                                                             \
		ssd_block_hdr_encode(&h, buf);                                                    \
		ck_assert_msg(ssd_block_hdr_decode(buf, fid, &geom, UINT32_MAX, (off), &out) < 0, \
			      "accepted: " #expr);                                                \
	} while (0)
	REFUSED(h.region = geom.nr_regions, UINT32_MAX);
	REFUSED(h.offset += 512, UINT32_MAX);			  /* not on a unit */
	REFUSED(h.offset = ssd_region_off(&geom, 0), UINT32_MAX); /* not in its region */
	REFUSED(h.payload_len = 0, UINT32_MAX);
	REFUSED(h.payload_len = (uint32_t)geom.region_bytes, UINT32_MAX); /* past the region */
	REFUSED(h.offset += geom.payload_bytes, UINT32_MAX);		  /* over the header zone */
	REFUSED(h.block_seq = geom.zone_entries, UINT32_MAX);		  /* no such entry */
	REFUSED(h.ns_len = 0, UINT32_MAX);
	REFUSED(memcpy(h.file_id, other, 16), UINT32_MAX); /* another format */
	REFUSED((void)0, 4);				   /* another entry */
#undef REFUSED
	/* ns_len past the field: the encoder clamps it, the decoder checks the digest. */
	memset(buf, 0, sizeof(buf));
	h = make_hdr(1, 0, 4096);
	ssd_block_hdr_encode(&h, buf);
	((struct ssd_block_hdr_disk *)buf)->ns_len = htole16(SSD_NS_MAX + 1);
	((struct ssd_block_hdr_disk *)buf)->crc =
		htole32(crc32c(0, buf, offsetof(struct ssd_block_hdr_disk, crc)));
	ck_assert_int_eq(ssd_block_hdr_decode(buf, fid, &geom, UINT32_MAX, UINT32_MAX, &out),
			 -ERANGE);
}
END_TEST

START_TEST(test_trailer)
{
	uint8_t buf[SSD_UNIT] = { 0 }, bad[SSD_UNIT];
	struct ssd_trailer t, out;

	memset(&t, 0, sizeof(t));
	memcpy(t.file_id, fid, 16);
	t.region = 4;
	t.region_seq = 99;
	t.nr_blocks = 9;
	t.summary_crc = 0x1234;
	t.summary_off = geom.payload_bytes;
	t.used_bytes = 9 * 2 * SSD_UNIT;
	ssd_trailer_encode(&t, buf);
	ck_assert_int_eq(ssd_trailer_decode(buf, fid, &geom, 4, &out), 0);
	ck_assert_uint_eq(out.region_seq, 99);
	ck_assert_uint_eq(out.nr_blocks, 9);
	ck_assert_uint_eq(out.summary_crc, 0x1234);
	ck_assert_uint_eq(out.summary_off, t.summary_off);
	ck_assert_uint_eq(out.used_bytes, t.used_bytes);
	ck_assert_int_eq(ssd_trailer_decode(buf, fid, &geom, 5, &out), -ERANGE);
	for (size_t i = 0; i < sizeof(struct ssd_trailer_disk); i++) {
		memcpy(bad, buf, sizeof(bad));
		bad[i] ^= 0x04;
		ck_assert_msg(ssd_trailer_decode(bad, fid, &geom, 4, &out) < 0, "byte %zu", i);
	}
	/* A zone elsewhere, payloads over the zone, more entries than the zone has. */
	t.summary_off -= SSD_UNIT;
	ssd_trailer_encode(&t, buf);
	ck_assert_int_eq(ssd_trailer_decode(buf, fid, &geom, 4, &out), -ERANGE);
	t.summary_off += SSD_UNIT;
	t.used_bytes = geom.payload_bytes + SSD_UNIT;
	ssd_trailer_encode(&t, buf);
	ck_assert_int_eq(ssd_trailer_decode(buf, fid, &geom, 4, &out), -ERANGE);
	t.used_bytes = geom.payload_bytes;
	t.nr_blocks = geom.zone_entries + 1;
	ssd_trailer_encode(&t, buf);
	ck_assert_int_eq(ssd_trailer_decode(buf, fid, &geom, 4, &out), -ERANGE);
	t.nr_blocks = geom.zone_entries;
	ssd_trailer_encode(&t, buf);
	ck_assert_int_eq(ssd_trailer_decode(buf, fid, &geom, 4, &out), 0);
}
END_TEST

START_TEST(test_serial_numbers)
{
	ck_assert(ssd_seq_after(1, 0));
	ck_assert(!ssd_seq_after(0, 1));
	ck_assert(!ssd_seq_after(5, 5));
	ck_assert(ssd_seq_after(0, 0xffffffffu));
	ck_assert(ssd_seq_after(3, 0xfffffff0u));
	ck_assert(!ssd_seq_after(0xfffffff0u, 3));
	ck_assert(ssd_seq_after(0x7fffffffu, 0));
	ck_assert(!ssd_seq_after(0x80000001u, 0)); /* more than half the space: before */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssd-format");
	TCase *tc = tcase_create("format");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_geometry);
	tcase_add_test(tc, test_super_round_trip);
	tcase_add_test(tc, test_super_every_byte);
	tcase_add_test(tc, test_super_bounds);
	tcase_add_test(tc, test_super_pick);
	tcase_add_test(tc, test_hdr_round_trip);
	tcase_add_test(tc, test_hdr_every_byte);
	tcase_add_test(tc, test_hdr_bounds);
	tcase_add_test(tc, test_trailer);
	tcase_add_test(tc, test_serial_numbers);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
