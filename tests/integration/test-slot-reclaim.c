/* SPDX-License-Identifier: MIT */
/*
 * Namespace and block-size slots are reclaimed when their table is full
 * (issue 11, item 7).  Before, a namespace lived while any block of it
 * did, and a block size while any block used it: short sessions each
 * saving one block filled both tables, and on an idle pool (nothing
 * evicts) every new namespace was refused with -EUSERS and every new
 * block size with -ENOSPC, for ever.
 *   - namespaces: 64 short sessions ([session] max_namespaces = 64), one
 *     512-byte block each; a new namespace then joins, taking the slot
 *     of the one idle longest (its block goes), and the others keep
 *     theirs; namespaces with sessions are never taken;
 *   - block sizes: 64 sessions of 64 sizes, one block each: while they
 *     are registered, a 65th size is -ENOSPC; once they are gone, it
 *     registers (an unused size's blocks go), and saves and loads.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"

#define NS	64u
#define WAIT_NS 10000000000ull

/*
 * Connect rank 0 of @inst, retrying (bounded) while kvstashd still holds
 * that rank's previous session: kvs_close() returns before the daemon
 * freed it, so a rank that connects again at once may get -EADDRINUSE.
 */
static int connect_rank(const struct kvsd *d, const char *inst, const char *ns,
			struct kvs_client **ret)
{
	uint64_t t0 = test_now_ns();
	int r;

	while ((r = test_connect(d, KVS_ROLE_WORKER, inst, ns, 0, 1, ret)) == -EADDRINUSE &&
	       test_now_ns() - t0 < WAIT_NS)
		usleep(20000);
	return r;
}

static struct kvs_client *join(const struct kvsd *d, unsigned i, struct test_kv *kv, int *ret)
{
	char inst[48], ns[48];
	struct kvs_client *c;
	int r;

	snprintf(inst, sizeof(inst), "reclaim-ns-%u", i);
	snprintf(ns, sizeof(ns), "reclaim/ns-%u", i);
	r = test_kv_alloc(kv, LAYOUT_PAGE_FIRST, 1, 4, 512);
	CHECK(r == 0, "test_kv_alloc");
	r = connect_rank(d, inst, ns, &c);
	if (r == 0) {
		r = test_kv_register(c, kv);
		CHECK(r == 0, "REGISTER in %s: %s", ns, kvs_strerror(r));
	} else {
		test_kv_free(kv);
		c = NULL;
	}
	*ret = r;
	return c;
}

/* Join namespace @i, waiting (bounded) while earlier sessions are still being closed. */
static struct kvs_client *join_wait(const struct kvsd *d, unsigned i, struct test_kv *kv)
{
	uint64_t t0 = test_now_ns();
	struct kvs_client *c;
	int r;

	while (!(c = join(d, i, kv, &r)) && r == -EUSERS && test_now_ns() - t0 < WAIT_NS)
		usleep(20000);
	CHECK(c, "namespace %u: %s", i, kvs_strerror(r));
	return c;
}

static void namespaces(void)
{
	uint8_t key[KVS_KEY_SIZE];
	uint32_t id = 0;
	struct kvs_client *c, *held;
	struct test_kv kv, kvh;
	struct kvsd d;
	int r;

	it_start(&d, "[session]\nmax_namespaces = 64\n");
	for (unsigned i = 0; i < NS; i++) {
		c = join_wait(&d, i, &kv);
		it_keys(key, 1, i);
		test_kv_fill(&kv, 0, it_seed(i, 0));
		CHECK_RES(it_save(c, key, &id, 1).res, 1, "SAVE of one block");
		it_flush(c);
		kvs_close(c);
		test_kv_free(&kv);
	}
	/* Every namespace holds a block, none a session: a 65th takes the oldest's slot. */
	c = join_wait(&d, NS, &kv);
	CHECK(kvsd_log_contains(&d, "reclaimed namespace reclaim/ns-0"),
	      "the log does not say which namespace went");
	it_keys(key, 1, NS);
	CHECK_RES(it_save(c, key, &id, 1).res, 1, "SAVE in the new namespace");
	it_flush(c);
	kvs_close(c);
	test_kv_free(&kv);

	/* The newest idle one kept its block (joining a live namespace takes no slot). */
	c = join_wait(&d, NS - 1, &kv);
	it_keys(key, 1, NS - 1);
	CHECK_RES(it_query(c, key, 1, KVS_QUERY_NOLEASE).res, 1, "the newest namespace's block");
	test_kv_poison(&kv, 1, POISON);
	{
		struct kvs_cqe q = it_query(c, key, 1, 0);
		uint32_t dst = 1;

		CHECK_RES(q.res, 1, "QUERY with a lease");
		CHECK_RES(it_load(c, q.result0, &dst, 1, 0, 0).res, 1, "LOAD");
		CHECK(test_kv_check(&kv, 1, it_seed(NS - 1, 0)), "the kept block differs");
	}
	/* ns-0 is new again: its old block is gone (and ns-1, the oldest idle, gave its slot). */
	held = join_wait(&d, 0, &kvh);
	it_keys(key, 1, 0);
	CHECK_RES(it_query(held, key, 1, KVS_QUERY_NOLEASE).res, 0,
		  "ns-0's block after its reclaim");
	CHECK(kvsd_log_contains(&d, "reclaimed namespace reclaim/ns-1"),
	      "the next slot did not come from the oldest idle namespace");

	/* With every namespace in use by a session, nothing is taken: -EUSERS as before. */
	{
		static struct kvs_client *cs[NS];
		static struct test_kv kvs[NS];
		unsigned n = 0;

		kvs_close(c);
		test_kv_free(&kv);
		for (unsigned i = 100; n < NS - 1; i++, n++)
			cs[n] = join_wait(&d, i, &kvs[n]);
		c = join(&d, 1000, &kv, &r);
		CHECK(!c && r == -EUSERS, "a new namespace with all 64 in use: %s",
		      kvs_strerror(r));
		for (unsigned i = 0; i < n; i++) {
			kvs_close(cs[i]);
			test_kv_free(&kvs[i]);
		}
	}
	kvs_close(held);
	test_kv_free(&kvh);
	it_ok("64 idle namespaces with one block each: a new one takes the slot of the one idle "
	      "longest; live ones are never taken");
	it_stop(&d);
}

#define SIZES 64u /* POOL_MAX_CLASSES */

/* A worker of block size 512 * (@i + 1) (one layer) in a namespace of its own. */
static struct kvs_client *sized(const struct kvsd *d, unsigned i, struct test_kv *kv, int *ret)
{
	char inst[48], ns[48];
	struct kvs_client *c;
	int r;

	snprintf(inst, sizeof(inst), "reclaim-size-%u", i);
	snprintf(ns, sizeof(ns), "reclaim/size-%u", i);
	CHECK(test_kv_alloc(kv, LAYOUT_PAGE_FIRST, 1, 4, 512ull * (i + 1)) == 0, "test_kv_alloc");
	r = connect_rank(d, inst, ns, &c);
	CHECK(r == 0, "connect %s: %s", inst, kvs_strerror(r));
	r = test_kv_register(c, kv);
	*ret = r;
	if (r < 0) {
		kvs_close(c);
		test_kv_free(kv);
		return NULL;
	}
	return c;
}

static void block_sizes(void)
{
	static struct kvs_client *cs[SIZES];
	static struct test_kv kvs[SIZES];
	uint8_t key[KVS_KEY_SIZE];
	uint32_t id = 0, dst = 2;
	struct kvs_msg_stats_global g;
	struct kvs_client *c;
	struct test_kv kv;
	struct kvs_cqe q;
	struct kvsd d;
	uint64_t t0;
	int r;

	it_start(&d, "[pool]\nsize = 32M\nextent_size = 256K\n");
	for (unsigned i = 0; i < SIZES; i++) {
		cs[i] = sized(&d, i, &kvs[i], &r);
		CHECK(cs[i], "block size %u: %s", 512 * (i + 1), kvs_strerror(r));
		it_keys(key, 1, 500 + i);
		test_kv_fill(&kvs[i], 0, it_seed(500 + i, 0));
		CHECK_RES(it_save(cs[i], key, &id, 1).res, 1, "SAVE of one block");
		it_flush(cs[i]);
	}
	/* 64 sizes in use: a 65th is refused, and nothing of theirs goes. */
	c = sized(&d, SIZES, &kv, &r);
	CHECK(!c && r == -ENOSPC, "a 65th block size while 64 are registered: %s", kvs_strerror(r));
	g = it_stats(&d);
	CHECK(g.blocks_resident == SIZES && g.evictions == 0, "%llu resident, %llu evicted",
	      (unsigned long long)g.blocks_resident, (unsigned long long)g.evictions);
	for (unsigned i = 0; i < SIZES; i++) {
		kvs_close(cs[i]);
		test_kv_free(&kvs[i]);
	}
	/* Idle, each holding one block: the 65th size takes an unused one's slot. */
	t0 = test_now_ns();
	while (!(c = sized(&d, SIZES, &kv, &r)) && r == -ENOSPC && test_now_ns() - t0 < WAIT_NS)
		usleep(20000);
	CHECK(c, "a 65th block size once the 64 are unused: %s", kvs_strerror(r));
	CHECK(kvsd_log_contains(&d, "reclaimed block size"),
	      "the log does not say which block size went");
	g = it_stats(&d);
	CHECK(g.blocks_resident == SIZES - 1 && g.evictions == 1, "%llu resident, %llu evicted",
	      (unsigned long long)g.blocks_resident, (unsigned long long)g.evictions);
	it_keys(key, 1, 600);
	test_kv_fill(&kv, 0, it_seed(600, 0));
	CHECK_RES(it_save(c, key, &id, 1).res, 1, "SAVE of the new block size");
	it_flush(c);
	q = it_query(c, key, 1, 0);
	CHECK_RES(q.res, 1, "QUERY");
	test_kv_poison(&kv, dst, POISON);
	CHECK_RES(it_load(c, q.result0, &dst, 1, 0, 0).res, 1, "LOAD");
	CHECK(test_kv_check(&kv, dst, it_seed(600, 0)), "the block differs");
	kvs_close(c);
	test_kv_free(&kv);
	it_ok("64 block sizes: a 65th is -ENOSPC while all are registered, and takes an unused "
	      "one's slot once they are idle");
	it_stop(&d);
}

/* With an argument, only the scenario of that name (e.g. block_sizes). */
static bool wanted(int argc, char **argv, const char *name)
{
	return argc < 2 || strcmp(argv[1], name) == 0;
}

int main(int argc, char **argv)
{
	it_watchdog(600);
	if (wanted(argc, argv, "namespaces"))
		namespaces();
	if (wanted(argc, argv, "block_sizes"))
		block_sizes();
	return 0;
}
