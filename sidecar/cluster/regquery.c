/* SPDX-License-Identifier: MIT */
/*
 * The cluster QUERY: a head (the QUERY script names the candidates, the
 * other live nodes whose run set holds the first key), then chunks of
 * QUERY_CHUNK keys as plain SMISMEMBERs on each candidate's run set,
 * QUERY_WINDOW chunks in flight; the answer is the longest runs.  Queries
 * go while the connection is up and the node is READY or in CONFLICT (a
 * node that cannot register can still ask).
 *
 * Control thread only: registry_query() queues and kicks; query_done()
 * runs inside hiredis (command.c) and only records; query_pump(), from
 * pump_run(), sends and calls the user's callbacks.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster/command.h"
#include "cluster/regquery.h"
#include "cluster/registry-internal.h"
#include "cluster/reply.h"

static void query_finish(struct registry *r, struct query *qu, int status)
{
	struct registry_query_result res = { 0 };
	struct qcand *c = qu->cand;

	if (qu->done)
		return;
	qu->done = 1;
	res.status = status;
	res.nr_keys = qu->n;
	res.round_trips = qu->head_sent + qu->next_chunk;
	if (!status || status == -ETIMEDOUT) {
		/* Best first: a few holders, selection by hand. */
		for (uint32_t k = 0; k < REG_MAX_HOLDERS; k++) {
			int best = -1;

			for (uint32_t i = 0; i < qu->ncand; i++)
				if (c[i].run && (best < 0 || c[i].run > c[best].run))
					best = (int)i;
			if (best < 0)
				break;
			struct registry_holder *h = &res.holders[res.nr_holders++];

			snprintf(h->node, sizeof(h->node), "%s", c[best].n.node);
			snprintf(h->addr, sizeof(h->addr), "%s", c[best].n.addr);
			h->epoch = c[best].n.epoch;
			h->blocks = c[best].run;
			c[best].run = 0; /* taken */
		}
		res.best = res.nr_holders ? res.holders[0].blocks : 0;
	}
	ST_ADD(r, queries, 1);
	if (res.best)
		ST_ADD(r, query_hits, 1);
	qu->cb(qu->arg, &res);
}

static void query_free(struct query *qu)
{
	free(qu->keys);
	free(qu->cand);
	free(qu);
}

/*
 * A query is a head, then chunks.  The head (the QUERY script) names the
 * candidates: the other live nodes whose run set holds the first key.
 * Then each chunk of QUERY_CHUNK keys goes, per candidate still holding
 * every key so far, as one plain SMISMEMBER on its run set: Redis looks
 * the keys up natively, with no script call per key (a script paid about
 * 0.8 us per key converting arguments).  One connection answers in send
 * order, so a candidate's chunks come back in order, and a chunk's last
 * request answers after all of its others.
 */
static void query_fail(struct registry *r, struct query *qu, const redisReply *reply, int rc)
{
	char e[128];

	if (!reply) {
		qu->stop = 1;
		qu->status = qu->answered ? 0 : -ENOTCONN;
		return;
	}
	reply_error_text(reply, e, sizeof(e));
	ST_ADD(r, errors, 1);
	if (rc == -EPROTO)
		want_close(r, "malformed query reply");
	qu->stop = 1;
	qu->status = qu->answered ? 0 : -EPROTO;
}

static void query_head_done(struct registry *r, struct query *qu, const redisReply *reply)
{
	uint32_t nn = 0;
	int rc;

	rc = reply ? reply_query(reply, 1, r->qtmp, REPLY_MAX_NODES, &nn) : -ENOTCONN;
	if (rc < 0) {
		query_fail(r, qu, reply, rc);
		return;
	}
	qu->cand = calloc(nn ? nn : 1, sizeof(*qu->cand));
	if (!qu->cand) {
		qu->stop = 1;
		qu->status = -ENOMEM;
		return;
	}
	for (uint32_t i = 0; i < nn; i++) {
		struct qcand *c = &qu->cand[qu->ncand];
		int l;

		if (!strcmp(r->qtmp[i].node, r->node))
			continue; /* ourselves: the daemon asked for what it lacks */
		c->n = r->qtmp[i];
		l = snprintf(c->set, sizeof(c->set), "%s%s:%" PRIu64 ":", r->sprefix, c->n.node,
			     c->n.epoch);
		if (l < 0 || (size_t)l + REG_DIGEST_SIZE > sizeof(c->set))
			continue; /* cannot be: names and prefixes are bounded */
		memcpy(c->set + l, qu->ns, REG_DIGEST_SIZE);
		c->set_len = (size_t)l + REG_DIGEST_SIZE;
		c->full = 1;
		qu->ncand++;
	}
	qu->head_done = 1;
	/* Nobody else holds the first key: the run is 0, everything is answered. */
	if (!qu->ncand) {
		qu->answered = qu->nchunks;
		qu->stop = 1;
	}
}

static void query_chunk_done(struct registry *r, struct query *qu, uint32_t chunk, int cand,
			     int last, const redisReply *reply)
{
	uint32_t len = chunk + 1 < qu->nchunks ? QUERY_CHUNK : qu->n - chunk * QUERY_CHUNK;
	uint32_t full = 0, lead = 0;
	int rc;

	qu->inflight--;
	if (qu->done)
		return;
	if (cand < 0) {
		query_head_done(r, qu, reply);
		return;
	}
	rc = reply ? reply_members(reply, len, &lead) : -ENOTCONN;
	if (rc < 0) {
		query_fail(r, qu, reply, rc);
		return;
	}
	/* A candidate that lost its run earlier ignores what was already asked for it. */
	if (qu->cand[cand].full && qu->cand[cand].run == chunk * QUERY_CHUNK) {
		qu->cand[cand].run += lead;
		qu->cand[cand].full = lead == len;
	}
	if (!last)
		return;
	qu->answered = chunk + 1;
	for (uint32_t i = 0; i < qu->ncand; i++)
		full += qu->cand[i].full;
	/* No node kept a full run: later chunks cannot extend anything. */
	if (!full || qu->answered == qu->nchunks)
		qu->stop = 1;
}

static void query_done(struct registry *r, struct req *q, const redisReply *reply)
{
	query_chunk_done(r, q->qc.q, q->qc.chunk, q->qc.cand, q->qc.last, reply);
}

static bool query_can_send(const struct registry *r, const struct query *qu)
{
	return !qu->stop && !qu->done && r->ac && !r->want_close &&
	       (r->state == REG_READY || r->state == REG_CONFLICT);
}

static void query_send_head(struct registry *r, struct query *qu)
{
	struct req *q = cmd_new(query_done);
	uint32_t k = 3;

	if (!q) {
		qu->stop = 1;
		return;
	}
	q->qc.q = qu;
	q->qc.cand = -1;
	cmd_arg_str(r, &k, r->nodes_key);
	cmd_arg_str(r, &k, r->lease_prefix);
	cmd_arg_str(r, &k, r->sprefix);
	cmd_arg(r, &k, qu->ns, REG_DIGEST_SIZE);
	cmd_arg_str(r, &k, r->node);
	cmd_arg(r, &k, qu->keys[0], REG_KEY_SIZE);
	qu->head_sent = 1;
	if (cmd_send_script(r, q, S_QUERY, 1, 5, r->argv, r->argvlen) < 0) {
		qu->stop = 1;
		return;
	}
	qu->inflight++;
}

/* Chunk @c to every candidate still holding all keys before it; false: stop. */
static bool query_send_chunk(struct registry *r, struct query *qu, uint32_t c)
{
	uint32_t first = c * QUERY_CHUNK, len = c + 1 < qu->nchunks ? QUERY_CHUNK : qu->n - first;
	int last = -1;

	for (uint32_t i = 0; i < qu->ncand; i++)
		if (qu->cand[i].full)
			last = (int)i;
	if (last < 0)
		return false;
	for (uint32_t i = 0; i <= (uint32_t)last; i++) {
		struct qcand *cd = &qu->cand[i];
		struct req *q;
		uint32_t k = 0;

		if (!cd->full)
			continue;
		q = cmd_new(query_done);
		if (!q)
			return false;
		q->qc.q = qu;
		q->qc.chunk = c;
		q->qc.cand = (int)i;
		q->qc.last = i == (uint32_t)last;
		cmd_arg(r, &k, "SMISMEMBER", 10);
		cmd_arg(r, &k, cd->set, cd->set_len);
		for (uint32_t j = 0; j < len; j++)
			cmd_arg(r, &k, qu->keys[first + j], REG_KEY_SIZE);
		/* A chunk whose last request cannot go: nothing after it either. */
		if (cmd_send(r, q, (int)k, r->argv, r->argvlen) < 0)
			return false;
		qu->inflight++;
	}
	return true;
}

static void query_send(struct registry *r, struct query *qu)
{
	if (!qu->head_sent && query_can_send(r, qu))
		query_send_head(r, qu);
	while (qu->head_done && query_can_send(r, qu) && qu->next_chunk < qu->nchunks &&
	       qu->next_chunk - qu->answered < QUERY_WINDOW) {
		if (!query_send_chunk(r, qu, qu->next_chunk)) {
			qu->stop = 1;
			break;
		}
		qu->next_chunk++;
	}
}

void query_pump(struct registry *r, uint64_t now, int shutting)
{
	struct query **pp = &r->queries;

	while (*pp) {
		struct query *qu = *pp;
		int connected = r->ac && (r->state == REG_READY || r->state == REG_CONFLICT);

		if (!qu->done) {
			if (shutting)
				query_finish(r, qu, -ESHUTDOWN);
			else if (qu->stop || (qu->answered == qu->nchunks))
				query_finish(r, qu,
					     qu->answered ? 0
							  : (qu->status ? qu->status : -ENOTCONN));
			else if (now >= qu->deadline)
				query_finish(r, qu, qu->answered ? 0 : -ETIMEDOUT);
			else if (!connected && !qu->inflight)
				query_finish(r, qu, qu->answered ? 0 : -ENOTCONN);
			else
				query_send(r, qu);
		}
		if (qu->done && !qu->inflight) {
			*pp = qu->next;
			query_free(qu);
		} else {
			pp = &qu->next;
		}
	}
}

void query_free_all(struct registry *r)
{
	while (r->queries) {
		struct query *qu = r->queries;

		r->queries = qu->next;
		query_free(qu);
	}
}

int registry_query(struct registry *r, const uint8_t ns[REG_DIGEST_SIZE],
		   const uint8_t (*keys)[REG_KEY_SIZE], uint32_t n, uint32_t timeout_ms,
		   registry_query_cb *cb, void *arg)
{
	struct query *qu, **pp = &r->queries;

	if (!n || n > QUERY_MAX_KEYS || !cb)
		return -EINVAL;
	qu = calloc(1, sizeof(*qu));
	if (!qu)
		return -ENOMEM;
	qu->keys = malloc((size_t)n * REG_KEY_SIZE);
	if (!qu->keys) {
		free(qu);
		return -ENOMEM;
	}
	memcpy(qu->keys, keys, (size_t)n * REG_KEY_SIZE);
	memcpy(qu->ns, ns, REG_DIGEST_SIZE);
	qu->r = r;
	qu->n = n;
	qu->nchunks = (n + QUERY_CHUNK - 1) / QUERY_CHUNK;
	qu->deadline = now_ns() + (uint64_t)(timeout_ms ? timeout_ms : r->query_ms) * MS;
	qu->cb = cb;
	qu->arg = arg;
	while (*pp)
		pp = &(*pp)->next;
	*pp = qu;
	/* Sent (or answered "none") from the dispatch the kick causes. */
	kick(r);
	return 0;
}
