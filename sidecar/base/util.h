/* SPDX-License-Identifier: MIT */
/* Small helpers shared by kvstashd's files. */
#ifndef KVS_UTIL_H
#define KVS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "common/bits.h" /* is_pow2(), round_up_u64(), next_pow2_u32(), fmix64() */

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define NSEC_PER_MSEC 1000000ull
#define NSEC_PER_SEC 1000000000ull

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* Copy a fixed-size wire string; false if it is not NUL-terminated. */
static inline bool wire_string(char *dst, const char *src, size_t size)
{
	const char *nul = memchr(src, '\0', size);

	if (!nul)
		return false;
	memcpy(dst, src, (size_t)(nul - src) + 1);
	return true;
}

/* Bounded copy into a fixed array, always NUL-terminated. */
static inline void strscpy_trunc(char *dst, const char *src, size_t size)
{
	size_t n = strnlen(src, size - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

#endif /* KVS_UTIL_H */
