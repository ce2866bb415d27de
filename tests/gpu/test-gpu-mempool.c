/* SPDX-License-Identifier: MIT */
/*
 * A KV cache from a stream-ordered pool (cudaMallocAsync) cannot be shared
 * between processes: registering it is refused with a clear error that
 * says what to do instead, before anything reaches kvstashd; the same
 * registration with cudaMalloc memory is accepted.  Exits 77 without a GPU.
 */
#include <errno.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common.h"

static char logbuf[4096];

static void log_cb(void *arg, int level, const char *msg)
{
	strncat(logbuf, msg, sizeof(logbuf) - strlen(logbuf) - 2);
	strcat(logbuf, "\n");
}

static int try_register(const struct kvsd *d, void *ptr, const char *inst)
{
	struct kvs_connect_opts o;
	struct kvs_client *c;
	struct kvs_cuda_layer l = {
		.name = "layer0", .base = (uint64_t)(uintptr_t)ptr, .segments = 1,
		.num_blocks = 16, .segment_bytes = 65536, .block_stride = 65536,
	};
	int r;

	kvs_connect_opts_init(&o);
	o.instance = inst;
	o.ns = "gpu-mempool";
	o.device_kind = KVS_DEVICE_CUDA;
	o.log = log_cb;
	CHECK(gpu_uuid(o.device_uuid) == 0, "uuid");
	CHECK(kvs_connect(d->sock, &o, &c) == 0, "connect");
	r = kvs_register_cuda(c, &l, 1, 0);
	kvs_close(c);
	return r;
}

int main(void)
{
	cudaStream_t st;
	void *pooled = NULL, *plain = NULL;
	struct kvsd d;
	int r = gpu_init();

	if (r)
		return r;
	CHECK(kvsd_start(&d, "[cuda]\nenable = yes\n") == 0, "start kvstashd");
	CHECK(cudaStreamCreate(&st) == cudaSuccess, "stream");
	CHECK(cudaMallocAsync(&pooled, 16 * 65536, st) == cudaSuccess, "cudaMallocAsync");
	CHECK(cudaStreamSynchronize(st) == cudaSuccess, "sync");
	r = try_register(&d, pooled, "pooled");
	CHECK(r == -EINVAL, "pool memory registered: %d", r);
	CHECK(strstr(logbuf, "stream-ordered pool") && strstr(logbuf, "cudaMalloc"),
	      "the error does not say why and what to do: %s", logbuf);
	CHECK(cudaMalloc(&plain, 16 * 65536) == cudaSuccess, "cudaMalloc");
	r = try_register(&d, plain, "plain");
	CHECK(r == 0, "cudaMalloc memory refused: %d (%s)", r, logbuf);
	cudaFreeAsync(pooled, st);
	cudaFree(plain);
	CHECK(kvsd_stop(&d) == 0, "kvstashd exit status");
	kvsd_cleanup(&d);
	printf("ok: pool memory refused with: %s", logbuf);
	return 0;
}
