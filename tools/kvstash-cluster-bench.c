/* SPDX-License-Identifier: MIT */
/*
 * kvstash-cluster-bench: the cluster registry end to end through kvstashd,
 * against plain pipelined Redis commands of the same number of keys on the
 * same redis-server in the same run.
 *
 *   kvstash-cluster-bench [--kvstashd PATH] [--redis-server PATH] [--reps R]
 *                         [--pool SIZE] [--block-kib K] [--blocks N]
 *
 * It starts its own redis-server (tools/redis-bench.h) and two kvstashd
 * processes, nodes "a" and "b" of the cluster "bench-<pid>", each with its
 * own directory, socket and a small pool; one worker session per node, a
 * page-first host layout in kvs_host_alloc() memory (4 layers, K and V),
 * the same namespace and geometry on both, so B finds A's blocks.
 *   flush after N  A SAVEs N new blocks; from the submission of a cluster
 *                  FLUSH right after the last SAVE completed to its CQE;
 *                  baseline: N pipelined HSET+PEXPIRE, to the last reply
 *   register N     blocks/s from the first SAVE to that FLUSH's CQE;
 *                  baseline: the same N pipelined HSET+PEXPIRE
 *   query K        a cluster QUERY on B of K keys all held by A (a full
 *                  hit: every chunk needed), p50 and p99; baseline: K
 *                  pipelined HGETALL; and B's plain local QUERY of the
 *                  same keys (0 hits), kvstashd's own cost
 * Everything it started is stopped at exit, however it exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kvstash/kvstash.h>

#include "redis-bench.h"

#define TOOL_NAME "kvstash-cluster-bench"
#include "tool.h"

#define LAYERS	      4	    /* a block: LAYERS x (K, V) segments, adjacent (page-first) */
#define ENGINE_BLOCKS 1024  /* engine memory; SAVEs reuse its blocks under new keys */
#define SAVE_CHUNK    1024u /* keys per SAVE */
#define SAVE_DEPTH    8u    /* SAVEs in flight */
#define OP_TIMEOUT    60000 /* ms: any one operation; the daemon's deadlines are shorter */
#define REPS_1000     5	    /* "flush after 1000" runs */
#define REPS_BIG      3	    /* "flush after N" runs; the queries ask for the first one's blocks */

enum { SEED_WARM = 1, SEED_ONE = 100, SEED_1000 = 10000, SEED_BIG = 20000 };

static struct {
	char kvstashd[PATH_MAX];
	const char *redis_server;
	unsigned reps;
	uint64_t pool;
	unsigned block_kib;
	uint32_t blocks;   /* the large N and K */
	uint32_t max_keys; /* [session] max_keys; 0: the daemon's default */
	const char *ini;   /* more configuration for both daemons (--daemon-ini) */
} O = { .reps = 30, .pool = 512ull << 20, .block_kib = 4, .blocks = 32768 };

struct node {
	const char *name; /* its [cluster] node */
	char dir[256], sock[300], log[300];
	pid_t pid;
	struct kvs_client *c;
	struct kvs_session_info info;
	int memfd;
	void *mem;
};

static struct redis_bench rb;
static redisContext *rc; /* the baseline's connection */
static struct node nodes[2] = { { .name = "a" }, { .name = "b" } };
static char cluster[64], prefix[96]; /* the baseline's keys look like the registry's */
static uint64_t seg_bytes, block_bytes;
static bool finished; /* at exit: keep quiet about the daemons' logs */

/* ---- the two kvstashd -------------------------------------------------- */

static void print_log_tail(const struct node *n)
{
	char buf[2048];
	FILE *f = fopen(n->log, "r");
	size_t len;
	long size;

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0, SEEK_SET);
	len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = '\0';
	fprintf(stderr, "--- kvstashd %s (%s), end of its log:\n%s", n->name, n->log, buf);
}

static void node_stop(struct node *n)
{
	kvs_close(n->c);
	n->c = NULL;
	if (n->pid > 0) {
		/* SIGTERM drains (the registry lease is released); SIGKILL after 10 s. */
		pid_t r = 0;

		kill(n->pid, SIGTERM);
		for (int i = 0; i < 1000 && (r = waitpid(n->pid, NULL, WNOHANG)) == 0; i++)
			usleep(10000);
		if (r == 0) {
			kill(n->pid, SIGKILL);
			waitpid(n->pid, NULL, 0);
		}
		n->pid = 0;
	}
	if (!finished)
		print_log_tail(n);
	if (n->mem)
		kvs_host_free(n->memfd, n->mem, ENGINE_BLOCKS * block_bytes);
	n->mem = NULL;
	if (n->dir[0])
		redis_bench_rmdir(n->dir);
	n->dir[0] = '\0';
}

static void stop_nodes(void)
{
	node_stop(&nodes[1]);
	node_stop(&nodes[0]);
}

static void write_config(const struct node *n, const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		die("%s: %s", path, strerror(errno));
	/*
	 * One pool region whatever the host (numa off, no CUDA: host
	 * sessions only), generous registry deadlines so that a loaded host
	 * measures slow answers instead of timeouts.
	 */
	fprintf(f,
		"[server]\nsocket = %s\n"
		"[pool]\nsize = %" PRIu64 "\nnuma = off\n"
		"[cuda]\nenable = no\n"
		"[log]\nlevel = warning\n"
		"[cluster]\nredis = %s:%d\nname = %s\nnode = %s\nlease_ttl = 10s\n"
		"flush_timeout = 60s\nquery_timeout = 10s\n"
		"queue_entries = 262144\n",
		n->sock, O.pool, rb.host, rb.port, cluster, n->name);
	if (O.max_keys)
		fprintf(f, "[session]\nmax_keys = %u\n", O.max_keys);
	if (O.ini)
		fprintf(f, "%s\n", O.ini);
	if (fclose(f))
		die("%s: %s", path, strerror(errno));
}

static void node_spawn(struct node *n)
{
	const char *tmp = getenv("TMPDIR");
	char conf[300];
	int logfd;

	snprintf(n->dir, sizeof(n->dir), "%s/kvstash-cluster-bench.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(n->dir))
		die("mkdtemp %s: %s", n->dir, strerror(errno));
	snprintf(n->sock, sizeof(n->sock), "%s/kvstash.sock", n->dir);
	snprintf(n->log, sizeof(n->log), "%s/kvstashd.log", n->dir);
	snprintf(conf, sizeof(conf), "%s/kvstash.conf", n->dir);
	write_config(n, conf);
	logfd = open(n->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (logfd < 0)
		die("%s: %s", n->log, strerror(errno));
	n->pid = fork();
	if (n->pid < 0)
		die("fork: %s", strerror(errno));
	if (n->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		dup2(logfd, 1);
		dup2(logfd, 2);
		execl(O.kvstashd, "kvstashd", "--config", conf, (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", O.kvstashd, strerror(errno));
		_exit(127);
	}
	close(logfd);
}

/* Connect (kvstashd answers once its pool is pre-faulted) and register. */
static void node_connect(struct node *n)
{
	struct kvs_connect_opts o;
	struct kvs_mem mem = { .kind = KVS_MEM_HOST_FD, .size = ENGINE_BLOCKS * block_bytes };
	struct kvs_layer lay[LAYERS];
	char inst[32], names[LAYERS][16];
	int r = -ENOENT;

	kvs_connect_opts_init(&o);
	snprintf(inst, sizeof(inst), "bench-%s", n->name);
	o.instance = inst;
	o.ns = "bench/page-first/bf16";
	o.flags = KVS_CONNECT_CLUSTER;
	/* 120 s: a large pool is pre-faulted before the socket opens. */
	for (int i = 0; i < 12000 && (r == -ENOENT || r == -ECONNREFUSED); i++) {
		r = kvs_connect(n->sock, &o, &n->c);
		if (r < 0 && waitpid(n->pid, NULL, WNOHANG) == n->pid) {
			n->pid = 0;
			die("kvstashd %s (%s) exited during start-up", n->name, O.kvstashd);
		}
		if (r == -ENOENT || r == -ECONNREFUSED)
			usleep(10000);
	}
	if (r < 0)
		die("connect to kvstashd %s at %s: %s", n->name, n->sock, kvs_strerror(r));
	kvs_session_info(n->c, &n->info);
	if (n->info.daemon_rev_minor < 1)
		die("kvstashd %s speaks wire minor %u: no cluster", n->name,
		    n->info.daemon_rev_minor);
	r = kvs_host_alloc(mem.size, &n->memfd, &n->mem);
	if (r < 0)
		die("kvs_host_alloc: %s", kvs_strerror(r));
	/* Touched once here, so that no SAVE pays for the engine's first faults. */
	memset(n->mem, 0x5a, mem.size);
	mem.fd = n->memfd;
	for (unsigned l = 0; l < LAYERS; l++) {
		snprintf(names[l], sizeof(names[l]), "layer.%u", l);
		lay[l] = (struct kvs_layer){
			.name = names[l],
			.segments = 2,
			.offset = l * 2 * seg_bytes,
			.num_blocks = ENGINE_BLOCKS,
			.segment_bytes = seg_bytes,
			.kv_stride = seg_bytes,
			.block_stride = block_bytes,
		};
	}
	r = kvs_register(n->c, &mem, 1, lay, LAYERS, 0);
	if (r < 0)
		die("register on %s: %s", n->name, kvs_strerror(r));
}

/* ---- operations -------------------------------------------------------- */

static uint8_t (*make_keys(uint64_t seed, uint32_t n))[KVS_KEY_SIZE]
{
	uint8_t(*k)[KVS_KEY_SIZE] = xcalloc(n, KVS_KEY_SIZE);

	for (uint32_t i = 0; i < n; i++)
		redis_bench_key(k[i], seed, i);
	return k;
}

static void reap_save(struct node *n)
{
	struct kvs_cqe *cqe;
	int r = kvs_wait_cqe(n->c, &cqe, OP_TIMEOUT);

	if (r < 0)
		die("SAVE on %s: no completion: %s", n->name, kvs_strerror(r));
	if (cqe->res < 0)
		die("SAVE on %s: %s", n->name, kvs_strerror(cqe->res));
	kvs_cqe_seen(n->c, cqe);
}

/* SAVE @nk new blocks on @n, SAVE_DEPTH SAVEs in flight, until every one completed. */
static void save_all(struct node *n, const uint8_t (*keys)[KVS_KEY_SIZE], uint32_t nk)
{
	uint32_t chunk = SAVE_CHUNK < n->info.max_keys ? SAVE_CHUNK : n->info.max_keys;
	uint32_t ids[SAVE_CHUNK];
	unsigned inflight = 0;

	for (uint32_t i = 0; i < chunk; i++)
		ids[i] = i % ENGINE_BLOCKS;
	for (uint32_t off = 0; off < nk;) {
		uint32_t c = nk - off < chunk ? nk - off : chunk;
		struct kvs_sqe *sqe = inflight < SAVE_DEPTH ? kvs_get_sqe(n->c) : NULL;
		int r = sqe ? kvs_prep_save(n->c, sqe, keys[off], ids, c, off) : -EAGAIN;

		if (r == -EAGAIN || r == -ENOSPC) {
			/* A full ring or argument area: a completion makes room. */
			if (!inflight)
				die("SAVE on %s: no room with nothing in flight", n->name);
			reap_save(n);
			inflight--;
			continue;
		}
		if (r < 0)
			die("prep SAVE: %s", kvs_strerror(r));
		kvs_submit(n->c);
		inflight++;
		off += c;
	}
	while (inflight--)
		reap_save(n);
}

/* A cluster FLUSH on A; dies unless it delivered @want changes and dropped none. */
static double flush_cluster(struct node *n, uint64_t want, uint64_t *ret_reg)
{
	uint64_t reg = 0, drop = 0, t0 = now_ns();
	int r = kvs_flush_cluster_sync(n->c, 0, OP_TIMEOUT, &reg, &drop);
	double s = (double)(now_ns() - t0) * 1e-9;

	if (r < 0)
		die("cluster FLUSH on %s: %s (%" PRIu64 " registered, %" PRIu64 " dropped)",
		    n->name, kvs_strerror(r), reg, drop);
	if (drop || reg < want)
		die("cluster FLUSH on %s: %" PRIu64 " registered, %" PRIu64 " dropped, of %" PRIu64,
		    n->name, reg, drop, want);
	*ret_reg = reg;
	return s;
}

/*
 * A cluster QUERY of @nk keys on @n, in QUERYs of at most max_keys keys
 * (and a quarter of the argument area), stopping at the first that is not
 * a full remote run, as an engine would: the length of the run A holds.
 */
static uint32_t query_cluster(struct node *n, const uint8_t (*keys)[KVS_KEY_SIZE], uint32_t nk,
			      uint32_t *ret_rtt)
{
	uint32_t max = n->info.max_keys, best = 0, rtt = 0;

	if (n->info.arg_bytes / 4 / KVS_KEY_SIZE < max)
		max = (uint32_t)(n->info.arg_bytes / 4 / KVS_KEY_SIZE);
	for (uint32_t off = 0; off < nk;) {
		uint32_t c = nk - off < max ? nk - off : max;
		struct kvs_cluster_answer a;
		uint64_t lease = 0;
		int r = kvs_query_cluster_sync(n->c, keys[off], c, off, 0, OP_TIMEOUT, &lease, &a);

		if (r < 0)
			die("cluster QUERY on %s: %s", n->name, kvs_strerror(r));
		if (r > 0)
			die("cluster QUERY on %s: %d local hits, expected none", n->name, r);
		if (a.status)
			die("cluster QUERY on %s: registry status %s", n->name,
			    kvs_strerror(a.status));
		if (a.best && (a.nr_holders < 1 || strcmp(a.holders[0].node, nodes[0].name)))
			die("cluster QUERY on %s: best %u but held by \"%s\", not \"%s\"", n->name,
			    a.best, a.nr_holders ? a.holders[0].node : "", nodes[0].name);
		best += a.best;
		rtt += a.round_trips;
		if (a.best < c)
			break;
		off += c;
	}
	*ret_rtt = rtt;
	return best;
}

/* The plain local QUERY of the same keys, split the same way; the hits. */
static uint32_t query_local(struct node *n, const uint8_t (*keys)[KVS_KEY_SIZE], uint32_t nk)
{
	uint32_t max = n->info.max_keys, hits = 0;

	for (uint32_t off = 0; off < nk; off += max) {
		uint32_t c = nk - off < max ? nk - off : max;
		int r = kvs_query_sync(n->c, keys[off], c, off, KVS_QUERY_NOLEASE, OP_TIMEOUT,
				       NULL);

		if (r < 0)
			die("QUERY on %s: %s", n->name, kvs_strerror(r));
		hits += (uint32_t)r;
		if ((uint32_t)r < c)
			break;
	}
	return hits;
}

/*
 * Until B's cluster QUERY finds the block A saved and flushed: both
 * registries connected and leased.  A benchmark, not a test: polling
 * with a deadline is what it needs.
 */
static void warm_up(void)
{
	uint8_t(*k)[KVS_KEY_SIZE] = make_keys(SEED_WARM, 1);
	uint64_t reg;

	save_all(&nodes[0], (const uint8_t(*)[KVS_KEY_SIZE])k, 1);
	for (int i = 0; i < 600; i++) {
		struct kvs_cluster_answer a;
		uint64_t drop = 0;

		reg = 0;
		if (kvs_flush_cluster_sync(nodes[0].c, 0, OP_TIMEOUT, &reg, &drop) == 0 &&
		    kvs_query_cluster_sync(nodes[1].c, k, 1, 0, 0, OP_TIMEOUT, NULL, &a) == 0 &&
		    a.status == 0 && a.best == 1) {
			free(k);
			return;
		}
		usleep(100000);
	}
	die("node b never saw node a's block within 60 s (registry not connected or leased?)");
}

/* ---- the table --------------------------------------------------------- */

static void row(const char *measure, const char *unit, double v, double base, double ratio,
		const char *notes)
{
	char a[32], b[32];

	snprintf(a, sizeof(a), "%.3f %s", v, unit);
	snprintf(b, sizeof(b), "%.3f %s", base, unit);
	if (base < 0)
		snprintf(b, sizeof(b), "-");
	if (!strcmp(unit, "/s")) {
		snprintf(a, sizeof(a), "%.0f/s", v);
		if (base >= 0)
			snprintf(b, sizeof(b), "%.0f/s", base);
	}
	if (ratio < 0)
		printf("| %-26s | %13s | %13s | %7s |", measure, a, b, "-");
	else
		printf("| %-26s | %13s | %13s | %6.2fx |", measure, a, b, ratio);
	printf("%s%s\n", notes[0] ? " " : "", notes);
}

/* flush after N and register N, @reps times with fresh keys each: medians. */
static void bench_flush(uint32_t n, unsigned reps, uint64_t seed)
{
	double *fl = xcalloc(reps, sizeof(double)), *fb = xcalloc(reps, sizeof(double));
	double *tp = xcalloc(reps, sizeof(double)), *tb = xcalloc(reps, sizeof(double));
	double *sv = xcalloc(reps, sizeof(double));
	char name[48], note[160];
	uint64_t reg = 0;

	for (unsigned i = 0; i < reps; i++) {
		uint64_t s = seed + i;
		uint8_t(*k)[KVS_KEY_SIZE] = make_keys(s, n);
		uint64_t t0 = now_ns();

		save_all(&nodes[0], (const uint8_t(*)[KVS_KEY_SIZE])k, n);
		sv[i] = (double)(now_ns() - t0) * 1e-9;
		fl[i] = flush_cluster(&nodes[0], n, &reg);
		tp[i] = (double)n / ((double)(now_ns() - t0) * 1e-9);
		fb[i] = redis_bench_pipeline(rc, RB_HSET_PEXPIRE, prefix, "a", s, n);
		tb[i] = (double)n / fb[i];
		free(k);
	}
	snprintf(name, sizeof(name), "flush after %u (p50)", n);
	snprintf(note, sizeof(note),
		 "FLUSH submit to CQE after the SAVEs; %u run%s; registered %" PRIu64
		 " (last); baseline %u x HSET+PEXPIRE",
		 reps, reps > 1 ? "s" : "", reg, n);
	{
		double f50 = redis_bench_pct(fl, reps, 50), b50 = redis_bench_pct(fb, reps, 50);

		row(name, "ms", f50 * 1e3, b50 * 1e3, f50 / b50, note);
	}
	if (reps >= 10) {
		double f99 = redis_bench_pct(fl, reps, 99), b99 = redis_bench_pct(fb, reps, 99);

		snprintf(name, sizeof(name), "flush after %u (p99)", n);
		row(name, "ms", f99 * 1e3, b99 * 1e3, f99 / b99, "");
	}
	if (n >= 1000) {
		double t50 = redis_bench_pct(tp, reps, 50), b50 = redis_bench_pct(tb, reps, 50);

		snprintf(name, sizeof(name), "register %u", n);
		snprintf(note, sizeof(note),
			 "blocks/s, first SAVE to the cluster FLUSH's CQE (the SAVEs alone: "
			 "%.1f ms); ratio > 1: faster",
			 redis_bench_pct(sv, reps, 50) * 1e3);
		row(name, "/s", t50, b50, t50 / b50, note);
	}
	free(sv);
	free(fl);
	free(fb);
	free(tp);
	free(tb);
}

/* query K on B of the first @k of A's SEED_BIG blocks. */
static void bench_query(uint32_t k, unsigned reps)
{
	uint8_t(*keys)[KVS_KEY_SIZE] = make_keys(SEED_BIG, k);
	const uint8_t(*ck)[KVS_KEY_SIZE] = (const uint8_t(*)[KVS_KEY_SIZE])keys;
	double *cl = xcalloc(reps, sizeof(double)), *lo = xcalloc(reps, sizeof(double)),
	       *ba = xcalloc(reps, sizeof(double));
	uint32_t rtt = 0;
	char name[48], note[160];

	for (unsigned i = 0; i < reps; i++) {
		uint64_t t0 = now_ns();
		uint32_t best = query_cluster(&nodes[1], ck, k, &rtt);

		cl[i] = (double)(now_ns() - t0) * 1e-9;
		if (best != k)
			die("cluster QUERY of %u keys on b: best %u, want %u", k, best, k);
		ba[i] = redis_bench_pipeline(rc, RB_HGETALL, prefix, NULL, SEED_BIG, k);
		t0 = now_ns();
		if (query_local(&nodes[1], ck, k) != 0)
			die("local QUERY on b found A's blocks");
		lo[i] = (double)(now_ns() - t0) * 1e-9;
	}
	for (unsigned p = 50; p <= 99; p += 49) {
		double c = redis_bench_pct(cl, reps, p), b = redis_bench_pct(ba, reps, p);

		snprintf(name, sizeof(name), "query %u (p%u)", k, p);
		snprintf(note, sizeof(note),
			 "%u runs; best %u, holder \"a\", %u registry round trips; baseline %u x "
			 "HGETALL",
			 reps, k, rtt, k);
		row(name, "ms", c * 1e3, b * 1e3, c / b, p == 50 ? note : "");
	}
	for (unsigned p = 50; p <= 99; p += 49) {
		snprintf(name, sizeof(name), "local query %u (p%u)", k, p);
		row(name, "ms", redis_bench_pct(lo, reps, p) * 1e3, -1, -1,
		    p == 50 ? "B's plain QUERY of the same keys: 0 hits, no registry" : "");
	}
	free(cl);
	free(lo);
	free(ba);
	free(keys);
}

/* ---- main -------------------------------------------------------------- */

/* "\\n" in @s (as a shell passes it) becomes a new line, in place. */
static char *unescape_newlines(char *s)
{
	char *w = s;

	for (const char *p = s; *p; p++, w++) {
		if (p[0] == '\\' && p[1] == 'n') {
			*w = '\n';
			p++;
		} else {
			*w = *p;
		}
	}
	*w = '\0';
	return s;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvstash-cluster-bench [options]\n"
		"The cluster registry through two kvstashd against pipelined Redis commands\n"
		"(docs/PERFORMANCE.md).  Starts its own redis-server and kvstashd processes.\n"
		"  --kvstashd PATH      the daemon (default: ../sidecar/kvstashd next to this tool)\n"
		"  --redis-server PATH  the Redis server (default: redis-server from $PATH)\n"
		"  --reps R             repetitions of each query and of flush after 1 (%u)\n"
		"  --pool SIZE          each kvstashd's pool (default 512M)\n"
		"  --block-kib K        block size, 4 to 16 KiB (%u)\n"
		"  --blocks N           the large N and K: flush after N, query of N keys (%u)\n"
		"  --max-keys N         the daemons' [session] max_keys (larger QUERYs are split)\n"
		"  --daemon-ini TEXT    appended to both daemons' configuration (\\n: a new line)\n",
		O.reps, O.block_kib, O.blocks);
}

static void default_kvstashd(void)
{
	char self[PATH_MAX - 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	snprintf(O.kvstashd, sizeof(O.kvstashd), "kvstashd");
	if (n <= 0)
		return;
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return;
	*slash = '\0';
	snprintf(O.kvstashd, sizeof(O.kvstashd), "%s/../sidecar/kvstashd", self);
}

static uint64_t parse_size_arg(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);

	switch (*end) {
	case 'G':
		v <<= 10;
		/* fall through */
	case 'M':
		v <<= 10;
		/* fall through */
	case 'K':
		v <<= 10;
		end++;
		break;
	default:
		break;
	}
	if (*end || v == 0)
		die("bad size '%s' (e.g. 256M)", s);
	return v;
}

static void parse_args(int argc, char **argv)
{
	enum {
		OPT_KVSTASHD = 256,
		OPT_REDIS,
		OPT_REPS,
		OPT_POOL,
		OPT_BLOCK,
		OPT_BLOCKS,
		OPT_MAX_KEYS,
		OPT_INI
	};
	static const struct option opts[] = {
		{ "kvstashd", required_argument, NULL, OPT_KVSTASHD },
		{ "redis-server", required_argument, NULL, OPT_REDIS },
		{ "reps", required_argument, NULL, OPT_REPS },
		{ "pool", required_argument, NULL, OPT_POOL },
		{ "block-kib", required_argument, NULL, OPT_BLOCK },
		{ "blocks", required_argument, NULL, OPT_BLOCKS },
		{ "max-keys", required_argument, NULL, OPT_MAX_KEYS },
		{ "daemon-ini", required_argument, NULL, OPT_INI },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	default_kvstashd();
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_KVSTASHD:
			snprintf(O.kvstashd, sizeof(O.kvstashd), "%s", optarg);
			break;
		case OPT_REDIS:
			O.redis_server = optarg;
			break;
		case OPT_REPS:
			O.reps = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case OPT_POOL:
			O.pool = parse_size_arg(optarg);
			break;
		case OPT_BLOCK:
			O.block_kib = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case OPT_BLOCKS:
			O.blocks = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case OPT_MAX_KEYS:
			O.max_keys = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case OPT_INI:
			O.ini = unescape_newlines(optarg);
			break;
		default:
			usage_exit(usage, c);
		}
	}
	if (optind < argc || O.reps < 1 || O.reps > 1000 || O.block_kib < 4 || O.block_kib > 16 ||
	    O.blocks < 1000 || O.blocks > (1u << 20))
		usage_exit(usage, '?');
}

static void loadavg(char *buf, size_t len)
{
	FILE *f = fopen("/proc/loadavg", "r");

	snprintf(buf, len, "?");
	if (f && fgets(buf, (int)len, f))
		buf[strcspn(buf, " ")] = '\0';
	if (f)
		fclose(f);
}

int main(int argc, char **argv)
{
	static const uint32_t sizes[] = { 64, 512, 4096 };
	uint64_t need, slots;
	char ver[32], load0[32], load1[32];

	parse_args(argc, argv);
	seg_bytes = (uint64_t)O.block_kib * 1024 / (2 * LAYERS);
	block_bytes = 2 * LAYERS * seg_bytes;
	/* Every block saved stays resident: an eviction would unregister one the queries need. */
	need = 1 + O.reps + REPS_1000 * 1000ull + REPS_BIG * (uint64_t)O.blocks;
	slots = O.pool / block_bytes;
	if (need > slots / 10 * 9)
		die("%" PRIu64 " blocks of %" PRIu64 " bytes do not fit a %" PRIu64
		    " MiB pool with room to spare: raise --pool or lower --blocks",
		    need, block_bytes, O.pool >> 20);
	loadavg(load0, sizeof(load0));

	redis_bench_start(&rb, O.redis_server);
	snprintf(cluster, sizeof(cluster), "bench-%d", (int)getpid());
	/* As long as the registry's block keys, in a name of their own. */
	snprintf(prefix, sizeof(prefix), "kvs:%s:c:0123456789abcdef", cluster);
	/* Registered after redis-bench's handler, so it runs first: Redis outlives the nodes. */
	atexit(stop_nodes);
	/* Before the baseline's connection exists, so the daemons do not inherit it. */
	node_spawn(&nodes[0]);
	node_spawn(&nodes[1]);
	rc = redis_bench_connect(&rb);
	redis_bench_version(rc, ver, sizeof(ver));
	node_connect(&nodes[0]);
	node_connect(&nodes[1]);
	warm_up();

	printf("kvstash-cluster-bench: libkvstash %s, %s; redis-server %s at %s:%d; %ld CPUs, "
	       "load %s\n",
	       kvs_version(), O.kvstashd, ver, rb.host, rb.port, sysconf(_SC_NPROCESSORS_ONLN),
	       load0);
	printf("two kvstashd (nodes a, b; pool %" PRIu64 " MiB each), blocks of %" PRIu64
	       " bytes (%u layers x K,V x %" PRIu64 "), max_keys %u\n\n",
	       O.pool >> 20, block_bytes, LAYERS, seg_bytes, nodes[1].info.max_keys);
	printf("| %-26s | %13s | %13s | %7s | %s\n", "measure", "kvstashd", "baseline", "ratio",
	       "notes");
	printf("|%.28s|%.15s|%.15s|%.9s|------\n", "------------------------------",
	       "---------------:", "---------------:", "--------:");
	fflush(stdout);

	bench_flush(1, O.reps, SEED_ONE);
	bench_flush(1000, REPS_1000, SEED_1000);
	bench_flush(O.blocks, REPS_BIG, SEED_BIG);
	fflush(stdout);
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (sizes[i] < O.blocks)
			bench_query(sizes[i], O.reps);
	bench_query(O.blocks, O.reps / 3 + 1);

	loadavg(load1, sizeof(load1));
	printf("\nload average %s at the start, %s at the end\n", load0, load1);
	finished = true;
	redisFree(rc);
	return 0;
}
