/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <urcu/urcu-memb.h>

#include "common/mem.h"
#include "store/store.h"
#include "base/conf.h"
#include "wire/layout.h"
#include "store/lease.h"
#include "obs/account.h"
#include "obs/log.h"
#include "io/batch.h"
#include "io/mover.h"
#include "wire/sqe.h"
#include "base/util.h"
#include "io/worker.h"

#define POLL_BUDGET 32u		  /* SQEs per session per round: fairness */
#define SLEEP_MAX_NS (1000 * NSEC_PER_MSEC)
#define SLEEP_PENDING_NS (NSEC_PER_MSEC) /* while flushes or backlogs wait */
#define WATCH_NAP_NS 20000 /* naps while a SAVE AFTER waits for its fence value */

static void bump(struct worker *w)
{
	/*
	 * Release: the queued command or completion is visible to the worker
	 * that sees the new value (load-acquire at the top of its loop).
	 */
	__atomic_fetch_add(&w->word, 1, __ATOMIC_RELEASE);
	shmq_wake_word(&w->word);
}

static void send_cmd(struct worker *w, struct wmsg *c, enum wcmd_type type, struct wsession *s)
{
	c->type = type;
	c->s = s;
	/* The unlock orders what the control thread wrote before the worker's take. */
	pthread_mutex_lock(&w->lock);
	cds_list_add_tail(&c->node, &w->cmds);
	pthread_mutex_unlock(&w->lock);
	bump(w);
}

void worker_command(struct worker *w, enum wcmd_type type, struct wsession *s)
{
	send_cmd(w, &s->cmds[type], type, s);
}

void worker_wake(struct worker *w)
{
	bump(w);
}

void worker_cluster_done(struct op *op)
{
	send_cmd(op->w, &op->cmsg, WCMD_CLUSTER, op->s);
}

/* ---- acks to the control thread ---------------------------------- */

int worker_acks_init(struct worker_acks *a)
{
	CDS_INIT_LIST_HEAD(&a->list);
	pthread_mutex_init(&a->lock, NULL);
	a->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return a->efd < 0 ? -errno : 0;
}

void worker_acks_fini(struct worker_acks *a)
{
	if (a->efd >= 0)
		close(a->efd);
	a->efd = -1;
	pthread_mutex_destroy(&a->lock);
}

void worker_acks_take(struct worker_acks *a, struct cds_list_head *list)
{
	uint64_t v;
	ssize_t r = read(a->efd, &v, sizeof(v));

	(void)r; /* the list says what is there; the count only woke us */
	pthread_mutex_lock(&a->lock);
	cds_list_splice(&a->list, list);
	CDS_INIT_LIST_HEAD(&a->list);
	pthread_mutex_unlock(&a->lock);
}

/* Tell the control thread about @s through @a (any worker thread). */
static void ack_msg(struct worker *w, struct wmsg *a, struct wsession *s, enum wcmd_type type)
{
	uint64_t one = 1;
	ssize_t r;

	a->type = type;
	a->s = s;
	/* The unlock orders this session's state before the control thread's take. */
	pthread_mutex_lock(&w->acks->lock);
	cds_list_add_tail(&a->node, &w->acks->list);
	pthread_mutex_unlock(&w->acks->lock);
	r = write(w->acks->efd, &one, sizeof(one));
	(void)r; /* full only past 2^64-2 unread acks */
}

static void ack(struct worker *w, struct wsession *s, enum wcmd_type type)
{
	ack_msg(w, &s->acks[type], s, type);
}

/* ---- completions ------------------------------------------------- */

/* @ans: the CQE's cluster answer (KVS_CQE_CLUSTER), or NULL. */
static bool cq_put(struct wsession *s, const struct kvs_cqe *cqe,
		   const struct kvs_cluster_answer *ans)
{
	uint32_t idx;
	int r = shmq_prod_reserve(&s->cq, 1, &idx);

	if (r < 0) {
		/* The engine wrote an impossible CQ head: it broke the protocol. */
		s->broken = true;
		return true;
	}
	if (r == 0)
		return false;
	/*
	 * The answer first: the CQ tail's store-release in publish_cqs()
	 * publishes it with the CQE (the engine copies both before it
	 * releases the entry, libkvstash's ring_take()).
	 */
	if (ans)
		s->answers[idx & (shmq_ring_capacity(&s->cq) - 1)] = *ans;
	memcpy(shmq_ring_entry(&s->cq, idx), cqe, sizeof(*cqe));
	s->cq_dirty = true;
	return true;
}

static void post_cqe(struct worker *w, struct wsession *s, struct kvs_cqe *cqe,
		     const struct kvs_cluster_answer *ans)
{
	struct bl_ent *e;

	/* Single writer (this worker); `kvstash stats` reads it (relaxed). */
	__atomic_store_n(&s->inflight, s->inflight - 1, __ATOMIC_RELAXED);
	if (cqe->res < 0) {
		account_error(w->ctr, s->st, cqe->res);
		if (log_enabled(LOG_DEBUG))
			slog_debug(s, "op completed with %s", strerror(-cqe->res));
	}
	if (s->detaching || s->broken)
		return; /* nobody to read it */
	if (s->bl_n == 0 && cq_put(s, cqe, ans))
		return;
	/* CQ full: keep it; the session takes no new SQE until it drains. */
	e = &s->backlog[(s->bl_head + s->bl_n) % s->bl_cap];
	e->cqe = *cqe;
	e->ans = NULL;
	if (ans && !(e->ans = malloc(sizeof(*ans)))) {
		/* No answer to go with it: the CQE must not claim one. */
		e->cqe = (struct kvs_cqe){ .user_data = cqe->user_data, .res = -ENOMEM };
		account_error(w->ctr, s->st, -ENOMEM);
	} else if (ans) {
		*e->ans = *ans;
	}
	s->bl_n++;
}

static void post_flags(struct worker *w, struct wsession *s, uint64_t user_data, int32_t res,
		       uint64_t r0, uint64_t r1, uint32_t flags)
{
	struct kvs_cqe cqe = {
		.user_data = user_data,
		.res = res,
		.flags = flags,
		.result0 = r0,
		.result1 = r1,
	};

	post_cqe(w, s, &cqe, NULL);
}

static void post(struct worker *w, struct wsession *s, uint64_t user_data, int32_t res, uint64_t r0,
		 uint64_t r1)
{
	post_flags(w, s, user_data, res, r0, r1, 0);
}

static bool drain_backlog(struct wsession *s)
{
	bool any = false;

	while (s->bl_n && !s->broken) {
		struct bl_ent *e = &s->backlog[s->bl_head];

		if (!cq_put(s, &e->cqe, e->ans))
			break;
		e->ans = mfree(e->ans);
		s->bl_head = (s->bl_head + 1) % s->bl_cap;
		s->bl_n--;
		any = true;
	}
	return any;
}

/*
 * Publish the CQEs posted this round: one release store of each CQ's tail
 * (shmq_prod_commit(), pairing with the engine's load-acquire of it) for
 * all of them, waking the engine if it asked.  Before any ack of the round
 * (settle_sessions()), so an UNREGISTER reply never overtakes a completion.
 */
static void publish_cqs(struct worker *w)
{
	struct wsession *s;

	cds_list_for_each_entry(s, &w->sessions, wnode) {
		if (!s->cq_dirty)
			continue;
		s->cq_dirty = false;
		shmq_prod_commit(&s->cq, 0);
	}
}

static void op_free(struct op *op)
{
	copy_batch_free(&op->batch);
	free(op->block_ids);
	free(op->ents);
	free(op->ckeys);
	free(op->ans);
	free(op);
}

/* ---- fences (KVS_PART_FENCES, abi.h) ------------------------------ */

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
static void load_refused(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe, int err)
{
	if (sqe->opcode == KVS_OP_LOAD && sqe_fenced(sqe) && sqe->fence_slot < s->nr_fences)
		fence_end(s, sqe->fence_slot, sqe->fence_value + sqe->layer_count, err);
	post(w, s, sqe->user_data, err, 0, 0);
}

/*
 * To the control thread, which owns the registry (control/cluster.c); it
 * comes back through worker_cluster_done() and cluster_done().  The
 * session waits for it before its DETACH is acked (settle_sessions()).
 */
static void cluster_send(struct worker *w, struct op *op)
{
	op->w = w;
	op->s->cluster_out++;
	ack_msg(w, &op->cmsg, op->s, WCMD_CLUSTER);
}

/* Post a cluster op whose results are set (a QUERY's with its answer), and free it. */
static void cluster_post(struct worker *w, struct op *op)
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

/* A cluster op is back from the control thread. */
static void fetch_answer(struct worker *w, struct op *op);

static void cluster_done(struct worker *w, struct op *op)
{
	op->s->cluster_out--;
	if (op->opcode == KVS_OP_QUERY && (op->flags & KVS_QUERY_FETCH))
		fetch_answer(w, op);
	else
		cluster_post(w, op);
}

static void finish_save(struct worker *w, struct op *op)
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
 * A parked LOAD (check_parked()) whose blocks all arrived or failed and
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

static void finish_load(struct worker *w, struct op *op)
{
	if (op->parent)
		part_done(w, op);
	else
		load_post(w, op, op->batch.err, op->batch.bytes);
}

static void finish(struct worker *w, struct op *op)
{
	if (op->opcode == KVS_OP_SAVE)
		finish_save(w, op);
	else
		finish_load(w, op);
}

static bool reap_done(struct worker *w)
{
	struct cds_list_head list;
	struct copy_batch *b, *tmp;

	if (!batch_sink_reap(&w->sink, &list))
		return false;
	cds_list_for_each_entry_safe(b, tmp, &list, node)
		finish(w, caa_container_of(b, struct op, batch));
	return true;
}

/* ---- operations ---------------------------------------------------- */

static bool flush_done(struct op *op)
{
	struct wsession *s = op->s;

	if (op->flags & KVS_FLUSH_INSTANCE)
		return save_order_done_before(s->order, op->mark);
	return cds_list_empty(&s->saves) ||
	       cds_list_first_entry(&s->saves, struct op, snode)->seq >= op->mark;
}

static bool check_flushes(struct worker *w)
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
						 (op->flags & KVS_FLUSH_INSTANCE) ? op->s->reg_itally
										 : op->s->reg_tally,
						 &op->cmark);

			if (r == 0) {
				cluster_send(w, op);
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

/*
 * Every SAVE and LOAD that took a copy count ends here, copied or not: its
 * batch comes back through the sink, finish() drops the count.  @copy:
 * hand the batch to the mover; else it completes as it is (nothing to
 * copy, or it failed while it was built).
 */
static void submit_copy(struct worker *w, struct op *op, bool copy)
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

static void do_save(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
		    const struct sqe_args *a, const struct registration *reg)
{
	const struct layout *lay = reg->layout;
	struct op *op = calloc(1, sizeof(*op));

	account_save(w->ctr);
	if (op)
		op->ents = malloc(a->n * sizeof(*op->ents));
	if (!op || !op->ents) {
		free(op);
		post(w, s, sqe->user_data, -ENOMEM, 0, 0);
		return;
	}
	op->s = s;
	op->opcode = KVS_OP_SAVE;
	op->user_data = sqe->user_data;
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
		 * Watched from here (check_waiting()), never waited for on a
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
	submit_copy(w, op, op->nents && !op->batch.err);
}

/*
 * SAVE AFTERs whose fence value came go to the mover; those of a session
 * that is ending, or past [worker] save_wait_ms, complete without a copy
 * (-ECANCELED, -ETIMEDOUT: their blocks were never stored).
 */
static bool check_waiting(struct worker *w)
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
		s->copies--; /* submit_copy() counts it again */
		any = true;
		if (err)
			op->batch.err = err;
		submit_copy(w, op, err == 0);
	}
	return any;
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
		if (t == BLOCK_FAILED)
			op->nblocks = ready; /* never more than the prefix: the engine recomputes the rest */
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
		batch->err = copy_batch_add_block(
			batch, lay, reg->mems, block_ids[i],
			&op->lease->blocks[i]->shards[reg->place.shard].slot, op->layer_begin,
			op->layer_count);
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
	submit_copy(w, op, op->nblocks && !op->batch.err);
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
	submit_copy(w, part, !part->batch.err);
}

static bool check_parked_one(struct worker *w, struct op *op);

static void do_load(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
		    const struct sqe_args *a, const struct registration *reg)
{
	struct lease *lease;
	struct op *op;
	int r;

	account_load(w->ctr);
	/* Everything that can refuse the LOAD before the share is spent (lease_take() checks n). */
	op = calloc(1, sizeof(*op));
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
	op->s = s;
	op->opcode = KVS_OP_LOAD;
	op->user_data = sqe->user_data;
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
static bool check_parked(struct worker *w)
{
	struct op *op, *tmp;
	bool any = false;

	cds_list_for_each_entry_safe(op, tmp, &w->parked, node)
		any |= check_parked_one(w, op);
	return any;
}

/*
 * The cluster part of a QUERY, made before the local lookup so that
 * nothing can fail after a lease is made: the op, its answer and room for
 * the keys the local hits may leave.  -EOPNOTSUPP without a registry,
 * -EINVAL for a session without the answer area.
 */
static int cluster_query_prep(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
			      uint32_t n, struct op **ret)
{
	struct op *op;

	/* A malformed request first: the session did not ask for the answer area. */
	if (!s->answers)
		return -EINVAL;
	if (!w->cluster)
		return -EOPNOTSUPP;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->ans = calloc(1, sizeof(*op->ans));
	op->ckeys = malloc((size_t)n * KVS_KEY_SIZE);
	if (!op->ans || !op->ckeys) {
		op_free(op);
		return -ENOMEM;
	}
	op->s = s;
	op->opcode = KVS_OP_QUERY;
	op->flags = sqe->flags;
	op->user_data = sqe->user_data;
	*ret = op;
	return 0;
}

/*
 * The local part of a QUERY: the prefix over both tiers, pinned and
 * leased unless @flags says KVS_QUERY_NOLEASE.  The hits (res), or -errno
 * with nothing pinned; the lease and the CQE's flags into the ret_ values.
 */
static int query_local(struct worker *w, struct wsession *s, const uint8_t *keys, uint32_t n,
		       uint8_t flags, uint64_t *ret_id, uint64_t *ret_ttl, uint32_t *ret_cflags)
{
	bool nolease = flags & KVS_QUERY_NOLEASE;
	struct registration *reg = wsession_reg(s);
	struct store_query_req q = {
		.ns = s->ns,
		.keys = keys,
		.n = n,
		.pin = !nolease,
		.dram_only = flags & KVS_QUERY_DRAM,
		/* Read back near its LOADs: the session's region, else its worker's. */
		.region = reg ? reg->place.region
			      : pool_region_for_node(store_pool(w->store), w->node),
		.ret_blocks = w->blocks,
	};
	struct store_query_res qr;
	uint64_t id = 0, ttl = 0;
	char why[256];
	int r;

	store_query_tiers(w->store, &q, &qr);
	account_query(w->ctr, s->st, qr.hits, n);
	if (qr.hits && !nolease) {
		r = lease_create(w->leases, s->lh, s->id, s->uid, w->blocks, qr.hits, qr.bytes, &id,
				 &ttl, why, sizeof(why));
		if (r < 0) {
			if (why[0])
				slog_warning_errno(s, r, "QUERY refused: %s", why);
			for (uint32_t i = 0; i < qr.hits; i++)
				block_unpin(w->blocks[i]);
			return r;
		}
	}
	*ret_id = id;
	*ret_ttl = ttl;
	*ret_cflags = MIN(qr.pending, KVS_CQE_PENDING_MAX) << KVS_CQE_PENDING_SHIFT;
	return (int)qr.hits;
}

/*
 * A fetching QUERY: count the local prefix without pinning it (a fetch
 * may take seconds), then hand the keys to the control thread, which
 * fetches what follows from a peer (control/peer.c) and gives the op
 * back (fetch_answer()).  Nothing to fetch: a plain QUERY.
 */
static void do_query_fetch(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
			   const struct sqe_args *a)
{
	struct store_query_req q = {
		.ns = s->ns,
		.keys = a->keys,
		.n = a->n,
		.dram_only = sqe->flags & KVS_QUERY_DRAM,
	};
	struct store_query_res qr;
	uint64_t id, ttl;
	uint32_t cflags;
	struct op *op;
	int r;

	if (!w->peer) {
		post(w, s, sqe->user_data, -EOPNOTSUPP, 0, 0);
		return;
	}
	store_query_tiers(w->store, &q, &qr);
	/* All here, or a namespace no peer can name (no registry digest): answer now. */
	if (qr.hits == a->n || !s->ns->tagged) {
		r = query_local(w, s, a->keys, a->n, sqe->flags, &id, &ttl, &cflags);
		post_flags(w, s, sqe->user_data, r, r < 0 ? 0 : id, r < 0 ? 0 : ttl,
			   r < 0 ? 0 : cflags);
		return;
	}
	op = calloc(1, sizeof(*op));
	if (op) {
		op->ans = calloc(1, sizeof(*op->ans));
		op->ckeys = malloc((size_t)a->n * KVS_KEY_SIZE);
	}
	if (!op || !op->ans || !op->ckeys) {
		if (op)
			op_free(op);
		post(w, s, sqe->user_data, -ENOMEM, 0, 0);
		return;
	}
	op->s = s;
	op->opcode = KVS_OP_QUERY;
	op->flags = sqe->flags;
	op->user_data = sqe->user_data;
	memcpy(op->tag, s->ns->tag, KVS_KEY_SIZE);
	memcpy(op->ckeys, a->keys, (size_t)a->n * KVS_KEY_SIZE);
	op->nckeys = a->n;
	op->hits0 = qr.hits;
	if (a->hint)
		strscpy_trunc(op->hint, a->hint, sizeof(op->hint));
	cluster_send(w, op);
}

/* A fetching QUERY is back: answer it over what is resident now. */
static void fetch_answer(struct worker *w, struct op *op)
{
	uint64_t id, ttl;
	uint32_t cflags;
	int r = query_local(w, op->s, (const uint8_t *)op->ckeys, op->nckeys, op->flags, &id, &ttl,
			    &cflags);

	if (r >= 0 && (uint32_t)r < op->nckeys && op->fetch_err && log_enabled(LOG_DEBUG))
		slog_info_errno(op->s, op->fetch_err, "fetch: %d local, %d fetched, %d of %u hit",
				(int)op->hits0, (int)op->fetched, r, op->nckeys);
	post_flags(w, op->s, op->user_data, r, r < 0 ? 0 : id, r < 0 ? 0 : ttl,
		   r < 0 ? 0 : cflags);
	op_free(op);
}

static void do_query(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
		     const struct sqe_args *a)
{
	uint64_t id = 0, ttl = 0;
	struct op *cop = NULL;
	uint32_t cflags = 0;
	int r;

	if (sqe->flags & KVS_QUERY_FETCH) {
		do_query_fetch(w, s, sqe, a);
		return;
	}
	if (sqe->flags & KVS_QUERY_CLUSTER) {
		r = cluster_query_prep(w, s, sqe, a->n, &cop);
		if (r < 0) {
			post(w, s, sqe->user_data, r, 0, 0);
			return;
		}
	}
	r = query_local(w, s, a->keys, a->n, sqe->flags, &id, &ttl, &cflags);
	if (r < 0) {
		if (cop)
			op_free(cop);
		post(w, s, sqe->user_data, r, 0, 0);
		return;
	}
	if (!cop) {
		post_flags(w, s, sqe->user_data, r, id, ttl, cflags);
		return;
	}
	cop->cqe_flags = cflags;
	cop->res = r;
	cop->r0 = id;
	cop->r1 = ttl;
	if ((uint32_t)r == a->n || !s->ns->tagged) {
		/*
		 * Nothing to ask: every key hit (the answer says 0 more), or
		 * a namespace without a digest (none of its blocks is in the
		 * registry; the answer says so).
		 */
		cop->ans->status = (uint32_t)r == a->n ? 0 : -ENOTCONN;
		cluster_post(w, cop);
		return;
	}
	memcpy(cop->tag, s->ns->tag, KVS_KEY_SIZE);
	memcpy(cop->ckeys, a->keys + (size_t)r * KVS_KEY_SIZE, (size_t)(a->n - (uint32_t)r) * KVS_KEY_SIZE);
	cop->nckeys = a->n - (uint32_t)r;
	cluster_send(w, cop);
}

static void do_flush(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe)
{
	struct op *op;

	if ((sqe->flags & KVS_FLUSH_CLUSTER) && !w->cluster) {
		/* No registry: the engine must not believe its blocks are findable. */
		post(w, s, sqe->user_data, -EOPNOTSUPP, 0, 0);
		return;
	}
	op = calloc(1, sizeof(*op));
	if (!op) {
		post(w, s, sqe->user_data, -ENOMEM, 0, 0);
		return;
	}
	op->s = s;
	op->opcode = KVS_OP_FLUSH;
	op->flags = sqe->flags;
	op->user_data = sqe->user_data;
	op->mark = (sqe->flags & KVS_FLUSH_INSTANCE) ? save_order_mark(s->order) : s->save_next;
	cds_list_add_tail(&op->node, &w->flushes);
}

static void handle_sqe(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe)
{
	struct registration *reg = s->unregistering ? NULL : wsession_reg(s);
	struct sqe_limits lim = {
		.role = s->role,
		.max_keys = w->cfg->max_keys,
		.num_blocks = reg ? reg->layout->num_blocks : 0,
		.nr_layers = reg ? reg->layout->nr_layers : 0,
		.nr_fences = s->nr_fences,
	};
	struct sqe_args a;
	int r;

	__atomic_store_n(&s->inflight, s->inflight + 1, __ATOMIC_RELAXED);
	account_sqe(s->st);
	r = sqe_decode(sqe, s->args, s->args_size, &lim, w->scratch, &a);
	if (r == 0 &&
	    (sqe->opcode == KVS_OP_SAVE || sqe->opcode == KVS_OP_LOAD ||
	     sqe->opcode == KVS_OP_QUERY) &&
	    !wsession_sealed(s))
		r = -KVS_EUNSEALED;
	if (r < 0) {
		/* An engine can submit these in a loop: rate-limited per session. */
		if (r == -EOPNOTSUPP || log_enabled(LOG_DEBUG))
			slog_info_errno_rl(&s->log_rl, s, r, "SQE opcode %u rejected", sqe->opcode);
		load_refused(w, s, sqe, r); /* any opcode: only a LOAD's fence is released */
		return;
	}
	switch (sqe->opcode) {
	case KVS_OP_NOP:
		post(w, s, sqe->user_data, 0, 0, 0);
		break;
	case KVS_OP_QUERY:
		do_query(w, s, sqe, &a);
		break;
	case KVS_OP_RELEASE:
		post(w, s, sqe->user_data, lease_release(w->leases, sqe->lease, s->lh), 0, 0);
		break;
	case KVS_OP_SAVE:
		do_save(w, s, sqe, &a, reg);
		break;
	case KVS_OP_LOAD:
		do_load(w, s, sqe, &a, reg);
		break;
	case KVS_OP_FLUSH:
		do_flush(w, s, sqe);
		break;
	}
}

static bool poll_session(struct worker *w, struct wsession *s)
{
	struct kvs_sqe sqe;
	uint32_t idx, room;
	int n;

	if (s->broken || s->detaching)
		return false;
	drain_backlog(s);
	if (s->bl_n)
		return false; /* the engine is not reaping: take nothing new */
	room = s->max_inflight - s->inflight;
	if (room == 0)
		return false;
	n = shmq_cons_peek(&s->sq, MIN(room, POLL_BUDGET), &idx);
	if (n < 0) {
		s->broken = true;
		return true;
	}
	for (int i = 0; i < n; i++) {
		/* A private copy: the engine may rewrite the slot at any time. */
		memcpy(&sqe, shmq_ring_entry(&s->sq, idx + (uint32_t)i), sizeof(sqe));
		handle_sqe(w, s, &sqe);
	}
	/* Arguments were copied above: the engine may reuse them after this. */
	if (n)
		shmq_cons_release(&s->sq, (uint32_t)n);
	return n > 0;
}

/* ---- commands and session bookkeeping ---------------------------- */

static void attach(struct worker *w, struct wsession *s)
{
	s->attached = true;
	cds_list_add_tail(&s->wnode, &w->sessions);
	w->nr_sessions++;
	w->rings_stale = true;
}

static bool process_cmds(struct worker *w)
{
	struct wmsg *c, *tmp;
	struct cds_list_head list;
	bool any;

	CDS_INIT_LIST_HEAD(&list);
	pthread_mutex_lock(&w->lock);
	cds_list_splice(&w->cmds, &list);
	CDS_INIT_LIST_HEAD(&w->cmds);
	pthread_mutex_unlock(&w->lock);
	any = !cds_list_empty(&list);
	cds_list_for_each_entry_safe(c, tmp, &list, node) {
		/* Off every list before it is handled: the session may send this type again. */
		cds_list_del(&c->node);
		switch (c->type) {
		case WCMD_ATTACH:
			attach(w, c->s);
			break;
		case WCMD_DETACH:
			c->s->detaching = true;
			w->rings_stale = true;
			break;
		case WCMD_UNREGISTER:
			c->s->unregistering = true;
			break;
		case WCMD_CLUSTER:
			cluster_done(w, caa_container_of(c, struct op, cmsg));
			break;
		default:
			break;
		}
	}
	return any;
}

/* Finish detaches and unregistrations whose copies have drained. */
static void settle_sessions(struct worker *w)
{
	struct wsession *s, *tmp;

	cds_list_for_each_entry_safe(s, tmp, &w->sessions, wnode) {
		if (s->broken && !s->broken_acked) {
			/* The control thread closes the socket, then sends DETACH. */
			s->broken_acked = true;
			w->rings_stale = true;
			slog_error(s, "ring protocol violated (impossible index): ending the session");
			ack(w, s, WCMD_BROKEN);
		}
		if (s->unregistering && s->copies == 0) {
			s->retired = wsession_reg(s);
			wsession_publish_reg(s, NULL);
			s->unregistering = false;
			ack(w, s, WCMD_UNREGISTER);
		}
		/* Cluster ops come back whatever happens (the registry has deadlines). */
		if (s->detaching && s->copies == 0 && s->cluster_out == 0) {
			bool flushing = false;
			struct op *op;

			cds_list_for_each_entry(op, &w->flushes, node)
				flushing |= op->s == s;
			if (flushing)
				continue;
			cds_list_del(&s->wnode);
			w->nr_sessions--;
			w->rings_stale = true;
			s->attached = false;
			ack(w, s, WCMD_DETACH);
		}
	}
}

/* ---- the loop ------------------------------------------------------ */

static int rebuild_rings(struct worker *w)
{
	struct wsession *s;
	unsigned n = 0;

	if (w->rings_cap < w->nr_sessions) {
		unsigned cap = MAX(w->nr_sessions, 2 * w->rings_cap);
		struct shmq_ring **r = realloc(w->rings, cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		w->rings = r;
		struct wsession **ss = realloc(w->ring_sessions, cap * sizeof(*ss));
		if (!ss)
			return -ENOMEM;
		w->ring_sessions = ss;
		w->rings_cap = cap;
	}
	cds_list_for_each_entry(s, &w->sessions, wnode) {
		if (s->broken || s->detaching)
			continue;
		w->rings[n] = &s->sq;
		w->ring_sessions[n] = s;
		n++;
	}
	w->rings_stale = false;
	return (int)n;
}

static bool needs_short_sleep(struct worker *w)
{
	struct wsession *s;

	/* Parked LOADs: the store's wake-up is the way on, a short sleep the safety net. */
	if (!cds_list_empty(&w->flushes) || !cds_list_empty(&w->parked))
		return true;
	cds_list_for_each_entry(s, &w->sessions, wnode)
		if (s->bl_n || s->detaching || s->unregistering)
			return true;
	return false;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t spin_ns = (uint64_t)w->cfg->spin_us * 1000;
	int64_t doze_ns = (int64_t)w->cfg->doze_us * 1000;
	uint64_t doze_for = (uint64_t)w->cfg->doze_ms * NSEC_PER_MSEC;
	uint64_t idle_since = now_ns();
	int nrings = 0;

	urcu_memb_register_thread();
	batch_sink_own(&w->sink);
	if (w->node >= 0 && numa_available() >= 0)
		numa_run_on_node(w->node);
	/* Here, not in worker_start(): a device context may belong to the thread that made it. */
	if (w->mover_ops->worker_init(w->dev, w->id, &w->mover) < 0) {
		w->mover = NULL;
		log_error("worker %u: %s %u unusable: its sessions will fail their copies", w->id,
			  w->mover_ops->dev_name, w->dev);
	}
	for (;;) {
		/*
		 * Pairs with the release in bump() and in batch_complete():
		 * commands and completions queued before are seen.
		 */
		uint32_t seen = __atomic_load_n(&w->word, __ATOMIC_ACQUIRE);
		struct wsession *s;
		bool busy = false;

		busy |= process_cmds(w);
		if (w->mover && w->mover->ops->poll)
			busy |= w->mover->ops->poll(w->mover);
		busy |= reap_done(w);
		cds_list_for_each_entry(s, &w->sessions, wnode)
			busy |= poll_session(w, s);
		busy |= reap_done(w); /* inline copies finished above */
		busy |= check_flushes(w);
		if (check_parked(w))
			busy |= reap_done(w); /* copies done inline (nothing left to copy) */
		if (check_waiting(w))
			busy |= reap_done(w);
		publish_cqs(w);
		settle_sessions(w);
		/* Pairs with the store-release in worker_stop(). */
		if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE) && w->nr_sessions == 0)
			break;
		/* Copies only polling completes (GPU events): keep polling, do not sleep. */
		if (busy ||
		    (w->mover && w->mover->ops->inflight && w->mover->ops->inflight(w->mover))) {
			idle_since = now_ns();
			continue;
		}
		if (now_ns() - idle_since < spin_ns) {
			cpu_relax();
			continue;
		}
		if (w->rings_stale)
			nrings = rebuild_rings(w);
		if (nrings < 0) {
			nrings = 0;
			w->rings_stale = true;
		}
		unsigned bad = 0;
		int64_t sleep_ns = needs_short_sleep(w) ? SLEEP_PENDING_NS : SLEEP_MAX_NS;
		/*
		 * Dozing: naps, for a while after the last work, instead of a
		 * sleep only a submit's futex wake ends.  A thread that wakes
		 * often keeps its CPU out of deep idle (and a VM's vCPU out of
		 * the host's halt), which is most of what a wake-up costs.
		 */
		bool dozing = doze_ns && now_ns() - idle_since < doze_for;
		/* A SAVE AFTER's word is memory, not a futex: looked at between naps. */
		bool watching = !cds_list_empty(&w->waiting);
		int64_t nap = dozing ? MIN(doze_ns, sleep_ns) : sleep_ns;
		int r = shmq_wait_many(w->rings, (unsigned)nrings, &w->word, seen,
				       watching ? MIN(nap, WATCH_NAP_NS) : nap, &bad);

		if (r == -EPROTO && bad < (unsigned)nrings) {
			w->ring_sessions[bad]->broken = true;
			w->rings_stale = true;
		}
		/* A nap that ran out is not work: no spin after it, the dozing window runs on. */
		if ((dozing || watching) && r == -ETIMEDOUT)
			continue;
		idle_since = now_ns();
	}
	if (w->mover)
		w->mover->ops->worker_fini(w->mover);
	urcu_memb_unregister_thread();
	return NULL;
}

int worker_start(const struct worker_env *env, unsigned id, int node, const struct mover_ops *mover,
		 unsigned dev, struct worker **ret)
{
	struct worker *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return -ENOMEM;
	w->id = id;
	w->node = node;
	w->mover_ops = mover;
	w->dev = dev;
	w->cfg = env->cfg;
	w->acks = env->acks;
	w->ctr = env->ctr;
	w->store = env->store;
	w->leases = env->leases;
	w->cluster = env->cluster;
	w->peer = env->peer;
	snprintf(w->name, sizeof(w->name), "kvs-io-%u", id);
	pthread_mutex_init(&w->lock, NULL);
	CDS_INIT_LIST_HEAD(&w->cmds);
	batch_sink_init(&w->sink, &w->word);
	CDS_INIT_LIST_HEAD(&w->sessions);
	CDS_INIT_LIST_HEAD(&w->flushes);
	CDS_INIT_LIST_HEAD(&w->parked);
	CDS_INIT_LIST_HEAD(&w->waiting);
	w->scratch_size = sqe_arg_bytes(KVS_OP_SAVE, w->cfg->max_keys) + KVS_FETCH_HINT_MAX;
	w->scratch = aligned_alloc(64, round_up_u64(w->scratch_size, 64));
	w->blocks = calloc(w->cfg->max_keys, sizeof(*w->blocks));
	if (!w->scratch || !w->blocks) {
		free(w->scratch);
		free(w->blocks);
		free(w);
		return -ENOMEM;
	}
	r = -pthread_create(&w->thread, NULL, worker_main, w);
	if (r) {
		free(w->scratch);
		free(w->blocks);
		free(w);
		return r;
	}
	pthread_setname_np(w->thread, w->name);
	w->running = true;
	*ret = w;
	return 0;
}

void worker_stop(struct worker *w)
{
	if (!w)
		return;
	if (w->running) {
		__atomic_store_n(&w->stop, true, __ATOMIC_RELEASE);
		bump(w);
		pthread_join(w->thread, NULL);
	}
	free(w->rings);
	free(w->ring_sessions);
	free(w->scratch);
	free(w->blocks);
	batch_sink_fini(&w->sink);
	pthread_mutex_destroy(&w->lock);
	free(w);
}
