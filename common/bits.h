/* SPDX-License-Identifier: MIT */
/*
 * Bit tests that libshmq, libkvstash and kvstashd all make on ring sizes
 * and configuration values: one definition, header-only, nothing
 * exported.
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

#endif /* KVS_COMMON_BITS_H */
