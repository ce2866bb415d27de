/* SPDX-License-Identifier: MIT */
/*
 * Incarnations never repeat, and a node takes its own lease back at once.
 * Real kvstashd nodes in network namespaces of the test's own
 * (tests/lib/hub.h), a real redis-server in a third:
 *   - Redis restarted empty under a running node: its next lease has a
 *     higher epoch than any before (it once went back to 1), the same
 *     incarnation id, and what it holds is findable again;
 *   - the node's lease replaced by an older one of its own (the same
 *     incarnation id, an older token: what a replica promoted while behind
 *     holds) and its connection cut, as a failover cuts it: the node
 *     takes it over at once with a higher epoch, not after the stale
 *     lease's TTL (30 s here), and is findable again;
 *   - the node killed, Redis restarted empty, the node started again: its
 *     epoch is still higher than the last of the process before (the
 *     floor is the wall clock's ms), its incarnation id differs;
 *   - the incarnation is in the log line of every acquisition.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/hub.h"
#include "ctest.h"

#define NS     "qwen3-8b/bf16/incarnation"
#define LAYERS 2
#define SEG    4096
#define BLOCKS 64
#define N      32

static void lease_inc(const struct redis *rd, const char *node, char *out, size_t len)
{
	int r = ct_redis_cmd(rd, out, len, "HGET kvs:%s:lease:%s inc", ct_cluster(), node);

	CHECK(r == 0 && strlen(out) == 16, "the lease of %s has no incarnation id: %s", node, out);
}

/* Poll until @c (on another node) finds every key of @keys held by @node. */
static void wait_found(struct kvs_client *c, const uint8_t *keys, uint32_t n, const char *node,
		       const char *what)
{
	struct kvs_cluster_answer ans;
	int r = 0;

	for (uint64_t end = now_ms() + CT_POLL_MS;; usleep(20000)) {
		r = ct_cquery(c, keys, n, &ans);
		if (r == 0 && ans.best == n && ct_holder(&ans, node))
			return;
		CHECK(now_ms() < end, "%s: %s's blocks are not found: %s", what, node,
		      ct_answer_str(r, &ans));
	}
}

int main(void)
{
	static uint8_t keys[N * 16];
	struct hub_host hr, ha, hb;
	struct redis rd = { 0 };
	struct cnode a, b;
	struct test_kv kva, kvb;
	struct kvs_client *ca, *cb;
	char inc1[64], inc[64], out[256];
	uint64_t e1, e2, e3, t0;

	ct_init(300);
	hub_init();
	hub_host(&hr, "redis", 10);
	hub_host(&ha, "a", 1);
	hub_host(&hb, "b", 2);
	rd.host = &hr;
	ct_redis_start(&rd);
	cnode_start_in(&a, &ha, &rd, "a", false, NULL, NULL);
	cnode_start_in(&b, &hb, &rd, "b", false, NULL, NULL);
	e1 = ct_wait_lease(&rd, "a", 0);
	ct_wait_lease(&rd, "b", 0);
	lease_inc(&rd, "a", inc1, sizeof(inc1));
	snprintf(out, sizeof(out), "incarnation %s", inc1);
	CHECK(kvsd_log_contains(&a.d, out), "a's log does not name its incarnation %s", inc1);
	test_keys(keys, N, 9);
	ca = ct_worker(&a, NS, &kva, LAYERS, BLOCKS, SEG);
	cb = ct_worker(&b, NS, &kvb, LAYERS, BLOCKS, SEG);
	ct_save(ca, &kva, keys, N, 900);
	wait_found(cb, keys, N, "a", "before anything");

	/* ---- Redis forgets everything under the running node ---- */
	redis_stop(&rd);
	CHECK(redis_restart(&rd) == 0, "redis-server did not come back");
	e2 = ct_wait_lease(&rd, "a", 0);
	CHECK(e2 > e1,
	      "after Redis restarted empty a's epoch is %llu, it held %llu: an epoch repeated",
	      (unsigned long long)e2, (unsigned long long)e1);
	lease_inc(&rd, "a", inc, sizeof(inc));
	CHECK(!strcmp(inc, inc1), "the same process changed its incarnation id: %s, was %s", inc,
	      inc1);
	wait_found(cb, keys, N, "a", "after Redis restarted empty");
	printf("ok - Redis restarted empty: epoch %llu -> %llu, incarnation %s kept\n",
	       (unsigned long long)e1, (unsigned long long)e2, inc1);

	/* ---- an older lease of its own (a replica promoted while behind) ---- */
	CHECK(ct_redis_cmd(&rd, out, sizeof(out),
			   "HSET kvs:%s:lease:a tok %llu:0123456789abcdef epoch %llu inc %s",
			   ct_cluster(), (unsigned long long)e1, (unsigned long long)e1,
			   inc1) == 0 &&
		      ct_redis_cmd(&rd, out, sizeof(out), "PEXPIRE kvs:%s:lease:a 30000",
				   ct_cluster()) == 0,
	      "writing the stale lease: %s", out);
	/* As a failover does: the nodes' connections go, they come back to that lease. */
	CHECK(ct_redis_cmd(&rd, out, sizeof(out), "CLIENT KILL TYPE normal") == 0,
	      "CLIENT KILL: %s", out);
	t0 = now_ms();
	e3 = ct_wait_lease(&rd, "a", e2);
	CHECK(now_ms() - t0 < 5000, "a took %llu ms to take its own lease back (its TTL is 30 s)",
	      (unsigned long long)(now_ms() - t0));
	wait_found(cb, keys, N, "a", "after its stale lease");
	printf("ok - its own older lease taken back at once: epoch %llu -> %llu in %llu ms\n",
	       (unsigned long long)e2, (unsigned long long)e3, (unsigned long long)(now_ms() - t0));

	/* ---- killed, Redis empty, started again: another incarnation ---- */
	kvs_close(ca);
	test_kv_free(&kva);
	cnode_kill(&a);
	redis_stop(&rd);
	CHECK(redis_restart(&rd) == 0, "redis-server did not come back");
	CHECK(kvsd_restart(&a.d) == 0, "a did not start again");
	e1 = ct_wait_lease(&rd, "a", 0);
	CHECK(e1 > e3,
	      "a new process over an empty Redis was given epoch %llu, the one before held %llu",
	      (unsigned long long)e1, (unsigned long long)e3);
	lease_inc(&rd, "a", inc, sizeof(inc));
	CHECK(strcmp(inc, inc1), "a restarted with the incarnation id of its previous process %s",
	      inc);
	printf("ok - a new process: epoch %llu (the one before held %llu), incarnation %s (was %s)\n",
	       (unsigned long long)e1, (unsigned long long)e3, inc, inc1);

	kvs_close(cb);
	test_kv_free(&kvb);
	cnode_stop(&a);
	cnode_stop(&b);
	ct_pass("incarnations: epochs and ids never repeat, in a process or across processes");
}
