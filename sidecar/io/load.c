/* SPDX-License-Identifier: MIT */
/*
 * The LOAD path: a LOAD's lease share taken and its blocks copied from
 * their pool slots, layer by layer for a LOAD PROGRESS; a LOAD whose
 * blocks are still being read from SSD parked (worker.parked) and copied
 * in parts as they arrive (load_check_parked()); its fence released and
 * its CQE however it ends.  Worker thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "store/lease.h"
#include "obs/account.h"
#include "obs/log.h"
#include "io/batch.h"
#include "io/load.h"
#include "io/op.h"
#include "io/post.h"
#include "wire/layout.h"
#include "wire/sqe.h"
#include "base/util.h"

/*
 * The end of a LOAD PROGRESS, copied or not: its status, then the value
 * past its last layer, which releases every wait the engine queued for
 * it.  Called only once its copies ended, so no write of the copy stream
 * can come after it and take the value back.  The store-release orders
 * status (and blocks) before the value, for libkvstash's load-acquire
 * and, x86 stores being seen in order, for the engine GPU's reads.
 */
static void fence_end(struct wsession *s, uint32_t slot, uint32_t value, int32_t status)
{
	struct kvs_fence *f = &s->fences[slot];

	__atomic_store_n(&f->status, status, __ATOMIC_RELAXED);
	__atomic_store_n(&f->value, value, __ATOMIC_RELEASE);
}

/* A LOAD that ends before it took a lease share: its CQE, and its fence released. */
void load_refused(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe, int err)
{
	if (sqe->opcode == KVS_OP_LOAD && sqe_fenced(sqe) && sqe->fence_slot < s->nr_fences)
		fence_end(s, sqe->fence_slot, sqe->fence_value + sqe->layer_count, err);
	post(w, s, sqe->user_data, err, 0, 0);
}

/* A LOAD's one CQE, and the end of its lease share and its copy count. */
static void load_post(struct worker *w, struct op *op, int err, uint64_t bytes)
{
	struct wsession *s = op->s;

	lease_put(w->leases, op->lease);
	s->copies--;
	if (op->fenced) {
		__atomic_store_n(&s->fences[op->fence_slot].blocks, err ? 0 : op->nblocks,
				 __ATOMIC_RELAXED);
		fence_end(s, op->fence_slot, op->fence_value + op->layer_count, err);
	}
	if (err == 0) {
		account_load_done(w->ctr, s->st, op->nblocks, bytes, now_ns() - op->t0);
		post(w, s, op->user_data, (int32_t)op->nblocks, bytes, 0);
	} else {
		slog_error_errno_rl(&s->log_rl, s, err, "load of %u blocks failed", op->nblocks);
		post(w, s, op->user_data, err, 0, 0);
	}
	op_free(op);
}

/*
 * A parked LOAD (load_check_parked()) whose blocks all arrived or failed and
 * whose every part was copied.
 */
static void load_end(struct worker *w, struct op *op)
{
	load_post(w, op, op->err, op->copied); /* drops the parked LOAD's own copy count */
}

/* One part of a parked LOAD was copied. */
static void part_done(struct worker *w, struct op *part)
{
	struct op *op = part->parent;

	part->s->copies--;
	if (part->batch.err && !op->err)
		op->err = part->batch.err;
	op->copied += part->batch.bytes;
	op->parts--;
	op_free(part);
	if (op->reads_done && op->parts == 0)
		load_end(w, op);
}

void load_finish(struct worker *w, struct op *op)
{
	if (op->parent)
		part_done(w, op);
	else
		load_post(w, op, op->batch.err, op->batch.bytes);
}

/*
 * How far from @from a LOAD's blocks are in DRAM (it may copy them): up
 * to the first still READING from SSD; a FAILED one ends the LOAD before
 * it (op->nblocks shortened).  Each block's
 * tier is read with load-acquire, pairing with the store-release at the
 * end of its read (store.c), so the bytes read are there when it copies.
 */
static uint32_t load_ready_to(struct op *op, uint32_t from)
{
	uint32_t ready = from;

	while (ready < op->nblocks) {
		enum block_tier t = block_tier(op->lease->blocks[ready]);

		if (t == BLOCK_READING)
			break;
		/* Never more than the prefix: the engine recomputes the rest. */
		if (t == BLOCK_FAILED)
			op->nblocks = ready;
		else
			ready++;
	}
	return ready;
}

static bool load_ready(struct op *op)
{
	return load_ready_to(op, 0) == op->nblocks;
}

/* Blocks [@from, @to) of LOAD @op into @batch (its error in batch->err). */
static void load_add(struct copy_batch *batch, const struct op *op, const struct registration *reg,
		     const uint32_t *block_ids, uint32_t from, uint32_t to)
{
	const struct layout *lay = reg->layout;

	for (uint32_t i = from; i < to && !batch->err; i++)
		batch->err =
			copy_batch_add_block(batch, lay, reg->mems, block_ids[i],
					     &op->lease->blocks[i]->shards[reg->place.shard].slot,
					     op->layer_begin, op->layer_count);
}

/*
 * A LOAD PROGRESS: layer by layer (each layer of every block, then the
 * next), one group of pieces per layer, after each of which the mover
 * publishes the layer (struct copy_batch, sig_*).  Without memory for the
 * groups it is copied as any LOAD: every layer is published at its end.
 */
static void load_add_layers(struct copy_batch *b, const struct op *op,
			    const struct registration *reg, const uint32_t *block_ids)
{
	const struct layout *lay = reg->layout;

	b->sig_end = malloc((size_t)op->layer_count * sizeof(*b->sig_end));
	if (!b->sig_end) {
		load_add(b, op, reg, block_ids, 0, op->nblocks);
		return;
	}
	for (uint32_t j = 0; j < op->layer_count && !b->err; j++) {
		for (uint32_t i = 0; i < op->nblocks && !b->err; i++)
			b->err = copy_batch_add_block(
				b, lay, reg->mems, block_ids[i],
				&op->lease->blocks[i]->shards[reg->place.shard].slot,
				op->layer_begin + j, 1);
		b->sig_end[j] = b->merge_floor = b->n;
	}
	b->nsig = op->layer_count;
	b->sig_base = op->fence_value;
	b->sig_addr = (uint64_t)(uintptr_t)&op->s->fences[op->fence_slot].value;
}

static void load_submit(struct worker *w, struct op *op, const struct registration *reg,
			const uint32_t *block_ids)
{
	if (op->fenced && op->nblocks) {
		/* Before the first layer's value, which the copy stream writes after this. */
		__atomic_store_n(&op->s->fences[op->fence_slot].blocks, op->nblocks,
				 __ATOMIC_RELEASE);
		load_add_layers(&op->batch, op, reg, block_ids);
	} else {
		load_add(&op->batch, op, reg, block_ids, 0, op->nblocks);
	}
	op_submit(w, op, op->nblocks && !op->batch.err);
}

/*
 * Blocks [@from, @to) of parked LOAD @op arrived: copy them now, as a
 * part of their own (its batch comes back through the sink like any,
 * part_done()), while the later ones are still being read.
 */
static void load_part(struct worker *w, struct op *op, uint32_t from, uint32_t to)
{
	struct op *part = calloc(1, sizeof(*part));

	if (!part) {
		if (!op->err)
			op->err = -ENOMEM;
		return;
	}
	part->s = op->s;
	part->opcode = KVS_OP_LOAD;
	part->parent = op;
	part->batch.dir = COPY_FROM_POOL;
	/* The session's registration is held while its copies are counted. */
	load_add(&part->batch, op, wsession_reg(op->s), op->block_ids, from, to);
	op->parts++;
	op_submit(w, part, !part->batch.err);
}

static bool check_parked_one(struct worker *w, struct op *op);

void load_start(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
		const struct sqe_args *a, const struct registration *reg)
{
	struct lease *lease;
	struct op *op;
	int r;

	account_load(w->ctr);
	/* Everything that can refuse the LOAD before the share is spent (lease_take() checks n). */
	op = op_new(s, sqe, KVS_OP_LOAD);
	if (!op) {
		load_refused(w, s, sqe, -ENOMEM);
		return;
	}
	r = lease_take(w->leases, sqe->lease, s->lh, s->tp_rank, a->n, &lease);
	if (r < 0) {
		free(op);
		load_refused(w, s, sqe, r);
		return;
	}
	/* The share is spent from here on, whatever happens to the copy. */
	op->lease = lease;
	op->nblocks = a->n;
	op->batch.dir = COPY_FROM_POOL;
	op->layer_begin = a->layer_begin;
	op->layer_count = a->layer_count;
	op->fenced = a->fenced;
	op->fence_slot = a->fence_slot;
	op->fence_value = a->fence_value;
	if (load_ready(op)) {
		load_submit(w, op, reg, a->block_ids);
		return;
	}
	/* Blocks still coming from SSD: it waits, holding the session's copies (detach waits too). */
	op->block_ids = malloc((size_t)a->n * sizeof(*op->block_ids));
	if (!op->block_ids) {
		op->nblocks = 0; /* the lease is spent; nothing copied */
		load_submit(w, op, reg, a->block_ids);
		return;
	}
	memcpy(op->block_ids, a->block_ids, (size_t)a->n * sizeof(*op->block_ids));
	s->copies++;
	op->t0 = now_ns();
	cds_list_add_tail(&op->node, &w->parked);
	check_parked_one(w, op); /* what already arrived goes at once */
}

/*
 * A parked LOAD: the blocks that arrived since it last looked, in prefix
 * order, go to the mover as a part (load_part()); a FAILED one ends the
 * LOAD before it.  Once nothing is READING it leaves the parked list,
 * and its CQE comes when its last part was copied (load_end()).  Each
 * block's tier is read with load-acquire (block_tier(), pairing with the
 * store-release at the end of its read).  Returns true if it moved.
 */
static bool check_parked_one(struct worker *w, struct op *op)
{
	uint32_t ready = load_ready_to(op, op->next);
	bool moved = ready > op->next;

	if (moved) {
		load_part(w, op, op->next, ready);
		op->next = ready;
	}
	if (ready < op->nblocks)
		return moved;
	cds_list_del(&op->node);
	op->reads_done = true;
	if (op->parts == 0)
		load_end(w, op);
	return true;
}

/* Parked LOADs go on as their blocks arrive: the store's reads wake the worker (worker_wake()). */
bool load_check_parked(struct worker *w)
{
	struct op *op, *tmp;
	bool any = false;

	cds_list_for_each_entry_safe(op, tmp, &w->parked, node)
		any |= check_parked_one(w, op);
	return any;
}
