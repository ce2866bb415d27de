/* SPDX-License-Identifier: MIT */
/*
 * kvstashd logging.  Lines carry a level, and for session events the
 * session's id, pid, instance and rank; errors carry the errno text.
 *
 * Targets: stderr (plain timestamps, or syslog priority prefixes "<3>"
 * when stderr is connected to journald), syslog, or a file reopened on
 * SIGHUP.  Safe to call from any thread: each line is one write().
 */
#ifndef KVS_LOG_H
#define KVS_LOG_H

#include <stdarg.h>
#include <stdlib.h>
#include <syslog.h>

enum log_target {
	LOG_TARGET_STDERR,
	LOG_TARGET_SYSLOG,
	LOG_TARGET_FILE,
};

struct session;

int log_open(enum log_target target, const char *file, int level);
int log_reopen(void);
void log_close(void);
void log_set_level(int level);
int log_get_level(void);
int log_level_from_string(const char *s);
const char *log_level_to_string(int level);

/* Returns -abs(err) when err != 0, else 0: `return log_errno(...)`. */
int log_full(int level, int err, const struct session *s, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int log_fullv(int level, int err, const struct session *s, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

#define log_enabled(level) ((level) <= log_get_level())

#define log_at(level, err, s, ...) \
	(log_enabled(level) ? log_full((level), (err), (s), __VA_ARGS__) : -abs(err))

#define log_error(...) log_at(LOG_ERR, 0, NULL, __VA_ARGS__)
#define log_warning(...) log_at(LOG_WARNING, 0, NULL, __VA_ARGS__)
#define log_notice(...) log_at(LOG_NOTICE, 0, NULL, __VA_ARGS__)
#define log_info(...) log_at(LOG_INFO, 0, NULL, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, 0, NULL, __VA_ARGS__)
#define log_error_errno(err, ...) log_at(LOG_ERR, (err), NULL, __VA_ARGS__)
#define log_warning_errno(err, ...) log_at(LOG_WARNING, (err), NULL, __VA_ARGS__)
#define log_info_errno(err, ...) log_at(LOG_INFO, (err), NULL, __VA_ARGS__)
#define log_debug_errno(err, ...) log_at(LOG_DEBUG, (err), NULL, __VA_ARGS__)

/* Session-scoped: prefix "session N (pid P, instance I rank R): ". */
#define slog_error(s, ...) log_at(LOG_ERR, 0, (s), __VA_ARGS__)
#define slog_warning(s, ...) log_at(LOG_WARNING, 0, (s), __VA_ARGS__)
#define slog_notice(s, ...) log_at(LOG_NOTICE, 0, (s), __VA_ARGS__)
#define slog_info(s, ...) log_at(LOG_INFO, 0, (s), __VA_ARGS__)
#define slog_debug(s, ...) log_at(LOG_DEBUG, 0, (s), __VA_ARGS__)
#define slog_error_errno(s, err, ...) log_at(LOG_ERR, (err), (s), __VA_ARGS__)
#define slog_warning_errno(s, err, ...) log_at(LOG_WARNING, (err), (s), __VA_ARGS__)
#define slog_info_errno(s, err, ...) log_at(LOG_INFO, (err), (s), __VA_ARGS__)
#define slog_debug_errno(s, err, ...) log_at(LOG_DEBUG, (err), (s), __VA_ARGS__)

#endif /* KVS_LOG_H */
