/* SPDX-License-Identifier: MIT */
/*
 * allow_gids is checked against the groups a peer had when it connected
 * (issue 11, item 10), as the kernel captured them with its credentials
 * (SO_PEERCRED, SO_PEERGROUPS), never against whatever process holds the
 * peer's pid at HELLO time (/proc/PID/status, as before):
 *   - a process that joins an allowed group between connect() and HELLO
 *     is refused; one that leaves it in between is served;
 *   - pid reuse, made deterministic with clone3(set_tid): a connection
 *     opened by a process of no allowed group, which then exits, stays
 *     refused after a process of an allowed group takes its pid.
 * The allow-list: root, and group ALLOWED_GID; the peers run as nobody.
 */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#ifndef SYS_clone3
#define SYS_clone3 435
#endif

#define ALLOWED_GID 4242

static struct kvsd d;

static int hello(int fd)
{
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	static unsigned n;
	char inst[32];
	int rfd, r;

	snprintf(inst, sizeof(inst), "pg-%u-%d", n++, (int)getpid());
	raw_hello_init(&h, KVS_ROLE_WORKER, inst, "pg/pf", 0, 1);
	r = raw_hello(fd, &h, &rep, &rfd);
	if (rfd >= 0)
		close(rfd);
	return r;
}

/*
 * In a child: become nobody with @before as its only group (or none),
 * keeping root as saved uid; connect; change the groups to @after; say
 * HELLO.  The HELLO's result.
 */
static int groups_change_main(void *arg, void *ret)
{
	const int *g = arg; /* before, after */
	gid_t g0 = (gid_t)g[0], g1 = (gid_t)g[1];
	int fd, *res = ret;

	if (setgroups(g[0] >= 0, &g0) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
	    setresuid(NOBODY, NOBODY, 0) < 0)
		_exit(SKIP);
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* after setresuid(), which clears it */
	fd = raw_connect(d.sock);
	if (fd < 0)
		_exit(2);
	/* The saved uid lets the process change its groups once connected. */
	if (seteuid(0) < 0 || setgroups(g[1] >= 0, &g1) < 0 || seteuid(NOBODY) < 0)
		_exit(3);
	*res = hello(fd);
	close(fd);
	return 0;
}

static int groups_change(int before, int after)
{
	int g[2] = { before, after }, res = -ENOSYS;

	it_in_child(groups_change_main, g, &res, sizeof(res));
	return res;
}

static void groups_at_connect(void)
{
	CHECK_RES(groups_change(-1, -1), -EACCES, "nobody, in no allowed group");
	CHECK_RES(groups_change(ALLOWED_GID, ALLOWED_GID), 0, "nobody, in the allowed group");
	CHECK_RES(groups_change(-1, ALLOWED_GID), -EACCES,
		  "nobody, in the allowed group only after connect()");
	CHECK_RES(groups_change(ALLOWED_GID, -1), 0,
		  "nobody, out of the allowed group only after connect()");
	it_ok("groups joined after connect() do not admit, groups left after it still do");
}

/* Linux's struct clone_args up to set_tid_size (CLONE_ARGS_SIZE_VER1). */
struct clone_args_v1 {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
	uint64_t set_tid, set_tid_size;
};

/*
 * A process at pid @pid (now free) as nobody in the allowed group, waiting
 * on @hold.  Only raw system calls in the child: glibc does not know a
 * process clone3() made.  The pid, or -errno (clone3 or set_tid refused).
 */
static pid_t take_pid(pid_t pid, int ready, int hold)
{
	pid_t tid = pid;
	struct clone_args_v1 args = {
		.exit_signal = SIGCHLD,
		.set_tid = (uint64_t)(uintptr_t)&tid,
		.set_tid_size = 1,
	};
	long r;

	fflush(NULL);
	r = syscall(SYS_clone3, &args, sizeof(args));
	if (r < 0)
		return -errno;
	if (r == 0) {
		gid_t g = ALLOWED_GID;
		char c;

		if (syscall(SYS_setgroups, 1, &g) < 0 ||
		    syscall(SYS_setresgid, NOBODY, NOBODY, NOBODY) < 0 ||
		    syscall(SYS_setresuid, NOBODY, NOBODY, NOBODY) < 0 ||
		    syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
			syscall(SYS_exit_group, 2);
		if (syscall(SYS_write, ready, "r", 1) != 1 || syscall(SYS_read, hold, &c, 1) < 0)
			syscall(SYS_exit_group, 3);
		syscall(SYS_exit_group, 0);
	}
	return (pid_t)r;
}

/* Is @pid's process nobody, in the allowed group, as /proc tells? */
static bool proc_shows_allowed(pid_t pid)
{
	char path[64], line[512];
	bool uid = false, grp = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		unsigned a, b;

		if (sscanf(line, "Uid: %u %u", &a, &b) == 2)
			uid = b == NOBODY;
		if (strncmp(line, "Groups:", 7) == 0)
			grp = strtoul(line + 7, NULL, 10) == ALLOWED_GID;
	}
	fclose(f);
	return uid && grp;
}

static void pid_reuse(void)
{
	for (unsigned attempt = 0; attempt < 5; attempt++) {
		int sv[2], ready[2], hold[2], fd = -1, st;
		unsigned nfds = 0;
		char buf[8];
		pid_t a, b;
		ssize_t n;

		CHECK(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
		fflush(NULL);
		a = fork();
		CHECK(a >= 0, "fork");
		if (a == 0) {
			/* The connecting process: nobody, in no allowed group; hands its socket over. */
			int c;

			alarm(0);
			it_become_nobody();
			c = raw_connect(d.sock);
			_exit(c >= 0 && raw_send(sv[1], "s", 1, &c, 1) == 0 ? 0 : 2);
		}
		n = raw_recv(sv[0], buf, sizeof(buf), &fd, 1, &nfds, 5000);
		CHECK(n == 1 && nfds == 1, "no socket from the connecting child");
		CHECK(waitpid(a, &st, 0) == a && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "connecting child status 0x%x", st);
		close(sv[0]);
		close(sv[1]);

		/* Its pid is free now: a process of the allowed group takes it. */
		CHECK(pipe(ready) == 0 && pipe(hold) == 0, "pipe");
		b = take_pid(a, ready[1], hold[0]);
		if (b == -EPERM || b == -ENOSYS || b == -EINVAL) {
			printf("# clone3(set_tid) unavailable (%s): pid reuse is not tried\n",
			       strerror(-b));
			close(fd);
			return;
		}
		if (b < 0) { /* -EEXIST: another process took the pid first; try again */
			close(fd);
			close(ready[0]), close(ready[1]), close(hold[0]), close(hold[1]);
			continue;
		}
		CHECK(b == a, "clone3 gave pid %d, not %d", (int)b, (int)a);
		CHECK(read(ready[0], buf, 1) == 1, "the pid's new process failed");
		CHECK(proc_shows_allowed(a), "/proc/%d does not show the allowed group", (int)a);

		CHECK_RES(hello(fd), -EACCES,
			  "HELLO on a connection whose creator's pid an allowed process reused");
		CHECK(write(hold[1], "x", 1) == 1, "release");
		CHECK(waitpid(b, &st, 0) == b && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "the pid's new process: status 0x%x", st);
		close(fd);
		close(ready[0]), close(ready[1]), close(hold[0]), close(hold[1]);
		it_ok("pid %d reused by a process of the allowed group: the connection its "
		      "creator opened is still refused",
		      (int)a);
		return;
	}
	CHECK(false, "the pid was taken by another process 5 times");
}

int main(void)
{
	if (geteuid() != 0) {
		printf("needs root (to become nobody and change groups): skipped\n");
		return SKIP;
	}
	it_watchdog(60);
	it_start(&d, "[server]\nallow_uids = root\nallow_gids = 4242\nsocket_mode = 0666\n"
		     "dir_mode = 0755\n");
	CHECK(chmod(d.dir, 0755) == 0, "chmod");
	groups_at_connect();
	pid_reuse();
	it_stop(&d);
	return 0;
}
