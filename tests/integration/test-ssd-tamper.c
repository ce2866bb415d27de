/* SPDX-License-Identifier: MIT */
/*
 * Garbage written into the SSD tier's files with dd (from /dev/urandom,
 * conv=notrunc, while kvstash is stopped) is only ever a miss: a garbled
 * payload fails its CRC-32C on read and leaves the index; a garbled
 * header entry costs that block only; a garbled trailer leaves the region
 * to be read as an open one (every entry of its cycle still found); with
 * its first entry garbled too the region is empty; a garbled superblock
 * copy is replaced by the other, both garbled formats the drive; random
 * garbage anywhere serves no wrong byte.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssdtest.h"

#define MiB    (1ull << 20)
#define N      40
#define REGION (2 * MiB)

static uint32_t len_of(unsigned i)
{
	return st_len(i, 30000, 100000);
}

static void dd_garbage(const char *path, uint64_t off, uint64_t len)
{
	char cmd[1024];

	ck_assert(off % 512 == 0 && len % 512 == 0);
	snprintf(cmd, sizeof(cmd),
		 "dd if=/dev/urandom of='%s' bs=512 seek=%llu count=%llu conv=notrunc status=none",
		 path, (unsigned long long)(off / 512), (unsigned long long)(len / 512));
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
}

/* Fill a fresh drive with N blocks and stop cleanly. */
static void populate(struct st *t)
{
	uint32_t ns;

	st_config(t, 1, 32 * MiB, REGION);
	ck_assert_int_eq(st_open(t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t->ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(t, "tamper", 1);
	for (unsigned i = 0; i < N; i++)
		ck_assert_int_eq(st_put(t, ns, i, len_of(i)), 0);
	st_close(t);
}

static void reopen(struct st *t, uint32_t *ret_ns)
{
	ck_assert_int_eq(st_open(t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t->ssd, ST_TIMEOUT_MS), 0);
	*ret_ns = st_ns(t, "tamper", 1);
}

static struct ssd_loc where(struct st *t, uint32_t ns, unsigned i)
{
	struct ssd_loc loc;
	uint8_t key[16];

	st_key(i, key);
	ck_assert_int_eq(ssd_lookup(t->ssd, ns, key, 0, &loc), 0);
	return loc;
}

static uint64_t region_off(uint32_t region)
{
	return (2 * MiB) + (uint64_t)region * REGION;
}

static uint64_t payload_off(const struct ssd_loc *l)
{
	return region_off(l->region) + (uint64_t)l->off_units * 4096;
}

/* Entry @i of @region: 512 bytes, (i + 1) * 512 before the trailer unit. */
static uint64_t entry_off(uint32_t region, uint32_t i)
{
	return region_off(region) + REGION - 4096 - (uint64_t)(i + 1) * 512;
}

static uint64_t trailer_off(uint32_t region)
{
	return region_off(region) + REGION - 4096;
}

/* Every key: byte-exact or a miss (st_get fails the test on a wrong byte). */
static unsigned check_all(struct st *t, uint32_t ns)
{
	unsigned found = 0;

	for (unsigned i = 0; i < N; i++) {
		int r = st_get(t, ns, i, len_of(i));

		ck_assert_msg(r == 0 || r == -ENOENT || r == -EBADMSG, "key %u: %d", i, r);
		found += r == 0;
	}
	return found;
}

START_TEST(test_payload_garbage)
{
	struct st t = { 0 };
	struct ssd_loc l;
	struct ssd_stats s;
	uint8_t key[16];
	uint32_t ns;

	populate(&t);
	reopen(&t, &ns);
	l = where(&t, ns, 7);
	st_close(&t);
	dd_garbage(t.paths[0], payload_off(&l) + 4096, 4096); /* inside block 7's payload */
	reopen(&t, &ns);
	ck_assert_int_eq(st_get(&t, ns, 7, len_of(7)), -EBADMSG);
	st_key(7, key);
	ck_assert_int_eq(ssd_lookup(t.ssd, ns, key, 0, &l), -ENOENT); /* out of the index */
	ck_assert_uint_eq(check_all(&t, ns), N - 1);
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.drive[0].crc_errors, 1);
	st_close(&t);
}
END_TEST

/* Keys of the region key 0 is in, in write order (= entry order), and that region. */
static unsigned region_keys(struct st *t, uint32_t ns, unsigned *keys, uint32_t *ret_region)
{
	struct ssd_loc l0 = where(t, ns, 0);
	unsigned n = 0;

	for (unsigned i = 0; i < N; i++) {
		struct ssd_loc l = where(t, ns, i);

		if (l.region == l0.region)
			keys[n++] = i;
	}
	*ret_region = l0.region;
	return n;
}

START_TEST(test_entry_garbage)
{
	struct st t = { 0 };
	unsigned keys[N], n;
	uint32_t ns, region;

	populate(&t);
	reopen(&t, &ns);
	n = region_keys(&t, ns, keys, &region);
	ck_assert_uint_ge(n, 4);
	st_close(&t);
	dd_garbage(t.paths[0], entry_off(region, 2), 512);
	reopen(&t, &ns);
	ck_assert_int_eq(st_get(&t, ns, keys[2], len_of(keys[2])), -ENOENT);
	ck_assert_uint_eq(check_all(&t, ns), N - 1); /* that block only */
	st_close(&t);
}
END_TEST

START_TEST(test_trailer_garbage)
{
	struct st t = { 0 };
	unsigned keys[N], n;
	uint32_t ns, region;

	populate(&t);
	reopen(&t, &ns);
	n = region_keys(&t, ns, keys, &region);
	st_close(&t);
	dd_garbage(t.paths[0], trailer_off(region), 4096);
	/* Read like a region open at a crash: every entry of its cycle. */
	reopen(&t, &ns);
	ck_assert_uint_eq(check_all(&t, ns), N);
	st_close(&t);
	/* Its first entry too: nothing says which cycle it is in, so it is empty. */
	dd_garbage(t.paths[0], entry_off(region, 0), 512);
	reopen(&t, &ns);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(st_get(&t, ns, keys[i], len_of(keys[i])), -ENOENT);
	ck_assert_uint_eq(check_all(&t, ns), N - n);
	st_close(&t);
}
END_TEST

START_TEST(test_superblock_garbage)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint32_t ns;

	populate(&t);
	dd_garbage(t.paths[0], 0, 4096);
	reopen(&t, &ns);
	ssd_get_stats(t.ssd, &s);
	ck_assert(!s.drive[0].formatted); /* the other copy */
	ck_assert_uint_eq(check_all(&t, ns), N);
	st_close(&t);
	dd_garbage(t.paths[0], 0, 8192);
	reopen(&t, &ns);
	ssd_get_stats(t.ssd, &s);
	ck_assert(s.drive[0].formatted);
	ck_assert_uint_eq(check_all(&t, ns), 0);
	st_close(&t);
}
END_TEST

START_TEST(test_random_garbage)
{
	struct st t = { 0 };
	unsigned seed = 99;
	uint32_t ns;

	populate(&t);
	for (unsigned k = 0; k < 30; k++) {
		uint64_t off;

		seed = seed * 1103515245u + 12345u;
		off = (2 * MiB + (uint64_t)(seed >> 4) % (10 * MiB)) / 512 * 512;
		dd_garbage(t.paths[0], off, 512 * (1 + seed % 64));
	}
	reopen(&t, &ns);
	check_all(&t, ns);
	st_close(&t);
	/* And once more after an unclean stop. */
	reopen(&t, &ns);
	st_abandon(&t);
	reopen(&t, &ns);
	check_all(&t, ns);
	st_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssd-tamper");
	TCase *tc = tcase_create("tamper");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, test_payload_garbage);
	tcase_add_test(tc, test_entry_garbage);
	tcase_add_test(tc, test_trailer_garbage);
	tcase_add_test(tc, test_superblock_garbage);
	tcase_add_test(tc, test_random_garbage);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
