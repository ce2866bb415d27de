/* SPDX-License-Identifier: MIT */
/*
 * QUERY: the local prefix over both tiers, pinned and leased
 * (query_local()); its cluster part, handed to the control thread with
 * the keys past the local hits; a fetching QUERY, whose keys go to the
 * peer glue and whose answer comes when the fetch is done
 * (query_fetch_answer()).  Worker thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "store/lease.h"
#include "obs/account.h"
#include "obs/log.h"
#include "io/op.h"
#include "io/post.h"
#include "io/query.h"
#include "wire/sqe.h"
#include "base/util.h"

/* A QUERY's op with its answer and room for @n keys; NULL without memory. */
static struct op *query_op_new(struct wsession *s, const struct kvs_sqe *sqe, uint32_t n)
{
	struct op *op = op_new(s, sqe, KVS_OP_QUERY);

	if (!op)
		return NULL;
	op->ans = calloc(1, sizeof(*op->ans));
	op->ckeys = malloc((size_t)n * KVS_KEY_SIZE);
	if (!op->ans || !op->ckeys) {
		op_free(op);
		return NULL;
	}
	return op;
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
	op = query_op_new(s, sqe, n);
	if (!op)
		return -ENOMEM;
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
 * fetches what follows from a peer (control/peer-host.c) and gives the op
 * back (query_fetch_answer()).  Nothing to fetch: a plain QUERY.
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
	op = query_op_new(s, sqe, a->n);
	if (!op) {
		post(w, s, sqe->user_data, -ENOMEM, 0, 0);
		return;
	}
	memcpy(op->tag, s->ns->tag, KVS_KEY_SIZE);
	memcpy(op->ckeys, a->keys, (size_t)a->n * KVS_KEY_SIZE);
	op->nckeys = a->n;
	op->hits0 = qr.hits;
	if (a->hint)
		strscpy_trunc(op->hint, a->hint, sizeof(op->hint));
	op_cluster_send(w, op);
}

/* A fetching QUERY is back: answer it over what is resident now. */
void query_fetch_answer(struct worker *w, struct op *op)
{
	uint64_t id, ttl;
	uint32_t cflags;
	int r = query_local(w, op->s, (const uint8_t *)op->ckeys, op->nckeys, op->flags, &id, &ttl,
			    &cflags);

	if (r >= 0 && (uint32_t)r < op->nckeys && op->fetch_err && log_enabled(LOG_DEBUG))
		slog_info_errno(op->s, op->fetch_err, "fetch: %d local, %d fetched, %d of %u hit",
				(int)op->hits0, (int)op->fetched, r, op->nckeys);
	post_flags(w, op->s, op->user_data, r, r < 0 ? 0 : id, r < 0 ? 0 : ttl, r < 0 ? 0 : cflags);
	op_free(op);
}

void query_start(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
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
		op_cluster_post(w, cop);
		return;
	}
	memcpy(cop->tag, s->ns->tag, KVS_KEY_SIZE);
	memcpy(cop->ckeys, a->keys + (size_t)r * KVS_KEY_SIZE,
	       (size_t)(a->n - (uint32_t)r) * KVS_KEY_SIZE);
	cop->nckeys = a->n - (uint32_t)r;
	op_cluster_send(w, cop);
}
