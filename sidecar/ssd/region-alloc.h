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
 * Inside a region payloads are placed back to back from its start, up to
 * the header zone; a block fits if its payload does and a zone entry is
 * left.  The zone's image is kept in memory while the region is open, and
 * its units are written as entries are added: at most one write of a unit
 * at a time (a second one could land first and lose an entry), a unit
 * changed meanwhile is written again after it.
 */
#ifndef KVS_SSD_REGION_ALLOC_H
#define KVS_SSD_REGION_ALLOC_H

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

#define SSD_UNIT_DIRTY	  0x1u /* changed since its last write was started */
#define SSD_UNIT_INFLIGHT 0x2u /* a write of it is in flight */

struct ssd_region {
	uint32_t seq;
	uint8_t state;
	bool abandoned;	   /* an error: no more blocks go in */
	bool opening;	   /* its old cycle's first entries and trailer are being erased */
	bool erased;	   /* that erase landed; durable once the datasync after it is */
	bool syncing;	   /* that datasync is in flight */
	uint32_t nblocks;  /* placed this cycle: the next entry (block_seq) */
	uint64_t used;	   /* payload bytes placed from the region's start */
	uint32_t inflight; /* block, zone unit and trailer writes not completed */
	uint32_t payloads; /* of them, block payload writes (zone_kick() waits for them) */
	uint32_t reads;	   /* reads in flight: the region may not be reused */
	uint8_t *zone;	   /* image of the header zone while open (aligned), or NULL */
	uint8_t *units;	   /* per zone unit: SSD_UNIT_* */
	uint32_t *covered; /* per zone unit: entries below this are in its write in flight */
	uint32_t entries;  /* first index entry of this region (index.h list) */
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

/* Reset @r for a new cycle under @seq, with a zeroed zone image: -ENOMEM. */
int ssd_region_open(struct ssd_region *r, const struct ssd_geom *g, uint32_t seq);

/* Drop the zone image (the region is sealed: nothing more is written). */
void ssd_region_close(struct ssd_region *r);

/*
 * Put entry @i (an encoded header, or NULL to clear it) into the zone
 * image and mark its unit dirty.  -ERANGE past the zone or without an
 * image.
 */
int ssd_region_set_entry(struct ssd_region *r, const struct ssd_geom *g, uint32_t i,
			 const void *hdr);

/* The image of zone unit @u (SSD_UNIT bytes). */
static inline const uint8_t *ssd_region_unit(const struct ssd_region *r, const struct ssd_geom *g,
					     uint32_t u)
{
	return r->zone + g->zone_bytes - (uint64_t)(u + 1) * SSD_UNIT;
}

/* Units of the zone. */
static inline uint32_t ssd_zone_units(const struct ssd_geom *g)
{
	return (uint32_t)(g->zone_bytes / SSD_UNIT);
}

/*
 * Recovery: of the regions with @valid[i], the newest by serial order of
 * @seq[i]: its index in *@ret_head.  -ENOENT when none is valid.  Ties
 * cannot happen on a consistent drive; the lowest index wins.
 */
int ssd_pick_head(const uint32_t *seq, const bool *valid, uint32_t n, uint32_t *ret_head);

#endif /* KVS_SSD_REGION_ALLOC_H */
