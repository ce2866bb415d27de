/* SPDX-License-Identifier: MIT */
/*
 * Handshake: HELLO for each role, the wire revision check (fail closed,
 * before anything is created), the uid allow-list, session limits, rank
 * and geometry conflicts within an instance, and the socket's ownership
 * (one daemon per socket, stale sockets removed).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#define NS "qwen3-8b/bf16/pf16"

static struct kvsd d;

static void start(const char *ini)
{
	it_start(&d, ini);
}

static void stop(void)
{
	it_stop(&d);
}

static struct kvs_client *conn(uint32_t role, const char *inst, uint32_t rank, uint32_t tp)
{
	struct kvs_client *c = NULL;
	int r = test_connect(&d, role, inst, NS, rank, tp, &c);

	CHECK(r == 0, "connect %s rank %u/%u: %s", inst, rank, tp, kvs_strerror(r));
	return c;
}

static int conn_err(uint32_t role, const char *inst, const char *ns, uint32_t rank, uint32_t tp)
{
	struct kvs_client *c = NULL;
	int r = test_connect(&d, role, inst, ns, rank, tp, &c);

	if (r == 0)
		kvs_close(c);
	return r;
}

static uint64_t refused(struct kvs_client *admin)
{
	struct kvs_msg_stats_global g;

	CHECK_INT(test_stats(admin, &g), ==, 0);
	return g.sessions_refused;
}

static void test_roles(void)
{
	struct kvs_client *w, *s, *w2, *admin;
	struct kvs_session_info wi, si, w2i;
	struct kvs_msg_status_session st;
	struct kvs_connect_opts o;

	start("[session]\nsq_entries = 64\nmax_inflight = 100\nmax_layers = 77\n"
	      "[lease]\nttl = 42s\n");
	w = conn(KVS_ROLE_WORKER, "hs-a", 0, 1);
	s = conn(KVS_ROLE_SCHEDULER, "hs-a", 0, 1);
	CHECK_INT(test_admin(&d, &admin), ==, 0);

	CHECK_INT(kvs_session_info(w, &wi), ==, 0);
	CHECK_INT(kvs_session_info(s, &si), ==, 0);
	CHECK_UINT(wi.session_id, !=, 0);
	CHECK_UINT(wi.session_id, !=, si.session_id);
	CHECK_UINT(wi.sq_entries, ==, 64);
	CHECK_UINT(wi.cq_entries, ==, 128);
	CHECK_UINT(wi.arg_bytes, ==, 4u << 20);
	CHECK_UINT(wi.max_keys, ==, 65536);
	CHECK_UINT(wi.max_inflight, ==, 100);
	CHECK_UINT(wi.max_layers, ==, 77);
	CHECK_UINT(wi.lease_ttl_ms, ==, 42000);
	CHECK_UINT(wi.daemon_rev_major, ==, KVS_WIRE_MAJOR);
	CHECK_UINT(wi.daemon_rev_minor, ==, KVS_WIRE_MINOR);
	CHECK_UINT(si.sq_entries, ==, 64);
	CHECK_UINT(si.daemon_rev_major, ==, KVS_WIRE_MAJOR);

	/* A size the client asks for is rounded to a power of two. */
	kvs_connect_opts_init(&o);
	o.instance = "hs-b";
	o.ns = NS;
	o.sq_entries = 100;
	o.arg_bytes = 10000;
	CHECK_INT(kvs_connect(d.sock, &o, &w2), ==, 0);
	CHECK_INT(kvs_session_info(w2, &w2i), ==, 0);
	CHECK_UINT(w2i.sq_entries, ==, 128);
	CHECK_UINT(w2i.cq_entries, ==, 256);
	CHECK_UINT(w2i.arg_bytes, ==, 12288);

	CHECK_INT(kvs_connected(w), ==, 1);
	CHECK_INT(kvs_nop_sync(w, 5000), ==, 0);
	CHECK_INT(kvs_nop_sync(s, 5000), ==, 0);
	CHECK_INT(kvs_nop_sync(w2, 5000), ==, 0);

	/* The daemon sees what was said: role, rank, instance, our pid. */
	CHECK_INT(status_session(admin, wi.session_id, &st), ==, 0);
	CHECK_UINT(st.role, ==, KVS_ROLE_WORKER);
	CHECK_UINT(st.pid, ==, (uint32_t)getpid());
	CHECK_UINT(st.uid, ==, (uint32_t)geteuid());
	CHECK_STR(st.instance, ==, "hs-a");
	CHECK_STR(st.ns, ==, NS);
	CHECK_UINT(st.tp_size, ==, 1);
	CHECK_INT(status_session(admin, si.session_id, &st), ==, 0);
	CHECK_UINT(st.role, ==, KVS_ROLE_SCHEDULER);
	CHECK_INT(test_status_sessions(admin), ==, 3);
	/* One session region per worker or scheduler session, none for admin. */
	CHECK_INT(proc_memfd_count(d.pid, "kvstash-session"), ==, 3);

	kvs_close(w2);
	kvs_close(s);
	kvs_close(w);
	kvs_close(admin);
	stop();
	it_ok("HELLO of each role: sizes granted, limits, what STATUS lists");
}

/* HELLO of another major: refused, said why, nothing created, no fd. */
static void test_wire_major(void)
{
	struct kvs_client *w, *admin;
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	char mine[32], theirs[32];
	uint64_t refused0;
	int fd, rfd, before, r;

	start(NULL);
	w = conn(KVS_ROLE_WORKER, "hs-rev", 0, 1);
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	refused0 = refused(admin);
	before = proc_memfd_count(d.pid, "kvstash-session");
	CHECK_INT(before, ==, 1);

	/* Full-size HELLO of revision major + 1. */
	fd = raw_connect(d.sock);
	CHECK_INT(fd, >=, 0);
	raw_hello_init(&h, KVS_ROLE_WORKER, "hs-rev2", NS, 0, 1);
	h.rev_major = KVS_WIRE_MAJOR + 1;
	h.rev_minor = 7;
	r = raw_hello(fd, &h, &rep, &rfd);
	CHECK_INT(proc_memfd_count(d.pid, "kvstash-session"), ==, before);
	CHECK_INT(r, ==, -EPROTONOSUPPORT);
	CHECK_INT(rfd, ==, -1);
	CHECK_UINT(rep.r.hdr.type, ==, KVS_MSG_REPLY);
	CHECK_UINT(rep.r.hdr.seq, ==, h.hdr.seq);
	CHECK_UINT(rep.r.rev_major, ==, KVS_WIRE_MAJOR);
	CHECK_UINT(rep.r.rev_minor, ==, KVS_WIRE_MINOR);
	rep.r.text[sizeof(rep.r.text) - 1] = '\0';
	snprintf(theirs, sizeof(theirs), "%u.7", KVS_WIRE_MAJOR + 1);
	snprintf(mine, sizeof(mine), "%u.%u", KVS_WIRE_MAJOR, KVS_WIRE_MINOR);
	CHECK(strstr(rep.r.text, theirs) && strstr(rep.r.text, mine),
	      "reply text \"%s\" must name %s and %s", rep.r.text, theirs, mine);
	CHECK_TRUE(raw_eof(fd, 2000));
	close(fd);

	/*
	 * Another major may have another HELLO size: only the first 20 bytes
	 * are frozen, and they must suffice.
	 */
	fd = raw_connect(d.sock);
	CHECK_INT(fd, >=, 0);
	h.hdr.size = offsetof(struct kvs_msg_hello, rev_minor) + 2;
	CHECK_INT(raw_send(fd, &h, h.hdr.size, NULL, 0), ==, 0);
	{
		unsigned nfds = 9;
		int fds[2];
		ssize_t n = raw_recv(fd, &rep, sizeof(rep), fds, 2, &nfds, 5000);

		CHECK_INT(n, ==, sizeof(struct kvs_msg_reply));
		CHECK_UINT(nfds, ==, 0);
		CHECK_INT(rep.r.status, ==, -EPROTONOSUPPORT);
	}
	CHECK_INT(proc_memfd_count(d.pid, "kvstash-session"), ==, before);
	CHECK_TRUE(raw_eof(fd, 2000));
	close(fd);

	CHECK_UINT(refused(admin), ==, refused0 + 2);
	CHECK_INT(kvs_nop_sync(w, 5000), ==, 0);
	kvs_close(w);
	kvs_close(admin);
	stop();
	it_ok("HELLO of another wire major: refused before anything is created");
}

/* Connect as nobody in a child; its kvs_connect result (and a NOP's) come back. */
struct as_nobody {
	int connect;
	int nop;
	uint64_t session_id;
};

static int as_nobody_main(void *arg, void *ret)
{
	struct as_nobody *res = ret;
	struct kvs_client *c = NULL;
	struct kvs_session_info info;

	(void)arg;
	it_become_nobody();
	res->connect = test_connect(&d, KVS_ROLE_WORKER, "hs-nobody", NS, 0, 1, &c);
	if (res->connect == 0) {
		res->nop = kvs_nop_sync(c, 5000);
		kvs_session_info(c, &info);
		res->session_id = info.session_id;
	}
	kvs_close(c);
	return 0;
}

static struct as_nobody connect_as_nobody(void)
{
	struct as_nobody res = { -ENOSYS, -ENOSYS, 0 };

	it_in_child(as_nobody_main, NULL, &res, sizeof(res));
	return res;
}

static void test_allow_list(void)
{
	struct kvs_client *admin, *w;
	struct as_nobody res;
	uint64_t refused0;

	if (geteuid() != 0) {
		fprintf(stderr, "allow-list test needs root (to become nobody): skipped\n");
		return;
	}
	/* Root is always allowed; nobody is not on the list. */
	start("[server]\nallow_uids = root\nsocket_mode = 0666\ndir_mode = 0755\n");
	CHECK_INT(chmod(d.dir, 0755), ==, 0);
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	refused0 = refused(admin);
	res = connect_as_nobody();
	CHECK_INT(res.connect, ==, -EACCES);
	/* The refusal is kvstashd's, not the file system's. */
	CHECK_TRUE(kvsd_log_contains(&d, "uid 65534 gid 65534 is not in the allow-list"));
	CHECK_UINT(refused(admin), ==, refused0 + 1);
	CHECK_INT(test_status_sessions(admin), ==, 0);
	CHECK_INT(proc_memfd_count(d.pid, "kvstash-session"), ==, 0);
	/* Root still gets in. */
	w = conn(KVS_ROLE_WORKER, "hs-root", 0, 1);
	CHECK_INT(kvs_nop_sync(w, 5000), ==, 0);
	kvs_close(w);
	kvs_close(admin);
	stop();

	/* On the list by name: in, and listed under its uid. */
	start("[server]\nallow_uids = root,nobody\nsocket_mode = 0666\ndir_mode = 0755\n");
	CHECK_INT(chmod(d.dir, 0755), ==, 0);
	res = connect_as_nobody();
	CHECK_INT(res.connect, ==, 0);
	CHECK_INT(res.nop, ==, 0);
	CHECK_TRUE(!kvsd_log_contains(&d, "allow-list"));
	stop();

	/* By group. */
	start("[server]\nallow_uids = root\nallow_gids = 65534\nsocket_mode = 0666\n"
	      "dir_mode = 0755\n");
	CHECK_INT(chmod(d.dir, 0755), ==, 0);
	res = connect_as_nobody();
	CHECK_INT(res.connect, ==, 0);
	CHECK_INT(res.nop, ==, 0);
	stop();
	it_ok("the uid and gid allow-lists");
}

static void test_session_limit(void)
{
	struct kvs_client *a, *b, *c = NULL, *admin;
	uint64_t t0;
	int r;

	start("[server]\nmax_sessions = 2\n");
	a = conn(KVS_ROLE_WORKER, "hs-l1", 0, 1);
	b = conn(KVS_ROLE_SCHEDULER, "hs-l2", 0, 1);
	CHECK_INT(conn_err(KVS_ROLE_WORKER, "hs-l3", NS, 0, 1), ==, -EUSERS);
	CHECK_INT(conn_err(KVS_ROLE_SCHEDULER, "hs-l1", NS, 0, 1), ==, -EUSERS);
	CHECK_INT(proc_memfd_count(d.pid, "kvstash-session"), ==, 2);
	/* Admin sessions do not count against the limit and do not take a slot. */
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	CHECK_INT(test_status_sessions(admin), ==, 2);
	CHECK_INT(kvs_nop_sync(a, 5000), ==, 0);
	CHECK_INT(kvs_nop_sync(b, 5000), ==, 0);

	/* A slot given back is free again (once kvstashd has seen the EOF). */
	kvs_close(b);
	t0 = test_now_ns();
	while ((r = test_connect(&d, KVS_ROLE_WORKER, "hs-l3", NS, 0, 1, &c)) == -EUSERS &&
	       test_now_ns() - t0 < 3000000000ull)
		usleep(10000);
	CHECK_INT(r, ==, 0);
	CHECK_INT(kvs_nop_sync(c, 5000), ==, 0);
	kvs_close(c);
	kvs_close(a);
	kvs_close(admin);
	stop();
	it_ok("max_sessions: refused, admin sessions not counted, slots given back");
}

static void test_instance_conflicts(void)
{
	struct kvs_client *r0, *r1, *admin;
	uint64_t refused0;

	start(NULL);
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	refused0 = refused(admin);
	r0 = conn(KVS_ROLE_WORKER, "hs-tp", 0, 2);
	/* The same rank twice in one instance. */
	CHECK_INT(conn_err(KVS_ROLE_WORKER, "hs-tp", NS, 0, 2), ==, -EADDRINUSE);
	/* Another tp_size, or another namespace, for the same instance. */
	CHECK_INT(conn_err(KVS_ROLE_WORKER, "hs-tp", NS, 1, 4), ==, -EXDEV);
	CHECK_INT(conn_err(KVS_ROLE_SCHEDULER, "hs-tp", NS, 0, 1), ==, -EXDEV);
	CHECK_INT(conn_err(KVS_ROLE_WORKER, "hs-tp", "other-model/fp8", 1, 2), ==, -EXDEV);
	/* HELLO itself: rank outside tp_size. */
	CHECK_INT(conn_err(KVS_ROLE_WORKER, "hs-tp", NS, 2, 2), ==, -EINVAL);
	CHECK_UINT(refused(admin), ==, refused0 + 5);
	/* None of those took rank 1: it is still free. */
	r1 = conn(KVS_ROLE_WORKER, "hs-tp", 1, 2);
	CHECK_INT(kvs_nop_sync(r0, 5000), ==, 0);
	CHECK_INT(kvs_nop_sync(r1, 5000), ==, 0);
	CHECK_INT(test_status_sessions(admin), ==, 2);
	CHECK_INT(proc_memfd_count(d.pid, "kvstash-session"), ==, 2);

	/* Rank 0 gone: its place can be taken again. */
	kvs_close(r0);
	{
		uint64_t t0 = test_now_ns();
		int r;

		while ((r = conn_err(KVS_ROLE_WORKER, "hs-tp", NS, 0, 2)) == -EADDRINUSE &&
		       test_now_ns() - t0 < 3000000000ull)
			usleep(10000);
		CHECK_INT(r, ==, 0);
	}
	kvs_close(r1);
	kvs_close(admin);
	stop();
	it_ok("rank and geometry conflicts within an instance");
}

static int run_second_daemon(int *ret_status)
{
	char log[200];
	pid_t pid;
	int st;

	snprintf(log, sizeof(log), "%s/second.log", d.dir);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		dup2(fd, 1);
		dup2(fd, 2);
		execl(kvstashd_bin(), "kvstashd", "--config", d.conf, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1000; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid) {
			*ret_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			return 0;
		}
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -ETIMEDOUT;
}

static bool file_contains(const char *path, const char *needle)
{
	char line[1024];
	bool found = false;
	FILE *f = fopen(path, "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

static void test_second_daemon(void)
{
	struct kvs_client *w;
	struct stat sb;
	char log[200];
	int st = -1;

	start(NULL);
	w = conn(KVS_ROLE_WORKER, "hs-2d", 0, 1);
	CHECK_INT(run_second_daemon(&st), ==, 0);
	CHECK_INT(st, ==, 3);
	snprintf(log, sizeof(log), "%s/second.log", d.dir);
	CHECK(file_contains(log, "another kvstashd"), "second daemon did not say why");
	/* The first one is untouched: its socket is still there and serves. */
	CHECK_INT(stat(d.sock, &sb), ==, 0);
	CHECK_TRUE(S_ISSOCK(sb.st_mode));
	CHECK_TRUE(pid_alive(d.pid));
	CHECK_INT(kvs_nop_sync(w, 5000), ==, 0);
	kvs_close(w);
	CHECK_INT(test_connect(&d, KVS_ROLE_WORKER, "hs-2d2", NS, 0, 1, &w), ==, 0);
	kvs_close(w);
	stop();
	it_ok("a second kvstashd on a live socket exits 3, the first serves on");
}

static void test_stale_socket(void)
{
	struct kvs_client *w;
	struct stat sb;
	int fd;

	start(NULL);
	kvsd_kill(&d);
	/* A SIGKILLed daemon leaves its socket file; nobody answers on it. */
	CHECK_INT(stat(d.sock, &sb), ==, 0);
	CHECK_TRUE(S_ISSOCK(sb.st_mode));
	fd = raw_connect(d.sock);
	CHECK_INT(fd, ==, -ECONNREFUSED);
	CHECK_TRUE(!kvsd_log_contains(&d, "removed stale socket"));

	CHECK_INT(kvsd_restart(&d), ==, 0);
	CHECK_TRUE(kvsd_log_contains(&d, "removed stale socket"));
	w = conn(KVS_ROLE_WORKER, "hs-stale", 0, 1);
	CHECK_INT(kvs_nop_sync(w, 5000), ==, 0);
	kvs_close(w);
	CHECK_INT(kvsd_stop(&d), ==, 0);
	/* A clean exit takes its socket away. */
	CHECK_INT(stat(d.sock, &sb), ==, -1);
	kvsd_cleanup(&d);
	it_ok("a stale socket is removed, a clean exit removes its own");
}

int main(void)
{
	it_watchdog(60);
	test_roles();
	it_watchdog(60);
	test_wire_major();
	it_watchdog(60);
	test_allow_list();
	it_watchdog(60);
	test_session_limit();
	it_watchdog(60);
	test_instance_conflicts();
	it_watchdog(60);
	test_second_daemon();
	it_watchdog(60);
	test_stale_socket();
	return 0;
}
