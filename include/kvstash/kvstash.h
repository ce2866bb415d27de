/* SPDX-License-Identifier: MIT */
/*
 * libkvstash: what an inference engine links to use kvstashd.
 *
 * In the spirit of liburing: connect (handshake over the Unix socket, map
 * the session region), register the KV memory once, then get SQEs, prepare
 * them, submit (a store into shared memory; a syscall only when the
 * daemon's I/O worker sleeps), and reap CQEs.  See libkvstash(3) and
 * kvstash(7).
 *
 *   struct kvs_client *c;
 *   struct kvs_connect_opts o;
 *   kvs_connect_opts_init(&o);
 *   o.instance = "vllm-0"; o.ns = "qwen3-8b/bf16/pf16";
 *   if (kvs_connect("/run/kvstash/kvstash.sock", &o, &c) < 0) ...
 *   kvs_register(c, mems, 1, layers, 36, 0);
 *   struct kvs_sqe *sqe = kvs_get_sqe(c);
 *   kvs_prep_save(c, sqe, keys, block_ids, n, 42);
 *   kvs_submit(c);
 *   struct kvs_cqe *cqe;
 *   kvs_wait_cqe(c, &cqe, 1000);  ... cqe->res ...  kvs_cqe_seen(c, cqe);
 *
 * Errors: functions return 0 / a count, or -errno; ret_* outputs are left
 * untouched on failure.  The library never prints or exits; it reports
 * through return values and the optional log callback.
 *
 * Death: if kvstashd goes away, every operation still pending, and every
 * one submitted later, completes with res = -ECONNRESET (flag
 * KVS_CQE_LOCAL) from the library itself, found by the wait functions
 * within KVS_DEATH_POLL_MS.  kvs_reconnect() then starts a new session.
 *
 * Thread safety: a kvs_client is not thread-safe.  One thread at a time
 * may call into a given client (as with a liburing ring); use one client
 * per thread, or serialise with your own lock.  Different clients are
 * independent.
 *
 *   call                                 external locking needed
 *   kvs_connect, kvs_connect_opts_init   no
 *   everything taking a kvs_client       yes, per client
 *   kvs_version, kvs_strerror            no
 */
#ifndef KVSTASH_KVSTASH_H
#define KVSTASH_KVSTASH_H

#include <stddef.h>
#include <stdint.h>

#include <kvstash/abi.h>
#include <kvstash/wire.h>
#include <kvstash/version.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kvs_client;

#define KVS_DEFAULT_SOCKET "/run/kvstash/kvstash.sock"
#define KVS_DEATH_POLL_MS 20 /* a waiter checks the socket this often */

/* Log levels for the callback (syslog numbering). */
#define KVS_LOG_ERR 3
#define KVS_LOG_WARNING 4
#define KVS_LOG_INFO 6
#define KVS_LOG_DEBUG 7

typedef void (*kvs_log_fn)(void *arg, int level, const char *msg);

struct kvs_connect_opts {
	uint32_t role;		 /* KVS_ROLE_WORKER (default) or _SCHEDULER */
	uint32_t tp_rank;	 /* default 0 */
	uint32_t tp_size;	 /* default 1 */
	uint32_t world_size;	 /* default tp_size */
	uint32_t device_kind;	 /* KVS_DEVICE_HOST (default) or _CUDA */
	uint8_t device_uuid[16]; /* KVS_DEVICE_CUDA: the GPU's UUID */
	const char *instance;	 /* required: names the engine instance */
	const char *ns;		 /* required: model, dtype and layout */
	uint32_t sq_entries;	 /* 0: the daemon's default */
	uint32_t cq_entries;	 /* 0: 2 x sq_entries */
	uint64_t arg_bytes;	 /* 0: the daemon's default */
	int timeout_ms;		 /* socket requests; default 5000 */
	kvs_log_fn log;		 /* optional */
	void *log_arg;
	uint32_t flags;		 /* KVS_CONNECT_*; default 0 */
	uint32_t wait_spin_us;	 /* kvs_wait_cqe() polls this long, then sleeps; 0: 50 */
	uint64_t resv[3];
};

/*
 * kvs_connect_opts.flags.  KVS_CONNECT_CLUSTER: ask for the cluster
 * answer area (KVS_HELLO_CLUSTER), so the session may send cluster
 * QUERYs; -EOPNOTSUPP from a kvstashd older than wire minor 1.  Unknown
 * bits, and KVS_CONNECT_CLUSTER for an admin session: -EINVAL.
 */
#define KVS_CONNECT_CLUSTER (1u << 0)
/*
 * KVS_CONNECT_FENCES (worker sessions, kvstashd of wire minor 4): ask for
 * the fence slots (KVS_HELLO_FENCES), so the session may order SAVEs and
 * LOADs against CUDA streams (below, "stream ordering"); the library
 * starts one watchdog thread for the client (signals blocked), which
 * releases the engine's waits if kvstashd dies.  -EOPNOTSUPP from an
 * older kvstashd; -EINVAL for another role.
 */
#define KVS_CONNECT_FENCES (1u << 1)

/* Fill @opts with the defaults above. */
void kvs_connect_opts_init(struct kvs_connect_opts *opts);

/*
 * Connect to kvstashd at @path (NULL: KVS_DEFAULT_SOCKET or $KVSTASH_SOCKET),
 * say HELLO, map the session region.  Returns 0 or -errno:
 *   -ENOENT / -ECONNREFUSED  no daemon
 *   -EPROTONOSUPPORT         the daemon speaks another wire major
 *   -EACCES                  refused by the daemon's allow-list
 *   -EUSERS                  the daemon's session limit is reached
 *   -EINVAL                  bad options (the log callback says which)
 *   -ETIMEDOUT               no reply within timeout_ms
 *   -EBADMSG                 a malformed reply or session region (the log
 *                            callback says which field)
 */
int kvs_connect(const char *path, const struct kvs_connect_opts *opts,
		struct kvs_client **ret_client);

/*
 * Start a new session with the same options after the daemon restarted.
 * Pending operations of the old session are completed with -ECONNRESET
 * first (reap them as usual).  If memory was registered, the same
 * registration is sent again (the library keeps duplicates of its fds).
 */
int kvs_reconnect(struct kvs_client *client);

/* Say GOODBYE, unmap, close, free.  Accepts NULL. */
void kvs_close(struct kvs_client *client);

/* Session facts from the HELLO reply. */
struct kvs_session_info {
	uint64_t session_id;
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint64_t arg_bytes;
	uint32_t max_keys;
	uint32_t max_inflight;
	uint32_t max_layers;
	uint32_t lease_ttl_ms;
	uint16_t daemon_rev_major;
	uint16_t daemon_rev_minor;
	uint32_t resv0;
};
int kvs_session_info(const struct kvs_client *client, struct kvs_session_info *ret_info);

/* 1 while the session is up, 0 once the library has seen kvstashd go. */
int kvs_connected(struct kvs_client *client);

/* ---- registration ------------------------------------------------ */

/* One allocation of engine KV memory. */
struct kvs_mem {
	uint32_t kind; /* KVS_MEM_HOST_FD, KVS_MEM_CUDA_IPC, KVS_MEM_CUDA_VMM_FD */
	int fd;	       /* fd kinds: the library sends a duplicate */
	uint64_t size; /* bytes */
	uint8_t ipc_handle[KVS_IPC_HANDLE_SIZE]; /* KVS_MEM_CUDA_IPC */
};

/* One layer's view into an allocation; see struct kvs_wire_layer. */
struct kvs_layer {
	const char *name;
	uint32_t mem; /* index into the mems array */
	uint32_t segments;
	uint64_t offset;
	uint32_t num_blocks;
	uint64_t segment_bytes;
	uint64_t kv_stride;
	uint64_t block_stride;
};

/*
 * Register the engine's KV memory (workers only).  @flags:
 * KVS_REGISTER_REPLICATED.  The daemon validates every view against its
 * allocation; returns 0 or the daemon's -errno (-EINVAL, -ERANGE,
 * -EOVERFLOW, -EEXIST for a duplicate name, -EXDEV for geometry that
 * differs from another rank's, -E2BIG above max_layers, ...).  The reason
 * goes to the log callback.
 */
int kvs_register(struct kvs_client *client, const struct kvs_mem *mems, unsigned nr_mems,
		 const struct kvs_layer *layers, unsigned nr_layers, uint32_t flags);

/* Flush this session's saves, then drop the mappings.  Idempotent. */
int kvs_unregister(struct kvs_client *client);

/* ---- submission -------------------------------------------------- */

/*
 * Next free SQE, zeroed, or NULL when the SQ is full or max_inflight
 * operations are pending (reap CQEs, then retry).  Prepare it with a
 * kvs_prep_*(): several may be taken first and prepared in any order (each
 * helper acts on the SQE it is given); a prep that fails gives the SQE
 * back.  An SQE taken and not prepared goes as a NOP.
 */
struct kvs_sqe *kvs_get_sqe(struct kvs_client *client);

/*
 * Prepare helpers.  Arguments are copied into the session's argument
 * area (-ENOSPC when it has no room until earlier SQEs are consumed;
 * -E2BIG when @n exceeds max_keys; -EINVAL for n == 0 where it needs n).
 * kvs_prep_query() takes KVS_QUERY_CLUSTER only on a session connected
 * with KVS_CONNECT_CLUSTER (-EINVAL otherwise); kvs_prep_flush() takes
 * KVS_FLUSH_CLUSTER, alone or with KVS_FLUSH_INSTANCE.  Other flags go to
 * kvstashd as they are: KVS_QUERY_DRAM (wire minor 2) asks for hits in
 * its DRAM only, none read back from its SSD tier.  A QUERY's CQE says in
 * KVS_CQE_PENDING(cqe->flags) how many of its hits were still being read
 * from SSD (0 without [ssd]); a LOAD of them waits for those reads, and
 * completes with res < n when one failed: the prefix before it was
 * copied, recompute the rest (abi.h, the CQE table).
 */
int kvs_prep_nop(struct kvs_client *client, struct kvs_sqe *sqe, uint64_t user_data);
int kvs_prep_save(struct kvs_client *client, struct kvs_sqe *sqe, const void *keys,
		  const uint32_t *block_ids, uint32_t n, uint64_t user_data);
int kvs_prep_query(struct kvs_client *client, struct kvs_sqe *sqe, const void *keys, uint32_t n,
		   uint64_t req_id, uint32_t flags, uint64_t user_data);
/*
 * A QUERY with KVS_QUERY_FETCH (wire minor 3): the keys after the local
 * hits are fetched from another node first, the one at @hint ("ADDR:PORT",
 * its [cluster] peer_listen, as a prefill node tells its decode node), or
 * with @hint NULL the one the cluster registry names.  The CQE is a
 * QUERY's (hits, lease) over what is then resident, once the fetch ended
 * within kvstashd's [cluster] fetch_timeout: a shorter prefix, never an
 * error, when the peer is gone or holds fewer (the engine recomputes the
 * rest).  @flags: KVS_QUERY_NOLEASE, KVS_QUERY_DRAM (others: -EINVAL);
 * -EOPNOTSUPP before minor 3, and in the CQE when kvstashd has no peer
 * service.  kvstash(7), "Cluster", shows the prefill/decode handoff.
 */
int kvs_prep_query_fetch(struct kvs_client *client, struct kvs_sqe *sqe, const void *keys,
			 uint32_t n, uint64_t req_id, uint32_t flags, const char *hint,
			 uint64_t user_data);
int kvs_prep_load(struct kvs_client *client, struct kvs_sqe *sqe, uint64_t lease,
		  const uint32_t *block_ids, uint32_t n, uint32_t layer_begin, uint32_t layer_count,
		  uint64_t user_data);
int kvs_prep_release(struct kvs_client *client, struct kvs_sqe *sqe, uint64_t lease,
		     uint64_t user_data);
int kvs_prep_flush(struct kvs_client *client, struct kvs_sqe *sqe, uint32_t flags,
		   uint64_t user_data);

/*
 * Publish every prepared SQE (one index store) and wake the I/O worker if
 * it sleeps.  Returns the number submitted.  After kvstashd died, the
 * SQEs are completed locally with -ECONNRESET and the count is returned
 * all the same.
 */
int kvs_submit(struct kvs_client *client);

/* ---- completion -------------------------------------------------- */

/*
 * The oldest unseen completion, or -EAGAIN when there is none.  The CQE
 * is the library's private copy (never the entry in the shared CQ, which
 * kvstashd could rewrite): it stays valid and unchanged until
 * kvs_cqe_seen().  user_data is the value given to the prep helper.  A
 * CQE whose result no operation could give arrives as res -EBADMSG with
 * KVS_CQE_LOCAL; see libkvstash(3), "THE DAEMON IS UNTRUSTED".
 */
int kvs_peek_cqe(struct kvs_client *client, struct kvs_cqe **ret_cqe);

/*
 * Like kvs_peek_cqe() but sleeps up to @timeout_ms (-1: for ever, still
 * waking every KVS_DEATH_POLL_MS to notice a dead daemon).  -ETIMEDOUT when
 * nothing completed.
 */
int kvs_wait_cqe(struct kvs_client *client, struct kvs_cqe **ret_cqe, int timeout_ms);

/* Mark the CQE from peek/wait consumed. */
void kvs_cqe_seen(struct kvs_client *client, struct kvs_cqe *cqe);

/*
 * The cluster part of @cqe, the CQE being looked at (from peek/wait, not
 * yet seen), into @ret_answer: 0; -ENOENT when @cqe carries none (not a
 * cluster QUERY's, or a local completion such as -ECONNRESET).  The
 * answer was copied with the CQE and checked (counts, NUL-terminated
 * names): a malformed one makes the CQE -EBADMSG.
 */
int kvs_cqe_cluster(struct kvs_client *client, const struct kvs_cqe *cqe,
		    struct kvs_cluster_answer *ret_answer);

/* Operations submitted and not yet reaped. */
unsigned kvs_pending(const struct kvs_client *client);

/* ---- blocking helpers (tests and simple engines) ------------------ */

/*
 * Each submits one operation and waits up to @timeout_ms for its CQE.
 * Other completions that arrive meanwhile are kept for later peeks.
 * Return the CQE's res (>= 0) or -errno; optional outputs as named.
 */
int kvs_nop_sync(struct kvs_client *client, int timeout_ms);
int kvs_save_sync(struct kvs_client *client, const void *keys, const uint32_t *block_ids,
		  uint32_t n, int timeout_ms, uint64_t *ret_stored, uint64_t *ret_skipped);
int kvs_query_sync(struct kvs_client *client, const void *keys, uint32_t n, uint64_t req_id,
		   uint32_t flags, int timeout_ms, uint64_t *ret_lease);
int kvs_load_sync(struct kvs_client *client, uint64_t lease, const uint32_t *block_ids,
		  uint32_t n, uint32_t layer_begin, uint32_t layer_count, int timeout_ms);
int kvs_release_sync(struct kvs_client *client, uint64_t lease, int timeout_ms);
int kvs_flush_sync(struct kvs_client *client, uint32_t flags, int timeout_ms);

/*
 * A QUERY with KVS_QUERY_CLUSTER added to @flags: returns the local hits
 * (res) with the lease in *@ret_lease, and the cluster part in
 * *@ret_answer (see struct kvs_cluster_answer).
 */
int kvs_query_cluster_sync(struct kvs_client *client, const void *keys, uint32_t n,
			   uint64_t req_id, uint32_t flags, int timeout_ms, uint64_t *ret_lease,
			   struct kvs_cluster_answer *ret_answer);
/* kvs_prep_query_fetch(), submitted and waited for: the hits, the lease in *@ret_lease. */
int kvs_query_fetch_sync(struct kvs_client *client, const void *keys, uint32_t n, uint64_t req_id,
			 uint32_t flags, const char *hint, int timeout_ms, uint64_t *ret_lease);
/*
 * A FLUSH with KVS_FLUSH_CLUSTER added to @flags: returns res (0,
 * -ETIMEDOUT, -ESHUTDOWN, -EAGAIN, -EOPNOTSUPP ...), this session's
 * registrations (its instance's with KVS_FLUSH_INSTANCE) delivered and
 * dropped since its previous cluster FLUSH in *@ret_registered and
 * *@ret_dropped (when res >= 0 or -ETIMEDOUT).
 */
int kvs_flush_cluster_sync(struct kvs_client *client, uint32_t flags, int timeout_ms,
			   uint64_t *ret_registered, uint64_t *ret_dropped);

/* ---- stream ordering (KVS_CONNECT_FENCES) --------------------------- */

/*
 * A SAVE that waits for the engine's stream, and a LOAD that tells the
 * engine's stream how far it got, layer by layer, through the session's
 * fence slots (struct kvs_fence in abi.h).  The rules, in full in
 * libkvstash(3), "STREAM ORDERING":
 *  - SAVE: kvs_prep_save_after() (or kvs_prep_save_stream()) arms a slot;
 *    kvs_fence_signal() enqueues on the stream that writes the KV a
 *    write of the slot after that KV; kvstashd copies nothing before it
 *    (within its [worker] save_wait_ms: else -ETIMEDOUT, nothing stored).
 *    The engine's host thread never blocks; the SAVE's CQE still says
 *    when the blocks may be reused.
 *  - LOAD: kvs_prep_load_progress() arms a slot; kvs_fence_wait() with
 *    layer i (0: the range's first) enqueues on a stream a wait until
 *    that layer of every block is in GPU memory.  Every wait is released
 *    however the LOAD ends: copied, refused, failed, or kvstashd gone
 *    (then by the library itself, from its watchdog thread, status
 *    -ECONNRESET).  A kernel after its wait can check the slot's status
 *    (kvs_fence_device_ptr()); the CQE remains the authority.
 *  - A ref is good until its operation's CQE was seen; waits and signals
 *    on one of an older session (before kvs_reconnect()) are refused
 *    with -ECONNRESET and enqueue nothing.
 *  - Streams must have passed their waits before kvs_close() (which
 *    releases whatever is still armed): the slots' memory goes with it.
 */
struct kvs_fence_ref {
	uint32_t slot;	/* index into the session's fence slots */
	uint32_t base;	/* the slot's value before the operation */
	uint32_t count; /* values it has: 1 for a SAVE, its layers for a LOAD */
	uint32_t gen;	/* the library's session number */
};

/* A SAVE AFTER; *@ret_fence names its slot, to signal with kvs_fence_signal(). */
int kvs_prep_save_after(struct kvs_client *client, struct kvs_sqe *sqe, const void *keys,
			const uint32_t *block_ids, uint32_t n, struct kvs_fence_ref *ret_fence,
			uint64_t user_data);
/*
 * kvs_prep_save_after() and kvs_fence_signal() on @stream (a CUstream or
 * cudaStream_t; NULL: the legacy default stream) in one: the SAVE copies
 * what the stream's work before this call writes.
 */
int kvs_prep_save_stream(struct kvs_client *client, struct kvs_sqe *sqe, const void *keys,
			 const uint32_t *block_ids, uint32_t n, void *stream, uint64_t user_data);
/*
 * A LOAD PROGRESS of layers [@layer_begin, @layer_begin + @layer_count)
 * (@layer_count 0: to the last registered layer); *@ret_fence names its
 * slot, to wait on with kvs_fence_wait().  The copies go layer by layer.
 */
int kvs_prep_load_progress(struct kvs_client *client, struct kvs_sqe *sqe, uint64_t lease,
			   const uint32_t *block_ids, uint32_t n, uint32_t layer_begin,
			   uint32_t layer_count, struct kvs_fence_ref *ret_fence, uint64_t user_data);

/* Enqueue on @stream the write that lets a SAVE AFTER copy (cuStreamWriteValue32). */
int kvs_fence_signal(struct kvs_client *client, const struct kvs_fence_ref *fence, void *stream);
/* The same from the host, for KV the CPU wrote (a store-release). */
int kvs_fence_signal_host(struct kvs_client *client, const struct kvs_fence_ref *fence);
/*
 * Enqueue on @stream a wait until value @i of @fence (a LOAD's layer
 * layer_begin + @i) is there (cuStreamWaitValue32, GEQ).  -EINVAL for
 * @i >= count; -ENODEV without a CUDA driver.
 */
int kvs_fence_wait(struct kvs_client *client, const struct kvs_fence_ref *fence, uint32_t i,
		   void *stream);
/*
 * From the host: 1 when value @i of @fence is there (or the operation
 * ended), 0 not yet; the slot's status and blocks into the optional
 * outputs (0 and the count copied, or -errno once it failed).
 */
int kvs_fence_done(struct kvs_client *client, const struct kvs_fence_ref *fence, uint32_t i,
		   int32_t *ret_status, uint32_t *ret_blocks);
/* The address, in the engine's CUDA contexts, of the slot's struct kvs_fence (for kernels). */
int kvs_fence_device_ptr(struct kvs_client *client, const struct kvs_fence_ref *fence,
			 uint64_t *ret_dptr);

/* ---- host memory ---------------------------------------------------- */

/*
 * Allocate @size bytes of shareable host memory for a CPU engine's KV
 * cache: a memfd sealed against shrinking (kvstashd refuses memory that
 * could shrink under its copies), mapped here.  Register it as
 * KVS_MEM_HOST_FD with the returned fd.  Returns 0 or -errno.
 */
int kvs_host_alloc(uint64_t size, int *ret_fd, void **ret_ptr);
void kvs_host_free(int fd, void *ptr, uint64_t size);

/* ---- CUDA engines ---------------------------------------------------- */

/*
 * libkvstash loads libcuda.so.1 on first use of these; it links no CUDA
 * library, so CPU engines on hosts without a driver are unaffected.  They
 * use the calling thread's current CUDA context (or the device's primary
 * context when none is current).
 */

/* 1 when a CUDA driver and device are usable, else 0. */
int kvs_cuda_available(void);

/* The UUID of device @device (an ordinal of this process): put it in
 * kvs_connect_opts.device_uuid with device_kind KVS_DEVICE_CUDA. */
int kvs_cuda_device_uuid(int device, uint8_t ret_uuid[16]);

/*
 * An exportable KV arena: KVS_MEM_CUDA_IPC (cuMemAlloc memory, shared by a
 * legacy IPC handle) or KVS_MEM_CUDA_VMM_FD (a VMM allocation exportable
 * as a POSIX fd; size rounded up to the allocation granularity).
 * Allocations from stream-ordered pools (cudaMallocAsync) cannot be shared
 * at all: allocate the KV cache here or with plain cudaMalloc.
 */
struct kvs_cuda_arena {
	uint64_t dptr; /* device address */
	uint64_t size;
	uint32_t kind;
	int device;
	uint64_t priv[4];
};
int kvs_cuda_arena_alloc(int device, uint64_t size, uint32_t kind, struct kvs_cuda_arena *ret);
void kvs_cuda_arena_free(struct kvs_cuda_arena *arena);

/* A layer given by device pointer; the other fields as in struct kvs_layer. */
struct kvs_cuda_layer {
	const char *name;
	uint64_t base; /* device address of segment 0 of block 0 */
	uint32_t segments;
	uint32_t num_blocks;
	uint64_t segment_bytes;
	uint64_t kv_stride;
	uint64_t block_stride;
};

/*
 * Register layers by device pointer: the library finds each pointer's
 * allocation, exports every distinct allocation once (VMM fd when it is a
 * VMM allocation, else a legacy IPC handle) and sends offsets.  -EINVAL
 * (with a log line saying how to fix it) for pool memory or a VMM
 * allocation not exportable as a fd; -ENODEV without a driver.
 */
int kvs_register_cuda(struct kvs_client *client, const struct kvs_cuda_layer *layers, unsigned n,
		      uint32_t flags);

/* ---- administration ------------------------------------------------ */

/*
 * With a client connected in KVS_ROLE_ADMIN: send @type (KVS_MSG_STATUS
 * or KVS_MSG_STATS) and call @cb for each reply message (the structs of
 * wire.h, already checked for type and size) until the daemon's END.  A
 * non-zero return from @cb stops the walk (the rest is drained) and is
 * returned.  Returns 0 or -errno.  From a daemon of a newer minor
 * revision a message may be longer than its struct (its fields come
 * first) and message types this library does not know are skipped.
 */
typedef int (*kvs_admin_fn)(void *arg, const struct kvs_msg_hdr *msg);
int kvs_admin_request(struct kvs_client *client, uint32_t type, kvs_admin_fn cb, void *arg);

/*
 * The groups of counters in a STATS reply and their fields, as the tables
 * of <kvstash/stats.h> describe them, for bindings that build their
 * structures at run time (the Python binding does).  They describe this
 * library's wire revision; a daemon of a newer minor revision may send
 * longer messages (the fields listed come first) and groups not listed
 * (kvs_admin_request() skips them).  No client needed; thread-safe.
 */
struct kvs_stats_group {
	const char *name;  /* "global", "nodes", "sessions", "registry", "ssd", ... */
	uint32_t msg_type; /* KVS_MSG_STATS_* */
	uint32_t size;	   /* bytes of one message: header, fields, reserved words */
	uint32_t nr_fields;
	uint32_t flags; /* KVS_STATS_GROUP_MANY */
	uint64_t resv[2];
};

#define KVS_STATS_GROUP_MANY (1u << 0) /* one message per node, session, ...: else one */

struct kvs_stats_field {
	const char *name; /* the member of the message's struct in wire.h */
	uint32_t offset;  /* bytes from the start of the message (its header) */
	uint32_t size;	  /* bytes */
	uint32_t type;	  /* KVS_STATS_T_* */
	uint32_t kind;	  /* KVS_STATS_K_* */
	uint32_t unit;	  /* KVS_STATS_U_* */
	uint32_t resv0;
	uint64_t resv[2];
};

/* Group @index (0, 1, ...: the order of the reply) into *@ret_group: 0, or -ENOENT past the last. */
int kvs_stats_group(uint32_t index, struct kvs_stats_group *ret_group);

/*
 * Field @index (wire order) of the group whose messages are @msg_type into
 * *@ret_field: 0; -ENOENT past the last; -EINVAL when @msg_type is no group's.
 */
int kvs_stats_field(uint32_t msg_type, uint32_t index, struct kvs_stats_field *ret_field);

/* ---- misc --------------------------------------------------------- */

/* strerror() with kvstash's meanings (e.g. KVS_EUNSEALED).  Takes errno or -errno. */
const char *kvs_strerror(int err);

/* The library's version string; compare with KVSTASH_VERSION. */
const char *kvs_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KVSTASH_KVSTASH_H */
