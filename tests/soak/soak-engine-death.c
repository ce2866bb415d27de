/* SPDX-License-Identifier: MIT */
/*
 * Soak: engine death.  SOAK_ENGINE_KILLS (default 200) times, an engine
 * process doing mixed SAVE / QUERY / LOAD / RELEASE / NOP traffic, several
 * operations in flight, some leases held, is SIGKILLed at a random moment
 * (one in eight while it is still connecting or registering).  Meanwhile
 * three surviving engines of the same namespace (the victims save the same
 * prompts with the same bytes, so survivors load blocks victims saved)
 * loop over QUERY, LOAD (checked byte for byte, the other destination
 * blocks poisoned and checked), RELEASE and SAVE.
 *
 * Pass: every survivor operation succeeds (zero errors); after the last
 * kill kvstashd is back to the survivors' baseline: sessions, fds, session
 * regions, engine mappings; live leases equal the ones survivors hold; the
 * pool's used bytes are exactly the resident blocks' slots; and with every
 * lease released, the whole pool can be filled and pinned again (a slot
 * leaked by a dead engine would make that SAVE -ENOSPC one batch early).
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "soak.h"

#define NS	   "soak-ed/bf16/pf"
#define LAYERS	   4u
#define SEG	   4096u /* 16 KiB blocks */
#define SLOT	   (LAYERS * SEG)
#define BLOCKS	   64u
#define SRC	   0u  /* blocks 0..31: what an engine saves from */
#define DST	   32u /* blocks 32..63: what it loads into */
#define MAXN	   8u
#define PROMPTS	   64u
#define NSURV	   3u
#define POOL	   (4u << 20)
#define FILL_BATCH 32u

struct surv_res {
	uint64_t ops, loads, blocks_checked, saves, releases, errors;
	uint32_t held;
};

struct shared {
	const struct kvsd *d;
	struct soak_barrier *bar; /* survivors and the parent */
	uint32_t phase;		  /* 0: traffic; 1: quiesce and hold; 2: release, fill, leave */
	uint64_t fill_batches;
	struct surv_res res[NSURV];
};

static const struct kvsd *sh_d;

static uint64_t prompt_seed(unsigned p)
{
	return 7000 + p;
}

/* ---- survivors ------------------------------------------------------- */

static void check_dst(struct test_kv *kv, uint64_t seed, const uint32_t *dst, unsigned h,
		      unsigned who)
{
	for (unsigned i = 0; i < h; i++)
		CHECK(test_kv_check(kv, dst[i], it_seed(seed, i)),
		      "survivor %u: block %u of prompt %llu loaded into %u differs", who, i,
		      (unsigned long long)seed, dst[i]);
	for (unsigned b = DST; b < BLOCKS; b++) {
		bool used = false;

		for (unsigned i = 0; i < h; i++)
			used |= dst[i] == b;
		if (!used)
			CHECK(test_kv_is_poison(kv, b, POISON), "survivor %u: block %u written",
			      who, b);
	}
}

/* One round: QUERY a prompt, LOAD or RELEASE the hits, SAVE the misses. */
static void survivor_round(struct kvs_client *c, struct test_kv *kv, struct surv_res *res,
			   unsigned who, uint64_t *rs)
{
	unsigned p = (unsigned)(soak_rnd(rs) % PROMPTS), n = 1 + (unsigned)(soak_rnd(rs) % MAXN);
	uint64_t seed = prompt_seed(p);
	uint8_t keys[MAXN * KVS_KEY_SIZE];
	uint32_t ids[MAXN];
	struct kvs_cqe e;
	unsigned h;

	it_keys(keys, n, seed);
	e = it_query(c, keys, n, 0);
	CHECK(e.res >= 0 && e.res <= (int32_t)n, "survivor %u: QUERY: %s", who,
	      kvs_strerror(e.res));
	h = (unsigned)e.res;
	res->ops++;
	if (h) {
		if (soak_rnd(rs) % 4 == 0) {
			CHECK_RES(it_release(c, e.result0).res, 0, "survivor RELEASE");
			res->releases++;
		} else {
			it_ids(ids, h, DST + (unsigned)(soak_rnd(rs) % (BLOCKS - DST - MAXN + 1)));
			e = it_load(c, e.result0, ids, h, 0, 0);
			CHECK(e.res == (int32_t)h, "survivor %u: LOAD of %u: %d (%s)", who, h,
			      e.res, kvs_strerror(e.res));
			check_dst(kv, seed, ids, h, who);
			for (unsigned i = 0; i < h; i++)
				test_kv_poison(kv, ids[i], POISON);
			res->loads++;
			res->blocks_checked += h;
		}
		res->ops++;
	}
	if (h < n) {
		it_ids(ids, n - h, SRC);
		for (unsigned i = h; i < n; i++)
			test_kv_fill(kv, SRC + i - h, it_seed(seed, i));
		e = it_save(c, keys + h * KVS_KEY_SIZE, ids, n - h);
		if (e.res == -ENOSPC) {
			struct kvs_msg_stats_global g = it_stats(sh_d);

			CHECK(0,
			      "survivor %u: SAVE of %u: -ENOSPC with %llu leases live, %llu "
			      "blocks resident, %llu partial, %llu of %llu pool bytes used",
			      who, n - h, (unsigned long long)g.leases_live,
			      (unsigned long long)g.blocks_resident,
			      (unsigned long long)g.blocks_partial,
			      (unsigned long long)g.pool_used_bytes,
			      (unsigned long long)g.pool_capacity_bytes);
		}
		CHECK(e.res == (int32_t)(n - h), "survivor %u: SAVE of %u: %d (%s)", who, n - h,
		      e.res, kvs_strerror(e.res));
		res->saves++;
		res->ops++;
	}
}

static int survivor(void *arg, unsigned who)
{
	struct shared *sh = arg;
	struct surv_res *res = &sh->res[who];
	uint64_t rs = 0x2545f4914f6cdd1dull * (who + 1);
	uint8_t keys[MAXN * KVS_KEY_SIZE];
	uint32_t ids[MAXN];
	char inst[32];
	struct test_kv kv;
	struct kvs_client *c;
	struct kvs_cqe e;
	uint64_t lease = 0;

	sh_d = sh->d;
	snprintf(inst, sizeof(inst), "survivor-%u", who);
	c = it_worker(sh->d, inst, NS, 0, 1, &kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG);
	for (unsigned b = DST; b < BLOCKS; b++)
		test_kv_poison(&kv, b, POISON);
	soak_barrier_wait(sh->bar); /* connected and registered: the baseline */
	while (__atomic_load_n(&sh->phase, __ATOMIC_ACQUIRE) == 0)
		survivor_round(c, &kv, res, who, &rs);

	/* Quiesce, then hold one lease each while the parent counts. */
	soak_barrier_wait(sh->bar);
	it_keys(keys, MAXN, 90000 + who);
	it_ids(ids, MAXN, SRC);
	for (unsigned i = 0; i < MAXN; i++)
		test_kv_fill(&kv, SRC + i, it_seed(90000 + who, i));
	CHECK_RES(it_save(c, keys, ids, MAXN).res, MAXN, "SAVE of the held prompt");
	it_flush(c);
	e = it_query(c, keys, MAXN, 0);
	CHECK(e.res >= 0, "QUERY of the held prompt: %s", kvs_strerror(e.res));
	lease = e.result0;
	res->held = lease != 0;
	soak_barrier_wait(sh->bar); /* the parent counts */
	soak_barrier_wait(sh->bar);
	if (lease)
		CHECK_RES(it_release(c, lease).res, 0, "RELEASE of the held lease");
	soak_barrier_wait(sh->bar); /* nothing pinned anywhere now */
	if (who == 0) {
		uint64_t leases[64];
		unsigned nb = soak_pin_pool(c, &kv, SRC, FILL_BATCH, 100000, leases, 64);

		for (unsigned i = 0; i < nb; i++)
			CHECK_RES(it_release(c, leases[i]).res, 0, "RELEASE after the fill");
		sh->fill_batches = nb;
	}
	soak_barrier_wait(sh->bar);
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

/* ---- victims --------------------------------------------------------- */

/*
 * Traffic until killed: keep up to six operations in flight, at most one
 * SAVE (its source blocks must not change under the copy), hold up to
 * eight leases, LOAD with some, RELEASE others.  Says "r" once a SAVE has
 * completed.
 */
static void __attribute__((noreturn)) victim(const struct kvsd *d, unsigned iter, int wfd)
{
	static struct test_kv kv;
	uint64_t rs = 0x9e3779b97f4a7c15ull ^ ((uint64_t)iter << 17), leases[8];
	unsigned nleases = 0, qleased = 0;
	bool saving = false, told = false;
	struct kvs_client *c;
	char inst[32];

	snprintf(inst, sizeof(inst), "victim-%u", iter);
	if (test_connect(d, KVS_ROLE_WORKER, inst, NS, 0, 1, &c) < 0)
		_exit(2);
	if (test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG) < 0 ||
	    test_kv_register(c, &kv) < 0)
		_exit(3);
	for (;;) {
		struct kvs_cqe *cqe;
		int r;

		while (kvs_pending(c) < 6) {
			unsigned p = (unsigned)(soak_rnd(&rs) % PROMPTS);
			unsigned n = 1 + (unsigned)(soak_rnd(&rs) % MAXN), op = soak_rnd(&rs) % 5;
			uint8_t keys[MAXN * KVS_KEY_SIZE];
			uint32_t ids[MAXN];
			struct kvs_sqe *sqe = kvs_get_sqe(c);

			if (!sqe)
				break;
			it_keys(keys, n, prompt_seed(p));
			if (op == 1 && !saving) {
				it_ids(ids, n, SRC);
				for (unsigned i = 0; i < n; i++)
					test_kv_fill(&kv, SRC + i, it_seed(prompt_seed(p), i));
				kvs_prep_save(c, sqe, keys, ids, n, 1);
				saving = true;
			} else if (op == 2 && nleases) {
				it_ids(ids, 1, DST + (unsigned)(soak_rnd(&rs) % (BLOCKS - DST)));
				kvs_prep_load(c, sqe, leases[--nleases], ids, 1, 0, 0, 2);
			} else if (op == 3 && nleases && soak_rnd(&rs) % 2) {
				kvs_prep_release(c, sqe, leases[--nleases], 3);
			} else if (op == 4) {
				kvs_prep_nop(c, sqe, 4);
			} else {
				/* At most 8 leases held or coming: more would pin the pool. */
				bool lease = nleases + qleased < 8;

				kvs_prep_query(c, sqe, keys, n, p, lease ? 0 : KVS_QUERY_NOLEASE,
					       lease ? 5 : 6);
				qleased += lease;
			}
		}
		kvs_submit(c);
		r = kvs_wait_cqe(c, &cqe, 100);
		if (r == -ECONNRESET)
			_exit(5);
		if (r < 0)
			continue;
		if (cqe->user_data == 1) {
			saving = false;
			if (!told && cqe->res > 0) {
				told = write(wfd, "r", 1) == 1;
				if (!told)
					_exit(4);
			}
		} else if (cqe->user_data == 5) {
			qleased--;
			if (cqe->res > 0 && cqe->result0)
				leases[nleases++] = cqe->result0; /* some stay held until death */
		}
		kvs_cqe_seen(c, cqe);
	}
}

/* Fork a victim, let it get busy, kill it at a random moment; false if it never got busy. */
static void kill_one(const struct kvsd *d, unsigned iter, uint64_t *rs, unsigned *early)
{
	int p[2], st;
	pid_t pid;
	char c;

	CHECK(pipe(p) == 0, "pipe");
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		close(p[0]);
		victim(d, iter, p[1]);
	}
	close(p[1]);
	if (iter % 8 == 7) {
		/* While it connects, says HELLO or registers. */
		usleep((useconds_t)(soak_rnd(rs) % 5000));
		(*early)++;
	} else {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };

		CHECK(poll(&pf, 1, 20000) == 1 && read(p[0], &c, 1) == 1,
		      "victim %u never completed a SAVE", iter);
		usleep((useconds_t)(soak_rnd(rs) % 20000));
	}
	close(p[0]);
	kill(pid, SIGKILL);
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "victim %u exited by itself: 0x%x", iter,
	      st);
}

int main(void)
{
	unsigned kills = soak_env("SOAK_ENGINE_KILLS", 200), early = 0;
	struct shared *sh = it_shared(sizeof(*sh));
	struct soak_res base, r;
	struct surv_res tot = { 0 };
	uint64_t rs = 0x853c49e6748fea9bull, held = 0, t0;
	struct kvsd d;
	char ini[128];

	it_watchdog(600 + kills);
	snprintf(ini, sizeof(ini), "[pool]\nsize = %u\nextent_size = 256K\n", POOL);
	it_start(&d, ini);
	sh->d = &d;
	sh->bar = soak_barrier_new(NSURV + 1);
	for (unsigned i = 0; i < NSURV; i++)
		it_spawn(survivor, sh, i);
	soak_barrier_wait(sh->bar);
	base = soak_settle(&d, NSURV, 0, -1, NSURV, NSURV, 5000);
	usleep(100000);
	base = soak_settle(&d, NSURV, 0, base.fds, NSURV, NSURV, 5000); /* the same twice: stable */
	CHECK(base.g.sessions_live == NSURV && base.regions == (int)NSURV &&
		      base.maps == (int)NSURV,
	      "baseline: %llu sessions, %d regions, %d mappings",
	      (unsigned long long)base.g.sessions_live, base.regions, base.maps);

	t0 = test_now_ns();
	for (unsigned i = 0; i < kills; i++)
		kill_one(&d, i, &rs, &early);
	printf("# %u engines killed in %.1f s (%u while connecting or registering)\n", kills,
	       (test_now_ns() - t0) / 1e9, early);

	__atomic_store_n(&sh->phase, 1, __ATOMIC_RELEASE);
	soak_barrier_wait(sh->bar); /* survivors quiet */
	soak_barrier_wait(sh->bar); /* each holds its lease */
	for (unsigned i = 0; i < NSURV; i++)
		held += sh->res[i].held;
	r = soak_settle(&d, NSURV, held, base.fds, base.regions, base.maps, 10000);
	printf("# kvstashd after the kills: %llu sessions (baseline %u), %llu leases (survivors "
	       "hold %llu), %d fds (baseline %d), %d session regions, %d engine mappings\n",
	       (unsigned long long)r.g.sessions_live, NSURV, (unsigned long long)r.g.leases_live,
	       (unsigned long long)held, r.fds, base.fds, r.regions, r.maps);
	printf("# pool: %llu bytes used, %llu blocks resident, %llu partial, %llu evictions\n",
	       (unsigned long long)r.g.pool_used_bytes, (unsigned long long)r.g.blocks_resident,
	       (unsigned long long)r.g.blocks_partial, (unsigned long long)r.g.evictions);
	CHECK(r.g.sessions_live == NSURV, "%llu sessions live",
	      (unsigned long long)r.g.sessions_live);
	CHECK(r.g.leases_live == held, "%llu leases live, survivors hold %llu",
	      (unsigned long long)r.g.leases_live, (unsigned long long)held);
	CHECK(r.fds == base.fds, "kvstashd has %d fds, %d before the kills", r.fds, base.fds);
	CHECK(r.regions == base.regions, "%d session regions, %d before", r.regions, base.regions);
	CHECK(r.maps == base.maps, "%d engine mappings, %d before", r.maps, base.maps);
	CHECK(r.g.blocks_partial == 0, "%llu partial blocks",
	      (unsigned long long)r.g.blocks_partial);
	CHECK(r.g.pool_used_bytes == r.g.blocks_resident * SLOT,
	      "pool: %llu bytes used for %llu resident blocks of %u bytes",
	      (unsigned long long)r.g.pool_used_bytes, (unsigned long long)r.g.blocks_resident,
	      SLOT);
	CHECK(r.g.protocol_errors == 0, "%llu protocol errors",
	      (unsigned long long)r.g.protocol_errors);
	CHECK(r.g.sessions_total >= NSURV + kills - early, "only %llu sessions in total",
	      (unsigned long long)r.g.sessions_total);
	soak_barrier_wait(sh->bar); /* survivors release */
	soak_barrier_wait(sh->bar); /* survivor 0 fills the pool */
	soak_barrier_wait(sh->bar);
	CHECK(sh->fill_batches * FILL_BATCH * SLOT == POOL,
	      "pinned %llu blocks of %u bytes in a pool of %u bytes: slots leaked",
	      (unsigned long long)(sh->fill_batches * FILL_BATCH), SLOT, POOL);
	it_wait_all();
	r = soak_settle(&d, 0, 0, -1, 0, 0, 10000);
	CHECK(r.g.sessions_live == 0 && r.g.leases_live == 0 && r.regions == 0 && r.maps == 0,
	      "after the survivors left: %llu sessions, %llu leases, %d regions, %d mappings",
	      (unsigned long long)r.g.sessions_live, (unsigned long long)r.g.leases_live, r.regions,
	      r.maps);

	for (unsigned i = 0; i < NSURV; i++) {
		const struct surv_res *s = &sh->res[i];

		printf("# survivor %u: %llu ops, %llu loads (%llu blocks byte-exact), %llu saves, "
		       "%llu releases, %llu errors\n",
		       i, (unsigned long long)s->ops, (unsigned long long)s->loads,
		       (unsigned long long)s->blocks_checked, (unsigned long long)s->saves,
		       (unsigned long long)s->releases, (unsigned long long)s->errors);
		CHECK(s->loads > 0 && s->saves > 0, "survivor %u made no progress", i);
		tot.ops += s->ops;
		tot.loads += s->loads;
		tot.blocks_checked += s->blocks_checked;
		tot.errors += s->errors;
	}
	it_stop(&d);
	it_ok("%u engines SIGKILLed during traffic: survivors %llu ops, %llu loads (%llu blocks) "
	      "byte-exact, %llu errors; no fd, region, mapping, lease or pool slot leaked "
	      "(the pool pinned whole again: %llu x %u blocks)",
	      kills, (unsigned long long)tot.ops, (unsigned long long)tot.loads,
	      (unsigned long long)tot.blocks_checked, (unsigned long long)tot.errors,
	      (unsigned long long)sh->fill_batches, FILL_BATCH);
	return 0;
}
