/* SPDX-License-Identifier: MIT */
/*
 * How a module below kvstashd's logger reports: it never writes a line
 * itself, it hands each line to the hook its owner gave it.
 *
 * The modules the daemon starts with a hook (the SSD tier, the cluster
 * registry and its Sentinel client) all take a kvs_log_hook: a syslog
 * level, an errno or 0 (positive: the daemon prints it with %m's text),
 * and the line without a newline.  The public libraries' hooks
 * (kvs_log_fn, kvspeer_log_fn) are the same without the errno, which
 * their messages spell out.
 *
 * Header-only (common/).
 */
#ifndef KVS_COMMON_LOGHOOK_H
#define KVS_COMMON_LOGHOOK_H

#include <stdio.h>

typedef void kvs_log_hook(void *arg, int level, int err, const char *msg);

/* Lines longer than this are cut: a hook line names one event. */
#define LOG_HOOK_LINE 512

/*
 * Format a line and hand it to @fn(@arg, @level, |@err|, line), or do
 * nothing when @fn is NULL (the hook is optional everywhere).  @err may
 * be given as -errno or errno.
 */
#define LOG_HOOK(fn, arg, level, err, ...)                                               \
	do {                                                                             \
		kvs_log_hook *hook_fn_ = (fn);                                           \
		if (hook_fn_) {                                                          \
			char hook_msg_[LOG_HOOK_LINE];                                   \
			int hook_err_ = (err);                                           \
			snprintf(hook_msg_, sizeof(hook_msg_), __VA_ARGS__);             \
			hook_fn_((arg), (level), hook_err_ < 0 ? -hook_err_ : hook_err_, \
				 hook_msg_);                                             \
		}                                                                        \
	} while (0)

#endif /* KVS_COMMON_LOGHOOK_H */
