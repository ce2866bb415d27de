/* SPDX-License-Identifier: MIT */
/*
 * SQE validation and argument decoding: pure functions over a private
 * copy of the SQE and the shared argument area, so the fuzzers drive
 * exactly this code.  The arguments are copied out of shared memory once
 * and only the copy is validated: an engine changing them meanwhile can
 * only change what it asks for, never get past a check.
 */
#ifndef KVS_SQE_H
#define KVS_SQE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvstash/abi.h>

struct sqe_limits {
	uint32_t role;
	uint32_t max_keys;
	uint32_t num_blocks; /* 0: nothing registered */
	uint32_t nr_layers;
	uint32_t nr_fences;  /* slots in KVS_PART_FENCES; 0: the session has none */
};

struct sqe_args {
	const uint8_t *keys;	   /* in the copy */
	const uint32_t *block_ids; /* in the copy */
	uint32_t n;
	uint32_t layer_begin;
	uint32_t layer_count;	   /* resolved: never 0 for LOAD */
	const char *hint;	   /* QUERY with KVS_QUERY_FETCH: the node hint, NUL-terminated; or NULL */
	bool fenced;		   /* SAVE AFTER or LOAD PROGRESS: the fence fields below */
	uint32_t fence_slot;	   /* < sqe_limits.nr_fences */
	uint32_t fence_value;
};

/* Does @sqe name a fence slot (SAVE with KVS_SAVE_AFTER, LOAD with KVS_LOAD_PROGRESS)? */
bool sqe_fenced(const struct kvs_sqe *sqe);

/* Bytes of arguments an SQE with @opcode and @count carries. */
uint64_t sqe_arg_bytes(uint8_t opcode, uint32_t count);

/*
 * Validate @sqe for a session with @lim, copy its arguments from
 * @area[0, @area_size) into @copy (at least sqe_arg_bytes() bytes, 8-byte
 * aligned) and decode them.  Returns 0 or the CQE's -errno (abi.h).
 */
int sqe_decode(const struct kvs_sqe *sqe, const uint8_t *area, uint64_t area_size,
	       const struct sqe_limits *lim, void *copy, struct sqe_args *ret);

#endif /* KVS_SQE_H */
