/* SPDX-License-Identifier: MIT */
/*
 * Helpers for the soak and hostile-engine programs (tests/soak/): counts
 * from the environment, a random source, the daemon's resources as /proc
 * and STATS see them, and a raw session that speaks wire.h and writes its
 * rings and arguments by hand, as an engine that does not use libkvstash
 * (or lies) would.  The integration tests' harness (itest.h: checks,
 * engine processes, raw socket helpers) comes along.
 */
#ifndef KVS_TEST_SOAK_H
#define KVS_TEST_SOAK_H

#include <stdbool.h>
#include <stdint.h>

#include <shmq/shmq.h>

#include "../integration/itest.h"

/* $name as an unsigned count, else @def. */
unsigned soak_env(const char *name, unsigned def);

/* xorshift64; *s must not be 0. */
static inline uint64_t soak_rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* What kvstashd holds, as /proc and its STATS see it. */
struct soak_res {
	int fds;     /* open fds */
	int regions; /* session regions (memfd "kvstash-session") */
	int maps;    /* engine memory mapped (memfd "kvstash-kv") */
	struct kvs_msg_stats_global g;
};

struct soak_res soak_res(const struct kvsd *d);

/*
 * Wait (up to @timeout_ms) until the daemon has @sessions live sessions,
 * @leases live leases (UINT64_MAX: any), @fds fds, @regions session
 * regions and @maps engine mappings (-1: any): sessions end
 * asynchronously, after their copies drained, and their engine memory is
 * unmapped and closed later still, on the host mover's release thread.
 * Returns the last reading.
 */
struct soak_res soak_settle(const struct kvsd *d, uint64_t sessions, uint64_t leases, int fds,
			    int regions, int maps, int timeout_ms);

/*
 * A barrier in shared memory for forked processes.  The process that made
 * it fails the test when one of its children ends while it waits, instead
 * of waiting for ever for a party that died.
 */
struct soak_barrier;
struct soak_barrier *soak_barrier_new(unsigned parties);
void soak_barrier_wait(struct soak_barrier *b);

/*
 * With nothing else pinned, SAVE fresh blocks @batch at a time (sources
 * blocks [@src, @src + batch) of @kv, filled with it_seed(@seed0 + i, j)
 * for batch i) and pin each batch with a lease, until a SAVE is refused
 * with -ENOSPC.  The leases go to @leases (at most @max); returns how many.
 * A pool that leaked no slot takes exactly capacity / slot blocks.
 */
unsigned soak_pin_pool(struct kvs_client *c, struct test_kv *kv, uint32_t src, unsigned batch,
		       uint64_t seed0, uint64_t *leases, unsigned max);

/* ---- a raw session ---------------------------------------------------- */

struct raw_sess {
	int fd; /* the socket */
	struct kvs_msg_hello_reply rep;
	struct shmq_region *region; /* attached: every word is ours to write */
	struct shmq_ring sq;	    /* producer; p_tail, p_head: the raw words */
	struct shmq_ring cq;	    /* consumer */
	uint8_t *args;
	uint64_t args_size;
	uint64_t next_user_data;
};

/*
 * Connect and say HELLO (@sq_entries 0: the default); fail the test when
 * refused.  raw_sess_hello() returns the refusal instead (no region then).
 */
void raw_sess_open(struct raw_sess *rs, const struct kvsd *d, uint32_t role, const char *inst,
		   const char *ns, uint32_t rank, uint32_t tp, uint32_t sq_entries);
int raw_sess_hello(struct raw_sess *rs, const struct kvsd *d, const struct kvs_msg_hello *h);
void raw_sess_close(struct raw_sess *rs);

/*
 * REGISTER @nl layers over @nm allocations; fds by SCM_RIGHTS.  The reply
 * status (0 or -errno), or -errno when no reply came.
 */
int raw_sess_register(struct raw_sess *rs, const struct kvs_wire_mem *mems, unsigned nm,
		      const struct kvs_wire_layer *layers, unsigned nl, uint32_t flags,
		      const int *fds, unsigned nfds);
/* A header-only request (UNREGISTER); the reply status. */
int raw_sess_request(struct raw_sess *rs, uint32_t type);

/* Copy @n SQEs into the SQ and publish them; the number that fit. */
unsigned raw_sess_submit(struct raw_sess *rs, const struct kvs_sqe *sqes, unsigned n);
/* The next CQE within @timeout_ms: 0, -ETIMEDOUT, or -EPROTO. */
int raw_sess_reap(struct raw_sess *rs, struct kvs_cqe *ret, int timeout_ms);
/* Submit one SQE and wait for its CQE (the only one outstanding): its res. */
int raw_sess_op(struct raw_sess *rs, struct kvs_sqe *sqe, struct kvs_cqe *ret);

/* A sealed memfd of @size bytes named @name, mapped; fails the test on error. */
int soak_memfd(const char *name, uint64_t size, uint8_t **ret_base);

#endif /* KVS_TEST_SOAK_H */
