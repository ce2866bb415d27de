/* SPDX-License-Identifier: MIT */
/*
 * The memory drive (dev.h): the drive ops over a malloc'ed buffer, so the
 * tier's logic (placement, sealing, reclaim, recovery, checksums) runs in
 * unit tests without an O_DIRECT disk.  A request is queued by prep_*,
 * done (memcpy) at submit and completed from a queue by the next reap(),
 * as a ring would: the tier's callbacks never run inside its own prep.
 * ssd_mem_fail() makes requests touching a byte range fail, for the
 * tier's error paths.  Its bytes outlive the tier (ssd_close(), then
 * ssd_open_mem() again recovers what is there), as a disk's do.
 *
 * Threads: the drive thread queues, submits and reaps; wake(),
 * ssd_mem_fail() and ssd_mem_failed() come from any thread.  Everything
 * below is under @lock: the queues (the drive thread's, but reap() waits
 * on @cond for wake()'s signal), the wake-up count and the fail range.
 * The bytes are the tier's: moved only on the drive thread at submit or
 * by the sync calls, which the tier never runs concurrently with it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssd/dev.h"

struct mem_req {
	struct mem_req *next;
	bool write, sync;
	void *buf;
	uint32_t len;
	uint64_t off;
	uint64_t tag;
	int res;
};

struct mem_q {
	struct mem_req *head, *tail;
};

struct ssd_mem {
	struct ssd_dev dev; /* first: the tier holds &dev */
	uint8_t *bytes;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct mem_q queued, done;
	uint64_t wakes; /* wake() calls not yet seen by reap() */
	uint64_t fail_off, fail_len, failed;
	int fail_err;
	bool claimed;
};

static struct ssd_mem *to_m(struct ssd_dev *dev)
{
	return (struct ssd_mem *)dev;
}

static void q_push(struct mem_q *q, struct mem_req *rq)
{
	rq->next = NULL;
	if (q->tail)
		q->tail->next = rq;
	else
		q->head = rq;
	q->tail = rq;
}

/* Move @len bytes at @off, or -EIO past the end. */
static int mem_move(struct ssd_mem *m, bool write, void *buf, uint32_t len, uint64_t off)
{
	if (off > m->dev.size || len > m->dev.size - off)
		return -EIO;
	if (write)
		memcpy(m->bytes + off, buf, len);
	else
		memcpy(buf, m->bytes + off, len);
	return 0;
}

static int mem_read_sync(struct ssd_dev *dev, void *buf, uint32_t len, uint64_t off)
{
	return mem_move(to_m(dev), false, buf, len, off);
}

static int mem_write_sync(struct ssd_dev *dev, const void *buf, uint32_t len, uint64_t off)
{
	return mem_move(to_m(dev), true, (void *)buf, len, off);
}

static int mem_datasync(struct ssd_dev *dev)
{
	return 0; /* memory: every write is as durable as it gets */
}

static int mem_start(struct ssd_dev *dev, unsigned entries, const struct ssd_dev_mem *mem,
		     unsigned nr, struct ssd_dev_setup *ret)
{
	*ret = (struct ssd_dev_setup){ 0 };
	return 0;
}

static int mem_prep(struct ssd_mem *m, bool write, bool sync, void *buf, uint32_t len, uint64_t off,
		    uint64_t tag)
{
	struct mem_req *rq = malloc(sizeof(*rq));

	if (!rq)
		return -EBUSY; /* as a full ring says it */
	*rq = (struct mem_req){
		.write = write, .sync = sync, .buf = buf, .len = len, .off = off, .tag = tag
	};
	pthread_mutex_lock(&m->lock);
	q_push(&m->queued, rq);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int mem_prep_rw(struct ssd_dev *dev, bool write, void *buf, uint32_t len, uint64_t off,
		       uint64_t tag)
{
	return mem_prep(to_m(dev), write, false, buf, len, off, tag);
}

static int mem_prep_sync(struct ssd_dev *dev, uint64_t tag)
{
	return mem_prep(to_m(dev), false, true, NULL, 0, 0, tag);
}

/* Whether @rq touches the fail range (lock held). */
static bool mem_fails(const struct ssd_mem *m, const struct mem_req *rq)
{
	return !rq->sync && m->fail_len && rq->off < m->fail_off + m->fail_len &&
	       m->fail_off < rq->off + rq->len;
}

/* Do every queued request; its result waits in the done queue for reap(). */
static void mem_submit(struct ssd_dev *dev)
{
	struct ssd_mem *m = to_m(dev);
	struct mem_req *rq;

	pthread_mutex_lock(&m->lock);
	while ((rq = m->queued.head)) {
		m->queued.head = rq->next;
		if (!m->queued.head)
			m->queued.tail = NULL;
		if (mem_fails(m, rq)) {
			rq->res = m->fail_err;
			m->failed++;
		} else if (rq->sync) {
			rq->res = 0;
		} else {
			rq->res = mem_move(m, rq->write, rq->buf, rq->len, rq->off);
			if (rq->res == 0)
				rq->res = (int)rq->len;
		}
		q_push(&m->done, rq);
	}
	pthread_mutex_unlock(&m->lock);
}

static void deadline_in(struct timespec *ts, uint64_t ns)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ns += (uint64_t)ts->tv_nsec;
	ts->tv_sec += (time_t)(ns / 1000000000ull);
	ts->tv_nsec = (long)(ns % 1000000000ull);
}

static unsigned mem_reap(struct ssd_dev *dev, unsigned wait_nr, uint64_t timeout_ns,
			 ssd_dev_done_fn *done, void *arg)
{
	struct ssd_mem *m = to_m(dev);
	struct mem_req *list;
	struct timespec dl;
	unsigned n = 0;

	mem_submit(dev);
	deadline_in(&dl, timeout_ns);
	pthread_mutex_lock(&m->lock);
	/* Pairs with the signal in mem_wake(): a wake-up before this wait is counted. */
	while (wait_nr && !m->done.head && !m->wakes)
		if (pthread_cond_timedwait(&m->cond, &m->lock, &dl) == ETIMEDOUT)
			break;
	n = m->wakes ? 1 : 0; /* a ring reports its wake-up read as one completion */
	m->wakes = 0;
	list = m->done.head;
	m->done.head = m->done.tail = NULL;
	pthread_mutex_unlock(&m->lock);
	/* Without the lock: @done queues more (mem_prep() takes it). */
	while (list) {
		struct mem_req *rq = list;

		list = rq->next;
		done(arg, rq->tag, rq->res);
		free(rq);
		n++;
	}
	return n;
}

static void mem_wake(struct ssd_dev *dev)
{
	struct ssd_mem *m = to_m(dev);

	pthread_mutex_lock(&m->lock);
	m->wakes++;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

/* Requests never reaped (the tier stopped with I/O queued: abandon) are dropped. */
static void mem_stop(struct ssd_dev *dev)
{
	struct ssd_mem *m = to_m(dev);

	mem_submit(dev);
	pthread_mutex_lock(&m->lock);
	while (m->done.head) {
		struct mem_req *rq = m->done.head;

		m->done.head = rq->next;
		free(rq);
	}
	m->done.tail = NULL;
	m->wakes = 0;
	pthread_mutex_unlock(&m->lock);
}

static void mem_close(struct ssd_dev *dev)
{
	struct ssd_mem *m = to_m(dev);

	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->claimed = false;
	pthread_mutex_unlock(&m->lock);
}

static const struct ssd_dev_ops mem_ops = {
	.read_sync = mem_read_sync,
	.write_sync = mem_write_sync,
	.datasync = mem_datasync,
	.start = mem_start,
	.prep_rw = mem_prep_rw,
	.prep_sync = mem_prep_sync,
	.submit = mem_submit,
	.reap = mem_reap,
	.wake = mem_wake,
	.stop = mem_stop,
	.close = mem_close,
};

int ssd_mem_new(uint64_t size, struct ssd_mem **ret)
{
	struct ssd_mem *m;
	pthread_condattr_t ca;

	if (!size || size % 512)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->bytes = calloc(1, size);
	if (!m->bytes) {
		free(m);
		return -ENOMEM;
	}
	m->dev = (struct ssd_dev){
		.ops = &mem_ops, .size = size, .io_align = 512, .mem_align = 512
	};
	pthread_mutex_init(&m->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cond, &ca);
	pthread_condattr_destroy(&ca);
	*ret = m;
	return 0;
}

void ssd_mem_free(struct ssd_mem *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->cond);
	free(m->bytes);
	free(m);
}

uint8_t *ssd_mem_bytes(struct ssd_mem *m, uint64_t *ret_size)
{
	if (ret_size)
		*ret_size = m->dev.size;
	return m->bytes;
}

void ssd_mem_fail(struct ssd_mem *m, uint64_t off, uint64_t len, int err)
{
	pthread_mutex_lock(&m->lock);
	m->fail_off = off;
	m->fail_len = len;
	m->fail_err = err < 0 ? err : -err;
	pthread_mutex_unlock(&m->lock);
}

uint64_t ssd_mem_failed(struct ssd_mem *m)
{
	uint64_t n;

	pthread_mutex_lock(&m->lock);
	n = m->failed;
	pthread_mutex_unlock(&m->lock);
	return n;
}

int ssd_mem_claim(struct ssd_mem *m, struct ssd_dev **ret)
{
	int r = 0;

	pthread_mutex_lock(&m->lock);
	if (m->claimed)
		r = -EBUSY;
	m->claimed = true;
	pthread_mutex_unlock(&m->lock);
	if (r == 0)
		*ret = &m->dev;
	return r;
}
