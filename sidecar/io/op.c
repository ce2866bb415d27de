/* SPDX-License-Identifier: MIT */
/*
 * An operation's way out of the worker and back: to the mover for its
 * copy (op_submit(), which every SAVE and LOAD with a copy count takes),
 * to the control thread for its cluster part (op_cluster_send()), and
 * its end (op_cluster_post(), op_free()).  Worker thread.
 */
#include <errno.h>
#include <stdlib.h>

#include "io/batch.h"
#include "io/mover.h"
#include "io/op.h"
#include "io/post.h"
#include "base/util.h"

struct op *op_new(struct wsession *s, const struct kvs_sqe *sqe, uint8_t opcode)
{
	struct op *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->s = s;
	op->opcode = opcode;
	op->flags = sqe->flags;
	op->user_data = sqe->user_data;
	return op;
}

void op_free(struct op *op)
{
	copy_batch_free(&op->batch);
	free(op->block_ids);
	free(op->ents);
	free(op->ckeys);
	free(op->ans);
	free(op);
}

/*
 * To the control thread, which owns the registry (control/cluster.c); it
 * comes back through worker_cluster_done() and cluster_done().  The
 * session waits for it before its DETACH is acked (settle_sessions()).
 */
void op_cluster_send(struct worker *w, struct op *op)
{
	op->w = w;
	op->s->cluster_out++;
	post_ack(w, &op->cmsg, op->s, WCMD_CLUSTER);
}

/* Post a cluster op whose results are set (a QUERY's with its answer), and free it. */
void op_cluster_post(struct worker *w, struct op *op)
{
	struct kvs_cqe cqe = {
		.user_data = op->user_data,
		.res = op->res,
		.result0 = op->r0,
		.result1 = op->r1,
	};

	if (op->opcode == KVS_OP_QUERY && op->res >= 0)
		cqe.flags = KVS_CQE_CLUSTER | op->cqe_flags;
	post_cqe(w, op->s, &cqe, cqe.flags ? op->ans : NULL);
	op_free(op);
}

/*
 * Every SAVE and LOAD that took a copy count ends here, copied or not: its
 * batch comes back through the sink, finish() drops the count.  @copy:
 * hand the batch to the mover; else it completes as it is (nothing to
 * copy, or it failed while it was built).
 */
void op_submit(struct worker *w, struct op *op, bool copy)
{
	struct wsession *s = op->s;

	s->copies++;
	op->t0 = now_ns();
	op->batch.sink = &w->sink;
	if (!copy)
		batch_complete(&op->batch, 0);
	else if (w->mover)
		w->mover->ops->submit(w->mover, &op->batch);
	else
		batch_complete(&op->batch, -EIO); /* the device could not be set up at start */
}
