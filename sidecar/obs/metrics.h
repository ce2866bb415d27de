/* SPDX-License-Identifier: MIT */
/*
 * Prometheus endpoint: [metrics] listen = HOST:PORT serves /metrics (text
 * format 0.0.4) and /health (200 once ready, 503 before and while
 * draining) with libmicrohttpd on its own thread.  The families are the
 * rows of <kvstash/stats.h> that name one, in table order; their figures
 * are those of `kvstash stats`, taken by the daemon's sampler on this
 * thread.  Labels are bounded (node, direction, error kind, drop reason),
 * never per key or per session.  A group the sample lacks (the registry's
 * without [cluster]) shows no family at all.
 *
 * Built without libmicrohttpd, metrics_start() refuses a non-empty listen
 * address with a clear error.
 */
#ifndef KVS_METRICS_H
#define KVS_METRICS_H

#include <stdbool.h>

#include <kvstash/wire.h>

#include "obs/counters.h"

#define METRICS_MAX_NODES 64u

/*
 * One scrape's figures.  The sampler fills the messages as for a STATS
 * reply (nodes: at most max_nodes, their number in nr_nodes) and points
 * ctr at the live counters, which Prometheus alone shows more of
 * (histograms, error kinds).  It runs on the metrics thread: it may only
 * read what is safe to read from any thread.
 */
struct metrics_sample {
	struct kvs_msg_stats_global global;
	struct kvs_msg_stats_node *nodes;
	unsigned max_nodes, nr_nodes;
	const struct counters_global *ctr;
	/* The registry client's, when nr_registry is 1 (kvstashd with [cluster]). */
	struct kvs_msg_stats_registry registry;
	unsigned nr_registry;
};

typedef void metrics_sample_fn(void *arg, struct metrics_sample *smp);

/* Serve [metrics] listen (@listen; "" for none), sampling with @fn(@arg). */
int metrics_start(const char *listen, metrics_sample_fn *fn, void *arg);
void metrics_set_ready(bool ready);
void metrics_stop(void);

#endif /* KVS_METRICS_H */
