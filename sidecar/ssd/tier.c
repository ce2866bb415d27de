/* SPDX-License-Identifier: MIT */
/*
 * What every step of the tier needs (tier.h): rate-limited logging, a
 * drive going offline, the iop pool and its data requests to the drive
 * (dev.h ops), and the write queue shared with ssd_write().
 *
 * Threads: the iop pool and requests are the drive thread's; dlog_rl()
 * (log_lock) and the write queue functions (callers hold qlock, but
 * wreq_free() takes it) run on any thread; set_state() is a
 * store-release read by drive_state() on any thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>

#include "common/mem.h"
#include "ssd/tier.h"

/* I/O errors: at most LOG_BURST lines per LOG_WINDOW_NS and drive, then a count. */
void dlog_rl(struct drive *d, int level, int err, const char *fmt, ...)
{
	char msg[400];
	uint32_t suppressed = 0;
	bool emit;
	uint64_t now = mono_ns();
	va_list ap;

	pthread_mutex_lock(&d->log_lock);
	if (now - d->log_window > LOG_WINDOW_NS) {
		suppressed = d->log_suppressed;
		d->log_window = now;
		d->log_count = 0;
		d->log_suppressed = 0;
	}
	emit = d->log_count < LOG_BURST;
	if (emit)
		d->log_count++;
	else
		d->log_suppressed++;
	pthread_mutex_unlock(&d->log_lock);
	if (suppressed)
		slog(d->ssd, LOG_WARNING, 0, "%s: %u similar messages suppressed", d->path,
		     suppressed);
	if (!emit)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	slog(d->ssd, level, err, "%s: %s", d->path, msg);
}

/* One I/O of @ns into histogram @h and its sum @sum_ns (Prometheus wants both). */
void hist_add(uint64_t *h, uint64_t *sum_ns, uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned b = us ? 64 - __builtin_clzll(us) : 0;

	if (b >= SSD_HIST_BUCKETS)
		b = SSD_HIST_BUCKETS - 1;
	ADD(&h[b], 1);
	ADD(sum_ns, ns);
}

void set_state(struct drive *d, uint32_t s)
{
	__atomic_store_n(&d->state, s, __ATOMIC_RELEASE);
	STORE(&d->st.state, s);
}

void notify_waiters(struct ssd *ssd)
{
	pthread_mutex_lock(&ssd->wait_lock);
	pthread_cond_broadcast(&ssd->wait_cond);
	pthread_mutex_unlock(&ssd->wait_lock);
}

struct iop *iop_get(struct drive *d, int kind)
{
	struct iop *op = d->free_iops;

	if (!op)
		return NULL;
	d->free_iops = op->next_free;
	d->nfree_iops--;
	op->kind = kind;
	op->pending = 0;
	op->err = 0;
	op->short_io = false;
	op->fault = SSD_FAULT_NONE;
	op->w = NULL;
	op->r = NULL;
	op->tmp = NULL;
	op->t0 = mono_ns();
	d->inflight_total++;
	return op;
}

void iop_put(struct drive *d, struct iop *op)
{
	d->inflight_total--;
	op->tmp = mfree(op->tmp);
	op->next_free = d->free_iops;
	d->free_iops = op;
	d->nfree_iops++;
}

/* Queue one data request of @op: @len bytes at drive offset @off from/to @buf. */
int prep_io(struct drive *d, struct iop *op, bool write, void *buf, uint32_t len, uint64_t off,
	    uint32_t expect)
{
	/* The request's number in the low bits: iops are 8-byte aligned. */
	uint64_t tag = (uint64_t)(uintptr_t)op | (uint64_t)op->pending;
	int r = d->dev->ops->prep_rw(d->dev, write, buf, len, off, tag);

	if (r < 0)
		return r;
	op->expect[op->pending] = expect;
	op->pending++;
	return 0;
}

/* ---- errors and offline ------------------------------------------------ */

void go_offline(struct drive *d, int err, const char *why)
{
	if (drive_state(d) == SSD_DRIVE_OFFLINE || drive_state(d) == SSD_DRIVE_CLOSED)
		return;
	set_state(d, SSD_DRIVE_OFFLINE);
	slog(d->ssd, LOG_ERR, err, "%s: drive offline (%s); its blocks are misses from now on",
	     d->path, why);
	notify_waiters(d->ssd);
}

void note_error(struct drive *d, int err)
{
	uint64_t now = mono_ns();
	uint32_t max = d->ssd->cfg.max_errors ? d->ssd->cfg.max_errors : DEF_MAX_ERRORS;

	if (err == -ENODEV || err == -ENXIO) {
		go_offline(d, err, "device removed");
		return;
	}
	if (now - d->err_window_start > ERROR_WINDOW_NS) {
		d->err_window_start = now;
		d->err_window_count = 0;
	}
	if (++d->err_window_count >= max)
		go_offline(d, err, "too many I/O errors");
}

/* ---- the write queue (qlock) -------------------------------------------- */

void wq_unlink(struct drive *d, struct wreq *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		d->wq_head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		d->wq_tail = w->prev;
	w->prev = w->next = NULL;
	d->wq_len--;
	STORE(&d->st.queued_writes, d->wq_len);
}

void wq_push_tail(struct drive *d, struct wreq *w)
{
	w->next = NULL;
	w->prev = d->wq_tail;
	if (d->wq_tail)
		d->wq_tail->next = w;
	else
		d->wq_head = w;
	d->wq_tail = w;
	d->wq_len++;
	STORE(&d->st.queued_writes, d->wq_len);
}

void wreq_free(struct drive *d, struct wreq *w)
{
	pthread_mutex_lock(&d->qlock);
	w->next = d->wfree;
	d->wfree = w;
	pthread_mutex_unlock(&d->qlock);
}

void wake_drive(struct drive *d)
{
	/* Ends the drive thread's wait in reap() (dev-uring.c: its armed eventfd read). */
	d->dev->ops->wake(d->dev);
}
