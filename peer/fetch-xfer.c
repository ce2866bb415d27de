/* SPDX-License-Identifier: MIT */
/*
 * A fetch's transfer, once its connection is ready: the QUERY (or HEALTH)
 * and its reply, then over TCP the stream of DATA and SHARD_END checked
 * shard by shard into the host's buffers, over UCX the gets and the
 * verifying RELEASE, and the renewals a long UCX read needs.  The checks
 * here keep a hostile or broken server from writing a byte the host did
 * not hand out, or from having a wrong byte counted as fetched.  Service
 * thread only (UCX completions too: pucx_progress() runs there).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peer/conn.h"
#include "peer/fetch-end.h"
#include "peer/fetch-pool.h"
#include "peer/fetch-xfer.h"
#include "peer/kp.h"
#include "peer/ucx.h"

int xfer_send_request(struct fetch *f, struct conn *c)
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

static void gets_put(void *arg, uint32_t block, int status);

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
				     c->regions[e->region].rkey, gets_put, f, b);
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

/* A get finished (pucx_get_done_fn, or a count held while posting). */
static void gets_put(void *arg, uint32_t block, int status)
{
	struct fetch *f = arg;

	f->gets_out--;
	if (status < 0) {
		fetch_set_err(f, -EIO);
		if (block < f->get_failed_at)
			f->get_failed_at = block;
	}
	if (f->gets_out || f->state != FS_DATA)
		return;
	/* All landed (or failed): the generations decide what counts. */
	if (f->c && f->c->state == CS_READY)
		verify_ucx(f, f->c);
}

/* UCX: does every entry lie inside a region the peer gave us a key for? */
static bool entries_in_regions(struct fetch *f, struct conn *c)
{
	for (uint32_t i = 0; i < f->nr_locked * f->nr_shards; i++) {
		const struct pw_entry *e = &f->ents[i];

		if (e->region >= c->nr_regions || e->addr < c->regions[e->region].base ||
		    e->addr - c->regions[e->region].base > c->regions[e->region].len ||
		    e->len > c->regions[e->region].len - (e->addr - c->regions[e->region].base)) {
			kp_log_peer(c->kp, KVSPEER_LOG_WARNING,
				    "peer %s: QUERY_REPLY entry %u outside its regions",
				    c->addr_str, i);
			return false;
		}
	}
	return true;
}

/* Buffers from the host, block by block; a NULL ends the prefix (pool full): f->nr_alloc. */
static void alloc_dst(struct fetch *f)
{
	for (uint32_t b = 0; b < f->nr_locked; b++) {
		for (uint32_t s = 0; s < f->nr_shards; s++) {
			size_t i = (size_t)b * f->nr_shards + s;

			f->dst[i] = f->alloc(f->arg, b, s, f->ents[i].len);
			if (!f->dst[i])
				return;
		}
		f->nr_alloc = b + 1;
	}
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
		fetch_set_err(f, -EPROTO);
		return -EPROTO;
	}
	if (rep.status < 0) {
		fetch_release(f, c, -EREMOTEIO);
		return 0;
	}
	if (!rep.nr_blocks) {
		fetch_finish(f, 0);
		pool_idle(c);
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
		fetch_release(f, c, -ENOMEM);
		return 0;
	}
	for (uint32_t i = 0; i < n; i++)
		pw_entry_get(ents, i, &f->ents[i]);
	if (kp->ucx) {
		/* A key or range we do not hold for this peer is its error, not a read. */
		if (rep.regions_version != c->regions_version) {
			fetch_release(f, c, -ESTALE);
			if (c->state != CS_DEAD)
				conn_close(c, -ESTALE); /* the next fetch gets fresh keys */
			return 0;
		}
		if (!entries_in_regions(f, c)) {
			fetch_set_err(f, -EPROTO);
			return -EPROTO;
		}
	}
	f->lock_held = true;
	c->pe->locks++;
	alloc_dst(f);
	if (f->nr_alloc < f->nr_locked)
		fetch_set_err(f, -ENOSPC);
	if (!f->nr_alloc) {
		fetch_release(f, c, -ENOSPC);
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
		fetch_set_err(f, -EPROTO);
		return -EPROTO;
	}
	c->raw_dst = f->dst[i];
	c->raw_left = d.len;
	return 0;
}

static int on_shard_end(struct fetch *f, struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct pw_shard_end e;
	char why[128];
	size_t i = (size_t)f->cur_block * f->nr_shards + f->cur_shard;

	if (pw_parse_shard_end(p, h->len, &e, why, sizeof(why)) < 0 || e.lock_id != f->lock_id ||
	    e.block != f->cur_block || e.shard != f->cur_shard || f->cur_block >= f->nr_alloc) {
		fetch_set_err(f, -EPROTO);
		return -EPROTO;
	}
	if (e.generation != f->ents[i].generation) {
		kp_log_peer(
			c->kp, KVSPEER_LOG_WARNING,
			"peer %s: block %u shard %u changed while it was sent (generation %llu, locked %llu)",
			c->addr_str, e.block, e.shard, (unsigned long long)e.generation,
			(unsigned long long)f->ents[i].generation);
		/* The stream is not worth reading on: closing releases the lock. */
		fetch_set_err(f, -ESTALE);
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
		fetch_set_err(f, -EPROTO);
		return -EPROTO;
	}
	fetch_release(f, c, e.status == -ESTALE ? -ESTALE : e.status ? -EREMOTEIO : 0);
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
		fetch_set_err(f, -EPROTO);
		return -EPROTO;
	}
	f->lock_id = 0; /* released by this RELEASE */
	if (rep.status < 0) {
		fetch_finish(f, -EREMOTEIO);
		pool_idle(c);
		return 0;
	}
	good = f->nr_alloc < f->get_failed_at ? f->nr_alloc : f->get_failed_at;
	for (uint32_t b = 0; b < good; b++) {
		for (uint32_t s = 0; s < f->nr_shards; s++) {
			size_t i = (size_t)b * f->nr_shards + s;
			uint64_t g;

			memcpy(&g, gens + i * sizeof(g), sizeof(g));
			if (g != f->ents[i].generation) {
				fetch_set_err(f, -ESTALE);
				good = b;
				break;
			}
		}
	}
	f->verified = good;
	if (f->landed && good)
		f->landed(f->arg, good);
	fetch_finish(f, 0);
	pool_idle(c);
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
	fetch_finish(f, rep.status);
	pool_idle(c);
	return 0;
}

/*
 * UCX: the server does not see the reads, so a lock is not kept alive by a
 * stream as on TCP; a fetch longer than half the granted TTL renews it.
 */
void xfer_renew(struct fetch *f, uint64_t now)
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

/* CS_READY: the transfer's replies, in the order its state expects them.  1: not one of them. */
int xfer_handle(struct conn *c, const struct pw_hdr *h, const uint8_t *p)
{
	struct fetch *f = c->f;

	if (!f) {
		if (c->drain_seq && h->type == PW_RELEASE_REPLY && h->seq == c->drain_seq) {
			pool_idle(c);
			return 0;
		}
		return 1;
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
	return 1;
}
