/* SPDX-License-Identifier: MIT */
/*
 * Redis AUTH through kvstashd: a redis-server that requires a password,
 * nodes that read it from [cluster] password_file (mode 0600).
 *   - with the right password, n1's blocks are registered and n2 finds
 *     them;
 *   - with a wrong one, n3 never holds a lease: its cluster FLUSH reports
 *     its saves dropped, its cluster QUERY answers -ENOTCONN, and its
 *     local serving is unaffected;
 *   - neither password appears in any kvstashd's log (nor in the config
 *     the harness wrote, which names only the file).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctest.h"

#define NS "granite-3b/bf16/auth"
#define N  32

static void secret_file(const char *path, const char *secret)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	size_t len = strlen(secret);

	CHECK(fd >= 0, "create %s: %s", path, strerror(errno));
	CHECK(write(fd, secret, len) == (ssize_t)len && write(fd, "\n", 1) == 1, "write %s", path);
	close(fd);
}

static void never_logged(const struct cnode *n, const char *what)
{
	CHECK(!kvsd_log_contains(&n->d, what), "%s's log holds a password", n->name);
}

int main(void)
{
	static uint8_t k1[N * 16], k3[8 * 16];
	struct redis rd = { 0 };
	struct cnode a, b, c;
	struct kvsd conf;
	struct test_kv kva, kvb, kvc;
	struct kvs_client *ca, *cb, *cc;
	struct kvs_cluster_answer ans;
	char secret[96], wrong[96], good_ini[512], bad_ini[512], path[256], out[256];
	uint64_t reg, drop;
	int r;

	ct_init(240);
	test_keys(k1, N, 41);
	test_keys(k3, 8, 43);
	ct_redis_start(&rd);
	snprintf(secret, sizeof(secret), "pw-%d-%llx-right", (int)getpid(),
		 (unsigned long long)now_ms());
	snprintf(wrong, sizeof(wrong), "pw-%d-%llx-wrong", (int)getpid(),
		 (unsigned long long)now_ms());
	/* rd.dir is the test's own and removed with redis-server. */
	snprintf(path, sizeof(path), "%s/secret", rd.dir);
	secret_file(path, secret);
	snprintf(good_ini, sizeof(good_ini), "password_file = %s\n", path);
	snprintf(path, sizeof(path), "%s/wrong", rd.dir);
	secret_file(path, wrong);
	snprintf(bad_ini, sizeof(bad_ini), "password_file = %s\n", path);
	CHECK(redis_cmd(&rd, out, sizeof(out), "CONFIG SET requirepass %s", secret) == 0 &&
		      !strcmp(out, "OK"),
	      "CONFIG SET requirepass: %s", out);
	ct_redis_password(secret);

	cnode_start(&a, &rd, "n1", good_ini, NULL);
	cnode_start(&b, &rd, "n2", good_ini, NULL);
	cnode_start(&c, &rd, "n3", bad_ini, NULL);
	ct_wait_lease(&rd, "n1", 0);
	ct_wait_lease(&rd, "n2", 0);
	ca = ct_worker(&a, NS, &kva, 2, 64, 4096);
	cb = ct_worker(&b, NS, &kvb, 2, 64, 4096);
	cc = ct_worker(&c, NS, &kvc, 2, 64, 4096);

	ct_save(ca, &kva, k1, N, 1);
	r = ct_cflush(ca, &reg, &drop);
	CHECK(r == 0 && reg >= N && drop == 0,
	      "n1's cluster FLUSH (AUTH): res %d (%s) registered %llu dropped %llu", r,
	      kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop);
	r = ct_cquery(cb, k1, N, &ans);
	CHECK(r == 0 && ans.status == 0 && ans.best == N && ct_holder(&ans, "n1"),
	      "n2 asks what n1 saved: %s", ct_answer_str(r, &ans));
	printf("ok - nodes with the password register and find\n");

	ct_save(cc, &kvc, k3, 8, 3);
	CHECK(ct_query(cc, k3, 8) == 8, "n3's local QUERY with a wrong password");
	r = ct_cflush(cc, &reg, &drop);
	CHECK((r == 0 || r == -ETIMEDOUT) && reg == 0 && drop >= 8,
	      "n3's cluster FLUSH (wrong password): res %d (%s) registered %llu dropped %llu", r,
	      kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop);
	r = ct_cquery(cc, k1, N, &ans);
	CHECK(r == 0 && ans.status == -ENOTCONN && ans.best == 0,
	      "n3's cluster QUERY (wrong password): %s", ct_answer_str(r, &ans));
	CHECK(ct_lease_epoch(&rd, "n3") == 0, "n3 holds a lease with a wrong password");
	r = ct_cquery(cb, k3, 8, &ans);
	CHECK(r == 0 && ans.best == 0, "n3's blocks registered: %s", ct_answer_str(r, &ans));
	printf("ok - a node with a wrong password registers nothing and serves locally\n");

	kvs_close(ca);
	kvs_close(cb);
	kvs_close(cc);
	test_kv_free(&kva);
	test_kv_free(&kvb);
	test_kv_free(&kvc);
	cnode_stop(&a);
	cnode_stop(&b);
	cnode_stop(&c);
	for (unsigned i = 0; i < 2; i++) {
		const char *pw = i ? wrong : secret;

		never_logged(&a, pw);
		never_logged(&b, pw);
		never_logged(&c, pw);
		conf = a.d;
		snprintf(conf.log, sizeof(conf.log), "%s", a.d.conf); /* search the config */
		CHECK(!kvsd_log_contains(&conf, pw), "n1's config holds a password");
	}
	ct_pass("cluster auth: AUTH from a password file, never logged");
}
