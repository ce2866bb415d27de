/* SPDX-License-Identifier: MIT */
/*
 * The registry's configuration: the AUTH secret file (owner and mode
 * checked, the secret never in a message), registry_config_check(), the
 * address forms, kvstashd's [cluster] keys through registry_config_from(),
 * and the namespace digest (a different name or any geometry field gives
 * another digest; the same description the same one).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/conf.h"
#include "cluster/regaddr.h"
#include "cluster/registry.h"
#include "unit.h"

static char dir[64];

static void write_file(const char *path, const char *s, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, s, strlen(s)), (ssize_t)strlen(s));
	close(fd);
	ck_assert_int_eq(chmod(path, mode), 0);
}

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/kvs-regconf.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_secret_file)
{
	char p[128], buf[REG_SECRET_MAX], why[256];

	snprintf(p, sizeof(p), "%s/pw", dir);
	write_file(p, "s3cret-value\n", 0600);
	ck_assert_int_eq(registry_read_secret(p, buf, sizeof(buf), why, sizeof(why)), 0);
	ck_assert_str_eq(buf, "s3cret-value");
	/* Group or others may read it: refused, and the message holds no secret. */
	ck_assert_int_eq(chmod(p, 0640), 0);
	ck_assert_int_eq(registry_read_secret(p, buf, sizeof(buf), why, sizeof(why)), -EPERM);
	ck_assert_ptr_nonnull(strstr(why, "group or others"));
	ck_assert_ptr_null(strstr(why, "s3cret"));
	ck_assert_uint_eq(buf[0], 0);
	ck_assert_int_eq(chmod(p, 0604), 0);
	ck_assert_int_eq(registry_read_secret(p, buf, sizeof(buf), why, sizeof(why)), -EPERM);
	ck_assert_int_eq(chmod(p, 0400), 0);
	ck_assert_int_eq(registry_read_secret(p, buf, sizeof(buf), why, sizeof(why)), 0);
	/* Owned by someone else (as root, chown to nobody), a symlink, empty, two lines. */
	if (geteuid() == 0) {
		ck_assert_int_eq(chown(p, 65534, 65534), 0);
		ck_assert_int_eq(registry_read_secret(p, buf, sizeof(buf), why, sizeof(why)),
				 -EPERM);
		ck_assert_ptr_nonnull(strstr(why, "owned by uid 65534"));
		ck_assert_int_eq(chown(p, 0, 0), 0);
	}
	snprintf(p, sizeof(p), "%s/link", dir);
	ck_assert_int_eq(symlink("pw", p), 0);
	ck_assert_int_lt(registry_read_secret(p, buf, sizeof(buf), why, sizeof(why)), 0);
	snprintf(p, sizeof(p), "%s/empty", dir);
	write_file(p, "\n", 0600);
	ck_assert_int_eq(registry_read_secret(p, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	snprintf(p, sizeof(p), "%s/two", dir);
	write_file(p, "a\nb\n", 0600);
	ck_assert_int_eq(registry_read_secret(p, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	ck_assert_ptr_null(strstr(why, "a\nb"));
	snprintf(p, sizeof(p), "%s/none", dir);
	ck_assert_int_eq(registry_read_secret(p, buf, sizeof(buf), why, sizeof(why)), -ENOENT);
}
END_TEST

static struct registry_config good(void)
{
	return (struct registry_config){
		.redis = "127.0.0.1:6379",
		.cluster = "prod",
		.node = "gpu-01",
		.peer_addr = "10.0.0.1:7000",
		.lease_ttl_ms = 9000,
		.connect_timeout_ms = 1000,
		.command_timeout_ms = 3000,
		.flush_timeout_ms = 5000,
		.query_timeout_ms = 100,
		.queue_entries = 1024,
	};
}

START_TEST(test_config_check)
{
	struct registry_config c = good();
	char why[512];
	struct reg_addr a;

	if (!registry_compiled_in()) {
		ck_assert_int_eq(registry_config_check(&c, why, sizeof(why)), -EOPNOTSUPP);
		ck_assert_ptr_nonnull(strstr(why, "not compiled in"));
		return;
	}
	ck_assert_int_eq(registry_config_check(&c, why, sizeof(why)), 0);
	c.command_timeout_ms = 3001; /* over a third of the TTL */
	ck_assert_int_eq(registry_config_check(&c, why, sizeof(why)), -EINVAL);
	c = good();
	c.node = "gpu 01";
	ck_assert_int_eq(registry_config_check(&c, why, sizeof(why)), -EINVAL);
	c = good();
	c.cluster = "";
	ck_assert_int_eq(registry_config_check(&c, why, sizeof(why)), -EINVAL);
	c = good();
	c.queue_entries = 1000;
	ck_assert_int_eq(registry_config_check(&c, why, sizeof(why)), -EINVAL);
	c = good();
	c.lease_ttl_ms = 999;
	ck_assert_int_eq(registry_config_check(&c, why, sizeof(why)), -EINVAL);
	c = good();
	c.redis = "localhost";
	ck_assert_int_eq(registry_config_check(&c, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "[cluster] redis"));

	ck_assert_int_eq(reg_addr_parse("[::1]:6380", &a, why, sizeof(why)), 0);
	ck_assert_str_eq(a.host, "::1");
	ck_assert_int_eq(a.port, 6380);
	ck_assert_int_eq(reg_addr_parse("unix:/run/redis.sock", &a, why, sizeof(why)), 0);
	ck_assert(a.unix_path);
	ck_assert_str_eq(a.host, "/run/redis.sock");
	ck_assert_int_eq(reg_addr_parse("/run/redis.sock", &a, why, sizeof(why)), 0);
	ck_assert_int_eq(reg_addr_parse("unix:relative", &a, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(reg_addr_parse("h:0", &a, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(reg_addr_parse("h:65536", &a, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(reg_addr_parse("::1:6379", &a, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(reg_addr_parse("redis.example:6379", &a, why, sizeof(why)), 0);
}
END_TEST

START_TEST(test_config_from)
{
	struct kvs_config cfg;
	struct registry_config r;
	char host[256], why[512], p[128], err[256];
	struct registry_secrets sec;

	ck_assert_int_eq(config_init(&cfg), 0);
	/* Defaults: no cluster. */
	ck_assert_int_eq(registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			 0);
	snprintf(p, sizeof(p), "%s/pw", dir);
	write_file(p, "hunter2\n", 0600);
	ck_assert_int_eq(config_set(&cfg, "cluster", "redis", "127.0.0.1:6379", err, sizeof(err)),
			 0);
	ck_assert_int_eq(config_set(&cfg, "cluster", "password_file", p, err, sizeof(err)), 0);
	if (!registry_compiled_in()) {
		ck_assert_int_eq(
			registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			-EOPNOTSUPP);
		ck_assert_ptr_nonnull(strstr(why, "not compiled in"));
		config_free(&cfg);
		return;
	}
	ck_assert_int_eq(registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			 1);
	ck_assert_str_eq(r.password, "hunter2");
	ck_assert_str_eq(r.cluster, "kvstash");
	ck_assert(r.node[0] && !strchr(r.node, '.'));
	ck_assert_uint_eq(r.lease_ttl_ms, 10000);
	ck_assert_uint_eq(r.queue_entries, 65536);
	ck_assert_int_eq(chmod(p, 0644), 0);
	ck_assert_int_eq(registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			 -EPERM);
	ck_assert_ptr_nonnull(strstr(why, "[cluster] password_file"));
	ck_assert_ptr_null(strstr(why, "hunter2"));
	/* A timeout over a third of the lease: refused by the cross-key check. */
	ck_assert_int_eq(chmod(p, 0600), 0);
	ck_assert_int_eq(config_set(&cfg, "cluster", "command_timeout", "4s", err, sizeof(err)), 0);
	ck_assert_int_eq(registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			 -EINVAL);
	ck_assert_int_eq(config_set(&cfg, "cluster", "command_timeout", "2s", err, sizeof(err)), 0);

	/* Sentinels instead of a Redis: not both, a master name, host:port each. */
	ck_assert_int_eq(config_set(&cfg, "cluster", "sentinels", "10.0.0.1:26379,10.0.0.2:26379",
				    err, sizeof(err)),
			 0);
	ck_assert_int_eq(registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "one or the other"));
	ck_assert_int_eq(config_set(&cfg, "cluster", "redis", "", err, sizeof(err)), 0);
	ck_assert_int_eq(registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "master_name"));
	ck_assert_int_eq(config_set(&cfg, "cluster", "master_name", "kvs-reg", err, sizeof(err)),
			 0);
	snprintf(p + strlen(p), sizeof(p) - strlen(p), "2");
	write_file(p, "sentinel-pw\n", 0600);
	ck_assert_int_eq(config_set(&cfg, "cluster", "sentinel_password_file", p, err, sizeof(err)),
			 0);
	ck_assert_int_eq(registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			 1);
	ck_assert_str_eq(r.master_name, "kvs-reg");
	ck_assert_str_eq(r.sentinel_password, "sentinel-pw");
	ck_assert_str_eq(r.password, "hunter2");
	ck_assert_uint_eq(r.sentinel_check_ms, 1000);
	ck_assert_int_eq(config_set(&cfg, "cluster", "sentinels", "10.0.0.1:26379,unix:/x", err,
				    sizeof(err)),
			 0);
	ck_assert_int_eq(registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "[cluster] sentinels"));
	ck_assert_int_eq(config_set(&cfg, "cluster", "sentinels", "10.0.0.1", err, sizeof(err)), 0);
	ck_assert_int_eq(registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			 -EINVAL);
	/* Separators only: refused by the check (--check-config), not at start-up. */
	ck_assert_int_eq(config_set(&cfg, "cluster", "sentinels", ", ,", err, sizeof(err)), 0);
	ck_assert_int_eq(registry_config_from(&cfg, &r, host, sizeof(host), &sec, why, sizeof(why)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "none named"));
	config_free(&cfg);
}
END_TEST

START_TEST(test_digest)
{
	struct nsdigest_layer l[3] = { { 2, 4096 }, { 2, 4096 }, { 2, 4096 } };
	struct nsdigest_geometry g = { "m/bf16", 2, 2, false, 3, l }, h;
	uint8_t d0[16], d1[16];

	if (!registry_compiled_in()) {
		ck_assert_int_eq(registry_digest(&g, d0), -EOPNOTSUPP);
		return;
	}
	ck_assert_int_eq(registry_digest(&g, d0), 0);
	ck_assert_int_eq(registry_digest(&g, d1), 0);
	ck_assert_mem_eq(d0, d1, 16);
#define DIFFERS(mutate)                                          \
	do {                                                     \
		struct nsdigest_layer m[3];                 \
		memcpy(m, l, sizeof(l));                         \
		h = g;                                           \
		h.layers = m;                                    \
		mutate;                                          \
		ck_assert_int_eq(registry_digest(&h, d1), 0);    \
		ck_assert_msg(memcmp(d0, d1, 16) != 0, #mutate); \
	} while (0)
	DIFFERS(h.ns = "m/fp8");
	DIFFERS(h.ns = "m/bf1");
	DIFFERS(h.shards = 1);
	DIFFERS(h.tp_size = 4);
	DIFFERS(h.replicated = true);
	DIFFERS(h.nr_layers = 2);
	DIFFERS(m[1].segments = 1);
	DIFFERS(m[2].segment_bytes = 8192);
	DIFFERS(m[0].segment_bytes = 4096ull << 32);
	h = g;
	h.ns = "";
	ck_assert_int_eq(registry_digest(&h, d1), -EINVAL);
	h = g;
	h.nr_layers = 0;
	ck_assert_int_eq(registry_digest(&h, d1), -EINVAL);
	h = g;
	h.shards = 0;
	ck_assert_int_eq(registry_digest(&h, d1), -EINVAL);
}
END_TEST

UNIT_TESTS(test_secret_file, test_config_check, test_config_from, test_digest)

const struct unit_suite unit_suite = {
	.name = "registry-config",
	.setup = setup,
	.teardown = teardown,
	.add_tests = add_tests,
};
