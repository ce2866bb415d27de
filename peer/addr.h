/* SPDX-License-Identifier: MIT */
/* Peer addresses ("ADDR:PORT", "[ADDR]:PORT") and the allow-list of networks. */
#ifndef KVS_PEER_ADDR_H
#define KVS_PEER_ADDR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define PEER_ALLOW_MAX 64u

/*
 * "10.1.0.5:7471" or "[fd00::5]:7471" into @ret (numeric only: no name
 * lookups in the service's path).  0 or -EINVAL.
 */
int peer_addr_parse(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len);

/* "ADDR:PORT" of @sa into @buf (always NUL-terminated). */
void peer_addr_format(const struct sockaddr *sa, char *buf, size_t len);

/* True for 0.0.0.0 and ::, which would listen on every interface. */
bool peer_addr_is_wildcard(const struct sockaddr *sa);

struct peer_net {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	unsigned prefix;
};

struct peer_allow {
	unsigned n;
	struct peer_net nets[PEER_ALLOW_MAX];
};

/* "CIDR[,CIDR...]" (commas or spaces; a bare address is /32 or /128).  0 or -EINVAL. */
int peer_allow_parse(const char *s, struct peer_allow *ret, char *why, size_t wl);

/* Is @sa in one of the networks?  IPv4-mapped IPv6 addresses match IPv4 networks. */
bool peer_allow_match(const struct peer_allow *a, const struct sockaddr *sa);

#endif /* KVS_PEER_ADDR_H */
