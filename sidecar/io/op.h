/* SPDX-License-Identifier: MIT */
/*
 * An operation's way to the mover and to the control thread, and its end
 * (io/op.c).  Worker thread.
 */
#ifndef KVS_IO_OP_H
#define KVS_IO_OP_H

#include <stdbool.h>
#include <stdint.h>

#include "io/worker-types.h"

/*
 * A zeroed op of @s for @sqe (opcode, flags, user_data set); NULL without
 * memory.  op_free() frees what the op's path allocated into it too.
 */
struct op *op_new(struct wsession *s, const struct kvs_sqe *sqe, uint8_t opcode);
void op_free(struct op *op);
/*
 * Count @op as a copy of its session and hand its batch to the mover
 * (@copy), or complete it as it is; it comes back through the worker's
 * sink either way.
 */
void op_submit(struct worker *w, struct op *op, bool copy);
/* To the control thread, which owns the registry; back through worker_cluster_done(). */
void op_cluster_send(struct worker *w, struct op *op);
/* Post a cluster op whose results are set, and free it. */
void op_cluster_post(struct worker *w, struct op *op);

#endif /* KVS_IO_OP_H */
