/* SPDX-License-Identifier: MIT */
/*
 * Kernels the GPU tests and the CUDA benchmark run in their "engine"
 * processes: fill memory with data derived from a seed, check it, count
 * bytes that differ from a poison value, and a compute-bound loop that
 * stands in for an engine's forward pass.  Built into a fatbin that the
 * programs load with cuModuleLoadData (see gpu.c).
 */
#define T_FILL_IDS 64 /* gpu.c's FILL_IDS */

static __device__ unsigned long long mix(unsigned long long z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

extern "C" __global__ void t_fill(unsigned long long *p, unsigned long long n8,
				  unsigned long long seed)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n8;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		p[i] = mix(seed ^ (i * 0xd1342543de82ef95ull));
}

/*
 * t_fill() of segments of several blocks of one layer in one launch:
 * block ids[i] (of n) at base + ids[i] * bstride + s * kvstride gets the
 * data of seed seed0 + i, as gpu_kv_fill() derives it per layer and
 * segment.  blockIdx.y is the (block, segment) pair.  A stream held up
 * before it queues one launch per layer, not one per segment: the
 * driver's queue of pending launches is finite, and a launch into a full
 * one blocks the host thread until the stream moves.
 */
struct t_ids {
	unsigned int b[T_FILL_IDS];
};

extern "C" __global__ void t_fill_blocks(unsigned long long base, unsigned long long bstride,
					 unsigned long long kvstride, unsigned int nseg,
					 unsigned long long n8, unsigned int layer,
					 unsigned long long seed0, struct t_ids ids)
{
	unsigned int i = blockIdx.y / nseg, s = blockIdx.y % nseg;
	unsigned long long *p = (unsigned long long *)(base + ids.b[i] * bstride + s * kvstride);
	unsigned long long seed = (seed0 + i) * 1000003ull + layer * 7919ull + s;

	for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < n8;
	     k += (unsigned long long)gridDim.x * blockDim.x)
		p[k] = mix(seed ^ (k * 0xd1342543de82ef95ull));
}

extern "C" __global__ void t_check(const unsigned long long *p, unsigned long long n8,
				   unsigned long long seed, unsigned long long *bad)
{
	unsigned long long mine = 0;

	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n8;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		mine += p[i] != mix(seed ^ (i * 0xd1342543de82ef95ull));
	if (mine)
		atomicAdd(bad, mine);
}

extern "C" __global__ void t_count_ne(const unsigned char *p, unsigned long long n, unsigned int v,
				      unsigned long long *bad)
{
	unsigned long long mine = 0;

	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		mine += p[i] != (unsigned char)v;
	if (mine)
		atomicAdd(bad, mine);
}

/* Compute-bound: FMAs on registers, one store at the end. */
extern "C" __global__ void t_spin(float *out, int iters)
{
	float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 0.9999f;

	for (int i = 0; i < iters; i++) {
		a = fmaf(a, b, c);
		b = fmaf(b, c, a * 1e-9f);
	}
	if (a == 12345.678f)
		out[threadIdx.x] = a + b;
}
