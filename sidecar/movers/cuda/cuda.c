/* SPDX-License-Identifier: MIT */
/*
 * The CUDA mover (see cuda.h): GPU discovery, pinning the pool, importing
 * engine GPU memory (legacy IPC handles and VMM POSIX fds), and the data
 * path.  Two ways of moving a batch share one completion path:
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
 * directions run at once.  A batch's copies are followed by an event; the
 * worker polls the events in submission order per stream.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "base/conf.h"
#include "base/util.h"
#include "io/batch.h"
#include "io/mem.h"
#include "io/mover.h"
#include "movers/cuda/cuda.h"
#include "obs/log.h"

#define DRIVER_API_VERSION 12000 /* ABI of the driver entry points we call */

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
};

static struct cuda_driver cuda_drv;

/* Written by cuda_init() and cuda_fini() (control thread), read-only in between. */
static struct {
	unsigned n;
	struct cuda_device_info dev[CUDA_MAX_DEVICES];
	const struct kvs_config *cfg;
} C;

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

static int cuda_drv_errno(CUresult r)
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
static int cuda_init(const struct kvs_config *cfg)
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

static void cuda_fini(void)
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

static int cuda_device_node(unsigned dev)
{
	return C.dev[dev].numa_node;
}

static int cuda_ordinal(unsigned dev)
{
	return C.dev[dev].ordinal;
}

static const struct kvs_config *cuda_config(void)
{
	return C.cfg;
}

/* Pin a pool region (mapped, portable); logs the time it took. */
static int cuda_pin(void *base, uint64_t size)
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

static void cuda_unpin(void *base)
{
	if (C.n)
		cudaHostUnregister(base);
}

/* ---- imports ------------------------------------------------------- */

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

static int cuda_mem_import(unsigned dev, const struct kvs_wire_mem *m, int fd, uint64_t lo,
			   uint64_t hi, struct mem_import *ret, char *why, size_t wl)
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

static void cuda_mem_release(struct mem_import *imp)
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

/* ---- the mover ------------------------------------------------------ */

#define DESC_RING_BYTES (8u << 20) /* per stream: ~350k descriptors */
#define KERNEL_SPLIT (64u << 10)   /* descriptors of at most this many bytes */
#define KERNEL_THREADS 512u

struct kvs_desc {
	uint64_t dst;
	uint64_t src;
	uint64_t len;
};

extern const unsigned char kvs_gather_fatbin[];

struct cuda_stream {
	cudaStream_t stream;
	struct cds_list_head fifo; /* batches in submission order (copy_batch.node) */
	struct kvs_desc *ring;	   /* mapped pinned descriptors */
	uint64_t cap;		   /* descriptors */
	uint64_t head, tail;	   /* free-running; [head, tail) in use */
};

struct cuda_worker {
	struct mover m;
	unsigned dev;
	unsigned wid;		  /* the worker's number, for logs */
	struct cuda_stream st[2]; /* by enum copy_dir */
	CUmodule mod;
	CUfunction gather;
	unsigned ctas;
	enum cuda_mover mode;  /* [cuda] mover */
	uint64_t kernel_below; /* [cuda] kernel_below */
	unsigned inflight;
	cudaEvent_t *events; /* free stack */
	unsigned nevents, cap_events;
};

/* A batch in flight (copy_batch.priv). */
struct cuda_op {
	cudaEvent_t ev;
	uint64_t desc_end; /* ring tail after this batch (0: no descriptors) */
	bool kernel;
	int err; /* a failure at submit, reported when the event says the rest is done */
};

static inline struct cuda_worker *cuda_worker_of(struct mover *m)
{
	return caa_container_of(m, struct cuda_worker, m);
}

static int cuda_worker_init(unsigned dev, unsigned wid, struct mover **ret)
{
	const struct kvs_config *cfg = cuda_config();
	struct cuda_worker *cw = calloc(1, sizeof(*cw));
	CUresult cr;
	cudaError_t e;

	if (!cw)
		return -ENOMEM;
	cw->m.ops = &cuda_mover;
	cw->dev = dev;
	cw->wid = wid;
	e = cudaSetDevice(cuda_ordinal(dev));
	for (int i = 0; i < 2 && e == cudaSuccess; i++) {
		CDS_INIT_LIST_HEAD(&cw->st[i].fifo);
		e = cudaStreamCreateWithFlags(&cw->st[i].stream, cudaStreamNonBlocking);
		if (e == cudaSuccess)
			e = cudaHostAlloc((void **)&cw->st[i].ring, DESC_RING_BYTES,
					  cudaHostAllocMapped | cudaHostAllocPortable);
		cw->st[i].cap = DESC_RING_BYTES / sizeof(struct kvs_desc);
	}
	if (e != cudaSuccess) {
		log_error("cuda: worker %u: cannot create streams: %s", wid, cudaGetErrorString(e));
		free(cw);
		return cuda_errno(e);
	}
	cr = cuda_drv.module_load_data(&cw->mod, kvs_gather_fatbin);
	if (cr == CUDA_SUCCESS)
		cr = cuda_drv.module_get_function(&cw->gather, cw->mod, "kvs_gather");
	if (cr != CUDA_SUCCESS) {
		/* Without the kernel the DMA mover still works. */
		log_warning("cuda: worker %u: cannot load the gather kernel (error %d): DMA only",
			    wid, (int)cr);
		cw->gather = NULL;
	}
	/* Parsed at load (base/conf.c): nothing is compared per batch but numbers. */
	cw->mode = cfg->cuda_mover;
	cw->kernel_below = cfg->cuda_kernel_below;
	cw->ctas = cfg->cuda_kernel_ctas ? cfg->cuda_kernel_ctas : 4 * cuda_device(dev)->sms;
	*ret = &cw->m;
	return 0;
}

static void cuda_worker_fini(struct mover *m)
{
	struct cuda_worker *cw = cuda_worker_of(m);

	cudaSetDevice(cuda_ordinal(cw->dev));
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
		cuda_drv.module_unload(cw->mod);
	free(cw);
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
	if (!cw->gather || b->n == 0 || cw->mode == CUDA_MOVER_DMA)
		return false;
	for (uint32_t i = 0; i < b->n; i++)
		if ((b->pieces[i].dev | (uintptr_t)b->pieces[i].pool | b->pieces[i].len) & 15)
			return false; /* the kernel moves 16-byte words */
	if (cw->mode == CUDA_MOVER_KERNEL)
		return true;
	/*
	 * auto: saves run in the background, where DMA costs the engine
	 * nothing; loads are on the time-to-first-token path, where small
	 * fragments need the kernel to reach the PCIe limit.
	 */
	return b->dir == COPY_FROM_POOL && b->bytes / b->n < cw->kernel_below;
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

static int launch_kernel(struct cuda_worker *cw, struct cuda_stream *s, struct copy_batch *b,
			 struct cuda_op *co)
{
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
			uint64_t pool = (uint64_t)(uintptr_t)p->pool + off, dev = p->dev + off;

			d[k++] = b->dir == COPY_TO_POOL ? (struct kvs_desc){ pool, dev, len } :
							  (struct kvs_desc){ dev, pool, len };
		}
	}
	/* Host pointer == device pointer for mapped pinned memory (checked in cuda_pin()). */
	void *dd = d;

	params[0] = &dd;
	params[1] = &nd;
	grid = MIN(nd, cw->ctas);
	cr = cuda_drv.launch_kernel(cw->gather, grid, 1, 1, KERNEL_THREADS, 1, 1, 0,
				    (CUstream)s->stream, params, NULL);
	if (cr != CUDA_SUCCESS) {
		s->tail = co->desc_end - n; /* nothing was queued: give the descriptors back */
		co->desc_end = 0;
		return cuda_drv_errno(cr);
	}
	co->kernel = true;
	return 0;
}

static int launch_dma(struct cuda_stream *s, const struct copy_batch *b)
{
	for (uint32_t i = 0; i < b->n; i++) {
		const struct piece *p = &b->pieces[i];
		void *eng = (void *)(uintptr_t)p->dev;
		cudaError_t e = b->dir == COPY_TO_POOL ?
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

static void cuda_submit(struct mover *m, struct copy_batch *b)
{
	struct cuda_worker *cw = cuda_worker_of(m);
	struct cuda_stream *s = &cw->st[b->dir];
	struct cuda_op *co = calloc(1, sizeof(*co));
	int r = -ENOMEM;

	if (co && event_get(cw, &co->ev) == 0) {
		r = -ENOSPC;
		if (want_kernel(cw, b))
			r = launch_kernel(cw, s, b, co);
		if (r < 0)
			r = launch_dma(s, b);
		if (cudaEventRecord(co->ev, s->stream) != cudaSuccess && r == 0)
			r = -EIO;
	}
	if (r < 0) {
		/*
		 * Copies already queued may still run: the batch completes
		 * through its event when one was recorded, else right away.
		 */
		r = r == -ENOSPC ? -EIO : r;
		if (!co || !co->ev) {
			free(co);
			b->priv = NULL;
			batch_complete(b, r);
			return;
		}
		co->err = r;
	}
	b->priv = co;
	cds_list_add_tail(&b->node, &s->fifo);
	cw->inflight++;
}

static bool cuda_poll(struct mover *m)
{
	struct cuda_worker *cw = cuda_worker_of(m);
	bool any = false;

	if (!cw->inflight)
		return false;
	for (int i = 0; i < 2; i++) {
		struct cuda_stream *s = &cw->st[i];

		while (!cds_list_empty(&s->fifo)) {
			struct copy_batch *b =
				cds_list_first_entry(&s->fifo, struct copy_batch, node);
			struct cuda_op *co = b->priv;
			cudaError_t e = cudaEventQuery(co->ev);
			int err = co->err;

			if (e == cudaErrorNotReady)
				break;
			if (e != cudaSuccess) {
				log_error("cuda: worker %u: copy failed: %s", cw->wid,
					  cudaGetErrorString(e));
				cudaGetLastError();
				if (!err)
					err = -EIO;
			}
			/* In-order stream: every earlier descriptor is free too. */
			if (co->desc_end)
				s->head = co->desc_end;
			event_put(cw, co->ev);
			free(co);
			b->priv = NULL;
			cds_list_del(&b->node);
			cw->inflight--;
			batch_complete(b, err);
			any = true;
		}
	}
	return any;
}

static unsigned cuda_inflight(const struct mover *m)
{
	return caa_container_of(m, const struct cuda_worker, m)->inflight;
}

const struct mover_ops cuda_mover = {
	.name = "cuda",
	.dev_name = "GPU",
	.device_kind = KVS_DEVICE_CUDA,
	.mem_kinds = MEM_KIND(KVS_MEM_CUDA_IPC) | MEM_KIND(KVS_MEM_CUDA_VMM_FD),
	.init = cuda_init,
	.fini = cuda_fini,
	.device_node = cuda_device_node,
	.pin = cuda_pin,
	.unpin = cuda_unpin,
	.import = cuda_mem_import,
	.release = cuda_mem_release,
	.worker_init = cuda_worker_init,
	.worker_fini = cuda_worker_fini,
	.submit = cuda_submit,
	.poll = cuda_poll,
	.inflight = cuda_inflight,
};
