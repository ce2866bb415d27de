/* SPDX-License-Identifier: MIT */
/*
 * fuzz-register-layout: a REGISTER through proto_parse_register(), then
 * its geometry through layout_build(), as build_registration() does.
 *
 * Input: byte 0 is the number of fds that came with the packet (mod 65);
 * then 8 little-endian u64, the real sizes of allocations 0-7 (allocation
 * i uses word i % 8; 0 means "as declared"; the daemon validates against
 * the smaller of the declared and the real size); the rest is the packet.
 *
 * An accepted layout is checked against an independent model: every
 * segment of every block lies inside its allocation (128-bit arithmetic),
 * the slot holds every layer once and nothing else, and, when the views
 * are few enough to enumerate, no byte of engine memory belongs to two
 * segments (the exact overlap test layout.c does by arithmetic on
 * progressions, redone here by sorting every interval).
 */
#include <errno.h>

#include "wire/layout.h"
#include "wire/proto.h"
#include "fuzz.h"

#define NSIZES	 8u
#define PREFIX	 (1u + 8u * NSIZES)
#define ENUM_MAX 4096u /* intervals the brute-force overlap check enumerates */

struct ival {
	unsigned __int128 start, end;
	uint32_t layer, block, seg;
};

static int cmp_ival(const void *a, const void *b)
{
	const struct ival *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

static unsigned __int128 seg_start(const struct kvs_wire_layer *l, uint32_t b, uint32_t s)
{
	return (unsigned __int128)l->offset + (unsigned __int128)b * l->block_stride +
	       (unsigned __int128)s * l->kv_stride;
}

/* No byte of allocation @mem in two segments: enumerate, sort, compare neighbours. */
static void check_no_overlap(const struct reg_req *req, uint32_t mem)
{
	static struct ival iv[ENUM_MAX];
	size_t n = 0;

	for (uint32_t i = 0; i < req->nr_layers; i++) {
		const struct kvs_wire_layer *l = &req->layers[i];

		if (l->mem_index != mem)
			continue;
		if ((uint64_t)l->num_blocks * l->segments > ENUM_MAX - n)
			return; /* too many to enumerate: the bounds checks still ran */
		for (uint32_t b = 0; b < l->num_blocks; b++) {
			for (uint32_t s = 0; s < l->segments; s++) {
				iv[n].start = seg_start(l, b, s);
				iv[n].end = iv[n].start + l->segment_bytes;
				iv[n].layer = i;
				iv[n].block = b;
				iv[n].seg = s;
				n++;
			}
		}
	}
	qsort(iv, n, sizeof(iv[0]), cmp_ival);
	for (size_t k = 1; k < n; k++)
		FUZZ_CHECK(iv[k].start >= iv[k - 1].end,
			   "layer %u block %u seg %u overlaps layer %u block %u seg %u",
			   iv[k].layer, iv[k].block, iv[k].seg, iv[k - 1].layer, iv[k - 1].block,
			   iv[k - 1].seg);
}

static void check_layout(const struct reg_req *req, const uint64_t *sizes, const struct layout *lay)
{
	uint64_t slot = 0;
	uint32_t minb = UINT32_MAX;

	FUZZ_CHECK(lay->nr_layers == req->nr_layers && lay->nr_mems == req->nr_mems, "counts");
	FUZZ_CHECK(lay->replicated == !!(req->flags & KVS_REGISTER_REPLICATED), "replicated");
	for (uint32_t i = 0; i < req->nr_layers; i++) {
		const struct kvs_wire_layer *l = &req->layers[i];
		const struct layer_view *v = &lay->layers[i];
		unsigned __int128 last;

		FUZZ_CHECK(l->num_blocks >= 1 && l->segment_bytes >= 1 &&
				   (l->segments == 1 || l->segments == 2),
			   "layer %u: degenerate geometry accepted", i);
		FUZZ_CHECK(l->segments == 2 || l->kv_stride == 0, "layer %u: kv_stride", i);
		/* The farthest byte: last block, last segment. */
		last = seg_start(l, l->num_blocks - 1, l->segments - 1) + l->segment_bytes;
		FUZZ_CHECK(last <= sizes[l->mem_index],
			   "layer %u reaches past its allocation of %llu bytes", i,
			   (unsigned long long)sizes[l->mem_index]);
		/* What the copy path computes must be what was validated. */
		for (uint32_t s = 0; s < l->segments; s++) {
			FUZZ_CHECK(layer_block_offset(v, l->num_blocks - 1, s) ==
					   (uint64_t)seg_start(l, l->num_blocks - 1, s),
				   "layer %u: layer_block_offset differs", i);
			FUZZ_CHECK(layer_block_offset(v, 0, s) == (uint64_t)seg_start(l, 0, s),
				   "layer %u: layer_block_offset of block 0 differs", i);
		}
		FUZZ_CHECK(v->bytes == (uint64_t)l->segments * l->segment_bytes, "layer %u bytes",
			   i);
		FUZZ_CHECK(v->slot_off == slot, "layer %u is not next in the slot", i);
		slot += v->bytes;
		minb = l->num_blocks < minb ? l->num_blocks : minb;
	}
	FUZZ_CHECK(lay->num_blocks == minb, "num_blocks %u, smallest layer %u", lay->num_blocks,
		   minb);
	FUZZ_CHECK(lay->data_bytes == slot, "data_bytes");
	FUZZ_CHECK(lay->slot_bytes >= slot && lay->slot_bytes % SLOT_ALIGN == 0 &&
			   lay->slot_bytes - slot < SLOT_ALIGN,
		   "slot of %llu bytes for %llu", (unsigned long long)lay->slot_bytes,
		   (unsigned long long)slot);
	/* Any layer range is a sub-range of the slot. */
	for (uint32_t first = 0; first < lay->nr_layers; first += 1 + lay->nr_layers / 4) {
		uint64_t off, len;

		layout_layer_range(lay, first, lay->nr_layers - first, &off, &len);
		FUZZ_CHECK(off + len == lay->data_bytes && off <= lay->data_bytes, "range %u",
			   first);
	}
	for (uint32_t m = 0; m < req->nr_mems; m++)
		check_no_overlap(req, m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int errs[] = { -EINVAL, -EOVERFLOW, -ERANGE, -ENOTUNIQ, -ENOMEM, 0 };
	struct reg_req req = { 0 };
	struct layout *lay = NULL;
	char why[KVS_TEXT_MAX] = "";
	uint64_t *sizes;
	unsigned nfds;
	uint8_t *msg;
	size_t len;
	bool known = false;
	int r;

	if (size < PREFIX)
		return 0;
	nfds = data[0] % (KVS_MAX_FDS + 1);
	len = size - PREFIX;
	msg = fuzz_dup(data + PREFIX, len);
	if (proto_parse_register(msg, len, nfds, 512, &req, why, sizeof(why)) < 0) {
		free(msg);
		return 0;
	}
	sizes = calloc(req.nr_mems, sizeof(*sizes));
	if (!sizes)
		abort();
	for (uint32_t i = 0; i < req.nr_mems; i++) {
		uint64_t real = fuzz_u64(data + 1 + 8 * (i % NSIZES));

		sizes[i] = real && real < req.mems[i].size ? real : req.mems[i].size;
	}
	r = layout_build(&req, sizes, &lay, why, sizeof(why));
	if (r == 0) {
		check_layout(&req, sizes, lay);
		free(lay);
	} else {
		for (const int *e = errs; *e; e++)
			known |= r == *e;
		FUZZ_CHECK(known, "undocumented error %d", r);
		FUZZ_CHECK(why[0] && memchr(why, '\0', sizeof(why)), "refusal without a reason");
	}
	free(sizes);
	proto_reg_free(&req);
	free(msg);
	return 0;
}
