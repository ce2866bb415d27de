/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend of kvstashd: GPU discovery (by UUID, never ordinal),
 * pinning the pool, importing engine GPU memory (legacy IPC handles and
 * VMM POSIX fds), and the GPU mover (copy engines and a gather kernel).
 *
 * The CUDA runtime is linked statically and driver functions are reached
 * through cudaGetDriverEntryPointByVersion, so kvstashd needs no libcuda
 * to link and starts on hosts without a driver: cuda_init() then finds no
 * device, host sessions work, and CUDA registrations are refused.
 *
 * Built without CUDA, every function here reports "no device".
 */
#ifndef KVS_CUDA_H
#define KVS_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include <kvstash/wire.h>

#define CUDA_MAX_DEVICES 64

struct kvs_config;
struct mem_import;
struct worker;
struct op;

struct cuda_device_info {
	int ordinal;		 /* inside kvstashd only: engines name devices by UUID */
	uint8_t uuid[16];
	char bus_id[32];	 /* PCI bus id, e.g. 0000:19:00.0 */
	int numa_node;		 /* from sysfs; -1: none */
	char name[64];
	unsigned sms;
};

/*
 * Find the GPUs.  Returns how many (0 without a driver or device, or when
 * [cuda] enable = no), or -errno when [cuda] enable = yes and none is
 * usable.  Logs what it found.
 */
int cuda_init(const struct kvs_config *cfg);
void cuda_fini(void);
unsigned cuda_device_count(void);
const struct cuda_device_info *cuda_device(unsigned idx);
/* Index of the device with @uuid, or -ENODEV. */
int cuda_device_find(const uint8_t uuid[16]);

/* Pin a pool region (mapped, portable); logs the time it took. */
int cuda_pin(void *base, uint64_t size);
void cuda_unpin(void *base);

/*
 * Import allocation @m for device @dev: a legacy IPC handle (one import
 * per distinct handle, shared and reference-counted) or a VMM fd (taken
 * over on success).  Bounds are checked against the real allocation.
 */
int cuda_mem_import(unsigned dev, const struct kvs_wire_mem *m, int fd, struct mem_import *ret,
		    char *why, size_t wl);

/* Per-worker GPU state: streams, events, descriptor rings, the kernel. */
int cuda_worker_init(struct worker *w, unsigned dev);
void cuda_worker_fini(struct worker *w);
/* Start @op's copies on the worker's GPU; completion via copy_cuda_poll(). */
void copy_cuda_submit(struct worker *w, struct op *op);
/* Move finished ops to the worker's done list; true if any finished. */
bool copy_cuda_poll(struct worker *w);
/* Ops submitted and not yet finished. */
unsigned copy_cuda_inflight(const struct worker *w);

#endif /* KVS_CUDA_H */
