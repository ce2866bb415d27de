/* SPDX-License-Identifier: MIT */
/*
 * Engine-side CUDA helpers: allocate an exportable KV arena, and register
 * device pointers directly (one export per allocation, views as offsets).
 *
 * libkvstash links no CUDA library: it loads libcuda.so.1 when a CUDA
 * helper is first called, so the same library serves CPU engines on hosts
 * without a driver.  It uses the driver API only, on the calling thread's
 * current context (an engine's runtime API makes the device's primary
 * context current); with none current, the primary context of the device
 * in question is made current.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"

#if HAVE_CUDA
#include <cuda.h>

#include "common/cuda_errno.h"

#define XSTR(x) STR(x)
#define STR(x) #x

/* Driver entry points, by their ABI names (cuda.h maps e.g. cuMemAlloc to _v2). */
static struct {
	void *lib;
	int err;
	CUresult (*init)(unsigned);
	CUresult (*ctx_get_current)(CUcontext *);
	CUresult (*ctx_set_current)(CUcontext);
	CUresult (*ctx_get_device)(CUdevice *);
	CUresult (*ctx_push)(CUcontext);
	CUresult (*ctx_pop)(CUcontext *);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*device_get_uuid)(CUuuid *, CUdevice);
	CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*mem_get_address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*pointer_get_attribute)(void *, CUpointer_attribute, CUdeviceptr);
	CUresult (*ipc_get_mem_handle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*mem_retain_allocation_handle)(CUmemGenericAllocationHandle *, void *);
	CUresult (*mem_export)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
			       unsigned long long);
	CUresult (*mem_release)(CUmemGenericAllocationHandle);
	CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			       unsigned long long);
	CUresult (*mem_address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
					unsigned long long);
	CUresult (*mem_address_free)(CUdeviceptr, size_t);
	CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			    unsigned long long);
	CUresult (*mem_unmap)(CUdeviceptr, size_t);
	CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*mem_get_granularity)(size_t *, const CUmemAllocationProp *,
					CUmemAllocationGranularity_flags);
	CUresult (*mem_host_register)(void *, size_t, unsigned);
	CUresult (*mem_host_unregister)(void *);
	CUresult (*mem_host_get_device_pointer)(CUdeviceptr *, void *, unsigned);
	CUresult (*stream_wait_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
	CUresult (*stream_write_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
} D;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
	D.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!D.lib) {
		D.err = -ENODEV;
		return;
	}
#define SYM(field, name)                                         \
	do {                                                     \
		*(void **)&D.field = dlsym(D.lib, XSTR(name));   \
		if (!D.field) {                                  \
			D.err = -ENOSYS;                         \
			return;                                  \
		}                                                \
	} while (0)
	SYM(init, cuInit);
	SYM(ctx_get_current, cuCtxGetCurrent);
	SYM(ctx_set_current, cuCtxSetCurrent);
	SYM(ctx_get_device, cuCtxGetDevice);
	SYM(ctx_push, cuCtxPushCurrent);
	SYM(ctx_pop, cuCtxPopCurrent);
	SYM(device_get, cuDeviceGet);
	SYM(device_get_uuid, cuDeviceGetUuid_v2);
	SYM(primary_ctx_retain, cuDevicePrimaryCtxRetain);
	SYM(mem_alloc, cuMemAlloc);
	SYM(mem_free, cuMemFree);
	SYM(mem_get_address_range, cuMemGetAddressRange);
	SYM(pointer_get_attribute, cuPointerGetAttribute);
	SYM(ipc_get_mem_handle, cuIpcGetMemHandle);
	SYM(mem_retain_allocation_handle, cuMemRetainAllocationHandle);
	SYM(mem_export, cuMemExportToShareableHandle);
	SYM(mem_release, cuMemRelease);
	SYM(mem_create, cuMemCreate);
	SYM(mem_address_reserve, cuMemAddressReserve);
	SYM(mem_address_free, cuMemAddressFree);
	SYM(mem_map, cuMemMap);
	SYM(mem_unmap, cuMemUnmap);
	SYM(mem_set_access, cuMemSetAccess);
	SYM(mem_get_granularity, cuMemGetAllocationGranularity);
	SYM(mem_host_register, cuMemHostRegister);
	SYM(mem_host_unregister, cuMemHostUnregister);
	SYM(mem_host_get_device_pointer, cuMemHostGetDevicePointer);
	SYM(stream_wait_value32, cuStreamWaitValue32);
	SYM(stream_write_value32, cuStreamWriteValue32);
#undef SYM
	if (D.init(0) != CUDA_SUCCESS)
		D.err = -ENODEV;
}

static int driver(void)
{
	pthread_once(&once, load);
	return D.err;
}

/* Our callers name the device: a device error says it is not there. */
static int cu_errno(CUresult r)
{
	return cu_result_errno(r, -ENODEV);
}

/*
 * Make @device's context current for what follows: the thread's own when it
 * is on that device, else the device's primary context pushed on top (the
 * caller pops it with ctx_leave(), so the engine's current context is
 * untouched).  A wrong-device context would put an arena on the wrong GPU.
 */
static int ctx_enter(int device, bool *ret_pushed)
{
	CUcontext ctx = NULL;
	CUdevice cur, dev;
	CUresult r;

	*ret_pushed = false;
	r = D.device_get(&dev, device < 0 ? 0 : device);
	if (r != CUDA_SUCCESS)
		return cu_errno(r);
	if (D.ctx_get_current(&ctx) == CUDA_SUCCESS && ctx && D.ctx_get_device(&cur) == CUDA_SUCCESS &&
	    cur == dev)
		return 0;
	r = D.primary_ctx_retain(&ctx, dev);
	if (r == CUDA_SUCCESS)
		r = D.ctx_push(ctx);
	if (r == CUDA_SUCCESS)
		*ret_pushed = true;
	return cu_errno(r);
}

static void ctx_leave(bool pushed)
{
	CUcontext ctx;

	if (pushed)
		D.ctx_pop(&ctx);
}

int kvs_cuda_available(void)
{
	return driver() == 0;
}

int kvs_cuda_device_uuid(int device, uint8_t ret_uuid[16])
{
	CUdevice dev;
	CUuuid u;
	int r = driver();

	if (r < 0)
		return r;
	r = cu_errno(D.device_get(&dev, device));
	if (r == 0)
		r = cu_errno(D.device_get_uuid(&u, dev));
	if (r == 0)
		memcpy(ret_uuid, u.bytes, 16);
	return r;
}

struct arena_priv {
	CUmemGenericAllocationHandle handle; /* VMM */
};

int kvs_cuda_arena_alloc(int device, uint64_t size, uint32_t kind, struct kvs_cuda_arena *ret)
{
	CUmemAllocationProp prop = { 0 };
	CUmemAccessDesc access = { 0 };
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr p = 0;
	size_t gran = 0;
	bool pushed = false;
	int r = driver();

	if (r < 0)
		return r;
	if (size == 0 || device < 0 || (kind != KVS_MEM_CUDA_IPC && kind != KVS_MEM_CUDA_VMM_FD))
		return -EINVAL;
	r = ctx_enter(device, &pushed);
	if (r < 0)
		return r;
	if (kind == KVS_MEM_CUDA_IPC) {
		/* cuMemAlloc memory is what legacy IPC handles can export. */
		r = cu_errno(D.mem_alloc(&p, size));
		goto out;
	}
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = device;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	r = cu_errno(D.mem_get_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	if (r < 0)
		goto out;
	size = (size + gran - 1) / gran * gran;
	r = cu_errno(D.mem_create(&h, size, &prop, 0));
	if (r < 0)
		goto out;
	r = cu_errno(D.mem_address_reserve(&p, size, 0, 0, 0));
	if (r == 0) {
		r = cu_errno(D.mem_map(p, size, 0, h, 0));
		if (r < 0)
			D.mem_address_free(p, size);
	}
	if (r == 0) {
		access.location = prop.location;
		access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		r = cu_errno(D.mem_set_access(p, size, &access, 1));
		if (r < 0) {
			D.mem_unmap(p, size);
			D.mem_address_free(p, size);
		}
	}
	if (r < 0)
		D.mem_release(h);
out:
	ctx_leave(pushed);
	if (r < 0)
		return r;
	memset(ret, 0, sizeof(*ret));
	ret->dptr = p;
	ret->size = size;
	ret->kind = kind;
	ret->device = device;
	ret->priv[0] = h;
	return 0;
}

void kvs_cuda_arena_free(struct kvs_cuda_arena *a)
{
	if (!a || !a->dptr || driver() < 0)
		return;
	if (a->kind == KVS_MEM_CUDA_IPC) {
		bool pushed;

		if (ctx_enter(a->device, &pushed) == 0) {
			D.mem_free(a->dptr);
			ctx_leave(pushed);
		}
	} else {
		D.mem_unmap(a->dptr, a->size);
		D.mem_address_free(a->dptr, a->size);
		D.mem_release((CUmemGenericAllocationHandle)a->priv[0]);
	}
	a->dptr = 0;
}

/* Export one allocation: a VMM fd if it is a VMM allocation, else a legacy IPC handle. */
static int export_alloc(struct kvs_client *c, CUdeviceptr base, size_t size, struct kvs_mem *m)
{
	CUmemGenericAllocationHandle h;
	CUipcMemHandle ipc;
	int fd = -1;
	CUresult r;

	memset(m, 0, sizeof(*m));
	m->fd = -1;
	m->size = size;
	if (D.mem_retain_allocation_handle(&h, (void *)(uintptr_t)base) == CUDA_SUCCESS) {
		r = D.mem_export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		D.mem_release(h);
		if (r != CUDA_SUCCESS) {
			client_log(c, KVS_LOG_ERR,
				   "a VMM allocation must be created with requestedHandleTypes = "
				   "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR to be shared (error %d)",
				   (int)r);
			return cu_errno(r);
		}
		m->kind = KVS_MEM_CUDA_VMM_FD;
		m->fd = fd;
		return 0;
	}
	r = D.ipc_get_mem_handle(&ipc, base);
	if (r != CUDA_SUCCESS) {
		client_log(c, KVS_LOG_ERR, "cannot export the allocation at 0x%llx (error %d)",
			   (unsigned long long)base, (int)r);
		return cu_errno(r);
	}
	m->kind = KVS_MEM_CUDA_IPC;
	memcpy(m->ipc_handle, ipc.reserved, sizeof(m->ipc_handle));
	return 0;
}

int kvs_register_cuda(struct kvs_client *c, const struct kvs_cuda_layer *layers, unsigned n,
		      uint32_t flags)
{
	struct kvs_mem *mems = NULL;
	struct kvs_layer *lay = NULL;
	CUdeviceptr *bases = NULL;
	unsigned nmems = 0;
	bool pushed = false;
	int r = driver(), ordinal = 0;

	if (r < 0) {
		client_log(c, KVS_LOG_ERR, "no CUDA driver: cannot register GPU memory");
		return r;
	}
	if (!layers || n == 0)
		return -EINVAL;
	if (D.pointer_get_attribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				    layers[0].base) != CUDA_SUCCESS)
		ordinal = 0;
	r = ctx_enter(ordinal, &pushed);
	if (r < 0)
		return r;
	mems = calloc(n, sizeof(*mems));
	lay = calloc(n, sizeof(*lay));
	bases = calloc(n, sizeof(*bases));
	if (!mems || !lay || !bases) {
		r = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < n; i++) {
		const struct kvs_cuda_layer *l = &layers[i];
		CUmemoryPool pool = NULL;
		CUdeviceptr base = 0;
		size_t size = 0;
		unsigned m;

		if (D.pointer_get_attribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, l->base) ==
			    CUDA_SUCCESS &&
		    pool) {
			client_log(c, KVS_LOG_ERR,
				   "layer %s: memory from a stream-ordered pool (cudaMallocAsync) "
				   "cannot be shared between processes; allocate the KV cache with "
				   "cudaMalloc/cuMemAlloc, a VMM allocation exportable as a POSIX "
				   "fd, or kvs_cuda_arena_alloc()",
				   l->name ? l->name : "?");
			r = -EINVAL;
			goto out;
		}
		r = cu_errno(D.mem_get_address_range(&base, &size, l->base));
		if (r < 0) {
			client_log(c, KVS_LOG_ERR, "layer %s: 0x%llx is not device memory",
				   l->name ? l->name : "?", (unsigned long long)l->base);
			goto out;
		}
		for (m = 0; m < nmems && bases[m] != base; m++)
			;
		if (m == nmems) {
			/* First view into this allocation: export it once. */
			r = export_alloc(c, base, size, &mems[m]);
			if (r < 0)
				goto out;
			bases[m] = base;
			nmems++;
		}
		lay[i] = (struct kvs_layer){
			.name = l->name,
			.mem = m,
			.segments = l->segments,
			.offset = l->base - base,
			.num_blocks = l->num_blocks,
			.segment_bytes = l->segment_bytes,
			.kv_stride = l->kv_stride,
			.block_stride = l->block_stride,
		};
	}
	r = kvs_register(c, mems, nmems, lay, n, flags);
out:
	ctx_leave(pushed);
	for (unsigned m = 0; mems && m < nmems; m++)
		if (mems[m].fd >= 0)
			close(mems[m].fd); /* kvs_register() kept its own copies */
	free(mems);
	free(lay);
	free(bases);
	return r;
}

/*
 * The fence slots, registered for the GPUs (portable: every context of
 * the process; device-mapped: streams wait on and write them).  In the
 * calling thread's context, or device 0's primary one when none is
 * current.  *@ret_dptr: their device address.
 */
int client_cuda_host_register(void *p, size_t size, uint64_t *ret_dptr)
{
	CUdeviceptr d = 0;
	CUcontext ctx = NULL;
	bool pushed = false;
	int r = driver();

	if (r < 0)
		return r;
	if (D.ctx_get_current(&ctx) != CUDA_SUCCESS || !ctx) {
		r = ctx_enter(0, &pushed);
		if (r < 0)
			return r;
	}
	r = cu_errno(D.mem_host_register(p, size,
					 CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
	if (r == 0) {
		r = cu_errno(D.mem_host_get_device_pointer(&d, p, 0));
		if (r < 0)
			D.mem_host_unregister(p);
	}
	ctx_leave(pushed);
	if (r == 0)
		*ret_dptr = d;
	return r;
}

void client_cuda_host_unregister(void *p)
{
	if (driver() == 0)
		D.mem_host_unregister(p);
}

int client_cuda_stream_wait(void *stream, uint64_t dptr, uint32_t value)
{
	int r = driver();

	if (r < 0)
		return r;
	return cu_result_errno(
		D.stream_wait_value32((CUstream)stream, dptr, value, CU_STREAM_WAIT_VALUE_GEQ),
		-EINVAL);
}

int client_cuda_stream_write(void *stream, uint64_t dptr, uint32_t value)
{
	int r = driver();

	if (r < 0)
		return r;
	/* Default flags: a memory barrier first, so the KV written before it is visible. */
	return cu_result_errno(D.stream_write_value32((CUstream)stream, dptr, value, 0), -EINVAL);
}

#else /* !HAVE_CUDA */

int client_cuda_host_register(void *p, size_t size, uint64_t *ret_dptr)
{
	return -ENODEV;
}

void client_cuda_host_unregister(void *p)
{
}

int client_cuda_stream_wait(void *stream, uint64_t dptr, uint32_t value)
{
	return -ENODEV;
}

int client_cuda_stream_write(void *stream, uint64_t dptr, uint32_t value)
{
	return -ENODEV;
}

int kvs_cuda_available(void)
{
	return 0;
}

int kvs_cuda_device_uuid(int device, uint8_t ret_uuid[16])
{
	return -ENODEV;
}

int kvs_cuda_arena_alloc(int device, uint64_t size, uint32_t kind, struct kvs_cuda_arena *ret)
{
	return -ENODEV;
}

void kvs_cuda_arena_free(struct kvs_cuda_arena *a)
{
}

int kvs_register_cuda(struct kvs_client *c, const struct kvs_cuda_layer *layers, unsigned n,
		      uint32_t flags)
{
	client_log(c, KVS_LOG_ERR, "libkvstash was built without CUDA support");
	return -ENODEV;
}

#endif
