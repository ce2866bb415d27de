/* SPDX-License-Identifier: MIT */
/*
 * kvstashd SIGKILLed in the middle of a write storm, over and over, on
 * the same [ssd] file: an engine (a child process) saves prompts without
 * pause, five times more than the pool holds, so blocks spill
 * continuously; at a random moment of the storm kvstashd dies with
 * SIGKILL (writes queued and in flight, a region open, its header zone
 * half written), a new kvstashd starts on the same file and recovers it:
 *   - every block a QUERY advertises, of the storm just killed and of the
 *     one before (recovered twice, its regions maybe reused since), loads
 *     byte-exact into a poisoned other block id: zero mismatching bytes,
 *     ever;
 *   - over all rounds some blocks were advertised after a restart (the
 *     test exercised the recovery, not just misses).
 * ROUNDS restarts (the issue asks for at least 50 in CI); the seed of the
 * kill moments is printed, $KVSTASH_TEST_SEED replays it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"
#include "ssdtest.h"
#include "tiertest.h"

#define ROUNDS	   60u
#define MAX_STORM  48u /* prompts of a storm killed at its last one at the latest */
#define ROUND_SPAN (MAX_STORM + 16u)
#define NS	   "model-crash"

struct storm {
	const struct kvsd *d;
	uint64_t base;	/* first prompt */
	unsigned saved; /* prompts saved so far (the child writes, the parent reads) */
	unsigned ended; /* the child stopped: its connection failed */
	int last_err;	/* what ended it */
};

/* The engine: SAVE prompts back to back until kvstashd is gone. */
static int storm_main(void *arg, unsigned i)
{
	struct storm *s = arg;
	struct kvs_client *c;
	struct test_kv kv;
	char inst[32];
	int r = 0;

	snprintf(inst, sizeof(inst), "storm%u", i);
	c = tt_worker(s->d, inst, NS, &kv, TT_SEG);
	for (uint64_t p = s->base; p < s->base + ROUND_SPAN; p++) {
		uint8_t keys[TT_BATCH * 16];
		uint32_t ids[TT_BATCH];

		tt_keys(p, keys);
		it_ids(ids, TT_BATCH, (uint32_t)(p % 2) * TT_BATCH);
		for (unsigned b = 0; b < TT_BATCH; b++)
			test_kv_fill(&kv, ids[b], it_seed(p, b));
		r = kvs_save_sync(c, keys, ids, TT_BATCH, OP_TIMEOUT_MS, NULL, NULL);
		if (r != (int)TT_BATCH)
			break;
		/* Pairs with the parent's acquire load: prompt p is in the pool. */
		__atomic_store_n(&s->saved, (unsigned)(p - s->base + 1), __ATOMIC_RELEASE);
	}
	s->last_err = r;
	__atomic_store_n(&s->ended, 1, __ATOMIC_RELEASE);
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

/* Every key of prompts [base, base + n): advertised ones load byte-exact. */
static unsigned verify(struct kvs_client *c, struct test_kv *kv, uint64_t base, unsigned n,
		       unsigned *ret_advertised)
{
	unsigned ok = 0;

	for (uint64_t p = base; p < base + n; p++)
		for (unsigned i = 0; i < TT_BATCH; i++) {
			if (!tt_counted(c, p, i))
				continue;
			(*ret_advertised)++;
			CHECK(tt_check_key(c, kv, p, i, 2 * TT_BATCH + i) == 1,
			      "prompt %llu block %u advertised after a crash, yet not loaded",
			      (unsigned long long)p, i);
			ok++;
		}
	return ok;
}

int main(void)
{
	unsigned advertised = 0, verified = 0, saved_total = 0, prev_n = 0;
	uint64_t prev_base = 0;
	struct storm *s = it_shared(sizeof(*s));
	const char *env = getenv("KVSTASH_TEST_SEED");
	unsigned seed = env ? (unsigned)strtoul(env, NULL, 0) : (unsigned)time(NULL);
	struct kvsd d;
	int r;

	it_watchdog(300);
	printf("# seed %u (KVSTASH_TEST_SEED replays it)\n", seed);
	srand(seed);
	/* A pool of 128 blocks; 32 regions of the file, reused many times over. */
	it_start(&d, tt_ini("crash", 4u << 20, "34M", NULL));
	for (unsigned round = 0; round < ROUNDS; round++) {
		unsigned kill_at = 1 + (unsigned)rand() % MAX_STORM;
		struct kvs_client *c;
		struct test_kv kv;
		char inst[32];

		/* The storm, and a SIGKILL when it has saved kill_at prompts. */
		memset(s, 0, sizeof(*s));
		s->d = &d;
		s->base = 1000 + (uint64_t)round * ROUND_SPAN;
		it_spawn(storm_main, s, round);
		for (int t = 0; t < 200000; t++) {
			if (__atomic_load_n(&s->saved, __ATOMIC_ACQUIRE) >= kill_at ||
			    __atomic_load_n(&s->ended, __ATOMIC_ACQUIRE))
				break;
			usleep(100);
		}
		CHECK(!__atomic_load_n(&s->ended, __ATOMIC_ACQUIRE),
		      "round %u: the storm ended before the kill (SAVE: %d)", round, s->last_err);
		CHECK(__atomic_load_n(&s->saved, __ATOMIC_ACQUIRE) >= kill_at,
		      "round %u: the storm never saved %u prompts", round, kill_at);
		kvsd_kill(&d);
		it_wait_all(); /* the engine saw its connection fail and exited */
		saved_total += s->saved;

		/* The same file, a new kvstashd: only byte-exact blocks or misses. */
		r = kvsd_restart(&d);
		CHECK(r == 0, "round %u: kvstashd did not restart: %s", round, strerror(-r));
		tt_wait_recovered(&d, (int)round + 2);
		snprintf(inst, sizeof(inst), "check%u", round);
		c = tt_worker(&d, inst, NS, &kv, TT_SEG);
		/* The prompt in flight at the kill (+1) may be there too. */
		verified += verify(c, &kv, s->base, s->saved + 1, &advertised);
		if (prev_n)
			verified += verify(c, &kv, prev_base, prev_n, &advertised);
		prev_base = s->base;
		prev_n = s->saved + 1;
		kvs_close(c);
		test_kv_free(&kv);
	}
	CHECK(advertised > 0, "no block was ever advertised after a restart (%u rounds)", ROUNDS);
	it_ok("%u SIGKILLs in write storms (%u prompts of %u blocks saved): %u blocks advertised "
	      "after the restarts, %u loaded byte-exact, zero wrong bytes",
	      ROUNDS, saved_total, TT_BATCH, advertised, verified);
	it_stop(&d);
	return 0;
}
