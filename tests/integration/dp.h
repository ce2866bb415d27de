/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the data-path integration tests (test-roundtrip,
 * test-tp2, ...): a failure path that never leaves a kvstashd behind, a
 * watchdog against hangs, a supervisor for tests whose engines are forked
 * processes, and thin wrappers that return a whole CQE.
 *
 * Every test is a plain program: it prints one "ok" line per scenario and
 * exits 0, or 1 when a check failed (with the daemon's log on stderr).
 */
#ifndef KVS_TEST_DP_H
#define KVS_TEST_DP_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/harness.h"

#define POISON 0xa5
#define OP_TIMEOUT_MS 10000

/* Fail the test (with the daemon's log) unless @cond holds. */
#define CHECK(cond, ...)                                                            \
	do {                                                                        \
		if (!(cond))                                                        \
			dp_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);             \
	} while (0)

/* r must be @want; otherwise name both, as errno names. */
#define CHECK_RES(r, want, what)                                                    \
	do {                                                                        \
		long _cr_got = (long)(r), _cr_want = (long)(want);                  \
		if (_cr_got != _cr_want)                                            \
			dp_fail(__FILE__, __LINE__, what, "got %ld (%s), want %ld (%s)", \
				_cr_got, _cr_got < 0 ? kvs_strerror((int)_cr_got) : "count", \
				_cr_want, _cr_want < 0 ? kvs_strerror((int)_cr_want) : "count"); \
	} while (0)

void dp_fail(const char *file, int line, const char *expr, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 4, 5)));

/* Print "ok - what" (progress for the log of `make check`). */
void dp_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Start kvstashd (kvsd_start) and remember it, so that a failed check or
 * the watchdog kills it and removes its directory.  Exits 1 when it does
 * not start (the harness prints its log).
 */
void dp_start(struct kvsd *d, const char *extra_ini);
/* Stop the remembered daemon cleanly and check its exit status is 0. */
void dp_stop(struct kvsd *d);

/* Fail the test if it is still running after @seconds (a hang, not a slow run). */
void dp_watchdog(unsigned seconds);

/*
 * Engines as processes.  dp_spawn() forks; the child runs @fn(@arg, @i)
 * and exits with its return value (a failed CHECK in a child exits 1
 * without touching the daemon).  dp_wait_all() reaps every child and
 * fails the test if any exited non-zero, after killing the others.
 */
typedef int (*dp_child_fn)(void *arg, unsigned i);
pid_t dp_spawn(dp_child_fn fn, void *arg, unsigned i);
void dp_wait_all(void);

/* A barrier for the parent's children, in shared memory. */
struct dp_barrier;
struct dp_barrier *dp_barrier_new(unsigned parties);
void dp_barrier_wait(struct dp_barrier *b);

/* Anonymous shared memory that forked children see (zeroed). */
void *dp_shared(size_t size);

/* A worker connected and registered over a new test_kv; fails the test on error. */
struct kvs_client *dp_worker(const struct kvsd *d, const char *instance, const char *ns,
			     uint32_t rank, uint32_t tp, struct test_kv *kv,
			     enum test_layout_kind kind, unsigned layers, unsigned blocks,
			     uint64_t seg);

/* Submit the SQEs prepared so far (one) and wait for its CQE into @ret. */
void dp_submit_wait(struct kvs_client *c, struct kvs_cqe *ret);

/* The usual operations, each returning the whole CQE. */
struct kvs_cqe dp_save(struct kvs_client *c, const uint8_t *keys, const uint32_t *ids, uint32_t n);
struct kvs_cqe dp_query(struct kvs_client *c, const uint8_t *keys, uint32_t n, uint32_t flags);
struct kvs_cqe dp_load(struct kvs_client *c, uint64_t lease, const uint32_t *ids, uint32_t n,
		       uint32_t layer_begin, uint32_t layer_count);
struct kvs_cqe dp_release(struct kvs_client *c, uint64_t lease);
/* FLUSH that must succeed. */
void dp_flush(struct kvs_client *c);

/* Is layer @l of block @b all @v?  Are all blocks of @kv all @v? */
bool dp_layer_is_poison(struct test_kv *kv, unsigned l, unsigned b, uint8_t v);
bool dp_all_poison(struct test_kv *kv, uint8_t v);

/*
 * Prefix-chained keys of prompt @seed: key i hashes key i-1 and i, as an
 * engine's block hashes do.  Unlike test_keys(), nearby seeds give
 * unrelated chains (test_keys(29) and test_keys(33) collide), which tests
 * that save thousands of prompts need.
 */
void dp_keys(uint8_t *keys, unsigned n, uint64_t seed);

/* Block ids first, first+1, ... */
void dp_ids(uint32_t *ids, uint32_t n, uint32_t first);

/* Global counters of the daemon, through a short-lived admin session. */
struct kvs_msg_stats_global dp_stats(const struct kvsd *d);

/* A seed per (prompt, block): the bytes a block of a prompt holds. */
static inline uint64_t dp_seed(uint64_t prompt, unsigned i)
{
	return prompt * 1000u + i + 1;
}

#endif /* KVS_TEST_DP_H */
