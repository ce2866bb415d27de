/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "../lib/hub.h"
#include "rtest.h"

#define MAX_PROCS 32

static pid_t procs[MAX_PROCS];
static char dirs[8][128];
static unsigned ndirs;

uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void track(pid_t p)
{
	for (unsigned i = 0; i < MAX_PROCS; i++)
		if (!procs[i]) {
			procs[i] = p;
			return;
		}
}

static void untrack(pid_t p)
{
	for (unsigned i = 0; i < MAX_PROCS; i++)
		if (procs[i] == p)
			procs[i] = 0;
}

static void cleanup(void)
{
	char cmd[256];

	for (unsigned i = 0; i < MAX_PROCS; i++)
		if (procs[i] > 0) {
			kill(procs[i], SIGCONT);
			kill(procs[i], SIGKILL);
			waitpid(procs[i], NULL, 0);
			procs[i] = 0;
		}
	for (unsigned i = 0; i < ndirs; i++) {
		if (getenv("KVSTASH_TEST_KEEP")) {
			fprintf(stderr, "kept %s\n", dirs[i]);
			continue;
		}
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dirs[i]);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", dirs[i]);
	}
	ndirs = 0;
}

void rtest_fail(void)
{
	for (unsigned i = 0; i < ndirs; i++) {
		char cmd[300];

		snprintf(cmd, sizeof(cmd),
			 "echo '---- %s/redis.log:'; tail -n 15 '%s/redis.log' >&2", dirs[i],
			 dirs[i]);
		if (system(cmd) != 0)
			fprintf(stderr, "(no redis log)\n");
	}
	cleanup();
	exit(1);
}

void rtest_pass(void)
{
	cleanup();
	exit(0);
}

static const char *redis_server(void)
{
	const char *s = getenv("REDIS_SERVER");

	return s && *s ? s : "redis-server";
}

void rtest_init(void)
{
	char cmd[512];
	const char *b = getenv("top_builddir");

	signal(SIGPIPE, SIG_IGN);
	snprintf(cmd, sizeof(cmd), "%s --version >/dev/null 2>&1", redis_server());
	if (system(cmd) != 0) {
		printf("redis-server not found (apt-get install redis-server): skipped\n");
		exit(SKIP);
	}
	snprintf(cmd, sizeof(cmd), "%s/tests/cluster/regnode", b ? b : ".");
	if (access(cmd, X_OK) != 0) {
		printf("%s not built: skipped\n", cmd);
		exit(SKIP);
	}
	atexit(cleanup);
}

/*
 * A Sentinel's config file (it rewrites it as it learns): monitor the
 * master, decide quickly (a test's failovers take seconds, not minutes).
 */
static int sentinel_conf(const struct redis *rd, char *path, size_t len)
{
	FILE *f;

	snprintf(path, len, "%s/sentinel.conf", rd->dir);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	fprintf(f,
		"sentinel monitor %s %s %d 2\n"
		"sentinel down-after-milliseconds %s 1000\n"
		"sentinel failover-timeout %s 4000\n"
		"sentinel parallel-syncs %s 1\n",
		rd->master_name, redis_host(rd->monitor), rd->monitor->port, rd->master_name,
		rd->master_name, rd->master_name);
	return fclose(f) == 0 ? 0 : -errno;
}

static int spawn_redis(struct redis *rd)
{
	char port[16], log[200], conf[200];
	const char *argv[64];
	char extra[512];
	int argc = 0;
	pid_t p;

	snprintf(port, sizeof(port), "%d", rd->port);
	snprintf(log, sizeof(log), "%s/redis.log", rd->dir);
	argv[argc++] = redis_server();
	if (rd->sentinel) {
		int r = sentinel_conf(rd, conf, sizeof(conf));

		if (r < 0)
			return r;
		argv[argc++] = conf;
		argv[argc++] = "--sentinel";
	}
	argv[argc++] = "--port";
	argv[argc++] = port;
	argv[argc++] = "--bind";
	argv[argc++] = rd->bind ? rd->bind : redis_host(rd);
	/* On a host of the test's own network, the other hosts are its clients. */
	argv[argc++] = "--protected-mode";
	argv[argc++] = rd->host || rd->bind ? "no" : "yes";
	if (!rd->sentinel) {
		argv[argc++] = "--save";
		argv[argc++] = "";
		argv[argc++] = "--appendonly";
		argv[argc++] = "no";
	}
	argv[argc++] = "--dir";
	argv[argc++] = rd->dir;
	argv[argc++] = "--logfile";
	argv[argc++] = log;
	argv[argc++] = "--daemonize";
	argv[argc++] = "no";
	snprintf(extra, sizeof(extra), "%s", rd->extra);
	for (char *save, *t = strtok_r(extra, " ", &save); t && argc < 62;
	     t = strtok_r(NULL, " ", &save))
		argv[argc++] = t;
	argv[argc] = NULL;
	p = fork();
	if (p < 0)
		return -errno;
	if (p == 0) {
		int fd = open("/dev/null", O_RDWR);

		dup2(fd, 0);
		dup2(fd, 1);
		/* Never outlives the test, whatever kills it (a host's namespace would keep it). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (hub_enter(rd->host) < 0)
			_exit(126);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	rd->pid = p;
	track(p);
	/* Up when it answers PING; gone when the port was taken. */
	for (uint64_t end = now_ms() + 20000; now_ms() < end;) {
		char out[64];
		int st;

		if (waitpid(p, &st, WNOHANG) == p) {
			untrack(p);
			rd->pid = 0;
			return -EADDRINUSE;
		}
		if (redis_cmd(rd, out, sizeof(out), "PING") == 0 && !strcmp(out, "PONG"))
			return 0;
		usleep(10000);
	}
	return -ETIMEDOUT;
}

const char *redis_host(const struct redis *rd)
{
	if (rd->bind)
		return rd->bind;
	return rd->host ? rd->host->addr : "127.0.0.1";
}

int redis_start(struct redis *rd)
{
	char tmpl[] = "/tmp/kvstash-redis.XXXXXX";

	if (!mkdtemp(tmpl))
		return -errno;
	snprintf(rd->dir, sizeof(rd->dir), "%s", tmpl);
	snprintf(dirs[ndirs++], sizeof(dirs[0]), "%s", tmpl);
	for (int tries = 0; tries < 20; tries++) {
		uint16_t r;
		int rc;

		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (uint16_t)getpid();
		rd->port = 20000 + r % 40000;
		rc = spawn_redis(rd);
		if (rc != -EADDRINUSE)
			return rc;
	}
	return -EADDRINUSE;
}

int redis_restart(struct redis *rd)
{
	/* The port was ours a moment ago; another process may grab it: then fail. */
	return spawn_redis(rd);
}

void redis_kill(struct redis *rd, int sig)
{
	if (rd->pid > 0)
		kill(rd->pid, sig);
}

void redis_stop(struct redis *rd)
{
	if (rd->pid <= 0)
		return;
	kill(rd->pid, SIGCONT);
	kill(rd->pid, SIGKILL);
	waitpid(rd->pid, NULL, 0);
	untrack(rd->pid);
	rd->pid = 0;
}

void redis_addr(const struct redis *rd, char *buf, size_t len)
{
	snprintf(buf, len, "%s:%d", redis_host(rd), rd->port);
}

static void reply_text(const redisReply *r, char *out, size_t len)
{
	size_t n;

	switch (r->type) {
	case REDIS_REPLY_STRING:
	case REDIS_REPLY_STATUS:
	case REDIS_REPLY_ERROR:
		snprintf(out, len, "%s", r->str);
		break;
	case REDIS_REPLY_INTEGER:
		snprintf(out, len, "%lld", r->integer);
		break;
	case REDIS_REPLY_NIL:
		snprintf(out, len, "(nil)");
		break;
	case REDIS_REPLY_ARRAY:
		n = (size_t)snprintf(out, len, "%zu", r->elements);
		for (size_t i = 0; i < r->elements && n + 2 < len; i++) {
			out[n++] = ' ';
			reply_text(r->element[i], out + n, len - n);
			n += strlen(out + n);
		}
		break;
	}
}

int redis_cmd(const struct redis *rd, char *out, size_t len, const char *fmt, ...)
{
	struct timeval tv = { 2, 0 };
	redisContext *c = redisConnectWithTimeout(redis_host(rd), rd->port, tv);
	redisReply *r;
	va_list ap;

	if (!c || c->err) {
		redisFree(c);
		return -ECONNREFUSED;
	}
	redisSetTimeout(c, tv);
	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	if (!r) {
		redisFree(c);
		return -EIO;
	}
	if (out)
		reply_text(r, out, len);
	freeReplyObject(r);
	redisFree(c);
	return 0;
}

int node_start(struct node *n, const struct redis *rd, const char *name, ...)
{
	char path[512], addr[64];
	const char *argv[48];
	int in[2], out[2], argc = 0;
	const char *b = getenv("top_builddir");
	va_list ap;
	pid_t p;

	memset(n, 0, sizeof(*n));
	snprintf(n->name, sizeof(n->name), "%s", name);
	snprintf(path, sizeof(path), "%s/tests/cluster/regnode", b ? b : ".");
	redis_addr(rd, addr, sizeof(addr));
	argv[argc++] = path;
	argv[argc++] = "--redis";
	argv[argc++] = addr;
	argv[argc++] = "--node";
	argv[argc++] = name;
	va_start(ap, name);
	for (char *a; argc < 46 && (a = va_arg(ap, char *));)
		argv[argc++] = a;
	va_end(ap);
	argv[argc] = NULL;
	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		return -errno;
	p = fork();
	if (p < 0)
		return -errno;
	if (p == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		execv(path, (char *const *)argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	n->pid = p;
	n->in = in[1];
	n->out = out[0];
	n->next_id = 1;
	track(p);
	return 0;
}

unsigned long node_send(struct node *n, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int len;
	unsigned long id = n->next_id++;

	len = snprintf(line, sizeof(line), "%lu ", id);
	va_start(ap, fmt);
	len += vsnprintf(line + len, sizeof(line) - (size_t)len - 1, fmt, ap);
	va_end(ap);
	line[len++] = '\n';
	if (write(n->in, line, (size_t)len) != len)
		return 0;
	return id;
}

int node_wait(struct node *n, unsigned long id, int timeout_ms, char *out, size_t len)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	char pfx[32];
	int pl = snprintf(pfx, sizeof(pfx), "%lu ", id);

	for (;;) {
		char *nl;

		/* Complete lines: ours is answered, others (late answers) dropped. */
		while ((nl = memchr(n->buf, '\n', n->have))) {
			size_t used = (size_t)(nl + 1 - n->buf);
			int mine = !strncmp(n->buf, pfx, (size_t)pl);

			*nl = '\0';
			if (mine && out)
				snprintf(out, len, "%s", n->buf + pl);
			memmove(n->buf, nl + 1, n->have - used);
			n->have -= used;
			if (mine)
				return 0;
		}
		int left = (int)(end - now_ms());
		struct pollfd pfd = { n->out, POLLIN, 0 };

		if ((int64_t)(end - now_ms()) <= 0)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, left) <= 0)
			continue;
		ssize_t rd = read(n->out, n->buf + n->have, sizeof(n->buf) - n->have - 1);

		if (rd <= 0)
			return -EPIPE;
		n->have += (size_t)rd;
	}
}

int node_call(struct node *n, int timeout_ms, char *out, size_t len, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	unsigned long id;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	id = node_send(n, "%s", line);
	if (!id)
		return -EPIPE;
	return node_wait(n, id, timeout_ms, out, len);
}

uint64_t node_stat(struct node *n, const char *key)
{
	char out[2048], pat[64], *p;

	if (node_call(n, 10000, out, sizeof(out), "stats") < 0)
		return UINT64_MAX;
	snprintf(pat, sizeof(pat), " %s=", key);
	p = strstr(out, pat);
	return p ? strtoull(p + strlen(pat), NULL, 10) : UINT64_MAX;
}

int node_wait_state(struct node *n, const char *state, int timeout_ms)
{
	char out[2048], pat[64];
	uint64_t end = now_ms() + (uint64_t)timeout_ms;

	snprintf(pat, sizeof(pat), "state=%s ", state);
	while (now_ms() < end) {
		if (node_call(n, 10000, out, sizeof(out), "stats") < 0)
			return -EPIPE;
		if (strstr(out, pat))
			return 0;
		usleep(5000);
	}
	return -ETIMEDOUT;
}

void node_kill(struct node *n, int sig)
{
	kill(n->pid, sig);
	if (sig == SIGKILL) {
		waitpid(n->pid, NULL, 0);
		untrack(n->pid);
		close(n->in);
		close(n->out);
		n->pid = 0;
	}
}

int node_stop(struct node *n)
{
	int st;

	if (n->pid <= 0)
		return -1;
	close(n->in);
	close(n->out);
	if (waitpid(n->pid, &st, 0) != n->pid)
		return -1;
	untrack(n->pid);
	n->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
