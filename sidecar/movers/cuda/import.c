/* SPDX-License-Identifier: MIT */
/*
 * Engine GPU memory (REGISTER of a CUDA session): legacy IPC handles,
 * opened once per process and shared, and VMM allocations exported as
 * POSIX fds, mapped into a reserved range.  Bounds are checked against the
 * real allocation: an IPC import is sized with cuMemGetAddressRange, and
 * cuMemMap refuses a VMM size beyond the allocation.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/mem.h"
#include "movers/cuda/internal.h"

/* A legacy IPC handle can be opened once per process: share the mapping. */
struct ipc_import {
	struct ipc_import *next;
	unsigned dev;
	uint8_t handle[KVS_IPC_HANDLE_SIZE];
	void *ptr;
	uint64_t size; /* the real allocation size */
	unsigned refs;
};

struct vmm_import {
	unsigned dev;
	CUdeviceptr va;
	size_t size;
};

/* Every IPC handle open, with the sessions' references. */
static struct {
	pthread_mutex_t lock; /* the IPC import cache */
	struct ipc_import *imports;
} I = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int import_ipc(unsigned dev, const struct kvs_wire_mem *m, struct mem_import *ret,
		      char *why, size_t wl)
{
	struct ipc_import *im;
	CUdeviceptr base = 0;
	size_t size = 0;
	cudaError_t e;
	int r = 0;

	pthread_mutex_lock(&I.lock);
	for (im = I.imports; im; im = im->next)
		if (im->dev == dev && memcmp(im->handle, m->ipc_handle, sizeof(im->handle)) == 0)
			break;
	if (!im) {
		cudaIpcMemHandle_t h;
		void *ptr = NULL;

		memcpy(&h, m->ipc_handle, sizeof(h));
		cudaSetDevice(cuda_ordinal(dev));
		e = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess);
		if (e != cudaSuccess) {
			snprintf(why, wl, "cannot open the CUDA IPC handle: %s (allocations from "
					  "stream-ordered pools cannot be shared)",
				 cudaGetErrorString(e));
			cudaGetLastError();
			r = -EINVAL;
			goto out;
		}
		if (cuda_drv.mem_get_address_range(&base, &size, (CUdeviceptr)(uintptr_t)ptr) !=
		    CUDA_SUCCESS) {
			cudaIpcCloseMemHandle(ptr);
			snprintf(why, wl, "cannot size the imported allocation");
			r = -EIO;
			goto out;
		}
		im = calloc(1, sizeof(*im));
		if (!im) {
			cudaIpcCloseMemHandle(ptr);
			r = -ENOMEM;
			goto out;
		}
		im->dev = dev;
		memcpy(im->handle, m->ipc_handle, sizeof(im->handle));
		im->ptr = ptr;
		im->size = size - ((uintptr_t)ptr - base);
		im->next = I.imports;
		I.imports = im;
	}
	if (m->size > im->size) {
		snprintf(why, wl, "allocation declared %" PRIu64 " bytes, it has %" PRIu64, m->size,
			 im->size);
		r = -ERANGE;
		if (im->refs == 0) {
			/* Opened just now for nothing: close it again. */
			I.imports = im->next;
			cudaIpcCloseMemHandle(im->ptr);
			free(im);
		}
		goto out;
	}
	im->refs++;
	*ret = (struct mem_import){
		.kind = KVS_MEM_CUDA_IPC,
		.size = m->size,
		.base = (uint64_t)(uintptr_t)im->ptr,
		.mapped = m->size,
		.fd = -1,
		.priv = im,
	};
out:
	pthread_mutex_unlock(&I.lock);
	return r;
}

static int import_vmm(unsigned dev, const struct kvs_wire_mem *m, int fd, struct mem_import *ret,
		      char *why, size_t wl)
{
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc access = { 0 };
	struct vmm_import *vi;
	CUdeviceptr va = 0;
	CUresult cr;

	cudaSetDevice(cuda_ordinal(dev));
	cr = cuda_drv.mem_import(&h, (void *)(uintptr_t)fd,
				 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (cr != CUDA_SUCCESS) {
		snprintf(why, wl, "cannot import the VMM fd (error %d)", (int)cr);
		return cuda_drv_errno(cr);
	}
	cr = cuda_drv.mem_address_reserve(&va, m->size, 0, 0, 0);
	if (cr == CUDA_SUCCESS) {
		/* cuMemMap refuses a size beyond the allocation: the bounds check. */
		cr = cuda_drv.mem_map(va, m->size, 0, h, 0);
		if (cr != CUDA_SUCCESS) {
			cuda_drv.mem_address_free(va, m->size);
			snprintf(why, wl, "cannot map %" PRIu64 " bytes of the VMM allocation (larger "
					  "than it, or not granularity-aligned)",
				 m->size);
			cuda_drv.mem_release(h);
			return -ERANGE;
		}
	} else {
		snprintf(why, wl, "cannot reserve %" PRIu64 " bytes of address space", m->size);
		cuda_drv.mem_release(h);
		return cuda_drv_errno(cr);
	}
	/* The mapping keeps the allocation alive; the handle is no longer needed. */
	cuda_drv.mem_release(h);
	access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	access.location.id = cuda_ordinal(dev);
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	cr = cuda_drv.mem_set_access(va, m->size, &access, 1);
	vi = calloc(1, sizeof(*vi));
	if (cr != CUDA_SUCCESS || !vi) {
		cuda_drv.mem_unmap(va, m->size);
		cuda_drv.mem_address_free(va, m->size);
		free(vi);
		snprintf(why, wl, "cannot enable access to the VMM mapping");
		return cr != CUDA_SUCCESS ? cuda_drv_errno(cr) : -ENOMEM;
	}
	vi->dev = dev;
	vi->va = va;
	vi->size = m->size;
	*ret = (struct mem_import){
		.kind = KVS_MEM_CUDA_VMM_FD,
		.size = m->size,
		.base = va,
		.mapped = m->size,
		.fd = fd,
		.priv = vi,
	};
	return 0;
}

int cuda_mem_import(unsigned dev, const struct kvs_wire_mem *m, int fd, uint64_t lo, uint64_t hi,
		    struct mem_import *ret, char *why, size_t wl)
{
	if (dev >= cuda_device_count()) {
		snprintf(why, wl, "no such GPU");
		return -ENODEV;
	}
	if (m->kind == KVS_MEM_CUDA_IPC)
		return import_ipc(dev, m, ret, why, wl);
	if (m->kind == KVS_MEM_CUDA_VMM_FD)
		return import_vmm(dev, m, fd, ret, why, wl);
	snprintf(why, wl, "memory kind %u is not GPU memory", m->kind);
	return -EINVAL;
}

void cuda_mem_release(struct mem_import *imp)
{
	if (imp->kind == KVS_MEM_CUDA_IPC) {
		struct ipc_import *im = imp->priv, **pp;

		pthread_mutex_lock(&I.lock);
		if (im && --im->refs == 0) {
			for (pp = &I.imports; *pp && *pp != im; pp = &(*pp)->next)
				;
			if (*pp)
				*pp = im->next;
			cudaSetDevice(cuda_ordinal(im->dev));
			cudaIpcCloseMemHandle(im->ptr);
			free(im);
		}
		pthread_mutex_unlock(&I.lock);
	} else if (imp->kind == KVS_MEM_CUDA_VMM_FD) {
		struct vmm_import *vi = imp->priv;

		if (vi) {
			cudaSetDevice(cuda_ordinal(vi->dev));
			cuda_drv.mem_unmap(vi->va, vi->size);
			cuda_drv.mem_address_free(vi->va, vi->size);
			free(vi);
		}
	}
	imp->priv = NULL;
}
