/* SPDX-License-Identifier: MIT */
/*
 * The one rule for names that cross a boundary (instances, namespaces,
 * node names on the peer wire): 1 to @max - 1 characters of
 * [A-Za-z0-9._:/@+=-], NUL-terminated within @max bytes.  They appear in
 * logs, status and Redis keys, so nothing else may pass.  kvstashd's
 * control protocol and libkvspeer's wire both check with it, so a name
 * one accepts the other accepts.
 *
 * Header-only (common/).
 */
#ifndef KVS_COMMON_NAME_H
#define KVS_COMMON_NAME_H

#include <ctype.h>
#include <errno.h>
#include <string.h>

/* 0, or -EINVAL when the @max bytes at @s are not such a name. */
static inline int name_check(const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	if (n == 0 || n == max)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (!isalnum(c) && !strchr("._:/@+=-", c))
			return -EINVAL;
	}
	return 0;
}

#endif /* KVS_COMMON_NAME_H */
