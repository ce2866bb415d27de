/* SPDX-License-Identifier: MIT */
/*
 * Log floods (issue 11, item 9): lines a client can provoke over and over
 * are rate-limited ([log] ratelimit_burst = 10 per ratelimit_interval, an
 * hour here so one window covers the test), and what was dropped is
 * counted, not lost:
 *   - 2000 SQEs of an unknown opcode from one session: 10 lines, then
 *     "1990 similar log lines suppressed" when the session ends;
 *   - another session's one rejected SQE is logged all the same (the
 *     limit is per session);
 *   - 200 refused REGISTERs of one session: 10 lines, 190 counted;
 *   - 200 connections of one uid with a refused HELLO (limited per uid,
 *     since each connection is new): 10 lines, 190 counted.
 * Before, each of these wrote one line per request (65 MB/s of log).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"

#define BURST	 10
#define SQES	 2000
#define REGS	 200
#define HELLOS	 200
#define SUPPRESS " similar log lines suppressed"

/* Lines of the log holding @who and @what; the counts of dropped lines logged for @who. */
static void count(const struct kvsd *d, const char *who, const char *what, unsigned *ret_lines,
		  unsigned long *ret_dropped)
{
	char line[2048];
	FILE *f = fopen(d->log, "re");

	*ret_lines = 0;
	*ret_dropped = 0;
	CHECK(f, "%s", d->log);
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, SUPPRESS);

		if (!strstr(line, who))
			continue;
		if (strstr(line, what))
			(*ret_lines)++;
		if (p) {
			/* "...: N similar log lines suppressed" */
			while (p > line && p[-1] >= '0' && p[-1] <= '9')
				p--;
			*ret_dropped += strtoul(p, NULL, 10);
		}
	}
	fclose(f);
}

static void unknown_sqes(struct kvs_client *c, unsigned n)
{
	for (unsigned done = 0; done < n;) {
		unsigned batch = n - done < 64 ? n - done : 64;

		for (unsigned i = 0; i < batch; i++) {
			struct kvs_sqe *s = kvs_get_sqe(c);

			CHECK(s, "no SQE");
			CHECK_RES(kvs_prep_nop(c, s, done + i), 0, "prep");
			s->opcode = 0xff;
		}
		CHECK(kvs_submit(c) == (int)batch, "kvs_submit");
		for (unsigned i = 0; i < batch; i++) {
			struct kvs_cqe *e;

			CHECK_RES(kvs_wait_cqe(c, &e, OP_TIMEOUT_MS), 0, "kvs_wait_cqe");
			CHECK_RES(e->res, -EOPNOTSUPP, "an SQE of opcode 255");
			kvs_cqe_seen(c, e);
		}
		done += batch;
	}
}

static void refused_registers(struct kvs_client *c, unsigned n)
{
	struct kvs_layer l = { .name = "a",
			       .mem = 0,
			       .segments = 1,
			       .offset = 0,
			       .num_blocks = 16,
			       .segment_bytes = 4096,
			       .block_stride = 70000 };
	struct kvs_mem m = { .kind = KVS_MEM_HOST_FD, .size = 1u << 20 };
	void *p;

	CHECK_RES(kvs_host_alloc(1u << 20, &m.fd, &p), 0, "memory");
	/* Views past the allocation: each refused -ERANGE, nothing registered. */
	for (unsigned i = 0; i < n; i++)
		CHECK_RES(kvs_register(c, &m, 1, &l, 1, 0), -ERANGE, "a REGISTER past the memory");
	close(m.fd);
}

static void refused_hellos(const struct kvsd *d, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct kvs_msg_hello h;
		struct kvs_msg_hello_reply rep;
		int fd = raw_connect(d->sock), rfd;

		CHECK(fd >= 0, "connect");
		raw_hello_init(&h, KVS_ROLE_WORKER, "rl-hello", "rl/pf", 0, 1);
		h.role = 77;
		CHECK_RES(raw_hello(fd, &h, &rep, &rfd), -EINVAL, "a HELLO of role 77");
		close(fd);
	}
}

int main(void)
{
	struct kvs_client *a, *b, *c;
	unsigned lines;
	unsigned long dropped;
	long long size;
	char uid[32];
	struct kvsd d;
	FILE *f;
	int st;

	it_watchdog(120);
	it_start(&d, "[log]\nratelimit_interval = 1h\n");
	CHECK_RES(test_connect(&d, KVS_ROLE_SCHEDULER, "rl-sqe", "rl/pf", 0, 1, &a), 0, "a");
	CHECK_RES(test_connect(&d, KVS_ROLE_SCHEDULER, "rl-other", "rl/pf", 0, 1, &b), 0, "b");
	CHECK_RES(test_connect(&d, KVS_ROLE_WORKER, "rl-reg", "rl/pf", 0, 1, &c), 0, "c");

	unknown_sqes(a, SQES);
	unknown_sqes(b, 1);
	/* b's line passes a's limit: wait for it, as the worker writes it. */
	CHECK(wait_log_count(&d, "instance rl-other scheduler): SQE opcode 255 rejected", 1,
			     5000) == 1,
	      "another session's rejected SQE was not logged");
	refused_registers(c, REGS);
	refused_hellos(&d, HELLOS);
	kvs_close(a);
	kvs_close(b);
	kvs_close(c);

	/* A clean exit logs every count still held (sessions, then uids). */
	st = kvsd_stop(&d);
	CHECK(st == 0, "kvstashd exited with status %d", st);
	f = fopen(d.log, "re");
	CHECK(f && fseek(f, 0, SEEK_END) == 0, "log");
	size = ftell(f);
	fclose(f);

	count(&d, "instance rl-sqe scheduler): ", "SQE opcode 255 rejected", &lines, &dropped);
	CHECK(lines == BURST && lines + dropped == SQES,
	      "%u SQEs rejected: %u lines, %lu counted as dropped", SQES, lines, dropped);
	count(&d, "instance rl-other scheduler): ", "SQE opcode 255 rejected", &lines, &dropped);
	CHECK(lines == 1 && dropped == 0, "the other session: %u lines, %lu dropped", lines,
	      dropped);
	count(&d, "instance rl-reg rank 0): ", "REGISTER refused", &lines, &dropped);
	CHECK(lines == BURST && lines + dropped == REGS,
	      "%u REGISTERs refused: %u lines, %lu counted as dropped", REGS, lines, dropped);
	count(&d, "", "HELLO refused: unknown role 77", &lines, &dropped);
	CHECK(lines == BURST, "%u HELLOs refused: %u lines", HELLOS, lines);
	snprintf(uid, sizeof(uid), "uid %u: ", (unsigned)geteuid());
	count(&d, uid, SUPPRESS, &lines, &dropped);
	CHECK(dropped == HELLOS - BURST, "%u HELLOs refused: %lu counted as dropped", HELLOS,
	      dropped);
	CHECK(size < 64 * 1024, "the log holds %lld bytes", size);
	kvsd_cleanup(&d);
	it_ok("%u rejected SQEs, %u refused REGISTERs, %u refused HELLOs: %u lines each, the rest "
	      "counted; another session's line kept; %lld bytes of log",
	      SQES, REGS, HELLOS, BURST, size);
	return 0;
}
