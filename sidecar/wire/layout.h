/* SPDX-License-Identifier: MIT */
/*
 * Layouts: how an engine's KV blocks lie in its memory (layer views
 * registered over the socket), and how the same block lies in a pool slot.
 *
 * Slots are page-first: one slot holds one block of one shard across all
 * its layers, layer after layer, segment after segment, so a layer range
 * is one contiguous sub-range of the slot.
 */
#ifndef KVS_LAYOUT_H
#define KVS_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include <kvstash/abi.h>
#include <kvstash/wire.h>

#include "wire/proto.h"

/* The pool's slot alignment: public (abi.h), as libkvspeer tells embedders a shard's size. */
#define SLOT_ALIGN KVS_SLOT_ALIGN

struct mem_import;

struct layer_view {
	char name[KVS_NAME_MAX];
	uint32_t mem;
	uint32_t segments;
	uint32_t num_blocks;
	uint64_t offset;
	uint64_t segment_bytes;
	uint64_t kv_stride;
	uint64_t block_stride;
	uint64_t slot_off; /* this layer's place in a slot */
	uint64_t bytes;	   /* segments * segment_bytes */
	uint64_t end;	   /* last byte + 1 of the view, from its allocation's start */
};

struct layout {
	uint32_t nr_layers;
	uint32_t nr_mems;
	uint32_t num_blocks; /* smallest over the layers: block ids stay below */
	bool replicated;
	uint64_t data_bytes; /* one block of one shard, all layers */
	uint64_t slot_bytes; /* data_bytes rounded up to SLOT_ALIGN */
	uint64_t fingerprint; /* what a slot's content depends on */
	struct layer_view layers[];
};

/*
 * Validate @req's geometry against the allocations' sizes (@mem_sizes,
 * the smaller of declared and real) with overflow-safe arithmetic, and
 * build the layout.  Errors: -EINVAL (zero or bad counts), -EOVERFLOW,
 * -ERANGE (a view reaches past its allocation), -ENOTUNIQ (views overlap).
 */
int layout_build(const struct reg_req *req, const uint64_t *mem_sizes, struct layout **ret,
		 char *why, size_t wl);

/*
 * The bytes [*ret_lo, *ret_hi) of allocation @mem that its views reach:
 * from the lowest view offset to the highest view end.  A validated layout
 * has at least one view per allocation, inside its declared size; only
 * this hull is mapped.
 */
void layout_mem_span(const struct layout *l, uint32_t mem, uint64_t *ret_lo, uint64_t *ret_hi);

/* Byte range of layers [first, first + count) inside a slot. */
static inline void layout_layer_range(const struct layout *l, uint32_t first, uint32_t count,
				      uint64_t *ret_off, uint64_t *ret_len)
{
	const struct layer_view *a = &l->layers[first], *b = &l->layers[first + count - 1];

	*ret_off = a->slot_off;
	*ret_len = b->slot_off + b->bytes - a->slot_off;
}

/* Engine-side offset (from its allocation's start) of segment @s of block @b. */
static inline uint64_t layer_block_offset(const struct layer_view *v, uint32_t b, uint32_t s)
{
	return v->offset + (uint64_t)b * v->block_stride + (uint64_t)s * v->kv_stride;
}

#endif /* KVS_LAYOUT_H */
