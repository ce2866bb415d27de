/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "../lib/hub.h"
#include "ctest.h"

#define MAX_NODES 8
#define MAX_KIDS  8

static struct cnode *nodes[MAX_NODES];
static struct redis *redises[2];
static pid_t kids[MAX_KIDS];
static bool in_child;
static char cluster[32];
static char redis_pass[128]; /* ct_redis_password() */

static const char *builddir(void)
{
	const char *b = getenv("top_builddir");

	return b ? b : ".";
}

/* Last resort for a hang: only kill(2) and _exit(2) are safe here. */
static void on_alarm(int sig)
{
	static const char msg[] = "watchdog: the test hangs; killing its processes\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nothing better to do */
	}
	for (unsigned i = 0; i < MAX_KIDS; i++)
		if (kids[i] > 0)
			kill(kids[i], SIGKILL);
	for (unsigned i = 0; i < MAX_NODES; i++)
		if (nodes[i] && nodes[i]->d.pid > 0)
			kill(nodes[i]->d.pid, SIGKILL);
	for (unsigned i = 0; i < 2; i++)
		if (redises[i] && redises[i]->pid > 0)
			kill(redises[i]->pid, SIGKILL);
	_exit(1);
}

void ct_init(unsigned watchdog_s)
{
	const char *rs = getenv("REDIS_SERVER");
	char cmd[512];

	signal(SIGPIPE, SIG_IGN);
	snprintf(cmd, sizeof(cmd), "%s --version >/dev/null 2>&1", rs && *rs ? rs : "redis-server");
	if (system(cmd) != 0) {
		printf("redis-server not found (apt-get install redis-server): skipped\n");
		exit(SKIP);
	}
	snprintf(cmd, sizeof(cmd), "%s/sidecar/kvstashd", builddir());
	if (access(cmd, X_OK) != 0) {
		printf("%s not built: skipped\n", cmd);
		exit(SKIP);
	}
	snprintf(cluster, sizeof(cluster), "test-%d", (int)getpid());
	signal(SIGALRM, on_alarm);
	alarm(watchdog_s);
}

const char *ct_cluster(void)
{
	return cluster;
}

static void kill_kids(void)
{
	for (unsigned i = 0; i < MAX_KIDS; i++)
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
			kids[i] = 0;
		}
}

void ct_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: FAILED: %s: ", file, line, expr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	if (in_child)
		_exit(1); /* the parent cleans up */
	alarm(0);
	kill_kids();
	for (unsigned i = 0; i < MAX_NODES; i++) {
		struct cnode *n = nodes[i];

		if (!n)
			continue;
		if (n->d.pid > 0) {
			/* A stopped daemon would not die of SIGKILL until continued. */
			kill(n->d.pid, SIGCONT);
			kvsd_kill(&n->d);
		}
		fprintf(stderr, "==== node %s ====\n", n->name);
		kvsd_dump_log(&n->d);
		kvsd_cleanup(&n->d);
		nodes[i] = NULL;
	}
	rtest_fail();
}

void ct_pass(const char *what)
{
	alarm(0);
	kill_kids();
	for (unsigned i = 0; i < MAX_NODES; i++)
		if (nodes[i]) {
			kvsd_cleanup(&nodes[i]->d);
			nodes[i] = NULL;
		}
	printf("ok - %s\n", what);
	fflush(stdout);
	rtest_pass();
}

void ct_redis_start(struct redis *rd)
{
	int r = redis_start(rd);

	CHECK(r == 0, "redis-server did not start: %s", strerror(-r));
	for (unsigned i = 0; i < 2; i++)
		if (!redises[i] || redises[i] == rd) {
			redises[i] = rd;
			break;
		}
}

void ct_peer_net(const char *tail, char *buf, size_t len)
{
	unsigned a = 1 + (unsigned)getpid() % 250, b = 1 + (unsigned)getpid() / 250 % 250;

	snprintf(buf, len, "127.%u.%u.%s", b, a, tail);
}

/* The cluster secret of this run's peer services: a file of ours, 0600 (ct_secret()). */
static char secret_path[64];

static void unlink_secret(void)
{
	if (secret_path[0] && !in_child)
		unlink(secret_path);
}

const char *ct_secret(void)
{
	static const char secret[] = "kvstash-test-cluster-secret-0123456789abcdef\n";
	int fd;

	if (secret_path[0])
		return secret_path;
	snprintf(secret_path, sizeof(secret_path), "/tmp/kvs-ct-secret-%d", (int)getpid());
	fd = open(secret_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0 && write(fd, secret, sizeof(secret) - 1) == (ssize_t)sizeof(secret) - 1,
	      "cannot write %s: %s", secret_path, strerror(errno));
	close(fd);
	atexit(unlink_secret);
	return secret_path;
}

static void start(struct cnode *n, const struct hub_host *h, const struct redis *rd,
		  const char *name, bool peer, const char *cluster_ini, const char *extra_ini)
{
	static unsigned started;
	char ini[4096], pini[512] = "";
	unsigned slot;
	int r;

	memset(n, 0, sizeof(*n));
	snprintf(n->name, sizeof(n->name), "%s", name);
	++started;
	if (peer && h) {
		/* Its host's address, peers allowed from the hub's network. */
		snprintf(n->peer, sizeof(n->peer), "%s:7471", h->addr);
		snprintf(pini, sizeof(pini),
			 "peer_listen = %s\npeer_allow = " HUB_NET "0/24\nsecret_file = %s\n",
			 n->peer, ct_secret());
	} else if (peer) {
		/*
		 * A loopback address of this run's own (127.0.0.0/8 is all
		 * loopback), so parallel runs never meet: peers allowed from
		 * that /24 only.
		 */
		char net[32];

		ct_peer_net("", net, sizeof(net));
		snprintf(n->peer, sizeof(n->peer), "%s%u:7471", net, started);
		snprintf(pini, sizeof(pini),
			 "peer_listen = %s\npeer_allow = %s0/24\nsecret_file = %s\n", n->peer, net,
			 ct_secret());
	} else {
		snprintf(n->peer, sizeof(n->peer), "10.0.0.%u:7000", started);
	}
	/*
	 * Long timeouts by default: a test that needs a short lease says so.
	 * query_timeout well above the 100 ms default, so that a loaded box
	 * never turns an answer into -ETIMEDOUT.
	 */
	snprintf(ini, sizeof(ini),
		 "[cluster]\nredis = %s:%d\nname = %s\nnode = %s\npeer_address = %s\n"
		 "lease_ttl = 30s\nconnect_timeout = 5s\ncommand_timeout = 10s\n"
		 "flush_timeout = 20s\nquery_timeout = 10s\n%s%s\n%s\n",
		 redis_host(rd), rd->port, cluster, name, n->peer, pini,
		 cluster_ini ? cluster_ini : "", extra_ini ? extra_ini : "");
	for (slot = 0; slot < MAX_NODES && nodes[slot]; slot++)
		;
	CHECK(slot < MAX_NODES, "too many nodes");
	nodes[slot] = n;
	r = kvsd_start_in(&n->d, h, ini);
	CHECK(r == 0, "kvstashd %s did not start: %s", name, strerror(-r));
}

void cnode_start_in(struct cnode *n, const struct hub_host *h, const struct redis *rd,
		    const char *name, bool peer, const char *cluster_ini, const char *extra_ini)
{
	start(n, h, rd, name, peer, cluster_ini, extra_ini);
}

void cnode_start(struct cnode *n, const struct redis *rd, const char *name, const char *cluster_ini,
		 const char *extra_ini)
{
	start(n, NULL, rd, name, false, cluster_ini, extra_ini);
}

void cnode_start_peer(struct cnode *n, const struct redis *rd, const char *name,
		      const char *cluster_ini, const char *extra_ini)
{
	start(n, NULL, rd, name, true, cluster_ini, extra_ini);
}

void cnode_term(struct cnode *n)
{
	CHECK(n->d.pid > 0, "node %s is not running", n->name);
	kill(n->d.pid, SIGTERM);
}

int cnode_wait_exit(struct cnode *n, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	int st;

	for (;;) {
		pid_t p = waitpid(n->d.pid, &st, WNOHANG);

		if (p == n->d.pid) {
			n->d.pid = 0;
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		if (p < 0)
			return -errno;
		if (now_ms() >= end)
			return -ETIMEDOUT;
		usleep(5000);
	}
}

void cnode_stop(struct cnode *n)
{
	int st;

	cnode_term(n);
	st = cnode_wait_exit(n, CT_POLL_MS);
	CHECK(st == 0, "kvstashd %s: exit status %d after SIGTERM", n->name, st);
}

void ct_stop_pair(struct kvs_client *ca, struct test_kv *kva, struct cnode *a,
		  struct kvs_client *cb, struct test_kv *kvb, struct cnode *b)
{
	kvs_close(ca);
	kvs_close(cb);
	test_kv_free(kva);
	test_kv_free(kvb);
	cnode_stop(a);
	cnode_stop(b);
}

void cnode_kill(struct cnode *n)
{
	if (n->d.pid > 0)
		kill(n->d.pid, SIGCONT);
	kvsd_kill(&n->d);
}

void ct_redis_password(const char *password)
{
	snprintf(redis_pass, sizeof(redis_pass), "%s", password ? password : "");
}

int ct_redis_cmd(const struct redis *rd, char *out, size_t len, const char *fmt, ...)
{
	struct timeval tv = { 2, 0 };
	redisContext *c;
	redisReply *rep = NULL;
	va_list ap;
	int r = 0;

	c = redisConnectWithTimeout(redis_host(rd), rd->port, tv);
	if (!c || c->err) {
		redisFree(c);
		return -ECONNREFUSED;
	}
	redisSetTimeout(c, tv);
	if (redis_pass[0]) {
		rep = redisCommand(c, "AUTH %s", redis_pass);
		if (!rep || rep->type == REDIS_REPLY_ERROR)
			r = -EACCES;
		freeReplyObject(rep);
		rep = NULL;
	}
	if (r == 0) {
		va_start(ap, fmt);
		rep = redisvCommand(c, fmt, ap);
		va_end(ap);
		if (!rep)
			r = -EIO;
	}
	if (rep && out) {
		switch (rep->type) {
		case REDIS_REPLY_STRING:
		case REDIS_REPLY_STATUS:
		case REDIS_REPLY_ERROR:
			snprintf(out, len, "%s", rep->str);
			break;
		case REDIS_REPLY_INTEGER:
			snprintf(out, len, "%lld", rep->integer);
			break;
		case REDIS_REPLY_NIL:
			snprintf(out, len, "(nil)");
			break;
		default:
			snprintf(out, len, "(array of %zu)", rep->elements);
			break;
		}
	}
	freeReplyObject(rep);
	redisFree(c);
	return r;
}

uint64_t ct_lease_epoch(const struct redis *rd, const char *node)
{
	char out[128];

	if (ct_redis_cmd(rd, out, sizeof(out), "HGET kvs:%s:lease:%s epoch", cluster, node) < 0)
		return 0;
	return strtoull(out, NULL, 10); /* "(nil)": 0 */
}

uint64_t ct_wait_lease(const struct redis *rd, const char *node, uint64_t above)
{
	uint64_t e = 0;

	for (uint64_t end = now_ms() + CT_POLL_MS; now_ms() < end; usleep(5000)) {
		e = ct_lease_epoch(rd, node);
		if (e > above)
			return e;
	}
	CHECK(e > above, "node %s never held a lease above epoch %llu (last %llu)", node,
	      (unsigned long long)above, (unsigned long long)e);
	return e;
}

void ct_wait_no_lease(const struct redis *rd, const char *node)
{
	uint64_t e = 1;

	for (uint64_t end = now_ms() + CT_POLL_MS; now_ms() < end && e; usleep(5000))
		e = ct_lease_epoch(rd, node);
	CHECK(e == 0, "node %s kept its lease (epoch %llu)", node, (unsigned long long)e);
}

static void lib_log(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	if (getenv("KVSTASH_TEST_DEBUG"))
		fprintf(stderr, "libkvstash: %s\n", msg);
}

struct kvs_client *ct_connect(const struct cnode *n, uint32_t role, const char *ns,
			      const char *instance, uint32_t rank, uint32_t tp)
{
	struct kvs_connect_opts o;
	struct kvs_client *c = NULL;
	int r;

	kvs_connect_opts_init(&o);
	o.role = role;
	o.instance = instance;
	o.ns = ns;
	o.tp_rank = rank;
	o.tp_size = tp;
	o.world_size = tp;
	o.timeout_ms = CT_OP_MS;
	o.flags = KVS_CONNECT_CLUSTER;
	o.log = lib_log;
	r = kvs_connect(n->d.sock, &o, &c);
	CHECK(r == 0, "connect to %s (ns %s, instance %s rank %u/%u, role %u, cluster): %s",
	      n->name, ns, instance, rank, tp, role, kvs_strerror(r));
	return c;
}

struct kvs_client *ct_worker_rank(const struct cnode *n, const char *ns, const char *instance,
				  uint32_t rank, uint32_t tp, struct test_kv *kv, unsigned layers,
				  unsigned blocks, uint64_t seg)
{
	return ct_worker_kind(n, ns, instance, rank, tp, LAYOUT_PAGE_FIRST, kv, layers, blocks,
			      seg);
}

struct kvs_client *ct_worker_kind(const struct cnode *n, const char *ns, const char *instance,
				  uint32_t rank, uint32_t tp, enum test_layout_kind kind,
				  struct test_kv *kv, unsigned layers, unsigned blocks,
				  uint64_t seg)
{
	struct kvs_client *c = ct_connect(n, KVS_ROLE_WORKER, ns, instance, rank, tp);
	int r;

	r = test_kv_alloc(kv, kind, layers, blocks, seg);
	CHECK(r == 0, "engine memory: %s", strerror(-r));
	r = test_kv_register(c, kv);
	CHECK(r == 0, "register on %s (ns %s, rank %u/%u): %s", n->name, ns, rank, tp,
	      kvs_strerror(r));
	return c;
}

struct kvs_client *ct_worker(const struct cnode *n, const char *ns, struct test_kv *kv,
			     unsigned layers, unsigned blocks, uint64_t seg)
{
	static unsigned engines;
	char inst[96];

	/* Unique per engine: two workers of one instance and rank would be one rank twice. */
	snprintf(inst, sizeof(inst), "%s-%d-%u", n->name, (int)getpid(), ++engines);
	return ct_worker_rank(n, ns, inst, 0, 1, kv, layers, blocks, seg);
}

void ct_save(struct kvs_client *c, struct test_kv *kv, const uint8_t *keys, uint32_t n,
	     uint64_t seed)
{
	uint32_t ids[1024];
	uint64_t stored = 0, skipped = 0;
	int r;

	CHECK(n <= 1024, "ct_save: %u keys", n);
	for (uint32_t i = 0; i < n; i++) {
		ids[i] = i % kv->blocks;
		test_kv_fill(kv, ids[i], seed + i);
	}
	r = kvs_save_sync(c, keys, ids, n, CT_OP_MS, &stored, &skipped);
	CHECK(r == (int)n, "SAVE of %u blocks: %d (%s), stored %llu skipped %llu", n, r,
	      r < 0 ? kvs_strerror(r) : "count", (unsigned long long)stored,
	      (unsigned long long)skipped);
}

int ct_query(struct kvs_client *c, const uint8_t *keys, uint32_t n)
{
	return kvs_query_sync(c, keys, n, 0, KVS_QUERY_NOLEASE, CT_OP_MS, NULL);
}

int ct_cquery(struct kvs_client *c, const uint8_t *keys, uint32_t n, struct kvs_cluster_answer *a)
{
	memset(a, 0, sizeof(*a));
	return kvs_query_cluster_sync(c, keys, n, 0, KVS_QUERY_NOLEASE, CT_OP_MS, NULL, a);
}

int ct_cflush(struct kvs_client *c, uint64_t *reg, uint64_t *drop)
{
	*reg = *drop = UINT64_MAX;
	return kvs_flush_cluster_sync(c, 0, CT_POLL_MS + CT_OP_MS, reg, drop);
}

const struct kvs_cluster_holder *ct_holder(const struct kvs_cluster_answer *a, const char *node)
{
	for (uint32_t i = 0; i < a->nr_holders && i < KVS_CLUSTER_HOLDERS; i++)
		if (!strcmp(a->holders[i].node, node))
			return &a->holders[i];
	return NULL;
}

const char *ct_answer_str(int res, const struct kvs_cluster_answer *a)
{
	static char buf[1024];
	size_t len;

	len = (size_t)snprintf(buf, sizeof(buf),
			       "res %d (%s) status %d (%s) best %u holders %u:", res,
			       res < 0 ? kvs_strerror(res) : "hits", a->status,
			       a->status ? kvs_strerror(a->status) : "ok", a->best, a->nr_holders);
	for (uint32_t i = 0; i < a->nr_holders && i < KVS_CLUSTER_HOLDERS && len < sizeof(buf); i++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, " %.63s@%.127s/e%llu/%u",
					a->holders[i].node, a->holders[i].addr,
					(unsigned long long)a->holders[i].epoch,
					a->holders[i].blocks);
	return buf;
}

pid_t ct_spawn(int (*fn)(void *arg), void *arg)
{
	unsigned slot;
	pid_t p;

	for (slot = 0; slot < MAX_KIDS && kids[slot]; slot++)
		;
	CHECK(slot < MAX_KIDS, "too many engine processes");
	fflush(NULL);
	p = fork();
	CHECK(p >= 0, "fork: %s", strerror(errno));
	if (p == 0) {
		in_child = true;
		alarm(0);
		_exit(fn(arg));
	}
	kids[slot] = p;
	return p;
}

int ct_reap(pid_t pid, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	int st;

	for (;;) {
		pid_t p = waitpid(pid, &st, WNOHANG);

		if (p == pid)
			break;
		if (p < 0 || now_ms() >= end)
			return -ETIMEDOUT;
		usleep(5000);
	}
	for (unsigned i = 0; i < MAX_KIDS; i++)
		if (kids[i] == pid)
			kids[i] = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- the daemon's stats groups ---------------------------------------- */

struct stat_req {
	uint32_t type;
	const struct kvs_stats_field *f;
	bool found;
	uint64_t value;
	char text[KVS_NAME_MAX];
};

static int stat_cb(void *arg, const struct kvs_msg_hdr *m)
{
	struct stat_req *q = arg;
	const uint8_t *p = (const uint8_t *)m + q->f->offset;

	if (m->type != q->type || q->found || m->size < q->f->offset + q->f->size)
		return 0;
	q->found = true;
	if (q->f->type == KVS_STATS_T_NAME) {
		snprintf(q->text, sizeof(q->text), "%.*s", (int)q->f->size, (const char *)p);
	} else if (q->f->size == 8) {
		memcpy(&q->value, p, 8);
	} else {
		uint32_t v;

		memcpy(&v, p, 4);
		q->value = v;
	}
	return 0;
}

/* Field @field of @n's group @group, as `kvstash stats` names them (libkvstash's descriptors). */
static void group_stat(const struct cnode *n, const char *group, const char *field,
		       struct stat_req *q)
{
	struct kvs_stats_group g;
	struct kvs_stats_field f;
	struct kvs_client *admin;
	int r = -ENOENT;

	for (uint32_t i = 0; kvs_stats_group(i, &g) == 0; i++)
		if (!strcmp(g.name, group)) {
			for (uint32_t j = 0; kvs_stats_field(g.msg_type, j, &f) == 0; j++)
				if (!strcmp(f.name, field)) {
					r = 0;
					break;
				}
			break;
		}
	CHECK(r == 0, "no field %s in the %s stats group", field, group);
	memset(q, 0, sizeof(*q));
	q->type = g.msg_type;
	q->f = &f;
	r = test_admin(&n->d, &admin);
	CHECK(r == 0, "admin session on %s: %s", n->name, kvs_strerror(r));
	r = kvs_admin_request(admin, KVS_MSG_STATS, stat_cb, q);
	kvs_close(admin);
	CHECK(r >= 0, "STATS of %s: %s", n->name, kvs_strerror(r));
	CHECK(q->found, "%s sent no %s stats", n->name, group);
	q->f = NULL;
}

int64_t ct_stat(const struct cnode *n, const char *group, const char *field)
{
	struct stat_req q;

	group_stat(n, group, field, &q);
	return (int64_t)q.value;
}

void ct_stat_text(const struct cnode *n, const char *group, const char *field, char *buf,
		  size_t len)
{
	struct stat_req q;

	group_stat(n, group, field, &q);
	snprintf(buf, len, "%s", q.text);
}

int64_t ct_peer_stat(const struct cnode *n, const char *field)
{
	return ct_stat(n, "peer", field);
}

void ct_wait_peer_stat(const struct cnode *n, const char *field, int64_t want)
{
	uint64_t end = now_ms() + CT_POLL_MS;
	int64_t v;

	while ((v = ct_peer_stat(n, field)) != want) {
		CHECK(now_ms() < end, "%s: peer %s is %lld, want %lld", n->name, field,
		      (long long)v, (long long)want);
		usleep(20000);
	}
}
