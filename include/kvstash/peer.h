/* SPDX-License-Identifier: MIT */
/*
 * libkvspeer: peer-to-peer KV block transfer between hosts.
 *
 * One library serves both ends.  A *serving* host (kvstashd, or an engine
 * that keeps its KV cache in its own process) registers the memory that
 * may be served and answers lock requests through struct kvspeer_host_ops;
 * a *fetching* host pulls the leading blocks of a list of keys from a
 * named peer into buffers it hands out per shard.  kvspeer(7) describes
 * the protocol, the trust model and the failure behaviour; docs/PEER.md
 * how kvstashd wires it in.
 *
 *   struct kvspeer_params p;
 *   kvspeer_params_init(&p);
 *   p.cluster = "prod"; p.node = "node-a"; p.secret_file = "/etc/kvstash/cluster.key";
 *   p.listen = "10.1.0.5:7471"; p.allow = "10.1.0.0/24";   (serving side only)
 *   p.ops = &my_ops; p.host = my_store;
 *   struct kvspeer *kp;
 *   kvspeer_new(&p, &kp);
 *   kvspeer_mem_register(kp, pool, pool_bytes);
 *   ...
 *   struct kvspeer_fetch_params f;
 *   kvspeer_fetch_params_init(&f);
 *   f.peer = "10.1.0.6:7471"; f.digest = ns_digest; f.keys = keys; f.nr_keys = 33;
 *   f.nr_shards = tp_size; f.timeout_ms = 2000; f.alloc = my_alloc; f.arg = req;
 *   int n = kvspeer_fetch(kp, &f, &err);     (or kvspeer_fetch_submit() + done)
 *
 * What a peer can do.  It must know the cluster secret (challenge-response
 * both ways) and connect from an allowed address.  It then obtains only
 * blocks locked for it, and writes nothing: with KVSPEER_TRANSPORT_TCP the
 * serving host itself sends exactly the locked ranges, checked against
 * the registered memory, on the authenticated connection; no UCX
 * endpoint exists.  KVSPEER_TRANSPORT_UCX (RDMA READ) hands out memory
 * keys over the registered memory, which only a NIC enforces: it runs
 * over verbs transports only, unless a test says KVSPEER_F_UCX_ALLOW_TCP
 * (see there for why that is never safe).
 *
 * Threads.  kvspeer_new() starts one service thread; every callback (host
 * ops, alloc, landed, done, log) runs on it, except log lines written
 * during kvspeer_new() itself, which run on the caller.  Callbacks must
 * not block for long (the thread serves every peer) and must not call
 * kvspeer_free(), kvspeer_fetch_wait(), kvspeer_fetch(), kvspeer_health()
 * or kvspeer_mem_register()/unregister() (they return -EDEADLK there).
 *
 *   call                                     external locking needed
 *   kvspeer_params_init, _fetch_params_init  no
 *   kvspeer_new, kvspeer_free                no (free: once, not in a callback)
 *   every other kvspeer_* call               no: safe from any thread
 *   a struct kvspeer_fetch                   no; valid until its last unref
 *
 * Errors: functions return 0 / a count, or -errno; ret_* outputs are left
 * untouched on failure.  The library never prints, exits, aborts or
 * installs a signal handler or logger; it reports through return values,
 * the optional log callback and kvspeer_stats().
 */
#ifndef KVSTASH_PEER_H
#define KVSTASH_PEER_H

#include <stddef.h>
#include <stdint.h>

#include <kvstash/stats.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kvspeer;
struct kvspeer_fetch;

#define KVSPEER_KEY_SIZE     16	    /* a block key, as kvstash's (opaque bytes) */
#define KVSPEER_DIGEST_SIZE  32	    /* a namespace digest, geometry included (opaque) */
#define KVSPEER_NAME_MAX     64	    /* cluster and node names, NUL included */
#define KVSPEER_ADDR_MAX     64	    /* "ADDR:PORT" strings, NUL included */
#define KVSPEER_MAX_KEYS     4096u  /* keys in one fetch */
#define KVSPEER_MAX_SHARDS   1024u  /* shards per block (tp_size) */
#define KVSPEER_MAX_ENTRIES  65536u /* keys x shards in one fetch */
#define KVSPEER_DEFAULT_PORT 7471

/* Log levels for the callback (syslog numbering, as libkvstash's). */
#define KVSPEER_LOG_ERR	    3
#define KVSPEER_LOG_WARNING 4
#define KVSPEER_LOG_INFO    6
#define KVSPEER_LOG_DEBUG   7

typedef void (*kvspeer_log_fn)(void *arg, int level, const char *msg);

/* How the bytes move (kvspeer_params.transport).  Both ends must agree. */
enum kvspeer_transport {
	/*
	 * The serving host sends each locked shard on the authenticated TCP
	 * connection, followed by the shard's generation read after the last
	 * byte left; the fetcher receives straight into its buffers.
	 */
	KVSPEER_TRANSPORT_TCP = 1,
	/*
	 * RDMA READ through UCX (libucp, loaded at run time): the fetcher
	 * reads the locked ranges with memory keys over the registered
	 * memory, then asks the server for the generations (verify) before it
	 * trusts them.  Verbs transports (rc, dc) only.
	 */
	KVSPEER_TRANSPORT_UCX = 2,
};

/*
 * kvspeer_params.flags.
 *
 * KVSPEER_F_UCX_ALLOW_TCP: let KVSPEER_TRANSPORT_UCX run over UCX's TCP
 * transport, for tests and benchmarks between programs that trust each
 * other.  Over TCP, UCX has no memory protection at all: its software RMA
 * (ucp/rma/rma_sw.c) and the TCP transport's own PUT protocol
 * (uct/tcp/tcp_ep.c, uct_tcp_ep_handle_put_req) read and write whatever
 * address a connected peer names, and every UCX TCP interface listens for
 * anyone.  Never set it where an untrusted host can reach the node.
 */
#define KVSPEER_F_UCX_ALLOW_TCP (1u << 0)
#define KVSPEER_F__ALL		KVSPEER_F_UCX_ALLOW_TCP

/* ---- Serving: what the host provides -------------------------------- */

/* One shard of a locked block, as the host's lock callback reports it. */
struct kvspeer_shard {
	const void *addr;    /* inside memory given to kvspeer_mem_register() */
	uint64_t len;	     /* 1 .. kvspeer_params.max_shard_bytes */
	uint64_t generation; /* the slot's generation now (see generation()) */
};

/* A lock request from an authenticated peer, as the lock callback sees it. */
struct kvspeer_lock_req {
	const uint8_t *digest; /* KVSPEER_DIGEST_SIZE bytes */
	const uint8_t *keys;   /* nr_keys x KVSPEER_KEY_SIZE bytes, in prefix order */
	uint32_t nr_keys;      /* 1 .. max_keys */
	uint32_t nr_shards;    /* the requester's shards per block: tp_size, or 1 if replicated */
	uint64_t lock_id;      /* the library's id of this lock (for the host's logs) */
	const char *peer_node; /* the authenticated peer's node name */
	const char *peer_addr; /* its "ADDR:PORT" */
};

/*
 * The serving host's callbacks, all called on the service thread.
 *
 * lock: pin the longest prefix of req->keys that is resident in
 *   req->digest's namespace with exactly req->nr_shards shards per block,
 *   so that none of those slots is evicted or reused until unlock().  For
 *   each pinned block i (in order) fill ret_shards[i * nr_shards + s] for
 *   every shard s, and ret_cookies[i] with a handle of the host's choice
 *   (given back to unlock() and generation()).  Return the number of
 *   blocks pinned (0 .. nr_keys; stop at the first miss) or -errno.  The
 *   library then checks every range against the registered memory; a
 *   block with a range outside it ends the prefix there (the host's bug,
 *   counted as KVSPEER_FAIL_HOST), and its pins are still given back.
 *   Must not block.
 *
 * unlock: drop the pins of blocks an earlier lock() returned, once per
 *   lock: at RELEASE, at the lock's TTL, when the requester's connection
 *   closes, or at kvspeer_free().  Called with the first @nr cookies of
 *   that lock() call, exactly once for each.
 *
 * generation: the current generation of shard @shard of a locked block.
 *   A host that reuses a slot must bump its generation, then issue a
 *   release fence (atomic_thread_fence(memory_order_release)), before it
 *   writes the first byte of the new contents; this callback reads it
 *   with an acquire load.  The library reads it after the last byte of a
 *   shard was sent (TCP) or read by the peer (UCX), so an unchanged
 *   generation proves that the peer got the slot's contents as locked:
 *   the seqlock rule.  A lock pins its slots, so a generation changes
 *   only when the host broke its pin (a bug) or a lock outlived its TTL
 *   while the service thread could not run (the host SIGSTOPped).
 *
 * thread_start, thread_stop (optional): called on the service thread
 *   first and last, before any other callback and after the last one, for
 *   what a host must do per thread (kvstashd: rcu_register_thread() for
 *   its lock-free index).  Also used when the service only fetches.
 */
struct kvspeer_host_ops {
	int (*lock)(void *host, const struct kvspeer_lock_req *req,
		    struct kvspeer_shard *ret_shards, uint64_t *ret_cookies);
	void (*unlock)(void *host, const uint64_t *cookies, uint32_t nr);
	uint64_t (*generation)(void *host, uint64_t cookie, uint32_t shard);
	void (*thread_start)(void *host);
	void (*thread_stop)(void *host);
	void *resv[4];
};

/* ---- The service ----------------------------------------------------- */

struct kvspeer_params {
	uint32_t transport;	 /* enum kvspeer_transport; default TCP */
	uint32_t flags;		 /* KVSPEER_F_* */
	const char *cluster;	 /* required: peers of another cluster are refused */
	const char *node;	 /* required: this node's name, told to peers */
	uint64_t epoch;		 /* this node's registry epoch (0: none); kvspeer_set_epoch() */
	const char *secret_file; /* required: the cluster secret (see below) */
	/*
	 * Serving: "ADDR:PORT" of the cluster interface (IPv4, or [IPv6]:PORT;
	 * port 0 picks one, see kvspeer_local_addr()).  A wildcard address is
	 * refused: bind the cluster interface only.  NULL: fetch only.
	 * Outgoing connections leave from ADDR too when it is set.
	 */
	const char *listen;
	/* Serving: peers allowed to connect, "CIDR[,CIDR...]" (10.1.0.0/24, fd00::/64, 10.1.0.7). */
	const char *allow;
	const char *ucx_devices;     /* UCX transport: UCX_NET_DEVICES (NULL: UCX's choice) */
	uint32_t lock_ttl_ms;	     /* longest lock a peer gets; default 10000 */
	uint32_t max_conns;	     /* serving: connections at once; default 256 */
	uint32_t max_conns_per_peer; /* serving: per peer host (address, any port); default 16 */
	uint32_t max_locks_per_peer; /* serving: locks per peer host; default 64 */
	uint32_t max_keys;	     /* keys per lock request; default and limit KVSPEER_MAX_KEYS */
	uint32_t hello_timeout_ms;   /* HELLO and AUTH must be done within; default 5000 */
	uint32_t
		io_timeout_ms; /* a message or a send stalled this long ends the connection; default 5000 */
	uint32_t idle_timeout_ms; /* serving: an idle connection without locks; default 60000 */
	uint32_t pool_idle;	  /* fetching: idle connections kept per peer; default 4 */
	uint32_t sock_buf_bytes;  /* SO_SNDBUF/SO_RCVBUF; 0 (default): kernel autotuning */
	uint64_t max_shard_bytes; /* largest shard served or accepted; default 1 GiB */
	const struct kvspeer_host_ops
		*ops;	    /* serving: required with listen (lock, unlock, generation) */
	void *host;	    /* first argument of every host op */
	kvspeer_log_fn log; /* optional */
	void *log_arg;
	/*
	 * Serving: connections not authenticated yet, from all hosts together
	 * (0: the default, max_conns / 4, at least 1) and from one host (0: the
	 * default, 4).  See kvspeer(7), ADMISSION.
	 */
	uint32_t max_unauth;
	uint32_t max_unauth_per_peer;
	uint64_t resv[7];
};

/* Fill @p with the defaults above (everything else zero / NULL). */
void kvspeer_params_init(struct kvspeer_params *p);

/*
 * Check @p, read the secret, bind and listen (when p->listen), load UCX
 * (KVSPEER_TRANSPORT_UCX), start the service thread.
 *
 * The secret file must be a regular file owned by the effective uid with
 * no group or other permission bits (0600 or 0400), holding at least 32
 * bytes (trailing whitespace is not part of the secret), at most 4096.
 *
 * Returns 0 or -errno:
 *   -EINVAL           bad parameters (the log callback says which)
 *   -EPERM            the secret file is readable by others, or not the user's
 *   -ENOENT, -EACCES  the secret file cannot be opened
 *   -EADDRINUSE, -EADDRNOTAVAIL  cannot bind p->listen
 *   -EPROTONOSUPPORT  UCX transport: no libucp, or no verbs device (and
 *                     KVSPEER_F_UCX_ALLOW_TCP not set)
 *   -ENOMEM
 */
int kvspeer_new(const struct kvspeer_params *p, struct kvspeer **ret_kp);

/*
 * Stop: every fetch still running completes (done callbacks run, with the
 * prefix it had verified), every lock held for peers is unlocked, every
 * connection closed, the thread joined.  Accepts NULL.
 */
void kvspeer_free(struct kvspeer *kp);

/* The bound listen address as "ADDR:PORT" (port 0 resolved).  -ENOTCONN: fetch only. */
int kvspeer_local_addr(struct kvspeer *kp, char *buf, size_t len);

/* A new registry epoch, told to peers that connect from now on. */
void kvspeer_set_epoch(struct kvspeer *kp, uint64_t epoch);

/*
 * Memory that may be served: [addr, addr + len).  Only ranges inside
 * registered memory, and only while locked, are ever sent or readable.
 * Regions must not overlap.  With the UCX transport the memory is
 * registered with the NIC (remote read).  -EINVAL (empty, overlap),
 * -ENOSPC (64 regions at most), -EDEADLK (from a callback).
 */
int kvspeer_mem_register(struct kvspeer *kp, const void *addr, size_t len);

/* Drop a region by its start address.  -EBUSY while a lock uses it, -ENOENT. */
int kvspeer_mem_unregister(struct kvspeer *kp, const void *addr);

/* ---- Fetching -------------------------------------------------------- */

/*
 * Where shard @shard (of @nr_shards) of block @block goes: a buffer of at
 * least @len bytes that the library may write until the fetch's done
 * callback, or NULL to end the prefix before this block (pool full).
 * Called on the service thread, blocks in order, once per shard, before
 * any byte moves.  Buffers of blocks past the final prefix hold no valid
 * data; the host reuses them after done.
 */
typedef void *(*kvspeer_alloc_fn)(void *arg, uint32_t block, uint32_t shard, uint64_t len);

/* Optional: the verified prefix grew to @nr_blocks (TCP: per block). */
typedef void (*kvspeer_landed_fn)(void *arg, uint32_t nr_blocks);

/*
 * The fetch completed with @nr_blocks leading blocks fetched and verified
 * (0 .. nr_keys; fewer on any fault: kvspeer_fetch_result() says which).
 * By then the library writes no destination buffer any more, and the
 * peer's lock is released or being released (its connection closes if
 * the release cannot be sent).  @f stays valid during the call.
 */
typedef void (*kvspeer_done_fn)(void *arg, struct kvspeer_fetch *f, int nr_blocks);

struct kvspeer_fetch_params {
	const char *peer;      /* required: "ADDR:PORT" (a node hint or the registry's answer) */
	const uint8_t *digest; /* required: KVSPEER_DIGEST_SIZE bytes */
	const uint8_t *keys;   /* required: nr_keys x KVSPEER_KEY_SIZE bytes (copied) */
	uint32_t nr_keys;      /* 1 .. KVSPEER_MAX_KEYS */
	uint32_t nr_shards;    /* shards per block: tp_size, or 1 for a replicated layout */
	uint32_t timeout_ms;   /* required: the deadline, from submission */
	uint32_t resv0;
	uint64_t expect_epoch;	  /* refuse a peer with another epoch (stale registry); 0: any */
	const char *expect_node;  /* refuse a peer with another node name; NULL: any */
	kvspeer_alloc_fn alloc;	  /* required */
	kvspeer_landed_fn landed; /* optional */
	kvspeer_done_fn done;	  /* optional (kvspeer_fetch_wait() instead) */
	void *arg;
	uint64_t resv[4];
};

void kvspeer_fetch_params_init(struct kvspeer_fetch_params *p);

/*
 * Start a fetch; *@ret_f gets a reference (kvspeer_fetch_unref()).  The
 * done callback may run before this returns (on the service thread): a
 * host that joins fetches records @f under its own lock before it submits
 * and takes that lock in done.  -EINVAL, -ENOMEM, -ESHUTDOWN.
 */
int kvspeer_fetch_submit(struct kvspeer *kp, const struct kvspeer_fetch_params *p,
			 struct kvspeer_fetch **ret_f);

/*
 * Join a fetch in progress: @done(arg, f, n) runs after the owner's done,
 * with the same result.  How concurrent fetches of the same keys share one
 * transfer: the host keeps its in-flight fetches by key (kvstashd: its
 * loading slots), and a second request for a key that is loading joins
 * that fetch instead of starting one.  -EALREADY if it already completed
 * (read kvspeer_fetch_result()).
 */
int kvspeer_fetch_join(struct kvspeer_fetch *f, kvspeer_done_fn done, void *arg);

/*
 * The result: the verified prefix (>= 0), or -EINPROGRESS until it is
 * final (it is, inside the done callbacks).  *@ret_error
 * (optional) gets why the prefix is shorter than the keys: 0 (the peer
 * holds no more, or all came), or -errno: -ETIMEDOUT (deadline),
 * -ECONNREFUSED / -EHOSTUNREACH / -ENETUNREACH (connect), -ECONNRESET
 * (lost), -EACCES (authentication either way), -EPROTO (malformed peer),
 * -ESTALE (generation changed, or epoch / node not the expected one),
 * -ENOSPC (alloc returned NULL), -EREMOTEIO (the peer refused: see log),
 * -ESHUTDOWN (kvspeer_free()).
 */
int kvspeer_fetch_result(const struct kvspeer_fetch *f, int *ret_error);

/*
 * Block until the fetch completed and every done callback (the owner's,
 * the joiners') returned, so what they use may be freed then; returns
 * kvspeer_fetch_result().  -EDEADLK in a callback.
 */
int kvspeer_fetch_wait(struct kvspeer_fetch *f, int *ret_error);

void kvspeer_fetch_ref(struct kvspeer_fetch *f);
/* Drop a reference; the last frees.  Accepts NULL. */
void kvspeer_fetch_unref(struct kvspeer_fetch *f);

/* Submit, wait, unref: the verified prefix (>= 0) or -errno from submit. */
int kvspeer_fetch(struct kvspeer *kp, const struct kvspeer_fetch_params *p, int *ret_error);

/* ---- Health, statistics, peers --------------------------------------- */

struct kvspeer_health {
	char node[KVSPEER_NAME_MAX];
	uint64_t epoch;
	uint64_t uptime_ms;
	uint32_t locks;	 /* locks the peer holds for anyone */
	uint32_t conns;	 /* connections the peer serves */
	uint32_t rtt_us; /* HEALTH round trip, handshake excluded */
	uint32_t transport;
};

/* Connect (or reuse), authenticate, ask HEALTH.  -ETIMEDOUT etc. as fetches. */
int kvspeer_health(struct kvspeer *kp, const char *peer, int timeout_ms,
		   struct kvspeer_health *ret_health);

/*
 * Failure kinds, counted per side in struct kvspeer_stats: KVSPEER_FAIL_<KIND>
 * for each of KVS_PEER_FAILS (<kvstash/stats.h>: the kinds, what each is,
 * in this order).
 */
#define KVSPEER_FAIL_ENUM_(_, KIND, kind, what) KVSPEER_FAIL_##KIND,
/* clang-format off */
enum kvspeer_fail {
	KVS_PEER_FAILS(KVSPEER_FAIL_ENUM_, _)
	KVSPEER_FAIL__MAX,
};
/* clang-format on */
#undef KVSPEER_FAIL_ENUM_

/* The name of a failure kind ("connect", ...), or NULL. */
const char *kvspeer_fail_name(unsigned kind);

#define KVSPEER_HIST_BUCKETS 24 /* bucket i: latency < 2^i microseconds (last: the rest) */

struct kvspeer_stats {
	/* fetching */
	uint64_t fetches;				 /* completed */
	uint64_t fetches_full;				 /* every key came */
	uint64_t fetches_partial;			 /* some */
	uint64_t fetches_empty;				 /* none */
	uint64_t fetch_blocks;				 /* verified blocks */
	uint64_t fetch_bytes;				 /* verified bytes */
	uint64_t fetch_latency_us[KVSPEER_HIST_BUCKETS]; /* submit to done */
	uint64_t fetch_latency_sum_us;
	uint64_t fetch_fail[KVSPEER_FAIL__MAX];
	/* serving */
	uint64_t serve_blocks; /* blocks whose every shard was sent (TCP) or verified (UCX) */
	uint64_t serve_bytes;
	uint64_t locks_held;	 /* now */
	uint64_t locks_granted;	 /* lock requests that pinned >= 1 block */
	uint64_t locks_released; /* by RELEASE */
	uint64_t locks_expired;	 /* at their TTL */
	uint64_t locks_dropped;	 /* their connection closed */
	uint64_t conns_open;	 /* now, both sides */
	uint64_t conns_accepted;
	uint64_t serve_fail[KVSPEER_FAIL__MAX];
	/*
	 * Admission (serving; each also counted as serve_fail[LIMIT]): why a
	 * connection or a lock was refused.  kvspeer(7), ADMISSION.
	 */
	uint64_t conns_unauth;		/* now: connections not authenticated yet */
	uint64_t refused_host_conns;	/* the host holds max_conns_per_peer */
	uint64_t refused_host_unauth;	/* the host holds max_unauth_per_peer unauthenticated */
	uint64_t refused_unauth_budget; /* max_unauth reached, the host holds the most of it */
	uint64_t refused_total;		/* max_conns reached, no handshake to close for it */
	uint64_t evicted_unauth;	/* unauthenticated, closed to make room for a newcomer */
	uint64_t locks_refused_host;	/* the host holds max_locks_per_peer locks */
	uint64_t resv[1];
};

int kvspeer_stats(struct kvspeer *kp, struct kvspeer_stats *ret_stats);

/* Per-peer connection state (kvspeer_peer_info.state). */
enum kvspeer_peer_state {
	KVSPEER_PEER_IDLE = 1, /* connections open, none busy */
	KVSPEER_PEER_BUSY = 2, /* a request in progress */
	KVSPEER_PEER_CONNECTING = 3,
	KVSPEER_PEER_FAILED = 4, /* the last attempt failed: last_error */
	KVSPEER_PEER_CLOSED = 5, /* no connection, last one ended cleanly */
};

#define KVSPEER_PEER_SERVER 1u /* a peer we fetch from */
#define KVSPEER_PEER_CLIENT 2u /* a peer that fetches from us */

struct kvspeer_peer_info {
	char addr
		[KVSPEER_ADDR_MAX]; /* server: its listen address; client: the address it comes from */
	char node[KVSPEER_NAME_MAX]; /* authenticated node name ("" until then) */
	uint32_t role;		     /* KVSPEER_PEER_SERVER or _CLIENT */
	uint32_t state;		     /* enum kvspeer_peer_state */
	uint32_t conns;		     /* open connections */
	uint32_t locks;		     /* locks held: ours on it (server) or its on us (client) */
	uint64_t epoch;
	uint64_t blocks; /* fetched from it / served to it */
	uint64_t bytes;
	uint64_t failures;
	int32_t last_error; /* -errno of the last failure, 0 if none */
	uint32_t resv0;
	uint64_t idle_ms; /* since the last activity */
};

/*
 * Up to @max peers into @ret (a snapshot); returns how many there are in
 * all (may exceed @max).  Client rows are per peer address.
 */
int kvspeer_peers(struct kvspeer *kp, struct kvspeer_peer_info *ret, unsigned max);

/*
 * Serving kvstashd nodes from an engine's own memory.  A kvstashd fetches
 * a namespace's blocks by the registry's digest of its name and geometry
 * and takes each shard as one pool slot: the block's layers in
 * registration order, each layer's segments in order, zero-padded to a
 * multiple of 512 bytes.  An engine that serves its own KV cache to
 * kvstashd nodes (it runs the service itself, not kvstashd) describes its
 * namespace as its engines register it with kvstashd (kvs_register(3):
 * the namespace of kvs_connect_opts, the tensor-parallel size, each
 * layer's segments and segment bytes), and lays its served shards out so:
 * kvspeer_kvstash_ns() gives the digest to answer lock requests for
 * (struct kvspeer_lock_req's digest) and the length every shard must have.
 */
struct kvspeer_kvstash_layer {
	uint32_t segments;	/* 1, or 2 for split K and V */
	uint32_t resv;		/* 0 */
	uint64_t segment_bytes; /* one segment of one block of one rank */
};

struct kvspeer_kvstash_ns {
	const char *name;    /* the namespace, at most 4095 bytes */
	uint32_t tp_size;    /* the engines' tensor-parallel size, >= 1 */
	uint32_t replicated; /* 1: every rank holds the whole block (MLA): one shard; else 0 */
	uint32_t nr_layers;  /* >= 1 */
	const struct kvspeer_kvstash_layer *layers;
};

/*
 * The digest kvstashd gives @ns (KVSPEER_DIGEST_SIZE bytes) and the bytes
 * of one shard of one of its blocks (shards per block: 1 when replicated,
 * else tp_size).  0, or -EINVAL for no name, no layers, a zero count or
 * size, segments other than 1 or 2, a reserved word set, a shard over 2^48
 * bytes or an empty or overlong name; -ENOMEM.
 */
int kvspeer_kvstash_ns(const struct kvspeer_kvstash_ns *ns, uint8_t ret_digest[KVSPEER_DIGEST_SIZE],
		       uint64_t *ret_shard_bytes);

/* The library's version, "MAJOR.MINOR.PATCH". */
const char *kvspeer_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KVSTASH_PEER_H */
