/* SPDX-License-Identifier: MIT */
/*
 * CUDA backend: see cuda.h.  Two movers share one completion path:
 *
 *   dma     one cudaMemcpyAsync per coalesced piece on the direction's
 *           stream (the worker builds pieces that merge ranges adjacent on
 *           both sides): free for the engine, at the PCIe limit when
 *           pieces are large (page-first layouts);
 *   kernel  one launch of kvs_gather over a descriptor array in mapped
 *           pinned memory: near the PCIe limit for 16-64 KiB fragments,
 *           but it time-slices with the engine's kernels.
 *
 * Each worker (one per GPU) owns a save stream and a load stream so both
 * directions run at once.  An op's copies are followed by an event; the
 * worker polls the events in submission order per stream.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "base/conf.h"
#include "io/mover.h"
#include "movers/cuda/cuda.h"
#include "obs/log.h"
#include "io/mem.h"
#include "base/util.h"
#include "io/worker.h"

#define DRIVER_API_VERSION 12000 /* ABI of the driver entry points we call */
#define DESC_RING_BYTES (8u << 20) /* per stream: ~350k descriptors */
#define KERNEL_SPLIT (64u << 10)   /* descriptors of at most this many bytes */
#define KERNEL_THREADS 512u

struct kvs_desc {
	uint64_t dst;
	uint64_t src;
	uint64_t len;
};

extern const unsigned char kvs_gather_fatbin[];

/* Driver functions, resolved once through the static runtime. */
static struct {
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
} drv;

static struct {
	unsigned n;
	struct cuda_device_info dev[CUDA_MAX_DEVICES];
	const struct kvs_config *cfg;
	pthread_mutex_t lock; /* the IPC import cache */
	struct ipc_import *imports;
} C = { .lock = PTHREAD_MUTEX_INITIALIZER };

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

static int cuda_errno(cudaError_t e)
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

static int drv_errno(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
		return -EINVAL;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	default:
		return -EIO;
	}
}

#define RESOLVE(field, sym)                                                                   \
	do {                                                                                  \
		enum cudaDriverEntryPointQueryResult q;                                       \
		if (cudaGetDriverEntryPointByVersion(sym, (void **)&drv.field, DRIVER_API_VERSION, \
						     cudaEnableDefault, &q) != cudaSuccess || \
		    q != cudaDriverEntryPointSuccess || !drv.field) {                           \
			log_error("cuda: driver function %s not available", sym);             \
			return -ENOSYS;                                                       \
		}                                                                             \
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
		return log_error_errno(cuda_errno(e), "cuda: cannot pin %" PRIu64 " MiB of pool: %s",
				       size >> 20, cudaGetErrorString(e));
	/* The kernel takes host pointers as device pointers: UVA must make them equal. */
	if (cudaHostGetDevicePointer(&dptr, base, 0) != cudaSuccess || dptr != base) {
		cudaHostUnregister(base);
		return log_error_errno(ENOTSUP, "cuda: pinned pool is not identity-mapped (no UVA?)");
	}
	log_info("cuda: pinned %" PRIu64 " MiB of pool in %.2f s", size >> 20,
		 (now_ns() - t0) / 1e9);
	return 0;
}

void cuda_unpin(void *base)
{
	if (C.n)
		cudaHostUnregister(base);
}

/* ---- imports ------------------------------------------------------- */

static int import_ipc(unsigned dev, const struct kvs_wire_mem *m, struct mem_import *ret,
		      char *why, size_t wl)
{
	struct ipc_import *im;
	CUdeviceptr base = 0;
	size_t size = 0;
	cudaError_t e;
	int r = 0;

	pthread_mutex_lock(&C.lock);
	for (im = C.imports; im; im = im->next)
		if (im->dev == dev && memcmp(im->handle, m->ipc_handle, sizeof(im->handle)) == 0)
			break;
	if (!im) {
		cudaIpcMemHandle_t h;
		void *ptr = NULL;

		memcpy(&h, m->ipc_handle, sizeof(h));
		cudaSetDevice(C.dev[dev].ordinal);
		e = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess);
		if (e != cudaSuccess) {
			snprintf(why, wl, "cannot open the CUDA IPC handle: %s (allocations from "
					  "stream-ordered pools cannot be shared)",
				 cudaGetErrorString(e));
			cudaGetLastError();
			r = -EINVAL;
			goto out;
		}
		if (drv.mem_get_address_range(&base, &size, (CUdeviceptr)(uintptr_t)ptr) !=
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
		im->next = C.imports;
		C.imports = im;
	}
	if (m->size > im->size) {
		snprintf(why, wl, "allocation declared %" PRIu64 " bytes, it has %" PRIu64, m->size,
			 im->size);
		r = -ERANGE;
		if (im->refs == 0) {
			/* Opened just now for nothing: close it again. */
			C.imports = im->next;
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
		.fd = -1,
		.priv = im,
	};
out:
	pthread_mutex_unlock(&C.lock);
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

	cudaSetDevice(C.dev[dev].ordinal);
	cr = drv.mem_import(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (cr != CUDA_SUCCESS) {
		snprintf(why, wl, "cannot import the VMM fd (error %d)", (int)cr);
		return drv_errno(cr);
	}
	cr = drv.mem_address_reserve(&va, m->size, 0, 0, 0);
	if (cr == CUDA_SUCCESS) {
		/* cuMemMap refuses a size beyond the allocation: the bounds check. */
		cr = drv.mem_map(va, m->size, 0, h, 0);
		if (cr != CUDA_SUCCESS) {
			drv.mem_address_free(va, m->size);
			snprintf(why, wl, "cannot map %" PRIu64 " bytes of the VMM allocation (larger "
					  "than it, or not granularity-aligned)",
				 m->size);
			drv.mem_release(h);
			return -ERANGE;
		}
	} else {
		snprintf(why, wl, "cannot reserve %" PRIu64 " bytes of address space", m->size);
		drv.mem_release(h);
		return drv_errno(cr);
	}
	/* The mapping keeps the allocation alive; the handle is no longer needed. */
	drv.mem_release(h);
	access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	access.location.id = C.dev[dev].ordinal;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	cr = drv.mem_set_access(va, m->size, &access, 1);
	vi = calloc(1, sizeof(*vi));
	if (cr != CUDA_SUCCESS || !vi) {
		drv.mem_unmap(va, m->size);
		drv.mem_address_free(va, m->size);
		free(vi);
		snprintf(why, wl, "cannot enable access to the VMM mapping");
		return cr != CUDA_SUCCESS ? drv_errno(cr) : -ENOMEM;
	}
	vi->dev = dev;
	vi->va = va;
	vi->size = m->size;
	*ret = (struct mem_import){
		.kind = KVS_MEM_CUDA_VMM_FD,
		.size = m->size,
		.base = va,
		.fd = fd,
		.priv = vi,
	};
	return 0;
}

int cuda_mem_import(unsigned dev, const struct kvs_wire_mem *m, int fd, struct mem_import *ret,
		    char *why, size_t wl)
{
	if (dev >= C.n) {
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

void copy_cuda_mem_release(struct mem_import *imp)
{
	if (imp->kind == KVS_MEM_CUDA_IPC) {
		struct ipc_import *im = imp->priv, **pp;

		pthread_mutex_lock(&C.lock);
		if (im && --im->refs == 0) {
			for (pp = &C.imports; *pp && *pp != im; pp = &(*pp)->next)
				;
			if (*pp)
				*pp = im->next;
			cudaSetDevice(C.dev[im->dev].ordinal);
			cudaIpcCloseMemHandle(im->ptr);
			free(im);
		}
		pthread_mutex_unlock(&C.lock);
	} else if (imp->kind == KVS_MEM_CUDA_VMM_FD) {
		struct vmm_import *vi = imp->priv;

		if (vi) {
			cudaSetDevice(C.dev[vi->dev].ordinal);
			drv.mem_unmap(vi->va, vi->size);
			drv.mem_address_free(vi->va, vi->size);
			free(vi);
		}
	}
	imp->priv = NULL;
}

/* ---- the mover ------------------------------------------------------ */

struct cuda_stream {
	cudaStream_t stream;
	struct cds_list_head fifo; /* ops in submission order */
	struct kvs_desc *ring;	   /* mapped pinned descriptors */
	uint64_t cap;		   /* descriptors */
	uint64_t head, tail;	   /* free-running; [head, tail) in use */
};

struct cuda_worker {
	unsigned dev;
	struct cuda_stream st[2]; /* COPY_SAVE, COPY_LOAD */
	CUmodule mod;
	CUfunction gather;
	unsigned ctas;
	unsigned inflight;
	cudaEvent_t *events; /* free stack */
	unsigned nevents, cap_events;
};

struct cuda_op {
	cudaEvent_t ev;
	uint64_t desc_end; /* ring tail after this op (0: no descriptors) */
	bool kernel;
};

int cuda_worker_init(struct worker *w, unsigned dev)
{
	struct cuda_worker *cw = calloc(1, sizeof(*cw));
	CUresult cr;
	cudaError_t e;

	if (!cw)
		return -ENOMEM;
	cw->dev = dev;
	e = cudaSetDevice(C.dev[dev].ordinal);
	for (int i = 0; i < 2 && e == cudaSuccess; i++) {
		CDS_INIT_LIST_HEAD(&cw->st[i].fifo);
		e = cudaStreamCreateWithFlags(&cw->st[i].stream, cudaStreamNonBlocking);
		if (e == cudaSuccess)
			e = cudaHostAlloc((void **)&cw->st[i].ring, DESC_RING_BYTES,
					  cudaHostAllocMapped | cudaHostAllocPortable);
		cw->st[i].cap = DESC_RING_BYTES / sizeof(struct kvs_desc);
	}
	if (e != cudaSuccess) {
		log_error("cuda: worker %u: cannot create streams: %s", w->id, cudaGetErrorString(e));
		free(cw);
		return cuda_errno(e);
	}
	cr = drv.module_load_data(&cw->mod, kvs_gather_fatbin);
	if (cr == CUDA_SUCCESS)
		cr = drv.module_get_function(&cw->gather, cw->mod, "kvs_gather");
	if (cr != CUDA_SUCCESS) {
		/* Without the kernel the DMA mover still works. */
		log_warning("cuda: worker %u: cannot load the gather kernel (error %d): DMA only",
			    w->id, (int)cr);
		cw->gather = NULL;
	}
	cw->ctas = C.cfg->cuda_kernel_ctas ? C.cfg->cuda_kernel_ctas : 4 * C.dev[dev].sms;
	w->cuda = cw;
	return 0;
}

void cuda_worker_fini(struct worker *w)
{
	struct cuda_worker *cw = w->cuda;

	if (!cw)
		return;
	cudaSetDevice(C.dev[cw->dev].ordinal);
	for (int i = 0; i < 2; i++) {
		if (cw->st[i].stream) {
			cudaStreamSynchronize(cw->st[i].stream);
			cudaStreamDestroy(cw->st[i].stream);
		}
		if (cw->st[i].ring)
			cudaFreeHost(cw->st[i].ring);
	}
	for (unsigned i = 0; i < cw->nevents; i++)
		cudaEventDestroy(cw->events[i]);
	free(cw->events);
	if (cw->mod)
		drv.module_unload(cw->mod);
	free(cw);
	w->cuda = NULL;
}

static int event_get(struct cuda_worker *cw, cudaEvent_t *ret)
{
	if (cw->nevents) {
		*ret = cw->events[--cw->nevents];
		return 0;
	}
	return cuda_errno(cudaEventCreateWithFlags(ret, cudaEventDisableTiming));
}

static void event_put(struct cuda_worker *cw, cudaEvent_t ev)
{
	if (cw->nevents == cw->cap_events) {
		unsigned cap = cw->cap_events ? 2 * cw->cap_events : 16;
		cudaEvent_t *e = realloc(cw->events, cap * sizeof(*e));

		if (!e) {
			cudaEventDestroy(ev);
			return;
		}
		cw->events = e;
		cw->cap_events = cap;
	}
	cw->events[cw->nevents++] = ev;
}

/* Which mover for this batch: see [cuda] mover and kernel_below in kvstash.conf(5). */
static bool want_kernel(const struct cuda_worker *cw, const struct copy_batch *b)
{
	/* [cuda] mover was parsed at load: no string is compared per batch. */
	enum cuda_mover mover = C.cfg->cuda_mover;

	if (!cw->gather || b->n == 0 || mover == CUDA_MOVER_DMA)
		return false;
	for (uint32_t i = 0; i < b->n; i++)
		if ((b->pieces[i].eng | (uintptr_t)b->pieces[i].pool | b->pieces[i].len) & 15)
			return false; /* the kernel moves 16-byte words */
	if (mover == CUDA_MOVER_KERNEL)
		return true;
	/*
	 * auto: saves run in the background, where DMA costs the engine
	 * nothing; loads are on the time-to-first-token path, where small
	 * fragments need the kernel to reach the PCIe limit.
	 */
	return b->dir == COPY_LOAD && b->bytes / b->n < C.cfg->cuda_kernel_below;
}

static uint64_t count_descs(const struct copy_batch *b)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < b->n; i++)
		n += (b->pieces[i].len + KERNEL_SPLIT - 1) / KERNEL_SPLIT;
	return n;
}

/* Reserve @n contiguous descriptors in the ring; NULL when it has no room. */
static struct kvs_desc *ring_take(struct cuda_stream *s, uint64_t n, uint64_t *ret_end)
{
	uint64_t pos = s->tail;

	if (n > s->cap)
		return NULL;
	if (pos % s->cap + n > s->cap)
		pos += s->cap - pos % s->cap; /* wrap: never split a launch's array */
	if (pos + n - s->head > s->cap)
		return NULL;
	s->tail = pos + n;
	*ret_end = s->tail;
	return &s->ring[pos % s->cap];
}

static int launch_kernel(struct cuda_worker *cw, struct cuda_stream *s, struct op *op,
			 struct cuda_op *co)
{
	struct copy_batch *b = &op->batch;
	uint64_t n = count_descs(b), k = 0;
	struct kvs_desc *d = ring_take(s, n, &co->desc_end);
	unsigned int nd = (unsigned int)n, grid;
	void *params[2];
	CUresult cr;

	if (!d || n > UINT32_MAX)
		return -ENOSPC;
	for (uint32_t i = 0; i < b->n; i++) {
		const struct piece *p = &b->pieces[i];

		for (uint64_t off = 0; off < p->len; off += KERNEL_SPLIT) {
			uint64_t len = MIN((uint64_t)KERNEL_SPLIT, p->len - off);
			uint64_t pool = (uint64_t)(uintptr_t)p->pool + off, eng = p->eng + off;

			d[k++] = b->dir == COPY_SAVE ? (struct kvs_desc){ pool, eng, len } :
						       (struct kvs_desc){ eng, pool, len };
		}
	}
	/* Host pointer == device pointer for mapped pinned memory (checked in cuda_pin()). */
	void *dd = d;

	params[0] = &dd;
	params[1] = &nd;
	grid = MIN(nd, cw->ctas);
	cr = drv.launch_kernel(cw->gather, grid, 1, 1, KERNEL_THREADS, 1, 1, 0,
			       (CUstream)s->stream, params, NULL);
	if (cr != CUDA_SUCCESS) {
		s->tail = co->desc_end - n; /* nothing was queued: give the descriptors back */
		co->desc_end = 0;
		return drv_errno(cr);
	}
	co->kernel = true;
	return 0;
}

static int launch_dma(struct cuda_stream *s, struct op *op)
{
	struct copy_batch *b = &op->batch;

	for (uint32_t i = 0; i < b->n; i++) {
		const struct piece *p = &b->pieces[i];
		void *eng = (void *)(uintptr_t)p->eng;
		cudaError_t e = b->dir == COPY_SAVE ?
					cudaMemcpyAsync(p->pool, eng, p->len, cudaMemcpyDeviceToHost,
							s->stream) :
					cudaMemcpyAsync(eng, p->pool, p->len, cudaMemcpyHostToDevice,
							s->stream);

		if (e != cudaSuccess) {
			log_error("cuda: cudaMemcpyAsync of %" PRIu64 " bytes failed: %s", p->len,
				  cudaGetErrorString(e));
			cudaGetLastError();
			return -EIO;
		}
	}
	return 0;
}

void copy_cuda_submit(struct worker *w, struct op *op)
{
	struct cuda_worker *cw = w->cuda;
	struct copy_batch *b = &op->batch;
	struct cuda_stream *s = &cw->st[b->dir];
	struct cuda_op *co = calloc(1, sizeof(*co));
	int r = -ENOMEM;

	if (co && event_get(cw, &co->ev) == 0) {
		r = -ENOSPC;
		if (want_kernel(cw, b))
			r = launch_kernel(cw, s, op, co);
		if (r < 0)
			r = launch_dma(s, op);
		if (cudaEventRecord(co->ev, s->stream) != cudaSuccess && r == 0)
			r = -EIO;
	}
	if (r < 0) {
		/*
		 * Copies already queued may still run: the op completes through
		 * its event when one was recorded, else right away.
		 */
		b->err = r == -ENOSPC ? -EIO : r;
		if (!co || !co->ev) {
			free(co);
			op->batch_priv = NULL;
			cds_list_add_tail(&op->node, &w->local_done);
			return;
		}
	}
	op->batch_priv = co;
	cds_list_add_tail(&op->node, &s->fifo);
	cw->inflight++;
}

bool copy_cuda_poll(struct worker *w)
{
	struct cuda_worker *cw = w->cuda;
	bool any = false;

	if (!cw || !cw->inflight)
		return false;
	for (int i = 0; i < 2; i++) {
		struct cuda_stream *s = &cw->st[i];

		while (!cds_list_empty(&s->fifo)) {
			struct op *op = cds_list_first_entry(&s->fifo, struct op, node);
			struct cuda_op *co = op->batch_priv;
			cudaError_t e = cudaEventQuery(co->ev);

			if (e == cudaErrorNotReady)
				break;
			if (e != cudaSuccess) {
				log_error("cuda: worker %u: copy failed: %s", w->id,
					  cudaGetErrorString(e));
				cudaGetLastError();
				if (!op->batch.err)
					op->batch.err = -EIO;
			}
			/* In-order stream: every earlier descriptor is free too. */
			if (co->desc_end)
				s->head = co->desc_end;
			event_put(cw, co->ev);
			free(co);
			op->batch_priv = NULL;
			cds_list_del(&op->node);
			cds_list_add_tail(&op->node, &w->local_done);
			cw->inflight--;
			any = true;
		}
	}
	return any;
}

unsigned copy_cuda_inflight(const struct worker *w)
{
	const struct cuda_worker *cw = w->cuda;

	return cw ? cw->inflight : 0;
}
