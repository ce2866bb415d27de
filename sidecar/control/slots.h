/* SPDX-License-Identifier: MIT */
/*
 * Connection slots: what one uid may hold, and in what state.
 *
 * Every connection holds a slot of one kind from accept to free:
 *
 *   handshake  accepted, no HELLO yet: [server] max_handshakes,
 *              max_handshakes_per_uid, 10 s to say HELLO
 *   admin      HELLO as admin (the CLI, a scraper): max_admin_sessions,
 *              max_admin_sessions_per_uid, admin_idle_timeout
 *   engine     HELLO as worker or scheduler, until the session is freed
 *              (closing ones too: they still hold a region and mappings):
 *              max_sessions, max_sessions_per_uid
 *
 * The pools are separate, so silent connections and admin sessions can
 * never take an engine's slot.  A full engine pool refuses the HELLO
 * (EUSERS): an engine is never pushed out.  A full handshake or admin
 * pool never refuses the newcomer: it closes the oldest silent connection
 * (the most idle admin session) of the same uid when that uid is at its
 * own limit, else of the uid that holds most of the pool.  A uid that
 * floods a pool so only ever closes its own connections, and a client
 * that says HELLO at once (libkvstash does, in the same breath as its
 * connect) keeps its place however fast others reconnect.
 *
 * File descriptors: an engine session holds its socket, its region's
 * memfd and one fd per allocation it registered; a uid's sessions
 * together hold at most [server] max_fds_per_uid of them (HELLO and
 * REGISTER refused with EMFILE beyond), so one uid cannot exhaust the
 * daemon's RLIMIT_NOFILE.  Handshake and admin sockets are bounded by
 * their pools instead.
 *
 * The table knows connections only as a struct slot_holder each embeds
 * (struct session's `sl`), and closes one through the table's close
 * function (the session's end, control/protocol.c): slots stand below the
 * sessions, which use them.
 *
 * Control thread only.
 */
#ifndef KVS_SLOTS_H
#define KVS_SLOTS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <urcu/list.h>

#include "obs/log.h"

struct counters_global;
struct slot_table;

enum slot_kind {
	SLOT_HANDSHAKE,
	SLOT_ADMIN,
	SLOT_ENGINE,
	SLOT_KINDS,
	SLOT_NONE = SLOT_KINDS,
};

/* One per uid with connections, or with log lines counted recently. */
struct uid_slots {
	uid_t uid;
	unsigned n[SLOT_KINDS];
	unsigned fds;		   /* held for its engine sessions */
	char name[24];		   /* "uid N", the prefix of its count of dropped lines */
	struct log_ratelimit rl;   /* connection-level lines of all its connections */
	struct cds_list_head node; /* slot_table.uids */
};

/* What one connection holds: embedded in it, from slots_accept() to slots_release(). */
struct slot_holder {
	struct slot_table *t;
	struct uid_slots *owner; /* NULL before slots_accept() */
	enum slot_kind kind;
	struct cds_list_head node; /* t->lists[kind], least recently active first */
	uint64_t since_ns;	   /* accepted: the handshake timeout counts from here */
	uint64_t active_ns;	   /* last request or reply progress */
	unsigned fds_held;	   /* counted in owner->fds */
	uid_t uid;
	const char *prefix; /* the connection's log prefix (the session's) */
};

/* Close the connection holding @h (it releases its slot when it is freed). */
typedef void slot_close_fn(struct slot_holder *h, int why);

struct slot_limits {
	unsigned handshakes, handshakes_per_uid; /* [server] max_handshakes, _per_uid */
	unsigned admins, admins_per_uid;	 /* max_admin_sessions, _per_uid */
	unsigned engines, engines_per_uid;	 /* max_sessions, max_sessions_per_uid */
	unsigned fds_per_uid;			 /* max_fds_per_uid, 0 resolved */
	uint64_t handshake_ns;			 /* to say HELLO in */
	uint64_t admin_idle_ns;			 /* admin_idle_timeout */
	uint64_t log_window_ns;			 /* [log] ratelimit_interval: a uid's is kept */
};

struct slot_table {
	struct cds_list_head uids;
	struct cds_list_head lists[SLOT_KINDS];
	unsigned count[SLOT_KINDS];
	struct slot_limits lim;
	struct counters_global *ctr; /* a connection closed for room counts as refused */
	slot_close_fn *close;
};

/*
 * A line about the connection holding @h, rate-limited per uid: events
 * every new connection can provoke (a refused HELLO, a closed silent
 * connection), so that reconnecting in a loop cannot flood the log.
 */
#define clog_at(h, level, err, ...) \
	log_at_rl(&(h)->owner->rl, (h)->owner->name, (level), (err), (h)->prefix, __VA_ARGS__)
#define clog_warning(h, ...)		clog_at((h), LOG_WARNING, 0, __VA_ARGS__)
#define clog_info(h, ...)		clog_at((h), LOG_INFO, 0, __VA_ARGS__)
#define clog_warning_errno(h, err, ...) clog_at((h), LOG_WARNING, (err), __VA_ARGS__)
#define clog_info_errno(h, err, ...)	clog_at((h), LOG_INFO, (err), __VA_ARGS__)

void slots_init(struct slot_table *t, const struct slot_limits *lim, struct counters_global *ctr,
		slot_close_fn *close);
/* Free the uid table (after every connection is gone). */
void slots_fini(struct slot_table *t);

/*
 * A new connection of @uid takes a handshake slot in @h, closing another
 * connection if the pool or the uid's share of it is full.  -ENOMEM.
 */
int slots_accept(struct slot_table *t, struct slot_holder *h, uid_t uid, const char *prefix,
		 uint64_t now);

/*
 * HELLO: move @h from its handshake slot to @kind.  SLOT_ENGINE: -EUSERS
 * when the engine pool or the uid's share is full (@why says which);
 * SLOT_ADMIN always succeeds, closing another admin session if needed.
 */
int slots_hello(struct slot_holder *h, enum slot_kind kind, char *why, size_t wl);

/* @h asked or read something: it is the least idle of its pool. */
void slots_touch(struct slot_holder *h);

/* Count @n more fds held for @h: -EMFILE beyond fds_per_uid. */
int slots_take_fds(struct slot_holder *h, unsigned n, char *why, size_t wl);
void slots_put_fds(struct slot_holder *h, unsigned n);

/* Give back everything @h holds (the connection is being freed). */
void slots_release(struct slot_holder *h);

/* Slots of @kind held now, all uids together. */
unsigned slots_count(const struct slot_table *t, enum slot_kind kind);

/*
 * Once a second: close connections silent past the handshake timeout and
 * admin sessions idle past admin_idle_timeout; forget uids that hold
 * nothing and whose log window has passed.
 */
void slots_sweep(struct slot_table *t, uint64_t now);

#endif /* KVS_SLOTS_H */
