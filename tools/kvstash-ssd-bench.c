/* SPDX-License-Identifier: MIT */
/*
 * kvstash-ssd-bench: the SSD tier (sidecar/ssd/) against fio on the same
 * file in the same run, with the same block size and queue depth, both
 * through io_uring with O_DIRECT and registered buffers.
 *
 * The file's first half is the tier's drive, the second half fio's (fio
 * writes would otherwise destroy the tier's blocks); the two halves lie
 * on the same device.  Each test alternates kvstash and fio --rounds
 * times for --seconds each and reports the medians, so that load from
 * other processes hits both alike.
 *
 *   write      kvstash: blocks appended to the log (ssd_write: checksum,
 *              header entry, payload); fio: rw=write
 *   read       kvstash: random blocks read into registered memory and
 *              checked (ssd_read, CRC-32C); fio: rw=randread
 *   mix 70/30  kvstash: reads of random blocks and writes of new ones in a
 *              70:30 ratio of operations; fio: rw=randrw rwmixread=70
 *   recovery   the tier's half filled to the end, then the index rebuilt
 *              after a clean stop and after an unclean one (no seal, no
 *              sync): the drive thread's scan time.  Per TB (256 MiB
 *              regions): the tail reads recovery makes (one per region,
 *              trailer and header entries), timed with fio on this disk at
 *              the same depth, plus the CPU time of checking and indexing
 *              that many headers, measured here; their sum bounds it (the
 *              drive thread indexes while reads are in flight)
 *
 * kvstash keeps depth I/Os at the drive and as many again queued for it
 * (as the daemon's evictions and QUERYs do), fio keeps depth in flight;
 * latencies are from ssd_write()/ssd_read() to the callback, queueing
 * included.
 *
 *   kvstash-ssd-bench --file PATH [--size 8G] [--bs 2M] [--depth 32]
 *                     [--region 64M] [--seconds 5] [--rounds 3] [--no-fio]
 *                     [--memory auto|hugetlb|thp|4k] [--overwrite] [--keep]
 *
 * Installed (kvstash-ssd-bench(1)).  PATH is a scratch file it creates and
 * removes: an existing one is refused unless --overwrite names a regular
 * file, and anything else (a block device) always.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/conf.h"
#include "ssd/ssd.h"
#include "store/pool.h"

struct bench {
	const char *file;
	uint64_t size, bs, region;
	unsigned depth, seconds, rounds;
	uint64_t half; /* the tier's bytes: the first half of the file */
	bool fio;
	struct ssd *ssd;
	struct ssd_config cfg;
	const char *paths[1];
	uint32_t ns;
	uint8_t *arena; /* 2 * depth buffers of bs, registered */
	unsigned nbufs;
	const char *memory; /* what backs the arena: hugetlb, thp or 4k */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned inflight;
	bool *busy;
	uint64_t *lat_ns;
	size_t nlat, cap_lat;
	uint64_t *t0;
	int errors;
	uint64_t bytes;
	uint64_t next_key; /* keys 0..next_key-1 were written */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void key_of(uint64_t i, uint8_t key[16])
{
	memset(key, 0, 16);
	memcpy(key, &i, 8);
	key[15] = 0x5a;
}

static void done(struct bench *b, unsigned buf, int res)
{
	uint64_t t = now_ns();

	pthread_mutex_lock(&b->lock);
	if (res < 0) {
		b->errors++;
		if (getenv("KVSTASH_BENCH_DEBUG"))
			fprintf(stderr, "I/O failed: %s\n", strerror(-res));
	} else
		b->bytes += b->bs;
	if (b->nlat < b->cap_lat)
		b->lat_ns[b->nlat++] = t - b->t0[buf];
	b->busy[buf] = false;
	b->inflight--;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

static void on_write(void *arg, void *cookie, int res)
{
	done(arg, (unsigned)(uintptr_t)cookie, res);
}

static void on_read(void *arg, void *cookie, int res)
{
	done(arg, (unsigned)(uintptr_t)cookie, res);
}

static void on_log(void *arg, int level, int err, const char *msg)
{
	if (level <= 4 || getenv("KVSTASH_BENCH_DEBUG"))
		fprintf(stderr, "ssd: %s%s%s\n", msg, err ? ": " : "", err ? strerror(err) : "");
}

static int open_tier(struct bench *b)
{
	char err[512];
	static struct ssd_buf buf;
	uint8_t ident[SSD_NS_MAX];
	int n, r;

	buf.base = b->arena;
	buf.len = (uint64_t)b->nbufs * b->bs;
	memset(&b->cfg, 0, sizeof(b->cfg));
	b->paths[0] = b->file;
	b->cfg.paths = b->paths;
	b->cfg.nr_paths = 1;
	b->cfg.size = b->half;
	b->cfg.region_size = b->region;
	b->cfg.queue_depth = b->depth;
	b->cfg.write_queue = b->depth;
	b->cfg.bufs = &buf;
	b->cfg.nr_bufs = 1;
	b->cfg.faults = "";
	b->cfg.cb_arg = b;
	b->cfg.write_done = on_write;
	b->cfg.read_done = on_read;
	b->cfg.log = on_log;
	b->cfg.expect_block_bytes = b->bs;
	r = ssd_open(&b->cfg, &b->ssd, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "kvstash-ssd-bench: %s\n", err);
		return r;
	}
	n = ssd_ns_ident("bench", 1, b->bs, 1, false, ident);
	return ssd_ns(b->ssd, ident, (size_t)n, &b->ns);
}

/* A free buffer, waiting for one while @max are in flight. */
static unsigned take_buf(struct bench *b, unsigned max)
{
	unsigned i;

	pthread_mutex_lock(&b->lock);
	while (b->inflight >= max)
		pthread_cond_wait(&b->cond, &b->lock);
	for (i = 0; b->busy[i]; i++)
		;
	b->busy[i] = true;
	b->inflight++;
	b->t0[i] = now_ns();
	pthread_mutex_unlock(&b->lock);
	return i;
}

static void give_back(struct bench *b, unsigned i)
{
	pthread_mutex_lock(&b->lock);
	b->busy[i] = false;
	b->inflight--;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

static void drain(struct bench *b)
{
	pthread_mutex_lock(&b->lock);
	while (b->inflight)
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
}

static void reset(struct bench *b)
{
	drain(b);
	b->nlat = 0;
	b->bytes = 0;
	b->errors = 0;
}

static int submit_write(struct bench *b)
{
	unsigned i = take_buf(b, b->depth * 2);
	uint8_t key[16];
	struct ssd_write w = { .ns = b->ns,
			       .key = key,
			       .buf = b->arena + (uint64_t)i * b->bs,
			       .len = (uint32_t)b->bs,
			       .value = 1,
			       .hits = 1,
			       .cookie = (void *)(uintptr_t)i };
	int r;

	key_of(b->next_key, key);
	/* Payload: the key repeated, so the bytes differ per block. */
	memcpy(b->arena + (uint64_t)i * b->bs, &b->next_key, 8);
	for (;;) {
		r = ssd_write(b->ssd, &w, NULL);
		if (r != -ENOBUFS)
			break;
		/* The queue is full: wait for a completion (a real evictor would drop it). */
		pthread_mutex_lock(&b->lock);
		if (b->inflight > 1)
			pthread_cond_wait(&b->cond, &b->lock);
		pthread_mutex_unlock(&b->lock);
	}
	if (r < 0) {
		give_back(b, i);
		return r;
	}
	b->next_key++;
	return 0;
}

static int submit_read(struct bench *b, uint64_t *seed)
{
	struct ssd_loc loc;
	uint8_t key[16];
	unsigned i;
	int r;

	uint64_t live = b->half / (b->bs + 4096) * 7 / 10; /* surely not reclaimed yet */

	if (live > b->next_key)
		live = b->next_key;
	*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
	key_of(b->next_key - 1 - (*seed >> 17) % live, key);
	if (ssd_lookup(b->ssd, b->ns, key, 0, &loc) < 0)
		return -ENOENT;
	/*
	 * Up to depth more reads wait in the drive's queue, as a QUERY's
	 * reads do: the drive never idles waiting for this thread.
	 */
	i = take_buf(b, b->depth * 2);
	r = ssd_read(b->ssd, &loc, b->arena + (uint64_t)i * b->bs, b->bs, (void *)(uintptr_t)i);
	if (r < 0)
		give_back(b, i);
	return r;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct result {
	double mbps;
	double p50_ms, p99_ms;
};

static struct result finish(struct bench *b, uint64_t t0)
{
	struct result res;
	double secs;

	drain(b);
	secs = (double)(now_ns() - t0) / 1e9;
	res.mbps = (double)b->bytes / secs / 1e6;
	qsort(b->lat_ns, b->nlat, sizeof(uint64_t), cmp_u64);
	res.p50_ms = b->nlat ? (double)b->lat_ns[b->nlat / 2] / 1e6 : 0;
	res.p99_ms = b->nlat ? (double)b->lat_ns[b->nlat * 99 / 100] / 1e6 : 0;
	return res;
}

static struct result run_write(struct bench *b)
{
	uint64_t t0 = now_ns(), end = t0 + (uint64_t)b->seconds * 1000000000ull;

	reset(b);
	while (now_ns() < end)
		if (submit_write(b) < 0)
			break;
	return finish(b, t0);
}

static struct result run_read(struct bench *b)
{
	uint64_t t0 = now_ns(), end = t0 + (uint64_t)b->seconds * 1000000000ull, seed = 42;

	reset(b);
	while (now_ns() < end)
		submit_read(b, &seed);
	return finish(b, t0);
}

static struct result run_mix(struct bench *b)
{
	uint64_t t0 = now_ns(), end = t0 + (uint64_t)b->seconds * 1000000000ull, seed = 7;
	unsigned n = 0;

	reset(b);
	while (now_ns() < end) {
		if (n++ % 10 < 3)
			submit_write(b);
		else
			submit_read(b, &seed);
	}
	return finish(b, t0);
}

/*
 * The buffers, as kvstashd's pool has them (sidecar/store/pool.c):
 * hugetlb pages, else transparent hugepages advised before the first
 * touch.  What backs them matters on disks that take each physically
 * contiguous piece as one descriptor: a virtio-blk queue without
 * indirect descriptors (the build VM's and, by the same in-flight
 * pattern, the GPU device's) holds 256, so a 2 MiB read into scattered
 * 4 KiB pages fills it alone.  "4k" asks for small pages, to show it.
 */
/* @len for the tier; "auto" takes hugetlb only if @fio_len more are left for fio. */
static uint8_t *arena_alloc(size_t len, size_t fio_len, const char *want, const char **ret_kind)
{
	const size_t huge = 2u << 20;
	bool any = !strcmp(want, "auto");
	uint8_t *p;

	if (any || !strcmp(want, "hugetlb")) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
		if (p != MAP_FAILED && any &&
		    pool_free_hugepages(-1) < (fio_len + huge - 1) / huge) {
			munmap(p, len); /* fio's would fail: neither gets them */
			p = MAP_FAILED;
			errno = ENOMEM;
		}
		if (p != MAP_FAILED) {
			*ret_kind = "hugetlb";
			return p;
		}
		if (!any) {
			fprintf(stderr,
				"kvstash-ssd-bench: %zu MiB of hugetlb pages: %s (raise "
				"vm.nr_hugepages)\n",
				len >> 20, strerror(errno));
			return NULL;
		}
	}
	if (!any && strcmp(want, "thp") && strcmp(want, "4k")) {
		fprintf(stderr, "kvstash-ssd-bench: --memory auto|hugetlb|thp|4k\n");
		return NULL;
	}
	/* 2 MiB aligned, so that every 2 MiB of it can be one huge page. */
	p = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	p = (uint8_t *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
	*ret_kind = strcmp(want, "4k") ? "thp" : "4k";
	if (madvise(p, len, strcmp(want, "4k") ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) < 0)
		*ret_kind = "4k";
	memset(p, 0xa5, len);
	return p;
}

/*
 * The mean physically contiguous run of [p, p + len) in KiB, from
 * /proc/self/pagemap (frame numbers need CAP_SYS_ADMIN); 0 if unknown.
 */
static double contiguous_kib(const uint8_t *p, size_t len)
{
	uint64_t pages = len / 4096, runs = 0, prev = 0, e;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	for (uint64_t i = 0; i < pages; i++) {
		uint64_t pfn;

		if (pread(fd, &e, sizeof(e), (off_t)(((uintptr_t)p / 4096 + i) * sizeof(e))) !=
			    sizeof(e) ||
		    !(e >> 63) || !(pfn = e & ((1ull << 55) - 1))) {
			close(fd);
			return 0;
		}
		if (i == 0 || pfn != prev + 1)
			runs++;
		prev = pfn;
	}
	close(fd);
	return runs ? (double)pages * 4 / (double)runs : 0;
}

/* fio on the same file: terse v3, read bandwidth field 7, write field 48 (KiB/s). */
static double run_fio(struct bench *b, const char *rw, unsigned seconds, uint64_t sync_every)
{
	char cmd[2048], line[65536];
	double kib = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "fio --name=kvstash --filename='%s' --offset=%" PRIu64 " --size=%" PRIu64
		 " --ioengine=io_uring --direct=1 --bs=%" PRIu64
		 " --iodepth=%u --rw=%s --rwmixread=70 %s%u"
		 " --registerfiles=1 --fixedbufs=1 --randrepeat=0%s --fdatasync=%" PRIu64
		 " --output-format=terse --terse-version=3 2>/dev/null",
		 b->file, b->half, b->half / b->bs * b->bs, b->bs, b->depth, rw,
		 seconds ? "--time_based --runtime=" : "--runtime=", seconds ? seconds : 600,
		 !strcmp(b->memory, "hugetlb") ? " --iomem=shmhuge" : "", sync_every);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		char *f = line, *save = NULL, *tok;
		unsigned field = 0;

		for (tok = strtok_r(f, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
			field++;
			if (field == 7 || field == 48)
				kib += atof(tok);
		}
	}
	if (pclose(p) != 0)
		return -1;
	return kib * 1024 / 1e6;
}

/* fio: seconds to make @n random reads of @bs bytes at this depth (terse field 9: ms). */
static double fio_reads_time(struct bench *b, uint64_t bs, uint64_t n)
{
	char cmd[2048], line[65536];
	double ms = -1;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "fio --name=kvstash --filename='%s' --offset=0 --size=%" PRIu64
		 " --ioengine=io_uring --direct=1 --bs=%" PRIu64 " --iodepth=%u --rw=randread"
		 " --number_ios=%" PRIu64 " --randrepeat=0 --output-format=terse --terse-version=3"
		 " 2>/dev/null",
		 b->file, b->half / bs * bs, bs, b->depth, n);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		char *save = NULL, *tok;
		unsigned field = 0;

		for (tok = strtok_r(line, ";", &save); tok; tok = strtok_r(NULL, ";", &save))
			if (++field == 9)
				ms = atof(tok);
	}
	pclose(p);
	return ms / 1000;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median_d(const double *v, unsigned n)
{
	double t[16] = { 0 };

	memcpy(t, v, n * sizeof(double));
	qsort(t, n, sizeof(double), cmp_d);
	return t[n / 2];
}

/* The round of median throughput, with its latencies. */
static struct result median(const struct result *v, unsigned n)
{
	double t[16] = { 0 };
	double mid;

	for (unsigned i = 0; i < n; i++)
		t[i] = v[i].mbps;
	mid = median_d(t, n);
	for (unsigned i = 0; i < n; i++)
		if (v[i].mbps == mid)
			return v[i];
	return v[0];
}

/*
 * The CPU side of rebuilding the index of 1 TB of @bs blocks: per block,
 * decode and check a 512-byte header, intern its namespace, insert it.
 * (Encoding each header first is counted too: an upper bound.)
 */
static double index_cpu_per_tb(uint64_t bs)
{
	uint64_t n = (uint64_t)(1e12 / (double)bs);
	struct ssd_index idx;
	struct ssd_region reg;
	struct ssd_geom g;
	uint8_t buf[SSD_HDR_SIZE], fid[16] = { 1 };
	uint64_t t0;
	int nslen;

	if (ssd_geom_init(1ull << 40, 256u << 20, &g) < 0 ||
	    ssd_index_init(&idx, n, n + SSD_CHUNK_ENTRIES) < 0)
		return -1;
	memset(&reg, 0, sizeof(reg));
	reg.entries = SSD_NO_ENTRY;
	t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		struct ssd_block_hdr h = { .region = (uint32_t)(i / 126),
					   .region_seq = 1,
					   .block_seq = (uint32_t)(i % 126),
					   .payload_len = (uint32_t)bs,
					   .payload_crc = 7 };
		struct ssd_loc loc = { 0 };
		uint32_t ns;

		memcpy(h.file_id, fid, 16);
		h.offset = ssd_region_off(&g, h.region) + (i % 126) * bs;
		key_of(i, h.key);
		nslen = ssd_ns_ident("bench-model/bf16/tp1", 42, bs, 1, false, h.ns);
		h.ns_len = (uint16_t)nslen;
		ssd_block_hdr_encode(&h, buf);
		if (ssd_block_hdr_decode(buf, fid, &g, h.region, h.block_seq, &h) < 0 ||
		    ssd_index_ns(&idx, h.ns, h.ns_len, &ns) < 0)
			return -1;
		loc.region = h.region;
		loc.region_seq = h.region_seq;
		loc.len = h.payload_len;
		ssd_index_recover(&idx, ns, h.key, 0, &reg, &loc);
	}
	t0 = now_ns() - t0;
	fprintf(stderr, "index of %" PRIu64 " blocks: %" PRIu64 " MiB of DRAM\n", n,
		ssd_index_bytes(&idx) >> 20);
	ssd_index_fini(&idx);
	return (double)t0 / 1e9;
}

/* Write until the log wrapped (a region reclaimed): the tier's half written once more; MB/s. */
static double fill_log(struct bench *b)
{
	uint64_t cap = b->half / b->bs, t0 = now_ns(), reclaimed;
	struct ssd_stats st;
	double secs;

	ssd_get_stats(b->ssd, &st);
	reclaimed = st.drive[0].regions_reclaimed;
	reset(b);
	for (uint64_t n = 0; n < 2 * cap; n++) {
		if (submit_write(b) < 0)
			break;
		ssd_get_stats(b->ssd, &st);
		if (st.drive[0].regions_reclaimed > reclaimed)
			break;
	}
	drain(b);
	ssd_wait_idle(b->ssd, 600000);
	secs = (double)(now_ns() - t0) / 1e9;
	return (double)b->bytes / secs / 1e6;
}

/* The scratch file, removed at exit unless --keep. */
static const char *scratch;

static void remove_scratch(void)
{
	if (scratch)
		unlink(scratch);
}

static void usage(void)
{
	fprintf(stderr, "usage: kvstash-ssd-bench --file PATH [--size 8G] [--bs 2M] [--depth 32] "
			"[--region 64M] [--seconds 5] [--rounds 3] [--no-fio] "
			"[--memory auto|hugetlb|thp|4k] [--overwrite] [--keep]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "file", required_argument, NULL, 'f' },
		{ "size", required_argument, NULL, 's' },
		{ "bs", required_argument, NULL, 'b' },
		{ "depth", required_argument, NULL, 'd' },
		{ "region", required_argument, NULL, 'r' },
		{ "seconds", required_argument, NULL, 't' },
		{ "rounds", required_argument, NULL, 'R' },
		{ "no-fio", no_argument, NULL, 'n' },
		{ "memory", required_argument, NULL, 'm' },
		{ "overwrite", no_argument, NULL, 'o' },
		{ "keep", no_argument, NULL, 'k' },
		{ NULL, 0, NULL, 0 },
	};
	struct bench b = { .size = 8ull << 30,
			   .rounds = 3,
			   .bs = 2u << 20,
			   .region = 64u << 20,
			   .depth = 32,
			   .seconds = 5,
			   .fio = true };
	struct result w, r, m, wr[16], rr[16], mr[16];
	double fwr[16], frr[16], fmr[16];
	struct ssd_stats st;
	double rec_clean, rec_crash, rec_clean_wall, rec_crash_wall, fw = 0, fr = 0, fm = 0;
	double fill_fio = 0, fill_tier, fsync_w = 0;
	uint64_t sync_every = 0;
	double blocks, regions;
	uint64_t rec_bytes, t0;
	int c;
	const char *memory = "auto";
	bool overwrite = false, keep = false;
	struct stat sb;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			b.file = optarg;
			break;
		case 's':
			if (parse_size(optarg, &b.size) < 0)
				usage();
			break;
		case 'b':
			if (parse_size(optarg, &b.bs) < 0)
				usage();
			break;
		case 'r':
			if (parse_size(optarg, &b.region) < 0)
				usage();
			break;
		case 'd':
			b.depth = (unsigned)atoi(optarg);
			break;
		case 't':
			b.seconds = (unsigned)atoi(optarg);
			break;
		case 'n':
			b.fio = false;
			break;
		case 'm':
			memory = optarg;
			break;
		case 'o':
			overwrite = true;
			break;
		case 'k':
			keep = true;
			break;
		case 'R':
			b.rounds = (unsigned)atoi(optarg);
			break;
		default:
			usage();
		}
	}
	if (!b.file || !b.depth || !b.seconds || b.bs < 4096 || b.bs % 4096 || !b.rounds ||
	    b.rounds > 16)
		usage();
	/* Both halves are written over: only a scratch file, never a device or data. */
	if (lstat(b.file, &sb) == 0 && (!S_ISREG(sb.st_mode) || !overwrite)) {
		fprintf(stderr,
			"kvstash-ssd-bench: %s exists; it writes over the whole file: %s\n", b.file,
			S_ISREG(sb.st_mode) ? "--overwrite to use it anyway"
					    : "give the path of a new file on the drive's filesystem");
		return 1;
	}
	b.nbufs = b.depth * 2;
	b.arena = arena_alloc((size_t)b.nbufs * b.bs, (size_t)b.depth * b.bs, memory, &b.memory);
	if (!b.arena)
		return 1;
	b.busy = calloc(b.nbufs, sizeof(bool));
	b.t0 = calloc(b.nbufs, sizeof(uint64_t));
	b.cap_lat = 1u << 20;
	b.lat_ns = calloc(b.cap_lat, sizeof(uint64_t));
	pthread_mutex_init(&b.lock, NULL);
	pthread_cond_init(&b.cond, NULL);
	b.half = b.size / 2 / (2u << 20) * (2u << 20);
	unlink(b.file); /* a fresh format */
	if (!keep) {
		scratch = b.file;
		atexit(remove_scratch);
	}
	{
		/* The whole file, so fio never lays it out (over the tier's half). */
		int fd = open(b.file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

		if (fd < 0 || fallocate(fd, 0, 0, (off_t)(2 * b.half)) < 0) {
			fprintf(stderr, "kvstash-ssd-bench: %s: %s\n", b.file, strerror(errno));
			return 1;
		}
		close(fd);
	}
	if (open_tier(&b) < 0)
		return 1;
	ssd_wait_recovered(b.ssd, 600000);
	/*
	 * Both halves written once before anything is timed, so that both
	 * are in the state of a drive in service: fio's so that its reads
	 * read data, not holes; the tier's so that its writes overwrite.
	 * Into fallocated space ext4 must convert unwritten extents, and
	 * O_DIRECT writes there went one at a time to the disk (fio alike:
	 * 440 MB/s into a fresh fallocated file on the build VM, with about
	 * one request in flight, against 1.3-1.6 GB/s over written blocks).
	 * The first fill's rates are printed, not compared.
	 */
	if (b.fio && (fill_fio = run_fio(&b, "write", 0, 0)) < 0) {
		fprintf(stderr,
			"kvstash-ssd-bench: fio failed (apt-get install fio, or --no-fio)\n");
		return 1;
	}
	fill_tier = fill_log(&b);
	for (unsigned k = 0; k < b.rounds; k++) {
		wr[k] = run_write(&b);
		ssd_wait_idle(b.ssd, 600000);
		fwr[k] = b.fio ? run_fio(&b, "write", b.seconds, 0) : 0;
	}
	/*
	 * The tier's datasyncs (one per batch of regions erased ahead) against
	 * fio writing with one as often: what the flushes cost on this disk,
	 * where a host's cache may make fio's plain writes look faster than
	 * the disk is.  Not compared.
	 */
	ssd_get_stats(b.ssd, &st);
	if (st.drive[0].erase_syncs) {
		sync_every = st.drive[0].bytes_written / st.drive[0].erase_syncs / b.bs;
		fsync_w = b.fio && sync_every ? run_fio(&b, "write", b.seconds, sync_every) : 0;
	}
	for (unsigned k = 0; k < b.rounds; k++) {
		rr[k] = run_read(&b);
		frr[k] = b.fio ? run_fio(&b, "randread", b.seconds, 0) : 0;
	}
	for (unsigned k = 0; k < b.rounds; k++) {
		mr[k] = run_mix(&b);
		ssd_wait_idle(b.ssd, 600000);
		fmr[k] = b.fio ? run_fio(&b, "randrw", b.seconds, 0) : 0;
	}
	w = median(wr, b.rounds);
	r = median(rr, b.rounds);
	m = median(mr, b.rounds);
	fw = median_d(fwr, b.rounds);
	fr = median_d(frr, b.rounds);
	fm = median_d(fmr, b.rounds);
	ssd_get_stats(b.ssd, &st);
	if (st.drive[0].crc_errors || b.errors)
		fprintf(stderr, "kvstash-ssd-bench: %" PRIu64 " checksum errors, %d I/O errors\n",
			st.drive[0].crc_errors, b.errors);

	/* Fill the log to its end (the FIFO wraps once), then recover it twice. */
	fill_log(&b);
	ssd_close(b.ssd);
	t0 = now_ns();
	if (open_tier(&b) < 0)
		return 1;
	ssd_wait_recovered(b.ssd, 600000);
	rec_clean_wall = (double)(now_ns() - t0) / 1e9;
	ssd_get_stats(b.ssd, &st);
	rec_clean = (double)st.drive[0].recovery_ns / 1e9;
	blocks = (double)st.drive[0].recovered_blocks;
	regions = (double)st.drive[0].recovered_regions;
	rec_bytes = st.drive[0].recovery_bytes_read;
	ssd_abandon(b.ssd);
	t0 = now_ns();
	if (open_tier(&b) < 0)
		return 1;
	ssd_wait_recovered(b.ssd, 600000);
	rec_crash_wall = (double)(now_ns() - t0) / 1e9;
	ssd_get_stats(b.ssd, &st);
	rec_crash = (double)st.drive[0].recovery_ns / 1e9;
	ssd_close(b.ssd);

	printf("kvstash-ssd-bench: %s (%" PRIu64
	       " MiB each for kvstash and fio), blocks of %" PRIu64
	       " KiB, depth %u, regions of %" PRIu64 " MiB, medians of %u rounds of %u s\n",
	       b.file, b.half >> 20, b.bs >> 10, b.depth, b.region >> 20, b.rounds, b.seconds);
	printf("buffers: kvstash %s (physically contiguous runs of %.0f KiB on average; 0: not "
	       "readable), fio %s\n",
	       b.memory, contiguous_kib(b.arena, (size_t)b.nbufs * b.bs),
	       !strcmp(b.memory, "hugetlb") ? "hugetlb (--iomem=shmhuge)" : "malloc (its default)");
	printf("first fill of the fallocated file (not compared): kvstash %.0f MB/s, fio %.0f MB/s\n",
	       fill_tier, fill_fio);
	printf("%-10s %12s %10s %8s %10s %10s\n", "test", "kvstash MB/s", "fio MB/s", "ratio",
	       "p50 ms", "p99 ms");
	printf("%-10s %12.0f %10.0f %8.2f %10.2f %10.2f\n", "write", w.mbps, fw,
	       fw > 0 ? w.mbps / fw : 0, w.p50_ms, w.p99_ms);
	printf("%-10s %12.0f %10.0f %8.2f %10.2f %10.2f\n", "read", r.mbps, fr,
	       fr > 0 ? r.mbps / fr : 0, r.p50_ms, r.p99_ms);
	printf("%-10s %12.0f %10.0f %8.2f %10.2f %10.2f\n", "mix 70/30", m.mbps, fm,
	       fm > 0 ? m.mbps / fm : 0, m.p50_ms, m.p99_ms);
	if (sync_every && b.fio)
		printf("datasyncs: the tier made one per %" PRIu64 " MiB written (erasing regions "
		       "ahead); fio writing with one as often (--fdatasync=%" PRIu64 "): %.0f MB/s\n",
		       sync_every * b.bs >> 20, sync_every, fsync_w);
	else if (sync_every)
		printf("datasyncs: the tier made one per %" PRIu64 " MiB written (erasing regions "
		       "ahead)\n",
		       sync_every * b.bs >> 20);
	printf("recovery: %.0f blocks in %.0f regions, %" PRIu64 " KiB read (trailers and header "
	       "entries); scan %.3f s after a clean stop, %.3f s after an unclean one (ssd_open to "
	       "recovered: %.3f s, %.3f s)\n",
	       blocks, regions, rec_bytes >> 10, rec_clean, rec_crash, rec_clean_wall,
	       rec_crash_wall);
	{
		double cpu = index_cpu_per_tb(b.bs), io = -1;
		uint64_t tails = (uint64_t)(1e12 / (256.0 * 1048576) + 1);
		uint64_t tail = (4096 + ((256ull << 20) / b.bs) * 512 + 4095) / 4096 * 4096;

		if (b.fio)
			io = fio_reads_time(&b, tail, tails);
		printf("recovery per TB of %" PRIu64 " KiB blocks in 256 MiB regions: %" PRIu64
		       " tail reads of %" PRIu64
		       " KiB (fio on this disk, same depth: %.2f s) + index "
		       "rebuild on the CPU %.2f s = %.2f s at most; 10 TB: %.1f s\n",
		       b.bs >> 10, tails, tail >> 10, io, cpu, (io > 0 ? io : 0) + cpu,
		       ((io > 0 ? io : 0) + cpu) * 10);
	}
	return 0;
}
