/* SPDX-License-Identifier: MIT */
/*
 * What a flush of the registry reports (registry_flush(), registry.h),
 * apart from the registry's API so that its ledger (ledger.h), which the
 * registry is built on, takes it without depending on the registry.
 */
#ifndef KVS_REG_FLUSH_H
#define KVS_REG_FLUSH_H

#include <stdint.h>

struct registry_flush_result {
	int status;	    /* 0; -ETIMEDOUT (deadline); -ESHUTDOWN */
	uint64_t delivered; /* the tally's changes before the mark delivered to Redis */
	uint64_t dropped;   /* and dropped: overflow, offline, failed attempt, or
			       unresolved at the deadline */
};
typedef void registry_flush_cb(void *arg, const struct registry_flush_result *res);

#endif /* KVS_REG_FLUSH_H */
