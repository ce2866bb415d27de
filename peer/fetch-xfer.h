/* SPDX-License-Identifier: MIT */
/*
 * A fetch's transfer on its ready connection (fetch-xfer.c).  Service
 * thread only.
 */
#ifndef KVS_PEER_FETCH_XFER_H
#define KVS_PEER_FETCH_XFER_H

#include "peer/internal.h"

/* Send @f's request (QUERY or HEALTH) on @c.  0, or -errno (@c closed or closing). */
int xfer_send_request(struct fetch *f, struct conn *c);
/*
 * A message on @c in CS_READY (not an ERROR): handled, 0 or -errno (the
 * connection ends), or 1 when the transfer does not expect it now.
 */
int xfer_handle(struct conn *c, const struct pw_hdr *h, const uint8_t *p);
/* UCX: RENEW @f's lock when half its TTL has passed (fetch_tick()). */
void xfer_renew(struct fetch *f, uint64_t now);

#endif /* KVS_PEER_FETCH_XFER_H */
