/* SPDX-License-Identifier: MIT */
/*
 * Layer views and slot layouts (sidecar/wire/layout.c): the layouts engines
 * really register are accepted with the right slot geometry; a view
 * reaching past its allocation, arithmetic that wraps, bad counts and
 * views sharing a byte of engine memory are refused, each with its own
 * errno; and the fingerprint follows what a slot's content depends on.
 *
 * Bounds are probed at the exact edge: a view ending on the allocation's
 * last byte is fine, one byte further is not.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/layout.h"
#include "unit.h"

#define MAX_L 8

static char why[256];

struct geo {
	struct kvs_wire_layer layers[MAX_L];
	uint64_t sizes[MAX_L];
	struct reg_req req;
};

static void init_geo(struct geo *g, uint32_t nr_mems, uint32_t nr_layers)
{
	memset(g, 0, sizeof(*g));
	g->req.nr_mems = nr_mems;
	g->req.nr_layers = nr_layers;
	g->req.layers = g->layers;
	for (uint32_t i = 0; i < MAX_L; i++)
		snprintf(g->layers[i].name, sizeof(g->layers[i].name), "model.layers.%u", i);
}

static void view(struct geo *g, uint32_t i, uint32_t mem, uint64_t offset, uint32_t num_blocks,
		 uint32_t segments, uint64_t segment_bytes, uint64_t kv_stride,
		 uint64_t block_stride)
{
	struct kvs_wire_layer *l = &g->layers[i];

	l->mem_index = mem;
	l->offset = offset;
	l->num_blocks = num_blocks;
	l->segments = segments;
	l->segment_bytes = segment_bytes;
	l->kv_stride = kv_stride;
	l->block_stride = block_stride;
}

/* Build; on failure nothing is returned and a reason is given. */
static int build(struct geo *g, struct layout **ret)
{
	struct layout *local = NULL, *sentinel = (struct layout *)&sentinel;
	int r;

	if (!ret)
		ret = &local;
	*ret = sentinel;
	why[0] = '\0';
	r = layout_build(&g->req, g->sizes, ret, why, sizeof(why));
	if (r < 0) {
		ck_assert_ptr_eq(*ret, sentinel);
		ck_assert_msg(why[0], "layout refused (%d) without a reason", r);
		if (ret == &local)
			*ret = NULL;
	} else {
		ck_assert_ptr_ne(*ret, sentinel);
		if (ret == &local)
			free(local);
	}
	return r;
}

/* ---- the layouts engines register ---------------------------------- */

/*
 * Page-first fused (one allocation; a block holds every layer's K and V
 * in turn): layer i at offset i * 2 * seg, block_stride the whole page.
 * Segment sizes not multiples of 512 so the slot's rounding shows.
 */
START_TEST(test_page_first)
{
	const uint64_t seg = 1000, page = 3 * 2 * seg;
	struct layout *lay;
	struct geo g;

	init_geo(&g, 1, 3);
	for (uint32_t i = 0; i < 3; i++)
		view(&g, i, 0, i * 2 * seg, 32, 2, seg, seg, page);
	g.sizes[0] = 32 * page;
	ck_assert_int_eq(build(&g, &lay), 0);
	ck_assert_uint_eq(lay->nr_layers, 3);
	ck_assert_uint_eq(lay->nr_mems, 1);
	ck_assert_uint_eq(lay->num_blocks, 32);
	ck_assert(!lay->replicated);
	ck_assert_uint_eq(lay->data_bytes, 6000);
	ck_assert_uint_eq(lay->slot_bytes, 6144);
	for (uint32_t i = 0; i < 3; i++) {
		ck_assert_uint_eq(lay->layers[i].slot_off, i * 2000);
		ck_assert_uint_eq(lay->layers[i].bytes, 2000);
		ck_assert_str_eq(lay->layers[i].name, g.layers[i].name);
		ck_assert_uint_eq(lay->layers[i].offset, i * 2 * seg);
		/* V of block 5, in the engine's memory. */
		ck_assert_uint_eq(layer_block_offset(&lay->layers[i], 5, 1),
				  i * 2 * seg + 5 * page + seg);
	}
	free(lay);
}
END_TEST

/*
 * Layer-first split K/V (one allocation per layer, all K blocks then all
 * V blocks): segments 2, kv_stride = num_blocks * block_stride.  The
 * layers have different block counts: block ids stay below the smallest.
 */
START_TEST(test_layer_first_split)
{
	static const uint32_t nb[3] = { 16, 10, 12 };
	const uint64_t seg = 4096;
	struct layout *lay;
	uint64_t off, len;
	struct geo g;

	init_geo(&g, 3, 3);
	for (uint32_t i = 0; i < 3; i++) {
		view(&g, i, i, 0, nb[i], 2, seg, nb[i] * seg, seg);
		g.sizes[i] = 2 * nb[i] * seg; /* exactly: the last V ends on the last byte */
	}
	ck_assert_int_eq(build(&g, &lay), 0);
	ck_assert_uint_eq(lay->num_blocks, 10);
	ck_assert_uint_eq(lay->data_bytes, 3 * 2 * seg);
	ck_assert_uint_eq(lay->slot_bytes, 3 * 2 * seg);
	ck_assert_uint_eq(lay->layers[2].slot_off, 4 * seg);
	/* The engine side: V of block 9 of layer 1. */
	ck_assert_uint_eq(layer_block_offset(&lay->layers[1], 9, 1), 10 * seg + 9 * seg);
	/* A layer range is one contiguous piece of the slot. */
	layout_layer_range(lay, 1, 2, &off, &len);
	ck_assert_uint_eq(off, 2 * seg);
	ck_assert_uint_eq(len, 4 * seg);
	layout_layer_range(lay, 0, 3, &off, &len);
	ck_assert_uint_eq(off, 0);
	ck_assert_uint_eq(len, lay->data_bytes);
	free(lay);
}
END_TEST

/*
 * Layer-first, K and V adjacent per block (FlashAttention's
 * [num_blocks, 2, ...] per layer), and an MLA layout (one latent
 * segment, replicated over the ranks).
 */
START_TEST(test_layer_first_blockwise)
{
	const uint64_t seg = 2560;
	struct layout *lay;
	struct geo g;

	init_geo(&g, 2, 2);
	view(&g, 0, 0, 0, 8, 2, seg, seg, 2 * seg);
	view(&g, 1, 1, 0, 8, 2, seg, seg, 2 * seg);
	g.sizes[0] = g.sizes[1] = 16 * seg;
	ck_assert_int_eq(build(&g, &lay), 0);
	ck_assert_uint_eq(lay->data_bytes, 4 * seg);
	ck_assert_uint_eq(lay->slot_bytes, 4 * seg); /* 10240: already a multiple of 512 */
	ck_assert_uint_eq(lay->layers[1].slot_off, 2 * seg);
	free(lay);

	init_geo(&g, 1, 2);
	g.req.flags = KVS_REGISTER_REPLICATED;
	view(&g, 0, 0, 0, 4, 1, 576 * 2, 0, 2 * 576 * 2);
	view(&g, 1, 0, 576 * 2, 4, 1, 576 * 2, 0, 2 * 576 * 2);
	g.sizes[0] = 4 * 2 * 576 * 2;
	ck_assert_int_eq(build(&g, &lay), 0);
	ck_assert(lay->replicated);
	ck_assert_uint_eq(lay->data_bytes, 2304);
	ck_assert_uint_eq(lay->slot_bytes, 2560);
	ck_assert_uint_eq(lay->slot_bytes % SLOT_ALIGN, 0);
	free(lay);
}
END_TEST

/* ---- the cases, as tables ------------------------------------------- */

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MB	      (1ull << 20)
#define U64	      UINT64_MAX

/* One layer's view: mem, offset, num_blocks, segments, segment_bytes, kv_stride, block_stride. */
struct view_spec {
	uint32_t mem;
	uint64_t offset;
	uint32_t num_blocks, segments;
	uint64_t segment_bytes, kv_stride, block_stride;
};

/* A registration (allocation sizes, views), what building it gives, and what the reason names. */
struct layout_case {
	const char *what;
	uint32_t nr_mems, nr_layers;
	uint64_t sizes[MAX_L];
	struct view_spec v[MAX_L];
	int want;
	const char *why[2];
};

static void check_cases(const struct layout_case *cases, size_t nr)
{
	for (size_t i = 0; i < nr; i++) {
		const struct layout_case *c = &cases[i];
		struct geo g;
		int r;

		init_geo(&g, c->nr_mems, c->nr_layers);
		for (uint32_t l = 0; l < c->nr_layers; l++) {
			const struct view_spec *v = &c->v[l];

			view(&g, l, v->mem, v->offset, v->num_blocks, v->segments, v->segment_bytes,
			     v->kv_stride, v->block_stride);
		}
		memcpy(g.sizes, c->sizes, sizeof(g.sizes));
		r = build(&g, NULL);
		ck_assert_msg(r == c->want, "%s: %d, want %d (%s)", c->what, r, c->want, why);
		for (unsigned w = 0; w < ARRAY_SIZE(c->why) && c->why[w]; w++)
			ck_assert_msg(strstr(why, c->why[w]), "%s: reason '%s' does not name '%s'",
				      c->what, why, c->why[w]);
	}
}

/* ---- bounds --------------------------------------------------------- */

START_TEST(test_past_allocation)
{
	/* clang-format off */
	static const struct layout_case cases[] = {
		/* One view; its end = offset + 3*bs + kv + seg = 100 + 3000 + 300 + 200 = 3600. */
		{ "ends on the last byte", 1, 1, { 3600 },
		  { { 0, 100, 4, 2, 200, 300, 1000 } }, 0 },
		{ "one byte past", 1, 1, { 3599 }, { { 0, 100, 4, 2, 200, 300, 1000 } }, -ERANGE,
		  { "model.layers.0" } },
		/* Each term of the end counts: one more of any of them is one byte too many. */
		{ "offset + 1", 1, 1, { 3600 }, { { 0, 101, 4, 2, 200, 300, 1000 } }, -ERANGE },
		{ "segment + 1", 1, 1, { 3600 }, { { 0, 100, 4, 2, 201, 300, 1000 } }, -ERANGE },
		{ "kv_stride + 1", 1, 1, { 3600 }, { { 0, 100, 4, 2, 200, 301, 1000 } }, -ERANGE },
		{ "a block more", 1, 1, { 3600 }, { { 0, 100, 5, 2, 200, 300, 1000 } }, -ERANGE },
		{ "block_stride + 1", /* 3 more bytes */
		  1, 1, { 3600 }, { { 0, 100, 4, 2, 200, 300, 1001 } }, -ERANGE },
		{ "ends on the last byte, again", 1, 1, { 3600 },
		  { { 0, 100, 4, 2, 200, 300, 1000 } }, 0 },
		/* Each view against its own allocation's size. */
		{ "second allocation a byte short", 2, 2, { 200, 199 },
		  { { 0, 0, 2, 1, 100, 0, 100 }, { 1, 0, 2, 1, 100, 0, 100 } }, -ERANGE,
		  { "model.layers.1" } },
		{ "both allocations fit", 2, 2, { 200, 200 },
		  { { 0, 0, 2, 1, 100, 0, 100 }, { 1, 0, 2, 1, 100, 0, 100 } }, 0 },
		/* An allocation of size 0 holds nothing. */
		{ "allocation of 0 bytes", 2, 2, { 0, 200 },
		  { { 0, 0, 2, 1, 100, 0, 100 }, { 1, 0, 2, 1, 100, 0, 100 } }, -ERANGE },
	};
	/* clang-format on */

	check_cases(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_overflow)
{
	/* clang-format off */
	static const struct layout_case cases[] = {
		{ "(num_blocks - 1) * block_stride", 1, 1, { U64 },
		  { { 0, 0, 3, 1, 1, 0, 1ull << 63 } }, -EOVERFLOW },
		/* (segments - 1) * kv_stride is fine, the sum is not. */
		{ "offset + kv_stride", 1, 1, { U64 }, { { 0, 1, 1, 2, 1, U64, 0 } }, -EOVERFLOW },
		{ "offset + segment_bytes", 1, 1, { U64 },
		  { { 0, U64, 1, 1, 1, 0, 0 } }, -EOVERFLOW },
		/* The last byte of a 2^64-1 allocation. */
		{ "the last byte of 2^64 - 1", 1, 1, { U64 },
		  { { 0, U64 - 1, 1, 1, 1, 0, 0 } }, 0 },
		{ "offset + blocks, then + segment", 1, 1, { U64 },
		  { { 0, 1ull << 62, 3, 1, 1ull << 62, 0, 1ull << 62 } }, -EOVERFLOW },
		/* segments * segment_bytes (the slot piece) */
		{ "segments * segment_bytes", 1, 1, { U64 },
		  { { 0, 0, 1, 2, 1ull << 63, 1ull << 62, 0 } }, -EOVERFLOW },
		/* The slot, summed over layers in different allocations. */
		{ "the slot's sum", 2, 2, { U64, U64 },
		  { { 0, 0, 1, 1, 1ull << 63, 0, 0 }, { 1, 0, 1, 1, 1ull << 63, 0, 0 } },
		  -EOVERFLOW },
		/* A sum that fits 64 bits but not once rounded up to SLOT_ALIGN. */
		{ "the slot rounded up", 2, 2, { U64, U64 },
		  { { 0, 0, 1, 1, 1ull << 63, 0, 0 }, { 1, 0, 1, 1, (1ull << 63) - 100, 0, 0 } },
		  -EOVERFLOW },
		{ "the largest slot", 2, 2, { U64, U64 },
		  { { 0, 0, 1, 1, 1ull << 63, 0, 0 }, { 1, 0, 1, 1, (1ull << 63) - 512, 0, 0 } },
		  0 },
	};
	/* clang-format on */

	check_cases(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_bad_counts)
{
	/* clang-format off */
	static const struct layout_case cases[] = {
		{ "no blocks", 1, 1, { MB }, { { 0, 0, 0, 1, 100, 0, 100 } }, -EINVAL },
		{ "no segments", 1, 1, { MB }, { { 0, 0, 4, 0, 100, 0, 100 } }, -EINVAL },
		{ "empty segments", 1, 1, { MB }, { { 0, 0, 4, 1, 0, 0, 100 } }, -EINVAL },
		{ "3 segments", 1, 1, { MB }, { { 0, 0, 4, 3, 100, 100, 300 } }, -EINVAL,
		  { "segments" } },
		{ "2^32 - 1 segments", 1, 1, { MB }, { { 0, 0, 4, UINT32_MAX, 100, 100, 300 } },
		  -EINVAL },
		{ "kv_stride with one segment", 1, 1, { MB }, { { 0, 0, 4, 1, 100, 100, 100 } },
		  -EINVAL, { "kv_stride" } },
		{ "one segment", 1, 1, { MB }, { { 0, 0, 4, 1, 100, 0, 100 } }, 0 },
		/* A bad layer after good ones is found too. */
		{ "the third layer bad", 1, 3, { MB },
		  { { 0, 0, 4, 1, 100, 0, 300 },
		    { 0, 100, 4, 1, 100, 0, 300 },
		    { 0, 200, 4, 3, 100, 0, 300 } },
		  -EINVAL, { "model.layers.2" } },
	};
	/* clang-format on */

	check_cases(cases, ARRAY_SIZE(cases));
}
END_TEST

/* ---- overlap -------------------------------------------------------- */

START_TEST(test_overlap_same_offset)
{
	/* clang-format off */
	static const struct layout_case cases[] = {
		{ "the same offset", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 200 }, { 0, 0, 4, 1, 100, 0, 200 } }, -ENOTUNIQ,
		  { "model.layers.0", "model.layers.1" } },
		/* Side by side in each block: fine. */
		{ "side by side", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 200 }, { 0, 100, 4, 1, 100, 0, 200 } }, 0 },
		/* One byte into the neighbour's segment. */
		{ "a byte into the first", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 200 }, { 0, 99, 4, 1, 100, 0, 200 } }, -ENOTUNIQ },
		{ "the first a byte into the second", 1, 2, { MB },
		  { { 0, 0, 4, 1, 101, 0, 200 }, { 0, 100, 4, 1, 100, 0, 200 } }, -ENOTUNIQ },
		/*
		 * Single blocks (no stride), one between the other's K and V: touching
		 * both is fine, one byte more on either side is not.
		 */
		{ "between K and V", 1, 2, { MB },
		  { { 0, 0, 1, 2, 100, 200, 0 }, /* [0,100) [200,300) */
		    { 0, 100, 1, 1, 100, 0, 0 } }, /* [100,200) */
		  0 },
		{ "between K and V, a byte into V", 1, 2, { MB },
		  { { 0, 0, 1, 2, 100, 200, 0 }, { 0, 100, 1, 1, 101, 0, 0 } }, -ENOTUNIQ },
		{ "between K and V, a byte into K", 1, 2, { MB },
		  { { 0, 0, 1, 2, 100, 200, 0 }, { 0, 99, 1, 1, 100, 0, 0 } }, -ENOTUNIQ },
		/* Different allocations never share a byte. */
		{ "different allocations", 2, 2, { MB, MB },
		  { { 0, 0, 4, 1, 100, 0, 200 }, { 1, 0, 4, 1, 100, 0, 200 } }, 0 },
	};
	/* clang-format on */

	check_cases(cases, ARRAY_SIZE(cases));
}
END_TEST

/*
 * Page-first views interleave: every layer's segments sit between every
 * other layer's.  Same stride, disjoint residues: accepted.  Overlaps
 * that show only in a late block, or reach into an earlier view's later
 * block, are still found.
 */
START_TEST(test_overlap_interleaved)
{
	/* clang-format off */
	static const struct layout_case cases[] = {
		{ "interleaved, touching", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 300 },     /* A: [0,100) [300,400) [600,700) [900,1000) */
		    { 0, 200, 4, 1, 100, 0, 300 } }, /* B: [200,300) [500,600) ...: never inside */
		  0 },
		/* B one byte longer: its block i touches A's block i + 1. */
		{ "B a byte longer", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 300 }, { 0, 200, 4, 1, 101, 0, 300 } }, -ENOTUNIQ },
		/* B at [250,350): overlaps A's block 1 (k = 1 between blocks). */
		{ "B on A's block 1", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 300 }, { 0, 250, 1, 1, 100, 0, 300 } }, -ENOTUNIQ },
		/* B one block only, on A's last block [900,1000). */
		{ "B on A's last block", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 300 }, { 0, 950, 1, 1, 50, 0, 300 } }, -ENOTUNIQ },
		/* ... and just after it. */
		{ "B just after A's last block", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 300 }, { 0, 1000, 1, 1, 50, 0, 300 } }, 0 },
		/* A after B in memory, B's later block reaching into A's first. */
		{ "A after B", 1, 2, { MB },
		  { { 0, 250, 2, 1, 50, 0, 300 }, /* [250,300) [550,600) */
		    { 0, 0, 3, 1, 100, 0, 300 } }, /* [0,100) [300,400) [600,700) */
		  0 },
		{ "B's first block into A's", 1, 2, { MB },
		  { { 0, 250, 2, 1, 50, 0, 300 }, { 0, 0, 3, 1, 260, 0, 300 } }, /* [0,260) */
		  -ENOTUNIQ },
		/* A at [550,600) [850,900): B's [600,700) is just past. */
		{ "A just before B's block 2", 1, 2, { MB },
		  { { 0, 550, 2, 1, 50, 0, 300 }, { 0, 0, 3, 1, 100, 0, 300 } }, 0 },
		{ "A a byte into B's block 2", 1, 2, { MB },
		  { { 0, 550, 2, 1, 51, 0, 300 }, { 0, 0, 3, 1, 100, 0, 300 } }, /* [550,601) */
		  -ENOTUNIQ },
	};
	/* clang-format on */

	check_cases(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_overlap_kv)
{
	/* clang-format off */
	static const struct layout_case cases[] = {
		/* K and V adjacent: fine. */
		{ "K and V adjacent", 1, 1, { MB }, { { 0, 0, 4, 2, 100, 100, 200 } }, 0 },
		/* kv_stride < segment_bytes: V starts inside K. */
		{ "V inside K", 1, 1, { MB }, { { 0, 0, 4, 2, 100, 99, 200 } }, -ENOTUNIQ,
		  { "model.layers.0" } },
		/* kv_stride 0: K and V are the same bytes. */
		{ "kv_stride 0", 1, 1, { MB }, { { 0, 0, 4, 2, 100, 0, 200 } }, -ENOTUNIQ },
		/* A single block too. */
		{ "V inside K, one block", 1, 1, { MB },
		  { { 0, 0, 1, 2, 100, 50, 0 } }, -ENOTUNIQ },
		/* V of block b running into K of block b + 1 (no segment overlaps itself). */
		{ "V into the next K", 1, 1, { MB }, { { 0, 0, 4, 2, 100, 100, 150 } }, -ENOTUNIQ },
		/* K of block b + 1 landing exactly on V of block b. */
		{ "the next K on V", 1, 1, { MB }, { { 0, 0, 4, 2, 100, 100, 100 } }, -ENOTUNIQ },
		/* K/V blocks interleaved the other way round: V region then K region, disjoint. */
		{ "all K, then all V", 1, 1, { MB }, { { 0, 0, 4, 2, 100, 400, 100 } }, 0 },
		{ "all K, then all V a byte early", 1, 1, { MB }, { { 0, 0, 4, 2, 100, 399, 100 } },
		  -ENOTUNIQ },
	};
	/* clang-format on */

	check_cases(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_overlap_self)
{
	/* clang-format off */
	static const struct layout_case cases[] = {
		/* block_stride < segment_bytes, several blocks: block 1 starts inside block 0. */
		{ "block_stride < segment", 1, 1, { MB }, { { 0, 0, 4, 1, 100, 0, 99 } }, -ENOTUNIQ,
		  { "overlap each other" } },
		{ "block_stride 0, two blocks", 1, 1, { MB }, { { 0, 0, 2, 1, 100, 0, 0 } },
		  -ENOTUNIQ },
		{ "block_stride = segment", 1, 1, { MB }, { { 0, 0, 4, 1, 100, 0, 100 } }, 0 },
		/* One block: the stride does not matter. */
		{ "one block, stride 0", 1, 1, { MB }, { { 0, 0, 1, 1, 100, 0, 0 } }, 0 },
		{ "one block, stride 1", 1, 1, { MB }, { { 0, 0, 1, 1, 100, 0, 1 } }, 0 },
	};
	/* clang-format on */

	check_cases(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_overlap_strides)
{
	/*
	 * A: [0,100) [200,300) [400,500) [600,700); B: [100,150) [500,550).
	 * No byte is shared, but views with different strides whose ranges
	 * meet are refused: the daemon does not reason about them.
	 */
	/* clang-format off */
	static const struct layout_case cases[] = {
		{ "different strides, ranges meet", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 200 }, { 0, 100, 2, 1, 50, 0, 400 } }, -ENOTUNIQ },
		/* Overlapping for real, too. */
		{ "different strides, overlapping", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 200 }, { 0, 50, 2, 1, 50, 0, 400 } }, -ENOTUNIQ },
		/* Different strides, disjoint ranges ([0,700) and [700,...)). */
		{ "different strides, disjoint", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 200 }, { 0, 700, 2, 1, 50, 0, 400 } }, 0 },
		{ "different strides, a byte into the range", 1, 2, { MB },
		  { { 0, 0, 4, 1, 100, 0, 200 }, { 0, 699, 2, 1, 50, 0, 400 } }, -ENOTUNIQ },
	};
	/* clang-format on */

	check_cases(cases, ARRAY_SIZE(cases));
}
END_TEST

/* Overlap is checked between every pair, not only neighbours in the list. */
START_TEST(test_overlap_far_pair)
{
	/* clang-format off */
	static const struct layout_case cases[] = {
		{ "five disjoint views", 2, 5, { MB, MB },
		  { { 0, 0, 8, 1, 100, 0, 400 },
		    { 0, 100, 8, 1, 100, 0, 400 },
		    { 0, 200, 8, 1, 100, 0, 400 },
		    { 0, 300, 8, 1, 100, 0, 400 },
		    { 1, 0, 8, 1, 100, 0, 100 } },
		  0 },
		{ "the fourth on the first", 2, 5, { MB, MB },
		  { { 0, 0, 8, 1, 100, 0, 400 },
		    { 0, 100, 8, 1, 100, 0, 400 },
		    { 0, 200, 8, 1, 100, 0, 400 },
		    { 0, 0, 8, 1, 100, 0, 400 },
		    { 1, 0, 8, 1, 100, 0, 100 } },
		  -ENOTUNIQ, { "model.layers.0", "model.layers.3" } },
	};
	/* clang-format on */

	check_cases(cases, ARRAY_SIZE(cases));
}
END_TEST

/* ---- fingerprint ---------------------------------------------------- */

static uint64_t fingerprint(struct geo *g)
{
	struct layout *lay;
	uint64_t fp;

	ck_assert_int_eq(build(g, &lay), 0);
	fp = lay->fingerprint;
	free(lay);
	return fp;
}

static void base_geo(struct geo *g)
{
	init_geo(g, 1, 2);
	g->sizes[0] = 1 << 20;
	view(g, 0, 0, 0, 8, 2, 512, 512, 2048);
	view(g, 1, 0, 1024, 8, 2, 512, 512, 2048);
}

START_TEST(test_fingerprint)
{
	struct geo g;
	uint64_t fp;

	base_geo(&g);
	fp = fingerprint(&g);
	base_geo(&g);
	ck_assert_uint_eq(fingerprint(&g), fp);

	/* What the engine's memory looks like does not change a slot's content. */
	base_geo(&g);
	g.sizes[0] = 1 << 21;
	ck_assert_uint_eq(fingerprint(&g), fp);

	/* A segment size, a name, the segment count, a layer more, replication: all do. */
	base_geo(&g);
	g.layers[1].segment_bytes = 256;
	g.layers[1].kv_stride = 256;
	ck_assert_uint_ne(fingerprint(&g), fp);
	base_geo(&g);
	g.layers[1].name[0] = 'M';
	ck_assert_uint_ne(fingerprint(&g), fp);
	base_geo(&g);
	view(&g, 1, 0, 1024, 8, 1, 512, 0, 2048);
	ck_assert_uint_ne(fingerprint(&g), fp);
	base_geo(&g);
	g.req.nr_layers = 1;
	ck_assert_uint_ne(fingerprint(&g), fp);
	base_geo(&g);
	g.req.flags = KVS_REGISTER_REPLICATED;
	ck_assert_uint_ne(fingerprint(&g), fp);
	/* Layers swapped: the slot holds them in the other order. */
	base_geo(&g);
	strcpy(g.layers[0].name, "model.layers.1");
	strcpy(g.layers[1].name, "model.layers.0");
	ck_assert_uint_ne(fingerprint(&g), fp);
	/* Name boundaries count: "ab" + "c" is not "a" + "bc". */
	base_geo(&g);
	strcpy(g.layers[0].name, "ab");
	strcpy(g.layers[1].name, "c");
	fp = fingerprint(&g);
	strcpy(g.layers[0].name, "a");
	strcpy(g.layers[1].name, "bc");
	ck_assert_uint_ne(fingerprint(&g), fp);
}
END_TEST

UNIT_TESTS(test_page_first, test_layer_first_split, test_layer_first_blockwise,
	   test_past_allocation, test_overflow, test_bad_counts, test_overlap_same_offset,
	   test_overlap_interleaved, test_overlap_kv, test_overlap_self, test_overlap_strides,
	   test_overlap_far_pair, test_fingerprint)

const struct unit_suite unit_suite = {
	.name = "layout",
	.add_tests = add_tests,
};
