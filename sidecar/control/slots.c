/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "control/slots.h"
#include "obs/account.h"
#include "base/util.h"

static const char *const kind_names[SLOT_KINDS] = {
	[SLOT_HANDSHAKE] = "handshake",
	[SLOT_ADMIN] = "admin",
	[SLOT_ENGINE] = "engine",
};

void slots_init(struct slot_table *t, const struct slot_limits *lim, struct counters_global *ctr,
		slot_close_fn *close)
{
	CDS_INIT_LIST_HEAD(&t->uids);
	for (unsigned k = 0; k < SLOT_KINDS; k++) {
		CDS_INIT_LIST_HEAD(&t->lists[k]);
		t->count[k] = 0;
	}
	t->lim = *lim;
	t->ctr = ctr;
	t->close = close;
}

void slots_fini(struct slot_table *t)
{
	struct uid_slots *u, *tmp;

	if (!t->uids.next)
		return; /* never initialised */
	cds_list_for_each_entry_safe(u, tmp, &t->uids, node) {
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
static struct uid_slots *uid_get(struct slot_table *t, uid_t uid)
{
	struct uid_slots *u;

	cds_list_for_each_entry(u, &t->uids, node)
		if (u->uid == uid)
			return u;
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	snprintf(u->name, sizeof(u->name), "uid %u", (unsigned)uid);
	cds_list_add_tail(&u->node, &t->uids);
	return u;
}

unsigned slots_count(const struct slot_table *t, enum slot_kind kind)
{
	return t->count[kind];
}

static void put(struct slot_holder *h, enum slot_kind kind)
{
	h->kind = kind;
	h->owner->n[kind]++;
	h->t->count[kind]++;
	cds_list_add_tail(&h->node, &h->t->lists[kind]);
}

static void take_out(struct slot_holder *h)
{
	if (h->kind == SLOT_NONE)
		return;
	h->owner->n[h->kind]--;
	h->t->count[h->kind]--;
	cds_list_del(&h->node);
	h->kind = SLOT_NONE;
}

/*
 * The connection of @kind that gives its slot up: the least recently
 * active of @u, or, with @u NULL, of the uid holding most of the pool.
 */
static struct slot_holder *victim(struct slot_table *t, enum slot_kind kind, struct uid_slots *u)
{
	struct slot_holder *h;

	if (!u) {
		struct uid_slots *v;

		cds_list_for_each_entry(v, &t->uids, node)
			if (!u || v->n[kind] > u->n[kind])
				u = v;
	}
	if (!u || !u->n[kind])
		return NULL;
	cds_list_for_each_entry(h, &t->lists[kind], node)
		if (h->owner == u)
			return h;
	return NULL;
}

static void make_room(struct slot_holder *h, enum slot_kind kind, unsigned total, unsigned per_uid)
{
	struct slot_table *t = h->t;
	struct slot_holder *v = NULL;
	bool own = h->owner->n[kind] >= per_uid;

	if (own)
		v = victim(t, kind, h->owner);
	else if (t->count[kind] >= total)
		v = victim(t, kind, NULL);
	if (!v)
		return;
	account_session_refused(t->ctr);
	clog_info(v, "closed to make room for a new %s connection: %s", kind_names[kind],
		  own ? "its uid holds its share of the pool"
		      : "the pool is full, its uid holds most");
	t->close(v, -EUSERS);
}

int slots_accept(struct slot_table *t, struct slot_holder *h, uid_t uid, const char *prefix,
		 uint64_t now)
{
	struct uid_slots *owner = uid_get(t, uid);

	if (!owner)
		return -ENOMEM;
	*h = (struct slot_holder){
		.t = t,
		.owner = owner,
		.kind = SLOT_NONE,
		.since_ns = now,
		.active_ns = now,
		.uid = uid,
		.prefix = prefix,
	};
	make_room(h, SLOT_HANDSHAKE, t->lim.handshakes, t->lim.handshakes_per_uid);
	put(h, SLOT_HANDSHAKE);
	return 0;
}

int slots_hello(struct slot_holder *h, enum slot_kind kind, char *why, size_t wl)
{
	const struct slot_limits *lim = &h->t->lim;

	if (kind == SLOT_ENGINE) {
		if (h->t->count[SLOT_ENGINE] >= lim->engines) {
			snprintf(why, wl, "the session limit (%u) is reached", lim->engines);
			return -EUSERS;
		}
		if (h->owner->n[SLOT_ENGINE] >= lim->engines_per_uid) {
			snprintf(why, wl, "the session limit of uid %u (%u) is reached",
				 (unsigned)h->uid, lim->engines_per_uid);
			return -EUSERS;
		}
	}
	take_out(h);
	if (kind == SLOT_ADMIN)
		make_room(h, SLOT_ADMIN, lim->admins, lim->admins_per_uid);
	put(h, kind);
	h->active_ns = now_ns();
	return 0;
}

void slots_touch(struct slot_holder *h)
{
	if (h->kind == SLOT_NONE)
		return;
	h->active_ns = now_ns();
	/* Keep the pool's list ordered by activity: the most idle stays first. */
	cds_list_del(&h->node);
	cds_list_add_tail(&h->node, &h->t->lists[h->kind]);
}

int slots_take_fds(struct slot_holder *h, unsigned n, char *why, size_t wl)
{
	unsigned limit = h->t->lim.fds_per_uid;

	if (n > limit || h->owner->fds > limit - n) {
		snprintf(why, wl,
			 "the fds of uid %u would exceed its limit (%u held, %u more, max %u)",
			 (unsigned)h->uid, h->owner->fds, n, limit);
		return -EMFILE;
	}
	h->owner->fds += n;
	h->fds_held += n;
	return 0;
}

void slots_put_fds(struct slot_holder *h, unsigned n)
{
	n = MIN(n, h->fds_held);
	h->owner->fds -= n;
	h->fds_held -= n;
}

void slots_release(struct slot_holder *h)
{
	if (!h->owner)
		return;
	slots_put_fds(h, h->fds_held);
	take_out(h);
}

void slots_sweep(struct slot_table *t, uint64_t now)
{
	const struct slot_limits *lim = &t->lim;
	struct slot_holder *h, *tmp;
	struct uid_slots *u, *utmp;

	/* Both lists are oldest first: stop at the first that may stay. */
	cds_list_for_each_entry_safe(h, tmp, &t->lists[SLOT_HANDSHAKE], node) {
		if (now - h->since_ns <= lim->handshake_ns)
			break;
		clog_info(h, "no HELLO within %llu s: closing",
			  (unsigned long long)(lim->handshake_ns / NSEC_PER_SEC));
		t->close(h, -ETIMEDOUT);
	}
	cds_list_for_each_entry_safe(h, tmp, &t->lists[SLOT_ADMIN], node) {
		if (now - h->active_ns <= lim->admin_idle_ns)
			break;
		clog_info(h, "admin session idle for %llu ms: closing",
			  (unsigned long long)((now - h->active_ns) / NSEC_PER_MSEC));
		t->close(h, -ETIMEDOUT);
	}
	cds_list_for_each_entry_safe(u, utmp, &t->uids, node) {
		bool empty = !u->fds;

		for (unsigned k = 0; k < SLOT_KINDS; k++)
			empty &= !u->n[k];
		/*
		 * Kept while its log window runs: a uid reconnecting in a loop
		 * would otherwise start a fresh window with every connection.
		 */
		if (!empty || (u->rl.begin_ns && now - u->rl.begin_ns < lim->log_window_ns))
			continue;
		log_ratelimit_flush(&u->rl, u->name);
		cds_list_del(&u->node);
		free(u);
	}
}
