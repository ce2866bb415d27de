/* SPDX-License-Identifier: MIT */
/*
 * Freeing a pointer that stays in reach: `p = mfree(p)` frees it and
 * leaves NULL behind in one statement (systemd's idiom), so a later
 * destructor or retry sees nothing to free and a ladder of frees is not
 * followed by a ladder of NULLs.
 *
 * Header-only (common/), for libkvstash, libkvspeer and kvstashd.
 */
#ifndef KVS_COMMON_MEM_H
#define KVS_COMMON_MEM_H

#include <stdlib.h>

static inline void *mfree(void *p)
{
	free(p);
	return NULL;
}

#endif /* KVS_COMMON_MEM_H */
