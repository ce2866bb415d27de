/* SPDX-License-Identifier: MIT */
/*
 * Submission: kvs_get_sqe(), the kvs_prep_*() helpers and kvs_submit().
 * Owns the SQ producer side, the argument byte ring (alloc_args(),
 * reclaim_args()) and the reservations handed out before a submit
 * (struct client_resv), with a failed prep's give-back (prep_fail()).
 * Runs on the application's (engine's) thread that uses the client; the
 * fence slots it arms are fence.c's.
 */
#include <errno.h>
#include <string.h>

#include "client.h"

struct kvs_sqe *kvs_get_sqe(struct kvs_client *c)
{
	struct kvs_sqe *sqe;
	uint32_t idx, slot;

	/*
	 * Completions the library keeps (lq) have given their slot back but
	 * not yet reached the application: they count as pending, so lq can
	 * never hold more than pend_cap (kvstashd's death completes them all).
	 */
	if (c->pend_nfree <= c->lq_n)
		return NULL;
	if (c->dead) {
		if (c->sq_reserved == c->info.sq_entries)
			return NULL;
		sqe = &c->dead_sqes[c->sq_reserved];
	} else {
		if (shmq_prod_reserve(&c->sq, 1, &idx) != 1)
			return NULL; /* full (or a corrupt head: found at the next wait) */
		sqe = shmq_ring_entry(&c->sq, idx);
	}
	slot = c->pend_free[--c->pend_nfree];
	c->pend[slot].state = PEND_RESERVED;
	c->pend[slot].user_data = 0;
	c->pend[slot].count = 0;
	c->pend[slot].cluster = false;
	c->pend[slot].swallow = false;
	c->pend[slot].fence = -1;
	c->resv[c->sq_reserved++] = (struct client_resv){ .sqe = sqe, .slot = slot };
	memset(sqe, 0, sizeof(*sqe));
	sqe->user_data = ((uint64_t)c->pend[slot].gen << 32) | slot;
	return sqe;
}

/*
 * Which SQE handed out is @sqe: the newest first (one prep right after
 * each get is the common case), but any order works, as with liburing's
 * get-several-then-prep.  NULL: not one of ours, or given back.
 */
static struct client_resv *resv_of(struct kvs_client *c, const struct kvs_sqe *sqe)
{
	for (uint32_t k = c->sq_reserved; k-- > 0;)
		if (c->resv[k].sqe == sqe)
			return c->pend[c->resv[k].slot].swallow ? NULL : &c->resv[k];
	return NULL;
}

/* Give the newest SQE back to the ring. */
static void cancel_newest(struct kvs_client *c)
{
	client_pend_put(c, c->resv[--c->sq_reserved].slot);
	if (!c->dead)
		shmq_prod_cancel(&c->sq, 1);
}

/*
 * A prep of @sqe failed with @err: the SQE is the library's again.  The
 * newest goes back to the ring (and any given back before it that are
 * the newest then); one with SQEs handed out after it cannot, so it goes
 * as a NOP whose completion the library takes (ring_take()).
 */
static int prep_fail(struct kvs_client *c, struct kvs_sqe *sqe, int err)
{
	struct client_resv *r = resv_of(c, sqe);
	struct pending *p;

	if (!r)
		return err;
	if (r == &c->resv[c->sq_reserved - 1]) {
		cancel_newest(c);
		while (c->sq_reserved && c->pend[c->resv[c->sq_reserved - 1].slot].swallow)
			cancel_newest(c);
		return err;
	}
	p = &c->pend[r->slot];
	p->swallow = true;
	p->fence = -1; /* a fence it armed was ended by the prep that failed */
	p->opcode = KVS_OP_NOP;
	p->count = 0;
	r->args = false;
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = KVS_OP_NOP;
	sqe->user_data = ((uint64_t)p->gen << 32) | r->slot;
	return err;
}

/* The pending operation of an SQE prepared just now (prep() succeeded). */
static struct pending *pend_of(struct kvs_client *c, const struct kvs_sqe *sqe)
{
	return &c->pend[resv_of(c, sqe)->slot];
}

/* Reclaim arguments of SQEs kvstashd has consumed (their head passed them). */
static void reclaim_args(struct kvs_client *c)
{
	int inflight = shmq_prod_inflight(&c->sq);
	uint32_t head;

	if (inflight < 0)
		return;
	head = c->sq_tail - (uint32_t)inflight;
	if (head != c->sq_freed) {
		c->arg_head = c->arg_end[(head - 1) & (c->info.sq_entries - 1)];
		c->sq_freed = head;
	}
	if (c->sq_reserved == 0 && inflight == 0)
		c->arg_head = c->arg_tail; /* nothing outstanding at all */
}

static int alloc_args(struct kvs_client *c, struct client_resv *r, uint64_t len, void **ret)
{
	struct kvs_sqe *sqe = r->sqe;
	uint64_t pos, size = c->args_size;

	if (len > size)
		return -E2BIG;
	for (int pass = 0; pass < 2; pass++) {
		pos = (c->arg_tail + KVS_ARG_ALIGN - 1) & ~(uint64_t)(KVS_ARG_ALIGN - 1);
		if (pos % size + len > size)
			pos += size - pos % size; /* does not fit before the end: wrap */
		if (pos + len - c->arg_head <= size)
			break;
		if (pass)
			return -ENOSPC;
		reclaim_args(c);
	}
	c->arg_tail = pos + len;
	/* Another prep of the same SQE: the bytes of the first are freed with those before. */
	r->args = true;
	r->arg_start = pos;
	sqe->arg_off = (uint32_t)(pos % size);
	sqe->arg_len = (uint32_t)len;
	*ret = c->args + pos % size;
	return 0;
}

static int prep(struct kvs_client *c, struct kvs_sqe *sqe, uint8_t op, uint32_t n,
		uint64_t user_data, uint64_t argbytes, void **ret_args)
{
	struct client_resv *res = resv_of(c, sqe);
	struct pending *p;
	int r;

	if (!res)
		return -EINVAL; /* not an SQE of this client's, or given back */
	p = &c->pend[res->slot];
	/* SAVE, QUERY and LOAD carry arguments, so n == 0 (argbytes 0) is no request. */
	if (op == KVS_OP_SAVE || op == KVS_OP_QUERY || op == KVS_OP_LOAD) {
		if (n == 0)
			return prep_fail(c, sqe, -EINVAL);
		if (n > c->info.max_keys)
			return prep_fail(c, sqe, -E2BIG);
		if (c->dead) {
			/* Arguments will never be read: do not touch the region. */
			*ret_args = NULL;
		} else {
			r = alloc_args(c, res, argbytes, ret_args);
			if (r < 0)
				return prep_fail(c, sqe, r);
		}
	}
	sqe->opcode = op;
	sqe->count = n;
	p->user_data = user_data;
	p->opcode = op;
	p->count = n;
	return 0;
}

int kvs_prep_nop(struct kvs_client *c, struct kvs_sqe *sqe, uint64_t user_data)
{
	return prep(c, sqe, KVS_OP_NOP, 0, user_data, 0, NULL);
}

int kvs_prep_save(struct kvs_client *c, struct kvs_sqe *sqe, const void *keys,
		  const uint32_t *block_ids, uint32_t n, uint64_t user_data)
{
	uint8_t *a = NULL;
	int r = prep(c, sqe, KVS_OP_SAVE, n, user_data, (uint64_t)n * KVS_SAVE_ARG_SIZE,
		     (void **)&a);

	if (r == 0 && a) {
		memcpy(a, keys, (size_t)n * KVS_KEY_SIZE);
		memcpy(a + (size_t)n * KVS_KEY_SIZE, block_ids, (size_t)n * 4);
	}
	return r;
}

int kvs_prep_query(struct kvs_client *c, struct kvs_sqe *sqe, const void *keys, uint32_t n,
		   uint64_t req_id, uint32_t flags, uint64_t user_data)
{
	uint8_t *a = NULL;
	int r;

	/*
	 * Only a session with the answer part can be given an answer: refused
	 * here, before the arguments are placed, like any failed prep.
	 */
	if ((flags & KVS_QUERY_CLUSTER) && !(c->opts.flags & KVS_CONNECT_CLUSTER)) {
		client_log(c, KVS_LOG_ERR,
			   "KVS_QUERY_CLUSTER on a session connected without KVS_CONNECT_CLUSTER");
		return prep_fail(c, sqe, -EINVAL);
	}
	r = prep(c, sqe, KVS_OP_QUERY, n, user_data, (uint64_t)n * KVS_QUERY_ARG_SIZE, (void **)&a);
	if (r == 0) {
		if (a)
			memcpy(a, keys, (size_t)n * KVS_KEY_SIZE);
		sqe->req_id = req_id;
		sqe->flags = (uint8_t)flags;
		pend_of(c, sqe)->cluster = (flags & KVS_QUERY_CLUSTER) != 0;
	}
	return r;
}

int kvs_prep_query_fetch(struct kvs_client *c, struct kvs_sqe *sqe, const void *keys, uint32_t n,
			 uint64_t req_id, uint32_t flags, const char *hint, uint64_t user_data)
{
	size_t hlen = hint ? strlen(hint) : 0;
	/* The hint's string with its NUL, zero-padded to 8s (abi.h). */
	uint64_t pad = hint ? (hlen + 1 + 7) / 8 * 8 : 0;
	uint8_t *a = NULL;
	int r;

	if ((flags & ~(uint32_t)(KVS_QUERY_NOLEASE | KVS_QUERY_DRAM)) ||
	    (hint && (hlen == 0 || pad > KVS_FETCH_HINT_MAX))) {
		client_log(c, KVS_LOG_ERR,
			   "kvs_prep_query_fetch: flags other than NOLEASE and DRAM, or a node hint "
			   "empty or longer than %u bytes",
			   KVS_FETCH_HINT_MAX - 1);
		return prep_fail(c, sqe, -EINVAL);
	}
	if (c->info.daemon_rev_minor < 3) {
		client_log(c, KVS_LOG_ERR, "kvstashd speaks wire minor %u, a fetch needs 3",
			   c->info.daemon_rev_minor);
		return prep_fail(c, sqe, -EOPNOTSUPP);
	}
	r = prep(c, sqe, KVS_OP_QUERY, n, user_data, (uint64_t)n * KVS_QUERY_ARG_SIZE + pad,
		 (void **)&a);
	if (r == 0) {
		if (a) {
			memcpy(a, keys, (size_t)n * KVS_KEY_SIZE);
			if (hint) {
				memset(a + (size_t)n * KVS_KEY_SIZE, 0, pad);
				memcpy(a + (size_t)n * KVS_KEY_SIZE, hint, hlen);
			}
		}
		sqe->req_id = req_id;
		sqe->flags = (uint8_t)(flags | KVS_QUERY_FETCH);
	}
	return r;
}

int kvs_prep_load(struct kvs_client *c, struct kvs_sqe *sqe, uint64_t lease,
		  const uint32_t *block_ids, uint32_t n, uint32_t layer_begin, uint32_t layer_count,
		  uint64_t user_data)
{
	uint8_t *a = NULL;
	int r = prep(c, sqe, KVS_OP_LOAD, n, user_data, (uint64_t)n * KVS_LOAD_ARG_SIZE,
		     (void **)&a);

	if (r == 0) {
		if (a)
			memcpy(a, block_ids, (size_t)n * 4);
		sqe->lease = lease;
		sqe->layer_begin = layer_begin;
		sqe->layer_count = layer_count;
	}
	return r;
}

/* Arm a fence for the SQE just prepared, or give the SQE back. */
static int prep_fence(struct kvs_client *c, struct kvs_sqe *sqe, int kind, uint32_t count,
		      struct kvs_fence_ref *ret)
{
	struct kvs_fence_ref f;
	int r = client_fence_arm(c, kind, count, &f);

	if (r < 0)
		return prep_fail(c, sqe, r);
	sqe->flags |= kind == FENCE_SAVE ? KVS_SAVE_AFTER : KVS_LOAD_PROGRESS;
	sqe->fence_slot = f.slot;
	sqe->fence_value = kind == FENCE_SAVE ? f.base + count : f.base;
	pend_of(c, sqe)->fence = (int32_t)f.slot;
	*ret = f;
	return 0;
}

int kvs_prep_save_after(struct kvs_client *c, struct kvs_sqe *sqe, const void *keys,
			const uint32_t *block_ids, uint32_t n, struct kvs_fence_ref *ret_fence,
			uint64_t user_data)
{
	int r = kvs_prep_save(c, sqe, keys, block_ids, n, user_data);

	return r < 0 ? r : prep_fence(c, sqe, FENCE_SAVE, 1, ret_fence);
}

int kvs_prep_save_stream(struct kvs_client *c, struct kvs_sqe *sqe, const void *keys,
			 const uint32_t *block_ids, uint32_t n, void *stream, uint64_t user_data)
{
	struct kvs_fence_ref f;
	int r = kvs_prep_save_after(c, sqe, keys, block_ids, n, &f, user_data);

	if (r == 0) {
		r = kvs_fence_signal(c, &f, stream);
		if (r < 0) {
			/*
			 * Nothing could be enqueued: the SAVE would only time out.
			 * The value it would have had is written here, so the slot
			 * is not kept waiting for a signal that never comes.
			 */
			kvs_fence_signal_host(c, &f);
			client_fence_end(c, (int32_t)f.slot, r);
			prep_fail(c, sqe, r);
		}
	}
	return r;
}

int kvs_prep_load_progress(struct kvs_client *c, struct kvs_sqe *sqe, uint64_t lease,
			   const uint32_t *block_ids, uint32_t n, uint32_t layer_begin,
			   uint32_t layer_count, struct kvs_fence_ref *ret_fence,
			   uint64_t user_data)
{
	unsigned layers = client_registered_layers(c);
	int r;

	/* The end value is base + layer_count: kvstashd must be told the count itself. */
	if (layer_count == 0)
		layer_count = layer_begin < layers ? layers - layer_begin : 0;
	if (layer_count == 0)
		return prep_fail(c, sqe, -EINVAL);
	r = kvs_prep_load(c, sqe, lease, block_ids, n, layer_begin, layer_count, user_data);
	return r < 0 ? r : prep_fence(c, sqe, FENCE_LOAD, layer_count, ret_fence);
}

int kvs_prep_release(struct kvs_client *c, struct kvs_sqe *sqe, uint64_t lease,
		     uint64_t user_data)
{
	int r = prep(c, sqe, KVS_OP_RELEASE, 0, user_data, 0, NULL);

	if (r == 0)
		sqe->lease = lease;
	return r;
}

int kvs_prep_flush(struct kvs_client *c, struct kvs_sqe *sqe, uint32_t flags, uint64_t user_data)
{
	int r = prep(c, sqe, KVS_OP_FLUSH, 0, user_data, 0, NULL);

	if (r == 0)
		sqe->flags = (uint8_t)flags;
	return r;
}

int kvs_submit(struct kvs_client *c)
{
	uint32_t n = c->sq_reserved, mask = c->info.sq_entries - 1;
	uint64_t bound = c->arg_tail;

	if (n == 0)
		return 0;
	c->sq_reserved = 0;
	if (c->dead) {
		for (uint32_t i = 0; i < n; i++)
			client_complete_reset(c, c->resv[i].slot);
		return (int)n;
	}
	/*
	 * The one writer of arg_end: once kvstashd consumed SQE k, every
	 * argument byte below the first of the SQEs after it is free.  The
	 * preps may have placed their arguments in any order; later ones go
	 * above arg_tail.  Indexed by our own count of SQEs (sq_tail), not the
	 * ring's index, which started wherever kvstashd's region said.
	 */
	for (uint32_t k = n; k-- > 0;) {
		c->arg_end[(c->sq_tail + k) & mask] = bound;
		if (c->resv[k].args && c->resv[k].arg_start < bound)
			bound = c->resv[k].arg_start;
	}
	for (uint32_t i = 0; i < n; i++)
		c->pend[c->resv[i].slot].state = PEND_SUBMITTED;
	/* One store-release of the tail for the batch; a futex wake only if the worker sleeps. */
	shmq_prod_commit(&c->sq, 0);
	c->sq_tail += n;
	return (int)n;
}
