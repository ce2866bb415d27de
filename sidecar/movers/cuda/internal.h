/* SPDX-License-Identifier: MIT */
/*
 * Shared by the CUDA mover's files (device.c, import.c, copy.c) and by
 * nothing else: it includes the CUDA headers, which builds without CUDA
 * do not have.
 */
#ifndef KVS_MOVERS_CUDA_INTERNAL_H
#define KVS_MOVERS_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <kvstash/wire.h>

#include "movers/cuda/cuda.h"

struct kvs_config;
struct mem_import;

/*
 * Driver functions, resolved once by cuda_init() through the static
 * runtime; read-only after it (before any worker starts or any REGISTER).
 */
struct cuda_driver {
	PFN_cuMemGetAddressRange_v3020 mem_get_address_range;
	PFN_cuMemImportFromShareableHandle_v10020 mem_import;
	PFN_cuMemAddressReserve_v10020 mem_address_reserve;
	PFN_cuMemAddressFree_v10020 mem_address_free;
	PFN_cuMemMap_v10020 mem_map;
	PFN_cuMemUnmap_v10020 mem_unmap;
	PFN_cuMemSetAccess_v10020 mem_set_access;
	PFN_cuMemRelease_v10020 mem_release;
	PFN_cuModuleLoadData_v2000 module_load_data;
	PFN_cuModuleGetFunction_v2000 module_get_function;
	PFN_cuModuleUnload_v2000 module_unload;
	PFN_cuLaunchKernel_v4000 launch_kernel;
	/* Optional (NULL: a LOAD PROGRESS publishes its layers only at its end). */
	PFN_cuStreamWriteValue32_v11070 stream_write_value32;
};

extern struct cuda_driver cuda_drv;

/* The one mapping of each error space to -errno. */
int cuda_errno(cudaError_t e);
int cuda_drv_errno(CUresult r);

/* The runtime's ordinal of device @dev (< CUDA_MAX_DEVICES), for cudaSetDevice(). */
int cuda_ordinal(unsigned dev);
/* The configuration cuda_init() was given: [cuda] keys, read when a worker starts. */
const struct kvs_config *cuda_config(void);

/* device.c: the process-wide ops. */
int cuda_init(const struct kvs_config *cfg);
void cuda_fini(void);
int cuda_device_node(unsigned dev);
int cuda_pin(void *base, uint64_t size);
void cuda_unpin(void *base);

/*
 * import.c: allocation @m for device @dev: a legacy IPC handle (one import
 * per distinct handle, shared and reference-counted) or a VMM fd (taken
 * over on success).  Bounds are checked against the real allocation; the
 * views' span [@lo, @hi) is not needed (GPU memory is not mapped here).
 */
int cuda_mem_import(unsigned dev, const struct kvs_wire_mem *m, int fd, uint64_t lo, uint64_t hi,
		    struct mem_import *ret, char *why, size_t wl);
void cuda_mem_release(struct mem_import *imp);

#endif /* KVS_MOVERS_CUDA_INTERNAL_H */
