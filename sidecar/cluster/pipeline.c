/* SPDX-License-Identifier: MIT */
/*
 * The registration pipeline: the consumer side of the queue (queue.h).
 * Changes taken from it, and the backfill's entries before them, are
 * netted per key into a batch of at most BATCH_MAX (a seeded open-address
 * table: an engine cannot aim its keys at one slot), and a batch goes as
 * one REGISTER of the lease's epoch; up to BATCHES_IN_FLIGHT are in
 * flight.  No batch spans a flush mark.  Batches resolve (ledger.h:
 * delivered, or dropped) in queue-position order, the order the one
 * connection answers in; when not leased, what the queue holds is dropped
 * after the batches in flight, in order too.
 *
 * Control thread only: batch_done() runs inside hiredis (command.c) and
 * only records; the backfill callback (registry_ops.backfill) is called
 * from pipeline_fill(), in pump_run().
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <hiredis/hiredis.h>

#include "cluster/command.h"
#include "cluster/ledger.h"
#include "cluster/nodelease.h"
#include "cluster/pipeline.h"
#include "cluster/queue.h"
#include "cluster/registry-internal.h"
#include "cluster/reply.h"

/* Positions [start, end) resolved (ledger.h); delivered ones counted. */
static void resolve(struct registry *r, uint64_t start, uint64_t end, int ok,
		    const struct ledger_run *runs, uint32_t nruns)
{
	uint64_t n = ledger_resolve(&r->led, start, end, ok, runs, nruns);

	if (ok)
		ST_ADD(r, delivered, n);
}

static uint64_t net_hash(const struct registry *r, const uint8_t *ns, const uint8_t *key)
{
	uint64_t a, b, c;

	memcpy(&a, key, 8);
	memcpy(&b, key + 8, 8);
	memcpy(&c, ns, 8);
	/* Seeded: an engine cannot aim its keys at one slot (NET_PROBES bounds the rest). */
	a = (a ^ r->net_seed) * 0x9e3779b97f4a7c15ull;
	a ^= (b + (r->net_seed >> 7)) * 0xc2b2ae3d27d4eb4full;
	a ^= c * 0x165667b19e3779f9ull;
	return a ^ (a >> 29);
}

/* Add a change to the batch, netting it with an earlier one of the same key.  0: full. */
static int net_add(struct registry *r, uint8_t op, const uint8_t *ns, const uint8_t *key)
{
	uint64_t h = net_hash(r, ns, key);

	if (r->nops == BATCH_MAX)
		return 0;
	for (uint32_t p = 0; p < NET_PROBES; p++) {
		uint32_t *slot = &r->net[(h + p) & (NET_SLOTS - 1)];
		struct net_op *o;

		if (!*slot) {
			o = &r->ops_buf[r->nops++];
			o->op = op;
			memcpy(o->ns, ns, REG_DIGEST_SIZE);
			memcpy(o->key, key, REG_KEY_SIZE);
			*slot = r->nops;
			return 1;
		}
		o = &r->ops_buf[*slot - 1];
		if (!memcmp(o->key, key, REG_KEY_SIZE) && !memcmp(o->ns, ns, REG_DIGEST_SIZE)) {
			o->op = op; /* the last change of a key is its net effect */
			return 1;
		}
	}
	return 0;
}

static void batch_reset(struct registry *r)
{
	if (r->nops)
		memset(r->net, 0, NET_SLOTS * sizeof(*r->net));
	r->nops = 0;
	ledger_clear_runs(&r->led);
	r->pend_backfill = 0;
	/* The next batch starts at the change carried over, if one was (pipeline_fill()). */
	r->pend_start = r->pend_end = r->has_carry ? r->carry.pos : r->q.head;
}

static bool batch_empty(const struct registry *r)
{
	return r->nops == 0 && r->pend_end == r->pend_start;
}

static void batch_done(struct registry *r, struct req *q, const redisReply *reply)
{
	const struct batch *b = &q->batch;
	int rc = reply ? reply_register(reply, b->nkeys) : -ENOTCONN;
	char e[128];

	r->batches_inflight--;
	resolve(r, b->start, b->end, rc == 0, b->runs, b->nruns);
	free(b->runs);
	if (rc == 0) {
		ST_ADD(r, backfilled, b->nbackfill);
		if (r->writes_failing) {
			r->writes_failing = 0;
			rlog(r, LOG_NOTICE, 0, "registry: registrations are delivered again");
		}
		return;
	}
	ST_ADD(r, dropped_failed, b->end - b->start);
	if (!reply)
		return; /* the connection went: logged there */
	ST_ADD(r, errors, 1);
	reply_error_text(reply, e, sizeof(e));
	if (rc == -ESTALE) {
		nodelease_lost(r, "fenced by Redis (a newer epoch holds the lease)");
	} else if (rc == -EPROTO) {
		want_close(r, "malformed registration reply");
	} else if (!r->writes_failing) {
		r->writes_failing = 1;
		rlog(r, LOG_ERR, EIO, "registry: registrations fail and are dropped: %s", e);
	}
}

/*
 * REGISTER's arguments (scripts.h): KEYS the lease; ARGV our words, the
 * groups (digest, count: inserts first, then removes, each kind grouped
 * by namespace), then the keys in group order.  A batch has one namespace
 * or a few, so grouping is a pass per namespace over the batch.
 *
 * -errno: not sent, and the batch stays as it was, to go next turn (no
 * memory) or to be dropped by pipeline_drain() after the batches in
 * flight (hiredis refused: the connection goes).  Either way changes
 * resolve in position order, which the flushes' counts rely on (ledger.h).
 */
static int batch_send(struct registry *r)
{
	uint32_t n = r->nops, k = 3, g = 0, ngroups[2] = { 0, 0 }, nm = 0;
	const uint8_t **gdigest = r->gdigest, **member = r->member;
	char ttl_s[24], ep_s[24], ngi_s[16], ngr_s[16];
	struct batch b;
	struct req *q;
	int rc;

	if (batch_empty(r))
		return 0;
	if (!n) {
		/* Every change netted away?  Cannot happen: a key's last change stays. */
		resolve(r, r->pend_start, r->pend_end, 1, r->led.runs, r->led.nruns);
		batch_reset(r);
		return 0;
	}
	q = cmd_new(batch_done);
	if (!q)
		return -ENOMEM;
	b = (struct batch){ r->pend_start, r->pend_end, n, r->pend_backfill };
	b.runs = ledger_take_runs(&r->led, &b.nruns);
	if (r->led.nruns && !b.runs) {
		free(q);
		return -ENOMEM;
	}
	q->batch = b;
	for (uint32_t i = 0; i < n; i++)
		r->ops_buf[i].sent = 0;
	/* Inserts first, then removes: the script takes the groups in that order. */
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t first = 0; first < n; first++) {
			const struct net_op *f = &r->ops_buf[first];
			uint32_t cnt = 0;

			if (f->sent || (f->op == RQ_INSERT) != (pass == 0))
				continue;
			/* A group: every change of this kind in @f's namespace. */
			for (uint32_t i = first; i < n; i++) {
				struct net_op *o = &r->ops_buf[i];

				if (o->sent || o->op != f->op ||
				    memcmp(o->ns, f->ns, REG_DIGEST_SIZE))
					continue;
				o->sent = 1;
				member[nm++] = o->key;
				cnt++;
			}
			gdigest[g] = f->ns;
			snprintf(r->gcount[g], sizeof(r->gcount[g]), "%u", cnt);
			g++;
			ngroups[pass]++;
		}
	}
	snprintf(ttl_s, sizeof(ttl_s), "%" PRIu64, r->entry_ttl_ms);
	snprintf(ep_s, sizeof(ep_s), "%" PRIu64, r->epoch);
	snprintf(ngi_s, sizeof(ngi_s), "%u", ngroups[0]);
	snprintf(ngr_s, sizeof(ngr_s), "%u", ngroups[1]);
	cmd_arg_str(r, &k, r->lease_key);
	cmd_arg_str(r, &k, r->token);
	cmd_arg_str(r, &k, r->node);
	cmd_arg_str(r, &k, ep_s);
	cmd_arg_str(r, &k, ttl_s);
	cmd_arg_str(r, &k, r->sprefix);
	cmd_arg_str(r, &k, r->sets_key);
	cmd_arg_str(r, &k, ngi_s);
	cmd_arg_str(r, &k, ngr_s);
	for (uint32_t i = 0; i < g; i++) {
		cmd_arg(r, &k, gdigest[i], REG_DIGEST_SIZE);
		cmd_arg_str(r, &k, r->gcount[i]);
	}
	for (uint32_t i = 0; i < nm; i++)
		cmd_arg(r, &k, member[i], REG_KEY_SIZE);
	rc = cmd_send_script(r, q, S_REGISTER, 1, k - 4, r->argv, r->argvlen);
	if (rc < 0) {
		free(b.runs); /* q is freed; the connection goes (pipeline_drain() drops the batch) */
		return rc;
	}
	r->batches_inflight++;
	batch_reset(r);
	return 0;
}

/* A mark taken from the queue: the batch before it goes first (no batch spans a mark). */
static void mark_popped(struct registry *r, const struct rq_item *it)
{
	ledger_mark_popped(&r->led, it->tag, it->pos);
	r->pend_start = r->pend_end = it->pos + 1;
}

/* The changes taken so far but not batched, [pend_start, pend_end): dropped. */
static void drop_pending(struct registry *r)
{
	if (r->pend_end > r->pend_start) {
		resolve(r, r->pend_start, r->pend_end, 0, r->led.runs, r->led.nruns);
		ST_ADD(r, dropped_offline, r->pend_end - r->pend_start);
	}
	batch_reset(r);
}

/* The next change: the one the last batch had no room for, else the queue's. */
static bool next_change(struct registry *r, struct rq_item *ret)
{
	if (r->has_carry) {
		*ret = r->carry;
		r->has_carry = 0;
		return true;
	}
	return rq_pop(&r->q, ret);
}

static void carry(struct registry *r, const struct rq_item *it)
{
	r->carry = *it;
	r->has_carry = 1;
}

void pipeline_drain(struct registry *r)
{
	struct rq_item it;

	/* Batches still in flight resolve first: resolution stays in position order. */
	if (r->batches_inflight)
		return;
	if (!batch_empty(r))
		drop_pending(r);
	while (next_change(r, &it)) {
		if (it.op == RQ_MARK) {
			drop_pending(r);
			mark_popped(r, &it);
			continue;
		}
		/* Runs full (one per change of alternating tallies): drop what they hold first. */
		if (!ledger_run_add(&r->led, it.tag)) {
			drop_pending(r);
			r->pend_start = it.pos;
			ledger_run_add(&r->led, it.tag);
		}
		r->pend_end = it.pos + 1;
	}
	drop_pending(r);
}

/*
 * Backfill entries into the batch: those read before and not taken yet,
 * then (the batch less than half full) a new read.  false: the batch is
 * full, the rest wait in bf_buf for the next.
 */
static bool backfill_take(struct registry *r)
{
	if (r->bf_next == r->bf_got && r->backfilling && r->nops < BATCH_MAX / 2) {
		uint32_t room = BATCH_MAX - r->nops, got;

		got = r->ops.backfill(r->ops.arg, &r->bf_cursor, r->bf_buf, room);
		r->bf_next = 0;
		r->bf_got = got > room ? room : got;
		if (!got) {
			r->backfilling = 0;
			ST_SET(r, backfilling, 0);
		}
	}
	for (; r->bf_next < r->bf_got; r->bf_next++) {
		const struct registry_entry *e = &r->bf_buf[r->bf_next];

		if (!net_add(r, RQ_INSERT, e->ns, e->key))
			return false; /* a probe too long, or full */
		r->pend_backfill++;
	}
	return true;
}

void pipeline_fill(struct registry *r)
{
	struct rq_item it;

	while (r->state == REG_READY && r->ac && !r->want_close &&
	       r->batches_inflight < BATCHES_IN_FLIGHT) {
		/*
		 * Backfill entries first, then the queue: a change dequeued
		 * after a backfill read goes after it (registry.h, backfill).
		 * A batch that could not be sent (batch_send()) is still
		 * here; it only grows.
		 */
		bool room = backfill_take(r);

		while (room && next_change(r, &it)) {
			if (it.op == RQ_MARK) {
				/* No batch spans a mark: the one before it goes first. */
				if (!batch_empty(r)) {
					carry(r, &it);
					break;
				}
				mark_popped(r, &it);
				continue;
			}
			/*
			 * Room in the runs first (no side effect), then in the
			 * netting table; a change that finds none starts the
			 * next batch.  Netting lets a batch cover more queue
			 * positions than BATCH_MAX, so the runs can fill first.
			 */
			if (!ledger_run_fits(&r->led, it.tag) ||
			    !net_add(r, it.op, it.ns, it.key)) {
				carry(r, &it);
				break;
			}
			ledger_run_add(&r->led, it.tag);
			r->pend_end = it.pos + 1;
		}
		if (batch_empty(r) || batch_send(r) < 0)
			break;
	}
}
