/* SPDX-License-Identifier: MIT */
/*
 * The session as data: its log prefix and its reply queue.  What a
 * session says and when it ends is control/protocol.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "common/wireio.h"
#include "control/daemon.h"
#include "control/session.h"
#include "obs/log.h"

void session_set_prefix(struct session *s)
{
	const struct hello_req *h = &s->hello;

	switch (h->role) {
	case KVS_ROLE_WORKER:
		snprintf(s->prefix, sizeof(s->prefix),
			 "session %" PRIu64 " (pid %d, instance %s rank %u)", s->id, (int)s->pid,
			 h->instance, h->tp_rank);
		break;
	case KVS_ROLE_SCHEDULER:
		snprintf(s->prefix, sizeof(s->prefix),
			 "session %" PRIu64 " (pid %d, instance %s scheduler)", s->id, (int)s->pid,
			 h->instance);
		break;
	default:
		snprintf(s->prefix, sizeof(s->prefix), "session %" PRIu64 " (pid %d%s)", s->id,
			 (int)s->pid, h->role == KVS_ROLE_ADMIN ? ", admin" : "");
	}
}

void session_update_events(struct session *s)
{
	uint32_t events = EPOLLRDHUP;

	/*
	 * While waiting for the worker, or while a reply train waits for room,
	 * leave further requests queued in the socket: one request at a time,
	 * so a client that never reads costs one reply's memory, not more.
	 */
	if (s->out.buf)
		events |= EPOLLOUT;
	else if (!s->waiting)
		events |= EPOLLIN;
	ev_mod(&s->d->loop, &s->ev, events);
}

int session_flush(struct session *s)
{
	struct out_queue *q = &s->out;
	bool progress = false;
	int r = 0;

	while (q->buf && q->off < q->len) {
		const struct kvs_msg_hdr *h = (const void *)(q->buf + q->off);

		r = wireio_send(s->ev.fd, h, h->size, NULL, 0, MSG_DONTWAIT);
		if (r == -EAGAIN) {
			r = 0;
			break;
		}
		if (r < 0)
			break;
		q->off += h->size;
		progress = true;
	}
	if (progress)
		slots_touch(&s->sl); /* a reader that reads is not idle */
	if (r < 0) {
		slog_info_errno_rl(&s->log_rl, s, r, "cannot send a reply; closing");
		return r;
	}
	if (q->off >= q->len) {
		free(q->buf);
		*q = (struct out_queue){ 0 };
	}
	session_update_events(s);
	return 0;
}

int session_queue(struct session *s, uint8_t *buf, size_t len)
{
	if (s->out.buf) { /* cannot happen: no request is read while one is queued */
		free(buf);
		return -EBUSY;
	}
	s->out = (struct out_queue){ .buf = buf, .len = len };
	return session_flush(s);
}

unsigned session_count_active(const struct daemon *d)
{
	const struct session *s;
	unsigned n = 0;

	cds_list_for_each_entry(s, &d->sessions, node)
		n += s->state == S_ACTIVE && s->hello.role != KVS_ROLE_ADMIN;
	return n;
}
