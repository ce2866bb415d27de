/* SPDX-License-Identifier: MIT */
/*
 * Copy batches: the pieces of one transfer between pool slots and an
 * engine's memory (SAVE and LOAD).  The I/O worker builds a batch with
 * copy_batch_add_block(), which walks a layout and coalesces ranges
 * adjacent on both sides into one piece; a mover (io/mover.h) only moves
 * the pieces.
 */
#ifndef KVS_BATCH_H
#define KVS_BATCH_H

#include <stdint.h>

struct layout;
struct mem_import;

enum copy_dir {
	COPY_SAVE, /* engine -> pool */
	COPY_LOAD, /* pool -> engine */
};

struct piece {
	uint64_t eng;  /* engine address: host pointer or device address */
	uint8_t *pool; /* pool slot address */
	uint64_t len;
};

struct copy_batch {
	enum copy_dir dir;
	uint32_t n;
	uint32_t cap;
	struct piece *pieces;
	uint64_t bytes;
	uint32_t chunks_left; /* atomic: host chunks not yet copied */
	int err;
	uint64_t t0;
};

/* Append a piece, merging with the previous one when both sides continue it. */
int copy_batch_add(struct copy_batch *b, uint64_t eng, uint8_t *pool, uint64_t len);

/*
 * The layout iterator, for SAVE and LOAD alike: append layers [@first,
 * @first + @count) of engine block @block_id (in the allocations of
 * @mems, which @lay's views index) against the same layers of the slot at
 * @slot, segment by segment.  Returns 0 or -ENOMEM (the batch keeps what
 * it had; the caller fails it).
 */
int copy_batch_add_block(struct copy_batch *b, const struct layout *lay,
			 const struct mem_import *mems, uint32_t block_id, uint8_t *slot,
			 uint32_t first, uint32_t count);

void copy_batch_free(struct copy_batch *b);

#endif /* KVS_BATCH_H */
