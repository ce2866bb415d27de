/* SPDX-License-Identifier: MIT */
/*
 * The fetching side's state machine (fetch.c), as the service loop
 * drives it.  Service thread only.
 */
#ifndef KVS_PEER_FETCH_H
#define KVS_PEER_FETCH_H

#include "peer/internal.h"

/* Start (or restart) @f: on an idle conn, a new one, or waiting for one. */
void fetch_start(struct kvspeer *kp, struct fetch *f);
/* Start the fetches that waited for a conn and may have one now (each loop turn). */
void fetch_kick(struct kvspeer *kp);
/* Deadlines, UCX renewals, idle and draining conns (each PEER_TICK_MS). */
void fetch_tick(struct kvspeer *kp, uint64_t now);
/* kvspeer_free(): every running fetch ends with @err. */
void fetch_fail_all(struct kvspeer *kp, int err);

#endif /* KVS_PEER_FETCH_H */
