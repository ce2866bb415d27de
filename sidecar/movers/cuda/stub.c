/* SPDX-License-Identifier: MIT */
/* Built without CUDA: no device, so no CUDA session, import or worker. */
#include <errno.h>
#include <stdio.h>

#include <kvstash/wire.h>

#include "base/conf.h"
#include "io/batch.h"
#include "io/mover.h"
#include "movers/cuda/cuda.h"
#include "obs/log.h"

static int cuda_init(const struct kvs_config *cfg)
{
	if (cfg->cuda_enable == CUDA_ENABLE_YES)
		return log_error_errno(ENODEV, "cuda: [cuda] enable = yes but kvstashd was built without CUDA");
	return 0;
}

static void cuda_fini(void)
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

static int cuda_mem_import(unsigned dev, const struct kvs_wire_mem *m, int fd, uint64_t lo,
			   uint64_t hi, struct mem_import *ret, char *why, size_t wl)
{
	snprintf(why, wl, "kvstashd was built without CUDA");
	return -ENODEV;
}

static void cuda_mem_release(struct mem_import *imp)
{
}

static int cuda_worker_init(unsigned dev, unsigned wid, struct mover **ret)
{
	return -ENODEV;
}

static void cuda_worker_fini(struct mover *m)
{
}

static void cuda_submit(struct mover *m, struct copy_batch *b)
{
	batch_complete(b, -ENODEV);
}

const struct mover_ops cuda_mover = {
	.name = "cuda",
	.dev_name = "GPU",
	.device_kind = KVS_DEVICE_CUDA,
	.mem_kinds = MEM_KIND(KVS_MEM_CUDA_IPC) | MEM_KIND(KVS_MEM_CUDA_VMM_FD),
	.init = cuda_init,
	.fini = cuda_fini,
	.find_device = cuda_find_device,
	.import = cuda_mem_import,
	.release = cuda_mem_release,
	.worker_init = cuda_worker_init,
	.worker_fini = cuda_worker_fini,
	.submit = cuda_submit,
};
