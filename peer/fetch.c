/* SPDX-License-Identifier: MIT */
/*
 * The fetching side: a request's life from submission to its one done
 * callback, the connections it uses (an idle pool per peer), and the
 * checks that keep a hostile or broken server from writing a byte the
 * host did not hand out, or from having a wrong byte counted as fetched.
 *
 * A fetch ends exactly once, in finish(), on the service thread, and only
 * when nothing can write its buffers any more: TCP bytes are written by
 * this thread's own recv(), so detaching the connection stops them; UCX
 * gets in flight are completed (with errors, by closing the endpoint)
 * before finish() runs.  The peer's lock is released by RELEASE when the
 * connection is still usable, else by closing it (the server drops every
 * lock of a closed connection at once).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/bits.h"
#include "peer/internal.h"

#define FFAIL(kp, kind) STAT_ADD(kp, fetch_fail[KVSPEER_FAIL_##kind], 1)

/* ---- The public API ------------------------------------------------------- */

void kvspeer_fetch_params_init(struct kvspeer_fetch_params *p)
{
	memset(p, 0, sizeof(*p));
}

void kvspeer_fetch_ref(struct kvspeer_fetch *kf)
{
	struct fetch *f = (struct fetch *)kf;

	/* Relaxed: taking a reference orders nothing; the last unref is acq_rel. */
	__atomic_fetch_add(&f->refs, 1, __ATOMIC_RELAXED);
}

void kvspeer_fetch_unref(struct kvspeer_fetch *kf)
{
	struct fetch *f = (struct fetch *)kf;
	struct waiter *w, *tmp;

	if (!f)
		return;
	/* acq_rel: every use of @f by other holders happens before the free below. */
	if (__atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL))
		return;
	cds_list_for_each_entry_safe(w, tmp, &f->waiters, link)
		free(w);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
	free(f->keys);
	free(f->ents);
	free(f->dst);
	free(f);
}

static struct fetch *fetch_alloc(struct kvspeer *kp, enum fetch_kind kind, const char *peer,
				 uint32_t timeout_ms)
{
	struct fetch *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->kp = kp;
	f->kind = kind;
	f->refs = 2; /* the caller's and the service thread's (dropped in finish()) */
	snprintf(f->peer, sizeof(f->peer), "%s", peer);
	f->submit_ns = peer_now_ns();
	f->deadline_ns = f->submit_ns + (uint64_t)timeout_ms * NSEC_PER_MSEC;
	f->result = -EINPROGRESS;
	f->get_failed_at = UINT32_MAX;
	CDS_INIT_LIST_HEAD(&f->link);
	CDS_INIT_LIST_HEAD(&f->wait_link);
	CDS_INIT_LIST_HEAD(&f->waiters);
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	return f;
}

int kvspeer_fetch_submit(struct kvspeer *kp, const struct kvspeer_fetch_params *p,
			 struct kvspeer_fetch **ret_f)
{
	struct sockaddr_storage sa;
	socklen_t salen;
	struct fetch *f;
	int r;

	if (!kp || !p || !ret_f || !p->peer || !p->digest || !p->keys || !p->alloc)
		return -EINVAL;
	if (strlen(p->peer) >= KVSPEER_ADDR_MAX || peer_addr_parse(p->peer, &sa, &salen) < 0) {
		kp_log(kp, KVSPEER_LOG_ERR, "fetch: peer '%s' is not ADDR:PORT or [ADDR]:PORT",
		       p->peer);
		return -EINVAL;
	}
	if (!p->nr_keys || p->nr_keys > KVSPEER_MAX_KEYS || !p->nr_shards ||
	    p->nr_shards > KVSPEER_MAX_SHARDS ||
	    (uint64_t)p->nr_keys * p->nr_shards > KVSPEER_MAX_ENTRIES || !p->timeout_ms ||
	    p->resv0 || !all_zero(p->resv, sizeof(p->resv)))
		return -EINVAL;
	if (p->expect_node && (strlen(p->expect_node) >= KVSPEER_NAME_MAX ||
			       pw_check_name(p->expect_node, strlen(p->expect_node) + 1) < 0))
		return -EINVAL;
	f = fetch_alloc(kp, FK_FETCH, p->peer, p->timeout_ms);
	if (!f)
		return -ENOMEM;
	f->keys = malloc((size_t)p->nr_keys * KVSPEER_KEY_SIZE);
	if (!f->keys) {
		f->refs = 1;
		kvspeer_fetch_unref((struct kvspeer_fetch *)f);
		return -ENOMEM;
	}
	memcpy(f->keys, p->keys, (size_t)p->nr_keys * KVSPEER_KEY_SIZE);
	memcpy(f->digest, p->digest, sizeof(f->digest));
	f->nr_keys = p->nr_keys;
	f->nr_shards = p->nr_shards;
	f->expect_epoch = p->expect_epoch;
	if (p->expect_node)
		snprintf(f->expect_node, sizeof(f->expect_node), "%s", p->expect_node);
	f->alloc = p->alloc;
	f->landed = p->landed;
	f->done = p->done;
	f->arg = p->arg;
	r = kp_submit(kp, f);
	if (r < 0) {
		f->refs = 1;
		kvspeer_fetch_unref((struct kvspeer_fetch *)f);
		return r;
	}
	*ret_f = (struct kvspeer_fetch *)f;
	return 0;
}

int kvspeer_fetch_join(struct kvspeer_fetch *kf, kvspeer_done_fn done, void *arg)
{
	struct fetch *f = (struct fetch *)kf;
	struct waiter *w;

	if (!f || !done)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->done = done;
	w->arg = arg;
	pthread_mutex_lock(&f->lock);
	if (f->completed) {
		pthread_mutex_unlock(&f->lock);
		free(w);
		return -EALREADY;
	}
	cds_list_add_tail(&w->link, &f->waiters);
	pthread_mutex_unlock(&f->lock);
	return 0;
}

int kvspeer_fetch_result(const struct kvspeer_fetch *kf, int *ret_error)
{
	struct fetch *f = (struct fetch *)kf;
	int r;

	if (!f)
		return -EINVAL;
	pthread_mutex_lock(&f->lock);
	r = f->resolved ? f->result : -EINPROGRESS;
	if (f->resolved && ret_error)
		*ret_error = f->err;
	pthread_mutex_unlock(&f->lock);
	return r;
}

int kvspeer_fetch_wait(struct kvspeer_fetch *kf, int *ret_error)
{
	struct fetch *f = (struct fetch *)kf;

	if (!f)
		return -EINVAL;
	if (kp_on_thread(f->kp))
		return -EDEADLK;
	pthread_mutex_lock(&f->lock);
	while (!f->completed)
		pthread_cond_wait(&f->cond, &f->lock);
	pthread_mutex_unlock(&f->lock);
	return kvspeer_fetch_result(kf, ret_error);
}

int kvspeer_fetch(struct kvspeer *kp, const struct kvspeer_fetch_params *p, int *ret_error)
{
	struct kvspeer_fetch *f;
	int r;

	if (kp && kp_on_thread(kp))
		return -EDEADLK;
	r = kvspeer_fetch_submit(kp, p, &f);
	if (r < 0)
		return r;
	r = kvspeer_fetch_wait(f, ret_error);
	kvspeer_fetch_unref(f);
	return r;
}

int kvspeer_health(struct kvspeer *kp, const char *peer, int timeout_ms, struct kvspeer_health *ret)
{
	struct sockaddr_storage sa;
	socklen_t salen;
	struct fetch *f;
	int r, err = 0;

	if (!kp || !peer || !ret || timeout_ms <= 0 || strlen(peer) >= KVSPEER_ADDR_MAX ||
	    peer_addr_parse(peer, &sa, &salen) < 0)
		return -EINVAL;
	if (kp_on_thread(kp))
		return -EDEADLK;
	f = fetch_alloc(kp, FK_HEALTH, peer, (uint32_t)timeout_ms);
	if (!f)
		return -ENOMEM;
	r = kp_submit(kp, f);
	if (r < 0) {
		f->refs = 1;
		kvspeer_fetch_unref((struct kvspeer_fetch *)f);
		return r;
	}
	r = kvspeer_fetch_wait((struct kvspeer_fetch *)f, &err);
	if (r >= 0 && !err)
		*ret = f->health;
	kvspeer_fetch_unref((struct kvspeer_fetch *)f);
	return r < 0 ? r : err;
}

/* ---- Peers (client side) ---------------------------------------------------- */

static struct peer_ent *peer_get(struct kvspeer *kp, const char *addr)
{
	struct cds_list_head *pos, *tmp;
	struct peer_ent *pe, *lru = NULL;

	cds_list_for_each_safe(pos, tmp, &kp->peers)
	{
		pe = cds_list_entry(pos, struct peer_ent, link);
		if (!strcmp(pe->addr, addr))
			return pe;
		if (!pe->conns && cds_list_empty(&pe->waiting) && (!lru || pe->last_ns < lru->last_ns))
			lru = pe;
	}
	if (kp->nr_peers >= PEER_MAX_PEERS) {
		/* Bounded: the least recently used entry without a connection goes. */
		if (!lru)
			return NULL;
		cds_list_del_init(&lru->link);
		kp->nr_peers--;
		free(lru);
	}
	pe = calloc(1, sizeof(*pe));
	if (!pe)
		return NULL;
	snprintf(pe->addr, sizeof(pe->addr), "%s", addr);
	if (peer_addr_parse(addr, &pe->sa, &pe->salen) < 0) {
		free(pe);
		return NULL;
	}
	CDS_INIT_LIST_HEAD(&pe->idle);
	CDS_INIT_LIST_HEAD(&pe->waiting);
	CDS_INIT_LIST_HEAD(&pe->kick_link);
	pe->last_ns = peer_now_ns();
	cds_list_add_tail(&pe->link, &kp->peers);
	kp->nr_peers++;
	return pe;
}

void peer_ents_free(struct kvspeer *kp)
{
	struct cds_list_head *pos, *tmp;

	cds_list_for_each_safe(pos, tmp, &kp->peers)
	{
		struct peer_ent *pe = cds_list_entry(pos, struct peer_ent, link);

		cds_list_del_init(pos);
		cds_list_del_init(&pe->kick_link);
		free(pe);
	}
	kp->nr_peers = 0;
}

/*
 * Handshakes we have open to one peer at a time: half of the limit we
 * ourselves set on unauthenticated connections from one host
 * (max_unauth_per_peer), so that a cluster configured alike never meets
 * its peers' limit, and a node that is busy fetching never holds the most
 * of a peer's unauthenticated budget (whose oldest conn goes first when an
 * attack fills it).  Further fetches wait in pe->waiting for a conn.
 */
static uint32_t connecting_max(const struct kvspeer *kp)
{
	return (kp->p.max_unauth_per_peer + 1) / 2;
}

/* A conn of @pe is free, or one more may be opened: its waiting fetches go next turn. */
static void pe_kick(struct kvspeer *kp, struct peer_ent *pe)
{
	if (!cds_list_empty(&pe->waiting) && cds_list_empty(&pe->kick_link))
		cds_list_add_tail(&pe->kick_link, &kp->kick);
}

void fetch_conn_gone(struct conn *c, enum conn_state was)
{
	struct peer_ent *pe = c->pe;

	pe->conns--;
	if (was < CS_READY)
		pe->connecting--;
	pe_kick(c->kp, pe);
}

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

static void conn_idle(struct conn *c)
{
	struct peer_ent *pe = c->pe;

	c->f = NULL;
	c->drain_seq = 0;
	if (c->state != CS_READY || pe->nr_idle >= c->kp->p.pool_idle) {
		conn_close(c, 0);
		return;
	}
	c->idle_since_ns = peer_now_ns();
	cds_list_add_tail(&c->idle_link, &pe->idle);
	pe->nr_idle++;
	pe_kick(c->kp, pe);
}

/* ---- Finishing ---------------------------------------------------------------- */

static unsigned fail_kind(int err)
{
	switch (err) {
	case -ETIMEDOUT:
		return KVSPEER_FAIL_TIMEOUT;
	case -ECONNREFUSED:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -EADDRNOTAVAIL:
	case -EMFILE:
		return KVSPEER_FAIL_CONNECT;
	case -EACCES:
		return KVSPEER_FAIL_AUTH;
	case -EPROTO:
	case -EBADMSG:
	case -EPROTONOSUPPORT:
		return KVSPEER_FAIL_PROTOCOL;
	case -ESTALE:
		return KVSPEER_FAIL_STALE;
	case -ENOSPC:
		return KVSPEER_FAIL_ALLOC;
	case -EREMOTEIO:
		return KVSPEER_FAIL_REFUSED;
	case -EIO:
		return KVSPEER_FAIL_TRANSPORT;
	default:
		return KVSPEER_FAIL_RESET;
	}
}

static void detach(struct fetch *f)
{
	if (!f->c)
		return;
	f->c->f = NULL;
	f->c = NULL;
	if (f->pe && f->pe->busy)
		f->pe->busy--;
}

/* The peer's lock is released (or being released): no longer ours to count. */
static void lock_gone(struct fetch *f)
{
	if (f->lock_held && f->pe)
		f->pe->locks--;
	f->lock_held = false;
}

/* The first cause wins: a shorter prefix has one reason. */
static void set_err(struct fetch *f, int err)
{
	if (err && !f->err)
		f->err = err;
}

static void finish(struct fetch *f, int err)
{
	struct kvspeer *kp = f->kp;
	struct peer_ent *pe = f->pe;
	uint64_t us, bytes = 0;
	unsigned bucket = 0;
	int n;

	if (f->state == FS_DONE)
		return;
	set_err(f, err);
	f->state = FS_DONE;
	detach(f);
	lock_gone(f);
	cds_list_del_init(&f->link);
	cds_list_del_init(&f->wait_link);
	n = f->kind == FK_FETCH ? (int)f->verified : 0;
	us = (peer_now_ns() - f->submit_ns) / 1000;
	if (f->kind == FK_FETCH) {
		for (uint32_t i = 0; i < f->verified * f->nr_shards; i++)
			bytes += f->ents[i].len;
		STAT_ADD(kp, fetches, 1);
		if (f->verified == f->nr_keys)
			STAT_ADD(kp, fetches_full, 1);
		else if (f->verified)
			STAT_ADD(kp, fetches_partial, 1);
		else
			STAT_ADD(kp, fetches_empty, 1);
		STAT_ADD(kp, fetch_blocks, f->verified);
		STAT_ADD(kp, fetch_bytes, bytes);
		while (bucket < KVSPEER_HIST_BUCKETS - 1 && us >= (1ull << bucket))
			bucket++;
		STAT_ADD(kp, fetch_latency_us[bucket], 1);
		STAT_ADD(kp, fetch_latency_sum_us, us);
	}
	if (f->err && f->err != -ESHUTDOWN)
		STAT_ADD(kp, fetch_fail[fail_kind(f->err)], 1);
	if (pe) {
		pe->last_ns = peer_now_ns();
		pe->blocks += f->verified;
		pe->bytes += bytes;
		if (f->err && f->err != -ESHUTDOWN) {
			pe->failures++;
			pe->last_error = f->err;
		} else if (f->err == 0) {
			pe->last_error = 0;
		}
	}
	if (f->err && f->err != -ESHUTDOWN && f->kind == FK_FETCH)
		kp_log_peer(kp, KVSPEER_LOG_INFO, "fetch of %u keys from %s: %u blocks (%s)",
			    f->nr_keys, f->peer, f->verified, strerror(-f->err));

	pthread_mutex_lock(&f->lock);
	f->result = n;
	f->resolved = true; /* readable from the callbacks on (kvspeer_fetch_result()) */
	pthread_mutex_unlock(&f->lock);
	/*
	 * Callbacks first, then "completed": a host that waits and then frees
	 * what it gave as arg must find every callback finished.  Joiners that
	 * come while callbacks run are picked up by the loop; once it sees none
	 * under f->lock it marks the fetch completed, and joins get -EALREADY.
	 */
	if (f->done)
		f->done(f->arg, (struct kvspeer_fetch *)f, n);
	for (;;) {
		struct cds_list_head todo;
		struct waiter *w, *tmp;

		CDS_INIT_LIST_HEAD(&todo);
		pthread_mutex_lock(&f->lock);
		cds_list_splice(&f->waiters, &todo);
		CDS_INIT_LIST_HEAD(&f->waiters);
		if (cds_list_empty(&todo)) {
			f->completed = true;
			/* Under f->lock: pairs with the waiter's check in kvspeer_fetch_wait(). */
			pthread_cond_broadcast(&f->cond);
			pthread_mutex_unlock(&f->lock);
			break;
		}
		pthread_mutex_unlock(&f->lock);
		cds_list_for_each_entry_safe(w, tmp, &todo, link) {
			w->done(w->arg, (struct kvspeer_fetch *)f, n);
			free(w);
		}
	}
	kvspeer_fetch_unref((struct kvspeer_fetch *)f);
}

/* Give the peer's lock back: RELEASE when the conn is usable, else closing it does. */
static void release_and_finish(struct fetch *f, struct conn *c, int err)
{
	struct pw_release m = { .lock_id = f->lock_id };

	if (c && c->state == CS_READY && f->lock_id) {
		uint32_t seq = ++c->seq;

		if (conn_send(c, PW_RELEASE, seq, &m, sizeof(m), NULL, 0) == 0) {
			f->lock_id = 0;
			finish(f, err);
			c->drain_seq = seq;
			c->idle_since_ns = peer_now_ns();
			conn_flush(c);
			return;
		}
	}
	finish(f, err);
	if (c && c->state != CS_DEAD)
		conn_close(c, err);
}

/* ---- Connecting ------------------------------------------------------------------ */

static int send_request(struct fetch *f, struct conn *c);

static int conn_open(struct kvspeer *kp, struct peer_ent *pe, struct conn **ret)
{
	struct conn *c;
	int fd, r;

	fd = socket(pe->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Leave from the cluster interface when we have one (kvspeer_params.listen). */
	if (kp->serving && kp->listen_sa.ss_family == pe->sa.ss_family) {
		struct sockaddr_storage src = kp->listen_sa;

		if (src.ss_family == AF_INET)
			((struct sockaddr_in *)&src)->sin_port = 0;
		else
			((struct sockaddr_in6 *)&src)->sin6_port = 0;
		if (bind(fd, (struct sockaddr *)&src, kp->listen_salen) < 0) {
			r = -errno;
			close(fd);
			return r;
		}
	}
	conn_set_sockopts(kp, fd);
	if (connect(fd, (struct sockaddr *)&pe->sa, pe->salen) < 0 && errno != EINPROGRESS) {
		r = -errno;
		close(fd);
		return r;
	}
	c = conn_new(kp, fd, SIDE_FETCH, (struct sockaddr *)&pe->sa, pe->salen);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->pe = pe;
	pe->conns++;
	pe->connecting++; /* until CS_READY, or fetch_conn_gone() */
	*ret = c;
	return 0;
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
	pe = peer_get(kp, f->peer);
	if (!pe) {
		finish(f, -EMFILE);
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
		if (send_request(f, c) < 0 && f->state != FS_DONE)
			conn_close(c, -ECONNRESET);
		return;
	}
	/*
	 * Within the limits we set ourselves (the peers' alike): handshakes
	 * (connecting_max()) and connections (max_conns_per_peer) per peer.
	 */
	if (pe->connecting >= connecting_max(kp) || pe->conns >= kp->p.max_conns_per_peer) {
		if (pe->connecting >= connecting_max(kp) || cds_list_empty(&pe->idle)) {
			cds_list_add_tail(&f->wait_link, &pe->waiting); /* fetch_kick() starts it */
			return;
		}
		/* A retry, which must not take a pooled conn: the oldest one makes room. */
		conn_close(cds_list_entry(pe->idle.next, struct conn, idle_link), 0);
	}
	r = conn_open(kp, pe, &c);
	if (r < 0) {
		finish(f, r);
		return;
	}
	c->reused = false;
	attach(f, c);
}

void fetch_connected(struct conn *c)
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
		return send_request(c->f, c);
	conn_idle(c);
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
	c->pe->ever_ok = true;
	c->pe->connecting--;
	pe_kick(kp, c->pe);
	kp_log(kp, KVSPEER_LOG_DEBUG, "connected to %s (%s, epoch %llu)", c->addr_str, c->node,
	       (unsigned long long)c->epoch);
	return conn_ready(c);
}

/* ---- Requests ----------------------------------------------------------------------- */

static int send_request(struct fetch *f, struct conn *c)
{
	uint64_t now = peer_now_ns();

	f->seq = ++c->seq;
	if (f->kind == FK_HEALTH) {
		f->state = FS_QUERY;
		f->health_sent_ns = now;
		if (conn_send(c, PW_HEALTH, f->seq, NULL, 0, NULL, 0) < 0)
			return -ECONNRESET;
	} else {
		struct pw_query q = { .nr_keys = f->nr_keys, .nr_shards = f->nr_shards };
		/* The lock should outlive our deadline a little, never much longer. */
		uint64_t left = f->deadline_ns > now ? (f->deadline_ns - now) / NSEC_PER_MSEC : 0;

		q.ttl_ms = (uint32_t)(left + 1000 > UINT32_MAX ? UINT32_MAX : left + 1000);
		memcpy(q.digest, f->digest, sizeof(q.digest));
		f->state = FS_QUERY;
		if (conn_send(c, PW_QUERY, f->seq, &q, sizeof(q), f->keys,
			      (size_t)f->nr_keys * KVSPEER_KEY_SIZE) < 0)
			return -ECONNRESET;
	}
	return conn_flush(c);
}

static void gets_put(struct fetch *f, uint32_t block, int status);

static int start_gets(struct fetch *f, struct conn *c)
{
	/* One count held while posting, so a get done at once cannot end the phase early. */
	f->gets_out = 1;
	for (uint32_t b = 0; b < f->nr_alloc && f->get_failed_at == UINT32_MAX; b++) {
		for (uint32_t s = 0; s < f->nr_shards; s++) {
			const struct pw_entry *e = &f->ents[(size_t)b * f->nr_shards + s];
			int r;

			f->gets_out++;
			r = pucx_get(c->uep, f->dst[(size_t)b * f->nr_shards + s], e->len, e->addr,
				     c->regions[e->region].rkey, f, b);
			if (r < 0) {
				/* Not posted: done, failed; later blocks are not asked for. */
				gets_put(f, b, r);
				break;
			}
		}
	}
	gets_put(f, UINT32_MAX, 0);
	return 0;
}

static void verify_ucx(struct fetch *f, struct conn *c)
{
	struct pw_release m = { .lock_id = f->lock_id, .flags = PW_RELEASE_VERIFY };

	f->state = FS_VERIFY;
	f->seq = ++c->seq;
	if (conn_send(c, PW_RELEASE, f->seq, &m, sizeof(m), NULL, 0) == 0)
		conn_flush(c);
}

void fetch_ucx_get_done(struct fetch *f, uint32_t block, int status)
{
	gets_put(f, block, status);
}

static void gets_put(struct fetch *f, uint32_t block, int status)
{
	f->gets_out--;
	if (status < 0) {
		set_err(f, -EIO);
		if (block < f->get_failed_at)
			f->get_failed_at = block;
	}
	if (f->gets_out || f->state != FS_DATA)
		return;
	/* All landed (or failed): the generations decide what counts. */
	if (f->c && f->c->state == CS_READY)
		verify_ucx(f, f->c);
}

static int on_query_reply(struct fetch *f, struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct kvspeer *kp = c->kp;
	struct pw_reply_limits lim = { .nr_keys = f->nr_keys,
				       .nr_shards = f->nr_shards,
				       .max_shard_bytes = kp->p.max_shard_bytes };
	struct pw_query_reply rep;
	const uint8_t *ents;
	char why[160];
	uint32_t n;
	int r;

	r = pw_parse_query_reply(p, h->len, &lim, &rep, &ents, why, sizeof(why));
	if (r < 0) {
		kp_log_peer(kp, KVSPEER_LOG_WARNING, "peer %s: bad QUERY_REPLY: %s", c->addr_str,
			    why);
		set_err(f, -EPROTO);
		return -EPROTO;
	}
	if (rep.status < 0) {
		release_and_finish(f, c, -EREMOTEIO);
		return 0;
	}
	if (!rep.nr_blocks) {
		finish(f, 0);
		conn_idle(c);
		return 0;
	}
	f->lock_id = rep.lock_id;
	f->nr_locked = rep.nr_blocks;
	f->lock_ttl_ms = rep.ttl_ms;
	f->renew_at_ns = peer_now_ns() + rep.ttl_ms / 2 * NSEC_PER_MSEC;
	n = rep.nr_blocks * f->nr_shards;
	f->ents = calloc(n, sizeof(*f->ents));
	f->dst = calloc(n, sizeof(*f->dst));
	if (!f->ents || !f->dst) {
		release_and_finish(f, c, -ENOMEM);
		return 0;
	}
	for (uint32_t i = 0; i < n; i++)
		pw_entry_get(ents, i, &f->ents[i]);
	if (kp->ucx) {
		/* A key or range we do not hold for this peer is its error, not a read. */
		if (rep.regions_version != c->regions_version) {
			release_and_finish(f, c, -ESTALE);
			if (c->state != CS_DEAD)
				conn_close(c, -ESTALE); /* the next fetch gets fresh keys */
			return 0;
		}
		for (uint32_t i = 0; i < n; i++) {
			const struct pw_entry *e = &f->ents[i];

			if (e->region >= c->nr_regions || e->addr < c->regions[e->region].base ||
			    e->addr - c->regions[e->region].base > c->regions[e->region].len ||
			    e->len > c->regions[e->region].len -
					     (e->addr - c->regions[e->region].base)) {
				kp_log_peer(kp, KVSPEER_LOG_WARNING,
					    "peer %s: QUERY_REPLY entry %u outside its regions",
					    c->addr_str, i);
				set_err(f, -EPROTO);
				return -EPROTO;
			}
		}
	}
	f->lock_held = true;
	c->pe->locks++;
	/* Buffers from the host, block by block; a NULL ends the prefix (pool full). */
	for (uint32_t b = 0; b < f->nr_locked; b++) {
		bool all = true;

		for (uint32_t s = 0; s < f->nr_shards; s++) {
			size_t i = (size_t)b * f->nr_shards + s;

			f->dst[i] = f->alloc(f->arg, b, s, f->ents[i].len);
			if (!f->dst[i]) {
				all = false;
				break;
			}
		}
		if (!all)
			break;
		f->nr_alloc = b + 1;
	}
	if (f->nr_alloc < f->nr_locked)
		set_err(f, -ENOSPC);
	if (!f->nr_alloc) {
		release_and_finish(f, c, -ENOSPC);
		return 0;
	}
	f->state = FS_DATA;
	f->cur_block = f->cur_shard = 0;
	if (kp->ucx)
		return start_gets(f, c);
	{
		struct pw_fetch m = { .lock_id = f->lock_id, .first = 0, .count = f->nr_alloc };

		f->seq = ++c->seq;
		return conn_send(c, PW_FETCH, f->seq, &m, sizeof(m), NULL, 0);
	}
}

static int on_data(struct fetch *f, struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct pw_data d;
	char why[128];
	size_t i;

	if (pw_parse_data(p, h->len, &d, why, sizeof(why)) < 0)
		return -EPROTO;
	i = (size_t)f->cur_block * f->nr_shards + f->cur_shard;
	/* Exactly the next shard, exactly its locked length: nothing else reaches a buffer. */
	if (d.lock_id != f->lock_id || d.block != f->cur_block || d.shard != f->cur_shard ||
	    f->cur_block >= f->nr_alloc || d.len != f->ents[i].len) {
		kp_log_peer(
			c->kp, KVSPEER_LOG_WARNING,
			"peer %s: DATA for block %u shard %u (%llu bytes) where block %u shard %u (%llu) was due",
			c->addr_str, d.block, d.shard, (unsigned long long)d.len, f->cur_block,
			f->cur_shard, (unsigned long long)f->ents[i].len);
		set_err(f, -EPROTO);
		return -EPROTO;
	}
	c->raw_dst = f->dst[i];
	c->raw_left = d.len;
	return 0;
}

int fetch_raw_done(struct conn *c)
{
	return 0;
}

static int on_shard_end(struct fetch *f, struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct pw_shard_end e;
	char why[128];
	size_t i = (size_t)f->cur_block * f->nr_shards + f->cur_shard;

	if (pw_parse_shard_end(p, h->len, &e, why, sizeof(why)) < 0 || e.lock_id != f->lock_id ||
	    e.block != f->cur_block || e.shard != f->cur_shard || f->cur_block >= f->nr_alloc) {
		set_err(f, -EPROTO);
		return -EPROTO;
	}
	if (e.generation != f->ents[i].generation) {
		kp_log_peer(
			c->kp, KVSPEER_LOG_WARNING,
			"peer %s: block %u shard %u changed while it was sent (generation %llu, locked %llu)",
			c->addr_str, e.block, e.shard, (unsigned long long)e.generation,
			(unsigned long long)f->ents[i].generation);
		/* The stream is not worth reading on: closing releases the lock. */
		set_err(f, -ESTALE);
		return -ESTALE;
	}
	if (++f->cur_shard == f->nr_shards) {
		f->cur_shard = 0;
		f->verified = ++f->cur_block;
		if (f->landed)
			f->landed(f->arg, f->verified);
	}
	return 0;
}

static int on_fetch_end(struct fetch *f, struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct pw_fetch_end e;
	char why[128];

	if (pw_parse_fetch_end(p, h->len, &e, why, sizeof(why)) < 0 || e.lock_id != f->lock_id ||
	    e.sent != f->verified || (e.status == 0 && f->verified != f->nr_alloc)) {
		set_err(f, -EPROTO);
		return -EPROTO;
	}
	release_and_finish(f, c, e.status == -ESTALE ? -ESTALE : e.status ? -EREMOTEIO : 0);
	return 0;
}

static int on_verify(struct fetch *f, struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	uint32_t n = f->nr_locked * f->nr_shards, good;
	struct pw_release_reply rep;
	const uint8_t *gens;
	char why[128];

	if (pw_parse_release_reply(p, h->len, n, &rep, &gens, why, sizeof(why)) < 0 ||
	    rep.lock_id != f->lock_id || (rep.status == 0 && rep.nr != n)) {
		set_err(f, -EPROTO);
		return -EPROTO;
	}
	f->lock_id = 0; /* released by this RELEASE */
	if (rep.status < 0) {
		finish(f, -EREMOTEIO);
		conn_idle(c);
		return 0;
	}
	good = f->nr_alloc < f->get_failed_at ? f->nr_alloc : f->get_failed_at;
	for (uint32_t b = 0; b < good; b++) {
		for (uint32_t s = 0; s < f->nr_shards; s++) {
			size_t i = (size_t)b * f->nr_shards + s;
			uint64_t g;

			memcpy(&g, gens + i * sizeof(g), sizeof(g));
			if (g != f->ents[i].generation) {
				set_err(f, -ESTALE);
				good = b;
				break;
			}
		}
	}
	f->verified = good;
	if (f->landed && good)
		f->landed(f->arg, good);
	finish(f, 0);
	conn_idle(c);
	return 0;
}

static int on_health_reply(struct fetch *f, struct conn *c, const struct pw_hdr *h,
			   const uint8_t *p)
{
	struct pw_health_reply rep;
	char why[128];

	if (pw_parse_health_reply(p, h->len, &rep, why, sizeof(why)) < 0)
		return -EPROTO;
	memcpy(f->health.node, rep.node, sizeof(f->health.node));
	f->health.epoch = rep.epoch;
	f->health.uptime_ms = rep.uptime_ms;
	f->health.locks = rep.locks;
	f->health.conns = rep.conns;
	f->health.transport = rep.transport;
	f->health.rtt_us = (uint32_t)((peer_now_ns() - f->health_sent_ns) / 1000);
	finish(f, rep.status);
	conn_idle(c);
	return 0;
}

/*
 * UCX: the server does not see the reads, so a lock is not kept alive by a
 * stream as on TCP; a fetch longer than half the granted TTL renews it.
 */
static void renew_ucx(struct fetch *f, uint64_t now)
{
	struct conn *c = f->c;
	struct pw_renew m = { .lock_id = f->lock_id, .ttl_ms = f->lock_ttl_ms };

	if (!c || c->state != CS_READY || f->renew_seq || now < f->renew_at_ns)
		return;
	f->renew_seq = ++c->seq;
	if (conn_send(c, PW_RENEW, f->renew_seq, &m, sizeof(m), NULL, 0) == 0)
		conn_flush(c);
}

static int on_renew_reply(struct fetch *f, struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct pw_renew_reply rep;
	char why[128];

	if (pw_parse_renew_reply(p, h->len, &rep, why, sizeof(why)) < 0 ||
	    rep.lock_id != f->lock_id)
		return -EPROTO;
	f->renew_seq = 0;
	if (rep.status < 0) {
		/* Gone already: the verify will say so; nothing read counts without it. */
		kp_log_peer(c->kp, KVSPEER_LOG_WARNING, "peer %s: lock renewal refused (%s)",
			    c->addr_str, strerror(-rep.status));
		return 0;
	}
	f->lock_ttl_ms = rep.ttl_ms;
	f->renew_at_ns = peer_now_ns() + rep.ttl_ms / 2 * NSEC_PER_MSEC;
	return 0;
}

int fetch_dispatch(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct fetch *f = c->f;

	if (h->type == PW_ERROR) {
		struct pw_error e;
		char why[128];

		if (pw_parse_error(p, h->len, &e, why, sizeof(why)) < 0)
			return -EPROTO;
		kp_log_peer(c->kp, KVSPEER_LOG_WARNING, "peer %s refused (%s): %s", c->addr_str,
			    strerror(-e.status), e.text);
		if (f)
			set_err(f, e.status == -EACCES ? -EACCES : -EREMOTEIO);
		/* Whatever it was, this connection is done; closing releases any lock. */
		return -EREMOTEIO;
	}
	switch (c->state) {
	case CS_HELLO:
		if (h->type != PW_HELLO_REPLY)
			break;
		return on_hello_reply(c, h, p);
	case CS_AUTH:
		if (h->type != PW_AUTH_OK)
			break;
		return on_auth_ok(c, h, p);
	case CS_READY:
		if (!f) {
			if (c->drain_seq && h->type == PW_RELEASE_REPLY && h->seq == c->drain_seq) {
				conn_idle(c);
				return 0;
			}
			break;
		}
		if (f->renew_seq && h->type == PW_RENEW_REPLY && h->seq == f->renew_seq &&
		    (f->state == FS_DATA || f->state == FS_VERIFY))
			return on_renew_reply(f, c, h, p);
		switch (f->state) {
		case FS_QUERY:
			if (h->seq != f->seq)
				break;
			if (f->kind == FK_HEALTH && h->type == PW_HEALTH_REPLY)
				return on_health_reply(f, c, h, p);
			if (f->kind == FK_FETCH && h->type == PW_QUERY_REPLY)
				return on_query_reply(f, c, h, p);
			break;
		case FS_DATA:
			if (h->type == PW_DATA)
				return on_data(f, c, h, p);
			if (h->type == PW_SHARD_END)
				return on_shard_end(f, c, h, p);
			if (h->type == PW_FETCH_END)
				return on_fetch_end(f, c, h, p);
			break;
		case FS_VERIFY:
			if (h->type == PW_RELEASE_REPLY && h->seq == f->seq)
				return on_verify(f, c, h, p);
			break;
		default:
			break;
		}
		break;
	default:
		break;
	}
	kp_log_peer(c->kp, KVSPEER_LOG_WARNING, "peer %s: message type %u unexpected", c->addr_str,
		    h->type);
	if (f)
		set_err(f, -EPROTO);
	return -EPROTO;
}

void fetch_conn_lost(struct conn *c, int err)
{
	struct fetch *f = c->f;
	struct kvspeer *kp = c->kp;

	detach(f);
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
	finish(f, err);
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
				renew_ucx(f, now);
			continue;
		}
		set_err(f, -ETIMEDOUT);
		if (f->c)
			conn_close(f->c, -ETIMEDOUT); /* finishes f, through fetch_conn_lost() */
		else
			finish(f, -ETIMEDOUT);
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

		set_err(f, err);
		if (f->c)
			conn_close(f->c, err);
		else
			finish(f, err);
	}
}

/* ---- Snapshots ------------------------------------------------------------------------ */

int peers_snapshot(struct kvspeer *kp, struct kvspeer_peer_info *ret, unsigned max)
{
	uint64_t now = peer_now_ns();
	struct cds_list_head *pos;
	unsigned n = 0;

	for (pos = kp->peers.next; pos != &kp->peers; pos = pos->next) {
		struct peer_ent *pe = cds_list_entry(pos, struct peer_ent, link);

		if (n < max) {
			struct kvspeer_peer_info *i = &ret[n];

			memset(i, 0, sizeof(*i));
			snprintf(i->addr, sizeof(i->addr), "%s", pe->addr);
			memcpy(i->node, pe->node, sizeof(i->node));
			i->role = KVSPEER_PEER_SERVER;
			if (pe->busy)
				i->state = KVSPEER_PEER_BUSY;
			else if (pe->conns && pe->ever_ok)
				i->state = KVSPEER_PEER_IDLE;
			else if (pe->conns)
				i->state = KVSPEER_PEER_CONNECTING;
			else if (pe->last_error)
				i->state = KVSPEER_PEER_FAILED;
			else
				i->state = KVSPEER_PEER_CLOSED;
			i->conns = pe->conns;
			i->locks = pe->locks;
			i->epoch = pe->epoch;
			i->blocks = pe->blocks;
			i->bytes = pe->bytes;
			i->failures = pe->failures;
			i->last_error = pe->last_error;
			i->idle_ms = (now - pe->last_ns) / NSEC_PER_MSEC;
		}
		n++;
	}
	for (pos = kp->conns.next; pos != &kp->conns; pos = pos->next) {
		struct conn *c = cds_list_entry(pos, struct conn, link);
		uint64_t last;

		if (c->side != SIDE_SERVE)
			continue;
		if (n < max) {
			struct kvspeer_peer_info *i = &ret[n];

			memset(i, 0, sizeof(*i));
			snprintf(i->addr, sizeof(i->addr), "%s", c->addr_str);
			if (c->state == CS_READY)
				memcpy(i->node, c->node, sizeof(i->node));
			i->role = KVSPEER_PEER_CLIENT;
			i->state = c->state < CS_READY		? KVSPEER_PEER_CONNECTING
				   : (c->stream || c->nr_locks) ? KVSPEER_PEER_BUSY
								: KVSPEER_PEER_IDLE;
			i->conns = 1;
			i->locks = c->nr_locks;
			i->epoch = c->epoch;
			i->blocks = c->blocks_served;
			i->bytes = c->bytes_served;
			i->failures = c->errors;
			last = c->last_rx_ns > c->last_tx_ns ? c->last_rx_ns : c->last_tx_ns;
			i->idle_ms = (now - last) / NSEC_PER_MSEC;
		}
		n++;
	}
	return (int)n;
}
