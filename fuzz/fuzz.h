/* SPDX-License-Identifier: MIT */
/*
 * Shared by the fuzz targets (fuzz-*.c).  Each target is one
 * LLVMFuzzerTestOneInput() over the daemon's and libshmq's real sources;
 * `make fuzz` links it with libFuzzer (clang), and fuzz/replay.c links the
 * same file into a plain program that `make check` runs over the committed
 * corpus, so every input that once crashed stays a regression test.
 *
 * A target checks what the code under test promises, not only that it does
 * not crash: FUZZ_CHECK() aborts (a libFuzzer finding, a failed replay) when
 * a promise is broken.
 */
#ifndef KVS_FUZZ_H
#define KVS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                                      \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: broken promise: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/*
 * Mark memory the code under test must not touch (a buffer's slack past
 * what the daemon allocates).  Only ASan builds can check it.
 */
#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif
#ifdef FUZZ_ASAN
#include <sanitizer/asan_interface.h>
#define FUZZ_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define FUZZ_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define FUZZ_POISON(p, n)   ((void)(p), (void)(n))
#define FUZZ_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Little-endian field readers for the targets' input prefixes. */
static inline uint32_t fuzz_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline uint64_t fuzz_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* A private copy of exactly @n bytes, so ASan sees any read past the input. */
static inline uint8_t *fuzz_dup(const uint8_t *p, size_t n)
{
	uint8_t *q = calloc(n ? n : 1, 1);

	if (!q)
		abort();
	if (n)
		memcpy(q, p, n);
	return q;
}

#endif /* KVS_FUZZ_H */
