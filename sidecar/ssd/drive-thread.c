/* SPDX-License-Identifier: MIT */
/*
 * The drive thread: one per drive, owning its I/O (dev.h, started here
 * and stopped here), its regions and everything in flight.  One loop:
 * take requests queued by other threads, recover (at start), start reads,
 * start writes (as far as the queue depth, the open region and the rate
 * cap allow), seal full regions, then submit and wait for a completion, a
 * wake-up (the drive's wake(), from ssd_write(), ssd_read() or a close) or
 * a 100 ms tick (health probe, error window).  It never blocks on
 * anything but its own drive.  Close and abandon end here too.
 *
 * Threads: this file is the drive thread; it meets other threads only
 * at qlock (the queues, `sleeping`), the stopping flag (load-acquire,
 * paired with stop_all()'s store-release) and wait_lock (setup_done,
 * paired with ssd_open()'s wait).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "common/bits.h"
#include "ssd/tier.h"

/* Take queued reads; on an offline drive fail everything queued. */
static void pull(struct drive *d)
{
	struct ssd *ssd = d->ssd;
	struct rreq *rin;
	struct wreq *wdrop = NULL;
	bool offline = drive_state(d) == SSD_DRIVE_OFFLINE;
	bool cancel = offline || LOAD(&d->stopping) == 2;

	pthread_mutex_lock(&d->qlock);
	rin = d->rq_in_head;
	d->rq_in_head = d->rq_in_tail = NULL;
	d->rq_len = 0;
	if (cancel) {
		wdrop = d->wq_head;
		d->wq_head = d->wq_tail = NULL;
		d->wq_len = 0;
		STORE(&d->st.queued_writes, 0);
	}
	pthread_mutex_unlock(&d->qlock);
	if (cancel) {
		while (rin) {
			struct rreq *n = rin->next;

			fail_read(d, rin, offline ? -ENODEV : -ECANCELED);
			rin = n;
		}
		while (d->rq_head) {
			struct rreq *n = d->rq_head->next;

			fail_read(d, d->rq_head, offline ? -ENODEV : -ECANCELED);
			d->rq_head = n;
		}
		d->rq_tail = NULL;
		while (wdrop) {
			struct wreq *n = wdrop->next;

			ssd_index_abort(&ssd->idx, wdrop->ent);
			ADD(&d->st.drops, 1);
			if (ssd->cfg.write_done)
				ssd->cfg.write_done(ssd->cfg.cb_arg, wdrop->cookie,
						    offline ? -ENODEV : -ECANCELED);
			wreq_free(d, wdrop);
			wdrop = n;
		}
		return;
	}
	if (rin) {
		if (d->rq_tail)
			d->rq_tail->next = rin;
		else
			d->rq_head = rin;
		while (rin->next)
			rin = rin->next;
		d->rq_tail = rin;
	}
}

/* Drop every queued write (close past its deadline). */
static void drop_queued_writes(struct drive *d, int res)
{
	struct ssd *ssd = d->ssd;
	struct wreq *w;

	pthread_mutex_lock(&d->qlock);
	w = d->wq_head;
	d->wq_head = d->wq_tail = NULL;
	d->wq_len = 0;
	STORE(&d->st.queued_writes, 0);
	pthread_mutex_unlock(&d->qlock);
	while (w) {
		struct wreq *n = w->next;

		ssd_index_abort(&ssd->idx, w->ent);
		ADD(&d->st.drops, 1);
		if (ssd->cfg.write_done)
			ssd->cfg.write_done(ssd->cfg.cb_arg, w->cookie, res);
		wreq_free(d, w);
		w = n;
	}
}

static void probe(struct drive *d, uint64_t now)
{
	struct iop *op;

	if (d->probe_inflight || d->inflight_total || drive_state(d) != SSD_DRIVE_ONLINE ||
	    now - d->last_completion_ns < PROBE_IDLE_NS)
		return;
	op = iop_get(d, IOP_PROBE);
	if (!op)
		return;
	d->probe_inflight = true;
	prep_io(d, op, false, d->probe_buf, SSD_UNIT, 0, SSD_UNIT);
}

/* One request of an iop ended (the drive's reap() calls it, ssd_dev_done_fn). */
static void complete(void *arg, uint64_t data, int res)
{
	struct drive *d = arg;
	struct iop *op = (struct iop *)(uintptr_t)(data & ~7ull);
	unsigned k = (unsigned)(data & 7);

	if (res < 0) {
		if (!op->err)
			op->err = res;
	} else if ((uint32_t)res != op->expect[k]) {
		op->short_io = true;
	}
	if (--op->pending)
		return;
	d->last_completion_ns = mono_ns();
	switch (op->kind) {
	case IOP_WRITE:
		op->payload_done = true;
		d->regions[op->region].payloads--;
		if (!op->hdr_done)
			return; /* zone_done() finishes it */
		write_finish(d, op);
		break;
	case IOP_ZONE:
		zone_done(d, op);
		break;
	case IOP_OPEN:
		erase_done(d, op);
		break;
	case IOP_SYNC:
		sync_done(d, op);
		break;
	case IOP_READ:
		read_landed(d, op);
		op->next_free = NULL;
		if (d->landed_tail)
			d->landed_tail->next_free = op;
		else
			d->landed_head = op;
		d->landed_tail = op;
		return; /* check_landed() finishes it */
	case IOP_RECOV: {
		bool more;

		op->pending = 0;
		more = recov_done(d, op);
		if (more && op->pending)
			return;
		d->recov_inflight--;
		break;
	}
	case IOP_SEAL:
		seal_done(d, op);
		break;
	case IOP_PROBE:
		d->probe_inflight = false;
		if (op->err || op->short_io) {
			ADD(&d->st.read_errors, 1);
			dlog_rl(d, LOG_WARNING, op->err, "health probe failed");
			note_error(d, op->err ? op->err : -EIO);
		}
		break;
	}
	iop_put(d, op);
}

static bool any_sealing(const struct drive *d)
{
	for (unsigned k = 0; k < d->nzreg; k++)
		if (d->regions[d->zreg[k]].state == SSD_R_SEALING)
			return true;
	return false;
}

/*
 * Close, step by step, one step per loop: write what is queued (until the
 * deadline), wait for the writes, seal the open region, wait for the seals,
 * then sync and mark the superblock clean.  Returns true when done.
 */
static bool close_step(struct drive *d, uint64_t now)
{
	uint32_t st = drive_state(d);

	if (st == SSD_DRIVE_ONLINE) {
		if (now > d->drain_deadline)
			drop_queued_writes(d, -ECANCELED);
		if (LOAD(&d->st.queued_writes) || d->inflight_blocks || d->rq_head)
			return false;
		if (d->cur != SSD_NO_ENTRY && d->regions[d->cur].nblocks)
			seal_begin(d, d->cur);
		if (any_sealing(d))
			return false;
	}
	if (d->inflight_total || d->rq_head)
		return false;
	if (st == SSD_DRIVE_ONLINE && !d->sync_done) {
		int r = d->dev->ops->datasync(d->dev);

		if (r == 0)
			r = mark_super(d, true);
		if (r < 0)
			slog(d->ssd, LOG_WARNING, r, "%s: cannot mark a clean stop", d->path);
		d->sync_done = true;
	}
	return true;
}

static bool can_progress(struct drive *d)
{
	bool room = d->inflight_blocks < d->depth && d->free_iops;

	if (d->rq_in_head || (d->rq_head && room))
		return true;
	if (d->wq_len && room && !d->write_stalled && drive_state(d) == SSD_DRIVE_ONLINE)
		return true;
	return false;
}

/*
 * Nothing to read or write (the drive thread), and no read for
 * IDLE_AFTER_READ_NS: the idle hook may give it writes.  Reads come in
 * bursts (a QUERY's SSD hits, then the next prompt's), so the pause keeps
 * the hook's writes from starting between two reads of a burst, where the
 * next read would wait behind them.  0: idle now; else the nanoseconds
 * left to wait (UINT64_MAX: busy).
 */
static uint64_t drive_idle_in(struct drive *d, uint64_t now)
{
	if (drive_state(d) != SSD_DRIVE_ONLINE || LOAD(&d->st.reads_pending) ||
	    LOAD(&d->st.queued_writes))
		return UINT64_MAX;
	return read_pause_left(d, now);
}

static void drive_loop(struct drive *d)
{
	struct ssd *ssd = d->ssd;

	d->recov_t0 = mono_ns();
	d->last_completion_ns = d->recov_t0;
	d->tokens_ns = d->recov_t0;
	for (;;) {
		uint64_t wait_ns = TICK_NS;
		unsigned n, wait_nr = 1;
		uint32_t stop = __atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE);
		uint64_t now = mono_ns(), idle_in = UINT64_MAX;

		pull(d);
		if (stop == 2) {
			/* Abandon: what a kill -9 leaves, once the kernel is done with our memory. */
			if (d->inflight_total == 0)
				break;
		} else {
			if (drive_state(d) == SSD_DRIVE_RECOVERING && !stop)
				recovery_pump(d);
			else if (drive_state(d) == SSD_DRIVE_RECOVERING && d->recov_inflight == 0)
				set_state(
					d,
					SSD_DRIVE_CLOSED); /* closed while recovering: stop scanning */
			dispatch_reads(d);
			if (drive_state(d) == SSD_DRIVE_ONLINE)
				dispatch_writes(d);
			/* The headers of what was just placed: one write per zone unit. */
			for (unsigned k = 0; k < d->nzreg; k++)
				zone_kick(d, d->zreg[k]);
			seal_pump(d);
			sync_erased(d);
			if (stop == 1 && close_step(d, now))
				break;
			probe(d, now);
			if (ssd->cfg.idle && !stop) {
				idle_in = drive_idle_in(d, now);
				if (idle_in == 0)
					ssd->cfg.idle(ssd->cfg.cb_arg);
			}
		}
		pthread_mutex_lock(&d->qlock);
		if (can_progress(d))
			wait_nr = 0;
		else
			d->sleeping = true;
		pthread_mutex_unlock(&d->qlock);
		if (wait_nr && d->ssd->cfg.write_rate && d->write_stalled)
			wait_ns = 10 * 1000000; /* tokens come back before the tick */
		if (wait_nr && idle_in && idle_in < wait_ns)
			wait_ns = idle_in; /* the idle hook's turn, after the pause */
		/*
		 * Completions run inside reap(), their callbacks too: one that
		 * queues a write while `sleeping` is still set only wakes the
		 * drive once more for nothing.
		 */
		n = d->dev->ops->reap(d->dev, wait_nr, wait_ns, complete, d);
		pthread_mutex_lock(&d->qlock);
		d->sleeping = false;
		pthread_mutex_unlock(&d->qlock);
		if (d->landed_head) {
			pull(d);
			dispatch_reads(d);
			d->dev->ops->submit(d->dev);
			check_landed(d);
		}
		if (LOAD(&d->st.queued_writes) == 0 && d->inflight_blocks == 0 && n)
			notify_waiters(ssd);
	}
	pull(d);
	drop_queued_writes(d, -ECANCELED);
	set_state(d, SSD_DRIVE_CLOSED);
}

/*
 * The iops (blocks in flight, recovery reads, seals, erases, the datasync,
 * the probe), each with two units of a bounce area, then the drive's own
 * setup with the bounce area and the caller's memory (the pool) as its
 * fixed buffers.
 */
static int drive_setup(struct drive *d)
{
	const struct ssd_config *cfg = &d->ssd->cfg;
	unsigned nr_iops = drive_nr_iops(d), n = 0;
	struct ssd_dev_mem *mem;
	struct ssd_dev_setup setup = { 0 };
	int r;

	d->iops = aligned_alloc(64, rup(sizeof(struct iop) * nr_iops, 64));
	if (posix_memalign((void **)&d->bounce_area, SSD_UNIT, (size_t)nr_iops * 2 * SSD_UNIT))
		d->bounce_area = NULL;
	if (posix_memalign((void **)&d->probe_buf, SSD_UNIT, SSD_UNIT))
		d->probe_buf = NULL;
	mem = calloc(cfg->nr_bufs + 1, sizeof(*mem));
	if (!d->iops || !d->bounce_area || !d->probe_buf || !mem) {
		free(mem);
		return -ENOMEM;
	}
	memset(d->iops, 0, sizeof(struct iop) * nr_iops);
	for (unsigned i = 0; i < nr_iops; i++) {
		d->iops[i].bounce = d->bounce_area + (size_t)i * 2 * SSD_UNIT;
		d->iops[i].next_free = d->free_iops;
		d->free_iops = &d->iops[i];
	}
	d->nfree_iops = nr_iops;
	mem[n++] = (struct ssd_dev_mem){ d->bounce_area, (uint64_t)nr_iops * 2 * SSD_UNIT };
	for (unsigned b = 0; b < cfg->nr_bufs; b++)
		mem[n++] = (struct ssd_dev_mem){ cfg->bufs[b].base, cfg->bufs[b].len };
	r = d->dev->ops->start(d->dev, next_pow2_u32(d->depth * IOP_MAX_SQES + 16), mem, n, &setup);
	free(mem);
	STORE(&d->st.setup_flags, setup.setup_flags);
	d->st.fixed_file = setup.fixed_file;
	d->st.fixed_buffers = setup.fixed_buffers;
	return r;
}

void *drive_main(void *arg)
{
	struct drive *d = arg;
	struct ssd *ssd = d->ssd;
	int r;

	if (ssd->cfg.thread_init)
		ssd->cfg.thread_init(ssd->cfg.cb_arg);
	r = drive_setup(d);
	pthread_mutex_lock(&ssd->wait_lock);
	d->setup_res = r;
	d->setup_done = true;
	pthread_cond_broadcast(&ssd->wait_cond);
	pthread_mutex_unlock(&ssd->wait_lock);
	if (r == 0)
		drive_loop(d);
	d->dev->ops->stop(d->dev);
	notify_waiters(ssd);
	if (ssd->cfg.thread_fini)
		ssd->cfg.thread_fini(ssd->cfg.cb_arg);
	return NULL;
}
