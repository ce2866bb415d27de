/* SPDX-License-Identifier: MIT */
/*
 * Block writes: the write queue's head placed in the open region
 * (place_write(), the rate cap), its payload and header written
 * (start_write()), the header zone units written as entries fill them
 * (zone_kick()), a block made visible in the index once both landed
 * (write_finish()), and full regions sealed with their summary and
 * trailer (seal_pump()).  Which region writes go to, and its erase,
 * are reclaim.c's.
 *
 * Threads: the drive thread; ssd_write() on any thread fills the queue
 * under qlock, which dispatch_writes() takes to weigh its head.
 * write_done runs here with no lock held.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "ssd/crc32c.h"
#include "ssd/tier.h"

/* Take entry @k out of the regions opened ahead, keeping their FIFO order. */
void ahead_drop(struct drive *d, unsigned k)
{
	memmove(&d->ahead[k], &d->ahead[k + 1], (d->nahead - k - 1) * sizeof(d->ahead[0]));
	d->nahead--;
}

void seal_begin(struct drive *d, uint32_t region)
{
	d->regions[region].state = SSD_R_SEALING;
	if (d->cur == region)
		d->cur = SSD_NO_ENTRY;
	for (unsigned k = 0; k < d->nahead; k++)
		if (d->ahead[k] == region) {
			ahead_drop(d, k);
			break;
		}
}

/*
 * Write the dirty zone units of @region that have no write in flight.
 * The unit is copied, so later entries change only the image; covered[]
 * remembers which entries this write carries.  A unit still filling
 * waits while payloads of the region are in flight: written at each
 * entry, it took a 4 KiB write per block between the 2 MiB ones, and
 * the tier wrote at 0.68 of fio on the GPU device's disk; filled first
 * it is one per SSD_HDRS_PER_UNIT blocks.  A block is visible only once
 * both its payload and its unit landed, so this orders nothing: a unit
 * waits at most for payloads already in flight.
 */
void zone_kick(struct drive *d, uint32_t region)
{
	struct ssd_region *r = &d->regions[region];
	uint32_t last;

	if (!r->zone || !r->nblocks)
		return;
	last = ssd_entry_unit(r->nblocks - 1);
	for (uint32_t u = 0; u <= last; u++) {
		struct iop *op;

		if ((r->units[u] & (SSD_UNIT_DIRTY | SSD_UNIT_INFLIGHT)) != SSD_UNIT_DIRTY)
			continue;
		/* The last unit, not full, while this region's payloads still land. */
		if (u == last && r->nblocks % SSD_HDRS_PER_UNIT && r->payloads &&
		    r->state == SSD_R_OPEN)
			continue;
		op = iop_get(d, IOP_ZONE);
		if (!op)
			return; /* again after a completion */
		memcpy(op->bounce, ssd_region_unit(r, &d->geom, u), SSD_UNIT);
		op->region = region;
		op->unit = u;
		r->units[u] = SSD_UNIT_INFLIGHT;
		r->covered[u] = r->nblocks;
		r->inflight++;
		prep_io(d, op, true, op->bounce, SSD_UNIT,
			ssd_region_off(&d->geom, region) + ssd_zone_unit_off(&d->geom, u),
			SSD_UNIT);
	}
}

void zone_done(struct drive *d, struct iop *zop)
{
	struct ssd_region *r = &d->regions[zop->region];
	uint32_t u = zop->unit, lo = u * SSD_HDRS_PER_UNIT, hi = r->covered[u];
	int err = zop->err ? zop->err : zop->short_io ? -EIO : 0;
	struct iop **link = &d->hwait;

	r->units[u] &= (uint8_t)~SSD_UNIT_INFLIGHT;
	r->inflight--;
	if (err) {
		ADD(&d->st.write_errors, 1);
		dlog_rl(d, LOG_WARNING, err, "region %u: header zone not written; region closed",
			zop->region);
		if (!r->abandoned) {
			r->abandoned = true;
			ADD(&d->st.regions_abandoned, 1);
		}
		if (r->state == SSD_R_OPEN)
			seal_begin(d, zop->region);
		note_error(d, err);
	}
	/* The writes whose entries this one carried have their headers on disk. */
	while (*link) {
		struct iop *w = *link;

		if (w->region == zop->region && w->entry >= lo && w->entry < hi &&
		    w->entry < lo + SSD_HDRS_PER_UNIT) {
			*link = w->next_wait;
			w->hdr_done = true;
			if (err && !w->hdr_err)
				w->hdr_err = err;
			if (w->payload_done) {
				write_finish(d, w);
				iop_put(d, w);
			}
			continue;
		}
		link = &w->next_wait;
	}
}

void seal_pump(struct drive *d)
{
	for (unsigned k = 0; k < d->nzreg; k++) {
		uint32_t i = d->zreg[k];
		struct ssd_region *r = &d->regions[i];
		uint64_t n = r->nblocks;
		struct ssd_trailer t;
		struct iop *op;

		if (r->state != SSD_R_SEALING)
			continue;
		/* Entries cleared by failed writes are rewritten before the trailer. */
		zone_kick(d, i);
		/* inflight: block and zone writes not completed, or the trailer's own write. */
		if (r->inflight)
			continue;
		op = iop_get(d, IOP_SEAL);
		if (!op)
			return;
		memset(op->bounce, 0, SSD_UNIT);
		memcpy(t.file_id, d->sb.file_id, 16);
		t.region = i;
		t.region_seq = r->seq;
		t.nr_blocks = (uint32_t)n;
		t.summary_crc = crc32c(0, r->zone + d->geom.zone_bytes - n * SSD_HDR_SIZE,
				       n * SSD_HDR_SIZE);
		t.summary_off = d->geom.payload_bytes;
		t.used_bytes = r->used;
		ssd_trailer_encode(&t, op->bounce);
		op->region = i;
		r->inflight = 1; /* the trailer write: nothing reuses the region meanwhile */
		prep_io(d, op, true, op->bounce, SSD_UNIT,
			ssd_region_off(&d->geom, i) + d->geom.region_bytes - SSD_UNIT, SSD_UNIT);
	}
}

void seal_done(struct drive *d, struct iop *op)
{
	struct ssd_region *r = &d->regions[op->region];

	r->inflight = 0;
	r->state = SSD_R_SEALED;
	ssd_region_close(r);
	zreg_del(d, op->region);
	if (op->err || op->short_io) {
		/* Its blocks stay valid; after a restart its entries are read one by one. */
		ADD(&d->st.write_errors, 1);
		dlog_rl(d, LOG_WARNING, op->err ? op->err : -EIO, "region %u: trailer not written",
			op->region);
		note_error(d, op->err ? op->err : -EIO);
	}
}

/* ---- writes (drive thread) ---------------------------------------------- */

void write_finish(struct drive *d, struct iop *op)
{
	struct ssd *ssd = d->ssd;
	struct ssd_region *r = &d->regions[op->region];
	struct wreq *w = op->w;
	bool ok = !op->err && !op->short_io && !op->hdr_err;
	int res = 0;

	if (ok) {
		struct ssd_loc loc = {
			.drive = d->id,
			.region = op->region,
			.region_seq = r->seq,
			.off_units = (uint32_t)((op->off - ssd_region_off(&d->geom, op->region)) /
						SSD_UNIT),
			.len = w->len,
			.crc = op->crc,
		};

		/* Payload and header both on disk at full length: visible from here. */
		ssd_index_commit(&ssd->idx, w->ent, r, &loc);
		ADD(&d->st.writes, 1);
		ADD(&d->st.bytes_written, w->len);
	} else {
		res = op->err ? op->err : op->hdr_err ? op->hdr_err : -EIO;
		ssd_index_abort(&ssd->idx, w->ent);
		ADD(&d->st.write_errors, 1);
		dlog_rl(d, LOG_WARNING, res, "region %u: %s write; block abandoned, region closed",
			op->region, op->err || op->hdr_err ? "failed" : "short");
		/* Its entry is cleared (rewritten before the trailer); nothing more goes in. */
		if (op->entry != UINT32_MAX)
			ssd_region_set_entry(r, &d->geom, op->entry, NULL);
		if (!r->abandoned) {
			r->abandoned = true;
			ADD(&d->st.regions_abandoned, 1);
		}
		if (r->state == SSD_R_OPEN)
			seal_begin(d, op->region);
		note_error(d, res);
	}
	r->inflight--;
	d->inflight_blocks--;
	STORE(&d->st.inflight, d->inflight_blocks);
	hist_add(d->st.write_lat, &d->st.write_lat_sum_ns, mono_ns() - w->t0);
	if (ssd->cfg.write_done)
		ssd->cfg.write_done(ssd->cfg.cb_arg, w->cookie, res);
	wreq_free(d, w);
}

static void start_write(struct drive *d, struct wreq *w, uint64_t roff, uint32_t bseq)
{
	struct ssd *ssd = d->ssd;
	struct iop *op = iop_get(d, IOP_WRITE);
	struct ssd_region *r = &d->regions[d->cur];
	struct ssd_block_hdr h;
	const uint8_t *src = w->buf;
	uint32_t main_len, tail, plen, pexp;
	uint16_t ns_len;
	const uint8_t *ident = ssd_index_ns_ident(&ssd->idx, w->ns, &ns_len);

	op->w = w;
	op->region = d->cur;
	op->off = ssd_region_off(&d->geom, d->cur) + roff;
	op->entry = UINT32_MAX;
	op->payload_done = op->hdr_done = false;
	op->hdr_err = 0;
	op->crc = crc32c(0, w->buf, w->len);
	r->inflight++;
	d->inflight_blocks++;
	STORE(&d->st.inflight, d->inflight_blocks);

	op->fault = ssd_fault_next(ssd->faults, d->id, true);
	if (op->fault == SSD_FAULT_EIO || op->fault == SSD_FAULT_ENODEV || !ident) {
		op->err = !ident ? -EINVAL : op->fault == SSD_FAULT_EIO ? -EIO : -ENODEV;
		write_finish(d, op);
		iop_put(d, op);
		return;
	}
	memset(&h, 0, sizeof(h));
	memcpy(h.file_id, d->sb.file_id, 16);
	h.region = d->cur;
	h.region_seq = r->seq;
	h.block_seq = bseq;
	h.offset = op->off;
	h.payload_len = w->len;
	h.payload_crc = op->crc;
	memcpy(h.key, w->key, SSD_KEY_SIZE);
	h.shard = w->shard;
	h.ns_len = ns_len;
	memcpy(h.ns, ident, ns_len);
	ssd_block_hdr_encode(&h, op->hdr);
	/* The header goes into the zone image; zone_kick() writes its unit. */
	op->entry = bseq;
	ssd_region_set_entry(r, &d->geom, bseq, op->hdr);
	op->next_wait = d->hwait;
	d->hwait = op;

	main_len = w->len / d->io_align * d->io_align;
	tail = w->len - main_len;
	if ((uintptr_t)src % d->mem_align) {
		/* Memory direct I/O cannot use: one aligned copy (not the pool's case). */
		uint64_t full = rup(w->len, d->io_align);

		if (posix_memalign((void **)&op->tmp, d->mem_align > 512 ? d->mem_align : 512,
				   full)) {
			op->tmp = NULL;
			op->err = -ENOMEM;
		} else {
			memcpy(op->tmp, src, w->len);
			memset(op->tmp + w->len, 0, full - w->len);
			src = op->tmp;
			main_len = (uint32_t)full;
			tail = 0;
		}
	}
	if (main_len && !op->err) {
		plen = pexp = main_len;
		if (op->fault == SSD_FAULT_SHORT || op->fault == SSD_FAULT_TEAR) {
			plen = main_len / 2 / d->io_align * d->io_align;
			if (op->fault == SSD_FAULT_TEAR)
				pexp = plen;
		}
		if (plen)
			prep_io(d, op, true, (void *)src, plen, op->off, pexp);
		else if (op->fault == SSD_FAULT_SHORT)
			op->short_io = true;
	}
	if (tail && !op->err) {
		uint8_t *tb = op->bounce;

		memset(tb, 0, d->io_align);
		memcpy(tb, src + main_len, tail);
		prep_io(d, op, true, tb, d->io_align, op->off + main_len, d->io_align);
	}
	if (op->pending == 0)
		op->payload_done = true; /* nothing submitted: waits for its header alone */
	else
		r->payloads++; /* complete() counts it down */
}

static bool rate_ok(struct drive *d, uint32_t len)
{
	uint64_t rate = d->ssd->cfg.write_rate;
	uint64_t now;
	double burst;

	if (!rate)
		return true;
	now = mono_ns();
	burst = (double)rate / 10 > 4.0 * len ? (double)rate / 10 : 4.0 * len;
	d->tokens += (double)(now - d->tokens_ns) * (double)rate / 1e9;
	d->tokens_ns = now;
	if (d->tokens > burst)
		d->tokens = burst;
	if (d->tokens < 0)
		return false;
	d->tokens -= len;
	return true;
}

/*
 * A place for a payload of @len in the region writes go to (sealing a
 * full one and moving on): 0, -E2BIG (larger than any region takes), or
 * -EAGAIN (the rate cap, or no region ready yet: stall).  The rate cap's
 * tokens are spent only on a place found (given back when the region
 * that follows a full one is not ready yet).
 */
static int place_write(struct drive *d, uint32_t len, uint64_t *ret_off, uint32_t *ret_bseq)
{
	bool paid = false;

	for (;;) {
		int r;

		if (!write_region(d) || d->regions[d->cur].opening) {
			if (paid)
				d->tokens += len;
			return -EAGAIN; /* erase_old_cycle() first */
		}
		if (!paid && !rate_ok(d, len))
			return -EAGAIN;
		paid = true;
		r = ssd_region_place(&d->regions[d->cur], &d->geom, len, ret_off, ret_bseq);
		if (r != -ENOSPC)
			return r;
		seal_begin(d, d->cur);
	}
}

void dispatch_writes(struct drive *d)
{
	struct wreq *w;
	uint32_t limit;

	d->write_stalled = false;
	/*
	 * While reads wait or run a write goes only with less than an eighth
	 * of the depth (at least one) in flight, and for IDLE_AFTER_READ_NS
	 * after a read writes leave a quarter of it to reads: a read is an
	 * engine waiting on its LOAD, a write only an eviction ahead of need,
	 * and with writes at the whole depth every SSD hit queued behind
	 * them.  Writes held back fill their bounded queue, and evictions
	 * then drop instead of waiting.  With no read for a while, writes
	 * take the whole depth.
	 */
	if (LOAD(&d->st.reads_pending))
		limit = d->depth >= 8 ? d->depth / 8 : 1;
	else if (read_pause_left(d, mono_ns()))
		limit = d->depth - d->depth / 4;
	else
		limit = d->depth; /* no read for a while: the whole depth, as fio would */
	while (d->inflight_blocks < limit && d->free_iops) {
		uint64_t roff;
		uint32_t bseq;
		int r;

		/*
		 * The head write leaves the queue only once it has a place:
		 * one taken out and put back would be missing meanwhile, and
		 * ssd_write() could refuse a valuable write that should have
		 * displaced it.  Under the queue lock, so nothing displaces the
		 * head while it is weighed; what is done here is the drive
		 * thread's own state, and the erase an open queues.
		 */
		pthread_mutex_lock(&d->qlock);
		w = d->wq_head;
		r = w ? place_write(d, w->len, &roff, &bseq) : 0;
		if (w && r != -EAGAIN)
			wq_unlink(d, w);
		pthread_mutex_unlock(&d->qlock);
		if (!w)
			return;
		if (r == -EAGAIN) {
			d->write_stalled = true;
			return;
		}
		if (r == -E2BIG) {
			ssd_index_abort(&d->ssd->idx, w->ent);
			if (d->ssd->cfg.write_done)
				d->ssd->cfg.write_done(d->ssd->cfg.cb_arg, w->cookie, -E2BIG);
			wreq_free(d, w);
			continue;
		}
		start_write(d, w, roff, bseq);
		/*
		 * One payload per submission: io_uring plugs a submission of
		 * more than two SQEs, and the plug merges payloads that lie back
		 * to back into one request of twice the size.  The GPU device's
		 * virtio disk wrote such 4 MiB requests at 0.78 of fio, which
		 * writes 2 MiB ones; on NVMe a request larger than the drive's
		 * transfer size is split again anyway.
		 */
		d->dev->ops->submit(d->dev);
	}
}
