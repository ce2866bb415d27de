/* SPDX-License-Identifier: MIT */
/*
 * The SSD tier's API when kvstashd is built without liburing: ssd_open()
 * fails with -EOPNOTSUPP and says so; nothing else can be reached without
 * a struct ssd.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ssd/ssd.h"

int ssd_open(const struct ssd_config *cfg, struct ssd **ret, char *err, size_t errlen)
{
	snprintf(err, errlen,
		 "the SSD tier is not compiled in (kvstashd was built without liburing)");
	return -EOPNOTSUPP;
}

void ssd_close(struct ssd *ssd)
{
}

void ssd_abandon(struct ssd *ssd)
{
}

int ssd_ns(struct ssd *ssd, const void *ident, size_t len, uint32_t *ret_ns)
{
	return -EOPNOTSUPP;
}

int ssd_ns_ident(const char *name, uint64_t fingerprint, uint64_t slot_bytes, uint32_t tp_size,
		 bool replicated, uint8_t ret_ident[SSD_NS_MAX])
{
	return -EOPNOTSUPP;
}

int ssd_lookup(struct ssd *ssd, uint32_t ns, const uint8_t key[SSD_KEY_SIZE], uint32_t shard,
	       struct ssd_loc *ret_loc)
{
	return -ENOENT;
}

int ssd_write(struct ssd *ssd, const struct ssd_write *w, void **ret_displaced)
{
	return -ENODEV;
}

int ssd_read(struct ssd *ssd, const struct ssd_loc *loc, void *dst, size_t cap, void *cookie)
{
	return -ENODEV;
}

int ssd_wait_recovered(struct ssd *ssd, int timeout_ms)
{
	return 0;
}

int ssd_wait_idle(struct ssd *ssd, int timeout_ms)
{
	return 0;
}

const char *ssd_drive_state_name(uint32_t state)
{
	return "not compiled in";
}

const char *ssd_drive_path(const struct ssd *ssd, unsigned i)
{
	return NULL;
}

void ssd_get_stats(struct ssd *ssd, struct ssd_stats *ret)
{
	memset(ret, 0, sizeof(*ret));
}
