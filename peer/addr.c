/* SPDX-License-Identifier: MIT */
/* Addresses and the allow-list (addr.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/why.h"
#include "peer/addr.h"


int peer_addr_parse(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *colon, *hs;
	size_t hl;
	char *end;
	unsigned long port;

	if (!s)
		return -EINVAL;
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -EINVAL;
		hs = s + 1;
		hl = (size_t)(rb - hs);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || strchr(s, ':') != colon)
			return -EINVAL;
		hs = s;
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, hs, hl);
	host[hl] = '\0';
	if (!colon[1])
		return -EINVAL;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || port > 65535 || colon[1] == '-' || colon[1] == '+')
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	if (s[0] != '[') {
		struct sockaddr_in *in = (struct sockaddr_in *)ret;

		if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
			return -EINVAL;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		*ret_len = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ret;

		if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
			return -EINVAL;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*ret_len = sizeof(*in6);
	}
	return 0;
}

void peer_addr_format(const struct sockaddr *sa, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
	} else {
		snprintf(buf, len, "?");
	}
}

bool peer_addr_is_wildcard(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return true;
}

static int parse_net(const char *tok, struct peer_net *ret)
{
	char buf[INET6_ADDRSTRLEN + 8];
	char *slash, *end;
	unsigned max;
	unsigned long prefix;

	if (strlen(tok) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, tok);
	slash = strchr(buf, '/');
	if (slash)
		*slash = '\0';
	memset(ret, 0, sizeof(*ret));
	if (inet_pton(AF_INET, buf, ret->addr) == 1) {
		ret->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, buf, ret->addr) == 1) {
		ret->family = AF_INET6;
		max = 128;
	} else {
		return -EINVAL;
	}
	ret->prefix = max;
	if (slash) {
		if (!slash[1] || slash[1] == '-' || slash[1] == '+')
			return -EINVAL;
		errno = 0;
		prefix = strtoul(slash + 1, &end, 10);
		if (errno || *end || prefix > max)
			return -EINVAL;
		ret->prefix = (unsigned)prefix;
	}
	return 0;
}

int peer_allow_parse(const char *s, struct peer_allow *ret, char *why, size_t wl)
{
	struct peer_allow a = { 0 };
	char *copy, *save = NULL, *tok;

	if (!s) {
		WHY("no allow-list");
		return -EINVAL;
	}
	copy = strdup(s);
	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		if (a.n == PEER_ALLOW_MAX) {
			WHY("more than %u networks in the allow-list", PEER_ALLOW_MAX);
			free(copy);
			return -EINVAL;
		}
		if (parse_net(tok, &a.nets[a.n]) < 0) {
			WHY("allow-list entry '%s' is not ADDR or ADDR/PREFIX", tok);
			free(copy);
			return -EINVAL;
		}
		a.n++;
	}
	free(copy);
	if (!a.n) {
		WHY("the allow-list is empty");
		return -EINVAL;
	}
	*ret = a;
	return 0;
}

static bool prefix_match(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned full = bits / 8, rest = bits % 8;

	if (memcmp(a, b, full))
		return false;
	if (!rest)
		return true;
	return ((a[full] ^ b[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

bool peer_allow_match(const struct peer_allow *a, const struct sockaddr *sa)
{
	uint8_t v4[4], v6[16];
	bool has4 = false, has6 = false;

	if (sa->sa_family == AF_INET) {
		memcpy(v4, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		has4 = true;
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *in6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		memcpy(v6, in6, 16);
		has6 = true;
		if (IN6_IS_ADDR_V4MAPPED(in6)) {
			memcpy(v4, v6 + 12, 4);
			has4 = true;
		}
	}
	for (unsigned i = 0; i < a->n; i++) {
		const struct peer_net *n = &a->nets[i];

		if (n->family == AF_INET && has4 && prefix_match(n->addr, v4, n->prefix))
			return true;
		if (n->family == AF_INET6 && has6 && prefix_match(n->addr, v6, n->prefix))
			return true;
	}
	return false;
}
