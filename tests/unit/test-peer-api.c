/* SPDX-License-Identifier: MIT */
/*
 * libkvspeer's API contract (kvstash/peer.h), in one process over
 * loopback: parameter checks, a fetch and its counters, joins and their
 * one-time completion, the calls refused from inside a callback, memory
 * that cannot be unregistered while locked, kvspeer_free() completing a
 * fetch in progress, ranges outside registered memory never served, a
 * host's lock error, connect failures, health and peer rows, many cold
 * fetches at once within a peer's per-host limits.  The
 * cross-host behaviour (namespaces, deaths, partitions) is tests/peer/'s.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvstash/peer.h>

#include "unit.h"

#define NBLOCKS 16u
#define SHARD	8192u

#define SECRET_TEMPLATE "/tmp/kvspeer-api.XXXXXX"
static char secret_path[sizeof(SECRET_TEMPLATE)];

struct srv {
	uint8_t *mem;
	uint8_t keys[NBLOCKS][KVSPEER_KEY_SIZE];
	_Atomic int pins;
	int bad_block;	/* lock() reports a range outside registered memory here */
	int lock_error; /* lock() fails with this */
	bool hold;	/* generation() blocks until released */
	bool held;
	pthread_mutex_t m;
	pthread_cond_t c;
	struct kvspeer *kp;
	char addr[KVSPEER_ADDR_MAX];
};

static uint8_t digest[KVSPEER_DIGEST_SIZE] = { 1, 2, 3 };

static int s_lock(void *arg, const struct kvspeer_lock_req *req, struct kvspeer_shard *ret,
		  uint64_t *cookies)
{
	struct srv *s = arg;
	uint32_t n = 0;

	if (s->lock_error)
		return s->lock_error;
	for (uint32_t i = 0; i < req->nr_keys && i < NBLOCKS; i++) {
		if (memcmp(req->keys + i * KVSPEER_KEY_SIZE, s->keys[i], KVSPEER_KEY_SIZE))
			break;
		ret[i].addr = s->mem + (size_t)i * SHARD;
		if ((int)i == s->bad_block)
			ret[i].addr = s->mem + (size_t)NBLOCKS * SHARD; /* just past the region */
		ret[i].len = SHARD;
		ret[i].generation = 1;
		cookies[i] = i;
		n++;
	}
	atomic_fetch_add(&s->pins, (int)n);
	return (int)n;
}

static void s_unlock(void *arg, const uint64_t *cookies, uint32_t nr)
{
	struct srv *s = arg;

	atomic_fetch_sub(&s->pins, (int)nr);
}

static uint64_t s_generation(void *arg, uint64_t cookie, uint32_t shard)
{
	struct srv *s = arg;

	pthread_mutex_lock(&s->m);
	if (s->hold) {
		s->held = true;
		pthread_cond_broadcast(&s->c);
		while (s->hold)
			pthread_cond_wait(&s->c, &s->m);
	}
	pthread_mutex_unlock(&s->m);
	return 1;
}

static _Atomic int thread_starts, thread_stops;
static pthread_t hook_thread;
static _Atomic int hook_same = 1;

static void s_thread_start(void *arg)
{
	atomic_fetch_add(&thread_starts, 1);
	hook_thread = pthread_self();
}

static void s_thread_stop(void *arg)
{
	atomic_fetch_add(&thread_stops, 1);
	if (!pthread_equal(hook_thread, pthread_self()))
		atomic_store(&hook_same, 0);
}

static const struct kvspeer_host_ops ops = {
	.lock = s_lock,
	.unlock = s_unlock,
	.generation = s_generation,
	.thread_start = s_thread_start,
	.thread_stop = s_thread_stop,
};

static void params(struct kvspeer_params *p, const char *node)
{
	kvspeer_params_init(p);
	p->cluster = "unit";
	p->node = node;
	p->secret_file = secret_path;
}

static void srv_start(struct srv *s)
{
	struct kvspeer_params p;

	memset(s, 0, sizeof(*s));
	s->bad_block = -1;
	pthread_mutex_init(&s->m, NULL);
	pthread_cond_init(&s->c, NULL);
	/* One page more than registered: a bad range points there. */
	s->mem = aligned_alloc(4096, (NBLOCKS + 1) * SHARD);
	for (uint32_t b = 0; b < NBLOCKS; b++) {
		memset(s->keys[b], (int)b + 1, KVSPEER_KEY_SIZE);
		memset(s->mem + (size_t)b * SHARD, (int)b + 1, SHARD);
	}
	memset(s->mem + (size_t)NBLOCKS * SHARD, 0xee, SHARD);
	params(&p, "srv");
	p.listen = "127.0.0.1:0";
	p.allow = "127.0.0.0/8";
	p.ops = &ops;
	p.host = s;
	ck_assert_int_eq(kvspeer_new(&p, &s->kp), 0);
	ck_assert_int_eq(kvspeer_mem_register(s->kp, s->mem, (size_t)NBLOCKS * SHARD), 0);
	ck_assert_int_eq(kvspeer_local_addr(s->kp, s->addr, sizeof(s->addr)), 0);
}

static void srv_stop(struct srv *s)
{
	pthread_mutex_lock(&s->m);
	s->hold = false;
	pthread_cond_broadcast(&s->c);
	pthread_mutex_unlock(&s->m);
	kvspeer_free(s->kp);
	ck_assert_int_eq(atomic_load(&s->pins), 0);
	free(s->mem);
}

static struct kvspeer *client(void)
{
	struct kvspeer_params p;
	struct kvspeer *kp;

	params(&p, "cli");
	ck_assert_int_eq(kvspeer_new(&p, &kp), 0);
	return kp;
}

static uint8_t dst[NBLOCKS][SHARD];
static uint8_t keys[NBLOCKS][KVSPEER_KEY_SIZE];

static void *alloc_cb(void *arg, uint32_t block, uint32_t shard, uint64_t len)
{
	return len == SHARD && block < NBLOCKS ? dst[block] : NULL;
}

static void fparams(struct kvspeer_fetch_params *f, const char *peer, uint32_t n)
{
	kvspeer_fetch_params_init(f);
	for (uint32_t b = 0; b < NBLOCKS; b++)
		memset(keys[b], (int)b + 1, KVSPEER_KEY_SIZE);
	memset(dst, 0, sizeof(dst));
	f->peer = peer;
	f->digest = digest;
	f->keys = &keys[0][0];
	f->nr_keys = n;
	f->nr_shards = 1;
	f->timeout_ms = 10000;
	f->alloc = alloc_cb;
}

/* Poll a server counter (the release after a fetch is asynchronous). */
static uint64_t stat_wait(struct kvspeer *kp, size_t off, uint64_t want)
{
	struct kvspeer_stats st;
	uint64_t v = 0;

	for (int i = 0; i < 2000; i++) {
		kvspeer_stats(kp, &st);
		memcpy(&v, (char *)&st + off, sizeof(v));
		if (v == want)
			break;
		usleep(5000);
	}
	return v;
}
#define STAT_WAIT(kp, field, want) stat_wait(kp, offsetof(struct kvspeer_stats, field), want)

START_TEST(test_params)
{
	struct kvspeer_params p;
	struct kvspeer *kp = NULL;

	params(&p, "n");
	p.cluster = NULL;
	ck_assert_int_eq(kvspeer_new(&p, &kp), -EINVAL);
	params(&p, "a b");
	ck_assert_int_eq(kvspeer_new(&p, &kp), -EINVAL);
	params(&p, "n");
	p.secret_file = NULL;
	ck_assert_int_eq(kvspeer_new(&p, &kp), -EINVAL);
	params(&p, "n");
	p.listen = "127.0.0.1:0";
	ck_assert_int_eq(kvspeer_new(&p, &kp), -EINVAL); /* no ops, no allow-list */
	p.ops = &ops;
	ck_assert_int_eq(kvspeer_new(&p, &kp), -EINVAL); /* no allow-list */
	p.allow = "127.0.0.0/8";
	p.listen = "0.0.0.0:0";
	ck_assert_int_eq(kvspeer_new(&p, &kp), -EINVAL); /* every interface */
	params(&p, "n");
	p.flags = KVSPEER_F_UCX_ALLOW_TCP; /* without the UCX transport */
	ck_assert_int_eq(kvspeer_new(&p, &kp), -EINVAL);
	params(&p, "n");
	p.flags = 1u << 7;
	ck_assert_int_eq(kvspeer_new(&p, &kp), -EINVAL);
	params(&p, "n");
	p.resv[2] = 1;
	ck_assert_int_eq(kvspeer_new(&p, &kp), -EINVAL);
	params(&p, "n");
	p.lock_ttl_ms = 0;
	ck_assert_int_eq(kvspeer_new(&p, &kp), -EINVAL);
	ck_assert_ptr_null(kp);
	kvspeer_free(NULL);
	kvspeer_fetch_unref(NULL);
}
END_TEST

START_TEST(test_fetch_and_stats)
{
	struct srv s;
	struct kvspeer *c;
	struct kvspeer_fetch_params f;
	struct kvspeer_stats st;
	int err = -1;

	srv_start(&s);
	c = client();
	fparams(&f, s.addr, NBLOCKS);
	ck_assert_int_eq(kvspeer_fetch(c, &f, &err), (int)NBLOCKS);
	ck_assert_int_eq(err, 0);
	for (uint32_t b = 0; b < NBLOCKS; b++)
		for (uint32_t i = 0; i < SHARD; i++)
			ck_assert_uint_eq(dst[b][i], b + 1);
	kvspeer_stats(c, &st);
	ck_assert_uint_eq(st.fetches, 1);
	ck_assert_uint_eq(st.fetches_full, 1);
	ck_assert_uint_eq(st.fetch_blocks, NBLOCKS);
	ck_assert_uint_eq(st.fetch_bytes, (uint64_t)NBLOCKS * SHARD);
	{
		uint64_t hist = 0;

		for (int i = 0; i < KVSPEER_HIST_BUCKETS; i++)
			hist += st.fetch_latency_us[i];
		ck_assert_uint_eq(hist, 1);
	}
	ck_assert_uint_eq(STAT_WAIT(s.kp, locks_released, 1), 1);
	kvspeer_stats(s.kp, &st);
	ck_assert_uint_eq(st.locks_held, 0);
	ck_assert_uint_eq(st.serve_blocks, NBLOCKS);
	ck_assert_uint_eq(st.serve_bytes, (uint64_t)NBLOCKS * SHARD);
	/* A prefix: the first 5 keys only. */
	fparams(&f, s.addr, 5);
	ck_assert_int_eq(kvspeer_fetch(c, &f, &err), 5);
	/* Keys the peer does not have past block 3: 3. */
	fparams(&f, s.addr, NBLOCKS);
	memset(keys[3], 0x77, KVSPEER_KEY_SIZE);
	ck_assert_int_eq(kvspeer_fetch(c, &f, &err), 3);
	ck_assert_int_eq(err, 0);
	kvspeer_free(c);
	atomic_store(&thread_starts, 0);
	atomic_store(&thread_stops, 0);
	srv_stop(&s);
	/* The service thread's hooks: each once, on that thread, none left at free. */
	ck_assert_int_eq(atomic_load(&thread_stops), 1);
	ck_assert_int_eq(atomic_load(&hook_same), 1);
}
END_TEST

static _Atomic int done_calls, done_last = -100;

static void done_cb(void *arg, struct kvspeer_fetch *f, int n)
{
	atomic_fetch_add(&done_calls, 1);
	atomic_store(&done_last, n);
}

START_TEST(test_join)
{
	struct srv s;
	struct kvspeer *c;
	struct kvspeer_fetch_params f;
	struct kvspeer_fetch *fh;
	int err = -1, r;

	srv_start(&s);
	c = client();
	fparams(&f, s.addr, NBLOCKS);
	f.done = done_cb;
	atomic_store(&done_calls, 0);
	ck_assert_int_eq(kvspeer_fetch_submit(c, &f, &fh), 0);
	/* Joined before or after completion: either a callback or -EALREADY, never both. */
	r = kvspeer_fetch_join(fh, done_cb, NULL);
	ck_assert(r == 0 || r == -EALREADY);
	ck_assert_int_eq(kvspeer_fetch_wait(fh, &err), (int)NBLOCKS);
	ck_assert_int_eq(kvspeer_fetch_join(fh, done_cb, NULL), -EALREADY);
	ck_assert_int_eq(kvspeer_fetch_result(fh, &err), (int)NBLOCKS);
	ck_assert_int_eq(err, 0);
	/* The owner's done and the joiner's (if it joined in time) ran once each, in wait. */
	ck_assert_int_eq(atomic_load(&done_calls), r == 0 ? 2 : 1);
	ck_assert_int_eq(atomic_load(&done_last), (int)NBLOCKS);
	kvspeer_fetch_unref(fh);
	kvspeer_free(c);
	srv_stop(&s);
}
END_TEST

static struct kvspeer *cb_kp;
static _Atomic int cb_wait = 1, cb_reg = 1, cb_peers = 1, cb_fetch = 1;

static void deadlock_cb(void *arg, struct kvspeer_fetch *f, int n)
{
	struct kvspeer_fetch_params fp;
	struct kvspeer_peer_info pi;
	int err;

	atomic_store(&cb_wait, kvspeer_fetch_wait(f, &err));
	atomic_store(&cb_reg, kvspeer_mem_register(cb_kp, dst, sizeof(dst)));
	atomic_store(&cb_peers, kvspeer_peers(cb_kp, &pi, 1));
	fparams(&fp, "127.0.0.1:1", 1);
	atomic_store(&cb_fetch, kvspeer_fetch(cb_kp, &fp, &err));
}

START_TEST(test_no_waiting_in_callbacks)
{
	struct srv s;
	struct kvspeer_fetch_params f;
	int err;

	srv_start(&s);
	cb_kp = client();
	fparams(&f, s.addr, 2);
	f.done = deadlock_cb;
	ck_assert_int_eq(kvspeer_fetch(cb_kp, &f, &err), 2);
	ck_assert_int_eq(atomic_load(&cb_wait), -EDEADLK);
	ck_assert_int_eq(atomic_load(&cb_reg), -EDEADLK);
	ck_assert_int_eq(atomic_load(&cb_peers), -EDEADLK);
	ck_assert_int_eq(atomic_load(&cb_fetch), -EDEADLK);
	kvspeer_free(cb_kp);
	srv_stop(&s);
}
END_TEST

static void wait_held(struct srv *s)
{
	pthread_mutex_lock(&s->m);
	while (!s->held)
		pthread_cond_wait(&s->c, &s->m);
	pthread_mutex_unlock(&s->m);
}

static void release(struct srv *s)
{
	pthread_mutex_lock(&s->m);
	s->hold = false;
	pthread_cond_broadcast(&s->c);
	pthread_mutex_unlock(&s->m);
}

START_TEST(test_registered_memory)
{
	struct srv s;
	struct kvspeer *c;
	struct kvspeer_fetch_params f;
	struct kvspeer_fetch *fh;
	struct kvspeer_stats st;
	int err;

	srv_start(&s);
	ck_assert_int_eq(kvspeer_mem_register(s.kp, s.mem + SHARD, SHARD), -EINVAL); /* overlaps */
	ck_assert_int_eq(kvspeer_mem_unregister(s.kp, s.mem + SHARD), -ENOENT);
	c = client();
	/* While a lock holds it, the region stays. */
	s.hold = true;
	fparams(&f, s.addr, NBLOCKS);
	ck_assert_int_eq(kvspeer_fetch_submit(c, &f, &fh), 0);
	wait_held(&s);
	ck_assert_int_eq(kvspeer_mem_unregister(s.kp, s.mem), -EBUSY);
	release(&s);
	ck_assert_int_eq(kvspeer_fetch_wait(fh, &err), (int)NBLOCKS);
	kvspeer_fetch_unref(fh);
	STAT_WAIT(s.kp, locks_held, 0);
	/* A host that reports a range outside registered memory: the prefix ends there. */
	s.bad_block = 5;
	fparams(&f, s.addr, NBLOCKS);
	ck_assert_int_eq(kvspeer_fetch(c, &f, &err), 5);
	for (uint32_t i = 0; i < SHARD; i++)
		ck_assert_uint_ne(dst[5][i], 0xee);
	kvspeer_stats(s.kp, &st);
	ck_assert_uint_eq(st.serve_fail[KVSPEER_FAIL_HOST], 1);
	ck_assert_int_eq(STAT_WAIT(s.kp, locks_held, 0), 0);
	ck_assert_int_eq(atomic_load(&s.pins), 0);
	s.bad_block = -1;
	/* A host whose lock() fails: nothing, the reason from the peer. */
	s.lock_error = -EIO;
	fparams(&f, s.addr, NBLOCKS);
	ck_assert_int_eq(kvspeer_fetch(c, &f, &err), 0);
	ck_assert_int_eq(err, -EREMOTEIO);
	s.lock_error = 0;
	ck_assert_int_eq(kvspeer_mem_unregister(s.kp, s.mem), 0);
	/* Nothing registered: nothing served. */
	fparams(&f, s.addr, NBLOCKS);
	ck_assert_int_eq(kvspeer_fetch(c, &f, &err), 0);
	ck_assert_int_eq(kvspeer_mem_register(s.kp, s.mem, (size_t)NBLOCKS * SHARD), 0);
	kvspeer_free(c);
	srv_stop(&s);
}
END_TEST

static _Atomic int free_n = -100, free_err = -100;

static void free_cb(void *arg, struct kvspeer_fetch *f, int n)
{
	int err = 0;

	atomic_store(&free_n, n);
	kvspeer_fetch_result(f, &err);
	atomic_store(&free_err, err);
}

START_TEST(test_free_completes_fetches)
{
	struct srv s;
	struct kvspeer *c;
	struct kvspeer_fetch_params f;
	struct kvspeer_fetch *fh;
	int err;

	srv_start(&s);
	c = client();
	s.hold = true;
	fparams(&f, s.addr, NBLOCKS);
	f.done = free_cb;
	ck_assert_int_eq(kvspeer_fetch_submit(c, &f, &fh), 0);
	wait_held(&s);
	kvspeer_free(c); /* with the fetch mid-transfer */
	ck_assert_int_eq(atomic_load(&free_n), 0);
	ck_assert_int_eq(atomic_load(&free_err), -ESHUTDOWN);
	ck_assert_int_eq(kvspeer_fetch_result(fh, &err), 0);
	kvspeer_fetch_unref(fh);
	release(&s);
	/* The server sees the connection go and drops the lock. */
	ck_assert_int_eq(STAT_WAIT(s.kp, locks_held, 0), 0);
	ck_assert_int_eq(STAT_WAIT(s.kp, locks_dropped, 1), 1);
	srv_stop(&s);
}
END_TEST

START_TEST(test_health_peers_refused)
{
	struct srv s;
	struct kvspeer *c;
	struct kvspeer_health h;
	struct kvspeer_peer_info pi[4];
	struct kvspeer_fetch_params f;
	int err, n;

	srv_start(&s);
	c = client();
	kvspeer_set_epoch(s.kp, 42);
	ck_assert_int_eq(kvspeer_health(c, s.addr, 5000, &h), 0);
	ck_assert_str_eq(h.node, "srv");
	ck_assert_uint_eq(h.epoch, 42);
	ck_assert_uint_eq(h.transport, KVSPEER_TRANSPORT_TCP);
	n = kvspeer_peers(c, pi, 4);
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(pi[0].addr, s.addr);
	ck_assert_str_eq(pi[0].node, "srv");
	ck_assert_uint_eq(pi[0].role, KVSPEER_PEER_SERVER);
	ck_assert_uint_eq(pi[0].epoch, 42);
	n = kvspeer_peers(s.kp, pi, 4);
	ck_assert_int_eq(n, 1);
	ck_assert_uint_eq(pi[0].role, KVSPEER_PEER_CLIENT);
	ck_assert_str_eq(pi[0].node, "cli");
	ck_assert_int_eq(kvspeer_peers(s.kp, NULL, 0), 1);
	/* Nobody listens there. */
	fparams(&f, "127.0.0.1:1", 4);
	ck_assert_int_eq(kvspeer_fetch(c, &f, &err), 0);
	ck_assert_int_eq(err, -ECONNREFUSED);
	n = kvspeer_peers(c, pi, 4);
	ck_assert_int_eq(n, 2);
	ck_assert_uint_eq(pi[1].state, KVSPEER_PEER_FAILED);
	ck_assert_int_eq(pi[1].last_error, -ECONNREFUSED);
	/* Bad fetch parameters. */
	fparams(&f, "nowhere", 4);
	ck_assert_int_eq(kvspeer_fetch(c, &f, &err), -EINVAL);
	fparams(&f, s.addr, KVSPEER_MAX_KEYS + 1);
	ck_assert_int_eq(kvspeer_fetch(c, &f, &err), -EINVAL);
	fparams(&f, s.addr, 4);
	f.timeout_ms = 0;
	ck_assert_int_eq(kvspeer_fetch(c, &f, &err), -EINVAL);
	kvspeer_free(c);
	srv_stop(&s);
}
END_TEST

/*
 * kvspeer_kvstash_ns(): a slot-sized shard (rounded to 512), a digest that
 * changes with every part of the geometry and not without, -EINVAL on
 * bad input with the outputs untouched.  That the digest is kvstashd's is
 * tests/cluster/test-cluster-embedded's (a kvstashd fetches by it).
 */
START_TEST(test_kvstash_ns)
{
	struct kvspeer_kvstash_layer l[3] = { { 2, 0, 100 }, { 2, 0, 100 }, { 1, 0, 56 } };
	struct kvspeer_kvstash_ns ns = { "model/a", 2, 0, 3, l }, o;
	uint8_t d0[KVSPEER_DIGEST_SIZE], d[KVSPEER_DIGEST_SIZE], zero[16] = { 0 };
	uint64_t shard = 0, untouched = 7;

	ck_assert_int_eq(kvspeer_kvstash_ns(&ns, d0, &shard), 0);
	ck_assert_uint_eq(shard, 512);	     /* 456 bytes of layers, one slot of 512 */
	ck_assert_mem_eq(d0 + 16, zero, 16); /* the registry's 16 bytes, zero-padded */
	ck_assert_int_eq(kvspeer_kvstash_ns(&ns, d, NULL), 0);
	ck_assert_mem_eq(d, d0, sizeof(d));
	/* Every part of the geometry changes the digest. */
	o = ns;
	o.name = "model/b";
	ck_assert_int_eq(kvspeer_kvstash_ns(&o, d, NULL), 0);
	ck_assert_int_ne(memcmp(d, d0, sizeof(d)), 0);
	o = ns;
	o.tp_size = 4;
	ck_assert_int_eq(kvspeer_kvstash_ns(&o, d, NULL), 0);
	ck_assert_int_ne(memcmp(d, d0, sizeof(d)), 0);
	o = ns;
	o.replicated = 1;
	ck_assert_int_eq(kvspeer_kvstash_ns(&o, d, NULL), 0);
	ck_assert_int_ne(memcmp(d, d0, sizeof(d)), 0);
	o = ns;
	o.nr_layers = 2;
	ck_assert_int_eq(kvspeer_kvstash_ns(&o, d, &shard), 0);
	ck_assert_uint_eq(shard, 512);
	ck_assert_int_ne(memcmp(d, d0, sizeof(d)), 0);
	l[2].segment_bytes = 64;
	ck_assert_int_eq(kvspeer_kvstash_ns(&ns, d, &shard), 0);
	ck_assert_int_ne(memcmp(d, d0, sizeof(d)), 0);
	l[2].segment_bytes = 56;
	/* Bad input: -EINVAL, outputs untouched. */
	memset(d, 0xee, sizeof(d));
	o = ns;
	o.name = "";
	ck_assert_int_eq(kvspeer_kvstash_ns(&o, d, &untouched), -EINVAL);
	o = ns;
	o.name = NULL;
	ck_assert_int_eq(kvspeer_kvstash_ns(&o, d, &untouched), -EINVAL);
	o = ns;
	o.tp_size = 0;
	ck_assert_int_eq(kvspeer_kvstash_ns(&o, d, &untouched), -EINVAL);
	o = ns;
	o.nr_layers = 0;
	ck_assert_int_eq(kvspeer_kvstash_ns(&o, d, &untouched), -EINVAL);
	o = ns;
	o.replicated = 2;
	ck_assert_int_eq(kvspeer_kvstash_ns(&o, d, &untouched), -EINVAL);
	l[1].segments = 3;
	ck_assert_int_eq(kvspeer_kvstash_ns(&ns, d, &untouched), -EINVAL);
	l[1].segments = 2;
	l[1].resv = 1;
	ck_assert_int_eq(kvspeer_kvstash_ns(&ns, d, &untouched), -EINVAL);
	l[1].resv = 0;
	l[1].segment_bytes = 0;
	ck_assert_int_eq(kvspeer_kvstash_ns(&ns, d, &untouched), -EINVAL);
	l[1].segment_bytes = 1ull << 50;
	ck_assert_int_eq(kvspeer_kvstash_ns(&ns, d, &untouched), -EINVAL);
	ck_assert_int_eq(kvspeer_kvstash_ns(NULL, d, &untouched), -EINVAL);
	ck_assert_uint_eq(untouched, 7);
	for (unsigned i = 0; i < sizeof(d); i++)
		ck_assert_uint_eq(d[i], 0xee);
}
END_TEST

/*
 * Many fetches at once to a peer with no conn yet: the client opens them
 * within the limits a peer configured alike sets on one host (handshakes:
 * max_unauth_per_peer, connections: max_conns_per_peer), the rest wait for
 * a conn, and every fetch completes whole, none refused.
 */
#define COLD_FETCHES 40

START_TEST(test_cold_fetches_within_limits)
{
	struct kvspeer_fetch *fh[COLD_FETCHES];
	struct kvspeer_fetch_params f;
	struct kvspeer_stats st;
	struct kvspeer *c;
	struct srv s;

	srv_start(&s);
	c = client();
	fparams(&f, s.addr, NBLOCKS);
	for (int i = 0; i < COLD_FETCHES; i++)
		ck_assert_int_eq(kvspeer_fetch_submit(c, &f, &fh[i]), 0);
	for (int i = 0; i < COLD_FETCHES; i++) {
		int err = -1;

		ck_assert_int_eq(kvspeer_fetch_wait(fh[i], &err), (int)NBLOCKS);
		ck_assert_int_eq(err, 0);
		kvspeer_fetch_unref(fh[i]);
	}
	for (uint32_t b = 0; b < NBLOCKS; b++)
		for (uint32_t i = 0; i < SHARD; i++)
			ck_assert_uint_eq(dst[b][i], b + 1);
	kvspeer_stats(c, &st);
	ck_assert_uint_eq(st.fetches_full, COLD_FETCHES);
	kvspeer_stats(s.kp, &st);
	ck_assert_uint_eq(st.refused_host_conns, 0);
	ck_assert_uint_eq(st.refused_host_unauth, 0);
	ck_assert_uint_eq(st.serve_fail[KVSPEER_FAIL_LIMIT], 0);
	ck_assert_uint_eq(st.serve_blocks, (uint64_t)COLD_FETCHES * NBLOCKS);
	kvspeer_free(c);
	srv_stop(&s);
}
END_TEST

/* Each test gets a cluster secret file of its own. */
static void setup(void)
{
	static const char secret[] = "an api test secret of 32+ bytes.\n";
	int fd;

	strcpy(secret_path, SECRET_TEMPLATE);
	fd = mkstemp(secret_path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, secret, sizeof(secret) - 1), (ssize_t)(sizeof(secret) - 1));
	close(fd);
}

static void teardown(void)
{
	unlink(secret_path);
}

UNIT_TESTS(test_params, test_fetch_and_stats, test_join, test_no_waiting_in_callbacks,
	   test_registered_memory, test_free_completes_fetches, test_health_peers_refused,
	   test_kvstash_ns, test_cold_fetches_within_limits)

const struct unit_suite unit_suite = {
	.name = "peer-api",
	.setup = setup,
	.teardown = teardown,
	.timeout_s = 60,
	.add_tests = add_tests,
};
