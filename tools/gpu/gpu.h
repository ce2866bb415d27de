/* SPDX-License-Identifier: MIT */
/*
 * GPU side of the test "engines": CUDA runtime (static) plus the test
 * kernels of kernels.cu, and KV layouts in GPU memory.  Every call checks
 * CUDA's result; failures print and return -EIO.
 */
#ifndef KVS_TEST_GPU_H
#define KVS_TEST_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include <kvstash/kvstash.h>

/* 0, or 77 (skip) when this machine has no usable GPU. */
int gpu_init(void);
int gpu_uuid(uint8_t uuid[16]);
uint64_t gpu_free_mem(void);

int gpu_fill(uint64_t dptr, uint64_t bytes, uint64_t seed);
/* 8-byte words that differ from gpu_fill(seed), or -errno. */
long long gpu_check(uint64_t dptr, uint64_t bytes, uint64_t seed);
int gpu_poison(uint64_t dptr, uint64_t bytes, uint8_t v);
/* Bytes that differ from @v, or -errno. */
long long gpu_count_ne(uint64_t dptr, uint64_t bytes, uint8_t v);
int gpu_sync(void);
/* A compute-bound kernel of @iters iterations on @ctas x 256 threads. */
int gpu_spin(unsigned ctas, int iters);

/*
 * The same kernels on @stream (a cudaStream_t; NULL: the legacy default
 * stream), waited for by nothing: the checks add what differs to the
 * device counter @dev_bad.
 */
int gpu_spin_on(void *stream, unsigned ctas, int iters);
int gpu_fill_on(void *stream, uint64_t dptr, uint64_t bytes, uint64_t seed);
int gpu_check_on(void *stream, uint64_t dptr, uint64_t bytes, uint64_t seed,
		 unsigned long long *dev_bad);
int gpu_count_ne_on(void *stream, uint64_t dptr, uint64_t bytes, uint8_t v,
		    unsigned long long *dev_bad);

enum gpu_layout {
	GPU_PAGE_FIRST, /* one allocation, a block's layers adjacent */
	GPU_SPLIT_KV,	/* one allocation per layer, K blocks then V blocks */
	GPU_MLA,	/* one allocation per layer, one segment, replicated */
};

struct gpu_kv {
	enum gpu_layout layout;
	uint32_t mem_kind; /* KVS_MEM_CUDA_IPC or KVS_MEM_CUDA_VMM_FD */
	unsigned layers, blocks;
	uint64_t seg;
	unsigned narenas;
	struct kvs_cuda_arena arenas[128];
	struct kvs_cuda_layer lays[128];
	char names[128][32];
};

int gpu_kv_alloc(struct gpu_kv *kv, enum gpu_layout layout, uint32_t mem_kind, unsigned layers,
		 unsigned blocks, uint64_t seg);
void gpu_kv_free(struct gpu_kv *kv);
int gpu_kv_register(struct kvs_client *c, struct gpu_kv *kv);
unsigned gpu_kv_segments(const struct gpu_kv *kv);
uint64_t gpu_kv_seg(const struct gpu_kv *kv, unsigned l, unsigned b, unsigned s);
/* Data of block @b derived from @seed (per layer and segment). */
int gpu_kv_fill(struct gpu_kv *kv, unsigned b, uint64_t seed);
/* Mismatching words in layers [l0, l0 + n) of block @b, or -errno. */
long long gpu_kv_check(struct gpu_kv *kv, unsigned b, uint64_t seed, unsigned l0, unsigned n);
/* gpu_kv_fill() of every layer, and the check of layer @l, on @stream (see gpu_fill_on()). */
int gpu_kv_fill_on(void *stream, struct gpu_kv *kv, unsigned b, uint64_t seed);
/*
 * gpu_kv_fill(@seed0 + i) of blocks @blocks[i] (of @n) on @stream, in one
 * launch per layer and 64 blocks: to queue behind work that holds the
 * stream, where one launch per segment would fill the driver's queue of
 * pending launches and block the calling thread.
 */
int gpu_kv_fill_blocks_on(void *stream, struct gpu_kv *kv, const uint32_t *blocks, unsigned n,
			  uint64_t seed0);
int gpu_kv_check_layer_on(void *stream, struct gpu_kv *kv, unsigned b, uint64_t seed, unsigned l,
			  unsigned long long *dev_bad);
int gpu_kv_poison(struct gpu_kv *kv, unsigned b, uint8_t v);
long long gpu_kv_count_ne(struct gpu_kv *kv, unsigned b, uint8_t v);

#endif /* KVS_TEST_GPU_H */
