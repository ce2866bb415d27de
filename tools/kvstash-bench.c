/* SPDX-License-Identifier: MIT */
/*
 * kvstash-bench: what kvstashd's data path costs, next to what the same
 * work costs without it, measured in one run on one machine.
 *
 *   copy    SAVE and LOAD throughput for three engine layouts at several
 *           block sizes and two batch sizes, each op timed from submit to
 *           its CQE (what an engine waits for), next to a plain copy of
 *           the same pieces (same fragmentation, same coalescing) done by
 *           the bench process itself: memcpy for the host backend.
 *             page   page-first fused, Qwen3-8B-like: 36 layers x S per
 *                    block, a block's layers adjacent (one piece)
 *             split  layer-first split K/V, vLLM-like: 36 layers, each its
 *                    own allocation, K and V segments of S/2 (72 pieces)
 *             mla    MLA-like, replicated: 61 layers x S, one allocation
 *                    per layer (61 pieces)
 *           Block ids are a random permutation, so blocks never coalesce
 *           by accident; every timed SAVE uses fresh keys (nothing is
 *           skipped); medians of many repetitions, daemon and baseline
 *           interleaved so drifting noise hits both.
 *   query   QUERY latency with a lease (1, 64, 32768 resident keys), the
 *           RELEASE after it, and the same QUERY without a lease.
 *   cpu     kvstashd's CPU time (utime + stime of /proc/PID/stat, and per
 *           thread from /proc/PID/task) over a run, per block.
 *   nop     NOP round trip through kvstashd against a Unix-socket round
 *           trip between two processes.
 *
 * The copy engine is a backend (struct backend): engine memory, how the
 * baseline moves pieces, and what kvstashd is told.  Only "host" exists
 * (memfds, memcpy); a "cuda" backend adds device memory and a
 * cudaMemcpyAsync baseline without touching the layout or table code.
 *
 * With --spawn the tool starts its own kvstashd in a temporary directory
 * (and, unless --no-spin0, a second one with worker.spin_us = 0 for the
 * cpu, query and nop sections); otherwise it measures the daemon at
 * --socket.  See docs/PERFORMANCE.md for results.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kvstash/kvstash.h>

#include <pthread.h>

#if HAVE_CUDA
#include <cuda_runtime_api.h>

#include "tools/gpu/gpu.h" /* the compute-bound "engine" kernel */
#endif

#define TOOL_NAME "kvstash-bench"
#include "tool.h"

/* The installed daemon, $(sbindir)/kvstashd (tools/Makefile.inc). */
#ifndef KVSTASHD_PATH
#define KVSTASHD_PATH "/usr/sbin/kvstashd"
#endif

#define KiB	      (UINT64_C(1) << 10)
#define MiB	      (UINT64_C(1) << 20)
#define GiB	      (UINT64_C(1) << 30)
#define SEC	      UINT64_C(1000000000)
#define OP_TIMEOUT_MS 60000
#define SLOT_ALIGN    512u	 /* kvstashd's slot alignment (sidecar/wire/layout.h) */
#define STAGING_MIN   (64 * MiB) /* baseline destinations rotate over more than the LLC */
#define MAX_LIST      16
#define MAX_DOPTS     16

/* ---- small helpers ------------------------------------------------- */

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

static void shuffle(uint32_t *v, uint32_t n, uint64_t *rng)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(splitmix64(rng) % i), t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

/* Keys unique to (@space, @iter): 16 bytes each, prefix-chained like vLLM's. */
static void make_keys(uint8_t *keys, uint32_t n, uint64_t space, uint64_t iter)
{
	uint64_t parent[2] = { space * 0x100000001b3ull, iter ^ 0x6b76737461736862ull };

	for (uint32_t i = 0; i < n; i++) {
		uint64_t s = parent[0] ^ (parent[1] * 31) ^ i;
		uint64_t k[2] = { splitmix64(&s), splitmix64(&s) };

		memcpy(keys + 16 * (size_t)i, k, 16);
		parent[0] = k[0];
		parent[1] = k[1];
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The @q quantile (0..1) of @n samples; sorts them. */
static uint64_t quantile(uint64_t *v, size_t n, double q)
{
	size_t i;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

static int parse_size(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		v <<= 10;
		end++;
		break;
	case 'm':
	case 'M':
		v <<= 20;
		end++;
		break;
	case 'g':
	case 'G':
		v <<= 30;
		end++;
		break;
	default:
		break;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end == 'B')
		end++;
	if (*end)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* "4K,16K,64K": up to MAX_LIST sizes. */
static unsigned parse_size_list(const char *s, uint64_t *out, const char *what)
{
	char buf[256], *save = NULL, *tok;
	unsigned n = 0;

	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == MAX_LIST || parse_size(tok, &out[n]) < 0 || out[n] == 0)
			die("bad %s list '%s'", what, s);
		n++;
	}
	if (n == 0)
		die("empty %s list", what);
	return n;
}

static void fmt_size(char *buf, size_t len, uint64_t v)
{
	if (v >= MiB && v % MiB == 0)
		snprintf(buf, len, "%" PRIu64 "M", v / MiB);
	else if (v >= MiB)
		snprintf(buf, len, "%.2fM", (double)v / MiB);
	else if (v >= KiB && v % KiB == 0)
		snprintf(buf, len, "%" PRIu64 "K", v / KiB);
	else
		snprintf(buf, len, "%" PRIu64, v);
}

/* ---- backends ------------------------------------------------------ */

enum dir {
	DIR_SAVE, /* engine -> host (pool) */
	DIR_LOAD, /* host (pool) -> engine */
};

/* One contiguous copy: engine side (host pointer or device address), host side. */
struct piece {
	uint64_t eng;
	uint8_t *host;
	uint64_t len;
};

/* One allocation of engine KV memory, as the backend made it. */
struct bmem {
	struct kvs_mem km; /* what kvs_register() is given */
	uint64_t addr;	   /* engine address of byte 0 */
	uint64_t size;
	struct kvs_cuda_arena arena; /* the cuda backend's allocation */
};

struct backend {
	const char *name;
	const char *baseline; /* the baseline mover, for the tables */
	uint32_t device_kind; /* KVS_DEVICE_HOST, later KVS_DEVICE_CUDA */
	int (*mem_alloc)(uint64_t size, struct bmem *ret);
	void (*mem_free)(struct bmem *m);
	/* Fill with a pattern, so every page is real in both processes. */
	void (*mem_fill)(struct bmem *m, uint64_t seed);
	/* Read engine bytes into host memory (checks). */
	void (*mem_read)(const struct bmem *m, uint64_t off, void *dst, uint64_t len);
	/* Host memory the baseline copies with (pinned for a GPU backend). */
	void *(*staging_alloc)(uint64_t size);
	void (*staging_free)(void *p, uint64_t size);
	/* The baseline: move @n pieces, synchronously, in this process. */
	void (*copy)(enum dir dir, const struct piece *p, uint32_t n);
};

static int host_mem_alloc(uint64_t size, struct bmem *ret)
{
	void *p;
	int fd, r = kvs_host_alloc(size, &fd, &p);

	if (r < 0)
		return r;
	ret->km = (struct kvs_mem){ .kind = KVS_MEM_HOST_FD, .fd = fd, .size = size };
	ret->addr = (uint64_t)(uintptr_t)p;
	ret->size = size;
	return 0;
}

static void host_mem_free(struct bmem *m)
{
	kvs_host_free(m->km.fd, (void *)(uintptr_t)m->addr, m->size);
}

static void host_mem_fill(struct bmem *m, uint64_t seed)
{
	uint64_t *p = (uint64_t *)(uintptr_t)m->addr;

	for (uint64_t i = 0; i < m->size / 8; i++)
		p[i] = splitmix64(&seed);
}

static void host_mem_read(const struct bmem *m, uint64_t off, void *dst, uint64_t len)
{
	memcpy(dst, (const uint8_t *)(uintptr_t)m->addr + off, len);
}

static void *host_staging_alloc(uint64_t size)
{
	void *p = aligned_alloc(4096, (size + 4095) & ~4095ull);

	if (p)
		memset(p, 0x5a, size); /* fault it in now, not in a timed copy */
	return p;
}

static void host_staging_free(void *p, uint64_t size)
{
	free(p);
}

static void host_copy(enum dir dir, const struct piece *p, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		void *eng = (void *)(uintptr_t)p[i].eng;

		if (dir == DIR_SAVE)
			memcpy(p[i].host, eng, p[i].len);
		else
			memcpy(eng, p[i].host, p[i].len);
	}
}

static const struct backend backend_host = {
	.name = "host",
	.baseline = "memcpy",
	.device_kind = KVS_DEVICE_HOST,
	.mem_alloc = host_mem_alloc,
	.mem_free = host_mem_free,
	.mem_fill = host_mem_fill,
	.mem_read = host_mem_read,
	.staging_alloc = host_staging_alloc,
	.staging_free = host_staging_free,
	.copy = host_copy,
};

#if HAVE_CUDA
/*
 * The cuda backend: engine memory is GPU memory from kvs_cuda_arena_alloc()
 * (legacy IPC or VMM fd, --mem), registered by pointer; the baseline is a
 * cudaMemcpyAsync per piece (what an engine copying on its own would do)
 * into pinned host memory.  Each row is also given as a fraction of the
 * contiguous-copy ceiling measured at the start of the run.
 */
static cudaStream_t cuda_stream;
static uint32_t cuda_kind = KVS_MEM_CUDA_IPC;

#define CUDA_OK(call)                                                                   \
	do {                                                                            \
		cudaError_t e_ = (call);                                                \
		if (e_ != cudaSuccess)                                                  \
			die("%s: %s", #call, cudaGetErrorString(e_));                    \
	} while (0)

static int cuda_mem_alloc(uint64_t size, struct bmem *ret)
{
	int r = kvs_cuda_arena_alloc(0, size, cuda_kind, &ret->arena);

	if (r < 0)
		return r;
	ret->km = (struct kvs_mem){ .kind = cuda_kind, .fd = -1, .size = ret->arena.size };
	ret->addr = ret->arena.dptr;
	ret->size = size;
	return 0;
}

static void cuda_mem_free(struct bmem *m)
{
	kvs_cuda_arena_free(&m->arena);
}

static void cuda_mem_fill(struct bmem *m, uint64_t seed)
{
	uint64_t chunk = 64 * MiB, *buf = xcalloc(1, chunk);

	for (uint64_t off = 0; off < m->size; off += chunk) {
		uint64_t n = m->size - off < chunk ? m->size - off : chunk;

		for (uint64_t i = 0; i < n / 8; i++)
			buf[i] = splitmix64(&seed);
		CUDA_OK(cudaMemcpy((void *)(uintptr_t)(m->addr + off), buf, n,
				   cudaMemcpyHostToDevice));
	}
	free(buf);
}

static void cuda_mem_read(const struct bmem *m, uint64_t off, void *dst, uint64_t len)
{
	CUDA_OK(cudaMemcpy(dst, (const void *)(uintptr_t)(m->addr + off), len,
			   cudaMemcpyDeviceToHost));
}

static void *cuda_staging_alloc(uint64_t size)
{
	void *p = NULL;

	if (cudaHostAlloc(&p, size, cudaHostAllocDefault) != cudaSuccess)
		return NULL;
	memset(p, 0x5a, size);
	return p;
}

static void cuda_staging_free(void *p, uint64_t size)
{
	cudaFreeHost(p);
}

static void cuda_copy(enum dir dir, const struct piece *p, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		void *eng = (void *)(uintptr_t)p[i].eng;

		if (dir == DIR_SAVE)
			CUDA_OK(cudaMemcpyAsync(p[i].host, eng, p[i].len, cudaMemcpyDeviceToHost,
						cuda_stream));
		else
			CUDA_OK(cudaMemcpyAsync(eng, p[i].host, p[i].len, cudaMemcpyHostToDevice,
						cuda_stream));
	}
	CUDA_OK(cudaStreamSynchronize(cuda_stream));
}

static const struct backend backend_cuda = {
	.name = "cuda",
	.baseline = "cudaMemcpyAsync per piece",
	.device_kind = KVS_DEVICE_CUDA,
	.mem_alloc = cuda_mem_alloc,
	.mem_free = cuda_mem_free,
	.mem_fill = cuda_mem_fill,
	.mem_read = cuda_mem_read,
	.staging_alloc = cuda_staging_alloc,
	.staging_free = cuda_staging_free,
	.copy = cuda_copy,
};
#endif

/* Contiguous-copy ceilings (GB/s) measured in this run; 0: not measured. */
static double ceil_d2h, ceil_h2d, ceil_both;

/* ---- layouts (backend-neutral) -------------------------------------- */

/* LAY_TINY (one 1 KiB layer) only backs the QUERY tests: QUERY never reads block bytes. */
enum lay_kind { LAY_PAGE, LAY_SPLIT, LAY_MLA, LAY_NR, LAY_TINY = LAY_NR };

static const struct lay_info {
	const char *name;
	const char *what;
	unsigned layers;
	unsigned segments;    /* per layer per block */
	bool per_layer_alloc; /* one allocation per layer */
	bool replicated;
} LAYS[LAY_NR + 1] = {
	[LAY_PAGE] = { "page", "page-first fused, 36 x S", 36, 1, false, false },
	[LAY_SPLIT] = { "split", "split K/V per layer, 36 x 2 x S/2", 36, 2, true, false },
	[LAY_MLA] = { "mla", "MLA replicated, 61 x S", 61, 1, true, true },
	[LAY_TINY] = { "tiny", "1 x S", 1, 1, false, false },
};

/* An engine's KV cache in one layout, registered or not. */
struct kv {
	const struct backend *be;
	const struct lay_info *li;
	unsigned nblocks;
	uint64_t layer_bytes; /* S: one layer of one block */
	uint64_t seg_bytes;   /* one segment */
	uint64_t block_bytes; /* one block, every layer */
	uint64_t slot_bytes;  /* block_bytes rounded up as a pool slot is */
	unsigned nmems;
	struct bmem *mems;
	struct kvs_layer *lays;
	char (*names)[40];
};

static int kv_alloc(struct kv *kv, const struct backend *be, enum lay_kind kind,
		    uint64_t layer_bytes, unsigned nblocks)
{
	const struct lay_info *li = &LAYS[kind];
	unsigned L = li->layers;

	memset(kv, 0, sizeof(*kv));
	kv->be = be;
	kv->li = li;
	kv->nblocks = nblocks;
	kv->layer_bytes = layer_bytes;
	kv->seg_bytes = layer_bytes / li->segments;
	kv->block_bytes = kv->seg_bytes * li->segments * L;
	kv->slot_bytes = (kv->block_bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
	kv->nmems = li->per_layer_alloc ? L : 1;
	kv->mems = xcalloc(kv->nmems, sizeof(*kv->mems));
	kv->lays = xcalloc(L, sizeof(*kv->lays));
	kv->names = xcalloc(L, sizeof(*kv->names));
	for (unsigned m = 0; m < kv->nmems; m++) {
		uint64_t size = li->per_layer_alloc ? kv->seg_bytes * li->segments * nblocks
						    : kv->block_bytes * nblocks;
		int r = be->mem_alloc(size, &kv->mems[m]);

		if (r < 0) {
			kv->nmems = m;
			return r;
		}
		be->mem_fill(&kv->mems[m], m + 1);
	}
	for (unsigned l = 0; l < L; l++) {
		struct kvs_layer *y = &kv->lays[l];

		snprintf(kv->names[l], sizeof(kv->names[l]), "model.layers.%u.self_attn", l);
		y->name = kv->names[l];
		y->num_blocks = nblocks;
		y->segments = li->segments;
		y->segment_bytes = kv->seg_bytes;
		if (!li->per_layer_alloc) {
			/* [num_blocks][layers][S]: a block's layers adjacent. */
			y->mem = 0;
			y->offset = (uint64_t)l * kv->seg_bytes;
			y->block_stride = kv->block_bytes;
		} else {
			/* [segments][num_blocks][seg]: all K blocks, then all V blocks. */
			y->mem = l;
			if (li->segments > 1)
				y->kv_stride = (uint64_t)nblocks * kv->seg_bytes;
			y->block_stride = kv->seg_bytes;
		}
	}
	return 0;
}

static void kv_free(struct kv *kv)
{
	for (unsigned m = 0; m < kv->nmems; m++)
		kv->be->mem_free(&kv->mems[m]);
	free(kv->mems);
	free(kv->lays);
	free(kv->names);
	memset(kv, 0, sizeof(*kv));
}

static uint64_t kv_eng(const struct kv *kv, unsigned l, uint32_t b, unsigned s)
{
	const struct kvs_layer *y = &kv->lays[l];

	return kv->mems[y->mem].addr + y->offset + (uint64_t)b * y->block_stride +
	       (uint64_t)s * y->kv_stride;
}

/*
 * The pieces kvstashd moves for blocks @ids into @n consecutive slots at
 * @host: per block, layer and segment, merged where both sides continue
 * (the rule of copy_batch_add() in sidecar/io/batch.c).  Returns the count.
 */
static uint32_t kv_pieces(const struct kv *kv, const uint32_t *ids, uint32_t n, uint8_t *host,
			  struct piece *out)
{
	uint32_t np = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint8_t *slot = host + (uint64_t)i * kv->slot_bytes;

		for (unsigned l = 0; l < kv->li->layers; l++)
			for (unsigned s = 0; s < kv->li->segments; s++) {
				uint64_t eng = kv_eng(kv, l, ids[i], s);
				uint8_t *h =
					slot + ((uint64_t)l * kv->li->segments + s) * kv->seg_bytes;
				struct piece *p = np ? &out[np - 1] : NULL;

				if (p && p->eng + p->len == eng && p->host + p->len == h) {
					p->len += kv->seg_bytes;
					continue;
				}
				out[np++] = (struct piece){ eng, h, kv->seg_bytes };
			}
	}
	return np;
}

/* ---- options --------------------------------------------------------- */

enum { SEC_COPY, SEC_QUERY, SEC_CPU, SEC_NOP, SEC_SSD, SEC_NR };
static const char *const SECTION_NAMES[] = { "copy", "query", "cpu", "nop", "ssd" };

static struct {
	const struct backend *be;
	const char *socket;
	bool spawn;
	char kvstashd[PATH_MAX];
	uint64_t pool_size;
	const char *dopts[MAX_DOPTS];
	unsigned ndopts;
	bool spin0;
	bool json;
	int nice;
	bool sections[SEC_NR]; /* copy, query, cpu, nop, ssd */
	bool layouts[LAY_NR];
	uint64_t sizes[MAX_LIST];
	unsigned nsizes;
	uint64_t batches[MAX_LIST];
	unsigned nbatches;
	unsigned reps;
	uint64_t max_batch_bytes;
	uint32_t query_keys[MAX_LIST];
	unsigned nquery;
	unsigned query_iters;
	uint32_t query_resident;
	unsigned nop_iters;
	uint32_t wait_spin_us; /* kvs_connect_opts.wait_spin_us of every session */
	double cpu_seconds;
	uint64_t cpu_size;
	uint32_t cpu_batch;
	uint64_t seed;
	bool gpu_shapes;      /* cuda without --sizes: the block shapes */
	const char *movers;   /* cuda with --spawn: one daemon per mover */
	bool interference;
	const char *ssd;      /* --ssd FILE: the ssd section's daemon's [ssd] path */
	uint64_t ssd_size;    /* its [ssd] size */
	unsigned ssd_samples; /* timed QUERY+LOADs per SSD row: 100, a p99 no one sample decides */
} O;

/* ---- the daemon ------------------------------------------------------- */

struct daemon {
	pid_t pid; /* for /proc; ours when spawned */
	bool spawned;
	char label[64];
	char dir[128];
	char sock[192];
	char log[192];
};

static bool sock_answers(const char *path, pid_t *ret_pid)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (ok && ret_pid) {
		struct ucred cred;
		socklen_t len = sizeof(cred);

		*ret_pid = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
	}
	close(fd);
	return ok;
}

static void dump_log(const struct daemon *d)
{
	char buf[4096];
	size_t n;
	FILE *f = fopen(d->log, "r");

	if (!f)
		return;
	fprintf(stderr, "---- %s ----\n", d->log);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fclose(f);
}

static void pool_ready_rows(const struct daemon *d);
static struct kvs_client *admin_open(const struct daemon *d);

/* The spawned daemon, for the exit handler: die() must not leave it running. */
static struct daemon *live_daemon;
static void daemon_stop(struct daemon *d);

static void stop_live_daemon(void)
{
	if (live_daemon)
		daemon_stop(live_daemon);
}

/* Start kvstashd with @extra (a "-o" assignment or NULL) on top of --daemon-opt. */
static void daemon_spawn(struct daemon *d, const char *label, const char *extra)
{
	const char *tmp = getenv("TMPDIR");
	const char *argv[8 + 2 * MAX_DOPTS];
	char conf[192];
	unsigned ac = 0;
	FILE *f;
	int logfd;

	memset(d, 0, sizeof(*d));
	snprintf(d->label, sizeof(d->label), "%s", label);
	snprintf(d->dir, sizeof(d->dir), "%s/kvstash-bench.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(d->dir))
		die("mkdtemp: %s", strerror(errno));
	snprintf(d->sock, sizeof(d->sock), "%s/kvstash.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kvstashd.log", d->dir);
	snprintf(conf, sizeof(conf), "%s/kvstash.conf", d->dir);
	f = fopen(conf, "w");
	if (!f)
		die("%s: %s", conf, strerror(errno));
	/* Info: the pool's "ready" lines (pool_ready_rows()); nothing per op is logged there. */
	fprintf(f, "[server]\nsocket = %s\n[pool]\nsize = %" PRIu64 "\n[log]\nlevel = info\n",
		d->sock, O.pool_size);
	fclose(f);
	argv[ac++] = "kvstashd";
	argv[ac++] = "--config";
	argv[ac++] = conf;
	for (unsigned i = 0; i < O.ndopts; i++) {
		argv[ac++] = "-o";
		argv[ac++] = O.dopts[i];
	}
	if (extra) {
		argv[ac++] = "-o";
		argv[ac++] = extra;
	}
	argv[ac] = NULL;
	logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (logfd < 0)
		die("%s: %s", d->log, strerror(errno));
	d->pid = fork();
	if (d->pid < 0)
		die("fork: %s", strerror(errno));
	if (d->pid == 0) {
		dup2(logfd, 1);
		dup2(logfd, 2);
		execv(O.kvstashd, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", O.kvstashd, strerror(errno));
		_exit(127);
	}
	close(logfd);
	d->spawned = true;
	live_daemon = d;
	/*
	 * The socket listens before the pool is made (a second daemon on it
	 * fails before pinning memory): a connection is taken at once, its
	 * HELLO answered once start-up is over, the pool's lines logged.
	 */
	for (int i = 0; i < 12000; i++) {
		int st;

		if (sock_answers(d->sock, NULL)) {
			kvs_close(admin_open(d));
			pool_ready_rows(d);
			return;
		}
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			dump_log(d);
			die("kvstashd (%s) exited during start-up", O.kvstashd);
		}
		usleep(10000);
	}
	dump_log(d);
	die("kvstashd did not open %s within 120 s", d->sock);
}

static void daemon_attach(struct daemon *d, const char *sock)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->label, sizeof(d->label), "external");
	snprintf(d->sock, sizeof(d->sock), "%s", sock);
	if (!sock_answers(sock, &d->pid))
		die("no kvstashd answers at %s (use --spawn to start one)", sock);
}

static void daemon_stop(struct daemon *d)
{
	char path[256];
	int st;

	if (!d->spawned)
		return;
	d->spawned = false;
	live_daemon = NULL;
	kill(d->pid, SIGTERM);
	for (int i = 0; i < 3000 && waitpid(d->pid, &st, WNOHANG) != d->pid; i++)
		usleep(10000);
	if (kill(d->pid, 0) == 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, &st, 0);
	}
	if (getenv("KVSTASH_BENCH_KEEP"))
		return;
	unlink(d->sock);
	unlink(d->log);
	snprintf(path, sizeof(path), "%s/kvstash.conf", d->dir);
	unlink(path);
	rmdir(d->dir);
}

/* CPU time of the daemon: the process, and its threads by name. */
struct cpu_snap {
	uint64_t total;	 /* ns, utime + stime of /proc/PID/stat */
	uint64_t worker; /* kvs-io-* threads */
	uint64_t copy;	 /* kvs-copy threads */
};

/* utime + stime (clock ticks) of a /proc stat file. */
static uint64_t stat_ticks(const char *path)
{
	char buf[1024], *p;
	unsigned long long ut, st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The name may hold spaces and parentheses: fields follow the last ')'. */
	p = strrchr(buf, ')');
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return ut + st;
}

static void cpu_snap(pid_t pid, struct cpu_snap *ret)
{
	uint64_t tick_ns = SEC / (uint64_t)sysconf(_SC_CLK_TCK);
	char path[128];
	struct dirent *e;
	DIR *dir;

	memset(ret, 0, sizeof(*ret));
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	ret->total = stat_ticks(path) * tick_ns;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return;
	while ((e = readdir(dir))) {
		char p[300], comm[64] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		f = fopen(p, "re");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
		snprintf(p, sizeof(p), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
		if (!strncmp(comm, "kvs-io", 6))
			ret->worker += stat_ticks(p) * tick_ns;
		else if (!strncmp(comm, "kvs-copy", 8))
			ret->copy += stat_ticks(p) * tick_ns;
	}
	closedir(dir);
}

/*
 * The daemon's CPU time in ns (its process CPU clock: ns, not ticks; a
 * running thread's share is brought up to date at each tick or switch, so
 * read it around loops of operations, not around one short one).
 */
struct wcpu {
	clockid_t clk;
	bool ok;
};

static void wcpu_open(pid_t pid, struct wcpu *w)
{
	w->ok = pid > 0 && clock_getcpuclockid(pid, &w->clk) == 0;
}

static uint64_t wcpu_ns(const struct wcpu *w)
{
	struct timespec ts;

	if (!w->ok || clock_gettime(w->clk, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

static void wcpu_close(struct wcpu *w)
{
	w->ok = false;
}

/* ---- a client ------------------------------------------------------------ */

static void log_cb(void *arg, int level, const char *msg)
{
	if (level <= KVS_LOG_WARNING)
		fprintf(stderr, "kvstash-bench: libkvstash: %s\n", msg);
}

static unsigned run_id;

static struct kvs_client *client_open(const struct daemon *d, const char *tag)
{
	struct kvs_connect_opts o;
	struct kvs_client *c;
	char inst[96], ns[96];
	int r;

	/* A namespace per layout and run: layouts must never share one. */
	snprintf(inst, sizeof(inst), "bench-%d-%u-%s", (int)getpid(), run_id, tag);
	snprintf(ns, sizeof(ns), "kvstash-bench/%d/%u/%s", (int)getpid(), run_id++, tag);
	kvs_connect_opts_init(&o);
	o.instance = inst;
	o.ns = ns;
	o.device_kind = O.be->device_kind;
	if (o.device_kind == KVS_DEVICE_CUDA && kvs_cuda_device_uuid(0, o.device_uuid) < 0)
		die("no CUDA device 0");
	o.log = log_cb;
	o.wait_spin_us = O.wait_spin_us;
	/* kvstashd answers HELLO once its pool is pre-faulted: seconds for a large one. */
	o.timeout_ms = 300000;
	r = kvs_connect(d->sock, &o, &c);
	if (r < 0)
		die("connect %s: %s", d->sock, kvs_strerror(r));
	return c;
}

static void client_register(struct kvs_client *c, struct kv *kv)
{
	struct kvs_mem *mems = xcalloc(kv->nmems, sizeof(*mems));
	int r;

	if (kv->be->device_kind == KVS_DEVICE_CUDA) {
		/* GPU memory: by pointer; libkvstash exports each allocation once. */
		struct kvs_cuda_layer *cl = xcalloc(kv->li->layers, sizeof(*cl));

		for (unsigned l = 0; l < kv->li->layers; l++) {
			const struct kvs_layer *y = &kv->lays[l];

			cl[l] = (struct kvs_cuda_layer){
				.name = y->name,
				.base = kv->mems[y->mem].addr + y->offset,
				.segments = y->segments,
				.num_blocks = y->num_blocks,
				.segment_bytes = y->segment_bytes,
				.kv_stride = y->kv_stride,
				.block_stride = y->block_stride,
			};
		}
		r = kvs_register_cuda(c, cl, kv->li->layers,
				      kv->li->replicated ? KVS_REGISTER_REPLICATED : 0);
		free(cl);
		free(mems);
		if (r < 0)
			die("register (%s, S=%" PRIu64 "): %s", kv->li->name, kv->layer_bytes,
			    kvs_strerror(r));
		return;
	}

	for (unsigned m = 0; m < kv->nmems; m++)
		mems[m] = kv->mems[m].km;
	r = kvs_register(c, mems, kv->nmems, kv->lays, kv->li->layers,
			 kv->li->replicated ? KVS_REGISTER_REPLICATED : 0);
	free(mems);
	if (r < 0)
		die("register (%s, S=%" PRIu64 "): %s", kv->li->name, kv->layer_bytes,
		    kvs_strerror(r));
}

static void client_close(struct kvs_client *c)
{
	kvs_unregister(c);
	kvs_close(c);
}

static struct kvs_sqe *sqe_get(struct kvs_client *c)
{
	struct kvs_sqe *sqe = kvs_get_sqe(c);

	if (!sqe)
		die("no free SQE (%u pending)", kvs_pending(c));
	return sqe;
}

/* Submit what was prepared, wait for its CQE; returns ns from submit to CQE. */
static uint64_t run_op(struct kvs_client *c, const char *what, struct kvs_cqe *ret)
{
	struct kvs_cqe *cqe;
	uint64_t t0 = now_ns();
	int r;

	kvs_submit(c);
	r = kvs_wait_cqe(c, &cqe, OP_TIMEOUT_MS);
	if (r < 0)
		die("%s: waiting for the CQE: %s", what, kvs_strerror(r));
	t0 = now_ns() - t0;
	*ret = *cqe;
	kvs_cqe_seen(c, cqe);
	if (ret->res < 0)
		die("%s: %s", what, kvs_strerror(ret->res));
	return t0;
}

static uint64_t op_save(struct kvs_client *c, const uint8_t *keys, const uint32_t *ids, uint32_t n,
			uint64_t *ret_stored)
{
	struct kvs_sqe *sqe = sqe_get(c);
	struct kvs_cqe cqe;
	uint64_t ns;
	int r = kvs_prep_save(c, sqe, keys, ids, n, 1);

	if (r < 0)
		die("prep save: %s", kvs_strerror(r));
	ns = run_op(c, "SAVE", &cqe);
	if (ret_stored)
		*ret_stored = cqe.result0;
	return ns;
}

static uint64_t op_query(struct kvs_client *c, const uint8_t *keys, uint32_t n, uint32_t flags,
			 uint64_t *ret_lease, uint32_t *ret_hits)
{
	struct kvs_sqe *sqe;
	struct kvs_cqe cqe;
	uint64_t t0 = now_ns();
	int r;

	/* Timed from the prep: copying the keys in is part of what the engine pays. */
	sqe = sqe_get(c);
	r = kvs_prep_query(c, sqe, keys, n, 7, flags, 2);
	if (r < 0)
		die("prep query: %s", kvs_strerror(r));
	run_op(c, "QUERY", &cqe);
	*ret_lease = cqe.result0;
	*ret_hits = (uint32_t)cqe.res;
	return now_ns() - t0;
}

static uint64_t op_release(struct kvs_client *c, uint64_t lease)
{
	struct kvs_sqe *sqe = sqe_get(c);
	struct kvs_cqe cqe;
	int r = kvs_prep_release(c, sqe, lease, 3);

	if (r < 0)
		die("prep release: %s", kvs_strerror(r));
	return run_op(c, "RELEASE", &cqe);
}

static uint64_t op_load(struct kvs_client *c, uint64_t lease, const uint32_t *ids, uint32_t n)
{
	struct kvs_sqe *sqe = sqe_get(c);
	struct kvs_cqe cqe;
	int r = kvs_prep_load(c, sqe, lease, ids, n, 0, 0, 4);

	if (r < 0)
		die("prep load: %s", kvs_strerror(r));
	return run_op(c, "LOAD", &cqe);
}

static uint64_t op_nop(struct kvs_client *c)
{
	struct kvs_sqe *sqe = sqe_get(c);
	struct kvs_cqe cqe;

	kvs_prep_nop(c, sqe, 5);
	return run_op(c, "NOP", &cqe);
}

/*
 * A NOP whose completion the engine polls for instead of sleeping on: the
 * round trip without the engine's own wake-up, so after an idle gap it is
 * the worker's wake-up alone.
 */
static uint64_t op_nop_polling(struct kvs_client *c)
{
	struct kvs_sqe *sqe = sqe_get(c);
	uint64_t t0, deadline;
	struct kvs_cqe *cqe;
	int r;

	kvs_prep_nop(c, sqe, 5);
	t0 = now_ns();
	deadline = t0 + OP_TIMEOUT_MS * 1000000ull;
	kvs_submit(c);
	while ((r = kvs_peek_cqe(c, &cqe)) == -EAGAIN)
		if (now_ns() > deadline)
			die("NOP: no CQE within %d ms", OP_TIMEOUT_MS);
	t0 = now_ns() - t0;
	if (r < 0)
		die("NOP: %s", kvs_strerror(r));
	r = cqe->res;
	kvs_cqe_seen(c, cqe);
	if (r < 0)
		die("NOP: %s", kvs_strerror(r));
	return t0;
}

/* QUERY all @n keys with a lease; every one must hit. */
static uint64_t lease_all(struct kvs_client *c, const uint8_t *keys, uint32_t n)
{
	uint64_t lease;
	uint32_t hits;

	op_query(c, keys, n, 0, &lease, &hits);
	if (hits != n)
		die("QUERY found %u of %u blocks just saved (pool too small? --pool-size)", hits,
		    n);
	return lease;
}

/* One message of a STATS reply: its type, where it goes and its size. */
struct stats_want {
	uint32_t type;
	void *ret;
	size_t size;
};

static int stats_cb(void *arg, const struct kvs_msg_hdr *m)
{
	const struct stats_want *w = arg;

	if (m->type == w->type)
		memcpy(w->ret, m, w->size);
	return 0;
}

/* Message @type of kvstashd's STATS reply, through an admin session (zero if absent). */
static void stats_msg(struct kvs_client *admin, uint32_t type, void *ret, size_t size)
{
	struct stats_want w = { type, ret, size };
	int r;

	memset(ret, 0, size);
	r = kvs_admin_request(admin, KVS_MSG_STATS, stats_cb, &w);
	if (r < 0)
		die("STATS: %s", kvs_strerror(r));
}

/* kvstashd's global counters. */
static void daemon_stats(struct kvs_client *admin, struct kvs_msg_stats_global *ret)
{
	stats_msg(admin, KVS_MSG_STATS_GLOBAL, ret, sizeof(*ret));
}

static struct kvs_client *admin_open(const struct daemon *d)
{
	struct kvs_connect_opts o;
	struct kvs_client *c;
	int r;

	kvs_connect_opts_init(&o);
	o.role = KVS_ROLE_ADMIN;
	o.log = log_cb;
	o.timeout_ms = 300000;
	r = kvs_connect(d->sock, &o, &c);
	if (r < 0)
		die("admin connect %s: %s", d->sock, kvs_strerror(r));
	return c;
}

/* ---- output ---------------------------------------------------------------- */

/*
 * Rows with a target (issue 16's, on a host like the one in
 * docs/PERFORMANCE.md): each says ok or SHORT, and the run ends with the
 * list of those that fell short, so an operator checking a new host sees
 * at once what to look into.
 */
#define MAX_SHORT 64
static char short_rows[MAX_SHORT][160];
static unsigned nr_checked, nr_short;

static const char *__attribute__((format(printf, 2, 3))) verdict(bool ok, const char *fmt, ...)
{
	va_list ap;

	nr_checked++;
	if (ok)
		return "ok";
	if (nr_short < MAX_SHORT) {
		va_start(ap, fmt);
		vsnprintf(short_rows[nr_short], sizeof(short_rows[0]), fmt, ap);
		va_end(ap);
	}
	nr_short++;
	return "SHORT";
}

/*
 * A spawned daemon's start-up: each pool region's "ready" line from its
 * log, the rate against the target for pools of 16 GiB or more (smaller
 * ones are mostly fixed costs): 15 GB/s with transparent hugepages, 30
 * with hugetlb pages, faulted and pinned by the region's threads.
 */
static void pool_ready_rows(const struct daemon *d)
{
	char line[1024];
	FILE *f;

	/* daemon_spawn() waited for a HELLO's answer: every pool line is there. */
	f = fopen(d->log, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "pool: node ");
		int node;
		unsigned long long mib;
		double secs, rate;
		bool huge;
		const char *met;

		if (!p || sscanf(p, "pool: node %d: %llu MiB ready in %lf s = %lf GB/s", &node, &mib,
				 &secs, &rate) != 4)
			continue;
		huge = strstr(p, "hugetlb") != NULL;
		met = mib < 16 * 1024 ? "-"
				      : verdict(rate >= (huge ? 30 : 15),
						"pool ready, daemon %s, node %d: %.1f GB/s with %s, "
						"target %d",
						d->label, node, rate, huge ? "hugetlb pages" : "THP",
						huge ? 30 : 15);
		line[strcspn(line, "\n")] = '\0';
		if (O.json)
			printf("{\"test\":\"pool\",\"daemon\":\"%s\",\"node\":%d,\"mib\":%llu,"
			       "\"seconds\":%.3f,\"gbs\":%.2f,\"hugetlb\":%s,\"target_gbs\":%d}\n",
			       d->label, node, mib, secs, rate, huge ? "true" : "false",
			       mib < 16 * 1024 ? 0 : huge ? 30 : 15);
		else
			printf("pool ready (%s; target >= %d GB/s from 16 GiB: %s): %s\n", d->label,
			       huge ? 30 : 15, met, p);
	}
	fclose(f);
}

static void verdict_summary(void)
{
	if (O.json) {
		printf("{\"test\":\"targets\",\"checked\":%u,\"short\":%u}\n", nr_checked,
		       nr_short);
		return;
	}
	if (!nr_checked)
		return;
	if (!nr_short) {
		printf("\nevery one of the %u rows with a target met it\n", nr_checked);
		return;
	}
	printf("\n%u of the %u rows with a target fell short:\n", nr_short, nr_checked);
	for (unsigned i = 0; i < nr_short && i < MAX_SHORT; i++)
		printf("  %s\n", short_rows[i]);
	if (nr_short > MAX_SHORT)
		printf("  (and %u more)\n", nr_short - MAX_SHORT);
}

static void table_head(const char *title, const char *const *cols, const int *widths, unsigned n)
{
	if (O.json)
		return;
	printf("\n%s\n\n|", title);
	for (unsigned i = 0; i < n; i++)
		printf(" %*s |", widths[i], cols[i]);
	printf("\n|");
	for (unsigned i = 0; i < n; i++) {
		for (int k = 0; k < widths[i] + 2; k++)
			putchar(i && k == widths[i] + 1 ? ':' : '-');
		putchar('|');
	}
	printf("\n");
	fflush(stdout);
}

/* ---- section: copy throughput ------------------------------------------- */

struct copy_res {
	double d_gbs, b_gbs; /* medians */
	double in_gbs;	     /* kvstashd's own timing of each op (STATS), median */
	double d_p10, d_p90; /* spread of the daemon's rate, GB/s */
	uint64_t d_p50_ns;
	unsigned reps;
};

static double gbs(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0;
}

/*
 * The share of its direction's ceiling a GPU copy row should reach
 * (issue 16's targets, for the layouts' default shapes); 0: none.  `auto`
 * is what an operator runs; `batch` is the mover that costs the engine
 * nothing, the fragmented loads' alternative to the kernel.  Batches
 * below 512 blocks are held to the 32-block target.
 */
static double copy_target(const struct daemon *d, const struct kv *kv, uint32_t batch,
			  const char *dir)
{
	const char *m = strncmp(d->label, "mover=", 6) ? "auto" : d->label + 6;
	bool page = !strcmp(kv->li->name, "page"), big = batch >= 512;

	if (!O.gpu_shapes || (strcmp(m, "auto") && strcmp(m, "batch")))
		return 0;
	if (page)
		return strcmp(m, "auto") ? 0 : big ? 0.94 : 0.92;
	if (!strcmp(dir, "load") && !strcmp(m, "auto"))
		return 0.90; /* the gather kernel */
	return big ? 0.70 : 0.40;
}

static void copy_row(const struct daemon *d, const struct kv *kv, uint32_t batch, const char *dir,
		     const struct copy_res *r, uint32_t pieces)
{
	char lb[16], bb[16], spread[32];
	double ratio = r->b_gbs > 0 ? r->d_gbs / r->b_gbs : 0;
	const char *mark = kv->layer_bytes < 64 * KiB ? "" : ratio >= 0.8 ? " ok" : " !!";
	/* A GPU row as a fraction of the contiguous cudaMemcpy ceiling of its direction. */
	double ceil = !strcmp(dir, "save") ? ceil_d2h : ceil_h2d;
	double of_ceiling = ceil > 0 ? r->d_gbs / ceil : 0;
	double target = ceil > 0 ? copy_target(d, kv, batch, dir) : 0;
	const char *met = target > 0 ? verdict(of_ceiling >= target,
					       "copy %s %s, %u blocks, %s: %.2f of the ceiling, "
					       "target %.2f",
					       d->label, kv->li->name, batch, dir, of_ceiling, target)
				     : "";

	fmt_size(lb, sizeof(lb), kv->layer_bytes);
	fmt_size(bb, sizeof(bb), kv->block_bytes);
	if (O.json) {
		printf("{\"test\":\"copy\",\"daemon\":\"%s\",\"backend\":\"%s\",\"layout\":\"%s\","
		       "\"layer_bytes\":%" PRIu64 ",\"block_bytes\":%" PRIu64 ",\"batch\":%u,"
		       "\"pieces_per_block\":%.1f,\"op\":\"%s\",\"gbs\":%.3f,\"gbs_p10\":%.3f,"
		       "\"gbs_p90\":%.3f,\"op_p50_ns\":%" PRIu64 ",\"baseline\":\"%s\","
		       "\"baseline_gbs\":%.3f,\"ratio\":%.3f,\"in_daemon_gbs\":%.3f,"
		       "\"of_ceiling\":%.3f,\"target\":%.2f,\"reps\":%u}\n",
		       d->label, O.be->name, kv->li->name, kv->layer_bytes, kv->block_bytes, batch,
		       (double)pieces / batch, dir, r->d_gbs, r->d_p10, r->d_p90, r->d_p50_ns,
		       O.be->baseline, r->b_gbs, ratio, r->in_gbs, of_ceiling, target, r->reps);
	} else {
		snprintf(spread, sizeof(spread), "%.2f-%.2f", r->d_p10, r->d_p90);
		printf("| %-6s | %5s | %7s | %6.1f | %5u | %-4s | %8.2f | %11s | %9.2f | %8.2f |"
		       " %5.2f%-3s | %9.2f | %4u |",
		       kv->li->name, lb, bb, (double)pieces / batch, batch, dir, r->d_gbs, spread,
		       r->in_gbs, r->b_gbs, ratio, mark, (double)r->d_p50_ns / 1e6, r->reps);
		if (ceil_d2h > 0)
			printf(" %5.2f %-5s |", of_ceiling, met);
		printf("\n");
	}
	fflush(stdout);
}

static void copy_summarise(uint64_t bytes, uint64_t *dns, uint64_t *bns, unsigned n,
			   struct copy_res *r)
{
	r->reps = n;
	r->d_p50_ns = quantile(dns, n, 0.5);
	r->d_gbs = gbs(bytes, r->d_p50_ns);
	/* Slow times are low rates: p90 of time is p10 of rate. */
	r->d_p10 = gbs(bytes, quantile(dns, n, 0.9));
	r->d_p90 = gbs(bytes, quantile(dns, n, 0.1));
	r->b_gbs = gbs(bytes, quantile(bns, n, 0.5));
}

static uint64_t key_space;

static void bench_copy_one(const struct daemon *d, enum lay_kind kind, uint64_t S)
{
	uint64_t block_bytes = (uint64_t)LAYS[kind].layers * S, rng = O.seed ^ (kind * 131 + S);
	uint32_t maxb = 0, *perm, *perm2;
	struct kvs_client *c, *admin;
	struct kvs_msg_stats_global st0, st1;
	struct piece *pieces;
	uint8_t *keys, *staging;
	uint64_t staging_bytes, nwin;
	struct kv kv;
	char tag[48];
	int r;

	for (unsigned i = 0; i < O.nbatches; i++)
		if (O.batches[i] * block_bytes <= O.max_batch_bytes && O.batches[i] > maxb)
			maxb = (uint32_t)O.batches[i];
	if (maxb == 0)
		return;
	r = kv_alloc(&kv, O.be, kind, S, maxb);
	if (r < 0)
		die("engine memory for %s x %u blocks: %s", LAYS[kind].name, maxb, strerror(-r));
	snprintf(tag, sizeof(tag), "%s-%" PRIu64, LAYS[kind].name, S);
	c = client_open(d, tag);
	client_register(c, &kv);
	admin = admin_open(d);
	keys = xcalloc(maxb, 16);
	perm = xcalloc(maxb, sizeof(*perm));
	perm2 = xcalloc(maxb, sizeof(*perm2));
	pieces = xcalloc((size_t)maxb * kv.li->layers * kv.li->segments, sizeof(*pieces));
	/* Whole batches, together larger than the LLC: the baseline writes to cold lines. */
	staging_bytes = (uint64_t)maxb * kv.slot_bytes;
	nwin = staging_bytes >= STAGING_MIN ? 1 : (STAGING_MIN + staging_bytes - 1) / staging_bytes;
	staging = O.be->staging_alloc(staging_bytes * nwin);
	if (!staging)
		die("out of memory for the baseline's buffer");

	for (unsigned bi = 0; bi < O.nbatches; bi++) {
		uint32_t B = (uint32_t)O.batches[bi], np;
		uint64_t bytes = (uint64_t)B * kv.block_bytes, iter = 0, lease;
		uint64_t *dns, *bns, *ins, stored;
		unsigned reps;
		struct copy_res res;
		uint8_t *chk_src, *chk_dst;

		if (bytes > O.max_batch_bytes)
			continue;
		/* Enough samples for a stable median, more for small batches. */
		reps = O.reps;
		if (bytes * reps < 512 * MiB)
			reps = (unsigned)(512 * MiB / bytes);
		reps = reps > 200 ? 200 : reps;
		dns = xcalloc(reps, sizeof(*dns));
		bns = xcalloc(reps, sizeof(*bns));
		ins = xcalloc(reps, sizeof(*ins));
		/* B distinct blocks out of maxb, in random order; loads go elsewhere. */
		for (uint32_t i = 0; i < maxb; i++)
			perm[i] = perm2[i] = i;
		shuffle(perm, maxb, &rng);
		shuffle(perm2, maxb, &rng);
		key_space++;

		/* Warm up: fault in mappings on both sides, check one block round trips. */
		chk_src = xcalloc(1, kv.block_bytes);
		chk_dst = xcalloc(1, kv.block_bytes);
		for (int w = 0; w < 2; w++) {
			make_keys(keys, B, key_space, iter++);
			op_save(c, keys, perm, B, &stored);
			if (stored != B)
				die("warm-up SAVE stored %" PRIu64 " of %u", stored, B);
			lease = lease_all(c, keys, B);
			op_load(c, lease, perm, B); /* the same blocks: contents unchanged */
			np = kv_pieces(&kv, perm, B, staging, pieces);
			O.be->copy(DIR_SAVE, pieces, np);
			O.be->copy(DIR_LOAD, pieces, np);
		}
		for (unsigned l = 0; l < kv.li->layers; l++)
			for (unsigned s = 0; s < kv.li->segments; s++) {
				uint64_t off = ((uint64_t)l * kv.li->segments + s) * kv.seg_bytes;
				const struct kvs_layer *y = &kv.lays[l];
				uint64_t a = kv_eng(&kv, l, perm[0], s) - kv.mems[y->mem].addr;

				O.be->mem_read(&kv.mems[y->mem], a, chk_src + off, kv.seg_bytes);
			}
		lease = lease_all(c, keys, B);
		op_load(c, lease, perm2, B);
		for (unsigned l = 0; l < kv.li->layers; l++)
			for (unsigned s = 0; s < kv.li->segments; s++) {
				uint64_t off = ((uint64_t)l * kv.li->segments + s) * kv.seg_bytes;
				const struct kvs_layer *y = &kv.lays[l];
				uint64_t a = kv_eng(&kv, l, perm2[0], s) - kv.mems[y->mem].addr;

				O.be->mem_read(&kv.mems[y->mem], a, chk_dst + off, kv.seg_bytes);
			}
		if (memcmp(chk_src, chk_dst, kv.block_bytes))
			die("%s S=%" PRIu64 ": a loaded block differs from the saved one",
			    kv.li->name, S);
		free(chk_src);
		free(chk_dst);

		/*
		 * SAVE: fresh keys every time, so every block is copied.  Who
		 * goes first alternates: the second finds the source warmer.
		 */
		for (unsigned i = 0; i < reps; i++) {
			uint8_t *win = staging + (i % nwin) * staging_bytes;

			np = kv_pieces(&kv, perm, B, win, pieces);
			if (i % 2) {
				bns[i] = now_ns();
				O.be->copy(DIR_SAVE, pieces, np);
				bns[i] = now_ns() - bns[i];
			}
			make_keys(keys, B, key_space, iter++);
			daemon_stats(admin, &st0);
			dns[i] = op_save(c, keys, perm, B, &stored);
			daemon_stats(admin, &st1);
			ins[i] = st1.save_ns - st0.save_ns;
			if (stored != B)
				die("SAVE stored %" PRIu64 " of %u (skipped or no space)", stored,
				    B);
			if (!(i % 2)) {
				bns[i] = now_ns();
				O.be->copy(DIR_SAVE, pieces, np);
				bns[i] = now_ns() - bns[i];
			}
		}
		copy_summarise(bytes, dns, bns, reps, &res);
		res.in_gbs = gbs(bytes, quantile(ins, reps, 0.5));
		copy_row(d, &kv, B, "save", &res, np);

		/* LOAD the blocks of the last SAVE into other engine blocks; a lease each time. */
		for (unsigned i = 0; i < reps; i++) {
			uint8_t *win = staging + ((reps - 1) % nwin) * staging_bytes;

			np = kv_pieces(&kv, perm2, B, win, pieces);
			if (i % 2) {
				bns[i] = now_ns();
				O.be->copy(DIR_LOAD, pieces, np);
				bns[i] = now_ns() - bns[i];
			}
			lease = lease_all(c, keys, B);
			daemon_stats(admin, &st0);
			dns[i] = op_load(c, lease, perm2, B);
			daemon_stats(admin, &st1);
			ins[i] = st1.load_ns - st0.load_ns;
			if (!(i % 2)) {
				bns[i] = now_ns();
				O.be->copy(DIR_LOAD, pieces, np);
				bns[i] = now_ns() - bns[i];
			}
		}
		copy_summarise(bytes, dns, bns, reps, &res);
		res.in_gbs = gbs(bytes, quantile(ins, reps, 0.5));
		copy_row(d, &kv, B, "load", &res, np);
		free(dns);
		free(bns);
		free(ins);
	}
	O.be->staging_free(staging, staging_bytes * nwin);
	free(pieces);
	free(perm);
	free(perm2);
	free(keys);
	kvs_close(admin);
	client_close(c);
	kv_free(&kv);
}

static void section_copy(const struct daemon *d)
{
	static const int widths[] = { 6, 5, 7, 6, 5, 4, 8, 11, 9, 8, 8, 9, 4, 11 };
	const char *cols[] = { "layout",   "S",	       "block",	  "pieces",    "batch",
			       "op",	   "kvstashd", "p10-p90", "in-daemon", "baseline",
			       "ratio",	   "op p50 ms", "reps",	  "ceiling" };
	char title[1024];

	snprintf(title, sizeof(title),
		 "SAVE / LOAD throughput in GB/s, backend %s, daemon %s: each op timed from "
		 "submit to its CQE, median (p10-p90 of kvstashd's rate); baseline = %s of "
		 "the same pieces in this process.\nS = bytes per layer of a block; pieces = "
		 "copies per block after coalescing; in-daemon = bytes / copy time as kvstashd "
		 "times it (STATS around each op: from the start of the copy to its completion, "
		 "without the two wake-ups), median;\nratio = kvstashd / baseline (target >= "
		 "0.80 for S >= 64K: ok / !!)%s",
		 O.be->name, d->label, O.be->baseline,
		 ceil_d2h > 0 ? ";\nceiling = kvstashd / the contiguous cudaMemcpy rate of the "
				"op's direction measured at the start of this run, ok / SHORT against "
				"the row's target (auto: page-first 0.92 at 32 blocks, 0.94 at 512; "
				"split and MLA saves 0.40 / 0.70, loads 0.90; batch: split and MLA "
				"0.40 / 0.70)" : "");
	table_head(title, cols, widths, ceil_d2h > 0 ? 14 : 13);
	for (unsigned k = 0; k < LAY_NR; k++) {
		if (!O.layouts[k])
			continue;
		/* GPU defaults: the shapes, 64 KiB per layer, MLA 41 KiB. */
		if (O.gpu_shapes) {
			bench_copy_one(d, (enum lay_kind)k, k == LAY_MLA ? 41 * KiB : 64 * KiB);
			continue;
		}
		for (unsigned s = 0; s < O.nsizes; s++)
			bench_copy_one(d, (enum lay_kind)k, O.sizes[s]);
	}
}

#if HAVE_CUDA
/* ---- GPU-only sections --------------------------------------------------- */

/* Best of @reps timings of one contiguous copy (or two, one per direction, at once). */
static void cuda_ceilings(void)
{
	const uint64_t size = 1 * GiB;
	cudaStream_t s2;
	cudaEvent_t a, b;
	void *d1, *d2, *h1, *h2;
	float best[3] = { 1e30f, 1e30f, 1e30f };

	CUDA_OK(cudaMalloc(&d1, size));
	CUDA_OK(cudaMalloc(&d2, size));
	CUDA_OK(cudaHostAlloc(&h1, size, cudaHostAllocDefault));
	CUDA_OK(cudaHostAlloc(&h2, size, cudaHostAllocDefault));
	memset(h1, 1, size);
	memset(h2, 2, size);
	CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CUDA_OK(cudaEventCreate(&a));
	CUDA_OK(cudaEventCreate(&b));
	for (int rep = 0; rep < 6; rep++) {
		float ms;
		uint64_t t0;

		CUDA_OK(cudaEventRecord(a, cuda_stream));
		CUDA_OK(cudaMemcpyAsync(h1, d1, size, cudaMemcpyDeviceToHost, cuda_stream));
		CUDA_OK(cudaEventRecord(b, cuda_stream));
		CUDA_OK(cudaEventSynchronize(b));
		CUDA_OK(cudaEventElapsedTime(&ms, a, b));
		if (rep && ms < best[0])
			best[0] = ms;
		CUDA_OK(cudaEventRecord(a, cuda_stream));
		CUDA_OK(cudaMemcpyAsync(d1, h1, size, cudaMemcpyHostToDevice, cuda_stream));
		CUDA_OK(cudaEventRecord(b, cuda_stream));
		CUDA_OK(cudaEventSynchronize(b));
		CUDA_OK(cudaEventElapsedTime(&ms, a, b));
		if (rep && ms < best[1])
			best[1] = ms;
		/* Both directions at once, on two streams: the two-way ceiling. */
		CUDA_OK(cudaDeviceSynchronize());
		t0 = now_ns();
		CUDA_OK(cudaMemcpyAsync(h1, d1, size, cudaMemcpyDeviceToHost, cuda_stream));
		CUDA_OK(cudaMemcpyAsync(d2, h2, size, cudaMemcpyHostToDevice, s2));
		CUDA_OK(cudaDeviceSynchronize());
		ms = (float)((now_ns() - t0) / 1e6);
		if (rep && ms < best[2])
			best[2] = ms;
	}
	ceil_d2h = (double)size / ((double)best[0] * 1e6);
	ceil_h2d = (double)size / ((double)best[1] * 1e6);
	ceil_both = 2.0 * (double)size / ((double)best[2] * 1e6);
	cudaFree(d1);
	cudaFree(d2);
	cudaFreeHost(h1);
	cudaFreeHost(h2);
	cudaStreamDestroy(s2);
	if (O.json)
		printf("{\"test\":\"ceiling\",\"d2h_gbs\":%.2f,\"h2d_gbs\":%.2f,\"both_gbs\":%.2f}\n",
		       ceil_d2h, ceil_h2d, ceil_both);
	else
		printf("\nContiguous pinned cudaMemcpyAsync of 1 GiB, best of 5: D2H %.2f GB/s, "
		       "H2D %.2f GB/s, both at once %.2f GB/s\n",
		       ceil_d2h, ceil_h2d, ceil_both);
}

/*
 * SAVE and LOAD at once on one session (the worker's save and load streams
 * run in parallel): page-first, batches of @B, against the two-way ceiling.
 */
static void cuda_both(const struct daemon *d, uint32_t B)
{
	const uint64_t S = 64 * KiB;
	struct kvs_client *c;
	struct kv kv;
	uint8_t *k1 = xcalloc(B, 16), *k2 = xcalloc(B, 16);
	uint32_t *save_ids = xcalloc(B, 4), *load_ids = xcalloc(B, 4);
	uint64_t *t = xcalloc(O.reps * 2, sizeof(*t)), iter = 0, bytes, lease;
	uint64_t *ts = xcalloc(O.reps * 2, sizeof(*ts)), *tl = xcalloc(O.reps * 2, sizeof(*tl));
	unsigned reps = O.reps * 2;
	const char *met;
	double g;

	if (kv_alloc(&kv, O.be, LAY_PAGE, S, 2 * B) < 0)
		die("engine memory for the concurrent test");
	c = client_open(d, "both");
	client_register(c, &kv);
	for (uint32_t i = 0; i < B; i++) {
		save_ids[i] = 2 * i;
		load_ids[i] = 2 * i + 1;
	}
	key_space++;
	make_keys(k2, B, key_space, iter++);
	op_save(c, k2, save_ids, B, NULL); /* what the loads read */
	bytes = 2ull * B * kv.block_bytes;
	for (unsigned i = 0; i < reps; i++) {
		struct kvs_sqe *sqe;
		struct kvs_cqe *cqe;
		uint64_t t0;

		lease = lease_all(c, k2, B);
		make_keys(k1, B, key_space, iter++);
		t0 = now_ns();
		sqe = sqe_get(c);
		if (kvs_prep_save(c, sqe, k1, save_ids, B, 1) < 0)
			die("prep save");
		sqe = sqe_get(c);
		if (kvs_prep_load(c, sqe, lease, load_ids, B, 0, 0, 2) < 0)
			die("prep load");
		kvs_submit(c);
		for (int n = 0; n < 2; n++) {
			if (kvs_wait_cqe(c, &cqe, OP_TIMEOUT_MS) < 0 || cqe->res < 0)
				die("concurrent SAVE/LOAD failed");
			/* Each operation's own time: which of the two ends late. */
			(cqe->user_data == 1 ? ts : tl)[i] = now_ns() - t0;
			kvs_cqe_seen(c, cqe);
		}
		t[i] = now_ns() - t0;
	}
	g = gbs(bytes, quantile(t, reps, 0.5));
	met = verdict(g / ceil_both >= 0.90,
		      "SAVE+LOAD %s, %u + %u blocks: %.2f of the two-way ceiling, target 0.90",
		      d->label, B, B, g / ceil_both);
	if (O.json)
		printf("{\"test\":\"save+load\",\"daemon\":\"%s\",\"layout\":\"page\",\"batch\":%u,"
		       "\"gbs\":%.3f,\"both_ceiling_gbs\":%.3f,\"of_ceiling\":%.3f,\"target\":0.90}\n",
		       d->label, B, g, ceil_both, g / ceil_both);
	else
		printf("SAVE+LOAD at once, page-first 36 x 64K, %u + %u blocks: %.2f GB/s = %.2f of "
		       "the two-way ceiling (%.2f GB/s; target >= 0.90: %s); p50 SAVE's CQE %.3f "
		       "ms, LOAD's %.3f ms, both %.3f ms, at the ceiling %.3f ms\n",
		       B, B, g, g / ceil_both, ceil_both, met, quantile(ts, reps, 0.5) / 1e6,
		       quantile(tl, reps, 0.5) / 1e6, quantile(t, reps, 0.5) / 1e6,
		       (double)bytes / ceil_both / 1e6);
	client_close(c);
	kv_free(&kv);
	free(k1);
	free(k2);
	free(save_ids);
	free(load_ids);
	free(t);
	free(ts);
	free(tl);
}

/*
 * Interference: an engine process (forked before this process touched
 * CUDA) runs a compute-bound kernel loop; it reports kernels per second
 * alone, and while this process keeps kvstashd saving and loading at full
 * speed through another session.
 */
struct engine_proc {
	pid_t pid;
	int cmd, res;
};

static struct engine_proc engine;

static void engine_main(int cmd, int res)
{
	uint64_t ms;
	int iters = 20000, r = gpu_init();

	if (r)
		_exit(r);
	/* Calibrate: about a millisecond per kernel when alone. */
	for (int k = 0; k < 8; k++) {
		uint64_t t0 = now_ns();

		gpu_spin(1056, iters);
		gpu_sync();
		t0 = now_ns() - t0;
		if (t0 > 0)
			iters = (int)((double)iters * 1e6 / (double)t0) + 1;
	}
	while (read(cmd, &ms, sizeof(ms)) == sizeof(ms)) {
		uint64_t t0 = now_ns(), n = 0, out[2];

		while (now_ns() - t0 < ms * 1000000) {
			gpu_spin(1056, iters);
			gpu_sync();
			n++;
		}
		out[0] = n;
		out[1] = now_ns() - t0;
		if (write(res, out, sizeof(out)) != sizeof(out))
			break;
	}
	_exit(0);
}

static void engine_start(void)
{
	int a[2], b[2];

	if (pipe(a) || pipe(b))
		die("pipe");
	engine.pid = fork();
	if (engine.pid < 0)
		die("fork");
	if (engine.pid == 0) {
		close(a[1]);
		close(b[0]);
		engine_main(a[0], b[1]);
	}
	close(a[0]);
	close(b[1]);
	engine.cmd = a[1];
	engine.res = b[0];
}

/* Kernels per second of the engine over @ms. */
static double engine_rate(uint64_t ms)
{
	uint64_t out[2];

	if (write(engine.cmd, &ms, sizeof(ms)) != sizeof(ms) ||
	    read(engine.res, out, sizeof(out)) != sizeof(out))
		die("the compute engine process failed");
	return out[1] ? out[0] * 1e9 / out[1] : 0;
}

struct traffic {
	const struct daemon *d;
	enum lay_kind kind;
	volatile int stop;
	uint64_t bytes, ns;
};

static void *traffic_main(void *arg)
{
	struct traffic *t = arg;
	const uint32_t B = 32;
	struct kvs_client *c;
	struct kv kv;
	uint8_t *k1 = xcalloc(B, 16), *k2 = xcalloc(B, 16);
	uint32_t *save_ids = xcalloc(B, 4), *load_ids = xcalloc(B, 4);
	uint64_t iter = 0, t0;

	if (kv_alloc(&kv, O.be, t->kind, 64 * KiB, 2 * B) < 0)
		die("engine memory for the traffic");
	c = client_open(t->d, "traffic");
	client_register(c, &kv);
	for (uint32_t i = 0; i < B; i++) {
		save_ids[i] = 2 * i;
		load_ids[i] = 2 * i + 1;
	}
	key_space++;
	make_keys(k2, B, key_space, iter++);
	op_save(c, k2, save_ids, B, NULL);
	t0 = now_ns();
	while (!t->stop) {
		uint64_t lease = lease_all(c, k2, B);
		struct kvs_sqe *sqe = sqe_get(c);
		struct kvs_cqe *cqe;

		make_keys(k1, B, key_space, iter++);
		kvs_prep_save(c, sqe, k1, save_ids, B, 1);
		sqe = sqe_get(c);
		kvs_prep_load(c, sqe, lease, load_ids, B, 0, 0, 2);
		kvs_submit(c);
		for (int n = 0; n < 2; n++) {
			if (kvs_wait_cqe(c, &cqe, OP_TIMEOUT_MS) < 0)
				die("traffic: no CQE");
			kvs_cqe_seen(c, cqe);
		}
		t->bytes += 2ull * B * kv.block_bytes;
	}
	t->ns = now_ns() - t0;
	client_close(c);
	kv_free(&kv);
	free(k1);
	free(k2);
	free(save_ids);
	free(load_ids);
	return NULL;
}

/* The engine's kernel rate alone and while kvstashd saves and loads @kind blocks at once. */
static void cuda_interference(const struct daemon *d, const char *mover, enum lay_kind kind)
{
	struct traffic t = { d, kind, 0, 0, 0 };
	double alone, busy, alone2;
	pthread_t th;

	alone = engine_rate(2000);
	if (pthread_create(&th, NULL, traffic_main, &t))
		die("pthread_create");
	usleep(300000); /* registered and copying */
	busy = engine_rate(2000);
	t.stop = 1;
	pthread_join(th, NULL);
	alone2 = engine_rate(1000);
	alone = (alone + alone2) / 2;
	if (O.json)
		printf("{\"test\":\"interference\",\"daemon\":\"%s\",\"mover\":\"%s\","
		       "\"layout\":\"%s\",\"engine_kernels_per_s_alone\":%.1f,"
		       "\"engine_kernels_per_s_busy\":%.1f,\"slowdown\":%.4f,\"kvstashd_gbs\":%.3f}\n",
		       d->label, mover, LAYS[kind].name, alone, busy, 1 - busy / alone,
		       gbs(t.bytes, t.ns));
	else
		printf("Interference, mover %s: engine %.1f kernels/s alone, %.1f while kvstashd "
		       "saves+loads %s at %.2f GB/s (%+.1f %%)\n",
		       mover, alone, busy, LAYS[kind].name, gbs(t.bytes, t.ns),
		       100.0 * (busy / alone - 1));
}
#endif

/* ---- section: QUERY latency ------------------------------------------------ */

/* A namespace holding @n chained keys, all resident; a tiny block each. */
struct resident {
	struct kvs_client *c;
	struct kv kv;
	uint8_t *keys;
	uint32_t n;
};

static void resident_make(const struct daemon *d, struct resident *rs, uint32_t n)
{
	const uint32_t per = 4096;
	uint32_t *ids = xcalloc(per, sizeof(*ids));
	int r;

	memset(rs, 0, sizeof(*rs));
	/*
	 * QUERY never touches block bytes, so one 1 KiB layer keeps the pool
	 * and the engine memory small at 32768 blocks.
	 */
	r = kv_alloc(&rs->kv, O.be, LAY_TINY, 1 * KiB, n);
	if (r < 0)
		die("engine memory for the query test: %s", strerror(-r));
	rs->c = client_open(d, "query");
	client_register(rs->c, &rs->kv);
	rs->n = n;
	rs->keys = xcalloc(n, 16);
	key_space++;
	make_keys(rs->keys, n, key_space, 0);
	for (uint32_t i = 0; i < n; i += per) {
		uint32_t m = n - i < per ? n - i : per;
		uint64_t stored;

		for (uint32_t j = 0; j < m; j++)
			ids[j] = i + j;
		op_save(rs->c, rs->keys + 16 * (size_t)i, ids, m, &stored);
		if (stored != m)
			die("query set-up: SAVE stored %" PRIu64 " of %u", stored, m);
	}
	free(ids);
}

static void resident_free(struct resident *rs)
{
	client_close(rs->c);
	kv_free(&rs->kv);
	free(rs->keys);
}

static void section_query(const struct daemon *d)
{
	static const char *const cols[] = {
		"keys",	    "iters", "QUERY+lease",	"p99",		"RELEASE",    "p99",
		"no lease", "p99",   "CPU q+lease+rel", "CPU no lease", "CPU ns/key", "target",
	};
	static const int widths[] = { 6, 5, 11, 8, 8, 8, 8, 8, 15, 12, 10, 6 };
	uint32_t maxn = 0;
	struct resident rs;
	struct wcpu wc;
	char title[1024];

	for (unsigned i = 0; i < O.nquery; i++)
		maxn = O.query_keys[i] > maxn ? O.query_keys[i] : maxn;
	resident_make(d, &rs, maxn > O.query_resident ? maxn : O.query_resident);
	wcpu_open(d->pid, &wc);
	snprintf(title, sizeof(title),
		 "QUERY latency in us, daemon %s: %u resident blocks (1 KiB each), a QUERY asks "
		 "for a prefix of them and hits every key.\nWall p50 and p99 from the prep (the "
		 "key copy) to the CQE.  CPU = kvstashd's CPU time (process CPU clock, the "
		 "worker's spin included) per QUERY with a lease and its RELEASE, and per QUERY "
		 "without a lease, averaged over a loop of each: what the ops cost on an idle "
		 "core;\nCPU ns/key = the latter / keys.  Target: 32768 keys or more with a lease <= 1 ms "
		 "p50 (ok / SHORT)",
		 d->label, rs.n);
	table_head(title, cols, widths, 12);
	for (unsigned qi = 0; qi < O.nquery; qi++) {
		uint32_t n = O.query_keys[qi], hits;
		unsigned iters = n >= 4096 ? (O.query_iters + 9) / 10 : O.query_iters;
		uint64_t *v[3], lease, c0, cpu_pair, cpu_nl, r[6];
		const char *met;

		for (unsigned k = 0; k < 3; k++)
			v[k] = xcalloc(iters, sizeof(uint64_t));
		for (unsigned w = 0; w < 10; w++) {
			lease = lease_all(rs.c, rs.keys, n);
			op_release(rs.c, lease);
		}
		/* Two loops, so each CPU total belongs to one kind of op. */
		c0 = wcpu_ns(&wc);
		for (unsigned i = 0; i < iters; i++) {
			v[0][i] = op_query(rs.c, rs.keys, n, 0, &lease, &hits);
			if (hits != n)
				die("QUERY hit %u of %u resident keys", hits, n);
			v[1][i] = op_release(rs.c, lease);
		}
		cpu_pair = (wcpu_ns(&wc) - c0) / iters;
		c0 = wcpu_ns(&wc);
		for (unsigned i = 0; i < iters; i++) {
			v[2][i] = op_query(rs.c, rs.keys, n, KVS_QUERY_NOLEASE, &lease, &hits);
			if (hits != n)
				die("QUERY (no lease) hit %u of %u resident keys", hits, n);
		}
		cpu_nl = (wcpu_ns(&wc) - c0) / iters;
		for (unsigned k = 0; k < 3; k++) {
			r[2 * k] = quantile(v[k], iters, 0.5);
			r[2 * k + 1] = quantile(v[k], iters, 0.99);
		}
		met = n < 32768 ? ""
				: verdict(r[0] <= 1000000,
					  "QUERY %s, %u keys with a lease: %.2f ms p50, target 1 ms",
					  d->label, n, r[0] / 1e6);
		if (O.json)
			printf("{\"test\":\"query\",\"daemon\":\"%s\",\"keys\":%u,\"iters\":%u,"
			       "\"resident\":%u,\"lease_p50_ns\":%" PRIu64
			       ",\"lease_p99_ns\":%" PRIu64 ",\"release_p50_ns\":%" PRIu64
			       ",\"release_p99_ns\":%" PRIu64 ",\"nolease_p50_ns\":%" PRIu64
			       ",\"nolease_p99_ns\":%" PRIu64 ",\"cpu_lease_release_ns\":%" PRIu64
			       ",\"cpu_nolease_ns\":%" PRIu64 "}\n",
			       d->label, n, iters, rs.n, r[0], r[1], r[2], r[3], r[4], r[5],
			       cpu_pair, cpu_nl);
		else
			printf("| %6u | %5u | %11.1f | %8.1f | %8.1f | %8.1f | %8.1f | %8.1f |"
			       " %15.1f | %12.1f | %10.1f | %6s |\n",
			       n, iters, r[0] / 1e3, r[1] / 1e3, r[2] / 1e3, r[3] / 1e3, r[4] / 1e3,
			       r[5] / 1e3, cpu_pair / 1e3, cpu_nl / 1e3, (double)cpu_nl / n, met);
		fflush(stdout);
		for (unsigned k = 0; k < 3; k++)
			free(v[k]);
	}
	wcpu_close(&wc);
	resident_free(&rs);
}

/* ---- section: CPU cost ---------------------------------------------------- */

static void cpu_row(const struct daemon *d, const char *what, uint64_t units, const char *unit,
		    const struct cpu_snap *a, const struct cpu_snap *b, uint64_t wall,
		    uint64_t base_cpu)
{
	double tot = (double)(b->total - a->total) / units;
	double wk = (double)(b->worker - a->worker) / units;
	double cp = (double)(b->copy - a->copy) / units;
	double busy = wall ? 100.0 * (double)(b->total - a->total) / wall : 0;
	/* /proc counts in clock ticks: the parts may overshoot the whole by a tick. */
	double other = tot - wk - cp > 0 ? tot - wk - cp : 0;

	if (O.json) {
		printf("{\"test\":\"cpu\",\"daemon\":\"%s\",\"what\":\"%s\",\"unit\":\"%s\","
		       "\"units\":%" PRIu64 ",\"ns_per_unit\":%.1f,\"worker_ns\":%.1f,"
		       "\"copy_ns\":%.1f,\"other_ns\":%.1f,\"wall_ns\":%.1f,"
		       "\"daemon_cpu_pct\":%.1f,"
		       "\"baseline_ns\":%.1f}\n",
		       d->label, what, unit, units, tot, wk, cp, other, (double)wall / units, busy,
		       base_cpu ? (double)base_cpu / units : 0.0);
	} else {
		char bs[16] = "-";

		if (base_cpu)
			snprintf(bs, sizeof(bs), "%.0f", (double)base_cpu / units);
		printf("| %-30s | %-5s | %8" PRIu64 " | %9.0f | %9.0f | %9.0f | %7.0f | %9.0f |"
		       " %5.0f%% | %9s |\n",
		       what, unit, units, tot, wk, cp, other, (double)wall / units, busy, bs);
	}
	fflush(stdout);
}

static void cpu_copy(const struct daemon *d, enum lay_kind kind)
{
	uint64_t S = O.cpu_size, rng = O.seed ^ 0xc0ffee, iter = 0, t0, deadline, blocks = 0;
	uint64_t base_cpu = 0, stored, lease;
	uint32_t B = O.cpu_batch, *perm = xcalloc(B, sizeof(*perm));
	struct cpu_snap a, b;
	struct kvs_client *c;
	struct piece *pieces;
	uint8_t *keys = xcalloc(B, 16), *staging;
	struct kv kv;
	char what[64], tag[48];
	int r;

	r = kv_alloc(&kv, O.be, kind, S, B);
	if (r < 0)
		die("engine memory: %s", strerror(-r));
	snprintf(tag, sizeof(tag), "cpu-%s-%" PRIu64, LAYS[kind].name, S);
	c = client_open(d, tag);
	client_register(c, &kv);
	for (uint32_t i = 0; i < B; i++)
		perm[i] = i;
	shuffle(perm, B, &rng);
	pieces = xcalloc((size_t)B * kv.li->layers * kv.li->segments, sizeof(*pieces));
	staging = O.be->staging_alloc((uint64_t)B * kv.slot_bytes);
	if (!staging)
		die("out of memory for the baseline's buffer");
	key_space++;
	for (int w = 0; w < 3; w++) {
		make_keys(keys, B, key_space, iter++);
		op_save(c, keys, perm, B, NULL);
	}

	/* SAVE: back to back, fresh keys. */
	cpu_snap(d->pid, &a);
	t0 = now_ns();
	deadline = t0 + (uint64_t)(O.cpu_seconds * 1e9);
	do {
		make_keys(keys, B, key_space, iter++);
		op_save(c, keys, perm, B, &stored);
		blocks += B;
	} while (now_ns() < deadline);
	t0 = now_ns() - t0;
	cpu_snap(d->pid, &b);
	{
		uint32_t np = kv_pieces(&kv, perm, B, staging, pieces);
		uint64_t c0 = thread_cpu_ns();

		for (int i = 0; i < 20; i++)
			O.be->copy(DIR_SAVE, pieces, np);
		base_cpu = (thread_cpu_ns() - c0) * blocks / (20ull * B);
	}
	snprintf(what, sizeof(what), "save %s S=%" PRIu64 "K x%u", kv.li->name, S / KiB, B);
	cpu_row(d, what, blocks, "block", &a, &b, t0, base_cpu);

	/* LOAD of the last SAVE's blocks; each needs a lease (its QUERY is counted too). */
	blocks = 0;
	cpu_snap(d->pid, &a);
	t0 = now_ns();
	deadline = t0 + (uint64_t)(O.cpu_seconds * 1e9);
	do {
		lease = lease_all(c, keys, B);
		op_load(c, lease, perm, B);
		blocks += B;
	} while (now_ns() < deadline);
	t0 = now_ns() - t0;
	cpu_snap(d->pid, &b);
	{
		uint32_t np = kv_pieces(&kv, perm, B, staging, pieces);
		uint64_t c0 = thread_cpu_ns();

		for (int i = 0; i < 20; i++)
			O.be->copy(DIR_LOAD, pieces, np);
		base_cpu = (thread_cpu_ns() - c0) * blocks / (20ull * B);
	}
	snprintf(what, sizeof(what), "load %s S=%" PRIu64 "K x%u +QUERY", kv.li->name, S / KiB, B);
	cpu_row(d, what, blocks, "block", &a, &b, t0, base_cpu);

	O.be->staging_free(staging, (uint64_t)B * kv.slot_bytes);
	free(pieces);
	free(keys);
	free(perm);
	client_close(c);
	kv_free(&kv);
}

static void section_cpu(const struct daemon *d)
{
	static const char *const cols[] = {
		"run",	    "unit",  "units",	  "ns/unit", "worker",
		"copy thr", "other", "wall/unit", "busy",    "baseline"
	};
	static const int widths[] = { 30, 5, 8, 9, 9, 9, 7, 9, 6, 9 };
	struct resident rs;
	struct cpu_snap a, b;
	uint64_t t0, deadline, units;
	char title[512];

	if (d->pid <= 0) {
		fprintf(stderr, "kvstash-bench: cpu: the daemon's pid is unknown; skipped\n");
		return;
	}
	snprintf(title, sizeof(title),
		 "kvstashd CPU per unit, daemon %s (pid %d): utime+stime from /proc over ~%.1f s "
		 "of back-to-back ops, split by thread (worker = kvs-io, copy thr = kvs-copy); "
		 "wall/unit = elapsed time per unit; busy = daemon CPU / wall; baseline = this "
		 "process's CPU for %s of the same pieces",
		 d->label, (int)d->pid, O.cpu_seconds, O.be->baseline);
	table_head(title, cols, widths, 10);
	for (unsigned k = 0; k < LAY_NR; k++)
		if (O.layouts[k])
			cpu_copy(d, (enum lay_kind)k);

	resident_make(d, &rs, O.query_resident > 32768 ? O.query_resident : 32768);
	for (unsigned qi = 0; qi < 2; qi++) {
		uint32_t n = qi ? 32768 : 64, hits;
		uint64_t lease;
		char what[64];

		units = 0;
		cpu_snap(d->pid, &a);
		t0 = now_ns();
		deadline = t0 + (uint64_t)(O.cpu_seconds * 1e9);
		do {
			op_query(rs.c, rs.keys, n, 0, &lease, &hits);
			op_release(rs.c, lease);
			units += n;
		} while (now_ns() < deadline);
		t0 = now_ns() - t0;
		cpu_snap(d->pid, &b);
		snprintf(what, sizeof(what), "query %u +lease, release", n);
		cpu_row(d, what, units, "key", &a, &b, t0, 0);
	}
	units = 0;
	cpu_snap(d->pid, &a);
	t0 = now_ns();
	deadline = t0 + (uint64_t)(O.cpu_seconds * 1e9);
	do {
		op_nop(rs.c);
		units++;
	} while (now_ns() < deadline);
	t0 = now_ns() - t0;
	cpu_snap(d->pid, &b);
	cpu_row(d, "nop", units, "op", &a, &b, t0, 0);
	resident_free(&rs);
}

/* ---- section: round trips ------------------------------------------------- */

/* A round-trip row; with @p99_target_ns, p99 against it (ok / SHORT). */
static void rtt_row(const struct daemon *d, const char *what, uint64_t *v, unsigned n,
		    uint64_t p99_target_ns)
{
	uint64_t p50 = quantile(v, n, 0.5), p99 = quantile(v, n, 0.99),
		 p999 = quantile(v, n, 0.999);
	const char *met = !p99_target_ns ? ""
			  : verdict(p99 <= p99_target_ns, "%s, daemon %s: p99 %.1f us, target %.0f us",
				    what, d->label, p99 / 1e3, p99_target_ns / 1e3);

	if (O.json)
		printf("{\"test\":\"rtt\",\"daemon\":\"%s\",\"what\":\"%s\",\"iters\":%u,"
		       "\"p50_ns\":%" PRIu64 ",\"p99_ns\":%" PRIu64 ",\"p999_ns\":%" PRIu64
		       ",\"p99_target_ns\":%" PRIu64 "}\n",
		       d->label, what, n, p50, p99, p999, p99_target_ns);
	else
		printf("| %-52s | %6u | %9.2f | %9.2f | %9.2f | %6s |\n", what, n, p50 / 1e3,
		       p99 / 1e3, p999 / 1e3, met);
	fflush(stdout);
}

/* A 64-byte message to a forked echo process over a SOCK_SEQPACKET socketpair. */
static void unix_rtt(uint64_t *v, unsigned n)
{
	char msg[64] = { 0 };
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		close(sv[0]);
		while (read(sv[1], msg, sizeof(msg)) == (ssize_t)sizeof(msg))
			if (write(sv[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
				break;
		_exit(0);
	}
	close(sv[1]);
	for (unsigned i = 0; i < n + 1000; i++) {
		uint64_t t0 = now_ns();

		memcpy(msg, &i, sizeof(i));
		if (write(sv[0], msg, sizeof(msg)) != (ssize_t)sizeof(msg) ||
		    read(sv[0], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
			die("unix socket round trip: %s", strerror(errno));
		if (i >= 1000)
			v[i - 1000] = now_ns() - t0;
	}
	close(sv[0]);
	waitpid(pid, NULL, 0);
}

/* ---- section: the SSD tier ------------------------------------------------ */

#define SSD_PROMPT    32u	/* blocks per saved prompt */
#define SSD_BASE_SECS 3u	/* the drive baseline's length */
#define SSD_BASE_THR  32u	/* its readers: [ssd] queue_depth's default, the tier's own depth */

struct ssd_reader {
	int fd;
	uint64_t span, len, bytes;
	uint64_t stop_ns;
	uint64_t seed;
	pthread_t th;
};

/* The baseline: O_DIRECT random reads of @len from the first @span of the tier's file. */
static void *ssd_reader_main(void *arg)
{
	struct ssd_reader *r = arg;
	void *buf = NULL;

	if (posix_memalign(&buf, 4096, r->len))
		return NULL;
	while (now_ns() < r->stop_ns) {
		uint64_t off = splitmix64(&r->seed) % (r->span / r->len) * r->len;
		ssize_t n = pread(r->fd, buf, r->len, (off_t)off);

		if (n <= 0)
			break;
		r->bytes += (uint64_t)n;
	}
	free(buf);
	return NULL;
}

/* Bytes per second the drive reads in @len pieces, depth SSD_BASE_THR: the same run's ceiling. */
static double ssd_drive_rate(uint64_t span, uint64_t len)
{
	struct ssd_reader rd[SSD_BASE_THR];
	uint64_t total = 0, t0;
	int fd = open(O.ssd, O_RDONLY | O_DIRECT | O_CLOEXEC);

	if (fd < 0)
		die("%s: %s", O.ssd, strerror(errno));
	t0 = now_ns();
	for (unsigned i = 0; i < SSD_BASE_THR; i++) {
		rd[i] = (struct ssd_reader){ fd, span, len, 0, t0 + SSD_BASE_SECS * 1000000000ull,
					     O.seed * 977 + i };
		if (pthread_create(&rd[i].th, NULL, ssd_reader_main, &rd[i]))
			die("pthread_create");
	}
	for (unsigned i = 0; i < SSD_BASE_THR; i++) {
		pthread_join(rd[i].th, NULL);
		total += rd[i].bytes;
	}
	close(fd);
	return (double)total * 1e9 / (double)(now_ns() - t0);
}

/*
 * The drive's own latency for what a row's QUERY+LOAD reads: @n blocks of
 * @len at random offsets in @span, read at once by @n threads (released
 * together by a barrier, joined by another), O.ssd_samples times; the
 * samples go to @ret (sorted by quantile()).  What the drive alone does,
 * in the same run, for the p99 the tier's rows are compared with.
 */
struct ssd_burst {
	int fd;
	uint64_t span, len, seed;
	unsigned rounds;
	pthread_barrier_t go, done;
};

struct ssd_burst_thread {
	struct ssd_burst *b;
	unsigned i;
	pthread_t th;
};

static void *ssd_burst_main(void *arg)
{
	struct ssd_burst_thread *t = arg;
	struct ssd_burst *b = t->b;
	uint64_t seed = b->seed * 31 + t->i;
	void *buf = NULL;
	bool ok = posix_memalign(&buf, 4096, b->len) == 0;

	for (unsigned r = 0; r < b->rounds; r++) {
		uint64_t off = splitmix64(&seed) % (b->span / b->len) * b->len;

		pthread_barrier_wait(&b->go);
		if (ok && pread(b->fd, buf, b->len, (off_t)off) != (ssize_t)b->len)
			ok = false;
		pthread_barrier_wait(&b->done);
	}
	free(buf);
	return ok ? arg : NULL;
}

static void ssd_drive_burst(uint64_t span, uint64_t len, unsigned n, uint64_t *ret)
{
	struct ssd_burst b = { .span = span, .len = len, .seed = O.seed * 131 + n,
			       .rounds = O.ssd_samples };
	struct ssd_burst_thread *t = xcalloc(n, sizeof(*t));
	bool ok = true;

	b.fd = open(O.ssd, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (b.fd < 0)
		die("%s: %s", O.ssd, strerror(errno));
	pthread_barrier_init(&b.go, NULL, n + 1);
	pthread_barrier_init(&b.done, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		t[i] = (struct ssd_burst_thread){ &b, i, 0 };
		if (pthread_create(&t[i].th, NULL, ssd_burst_main, &t[i]))
			die("pthread_create");
	}
	for (unsigned r = 0; r < O.ssd_samples; r++) {
		uint64_t t0 = now_ns();

		pthread_barrier_wait(&b.go);
		pthread_barrier_wait(&b.done);
		ret[r] = now_ns() - t0;
	}
	for (unsigned i = 0; i < n; i++) {
		void *res;

		pthread_join(t[i].th, &res);
		ok &= res != NULL;
	}
	if (!ok)
		die("%s: a baseline read failed", O.ssd);
	pthread_barrier_destroy(&b.go);
	pthread_barrier_destroy(&b.done);
	close(b.fd);
	free(t);
}

/* The SSD tier's counters (zero from a daemon without [ssd]). */
static void tier_stats(struct kvs_client *admin, struct kvs_msg_stats_ssd *ret)
{
	stats_msg(admin, KVS_MSG_STATS_SSD, ret, sizeof(*ret));
}

/* A QUERY with a lease: its hits, its lease and KVS_CQE_PENDING. */
static void ssd_query(struct kvs_client *c, const uint8_t *keys, uint32_t n, uint32_t flags,
		      uint32_t *ret_hits, uint64_t *ret_lease, uint32_t *ret_pending)
{
	struct kvs_sqe *sqe = sqe_get(c);
	struct kvs_cqe cqe;
	int r = kvs_prep_query(c, sqe, keys, n, 8, flags, 9);

	if (r < 0)
		die("prep query: %s", kvs_strerror(r));
	run_op(c, "QUERY", &cqe);
	*ret_hits = (uint32_t)cqe.res;
	*ret_lease = cqe.result0;
	*ret_pending = KVS_CQE_PENDING(cqe.flags);
}

/*
 * SSD hits end to end: prompts saved through a pool much smaller than
 * they are spill to the SSD tier; for prompts then on SSD only, QUERY (reads
 * start) + LOAD (waits for them, copies to the engine) is timed, against
 * the drive's own random-read rate measured on the same file in the same
 * run: the target is bytes / that rate + 2 ms.
 */
static void section_ssd(const struct daemon *d)
{
	static const char *const cols[] = { "blocks", "MiB",	  "n",	       "pending",
					    "p50 ms", "p99 ms",	  "target ms", "GB/s p50",
					    "drive GB/s", "drive p50", "drive p99", "" };
	static const int widths[] = { 6, 7, 4, 7, 8, 8, 9, 8, 10, 9, 9, 5 };
	const uint32_t rows[] = { 8, SSD_PROMPT };
	enum { NROWS = sizeof(rows) / sizeof(rows[0]) };
	uint64_t S = 56 * 1024, slot, nprompts, written, *v, *dv; /* 36 x 56 KiB: 2016 KiB blocks */
	uint32_t *cand, ncand = 0, ids[SSD_PROMPT];
	uint8_t *keys;
	struct kvs_client *c, *admin;
	struct kvs_msg_stats_ssd ts0, ts1;
	double rate;
	struct kv kv;
	char title[PATH_MAX + 256];
	int r;

	r = kv_alloc(&kv, O.be, LAY_PAGE, S, 2 * SSD_PROMPT);
	if (r < 0)
		die("engine memory: %s", strerror(-r));
	slot = kv.slot_bytes;
	/*
	 * Two pools' worth, so that one is on SSD only, and half as many
	 * again as the prompts the rows take (a dropped spill leaves a
	 * prompt partial): a row of B blocks reads B-key runs of a prompt
	 * (keys are independent, so each run is a prefix of its own), one
	 * prompt gives SSD_PROMPT / B samples, and no key is read twice.
	 */
	nprompts = 2 * (O.pool_size / slot) / SSD_PROMPT +
		   3 * (O.ssd_samples + O.ssd_samples / 4) / 2;
	written = nprompts * SSD_PROMPT * slot;
	if (written > O.ssd_size * 9 / 10)
		die("--ssd-size %" PRIu64 " MiB cannot hold %" PRIu64 " MiB of spilled prompts: "
		    "raise it or lower --pool-size",
		    O.ssd_size / MiB, written / MiB);
	c = client_open(d, "ssd");
	client_register(c, &kv);
	keys = xcalloc(nprompts, 16 * SSD_PROMPT);
	cand = xcalloc(nprompts, sizeof(*cand));
	v = xcalloc(O.ssd_samples, sizeof(*v));
	dv = xcalloc(NROWS * O.ssd_samples, sizeof(*dv));
	for (uint32_t i = 0; i < SSD_PROMPT; i++)
		ids[i] = i;
	/*
	 * At the drive's pace: an eviction never waits for the SSD, so an
	 * engine saving faster than the drive writes sees victims dropped.
	 * Each SAVE waits (bounded) until the tier holds no pool bytes for
	 * writes: the spills it caused landed.  Waiting on the tier's
	 * counters, not on QUERYs of earlier prompts, touches no block, so
	 * the pool's eviction stays FIFO and DRAM keeps only the last
	 * prompts, not a block or two of each.
	 */
	admin = admin_open(d);
	for (uint64_t p = 0; p < nprompts; p++) {
		make_keys(keys + p * 16 * SSD_PROMPT, SSD_PROMPT, 0x55d, p);
		op_save(c, keys + p * 16 * SSD_PROMPT, ids, SSD_PROMPT, NULL);
		for (uint64_t t0 = now_ns(); now_ns() - t0 < 5000000000ull; usleep(1000)) {
			tier_stats(admin, &ts0);
			if (ts0.spilling_bytes == 0)
				break;
		}
	}
	/* Settled: what is on SSD only (every key counted, none in DRAM), twice alike. */
	for (unsigned pass = 0, last = UINT32_MAX; pass < 60 && ncand != last; pass++) {
		last = pass ? ncand : UINT32_MAX;
		usleep(500000);
		ncand = 0;
		for (uint64_t p = 0; p < nprompts; p++) {
			const uint8_t *k = keys + p * 16 * SSD_PROMPT;
			uint32_t all, dram, pend;
			uint64_t lease;

			ssd_query(c, k, SSD_PROMPT, KVS_QUERY_NOLEASE, &all, &lease, &pend);
			if (all != SSD_PROMPT)
				continue;
			/* Key by key: a DRAM prefix stops at its first miss. */
			for (uint32_t i = 0; i < SSD_PROMPT && all; i++) {
				ssd_query(c, k + 16 * i, 1, KVS_QUERY_NOLEASE | KVS_QUERY_DRAM,
					  &dram, &lease, &pend);
				all = dram ? 0 : all;
			}
			if (all)
				cand[ncand++] = (uint32_t)p;
		}
	}
	/*
	 * Quiet first: the tier writes the pool's blocks ahead of eviction
	 * whenever its drive idles, and those writes would share the drive
	 * with the baselines and the timed reads.  Wait (bounded) until it
	 * wrote every one, then take the drive's baselines for every row.
	 */
	for (uint64_t t0 = now_ns(), last = UINT64_MAX; now_ns() - t0 < 60000000000ull;) {
		tier_stats(admin, &ts0);
		if (ts0.written_ahead == last && ts0.spilling_bytes == 0)
			break;
		last = ts0.written_ahead;
		usleep(1000000);
	}
	rate = ssd_drive_rate(written, slot);
	for (unsigned ri = 0; ri < NROWS; ri++)
		ssd_drive_burst(written, slot, rows[ri], dv + ri * O.ssd_samples);
	snprintf(title, sizeof(title),
		 "SSD hits, QUERY + LOAD, page-first %u x %" PRIu64 " KiB blocks, daemon %s: "
		 "%u of %" PRIu64 " prompts on SSD only; drive: %u readers of %" PRIu64
		 " KiB, O_DIRECT, on %s",
		 LAYS[LAY_PAGE].layers, S / 1024, d->label, ncand, nprompts, SSD_BASE_THR,
		 slot / 1024, O.ssd);
	tier_stats(admin, &ts0);
	/* Why a prompt is not a candidate: spills not written, and what the index holds. */
	if (!O.json)
		printf("\nafter the saves: %" PRIu64 " blocks spilled, %" PRIu64 " skipped, %" PRIu64
		       " dropped (drive behind), %" PRIu64 " writes refused, %" PRIu64
		       " displaced; %" PRIu64 " blocks on SSD\n",
		       ts0.spilled, ts0.spill_skipped, ts0.spill_dropped, ts0.dropped,
		       ts0.displaced, ts0.index_entries);
	table_head(title, cols, widths, 12);
	for (unsigned ri = 0, next = 0; ri < NROWS; ri++) {
		uint32_t B = rows[ri];
		uint64_t bytes = (uint64_t)B * kv.block_bytes, pend_sum = 0;
		unsigned n = 0, run = 0, runs = SSD_PROMPT / B;
		double target, p50, p99, dp50, dp99;
		const char *met;

		/* Run by run through each prompt; the next row starts on a fresh prompt. */
		for (; n < O.ssd_samples && next < ncand; run = (run + 1) % runs, next += !run) {
			const uint8_t *k = keys + ((uint64_t)cand[next] * SSD_PROMPT + run * B) * 16;
			uint32_t hits, pend, dst[SSD_PROMPT];
			uint64_t lease, t0 = now_ns();
			struct kvs_cqe cqe;
			struct kvs_sqe *sqe;

			ssd_query(c, k, B, 0, &hits, &lease, &pend);
			if (hits < B) {
				if (lease)
					op_release(c, lease);
				continue; /* evicted from SSD meanwhile, or a read refused: not a sample */
			}
			for (uint32_t i = 0; i < B; i++)
				dst[i] = SSD_PROMPT + i;
			sqe = sqe_get(c);
			if (kvs_prep_load(c, sqe, lease, dst, B, 0, 0, 4) < 0)
				die("prep load");
			run_op(c, "LOAD", &cqe);
			if ((uint32_t)cqe.res != B)
				continue; /* a read failed: a shorter LOAD, not a sample */
			v[n++] = now_ns() - t0;
			pend_sum += pend;
		}
		next += run != 0;
		if (n == 0)
			continue;
		p50 = quantile(v, n, 0.5) / 1e6;
		p99 = quantile(v, n, 0.99) / 1e6;
		target = (double)bytes / rate * 1e3 + 2.0;
		met = verdict(p99 <= target, "SSD hits, daemon %s, %u blocks: p99 %.2f ms, target %.2f ms",
			      d->label, B, p99, target);
		dp50 = quantile(dv + ri * O.ssd_samples, O.ssd_samples, 0.5) / 1e6;
		dp99 = quantile(dv + ri * O.ssd_samples, O.ssd_samples, 0.99) / 1e6;
		if (O.json)
			printf("{\"test\":\"ssd\",\"daemon\":\"%s\",\"blocks\":%u,\"bytes\":%" PRIu64
			       ",\"samples\":%u,\"pending_avg\":%.1f,\"p50_ms\":%.3f,"
			       "\"p99_ms\":%.3f,\"target_ms\":%.3f,\"drive_gbs\":%.3f,"
			       "\"drive_p50_ms\":%.3f,\"drive_p99_ms\":%.3f}\n",
			       d->label, B, bytes, n, (double)pend_sum / n, p50, p99, target,
			       rate / 1e9, dp50, dp99);
		else
			printf("| %6u | %7.1f | %4u | %7.1f | %8.2f | %8.2f | %9.2f | %8.2f | %10.2f | "
			       "%9.2f | %9.2f | %5s |\n",
			       B, (double)bytes / MiB, n, (double)pend_sum / n, p50, p99, target,
			       (double)bytes / (p50 * 1e6), rate / 1e9, dp50, dp99,
			       met);
		fflush(stdout);
	}
	/* What shared the drive with the timed reads: the writes their slot allocations caused. */
	tier_stats(admin, &ts1);
	if (!O.json)
		printf("during the timed QUERY+LOADs the tier read %.1f MiB and wrote %.1f MiB "
		       "(%" PRIu64 " blocks spilled, %" PRIu64 " written ahead before them, "
		       "%" PRIu64 " in all)\n",
		       (double)(ts1.bytes_read - ts0.bytes_read) / MiB,
		       (double)(ts1.bytes_written - ts0.bytes_written) / MiB,
		       ts1.spilled - ts0.spilled, ts0.written_ahead, ts1.written_ahead);
	kvs_close(admin);
	kvs_close(c);
	kv_free(&kv);
	free(keys);
	free(cand);
	free(v);
	free(dv);
}

static void section_nop(const struct daemon *d)
{
	static const char *const cols[] = { "round trip", "iters",    "p50 us",
					    "p99 us",	  "p99.9 us", "target" };
	static const int widths[] = { 52, 6, 9, 9, 9, 6 };
	unsigned n = O.nop_iters, idle_n = n / 20 ? n / 20 : 1;
	uint64_t *v = xcalloc(n, sizeof(*v));
	struct kvs_client *c = client_open(d, "nop");
	uint64_t c0, w0, idle_cpu, idle_wall;
	struct wcpu wc;
	char title[320];

	snprintf(title, sizeof(title),
		 "Round trips, daemon %s (target: p99 <= 50 us after idle, ok / SHORT; the "
		 "polling row is the worker's wake-up alone)",
		 d->label);
	wcpu_open(d->pid, &wc);
	table_head(title, cols, widths, 6);
	for (unsigned i = 0; i < 1000; i++)
		op_nop(c);
	for (unsigned i = 0; i < n; i++)
		v[i] = op_nop(c);
	rtt_row(d, "kvstashd NOP, back to back", v, n, 0);
	/*
	 * After an idle gap longer than the worker's spin: it sleeps (or
	 * naps, [worker] doze_us), the submit wakes it.  What the daemon's
	 * CPU did meanwhile is what sleeping or napping costs.
	 */
	c0 = wcpu_ns(&wc);
	w0 = now_ns();
	for (unsigned i = 0; i < idle_n; i++) {
		usleep(2000);
		v[i] = op_nop(c);
	}
	idle_cpu = wcpu_ns(&wc) - c0;
	idle_wall = now_ns() - w0;
	rtt_row(d, "kvstashd NOP after 2 ms idle (worker asleep)", v, idle_n, 50000);
	for (unsigned i = 0; i < idle_n; i++) {
		usleep(2000);
		v[i] = op_nop_polling(c);
	}
	rtt_row(d, "kvstashd NOP after 2 ms idle, the engine polling", v, idle_n, 0);
	unix_rtt(v, n);
	rtt_row(d, "Unix socketpair, 64 B each way (baseline)", v, n, 0);
	if (wc.ok && idle_wall) {
		double pct = 100.0 * (double)idle_cpu / (double)idle_wall;

		if (O.json)
			printf("{\"test\":\"idle_cpu\",\"daemon\":\"%s\",\"core_pct\":%.2f}\n",
			       d->label, pct);
		else
			printf("kvstashd's CPU over the 2 ms gaps and their NOPs: %.1f %% of a core\n",
			       pct);
	}
	wcpu_close(&wc);
	kvs_close(c);
	free(v);
}

/* ---- main ------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvstash-bench [OPTIONS]\n"
		"\n"
		"Measures kvstashd: SAVE/LOAD throughput against a plain copy, QUERY latency,\n"
		"the daemon's CPU per block and the NOP round trip.  Not a test: it only reports.\n"
		"\n"
		"  --backend host|cuda     copy backend (host: memfd engine memory, memcpy; cuda:\n"
		"                          GPU memory, cudaMemcpyAsync baseline, needs --spawn\n"
		"                          to compare movers)\n"
		"  --mem ipc|vmm           cuda: legacy IPC handles or VMM fds (default ipc)\n"
		"  --movers LIST           cuda with --spawn: auto,dma,batch,kernel (default all four)\n"
		"  --no-interference       cuda: skip the engine-slowdown measurement\n"
		"  --socket PATH           measure the kvstashd at PATH (default $KVSTASH_SOCKET\n"
		"                          or " KVS_DEFAULT_SOCKET ")\n"
		"  --spawn                 start a kvstashd in a temporary directory instead\n"
		"  --kvstashd PATH         the daemon to spawn (default: the build tree's\n"
		"                          sidecar/kvstashd when this tool runs from the build\n"
		"                          tree, else " KVSTASHD_PATH ")\n"
		"  --pool-size SIZE        pool of the spawned daemon (default 4G)\n"
		"  -o, --daemon-opt K=V    extra setting for a spawned daemon (repeatable)\n"
		"  --no-spin0              with --spawn: no second daemon (worker.spin_us=0)\n"
		"  --sections LIST         copy,query,cpu,nop,ssd (default all; ssd with --ssd)\n"
		"  --ssd FILE              with --spawn: the ssd section's daemon keeps its SSD\n"
		"                          tier in FILE (created; on the drive to measure)\n"
		"  --ssd-size SIZE         its [ssd] size (default 32G)\n"
		"  --ssd-samples N         timed QUERY+LOADs per SSD row (default 100)\n"
		"  --layouts LIST          page,split,mla (default all)\n"
		"  --sizes LIST            bytes per layer S (default 4K,16K,64K,256K)\n"
		"  --batches LIST          blocks per op (default 32,512)\n"
		"  --max-batch-bytes SIZE  skip batches larger than this (default 2G)\n"
		"  --reps N                minimum timed ops per row (default 7; small batches\n"
		"                          get more, up to 512M per row, at most 200)\n"
		"  --query-keys LIST       default 1,64,32768\n"
		"  --query-iters N         per key count, /10 from 4096 keys (default 2000)\n"
		"  --query-resident N      resident blocks in the index during QUERY tests, the\n"
		"                          queried prefix among them (default 163840)\n"
		"  --nop-iters N           default 20000\n"
		"  --wait-spin-us N        the sessions' CQ busy-poll before sleeping\n"
		"                          (kvs_connect_opts.wait_spin_us; default 0: 50)\n"
		"  --cpu-seconds S         length of each cpu run (default 1.5)\n"
		"  --cpu-size SIZE         S of the cpu runs (default 16K)\n"
		"  --cpu-batch N           blocks per op of the cpu runs (default 32)\n"
		"  --seed N                permutations (default 1)\n"
		"  --json                  JSON lines instead of tables\n"
		"  --nice N                run (and spawn kvstashd) at this nice value, e.g. -10\n"
		"                          on a machine shared with other work\n");
}

/*
 * In the build tree (tests and benches of this repository) the daemon next
 * to this tool, ../sidecar/kvstashd; installed, where there is none, the
 * installed daemon.
 */
static void default_kvstashd(void)
{
	char self[PATH_MAX], tree[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	snprintf(O.kvstashd, sizeof(O.kvstashd), "%s", KVSTASHD_PATH);
	if (n <= 0)
		return;
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return;
	*slash = '\0';
	/* A libtool wrapper runs the real binary from .libs/. */
	if (strlen(self) >= 6 && !strcmp(self + strlen(self) - 6, "/.libs"))
		self[strlen(self) - 6] = '\0';
	snprintf(tree, sizeof(tree), "%.*s/../sidecar/kvstashd", PATH_MAX - 32, self);
	if (!access(tree, X_OK))
		snprintf(O.kvstashd, sizeof(O.kvstashd), "%s", tree);
}

static void parse_args(int argc, char **argv)
{
	bool sections_given = false;
	enum {
		OPT_BACKEND = 1000,
		OPT_SOCKET,
		OPT_SPAWN,
		OPT_KVSTASHD,
		OPT_POOL,
		OPT_NOSPIN0,
		OPT_SECTIONS,
		OPT_LAYOUTS,
		OPT_SIZES,
		OPT_BATCHES,
		OPT_MAXBATCH,
		OPT_REPS,
		OPT_QKEYS,
		OPT_QITERS,
		OPT_QRES,
		OPT_NOPS,
		OPT_CPUSEC,
		OPT_CPUSIZE,
		OPT_CPUBATCH,
		OPT_SEED,
		OPT_JSON,
		OPT_NICE,
		OPT_MEM,
		OPT_MOVERS,
		OPT_NOINTERF,
		OPT_SSD,
		OPT_SSDSIZE,
		OPT_SSDSAMPLES,
		OPT_WAITSPIN,
	};
	static const struct option opts[] = {
		{ "backend", required_argument, NULL, OPT_BACKEND },
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "spawn", no_argument, NULL, OPT_SPAWN },
		{ "kvstashd", required_argument, NULL, OPT_KVSTASHD },
		{ "pool-size", required_argument, NULL, OPT_POOL },
		{ "daemon-opt", required_argument, NULL, 'o' },
		{ "no-spin0", no_argument, NULL, OPT_NOSPIN0 },
		{ "sections", required_argument, NULL, OPT_SECTIONS },
		{ "layouts", required_argument, NULL, OPT_LAYOUTS },
		{ "sizes", required_argument, NULL, OPT_SIZES },
		{ "batches", required_argument, NULL, OPT_BATCHES },
		{ "max-batch-bytes", required_argument, NULL, OPT_MAXBATCH },
		{ "reps", required_argument, NULL, OPT_REPS },
		{ "query-keys", required_argument, NULL, OPT_QKEYS },
		{ "query-iters", required_argument, NULL, OPT_QITERS },
		{ "query-resident", required_argument, NULL, OPT_QRES },
		{ "nop-iters", required_argument, NULL, OPT_NOPS },
		{ "cpu-seconds", required_argument, NULL, OPT_CPUSEC },
		{ "cpu-size", required_argument, NULL, OPT_CPUSIZE },
		{ "cpu-batch", required_argument, NULL, OPT_CPUBATCH },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "nice", required_argument, NULL, OPT_NICE },
		{ "mem", required_argument, NULL, OPT_MEM },
		{ "movers", required_argument, NULL, OPT_MOVERS },
		{ "no-interference", no_argument, NULL, OPT_NOINTERF },
		{ "ssd", required_argument, NULL, OPT_SSD },
		{ "ssd-size", required_argument, NULL, OPT_SSDSIZE },
		{ "ssd-samples", required_argument, NULL, OPT_SSDSAMPLES },
		{ "wait-spin-us", required_argument, NULL, OPT_WAITSPIN },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *const lay_names[] = { "page", "split", "mla" };
	uint64_t tmp[MAX_LIST];
	int c;

	O.be = &backend_host;
	O.socket = getenv("KVSTASH_SOCKET") ? getenv("KVSTASH_SOCKET") : KVS_DEFAULT_SOCKET;
	O.pool_size = 4 * GiB;
	O.spin0 = true;
	for (unsigned i = 0; i < SEC_SSD; i++)
		O.sections[i] = true;
	O.ssd_size = 32ull << 30; /* holds what the section saves through the default 4G pool */
	O.ssd_samples = 100;
	for (unsigned i = 0; i < LAY_NR; i++)
		O.layouts[i] = true;
	O.nsizes = parse_size_list("4K,16K,64K,256K", O.sizes, "size");
	O.nbatches = parse_size_list("32,512", O.batches, "batch");
	O.reps = 7;
	O.max_batch_bytes = 2 * GiB;
	O.nquery = 3;
	O.query_keys[0] = 1;
	O.query_keys[1] = 64;
	O.query_keys[2] = 32768;
	O.query_iters = 2000;
	/*
	 * A host pool holds far more blocks than one request's prefix (200 GiB
	 * of 1-2 MiB blocks: ~100k), and index costs depend on that count.
	 */
	O.query_resident = 163840;
	O.nop_iters = 20000;
	O.cpu_seconds = 1.5;
	O.cpu_size = 16 * KiB;
	O.cpu_batch = 32;
	O.seed = 1;
	O.movers = "auto,dma,batch,kernel";
	O.interference = true;
	default_kvstashd();

	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_BACKEND:
			if (!strcmp(optarg, "host"))
				O.be = &backend_host;
			else if (!strcmp(optarg, "cuda")) {
#if HAVE_CUDA
				O.be = &backend_cuda;
				O.gpu_shapes = true;
				O.max_batch_bytes = 4 * GiB;
#else
				die("kvstash-bench was built without CUDA");
#endif
			}
			else
				die("unknown backend '%s'", optarg);
			break;
		case OPT_SOCKET:
			O.socket = optarg;
			break;
		case OPT_SPAWN:
			O.spawn = true;
			break;
		case OPT_KVSTASHD:
			snprintf(O.kvstashd, sizeof(O.kvstashd), "%s", optarg);
			break;
		case OPT_POOL:
			if (parse_size(optarg, &O.pool_size) < 0)
				die("bad --pool-size");
			break;
		case 'o':
			if (O.ndopts == MAX_DOPTS)
				die("too many -o");
			O.dopts[O.ndopts++] = optarg;
			break;
		case OPT_NOSPIN0:
			O.spin0 = false;
			break;
		case OPT_SECTIONS:
			sections_given = true;
			parse_names(optarg, O.sections, SECTION_NAMES, SEC_NR, "section");
			break;
		case OPT_LAYOUTS:
			parse_names(optarg, O.layouts, lay_names, LAY_NR, "layout");
			break;
		case OPT_SIZES:
			O.gpu_shapes = false;
			O.nsizes = parse_size_list(optarg, O.sizes, "size");
			break;
		case OPT_BATCHES:
			O.nbatches = parse_size_list(optarg, O.batches, "batch");
			break;
		case OPT_MAXBATCH:
			if (parse_size(optarg, &O.max_batch_bytes) < 0)
				die("bad --max-batch-bytes");
			break;
		case OPT_REPS:
			O.reps = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case OPT_QKEYS:
			O.nquery = parse_size_list(optarg, tmp, "query key");
			for (unsigned i = 0; i < O.nquery; i++)
				O.query_keys[i] = (uint32_t)tmp[i];
			break;
		case OPT_QITERS:
			O.query_iters = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case OPT_QRES:
			O.query_resident = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case OPT_NOPS:
			O.nop_iters = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case OPT_WAITSPIN:
			O.wait_spin_us = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case OPT_CPUSEC:
			O.cpu_seconds = strtod(optarg, NULL);
			break;
		case OPT_CPUSIZE:
			if (parse_size(optarg, &O.cpu_size) < 0)
				die("bad --cpu-size");
			break;
		case OPT_CPUBATCH:
			O.cpu_batch = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case OPT_SEED:
			O.seed = strtoull(optarg, NULL, 0);
			break;
		case OPT_JSON:
			O.json = true;
			break;
		case OPT_NICE:
			O.nice = (int)strtol(optarg, NULL, 0);
			break;
#if HAVE_CUDA
		case OPT_MEM:
			if (!strcmp(optarg, "ipc"))
				cuda_kind = KVS_MEM_CUDA_IPC;
			else if (!strcmp(optarg, "vmm"))
				cuda_kind = KVS_MEM_CUDA_VMM_FD;
			else
				die("--mem takes ipc or vmm");
			break;
#else
		case OPT_MEM:
			break;
#endif
		case OPT_MOVERS:
			O.movers = optarg;
			break;
		case OPT_SSD:
			if (optarg[0] != '/')
				die("--ssd takes an absolute path (a file on the drive to measure)");
			O.ssd = optarg;
			break;
		case OPT_SSDSIZE:
			if (parse_size(optarg, &O.ssd_size) < 0 || O.ssd_size < 64 * MiB)
				die("bad --ssd-size %s (at least 64M)", optarg);
			break;
		case OPT_SSDSAMPLES:
			O.ssd_samples = (unsigned)strtoul(optarg, NULL, 0);
			if (O.ssd_samples < 4 || O.ssd_samples > 100000)
				die("bad --ssd-samples %s (4 to 100000)", optarg);
			break;
		case OPT_NOINTERF:
			O.interference = false;
			break;
		case 'h':
		default:
			usage_exit(usage, c);
		}
	}
	if (optind < argc)
		die("unexpected argument '%s'", argv[optind]);
	if (O.reps == 0 || O.query_iters == 0 || O.nop_iters == 0 || O.cpu_batch == 0 ||
	    O.cpu_seconds <= 0)
		die("counts and durations must be positive");
	for (unsigned i = 0; i < O.nsizes; i++)
		if (O.sizes[i] % 2 || O.sizes[i] % SLOT_ALIGN)
			die("sizes must be multiples of %u (split K/V halves them)", SLOT_ALIGN);
	if (O.ssd && !sections_given)
		O.sections[SEC_SSD] = true;
	if (O.sections[SEC_SSD] && (!O.ssd || !O.spawn))
		die("the ssd section needs --spawn and --ssd FILE");
}

/* The ssd section on its own daemon: the same settings, plus [ssd] on --ssd's file. */
static void ssd_run(void)
{
	char path[PATH_MAX + 16], size[48];
	struct daemon d;

	snprintf(path, sizeof(path), "ssd.path=%s", O.ssd);
	snprintf(size, sizeof(size), "ssd.size=%" PRIu64, O.ssd_size);
	if (O.ndopts + 2 > MAX_DOPTS)
		die("too many -o");
	O.dopts[O.ndopts++] = path;
	O.dopts[O.ndopts++] = size;
	unlink(O.ssd); /* a fresh tier: its figures are of this run's blocks */
	daemon_spawn(&d, "ssd", NULL);
	if (!O.json)
		printf("\nspawned kvstashd (pid %d) with [ssd] path %s, size %" PRIu64 " MiB\n",
		       (int)d.pid, O.ssd, O.ssd_size / MiB);
	section_ssd(&d);
	daemon_stop(&d);
	O.ndopts -= 2;
}

static void run_sections(const struct daemon *d, bool copy)
{
	if (copy && O.sections[SEC_COPY])
		section_copy(d);
	if (O.sections[SEC_QUERY])
		section_query(d);
	if (O.sections[SEC_CPU])
		section_cpu(d);
	if (O.sections[SEC_NOP])
		section_nop(d);
}

#if HAVE_CUDA
/* The GPU run: ceilings, then per mover a daemon, its copy table, SAVE+LOAD, interference. */
static int main_cuda(void)
{
	char movers[64], *save = NULL, *m;
	struct daemon d;

	/* Fork the compute engine before this process touches CUDA. */
	if (O.interference)
		engine_start();
	CUDA_OK(cudaSetDevice(0));
	CUDA_OK(cudaStreamCreateWithFlags(&cuda_stream, cudaStreamNonBlocking));
	cuda_ceilings();
	if (!O.spawn) {
		daemon_attach(&d, O.socket);
		if (O.sections[SEC_COPY])
			section_copy(&d);
		cuda_both(&d, 32);
		cuda_both(&d, 512);
		if (O.interference)
			for (int k = LAY_PAGE; k <= LAY_SPLIT; k++)
				cuda_interference(&d, "(daemon's)", (enum lay_kind)k);
	} else {
		snprintf(movers, sizeof(movers), "%s", O.movers);
		for (m = strtok_r(movers, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
			char opt[64], label[32];

			snprintf(opt, sizeof(opt), "cuda.mover=%s", m);
			snprintf(label, sizeof(label), "mover=%s", m);
			daemon_spawn(&d, label, opt);
			if (!O.json)
				printf("\nspawned kvstashd (pid %d) with cuda.mover=%s\n", (int)d.pid, m);
			if (O.sections[SEC_COPY])
				section_copy(&d);
			cuda_both(&d, 32);
			cuda_both(&d, 512);
			if (O.interference)
				for (int k = LAY_PAGE; k <= LAY_SPLIT; k++)
					cuda_interference(&d, m, (enum lay_kind)k);
			daemon_stop(&d);
		}
	}
	if (O.sections[SEC_SSD])
		ssd_run();
	if (O.interference) {
		close(engine.cmd);
		waitpid(engine.pid, NULL, 0);
	}
	return 0;
}
#endif

int main(int argc, char **argv)
{
	struct daemon d;
	char host[64] = "?";

	parse_args(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	atexit(stop_live_daemon);
	/* Before the spawn: the daemon inherits it. */
	if (O.nice && setpriority(PRIO_PROCESS, 0, O.nice) < 0)
		die("setpriority(%d): %s", O.nice, strerror(errno));
	gethostname(host, sizeof(host));
	if (!O.json)
		printf("kvstash-bench %s: backend %s, %ld CPUs online, host %s, nice %d\n",
		       kvs_version(), O.be->name, sysconf(_SC_NPROCESSORS_ONLN), host, O.nice);
#if HAVE_CUDA
	if (O.be == &backend_cuda) {
		/* Every spawned daemon must use the GPU, or fail loudly. */
		if (O.ndopts < MAX_DOPTS)
			O.dopts[O.ndopts++] = "cuda.enable=yes";
		int r = main_cuda();

		verdict_summary();
		return r;
	}
#endif
	if (!O.spawn) {
		daemon_attach(&d, O.socket);
		run_sections(&d, true);
		verdict_summary();
		return 0;
	}
	daemon_spawn(&d, "default", NULL);
	if (!O.json)
		printf("spawned %s (pid %d), pool %" PRIu64 " MiB\n", O.kvstashd, (int)d.pid,
		       O.pool_size / MiB);
	run_sections(&d, true);
	daemon_stop(&d);
	if (O.sections[SEC_SSD])
		ssd_run();
	if (O.spin0 && (O.sections[SEC_CPU] || O.sections[SEC_QUERY] || O.sections[SEC_NOP])) {
		daemon_spawn(&d, "spin_us=0", "worker.spin_us=0");
		if (!O.json)
			printf("\nspawned a second kvstashd (pid %d) with worker.spin_us=0\n",
			       (int)d.pid);
		run_sections(&d, false);
		daemon_stop(&d);
	}
	verdict_summary();
	return 0;
}
