/* SPDX-License-Identifier: MIT */
/* [ssd] of kvstash.conf (base/conf.c's key table) into a struct ssd_config. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/conf.h"
#include "ssd/ssd.h"

int ssd_config_from_kvs(const struct kvs_config *cfg, struct ssd_config *ret,
			struct ssd_conf_paths *store, char *err, size_t errlen)
{
	struct ssd_config c;
	char *save = NULL, *tok;

	memset(&c, 0, sizeof(c));
	memset(store, 0, sizeof(*store));
	if (!cfg->ssd_path || !cfg->ssd_path[0]) {
		*ret = c; /* no [ssd] path: no SSD tier */
		return 0;
	}
	store->buf = strdup(cfg->ssd_path);
	if (!store->buf)
		return -ENOMEM;
	for (tok = strtok_r(store->buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		if (c.nr_paths == SSD_MAX_DRIVES) {
			snprintf(err, errlen, "[ssd] path: more than %u drives", SSD_MAX_DRIVES);
			ssd_conf_paths_free(store);
			return -E2BIG;
		}
		if (tok[0] != '/') {
			snprintf(err, errlen, "[ssd] path: '%s' is not an absolute path", tok);
			ssd_conf_paths_free(store);
			return -EINVAL;
		}
		store->paths[c.nr_paths++] = tok;
	}
	c.paths = store->paths;
	c.size = cfg->ssd_size;
	c.region_size = cfg->ssd_region_size;
	c.queue_depth = cfg->ssd_queue_depth;
	c.write_queue = cfg->ssd_write_queue;
	c.write_rate = cfg->ssd_write_rate;
	/* Parsed and checked once, at load (a T_ENUM key). */
	c.policy = cfg->ssd_write_policy == SSD_WRITE_FILTER ? SSD_POLICY_FILTER : SSD_POLICY_SPILL;
	*ret = c;
	return 0;
}

void ssd_conf_paths_free(struct ssd_conf_paths *store)
{
	if (!store)
		return;
	free(store->buf);
	memset(store, 0, sizeof(*store));
}
