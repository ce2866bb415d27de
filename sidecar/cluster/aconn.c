/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include <hiredis/hiredis.h>

#include "cluster/aconn.h"
#include "cluster/reply.h"

void aconn_init(struct aconn *c, int epfd, uint32_t tag)
{
	*c = (struct aconn){ .epfd = epfd, .fd = -1, .tag = tag };
}

/* hiredis asks for one event at a time: epoll hears of a change only. */
static void want(struct aconn *c, int event, bool on)
{
	int mask = on ? c->mask | event : c->mask & ~event;
	struct epoll_event e = { .events = (uint32_t)mask, .data.u32 = c->tag };

	if (mask == c->mask)
		return;
	c->mask = mask;
	if (c->fd >= 0)
		epoll_ctl(c->epfd, EPOLL_CTL_MOD, c->fd, &e);
}

static void add_read(void *p)
{
	want(p, EPOLLIN, true);
}

static void del_read(void *p)
{
	want(p, EPOLLIN, false);
}

static void add_write(void *p)
{
	want(p, EPOLLOUT, true);
}

static void del_write(void *p)
{
	want(p, EPOLLOUT, false);
}

/* hiredis frees the context right after: forget its fd. */
static void cleanup(void *p)
{
	struct aconn *c = p;

	if (c->fd >= 0)
		epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	c->fd = -1;
	c->mask = 0;
	c->ac = NULL;
}

int aconn_open(struct aconn *c, const char *ip, int port, struct reply_budget *budget, void *data,
	       redisConnectCallback *on_connect, redisDisconnectCallback *on_disconnect, char *why,
	       size_t wl)
{
	struct epoll_event e = { .events = 0, .data.u32 = c->tag };
	redisAsyncContext *ac = port ? redisAsyncConnect(ip, port) : redisAsyncConnectUnix(ip);

	if (!ac) {
		snprintf(why, wl, "out of memory");
		return -ENOMEM;
	}
	if (ac->err) {
		snprintf(why, wl, "%s", ac->errstr);
		redisAsyncFree(ac);
		return -ECONNREFUSED;
	}
	/* Before hiredis may ask for events: a connection epoll never reports would hang. */
	if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, ac->c.fd, &e) < 0) {
		int err = errno;

		snprintf(why, wl, "epoll: %s", strerror(err));
		redisAsyncFree(ac);
		return -err;
	}
	c->ac = ac;
	c->mask = 0;
	c->fd = ac->c.fd;
	ac->data = data;
	ac->ev.data = c;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	/* Bounded replies: the reader fails (and we disconnect) past the budget. */
	ac->c.reader->fn = &reply_bounded_fns;
	ac->c.reader->privdata = budget;
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	/* Arms the write event that says the connection is up. */
	redisAsyncSetConnectCallback(ac, on_connect);
	return 0;
}

void aconn_event(struct aconn *c, uint32_t events)
{
	redisAsyncContext *ac = c->ac;

	if (ac && (events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
		redisAsyncHandleRead(ac);
	/* HandleRead may have freed it (cleanup() cleared c->ac). */
	if (ac && c->ac == ac && (events & EPOLLOUT))
		redisAsyncHandleWrite(ac);
}

void aconn_close(struct aconn *c)
{
	redisAsyncContext *ac = c->ac;

	if (!ac)
		return;
	c->ac = NULL;
	redisAsyncFree(ac);
}
