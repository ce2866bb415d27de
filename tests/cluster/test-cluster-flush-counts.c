/* SPDX-License-Identifier: MIT */
/*
 * What a cluster FLUSH counts: exactly what its session (or its instance,
 * KVS_FLUSH_INSTANCE) registered and dropped since its previous FLUSH,
 * nobody else's.  Real kvstashd nodes in network namespaces of the test's
 * own (tests/lib/hub.h) on a real redis-server in a third:
 *   - a busy session on node a saves and flushes; Redis is killed, it
 *     saves more (dropped: the node is offline), Redis comes back empty;
 *   - while the busy session keeps saving and flushing in another process
 *     (thousands of registrations, the backfill re-registering what the
 *     node holds), a new session saves 8 blocks: its first cluster FLUSH
 *     reports 8 registered and 0 dropped (it once reported everything the
 *     registry had seen since it started, the outage's drops included),
 *     its second 0 and 0, and node b finds the 8 at once;
 *   - the busy session's own FLUSH after the outage reports its drops, the
 *     next one only its saves since;
 *   - an instance of two ranks (tp 2) saving 16 blocks (each its shard):
 *     its instance FLUSH reports 16 and 0 (each block once, whichever rank
 *     sealed it), the next one after 4 more blocks 4 and 0.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "../lib/hub.h"
#include "ctest.h"

#define NS     "qwen3-8b/bf16/flush-counts"
#define LAYERS 2
#define SEG    4096
#define BLOCKS 256
#define BUSY   512 /* the busy session's first save */

static void cflush(struct kvs_client *c, unsigned flags, uint64_t want_reg, uint64_t want_drop,
		   const char *what)
{
	uint64_t reg = UINT64_MAX, drop = UINT64_MAX;
	int r = kvs_flush_cluster_sync(c, flags, CT_POLL_MS + CT_OP_MS, &reg, &drop);

	CHECK(r == 0 && reg == want_reg && drop == want_drop,
	      "%s: cluster FLUSH res %d (%s) registered %llu dropped %llu, want %llu and %llu",
	      what, r, kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop,
	      (unsigned long long)want_reg, (unsigned long long)want_drop);
	printf("  %s: registered %llu, dropped %llu\n", what, (unsigned long long)reg,
	       (unsigned long long)drop);
}

/* Another process: a busy engine saving and flushing on node a while the test measures. */
struct busy {
	const struct cnode *n;
	unsigned rounds;
};

static int busy_engine(void *arg)
{
	const struct busy *b = arg;
	static uint8_t keys[256 * 16];
	struct test_kv kv;
	struct kvs_client *c = ct_worker(b->n, NS, &kv, LAYERS, BLOCKS, SEG);
	uint64_t reg, drop;

	for (unsigned i = 0; i < b->rounds; i++) {
		test_keys(keys, 256, 7000 + i);
		ct_save(c, &kv, keys, 256, 7000 + i);
		/* Its own flushes count its own saves: 256 a round, whatever else happens. */
		CHECK(ct_cflush(c, &reg, &drop) == 0 && reg == 256 && drop == 0,
		      "busy engine round %u: registered %llu dropped %llu", i,
		      (unsigned long long)reg, (unsigned long long)drop);
	}
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

int main(void)
{
	static uint8_t kbusy[BUSY * 16], kmore[80 * 16], knew[8 * 16], kinst[20 * 16];
	struct hub_host hr, ha, hb;
	struct redis rd = { 0 };
	struct cnode a, b;
	struct test_kv kvb, kvn, kvx, kv0, kv1;
	struct kvs_client *cbusy, *cnew, *cx, *r0, *r1, *sb;
	struct kvs_cluster_answer ans;
	struct busy bz;
	pid_t kid;
	char inst[64];
	int r;

	ct_init(300);
	hub_init();
	hub_host(&hr, "redis", 10);
	hub_host(&ha, "a", 1);
	hub_host(&hb, "b", 2);
	rd.host = &hr;
	ct_redis_start(&rd);
	/* Room for everything the test saves: no eviction takes what it counts. */
	cnode_start_in(&a, &ha, &rd, "a", false, NULL, "[pool]\nsize = 64M\nextent_size = 256K\n");
	cnode_start_in(&b, &hb, &rd, "b", false, NULL, NULL);
	ct_wait_lease(&rd, "a", 0);
	ct_wait_lease(&rd, "b", 0);
	/* b's registry ready too (it answers a cluster QUERY), not only its lease in Redis. */
	for (uint64_t end = now_ms() + CT_POLL_MS; ct_stat(&b, "registry", "state") != 3;
	     usleep(10000))
		CHECK(now_ms() < end, "b's registry never ready after the restart");
	test_keys(kbusy, BUSY, 1);
	test_keys(kmore, 80, 2);
	test_keys(knew, 8, 3);
	test_keys(kinst, 20, 4);

	/* ---- a busy session, and an outage that drops its registrations ---- */
	cbusy = ct_worker(&a, NS, &kvb, LAYERS, BLOCKS, SEG);
	for (unsigned i = 0; i < BUSY; i += 128)
		ct_save(cbusy, &kvb, kbusy + 16 * i, 128, 100 + i);
	cflush(cbusy, 0, BUSY, 0, "busy session, first FLUSH");
	redis_stop(&rd);
	ct_save(cbusy, &kvb, kmore, 64, 200);
	cflush(cbusy, 0, 0, 64, "busy session, Redis down");
	CHECK(redis_restart(&rd) == 0, "redis-server did not come back");
	ct_wait_lease(&rd, "a", 0);
	ct_wait_lease(&rd, "b", 0);
	/* b's registry ready too (it answers a cluster QUERY), not only its lease in Redis. */
	for (uint64_t end = now_ms() + CT_POLL_MS; ct_stat(&b, "registry", "state") != 3;
	     usleep(10000))
		CHECK(now_ms() < end, "b's registry never ready after the restart");

	/* ---- a new session, while the busy one goes on in another process ---- */
	bz = (struct busy){ &a, 8 };
	kid = ct_spawn(busy_engine, &bz);
	cnew = ct_worker(&a, NS, &kvn, LAYERS, BLOCKS, SEG);
	ct_save(cnew, &kvn, knew, 8, 300);
	cflush(cnew, 0, 8, 0, "new session, first FLUSH");
	sb = ct_worker(&b, NS, &kvx, LAYERS, BLOCKS, SEG);
	r = ct_cquery(sb, knew, 8, &ans);
	CHECK(r == 0 && ans.best == 8 && ct_holder(&ans, "a"),
	      "b does not find the new session's blocks after its FLUSH: %s",
	      ct_answer_str(r, &ans));
	kvs_close(sb);
	test_kv_free(&kvx);
	cflush(cnew, 0, 0, 0, "new session, nothing new");
	CHECK(ct_reap(kid, CT_POLL_MS * 3) == 0, "the busy engine failed");
	ct_save(cbusy, &kvb, kmore + 16 * 64, 16, 400);
	cflush(cbusy, 0, 16, 0, "busy session, after the outage");
	printf("ok - a session's cluster FLUSH counts its own registrations only\n");

	/* ---- an instance of two ranks ---- */
	snprintf(inst, sizeof(inst), "tp2-%d", (int)getpid());
	r0 = ct_worker_rank(&a, NS "/tp2", inst, 0, 2, &kv0, LAYERS, BLOCKS, SEG);
	r1 = ct_worker_rank(&a, NS "/tp2", inst, 1, 2, &kv1, LAYERS, BLOCKS, SEG);
	for (unsigned i = 0; i < 16; i += 4) {
		ct_save(r0, &kv0, kinst + 16 * i, 4, 500 + i);
		ct_save(r1, &kv1, kinst + 16 * i, 4, 600 + i);
	}
	cflush(r0, KVS_FLUSH_INSTANCE, 16, 0, "instance FLUSH of tp 2");
	ct_save(r1, &kv1, kinst + 16 * 16, 4, 700);
	ct_save(r0, &kv0, kinst + 16 * 16, 4, 800);
	cflush(r1, KVS_FLUSH_INSTANCE, 4, 0, "instance FLUSH of tp 2, after 4 more");
	cflush(r0, KVS_FLUSH_INSTANCE, 0, 0, "instance FLUSH of tp 2, nothing new");
	printf("ok - an instance FLUSH counts the instance's registrations, each block once\n");

	/* Another session's FLUSH on the same node: none of the above. */
	cx = ct_worker(&a, NS, &kvx, LAYERS, BLOCKS, SEG);
	cflush(cx, 0, 0, 0, "a session that saved nothing");
	kvs_close(cx);
	test_kv_free(&kvx);
	kvs_close(r0);
	kvs_close(r1);
	test_kv_free(&kv0);
	test_kv_free(&kv1);
	kvs_close(cnew);
	test_kv_free(&kvn);
	kvs_close(cbusy);
	test_kv_free(&kvb);
	cnode_stop(&a);
	cnode_stop(&b);
	ct_pass("cluster FLUSH counts: per session, per instance, since the previous FLUSH");
}
