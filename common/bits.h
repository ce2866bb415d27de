/* SPDX-License-Identifier: MIT */
/*
 * Bit tests and rounding that libshmq, libkvstash, libkvspeer and
 * kvstashd all do on ring sizes, slots and configuration values: one
 * definition, header-only, nothing exported.
 */
#ifndef KVS_COMMON_BITS_H
#define KVS_COMMON_BITS_H

#include <stdbool.h>
#include <stdint.h>

/* A power of two, 0 not being one. */
static inline bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/* @v rounded up to a multiple of @align, a power of two; the caller keeps it from wrapping. */
static inline uint64_t align_up_u64(uint64_t v, uint64_t align)
{
	return (v + align - 1) & ~(align - 1);
}

#endif /* KVS_COMMON_BITS_H */
