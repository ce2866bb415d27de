/* SPDX-License-Identifier: MIT */
/*
 * Recovery on open: every region's tail (its header zone and trailer) is
 * read, and the blocks whose entries check out go into the index, region
 * by region, so ssd_lookup() finds a block as soon as its region is
 * scanned.  The newest region (serial order of the sequences) tells where
 * the FIFO goes on.  Nothing is written: a region whose first entry and
 * trailer were erased (reclaim.c) reads as empty.
 *
 * Threads: the drive thread, while the drive is SSD_DRIVE_RECOVERING
 * (drive-thread.c calls recovery_pump() each turn); the index it fills is read by
 * lookups on any thread (index.c's stripes order them).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <syslog.h>

#include "common/bits.h"
#include "common/mem.h"
#include "ssd/crc32c.h"
#include "ssd/tier.h"

static void recover_block(struct drive *d, uint32_t region, const struct ssd_block_hdr *h)
{
	struct ssd_region *r = &d->regions[region];
	struct ssd_loc loc;
	uint32_t ns;

	if (h->shard > UINT16_MAX || ssd_index_ns(&d->ssd->idx, h->ns, h->ns_len, &ns) < 0) {
		ADD(&d->st.recovery_bad, 1);
		return;
	}
	loc.drive = d->id;
	loc.region = region;
	loc.region_seq = h->region_seq;
	loc.off_units = (uint32_t)((h->offset - ssd_region_off(&d->geom, region)) / SSD_UNIT);
	loc.len = h->payload_len;
	loc.crc = h->payload_crc;
	loc.ent = SSD_NO_ENTRY;
	if (ssd_index_recover(&d->ssd->idx, ns, h->key, (uint16_t)h->shard, r, &loc))
		ADD(&d->st.recovered_blocks, 1);
	if (loc.off_units * (uint64_t)SSD_UNIT + ssd_block_bytes(loc.len) > r->used)
		r->used = loc.off_units * (uint64_t)SSD_UNIT + ssd_block_bytes(loc.len);
	r->nblocks++;
}

static void region_found(struct drive *d, uint32_t region, uint32_t seq)
{
	struct ssd_region *r = &d->regions[region];

	r->seq = seq;
	r->state = SSD_R_SEALED;
	r->nblocks = 0;
	r->used = 0;
	d->recov_seq[region] = seq;
	d->recov_valid[region] = true;
	ADD(&d->st.recovered_regions, 1);
}

static int recov_read(struct drive *d, struct iop *op, uint64_t off, size_t len)
{
	if (len > op->rcap) {
		op->rbuf = mfree(op->rbuf);
		op->rcap = 0;
		if (posix_memalign((void **)&op->rbuf, SSD_UNIT, len))
			return -ENOMEM;
		op->rcap = len;
	}
	ADD(&d->st.recovery_bytes_read, len);
	op->err = 0;
	op->short_io = false;
	op->main_len = (uint32_t)len;
	return prep_io(d, op, false, op->rbuf, (uint32_t)len, off, (uint32_t)len);
}

/* Read the last @len bytes of the op's region (its trailer and entries). */
static int recov_read_tail(struct drive *d, struct iop *op, uint64_t len)
{
	uint64_t rend = ssd_region_off(&d->geom, op->region) + d->geom.region_bytes;

	return recov_read(d, op, rend - len, len);
}

static uint64_t probe_len(const struct drive *d)
{
	return MIN_U64(RECOV_TAIL, SSD_UNIT + d->geom.zone_bytes);
}

/*
 * The tail of a region is in op->rbuf (op->main_len bytes ending at the
 * region's end): index its entries.  Sealed (a trailer of the entries'
 * cycle): entries 0..n-1; open when the process died: every entry of the
 * cycle of entry 0.  Each entry is checked on its own (CRC, file, region,
 * entry number, sequence, bounds), so a garbled entry costs that block
 * only.  Returns true when a longer tail must be read first.
 */
static bool scan_tail(struct drive *d, struct iop *op)
{
	uint32_t region = op->region;
	const uint8_t *end = op->rbuf + op->main_len - SSD_UNIT; /* the trailer's start */
	uint32_t avail = (op->main_len - SSD_UNIT) / SSD_HDR_SIZE;
	uint64_t rstart = ssd_region_off(&d->geom, region);
	struct ssd_block_hdr h0, h;
	struct ssd_trailer t;
	bool have0, sealed;
	uint32_t seq, n;
	uint64_t used;

	have0 = avail && ssd_block_hdr_decode(end - SSD_HDR_SIZE, d->sb.file_id, &d->geom, region,
					      0, &h0) == 0;
	sealed = ssd_trailer_decode(end, d->sb.file_id, &d->geom, region, &t) == 0 &&
		 (!have0 || t.region_seq == h0.region_seq);
	if (!sealed && !have0)
		return false; /* empty, or its first block never completed */
	seq = sealed ? t.region_seq : h0.region_seq;
	n = sealed ? t.nr_blocks : d->geom.zone_entries;
	used = sealed ? t.used_bytes : d->geom.payload_bytes;
	if (n > avail && op->main_len < ssd_tail_bytes(n)) {
		op->phase = RP_SUMMARY;
		return recov_read_tail(d, op, ssd_tail_bytes(n)) == 0;
	}
	if (n > avail)
		n = avail;
	region_found(d, region, seq);
	if (sealed &&
	    crc32c(0, end - (size_t)n * SSD_HDR_SIZE, (size_t)n * SSD_HDR_SIZE) != t.summary_crc)
		ADD(&d->st.recovery_bad, 1); /* some entry changed: each is checked below */
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *e = end - (size_t)(i + 1) * SSD_HDR_SIZE;

		if (ssd_block_hdr_decode(e, d->sb.file_id, &d->geom, region, i, &h) < 0 ||
		    h.region_seq != seq ||
		    h.offset + ssd_block_bytes(h.payload_len) > rstart + used) {
			/* Sealed: a hole (a failed write) or damage.  Open: mostly not written. */
			if (sealed && !all_zero(e, SSD_HDR_SIZE))
				ADD(&d->st.recovery_bad, 1);
			continue;
		}
		recover_block(d, region, &h);
	}
	return false;
}

/* A recovery read completed; returns true when the op has more to read. */
bool recov_done(struct drive *d, struct iop *op)
{
	if (op->err || op->short_io) {
		/* An unreadable region is left out: its blocks are misses. */
		ADD(&d->st.recovery_bad, 1);
		note_error(d, op->err ? op->err : -EIO);
		return false;
	}
	return scan_tail(d, op);
}

static void recovery_finish(struct drive *d)
{
	uint32_t head;

	if (ssd_pick_head(d->recov_seq, d->recov_valid, d->geom.nr_regions, &head) == 0) {
		d->next_open = ssd_ring_next(&d->geom, head);
		d->next_seq = d->recov_seq[head] + 1;
	} else {
		d->next_open = 0;
		d->next_seq = 1;
	}
	d->cur = SSD_NO_ENTRY;
	d->nahead = 0;
	STORE(&d->st.recovery_ns, mono_ns() - d->recov_t0 + 1);
	for (unsigned i = 0; i < drive_nr_iops(d); i++) {
		d->iops[i].rbuf = mfree(d->iops[i].rbuf);
		d->iops[i].rcap = 0;
	}
	if (drive_state(d) == SSD_DRIVE_RECOVERING)
		set_state(d, SSD_DRIVE_ONLINE);
	slog(d->ssd, LOG_INFO, 0,
	     "%s: %" PRIu64 " blocks in %" PRIu64 " regions recovered in %.3f s (%s)", d->path,
	     LOAD(&d->st.recovered_blocks), LOAD(&d->st.recovered_regions),
	     (double)LOAD(&d->st.recovery_ns) / 1e9,
	     d->formatted    ? "new drive"
	     : d->last_clean ? "clean stop before"
			     : "unclean stop before");
	notify_waiters(d->ssd);
}

void recovery_pump(struct drive *d)
{
	while (d->recov_cursor < d->geom.nr_regions && d->recov_inflight < d->depth) {
		struct iop *op = iop_get(d, IOP_RECOV);

		if (!op)
			break;
		op->region = d->recov_cursor++;
		op->phase = RP_PROBE;
		if (recov_read_tail(d, op, probe_len(d)) < 0) {
			iop_put(d, op);
			break;
		}
		d->recov_inflight++;
	}
	if (d->recov_cursor == d->geom.nr_regions && d->recov_inflight == 0 &&
	    !LOAD(&d->st.recovery_ns))
		recovery_finish(d);
}
