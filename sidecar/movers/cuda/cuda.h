/* SPDX-License-Identifier: MIT */
/*
 * The CUDA mover, as the rest of kvstashd sees it: its ops table (for the
 * mover table in io/movers.c) and the GPUs it found, by UUID (never by
 * ordinal: CUDA_VISIBLE_DEVICES renumbers), for HELLO and status.
 *
 *   device.c  GPU discovery, pool pinning, the driver entry points and
 *             the CUresult / cudaError_t -> errno mapping
 *   import.c  engine GPU memory: legacy IPC handles and VMM fds
 *   copy.c    the data path: copy engines and a gather kernel
 *   stub.c    all of it for builds without CUDA: no device
 *
 * The CUDA runtime is linked statically and driver functions are reached
 * through cudaGetDriverEntryPointByVersion, so kvstashd needs no libcuda
 * to link and starts on hosts without a driver: the mover then finds no
 * device, host sessions work, and CUDA sessions are refused.
 *
 * This header needs no CUDA header; internal.h is the folder's own.
 */
#ifndef KVS_MOVERS_CUDA_H
#define KVS_MOVERS_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "io/mover.h"

#define CUDA_MAX_DEVICES MOVER_MAX_DEVICES

extern const struct mover_ops cuda_mover;

struct cuda_device_info {
	int ordinal;		 /* inside kvstashd only: engines name devices by UUID */
	uint8_t uuid[16];
	char bus_id[32];	 /* PCI bus id, e.g. 0000:19:00.0 */
	int numa_node;		 /* from sysfs; -1: none */
	char name[64];
	unsigned sms;
};

/* After the mover's init (movers_init()): the GPUs found, 0 without a driver or device. */
unsigned cuda_device_count(void);
const struct cuda_device_info *cuda_device(unsigned idx);
/* Index of the device with @uuid, or -ENODEV. */
int cuda_device_find(const uint8_t uuid[16]);

/*
 * The find_device op of both CUDA mover tables (copy.c, stub.c): the
 * GPU a HELLO names by UUID, or -ENODEV and what the engine is told.
 */
static inline int cuda_find_device(const uint8_t uuid[16], char *why, size_t wl)
{
	int r = cuda_device_find(uuid);

	if (r < 0)
		snprintf(why, wl, "GPU %02x%02x%02x%02x-... is not visible to kvstashd%s", uuid[0],
			 uuid[1], uuid[2], uuid[3],
			 cuda_device_count() ? "" : " (no CUDA device or driver here)");
	return r;
}

#endif /* KVS_MOVERS_CUDA_H */
