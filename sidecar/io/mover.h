/* SPDX-License-Identifier: MIT */
/*
 * Copy backends ("movers"): move the pieces of a SAVE (engine -> pool) or
 * a LOAD (pool -> engine) and report completion to the I/O worker that
 * submitted them.  The worker builds the pieces (io/batch.h); a mover
 * only moves bytes.
 *
 *   host  engine memory is a mapped memfd: memcpy, inline for small
 *         batches, spread over the copy threads for large ones
 *   cuda  engine memory is GPU memory (movers/cuda/cuda.c)
 */
#ifndef KVS_COPY_H
#define KVS_COPY_H

#include <stdint.h>

#include "io/batch.h"

struct kvs_config;
struct mem_import;
struct worker;
struct op;

/* Host mover: a process-wide pool of copy threads. */
int copy_host_init(const struct kvs_config *cfg);
void copy_host_fini(void);
/* Copy @op's batch; worker_complete(op) is called when done (maybe inline). */
void copy_host_submit(struct worker *w, struct op *op);

/* CUDA backend hooks (stubs without CUDA). */
void copy_cuda_mem_release(struct mem_import *imp);

#endif /* KVS_COPY_H */
