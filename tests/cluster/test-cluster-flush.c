/* SPDX-License-Identifier: MIT */
/*
 * The cluster FLUSH barrier through kvstashd, two nodes on one real
 * redis-server:
 *   - delivered before ack: node A saves N blocks; A's cluster FLUSH
 *     completes with res 0, at least N changes registered and none
 *     dropped, and at once (no poll) B's cluster QUERY of those keys
 *     answers all N held by A, with A's peer address and lease epoch;
 *   - ack on drop: Redis refusing every write (maxmemory 1, noeviction),
 *     the FLUSH after more saves still completes (within its deadline)
 *     and reports them dropped, none registered; B never finds them;
 *   - no hang at shutdown: with Redis stopped (SIGSTOP) a cluster FLUSH
 *     waits for the batch in flight (command_timeout 10 s, flush_timeout
 *     20 s); SIGTERM to kvstashd completes it (-ESHUTDOWN from the daemon
 *     or -ECONNRESET from libkvstash) well before either, and kvstashd
 *     exits 0; a cluster QUERY pending then completes too;
 *   - an engine killed while its cluster FLUSH and QUERY wait: kvstashd
 *     serves the others meanwhile, and reclaims its session once Redis
 *     answers again.
 * Without [cluster] a cluster FLUSH is -EOPNOTSUPP (never a false ack).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctest.h"

#define NS "qwen3-8b/bf16/flush"
#define N  3000 /* three chunks of the registry's query */
#define M  100

static void delivered_before_ack(struct redis *rd, struct cnode *a, struct cnode *b,
				 struct kvs_client *ca, struct test_kv *kva, struct kvs_client *cb)
{
	static uint8_t keys[N * 16];
	struct kvs_cluster_answer ans;
	const struct kvs_cluster_holder *h;
	uint64_t reg, drop, epoch = ct_lease_epoch(rd, a->name);
	int r;

	test_keys(keys, N, 1);
	for (unsigned i = 0; i < N; i += 1000)
		ct_save(ca, kva, keys + 16 * i, 1000, 100 + i);
	r = ct_cflush(ca, &reg, &drop);
	CHECK(r == 0 && reg >= N && drop == 0,
	      "cluster FLUSH after %d saved blocks: res %d (%s) registered %llu dropped %llu", N, r,
	      kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop);
	/* At once, no poll: the barrier promises findability when it completes. */
	r = ct_cquery(cb, keys, N, &ans);
	h = ct_holder(&ans, a->name);
	CHECK(r == 0 && ans.status == 0 && ans.best == N && ans.nr_holders == 1 && h &&
		      h->blocks == N && !strcmp(h->addr, a->peer) && h->epoch == epoch &&
		      ans.round_trips >= 3,
	      "B's cluster QUERY right after A's FLUSH (want %d held by %s@%s/e%llu): %s", N,
	      a->name, a->peer, (unsigned long long)epoch, ct_answer_str(r, &ans));
	/* A second FLUSH with nothing new reports nothing new. */
	r = ct_cflush(ca, &reg, &drop);
	CHECK(r == 0 && reg == 0 && drop == 0,
	      "idle cluster FLUSH: res %d registered %llu dropped %llu (want 0 0)", r,
	      (unsigned long long)reg, (unsigned long long)drop);
}

static void ack_on_drop(struct redis *rd, struct kvs_client *ca, struct test_kv *kva,
			struct kvs_client *cb)
{
	static uint8_t keys[M * 16];
	struct kvs_cluster_answer ans;
	uint64_t reg, drop, t0;
	char out[256];
	int r;

	CHECK(redis_cmd(rd, out, sizeof(out), "CONFIG SET maxmemory-policy noeviction") == 0 &&
		      redis_cmd(rd, out, sizeof(out), "CONFIG SET maxmemory 1") == 0 &&
		      !strcmp(out, "OK"),
	      "CONFIG SET maxmemory 1: %s", out);
	test_keys(keys, M, 2);
	ct_save(ca, kva, keys, M, 300);
	t0 = now_ms();
	r = ct_cflush(ca, &reg, &drop);
	CHECK((r == 0 || r == -ETIMEDOUT) && reg == 0 && drop >= M,
	      "cluster FLUSH over refused inserts: res %d (%s) registered %llu dropped %llu "
	      "(want 0 registered, >= %d dropped)",
	      r, kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop, M);
	printf("# the FLUSH over refused inserts took %llu ms (res %d)\n",
	       (unsigned long long)(now_ms() - t0), r);
	/*
	 * Before Redis takes writes again: a lease re-acquired after that
	 * would backfill these blocks, rightly.
	 */
	r = ct_cquery(cb, keys, M, &ans);
	CHECK(r == 0 && ans.best == 0 && ans.nr_holders == 0, "dropped registrations answered: %s",
	      ct_answer_str(r, &ans));
	CHECK(redis_cmd(rd, out, sizeof(out), "CONFIG SET maxmemory 0") == 0 && !strcmp(out, "OK"),
	      "CONFIG SET maxmemory 0: %s", out);
	/* Writes work again: new blocks are registered, none dropped. */
	for (uint64_t i = 0, end = now_ms() + CT_POLL_MS;; i++) {
		test_keys(keys, 4, 500 + i);
		ct_save(ca, kva, keys, 4, 500 + 10 * i);
		r = ct_cflush(ca, &reg, &drop);
		if (r == 0 && reg >= 4 && drop == 0)
			break;
		CHECK(now_ms() < end,
		      "registrations never recovered from the refused writes: res %d "
		      "registered %llu dropped %llu",
		      r, (unsigned long long)reg, (unsigned long long)drop);
		usleep(50000);
	}
	r = ct_cquery(cb, keys, 4, &ans);
	CHECK(r == 0 && ans.best == 4, "registered after the recovery: %s", ct_answer_str(r, &ans));
}

/* Shared with the engine process of engine_dies(). */
static struct {
	volatile int submitted;
} * shm;
static struct cnode *node_a;

static int doomed_engine(void *arg)
{
	static uint8_t keys[8 * 16];
	struct kvs_client *c;
	struct kvs_sqe *sqe;
	struct test_kv kv;

	(void)arg;
	c = ct_worker(node_a, NS, &kv, 2, 8, 4096);
	test_keys(keys, 8, 4);
	ct_save(c, &kv, keys, 4, 500);
	CHECK((sqe = kvs_get_sqe(c)) && kvs_prep_flush(c, sqe, KVS_FLUSH_CLUSTER, 1) == 0,
	      "prep FLUSH");
	CHECK((sqe = kvs_get_sqe(c)) &&
		      kvs_prep_query(c, sqe, keys + 4 * 16, 4, 0,
				     KVS_QUERY_CLUSTER | KVS_QUERY_NOLEASE, 2) == 0,
	      "prep QUERY");
	CHECK(kvs_submit(c) == 2, "submit");
	shm->submitted = 1;
	for (;;)
		pause(); /* killed with its cluster ops pending */
}

/*
 * An engine killed while its cluster FLUSH and QUERY wait for a stopped
 * Redis: kvstashd keeps serving the others, and reclaims the session
 * once the ops came back (Redis continued).
 */
static void engine_dies(struct redis *rd, struct cnode *a, struct kvs_client *ca)
{
	struct kvs_client *admin = NULL;
	int base, n = -1, r;
	pid_t kid;

	node_a = a;
	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(shm != MAP_FAILED, "mmap");
	r = test_admin(&a->d, &admin);
	CHECK(r == 0, "admin: %s", kvs_strerror(r));
	base = test_status_sessions(admin);
	redis_kill(rd, SIGSTOP);
	kid = ct_spawn(doomed_engine, NULL);
	for (uint64_t end = now_ms() + CT_POLL_MS; !shm->submitted && now_ms() < end;)
		usleep(5000);
	CHECK(shm->submitted, "the engine never submitted its cluster ops");
	kill(kid, SIGKILL);
	ct_reap(kid, CT_POLL_MS);
	r = kvs_nop_sync(ca, CT_OP_MS);
	CHECK(r == 0, "NOP while a dead engine's cluster ops wait: %d (%s)", r, kvs_strerror(r));
	redis_kill(rd, SIGCONT);
	for (uint64_t end = now_ms() + CT_POLL_MS; now_ms() < end; usleep(20000)) {
		n = test_status_sessions(admin);
		if (n == base)
			break;
	}
	CHECK(n == base, "the dead engine's session was never reclaimed: %d sessions, want %d", n,
	      base);
	kvs_close(admin);
}

static void no_hang_at_shutdown(struct redis *rd, struct cnode *a, struct kvs_client *ca,
				struct test_kv *kva)
{
	static uint8_t keys[16 * 16];
	struct kvs_cluster_answer ans;
	bool flushed = false, queried = false;
	struct kvs_cqe *cqe;
	struct kvs_sqe *sqe;
	uint64_t t0;
	int r, st;

	redis_kill(rd, SIGSTOP);
	test_keys(keys, 16, 3);
	ct_save(ca, kva, keys, 8, 400);
	sqe = kvs_get_sqe(ca);
	CHECK(sqe, "no SQE");
	r = kvs_prep_flush(ca, sqe, KVS_FLUSH_CLUSTER, 77);
	CHECK(r == 0, "prep FLUSH: %s", kvs_strerror(r));
	/* And a QUERY of 8 keys n1 lacks: the registry is asked, and answers nothing. */
	sqe = kvs_get_sqe(ca);
	CHECK(sqe, "no SQE");
	r = kvs_prep_query(ca, sqe, keys, 16, 0, KVS_QUERY_CLUSTER | KVS_QUERY_NOLEASE, 78);
	CHECK(r == 0, "prep QUERY: %s", kvs_strerror(r));
	CHECK(kvs_submit(ca) == 2, "submit FLUSH and QUERY");
	/*
	 * Pending: Redis answers nothing, and neither command_timeout (10 s),
	 * query_timeout (10 s) nor flush_timeout (20 s) can have passed.  A
	 * daemon that acked the FLUSH already would be lying about the
	 * registry.
	 */
	r = kvs_wait_cqe(ca, &cqe, 200);
	CHECK(r == -ETIMEDOUT, "a cluster op on a stopped Redis completed at once: %d res %d", r,
	      r == 0 ? cqe->res : 0);
	t0 = now_ms();
	cnode_term(a);
	while (!flushed || !queried) {
		r = kvs_wait_cqe(ca, &cqe, CT_POLL_MS);
		CHECK(r == 0,
		      "cluster ops pending at SIGTERM never completed (FLUSH %d, QUERY %d): %s",
		      flushed, queried, kvs_strerror(r));
		if (cqe->user_data == 77) {
			CHECK(cqe->res == -ESHUTDOWN || cqe->res == -ECONNRESET,
			      "cluster FLUSH at shutdown: res %d (%s), want -ESHUTDOWN or "
			      "-ECONNRESET",
			      cqe->res, kvs_strerror(cqe->res));
			printf("# the pending FLUSH completed %llu ms after SIGTERM with %s\n",
			       (unsigned long long)(now_ms() - t0), kvs_strerror(cqe->res));
			flushed = true;
		} else if (cqe->user_data == 78) {
			memset(&ans, 0, sizeof(ans));
			r = kvs_cqe_cluster(ca, cqe, &ans);
			CHECK(cqe->res == -ECONNRESET ||
				      (cqe->res == 8 && r == 0 && ans.best == 0 && ans.status < 0),
			      "cluster QUERY at shutdown: %s", ct_answer_str(cqe->res, &ans));
			printf("# the pending QUERY completed with %s\n",
			       ct_answer_str(cqe->res, &ans));
			queried = true;
		} else {
			CHECK(false, "unexpected CQE %llu res %d",
			      (unsigned long long)cqe->user_data, cqe->res);
		}
		kvs_cqe_seen(ca, cqe);
	}
	st = cnode_wait_exit(a, CT_POLL_MS);
	CHECK(st == 0, "kvstashd with a stopped Redis: exit status %d after SIGTERM", st);
	redis_kill(rd, SIGCONT);
}

/* A kvstashd without [cluster] never pretends to have registered anything. */
static void without_cluster(void)
{
	struct kvs_connect_opts o;
	struct kvs_client *c = NULL;
	struct kvsd d;
	uint64_t reg = 42, drop = 42;
	int r;

	r = kvsd_start(&d, NULL);
	CHECK(r == 0, "plain kvstashd: %s", strerror(-r));
	kvs_connect_opts_init(&o);
	o.instance = "plain";
	o.ns = NS;
	r = kvs_connect(d.sock, &o, &c);
	if (r == 0)
		r = kvs_flush_cluster_sync(c, 0, CT_OP_MS, &reg, &drop);
	kvs_close(c);
	if (r != -EOPNOTSUPP)
		kvsd_dump_log(&d);
	kvsd_kill(&d);
	kvsd_cleanup(&d);
	CHECK(r == -EOPNOTSUPP, "cluster FLUSH without [cluster]: %d (%s)", r, kvs_strerror(r));
}

int main(void)
{
	struct redis rd = { 0 };
	struct cnode a, b;
	struct test_kv kva, kvb;
	struct kvs_client *ca, *cb;

	ct_init(240);
	ct_redis_start(&rd);
	cnode_start(&a, &rd, "n1", NULL, "[pool]\nsize = 64M\nextent_size = 256K\n");
	cnode_start(&b, &rd, "n2", NULL, NULL);
	ct_wait_lease(&rd, a.name, 0);
	ct_wait_lease(&rd, b.name, 0);
	ca = ct_worker(&a, NS, &kva, 2, 128, 4096);
	cb = ct_worker(&b, NS, &kvb, 2, 128, 4096);

	delivered_before_ack(&rd, &a, &b, ca, &kva, cb);
	printf("ok - delivered before ack\n");
	ack_on_drop(&rd, ca, &kva, cb);
	printf("ok - ack on drop\n");
	engine_dies(&rd, &a, ca);
	printf("ok - an engine dies with its cluster ops pending\n");
	no_hang_at_shutdown(&rd, &a, ca, &kva);
	printf("ok - no hang at shutdown\n");
	without_cluster();

	kvs_close(ca);
	kvs_close(cb);
	test_kv_free(&kva);
	test_kv_free(&kvb);
	cnode_stop(&b);
	ct_pass("cluster flush: delivered before ack, ack on drop, no hang at shutdown");
}
