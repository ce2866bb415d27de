/* SPDX-License-Identifier: MIT */
/*
 * Cluster tests through the whole stack: real kvstashd processes
 * (tests/lib/harness.h) with a [cluster] section, each its own socket and
 * directory, all on one real redis-server of the test's own (rtest.h:
 * random loopback port, no persistence), and real engines (libkvstash
 * sessions that connected with KVS_CONNECT_CLUSTER over host memfds).
 *
 * What the registry holds is observed through the engines' cluster
 * QUERYs and FLUSHes, and through Redis itself (the node's lease key,
 * docs/CLUSTER.md "Model"), never through a sleep: every wait is a
 * bounded poll of a condition with a generous deadline.
 *
 * A failed CHECK prints where and why, the logs of every kvstashd the
 * test started, kills them, the engine processes ct_spawn() forked and
 * redis-server, removes their directories and exits 1; ct_watchdog()
 * turns a hang into a failure.
 */
#ifndef KVS_CTEST_H
#define KVS_CTEST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvstash/kvstash.h>

#include "../lib/harness.h"
#include "rtest.h"

/* rtest.h's CHECK knows only redis-server; this one also the daemons. */
#undef CHECK
#define CHECK(cond, ...)                                                 \
	do {                                                             \
		if (!(cond))                                             \
			ct_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
	} while (0)

#define CT_OP_MS   20000 /* one engine operation: generous for a loaded ASan box */
#define CT_POLL_MS 20000 /* one bounded poll of a condition */

struct cnode {
	struct kvsd d;
	char name[32];
	char peer[64]; /* its [cluster] peer_address */
};

/* Skip (77) without redis-server or kvstashd; ignore SIGPIPE; arm the watchdog. */
void ct_init(unsigned watchdog_s);
void ct_fail(const char *file, int line, const char *expr, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 4, 5)));
/* Stop what is still running and exit 0. */
void ct_pass(const char *what) __attribute__((noreturn));

/* "test-<pid>": this run's [cluster] name, so parallel runs never meet. */
const char *ct_cluster(void);

/* redis_start(), remembered for the cleanup. */
void ct_redis_start(struct redis *rd);

/*
 * kvstashd as node @name of ct_cluster() on @rd: [cluster] redis, name,
 * node, peer_address ("10.0.0.<k>:7000"), timeouts for a test box, then
 * @cluster_ini (more [cluster] keys, may override those) and @extra_ini
 * (other sections), both may be NULL.  Fails the test when it does not
 * start.
 */
void cnode_start(struct cnode *n, const struct redis *rd, const char *name, const char *cluster_ini,
		 const char *extra_ini);
/*
 * As cnode_start() (@peer: cnode_start_peer()), in host @h's network
 * namespace (tests/lib/hub.h; the redis of @rd reachable from it): its
 * peer service on @h's address, peers allowed from the hub's /24.
 */
struct hub_host;
void cnode_start_in(struct cnode *n, const struct hub_host *h, const struct redis *rd,
		    const char *name, bool peer, const char *cluster_ini, const char *extra_ini);
/*
 * As cnode_start(), with the peer service: peer_listen and peer_address
 * are n->peer, a loopback address of this run's own (127.B.A.k:7471),
 * peer_allow that /24, secret_file ct_secret().
 */
void cnode_start_peer(struct cnode *n, const struct redis *rd, const char *name,
		      const char *cluster_ini, const char *extra_ini);
/*
 * "127.B.A.@tail" into @buf: an address of this run's peer network (the
 * /24 every node's peer_allow admits), e.g. @tail "250:0" to dial from.
 */
void ct_peer_net(const char *tail, char *buf, size_t len);
/* This run's cluster secret file (made on first use, removed at exit). */
const char *ct_secret(void);
/* SIGTERM; fails the test unless it exits 0 within CT_POLL_MS. */
void cnode_stop(struct cnode *n);
/*
 * The end of a two-node test: both engines closed and their memory
 * freed, then both nodes stopped (each must exit 0).
 */
void ct_stop_pair(struct kvs_client *ca, struct test_kv *kva, struct cnode *a,
		  struct kvs_client *cb, struct test_kv *kvb, struct cnode *b);
/* Only the SIGTERM; then cnode_wait_exit(). */
void cnode_term(struct cnode *n);
/* Wait up to @timeout_ms for the exit; its status, or -ETIMEDOUT. */
int cnode_wait_exit(struct cnode *n, int timeout_ms);
/* SIGKILL and reap (the directory stays until the end). */
void cnode_kill(struct cnode *n);

/*
 * Commands of the test's own (leases, forged entries) go through
 * ct_redis_cmd(): rtest's redis_cmd(), after AUTH with the password set by
 * ct_redis_password() (NULL: none).
 */
void ct_redis_password(const char *password);
int ct_redis_cmd(const struct redis *rd, char *out, size_t len, const char *fmt, ...);

/* The epoch of @node's lease in Redis, 0 when it has none (expired, released). */
uint64_t ct_lease_epoch(const struct redis *rd, const char *node);
/* Poll until @node holds a lease with an epoch above @above; that epoch. */
uint64_t ct_wait_lease(const struct redis *rd, const char *node, uint64_t above);
/* Poll until @node holds no lease. */
void ct_wait_no_lease(const struct redis *rd, const char *node);

/*
 * An engine on @n: a worker of namespace @ns that connected with
 * KVS_CONNECT_CLUSTER and registered @kv (page-first, @layers layers of
 * @blocks blocks, @seg bytes per segment: its geometry).  Fails the test
 * on error.
 */
struct kvs_client *ct_worker(const struct cnode *n, const char *ns, struct test_kv *kv,
			     unsigned layers, unsigned blocks, uint64_t seg);
/* The same as rank @rank of @tp of instance @instance. */
struct kvs_client *ct_worker_rank(const struct cnode *n, const char *ns, const char *instance,
				  uint32_t rank, uint32_t tp, struct test_kv *kv, unsigned layers,
				  unsigned blocks, uint64_t seg);
/* The same with a layout of @kind (LAYOUT_MLA registers replicated). */
struct kvs_client *ct_worker_kind(const struct cnode *n, const char *ns, const char *instance,
				  uint32_t rank, uint32_t tp, enum test_layout_kind kind,
				  struct test_kv *kv, unsigned layers, unsigned blocks, uint64_t seg);
/* A session of @role (no memory) that connected with KVS_CONNECT_CLUSTER. */
struct kvs_client *ct_connect(const struct cnode *n, uint32_t role, const char *ns,
			      const char *instance, uint32_t rank, uint32_t tp);

/* SAVE keys[0..n) from blocks (first + i) % kv->blocks, filled from @seed: must store all. */
void ct_save(struct kvs_client *c, struct test_kv *kv, const uint8_t *keys, uint32_t n,
	     uint64_t seed);
/* Local QUERY (no lease): the hit count, or -errno. */
int ct_query(struct kvs_client *c, const uint8_t *keys, uint32_t n);
/* Cluster QUERY (no lease): the local hits or -errno, the answer into @a (zeroed first). */
int ct_cquery(struct kvs_client *c, const uint8_t *keys, uint32_t n, struct kvs_cluster_answer *a);
/* Cluster FLUSH: res; the counts into @reg and @drop. */
int ct_cflush(struct kvs_client *c, uint64_t *reg, uint64_t *drop);

/* The holder named @node in @a, or NULL. */
const struct kvs_cluster_holder *ct_holder(const struct kvs_cluster_answer *a, const char *node);
/* One line describing @a, for failure messages (a static buffer). */
const char *ct_answer_str(int res, const struct kvs_cluster_answer *a);

/*
 * Engines as processes: the child runs @fn(@arg) and exits with its
 * value (a failed CHECK in a child exits 1 and leaves the cleanup to the
 * parent); ct_reap() waits up to @timeout_ms and returns its status.
 */
pid_t ct_spawn(int (*fn)(void *arg), void *arg);
int ct_reap(pid_t pid, int timeout_ms);

/*
 * Field @field of @n's stats group @group (as `kvstash stats` names them,
 * read through libkvstash's descriptors); fails the test without one.
 * ct_stat_text() for a NAME field, ct_peer_stat() of the peer group.
 */
int64_t ct_stat(const struct cnode *n, const char *group, const char *field);
void ct_stat_text(const struct cnode *n, const char *group, const char *field, char *buf,
		  size_t len);
int64_t ct_peer_stat(const struct cnode *n, const char *field);
/* Poll until it reads @want (CT_POLL_MS). */
void ct_wait_peer_stat(const struct cnode *n, const char *field, int64_t want);

#endif /* KVS_CTEST_H */
