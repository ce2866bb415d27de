/* SPDX-License-Identifier: MIT */
/*
 * Bit tests and rounding that libshmq, libkvstash, libkvspeer and
 * kvstashd all do on ring sizes, slots and configuration values: one
 * definition, header-only, nothing exported.
 */
#ifndef KVS_COMMON_BITS_H
#define KVS_COMMON_BITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A power of two, 0 not being one. */
static inline bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/* @v rounded up to a multiple of @align (not 0); the caller keeps it from wrapping. */
static inline uint64_t round_up_u64(uint64_t v, uint64_t align)
{
	return (v + align - 1) / align * align;
}

/* The least power of two >= @v (1 for 0), @v at most 2^31. */
static inline uint32_t next_pow2_u32(uint32_t v)
{
	if (v <= 1)
		return 1;
	return 1u << (32 - __builtin_clz(v - 1));
}

/* MurmurHash3's 64-bit finalizer: every input bit reaches every output bit. */
static inline uint64_t fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return k;
}

/*
 * Whether the @n bytes at @p are all zero (reserved fields of a message,
 * an unwritten header).  The first byte is zero and each byte equals the
 * next: memcmp() does the comparing at its own speed.
 */
static inline bool all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;

	return !n || (!b[0] && !memcmp(b, b + 1, n - 1));
}

#endif /* KVS_COMMON_BITS_H */
