/* SPDX-License-Identifier: MIT */
/*
 * fuzz-sqe: an SQE, a session's limits and an argument area through
 * sqe_decode(), as handle_sqe() calls it.
 *
 * Input: bytes 0-63 are the SQE; bytes 64-79 the limits: role (byte 64:
 * even a worker, odd a scheduler), max_keys (bytes 66-67, plus one),
 * num_blocks (68-71; 0: nothing registered), nr_layers (72-73, mod 512,
 * plus one when registered), fence slots (byte 65: odd KVS_FENCE_SLOTS,
 * even none); the rest is the argument area, of exactly
 * its length, so ASan sees any read outside it.  The copy goes to a
 * buffer the size of the worker's scratch (sqe_arg_bytes(SAVE, max_keys)
 * + KVS_FETCH_HINT_MAX), its slack poisoned.
 *
 * An accepted SQE must have every field its opcode does not use zero (the
 * fence fields but for SAVE AFTER and LOAD PROGRESS, whose slot must be
 * one of the session's and whose LOAD names its layer count), a
 * count within max_keys, its arguments inside the area and copied
 * unchanged, every block id below num_blocks, a layer range inside the
 * layout, and a fetching QUERY's node hint (only with KVS_QUERY_FETCH,
 * never with KVS_QUERY_CLUSTER) a non-empty string in the copy right after
 * the keys, zero-padded to its 8-byte length; a refused one an -errno that
 * abi.h lists.
 */
#include <errno.h>

#include <kvstash/wire.h>

#include "wire/sqe.h"
#include "fuzz.h"

#define PREFIX	     80u
#define MAX_KEYS_MAX 65536u

static uint8_t scratch[MAX_KEYS_MAX * (KVS_KEY_SIZE + 4) + 64] __attribute__((aligned(64)));

static bool has_args(uint8_t op)
{
	return op == KVS_OP_SAVE || op == KVS_OP_QUERY || op == KVS_OP_LOAD;
}

static void check_accepted(const struct kvs_sqe *sqe, const uint8_t *area, uint64_t area_size,
			   const struct sqe_limits *lim, const uint8_t *copy,
			   const struct sqe_args *a)
{
	uint8_t op = sqe->opcode;
	uint64_t bytes = sqe_arg_bytes(op, sqe->count), hint = 0;

	FUZZ_CHECK(op <= KVS_OP_LAST, "opcode %u", op);
	FUZZ_CHECK(!sqe->resv0 && !sqe->resv2, "reserved fields");
	FUZZ_CHECK(sqe_fenced(sqe) ? sqe->fence_slot < lim->nr_fences && a->fenced &&
					     a->fence_slot == sqe->fence_slot &&
					     a->fence_value == sqe->fence_value :
				     !sqe->fence_slot && !sqe->fence_value && !a->fenced,
		   "fence fields");
	FUZZ_CHECK(!(op == KVS_OP_LOAD && (sqe->flags & KVS_LOAD_PROGRESS)) || sqe->layer_count,
		   "LOAD PROGRESS of every layer by 0");
	FUZZ_CHECK(lim->role != KVS_ROLE_SCHEDULER || (op != KVS_OP_SAVE && op != KVS_OP_LOAD),
		   "scheduler op %u", op);
	FUZZ_CHECK(op == KVS_OP_LOAD || op == KVS_OP_RELEASE ? sqe->lease != 0 : sqe->lease == 0,
		   "lease field");
	FUZZ_CHECK(op == KVS_OP_QUERY || sqe->req_id == 0, "req_id");
	FUZZ_CHECK(
		(op == KVS_OP_QUERY &&
		 !(sqe->flags &
		   ~(KVS_QUERY_NOLEASE | KVS_QUERY_CLUSTER | KVS_QUERY_DRAM | KVS_QUERY_FETCH)) &&
		 (sqe->flags & (KVS_QUERY_CLUSTER | KVS_QUERY_FETCH)) !=
			 (KVS_QUERY_CLUSTER | KVS_QUERY_FETCH)) ||
			(op == KVS_OP_FLUSH &&
			 !(sqe->flags & ~(KVS_FLUSH_INSTANCE | KVS_FLUSH_CLUSTER))) ||
			(op == KVS_OP_SAVE && sqe->flags == KVS_SAVE_AFTER) ||
			(op == KVS_OP_LOAD && sqe->flags == KVS_LOAD_PROGRESS) || sqe->flags == 0,
		"flags 0x%x for op %u", sqe->flags, op);
	if (!has_args(op)) {
		FUZZ_CHECK(!sqe->count && !sqe->arg_off && !sqe->arg_len, "arguments on op %u", op);
		return;
	}
	FUZZ_CHECK(a->n == sqe->count && a->n >= 1 && a->n <= lim->max_keys, "count %u", a->n);
	if (a->hint) {
		size_t len;

		FUZZ_CHECK(op == KVS_OP_QUERY && (sqe->flags & KVS_QUERY_FETCH), "a hint on op %u", op);
		FUZZ_CHECK((const uint8_t *)a->hint == copy + bytes, "the hint is not after the keys");
		hint = sqe->arg_len - bytes;
		FUZZ_CHECK(sqe->arg_len > bytes && hint % 8 == 0 && hint <= KVS_FETCH_HINT_MAX,
			   "a hint of %llu bytes", (unsigned long long)hint);
		len = strnlen(a->hint, hint);
		FUZZ_CHECK(len >= 1 && len < hint, "hint length %zu of %llu", len,
			   (unsigned long long)hint);
		for (size_t i = len; i < hint; i++)
			FUZZ_CHECK(a->hint[i] == 0, "bytes after the hint's NUL");
	}
	bytes += hint;
	FUZZ_CHECK(sqe->arg_len == bytes && (uint64_t)sqe->arg_off + bytes <= area_size,
		   "arguments [%u, +%llu) outside an area of %llu", sqe->arg_off,
		   (unsigned long long)bytes, (unsigned long long)area_size);
	FUZZ_CHECK(memcmp(copy, area + sqe->arg_off, bytes) == 0, "copy differs");
	if (op == KVS_OP_SAVE || op == KVS_OP_QUERY)
		FUZZ_CHECK(a->keys == copy, "keys not in the copy");
	if (op == KVS_OP_SAVE || op == KVS_OP_LOAD) {
		const uint8_t *ids = (const uint8_t *)a->block_ids;

		FUZZ_CHECK(lim->num_blocks > 0, "op %u without a registration", op);
		FUZZ_CHECK(ids >= copy && ids + (size_t)a->n * 4 <= copy + bytes, "ids outside");
		for (uint32_t i = 0; i < a->n; i++)
			FUZZ_CHECK(a->block_ids[i] < lim->num_blocks, "block id %u of %u",
				   a->block_ids[i], lim->num_blocks);
	}
	if (op == KVS_OP_LOAD)
		FUZZ_CHECK(a->layer_count >= 1 && a->layer_begin < lim->nr_layers &&
				   (uint64_t)a->layer_begin + a->layer_count <= lim->nr_layers,
			   "layers %u+%u of %u", a->layer_begin, a->layer_count, lim->nr_layers);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int errs[] = { -EINVAL, -EFAULT, -ERANGE,	      -E2BIG, -EOPNOTSUPP,
				    -EPERM,  -ENOENT, -KVS_EUNSEALED, 0 };
	struct sqe_limits lim;
	struct sqe_args a;
	struct kvs_sqe sqe;
	uint64_t area_size, scratch_size;
	uint8_t *area;
	bool known = false;
	int r;

	if (size < PREFIX)
		return 0;
	memcpy(&sqe, data, sizeof(sqe));
	lim.role = data[64] % 2 ? KVS_ROLE_SCHEDULER : KVS_ROLE_WORKER;
	lim.max_keys = (uint32_t)(data[66] | data[67] << 8) + 1;
	lim.num_blocks = fuzz_u32(data + 68);
	lim.nr_layers = lim.num_blocks ? (uint32_t)(data[72] | data[73] << 8) % 512 + 1 : 0;
	lim.nr_fences = data[65] % 2 ? KVS_FENCE_SLOTS : 0;
	area_size = size - PREFIX;
	area = fuzz_dup(data + PREFIX, area_size);

	/* worker_start(): the scratch a worker copies arguments into. */
	scratch_size = sqe_arg_bytes(KVS_OP_SAVE, lim.max_keys) + KVS_FETCH_HINT_MAX;
	FUZZ_POISON(scratch + scratch_size, sizeof(scratch) - scratch_size);
	r = sqe_decode(&sqe, area, area_size, &lim, scratch, &a);
	if (r == 0) {
		check_accepted(&sqe, area, area_size, &lim, scratch, &a);
	} else {
		for (const int *e = errs; *e; e++)
			known |= r == *e;
		FUZZ_CHECK(known, "undocumented error %d", r);
	}
	FUZZ_UNPOISON(scratch, sizeof(scratch));
	free(area);
	return 0;
}
