/* SPDX-License-Identifier: MIT */
/*
 * kvspeer_kvstash_ns(): what a kvstashd expects of a peer serving it, so
 * an engine can serve its own memory to kvstashd nodes.  The digest is
 * the one every node computes (common/nsdigest.c, compiled into this
 * library too: one encoding for every node and every embedder),
 * zero-padded to KVSPEER_DIGEST_SIZE as kvstashd pads it; the shard is a
 * pool slot's size (KVS_SLOT_ALIGN, abi.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <kvstash/abi.h>
#include <kvstash/peer.h>

#include "common/bits.h"
#include "common/nsdigest.h"

/* Far beyond any block; keeps the sum and the rounding clear of overflow. */
#define SHARD_MAX (1ull << 48)

_Static_assert(NSDIGEST_SIZE <= KVSPEER_DIGEST_SIZE, "a namespace digest fits a peer digest");

int kvspeer_kvstash_ns(const struct kvspeer_kvstash_ns *ns, uint8_t ret_digest[KVSPEER_DIGEST_SIZE],
		       uint64_t *ret_shard_bytes)
{
	struct nsdigest_layer *geom;
	struct nsdigest_geometry g;
	uint8_t d[NSDIGEST_SIZE];
	uint64_t shard = 0;
	int r = 0;

	if (!ns || !ns->name || !ns->layers || !ns->nr_layers || !ns->tp_size ||
	    ns->replicated > 1 || ns->nr_layers > 65536)
		return -EINVAL;
	geom = calloc(ns->nr_layers, sizeof(*geom));
	if (!geom)
		return -ENOMEM;
	for (uint32_t i = 0; i < ns->nr_layers && !r; i++) {
		const struct kvspeer_kvstash_layer *l = &ns->layers[i];

		if (!l->segments || !l->segment_bytes || l->resv || l->segments > 2 ||
		    l->segment_bytes > SHARD_MAX)
			r = -EINVAL;
		shard += l->segments * l->segment_bytes;
		if (shard > SHARD_MAX)
			r = -EINVAL;
		geom[i] = (struct nsdigest_layer){ l->segments, l->segment_bytes };
	}
	g = (struct nsdigest_geometry){
		.ns = ns->name,
		.shards = ns->replicated ? 1 : ns->tp_size,
		.tp_size = ns->tp_size,
		.replicated = ns->replicated,
		.nr_layers = ns->nr_layers,
		.layers = geom,
	};
	if (!r)
		r = nsdigest(&g, d);
	free(geom);
	if (r < 0)
		return r;
	memset(ret_digest, 0, KVSPEER_DIGEST_SIZE);
	memcpy(ret_digest, d, sizeof(d));
	if (ret_shard_bytes)
		*ret_shard_bytes = round_up_u64(shard, KVS_SLOT_ALIGN);
	return 0;
}
