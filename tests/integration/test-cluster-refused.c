/* SPDX-License-Identifier: MIT */
/*
 * The cluster flags where there is no cluster, against a real kvstashd
 * without [cluster]:
 *   - a session connected without KVS_CONNECT_CLUSTER gets -EINVAL from
 *     kvs_prep_query() with KVS_QUERY_CLUSTER, before anything reaches
 *     the daemon (the SQE and its slot given back);
 *   - a session connected with it (worker or scheduler) is granted (the
 *     daemon is of wire minor 1, its region has the answer area), and a
 *     cluster QUERY or FLUSH (alone or with KVS_FLUSH_INSTANCE) completes
 *     with -EOPNOTSUPP and no cluster answer, through the async calls and
 *     the sync helpers, whose outputs stay untouched;
 *   - the plain operations of a cluster session work as ever.
 */
#include <stdio.h>
#include <string.h>

#include "itest.h"

#define BLOCKS 8u
#define N      4u

static struct kvs_client *cluster_connect(const struct kvsd *d, uint32_t role)
{
	struct kvs_connect_opts o;
	struct kvs_client *c;
	int r;

	kvs_connect_opts_init(&o);
	o.role = role;
	o.instance = "cl-refused";
	o.ns = "cl-refused/ns";
	o.flags = KVS_CONNECT_CLUSTER;
	r = kvs_connect(d->sock, &o, &c);
	CHECK(r == 0, "connect with KVS_CONNECT_CLUSTER: %s", kvs_strerror(r));
	return c;
}

/* One cluster op prepared by the caller, submitted: its CQE, and kvs_cqe_cluster()'s answer. */
static struct kvs_cqe reap_one(struct kvs_client *c, int *ret_cluster)
{
	struct kvs_cluster_answer ans;
	struct kvs_cqe *p, e;
	int r;

	CHECK(kvs_submit(c) == 1, "submit");
	r = kvs_wait_cqe(c, &p, 10000);
	CHECK(r == 0, "no completion: %s", kvs_strerror(r));
	e = *p;
	*ret_cluster = kvs_cqe_cluster(c, p, &ans);
	kvs_cqe_seen(c, p);
	return e;
}

static void refused(struct kvs_client *c, const uint8_t *keys, bool worker, const char *who)
{
	struct kvs_cluster_answer ans;
	uint64_t lease = 7, reg = 8, drop = 9;
	struct kvs_sqe *sqe;
	struct kvs_cqe e;
	int cl;

	sqe = kvs_get_sqe(c);
	CHECK(sqe && kvs_prep_query(c, sqe, keys, N, 1, KVS_QUERY_CLUSTER, 11) == 0,
	      "%s: cluster QUERY prep", who);
	e = reap_one(c, &cl);
	CHECK(e.user_data == 11 && !(e.flags & (KVS_CQE_CLUSTER | KVS_CQE_LOCAL)),
	      "%s: cluster QUERY: user_data %llu flags %x", who, (unsigned long long)e.user_data,
	      e.flags);
	CHECK_RES(e.res, -EOPNOTSUPP, "cluster QUERY without [cluster]");
	CHECK_RES(cl, -ENOENT, "the answer of a refused cluster QUERY");
	memset(&ans, 0x5a, sizeof(ans));
	CHECK_RES(kvs_query_cluster_sync(c, keys, N, 2, KVS_QUERY_NOLEASE, 10000, &lease, &ans),
		  -EOPNOTSUPP, "kvs_query_cluster_sync without [cluster]");
	CHECK(lease == 7 && ans.best == 0x5a5a5a5au, "%s: outputs written on -EOPNOTSUPP", who);
	if (!worker)
		return;
	for (uint32_t f = 0; f < 2; f++) {
		uint32_t flags = KVS_FLUSH_CLUSTER | (f ? KVS_FLUSH_INSTANCE : 0);

		sqe = kvs_get_sqe(c);
		CHECK(sqe && kvs_prep_flush(c, sqe, flags, 12) == 0, "%s: cluster FLUSH prep", who);
		e = reap_one(c, &cl);
		CHECK(e.user_data == 12 && !(e.flags & (KVS_CQE_CLUSTER | KVS_CQE_LOCAL)),
		      "cluster FLUSH: flags %x", e.flags);
		CHECK_RES(e.res, -EOPNOTSUPP, "cluster FLUSH without [cluster]");
		CHECK_RES(cl, -ENOENT, "the answer of a cluster FLUSH");
		CHECK_RES(kvs_flush_cluster_sync(c, flags & KVS_FLUSH_INSTANCE, 10000, &reg, &drop),
			  -EOPNOTSUPP, "kvs_flush_cluster_sync without [cluster]");
		CHECK(reg == 8 && drop == 9, "outputs written on -EOPNOTSUPP");
	}
}

int main(void)
{
	uint8_t keys[N * KVS_KEY_SIZE];
	uint32_t ids[N];
	struct kvs_client *plain, *w, *s;
	struct kvs_session_info info;
	struct test_kv kv;
	struct kvs_sqe *sqe;
	struct kvsd d;
	struct kvs_cqe e;

	it_watchdog(60);
	it_start(&d, NULL);
	it_keys(keys, N, 4242);
	it_ids(ids, N, 0);

	/* No KVS_CONNECT_CLUSTER: the library refuses the flag itself. */
	plain = it_worker(&d, "cl-plain", "cl-refused/ns", 0, 1, &kv, LAYOUT_PAGE_FIRST, 2, BLOCKS,
			  4096);
	sqe = kvs_get_sqe(plain);
	CHECK(sqe != NULL, "no SQE");
	CHECK_RES(kvs_prep_query(plain, sqe, keys, N, 1, KVS_QUERY_CLUSTER, 1), -EINVAL,
		  "KVS_QUERY_CLUSTER on a session without KVS_CONNECT_CLUSTER");
	CHECK(kvs_pending(plain) == 0, "%u pending after the refused prep", kvs_pending(plain));
	CHECK_RES(kvs_query_cluster_sync(plain, keys, N, 1, 0, 10000, NULL, NULL), -EINVAL,
		  "kvs_query_cluster_sync without KVS_CONNECT_CLUSTER");
	CHECK_RES(kvs_nop_sync(plain, 10000), 0, "NOP after the refusals");
	it_ok("KVS_QUERY_CLUSTER without KVS_CONNECT_CLUSTER: -EINVAL, nothing submitted");
	kvs_close(plain);
	test_kv_free(&kv);

	/* A cluster worker of a daemon without [cluster]. */
	w = cluster_connect(&d, KVS_ROLE_WORKER);
	kvs_session_info(w, &info);
	CHECK(info.daemon_rev_minor >= 1, "daemon wire minor %u", info.daemon_rev_minor);
	CHECK(test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, 2, BLOCKS, 4096) == 0, "KV memory");
	CHECK_RES(test_kv_register(w, &kv), 0, "REGISTER of the cluster worker");
	e = it_save(w, keys, ids, N);
	CHECK_RES(e.res, N, "SAVE on a cluster session");
	refused(w, keys, true, "worker");
	it_flush(w);
	e = it_query(w, keys, N, 0);
	CHECK_RES(e.res, N, "plain QUERY on a cluster session");
	CHECK(!(e.flags & KVS_CQE_CLUSTER), "a plain QUERY with KVS_CQE_CLUSTER");
	CHECK_RES(it_release(w, e.result0).res, 0, "RELEASE");
	it_ok("a cluster worker without [cluster]: cluster QUERY and FLUSH -EOPNOTSUPP, no "
	      "answer; plain operations as ever");

	s = cluster_connect(&d, KVS_ROLE_SCHEDULER);
	refused(s, keys, false, "scheduler");
	kvs_close(s);
	it_ok("a cluster scheduler without [cluster]: cluster QUERY -EOPNOTSUPP");

	kvs_close(w);
	test_kv_free(&kv);
	it_stop(&d);
	return 0;
}
