/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "tools/gpu/gpu.h"

extern const unsigned char gpu_test_fatbin[];

static struct {
	PFN_cuModuleLoadData_v2000 load;
	PFN_cuModuleGetFunction_v2000 get;
	PFN_cuLaunchKernel_v4000 launch;
	CUfunction fill, fill_blocks, check, count_ne, spin;
	unsigned long long *counter; /* device */
	float *scratch;
} G;

#define CK(call)                                                                     \
	do {                                                                         \
		cudaError_t e_ = (call);                                             \
		if (e_ != cudaSuccess) {                                             \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				cudaGetErrorString(e_));                             \
			return -EIO;                                                 \
		}                                                                    \
	} while (0)

static int entry(const char *name, void **fn)
{
	enum cudaDriverEntryPointQueryResult q;

	if (cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess)
		return -ENOSYS;
	return 0;
}

int gpu_init(void)
{
	CUmodule mod;
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		fprintf(stderr, "no CUDA device: skipping\n");
		return 77;
	}
	CK(cudaSetDevice(0));
	if (entry("cuModuleLoadData", (void **)&G.load) || entry("cuModuleGetFunction", (void **)&G.get) ||
	    entry("cuLaunchKernel", (void **)&G.launch))
		return -ENOSYS;
	if (G.load(&mod, gpu_test_fatbin) != CUDA_SUCCESS ||
	    G.get(&G.fill, mod, "t_fill") != CUDA_SUCCESS ||
	    G.get(&G.fill_blocks, mod, "t_fill_blocks") != CUDA_SUCCESS ||
	    G.get(&G.check, mod, "t_check") != CUDA_SUCCESS ||
	    G.get(&G.count_ne, mod, "t_count_ne") != CUDA_SUCCESS ||
	    G.get(&G.spin, mod, "t_spin") != CUDA_SUCCESS) {
		fprintf(stderr, "cannot load the test kernels\n");
		return -EIO;
	}
	CK(cudaMalloc((void **)&G.counter, sizeof(*G.counter)));
	CK(cudaMalloc((void **)&G.scratch, 4096));
	return 0;
}

int gpu_uuid(uint8_t uuid[16])
{
	struct cudaDeviceProp p;

	CK(cudaGetDeviceProperties(&p, 0));
	memcpy(uuid, p.uuid.bytes, 16);
	return 0;
}

uint64_t gpu_free_mem(void)
{
	size_t f = 0, t = 0;

	cudaMemGetInfo(&f, &t);
	return f;
}

static int launch_on(void *stream, CUfunction f, unsigned grid, unsigned block, void **params)
{
	if (G.launch(f, grid, 1, 1, block, 1, 1, 0, (CUstream)stream, params, NULL) !=
	    CUDA_SUCCESS) {
		fprintf(stderr, "kernel launch failed\n");
		return -EIO;
	}
	return 0;
}

static int launch(CUfunction f, unsigned grid, unsigned block, void **params)
{
	return launch_on(NULL, f, grid, block, params);
}

static unsigned grid_for(uint64_t n)
{
	uint64_t g = (n + 255) / 256;

	return (unsigned)(g > 1024 ? 1024 : g ? g : 1);
}

int gpu_fill(uint64_t dptr, uint64_t bytes, uint64_t seed)
{
	unsigned long long n8 = bytes / 8, s = seed;
	void *p = (void *)(uintptr_t)dptr, *params[] = { &p, &n8, &s };

	return launch(G.fill, grid_for(n8), 256, params);
}

long long gpu_check(uint64_t dptr, uint64_t bytes, uint64_t seed)
{
	unsigned long long n8 = bytes / 8, s = seed, bad = 0;
	void *p = (void *)(uintptr_t)dptr, *params[] = { &p, &n8, &s, &G.counter };

	CK(cudaMemset(G.counter, 0, sizeof(*G.counter)));
	if (launch(G.check, grid_for(n8), 256, params))
		return -EIO;
	CK(cudaMemcpy(&bad, G.counter, sizeof(bad), cudaMemcpyDeviceToHost));
	return (long long)bad;
}

int gpu_poison(uint64_t dptr, uint64_t bytes, uint8_t v)
{
	CK(cudaMemset((void *)(uintptr_t)dptr, v, bytes));
	return 0;
}

long long gpu_count_ne(uint64_t dptr, uint64_t bytes, uint8_t v)
{
	unsigned long long n = bytes, bad = 0;
	unsigned int vv = v;
	void *p = (void *)(uintptr_t)dptr, *params[] = { &p, &n, &vv, &G.counter };

	CK(cudaMemset(G.counter, 0, sizeof(*G.counter)));
	if (launch(G.count_ne, grid_for(n), 256, params))
		return -EIO;
	CK(cudaMemcpy(&bad, G.counter, sizeof(bad), cudaMemcpyDeviceToHost));
	return (long long)bad;
}

int gpu_sync(void)
{
	CK(cudaDeviceSynchronize());
	return 0;
}

int gpu_spin(unsigned ctas, int iters)
{
	return gpu_spin_on(NULL, ctas, iters);
}

int gpu_spin_on(void *stream, unsigned ctas, int iters)
{
	void *params[] = { &G.scratch, &iters };

	return launch_on(stream, G.spin, ctas, 256, params);
}

int gpu_fill_on(void *stream, uint64_t dptr, uint64_t bytes, uint64_t seed)
{
	unsigned long long n8 = bytes / 8, s = seed;
	void *p = (void *)(uintptr_t)dptr, *params[] = { &p, &n8, &s };

	return launch_on(stream, G.fill, grid_for(n8), 256, params);
}

int gpu_check_on(void *stream, uint64_t dptr, uint64_t bytes, uint64_t seed,
		 unsigned long long *dev_bad)
{
	unsigned long long n8 = bytes / 8, s = seed;
	void *p = (void *)(uintptr_t)dptr, *params[] = { &p, &n8, &s, &dev_bad };

	return launch_on(stream, G.check, grid_for(n8), 256, params);
}

int gpu_count_ne_on(void *stream, uint64_t dptr, uint64_t bytes, uint8_t v,
		    unsigned long long *dev_bad)
{
	unsigned long long n = bytes;
	unsigned int vv = v;
	void *p = (void *)(uintptr_t)dptr, *params[] = { &p, &n, &vv, &dev_bad };

	return launch_on(stream, G.count_ne, grid_for(n), 256, params);
}

/* ---- layouts --------------------------------------------------------- */

int gpu_kv_alloc(struct gpu_kv *kv, enum gpu_layout layout, uint32_t mem_kind, unsigned layers,
		 unsigned blocks, uint64_t seg)
{
	memset(kv, 0, sizeof(*kv));
	kv->layout = layout;
	kv->mem_kind = mem_kind;
	kv->layers = layers;
	kv->blocks = blocks;
	kv->seg = seg;
	if (layers == 0 || layers > 128)
		return -EINVAL;
	kv->narenas = layout == GPU_PAGE_FIRST ? 1 : layers;
	for (unsigned a = 0; a < kv->narenas; a++) {
		uint64_t size = layout == GPU_PAGE_FIRST ? (uint64_t)layers * seg * blocks :
			       layout == GPU_SPLIT_KV	 ? 2 * seg * blocks :
							   seg * blocks;
		int r = kvs_cuda_arena_alloc(0, size, mem_kind, &kv->arenas[a]);

		if (r < 0) {
			fprintf(stderr, "arena of %llu bytes: %s\n", (unsigned long long)size,
				kvs_strerror(r));
			gpu_kv_free(kv);
			return r;
		}
	}
	for (unsigned l = 0; l < layers; l++) {
		struct kvs_cuda_layer *y = &kv->lays[l];

		snprintf(kv->names[l], sizeof(kv->names[l]), "model.layers.%u.attn", l);
		y->name = kv->names[l];
		y->num_blocks = blocks;
		y->segment_bytes = seg;
		switch (layout) {
		case GPU_PAGE_FIRST:
			y->base = kv->arenas[0].dptr + (uint64_t)l * seg;
			y->segments = 1;
			y->block_stride = (uint64_t)layers * seg;
			break;
		case GPU_SPLIT_KV:
			y->base = kv->arenas[l].dptr;
			y->segments = 2;
			y->kv_stride = (uint64_t)blocks * seg;
			y->block_stride = seg;
			break;
		case GPU_MLA:
			y->base = kv->arenas[l].dptr;
			y->segments = 1;
			y->block_stride = seg;
			break;
		}
	}
	return 0;
}

void gpu_kv_free(struct gpu_kv *kv)
{
	for (unsigned a = 0; a < kv->narenas; a++)
		kvs_cuda_arena_free(&kv->arenas[a]);
	kv->narenas = 0;
}

int gpu_kv_register(struct kvs_client *c, struct gpu_kv *kv)
{
	return kvs_register_cuda(c, kv->lays, kv->layers,
				 kv->layout == GPU_MLA ? KVS_REGISTER_REPLICATED : 0);
}

unsigned gpu_kv_segments(const struct gpu_kv *kv)
{
	return kv->layout == GPU_SPLIT_KV ? 2 : 1;
}

uint64_t gpu_kv_seg(const struct gpu_kv *kv, unsigned l, unsigned b, unsigned s)
{
	const struct kvs_cuda_layer *y = &kv->lays[l];

	return y->base + (uint64_t)b * y->block_stride + (uint64_t)s * y->kv_stride;
}

static uint64_t seg_seed(uint64_t seed, unsigned l, unsigned s)
{
	return seed * 1000003u + l * 7919u + s;
}

int gpu_kv_fill(struct gpu_kv *kv, unsigned b, uint64_t seed)
{
	for (unsigned l = 0; l < kv->layers; l++)
		for (unsigned s = 0; s < gpu_kv_segments(kv); s++)
			if (gpu_fill(gpu_kv_seg(kv, l, b, s), kv->seg, seg_seed(seed, l, s)))
				return -EIO;
	return 0;
}

long long gpu_kv_check(struct gpu_kv *kv, unsigned b, uint64_t seed, unsigned l0, unsigned n)
{
	long long bad = 0;

	for (unsigned l = l0; l < l0 + n; l++)
		for (unsigned s = 0; s < gpu_kv_segments(kv); s++) {
			long long r = gpu_check(gpu_kv_seg(kv, l, b, s), kv->seg, seg_seed(seed, l, s));

			if (r < 0)
				return r;
			bad += r;
		}
	return bad;
}

int gpu_kv_fill_on(void *stream, struct gpu_kv *kv, unsigned b, uint64_t seed)
{
	for (unsigned l = 0; l < kv->layers; l++)
		for (unsigned s = 0; s < gpu_kv_segments(kv); s++)
			if (gpu_fill_on(stream, gpu_kv_seg(kv, l, b, s), kv->seg, seg_seed(seed, l, s)))
				return -EIO;
	return 0;
}

#define FILL_IDS 64 /* kernels.cu's T_FILL_IDS */

int gpu_kv_fill_blocks_on(void *stream, struct gpu_kv *kv, const uint32_t *blocks, unsigned n,
			  uint64_t seed0)
{
	struct {
		uint32_t b[FILL_IDS];
	} ids;
	unsigned int nseg = gpu_kv_segments(kv);
	unsigned long long n8 = kv->seg / 8;

	for (unsigned first = 0; first < n; first += FILL_IDS) {
		unsigned m = n - first < FILL_IDS ? n - first : FILL_IDS;

		memset(&ids, 0, sizeof(ids));
		memcpy(ids.b, blocks + first, m * sizeof(*blocks));
		for (unsigned int l = 0; l < kv->layers; l++) {
			const struct kvs_cuda_layer *y = &kv->lays[l];
			unsigned long long base = y->base, bs = y->block_stride, ks = y->kv_stride;
			unsigned long long s0 = seed0 + first;
			void *params[] = { &base, &bs, &ks, &nseg, &n8, &l, &s0, &ids };

			if (G.launch(G.fill_blocks, grid_for(n8), m * nseg, 1, 256, 1, 1, 0,
				     (CUstream)stream, params, NULL) != CUDA_SUCCESS) {
				fprintf(stderr, "kernel launch failed\n");
				return -EIO;
			}
		}
	}
	return 0;
}

int gpu_kv_check_layer_on(void *stream, struct gpu_kv *kv, unsigned b, uint64_t seed, unsigned l,
			  unsigned long long *dev_bad)
{
	for (unsigned s = 0; s < gpu_kv_segments(kv); s++)
		if (gpu_check_on(stream, gpu_kv_seg(kv, l, b, s), kv->seg, seg_seed(seed, l, s),
				 dev_bad))
			return -EIO;
	return 0;
}

int gpu_kv_poison(struct gpu_kv *kv, unsigned b, uint8_t v)
{
	for (unsigned l = 0; l < kv->layers; l++)
		for (unsigned s = 0; s < gpu_kv_segments(kv); s++)
			if (gpu_poison(gpu_kv_seg(kv, l, b, s), kv->seg, v))
				return -EIO;
	return 0;
}

long long gpu_kv_count_ne(struct gpu_kv *kv, unsigned b, uint8_t v)
{
	long long bad = 0;

	for (unsigned l = 0; l < kv->layers; l++)
		for (unsigned s = 0; s < gpu_kv_segments(kv); s++) {
			long long r = gpu_count_ne(gpu_kv_seg(kv, l, b, s), kv->seg, v);

			if (r < 0)
				return r;
			bad += r;
		}
	return bad;
}
