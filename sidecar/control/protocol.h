/* SPDX-License-Identifier: MIT */
/*
 * The control protocol of a connection (control/protocol.c): what the
 * listener (control/server.c) and the loop (control/lifecycle.c) start
 * and end a session with.  Control thread only.
 */
#ifndef KVS_PROTOCOL_H
#define KVS_PROTOCOL_H

#include <sys/types.h>

#include "io/worker.h"

struct daemon;
struct session;

/* A session for the accepted socket @fd of @pid (@uid, @gid); NULL on ENOMEM. */
struct session *session_new(struct daemon *d, int fd, pid_t pid, uid_t uid, gid_t gid);
/* Read and handle one message: 0, or -errno when the session must close. */
int session_handle_input(struct session *s);
/* Begin closing (EOF, error, GOODBYE, shutdown); frees once the worker acked. */
void session_close(struct session *s, int why);
/* The worker answered @type (control/lifecycle.c takes the acks). */
void session_on_ack(struct session *s, enum wcmd_type type);

#endif /* KVS_PROTOCOL_H */
