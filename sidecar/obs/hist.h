/* SPDX-License-Identifier: MIT */
/*
 * Latency histograms: fixed buckets (seconds, as Prometheus has them), a
 * sum and a count, each a relaxed atomic, so any thread observes and any
 * thread reads without a lock.  A reader may see a bucket counted before
 * the count: a scrape is a moment, not a transaction.
 */
#ifndef KVS_HIST_H
#define KVS_HIST_H

#include <stdint.h>

/* Upper bounds of the buckets (seconds); the last bucket is +Inf. */
#define HIST_BUCKETS 14
extern const double hist_bounds_s[HIST_BUCKETS - 1];

struct hist {
	uint64_t buckets[HIST_BUCKETS]; /* not cumulative: the reader sums */
	uint64_t sum_ns;
	uint64_t count;
};

void hist_observe(struct hist *h, uint64_t ns);

/* A copy of @h, bucket by bucket (relaxed loads). */
void hist_read(const struct hist *h, struct hist *ret);

#endif /* KVS_HIST_H */
