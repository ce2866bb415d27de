/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "ssd/region-alloc.h"

uint64_t ssd_region_max_payload(const struct ssd_geom *g)
{
	uint64_t max = g->payload_bytes;

	return max > UINT32_MAX ? UINT32_MAX / SSD_UNIT * SSD_UNIT : max;
}

int ssd_region_place(struct ssd_region *r, const struct ssd_geom *g, uint32_t payload_len,
		     uint64_t *ret_off, uint32_t *ret_block_seq)
{
	uint64_t need = ssd_block_bytes(payload_len);

	if (payload_len == 0 || payload_len > ssd_region_max_payload(g))
		return -E2BIG;
	if (r->used + need > g->payload_bytes || r->nblocks >= g->zone_entries)
		return -ENOSPC;
	*ret_off = r->used;
	*ret_block_seq = r->nblocks;
	r->used += need;
	r->nblocks++;
	return 0;
}

int ssd_region_open(struct ssd_region *r, const struct ssd_geom *g, uint32_t seq)
{
	uint32_t units = ssd_zone_units(g);

	if (!r->zone) {
		if (posix_memalign((void **)&r->zone, SSD_UNIT, g->zone_bytes))
			r->zone = NULL;
		r->units = calloc(units, 1);
		r->covered = calloc(units, sizeof(*r->covered));
		if (!r->zone || !r->units || !r->covered) {
			ssd_region_close(r);
			return -ENOMEM;
		}
	}
	memset(r->zone, 0, g->zone_bytes);
	memset(r->units, 0, units);
	memset(r->covered, 0, units * sizeof(*r->covered));
	r->seq = seq;
	r->state = SSD_R_OPEN;
	r->abandoned = false;
	r->opening = false;
	r->nblocks = 0;
	r->used = 0;
	r->inflight = 0;
	r->entries = SSD_NO_ENTRY;
	return 0;
}

void ssd_region_close(struct ssd_region *r)
{
	r->zone = mfree(r->zone);
	r->units = mfree(r->units);
	r->covered = mfree(r->covered);
}

int ssd_region_set_entry(struct ssd_region *r, const struct ssd_geom *g, uint32_t i,
			 const void *hdr)
{
	uint8_t *p;

	if (!r->zone || i >= g->zone_entries)
		return -ERANGE;
	p = r->zone + g->zone_bytes - (uint64_t)(i + 1) * SSD_HDR_SIZE;
	if (hdr)
		memcpy(p, hdr, SSD_HDR_SIZE);
	else
		memset(p, 0, SSD_HDR_SIZE);
	r->units[ssd_entry_unit(i)] |= SSD_UNIT_DIRTY;
	return 0;
}

int ssd_pick_head(const uint32_t *seq, const bool *valid, uint32_t n, uint32_t *ret_head)
{
	uint32_t best = UINT32_MAX;

	for (uint32_t i = 0; i < n; i++) {
		if (!valid[i])
			continue;
		if (best == UINT32_MAX || ssd_seq_after(seq[i], seq[best]))
			best = i;
	}
	if (best == UINT32_MAX)
		return -ENOENT;
	*ret_head = best;
	return 0;
}
