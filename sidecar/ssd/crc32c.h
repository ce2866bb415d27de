/* SPDX-License-Identifier: MIT */
/*
 * CRC-32C (Castagnoli, the iSCSI polynomial 0x1EDC6F41, reflected), the
 * checksum of every on-disk structure of the SSD tier.
 *
 * The SSE4.2 crc32 instruction computes it; crc32c_init() finds out once
 * (cpuid) whether the CPU has it.  Three independent streams run
 * interleaved over large buffers (the instruction has a latency of three
 * cycles and a throughput of one) and are joined with crc32c_combine(),
 * so a 2 MiB payload is checked at memory speed rather than a third of
 * it.  A slice-by-8 table serves CPUs without the instruction only.
 *
 * Thread-safety: crc32c_init() must have returned before another thread
 * computes a checksum (ssd_open() calls it); everything else is pure.
 */
#ifndef KVS_SSD_CRC32C_H
#define KVS_SSD_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Pick the implementation; idempotent.  Returns true with SSE4.2. */
bool crc32c_init(void);

/*
 * Continue @crc (0 to start) over @len bytes at @buf: the standard value
 * (inverted in and out), so crc32c(0, "123456789", 9) == 0xE3069283.
 */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/* The CRC of A || B from crc(A), crc(B) and the length of B. */
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* The table implementation alone, for tests comparing the two paths. */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* True when crc32c() uses the instruction. */
bool crc32c_hw(void);

#endif /* KVS_SSD_CRC32C_H */
