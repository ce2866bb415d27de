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
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "base/conf.h"
#include "unit.h"

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

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* A numeric field of struct kvs_config by place and width (bool, int, u32, u64). */
struct field {
	const char *name;
	size_t off, size;
};
/* clang-format off */
#define FIELD(f) { #f, offsetof(struct kvs_config, f), sizeof(((struct kvs_config *)0)->f) }
/* clang-format on */

/* Its value: the low bytes of a u64 (the daemon, like this test, runs little-endian). */
static uint64_t field_get(const struct kvs_config *c, struct field f)
{
	uint64_t v = 0;

	memcpy(&v, (const uint8_t *)c + f.off, f.size);
	return v;
}

/*
 * One config_set() of section.key = @value on the configuration the
 * previous steps left: accepted, the field then @expect; or refused
 * (-EINVAL), the field unchanged and the error naming the key and
 * holding @err_has.
 */
struct set_step {
	const char *section, *key, *value;
	struct field field;
	int want;
	uint64_t expect;
	const char *err_has;
};
/* clang-format off */
#define OK(sec, key, val, f, v) { sec, key, val, FIELD(f), 0, (v), NULL }
#define NO(sec, key, val, f, has) { sec, key, val, FIELD(f), -EINVAL, 0, has }
/* clang-format on */

static void run_steps(const struct set_step *steps, size_t nr)
{
	struct kvs_config c = fresh();

	for (size_t i = 0; i < nr; i++) {
		const struct set_step *st = &steps[i];
		uint64_t before = field_get(&c, st->field);
		char named[128];
		int r = set(&c, st->section, st->key, st->value);

		ck_assert_msg(r == st->want, "%s.%s = '%s': %d, want %d (%s)", st->section, st->key,
			      st->value, r, st->want, err);
		if (st->want == 0) {
			ck_assert_msg(field_get(&c, st->field) == st->expect,
				      "%s.%s = '%s': %s is %llu, want %llu", st->section, st->key,
				      st->value, st->field.name,
				      (unsigned long long)field_get(&c, st->field),
				      (unsigned long long)st->expect);
			continue;
		}
		ck_assert_msg(field_get(&c, st->field) == before, "%s.%s = '%s' changed the field",
			      st->section, st->key, st->value);
		snprintf(named, sizeof(named), "[%s] %s:", st->section, st->key);
		ck_assert_msg(strstr(err, named) != NULL, "error '%s' does not name [%s] %s", err,
			      st->section, st->key);
		ck_assert_msg(!st->err_has || strstr(err, st->err_has), "error '%s' lacks '%s'",
			      err, st->err_has);
	}
	config_free(&c);
}

/* ---- defaults --------------------------------------------------- */

START_TEST(test_defaults)
{
	static const struct {
		struct field f;
		uint64_t v;
	} numbers[] = {
		/* clang-format off */
		{ FIELD(socket_mode), 0660 },
		{ FIELD(dir_mode), 0750 },
		{ FIELD(allow_uids.n), 0 },
		{ FIELD(allow_gids.n), 0 },
		{ FIELD(max_sessions), 256 },
		{ FIELD(max_sessions_per_uid), 128 },
		{ FIELD(sq_entries), 256 },
		{ FIELD(sq_entries_max), 4096 },
		{ FIELD(arg_bytes), 4u << 20 },
		{ FIELD(arg_bytes_max), 64u << 20 },
		{ FIELD(max_keys), 65536 },
		{ FIELD(max_inflight), 1024 },
		{ FIELD(max_layers), 256 },
		{ FIELD(max_namespaces), 1024 },
		{ FIELD(pool_size), 1ull << 30 },
		{ FIELD(hugepages), false },
		{ FIELD(prefault_threads), 0 },
		{ FIELD(extent_size), 0 },
		{ FIELD(partial_timeout_ms), 60000 },
		{ FIELD(lease_ttl_ms), 600000 },
		{ FIELD(max_leases), 4096 },
		{ FIELD(spin_us), 50 },
		{ FIELD(copy_threads), 0 },
		{ FIELD(inline_copy_bytes), 256u << 10 },
		{ FIELD(log_level), LOG_INFO },
		/* clang-format on */
	};
	struct kvs_config c = fresh();

	for (unsigned i = 0; i < ARRAY_SIZE(numbers); i++)
		ck_assert_msg(field_get(&c, numbers[i].f) == numbers[i].v, "%s is %llu, want %llu",
			      numbers[i].f.name, (unsigned long long)field_get(&c, numbers[i].f),
			      (unsigned long long)numbers[i].v);
	ck_assert_str_eq(c.socket_path, "/run/kvstash/kvstash.sock");
	ck_assert_str_eq(c.socket_group, "");
	ck_assert_str_eq(c.numa, "auto");
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

/* A parser's result for a string: its value, or the errno (and nothing written). */
struct parse_case {
	const char *s;
	uint64_t v;
	int err;
};

START_TEST(test_parse_size)
{
	static const struct parse_case cases[] = {
		{ "0", 0 },
		{ "123", 123 },
		{ "1K", 1024 },
		{ "1k", 1024 },
		{ "3M", 3ull << 20 },
		{ "3m", 3ull << 20 },
		{ "5G", 5ull << 30 },
		{ "7T", 7ull << 40 },
		{ "2KiB", 2048 },
		{ "2MiB", 2ull << 20 },
		{ "2GiB", 2ull << 30 },
		{ "2KB", 2048 },
		{ "2Ki", 2048 },
		{ "0x10", 16 },
		{ "0x10K", 16 << 10 },
		{ "0XfF", 255 },
		{ "18446744073709551615", UINT64_MAX },
		/* Leading zeros are decimal ("010G" is not 8 GiB, "08G" not garbage). */
		{ "010", 10 },
		{ "08G", 8ull << 30 },
		{ "00", 0 },
		/* The largest value each suffix can carry, and one more. */
		{ "16777215T", 16777215ull << 40 },
		{ "16777216T", .err = -ERANGE },
		{ "17179869183G", 17179869183ull << 30 },
		{ "17179869184G", .err = -ERANGE },
		{ "18014398509481984K", .err = -ERANGE },
		/* Too big before any suffix: still a range error, not garbage. */
		{ "18446744073709551616", .err = -ERANGE },
		{ "99999999999999999999999G", .err = -ERANGE },
		{ "0x10000000000000000", .err = -ERANGE },
		/* ... unless garbage follows: that is what the user must fix first. */
		{ "99999999999999999999999X", .err = -EINVAL },
		{ "", .err = -EINVAL },
		{ " 1", .err = -EINVAL },
		{ "1 ", .err = -EINVAL },
		{ "1 K", .err = -EINVAL },
		{ "K", .err = -EINVAL },
		{ "abc", .err = -EINVAL },
		{ "1X", .err = -EINVAL },
		{ "1KX", .err = -EINVAL },
		{ "1KiBB", .err = -EINVAL },
		{ "1KBi", .err = -EINVAL },
		{ "1iB", .err = -EINVAL },
		{ "1B", .err = -EINVAL },
		{ "1.5G", .err = -EINVAL },
		{ "0x", .err = -EINVAL },
		{ "-1", .err = -EINVAL },
		{ "-0", .err = -EINVAL },
		{ "1K-", .err = -EINVAL },
		{ "4G4", .err = -EINVAL },
		{ "1e3", .err = -EINVAL },
		{ "\t1", .err = -EINVAL },
		{ NULL, .err = -EINVAL },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		const struct parse_case *t = &cases[i];
		uint64_t v = 0xdead;
		int r = parse_size(t->s, &v);

		ck_assert_msg(r == t->err, "parse_size('%s'): %d, want %d", t->s ? t->s : "(null)",
			      r, t->err);
		ck_assert_msg(v == (t->err ? 0xdead : t->v), "parse_size('%s') gave %llu",
			      t->s ? t->s : "(null)", (unsigned long long)v);
	}
}
END_TEST

START_TEST(test_parse_duration)
{
	static const struct parse_case cases[] = {
		{ "250ms", 250 },
		{ "0ms", 0 },
		{ "600s", 600000 },
		{ "10m", 600000 },
		{ "10min", 600000 },
		{ "2h", 7200000 },
		/* A bare number is seconds, as in the man page's "ttl = 600". */
		{ "5", 5000 },
		{ "0", 0 },
		/* Leading zeros are decimal: a duration is never octal. */
		{ "010s", 10000 },
		/* The largest of each unit that fits 32 bits of ms, and one more. */
		{ "4294967295ms", UINT32_MAX },
		{ "4294967296ms", .err = -ERANGE },
		{ "4294967s", 4294967000u },
		{ "4294968s", .err = -ERANGE },
		{ "4294968", .err = -ERANGE },
		{ "71582m", 71582u * 60000u },
		{ "71583m", .err = -ERANGE },
		{ "1193h", 1193u * 3600000u },
		{ "1194h", .err = -ERANGE },
		/* Too big for 64 bits, before any unit: a range error too. */
		{ "99999999999999999999999ms", .err = -ERANGE },
		{ "99999999999999999999999", .err = -ERANGE },
		{ "99999999999999999999999d", .err = -EINVAL },
		{ "", .err = -EINVAL },
		{ "s", .err = -EINVAL },
		{ "ms", .err = -EINVAL },
		{ "1d", .err = -EINVAL },
		{ "1 s", .err = -EINVAL },
		{ " 1s", .err = -EINVAL },
		{ "1s ", .err = -EINVAL },
		{ "-1", .err = -EINVAL },
		{ "-1s", .err = -EINVAL },
		{ "1.5s", .err = -EINVAL },
		{ "1S", .err = -EINVAL },
		{ "1MS", .err = -EINVAL },
		{ "1sec", .err = -EINVAL },
		{ "1hh", .err = -EINVAL },
		{ "0x10s", .err = -EINVAL },
		{ "1ms1", .err = -EINVAL },
		{ NULL, .err = -EINVAL },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		const struct parse_case *t = &cases[i];
		uint32_t v = 0xdead;
		int r = parse_duration_ms(t->s, &v);

		ck_assert_msg(r == t->err, "parse_duration_ms('%s'): %d, want %d",
			      t->s ? t->s : "(null)", r, t->err);
		ck_assert_msg(v == (t->err ? 0xdead : t->v), "parse_duration_ms('%s') gave %u",
			      t->s ? t->s : "(null)", v);
	}
}
END_TEST

/* ---- every key type through config_set -------------------------- */

START_TEST(test_set_u32)
{
	static const struct set_step steps[] = {
		OK("server", "max_sessions", "1", max_sessions, 1),
		OK("server", "max_sessions", "65536", max_sessions, 65536),
		NO("server", "max_sessions", "0", max_sessions, "outside [1, 65536]"),
		NO("server", "max_sessions", "65537", max_sessions, NULL),
		NO("server", "max_sessions", "4294967296", max_sessions, NULL),
		NO("server", "max_sessions", "4294967297", max_sessions, NULL), /* 1 after a wrap */
		NO("server", "max_sessions", "", max_sessions, NULL),
		NO("server", "max_sessions", "12x", max_sessions, "not a number"),
		NO("server", "max_sessions", "-1", max_sessions, NULL),
		NO("server", "max_sessions", "1K", max_sessions, NULL), /* a count, not a size */
		/* Decimal even with a leading zero; hex when it says so. */
		OK("server", "max_sessions", "010", max_sessions, 10),
		OK("server", "max_sessions", "09", max_sessions, 9),
		OK("server", "max_sessions", "0x10", max_sessions, 16),
		/* A lower bound of 0 is a bound too: prefault_threads is [0, 1024]. */
		OK("pool", "prefault_threads", "0", prefault_threads, 0),
		OK("pool", "prefault_threads", "1024", prefault_threads, 1024),
		NO("pool", "prefault_threads", "1025", prefault_threads, NULL),
		/* Every session key's bounds, at the edges. */
		OK("session", "sq_entries", "2", sq_entries, 2),
		NO("session", "sq_entries", "1", sq_entries, NULL),
		OK("session", "sq_entries_max", "65536", sq_entries_max, 65536),
		NO("session", "sq_entries_max", "131072", sq_entries_max, NULL),
		OK("session", "max_layers", "512", max_layers, 512),
		NO("session", "max_layers", "513", max_layers, NULL),
		OK("session", "max_keys", "1048576", max_keys, 1048576),
		NO("session", "max_keys", "1048577", max_keys, NULL),
		OK("worker", "spin_us", "1000000", spin_us, 1000000),
		NO("worker", "spin_us", "1000001", spin_us, NULL),
	};

	run_steps(steps, ARRAY_SIZE(steps));
}
END_TEST

START_TEST(test_set_size)
{
	static const struct set_step steps[] = {
		OK("pool", "size", "8M", pool_size, 8ull << 20),
		OK("pool", "size", "1M", pool_size, 1ull << 20),
		NO("pool", "size", "1048575", pool_size, NULL),
		OK("pool", "size", "1024T", pool_size, 1ull << 50),
		NO("pool", "size", "1025T", pool_size, NULL),
		NO("pool", "size", "lots", pool_size, "not a size"),
		NO("pool", "size", "99999999T", pool_size, "too large"), /* past 64 bits */
		OK("session", "arg_bytes", "4096", arg_bytes, 4096),
		NO("session", "arg_bytes", "4095", arg_bytes, NULL),
		OK("session", "arg_bytes", "1G", arg_bytes, 1ull << 30),
		NO("session", "arg_bytes", "1073741825", arg_bytes, NULL),
		OK("pool", "extent_size", "0", extent_size, 0),
		OK("pool", "extent_size", "16G", extent_size, 16ull << 30),
		NO("pool", "extent_size", "17179869185", extent_size, NULL),
		OK("worker", "inline_copy_bytes", "0", inline_copy_bytes, 0),
	};

	run_steps(steps, ARRAY_SIZE(steps));
}
END_TEST

START_TEST(test_set_duration)
{
	static const struct set_step steps[] = {
		OK("lease", "ttl", "30s", lease_ttl_ms, 30000),
		OK("lease", "ttl", "10ms", lease_ttl_ms, 10),
		NO("lease", "ttl", "9ms", lease_ttl_ms, "outside"),
		NO("lease", "ttl", "0", lease_ttl_ms, NULL),
		OK("lease", "ttl", "24h", lease_ttl_ms, 86400000),
		NO("lease", "ttl", "86400001ms", lease_ttl_ms, NULL),
		NO("lease", "ttl", "1d", lease_ttl_ms, "not a duration"),
		NO("lease", "ttl", "9999999999h", lease_ttl_ms, NULL),
		OK("pool", "partial_timeout", "2m", partial_timeout_ms, 120000),
	};

	run_steps(steps, ARRAY_SIZE(steps));
}
END_TEST

START_TEST(test_set_mode)
{
	static const struct set_step steps[] = {
		/* Modes are octal with or without the leading zero, as chmod(1) reads them. */
		OK("server", "socket_mode", "0600", socket_mode, 0600),
		OK("server", "socket_mode", "640", socket_mode, 0640),
		OK("server", "socket_mode", "0", socket_mode, 0),
		OK("server", "socket_mode", "0777", socket_mode, 0777),
		/* No setuid/sticky bits on a socket; they are fine on its directory. */
		NO("server", "socket_mode", "01777", socket_mode, NULL),
		NO("server", "socket_mode", "1000", socket_mode, NULL),
		NO("server", "socket_mode", "0800", socket_mode, NULL),
		NO("server", "socket_mode", "8", socket_mode, NULL),
		NO("server", "socket_mode", "rw-rw----", socket_mode, NULL),
		NO("server", "socket_mode", "", socket_mode, NULL),
		NO("server", "socket_mode", "-1", socket_mode, NULL),
		NO("server", "socket_mode", "0x1ff", socket_mode, NULL),
		OK("server", "dir_mode", "01750", dir_mode, 01750),
		OK("server", "dir_mode", "7777", dir_mode, 07777),
		NO("server", "dir_mode", "10000", dir_mode, NULL),
	};

	run_steps(steps, ARRAY_SIZE(steps));
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

	/* [cuda] mover and fragmented_loads: every value by name, nothing else. */
	static const char *const movers[] = { "auto", "dma", "kernel", "batch" };
	static const int mover_vals[] = { CUDA_MOVER_AUTO, CUDA_MOVER_DMA, CUDA_MOVER_KERNEL,
					  CUDA_MOVER_BATCH };
	for (unsigned i = 0; i < 4; i++) {
		ck_assert_int_eq(set(&c, "cuda", "mover", movers[i]), 0);
		ck_assert_int_eq(c.cuda_mover, mover_vals[i]);
	}
	REFUSE(&c, "cuda", "mover", "batched", cuda_mover);
	REFUSE(&c, "cuda", "mover", "", cuda_mover);
	ck_assert_int_eq(c.cuda_frag_loads, CUDA_FRAG_KERNEL);
	ck_assert_int_eq(set(&c, "cuda", "fragmented_loads", "batch"), 0);
	ck_assert_int_eq(c.cuda_frag_loads, CUDA_FRAG_BATCH);
	ck_assert_int_eq(set(&c, "cuda", "fragmented_loads", "kernel"), 0);
	ck_assert_int_eq(c.cuda_frag_loads, CUDA_FRAG_KERNEL);
	REFUSE(&c, "cuda", "fragmented_loads", "dma", cuda_frag_loads);
	REFUSE(&c, "cuda", "fragmented_loads", "auto", cuda_frag_loads);
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
	/* A file, and the first error config_load() must report: its line and text. */
	static const struct {
		const char *text;
		unsigned line;
		const char *what, *absent;
	} cases[] = {
		{ "[server]\nsocket = /a\n[bogus]\nkey = 1\n", 4, "[bogus] key: unknown section" },
		{ "[pool]\nsize = 8M\n\nhugepage = yes\n", 4, "[pool] hugepage: unknown key" },
		{ "[session]\nmax_keys = 1\n[pool]\nsize = lots\n", 4,
		  "[pool] size: 'lots' is not a size" },
		/* A key before any section. */
		{ "size = 8M\n", 1, "size" },
		{ "[pool\nsize = 8M\n", 1, "syntax error" },
		{ "[pool]\nsize 8M\n", 2, "syntax error" },
		/*
		 * The first error is reported at its own line: a syntax error on
		 * line 2 before a bad value on line 4 is not given the bad value's
		 * text, nor the bad value the syntax error's line.
		 */
		{ "[pool]\nbroken\nnuma = off\nsize = lots\n", 2, "syntax error", "lots" },
	};
	struct kvs_config c = fresh();
	char path[4096];

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		ck_assert_int_eq(load_text(&c, cases[i].text, path, sizeof(path)), -EINVAL);
		assert_err_at(path, cases[i].line, cases[i].what);
		ck_assert_msg(!cases[i].absent || !strstr(err, cases[i].absent),
			      "error '%s' holds '%s'", err, cases[i].absent);
		unlink(path);
	}

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
	ck_assert_int_eq(a->cuda_frag_loads, b->cuda_frag_loads);
	ck_assert_uint_eq(a->cuda_kernel_ctas, b->cuda_kernel_ctas);
	ck_assert_uint_eq(a->cuda_batch_streams, b->cuda_batch_streams);
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
		"worker.doze_us=30",
		"worker.doze_ms=250",
		"worker.query_threads=3",
		"worker.save_wait_ms=2500",
		"worker.copy_threads=2",
		"worker.inline_copy_bytes=0",
		"cuda.enable=no",
		"cuda.mover=kernel",
		"cuda.kernel_below=64K",
		"cuda.fragmented_loads=batch",
		"cuda.kernel_ctas=33",
		"cuda.batch_streams=7",
		"cluster.redis=unix:/run/redis/redis.sock",
		"cluster.sentinels=10.2.0.2:26379,10.2.0.3:26379",
		"cluster.master_name=kvs-registry",
		"cluster.sentinel_user=kvstash-sentinel",
		"cluster.sentinel_password_file=/etc/kvstash/sentinel.pw",
		"cluster.sentinel_check=250ms",
		"cluster.user=kvstash",
		"cluster.password_file=/etc/kvstash/redis.pw",
		"cluster.name=prod-eu",
		"cluster.node=gpu-07",
		"cluster.peer_address=10.2.0.7:7400",
		"cluster.lease_ttl=15s",
		"cluster.connect_timeout=700ms",
		"cluster.command_timeout=3s",
		"cluster.flush_timeout=9s",
		"cluster.query_timeout=40ms",
		"cluster.queue_entries=4096",
		"cluster.entry_ttl=2h",
		"cluster.peer_listen=10.2.0.7:7471",
		"cluster.peer_allow=10.2.0.0/24",
		"cluster.secret_file=/etc/kvstash/prod.key",
		"cluster.peer_transport=ucx",
		"cluster.ucx_devices=mlx5_0:1",
		"cluster.ucx_allow_tcp=yes",
		"cluster.lock_ttl=20s",
		"cluster.peer_io_timeout=3s",
		"cluster.peer_max_conns=128",
		"cluster.peer_max_conns_per_peer=8",
		"cluster.peer_max_locks_per_peer=32",
		"cluster.peer_max_unauth=32",
		"cluster.peer_max_unauth_per_peer=2",
		"cluster.peer_handshake_timeout=2s",
		"cluster.fetch_timeout=1500ms",
		"cluster.fetch_max_keys=1024",
		"ssd.path=/var/cache/kvstash/ssd0,/dev/nvme1n1",
		"ssd.size=100G",
		"ssd.region_size=128M",
		"ssd.queue_depth=64",
		"ssd.write_queue=500",
		"ssd.write_policy=filter",
		"ssd.write_rate=1G",
		"ssd.write_ahead=no",
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

UNIT_TESTS(test_defaults, test_key_table, test_parse_size, test_parse_duration, test_set_u32,
	   test_set_size, test_set_duration, test_set_mode, test_set_bool, test_set_ids,
	   test_set_level_target_numa, test_set_strings, test_set_unknown, test_set_assignment,
	   test_load_valid, test_load_missing, test_load_errors, test_validate,
	   test_print_round_trip)

const struct unit_suite unit_suite = {
	.name = "config",
	.add_tests = add_tests,
};
