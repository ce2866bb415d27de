/* SPDX-License-Identifier: MIT */
/*
 * The one harness of the integration tests (tests/integration/test-*.c,
 * and the soak programs): each test is a plain program that starts a real
 * kvstashd (tests/lib/harness.h) and real clients, runs its scenarios in
 * order, prints one "ok - ..." line per scenario and exits 0; a failed
 * CHECK prints where and why, kills the daemon and the engine processes
 * it_spawn() forked, prints the daemon's log and exits 1; a test that
 * cannot run here exits 77 (SKIP).  it_watchdog() turns a hang into a
 * failure.
 *
 * Besides the checks: engines as forked processes, the usual operations
 * returning whole CQEs, a raw SOCK_SEQPACKET speaker of wire.h for input
 * libkvstash would never send, STATUS lookups and /proc counts.
 */
#ifndef KVS_TEST_ITEST_H
#define KVS_TEST_ITEST_H

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "../lib/harness.h"

#define POISON	      0xa5
#define OP_TIMEOUT_MS 10000

/* Fail the test (with the daemon's log) unless @cond holds. */
#define CHECK(cond, ...)                                                 \
	do {                                                             \
		if (!(cond))                                             \
			it_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
	} while (0)

/* The same, when the expression says it all. */
#define CHECK_TRUE(cond)                                                \
	do {                                                            \
		if (!(cond))                                            \
			it_fail(__FILE__, __LINE__, #cond, "is false"); \
	} while (0)

/*
 * @a @op @b (==, !=, <, <=, >, >=) as signed or unsigned integers, or as
 * strings (strcmp); on failure both values are printed.  Each operand is
 * evaluated once.
 */
#define CHECK_INT(a, op, b)  CHECK_CMP_(intmax_t, "%" PRIdMAX, a, op, b)
#define CHECK_UINT(a, op, b) CHECK_CMP_(uintmax_t, "%" PRIuMAX, a, op, b)
#define CHECK_CMP_(T, fmt, a, op, b)                                                               \
	do {                                                                                       \
		T _cc_a = (T)(a), _cc_b = (T)(b);                                                  \
		if (!(_cc_a op _cc_b))                                                             \
			it_fail(__FILE__, __LINE__, #a " " #op " " #b, fmt " " #op " " fmt, _cc_a, \
				_cc_b);                                                            \
	} while (0)
#define CHECK_STR(a, op, b)                                                                     \
	do {                                                                                    \
		const char *_cs_a = (a), *_cs_b = (b);                                          \
		if (!(strcmp(_cs_a, _cs_b) op 0))                                               \
			it_fail(__FILE__, __LINE__, #a " " #op " " #b, "\"%s\" " #op " \"%s\"", \
				_cs_a, _cs_b);                                                  \
	} while (0)

/* r must be @want; otherwise name both, as errno names. */
#define CHECK_RES(r, want, what)                                                                  \
	do {                                                                                      \
		long _cr_got = (long)(r), _cr_want = (long)(want);                                \
		if (_cr_got != _cr_want)                                                          \
			it_fail(__FILE__, __LINE__, what, "got %ld (%s), want %ld (%s)", _cr_got, \
				_cr_got < 0 ? kvs_strerror((int)_cr_got) : "count", _cr_want,     \
				_cr_want < 0 ? kvs_strerror((int)_cr_want) : "count");            \
	} while (0)

void it_fail(const char *file, int line, const char *expr, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 4, 5)));

/* Print "ok - what" (progress for the log of `make check`). */
void it_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Start kvstashd (kvsd_start) and remember it, so that a failed check or
 * the watchdog kills it and removes its directory.  Exits 1 when it does
 * not start (the harness prints its log).
 */
void it_start(struct kvsd *d, const char *extra_ini);
/* Stop the remembered daemon cleanly and check its exit status is 0. */
void it_stop(struct kvsd *d);

/* Fail the test if it is still running after @seconds (a hang, not a slow run). */
void it_watchdog(unsigned seconds);

/*
 * Engines as processes.  it_spawn() forks; the child runs @fn(@arg, @i)
 * and exits with its return value (a failed CHECK in a child exits 1
 * without touching the daemon).  it_wait_all() reaps every child and
 * fails the test if any exited non-zero, after killing the others.
 */
typedef int (*it_child_fn)(void *arg, unsigned i);
pid_t it_spawn(it_child_fn fn, void *arg, unsigned i);
void it_wait_all(void);

/*
 * One child for one result: it runs @fn(@arg, @ret) with no watchdog and
 * dies with the test, and exits with @fn's value; what @fn left in @ret
 * (@size bytes) comes back into the caller's @ret.  Fails the test unless
 * the child sent it and exited 0.
 */
void it_in_child(int (*fn)(void *arg, void *ret), void *arg, void *ret, size_t size);

/* In a child: become nobody (uid and gid 65534, no other group), or exit SKIP. */
#define NOBODY 65534
void it_become_nobody(void);

/* A barrier for the parent's children, in shared memory. */
struct it_barrier;
struct it_barrier *it_barrier_new(unsigned parties);
void it_barrier_wait(struct it_barrier *b);

/* Anonymous shared memory that forked children see (zeroed). */
void *it_shared(size_t size);

/* A worker connected and registered over a new test_kv; fails the test on error. */
struct kvs_client *it_worker(const struct kvsd *d, const char *instance, const char *ns,
			     uint32_t rank, uint32_t tp, struct test_kv *kv,
			     enum test_layout_kind kind, unsigned layers, unsigned blocks,
			     uint64_t seg);

/* Submit the SQEs prepared so far (one) and wait for its CQE into @ret. */
void it_submit_wait(struct kvs_client *c, struct kvs_cqe *ret);

/* The usual operations, each returning the whole CQE. */
struct kvs_cqe it_save(struct kvs_client *c, const uint8_t *keys, const uint32_t *ids, uint32_t n);
struct kvs_cqe it_query(struct kvs_client *c, const uint8_t *keys, uint32_t n, uint32_t flags);
struct kvs_cqe it_load(struct kvs_client *c, uint64_t lease, const uint32_t *ids, uint32_t n,
		       uint32_t layer_begin, uint32_t layer_count);
struct kvs_cqe it_release(struct kvs_client *c, uint64_t lease);
/* FLUSH that must succeed. */
void it_flush(struct kvs_client *c);

/* Are all blocks of @kv all @v (whole allocations, not only the views)? */
bool it_all_poison(struct test_kv *kv, uint8_t v);

/*
 * Prefix-chained keys of prompt @seed: key i hashes key i-1 and i, as an
 * engine's block hashes do.  Unlike test_keys(), nearby seeds give
 * unrelated chains (test_keys(29) and test_keys(33) collide), which tests
 * that save thousands of prompts need.
 */
void it_keys(uint8_t *keys, unsigned n, uint64_t seed);

/* Block ids first, first+1, ... */
void it_ids(uint32_t *ids, uint32_t n, uint32_t first);

/* Global counters of the daemon, through a short-lived admin session. */
struct kvs_msg_stats_global it_stats(const struct kvsd *d);

/* A seed per (prompt, block): the bytes a block of a prompt holds. */
static inline uint64_t it_seed(uint64_t prompt, unsigned i)
{
	return prompt * 1000u + i + 1;
}

/* ---- raw socket, STATUS and /proc --------------------------------- */

/* Connect a raw socket to @sock; the fd or -errno. */
int raw_connect(const char *sock);

/* Send one packet with @nfds fds (SCM_RIGHTS); 0 or -errno. */
int raw_send(int fd, const void *buf, size_t len, const int *fds, unsigned nfds);

/*
 * Receive one packet within @timeout_ms: its length, 0 at EOF, -ETIMEDOUT,
 * or -errno.  Fds that arrive go to @fds (up to @max, the rest closed) and
 * their number to *@ret_nfds; @fds may be NULL to close them all.
 */
ssize_t raw_recv(int fd, void *buf, size_t cap, int *fds, unsigned max, unsigned *ret_nfds,
		 int timeout_ms);

/* Does the peer close the socket within @timeout_ms (packets before EOF are skipped)? */
bool raw_eof(int fd, int timeout_ms);

/* A HELLO as libkvstash would send it (host device). */
void raw_hello_init(struct kvs_msg_hello *h, uint32_t role, const char *instance, const char *ns,
		    uint32_t rank, uint32_t tp);

/*
 * Say @h and read the reply into @rep (zeroed first); the region fd, if
 * one came, to *@ret_fd (else -1).  Returns the reply's status, or -errno
 * when no reply came.
 */
int raw_hello(int fd, const struct kvs_msg_hello *h, struct kvs_msg_hello_reply *rep, int *ret_fd);

/* STATUS entry of session @id; 0, -ENOENT, or -errno. */
int status_session(struct kvs_client *admin, uint64_t id, struct kvs_msg_status_session *ret);

/*
 * Poll proc_fd_count(), proc_memfd_count() or proc_map_count() until it
 * equals @want or @timeout_ms passes; the last count.  kvstashd may close
 * an fd just after it has replied, so a count is only final once it stops
 * changing towards the expected value.
 */
int wait_fd_count(pid_t pid, int want, int timeout_ms);
int wait_memfd_count(pid_t pid, const char *name, int want, int timeout_ms);
int wait_map_count(pid_t pid, const char *needle, int want, int timeout_ms);
/* The same for kvsd_log_count(). */
int wait_log_count(const struct kvsd *d, const char *needle, int want, int timeout_ms);

/* Is @pid still running (and not a zombie)? */
bool pid_alive(pid_t pid);

/* Path of the kvstashd binary in the build tree. */
const char *kvstashd_bin(void);

#endif /* KVS_TEST_ITEST_H */
