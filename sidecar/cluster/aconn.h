/* SPDX-License-Identifier: MIT */
/*
 * A hiredis async context on an epoll fd of its owner's: the event hooks
 * hiredis calls to ask for readability and writability, and the
 * dispatch of an epoll event back to hiredis.  The registry's connection
 * to Redis and the sentinels' connections (sentinel.c) are each one.
 * Control thread only.
 */
#ifndef KVS_REG_ACONN_H
#define KVS_REG_ACONN_H

#include <stdint.h>

#include <hiredis/async.h>

struct reply_budget;

struct aconn {
	redisAsyncContext *ac; /* NULL: not connected */
	int epfd;
	int fd;	      /* the context's, while it lives; -1 */
	uint32_t tag; /* its epoll events' data.u32 */
	int mask;     /* EPOLLIN/EPOLLOUT hiredis asked for */
};

void aconn_init(struct aconn *c, int epfd, uint32_t tag);
/*
 * Connect (non-blocking) to @ip:@port, or to the Unix socket @ip when
 * @port is 0, with replies built within @budget; @data is the context's
 * (ac->data) for its callbacks.  0, or -errno with hiredis' reason in
 * @why (nothing left to free).
 */
int aconn_open(struct aconn *c, const char *ip, int port, struct reply_budget *budget, void *data,
	       redisConnectCallback *on_connect, redisDisconnectCallback *on_disconnect, char *why,
	       size_t wl);
/* An epoll event of the connection: hiredis reads and writes (it may free the context). */
void aconn_event(struct aconn *c, uint32_t events);
/* Our own teardown: every pending callback runs with a NULL reply. */
void aconn_close(struct aconn *c);

#endif /* KVS_REG_ACONN_H */
