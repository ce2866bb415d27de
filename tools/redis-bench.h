/* SPDX-License-Identifier: MIT */
/*
 * What the cluster benchmarks (kvstash-registry-bench, kvstash-cluster-bench)
 * share: a redis-server of their own and the baseline they hold the
 * registry against, plain pipelined Redis commands through hiredis' sync
 * API on the same server in the same run.
 *
 * The server listens on a random loopback port, persists nothing, runs in
 * a temporary directory of its own and dies with the benchmark, however
 * the benchmark ends (PR_SET_PDEATHSIG, and an atexit handler that also
 * removes the directory).  Like every tool, these functions exit with a
 * message on failure.
 */
#ifndef KVS_TOOLS_REDIS_BENCH_H
#define KVS_TOOLS_REDIS_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#define RB_KEY_SIZE 16 /* a block key, as the registry and kvstashd see it */

struct redis_bench {
	char host[64];
	int port;
	pid_t pid;     /* the server we started; 0 for one given by address */
	char dir[256]; /* its directory, removed when it stops */
};

/*
 * Start redis-server (@path; NULL: the one in $PATH) into *@rb.  One per
 * process: it is stopped at exit.
 */
void redis_bench_start(struct redis_bench *rb, const char *path);

/* A running server at "HOST:PORT" instead: nothing is started or stopped. */
void redis_bench_attach(struct redis_bench *rb, const char *addr);

/* Kill and reap the server we started, remove its directory; idempotent. */
void redis_bench_stop(struct redis_bench *rb);

/* A sync connection to the server. */
redisContext *redis_bench_connect(const struct redis_bench *rb);

/* "7.0.15" into @buf: the server's INFO. */
void redis_bench_version(redisContext *c, char *buf, size_t len);

/* Key @i of the stream @seed: the benchmarks' block keys. */
void redis_bench_key(uint8_t key[RB_KEY_SIZE], uint64_t seed, uint64_t i);

enum redis_bench_cmd {
	RB_HSET_PEXPIRE, /* HSET key @field 1, PEXPIRE key: what a registration does per key */
	RB_HGETALL,	 /* HGETALL key: the per-key read of a cluster query */
};

/*
 * The baseline: @cmd for the @n keys "@prefix<redis_bench_key(@seed, i)>",
 * pipelined on @c; seconds from the first command to the last reply.
 */
double redis_bench_pipeline(redisContext *c, enum redis_bench_cmd cmd, const char *prefix,
			    const char *field, uint64_t seed, uint64_t n);

/* The @pct-th percentile of @v[@n] (sorts @v). */
double redis_bench_pct(double *v, size_t n, unsigned pct);

/* Remove the plain files of @dir, then @dir (what a benchmark's daemons left). */
void redis_bench_rmdir(const char *dir);

#endif /* KVS_TOOLS_REDIS_BENCH_H */
