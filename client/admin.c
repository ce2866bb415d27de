/* SPDX-License-Identifier: MIT */
/* Admin requests (status, stats): a request, then a train of replies ended by END. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
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

/* Is the fixed string @s of @n bytes terminated, as wire.h requires? */
static bool terminated(const char *s, size_t n)
{
	return memchr(s, '\0', n) != NULL;
}

/*
 * The strings of a reply message, before the callback prints them: a
 * daemon that leaves one unterminated would make it read past the message.
 */
static bool strings_ok(const struct kvs_msg_hdr *h)
{
	const struct kvs_msg_status_session *ss = (const void *)h;
	const struct kvs_msg_status_daemon *sd = (const void *)h;
	const struct kvs_msg_stats_session *st = (const void *)h;

	switch (h->type) {
	case KVS_MSG_STATUS_DAEMON:
		return terminated(sd->version, sizeof(sd->version));
	case KVS_MSG_STATUS_SESSION:
		return terminated(ss->instance, sizeof(ss->instance)) &&
		       terminated(ss->ns, sizeof(ss->ns)) &&
		       terminated(ss->first_layer, sizeof(ss->first_layer)) &&
		       terminated(ss->last_layer, sizeof(ss->last_layer));
	case KVS_MSG_STATS_SESSION:
		return terminated(st->instance, sizeof(st->instance));
	default:
		return true;
	}
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int kvs_admin_request(struct kvs_client *c, uint32_t type, kvs_admin_fn cb, void *arg)
{
	struct kvs_msg_hdr req = { .type = type, .size = sizeof(req) };
	union {
		struct kvs_msg_hdr h;
		uint8_t b[1024];
	} buf;
	/* timeout_ms bounds the whole train: a daemon that never sends END cannot hold us. */
	uint64_t deadline = mono_ms() + (uint64_t)c->opts.timeout_ms;
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
		uint64_t now = mono_ms();
		unsigned nfds = 0;
		int fds[1];
		ssize_t n;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)(deadline - now));
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
		    expected_size(buf.h.type) != (size_t)n || !strings_ok(&buf.h)) {
			client_log(c, KVS_LOG_ERR,
				   "malformed admin reply from kvstashd (type %u, %zd bytes)",
				   buf.h.type, n);
			return -EBADMSG;
		}
		if (buf.h.type == KVS_MSG_REPLY) /* refused */
			return client_reply_status(c, (const struct kvs_msg_reply *)buf.b,
						   (size_t)n, "an admin request");
		if (buf.h.type == KVS_MSG_END)
			return stop;
		if (!stop)
			stop = cb(arg, &buf.h);
	}
}
