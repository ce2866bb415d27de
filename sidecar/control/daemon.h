/* SPDX-License-Identifier: MIT */
/*
 * The daemon: configuration, the control thread's state (sockets, epoll,
 * timer, signals, sessions) and the process-wide counters.
 */
#ifndef KVS_DAEMON_H
#define KVS_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu/list.h>

#include "base/conf.h"
#include "control/slots.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "io/worker.h"

/* One per device of every mover: the host's one and up to CUDA_MAX_DEVICES GPUs. */
#define MAX_WORKERS (1 + MOVER_MAX_DEVICES)

struct instance_table;
struct lease_table;
struct nspace_table;
struct pool;
struct store;

/* Process-wide counters (relaxed atomics), read by `kvstash stats`. */
struct daemon_stats {
	uint64_t query_ops;
	uint64_t query_blocks_hit;
	uint64_t query_blocks_missed;
	uint64_t save_ops;
	uint64_t save_blocks_stored;
	uint64_t save_blocks_skipped;
	uint64_t load_ops;
	uint64_t load_blocks;
	uint64_t bytes_saved;
	uint64_t bytes_loaded;
	uint64_t save_ns;
	uint64_t load_ns;
	uint64_t errors;
	uint64_t sessions_total;
	uint64_t sessions_closed; /* of those counted in sessions_total */
	uint64_t sessions_refused;
	uint64_t protocol_errors;
	uint64_t errors_by_kind[ERRK_COUNT];
	struct hist save_hist; /* copy latency, per direction */
	struct hist load_hist;
};

#define STAT_ADD(d, field, v) __atomic_fetch_add(&(d)->stats.field, (v), __ATOMIC_RELAXED)
#define STAT_GET(d, field) __atomic_load_n(&(d)->stats.field, __ATOMIC_RELAXED)

struct ack {
	struct session *s;
	enum wcmd_type type;
	struct cds_list_head node;
};

struct daemon {
	struct kvs_config *cfg;
	const char *config_path;
	int epfd;
	int listen_fd;
	int timer_fd;
	int signal_fd;
	int ack_fd; /* eventfd: workers -> control thread */
	int lock_fd; /* flock on "<socket>.lock": one daemon per socket */
	bool stopping;
	uint64_t start_ns;

	struct cds_list_head sessions;
	unsigned nr_sessions;
	uint64_t next_session_id;
	/*
	 * Sessions freed while an event batch is handled: a later event of
	 * the same batch may still point at one, so the memory goes only
	 * after the batch (daemon_run()).
	 */
	struct cds_list_head graveyard;

	/* Connection slots (slots.c). */
	struct cds_list_head uids;
	struct cds_list_head slot_lists[SLOT_KINDS]; /* least recently active first */
	unsigned slot_count[SLOT_KINDS];
	unsigned fds_per_uid; /* [server] max_fds_per_uid, 0 resolved */

	/* accept() failed for want of fds: the listening socket rests until the next tick. */
	bool accept_paused;
	struct log_ratelimit accept_rl;

	/*
	 * The block store and the tables around it, as handles (a second
	 * tier stands beside the store): workers reach them as s->d->...
	 */
	struct pool *pool;		  /* the host pool, the store's slots */
	struct store *store;		  /* the DRAM tier of the block store */
	struct lease_table *leases;	  /* QUERY's leases over the store's blocks */
	struct nspace_table *nspaces;	  /* namespaces (their blocks in the store) */
	struct instance_table *instances; /* instances (tenants of the store) */

	struct worker *workers[MAX_WORKERS];
	unsigned nr_workers;
	struct worker *host_worker;

	pthread_mutex_t ack_lock;
	struct cds_list_head acks;

	struct daemon_stats stats;
};

/* Worker side: an ack for @s (any thread). */
void daemon_ack(struct daemon *d, struct session *s, enum wcmd_type type);

/* Run the control loop until SIGTERM/SIGINT and the drain finished. */
int daemon_run(struct daemon *d);

int daemon_init(struct daemon *d, struct kvs_config *cfg, const char *config_path);
void daemon_fini(struct daemon *d);

#endif /* KVS_DAEMON_H */
