/* SPDX-License-Identifier: MIT */
/* Admin replies: `kvstash status` and `kvstash stats`, and the figures /metrics shows. */
#ifndef KVS_ADMIN_H
#define KVS_ADMIN_H

#include <stdint.h>

struct daemon;
struct metrics_sample;
struct session;

/* Queue the reply train to STATUS or STATS on @admin: 0, or -errno to close it. */
int admin_send_status(struct daemon *d, struct session *admin, uint32_t seq);
int admin_send_stats(struct daemon *d, struct session *admin, uint32_t seq);

/*
 * The figures of a STATS reply but the control thread's own (sessions_live),
 * for a scrape: @d is the daemon.  Any thread (metrics_sample_fn).
 */
void admin_sample(void *d, struct metrics_sample *smp);

#endif /* KVS_ADMIN_H */
