/* SPDX-License-Identifier: MIT */
/*
 * Prometheus endpoint: [metrics] listen = HOST:PORT serves /metrics (text
 * format 0.0.4) and /health (200 once ready, 503 before and while
 * draining) with libmicrohttpd on its own thread.  The families are the
 * rows of <kvstash/stats.h> that name one, in table order; their figures
 * are those of `kvstash stats`, taken by the daemon's sampler on this
 * thread.  Labels are bounded (node, direction, error kind, drop reason),
 * never per key, per session or per peer.  A group the sample lacks (the
 * registry's without [cluster]) shows no family at all.
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
 * A drive's latency histogram as the SSD tier keeps it (ssd/ssd.h,
 * SSD_HIST_BUCKETS): bucket i counts the I/Os below 2^i microseconds
 * (and at least 2^(i-1)); the last one counts the rest.  The peer
 * service's fetch latency has the same buckets (KVSPEER_HIST_BUCKETS).
 */
#define METRICS_SSD_DRIVES  16u
#define METRICS_SSD_BUCKETS 24u

struct metrics_ssd_hist {
	uint64_t buckets[METRICS_SSD_BUCKETS]; /* not cumulative: the reader sums */
	uint64_t sum_ns;
};

/* The I rows of KVS_STATS_SSD_DRIVE (<kvstash/stats.h>): one per direction. */
struct metrics_ssd_hists {
	struct metrics_ssd_hist write_lat, read_lat;
};

/* The I row of KVS_STATS_PEER: the fetches'. */
struct metrics_peer_hists {
	struct metrics_ssd_hist fetch_lat;
};

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
	/*
	 * The SSD tier's, when nr_ssd is 1 (kvstashd with [ssd]), and its
	 * nr_ssd_drives drives, each with its latency histograms.
	 */
	struct kvs_msg_stats_ssd ssd;
	unsigned nr_ssd, nr_ssd_drives;
	struct kvs_msg_stats_ssd_drive ssd_drives[METRICS_SSD_DRIVES];
	struct metrics_ssd_hists ssd_hists[METRICS_SSD_DRIVES];
	/*
	 * The peer service's, when nr_peer is 1 (kvstashd with [cluster]
	 * peer_listen), with its fetch latency histogram.  Its peers are
	 * only counted (nr_peers, peers_failed): their labels would be per
	 * peer.
	 */
	struct kvs_msg_stats_peer peer;
	unsigned nr_peer;
	struct metrics_peer_hists peer_hists;
};

typedef void metrics_sample_fn(void *arg, struct metrics_sample *smp);

/* Serve [metrics] listen (@listen; "" for none), sampling with @fn(@arg). */
int metrics_start(const char *listen, metrics_sample_fn *fn, void *arg);
void metrics_set_ready(bool ready);
void metrics_stop(void);

#endif /* KVS_METRICS_H */
