/* SPDX-License-Identifier: MIT */
/*
 * kvstashd without hiredis: the registry's functions, refusing.  A daemon
 * whose configuration names a Redis address says at start (and in
 * --check-config) that cluster support is not compiled in, rather than
 * running as a node that silently registers nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cluster/registry.h"

#define NOT_COMPILED_IN                                                            \
	"cluster support is not compiled in (kvstashd was built without hiredis: " \
	"apt-get install libhiredis-dev nettle-dev, configure --with-hiredis)"

bool registry_compiled_in(void)
{
	return false;
}

int registry_digest(const struct nsdigest_geometry *g, uint8_t ret[REG_DIGEST_SIZE])
{
	(void)g;
	(void)ret;
	return -EOPNOTSUPP;
}

int registry_new(const struct registry_config *cfg, const struct registry_ops *ops,
		 struct registry **ret, char *why, size_t wl)
{
	(void)cfg;
	(void)ops;
	(void)ret;
	snprintf(why, wl, "%s", NOT_COMPILED_IN);
	return -EOPNOTSUPP;
}

/* Nothing below is reachable without a registry; they exist so callers link. */
void registry_shutdown(struct registry *r)
{
	(void)r;
}

bool registry_closed(const struct registry *r)
{
	(void)r;
	return true;
}

void registry_free(struct registry *r)
{
	(void)r;
}

int registry_fd(const struct registry *r)
{
	(void)r;
	return -1;
}

void registry_dispatch(struct registry *r)
{
	(void)r;
}

void registry_tick(struct registry *r)
{
	(void)r;
}

uint32_t registry_insert(struct registry *r, struct registry_tally *t,
			 const uint8_t ns[REG_DIGEST_SIZE], const uint8_t (*keys)[REG_KEY_SIZE],
			 uint32_t n)
{
	(void)r;
	(void)t;
	(void)ns;
	(void)keys;
	(void)n;
	return 0;
}

uint32_t registry_remove(struct registry *r, struct registry_tally *t,
			 const uint8_t ns[REG_DIGEST_SIZE], const uint8_t (*keys)[REG_KEY_SIZE],
			 uint32_t n)
{
	(void)r;
	(void)t;
	(void)ns;
	(void)keys;
	(void)n;
	return 0;
}

int registry_mark(struct registry *r, struct registry_tally *t, struct registry_mark *ret)
{
	(void)r;
	(void)t;
	(void)ret;
	return -EOPNOTSUPP;
}

struct registry_tally *registry_tally_new(struct registry *r, struct registry_tally *parent)
{
	(void)r;
	(void)parent;
	return NULL;
}

void registry_tally_put(struct registry *r, struct registry_tally *t)
{
	(void)r;
	(void)t;
}

int registry_flush(struct registry *r, const struct registry_mark *mark, uint32_t timeout_ms,
		   registry_flush_cb *cb, void *arg)
{
	(void)r;
	(void)mark;
	(void)timeout_ms;
	(void)cb;
	(void)arg;
	return -EOPNOTSUPP;
}

int registry_query(struct registry *r, const uint8_t ns[REG_DIGEST_SIZE],
		   const uint8_t (*keys)[REG_KEY_SIZE], uint32_t n, uint32_t timeout_ms,
		   registry_query_cb *cb, void *arg)
{
	(void)r;
	(void)ns;
	(void)keys;
	(void)n;
	(void)timeout_ms;
	(void)cb;
	(void)arg;
	return -EOPNOTSUPP;
}

const char *registry_state_name(int s)
{
	(void)s;
	return "not compiled in";
}

void registry_get_stats(const struct registry *r, struct registry_stats *ret)
{
	(void)r;
	memset(ret, 0, sizeof(*ret));
}
