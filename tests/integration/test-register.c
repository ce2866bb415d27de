/* SPDX-License-Identifier: MIT */
/*
 * Registration: the layouts engines really use are accepted; every kind of
 * bad geometry is refused with its own error and leaves nothing mapped;
 * role, repetition and limit rules; UNREGISTER; and instance sealing
 * across the ranks of a TP=2 instance.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "itest.h"

#define MAX_LAYERS 40

static struct kvsd d;

static void start(void)
{
	char ini[128];

	snprintf(ini, sizeof(ini), "[session]\nmax_layers = %u\n", MAX_LAYERS);
	it_start(&d, ini);
}

static void stop(void)
{
	it_stop(&d);
}

static struct kvs_client *conn(uint32_t role, const char *inst, const char *ns, uint32_t rank,
			       uint32_t tp)
{
	struct kvs_client *c = NULL;
	int r = test_connect(&d, role, inst, ns, rank, tp, &c);

	CHECK(r == 0, "connect %s rank %u/%u: %s", inst, rank, tp, kvs_strerror(r));
	return c;
}

static uint64_t sid(struct kvs_client *c)
{
	struct kvs_session_info i;

	CHECK_INT(kvs_session_info(c, &i), ==, 0);
	return i.session_id;
}

static struct kvs_msg_status_session status_of(struct kvs_client *admin, struct kvs_client *c)
{
	struct kvs_msg_status_session st;

	CHECK_INT(status_session(admin, sid(c), &st), ==, 0);
	return st;
}

/* Save @n blocks (0..n-1) under keys from @seed; the CQE's res. */
static int save(struct kvs_client *c, unsigned n, uint64_t seed)
{
	uint8_t keys[16 * 8];
	uint32_t ids[8];
	int r;

	CHECK_UINT(n, <=, 8);
	test_keys(keys, n, seed);
	for (unsigned i = 0; i < n; i++)
		ids[i] = i;
	r = kvs_save_sync(c, keys, ids, n, 5000, NULL, NULL);
	/* FLUSH: what the session saved is visible to QUERY from here on. */
	if (r >= 0)
		CHECK_INT(kvs_flush_sync(c, 0, 5000), ==, 0);
	return r;
}

static int query(struct kvs_client *c, unsigned n, uint64_t seed)
{
	uint8_t keys[16 * 8];

	test_keys(keys, n, seed);
	return kvs_query_sync(c, keys, n, 1, KVS_QUERY_NOLEASE, 5000, NULL);
}

static void test_valid_layouts(void)
{
	struct kvs_client *admin, *q, *s, *m0, *m1;
	struct kvs_msg_status_session st;
	static struct test_kv kq, ks, km0, km1;

	start();
	CHECK_INT(test_admin(&d, &admin), ==, 0);

	/* Qwen3-8B-like rank: 36 layers fused page-first in one allocation. */
	q = conn(KVS_ROLE_WORKER, "qwen", "qwen3/bf16/pf", 0, 1);
	CHECK_INT(test_kv_alloc(&kq, LAYOUT_PAGE_FIRST, 36, 16, 4096), ==, 0);
	CHECK_INT(test_kv_register(q, &kq), ==, 0);
	st = status_of(admin, q);
	CHECK_UINT(st.nr_layers, ==, 36);
	CHECK_UINT(st.slot_bytes, ==, 36 * 4096);
	CHECK_UINT(st.mapped_bytes, ==, 36 * 4096 * 16);
	CHECK_UINT(st.sealed, ==, 1);
	CHECK_STR(st.first_layer, ==, "model.layers.0.attn");
	CHECK_STR(st.last_layer, ==, "model.layers.35.attn");
	test_kv_fill(&kq, 0, 11);
	test_kv_fill(&kq, 1, 12);
	CHECK_INT(save(q, 2, 100), ==, 2);
	CHECK_INT(query(q, 2, 100), ==, 2);

	/* vLLM-like split K/V: one allocation per layer, two segments each. */
	s = conn(KVS_ROLE_WORKER, "split", "llama/bf16/kv", 0, 1);
	CHECK_INT(test_kv_alloc(&ks, LAYOUT_SPLIT_KV, 8, 16, 2048), ==, 0);
	CHECK_INT(test_kv_register(s, &ks), ==, 0);
	st = status_of(admin, s);
	CHECK_UINT(st.nr_layers, ==, 8);
	CHECK_UINT(st.slot_bytes, ==, 8 * 2 * 2048);
	CHECK_UINT(st.mapped_bytes, ==, 8 * 2 * 2048 * 16);
	CHECK_INT(save(s, 3, 200), ==, 3);
	CHECK_INT(query(s, 3, 200), ==, 3);
	/* 8 + 1 engine allocations mapped by kvstashd. */
	CHECK_INT(proc_map_count(d.pid, "kvstash-kv"), ==, 9);

	/*
	 * MLA-like, replicated over TP=2: one shard serves both ranks, so a
	 * block rank 0 saved is whole without rank 1 saving it.
	 */
	m0 = conn(KVS_ROLE_WORKER, "mla", "dsv3/bf16/mla", 0, 2);
	m1 = conn(KVS_ROLE_WORKER, "mla", "dsv3/bf16/mla", 1, 2);
	CHECK_INT(test_kv_alloc(&km0, LAYOUT_MLA, 4, 16, 1024), ==, 0);
	CHECK_INT(test_kv_alloc(&km1, LAYOUT_MLA, 4, 16, 1024), ==, 0);
	CHECK_INT(test_kv_register(m0, &km0), ==, 0);
	CHECK_UINT(status_of(admin, m0).sealed, ==, 0);
	CHECK_INT(test_kv_register(m1, &km1), ==, 0);
	CHECK_UINT(status_of(admin, m0).sealed, ==, 1);
	CHECK_INT(save(m0, 4, 300), ==, 4);
	CHECK_INT(kvs_flush_sync(m0, 0, 5000), ==, 0);
	CHECK_INT(query(m1, 4, 300), ==, 4);
	CHECK_INT(query(m0, 4, 300), ==, 4);

	kvs_close(m1);
	kvs_close(m0);
	kvs_close(s);
	kvs_close(q);
	kvs_close(admin);
	test_kv_free(&km1);
	test_kv_free(&km0);
	test_kv_free(&ks);
	test_kv_free(&kq);
	stop();
	it_ok("the layouts engines use are accepted");
}

/* The same geometry without the replicated flag: rank 0 alone makes a partial block. */
static void test_sharded_needs_all_ranks(void)
{
	struct kvs_client *r0, *r1;
	static struct test_kv k0, k1;

	start();
	r0 = conn(KVS_ROLE_WORKER, "tp", "dsv3/bf16/sharded", 0, 2);
	r1 = conn(KVS_ROLE_WORKER, "tp", "dsv3/bf16/sharded", 1, 2);
	CHECK_INT(test_kv_alloc(&k0, LAYOUT_PAGE_FIRST, 4, 16, 1024), ==, 0);
	CHECK_INT(test_kv_alloc(&k1, LAYOUT_PAGE_FIRST, 4, 16, 1024), ==, 0);
	CHECK_INT(test_kv_register(r0, &k0), ==, 0);
	CHECK_INT(test_kv_register(r1, &k1), ==, 0);
	CHECK_INT(save(r0, 4, 400), ==, 4);
	CHECK_INT(kvs_flush_sync(r0, 0, 5000), ==, 0);
	CHECK_INT(query(r1, 4, 400), ==, 0);
	CHECK_INT(save(r1, 4, 400), ==, 4);
	CHECK_INT(kvs_flush_sync(r1, 0, 5000), ==, 0);
	CHECK_INT(query(r0, 4, 400), ==, 4);
	kvs_close(r1);
	kvs_close(r0);
	test_kv_free(&k1);
	test_kv_free(&k0);
	stop();
	it_ok("a sharded instance is sealed by its last rank only");
}

/* ---- bad geometry --------------------------------------------------- */

#define MEM_SIZE (1u << 20)

struct geo_case {
	const char *what;
	int err;
	unsigned nlays;
	struct kvs_layer lays[2];
	uint64_t declared; /* 0: MEM_SIZE */
	unsigned nmems;	   /* 0: 1 */
};

#define L(nm, off, nb, segs, sb, kvs, bs) \
	{ .name = nm, .mem = 0, .segments = segs, .offset = off, .num_blocks = nb, \
	  .segment_bytes = sb, .kv_stride = kvs, .block_stride = bs }

static const struct geo_case geo[] = {
	{ "view past the allocation", -ERANGE, 1, { L("a", 0, 16, 1, 4096, 0, 70000) } },
	{ "offset at the end", -ERANGE, 1, { L("a", MEM_SIZE, 1, 1, 4096, 0, 4096) } },
	{ "one byte past the end", -ERANGE, 1, { L("a", 4097, 256, 1, 4096, 0, 4096) } },
	{ "K/V stride past the end", -ERANGE, 1, { L("a", 0, 16, 2, 4096, MEM_SIZE, 4096) } },
	{ "block stride overflows", -EOVERFLOW, 1, { L("a", 0, 16, 1, 4096, 0, 1ull << 62) } },
	{ "offset overflows", -EOVERFLOW, 1, { L("a", UINT64_MAX - 100, 1, 1, 4096, 0, 4096) } },
	{ "kv stride overflows", -EOVERFLOW, 1,
	  { L("a", 0, 1, 2, 4096, UINT64_MAX - 1000, 4096) } },
	{ "segment bytes overflow", -EOVERFLOW, 1,
	  { L("a", 0, 1, 2, 1ull << 63, 0, 1ull << 63) } },
	{ "zero blocks", -EINVAL, 1, { L("a", 0, 0, 1, 4096, 0, 4096) } },
	{ "zero segment bytes", -EINVAL, 1, { L("a", 0, 16, 1, 0, 0, 4096) } },
	{ "zero segments", -EINVAL, 1, { L("a", 0, 16, 0, 4096, 0, 4096) } },
	{ "three segments", -EINVAL, 1, { L("a", 0, 16, 3, 4096, 65536, 4096) } },
	{ "kv stride for one segment", -EINVAL, 1, { L("a", 0, 16, 1, 4096, 65536, 4096) } },
	{ "bad layer name", -EINVAL, 1, { L("layer 0!", 0, 16, 1, 4096, 0, 4096) } },
	{ "layer on a missing allocation", -EINVAL, 1,
	  { { .name = "a", .mem = 1, .segments = 1, .num_blocks = 16, .segment_bytes = 4096,
	      .block_stride = 4096 } } },
	{ "allocation no layer uses", -EINVAL, 1, { L("a", 0, 16, 1, 4096, 0, 4096) }, 0, 2 },
	{ "duplicate names", -EEXIST, 2,
	  { L("a", 0, 16, 1, 4096, 0, 8192), L("a", 4096, 16, 1, 4096, 0, 8192) } },
	{ "overlapping layers", -ENOTUNIQ, 2,
	  { L("a", 0, 16, 1, 4096, 0, 8192), L("b", 2048, 16, 1, 4096, 0, 8192) } },
	{ "layers overlap in a later block", -ENOTUNIQ, 2,
	  { L("a", 0, 16, 1, 4096, 0, 8192), L("b", 8192 * 15 + 4095, 1, 1, 2, 0, 0) } },
	{ "blocks overlap each other", -ENOTUNIQ, 1, { L("a", 0, 16, 1, 4096, 0, 2048) } },
	{ "K overlaps V", -ENOTUNIQ, 1, { L("a", 0, 16, 2, 4096, 1024, 8192) } },
	{ "declared size above the fd's", -ERANGE, 1, { L("a", 0, 16, 1, 4096, 0, 4096) },
	  2 * MEM_SIZE },
};

static void test_bad_geometry(void)
{
	struct kvs_client *c, *admin;
	struct kvs_mem mems[2];
	int fd, fds0, maps0;
	void *p;

	start();
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	c = conn(KVS_ROLE_WORKER, "geo", "geo/bf16", 0, 1);
	CHECK_INT(kvs_host_alloc(MEM_SIZE, &fd, &p), ==, 0);
	fds0 = proc_fd_count(d.pid);
	maps0 = proc_map_count(d.pid, "kvstash-kv");
	CHECK_INT(maps0, ==, 0);

	for (size_t i = 0; i < sizeof(geo) / sizeof(geo[0]); i++) {
		const struct geo_case *g = &geo[i];
		unsigned nmems = g->nmems ? g->nmems : 1;
		int r;

		for (unsigned m = 0; m < nmems; m++)
			mems[m] = (struct kvs_mem){ .kind = KVS_MEM_HOST_FD, .fd = fd,
						    .size = g->declared ? g->declared : MEM_SIZE };
		r = kvs_register(c, mems, nmems, g->lays, g->nlays, 0);
		CHECK(r == g->err, "%s: got %d (%s), want %d (%s)", g->what, r, kvs_strerror(r),
		      g->err, kvs_strerror(g->err));
		/* Nothing stays behind: no mapping, no fd, no registration. */
		CHECK(wait_map_count(d.pid, "kvstash-kv", 0, 2000) == 0, "%s: mapping left",
		      g->what);
		CHECK(wait_fd_count(d.pid, fds0, 2000) == fds0, "%s: fd left (%d, was %d)", g->what,
		      proc_fd_count(d.pid), fds0);
		CHECK_UINT(status_of(admin, c).nr_layers, ==, 0);
	}

	/* A memfd that could shrink under kvstashd's copies. */
	{
		struct kvs_layer l = L("a", 0, 16, 1, 4096, 0, 4096);
		int ufd = memfd_create("kvstash-kv-unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		int pfd[2];

		CHECK_INT(ufd, >=, 0);
		CHECK_INT(ftruncate(ufd, MEM_SIZE), ==, 0);
		mems[0] = (struct kvs_mem){ .kind = KVS_MEM_HOST_FD, .fd = ufd, .size = MEM_SIZE };
		CHECK_INT(kvs_register(c, mems, 1, &l, 1, 0), ==, -EPERM);
		/* Sealed against growth only is not enough either. */
		CHECK_INT(fcntl(ufd, F_ADD_SEALS, F_SEAL_GROW), ==, 0);
		CHECK_INT(kvs_register(c, mems, 1, &l, 1, 0), ==, -EPERM);
		close(ufd);
		/* Not memory at all. */
		CHECK_INT(pipe(pfd), ==, 0);
		mems[0].fd = pfd[0];
		CHECK_INT(kvs_register(c, mems, 1, &l, 1, 0), ==, -EBADF);
		close(pfd[0]);
		close(pfd[1]);
		CHECK_INT(wait_fd_count(d.pid, fds0, 2000), ==, fds0);
	}

	/* The session took no harm: a good layout on the same memory is accepted. */
	{
		struct kvs_layer l[2] = { L("a", 0, 16, 1, 4096, 0, 8192),
					  L("b", 4096, 16, 1, 4096, 0, 8192) };

		mems[0] = (struct kvs_mem){ .kind = KVS_MEM_HOST_FD, .fd = fd, .size = MEM_SIZE };
		CHECK_INT(kvs_register(c, mems, 1, l, 2, 0), ==, 0);
		CHECK_UINT(status_of(admin, c).nr_layers, ==, 2);
		CHECK_INT(proc_map_count(d.pid, "kvstash-kv"), ==, 1);
		CHECK_INT(save(c, 2, 500), ==, 2);
	}
	kvs_close(c);
	kvs_close(admin);
	kvs_host_free(fd, p, MEM_SIZE);
	stop();
	it_ok("bad geometry refused with its own errno, nothing left mapped");
}

/* Ranks of one instance, and instances of one namespace, must agree on geometry. */
static void test_geometry_mismatch(void)
{
	struct kvs_client *r0, *r1, *other, *admin;
	static struct test_kv k0, k1, kbad, kother;

	start();
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	r0 = conn(KVS_ROLE_WORKER, "mm", "mm/bf16", 0, 2);
	r1 = conn(KVS_ROLE_WORKER, "mm", "mm/bf16", 1, 2);
	CHECK_INT(test_kv_alloc(&k0, LAYOUT_PAGE_FIRST, 4, 16, 4096), ==, 0);
	CHECK_INT(test_kv_alloc(&k1, LAYOUT_PAGE_FIRST, 4, 16, 4096), ==, 0);
	CHECK_INT(test_kv_alloc(&kbad, LAYOUT_PAGE_FIRST, 4, 16, 8192), ==, 0);
	CHECK_INT(test_kv_register(r0, &k0), ==, 0);
	CHECK_INT(test_kv_register(r1, &kbad), ==, -EXDEV);
	CHECK_UINT(status_of(admin, r1).nr_layers, ==, 0);
	CHECK_UINT(status_of(admin, r0).sealed, ==, 0);
	/* The refused one was mapped before the namespace said no: released just after. */
	CHECK_INT(wait_map_count(d.pid, "kvstash-kv", 1, 5000), ==, 1);
	/* Other layer names are another layout as well. */
	snprintf(k1.names[3], sizeof(k1.names[3]), "model.layers.3.mlp");
	CHECK_INT(test_kv_register(r1, &k1), ==, -EXDEV);
	snprintf(k1.names[3], sizeof(k1.names[3]), "model.layers.3.attn");
	CHECK_INT(test_kv_register(r1, &k1), ==, 0);
	CHECK_UINT(status_of(admin, r0).sealed, ==, 1);

	/* Another instance in the same namespace with another layout. */
	other = conn(KVS_ROLE_WORKER, "mm-other", "mm/bf16", 0, 2);
	CHECK_INT(test_kv_alloc(&kother, LAYOUT_SPLIT_KV, 4, 16, 2048), ==, 0);
	CHECK_INT(test_kv_register(other, &kother), ==, -EXDEV);

	kvs_close(other);
	kvs_close(r1);
	kvs_close(r0);
	kvs_close(admin);
	test_kv_free(&kother);
	test_kv_free(&kbad);
	test_kv_free(&k1);
	test_kv_free(&k0);
	stop();
	it_ok("geometry must match the namespace and the other ranks");
}

static void test_rules(void)
{
	struct kvs_client *w, *sched, *big;
	static struct test_kv k, ks, kbig, kmax;

	start();
	w = conn(KVS_ROLE_WORKER, "rules", "rules/bf16", 0, 1);
	sched = conn(KVS_ROLE_SCHEDULER, "rules", "rules/bf16", 0, 1);
	CHECK_INT(test_kv_alloc(&k, LAYOUT_PAGE_FIRST, 4, 16, 1024), ==, 0);
	CHECK_INT(test_kv_alloc(&ks, LAYOUT_PAGE_FIRST, 4, 16, 1024), ==, 0);

	/* A scheduler has no memory to register, and nothing to unregister. */
	CHECK_INT(test_kv_register(sched, &ks), ==, -EPERM);
	CHECK_INT(kvs_unregister(sched), ==, -EPERM);
	CHECK_INT(proc_map_count(d.pid, "kvstash-kv"), ==, 0);

	CHECK_INT(test_kv_register(w, &k), ==, 0);
	CHECK_INT(test_kv_register(w, &k), ==, -EBUSY);
	CHECK_INT(test_kv_register(w, &ks), ==, -EBUSY);
	CHECK_INT(proc_map_count(d.pid, "kvstash-kv"), ==, 1);
	CHECK_INT(save(w, 2, 600), ==, 2);

	/* max_layers: the limit itself is fine, one more is not. */
	big = conn(KVS_ROLE_WORKER, "rules-big", "rules-big/bf16", 0, 1);
	CHECK_INT(test_kv_alloc(&kbig, LAYOUT_PAGE_FIRST, MAX_LAYERS + 1, 4, 512), ==, 0);
	CHECK_INT(test_kv_register(big, &kbig), ==, -E2BIG);
	CHECK_INT(test_kv_alloc(&kmax, LAYOUT_PAGE_FIRST, MAX_LAYERS, 4, 512), ==, 0);
	CHECK_INT(test_kv_register(big, &kmax), ==, 0);

	kvs_close(big);
	kvs_close(sched);
	kvs_close(w);
	test_kv_free(&kmax);
	test_kv_free(&kbig);
	test_kv_free(&ks);
	test_kv_free(&k);
	stop();
	it_ok("role, repetition and limit rules of REGISTER");
}

static void test_unregister(void)
{
	struct kvs_client *w, *admin;
	static struct test_kv k;

	start();
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	w = conn(KVS_ROLE_WORKER, "unreg", "unreg/bf16", 0, 1);
	CHECK_INT(test_kv_alloc(&k, LAYOUT_PAGE_FIRST, 4, 16, 1024), ==, 0);
	/* Nothing registered yet: still fine. */
	CHECK_INT(kvs_unregister(w), ==, 0);

	CHECK_INT(test_kv_register(w, &k), ==, 0);
	CHECK_INT(proc_map_count(d.pid, "kvstash-kv"), ==, 1);
	CHECK_INT(save(w, 2, 700), ==, 2);
	CHECK_INT(kvs_unregister(w), ==, 0);
	/*
	 * The mapping goes just after UNREGISTER has answered: kvstashd's
	 * release thread unmaps it, so that the control thread never waits
	 * for the kernel to tear down an engine's pages.
	 */
	CHECK_INT(wait_map_count(d.pid, "kvstash-kv", 0, 5000), ==, 0);
	CHECK_UINT(status_of(admin, w).nr_layers, ==, 0);
	CHECK_INT(save(w, 2, 701), ==, -KVS_EUNSEALED);
	CHECK_INT(kvs_unregister(w), ==, 0);
	CHECK_INT(kvs_unregister(w), ==, 0);

	/* Register again on the same session: works, and the data path with it. */
	CHECK_INT(test_kv_register(w, &k), ==, 0);
	CHECK_INT(proc_map_count(d.pid, "kvstash-kv"), ==, 1);
	CHECK_UINT(status_of(admin, w).nr_layers, ==, 4);
	CHECK_INT(save(w, 3, 702), ==, 3);
	CHECK_INT(kvs_nop_sync(w, 5000), ==, 0);

	kvs_close(w);
	kvs_close(admin);
	test_kv_free(&k);
	stop();
	it_ok("UNREGISTER drops the mappings, idempotent");
}

static void test_sealing(void)
{
	struct kvs_client *r0, *r1, *sched, *admin;
	static struct test_kv k0, k1;

	start();
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	r0 = conn(KVS_ROLE_WORKER, "seal", "seal/bf16", 0, 2);
	r1 = conn(KVS_ROLE_WORKER, "seal", "seal/bf16", 1, 2);
	sched = conn(KVS_ROLE_SCHEDULER, "seal", "seal/bf16", 0, 2);
	CHECK_INT(test_kv_alloc(&k0, LAYOUT_PAGE_FIRST, 4, 16, 1024), ==, 0);
	CHECK_INT(test_kv_alloc(&k1, LAYOUT_PAGE_FIRST, 4, 16, 1024), ==, 0);

	/* Nobody registered. */
	CHECK_INT(save(r0, 2, 800), ==, -KVS_EUNSEALED);
	CHECK_INT(query(sched, 2, 800), ==, -KVS_EUNSEALED);

	/* Rank 0 alone. */
	CHECK_INT(test_kv_register(r0, &k0), ==, 0);
	CHECK_UINT(status_of(admin, r0).sealed, ==, 0);
	CHECK_INT(save(r0, 2, 800), ==, -KVS_EUNSEALED);
	CHECK_INT(query(r0, 2, 800), ==, -KVS_EUNSEALED);
	CHECK_INT(query(sched, 2, 800), ==, -KVS_EUNSEALED);

	/* Both ranks: sealed. */
	CHECK_INT(test_kv_register(r1, &k1), ==, 0);
	CHECK_UINT(status_of(admin, r0).sealed, ==, 1);
	CHECK_UINT(status_of(admin, sched).sealed, ==, 1);
	CHECK_INT(save(r0, 2, 800), ==, 2);
	CHECK_INT(save(r1, 2, 800), ==, 2);
	CHECK_INT(kvs_flush_sync(r0, KVS_FLUSH_INSTANCE, 5000), ==, 0);
	CHECK_INT(query(r0, 2, 800), ==, 2);
	CHECK_INT(query(sched, 2, 800), ==, 2);

	/* Rank 1 leaves the instance's registration: unsealed again. */
	CHECK_INT(kvs_unregister(r1), ==, 0);
	CHECK_UINT(status_of(admin, r0).sealed, ==, 0);
	CHECK_INT(save(r0, 2, 801), ==, -KVS_EUNSEALED);
	CHECK_INT(query(r0, 2, 800), ==, -KVS_EUNSEALED);
	CHECK_INT(query(sched, 2, 800), ==, -KVS_EUNSEALED);

	/* And back. */
	CHECK_INT(test_kv_register(r1, &k1), ==, 0);
	CHECK_INT(query(sched, 2, 800), ==, 2);
	CHECK_INT(save(r0, 2, 802), ==, 2);

	/* A rank that disconnects unseals as well. */
	kvs_close(r1);
	{
		uint64_t t0 = test_now_ns();
		int r;

		while ((r = save(r0, 1, 803)) >= 0 && test_now_ns() - t0 < 3000000000ull)
			usleep(10000);
		CHECK_INT(r, ==, -KVS_EUNSEALED);
	}

	kvs_close(sched);
	kvs_close(r0);
	kvs_close(admin);
	test_kv_free(&k1);
	test_kv_free(&k0);
	stop();
	it_ok("an instance is sealed across the ranks of TP=2");
}

int main(void)
{
	it_watchdog(60);
	test_valid_layouts();
	it_watchdog(60);
	test_sharded_needs_all_ranks();
	it_watchdog(60);
	test_bad_geometry();
	it_watchdog(60);
	test_geometry_mismatch();
	it_watchdog(60);
	test_rules();
	it_watchdog(60);
	test_unregister();
	it_watchdog(60);
	test_sealing();
	return 0;
}
