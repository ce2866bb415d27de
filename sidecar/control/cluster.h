/* SPDX-License-Identifier: MIT */
/*
 * kvstashd's side of the cluster block registry (cluster/registry.h; the
 * model is docs/CLUSTER.md): it starts the registry from [cluster], puts
 * its fd on the control loop, feeds it the store's resident blocks after
 * every lease acquisition (backfill), and runs the cluster FLUSH and
 * QUERY operations the I/O workers hand over.
 *
 * Who calls what:
 *   - the store, through cluster_store_hooks (any thread, store lock
 *     held): inserts on seal, removes when a sealed block goes; both
 *     enqueue without blocking (registry_insert/_remove);
 *   - a worker, through a WCMD_CLUSTER ack (io/worker.h), with an op whose
 *     local part is done (FLUSH: every earlier SAVE sealed and the
 *     registry mark taken; QUERY: the local hits leased); the control
 *     thread (cluster_on_op()) starts the registry call and returns the
 *     op with worker_cluster_done() from the registry's callback, which
 *     always comes (the registry has deadlines, and shutdown completes
 *     everything pending).
 *
 * Control thread only, except the hooks.
 */
#ifndef KVS_CONTROL_CLUSTER_H
#define KVS_CONTROL_CLUSTER_H

#include <stdbool.h>

struct daemon;
struct kvs_config;
struct op;
struct store_hooks;

/* The store's hooks into @ret, reporting to @d's registry (d->reg may be NULL). */
void cluster_store_hooks(struct daemon *d, struct store_hooks *ret);

/*
 * --check-config: the [cluster] section as the registry would take it
 * (address, names, timeouts, the password file).  0 or -errno with the
 * reason in @why.
 */
int cluster_check_config(const struct kvs_config *cfg, char *why, size_t wl);

/*
 * Start the registry when [cluster] names a Redis (d->reg stays NULL
 * otherwise): connecting, the lease and the backfill run from the loop.
 * After the store exists, before the workers start.  -errno, logged.
 */
int cluster_init(struct daemon *d);

/* SIGTERM: complete every cluster op pending, release the lease. */
void cluster_shutdown(struct daemon *d);
/* The registry let go of Redis (or there is none): the drain may end. */
bool cluster_closed(const struct daemon *d);
/* After the workers and the store: free the registry. */
void cluster_fini(struct daemon *d);

/* A worker handed @op over (its WCMD_CLUSTER ack). */
void cluster_on_op(struct daemon *d, struct op *op);

/*
 * Every session gets its registry tallies (its own, its instance's,
 * shared by the instance's sessions) before ATTACH, so that its cluster FLUSH counts exactly its
 * own registrations (or its instance's); the last of an instance's
 * sessions to close puts the instance's.  No registry: nothing.
 * -ENOMEM.  cluster_session_close() after the DETACH ack.
 */
struct session;
int cluster_session_open(struct daemon *d, struct session *s);
void cluster_session_close(struct daemon *d, struct session *s);

#endif /* KVS_CONTROL_CLUSTER_H */
