/* SPDX-License-Identifier: MIT */
/*
 * The FLUSH barrier's consumer side (barrier.c; the producers' calls are
 * registry.h's): complete the flushes whose marks resolved or whose
 * deadline passed.  Control thread only.
 */
#ifndef KVS_REG_BARRIER_H
#define KVS_REG_BARRIER_H

#include <stdint.h>

struct registry;

/* Flushes done by @now (all of them when @shutting) call back; spent tallies go. */
void barrier_complete(struct registry *r, uint64_t now, int shutting);

#endif /* KVS_REG_BARRIER_H */
