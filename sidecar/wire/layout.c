/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/why.h"
#include "wire/layout.h"
#include "base/util.h"


/* FNV-1a, 64 bit: a stable fingerprint, not a security boundary. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/*
 * Last byte + 1 of a view, relative to its allocation:
 *   offset + (num_blocks-1)*block_stride + (segments-1)*kv_stride + segment_bytes
 * -EOVERFLOW if any step wraps.
 */
static int view_end(const struct kvs_wire_layer *l, uint64_t *ret)
{
	uint64_t a, b, e;

	if (__builtin_mul_overflow((uint64_t)(l->num_blocks - 1), l->block_stride, &a) ||
	    __builtin_mul_overflow((uint64_t)(l->segments - 1), l->kv_stride, &b) ||
	    __builtin_add_overflow(l->offset, a, &e) || __builtin_add_overflow(e, b, &e) ||
	    __builtin_add_overflow(e, l->segment_bytes, &e))
		return -EOVERFLOW;
	*ret = e;
	return 0;
}

static __int128 floor_div(__int128 a, __int128 b)
{
	__int128 q = a / b;

	if ((a % b != 0) && ((a < 0) != (b < 0)))
		q--;
	return q;
}

/*
 * Do segment intervals [sa + i*bs, sa + i*bs + la), i in [0, na) and
 * [sb + j*bs, sb + j*bs + lb), j in [0, nb) intersect, other than a
 * segment with itself (@same)?  With d = sb - sa + k*bs (k = j - i), they
 * meet iff -lb < d < la for some k in [-(na-1), nb-1].
 */
static bool progressions_meet(uint64_t sa, uint64_t la, uint64_t sb, uint64_t lb, uint64_t bs,
			      uint32_t na, uint32_t nb, bool same)
{
	__int128 d0 = (__int128)sb - (__int128)sa;
	__int128 kmin = -(__int128)(na - 1), kmax = (__int128)nb - 1, lo, hi;

	if (bs == 0)
		return (d0 > -(__int128)lb && d0 < (__int128)la) && !(same && na == 1 && nb == 1);
	/* k > (-lb - d0) / bs  and  k < (la - d0) / bs */
	lo = floor_div(-(__int128)lb - d0, bs) + 1;
	hi = -floor_div(-((__int128)la - d0), bs) - 1; /* ceil((la - d0) / bs) - 1 */
	if (lo < kmin)
		lo = kmin;
	if (hi > kmax)
		hi = kmax;
	if (lo > hi)
		return false;
	/* The same segment of the same block meets itself at k == 0 only. */
	if (same && lo == 0 && hi == 0)
		return false;
	return true;
}

/* Two views of one allocation: does any byte belong to both? */
static bool views_overlap(const struct kvs_wire_layer *a, uint64_t a_end,
			  const struct kvs_wire_layer *b, uint64_t b_end, bool same)
{
	if (!same && (a_end <= b->offset || b_end <= a->offset))
		return false;
	if (a->block_stride != b->block_stride)
		return true; /* interleaving with different strides: refuse */
	for (uint32_t s = 0; s < a->segments; s++) {
		for (uint32_t t = 0; t < b->segments; t++) {
			uint64_t sa = a->offset + s * a->kv_stride;
			uint64_t sb = b->offset + t * b->kv_stride;

			if (progressions_meet(sa, a->segment_bytes, sb, b->segment_bytes,
					      a->block_stride, a->num_blocks, b->num_blocks,
					      same && s == t))
				return true;
		}
	}
	return false;
}

int layout_build(const struct reg_req *req, const uint64_t *mem_sizes, struct layout **ret,
		 char *why, size_t wl)
{
	struct layout *lay;
	uint64_t *ends, slot = 0, fp = 0xcbf29ce484222325ull;
	int r = 0;

	ends = calloc(req->nr_layers, sizeof(*ends));
	lay = calloc(1, sizeof(*lay) + req->nr_layers * sizeof(lay->layers[0]));
	if (!ends || !lay) {
		free(ends);
		free(lay);
		WHY("out of memory");
		return -ENOMEM;
	}
	lay->nr_layers = req->nr_layers;
	lay->nr_mems = req->nr_mems;
	lay->replicated = req->flags & KVS_REGISTER_REPLICATED;
	lay->num_blocks = UINT32_MAX;
	fp = fnv(fp, &lay->nr_layers, sizeof(lay->nr_layers));
	fp = fnv(fp, &lay->replicated, sizeof(lay->replicated));

	for (uint32_t i = 0; i < req->nr_layers && !r; i++) {
		const struct kvs_wire_layer *l = &req->layers[i];
		struct layer_view *v = &lay->layers[i];
		uint64_t bytes;

		if (l->num_blocks == 0 || l->segment_bytes == 0 || l->segments == 0) {
			WHY("layer %s: num_blocks, segments and segment_bytes must be non-zero",
			    l->name);
			r = -EINVAL;
		} else if (l->segments > 2) {
			WHY("layer %s: %u segments (1, or 2 for split K/V)", l->name, l->segments);
			r = -EINVAL;
		} else if (l->segments == 1 && l->kv_stride) {
			WHY("layer %s: kv_stride set for a single segment", l->name);
			r = -EINVAL;
		} else if (view_end(l, &ends[i]) < 0 ||
			   __builtin_mul_overflow(l->segment_bytes, (uint64_t)l->segments, &bytes) ||
			   __builtin_add_overflow(slot, bytes, &slot)) {
			WHY("layer %s: geometry overflows 64 bits", l->name);
			r = -EOVERFLOW;
		} else if (ends[i] > mem_sizes[l->mem_index]) {
			WHY("layer %s: block %u reaches byte %llu of an allocation of %llu bytes",
			    l->name, l->num_blocks - 1, (unsigned long long)ends[i],
			    (unsigned long long)mem_sizes[l->mem_index]);
			r = -ERANGE;
		}
		if (r)
			break;
		memcpy(v->name, l->name, sizeof(v->name));
		v->mem = l->mem_index;
		v->segments = l->segments;
		v->num_blocks = l->num_blocks;
		v->offset = l->offset;
		v->segment_bytes = l->segment_bytes;
		v->kv_stride = l->kv_stride;
		v->block_stride = l->block_stride;
		v->bytes = bytes;
		v->end = ends[i];
		v->slot_off = slot - bytes;
		lay->num_blocks = MIN(lay->num_blocks, l->num_blocks);
		fp = fnv(fp, v->name, strlen(v->name) + 1);
		fp = fnv(fp, &v->segments, sizeof(v->segments));
		fp = fnv(fp, &v->segment_bytes, sizeof(v->segment_bytes));
	}

	/* The slot is data_bytes rounded up to SLOT_ALIGN: that must not wrap to 0 either. */
	if (!r && slot > UINT64_MAX - (SLOT_ALIGN - 1)) {
		WHY("layers of %llu bytes per block: the slot size overflows 64 bits",
		    (unsigned long long)slot);
		r = -EOVERFLOW;
	}

	/* No byte of engine memory may belong to two views (or twice to one). */
	for (uint32_t i = 0; i < req->nr_layers && !r; i++) {
		for (uint32_t j = i; j < req->nr_layers && !r; j++) {
			const struct kvs_wire_layer *a = &req->layers[i], *b = &req->layers[j];

			if (a->mem_index != b->mem_index)
				continue;
			if (views_overlap(a, ends[i], b, ends[j], i == j)) {
				if (i == j)
					WHY("layer %s: its blocks overlap each other", a->name);
				else
					WHY("layers %s and %s overlap", a->name, b->name);
				r = -ENOTUNIQ;
			}
		}
	}
	free(ends);
	if (r) {
		free(lay);
		return r;
	}
	lay->data_bytes = slot;
	lay->slot_bytes = round_up_u64(slot, SLOT_ALIGN);
	lay->fingerprint = fp;
	*ret = lay;
	return 0;
}

void layout_mem_span(const struct layout *l, uint32_t mem, uint64_t *ret_lo, uint64_t *ret_hi)
{
	uint64_t lo = UINT64_MAX, hi = 0;

	for (uint32_t i = 0; i < l->nr_layers; i++) {
		const struct layer_view *v = &l->layers[i];

		if (v->mem != mem)
			continue;
		lo = MIN(lo, v->offset);
		hi = MAX(hi, v->end);
	}
	if (hi == 0)
		lo = 0; /* no view (not in a validated layout): an empty span */
	*ret_lo = lo;
	*ret_hi = hi;
}
