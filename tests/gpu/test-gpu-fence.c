/* SPDX-License-Identifier: MIT */
/*
 * Stream ordering on the GPU (KVS_CONNECT_FENCES), the engine's host
 * thread never synchronizing for kvstash:
 *  1. SAVE AFTER: on one stream a long compute kernel, a gate that holds
 *     the stream until the SAVE has been submitted, then kernels that
 *     write the blocks' KV (over poison), then the signal and the SAVE
 *     (kvs_prep_save_stream()); the saved bytes are the kernels' (a copy
 *     made when the SAVE arrived would have stored the poison);
 *  2. LOAD PROGRESS into poisoned blocks, split K/V and page-first: per
 *     layer a wait, then a kernel that checks that layer's bytes on the
 *     GPU; every layer passes and the slot's status reads 0 on the GPU;
 *  3. a refused LOAD PROGRESS (no such lease) releases the stream's waits
 *     and its status reads non-zero on the GPU;
 *  4. kvstashd stopped, and then killed mid-copy, under a LOAD PROGRESS
 *     with waits queued: the stream finishes within a bound;
 *  5. a SAVE AFTER whose signal never comes does not hold up another
 *     session on the same GPU, and fails with -ETIMEDOUT.
 * A stream that does not finish within its bound fails the test.  Exits
 * 77 without a GPU.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "common.h"

#define LAYERS	   16u
#define SEG	   (32u << 10) /* vLLM's flash-attention segment */
#define BLOCKS	   1024u       /* 16 x 2 x 32 KiB = 1 MiB a block */
#define N	   64u
#define BIG	   512u
#define SPIN_ITERS 20000000 /* tens of ms on one CTA */
#define WAIT_MS	   1500u
#define BOUND_MS   20000

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/*
 * A host function on a stream that holds it until *@arg is set (or 10 s
 * have passed): the writes behind it cannot run before the test says so,
 * however fast the GPU runs the kernels before it.
 */
static void CUDART_CB gate(void *arg)
{
	double t0 = now_ms();

	while (!__atomic_load_n((int *)arg, __ATOMIC_ACQUIRE) && now_ms() - t0 < 10000)
		usleep(100);
}

/* Wait for @s, but not for ever: a stream still waiting after @ms fails the test. */
static void stream_done_within(cudaStream_t s, int ms, const char *what)
{
	double t0 = now_ms();
	cudaError_t e;

	while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
		CHECK(now_ms() - t0 < ms, "%s: the stream still waits after %d ms", what, ms);
		usleep(200);
	}
	CHECK(e == cudaSuccess, "%s: %s", what, cudaGetErrorString(e));
}

static struct kvs_client *connect_fenced(const struct kvsd *d, const char *instance,
					 struct gpu_kv *kv, enum gpu_layout layout)
{
	struct kvs_connect_opts o;
	struct kvs_client *c;
	int r;

	CHECK(gpu_kv_alloc(kv, layout, KVS_MEM_CUDA_VMM_FD, LAYERS, BLOCKS, SEG) == 0, "alloc");
	kvs_connect_opts_init(&o);
	o.instance = instance;
	o.ns = layout == GPU_PAGE_FIRST ? "gpu-fence/pf" : "gpu-fence/split";
	o.device_kind = KVS_DEVICE_CUDA;
	o.flags = KVS_CONNECT_FENCES;
	o.timeout_ms = 30000;
	CHECK(gpu_uuid(o.device_uuid) == 0, "uuid");
	r = kvs_connect(d->sock, &o, &c);
	CHECK(r == 0, "connect %s: %s", instance, kvs_strerror(r));
	CHECK(gpu_kv_register(c, kv) == 0, "register");
	return c;
}

static struct kvs_cqe wait_cqe(struct kvs_client *c)
{
	struct kvs_cqe e;
	int r = test_wait_cqe(c, BOUND_MS, &e);

	CHECK(r == 0, "wait: %s", kvs_strerror(r));
	return e;
}

static void ids_from(uint32_t *ids, unsigned n, uint32_t first)
{
	for (unsigned i = 0; i < n; i++)
		ids[i] = first + i;
}

static void save_after_stream(const struct kvsd *d, cudaStream_t s)
{
	static uint8_t keys[N * 16];
	uint32_t src[N], dst[N];
	struct gpu_kv kv;
	struct kvs_client *c = connect_fenced(d, "fence-save", &kv, GPU_SPLIT_KV);
	struct kvs_sqe *sqe;
	struct kvs_cqe e;
	uint64_t lease = 0;
	double t0, t_host;
	cudaError_t q;
	static int gate_open;

	test_keys(keys, N, 101);
	permute(src, N, 7);
	ids_from(dst, N, N);
	for (unsigned i = 0; i < N; i++) {
		CHECK(gpu_kv_poison(&kv, src[i], 0xa5) == 0, "poison");
		CHECK(gpu_kv_poison(&kv, dst[i], 0x5a) == 0, "poison");
	}
	CHECK(gpu_sync() == 0, "sync");
	t0 = now_ms();
	/* The forward pass that is still running, then the KV it writes. */
	CHECK(gpu_spin_on(s, 1, SPIN_ITERS) == 0, "spin");
	__atomic_store_n(&gate_open, 0, __ATOMIC_RELEASE);
	CHECK(cudaLaunchHostFunc(s, gate, &gate_open) == cudaSuccess, "gate");
	CHECK(gpu_kv_fill_blocks_on(s, &kv, src, N, 500) == 0, "fill");
	q = cudaStreamQuery(s);
	CHECK(q == cudaErrorNotReady,
	      "the writer's stream finished %.1f ms after its first kernel, before the SAVE was "
	      "prepared (%s)",
	      now_ms() - t0, cudaGetErrorString(q));
	t_host = now_ms();
	sqe = kvs_get_sqe(c);
	CHECK(sqe, "sqe");
	CHECK(kvs_prep_save_stream(c, sqe, keys, src, N, s, 1) == 0, "prep SAVE on the stream");
	CHECK(kvs_submit(c) == 1, "submit");
	t_host = now_ms() - t_host;
	q = cudaStreamQuery(s);
	CHECK(q == cudaErrorNotReady,
	      "the writer's stream is not held at its gate once the SAVE is submitted (%s, %.1f ms "
	      "to prepare and submit, %.1f ms after the first kernel): the test proves nothing",
	      cudaGetErrorString(q), t_host, now_ms() - t0);
	/* Pairs with the load in gate(): the KV is written from here on. */
	__atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
	e = wait_cqe(c);
	CHECK(e.res == (int)N, "SAVE on the stream: %d", e.res);
	printf("  SAVE after a stream: %u blocks, %.3f ms of host time to prepare, signal and "
	       "submit, CQE %.1f ms after the writer's first kernel\n",
	       N, t_host, now_ms() - t0);
	stream_done_within(s, BOUND_MS, "the writer stream");
	CHECK(kvs_query_sync(c, keys, N, 1, 0, BOUND_MS, &lease) == (int)N, "query");
	CHECK(kvs_load_sync(c, lease, dst, N, 0, 0, BOUND_MS) == (int)N, "load");
	for (unsigned i = 0; i < N; i++) {
		long long bad = gpu_kv_check(&kv, dst[i], 500 + i, 0, LAYERS);

		CHECK(bad == 0, "block %u: %lld words are not the kernel's", i, bad);
	}
	kvs_close(c);
	gpu_kv_free(&kv);
	printf("ok - a SAVE after a stream stores what the stream's kernels wrote\n");
}

/*
 * A LOAD PROGRESS of @lease into @dst and, on @s, per layer a wait and
 * the check of that layer of every block into bad[0]; after the last
 * layer the slot's status bytes that are not zero into bad[1].
 */
static void queue_layer_checks(struct kvs_client *c, struct gpu_kv *kv, uint64_t lease,
			       const uint32_t *dst, unsigned n, uint64_t seed0, cudaStream_t s,
			       unsigned long long *bad, bool checks, struct kvs_fence_ref *ret)
{
	struct kvs_sqe *sqe = kvs_get_sqe(c);
	uint64_t fptr = 0;

	CHECK(sqe, "sqe");
	CHECK(kvs_prep_load_progress(c, sqe, lease, dst, n, 0, LAYERS, ret, 2) == 0,
	      "prep LOAD PROGRESS");
	CHECK(kvs_submit(c) == 1, "submit");
	CHECK(cudaMemsetAsync(bad, 0, 2 * sizeof(*bad), s) == cudaSuccess, "memset");
	for (unsigned l = 0; l < LAYERS; l++) {
		CHECK(kvs_fence_wait(c, ret, l, s) == 0, "wait for layer %u", l);
		for (unsigned i = 0; checks && i < n; i++)
			CHECK(gpu_kv_check_layer_on(s, kv, dst[i], seed0 + i, l, &bad[0]) == 0,
			      "check");
	}
	CHECK(kvs_fence_device_ptr(c, ret, &fptr) == 0, "device pointer");
	CHECK(gpu_count_ne_on(s, fptr + offsetof(struct kvs_fence, status), 4, 0, &bad[1]) == 0,
	      "status check");
}

static void load_progress(const struct kvsd *d, cudaStream_t s, enum gpu_layout layout,
			  unsigned long long *bad)
{
	static uint8_t keys[N * 16];
	uint32_t src[N], dst[N];
	unsigned long long h[2];
	struct kvs_fence_ref f;
	struct gpu_kv kv;
	struct kvs_client *c = connect_fenced(
		d, layout == GPU_PAGE_FIRST ? "fence-load-pf" : "fence-load-split", &kv, layout);
	const char *name = layout == GPU_PAGE_FIRST ? "page-first" : "split K/V";
	uint64_t lease = 0;
	struct kvs_cqe e;
	double t0;

	test_keys(keys, N, layout == GPU_PAGE_FIRST ? 201 : 202);
	ids_from(src, N, 0);
	permute(dst, N, 11);
	for (unsigned i = 0; i < N; i++) {
		dst[i] += N;
		CHECK(gpu_kv_fill(&kv, src[i], 700 + i) == 0, "fill");
		CHECK(gpu_kv_poison(&kv, dst[i], 0x5a) == 0, "poison");
	}
	CHECK(gpu_sync() == 0, "sync");
	CHECK(kvs_save_sync(c, keys, src, N, BOUND_MS, NULL, NULL) == (int)N, "save");
	CHECK(kvs_query_sync(c, keys, N, 1, 0, BOUND_MS, &lease) == (int)N, "query");
	t0 = now_ms();
	queue_layer_checks(c, &kv, lease, dst, N, 700, s, bad, true, &f);
	stream_done_within(s, BOUND_MS, "the consumer stream");
	CHECK(cudaMemcpy(h, bad, sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess, "copy");
	e = wait_cqe(c);
	CHECK(e.res == (int)N, "LOAD PROGRESS: %d", e.res);
	CHECK(h[0] == 0, "%s: %llu words differ when the layer's kernel ran", name, h[0]);
	CHECK(h[1] == 0, "%s: status non-zero on the GPU", name);
	printf("  %s: %u blocks x %u layers checked layer by layer on the GPU, %.2f ms\n", name, N,
	       LAYERS, now_ms() - t0);
	kvs_close(c);
	gpu_kv_free(&kv);
	printf("ok - %s: each layer's kernel, after its wait, sees its layer's bytes\n", name);
}

static void load_refused(const struct kvsd *d, cudaStream_t s, unsigned long long *bad)
{
	uint32_t dst[N];
	unsigned long long h[2];
	struct kvs_fence_ref f;
	struct gpu_kv kv;
	struct kvs_client *c = connect_fenced(d, "fence-refused", &kv, GPU_SPLIT_KV);
	struct kvs_cqe e;

	ids_from(dst, N, 0);
	queue_layer_checks(c, &kv, 0xdead, dst, N, 0, s, bad, false, &f);
	stream_done_within(s, BOUND_MS, "the stream of a refused LOAD");
	CHECK(cudaMemcpy(h, bad, sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess, "copy");
	CHECK(h[1] != 0, "the GPU read status 0 for a refused LOAD");
	e = wait_cqe(c);
	CHECK(e.res == -ENOENT, "LOAD of no lease: %d", e.res);
	kvs_close(c);
	gpu_kv_free(&kv);
	printf("ok - a refused LOAD PROGRESS releases the stream; the GPU reads its status\n");
}

/* @stop: SIGSTOP first (the LOAD never runs); else killed @delay_us into it. */
static void daemon_dies(struct kvsd *d, cudaStream_t s, unsigned long long *bad, bool stop,
			unsigned delay_us)
{
	static uint8_t keys[BIG * 16];
	uint32_t src[BIG], dst[BIG];
	struct kvs_fence_ref f;
	struct gpu_kv kv;
	struct kvs_client *c = connect_fenced(d, "fence-death", &kv, GPU_SPLIT_KV);
	uint64_t lease = 0;
	int32_t status = 0;
	double t0;

	test_keys(keys, BIG, stop ? 301 : 302);
	ids_from(src, BIG, 0);
	ids_from(dst, BIG, BIG);
	for (unsigned i = 0; i < BIG; i++)
		CHECK(gpu_kv_fill(&kv, src[i], i) == 0, "fill");
	CHECK(gpu_sync() == 0, "sync");
	CHECK(kvs_save_sync(c, keys, src, BIG, BOUND_MS, NULL, NULL) == (int)BIG, "save");
	CHECK(kvs_query_sync(c, keys, BIG, 1, 0, BOUND_MS, &lease) == (int)BIG, "query");
	if (stop) {
		CHECK(kill(d->pid, SIGSTOP) == 0, "SIGSTOP");
		/* kill() only queues the stop: a worker still polling could run the LOAD. */
		CHECK(wait_stopped(d->pid, BOUND_MS) == 0, "kvstashd never stopped");
	}
	queue_layer_checks(c, &kv, lease, dst, BIG, 0, s, bad, false, &f);
	if (!stop)
		usleep(delay_us);
	CHECK(kill(d->pid, SIGKILL) == 0, "SIGKILL");
	t0 = now_ms();
	/* No call of the library: its watchdog thread must release the stream. */
	stream_done_within(s, BOUND_MS, "the stream after kvstashd died");
	printf("  kvstashd %s: stream released %.1f ms after SIGKILL\n",
	       stop ? "stopped, then killed" : "killed mid-LOAD", now_ms() - t0);
	/*
	 * A copy of the dying process may still land after a release and
	 * take a value back: the watchdog releases again after it, so the
	 * slot ends released, and waits queued late pass too.
	 */
	while (kvs_fence_done(c, &f, LAYERS - 1, &status, NULL) != 1)
		CHECK(now_ms() - t0 < 5000, "the fence is not released 5 s after the death");
	for (unsigned l = 0; l < LAYERS; l++)
		CHECK(kvs_fence_wait(c, &f, l, s) == 0, "a late wait");
	stream_done_within(s, BOUND_MS, "waits queued after kvstashd died");
	printf("  status %d\n", status);
	CHECK(!stop || status == -ECONNRESET, "status %d of a LOAD that never ran", status);
	kvsd_kill(d);
	CHECK(wait_cqe(c).res != 0, "no error for the LOAD after the death");
	kvs_close(c);
	gpu_kv_free(&kv);
	CHECK(kvsd_restart(d) == 0, "restart");
	printf("ok - kvstashd %s under a LOAD PROGRESS: the engine's stream finishes\n",
	       stop ? "stopped and killed" : "killed");
}

static void signal_never_comes(const struct kvsd *d)
{
	static uint8_t keys[N * 16], okeys[N * 16];
	uint32_t src[N], dst[N];
	struct kvs_fence_ref f;
	struct gpu_kv kv, okv;
	struct kvs_client *c = connect_fenced(d, "fence-stuck", &kv, GPU_SPLIT_KV);
	struct kvs_client *o = connect_fenced(d, "fence-other", &okv, GPU_SPLIT_KV);
	struct kvs_sqe *sqe;
	uint64_t lease = 0;
	double t0;

	test_keys(keys, N, 401);
	test_keys(okeys, N, 402);
	ids_from(src, N, 0);
	ids_from(dst, N, N);
	for (unsigned i = 0; i < N; i++) {
		CHECK(gpu_kv_fill(&okv, src[i], 900 + i) == 0, "fill");
		CHECK(gpu_kv_poison(&okv, dst[i], 0x5a) == 0, "poison");
	}
	CHECK(gpu_sync() == 0, "sync");
	sqe = kvs_get_sqe(c);
	CHECK(sqe, "sqe");
	CHECK(kvs_prep_save_after(c, sqe, keys, src, N, &f, 3) == 0, "prep SAVE AFTER");
	CHECK(kvs_submit(c) == 1, "submit");
	t0 = now_ms();
	CHECK(kvs_save_sync(o, okeys, src, N, BOUND_MS, NULL, NULL) == (int)N, "other SAVE");
	CHECK(kvs_query_sync(o, okeys, N, 1, 0, BOUND_MS, &lease) == (int)N, "other QUERY");
	CHECK(kvs_load_sync(o, lease, dst, N, 0, 0, BOUND_MS) == (int)N, "other LOAD");
	CHECK(now_ms() - t0 < WAIT_MS, "the other session took %.0f ms", now_ms() - t0);
	for (unsigned i = 0; i < N; i++)
		CHECK(gpu_kv_check(&okv, dst[i], 900 + i, 0, LAYERS) == 0, "other block %u", i);
	CHECK(wait_cqe(c).res == -ETIMEDOUT, "a SAVE AFTER without its signal");
	kvs_close(o);
	kvs_close(c);
	gpu_kv_free(&okv);
	gpu_kv_free(&kv);
	printf("ok - a SAVE AFTER without its signal holds up no other session, then times out\n");
}

int main(void)
{
	unsigned long long *bad = NULL;
	cudaStream_t s;
	struct kvsd d;
	char ini[96];
	int r = gpu_init();

	if (r)
		return r == 77 ? 77 : 1;
	alarm(300);
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
	CHECK(cudaMalloc((void **)&bad, 2 * sizeof(*bad)) == cudaSuccess, "counters");
	snprintf(ini, sizeof(ini),
		 "[pool]\nsize = 4G\n[cuda]\nenable = yes\n[worker]\nsave_wait_ms = %u\n", WAIT_MS);
	CHECK(kvsd_start(&d, ini) == 0, "kvstashd");
	save_after_stream(&d, s);
	load_progress(&d, s, GPU_SPLIT_KV, bad);
	load_progress(&d, s, GPU_PAGE_FIRST, bad);
	load_refused(&d, s, bad);
	signal_never_comes(&d);
	daemon_dies(&d, s, bad, true, 0);
	daemon_dies(&d, s, bad, false, 1500);
	CHECK(kvsd_finish(&d) == 0, "kvstashd exit");
	return 0;
}
