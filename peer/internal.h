/* SPDX-License-Identifier: MIT */
/*
 * libkvspeer's internals: the service, its connections, locks and fetches.
 *
 * Ownership.  Everything here belongs to the service thread (peer.c's
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
#include "peer/wire.h"

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

/* What an epoll event's data.ptr points at. */
enum ev_kind { EV_WAKE, EV_LISTEN, EV_CONN, EV_UCX };
struct ev_src {
	enum ev_kind kind;
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

struct conn {
	struct ev_src ev;
	struct cds_list_head link;	  /* kp->conns */
	struct cds_list_head idle_link;	  /* a peer_ent's idle list */
	struct cds_list_head dead_link;	  /* kp->dead */
	struct cds_list_head unauth_link; /* kp->unauth, oldest first, until authenticated (serve) */
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
	uint32_t connecting;	/* conns of ours not past the handshake (CS_CONNECTING..CS_AUTH) */
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
	int wakefd;
	int listenfd;
	struct ev_src wake_ev, listen_ev, ucx_ev;
	pthread_t thread;
	bool thread_started;

	pthread_mutex_t cmd_lock;
	struct cds_list_head cmds; /* submitted fetches (cmd_lock) */
	bool stopping;	   /* cmd_lock */
	struct cds_list_head ctl;  /* control requests, e.g. peers snapshot (cmd_lock) */

	struct cds_list_head conns;   /* every connection, both sides */
	struct cds_list_head dead;    /* closed this turn */
	struct cds_list_head fetches; /* running */
	struct cds_list_head peers;   /* peer_ent, client side */
	struct cds_list_head kick;    /* peer_ent.kick_link: waiting fetches to start this loop turn */
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

/* ---- peer.c ----------------------------------------------------------------- */

void kp_log(struct kvspeer *kp, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A line caused by a peer: rate-limited so no peer can flood the host's log. */
void kp_log_peer(struct kvspeer *kp, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool kp_on_thread(struct kvspeer *kp);
/* Queue a fetch for the thread.  -ESHUTDOWN once kvspeer_free() began. */
int kp_submit(struct kvspeer *kp, struct fetch *f);
int kp_epoll_set(struct kvspeer *kp, struct conn *c, uint32_t events);
uint64_t kp_epoch(struct kvspeer *kp);

/*
 * Relaxed: counters with no ordering partner; a snapshot is per field.
 * (locks_held's drop in lock_end() is the one release: serve.c.)
 */
#define STAT_ADD(kp, field, n) __atomic_fetch_add(&(kp)->st.field, (uint64_t)(n), __ATOMIC_RELAXED)
#define STAT_SUB(kp, field, n) __atomic_fetch_sub(&(kp)->st.field, (uint64_t)(n), __ATOMIC_RELAXED)

/* Region lookup for a range; under reg_lock.  Index or -1. */
int kp_region_find(struct kvspeer *kp, const void *addr, uint64_t len);

/* ---- conn.c ----------------------------------------------------------------- */

struct conn *conn_new(struct kvspeer *kp, int fd, enum conn_side side, const struct sockaddr *sa,
		      socklen_t salen);
/* Close (once): unregister, drop locks (serve) or fail the user (fetch). */
void conn_close(struct conn *c, int err);
void conn_free(struct conn *c);
/* Queue a message; flushed by conn_flush().  0 or -ENOMEM (the conn is closed). */
int conn_send(struct conn *c, unsigned type, uint32_t seq, const void *fixed, size_t flen,
	      const void *tail, size_t tlen);
int conn_send_error(struct conn *c, uint32_t seq, int status, unsigned req_type, const char *text);
/* Write what is queued (and a serve stream); adjusts EPOLLOUT.  0, or -errno (closed). */
int conn_flush(struct conn *c);
/* Read and dispatch what arrived.  0, or -errno (closed). */
int conn_read(struct conn *c);
void conn_set_sockopts(struct kvspeer *kp, int fd);
/* A message arrived on @c (dispatch to serve.c / fetch.c). */
int conn_dispatch(struct conn *c, const struct pw_hdr *h, const uint8_t *payload);
/* Raw shard bytes finished arriving (fetch). */
int conn_raw_done(struct conn *c);

/* ---- serve.c ------------------------------------------------------------------ */

int serve_listen(struct kvspeer *kp);
void serve_accept(struct kvspeer *kp);
int serve_dispatch(struct conn *c, const struct pw_hdr *h, const uint8_t *payload);
/* The stream of @c can move on (called by conn_flush when a shard's bytes are out). */
int serve_stream_next(struct conn *c);
void serve_drop_locks(struct conn *c, bool closing);
void serve_tick(struct kvspeer *kp, uint64_t now);

/* ---- admit.c ------------------------------------------------------------------ */

int admit_init(struct kvspeer *kp);
void admit_fini(struct kvspeer *kp);
/*
 * May a connection from @sa be accepted?  0 and its host's account in
 * *@ret (possibly after closing another unauthenticated connection to
 * make room), or -EUSERS (counted by reason).
 */
int admit_accept(struct kvspeer *kp, const struct sockaddr_storage *sa, struct peer_acct **ret);
/* @c, just made, counts against @a, unauthenticated. */
/* admit_accept() said yes, but no conn came of it: @a goes if unused. */
void admit_cancel(struct kvspeer *kp, struct peer_acct *a);
void admit_attach(struct kvspeer *kp, struct conn *c, struct peer_acct *a);
void admit_authenticated(struct kvspeer *kp, struct conn *c);
/* @c closed (its locks already ended). */
void admit_release(struct kvspeer *kp, struct conn *c);
/* May @c's host take one more lock?  false (counted) at max_locks_per_peer. */
bool admit_may_lock(struct kvspeer *kp, const struct conn *c);
/* @c's host holds one more lock, one fewer. */
void admit_locked(struct conn *c);
void admit_unlock(struct conn *c);

/* ---- fetch.c ------------------------------------------------------------------- */

void fetch_start(struct kvspeer *kp, struct fetch *f);
int fetch_dispatch(struct conn *c, const struct pw_hdr *h, const uint8_t *payload);
int fetch_raw_done(struct conn *c);
void fetch_connected(struct conn *c);
/* The conn used by a fetch closed with @err. */
void fetch_conn_lost(struct conn *c, int err);
/* @c (ours, of a peer_ent) closed in state @was: one more may open. */
void fetch_conn_gone(struct conn *c, enum conn_state was);
/* Start the fetches that waited for a conn and may have one now (each loop turn). */
void fetch_kick(struct kvspeer *kp);
void fetch_tick(struct kvspeer *kp, uint64_t now);
void fetch_fail_all(struct kvspeer *kp, int err);
void fetch_ucx_get_done(struct fetch *f, uint32_t block, int status);
void peer_ents_free(struct kvspeer *kp);
int peers_snapshot(struct kvspeer *kp, struct kvspeer_peer_info *ret, unsigned max);

/* ---- ucx.c (KVSPEER_TRANSPORT_UCX) ---------------------------------------------- */

int pucx_new(struct kvspeer *kp, struct pucx **ret, char *why, size_t wl);
void pucx_free(struct pucx *u);
int pucx_fd(struct pucx *u);
/* Progress until idle, then re-arm the wakeup fd. */
void pucx_progress(struct pucx *u);
int pucx_address(struct pucx *u, const void **ret_addr, size_t *ret_len);
int pucx_mem_map(struct pucx *u, void *addr, size_t len, void **ret_memh, void **ret_rkey,
		 size_t *ret_rkey_len);
void pucx_mem_unmap(struct pucx *u, void *memh, void *rkey);
int pucx_ep_new(struct pucx *u, const void *addr, size_t len, struct conn *c, struct pucx_ep **ret);
/* Force-close; outstanding gets complete with errors before this returns. */
void pucx_ep_close(struct pucx *u, struct pucx_ep *ep);
int pucx_rkey_unpack(struct pucx_ep *ep, const void *buf, size_t len, struct pucx_rkey **ret);
void pucx_rkey_free(struct pucx_rkey *k);
/* Read @len bytes at @raddr into @dst; fetch_ucx_get_done(f, block, status) when done. */
int pucx_get(struct pucx_ep *ep, void *dst, uint64_t len, uint64_t raddr, struct pucx_rkey *k,
	     struct fetch *f, uint32_t block);

#endif /* KVS_PEER_INTERNAL_H */
