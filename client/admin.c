/* SPDX-License-Identifier: MIT */
/* Admin requests (status, stats): a request, then a train of replies ended by END. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "common/wireio.h"

static size_t expected_size(uint32_t type)
{
	switch (type) {
	case KVS_MSG_STATUS_DAEMON:
		return sizeof(struct kvs_msg_status_daemon);
	case KVS_MSG_STATUS_SESSION:
		return sizeof(struct kvs_msg_status_session);
	case KVS_MSG_STATS_GLOBAL:
		return sizeof(struct kvs_msg_stats_global);
	case KVS_MSG_STATS_NODE:
		return sizeof(struct kvs_msg_stats_node);
	case KVS_MSG_STATS_SESSION:
		return sizeof(struct kvs_msg_stats_session);
	case KVS_MSG_END:
		return sizeof(struct kvs_msg_hdr);
	case KVS_MSG_REPLY:
		return sizeof(struct kvs_msg_reply);
	default:
		return 0;
	}
}

int kvs_admin_request(struct kvs_client *c, uint32_t type, kvs_admin_fn cb, void *arg)
{
	struct kvs_msg_hdr req = { .type = type, .size = sizeof(req) };
	union {
		struct kvs_msg_hdr h;
		uint8_t b[1024];
	} buf;
	int stop = 0, r;

	if (type != KVS_MSG_STATUS && type != KVS_MSG_STATS)
		return -EINVAL;
	if (c->dead)
		return -ECONNRESET;
	req.seq = ++c->seq;
	r = wireio_send(c->fd, &req, sizeof(req), NULL, 0, 0);
	if (r < 0)
		return r == -EPIPE ? -ECONNRESET : r;
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		unsigned nfds = 0;
		int fds[1];
		ssize_t n;

		r = poll(&p, 1, c->opts.timeout_ms);
		if (r == 0)
			return -ETIMEDOUT;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		n = wireio_recv(c->fd, buf.b, sizeof(buf.b), fds, 1, &nfds, 0);
		if (n <= 0) {
			if (n == 0 || n == -ECONNRESET) {
				client_mark_dead(c);
				return -ECONNRESET;
			}
			return (int)n;
		}
		wireio_close_fds(fds, nfds);
		if ((size_t)n < sizeof(buf.h) || buf.h.size != (size_t)n || buf.h.seq != req.seq ||
		    expected_size(buf.h.type) != (size_t)n)
			return -EBADMSG;
		if (buf.h.type == KVS_MSG_REPLY) /* refused */
			return ((struct kvs_msg_reply *)buf.b)->status;
		if (buf.h.type == KVS_MSG_END)
			return stop;
		if (!stop)
			stop = cb(arg, &buf.h);
	}
}
