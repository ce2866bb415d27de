/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis-bench.h"

#define TOOL_NAME "redis-bench"
#include "tool.h"

#define START_TRIES 5	       /* ports tried: another process may hold one */
#define START_POLLS 1000       /* 10 ms apart: 10 s for the server to answer */
#define ENTRY_TTL   "21600000" /* PEXPIRE of the baseline: the registry's default entry TTL */

static struct redis_bench *live; /* the server to stop at exit */

static void stop_live(void)
{
	redis_bench_stop(live);
}

static pid_t spawn(const char *path, const char *dir, int port)
{
	char portbuf[16], logfile[300];
	pid_t pid;

	snprintf(portbuf, sizeof(portbuf), "%d", port);
	snprintf(logfile, sizeof(logfile), "%s/redis.log", dir);
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		/* Dies with the benchmark even when it is killed (no atexit then). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execlp(path, path, "--port", portbuf, "--bind", "127.0.0.1", "--save", "",
		       "--appendonly", "no", "--dir", dir, "--logfile", logfile, (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	return pid;
}

/* Poll until the server answers PING (true) or exits (false). */
static bool answers(struct redis_bench *rb)
{
	for (int i = 0; i < START_POLLS; i++) {
		redisContext *c = redisConnect(rb->host, rb->port);
		redisReply *r = c && !c->err ? redisCommand(c, "PING") : NULL;
		bool up = r && r->type == REDIS_REPLY_STATUS;

		freeReplyObject(r);
		redisFree(c);
		if (up)
			return true;
		if (waitpid(rb->pid, NULL, WNOHANG) == rb->pid) {
			rb->pid = 0;
			return false;
		}
		usleep(10000);
	}
	die("redis-server on port %d did not answer within 10 s (log: %s/redis.log)", rb->port,
	    rb->dir);
}

void redis_bench_start(struct redis_bench *rb, const char *path)
{
	const char *tmp = getenv("TMPDIR");

	memset(rb, 0, sizeof(*rb));
	snprintf(rb->host, sizeof(rb->host), "127.0.0.1");
	snprintf(rb->dir, sizeof(rb->dir), "%s/kvstash-redis.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(rb->dir))
		die("mkdtemp %s: %s", rb->dir, strerror(errno));
	live = rb;
	atexit(stop_live);
	for (int t = 0; t < START_TRIES; t++) {
		uint16_t r;

		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (uint16_t)(getpid() + t);
		rb->port = 20000 + r % 40000;
		rb->pid = spawn(path ? path : "redis-server", rb->dir, rb->port);
		if (answers(rb))
			return;
	}
	die("redis-server did not start (%d ports tried; log: %s/redis.log)", START_TRIES, rb->dir);
}

void redis_bench_attach(struct redis_bench *rb, const char *addr)
{
	const char *colon = strrchr(addr, ':');

	memset(rb, 0, sizeof(*rb));
	if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(rb->host))
		die("--redis %s: want HOST:PORT", addr);
	snprintf(rb->host, sizeof(rb->host), "%.*s", (int)(colon - addr), addr);
	rb->port = atoi(colon + 1);
}

void redis_bench_stop(struct redis_bench *rb)
{
	if (!rb)
		return;
	if (rb->pid > 0) {
		kill(rb->pid, SIGKILL);
		waitpid(rb->pid, NULL, 0);
		rb->pid = 0;
	}
	if (rb->dir[0]) {
		redis_bench_rmdir(rb->dir);
		rb->dir[0] = '\0';
	}
}

redisContext *redis_bench_connect(const struct redis_bench *rb)
{
	redisContext *c = redisConnect(rb->host, rb->port);

	if (!c || c->err)
		die("cannot connect to redis at %s:%d: %s", rb->host, rb->port,
		    c ? c->errstr : "out of memory");
	return c;
}

void redis_bench_version(redisContext *c, char *buf, size_t len)
{
	redisReply *r = redisCommand(c, "INFO server");
	const char *v =
		r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "redis_version:") : NULL;

	snprintf(buf, len, "?");
	if (v)
		snprintf(buf, len, "%.*s", (int)strcspn(v + 14, "\r\n"), v + 14);
	freeReplyObject(r);
}

void redis_bench_key(uint8_t key[RB_KEY_SIZE], uint64_t seed, uint64_t i)
{
	memcpy(key, &seed, 8);
	memcpy(key + 8, &i, 8);
}

double redis_bench_pipeline(redisContext *c, enum redis_bench_cmd cmd, const char *prefix,
			    const char *field, uint64_t seed, uint64_t n)
{
	size_t pl = strlen(prefix), kl = pl + RB_KEY_SIZE;
	uint64_t replies = cmd == RB_HSET_PEXPIRE ? 2 * n : n;
	char key[256];
	uint64_t t0 = now_ns();

	if (kl > sizeof(key))
		die("key prefix too long");
	memcpy(key, prefix, pl);
	for (uint64_t i = 0; i < n; i++) {
		redis_bench_key((uint8_t *)key + pl, seed, i);
		if (cmd == RB_HSET_PEXPIRE) {
			redisAppendCommand(c, "HSET %b %s 1", key, kl, field);
			redisAppendCommand(c, "PEXPIRE %b " ENTRY_TTL, key, kl);
		} else {
			redisAppendCommand(c, "HGETALL %b", key, kl);
		}
	}
	for (uint64_t i = 0; i < replies; i++) {
		void *reply;

		if (redisGetReply(c, &reply) != REDIS_OK)
			die("baseline: %s", c->errstr);
		freeReplyObject(reply);
	}
	return (double)(now_ns() - t0) * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double redis_bench_pct(double *v, size_t n, unsigned pct)
{
	size_t i = n * pct / 100;

	qsort(v, n, sizeof(*v), cmp_d);
	return v[i < n ? i : n - 1];
}

void redis_bench_rmdir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		char path[512];

		if (e->d_type == DT_DIR)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}
