/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <kvstash/wire.h>

#include "wire/sqe.h"

bool sqe_fenced(const struct kvs_sqe *sqe)
{
	return (sqe->opcode == KVS_OP_SAVE && (sqe->flags & KVS_SAVE_AFTER)) ||
	       (sqe->opcode == KVS_OP_LOAD && (sqe->flags & KVS_LOAD_PROGRESS));
}

uint64_t sqe_arg_bytes(uint8_t opcode, uint32_t count)
{
	switch (opcode) {
	case KVS_OP_SAVE:
		return (uint64_t)count * KVS_SAVE_ARG_SIZE;
	case KVS_OP_QUERY:
		return (uint64_t)count * KVS_QUERY_ARG_SIZE;
	case KVS_OP_LOAD:
		return (uint64_t)count * KVS_LOAD_ARG_SIZE;
	default:
		return 0;
	}
}

static uint8_t allowed_flags(uint8_t opcode)
{
	switch (opcode) {
	case KVS_OP_QUERY:
		return KVS_QUERY_NOLEASE | KVS_QUERY_CLUSTER | KVS_QUERY_DRAM | KVS_QUERY_FETCH;
	case KVS_OP_FLUSH:
		return KVS_FLUSH_INSTANCE | KVS_FLUSH_CLUSTER;
	case KVS_OP_SAVE:
		return KVS_SAVE_AFTER;
	case KVS_OP_LOAD:
		return KVS_LOAD_PROGRESS;
	default:
		return 0;
	}
}

static int check_ids(const uint32_t *ids, uint32_t n, uint32_t num_blocks)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] >= num_blocks)
			return -ERANGE;
	return 0;
}

/* The fields of the SQE itself, for any opcode: what it may be, set and left zero. */
static int check_fields(const struct kvs_sqe *sqe, const struct sqe_limits *lim, bool has_args)
{
	uint8_t op = sqe->opcode;

	if (op > KVS_OP_LAST)
		return -EOPNOTSUPP;
	if (lim->role == KVS_ROLE_SCHEDULER && (op == KVS_OP_SAVE || op == KVS_OP_LOAD))
		return -EPERM;
	if (sqe->flags & ~allowed_flags(op))
		return -EINVAL;
	/* Fields an opcode does not use must be zero: they may mean something later. */
	if (sqe->resv0 || sqe->resv2)
		return -EINVAL;
	if (sqe_fenced(sqe) ? sqe->fence_slot >= lim->nr_fences :
			      sqe->fence_slot || sqe->fence_value)
		return -EINVAL;
	/* A LOAD's progress ends at fence_value + layer_count: the count is explicit. */
	if (op == KVS_OP_LOAD && (sqe->flags & KVS_LOAD_PROGRESS) && sqe->layer_count == 0)
		return -EINVAL;
	if (!has_args && (sqe->count || sqe->arg_off || sqe->arg_len))
		return -EINVAL;
	if (op != KVS_OP_LOAD && op != KVS_OP_RELEASE && sqe->lease)
		return -EINVAL;
	if (op != KVS_OP_QUERY && sqe->req_id)
		return -EINVAL;
	if (op != KVS_OP_LOAD && (sqe->layer_begin || sqe->layer_count))
		return -EINVAL;
	if ((op == KVS_OP_LOAD || op == KVS_OP_RELEASE) && sqe->lease == 0)
		return -ENOENT;
	return 0;
}

/*
 * The argument bytes of an SQE with arguments: its count within the
 * limit, its length what the count (and a fetch's node hint, whose
 * length goes into *@ret_hint) implies, inside the argument area.
 */
static int check_arg_bytes(const struct kvs_sqe *sqe, const struct sqe_limits *lim,
			   uint64_t area_size, uint64_t *ret_bytes, uint64_t *ret_hint)
{
	uint64_t bytes, end, hint = 0;

	if (sqe->count == 0)
		return -EINVAL;
	if (sqe->count > lim->max_keys)
		return -E2BIG;
	bytes = sqe_arg_bytes(sqe->opcode, sqe->count);
	if (sqe->opcode == KVS_OP_QUERY && (sqe->flags & KVS_QUERY_FETCH)) {
		/* The node hint after the keys: 0 bytes, or 8..KVS_FETCH_HINT_MAX in 8s. */
		hint = sqe->arg_len > bytes ? sqe->arg_len - bytes : 0;
		if ((sqe->flags & KVS_QUERY_CLUSTER) || hint % 8 || hint > KVS_FETCH_HINT_MAX)
			return -EINVAL;
		bytes += hint;
	}
	if (sqe->arg_len != bytes)
		return -EINVAL;
	if (__builtin_add_overflow((uint64_t)sqe->arg_off, bytes, &end) || end > area_size)
		return -EFAULT;
	*ret_bytes = bytes;
	*ret_hint = hint;
	return 0;
}

/* A LOAD's layer range: [layer_begin, +layer_count), 0 for "to the last", within the layout. */
static int load_layers(const struct kvs_sqe *sqe, const struct sqe_limits *lim,
		       struct sqe_args *a)
{
	uint64_t last;

	a->layer_begin = sqe->layer_begin;
	a->layer_count = sqe->layer_count ? sqe->layer_count : lim->nr_layers - sqe->layer_begin;
	if (sqe->layer_begin >= lim->nr_layers ||
	    __builtin_add_overflow((uint64_t)a->layer_begin, a->layer_count, &last) ||
	    last > lim->nr_layers || a->layer_count == 0)
		return -EINVAL;
	return 0;
}

/* A fetch's node hint, @len bytes in the copy: NUL-terminated, nothing after the NUL but zeros. */
static int check_hint(const char *h, uint64_t hint)
{
	size_t len = strnlen(h, hint);

	if (len == 0 || len == hint)
		return -EINVAL;
	for (size_t i = len; i < hint; i++)
		if (h[i])
			return -EINVAL;
	return 0;
}

int sqe_decode(const struct kvs_sqe *sqe, const uint8_t *area, uint64_t area_size,
	       const struct sqe_limits *lim, void *copy, struct sqe_args *ret)
{
	uint8_t op = sqe->opcode;
	bool has_args = op == KVS_OP_SAVE || op == KVS_OP_QUERY || op == KVS_OP_LOAD;
	uint64_t bytes, hint;
	struct sqe_args a = { 0 };
	int r;

	r = check_fields(sqe, lim, has_args);
	if (r < 0)
		return r;
	if (!has_args) {
		*ret = a;
		return 0;
	}
	r = check_arg_bytes(sqe, lim, area_size, &bytes, &hint);
	if (r < 0)
		return r;
	if ((op == KVS_OP_SAVE || op == KVS_OP_LOAD) && lim->num_blocks == 0)
		return -KVS_EUNSEALED;
	if (op == KVS_OP_LOAD && load_layers(sqe, lim, &a) < 0)
		return -EINVAL;

	/* The one read of the shared arguments; everything below uses the copy. */
	memcpy(copy, area + sqe->arg_off, bytes);
	a.n = sqe->count;
	a.fenced = sqe_fenced(sqe);
	a.fence_slot = sqe->fence_slot;
	a.fence_value = sqe->fence_value;
	switch (op) {
	case KVS_OP_SAVE:
		a.keys = copy;
		a.block_ids = (const uint32_t *)((const uint8_t *)copy + (size_t)a.n * KVS_KEY_SIZE);
		if (check_ids(a.block_ids, a.n, lim->num_blocks))
			return -ERANGE;
		break;
	case KVS_OP_QUERY:
		a.keys = copy;
		if (hint) {
			a.hint = (const char *)copy + (size_t)a.n * KVS_KEY_SIZE;
			if (check_hint(a.hint, hint) < 0)
				return -EINVAL;
		}
		break;
	case KVS_OP_LOAD:
		a.block_ids = copy;
		if (check_ids(a.block_ids, a.n, lim->num_blocks))
			return -ERANGE;
		break;
	}
	*ret = a;
	return 0;
}
