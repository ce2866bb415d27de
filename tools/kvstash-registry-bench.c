/* SPDX-License-Identifier: MIT */
/*
 * kvstash-registry-bench: the cluster registry (sidecar/cluster/) against
 * plain pipelined Redis commands over the same keys, on the same
 * redis-server, in the same run.
 *
 *   kvstash-registry-bench [--redis HOST:PORT] [--inserts N] [--reps R]
 *
 * Without --redis it starts its own redis-server (tools/redis-bench.h: no
 * persistence, a random loopback port, killed at exit).  Two registries in this process: "holder" registers
 * blocks, "asker" queries them, both driven by one epoll loop through
 * registry_fd()/registry_dispatch(), as kvstashd's control thread will.
 *   insert      N blocks enqueued by a producer thread until the flush
 *               completes: blocks/s; baseline: N pipelined HSET+PEXPIRE
 *   query K     a cluster query of K keys all held by the holder: median
 *               and p99 latency; baseline: K pipelined HGETALL
 *   flush N     latency of a flush right after N inserts; baseline: N
 *               pipelined HSET, until the last reply
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cluster/registry.h"
#include "redis-bench.h"

#define BASE_PREFIX "bench:b:" /* the baseline's keys */

static struct registry *holder, *asker;
static int ep;
static uint8_t ns[REG_DIGEST_SIZE];
static struct redis_bench rb;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t no_backfill(void *arg, uint64_t *cursor, struct registry_entry *out, uint32_t max)
{
	(void)arg;
	(void)cursor;
	(void)out;
	(void)max;
	return 0;
}

static void log_cb(void *arg, int level, int err, const char *msg)
{
	(void)arg;
	(void)err;
	if (level <= 4)
		fprintf(stderr, "bench: %s\n", msg);
}

static void loop_once(int ms)
{
	struct epoll_event ev[4];
	int n = epoll_wait(ep, ev, 4, ms);

	for (int i = 0; i < n; i++)
		registry_dispatch(ev[i].data.u32 ? asker : holder);
}

static volatile int flag;
static struct registry_flush_result fres;
static struct registry_query_result qres;

static void on_flush(void *arg, const struct registry_flush_result *r)
{
	(void)arg;
	fres = *r;
	flag = 1;
}

static void on_query(void *arg, const struct registry_query_result *r)
{
	(void)arg;
	qres = *r;
	flag = 1;
}

static void wait_flag(void)
{
	while (!flag)
		loop_once(100);
	flag = 0;
}

static void flush_holder(void)
{
	struct registry_mark m;

	if (registry_mark(holder, NULL, &m) < 0 ||
	    registry_flush(holder, &m, 60000, on_flush, NULL) < 0)
		exit(1);
	wait_flag();
	if (fres.status) {
		fprintf(stderr, "flush failed: %d\n", fres.status);
		exit(1);
	}
}

struct prod {
	uint64_t seed, n;
};

static void *producer(void *p)
{
	struct prod *w = p;
	uint8_t k[256][REG_KEY_SIZE];

	for (uint64_t i = 0; i < w->n;) {
		uint32_t c = w->n - i < 256 ? (uint32_t)(w->n - i) : 256, got = 0;

		for (uint32_t j = 0; j < c; j++)
			redis_bench_key(k[j], w->seed, i + j);
		/* A full queue refuses; this producer offers again (the bench wants no drops). */
		while (got < c) {
			uint32_t g = registry_insert(holder, NULL, ns,
						     (const uint8_t(*)[16])(k + got), c - got);

			got += g;
			if (!g)
				sched_yield();
		}
		i += c;
	}
	return NULL;
}

/* Insert @n keys of prefix @seed through the registry, until flushed: seconds. */
static double insert_run(uint64_t seed, uint64_t n)
{
	struct prod w = { seed, n };
	pthread_t t;
	double t0 = now_s();
	struct registry_stats s0, s1;

	registry_get_stats(holder, &s0);
	pthread_create(&t, NULL, producer, &w);
	/* Drive the loop while the producer runs, then flush. */
	for (;;) {
		struct registry_stats s;

		registry_get_stats(holder, &s);
		if (s.enqueued - s0.enqueued >= n)
			break;
		loop_once(1);
	}
	pthread_join(t, NULL);
	flush_holder();
	registry_get_stats(holder, &s1);
	if (s1.delivered - s0.delivered != n)
		fprintf(stderr, "warning: %" PRIu64 " of %" PRIu64 " delivered\n",
			s1.delivered - s0.delivered, n);
	return now_s() - t0;
}

static struct registry *open_reg(const char *node, const char *addr)
{
	struct registry_config cfg = {
		.redis = addr,
		.cluster = "bench",
		.node = node,
		.peer_addr = "10.0.0.2:7000",
		.lease_ttl_ms = 30000,
		.connect_timeout_ms = 2000,
		.command_timeout_ms = 10000,
		.flush_timeout_ms = 60000,
		.query_timeout_ms = 10000,
		.queue_entries = 1u << 20,
	};
	struct registry_ops ops = { .backfill = no_backfill, .log = log_cb };
	struct registry *r;
	char why[256];

	if (registry_new(&cfg, &ops, &r, why, sizeof(why)) < 0) {
		fprintf(stderr, "registry: %s\n", why);
		exit(1);
	}
	return r;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "redis", required_argument, NULL, 'r' },
		{ "inserts", required_argument, NULL, 'n' },
		{ "reps", required_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	struct nsdigest_layer lg = { 2, 16384 };
	struct nsdigest_geometry g = { "bench/bf16", 1, 1, false, 36, NULL };
	struct nsdigest_layer layers[36];
	uint64_t inserts = 200000, seed = 1;
	int reps = 30, c;
	char addr[128] = "";
	struct epoll_event e = { .events = EPOLLIN };
	redisContext *rc;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'r')
			snprintf(addr, sizeof(addr), "%s", optarg);
		else if (c == 'n')
			inserts = strtoull(optarg, NULL, 10);
		else if (c == 'R')
			reps = atoi(optarg);
		else
			return 2;
	}
	if (!addr[0]) {
		redis_bench_start(&rb, NULL);
		snprintf(addr, sizeof(addr), "%s:%d", rb.host, rb.port);
	} else {
		redis_bench_attach(&rb, addr);
	}
	for (int i = 0; i < 36; i++)
		layers[i] = lg;
	g.layers = layers;
	registry_digest(&g, ns);
	ep = epoll_create1(0);
	holder = open_reg("node-b", addr);
	asker = open_reg("node-a", addr);
	e.data.u32 = 0;
	epoll_ctl(ep, EPOLL_CTL_ADD, registry_fd(holder), &e);
	e.data.u32 = 1;
	epoll_ctl(ep, EPOLL_CTL_ADD, registry_fd(asker), &e);
	for (;;) {
		struct registry_stats a, b;

		registry_get_stats(holder, &b);
		registry_get_stats(asker, &a);
		if (a.leased && b.leased)
			break;
		loop_once(100);
	}
	rc = redis_bench_connect(&rb);

	printf("kvstash-registry-bench: redis %s, one process, loopback\n\n", addr);
	printf("%-22s %14s %14s %8s\n", "measure", "registry", "baseline", "ratio");

	/* ---- insert throughput ---- */
	double ti = insert_run(seed++, inserts);
	double tb = redis_bench_pipeline(rc, RB_HSET_PEXPIRE, BASE_PREFIX, "node-b", 100, inserts);

	printf("%-22s %11.0f/s %11.0f/s %7.2fx   (%" PRIu64 " blocks; baseline HSET+PEXPIRE)\n",
	       "insert", (double)inserts / ti, (double)inserts / tb, tb / ti, inserts);

	/* ---- query latency: the holder has a 32K-key prefix ---- */
	insert_run(1000, 32768);
	redis_bench_pipeline(rc, RB_HSET_PEXPIRE, BASE_PREFIX, "node-b", 1000, 32768);
	{
		static const uint32_t sizes[] = { 64, 512, 4096, 32768 };

		for (unsigned s = 0; s < 4; s++) {
			uint32_t k = sizes[s];
			int r = k >= 32768 ? reps / 3 + 1 : reps;
			double *lat = calloc((size_t)r, sizeof(double)),
			       *base = calloc((size_t)r, sizeof(double));
			uint8_t(*keys)[REG_KEY_SIZE] = malloc((size_t)k * REG_KEY_SIZE);

			for (uint32_t i = 0; i < k; i++)
				redis_bench_key(keys[i], 1000, i);
			for (int i = 0; i < r; i++) {
				double t0 = now_s();

				if (registry_query(asker, ns, (const uint8_t(*)[16])keys, k, 10000,
						   on_query, NULL) < 0)
					exit(1);
				wait_flag();
				lat[i] = now_s() - t0;
				if (qres.best != k) {
					fprintf(stderr, "query %u: best %u (status %d)\n", k,
						qres.best, qres.status);
					exit(1);
				}
				base[i] = redis_bench_pipeline(rc, RB_HGETALL, BASE_PREFIX, NULL,
							       1000, k);
			}
			double l50 = redis_bench_pct(lat, (size_t)r, 50),
			       b50 = redis_bench_pct(base, (size_t)r, 50),
			       l99 = redis_bench_pct(lat, (size_t)r, 99),
			       b99 = redis_bench_pct(base, (size_t)r, 99);
			char name[32];

			snprintf(name, sizeof(name), "query %u (p50)", k);
			printf("%-22s %11.3f ms %11.3f ms %7.2fx   (%u round trips; baseline HGETALL x%u)\n",
			       name, l50 * 1e3, b50 * 1e3, l50 / b50, qres.round_trips, k);
			snprintf(name, sizeof(name), "query %u (p99)", k);
			printf("%-22s %11.3f ms %11.3f ms %7.2fx\n", name, l99 * 1e3, b99 * 1e3,
			       l99 / b99);
			free(lat);
			free(base);
			free(keys);
		}
	}

	/* ---- flush latency after N inserts ---- */
	{
		static const uint64_t ns_[] = { 1, 1000, 100000 };

		for (unsigned s = 0; s < 3; s++) {
			uint64_t n = ns_[s];
			struct prod w = { 5000 + s, n };
			pthread_t t;
			struct registry_mark m;
			double t0, tf, tbl;

			pthread_create(&t, NULL, producer, &w);
			pthread_join(t, NULL);
			t0 = now_s();
			if (registry_mark(holder, NULL, &m) < 0)
				exit(1);
			registry_flush(holder, &m, 60000, on_flush, NULL);
			wait_flag();
			tf = now_s() - t0;
			tbl = redis_bench_pipeline(rc, RB_HSET_PEXPIRE, BASE_PREFIX, "node-b",
						   9000 + s, n);
			char name[32];

			snprintf(name, sizeof(name), "flush after %" PRIu64, n);
			printf("%-22s %11.3f ms %11.3f ms %7.2fx   (baseline: %" PRIu64
			       " pipelined HSET+PEXPIRE)\n",
			       name, tf * 1e3, tbl * 1e3, tf / tbl, n);
		}
	}
	redisFree(rc);
	registry_shutdown(holder);
	registry_shutdown(asker);
	while (!registry_closed(holder) || !registry_closed(asker))
		loop_once(100);
	registry_free(holder);
	registry_free(asker);
	redis_bench_stop(&rb);
	return 0;
}
