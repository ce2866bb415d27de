/* SPDX-License-Identifier: MIT */
/*
 * The registry's sizes, apart from its API so that the pure parsers
 * (regaddr.h, reply.h) take them without depending on the registry: the
 * registry is built on the parsers, not the other way round.
 */
#ifndef KVS_REG_LIMITS_H
#define KVS_REG_LIMITS_H

#define REG_DIGEST_SIZE 16
#define REG_KEY_SIZE	16  /* = KVS_KEY_SIZE */
#define REG_NAME_MAX	64  /* cluster and node names, with the NUL */
#define REG_ADDR_MAX	128 /* Redis and peer addresses, with the NUL */
#define REG_SECRET_MAX	512 /* AUTH password, with the NUL */
#define REG_MAX_HOLDERS 4   /* holders a query answers, best first */

#endif /* KVS_REG_LIMITS_H */
