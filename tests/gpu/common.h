/* SPDX-License-Identifier: MIT */
/* Shared by the GPU tests: a CUDA engine session against a real kvstashd. */
#ifndef KVS_TEST_GPU_COMMON_H
#define KVS_TEST_GPU_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "../lib/harness.h"
#include "tools/gpu/gpu.h"

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
		fprintf(stderr, __VA_ARGS__);                                  \
		fprintf(stderr, "\n");                                         \
		exit(1);                                                       \
	} while (0)

#define CHECK(cond, ...)                \
	do {                            \
		if (!(cond))            \
			FAIL(__VA_ARGS__); \
	} while (0)

static inline int gpu_connect(const struct kvsd *d, const char *instance, const char *ns,
			      uint32_t rank, uint32_t tp, struct kvs_client **ret)
{
	struct kvs_connect_opts o;

	kvs_connect_opts_init(&o);
	o.instance = instance;
	o.ns = ns;
	o.tp_rank = rank;
	o.tp_size = tp;
	o.world_size = tp;
	o.device_kind = KVS_DEVICE_CUDA;
	/*
	 * HELLO and REGISTER (36 or more CUDA IPC imports on kvstashd's
	 * control thread) share the socket timeout; with the GPU tests run
	 * side by side (-j4), 5 s is a race with the machine's load.  The
	 * same bound as the tests' data operations.
	 */
	o.timeout_ms = 30000;
	if (gpu_uuid(o.device_uuid))
		return -EIO;
	return kvs_connect(d->sock, &o, ret);
}

/* A random permutation of 0..n-1 (deterministic for a seed). */
static inline void permute(uint32_t *ids, unsigned n, uint64_t seed)
{
	for (unsigned i = 0; i < n; i++)
		ids[i] = i;
	for (unsigned i = n - 1; i > 0; i--) {
		unsigned j;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		j = (unsigned)((seed >> 33) % (i + 1));
		uint32_t t = ids[i];
		ids[i] = ids[j];
		ids[j] = t;
	}
}

#endif
