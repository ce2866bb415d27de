/* SPDX-License-Identifier: MIT */
/*
 * The service's shared helpers (kp.h): logging with a rate limit for what
 * peers cause, the thread's identity, the epoch, registered memory's
 * lookup, epoll registration, and the command queue that the callers'
 * threads fill and the service thread empties (run_cmds() in service.c).
 * Called from any thread where a function says so, else from the
 * service thread.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "peer/kp.h"

/* ---- Logging ------------------------------------------------------------- */

static void vlog(struct kvspeer *kp, int level, const char *fmt, va_list ap)
{
	char msg[512];

	if (!kp->p.log)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	kp->p.log(kp->p.log_arg, level, msg);
}

void kp_log(struct kvspeer *kp, int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(kp, level, fmt, ap);
	va_end(ap);
}

/* At most 20 lines a second that peers cause; the rest are counted, then said. */
#define PEER_LOG_PER_SEC 20u

void kp_log_peer(struct kvspeer *kp, int level, const char *fmt, ...)
{
	uint64_t now = peer_now_ns();
	va_list ap;

	if (now - kp->log_window_ns >= 1000 * NSEC_PER_MSEC) {
		if (kp->log_suppressed)
			kp_log(kp, KVSPEER_LOG_WARNING,
			       "%u lines about peers suppressed in the last second",
			       kp->log_suppressed);
		kp->log_window_ns = now;
		kp->log_in_window = 0;
		kp->log_suppressed = 0;
	}
	if (kp->log_in_window >= PEER_LOG_PER_SEC) {
		kp->log_suppressed++;
		return;
	}
	kp->log_in_window++;
	va_start(ap, fmt);
	vlog(kp, level, fmt, ap);
	va_end(ap);
}

bool kp_on_thread(struct kvspeer *kp)
{
	return kp->thread_started && pthread_equal(pthread_self(), kp->thread);
}

uint64_t kp_epoch(struct kvspeer *kp)
{
	/* Relaxed: a number told to peers, ordered against nothing. */
	return __atomic_load_n(&kp->epoch, __ATOMIC_RELAXED);
}

void kvspeer_set_epoch(struct kvspeer *kp, uint64_t epoch)
{
	if (kp)
		__atomic_store_n(&kp->epoch, epoch, __ATOMIC_RELAXED);
}

/* ---- Registered memory --------------------------------------------------- */

int kp_region_find(struct kvspeer *kp, const void *addr, uint64_t len)
{
	uintptr_t a = (uintptr_t)addr;

	if (!len || a + len < a)
		return -1;
	for (uint32_t i = 0; i < kp->nr_regions; i++) {
		const struct region *r = &kp->regions[i];

		if (a >= r->base && a - r->base <= r->len && len <= r->len - (a - r->base))
			return (int)i;
	}
	return -1;
}

/* ---- The queue to the service thread ------------------------------------- */

void kp_wake(struct kvspeer *kp)
{
	uint64_t one = 1;

	/* A failed write means the counter is already non-zero: a wake is pending. */
	if (write(kp->wakefd, &one, sizeof(one)) < 0) {
	}
}

int kp_ctl(struct kvspeer *kp, void (*fn)(struct kvspeer *, struct ctl_req *), void *arg)
{
	struct ctl_req r = { .fn = fn, .arg = arg };
	int ret;

	if (kp_on_thread(kp))
		return -EDEADLK;
	pthread_cond_init(&r.cond, NULL);
	pthread_mutex_lock(&kp->cmd_lock);
	if (kp->stopping) {
		pthread_mutex_unlock(&kp->cmd_lock);
		pthread_cond_destroy(&r.cond);
		return -ESHUTDOWN;
	}
	cds_list_add_tail(&r.link, &kp->ctl);
	pthread_mutex_unlock(&kp->cmd_lock);
	kp_wake(kp);
	pthread_mutex_lock(&kp->cmd_lock);
	while (!r.done)
		pthread_cond_wait(&r.cond, &kp->cmd_lock);
	ret = r.result;
	pthread_mutex_unlock(&kp->cmd_lock);
	pthread_cond_destroy(&r.cond);
	return ret;
}

int kp_submit(struct kvspeer *kp, struct fetch *f)
{
	pthread_mutex_lock(&kp->cmd_lock);
	if (kp->stopping) {
		pthread_mutex_unlock(&kp->cmd_lock);
		return -ESHUTDOWN;
	}
	cds_list_add_tail(&f->link, &kp->cmds);
	pthread_mutex_unlock(&kp->cmd_lock);
	kp_wake(kp);
	return 0;
}

int kp_epoll_add(struct kvspeer *kp, int fd, struct ev_src *src, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	return epoll_ctl(kp->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}
