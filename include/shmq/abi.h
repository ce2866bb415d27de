/* SPDX-License-Identifier: MIT */
/*
 * libshmq shared-memory ABI: the bytes two processes agree on.
 *
 * A region is one sealed memfd.  It starts with a self-describing header
 * (struct shmq_region_hdr) followed by up to SHMQ_MAX_PARTS parts, each
 * either a ring of fixed-size entries or a plain byte area that the
 * application manages itself.
 *
 * Rules, enforced by the library and by _Static_assert below:
 *  - only fixed-width little-endian integers; no pointers, enums, bool or
 *    size_t; positions are offsets from the start of the region;
 *  - every part starts on a SHMQ_PART_ALIGN boundary;
 *  - a ring's producer state and consumer state live on separate
 *    SHMQ_LINE-byte lines so the two sides never write the same line;
 *  - ring capacity and entry size are powers of two; indices are
 *    free-running u32 values masked at use (idx & (capacity - 1)).
 *
 * The peer is untrusted: after attach nothing in this header is ever read
 * again.  Sizes and offsets come from the private copy validated at attach
 * time; indices read from shared memory are checked against that copy.
 *
 * Once released, this layout only grows within the reserved words; an
 * incompatible change bumps SHMQ_ABI_MAJOR and attach refuses it.
 */
#ifndef SHMQ_ABI_H
#define SHMQ_ABI_H

#include <stddef.h>
#include <stdint.h>

#define SHMQ_MAGIC 0x51524853u /* "SHRQ" read as little-endian bytes */
#define SHMQ_ABI_MAJOR 1
#define SHMQ_ABI_MINOR 0

#define SHMQ_MAX_PARTS 8
#define SHMQ_LINE 128		/* cache line pair: adjacent-line prefetch */
#define SHMQ_PART_ALIGN 4096	/* every part is page aligned */

/* shmq_part.kind */
#define SHMQ_PART_RING 1u
#define SHMQ_PART_AREA 2u

/* shmq_ring_wakeup.flags: set by the consumer, read by the producer. */
#define SHMQ_RING_NEED_WAKEUP (1u << 0)

/* Limits on what a header may describe; attach refuses anything beyond. */
#define SHMQ_ENTRY_SIZE_MIN 8u
#define SHMQ_ENTRY_SIZE_MAX 4096u
#define SHMQ_CAPACITY_MIN 2u
#define SHMQ_CAPACITY_MAX (1u << 24)
#define SHMQ_REGION_SIZE_MAX (1ull << 40)

struct shmq_part {
	uint32_t kind;		 /* SHMQ_PART_RING or SHMQ_PART_AREA */
	uint32_t id;		 /* chosen by the application, unique */
	uint64_t offset;	 /* from region start; SHMQ_PART_ALIGN aligned */
	uint64_t size;		 /* bytes of the whole part */
	uint32_t entry_size;	 /* ring: bytes per entry; area: 0 */
	uint32_t capacity;	 /* ring: entries; area: 0 */
	uint64_t entries_offset; /* ring: from part start; area: 0 */
	uint64_t resv[3];
};

struct shmq_region_hdr {
	uint32_t magic;		/* SHMQ_MAGIC */
	uint16_t abi_major;	/* SHMQ_ABI_MAJOR: must match exactly */
	uint16_t abi_minor;	/* SHMQ_ABI_MINOR: additions only */
	uint32_t hdr_size;	/* sizeof(struct shmq_region_hdr) */
	uint32_t nr_parts;	/* <= SHMQ_MAX_PARTS */
	uint64_t region_size;	/* bytes; equals the memfd's size */
	uint32_t app_magic;	/* the application's tag for this region */
	uint32_t app_version;	/* the application's layout version */
	uint64_t resv[4];
	struct shmq_part parts[SHMQ_MAX_PARTS];
};

/*
 * The control block at the start of every ring part: four lines.
 *
 *   prod    tail and the futex word, written by the producer
 *   pad     empty, so that hardware adjacent-line prefetch does not couple
 *           the two sides
 *   cons    head, written by the consumer on every release
 *   wakeup  NEED_WAKEUP, written by the consumer only when it goes to sleep
 *           or wakes up, read by the producer after every commit
 *
 * The flags word has a line of its own because of who reads it when: the
 * producer loads it on every commit (the NEED_WAKEUP handshake), so next
 * to head it would pull the line the consumer dirties on every release
 * across cores once per commit.  Alone, it stays shared in both caches
 * while the consumer is awake.  The entries follow at entries_offset.
 */
struct shmq_ring_prod {
	uint32_t tail;	/* next index the producer fills; written by producer */
	uint32_t wake;	/* futex word: producer bumps it to wake a sleeper */
	uint32_t resv[SHMQ_LINE / 4 - 2];
};

struct shmq_ring_cons {
	uint32_t head;	/* next index the consumer reads; written by consumer */
	uint32_t resv[SHMQ_LINE / 4 - 1];
};

struct shmq_ring_wakeup {
	uint32_t flags; /* SHMQ_RING_NEED_WAKEUP; written by consumer */
	uint32_t resv[SHMQ_LINE / 4 - 1];
};

struct shmq_ring_ctrl {
	struct shmq_ring_prod prod;
	uint8_t pad[SHMQ_LINE];
	struct shmq_ring_cons cons;
	struct shmq_ring_wakeup wakeup;
};

#define SHMQ_RING_ENTRIES_OFFSET ((uint64_t)sizeof(struct shmq_ring_ctrl))

_Static_assert(sizeof(struct shmq_part) == 64, "shmq_part layout");
_Static_assert(offsetof(struct shmq_part, offset) == 8, "shmq_part.offset");
_Static_assert(offsetof(struct shmq_part, entries_offset) == 32, "shmq_part.entries_offset");
_Static_assert(offsetof(struct shmq_region_hdr, region_size) == 16, "hdr.region_size");
_Static_assert(offsetof(struct shmq_region_hdr, app_magic) == 24, "hdr.app_magic");
_Static_assert(offsetof(struct shmq_region_hdr, parts) == 64, "hdr.parts");
_Static_assert(sizeof(struct shmq_region_hdr) == 64 + 64 * SHMQ_MAX_PARTS, "hdr size");
_Static_assert(sizeof(struct shmq_region_hdr) <= SHMQ_PART_ALIGN, "hdr fits one page");
_Static_assert(sizeof(struct shmq_ring_prod) == SHMQ_LINE, "prod line");
_Static_assert(sizeof(struct shmq_ring_cons) == SHMQ_LINE, "cons line");
_Static_assert(sizeof(struct shmq_ring_wakeup) == SHMQ_LINE, "wakeup line");
_Static_assert(offsetof(struct shmq_ring_ctrl, cons) == 2 * SHMQ_LINE, "cons line offset");
_Static_assert(offsetof(struct shmq_ring_ctrl, wakeup) == 3 * SHMQ_LINE, "wakeup line offset");
_Static_assert(sizeof(struct shmq_ring_ctrl) == 4 * SHMQ_LINE, "ring ctrl size");

#endif /* SHMQ_ABI_H */
