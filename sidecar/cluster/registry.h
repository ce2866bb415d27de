/* SPDX-License-Identifier: MIT */
/*
 * The cluster block registry: which node of the cluster holds which blocks,
 * kept in Redis and driven through hiredis' async API from the control
 * thread's epoll loop.  docs/CLUSTER.md gives the model (keys, scripts,
 * leases, the failure matrix) and how kvstashd wires it in
 * (control/cluster.c); this header is the contract.
 *
 * Redis model (all keys under "kvs:<cluster>:"):
 *   epoch:<node>  counter; INCR on every lease acquisition
 *   lease:<node>  hash {tok = "<epoch>:<nonce>", epoch, addr, inc}, PEXPIRE ttl,
 *                 renewed every ttl/3 by a script that checks tok
 *   n:<node>:<epoch>:<digest>  set of the 16-byte keys of namespace
 *                 <digest> (16 binary bytes) the node holds under that epoch
 *                 (its "run set"), PEXPIRE entry ttl
 *   sets:<node>   set of the node's run sets (ACQUIRE unlinks them)
 *   nodes         set of the nodes that took a lease
 * Writes go through a Lua script that first compares the lease's tok with
 * the writer's: a node whose lease expired or was taken over is refused
 * server-side (fenced).  Queries go through a script that reads only the
 * run sets of each node's live epoch, so a dead node's blocks stop being
 * answered when its lease expires (one TTL), with no sweeper.  A new lease always has a new epoch, so everything a node
 * registered under an old one is invisible; the node re-registers what is
 * resident through the backfill callback.
 *
 * Threads and locking:
 *
 *   call                                   thread            notes
 *   registry_new, _free, _shutdown         control           once
 *   registry_fd, _dispatch, _tick          control           the loop
 *   registry_flush, registry_query         control           async, callback
 *                                                            from _dispatch
 *   registry_insert, registry_remove       any (I/O workers) lock-free, never
 *                                                            blocks; drops and
 *                                                            counts when full
 *   registry_mark                          any               lock-free (one
 *                                                            malloc)
 *   registry_tally_new, registry_tally_put control
 *   registry_get_stats                     any               relaxed reads
 *   registry_digest, _read_secret,
 *   _config_check, _state_name             any               pure
 *
 * Every callback (flush, query, backfill, log) runs on the control thread,
 * from registry_dispatch(), registry_shutdown() or registry_free(), never
 * from inside registry_flush()/registry_query() themselves, and never with
 * a lock of the registry held: a callback may call any control-thread
 * function but registry_free().
 *
 * Without hiredis (configure --without-hiredis or libhiredis-dev missing),
 * stub.c provides the same functions: registry_new() and
 * registry_config_check() with an address set refuse with -EOPNOTSUPP and
 * say "cluster support is not compiled in".
 */
#ifndef KVS_REGISTRY_H
#define KVS_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvstash/stats.h>

#include "cluster/flush.h"
#include "cluster/limits.h"
#include "common/loghook.h"
#include "common/nsdigest.h"

struct registry;

struct registry_config {
	const char *redis;     /* "host:port", "[v6]:port", "unix:/path" or "/path"; or: */
	/*
	 * Redis Sentinel: "host:port,..." of the sentinels and the name of the
	 * master they monitor (sentinel.h); exclusive with @redis.  AUTH to
	 * the sentinels with their own user and password (NULL: none); the
	 * master takes @user and @password as a plain Redis does.
	 */
	const char *sentinels;
	const char *master_name;
	const char *sentinel_user;
	const char *sentinel_password;
	uint32_t sentinel_check_ms; /* ask every sentinel this often; 0: 1 s */
	const char *user;      /* ACL user for AUTH; NULL or "": the default user */
	const char *password;  /* AUTH secret (registry_read_secret()); NULL: no AUTH */
	const char *cluster;   /* [A-Za-z0-9._-], < REG_NAME_MAX */
	const char *node;      /* this node's name, same alphabet */
	const char *peer_addr; /* where peers reach this node (peer transfer); may be "" */
	uint32_t lease_ttl_ms; /* node lease; renewed every third of it */
	uint32_t connect_timeout_ms;
	uint32_t command_timeout_ms; /* no reply this long: the connection is dead */
	uint32_t flush_timeout_ms;   /* registry_flush() deadline when it is given 0 */
	uint32_t query_timeout_ms;   /* registry_query() deadline when it is given 0 */
	uint32_t queue_entries;	     /* power of two, >= 64 */
	uint32_t entry_ttl_ms;	     /* block entries expire unless refreshed; 0: 6 h */
};

/* One resident block, as the backfill callback reports it. */
struct registry_entry {
	uint8_t ns[REG_DIGEST_SIZE];
	uint8_t key[REG_KEY_SIZE];
};

struct registry_ops {
	/*
	 * Backfill: fill @out with up to @max resident (visible) blocks from
	 * *@cursor on, advance *@cursor, return how many (0: no more).  The
	 * registry starts at cursor 0 after every lease acquisition (a new
	 * epoch) and calls again only when its pipeline has room, so one call
	 * does bounded work; a block sealed or evicted while the cursor runs
	 * is also enqueued through registry_insert()/registry_remove(), which
	 * the registry orders after the backfill entries it already read.  A
	 * block may be reported twice.  Required.
	 */
	uint32_t (*backfill)(void *arg, uint64_t *cursor, struct registry_entry *out, uint32_t max);
	/*
	 * Log: one line per state change (connected, lost, lease acquired,
	 * fenced, writes failing/recovered), never per block and never with the
	 * password.  @level is a syslog level, @err an errno or 0.  Optional.
	 */
	kvs_log_hook *log; /* common/loghook.h */
	/*
	 * Leased: this node holds its lease under @epoch from now on (each
	 * acquisition is a new epoch).  kvstashd tells its peer service, whose
	 * peers check a registry entry's epoch against it.  Optional; on the
	 * thread that dispatches the registry.
	 */
	void (*leased)(void *arg, uint64_t epoch);
	void *arg;
};

/* ---- geometry digest ------------------------------------------------ */

_Static_assert(REG_DIGEST_SIZE == NSDIGEST_SIZE, "a registry namespace is named by its digest");

/*
 * The namespace digest (common/nsdigest.h) where the registry is compiled
 * in; -EOPNOTSUPP in a build without it (which may lack nettle too): its
 * namespaces are then never registered.
 */
int registry_digest(const struct nsdigest_geometry *g, uint8_t ret[REG_DIGEST_SIZE]);

/* ---- configuration -------------------------------------------------- */

/*
 * Read the AUTH secret from @path into @buf: a regular file owned by the
 * daemon's user, not readable by group or others (-EPERM otherwise), at
 * most REG_SECRET_MAX-1 bytes, one trailing newline dropped, no NUL, CR
 * or newline inside (-EINVAL).  The reason goes to @why (never the
 * secret).  @buf is wiped on failure.
 */
int registry_read_secret(const char *path, char *buf, size_t len, char *why, size_t wl);

/*
 * Check @cfg: address syntax (a Redis, or sentinels and a master name),
 * names, timeouts (lease_ttl >= 1 s, command and connect timeouts below a
 * third of it), queue size.  -EINVAL with a reason; -EOPNOTSUPP without
 * hiredis.
 */
int registry_config_check(const struct registry_config *cfg, char *why, size_t wl);

/*
 * kvstashd's [cluster] section (base/conf.h) into @ret: 0 when no cluster
 * is configured (redis and sentinels empty), 1 when @ret is set, -errno
 * with a reason.  An empty node name becomes the host's short name (in
 * @host); the passwords are read from password_file and
 * sentinel_password_file into @secrets (wipe them after registry_new()).
 * Call it from --check-config and at start-up; without hiredis a
 * configured cluster is -EOPNOTSUPP.
 */
struct kvs_config;
/*
 * This node's name: [cluster] node, or the host's short name (written
 * into @host, @hostlen bytes).  -EINVAL with a reason when neither is.
 */
int cluster_node_name(const struct kvs_config *cfg, char *host, size_t hostlen,
		      const char **ret_name, char *why, size_t wl);
/* The secrets a [cluster] section names: Redis's and the sentinels' AUTH passwords. */
struct registry_secrets {
	char redis[REG_SECRET_MAX];
	char sentinel[REG_SECRET_MAX];
};
int registry_config_from(const struct kvs_config *cfg, struct registry_config *ret, char *host,
			 size_t hostlen, struct registry_secrets *secrets, char *why, size_t wl);

/* true when built with hiredis. */
bool registry_compiled_in(void);

/* ---- lifetime and the loop ------------------------------------------- */

/*
 * Create the registry and start connecting (non-blocking; a host name is
 * resolved here, once).  @cfg's strings are copied.  -EINVAL with a
 * reason in @why for a bad config, -EOPNOTSUPP without hiredis.
 */
int registry_new(const struct registry_config *cfg, const struct registry_ops *ops,
		 struct registry **ret, char *why, size_t wl);

/*
 * Complete every pending flush (-ESHUTDOWN, with what was delivered) and
 * query (no holders), stop taking new ones (they complete at once with
 * -ESHUTDOWN), and release the node lease if connected (so peers stop
 * asking this node at once; the release gets at most 500 ms, then the
 * connection is closed).  Keep calling registry_dispatch() until
 * registry_closed(), then registry_free().
 */
void registry_shutdown(struct registry *r);
bool registry_closed(const struct registry *r);

/* registry_shutdown() if not done, then free.  NULL is fine. */
void registry_free(struct registry *r);

/*
 * A pollable fd (an epoll fd of the registry's own: the Redis socket, a
 * timerfd for every deadline, an eventfd the producers wake).  Add it with
 * EPOLLIN to the control loop; when it is readable call
 * registry_dispatch().  The registry keeps its own timers, so no other
 * call is needed; registry_tick() is there for a loop that wants to drive
 * the timers itself (harmless to call at any time).
 */
int registry_fd(const struct registry *r);
void registry_dispatch(struct registry *r);
void registry_tick(struct registry *r);

/* ---- registration (any thread) -------------------------------------- */

/*
 * Whose changes: a tally counts what became of the changes made under it
 * (a session's, an instance's: its parent, which counts them too), so
 * that a flush reports exactly its owner's (ledger.h).  Made and put on
 * the control thread; its owner stops making changes under it before the
 * put (the registry frees it once every change queued before resolved).
 * NULL from registry_tally_new(): no memory.  registry_tally_put()
 * accepts NULL, and after registry_free() nothing is to be put.
 */
struct registry_tally;
struct registry_tally *registry_tally_new(struct registry *r, struct registry_tally *parent);
void registry_tally_put(struct registry *r, struct registry_tally *t);

/*
 * Enqueue inserts (block visible: every shard sealed) or removes
 * (evicted) of @n keys of namespace @ns, made under @t (NULL: nobody's:
 * an eviction).  Never blocks: returns how many were queued; the rest
 * are dropped and counted (dropped_overflow, and in @t).  Safe from any
 * thread while the registry lives (free it only after the producers
 * stopped).
 */
uint32_t registry_insert(struct registry *r, struct registry_tally *t,
			 const uint8_t ns[REG_DIGEST_SIZE], const uint8_t (*keys)[REG_KEY_SIZE],
			 uint32_t n);
uint32_t registry_remove(struct registry *r, struct registry_tally *t,
			 const uint8_t ns[REG_DIGEST_SIZE], const uint8_t (*keys)[REG_KEY_SIZE],
			 uint32_t n);

/* ---- the flush barrier ----------------------------------------------- */

/*
 * A point in the stream of changes, queued as a mark: every
 * registry_insert/remove that returned before registry_mark() was called
 * is before it.  Take it on any thread (e.g. the I/O worker, once the
 * FLUSH's prior SAVEs are sealed) for @t's changes (NULL: everyone's),
 * hand it to the control thread for registry_flush(), which must follow
 * (every mark is flushed once).  0; -ENOMEM; -EAGAIN when the queue is
 * full even for marks (a few of its entries are kept for them).
 */
struct reg_mark;
struct registry_mark {
	struct reg_mark *m;
};
int registry_mark(struct registry *r, struct registry_tally *t, struct registry_mark *ret);

/*
 * Call @cb once every change before @mark was delivered or dropped after a
 * failed attempt, or at the deadline (@timeout_ms, 0: the configured
 * flush_timeout), or at shutdown; never later.  The counts are of the
 * mark's tally's changes before the mark and since that tally's previous
 * flush (its previous mark, in queue order): exactly what its owner did
 * since.  Unresolved at the deadline counts as dropped.  0.
 */
int registry_flush(struct registry *r, const struct registry_mark *mark, uint32_t timeout_ms,
		   registry_flush_cb *cb, void *arg);

/* ---- cluster query ---------------------------------------------------- */

struct registry_holder {
	char node[REG_NAME_MAX];
	char addr[REG_ADDR_MAX]; /* its peer_addr; "" if it has none */
	uint64_t epoch;
	uint32_t blocks; /* it holds keys[0, blocks) */
};

struct registry_query_result {
	int status;	      /* 0; -ENOTCONN, -ETIMEDOUT, -EPROTO, -ESHUTDOWN (then no holders) */
	uint32_t nr_keys;     /* as asked */
	uint32_t best;	      /* longest run from keys[0] held by one other live node */
	uint32_t nr_holders;  /* <= REG_MAX_HOLDERS, by blocks descending */
	uint32_t round_trips; /* chunks sent */
	struct registry_holder holders[REG_MAX_HOLDERS];
};
typedef void registry_query_cb(void *arg, const struct registry_query_result *res);

/*
 * Which other live nodes hold the longest run of @keys (from keys[0]) in
 * namespace @ns: the daemon asks for the keys after its local hits.  The
 * keys are copied.  Chunks go out pipelined, a window at a time, and no
 * more are sent after a chunk where no node kept a full run.  @cb runs
 * once: with Redis unreachable at once (-ENOTCONN, best 0), at the
 * deadline with what the chunks answered so far (-ETIMEDOUT only if
 * nothing was answered).  This node itself is never a holder.
 * 0, -EINVAL (n == 0 or above 1M), -ENOMEM.
 */
int registry_query(struct registry *r, const uint8_t ns[REG_DIGEST_SIZE],
		   const uint8_t (*keys)[REG_KEY_SIZE], uint32_t n, uint32_t timeout_ms,
		   registry_query_cb *cb, void *arg);

/* ---- state and statistics ---------------------------------------------- */

enum registry_state {
	REG_DISCONNECTED, /* waiting for the next attempt (backoff) */
	REG_CONNECTING,	  /* TCP/Unix connect in progress */
	REG_HANDSHAKE,	  /* AUTH, scripts, lease acquisition */
	REG_READY,	  /* lease held: registering */
	REG_CONFLICT,	  /* connected; another live process holds this node's lease */
	REG_CLOSED,	  /* shut down */
};
const char *registry_state_name(int state);

/*
 * For `kvstash status`, STATS and Prometheus: counters are cumulative.
 * The fields of KVS_STATS_REGISTRY's rows of source MOD (<kvstash/stats.h>:
 * its state, queue, Redis and lease figures, in table order) come from the
 * rows, so a counter is one row there; what only the daemon shows
 * computed (names, times since) or the module keeps follows.
 */
struct registry_stats {
	KVS_STATS_REGISTRY(KVS_STATS_MOD_MEMBER_)
	uint64_t last_failover_ns; /* CLOCK_MONOTONIC of the last; 0: none */
	uint32_t sentinel;	   /* 1: the master comes from the sentinels */
	char incarnation[17];	   /* this process's id, 16 hex digits (constant) */
	char master[REG_ADDR_MAX]; /* "ip:port" (or the configured address); "": none yet */
	char last_failover_from[REG_ADDR_MAX];
	char master_name[REG_NAME_MAX];
};
void registry_get_stats(const struct registry *r, struct registry_stats *ret);

#endif /* KVS_REGISTRY_H */
