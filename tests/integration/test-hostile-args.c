/* SPDX-License-Identifier: MIT */
/*
 * Every SQE validation rule of sidecar/wire/sqe.c, broken on purpose by an
 * engine that writes its SQEs by hand (kvs_get_sqe, a prep helper, then
 * field tweaks): each gets its precise -errno, and nothing happens
 * otherwise.  Engine memory is poisoned before; after all the refusals
 * every byte of it is still poison, the pool holds no new block, no
 * lease was made or spent, no operation was counted as done, and the
 * session still works.  Last, a LOAD naming more blocks than its lease
 * covers is -EINVAL, writes nothing and spends nothing: the count is
 * checked before the rank's share is taken (test-load-refused has more).
 */
#include <stdio.h>
#include <string.h>

#include "itest.h"

#define BLOCKS 16u
#define LAYERS 6u
#define N 4u
#define MAX_KEYS 64u

static struct kvs_client *c;
static unsigned nbad;

/* Prepare an SQE with @prep (which sees it as `s`), break it with @tweak, expect @want. */
#define BAD(cl, prep, tweak, want, what)                                            \
	do {                                                                        \
		struct kvs_client *_c = (cl);                                       \
		struct kvs_sqe *s = kvs_get_sqe(_c);                                \
		struct kvs_cqe _e;                                                  \
		int _r;                                                             \
		CHECK(s, "no SQE");                                                 \
		_r = (prep);                                                        \
		CHECK(_r == 0, "prep for %s: %s", what, kvs_strerror(_r));          \
		tweak;                                                              \
		it_submit_wait(_c, &_e);                                            \
		CHECK_RES(_e.res, want, what);                                      \
		nbad++;                                                             \
	} while (0)

int main(void)
{
	uint8_t keys[N * KVS_KEY_SIZE], fresh[N * KVS_KEY_SIZE];
	uint32_t src[N], dst[N], bad_ids[N];
	struct kvs_msg_stats_global g0, g1;
	struct kvs_session_info info;
	struct kvs_client *sched, *lone;
	struct test_kv kv;
	struct kvsd d;
	struct kvs_cqe q, e;
	uint64_t lease;
	int r;

	it_watchdog(60);
	it_start(&d, "[session]\nmax_keys = 64\n");
	c = it_worker(&d, "hostile", "model-hostile", 0, 1, &kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      4096);
	r = test_connect(&d, KVS_ROLE_SCHEDULER, "hostile", "model-hostile", 0, 1, &sched);
	CHECK(r == 0, "scheduler: %s", kvs_strerror(r));
	/* A worker of an instance that never registers memory. */
	r = test_connect(&d, KVS_ROLE_WORKER, "hostile-lone", "model-hostile", 0, 1, &lone);
	CHECK(r == 0, "lone worker: %s", kvs_strerror(r));
	kvs_session_info(c, &info);
	CHECK(info.max_keys == MAX_KEYS, "max_keys %u", info.max_keys);

	it_keys(keys, N, 1);
	it_keys(fresh, N, 2); /* never saved: a SAVE let through would store them */
	it_ids(src, N, 0);
	it_ids(dst, N, 8);
	for (unsigned i = 0; i < N; i++)
		test_kv_fill(&kv, src[i], it_seed(1, i));
	CHECK_RES(it_save(c, keys, src, N).res, N, "SAVE");
	it_flush(c);
	q = it_query(c, keys, N, 0);
	CHECK_RES(q.res, N, "QUERY");
	lease = q.result0;

	for (unsigned m = 0; m < kv.nmems; m++)
		memset(kv.bases[m], POISON, kv.sizes[m]);
	g0 = it_stats(&d);

	/* Opcodes. */
	BAD(c, kvs_prep_nop(_c, s, 0), s->opcode = KVS_OP_LAST + 1, -EOPNOTSUPP, "opcode LAST+1");
	BAD(c, kvs_prep_nop(_c, s, 0), s->opcode = 0xff, -EOPNOTSUPP, "opcode 255");

	/* Flags an opcode does not define. */
	BAD(c, kvs_prep_save(_c, s, fresh, src, N, 0), s->flags = 1, -EINVAL, "SAVE flags 1");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, 0, 0, 0), s->flags = 1, -EINVAL,
	    "LOAD flags 1");
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0), s->flags = 0x10, -EINVAL,
	    "QUERY flags 0x10");
	/* Fetching names a peer: not with the cluster answer, not without a peer service. */
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0),
	    s->flags = KVS_QUERY_FETCH | KVS_QUERY_CLUSTER, -EINVAL, "QUERY fetch + cluster");
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0), s->flags = KVS_QUERY_FETCH, -EOPNOTSUPP,
	    "QUERY fetch without [cluster] peer_listen");
	/* The cluster flag on a session that did not ask for the answer area. */
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0), s->flags = KVS_QUERY_CLUSTER, -EINVAL,
	    "QUERY cluster flag without KVS_CONNECT_CLUSTER");
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0), s->flags = 0x80, -EINVAL,
	    "QUERY flags 0x80");
	BAD(c, kvs_prep_release(_c, s, lease, 0), s->flags = 1, -EINVAL, "RELEASE flags 1");
	BAD(c, kvs_prep_flush(_c, s, 0, 0), s->flags = 4, -EINVAL, "FLUSH flags 4");
	BAD(c, kvs_prep_nop(_c, s, 0), s->flags = 1, -EINVAL, "NOP flags 1");

	/* Reserved words. */
	BAD(c, kvs_prep_save(_c, s, fresh, src, N, 0), s->resv0 = 1, -EINVAL, "SAVE resv0");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, 0, 0, 0), s->fence_value = 1, -EINVAL, "LOAD fence value without PROGRESS");
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0), s->resv2 = 1ull << 63, -EINVAL,
	    "QUERY resv2");
	BAD(c, kvs_prep_release(_c, s, lease, 0), s->resv2 = 1, -EINVAL, "RELEASE resv2");
	BAD(c, kvs_prep_nop(_c, s, 0), s->resv0 = 0x8000, -EINVAL, "NOP resv0");

	/* Arguments on operations that take none. */
	BAD(c, kvs_prep_nop(_c, s, 0), s->count = 1, -EINVAL, "NOP count");
	BAD(c, kvs_prep_release(_c, s, lease, 0), s->arg_len = 16, -EINVAL, "RELEASE arg_len");
	BAD(c, kvs_prep_flush(_c, s, 0, 0), s->arg_off = 8, -EINVAL, "FLUSH arg_off");

	/* Fields the opcode does not use. */
	BAD(c, kvs_prep_save(_c, s, fresh, src, N, 0), s->lease = lease, -EINVAL, "SAVE lease");
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0), s->lease = lease, -EINVAL,
	    "QUERY lease");
	BAD(c, kvs_prep_flush(_c, s, 0, 0), s->lease = lease, -EINVAL, "FLUSH lease");
	BAD(c, kvs_prep_save(_c, s, fresh, src, N, 0), s->req_id = 1, -EINVAL, "SAVE req_id");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, 0, 0, 0), s->req_id = 1, -EINVAL,
	    "LOAD req_id");
	BAD(c, kvs_prep_release(_c, s, lease, 0), s->req_id = 1, -EINVAL, "RELEASE req_id");
	BAD(c, kvs_prep_save(_c, s, fresh, src, N, 0), s->layer_count = 1, -EINVAL,
	    "SAVE layer_count");
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0), s->layer_begin = 1, -EINVAL,
	    "QUERY layer_begin");
	BAD(c, kvs_prep_release(_c, s, lease, 0), s->layer_count = 1, -EINVAL,
	    "RELEASE layer_count");

	/* Lease 0 names no lease. */
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, 0, 0, 0), s->lease = 0, -ENOENT, "LOAD lease 0");
	BAD(c, kvs_prep_release(_c, s, lease, 0), s->lease = 0, -ENOENT, "RELEASE lease 0");

	/* Counts. */
	BAD(c, kvs_prep_save(_c, s, fresh, src, N, 0), s->count = 0, -EINVAL, "SAVE count 0");
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0), s->count = 0, -EINVAL, "QUERY count 0");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, 0, 0, 0), s->count = 0, -EINVAL,
	    "LOAD count 0");
	BAD(c, kvs_prep_save(_c, s, fresh, src, N, 0), s->count = MAX_KEYS + 1, -E2BIG,
	    "SAVE count max_keys+1");
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0), s->count = UINT32_MAX, -E2BIG,
	    "QUERY count 2^32-1");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, 0, 0, 0), s->count = MAX_KEYS + 1, -E2BIG,
	    "LOAD count max_keys+1");

	/* arg_len must be what count implies. */
	BAD(c, kvs_prep_save(_c, s, fresh, src, N, 0), s->arg_len -= 1, -EINVAL,
	    "SAVE arg_len short by one");
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0), s->arg_len += KVS_KEY_SIZE, -EINVAL,
	    "QUERY arg_len a key too long");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, 0, 0, 0), s->arg_len = 0, -EINVAL,
	    "LOAD arg_len 0");
	BAD(c, kvs_prep_save(_c, s, fresh, src, N, 0), s->count = N - 1, -EINVAL,
	    "SAVE count without arg_len");

	/* Arguments past the argument area. */
	BAD(c, kvs_prep_query(_c, s, keys, N, 0, 0, 0),
	    s->arg_off = (uint32_t)(info.arg_bytes - N * KVS_KEY_SIZE + 8), -EFAULT,
	    "QUERY arguments 8 bytes past the area");
	BAD(c, kvs_prep_save(_c, s, fresh, src, N, 0), s->arg_off = 0xfffffff0u, -EFAULT,
	    "SAVE arg_off near 2^32");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, 0, 0, 0), s->arg_off = (uint32_t)info.arg_bytes,
	    -EFAULT, "LOAD arg_off at the end");

	/* Block ids beyond the layout, anywhere in the list. */
	memcpy(bad_ids, src, sizeof(bad_ids));
	bad_ids[N - 1] = BLOCKS;
	BAD(c, kvs_prep_save(_c, s, fresh, bad_ids, N, 0), (void)0, -ERANGE,
	    "SAVE block id num_blocks");
	bad_ids[0] = UINT32_MAX;
	BAD(c, kvs_prep_save(_c, s, fresh, bad_ids, 1, 0), (void)0, -ERANGE,
	    "SAVE block id 2^32-1");
	memcpy(bad_ids, dst, sizeof(bad_ids));
	bad_ids[1] = BLOCKS;
	BAD(c, kvs_prep_load(_c, s, lease, bad_ids, N, 0, 0, 0), (void)0, -ERANGE,
	    "LOAD block id num_blocks");

	/* Layer ranges outside the layout. */
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, LAYERS, 0, 0), (void)0, -EINVAL,
	    "LOAD layer_begin = layers");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, LAYERS - 1, 2, 0), (void)0, -EINVAL,
	    "LOAD layers past the end");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, 0, LAYERS + 1, 0), (void)0, -EINVAL,
	    "LOAD layer_count > layers");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, 1, UINT32_MAX, 0), (void)0, -EINVAL,
	    "LOAD layer_count 2^32-1");
	BAD(c, kvs_prep_load(_c, s, lease, dst, N, UINT32_MAX, 1, 0), (void)0, -EINVAL,
	    "LOAD layer_begin 2^32-1");

	/* Roles and registration. */
	BAD(sched, kvs_prep_save(_c, s, fresh, src, N, 0), (void)0, -EPERM, "scheduler SAVE");
	BAD(sched, kvs_prep_load(_c, s, lease, dst, N, 0, 0, 0), (void)0, -EPERM,
	    "scheduler LOAD");
	BAD(lone, kvs_prep_save(_c, s, fresh, src, N, 0), (void)0, -KVS_EUNSEALED,
	    "SAVE before REGISTER");
	BAD(lone, kvs_prep_load(_c, s, lease, dst, N, 0, 0, 0), (void)0, -KVS_EUNSEALED,
	    "LOAD before REGISTER");
	BAD(lone, kvs_prep_query(_c, s, keys, N, 0, 0, 0), (void)0, -KVS_EUNSEALED,
	    "QUERY before REGISTER");

	g1 = it_stats(&d);
	CHECK(it_all_poison(&kv, POISON), "a refused SQE wrote engine memory");
	CHECK(g1.blocks_resident == g0.blocks_resident && g1.blocks_partial == g0.blocks_partial &&
		      g1.pool_used_bytes == g0.pool_used_bytes,
	      "the pool changed: resident %llu -> %llu, partial %llu, used %llu -> %llu",
	      (unsigned long long)g0.blocks_resident, (unsigned long long)g1.blocks_resident,
	      (unsigned long long)g1.blocks_partial, (unsigned long long)g0.pool_used_bytes,
	      (unsigned long long)g1.pool_used_bytes);
	CHECK(g1.save_ops == g0.save_ops && g1.load_ops == g0.load_ops &&
		      g1.query_ops == g0.query_ops &&
		      g1.save_blocks_stored == g0.save_blocks_stored &&
		      g1.load_blocks == g0.load_blocks && g1.bytes_loaded == g0.bytes_loaded,
	      "a refused SQE was executed: save_ops +%llu load_ops +%llu query_ops +%llu",
	      (unsigned long long)(g1.save_ops - g0.save_ops),
	      (unsigned long long)(g1.load_ops - g0.load_ops),
	      (unsigned long long)(g1.query_ops - g0.query_ops));
	CHECK(g1.leases_created == g0.leases_created && g1.leases_live == 1 &&
		      g1.leases_released == g0.leases_released,
	      "leases: created +%llu, %llu live, released +%llu",
	      (unsigned long long)(g1.leases_created - g0.leases_created),
	      (unsigned long long)g1.leases_live,
	      (unsigned long long)(g1.leases_released - g0.leases_released));
	CHECK(g1.errors - g0.errors == nbad, "%llu error CQEs counted for %u refusals",
	      (unsigned long long)(g1.errors - g0.errors), nbad);
	CHECK_RES(kvs_nop_sync(c, OP_TIMEOUT_MS), 0, "NOP after the refusals");

	/* libkvstash refuses an empty SAVE, QUERY or LOAD itself (kvstash.h promises -EINVAL). */
	{
		struct kvs_sqe *s = kvs_get_sqe(c);

		CHECK(s != NULL, "no SQE");
		CHECK_RES(kvs_prep_save(c, s, fresh, src, 0, 0), -EINVAL, "kvs_prep_save of 0 keys");
		s = kvs_get_sqe(c);
		CHECK_RES(kvs_prep_query(c, s, keys, 0, 0, 0, 0), -EINVAL, "kvs_prep_query of 0 keys");
		s = kvs_get_sqe(c);
		CHECK_RES(kvs_prep_load(c, s, lease, dst, 0, 0, 0, 0), -EINVAL,
			  "kvs_prep_load of 0 blocks");
		CHECK(kvs_pending(c) == 0, "%u SQEs left pending by refused preps", kvs_pending(c));
	}
	it_ok("%u malformed SQEs refused with their -errno; engine memory, pool and leases "
	      "untouched", nbad);

	/* The lease was not spent by any refusal: it loads now. */
	e = it_load(c, lease, dst, N, 0, 0);
	CHECK_RES(e.res, N, "LOAD with the lease the refused SQEs named");
	for (unsigned i = 0; i < N; i++)
		CHECK(test_kv_check(&kv, dst[i], it_seed(1, i)), "block %u differs", dst[i]);

	/* More blocks than the lease covers: -EINVAL, and the share is still there. */
	for (unsigned m = 0; m < kv.nmems; m++)
		memset(kv.bases[m], POISON, kv.sizes[m]);
	q = it_query(c, keys, N - 1, 0);
	CHECK_RES(q.res, N - 1, "QUERY of a shorter prefix");
	e = it_load(c, q.result0, dst, N, 0, 0);
	CHECK_RES(e.res, -EINVAL, "LOAD of more blocks than the lease has");
	CHECK(it_all_poison(&kv, POISON), "a refused LOAD wrote engine memory");
	g1 = it_stats(&d);
	CHECK(g1.leases_live == 1, "%llu leases live", (unsigned long long)g1.leases_live);
	e = it_load(c, q.result0, dst, N - 1, 0, 0);
	CHECK_RES(e.res, N - 1, "the corrected LOAD after the refused one");
	for (unsigned i = 0; i < N - 1; i++)
		CHECK(test_kv_check(&kv, dst[i], it_seed(1, i)), "block %u differs", dst[i]);
	g1 = it_stats(&d);
	CHECK(g1.leases_live == 0, "%llu leases live", (unsigned long long)g1.leases_live);
	it_ok("LOAD of more blocks than the lease: -EINVAL, nothing written or spent");

	kvs_close(lone);
	kvs_close(sched);
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
	return 0;
}
