/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <strings.h>
#include <syslog.h>

#include "base/level.h"

static const char *const names[] = {
	[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
	[LOG_ERR] = "error",   [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info",   [LOG_DEBUG] = "debug",
};

int level_from_name(const char *s)
{
	for (int i = 0; i <= LOG_DEBUG; i++)
		if (strcasecmp(s, names[i]) == 0)
			return i;
	if (strcasecmp(s, "err") == 0)
		return LOG_ERR;
	if (strcasecmp(s, "warn") == 0)
		return LOG_WARNING;
	return -EINVAL;
}

const char *level_name(int level)
{
	if (level < 0 || level > LOG_DEBUG)
		return "?";
	return names[level];
}
