/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/mem.h"
#include "obs/log.h"
#include "base/level.h"
#include "base/util.h"

static struct {
	enum log_target target;
	int level;
	int fd;		/* stderr or the log file */
	char *file;
	int journal;	/* stderr goes to journald: use <N> prefixes */
	pthread_mutex_t lock; /* only log_open/reopen/close take it */
	pthread_mutex_t wlock; /* a line's writes (log_fullv()) */
	uint64_t rl_interval_ns;
	unsigned rl_burst;
} L = {
	.target = LOG_TARGET_STDERR,
	.level = LOG_INFO,
	.fd = STDERR_FILENO,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.wlock = PTHREAD_MUTEX_INITIALIZER,
	.rl_interval_ns = 10 * NSEC_PER_SEC,
	.rl_burst = 10,
};

/*
 * systemd sets JOURNAL_STREAM=dev:ino when stderr is a journal stream;
 * then "<N>" prefixes let journald keep the priority of each line.
 */
static int stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
		return 0;
	if (fstat(STDERR_FILENO, &st) < 0)
		return 0;
	return st.st_dev == dev && st.st_ino == ino;
}

static int open_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);

	return fd < 0 ? -errno : fd;
}

int log_open(enum log_target target, const char *file, int level)
{
	int r = 0;

	pthread_mutex_lock(&L.lock);
	L.level = level;
	L.target = target;
	L.journal = 0;
	switch (target) {
	case LOG_TARGET_STDERR:
		L.journal = stderr_is_journal();
		break;
	case LOG_TARGET_SYSLOG:
		openlog("kvstashd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
		break;
	case LOG_TARGET_FILE:
		free(L.file);
		L.file = file ? strdup(file) : NULL;
		if (!L.file) {
			r = -EINVAL;
			break;
		}
		r = open_file(L.file);
		if (r >= 0) {
			L.fd = r;
			r = 0;
		}
		break;
	}
	if (r < 0) {
		L.target = LOG_TARGET_STDERR;
		L.fd = STDERR_FILENO;
	}
	pthread_mutex_unlock(&L.lock);
	return r;
}

/* SIGHUP: let logrotate move the file away, then start a new one. */
int log_reopen(void)
{
	int r = 0;

	pthread_mutex_lock(&L.lock);
	if (L.target == LOG_TARGET_FILE) {
		int fd = open_file(L.file);

		if (fd < 0) {
			r = fd;
		} else {
			/*
			 * dup2 swaps the file under concurrent writers
			 * atomically: a line goes to the old or the new file.
			 */
			dup2(fd, L.fd);
			close(fd);
		}
	} else if (L.target == LOG_TARGET_SYSLOG) {
		closelog();
		openlog("kvstashd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	}
	pthread_mutex_unlock(&L.lock);
	return r;
}

void log_close(void)
{
	pthread_mutex_lock(&L.lock);
	if (L.target == LOG_TARGET_SYSLOG)
		closelog();
	else if (L.target == LOG_TARGET_FILE && L.fd != STDERR_FILENO)
		close(L.fd);
	L.file = mfree(L.file);
	L.fd = STDERR_FILENO;
	L.target = LOG_TARGET_STDERR;
	pthread_mutex_unlock(&L.lock);
}

int log_get_level(void)
{
	return __atomic_load_n(&L.level, __ATOMIC_RELAXED);
}

int log_fullv(int level, int err, const char *prefix, const char *fmt, va_list ap)
{
	char line[1024];
	size_t n = 0;
	int saved = errno;

	err = abs(err);
	if (L.target != LOG_TARGET_SYSLOG) {
		if (L.journal) {
			n += snprintf(line, sizeof(line), "<%d>", level);
		} else {
			struct timespec ts;
			struct tm tm;

			clock_gettime(CLOCK_REALTIME, &ts);
			localtime_r(&ts.tv_sec, &tm);
			n += strftime(line, sizeof(line), "%Y-%m-%d %H:%M:%S", &tm);
			n += snprintf(line + n, sizeof(line) - n, ".%03ld %s: ",
				      ts.tv_nsec / 1000000, level_name(level));
		}
	}
	if (prefix && n < sizeof(line))
		n += snprintf(line + n, sizeof(line) - n, "%s: ", prefix);
	if (n < sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (err && n < sizeof(line))
		n += snprintf(line + n, sizeof(line) - n, ": %s", strerror(err));
	if (n >= sizeof(line) - 1)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	line[n] = '\0';

	if (L.target == LOG_TARGET_SYSLOG) {
		syslog(level, "%s", line);
	} else {
		/*
		 * One write() per line, and the rest of a short one (seen once
		 * in CI: an ASan kvstashd's "ready" line cut after four bytes,
		 * so a test waiting for it timed out) under the writers' lock,
		 * so that lines of concurrent threads never mix.
		 */
		pthread_mutex_lock(&L.wlock);
		for (size_t off = 0; off < n;) {
			ssize_t w = write(L.fd, line + off, n - off);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				break; /* nowhere to report it */
			off += (size_t)w;
		}
		pthread_mutex_unlock(&L.wlock);
	}
	errno = saved;
	return -err;
}

int log_full(int level, int err, const char *prefix, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = log_fullv(level, err, prefix, fmt, ap);
	va_end(ap);
	return r;
}

void log_set_ratelimit(uint64_t interval_ns, unsigned burst)
{
	/* Before the threads that read it exist: pthread_create() orders it. */
	L.rl_interval_ns = interval_ns;
	L.rl_burst = burst;
}

void log_ratelimit_flush(struct log_ratelimit *rl, const char *who)
{
	if (!rl || !rl->suppressed)
		return;
	log_full(rl->level, 0, who ? who : "?", "%u similar log lines suppressed", rl->suppressed);
	rl->suppressed = 0;
	rl->level = LOG_DEBUG;
}

bool log_ratelimit_pass(struct log_ratelimit *rl, int level, const char *who)
{
	uint64_t now;

	if (!L.rl_burst)
		return true;
	now = now_ns();
	if (!rl->begin_ns || now - rl->begin_ns >= L.rl_interval_ns) {
		/* A new window: say what the last one dropped before its first line. */
		log_ratelimit_flush(rl, who);
		rl->begin_ns = now;
		rl->printed = 0;
	}
	if (rl->printed < L.rl_burst) {
		rl->printed++;
		return true;
	}
	if (!rl->suppressed || level < rl->level)
		rl->level = level;
	rl->suppressed++;
	return false;
}
