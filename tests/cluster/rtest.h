/* SPDX-License-Identifier: MIT */
/*
 * Cluster test harness: a real redis-server of the test's own (random
 * loopback port, no persistence, its own directory), real node processes
 * (regnode: the registry driven as kvstashd drives it), bounded polls.
 * No mocks, and no sleep decides a result: every wait polls a condition
 * with a generous deadline.
 */
#ifndef KVS_RTEST_H
#define KVS_RTEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#define SKIP 77

#define CHECK(cond, ...)                                                                 \
	do {                                                                             \
		if (!(cond)) {                                                           \
			fprintf(stderr, "%s:%d: FAIL: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                    \
			fputc('\n', stderr);                                             \
			rtest_fail();                                                    \
		}                                                                        \
	} while (0)

struct hub_host;

struct redis {
	pid_t pid;
	int port;
	char dir[128];
	char extra[512]; /* more redis-server arguments, space-separated */
	/* Set before redis_start(): the host it runs in and binds (tests/lib/hub.h); NULL: loopback. */
	const struct hub_host *host;
	/*
	 * Set before redis_start(): a Sentinel of @monitor (its master, which
	 * must run) under the name @master_name, binding @bind (NULL: the
	 * host's address).  Its config file is in its directory.
	 */
	bool sentinel;
	const char *master_name;
	const struct redis *monitor;
	const char *bind;
};

/* Its address to connect to: the host's, or 127.0.0.1. */
const char *redis_host(const struct redis *rd);

struct node {
	pid_t pid;
	int in, out; /* its stdin (we write), its stdout (we read) */
	char name[64];
	char buf[1 << 16];
	size_t have;
	unsigned long next_id;
};

/* Skip (77) when redis-server or the registry is not there. */
void rtest_init(void);
/* Kill every process started, remove directories, exit 1. */
void rtest_fail(void) __attribute__((noreturn));
/* Clean up and exit 0. */
void rtest_pass(void) __attribute__((noreturn));

int redis_start(struct redis *rd);   /* a new port */
int redis_restart(struct redis *rd); /* the same port and directory */
void redis_kill(struct redis *rd, int sig);
void redis_stop(struct redis *rd); /* SIGKILL and reap */
/* One command over a synchronous connection; the reply as text into @out. */
int redis_cmd(const struct redis *rd, char *out, size_t len, const char *fmt, ...);
void redis_addr(const struct redis *rd, char *buf, size_t len);

/* Start regnode for @rd with node name @name and extra arguments (NULL-terminated). */
int node_start(struct node *n, const struct redis *rd, const char *name, ...);
/* Send "<id> <command>"; wait up to @timeout_ms for "<id> ..."; the rest into @out. */
int node_call(struct node *n, int timeout_ms, char *out, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* Send without waiting; returns the id to node_wait() for. */
unsigned long node_send(struct node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int node_wait(struct node *n, unsigned long id, int timeout_ms, char *out, size_t len);
/* The value of key=... in a stats answer, or UINT64_MAX. */
uint64_t node_stat(struct node *n, const char *key);
/* Poll stats until state=@state (up to @timeout_ms). */
int node_wait_state(struct node *n, const char *state, int timeout_ms);
void node_kill(struct node *n, int sig);
/* Close its stdin and wait for the exit; returns the exit status. */
int node_stop(struct node *n);

uint64_t now_ms(void);

#endif /* KVS_RTEST_H */
