/* SPDX-License-Identifier: MIT */
/*
 * The registry's state, shared by the files that make up the registry
 * client (registry.h is the contract; docs/CLUSTER.md the model):
 *
 *   lifetime.c   registry_new() to registry_free(), the stats, the Sentinel hookup
 *   pump.c       the control loop's turn: pump_run(), the timer, dispatch
 *   link.c       the connection to the master: open, handshake, backoff, teardown
 *   command.c    commands in flight and the reply dispatch (on_reply())
 *   nodelease.c  the node's lease: acquire, renew, release, the epoch
 *   pipeline.c   the registration pipeline: queue -> netted batches -> REGISTER, backfill
 *   barrier.c    what producers call (changes, marks) and the FLUSH barrier
 *   regquery.c   the cluster QUERY
 *
 * Data and a few one-line helpers only: it includes none of those files'
 * headers, so that they can include it without closing a circle.
 *
 * Threads: everything here is the control thread's, but the queue's
 * producer side (queue.h, registry_insert() and friends, any thread), the
 * counters in st (relaxed atomics, read by registry_get_stats() on any
 * thread) and st's strings (under st_lock).
 *
 * Re-entry: hiredis calls back only from inside redisAsyncHandleRead/Write
 * and redisAsyncFree; those callbacks (on_reply(), on_connect(),
 * on_disconnect()) only record results.  Commands are sent, connections
 * torn down and user callbacks run from pump_run(), after hiredis returned,
 * so no callback ever re-enters hiredis.
 *
 * Order: one connection, so Redis runs our commands in the order we send
 * them and replies come back in that order.  Batches are therefore
 * resolved (delivered, or dropped) in queue-position order, which is what
 * lets a flush mark be a single position.
 */
#ifndef KVS_REG_REGISTRY_INTERNAL_H
#define KVS_REG_REGISTRY_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "common/loghook.h"
#include "cluster/aconn.h"
#include "cluster/regaddr.h"
#include "cluster/ledger.h"
#include "cluster/queue.h"
#include "cluster/registry.h"
#include "cluster/reply.h"

#define BATCH_MAX	  4096u /* changes per REGISTER (one round trip) */
#define BATCHES_IN_FLIGHT 4u
#define NET_SLOTS	  (2 * BATCH_MAX)
#define NET_PROBES	  32u /* a longer probe ends the batch (hostile keys) */
#define QUERY_CHUNK	  1024u
#define QUERY_WINDOW	  4u /* chunks of one query in flight */
#define QUERY_MAX_KEYS	  (1u << 20)
#define BACKOFF_MIN_MS	  50u
#define BACKOFF_MAX_MS	  2000u
#define READ_BUFFER_MAX	  ((size_t)REPLY_MAX_BYTES + (1u << 20))
#define MS		  1000000ull

enum { S_ACQUIRE, S_RENEW, S_RELEASE, S_REGISTER, S_QUERY, NR_SCRIPTS };

/* epoll data.u32 of the registry's fds: the eventfd, the timer, Redis; the sentinels' from TAG_SENTINELS. */
enum { TAG_WAKE = 1, TAG_TIMER = 2, TAG_REDIS = 3, TAG_SENTINELS = 16 };

struct batch {
	uint64_t start, end;	 /* queue positions covered: [start, end) */
	uint32_t nkeys;		 /* block keys sent */
	uint32_t nbackfill;	 /* of which from the backfill */
	struct ledger_run *runs; /* whose changes [start, end) are (ledger.h) */
	uint32_t nruns;
};

struct query;

struct req;
struct registry;

/*
 * What a request's reply does (command.c calls it from on_reply()):
 * @reply is NULL when the request is stale (an older connection's) or the
 * connection went without answering it.
 */
typedef void req_done_fn(struct registry *r, struct req *q, const redisReply *reply);

struct req {
	struct registry *r;
	req_done_fn *done;
	uint64_t gen; /* connection generation */
	uint64_t sent_ns;
	struct req *prev, *next; /* in flight, oldest first */
	union {
		int script;
		struct batch batch;
		struct {
			struct query *q;
			uint32_t chunk; /* of the keys; the head: 0 */
			int cand;	/* whose run set; -1: the head (the candidates) */
			int last;	/* the chunk's last request */
		} qc;
	};
};

struct qcand {
	struct query_node n;
	char set[160 + REG_NAME_MAX + 24 + REG_DIGEST_SIZE]; /* its run set (scripts.h) */
	size_t set_len;
	uint32_t run;
	int full;
};

struct query {
	struct registry *r;
	uint8_t ns[REG_DIGEST_SIZE];
	uint8_t (*keys)[REG_KEY_SIZE];
	uint32_t n, nchunks, next_chunk, answered, inflight;
	int head_sent, head_done; /* the candidates asked for, known */
	uint64_t deadline;
	int done, stop, status;
	struct qcand *cand;
	uint32_t ncand;
	registry_query_cb *cb;
	void *arg;
	struct query *next;
};

struct net_op {
	uint8_t op;
	uint8_t sent; /* batch_send(): already in the REGISTER being built */
	uint8_t ns[REG_DIGEST_SIZE];
	uint8_t key[REG_KEY_SIZE];
};

/*
 * The most arguments a command takes: a REGISTER of BATCH_MAX changes (a
 * key and at most a group of two words per change, and our 13 words), or
 * a query chunk (QUERY_CHUNK keys and 2 words).
 */
#define ARGV_MAX (3 * BATCH_MAX + 16)
_Static_assert(QUERY_CHUNK + 2 <= ARGV_MAX, "a query chunk fits the arguments");

struct registry {
	/* configuration (copies) */
	char redis[REG_ADDR_MAX], user[REG_NAME_MAX], cluster[REG_NAME_MAX], node[REG_NAME_MAX];
	char peer_addr[REG_ADDR_MAX];
	char *password;
	struct reg_addr addr;
	char ip[64];
	uint32_t ttl_ms, connect_ms, command_ms, flush_ms, query_ms;
	uint64_t entry_ttl_ms;
	struct registry_ops ops;

	/* keys */
	char lease_key[160], epoch_key[160], lease_prefix[160];
	/* The run sets' prefix, this node's list of its sets, the cluster's node list (scripts.h). */
	char sprefix[160], sets_key[160], nodes_key[160];

	/* the loop */
	int epfd, evfd, tfd;
	uint64_t armed_ns;

	/* connection */
	redisAsyncContext *ac; /* mc.ac while we hold it */
	struct aconn mc;
	uint64_t gen;
	int state;
	int want_close;
	char close_why[128];
	struct reply_budget budget;
	char sha[NR_SCRIPTS][41];
	uint32_t loads_ok;
	int role_ok; /* ROLE said master (always, without Sentinel) */

	/*
	 * With [cluster] sentinels: they name the master (r->ip, addr.port;
	 * empty until they did), r->redis its "ip:port".  switching: the
	 * connection is closed for another master, reconnect at once.
	 */
	struct sentinel *sent;
	char master_name[REG_NAME_MAX];
	int switching;
	int want_look; /* a callback saw what may be a failover: pump_run() asks the sentinels */
	uint64_t sentinel_next;	 /* sentinel_tick()'s next deadline */
	pthread_mutex_t st_lock; /* st's strings: master, last_failover_from */
	uint64_t connect_deadline, next_attempt;
	uint32_t failures; /* consecutive, for the backoff */
	struct req *inflight_head, *inflight_tail;
	uint32_t batches_inflight;

	/* lease */
	char token[REG_TOKEN_MAX], nonce[17];
	char inc[17]; /* this process's incarnation id, hex (random at registry_new()) */
	uint64_t epoch;
	int ever_leased, acquiring, renewing, releasing, closing;
	uint64_t renew_at, lease_valid_until, acquire_retry_at;
	uint64_t refresh_at;
	uint64_t close_deadline; /* shutdown waits this long for the lease release */

	/* backfill */
	int backfilling;
	uint64_t bf_cursor;
	struct registry_entry *bf_buf;
	uint32_t bf_next, bf_got; /* bf_buf[bf_next, bf_got): read, not in a batch yet */

	/* A change taken from the queue that the batch had no room for: the next batch's first. */
	struct rq_item carry;
	int has_carry;

	/* registration */
	struct rq q;
	struct net_op *ops_buf;
	uint32_t nops;
	uint32_t *net;
	uint64_t net_seed;
	uint64_t pend_start, pend_end; /* positions in the batch being built */
	uint32_t pend_backfill;
	const char **argv;
	size_t *argvlen;
	char (*gcount)[12];		   /* a REGISTER's group sizes, as text */
	const uint8_t **gdigest, **member; /* its groups' digests, its bare keys */

	/* resolution, in position order, and the flushes (ledger.h) */
	struct ledger led;

	struct query *queries;
	struct query_node *qtmp; /* one chunk's answer, parsed */

	/* logging: once per state change */
	int last_logged_err; /* class of the last connection error logged */
	int writes_failing;

	struct registry_stats st; /* fields written on the control thread, atomically */
};

#define ST_ADD(r, f, v) __atomic_fetch_add(&(r)->st.f, (v), __ATOMIC_RELAXED)
#define ST_SET(r, f, v) __atomic_store_n(&(r)->st.f, (v), __ATOMIC_RELAXED)

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define rlog(r, level, err, ...) LOG_HOOK((r)->ops.log, (r)->ops.arg, (level), (err), __VA_ARGS__)

static inline void set_state(struct registry *r, int s)
{
	r->state = s;
	ST_SET(r, state, (uint32_t)s);
	ST_SET(r, connected, (uint32_t)(s == REG_HANDSHAKE || s == REG_READY || s == REG_CONFLICT));
	ST_SET(r, leased, (uint32_t)(s == REG_READY));
}

/* Wake the control loop: registry_dispatch() runs pump_run() (registry_fd() is the loop's). */
static inline void kick(struct registry *r)
{
	uint64_t one = 1;
	ssize_t w = write(r->evfd, &one, sizeof(one));

	(void)w; /* EAGAIN: already pending */
}

static inline void want_close(struct registry *r, const char *why)
{
	if (!r->want_close) {
		r->want_close = 1;
		snprintf(r->close_why, sizeof(r->close_why), "%s", why);
	}
}

#endif /* KVS_REG_REGISTRY_INTERNAL_H */
