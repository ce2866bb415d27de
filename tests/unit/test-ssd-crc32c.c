/* SPDX-License-Identifier: MIT */
/*
 * CRC-32C (sidecar/ssd/crc32c.c): the test vectors of RFC 3720 B.4 and
 * the check value of "123456789", on the path crc32c() takes (SSE4.2 where
 * the CPU has it) and on the table; the two paths agree on random buffers
 * of every length and alignment around the three-stream threshold;
 * continuing a CRC and crc32c_combine() give the CRC of the whole.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ssd/crc32c.h"

struct vec {
	const char *name;
	uint8_t data[48];
	size_t len;
	uint32_t crc;
};

static struct vec vecs[6];

static void build_vectors(void)
{
	static const uint8_t pdu[48] = { 0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
					 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,
					 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00,
					 0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
					 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00 };

	vecs[0] = (struct vec){ .name = "32 zeros", .len = 32, .crc = 0x8a9136aa };
	vecs[1] = (struct vec){ .name = "32 x 0xff", .len = 32, .crc = 0x62a8ab43 };
	memset(vecs[1].data, 0xff, 32);
	vecs[2] = (struct vec){ .name = "0x00..0x1f", .len = 32, .crc = 0x46dd794e };
	vecs[3] = (struct vec){ .name = "0x1f..0x00", .len = 32, .crc = 0x113fdb5c };
	for (unsigned i = 0; i < 32; i++) {
		vecs[2].data[i] = (uint8_t)i;
		vecs[3].data[i] = (uint8_t)(31 - i);
	}
	vecs[4] = (struct vec){ .name = "iSCSI read PDU", .len = 48, .crc = 0xd9963a56 };
	memcpy(vecs[4].data, pdu, 48);
	vecs[5] = (struct vec){ .name = "123456789", .len = 9, .crc = 0xe3069283 };
	memcpy(vecs[5].data, "123456789", 9);
}

START_TEST(test_rfc3720_vectors)
{
	crc32c_init();
	build_vectors();
	for (unsigned i = 0; i < 6; i++) {
		ck_assert_msg(crc32c(0, vecs[i].data, vecs[i].len) == vecs[i].crc,
			      "%s: crc32c %08x, RFC 3720 says %08x (%s path)", vecs[i].name,
			      crc32c(0, vecs[i].data, vecs[i].len), vecs[i].crc,
			      crc32c_hw() ? "SSE4.2" : "table");
		ck_assert_msg(crc32c_sw(0, vecs[i].data, vecs[i].len) == vecs[i].crc,
			      "%s: table path %08x, RFC 3720 says %08x", vecs[i].name,
			      crc32c_sw(0, vecs[i].data, vecs[i].len), vecs[i].crc);
	}
}
END_TEST

START_TEST(test_hw_on_x86)
{
	/* Every x86-64 CPU this runs on in CI has SSE4.2: the fast path must be taken. */
#if defined(__x86_64__)
	__builtin_cpu_init();
	ck_assert_int_eq(crc32c_init(), __builtin_cpu_supports("sse4.2") != 0);
#else
	crc32c_init();
#endif
}
END_TEST

START_TEST(test_paths_agree)
{
	size_t max = 3 * 4096 + 4096;
	uint8_t *buf = malloc(max + 16);
	unsigned seed = 12345;

	crc32c_init();
	for (size_t i = 0; i < max + 16; i++) {
		seed = seed * 1103515245u + 12345u;
		buf[i] = (uint8_t)(seed >> 16);
	}
	for (size_t len = 0; len <= max; len += len < 64 ? 1 : len < 12000 ? 97 : 1) {
		for (unsigned off = 0; off < 9; off += 4) {
			uint32_t a = crc32c(0, buf + off, len), b = crc32c_sw(0, buf + off, len);

			ck_assert_msg(a == b, "length %zu offset %u: %08x vs table %08x", len, off,
				      a, b);
		}
	}
	/* A 2 MiB payload, the common block. */
	{
		size_t big = 2u << 20;
		uint8_t *p = malloc(big);

		for (size_t i = 0; i < big; i++)
			p[i] = (uint8_t)(i * 2654435761u >> 13);
		ck_assert_uint_eq(crc32c(0, p, big), crc32c_sw(0, p, big));
		free(p);
	}
	free(buf);
}
END_TEST

START_TEST(test_continue_and_combine)
{
	uint8_t buf[20000];

	crc32c_init();
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 31 + 7);
	for (size_t cut = 0; cut <= sizeof(buf); cut += 1237) {
		uint32_t whole = crc32c(0, buf, sizeof(buf));
		uint32_t a = crc32c(0, buf, cut), b = crc32c(0, buf + cut, sizeof(buf) - cut);

		ck_assert_uint_eq(crc32c(a, buf + cut, sizeof(buf) - cut), whole);
		ck_assert_uint_eq(crc32c_combine(a, b, sizeof(buf) - cut), whole);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssd-crc32c");
	TCase *tc = tcase_create("crc32c");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_rfc3720_vectors);
	tcase_add_test(tc, test_hw_on_x86);
	tcase_add_test(tc, test_paths_agree);
	tcase_add_test(tc, test_continue_and_combine);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
