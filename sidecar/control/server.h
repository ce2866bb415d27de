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

/* SO_PEERCRED checked against [server] allow_uids / allow_gids. */
bool server_peer_allowed(struct daemon *d, pid_t pid, uid_t uid, gid_t gid);

/* Sessions past HELLO (admin sessions not counted). */
unsigned server_active_sessions(struct daemon *d);

#endif /* KVS_SERVER_H */
