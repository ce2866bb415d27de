/* SPDX-License-Identifier: MIT */
/*
 * Soak: exhaustion.  Every resource an engine can use up, used up on
 * purpose, SOAK_EXHAUST_ROUNDS times (default 5); each time the documented
 * error comes back, nothing else breaks, and service resumes once the
 * resource is given back:
 *   pool      every slot pinned by leases: SAVE is -ENOSPC; pinned blocks
 *             still LOAD byte-exact; a lease spent or released, SAVEs work
 *   leases    [lease] max_leases: the next leased QUERY is -EBUSY (NOLEASE
 *             QUERYs and other instances unaffected) until a RELEASE, a
 *             LOAD that spends one, or the TTL frees one
 *   sessions  [server] max_sessions: HELLO is -EUSERS (admin sessions still
 *             get in) until sessions close
 *   arguments a 4 KiB argument area: kvs_prep_*() is -ENOSPC while kvstashd
 *             has not consumed earlier SQEs (it is stopped), and works once
 *             it has; then SOAK_ARG_JOBS SAVE+QUERY jobs wrap the area over
 *             and over with every CQE correct (a bad argument window would
 *             show as -ERANGE, -EINVAL or missing hits)
 *   in flight [session] max_inflight: an engine that does not reap fills its
 *             CQ; kvstashd then takes exactly max_inflight more SQEs and
 *             stops, and resumes as CQEs are reaped, every one in order; with
 *             slow copies, SQ head - CQ tail never exceeds 2 x max_inflight
 *             (running, plus finished in the worker's round: CQEs are
 *             published at its end)
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "soak.h"

#define LAYERS 4u
#define SEG    4096u
#define SLOT   (LAYERS * SEG)
#define BLOCKS 96u
#define BATCH  32u

static unsigned rounds;

/* ---- pool ------------------------------------------------------------ */

static void pool(void)
{
	uint64_t leases[64], enospc = 0;
	uint8_t keys[BATCH * KVS_KEY_SIZE];
	uint32_t ids[BATCH];
	struct kvs_msg_stats_global g0, g;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvs_cqe e;
	struct kvsd d;

	it_start(&d, "[pool]\nsize = 4M\nextent_size = 256K\n");
	c = it_worker(&d, "ex-pool", "ex-pool/pf", 0, 1, &kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      SEG);
	g0 = it_stats(&d);
	for (unsigned r = 0; r < rounds; r++) {
		uint64_t seed0 = 1000 * (r + 1);
		unsigned nb = soak_pin_pool(c, &kv, 0, BATCH, seed0, leases, 64);

		enospc++;
		CHECK(nb * BATCH * SLOT == (4u << 20),
		      "round %u: %u blocks pinned, the pool has %u", r, nb * BATCH,
		      (4u << 20) / SLOT);
		/* The documented error, again, for a single block. */
		it_keys(keys, 1, seed0 + 999);
		it_ids(ids, 1, 0);
		CHECK_RES(it_save(c, keys, ids, 1).res, -ENOSPC, "SAVE into a pinned pool");
		enospc++;
		g = it_stats(&d);
		CHECK(g.pool_used_bytes == g.pool_capacity_bytes && g.leases_live == nb,
		      "round %u: %llu of %llu bytes used, %llu leases", r,
		      (unsigned long long)g.pool_used_bytes,
		      (unsigned long long)g.pool_capacity_bytes, (unsigned long long)g.leases_live);
		/* Pinned blocks are intact: LOAD one batch (spending its lease). */
		for (unsigned b = BATCH; b < 2 * BATCH; b++)
			test_kv_poison(&kv, b, POISON);
		it_ids(ids, BATCH, BATCH);
		CHECK_RES(it_load(c, leases[0], ids, BATCH, 0, 0).res, BATCH,
			  "LOAD of pinned blocks");
		for (unsigned i = 0; i < BATCH; i++)
			CHECK(test_kv_check(&kv, BATCH + i, it_seed(seed0, i)),
			      "pinned block %u differs", i);
		/* A spent lease unpins: a batch fits again; pinned too, the pool is full again. */
		it_keys(keys, BATCH, seed0 + 500);
		it_ids(ids, BATCH, 0);
		CHECK_RES(it_save(c, keys, ids, BATCH).res, BATCH, "SAVE after a lease was spent");
		it_flush(c);
		e = it_query(c, keys, BATCH, 0);
		CHECK_RES(e.res, BATCH, "QUERY of it");
		leases[0] = e.result0;
		it_keys(keys, 1, seed0 + 501);
		CHECK_RES(it_save(c, keys, ids, 1).res, -ENOSPC, "SAVE into the pinned pool again");
		enospc++;
		/* Released leases unpin too. */
		for (unsigned i = 0; i < nb; i++)
			CHECK_RES(it_release(c, leases[i]).res, 0, "RELEASE");
		CHECK_RES(it_save(c, keys, ids, 1).res, 1, "SAVE after the RELEASEs");
		g = it_stats(&d);
		CHECK(g.leases_live == 0, "%llu leases live", (unsigned long long)g.leases_live);
	}
	g = it_stats(&d);
	CHECK(g.errors - g0.errors == enospc, "%llu errors counted, %llu -ENOSPC expected",
	      (unsigned long long)(g.errors - g0.errors), (unsigned long long)enospc);
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
	it_ok("pool: %u rounds of every slot pinned: SAVE -ENOSPC (%llu times), pinned blocks "
	      "LOAD byte-exact, a spent or released lease lets SAVEs in again",
	      rounds, (unsigned long long)enospc);
}

/* ---- leases ---------------------------------------------------------- */

#define MAX_LEASES 32u

static void leases(void)
{
	uint8_t keys[MAX_LEASES * KVS_KEY_SIZE];
	uint32_t ids[MAX_LEASES];
	uint64_t held[MAX_LEASES], busy = 0, t0;
	struct kvs_msg_stats_global g0, g;
	struct kvs_client *a, *b;
	struct test_kv kva, kvb;
	struct kvs_cqe e;
	struct kvsd d;

	it_start(&d, "[lease]\nmax_leases = 32\nttl = 5s\n");
	a = it_worker(&d, "ex-lease-a", "ex-lease/pf", 0, 1, &kva, LAYOUT_PAGE_FIRST, LAYERS,
		      BLOCKS, SEG);
	b = it_worker(&d, "ex-lease-b", "ex-lease/pf", 0, 1, &kvb, LAYOUT_PAGE_FIRST, LAYERS,
		      BLOCKS, SEG);
	it_keys(keys, MAX_LEASES, 42);
	it_ids(ids, MAX_LEASES, 0);
	for (unsigned i = 0; i < MAX_LEASES; i++)
		test_kv_fill(&kva, i, it_seed(42, i));
	CHECK_RES(it_save(a, keys, ids, MAX_LEASES).res, MAX_LEASES, "SAVE");
	it_flush(a);
	g0 = it_stats(&d);
	for (unsigned r = 0; r < rounds; r++) {
		for (unsigned i = 0; i < MAX_LEASES; i++) {
			e = it_query(a, keys, 1 + i, 0);
			CHECK_RES(e.res, 1 + i, "a leased QUERY within max_leases");
			held[i] = e.result0;
		}
		CHECK_RES(it_query(a, keys, 4, 0).res, -EBUSY, "a leased QUERY past max_leases");
		busy++;
		CHECK_RES(it_query(a, keys, 4, KVS_QUERY_NOLEASE).res, 4, "a NOLEASE QUERY");
		e = it_query(b, keys, 4, 0);
		CHECK_RES(e.res, 4, "another instance's leased QUERY");
		CHECK_RES(it_release(b, e.result0).res, 0, "its RELEASE");
		/* RELEASE frees one. */
		CHECK_RES(it_release(a, held[0]).res, 0, "RELEASE");
		e = it_query(a, keys, 2, 0);
		CHECK_RES(e.res, 2, "a leased QUERY after a RELEASE");
		held[0] = e.result0;
		CHECK_RES(it_query(a, keys, 2, 0).res, -EBUSY, "full again");
		busy++;
		/* A LOAD spends one (one rank: one consumer). */
		it_ids(ids, 2, MAX_LEASES);
		CHECK_RES(it_load(a, held[0], ids, 2, 0, 0).res, 2, "LOAD spends the lease");
		for (unsigned i = 0; i < 2; i++)
			CHECK(test_kv_check(&kva, MAX_LEASES + i, it_seed(42, i)),
			      "loaded block differs");
		e = it_query(a, keys, 3, 0);
		CHECK_RES(e.res, 3, "a leased QUERY after a LOAD spent one");
		held[0] = e.result0;
		CHECK_RES(it_query(a, keys, 3, 0).res, -EBUSY, "full again");
		busy++;
		if (r + 1 < rounds) {
			for (unsigned i = 0; i < MAX_LEASES; i++)
				CHECK_RES(it_release(a, held[i]).res, 0, "RELEASE of all");
			continue;
		}
		/* Last round: let the TTL free them all. */
		t0 = test_now_ns();
		do {
			usleep(100000);
			g = it_stats(&d);
			CHECK(test_now_ns() - t0 < 30000000000ull, "leases never expired");
		} while (g.leases_live);
		CHECK(g.leases_expired - g0.leases_expired == MAX_LEASES, "%llu leases expired",
		      (unsigned long long)(g.leases_expired - g0.leases_expired));
		e = it_query(a, keys, 1, 0);
		CHECK_RES(e.res, 1, "a leased QUERY after the TTL");
		CHECK_RES(it_release(a, e.result0).res, 0, "RELEASE");
	}
	g = it_stats(&d);
	CHECK(g.errors - g0.errors == busy, "%llu errors, %llu -EBUSY expected",
	      (unsigned long long)(g.errors - g0.errors), (unsigned long long)busy);
	kvs_close(a);
	kvs_close(b);
	test_kv_free(&kva);
	test_kv_free(&kvb);
	it_stop(&d);
	it_ok("leases: %u rounds at max_leases = %u: -EBUSY (%llu times) until a RELEASE, a LOAD "
	      "or the TTL frees one; other instances and NOLEASE QUERYs unaffected",
	      rounds, MAX_LEASES, (unsigned long long)busy);
}

/* ---- sessions -------------------------------------------------------- */

#define MAX_SESSIONS 16u

static int conn(const struct kvsd *d, unsigned i, uint32_t role, struct kvs_client **ret)
{
	char inst[32];

	snprintf(inst, sizeof(inst), "ex-s-%u", i);
	return test_connect(d, role, inst, "ex-sess", 0, 1, ret);
}

/* Connect, retrying while kvstashd has not yet seen closed sessions (and their ranks) go. */
static struct kvs_client *conn_retry(const struct kvsd *d, unsigned i)
{
	struct kvs_client *c = NULL;
	uint64_t t0 = test_now_ns();
	int r;

	while (((r = conn(d, i, KVS_ROLE_WORKER, &c)) == -EUSERS || r == -EADDRINUSE) &&
	       test_now_ns() - t0 < 10000000000ull)
		usleep(5000);
	CHECK(r == 0, "session %u after others closed: %s", i, kvs_strerror(r));
	return c;
}

static void sessions(void)
{
	struct kvs_client *c[MAX_SESSIONS], *x, *admin;
	struct kvs_msg_stats_global g0, g;
	uint64_t refused = 0;
	struct kvsd d;

	it_start(&d, "[server]\nmax_sessions = 16\n");
	g0 = it_stats(&d);
	for (unsigned i = 0; i < MAX_SESSIONS; i++)
		c[i] = conn_retry(&d, i);
	for (unsigned r = 0; r < rounds; r++) {
		CHECK_RES(conn(&d, 100, KVS_ROLE_WORKER, &x), -EUSERS,
			  "a worker past max_sessions");
		CHECK_RES(conn(&d, 101, KVS_ROLE_SCHEDULER, &x), -EUSERS,
			  "a scheduler past max_sessions");
		refused += 2;
		CHECK(test_admin(&d, &admin) == 0, "an admin session while full");
		CHECK(test_status_sessions(admin) == (int)MAX_SESSIONS, "sessions listed");
		kvs_close(admin);
		for (unsigned i = 0; i < MAX_SESSIONS; i++)
			CHECK_RES(kvs_nop_sync(c[i], OP_TIMEOUT_MS), 0, "NOP while full");
		/* Five leave, five others come. */
		for (unsigned i = 0; i < 5; i++) {
			unsigned k = (r * 5 + i * 3) % MAX_SESSIONS;

			kvs_close(c[k]);
			c[k] = conn_retry(&d, k);
		}
	}
	for (unsigned i = 0; i < MAX_SESSIONS; i++)
		kvs_close(c[i]);
	c[0] = conn_retry(&d, 0);
	kvs_close(c[0]);
	g = soak_settle(&d, 0, 0, -1, 0, -1, 10000).g;
	CHECK(g.sessions_live == 0, "%llu sessions live", (unsigned long long)g.sessions_live);
	CHECK(g.sessions_refused - g0.sessions_refused >= refused,
	      "%llu sessions refused, %llu expected at least",
	      (unsigned long long)(g.sessions_refused - g0.sessions_refused),
	      (unsigned long long)refused);
	it_stop(&d);
	it_ok("sessions: %u rounds at max_sessions = %u: HELLO -EUSERS (%llu times), admin still "
	      "served, sessions that close make room",
	      rounds, MAX_SESSIONS, (unsigned long long)refused);
}

/* ---- the argument area -------------------------------------------------- */

#define ARG_BLOCKS 256u
#define ARG_MAXN   48u
#define ARG_DEPTH  16u

struct job {
	uint64_t seed;
	unsigned n;
	int state; /* 0: free, 1: SAVE submitted, 2: QUERY submitted */
};

/* Prepare @job's next operation; -ENOSPC when the argument area is full. */
static int prep_job(struct kvs_client *c, struct job *j, unsigned slot)
{
	uint8_t keys[ARG_MAXN * KVS_KEY_SIZE];
	uint32_t ids[ARG_MAXN];
	struct kvs_sqe *sqe = kvs_get_sqe(c);
	int r;

	CHECK(sqe, "no SQE");
	it_keys(keys, j->n, j->seed);
	if (j->state == 0) {
		for (unsigned i = 0; i < j->n; i++)
			ids[i] = (uint32_t)((j->seed * 7 + i) % ARG_BLOCKS);
		r = kvs_prep_save(c, sqe, keys, ids, j->n, slot);
	} else {
		r = kvs_prep_query(c, sqe, keys, j->n, j->seed, KVS_QUERY_NOLEASE, slot);
	}
	if (r == 0)
		j->state++;
	return r;
}

static void args(void)
{
	unsigned jobs = soak_env("SOAK_ARG_JOBS", 2000), started = 0, done = 0, prepped = 0;
	uint64_t enospc = 0, ops = 0, rs = 0x6a09e667f3bcc909ull;
	struct job q[ARG_DEPTH] = { { 0 } };
	struct kvs_connect_opts o;
	struct kvs_session_info info;
	struct kvs_msg_stats_global g;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvs_cqe *cqe;
	struct kvsd d;
	int r;

	/* 256-byte blocks (512-byte slots): 64 MiB hold every block the jobs save. */
	it_start(&d, "[pool]\nsize = 64M\nextent_size = 1M\n");
	CHECK(test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, 1, ARG_BLOCKS, 256) == 0, "alloc");
	kvs_connect_opts_init(&o);
	o.instance = "ex-args";
	o.ns = "ex-args/pf";
	o.arg_bytes = 4096;
	CHECK(kvs_connect(d.sock, &o, &c) == 0, "connect");
	CHECK(test_kv_register(c, &kv) == 0, "register");
	kvs_session_info(c, &info);
	CHECK(info.arg_bytes == 4096, "argument area of %llu bytes",
	      (unsigned long long)info.arg_bytes);

	/*
	 * kvstashd stopped: SAVEs of 16 keys (320 bytes) fill the area after
	 * 12; the 13th prep is -ENOSPC, and stays so, until kvstashd consumes.
	 */
	CHECK(kill(d.pid, SIGSTOP) == 0, "SIGSTOP");
	CHECK(wait_stopped(d.pid, 5000) == 0, "kvstashd did not stop");
	for (unsigned i = 0;; i++) {
		struct job j = { .seed = 500 + i, .n = 16 };

		CHECK(i <= 12, "more than 12 SAVEs of 320 bytes fit 4096 bytes");
		r = prep_job(c, &j, 0);
		if (r == -ENOSPC) {
			CHECK(i == 12, "-ENOSPC after %u SAVEs of 320 bytes", i);
			enospc++;
			break;
		}
		CHECK(r == 0, "prep: %s", kvs_strerror(r));
		CHECK(kvs_submit(c) == 1, "submit");
	}
	{
		uint8_t k20[20 * KVS_KEY_SIZE] = { 0 };

		/* 256 bytes are left at the end, and nothing before the start is free. */
		CHECK_RES(kvs_prep_query(c, kvs_get_sqe(c), k20, 20, 0, 0, 0), -ENOSPC,
			  "a 320-byte QUERY into the full area");
	}
	enospc++;
	CHECK(kill(d.pid, SIGCONT) == 0, "SIGCONT");
	for (unsigned i = 0; i < 12; i++) {
		CHECK(kvs_wait_cqe(c, &cqe, OP_TIMEOUT_MS) == 0, "CQE %u", i);
		CHECK_RES(cqe->res, 16, "SAVE queued while kvstashd was stopped");
		kvs_cqe_seen(c, cqe);
	}
	CHECK_RES(it_query(c, (uint8_t[16]){ 0 }, 1, KVS_QUERY_NOLEASE).res, 0,
		  "a QUERY once kvstashd consumed the SQEs");

	/*
	 * Jobs: SAVE n keys, then QUERY them: all must hit.  Up to ARG_DEPTH
	 * at once; a prep that finds the area full reaps a CQE and retries.
	 */
	while (done < jobs) {
		bool progress = false;

		for (unsigned s = 0; s < ARG_DEPTH; s++) {
			struct job *j = &q[s];

			if (j->state == 0 && started < jobs && prepped < ARG_DEPTH) {
				j->seed = 1000000 + started;
				j->n = 1 + (unsigned)(soak_rnd(&rs) % ARG_MAXN);
				r = prep_job(c, j, s);
				if (r == -ENOSPC) {
					enospc++;
					continue;
				}
				CHECK(r == 0, "prep SAVE: %s", kvs_strerror(r));
				started++;
				prepped++;
				progress = true;
			}
		}
		kvs_submit(c);
		r = kvs_wait_cqe(c, &cqe, OP_TIMEOUT_MS);
		CHECK(r == 0 || (r == -ETIMEDOUT && progress), "wait: %s", kvs_strerror(r));
		if (r)
			continue;
		{
			struct job *j = &q[cqe->user_data];

			CHECK(cqe->user_data < ARG_DEPTH && j->state >= 1, "CQE %llu",
			      (unsigned long long)cqe->user_data);
			CHECK(cqe->res == (int32_t)j->n, "job %llu: %s of %u keys: %d (%s)",
			      (unsigned long long)j->seed, j->state == 1 ? "SAVE" : "QUERY", j->n,
			      cqe->res, kvs_strerror(cqe->res));
			kvs_cqe_seen(c, cqe);
			ops++;
			if (j->state == 1) {
				r = prep_job(c, j, (unsigned)(j - q));
				if (r == -ENOSPC) {
					/* Retried below once a CQE freed room. */
					enospc++;
					j->state = 3;
				} else {
					CHECK(r == 0, "prep QUERY: %s", kvs_strerror(r));
				}
			} else {
				j->state = 0;
				prepped--;
				done++;
			}
		}
		for (unsigned s = 0; s < ARG_DEPTH; s++) {
			if (q[s].state != 3)
				continue;
			q[s].state = 1;
			r = prep_job(c, &q[s], s);
			if (r == -ENOSPC) {
				q[s].state = 3;
				enospc++;
			} else {
				CHECK(r == 0, "prep QUERY: %s", kvs_strerror(r));
			}
		}
	}
	g = it_stats(&d);
	CHECK(g.errors == 0 && g.protocol_errors == 0, "%llu error CQEs, %llu protocol errors",
	      (unsigned long long)g.errors, (unsigned long long)g.protocol_errors);
	CHECK(g.evictions == 0, "%llu evictions: the QUERYs prove nothing",
	      (unsigned long long)g.evictions);
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
	it_ok("arguments: a 4 KiB area: kvs_prep_*() -ENOSPC until kvstashd consumed (%llu times "
	      "in all); %u SAVE+QUERY jobs (%llu ops) wrapped it, every CQE exact, no error",
	      (unsigned long long)enospc, jobs, (unsigned long long)ops);
}

/* ---- in flight ---------------------------------------------------------- */

#define MAX_INFLIGHT 4u

/* SQ head, read before the CQ tail: their difference bounds what kvstashd has taken. */
static uint32_t sq_head(struct raw_sess *rs)
{
	return __atomic_load_n(rs->sq.p_head, __ATOMIC_ACQUIRE);
}

static uint32_t cq_tail(struct raw_sess *rs)
{
	return __atomic_load_n(rs->cq.p_tail, __ATOMIC_ACQUIRE);
}

static uint32_t wait_head(struct raw_sess *rs, uint32_t want)
{
	uint64_t t0 = test_now_ns();

	while (sq_head(rs) != want && test_now_ns() - t0 < 5000000000ull)
		usleep(1000);
	return sq_head(rs);
}

/* Fill the SQ with NOPs numbered from *@next, as far as it has room. */
static unsigned nops(struct raw_sess *rs, uint64_t *next, unsigned n)
{
	struct kvs_sqe s[64];

	CHECK(n <= 64, "too many");
	memset(s, 0, sizeof(s));
	for (unsigned i = 0; i < n; i++)
		s[i].user_data = (*next)++;
	CHECK(raw_sess_submit(rs, s, n) == n, "SQ full");
	return n;
}

struct sampler {
	struct raw_sess *rs;
	uint32_t stop, max;
	uint64_t samples;
};

static void *sample(void *arg)
{
	struct sampler *s = arg;

	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		uint32_t h = sq_head(s->rs), t = cq_tail(s->rs);
		/* head is read first: a later tail only makes the difference smaller, or < 0. */
		int32_t taken = (int32_t)(h - t);

		/*
		 * At most max_inflight operations run; the CQEs of those that
		 * finished in the worker's current round are published at its
		 * end, after it took new SQEs: up to max_inflight more.
		 */
		CHECK(taken <= 2 * (int32_t)MAX_INFLIGHT,
		      "kvstashd took %d SQEs beyond its published CQEs, max_inflight %u", taken,
		      MAX_INFLIGHT);
		if (taken > (int32_t)s->max)
			s->max = (uint32_t)taken;
		s->samples++;
	}
	return NULL;
}

static void inflight(void)
{
	uint64_t next = 1, expect = 1, stalls = 0;
	struct kvs_msg_stats_global g;
	struct raw_sess rs;
	struct kvs_cqe e;
	struct kvsd d;
	uint32_t cqn, head0;

	it_start(&d, "[session]\nmax_inflight = 4\n[pool]\nsize = 64M\nextent_size = 4M\n");
	raw_sess_open(&rs, &d, KVS_ROLE_WORKER, "ex-inflight", "ex-inflight/pf", 0, 1, 64);
	CHECK(rs.rep.sq_entries == 64 && rs.rep.cq_entries == 128 &&
		      rs.rep.max_inflight == MAX_INFLIGHT,
	      "SQ %u CQ %u max_inflight %u", rs.rep.sq_entries, rs.rep.cq_entries,
	      rs.rep.max_inflight);
	cqn = rs.rep.cq_entries;
	for (unsigned r = 0; r < rounds; r++) {
		head0 = sq_head(&rs);
		/* Nobody reaps: the CQ fills after cq_entries NOPs. */
		for (unsigned k = 0; k < cqn / 64; k++) {
			nops(&rs, &next, 64);
			CHECK(wait_head(&rs, head0 + 64 * (k + 1)) == head0 + 64 * (k + 1),
			      "kvstashd stopped at %u SQEs with room in the CQ",
			      sq_head(&rs) - head0);
		}
		nops(&rs, &next, 64);
		/* Exactly max_inflight more are taken (their CQEs wait), then none. */
		CHECK(wait_head(&rs, head0 + cqn + MAX_INFLIGHT) == head0 + cqn + MAX_INFLIGHT,
		      "kvstashd took %u SQEs with a full CQ, not cq_entries + max_inflight = %u",
		      sq_head(&rs) - head0, cqn + MAX_INFLIGHT);
		usleep(200000);
		CHECK(sq_head(&rs) == head0 + cqn + MAX_INFLIGHT,
		      "kvstashd went on taking SQEs with a full CQ: %u", sq_head(&rs) - head0);
		stalls++;
		/* Reap: it resumes, and every CQE comes, in order. */
		for (unsigned i = 0; i < cqn + 64; i++) {
			int rr = raw_sess_reap(&rs, &e, OP_TIMEOUT_MS);

			CHECK(rr == 0, "CQE %u of round %u: %s", i, r, kvs_strerror(rr));
			CHECK(e.user_data == expect && e.res == 0,
			      "CQE %llu (res %d), expected %llu", (unsigned long long)e.user_data,
			      e.res, (unsigned long long)expect);
			expect++;
		}
		CHECK(sq_head(&rs) == head0 + cqn + 64, "SQ head %u", sq_head(&rs) - head0);
	}

	/*
	 * Slow operations: SAVEs of 8 blocks of 1 MiB each (copies take a
	 * while), 48 submitted at once; a sampler checks the bound throughout.
	 */
	{
		const unsigned nb = 8, layers = 4;
		const uint64_t seg = 256 << 10, bytes = (uint64_t)nb * layers * seg;
		struct kvs_wire_mem mem = { .kind = KVS_MEM_HOST_FD, .size = bytes };
		struct kvs_wire_layer lay[4];
		struct kvs_sqe s[48];
		struct sampler sm = { .rs = &rs };
		pthread_t t;
		uint8_t *base;
		int fd = soak_memfd("kvstash-kv", bytes, &base);

		memset(lay, 0, sizeof(lay));
		for (unsigned l = 0; l < layers; l++) {
			snprintf(lay[l].name, sizeof(lay[l].name), "l%u", l);
			lay[l].segments = 1;
			lay[l].offset = l * seg;
			lay[l].num_blocks = nb;
			lay[l].segment_bytes = seg;
			lay[l].block_stride = layers * seg;
		}
		memset(base, 0x3c, bytes);
		CHECK_RES(raw_sess_register(&rs, &mem, 1, lay, layers, 0, &fd, 1), 0, "REGISTER");
		memset(s, 0, sizeof(s));
		for (unsigned i = 0; i < 48; i++) {
			uint8_t *a = rs.args + i * nb * 20;

			it_keys(a, nb, 77000 + i); /* fresh keys: every SAVE copies */
			for (uint32_t k = 0; k < nb; k++)
				memcpy(a + nb * 16 + 4 * k, &k, 4);
			s[i].opcode = KVS_OP_SAVE;
			s[i].count = nb;
			s[i].arg_off = i * nb * 20;
			s[i].arg_len = nb * 20;
			s[i].user_data = next++;
		}
		CHECK(pthread_create(&t, NULL, sample, &sm) == 0, "thread");
		CHECK(raw_sess_submit(&rs, s, 48) == 48, "submit");
		for (unsigned i = 0; i < 48; i++) {
			int rr = raw_sess_reap(&rs, &e, OP_TIMEOUT_MS);

			CHECK(rr == 0, "SAVE CQE %u: %s", i, kvs_strerror(rr));
			CHECK(e.res == (int32_t)nb, "SAVE %llu: %d (%s)",
			      (unsigned long long)e.user_data, e.res, kvs_strerror(e.res));
		}
		__atomic_store_n(&sm.stop, 1, __ATOMIC_RELEASE);
		pthread_join(t, NULL);
		close(fd);
		munmap(base, bytes);
		printf("# in flight: %llu samples of SQ head - CQ tail during 48 slow SAVEs, at "
		       "most %u (max_inflight %u; the bound is twice that)\n",
		       (unsigned long long)sm.samples, sm.max, MAX_INFLIGHT);
	}
	g = it_stats(&d);
	CHECK(g.errors == 0 && g.protocol_errors == 0, "%llu errors, %llu protocol errors",
	      (unsigned long long)g.errors, (unsigned long long)g.protocol_errors);
	raw_sess_close(&rs);
	it_stop(&d);
	it_ok("in flight: %u rounds: with its CQ full kvstashd took exactly max_inflight = %u more "
	      "SQEs and stopped, then resumed as CQEs were reaped (%llu CQEs in order); SQ head - "
	      "CQ tail never above 2 x max_inflight under slow copies",
	      rounds, MAX_INFLIGHT, (unsigned long long)(expect - 1));
	(void)stalls;
}

int main(int argc, char **argv)
{
	const char *only = argc > 1 ? argv[1] : NULL;

	rounds = soak_env("SOAK_EXHAUST_ROUNDS", 5);
	if (rounds == 0)
		rounds = 1;
	it_watchdog(300 + 30 * rounds);
	if (!only || !strcmp(only, "pool"))
		pool();
	if (!only || !strcmp(only, "leases"))
		leases();
	if (!only || !strcmp(only, "sessions"))
		sessions();
	if (!only || !strcmp(only, "args"))
		args();
	if (!only || !strcmp(only, "inflight"))
		inflight();
	return 0;
}
