/* SPDX-License-Identifier: MIT */
/*
 * Stream ordering through the fence slots (KVS_CONNECT_FENCES), with a
 * host engine, whose "stream" is its own thread writing the slot:
 *  - a SAVE AFTER copies nothing before its fence value: KV rewritten
 *    after the SAVE was submitted but before the signal is what is
 *    stored; a FLUSH behind it waits for it;
 *  - one whose value never comes fails with -ETIMEDOUT ([worker]
 *    save_wait_ms), stores nothing, and keeps no pool slot;
 *  - while one waits, another session's SAVE, QUERY and LOAD on the same
 *    worker go on;
 *  - a session that ends with one waiting is cancelled, not stuck;
 *  - a LOAD PROGRESS ends with every layer's value, status 0 and its
 *    block count, its bytes exact in its layer range;
 *  - a refused LOAD PROGRESS (no such lease) is released by kvstashd
 *    itself, before the engine reaps anything, with status -ENOENT;
 *  - when kvstashd dies with a LOAD PROGRESS it never ran, the library's
 *    watchdog releases it (-ECONNRESET) while the engine calls nothing;
 *    a ref of the dead session is refused after kvs_reconnect(), and
 *    fences work on the new session.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

#define BLOCKS	32u
#define N	8u
#define LAYERS	8u
#define SEG	4096u
#define WAIT_MS 400u /* [worker] save_wait_ms of the daemon */

static uint64_t mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static struct kvs_client *fenced_worker(const struct kvsd *d, const char *instance,
					struct test_kv *kv)
{
	struct kvs_connect_opts o;
	struct kvs_client *c;
	int r = test_kv_alloc(kv, LAYOUT_SPLIT_KV, LAYERS, BLOCKS, SEG);

	CHECK(r == 0, "test_kv_alloc: %s", kvs_strerror(r));
	kvs_connect_opts_init(&o);
	o.instance = instance;
	o.ns = "model-fences/split";
	o.flags = KVS_CONNECT_FENCES;
	r = kvs_connect(d->sock, &o, &c);
	CHECK(r == 0, "connect with fences: %s", kvs_strerror(r));
	r = test_kv_register(c, kv);
	CHECK(r == 0, "register: %s", kvs_strerror(r));
	return c;
}

/* No completion arrives within @ms. */
static void no_cqe_for(struct kvs_client *c, int ms)
{
	struct kvs_cqe *cqe;
	int r = kvs_wait_cqe(c, &cqe, ms);

	CHECK(r == -ETIMEDOUT, "a completion came early: res %d", r == 0 ? cqe->res : r);
}

static struct kvs_cqe wait_one(struct kvs_client *c)
{
	struct kvs_cqe e;
	int r = test_wait_cqe(c, OP_TIMEOUT_MS, &e);

	CHECK(r == 0, "kvs_wait_cqe: %s", kvs_strerror(r));
	return e;
}

static void submit_save_after(struct kvs_client *c, const uint8_t *keys, const uint32_t *ids,
			      uint32_t n, struct kvs_fence_ref *f)
{
	struct kvs_sqe *sqe = kvs_get_sqe(c);

	CHECK(sqe, "no SQE");
	CHECK_RES(kvs_prep_save_after(c, sqe, keys, ids, n, f, 1), 0, "prep SAVE AFTER");
	CHECK_RES(kvs_submit(c), 1, "submit");
}

static void save_waits_for_signal(const struct kvsd *d)
{
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N];
	struct kvs_fence_ref f;
	struct test_kv kv;
	struct kvs_client *c = fenced_worker(d, "fence-save", &kv);
	struct kvs_sqe *sqe;
	struct kvs_cqe e, q;

	it_keys(keys, N, 1);
	it_ids(src, N, 0);
	it_ids(dst, N, N);
	for (unsigned i = 0; i < N; i++) {
		test_kv_fill(&kv, src[i], it_seed(1, i)); /* what a copy too early would store */
		test_kv_poison(&kv, dst[i], POISON);
	}
	submit_save_after(c, keys, src, N, &f);
	CHECK_UINT(f.count, ==, 1);
	/* A FLUSH behind it: done only once the SAVE is. */
	sqe = kvs_get_sqe(c);
	CHECK(sqe && kvs_prep_flush(c, sqe, 0, 2) == 0, "prep FLUSH");
	CHECK_RES(kvs_submit(c), 1, "submit FLUSH");
	no_cqe_for(c, 300);
	/* The "kernels" write the KV now, then the stream's signal. */
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(&kv, src[i], it_seed(2, i));
	CHECK_RES(kvs_fence_done(c, &f, 0, NULL, NULL), 0, "SAVE fence before the signal");
	CHECK_RES(kvs_fence_signal_host(c, &f), 0, "signal");
	CHECK_RES(kvs_fence_done(c, &f, 0, NULL, NULL), 1, "SAVE fence after the signal");
	e = wait_one(c);
	CHECK(e.user_data == 1, "SAVE's CQE first, got user_data %llu",
	      (unsigned long long)e.user_data);
	CHECK_RES(e.res, N, "SAVE AFTER");
	CHECK_UINT(e.result0, ==, N);
	e = wait_one(c);
	CHECK(e.user_data == 2 && e.res == 0, "FLUSH: user_data %llu res %d",
	      (unsigned long long)e.user_data, e.res);
	q = it_query(c, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY after SAVE AFTER");
	e = it_load(c, q.result0, dst, N, 0, 0);
	CHECK_RES(e.res, N, "LOAD");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kv, dst[i], it_seed(2, i)),
		      "block %u: not the bytes written before the signal", i);
	/* Both kinds of slot come back: many more operations than one ring of slots. */
	kvs_close(c);
	test_kv_free(&kv);
	it_ok("a SAVE AFTER copies what was written before its signal; FLUSH waits for it");
}

/* Another session's round trip while @waiting's SAVE AFTER waits. */
static void others_go_on(const struct kvsd *d)
{
	uint8_t keys[N * KVS_KEY_SIZE], okeys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N];
	struct kvs_fence_ref f;
	struct test_kv kv, okv;
	struct kvs_client *c = fenced_worker(d, "fence-stuck", &kv);
	struct kvs_client *o = it_worker(d, "fence-other", "model-fences/other", 0, 1, &okv,
					 LAYOUT_SPLIT_KV, LAYERS, BLOCKS, SEG);
	struct kvs_msg_stats_global g0, g1;
	struct kvs_cqe e, q;
	uint64_t t0;

	it_keys(keys, N, 3);
	it_keys(okeys, N, 4);
	it_ids(src, N, 0);
	it_ids(dst, N, N);
	for (unsigned i = 0; i < N; i++) {
		test_kv_fill(&kv, src[i], it_seed(3, i));
		test_kv_fill(&okv, src[i], it_seed(4, i));
		test_kv_poison(&okv, dst[i], POISON);
	}
	g0 = it_stats(d);
	t0 = mono_ms();
	submit_save_after(c, keys, src, N, &f);
	/* The other session, on the same (host) worker, meanwhile. */
	e = it_save(o, okeys, src, N);
	CHECK_RES(e.res, N, "other session's SAVE");
	q = it_query(o, okeys, N, 0);
	CHECK_RES(q.res, N, "other session's QUERY");
	e = it_load(o, q.result0, dst, N, 0, 0);
	CHECK_RES(e.res, N, "other session's LOAD");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&okv, dst[i], it_seed(4, i)), "other session's block %u", i);
	CHECK(mono_ms() - t0 < WAIT_MS, "the other session took %llu ms, as long as the wait",
	      (unsigned long long)(mono_ms() - t0));
	it_ok("another session's SAVE, QUERY and LOAD go on while a SAVE AFTER waits");

	/* No signal ever: -ETIMEDOUT after save_wait_ms, nothing stored. */
	e = wait_one(c);
	CHECK_RES(e.res, -ETIMEDOUT, "SAVE AFTER without its signal");
	CHECK(mono_ms() - t0 >= WAIT_MS - 50, "timed out after %llu ms, before %u",
	      (unsigned long long)(mono_ms() - t0), WAIT_MS);
	q = it_query(c, keys, N, KVS_QUERY_NOLEASE);
	CHECK_RES(q.res, 0, "QUERY of the keys of the timed-out SAVE");
	g1 = it_stats(d);
	CHECK_UINT(g1.blocks_resident, ==, g0.blocks_resident + N); /* the other session's only */
	/* The keys are not held as being saved: a plain SAVE of them stores them. */
	e = it_save(c, keys, src, N);
	CHECK_RES(e.res, N, "SAVE of the timed-out keys");
	CHECK_UINT(e.result0, ==, N);
	/* A slot whose signal never came is never handed out again half-used. */
	for (unsigned k = 0; k < 3; k++) {
		struct kvs_fence_ref g;

		submit_save_after(c, keys, src, N, &g);
		CHECK(g.slot != f.slot || g.base == f.base + 1, "slot %u reused from base %u",
		      g.slot, g.base);
		CHECK_RES(kvs_fence_signal_host(c, &g), 0, "signal");
		e = wait_one(c);
		CHECK_RES(e.res, N, "SAVE AFTER of resident keys");
		CHECK_UINT(e.result1, ==, N); /* skipped: resident */
	}
	kvs_close(o);
	test_kv_free(&okv);
	it_ok("a SAVE AFTER whose signal never comes fails with -ETIMEDOUT, storing nothing");

	/* A session that ends while one waits: cancelled, and the daemon goes on. */
	it_keys(keys, N, 5);
	submit_save_after(c, keys, src, N, &f);
	no_cqe_for(c, 50);
	kvs_close(c);
	test_kv_free(&kv);
	c = it_worker(d, "fence-after", "model-fences/split", 0, 1, &kv, LAYOUT_SPLIT_KV, LAYERS,
		      BLOCKS, SEG);
	q = it_query(c, keys, N, KVS_QUERY_NOLEASE);
	CHECK_RES(q.res, 0, "QUERY of the keys of the cancelled SAVE");
	kvs_close(c);
	test_kv_free(&kv);
	it_ok("a session that ends with a SAVE AFTER waiting is cancelled, not stuck");
}

static void load_progress(const struct kvsd *d)
{
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N];
	struct kvs_fence_ref f;
	struct test_kv kv;
	struct kvs_client *c = fenced_worker(d, "fence-load", &kv);
	struct kvs_sqe *sqe;
	struct kvs_cqe e, q;
	int32_t status = 1;
	uint32_t blocks = 0;
	const unsigned l0 = 2, lc = 5;

	it_keys(keys, N, 6);
	it_ids(src, N, 0);
	it_ids(dst, N, N);
	for (unsigned i = 0; i < N; i++) {
		test_kv_fill(&kv, src[i], it_seed(6, i));
		test_kv_poison(&kv, dst[i], POISON);
	}
	e = it_save(c, keys, src, N);
	CHECK_RES(e.res, N, "SAVE");
	q = it_query(c, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY");
	sqe = kvs_get_sqe(c);
	CHECK(sqe, "no SQE");
	CHECK_RES(kvs_prep_load_progress(c, sqe, q.result0, dst, N, l0, lc, &f, 7), 0,
		  "prep LOAD PROGRESS");
	CHECK_UINT(f.count, ==, lc);
	CHECK_RES(kvs_fence_done(c, &f, 0, NULL, NULL), 0, "layer 0 before the LOAD ran");
	CHECK_RES(kvs_fence_done(c, &f, lc, NULL, NULL), -EINVAL, "a layer past the range");
	CHECK_RES(kvs_submit(c), 1, "submit");
	e = wait_one(c);
	CHECK_RES(e.res, N, "LOAD PROGRESS");
	for (unsigned i = 0; i < lc; i++)
		CHECK_RES(kvs_fence_done(c, &f, i, &status, &blocks), 1, "layer done");
	CHECK_RES(status, 0, "status");
	CHECK_UINT(blocks, ==, N);
	for (unsigned i = 0; i < N; i++) {
		CHECK(test_kv_check_layers(&kv, dst[i], it_seed(6, i), l0, lc),
		      "block %u: layers %u+%u differ", dst[i], l0, lc);
		for (unsigned l = 0; l < LAYERS; l++)
			if (l < l0 || l >= l0 + lc)
				CHECK(test_kv_layer_is_poison(&kv, l, dst[i], POISON),
				      "block %u layer %u written outside the range", dst[i], l);
	}
	/* Every layer (layer_count 0: to the last registered). */
	q = it_query(c, keys, N, 0);
	sqe = kvs_get_sqe(c);
	CHECK(sqe, "no SQE");
	CHECK_RES(kvs_prep_load_progress(c, sqe, q.result0, dst, N, 0, 0, &f, 8), 0,
		  "prep LOAD PROGRESS of every layer");
	CHECK_UINT(f.count, ==, LAYERS);
	CHECK_RES(kvs_submit(c), 1, "submit");
	e = wait_one(c);
	CHECK_RES(e.res, N, "LOAD PROGRESS of every layer");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kv, dst[i], it_seed(6, i)), "block %u differs", dst[i]);
	it_ok("a LOAD PROGRESS ends with every layer's value, status 0, its blocks");

	/* Refused: kvstashd releases the slot itself, before anything is reaped. */
	sqe = kvs_get_sqe(c);
	CHECK(sqe, "no SQE");
	CHECK_RES(kvs_prep_load_progress(c, sqe, 0xdead, dst, N, 0, LAYERS, &f, 9), 0,
		  "prep LOAD PROGRESS of no lease");
	CHECK_RES(kvs_submit(c), 1, "submit");
	for (uint64_t t0 = mono_ms(); kvs_fence_done(c, &f, LAYERS - 1, &status, NULL) != 1;) {
		CHECK(mono_ms() - t0 < OP_TIMEOUT_MS, "a refused LOAD's fence never came");
		usleep(1000);
	}
	CHECK_RES(status, -ENOENT, "status of a refused LOAD");
	e = wait_one(c);
	CHECK_RES(e.res, -ENOENT, "LOAD of no lease");
	kvs_close(c);
	test_kv_free(&kv);
	it_ok("a refused LOAD PROGRESS is released by kvstashd, status -ENOENT");
}

static void daemon_death(struct kvsd *d)
{
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N];
	struct kvs_fence_ref f, g;
	struct test_kv kv;
	struct kvs_client *c = fenced_worker(d, "fence-death", &kv);
	struct kvs_sqe *sqe;
	struct kvs_cqe e, q;
	int32_t status = 0;
	int r;

	it_keys(keys, N, 7);
	it_ids(src, N, 0);
	it_ids(dst, N, N);
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(&kv, src[i], it_seed(7, i));
	e = it_save(c, keys, src, N);
	CHECK_RES(e.res, N, "SAVE");
	q = it_query(c, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY");
	/* Stopped, it never runs the LOAD; killed, it can never release it. */
	CHECK(kill(d->pid, SIGSTOP) == 0, "SIGSTOP kvstashd");
	/* kill() only queues the stop: a worker still polling could run the LOAD. */
	CHECK(wait_stopped(d->pid, OP_TIMEOUT_MS) == 0, "kvstashd never stopped");
	sqe = kvs_get_sqe(c);
	CHECK(sqe, "no SQE");
	CHECK_RES(kvs_prep_load_progress(c, sqe, q.result0, dst, N, 0, LAYERS, &f, 10), 0,
		  "prep LOAD PROGRESS");
	CHECK_RES(kvs_submit(c), 1, "submit");
	CHECK(kill(d->pid, SIGKILL) == 0, "SIGKILL kvstashd");
	/* Nothing of the library is called but the look at the slot. */
	for (uint64_t t0 = mono_ms(); kvs_fence_done(c, &f, LAYERS - 1, &status, NULL) != 1;) {
		CHECK(mono_ms() - t0 < OP_TIMEOUT_MS, "the watchdog never released the LOAD");
		usleep(1000);
	}
	CHECK_RES(status, -ECONNRESET, "status after kvstashd died");
	kvsd_kill(d); /* reaps it */
	e = wait_one(c);
	CHECK_RES(e.res, -ECONNRESET, "the LOAD's local completion");
	it_ok("kvstashd killed: the watchdog releases a LOAD PROGRESS, -ECONNRESET");

	CHECK(kvsd_restart(d) == 0, "restart kvstashd");
	r = kvs_reconnect(c);
	CHECK(r == 0, "reconnect: %s", kvs_strerror(r));
	CHECK_RES(kvs_fence_done(c, &f, 0, NULL, NULL), -ECONNRESET, "a ref of the dead session");
	CHECK_RES(kvs_fence_signal_host(c, &f), -ECONNRESET, "signal of a dead session's ref");
	submit_save_after(c, keys, src, N, &g);
	CHECK_RES(kvs_fence_signal_host(c, &g), 0, "signal on the new session");
	e = wait_one(c);
	CHECK_RES(e.res, N, "SAVE AFTER on the new session");
	kvs_close(c);
	test_kv_free(&kv);
	it_ok("after kvs_reconnect() old refs are refused and fences work again");
}

static void refusals(const struct kvsd *d)
{
	struct kvs_connect_opts o;
	struct kvs_fence_ref f;
	uint8_t keys[KVS_KEY_SIZE] = { 1 };
	uint32_t id = 0;
	struct test_kv kv;
	struct kvs_client *c = it_worker(d, "fence-none", "model-fences/split", 0, 1, &kv,
					 LAYOUT_SPLIT_KV, LAYERS, BLOCKS, SEG);
	struct kvs_sqe *sqe = kvs_get_sqe(c);

	/* Without KVS_CONNECT_FENCES: refused by the library, the SQE given back. */
	CHECK(sqe, "no SQE");
	CHECK_RES(kvs_prep_save_after(c, sqe, keys, &id, 1, &f, 1), -EINVAL,
		  "SAVE AFTER without fences");
	CHECK_RES(kvs_submit(c), 0, "nothing to submit");
	kvs_close(c);
	test_kv_free(&kv);
	kvs_connect_opts_init(&o);
	o.role = KVS_ROLE_SCHEDULER;
	o.instance = "fence-sched";
	o.ns = "model-fences/split";
	o.flags = KVS_CONNECT_FENCES;
	CHECK_RES(kvs_connect(d->sock, &o, &c), -EINVAL, "fences for a scheduler");
	it_ok("fences are refused without KVS_CONNECT_FENCES and for schedulers");
}

int main(void)
{
	struct kvsd d;
	char ini[64];

	it_watchdog(120);
	snprintf(ini, sizeof(ini), "[worker]\nsave_wait_ms = %u\n", WAIT_MS);
	it_start(&d, ini);
	refusals(&d);
	save_waits_for_signal(&d);
	others_go_on(&d);
	load_progress(&d);
	daemon_death(&d);
	it_stop(&d);
	return 0;
}
