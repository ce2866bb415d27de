/* SPDX-License-Identifier: MIT */
/*
 * kvstash wire protocol: the messages on the Unix-domain SOCK_SEQPACKET
 * socket between an engine (or the admin CLI) and kvstashd.
 *
 * The socket carries only the control plane: HELLO (handshake, returns the
 * session region's fd), REGISTER (KV memory, with fds by SCM_RIGHTS),
 * UNREGISTER, GOODBYE, and the admin requests.  The data path runs over
 * the shared-memory rings (abi.h).  Socket EOF is the death signal.
 *
 * Every message starts with struct kvs_msg_hdr; one message per packet.
 * Requests are answered in order; a reply echoes the request's seq.
 * Integers are fixed-width little-endian; strings are NUL-padded fixed
 * arrays and must contain a NUL.  Reserved fields must be zero.
 *
 * Revision: KVS_WIRE_MAJOR must match exactly (a different major is refused
 * with -EPROTONOSUPPORT before anything is created or mapped); a minor
 * only adds.  The first 16 bytes of struct kvs_msg_hello and the first 24
 * of struct kvs_msg_reply never change, so any two revisions can tell
 * each other that they differ.
 */
#ifndef KVSTASH_WIRE_H
#define KVSTASH_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <kvstash/stats.h>

#define KVS_WIRE_MAJOR 1u
/*
 * Minor 1: the cluster (KVS_HELLO_CLUSTER, KVS_PART_CLUSTER,
 * KVS_QUERY_CLUSTER, KVS_FLUSH_CLUSTER, KVS_MSG_STATS_REGISTRY).
 */
/*
 * Minor 2: the SSD tier (KVS_QUERY_DRAM, KVS_CQE_PENDING, KVS_MSG_STATS_SSD).
 */
/*
 * Minor 3: peer transfer (KVS_QUERY_FETCH with its node hint,
 * KVS_MSG_STATS_PEER).
 */
/*
 * Minor 4: GPU-side ordering (KVS_HELLO_FENCES, KVS_PART_FENCES,
 * KVS_SAVE_AFTER, KVS_LOAD_PROGRESS).
 */
/*
 * Minor 5: the registry's master, how it was found (Sentinel), the
 * failovers followed and the incarnation: STATS_REGISTRY grows from 320 to
 * 640 bytes (libkvstash takes the shorter one of an older daemon, the new
 * fields zero); a cluster FLUSH may complete with -EAGAIN.
 */
#define KVS_WIRE_MINOR 5u

#define KVS_MSG_MAX 131072u	/* largest packet either side sends */
#define KVS_MAX_FDS 64u		/* most fds one REGISTER may carry */
#define KVS_NAME_MAX 64u	/* instance and layer names, NUL included */
#define KVS_NS_MAX 128u		/* namespace, NUL included */
#define KVS_TEXT_MAX 192u	/* error text in replies, NUL included */
#define KVS_IPC_HANDLE_SIZE 64u /* cudaIpcMemHandle_t */

/* kvs_msg_hdr.type */
#define KVS_MSG_HELLO 1u
#define KVS_MSG_HELLO_REPLY 2u
#define KVS_MSG_REGISTER 3u
#define KVS_MSG_UNREGISTER 4u
#define KVS_MSG_GOODBYE 5u
#define KVS_MSG_REPLY 6u	    /* status (+ text) for the requests above */
#define KVS_MSG_STATUS 16u	    /* admin: daemon and session list */
#define KVS_MSG_STATUS_DAEMON 17u
#define KVS_MSG_STATUS_SESSION 18u
#define KVS_MSG_STATS 19u	    /* admin: counters */
#define KVS_MSG_STATS_GLOBAL 20u
#define KVS_MSG_STATS_NODE 21u
#define KVS_MSG_STATS_SESSION 22u
#define KVS_MSG_END 23u		    /* ends a multi-message admin reply */
#define KVS_MSG_STATS_REGISTRY 24u /* minor 1: the registry client, with [cluster] only */
#define KVS_MSG_STATS_SSD	25u /* minor 2: the SSD tier, with [ssd] only */
#define KVS_MSG_STATS_SSD_DRIVE 26u /* minor 2: one per drive of the SSD tier */
#define KVS_MSG_STATS_PEER	27u /* minor 3: the peer service, with [cluster] peer_listen only */
#define KVS_MSG_STATS_PEER_INFO 28u /* minor 3: one per peer of the peer service */

struct kvs_msg_hdr {
	uint32_t type;
	uint32_t size; /* whole message in bytes, header included */
	uint32_t seq;  /* chosen by the requester, echoed in the reply */
	uint32_t flags;
};

/* Roles (kvs_msg_hello.role). */
#define KVS_ROLE_WORKER 1u    /* an engine rank: registers memory, all ops */
#define KVS_ROLE_SCHEDULER 2u /* no memory: NOP, QUERY, RELEASE only */
#define KVS_ROLE_ADMIN 3u     /* no region: status and stats requests */

/*
 * kvs_msg_hello.flags.  KVS_HELLO_CLUSTER (minor 1): the session region
 * gets KVS_PART_CLUSTER, so the session may send cluster QUERYs (abi.h).
 */
#define KVS_HELLO_CLUSTER (1u << 0)
/*
 * KVS_HELLO_FENCES (minor 4, worker sessions): the session region gets
 * KVS_PART_FENCES, so the session may send SAVE AFTER and LOAD PROGRESS.
 */
#define KVS_HELLO_FENCES (1u << 1)

/* Device kinds (kvs_msg_hello.device_kind). */
#define KVS_DEVICE_HOST 1u /* engine memory is host memory (memfd) */
#define KVS_DEVICE_CUDA 2u /* engine memory is on the GPU named by UUID */

struct kvs_msg_hello {
	struct kvs_msg_hdr hdr;
	uint16_t rev_major; /* KVS_WIRE_MAJOR: frozen position */
	uint16_t rev_minor;
	uint32_t role;
	uint32_t tp_rank;
	uint32_t tp_size;
	uint32_t world_size; /* ranks that form the instance */
	uint32_t device_kind;
	uint8_t device_uuid[16]; /* CUDA: the GPU's UUID, never an ordinal */
	uint32_t sq_entries;	 /* wanted; 0: the daemon's default */
	uint32_t cq_entries;	 /* wanted; 0: twice sq_entries */
	uint64_t arg_bytes;	 /* wanted; 0: the daemon's default */
	uint32_t flags;		 /* KVS_HELLO_*; unknown bits: -EINVAL */
	uint32_t resv0;
	char instance[KVS_NAME_MAX]; /* ranks of one engine instance share it */
	char ns[KVS_NS_MAX];	     /* model, dtype and layout */
	uint64_t resv[4];
};

struct kvs_msg_reply {
	struct kvs_msg_hdr hdr;
	int32_t status;	    /* 0 or -errno: frozen position */
	uint16_t rev_major; /* the daemon's revision: frozen position */
	uint16_t rev_minor;
	char text[KVS_TEXT_MAX]; /* why, for humans; "" on success */
};

/*
 * HELLO reply.  On success exactly one fd rides along (SCM_RIGHTS): the
 * session region.  The limits are the daemon's; the client enforces them
 * before submitting to fail fast, the daemon enforces them regardless.
 */
struct kvs_msg_hello_reply {
	struct kvs_msg_reply r;
	uint64_t session_id;
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint64_t arg_bytes;
	uint64_t region_size;
	uint32_t max_keys;     /* keys / block ids per SQE */
	uint32_t max_inflight; /* SQEs taken but not completed */
	uint32_t max_layers;   /* per registration */
	uint32_t lease_ttl_ms;
	uint32_t worker;       /* which I/O worker serves the session */
	uint32_t resv0;
	uint64_t resv[4];
};

/* Memory kinds (kvs_wire_mem.kind). */
#define KVS_MEM_HOST_FD 1u     /* host memory fd (memfd), mmap()ed by kvstashd */
#define KVS_MEM_CUDA_IPC 2u    /* legacy cudaIpcMemHandle_t in ipc_handle */
#define KVS_MEM_CUDA_VMM_FD 3u /* CUDA VMM allocation exported as a POSIX fd */

/* An allocation.  Fd kinds refer to the fd_index-th fd of the packet. */
struct kvs_wire_mem {
	uint32_t kind;
	uint32_t fd_index;			 /* fd kinds; else 0 */
	uint64_t size;				 /* bytes the engine allocated */
	uint8_t ipc_handle[KVS_IPC_HANDLE_SIZE]; /* KVS_MEM_CUDA_IPC */
	uint64_t resv[2];
};

/*
 * A layer view into an allocation.  Segment s of block b lies at
 *     offset + b * block_stride + s * kv_stride,  segment_bytes long
 * and must lie inside the allocation for every b < num_blocks and every
 * s < segments.  Page-first fused layout: one allocation, block_stride =
 * (sum of layer bytes), offset = the layer's place in the block.
 * Layer-first split K/V: one allocation per layer, segments = 2,
 * kv_stride = num_blocks * block_stride.
 */
struct kvs_wire_layer {
	char name[KVS_NAME_MAX];
	uint32_t mem_index; /* into the register message's mems */
	uint32_t segments;  /* 1, or 2 for split K/V */
	uint64_t offset;
	uint32_t num_blocks;
	uint32_t resv0;
	uint64_t segment_bytes;
	uint64_t kv_stride;
	uint64_t block_stride;
	uint64_t resv[2];
};

#define KVS_REGISTER_REPLICATED (1u << 0) /* MLA-style: one shard for all ranks */

/* REGISTER: header, then mems[nr_mems], then layers[nr_layers]. */
struct kvs_msg_register {
	struct kvs_msg_hdr hdr;
	uint32_t nr_mems;
	uint32_t nr_layers;
	uint32_t flags;
	uint32_t resv0;
	/* struct kvs_wire_mem mems[nr_mems]; struct kvs_wire_layer layers[]; */
};

/* ---- admin ------------------------------------------------------- */

struct kvs_msg_status_daemon {
	struct kvs_msg_hdr hdr;
	char version[32];
	uint32_t pid;
	uint32_t nr_sessions;
	uint64_t uptime_ms;
	uint32_t nr_workers;
	uint32_t nr_instances;
	uint32_t cuda_available; /* 1 when the CUDA backend can be used */
	uint32_t resv0;
	uint64_t resv[4];
};

struct kvs_msg_status_session {
	struct kvs_msg_hdr hdr;
	uint64_t session_id;
	uint32_t pid;
	uint32_t uid;
	uint32_t role;
	uint32_t tp_rank;
	uint32_t tp_size;
	uint32_t world_size;
	uint32_t device_kind;
	uint32_t worker;
	uint8_t device_uuid[16];
	uint32_t nr_layers; /* registered; 0 before REGISTER */
	uint32_t sealed;    /* the instance has all its ranks */
	uint64_t slot_bytes;   /* host-pool bytes per block of this rank */
	uint64_t mapped_bytes; /* engine memory mapped for this session */
	char instance[KVS_NAME_MAX];
	char ns[KVS_NS_MAX];
	char first_layer[KVS_NAME_MAX];
	char last_layer[KVS_NAME_MAX];
	uint64_t resv[4];
};

/*
 * The reply to KVS_MSG_STATS: one STATS_GLOBAL, one STATS_NODE per pool
 * region, one STATS_SESSION per engine session, then END.  Their fields
 * are the tables of <kvstash/stats.h>, where every counter is declared
 * once (with its meaning, its Prometheus family and how the CLI shows it).
 */
KVS_STATS_STRUCT(kvs_msg_stats_global, KVS_STATS_GLOBAL, KVS_STATS_GLOBAL_SIZE);
KVS_STATS_STRUCT(kvs_msg_stats_node, KVS_STATS_NODE, KVS_STATS_NODE_SIZE);
KVS_STATS_STRUCT(kvs_msg_stats_session, KVS_STATS_SESSION, KVS_STATS_SESSION_SIZE);
/*
 * Minor 1: a kvstashd with a [cluster] section adds one STATS_REGISTRY
 * after the sessions' messages of a STATS reply, and one after
 * STATUS_DAEMON in a STATUS reply; without [cluster] neither reply changes.
 * A libkvstash of minor 0 skips the type (a newer daemon's addition).
 */
KVS_STATS_STRUCT(kvs_msg_stats_registry, KVS_STATS_REGISTRY, KVS_STATS_REGISTRY_SIZE);
/*
 * Minor 2: a kvstashd with an [ssd] section adds one STATS_SSD after the
 * sessions' messages (and the registry's) of a STATS reply, then one
 * STATS_SSD_DRIVE per drive; without [ssd] the reply does not change.  A
 * libkvstash of an older minor skips both types.
 */
KVS_STATS_STRUCT(kvs_msg_stats_ssd, KVS_STATS_SSD, KVS_STATS_SSD_SIZE);
KVS_STATS_STRUCT(kvs_msg_stats_ssd_drive, KVS_STATS_SSD_DRIVE, KVS_STATS_SSD_DRIVE_SIZE);
/*
 * Minor 3: a kvstashd with a peer service ([cluster] peer_listen) adds one
 * STATS_PEER after the SSD tier's messages of a STATS reply, and after
 * the registry's in a STATUS reply, then one STATS_PEER_INFO per peer (256
 * at most); without the service neither reply changes.  A libkvstash of an
 * older minor skips both types.
 */
KVS_STATS_STRUCT(kvs_msg_stats_peer, KVS_STATS_PEER, KVS_STATS_PEER_SIZE);
KVS_STATS_STRUCT(kvs_msg_stats_peer_info, KVS_STATS_PEER_INFO, KVS_STATS_PEER_INFO_SIZE);

_Static_assert(sizeof(struct kvs_msg_hdr) == 16, "hdr");
_Static_assert(offsetof(struct kvs_msg_hello, rev_major) == 16, "hello revision is frozen");
_Static_assert(sizeof(struct kvs_msg_hello) == 304, "hello");
_Static_assert(offsetof(struct kvs_msg_reply, status) == 16, "reply status is frozen");
_Static_assert(offsetof(struct kvs_msg_reply, rev_major) == 20, "reply revision is frozen");
_Static_assert(sizeof(struct kvs_msg_reply) == 216, "reply");
_Static_assert(sizeof(struct kvs_msg_hello_reply) == 304, "hello reply");
_Static_assert(sizeof(struct kvs_wire_mem) == 96, "wire mem");
_Static_assert(sizeof(struct kvs_wire_layer) == 128, "wire layer");
_Static_assert(sizeof(struct kvs_msg_register) == 32, "register");
_Static_assert(sizeof(struct kvs_msg_status_daemon) == 112, "status daemon");

_Static_assert(sizeof(struct kvs_msg_status_session) == 448, "status session");
/* The fields fill their size exactly (no padding); a group whose words are used up grows. */
_Static_assert(sizeof(struct kvs_msg_stats_global) == KVS_STATS_GLOBAL_SIZE, "stats global");
_Static_assert(sizeof(struct kvs_msg_stats_node) == KVS_STATS_NODE_SIZE, "stats node");
_Static_assert(sizeof(struct kvs_msg_stats_session) == KVS_STATS_SESSION_SIZE, "stats session");
_Static_assert(KVS_STATS_RESV(KVS_STATS_GLOBAL_SIZE, KVS_STATS_GLOBAL) > 0,
	       "stats global: no reserved word left; grow KVS_STATS_GLOBAL_SIZE (stats.h)");
_Static_assert(KVS_STATS_RESV(KVS_STATS_NODE_SIZE, KVS_STATS_NODE) > 0,
	       "stats node: no reserved word left; grow KVS_STATS_NODE_SIZE (stats.h)");
_Static_assert(KVS_STATS_RESV(KVS_STATS_SESSION_SIZE, KVS_STATS_SESSION) > 0,
	       "stats session: no reserved word left; grow KVS_STATS_SESSION_SIZE (stats.h)");
_Static_assert(sizeof(struct kvs_msg_stats_registry) == KVS_STATS_REGISTRY_SIZE, "stats registry");
_Static_assert(KVS_STATS_RESV(KVS_STATS_REGISTRY_SIZE, KVS_STATS_REGISTRY) > 0,
	       "stats registry: no reserved word left; grow KVS_STATS_REGISTRY_SIZE (stats.h)");
_Static_assert(sizeof(struct kvs_msg_stats_ssd) == KVS_STATS_SSD_SIZE, "stats ssd");
_Static_assert(KVS_STATS_RESV(KVS_STATS_SSD_SIZE, KVS_STATS_SSD) > 0,
	       "stats ssd: no reserved word left; grow KVS_STATS_SSD_SIZE (stats.h)");
_Static_assert(sizeof(struct kvs_msg_stats_ssd_drive) == KVS_STATS_SSD_DRIVE_SIZE,
	       "stats ssd drive");
_Static_assert(KVS_STATS_RESV(KVS_STATS_SSD_DRIVE_SIZE, KVS_STATS_SSD_DRIVE) > 0,
	       "stats ssd drive: no reserved word left; grow KVS_STATS_SSD_DRIVE_SIZE (stats.h)");
_Static_assert(sizeof(struct kvs_msg_stats_peer) == KVS_STATS_PEER_SIZE, "stats peer");
_Static_assert(KVS_STATS_RESV(KVS_STATS_PEER_SIZE, KVS_STATS_PEER) > 0,
	       "stats peer: no reserved word left; grow KVS_STATS_PEER_SIZE (stats.h)");
_Static_assert(sizeof(struct kvs_msg_stats_peer_info) == KVS_STATS_PEER_INFO_SIZE,
	       "stats peer info");
_Static_assert(KVS_STATS_RESV(KVS_STATS_PEER_INFO_SIZE, KVS_STATS_PEER_INFO) > 0,
	       "stats peer info: no reserved word left; grow KVS_STATS_PEER_INFO_SIZE (stats.h)");

#endif /* KVSTASH_WIRE_H */
