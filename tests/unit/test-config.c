/* SPDX-License-Identifier: MIT */
/*
 * kvstashd configuration (sidecar/base/conf.c): the defaults, the size and
 * duration parsers, every key type through config_set(), files through
 * config_load() (errors name FILE:LINE and the key), the cross-key checks
 * of config_validate(), and config_print() output loading back to the same
 * configuration.
 *
 * Each rejected value is also checked to leave the field as it was: a
 * half-applied override would be worse than a refused one.
 */
#include <check.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "base/conf.h"

static char err[512];

static struct kvs_config fresh(void)
{
	struct kvs_config c;

	ck_assert_int_eq(config_init(&c), 0);
	return c;
}

static int set(struct kvs_config *c, const char *section, const char *key, const char *value)
{
	err[0] = '\0';
	return config_set(c, section, key, value, err, sizeof(err));
}

/* @value is refused for section.key, the field unchanged, the text naming the key. */
#define REFUSE(c, section, key, value, field)                                             \
	do {                                                                               \
		__typeof__((c)->field) before_ = (c)->field;                               \
		ck_assert_int_eq(set((c), section, key, value), -EINVAL);                 \
		ck_assert_msg(memcmp(&before_, &(c)->field, sizeof(before_)) == 0,         \
			      "%s.%s = '%s' changed the field", section, key, value);      \
		ck_assert_msg(strstr(err, "[" section "] " key ":") != NULL,               \
			      "error '%s' does not name [%s] %s", err, section, key);      \
	} while (0)

/* A temporary file holding @text; the path goes into @path (PATH_MAX). */
static void write_file(char *path, size_t size, const char *text)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	int fd;
	FILE *f;

	snprintf(path, size, "%s/test-config-XXXXXX", dir);
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
}

static int load_text(struct kvs_config *c, const char *text, char *path, size_t size)
{
	int r;

	write_file(path, size, text);
	err[0] = '\0';
	r = config_load(c, path, true, err, sizeof(err));
	return r;
}

/* ---- defaults --------------------------------------------------- */

START_TEST(test_defaults)
{
	struct kvs_config c = fresh();

	ck_assert_str_eq(c.socket_path, "/run/kvstash/kvstash.sock");
	ck_assert_str_eq(c.socket_group, "");
	ck_assert_uint_eq(c.socket_mode, 0660);
	ck_assert_uint_eq(c.dir_mode, 0750);
	ck_assert_uint_eq(c.allow_uids.n, 0);
	ck_assert_uint_eq(c.allow_gids.n, 0);
	ck_assert_uint_eq(c.max_sessions, 256);
	ck_assert_uint_eq(c.max_sessions_per_uid, 128);
	ck_assert_uint_eq(c.sq_entries, 256);
	ck_assert_uint_eq(c.sq_entries_max, 4096);
	ck_assert_uint_eq(c.arg_bytes, 4u << 20);
	ck_assert_uint_eq(c.arg_bytes_max, 64u << 20);
	ck_assert_uint_eq(c.max_keys, 65536);
	ck_assert_uint_eq(c.max_inflight, 1024);
	ck_assert_uint_eq(c.max_layers, 256);
	ck_assert_uint_eq(c.max_namespaces, 1024);
	ck_assert_uint_eq(c.pool_size, 1ull << 30);
	ck_assert(!c.hugepages);
	ck_assert_str_eq(c.numa, "auto");
	ck_assert_uint_eq(c.prefault_threads, 0);
	ck_assert_uint_eq(c.extent_size, 0);
	ck_assert_uint_eq(c.partial_timeout_ms, 60000);
	ck_assert_uint_eq(c.lease_ttl_ms, 600000);
	ck_assert_uint_eq(c.max_leases, 4096);
	ck_assert_uint_eq(c.spin_us, 50);
	ck_assert_uint_eq(c.copy_threads, 0);
	ck_assert_uint_eq(c.inline_copy_bytes, 256u << 10);
	ck_assert_int_eq(c.log_level, LOG_INFO);
	ck_assert_str_eq(c.log_target, "stderr");
	ck_assert_str_eq(c.log_file, "");
	/* The defaults must pass their own cross checks. */
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), 0);
	config_free(&c);
	config_free(&c); /* idempotent: the daemon frees on every exit path */
}
END_TEST

/* Every key the table lists can be set by its name (what --help and the man page promise). */
START_TEST(test_key_table)
{
	unsigned n = 0;

	for (const struct config_key_info *k; (k = config_key_at(n)); n++) {
		ck_assert_ptr_nonnull(k->section);
		ck_assert_ptr_nonnull(k->key);
		ck_assert_msg(k->help && k->help[0], "key %s.%s has no help", k->section, k->key);
		for (unsigned j = 0; j < n; j++) {
			const struct config_key_info *o = config_key_at(j);

			ck_assert_msg(strcmp(o->section, k->section) || strcmp(o->key, k->key),
				      "key %s.%s listed twice", k->section, k->key);
		}
	}
	ck_assert_uint_ge(n, 30);
	ck_assert_ptr_null(config_key_at(n));
	ck_assert_ptr_null(config_key_at(~0u));
}
END_TEST

/* ---- sizes and durations ---------------------------------------- */

static uint64_t size_ok(const char *s)
{
	uint64_t v = 0xdead;

	ck_assert_msg(parse_size(s, &v) == 0, "parse_size('%s') refused", s);
	return v;
}

static int size_err(const char *s)
{
	uint64_t v = 0xdead;
	int r = parse_size(s, &v);

	ck_assert_msg(v == 0xdead, "parse_size('%s') wrote a value on error", s ? s : "");
	return r;
}

START_TEST(test_parse_size)
{
	ck_assert_uint_eq(size_ok("0"), 0);
	ck_assert_uint_eq(size_ok("123"), 123);
	ck_assert_uint_eq(size_ok("1K"), 1024);
	ck_assert_uint_eq(size_ok("1k"), 1024);
	ck_assert_uint_eq(size_ok("3M"), 3ull << 20);
	ck_assert_uint_eq(size_ok("3m"), 3ull << 20);
	ck_assert_uint_eq(size_ok("5G"), 5ull << 30);
	ck_assert_uint_eq(size_ok("7T"), 7ull << 40);
	ck_assert_uint_eq(size_ok("2KiB"), 2048);
	ck_assert_uint_eq(size_ok("2MiB"), 2ull << 20);
	ck_assert_uint_eq(size_ok("2GiB"), 2ull << 30);
	ck_assert_uint_eq(size_ok("2KB"), 2048);
	ck_assert_uint_eq(size_ok("2Ki"), 2048);
	ck_assert_uint_eq(size_ok("0x10"), 16);
	ck_assert_uint_eq(size_ok("0x10K"), 16 << 10);
	ck_assert_uint_eq(size_ok("0XfF"), 255);
	ck_assert_uint_eq(size_ok("18446744073709551615"), UINT64_MAX);
	/* Leading zeros are decimal ("010G" is not 8 GiB, "08G" not garbage). */
	ck_assert_uint_eq(size_ok("010"), 10);
	ck_assert_uint_eq(size_ok("08G"), 8ull << 30);
	ck_assert_uint_eq(size_ok("0"), 0);
	ck_assert_uint_eq(size_ok("00"), 0);
	/* The largest value each suffix can carry, and one more. */
	ck_assert_uint_eq(size_ok("16777215T"), 16777215ull << 40);
	ck_assert_int_eq(size_err("16777216T"), -ERANGE);
	ck_assert_uint_eq(size_ok("17179869183G"), 17179869183ull << 30);
	ck_assert_int_eq(size_err("17179869184G"), -ERANGE);
	ck_assert_int_eq(size_err("18014398509481984K"), -ERANGE);
	/* Too big before any suffix: still a range error, not garbage. */
	ck_assert_int_eq(size_err("18446744073709551616"), -ERANGE);
	ck_assert_int_eq(size_err("99999999999999999999999G"), -ERANGE);
	ck_assert_int_eq(size_err("0x10000000000000000"), -ERANGE);
	/* ... unless garbage follows: that is what the user must fix first. */
	ck_assert_int_eq(size_err("99999999999999999999999X"), -EINVAL);

	static const char *const garbage[] = {
		"", " 1", "1 ", "1 K", "K", "abc", "1X", "1KX", "1KiBB", "1KBi", "1iB", "1B",
		"1.5G", "0x", "-1", "-0", "1K-", "4G4", "1e3", "\t1",
	};
	for (unsigned i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++)
		ck_assert_msg(size_err(garbage[i]) == -EINVAL, "parse_size('%s') not -EINVAL",
			      garbage[i]);
	ck_assert_int_eq(size_err(NULL), -EINVAL);
}
END_TEST

static uint32_t ms_ok(const char *s)
{
	uint32_t v = 0xdead;

	ck_assert_msg(parse_duration_ms(s, &v) == 0, "parse_duration_ms('%s') refused", s);
	return v;
}

static int ms_err(const char *s)
{
	uint32_t v = 0xdead;
	int r = parse_duration_ms(s, &v);

	ck_assert_msg(v == 0xdead, "parse_duration_ms('%s') wrote a value on error", s ? s : "");
	return r;
}

START_TEST(test_parse_duration)
{
	ck_assert_uint_eq(ms_ok("250ms"), 250);
	ck_assert_uint_eq(ms_ok("0ms"), 0);
	ck_assert_uint_eq(ms_ok("600s"), 600000);
	ck_assert_uint_eq(ms_ok("10m"), 600000);
	ck_assert_uint_eq(ms_ok("10min"), 600000);
	ck_assert_uint_eq(ms_ok("2h"), 7200000);
	/* A bare number is seconds, as in the man page's "ttl = 600". */
	ck_assert_uint_eq(ms_ok("5"), 5000);
	ck_assert_uint_eq(ms_ok("0"), 0);
	/* Leading zeros are decimal: a duration is never octal. */
	ck_assert_uint_eq(ms_ok("010s"), 10000);
	/* The largest of each unit that fits 32 bits of ms, and one more. */
	ck_assert_uint_eq(ms_ok("4294967295ms"), UINT32_MAX);
	ck_assert_int_eq(ms_err("4294967296ms"), -ERANGE);
	ck_assert_uint_eq(ms_ok("4294967s"), 4294967000u);
	ck_assert_int_eq(ms_err("4294968s"), -ERANGE);
	ck_assert_int_eq(ms_err("4294968"), -ERANGE);
	ck_assert_uint_eq(ms_ok("71582m"), 71582u * 60000u);
	ck_assert_int_eq(ms_err("71583m"), -ERANGE);
	ck_assert_uint_eq(ms_ok("1193h"), 1193u * 3600000u);
	ck_assert_int_eq(ms_err("1194h"), -ERANGE);
	/* Too big for 64 bits, before any unit: a range error too. */
	ck_assert_int_eq(ms_err("99999999999999999999999ms"), -ERANGE);
	ck_assert_int_eq(ms_err("99999999999999999999999"), -ERANGE);
	ck_assert_int_eq(ms_err("99999999999999999999999d"), -EINVAL);

	static const char *const garbage[] = {
		"", "s", "ms", "1d", "1 s", " 1s", "1s ", "-1", "-1s", "1.5s", "1S", "1MS",
		"1sec", "1hh", "0x10s", "1ms1",
	};
	for (unsigned i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++)
		ck_assert_msg(ms_err(garbage[i]) == -EINVAL, "parse_duration_ms('%s') not -EINVAL",
			      garbage[i]);
	ck_assert_int_eq(ms_err(NULL), -EINVAL);
}
END_TEST

/* ---- every key type through config_set -------------------------- */

START_TEST(test_set_u32)
{
	struct kvs_config c = fresh();

	ck_assert_int_eq(set(&c, "server", "max_sessions", "1"), 0);
	ck_assert_uint_eq(c.max_sessions, 1);
	ck_assert_int_eq(set(&c, "server", "max_sessions", "65536"), 0);
	ck_assert_uint_eq(c.max_sessions, 65536);
	REFUSE(&c, "server", "max_sessions", "0", max_sessions);
	ck_assert_ptr_nonnull(strstr(err, "outside [1, 65536]"));
	REFUSE(&c, "server", "max_sessions", "65537", max_sessions);
	REFUSE(&c, "server", "max_sessions", "4294967296", max_sessions);
	REFUSE(&c, "server", "max_sessions", "4294967297", max_sessions); /* 1 after a u32 wrap */
	REFUSE(&c, "server", "max_sessions", "", max_sessions);
	REFUSE(&c, "server", "max_sessions", "12x", max_sessions);
	ck_assert_ptr_nonnull(strstr(err, "not a number"));
	REFUSE(&c, "server", "max_sessions", "-1", max_sessions);
	REFUSE(&c, "server", "max_sessions", "1K", max_sessions); /* a count, not a size */
	/* Decimal even with a leading zero; hex when it says so. */
	ck_assert_int_eq(set(&c, "server", "max_sessions", "010"), 0);
	ck_assert_uint_eq(c.max_sessions, 10);
	ck_assert_int_eq(set(&c, "server", "max_sessions", "09"), 0);
	ck_assert_uint_eq(c.max_sessions, 9);
	ck_assert_int_eq(set(&c, "server", "max_sessions", "0x10"), 0);
	ck_assert_uint_eq(c.max_sessions, 16);
	/* A lower bound of 0 is a bound too: prefault_threads is [0, 1024]. */
	ck_assert_int_eq(set(&c, "pool", "prefault_threads", "0"), 0);
	ck_assert_uint_eq(c.prefault_threads, 0);
	ck_assert_int_eq(set(&c, "pool", "prefault_threads", "1024"), 0);
	REFUSE(&c, "pool", "prefault_threads", "1025", prefault_threads);
	/* Every session key's bounds, at the edges. */
	ck_assert_int_eq(set(&c, "session", "sq_entries", "2"), 0);
	REFUSE(&c, "session", "sq_entries", "1", sq_entries);
	ck_assert_int_eq(set(&c, "session", "sq_entries_max", "65536"), 0);
	REFUSE(&c, "session", "sq_entries_max", "131072", sq_entries_max);
	ck_assert_int_eq(set(&c, "session", "max_layers", "512"), 0);
	REFUSE(&c, "session", "max_layers", "513", max_layers);
	ck_assert_int_eq(set(&c, "session", "max_keys", "1048576"), 0);
	REFUSE(&c, "session", "max_keys", "1048577", max_keys);
	ck_assert_int_eq(set(&c, "worker", "spin_us", "1000000"), 0);
	REFUSE(&c, "worker", "spin_us", "1000001", spin_us);
	config_free(&c);
}
END_TEST

START_TEST(test_set_size)
{
	struct kvs_config c = fresh();

	ck_assert_int_eq(set(&c, "pool", "size", "8M"), 0);
	ck_assert_uint_eq(c.pool_size, 8ull << 20);
	ck_assert_int_eq(set(&c, "pool", "size", "1M"), 0);
	REFUSE(&c, "pool", "size", "1048575", pool_size);
	ck_assert_int_eq(set(&c, "pool", "size", "1024T"), 0);
	ck_assert_uint_eq(c.pool_size, 1ull << 50);
	REFUSE(&c, "pool", "size", "1025T", pool_size);
	REFUSE(&c, "pool", "size", "lots", pool_size);
	ck_assert_ptr_nonnull(strstr(err, "not a size"));
	REFUSE(&c, "pool", "size", "99999999T", pool_size); /* past 64 bits */
	ck_assert_ptr_nonnull(strstr(err, "too large"));
	ck_assert_int_eq(set(&c, "session", "arg_bytes", "4096"), 0);
	ck_assert_uint_eq(c.arg_bytes, 4096);
	REFUSE(&c, "session", "arg_bytes", "4095", arg_bytes);
	ck_assert_int_eq(set(&c, "session", "arg_bytes", "1G"), 0);
	REFUSE(&c, "session", "arg_bytes", "1073741825", arg_bytes);
	ck_assert_int_eq(set(&c, "pool", "extent_size", "0"), 0);
	ck_assert_int_eq(set(&c, "pool", "extent_size", "16G"), 0);
	REFUSE(&c, "pool", "extent_size", "17179869185", extent_size);
	ck_assert_int_eq(set(&c, "worker", "inline_copy_bytes", "0"), 0);
	ck_assert_uint_eq(c.inline_copy_bytes, 0);
	config_free(&c);
}
END_TEST

START_TEST(test_set_duration)
{
	struct kvs_config c = fresh();

	ck_assert_int_eq(set(&c, "lease", "ttl", "30s"), 0);
	ck_assert_uint_eq(c.lease_ttl_ms, 30000);
	ck_assert_int_eq(set(&c, "lease", "ttl", "10ms"), 0);
	ck_assert_uint_eq(c.lease_ttl_ms, 10);
	REFUSE(&c, "lease", "ttl", "9ms", lease_ttl_ms);
	ck_assert_ptr_nonnull(strstr(err, "outside"));
	REFUSE(&c, "lease", "ttl", "0", lease_ttl_ms);
	ck_assert_int_eq(set(&c, "lease", "ttl", "24h"), 0);
	ck_assert_uint_eq(c.lease_ttl_ms, 86400000);
	REFUSE(&c, "lease", "ttl", "86400001ms", lease_ttl_ms);
	REFUSE(&c, "lease", "ttl", "1d", lease_ttl_ms);
	ck_assert_ptr_nonnull(strstr(err, "not a duration"));
	REFUSE(&c, "lease", "ttl", "9999999999h", lease_ttl_ms);
	ck_assert_int_eq(set(&c, "pool", "partial_timeout", "2m"), 0);
	ck_assert_uint_eq(c.partial_timeout_ms, 120000);
	config_free(&c);
}
END_TEST

START_TEST(test_set_mode)
{
	struct kvs_config c = fresh();

	/* Modes are octal with or without the leading zero, as chmod(1) reads them. */
	ck_assert_int_eq(set(&c, "server", "socket_mode", "0600"), 0);
	ck_assert_uint_eq(c.socket_mode, 0600);
	ck_assert_int_eq(set(&c, "server", "socket_mode", "640"), 0);
	ck_assert_uint_eq(c.socket_mode, 0640);
	ck_assert_int_eq(set(&c, "server", "socket_mode", "0"), 0);
	ck_assert_uint_eq(c.socket_mode, 0);
	ck_assert_int_eq(set(&c, "server", "socket_mode", "0777"), 0);
	ck_assert_uint_eq(c.socket_mode, 0777);
	/* No setuid/sticky bits on a socket; they are fine on its directory. */
	REFUSE(&c, "server", "socket_mode", "01777", socket_mode);
	REFUSE(&c, "server", "socket_mode", "1000", socket_mode);
	REFUSE(&c, "server", "socket_mode", "0800", socket_mode);
	REFUSE(&c, "server", "socket_mode", "8", socket_mode);
	REFUSE(&c, "server", "socket_mode", "rw-rw----", socket_mode);
	REFUSE(&c, "server", "socket_mode", "", socket_mode);
	REFUSE(&c, "server", "socket_mode", "-1", socket_mode);
	REFUSE(&c, "server", "socket_mode", "0x1ff", socket_mode);
	ck_assert_int_eq(set(&c, "server", "dir_mode", "01750"), 0);
	ck_assert_uint_eq(c.dir_mode, 01750);
	ck_assert_int_eq(set(&c, "server", "dir_mode", "7777"), 0);
	ck_assert_uint_eq(c.dir_mode, 07777);
	REFUSE(&c, "server", "dir_mode", "10000", dir_mode);
	config_free(&c);
}
END_TEST

START_TEST(test_set_bool)
{
	static const char *const yes[] = { "yes", "YES", "true", "True", "on", "ON", "1" };
	static const char *const no[] = { "no", "No", "false", "FALSE", "off", "Off", "0" };
	struct kvs_config c = fresh();

	for (unsigned i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		c.hugepages = false;
		ck_assert_int_eq(set(&c, "pool", "hugepages", yes[i]), 0);
		ck_assert_msg(c.hugepages, "'%s' is not true", yes[i]);
	}
	for (unsigned i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		c.hugepages = true;
		ck_assert_int_eq(set(&c, "pool", "hugepages", no[i]), 0);
		ck_assert_msg(!c.hugepages, "'%s' is not false", no[i]);
	}
	c.hugepages = true;
	REFUSE(&c, "pool", "hugepages", "", hugepages);
	REFUSE(&c, "pool", "hugepages", "2", hugepages);
	REFUSE(&c, "pool", "hugepages", "maybe", hugepages);
	REFUSE(&c, "pool", "hugepages", "y", hugepages);
	REFUSE(&c, "pool", "hugepages", "yess", hugepages);
	ck_assert_ptr_nonnull(strstr(err, "not yes or no"));
	config_free(&c);
}
END_TEST

START_TEST(test_set_ids)
{
	struct kvs_config c = fresh();
	struct passwd *pw = getpwuid(0);
	struct group *gr = getgrgid(0);
	char buf[1024], name[256];
	size_t o = 0;

	ck_assert_ptr_nonnull(pw);
	ck_assert_ptr_nonnull(gr);
	snprintf(name, sizeof(name), "%s", pw->pw_name);
	/* Names and numbers mixed, commas and blanks as separators. */
	snprintf(buf, sizeof(buf), "%s, 1000 ,42\t7", name);
	ck_assert_int_eq(set(&c, "server", "allow_uids", buf), 0);
	ck_assert_uint_eq(c.allow_uids.n, 4);
	ck_assert_uint_eq(c.allow_uids.ids[0], 0);
	ck_assert_uint_eq(c.allow_uids.ids[1], 1000);
	ck_assert_uint_eq(c.allow_uids.ids[2], 42);
	ck_assert_uint_eq(c.allow_uids.ids[3], 7);
	ck_assert_int_eq(set(&c, "server", "allow_uids", "4294967294"), 0);
	ck_assert_uint_eq(c.allow_uids.n, 1);
	ck_assert_uint_eq(c.allow_uids.ids[0], 4294967294u);
	/* (uid_t)-1 means "no user" to the kernel: never an allowed id. */
	REFUSE(&c, "server", "allow_uids", "4294967295", allow_uids);
	REFUSE(&c, "server", "allow_uids", "99999999999", allow_uids);
	REFUSE(&c, "server", "allow_uids", "1,kvstash-no-such-user-x", allow_uids);
	ck_assert_ptr_nonnull(strstr(err, "kvstash-no-such-user-x"));
	ck_assert_uint_eq(c.allow_uids.n, 1);

	snprintf(buf, sizeof(buf), "%s,5", gr->gr_name);
	ck_assert_int_eq(set(&c, "server", "allow_gids", buf), 0);
	ck_assert_uint_eq(c.allow_gids.n, 2);
	ck_assert_uint_eq(c.allow_gids.ids[0], 0);
	ck_assert_uint_eq(c.allow_gids.ids[1], 5);
	REFUSE(&c, "server", "allow_gids", "kvstash-no-such-group-x", allow_gids);
	ck_assert_ptr_nonnull(strstr(err, "group"));

	/* Exactly CONFIG_MAX_IDS entries fit; one more is refused. */
	for (unsigned i = 0; i < CONFIG_MAX_IDS; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%u", i ? "," : "", 100 + i);
	ck_assert_int_eq(set(&c, "server", "allow_gids", buf), 0);
	ck_assert_uint_eq(c.allow_gids.n, CONFIG_MAX_IDS);
	ck_assert_uint_eq(c.allow_gids.ids[CONFIG_MAX_IDS - 1], 100 + CONFIG_MAX_IDS - 1);
	snprintf(buf + o, sizeof(buf) - o, ",999");
	c.allow_gids.n = 1;
	REFUSE(&c, "server", "allow_gids", buf, allow_gids);
	ck_assert_uint_eq(c.allow_gids.n, 1);

	/* Empty: nobody by id (the default). */
	ck_assert_int_eq(set(&c, "server", "allow_uids", ""), 0);
	ck_assert_uint_eq(c.allow_uids.n, 0);
	config_free(&c);
}
END_TEST

START_TEST(test_set_level_target_numa)
{
	static const struct {
		const char *s;
		int level;
	} levels[] = {
		{ "error", LOG_ERR },	  { "err", LOG_ERR },	    { "warning", LOG_WARNING },
		{ "warn", LOG_WARNING },  { "notice", LOG_NOTICE }, { "info", LOG_INFO },
		{ "debug", LOG_DEBUG },	  { "DEBUG", LOG_DEBUG },   { "Info", LOG_INFO },
	};
	struct kvs_config c = fresh();

	for (unsigned i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		c.log_level = -1;
		ck_assert_int_eq(set(&c, "log", "level", levels[i].s), 0);
		ck_assert_int_eq(c.log_level, levels[i].level);
	}
	REFUSE(&c, "log", "level", "verbose", log_level);
	REFUSE(&c, "log", "level", "", log_level);
	REFUSE(&c, "log", "level", "7", log_level);

	ck_assert_int_eq(set(&c, "log", "target", "syslog"), 0);
	ck_assert_str_eq(c.log_target, "syslog");
	ck_assert_int_eq(set(&c, "log", "target", "file"), 0);
	ck_assert_str_eq(c.log_target, "file");
	ck_assert_int_eq(set(&c, "log", "target", "stderr"), 0);
	ck_assert_str_eq(c.log_target, "stderr");
	REFUSE(&c, "log", "target", "journal", log_target);
	REFUSE(&c, "log", "target", "STDERR", log_target);
	REFUSE(&c, "log", "target", "", log_target);
	ck_assert_str_eq(c.log_target, "stderr");

	static const char *const numa_ok[] = { "auto", "off", "0", "1", "0,1", "1,3,17" };
	for (unsigned i = 0; i < sizeof(numa_ok) / sizeof(numa_ok[0]); i++) {
		ck_assert_int_eq(set(&c, "pool", "numa", numa_ok[i]), 0);
		ck_assert_str_eq(c.numa, numa_ok[i]);
	}
	/*
	 * Empty elements would be dropped silently by the daemon's node
	 * parser (everything after ",," ignored): refuse them here.
	 */
	static const char *const numa_bad[] = {
		"", "on", "Auto", "a", "-1", "0;1", "0 1", "auto,0", ",", "0,", ",0", "0,,1",
	};
	for (unsigned i = 0; i < sizeof(numa_bad) / sizeof(numa_bad[0]); i++) {
		ck_assert_int_eq(set(&c, "pool", "numa", "off"), 0);
		REFUSE(&c, "pool", "numa", numa_bad[i], numa);
		ck_assert_str_eq(c.numa, "off");
	}
	config_free(&c);
}
END_TEST

START_TEST(test_set_strings)
{
	struct kvs_config c = fresh();

	/* Replacing a string frees the old one (ASan's leak check sees it). */
	ck_assert_int_eq(set(&c, "server", "socket", "/tmp/a.sock"), 0);
	ck_assert_int_eq(set(&c, "server", "socket", "/tmp/b.sock"), 0);
	ck_assert_str_eq(c.socket_path, "/tmp/b.sock");
	ck_assert_int_eq(set(&c, "server", "socket_group", "kvstash"), 0);
	ck_assert_str_eq(c.socket_group, "kvstash");
	ck_assert_int_eq(set(&c, "log", "file", "/var/log/kvstashd.log"), 0);
	ck_assert_str_eq(c.log_file, "/var/log/kvstashd.log");
	config_free(&c);
	ck_assert_ptr_null(c.socket_path);
	ck_assert_ptr_null(c.log_file);
}
END_TEST

START_TEST(test_set_unknown)
{
	struct kvs_config c = fresh();

	ck_assert_int_eq(set(&c, "server", "sockett", "/x"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "[server] sockett"));
	ck_assert_ptr_nonnull(strstr(err, "unknown key"));
	ck_assert_int_eq(set(&c, "servers", "socket", "/x"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "unknown section"));
	/* A key of another section is unknown here. */
	ck_assert_int_eq(set(&c, "pool", "socket", "/x"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "unknown key"));
	ck_assert_str_eq(c.socket_path, "/run/kvstash/kvstash.sock");
	config_free(&c);
}
END_TEST

static int assign(struct kvs_config *c, const char *a)
{
	err[0] = '\0';
	return config_set_assignment(c, a, err, sizeof(err));
}

START_TEST(test_set_assignment)
{
	struct kvs_config c = fresh();
	char longsec[80];

	ck_assert_int_eq(assign(&c, "pool.size=2G"), 0);
	ck_assert_uint_eq(c.pool_size, 2ull << 30);
	/* Only the first '=' splits: the value may hold more. */
	ck_assert_int_eq(assign(&c, "server.socket=/run/a=b.sock"), 0);
	ck_assert_str_eq(c.socket_path, "/run/a=b.sock");
	ck_assert_int_eq(assign(&c, "log.file="), 0);
	ck_assert_str_eq(c.log_file, "");

	static const char *const bad[] = {
		"pool.size", "poolsize=1G", ".size=1G", "pool.=1G", "=1G", "pool=a.b", "",
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(assign(&c, bad[i]) == -EINVAL, "'%s' accepted", bad[i]);
		ck_assert_ptr_nonnull(strstr(err, "section.key=value"));
	}
	ck_assert_uint_eq(c.pool_size, 2ull << 30);
	/* A bad value names the key like config_set does. */
	ck_assert_int_eq(assign(&c, "pool.size=lots"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "[pool] size:"));
	/* Names longer than any section or key are refused, not truncated. */
	memset(longsec, 'p', sizeof(longsec));
	snprintf(longsec + 70, sizeof(longsec) - 70, ".size=1G");
	ck_assert_int_eq(assign(&c, longsec), -EINVAL);
	config_free(&c);
}
END_TEST

/* ---- files ------------------------------------------------------- */

START_TEST(test_load_valid)
{
	struct kvs_config c = fresh();
	char path[4096];

	ck_assert_int_eq(load_text(&c,
				   "; kvstashd.conf\n"
				   "# comments of both kinds\n"
				   "\n"
				   "[server]\n"
				   "socket = /tmp/kvs test.sock\n"
				   "socket_mode = 0600\n"
				   "[pool]\n"
				   "size = 8M\n"
				   "numa = off   ; inline comment\n"
				   "hugepages = no\n"
				   "[lease]\n"
				   "ttl = 90\n"
				   "[server]\n" /* a section may come back */
				   "max_sessions = 3\n",
				   path, sizeof(path)),
			 0);
	ck_assert_str_eq(c.socket_path, "/tmp/kvs test.sock");
	ck_assert_uint_eq(c.socket_mode, 0600);
	ck_assert_uint_eq(c.pool_size, 8ull << 20);
	ck_assert_str_eq(c.numa, "off");
	ck_assert_uint_eq(c.lease_ttl_ms, 90000);
	ck_assert_uint_eq(c.max_sessions, 3);
	/* Keys the file does not name keep their defaults. */
	ck_assert_uint_eq(c.sq_entries, 256);
	ck_assert_str_eq(c.log_target, "stderr");
	unlink(path);

	/* An empty file is a valid one. */
	ck_assert_int_eq(load_text(&c, "", path, sizeof(path)), 0);
	unlink(path);
	config_free(&c);
}
END_TEST

START_TEST(test_load_missing)
{
	struct kvs_config c = fresh();
	const char *path = "/nonexistent-kvstash-dir/kvstashd.conf";

	err[0] = '\0';
	ck_assert_int_eq(config_load(&c, path, false, err, sizeof(err)), 0);
	ck_assert_str_eq(c.socket_path, "/run/kvstash/kvstash.sock");
	ck_assert_int_eq(config_load(&c, path, true, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, path));
	config_free(&c);
}
END_TEST

/* "FILE:LINE:" followed by @what, for the file at @path. */
static void assert_err_at(const char *path, unsigned line, const char *what)
{
	char want[4200];

	snprintf(want, sizeof(want), "%s:%u: ", path, line);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "error '%s' does not start with '%s'",
		      err, want);
	ck_assert_msg(strstr(err, what) != NULL, "error '%s' lacks '%s'", err, what);
}

START_TEST(test_load_errors)
{
	struct kvs_config c = fresh();
	char path[4096];

	ck_assert_int_eq(load_text(&c, "[server]\nsocket = /a\n[bogus]\nkey = 1\n", path,
				   sizeof(path)),
			 -EINVAL);
	assert_err_at(path, 4, "[bogus] key: unknown section");
	unlink(path);

	ck_assert_int_eq(load_text(&c, "[pool]\nsize = 8M\n\nhugepage = yes\n", path,
				   sizeof(path)),
			 -EINVAL);
	assert_err_at(path, 4, "[pool] hugepage: unknown key");
	unlink(path);

	ck_assert_int_eq(load_text(&c, "[session]\nmax_keys = 1\n[pool]\nsize = lots\n", path,
				   sizeof(path)),
			 -EINVAL);
	assert_err_at(path, 4, "[pool] size: 'lots' is not a size");
	unlink(path);

	/* A key before any section. */
	ck_assert_int_eq(load_text(&c, "size = 8M\n", path, sizeof(path)), -EINVAL);
	assert_err_at(path, 1, "size");
	unlink(path);

	ck_assert_int_eq(load_text(&c, "[pool\nsize = 8M\n", path, sizeof(path)), -EINVAL);
	assert_err_at(path, 1, "syntax error");
	unlink(path);

	ck_assert_int_eq(load_text(&c, "[pool]\nsize 8M\n", path, sizeof(path)), -EINVAL);
	assert_err_at(path, 2, "syntax error");
	unlink(path);

	/*
	 * The first error is reported at its own line: a syntax error on
	 * line 2 before a bad value on line 4 is not given the bad value's
	 * text, nor the bad value the syntax error's line.
	 */
	ck_assert_int_eq(load_text(&c, "[pool]\nbroken\nnuma = off\nsize = lots\n", path,
				   sizeof(path)),
			 -EINVAL);
	assert_err_at(path, 2, "syntax error");
	ck_assert_ptr_null(strstr(err, "lots"));
	unlink(path);

	/* The file's first error wins; later lines are not applied after it. */
	ck_assert_int_eq(set(&c, "pool", "size", "4M"), 0);
	ck_assert_int_eq(load_text(&c, "[pool]\nsize = lots\nsize = 2G\nnuma = x\n", path,
				   sizeof(path)),
			 -EINVAL);
	assert_err_at(path, 2, "[pool] size:");
	ck_assert_uint_eq(c.pool_size, 4ull << 20);
	unlink(path);
	config_free(&c);
}
END_TEST

/* ---- cross checks ------------------------------------------------ */

static int validate(const struct kvs_config *c)
{
	err[0] = '\0';
	return config_validate(c, err, sizeof(err));
}

START_TEST(test_validate)
{
	struct kvs_config c = fresh();
	char path[200];

	/* Ring sizes: powers of two, default <= max (equal is fine). */
	ck_assert_int_eq(set(&c, "session", "sq_entries", "384"), 0);
	ck_assert_int_eq(validate(&c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "powers of two"));
	ck_assert_int_eq(set(&c, "session", "sq_entries", "256"), 0);
	ck_assert_int_eq(set(&c, "session", "sq_entries_max", "3000"), 0);
	ck_assert_int_eq(validate(&c), -EINVAL);
	ck_assert_int_eq(set(&c, "session", "sq_entries_max", "256"), 0);
	ck_assert_int_eq(validate(&c), 0);
	ck_assert_int_eq(set(&c, "session", "sq_entries", "512"), 0);
	ck_assert_int_eq(validate(&c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "sq_entries_max"));
	ck_assert_int_eq(set(&c, "session", "sq_entries", "256"), 0);

	/* Argument area: default <= max. */
	ck_assert_int_eq(set(&c, "session", "arg_bytes", "64M"), 0);
	ck_assert_int_eq(validate(&c), 0);
	ck_assert_int_eq(set(&c, "session", "arg_bytes", "67108865"), 0);
	ck_assert_int_eq(validate(&c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "arg_bytes"));
	ck_assert_int_eq(set(&c, "session", "arg_bytes", "4096"), 0);

	/* A SAVE of max_keys (16-byte key + u32 id each) must fit the largest area. */
	ck_assert_int_eq(set(&c, "session", "arg_bytes_max", "4096"), 0);
	ck_assert_int_eq(set(&c, "session", "max_keys", "204"), 0); /* 4080 bytes */
	ck_assert_int_eq(validate(&c), 0);
	ck_assert_int_eq(set(&c, "session", "max_keys", "205"), 0); /* 4100 bytes */
	ck_assert_int_eq(validate(&c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "max_keys"));
	ck_assert_int_eq(set(&c, "session", "max_keys", "204"), 0);

	/* target = file needs a file. */
	ck_assert_int_eq(set(&c, "log", "target", "file"), 0);
	ck_assert_int_eq(validate(&c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "[log] file"));
	ck_assert_int_eq(set(&c, "log", "file", "/tmp/kvstashd.log"), 0);
	ck_assert_int_eq(validate(&c), 0);

	/* The socket: absolute, and short enough for sun_path (108 with the NUL). */
	ck_assert_int_eq(set(&c, "server", "socket", "run/kvstash.sock"), 0);
	ck_assert_int_eq(validate(&c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "absolute"));
	ck_assert_int_eq(set(&c, "server", "socket", ""), 0);
	ck_assert_int_eq(validate(&c), -EINVAL);
	memset(path, 'a', sizeof(path));
	path[0] = '/';
	path[107] = '\0';
	ck_assert_int_eq(set(&c, "server", "socket", path), 0);
	ck_assert_int_eq(validate(&c), 0);
	memset(path, 'a', sizeof(path));
	path[0] = '/';
	path[108] = '\0';
	ck_assert_int_eq(set(&c, "server", "socket", path), 0);
	ck_assert_int_eq(validate(&c), -ENAMETOOLONG);
	config_free(&c);
}
END_TEST

/* ---- print and load back ----------------------------------------- */

static char *print_to_string(const struct kvs_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	config_print(c, f);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

static void assert_ids_eq(const struct id_list *a, const struct id_list *b)
{
	ck_assert_uint_eq(a->n, b->n);
	for (unsigned i = 0; i < a->n; i++)
		ck_assert_uint_eq(a->ids[i], b->ids[i]);
}

static void assert_config_eq(const struct kvs_config *a, const struct kvs_config *b)
{
	ck_assert_str_eq(a->socket_path, b->socket_path);
	ck_assert_str_eq(a->socket_group, b->socket_group);
	ck_assert_uint_eq(a->socket_mode, b->socket_mode);
	ck_assert_uint_eq(a->dir_mode, b->dir_mode);
	assert_ids_eq(&a->allow_uids, &b->allow_uids);
	assert_ids_eq(&a->allow_gids, &b->allow_gids);
	ck_assert_uint_eq(a->max_sessions, b->max_sessions);
	ck_assert_uint_eq(a->max_sessions_per_uid, b->max_sessions_per_uid);
	ck_assert_uint_eq(a->sq_entries, b->sq_entries);
	ck_assert_uint_eq(a->sq_entries_max, b->sq_entries_max);
	ck_assert_uint_eq(a->arg_bytes, b->arg_bytes);
	ck_assert_uint_eq(a->arg_bytes_max, b->arg_bytes_max);
	ck_assert_uint_eq(a->max_keys, b->max_keys);
	ck_assert_uint_eq(a->max_inflight, b->max_inflight);
	ck_assert_uint_eq(a->max_layers, b->max_layers);
	ck_assert_uint_eq(a->max_namespaces, b->max_namespaces);
	ck_assert_uint_eq(a->pool_size, b->pool_size);
	ck_assert_int_eq(a->hugepages, b->hugepages);
	ck_assert_str_eq(a->numa, b->numa);
	ck_assert_uint_eq(a->prefault_threads, b->prefault_threads);
	ck_assert_uint_eq(a->extent_size, b->extent_size);
	ck_assert_uint_eq(a->partial_timeout_ms, b->partial_timeout_ms);
	ck_assert_uint_eq(a->lease_ttl_ms, b->lease_ttl_ms);
	ck_assert_uint_eq(a->max_leases, b->max_leases);
	ck_assert_uint_eq(a->spin_us, b->spin_us);
	ck_assert_uint_eq(a->copy_threads, b->copy_threads);
	ck_assert_uint_eq(a->inline_copy_bytes, b->inline_copy_bytes);
	ck_assert_int_eq(a->log_level, b->log_level);
	ck_assert_str_eq(a->log_target, b->log_target);
	ck_assert_str_eq(a->log_file, b->log_file);
	ck_assert_str_eq(a->metrics_listen, b->metrics_listen);
	ck_assert_int_eq(a->cuda_enable, b->cuda_enable);
	ck_assert_int_eq(a->cuda_mover, b->cuda_mover);
	ck_assert_uint_eq(a->cuda_kernel_below, b->cuda_kernel_below);
	ck_assert_uint_eq(a->cuda_kernel_ctas, b->cuda_kernel_ctas);
}

/* Print @a, load the text over a default configuration, and compare. */
static void round_trip(const struct kvs_config *a)
{
	struct kvs_config b = fresh();
	char *text = print_to_string(a), *again, path[4096];

	ck_assert_msg(load_text(&b, text, path, sizeof(path)) == 0, "printed config refused: %s",
		      err);
	unlink(path);
	assert_config_eq(a, &b);
	/* Whatever a future key adds, printing the loaded copy gives the same text. */
	again = print_to_string(&b);
	ck_assert_str_eq(again, text);
	free(again);
	free(text);
	config_free(&b);
}

/* Does the table have the key of "section.key=value"? */
static bool key_known(const char *assignment)
{
	const struct config_key_info *k;

	for (unsigned i = 0; (k = config_key_at(i)); i++) {
		size_t ls = strlen(k->section), lk = strlen(k->key);

		if (strncmp(assignment, k->section, ls) == 0 && assignment[ls] == '.' &&
		    strncmp(assignment + ls + 1, k->key, lk) == 0 && assignment[ls + 1 + lk] == '=')
			return true;
	}
	return false;
}

START_TEST(test_print_round_trip)
{
	static const char *const assignments[] = {
		"server.socket=/tmp/kvstash test/k.sock",
		"server.socket_group=kvs",
		"server.socket_mode=0604",
		"server.dir_mode=02751",
		"server.allow_uids=0,1000,4294967294",
		"server.allow_gids=0,27",
		"server.max_sessions=7",
		"server.max_sessions_per_uid=3",
		"server.max_mapped_bytes_per_uid=6G",
		"server.max_handshakes=11",
		"server.max_handshakes_per_uid=5",
		"server.max_admin_sessions=13",
		"server.max_admin_sessions_per_uid=2",
		"server.admin_idle_timeout=90s",
		"server.max_fds_per_uid=4096",
		"session.sq_entries=64",
		"session.sq_entries_max=128",
		"session.arg_bytes=123456",
		"session.arg_bytes_max=1G",
		"session.max_keys=999",
		"session.max_inflight=77",
		"session.max_layers=100",
		"session.max_namespaces=5",
		"session.max_mapped_bytes=96M",
		"pool.size=3G",
		"pool.hugepages=yes",
		"pool.numa=0,1",
		"pool.prefault_threads=4",
		"pool.extent_size=0x200000",
		"pool.partial_timeout=1500ms",
		"pool.unsealed_share=30",
		"lease.ttl=2h",
		"lease.max_leases=9",
		"lease.memory_per_instance=3M",
		"lease.memory_per_uid=5M",
		"lease.memory=7M",
		"worker.spin_us=0",
		"worker.copy_threads=2",
		"worker.inline_copy_bytes=0",
		"cuda.enable=no",
		"cuda.mover=kernel",
		"cuda.kernel_below=64K",
		"cuda.kernel_ctas=33",
		"metrics.listen=127.0.0.1:9464",
		"log.level=debug",
		"log.target=file",
		"log.file=/var/log/kvstashd.log",
		"log.ratelimit_interval=30s",
		"log.ratelimit_burst=0",
	};
	struct kvs_config c = fresh();
	const struct config_key_info *k;

	/* Every key of the table is changed below: a new key must join the list. */
	for (unsigned i = 0; (k = config_key_at(i)); i++) {
		char prefix[160];
		bool found = false;

		snprintf(prefix, sizeof(prefix), "%s.%s=", k->section, k->key);
		for (unsigned j = 0; j < sizeof(assignments) / sizeof(assignments[0]); j++)
			found |= strncmp(assignments[j], prefix, strlen(prefix)) == 0;
		ck_assert_msg(found, "key %s.%s is not in the round trip", k->section, k->key);
	}
	/* The defaults first, then every key changed. */
	round_trip(&c);
	for (unsigned i = 0; i < sizeof(assignments) / sizeof(assignments[0]); i++) {
		/* Keys of a section this build lacks (e.g. cuda) are skipped. */
		if (!key_known(assignments[i]))
			continue;
		ck_assert_msg(assign(&c, assignments[i]) == 0, "%s: %s", assignments[i], err);
	}
	ck_assert_int_eq(c.socket_mode, 0604);
	round_trip(&c);
	config_free(&c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_key_table);
	tcase_add_test(tc, test_parse_size);
	tcase_add_test(tc, test_parse_duration);
	tcase_add_test(tc, test_set_u32);
	tcase_add_test(tc, test_set_size);
	tcase_add_test(tc, test_set_duration);
	tcase_add_test(tc, test_set_mode);
	tcase_add_test(tc, test_set_bool);
	tcase_add_test(tc, test_set_ids);
	tcase_add_test(tc, test_set_level_target_numa);
	tcase_add_test(tc, test_set_strings);
	tcase_add_test(tc, test_set_unknown);
	tcase_add_test(tc, test_set_assignment);
	tcase_add_test(tc, test_load_valid);
	tcase_add_test(tc, test_load_missing);
	tcase_add_test(tc, test_load_errors);
	tcase_add_test(tc, test_validate);
	tcase_add_test(tc, test_print_round_trip);
	suite_add_tcase(s, tc);

	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
