/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "control/loop.h"
#include "base/util.h"

#define EV_BATCH 64

static void run_timers(struct ev_source *src, uint32_t events)
{
	struct ev_loop *l = container_of(src, struct ev_loop, tick);
	struct ev_timer *t, *tmp;
	uint64_t v, now;
	ssize_t r = read(src->fd, &v, sizeof(v));

	(void)r; /* expirations missed while busy are not made up for */
	(void)events;
	now = now_ns();
	cds_list_for_each_entry_safe(t, tmp, &l->timers, node) {
		if (t->interval_ns && t->last_ns && now - t->last_ns < t->interval_ns)
			continue;
		t->last_ns = now;
		t->fn(t, now);
	}
}

int ev_loop_init(struct ev_loop *l)
{
	struct itimerspec its = { { 0, EV_TICK_MS * 1000000L }, { 0, EV_TICK_MS * 1000000L } };

	CDS_INIT_LIST_HEAD(&l->timers);
	CDS_INIT_LIST_HEAD(&l->deferred);
	l->tick.fd = -1;
	l->tick.fn = run_timers;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0)
		return -errno;
	l->tick.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (l->tick.fd < 0)
		return -errno;
	if (timerfd_settime(l->tick.fd, 0, &its, NULL) < 0)
		return -errno;
	return ev_add(l, &l->tick, EPOLLIN);
}

static void run_deferred(struct ev_loop *l)
{
	struct ev_deferred *d, *tmp;

	cds_list_for_each_entry_safe(d, tmp, &l->deferred, node) {
		cds_list_del(&d->node);
		d->fn(d);
	}
}

void ev_loop_fini(struct ev_loop *l)
{
	run_deferred(l);
	if (l->tick.fd >= 0)
		close(l->tick.fd);
	if (l->epfd >= 0)
		close(l->epfd);
	l->tick.fd = l->epfd = -1;
}

int ev_add(struct ev_loop *l, struct ev_source *src, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	return epoll_ctl(l->epfd, EPOLL_CTL_ADD, src->fd, &ev) < 0 ? -errno : 0;
}

int ev_mod(struct ev_loop *l, struct ev_source *src, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	return epoll_ctl(l->epfd, EPOLL_CTL_MOD, src->fd, &ev) < 0 ? -errno : 0;
}

void ev_del(struct ev_loop *l, struct ev_source *src)
{
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, src->fd, NULL);
}

void ev_timer_add(struct ev_loop *l, struct ev_timer *t, uint64_t interval_ns,
		  void (*fn)(struct ev_timer *t, uint64_t now_ns))
{
	t->interval_ns = interval_ns;
	t->last_ns = 0;
	t->fn = fn;
	cds_list_add_tail(&t->node, &l->timers);
}

void ev_timer_del(struct ev_timer *t)
{
	cds_list_del(&t->node);
}

void ev_defer(struct ev_loop *l, struct ev_deferred *d, void (*fn)(struct ev_deferred *d))
{
	d->fn = fn;
	cds_list_add_tail(&d->node, &l->deferred);
}

int ev_loop_run_once(struct ev_loop *l, int timeout_ms)
{
	struct epoll_event evs[EV_BATCH];
	int n = epoll_wait(l->epfd, evs, EV_BATCH, timeout_ms);

	if (n < 0 && errno != EINTR)
		return -errno;
	for (int i = 0; i < n; i++) {
		struct ev_source *src = evs[i].data.ptr;

		src->fn(src, evs[i].events);
	}
	/* After the batch: no event left in it can name what these free. */
	run_deferred(l);
	return 0;
}
