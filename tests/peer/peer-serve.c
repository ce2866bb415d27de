/* SPDX-License-Identifier: MIT */
/*
 * peer-serve: the embedded service, as an engine that keeps its KV cache
 * in its own process would run it.  It holds N page-first blocks (payloads
 * derived from their keys) in memory of its own, registers that memory
 * with libkvspeer, and answers lock requests through the host callbacks.
 *
 * stdout: "listening ADDR:PORT" once serving; "held" when --hold-after
 * stops it; "stats ..." and "peers ..." lines when asked.  stdin, one
 * command a line: stats, peers, go (release --hold-after), quit.  Exits 3
 * with "error kvspeer_new: ERRNO" when the service does not start.
 *
 * Test knobs: --hold-after K blocks the service thread inside the K-th
 * generation() call (after the K-th shard was sent: mid-transfer) until
 * "go"; --recycle B bumps block B's generation and rewrites it the first
 * time generation() is read for it (a slot reused while locked);
 * --have N keeps only the first N blocks resident (a stale registry).
 *
 * --kvstash-ns NAME serves kvstashd nodes instead (an engine embedding the
 * service): the namespace NAME of --layers layers of --segments segments
 * (1 or 2) of --segment-bytes bytes, --tp ranks (--mla: replicated), its
 * digest and shard size from kvspeer_kvstash_ns(), each shard the block's
 * layers and segments in order as kvstashd's slots hold them.
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

struct host {
	struct geo g;
	uint32_t nblocks, have;
	uint8_t digest[KVSPEER_DIGEST_SIZE];
	uint8_t (*keys)[KVSPEER_KEY_SIZE];
	uint8_t *mem;
	_Atomic uint64_t *gen; /* per block x shard */
	_Atomic int *pins;     /* per block */
	long hold_after;
	long recycle;
	_Atomic long gen_calls;
	bool recycled;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool go;
};

static uint8_t *shard_addr(struct host *h, uint32_t b, uint32_t s)
{
	return h->mem + ((uint64_t)b * h->g.tp + s) * h->g.shard_bytes;
}

static int h_lock(void *arg, const struct kvspeer_lock_req *req, struct kvspeer_shard *ret,
		  uint64_t *cookies)
{
	struct host *h = arg;
	uint32_t n = 0;

	/* Another namespace or geometry: nothing here (the digest includes the geometry). */
	if (memcmp(req->digest, h->digest, KVSPEER_DIGEST_SIZE) || req->nr_shards != h->g.tp)
		return 0;
	for (uint32_t i = 0; i < req->nr_keys; i++) {
		uint32_t b;

		for (b = 0; b < h->have; b++)
			if (!memcmp(h->keys[b], req->keys + (size_t)i * KVSPEER_KEY_SIZE,
				    KVSPEER_KEY_SIZE))
				break;
		if (b == h->have)
			break;
		atomic_fetch_add(&h->pins[b], 1);
		for (uint32_t s = 0; s < h->g.tp; s++) {
			ret[(size_t)i * h->g.tp + s].addr = shard_addr(h, b, s);
			ret[(size_t)i * h->g.tp + s].len = h->g.shard_bytes;
			ret[(size_t)i * h->g.tp + s].generation = atomic_load_explicit(
				&h->gen[(size_t)b * h->g.tp + s], memory_order_acquire);
		}
		cookies[i] = b;
		n++;
	}
	return (int)n;
}

static void h_unlock(void *arg, const uint64_t *cookies, uint32_t nr)
{
	struct host *h = arg;

	for (uint32_t i = 0; i < nr; i++)
		atomic_fetch_sub(&h->pins[cookies[i]], 1);
}

static uint64_t h_generation(void *arg, uint64_t cookie, uint32_t shard)
{
	struct host *h = arg;
	long n = atomic_fetch_add(&h->gen_calls, 1) + 1;
	_Atomic uint64_t *g = &h->gen[cookie * h->g.tp + shard];

	if (h->recycle >= 0 && (long)cookie == h->recycle && shard == 0 && !h->recycled) {
		/* A slot reused while locked: generation first, fence, then the new bytes. */
		h->recycled = true;
		atomic_fetch_add_explicit(g, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_release);
		memset(shard_addr(h, (uint32_t)cookie, 0), 0xa5, h->g.shard_bytes);
	}
	if (h->hold_after > 0 && n == h->hold_after) {
		printf("held\n");
		fflush(stdout);
		pthread_mutex_lock(&h->lock);
		while (!h->go)
			pthread_cond_wait(&h->cond, &h->lock);
		pthread_mutex_unlock(&h->lock);
	}
	return atomic_load_explicit(g, memory_order_acquire);
}

static void log_cb(void *arg, int level, const char *msg)
{
	fprintf(stderr, "peer-serve: [%d] %s\n", level, msg);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: peer-serve --listen ADDR:PORT --allow CIDRS --secret FILE [--node N] [--cluster C]\n"
		"  [--epoch E] [--blocks N] [--have N] [--layers L] [--tp T] [--mla] [--shard-bytes B]\n"
		"  [--seed S] [--ns NAME] [--transport tcp|ucx] [--ucx-allow-tcp] [--ucx-devices D]\n"
		"  [--ttl MS] [--io-timeout MS] [--hello-timeout MS] [--max-locks N] [--max-conns N]\n"
		"  [--hold-after K] [--recycle B]\n"
		"  [--kvstash-ns NAME --layers L --segments 1|2 --segment-bytes B [--tp T] [--mla]]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", 1, NULL, 'l' },	   { "allow", 1, NULL, 'a' },
		{ "secret", 1, NULL, 's' },	   { "node", 1, NULL, 'n' },
		{ "cluster", 1, NULL, 'c' },	   { "epoch", 1, NULL, 'e' },
		{ "blocks", 1, NULL, 'b' },	   { "have", 1, NULL, 'H' },
		{ "layers", 1, NULL, 'L' },	   { "tp", 1, NULL, 't' },
		{ "mla", 0, NULL, 'm' },	   { "shard-bytes", 1, NULL, 'B' },
		{ "seed", 1, NULL, 'S' },	   { "ns", 1, NULL, 'N' },
		{ "transport", 1, NULL, 'T' },	   { "ucx-allow-tcp", 0, NULL, 'U' },
		{ "ucx-devices", 1, NULL, 'D' },   { "ttl", 1, NULL, 'x' },
		{ "io-timeout", 1, NULL, 'i' },	   { "hello-timeout", 1, NULL, 'h' },
		{ "max-locks", 1, NULL, 'k' },	   { "max-conns", 1, NULL, 'C' },
		{ "hold-after", 1, NULL, 'o' },	   { "recycle", 1, NULL, 'r' },
		{ "kvstash-ns", 1, NULL, 'K' },	   { "segments", 1, NULL, 'G' },
		{ "segment-bytes", 1, NULL, 'Y' }, { NULL, 0, NULL, 0 },
	};
	struct kvspeer_host_ops ops = { h_lock, h_unlock, h_generation };
	struct kvspeer_params p;
	struct host h = { .hold_after = 0, .recycle = -1 };
	const char *ns = "qwen3-8b/bf16/pf16", *kvstash_ns = NULL;
	uint32_t layers = 0, tp = 1, blocks = 64, segments = 1;
	uint64_t segment_bytes = 0;
	long have = -1;
	uint64_t seed = 1, shard_bytes = 0;
	int mla = 0, opt, r;
	struct kvspeer *kp;
	char line[256], addr[KVSPEER_ADDR_MAX];
	uint64_t total;

	kvspeer_params_init(&p);
	p.node = "serve";
	p.cluster = "test";
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			p.listen = optarg;
			break;
		case 'a':
			p.allow = optarg;
			break;
		case 's':
			p.secret_file = optarg;
			break;
		case 'n':
			p.node = optarg;
			break;
		case 'c':
			p.cluster = optarg;
			break;
		case 'e':
			p.epoch = strtoull(optarg, NULL, 0);
			break;
		case 'b':
			blocks = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'H':
			have = strtol(optarg, NULL, 0);
			break;
		case 'L':
			layers = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 't':
			tp = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'm':
			mla = 1;
			break;
		case 'B':
			shard_bytes = strtoull(optarg, NULL, 0);
			break;
		case 'S':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'N':
			ns = optarg;
			break;
		case 'T':
			p.transport = !strcmp(optarg, "ucx") ? KVSPEER_TRANSPORT_UCX
							     : KVSPEER_TRANSPORT_TCP;
			break;
		case 'U':
			p.flags |= KVSPEER_F_UCX_ALLOW_TCP;
			break;
		case 'D':
			p.ucx_devices = optarg;
			break;
		case 'x':
			p.lock_ttl_ms = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'i':
			p.io_timeout_ms = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'h':
			p.hello_timeout_ms = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'k':
			p.max_locks_per_peer = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'C':
			p.max_conns_per_peer = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'o':
			h.hold_after = strtol(optarg, NULL, 0);
			break;
		case 'r':
			h.recycle = strtol(optarg, NULL, 0);
			break;
		case 'K':
			kvstash_ns = optarg;
			break;
		case 'G':
			segments = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'Y':
			segment_bytes = strtoull(optarg, NULL, 0);
			break;
		default:
			usage();
		}
	}
	if (!p.listen || !p.allow || !p.secret_file || !blocks)
		usage();
	signal(SIGPIPE, SIG_IGN);
	if (kvstash_ns) {
		/* What a kvstashd asks for: the public description, nothing of ours. */
		struct kvspeer_kvstash_layer *kl = calloc(layers ? layers : 1, sizeof(*kl));
		struct kvspeer_kvstash_ns kn = {
			.name = kvstash_ns,
			.tp_size = tp,
			.replicated = (uint32_t)mla,
			.nr_layers = layers,
			.layers = kl,
		};

		for (uint32_t i = 0; kl && i < layers; i++)
			kl[i] = (struct kvspeer_kvstash_layer){ .segments = segments,
								.segment_bytes = segment_bytes };
		r = kl ? kvspeer_kvstash_ns(&kn, h.digest, &shard_bytes) : -ENOMEM;
		free(kl);
		if (r < 0) {
			printf("error kvspeer_kvstash_ns: %s\n", errname(r));
			return 2;
		}
	}
	geo_init(&h.g, layers, tp, mla, shard_bytes);
	h.nblocks = blocks;
	h.have = have >= 0 && (uint32_t)have < blocks ? (uint32_t)have : blocks;
	if (!kvstash_ns)
		make_digest(ns, &h.g, h.digest);
	total = (uint64_t)blocks * h.g.tp * h.g.shard_bytes;
	h.mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	h.keys = calloc(blocks, KVSPEER_KEY_SIZE);
	h.gen = calloc((size_t)blocks * h.g.tp, sizeof(*h.gen));
	h.pins = calloc(blocks, sizeof(*h.pins));
	if (h.mem == MAP_FAILED || !h.keys || !h.gen || !h.pins) {
		fprintf(stderr, "peer-serve: out of memory for %llu bytes\n",
			(unsigned long long)total);
		return 2;
	}
	for (uint32_t b = 0; b < blocks; b++) {
		make_key(seed, b, h.keys[b]);
		for (uint32_t s = 0; s < h.g.tp; s++) {
			payload_fill(shard_addr(&h, b, s), h.g.shard_bytes, h.keys[b], s);
			h.gen[(size_t)b * h.g.tp + s] = 1;
		}
	}
	pthread_mutex_init(&h.lock, NULL);
	pthread_cond_init(&h.cond, NULL);
	p.ops = &ops;
	p.host = &h;
	p.log = log_cb;
	r = kvspeer_new(&p, &kp);
	if (r < 0) {
		printf("error kvspeer_new: %s\n", errname(r));
		fflush(stdout);
		return 3;
	}
	r = kvspeer_mem_register(kp, h.mem, total);
	if (r < 0) {
		printf("error kvspeer_mem_register: %s\n", errname(r));
		fflush(stdout);
		kvspeer_free(kp);
		return 3;
	}
	kvspeer_local_addr(kp, addr, sizeof(addr));
	printf("listening %s\n", addr);
	fflush(stdout);

	while (fgets(line, sizeof(line), stdin)) {
		struct kvspeer_stats st;

		if (!strncmp(line, "stats", 5)) {
			int pins = 0;

			kvspeer_stats(kp, &st);
			for (uint32_t b = 0; b < blocks; b++)
				pins += atomic_load(&h.pins[b]);
			printf("pins %d\n", pins);
			print_stats(stdout, &st);
		} else if (!strncmp(line, "peers", 5)) {
			struct kvspeer_peer_info pi[64];
			int n = kvspeer_peers(kp, pi, 64);

			printf("peers %d", n);
			for (int i = 0; i < n && i < 64; i++)
				printf(" [%s %s role=%u state=%u locks=%u blocks=%llu]", pi[i].addr,
				       pi[i].node, pi[i].role, pi[i].state, pi[i].locks,
				       (unsigned long long)pi[i].blocks);
			printf("\n");
			fflush(stdout);
		} else if (!strncmp(line, "go", 2)) {
			pthread_mutex_lock(&h.lock);
			h.go = true;
			pthread_cond_broadcast(&h.cond);
			pthread_mutex_unlock(&h.lock);
		} else if (!strncmp(line, "quit", 4)) {
			break;
		}
	}
	/* Let a held service thread go, so kvspeer_free() can join it. */
	pthread_mutex_lock(&h.lock);
	h.go = true;
	pthread_cond_broadcast(&h.cond);
	pthread_mutex_unlock(&h.lock);
	kvspeer_free(kp);
	for (uint32_t b = 0; b < blocks; b++)
		if (atomic_load(&h.pins[b])) {
			fprintf(stderr, "peer-serve: block %u still pinned after kvspeer_free()\n",
				b);
			return 1;
		}
	munmap(h.mem, total);
	free(h.keys);
	free(h.gen);
	free(h.pins);
	return 0;
}
