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

/* ---- bounds --------------------------------------------------------- */

START_TEST(test_past_allocation)
{
	struct geo g;

	/* One view; its end = offset + 3*bs + kv + seg = 100 + 3*1000 + 300 + 200 = 3600. */
	init_geo(&g, 1, 1);
	view(&g, 0, 0, 100, 4, 2, 200, 300, 1000);
	g.sizes[0] = 3600;
	ck_assert_int_eq(build(&g, NULL), 0);
	g.sizes[0] = 3599;
	ck_assert_int_eq(build(&g, NULL), -ERANGE);
	ck_assert_ptr_nonnull(strstr(why, "model.layers.0"));
	/* Each term of the end counts: one more of any of them is one byte too many. */
	g.sizes[0] = 3600;
	g.layers[0].offset = 101;
	ck_assert_int_eq(build(&g, NULL), -ERANGE);
	g.layers[0].offset = 100;
	g.layers[0].segment_bytes = 201;
	ck_assert_int_eq(build(&g, NULL), -ERANGE);
	g.layers[0].segment_bytes = 200;
	g.layers[0].kv_stride = 301;
	ck_assert_int_eq(build(&g, NULL), -ERANGE);
	g.layers[0].kv_stride = 300;
	g.layers[0].num_blocks = 5;
	ck_assert_int_eq(build(&g, NULL), -ERANGE);
	g.layers[0].num_blocks = 4;
	g.layers[0].block_stride = 1001; /* 3 more bytes */
	ck_assert_int_eq(build(&g, NULL), -ERANGE);
	g.layers[0].block_stride = 1000;
	ck_assert_int_eq(build(&g, NULL), 0);

	/* Each view against its own allocation's size. */
	init_geo(&g, 2, 2);
	view(&g, 0, 0, 0, 2, 1, 100, 0, 100);
	view(&g, 1, 1, 0, 2, 1, 100, 0, 100);
	g.sizes[0] = 200;
	g.sizes[1] = 199;
	ck_assert_int_eq(build(&g, NULL), -ERANGE);
	ck_assert_ptr_nonnull(strstr(why, "model.layers.1"));
	g.sizes[1] = 200;
	ck_assert_int_eq(build(&g, NULL), 0);
	/* An allocation of size 0 holds nothing. */
	g.sizes[0] = 0;
	ck_assert_int_eq(build(&g, NULL), -ERANGE);
}
END_TEST

START_TEST(test_overflow)
{
	struct geo g;

	init_geo(&g, 1, 1);
	g.sizes[0] = UINT64_MAX;
	/* (num_blocks - 1) * block_stride */
	view(&g, 0, 0, 0, 3, 1, 1, 0, 1ull << 63);
	ck_assert_int_eq(build(&g, NULL), -EOVERFLOW);
	/* (segments - 1) * kv_stride is fine, the sum is not. */
	view(&g, 0, 0, 1, 1, 2, 1, UINT64_MAX, 0);
	ck_assert_int_eq(build(&g, NULL), -EOVERFLOW);
	/* offset + segment_bytes */
	view(&g, 0, 0, UINT64_MAX, 1, 1, 1, 0, 0);
	ck_assert_int_eq(build(&g, NULL), -EOVERFLOW);
	view(&g, 0, 0, UINT64_MAX - 1, 1, 1, 1, 0, 0);
	ck_assert_int_eq(build(&g, NULL), 0); /* the last byte of a 2^64-1 allocation */
	/* offset + blocks, then + segment */
	view(&g, 0, 0, 1ull << 62, 3, 1, 1ull << 62, 0, 1ull << 62);
	ck_assert_int_eq(build(&g, NULL), -EOVERFLOW);
	/* segments * segment_bytes (the slot piece) */
	view(&g, 0, 0, 0, 1, 2, 1ull << 63, 1ull << 62, 0);
	ck_assert_int_eq(build(&g, NULL), -EOVERFLOW);

	/* The slot, summed over layers in different allocations. */
	init_geo(&g, 2, 2);
	g.sizes[0] = g.sizes[1] = UINT64_MAX;
	view(&g, 0, 0, 0, 1, 1, 1ull << 63, 0, 0);
	view(&g, 1, 1, 0, 1, 1, 1ull << 63, 0, 0);
	ck_assert_int_eq(build(&g, NULL), -EOVERFLOW);
	/* A sum that fits 64 bits but not once rounded up to SLOT_ALIGN. */
	view(&g, 1, 1, 0, 1, 1, (1ull << 63) - 100, 0, 0);
	ck_assert_int_eq(build(&g, NULL), -EOVERFLOW);
	view(&g, 1, 1, 0, 1, 1, (1ull << 63) - 512, 0, 0);
	ck_assert_int_eq(build(&g, NULL), 0);
}
END_TEST

START_TEST(test_bad_counts)
{
	struct geo g;

	init_geo(&g, 1, 1);
	g.sizes[0] = 1 << 20;
	view(&g, 0, 0, 0, 0, 1, 100, 0, 100);
	ck_assert_int_eq(build(&g, NULL), -EINVAL);
	view(&g, 0, 0, 0, 4, 0, 100, 0, 100);
	ck_assert_int_eq(build(&g, NULL), -EINVAL);
	view(&g, 0, 0, 0, 4, 1, 0, 0, 100);
	ck_assert_int_eq(build(&g, NULL), -EINVAL);
	view(&g, 0, 0, 0, 4, 3, 100, 100, 300);
	ck_assert_int_eq(build(&g, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "segments"));
	view(&g, 0, 0, 0, 4, UINT32_MAX, 100, 100, 300);
	ck_assert_int_eq(build(&g, NULL), -EINVAL);
	view(&g, 0, 0, 0, 4, 1, 100, 100, 100);
	ck_assert_int_eq(build(&g, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "kv_stride"));
	view(&g, 0, 0, 0, 4, 1, 100, 0, 100);
	ck_assert_int_eq(build(&g, NULL), 0);
	/* A bad layer after good ones is found too. */
	init_geo(&g, 1, 3);
	g.sizes[0] = 1 << 20;
	view(&g, 0, 0, 0, 4, 1, 100, 0, 300);
	view(&g, 1, 0, 100, 4, 1, 100, 0, 300);
	view(&g, 2, 0, 200, 4, 3, 100, 0, 300);
	ck_assert_int_eq(build(&g, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "model.layers.2"));
}
END_TEST

/* ---- overlap -------------------------------------------------------- */

START_TEST(test_overlap_same_offset)
{
	struct geo g;

	init_geo(&g, 1, 2);
	g.sizes[0] = 1 << 20;
	view(&g, 0, 0, 0, 4, 1, 100, 0, 200);
	view(&g, 1, 0, 0, 4, 1, 100, 0, 200);
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	ck_assert_ptr_nonnull(strstr(why, "model.layers.0"));
	ck_assert_ptr_nonnull(strstr(why, "model.layers.1"));
	/* Side by side in each block: fine. */
	g.layers[1].offset = 100;
	ck_assert_int_eq(build(&g, NULL), 0);
	/* One byte into the neighbour's segment. */
	g.layers[1].offset = 99;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	g.layers[0].offset = 0;
	g.layers[1].offset = 100;
	g.layers[0].segment_bytes = 101;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/*
	 * Single blocks (no stride), one between the other's K and V: touching
	 * both is fine, one byte more on either side is not.
	 */
	view(&g, 0, 0, 0, 1, 2, 100, 200, 0); /* [0,100) [200,300) */
	view(&g, 1, 0, 100, 1, 1, 100, 0, 0); /* [100,200) */
	ck_assert_int_eq(build(&g, NULL), 0);
	g.layers[1].segment_bytes = 101;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	g.layers[1].segment_bytes = 100;
	g.layers[1].offset = 99;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/* Different allocations never share a byte. */
	init_geo(&g, 2, 2);
	g.sizes[0] = g.sizes[1] = 1 << 20;
	view(&g, 0, 0, 0, 4, 1, 100, 0, 200);
	view(&g, 1, 1, 0, 4, 1, 100, 0, 200);
	ck_assert_int_eq(build(&g, NULL), 0);
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
	struct geo g;

	init_geo(&g, 1, 2);
	g.sizes[0] = 1 << 20;
	/* A: [0,100) [300,400) [600,700) [900,1000) */
	view(&g, 0, 0, 0, 4, 1, 100, 0, 300);
	/* B: [200,300) [500,600) ...: touching A's blocks, never inside */
	view(&g, 1, 0, 200, 4, 1, 100, 0, 300);
	ck_assert_int_eq(build(&g, NULL), 0);
	/* B one byte longer: its block i touches A's block i + 1. */
	g.layers[1].segment_bytes = 101;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/* B at [250,350): overlaps A's block 1 (k = 1 between blocks). */
	view(&g, 1, 0, 250, 1, 1, 100, 0, 300);
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/* B one block only, on A's last block [900,1000). */
	view(&g, 1, 0, 950, 1, 1, 50, 0, 300);
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/* ... and just after it. */
	view(&g, 1, 0, 1000, 1, 1, 50, 0, 300);
	ck_assert_int_eq(build(&g, NULL), 0);
	/* A after B in memory, B's later block reaching into A's first. */
	view(&g, 0, 0, 250, 2, 1, 50, 0, 300); /* [250,300) [550,600) */
	view(&g, 1, 0, 0, 3, 1, 100, 0, 300);  /* [0,100) [300,400) [600,700) */
	ck_assert_int_eq(build(&g, NULL), 0);
	g.layers[1].segment_bytes = 260; /* [0,260) meets [250,300) */
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	view(&g, 1, 0, 0, 3, 1, 100, 0, 300);
	g.layers[1].num_blocks = 3;
	g.layers[0].offset = 550; /* [550,600) [850,900): B's [600,700) is just past */
	ck_assert_int_eq(build(&g, NULL), 0);
	g.layers[0].segment_bytes = 51; /* [550,601) */
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
}
END_TEST

START_TEST(test_overlap_kv)
{
	struct geo g;

	init_geo(&g, 1, 1);
	g.sizes[0] = 1 << 20;
	/* K and V adjacent: fine. */
	view(&g, 0, 0, 0, 4, 2, 100, 100, 200);
	ck_assert_int_eq(build(&g, NULL), 0);
	/* kv_stride < segment_bytes: V starts inside K. */
	g.layers[0].kv_stride = 99;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	ck_assert_ptr_nonnull(strstr(why, "model.layers.0"));
	/* kv_stride 0: K and V are the same bytes. */
	g.layers[0].kv_stride = 0;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/* A single block too. */
	view(&g, 0, 0, 0, 1, 2, 100, 50, 0);
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/* V of block b running into K of block b + 1 (no segment overlaps itself). */
	view(&g, 0, 0, 0, 4, 2, 100, 100, 150);
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/* K of block b + 1 landing exactly on V of block b. */
	view(&g, 0, 0, 0, 4, 2, 100, 100, 100);
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/* K/V blocks interleaved the other way round: V region then K region, disjoint. */
	view(&g, 0, 0, 0, 4, 2, 100, 400, 100);
	ck_assert_int_eq(build(&g, NULL), 0);
	g.layers[0].kv_stride = 399;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
}
END_TEST

START_TEST(test_overlap_self)
{
	struct geo g;

	init_geo(&g, 1, 1);
	g.sizes[0] = 1 << 20;
	/* block_stride < segment_bytes with several blocks: block 1 starts inside block 0. */
	view(&g, 0, 0, 0, 4, 1, 100, 0, 99);
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	ck_assert_ptr_nonnull(strstr(why, "overlap each other"));
	view(&g, 0, 0, 0, 2, 1, 100, 0, 0);
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	view(&g, 0, 0, 0, 4, 1, 100, 0, 100);
	ck_assert_int_eq(build(&g, NULL), 0);
	/* One block: the stride does not matter. */
	view(&g, 0, 0, 0, 1, 1, 100, 0, 0);
	ck_assert_int_eq(build(&g, NULL), 0);
	view(&g, 0, 0, 0, 1, 1, 100, 0, 1);
	ck_assert_int_eq(build(&g, NULL), 0);
}
END_TEST

START_TEST(test_overlap_strides)
{
	struct geo g;

	init_geo(&g, 1, 2);
	g.sizes[0] = 1 << 20;
	/*
	 * A: [0,100) [200,300) [400,500) [600,700); B: [100,150) [500,550).
	 * No byte is shared, but views with different strides whose ranges
	 * meet are refused: the daemon does not reason about them.
	 */
	view(&g, 0, 0, 0, 4, 1, 100, 0, 200);
	view(&g, 1, 0, 100, 2, 1, 50, 0, 400);
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/* Overlapping for real, too. */
	g.layers[1].offset = 50;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	/* Different strides, disjoint ranges ([0,700) and [700,...)). */
	g.layers[1].offset = 700;
	ck_assert_int_eq(build(&g, NULL), 0);
	g.layers[1].offset = 699;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
}
END_TEST

/* Overlap is checked between every pair, not only neighbours in the list. */
START_TEST(test_overlap_far_pair)
{
	struct geo g;

	init_geo(&g, 2, 5);
	g.sizes[0] = g.sizes[1] = 1 << 20;
	for (uint32_t i = 0; i < 4; i++)
		view(&g, i, 0, i * 100, 8, 1, 100, 0, 400);
	view(&g, 4, 1, 0, 8, 1, 100, 0, 100);
	ck_assert_int_eq(build(&g, NULL), 0);
	g.layers[3].offset = 0;
	ck_assert_int_eq(build(&g, NULL), -ENOTUNIQ);
	ck_assert_ptr_nonnull(strstr(why, "model.layers.0"));
	ck_assert_ptr_nonnull(strstr(why, "model.layers.3"));
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

static void add_tests(TCase *tc)
{
	tcase_add_test(tc, test_page_first);
	tcase_add_test(tc, test_layer_first_split);
	tcase_add_test(tc, test_layer_first_blockwise);
	tcase_add_test(tc, test_past_allocation);
	tcase_add_test(tc, test_overflow);
	tcase_add_test(tc, test_bad_counts);
	tcase_add_test(tc, test_overlap_same_offset);
	tcase_add_test(tc, test_overlap_interleaved);
	tcase_add_test(tc, test_overlap_kv);
	tcase_add_test(tc, test_overlap_self);
	tcase_add_test(tc, test_overlap_strides);
	tcase_add_test(tc, test_overlap_far_pair);
	tcase_add_test(tc, test_fingerprint);
}

const struct unit_suite unit_suite = {
	.name = "layout",
	.add_tests = add_tests,
};
