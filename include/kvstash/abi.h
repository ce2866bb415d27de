/* SPDX-License-Identifier: MIT */
/*
 * kvstash session-region ABI: the submission and completion entries that
 * engines and kvstashd exchange through libshmq rings, and the argument
 * formats they point at.
 *
 * A session region (created by kvstashd, sent to the engine in the HELLO
 * reply) is a libshmq region tagged KVS_REGION_MAGIC with three parts:
 *   KVS_PART_SQ    ring of struct kvs_sqe (64 bytes), engine -> kvstashd
 *   KVS_PART_CQ    ring of struct kvs_cqe (32 bytes), kvstashd -> engine;
 *                  twice the SQ's entries
 *   KVS_PART_ARGS  byte area the engine manages as a ring for the
 *                  variable-length arguments (keys, block ids) that SQEs
 *                  point at by offset
 *
 * kvstashd copies an SQE's arguments into private memory before it
 * releases the SQE (advances the SQ head), and validates only the copy.
 * So argument bytes may be reused by the engine as soon as the SQ head has
 * passed the SQE that referenced them.
 *
 * Fixed-width little-endian integers only; _Static_assert on every layout.
 */
#ifndef KVSTASH_ABI_H
#define KVSTASH_ABI_H

#include <stddef.h>
#include <stdint.h>

#define KVS_REGION_MAGIC 0x5453564bu /* "KVST" */
#define KVS_REGION_VERSION 1u

#define KVS_PART_SQ 1u
#define KVS_PART_CQ 2u
#define KVS_PART_ARGS 3u

#define KVS_KEY_SIZE 16
#define KVS_ARG_ALIGN 8u /* clients place each argument block 8-aligned */

/*
 * Argument bytes per key or block id: an SQE's arg_len is its count times
 * this (see the table below).  A SAVE carries its keys, then a u32 block id
 * for each.
 */
#define KVS_SAVE_ARG_SIZE  (KVS_KEY_SIZE + 4u)
#define KVS_QUERY_ARG_SIZE ((unsigned)KVS_KEY_SIZE)
#define KVS_LOAD_ARG_SIZE  4u

/* Opcodes (kvs_sqe.opcode). */
#define KVS_OP_NOP 0u
#define KVS_OP_SAVE 1u
#define KVS_OP_QUERY 2u
#define KVS_OP_LOAD 3u
#define KVS_OP_RELEASE 4u
#define KVS_OP_FLUSH 5u
#define KVS_OP_LAST KVS_OP_FLUSH

/* kvs_sqe.flags, per opcode; unknown bits are rejected with -EINVAL. */
#define KVS_QUERY_NOLEASE (1u << 0) /* count the prefix, pin nothing */
#define KVS_FLUSH_INSTANCE (1u << 0) /* every session of the instance */

/*
 * Submission queue entry, 64 bytes.
 *
 *   op       args (in the argument area)            other fields
 *   NOP      none                                    -
 *   SAVE     keys[count], then u32 block_ids[count]  -
 *   QUERY    keys[count]                             req_id, flags
 *   LOAD     u32 block_ids[count]                    lease, layer range
 *   RELEASE  none                                    lease
 *   FLUSH    none                                    flags
 *
 * A layer range is [layer_begin, layer_begin + layer_count); layer_count 0
 * means every layer.  Unused fields must be zero (-EINVAL otherwise), so
 * they can be given meaning later without breaking old engines.
 */
struct kvs_sqe {
	uint8_t opcode;
	uint8_t flags;
	uint16_t resv0;
	uint32_t count;	    /* keys / block ids in the arguments */
	uint64_t user_data; /* echoed in the CQE */
	uint32_t arg_off;   /* offset of the arguments in KVS_PART_ARGS */
	uint32_t arg_len;   /* bytes; must equal what count implies */
	uint64_t lease;	    /* LOAD, RELEASE */
	uint64_t req_id;    /* QUERY: the engine's request id (for logs/stats) */
	uint32_t layer_begin;
	uint32_t layer_count;
	uint64_t resv1;
	uint64_t resv2;
};

/*
 * Completion queue entry, 32 bytes.  res is -errno on failure.
 *
 *   op       res                       result0          result1
 *   NOP      0                         -                -
 *   SAVE     count (all blocks safe)   blocks stored    blocks skipped
 *                                                       (already resident)
 *   QUERY    hit count (prefix length) lease id (0: none) lease expiry,
 *                                                       ms from now
 *   LOAD     blocks loaded             bytes copied     -
 *   RELEASE  0                         -                -
 *   FLUSH    0                         -                -
 */
struct kvs_cqe {
	uint64_t user_data;
	int32_t res;
	uint32_t flags;
	uint64_t result0;
	uint64_t result1;
};

/* kvs_cqe.flags */
#define KVS_CQE_LOCAL (1u << 0) /* made by libkvstash, not kvstashd (e.g. -ECONNRESET) */

/*
 * Errors a CQE can carry (see kvstash(7)):
 *   -EINVAL      malformed SQE: bad flags, non-zero reserved field, arg_len
 *                not matching count, layer range outside the layout
 *   -EFAULT      arguments outside the argument area
 *   -ERANGE      a block id >= the layout's num_blocks
 *   -E2BIG       count above the session's max_keys limit
 *   -EOPNOTSUPP  unknown opcode
 *   -EPERM       operation not allowed for the session's role
 *   -KVS_EUNSEALED  no registration yet, or the instance is not sealed
 *   -ENOENT      unknown, expired or fully consumed lease
 *   -EALREADY    this rank already loaded from the lease
 *   -EACCES      the lease belongs to another instance
 *   -ENOSPC      the pool is full of blocks that cannot be evicted
 *   -EDQUOT      SAVE: the instance holds its share of the pool in blocks
 *                not yet sealed ([pool] unsealed_share); QUERY: a lease
 *                memory bound (of the instance, its uid, or all leases)
 *   -EBUSY       lease limit of the instance reached
 *   -EIO         a copy failed
 *   -ECANCELED   the session is shutting down
 *   -ECONNRESET  (KVS_CQE_LOCAL) kvstashd went away
 */
#define KVS_EUNSEALED EUNATCH

_Static_assert(sizeof(struct kvs_sqe) == 64, "kvs_sqe is 64 bytes");
_Static_assert(offsetof(struct kvs_sqe, count) == 4, "kvs_sqe.count");
_Static_assert(offsetof(struct kvs_sqe, user_data) == 8, "kvs_sqe.user_data");
_Static_assert(offsetof(struct kvs_sqe, arg_off) == 16, "kvs_sqe.arg_off");
_Static_assert(offsetof(struct kvs_sqe, lease) == 24, "kvs_sqe.lease");
_Static_assert(offsetof(struct kvs_sqe, req_id) == 32, "kvs_sqe.req_id");
_Static_assert(offsetof(struct kvs_sqe, layer_begin) == 40, "kvs_sqe.layer_begin");
_Static_assert(offsetof(struct kvs_sqe, resv1) == 48, "kvs_sqe.resv1");
_Static_assert(sizeof(struct kvs_cqe) == 32, "kvs_cqe is 32 bytes");
_Static_assert(offsetof(struct kvs_cqe, res) == 8, "kvs_cqe.res");
_Static_assert(offsetof(struct kvs_cqe, result0) == 16, "kvs_cqe.result0");

#endif /* KVSTASH_ABI_H */
