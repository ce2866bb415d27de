/* SPDX-License-Identifier: MIT */
/*
 * STATUS and STATS at max_sessions (issue 11, item 11).  With the default
 * max_sessions = 256 sessions connected, a reply is a train of ~260
 * packets, more than a socket buffer holds:
 *   - a reader that asks STATUS and reads nothing keeps its session
 *     (kvstashd used to send with MSG_DONTWAIT and hang up on the first
 *     full buffer, from about 176 sessions), and meanwhile kvstashd
 *     serves everyone else (the queued reply never blocks its loop);
 *   - once read, the train holds every session, each exactly once;
 *   - `kvstash status --json` and `kvstash stats --json` list all 256.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "itest.h"

#define SESSIONS 256 /* [server] max_sessions, default */

static struct kvsd d;
static int fds[SESSIONS];
static uint64_t ids[SESSIONS];

static void connect_all(void)
{
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	int fd, rfd;

	for (unsigned i = 0; i < SESSIONS; i++) {
		char inst[32];

		snprintf(inst, sizeof(inst), "scale-%u", i);
		fds[i] = raw_connect(d.sock);
		CHECK(fds[i] >= 0, "connect %u", i);
		raw_hello_init(&h, KVS_ROLE_SCHEDULER, inst, "scale/pf", 0, 1);
		h.sq_entries = 2; /* small regions: 256 of them */
		h.arg_bytes = 4096;
		CHECK_RES(raw_hello(fds[i], &h, &rep, &rfd), 0, "HELLO");
		CHECK(rfd >= 0, "no region");
		close(rfd);
		ids[i] = rep.session_id;
	}
	/* The limit is reached: this is max_sessions. */
	fd = raw_connect(d.sock);
	CHECK(fd >= 0, "connect");
	raw_hello_init(&h, KVS_ROLE_SCHEDULER, "scale-x", "scale/pf", 0, 1);
	CHECK_RES(raw_hello(fd, &h, &rep, &rfd), -EUSERS, "a session past max_sessions");
	close(fd);
}

static int index_of(uint64_t id)
{
	for (unsigned i = 0; i < SESSIONS; i++)
		if (ids[i] == id)
			return (int)i;
	return -1;
}

static void slow_reader(void)
{
	static uint8_t buf[KVS_MSG_MAX];
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	struct kvs_msg_hdr q = { .type = KVS_MSG_STATUS, .size = sizeof(q), .seq = 7 };
	struct kvs_msg_stats_global g;
	struct kvs_client *other;
	struct pollfd p;
	bool seen[SESSIONS] = { false };
	unsigned listed = 0;
	int fd, rfd, queued = 0;

	fd = raw_connect(d.sock);
	CHECK(fd >= 0, "connect");
	raw_hello_init(&h, KVS_ROLE_ADMIN, NULL, NULL, 0, 1);
	CHECK_RES(raw_hello(fd, &h, &rep, &rfd), 0, "admin HELLO");
	CHECK_RES(raw_send(fd, &q, sizeof(q), NULL, 0), 0, "STATUS");
	/* kvstashd has begun to answer... */
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	CHECK(poll(&p, 1, 10000) == 1, "no reply to STATUS");
	/*
	 * ...and it sends a train in one go until the buffer is full: a
	 * daemon that gives up on a full buffer has hung up within this
	 * second.  (One that keeps the reply passes whatever the wait.)
	 */
	p = (struct pollfd){ .fd = fd, .events = POLLRDHUP };
	CHECK(poll(&p, 1, 1000) == 0, "kvstashd hung up on a reader that did not read yet");
	CHECK(ioctl(fd, FIONREAD, &queued) == 0, "FIONREAD");

	/* The control loop is not stuck on that reader. */
	CHECK_RES(test_admin(&d, &other), 0, "another admin session");
	CHECK_RES(test_stats(other, &g), 0, "STATS while a reply waits for its reader");
	CHECK(g.sessions_live == SESSIONS, "%llu sessions live",
	      (unsigned long long)g.sessions_live);
	CHECK_RES(test_status_sessions(other), SESSIONS, "sessions listed by another STATUS");
	kvs_close(other);

	/* Now read it all: one daemon packet, every session once, then END. */
	for (unsigned k = 0;; k++) {
		const struct kvs_msg_hdr *m = (const void *)buf;
		ssize_t n = raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL, 10000);

		CHECK(n >= (ssize_t)sizeof(*m) && m->size == (size_t)n && m->seq == q.seq,
		      "packet %u of the train: %zd bytes", k, n);
		if (k == 0) {
			CHECK(m->type == KVS_MSG_STATUS_DAEMON, "packet 0 is of type %u", m->type);
			CHECK(((const struct kvs_msg_status_daemon *)m)->nr_sessions == SESSIONS,
			      "the daemon packet counts %u sessions",
			      ((const struct kvs_msg_status_daemon *)m)->nr_sessions);
			continue;
		}
		if (m->type == KVS_MSG_END)
			break;
		CHECK(m->type == KVS_MSG_STATUS_SESSION, "packet %u is of type %u", k, m->type);
		int i = index_of(((const struct kvs_msg_status_session *)m)->session_id);

		CHECK(i >= 0 && !seen[i], "packet %u names session %llu %s", k,
		      (unsigned long long)((const struct kvs_msg_status_session *)m)->session_id,
		      i < 0 ? "(not ours)" : "again");
		seen[i] = true;
		listed++;
	}
	CHECK(listed == SESSIONS, "%u sessions listed, %u connected", listed, SESSIONS);
	close(fd);
	it_ok("STATUS at max_sessions = %u to a reader that waited (%d bytes queued meanwhile): "
	      "every session once, other admin sessions served meanwhile",
	      SESSIONS, queued);
}

/* `kvstash --json CMD`: its exit status 0, and how many "id" keys it printed. */
static unsigned cli_ids(const char *cmd)
{
	const char *top = getenv("top_builddir");
	static char out[1 << 20];
	char sh[600];
	unsigned n = 0;
	size_t len;
	FILE *f;
	int st;

	snprintf(sh, sizeof(sh), "%s/tools/kvstash --socket %s --json %s", top ? top : ".", d.sock,
		 cmd);
	f = popen(sh, "r");
	CHECK(f, "popen %s", sh);
	len = fread(out, 1, sizeof(out) - 1, f);
	out[len] = '\0';
	for (char *p = out; (p = strstr(p, "\"id\":")); p++)
		n++;
	st = pclose(f);
	CHECK(len < sizeof(out) - 1, "%s printed more than %zu bytes", sh, sizeof(out) - 1);
	CHECK(st == 0, "%s: exit status 0x%x", sh, st);
	return n;
}

int main(void)
{
	unsigned n;

	it_watchdog(180);
	it_start(&d, "[server]\nmax_sessions_per_uid = 256\n");
	connect_all();
	slow_reader();
	n = cli_ids("status");
	CHECK(n == SESSIONS, "kvstash status lists %u sessions", n);
	n = cli_ids("stats");
	CHECK(n == SESSIONS, "kvstash stats lists %u sessions", n);
	it_ok("kvstash status and stats at max_sessions = %u: every session listed", SESSIONS);
	for (unsigned i = 0; i < SESSIONS; i++)
		close(fds[i]);
	it_stop(&d);
	return 0;
}
