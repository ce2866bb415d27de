/* SPDX-License-Identifier: MIT */
/*
 * libkvspeer's internals: the service, its connections, locks and fetches,
 * as data.  No function is declared here: each module's are in its own
 * header (kp.h, conn.h, serve.h, admit.h, fetch*.h, ucx.h), so that what
 * a file includes is what it calls, and scripts/check-includes sees the
 * modules' real graph (conn.c calls neither side: struct conn_ops and
 * struct conn_rx are how a side's code is reached).
 *
 * Ownership.  Everything here belongs to the service thread (service.c's
 * loop), except what names another guard:
 *   kp->cmd_lock   the queue of submitted work (cmds) and kp->stopping
 *   kp->reg_lock   the registered regions (read by the thread when it
 *                  checks a lock's ranges, written by mem_register())
 *   f->lock        a fetch's result, its waiters, its done flag
 *   kp->st         counters: relaxed atomics, one writer (the thread) for
 *                  most; readers take per-field snapshots
 * A struct conn, a struct plock, a peer_ent and a fetch's transfer state
 * are touched by the service thread only.
 */
#ifndef KVS_PEER_INTERNAL_H
#define KVS_PEER_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include <kvstash/peer.h>
#include <urcu/list.h>

#include "peer/addr.h"
#include "peer/auth.h"
#include "peer/pwire.h"

struct pucx;
struct pucx_ep;
struct pucx_rkey;

#define NSEC_PER_MSEC	1000000ull
#define PEER_RBUF	16384u /* a connection's read-ahead buffer */
#define PEER_MAX_ERRORS 16u    /* refused requests before a connection is ended */
#define PEER_MAX_PEERS	1024u  /* client-side peer table */
#define PEER_TICK_MS	10     /* timers' resolution */

static inline uint64_t peer_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * What an epoll event's data.ptr points at: the function its events go
 * to, set by whoever owns the fd (the wake eventfd and UCX: service.c; the
 * listening socket: serve.c; a connection: conn.c), which finds its object
 * again with caa_container_of().  The loop knows no kind of source.
 */
struct ev_src {
	void (*fn)(struct ev_src *src, uint32_t events);
};

/* ---- Registered memory ------------------------------------------------- */

struct region {
	uintptr_t base;
	uint64_t len;
	uint32_t refs; /* locked shards inside (reg_lock) */
	void *memh;    /* UCX: ucp_mem_h */
	void *rkey;    /* UCX: packed key (ucp_rkey_buffer_release) */
	size_t rkey_len;
};

/* ---- Server-side locks -------------------------------------------------- */

struct lock_shard {
	const uint8_t *addr;
	uint64_t len;
	uint64_t gen;
	uint32_t region; /* index in kp->regions when locked */
};

struct plock {
	struct cds_list_head link; /* conn->locks */
	struct conn *c;
	uint64_t id;
	uint64_t expires_ns;
	uint32_t nr_blocks;
	uint32_t nr_shards;
	bool streaming;
	uint64_t *cookies;	   /* nr_blocks */
	struct lock_shard *shards; /* nr_blocks x nr_shards */
};

/* A peer host: family and address bytes, no port (admit.c). */
struct peer_host {
	uint32_t family; /* AF_INET (addr[0..4)) or AF_INET6 */
	uint32_t scope;	 /* IPv6 link-local: the interface (fe80::1 on two links is two hosts) */
	uint8_t addr[16];
};

/* Per peer host (server side): what the per-host limits count (admit.c). */
struct peer_acct {
	struct peer_host host;
	struct peer_acct *hnext; /* hash chain, or the free list */
	uint32_t conns;		 /* open */
	uint32_t unauth;	 /* of them, not authenticated yet */
	uint32_t locks;
};

/* ---- Connections ---------------------------------------------------------- */

enum conn_side { SIDE_SERVE, SIDE_FETCH };
enum conn_state {
	CS_CONNECTING, /* fetch: non-blocking connect in progress */
	CS_HELLO,      /* serve: waiting for HELLO; fetch: for HELLO_REPLY */
	CS_AUTH,       /* serve: waiting for AUTH; fetch: for AUTH_OK */
	CS_READY,
	CS_DEAD, /* closed; freed at the end of the loop turn */
};

struct conn;

/*
 * The messages a connection takes in the state it is in, set by the side
 * that owns it at each step of its handshake (libfabric's
 * ep->cur_rx.handler): serve.c for accepted connections, fetch.c for
 * ours.  conn.c parses and bounds the bytes and hands each message here.
 */
struct conn_rx {
	/*
	 * May a message of @type arrive now?  Asked of the header, before the
	 * payload is read: a peer that has not authenticated can make us hold
	 * at most a HELLO's or an AUTH's bytes, and no peer can send a type
	 * meant for the other side (a 2 MiB QUERY_REPLY to a server).
	 */
	bool (*expects)(const struct conn *c, unsigned type);
	/* A whole message.  <0 ends the connection (an ERROR queued first still goes out). */
	int (*handle)(struct conn *c, const struct pw_hdr *h, const uint8_t *payload);
};

/* What the side that owns a connection does at the events conn.c sees. */
struct conn_ops {
	/* The non-blocking connect finished, or failed (fetch). */
	void (*connected)(struct conn *c);
	/* The raw bytes being sent (c->raw_src) are out: the next, or none.  <0: closed. */
	int (*sent)(struct conn *c);
	/* @c closed, once, in state @was: its fd is gone; it is freed after the loop turn. */
	void (*closed)(struct conn *c, int err, enum conn_state was);
};

struct conn {
	struct ev_src ev;
	const struct conn_ops *ops;
	const struct conn_rx *rx;	/* NULL while CS_CONNECTING */
	struct cds_list_head link;	/* kp->conns */
	struct cds_list_head idle_link; /* a peer_ent's idle list */
	struct cds_list_head dead_link; /* kp->dead */
	/* kp->unauth, oldest first, until authenticated (serve) */
	struct cds_list_head unauth_link;
	struct kvspeer *kp;
	int fd;
	enum conn_side side;
	enum conn_state state;
	uint32_t events; /* epoll mask now */
	struct sockaddr_storage addr;
	char addr_str[KVSPEER_ADDR_MAX];
	char node[KVSPEER_NAME_MAX];
	uint64_t epoch;
	uint32_t transport;
	uint64_t created_ns;
	uint64_t deadline_ns;	/* handshake deadline (state < READY) */
	uint64_t last_rx_ns;	/* last byte received */
	uint64_t last_tx_ns;	/* last byte sent */
	uint64_t rx_partial_ns; /* a message started arriving then; 0: none */
	uint32_t errors;
	uint32_t seq;

	/* handshake transcript (auth.c) */
	uint8_t nonce[PW_NONCE_SIZE];
	uint8_t hello[PW_HELLO_MAX];
	size_t hello_len;
	uint8_t reply[PW_HELLO_MAX];
	size_t reply_len;

	/* receive */
	uint8_t *rbuf; /* PEER_RBUF bytes */
	size_t rstart, rend;
	uint8_t *big; /* a payload larger than rbuf */
	size_t big_len, big_have;
	struct pw_hdr big_hdr;
	uint8_t *raw_dst; /* raw shard bytes go here (fetch, TCP) */
	uint64_t raw_left;
	bool rx_paused; /* serve: requests wait while a stream runs */
	bool rx_kick;	/* serve: a stream ended; parse what waits in rbuf */

	/* send */
	struct pw_buf out;
	size_t out_off;
	const uint8_t *raw_src; /* serve: the shard being streamed */
	uint64_t raw_src_left;
	uint64_t tx_wait_ns; /* bytes have waited to be sent since; 0: none wait */

	/* serve side */
	struct cds_list_head locks;
	uint32_t nr_locks;
	struct peer_acct *acct;
	struct plock *stream; /* the lock being streamed */
	uint32_t st_block, st_shard, st_end, st_first;
	uint64_t bytes_served, blocks_served;

	/* fetch side */
	struct peer_ent *pe;
	struct fetch *f;    /* the request using it; NULL when idle */
	bool reused;	    /* came from the idle pool */
	uint32_t drain_seq; /* a RELEASE_REPLY still to come (0: none) */
	uint64_t idle_since_ns;
	struct pucx_ep *uep; /* UCX endpoint to the peer's worker */
	uint32_t nr_regions, regions_version;
	struct {
		uint64_t base, len;
		struct pucx_rkey *rkey;
	} regions[PW_MAX_REGIONS];
};

/* ---- Client side: peers and fetches --------------------------------------- */

struct peer_ent {
	struct cds_list_head link; /* kp->peers */
	char addr[KVSPEER_ADDR_MAX];
	struct sockaddr_storage sa;
	socklen_t salen;
	char node[KVSPEER_NAME_MAX];
	uint64_t epoch;
	struct cds_list_head idle; /* conns ready for reuse */
	uint32_t nr_idle;
	uint32_t conns; /* open, idle or not */
	uint32_t busy;
	uint32_t connecting; /* conns of ours not past the handshake (CS_CONNECTING..CS_AUTH) */
	struct cds_list_head waiting;	/* fetches waiting for one of them (fetch.wait_link) */
	struct cds_list_head kick_link; /* kp->kick: a waiting fetch may go now */
	uint32_t locks;
	int last_error;
	bool ever_ok;
	uint64_t blocks, bytes, failures;
	uint64_t last_ns;
};

enum fetch_kind { FK_FETCH, FK_HEALTH };
enum fetch_state { FS_QUEUED, FS_CONNECT, FS_QUERY, FS_DATA, FS_VERIFY, FS_DONE };

struct waiter {
	kvspeer_done_fn done;
	void *arg;
	struct cds_list_head link; /* fetch.waiters */
};

struct fetch {
	struct kvspeer *kp;
	int refs; /* atomic */
	enum fetch_kind kind;
	struct cds_list_head link;	/* kp->cmds (queued) or kp->fetches (running) */
	struct cds_list_head wait_link; /* pe->waiting: no conn free, handshakes at the limit */

	/* the request (copies) */
	char peer[KVSPEER_ADDR_MAX];
	uint8_t digest[KVSPEER_DIGEST_SIZE];
	uint8_t *keys;
	uint32_t nr_keys, nr_shards;
	uint64_t expect_epoch;
	char expect_node[KVSPEER_NAME_MAX];
	kvspeer_alloc_fn alloc;
	kvspeer_landed_fn landed;
	kvspeer_done_fn done;
	void *arg;
	uint64_t submit_ns, deadline_ns;

	/* the transfer (service thread) */
	enum fetch_state state;
	struct conn *c;
	struct peer_ent *pe; /* kept alive by the fetch's connection (conns > 0) */
	bool retried;
	bool lock_held; /* counted in pe->locks */
	uint32_t seq;
	uint64_t lock_id;
	uint32_t nr_locked, nr_alloc, verified;
	struct pw_entry *ents; /* nr_locked x nr_shards */
	uint8_t **dst;	       /* nr_alloc x nr_shards */
	uint32_t cur_block, cur_shard;
	uint32_t gets_out;	/* UCX gets in flight */
	uint32_t lock_ttl_ms;	/* granted by the peer */
	uint64_t renew_at_ns;	/* UCX: RENEW the lock then (the peer sees no stream) */
	uint32_t renew_seq;	/* a RENEW awaiting its reply; 0: none */
	uint32_t get_failed_at; /* first block whose get failed (UCX) */
	int err;		/* why the prefix is short */
	struct kvspeer_health health;
	uint64_t health_sent_ns;

	/* the result (f->lock) */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool resolved;	/* result and err final (set before the done callbacks) */
	bool completed; /* every done callback returned */
	int result;
	struct cds_list_head waiters; /* struct waiter.link, in join order */
};

/* ---- The service ------------------------------------------------------------ */

struct kvspeer {
	struct kvspeer_params p;
	char cluster[KVSPEER_NAME_MAX];
	char node[KVSPEER_NAME_MAX];
	uint64_t epoch; /* atomic: kvspeer_set_epoch() from any thread */
	struct peer_secret secret;
	struct peer_allow allow;
	bool serving;
	struct sockaddr_storage listen_sa;
	socklen_t listen_salen;
	char listen_str[KVSPEER_ADDR_MAX];
	uint64_t start_ns;
	uint64_t next_lock_id;

	int epfd;
	bool quit; /* thread: run_cmds() saw stopping */
	int wakefd;
	int listenfd;
	struct ev_src wake_ev, listen_ev, ucx_ev;
	pthread_t thread;
	bool thread_started;

	pthread_mutex_t cmd_lock;
	struct cds_list_head cmds; /* submitted fetches (cmd_lock) */
	bool stopping;		   /* cmd_lock */
	struct cds_list_head ctl;  /* control requests, e.g. peers snapshot (cmd_lock) */

	struct cds_list_head conns;   /* every connection, both sides */
	struct cds_list_head dead;    /* closed this turn */
	struct cds_list_head fetches; /* running */
	struct cds_list_head peers;   /* peer_ent, client side */
	/* peer_ent.kick_link: waiting fetches to start this loop turn */
	struct cds_list_head kick;
	uint32_t nr_peers;
	/* Admission (admit.c): accounts per host, the unauthenticated ones by age. */
	uint32_t nr_serve_conns;
	struct peer_acct *accts;      /* max_conns of them */
	struct peer_acct **acct_hash; /* by host */
	uint32_t acct_mask;
	uint64_t acct_seed; /* random: no peer can aim its addresses at one chain */
	struct peer_acct *acct_free;
	struct cds_list_head unauth; /* struct conn.unauth_link */
	uint32_t nr_unauth;
	uint32_t *unauth_hist; /* [k]: hosts holding k unauthenticated connections */
	uint64_t next_tick_ns;

	pthread_mutex_t reg_lock;
	struct region regions[PW_MAX_REGIONS];
	uint32_t nr_regions;
	uint32_t regions_version;

	struct pucx *ucx;

	/* log rate limit (thread only): peer-caused lines */
	uint64_t log_window_ns;
	uint32_t log_in_window;
	uint32_t log_suppressed;

	struct kvspeer_stats st;
};

/* Control requests run on the service thread for a caller that waits. */
struct ctl_req {
	struct cds_list_head link;
	void (*fn)(struct kvspeer *kp, struct ctl_req *r);
	void *arg;
	int result;
	bool done;
	pthread_cond_t cond; /* signalled under cmd_lock */
};

/*
 * Relaxed: counters with no ordering partner; a snapshot is per field.
 * (locks_held's drop in lock_end() is the one release: serve.c.)
 */
#define STAT_ADD(kp, field, n) __atomic_fetch_add(&(kp)->st.field, (uint64_t)(n), __ATOMIC_RELAXED)
#define STAT_SUB(kp, field, n) __atomic_fetch_sub(&(kp)->st.field, (uint64_t)(n), __ATOMIC_RELAXED)

#endif /* KVS_PEER_INTERNAL_H */
