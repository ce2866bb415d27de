/* SPDX-License-Identifier: MIT */
/*
 * Soak: kvstashd death.  SOAK_DAEMON_KILLS (default 50) times, kvstashd is
 * SIGKILLed at a random moment while four engine processes run SAVE,
 * FLUSH, QUERY, LOAD and NOP traffic (several operations in flight), then
 * restarted on the same socket.
 *
 * Each engine checks, for every death:
 *   - every call that was waiting, or is made after the death, returns
 *     -ECONNRESET within 1 s of the kill (or of the call, if later), and
 *     none returns anything else or hangs (a 5 s wait that times out fails);
 *   - nothing it owns is half-written: a LOAD reported successful is byte
 *     exact; a LOAD reported failed may have written its destination blocks
 *     (the engine recomputes them: they are poisoned again); every block no
 *     LOAD targeted stays poisoned, and the blocks SAVEs read from keep
 *     their bytes (kvstashd never writes them);
 *   - kvs_reconnect() to the restarted daemon succeeds (registration
 *     included) and traffic goes on.
 * Pass: every engine saw every death exactly once, recovered every time,
 * and made progress in every generation of the daemon.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "soak.h"

#define NCLIENTS       4u
#define LAYERS	       4u
#define SEG	       4096u
#define BLOCKS	       48u
#define SRC	       0u  /* 0..15 */
#define DST	       16u /* 16..47 */
#define MAXN	       8u
#define PROMPTS	       24u
#define MAX_KILLS      10000u
#define RESET_BOUND_NS 1000000000ull
#define WAIT_MS	       5000

struct client_res {
	uint64_t ops, loads, blocks_checked, failed_loads, saves, resets, reconnects;
	uint64_t max_reset_ns;
	uint32_t gen;	  /* the daemon generation this engine is connected to */
	uint64_t gen_ops; /* operations completed in it */
};

struct shared {
	const struct kvsd *d;
	uint32_t gen; /* bumped by the parent once a restarted daemon listens */
	uint32_t stop;
	uint64_t kill_ns[MAX_KILLS + 1]; /* when generation g was killed */
	struct client_res res[NCLIENTS];
};

struct eng {
	struct shared *sh;
	struct client_res *res;
	unsigned who;
	struct kvs_client *c;
	struct test_kv kv;
	uint32_t gen;
	uint64_t t_call;
};

/* A -ECONNRESET at @t_ret: a kill of our generation must explain it, within the bound. */
static void reset_seen(struct eng *e)
{
	uint64_t t_ret = test_now_ns();
	uint64_t t_kill = __atomic_load_n(&e->sh->kill_ns[e->gen], __ATOMIC_ACQUIRE);
	uint64_t from = t_kill > e->t_call ? t_kill : e->t_call;

	CHECK(t_kill != 0, "engine %u: -ECONNRESET from a daemon nobody killed (generation %u)",
	      e->who, e->gen);
	CHECK(t_ret - from < RESET_BOUND_NS, "engine %u: -ECONNRESET %.3f s after the kill", e->who,
	      (t_ret - from) / 1e9);
	if (t_ret - from > e->res->max_reset_ns)
		e->res->max_reset_ns = t_ret - from;
}

/* Submit what is prepared and wait for @n CQEs into @out (by user_data 1..n); 0 or -ECONNRESET. */
static int run(struct eng *e, unsigned n, struct kvs_cqe *out)
{
	struct kvs_cqe *cqe;
	bool seen[8] = { false };
	unsigned got = 0;
	int reset = 0;

	e->t_call = test_now_ns();
	CHECK(kvs_submit(e->c) == (int)n, "engine %u: submit", e->who);
	while (got < n) {
		int r = kvs_wait_cqe(e->c, &cqe, WAIT_MS);

		if (r == -ECONNRESET)
			break; /* everything pending was completed already */
		CHECK(r == 0, "engine %u: wait: %s (a hang?)", e->who, kvs_strerror(r));
		CHECK(cqe->user_data >= 1 && cqe->user_data <= n && !seen[cqe->user_data],
		      "engine %u: CQE for %llu", e->who, (unsigned long long)cqe->user_data);
		seen[cqe->user_data] = true;
		out[cqe->user_data - 1] = *cqe;
		if (cqe->res == -ECONNRESET) {
			CHECK(cqe->flags & KVS_CQE_LOCAL, "engine %u: -ECONNRESET from kvstashd",
			      e->who);
			reset = -ECONNRESET;
		}
		kvs_cqe_seen(e->c, cqe);
		got++;
	}
	if (got < n || reset) {
		CHECK(got == n, "engine %u: %u of %u operations never completed", e->who, n - got,
		      n);
		reset_seen(e);
		return -ECONNRESET;
	}
	return 0;
}

static void check_untouched(struct eng *e, const uint32_t *dst, unsigned h, uint64_t src_seed,
			    unsigned src_n)
{
	for (unsigned b = DST; b < BLOCKS; b++) {
		bool targeted = false;

		for (unsigned i = 0; i < h; i++)
			targeted |= dst[i] == b;
		if (!targeted)
			CHECK(test_kv_is_poison(&e->kv, b, POISON),
			      "engine %u: block %u, targeted by no LOAD, was written", e->who, b);
	}
	for (unsigned i = 0; i < src_n; i++)
		CHECK(test_kv_check(&e->kv, SRC + i, it_seed(src_seed, i)),
		      "engine %u: source block %u of a SAVE changed", e->who, SRC + i);
}

/* QUERY + NOP, LOAD the hits, SAVE + FLUSH the misses; -ECONNRESET ends the round. */
static int round_trip(struct eng *e, uint64_t *rs)
{
	unsigned p = (unsigned)(soak_rnd(rs) % PROMPTS), n = 1 + (unsigned)(soak_rnd(rs) % MAXN);
	uint64_t seed = 1000000ull * (e->who + 1) + p;
	uint8_t keys[MAXN * KVS_KEY_SIZE];
	uint32_t ids[MAXN];
	struct kvs_cqe out[2];
	unsigned h;

	it_keys(keys, n, seed);
	CHECK(kvs_prep_query(e->c, kvs_get_sqe(e->c), keys, n, p, 0, 1) == 0, "prep query");
	CHECK(kvs_prep_nop(e->c, kvs_get_sqe(e->c), 2) == 0, "prep nop");
	if (run(e, 2, out) < 0)
		return -ECONNRESET;
	CHECK(out[0].res >= 0 && out[0].res <= (int32_t)n && out[1].res == 0,
	      "engine %u: QUERY %d (%s), NOP %d", e->who, out[0].res, kvs_strerror(out[0].res),
	      out[1].res);
	h = (unsigned)out[0].res;
	e->res->ops += 2;
	e->res->gen_ops += 2;
	if (h) {
		it_ids(ids, h, DST + (unsigned)(soak_rnd(rs) % (BLOCKS - DST - MAXN + 1)));
		CHECK(kvs_prep_load(e->c, kvs_get_sqe(e->c), out[0].result0, ids, h, 0, 0, 1) == 0,
		      "prep load");
		if (run(e, 1, out) < 0) {
			/* Reported failed: may be partly written; the engine recomputes it. */
			check_untouched(e, ids, h, 0, 0);
			for (unsigned i = 0; i < h; i++)
				test_kv_poison(&e->kv, ids[i], POISON);
			e->res->failed_loads++;
			return -ECONNRESET;
		}
		CHECK(out[0].res == (int32_t)h, "engine %u: LOAD of %u: %d (%s)", e->who, h,
		      out[0].res, kvs_strerror(out[0].res));
		for (unsigned i = 0; i < h; i++)
			CHECK(test_kv_check(&e->kv, ids[i], it_seed(seed, i)),
			      "engine %u: block %u reported loaded differs", e->who, ids[i]);
		check_untouched(e, ids, h, 0, 0);
		for (unsigned i = 0; i < h; i++)
			test_kv_poison(&e->kv, ids[i], POISON);
		e->res->loads++;
		e->res->blocks_checked += h;
		e->res->ops++;
		e->res->gen_ops++;
	}
	if (h < n) {
		it_ids(ids, n - h, SRC);
		for (unsigned i = h; i < n; i++)
			test_kv_fill(&e->kv, SRC + i - h, it_seed(seed, i));
		CHECK(kvs_prep_save(e->c, kvs_get_sqe(e->c), keys + h * KVS_KEY_SIZE, ids, n - h,
				    1) == 0,
		      "prep save");
		CHECK(kvs_prep_flush(e->c, kvs_get_sqe(e->c), 0, 2) == 0, "prep flush");
		if (run(e, 2, out) < 0) {
			/* A SAVE only reads: its sources are intact, reported or not. */
			for (unsigned i = 0; i < n - h; i++)
				CHECK(test_kv_check(&e->kv, SRC + i, it_seed(seed, h + i)),
				      "engine %u: source block %u changed", e->who, SRC + i);
			return -ECONNRESET;
		}
		CHECK(out[0].res == (int32_t)(n - h) && out[1].res == 0,
		      "engine %u: SAVE of %u: %d (%s), FLUSH %d", e->who, n - h, out[0].res,
		      kvs_strerror(out[0].res), out[1].res);
		e->res->saves++;
		e->res->ops += 2;
		e->res->gen_ops += 2;
	}
	return 0;
}

/* The daemon died: nothing may be pending, then reconnect to its successor. */
static void recover(struct eng *e)
{
	uint64_t t0 = test_now_ns();
	struct kvs_cqe *cqe;
	int r;

	CHECK(kvs_pending(e->c) == 0, "engine %u: %u operations pending after the death", e->who,
	      kvs_pending(e->c));
	CHECK(kvs_wait_cqe(e->c, &cqe, 0) == -ECONNRESET, "engine %u: the death was not final",
	      e->who);
	CHECK(kvs_nop_sync(e->c, WAIT_MS) == -ECONNRESET, "engine %u: NOP after the death", e->who);
	e->res->resets++;
	/* Wait for the parent to say the next daemon is up: then reconnect. */
	while (__atomic_load_n(&e->sh->gen, __ATOMIC_ACQUIRE) == e->gen) {
		CHECK(test_now_ns() - t0 < 60000000000ull, "engine %u: no restart", e->who);
		usleep(2000);
	}
	while ((r = kvs_reconnect(e->c)) != 0) {
		CHECK(r == -ECONNREFUSED || r == -ENOENT || r == -ECONNRESET,
		      "engine %u: reconnect: %s", e->who, kvs_strerror(r));
		CHECK(test_now_ns() - t0 < 60000000000ull, "engine %u: reconnect: %s", e->who,
		      kvs_strerror(r));
		usleep(5000);
	}
	CHECK(kvs_connected(e->c) == 1, "engine %u: not connected after kvs_reconnect", e->who);
	e->res->reconnects++;
	e->gen = __atomic_load_n(&e->sh->gen, __ATOMIC_ACQUIRE);
	e->res->gen_ops = 0;
	__atomic_store_n(&e->res->gen, e->gen, __ATOMIC_RELEASE);
}

static int engine(void *arg, unsigned who)
{
	static struct eng e;
	uint64_t rs = 0xda3e39cb94b95bdbull * (who + 1);
	char inst[32];

	e.sh = arg;
	e.res = &e.sh->res[who];
	e.who = who;
	snprintf(inst, sizeof(inst), "dd-%u", who);
	e.c = it_worker(e.sh->d, inst, "soak-dd", 0, 1, &e.kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
			SEG);
	for (unsigned b = DST; b < BLOCKS; b++)
		test_kv_poison(&e.kv, b, POISON);
	e.gen = __atomic_load_n(&e.sh->gen, __ATOMIC_ACQUIRE);
	__atomic_store_n(&e.res->gen, e.gen, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&e.sh->stop, __ATOMIC_ACQUIRE)) {
		if (round_trip(&e, &rs) < 0)
			recover(&e);
	}
	kvs_close(e.c);
	test_kv_free(&e.kv);
	return 0;
}

/* Every engine connected to generation @gen and busy in it. */
static void wait_busy(struct shared *sh, uint32_t gen)
{
	uint64_t t0 = test_now_ns();

	for (;;) {
		unsigned ready = 0;

		for (unsigned i = 0; i < NCLIENTS; i++)
			ready += __atomic_load_n(&sh->res[i].gen, __ATOMIC_ACQUIRE) == gen &&
				 __atomic_load_n(&sh->res[i].gen_ops, __ATOMIC_RELAXED) >= 4;
		if (ready == NCLIENTS)
			return;
		CHECK(test_now_ns() - t0 < 60000000000ull,
		      "generation %u: only %u engines back at work after 60 s", gen, ready);
		usleep(1000);
	}
}

int main(void)
{
	unsigned kills = soak_env("SOAK_DAEMON_KILLS", 50);
	struct shared *sh = it_shared(sizeof(*sh));
	struct client_res tot = { 0 };
	uint64_t rs = 0x1d8e4e27c47d124full, t0;
	struct kvsd d;

	CHECK(kills <= MAX_KILLS, "at most %u kills", MAX_KILLS);
	it_watchdog(300 + 4 * kills);
	it_start(&d, NULL);
	sh->d = &d;
	for (unsigned i = 0; i < NCLIENTS; i++)
		it_spawn(engine, sh, i);

	t0 = test_now_ns();
	for (unsigned k = 0; k < kills; k++) {
		int r;

		wait_busy(sh, k);
		usleep((useconds_t)(soak_rnd(&rs) % 50000));
		__atomic_store_n(&sh->kill_ns[k], test_now_ns(), __ATOMIC_RELEASE);
		kvsd_kill(&d);
		r = kvsd_restart(&d);
		CHECK(r == 0, "restart %u: %s", k + 1, strerror(-r));
		__atomic_store_n(&sh->gen, k + 1, __ATOMIC_RELEASE);
	}
	wait_busy(sh, kills);
	printf("# %u kvstashd SIGKILLs and restarts in %.1f s\n", kills,
	       (test_now_ns() - t0) / 1e9);
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	it_wait_all();

	for (unsigned i = 0; i < NCLIENTS; i++) {
		const struct client_res *c = &sh->res[i];

		printf("# engine %u: %llu ops, %llu loads (%llu blocks byte-exact), %llu loads "
		       "reported failed, %llu saves, %llu -ECONNRESET deaths seen (slowest %.1f ms "
		       "after the kill), %llu reconnects\n",
		       i, (unsigned long long)c->ops, (unsigned long long)c->loads,
		       (unsigned long long)c->blocks_checked, (unsigned long long)c->failed_loads,
		       (unsigned long long)c->saves, (unsigned long long)c->resets,
		       c->max_reset_ns / 1e6, (unsigned long long)c->reconnects);
		CHECK(c->resets == kills && c->reconnects == kills,
		      "engine %u saw %llu deaths and reconnected %llu times for %u kills", i,
		      (unsigned long long)c->resets, (unsigned long long)c->reconnects, kills);
		tot.ops += c->ops;
		tot.loads += c->loads;
		tot.blocks_checked += c->blocks_checked;
		tot.failed_loads += c->failed_loads;
		if (c->max_reset_ns > tot.max_reset_ns)
			tot.max_reset_ns = c->max_reset_ns;
	}
	CHECK(tot.loads > 0, "no LOAD ever completed");
	it_stop(&d);
	it_ok("%u kvstashd deaths under %u engines: every call -ECONNRESET within %.1f ms (bound "
	      "1 s), %u reconnects each; %llu ops, %llu loads (%llu blocks) byte-exact, %llu "
	      "loads reported failed, nothing else written",
	      kills, NCLIENTS, tot.max_reset_ns / 1e6, kills, (unsigned long long)tot.ops,
	      (unsigned long long)tot.loads, (unsigned long long)tot.blocks_checked,
	      (unsigned long long)tot.failed_loads);
	return 0;
}
