/* SPDX-License-Identifier: MIT */
/*
 * The CUDA mover's devices: finding the GPUs (by UUID, with their PCI bus
 * and NUMA node), resolving the driver entry points, pinning the pool,
 * and the one mapping of CUDA's error codes to -errno.  See cuda.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/conf.h"
#include "base/util.h"
#include "common/cuda_errno.h"
#include "movers/cuda/internal.h"
#include "obs/log.h"

#define DRIVER_API_VERSION 12000 /* ABI of the driver entry points we call */

struct cuda_driver cuda_drv;

/* Written by cuda_init() and cuda_fini() (control thread), read-only in between. */
static struct {
	unsigned n;
	struct cuda_device_info dev[CUDA_MAX_DEVICES];
	const struct kvs_config *cfg;
} C;

int cuda_errno(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidResourceHandle:
		return -EINVAL;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
		return -ENODEV;
	default:
		return -EIO;
	}
}

/* The device is ours: a device error mid-import or mid-copy is an I/O error. */
int cuda_drv_errno(CUresult r)
{
	return cu_result_errno(r, -EIO);
}

#define RESOLVE(field, sym)                                                                 \
	do {                                                                                \
		enum cudaDriverEntryPointQueryResult q;                                     \
		if (cudaGetDriverEntryPointByVersion(sym, (void **)&cuda_drv.field,         \
						     DRIVER_API_VERSION, cudaEnableDefault, \
						     &q) != cudaSuccess ||                  \
		    q != cudaDriverEntryPointSuccess || !cuda_drv.field) {                  \
			log_error("cuda: driver function %s not available", sym);           \
			return -ENOSYS;                                                     \
		}                                                                           \
	} while (0)

static int resolve_driver(void)
{
	RESOLVE(mem_get_address_range, "cuMemGetAddressRange");
	RESOLVE(mem_import, "cuMemImportFromShareableHandle");
	RESOLVE(mem_address_reserve, "cuMemAddressReserve");
	RESOLVE(mem_address_free, "cuMemAddressFree");
	RESOLVE(mem_map, "cuMemMap");
	RESOLVE(mem_unmap, "cuMemUnmap");
	RESOLVE(mem_set_access, "cuMemSetAccess");
	RESOLVE(mem_release, "cuMemRelease");
	RESOLVE(module_load_data, "cuModuleLoadData");
	RESOLVE(module_get_function, "cuModuleGetFunction");
	RESOLVE(module_unload, "cuModuleUnload");
	RESOLVE(launch_kernel, "cuLaunchKernel");
	{
		enum cudaDriverEntryPointQueryResult q;

		/* Stream memory operations: on by default since CUDA 12, only progress needs them. */
		if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32",
						     (void **)&cuda_drv.stream_write_value32,
						     DRIVER_API_VERSION, cudaEnableDefault,
						     &q) != cudaSuccess ||
		    q != cudaDriverEntryPointSuccess) {
			cuda_drv.stream_write_value32 = NULL;
			log_warning("cuda: no cuStreamWriteValue32: LOAD progress is published at "
				    "the end of each LOAD only");
		}
	}
	return 0;
}

static int sysfs_numa_node(const char *bus_id)
{
	char path[128];
	int node = -1;
	FILE *f;

	/* sysfs spells the bus id in lower case; ours is printed that way. */
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus_id);
	f = fopen(path, "re");
	if (f) {
		if (fscanf(f, "%d", &node) != 1)
			node = -1;
		fclose(f);
	}
	return node;
}

static void uuid_str(const uint8_t *u, char *buf, size_t len)
{
	snprintf(buf, len,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
		 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
		 u[14], u[15]);
}

/*
 * Find the GPUs.  Returns how many (0 without a driver or device, or when
 * [cuda] enable = no), or -errno when [cuda] enable = yes and none is
 * usable.  Logs what it found.
 */
int cuda_init(const struct kvs_config *cfg)
{
	cudaError_t e;
	int n = 0, r;

	C.cfg = cfg;
	C.n = 0;
	if (cfg->cuda_enable == CUDA_ENABLE_NO)
		return 0;
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n <= 0) {
		if (cfg->cuda_enable == CUDA_ENABLE_YES)
			return log_error_errno(ENODEV, "cuda: [cuda] enable = yes but no usable GPU (%s)",
					       cudaGetErrorString(e));
		log_info("cuda: no GPU found (%s): host backend only",
			 e == cudaSuccess ? "no device" : cudaGetErrorString(e));
		cudaGetLastError();
		return 0;
	}
	r = resolve_driver();
	if (r < 0)
		return cfg->cuda_enable == CUDA_ENABLE_YES ? r : 0;
	for (int i = 0; i < n && C.n < CUDA_MAX_DEVICES; i++) {
		struct cuda_device_info *d = &C.dev[C.n];
		struct cudaDeviceProp p;
		char u[48];

		if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
			continue;
		d->ordinal = i;
		memcpy(d->uuid, p.uuid.bytes, sizeof(d->uuid));
		snprintf(d->bus_id, sizeof(d->bus_id), "%04x:%02x:%02x.0", p.pciDomainID,
			 p.pciBusID, p.pciDeviceID);
		d->numa_node = sysfs_numa_node(d->bus_id);
		snprintf(d->name, sizeof(d->name), "%.63s", p.name);
		d->sms = (unsigned)p.multiProcessorCount;
		uuid_str(d->uuid, u, sizeof(u));
		log_info("cuda: %s %s, %u SMs, PCI %s, NUMA node %d", u, d->name, d->sms, d->bus_id,
			 d->numa_node);
		C.n++;
	}
	return (int)C.n;
}

void cuda_fini(void)
{
	C.n = 0;
}

unsigned cuda_device_count(void)
{
	return C.n;
}

const struct cuda_device_info *cuda_device(unsigned idx)
{
	return idx < C.n ? &C.dev[idx] : NULL;
}

int cuda_device_find(const uint8_t uuid[16])
{
	for (unsigned i = 0; i < C.n; i++)
		if (memcmp(C.dev[i].uuid, uuid, 16) == 0)
			return (int)i;
	return -ENODEV;
}

int cuda_device_node(unsigned dev)
{
	return C.dev[dev].numa_node;
}

int cuda_ordinal(unsigned dev)
{
	return C.dev[dev].ordinal;
}

const struct kvs_config *cuda_config(void)
{
	return C.cfg;
}

/* Pin a pool region (mapped, portable); logs the time it took. */
int cuda_pin(void *base, uint64_t size)
{
	uint64_t t0 = now_ns();
	cudaError_t e;
	void *dptr = NULL;

	if (C.n == 0)
		return 0;
	cudaSetDevice(C.dev[0].ordinal);
	/* Portable: pinned for every GPU's context; mapped: the kernel mover reaches it. */
	e = cudaHostRegister(base, size, cudaHostRegisterPortable | cudaHostRegisterMapped);
	if (e != cudaSuccess)
		return log_error_errno(cuda_errno(e), "cuda: cannot pin %" PRIu64 " KiB at %p: %s",
				       size >> 10, base, cudaGetErrorString(e));
	/* The kernel takes host pointers as device pointers: UVA must make them equal. */
	if (cudaHostGetDevicePointer(&dptr, base, 0) != cudaSuccess || dptr != base) {
		cudaHostUnregister(base);
		return log_error_errno(ENOTSUP, "cuda: pinned memory is not identity-mapped (no UVA?)");
	}
	/* One chunk of many, pinned at once (pool.c): the pool logs the whole. */
	log_debug("cuda: pinned %" PRIu64 " MiB of pool at %p in %.2f s", size >> 20, base,
		  (now_ns() - t0) / 1e9);
	return 0;
}

void cuda_unpin(void *base)
{
	if (C.n)
		cudaHostUnregister(base);
}
