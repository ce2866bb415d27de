/* SPDX-License-Identifier: MIT */
/*
 * The cluster QUERY (regquery.c; registry_query() is registry.h's): which
 * other live node holds the longest run of a list of keys.  Control
 * thread only.
 */
#ifndef KVS_REG_QUERY_H
#define KVS_REG_QUERY_H

#include <stdint.h>

struct registry;

/* Send what can go, finish what is answered, timed out or cut off (pump_run()). */
void query_pump(struct registry *r, uint64_t now, int shutting);

/* registry_free(): the queries left, finished by query_pump(..., 1), go. */
void query_free_all(struct registry *r);

#endif /* KVS_REG_QUERY_H */
