/* SPDX-License-Identifier: MIT */
/*
 * The fetching side's peers and their idle connections (fetch-pool.c).
 * Service thread only.
 */
#ifndef KVS_PEER_FETCH_POOL_H
#define KVS_PEER_FETCH_POOL_H

#include "peer/internal.h"

/* The entry of the peer at @addr, made if new (the least recently used may go).  NULL: none. */
struct peer_ent *pool_peer(struct kvspeer *kp, const char *addr);
void pool_free(struct kvspeer *kp);
/* Handshakes we may have in flight to one peer. */
uint32_t pool_connecting_max(const struct kvspeer *kp);
/* A conn of @pe is free, or one more may be opened: its waiting fetches go next turn. */
void pool_kick(struct kvspeer *kp, struct peer_ent *pe);
/* @c (ours, of a peer_ent) closed in state @was: one more may open. */
void pool_conn_gone(struct conn *c, enum conn_state was);
/* @c's fetch is done with it: into the pool, or closed (not ready, or the pool is full). */
void pool_idle(struct conn *c);
/* A non-blocking connect to @pe, on a conn whose handlers are @ops.  0 or -errno. */
int pool_open(struct kvspeer *kp, struct peer_ent *pe, const struct conn_ops *ops,
	      struct conn **ret);

#endif /* KVS_PEER_FETCH_POOL_H */
