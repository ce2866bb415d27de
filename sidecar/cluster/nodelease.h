/* SPDX-License-Identifier: MIT */
/*
 * The node's lease on Redis (nodelease.c): who this node is, under which
 * epoch, and when everything resident is registered again.  Unlike
 * store/lease.h (engines' leases on blocks), this is the lease that
 * fences a node's registrations.  Control thread only.
 */
#ifndef KVS_REG_NODELEASE_H
#define KVS_REG_NODELEASE_H

#include <stdint.h>

struct registry;

/* Acquire once the scripts are loaded, renew on time, refresh the entries' TTL (pump_run()). */
void nodelease_tick(struct registry *r, uint64_t now);

/* The lease is gone (@why): back to REG_HANDSHAKE, a new epoch at once, then backfill. */
void nodelease_lost(struct registry *r, const char *why);

/* Shutdown: give the lease back, so peers stop asking this node at once. */
void nodelease_release(struct registry *r);

/* Re-register every resident entry (a new epoch, or the entries' TTL refresh), or stop. */
void nodelease_backfill(struct registry *r, int on);

#endif /* KVS_REG_NODELEASE_H */
