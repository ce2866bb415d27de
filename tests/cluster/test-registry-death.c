/* SPDX-License-Identifier: MIT */
/*
 * Node liveness and fencing:
 *   - SIGKILL: the dead node's lease has at most one TTL left (PTTL); once
 *     Redis expired it, its blocks are not answered (no sweeper ran);
 *   - SIGSTOP past the TTL, then SIGCONT: while its lease is gone nothing
 *     of it is answered; it comes back only under a new, higher epoch (it
 *     re-acquired and backfilled), never under the old one;
 *   - takeover fencing: a second process with the same node name takes
 *     the lease over; the first one's next registrations are refused by
 *     Redis (FENCED) and counted as dropped, it does not re-advertise
 *     while the other lives (conflict), and takes the node back, with a
 *     new epoch and its resident blocks, once the other died.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "rtest.h"

#define TTL "3000"

static void call_ok(struct node *n, const char *cmd, const char *want)
{
	char out[4096];

	CHECK(node_call(n, 20000, out, sizeof(out), "%s", cmd) == 0 && !strcmp(out, want),
	      "%s: %s: '%s', not '%s'", n->name, cmd, out, want);
}

static void flush_ok(struct node *n)
{
	char out[256];
	unsigned long long d, dr;
	int st;

	CHECK(node_call(n, 30000, out, sizeof(out), "flush 20000") == 0 &&
		      sscanf(out, "flush %d %llu %llu", &st, &d, &dr) == 3 && st == 0 && dr == 0,
	      "%s: flush: %s", n->name, out);
}

/* The holder and epoch answered to @from for prefix @seed, @n keys: "" when none. */
static void holder(struct node *from, int seed, int n, char *who, size_t len, uint64_t *epoch)
{
	char out[4096], *p;
	int st;
	unsigned best, nh;

	CHECK(node_call(from, 20000, out, sizeof(out), "query 0 %d 0 %d 5000", seed, n) == 0 &&
		      sscanf(out, "query %d %u %u", &st, &best, &nh) == 3 && st == 0,
	      "query: %s", out);
	who[0] = '\0';
	*epoch = 0;
	if (!nh)
		return;
	p = strchr(out + 6, ' ');
	p = strchr(p + 1, ' ');
	p = strchr(p + 1, ' ') + 1;
	snprintf(who, len, "%.*s", (int)strcspn(p, ":"), p);
	p = strchr(strchr(p, ':') + 1, ':') + 1;
	*epoch = strtoull(p, NULL, 10);
	CHECK(best == (unsigned)n, "a partial run %u of %d: %s", best, n, out);
}

static int64_t redis_int(struct redis *rd, const char *cmd, const char *key)
{
	char out[256];

	CHECK(redis_cmd(rd, out, sizeof(out), "%s %s", cmd, key) == 0, "%s %s", cmd, key);
	return strtoll(out, NULL, 10);
}

static void wait_gone(struct redis *rd, const char *key)
{
	uint64_t end = now_ms() + 30000;

	while (redis_int(rd, "EXISTS", key) && now_ms() < end)
		usleep(10000);
	CHECK(!redis_int(rd, "EXISTS", key), "%s never expired", key);
}

int main(void)
{
	struct redis rd = { 0 };
	struct node a, b, x, x2;
	char who[64];
	uint64_t e1, e;
	int64_t pttl;

	rtest_init();
	CHECK(redis_start(&rd) == 0, "redis-server did not start");
	CHECK(node_start(&a, &rd, "node-a", "--ttl", TTL, NULL) == 0, "start a");
	CHECK(node_start(&b, &rd, "node-b", "--ttl", TTL, NULL) == 0, "start b");
	call_ok(&a, "geom 0 m 4 1 65536 1 0", "ok");
	call_ok(&b, "geom 0 m 4 1 65536 1 0", "ok");
	CHECK(node_wait_state(&a, "ready", 20000) == 0 && node_wait_state(&b, "ready", 20000) == 0,
	      "not ready");

	/* ---- SIGKILL ---- */
	call_ok(&a, "insert 0 1 0 500", "ok 500");
	flush_ok(&a);
	holder(&b, 1, 500, who, sizeof(who), &e);
	CHECK(!strcmp(who, "node-a"), "before the kill: '%s'", who);
	node_kill(&a, SIGKILL);
	pttl = redis_int(&rd, "PTTL", "kvs:test:lease:node-a");
	CHECK(pttl > 0 && pttl <= 3000, "the dead node's lease has %lld ms left, more than its TTL",
	      (long long)pttl);
	wait_gone(&rd, "kvs:test:lease:node-a");
	/* Its entries are still in Redis (nothing swept them) but not answered. */
	{
		char out[64];

		/* Its run sets (sidecar/cluster/scripts.h) still hold all 500. */
		CHECK(redis_cmd(&rd, out, sizeof(out), "EVAL %s 0 kvs:test:n:node-a:*",
				"local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do "
				"n = n + redis.call('SCARD', k) end return n") == 0 &&
			      atoll(out) >= 500,
		      "entries were deleted: %s left", out);
	}
	holder(&b, 1, 500, who, sizeof(who), &e);
	CHECK(!who[0], "a dead node's blocks answered: %s", who);

	/* ---- SIGSTOP past the TTL ---- */
	CHECK(node_start(&a, &rd, "node-a", "--ttl", TTL, NULL) == 0, "restart a");
	call_ok(&a, "geom 0 m 4 1 65536 1 0", "ok");
	CHECK(node_wait_state(&a, "ready", 20000) == 0, "a not ready again");
	call_ok(&a, "insert 0 2 0 300", "ok 300");
	flush_ok(&a);
	holder(&b, 2, 300, who, sizeof(who), &e1);
	CHECK(!strcmp(who, "node-a") && e1 >= 2, "a restarted node has a new epoch: %s %llu", who,
	      (unsigned long long)e1);
	node_kill(&a, SIGSTOP);
	wait_gone(&rd, "kvs:test:lease:node-a");
	holder(&b, 2, 300, who, sizeof(who), &e);
	CHECK(!who[0], "a stopped node's blocks answered after its lease expired");
	node_kill(&a, SIGCONT);
	/* Back only with a new epoch; every answer until then is "none". */
	for (uint64_t end = now_ms() + 30000;;) {
		holder(&b, 2, 300, who, sizeof(who), &e);
		if (who[0]) {
			CHECK(!strcmp(who, "node-a") && e > e1,
			      "re-advertised under epoch %llu (old %llu)", (unsigned long long)e,
			      (unsigned long long)e1);
			break;
		}
		CHECK(now_ms() < end, "never came back after SIGCONT");
		usleep(10000);
	}
	CHECK(node_stat(&a, "leases_lost") >= 1, "the lost lease is not counted");

	/* ---- takeover fencing ---- */
	CHECK(node_start(&x, &rd, "node-x", "--ttl", "60000", "--command-timeout", "5000", NULL) ==
		      0,
	      "start x");
	call_ok(&x, "geom 0 m 4 1 65536 1 0", "ok");
	CHECK(node_wait_state(&x, "ready", 20000) == 0, "x not ready");
	call_ok(&x, "insert 0 3 0 200", "ok 200");
	flush_ok(&x);
	CHECK(node_start(&x2, &rd, "node-x", "--ttl", TTL, NULL) == 0, "start x2");
	call_ok(&x2, "geom 0 m 4 1 65536 1 0", "ok");
	CHECK(node_wait_state(&x2, "ready", 20000) == 0, "x2 not ready");
	/* x renews every 20 s: it has not noticed; Redis refuses its writes. */
	call_ok(&x, "insert 0 4 0 100", "ok 100");
	{
		char out[256];
		int st;
		unsigned long long d, dr;

		CHECK(node_call(&x, 30000, out, sizeof(out), "flush 20000") == 0 &&
			      sscanf(out, "flush %d %llu %llu", &st, &d, &dr) == 3 && st == 0 &&
			      dr == 100,
		      "x's fenced flush: %s", out);
	}
	CHECK(node_stat(&x, "dropped_failed") == 100, "fenced changes not counted as failed");
	holder(&b, 4, 100, who, sizeof(who), &e);
	CHECK(!who[0], "a fenced node advertised %s", who);
	holder(&b, 3, 200, who, sizeof(who), &e);
	CHECK(!who[0], "x's old-epoch blocks answered");
	CHECK(node_wait_state(&x, "conflict", 20000) == 0, "x not in conflict");
	/* x2 dies: x takes its node back with a new epoch and backfills. */
	node_kill(&x2, SIGKILL);
	CHECK(node_wait_state(&x, "ready", 30000) == 0, "x never took its node back");
	for (uint64_t end = now_ms() + 30000;;) {
		holder(&b, 4, 100, who, sizeof(who), &e);
		if (who[0])
			break;
		CHECK(now_ms() < end, "x's blocks never re-registered");
		usleep(10000);
	}
	CHECK(!strcmp(who, "node-x"), "holder %s", who);

	CHECK(node_stop(&a) == 0 && node_stop(&b) == 0 && node_stop(&x) == 0, "exit status");
	printf("ok - registry: node death, lease expiry and epoch fencing\n");
	rtest_pass();
}
