/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "ssdtest.h"

static char dir[PATH_MAX];

static void rm_dir(void)
{
	char cmd[PATH_MAX + 32];
	const char *keep = getenv("KVSTASH_TEST_KEEP");

	if (!dir[0] || (keep && strcmp(keep, "1") == 0))
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

static bool direct_works(const char *d)
{
	char p[PATH_MAX + 32];
	void *buf;
	bool ok = false;
	int fd;

	snprintf(p, sizeof(p), "%s/.odirect-probe", d);
	fd = open(p, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	if (posix_memalign(&buf, 4096, 4096) == 0) {
		memset(buf, 0, 4096);
		ok = pwrite(fd, buf, 4096, 0) == 4096;
		free(buf);
	}
	close(fd);
	unlink(p);
	return ok;
}

const char *st_dir(void)
{
	const char *cands[3] = { getenv("KVSTASH_SSD_TEST_DIR"), getenv("top_builddir"),
				 "/var/tmp" };

	if (dir[0])
		return dir;
	for (unsigned i = 0; i < 3; i++) {
		char tmpl[PATH_MAX - 32];

		if (!cands[i] || !cands[i][0])
			continue;
		snprintf(tmpl, sizeof(tmpl), "%s/kvstash-ssd.XXXXXX", cands[i]);
		if (!mkdtemp(tmpl))
			continue;
		if (direct_works(tmpl)) {
			snprintf(dir, sizeof(dir), "%s", tmpl);
			atexit(rm_dir);
			return dir;
		}
		rmdir(tmpl);
		fprintf(stderr, "%s: no O_DIRECT there (tmpfs?), trying elsewhere\n", cands[i]);
	}
	fprintf(stderr, "no directory with O_DIRECT found: skipped\n");
	exit(77);
}

/* write_done and read_done alike: op's result under the lock, for wait_slot(). */
static void record(struct st *t, int *res, unsigned *done, void *cookie, int r)
{
	unsigned op = (unsigned)(uintptr_t)cookie;

	pthread_mutex_lock(&t->lock);
	if (op < ST_MAX_OPS)
		res[op] = r;
	(*done)++;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

static void on_write(void *arg, void *cookie, int res)
{
	struct st *t = arg;

	record(t, t->wres, &t->wdone, cookie, res);
}

static void on_read(void *arg, void *cookie, int res)
{
	struct st *t = arg;

	record(t, t->rres, &t->rdone, cookie, res);
}

static void on_log(void *arg, int level, int err, const char *msg)
{
	struct st *t = arg;

	__atomic_add_fetch(&t->log_lines, 1, __ATOMIC_RELAXED);
	if (getenv("KVSTASH_TEST_DEBUG") || (level <= LOG_ERR && !t->quiet))
		fprintf(stderr, "ssd: %s%s%s\n", msg, err ? ": " : "", err ? strerror(err) : "");
}

void st_reset_ops(struct st *t)
{
	pthread_mutex_lock(&t->lock);
	for (unsigned i = 0; i < ST_MAX_OPS; i++)
		t->wres[i] = t->rres[i] = INT32_MIN;
	pthread_mutex_unlock(&t->lock);
}

void st_config(struct st *t, unsigned nr, uint64_t size, uint64_t region)
{
	const char *d = st_dir();

	memset(&t->cfg, 0, sizeof(t->cfg));
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cond, NULL);
	for (unsigned i = 0; i < nr; i++) {
		snprintf(t->pathbuf[i], sizeof(t->pathbuf[i]), "%s/drive%u", d, i);
		t->paths[i] = t->pathbuf[i];
	}
	t->cfg.paths = t->paths;
	t->cfg.nr_paths = nr;
	t->cfg.size = size;
	t->cfg.region_size = region;
	t->cfg.queue_depth = 8;
	t->cfg.cb_arg = t;
	t->cfg.write_done = on_write;
	t->cfg.read_done = on_read;
	t->cfg.log = on_log;
	t->cfg.faults = "";
	st_reset_ops(t);
}

int st_open(struct st *t)
{
	char err[512] = "";
	int r = ssd_open(&t->cfg, &t->ssd, err, sizeof(err));

	if (r < 0 && !t->quiet)
		fprintf(stderr, "ssd_open: %s (%d)\n", err, r);
	return r;
}

void st_start(struct st *t)
{
	ck_assert_int_eq(st_open(t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t->ssd, ST_TIMEOUT_MS), 0);
}

void st_close(struct st *t)
{
	ssd_close(t->ssd);
	t->ssd = NULL;
}

void st_abandon(struct st *t)
{
	ssd_abandon(t->ssd);
	t->ssd = NULL;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

void st_key(uint64_t i, uint8_t key[16])
{
	uint64_t a = mix(i + 1), b = mix(i ^ 0x5555555555555555ull);

	memcpy(key, &a, 8);
	memcpy(key + 8, &b, 8);
}

uint32_t st_len(uint64_t i, uint32_t min, uint32_t max)
{
	return min + (uint32_t)(mix(i * 7 + 3) % (max - min + 1));
}

void st_fill(uint64_t i, uint8_t *buf, uint32_t len)
{
	uint64_t s = mix(i + 0x1234);

	for (uint32_t off = 0; off < len; off += 8) {
		uint64_t v = mix(s + off);

		memcpy(buf + off, &v, len - off < 8 ? len - off : 8);
	}
}

int st_check(uint64_t i, const uint8_t *buf, uint32_t len)
{
	uint8_t *want = malloc(len);
	int r;

	st_fill(i, want, len);
	r = memcmp(want, buf, len) ? -1 : 0;
	free(want);
	return r;
}

void *st_alloc(size_t len)
{
	void *p;

	ck_assert_int_eq(posix_memalign(&p, 512, len ? len : 512), 0);
	memset(p, 0, len);
	return p;
}

uint32_t st_ns(struct st *t, const char *name, uint64_t slot_bytes)
{
	uint8_t ident[SSD_NS_MAX];
	uint32_t ns;
	int n = ssd_ns_ident(name, 0x1234abcdull, slot_bytes, 1, false, ident);

	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(ssd_ns(t->ssd, ident, (size_t)n, &ns), 0);
	return ns;
}

int st_write(struct st *t, uint32_t ns, uint64_t i, unsigned op, const void *buf, uint32_t len,
	     uint32_t value, uint32_t hits, void **ret_displaced)
{
	uint8_t key[16];
	struct ssd_write w = { .ns = ns,
			       .key = key,
			       .shard = 0,
			       .buf = buf,
			       .len = len,
			       .value = value,
			       .hits = hits,
			       .cookie = (void *)(uintptr_t)op };

	st_key(i, key);
	return ssd_write(t->ssd, &w, ret_displaced);
}

static int wait_slot(struct st *t, int *slot)
{
	struct timespec dl;
	int r;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ST_TIMEOUT_MS / 1000;
	pthread_mutex_lock(&t->lock);
	while (*slot == INT32_MIN)
		if (pthread_cond_timedwait(&t->cond, &t->lock, &dl) == ETIMEDOUT)
			break;
	r = *slot;
	pthread_mutex_unlock(&t->lock);
	return r;
}

/* Forget an earlier op's result in @slot before queueing, so wait_slot() waits for this one. */
static void arm_slot(struct st *t, int *slot)
{
	pthread_mutex_lock(&t->lock);
	*slot = INT32_MIN;
	pthread_mutex_unlock(&t->lock);
}

int st_wait_write(struct st *t, unsigned op)
{
	return wait_slot(t, &t->wres[op]);
}

int st_wait_read(struct st *t, unsigned op)
{
	return wait_slot(t, &t->rres[op]);
}

int st_put(struct st *t, uint32_t ns, uint64_t i, uint32_t len)
{
	static unsigned op = 1;
	uint8_t *buf = st_alloc(len);
	unsigned mine = op++ % ST_MAX_OPS;
	int r;

	st_fill(i, buf, len);
	arm_slot(t, &t->wres[mine]);
	r = st_write(t, ns, i, mine, buf, len, 1, 1, NULL);
	if (r >= 0)
		r = st_wait_write(t, mine);
	free(buf);
	return r;
}

int st_get(struct st *t, uint32_t ns, uint64_t i, uint32_t len)
{
	static unsigned op = 1;
	unsigned mine = op++ % ST_MAX_OPS;
	struct ssd_loc loc;
	uint8_t key[16];
	uint8_t *buf;
	size_t cap = (len + 4095) / 4096 * 4096;
	int r;

	st_key(i, key);
	r = ssd_lookup(t->ssd, ns, key, 0, &loc);
	if (r < 0)
		return r;
	ck_assert_msg(loc.len == len, "key %llu: length %u on SSD, %u written",
		      (unsigned long long)i, loc.len, len);
	buf = st_alloc(cap);
	arm_slot(t, &t->rres[mine]);
	r = ssd_read(t->ssd, &loc, buf, cap, (void *)(uintptr_t)mine);
	if (r == 0) {
		r = st_wait_read(t, mine);
		ck_assert_msg(r != INT32_MIN, "key %llu: no read_done", (unsigned long long)i);
		if (r == 0)
			ck_assert_msg(st_check(i, buf, len) == 0,
				      "key %llu: WRONG BYTES served from SSD",
				      (unsigned long long)i);
	}
	free(buf);
	return r;
}

unsigned st_present(struct st *t, uint32_t ns, unsigned n, bool *had)
{
	unsigned found = 0;

	for (unsigned i = 0; i < n; i++) {
		struct ssd_loc loc;
		uint8_t key[16];

		st_key(i, key);
		had[i] = ssd_lookup(t->ssd, ns, key, 0, &loc) == 0;
		found += had[i];
	}
	return found;
}

unsigned st_only_present(struct st *t, uint32_t ns, unsigned n, const bool *had, uint32_t min,
			 uint32_t max)
{
	unsigned found = 0;

	for (unsigned i = 0; i < n; i++) {
		int r = st_get(t, ns, i, st_len(i, min, max));

		ck_assert_msg(r == 0 || r == -ENOENT, "key %u: %d", i, r);
		ck_assert_msg(r == -ENOENT || had[i], "key %u: evicted, then back after restart",
			      i);
		found += r == 0;
	}
	return found;
}
