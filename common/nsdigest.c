/* SPDX-License-Identifier: MIT */
/*
 * The namespace digest (nsdigest.h).  The encoding is fixed and
 * little-endian, so every node, whatever its build, computes the same
 * digest for the same name and geometry; every variable-length part is
 * preceded by its length, so no two descriptions encode alike.
 */
#include <errno.h>
#include <string.h>

#include <nettle/sha2.h>

#include "common/nsdigest.h"

/* Bump when the encoding changes: old and new nodes must then not match. */
#define DIGEST_VERSION 1u

static void put_u32(struct sha256_ctx *c, uint32_t v)
{
	uint8_t b[4] = { v, v >> 8, v >> 16, v >> 24 };

	sha256_update(c, sizeof(b), b);
}

static void put_u64(struct sha256_ctx *c, uint64_t v)
{
	put_u32(c, (uint32_t)v);
	put_u32(c, (uint32_t)(v >> 32));
}

int nsdigest(const struct nsdigest_geometry *g, uint8_t ret[NSDIGEST_SIZE])
{
	uint8_t full[SHA256_DIGEST_SIZE];
	struct sha256_ctx c;
	size_t len;

	if (!g || !g->ns || !g->ns[0] || !g->nr_layers || !g->layers || !g->shards || !g->tp_size)
		return -EINVAL;
	len = strnlen(g->ns, 4096);
	if (len == 4096)
		return -EINVAL;
	sha256_init(&c);
	sha256_update(&c, 12, (const uint8_t *)"kvstash-ns\0\0");
	put_u32(&c, DIGEST_VERSION);
	put_u32(&c, (uint32_t)len);
	sha256_update(&c, len, (const uint8_t *)g->ns);
	put_u32(&c, g->shards);
	put_u32(&c, g->tp_size);
	put_u32(&c, g->replicated ? 1 : 0);
	put_u32(&c, g->nr_layers);
	for (uint32_t i = 0; i < g->nr_layers; i++) {
		put_u32(&c, g->layers[i].segments);
		put_u64(&c, g->layers[i].segment_bytes);
	}
	sha256_digest(&c, sizeof(full), full);
	memcpy(ret, full, NSDIGEST_SIZE);
	return 0;
}
