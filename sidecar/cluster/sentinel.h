/* SPDX-License-Identifier: MIT */
/*
 * Finding the registry's Redis through Redis Sentinel: which server is
 * the master of [cluster] master_name now, and when that changes.  The
 * registry (lifetime.c, on_master()) asks and is told; this module owns
 * the sentinels' connections, on the registry's epoll fd:
 *
 *   - a look: every sentinel is asked SENTINEL MASTER <name> at once (one
 *     persistent connection each); when all answered, or at the command
 *     timeout, the master is the one named with the highest config epoch
 *     (a sentinel cut off from the others still names the old one with an
 *     older epoch).  The registry asks for a look when a connection to the
 *     master is lost or the server it reached is not a master; a look also
 *     runs every check interval, which catches a failover the subscription
 *     missed (a master cut off from the sentinels but not from us);
 *   - a subscription to +switch-master on one sentinel (the next one
 *     after a failure): a failover is followed the moment the sentinels
 *     announce it.
 *
 * Control thread only.  The callback runs from sentinel_event() or
 * sentinel_tick(), never from inside another call of this module's.
 */
#ifndef KVS_REG_SENTINEL_H
#define KVS_REG_SENTINEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/loghook.h"

#define SENTINEL_MAX 16u /* sentinels in [cluster] sentinels */

struct sentinel;

struct sentinel_config {
	const char *list;	 /* "host:port,host:port,..." (names resolved once, here) */
	const char *master_name; /* the master's name the sentinels monitor */
	const char *user;	 /* AUTH to the sentinels; NULL or "": the default user */
	const char *password;	 /* NULL: no AUTH */
	uint32_t connect_timeout_ms, command_timeout_ms;
	uint32_t check_ms; /* a look this often */
};

struct sentinel_ops {
	/*
	 * The sentinels name @ip:@port the master: after a look (@announced
	 * false; every look reports, changed or not) or at a +switch-master
	 * announcement (true).
	 */
	void (*master)(void *arg, const char *ip, int port, bool announced);
	/* One line per change (a sentinel unreachable, back, the subscription moved). */
	kvs_log_hook *log; /* common/loghook.h */
	void *arg;
};

/*
 * Parse and resolve @cfg's sentinels, connect to them and look for the
 * master at once.  Its connections' epoll events carry data.u32 @tag_base
 * and up (sentinel_owns()).  -EINVAL with a reason in @why.
 */
int sentinel_new(const struct sentinel_config *cfg, const struct sentinel_ops *ops, int epfd,
		 uint32_t tag_base, struct sentinel **ret, char *why, size_t wl);
void sentinel_free(struct sentinel *s);

/* Look for the master now (unless a look is running). */
void sentinel_look(struct sentinel *s);
/* Is @tag one of its connections'?  Then hand it the event. */
bool sentinel_owns(const struct sentinel *s, uint32_t tag);
void sentinel_event(struct sentinel *s, uint32_t tag, uint32_t events);
/* Run what is due at @now; the next deadline (UINT64_MAX: none). */
uint64_t sentinel_tick(struct sentinel *s, uint64_t now);

/* Sentinels configured, and those that answered the last look. */
void sentinel_counts(const struct sentinel *s, uint32_t *ret_n, uint32_t *ret_up);

#endif /* KVS_REG_SENTINEL_H */
