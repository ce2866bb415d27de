/* SPDX-License-Identifier: MIT */
/*
 * The flush barrier, with a real redis-server and two node processes:
 *   - delivered before ack: every insert enqueued before the mark is
 *     visible to the other node's cluster query when the flush completes
 *     (and the flush reports them delivered, none dropped); removes too;
 *     each flush counts what came since the one before;
 *   - owners alternating: 10000 changes of one key, owners 0 and 1 in
 *     turn, taken in one go (netted to one change, but 10000 runs of
 *     owners, more than a batch holds): each owner's flush reports its
 *     5000, everyone's all 10000;
 *   - ack on drop: with inserts failing for good (Redis refuses writes:
 *     maxmemory 1 with noeviction), the flush completes, reporting every
 *     change before the mark as dropped, and never more delivered;
 *   - no hang: a flush pending on a Redis that does not answer (SIGSTOP)
 *     completes when the node shuts down.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "rtest.h"

#define N 20000

static void geom(struct node *n)
{
	char out[256];

	CHECK(node_call(n, 5000, out, sizeof(out), "geom 0 qwen3-8b/bf16 36 2 4096 1 0") == 0 &&
		      !strcmp(out, "ok"),
	      "geom: %s", out);
}

int main(void)
{
	struct redis rd = { 0 };
	struct node a, b;
	char out[4096], want[128];
	unsigned long long del, drop;
	int st;

	rtest_init();
	CHECK(redis_start(&rd) == 0, "redis-server did not start");
	CHECK(node_start(&a, &rd, "node-a", "--peer", "10.0.0.1:7000", "--ttl", "60000",
			 "--command-timeout", "20000", NULL) == 0,
	      "start a");
	CHECK(node_start(&b, &rd, "node-b", NULL) == 0, "start b");
	geom(&a);
	geom(&b);
	CHECK(node_wait_state(&a, "ready", 20000) == 0, "node a never ready");
	CHECK(node_wait_state(&b, "ready", 20000) == 0, "node b never ready");

	/* ---- delivered before ack ---- */
	CHECK(node_call(&a, 10000, out, sizeof(out), "insert 0 7 0 %d", N) == 0, "insert");
	snprintf(want, sizeof(want), "ok %d", N);
	CHECK(!strcmp(out, want), "insert: %s", out);
	CHECK(node_call(&a, 20000, out, sizeof(out), "flush 10000") == 0, "flush never completed");
	CHECK(sscanf(out, "flush %d %llu %llu", &st, &del, &drop) == 3 && st == 0 && del == N &&
		      drop == 0,
	      "flush after %d inserts: %s", N, out);
	/* At once, no polling: the barrier promises visibility when it completes. */
	CHECK(node_call(&b, 10000, out, sizeof(out), "query 0 7 0 %d 5000", N) == 0, "query");
	snprintf(want, sizeof(want), "query 0 %d 1 node-a:%d:", N, N);
	CHECK(!strncmp(out, want, strlen(want)) && strstr(out, ":10.0.0.1:7000"),
	      "b's query right after a's flush: %s", out);

	/* Removes are changes too: after the flush the prefix ends at the hole. */
	CHECK(node_call(&a, 10000, out, sizeof(out), "remove 0 7 5000 1") == 0 &&
		      !strcmp(out, "ok 1"),
	      "remove: %s", out);
	CHECK(node_call(&a, 20000, out, sizeof(out), "flush 10000") == 0, "flush 2");
	CHECK(sscanf(out, "flush %d %llu %llu", &st, &del, &drop) == 3 && st == 0 && del == 1 &&
		      drop == 0,
	      "flush after a remove (what came since the last flush): %s", out);
	CHECK(node_call(&b, 10000, out, sizeof(out), "query 0 7 0 %d 5000", N) == 0, "query 2");
	CHECK(!strncmp(out, "query 0 5000 1 node-a:5000:", 27), "after the remove: %s", out);
	/* A node never answers itself. */
	CHECK(node_call(&a, 10000, out, sizeof(out), "query 0 7 0 %d 5000", N) == 0, "query 3");
	CHECK(!strncmp(out, "query 0 0 0", 11), "a's own blocks answered to a: %s", out);

	/* ---- owners alternating: more runs than a batch has room for ---- */
	CHECK(node_call(&a, 10000, out, sizeof(out), "alternate 0 11 0 10000") == 0 &&
		      !strcmp(out, "ok 10000"),
	      "alternate: %s", out);
	for (int t = 0; t < 2; t++) {
		CHECK(node_call(&a, 20000, out, sizeof(out), "tflush %d 10000", t) == 0,
		      "owner %d's flush never completed", t);
		CHECK(sscanf(out, "flush %d %llu %llu", &st, &del, &drop) == 3 && st == 0 &&
			      del == 5000 && drop == 0,
		      "owner %d's flush after 5000 changes of its own: %s (want 0 5000 0)", t, out);
	}
	CHECK(node_call(&a, 20000, out, sizeof(out), "flush 10000") == 0, "flush 3");
	CHECK(sscanf(out, "flush %d %llu %llu", &st, &del, &drop) == 3 && st == 0 && del == 10000 &&
		      drop == 0,
	      "everyone's flush after the owners' 10000: %s", out);

	/* ---- ack on drop: permanent insert failure ---- */
	CHECK(redis_cmd(&rd, out, sizeof(out), "CONFIG SET maxmemory-policy noeviction") == 0 &&
		      redis_cmd(&rd, out, sizeof(out), "CONFIG SET maxmemory 1") == 0 &&
		      !strcmp(out, "OK"),
	      "CONFIG SET maxmemory: %s", out);
	CHECK(node_call(&a, 10000, out, sizeof(out), "insert 0 8 0 3000") == 0 &&
		      !strcmp(out, "ok 3000"),
	      "insert under maxmemory: %s", out);
	CHECK(node_call(&a, 30000, out, sizeof(out), "flush 20000") == 0,
	      "flush over failing inserts never completed");
	CHECK(sscanf(out, "flush %d %llu %llu", &st, &del, &drop) == 3 && st == 0 && del == 0 &&
		      drop == 3000,
	      "flush over failing inserts: %s (want 0 0 3000)", out);
	CHECK(node_stat(&a, "dropped_failed") == 3000, "dropped_failed");
	CHECK(redis_cmd(&rd, out, sizeof(out), "CONFIG SET maxmemory 0") == 0, "maxmemory 0");
	CHECK(node_call(&b, 10000, out, sizeof(out), "query 0 8 0 3000 5000") == 0 &&
		      !strncmp(out, "query 0 0 0", 11),
	      "dropped inserts are visible: %s", out);

	/* ---- no hang: a flush pending when the node shuts down completes ---- */
	redis_kill(&rd, SIGSTOP);
	CHECK(node_call(&a, 10000, out, sizeof(out), "insert 0 9 0 10") == 0, "insert 3");
	/* Taken from the queue: in flight to a Redis that does not answer (20 s timeout). */
	for (uint64_t end = now_ms() + 20000; node_stat(&a, "depth") != 0 && now_ms() < end;)
		usleep(1000);
	CHECK(node_stat(&a, "depth") == 0, "the batch never left the queue");
	unsigned long fid = node_send(&a, "flush 600000");
	unsigned long sid = node_send(&a, "shutdown");

	CHECK(node_wait(&a, fid, 20000, out, sizeof(out)) == 0, "the flush hung at shutdown");
	CHECK(sscanf(out, "flush %d %llu %llu", &st, &del, &drop) == 3 && st == -ESHUTDOWN &&
		      del == 0 && drop == 10,
	      "flush at shutdown (the 10 in flight): %s", out);
	CHECK(node_wait(&a, sid, 20000, out, sizeof(out)) == 0 && !strcmp(out, "closed"),
	      "shutdown did not close: %s", out);
	CHECK(node_stop(&a) == 0, "node a exit status");
	redis_kill(&rd, SIGCONT);
	CHECK(node_stop(&b) == 0, "node b exit status");
	printf("ok - registry flush: delivered before ack, ack on drop, no hang at shutdown\n");
	rtest_pass();
}
