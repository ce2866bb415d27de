/* SPDX-License-Identifier: MIT */
/*
 * The serving side: accept (allow-list and limits before a byte is read),
 * the handshake, lock requests answered through the host's callbacks,
 * and the TCP stream of locked shards.
 *
 * A lock lives in its connection's list and ends exactly once, by
 * lock_end(): at RELEASE, at its TTL (serve_tick), or when the connection
 * closes.  While a lock is being streamed its TTL waits for the stream,
 * which itself ends the connection if it makes no progress for
 * io_timeout_ms; so the host's slots are unpinned only when no byte of
 * them will be sent any more.
 *
 * An accepted connection's messages come here through the handler of the
 * state it is in (c->rx: rx_hello, rx_auth, rx_ready), its other events
 * through serve_ops; conn.c knows nothing of this file.  Service thread.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer/admit.h"
#include "peer/conn.h"
#include "peer/kp.h"
#include "peer/serve.h"
#include "peer/ucx.h"

#define SFAIL(kp, kind) STAT_ADD(kp, serve_fail[KVSPEER_FAIL_##kind], 1)

/* The handlers of each state, and of the connection (defined at the end). */
static const struct conn_rx rx_hello, rx_auth, rx_ready;
static const struct conn_ops serve_ops;

/* ---- Accepting ------------------------------------------------------------------ */

static void on_accept(struct ev_src *src, uint32_t events);

int serve_listen(struct kvspeer *kp)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	int one = 1, fd, r;

	fd = socket(kp->listen_sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (kp->listen_sa.ss_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&kp->listen_sa, kp->listen_salen) < 0 ||
	    listen(fd, 128) < 0 || getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		r = -errno;
		kp_log(kp, KVSPEER_LOG_ERR, "cannot listen on %s: %s", kp->p.listen,
		       strerror(errno));
		close(fd);
		return r;
	}
	peer_addr_format((struct sockaddr *)&sa, kp->listen_str, sizeof(kp->listen_str));
	kp->listenfd = fd; /* closed by kp_destroy() from here on */
	kp->listen_ev.fn = on_accept;
	r = kp_epoll_add(kp, fd, &kp->listen_ev, EPOLLIN);
	if (r < 0)
		return r;
	kp_log(kp, KVSPEER_LOG_INFO, "serving peers of cluster %s on %s", kp->cluster,
	       kp->listen_str);
	return 0;
}

/* The listening socket is readable: up to 64 connections per loop turn. */
static void on_accept(struct ev_src *src, uint32_t events)
{
	struct kvspeer *kp = caa_container_of(src, struct kvspeer, listen_ev);

	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage sa;
		socklen_t len = sizeof(sa);
		char addr[KVSPEER_ADDR_MAX];
		struct peer_acct *a;
		struct conn *c;
		int fd;

		fd = accept4(kp->listenfd, (struct sockaddr *)&sa, &len,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				kp_log_peer(kp, KVSPEER_LOG_WARNING, "accept: %s", strerror(errno));
			return;
		}
		peer_addr_format((struct sockaddr *)&sa, addr, sizeof(addr));
		if (!peer_allow_match(&kp->allow, (struct sockaddr *)&sa)) {
			SFAIL(kp, ALLOWLIST);
			kp_log_peer(kp, KVSPEER_LOG_WARNING, "refused %s: not in the allow-list",
				    addr);
			close(fd);
			continue;
		}
		/* Per host, not per connection: admit.c says who gets in. */
		if (admit_accept(kp, &sa, &a) < 0) {
			SFAIL(kp, LIMIT);
			kp_log_peer(kp, KVSPEER_LOG_WARNING, "refused %s: connection limit", addr);
			close(fd);
			continue;
		}
		conn_set_sockopts(kp, fd);
		c = conn_new(kp, fd, SIDE_SERVE, &serve_ops, &rx_hello, (struct sockaddr *)&sa,
			     len);
		if (!c) {
			/* A new host's account goes back: nothing else would free it. */
			admit_cancel(kp, a);
			kp_log_peer(kp, KVSPEER_LOG_WARNING, "refused %s: no memory for it", addr);
			close(fd);
			continue;
		}
		admit_attach(kp, c, a);
		c->deadline_ns = peer_now_ns() + kp->p.hello_timeout_ms * NSEC_PER_MSEC;
		STAT_ADD(kp, conns_accepted, 1);
	}
}

/* ---- Locks ------------------------------------------------------------------ */

/*
 * @why: the counter of how the lock ended (locks_released, _expired,
 * _dropped), or NULL for one never granted to the peer.  It is counted
 * before locks_held drops, and the drop is a release: a kvspeer_stats()
 * that sees the lock gone (its acquire load of locks_held, the first
 * field) sees why too.
 */
static void lock_end(struct conn *c, struct plock *lk, uint64_t *why)
{
	struct kvspeer *kp = c->kp;

	kp->p.ops->unlock(kp->p.host, lk->cookies, lk->nr_blocks);
	pthread_mutex_lock(&kp->reg_lock);
	for (uint32_t i = 0; i < lk->nr_blocks * lk->nr_shards; i++)
		kp->regions[lk->shards[i].region].refs--;
	pthread_mutex_unlock(&kp->reg_lock);
	cds_list_del_init(&lk->link);
	c->nr_locks--;
	admit_unlock(c);
	if (why)
		__atomic_fetch_add(why, 1, __ATOMIC_RELAXED);
	/* Pairs with the acquire loads in kvspeer_stats(). */
	__atomic_fetch_sub(&kp->st.locks_held, 1, __ATOMIC_RELEASE);
	free(lk->cookies);
	free(lk->shards);
	free(lk);
}

static void drop_locks(struct conn *c)
{
	struct cds_list_head *pos, *tmp;

	if (c->stream) {
		c->stream->streaming = false;
		c->stream = NULL;
		c->raw_src = NULL;
	}
	cds_list_for_each_safe(pos, tmp, &c->locks)
	{
		lock_end(c, cds_list_entry(pos, struct plock, link), &c->kp->st.locks_dropped);
	}
}

static struct plock *lock_find(struct conn *c, uint64_t id)
{
	struct cds_list_head *pos, *tmp;

	cds_list_for_each_safe(pos, tmp, &c->locks)
	{
		struct plock *lk = cds_list_entry(pos, struct plock, link);

		if (lk->id == id)
			return lk;
	}
	return NULL;
}

/* ---- Requests ----------------------------------------------------------------- */

/* A refused request: ERROR to the peer, counted; too many end the connection. */
static int refuse(struct conn *c, uint32_t seq, int status, unsigned type, unsigned kind,
		  const char *text)
{
	STAT_ADD(c->kp, serve_fail[kind], 1);
	kp_log_peer(c->kp, KVSPEER_LOG_WARNING, "peer %s (%s): %s", c->addr_str,
		    c->node[0] ? c->node : "?", text);
	if (conn_send_error(c, seq, status, type, text) < 0)
		return -ECONNRESET;
	if (++c->errors > PEER_MAX_ERRORS)
		return -EPROTO;
	return 0;
}

static int on_hello(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct kvspeer *kp = c->kp;
	struct pw_hello_reply rep = { 0 };
	struct pw_hello hello;
	char why[160];
	uint32_t want = PW_TRANSPORT_BIT(kp->p.transport);
	int r;

	r = pw_parse_hello(p, h->len, &hello, why, sizeof(why));
	if (r < 0) {
		SFAIL(kp, PROTOCOL);
		kp_log_peer(kp, KVSPEER_LOG_WARNING, "peer %s: bad HELLO: %s", c->addr_str, why);
		conn_send_error(c, h->seq, r, h->type, why);
		return r;
	}
	if (strcmp(hello.cluster, kp->cluster)) {
		SFAIL(kp, AUTH);
		kp_log_peer(kp, KVSPEER_LOG_WARNING, "peer %s: cluster '%s' is not ours",
			    c->addr_str, hello.cluster);
		conn_send_error(c, h->seq, -EACCES, h->type, "another cluster");
		return -EACCES;
	}
	if (!(hello.transports & want)) {
		SFAIL(kp, PROTOCOL);
		conn_send_error(c, h->seq, -EPROTONOSUPPORT, h->type,
				kp->p.transport == KVSPEER_TRANSPORT_UCX
					? "this node serves over UCX"
					: "this node serves over TCP");
		return -EPROTONOSUPPORT;
	}
	memcpy(c->hello, p, h->len);
	c->hello_len = h->len;
	memcpy(c->node, hello.node, sizeof(c->node)); /* not trusted until AUTH */
	c->epoch = hello.epoch;
	c->transport = kp->p.transport;

	rep.major = PW_MAJOR;
	rep.minor = PW_MINOR;
	rep.transport = want;
	rep.epoch = kp_epoch(kp);
	r = peer_nonce(rep.nonce);
	if (r < 0)
		return r;
	memcpy(rep.cluster, kp->cluster, sizeof(rep.cluster));
	memcpy(rep.node, kp->node, sizeof(rep.node));
	rep.lock_ttl_ms = kp->p.lock_ttl_ms;
	rep.max_keys = kp->p.max_keys;
	rep.max_locks = kp->p.max_locks_per_peer;
	/* proof_s over the HELLO and this reply with its proof zeroed (pwire.h). */
	r = peer_proof(&kp->secret, PEER_SIDE_SERVER, c->hello, c->hello_len, &rep, sizeof(rep),
		       rep.proof);
	if (r < 0)
		return r;
	memcpy(c->reply, &rep, sizeof(rep));
	c->reply_len = sizeof(rep);
	c->state = CS_AUTH;
	c->rx = &rx_auth;
	return conn_send(c, PW_HELLO_REPLY, h->seq, &rep, sizeof(rep), NULL, 0);
}

static int send_auth_ok(struct conn *c, uint32_t seq)
{
	struct kvspeer *kp = c->kp;
	struct pw_auth_ok a = { 0 };
	struct pw_buf tail = { 0 };
	const void *taddr = NULL;
	size_t taddr_len = 0;
	int r = 0;

	if (kp->ucx) {
		r = pucx_address(kp->ucx, &taddr, &taddr_len);
		if (r < 0)
			return r;
		r = pw_buf_reserve(&tail, taddr_len);
		if (r < 0)
			return r;
		memcpy(tail.p, taddr, taddr_len);
		tail.len = taddr_len;
		pthread_mutex_lock(&kp->reg_lock);
		for (uint32_t i = 0; i < kp->nr_regions && r == 0; i++) {
			const struct region *g = &kp->regions[i];
			struct pw_region wr = { .base = g->base,
						.len = g->len,
						.rkey_len = (uint32_t)g->rkey_len };

			r = pw_buf_reserve(&tail, sizeof(wr) + g->rkey_len);
			if (r < 0)
				break;
			memcpy(tail.p + tail.len, &wr, sizeof(wr));
			memcpy(tail.p + tail.len + sizeof(wr), g->rkey, g->rkey_len);
			tail.len += sizeof(wr) + g->rkey_len;
		}
		a.nr_regions = kp->nr_regions;
		a.regions_version = kp->regions_version;
		pthread_mutex_unlock(&kp->reg_lock);
		a.taddr_len = (uint32_t)taddr_len;
	}
	if (r == 0)
		r = conn_send(c, PW_AUTH_OK, seq, &a, sizeof(a), tail.p, tail.len);
	pw_buf_free(&tail);
	return r;
}

static int on_auth(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct kvspeer *kp = c->kp;
	uint8_t want[PW_MAC_SIZE];
	struct pw_auth a;
	char why[128];
	int r;

	r = pw_parse_auth(p, h->len, &a, why, sizeof(why));
	if (r < 0) {
		SFAIL(kp, PROTOCOL);
		conn_send_error(c, h->seq, r, h->type, why);
		return r;
	}
	r = peer_proof(&kp->secret, PEER_SIDE_CLIENT, c->hello, c->hello_len, c->reply,
		       c->reply_len, want);
	if (r < 0)
		return r;
	if (!peer_proof_equal(want, a.proof)) {
		SFAIL(kp, AUTH);
		kp_log_peer(kp, KVSPEER_LOG_WARNING,
			    "peer %s (says '%s'): authentication failed (another cluster secret?)",
			    c->addr_str, c->node);
		conn_send_error(c, h->seq, -EACCES, h->type, "authentication failed");
		return -EACCES;
	}
	c->state = CS_READY;
	c->rx = &rx_ready;
	c->deadline_ns = 0;
	admit_authenticated(kp, c);
	kp_log_peer(kp, KVSPEER_LOG_DEBUG, "peer %s (%s) authenticated", c->addr_str, c->node);
	return send_auth_ok(c, h->seq);
}

/* The host's lock() of a query's keys: how many blocks it locked (at most asked), or -errno. */
static int host_lock(struct conn *c, const struct kvspeer_lock_req *req,
		     struct kvspeer_shard *shards, uint64_t *cookies)
{
	struct kvspeer *kp = c->kp;
	int r = kp->p.ops->lock(kp->p.host, req, shards, cookies);

	if (r < 0 || (uint32_t)r <= req->nr_keys)
		return r;
	kp_log(kp, KVSPEER_LOG_ERR, "host lock() returned %u blocks for %u keys", (uint32_t)r,
	       req->nr_keys);
	SFAIL(kp, HOST);
	return (int)req->nr_keys;
}

/*
 * Only registered memory is ever sent: the host's ranges are checked, not
 * followed.  @lk->shards gets the blocks up to the first one with a shard
 * outside (or over max_shard_bytes), each shard's region referenced; the
 * host's locks of the rest are given back.  How many blocks are kept.
 */
static uint32_t lock_ranges(struct kvspeer *kp, struct plock *lk,
			    const struct kvspeer_shard *shards, uint64_t *cookies, uint32_t n,
			    uint32_t nr_shards)
{
	uint32_t keep = n;

	pthread_mutex_lock(&kp->reg_lock);
	for (uint32_t b = 0; b < n && keep == n; b++) {
		for (uint32_t s = 0; s < nr_shards; s++) {
			const struct kvspeer_shard *sh = &shards[(size_t)b * nr_shards + s];
			int g = sh->len <= kp->p.max_shard_bytes
					? kp_region_find(kp, sh->addr, sh->len)
					: -1;

			if (g < 0) {
				keep = b;
				break;
			}
			lk->shards[(size_t)b * nr_shards + s] = (struct lock_shard){
				.addr = sh->addr,
				.len = sh->len,
				.gen = sh->generation,
				.region = (uint32_t)g,
			};
		}
	}
	for (uint32_t i = 0; i < keep * nr_shards; i++)
		kp->regions[lk->shards[i].region].refs++;
	pthread_mutex_unlock(&kp->reg_lock);
	if (keep < n) {
		SFAIL(kp, HOST);
		kp_log(kp, KVSPEER_LOG_ERR,
		       "host lock(): block %u has a shard outside registered memory (or over max_shard_bytes): prefix ends there",
		       keep);
		kp->p.ops->unlock(kp->p.host, cookies + keep, n - keep);
	}
	return keep;
}

/* @lk, of @keep blocks, is @c's now, until lock_end().  The TTL granted. */
static uint32_t lock_grant(struct conn *c, struct plock *lk, const struct pw_query *q,
			   uint32_t keep, uint64_t id, uint64_t *cookies)
{
	struct kvspeer *kp = c->kp;
	uint32_t ttl = q->ttl_ms && q->ttl_ms < kp->p.lock_ttl_ms ? q->ttl_ms : kp->p.lock_ttl_ms;

	lk->c = c;
	lk->id = id;
	lk->nr_blocks = keep;
	lk->nr_shards = q->nr_shards;
	lk->cookies = cookies;
	lk->expires_ns = peer_now_ns() + ttl * NSEC_PER_MSEC;
	cds_list_add_tail(&lk->link, &c->locks);
	c->nr_locks++;
	admit_locked(c);
	STAT_ADD(kp, locks_held, 1);
	STAT_ADD(kp, locks_granted, 1);
	return ttl;
}

/* The QUERY_REPLY of a granted lock: its entries, what a UCX peer needs to read them. */
static int reply_locked(struct conn *c, const struct pw_hdr *h, struct plock *lk,
			struct pw_query_reply *rep)
{
	struct kvspeer *kp = c->kp;
	uint32_t n = lk->nr_blocks * lk->nr_shards;
	struct pw_entry *ents = calloc(n, sizeof(*ents));
	int r;

	if (!ents) {
		lock_end(c, lk, NULL);
		return refuse(c, h->seq, -ENOMEM, h->type, KVSPEER_FAIL_HOST, "out of memory");
	}
	pthread_mutex_lock(&kp->reg_lock);
	rep->regions_version = kp->regions_version;
	pthread_mutex_unlock(&kp->reg_lock);
	for (uint32_t i = 0; i < n; i++) {
		ents[i].len = lk->shards[i].len;
		ents[i].generation = lk->shards[i].gen;
		/* Addresses and regions mean something to UCX only; TCP peers learn none. */
		if (kp->ucx) {
			ents[i].addr = (uint64_t)(uintptr_t)lk->shards[i].addr;
			ents[i].region = lk->shards[i].region;
		}
	}
	rep->nr_blocks = lk->nr_blocks;
	rep->lock_id = lk->id;
	r = conn_send(c, PW_QUERY_REPLY, h->seq, rep, sizeof(*rep), ents,
		      (size_t)n * sizeof(*ents));
	free(ents);
	return r;
}

static int on_query(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct kvspeer *kp = c->kp;
	struct pw_query q;
	const uint8_t *keys;
	struct kvspeer_shard *shards = NULL;
	uint64_t *cookies = NULL;
	struct plock *lk = NULL;
	struct kvspeer_lock_req req;
	struct pw_query_reply rep = { 0 };
	uint32_t keep, n;
	char why[160];
	int r;

	r = pw_parse_query(p, h->len, kp->p.max_keys, &q, &keys, why, sizeof(why));
	if (r == -EBADMSG) {
		SFAIL(kp, PROTOCOL);
		conn_send_error(c, h->seq, r, h->type, why);
		return r;
	}
	if (r < 0)
		return refuse(c, h->seq, r, h->type, KVSPEER_FAIL_RANGE, why);
	/* Counted per host: more connections from one host do not buy more locks. */
	if (!admit_may_lock(kp, c))
		return refuse(c, h->seq, -EUSERS, h->type, KVSPEER_FAIL_LIMIT,
			      "too many locks held by this peer");
	shards = calloc((size_t)q.nr_keys * q.nr_shards, sizeof(*shards));
	cookies = calloc(q.nr_keys, sizeof(*cookies));
	lk = calloc(1, sizeof(*lk));
	if (!shards || !cookies || !lk) {
		r = refuse(c, h->seq, -ENOMEM, h->type, KVSPEER_FAIL_HOST, "out of memory");
		goto out;
	}
	req = (struct kvspeer_lock_req){
		.digest = q.digest,
		.keys = keys,
		.nr_keys = q.nr_keys,
		.nr_shards = q.nr_shards,
		.lock_id = kp->next_lock_id++,
		.peer_node = c->node,
		.peer_addr = c->addr_str,
	};
	r = host_lock(c, &req, shards, cookies);
	if (r < 0) {
		r = refuse(c, h->seq, r, h->type, KVSPEER_FAIL_HOST, "the host could not lock");
		goto out;
	}
	n = (uint32_t)r;
	lk->shards = calloc((size_t)(n ? n : 1) * q.nr_shards, sizeof(*lk->shards));
	if (!lk->shards) {
		kp->p.ops->unlock(kp->p.host, cookies, n);
		r = refuse(c, h->seq, -ENOMEM, h->type, KVSPEER_FAIL_HOST, "out of memory");
		goto out;
	}
	keep = lock_ranges(kp, lk, shards, cookies, n, q.nr_shards);
	rep.nr_shards = q.nr_shards;
	if (keep == 0) {
		r = conn_send(c, PW_QUERY_REPLY, h->seq, &rep, sizeof(rep), NULL, 0);
		free(lk->shards);
		goto out;
	}
	rep.ttl_ms = lock_grant(c, lk, &q, keep, req.lock_id, cookies);
	cookies = NULL;
	r = reply_locked(c, h, lk, &rep);
	lk = NULL; /* owned by the connection now, or ended */
out:
	free(lk);
	free(cookies);
	free(shards);
	return r;
}
static int stream_shard(struct conn *c)
{
	struct plock *lk = c->stream;
	const struct lock_shard *sh =
		&lk->shards[(size_t)c->st_block * lk->nr_shards + c->st_shard];
	struct pw_data d = {
		.lock_id = lk->id,
		.block = c->st_block,
		.shard = c->st_shard,
		.len = sh->len,
	};
	int r = conn_send(c, PW_DATA, 0, &d, sizeof(d), NULL, 0);

	if (r < 0)
		return r;
	c->raw_src = sh->addr;
	c->raw_src_left = sh->len;
	return 0;
}

static int stream_end(struct conn *c, int status)
{
	struct plock *lk = c->stream;
	struct pw_fetch_end e = { .status = status,
				  .sent = c->st_block - c->st_first,
				  .lock_id = lk->id };

	lk->streaming = false;
	c->stream = NULL;
	c->rx_paused = false;
	c->rx_kick = true;
	return conn_send(c, PW_FETCH_END, 0, &e, sizeof(e), NULL, 0);
}

/* The shard being sent is out (c->ops->sent): its SHARD_END, then the next. */
static int stream_next(struct conn *c)
{
	struct kvspeer *kp = c->kp;
	struct plock *lk = c->stream;
	const struct lock_shard *sh;
	struct pw_shard_end e;
	int r;

	if (!lk)
		return 0;
	sh = &lk->shards[(size_t)c->st_block * lk->nr_shards + c->st_shard];
	/*
	 * The seqlock read: the bytes are out of our hands (copied into the
	 * socket), so a generation unchanged since lock() proves they were the
	 * locked contents.  The reader's fence keeps the send's reads of the
	 * bytes before the re-read; it pairs with the host's release fence
	 * after bumping a generation (struct kvspeer_host_ops).
	 */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	e = (struct pw_shard_end){
		.lock_id = lk->id,
		.block = c->st_block,
		.shard = c->st_shard,
		.generation =
			kp->p.ops->generation(kp->p.host, lk->cookies[c->st_block], c->st_shard),
	};
	r = conn_send(c, PW_SHARD_END, 0, &e, sizeof(e), NULL, 0);
	if (r < 0)
		return r;
	if (e.generation != sh->gen) {
		SFAIL(kp, STALE);
		kp_log(kp, KVSPEER_LOG_WARNING,
		       "lock %llu block %u shard %u: slot recycled while locked (generation %llu, was %llu)",
		       (unsigned long long)lk->id, c->st_block, c->st_shard,
		       (unsigned long long)e.generation, (unsigned long long)sh->gen);
		return stream_end(c, -ESTALE);
	}
	STAT_ADD(kp, serve_bytes, sh->len);
	c->bytes_served += sh->len;
	if (++c->st_shard == lk->nr_shards) {
		c->st_shard = 0;
		c->st_block++;
		c->blocks_served++;
		STAT_ADD(kp, serve_blocks, 1);
	}
	if (c->st_block == c->st_end)
		return stream_end(c, 0);
	return stream_shard(c);
}

static int on_fetch(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct pw_fetch f;
	struct plock *lk;
	char why[128];
	int r;

	r = pw_parse_fetch(p, h->len, &f, why, sizeof(why));
	if (r < 0)
		return refuse(c, h->seq, r, h->type, KVSPEER_FAIL_PROTOCOL, why);
	lk = lock_find(c, f.lock_id);
	if (!lk)
		return refuse(c, h->seq, -ENOENT, h->type, KVSPEER_FAIL_BAD_LOCK,
			      "FETCH of a lock this connection does not hold");
	if (c->transport != KVSPEER_TRANSPORT_TCP)
		return refuse(c, h->seq, -EOPNOTSUPP, h->type, KVSPEER_FAIL_PROTOCOL,
			      "FETCH on a UCX connection");
	if (f.first >= lk->nr_blocks || f.count > lk->nr_blocks - f.first)
		return refuse(c, h->seq, -ERANGE, h->type, KVSPEER_FAIL_RANGE,
			      "FETCH past the locked blocks");
	c->stream = lk;
	lk->streaming = true;
	c->st_first = c->st_block = f.first;
	c->st_shard = 0;
	c->st_end = f.first + f.count;
	c->rx_paused = true;
	return stream_shard(c);
}

static int on_renew(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct kvspeer *kp = c->kp;
	struct pw_renew m;
	struct pw_renew_reply rep = { 0 };
	struct plock *lk;
	char why[128];
	uint32_t ttl;
	int r;

	r = pw_parse_renew(p, h->len, &m, why, sizeof(why));
	if (r < 0)
		return refuse(c, h->seq, r, h->type, KVSPEER_FAIL_PROTOCOL, why);
	lk = lock_find(c, m.lock_id);
	if (!lk)
		return refuse(c, h->seq, -ENOENT, h->type, KVSPEER_FAIL_BAD_LOCK,
			      "RENEW of a lock this connection does not hold");
	ttl = m.ttl_ms && m.ttl_ms < kp->p.lock_ttl_ms ? m.ttl_ms : kp->p.lock_ttl_ms;
	lk->expires_ns = peer_now_ns() + ttl * NSEC_PER_MSEC;
	rep.ttl_ms = ttl;
	rep.lock_id = lk->id;
	return conn_send(c, PW_RENEW_REPLY, h->seq, &rep, sizeof(rep), NULL, 0);
}

static int on_release(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct kvspeer *kp = c->kp;
	struct pw_release m;
	struct pw_release_reply rep = { 0 };
	uint64_t *gens = NULL;
	struct plock *lk;
	char why[128];
	uint32_t n = 0;
	int r;

	r = pw_parse_release(p, h->len, &m, why, sizeof(why));
	if (r < 0)
		return refuse(c, h->seq, r, h->type, KVSPEER_FAIL_PROTOCOL, why);
	lk = lock_find(c, m.lock_id);
	if (!lk)
		return refuse(c, h->seq, -ENOENT, h->type, KVSPEER_FAIL_BAD_LOCK,
			      "RELEASE of a lock this connection does not hold");
	if (m.flags & PW_RELEASE_VERIFY) {
		bool good = true;

		n = lk->nr_blocks * lk->nr_shards;
		gens = calloc(n, sizeof(*gens));
		if (!gens) {
			lock_end(c, lk, &kp->st.locks_released);
			return refuse(c, h->seq, -ENOMEM, h->type, KVSPEER_FAIL_HOST,
				      "out of memory");
		}
		/* After the peer's reads: the seqlock check of stream_next(), for UCX. */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		for (uint32_t b = 0; b < lk->nr_blocks; b++) {
			uint64_t bytes = 0;

			for (uint32_t s = 0; s < lk->nr_shards; s++) {
				const struct lock_shard *sh =
					&lk->shards[(size_t)b * lk->nr_shards + s];

				gens[(size_t)b * lk->nr_shards + s] =
					kp->p.ops->generation(kp->p.host, lk->cookies[b], s);
				if (gens[(size_t)b * lk->nr_shards + s] != sh->gen)
					good = false;
				bytes += sh->len;
			}
			if (good) {
				STAT_ADD(kp, serve_blocks, 1);
				STAT_ADD(kp, serve_bytes, bytes);
				c->blocks_served++;
				c->bytes_served += bytes;
			}
		}
		if (!good)
			SFAIL(kp, STALE);
	}
	rep.nr = n;
	rep.lock_id = lk->id;
	lock_end(c, lk, &kp->st.locks_released);
	r = conn_send(c, PW_RELEASE_REPLY, h->seq, &rep, sizeof(rep), gens, n * sizeof(*gens));
	free(gens);
	return r;
}

static int on_health(struct conn *c, const struct pw_hdr *h)
{
	struct kvspeer *kp = c->kp;
	struct pw_health_reply rep = {
		.locks = (uint32_t)__atomic_load_n(&kp->st.locks_held, __ATOMIC_RELAXED),
		.epoch = kp_epoch(kp),
		.uptime_ms = (peer_now_ns() - kp->start_ns) / NSEC_PER_MSEC,
		.conns = kp->nr_serve_conns,
		.transport = kp->p.transport,
	};

	memcpy(rep.node, kp->node, sizeof(rep.node));
	return conn_send(c, PW_HEALTH_REPLY, h->seq, &rep, sizeof(rep), NULL, 0);
}

/* CS_READY: a request (expects_request() let only these through). */
static int on_request(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct kvspeer *kp = c->kp;

	switch (h->type) {
	case PW_QUERY:
		return on_query(c, h, p);
	case PW_FETCH:
		return on_fetch(c, h, p);
	case PW_RENEW:
		return on_renew(c, h, p);
	case PW_RELEASE:
		return on_release(c, h, p);
	case PW_HEALTH:
		return on_health(c, h);
	default:
		break;
	}
	SFAIL(kp, PROTOCOL);
	kp_log_peer(kp, KVSPEER_LOG_WARNING, "peer %s: message type %u unexpected here",
		    c->addr_str, h->type);
	conn_send_error(c, h->seq, -EPROTO, h->type, "unexpected message");
	return -EPROTO;
}

/* c->ops->closed: every lock of @c ends with it, then its host's account. */
static void serve_closed(struct conn *c, int err, enum conn_state was)
{
	drop_locks(c);
	admit_release(c->kp, c);
}

/* ---- Timers ------------------------------------------------------------------------ */

void serve_tick(struct kvspeer *kp, uint64_t now)
{
	uint64_t io = kp->p.io_timeout_ms * NSEC_PER_MSEC;
	uint64_t idle = kp->p.idle_timeout_ms * NSEC_PER_MSEC;
	struct cds_list_head *pos, *tmp;

	cds_list_for_each_safe(pos, tmp, &kp->conns)
	{
		struct conn *c = cds_list_entry(pos, struct conn, link);
		struct cds_list_head *lp, *lt;

		if (c->side != SIDE_SERVE || c->state == CS_DEAD)
			continue;
		if (c->state < CS_READY && now > c->deadline_ns) {
			SFAIL(kp, TIMEOUT);
			kp_log_peer(kp, KVSPEER_LOG_WARNING, "peer %s: no handshake within %u ms",
				    c->addr_str, kp->p.hello_timeout_ms);
			conn_close(c, -ETIMEDOUT);
			continue;
		}
		if ((c->rx_partial_ns && now - c->rx_partial_ns > io) ||
		    (c->tx_wait_ns && now - c->tx_wait_ns > io)) {
			SFAIL(kp, STALL);
			kp_log_peer(kp, KVSPEER_LOG_WARNING, "peer %s (%s): stalled %s for %u ms",
				    c->addr_str, c->node, c->tx_wait_ns ? "reading" : "mid-message",
				    kp->p.io_timeout_ms);
			conn_close(c, -ETIMEDOUT);
			continue;
		}
		cds_list_for_each_safe(lp, lt, &c->locks)
		{
			struct plock *lk = cds_list_entry(lp, struct plock, link);

			if (!lk->streaming && now >= lk->expires_ns) {
				kp_log_peer(kp, KVSPEER_LOG_INFO, "lock %llu of %s (%s) expired",
					    (unsigned long long)lk->id, c->addr_str, c->node);
				lock_end(c, lk, &kp->st.locks_expired);
			}
		}
		if (c->state == CS_READY && !c->nr_locks && !c->tx_wait_ns && !c->rx_partial_ns) {
			uint64_t last =
				c->last_rx_ns > c->last_tx_ns ? c->last_rx_ns : c->last_tx_ns;

			if (now - last > idle)
				conn_close(c, 0);
		}
	}
}

/* ---- The state machine: what each state takes, who takes it ------------------ */

static bool expects_hello(const struct conn *c, unsigned type)
{
	return type == PW_HELLO;
}

static bool expects_auth(const struct conn *c, unsigned type)
{
	return type == PW_AUTH;
}

static bool expects_request(const struct conn *c, unsigned type)
{
	return type == PW_QUERY || type == PW_FETCH || type == PW_RENEW || type == PW_RELEASE ||
	       type == PW_HEALTH;
}

static const struct conn_rx rx_hello = { .expects = expects_hello, .handle = on_hello };
static const struct conn_rx rx_auth = { .expects = expects_auth, .handle = on_auth };
static const struct conn_rx rx_ready = { .expects = expects_request, .handle = on_request };
static const struct conn_ops serve_ops = { .sent = stream_next, .closed = serve_closed };
