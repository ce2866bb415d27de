/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/why.h"
#include "cluster/regaddr.h"


int reg_addr_parse(const char *s, struct reg_addr *ret, char *why, size_t wl)
{
	struct reg_addr a = { 0 };
	const char *colon, *host = s;
	size_t hl;
	char *end;
	long port;

	if (!s || !*s) {
		WHY("empty address");
		return -EINVAL;
	}
	if (strncmp(s, "unix:", 5) == 0 || s[0] == '/') {
		const char *p = s[0] == '/' ? s : s + 5;

		/* sun_path holds 108 bytes with the NUL. */
		if (p[0] != '/' || strlen(p) >= 108) {
			WHY("'%s': a Unix socket needs an absolute path below 108 bytes", s);
			return -EINVAL;
		}
		a.unix_path = true;
		snprintf(a.host, sizeof(a.host), "%s", p);
		*ret = a;
		return 0;
	}
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':') {
			WHY("'%s': expected [address]:port", s);
			return -EINVAL;
		}
		host = s + 1;
		hl = (size_t)(rb - host);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || strchr(s, ':') != colon) {
			WHY("'%s': expected host:port, [v6]:port or unix:/path", s);
			return -EINVAL;
		}
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || hl >= sizeof(a.host)) {
		WHY("'%s': bad host", s);
		return -EINVAL;
	}
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port < 1 || port > 65535) {
		WHY("'%s': bad port", s);
		return -EINVAL;
	}
	memcpy(a.host, host, hl);
	a.host[hl] = '\0';
	if (strpbrk(a.host, " \t/")) {
		WHY("'%s': bad host", s);
		return -EINVAL;
	}
	a.port = (int)port;
	*ret = a;
	return 0;
}
