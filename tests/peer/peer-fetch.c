/* SPDX-License-Identifier: MIT */
/*
 * peer-fetch: fetch a prefix of blocks from a peer-serve (or any kvspeer
 * service) into buffers of its own, and check every byte of every block
 * the library counted as fetched against the pattern its key gives, and
 * the guard bytes around every buffer (nothing may be written outside
 * what the alloc callback handed out, whatever the peer sends).
 *
 * stdout, per fetch: "result fetched=N of=M error=ERRNO bad_bytes=B
 * guards=ok|broken ms=T"; with --landed, "landed N" as the prefix grows.
 * Exit 0 when every counted byte and every guard is right (however short
 * the prefix: the test script judges that), 1 otherwise, 2 on bad usage.
 */
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"

#define GUARD	   64u
#define GUARD_BYTE 0xc3

struct ctx {
	struct geo g;
	uint32_t nblocks;
	uint8_t *mem;
	uint64_t stride;
	long alloc_limit;
	bool landed;
	_Atomic int joined;
	_Atomic int join_result;
};

static uint8_t *buf_of(struct ctx *c, uint32_t b, uint32_t s)
{
	return c->mem + ((uint64_t)b * c->g.tp + s) * c->stride + GUARD;
}

static void *f_alloc(void *arg, uint32_t block, uint32_t shard, uint64_t len)
{
	struct ctx *c = arg;

	if (c->alloc_limit >= 0 && block >= (uint32_t)c->alloc_limit)
		return NULL;
	if (block >= c->nblocks || shard >= c->g.tp || len != c->g.shard_bytes) {
		/* The library passes the peer's lengths, checked against nothing of ours: we check. */
		fprintf(stderr, "peer-fetch: alloc for block %u shard %u of %llu bytes refused\n",
			block, shard, (unsigned long long)len);
		return NULL;
	}
	return buf_of(c, block, shard);
}

static void f_landed(void *arg, uint32_t n)
{
	struct ctx *c = arg;

	if (c->landed) {
		printf("landed %u\n", n);
		fflush(stdout);
	}
}

static void f_joined(void *arg, struct kvspeer_fetch *f, int n)
{
	struct ctx *c = arg;

	atomic_fetch_add(&c->joined, 1);
	atomic_store(&c->join_result, n);
}

static void log_cb(void *arg, int level, const char *msg)
{
	fprintf(stderr, "peer-fetch: [%d] %s\n", level, msg);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: peer-fetch --peer ADDR:PORT --secret FILE [--cluster C] [--node N] [--blocks N]\n"
		"  [--layers L] [--tp T] [--mla] [--shard-bytes B] [--seed S] [--ns NAME] [--timeout MS]\n"
		"  [--expect-node N] [--expect-epoch E] [--transport tcp|ucx] [--ucx-allow-tcp]\n"
		"  [--ucx-devices D] [--repeat R] [--alloc-limit K] [--landed] [--join J] [--stats]\n"
		"  [--health]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "peer", 1, NULL, 'p' },	 { "secret", 1, NULL, 's' },
		{ "cluster", 1, NULL, 'c' },	 { "node", 1, NULL, 'n' },
		{ "blocks", 1, NULL, 'b' },	 { "layers", 1, NULL, 'L' },
		{ "tp", 1, NULL, 't' },		 { "mla", 0, NULL, 'm' },
		{ "shard-bytes", 1, NULL, 'B' }, { "seed", 1, NULL, 'S' },
		{ "ns", 1, NULL, 'N' },		 { "timeout", 1, NULL, 'o' },
		{ "expect-node", 1, NULL, 'E' }, { "expect-epoch", 1, NULL, 'P' },
		{ "transport", 1, NULL, 'T' },	 { "ucx-allow-tcp", 0, NULL, 'U' },
		{ "ucx-devices", 1, NULL, 'D' }, { "repeat", 1, NULL, 'r' },
		{ "alloc-limit", 1, NULL, 'A' }, { "landed", 0, NULL, 'l' },
		{ "join", 1, NULL, 'j' },	 { "stats", 0, NULL, 'x' },
		{ "health", 0, NULL, 'h' },	 { NULL, 0, NULL, 0 },
	};
	struct kvspeer_params p;
	struct kvspeer_fetch_params fp;
	struct ctx c = { .alloc_limit = -1 };
	const char *ns = "qwen3-8b/bf16/pf16";
	uint32_t layers = 0, tp = 1, blocks = 64, timeout = 5000;
	uint64_t seed = 1, shard_bytes = 0, total;
	uint8_t digest[KVSPEER_DIGEST_SIZE], *keys;
	int mla = 0, opt, r, repeat = 1, join = 0, stats = 0, health = 0, status = 0;
	struct kvspeer *kp;

	kvspeer_params_init(&p);
	kvspeer_fetch_params_init(&fp);
	p.node = "fetch";
	p.cluster = "test";
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'p':
			fp.peer = optarg;
			break;
		case 's':
			p.secret_file = optarg;
			break;
		case 'c':
			p.cluster = optarg;
			break;
		case 'n':
			p.node = optarg;
			break;
		case 'b':
			blocks = (uint32_t)strtoul(optarg, NULL, 0);
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
		case 'o':
			timeout = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'E':
			fp.expect_node = optarg;
			break;
		case 'P':
			fp.expect_epoch = strtoull(optarg, NULL, 0);
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
		case 'r':
			repeat = atoi(optarg);
			break;
		case 'A':
			c.alloc_limit = strtol(optarg, NULL, 0);
			break;
		case 'l':
			c.landed = true;
			break;
		case 'j':
			join = atoi(optarg);
			break;
		case 'x':
			stats = 1;
			break;
		case 'h':
			health = 1;
			break;
		default:
			usage();
		}
	}
	if (!fp.peer || !p.secret_file || !blocks || blocks > KVSPEER_MAX_KEYS)
		usage();
	signal(SIGPIPE, SIG_IGN);
	geo_init(&c.g, layers, tp, mla, shard_bytes);
	c.nblocks = blocks;
	c.stride = c.g.shard_bytes + 2 * GUARD;
	total = (uint64_t)blocks * c.g.tp * c.stride;
	c.mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	keys = calloc(blocks, KVSPEER_KEY_SIZE);
	if (c.mem == MAP_FAILED || !keys)
		return 2;
	for (uint32_t b = 0; b < blocks; b++)
		make_key(seed, b, keys + (size_t)b * KVSPEER_KEY_SIZE);
	make_digest(ns, &c.g, digest);
	p.log = log_cb;
	r = kvspeer_new(&p, &kp);
	if (r < 0) {
		printf("error kvspeer_new: %s\n", errname(r));
		return 3;
	}
	if (health) {
		struct kvspeer_health hl;

		r = kvspeer_health(kp, fp.peer, (int)timeout, &hl);
		if (r == 0)
			printf("health node=%s epoch=%llu locks=%u conns=%u transport=%u\n",
			       hl.node, (unsigned long long)hl.epoch, hl.locks, hl.conns,
			       hl.transport);
		else
			printf("health error=%s\n", errname(r));
		kvspeer_free(kp);
		munmap(c.mem, total);
		free(keys);
		return r == 0 ? 0 : 1;
	}
	fp.digest = digest;
	fp.keys = keys;
	fp.nr_keys = blocks;
	fp.nr_shards = c.g.tp;
	fp.timeout_ms = timeout;
	fp.alloc = f_alloc;
	fp.landed = f_landed;
	fp.arg = &c;
	for (int it = 0; it < repeat; it++) {
		struct kvspeer_fetch *f;
		uint64_t t0 = now_ms(), bad = 0;
		bool guards = true;
		int err = 0, n;

		memset(c.mem, GUARD_BYTE, total);
		atomic_store(&c.joined, 0);
		r = kvspeer_fetch_submit(kp, &fp, &f);
		if (r < 0) {
			printf("error submit: %s\n", errname(r));
			status = 1;
			break;
		}
		for (int j = 0; j < join; j++)
			if (kvspeer_fetch_join(f, f_joined, &c) == -EALREADY)
				atomic_fetch_add(&c.joined,
						 1); /* completed already: counts as seen */
		n = kvspeer_fetch_wait(f, &err);
		t0 = now_ms() - t0;
		kvspeer_fetch_unref(f);
		for (uint32_t b = 0; b < blocks; b++)
			for (uint32_t s = 0; s < c.g.tp; s++) {
				uint8_t *d = buf_of(&c, b, s);

				if (n > 0 && b < (uint32_t)n)
					bad += payload_check(d, c.g.shard_bytes,
							     keys + (size_t)b * KVSPEER_KEY_SIZE,
							     s);
				for (uint32_t i = 0; i < GUARD; i++)
					if (d[-(long)GUARD + i] != GUARD_BYTE ||
					    d[c.g.shard_bytes + i] != GUARD_BYTE)
						guards = false;
			}
		printf("result fetched=%d of=%u error=%s bad_bytes=%llu guards=%s ms=%llu", n,
		       blocks, errname(err), (unsigned long long)bad, guards ? "ok" : "broken",
		       (unsigned long long)t0);
		if (join)
			printf(" joined=%d", atomic_load(&c.joined));
		printf("\n");
		fflush(stdout);
		if (bad || !guards || n < 0)
			status = 1;
		if (join && atomic_load(&c.joined) != join)
			status = 1;
	}
	if (stats) {
		struct kvspeer_stats st;
		struct kvspeer_peer_info pi[8];
		int np = kvspeer_peers(kp, pi, 8);

		kvspeer_stats(kp, &st);
		print_stats(stdout, &st);
		for (int i = 0; i < np && i < 8; i++)
			printf("peer %s node=%s state=%u conns=%u locks=%u blocks=%llu failures=%llu last_error=%s\n",
			       pi[i].addr, pi[i].node, pi[i].state, pi[i].conns, pi[i].locks,
			       (unsigned long long)pi[i].blocks, (unsigned long long)pi[i].failures,
			       errname(pi[i].last_error));
		fflush(stdout);
	}
	kvspeer_free(kp);
	munmap(c.mem, total);
	free(keys);
	return status;
}
