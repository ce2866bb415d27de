/* SPDX-License-Identifier: MIT */
/*
 * Block reads: a read taken from the drive's queue is checked against
 * its region (reused since the lookup: -ESTALE), sent as one to two data
 * requests (the last partial sector through the bounce unit), and once
 * landed its payload's CRC-32C is checked before read_done: a block that
 * fails it is dropped from the index and reads as -EBADMSG, never as
 * wrong bytes.
 *
 * Threads: the drive thread; ssd_read() on any thread fills the queue
 * under qlock (drive-thread.c's pull() takes it).  read_done runs here with no
 * lock held.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "ssd/crc32c.h"
#include "ssd/tier.h"

/* The drive is done with @op's read: its place in the depth is free. */
void read_landed(struct drive *d, struct iop *op)
{
	d->regions[op->r->loc.region].reads--;
	d->inflight_blocks--;
	STORE(&d->st.inflight, d->inflight_blocks);
}

/* Check what @op read (its read landed) and answer it. */
static void read_check(struct drive *d, struct iop *op)
{
	struct ssd *ssd = d->ssd;
	struct rreq *rr = op->r;
	uint8_t *dst = rr->dst;
	int res = 0;

	if (op->err || op->short_io) {
		res = op->err ? op->err : -EIO;
		ADD(&d->st.read_errors, 1);
		dlog_rl(d, LOG_WARNING, res, "region %u: %s read; a miss", rr->loc.region,
			op->err ? "failed" : "short");
		ssd_index_kill(&ssd->idx, &rr->loc);
		note_error(d, res);
	} else {
		if (op->tmp)
			memcpy(dst, op->tmp, rr->loc.len);
		else if (op->tail_len)
			memcpy(dst + op->main_len, op->bounce + SSD_UNIT, op->tail_len);
		if (op->fault == SSD_FAULT_FLIP)
			dst[rr->loc.len / 2] ^= 0x10;
		if (crc32c(0, dst, rr->loc.len) != rr->loc.crc) {
			res = -EBADMSG;
			ADD(&d->st.crc_errors, 1);
			dlog_rl(d, LOG_WARNING, 0,
				"region %u: block at unit %u failed its checksum; a miss",
				rr->loc.region, rr->loc.off_units);
			ssd_index_kill(&ssd->idx, &rr->loc);
		} else {
			ADD(&d->st.reads, 1);
			ADD(&d->st.bytes_read, rr->loc.len);
		}
	}
	SUB(&d->st.reads_pending, 1);
	d->last_read_ns = mono_ns();
	hist_add(d->st.read_lat, &d->st.read_lat_sum_ns, d->last_read_ns - rr->t0);
	if (ssd->cfg.read_done)
		ssd->cfg.read_done(ssd->cfg.cb_arg, rr->cookie, res);
	free(rr);
}

static void read_finish(struct drive *d, struct iop *op)
{
	read_landed(d, op);
	read_check(d, op);
}

/*
 * The reads that landed in this batch of completions: checked after the
 * next reads went to the drive, so the drive does not sit below its depth
 * while this thread computes checksums (2 MiB each).
 */
void check_landed(struct drive *d)
{
	while (d->landed_head) {
		struct iop *op = d->landed_head;

		d->landed_head = op->next_free;
		if (!d->landed_head)
			d->landed_tail = NULL;
		read_check(d, op);
		iop_put(d, op);
	}
}

void fail_read(struct drive *d, struct rreq *rr, int res)
{
	struct ssd *ssd = d->ssd;

	SUB(&d->st.reads_pending, 1);
	if (ssd->cfg.read_done)
		ssd->cfg.read_done(ssd->cfg.cb_arg, rr->cookie, res);
	free(rr);
}

static void start_read(struct drive *d, struct rreq *rr)
{
	const struct ssd_loc *loc = &rr->loc;
	struct ssd_region *r = &d->regions[loc->region];
	uint64_t off, full = rup(loc->len, d->io_align);
	uint32_t plen, main_len;
	struct iop *op;

	if (r->seq != loc->region_seq || r->state == SSD_R_EMPTY ||
	    (r->state == SSD_R_OPEN && r->seq != loc->region_seq)) {
		ADD(&d->st.stale_reads, 1);
		fail_read(d, rr, -ESTALE);
		return;
	}
	op = iop_get(d, IOP_READ);
	op->r = rr;
	op->tail_len = 0;
	r->reads++;
	d->inflight_blocks++;
	STORE(&d->st.inflight, d->inflight_blocks);
	off = ssd_region_off(&d->geom, loc->region) + (uint64_t)loc->off_units * SSD_UNIT;
	op->fault = ssd_fault_next(d->ssd->faults, d->id, false);
	if (op->fault == SSD_FAULT_EIO || op->fault == SSD_FAULT_ENODEV) {
		op->err = op->fault == SSD_FAULT_EIO ? -EIO : -ENODEV;
		read_finish(d, op);
		iop_put(d, op);
		return;
	}
	if ((uintptr_t)rr->dst % d->mem_align == 0 && rr->cap >= full) {
		main_len = (uint32_t)full;
		op->main_len = main_len;
		plen = main_len;
		if (op->fault == SSD_FAULT_SHORT || op->fault == SSD_FAULT_TEAR)
			plen = main_len / 2 / d->io_align * d->io_align;
		if (plen)
			prep_io(d, op, false, rr->dst, plen, off, main_len);
		else
			op->short_io = true;
	} else if ((uintptr_t)rr->dst % d->mem_align == 0) {
		/* The last partial sector into the bounce unit, copied after. */
		main_len = loc->len / d->io_align * d->io_align;
		op->main_len = main_len;
		op->tail_len = loc->len - main_len;
		if (main_len)
			prep_io(d, op, false, rr->dst, main_len, off, main_len);
		prep_io(d, op, false, op->bounce + SSD_UNIT, d->io_align, off + main_len,
			d->io_align);
	} else {
		if (posix_memalign((void **)&op->tmp, 512, full)) {
			op->tmp = NULL;
			op->err = -ENOMEM;
			read_finish(d, op);
			iop_put(d, op);
			return;
		}
		op->main_len = (uint32_t)full;
		prep_io(d, op, false, op->tmp, (uint32_t)full, off, (uint32_t)full);
	}
	if (op->pending == 0) {
		read_finish(d, op);
		iop_put(d, op);
	}
}

void dispatch_reads(struct drive *d)
{
	while (d->rq_head && d->inflight_blocks < d->depth && d->free_iops) {
		struct rreq *rr = d->rq_head;

		d->rq_head = rr->next;
		if (!d->rq_head)
			d->rq_tail = NULL;
		start_read(d, rr);
	}
}
