/* SPDX-License-Identifier: MIT */
/*
 * File descriptors (issue 11, item 8):
 *   - kvstashd raises its soft RLIMIT_NOFILE to the hard limit at start
 *     (started here with a soft limit of 512);
 *   - out of fds (its limit lowered with prlimit(2) while it runs, then
 *     40 connections): kvstashd keeps serving its engine, does not spin
 *     (under 25 % of one CPU over 2 s; it spun at 100 %), writes a few
 *     log lines, not megabytes, and accepts again once fds are free;
 *   - [server] max_fds_per_uid: a REGISTER or HELLO that would make one
 *     uid's sessions hold more is refused with EMFILE, another uid is
 *     still served, and closing a session gives its fds back.
 */
#include <dirent.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"


/* Soft and hard "Max open files" of @pid, from /proc/PID/limits. */
static void fd_limits(pid_t pid, unsigned long long *soft, unsigned long long *hard)
{
	char path[64], line[256];
	FILE *f;

	*soft = *hard = 0;
	snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
	f = fopen(path, "re");
	CHECK(f, "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Max open files %llu %llu", soft, hard) == 2)
			break;
	fclose(f);
}

/* utime + stime of @pid, in clock ticks. */
static unsigned long long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	CHECK(f, "%s: %s", path, strerror(errno));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* past the command name, which may hold spaces */
	CHECK(p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			  &st) == 2,
	      "cannot parse %s", path);
	return ut + st;
}

/*
 * The RLIMIT_NOFILE that leaves @pid exactly @room more fds: one past its
 * @room-th free fd number (fds it holds above that, inherited ones say,
 * stay open; new fds take the lowest free numbers).
 */
static int limit_for_room(pid_t pid, int room)
{
	static bool open_fd[1 << 16];
	char path[64];
	struct dirent *e;
	DIR *dir;

	memset(open_fd, 0, sizeof(open_fd));
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	CHECK(dir, "%s", path);
	while ((e = readdir(dir))) {
		int n = atoi(e->d_name);

		if (e->d_name[0] != '.' && n < (1 << 16))
			open_fd[n] = true;
	}
	closedir(dir);
	for (int n = 0; n < (1 << 16); n++)
		if (!open_fd[n] && --room == 0)
			return n + 1;
	CHECK(false, "no room below 65536");
	return -1;
}

static long long file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static void soft_limit_raised(void)
{
	unsigned long long soft, hard;
	struct rlimit old, low;
	struct kvsd d;

	CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0, "getrlimit");
	if (old.rlim_max <= 512) {
		printf("# the hard RLIMIT_NOFILE is %llu: nothing to raise\n",
		       (unsigned long long)old.rlim_max);
		return;
	}
	low = (struct rlimit){ 512, old.rlim_max };
	CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0, "setrlimit");
	it_start(&d, NULL); /* inherits the low soft limit */
	CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0, "setrlimit");
	fd_limits(d.pid, &soft, &hard);
	CHECK(soft == hard && hard == (unsigned long long)old.rlim_max,
	      "kvstashd runs with RLIMIT_NOFILE %llu (soft), %llu (hard)", soft, hard);
	CHECK(kvsd_log_contains(&d, "RLIMIT_NOFILE raised from 512"), "the log does not say so");
	it_stop(&d);
	it_ok("started with a soft RLIMIT_NOFILE of 512: kvstashd raised it to the hard %llu",
	      hard);
}

#define CONNS	 40
#define HEADROOM 8
#define WINDOW_S 2

static void exhausted(void)
{
	struct kvs_client *e, *e2 = NULL;
	unsigned long long c0, c1;
	struct rlimit old, low;
	int fds[CONNS], base, r;
	long long l0, l1;
	uint64_t t0, t1;
	double share;
	struct kvsd d;

	it_start(&d, NULL);
	CHECK_RES(test_connect(&d, KVS_ROLE_WORKER, "fd-engine", "fd/pf", 0, 1, &e), 0, "engine");
	CHECK_RES(kvs_nop_sync(e, OP_TIMEOUT_MS), 0, "NOP");
	/*
	 * Room for HEADROOM more fds: fewer than the handshake pool's share
	 * of one uid, so that the fd limit is what stops the connections.
	 */
	base = proc_fd_count(d.pid);
	CHECK(prlimit(d.pid, RLIMIT_NOFILE, NULL, &old) == 0, "prlimit: %s", strerror(errno));
	low = (struct rlimit){ (rlim_t)limit_for_room(d.pid, HEADROOM), old.rlim_max };
	CHECK(prlimit(d.pid, RLIMIT_NOFILE, &low, NULL) == 0, "prlimit: %s", strerror(errno));
	for (unsigned i = 0; i < CONNS; i++)
		CHECK((fds[i] = raw_connect(d.sock)) >= 0, "connect %u: %s", i, strerror(-fds[i]));
	/* kvstashd took what its limit allows; the rest wait in the backlog. */
	CHECK(wait_fd_count(d.pid, base + HEADROOM, 5000) == base + HEADROOM,
	      "kvstashd holds %d fds, room for %d", proc_fd_count(d.pid), base + HEADROOM);

	/* A window out of fds, with pending connections: measured, not waited on. */
	l0 = file_size(d.log);
	c0 = cpu_ticks(d.pid);
	t0 = test_now_ns();
	CHECK_RES(kvs_nop_sync(e, OP_TIMEOUT_MS), 0, "the engine's NOP while out of fds");
	usleep(WINDOW_S * 1000000);
	CHECK_RES(kvs_nop_sync(e, OP_TIMEOUT_MS), 0, "the engine's NOP while out of fds");
	c1 = cpu_ticks(d.pid);
	t1 = test_now_ns();
	l1 = file_size(d.log);
	share = (double)(c1 - c0) / (double)sysconf(_SC_CLK_TCK) / ((double)(t1 - t0) / 1e9);
	CHECK(share < 0.25, "kvstashd used %.0f %% of a CPU while out of fds", share * 100);
	CHECK(l1 - l0 < 64 * 1024, "kvstashd logged %lld bytes in %d s while out of fds", l1 - l0,
	      WINDOW_S);
	CHECK(kvsd_log_contains(&d, "cannot accept connections"), "the log does not say why");

	/* Fds given back: the backlog drains, new sessions are served (the limit still low). */
	for (unsigned i = 0; i < CONNS; i++)
		close(fds[i]);
	t0 = test_now_ns();
	while ((r = test_connect(&d, KVS_ROLE_WORKER, "fd-engine-2", "fd/pf", 0, 1, &e2)) < 0 &&
	       test_now_ns() - t0 < 10000000000ull)
		usleep(20000);
	CHECK_RES(r, 0, "a new engine once fds are free");
	CHECK_RES(kvs_nop_sync(e2, OP_TIMEOUT_MS), 0, "NOP");
	kvs_close(e2);
	kvs_close(e);
	CHECK(prlimit(d.pid, RLIMIT_NOFILE, &old, NULL) == 0, "prlimit");
	it_stop(&d);
	it_ok("out of fds with %d connections pending: %.1f %% of a CPU and %lld log bytes in %d "
	      "s, the engine served; new sessions once fds are free",
	      CONNS - HEADROOM, share * 100, l1 - l0, WINDOW_S);
}

static int nobody_engine_main(void *arg, void *ret)
{
	const struct kvsd *d = arg;
	struct kvs_client *c = NULL;
	struct test_kv kv;
	int *res = ret; /* HELLO, REGISTER; the layer count comes in res[1] */
	unsigned layers = (unsigned)res[1];

	res[1] = -ENOSYS;
	it_become_nobody();
	res[0] = test_connect(d, KVS_ROLE_WORKER, "fd-nobody", "fd/nobody", 0, 1, &c);
	if (res[0] == 0 && test_kv_alloc(&kv, LAYOUT_SPLIT_KV, layers, 4, 4096) == 0)
		res[1] = test_kv_register(c, &kv);
	kvs_close(c);
	return 0;
}

/* Connect as nobody in a child and register @layers allocations: the results. */
static void nobody_engine(const struct kvsd *d, unsigned layers, int *ret_hello, int *ret_reg)
{
	int res[2] = { -ENOSYS, (int)layers };

	it_in_child(nobody_engine_main, (void *)d, res, sizeof(res));
	*ret_hello = res[0];
	*ret_reg = res[1];
}

static void per_uid(void)
{
	struct kvs_client *a, *b = NULL;
	struct test_kv kv7, kv6;
	int r, hello, reg;
	struct kvsd d;
	uint64_t t0;

	it_start(&d, "[server]\nmax_fds_per_uid = 8\nsocket_mode = 0666\ndir_mode = 0755\n");
	CHECK(chmod(d.dir, 0755) == 0, "chmod");
	CHECK_RES(test_connect(&d, KVS_ROLE_WORKER, "fd-a", "fd/kv", 0, 1, &a), 0, "HELLO (2 fds)");
	CHECK_RES(test_kv_alloc(&kv7, LAYOUT_SPLIT_KV, 7, 4, 4096), 0, "memory");
	CHECK_RES(test_kv_alloc(&kv6, LAYOUT_SPLIT_KV, 6, 4, 4096), 0, "memory");
	CHECK_RES(test_kv_register(a, &kv7), -EMFILE, "REGISTER of 7 allocations (9 fds)");
	CHECK(kvsd_log_contains(&d, "the fds of uid 0 would exceed its limit"),
	      "the log does not say why");
	CHECK_RES(test_kv_register(a, &kv6), 0, "REGISTER of 6 allocations (8 fds)");
	CHECK_RES(kvs_nop_sync(a, OP_TIMEOUT_MS), 0, "NOP");
	CHECK_RES(test_connect(&d, KVS_ROLE_WORKER, "fd-b", "fd/kv", 0, 1, &b), -EMFILE,
		  "a second session of the uid (10 fds)");
	if (geteuid() == 0) {
		nobody_engine(&d, 6, &hello, &reg);
		CHECK_RES(hello, 0, "another uid's HELLO");
		CHECK_RES(reg, 0, "another uid's REGISTER of 6 allocations");
	} else {
		printf("# not root: the other uid is not tried\n");
	}
	kvs_close(a);
	t0 = test_now_ns();
	while ((r = test_connect(&d, KVS_ROLE_WORKER, "fd-b", "fd/kv", 0, 1, &b)) == -EMFILE &&
	       test_now_ns() - t0 < 5000000000ull)
		usleep(10000);
	CHECK_RES(r, 0, "a session once the uid's other one closed");
	CHECK_RES(test_kv_register(b, &kv6), 0, "REGISTER of 6 allocations again");
	kvs_close(b);
	test_kv_free(&kv7);
	test_kv_free(&kv6);
	it_stop(&d);
	it_ok("max_fds_per_uid = 8: REGISTER past it and HELLO past it -EMFILE%s; fds given back "
	      "on close",
	      geteuid() == 0 ? ", another uid served" : "");
}

int main(void)
{
	it_watchdog(120);
	soft_limit_raised();
	exhausted();
	per_uid();
	return 0;
}
