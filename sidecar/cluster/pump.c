/* SPDX-License-Identifier: MIT */
/*
 * The registry's turn on the control loop.  registry_fd() is an epoll fd
 * of the registry's own (the wake eventfd, the timerfd, the connection to
 * Redis, the sentinels' connections), which the control thread's loop
 * watches; registry_dispatch() lets hiredis and the sentinels read and
 * write, then runs pump_run(), where everything the callbacks recorded is
 * acted on, in an order that matters: the sentinels first (a failover
 * changes where the connection goes), the connection's deadlines and
 * teardown, the lease, the batches; then flushes and queries; then the
 * wake-up is armed and the timer set to the earliest deadline.
 *
 * Control thread only.  The wake eventfd is the hand-off from the
 * producers' threads: rq_arm_wake() here and the producers' rq_push() are
 * the two sides of queue.h's Dekker pair (Wake-up), so a change pushed
 * while we went to sleep is either seen here or writes the eventfd.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/async.h>

#include "cluster/aconn.h"
#include "cluster/barrier.h"
#include "cluster/ledger.h"
#include "cluster/link.h"
#include "cluster/nodelease.h"
#include "cluster/pipeline.h"
#include "cluster/pump.h"
#include "cluster/regquery.h"
#include "cluster/queue.h"
#include "cluster/registry-internal.h"
#include "cluster/sentinel.h"

static void arm_timer(struct registry *r, uint64_t now)
{
	uint64_t t = UINT64_MAX;
	struct itimerspec its = { 0 };

#define AT(x)                       \
	do {                        \
		if ((x) && (x) < t) \
			t = (x);    \
	} while (0)
	if (r->state == REG_DISCONNECTED)
		AT(r->next_attempt);
	if (r->state == REG_CONNECTING)
		AT(r->connect_deadline);
	if (r->closing && r->ac)
		AT(r->close_deadline);
	if (r->inflight_head)
		AT(r->inflight_head->sent_ns + (uint64_t)r->command_ms * MS);
	if (r->state == REG_READY) {
		AT(r->renew_at);
		AT(r->lease_valid_until);
		AT(r->refresh_at);
	}
	if (r->state == REG_CONFLICT || r->state == REG_HANDSHAKE)
		AT(r->acquire_retry_at);
	if (r->sent && !r->closing && r->sentinel_next != UINT64_MAX)
		AT(r->sentinel_next);
	{
		uint64_t d = ledger_next_deadline(&r->led);

		AT(d != UINT64_MAX ? d : 0);
	}
	for (struct query *q = r->queries; q; q = q->next)
		if (!q->done)
			AT(q->deadline);
#undef AT
	if (t == r->armed_ns)
		return;
	r->armed_ns = t;
	if (t != UINT64_MAX) {
		if (t <= now)
			t = now + 1;
		its.it_value.tv_sec = (time_t)(t / 1000000000ull);
		its.it_value.tv_nsec = (long)(t % 1000000000ull);
	}
	timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

void pump_run(struct registry *r)
{
	uint64_t now = now_ns();

	/* First: a failover it reports changes where the connection goes. */
	if (r->sent && !r->closing) {
		uint32_t n, up;

		if (r->want_look) {
			r->want_look = 0;
			sentinel_look(r->sent);
		}
		r->sentinel_next = sentinel_tick(r->sent, now);
		sentinel_counts(r->sent, &n, &up);
		ST_SET(r, sentinels, n);
		ST_SET(r, sentinels_up, up);
	}

	for (int round = 0; round < 4; round++) {
		/* Deadlines of the connection. */
		if (r->state == REG_CONNECTING && now >= r->connect_deadline)
			want_close(r, "connect timed out");
		if (r->inflight_head &&
		    now >= r->inflight_head->sent_ns + (uint64_t)r->command_ms * MS) {
			ST_ADD(r, errors, 1);
			want_close(r, "no reply within command_timeout");
		}
		if (r->state == REG_READY && now >= r->lease_valid_until)
			nodelease_lost(r, "not renewed in time");
		if (r->want_close && r->ac) {
			char why[128];

			snprintf(why, sizeof(why), "%s", r->close_why);
			link_close(r, why, ETIMEDOUT);
		}
		r->want_close = 0;

		if (r->closing) {
			if (r->ac && (!r->releasing || now >= r->close_deadline))
				link_close(r, "shut down", 0);
			if (!r->ac)
				set_state(r, REG_CLOSED);
		} else if (r->state == REG_DISCONNECTED && now >= r->next_attempt) {
			link_open(r);
		}

		/* Lease: acquire once the scripts are loaded, renew on time, refresh. */
		nodelease_tick(r, now);

		if (r->state == REG_READY && !r->closing)
			pipeline_fill(r);
		else
			pipeline_drain(r);
		if (!r->want_close)
			break;
	}
	barrier_complete(r, now, r->closing);
	query_pump(r, now, r->closing);
	/* Sleep only with nothing left to take (see queue.h, Wake-up). */
	if (r->state != REG_READY || r->batches_inflight < BATCHES_IN_FLIGHT) {
		if (rq_arm_wake(&r->q))
			kick(r);
	}
	ST_SET(r, queue_depth, rq_depth(&r->q));
	ST_SET(r, enqueued, __atomic_load_n(&r->q.enqueued, __ATOMIC_RELAXED));
	ST_SET(r, dropped_overflow, __atomic_load_n(&r->q.overflow, __ATOMIC_RELAXED));
	arm_timer(r, now_ns());
}

void registry_dispatch(struct registry *r)
{
	struct epoll_event ev[8];
	int n;

	n = epoll_wait(r->epfd, ev, 8, 0);
	for (int i = 0; i < n; i++) {
		uint64_t v;

		if (ev[i].data.u32 == TAG_WAKE || ev[i].data.u32 == TAG_TIMER) {
			ssize_t rd =
				read(ev[i].data.u32 == TAG_WAKE ? r->evfd : r->tfd, &v, sizeof(v));

			(void)rd;
			if (ev[i].data.u32 == TAG_TIMER)
				r->armed_ns = 0; /* it fired: disarmed, whatever it was set to */
			continue;
		}
		if (sentinel_owns(r->sent, ev[i].data.u32)) {
			sentinel_event(r->sent, ev[i].data.u32, ev[i].events);
			continue;
		}
		redisAsyncContext *ac = r->ac;

		/* HandleRead may free it (on_disconnect cleared r->ac). */
		aconn_event(&r->mc, ev[i].events);
		if (r->ac == ac && ac && ac->c.reader &&
		    ac->c.reader->len - ac->c.reader->pos > READ_BUFFER_MAX) {
			ST_ADD(r, errors, 1);
			want_close(r, "reply larger than the registry accepts");
		}
	}
	pump_run(r);
}

void registry_tick(struct registry *r)
{
	pump_run(r);
}

int registry_fd(const struct registry *r)
{
	return r->epfd;
}
