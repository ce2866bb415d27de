/* SPDX-License-Identifier: MIT */
/*
 * Prometheus endpoint: [metrics] listen = HOST:PORT serves /metrics (text
 * format 0.0.4) and /health (200 once ready, 503 before and while
 * draining) with libmicrohttpd on its own thread.  The figures are those
 * of `kvstash stats`; labels are bounded (node, direction, error kind),
 * never per key or per session.
 *
 * Built without libmicrohttpd, metrics_start() refuses a non-empty listen
 * address with a clear error.
 */
#ifndef KVS_METRICS_H
#define KVS_METRICS_H

#include <stdbool.h>
#include <stdint.h>

struct daemon;

/* Copy latency buckets (seconds) of kvstash_copy_duration_seconds. */
#define HIST_BUCKETS 14
extern const double hist_bounds_s[HIST_BUCKETS - 1];

struct hist { /* relaxed atomics */
	uint64_t buckets[HIST_BUCKETS]; /* the last one is +Inf */
	uint64_t sum_ns;
	uint64_t count;
};

void hist_observe(struct hist *h, uint64_t ns);

/* Error kinds of kvstash_errors_total{kind}: a bounded set. */
enum err_kind {
	ERRK_INVAL,
	ERRK_RANGE,
	ERRK_TOOBIG,
	ERRK_FAULT,
	ERRK_NOTSUP,
	ERRK_PERM,
	ERRK_UNSEALED,
	ERRK_NOLEASE,
	ERRK_ALREADY,
	ERRK_ACCES,
	ERRK_NOSPC,
	ERRK_BUSY,
	ERRK_IO,
	ERRK_CANCELED,
	ERRK_NOMEM,
	ERRK_OTHER,
	ERRK_COUNT,
};
enum err_kind err_kind_of(int neg_errno);
const char *err_kind_name(enum err_kind k);

int metrics_start(struct daemon *d);
void metrics_set_ready(bool ready);
void metrics_stop(void);

#endif /* KVS_METRICS_H */
