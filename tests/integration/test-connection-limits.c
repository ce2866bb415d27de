/* SPDX-License-Identifier: MIT */
/*
 * Connection slots (issue 11, item 5): connections that never say HELLO
 * and admin sessions have pools of their own, shared out per uid, so
 * neither can lock engines or the CLI out:
 *   - idle admin sessions: 100 of one uid (ours, then nobody's) leave at
 *     most max_admin_sessions_per_uid of them open, the most idle closed
 *     first; an engine and a new CLI session are served all along;
 *   - an admin session that stays idle past admin_idle_timeout is closed;
 *   - silent connections reopened as fast as kvstashd closes them (by
 *     nobody, in a loop): every engine connect of another uid succeeds,
 *     and kvstashd never holds more than max_handshakes_per_uid of the
 *     flooding uid's connections;
 *   - a full handshake pool closes the oldest connections of the uid
 *     holding most of it, not the newcomer's.
 * kvstashd runs with max_sessions = 8: before these pools, max_sessions +
 * 64 connections of any kind were all it took to refuse everyone.
 */
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#define FLOOD	  100
#define OPEN_INI  "socket_mode = 0666\ndir_mode = 0755\n"
#define ADMIN_UID 8  /* max_admin_sessions_per_uid, default */
#define HS_UID	  16 /* max_handshakes_per_uid, default */

/*
 * The fds kvstashd holds at rest: the fewest of readings over 200 ms.  A
 * single reading right after start can include an fd kvstashd is about
 * to close, and every later count is compared with this one.
 */
static int fd_baseline(pid_t pid)
{
	int least = proc_fd_count(pid);

	for (unsigned i = 0; i < 20; i++) {
		int n;

		usleep(10000);
		n = proc_fd_count(pid);
		least = n < least ? n : least;
	}
	return least;
}

/*
 * The fds kvstashd holds beyond @base, polled until at most @max or for
 * @timeout_ms: the last count.  A connection of the flooding uid may be
 * accepted just before the one it replaces is closed, and a session's
 * socket is closed just after its region: a single reading can catch
 * either in between (sanitizer builds make that window wide).
 */
static int fds_within(pid_t pid, int base, int max, int timeout_ms)
{
	uint64_t deadline = test_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int n;

	while ((n = proc_fd_count(pid) - base) > max && test_now_ns() < deadline)
		usleep(5000);
	return n;
}

/* Has kvstashd closed @fd (shut down its end)? */
static bool hung_up(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* An admin session, raw: connected and HELLO said; -errno when refused or closed. */
static int raw_admin(const struct kvsd *d)
{
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	int fd = raw_connect(d->sock), rfd, r;

	if (fd < 0)
		return fd;
	raw_hello_init(&h, KVS_ROLE_ADMIN, NULL, NULL, 0, 1);
	r = raw_hello(fd, &h, &rep, &rfd);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* An engine and the CLI are served: a worker's NOP, a STATS round trip. */
static void served(const struct kvsd *d, const char *inst)
{
	struct kvs_msg_stats_global g;
	struct kvs_client *c = NULL, *a = NULL;

	CHECK_RES(test_connect(d, KVS_ROLE_WORKER, inst, "conn/pf", 0, 1, &c), 0,
		  "an engine's HELLO");
	CHECK_RES(kvs_nop_sync(c, OP_TIMEOUT_MS), 0, "the engine's NOP");
	CHECK_RES(test_admin(d, &a), 0, "the CLI's HELLO");
	CHECK_RES(test_stats(a, &g), 0, "the CLI's STATS");
	kvs_close(a);
	kvs_close(c);
}

/* A child as nobody that runs @fn(@d, @go) and exits with its result. */
static pid_t spawn_nobody(int (*fn)(const struct kvsd *, int), const struct kvsd *d, int go)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		alarm(0);
		it_become_nobody();
		_exit(fn(d, go));
	}
	return pid;
}

static void reap(pid_t pid)
{
	int st;

	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "child status 0x%x", st);
}

/* ---- idle admin sessions ------------------------------------------- */

static void admin_flood_own(void)
{
	int fds[FLOOD], base, open_now = 0;
	struct kvsd d;

	it_start(&d, "[server]\nmax_sessions = 8\n");
	base = fd_baseline(d.pid);
	for (unsigned i = 0; i < FLOOD; i++) {
		fds[i] = raw_admin(&d);
		CHECK(fds[i] >= 0, "admin session %u refused: %s", i, strerror(-fds[i]));
	}
	/* Each HELLO past the uid's share closed the most idle: the oldest. */
	for (unsigned i = 0; i < FLOOD; i++) {
		bool gone = hung_up(fds[i]);

		CHECK(gone == (i < FLOOD - ADMIN_UID), "admin session %u: %s", i,
		      gone ? "closed, though among the newest" : "open, though among the oldest");
		open_now += !gone;
	}
	CHECK(wait_fd_count(d.pid, base + ADMIN_UID, 5000) == base + ADMIN_UID,
	      "kvstashd holds %d fds, %d expected", proc_fd_count(d.pid), base + ADMIN_UID);
	served(&d, "conn-own");
	for (unsigned i = 0; i < FLOOD; i++)
		close(fds[i]);
	it_stop(&d);
	it_ok("%u idle admin sessions of one uid: %d stay open (its share), the most idle closed "
	      "first; an engine and the CLI served",
	      FLOOD, open_now);
}

static int hold_admins(const struct kvsd *d, int go)
{
	int fds[FLOOD], open_now = 0;
	char c;

	for (unsigned i = 0; i < FLOOD; i++)
		if ((fds[i] = raw_admin(d)) < 0)
			return 10;
	for (unsigned i = 0; i < FLOOD; i++)
		open_now += !hung_up(fds[i]);
	if (open_now != ADMIN_UID)
		return 11;
	/* Hold them while the parent is served. */
	if (write(go, "r", 1) != 1 || read(go, &c, 1) != 1)
		return 12;
	return 0;
}

static void admin_flood_other(void)
{
	struct kvsd d;
	int sv[2];
	pid_t pid;
	char c;

	if (geteuid() != 0) {
		printf("# not root: the other uid's admin flood is not tried\n");
		return;
	}
	it_start(&d, "[server]\nmax_sessions = 8\n" OPEN_INI);
	CHECK(chmod(d.dir, 0755) == 0, "chmod");
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	pid = spawn_nobody(hold_admins, &d, sv[1]);
	close(sv[1]); /* the child's end: its exit is EOF here */
	CHECK(read(sv[0], &c, 1) == 1, "nobody's admin sessions: child failed");
	served(&d, "conn-other");
	CHECK(write(sv[0], "x", 1) == 1, "release the child");
	reap(pid);
	close(sv[0]);
	it_stop(&d);
	it_ok("%u idle admin sessions of nobody: %u stay open; root's engine and CLI served", FLOOD,
	      ADMIN_UID);
}

static void admin_idle(void)
{
	struct kvsd d;
	int fd;

	it_start(&d, "[server]\nadmin_idle_timeout = 1s\n");
	fd = raw_admin(&d);
	CHECK(fd >= 0, "admin HELLO: %s", strerror(-fd));
	CHECK(raw_eof(fd, 10000), "an idle admin session was not closed within 10 s");
	close(fd);
	CHECK(wait_log_count(&d, "admin session idle for", 1, 5000) == 1,
	      "the log does not say why");
	it_stop(&d);
	it_ok("an admin session idle past admin_idle_timeout = 1s is closed");
}

/* ---- silent connections -------------------------------------------- */

#define CHURN_FDS 80
#define ENGINES	  20

/* Keep CHURN_FDS silent connections, reopening each one as soon as it is closed. */
static int churn(const struct kvsd *d, int go)
{
	struct pollfd p[CHURN_FDS + 1];
	unsigned long reopened = 0;

	for (unsigned i = 0; i < CHURN_FDS; i++) {
		p[i].fd = raw_connect(d->sock);
		p[i].events = POLLRDHUP;
		if (p[i].fd < 0)
			return 20;
	}
	p[CHURN_FDS] = (struct pollfd){ .fd = go, .events = POLLIN };
	if (write(go, "r", 1) != 1)
		return 21;
	for (;;) {
		if (poll(p, CHURN_FDS + 1, -1) < 0)
			return 22;
		if (p[CHURN_FDS].revents)
			break;
		for (unsigned i = 0; i < CHURN_FDS; i++) {
			if (!p[i].revents)
				continue;
			close(p[i].fd);
			p[i].fd = raw_connect(d->sock);
			if (p[i].fd < 0)
				return 23;
			reopened++;
		}
	}
	printf("# the flooding uid reopened %lu connections\n", reopened);
	return 0;
}

static void handshake_churn(void)
{
	int sv[2], base, most = 0;
	struct kvsd d;
	pid_t pid;
	char c;

	if (geteuid() != 0) {
		printf("# not root: the silent-connection flood of another uid is not tried\n");
		return;
	}
	it_start(&d, "[server]\nmax_sessions = 8\n" OPEN_INI);
	CHECK(chmod(d.dir, 0755) == 0, "chmod");
	base = fd_baseline(d.pid);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	pid = spawn_nobody(churn, &d, sv[1]);
	close(sv[1]);
	CHECK(read(sv[0], &c, 1) == 1, "the flooding child failed");
	for (unsigned i = 0; i < ENGINES; i++) {
		struct kvs_client *e = NULL;
		char inst[32];
		int n;

		snprintf(inst, sizeof(inst), "churn-%u", i);
		CHECK_RES(test_connect(&d, KVS_ROLE_WORKER, inst, "conn/pf", 0, 1, &e), 0,
			  "an engine's HELLO during the flood");
		CHECK_RES(kvs_nop_sync(e, OP_TIMEOUT_MS), 0, "the engine's NOP");
		kvs_close(e);
		/*
		 * With this session freed (its region gone), what kvstashd holds
		 * beyond its own fds is nobody's silent connections: its share,
		 * +1 for one accepted before the one it replaces is closed (+1:
		 * the socket of a session is closed just after its region).
		 * Without the share, nobody alone held 72.
		 */
		CHECK(wait_memfd_count(d.pid, "kvstash-session", 0, 10000) == 0,
		      "the engine's session was not freed");
		n = fds_within(d.pid, base, HS_UID + 2, 5000);
		most = n > most ? n : most;
		CHECK(n <= HS_UID + 2, "kvstashd holds %d fds for the flooding uid", n);
	}
	CHECK(write(sv[0], "x", 1) == 1, "stop the child");
	reap(pid);
	close(sv[0]);
	it_stop(&d);
	it_ok("nobody reopening %u silent connections as fast as they close: %u engine HELLOs of "
	      "root served, kvstashd held at most %d fds for them",
	      CHURN_FDS, ENGINES, most);
}

#define POOL 20

static int hold_silent(const struct kvsd *d, int go)
{
	int fds[HS_UID], closed = 0;
	char c;

	for (unsigned i = 0; i < HS_UID; i++)
		if ((fds[i] = raw_connect(d->sock)) < 0)
			return 30;
	if (write(go, "r", 1) != 1 || read(go, &c, 1) != 1)
		return 31;
	/* The parent saw kvstashd settle: count what it closed, oldest first. */
	for (unsigned i = 0; i < HS_UID; i++) {
		bool gone = hung_up(fds[i]);

		if (gone != (i < HS_UID + 10 - POOL))
			return 32;
		closed += gone;
	}
	if (write(go, &closed, sizeof(closed)) != sizeof(closed))
		return 33;
	return 0;
}

static void handshake_largest(void)
{
	int sv[2], fds[10], base, closed = -1;
	struct kvsd d;
	pid_t pid;
	char c;

	if (geteuid() != 0) {
		printf("# not root: the shared handshake pool is not tried\n");
		return;
	}
	it_start(&d, "[server]\nmax_handshakes = 20\n" OPEN_INI);
	CHECK(chmod(d.dir, 0755) == 0, "chmod");
	base = fd_baseline(d.pid);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	pid = spawn_nobody(hold_silent, &d, sv[1]);
	close(sv[1]);
	CHECK(read(sv[0], &c, 1) == 1, "the child failed");
	CHECK(wait_fd_count(d.pid, base + HS_UID, 5000) == base + HS_UID,
	      "kvstashd holds %d fds, %d expected", proc_fd_count(d.pid), base + HS_UID);
	/*
	 * Ten of root: nine silent, then an admin session, whose answered
	 * HELLO says kvstashd accepted every connection before it (accept
	 * takes them in order).  The pool of 20 is full after root's fourth;
	 * each later one closes one of nobody's, which holds most.
	 */
	for (unsigned i = 0; i < 9; i++)
		CHECK((fds[i] = raw_connect(d.sock)) >= 0, "connect");
	fds[9] = raw_admin(&d);
	CHECK(fds[9] >= 0, "admin HELLO: %s", strerror(-fds[9]));
	CHECK(wait_fd_count(d.pid, base + POOL, 5000) == base + POOL,
	      "kvstashd holds %d fds, %d expected", proc_fd_count(d.pid), base + POOL);
	for (unsigned i = 0; i < 10; i++)
		CHECK(!hung_up(fds[i]), "root's connection %u was closed", i);
	CHECK(write(sv[0], "x", 1) == 1, "tell the child");
	CHECK(read(sv[0], &closed, sizeof(closed)) == sizeof(closed), "the child failed");
	reap(pid);
	CHECK(closed == HS_UID + 10 - POOL, "%d of nobody's connections closed", closed);
	for (unsigned i = 0; i < 10; i++)
		close(fds[i]);
	close(sv[0]);
	it_stop(&d);
	it_ok("max_handshakes = 20, nobody's 16 connections, then root's 10: nobody's %d oldest "
	      "closed, root's kept",
	      closed);
}

int main(void)
{
	it_watchdog(180);
	admin_flood_own();
	admin_flood_other();
	admin_idle();
	handshake_churn();
	handshake_largest();
	return 0;
}
