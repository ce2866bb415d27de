/* SPDX-License-Identifier: MIT */
/*
 * I/O workers: one per device of every mover (io/mover.h): the host's,
 * and one per GPU.  A worker polls the SQs of its sessions, validates and
 * runs each SQE, starts the copies on its mover, reaps their completions
 * and posts CQEs.  It busy-polls while
 * work arrives and, after spin_us without any, sleeps on the futex words
 * of its SQs with NEED_WAKEUP set, so engines make a syscall only then.
 *
 * The control thread talks to a worker through commands (attach, detach,
 * unregister; stop) and gets acks back on the queue it gave the worker
 * (struct worker_acks); a cluster operation goes to the control thread as
 * an ack and comes back as a command (worker_cluster_done()), from the
 * control thread or, for a fetch, from the peer service thread.  Every
 * copy batch comes back through the worker's sink (batch_complete(), from
 * whichever thread the mover finished it on).
 *
 * A worker sees a session only through its data-path view, struct
 * wsession, which the control plane's struct session embeds; io/ includes
 * no control/ header.  Only control/ goes back from the view to the
 * session (container_of, session_of() in control/session.h).
 */
#ifndef KVS_WORKER_H
#define KVS_WORKER_H

#include "io/worker-types.h"

/* -errno. */
int worker_acks_init(struct worker_acks *a);
void worker_acks_fini(struct worker_acks *a);
/* Control thread: move every queued ack, oldest first, onto @list. */
void worker_acks_take(struct worker_acks *a, struct cds_list_head *list);

/* A worker for device @dev of @mover, placed on NUMA node @node. */
int worker_start(const struct worker_env *env, unsigned id, int node, const struct mover_ops *mover,
		 unsigned dev, struct worker **ret);
/* Stop after every session was detached; joins the thread. */
void worker_stop(struct worker *w);

void worker_command(struct worker *w, enum wcmd_type type, struct wsession *s);

/* Any thread: look at the parked LOADs again (the store's reads from SSD ended). */
void worker_wake(struct worker *w);

/*
 * A cluster op the worker handed over (WCMD_CLUSTER ack) is done, its
 * results set: back to its worker as a command, which it posts.  Called
 * on the control thread (a registry answer, an op that could not start:
 * control/cluster.c, control/peer-host.c) and on the peer service thread (a
 * fetch's done and join callbacks, control/peer-host.c); the command mutex
 * makes any thread fine.
 */
void worker_cluster_done(struct op *op);

#endif /* KVS_WORKER_H */
