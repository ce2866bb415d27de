/* SPDX-License-Identifier: MIT */
/*
 * Kernels the GPU tests and the CUDA benchmark run in their "engine"
 * processes: fill memory with data derived from a seed, check it, count
 * bytes that differ from a poison value, and a compute-bound loop that
 * stands in for an engine's forward pass.  Built into a fatbin that the
 * programs load with cuModuleLoadData (see gpu.c).
 */
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
