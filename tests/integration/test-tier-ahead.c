/* SPDX-License-Identifier: MIT */
/*
 * Writes ahead of eviction ([ssd] write_ahead, store_ssd_idle()): while
 * the drives are idle, kvstashd writes the coldest resident blocks to
 * SSD, so that their eviction costs no write and the reads a QUERY
 * starts once the pool is full have the drive to themselves.  A real
 * kvstashd with [ssd] on a file of a real disk, a real engine:
 *   - 64 blocks saved into a pool of 256 (nothing evicted) are written
 *     ahead: `written_ahead` reaches 64 and every block is still a DRAM
 *     hit; after a SIGKILL, a new kvstashd on the same file counts all 64
 *     and loads them byte-exact: written ahead means durable, without
 *     any eviction;
 *   - evicting blocks written ahead writes them no more: once 512 more
 *     blocks went through the pool, the first 64 are out of DRAM, still
 *     counted, and the tier's `exists` (writes skipped: on SSD already)
 *     grew by at least 64;
 *   - write_ahead = no: nothing is written while nothing is evicted;
 *   - write_policy = filter: only blocks used in DRAM are written ahead
 *     (a QUERY hit), one-hit blocks wait for their eviction's verdict,
 *     and the refusals are not counted as the filter's.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "ssdtest.h"
#include "tiertest.h"

#define NS "model-ahead"

static int ssd_msg(void *arg, const struct kvs_msg_hdr *m)
{
	if (m->type == KVS_MSG_STATS_SSD)
		memcpy(arg, m, sizeof(struct kvs_msg_stats_ssd));
	return 0;
}

static struct kvs_msg_stats_ssd tier_stats(const struct kvsd *d)
{
	struct kvs_msg_stats_ssd s = { 0 };
	struct kvs_client *a;
	int r = test_admin(d, &a);

	CHECK(r == 0, "admin connect: %s", kvs_strerror(r));
	r = kvs_admin_request(a, KVS_MSG_STATS, ssd_msg, &s);
	CHECK(r == 0, "STATS: %s", kvs_strerror(r));
	CHECK(s.hdr.type == KVS_MSG_STATS_SSD, "no KVS_MSG_STATS_SSD in the reply");
	kvs_close(a);
	return s;
}

/* Wait (bounded) until written_ahead reaches @n; its last value. */
static uint64_t wait_ahead(const struct kvsd *d, uint64_t n, int ms)
{
	uint64_t v = 0;

	for (int t = 0; t < ms / 10; t++) {
		v = tier_stats(d).written_ahead;
		if (v >= n)
			break;
		usleep(10000);
	}
	return v;
}

/* Is key i of prompt @p in DRAM (a DRAM-only QUERY counts it)? */
static bool in_dram(struct kvs_client *c, uint64_t p, unsigned i)
{
	uint8_t keys[TT_BATCH * 16];

	tt_keys(p, keys);
	return it_query(c, keys + 16 * i, 1, KVS_QUERY_DRAM | KVS_QUERY_NOLEASE).res == 1;
}

static unsigned count_dram(struct kvs_client *c, unsigned first, unsigned n)
{
	unsigned k = 0;

	for (unsigned p = first; p < first + n; p++)
		for (unsigned i = 0; i < TT_BATCH; i++)
			k += in_dram(c, p, i);
	return k;
}

/* Prompts [first, first + n), each SAVE at the drive's pace: the earlier ones counted again. */
static void save_paced(struct kvs_client *c, struct test_kv *kv, unsigned first, unsigned n)
{
	for (unsigned p = first; p < first + n; p++) {
		tt_save(c, kv, p, (p % 2) * TT_BATCH);
		it_flush(c);
		for (unsigned i = 0; i < TT_BATCH; i++)
			CHECK(tt_wait_counted(c, p, i), "prompt %u block %u never counted", p, i);
	}
}

static void durable_without_eviction(void)
{
	const unsigned n = 4 * TT_BATCH;
	struct kvs_msg_stats_ssd s;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	unsigned hits;

	/* 256 blocks of 32 KiB: the 64 saved are all among the coldest an idle drive writes. */
	c = tt_start(&d, tt_ini("durable", 8u << 20, "64M", NULL), NS, &kv);
	save_paced(c, &kv, 0, 4);
	CHECK(wait_ahead(&d, n, 10000) >= n, "only %llu of %u blocks written ahead",
	      (unsigned long long)tier_stats(&d).written_ahead, n);
	s = tier_stats(&d);
	CHECK(s.spilled == 0 && s.spill_dropped == 0, "blocks evicted (%llu spilled, %llu dropped)",
	      (unsigned long long)s.spilled, (unsigned long long)s.spill_dropped);
	CHECK(count_dram(c, 0, 4) == n, "written ahead, yet not all in DRAM any more");
	CHECK(s.bytes_written >= (uint64_t)n * TT_LAYERS * TT_SEG,
	      "%llu bytes written for %u blocks", (unsigned long long)s.bytes_written, n);

	/* Never evicted, yet on SSD: a SIGKILL loses none of them. */
	kvs_close(c);
	test_kv_free(&kv);
	kvsd_kill(&d);
	CHECK(kvsd_restart(&d) == 0, "kvstashd did not restart");
	tt_wait_recovered(&d, 2);
	c = tt_worker(&d, "tier2", NS, &kv, TT_SEG);
	hits = tt_check_all(c, &kv, 4);
	CHECK(hits == n, "after a SIGKILL, %u of the %u blocks written ahead load back", hits, n);
	it_ok("%u resident blocks written ahead while nothing was evicted (%llu bytes), all "
	      "still DRAM hits; after a SIGKILL all %u loaded byte-exact from SSD",
	      n, (unsigned long long)s.bytes_written, hits);
	tt_stop(&d, c, &kv);
}

static void eviction_costs_no_write(void)
{
	const unsigned n = 4 * TT_BATCH;
	struct kvs_msg_stats_ssd s0, s1;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	unsigned counted = 0;

	c = tt_start(&d, tt_ini("evict", 8u << 20, "64M", NULL), NS, &kv);
	save_paced(c, &kv, 0, 4);
	CHECK(wait_ahead(&d, n, 10000) >= n, "the first %u blocks were not written ahead", n);
	s0 = tier_stats(&d);
	/* 512 more through a pool of 256: the first 64 are evicted. */
	save_paced(c, &kv, 4, 32);
	CHECK(count_dram(c, 0, 4) == 0, "the first prompts are still in DRAM");
	for (unsigned p = 0; p < 4; p++)
		for (unsigned i = 0; i < TT_BATCH; i++)
			counted += tt_counted(c, p, i);
	s1 = tier_stats(&d);
	CHECK(counted == n, "%u of the %u blocks written ahead counted after their eviction",
	      counted, n);
	CHECK(s1.exists - s0.exists >= n,
	      "evicting %u blocks written ahead skipped only %llu writes", n,
	      (unsigned long long)(s1.exists - s0.exists));
	CHECK(tt_check_all(c, &kv, 4) == n, "blocks written ahead do not load back after eviction");
	it_ok("%u blocks written ahead, then evicted by 512 more: %llu writes skipped as on SSD "
	      "already, all %u counted and loaded byte-exact",
	      n, (unsigned long long)(s1.exists - s0.exists), counted);
	tt_stop(&d, c, &kv);
}

static void disabled(void)
{
	struct kvs_msg_stats_ssd s;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;

	c = tt_start(&d, tt_ini("off", 8u << 20, "64M", "write_ahead = no\n"), NS, &kv);
	save_paced(c, &kv, 0, 4);
	usleep(500000); /* five of the drive threads' idle ticks */
	s = tier_stats(&d);
	CHECK(s.written_ahead == 0 && s.bytes_written == 0,
	      "write_ahead = no, nothing evicted, yet %llu blocks / %llu bytes written",
	      (unsigned long long)s.written_ahead, (unsigned long long)s.bytes_written);
	it_ok("write_ahead = no: nothing written while nothing is evicted");
	tt_stop(&d, c, &kv);
}

static void filtered(void)
{
	struct kvs_msg_stats_ssd s;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	uint8_t keys[TT_BATCH * 16];

	c = tt_start(&d, tt_ini("filter", 8u << 20, "64M", "write_policy = filter\n"), NS, &kv);
	/* Prompt 0 never asked for (one-hit blocks), prompt 1 used once in DRAM. */
	tt_save(c, &kv, 0, 0);
	tt_save(c, &kv, 1, TT_BATCH);
	it_flush(c);
	tt_keys(1, keys);
	CHECK_RES(it_query(c, keys, TT_BATCH, KVS_QUERY_NOLEASE).res, TT_BATCH, "QUERY");
	CHECK(wait_ahead(&d, TT_BATCH, 10000) >= TT_BATCH,
	      "blocks used in DRAM not written ahead under the filter");
	usleep(500000); /* five idle ticks more: time to write prompt 0 too, were it admitted */
	s = tier_stats(&d);
	CHECK(s.written_ahead == TT_BATCH,
	      "under the filter %llu blocks written ahead: one-hit blocks among them",
	      (unsigned long long)s.written_ahead);
	CHECK(s.not_admitted == 0, "refusals ahead of eviction counted as the filter's (%llu)",
	      (unsigned long long)s.not_admitted);
	CHECK(count_dram(c, 0, 1) == TT_BATCH, "one-hit blocks left DRAM");
	it_ok("write_policy = filter: the %u blocks used in DRAM written ahead, the %u one-hit "
	      "ones not, no refusal counted",
	      TT_BATCH, TT_BATCH);
	tt_stop(&d, c, &kv);
}

int main(void)
{
	it_watchdog(240);
	durable_without_eviction();
	eviction_costs_no_write();
	disabled();
	filtered();
	return 0;
}
