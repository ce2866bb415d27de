/* SPDX-License-Identifier: MIT */
/*
 * The cluster block registry (registry.h): hiredis' async API on an epoll
 * fd of our own, a node lease with an epoch, registration batches from the
 * MPSC queue, the flush barrier and the cluster query.
 *
 * Everything but the queue's producer side runs on the control thread.
 * hiredis calls back into us only from inside redisAsyncHandleRead/Write
 * and redisAsyncFree; those callbacks only record results (conn_gone()
 * included: the sentinels are asked from pump()).  Commands are sent,
 * connections torn down and user callbacks run from pump(), after hiredis
 * has returned, so no callback ever re-enters hiredis.
 *
 * Order: one connection, so Redis runs our commands in the order we send
 * them and replies come back in that order.  Batches are therefore
 * resolved (delivered, or dropped) in queue-position order, which is what
 * lets a flush mark be a single position.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "common/loghook.h"
#include "cluster/aconn.h"
#include "cluster/addr.h"
#include "cluster/ledger.h"
#include "cluster/queue.h"
#include "cluster/registry.h"
#include "cluster/reply.h"
#include "cluster/scripts.h"
#include "cluster/sentinel.h"

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
static const char *const script_src[NR_SCRIPTS] = {
	SCRIPT_ACQUIRE, SCRIPT_RENEW, SCRIPT_RELEASE, SCRIPT_REGISTER, SCRIPT_QUERY,
};

enum req_kind { K_AUTH, K_ROLE, K_LOAD, K_ACQUIRE, K_RENEW, K_RELEASE, K_BATCH, K_QUERY };

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

struct req {
	struct registry *r;
	enum req_kind kind;
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
	int want_look; /* a callback saw what may be a failover: pump() asks the sentinels */
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

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The epochs' floor (send_acquire()): CLOCK_REALTIME, unlike every timer here. */
static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

#define rlog(r, level, err, ...) LOG_HOOK((r)->ops.log, (r)->ops.arg, (level), (err), __VA_ARGS__)

static void set_state(struct registry *r, int s)
{
	r->state = s;
	ST_SET(r, state, (uint32_t)s);
	ST_SET(r, connected, (uint32_t)(s == REG_HANDSHAKE || s == REG_READY || s == REG_CONFLICT));
	ST_SET(r, leased, (uint32_t)(s == REG_READY));
}

const char *registry_state_name(int s)
{
	static const char *const names[] = { "disconnected", "connecting", "handshake",
					     "ready",	     "conflict",   "closed" };

	return s >= 0 && s <= REG_CLOSED ? names[s] : "unknown";
}

bool registry_compiled_in(void)
{
	return true;
}

int registry_digest(const struct nsdigest_geometry *g, uint8_t ret[REG_DIGEST_SIZE])
{
	return nsdigest(g, ret);
}

static void kick(struct registry *r)
{
	uint64_t one = 1;
	ssize_t w = write(r->evfd, &one, sizeof(one));

	(void)w; /* EAGAIN: already pending */
}

static void want_close(struct registry *r, const char *why)
{
	if (!r->want_close) {
		r->want_close = 1;
		snprintf(r->close_why, sizeof(r->close_why), "%s", why);
	}
}

/* ---- resolution ------------------------------------------------------------ */

/* Positions [start, end) resolved (ledger.h); delivered ones counted. */
static void resolve(struct registry *r, uint64_t start, uint64_t end, int ok,
		    const struct ledger_run *runs, uint32_t nruns)
{
	uint64_t n = ledger_resolve(&r->led, start, end, ok, runs, nruns);

	if (ok)
		ST_ADD(r, delivered, n);
}

/* ---- the batch being built ------------------------------------------------ */

static uint64_t net_hash(const struct registry *r, const uint8_t *ns, const uint8_t *key)
{
	uint64_t a, b, c;

	memcpy(&a, key, 8);
	memcpy(&b, key + 8, 8);
	memcpy(&c, ns, 8);
	/* Seeded: an engine cannot aim its keys at one slot (NET_PROBES bounds the rest). */
	a = (a ^ r->net_seed) * 0x9e3779b97f4a7c15ull;
	a ^= (b + (r->net_seed >> 7)) * 0xc2b2ae3d27d4eb4full;
	a ^= c * 0x165667b19e3779f9ull;
	return a ^ (a >> 29);
}

/* Add a change to the batch, netting it with an earlier one of the same key.  0: full. */
static int net_add(struct registry *r, uint8_t op, const uint8_t *ns, const uint8_t *key)
{
	uint64_t h = net_hash(r, ns, key);

	if (r->nops == BATCH_MAX)
		return 0;
	for (uint32_t p = 0; p < NET_PROBES; p++) {
		uint32_t *slot = &r->net[(h + p) & (NET_SLOTS - 1)];
		struct net_op *o;

		if (!*slot) {
			o = &r->ops_buf[r->nops++];
			o->op = op;
			memcpy(o->ns, ns, REG_DIGEST_SIZE);
			memcpy(o->key, key, REG_KEY_SIZE);
			*slot = r->nops;
			return 1;
		}
		o = &r->ops_buf[*slot - 1];
		if (!memcmp(o->key, key, REG_KEY_SIZE) && !memcmp(o->ns, ns, REG_DIGEST_SIZE)) {
			o->op = op; /* the last change of a key is its net effect */
			return 1;
		}
	}
	return 0;
}

static void batch_reset(struct registry *r)
{
	if (r->nops)
		memset(r->net, 0, NET_SLOTS * sizeof(*r->net));
	r->nops = 0;
	ledger_clear_runs(&r->led);
	r->pend_backfill = 0;
	/* The next batch starts at the change carried over, if one was (fill_and_send()). */
	r->pend_start = r->pend_end = r->has_carry ? r->carry.pos : r->q.head;
}

static bool batch_empty(const struct registry *r)
{
	return r->nops == 0 && r->pend_end == r->pend_start;
}

/* ---- requests --------------------------------------------------------------- */

static void req_link(struct registry *r, struct req *q)
{
	q->prev = r->inflight_tail;
	q->next = NULL;
	if (r->inflight_tail)
		r->inflight_tail->next = q;
	else
		r->inflight_head = q;
	r->inflight_tail = q;
}

static void req_unlink(struct registry *r, struct req *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else if (r->inflight_head == q)
		r->inflight_head = q->next;
	if (q->next)
		q->next->prev = q->prev;
	else if (r->inflight_tail == q)
		r->inflight_tail = q->prev;
	q->prev = q->next = NULL;
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* Send argv; the request is the callback's.  -EIO when hiredis refuses. */
static int send_req(struct registry *r, struct req *q, int argc, const char **argv,
		    const size_t *lens)
{
	q->r = r;
	q->gen = r->gen;
	q->sent_ns = now_ns();
	if (!r->ac || redisAsyncCommandArgv(r->ac, on_reply, q, argc, argv, lens) != REDIS_OK) {
		free(q);
		want_close(r, "hiredis refused a command");
		return -EIO;
	}
	req_link(r, q);
	return 0;
}

static struct req *req_new(enum req_kind k)
{
	struct req *q = calloc(1, sizeof(*q));

	if (q)
		q->kind = k;
	return q;
}

static int send_script(struct registry *r, struct req *q, int script, uint32_t nkeys,
		       uint32_t nargs, const char **argv, size_t *lens)
{
	char nk[16];

	/* argv[0..2] are ours: EVALSHA sha numkeys. */
	snprintf(nk, sizeof(nk), "%u", nkeys);
	argv[0] = "EVALSHA";
	lens[0] = 7;
	argv[1] = r->sha[script];
	lens[1] = 40;
	argv[2] = nk;
	lens[2] = strlen(nk);
	return send_req(r, q, (int)(3 + nkeys + nargs), argv, lens);
}

/* ---- lease ------------------------------------------------------------------ */

/* send_script() for the lease's scripts, whose keys and arguments are all C strings. */
static int send_text_script(struct registry *r, struct req *q, int script, uint32_t nkeys,
			    uint32_t nargs, const char **argv, size_t *lens)
{
	for (uint32_t i = 3; i < 3 + nkeys + nargs; i++)
		lens[i] = strlen(argv[i]);
	return send_script(r, q, script, nkeys, nargs, argv, lens);
}

static void send_acquire(struct registry *r)
{
	const char *argv[16];
	size_t lens[16];
	char ttl[16], floor[24];
	struct req *q = req_new(K_ACQUIRE);
	uint64_t rnd;

	if (!q)
		return;
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = now_ns() ^ ((uint64_t)getpid() << 32);
	snprintf(r->nonce, sizeof(r->nonce), "%016" PRIx64, rnd);
	snprintf(ttl, sizeof(ttl), "%u", r->ttl_ms);
	argv[3] = r->lease_key;
	argv[4] = r->epoch_key;
	argv[5] = r->sets_key;
	argv[6] = r->nodes_key;
	argv[7] = r->nonce;
	argv[8] = r->token;
	/* Only a process's first lease takes over a live one: it is this node restarted. */
	argv[9] = r->ever_leased ? "0" : "1";
	argv[10] = ttl;
	argv[11] = r->peer_addr;
	argv[12] = r->node;
	argv[13] = r->lease_prefix;
	argv[14] = r->inc;
	/*
	 * Above every epoch this process held, and at least the wall clock in
	 * milliseconds: epochs never repeat in a process, nor across
	 * processes while the clock goes forward, even when Redis forgot the
	 * counter (scripts.h).  Peers tell holders apart by (node, epoch).
	 */
	snprintf(floor, sizeof(floor), "%" PRIu64, max_u64(r->epoch, wall_ms()));
	argv[15] = floor;
	r->acquiring = 1;
	send_text_script(r, q, S_ACQUIRE, 4, 9, argv, lens);
}

static void send_renew(struct registry *r)
{
	const char *argv[6];
	size_t lens[6];
	char ttl[16];
	struct req *q = req_new(K_RENEW);

	if (!q)
		return;
	snprintf(ttl, sizeof(ttl), "%u", r->ttl_ms);
	argv[3] = r->lease_key;
	argv[4] = r->token;
	argv[5] = ttl;
	r->renewing = 1;
	send_text_script(r, q, S_RENEW, 1, 2, argv, lens);
}

static void send_release(struct registry *r)
{
	const char *argv[5];
	size_t lens[5];
	struct req *q = req_new(K_RELEASE);

	if (!q)
		return;
	argv[3] = r->lease_key;
	argv[4] = r->token;
	r->releasing = 1;
	send_text_script(r, q, S_RELEASE, 1, 1, argv, lens);
}

/* Re-register every resident entry (a new epoch, or the entries' TTL refresh), or stop. */
static void backfill_set(struct registry *r, int on)
{
	r->backfilling = on;
	r->bf_cursor = 0;
	r->bf_next = r->bf_got = 0;
	ST_SET(r, backfilling, on);
}

static void lease_lost(struct registry *r, const char *why)
{
	if (r->state != REG_READY)
		return;
	ST_ADD(r, leases_lost, 1);
	rlog(r, LOG_WARNING, 0, "registry: lease of node %s (epoch %" PRIu64 ") lost: %s", r->node,
	     r->epoch, why);
	set_state(r, REG_HANDSHAKE);
	backfill_set(r, 0);
	r->acquire_retry_at = 0; /* at once: a new epoch, then backfill */
}

/* ---- connection ---------------------------------------------------------- */

static void conn_gone(struct registry *r, const char *why, int err)
{
	int was = r->state;
	uint32_t delay;

	r->ac = NULL;
	r->gen++;
	r->want_close = 0;
	r->acquiring = r->renewing = r->releasing = 0;
	backfill_set(r, 0);
	r->loads_ok = 0;
	if (was == REG_READY)
		ST_ADD(r, leases_lost, 1); /* the next connection takes a new epoch */
	if (r->closing) {
		set_state(r, REG_CLOSED);
		return;
	}
	set_state(r, REG_DISCONNECTED);
	ST_ADD(r, disconnects, was >= REG_HANDSHAKE ? 1 : 0);
	/* Any loss may be a failover: ask the sentinels again (from pump()). */
	r->want_look = 1;
	if (r->switching) {
		/* Left for the master the sentinels named: to it at once. */
		r->switching = 0;
		r->failures = 0;
		r->next_attempt = 0;
		rlog(r, LOG_NOTICE, 0, "registry: %s", why);
		return;
	}
	/* Capped exponential backoff, with jitter so a fleet does not reconnect in step. */
	delay = BACKOFF_MIN_MS << (r->failures < 6 ? r->failures : 6);
	if (delay > BACKOFF_MAX_MS)
		delay = BACKOFF_MAX_MS;
	if (delay > r->ttl_ms / 2)
		delay = r->ttl_ms / 2;
	delay = delay / 2 + (uint32_t)(now_ns() % (delay / 2 + 1));
	r->failures++;
	r->next_attempt = now_ns() + (uint64_t)delay * MS;
	/* Log once per change: entering the state, or a different error. */
	if (was >= REG_HANDSHAKE || r->last_logged_err != err + 1) {
		rlog(r, LOG_WARNING, err, "registry: %s %s: %s; retrying with backoff up to %ums",
		     was >= REG_HANDSHAKE ? "connection to" : "cannot connect to", r->redis, why,
		     BACKOFF_MAX_MS);
		r->last_logged_err = err + 1;
	}
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct registry *r = ac->data;

	if (r->ac != ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees the context after this returns (no onDisconnect). */
		ST_ADD(r, errors, 1);
		conn_gone(r, ac->errstr && ac->errstr[0] ? ac->errstr : "connect failed",
			  ac->err == REDIS_ERR_IO ? errno : ECONNREFUSED);
		return;
	}
	set_state(r, REG_HANDSHAKE);
	ST_ADD(r, connects, 1);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct registry *r = ac->data;

	if (r->ac != ac)
		return; /* we tore it down ourselves */
	ST_ADD(r, errors, status == REDIS_OK ? 0 : 1);
	conn_gone(r, ac->errstr && ac->errstr[0] ? ac->errstr : "closed by the server",
		  ac->err == REDIS_ERR_IO ? ECONNRESET : EPIPE);
}

/* Our own teardown (timeout, protocol violation, shutdown): outside callbacks. */
static void conn_close(struct registry *r, const char *why, int err)
{
	redisAsyncContext *ac = r->ac;

	if (!ac)
		return;
	conn_gone(r, why, err);
	/* Runs every pending callback with NULL (a stale generation: dropped). */
	aconn_close(&r->mc);
}

static void send_handshake(struct registry *r)
{
	const char *argv[3];
	size_t lens[3];

	if (r->password) {
		struct req *q = req_new(K_AUTH);
		int n = 0;

		if (!q)
			return;
		argv[n] = "AUTH";
		lens[n++] = 4;
		if (r->user[0]) {
			argv[n] = r->user;
			lens[n] = strlen(r->user);
			n++;
		}
		argv[n] = r->password;
		lens[n] = strlen(r->password);
		n++;
		if (send_req(r, q, n, argv, lens) < 0)
			return;
	}
	if (r->sent) {
		/* The sentinels may lag, or a demoted master may come back: write to a master only. */
		struct req *q = req_new(K_ROLE);

		if (!q)
			return;
		argv[0] = "ROLE";
		lens[0] = 4;
		if (send_req(r, q, 1, argv, lens) < 0)
			return;
	}
	for (int i = 0; i < NR_SCRIPTS; i++) {
		struct req *q = req_new(K_LOAD);

		if (!q)
			return;
		q->script = i;
		argv[0] = "SCRIPT";
		lens[0] = 6;
		argv[1] = "LOAD";
		lens[1] = 4;
		argv[2] = script_src[i];
		lens[2] = strlen(script_src[i]);
		if (send_req(r, q, 3, argv, lens) < 0)
			return;
	}
}

static void conn_open(struct registry *r)
{
	char why[128];
	int rc;

	/* With Sentinel: the master the sentinels named; none yet: ask them, wait. */
	if (r->sent && !r->ip[0]) {
		sentinel_look(r->sent);
		r->next_attempt = now_ns() + (uint64_t)r->connect_ms * MS;
		return;
	}
	r->role_ok = !r->sent;
	rc = aconn_open(&r->mc, r->addr.unix_path ? r->addr.host : r->ip,
			r->addr.unix_path ? 0 : r->addr.port, &r->budget, r, on_connect,
			on_disconnect, why, sizeof(why));
	if (rc < 0) {
		r->ac = NULL;
		conn_gone(r, why, -rc);
		return;
	}
	r->ac = r->mc.ac;
	set_state(r, REG_CONNECTING);
	r->connect_deadline = now_ns() + (uint64_t)r->connect_ms * MS;
	send_handshake(r);
}

/* ---- replies -------------------------------------------------------------- */

static void query_chunk_done(struct registry *r, struct query *qu, uint32_t chunk, int cand,
			     int last, const redisReply *reply);
static void batch_done(struct registry *r, struct req *q, const redisReply *reply);

static void handle_acquire(struct registry *r, const redisReply *reply)
{
	struct acquire_result a;
	uint64_t retry;
	char e[128];
	int rc;

	r->acquiring = 0;
	rc = reply_acquire(reply, r->nonce, &a);
	if (rc < 0) {
		reply_error_text(reply, e, sizeof(e));
		ST_ADD(r, errors, 1);
		want_close(r, rc == -EIO ? e : "malformed lease reply");
		return;
	}
	if (!a.granted) {
		if (r->state != REG_CONFLICT)
			rlog(r, LOG_ERR, EADDRINUSE,
			     "registry: node name %s is held by another live process (lease %s, "
			     "%" PRId64 " ms left): not registering until it expires",
			     r->node, a.token, a.pttl_ms);
		set_state(r, REG_CONFLICT);
		/* Try again when the holder's lease would expire, at least every ttl/3. */
		retry = a.pttl_ms > 0 && (uint64_t)a.pttl_ms < r->ttl_ms / 3
				? (uint64_t)a.pttl_ms + 5
				: r->ttl_ms / 3;
		r->acquire_retry_at = now_ns() + retry * MS;
		return;
	}
	snprintf(r->token, sizeof(r->token), "%s", a.token);
	r->epoch = a.epoch;
	r->ever_leased = 1;
	r->failures = 0;
	r->last_logged_err = 0;
	ST_SET(r, epoch, a.epoch);
	ST_ADD(r, leases_acquired, 1);
	set_state(r, REG_READY);
	rlog(r, LOG_NOTICE, 0,
	     "registry: node %s holds its lease on %s, epoch %" PRIu64 ", incarnation %s%s%s; "
	     "re-registering resident blocks",
	     r->node, r->redis, a.epoch, r->inc, a.displaced[0] ? ", displacing " : "",
	     a.displaced);
	/* Everything registered under an old epoch is invisible: backfill from the start. */
	backfill_set(r, 1);
	r->refresh_at = now_ns() + r->entry_ttl_ms / 2 * MS;
	if (r->ops.leased)
		r->ops.leased(r->ops.arg, a.epoch);
}

static void on_reply(redisAsyncContext *ac, void *reply_, void *privdata)
{
	struct req *q = privdata;
	struct registry *r = q->r;
	const redisReply *reply = reply_;
	int stale = q->gen != r->gen || !reply;
	uint64_t t = now_ns();
	char e[128];
	int rc, v;

	(void)ac;
	req_unlink(r, q);
	if (reply) {
		ST_ADD(r, round_trips, 1);
		ST_SET(r, last_rtt_us, (t - q->sent_ns) / 1000);
	}
	switch (q->kind) {
	case K_AUTH:
		if (stale)
			break;
		rc = reply_ok(reply);
		if (rc < 0) {
			reply_error_text(reply, e, sizeof(e));
			ST_ADD(r, errors, 1);
			want_close(r, rc == -EIO ? e : "malformed AUTH reply");
		}
		break;
	case K_ROLE:
		if (stale)
			break;
		rc = reply_role_master(reply, &v);
		if (rc < 0) {
			reply_error_text(reply, e, sizeof(e));
			ST_ADD(r, errors, 1);
			want_close(r, rc == -EIO ? e : "malformed ROLE reply");
		} else if (!v) {
			want_close(r, "not a master (the sentinels lag, or it was demoted)");
			r->want_look = 1;
		} else {
			r->role_ok = 1;
		}
		break;
	case K_LOAD:
		if (stale)
			break;
		rc = reply_sha(reply, r->sha[q->script]);
		if (rc < 0) {
			reply_error_text(reply, e, sizeof(e));
			ST_ADD(r, errors, 1);
			want_close(r, rc == -EIO ? e : "malformed SCRIPT LOAD reply");
		} else if (++r->loads_ok == NR_SCRIPTS) {
			r->acquire_retry_at = 0; /* pump() sends ACQUIRE */
		}
		break;
	case K_ACQUIRE:
		if (stale)
			break;
		handle_acquire(r, reply);
		if (r->state == REG_READY)
			r->lease_valid_until = q->sent_ns + (uint64_t)r->ttl_ms * MS;
		r->renew_at = q->sent_ns + (uint64_t)(r->ttl_ms / 3) * MS;
		break;
	case K_RENEW:
		if (stale)
			break;
		r->renewing = 0;
		rc = reply_bool(reply, &v);
		if (rc < 0) {
			reply_error_text(reply, e, sizeof(e));
			ST_ADD(r, errors, 1);
			want_close(r, rc == -EIO ? e : "malformed renew reply");
		} else if (!v) {
			lease_lost(r, "expired or taken over (renewal refused)");
		} else if (r->state == REG_READY) {
			/* The server's expiry is later than our send + ttl: conservative. */
			r->lease_valid_until = q->sent_ns + (uint64_t)r->ttl_ms * MS;
			r->renew_at = q->sent_ns + (uint64_t)(r->ttl_ms / 3) * MS;
		}
		break;
	case K_RELEASE:
		r->releasing = 0;
		if (r->closing)
			want_close(r, "shut down");
		break;
	case K_BATCH:
		batch_done(r, q, stale ? NULL : reply);
		break;
	case K_QUERY:
		query_chunk_done(r, q->qc.q, q->qc.chunk, q->qc.cand, q->qc.last,
				 stale ? NULL : reply);
		break;
	}
	free(q);
}

static void batch_done(struct registry *r, struct req *q, const redisReply *reply)
{
	const struct batch *b = &q->batch;
	int rc = reply ? reply_register(reply, b->nkeys) : -ENOTCONN;
	char e[128];

	r->batches_inflight--;
	resolve(r, b->start, b->end, rc == 0, b->runs, b->nruns);
	free(b->runs);
	if (rc == 0) {
		ST_ADD(r, backfilled, b->nbackfill);
		if (r->writes_failing) {
			r->writes_failing = 0;
			rlog(r, LOG_NOTICE, 0, "registry: registrations are delivered again");
		}
		return;
	}
	ST_ADD(r, dropped_failed, b->end - b->start);
	if (!reply)
		return; /* the connection went: logged there */
	ST_ADD(r, errors, 1);
	reply_error_text(reply, e, sizeof(e));
	if (rc == -ESTALE) {
		lease_lost(r, "fenced by Redis (a newer epoch holds the lease)");
	} else if (rc == -EPROTO) {
		want_close(r, "malformed registration reply");
	} else if (!r->writes_failing) {
		r->writes_failing = 1;
		rlog(r, LOG_ERR, EIO, "registry: registrations fail and are dropped: %s", e);
	}
}

/* ---- sending batches ----------------------------------------------------- */

/*
 * REGISTER's arguments (scripts.h): KEYS the lease; ARGV our words, the
 * groups (digest, count: inserts first, then removes, each kind grouped
 * by namespace), then the keys in group order.  A batch has one namespace
 * or a few, so grouping is a pass per namespace over the batch.
 *
 * -errno: not sent, and the batch stays as it was, to go next turn (no
 * memory) or to be dropped by drain_offline() after the batches in
 * flight (hiredis refused: the connection goes).  Either way changes
 * resolve in position order, which the flushes' counts rely on (ledger.h).
 */
static int batch_send(struct registry *r)
{
	uint32_t n = r->nops, k = 3, g = 0, ngroups[2] = { 0, 0 }, nm = 0;
	const uint8_t **gdigest = r->gdigest, **member = r->member;
	char ttl_s[24], ep_s[24], ngi_s[16], ngr_s[16];
	struct batch b;
	struct req *q;
	int rc;

	if (batch_empty(r))
		return 0;
	if (!n) {
		/* Every change netted away?  Cannot happen: a key's last change stays. */
		resolve(r, r->pend_start, r->pend_end, 1, r->led.runs, r->led.nruns);
		batch_reset(r);
		return 0;
	}
	q = req_new(K_BATCH);
	if (!q)
		return -ENOMEM;
	b = (struct batch){ r->pend_start, r->pend_end, n, r->pend_backfill };
	b.runs = ledger_take_runs(&r->led, &b.nruns);
	if (r->led.nruns && !b.runs) {
		free(q);
		return -ENOMEM;
	}
	q->batch = b;
	for (uint32_t i = 0; i < n; i++)
		r->ops_buf[i].sent = 0;
	/* Inserts first, then removes: the script takes the groups in that order. */
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t first = 0; first < n; first++) {
			const struct net_op *f = &r->ops_buf[first];
			uint32_t cnt = 0;

			if (f->sent || (f->op == RQ_INSERT) != (pass == 0))
				continue;
			/* A group: every change of this kind in @f's namespace. */
			for (uint32_t i = first; i < n; i++) {
				struct net_op *o = &r->ops_buf[i];

				if (o->sent || o->op != f->op ||
				    memcmp(o->ns, f->ns, REG_DIGEST_SIZE))
					continue;
				o->sent = 1;
				member[nm++] = o->key;
				cnt++;
			}
			gdigest[g] = f->ns;
			snprintf(r->gcount[g], sizeof(r->gcount[g]), "%u", cnt);
			g++;
			ngroups[pass]++;
		}
	}
	snprintf(ttl_s, sizeof(ttl_s), "%" PRIu64, r->entry_ttl_ms);
	snprintf(ep_s, sizeof(ep_s), "%" PRIu64, r->epoch);
	snprintf(ngi_s, sizeof(ngi_s), "%u", ngroups[0]);
	snprintf(ngr_s, sizeof(ngr_s), "%u", ngroups[1]);
	r->argv[k] = r->lease_key;
	r->argvlen[k++] = strlen(r->lease_key);
	r->argv[k] = r->token;
	r->argvlen[k++] = strlen(r->token);
	r->argv[k] = r->node;
	r->argvlen[k++] = strlen(r->node);
	r->argv[k] = ep_s;
	r->argvlen[k++] = strlen(ep_s);
	r->argv[k] = ttl_s;
	r->argvlen[k++] = strlen(ttl_s);
	r->argv[k] = r->sprefix;
	r->argvlen[k++] = strlen(r->sprefix);
	r->argv[k] = r->sets_key;
	r->argvlen[k++] = strlen(r->sets_key);
	r->argv[k] = ngi_s;
	r->argvlen[k++] = strlen(ngi_s);
	r->argv[k] = ngr_s;
	r->argvlen[k++] = strlen(ngr_s);
	for (uint32_t i = 0; i < g; i++) {
		r->argv[k] = (const char *)gdigest[i];
		r->argvlen[k++] = REG_DIGEST_SIZE;
		r->argv[k] = r->gcount[i];
		r->argvlen[k++] = strlen(r->gcount[i]);
	}
	for (uint32_t i = 0; i < nm; i++) {
		r->argv[k] = (const char *)member[i];
		r->argvlen[k++] = REG_KEY_SIZE;
	}
	rc = send_script(r, q, S_REGISTER, 1, k - 4, r->argv, r->argvlen);
	if (rc < 0) {
		free(b.runs); /* q is freed; the connection goes (drain_offline() drops the batch) */
		return rc;
	}
	r->batches_inflight++;
	batch_reset(r);
	return 0;
}

/* A mark taken from the queue: the batch before it goes first (no batch spans a mark). */
static void mark_popped(struct registry *r, const struct rq_item *it)
{
	ledger_mark_popped(&r->led, it->tag, it->pos);
	r->pend_start = r->pend_end = it->pos + 1;
}

/* The changes taken so far but not batched, [pend_start, pend_end): dropped. */
static void drop_pending(struct registry *r)
{
	if (r->pend_end > r->pend_start) {
		resolve(r, r->pend_start, r->pend_end, 0, r->led.runs, r->led.nruns);
		ST_ADD(r, dropped_offline, r->pend_end - r->pend_start);
	}
	batch_reset(r);
}

/* The next change: the one the last batch had no room for, else the queue's. */
static bool next_change(struct registry *r, struct rq_item *ret)
{
	if (r->has_carry) {
		*ret = r->carry;
		r->has_carry = 0;
		return true;
	}
	return rq_pop(&r->q, ret);
}

static void carry(struct registry *r, const struct rq_item *it)
{
	r->carry = *it;
	r->has_carry = 1;
}

/* Not leased: what the queue holds is dropped (the next lease backfills). */
static void drain_offline(struct registry *r)
{
	struct rq_item it;

	/* Batches still in flight resolve first: resolution stays in position order. */
	if (r->batches_inflight)
		return;
	if (!batch_empty(r))
		drop_pending(r);
	while (next_change(r, &it)) {
		if (it.op == RQ_MARK) {
			drop_pending(r);
			mark_popped(r, &it);
			continue;
		}
		/* Runs full (one per change of alternating tallies): drop what they hold first. */
		if (!ledger_run_add(&r->led, it.tag)) {
			drop_pending(r);
			r->pend_start = it.pos;
			ledger_run_add(&r->led, it.tag);
		}
		r->pend_end = it.pos + 1;
	}
	drop_pending(r);
}

/*
 * Backfill entries into the batch: those read before and not taken yet,
 * then (the batch less than half full) a new read.  false: the batch is
 * full, the rest wait in bf_buf for the next.
 */
static bool backfill_take(struct registry *r)
{
	if (r->bf_next == r->bf_got && r->backfilling && r->nops < BATCH_MAX / 2) {
		uint32_t room = BATCH_MAX - r->nops, got;

		got = r->ops.backfill(r->ops.arg, &r->bf_cursor, r->bf_buf, room);
		r->bf_next = 0;
		r->bf_got = got > room ? room : got;
		if (!got) {
			r->backfilling = 0;
			ST_SET(r, backfilling, 0);
		}
	}
	for (; r->bf_next < r->bf_got; r->bf_next++) {
		const struct registry_entry *e = &r->bf_buf[r->bf_next];

		if (!net_add(r, RQ_INSERT, e->ns, e->key))
			return false; /* a probe too long, or full */
		r->pend_backfill++;
	}
	return true;
}

static void fill_and_send(struct registry *r)
{
	struct rq_item it;

	while (r->state == REG_READY && r->ac && !r->want_close &&
	       r->batches_inflight < BATCHES_IN_FLIGHT) {
		/*
		 * Backfill entries first, then the queue: a change dequeued
		 * after a backfill read goes after it (registry.h, backfill).
		 * A batch that could not be sent (batch_send()) is still
		 * here; it only grows.
		 */
		bool room = backfill_take(r);

		while (room && next_change(r, &it)) {
			if (it.op == RQ_MARK) {
				/* No batch spans a mark: the one before it goes first. */
				if (!batch_empty(r)) {
					carry(r, &it);
					break;
				}
				mark_popped(r, &it);
				continue;
			}
			/*
			 * Room in the runs first (no side effect), then in the
			 * netting table; a change that finds none starts the
			 * next batch.  Netting lets a batch cover more queue
			 * positions than BATCH_MAX, so the runs can fill first.
			 */
			if (!ledger_run_fits(&r->led, it.tag) ||
			    !net_add(r, it.op, it.ns, it.key)) {
				carry(r, &it);
				break;
			}
			ledger_run_add(&r->led, it.tag);
			r->pend_end = it.pos + 1;
		}
		if (batch_empty(r) || batch_send(r) < 0)
			break;
	}
}

/* ---- flushes ----------------------------------------------------------------- */

static void flush_complete_ready(struct registry *r, uint64_t now, int shutting)
{
	ledger_complete(&r->led, now, shutting);
	/* Tallies whose last change resolved: their owners put them. */
	ledger_gc(&r->led);
}

/* ---- queries ------------------------------------------------------------------- */

static void query_finish(struct registry *r, struct query *qu, int status)
{
	struct registry_query_result res = { 0 };
	struct qcand *c = qu->cand;

	if (qu->done)
		return;
	qu->done = 1;
	res.status = status;
	res.nr_keys = qu->n;
	res.round_trips = qu->head_sent + qu->next_chunk;
	if (!status || status == -ETIMEDOUT) {
		/* Best first: a few holders, selection by hand. */
		for (uint32_t k = 0; k < REG_MAX_HOLDERS; k++) {
			int best = -1;

			for (uint32_t i = 0; i < qu->ncand; i++)
				if (c[i].run && (best < 0 || c[i].run > c[best].run))
					best = (int)i;
			if (best < 0)
				break;
			struct registry_holder *h = &res.holders[res.nr_holders++];

			snprintf(h->node, sizeof(h->node), "%s", c[best].n.node);
			snprintf(h->addr, sizeof(h->addr), "%s", c[best].n.addr);
			h->epoch = c[best].n.epoch;
			h->blocks = c[best].run;
			c[best].run = 0; /* taken */
		}
		res.best = res.nr_holders ? res.holders[0].blocks : 0;
	}
	ST_ADD(r, queries, 1);
	if (res.best)
		ST_ADD(r, query_hits, 1);
	qu->cb(qu->arg, &res);
}

static void query_free(struct query *qu)
{
	free(qu->keys);
	free(qu->cand);
	free(qu);
}

/*
 * A query is a head, then chunks.  The head (the QUERY script) names the
 * candidates: the other live nodes whose run set holds the first key.
 * Then each chunk of QUERY_CHUNK keys goes, per candidate still holding
 * every key so far, as one plain SMISMEMBER on its run set: Redis looks
 * the keys up natively, with no script call per key (a script paid about
 * 0.8 us per key converting arguments).  One connection answers in send
 * order, so a candidate's chunks come back in order, and a chunk's last
 * request answers after all of its others.
 */
static void query_fail(struct registry *r, struct query *qu, const redisReply *reply, int rc)
{
	char e[128];

	if (!reply) {
		qu->stop = 1;
		qu->status = qu->answered ? 0 : -ENOTCONN;
		return;
	}
	reply_error_text(reply, e, sizeof(e));
	ST_ADD(r, errors, 1);
	if (rc == -EPROTO)
		want_close(r, "malformed query reply");
	qu->stop = 1;
	qu->status = qu->answered ? 0 : -EPROTO;
}

static void query_head_done(struct registry *r, struct query *qu, const redisReply *reply)
{
	uint32_t nn = 0;
	int rc;

	rc = reply ? reply_query(reply, 1, r->qtmp, REPLY_MAX_NODES, &nn) : -ENOTCONN;
	if (rc < 0) {
		query_fail(r, qu, reply, rc);
		return;
	}
	qu->cand = calloc(nn ? nn : 1, sizeof(*qu->cand));
	if (!qu->cand) {
		qu->stop = 1;
		qu->status = -ENOMEM;
		return;
	}
	for (uint32_t i = 0; i < nn; i++) {
		struct qcand *c = &qu->cand[qu->ncand];
		int l;

		if (!strcmp(r->qtmp[i].node, r->node))
			continue; /* ourselves: the daemon asked for what it lacks */
		c->n = r->qtmp[i];
		l = snprintf(c->set, sizeof(c->set), "%s%s:%" PRIu64 ":", r->sprefix, c->n.node,
			     c->n.epoch);
		if (l < 0 || (size_t)l + REG_DIGEST_SIZE > sizeof(c->set))
			continue; /* cannot be: names and prefixes are bounded */
		memcpy(c->set + l, qu->ns, REG_DIGEST_SIZE);
		c->set_len = (size_t)l + REG_DIGEST_SIZE;
		c->full = 1;
		qu->ncand++;
	}
	qu->head_done = 1;
	/* Nobody else holds the first key: the run is 0, everything is answered. */
	if (!qu->ncand) {
		qu->answered = qu->nchunks;
		qu->stop = 1;
	}
}

static void query_chunk_done(struct registry *r, struct query *qu, uint32_t chunk, int cand,
			     int last, const redisReply *reply)
{
	uint32_t len = chunk + 1 < qu->nchunks ? QUERY_CHUNK : qu->n - chunk * QUERY_CHUNK;
	uint32_t full = 0, lead = 0;
	int rc;

	qu->inflight--;
	if (qu->done)
		return;
	if (cand < 0) {
		query_head_done(r, qu, reply);
		return;
	}
	rc = reply ? reply_members(reply, len, &lead) : -ENOTCONN;
	if (rc < 0) {
		query_fail(r, qu, reply, rc);
		return;
	}
	/* A candidate that lost its run earlier ignores what was already asked for it. */
	if (qu->cand[cand].full && qu->cand[cand].run == chunk * QUERY_CHUNK) {
		qu->cand[cand].run += lead;
		qu->cand[cand].full = lead == len;
	}
	if (!last)
		return;
	qu->answered = chunk + 1;
	for (uint32_t i = 0; i < qu->ncand; i++)
		full += qu->cand[i].full;
	/* No node kept a full run: later chunks cannot extend anything. */
	if (!full || qu->answered == qu->nchunks)
		qu->stop = 1;
}

static bool query_can_send(const struct registry *r, const struct query *qu)
{
	return !qu->stop && !qu->done && r->ac && !r->want_close &&
	       (r->state == REG_READY || r->state == REG_CONFLICT);
}

static void query_send_head(struct registry *r, struct query *qu)
{
	struct req *q = req_new(K_QUERY);
	uint32_t k = 3;

	if (!q) {
		qu->stop = 1;
		return;
	}
	q->qc.q = qu;
	q->qc.cand = -1;
	r->argv[k] = r->nodes_key;
	r->argvlen[k++] = strlen(r->nodes_key);
	r->argv[k] = r->lease_prefix;
	r->argvlen[k++] = strlen(r->lease_prefix);
	r->argv[k] = r->sprefix;
	r->argvlen[k++] = strlen(r->sprefix);
	r->argv[k] = (const char *)qu->ns;
	r->argvlen[k++] = REG_DIGEST_SIZE;
	r->argv[k] = r->node;
	r->argvlen[k++] = strlen(r->node);
	r->argv[k] = (const char *)qu->keys[0];
	r->argvlen[k++] = REG_KEY_SIZE;
	qu->head_sent = 1;
	if (send_script(r, q, S_QUERY, 1, 5, r->argv, r->argvlen) < 0) {
		qu->stop = 1;
		return;
	}
	qu->inflight++;
}

/* Chunk @c to every candidate still holding all keys before it; false: stop. */
static bool query_send_chunk(struct registry *r, struct query *qu, uint32_t c)
{
	uint32_t first = c * QUERY_CHUNK, len = c + 1 < qu->nchunks ? QUERY_CHUNK : qu->n - first;
	int last = -1;

	for (uint32_t i = 0; i < qu->ncand; i++)
		if (qu->cand[i].full)
			last = (int)i;
	if (last < 0)
		return false;
	for (uint32_t i = 0; i <= (uint32_t)last; i++) {
		struct qcand *cd = &qu->cand[i];
		struct req *q;
		uint32_t k = 0;

		if (!cd->full)
			continue;
		q = req_new(K_QUERY);
		if (!q)
			return false;
		q->qc.q = qu;
		q->qc.chunk = c;
		q->qc.cand = (int)i;
		q->qc.last = i == (uint32_t)last;
		r->argv[k] = "SMISMEMBER";
		r->argvlen[k++] = 10;
		r->argv[k] = cd->set;
		r->argvlen[k++] = cd->set_len;
		for (uint32_t j = 0; j < len; j++, k++) {
			r->argv[k] = (const char *)qu->keys[first + j];
			r->argvlen[k] = REG_KEY_SIZE;
		}
		/* A chunk whose last request cannot go: nothing after it either. */
		if (send_req(r, q, (int)k, r->argv, r->argvlen) < 0)
			return false;
		qu->inflight++;
	}
	return true;
}

static void query_send(struct registry *r, struct query *qu)
{
	if (!qu->head_sent && query_can_send(r, qu))
		query_send_head(r, qu);
	while (qu->head_done && query_can_send(r, qu) && qu->next_chunk < qu->nchunks &&
	       qu->next_chunk - qu->answered < QUERY_WINDOW) {
		if (!query_send_chunk(r, qu, qu->next_chunk)) {
			qu->stop = 1;
			break;
		}
		qu->next_chunk++;
	}
}

static void queries_pump(struct registry *r, uint64_t now, int shutting)
{
	struct query **pp = &r->queries;

	while (*pp) {
		struct query *qu = *pp;
		int connected = r->ac && (r->state == REG_READY || r->state == REG_CONFLICT);

		if (!qu->done) {
			if (shutting)
				query_finish(r, qu, -ESHUTDOWN);
			else if (qu->stop || (qu->answered == qu->nchunks))
				query_finish(r, qu,
					     qu->answered ? 0
							  : (qu->status ? qu->status : -ENOTCONN));
			else if (now >= qu->deadline)
				query_finish(r, qu, qu->answered ? 0 : -ETIMEDOUT);
			else if (!connected && !qu->inflight)
				query_finish(r, qu, qu->answered ? 0 : -ENOTCONN);
			else
				query_send(r, qu);
		}
		if (qu->done && !qu->inflight) {
			*pp = qu->next;
			query_free(qu);
		} else {
			pp = &qu->next;
		}
	}
}

/* ---- the pump and timers --------------------------------------------------------- */

static void arm_timer(struct registry *r, uint64_t now)
{
	uint64_t t = UINT64_MAX;
	struct itimerspec its = { 0 };

#define AT(x)                       \
	do {                        \
		if ((x) && (x) < t) \
			t = (x);    \
	} while (0)
	if (r->state == REG_DISCONNECTED)
		AT(r->next_attempt);
	if (r->state == REG_CONNECTING)
		AT(r->connect_deadline);
	if (r->closing && r->ac)
		AT(r->close_deadline);
	if (r->inflight_head)
		AT(r->inflight_head->sent_ns + (uint64_t)r->command_ms * MS);
	if (r->state == REG_READY) {
		AT(r->renew_at);
		AT(r->lease_valid_until);
		AT(r->refresh_at);
	}
	if (r->state == REG_CONFLICT || r->state == REG_HANDSHAKE)
		AT(r->acquire_retry_at);
	if (r->sent && !r->closing && r->sentinel_next != UINT64_MAX)
		AT(r->sentinel_next);
	{
		uint64_t d = ledger_next_deadline(&r->led);

		AT(d != UINT64_MAX ? d : 0);
	}
	for (struct query *q = r->queries; q; q = q->next)
		if (!q->done)
			AT(q->deadline);
#undef AT
	if (t == r->armed_ns)
		return;
	r->armed_ns = t;
	if (t != UINT64_MAX) {
		if (t <= now)
			t = now + 1;
		its.it_value.tv_sec = (time_t)(t / 1000000000ull);
		its.it_value.tv_nsec = (long)(t % 1000000000ull);
	}
	timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void pump(struct registry *r)
{
	uint64_t now = now_ns();

	/* First: a failover it reports changes where the connection goes. */
	if (r->sent && !r->closing) {
		uint32_t n, up;

		if (r->want_look) {
			r->want_look = 0;
			sentinel_look(r->sent);
		}
		r->sentinel_next = sentinel_tick(r->sent, now);
		sentinel_counts(r->sent, &n, &up);
		ST_SET(r, sentinels, n);
		ST_SET(r, sentinels_up, up);
	}

	for (int round = 0; round < 4; round++) {
		/* Deadlines of the connection. */
		if (r->state == REG_CONNECTING && now >= r->connect_deadline)
			want_close(r, "connect timed out");
		if (r->inflight_head &&
		    now >= r->inflight_head->sent_ns + (uint64_t)r->command_ms * MS) {
			ST_ADD(r, errors, 1);
			want_close(r, "no reply within command_timeout");
		}
		if (r->state == REG_READY && now >= r->lease_valid_until)
			lease_lost(r, "not renewed in time");
		if (r->want_close && r->ac) {
			char why[128];

			snprintf(why, sizeof(why), "%s", r->close_why);
			conn_close(r, why, ETIMEDOUT);
		}
		r->want_close = 0;

		if (r->closing) {
			if (r->ac && (!r->releasing || now >= r->close_deadline))
				conn_close(r, "shut down", 0);
			if (!r->ac)
				set_state(r, REG_CLOSED);
		} else if (r->state == REG_DISCONNECTED && now >= r->next_attempt) {
			conn_open(r);
		}

		/* Lease: acquire once the scripts are loaded, renew on time. */
		if (r->ac && !r->closing && r->loads_ok == NR_SCRIPTS && r->role_ok &&
		    !r->acquiring && (r->state == REG_HANDSHAKE || r->state == REG_CONFLICT) &&
		    now >= r->acquire_retry_at)
			send_acquire(r);
		if (r->ac && r->state == REG_READY && !r->renewing && now >= r->renew_at)
			send_renew(r);
		if (r->state == REG_READY && !r->backfilling && now >= r->refresh_at) {
			/* Refresh every entry's TTL: a node that died for good leaves nothing. */
			backfill_set(r, 1);
			r->refresh_at = now + r->entry_ttl_ms / 2 * MS;
		}

		if (r->state == REG_READY && !r->closing)
			fill_and_send(r);
		else
			drain_offline(r);
		if (!r->want_close)
			break;
	}
	flush_complete_ready(r, now, r->closing);
	queries_pump(r, now, r->closing);
	/* Sleep only with nothing left to take (see queue.h, Wake-up). */
	if (r->state != REG_READY || r->batches_inflight < BATCHES_IN_FLIGHT) {
		if (rq_arm_wake(&r->q))
			kick(r);
	}
	ST_SET(r, queue_depth, rq_depth(&r->q));
	ST_SET(r, enqueued, __atomic_load_n(&r->q.enqueued, __ATOMIC_RELAXED));
	ST_SET(r, dropped_overflow, __atomic_load_n(&r->q.overflow, __ATOMIC_RELAXED));
	arm_timer(r, now_ns());
}

void registry_dispatch(struct registry *r)
{
	struct epoll_event ev[8];
	int n;

	n = epoll_wait(r->epfd, ev, 8, 0);
	for (int i = 0; i < n; i++) {
		uint64_t v;

		if (ev[i].data.u32 == TAG_WAKE || ev[i].data.u32 == TAG_TIMER) {
			ssize_t rd =
				read(ev[i].data.u32 == TAG_WAKE ? r->evfd : r->tfd, &v, sizeof(v));

			(void)rd;
			if (ev[i].data.u32 == TAG_TIMER)
				r->armed_ns = 0; /* it fired: disarmed, whatever it was set to */
			continue;
		}
		if (sentinel_owns(r->sent, ev[i].data.u32)) {
			sentinel_event(r->sent, ev[i].data.u32, ev[i].events);
			continue;
		}
		redisAsyncContext *ac = r->ac;

		/* HandleRead may free it (on_disconnect cleared r->ac). */
		aconn_event(&r->mc, ev[i].events);
		if (r->ac == ac && ac && ac->c.reader &&
		    ac->c.reader->len - ac->c.reader->pos > READ_BUFFER_MAX) {
			ST_ADD(r, errors, 1);
			want_close(r, "reply larger than the registry accepts");
		}
	}
	pump(r);
}

void registry_tick(struct registry *r)
{
	pump(r);
}

int registry_fd(const struct registry *r)
{
	return r->epfd;
}

/* ---- public: producers ------------------------------------------------------------- */

uint32_t registry_insert(struct registry *r, struct registry_tally *t,
			 const uint8_t ns[REG_DIGEST_SIZE], const uint8_t (*keys)[REG_KEY_SIZE],
			 uint32_t n)
{
	uint32_t done = rq_push(&r->q, RQ_INSERT, t, ns, keys, n);

	/* After the push: a mark taken after this call sees the count (ledger_mark_new()). */
	ledger_count(t, done, n - done);
	return done;
}

uint32_t registry_remove(struct registry *r, struct registry_tally *t,
			 const uint8_t ns[REG_DIGEST_SIZE], const uint8_t (*keys)[REG_KEY_SIZE],
			 uint32_t n)
{
	uint32_t done = rq_push(&r->q, RQ_REMOVE, t, ns, keys, n);

	ledger_count(t, done, n - done);
	return done;
}

int registry_mark(struct registry *r, struct registry_tally *t, struct registry_mark *ret)
{
	struct reg_mark *m = ledger_mark_new(&r->led, t);

	if (!m)
		return -ENOMEM;
	/*
	 * Its counts were read first: every change its caller made before
	 * is both counted there and queued before it.  The push's
	 * store-release publishes the mark's fields to the consumer.
	 */
	if (!rq_push_mark(&r->q, m)) {
		free(m);
		return -EAGAIN;
	}
	ret->m = m;
	return 0;
}

int registry_flush(struct registry *r, const struct registry_mark *mark, uint32_t timeout_ms,
		   registry_flush_cb *cb, void *arg)
{
	uint64_t deadline = now_ns() + (uint64_t)(timeout_ms ? timeout_ms : r->flush_ms) * MS;

	ledger_wait(&r->led, mark->m, deadline, cb, arg);
	ST_ADD(r, flushes, 1);
	kick(r); /* completes from registry_dispatch(), never from here */
	return 0;
}

struct registry_tally *registry_tally_new(struct registry *r, struct registry_tally *parent)
{
	return ledger_tally_new(&r->led, parent);
}

void registry_tally_put(struct registry *r, struct registry_tally *t)
{
	if (r)
		ledger_tally_put(&r->led, t, rq_tail(&r->q));
}

int registry_query(struct registry *r, const uint8_t ns[REG_DIGEST_SIZE],
		   const uint8_t (*keys)[REG_KEY_SIZE], uint32_t n, uint32_t timeout_ms,
		   registry_query_cb *cb, void *arg)
{
	struct query *qu, **pp = &r->queries;

	if (!n || n > QUERY_MAX_KEYS || !cb)
		return -EINVAL;
	qu = calloc(1, sizeof(*qu));
	if (!qu)
		return -ENOMEM;
	qu->keys = malloc((size_t)n * REG_KEY_SIZE);
	if (!qu->keys) {
		free(qu);
		return -ENOMEM;
	}
	memcpy(qu->keys, keys, (size_t)n * REG_KEY_SIZE);
	memcpy(qu->ns, ns, REG_DIGEST_SIZE);
	qu->r = r;
	qu->n = n;
	qu->nchunks = (n + QUERY_CHUNK - 1) / QUERY_CHUNK;
	qu->deadline = now_ns() + (uint64_t)(timeout_ms ? timeout_ms : r->query_ms) * MS;
	qu->cb = cb;
	qu->arg = arg;
	while (*pp)
		pp = &(*pp)->next;
	*pp = qu;
	/* Sent (or answered "none") from the dispatch the kick causes. */
	kick(r);
	return 0;
}

/* ---- the master, from the sentinels -------------------------------------------------- */

/*
 * The sentinels name @ip:@port the master (sentinel.h).  Another one than
 * ours: a failover to follow, at once, whatever state we are in: the
 * connection (if any) to the old one goes, and the new one takes a new
 * lease (a new epoch: the ACQUIRE's floor) and re-registers everything
 * resident, so that what a lagging replica lost comes back.
 */
static void on_master(void *arg, const char *ip, int port, bool announced)
{
	struct registry *r = arg;
	char now_addr[REG_ADDR_MAX];
	bool had = r->ip[0] != '\0';

	if (had && !strcmp(ip, r->ip) && port == r->addr.port)
		return; /* the one we have */
	snprintf(now_addr, sizeof(now_addr), strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
	pthread_mutex_lock(&r->st_lock);
	if (had) {
		snprintf(r->st.last_failover_from, sizeof(r->st.last_failover_from), "%s",
			 r->redis);
		ST_SET(r, last_failover_ns, now_ns());
	}
	snprintf(r->st.master, sizeof(r->st.master), "%s", now_addr);
	pthread_mutex_unlock(&r->st_lock);
	if (had) {
		ST_ADD(r, failovers, 1);
		rlog(r, LOG_WARNING, 0,
		     "registry: failover of %s: the sentinels name %s the master (was %s, %s)",
		     r->master_name, now_addr, r->redis,
		     announced ? "announced" : "found by asking them");
	} else {
		rlog(r, LOG_NOTICE, 0, "registry: the sentinels name %s the master of %s", now_addr,
		     r->master_name);
	}
	snprintf(r->ip, sizeof(r->ip), "%s", ip);
	r->addr.port = port;
	snprintf(r->redis, sizeof(r->redis), "%s", now_addr);
	if (r->ac) {
		/* pump() closes it; conn_gone() sees switching and reconnects at once. */
		r->switching = 1;
		want_close(r, "following the failover");
	} else {
		r->failures = 0;
		r->next_attempt = 0;
	}
	kick(r);
}

/* The sentinels' lines go where the registry's go. */
static void sentinel_log(void *arg, int level, int err, const char *msg)
{
	struct registry *r = arg;

	rlog(r, level, err, "%s", msg);
}

/* ---- lifetime ------------------------------------------------------------------------ */

static int resolve_host(struct registry *r, char *why, size_t wl)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	int rc;

	if (r->addr.unix_path)
		return 0;
	rc = getaddrinfo(r->addr.host, NULL, &hints, &res);
	if (rc) {
		snprintf(why, wl, "[cluster] redis: cannot resolve %s: %s", r->addr.host,
			 gai_strerror(rc));
		return -EINVAL;
	}
	rc = getnameinfo(res->ai_addr, res->ai_addrlen, r->ip, sizeof(r->ip), NULL, 0,
			 NI_NUMERICHOST);
	freeaddrinfo(res);
	if (rc) {
		snprintf(why, wl, "[cluster] redis: %s: %s", r->addr.host, gai_strerror(rc));
		return -EINVAL;
	}
	return 0;
}

int registry_new(const struct registry_config *cfg, const struct registry_ops *ops,
		 struct registry **ret, char *why, size_t wl)
{
	struct epoll_event e = { .events = EPOLLIN };
	struct registry *r;
	char w[256] = "";
	int rc;

	rc = registry_config_check(cfg, w, sizeof(w));
	if (rc < 0) {
		snprintf(why, wl, "%s", w);
		return rc;
	}
	if (!ops || !ops->backfill) {
		snprintf(why, wl, "registry: no backfill callback");
		return -EINVAL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->epfd = r->evfd = r->tfd = -1;
	aconn_init(&r->mc, -1, TAG_REDIS);
	pthread_mutex_init(&r->st_lock, NULL);
	if (cfg->sentinels && cfg->sentinels[0]) {
		snprintf(r->master_name, sizeof(r->master_name), "%s", cfg->master_name);
		snprintf(r->redis, sizeof(r->redis), "the master of %s", r->master_name);
	} else {
		snprintf(r->redis, sizeof(r->redis), "%s", cfg->redis);
		reg_addr_parse(cfg->redis, &r->addr, w, sizeof(w));
	}
	snprintf(r->user, sizeof(r->user), "%s", cfg->user ? cfg->user : "");
	snprintf(r->cluster, sizeof(r->cluster), "%s", cfg->cluster);
	snprintf(r->node, sizeof(r->node), "%s", cfg->node);
	snprintf(r->peer_addr, sizeof(r->peer_addr), "%s", cfg->peer_addr ? cfg->peer_addr : "");
	r->ttl_ms = cfg->lease_ttl_ms;
	r->connect_ms = cfg->connect_timeout_ms;
	r->command_ms = cfg->command_timeout_ms;
	r->flush_ms = cfg->flush_timeout_ms;
	r->query_ms = cfg->query_timeout_ms;
	r->entry_ttl_ms = cfg->entry_ttl_ms ? cfg->entry_ttl_ms : 6 * 3600 * 1000ull;
	r->ops = *ops;
	snprintf(r->lease_key, sizeof(r->lease_key), "kvs:%s:lease:%s", r->cluster, r->node);
	snprintf(r->epoch_key, sizeof(r->epoch_key), "kvs:%s:epoch:%s", r->cluster, r->node);
	snprintf(r->lease_prefix, sizeof(r->lease_prefix), "kvs:%s:lease:", r->cluster);
	snprintf(r->sprefix, sizeof(r->sprefix), "kvs:%s:n:", r->cluster);
	snprintf(r->sets_key, sizeof(r->sets_key), "kvs:%s:sets:%s", r->cluster, r->node);
	snprintf(r->nodes_key, sizeof(r->nodes_key), "kvs:%s:nodes", r->cluster);
	rc = -ENOMEM;
	if (cfg->password && cfg->password[0] && !(r->password = strdup(cfg->password)))
		goto fail;
	r->ops_buf = malloc(BATCH_MAX * sizeof(*r->ops_buf));
	r->net = calloc(NET_SLOTS, sizeof(*r->net));
	r->bf_buf = malloc(BATCH_MAX * sizeof(*r->bf_buf));
	r->qtmp = malloc(REPLY_MAX_NODES * sizeof(*r->qtmp));
	/* Keys for a batch (BATCH_MAX) or a query chunk (QUERY_CHUNK), plus our words. */
	r->argv = malloc(ARGV_MAX * sizeof(*r->argv));
	r->argvlen = malloc(ARGV_MAX * sizeof(*r->argvlen));
	r->gcount = malloc((size_t)BATCH_MAX * sizeof(*r->gcount));
	r->gdigest = malloc((size_t)BATCH_MAX * sizeof(*r->gdigest));
	r->member = malloc((size_t)BATCH_MAX * sizeof(*r->member));
	if (!r->ops_buf || !r->net || !r->bf_buf || !r->qtmp || !r->argv || !r->argvlen ||
	    !r->gcount || !r->gdigest || !r->member)
		goto fail;
	if (getrandom(&r->net_seed, sizeof(r->net_seed), 0) != sizeof(r->net_seed))
		r->net_seed = now_ns();
	/*
	 * This process's incarnation id: with the node and the epoch it names
	 * an incarnation that never repeats, even if Redis forgets every
	 * epoch (a restart then starts the counter over; this id differs).
	 */
	{
		uint64_t inc;

		if (getrandom(&inc, sizeof(inc), 0) != sizeof(inc))
			inc = now_ns() ^ ((uint64_t)getpid() << 40);
		snprintf(r->inc, sizeof(r->inc), "%016" PRIx64, inc);
		snprintf(r->st.incarnation, sizeof(r->st.incarnation), "%s", r->inc);
	}
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	r->mc.epfd = r->epfd;
	if (r->epfd < 0 || r->evfd < 0 || r->tfd < 0) {
		rc = -errno;
		goto fail;
	}
	e.data.u32 = TAG_WAKE;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->evfd, &e) < 0)
		goto fail_errno;
	e.data.u32 = TAG_TIMER;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->tfd, &e) < 0)
		goto fail_errno;
	/* A 64th of the queue is kept for flush marks (queue.h): a full queue still takes them. */
	rc = rq_init(&r->q, cfg->queue_entries, cfg->queue_entries / 64, r->evfd);
	if (rc < 0)
		goto fail;
	rc = ledger_init(&r->led, BATCH_MAX, &r->q.enqueued, &r->q.overflow);
	if (rc < 0)
		goto fail;
	ST_SET(r, queue_capacity, cfg->queue_entries);
	if (r->master_name[0]) {
		const struct sentinel_config sc = {
			.list = cfg->sentinels,
			.master_name = cfg->master_name,
			.user = cfg->sentinel_user,
			.password = cfg->sentinel_password,
			.connect_timeout_ms = cfg->connect_timeout_ms,
			.command_timeout_ms = cfg->command_timeout_ms,
			.check_ms = cfg->sentinel_check_ms ? cfg->sentinel_check_ms : 1000,
		};
		const struct sentinel_ops so = { .master = on_master,
						 .log = sentinel_log,
						 .arg = r };

		rc = sentinel_new(&sc, &so, r->epfd, TAG_SENTINELS, &r->sent, why, wl);
		if (rc < 0)
			goto fail;
		sentinel_counts(r->sent, &r->st.sentinels, &r->st.sentinels_up);
		r->st.sentinel = 1;
		snprintf(r->st.master_name, sizeof(r->st.master_name), "%s", r->master_name);
	} else {
		rc = resolve_host(r, why, wl);
		if (rc < 0)
			goto fail;
		snprintf(r->st.master, sizeof(r->st.master), "%s", r->redis);
	}
	set_state(r, REG_DISCONNECTED);
	r->next_attempt = 0;
	kick(r); /* the first dispatch connects */
	*ret = r;
	return 0;
fail_errno:
	rc = -errno;
fail:
	if (!why[0] || rc == -ENOMEM)
		snprintf(why, wl, "registry: %s", strerror(-rc));
	r->closing = 1;
	registry_free(r);
	return rc;
}

void registry_shutdown(struct registry *r)
{
	if (!r || r->closing)
		return;
	r->closing = 1;
	r->close_deadline = now_ns() + (uint64_t)(r->command_ms < 500 ? r->command_ms : 500) * MS;
	/* Peers stop asking this node at once, instead of after one TTL. */
	if (r->ac && r->state == REG_READY && !r->want_close)
		send_release(r);
	drain_offline(r);
	pump(r);
}

bool registry_closed(const struct registry *r)
{
	return !r || r->state == REG_CLOSED;
}

void registry_free(struct registry *r)
{
	if (!r)
		return;
	if (!r->closing)
		registry_shutdown(r);
	r->closing = 1;
	if (r->ac)
		conn_close(r, "freed", 0);
	/* Every batch came back (conn_close()): what the queue still holds, marks too, goes. */
	if (r->q.cells && r->led.runs)
		drain_offline(r);
	flush_complete_ready(r, UINT64_MAX, 1);
	queries_pump(r, UINT64_MAX, 1);
	while (r->queries) {
		struct query *qu = r->queries;

		r->queries = qu->next;
		query_free(qu);
	}
	sentinel_free(r->sent);
	ledger_fini(&r->led);
	rq_fini(&r->q);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->evfd >= 0)
		close(r->evfd);
	if (r->tfd >= 0)
		close(r->tfd);
	if (r->password) {
		explicit_bzero(r->password, strlen(r->password));
		free(r->password);
	}
	free(r->ops_buf);
	free(r->net);
	free(r->bf_buf);
	free(r->qtmp);
	free(r->argv);
	free(r->argvlen);
	free(r->gcount);
	free(r->gdigest);
	free(r->member);
	pthread_mutex_destroy(&r->st_lock);
	free(r);
}

_Static_assert(offsetof(struct registry_stats, epoch) == 16 &&
		       offsetof(struct registry_stats, sentinels) % 8 == 0,
	       "registry_get_stats() copies the u64 part word by word");

void registry_get_stats(const struct registry *r, struct registry_stats *ret)
{
	const uint64_t *src =
		(const uint64_t *)((const char *)&r->st + offsetof(struct registry_stats, epoch));
	uint64_t *dst = (uint64_t *)((char *)ret + offsetof(struct registry_stats, epoch));

	ret->state = __atomic_load_n(&r->st.state, __ATOMIC_RELAXED);
	ret->connected = __atomic_load_n(&r->st.connected, __ATOMIC_RELAXED);
	ret->leased = __atomic_load_n(&r->st.leased, __ATOMIC_RELAXED);
	ret->backfilling = __atomic_load_n(&r->st.backfilling, __ATOMIC_RELAXED);
	for (size_t i = 0; i < (offsetof(struct registry_stats, sentinels) -
				offsetof(struct registry_stats, epoch)) /
				       8;
	     i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	ret->sentinels = __atomic_load_n(&r->st.sentinels, __ATOMIC_RELAXED);
	ret->sentinels_up = __atomic_load_n(&r->st.sentinels_up, __ATOMIC_RELAXED);
	ret->sentinel = r->st.sentinel; /* constant */
	/* The strings change with a failover (control thread), under st_lock. */
	pthread_mutex_lock((pthread_mutex_t *)&r->st_lock);
	memcpy(ret->incarnation, r->st.incarnation, sizeof(ret->incarnation));
	memcpy(ret->master, r->st.master, sizeof(ret->master));
	memcpy(ret->last_failover_from, r->st.last_failover_from, sizeof(ret->last_failover_from));
	memcpy(ret->master_name, r->st.master_name, sizeof(ret->master_name));
	pthread_mutex_unlock((pthread_mutex_t *)&r->st_lock);
	/* Queue figures live: the control thread refreshes its copies only when it runs. */
	ret->queue_depth = rq_depth(&r->q);
	ret->enqueued = __atomic_load_n(&r->q.enqueued, __ATOMIC_RELAXED);
	ret->dropped_overflow = __atomic_load_n(&r->q.overflow, __ATOMIC_RELAXED);
}
