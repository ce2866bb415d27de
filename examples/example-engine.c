/* SPDX-License-Identifier: MIT */
/*
 * example-engine: a CPU "engine" that uses kvstashd the way an inference
 * engine would, and checks every byte.
 *
 * It allocates a paged KV cache in shareable host memory in the
 * page-first layout of a Qwen3-8B-like model (36 layers, each block's
 * layers adjacent), registers it, then:
 *   1. NOP round trips (the ring path alone),
 *   2. SAVE a prompt's blocks (keys chained like vLLM's prefix hashes),
 *   3. FLUSH, QUERY the keys (a lease), LOAD the blocks into other block
 *      ids and compare every byte, checking untouched blocks stay poisoned.
 *
 *   example-engine [--socket PATH] [--instance NAME] [--ns NAME]
 *                  [--layers N] [--blocks N] [--segment-bytes N]
 *                  [--prompt-blocks N] [--nops N]
 *
 * Exit status 0 when everything matched.
 */
#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvstash/kvstash.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* splitmix64: deterministic bytes from a seed. */
static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v = mix(&seed);

		memcpy(p + i, &v, 8);
	}
}

/* Prefix-chained keys: key[i] = H(key[i-1], i), as an engine hashes token blocks. */
static void make_keys(uint8_t *keys, unsigned n, uint64_t prompt)
{
	uint64_t parent[2] = { prompt, 0x6b7673746173ull };

	for (unsigned i = 0; i < n; i++) {
		uint64_t s = parent[0] ^ (parent[1] * 31) ^ i;
		uint64_t k[2] = { mix(&s), mix(&s) };

		memcpy(keys + 16 * i, k, 16);
		parent[0] = k[0];
		parent[1] = k[1];
	}
}

static void log_cb(void *arg, int level, const char *msg)
{
	fprintf(stderr, "libkvstash: %s\n", msg);
}

static int fail(const char *what, int r)
{
	fprintf(stderr, "example-engine: %s: %s\n", what, kvs_strerror(r));
	return 1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "instance", required_argument, NULL, 'i' },
		{ "ns", required_argument, NULL, 'n' },
		{ "layers", required_argument, NULL, 'l' },
		{ "blocks", required_argument, NULL, 'b' },
		{ "segment-bytes", required_argument, NULL, 'g' },
		{ "prompt-blocks", required_argument, NULL, 'p' },
		{ "nops", required_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *sock = NULL, *instance = "example-engine", *ns = "example/qwen3-8b-like/bf16/pf";
	unsigned layers = 36, blocks = 128, prompt = 32, nops = 10000;
	uint64_t seg = 16384;
	struct kvs_connect_opts o;
	struct kvs_client *c;
	struct kvs_layer *lay;
	struct kvs_mem mem;
	uint8_t *kv, *keys;
	uint32_t *ids;
	uint64_t lease = 0, stored = 0, skipped = 0, t0, block_bytes, size;
	int fd, r, opt;

	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 's': sock = optarg; break;
		case 'i': instance = optarg; break;
		case 'n': ns = optarg; break;
		case 'l': layers = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'b': blocks = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'g': seg = strtoull(optarg, NULL, 0); break;
		case 'p': prompt = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'N': nops = (unsigned)strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: example-engine [--socket PATH] [--instance NAME] [--ns NAME] "
					"[--layers N] [--blocks N] [--segment-bytes N] [--prompt-blocks N] [--nops N]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!layers || !blocks || !seg || seg % 8 || !prompt || 2 * prompt > blocks) {
		fprintf(stderr, "example-engine: need layers, segment-bytes (multiple of 8) and 2 * prompt-blocks <= blocks\n");
		return 2;
	}
	block_bytes = layers * seg;
	size = block_bytes * blocks;

	r = kvs_host_alloc(size, &fd, (void **)&kv);
	if (r < 0)
		return fail("allocating the KV cache", r);
	kvs_connect_opts_init(&o);
	o.instance = instance;
	o.ns = ns;
	o.log = log_cb;
	r = kvs_connect(sock, &o, &c);
	if (r < 0)
		return fail("connecting", r);

	/* Page-first: a block holds all its layers; layer l sits at l * seg in it. */
	lay = calloc(layers, sizeof(*lay));
	for (unsigned l = 0; l < layers; l++) {
		char *name = malloc(32);

		snprintf(name, 32, "model.layers.%u", l);
		lay[l] = (struct kvs_layer){ .name = name, .mem = 0, .segments = 1,
					     .offset = l * seg, .num_blocks = blocks,
					     .segment_bytes = seg, .block_stride = block_bytes };
	}
	mem = (struct kvs_mem){ .kind = KVS_MEM_HOST_FD, .fd = fd, .size = size };
	r = kvs_register(c, &mem, 1, lay, layers, 0);
	if (r < 0)
		return fail("registering", r);
	printf("registered %u layers x %u blocks (%" PRIu64 " KiB per block, %" PRIu64 " MiB)\n",
	       layers, blocks, block_bytes >> 10, size >> 20);

	t0 = now_ns();
	for (unsigned i = 0; i < nops; i++) {
		r = kvs_nop_sync(c, 5000);
		if (r < 0)
			return fail("NOP", r);
	}
	if (nops)
		printf("NOP round trip: %.2f us average over %u\n",
		       (now_ns() - t0) / 1e3 / nops, nops);

	keys = malloc(16 * prompt);
	ids = malloc(4 * prompt);
	make_keys(keys, prompt, (uint64_t)now_ns());
	for (unsigned i = 0; i < prompt; i++) {
		ids[i] = i;
		fill(kv + i * block_bytes, block_bytes, 1000 + i);
	}
	/* Poison every other block: a load must touch exactly its targets. */
	memset(kv + prompt * block_bytes, 0xa5, (blocks - prompt) * block_bytes);

	t0 = now_ns();
	r = kvs_save_sync(c, keys, ids, prompt, 10000, &stored, &skipped);
	if (r < 0)
		return fail("SAVE", r);
	r = kvs_flush_sync(c, 0, 10000);
	if (r < 0)
		return fail("FLUSH", r);
	printf("saved %u blocks (%" PRIu64 " stored, %" PRIu64 " skipped) in %.2f ms\n", prompt,
	       stored, skipped, (now_ns() - t0) / 1e6);

	r = kvs_query_sync(c, keys, prompt, 1, 0, 10000, &lease);
	if (r < 0)
		return fail("QUERY", r);
	if ((unsigned)r != prompt) {
		fprintf(stderr, "example-engine: QUERY hit %d of %u blocks\n", r, prompt);
		return 1;
	}
	for (unsigned i = 0; i < prompt; i++)
		ids[i] = blocks - 1 - i; /* other places than they came from */
	t0 = now_ns();
	r = kvs_load_sync(c, lease, ids, prompt, 0, 0, 10000);
	if (r < 0)
		return fail("LOAD", r);
	printf("loaded %d blocks in %.2f ms\n", r, (now_ns() - t0) / 1e6);

	for (unsigned i = 0; i < blocks; i++) {
		uint8_t *b = kv + i * block_bytes;
		bool target = i >= blocks - prompt;

		if (i < prompt)
			continue; /* the sources */
		if (target) {
			uint8_t *want = malloc(block_bytes);

			fill(want, block_bytes, 1000 + (blocks - 1 - i));
			if (memcmp(b, want, block_bytes)) {
				fprintf(stderr, "example-engine: block %u differs after LOAD\n", i);
				return 1;
			}
			free(want);
		} else {
			for (uint64_t k = 0; k < block_bytes; k++)
				if (b[k] != 0xa5) {
					fprintf(stderr, "example-engine: untouched block %u changed\n", i);
					return 1;
				}
		}
	}
	printf("verified: %u blocks byte-exact, %u untouched blocks intact\n", prompt,
	       blocks - 2 * prompt);
	kvs_close(c);
	kvs_host_free(fd, kv, size);
	return 0;
}
