/* SPDX-License-Identifier: MIT */
/*
 * Soak: six engine processes at once against one kvstashd, for
 * $KVSTASH_SOAK_SECONDS (default 30):
 *   - four with an instance and a namespace each, in four layouts and
 *     three block sizes (so the pool's classes trade extents),
 *   - two more, in two instances of one shared namespace, that hit each
 *     other's blocks (each saves only its own half of the prompts).
 * Each loops over QUERY, LOAD (sometimes of a layer range) or RELEASE,
 * and SAVE (sometimes batched with a FLUSH and a NOP in one submission)
 * of the prompts it misses, in a pool too small for all of them.  Every
 * LOAD is checked byte for byte, the layers outside its range and the
 * blocks outside it must stay poisoned; every CQE must be what the
 * operation promises, and the only error allowed is -ENOSPC from a SAVE.
 * At the end, with every engine gone: no lease left, the daemon's fds back
 * to what they were before the first engine came, its error counter equal
 * to the -ENOSPC the engines saw.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"

#define NPROC 6u
#define SHARED0 4u /* processes 4 and 5 share a namespace */
#define BLOCKS 32u
#define SRC 0u	   /* blocks 0..15: what the engine saves from */
#define DST 16u	   /* blocks 16..31: what it loads into */
#define MAXN 8u
#define PROMPTS 24u
#define MIN_ITERS 200u /* however short the soak */

struct proc_cfg {
	enum test_layout_kind kind;
	unsigned layers;
	uint64_t seg;
};

static const struct proc_cfg cfgs[NPROC] = {
	{ LAYOUT_PAGE_FIRST, 8, 8192 }, /* 64 KiB blocks */
	{ LAYOUT_SPLIT_KV, 4, 8192 },	/* 64 KiB */
	{ LAYOUT_MLA, 8, 4096 },	/* 32 KiB */
	{ LAYOUT_PAGE_FIRST, 6, 8192 }, /* 48 KiB */
	{ LAYOUT_PAGE_FIRST, 8, 8192 }, /* shared namespace */
	{ LAYOUT_PAGE_FIRST, 8, 8192 },
};

struct result {
	uint64_t ops, loads, blocks_checked, saves, releases, enospc, cross_hits;
};

struct shared {
	const struct kvsd *d;
	struct it_barrier *bar;
	double secs;
	struct result res[NPROC];
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* The prompt's seed: the same in both processes of the shared namespace. */
static uint64_t prompt_seed(unsigned proc, unsigned p)
{
	return (proc >= SHARED0 ? 900 : 100 * (proc + 1)) * 1000 + p;
}

/* In the shared namespace, each process saves only its half of the prompts. */
static bool saves(unsigned proc, unsigned p)
{
	return proc < SHARED0 || p % 2 == proc - SHARED0;
}

static void check_load(struct test_kv *kv, unsigned proc, uint64_t seed, const uint32_t *dst,
		       unsigned h, unsigned l0, unsigned lc)
{
	for (unsigned i = 0; i < h; i++) {
		CHECK(test_kv_check_layers(kv, dst[i], it_seed(seed, i), l0, lc),
		      "proc %u: prompt %llu block %u (into %u, layers %u+%u) differs", proc,
		      (unsigned long long)seed, i, dst[i], l0, lc);
		for (unsigned l = 0; l < kv->layers; l++)
			if (l < l0 || l >= l0 + lc)
				CHECK(test_kv_layer_is_poison(kv, l, dst[i], POISON),
				      "proc %u: layer %u of block %u outside %u+%u written",
				      proc, l, dst[i], l0, lc);
	}
	for (unsigned b = DST; b < BLOCKS; b++) {
		bool used = false;

		for (unsigned i = 0; i < h; i++)
			used |= dst[i] == b;
		if (!used)
			CHECK(test_kv_is_poison(kv, b, POISON),
			      "proc %u: bystander block %u written", proc, b);
	}
}

/* SAVE (+ FLUSH + NOP in the same submission, sometimes) of keys[h..n). */
static void save_rest(struct kvs_client *c, struct test_kv *kv, struct result *res, unsigned proc,
		      uint64_t seed, const uint8_t *keys, unsigned h, unsigned n, bool batch)
{
	uint32_t src[MAXN];
	struct kvs_cqe *cqe;
	unsigned want = batch ? 3 : 1, got = 0;
	bool seen[4] = { false };

	for (unsigned i = h; i < n; i++) {
		src[i - h] = SRC + i;
		test_kv_fill(kv, SRC + i, it_seed(seed, i));
	}
	CHECK(kvs_prep_save(c, kvs_get_sqe(c), keys + h * KVS_KEY_SIZE, src, n - h, 1) == 0,
	      "prep save");
	if (batch) {
		CHECK(kvs_prep_flush(c, kvs_get_sqe(c), 0, 2) == 0, "prep flush");
		CHECK(kvs_prep_nop(c, kvs_get_sqe(c), 3) == 0, "prep nop");
	}
	CHECK(kvs_submit(c) == (int)want, "submit");
	while (got < want) {
		int r = kvs_wait_cqe(c, &cqe, OP_TIMEOUT_MS);

		CHECK(r == 0, "proc %u: wait: %s", proc, kvs_strerror(r));
		CHECK(cqe->user_data >= 1 && cqe->user_data <= want && !seen[cqe->user_data],
		      "proc %u: unexpected CQE user_data %llu", proc,
		      (unsigned long long)cqe->user_data);
		seen[cqe->user_data] = true;
		if (cqe->user_data == 1) {
			if (cqe->res == -ENOSPC) {
				res->enospc++;
			} else {
				CHECK(cqe->res == (int32_t)(n - h), "proc %u: SAVE of %u: %d (%s)",
				      proc, n - h, cqe->res, kvs_strerror(cqe->res));
				CHECK(cqe->result0 + cqe->result1 == n - h,
				      "proc %u: SAVE of %u: stored %llu skipped %llu", proc, n - h,
				      (unsigned long long)cqe->result0,
				      (unsigned long long)cqe->result1);
			}
			res->saves++;
		} else {
			CHECK(cqe->res == 0, "proc %u: %s: %s", proc,
			      cqe->user_data == 2 ? "FLUSH" : "NOP", kvs_strerror(cqe->res));
			/* FLUSH completes after the SAVE before it. */
			if (cqe->user_data == 2)
				CHECK(seen[1], "proc %u: FLUSH completed before its SAVE", proc);
		}
		kvs_cqe_seen(c, cqe);
		got++;
	}
}

static int proc_main(void *arg, unsigned proc)
{
	struct shared *sh = arg;
	const struct proc_cfg *cf = &cfgs[proc];
	struct result *res = &sh->res[proc];
	uint64_t s = 0x9e3779b97f4a7c15ull * (proc + 1);
	char inst[32], ns[64];
	uint8_t keys[MAXN * KVS_KEY_SIZE];
	uint32_t dst[MAXN];
	struct test_kv kv;
	struct kvs_client *c;
	struct kvs_cqe e;
	uint64_t deadline;

	snprintf(inst, sizeof(inst), "soak-%u", proc);
	if (proc >= SHARED0)
		snprintf(ns, sizeof(ns), "soak-shared");
	else
		snprintf(ns, sizeof(ns), "soak-ns-%u", proc);
	c = it_worker(sh->d, inst, ns, 0, 1, &kv, cf->kind, cf->layers, BLOCKS, cf->seg);
	for (unsigned b = DST; b < BLOCKS; b++)
		test_kv_poison(&kv, b, POISON);

	/* The shared pair: each saves its own first prompt, then hits the other's. */
	if (proc >= SHARED0) {
		unsigned mine = proc - SHARED0, theirs = 1 - mine;

		it_keys(keys, MAXN, prompt_seed(proc, mine));
		save_rest(c, &kv, res, proc, prompt_seed(proc, mine), keys, 0, MAXN, true);
		it_barrier_wait(sh->bar);
		it_keys(keys, MAXN, prompt_seed(proc, theirs));
		e = it_query(c, keys, MAXN, 0);
		CHECK_RES(e.res, MAXN, "QUERY of the other instance's prompt");
		it_ids(dst, MAXN, DST);
		CHECK_RES(it_load(c, e.result0, dst, MAXN, 0, 0).res, MAXN, "LOAD of it");
		check_load(&kv, proc, prompt_seed(proc, theirs), dst, MAXN, 0, kv.layers);
		for (unsigned b = DST; b < BLOCKS; b++)
			test_kv_poison(&kv, b, POISON);
		res->cross_hits += MAXN;
	} else {
		it_barrier_wait(sh->bar);
	}
	it_barrier_wait(sh->bar); /* everyone starts the soak together */

	deadline = test_now_ns() + (uint64_t)(sh->secs * 1e9);
	for (unsigned iter = 0; iter < MIN_ITERS || test_now_ns() < deadline; iter++) {
		unsigned p = (unsigned)(rnd(&s) % PROMPTS), n = 1 + (unsigned)(rnd(&s) % MAXN);
		uint64_t seed = prompt_seed(proc, p);
		unsigned h, l0 = 0, lc = kv.layers;

		it_keys(keys, n, seed);
		e = it_query(c, keys, n, rnd(&s) % 8 == 0 ? KVS_QUERY_NOLEASE : 0);
		CHECK(e.res >= 0 && e.res <= (int32_t)n, "proc %u: QUERY of %u: %d (%s)", proc, n,
		      e.res, kvs_strerror(e.res));
		h = (unsigned)e.res;
		res->ops++;
		if (h && !saves(proc, p))
			res->cross_hits += h;
		if (h && e.result0) {
			if (rnd(&s) % 4 == 0) {
				CHECK_RES(it_release(c, e.result0).res, 0, "RELEASE");
				res->releases++;
			} else {
				/* Distinct random targets among the DST blocks. */
				uint32_t perm[BLOCKS - DST];

				for (unsigned i = 0; i < BLOCKS - DST; i++)
					perm[i] = DST + i;
				for (unsigned i = 0; i < h; i++) {
					unsigned j = i + (unsigned)(rnd(&s) % (BLOCKS - DST - i));
					uint32_t t = perm[i];

					perm[i] = perm[j];
					perm[j] = t;
					dst[i] = perm[i];
				}
				if (rnd(&s) % 3 == 0) {
					l0 = (unsigned)(rnd(&s) % kv.layers);
					lc = 1 + (unsigned)(rnd(&s) % (kv.layers - l0));
				}
				e = it_load(c, e.result0, dst, h, l0, lc);
				CHECK(e.res == (int32_t)h, "proc %u: LOAD of %u: %d (%s)", proc, h,
				      e.res, kvs_strerror(e.res));
				check_load(&kv, proc, seed, dst, h, l0, lc);
				for (unsigned i = 0; i < h; i++)
					test_kv_poison(&kv, dst[i], POISON);
				res->loads++;
				res->blocks_checked += h;
			}
			res->ops++;
		}
		if (h < n && saves(proc, p)) {
			save_rest(c, &kv, res, proc, seed, keys, h, n, rnd(&s) % 4 == 0);
			res->ops++;
		}
	}
	it_flush(c);
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

int main(void)
{
	const char *env = getenv("KVSTASH_SOAK_SECONDS");
	double secs = env ? atof(env) : 30;
	struct shared *sh = it_shared(sizeof(*sh));
	struct kvs_msg_stats_global g;
	struct result tot = { 0 };
	int fds0, fds;
	uint64_t t0;
	struct kvsd d;

	if (secs <= 0)
		secs = 30;
	it_watchdog((unsigned)secs + 120);
	it_start(&d, "[pool]\nsize = 8M\nextent_size = 256K\n");
	/* A round trip first: the daemon is past its start-up probe connection. */
	g = it_stats(&d);
	fds0 = proc_fd_count(d.pid);
	CHECK(fds0 > 0, "fds of kvstashd: %s", strerror(-fds0));
	sh->d = &d;
	sh->bar = it_barrier_new(NPROC);
	sh->secs = secs;
	for (unsigned i = 0; i < NPROC; i++)
		it_spawn(proc_main, sh, i);
	it_wait_all();

	/* Sessions end asynchronously (their copies drain first): wait, bounded. */
	t0 = test_now_ns();
	for (;;) {
		g = it_stats(&d);
		fds = proc_fd_count(d.pid);
		if ((g.sessions_live == 0 && g.leases_live == 0 && fds <= fds0) ||
		    test_now_ns() - t0 > 10000000000ull)
			break;
		usleep(20000);
	}
	for (unsigned i = 0; i < NPROC; i++) {
		const struct result *r = &sh->res[i];

		printf("# proc %u: %llu ops, %llu loads (%llu blocks checked), %llu saves "
		       "(%llu -ENOSPC), %llu releases, %llu cross-instance hits\n",
		       i, (unsigned long long)r->ops, (unsigned long long)r->loads,
		       (unsigned long long)r->blocks_checked, (unsigned long long)r->saves,
		       (unsigned long long)r->enospc, (unsigned long long)r->releases,
		       (unsigned long long)r->cross_hits);
		tot.ops += r->ops;
		tot.loads += r->loads;
		tot.blocks_checked += r->blocks_checked;
		tot.enospc += r->enospc;
		CHECK(r->loads > 0 && r->saves > 0, "proc %u made no progress", i);
	}
	printf("# daemon: %llu evictions, %llu saved, %llu loaded blocks, %llu errors\n",
	       (unsigned long long)g.evictions, (unsigned long long)g.save_blocks_stored,
	       (unsigned long long)g.load_blocks, (unsigned long long)g.errors);
	CHECK(g.sessions_live == 0, "%llu sessions live", (unsigned long long)g.sessions_live);
	CHECK(g.leases_live == 0, "%llu leases live after every engine left",
	      (unsigned long long)g.leases_live);
	CHECK(fds <= fds0, "kvstashd has %d fds, %d before the engines came", fds, fds0);
	CHECK(g.errors == tot.enospc,
	      "the daemon counted %llu errors, the engines saw %llu -ENOSPC",
	      (unsigned long long)g.errors, (unsigned long long)tot.enospc);
	CHECK(g.evictions > 0, "no evictions: the pool was never under pressure");
	CHECK(g.load_blocks >= tot.blocks_checked,
	      "daemon loaded %llu blocks, engines checked %llu", (unsigned long long)g.load_blocks,
	      (unsigned long long)tot.blocks_checked);
	it_stop(&d);
	it_ok("%u engines for %.0f s: %llu ops, %llu loads (%llu blocks) byte-exact, %llu -ENOSPC",
	      NPROC, secs, (unsigned long long)tot.ops, (unsigned long long)tot.loads,
	      (unsigned long long)tot.blocks_checked, (unsigned long long)tot.enospc);
	return 0;
}
