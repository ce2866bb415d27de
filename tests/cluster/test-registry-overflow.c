/* SPDX-License-Identifier: MIT */
/*
 * Queue overflow: with Redis not answering (SIGSTOP), the registry takes
 * what its batches in flight hold and the queue (64 entries here) fills;
 * every further insert is refused at once and counted: the producer's
 * call returns (enqueued + dropped_overflow = all it offered), nothing
 * blocks.  A flush after Redis answers again reports the overflow among
 * its drops; later inserts are delivered normally.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "rtest.h"

#define OFFER 200000u

int main(void)
{
	struct redis rd = { 0 };
	struct node a, b;
	char out[4096];
	unsigned enq;
	unsigned long long d, dr, enqueued, over;
	int st;

	rtest_init();
	CHECK(redis_start(&rd) == 0, "redis-server did not start");
	CHECK(node_start(&a, &rd, "node-a", "--queue", "64", "--ttl", "60000", "--command-timeout",
			 "20000", NULL) == 0,
	      "start a");
	CHECK(node_start(&b, &rd, "node-b", NULL) == 0, "start b");
	CHECK(node_call(&a, 5000, out, sizeof(out), "geom 0 m 2 1 4096 1 0") == 0, "geom");
	CHECK(node_call(&b, 5000, out, sizeof(out), "geom 0 m 2 1 4096 1 0") == 0, "geom");
	CHECK(node_wait_state(&a, "ready", 20000) == 0, "a not ready");

	redis_kill(&rd, SIGSTOP);
	/* The producer thread's registry_insert() must return whatever the queue holds. */
	CHECK(node_call(&a, 60000, out, sizeof(out), "insert 0 1 0 %u", OFFER) == 0 &&
		      sscanf(out, "ok %u", &enq) == 1,
	      "insert into a full queue did not return: %s", out);
	CHECK(enq < OFFER, "everything fit: %u", enq);
	enqueued = node_stat(&a, "enqueued");
	over = node_stat(&a, "dropped_overflow");
	CHECK(enqueued == enq && over == OFFER - enq,
	      "enqueued %llu + dropped_overflow %llu != %u offered (%u fit)", enqueued, over, OFFER,
	      enq);
	/* More of the same: each refused entry counted, never a wait. */
	CHECK(node_call(&a, 60000, out, sizeof(out), "insert 0 2 0 1000") == 0 &&
		      sscanf(out, "ok %u", &enq) == 1 && enq <= 64,
	      "a full queue took more than it holds: %s", out);
	CHECK(node_stat(&a, "enqueued") + node_stat(&a, "dropped_overflow") == OFFER + 1000,
	      "second overflow not counted");
	over = node_stat(&a, "dropped_overflow");

	redis_kill(&rd, SIGCONT);
	CHECK(node_call(&a, 60000, out, sizeof(out), "flush 30000") == 0 &&
		      sscanf(out, "flush %d %llu %llu", &st, &d, &dr) == 3 && st == 0 &&
		      d + dr == OFFER + 1000 && dr >= over,
	      "flush after overflow: %s (overflow %llu)", out, over);
	CHECK(node_call(&a, 20000, out, sizeof(out), "insert 0 3 0 50") == 0 &&
		      !strcmp(out, "ok 50"),
	      "the queue did not recover: %s", out);
	CHECK(node_call(&a, 60000, out, sizeof(out), "flush 30000") == 0 &&
		      sscanf(out, "flush %d %llu %llu", &st, &d, &dr) == 3 && st == 0 &&
		      d + dr == 50 && dr == 0,
	      "flush after recovery (the 50 since the last flush): %s", out);
	/*
	 * b's own connection timed out while Redis was stopped; it answers
	 * -ENOTCONN until it has reconnected and re-registered (backoff up to
	 * 2 s), so wait for it the way an engine would retry.
	 */
	for (int i = 0; i < 40; i++) {
		CHECK(node_wait_state(&b, "ready", 20000) == 0, "b not ready after Redis resumed");
		CHECK(node_call(&b, 20000, out, sizeof(out), "query 0 3 0 50 5000") == 0,
		      "query: %s", out);
		if (strncmp(out, "query -107 ", 11))
			break;
		usleep(250 * 1000);
	}
	CHECK(!strncmp(out, "query 0 50 1 node-a:50:", 23), "after recovery: %s", out);
	CHECK(node_stop(&a) == 0 && node_stop(&b) == 0, "exit status");
	printf("ok - registry: queue overflow counted, enqueue never blocks\n");
	rtest_pass();
}
