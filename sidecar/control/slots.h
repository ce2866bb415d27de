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
 * Control thread only.
 */
#ifndef KVS_SLOTS_H
#define KVS_SLOTS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <urcu/list.h>

#include "obs/log.h"

struct daemon;
struct session;

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
	struct cds_list_head node; /* daemon.uids */
};

/*
 * A line about connection @s, rate-limited per uid: events every new
 * connection can provoke (a refused HELLO, a closed silent connection), so
 * that reconnecting in a loop cannot flood the log.
 */
#define clog_at(s, level, err, ...) \
	log_at_rl(&(s)->owner->rl, (s)->owner->name, (level), (err), (s)->prefix, __VA_ARGS__)
#define clog_warning(s, ...)		clog_at((s), LOG_WARNING, 0, __VA_ARGS__)
#define clog_info(s, ...)		clog_at((s), LOG_INFO, 0, __VA_ARGS__)
#define clog_warning_errno(s, err, ...) clog_at((s), LOG_WARNING, (err), __VA_ARGS__)
#define clog_info_errno(s, err, ...)	clog_at((s), LOG_INFO, (err), __VA_ARGS__)

void slots_init(struct daemon *d);
/* Free the uid table (after every session is gone). */
void slots_fini(struct daemon *d);

/*
 * A new connection of @s->uid takes a handshake slot, closing another
 * connection if the pool or the uid's share of it is full.  -ENOMEM.
 */
int slots_accept(struct daemon *d, struct session *s);

/*
 * HELLO: move @s from its handshake slot to @kind.  SLOT_ENGINE: -EUSERS
 * when the engine pool or the uid's share is full (@why says which);
 * SLOT_ADMIN always succeeds, closing another admin session if needed.
 */
int slots_hello(struct session *s, enum slot_kind kind, char *why, size_t wl);

/* @s asked or read something: it is the least idle of its pool. */
void slots_touch(struct session *s);

/* Count @n more fds held for @s: -EMFILE beyond max_fds_per_uid. */
int slots_take_fds(struct session *s, unsigned n, char *why, size_t wl);
void slots_put_fds(struct session *s, unsigned n);

/* Give back everything @s holds (the session is being freed). */
void slots_release(struct session *s);

/* Slots of @kind held now, all uids together. */
unsigned slots_count(const struct daemon *d, enum slot_kind kind);

/*
 * Once a second: close connections silent past the handshake timeout and
 * admin sessions idle past admin_idle_timeout; forget uids that hold
 * nothing and whose log window has passed.
 */
void slots_sweep(struct daemon *d, uint64_t now);

#endif /* KVS_SLOTS_H */
