/* SPDX-License-Identifier: MIT */
/*
 * I/O workers: one per GPU and one for host-backend sessions.  A worker
 * polls the SQs of its sessions, validates and runs each SQE, starts the
 * copies, reaps their completions and posts CQEs.  It busy-polls while
 * work arrives and, after spin_us without any, sleeps on the futex words
 * of its SQs with NEED_WAKEUP set, so engines make a syscall only then.
 *
 * The control thread talks to a worker through commands (attach, detach,
 * unregister; stop) and gets acks back on the queue it gave the worker
 * (struct worker_acks).  Copy threads hand finished ops back through
 * worker_complete().
 */
#ifndef KVS_WORKER_H
#define KVS_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu/list.h>

#include "io/mover.h"
#include "control/instance.h"

struct counters_global;
struct kvs_config;
struct session;
struct lease;
struct save_ent;

enum wcmd_type {
	WCMD_ATTACH,
	WCMD_DETACH,	 /* the session ends: drain, then forget it */
	WCMD_UNREGISTER, /* drain its copies, then drop its registration */
	WCMD_BROKEN,	 /* ack only: the session broke the ring protocol */
	WCMD_TYPES,
};

/*
 * A command (control thread to worker) or an ack (worker to control
 * thread) about one session.  Every session embeds one of each type for
 * each direction (session.cmds, session.acks), so sending one never
 * allocates and never fails: a lost DETACH would leak the session.  A
 * type is sent again only after the previous one was answered (UNREGISTER
 * after its ack; the others once per session), so a message is never on
 * two lists at once.
 */
struct wmsg {
	enum wcmd_type type;
	struct session *s;
	struct cds_list_head node;
};

/*
 * The acks of all workers to the control thread: a list under a mutex and
 * an eventfd the control loop polls.  Queueing takes the mutex, which also
 * orders everything the worker wrote to the session before it against
 * the control thread's handling of the ack.
 */
struct worker_acks {
	pthread_mutex_t lock;
	struct cds_list_head list; /* of struct wmsg, oldest first */
	int efd;
};

/* -errno. */
int worker_acks_init(struct worker_acks *a);
void worker_acks_fini(struct worker_acks *a);
/* Control thread: move every queued ack, oldest first, onto @list. */
void worker_acks_take(struct worker_acks *a, struct cds_list_head *list);

/* An operation that outlives its SQE: SAVE, LOAD, FLUSH. */
struct op {
	struct session *s;
	uint8_t opcode;
	uint8_t flags;
	uint64_t user_data;
	int32_t res;
	uint64_t r0, r1;
	struct cds_list_head node; /* done list / flush list */
	/* SAVE */
	uint64_t seq;
	struct cds_list_head snode; /* in wsess.saves */
	struct save_mark imark;	    /* in the instance's saves */
	struct save_ent *ents;
	uint32_t nents;
	uint32_t skipped;
	uint32_t nospace;
	uint32_t quota; /* keys past the instance's unsealed share */
	/* LOAD */
	struct lease *lease;
	uint32_t nblocks;
	/* FLUSH */
	uint64_t mark;
	/* copy */
	struct copy_batch batch;
	void *batch_priv; /* the mover's */
};

struct worker {
	unsigned id;
	int node;	/* NUMA node, -1: none */
	int dev;	/* CUDA device index (cuda.h), -1: the host worker */
	void *cuda;	/* the CUDA mover's state (movers/cuda/cuda.c) */
	char name[32];
	const struct kvs_config *cfg;
	struct worker_acks *acks;    /* where its acks go */
	struct counters_global *ctr; /* the daemon's counters */
	pthread_t thread;
	bool running;

	pthread_mutex_t lock;	   /* cmds and done */
	struct cds_list_head cmds;
	struct cds_list_head done; /* ops finished by copy threads */
	uint32_t word;		   /* futex: bumped on every cmd / done */

	/* worker thread only */
	struct cds_list_head sessions;
	unsigned nr_sessions;
	struct shmq_ring **rings;
	struct session **ring_sessions;
	unsigned rings_cap;
	bool rings_stale;
	struct cds_list_head flushes; /* FLUSH ops waiting */
	struct cds_list_head local_done;
	uint8_t *scratch;	      /* argument copies (QUERY) */
	struct block **blocks;	      /* QUERY hits */
	uint64_t scratch_size;
	bool stop;
};

/*
 * @dev: CUDA device index for a GPU worker, -1 for the host worker.  The
 * worker acks on @acks and counts into @ctr; all three outlive it.
 */
int worker_start(const struct kvs_config *cfg, struct worker_acks *acks,
		 struct counters_global *ctr, unsigned id, int node, int dev, struct worker **ret);
/* Stop after every session was detached; joins the thread. */
void worker_stop(struct worker *w);

void worker_command(struct worker *w, enum wcmd_type type, struct session *s);

/* A copy finished (any thread). */
void worker_complete(struct worker *w, struct op *op);

#endif /* KVS_WORKER_H */
