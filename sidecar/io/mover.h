/* SPDX-License-Identifier: MIT */
/*
 * Copy backends ("movers"): move the pieces of a SAVE (engine -> pool) or
 * a LOAD (pool -> engine) and report completion to the I/O worker that
 * submitted them.  The worker builds the pieces (coalescing ranges that
 * are adjacent on both sides); a mover only moves bytes.
 *
 *   host  engine memory is a mapped memfd: memcpy, inline for small
 *         batches, spread over the copy threads for large ones
 *   cuda  engine memory is GPU memory (movers/cuda/cuda.c)
 */
#ifndef KVS_COPY_H
#define KVS_COPY_H

#include <stdint.h>

struct kvs_config;
struct mem_import;
struct worker;
struct op;

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
void copy_batch_free(struct copy_batch *b);

/* Host mover: a process-wide pool of copy threads. */
int copy_host_init(const struct kvs_config *cfg);
void copy_host_fini(void);
/* Copy @op's batch; worker_complete(op) is called when done (maybe inline). */
void copy_host_submit(struct worker *w, struct op *op);

/* CUDA backend hooks (stubs without CUDA). */
void copy_cuda_mem_release(struct mem_import *imp);

#endif /* KVS_COPY_H */
