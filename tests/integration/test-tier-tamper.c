/* SPDX-License-Identifier: MIT */
/*
 * Garbage in the [ssd] file between two kvstashd runs (written with
 * pwrite while no daemon runs, at places found by reading the file's own
 * format: sidecar/ssd/format.h) is only ever a miss, through kvstashd:
 *   - a payload garbled: the QUERY still counts the block (its header is
 *     intact), the read fails its checksum, and the LOAD stops there: res
 *     is the prefix before it, the ids past res stay poisoned; the block
 *     is a miss from then on;
 *   - a header entry garbled: that block is a miss, the prefix ends there,
 *     its neighbours load byte-exact;
 *   - one superblock copy garbled: the other one serves, nothing lost;
 *   - random garbage over the regions: misses or byte-exact hits only;
 *   - both superblock copies garbled: the file is formatted, all misses.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "ssd/crc32c.h"
#include "ssd/format.h"
#include "ssdtest.h"
#include "tiertest.h"

#define PROMPTS 32u
#define NS	"model-tamper"

struct where {
	bool found;
	uint64_t payload; /* file offset of the payload */
	uint64_t entry;	  /* file offset of its header entry */
	uint32_t len;
};

static struct where where[PROMPTS][TT_BATCH];

static void save_all(struct kvs_client *c, struct test_kv *kv)
{
	for (unsigned p = 0; p < PROMPTS; p++) {
		tt_save(c, kv, p, (p % 2) * TT_BATCH);
		it_flush(c);
		/* At the drive's pace: every block counted before the next prompt. */
		for (unsigned q = 0; q <= p; q++)
			for (unsigned i = 0; i < TT_BATCH; i++) {
				int t = 0;

				while (!tt_counted(c, q, i) && t++ < 1000)
					usleep(10000);
				CHECK(t <= 1000, "prompt %u block %u never counted", q, i);
			}
	}
}

static void pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	CHECK(pread(fd, buf, len, (off_t)off) == (ssize_t)len, "pread at %llu: %s",
	      (unsigned long long)off, strerror(errno));
}

/* Every valid header entry of the file, matched to our prompts' keys. */
static unsigned scan(const char *path, uint64_t *ret_sb_off)
{
	static uint8_t sb[2 * SSD_UNIT], ent[SSD_HDR_SIZE];
	struct ssd_super s;
	unsigned n = 0;
	int fd = open(path, O_RDONLY);

	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	memset(where, 0, sizeof(where));
	pread_all(fd, sb, sizeof(sb), 0);
	*ret_sb_off = (uint64_t)SSD_UNIT * (unsigned)ssd_super_pick(sb, sb + SSD_UNIT, &s);
	CHECK(*ret_sb_off <= SSD_UNIT, "no valid superblock in %s", path);
	for (uint32_t r = 0; r < s.geom.nr_regions; r++)
		for (uint32_t e = 0; e < s.geom.zone_entries; e++) {
			uint64_t off = ssd_region_off(&s.geom, r) + ssd_entry_off(&s.geom, e);
			struct ssd_block_hdr h;

			pread_all(fd, ent, sizeof(ent), off);
			if (ssd_block_hdr_decode(ent, s.file_id, &s.geom, r, e, &h) < 0)
				continue;
			for (unsigned p = 0; p < PROMPTS; p++) {
				uint8_t keys[TT_BATCH * 16];

				tt_keys(p, keys);
				for (unsigned i = 0; i < TT_BATCH; i++)
					if (!memcmp(keys + 16 * i, h.key, 16)) {
						where[p][i] = (struct where){ true, h.offset, off,
									      h.payload_len };
						n++;
					}
			}
		}
	close(fd);
	return n;
}

static void garble(const char *path, uint64_t off, size_t len)
{
	static uint8_t junk[64 << 10];
	int fd = open(path, O_WRONLY);

	CHECK(fd >= 0 && len <= sizeof(junk), "open %s: %s", path, strerror(errno));
	for (size_t i = 0; i < len; i++)
		junk[i] = (uint8_t)(rand() >> 7);
	CHECK(pwrite(fd, junk, len, (off_t)off) == (ssize_t)len, "pwrite: %s", strerror(errno));
	CHECK(fsync(fd) == 0, "fsync: %s", strerror(errno));
	close(fd);
}

/* Every key of every prompt: a miss or byte-exact; the hits. */
static unsigned check_all(struct kvs_client *c, struct test_kv *kv)
{
	return tt_check_all(c, kv, PROMPTS);
}



int main(void)
{
	const char *path = tt_path("tamper");
	unsigned on_file, hits;
	struct kvs_client *c;
	uint64_t sb_off;
	struct test_kv kv;
	struct kvsd d;
	char ini[2048];
	int counted, res;

	it_watchdog(240);
	crc32c_init(); /* the format's decoders check CRCs */
	srand(13);
	snprintf(ini, sizeof(ini), "%s", tt_ini("tamper", 8u << 20, "64M", NULL));
	it_start(&d, ini);
	c = tt_worker(&d, "tier", NS, &kv, TT_SEG);
	save_all(c, &kv);
	tt_stop(&d, c, &kv);
	on_file = scan(path, &sb_off);
	for (unsigned p = 0; p < 2; p++)
		for (unsigned i = 0; i < TT_BATCH; i++)
			CHECK(where[p][i].found, "prompt %u block %u not on the file", p, i);

	/* Payload of prompt 0's block 3, header entry of prompt 1's block 5, superblock copy. */
	garble(path, where[0][3].payload + SSD_UNIT, SSD_UNIT);
	garble(path, where[1][5].entry, SSD_HDR_SIZE);
	garble(path, sb_off, SSD_UNIT);
	c = tt_start(&d, ini, NS, &kv);
	res = tt_check_prompt(c, &kv, 0, 2 * TT_BATCH, &counted);
	CHECK_RES(counted, TT_BATCH, "QUERY of a prompt with a garbled payload (headers intact)");
	CHECK_RES(res, 3, "LOAD of a prompt whose block 3 fails its checksum");
	CHECK(!tt_counted(c, 0, 3), "a block that failed its checksum is still advertised");
	CHECK(wait_log_count(&d, "failed its checksum", 1, 10000) >= 1,
	      "no log line for the checksum failure");
	for (unsigned i = 4; i < TT_BATCH; i++)
		CHECK_RES(tt_check_key(c, &kv, 0, i, 2 * TT_BATCH), 1, "a neighbour of block 3");
	res = tt_check_prompt(c, &kv, 1, 2 * TT_BATCH, &counted);
	CHECK_RES(counted, 5, "QUERY of a prompt with a garbled header entry at block 5");
	CHECK_RES(res, 5, "LOAD of the prefix before a garbled header entry");
	for (unsigned i = 6; i < TT_BATCH; i++)
		CHECK_RES(tt_check_key(c, &kv, 1, i, 2 * TT_BATCH), 1, "a neighbour of block 5");
	hits = check_all(c, &kv);
	/* All but the two garbled ones: the other superblock copy serves the file. */
	CHECK(hits + 2 == on_file, "%u hits of the %u blocks on the file", hits, on_file);
	tt_stop(&d, c, &kv);
	it_ok("garbled payload: QUERY 16, LOAD 3 (the checksum failure), nothing written past "
	      "it; garbled header entry: prefix 5; a superblock copy garbled: %u of %u still "
	      "hits",
	      hits, on_file);

	/* Random garbage over the regions (not the superblocks): misses or exact bytes. */
	for (unsigned k = 0; k < 40; k++) {
		uint64_t off = (SSD_DATA_ALIGN + (uint64_t)rand() % (24u << 20)) / 512 * 512;

		garble(path, off, 512 * (1 + (unsigned)rand() % 64));
	}
	c = tt_start(&d, ini, NS, &kv);
	hits = check_all(c, &kv);
	tt_stop(&d, c, &kv);
	it_ok("40 random garbles over the regions: %u byte-exact hits, the rest misses", hits);

	/* Both superblock copies: nothing says what the file is; formatted, all misses. */
	garble(path, 0, 2 * SSD_UNIT);
	c = tt_start(&d, ini, NS, &kv);
	CHECK(kvsd_log_contains(&d, "formatted"), "both superblocks garbled, yet not formatted");
	CHECK_UINT(check_all(c, &kv), ==, 0);
	tt_stop(&d, c, &kv);
	it_ok("both superblock copies garbled: the file is formatted, every block a miss");
	return 0;
}
