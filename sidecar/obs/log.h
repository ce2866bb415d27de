/* SPDX-License-Identifier: MIT */
/*
 * kvstashd logging.  Lines carry a level, a prefix naming what they are
 * about (for session events the session's id, pid, instance and rank: its
 * `prefix`), and for errors the errno text.
 *
 * Targets: stderr (plain timestamps, or syslog priority prefixes "<3>"
 * when stderr is connected to journald), syslog, or a file reopened on
 * SIGHUP.  Safe to call from any thread: each line is one write().
 */
#ifndef KVS_LOG_H
#define KVS_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <syslog.h>

enum log_target {
	LOG_TARGET_STDERR,
	LOG_TARGET_SYSLOG,
	LOG_TARGET_FILE,
};

int log_open(enum log_target target, const char *file, int level);
int log_reopen(void);
void log_close(void);
int log_get_level(void);

/*
 * "PREFIX: text: errno text"; @prefix NULL: none.  Returns -abs(err) when
 * err != 0, else 0: `return log_error_errno(...)`.
 */
int log_full(int level, int err, const char *prefix, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int log_fullv(int level, int err, const char *prefix, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

#define log_enabled(level) ((level) <= log_get_level())

#define log_at(level, err, prefix, ...) \
	(log_enabled(level) ? log_full((level), (err), (prefix), __VA_ARGS__) : -abs(err))

#define log_error(...) log_at(LOG_ERR, 0, NULL, __VA_ARGS__)
#define log_warning(...) log_at(LOG_WARNING, 0, NULL, __VA_ARGS__)
#define log_notice(...) log_at(LOG_NOTICE, 0, NULL, __VA_ARGS__)
#define log_info(...) log_at(LOG_INFO, 0, NULL, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, 0, NULL, __VA_ARGS__)
#define log_error_errno(err, ...) log_at(LOG_ERR, (err), NULL, __VA_ARGS__)
#define log_warning_errno(err, ...) log_at(LOG_WARNING, (err), NULL, __VA_ARGS__)
#define log_info_errno(err, ...) log_at(LOG_INFO, (err), NULL, __VA_ARGS__)
#define log_debug_errno(err, ...) log_at(LOG_DEBUG, (err), NULL, __VA_ARGS__)

/*
 * Scoped to @s, anything with a `prefix` string (a session: "session N
 * (pid P, instance I rank R)"); the macros only read s->prefix, so this
 * file knows no session.
 */
#define slog_error(s, ...)		log_at(LOG_ERR, 0, (s)->prefix, __VA_ARGS__)
#define slog_warning(s, ...)		log_at(LOG_WARNING, 0, (s)->prefix, __VA_ARGS__)
#define slog_notice(s, ...)		log_at(LOG_NOTICE, 0, (s)->prefix, __VA_ARGS__)
#define slog_info(s, ...)		log_at(LOG_INFO, 0, (s)->prefix, __VA_ARGS__)
#define slog_debug(s, ...)		log_at(LOG_DEBUG, 0, (s)->prefix, __VA_ARGS__)
#define slog_error_errno(s, err, ...)	log_at(LOG_ERR, (err), (s)->prefix, __VA_ARGS__)
#define slog_warning_errno(s, err, ...) log_at(LOG_WARNING, (err), (s)->prefix, __VA_ARGS__)
#define slog_info_errno(s, err, ...)	log_at(LOG_INFO, (err), (s)->prefix, __VA_ARGS__)
#define slog_debug_errno(s, err, ...)	log_at(LOG_DEBUG, (err), (s)->prefix, __VA_ARGS__)

/*
 * Rate limiting, after systemd's log_ratelimit: through one state, at most
 * `burst` lines per `interval` ([log] ratelimit_burst, ratelimit_interval);
 * the rest are counted, and the count is logged ("N similar log lines
 * suppressed") before the next line that passes, or by
 * log_ratelimit_flush() when the state's owner goes away.  So a peer that
 * provokes a line per request writes a few lines per interval, and the
 * operator still learns how many it provoked.
 *
 * A state belongs to one thread (a session's control-side state and the
 * uid states: the control thread; a session's ring state: its worker), so
 * it takes no lock.  The count's line carries the prefix @who (the state's
 * owner: a session's prefix, "uid N", "accept").
 */
struct log_ratelimit {
	uint64_t begin_ns;   /* start of the current window */
	uint32_t printed;    /* lines passed in the window */
	uint32_t suppressed; /* lines dropped since the last count was logged */
	int level;	     /* the most severe level dropped (lowest number) */
};

/* Set once at start, before any thread that logs (burst 0: no limit). */
void log_set_ratelimit(uint64_t interval_ns, unsigned burst);
/* May a line at @level pass now?  Logs the count of dropped lines first. */
bool log_ratelimit_pass(struct log_ratelimit *rl, int level, const char *who);
/* Log the count of lines dropped since the last report, if any. */
void log_ratelimit_flush(struct log_ratelimit *rl, const char *who);

/*
 * A line through @rl: the count of dropped lines goes out with the prefix
 * @who, the line itself with @prefix.
 */
#define log_at_rl(rl, who, level, err, prefix, ...)                     \
	(log_enabled(level) && log_ratelimit_pass((rl), (level), (who)) \
		 ? log_full((level), (err), (prefix), __VA_ARGS__)      \
		 : -abs(err))

/* Scoped to @s (see slog_error()) and rate-limited through @rl, a state of @s. */
#define slog_warning_rl(rl, s, ...) \
	log_at_rl((rl), (s)->prefix, LOG_WARNING, 0, (s)->prefix, __VA_ARGS__)
#define slog_info_rl(rl, s, ...) log_at_rl((rl), (s)->prefix, LOG_INFO, 0, (s)->prefix, __VA_ARGS__)
#define slog_error_errno_rl(rl, s, err, ...) \
	log_at_rl((rl), (s)->prefix, LOG_ERR, (err), (s)->prefix, __VA_ARGS__)
#define slog_warning_errno_rl(rl, s, err, ...) \
	log_at_rl((rl), (s)->prefix, LOG_WARNING, (err), (s)->prefix, __VA_ARGS__)
#define slog_info_errno_rl(rl, s, err, ...) \
	log_at_rl((rl), (s)->prefix, LOG_INFO, (err), (s)->prefix, __VA_ARGS__)

#endif /* KVS_LOG_H */
