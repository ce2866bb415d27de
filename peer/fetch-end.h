/* SPDX-License-Identifier: MIT */
/*
 * A fetch's end (fetch-end.c).  Service thread only.
 */
#ifndef KVS_PEER_FETCH_END_H
#define KVS_PEER_FETCH_END_H

#include "peer/internal.h"

/* The first cause wins: a shorter prefix has one reason. */
void fetch_set_err(struct fetch *f, int err);
/* @f no longer uses its connection (nor counts as busy on its peer). */
void fetch_detach(struct fetch *f);
/* End @f (once; later calls do nothing): counters, result, done callbacks, its reference. */
void fetch_finish(struct fetch *f, int err);
/* Give the peer's lock back (RELEASE when @c is usable, else closing it does), and end @f. */
void fetch_release(struct fetch *f, struct conn *c, int err);

#endif /* KVS_PEER_FETCH_END_H */
