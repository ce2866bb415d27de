/* SPDX-License-Identifier: MIT */
/*
 * Blocking helpers: submit one operation and wait for its own completion,
 * keeping any other completion that arrives meanwhile, in order, for later
 * peeks.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "client.h"

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Submit the SQE just prepared (tag @tag) and wait for its CQE into @ret,
 * and its cluster answer into *@ret_ans when it has one (*@ret_has set;
 * @ret_ans may be NULL when the operation cannot have one).  Answers of
 * the other completions stay with them (client_defer()).
 */
static int run(struct kvs_client *c, uint64_t tag, int timeout_ms, struct kvs_cqe *ret,
	       struct kvs_cluster_answer *ret_ans, bool *ret_has)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : mono_ns() + (uint64_t)timeout_ms * 1000000;
	struct local_cqe l, *others = NULL;
	uint32_t nothers = 0, cap = 0;
	int r = -ETIMEDOUT;

	kvs_submit(c);
	for (;;) {
		uint64_t now;

		while (client_reap(c, &l) == 0) {
			if (l.tag == tag) {
				*ret = l.cqe;
				if (l.ans != ANS_NONE && ret_ans) {
					*ret_ans = c->ans[l.ans];
					*ret_has = true;
				}
				client_ans_put(c, l.ans);
				r = 0;
				goto out;
			}
			if (nothers == cap) {
				struct local_cqe *o = realloc(others, (cap = cap ? 2 * cap : 8) * sizeof(*o));

				if (!o) {
					client_defer(c, &l); /* keep it; give up waiting */
					r = -ENOMEM;
					goto out;
				}
				others = o;
			}
			others[nothers++] = l;
		}
		if (c->dead) {
			r = -ECONNRESET; /* ours was completed locally above, or never will be */
			goto out;
		}
		now = mono_ns();
		if (now >= deadline)
			goto out;
		client_wait(c, deadline - now > 1000000000ull ? 1000000000ll : (int64_t)(deadline - now));
	}
out:
	/* The queue was drained above: putting the others back keeps their order. */
	for (uint32_t i = 0; i < nothers; i++)
		client_defer(c, &others[i]);
	free(others);
	return r;
}

/* Take an SQE, prepare it with @prep_call, run it. */
#define SYNC_OP(c, timeout, cqe, prep_call) SYNC_OP_ANS(c, timeout, cqe, prep_call, NULL, NULL)

/* The same, the cluster answer of its CQE into *@ans (*@has set) if it has one. */
#define SYNC_OP_ANS(c, timeout, cqe, prep_call, ans, has)            \
	do {                                                         \
		struct kvs_sqe *sqe;                                 \
		uint64_t _tag;                                       \
		int _r;                                              \
		if ((c)->cur)                                        \
			return -EBUSY;                               \
		sqe = kvs_get_sqe(c);                                \
		if (!sqe)                                            \
			return -EBUSY;                               \
		/* Not sqe->user_data: shared memory. */             \
		_tag = client_last_tag(c);                           \
		_r = (prep_call);                                    \
		if (_r < 0)                                          \
			return _r;                                   \
		_r = run((c), _tag, (timeout), (cqe), (ans), (has)); \
		if (_r < 0)                                          \
			return _r;                                   \
	} while (0)

int kvs_nop_sync(struct kvs_client *c, int timeout_ms)
{
	struct kvs_cqe cqe;

	SYNC_OP(c, timeout_ms, &cqe, kvs_prep_nop(c, sqe, 0));
	return cqe.res;
}

int kvs_save_sync(struct kvs_client *c, const void *keys, const uint32_t *block_ids, uint32_t n,
		  int timeout_ms, uint64_t *ret_stored, uint64_t *ret_skipped)
{
	struct kvs_cqe cqe;

	SYNC_OP(c, timeout_ms, &cqe, kvs_prep_save(c, sqe, keys, block_ids, n, 0));
	if (cqe.res >= 0 || cqe.res == -ENOSPC) {
		if (ret_stored)
			*ret_stored = cqe.result0;
		if (ret_skipped)
			*ret_skipped = cqe.result1;
	}
	return cqe.res;
}

int kvs_query_sync(struct kvs_client *c, const void *keys, uint32_t n, uint64_t req_id,
		   uint32_t flags, int timeout_ms, uint64_t *ret_lease)
{
	struct kvs_cqe cqe;

	SYNC_OP(c, timeout_ms, &cqe, kvs_prep_query(c, sqe, keys, n, req_id, flags, 0));
	if (cqe.res >= 0 && ret_lease)
		*ret_lease = cqe.result0;
	return cqe.res;
}

int kvs_load_sync(struct kvs_client *c, uint64_t lease, const uint32_t *block_ids, uint32_t n,
		  uint32_t layer_begin, uint32_t layer_count, int timeout_ms)
{
	struct kvs_cqe cqe;

	SYNC_OP(c, timeout_ms, &cqe,
		kvs_prep_load(c, sqe, lease, block_ids, n, layer_begin, layer_count, 0));
	return cqe.res;
}

int kvs_release_sync(struct kvs_client *c, uint64_t lease, int timeout_ms)
{
	struct kvs_cqe cqe;

	SYNC_OP(c, timeout_ms, &cqe, kvs_prep_release(c, sqe, lease, 0));
	return cqe.res;
}

int kvs_flush_sync(struct kvs_client *c, uint32_t flags, int timeout_ms)
{
	struct kvs_cqe cqe;

	SYNC_OP(c, timeout_ms, &cqe, kvs_prep_flush(c, sqe, flags, 0));
	return cqe.res;
}

int kvs_query_cluster_sync(struct kvs_client *c, const void *keys, uint32_t n, uint64_t req_id,
			   uint32_t flags, int timeout_ms, uint64_t *ret_lease,
			   struct kvs_cluster_answer *ret_answer)
{
	struct kvs_cluster_answer ans;
	struct kvs_cqe cqe;
	bool has = false;

	SYNC_OP_ANS(c, timeout_ms, &cqe,
		    kvs_prep_query(c, sqe, keys, n, req_id, flags | KVS_QUERY_CLUSTER, 0), &ans,
		    &has);
	/* The answer was checked with the CQE: a successful one always has it. */
	if (cqe.res >= 0 && has) {
		if (ret_lease)
			*ret_lease = cqe.result0;
		if (ret_answer)
			*ret_answer = ans;
	}
	return cqe.res;
}

int kvs_query_fetch_sync(struct kvs_client *c, const void *keys, uint32_t n, uint64_t req_id,
			 uint32_t flags, const char *hint, int timeout_ms, uint64_t *ret_lease)
{
	struct kvs_cqe cqe;

	SYNC_OP(c, timeout_ms, &cqe,
		kvs_prep_query_fetch(c, sqe, keys, n, req_id, flags, hint, 0));
	if (cqe.res >= 0 && ret_lease)
		*ret_lease = cqe.result0;
	return cqe.res;
}

int kvs_flush_cluster_sync(struct kvs_client *c, uint32_t flags, int timeout_ms,
			   uint64_t *ret_registered, uint64_t *ret_dropped)
{
	struct kvs_cqe cqe;

	SYNC_OP(c, timeout_ms, &cqe, kvs_prep_flush(c, sqe, flags | KVS_FLUSH_CLUSTER, 0));
	if (cqe.res >= 0 || cqe.res == -ETIMEDOUT) {
		if (ret_registered)
			*ret_registered = cqe.result0;
		if (ret_dropped)
			*ret_dropped = cqe.result1;
	}
	return cqe.res;
}
