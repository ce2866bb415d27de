/* SPDX-License-Identifier: MIT */
/*
 * redis-server killed and restarted under traffic, through kvstashd (two
 * nodes):
 *   - an engine process on n1 saves, queries (local and cluster), loads
 *     and checks bytes in a loop the whole time; no operation fails or
 *     hangs: the local hits stay exact, only the cluster part degrades
 *     (status -ENOTCONN or -ETIMEDOUT, best 0) while Redis is away;
 *   - n2's cluster QUERY while Redis is away: local hits, best 0, a
 *     status saying why;
 *   - Redis restarted with its data (an RDB written just before the kill)
 *     and restarted empty: n1 reconnects, re-acquires and backfills, so n2
 *     finds again within a bounded poll both what n1 had registered and
 *     what n1 saved while Redis was away (never registered before);
 *   - a kvstashd started while Redis is down starts and serves, reports
 *     its registrations dropped, and registers what it holds once Redis
 *     is up.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctest.h"

#define NS "gemma-2b/bf16/redis"
#define N  64
#define TB 16 /* blocks per traffic round */

struct traffic {
	_Atomic uint64_t rounds;
	_Atomic uint64_t degraded; /* cluster answers with a negative status */
	_Atomic int stop;
};

static struct cnode a, b, n3;
static struct traffic *tr;

static int traffic(void *arg)
{
	static uint8_t keys[2 * TB * 16];
	struct kvs_cluster_answer ans;
	struct test_kv kv;
	struct kvs_client *c = ct_worker(&a, NS, &kv, 2, 2 * TB, 4096);
	uint32_t ids[TB];
	uint64_t lease;
	int r;

	(void)arg;
	for (uint64_t i = 0; !atomic_load(&tr->stop); i++) {
		uint64_t seed = 100000 + 100 * (i % 64);

		test_keys(keys, 2 * TB, seed); /* the second half is never saved */
		ct_save(c, &kv, keys, TB, seed);
		r = ct_query(c, keys, TB);
		CHECK(r == TB, "traffic round %llu: local QUERY %d (%s)", (unsigned long long)i, r,
		      r < 0 ? kvs_strerror(r) : "hits");
		r = ct_cquery(c, keys, 2 * TB, &ans);
		CHECK(r == TB && ans.best == 0 &&
			      (ans.status == 0 || ans.status == -ENOTCONN ||
			       ans.status == -ETIMEDOUT),
		      "traffic round %llu: cluster QUERY: %s", (unsigned long long)i,
		      ct_answer_str(r, &ans));
		if (ans.status)
			atomic_fetch_add(&tr->degraded, 1);
		r = kvs_query_sync(c, keys, TB, 0, 0, CT_OP_MS, &lease);
		CHECK(r == TB, "traffic round %llu: leased QUERY %d", (unsigned long long)i, r);
		for (uint32_t j = 0; j < TB; j++) {
			ids[j] = TB + j;
			test_kv_poison(&kv, TB + j, 0xa5);
		}
		r = kvs_load_sync(c, lease, ids, TB, 0, 2, CT_OP_MS);
		CHECK(r == TB, "traffic round %llu: LOAD %d (%s)", (unsigned long long)i, r,
		      r < 0 ? kvs_strerror(r) : "");
		for (uint32_t j = 0; j < TB; j++)
			CHECK(test_kv_check(&kv, TB + j, seed + j), "traffic round %llu: block %u",
			      (unsigned long long)i, j);
		/* A LOAD of every layer consumed the lease: nothing to release. */
		atomic_fetch_add(&tr->rounds, 1);
	}
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

/* The traffic made @more rounds from now (it runs, and is not stuck). */
static void traffic_runs(uint64_t more, const char *when)
{
	uint64_t want = atomic_load(&tr->rounds) + more;

	for (uint64_t end = now_ms() + CT_POLL_MS; now_ms() < end; usleep(10000))
		if (atomic_load(&tr->rounds) >= want)
			return;
	CHECK(atomic_load(&tr->rounds) >= want, "the traffic on n1 stopped %s (%llu rounds)", when,
	      (unsigned long long)atomic_load(&tr->rounds));
}

/* Redis is away: n2's cluster QUERY answers at once with a reason and no holder. */
static void away(struct kvs_client *cb, const uint8_t *keys)
{
	struct kvs_cluster_answer ans;
	int r = ct_cquery(cb, keys, N, &ans);

	CHECK(r == 0 && ans.best == 0 && ans.nr_holders == 0 &&
		      (ans.status == -ENOTCONN || ans.status == -ETIMEDOUT),
	      "n2's cluster QUERY with Redis dead: %s", ct_answer_str(r, &ans));
}

/* Poll until n2 finds all of @keys held by @node. */
static void found_on(struct kvs_client *cb, const uint8_t *keys, const char *node, const char *what)
{
	struct kvs_cluster_answer ans;
	int r = -1;

	for (uint64_t end = now_ms() + CT_POLL_MS; now_ms() < end; usleep(20000)) {
		r = ct_cquery(cb, keys, N, &ans);
		CHECK(r == 0, "n2's cluster QUERY: %s", ct_answer_str(r, &ans));
		if (ans.status == 0 && ans.best == N && ct_holder(&ans, node))
			return;
	}
	CHECK(false, "%s never found again: %s", what, ct_answer_str(r, &ans));
}

static void found_again(struct kvs_client *cb, const uint8_t *keys, const char *what)
{
	found_on(cb, keys, "n1", what);
}

static void flush_ok(struct kvs_client *c)
{
	uint64_t reg, drop;
	int r = ct_cflush(c, &reg, &drop);

	CHECK(r == 0 && reg >= N && drop == 0, "cluster FLUSH: res %d registered %llu dropped %llu",
	      r, (unsigned long long)reg, (unsigned long long)drop);
}

int main(void)
{
	static uint8_t k1[N * 16], k2[N * 16], k3[N * 16], k4[N * 16];
	struct redis rd = { 0 };
	struct test_kv kva, kvb, kvc;
	struct kvs_client *ca, *cb, *cc;
	uint64_t reg, drop;
	char out[256], path[200];
	pid_t kid;
	int r;

	ct_init(300);
	tr = mmap(NULL, sizeof(*tr), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(tr != MAP_FAILED, "mmap");
	test_keys(k1, N, 31);
	test_keys(k2, N, 32);
	test_keys(k3, N, 33 * 1000);
	test_keys(k4, N, 34 * 1000);
	ct_redis_start(&rd);
	cnode_start(&a, &rd, "n1", NULL, "[pool]\nsize = 32M\nextent_size = 256K\n");
	cnode_start(&b, &rd, "n2", NULL, NULL);
	ct_wait_lease(&rd, "n1", 0);
	ct_wait_lease(&rd, "n2", 0);
	ca = ct_worker(&a, NS, &kva, 2, N, 4096);
	cb = ct_worker(&b, NS, &kvb, 2, N, 4096);
	ct_save(ca, &kva, k1, N, 1);
	flush_ok(ca);
	found_again(cb, k1, "n1's blocks");
	kid = ct_spawn(traffic, NULL);
	traffic_runs(3, "before the kill");

	/* ---- killed, restarted with its data ---- */
	CHECK(redis_cmd(&rd, out, sizeof(out), "SAVE") == 0 && !strcmp(out, "OK"), "SAVE: %s", out);
	redis_stop(&rd);
	away(cb, k1);
	ct_save(ca, &kva, k2, N, 2); /* registered by no one until the backfill */
	CHECK(ct_query(ca, k2, N) == N, "n1's local QUERY with Redis dead");
	traffic_runs(3, "with Redis dead");
	r = redis_restart(&rd);
	CHECK(r == 0, "redis-server did not restart on its port: %s", strerror(-r));
	found_again(cb, k1, "after a restart with data, n1's registered blocks");
	found_again(cb, k2, "after a restart with data, what n1 saved while Redis was dead");
	traffic_runs(3, "after the restart");
	printf("ok - Redis killed and restarted with its data (n1 epoch %llu)\n",
	       (unsigned long long)ct_lease_epoch(&rd, "n1"));

	/* ---- killed, restarted empty ---- */
	redis_stop(&rd);
	snprintf(path, sizeof(path), "%s/dump.rdb", rd.dir);
	CHECK(unlink(path) == 0, "unlink %s", path);
	away(cb, k1);
	ct_save(ca, &kva, k3, N, 3);
	traffic_runs(3, "with Redis dead again");
	r = redis_restart(&rd);
	CHECK(r == 0, "redis-server did not restart on its port: %s", strerror(-r));
	CHECK(redis_cmd(&rd, out, sizeof(out), "DBSIZE") == 0, "DBSIZE");
	printf("# keys in the restarted Redis at once: %s\n", out);
	found_again(cb, k1, "after an empty restart, n1's first blocks");
	found_again(cb, k2, "after an empty restart, n1's second blocks");
	found_again(cb, k3, "after an empty restart, what n1 saved while Redis was dead");
	traffic_runs(3, "after the empty restart");
	printf("ok - Redis killed and restarted empty (n1 epoch %llu)\n",
	       (unsigned long long)ct_lease_epoch(&rd, "n1"));

	/* ---- a node started while Redis is down ---- */
	redis_stop(&rd);
	cnode_start(&n3, &rd, "n3", NULL, NULL);
	cc = ct_worker(&n3, NS, &kvc, 2, N, 4096);
	ct_save(cc, &kvc, k4, N, 4);
	CHECK(ct_query(cc, k4, N) == N, "n3's local QUERY with Redis down since its start");
	r = ct_cflush(cc, &reg, &drop);
	CHECK((r == 0 || r == -ETIMEDOUT) && reg == 0 && drop >= N,
	      "n3's cluster FLUSH with Redis down: res %d (%s) registered %llu dropped %llu", r,
	      kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop);
	traffic_runs(3, "with Redis dead a third time");
	r = redis_restart(&rd);
	CHECK(r == 0, "redis-server did not restart on its port: %s", strerror(-r));
	found_on(cb, k4, "n3", "what n3 saved before it ever reached Redis");
	found_again(cb, k1, "after the third restart, n1's first blocks");
	printf("ok - a node started while Redis is down registers once it is up\n");
	kvs_close(cc);
	test_kv_free(&kvc);
	cnode_stop(&n3);

	atomic_store(&tr->stop, 1);
	r = ct_reap(kid, CT_POLL_MS);
	CHECK(r == 0, "the traffic on n1 failed or hung: %d", r);
	printf("# traffic: %llu rounds, %llu cluster answers degraded\n",
	       (unsigned long long)atomic_load(&tr->rounds),
	       (unsigned long long)atomic_load(&tr->degraded));
	CHECK(atomic_load(&tr->degraded) > 0, "the traffic never saw a degraded cluster answer");

	ct_stop_pair(ca, &kva, &a, cb, &kvb, &b);
	ct_pass("cluster redis: killed and restarted (with data, empty) under traffic");
}
