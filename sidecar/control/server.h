/* SPDX-License-Identifier: MIT */
/* The listening socket, peer credentials and the control loop's plumbing. */
#ifndef KVS_SERVER_H
#define KVS_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

struct daemon;

/* Create the socket directory and socket; refuse when a live daemon holds it. */
int server_listen(struct daemon *d);
void server_unlisten(struct daemon *d);

/* Accept pending connections (listening fd readable). */
void server_accept(struct daemon *d);
/* Listen again after accept() ran out of fds (the tick calls it). */
void server_resume(struct daemon *d);

/*
 * Credentials captured at connect (SO_PEERCRED, SO_PEERGROUPS) checked
 * against [server] allow_uids / allow_gids.
 */
bool server_peer_allowed(struct daemon *d, uid_t uid, gid_t gid, const gid_t *groups,
			 unsigned ngroups);

#endif /* KVS_SERVER_H */
