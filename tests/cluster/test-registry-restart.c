/* SPDX-License-Identifier: MIT */
/*
 * Redis failures mid-traffic, two nodes inserting and querying all along:
 *   - connection killed (CLIENT KILL; the data stays): each node
 *     reconnects, takes a new epoch and backfills what is resident;
 *   - Redis SIGKILLed and restarted empty on the same port: the same, from
 *     nothing; meanwhile every node command returns (queries answer
 *     "none" or -ENOTCONN, flushes complete with drops), none hangs;
 *   - afterwards each node's resident blocks, and only those (a block
 *     removed while Redis was down stays gone), are found again.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "rtest.h"

static void call(struct node *n, int tmo, char *out, size_t len, const char *cmd)
{
	CHECK(node_call(n, tmo, out, len, "%s", cmd) == 0, "%s: '%s' hung", n->name, cmd);
}

/* Poll @from's query until it answers @want (a prefix of the answer). */
static void wait_query(struct node *from, const char *q, const char *want)
{
	char out[4096];

	for (uint64_t end = now_ms() + 60000;;) {
		call(from, 20000, out, sizeof(out), q);
		if (!strncmp(out, want, strlen(want)))
			return;
		CHECK(now_ms() < end, "%s: %s: '%s', never '%s'", from->name, q, out, want);
		usleep(20000);
	}
}

/* Traffic while Redis is away: every call returns, flushes report drops. */
static void traffic(struct node *a, struct node *b, int round)
{
	char out[4096], cmd[128];
	int st;
	unsigned long long d, dr;

	snprintf(cmd, sizeof(cmd), "insert 0 %d 0 50", 100 + round);
	call(a, 20000, out, sizeof(out), cmd);
	call(b, 20000, out, sizeof(out), "query 0 1 0 2000 300");
	CHECK(!strncmp(out, "query ", 6), "query answer: %s", out);
	call(a, 30000, out, sizeof(out), "flush 1000");
	CHECK(sscanf(out, "flush %d %llu %llu", &st, &d, &dr) == 3 && (st == 0 || st == -ETIMEDOUT),
	      "flush answer: %s", out);
}

int main(void)
{
	struct redis rd = { 0 };
	struct node a, b;
	char out[4096];
	uint64_t e0, e1;

	rtest_init();
	CHECK(redis_start(&rd) == 0, "redis-server did not start");
	CHECK(node_start(&a, &rd, "node-a", NULL) == 0 && node_start(&b, &rd, "node-b", NULL) == 0,
	      "start");
	call(&a, 5000, out, sizeof(out), "geom 0 m 8 2 2048 1 0");
	call(&b, 5000, out, sizeof(out), "geom 0 m 8 2 2048 1 0");
	CHECK(node_wait_state(&a, "ready", 20000) == 0 && node_wait_state(&b, "ready", 20000) == 0,
	      "not ready");
	call(&a, 20000, out, sizeof(out), "insert 0 1 0 2000");
	call(&b, 20000, out, sizeof(out), "insert 0 2 0 1000");
	call(&a, 20000, out, sizeof(out), "flush 10000");
	call(&b, 20000, out, sizeof(out), "flush 10000");
	wait_query(&b, "query 0 1 0 2000 5000", "query 0 2000 1 node-a:2000:");
	e0 = node_stat(&a, "epoch");

	/* ---- the connections killed, the data kept ---- */
	CHECK(redis_cmd(&rd, out, sizeof(out), "CLIENT KILL TYPE normal") == 0, "CLIENT KILL");
	traffic(&a, &b, 0);
	CHECK(node_wait_state(&a, "ready", 30000) == 0 && node_wait_state(&b, "ready", 30000) == 0,
	      "no reconnect after CLIENT KILL");
	e1 = node_stat(&a, "epoch");
	CHECK(e1 > e0, "reconnected under the old epoch %llu", (unsigned long long)e0);
	wait_query(&b, "query 0 1 0 2000 5000", "query 0 2000 1 node-a:2000:");
	wait_query(&a, "query 0 2 0 1000 5000", "query 0 1000 1 node-b:1000:");

	/* ---- Redis killed, and restarted empty ---- */
	redis_stop(&rd);
	for (int i = 1; i <= 3; i++)
		traffic(&a, &b, i);
	/* A block evicted while Redis is down: its remove is lost, the backfill must not bring it back. */
	call(&a, 20000, out, sizeof(out), "remove 0 1 1500 1");
	CHECK(node_wait_state(&a, "disconnected", 30000) == 0, "a does not see Redis gone");
	CHECK(redis_restart(&rd) == 0, "redis-server did not restart on port %d", rd.port);
	for (int i = 4; i <= 6; i++)
		traffic(&a, &b, i);
	CHECK(node_wait_state(&a, "ready", 30000) == 0 && node_wait_state(&b, "ready", 30000) == 0,
	      "no reconnect after the restart");
	wait_query(&b, "query 0 1 0 2000 5000", "query 0 1500 1 node-a:1500:");
	wait_query(&a, "query 0 2 0 1000 5000", "query 0 1000 1 node-b:1000:");
	wait_query(&b, "query 0 106 0 50 5000", "query 0 50 1 node-a:50:");
	/*
	 * Empty: the counters started over, but a process's epochs never
	 * repeat (the ACQUIRE's floor is the last epoch it held).
	 */
	CHECK(redis_cmd(&rd, out, sizeof(out), "GET kvs:test:epoch:node-a") == 0 &&
		      strtoull(out, NULL, 10) > e1 && node_stat(&a, "epoch") > e1,
	      "epoch counter %s after an empty restart (was %llu): an epoch repeated", out,
	      (unsigned long long)e1);
	CHECK(node_stat(&a, "backfilled") >= 2000 + 1500, "backfill not counted");
	CHECK(node_stop(&a) == 0 && node_stop(&b) == 0, "exit status");
	printf("ok - registry: reconnect, new epoch and backfill after Redis failures\n");
	rtest_pass();
}
