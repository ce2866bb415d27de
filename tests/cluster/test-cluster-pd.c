/* SPDX-License-Identifier: MIT */
/*
 * The prefill/decode handoff example (examples/pd-handoff.c) between two
 * kvstashd nodes with the peer service on one real redis-server: prefill
 * ranks SAVE, rank 0 FLUSHes the instance to the cluster and tells decode
 * its node's peer address through a pipe, decode's scheduler QUERYs with
 * fetch, decode's ranks LOAD, every byte compared by the example:
 *   - tp 2 with the node hint, 33 blocks, three requests;
 *   - tp 1 without a hint (the registry finds the holder);
 *   - the prefill node SIGKILLed before decode asks: decode's QUERY answers
 *     0 hits within the deadline (the engine recomputes), no error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "ctest.h"

/* Run the example between @p and @d; its exit status, its output's "run 0" row into @row. */
static int example(const struct cnode *p, const struct cnode *d, const char *args, char *row,
		   size_t rowlen)
{
	const char *b = getenv("top_builddir");
	char cmd[2048], line[512];
	FILE *f;
	int st;

	snprintf(cmd, sizeof(cmd),
		 "%s/examples/kvstash-example-pd --prefill-socket %s --decode-socket %s "
		 "--layers 8 --segment-bytes 16384 %s 2>&1",
		 b ? b : ".", p->d.sock, d->d.sock, args);
	f = popen(cmd, "r");
	CHECK(f, "popen %s", cmd);
	row[0] = '\0';
	while (fgets(line, sizeof(line), f)) {
		fputs(line, stdout);
		if (!strncmp(line, "0 ", 2))
			snprintf(row, rowlen, "%s", line);
	}
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static const char pool[] = "[pool]\nsize = 64M\nextent_size = 1M\n";

int main(void)
{
	struct redis rd = { 0 };
	struct cnode a, b, c;
	char args[256], row[512];
	int r, hits = -1;

	ct_init(300);
	ct_redis_start(&rd);
	cnode_start_peer(&a, &rd, "prefill", "fetch_timeout = 3s\n", pool);
	cnode_start_peer(&b, &rd, "decode", "fetch_timeout = 3s\n", pool);
	ct_wait_lease(&rd, "prefill", 0);
	ct_wait_lease(&rd, "decode", 0);

	snprintf(args, sizeof(args), "--tp 2 --blocks 33 --runs 3 --hint %s --ns pd/tp2", a.peer);
	r = example(&a, &b, args, row, sizeof(row));
	CHECK(r == 0, "tp 2 handoff with the hint: exit %d", r);
	printf("ok - tp 2 handoff by node hint, 33 blocks, three requests, byte-exact\n");

	r = example(&a, &b, "--tp 1 --blocks 33 --runs 2 --ns pd/tp1", row, sizeof(row));
	CHECK(r == 0, "tp 1 handoff through the registry: exit %d", r);
	printf("ok - tp 1 handoff through the registry, byte-exact\n");

	/*
	 * The prefill node gone before decode asks: prefill runs on c, but the
	 * hint names a, killed; its blocks cannot come and decode recomputes.
	 */
	cnode_start_peer(&c, &rd, "other", "fetch_timeout = 3s\n", pool);
	cnode_kill(&a);
	snprintf(args, sizeof(args), "--tp 1 --blocks 33 --runs 1 --hint %s --allow-partial", a.peer);
	r = example(&c, &b, args, row, sizeof(row));
	sscanf(row, "%*u %d", &hits);
	CHECK(r == 0 && hits == 0, "prefill node dead: exit %d, %d hits (want 0, 0)", r, hits);
	printf("ok - prefill node dead: decode's QUERY answers 0 hits, no error\n");

	cnode_stop(&b);
	cnode_stop(&c);
	ct_pass("prefill/decode handoff example");
}
