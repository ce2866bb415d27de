/* SPDX-License-Identifier: MIT */
/*
 * The fetching side's state machine: a fetch started on a pooled or a new
 * connection (fetch-pool.c), that connection's handshake (HELLO_REPLY,
 * AUTH_OK: the handlers of its states, c->rx), then its READY messages
 * handed to the transfer (fetch-xfer.c); the fetch's timers, and what a
 * lost connection means for it.  Service thread only.  The API the hosts
 * call is fetch-api.c; a fetch ends in fetch-end.c.
 *
 * A fetch ends exactly once, in fetch_finish(), and only when nothing can
 * write its buffers any more: TCP bytes are written by this thread's own
 * recv(), so detaching the connection stops them; UCX gets in flight are
 * completed (with errors, by closing the endpoint, fetch_closed()) before
 * fetch_finish() runs.  The peer's lock is released by RELEASE when the
 * connection is still usable, else by closing it (the server drops every
 * lock of a closed connection at once).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "peer/conn.h"
#include "peer/fetch-end.h"
#include "peer/fetch-pool.h"
#include "peer/fetch-xfer.h"
#include "peer/fetch.h"
#include "peer/kp.h"
#include "peer/ucx.h"

/* The handlers of each state, and of the connection (defined at the end). */
static const struct conn_rx rx_hello, rx_auth, rx_ready;
static const struct conn_ops fetch_ops;

/* ---- Starting -------------------------------------------------------------------- */

/*
 * From the loop, not from where a conn closes or turns ready: starting a
 * fetch may close another conn, and conn_close() must not recurse into
 * itself through the fetch it is finishing.
 */
void fetch_kick(struct kvspeer *kp)
{
	while (!cds_list_empty(&kp->kick)) {
		struct peer_ent *pe = cds_list_entry(kp->kick.next, struct peer_ent, kick_link);
		struct cds_list_head todo, *pos, *tmp;

		cds_list_del_init(&pe->kick_link);
		/* Those that still find no conn join pe->waiting again, in order. */
		CDS_INIT_LIST_HEAD(&todo);
		cds_list_for_each_safe(pos, tmp, &pe->waiting)
		{
			cds_list_del_init(pos);
			cds_list_add_tail(pos, &todo);
		}
		cds_list_for_each_safe(pos, tmp, &todo)
		{
			struct fetch *f = cds_list_entry(pos, struct fetch, wait_link);

			cds_list_del_init(pos);
			fetch_start(kp, f);
		}
	}
}

static void attach(struct fetch *f, struct conn *c)
{
	f->c = c;
	c->f = f;
	c->pe->busy++;
}

void fetch_start(struct kvspeer *kp, struct fetch *f)
{
	struct peer_ent *pe;
	struct conn *c = NULL;
	int r;

	if (cds_list_empty(&f->link))
		cds_list_add_tail(&f->link, &kp->fetches);
	f->state = FS_CONNECT;
	pe = pool_peer(kp, f->peer);
	if (!pe) {
		fetch_finish(f, -EMFILE);
		return;
	}
	f->pe = pe;
	pe->last_ns = peer_now_ns();
	if (!f->retried && !cds_list_empty(&pe->idle)) {
		c = cds_list_entry(pe->idle.next, struct conn, idle_link);
		cds_list_del_init(&c->idle_link);
		pe->nr_idle--;
		c->reused = true;
		attach(f, c);
		if (xfer_send_request(f, c) < 0 && f->state != FS_DONE)
			conn_close(c, -ECONNRESET);
		return;
	}
	/*
	 * Within the limits we set ourselves (the peers' alike): handshakes
	 * (pool_connecting_max()) and connections (max_conns_per_peer) per peer.
	 */
	if (pe->connecting >= pool_connecting_max(kp) || pe->conns >= kp->p.max_conns_per_peer) {
		if (pe->connecting >= pool_connecting_max(kp) || cds_list_empty(&pe->idle)) {
			cds_list_add_tail(&f->wait_link, &pe->waiting); /* fetch_kick() starts it */
			return;
		}
		/* A retry, which must not take a pooled conn: the oldest one makes room. */
		conn_close(cds_list_entry(pe->idle.next, struct conn, idle_link), 0);
	}
	r = pool_open(kp, pe, &fetch_ops, &c);
	if (r < 0) {
		fetch_finish(f, r);
		return;
	}
	c->reused = false;
	attach(f, c);
}

/* ---- The handshake ---------------------------------------------------------------- */

/* c->ops->connected: the connect finished; HELLO, or the error it ended with. */
static void fetch_connected(struct conn *c)
{
	struct kvspeer *kp = c->kp;
	struct pw_hello h = { 0 };
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		conn_close(c, -err);
		return;
	}
	c->state = CS_HELLO;
	c->rx = &rx_hello;
	h.major = PW_MAJOR;
	h.minor = PW_MINOR;
	h.transports = PW_TRANSPORT_BIT(kp->p.transport);
	h.epoch = kp_epoch(kp);
	if (peer_nonce(h.nonce) < 0) {
		conn_close(c, -EIO);
		return;
	}
	memcpy(h.cluster, kp->cluster, sizeof(h.cluster));
	memcpy(h.node, kp->node, sizeof(h.node));
	memcpy(c->hello, &h, sizeof(h));
	c->hello_len = sizeof(h);
	if (conn_send(c, PW_HELLO, ++c->seq, &h, sizeof(h), NULL, 0) == 0)
		conn_flush(c);
}

/* The connection of a fetch (or of nobody) is ready: send, or pool it. */
static int conn_ready(struct conn *c)
{
	if (c->f)
		return xfer_send_request(c->f, c);
	pool_idle(c);
	return 0;
}

static int on_hello_reply(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct kvspeer *kp = c->kp;
	struct pw_hello_reply rep;
	uint8_t want[PW_MAC_SIZE], proof[PW_MAC_SIZE];
	struct pw_auth a = { 0 };
	char why[160];
	int r;

	r = pw_parse_hello_reply(p, h->len, PW_TRANSPORT_BIT(kp->p.transport), &rep, why,
				 sizeof(why));
	if (r < 0) {
		kp_log_peer(kp, KVSPEER_LOG_WARNING, "peer %s: bad HELLO_REPLY: %s", c->addr_str,
			    why);
		return r == -EPROTONOSUPPORT ? r : -EPROTO;
	}
	/* Its proof first: nothing it says counts before it proved the secret. */
	memcpy(c->reply, p, h->len);
	c->reply_len = h->len;
	memcpy(proof, rep.proof, sizeof(proof));
	memset(c->reply + offsetof(struct pw_hello_reply, proof), 0, PW_MAC_SIZE);
	r = peer_proof(&kp->secret, PEER_SIDE_SERVER, c->hello, c->hello_len, c->reply,
		       c->reply_len, want);
	memcpy(c->reply + offsetof(struct pw_hello_reply, proof), proof, PW_MAC_SIZE);
	if (r < 0)
		return r;
	if (!peer_proof_equal(want, proof) || strcmp(rep.cluster, kp->cluster)) {
		kp_log_peer(kp, KVSPEER_LOG_WARNING,
			    "peer %s: authentication failed (another cluster or secret)",
			    c->addr_str);
		return -EACCES;
	}
	memcpy(c->node, rep.node, sizeof(c->node));
	c->epoch = rep.epoch;
	c->transport = kp->p.transport;
	memcpy(c->pe->node, rep.node, sizeof(c->pe->node));
	c->pe->epoch = rep.epoch;
	if (c->f && ((c->f->expect_node[0] && strcmp(c->f->expect_node, rep.node)) ||
		     (c->f->expect_epoch && c->f->expect_epoch != rep.epoch))) {
		kp_log_peer(kp, KVSPEER_LOG_WARNING,
			    "peer %s is %s epoch %llu, expected %s epoch %llu: stale hint",
			    c->addr_str, rep.node, (unsigned long long)rep.epoch,
			    c->f->expect_node[0] ? c->f->expect_node : "any",
			    (unsigned long long)c->f->expect_epoch);
		return -ESTALE;
	}
	r = peer_proof(&kp->secret, PEER_SIDE_CLIENT, c->hello, c->hello_len, c->reply,
		       c->reply_len, a.proof);
	if (r < 0)
		return r;
	c->state = CS_AUTH;
	c->rx = &rx_auth;
	return conn_send(c, PW_AUTH, ++c->seq, &a, sizeof(a), NULL, 0);
}

static int on_auth_ok(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct kvspeer *kp = c->kp;
	struct pw_auth_ok_info *info;
	char why[160];
	int r;

	info = calloc(1, sizeof(*info));
	if (!info)
		return -ENOMEM;
	r = pw_parse_auth_ok(p, h->len, info, why, sizeof(why));
	if (r < 0) {
		kp_log_peer(kp, KVSPEER_LOG_WARNING, "peer %s: bad AUTH_OK: %s", c->addr_str, why);
		free(info);
		return -EPROTO;
	}
	if (kp->ucx) {
		if (!info->taddr_len) {
			free(info);
			return -EPROTO;
		}
		r = pucx_ep_new(kp->ucx, info->taddr, info->taddr_len, c, &c->uep);
		for (uint32_t i = 0; r == 0 && i < info->nr_regions; i++) {
			r = pucx_rkey_unpack(c->uep, info->regions[i].rkey,
					     info->regions[i].rkey_len, &c->regions[i].rkey);
			if (r == 0) {
				c->regions[i].base = info->regions[i].base;
				c->regions[i].len = info->regions[i].len;
				c->nr_regions = i + 1;
			}
		}
		c->regions_version = info->regions_version;
		if (r < 0) {
			kp_log_peer(kp, KVSPEER_LOG_WARNING, "peer %s: UCX endpoint or key: %s",
				    c->addr_str, strerror(-r));
			free(info);
			return -EIO;
		}
	}
	free(info);
	c->state = CS_READY;
	c->rx = &rx_ready;
	c->pe->ever_ok = true;
	c->pe->connecting--;
	pool_kick(kp, c->pe);
	kp_log(kp, KVSPEER_LOG_DEBUG, "connected to %s (%s, epoch %llu)", c->addr_str, c->node,
	       (unsigned long long)c->epoch);
	return conn_ready(c);
}

/* ---- Messages ---------------------------------------------------------------------- */

/* An ERROR, in any state: the connection is done; closing releases any lock. */
static int on_error(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct pw_error e;
	char why[128];

	if (pw_parse_error(p, h->len, &e, why, sizeof(why)) < 0)
		return -EPROTO;
	kp_log_peer(c->kp, KVSPEER_LOG_WARNING, "peer %s refused (%s): %s", c->addr_str,
		    strerror(-e.status), e.text);
	if (c->f)
		fetch_set_err(c->f, e.status == -EACCES ? -EACCES : -EREMOTEIO);
	return -EREMOTEIO;
}

static int unexpected(struct conn *c, const struct pw_hdr *h)
{
	kp_log_peer(c->kp, KVSPEER_LOG_WARNING, "peer %s: message type %u unexpected", c->addr_str,
		    h->type);
	if (c->f)
		fetch_set_err(c->f, -EPROTO);
	return -EPROTO;
}

/* CS_HELLO: HELLO_REPLY or ERROR (expects_hello()). */
static int msg_hello(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	return h->type == PW_ERROR ? on_error(c, h, p) : on_hello_reply(c, h, p);
}

/* CS_AUTH: AUTH_OK or ERROR (expects_auth()). */
static int msg_auth(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	return h->type == PW_ERROR ? on_error(c, h, p) : on_auth_ok(c, h, p);
}

/* CS_READY: the transfer's, unless it did not expect this one now. */
static int msg_ready(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	int r;

	if (h->type == PW_ERROR)
		return on_error(c, h, p);
	r = xfer_handle(c, h, p);
	return r == 1 ? unexpected(c, h) : r;
}

/* ---- A lost connection, timers -------------------------------------------------------- */

/* The conn used by a fetch closed with @err: once more on a new one, or the fetch ends. */
static void conn_lost(struct conn *c, int err)
{
	struct fetch *f = c->f;
	struct kvspeer *kp = c->kp;

	fetch_detach(f);
	if (f->state == FS_DONE)
		return;
	/* A pooled conn the server had closed before our request: once more, on a new one. */
	if (c->reused && !f->retried && f->state == FS_QUERY && !f->err &&
	    (err == -ECONNRESET || err == -EPIPE) && peer_now_ns() < f->deadline_ns) {
		f->retried = true;
		fetch_start(kp, f);
		return;
	}
	if (f->gets_out) {
		/* pucx_ep_close() completed them all; anything left is a UCX bug. */
		kp_log(kp, KVSPEER_LOG_ERR, "%u UCX gets still open after the endpoint closed",
		       f->gets_out);
	}
	/* UCX: bytes read without the verify round trip count for nothing (verified stays 0). */
	fetch_finish(f, err);
}

/* c->ops->closed, for a connection of ours. */
static void fetch_closed(struct conn *c, int err, enum conn_state was)
{
	/*
	 * UCX first: closing the endpoint completes its gets (with an error)
	 * before the fetch that issued them may finish.
	 */
	if (c->uep) {
		pucx_ep_close(c->kp->ucx, c->uep);
		c->uep = NULL;
	}
	if (c->f)
		conn_lost(c, err ? err : -ECONNRESET);
	if (!cds_list_empty(&c->idle_link)) {
		cds_list_del_init(&c->idle_link);
		c->pe->nr_idle--;
	}
	if (c->pe)
		pool_conn_gone(c, was);
}

void fetch_tick(struct kvspeer *kp, uint64_t now)
{
	uint64_t io = kp->p.io_timeout_ms * NSEC_PER_MSEC;
	uint64_t pool_idle = kp->p.idle_timeout_ms / 2 * NSEC_PER_MSEC;
	struct cds_list_head *pos, *tmp;

	cds_list_for_each_safe(pos, tmp, &kp->fetches)
	{
		struct fetch *f = cds_list_entry(pos, struct fetch, link);

		if (now < f->deadline_ns) {
			if (kp->ucx && f->state == FS_DATA && f->lock_id)
				xfer_renew(f, now);
			continue;
		}
		fetch_set_err(f, -ETIMEDOUT);
		if (f->c)
			conn_close(f->c, -ETIMEDOUT); /* finishes f, through conn_lost() */
		else
			fetch_finish(f, -ETIMEDOUT);
	}
	cds_list_for_each_safe(pos, tmp, &kp->conns)
	{
		struct conn *c = cds_list_entry(pos, struct conn, link);

		if (c->side != SIDE_FETCH || c->f || c->state == CS_DEAD)
			continue;
		/* A RELEASE unanswered, or a pooled conn idle too long: close (releases the lock). */
		if ((c->drain_seq && now - c->idle_since_ns > io) ||
		    (!cds_list_empty(&c->idle_link) && now - c->idle_since_ns > pool_idle))
			conn_close(c, 0);
		else if (!c->drain_seq && cds_list_empty(&c->idle_link) && c->state != CS_READY)
			conn_close(c, 0); /* a handshake nobody waits for any more */
	}
}

void fetch_fail_all(struct kvspeer *kp, int err)
{
	struct cds_list_head *pos, *tmp;

	cds_list_for_each_safe(pos, tmp, &kp->fetches)
	{
		struct fetch *f = cds_list_entry(pos, struct fetch, link);

		fetch_set_err(f, err);
		if (f->c)
			conn_close(f->c, err);
		else
			fetch_finish(f, err);
	}
}

/* ---- The state machine: what each state takes, who takes it ------------------ */

/* A server may refuse anything, in any state, with an ERROR. */
static bool expects_hello(const struct conn *c, unsigned type)
{
	return type == PW_ERROR || type == PW_HELLO_REPLY;
}

static bool expects_auth(const struct conn *c, unsigned type)
{
	return type == PW_ERROR || type == PW_AUTH_OK;
}

static bool expects_reply(const struct conn *c, unsigned type)
{
	return type == PW_ERROR || type == PW_QUERY_REPLY || type == PW_DATA ||
	       type == PW_SHARD_END || type == PW_FETCH_END || type == PW_RENEW_REPLY ||
	       type == PW_RELEASE_REPLY || type == PW_HEALTH_REPLY;
}

static const struct conn_rx rx_hello = { .expects = expects_hello, .handle = msg_hello };
static const struct conn_rx rx_auth = { .expects = expects_auth, .handle = msg_auth };
static const struct conn_rx rx_ready = { .expects = expects_reply, .handle = msg_ready };
static const struct conn_ops fetch_ops = { .connected = fetch_connected, .closed = fetch_closed };
