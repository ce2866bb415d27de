/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssd/region.h"

uint64_t ssd_region_max_payload(const struct ssd_geom *g)
{
	/* One block: its header unit, one summary unit, the trailer unit. */
	uint64_t max = g->region_bytes - 3 * SSD_UNIT;

	return max > UINT32_MAX ? UINT32_MAX / SSD_UNIT * SSD_UNIT : max;
}

int ssd_region_place(struct ssd_region *r, const struct ssd_geom *g, uint32_t payload_len,
		     uint64_t *ret_off, uint32_t *ret_block_seq)
{
	uint64_t need = ssd_block_bytes(payload_len);

	if (payload_len == 0 || payload_len > ssd_region_max_payload(g))
		return -E2BIG;
	if (r->used + need + ssd_summary_bytes(r->nblocks + 1) + SSD_UNIT > g->region_bytes)
		return -ENOSPC;
	*ret_off = r->used;
	*ret_block_seq = r->nblocks;
	r->used += need;
	r->nblocks++;
	return 0;
}

void ssd_region_open(struct ssd_region *r, uint32_t seq)
{
	r->seq = seq;
	r->state = SSD_R_OPEN;
	r->abandoned = false;
	r->nblocks = 0;
	r->used = 0;
	r->inflight = 0;
	r->nsummary = 0;
	r->entries = SSD_NO_ENTRY;
}

int ssd_region_add_summary(struct ssd_region *r, const struct ssd_geom *g, const void *hdr)
{
	if (r->nsummary >= r->nblocks)
		return -ENOSPC;
	if (r->nsummary == r->summary_cap) {
		uint32_t cap = r->summary_cap ? r->summary_cap * 2 : 64;
		uint8_t *p;

		if (cap > g->region_bytes / (2 * SSD_UNIT) + 1)
			cap = (uint32_t)(g->region_bytes / (2 * SSD_UNIT) + 1);
		p = realloc(r->summary, (size_t)cap * SSD_HDR_SIZE);
		if (!p)
			return -ENOMEM;
		r->summary = p;
		r->summary_cap = cap;
	}
	memcpy(r->summary + (size_t)r->nsummary * SSD_HDR_SIZE, hdr, SSD_HDR_SIZE);
	r->nsummary++;
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
