/* SPDX-License-Identifier: MIT */
/*
 * Every injected I/O fault (sidecar/ssd/fault.h) ends in a miss or an
 * offline drive, never a crash or a wrong byte: a write failing with EIO
 * or cut short is abandoned (its write_done says so, it is never found,
 * its region is closed and the next blocks go on in a new one, all of it
 * surviving a restart); a torn write the device reported complete is
 * found but fails its checksum when read; a bit flipped on read and a read
 * failing with EIO are misses; ENODEV takes the drive offline at once and
 * too many errors take it offline too, after which lookups miss and new
 * work is refused.  Error lines are rate-limited.  And what cannot be
 * opened or preallocated is a clear start-up error.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "ssdtest.h"

#define MiB (1ull << 20)

static uint32_t len_of(unsigned i)
{
	return st_len(i, 10000, 200000);
}

static void open_with(struct st *t, const char *faults)
{
	st_config(t, 1, 32 * MiB, 2 * MiB);
	t->cfg.faults = faults;
	t->cfg.max_errors = 100;
	t->quiet = true;
	ck_assert_int_eq(st_open(t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t->ssd, ST_TIMEOUT_MS), 0);
}

static void write_fault(const char *rule, int expect)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint32_t ns;

	open_with(&t, rule);
	ns = st_ns(&t, "f", 1);
	for (unsigned i = 1; i <= 10; i++)
		ck_assert_int_eq(st_put(&t, ns, i, len_of(i)), i == 4 ? expect : 0);
	for (unsigned i = 1; i <= 10; i++)
		ck_assert_int_eq(st_get(&t, ns, i, len_of(i)), i == 4 ? -ENOENT : 0);
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.drive[0].write_errors, 1);
	ck_assert_uint_eq(s.drive[0].regions_abandoned, 1);
	ck_assert_uint_eq(s.drive[0].state, SSD_DRIVE_ONLINE);
	st_close(&t);
	/* After a restart: the same, the abandoned region's good blocks included. */
	t.cfg.faults = "";
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "f", 1);
	for (unsigned i = 1; i <= 10; i++)
		ck_assert_int_eq(st_get(&t, ns, i, len_of(i)), i == 4 ? -ENOENT : 0);
	st_close(&t);
}

START_TEST(test_write_eio)
{
	write_fault("write@4=eio", -EIO);
}
END_TEST

START_TEST(test_write_short)
{
	write_fault("write@4=short", -EIO);
}
END_TEST

START_TEST(test_write_torn)
{
	struct st t = { 0 };
	struct ssd_stats s;
	struct ssd_loc loc;
	uint8_t key[16];
	uint32_t ns;

	open_with(&t, "write@2=tear");
	ns = st_ns(&t, "f", 1);
	for (unsigned i = 1; i <= 4; i++)
		ck_assert_int_eq(st_put(&t, ns, i, len_of(i)), 0); /* the device lied */
	st_key(2, key);
	ck_assert_int_eq(ssd_lookup(t.ssd, ns, key, 0, &loc), 0);
	ck_assert_int_eq(st_get(&t, ns, 2, len_of(2)), -EBADMSG);
	ck_assert_int_eq(ssd_lookup(t.ssd, ns, key, 0, &loc), -ENOENT);
	for (unsigned i = 1; i <= 4; i++)
		if (i != 2)
			ck_assert_int_eq(st_get(&t, ns, i, len_of(i)), 0);
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.drive[0].crc_errors, 1);
	st_close(&t);
	/* After a restart it is found again (its header is whole) and again a miss. */
	t.cfg.faults = "";
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "f", 1);
	ck_assert_int_eq(st_get(&t, ns, 2, len_of(2)), -EBADMSG);
	st_close(&t);
}
END_TEST

static void read_fault(const char *rule, int expect)
{
	struct st t = { 0 };
	uint32_t ns;

	open_with(&t, rule);
	ns = st_ns(&t, "f", 1);
	for (unsigned i = 1; i <= 5; i++)
		ck_assert_int_eq(st_put(&t, ns, i, len_of(i)), 0);
	for (unsigned i = 1; i <= 5; i++)
		ck_assert_int_eq(st_get(&t, ns, i, len_of(i)), i == 3 ? expect : 0);
	/* The bad block left the index; the others are still read right. */
	for (unsigned i = 1; i <= 5; i++)
		ck_assert_int_eq(st_get(&t, ns, i, len_of(i)), i == 3 ? -ENOENT : 0);
	st_close(&t);
}

START_TEST(test_read_flip)
{
	read_fault("read@3=flip", -EBADMSG);
}
END_TEST

START_TEST(test_read_eio)
{
	read_fault("read@3=eio", -EIO);
}
END_TEST

START_TEST(test_read_short)
{
	read_fault("read@3=short", -EIO);
}
END_TEST

START_TEST(test_enodev_offline)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint8_t *buf = st_alloc(4096);
	uint32_t ns;
	int r;

	open_with(&t, "any@6=enodev");
	ns = st_ns(&t, "f", 1);
	for (unsigned i = 1; i <= 5; i++)
		ck_assert_int_eq(st_put(&t, ns, i, len_of(i)), 0);
	ck_assert_int_eq(st_put(&t, ns, 6, len_of(6)), -ENODEV); /* the 6th I/O */
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.drive[0].state, SSD_DRIVE_OFFLINE);
	/* Offline: everything misses, nothing new is taken. */
	for (unsigned i = 1; i <= 5; i++)
		ck_assert_int_eq(st_get(&t, ns, i, len_of(i)), -ENOENT);
	r = st_write(&t, ns, 7, 77, buf, 4096, 1, 1, NULL);
	ck_assert_int_eq(r, -ENODEV);
	st_close(&t);
	/* The device is back (no fault rule): the blocks are there. */
	t.cfg.faults = "";
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "f", 1);
	for (unsigned i = 1; i <= 5; i++)
		ck_assert_int_eq(st_get(&t, ns, i, len_of(i)), 0);
	st_close(&t);
	free(buf);
}
END_TEST

START_TEST(test_too_many_errors)
{
	struct st t = { 0 };
	struct ssd_stats s;
	uint32_t ns;
	unsigned lines;

	st_config(&t, 1, 32 * MiB, 2 * MiB);
	t.cfg.faults = "write%1=eio";
	t.cfg.max_errors = 4;
	t.quiet = true;
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "f", 1);
	for (unsigned i = 1; i <= 3; i++)
		ck_assert_int_eq(st_put(&t, ns, i, 4096), -EIO);
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.drive[0].state, SSD_DRIVE_ONLINE);
	ck_assert_int_eq(st_put(&t, ns, 4, 4096), -EIO);
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.drive[0].state, SSD_DRIVE_OFFLINE); /* the 4th error */
	st_close(&t);

	/* Errors that do not end the drive are logged, but rate-limited. */
	st_config(&t, 1, 32 * MiB, 2 * MiB);
	t.cfg.faults = "write%1=eio";
	t.cfg.max_errors = 100000;
	t.quiet = true;
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "f", 1);
	lines = __atomic_load_n(&t.log_lines, __ATOMIC_RELAXED);
	for (unsigned i = 1; i <= 200; i++)
		ck_assert_int_eq(st_put(&t, ns, i, 4096), -EIO);
	ck_assert_uint_le(__atomic_load_n(&t.log_lines, __ATOMIC_RELAXED) - lines, 30);
	st_close(&t);
}
END_TEST

START_TEST(test_startup_errors)
{
	struct st t = { 0 };
	char err[512], path[600];
	struct ssd *ssd;
	const char *p[1] = { path };
	struct statfs fs;

	st_config(&t, 1, 32 * MiB, 2 * MiB);
	t.cfg.paths = p;
	/* A directory that does not exist. */
	snprintf(path, sizeof(path), "%s/no/such/dir/drive", st_dir());
	ck_assert_int_eq(ssd_open(&t.cfg, &ssd, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "cannot open") && strstr(err, path), "%s", err);
	/* More than the filesystem can hold. */
	snprintf(path, sizeof(path), "%s/huge", st_dir());
	t.cfg.size = 1ull << 50;
	ck_assert_int_lt(ssd_open(&t.cfg, &ssd, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, "cannot preallocate"), "%s", err);
	t.cfg.size = 32 * MiB;
	/* Too small for two regions. */
	t.cfg.size = 3 * MiB;
	ck_assert_int_eq(ssd_open(&t.cfg, &ssd, err, sizeof(err)), -ENOSPC);
	ck_assert_msg(strstr(err, "too small"), "%s", err);
	t.cfg.size = 32 * MiB;
	/* A bad fault rule. */
	t.cfg.faults = "write@x=boom";
	ck_assert_int_eq(ssd_open(&t.cfg, &ssd, err, sizeof(err)), -EINVAL);
	t.cfg.faults = "";
	/* The same file twice. */
	{
		const char *two[2] = { path, path };

		t.cfg.paths = two;
		t.cfg.nr_paths = 2;
		ck_assert_int_eq(ssd_open(&t.cfg, &ssd, err, sizeof(err)), -EINVAL);
		t.cfg.nr_paths = 1;
		t.cfg.paths = p;
	}
	/*
	 * tmpfs before Linux 6.6 has no O_DIRECT: then the error says so
	 * (later kernels accept it, and so does kvstash).
	 */
	if (statfs("/dev/shm", &fs) == 0 && fs.f_type == 0x01021994) {
		int r;

		snprintf(path, sizeof(path), "/dev/shm/kvstash-ssd-test.%d", (int)getpid());
		r = ssd_open(&t.cfg, &ssd, err, sizeof(err));
		if (r == 0)
			ssd_close(ssd);
		else
			ck_assert_msg(r == -EINVAL && strstr(err, "O_DIRECT"), "%d: %s", r, err);
		unlink(path);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssd-faults");
	TCase *tc = tcase_create("faults");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_write_eio);
	tcase_add_test(tc, test_write_short);
	tcase_add_test(tc, test_write_torn);
	tcase_add_test(tc, test_read_flip);
	tcase_add_test(tc, test_read_eio);
	tcase_add_test(tc, test_read_short);
	tcase_add_test(tc, test_enodev_offline);
	tcase_add_test(tc, test_too_many_errors);
	tcase_add_test(tc, test_startup_errors);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
