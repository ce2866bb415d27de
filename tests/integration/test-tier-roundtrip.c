/* SPDX-License-Identifier: MIT */
/*
 * The SSD tier through kvstashd, end to end: a real daemon with [ssd] on
 * a file of a real disk (O_DIRECT), real engines over real rings.
 *   - a pool of 256 blocks takes 1024 (at the drive's pace: an eviction
 *     never waits, so a burst faster than the drive drops victims): the
 *     evicted ones spill, and
 *     a QUERY finds every one of them again (hits across both tiers, the
 *     CQE saying how many are still being read), a LOAD into other block
 *     ids (poisoned first) brings them back byte-exact;
 *   - KVS_QUERY_DRAM asks for DRAM only: an evicted block is a miss, and
 *     nothing is read back for it;
 *   - blocks read back stay on SSD: evicted again, they still load;
 *   - TP 2 (two ranks, a shard each) and a replicated MLA layout (one
 *     copy for all ranks): every shard spills and comes back.
 * Payloads are derived from their key's index: any mismatch shows.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "ssdtest.h"

#define BLOCKS	64u /* the engine's KV cache, in blocks */
#define BATCH	16u /* keys per SAVE */
#define PROMPTS 64u /* 1024 blocks through a pool of 256 */
#define SEG	8192u
#define LAYERS	4u

static char ini[1024];

/*
 * 256M: TP 2's 2048 shards of 32 KiB take a 64 KiB unit each on SSD, and
 * with write_ahead (the default) the blocks still in DRAM are there too.
 */
static const char *tier_ini(const char *tag, uint64_t pool)
{
	snprintf(ini, sizeof(ini),
		 "[pool]\nsize = %llu\nextent_size = 256K\n"
		 "[ssd]\npath = %s/%s\nsize = 256M\nregion_size = 1M\n",
		 (unsigned long long)pool, st_dir(), tag);
	return ini;
}

/* Wait until a QUERY without a lease counts all @n keys (both tiers): the spills landed. */
static void wait_counted(struct kvs_client *c, const uint8_t *keys, uint32_t n)
{
	for (int i = 0; i < 1000; i++) {
		if (it_query(c, keys, n, KVS_QUERY_NOLEASE).res == (int32_t)n)
			return;
		usleep(10000);
	}
	CHECK(false, "%u keys never all counted across the tiers (%d)", n,
	      it_query(c, keys, n, KVS_QUERY_NOLEASE).res);
}

/* Load prompt @p's blocks into ids [@dst, @dst + BATCH) and check them against their seeds. */
static uint32_t load_check(struct kvs_client *c, struct test_kv *kv, const uint8_t *keys,
			   uint64_t p, uint32_t dst)
{
	uint32_t ids[BATCH];
	struct kvs_cqe q, e;

	it_ids(ids, BATCH, dst);
	for (unsigned i = 0; i < BATCH; i++)
		test_kv_poison(kv, ids[i], POISON);
	q = it_query(c, keys, BATCH, 0);
	CHECK_RES(q.res, BATCH, "QUERY of an evicted prompt, across the tiers");
	e = it_load(c, q.result0, ids, BATCH, 0, 0);
	CHECK_RES(e.res, BATCH, "LOAD of blocks read back from SSD");
	for (unsigned i = 0; i < BATCH; i++)
		CHECK(test_kv_check(kv, ids[i], it_seed(p, i)), "prompt %llu block %u differs",
		      (unsigned long long)p, i);
	return KVS_CQE_PENDING(q.flags);
}

/* Prompts @key_base.. of BATCH keys each; block i of prompt p holds it_seed(@data_base + p, i). */
static void save_prompts(struct kvs_client *c, struct test_kv *kv, uint8_t (*keys)[BATCH * 16],
			 uint64_t key_base, uint64_t data_base, unsigned n)
{
	uint32_t ids[BATCH];

	for (unsigned p = 0; p < n; p++) {
		it_keys(keys[p], BATCH, key_base + p);
		it_ids(ids, BATCH, (p % 2) * BATCH);
		for (unsigned i = 0; i < BATCH; i++)
			test_kv_fill(kv, ids[i], it_seed(data_base + p, i));
		CHECK_RES(it_save(c, keys[p], ids, BATCH).res, BATCH, "SAVE");
		it_flush(c);
		/*
		 * At the drive's pace: an eviction never waits for the SSD, so
		 * a faster engine would see some blocks dropped (counted).
		 */
		for (unsigned q = 0; q <= p; q++)
			wait_counted(c, keys[q], BATCH);
	}
}

static void spill_and_back(void)
{
	static uint8_t keys[PROMPTS][BATCH * 16];
	static uint8_t more[PROMPTS][BATCH * 16];
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	unsigned pending = 0;
	struct kvs_cqe q;

	it_start(&d, tier_ini("spill", 8u << 20));
	c = it_worker(&d, "tier", "model-tier", 0, 1, &kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG);
	save_prompts(c, &kv, keys, 100, 100, PROMPTS);
	for (unsigned p = 0; p < PROMPTS; p++)
		wait_counted(c, keys[p], BATCH);

	/* The first prompt went long ago: not in DRAM, so DRAM only misses it. */
	q = it_query(c, keys[0], BATCH, KVS_QUERY_DRAM);
	CHECK_RES(q.res, 0, "QUERY with KVS_QUERY_DRAM of an evicted prompt");
	CHECK_UINT(KVS_CQE_PENDING(q.flags), ==, 0);
	q = it_query(c, keys[0], BATCH, KVS_QUERY_DRAM | KVS_QUERY_NOLEASE);
	CHECK_RES(q.res, 0, "a NOLEASE QUERY with KVS_QUERY_DRAM");

	/*
	 * Every prompt, the evicted ones through SSD, byte-exact in other
	 * blocks; at the drive's pace again (reads back take slots, which
	 * evicts: the evicted must land before the next QUERY).
	 */
	for (unsigned p = 0; p < PROMPTS; p++) {
		pending += load_check(c, &kv, keys[p], 100 + p, 2 * BATCH + (p % 2) * BATCH);
		for (unsigned w = 0; w < PROMPTS; w++)
			wait_counted(c, keys[w], BATCH);
	}
	CHECK(pending >= BATCH, "only %u hits were pending reads from SSD", pending);

	/* A new working set evicts the ones read back: they stay valid on SSD. */
	save_prompts(c, &kv, more, 5000, 5000, PROMPTS / 2);
	for (unsigned p = 0; p < 4; p++) {
		load_check(c, &kv, keys[p], 100 + p, 2 * BATCH);
		for (unsigned w = 0; w < PROMPTS / 2; w++)
			wait_counted(c, more[w], BATCH);
	}
	it_ok("%u blocks through a pool of 256 over SSD: every one back byte-exact (%u hits "
	      "pending reads), DRAM-only QUERY missed, read-back blocks still on SSD",
	      PROMPTS * BATCH, pending);
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
}

struct rank_arg {
	const struct kvsd *d;
	const char *ns;
	enum test_layout_kind kind;
	struct it_barrier *bar;
	uint64_t *lease; /* shared: rank 0's QUERY leases for both ranks */
};

/* The data seed of rank @rank: shards differ, a replicated layout's copy is one. */
static uint64_t data_base(const struct rank_arg *a, unsigned rank)
{
	return 900 + (a->kind == LAYOUT_MLA ? 0 : rank * 1000);
}

/* One rank of a TP 2 instance: both save every prompt (their shard), then load it back. */
static int rank_main(void *arg, unsigned rank)
{
	static uint8_t keys[PROMPTS][BATCH * 16];
	struct rank_arg *a = arg;
	struct kvs_client *c;
	struct test_kv kv;

	c = it_worker(a->d, "tier-tp", a->ns, rank, 2, &kv, a->kind, LAYERS, BLOCKS, SEG);
	it_barrier_wait(a->bar); /* both registered: the instance is sealed */
	save_prompts(c, &kv, keys, 900, data_base(a, rank), PROMPTS);
	it_barrier_wait(a->bar);
	for (unsigned p = 0; p < PROMPTS; p++) {
		uint32_t ids[BATCH];
		struct kvs_cqe e;

		/* The drive's pace: what the last read back evicted has landed. */
		for (unsigned q = p; q < PROMPTS; q++)
			wait_counted(c, keys[q], BATCH);
		it_ids(ids, BATCH, 2 * BATCH);
		for (unsigned i = 0; i < BATCH; i++)
			test_kv_poison(&kv, ids[i], POISON);
		if (rank == 0) {
			e = it_query(c, keys[p], BATCH, 0);
			CHECK_RES(e.res, BATCH, "TP 2: QUERY across the tiers");
			*a->lease = e.result0;
		}
		it_barrier_wait(a->bar);
		e = it_load(c, *a->lease, ids, BATCH, 0, 0);
		CHECK_RES(e.res, BATCH, "TP 2: LOAD of the rank's shard");
		for (unsigned i = 0; i < BATCH; i++)
			CHECK(test_kv_check(&kv, ids[i], it_seed(data_base(a, rank) + p, i)),
			      "rank %u prompt %u block %u differs", rank, p, i);
		it_barrier_wait(a->bar);
	}
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

static void tp2(const char *tag, enum test_layout_kind kind)
{
	struct rank_arg a = { .kind = kind };
	struct kvsd d;
	char ns[64];

	snprintf(ns, sizeof(ns), "model-tier/%s", tag);
	/* A shard per rank (or one copy): 512 slots hold a quarter of TP 2's 2048 shards. */
	it_start(&d, tier_ini(tag, 16u << 20));
	a.d = &d;
	a.ns = ns;
	a.bar = it_barrier_new(2);
	a.lease = it_shared(sizeof(*a.lease));
	for (unsigned r = 0; r < 2; r++)
		it_spawn(rank_main, &a, r);
	it_wait_all();
	it_ok("TP 2 (%s): %u prompts through a pool of a quarter of them, every shard back "
	      "byte-exact",
	      tag, PROMPTS);
	it_stop(&d);
}

int main(void)
{
	it_watchdog(300);
	spill_and_back();
	tp2("split", LAYOUT_SPLIT_KV);
	tp2("mla", LAYOUT_MLA);
	return 0;
}
