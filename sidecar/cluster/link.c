/* SPDX-License-Identifier: MIT */
/*
 * The registry's connection to the Redis master, the bottom of its state
 * machine: REG_DISCONNECTED -> (aconn_open()) REG_CONNECTING -> (connected)
 * REG_HANDSHAKE, where AUTH, ROLE (with Sentinel: write to a master only)
 * and the scripts' SCRIPT LOAD go; the lease (nodelease.c) takes over once
 * they all answered.  A loss, ours or the server's, runs conn_gone(): a
 * new generation (the old one's replies are stale), every lease flag
 * down, and a reconnect after a capped, jittered backoff, or at once
 * when we left for the master the sentinels named.
 *
 * Control thread only.  on_connect(), on_disconnect() and the handshake's
 * done functions run inside hiredis and only record; link_close() runs
 * from pump_run(), outside hiredis' callbacks.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "cluster/aconn.h"
#include "cluster/command.h"
#include "cluster/link.h"
#include "cluster/nodelease.h"
#include "cluster/registry-internal.h"
#include "cluster/reply.h"
#include "cluster/scripts.h"
#include "cluster/sentinel.h"

/* In the order of the S_* of registry-internal.h: r->sha[] follows it. */
static const char *const script_src[NR_SCRIPTS] = {
	SCRIPT_ACQUIRE, SCRIPT_RENEW, SCRIPT_RELEASE, SCRIPT_REGISTER, SCRIPT_QUERY,
};

static void conn_gone(struct registry *r, const char *why, int err)
{
	int was = r->state;
	uint32_t delay;

	r->ac = NULL;
	r->gen++;
	r->want_close = 0;
	r->acquiring = r->renewing = r->releasing = 0;
	nodelease_backfill(r, 0);
	r->loads_ok = 0;
	if (was == REG_READY)
		ST_ADD(r, leases_lost, 1); /* the next connection takes a new epoch */
	if (r->closing) {
		set_state(r, REG_CLOSED);
		return;
	}
	set_state(r, REG_DISCONNECTED);
	ST_ADD(r, disconnects, was >= REG_HANDSHAKE ? 1 : 0);
	/* Any loss may be a failover: ask the sentinels again (from pump_run()). */
	r->want_look = 1;
	if (r->switching) {
		/* Left for the master the sentinels named: to it at once. */
		r->switching = 0;
		r->failures = 0;
		r->next_attempt = 0;
		rlog(r, LOG_NOTICE, 0, "registry: %s", why);
		return;
	}
	/* Capped exponential backoff, with jitter so a fleet does not reconnect in step. */
	delay = BACKOFF_MIN_MS << (r->failures < 6 ? r->failures : 6);
	if (delay > BACKOFF_MAX_MS)
		delay = BACKOFF_MAX_MS;
	if (delay > r->ttl_ms / 2)
		delay = r->ttl_ms / 2;
	delay = delay / 2 + (uint32_t)(now_ns() % (delay / 2 + 1));
	r->failures++;
	r->next_attempt = now_ns() + (uint64_t)delay * MS;
	/* Log once per change: entering the state, or a different error. */
	if (was >= REG_HANDSHAKE || r->last_logged_err != err + 1) {
		rlog(r, LOG_WARNING, err, "registry: %s %s: %s; retrying with backoff up to %ums",
		     was >= REG_HANDSHAKE ? "connection to" : "cannot connect to", r->redis, why,
		     BACKOFF_MAX_MS);
		r->last_logged_err = err + 1;
	}
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct registry *r = ac->data;

	if (r->ac != ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees the context after this returns (no onDisconnect). */
		ST_ADD(r, errors, 1);
		conn_gone(r, ac->errstr && ac->errstr[0] ? ac->errstr : "connect failed",
			  ac->err == REDIS_ERR_IO ? errno : ECONNREFUSED);
		return;
	}
	set_state(r, REG_HANDSHAKE);
	ST_ADD(r, connects, 1);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct registry *r = ac->data;

	if (r->ac != ac)
		return; /* we tore it down ourselves */
	ST_ADD(r, errors, status == REDIS_OK ? 0 : 1);
	conn_gone(r, ac->errstr && ac->errstr[0] ? ac->errstr : "closed by the server",
		  ac->err == REDIS_ERR_IO ? ECONNRESET : EPIPE);
}

void link_close(struct registry *r, const char *why, int err)
{
	redisAsyncContext *ac = r->ac;

	if (!ac)
		return;
	conn_gone(r, why, err);
	/* Runs every pending callback with NULL (a stale generation: dropped). */
	aconn_close(&r->mc);
}

static void auth_done(struct registry *r, struct req *q, const redisReply *reply)
{
	int rc;

	(void)q;
	if (!reply)
		return;
	rc = reply_ok(reply);
	if (rc < 0)
		cmd_refused(r, reply, rc, "malformed AUTH reply");
}

static void role_done(struct registry *r, struct req *q, const redisReply *reply)
{
	int rc, v;

	(void)q;
	if (!reply)
		return;
	rc = reply_role_master(reply, &v);
	if (rc < 0) {
		cmd_refused(r, reply, rc, "malformed ROLE reply");
	} else if (!v) {
		want_close(r, "not a master (the sentinels lag, or it was demoted)");
		r->want_look = 1;
	} else {
		r->role_ok = 1;
	}
}

static void load_done(struct registry *r, struct req *q, const redisReply *reply)
{
	int rc;

	if (!reply)
		return;
	rc = reply_sha(reply, r->sha[q->script]);
	if (rc < 0)
		cmd_refused(r, reply, rc, "malformed SCRIPT LOAD reply");
	else if (++r->loads_ok == NR_SCRIPTS)
		r->acquire_retry_at = 0; /* pump_run() sends ACQUIRE */
}

static void send_handshake(struct registry *r)
{
	const char *argv[3];
	size_t lens[3];

	if (r->password) {
		struct req *q = cmd_new(auth_done);
		int n = 0;

		if (!q)
			return;
		argv[n] = "AUTH";
		lens[n++] = 4;
		if (r->user[0]) {
			argv[n] = r->user;
			lens[n] = strlen(r->user);
			n++;
		}
		argv[n] = r->password;
		lens[n] = strlen(r->password);
		n++;
		if (cmd_send(r, q, n, argv, lens) < 0)
			return;
	}
	if (r->sent) {
		/* The sentinels may lag, or a demoted master may come back: write to a master only. */
		struct req *q = cmd_new(role_done);

		if (!q)
			return;
		argv[0] = "ROLE";
		lens[0] = 4;
		if (cmd_send(r, q, 1, argv, lens) < 0)
			return;
	}
	for (int i = 0; i < NR_SCRIPTS; i++) {
		struct req *q = cmd_new(load_done);

		if (!q)
			return;
		q->script = i;
		argv[0] = "SCRIPT";
		lens[0] = 6;
		argv[1] = "LOAD";
		lens[1] = 4;
		argv[2] = script_src[i];
		lens[2] = strlen(script_src[i]);
		if (cmd_send(r, q, 3, argv, lens) < 0)
			return;
	}
}

void link_open(struct registry *r)
{
	char why[128];
	int rc;

	/* With Sentinel: the master the sentinels named; none yet: ask them, wait. */
	if (r->sent && !r->ip[0]) {
		sentinel_look(r->sent);
		r->next_attempt = now_ns() + (uint64_t)r->connect_ms * MS;
		return;
	}
	r->role_ok = !r->sent;
	ST_ADD(r, connect_attempts, 1);
	rc = aconn_open(&r->mc, r->addr.unix_path ? r->addr.host : r->ip,
			r->addr.unix_path ? 0 : r->addr.port, &r->budget, r, on_connect,
			on_disconnect, why, sizeof(why));
	if (rc < 0) {
		r->ac = NULL;
		conn_gone(r, why, -rc);
		return;
	}
	r->ac = r->mc.ac;
	set_state(r, REG_CONNECTING);
	r->connect_deadline = now_ns() + (uint64_t)r->connect_ms * MS;
	send_handshake(r);
}
