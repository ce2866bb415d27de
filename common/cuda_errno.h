/* SPDX-License-Identifier: MIT */
/*
 * CUresult -> -errno: the one mapping of CUDA driver errors, for
 * libkvstash's CUDA helpers (client/cuda.c) and kvstashd's CUDA mover
 * (sidecar/movers/cuda/).  Header-only; include it only where <cuda.h> is
 * (builds with CUDA).
 *
 * The two report "no such device" differently, as they always have:
 * libkvstash's callers name a device (an ordinal, a UUID), so -ENODEV
 * says which argument was wrong; in kvstashd the device is its own, and
 * a device error in the middle of an import or a copy is -EIO like any
 * other driver failure.  Hence @device_err.
 */
#ifndef KVS_COMMON_CUDA_ERRNO_H
#define KVS_COMMON_CUDA_ERRNO_H

#include <errno.h>

#include <cuda.h>

static inline int cu_result_errno(CUresult r, int device_err)
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
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
		return device_err;
	default:
		return -EIO;
	}
}

#endif /* KVS_COMMON_CUDA_ERRNO_H */
