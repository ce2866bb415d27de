/* SPDX-License-Identifier: MIT */
/*
 * A connection's bytes: non-blocking reads into a bounded read-ahead
 * buffer, messages parsed there and handed to the handler its side set for
 * the state it is in (c->rx: serve.c, fetch-*.c), raw
 * shard bytes received straight into the fetcher's buffer, and a send
 * queue flushed with writev, a serving stream's shard bytes going out from
 * registered memory without a copy in user space.
 *
 * Bounds: a header is checked before its payload is read (pw_parse_hdr),
 * a payload is read only up to its type's bound, raw bytes only as many as
 * the lock announced for that shard (fetch-xfer.c checks DATA first).
 *
 * The side is called only through c->ops and c->rx, so that this file
 * knows neither serve.c nor fetch.c.  Service thread only.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "peer/conn.h"
#include "peer/kp.h"
#include "peer/ucx.h"

/* Bytes one connection may move per loop turn, so one busy peer cannot starve the rest. */
#define TURN_BYTES (8u << 20)

void conn_set_sockopts(struct kvspeer *kp, int fd)
{
	int one = 1, idle = 10, intvl = 5, cnt = 3;
	unsigned int user_to = kp->p.io_timeout_ms * 2;

	/* Failures here cost latency or dead-peer detection, not correctness: ignore them. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	/* Unacknowledged data this long (a partition) aborts the connection in the kernel too. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_to, sizeof(user_to));
	if (kp->p.sock_buf_bytes) {
		int b = (int)kp->p.sock_buf_bytes;

		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
	}
}

static void conn_event(struct ev_src *src, uint32_t events);

struct conn *conn_new(struct kvspeer *kp, int fd, enum conn_side side, const struct conn_ops *ops,
		      const struct conn_rx *rx, const struct sockaddr *sa, socklen_t salen)
{
	struct conn *c = calloc(1, sizeof(*c));
	struct epoll_event ev;
	uint64_t now = peer_now_ns();

	if (!c)
		return NULL;
	c->rbuf = malloc(PEER_RBUF);
	if (!c->rbuf) {
		free(c);
		return NULL;
	}
	c->ev.fn = conn_event;
	c->ops = ops;
	c->rx = rx;
	c->kp = kp;
	c->fd = fd;
	c->side = side;
	c->state = side == SIDE_SERVE ? CS_HELLO : CS_CONNECTING;
	if (salen <= sizeof(c->addr))
		memcpy(&c->addr, sa, salen);
	peer_addr_format(sa, c->addr_str, sizeof(c->addr_str));
	c->created_ns = c->last_rx_ns = c->last_tx_ns = now;
	CDS_INIT_LIST_HEAD(&c->link);
	CDS_INIT_LIST_HEAD(&c->idle_link);
	CDS_INIT_LIST_HEAD(&c->dead_link);
	CDS_INIT_LIST_HEAD(&c->unauth_link);
	CDS_INIT_LIST_HEAD(&c->locks);
	c->events = side == SIDE_SERVE ? (EPOLLIN | EPOLLRDHUP) : EPOLLOUT;
	ev.events = c->events;
	ev.data.ptr = &c->ev;
	if (epoll_ctl(kp->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		free(c->rbuf);
		free(c);
		return NULL;
	}
	cds_list_add_tail(&c->link, &kp->conns);
	STAT_ADD(kp, conns_open, 1);
	return c;
}

void conn_close(struct conn *c, int err)
{
	struct kvspeer *kp = c->kp;
	enum conn_state was = c->state;

	if (c->state == CS_DEAD)
		return;
	c->state = CS_DEAD;
	epoll_ctl(kp->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	if (err == -ETIMEDOUT) {
		/*
		 * A peer that stopped reading would keep an orphaned socket and its
		 * unsent megabytes alive for minutes: reset instead (SO_LINGER 0).
		 */
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };

		(void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	close(c->fd);
	c->fd = -1;
	c->ops->closed(c, err, was);
	cds_list_del_init(&c->link);
	cds_list_add_tail(&c->dead_link, &kp->dead);
	STAT_SUB(kp, conns_open, 1);
}

void conn_free(struct conn *c)
{
	for (uint32_t i = 0; i < c->nr_regions; i++)
		pucx_rkey_free(c->regions[i].rkey);
	pw_buf_free(&c->out);
	free(c->big);
	free(c->rbuf);
	free(c);
}

int conn_send(struct conn *c, unsigned type, uint32_t seq, const void *fixed, size_t flen,
	      const void *tail, size_t tlen)
{
	int r;

	if (c->state == CS_DEAD)
		return -ECONNRESET;
	r = pw_put(&c->out, type, seq, fixed, flen, tail, tlen);
	if (r < 0) {
		conn_close(c, r);
		return r;
	}
	if (!c->tx_wait_ns)
		c->tx_wait_ns = peer_now_ns();
	return 0;
}

int conn_send_error(struct conn *c, uint32_t seq, int status, unsigned req_type, const char *text)
{
	struct pw_error e;

	pw_make_error(&e, status, req_type, text);
	return conn_send(c, PW_ERROR, seq, &e, sizeof(e), NULL, 0);
}

static int conn_epoll_set(struct conn *c, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = &c->ev };

	if (c->events == events)
		return 0;
	if (epoll_ctl(c->kp->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
		return -errno;
	c->events = events;
	return 0;
}

static uint32_t base_events(const struct conn *c)
{
	/* A paused serve conn still hears its peer hang up (RDHUP), not its requests. */
	return c->rx_paused ? EPOLLRDHUP : (EPOLLIN | EPOLLRDHUP);
}

int conn_flush(struct conn *c)
{
	size_t moved = 0;

	while (c->state != CS_DEAD) {
		struct iovec iov[2];
		int n = 0;
		ssize_t w;

		if (c->out.len > c->out_off) {
			iov[n].iov_base = c->out.p + c->out_off;
			iov[n].iov_len = c->out.len - c->out_off;
			n++;
		}
		/* The queue holds exactly what precedes the raw bytes (serve.c). */
		if (c->raw_src && c->raw_src_left) {
			iov[n].iov_base = (void *)c->raw_src;
			iov[n].iov_len = c->raw_src_left;
			n++;
		}
		if (!n)
			break;
		if (moved >= TURN_BYTES)
			break;
		w = sendmsg(c->fd, &(struct msghdr){ .msg_iov = iov, .msg_iovlen = (size_t)n },
			    MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			conn_close(c, -errno);
			return -ECONNRESET;
		}
		moved += (size_t)w;
		c->last_tx_ns = peer_now_ns();
		c->tx_wait_ns = c->last_tx_ns;
		if (c->out.len > c->out_off) {
			size_t q = c->out.len - c->out_off;
			size_t take = (size_t)w < q ? (size_t)w : q;

			c->out_off += take;
			w -= (ssize_t)take;
		}
		if (c->out_off == c->out.len) {
			c->out_off = c->out.len = 0;
			/* A large reply once must not keep a large buffer forever. */
			if (c->out.cap > (1u << 20))
				pw_buf_free(&c->out);
		}
		if (w > 0) {
			c->raw_src += w;
			c->raw_src_left -= (uint64_t)w;
		}
		if (c->raw_src && !c->raw_src_left) {
			c->raw_src = NULL;
			if (c->ops->sent && c->ops->sent(c) < 0)
				return -ECONNRESET;
		}
	}
	if (c->state == CS_DEAD)
		return -ECONNRESET;
	{
		bool pending = c->out.len > c->out_off || (c->raw_src && c->raw_src_left);
		uint32_t want = base_events(c) | (pending ? EPOLLOUT : 0);

		if (!pending)
			c->tx_wait_ns = 0;
		if (c->state == CS_CONNECTING)
			want = EPOLLOUT;
		if (conn_epoll_set(c, want) < 0) {
			conn_close(c, -EIO);
			return -EIO;
		}
	}
	return 0;
}

/* Receive into @dst; >0 bytes, 0 would block, <0 closed (-errno). */
static ssize_t rx(struct conn *c, void *dst, size_t len)
{
	for (;;) {
		ssize_t n = recv(c->fd, dst, len, MSG_DONTWAIT);

		if (n > 0) {
			c->last_rx_ns = peer_now_ns();
			return n;
		}
		if (n == 0) {
			conn_close(c, -ECONNRESET);
			return -ECONNRESET;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		n = -errno;
		conn_close(c, (int)n);
		return n;
	}
}

static int dispatch(struct conn *c, const struct pw_hdr *h, const uint8_t *payload)
{
	int r = c->rx->handle(c, h, payload);

	if (r < 0 && c->state != CS_DEAD) {
		/* An ERROR queued for the peer goes out before the close if it can. */
		conn_flush(c);
		conn_close(c, r);
	}
	return r;
}

/*
 * The steps of conn_read(), each on what arrives next: 1 go on, 0 wait
 * for the socket (or the next turn: @moved reached TURN_BYTES), <0 the
 * connection closed.
 */

/* Raw shard bytes: what read-ahead already holds, then straight into place. */
static int read_raw(struct conn *c, size_t *moved)
{
	size_t have = c->rend - c->rstart;
	ssize_t n;

	if (have) {
		size_t take = have < c->raw_left ? have : (size_t)c->raw_left;

		memcpy(c->raw_dst, c->rbuf + c->rstart, take);
		c->rstart += take;
		c->raw_dst += take;
		c->raw_left -= take;
		return 1;
	}
	if (*moved >= TURN_BYTES)
		return 0;
	n = rx(c, c->raw_dst, (size_t)c->raw_left);
	if (n <= 0)
		return 0;
	*moved += (size_t)n;
	c->raw_dst += n;
	c->raw_left -= (uint64_t)n;
	return 1;
}

/* A payload larger than rbuf, into its private buffer; handled once whole. */
static int read_big(struct conn *c, size_t *moved)
{
	size_t have = c->rend - c->rstart;
	struct pw_hdr h = c->big_hdr;
	uint8_t *big = c->big;
	ssize_t n;

	if (have && c->big_have < c->big_len) {
		size_t take = c->big_len - c->big_have;

		if (take > have)
			take = have;
		memcpy(c->big + c->big_have, c->rbuf + c->rstart, take);
		c->rstart += take;
		c->big_have += take;
	}
	if (c->big_have < c->big_len) {
		if (*moved >= TURN_BYTES)
			return 0;
		n = rx(c, c->big + c->big_have, c->big_len - c->big_have);
		if (n <= 0)
			return 0;
		*moved += (size_t)n;
		c->big_have += (size_t)n;
		return 1;
	}
	c->big = NULL;
	c->big_len = c->big_have = 0;
	dispatch(c, &h, big);
	free(big);
	return 1;
}

/* A header bad or not expected in this state: ERROR, counted, closed. */
static int bad_header(struct conn *c, const struct pw_hdr *h, int r, const char *why)
{
	kp_log_peer(c->kp, KVSPEER_LOG_WARNING, "peer %s: %s", c->addr_str, why);
	(c->side == SIDE_SERVE ? STAT_ADD(c->kp, serve_fail[KVSPEER_FAIL_PROTOCOL], 1)
			       : STAT_ADD(c->kp, fetch_fail[KVSPEER_FAIL_PROTOCOL], 1));
	conn_send_error(c, h->seq, r == -EPROTO ? -EPROTO : -EBADMSG, 0,
			r == -EPROTO ? "unexpected message" : "malformed header");
	conn_flush(c);
	conn_close(c, -EPROTO);
	return -EPROTO;
}

/* The next message in read-ahead, whole, or the start of a big one; 0: not all there yet. */
static int read_msg(struct conn *c)
{
	struct pw_hdr h = { 0 };
	char why[128];
	int r;

	if (c->rend - c->rstart < sizeof(h))
		return 0;
	r = pw_parse_hdr(c->rbuf + c->rstart, &h, why, sizeof(why));
	if (r == 0 && !c->rx->expects(c, h.type)) {
		snprintf(why, sizeof(why), "message type %u unexpected here", h.type);
		r = -EPROTO;
	}
	if (r < 0)
		return bad_header(c, &h, r, why);
	if (sizeof(h) + h.len > PEER_RBUF) {
		/* Bounded by the type (pw_parse_hdr): a private buffer of exactly that. */
		c->big = malloc(h.len);
		if (!c->big) {
			conn_close(c, -ENOMEM);
			return -ENOMEM;
		}
		c->big_len = h.len;
		c->big_have = 0;
		c->big_hdr = h;
		c->rstart += sizeof(h);
		return 1;
	}
	if (c->rend - c->rstart < sizeof(h) + h.len)
		return 0;
	c->rstart += sizeof(h) + h.len;
	if (dispatch(c, &h, c->rbuf + c->rstart - h.len) < 0)
		return -ECONNRESET;
	return 1;
}

/* More bytes into read-ahead, after making room. */
static int read_more(struct conn *c, size_t *moved)
{
	ssize_t n;

	if (c->rstart == c->rend) {
		c->rstart = c->rend = 0;
	} else if (c->rstart && c->rend == PEER_RBUF) {
		memmove(c->rbuf, c->rbuf + c->rstart, c->rend - c->rstart);
		c->rend -= c->rstart;
		c->rstart = 0;
	}
	if (*moved >= TURN_BYTES)
		return 0;
	n = rx(c, c->rbuf + c->rend, PEER_RBUF - c->rend);
	if (n <= 0)
		return 0;
	*moved += (size_t)n;
	c->rend += (size_t)n;
	return 1;
}

/* Read and hand on what arrived.  0, or -errno (closed). */
static int conn_read(struct conn *c)
{
	size_t moved = 0;
	int r = 1;

	/*
	 * TURN_BYTES bounds what one turn reads from the socket, never what
	 * it parses: a message already in rbuf would wait for an EPOLLIN that
	 * need not come (level-triggered fires only for unread socket data).
	 */
	while (c->state != CS_DEAD && r > 0) {
		if (c->raw_left)
			r = read_raw(c, &moved);
		else if (c->big)
			r = read_big(c, &moved);
		else if (c->rx_paused)
			r = 0;
		else if ((r = read_msg(c)) == 0)
			r = read_more(c, &moved);
	}
	if (r < 0)
		return r;
	if (c->state == CS_DEAD)
		return -ECONNRESET;
	/* A message begun and not finished: the stall clock runs (serve_tick). */
	if (!c->rx_paused && ((c->rend > c->rstart && !c->raw_left) || c->big)) {
		if (!c->rx_partial_ns)
			c->rx_partial_ns = peer_now_ns();
	} else {
		c->rx_partial_ns = 0;
	}
	/* Level-triggered: stop EPOLLIN while paused, so the loop does not spin. */
	return conn_flush(c);
}

/* The events of c->ev (the service loop, by c->ev.fn). */
static void conn_event(struct ev_src *src, uint32_t events)
{
	struct conn *c = caa_container_of(src, struct conn, ev);

	if (c->state == CS_DEAD)
		return;
	if (c->state == CS_CONNECTING) {
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
			c->ops->connected(c);
		return;
	}
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		if (c->rx_paused && !(events & EPOLLIN)) {
			/* A streaming serve conn whose peer went away. */
			conn_close(c, -ECONNRESET);
			return;
		}
		if (conn_read(c) < 0 || c->state == CS_DEAD)
			return;
	}
	if (events & EPOLLOUT)
		conn_flush(c);
	/* A stream ended: requests that waited in rbuf go now (a loop, not recursion). */
	while (c->state != CS_DEAD && c->rx_kick && !c->rx_paused) {
		c->rx_kick = false;
		conn_read(c);
	}
}
