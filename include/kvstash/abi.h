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
 *   KVS_PART_CLUSTER  (wire minor 1, only when the HELLO asked for it with
 *                  KVS_HELLO_CLUSTER) an array of struct kvs_cluster_answer,
 *                  one per CQ entry: the cluster part of the QUERY whose
 *                  CQE sits at the same ring index (KVS_CQE_CLUSTER)
 *   KVS_PART_FENCES  (wire minor 4, only when the HELLO asked for it with
 *                  KVS_HELLO_FENCES) KVS_FENCE_SLOTS struct kvs_fence, the
 *                  words through which a SAVE waits for an engine's CUDA
 *                  stream and a LOAD tells one how far it got (below)
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
#define KVS_PART_CLUSTER 4u
#define KVS_PART_FENCES 5u

#define KVS_KEY_SIZE 16
#define KVS_ARG_ALIGN 8u /* clients place each argument block 8-aligned */
/*
 * A block's slot in kvstashd's pool (and so a shard a peer serves, as
 * kvspeer_kvstash_ns() tells an embedder) is its bytes rounded up to
 * this: O_DIRECT-ready for the SSD tier.
 */
#define KVS_SLOT_ALIGN 512u

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
/*
 * Also ask the cluster registry which other node holds the longest run of
 * the keys after the local hits (wire minor 1; a session that said
 * KVS_HELLO_CLUSTER; -EOPNOTSUPP when kvstashd has no [cluster]).
 */
#define KVS_QUERY_CLUSTER (1u << 1)
/*
 * Hits in kvstashd's DRAM only: none that must be read back from its SSD
 * tier first (wire minor 2; without [ssd] every hit is in DRAM anyway).
 */
#define KVS_QUERY_DRAM	   (1u << 2)
/*
 * Fetch what is missing locally from another node before answering (wire
 * minor 3; -EOPNOTSUPP when kvstashd has no peer service): the keys after
 * the local hits are pulled from the node the argument area names (a node
 * hint, below) or, without one, from the node the cluster registry says
 * holds the longest run of them.  The CQE comes once the fetch ended
 * (within [cluster] fetch_timeout), as a local QUERY's over the blocks
 * that are then resident: a shorter prefix when the peer is gone, slow
 * or holds fewer.  Not with KVS_QUERY_CLUSTER (-EINVAL).
 */
#define KVS_QUERY_FETCH	   (1u << 3)
/*
 * A fetching QUERY's node hint: after its keys, an "ADDR:PORT" string
 * (the peer's [cluster] peer_listen), NUL-terminated and zero-padded to a
 * multiple of 8 bytes, at most this many; arg_len counts it.
 */
#define KVS_FETCH_HINT_MAX 64u
/*
 * A SAVE that waits for its fence (wire minor 4; a session that said
 * KVS_HELLO_FENCES): kvstashd copies nothing before the value of fence
 * slot fence_slot reached fence_value (a cyclic comparison, as
 * cuStreamWaitValue32's GEQ), which the engine's stream writes once the
 * KV is in memory.  kvstashd watches the word from the host and never
 * makes a GPU stream of its own wait on memory an engine can write; a
 * SAVE whose value does not come within [worker] save_wait_ms completes
 * with -ETIMEDOUT, copying nothing.
 */
#define KVS_SAVE_AFTER (1u << 0)
/*
 * A LOAD that publishes its progress (wire minor 4; KVS_HELLO_FENCES):
 * fence slot fence_slot gets blocks (how many it copies), then value
 * fence_value + 1 + i once layer layer_begin + i is in GPU memory for
 * every block, in layer order, from kvstashd's copy stream; at its end,
 * failed or not, status (0 or -errno) and value fence_value + layer_count,
 * which releases every wait.  layer_count must be explicit (not 0).
 */
#define KVS_LOAD_PROGRESS (1u << 0)
#define KVS_FLUSH_INSTANCE (1u << 0) /* every session of the instance */
/*
 * And every registry change (insert, remove) enqueued before the barrier
 * delivered to the registry, or dropped after a failed attempt (wire
 * minor 1; -EOPNOTSUPP when kvstashd has no [cluster]).
 */
#define KVS_FLUSH_CLUSTER (1u << 1)

/*
 * Submission queue entry, 64 bytes.
 *
 *   op       args (in the argument area)            other fields
 *   NOP      none                                    -
 *   SAVE     keys[count], then u32 block_ids[count]  flags (AFTER: fence)
 *   QUERY    keys[count] (FETCH: then a node hint)   req_id, flags
 *   LOAD     u32 block_ids[count]                    lease, layer range,
 *                                                    flags (PROGRESS: fence)
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
	uint32_t fence_slot;  /* KVS_SAVE_AFTER, KVS_LOAD_PROGRESS: index into KVS_PART_FENCES */
	uint32_t fence_value; /* SAVE: the value to wait for; LOAD: the value before its first layer */
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
 *            (both tiers; flags: how                    ms from now
 *            many still being read,
 *            KVS_CQE_PENDING)
 *   LOAD     blocks loaded (fewer      bytes copied     -
 *            when a read from SSD
 *            failed: the prefix before)
 *   RELEASE  0                         -                -
 *   FLUSH    0                         -                -
 *   FLUSH    0, -ETIMEDOUT (deadline), changes          changes dropped
 *   +CLUSTER -ESHUTDOWN                registered       (overflow, registry
 *                                                       unreachable, failed)
 *
 * A cluster FLUSH's counts are of this session's registrations (its
 * blocks that SAVE or a fetch sealed; with KVS_FLUSH_INSTANCE the
 * instance's) before the barrier, since its previous cluster FLUSH (the
 * instance's previous one): no other session's.  -EAGAIN: the registry's
 * queue is full even for the barrier (try again).  A cluster QUERY's CQE is a QUERY's, with KVS_CQE_CLUSTER set;
 * its cluster part is the struct kvs_cluster_answer at the CQE's ring
 * index in KVS_PART_CLUSTER, written before the CQE is published.
 */
struct kvs_cqe {
	uint64_t user_data;
	int32_t res;
	uint32_t flags;
	uint64_t result0;
	uint64_t result1;
};

/*
 * A fence slot (KVS_PART_FENCES), 16 bytes, shared by the engine (and its
 * GPU, through a host registration) and kvstashd (and its copy stream).
 * value is what CUDA streams wait on (cuStreamWaitValue32, GEQ) and write
 * (cuStreamWriteValue32).  A slot serves one operation at a time; the
 * library arms it (value = the previous operation's last value, status
 * and blocks 0) and the operation's values follow it, so a late write
 * of an earlier operation can never satisfy a later one.  Who writes:
 *   SAVE AFTER     the engine's stream: value (kvstashd only reads it)
 *   LOAD PROGRESS  kvstashd: blocks before its copies, value per layer
 *                  from its copy stream, status then the last value at
 *                  the end (from the host, after its copies ended); and
 *                  libkvstash when kvstashd dies (status -ECONNRESET).
 * status and blocks are written before the value that publishes them
 * (store-release from the host; stream order on the GPU).
 */
struct kvs_fence {
	uint32_t value;
	int32_t status;	 /* LOAD: 0, or -errno once it failed (the CQE says the same) */
	uint32_t blocks; /* LOAD: blocks it copies: n, or the prefix before an SSD read failed */
	uint32_t resv;
};

#define KVS_FENCE_SLOTS 4096u /* slots in KVS_PART_FENCES */

/* kvs_cqe.flags */
#define KVS_CQE_LOCAL (1u << 0) /* made by libkvstash, not kvstashd (e.g. -ECONNRESET) */
#define KVS_CQE_CLUSTER (1u << 1) /* a cluster QUERY's: its answer is in KVS_PART_CLUSTER */
/*
 * A QUERY's flags, bits 8-31 (wire minor 2): how many of its hits are
 * still being read from kvstashd's SSD tier into DRAM.  A LOAD of them
 * waits for those reads (and is shorter if one fails); 0 without [ssd].
 */
#define KVS_CQE_PENDING_SHIFT  8u
#define KVS_CQE_PENDING_MAX    0xffffffu
#define KVS_CQE_PENDING(flags) ((uint32_t)(flags) >> KVS_CQE_PENDING_SHIFT)

#define KVS_CLUSTER_NAME_MAX 64u  /* node names, NUL included */
#define KVS_CLUSTER_ADDR_MAX 128u /* peer addresses, NUL included */
#define KVS_CLUSTER_HOLDERS 4u	  /* holders an answer names, best first */

/* One other node holding keys[hits, hits + blocks) of a cluster QUERY. */
struct kvs_cluster_holder {
	char node[KVS_CLUSTER_NAME_MAX]; /* its [cluster] node name */
	char addr[KVS_CLUSTER_ADDR_MAX]; /* its [cluster] peer_address; "" if none */
	uint64_t epoch;			 /* of its registry lease */
	uint32_t blocks;		 /* how many keys after the local hits it holds */
	uint32_t resv0;
};

/*
 * The cluster part of a QUERY (KVS_QUERY_CLUSTER).  The keys it covers are
 * those after the local hits (the CQE's res): best is the longest run of
 * them that one other live node holds.  status -ENOTCONN (registry
 * unreachable or not leased), -ETIMEDOUT (nothing answered within the
 * query timeout) or -ESHUTDOWN mean "local hits only"; a run answered
 * before the deadline is reported with status 0.  Every local hit: status
 * 0, best 0, no holders, nothing asked.
 */
struct kvs_cluster_answer {
	int32_t status;
	uint32_t best;
	uint32_t nr_holders; /* <= KVS_CLUSTER_HOLDERS, by blocks descending */
	uint32_t round_trips; /* registry round trips it took */
	uint64_t resv[2];
	struct kvs_cluster_holder holders[KVS_CLUSTER_HOLDERS];
};

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
 *   -ETIMEDOUT   SAVE AFTER: its fence value did not come in time
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
_Static_assert(offsetof(struct kvs_sqe, fence_slot) == 48, "kvs_sqe.fence_slot");
_Static_assert(offsetof(struct kvs_sqe, fence_value) == 52, "kvs_sqe.fence_value");
_Static_assert(offsetof(struct kvs_sqe, resv2) == 56, "kvs_sqe.resv2");
_Static_assert(sizeof(struct kvs_fence) == 16, "kvs_fence is 16 bytes");
_Static_assert(offsetof(struct kvs_fence, status) == 4, "kvs_fence.status");
_Static_assert(sizeof(struct kvs_cqe) == 32, "kvs_cqe is 32 bytes");
_Static_assert(offsetof(struct kvs_cqe, res) == 8, "kvs_cqe.res");
_Static_assert(offsetof(struct kvs_cqe, result0) == 16, "kvs_cqe.result0");
_Static_assert(sizeof(struct kvs_cluster_holder) == 208, "kvs_cluster_holder is 208 bytes");
_Static_assert(offsetof(struct kvs_cluster_holder, epoch) == 192, "kvs_cluster_holder.epoch");
_Static_assert(sizeof(struct kvs_cluster_answer) == 32 + 4 * 208, "kvs_cluster_answer");
_Static_assert(offsetof(struct kvs_cluster_answer, holders) == 32, "kvs_cluster_answer.holders");

#endif /* KVSTASH_ABI_H */
