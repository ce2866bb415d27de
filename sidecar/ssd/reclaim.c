/* SPDX-License-Identifier: MIT */
/*
 * Reclaim: regions are reused in FIFO order (region-alloc.h), the oldest next.
 * Opening one drops its old cycle's blocks from the index (the eviction
 * ssd_get_stats() counts as regions_reclaimed and blocks_evicted), then
 * zeroes its old first zone unit and trailer and makes that durable with
 * one datasync per batch, ahead of the writes (erase_ahead()), so no
 * block of the old cycle can come back after a crash.
 *
 * Threads: the drive thread only; the index it drops from is read on any
 * thread (index.c's stripes order them).
 */
#include <errno.h>
#include <string.h>
#include <syslog.h>

#include "ssd/tier.h"

/*
 * Before the first payload of a new cycle goes into a region, its old
 * first zone unit (entries 0-7) and trailer are zeroed, durably: without
 * entry 0 and the trailer recovery takes the region for empty, so no block
 * of the old cycle can come back after a crash, even where the new
 * payloads never overwrote it.  Writes into the region wait for that
 * (place_write()).  Durable means a datasync after the erase landed, a
 * cache flush on most disks; one per region (RWF_DSYNC on each erase) held
 * every region's writes until the flush had drained everything before it,
 * and the tier wrote at 0.36 of fio on the build VM's disk (fio never
 * flushes), 0.81 on the GPU device's.  So regions are erased ahead in
 * batches (erase_ahead()) with one datasync per batch.
 */
static void erase_old_cycle(struct drive *d, uint32_t region)
{
	struct ssd_region *r = &d->regions[region];
	struct iop *op = iop_get(d, IOP_OPEN);

	memset(op->bounce, 0, 2 * SSD_UNIT);
	op->region = region;
	r->opening = true;
	r->erased = r->syncing = false;
	r->inflight++;
	d->erases_inflight++;
	if (prep_io(d, op, true, op->bounce, 2 * SSD_UNIT,
		    ssd_region_off(&d->geom, region) + d->geom.region_bytes - 2 * SSD_UNIT,
		    2 * SSD_UNIT) < 0) {
		/* No room even after a submit: complete it as failed, the batch goes on. */
		op->err = -EBUSY;
		op->pending = 0;
		erase_done(d, op);
		iop_put(d, op);
	}
}

/*
 * A region whose erase, or the datasync after it, failed takes no block
 * this cycle: it is sealed empty, and the FIFO reuses it next time round.
 */
static void skip_unerased(struct drive *d, uint32_t region)
{
	struct ssd_region *r = &d->regions[region];

	r->opening = r->erased = r->syncing = false;
	if (!r->abandoned) {
		r->abandoned = true;
		ADD(&d->st.regions_abandoned, 1);
	}
	if (r->state == SSD_R_OPEN)
		seal_begin(d, region);
}

void sync_done(struct drive *d, struct iop *op);

/* The batch's erases all landed: one datasync makes them durable. */
void sync_erased(struct drive *d)
{
	bool any = false;
	struct iop *op;

	/* Not while abandoning: what a kill -9 leaves syncs nothing. */
	if (!d->sync_wanted || d->erases_inflight || d->sync_inflight || LOAD(&d->stopping) == 2)
		return;
	for (unsigned k = 0; k < d->nzreg; k++) {
		struct ssd_region *r = &d->regions[d->zreg[k]];

		if (r->opening && r->erased) {
			r->syncing = true;
			any = true;
		}
	}
	if (!any) {
		d->sync_wanted = false;
		return;
	}
	op = iop_get(d, IOP_SYNC);
	if (op) {
		op->fault = ssd_fault_sync(d->ssd->faults, d->id);
		if (op->fault == SSD_FAULT_EIO || op->fault == SSD_FAULT_ENODEV) {
			op->err = op->fault == SSD_FAULT_EIO ? -EIO : -ENODEV;
			d->sync_wanted = false;
			sync_done(d, op);
			iop_put(d, op);
			return;
		}
	}
	if (!op || d->dev->ops->prep_sync(d->dev, (uint64_t)(uintptr_t)op) < 0) {
		/* No iop or request now: the regions stay waiting; the drive loop retries. */
		for (unsigned k = 0; k < d->nzreg; k++)
			d->regions[d->zreg[k]].syncing = false;
		if (op)
			iop_put(d, op);
		return;
	}
	op->expect[0] = 0;
	op->pending = 1;
	d->sync_inflight = true;
	d->sync_wanted = false;
}

void erase_done(struct drive *d, struct iop *op)
{
	struct ssd_region *r = &d->regions[op->region];
	int err = op->err ? op->err : op->short_io ? -EIO : 0;

	r->inflight--;
	d->erases_inflight--;
	if (err) {
		ADD(&d->st.write_errors, 1);
		dlog_rl(d, LOG_WARNING, err, "region %u: old cycle not erased; region skipped",
			op->region);
		skip_unerased(d, op->region);
		note_error(d, err);
	} else {
		r->erased = d->sync_wanted = true;
	}
	sync_erased(d);
}

void sync_done(struct drive *d, struct iop *op)
{
	int err = op->err;

	d->sync_inflight = false;
	if (err) {
		ADD(&d->st.write_errors, 1);
		dlog_rl(d, LOG_WARNING, err,
			"datasync after erasing regions failed; they are skipped");
	} else {
		ADD(&d->st.erase_syncs, 1);
	}
	for (unsigned k = 0; k < d->nzreg; k++) {
		struct ssd_region *r = &d->regions[d->zreg[k]];

		if (!r->syncing)
			continue;
		if (err)
			skip_unerased(d, d->zreg[k]); /* zreg keeps it until sealed */
		else
			r->syncing = r->erased = r->opening = false;
	}
	if (err)
		note_error(d, err);
	sync_erased(d); /* erases that landed while this ran */
}

/*
 * The next region in FIFO order, reclaimed and its old cycle being erased
 * (erase_old_cycle()); SSD_NO_ENTRY if it cannot be reused yet.
 */
static uint32_t open_next_region(struct drive *d)
{
	struct ssd_region *r = &d->regions[d->next_open];
	uint32_t i = d->next_open;

	if (r->state == SSD_R_OPEN || r->state == SSD_R_SEALING || r->reads ||
	    d->nzreg == sizeof(d->zreg) / sizeof(d->zreg[0]))
		return SSD_NO_ENTRY;
	if (r->state == SSD_R_SEALED) {
		/* The old cycle's blocks leave the index before anything overwrites them. */
		uint32_t n = ssd_index_drop_region(&d->ssd->idx, r);

		r->state = SSD_R_EMPTY;
		ADD(&d->st.regions_reclaimed, 1);
		ADD(&d->st.blocks_evicted, n);
	}
	/*
	 * Its erase holds an iop until it lands: leave two, for the write
	 * place_write() is placing (its region's room is taken before its iop)
	 * and for the batch's datasync.
	 */
	if (d->nfree_iops <= 2 || ssd_region_open(r, &d->geom, d->next_seq) < 0)
		return SSD_NO_ENTRY;
	d->next_seq++;
	ADD(&d->st.regions_opened, 1);
	zreg_add(d, i);
	d->next_open = ssd_ring_next(&d->geom, d->next_open);
	erase_old_cycle(d, i);
	return i;
}

/*
 * Keep ahead_want regions opened ahead of the writes.  A new batch starts
 * only once the last one is durable and half of it has been taken, so
 * that each datasync covers about half the window, and the writes go on
 * into the other half while it runs.  The price: the old blocks of up to
 * ahead_want regions leave the index early (at most 1 GiB of regions, and
 * an eighth of the drive).  A region opened ahead and never written holds
 * nothing: recovery takes it for empty (no entry 0, no trailer), and the
 * FIFO reopens it next.
 */
static void erase_ahead(struct drive *d)
{
	if (d->erases_inflight || d->sync_inflight || d->nahead > d->ahead_want / 2)
		return;
	while (d->nahead < d->ahead_want) {
		uint32_t i = open_next_region(d);

		if (i == SSD_NO_ENTRY)
			break;
		if (d->regions[i].state == SSD_R_OPEN) /* else its erase failed at once */
			d->ahead[d->nahead++] = i;
	}
}

/* The oldest region opened ahead becomes the current one. */
static void take_ahead(struct drive *d)
{
	if (d->cur != SSD_NO_ENTRY || !d->nahead)
		return;
	d->cur = d->ahead[0];
	ahead_drop(d, 0);
}

/* The region writes go to: the current one, else the oldest opened ahead. */
bool write_region(struct drive *d)
{
	take_ahead(d);
	erase_ahead(d);
	take_ahead(d);
	return d->cur != SSD_NO_ENTRY;
}
