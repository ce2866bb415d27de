/* SPDX-License-Identifier: MIT */
/*
 * The registry queue overflowing, through kvstashd: [cluster]
 * queue_entries at its minimum (64) and redis-server stopped (SIGSTOP)
 * while an engine saves thousands of blocks.
 *   - the data path does not notice: every SAVE stores all its blocks, a
 *     local QUERY hits every one, a LOAD brings the bytes back;
 *   - meanwhile, on n2 (short timeouts), a cluster FLUSH completes by its
 *     deadline reporting its saves dropped, and a cluster QUERY answers by
 *     its deadline with a status and no holder;
 *   - after SIGCONT n1's cluster FLUSH accounts for every change before it
 *     (registered + dropped >= the blocks saved) and reports drops;
 *   - the registry recovers: blocks saved later are registered again,
 *     none dropped, and the other node finds them.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "ctest.h"

#define NS     "phi-3/fp16/overflow"
#define BATCH  256
#define ROUNDS 16
#define TOTAL  (BATCH * ROUNDS)

int main(void)
{
	static uint8_t keys[BATCH * 16];
	struct redis rd = { 0 };
	struct cnode a, b;
	struct test_kv kva, kvb;
	struct kvs_client *ca, *cb;
	struct kvs_cluster_answer ans;
	uint64_t reg, drop, lease = 0, end;
	uint32_t ids[BATCH];
	bool recovered = false;
	int r;

	ct_init(300);
	ct_redis_start(&rd);
	cnode_start(&a, &rd, "n1", "queue_entries = 64\n",
		    "[pool]\nsize = 64M\nextent_size = 256K\n");
	/* n2 sees Redis hang: short timeouts, so that its deadlines come soon. */
	cnode_start(&b, &rd, "n2",
		    "lease_ttl = 3s\nconnect_timeout = 1s\ncommand_timeout = 1s\n"
		    "flush_timeout = 2s\nquery_timeout = 1s\n",
		    NULL);
	ct_wait_lease(&rd, "n1", 0);
	ct_wait_lease(&rd, "n2", 0);
	ca = ct_worker(&a, NS, &kva, 1, BATCH, 4096);
	cb = ct_worker(&b, NS, &kvb, 1, BATCH, 4096);
	r = ct_cflush(ca, &reg, &drop);
	CHECK(r == 0 && drop == 0, "first cluster FLUSH: res %d dropped %llu", r,
	      (unsigned long long)drop);

	redis_kill(&rd, SIGSTOP);
	for (unsigned i = 0; i < ROUNDS; i++) {
		test_keys(keys, BATCH, 1000 + i);
		ct_save(ca, &kva, keys, BATCH, 10000 * (i + 1));
		r = ct_query(ca, keys, BATCH);
		CHECK(r == BATCH, "local QUERY of round %u with Redis stopped: %d (%s)", i, r,
		      r < 0 ? kvs_strerror(r) : "hits");
	}
	/* The last round's bytes come back through a LOAD into poisoned blocks. */
	r = kvs_query_sync(ca, keys, BATCH, 0, 0, CT_OP_MS, &lease);
	CHECK(r == BATCH, "leased QUERY: %d", r);
	for (uint32_t i = 0; i < BATCH; i++) {
		ids[i] = i;
		test_kv_poison(&kva, i, 0xa5);
	}
	r = kvs_load_sync(ca, lease, ids, BATCH, 0, 1, CT_OP_MS);
	CHECK(r == BATCH, "LOAD with Redis stopped: %d (%s)", r, r < 0 ? kvs_strerror(r) : "");
	for (uint32_t i = 0; i < BATCH; i++)
		CHECK(test_kv_check(&kva, i, 10000 * ROUNDS + i), "block %u loaded wrong", i);
	printf("ok - %d blocks saved, found and loaded with Redis stopped\n", TOTAL);

	/* Redis hung: n2's cluster ops end by their deadlines, saying so. */
	test_keys(keys, 16, 999);
	ct_save(cb, &kvb, keys, 16, 999);
	r = ct_cflush(cb, &reg, &drop);
	CHECK((r == 0 || r == -ETIMEDOUT) && reg == 0 && drop >= 16,
	      "n2's cluster FLUSH with Redis hung: res %d (%s) registered %llu dropped %llu", r,
	      kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop);
	test_keys(keys, BATCH, 1000);
	r = ct_cquery(cb, keys, BATCH, &ans);
	CHECK(r == 0 && ans.best == 0 && ans.nr_holders == 0 &&
		      (ans.status == -ETIMEDOUT || ans.status == -ENOTCONN),
	      "n2's cluster QUERY with Redis hung: %s", ct_answer_str(r, &ans));
	printf("ok - cluster FLUSH and QUERY end by their deadlines with Redis hung\n");

	redis_kill(&rd, SIGCONT);
	r = ct_cflush(ca, &reg, &drop);
	CHECK((r == 0 || r == -ETIMEDOUT) && drop > 0 && reg + drop >= TOTAL,
	      "cluster FLUSH after %d saves into a 64-entry queue: res %d (%s) registered %llu "
	      "dropped %llu",
	      TOTAL, r, kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop);
	printf("# cluster FLUSH: res %d, %llu registered, %llu dropped\n", r,
	       (unsigned long long)reg, (unsigned long long)drop);
	printf("ok - the drops are reported\n");

	/* Recovered: new blocks are registered, none dropped (the reconnect may take a while). */
	end = now_ms() + CT_POLL_MS;
	for (unsigned i = 0; !recovered; i++) {
		test_keys(keys, 16, 5000 + i);
		ct_save(ca, &kva, keys, 16, 50000 + 100 * i);
		r = ct_cflush(ca, &reg, &drop);
		CHECK(r == 0 || r == -ETIMEDOUT, "cluster FLUSH: %d (%s)", r, kvs_strerror(r));
		recovered = drop == 0 && reg >= 16;
		CHECK(recovered || now_ms() < end,
		      "the registry never recovered: last FLUSH "
		      "registered %llu dropped %llu",
		      (unsigned long long)reg, (unsigned long long)drop);
		if (!recovered)
			usleep(100000);
	}
	/* n2 lost its lease while Redis hung: it may still be reconnecting. */
	for (end = now_ms() + CT_POLL_MS;; usleep(20000)) {
		r = ct_cquery(cb, keys, 16, &ans);
		if (r == 0 && ans.best == 16 && ct_holder(&ans, "n1"))
			break;
		CHECK(now_ms() < end, "n2 asks what n1 saved after the recovery: %s",
		      ct_answer_str(r, &ans));
	}
	printf("ok - registering again after the overflow\n");

	ct_stop_pair(ca, &kva, &a, cb, &kvb, &b);
	ct_pass("cluster overflow: drops reported, data path unaffected");
}
