/* SPDX-License-Identifier: MIT */
/*
 * [ssd] of kvstash.conf (sidecar/base/conf.c's table, sidecar/ssd/ssdconf.c):
 * without a path there is no SSD tier; paths are split on commas and must
 * be absolute, at most SSD_MAX_DRIVES; every key reaches struct
 * ssd_config; a write policy other than spill or filter and a region
 * size that is not a multiple of 4 KiB are refused by config_validate();
 * built without liburing, ssd_open() says the tier is not compiled in.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/conf.h"
#include "ssd/ssd.h"
#include "unit.h"

static char err[512];

static struct kvs_config fresh(void)
{
	struct kvs_config c;

	ck_assert_int_eq(config_init(&c), 0);
	return c;
}

static void set(struct kvs_config *c, const char *a)
{
	ck_assert_msg(config_set_assignment(c, a, err, sizeof(err)) == 0, "%s: %s", a, err);
}

START_TEST(test_no_path_no_tier)
{
	struct kvs_config c = fresh();
	struct ssd_config sc;
	struct ssd_conf_paths ps;

	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(ssd_config_from_kvs(&c, &sc, &ps, err, sizeof(err)), 0);
	ck_assert_uint_eq(sc.nr_paths, 0);
	ssd_conf_paths_free(&ps);
	config_free(&c);
}
END_TEST

START_TEST(test_keys_reach_the_module)
{
	struct kvs_config c = fresh();
	struct ssd_config sc;
	struct ssd_conf_paths ps;

	set(&c, "ssd.path=/srv/a, /srv/b ,/dev/nvme0n1");
	set(&c, "ssd.size=2G");
	set(&c, "ssd.region_size=64M");
	set(&c, "ssd.queue_depth=16");
	set(&c, "ssd.write_queue=99");
	set(&c, "ssd.write_policy=filter");
	set(&c, "ssd.write_rate=100M");
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(ssd_config_from_kvs(&c, &sc, &ps, err, sizeof(err)), 0);
	ck_assert_uint_eq(sc.nr_paths, 3);
	ck_assert_str_eq(sc.paths[0], "/srv/a");
	ck_assert_str_eq(sc.paths[1], "/srv/b");
	ck_assert_str_eq(sc.paths[2], "/dev/nvme0n1");
	ck_assert_uint_eq(sc.size, 2ull << 30);
	ck_assert_uint_eq(sc.region_size, 64ull << 20);
	ck_assert_uint_eq(sc.queue_depth, 16);
	ck_assert_uint_eq(sc.write_queue, 99);
	ck_assert_int_eq(sc.policy, SSD_POLICY_FILTER);
	ck_assert_uint_eq(sc.write_rate, 100ull << 20);
	ssd_conf_paths_free(&ps);
	config_free(&c);
}
END_TEST

START_TEST(test_refused)
{
	struct kvs_config c = fresh();
	struct ssd_config sc;
	struct ssd_conf_paths ps;
	char many[SSD_MAX_DRIVES * 8 + 64] = "ssd.path=";

	/* Refused as it is read, the key named: nothing later sees the bad value. */
	ck_assert_int_eq(config_set_assignment(&c, "ssd.write_policy=sometimes", err, sizeof(err)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "write_policy"));
	ck_assert_int_eq(c.ssd_write_policy, SSD_WRITE_SPILL);
	set(&c, "ssd.region_size=100000");
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "region_size"));
	set(&c, "ssd.region_size=256M");
	ck_assert_int_ne(config_set_assignment(&c, "ssd.queue_depth=0", err, sizeof(err)), 0);
	ck_assert_int_ne(config_set_assignment(&c, "ssd.queue_depth=5000", err, sizeof(err)), 0);
	set(&c, "ssd.path=relative/file");
	ck_assert_int_eq(ssd_config_from_kvs(&c, &sc, &ps, err, sizeof(err)), -EINVAL);
	for (unsigned i = 0; i <= SSD_MAX_DRIVES; i++)
		strcat(many, i ? ",/d" : "/d");
	set(&c, many);
	ck_assert_int_eq(ssd_config_from_kvs(&c, &sc, &ps, err, sizeof(err)), -E2BIG);
	config_free(&c);
}
END_TEST

START_TEST(test_not_compiled_in)
{
	/* Without liburing the tier says so at start-up instead of vanishing. */
	struct ssd_config sc = { 0 };
	const char *p[1] = { "/nonexistent/ssd" };
	struct ssd *ssd = NULL;
	int r;

	sc.paths = p;
	sc.nr_paths = 1;
	sc.size = 1u << 30;
	err[0] = '\0';
	r = ssd_open(&sc, &ssd, err, sizeof(err));
	if (HAVE_LIBURING) {
		ck_assert_int_eq(r, -ENOENT); /* compiled in: the path is the problem */
	} else {
		ck_assert_int_eq(r, -EOPNOTSUPP);
		ck_assert_ptr_nonnull(strstr(err, "not compiled in"));
	}
	ck_assert_ptr_null(ssd);
}
END_TEST

UNIT_TESTS(test_no_path_no_tier, test_keys_reach_the_module, test_refused, test_not_compiled_in)

const struct unit_suite unit_suite = {
	.name = "ssd-config",
	.add_tests = add_tests,
};
