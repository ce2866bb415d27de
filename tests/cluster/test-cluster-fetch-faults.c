/* SPDX-License-Identifier: MIT */
/*
 * The peer transfer's failure matrix through kvstashd: real nodes with the
 * peer service on loopback addresses of the run's own, one real
 * redis-server, real engines.  Every case ends with the fetching QUERY
 * answered within its deadline (fetch_timeout 3 s here), a prefix of the
 * keys whose every LOADed byte is what the serving node saved, the
 * fetching node alive, and no lock left on the serving node (its stats):
 *   - the serving kvstashd SIGKILLed while a 64 MiB fetch runs;
 *   - the serving kvstashd SIGSTOPped while a fetch runs, past its lock
 *     TTL (1 s): the fetch ends at its deadline, holding its slots
 *     (fetch_staged_bytes) meanwhile, and another instance of the fetching
 *     node saves whole all the same; once continued, the node holds no
 *     lock and serves a whole fetch again;
 *   - a stale registry entry (Redis made to say a holds keys only c has):
 *     0 from a at once, and c's copy by hint;
 *   - the fetcher's pool too small for what it asks: the prefix that
 *     fitted, the lock released;
 *   - the fetching kvstashd SIGKILLed mid-transfer: the serving node
 *     drops its lock at once (not at the TTL);
 *   - hostile peers against a kvstashd (garbage, an oversized header, a
 *     wrong type, another major, a bad HELLO, another cluster, a wrong
 *     secret, requests before authentication, stalls mid-header and
 *     mid-payload, a connection flood): each refused as kvspeer(7) says,
 *     and the node serves a whole fetch afterwards.  Forged lock ids and
 *     out-of-range requests need the peer's own geometry and are the
 *     library's test (tests/peer/test-peer-hostile.sh, the same code).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctest.h"

#define NS	    "qwen3-32b/bf16/faults"
#define LAYERS	    4
#define SEG	    (64 * 1024) /* 256 KiB blocks */
#define BLOCKS	    300
#define BIG	    256 /* 64 MiB in one fetch */
#define N	    64
#define DEADLINE_MS 3000

static const char cluster_ini[] = "fetch_timeout = 3s\nlock_ttl = 1s\npeer_io_timeout = 1s\n";
static const char pool_ini[] = "[pool]\nsize = 160M\nextent_size = 1M\n";

/* Submit a fetching QUERY with a lease on @c; reap it with reap_fetch(). */
static void submit_fetch(struct kvs_client *c, const uint8_t *keys, uint32_t n, const char *hint)
{
	struct kvs_sqe *sqe = kvs_get_sqe(c);
	int r;

	CHECK(sqe, "no SQE");
	r = kvs_prep_query_fetch(c, sqe, keys, n, 0, 0, hint, 1);
	CHECK(r == 0, "prep: %s", kvs_strerror(r));
	CHECK(kvs_submit(c) == 1, "submit");
}

/* The fetching QUERY's CQE: its hits (>= 0, the test fails otherwise), the lease. */
static int reap_fetch(struct kvs_client *c, uint64_t *ret_lease, uint64_t *ret_ms, uint64_t t0)
{
	struct kvs_cqe *cqe;
	int r = kvs_wait_cqe(c, &cqe, CT_OP_MS);

	CHECK(r == 0, "no CQE for the fetching QUERY: %s", kvs_strerror(r));
	r = cqe->res;
	*ret_lease = cqe->result0;
	kvs_cqe_seen(c, cqe);
	*ret_ms = now_ms() - t0;
	CHECK(r >= 0, "the fetching QUERY failed: %s (the engine must get a prefix)",
	      kvs_strerror(r));
	return r;
}

/* LOAD @n blocks of @lease into poisoned ids first.., compare with ct_save(seed). */
static void load_check(struct kvs_client *c, struct test_kv *kv, uint64_t lease, uint32_t n,
		       uint32_t first, uint64_t seed, const char *what)
{
	static uint32_t ids[BLOCKS];
	int r;

	if (n == 0)
		return;
	for (uint32_t i = 0; i < n; i++) {
		ids[i] = (first + i) % BLOCKS;
		test_kv_poison(kv, ids[i], 0xa5);
	}
	r = kvs_load_sync(c, lease, ids, n, 0, 0, CT_OP_MS);
	CHECK(r == (int)n, "%s: LOAD of %u blocks: %d (%s)", what, n, r,
	      r < 0 ? kvs_strerror(r) : "count");
	for (uint32_t i = 0; i < n; i++)
		CHECK(test_kv_check(kv, ids[i], seed + i), "%s: block of key %u differs", what, i);
	kvs_release_sync(c, lease, CT_OP_MS);
}

static int fetch_sync(struct kvs_client *c, const uint8_t *keys, uint32_t n, const char *hint,
		      uint64_t *ret_lease, uint64_t *ret_ms)
{
	uint64_t t0 = now_ms();

	submit_fetch(c, keys, n, hint);
	return reap_fetch(c, ret_lease, ret_ms, t0);
}

/* Run peer-hostile's client case @name against @n; its "ok" line or the test fails. */
static void hostile(const struct cnode *n, const char *name)
{
	const char *b = getenv("top_builddir");
	char cmd[1024], line[512] = "", from[64];
	FILE *p;

	/* From an address peer_allow admits (the run's /24), as a peer on the cluster network would. */
	ct_peer_net("250:0", from, sizeof(from));
	snprintf(cmd, sizeof(cmd),
		 "%s/tests/peer/peer-hostile --peer %s --bind %s --secret %s --cluster %s "
		 "--case %s --io-ms 10000 2>&1",
		 b ? b : ".", n->peer, from, ct_secret(), ct_cluster(), name);
	p = popen(cmd, "r");
	CHECK(p, "popen %s", cmd);
	if (!fgets(line, sizeof(line), p))
		line[0] = '\0';
	CHECK(pclose(p) == 0 && strstr(line, ": ok"), "hostile case %s: %s", name, line);
	printf("  %s", line);
}

int main(void)
{
	static uint8_t kbig[BIG * 16], k1[N * 16], k2[N * 16], k3[N * 16], k4[N * 16], k5[N * 16];
	static const char *const cases[] = {
		"garbage",	"huge-len",	 "wrong-type",	 "bad-version",
		"bad-hello",	"wrong-cluster", "wrong-secret", "before-auth",
		"stall-header", "stall-payload", "conn-flood",
	};
	char out[256], small_pool[128];
	struct redis rd = { 0 };
	struct cnode a0, a, b, c, s;
	struct test_kv kva, kvb, kvc, kvs;
	struct kvs_client *ca, *cb, *cc, *cs;
	uint64_t lease, ms, t0, epoch;
	int64_t staged;
	int r;

	ct_init(400);
	test_keys(kbig, BIG, 51);
	test_keys(k1, N, 52);
	test_keys(k2, N, 53);
	test_keys(k3, N, 54);
	test_keys(k4, N, 55);
	test_keys(k5, N, 56);
	ct_redis_start(&rd);
	cnode_start_peer(&a0, &rd, "a", cluster_ini, pool_ini);
	cnode_start_peer(&b, &rd, "b", cluster_ini, pool_ini);
	epoch = ct_wait_lease(&rd, "a", 0);
	ct_wait_lease(&rd, "b", 0);
	ca = ct_worker(&a0, NS, &kva, LAYERS, BLOCKS, SEG);
	cb = ct_worker(&b, NS, &kvb, LAYERS, BLOCKS, SEG);

	/* ---- the serving node SIGKILLed during a 64 MiB fetch ---- */
	ct_save(ca, &kva, kbig, BIG, 100);
	t0 = now_ms();
	submit_fetch(cb, kbig, BIG, a0.peer);
	usleep(3000);
	cnode_kill(&a0);
	r = reap_fetch(cb, &lease, &ms, t0);
	CHECK(ms < DEADLINE_MS + 2000, "the fetch outlived its deadline: %llu ms",
	      (unsigned long long)ms);
	load_check(cb, &kvb, lease, (uint32_t)r, 0, 100, "server killed");
	printf("ok - serving node killed mid-fetch: %d of %d blocks, all right, in %llu ms\n", r,
	       BIG, (unsigned long long)ms);
	/* The node is gone; its restart takes a new epoch, the same name, another address. */
	kvs_close(ca);
	test_kv_free(&kva);
	cnode_start_peer(&a, &rd, "a", cluster_ini, pool_ini);
	ct_wait_lease(&rd, "a", epoch);
	ca = ct_worker(&a, NS, &kva, LAYERS, BLOCKS, SEG);

	/* ---- the serving node SIGSTOPped past its lock TTL ---- */
	ct_save(ca, &kva, kbig, BIG, 200);
	/* Fresh keys for b: it may hold a prefix of kbig from the first case. */
	ct_save(ca, &kva, k1, N, 300);
	t0 = now_ms();
	submit_fetch(cb, kbig + 128 * 16, BIG - 128, a.peer);
	/* Stopped once b holds the slots for what a locked: the fetch stuck with them. */
	while (ct_peer_stat(&b, "fetch_staged_bytes") == 0 && now_ms() - t0 < 1000)
		;
	kill(a.d.pid, SIGSTOP);
	staged = ct_peer_stat(&b, "fetch_staged_bytes");
	{
		/*
		 * What the stuck fetch holds counts in its instance's unsealed
		 * share, not in anyone else's: another instance on b saves whole.
		 */
		struct test_kv kvo;
		struct kvs_client *co = ct_worker(&b, NS, &kvo, LAYERS, BLOCKS, SEG);

		ct_save(co, &kvo, k5, N, 700);
		kvs_close(co);
		test_kv_free(&kvo);
	}
	r = reap_fetch(cb, &lease, &ms, t0);
	CHECK(ct_peer_stat(&b, "fetch_staged_bytes") == 0, "the fetch's slots are still staged");
	CHECK(ms < DEADLINE_MS + 2000, "a fetch from a stopped peer took %llu ms",
	      (unsigned long long)ms);
	load_check(cb, &kvb, lease, (uint32_t)r, 10, 200 + 128, "server stopped");
	printf("  stopped peer: %d of %d blocks in %llu ms; %lld bytes staged meanwhile, another "
	       "instance saved %d blocks whole\n",
	       r, BIG - 128, (unsigned long long)ms, (long long)staged, N);
	CHECK(staged > 0, "the fetch held no slot while the peer was stopped");
	sleep(2); /* past the 1 s TTL while stopped */
	kill(a.d.pid, SIGCONT);
	ct_wait_peer_stat(&a, "locks_held", 0);
	r = fetch_sync(cb, k1, N, a.peer, &lease, &ms);
	CHECK(r == N, "after SIGCONT a serves whole: %d", r);
	load_check(cb, &kvb, lease, N, 20, 300, "after SIGCONT");
	printf("ok - serving node stopped past its TTL: answered by the deadline, no lock left, "
	       "whole again\n");

	/* ---- a stale registry entry ---- */
	cnode_start_peer(&c, &rd, "c", cluster_ini, pool_ini);
	ct_wait_lease(&rd, "c", 0);
	cc = ct_worker(&c, NS, &kvc, LAYERS, BLOCKS, SEG);
	ct_save(cc, &kvc, k2, N, 400);
	{
		uint64_t reg, drop;

		r = ct_cflush(cc, &reg, &drop);
		CHECK(r == 0 && reg >= N, "c's cluster FLUSH: %d", r);
	}
	/* Move c's entries to a's live epoch: the registry names a, which has none of them. */
	epoch = ct_lease_epoch(&rd, "a");
	r = ct_redis_cmd(&rd, out, sizeof(out), "EVAL %s 0 kvs:%s:n:c:* kvs:%s:n:a:%llu:",
			 "local n = 0 "
			 "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do "
			 "local d = ARGV[2] .. string.sub(k, -16) "
			 "n = n + redis.call('SUNIONSTORE', d, d, k) "
			 "redis.call('DEL', k) end "
			 "return n",
			 ct_cluster(), ct_cluster(), (unsigned long long)epoch);
	CHECK(r == 0 && strtoul(out, NULL, 10) >= N, "forging a's entries: %d %s", r, out);
	r = fetch_sync(cb, k2, N, NULL, &lease, &ms);
	CHECK(r == 0 && ms < DEADLINE_MS, "a stale entry: %d blocks in %llu ms", r,
	      (unsigned long long)ms);
	r = fetch_sync(cb, k2, N, c.peer, &lease, &ms);
	CHECK(r == N, "c by hint: %d", r);
	load_check(cb, &kvb, lease, N, 40, 400, "c by hint");
	ct_wait_peer_stat(&a, "locks_held", 0);
	printf("ok - a stale registry entry: 0 at once, no lock; the real holder by hint\n");

	/* ---- the fetcher's pool too small ---- */
	snprintf(small_pool, sizeof(small_pool), "[pool]\nsize = 4M\nextent_size = 1M\n");
	cnode_start_peer(&s, &rd, "s", cluster_ini, small_pool);
	ct_wait_lease(&rd, "s", 0);
	cs = ct_worker(&s, NS, &kvs, LAYERS, BLOCKS, SEG);
	ct_save(ca, &kva, k3, N, 500);
	r = fetch_sync(cs, k3, N, a.peer, &lease, &ms);
	CHECK(r < N && ms < DEADLINE_MS, "a 4 MiB pool fetched %d of %d blocks of 256 KiB", r, N);
	load_check(cs, &kvs, lease, (uint32_t)r, 0, 500, "small pool");
	ct_wait_peer_stat(&a, "locks_held", 0);
	printf("ok - the fetcher's pool full after %d blocks: that prefix, the lock released\n", r);

	/* ---- the fetching node SIGKILLed mid-transfer ---- */
	{
		int64_t dropped = ct_peer_stat(&a, "locks_dropped");

		submit_fetch(cb, kbig, BIG, a.peer);
		usleep(3000);
		cnode_kill(&b);
		t0 = now_ms();
		ct_wait_peer_stat(&a, "locks_held", 0);
		ms = now_ms() - t0;
		CHECK(ms < 1000, "a held the dead fetcher's lock %llu ms", (unsigned long long)ms);
		printf("ok - fetcher killed: the serving node dropped its lock in %llu ms (dropped "
		       "%lld -> %lld)\n",
		       (unsigned long long)ms, (long long)dropped,
		       (long long)ct_peer_stat(&a, "locks_dropped"));
	}

	/* ---- hostile peers against a kvstashd ---- */
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		hostile(&a, cases[i]);
	ct_save(ca, &kva, k4, N, 600);
	r = fetch_sync(cc, k4, N, a.peer, &lease, &ms);
	CHECK(r == N, "after the hostile peers a serves whole: %d", r);
	load_check(cc, &kvc, lease, N, 0, 600, "after hostile peers");
	ct_wait_peer_stat(&a, "locks_held", 0);
	printf("ok - hostile peers refused; the node serves a whole fetch afterwards\n");

	kvs_close(cs);
	test_kv_free(&kvs);
	kvs_close(cc);
	test_kv_free(&kvc);
	kvs_close(ca);
	test_kv_free(&kva);
	kvs_close(cb);
	test_kv_free(&kvb);
	cnode_stop(&a);
	cnode_stop(&c);
	cnode_stop(&s);
	ct_pass("peer fetch failure matrix through kvstashd");
}
