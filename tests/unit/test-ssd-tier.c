/* SPDX-License-Identifier: MIT */
/*
 * The log-structured SSD tier's logic (sidecar/ssd/tier.h) on the memory
 * drive (sidecar/ssd/dev-mem.c, through ssd_open_mem()), no disk needed:
 * blocks written read back byte-exact; past capacity the FIFO reclaims
 * the oldest region first, its blocks leave the index and the newest stay;
 * closing (or a crash: ssd_abandon()) and opening the same memory again
 * recovers the index; a payload byte changed on the "disk" fails its
 * CRC-32C and reads as -EBADMSG, a miss from then on, never as wrong
 * bytes; an I/O error from the drive reaches read_done / write_done and
 * the stats.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssd/dev.h"
#include "ssd/format.h"
#include "ssd/ssd.h"
#include "unit.h"

#define DRIVE_BYTES  (3ull << 20) /* 1 MiB of superblocks, then 32 regions */
#define REGION_BYTES (64ull << 10)
#define BLOCK	     (8u << 10)

/* What the drive thread's callbacks saw (lock: the test thread waits on cond). */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned writes, reads;
	int write_res, read_res;
} cb = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER };

static struct ssd_mem *mem;
static uint32_t ns;

static void write_done(void *arg, void *cookie, int res)
{
	pthread_mutex_lock(&cb.lock);
	cb.writes++;
	cb.write_res = res;
	pthread_cond_broadcast(&cb.cond);
	pthread_mutex_unlock(&cb.lock);
}

static void read_done(void *arg, void *cookie, int res)
{
	pthread_mutex_lock(&cb.lock);
	cb.reads++;
	cb.read_res = res;
	pthread_cond_broadcast(&cb.cond);
	pthread_mutex_unlock(&cb.lock);
}

/* Wait until *@count passes @seen: the result it came with. */
static int wait_cb(unsigned *count, const int *res, unsigned seen)
{
	struct timespec dl;
	int r;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 10;
	pthread_mutex_lock(&cb.lock);
	while (*count == seen)
		ck_assert_int_eq(pthread_cond_timedwait(&cb.cond, &cb.lock, &dl), 0);
	r = *res;
	pthread_mutex_unlock(&cb.lock);
	return r;
}

static struct ssd *tier_open(void)
{
	static const char *const paths[] = { "mem0" };
	struct ssd_config cfg = {
		.paths = paths,
		.nr_paths = 1,
		.region_size = REGION_BYTES,
		.queue_depth = 4,
		.drain_ms = 5000,
		.faults = "",
		.write_done = write_done,
		.read_done = read_done,
	};
	struct ssd_mem *const mems[] = { mem };
	uint8_t ident[SSD_NS_MAX];
	struct ssd *ssd = NULL;
	char err[256] = "";
	int len;

	ck_assert_msg(ssd_open_mem(&cfg, mems, &ssd, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(ssd_wait_recovered(ssd, 10000), 0);
	len = ssd_ns_ident("test", 1, BLOCK, 1, false, ident);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(ssd_ns(ssd, ident, (size_t)len, &ns), 0);
	return ssd;
}

static void setup(void)
{
	ck_assert_int_eq(ssd_mem_new(DRIVE_BYTES, &mem), 0);
}

static void teardown(void)
{
	ssd_mem_free(mem);
	mem = NULL;
}

static void key_of(unsigned i, uint8_t key[SSD_KEY_SIZE])
{
	memset(key, 0, SSD_KEY_SIZE);
	memcpy(key, &i, sizeof(i));
	key[SSD_KEY_SIZE - 1] = 0x5a;
}

/* @len bytes that differ for every block and offset. */
static uint8_t *payload(unsigned i, uint32_t len)
{
	uint8_t *p = aligned_alloc(4096, (len + 4095) / 4096 * 4096);

	ck_assert_ptr_nonnull(p);
	for (uint32_t k = 0; k < len; k++)
		p[k] = (uint8_t)(i * 131 + k * 7 + (k >> 9));
	return p;
}

/* Write block @i and wait for its end: write_done's result. */
static int put(struct ssd *ssd, unsigned i, uint32_t len)
{
	uint8_t key[SSD_KEY_SIZE], *buf = payload(i, len);
	struct ssd_write w = { .ns = ns, .key = key, .buf = buf, .len = len, .value = 1 };
	unsigned seen = cb.writes;
	int r;

	key_of(i, key);
	r = ssd_write(ssd, &w, NULL);
	ck_assert_int_eq(r, 0);
	r = wait_cb(&cb.writes, &cb.write_res, seen);
	free(buf);
	return r;
}

/*
 * Read block @i into @dst (@cap bytes; less than the sectors it spans
 * takes the bounce path): read_done's result, -ENOENT if not in the index.
 */
static int get_cap(struct ssd *ssd, unsigned i, uint8_t *dst, uint32_t len, size_t cap)
{
	uint8_t key[SSD_KEY_SIZE];
	struct ssd_loc loc;
	unsigned seen = cb.reads;
	int r;

	key_of(i, key);
	r = ssd_lookup(ssd, ns, key, 0, &loc);
	if (r < 0)
		return r;
	ck_assert_uint_eq(loc.len, len);
	ck_assert_int_eq(ssd_read(ssd, &loc, dst, cap, NULL), 0);
	return wait_cb(&cb.reads, &cb.read_res, seen);
}

static int get(struct ssd *ssd, unsigned i, uint8_t *dst, uint32_t len)
{
	return get_cap(ssd, i, dst, len, (len + 4095) / 4096 * 4096);
}

/* Block @i reads back as the bytes payload() wrote. */
static void check_block(struct ssd *ssd, unsigned i, uint32_t len)
{
	uint8_t *want = payload(i, len), *got = payload(i + 1, len);

	ck_assert_int_eq(get(ssd, i, got, len), 0);
	ck_assert_msg(memcmp(want, got, len) == 0, "block %u: wrong bytes", i);
	free(want);
	free(got);
}

/* Where block @i's payload lies on the drive. */
static uint64_t block_off(struct ssd *ssd, unsigned i)
{
	uint8_t key[SSD_KEY_SIZE];
	struct ssd_geom g;
	struct ssd_loc loc;

	key_of(i, key);
	ck_assert_int_eq(ssd_lookup(ssd, ns, key, 0, &loc), 0);
	ck_assert_int_eq(ssd_geom_init(DRIVE_BYTES, REGION_BYTES, &g), 0);
	return ssd_region_off(&g, loc.region) + (uint64_t)loc.off_units * SSD_UNIT;
}

static bool present(struct ssd *ssd, unsigned i)
{
	uint8_t key[SSD_KEY_SIZE];
	struct ssd_loc loc;

	key_of(i, key);
	return ssd_lookup(ssd, ns, key, 0, &loc) == 0;
}

START_TEST(test_roundtrip)
{
	static const uint32_t lens[] = { BLOCK, 5000, 12345, 1 };
	struct ssd *ssd = tier_open();
	uint8_t *buf = payload(0, 2 * BLOCK), *want;
	struct ssd_stats st;

	for (unsigned i = 0; i < 4; i++)
		ck_assert_int_eq(put(ssd, i, lens[i]), 0);
	for (unsigned i = 0; i < 4; i++)
		check_block(ssd, i, lens[i]);
	/* Exactly its length: the last partial sector comes through the bounce unit. */
	memset(buf, 0, BLOCK);
	ck_assert_int_eq(get_cap(ssd, 2, buf, lens[2], lens[2]), 0);
	want = payload(2, lens[2]);
	ck_assert(memcmp(buf, want, lens[2]) == 0);
	free(want);
	ck_assert_int_eq(get(ssd, 99, buf, BLOCK), -ENOENT); /* never written */
	ssd_get_stats(ssd, &st);
	ck_assert_uint_eq(st.drive[0].writes, 4);
	ck_assert_uint_eq(st.drive[0].reads, 5);
	ck_assert_uint_eq(st.drive[0].crc_errors, 0);
	free(buf);
	ssd_close(ssd);
}
END_TEST

/*
 * Four times the drive's capacity: regions are reused oldest first, so
 * the first blocks are gone from the index, the last ones still read
 * back, and the stats count the reclaimed regions and evicted blocks.
 */
START_TEST(test_reclaim)
{
	struct ssd *ssd = tier_open();
	unsigned n = (unsigned)(4 * DRIVE_BYTES / BLOCK);
	struct ssd_stats st;

	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(put(ssd, i, BLOCK), 0);
	ssd_get_stats(ssd, &st);
	ck_assert_uint_gt(st.drive[0].regions_reclaimed, st.drive[0].nr_regions);
	ck_assert_uint_gt(st.drive[0].blocks_evicted, n / 2);
	ck_assert_uint_lt(st.index_entries, DRIVE_BYTES / BLOCK);
	for (unsigned i = 0; i < DRIVE_BYTES / BLOCK; i++)
		ck_assert_msg(!present(ssd, i), "block %u survived %u more writes", i, n - i);
	check_block(ssd, n - 1, BLOCK);
	check_block(ssd, n - 2, BLOCK);
	ssd_close(ssd);
}
END_TEST

/* Reopen over the same memory: the index comes back from the regions' tails. */
static void reopen_recovers(bool crash)
{
	struct ssd *ssd = tier_open();
	struct ssd_stats st;

	for (unsigned i = 0; i < 20; i++)
		ck_assert_int_eq(put(ssd, i, BLOCK - 100 * i), 0);
	ck_assert_int_eq(ssd_wait_idle(ssd, 10000), 0);
	if (crash)
		ssd_abandon(ssd);
	else
		ssd_close(ssd);
	ssd = tier_open();
	ssd_get_stats(ssd, &st);
	ck_assert_int_eq(st.drive[0].last_clean, !crash);
	ck_assert_int_eq(st.drive[0].formatted, 0);
	ck_assert_uint_eq(st.drive[0].recovered_blocks, 20);
	ck_assert_uint_eq(st.index_entries, 20);
	for (unsigned i = 0; i < 20; i++)
		check_block(ssd, i, BLOCK - 100 * i);
	/* Writes go on after what was recovered, not over it. */
	ck_assert_int_eq(put(ssd, 20, BLOCK), 0);
	check_block(ssd, 0, BLOCK);
	check_block(ssd, 20, BLOCK);
	ssd_close(ssd);
}

START_TEST(test_reopen)
{
	reopen_recovers(false);
}
END_TEST

START_TEST(test_reopen_after_crash)
{
	reopen_recovers(true);
}
END_TEST

/* One payload byte flipped on the drive: -EBADMSG, then a miss; the others unharmed. */
START_TEST(test_corrupt_payload)
{
	struct ssd *ssd = tier_open();
	uint8_t *bytes = ssd_mem_bytes(mem, NULL), *dst = payload(0, BLOCK);
	struct ssd_stats st;

	ck_assert_int_eq(put(ssd, 1, BLOCK), 0);
	ck_assert_int_eq(put(ssd, 2, BLOCK), 0);
	ck_assert_int_eq(ssd_wait_idle(ssd, 10000), 0);
	bytes[block_off(ssd, 1) + BLOCK / 3] ^= 0x04;
	memset(dst, 0xee, BLOCK);
	ck_assert_int_eq(get(ssd, 1, dst, BLOCK), -EBADMSG);
	ck_assert(!present(ssd, 1));
	ck_assert_int_eq(get(ssd, 1, dst, BLOCK), -ENOENT);
	ssd_get_stats(ssd, &st);
	ck_assert_uint_eq(st.drive[0].crc_errors, 1);
	check_block(ssd, 2, BLOCK);
	free(dst);
	ssd_close(ssd);
}
END_TEST

/* The drive fails a read, then every write: both reported, the blocks are misses. */
START_TEST(test_io_error)
{
	struct ssd *ssd = tier_open();
	uint8_t *dst = payload(0, BLOCK);
	struct ssd_stats st;

	ck_assert_int_eq(put(ssd, 1, BLOCK), 0);
	ck_assert_int_eq(ssd_wait_idle(ssd, 10000), 0);
	ssd_mem_fail(mem, block_off(ssd, 1), BLOCK, -EIO);
	ck_assert_int_eq(get(ssd, 1, dst, BLOCK), -EIO);
	ck_assert(!present(ssd, 1));
	ssd_get_stats(ssd, &st);
	ck_assert_uint_eq(st.drive[0].read_errors, 1);
	ck_assert_uint_eq(ssd_mem_failed(mem), 1);

	ssd_mem_fail(mem, 0, DRIVE_BYTES, -EIO);
	ck_assert_int_eq(put(ssd, 2, BLOCK), -EIO);
	ck_assert(!present(ssd, 2));
	ssd_get_stats(ssd, &st);
	ck_assert_uint_ge(st.drive[0].write_errors, 1);
	ssd_mem_fail(mem, 0, 0, 0);
	free(dst);
	ssd_close(ssd);
}
END_TEST

/* A memory drive is one tier's at a time, as a file is one process's (flock). */
START_TEST(test_claimed_once)
{
	static const char *const paths[] = { "mem0" };
	struct ssd_config cfg = { .paths = paths, .nr_paths = 1, .region_size = REGION_BYTES };
	struct ssd_mem *const mems[] = { mem };
	struct ssd *ssd = tier_open(), *other = NULL;
	char err[256] = "";

	ck_assert_int_eq(ssd_open_mem(&cfg, mems, &other, err, sizeof(err)), -EBUSY);
	ck_assert_ptr_null(other);
	ssd_close(ssd);
}
END_TEST

UNIT_TESTS(test_roundtrip, test_reclaim, test_reopen, test_reopen_after_crash, test_corrupt_payload,
	   test_io_error, test_claimed_once);

const struct unit_suite unit_suite = {
	.name = "ssd-tier",
	.setup = setup,
	.teardown = teardown,
	.timeout_s = 60,
	.add_tests = add_tests,
};
