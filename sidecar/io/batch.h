/* SPDX-License-Identifier: MIT */
/*
 * Copy batches: the pieces of one transfer between pool slots and a
 * mover's memory (an engine's, for SAVE and LOAD), and the one way a
 * finished batch goes back to the thread that submitted it.
 *
 * Whoever submits a batch (an I/O worker) builds it with
 * copy_batch_add_block(), which walks a layout and coalesces ranges
 * adjacent on both sides into one piece; a mover (io/mover.h) only moves
 * the pieces and calls batch_complete().  A batch lives in its
 * submitter's memory (the worker embeds it in its op): a mover holds a
 * pointer to it from submit to batch_complete() and never after.
 */
#ifndef KVS_BATCH_H
#define KVS_BATCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu/list.h>

struct layout;
struct mem_import;

enum copy_dir {
	COPY_TO_POOL,	/* SAVE: engine -> pool */
	COPY_FROM_POOL, /* LOAD: pool -> engine */
};

struct piece {
	/*
	 * The mover's side: an engine address (a pointer into a host import,
	 * a GPU address).  Only the mover interprets it.
	 */
	uint64_t dev;
	uint8_t *pool; /* the pool slot's side, always host memory */
	uint64_t len;
};

struct batch_sink;
struct slot;

struct copy_batch {
	enum copy_dir dir;
	uint32_t n;
	uint32_t cap;
	struct piece *pieces;
	uint64_t bytes;		 /* all pieces together */
	int err;		 /* the first error, 0 or -errno: a failed batch still completes */
	struct batch_sink *sink; /* where it completes; the submitter sets it */
	void *priv;		 /* the mover's own, between submit and completion */
	/*
	 * Progress (a LOAD with KVS_LOAD_PROGRESS): once pieces [0,
	 * sig_end[j]) are in, sig_base + 1 + j goes to the 32-bit word at
	 * sig_addr, in stream order after those copies, by a mover that can
	 * (CUDA: cuStreamWriteValue32; the word is pinned, identity-mapped).
	 * One that cannot ignores them: the worker writes the last value
	 * from the host when the batch completed, whatever the mover did.
	 * nsig 0: no progress.  merge_floor: pieces below it never grow, so
	 * no piece spans two groups.
	 */
	uint64_t sig_addr;
	uint32_t sig_base;
	uint32_t nsig;
	uint32_t *sig_end; /* nsig entries, non-decreasing, the last == n */
	uint32_t merge_floor;
	/*
	 * The extent (region << 32 | index, + 1; 0: none) of the last block's
	 * slot: a block in another extent raises merge_floor, so no piece
	 * spans two extents, and so never two pins of the pool (pool.h).
	 */
	uint64_t last_extent;
	/* The mover's between submit and batch_complete() (its queues), then the sink's. */
	struct cds_list_head node;
};

/* Append a piece, merging with the previous one when both sides continue it. */
int copy_batch_add(struct copy_batch *b, uint64_t dev, uint8_t *pool, uint64_t len);

/*
 * The layout iterator, for SAVE and LOAD alike: append layers [@first,
 * @first + @count) of engine block @block_id (in the allocations of
 * @mems, which @lay's views index) against the same layers of @slot,
 * segment by segment; ranges merge within the slot's extent only.
 * Returns 0 or -ENOMEM (the batch keeps what it had; the caller fails it).
 */
int copy_batch_add_block(struct copy_batch *b, const struct layout *lay,
			 const struct mem_import *mems, uint32_t block_id, const struct slot *slot,
			 uint32_t first, uint32_t count);

void copy_batch_free(struct copy_batch *b);

/*
 * A sink: where finished batches wait for the thread that owns it (an I/O
 * worker) to take them.  batch_complete() is the only way back from every
 * mover, from any thread: on the owner's thread (a copy done inline at
 * submit, a completion its poll reaped) it is a list append; from another
 * (the host copy threads, a reaper thread of a later mover) an append
 * under the lock and a wake of the owner through its futex word, the
 * word the owner sleeps on (shmq_wait_many()).
 */
struct batch_sink {
	pthread_t owner; /* set by the owner itself, before its first submit */
	uint32_t *word;	 /* the owner's futex word */
	pthread_mutex_t lock;
	struct cds_list_head remote; /* under lock: completed on other threads */
	struct cds_list_head local;  /* owner only: completed on its own thread */
};

void batch_sink_init(struct batch_sink *k, uint32_t *word);
/* On the owner's thread, before it submits anything. */
void batch_sink_own(struct batch_sink *k);
void batch_sink_fini(struct batch_sink *k);

/* @b is finished, with error @err (0 or -errno; the first error stays). */
void batch_complete(struct copy_batch *b, int err);

/*
 * Owner only: move every finished batch onto @list (initialised here),
 * those completed on the owner's thread first.  True if there was any.
 */
bool batch_sink_reap(struct batch_sink *k, struct cds_list_head *list);

#endif /* KVS_BATCH_H */
