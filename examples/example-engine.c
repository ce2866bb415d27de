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

struct args {
	const char *sock, *instance, *ns;
	unsigned layers, blocks, prompt, nops;
	uint64_t seg;
};

/* The byte check after LOAD: targets hold their sources' bytes, the rest stays poisoned. */
static int verify(const struct args *a, const uint8_t *kv, uint64_t block_bytes)
{
	uint8_t *want = malloc(block_bytes);
	int ret = 0;

	if (!want)
		return fail("verifying", -ENOMEM);
	for (unsigned i = a->prompt; i < a->blocks && !ret; i++) {
		const uint8_t *b = kv + i * block_bytes;

		if (i >= a->blocks - a->prompt) {
			fill(want, block_bytes, 1000 + (a->blocks - 1 - i));
			if (memcmp(b, want, block_bytes)) {
				fprintf(stderr, "example-engine: block %u differs after LOAD\n", i);
				ret = 1;
			}
		} else {
			for (uint64_t k = 0; k < block_bytes; k++)
				if (b[k] != 0xa5) {
					fprintf(stderr,
						"example-engine: untouched block %u changed\n", i);
					ret = 1;
					break;
				}
		}
	}
	free(want);
	return ret;
}

/*
 * Every resource is released on every path (the test suite runs this
 * under LeakSanitizer, and an engine author copies what it sees here).
 */
static int run(const struct args *a)
{
	struct kvs_connect_opts o;
	struct kvs_client *c = NULL;
	struct kvs_layer *lay = NULL;
	struct kvs_mem mem;
	uint8_t *kv = NULL, *keys = NULL;
	uint32_t *ids = NULL;
	uint64_t lease = 0, stored = 0, skipped = 0, t0;
	uint64_t block_bytes = a->layers * a->seg, size = block_bytes * a->blocks;
	int fd = -1, r, ret = 1;

	r = kvs_host_alloc(size, &fd, (void **)&kv);
	if (r < 0)
		return fail("allocating the KV cache", r);
	lay = calloc(a->layers, sizeof(*lay));
	keys = malloc(16 * (size_t)a->prompt);
	ids = malloc(4 * (size_t)a->prompt);
	if (!lay || !keys || !ids) {
		fail("allocating", -ENOMEM);
		goto out;
	}
	kvs_connect_opts_init(&o);
	o.instance = a->instance;
	o.ns = a->ns;
	o.log = log_cb;
	r = kvs_connect(a->sock, &o, &c);
	if (r < 0) {
		fail("connecting", r);
		goto out;
	}

	/* Page-first: a block holds all its layers; layer l sits at l * seg in it. */
	for (unsigned l = 0; l < a->layers; l++) {
		char *name = malloc(32);

		if (!name) {
			fail("allocating", -ENOMEM);
			goto out;
		}
		snprintf(name, 32, "model.layers.%u", l);
		lay[l] = (struct kvs_layer){ .name = name,
					     .mem = 0,
					     .segments = 1,
					     .offset = l * a->seg,
					     .num_blocks = a->blocks,
					     .segment_bytes = a->seg,
					     .block_stride = block_bytes };
	}
	mem = (struct kvs_mem){ .kind = KVS_MEM_HOST_FD, .fd = fd, .size = size };
	r = kvs_register(c, &mem, 1, lay, a->layers, 0);
	if (r < 0) {
		fail("registering", r);
		goto out;
	}
	printf("registered %u layers x %u blocks (%" PRIu64 " KiB per block, %" PRIu64 " MiB)\n",
	       a->layers, a->blocks, block_bytes >> 10, size >> 20);

	t0 = now_ns();
	for (unsigned i = 0; i < a->nops; i++) {
		r = kvs_nop_sync(c, 5000);
		if (r < 0) {
			fail("NOP", r);
			goto out;
		}
	}
	if (a->nops)
		printf("NOP round trip: %.2f us average over %u\n", (now_ns() - t0) / 1e3 / a->nops,
		       a->nops);

	make_keys(keys, a->prompt, (uint64_t)now_ns());
	for (unsigned i = 0; i < a->prompt; i++) {
		ids[i] = i;
		fill(kv + i * block_bytes, block_bytes, 1000 + i);
	}
	/* Poison every other block: a load must touch exactly its targets. */
	memset(kv + a->prompt * block_bytes, 0xa5, (a->blocks - a->prompt) * block_bytes);

	t0 = now_ns();
	r = kvs_save_sync(c, keys, ids, a->prompt, 10000, &stored, &skipped);
	if (r < 0) {
		fail("SAVE", r);
		goto out;
	}
	r = kvs_flush_sync(c, 0, 10000);
	if (r < 0) {
		fail("FLUSH", r);
		goto out;
	}
	printf("saved %u blocks (%" PRIu64 " stored, %" PRIu64 " skipped) in %.2f ms\n", a->prompt,
	       stored, skipped, (now_ns() - t0) / 1e6);

	r = kvs_query_sync(c, keys, a->prompt, 1, 0, 10000, &lease);
	if (r < 0) {
		fail("QUERY", r);
		goto out;
	}
	if ((unsigned)r != a->prompt) {
		fprintf(stderr, "example-engine: QUERY hit %d of %u blocks\n", r, a->prompt);
		goto out;
	}
	for (unsigned i = 0; i < a->prompt; i++)
		ids[i] = a->blocks - 1 - i; /* other places than they came from */
	t0 = now_ns();
	r = kvs_load_sync(c, lease, ids, a->prompt, 0, 0, 10000);
	if (r < 0) {
		fail("LOAD", r);
		goto out;
	}
	printf("loaded %d blocks in %.2f ms\n", r, (now_ns() - t0) / 1e6);

	ret = verify(a, kv, block_bytes);
	if (!ret)
		printf("verified: %u blocks byte-exact, %u untouched blocks intact\n", a->prompt,
		       a->blocks - 2 * a->prompt);
out:
	kvs_close(c);
	if (lay)
		for (unsigned l = 0; l < a->layers; l++)
			free((char *)lay[l].name);
	free(lay);
	free(keys);
	free(ids);
	kvs_host_free(fd, kv, size);
	return ret;
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
	struct args a = { .instance = "example-engine",
			  .ns = "example/qwen3-8b-like/bf16/pf",
			  .layers = 36,
			  .blocks = 128,
			  .prompt = 32,
			  .nops = 10000,
			  .seg = 16384 };
	int opt;

	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			a.sock = optarg;
			break;
		case 'i':
			a.instance = optarg;
			break;
		case 'n':
			a.ns = optarg;
			break;
		case 'l':
			a.layers = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'b':
			a.blocks = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'g':
			a.seg = strtoull(optarg, NULL, 0);
			break;
		case 'p':
			a.prompt = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'N':
			a.nops = (unsigned)strtoul(optarg, NULL, 0);
			break;
		default:
			fprintf(stderr,
				"usage: example-engine [--socket PATH] [--instance NAME] [--ns NAME] "
				"[--layers N] [--blocks N] [--segment-bytes N] [--prompt-blocks N] [--nops N]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!a.layers || !a.blocks || !a.seg || a.seg % 8 || !a.prompt || 2 * a.prompt > a.blocks) {
		fprintf(stderr,
			"example-engine: need layers, segment-bytes (multiple of 8) and 2 * prompt-blocks <= blocks\n");
		return 2;
	}
	return run(&a);
}
