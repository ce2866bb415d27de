/* SPDX-License-Identifier: MIT */
/*
 * The gather/scatter kernel of the CUDA backend: copies a batch of
 * fragments described by a descriptor array in one launch.  For SAVE it
 * reads engine GPU memory and writes mapped pinned pool memory; for LOAD
 * the reverse.  Used for fragmented layouts, where one cudaMemcpyAsync per
 * 16-64 KiB piece leaves the copy engines far below the PCIe limit.
 *
 * Compiled to a fatbin (SASS for the configured architectures plus PTX)
 * and embedded in kvstashd; loaded with cuModuleLoadData, so the daemon
 * links no kernel registration code and starts on hosts without a GPU.
 */
#include <stdint.h>

struct kvs_desc {
	unsigned long long dst;
	unsigned long long src;
	unsigned long long len; /* a multiple of 16; both addresses 16-aligned */
};

/*
 * One CTA per descriptor (grid-stride over descriptors).  Each thread
 * keeps four 16-byte loads in flight before it stores, so a CTA has
 * 4 x 16 x blockDim bytes outstanding: enough to cover PCIe read latency
 * with a few CTAs per SM.
 */
extern "C" __global__ void __launch_bounds__(512)
kvs_gather(const struct kvs_desc *__restrict__ descs, unsigned int n)
{
	for (unsigned int i = blockIdx.x; i < n; i += gridDim.x) {
		uint4 *dst = (uint4 *)descs[i].dst;
		const uint4 *src = (const uint4 *)descs[i].src;
		size_t n16 = descs[i].len >> 4;
		size_t j = threadIdx.x;
		size_t step = blockDim.x;

		for (; j + 3 * step < n16; j += 4 * step) {
			uint4 a = src[j];
			uint4 b = src[j + step];
			uint4 c = src[j + 2 * step];
			uint4 d = src[j + 3 * step];

			dst[j] = a;
			dst[j + step] = b;
			dst[j + 2 * step] = c;
			dst[j + 3 * step] = d;
		}
		for (; j < n16; j += step)
			dst[j] = src[j];
	}
}
