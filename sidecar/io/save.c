/* SPDX-License-Identifier: MIT */
/*
 * The SAVE path: a SAVE's blocks begun in the store and its copy into
 * their pool slots, a SAVE AFTER watched until the engine's fence value
 * comes (save_check_waiting()), the end of each in the store and its CQE
 * (save_finish()), and the FLUSHes that wait for the SAVEs before them
 * (flush_check()).  Worker thread.
 */
#include <errno.h>
#include <stdlib.h>

#include "store/store.h"
#include "base/conf.h"
#include "obs/account.h"
#include "obs/log.h"
#include "io/batch.h"
#include "io/op.h"
#include "io/post.h"
#include "io/save.h"
#include "wire/layout.h"
#include "wire/sqe.h"
#include "base/util.h"

/*
 * Has fence slot @slot reached @v (cyclic, as a GPU's GEQ wait)?  The
 * engine's stream wrote the value after a system-wide memory barrier
 * (cuStreamWriteValue32 without NO_MEMORY_BARRIER), so the KV it stands
 * for is in GPU memory once it is seen; the load-acquire keeps the
 * copies submitted after it from being started before it.
 */
static bool fence_reached(const struct wsession *s, uint32_t slot, uint32_t v)
{
	uint32_t cur = __atomic_load_n(&s->fences[slot].value, __ATOMIC_ACQUIRE);

	return (int32_t)(cur - v) >= 0;
}

void save_finish(struct worker *w, struct op *op)
{
	struct wsession *s = op->s;
	bool ok = op->batch.err == 0;
	uint64_t ns = now_ns() - op->t0;

	/* Its blocks that seal count in the session's registry tally (control/cluster.c). */
	store_save_end(w->store, op->ents, op->nents, ok, s->reg_tally);
	cds_list_del(&op->snode);
	save_order_leave(s->order, &op->imark);
	s->copies--;
	if (ok) {
		account_save_done(w->ctr, s->st, op->nents, op->batch.bytes, ns);
		/* The instance's own share first: it is what the engine can change. */
		op->res = op->quota	? -EDQUOT
			  : op->nospace ? -ENOSPC
					: (int32_t)(op->nents + op->skipped);
		op->r0 = op->nents;
	} else {
		op->res = op->batch.err;
		op->r0 = 0;
	}
	op->r1 = op->skipped;
	post(w, s, op->user_data, op->res, op->r0, op->r1);
	op_free(op);
}

void save_start(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
		const struct sqe_args *a, const struct registration *reg)
{
	const struct layout *lay = reg->layout;
	struct op *op = op_new(s, sqe, KVS_OP_SAVE);

	account_save(w->ctr);
	if (op)
		op->ents = malloc(a->n * sizeof(*op->ents));
	if (!op || !op->ents) {
		free(op);
		post(w, s, sqe->user_data, -ENOMEM, 0, 0);
		return;
	}
	op->batch.dir = COPY_TO_POOL;
	store_save_begin(w->store, s->tenant, s->ns, &reg->place, a->keys, a->block_ids, a->n,
			 op->ents, &op->nents, &op->skipped, &op->nospace, &op->quota);
	account_save_skipped(w->ctr, op->skipped);
	for (uint32_t i = 0; i < op->nents && !op->batch.err; i++)
		op->batch.err =
			copy_batch_add_block(&op->batch, lay, reg->mems, op->ents[i].block_id,
					     &op->ents[i].shard->slot, 0, lay->nr_layers);
	op->seq = s->save_next++;
	cds_list_add_tail(&op->snode, &s->saves);
	save_order_enter(s->order, &op->imark);
	if (a->fenced && op->nents && !op->batch.err &&
	    !fence_reached(s, a->fence_slot, a->fence_value)) {
		/*
		 * Watched from here (save_check_waiting()), never waited for on a
		 * GPU stream: an engine can hold its own word back for ever,
		 * and a stream of ours stuck on it could never give its pool
		 * slots back.  Counted as a copy meanwhile: UNREGISTER and
		 * DETACH wait for it, FLUSH too (it is in s->saves).
		 */
		op->fenced = true;
		op->fence_slot = a->fence_slot;
		op->fence_value = a->fence_value;
		op->deadline = now_ns() + (uint64_t)w->cfg->save_wait_ms * NSEC_PER_MSEC;
		s->copies++;
		cds_list_add_tail(&op->node, &w->waiting);
		return;
	}
	op_submit(w, op, op->nents && !op->batch.err);
}

/*
 * SAVE AFTERs whose fence value came go to the mover; those of a session
 * that is ending, or past [worker] save_wait_ms, complete without a copy
 * (-ECANCELED, -ETIMEDOUT: their blocks were never stored).
 */
bool save_check_waiting(struct worker *w)
{
	struct op *op, *tmp;
	uint64_t now = 0;
	bool any = false;

	cds_list_for_each_entry_safe(op, tmp, &w->waiting, node) {
		struct wsession *s = op->s;
		int err = 0;

		if (s->detaching) {
			err = -ECANCELED;
		} else if (!fence_reached(s, op->fence_slot, op->fence_value)) {
			if (!now)
				now = now_ns();
			if (now < op->deadline)
				continue;
			err = -ETIMEDOUT;
			slog_warning_rl(&s->log_rl, s,
					"SAVE of %u blocks: fence slot %u did not reach %u within "
					"%u ms: nothing stored",
					op->nents, op->fence_slot, op->fence_value,
					w->cfg->save_wait_ms);
		}
		cds_list_del(&op->node);
		s->copies--; /* op_submit() counts it again */
		any = true;
		if (err)
			op->batch.err = err;
		op_submit(w, op, err == 0);
	}
	return any;
}

static bool flush_done(struct op *op)
{
	struct wsession *s = op->s;

	if (op->flags & KVS_FLUSH_INSTANCE)
		return save_order_done_before(s->order, op->mark);
	return cds_list_empty(&s->saves) ||
	       cds_list_first_entry(&s->saves, struct op, snode)->seq >= op->mark;
}

bool flush_check(struct worker *w)
{
	struct op *op, *tmp;
	bool any = false;

	cds_list_for_each_entry_safe(op, tmp, &w->flushes, node) {
		if (!op->s->detaching && !flush_done(op))
			continue;
		cds_list_del(&op->node);
		any = true;
		if ((op->flags & KVS_FLUSH_CLUSTER) && !op->s->detaching) {
			/*
			 * Every SAVE before it sealed, so their inserts are
			 * queued (store_save_end() ran the hook): the mark is
			 * past them.  It counts the session's registrations,
			 * or the instance's (FLUSH_INSTANCE).
			 */
			int r = w->cluster->mark(w->cluster->arg,
						 (op->flags & KVS_FLUSH_INSTANCE)
							 ? op->s->reg_itally
							 : op->s->reg_tally,
						 &op->cmark);

			if (r == 0) {
				op_cluster_send(w, op);
				continue;
			}
			/* -EAGAIN: the registry's queue is full even for barriers. */
			post(w, op->s, op->user_data, r, 0, 0);
			op_free(op);
			continue;
		}
		post(w, op->s, op->user_data, op->s->detaching ? -ECANCELED : 0, 0, 0);
		op_free(op);
	}
	return any;
}

void flush_start(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe)
{
	struct op *op;

	if ((sqe->flags & KVS_FLUSH_CLUSTER) && !w->cluster) {
		/* No registry: the engine must not believe its blocks are findable. */
		post(w, s, sqe->user_data, -EOPNOTSUPP, 0, 0);
		return;
	}
	op = op_new(s, sqe, KVS_OP_FLUSH);
	if (!op) {
		post(w, s, sqe->user_data, -ENOMEM, 0, 0);
		return;
	}
	op->mark = (sqe->flags & KVS_FLUSH_INSTANCE) ? save_order_mark(s->order) : s->save_next;
	cds_list_add_tail(&op->node, &w->flushes);
}
