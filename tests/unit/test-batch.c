/* SPDX-License-Identifier: MIT */
/*
 * The copy-batch builder (sidecar/io/batch.c), which turns a block's layer
 * views into the pieces every mover copies: ranges adjacent on both sides
 * merge into one piece (a page-first block is one copy, neighbouring
 * blocks in neighbouring slots one larger copy), ranges adjacent on one
 * side only do not, no piece grows below merge_floor (a LOAD PROGRESS's
 * layer groups), and no piece spans two extents of the pool, since two
 * extents may lie in two pins (cudaHostRegister ranges, store/pool.h).
 */
#include <stdlib.h>
#include <string.h>

#include "io/batch.h"
#include "io/mem.h"
#include "store/pool.h"
#include "wire/layout.h"
#include "unit.h"

#define SEG    4096u
#define LAYERS 2u
#define BLOCK  (LAYERS * SEG)

static struct layout *lay;
static struct mem_import mem;
static uint8_t pool[16 * BLOCK];

/* Page-first: block b's layers side by side at b * BLOCK of one allocation. */
static void setup(void)
{
	lay = calloc(1, sizeof(*lay) + LAYERS * sizeof(lay->layers[0]));
	ck_assert_ptr_nonnull(lay);
	lay->nr_layers = LAYERS;
	lay->nr_mems = 1;
	lay->num_blocks = 64;
	lay->data_bytes = lay->slot_bytes = BLOCK;
	for (uint32_t l = 0; l < LAYERS; l++) {
		struct layer_view *v = &lay->layers[l];

		v->segments = 1;
		v->num_blocks = 64;
		v->offset = l * SEG;
		v->segment_bytes = SEG;
		v->block_stride = BLOCK;
		v->slot_off = l * SEG;
		v->bytes = SEG;
	}
	memset(&mem, 0, sizeof(mem));
	mem.base = 1u << 20;
	mem.size = 64 * BLOCK;
}

static void teardown(void)
{
	free(lay);
}

static struct slot slot_at(unsigned i, uint32_t ext)
{
	return (struct slot){ .addr = pool + i * BLOCK, .ext = ext, .region = 0, .idx = i };
}

static void add(struct copy_batch *b, uint32_t block, unsigned slot, uint32_t ext)
{
	struct slot s = slot_at(slot, ext);

	ck_assert_int_eq(copy_batch_add_block(b, lay, &mem, block, &s, 0, LAYERS), 0);
}

static void check_piece(const struct copy_batch *b, uint32_t i, uint32_t block, unsigned slot,
			uint64_t len)
{
	ck_assert_uint_lt(i, b->n);
	ck_assert_uint_eq(b->pieces[i].dev, mem.base + (uint64_t)block * BLOCK);
	ck_assert_ptr_eq(b->pieces[i].pool, pool + slot * BLOCK);
	ck_assert_uint_eq(b->pieces[i].len, len);
}

START_TEST(test_merge_both_sides)
{
	struct copy_batch b = { .dir = COPY_TO_POOL };

	/* One block: its two layers are one copy. */
	add(&b, 5, 0, 0);
	ck_assert_uint_eq(b.n, 1);
	check_piece(&b, 0, 5, 0, BLOCK);
	/* The next block into the next slot of the same extent: the same copy, longer. */
	add(&b, 6, 1, 0);
	ck_assert_uint_eq(b.n, 1);
	check_piece(&b, 0, 5, 0, 2 * BLOCK);
	/* Adjacent in engine memory only, or in the pool only: a new piece each. */
	add(&b, 7, 3, 0);
	add(&b, 9, 4, 0);
	ck_assert_uint_eq(b.n, 3);
	check_piece(&b, 1, 7, 3, BLOCK);
	check_piece(&b, 2, 9, 4, BLOCK);
	ck_assert_uint_eq(b.bytes, 4 * BLOCK);
	copy_batch_free(&b);
}
END_TEST

START_TEST(test_no_piece_spans_extents)
{
	struct copy_batch b = { .dir = COPY_TO_POOL };

	/* Slots 0 and 1 adjacent in memory but in two extents: two pieces. */
	add(&b, 5, 0, 0);
	add(&b, 6, 1, 1);
	ck_assert_uint_eq(b.n, 2);
	check_piece(&b, 0, 5, 0, BLOCK);
	check_piece(&b, 1, 6, 1, BLOCK);
	/* Within the second extent merging goes on. */
	add(&b, 7, 2, 1);
	ck_assert_uint_eq(b.n, 2);
	check_piece(&b, 1, 6, 1, 2 * BLOCK);
	copy_batch_free(&b);
	/* The same extent index in another region is another extent. */
	struct slot s0 = slot_at(0, 3), s1 = slot_at(1, 3);

	s1.region = 1;
	ck_assert_int_eq(copy_batch_add_block(&b, lay, &mem, 5, &s0, 0, LAYERS), 0);
	ck_assert_int_eq(copy_batch_add_block(&b, lay, &mem, 6, &s1, 0, LAYERS), 0);
	ck_assert_uint_eq(b.n, 2);
	copy_batch_free(&b);
}
END_TEST

START_TEST(test_merge_floor)
{
	struct copy_batch b = { .dir = COPY_FROM_POOL };

	add(&b, 5, 0, 0);
	b.merge_floor = b.n; /* a layer group ends here */
	add(&b, 6, 1, 0);
	ck_assert_uint_eq(b.n, 2);
	check_piece(&b, 1, 6, 1, BLOCK);
	/* One layer at a time: layer 1 of block 5 does not merge into layer 0. */
	copy_batch_free(&b);
	struct slot s = slot_at(0, 0);

	ck_assert_int_eq(copy_batch_add_block(&b, lay, &mem, 5, &s, 0, 1), 0);
	b.merge_floor = b.n;
	ck_assert_int_eq(copy_batch_add_block(&b, lay, &mem, 5, &s, 1, 1), 0);
	ck_assert_uint_eq(b.n, 2);
	ck_assert_uint_eq(b.pieces[1].dev, mem.base + 5 * BLOCK + SEG);
	ck_assert_ptr_eq(b.pieces[1].pool, pool + SEG);
	ck_assert_uint_eq(b.pieces[1].len, SEG);
	copy_batch_free(&b);
}
END_TEST

UNIT_TESTS(test_merge_both_sides, test_no_piece_spans_extents, test_merge_floor)

const struct unit_suite unit_suite = {
	.name = "batch",
	.setup = setup,
	.teardown = teardown,
	.add_tests = add_tests,
};
