/* SPDX-License-Identifier: MIT */
/*
 * Test harness for integration tests: a real kvstashd in a temporary
 * directory, real clients (libkvstash), real memfds.  No mocks.
 *
 * Tests find the build tree through $top_builddir (set by `make check`).
 */
#ifndef KVS_TEST_HARNESS_H
#define KVS_TEST_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvstash/kvstash.h>

#define SKIP 77

struct hub_host;

struct kvsd {
	pid_t pid;
	char dir[128];	/* temporary directory, removed by kvsd_cleanup() */
	char sock[160];
	char conf[160];
	char log[160];
	const struct hub_host *host; /* the network namespace it runs in (hub.h); NULL: ours */
};

/*
 * Start kvstashd with a generated config: a small pool (16M unless
 * @extra_ini sets [pool] size), the socket in a temp dir, then @extra_ini
 * appended verbatim (INI text, may be NULL).  Waits until the socket
 * answers and the daemon has logged that it is ready.  Returns 0 or -errno (the log is printed on failure).
 */
int kvsd_start(struct kvsd *d, const char *extra_ini);
/* The same in host @h's network namespace (tests/lib/hub.h), for restarts too. */
int kvsd_start_in(struct kvsd *d, const struct hub_host *h, const char *extra_ini);
/* Start again on the same directory and config (after a kill). */
int kvsd_restart(struct kvsd *d);
/* SIGTERM and wait; returns the exit status (or -errno). */
int kvsd_stop(struct kvsd *d);
/*
 * kvsd_stop(), the log printed when the exit was not clean (it says why),
 * then kvsd_cleanup(); returns kvsd_stop()'s result.
 */
int kvsd_finish(struct kvsd *d);
/* SIGKILL and reap. */
void kvsd_kill(struct kvsd *d);

/*
 * Wait until every thread of @pid is stopped (after SIGSTOP, which kill()
 * only queues: a thread running on another CPU stops a little later).
 * 0, or -ETIMEDOUT.
 */
int wait_stopped(pid_t pid, int timeout_ms);
/* Remove the directory (after stop/kill). */
void kvsd_cleanup(struct kvsd *d);
/* Print the daemon's log to stderr (for failing tests). */
void kvsd_dump_log(const struct kvsd *d);
/* Does the log contain @needle? */
bool kvsd_log_contains(const struct kvsd *d, const char *needle);
/* How many lines of the log hold @needle? */
unsigned kvsd_log_count(const struct kvsd *d, const char *needle);

/* Open fds of a process (/proc/PID/fd); memfds named "kvstash-session". */
int proc_fd_count(pid_t pid);
int proc_memfd_count(pid_t pid, const char *name);
/* Mappings in /proc/PID/maps whose path mentions @needle. */
int proc_map_count(pid_t pid, const char *needle);

/* Connect with the usual options; fails the test on error when @must. */
int test_connect(const struct kvsd *d, uint32_t role, const char *instance, const char *ns,
		 uint32_t rank, uint32_t tp, struct kvs_client **ret);
int test_admin(const struct kvsd *d, struct kvs_client **ret);
/* The next completion within @ms, copied into @ret and handed back. */
int test_wait_cqe(struct kvs_client *c, int ms, struct kvs_cqe *ret);

/* One STATS round trip: the global counters. */
int test_stats(struct kvs_client *admin, struct kvs_msg_stats_global *ret);
/* Sessions listed by STATUS. */
int test_status_sessions(struct kvs_client *admin);

/* ---- layouts over host memory ------------------------------------ */

enum test_layout_kind {
	LAYOUT_PAGE_FIRST, /* Qwen3-like: one allocation, a block's layers adjacent */
	LAYOUT_SPLIT_KV,   /* vLLM-like: one allocation per layer, K and V segments */
	LAYOUT_MLA,	   /* replicated: one allocation per layer, one segment */
};

struct test_kv {
	enum test_layout_kind kind;
	unsigned layers;
	unsigned blocks;
	uint64_t seg;	       /* segment bytes */
	unsigned nmems;
	int fds[512];
	uint8_t *bases[512];
	uint64_t sizes[512];
	struct kvs_mem mems[512];
	struct kvs_layer lays[512];
	char names[512][32];
};

/* Allocate sealed memfds and describe the layout; 0 or -errno. */
int test_kv_alloc(struct test_kv *kv, enum test_layout_kind kind, unsigned layers,
		  unsigned blocks, uint64_t seg);
void test_kv_free(struct test_kv *kv);
int test_kv_register(struct kvs_client *c, struct test_kv *kv);

/* Address of segment @s of block @b of layer @l in the engine memory. */
uint8_t *test_kv_seg(struct test_kv *kv, unsigned l, unsigned b, unsigned s);
unsigned test_kv_segments(const struct test_kv *kv);
/* Fill block @b (all layers) with bytes derived from @seed; check it. */
void test_kv_fill(struct test_kv *kv, unsigned b, uint64_t seed);
bool test_kv_check(struct test_kv *kv, unsigned b, uint64_t seed);
/* Same for a layer range only. */
bool test_kv_check_layers(struct test_kv *kv, unsigned b, uint64_t seed, unsigned l0, unsigned n);
void test_kv_poison(struct test_kv *kv, unsigned b, uint8_t v);
bool test_kv_is_poison(struct test_kv *kv, unsigned b, uint8_t v);
/* Is layer @l of block @b all @v? */
bool test_kv_layer_is_poison(struct test_kv *kv, unsigned l, unsigned b, uint8_t v);

/* Prefix-chained keys from a seed: keys[16 * n]. */
void test_keys(uint8_t *keys, unsigned n, uint64_t seed);

/* splitmix64: a deterministic stream from the seed *@s. */
uint64_t test_splitmix64(uint64_t *s);

uint64_t test_now_ns(void);

#endif /* KVS_TEST_HARNESS_H */
