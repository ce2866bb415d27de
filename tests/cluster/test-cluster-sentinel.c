/* SPDX-License-Identifier: MIT */
/*
 * The registry on Redis Sentinel, with traffic running through three
 * failovers.  Every process is real and in a network namespace of the
 * test's own (tests/lib/hub.h): a master and a replica (redis-server, each
 * its own host), three sentinels (on the hub), three kvstashd nodes (each
 * its own host, [cluster] sentinels and master_name, the peer service),
 * and on every node an engine (another process) that, over and over,
 * saves a prompt of its own, FLUSHes with the cluster flag, asks a
 * cluster QUERY for another node's prompt, fetches one through the
 * registry (QUERY with fetch, no hint), LOADs it into other blocks and
 * compares every byte with what the other node saved.
 *
 * The faults, one after the other: the master SIGKILLed (the replica is
 * promoted; the old master comes back empty and is made a replica), the
 * promoted master SIGSTOPped (the other one is promoted back), then the
 * master cut off from the sentinels by nftables while the nodes still
 * reach it (the sentinels promote the replica; the nodes must leave the
 * old master, which goes on accepting writes, for the new one).
 *
 * Checked: no engine operation ever misses its deadline (FLUSH and the
 * cluster QUERY within their timeouts, a fetch within its own, a SAVE or
 * a LOAD within seconds), no byte differs from what was saved, every node
 * registers on the new master within 10 s of the sentinels' promotion (and
 * says so in `kvstash stats`: master, failovers), and, once the faults are
 * over, a cluster QUERY from another node finds every block a node still
 * holds (what the replica lacked when promoted is registered again).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/hub.h"
#include "ctest.h"

#define NS	    "qwen3-8b/bf16/sentinel"
#define MASTER	    "kvsreg"
#define NODES	    3
#define LAYERS	    2
#define SEG	    4096
#define BLOCKS	    256
#define K	    8	  /* blocks a prompt */
#define PROMPTS	    1000  /* an engine saves at most this many (10 a second) */
#define PROMOTED_MS 10000 /* the registry answers again within this of a promotion */

/* Deadlines (the nodes' [cluster] timeouts below) and the slack a loaded box gets. */
#define FLUSH_MS 5000
#define QUERY_MS 2000
#define FETCH_MS 3000
#define SLACK_MS 3000

static const char cluster_ini[] =
	"redis =\n"
	"master_name = " MASTER "\n"
	"lease_ttl = 6s\nconnect_timeout = 1s\ncommand_timeout = 2s\n"
	"flush_timeout = 5s\nquery_timeout = 2s\nfetch_timeout = 3s\nsentinel_check = 500ms\n";
static const char pool_ini[] = "[pool]\nsize = 160M\nextent_size = 256K\n";

static struct hub_host hm, hr, hn[NODES];
static struct redis rm, rr, sent[3];
static struct cnode node[NODES];
static char stop_file[128];

/* Prompt @p of node @j: its keys' seed, its bytes' seed. */
static uint64_t key_seed(unsigned j, unsigned p)
{
	return 1000000ull * (j + 1) + p;
}

static uint64_t byte_seed(unsigned j, unsigned p)
{
	return 100000000ull * (j + 1) + 1000ull * p;
}

/* ---- an engine on node @j, in its own process ----------------------------- */

struct worst {
	uint64_t save, flush, cquery, fetch, load;
	uint64_t ops, fetched, flush_errors, fetch_short;
};

static uint64_t since(uint64_t t0)
{
	return now_ms() - t0;
}

static bool stopping(void)
{
	return access(stop_file, F_OK) == 0;
}

static void bump(uint64_t *w, uint64_t v)
{
	if (v > *w)
		*w = v;
}

static int engine(void *arg)
{
	unsigned j = (unsigned)(uintptr_t)arg, other = (j + 1) % NODES, p = 0;
	static uint8_t keys[K * 16], okeys[K * 16];
	struct kvs_cluster_answer ans;
	struct worst w = { 0 };
	struct test_kv kv;
	struct kvs_client *c = ct_worker(&node[j], NS, &kv, LAYERS, BLOCKS, SEG);
	char path[160];
	FILE *f;

	while (!stopping() && p < PROMPTS) {
		uint64_t t0, reg, drop, lease = 0;
		uint32_t ids[K];
		int r;

		/* A prompt of its own: saved (local), then the cluster barrier. */
		test_keys(keys, K, key_seed(j, p));
		t0 = now_ms();
		for (uint32_t i = 0; i < K; i++) {
			ids[i] = (p * K + i) % (BLOCKS / 2);
			test_kv_fill(&kv, ids[i], byte_seed(j, p) + i);
		}
		r = kvs_save_sync(c, keys, ids, K, CT_OP_MS, NULL, NULL);
		CHECK(r == K, "node %u prompt %u: SAVE %d (%s)", j, p, r, kvs_strerror(r));
		bump(&w.save, since(t0));
		t0 = now_ms();
		r = kvs_flush_cluster_sync(c, 0, FLUSH_MS + SLACK_MS + 5000, &reg, &drop);
		bump(&w.flush, since(t0));
		CHECK(since(t0) <= FLUSH_MS + SLACK_MS,
		      "node %u prompt %u: cluster FLUSH took %llu ms (%d, %s)", j, p,
		      (unsigned long long)since(t0), r, kvs_strerror(r));
		CHECK(r == 0 || r == -ETIMEDOUT, "node %u: cluster FLUSH %d (%s)", j, r,
		      kvs_strerror(r));
		w.flush_errors += r != 0 || drop != 0;

		/* Another node's prompt: asked of the registry, then fetched and checked. */
		if (p >= 2) {
			unsigned op = p - 2;

			test_keys(okeys, K, key_seed(other, op));
			t0 = now_ms();
			r = ct_cquery(c, okeys, K, &ans);
			bump(&w.cquery, since(t0));
			CHECK(since(t0) <= QUERY_MS + SLACK_MS && r >= 0,
			      "node %u: cluster QUERY took %llu ms: %s", j,
			      (unsigned long long)since(t0), ct_answer_str(r, &ans));
			t0 = now_ms();
			r = kvs_query_fetch_sync(c, okeys, K, 0, 0, NULL,
						 QUERY_MS + FETCH_MS + SLACK_MS + 5000, &lease);
			bump(&w.fetch, since(t0));
			CHECK(since(t0) <= QUERY_MS + FETCH_MS + SLACK_MS && r >= 0,
			      "node %u: QUERY with fetch took %llu ms: %d (%s)", j,
			      (unsigned long long)since(t0), r, kvs_strerror(r));
			w.fetch_short += r < K;
			if (r > 0) {
				uint32_t n = (uint32_t)r, lids[K];

				for (uint32_t i = 0; i < n; i++) {
					lids[i] = BLOCKS / 2 + i;
					test_kv_poison(&kv, lids[i], 0x5a);
				}
				t0 = now_ms();
				r = kvs_load_sync(c, lease, lids, n, 0, 0, CT_OP_MS);
				bump(&w.load, since(t0));
				CHECK(r == (int)n, "node %u: LOAD of %u: %d (%s)", j, n, r,
				      kvs_strerror(r));
				for (uint32_t i = 0; i < n; i++)
					CHECK(test_kv_check(&kv, lids[i], byte_seed(other, op) + i),
					      "node %u: block %u of node %u's prompt %u differs from "
					      "what it saved",
					      j, i, other, op);
				w.fetched += n;
			}
			if (lease)
				kvs_release_sync(c, lease, CT_OP_MS);
		}
		w.ops++;
		p++;
		usleep(100000); /* an engine's pace: traffic through every fault, no eviction */
	}
	snprintf(path, sizeof(path), "%s.%u", stop_file, j);
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "%u %llu %llu %llu %llu %llu %llu %llu %llu %llu\n", p,
			(unsigned long long)w.save, (unsigned long long)w.flush,
			(unsigned long long)w.cquery, (unsigned long long)w.fetch,
			(unsigned long long)w.load, (unsigned long long)w.fetched,
			(unsigned long long)w.flush_errors, (unsigned long long)w.fetch_short,
			(unsigned long long)w.ops);
		fclose(f);
	}
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

/* ---- Redis and the sentinels ------------------------------------------------ */

static bool info_has(struct redis *rd, const char *needle)
{
	char out[8192];

	return redis_cmd(rd, out, sizeof(out), "INFO replication") == 0 && strstr(out, needle);
}

/* Poll until @rd's INFO replication holds @needle. */
static void wait_info(struct redis *rd, const char *needle, const char *what)
{
	for (uint64_t end = now_ms() + CT_POLL_MS; !info_has(rd, needle); usleep(50000))
		CHECK(now_ms() < end, "%s: no '%s' in INFO replication", what, needle);
}

/* The master the sentinels name now ("ip:port"), asking each until one answers. */
static bool sentinels_name(char *buf, size_t len)
{
	for (unsigned i = 0; i < 3; i++) {
		char out[256], ip[64];
		int port;

		if (redis_cmd(&sent[i], out, sizeof(out), "SENTINEL get-master-addr-by-name %s",
			      MASTER) == 0 &&
		    sscanf(out, "2 %63s %d", ip, &port) == 2) {
			snprintf(buf, len, "%s:%d", ip, port);
			return true;
		}
	}
	return false;
}

/* Poll until the sentinels name @want the master; when they did. */
static uint64_t wait_promoted(const struct redis *want)
{
	char now[96], addr[96];

	snprintf(addr, sizeof(addr), "%s:%d", redis_host(want), want->port);
	for (uint64_t end = now_ms() + CT_POLL_MS;; usleep(20000)) {
		if (sentinels_name(now, sizeof(now)) && !strcmp(now, addr))
			return now_ms();
		CHECK(now_ms() < end, "the sentinels never promoted %s (they name %s)", addr, now);
	}
}

/*
 * Every node registers on @want within PROMOTED_MS of @promoted: its
 * registry ready with that master, as `kvstash stats` says.  The time.
 */
static uint64_t wait_registered(const struct redis *want, uint64_t promoted, uint64_t failovers)
{
	char addr[96], master[KVS_NAME_MAX];
	uint64_t last = 0;

	snprintf(addr, sizeof(addr), "%s:%d", redis_host(want), want->port);
	for (unsigned j = 0; j < NODES; j++) {
		for (;; usleep(20000)) {
			ct_stat_text(&node[j], "registry", "master", master, sizeof(master));
			if (!strcmp(master, addr) && ct_stat(&node[j], "registry", "state") == 3 &&
			    ct_stat(&node[j], "registry", "leased") == 1)
				break;
			CHECK(now_ms() - promoted < PROMOTED_MS,
			      "node %s not registered on %s %llu ms after its promotion (master %s, "
			      "state %lld)",
			      node[j].name, addr, (unsigned long long)(now_ms() - promoted), master,
			      (long long)ct_stat(&node[j], "registry", "state"));
		}
		CHECK(ct_stat(&node[j], "registry", "failovers") >= (int64_t)failovers,
		      "node %s counts %lld failovers, want %llu", node[j].name,
		      (long long)ct_stat(&node[j], "registry", "failovers"),
		      (unsigned long long)failovers);
		if (now_ms() - promoted > last)
			last = now_ms() - promoted;
	}
	return last;
}

static void start_sentinels(void)
{
	for (unsigned i = 0; i < 3; i++) {
		sent[i] = (struct redis){
			.sentinel = true, .master_name = MASTER, .monitor = &rm, .bind = HUB_ADDR
		};
		ct_redis_start(&sent[i]);
	}
	/* Each knows the other two and the replica: a quorum can fail over. */
	for (unsigned i = 0; i < 3; i++) {
		for (uint64_t end = now_ms() + CT_POLL_MS;; usleep(50000)) {
			char out[4096];

			if (redis_cmd(&sent[i], out, sizeof(out), "SENTINEL MASTER %s", MASTER) ==
				    0 &&
			    strstr(out, " num-slaves 1 ") && strstr(out, " num-other-sentinels 2 "))
				break;
			CHECK(now_ms() < end,
			      "sentinel %u never saw the replica and the others: %s", i, out);
		}
	}
}

int main(void)
{
	char ini[512], sentinels[256], name[16];
	uint64_t t, worst_reg = 0;
	pid_t kids[NODES];
	struct test_kv kvown[NODES], kvfrom;
	unsigned saved[NODES];

	ct_init(600);
	hub_init();
	hub_host(&hm, "m", 10);
	hub_host(&hr, "r", 11);
	for (unsigned j = 0; j < NODES; j++) {
		snprintf(name, sizeof(name), "n%u", j + 1);
		hub_host(&hn[j], name, j + 1);
	}
	rm.host = &hm;
	ct_redis_start(&rm);
	rr.host = &hr;
	snprintf(rr.extra, sizeof(rr.extra), "--replicaof %s %d", hm.addr, rm.port);
	ct_redis_start(&rr);
	wait_info(&rr, "master_link_status:up", "the replica");
	start_sentinels();
	snprintf(sentinels, sizeof(sentinels), HUB_ADDR ":%d," HUB_ADDR ":%d," HUB_ADDR ":%d",
		 sent[0].port, sent[1].port, sent[2].port);
	snprintf(ini, sizeof(ini), "%ssentinels = %s\n", cluster_ini, sentinels);
	for (unsigned j = 0; j < NODES; j++) {
		snprintf(name, sizeof(name), "n%u", j + 1);
		cnode_start_in(&node[j], &hn[j], &rm, name, true, ini, pool_ini);
	}
	for (unsigned j = 0; j < NODES; j++)
		ct_wait_lease(&rm, node[j].name, 0);
	t = wait_registered(&rm, now_ms(), 0);
	printf("ok - three nodes found the master through the sentinels (%llu ms)\n",
	       (unsigned long long)t);

	snprintf(stop_file, sizeof(stop_file), "/tmp/kvs-sentinel-stop-%d", (int)getpid());
	unlink(stop_file);
	for (unsigned j = 0; j < NODES; j++)
		kids[j] = ct_spawn(engine, (void *)(uintptr_t)j);
	sleep(2);

	/* ---- the master killed: the replica promoted ---- */
	redis_stop(&rm);
	t = wait_promoted(&rr);
	worst_reg = wait_registered(&rr, t, 1);
	printf("ok - master killed: every node registered on the promoted replica %llu ms after "
	       "the promotion\n",
	       (unsigned long long)worst_reg);
	/* The old master back, empty: the sentinels make it a replica of the new one. */
	CHECK(redis_restart(&rm) == 0, "the old master did not come back");
	wait_info(&rm, "master_link_status:up", "the old master as a replica");
	sleep(1);

	/* ---- the promoted master stopped: the other one promoted back ---- */
	redis_kill(&rr, SIGSTOP);
	t = wait_promoted(&rm);
	t = wait_registered(&rm, t, 2);
	worst_reg = t > worst_reg ? t : worst_reg;
	printf("ok - promoted master stopped: every node registered on the next one %llu ms after "
	       "the promotion\n",
	       (unsigned long long)t);
	redis_kill(&rr, SIGCONT);
	wait_info(&rr, "master_link_status:up", "the stopped master, demoted");
	sleep(1);

	/* ---- the master cut off from the sentinels (the nodes still reach it) ---- */
	hub_cut(&hm, HUB_ADDR, false);
	t = wait_promoted(&rr);
	t = wait_registered(&rr, t, 3);
	worst_reg = t > worst_reg ? t : worst_reg;
	printf("ok - master partitioned from the sentinels: every node registered on the promoted "
	       "replica %llu ms after the promotion\n",
	       (unsigned long long)t);
	hub_heal(&hm);
	wait_info(&rm, "master_link_status:up", "the partitioned master, demoted");
	sleep(2);

	/* ---- the engines stop: every deadline held, every byte right ---- */
	{
		int fd = open(stop_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

		CHECK(fd >= 0, "stop file: %s", strerror(errno));
		close(fd);
	}
	for (unsigned j = 0; j < NODES; j++) {
		char path[160], line[256];
		unsigned long long v[9];
		FILE *f;

		CHECK(ct_reap(kids[j], CT_POLL_MS * 3) == 0, "node %u's engine failed", j);
		snprintf(path, sizeof(path), "%s.%u", stop_file, j);
		f = fopen(path, "r");
		CHECK(f && fgets(line, sizeof(line), f) &&
			      sscanf(line, "%u %llu %llu %llu %llu %llu %llu %llu %llu %llu",
				     &saved[j], &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
				     &v[7], &v[8]) == 10,
		      "node %u's engine left no results", j);
		fclose(f);
		unlink(path);
		printf("  n%u: %u prompts saved, %llu fetched blocks checked; worst ms: save %llu, "
		       "cluster FLUSH %llu, cluster QUERY %llu, fetch %llu, LOAD %llu; %llu FLUSHes "
		       "with drops or errors, %llu short fetches\n",
		       j + 1, saved[j], v[5], v[0], v[1], v[2], v[3], v[4], v[6], v[7]);
		CHECK(v[5] > 0, "node %u fetched nothing at all", j);
	}
	unlink(stop_file);
	printf("ok - traffic through three failovers: every operation in time, 0 wrong bytes\n");

	/*
	 * ---- converged: whatever a node holds, another node finds ----
	 * Asked from the node after it, which never fetched its prompts (node
	 * j fetches node j + 1's): its cluster QUERY has no local hit to
	 * stop at, it asks the registry for every key.
	 */
	for (unsigned j = 0; j < NODES; j++) {
		struct kvs_client *own = ct_worker(&node[j], NS, &kvown[j], LAYERS, BLOCKS, SEG);
		struct kvs_client *from =
			ct_worker(&node[(j + 1) % NODES], NS, &kvfrom, LAYERS, BLOCKS, SEG);
		unsigned held = 0;

		for (unsigned p = 0; p < saved[j]; p++) {
			uint8_t keys[K * 16];
			struct kvs_cluster_answer ans;
			int r;

			test_keys(keys, K, key_seed(j, p));
			if (ct_query(own, keys, K) != K)
				continue; /* evicted, or never saved */
			held++;
			for (uint64_t end = now_ms() + CT_POLL_MS;; usleep(50000)) {
				const struct kvs_cluster_holder *h;

				r = ct_cquery(from, keys, K, &ans);
				h = ct_holder(&ans, node[j].name);
				if (r >= 0 && h && h->blocks == K)
					break;
				CHECK(now_ms() < end,
				      "node %s holds its prompt %u, a cluster QUERY does not find it: %s",
				      node[j].name, p, ct_answer_str(r, &ans));
			}
		}
		CHECK(held > 0, "node %s holds none of its prompts", node[j].name);
		printf("  %s: all %u prompts it holds are found through the registry\n",
		       node[j].name, held);
		kvs_close(own);
		test_kv_free(&kvown[j]);
		kvs_close(from);
		test_kv_free(&kvfrom);
	}
	printf("ok - after the faults every block a node holds is found (worst re-registration "
	       "%llu ms after a promotion)\n",
	       (unsigned long long)worst_reg);
	for (unsigned j = 0; j < NODES; j++)
		cnode_stop(&node[j]);
	ct_pass("the registry on Redis Sentinel: three failovers under traffic");
}
