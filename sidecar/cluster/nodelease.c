/* SPDX-License-Identifier: MIT */
/*
 * The node's lease and its epoch, the registry's state machine above the
 * connection: REG_HANDSHAKE (scripts loaded, role checked: link.c) ->
 * ACQUIRE -> REG_READY (renewed every ttl/3; the backfill re-registers
 * everything resident under the new epoch) or REG_CONFLICT (another live
 * process holds the node name: retried when its lease would expire).  A
 * renewal refused, a lease not renewed in time, or a REGISTER fenced by a
 * newer epoch (pipeline.c) loses it: back to REG_HANDSHAKE for a new one.
 *
 * The incarnation id (r->inc, random at registry_new()) goes with every
 * ACQUIRE, so that (node, epoch, incarnation) never repeats.  Control
 * thread only; the done functions run inside hiredis (command.c) and only
 * record what came back.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cluster/command.h"
#include "cluster/nodelease.h"
#include "cluster/registry-internal.h"
#include "cluster/reply.h"

/* The epochs' floor (send_acquire()): CLOCK_REALTIME, unlike every timer here. */
static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

void nodelease_backfill(struct registry *r, int on)
{
	r->backfilling = on;
	r->bf_cursor = 0;
	r->bf_next = r->bf_got = 0;
	ST_SET(r, backfilling, on);
}

void nodelease_lost(struct registry *r, const char *why)
{
	if (r->state != REG_READY)
		return;
	ST_ADD(r, leases_lost, 1);
	rlog(r, LOG_WARNING, 0, "registry: lease of node %s (epoch %" PRIu64 ") lost: %s", r->node,
	     r->epoch, why);
	set_state(r, REG_HANDSHAKE);
	nodelease_backfill(r, 0);
	r->acquire_retry_at = 0; /* at once: a new epoch, then backfill */
}

static void handle_acquire(struct registry *r, const redisReply *reply)
{
	struct acquire_result a;
	uint64_t retry;
	int rc;

	r->acquiring = 0;
	rc = reply_acquire(reply, r->nonce, &a);
	if (rc < 0) {
		cmd_refused(r, reply, rc, "malformed lease reply");
		return;
	}
	if (!a.granted) {
		if (r->state != REG_CONFLICT)
			rlog(r, LOG_ERR, EADDRINUSE,
			     "registry: node name %s is held by another live process (lease %s, "
			     "%" PRId64 " ms left): not registering until it expires",
			     r->node, a.token, a.pttl_ms);
		set_state(r, REG_CONFLICT);
		/* Try again when the holder's lease would expire, at least every ttl/3. */
		retry = a.pttl_ms > 0 && (uint64_t)a.pttl_ms < r->ttl_ms / 3
				? (uint64_t)a.pttl_ms + 5
				: r->ttl_ms / 3;
		r->acquire_retry_at = now_ns() + retry * MS;
		return;
	}
	snprintf(r->token, sizeof(r->token), "%s", a.token);
	r->epoch = a.epoch;
	r->ever_leased = 1;
	r->failures = 0;
	r->last_logged_err = 0;
	ST_SET(r, epoch, a.epoch);
	ST_ADD(r, leases_acquired, 1);
	set_state(r, REG_READY);
	rlog(r, LOG_NOTICE, 0,
	     "registry: node %s holds its lease on %s, epoch %" PRIu64 ", incarnation %s%s%s; "
	     "re-registering resident blocks",
	     r->node, r->redis, a.epoch, r->inc, a.displaced[0] ? ", displacing " : "",
	     a.displaced);
	/* Everything registered under an old epoch is invisible: backfill from the start. */
	nodelease_backfill(r, 1);
	r->refresh_at = now_ns() + r->entry_ttl_ms / 2 * MS;
	if (r->ops.leased)
		r->ops.leased(r->ops.arg, a.epoch);
}

static void acquire_done(struct registry *r, struct req *q, const redisReply *reply)
{
	if (!reply)
		return;
	handle_acquire(r, reply);
	if (r->state == REG_READY)
		r->lease_valid_until = q->sent_ns + (uint64_t)r->ttl_ms * MS;
	r->renew_at = q->sent_ns + (uint64_t)(r->ttl_ms / 3) * MS;
}

static void renew_done(struct registry *r, struct req *q, const redisReply *reply)
{
	int rc, v;

	if (!reply)
		return;
	r->renewing = 0;
	rc = reply_bool(reply, &v);
	if (rc < 0) {
		cmd_refused(r, reply, rc, "malformed renew reply");
	} else if (!v) {
		nodelease_lost(r, "expired or taken over (renewal refused)");
	} else if (r->state == REG_READY) {
		/* The server's expiry is later than our send + ttl: conservative. */
		r->lease_valid_until = q->sent_ns + (uint64_t)r->ttl_ms * MS;
		r->renew_at = q->sent_ns + (uint64_t)(r->ttl_ms / 3) * MS;
	}
}

/* Stale or not: shutdown waits for this answer (or close_deadline), then closes. */
static void release_done(struct registry *r, struct req *q, const redisReply *reply)
{
	(void)q;
	(void)reply;
	r->releasing = 0;
	if (r->closing)
		want_close(r, "shut down");
}

static void send_acquire(struct registry *r)
{
	const char *argv[16];
	size_t lens[16];
	char ttl[16], floor[24];
	struct req *q = cmd_new(acquire_done);
	uint64_t rnd;

	if (!q)
		return;
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = now_ns() ^ ((uint64_t)getpid() << 32);
	snprintf(r->nonce, sizeof(r->nonce), "%016" PRIx64, rnd);
	snprintf(ttl, sizeof(ttl), "%u", r->ttl_ms);
	argv[3] = r->lease_key;
	argv[4] = r->epoch_key;
	argv[5] = r->sets_key;
	argv[6] = r->nodes_key;
	argv[7] = r->nonce;
	argv[8] = r->token;
	/* Only a process's first lease takes over a live one: it is this node restarted. */
	argv[9] = r->ever_leased ? "0" : "1";
	argv[10] = ttl;
	argv[11] = r->peer_addr;
	argv[12] = r->node;
	argv[13] = r->lease_prefix;
	argv[14] = r->inc;
	/*
	 * Above every epoch this process held, and at least the wall clock in
	 * milliseconds: epochs never repeat in a process, nor across
	 * processes while the clock goes forward, even when Redis forgot the
	 * counter (scripts.h).  Peers tell holders apart by (node, epoch).
	 */
	snprintf(floor, sizeof(floor), "%" PRIu64, max_u64(r->epoch, wall_ms()));
	argv[15] = floor;
	r->acquiring = 1;
	cmd_send_text_script(r, q, S_ACQUIRE, 4, 9, argv, lens);
}

static void send_renew(struct registry *r)
{
	const char *argv[6];
	size_t lens[6];
	char ttl[16];
	struct req *q = cmd_new(renew_done);

	if (!q)
		return;
	snprintf(ttl, sizeof(ttl), "%u", r->ttl_ms);
	argv[3] = r->lease_key;
	argv[4] = r->token;
	argv[5] = ttl;
	r->renewing = 1;
	cmd_send_text_script(r, q, S_RENEW, 1, 2, argv, lens);
}

void nodelease_release(struct registry *r)
{
	const char *argv[5];
	size_t lens[5];
	struct req *q = cmd_new(release_done);

	if (!q)
		return;
	argv[3] = r->lease_key;
	argv[4] = r->token;
	r->releasing = 1;
	cmd_send_text_script(r, q, S_RELEASE, 1, 1, argv, lens);
}

void nodelease_tick(struct registry *r, uint64_t now)
{
	if (r->ac && !r->closing && r->loads_ok == NR_SCRIPTS && r->role_ok && !r->acquiring &&
	    (r->state == REG_HANDSHAKE || r->state == REG_CONFLICT) && now >= r->acquire_retry_at)
		send_acquire(r);
	if (r->ac && r->state == REG_READY && !r->renewing && now >= r->renew_at)
		send_renew(r);
	if (r->state == REG_READY && !r->backfilling && now >= r->refresh_at) {
		/* Refresh every entry's TTL: a node that died for good leaves nothing. */
		nodelease_backfill(r, 1);
		r->refresh_at = now + r->entry_ttl_ms / 2 * MS;
	}
}
