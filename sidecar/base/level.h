/* SPDX-License-Identifier: MIT */
/*
 * Log levels by name: syslog's LOG_EMERG..LOG_DEBUG and the words
 * kvstash.conf ([log] level) and the log lines use for them.  In base/
 * because the configuration parses them and the logger (obs/) prints
 * them, and obs/ stands on base/, not the other way round.  Pure.
 */
#ifndef KVS_BASE_LEVEL_H
#define KVS_BASE_LEVEL_H

/* The level named @s (any case; "err" and "warn" too), or -EINVAL. */
int level_from_name(const char *s);
/* The name of @level, or "?" for none. */
const char *level_name(int level);

#endif /* KVS_BASE_LEVEL_H */
