/* SPDX-License-Identifier: MIT */
/* Admin replies: `kvstash status` and `kvstash stats`. */
#ifndef KVS_STATS_H
#define KVS_STATS_H

#include <stdint.h>

struct daemon;
struct session;

int stats_send_status(struct daemon *d, struct session *admin, uint32_t seq);
int stats_send_stats(struct daemon *d, struct session *admin, uint32_t seq);

#endif /* KVS_STATS_H */
