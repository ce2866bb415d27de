/* SPDX-License-Identifier: MIT */
/*
 * The region allocator of one drive: which region is open, where its next
 * block goes, which region is reused next, and what recovery makes of the
 * region sequences it found.  Pure bookkeeping (no I/O), owned by the
 * drive's thread, so nothing here is locked or atomic.
 *
 * Regions form a ring reused in FIFO order: region i + 1 is opened after
 * region i, so the oldest region is always the next one overwritten and
 * the drive sees sequential writes.  Each opening takes the next region
 * sequence number (u32, serial arithmetic: format.h).
 *
 * Inside a region blocks are placed back to back from its start; a block
 * fits only if the summary (grown by its header) and the trailer still
 * fit behind it, so sealing a full region never needs more space.
 */
#ifndef KVS_SSD_REGION_H
#define KVS_SSD_REGION_H

#include <stdbool.h>
#include <stdint.h>

#include "ssd/format.h"

enum ssd_region_state {
	SSD_R_EMPTY,   /* nothing valid in it: free to open */
	SSD_R_OPEN,    /* taking blocks */
	SSD_R_SEALING, /* full: waiting for its writes, then summary and trailer */
	SSD_R_SEALED,  /* trailer written (or abandoned after an error): read-only */
};

#define SSD_NO_ENTRY UINT32_MAX

struct ssd_region {
	uint32_t seq;
	uint8_t state;
	bool abandoned;	   /* an error: closed without a trailer */
	uint32_t nblocks;  /* placed this cycle: the next block_seq */
	uint64_t used;	   /* bytes placed from the region's start */
	uint32_t inflight; /* writes placed and not completed */
	uint32_t reads;	   /* reads in flight: the region may not be reused */
	uint32_t nsummary; /* completed blocks in summary */
	uint32_t summary_cap;
	uint8_t *summary; /* their headers, SSD_HDR_SIZE each (encoded) */
	uint32_t entries; /* first index entry of this region (index.h list) */
};

/* The region after @i in FIFO order. */
static inline uint32_t ssd_ring_next(const struct ssd_geom *g, uint32_t i)
{
	return i + 1 == g->nr_regions ? 0 : i + 1;
}

/*
 * Place a block of @payload_len in open region @r: its byte offset from
 * the region's start and its block sequence.  -ENOSPC when it does not
 * fit (the region is full: seal it), -E2BIG when it could not fit even an
 * empty region.
 */
int ssd_region_place(struct ssd_region *r, const struct ssd_geom *g, uint32_t payload_len,
		     uint64_t *ret_off, uint32_t *ret_block_seq);

/* Largest payload a region can hold. */
uint64_t ssd_region_max_payload(const struct ssd_geom *g);

/* Reset @r for a new cycle under @seq (its summary buffer is kept). */
void ssd_region_open(struct ssd_region *r, uint32_t seq);

/*
 * Append a completed block's encoded header to @r's summary.  -ENOMEM;
 * -ENOSPC past what ssd_region_place() reserved (a bug).
 */
int ssd_region_add_summary(struct ssd_region *r, const struct ssd_geom *g, const void *hdr);

/*
 * Recovery: of the regions with @valid[i], the newest by serial order of
 * @seq[i]: its index in *@ret_head.  -ENOENT when none is valid.  Ties
 * cannot happen on a consistent drive; the lowest index wins.
 */
int ssd_pick_head(const uint32_t *seq, const bool *valid, uint32_t n, uint32_t *ret_head);

#endif /* KVS_SSD_REGION_H */
