/* SPDX-License-Identifier: MIT */
/*
 * The serving side (serve.c): the listening socket, whose events it takes
 * itself, and the timers of accepted connections and their locks.
 * Service thread only, but serve_listen() (kvspeer_new(), before the
 * thread starts).
 */
#ifndef KVS_PEER_SERVE_H
#define KVS_PEER_SERVE_H

#include "peer/internal.h"

/* Bind and listen on kvspeer_params.listen, watched by the loop.  0 or -errno. */
int serve_listen(struct kvspeer *kp);
/* Handshake deadlines, stalls, lock TTLs, idle connections (each PEER_TICK_MS). */
void serve_tick(struct kvspeer *kp, uint64_t now);

#endif /* KVS_PEER_SERVE_H */
