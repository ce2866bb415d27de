/* SPDX-License-Identifier: MIT */
/*
 * The registry's connection to the Redis master (link.c): open it (to the
 * address configured, or to the master the sentinels named), hand-shake,
 * back off after a loss, tear it down.  Control thread only.
 */
#ifndef KVS_REG_LINK_H
#define KVS_REG_LINK_H

struct registry;

/* Connect (pump_run(), in REG_DISCONNECTED once the backoff ran out) and send the handshake. */
void link_open(struct registry *r);

/* Our own teardown (timeout, protocol violation, shutdown): from pump_run(), outside callbacks. */
void link_close(struct registry *r, const char *why, int err);

#endif /* KVS_REG_LINK_H */
