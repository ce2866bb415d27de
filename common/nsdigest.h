/* SPDX-License-Identifier: MIT */
/*
 * The namespace digest: which blocks two nodes may exchange.  kvstashd's
 * registry names a namespace by it in Redis, and a peer (kvstashd, or an
 * engine serving its own memory through kvspeer_kvstash_ns()) by it on
 * the wire, so it has one definition, here, under both.  Pure; needs
 * nettle (SHA-256).
 */
#ifndef KVS_COMMON_NSDIGEST_H
#define KVS_COMMON_NSDIGEST_H

#include <stdbool.h>
#include <stdint.h>

#define NSDIGEST_SIZE 16

struct nsdigest_layer {
	uint32_t segments;	/* 1, or 2 for split K/V */
	uint64_t segment_bytes; /* bytes of one segment of one block */
};

struct nsdigest_geometry {
	const char *ns;	 /* the namespace name */
	uint32_t shards; /* shards a block has: tp_size, or 1 when replicated */
	uint32_t tp_size;
	bool replicated;
	uint32_t nr_layers;
	const struct nsdigest_layer *layers;
};

/*
 * SHA-256 over a fixed little-endian encoding of the name and every field
 * of @g, truncated to NSDIGEST_SIZE bytes: two nodes match blocks only
 * when name and geometry are identical.  -EINVAL on an empty or unbounded
 * name (4096 bytes or more), no layers or zero shards; @ret untouched.
 */
int nsdigest(const struct nsdigest_geometry *g, uint8_t ret[NSDIGEST_SIZE]);

#endif /* KVS_COMMON_NSDIGEST_H */
