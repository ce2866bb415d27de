/* SPDX-License-Identifier: MIT */
/* Built without CUDA: no device, so no CUDA memory is ever imported. */
#include <errno.h>
#include <stdio.h>

#include "base/conf.h"
#include "io/mover.h"
#include "movers/cuda/cuda.h"
#include "obs/log.h"
#include "io/mem.h"

int cuda_init(const struct kvs_config *cfg)
{
	if (cfg->cuda_enable == CUDA_ENABLE_YES)
		return log_error_errno(ENODEV, "cuda: [cuda] enable = yes but kvstashd was built without CUDA");
	return 0;
}

void cuda_fini(void)
{
}

unsigned cuda_device_count(void)
{
	return 0;
}

const struct cuda_device_info *cuda_device(unsigned idx)
{
	return NULL;
}

int cuda_device_find(const uint8_t uuid[16])
{
	return -ENODEV;
}

int cuda_pin(void *base, uint64_t size)
{
	return 0;
}

void cuda_unpin(void *base)
{
}

int cuda_mem_import(unsigned dev, const struct kvs_wire_mem *m, int fd, struct mem_import *ret,
		    char *why, size_t wl)
{
	snprintf(why, wl, "kvstashd was built without CUDA");
	return -ENODEV;
}

void copy_cuda_mem_release(struct mem_import *imp)
{
}

int cuda_worker_init(struct worker *w, unsigned dev)
{
	return -ENODEV;
}

void cuda_worker_fini(struct worker *w)
{
}

void copy_cuda_submit(struct worker *w, struct op *op)
{
}

bool copy_cuda_poll(struct worker *w)
{
	return false;
}

unsigned copy_cuda_inflight(const struct worker *w)
{
	return 0;
}
