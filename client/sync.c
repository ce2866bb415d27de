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

/* Submit the SQE just prepared (tag @tag) and wait for its CQE into @ret. */
static int run(struct kvs_client *c, uint64_t tag, int timeout_ms, struct kvs_cqe *ret)
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
#define SYNC_OP(c, timeout, cqe, prep_call)              \
	do {                                             \
		struct kvs_sqe *sqe;                     \
		uint64_t _tag;                           \
		int _r;                                  \
		if ((c)->cur)                            \
			return -EBUSY;                   \
		sqe = kvs_get_sqe(c);                    \
		if (!sqe)                                \
			return -EBUSY;                   \
		/* Not sqe->user_data: shared memory. */ \
		_tag = client_last_tag(c);               \
		_r = (prep_call);                        \
		if (_r < 0)                              \
			return _r;                       \
		_r = run((c), _tag, (timeout), (cqe));   \
		if (_r < 0)                              \
			return _r;                       \
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
