/* SPDX-License-Identifier: MIT */
/*
 * The control loop (control/loop.c): events reach the source they belong
 * to with their mask; a source with no events wanted gets none; what is
 * deferred runs after the batch, never inside it; timers run at the first
 * tick, then every tick or once per interval.  Time only bounds the waits:
 * no result depends on how fast the machine is.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "control/loop.h"
#include "base/util.h"
#include "unit.h"

struct pipe_src {
	struct ev_source ev;
	int wfd;
	unsigned calls;
	uint32_t events;
	struct ev_loop *l;
	struct ev_deferred later;
	unsigned later_runs;
	unsigned calls_when_deferred_ran;
};

static void on_pipe(struct ev_source *src, uint32_t events)
{
	struct pipe_src *p = container_of(src, struct pipe_src, ev);
	char c;

	p->calls++;
	p->events = events;
	if (read(src->fd, &c, 1) != 1)
		ck_abort_msg("read");
}

static struct pipe_src *pipe_src(struct ev_loop *l, uint32_t events)
{
	struct pipe_src *p = calloc(1, sizeof(*p));
	int fds[2];

	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(pipe(fds), 0);
	p->ev.fd = fds[0];
	p->ev.fn = on_pipe;
	p->wfd = fds[1];
	p->l = l;
	ck_assert_int_eq(ev_add(l, &p->ev, events), 0);
	return p;
}

static void pipe_free(struct ev_loop *l, struct pipe_src *p)
{
	ev_del(l, &p->ev);
	close(p->ev.fd);
	close(p->wfd);
	free(p);
}

static void poke(struct pipe_src *p)
{
	ck_assert_int_eq(write(p->wfd, "x", 1), 1);
}

START_TEST(test_dispatch)
{
	struct ev_loop l;
	struct pipe_src *a, *b;

	ck_assert_int_eq(ev_loop_init(&l), 0);
	a = pipe_src(&l, EPOLLIN);
	b = pipe_src(&l, EPOLLIN);
	poke(b);
	for (int i = 0; i < 100 && !b->calls; i++)
		ck_assert_int_eq(ev_loop_run_once(&l, 100), 0);
	ck_assert_uint_eq(b->calls, 1);
	ck_assert_uint_eq(b->events & EPOLLIN, EPOLLIN);
	ck_assert_uint_eq(a->calls, 0);
	/* Nothing wanted: the readable pipe stays quiet until asked for again. */
	ck_assert_int_eq(ev_mod(&l, &a->ev, 0), 0);
	poke(a);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(ev_loop_run_once(&l, 0), 0);
	ck_assert_uint_eq(a->calls, 0);
	ck_assert_int_eq(ev_mod(&l, &a->ev, EPOLLIN), 0);
	for (int i = 0; i < 100 && !a->calls; i++)
		ck_assert_int_eq(ev_loop_run_once(&l, 100), 0);
	ck_assert_uint_eq(a->calls, 1);
	pipe_free(&l, a);
	pipe_free(&l, b);
	ev_loop_fini(&l);
}
END_TEST

static struct pipe_src *deferrer;

static void deferred_ran(struct ev_deferred *d)
{
	struct pipe_src *p = container_of(d, struct pipe_src, later);

	p->later_runs++;
	p->calls_when_deferred_ran = p->calls;
}

static void on_pipe_defer(struct ev_source *src, uint32_t events)
{
	struct pipe_src *p = container_of(src, struct pipe_src, ev);

	on_pipe(src, events);
	ev_defer(p->l, &p->later, deferred_ran);
	/* Not yet: the batch is not over. */
	ck_assert_uint_eq(p->later_runs, 0);
}

START_TEST(test_defer)
{
	struct ev_loop l;

	ck_assert_int_eq(ev_loop_init(&l), 0);
	deferrer = pipe_src(&l, EPOLLIN);
	deferrer->ev.fn = on_pipe_defer;
	poke(deferrer);
	for (int i = 0; i < 100 && !deferrer->calls; i++)
		ck_assert_int_eq(ev_loop_run_once(&l, 100), 0);
	ck_assert_uint_eq(deferrer->calls, 1);
	ck_assert_uint_eq(deferrer->later_runs, 1);
	ck_assert_uint_eq(deferrer->calls_when_deferred_ran, 1);
	/* Deferred outside a batch: run by the next batch's end, or by fini. */
	ev_defer(&l, &deferrer->later, deferred_ran);
	ev_loop_fini(&l);
	ck_assert_uint_eq(deferrer->later_runs, 2);
	close(deferrer->ev.fd);
	close(deferrer->wfd);
	free(deferrer);
}
END_TEST

struct tcount {
	struct ev_timer t;
	unsigned runs;
	uint64_t last;
};

static void on_timer(struct ev_timer *t, uint64_t now)
{
	struct tcount *c = container_of(t, struct tcount, t);

	ck_assert_uint_ge(now, c->last);
	c->last = now;
	c->runs++;
}

START_TEST(test_timers)
{
	struct ev_loop l;
	struct tcount every = { 0 }, hourly = { 0 };
	uint64_t deadline = now_ns() + 10 * NSEC_PER_SEC;

	ck_assert_int_eq(ev_loop_init(&l), 0);
	ev_timer_add(&l, &every.t, 0, on_timer);
	ev_timer_add(&l, &hourly.t, 3600 * NSEC_PER_SEC, on_timer);
	/* Three ticks: the every-tick timer runs at each, the hourly one at the first only. */
	while (every.runs < 3 && now_ns() < deadline)
		ck_assert_int_eq(ev_loop_run_once(&l, EV_TICK_MS * 2), 0);
	ck_assert_uint_eq(every.runs, 3);
	ck_assert_uint_eq(hourly.runs, 1);
	ev_timer_del(&hourly.t);
	ev_timer_del(&every.t);
	ev_loop_fini(&l);
}
END_TEST

UNIT_TESTS(test_dispatch, test_defer, test_timers)

const struct unit_suite unit_suite = {
	.name = "loop",
	.timeout_s = 30,
	.add_tests = add_tests,
};
