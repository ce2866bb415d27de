/* SPDX-License-Identifier: MIT */
/*
 * Redis addresses: "host:port", "[v6]:port", "unix:/path" or "/path".
 */
#ifndef KVS_REG_ADDR_H
#define KVS_REG_ADDR_H

#include <stdbool.h>
#include <stddef.h>

#include "cluster/limits.h"

struct reg_addr {
	bool unix_path;
	char host[REG_ADDR_MAX]; /* or the socket path */
	int port;
};

/* -EINVAL with a reason (never follows a path, resolves nothing). */
int reg_addr_parse(const char *s, struct reg_addr *ret, char *why, size_t wl);

#endif /* KVS_REG_ADDR_H */
