/* SPDX-License-Identifier: MIT */
/*
 * The control thread's event loop: epoll over typed sources, timers on the
 * loop's tick, and frees deferred past the batch of events being handled.
 *
 * A source is an fd and the function its events go to.  Whoever owns the
 * fd embeds a struct ev_source in its own object (a session, the listening
 * socket, the signalfd, the workers' ack eventfd; a registry client's
 * epoll fd, a peer listener) and finds the object again with
 * container_of(), so a new kind of source touches no dispatch code.
 *
 * Timers run on the loop's tick (EV_TICK_MS, one timerfd): an interval of
 * 0 runs at every tick, else at the first tick and then at the first tick
 * at least that long after the last run.  A module that needs finer
 * timing adds a timerfd of its own as a source.
 *
 * One batch of events can name an object that an earlier event of the same
 * batch freed (a session closed by another's event): free such objects
 * through ev_defer(), which runs after the batch, never in a callback.
 *
 * Control thread only; nothing here takes a lock.
 */
#ifndef KVS_LOOP_H
#define KVS_LOOP_H

#include <stdint.h>

#include <urcu/list.h>

#define EV_TICK_MS 100

struct ev_source {
	int fd;
	void (*fn)(struct ev_source *src, uint32_t events); /* epoll events */
};

struct ev_timer {
	uint64_t interval_ns;
	uint64_t last_ns; /* of the last run; 0: never ran */
	void (*fn)(struct ev_timer *t, uint64_t now_ns);
	struct cds_list_head node; /* ev_loop.timers */
};

struct ev_deferred {
	void (*fn)(struct ev_deferred *d);
	struct cds_list_head node; /* ev_loop.deferred */
};

struct ev_loop {
	int epfd;
	struct ev_source tick; /* the timerfd */
	struct cds_list_head timers;
	struct cds_list_head deferred;
};

/* An epoll fd and the tick's timerfd.  -errno (the fds are closed by ev_loop_fini()). */
int ev_loop_init(struct ev_loop *l);
/* Run what is deferred and close the loop's fds (not the sources'). */
void ev_loop_fini(struct ev_loop *l);

/* Watch @src->fd for @events (EPOLLIN, ...; 0: registered, nothing wanted).  -errno. */
int ev_add(struct ev_loop *l, struct ev_source *src, uint32_t events);
int ev_mod(struct ev_loop *l, struct ev_source *src, uint32_t events);
void ev_del(struct ev_loop *l, struct ev_source *src);

/* Run @fn every @interval_ns (0: every tick), in the order timers were added. */
void ev_timer_add(struct ev_loop *l, struct ev_timer *t, uint64_t interval_ns,
		  void (*fn)(struct ev_timer *t, uint64_t now_ns));
void ev_timer_del(struct ev_timer *t);

/*
 * Call @fn(@d) after the batch of events being handled (outside a batch:
 * after the next one, or in ev_loop_fini()).
 */
void ev_defer(struct ev_loop *l, struct ev_deferred *d, void (*fn)(struct ev_deferred *d));

/*
 * Wait up to @timeout_ms for events, hand each to its source, then run
 * what was deferred.  0 (also when interrupted by a signal), or -errno.
 */
int ev_loop_run_once(struct ev_loop *l, int timeout_ms);

#endif /* KVS_LOOP_H */
