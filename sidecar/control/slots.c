/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "control/daemon.h"
#include "control/session.h"
#include "control/slots.h"
#include "obs/account.h"
#include "base/util.h"

#define HANDSHAKE_TIMEOUT_NS (10 * NSEC_PER_SEC)

static const char *const kind_names[SLOT_KINDS] = {
	[SLOT_HANDSHAKE] = "handshake",
	[SLOT_ADMIN] = "admin",
	[SLOT_ENGINE] = "engine",
};

void slots_init(struct daemon *d)
{
	CDS_INIT_LIST_HEAD(&d->uids);
	for (unsigned k = 0; k < SLOT_KINDS; k++)
		CDS_INIT_LIST_HEAD(&d->slot_lists[k]);
}

void slots_fini(struct daemon *d)
{
	struct uid_slots *u, *tmp;

	cds_list_for_each_entry_safe(u, tmp, &d->uids, node) {
		log_ratelimit_flush(&u->rl, u->name);
		cds_list_del(&u->node);
		free(u);
	}
}

/*
 * The uids of one host are few (the engines' service users, root, an
 * operator): a list is enough, and a peer cannot add entries faster than
 * it can obtain uids.
 */
static struct uid_slots *uid_get(struct daemon *d, uid_t uid)
{
	struct uid_slots *u;

	cds_list_for_each_entry(u, &d->uids, node)
		if (u->uid == uid)
			return u;
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	snprintf(u->name, sizeof(u->name), "uid %u", (unsigned)uid);
	cds_list_add_tail(&u->node, &d->uids);
	return u;
}

unsigned slots_count(const struct daemon *d, enum slot_kind kind)
{
	return d->slot_count[kind];
}

static void put(struct session *s, enum slot_kind kind)
{
	struct daemon *d = s->d;

	s->slot = kind;
	s->owner->n[kind]++;
	d->slot_count[kind]++;
	cds_list_add_tail(&s->slot_node, &d->slot_lists[kind]);
}

static void take_out(struct session *s)
{
	struct daemon *d = s->d;

	if (s->slot == SLOT_NONE)
		return;
	s->owner->n[s->slot]--;
	d->slot_count[s->slot]--;
	cds_list_del(&s->slot_node);
	s->slot = SLOT_NONE;
}

/*
 * The connection of @kind that gives its slot up: the least recently
 * active of @u, or, with @u NULL, of the uid holding most of the pool.
 */
static struct session *victim(struct daemon *d, enum slot_kind kind, struct uid_slots *u)
{
	struct session *s;

	if (!u) {
		struct uid_slots *v;

		cds_list_for_each_entry(v, &d->uids, node)
			if (!u || v->n[kind] > u->n[kind])
				u = v;
	}
	if (!u || !u->n[kind])
		return NULL;
	cds_list_for_each_entry(s, &d->slot_lists[kind], slot_node)
		if (s->owner == u)
			return s;
	return NULL;
}

static void make_room(struct daemon *d, struct session *s, enum slot_kind kind, unsigned total,
		      unsigned per_uid)
{
	struct session *v = NULL;
	bool own = s->owner->n[kind] >= per_uid;

	if (own)
		v = victim(d, kind, s->owner);
	else if (d->slot_count[kind] >= total)
		v = victim(d, kind, NULL);
	if (!v)
		return;
	account_session_refused(&d->ctr);
	clog_info(v, "closed to make room for a new %s connection: %s", kind_names[kind],
		  own ? "its uid holds its share of the pool"
		      : "the pool is full, its uid holds most");
	session_close(v, -EUSERS);
}

int slots_accept(struct daemon *d, struct session *s)
{
	const struct kvs_config *cfg = d->cfg;

	s->slot = SLOT_NONE;
	s->owner = uid_get(d, s->uid);
	if (!s->owner)
		return -ENOMEM;
	s->active_ns = s->created_ns;
	make_room(d, s, SLOT_HANDSHAKE, cfg->max_handshakes, cfg->max_handshakes_per_uid);
	put(s, SLOT_HANDSHAKE);
	return 0;
}

int slots_hello(struct session *s, enum slot_kind kind, char *why, size_t wl)
{
	struct daemon *d = s->d;
	const struct kvs_config *cfg = d->cfg;

	if (kind == SLOT_ENGINE) {
		if (d->slot_count[SLOT_ENGINE] >= cfg->max_sessions) {
			snprintf(why, wl, "the session limit (%u) is reached", cfg->max_sessions);
			return -EUSERS;
		}
		if (s->owner->n[SLOT_ENGINE] >= cfg->max_sessions_per_uid) {
			snprintf(why, wl, "the session limit of uid %u (%u) is reached",
				 (unsigned)s->uid, cfg->max_sessions_per_uid);
			return -EUSERS;
		}
	}
	take_out(s);
	if (kind == SLOT_ADMIN)
		make_room(d, s, SLOT_ADMIN, cfg->max_admin_sessions,
			  cfg->max_admin_sessions_per_uid);
	put(s, kind);
	s->active_ns = now_ns();
	return 0;
}

void slots_touch(struct session *s)
{
	if (s->slot == SLOT_NONE)
		return;
	s->active_ns = now_ns();
	/* Keep the pool's list ordered by activity: the most idle stays first. */
	cds_list_del(&s->slot_node);
	cds_list_add_tail(&s->slot_node, &s->d->slot_lists[s->slot]);
}

int slots_take_fds(struct session *s, unsigned n, char *why, size_t wl)
{
	unsigned limit = s->d->fds_per_uid;

	if (n > limit || s->owner->fds > limit - n) {
		snprintf(why, wl,
			 "the fds of uid %u would exceed its limit (%u held, %u more, max %u)",
			 (unsigned)s->uid, s->owner->fds, n, limit);
		return -EMFILE;
	}
	s->owner->fds += n;
	s->fds_held += n;
	return 0;
}

void slots_put_fds(struct session *s, unsigned n)
{
	n = MIN(n, s->fds_held);
	s->owner->fds -= n;
	s->fds_held -= n;
}

void slots_release(struct session *s)
{
	if (!s->owner)
		return;
	slots_put_fds(s, s->fds_held);
	take_out(s);
}

void slots_sweep(struct daemon *d, uint64_t now)
{
	uint64_t idle = (uint64_t)d->cfg->admin_idle_timeout_ms * NSEC_PER_MSEC;
	uint64_t window = (uint64_t)d->cfg->log_ratelimit_interval_ms * NSEC_PER_MSEC;
	struct session *s, *tmp;
	struct uid_slots *u, *utmp;

	/* Both lists are oldest first: stop at the first that may stay. */
	cds_list_for_each_entry_safe(s, tmp, &d->slot_lists[SLOT_HANDSHAKE], slot_node) {
		if (now - s->created_ns <= HANDSHAKE_TIMEOUT_NS)
			break;
		clog_info(s, "no HELLO within %llu s: closing",
			  (unsigned long long)(HANDSHAKE_TIMEOUT_NS / NSEC_PER_SEC));
		session_close(s, -ETIMEDOUT);
	}
	cds_list_for_each_entry_safe(s, tmp, &d->slot_lists[SLOT_ADMIN], slot_node) {
		if (now - s->active_ns <= idle)
			break;
		clog_info(s, "admin session idle for %llu ms: closing",
			  (unsigned long long)((now - s->active_ns) / NSEC_PER_MSEC));
		session_close(s, -ETIMEDOUT);
	}
	cds_list_for_each_entry_safe(u, utmp, &d->uids, node) {
		bool empty = !u->fds;

		for (unsigned k = 0; k < SLOT_KINDS; k++)
			empty &= !u->n[k];
		/*
		 * Kept while its log window runs: a uid reconnecting in a loop
		 * would otherwise start a fresh window with every connection.
		 */
		if (!empty || (u->rl.begin_ns && now - u->rl.begin_ns < window))
			continue;
		log_ratelimit_flush(&u->rl, u->name);
		cds_list_del(&u->node);
		free(u);
	}
}
