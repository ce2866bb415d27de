/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hub.h"

uint64_t test_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *builddir(void)
{
	const char *b = getenv("top_builddir");

	return b ? b : ".";
}

static bool sock_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	bool ok;

	if (strlen(path) >= sizeof(sa.sun_path))
		return false;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static unsigned log_lines(const struct kvsd *d, const char *needle, unsigned max);

/*
 * kvstashd listens before it is ready (the pool is still being faulted
 * in and pinned for the GPUs, which opens the driver's fds): a connect
 * is queued until then.  Tests that count what the daemon holds need it
 * settled, so wait for this start's "ready" line too (the log is appended
 * over restarts: one more than before).
 */
#define READY_LINE "notice: ready: "

static int spawn(struct kvsd *d)
{
	unsigned readies = log_lines(d, READY_LINE, UINT_MAX);
	bool up = false;
	char bin[512];
	int logfd;

	snprintf(bin, sizeof(bin), "%s/sidecar/kvstashd", builddir());
	logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (logfd < 0)
		return -errno;
	d->pid = fork();
	if (d->pid < 0) {
		close(logfd);
		return -errno;
	}
	if (d->pid == 0) {
		dup2(logfd, 1);
		dup2(logfd, 2);
		/* A daemon in a host of the test's never outlives the test. */
		if (d->host)
			prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (hub_enter(d->host) < 0)
			_exit(126);
		execl(bin, "kvstashd", "--config", d->conf, (char *)NULL);
		_exit(127);
	}
	close(logfd);
	for (int i = 0; i < 3000; i++) {
		int st;

		/* One connect that answers is enough: each one is a session to the daemon. */
		up = up || sock_answers(d->sock);
		if (up && log_lines(d, READY_LINE, UINT_MAX) > readies)
			return 0;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			kvsd_dump_log(d);
			return -ECHILD;
		}
		usleep(10000);
	}
	kvsd_dump_log(d);
	return -ETIMEDOUT;
}

int kvsd_start(struct kvsd *d, const char *extra_ini)
{
	return kvsd_start_in(d, NULL, extra_ini);
}

int kvsd_start_in(struct kvsd *d, const struct hub_host *h, const char *extra_ini)
{
	const char *tmp = getenv("TMPDIR");
	FILE *f;

	memset(d, 0, sizeof(*d));
	d->host = h;
	snprintf(d->dir, sizeof(d->dir), "%s/kvstash-test.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(d->dir))
		return -errno;
	snprintf(d->sock, sizeof(d->sock), "%s/run/kvstash.sock", d->dir);
	snprintf(d->conf, sizeof(d->conf), "%s/kvstash.conf", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kvstashd.log", d->dir);
	f = fopen(d->conf, "w");
	if (!f)
		return -errno;
	fprintf(f, "[server]\nsocket = %s\n", d->sock);
	/* Defaults sized for a test box; the extra text may override them. */
	if (!extra_ini || !strstr(extra_ini, "[pool]"))
		fprintf(f, "[pool]\nsize = 16M\nextent_size = 256K\n");
	if (!extra_ini || !strstr(extra_ini, "[log]"))
		fprintf(f, "[log]\nlevel = %s\n", getenv("KVSTASH_TEST_DEBUG") ? "debug" : "info");
	if (extra_ini)
		fprintf(f, "%s\n", extra_ini);
	fclose(f);
	return spawn(d);
}

int kvsd_restart(struct kvsd *d)
{
	return spawn(d);
}

int kvsd_stop(struct kvsd *d)
{
	int st;

	if (d->pid <= 0)
		return -ECHILD;
	kill(d->pid, SIGTERM);
	if (waitpid(d->pid, &st, 0) < 0)
		return -errno;
	d->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int kvsd_finish(struct kvsd *d)
{
	int st = kvsd_stop(d);

	if (st != 0)
		kvsd_dump_log(d);
	kvsd_cleanup(d);
	return st;
}

void kvsd_kill(struct kvsd *d)
{
	if (d->pid <= 0)
		return;
	kill(d->pid, SIGKILL);
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
}

/* State letter of /proc/@pid/task/@tid/stat; '?' when unreadable. */
static char task_state(pid_t pid, const char *tid)
{
	char path[300], line[512]; /* tid: a d_name, up to 255 bytes as far as gcc knows */
	char *p;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, tid);
	f = fopen(path, "r");
	if (!f)
		return '?';
	p = fgets(line, sizeof(line), f);
	fclose(f);
	/* "tid (comm) S ...": the state follows the last ')'. */
	if (!p || !(p = strrchr(line, ')')) || p[1] != ' ')
		return '?';
	return p[2];
}

static bool all_stopped(pid_t pid)
{
	char path[64];
	struct dirent *e;
	bool stopped = true;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return false;
	while (stopped && (e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		stopped = task_state(pid, e->d_name) == 'T';
	}
	closedir(dir);
	return stopped;
}

int wait_stopped(pid_t pid, int timeout_ms)
{
	uint64_t deadline = test_now_ns() + (uint64_t)timeout_ms * 1000000ull;

	while (!all_stopped(pid)) {
		if (test_now_ns() >= deadline)
			return -ETIMEDOUT;
		usleep(1000);
	}
	return 0;
}

static void rm_rf(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *e;

	if (dir) {
		while ((e = readdir(dir))) {
			char p[512];

			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
			rm_rf(p);
		}
		closedir(dir);
		rmdir(path);
	} else {
		unlink(path);
	}
}

void kvsd_cleanup(struct kvsd *d)
{
	if (d->pid > 0)
		kvsd_kill(d);
	if (d->dir[0] && !getenv("KVSTASH_TEST_KEEP"))
		rm_rf(d->dir);
}

void kvsd_dump_log(const struct kvsd *d)
{
	char buf[4096];
	size_t n;
	FILE *f = fopen(d->log, "r");

	if (!f)
		return;
	fprintf(stderr, "---- kvstashd log (%s) ----\n", d->log);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fprintf(stderr, "---- end of log ----\n");
	fclose(f);
}

/* Lines of the log holding @needle, stopping at @max. */
static unsigned log_lines(const struct kvsd *d, const char *needle, unsigned max)
{
	char line[2048];
	unsigned n = 0;
	FILE *f = fopen(d->log, "r");

	if (!f)
		return 0;
	while (n < max && fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

bool kvsd_log_contains(const struct kvsd *d, const char *needle)
{
	return log_lines(d, needle, 1) > 0;
}

unsigned kvsd_log_count(const struct kvsd *d, const char *needle)
{
	return log_lines(d, needle, UINT_MAX);
}

int proc_fd_count(pid_t pid)
{
	char path[64];
	DIR *dir;
	struct dirent *e;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -errno;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

int proc_memfd_count(pid_t pid, const char *name)
{
	char path[64], target[512], needle[128];
	DIR *dir;
	struct dirent *e;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	snprintf(needle, sizeof(needle), "memfd:%s", name);
	dir = opendir(path);
	if (!dir)
		return -errno;
	while ((e = readdir(dir))) {
		char p[600];
		ssize_t len;

		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		len = readlink(p, target, sizeof(target) - 1);
		if (len < 0)
			continue;
		target[len] = '\0';
		n += strstr(target, needle) != NULL;
	}
	closedir(dir);
	return n;
}

int proc_map_count(pid_t pid, const char *needle)
{
	char path[64], line[1024];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

static void log_cb(void *arg, int level, const char *msg)
{
	if (getenv("KVSTASH_TEST_DEBUG"))
		fprintf(stderr, "libkvstash: %s\n", msg);
}

int test_connect(const struct kvsd *d, uint32_t role, const char *instance, const char *ns,
		 uint32_t rank, uint32_t tp, struct kvs_client **ret)
{
	struct kvs_connect_opts o;

	kvs_connect_opts_init(&o);
	o.role = role;
	o.instance = instance;
	o.ns = ns;
	o.tp_rank = rank;
	o.tp_size = tp;
	o.world_size = tp;
	o.log = log_cb;
	return kvs_connect(d->sock, &o, ret);
}

int test_admin(const struct kvsd *d, struct kvs_client **ret)
{
	return test_connect(d, KVS_ROLE_ADMIN, NULL, NULL, 0, 1, ret);
}

int test_wait_cqe(struct kvs_client *c, int ms, struct kvs_cqe *ret)
{
	struct kvs_cqe *cqe;
	int r = kvs_wait_cqe(c, &cqe, ms);

	if (r < 0)
		return r;
	*ret = *cqe;
	kvs_cqe_seen(c, cqe);
	return 0;
}

static int stats_cb(void *arg, const struct kvs_msg_hdr *m)
{
	if (m->type == KVS_MSG_STATS_GLOBAL)
		memcpy(arg, m, sizeof(struct kvs_msg_stats_global));
	return 0;
}

int test_stats(struct kvs_client *admin, struct kvs_msg_stats_global *ret)
{
	memset(ret, 0, sizeof(*ret));
	return kvs_admin_request(admin, KVS_MSG_STATS, stats_cb, ret);
}

static int count_cb(void *arg, const struct kvs_msg_hdr *m)
{
	if (m->type == KVS_MSG_STATUS_SESSION)
		(*(int *)arg)++;
	return 0;
}

int test_status_sessions(struct kvs_client *admin)
{
	int n = 0, r = kvs_admin_request(admin, KVS_MSG_STATUS, count_cb, &n);

	return r < 0 ? r : n;
}

/* ---- layouts ------------------------------------------------------ */

int test_kv_alloc(struct test_kv *kv, enum test_layout_kind kind, unsigned layers,
		  unsigned blocks, uint64_t seg)
{
	memset(kv, 0, sizeof(*kv));
	kv->kind = kind;
	kv->layers = layers;
	kv->blocks = blocks;
	kv->seg = seg;
	if (layers == 0 || layers > 512)
		return -EINVAL;
	if (kind == LAYOUT_PAGE_FIRST) {
		kv->nmems = 1;
		kv->sizes[0] = (uint64_t)layers * seg * blocks;
	} else {
		kv->nmems = layers;
		for (unsigned l = 0; l < layers; l++)
			kv->sizes[l] = (uint64_t)(kind == LAYOUT_SPLIT_KV ? 2 : 1) * seg * blocks;
	}
	for (unsigned m = 0; m < kv->nmems; m++) {
		int r = kvs_host_alloc(kv->sizes[m], &kv->fds[m], (void **)&kv->bases[m]);

		if (r < 0) {
			test_kv_free(kv);
			return r;
		}
		kv->mems[m] = (struct kvs_mem){ .kind = KVS_MEM_HOST_FD, .fd = kv->fds[m],
						.size = kv->sizes[m] };
	}
	for (unsigned l = 0; l < layers; l++) {
		struct kvs_layer *y = &kv->lays[l];

		snprintf(kv->names[l], sizeof(kv->names[l]), "model.layers.%u.attn", l);
		y->name = kv->names[l];
		y->num_blocks = blocks;
		y->segment_bytes = seg;
		switch (kind) {
		case LAYOUT_PAGE_FIRST:
			y->mem = 0;
			y->segments = 1;
			y->offset = (uint64_t)l * seg;
			y->block_stride = (uint64_t)layers * seg;
			break;
		case LAYOUT_SPLIT_KV:
			/* [2][num_blocks][seg]: K blocks, then V blocks. */
			y->mem = l;
			y->segments = 2;
			y->kv_stride = (uint64_t)blocks * seg;
			y->block_stride = seg;
			break;
		case LAYOUT_MLA:
			y->mem = l;
			y->segments = 1;
			y->block_stride = seg;
			break;
		}
	}
	return 0;
}

void test_kv_free(struct test_kv *kv)
{
	for (unsigned m = 0; m < kv->nmems; m++)
		kvs_host_free(kv->fds[m], kv->bases[m], kv->sizes[m]);
	kv->nmems = 0;
}

int test_kv_register(struct kvs_client *c, struct test_kv *kv)
{
	return kvs_register(c, kv->mems, kv->nmems, kv->lays, kv->layers,
			    kv->kind == LAYOUT_MLA ? KVS_REGISTER_REPLICATED : 0);
}

unsigned test_kv_segments(const struct test_kv *kv)
{
	return kv->kind == LAYOUT_SPLIT_KV ? 2 : 1;
}

uint8_t *test_kv_seg(struct test_kv *kv, unsigned l, unsigned b, unsigned s)
{
	const struct kvs_layer *y = &kv->lays[l];

	return kv->bases[y->mem] + y->offset + (uint64_t)b * y->block_stride +
	       (uint64_t)s * y->kv_stride;
}

uint64_t test_splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void gen(uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v = test_splitmix64(&seed);

		memcpy(p + i, &v, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)test_splitmix64(&seed);
}

static bool same(const uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v = test_splitmix64(&seed);

		if (memcmp(p + i, &v, 8))
			return false;
	}
	for (; i < n; i++)
		if (p[i] != (uint8_t)test_splitmix64(&seed))
			return false;
	return true;
}

static uint64_t seg_seed(uint64_t seed, unsigned l, unsigned s)
{
	return seed * 1000003u + l * 7919u + s;
}

void test_kv_fill(struct test_kv *kv, unsigned b, uint64_t seed)
{
	for (unsigned l = 0; l < kv->layers; l++)
		for (unsigned s = 0; s < test_kv_segments(kv); s++)
			gen(test_kv_seg(kv, l, b, s), kv->seg, seg_seed(seed, l, s));
}

bool test_kv_check_layers(struct test_kv *kv, unsigned b, uint64_t seed, unsigned l0, unsigned n)
{
	for (unsigned l = l0; l < l0 + n; l++)
		for (unsigned s = 0; s < test_kv_segments(kv); s++)
			if (!same(test_kv_seg(kv, l, b, s), kv->seg, seg_seed(seed, l, s)))
				return false;
	return true;
}

bool test_kv_check(struct test_kv *kv, unsigned b, uint64_t seed)
{
	return test_kv_check_layers(kv, b, seed, 0, kv->layers);
}

void test_kv_poison(struct test_kv *kv, unsigned b, uint8_t v)
{
	for (unsigned l = 0; l < kv->layers; l++)
		for (unsigned s = 0; s < test_kv_segments(kv); s++)
			memset(test_kv_seg(kv, l, b, s), v, kv->seg);
}

bool test_kv_layer_is_poison(struct test_kv *kv, unsigned l, unsigned b, uint8_t v)
{
	for (unsigned s = 0; s < test_kv_segments(kv); s++) {
		const uint8_t *p = test_kv_seg(kv, l, b, s);

		for (uint64_t i = 0; i < kv->seg; i++)
			if (p[i] != v)
				return false;
	}
	return true;
}

bool test_kv_is_poison(struct test_kv *kv, unsigned b, uint8_t v)
{
	for (unsigned l = 0; l < kv->layers; l++)
		if (!test_kv_layer_is_poison(kv, l, b, v))
			return false;
	return true;
}

void test_keys(uint8_t *keys, unsigned n, uint64_t seed)
{
	/* Mix the seed first: nearby seeds must give unrelated chains. */
	uint64_t st = seed, parent[2];

	parent[0] = test_splitmix64(&st);
	parent[1] = test_splitmix64(&st);

	for (unsigned i = 0; i < n; i++) {
		uint64_t s = parent[0] ^ (parent[1] * 31) ^ i;
		uint64_t k[2] = { test_splitmix64(&s), test_splitmix64(&s) };

		memcpy(keys + 16 * (size_t)i, k, 16);
		parent[0] = k[0];
		parent[1] = k[1];
	}
}
