/* SPDX-License-Identifier: MIT */
/*
 * pd-handoff: the prefill/decode handoff as an engine does it, between two
 * kvstashd nodes with the peer service (kvstash(7), CLUSTER), and a check
 * of every byte.
 *
 *   prefill (one process, its tp ranks):  every rank SAVEs its shard of the
 *     prompt's blocks; rank 0 FLUSHes with KVS_FLUSH_INSTANCE and
 *     KVS_FLUSH_CLUSTER (every rank's blocks sealed and registered), then
 *     tells decode where they are: its node's peer_listen (--hint) and the
 *     keys, through the application's own channel (a pipe here);
 *   decode (another process): its scheduler QUERYs with KVS_QUERY_FETCH
 *     and the hint (no hint: the registry finds the holder), and every
 *     rank LOADs the lease into other block ids, poisoned first, and
 *     tells prefill it is done (the next request waits for it: the
 *     example times one handoff at a time, and a prefill that ran ahead
 *     could push the blocks decode is about to fetch out of its pool).
 *
 *   kvstash-example-pd --prefill-socket PATH --decode-socket PATH
 *                      [--hint ADDR:PORT] [--ns NAME] [--tp N] [--layers N]
 *                      [--segment-bytes N] [--blocks N] [--runs N]
 *                      [--replicated] [--allow-partial] [--seed N]
 *
 * --seed N: prompt r's keys and bytes come from N * 1000 + r + 1 instead
 * of the process id, so that another program can name the blocks (a test
 * that locks them from elsewhere).
 *
 * --replicated: an MLA-like layout every rank holds whole
 * (KVS_REGISTER_REPLICATED): prefill's rank 0 alone SAVEs, each block is
 * one shard, fetched once, and every decode rank LOADs the same bytes.
 *
 * Prints each phase's time per run (the handoff: FLUSH to the last LOAD).
 * Exit status 0 when every fetched block is byte-exact and, unless
 * --allow-partial (a test that kills the prefill node), all were fetched.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kvstash/kvstash.h>

#define MAX_TP	   8
#define TIMEOUT_MS 30000
#define SAVE_CHUNK 8

struct args {
	const char *psock, *dsock, *hint, *ns;
	unsigned tp, layers, blocks, runs;
	uint64_t seg;
	bool partial, replicated;
	uint64_t seed; /* 0: the process id */
};

/* Shards a block has: one per rank, or one for all (--replicated). */
static unsigned nr_shards(const struct args *a)
{
	return a->replicated ? 1 : a->tp;
}

/* The shard rank @t holds: its own, or the one they all share. */
static unsigned shard_of(const struct args *a, unsigned t)
{
	return a->replicated ? 0 : t;
}

struct rank {
	struct kvs_client *c;
	uint8_t *kv;
	int fd;
	uint64_t size;
};

/* What prefill tells decode for each request (the application's message). */
struct handoff {
	char hint[KVS_FETCH_HINT_MAX];
	uint64_t prompt; /* seeds the keys and the bytes */
	uint64_t flush_ns;
	int32_t status; /* the FLUSH's res */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Rank @rank's bytes of block @i of prompt @prompt: a shard swapped is caught. */
static void fill(uint8_t *p, uint64_t n, uint64_t prompt, unsigned rank, unsigned i)
{
	uint64_t seed = prompt * 1000003u + rank * 7919u + i;

	for (uint64_t k = 0; k + 8 <= n; k += 8) {
		uint64_t v = mix(&seed);

		memcpy(p + k, &v, 8);
	}
}

/* Prefix-chained keys, as an engine hashes its token blocks. */
static void make_keys(uint8_t *keys, unsigned n, uint64_t prompt)
{
	uint64_t s = prompt ^ 0x70646b657973ull;

	for (unsigned i = 0; i < n; i++) {
		uint64_t k[2] = { mix(&s), mix(&s) };

		memcpy(keys + 16 * (size_t)i, k, 16);
	}
}

static int fail(const char *who, const char *what, int r)
{
	fprintf(stderr, "pd-handoff %s: %s: %s\n", who, what, kvs_strerror(r));
	return 1;
}

static void rank_close(struct rank *rk)
{
	kvs_close(rk->c);
	if (rk->kv)
		kvs_host_free(rk->fd, rk->kv, rk->size);
	memset(rk, 0, sizeof(*rk));
	rk->fd = -1;
}

/* Connect rank @rank of instance @inst on @sock and register a page-first cache. */
static int rank_open(const struct args *a, const char *sock, const char *inst, unsigned rank,
		     unsigned blocks, struct rank *rk)
{
	struct kvs_connect_opts o;
	struct kvs_layer lay[256];
	char names[256][32];
	uint64_t bb = a->layers * a->seg;
	struct kvs_mem mem;
	int r;

	rk->fd = -1;
	rk->size = bb * blocks;
	r = kvs_host_alloc(rk->size, &rk->fd, (void **)&rk->kv);
	if (r < 0)
		return r;
	kvs_connect_opts_init(&o);
	o.instance = inst;
	o.ns = a->ns;
	o.tp_rank = rank;
	o.tp_size = a->tp;
	o.flags = KVS_CONNECT_CLUSTER;
	r = kvs_connect(sock, &o, &rk->c);
	if (r < 0)
		return r;
	for (unsigned l = 0; l < a->layers; l++) {
		snprintf(names[l], sizeof(names[l]), "model.layers.%u", l);
		lay[l] = (struct kvs_layer){ .name = names[l],
					     .segments = 1,
					     .offset = l * a->seg,
					     .num_blocks = blocks,
					     .segment_bytes = a->seg,
					     .block_stride = bb };
	}
	mem = (struct kvs_mem){ .kind = KVS_MEM_HOST_FD, .fd = rk->fd, .size = rk->size };
	return kvs_register(rk->c, &mem, 1, lay, a->layers,
			    a->replicated ? KVS_REGISTER_REPLICATED : 0);
}

/* ---- prefill ------------------------------------------------------------- */

static int prefill(const struct args *a, int out, int done)
{
	struct rank rk[MAX_TP] = { 0 };
	uint8_t *keys = malloc(16 * (size_t)a->blocks);
	uint32_t *ids = malloc(4 * (size_t)a->blocks);
	uint64_t bb = a->layers * a->seg, reg = 0, drop = 0;
	char inst[64];
	int r = 0, ret = 1;
	char c;

	snprintf(inst, sizeof(inst), "prefill-%d", (int)getpid());
	for (unsigned t = 0; t < a->tp; t++)
		rk[t].fd = -1;
	if (!keys || !ids) {
		fail("prefill", "allocating", -ENOMEM);
		goto out;
	}
	for (unsigned t = 0; t < a->tp && r == 0; t++)
		r = rank_open(a, a->psock, inst, t, a->blocks, &rk[t]);
	if (r < 0) {
		fail("prefill", "connecting its ranks", r);
		goto out;
	}
	for (unsigned run = 0; run < a->runs; run++) {
		struct handoff h = {
			.prompt = (a->seed ? a->seed : (uint64_t)getpid()) * 1000u + run + 1
		};
		uint64_t t0;

		make_keys(keys, a->blocks, h.prompt);
		for (unsigned i = 0; i < a->blocks; i++) {
			ids[i] = i;
			for (unsigned t = 0; t < a->tp; t++)
				fill(rk[t].kv + i * bb, bb, h.prompt, shard_of(a, t), i);
		}
		/*
		 * The ranks save side by side, a chunk each in turn, as an
		 * engine's ranks do: a block seals once every rank saved its
		 * shard, and what waits unsealed counts against the instance's
		 * share of the pool ([pool] unsealed_share).
		 */
		for (unsigned i = 0; i < a->blocks; i += SAVE_CHUNK) {
			uint32_t n = a->blocks - i < SAVE_CHUNK ? a->blocks - i : SAVE_CHUNK;

			/* Replicated: rank 0's copy is the block (the others' SAVEs would be skipped). */
			for (unsigned t = 0; t < nr_shards(a); t++) {
				r = kvs_save_sync(rk[t].c, keys + 16 * (size_t)i, ids + i, n,
						  TIMEOUT_MS, NULL, NULL);
				if (r != (int)n) {
					fail("prefill", "SAVE", r < 0 ? r : -EIO);
					goto out;
				}
			}
		}
		/* Every rank's blocks sealed and registered before decode is told. */
		t0 = now_ns();
		h.status = kvs_flush_cluster_sync(rk[0].c, KVS_FLUSH_INSTANCE, TIMEOUT_MS, &reg,
						  &drop);
		h.flush_ns = now_ns() - t0;
		if (h.status < 0 && h.status != -EOPNOTSUPP)
			fprintf(stderr, "pd-handoff prefill: cluster FLUSH: %s (%" PRIu64
					" dropped): decode may find fewer\n",
				kvs_strerror(h.status), drop);
		snprintf(h.hint, sizeof(h.hint), "%s", a->hint ? a->hint : "");
		if (write(out, &h, sizeof(h)) != (ssize_t)sizeof(h)) {
			fail("prefill", "telling decode", -errno);
			goto out;
		}
		/* Decode's word that it loaded the request (EOF: it stopped; its status says why). */
		if (read(done, &c, 1) != 1)
			break;
	}
	ret = 0;
out:
	for (unsigned t = 0; t < a->tp; t++)
		rank_close(&rk[t]);
	free(keys);
	free(ids);
	return ret;
}

/* ---- decode -------------------------------------------------------------- */

static int decode(const struct args *a, int in, int done)
{
	struct rank rk[MAX_TP] = { 0 };
	struct kvs_connect_opts o;
	struct kvs_client *sched = NULL;
	uint8_t *keys = malloc(16 * (size_t)a->blocks), *want = malloc(a->layers * a->seg);
	uint32_t *ids = malloc(4 * (size_t)a->blocks);
	unsigned slots = 2 * a->blocks;
	uint64_t bb = a->layers * a->seg;
	char inst[64];
	int r = 0, ret = 1;

	snprintf(inst, sizeof(inst), "decode-%d", (int)getpid());
	for (unsigned t = 0; t < a->tp; t++)
		rk[t].fd = -1;
	if (!keys || !ids || !want) {
		fail("decode", "allocating", -ENOMEM);
		goto out;
	}
	for (unsigned t = 0; t < a->tp && r == 0; t++)
		r = rank_open(a, a->dsock, inst, t, slots, &rk[t]);
	if (r == 0) {
		/* The scheduler: no memory, QUERY only (a lease its ranks LOAD). */
		kvs_connect_opts_init(&o);
		o.instance = inst;
		o.ns = a->ns;
		o.role = KVS_ROLE_SCHEDULER;
		o.tp_size = a->tp;
		r = kvs_connect(a->dsock, &o, &sched);
	}
	if (r < 0) {
		fail("decode", "connecting", r);
		goto out;
	}
	printf("%-4s %8s %8s %10s %9s %8s %10s %8s\n", "run", "blocks", "MiB", "flush_ms",
	       "fetch_ms", "GB/s", "load_ms", "total_ms");
	for (unsigned run = 0; run < a->runs; run++) {
		struct handoff h;
		uint64_t lease = 0, t0, t1, t2;
		int hits;

		if (read(in, &h, sizeof(h)) != (ssize_t)sizeof(h)) {
			fail("decode", "no word from prefill", -EPIPE);
			goto out;
		}
		h.hint[sizeof(h.hint) - 1] = '\0';
		make_keys(keys, a->blocks, h.prompt);
		t0 = now_ns();
		hits = kvs_query_fetch_sync(sched, keys, a->blocks, h.prompt, 0,
					    h.hint[0] ? h.hint : NULL, TIMEOUT_MS, &lease);
		t1 = now_ns();
		if (hits < 0) {
			fail("decode", "QUERY with fetch", hits);
			goto out;
		}
		/* Into the second half of the cache: other ids than prefill's. */
		for (unsigned i = 0; i < (unsigned)hits; i++)
			ids[i] = a->blocks + i;
		for (unsigned t = 0; t < a->tp && hits > 0; t++) {
			memset(rk[t].kv + a->blocks * bb, 0xa5, (size_t)hits * bb);
			r = kvs_load_sync(rk[t].c, lease, ids, (uint32_t)hits, 0, 0, TIMEOUT_MS);
			if (r != hits) {
				fail("decode", "LOAD", r < 0 ? r : -EIO);
				goto out;
			}
		}
		t2 = now_ns();
		for (unsigned t = 0; t < a->tp; t++)
			for (unsigned i = 0; i < (unsigned)hits; i++) {
				fill(want, bb, h.prompt, shard_of(a, t), i);
				if (memcmp(rk[t].kv + ids[i] * bb, want, bb)) {
					fprintf(stderr,
						"pd-handoff decode: rank %u block %u differs from "
						"what prefill saved\n",
						t, i);
					goto out;
				}
			}
		/*
		 * Every rank LOADed the lease, which ends it; a lease no rank
		 * loads (a LOAD failed) ends with kvs_close() below.
		 */
		printf("%-4u %8d %8.1f %10.3f %9.3f %8.2f %10.3f %8.3f\n", run, hits,
		       (double)hits * bb * nr_shards(a) / (1 << 20), h.flush_ns / 1e6, (t1 - t0) / 1e6,
		       t1 > t0 ? (double)hits * bb * nr_shards(a) / (double)(t1 - t0) : 0.0,
		       (t2 - t1) / 1e6, (h.flush_ns + t2 - t0) / 1e6);
		if ((unsigned)hits != a->blocks && !a->partial) {
			fprintf(stderr, "pd-handoff decode: %d of %u blocks fetched\n", hits,
				a->blocks);
			goto out;
		}
		if (write(done, "", 1) != 1) {
			fail("decode", "telling prefill", -errno);
			goto out;
		}
	}
	ret = 0;
out:
	kvs_close(sched);
	for (unsigned t = 0; t < a->tp; t++)
		rank_close(&rk[t]);
	free(keys);
	free(ids);
	free(want);
	return ret;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kvstash-example-pd --prefill-socket PATH --decode-socket PATH\n"
		   "       [--hint ADDR:PORT] [--ns NAME] [--tp N] [--layers N]\n"
		   "       [--segment-bytes N] [--blocks N] [--runs N] [--replicated]\n"
		   "       [--allow-partial] [--seed N]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "prefill-socket", 1, NULL, 'p' }, { "decode-socket", 1, NULL, 'd' },
		{ "hint", 1, NULL, 'H' },	    { "ns", 1, NULL, 'n' },
		{ "tp", 1, NULL, 't' },		    { "layers", 1, NULL, 'l' },
		{ "segment-bytes", 1, NULL, 's' },  { "blocks", 1, NULL, 'b' },
		{ "runs", 1, NULL, 'r' },	    { "allow-partial", 0, NULL, 'P' },
		{ "replicated", 0, NULL, 'R' },	    { "seed", 1, NULL, 'S' },
		{ "help", 0, NULL, 'h' },	    { 0 },
	};
	/* The seed's gate: 33 blocks of a Qwen3-8B-like page-first layout, 74.2 MiB. */
	struct args a = { .ns = "qwen3-8b/bf16/pd", .tp = 1, .layers = 36, .seg = 64 * 1024,
			  .blocks = 33, .runs = 3 };
	int pfd[2], dfd[2], c, st, rp, rd;
	pid_t pid;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'p': a.psock = optarg; break;
		case 'd': a.dsock = optarg; break;
		case 'H': a.hint = optarg; break;
		case 'n': a.ns = optarg; break;
		case 't': a.tp = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'l': a.layers = (unsigned)strtoul(optarg, NULL, 0); break;
		case 's': a.seg = strtoull(optarg, NULL, 0); break;
		case 'b': a.blocks = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'r': a.runs = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'P': a.partial = true; break;
		case 'R': a.replicated = true; break;
		case 'S': a.seed = strtoull(optarg, NULL, 0); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!a.psock || !a.dsock || a.tp == 0 || a.tp > MAX_TP || a.layers == 0 ||
	    a.layers > 256 || a.seg == 0 || a.seg % 8 || a.blocks == 0 || a.blocks > 4096 ||
	    a.runs == 0 || (a.hint && strlen(a.hint) >= KVS_FETCH_HINT_MAX)) {
		usage(stderr);
		return 2;
	}
	printf("handoff of %u blocks x %u %s (%.1f MiB) from %s to %s, hint %s\n", a.blocks,
	       nr_shards(&a), a.replicated ? "replicated shard" : "ranks",
	       (double)a.blocks * a.layers * a.seg * nr_shards(&a) / (1 << 20), a.psock, a.dsock,
	       a.hint ? a.hint : "none (the registry)");
	fflush(stdout);
	if (pipe(pfd) < 0 || pipe(dfd) < 0)
		return fail("main", "pipe", -errno);
	pid = fork();
	if (pid < 0)
		return fail("main", "fork", -errno);
	if (pid == 0) {
		int rc;

		close(pfd[1]);
		close(dfd[0]);
		rc = decode(&a, pfd[0], dfd[1]);
		fflush(stdout);
		_exit(rc);
	}
	close(pfd[0]);
	close(dfd[1]);
	rp = prefill(&a, pfd[1], dfd[0]);
	close(pfd[1]); /* decode sees EOF if prefill stopped early */
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	rd = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	return rp || rd ? 1 : 0;
}
