/* SPDX-License-Identifier: MIT */
/*
 * SIGKILL an engine during a large SAVE and during a large LOAD: kvstashd
 * survives, waits for the DMA it cannot cancel, closes its mappings of the
 * engine's memory (so the GPU memory is really freed: free memory returns
 * to its level before the engine started) and keeps serving another
 * session.  Exits 77 without a GPU.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define LAYERS 36
#define SEG (64u << 10)
#define BLOCKS 2048 /* 36 x 64 KiB x 2048 = 4.5 GiB of engine KV cache */
#define BATCH 512

enum phase { DIE_IN_SAVE, DIE_IN_LOAD };

/* The engine: prepares, tells the parent, submits a big op, waits to be killed. */
static int engine(const struct kvsd *d, enum phase ph, int ready)
{
	static uint8_t keys[16 * BATCH];
	uint32_t ids[BATCH];
	struct kvs_client *c;
	struct kvs_sqe *sqe;
	struct gpu_kv kv;
	uint64_t lease = 0;
	char one = 1;
	int r = gpu_init();

	if (r)
		return r;
	CHECK(gpu_kv_alloc(&kv, GPU_PAGE_FIRST, ph == DIE_IN_SAVE ? KVS_MEM_CUDA_IPC :
								   KVS_MEM_CUDA_VMM_FD,
			   LAYERS, BLOCKS, SEG) == 0, "alloc");
	r = gpu_connect(d, ph == DIE_IN_SAVE ? "victim-save" : "victim-load", "gpu-death/pf", 0, 1,
			&c);
	CHECK(r == 0, "connect");
	CHECK(gpu_kv_register(c, &kv) == 0, "register");
	for (unsigned i = 0; i < BATCH; i++) {
		ids[i] = i * 2;
		CHECK(gpu_kv_fill(&kv, ids[i], i) == 0, "fill");
	}
	CHECK(gpu_sync() == 0, "sync");
	test_keys(keys, BATCH, ph == DIE_IN_SAVE ? 11 : 22);
	if (ph == DIE_IN_LOAD) {
		CHECK(kvs_save_sync(c, keys, ids, BATCH, 60000, NULL, NULL) == BATCH, "save");
		CHECK(kvs_query_sync(c, keys, BATCH, 1, 0, 60000, &lease) == BATCH, "query");
		for (unsigned i = 0; i < BATCH; i++)
			ids[i] = i * 2 + 1;
	}
	sqe = kvs_get_sqe(c);
	CHECK(sqe, "sqe");
	if (ph == DIE_IN_SAVE)
		r = kvs_prep_save(c, sqe, keys, ids, BATCH, 1);
	else
		r = kvs_prep_load(c, sqe, lease, ids, BATCH, 0, 0, 1);
	CHECK(r == 0, "prep");
	kvs_submit(c);
	/* The copy of ~1.1 GiB takes ~20 ms: the parent kills us in the middle. */
	if (write(ready, &one, 1) != 1)
		FAIL("write");
	pause();
	return 0;
}

static int kill_engine(const struct kvsd *d, enum phase ph)
{
	int p[2], st;
	char one;
	pid_t pid;

	if (pipe(p))
		FAIL("pipe");
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		_exit(engine(d, ph, p[1]));
	}
	close(p[1]);
	if (read(p[0], &one, 1) != 1) {
		waitpid(pid, &st, 0);
		return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(p[0]);
	return 0;
}

/* Free GPU memory, measured by a short-lived process (its context goes with it). */
static uint64_t free_mem(void)
{
	int p[2], st;
	uint64_t v = 0;
	pid_t pid;

	if (pipe(p))
		FAIL("pipe");
	pid = fork();
	if (pid == 0) {
		uint64_t f = gpu_init() == 0 ? gpu_free_mem() : 0;

		if (write(p[1], &f, sizeof(f)) != sizeof(f))
			_exit(1);
		_exit(0);
	}
	close(p[1]);
	if (read(p[0], &v, sizeof(v)) != sizeof(v))
		v = 0;
	close(p[0]);
	waitpid(pid, &st, 0);
	return v;
}

static void survivor(const struct kvsd *d)
{
	int p[2], st;
	pid_t pid = fork();

	(void)p;
	if (pid == 0) {
		struct kvs_client *c;
		struct gpu_kv kv;
		uint8_t keys[16 * 4];
		uint32_t ids[4] = { 0, 1, 2, 3 }, dst[4] = { 7, 6, 5, 4 };
		uint64_t lease;

		CHECK(gpu_init() == 0, "gpu");
		CHECK(gpu_kv_alloc(&kv, GPU_PAGE_FIRST, KVS_MEM_CUDA_IPC, LAYERS, 8, SEG) == 0, "alloc");
		CHECK(gpu_connect(d, "survivor", "gpu-death/pf", 0, 1, &c) == 0, "connect");
		CHECK(gpu_kv_register(c, &kv) == 0, "register");
		for (int i = 0; i < 4; i++)
			CHECK(gpu_kv_fill(&kv, ids[i], 900 + i) == 0, "fill");
		gpu_sync();
		test_keys(keys, 4, 333);
		CHECK(kvs_save_sync(c, keys, ids, 4, 30000, NULL, NULL) == 4, "save");
		CHECK(kvs_query_sync(c, keys, 4, 1, 0, 30000, &lease) == 4, "query");
		CHECK(kvs_load_sync(c, lease, dst, 4, 0, 0, 30000) == 4, "load");
		for (int i = 0; i < 4; i++)
			CHECK(gpu_kv_check(&kv, dst[i], 900 + i, 0, LAYERS) == 0, "bytes");
		kvs_close(c);
		gpu_kv_free(&kv);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the survivor session failed");
}

int main(void)
{
	/*
	 * Far below the engine's 4.5 GiB, above what kvstashd's own context
	 * may still grow by (a kernel's local memory, copy staging).
	 */
	const uint64_t slack = 1ull << 30;
	struct kvsd d;
	uint64_t before, after = 0;

	if (system("nvidia-smi -L >/dev/null 2>&1") != 0) {
		fprintf(stderr, "no GPU: skipping\n");
		return 77;
	}
	CHECK(kvsd_start(&d, "[pool]\nsize = 4G\n[cuda]\nenable = yes\n") == 0, "start kvstashd");
	/* Warm kvstashd up first: its one-time GPU allocations are not the engine's. */
	survivor(&d);
	for (int ph = DIE_IN_SAVE; ph <= DIE_IN_LOAD; ph++) {
		before = free_mem();
		CHECK(before, "free memory");
		CHECK(kill_engine(&d, ph) == 0, "engine setup failed");
		/* Let kvstashd finish the DMA, detach and close the mappings. */
		for (int i = 0; i < 100; i++) {
			after = free_mem();
			if (after + slack >= before)
				break;
			usleep(100000);
		}
		CHECK(after + slack >= before,
		      "%s: GPU memory not freed: %llu MiB free before, %llu MiB after",
		      ph == DIE_IN_SAVE ? "save" : "load", (unsigned long long)(before >> 20),
		      (unsigned long long)(after >> 20));
		CHECK(kill(d.pid, 0) == 0, "kvstashd died");
		survivor(&d);
		printf("ok killed during %s: %llu MiB free before, %llu after\n",
		       ph == DIE_IN_SAVE ? "save" : "load", (unsigned long long)(before >> 20),
		       (unsigned long long)(after >> 20));
	}
	CHECK(kvsd_stop(&d) == 0, "kvstashd exit status");
	kvsd_cleanup(&d);
	return 0;
}
