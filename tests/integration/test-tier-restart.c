/* SPDX-License-Identifier: MIT */
/*
 * The SSD tier across a clean restart of kvstashd, end to end: a pool of
 * 256 blocks takes 512 (at the drive's pace), kvstashd stops on SIGTERM
 * (the tier drains its queued writes and syncs), a new kvstashd starts on
 * the same [ssd] file and the engine registers the same namespace:
 *   - every block that was on SSD at the stop (counted across the tiers,
 *     not in DRAM) is counted again once the recovery has ended;
 *   - every block advertised after the restart loads byte-exact, alone and
 *     as the prefix of its prompt, into poisoned other block ids;
 *   - a namespace of the same name but another geometry (segment size)
 *     finds none of them: its identity on SSD differs.
 * Payloads are derived from their key: any mismatch shows.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "ssdtest.h"
#include "tiertest.h"

#define PROMPTS 32u /* 512 blocks through a pool of 256 */
#define NS	"model-restart"

static bool on_ssd[PROMPTS][TT_BATCH];

/* Save every prompt at the drive's pace (an eviction never waits for the SSD). */
static void save_all(struct kvs_client *c, struct test_kv *kv)
{
	for (unsigned p = 0; p < PROMPTS; p++) {
		tt_save(c, kv, p, (p % 2) * TT_BATCH);
		it_flush(c);
		for (unsigned q = 0; q <= p; q++)
			for (unsigned i = 0; i < TT_BATCH; i++)
				CHECK(tt_wait_counted(c, q, i), "prompt %u block %u never counted", q, i);
	}
}

/* Which blocks are out of DRAM yet counted: on SSD only. */
static unsigned mark_on_ssd(struct kvs_client *c)
{
	uint8_t keys[TT_BATCH * 16];
	unsigned n = 0;

	for (unsigned p = 0; p < PROMPTS; p++) {
		tt_keys(p, keys);
		for (unsigned i = 0; i < TT_BATCH; i++) {
			struct kvs_cqe q =
				it_query(c, keys + 16 * i, 1, KVS_QUERY_DRAM | KVS_QUERY_NOLEASE);

			on_ssd[p][i] = q.res == 0 && tt_counted(c, p, i);
			n += on_ssd[p][i];
		}
	}
	return n;
}

int main(void)
{
	unsigned ssd_blocks, advertised = 0, loaded = 0, prefix = 0;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	char ini[2048];

	it_watchdog(240);
	snprintf(ini, sizeof(ini), "%s", tt_ini("restart", 8u << 20, "128M", NULL));

	/* 1. The first kvstashd: blocks spill, then a clean stop. */
	it_start(&d, ini);
	c = tt_worker(&d, "tier", NS, &kv, TT_SEG);
	save_all(c, &kv);
	ssd_blocks = mark_on_ssd(c);
	CHECK(ssd_blocks >= PROMPTS * TT_BATCH / 4, "only %u blocks out of DRAM on SSD",
	      ssd_blocks);
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);

	/* 2. A new kvstashd on the same file: the SSD blocks are there once recovered. */
	it_start(&d, ini);
	c = tt_worker(&d, "tier", NS, &kv, TT_SEG);
	tt_wait_recovered(&d, 1);
	for (unsigned p = 0; p < PROMPTS; p++)
		for (unsigned i = 0; i < TT_BATCH; i++)
			if (on_ssd[p][i])
				CHECK(tt_wait_counted(c, p, i),
				      "prompt %u block %u was on SSD at the stop, not counted after "
				      "the restart",
				      p, i);
	for (unsigned p = 0; p < PROMPTS; p++)
		for (unsigned i = 0; i < TT_BATCH; i++) {
			bool counted = tt_counted(c, p, i);

			advertised += counted;
			if (counted)
				CHECK(tt_check_key(c, &kv, p, i, 2 * TT_BATCH + i) == 1,
				      "prompt %u block %u advertised, yet not loaded", p, i);
			loaded += counted;
		}
	CHECK(advertised >= ssd_blocks, "%u advertised after the restart, %u were on SSD",
	      advertised, ssd_blocks);
	/* As an engine asks: the whole chain, the prefix it counts loaded at once. */
	for (unsigned p = 0; p < PROMPTS; p++) {
		int counted, res = tt_check_prompt(c, &kv, p, 2 * TT_BATCH, &counted);

		CHECK(res == counted, "prompt %u: %d counted, %d loaded", p, counted, res);
		prefix += (unsigned)res;
	}
	it_ok("clean restart: %u blocks were on SSD only, all counted after the recovery; %u "
	      "advertised, %u loaded byte-exact one by one, %u as prompt prefixes",
	      ssd_blocks, advertised, loaded, prefix);
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);

	/* 3. The same namespace name with another segment size: another identity, all misses. */
	it_start(&d, ini);
	c = tt_worker(&d, "tier", NS, &kv, TT_SEG / 2);
	tt_wait_recovered(&d, 1);
	CHECK(!kvsd_log_contains(&d, ": 0 blocks in"), "the restart recovered no block");
	for (unsigned p = 0; p < PROMPTS; p++) {
		for (unsigned i = 0; i < TT_BATCH; i++)
			CHECK(!tt_counted(c, p, i),
			      "prompt %u block %u of the old geometry is a hit", p, i);
		CHECK_RES(tt_check_prompt(c, &kv, p, 0, NULL), 0, "QUERY under a new geometry");
	}
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);

	/* 4. And the old geometry again: the blocks were kept, only hidden from the other. */
	it_start(&d, ini);
	c = tt_worker(&d, "tier", NS, &kv, TT_SEG);
	tt_wait_recovered(&d, 1);
	advertised = 0;
	for (unsigned p = 0; p < PROMPTS; p++)
		for (unsigned i = 0; i < TT_BATCH; i++)
			if (tt_counted(c, p, i))
				advertised += tt_check_key(c, &kv, p, i, 2 * TT_BATCH);
	CHECK(advertised >= ssd_blocks, "the old geometry's blocks are gone (%u of %u)", advertised,
	      ssd_blocks);
	it_ok("a namespace of another segment size under the same name: no old block is a "
	      "hit; the old geometry finds its %u again",
	      advertised);
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
	return 0;
}
