/* SPDX-License-Identifier: MIT */
/*
 * The SSD tier's faults through kvstashd: $KVSTASH_SSD_FAULTS (rules of
 * sidecar/ssd/fault.h, inherited by the kvstashd the harness forks) makes
 * the Nth write or read of the drive fail, tear, lie or vanish.  Blocks
 * are saved through a pool of a quarter of them (at the drive's pace
 * until the fault fired), kvstashd stops cleanly and a second one reads
 * everything back from SSD (the same or another rule in force):
 *   - write EIO: that block is abandoned (logged), the others load;
 *   - torn write (reported whole): the torn block fails its checksum on
 *     read: a miss, never its bytes;
 *   - a bit flipped on read: a checksum failure, a miss;
 *   - ENODEV on write, and on read: the drive goes offline (logged), its
 *     blocks are misses, DRAM keeps serving new prompts byte-exact;
 * every advertised block loads byte-exact or not at all (the LOAD shorter,
 * the engine's ids past res poisoned), no crash, no hang, a clean exit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "ssdtest.h"
#include "tiertest.h"

#define PROMPTS 32u /* 512 blocks through a pool of 128 */
#define NS	"model-faults"

/*
 * Wait until every block of prompts [0, @p] is counted, unless the fault
 * named by @needle fired: from then on blocks may be lost, and waiting
 * for them would wait for ever.
 */
static void pace(struct kvsd *d, struct kvs_client *c, unsigned p, const char *needle)
{
	for (unsigned q = 0; q <= p; q++)
		for (unsigned i = 0; i < TT_BATCH; i++)
			for (int t = 0; !tt_counted(c, q, i); t++) {
				if (kvsd_log_contains(d, needle))
					return;
				CHECK(t < 2000,
				      "prompt %u block %u never counted (no '%s' in the log)", q, i,
				      needle);
				usleep(10000);
			}
}

/* Every key of every prompt: a miss or byte-exact; the hits. */
static unsigned check_all(struct kvs_client *c, struct test_kv *kv)
{
	return tt_check_all(c, kv, PROMPTS);
}

static struct kvs_client *start(struct kvsd *d, const char *tag, const char *rules,
				struct test_kv *kv)
{
	struct kvs_client *c;

	if (rules)
		CHECK(setenv("KVSTASH_SSD_FAULTS", rules, 1) == 0, "setenv");
	else
		unsetenv("KVSTASH_SSD_FAULTS");
	c = tt_start(d, tt_ini(tag, 4u << 20, "64M", NULL), NS, kv);
	unsetenv("KVSTASH_SSD_FAULTS"); /* only that kvstashd inherited it */
	return c;
}

/* A new prompt after the fault: DRAM serves it byte-exact. */
static void dram_serves(struct kvs_client *c, struct test_kv *kv, uint64_t p)
{
	tt_save(c, kv, p, 0);
	CHECK_RES(tt_check_prompt(c, kv, p, 2 * TT_BATCH, NULL), TT_BATCH,
		  "a new prompt from DRAM after the fault");
}

/*
 * Save every prompt with @wrules in force (pacing until @wneedle shows),
 * stop, read all back from SSD with @rrules; @rneedle (or NULL) must be
 * in the second log.  Returns the hits of the read back.
 */
static unsigned scenario(const char *tag, const char *wrules, const char *wneedle,
			 const char *rrules, const char *rneedle)
{
	struct kvs_client *c;
	struct test_kv kv;
	struct kvsd d;
	unsigned hits;

	c = start(&d, tag, wrules, &kv);
	for (unsigned p = 0; p < PROMPTS; p++) {
		tt_save(c, &kv, p, (p % 2) * TT_BATCH);
		it_flush(c);
		pace(&d, c, p, wneedle ? wneedle : "\001never");
	}
	if (wneedle)
		CHECK(wait_log_count(&d, wneedle, 1, 10000) >= 1, "%s: no '%s' in the log", tag,
		      wneedle);
	/* What the first kvstashd serves, DRAM and SSD: exact or a miss. */
	check_all(c, &kv);
	dram_serves(c, &kv, 900);
	tt_stop(&d, c, &kv);

	c = start(&d, tag, rrules, &kv);
	hits = check_all(c, &kv);
	if (rneedle)
		CHECK(wait_log_count(&d, rneedle, 1, 10000) >= 1, "%s: no '%s' in the log", tag,
		      rneedle);
	dram_serves(c, &kv, 901);
	tt_stop(&d, c, &kv);
	return hits;
}

int main(void)
{
	unsigned hits;

	it_watchdog(240);

	hits = scenario("eio", "write@5=eio", "block abandoned", NULL, NULL);
	CHECK(hits > 0, "write EIO: no block came back from SSD");
	it_ok("the 5th write fails with EIO: that block abandoned, %u others back byte-exact",
	      hits);

	hits = scenario("tear", "write@5=tear", NULL, NULL, "failed its checksum");
	CHECK(hits > 0, "torn write: no block came back from SSD");
	it_ok("the 5th write torn (reported whole): its checksum fails on read, a miss; %u "
	      "others byte-exact",
	      hits);

	hits = scenario("flip", NULL, NULL, "read@3=flip", "failed its checksum");
	CHECK(hits > 0, "bit flip: no block came back from SSD");
	it_ok("a bit flipped on the 3rd read: a checksum failure, a miss; %u others byte-exact",
	      hits);

	hits = scenario("enodev-w", "write@20=enodev", "drive offline", NULL, NULL);
	it_ok("ENODEV on the 20th write: the drive offline, DRAM serving, %u blocks of the "
	      "writes before back after a restart",
	      hits);

	hits = scenario("enodev-r", NULL, NULL, "read@4=enodev", "drive offline");
	it_ok("ENODEV on the 4th read: the drive offline, its blocks misses (%u hits), DRAM "
	      "serving",
	      hits);
	return 0;
}
