/* SPDX-License-Identifier: MIT */
/*
 * The registry's commands to Redis: each is a struct req, linked in
 * flight oldest first (pump_run() times the oldest out), and its reply goes
 * to the request's done function.  Control thread only: on_reply() runs
 * inside hiredis (redisAsyncHandleRead, or redisAsyncFree with a NULL
 * reply), so a done function only records what came back; pump_run() acts on
 * it after hiredis has returned (registry-internal.h, Re-entry).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "cluster/command.h"
#include "cluster/registry-internal.h"
#include "cluster/reply.h"

static void req_link(struct registry *r, struct req *q)
{
	q->prev = r->inflight_tail;
	q->next = NULL;
	if (r->inflight_tail)
		r->inflight_tail->next = q;
	else
		r->inflight_head = q;
	r->inflight_tail = q;
}

static void req_unlink(struct registry *r, struct req *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else if (r->inflight_head == q)
		r->inflight_head = q->next;
	if (q->next)
		q->next->prev = q->prev;
	else if (r->inflight_tail == q)
		r->inflight_tail = q->prev;
	q->prev = q->next = NULL;
}

/*
 * hiredis' callback for every command: a NULL reply (the context is
 * being freed) or one of an older connection (r->gen moved on) reaches
 * the done function as NULL.
 */
static void on_reply(redisAsyncContext *ac, void *reply_, void *privdata)
{
	struct req *q = privdata;
	struct registry *r = q->r;
	const redisReply *reply = reply_;
	int stale = q->gen != r->gen || !reply;
	uint64_t t = now_ns();

	(void)ac;
	req_unlink(r, q);
	if (reply) {
		ST_ADD(r, round_trips, 1);
		ST_SET(r, last_rtt_us, (t - q->sent_ns) / 1000);
	}
	q->done(r, q, stale ? NULL : reply);
	free(q);
}

/* Send argv; the request is the callback's.  -EIO when hiredis refuses. */
int cmd_send(struct registry *r, struct req *q, int argc, const char **argv, const size_t *lens)
{
	q->r = r;
	q->gen = r->gen;
	q->sent_ns = now_ns();
	if (!r->ac || redisAsyncCommandArgv(r->ac, on_reply, q, argc, argv, lens) != REDIS_OK) {
		free(q);
		want_close(r, "hiredis refused a command");
		return -EIO;
	}
	req_link(r, q);
	return 0;
}

struct req *cmd_new(req_done_fn *done)
{
	struct req *q = calloc(1, sizeof(*q));

	if (q)
		q->done = done;
	return q;
}

int cmd_send_script(struct registry *r, struct req *q, int script, uint32_t nkeys, uint32_t nargs,
		    const char **argv, size_t *lens)
{
	char nk[16];

	/* argv[0..2] are ours: EVALSHA sha numkeys. */
	snprintf(nk, sizeof(nk), "%u", nkeys);
	argv[0] = "EVALSHA";
	lens[0] = 7;
	argv[1] = r->sha[script];
	lens[1] = 40;
	argv[2] = nk;
	lens[2] = strlen(nk);
	return cmd_send(r, q, (int)(3 + nkeys + nargs), argv, lens);
}

int cmd_send_text_script(struct registry *r, struct req *q, int script, uint32_t nkeys,
			 uint32_t nargs, const char **argv, size_t *lens)
{
	for (uint32_t i = 3; i < 3 + nkeys + nargs; i++)
		lens[i] = strlen(argv[i]);
	return cmd_send_script(r, q, script, nkeys, nargs, argv, lens);
}

void cmd_refused(struct registry *r, const redisReply *reply, int rc, const char *malformed)
{
	char e[128];

	reply_error_text(reply, e, sizeof(e));
	ST_ADD(r, errors, 1);
	want_close(r, rc == -EIO ? e : malformed);
}
