/* SPDX-License-Identifier: MIT */
/*
 * The daemon: configuration, the control thread's state (the event loop
 * and its sources, sessions, connection slots, workers) and the
 * process-wide counters.  Data only: every control/ module reads it;
 * control/lifecycle.c, which starts and stops the daemon, is the one
 * module that stands on all the others.
 */
#ifndef KVS_DAEMON_H
#define KVS_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu/list.h>

#include "base/conf.h"
#include "control/loop.h"
#include "control/slots.h"
#include "obs/counters.h"
#include "obs/log.h"
#include "io/worker.h"
#include "store/store.h"

/* One per device of every mover: the host's one and up to MOVER_MAX_DEVICES GPUs. */
#define MAX_WORKERS (1 + MOVER_MAX_DEVICES)

struct instance_table;
struct lease_table;
struct nspace_table;
struct peer;
struct pool;
struct registry;
struct ssd;
struct store;

struct daemon {
	struct kvs_config *cfg;
	const char *config_path;
	struct ev_loop loop;
	struct ev_source listen;  /* the listening socket; fd -1 when not listening */
	struct ev_source signals; /* signalfd: SIGTERM, SIGINT, SIGHUP */
	struct ev_source acked;	  /* eventfd of the workers' acks */
	struct ev_timer tick;	  /* every tick: lease TTLs, listening again */
	struct ev_timer sweep;	  /* each second: reclaim, timeouts */
	int lock_fd; /* flock on "<socket>.lock": one daemon per socket */
	bool stopping;
	uint64_t start_ns;

	struct cds_list_head sessions;
	unsigned nr_sessions;
	uint64_t next_session_id;

	struct slot_table slots; /* connection slots (slots.c) */

	/* accept() failed for want of fds: the listening socket rests until the next tick. */
	bool accept_paused;
	struct log_ratelimit accept_rl;

	/*
	 * The block store and the tables around it, as handles (a second
	 * tier stands beside the store): the control thread reaches them as
	 * d->..., workers through their struct worker_env.
	 */
	struct pool *pool;		  /* the host pool, the store's slots */
	struct store *store;		  /* the DRAM tier of the block store */
	struct store_hooks hooks;	  /* the store's listener: the cluster registry */
	struct lease_table *leases;	  /* QUERY's leases over the store's blocks */
	struct nspace_table *nspaces;	  /* namespaces (their blocks in the store) */
	struct instance_table *instances; /* instances (tenants of the store) */
	/*
	 * The cluster block registry (control/cluster.c); NULL without
	 * [cluster].  Control thread, but registry_insert/_remove/_mark and
	 * registry_get_stats are safe from any thread (cluster/registry.h).
	 */
	struct registry *reg;
	struct worker_cluster wcluster; /* the workers' view of reg (cluster_init()) */
	struct ev_source reg_ev;
	/*
	 * The peer service (control/peer-host.c, libkvspeer); NULL without
	 * [cluster] peer_listen.  Set at start, freed by peer_fini(); from
	 * the drain on its closing flag refuses new fetches.  Control thread;
	 * peer_sample() from the metrics thread too.
	 */
	struct peer *peer;
	/*
	 * The SSD tier (control/tier-attach.c); NULL without [ssd].  Its functions
	 * are safe from any thread (ssd/ssd.h); opened and closed here.
	 */
	struct ssd *ssd;
	bool reg_closing;	 /* cluster_shutdown() ran: ops complete with -ESHUTDOWN */

	struct worker *workers[MAX_WORKERS];
	unsigned nr_workers;
	struct worker *host_worker;
	struct worker_acks acks;

	/* Counted by every thread (obs/account.h), read by STATS and /metrics. */
	struct counters_global ctr;
};

#endif /* KVS_DAEMON_H */
