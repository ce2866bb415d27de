/* SPDX-License-Identifier: MIT */
/*
 * Three nodes, several namespaces and geometries:
 *   - each node finds the others' blocks, with the holder's name, epoch
 *     and peer address, and the longest run first when two hold a prefix;
 *   - the run stops at the first key a holder lacks, also inside a later
 *     query chunk (runs over chunk boundaries add up);
 *   - the same namespace name with another geometry (layers, segment
 *     size, shards) never matches, nor does another namespace name;
 *   - several namespaces of one node do not mix.
 */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "rtest.h"

static void call_ok(struct node *n, const char *cmd, const char *want)
{
	char out[4096];

	CHECK(node_call(n, 20000, out, sizeof(out), "%s", cmd) == 0, "%s: %s: no answer", n->name,
	      cmd);
	CHECK(!strcmp(out, want), "%s: %s: '%s', not '%s'", n->name, cmd, out, want);
}

/* Query from @n; the answer must start with @fmt's (the holders' epochs: H(i)). */
static void query(struct node *n, const char *q, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void query(struct node *n, const char *q, const char *fmt, ...)
{
	char out[4096], want[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(want, sizeof(want), fmt, ap);
	va_end(ap);

	CHECK(node_call(n, 20000, out, sizeof(out), "query %s 5000", q) == 0, "%s: query %s",
	      n->name, q);
	CHECK(!strncmp(out, want, strlen(want)), "%s: query %s: '%s', want '%s...'", n->name, q,
	      out, want);
}

static void flush(struct node *n)
{
	char out[256];
	int st;
	unsigned long long d, x;

	CHECK(node_call(n, 30000, out, sizeof(out), "flush 20000") == 0 &&
		      sscanf(out, "flush %d %llu %llu", &st, &d, &x) == 3 && st == 0 && x == 0,
	      "%s: flush: %s", n->name, out);
}

int main(void)
{
	struct redis rd = { 0 };
	struct node n[3];
	const char *names[3] = { "alpha", "beta", "gamma" };
	const char *peers[3] = { "10.1.0.1:7100", "10.1.0.2:7100", "10.1.0.3:7100" };
	unsigned long long ep[3];

	rtest_init();
	CHECK(redis_start(&rd) == 0, "redis-server did not start");
	for (int i = 0; i < 3; i++) {
		CHECK(node_start(&n[i], &rd, names[i], "--peer", peers[i], NULL) == 0, "start");
		/* ns 0: the model; 1: same name, other segment size; 2: same, more layers;
		 * 3: same, tp 2; 4: another name, same geometry. */
		call_ok(&n[i], "geom 0 llama/bf16 32 2 8192 1 0", "ok");
		call_ok(&n[i], "geom 1 llama/bf16 32 2 4096 1 0", "ok");
		call_ok(&n[i], "geom 2 llama/bf16 40 2 8192 1 0", "ok");
		call_ok(&n[i], "geom 3 llama/bf16 32 2 8192 2 0", "ok");
		call_ok(&n[i], "geom 4 qwen/bf16 32 2 8192 1 0", "ok");
	}
	for (int i = 0; i < 3; i++)
		CHECK(node_wait_state(&n[i], "ready", 20000) == 0, "%s never ready", names[i]);
	/* The holders' epochs, as their leases have them (above the wall clock's ms). */
	for (int i = 0; i < 3; i++)
		ep[i] = node_stat(&n[i], "epoch");

	/* alpha holds 3000 of prefix 1 and beta 1500 of it; gamma the first 2500 of prefix 2. */
	call_ok(&n[0], "insert 0 1 0 3000", "ok 3000");
	call_ok(&n[1], "insert 0 1 0 1500", "ok 1500");
	call_ok(&n[2], "insert 0 2 0 2500", "ok 2500");
	/* alpha, namespace 3 (tp 2): prefix 5 */
	call_ok(&n[0], "insert 3 5 0 100", "ok 100");
	for (int i = 0; i < 3; i++)
		flush(&n[i]);

	query(&n[2], "0 1 0 4000",
	      "query 0 3000 2 alpha:3000:%llu:10.1.0.1:7100 beta:1500:%llu:10.1.0.2:7100", ep[0],
	      ep[1]);
	/* beta asks: alpha only (itself excluded), over the 1024-key chunk boundaries. */
	query(&n[1], "0 1 0 4000", "query 0 3000 1 alpha:3000:");
	/* A window of the prefix: from key 1000 on, alpha still leads. */
	query(&n[2], "0 1 1000 4000",
	      "query 0 2000 2 alpha:2000:%llu:10.1.0.1:7100 beta:500:", ep[0]);
	/* Exactly a chunk, and one key past alpha's end. */
	query(&n[2], "0 1 0 1024", "query 0 1024 2 "); /* a tie: both */
	query(&n[2], "0 1 2000 1001", "query 0 1000 1 alpha:1000:");
	query(&n[0], "0 2 0 2600", "query 0 2500 1 gamma:2500:%llu:10.1.0.3:7100", ep[2]);

	/* Another geometry of the same name, or another name: nothing. */
	query(&n[2], "1 1 0 100", "query 0 0 0");
	query(&n[2], "2 1 0 100", "query 0 0 0");
	query(&n[2], "3 1 0 100", "query 0 0 0");
	query(&n[2], "4 1 0 100", "query 0 0 0");
	/* alpha's tp-2 blocks exist under namespace 3 only. */
	query(&n[1], "3 5 0 100", "query 0 100 1 alpha:100:");
	query(&n[1], "0 5 0 100", "query 0 0 0");

	/* A hole in alpha's run: the prefix ends there; beta's shorter run is unaffected. */
	call_ok(&n[0], "remove 0 1 700 1", "ok 1");
	flush(&n[0]);
	query(&n[2], "0 1 0 4000", "query 0 1500 2 beta:1500:%llu:10.1.0.2:7100 alpha:700:", ep[1]);

	for (int i = 0; i < 3; i++)
		CHECK(node_stop(&n[i]) == 0, "%s exit", names[i]);
	printf("ok - registry: three nodes, namespaces and geometries\n");
	rtest_pass();
}
