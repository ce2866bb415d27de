/* SPDX-License-Identifier: MIT */
/*
 * kvstashd's side of the SSD tier (ssd/ssd.h; the model is kvstash(7),
 * TIERS): it opens the drives from [ssd], registers the pool with them
 * as io_uring fixed buffers, gives the store the tier (store_set_ssd()),
 * and closes them on shutdown, draining and syncing.
 *
 * Who calls what:
 *   - the drive threads call the store (store_ssd_write_done/_read_done):
 *     tier_init() makes each an RCU reader first, as the store needs;
 *   - the store calls tier_wake() through its wake hook when reads end:
 *     every I/O worker looks at its parked LOADs again.
 *
 * Control thread only (start-up and shutdown).
 */
#ifndef KVS_CONTROL_TIER_ATTACH_H
#define KVS_CONTROL_TIER_ATTACH_H

#include <stddef.h>

struct daemon;
struct kvs_config;

/* --check-config: [ssd] as tier_init() takes it.  0 or -errno with the reason in @why. */
int tier_check_config(const struct kvs_config *cfg, char *why, size_t wl);

/*
 * Open the drives [ssd] names (d->ssd stays NULL without a path): after
 * the store, before the workers.  Recovery goes on in the drive threads
 * while the daemon serves DRAM.  -errno, logged with the reason.
 */
int tier_init(struct daemon *d);

/*
 * Shutdown, after the last session and before the workers stop (reads
 * ending wake them) and before the store goes (writes free its slots):
 * drain what is queued, seal, sync, mark clean.
 */
void tier_close(struct daemon *d);

#endif /* KVS_CONTROL_TIER_ATTACH_H */
