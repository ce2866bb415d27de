/* SPDX-License-Identifier: MIT */
/*
 * The data the I/O worker's pieces share, with no function of theirs:
 * the commands and acks between the control thread and a worker, a
 * session's data-path view (struct wsession), an operation in flight
 * (struct op) and the worker itself.  Each field says which thread
 * writes it and what orders it.  io/worker.h is the worker's interface
 * and includes this; the pieces (io/worker.c, io/save.c, io/load.c,
 * io/query.c, io/op.c, io/post.c) include it, and this includes none of
 * them, so their modules form no cycle.
 */
#ifndef KVS_WORKER_TYPES_H
#define KVS_WORKER_TYPES_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <sys/types.h>

#include <urcu/list.h>
#include <shmq/shmq.h>
#include <kvstash/abi.h>

#include "io/mover.h"
#include "io/registration.h"
#include "io/saveorder.h"

/* The registry's accounting of whose registrations: opaque to io/ (cluster/ledger.h). */
struct registry_tally;
#include "obs/log.h"

struct counters_global;
struct daemon;
struct counters_session;
struct kvs_config;
struct lease;
struct lease_holder;
struct lease_table;
struct save_ent;
struct store;
struct store_ns;
struct store_tenant;
struct wsession;

enum wcmd_type {
	WCMD_ATTACH,
	WCMD_DETACH,	 /* the session ends: drain, then forget it */
	WCMD_UNREGISTER, /* drain its copies, then drop its registration */
	WCMD_BROKEN,	 /* ack only: the session broke the ring protocol */
	/*
	 * A cluster operation (FLUSH or QUERY with the cluster flag): the
	 * worker hands it to the control thread, which owns the registry,
	 * and gets it back done.  Carried by the op's own struct wmsg
	 * (op.cmsg), not by the session's arrays, as a session may have many.
	 */
	WCMD_CLUSTER,
	WCMD_TYPES,
};

/*
 * A command (control thread to worker) or an ack (worker to control
 * thread) about one session.  Every session embeds one of each type for
 * each direction, so sending one never
 * allocates and never fails: a lost DETACH would leak the session.  They
 * live in the session's data-path view (wsession.cmds, wsession.acks).  A
 * type is sent again only after the previous one was answered (UNREGISTER
 * after its ack; the others once per session), so a message is never on
 * two lists at once.
 */
struct wmsg {
	enum wcmd_type type;
	struct wsession *s;
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

/*
 * A session as the data path sees it: embedded in the control plane's
 * struct session (as session.w), which fills the first part and owns the
 * memory; the worker serving the session owns the ring state.
 */
struct wsession {
	/*
	 * Set by the control thread before it sends ATTACH and constant
	 * after: worker_command()'s mutex (and the release in bump()) orders
	 * them before the worker first reads them, in process_cmds().
	 */
	uint64_t id;
	uid_t uid;
	uint32_t role;		     /* KVS_ROLE_*, from HELLO */
	uint32_t tp_rank;	     /* from HELLO */
	uint32_t max_inflight;	     /* ops taken from the SQ and not yet posted, at most */
	const char *prefix;	     /* the session's log prefix: slog_*() take it from here */
	struct counters_session *st; /* the session's counters */
	/* Of its instance and namespace, which outlive the session's attachment. */
	struct save_order *order;    /* the instance's SAVEs: FLUSH_INSTANCE */
	const uint8_t *sealed;	     /* the instance's: wsession_sealed() */
	struct store_tenant *tenant; /* the instance's account in the store */
	struct lease_holder *lh;     /* the instance's leases */
	struct store_ns *ns;	     /* the namespace's blocks */
	/*
	 * With [cluster] (else NULL): what the registry did with the
	 * session's registrations and the instance's (control/cluster.c,
	 * opaque here); a cluster FLUSH reports from them.
	 */
	struct registry_tally *reg_tally, *reg_itally;

	/*
	 * Set by the control thread (store-release, wsession_publish_reg())
	 * when NULL; cleared only by the worker on UNREGISTER; read by the
	 * worker with load-acquire (wsession_reg()).
	 */
	struct registration *reg;
	/*
	 * Handed back by the worker on UNREGISTER, before its ack: the ack
	 * queue's mutex (struct worker_acks) orders the write before the
	 * control thread reads it.
	 */
	struct registration *retired;
	/* To and from the worker, one of each type (struct wmsg says why). */
	struct wmsg cmds[WCMD_TYPES];
	struct wmsg acks[WCMD_TYPES];

	/* Ring state: worker-owned once attached; the control thread set up the rings. */
	struct shmq_ring sq; /* consumer */
	struct shmq_ring cq; /* producer */
	uint8_t *args;
	uint64_t args_size;
	uint32_t inflight;    /* ops taken from the SQ and not yet posted */
	uint32_t copies;      /* SAVE/LOAD ops using the registration */
	uint32_t cluster_out; /* cluster ops at the control thread */
	/*
	 * KVS_PART_CLUSTER (HELLO said KVS_HELLO_CLUSTER; else NULL): one
	 * answer per CQ entry, written before the CQE at the same index is
	 * committed (so the commit's store-release publishes both).
	 */
	struct kvs_cluster_answer *answers;
	/*
	 * KVS_PART_FENCES (HELLO said KVS_HELLO_FENCES; else NULL, 0): set
	 * before ATTACH, constant after.  Shared with the engine, which may
	 * write any slot at any time: a value is only ever compared, status
	 * and blocks only ever written here.
	 */
	struct kvs_fence *fences;
	uint32_t nr_fences;
	struct bl_ent *backlog; /* CQEs waiting for CQ space */
	uint32_t bl_head, bl_n, bl_cap;
	bool cq_dirty; /* reserved CQEs to commit */
	bool attached;
	bool detaching;
	bool unregistering;
	bool broken; /* ring protocol violated: stop reading it */
	bool broken_acked;
	uint64_t save_next;	    /* sequence of the next SAVE */
	struct cds_list_head saves; /* SAVE ops in flight, by sequence */
	struct cds_list_head wnode; /* in worker.sessions */
	/*
	 * The worker's lines about this session (rejected SQEs).  The control
	 * thread reads it only in session_free(), after the DETACH ack: the
	 * ack queue's mutex (struct worker_acks) orders the worker's last
	 * write before it.
	 */
	struct log_ratelimit log_rl;
};

static inline struct registration *wsession_reg(struct wsession *s)
{
	/* Pairs with the store-release in wsession_publish_reg(). */
	return __atomic_load_n(&s->reg, __ATOMIC_ACQUIRE);
}

static inline void wsession_publish_reg(struct wsession *s, struct registration *reg)
{
	/* Layout and imports are complete before the worker can see them. */
	__atomic_store_n(&s->reg, reg, __ATOMIC_RELEASE);
}

static inline bool wsession_sealed(const struct wsession *s)
{
	/* Pairs with the store-release in instance_register(). */
	return __atomic_load_n(s->sealed, __ATOMIC_ACQUIRE);
}

/* A CQE waiting for CQ space, with its cluster answer (malloc'ed) if it has one. */
struct bl_ent {
	struct kvs_cqe cqe;
	struct kvs_cluster_answer *ans;
};

/* An operation that outlives its SQE: SAVE, LOAD, FLUSH, cluster QUERY. */
struct op {
	struct wsession *s;
	uint8_t opcode;
	uint8_t flags;
	uint64_t user_data;
	int32_t res;
	uint64_t r0, r1;
	struct cds_list_head node; /* flush list */
	/* SAVE */
	uint64_t seq;
	struct cds_list_head snode; /* in wsession.saves */
	struct save_mark imark;	    /* in the instance's saves */
	struct save_ent *ents;
	uint32_t nents;
	uint32_t skipped;
	uint32_t nospace;
	uint32_t quota; /* keys past the instance's unsealed share */
	/* LOAD */
	struct lease *lease;
	uint32_t nblocks;
	uint32_t layer_begin, layer_count;
	uint32_t *block_ids; /* parked (worker.parked): its blocks' ids, copied from the SQE */
	uint32_t next;	     /* parked: blocks before it handed to the mover (in parts) */
	uint32_t parts;	     /* parked: parts being copied */
	bool reads_done;     /* parked: none READING any more; off the parked list */
	int err;	     /* parked: the first part's error */
	uint64_t copied;     /* parked: bytes its parts copied */
	struct op *parent;   /* a part: the parked LOAD it copies for */
	/* SAVE AFTER, LOAD PROGRESS: its fence slot and value (struct kvs_fence) */
	bool fenced;
	uint32_t fence_slot, fence_value;
	uint64_t deadline; /* SAVE AFTER, waiting (worker.waiting): -ETIMEDOUT after it */
	/* QUERY: KVS_CQE_PENDING of its CQE */
	uint32_t cqe_flags;
	/* FLUSH */
	uint64_t mark;
	/*
	 * Cluster FLUSH and QUERY, away from the worker between its ack
	 * (WCMD_CLUSTER) and the command back: the ack queue's mutex orders
	 * the worker's writes before the control thread reads them, the
	 * worker's command mutex the results (res, r0, r1, ans; a fetch's
	 * fetched and fetch_err, set on the peer service thread) before the
	 * worker posts them.
	 */
	struct wmsg cmsg;
	struct worker *w;		/* whose op it is */
	void *cmark;			/* FLUSH: its barrier (worker_cluster.mark()) */
	uint8_t tag[KVS_KEY_SIZE];	/* QUERY: the namespace's digest */
	uint8_t (*ckeys)[KVS_KEY_SIZE]; /* QUERY: the keys after the local hits */
	uint32_t nckeys;
	struct kvs_cluster_answer *ans; /* QUERY: its answer */
	/*
	 * Fetching QUERY (KVS_QUERY_FETCH): ckeys holds every key of the SQE
	 * (nckeys), hits0 the local hits before the fetch, hint the node hint
	 * ("" for the registry's choice); the control side (control/peer-host.c)
	 * sets fetched (blocks sealed from the peer) and fetch_err.
	 */
	uint32_t hits0;
	int32_t fetched;
	int32_t fetch_err;
	char hint[KVS_FETCH_HINT_MAX];
	struct daemon *w_daemon; /* the control side's, while it holds the op */
	/* copy */
	struct copy_batch batch; /* handed to the mover; comes back through the sink */
	uint64_t t0;		 /* when it was submitted */
};

struct worker {
	unsigned id;
	int node;			   /* NUMA node, -1: none */
	const struct mover_ops *mover_ops; /* the mover of its device */
	unsigned dev;			   /* which of the mover's devices */
	struct mover *mover; /* worker thread: its instance; NULL if it could not start */
	char name[32];
	const struct kvs_config *cfg;
	struct worker_acks *acks;    /* where its acks go */
	struct counters_global *ctr; /* the daemon's counters */
	struct store *store;
	struct lease_table *leases;
	const struct worker_cluster *cluster; /* NULL: no cluster */
	bool peer;			      /* a peer service: QUERY may fetch */
	pthread_t thread;
	bool running;

	pthread_mutex_t lock; /* cmds */
	struct cds_list_head cmds;
	uint32_t word;		/* futex: bumped on every cmd and on every completion from afar */
	struct batch_sink sink; /* finished copy batches, of its mover */

	/* worker thread only */
	struct cds_list_head sessions;
	unsigned nr_sessions;
	struct shmq_ring **rings;
	struct wsession **ring_sessions;
	unsigned rings_cap;
	bool rings_stale;
	struct cds_list_head flushes; /* FLUSH ops waiting */
	struct cds_list_head parked;  /* LOADs waiting for blocks read from SSD */
	struct cds_list_head waiting; /* SAVE AFTERs waiting for their fence value */
	uint8_t *scratch;	      /* argument copies (QUERY) */
	struct block **blocks;	      /* QUERY hits */
	uint64_t scratch_size;
	bool stop;
};

/*
 * The cluster as a worker sees it.  The worker never calls the registry:
 * control/cluster.c implements this over it, and cluster operations go to
 * the control thread (WCMD_CLUSTER) and come back (worker_cluster_done()).
 */
struct worker_cluster {
	/*
	 * Any thread (the worker, once every SAVE before a FLUSH sealed, so
	 * that their registrations are queued before it): a barrier counting
	 * @tally's registrations (NULL: everyone's), into *@ret_mark for the
	 * control thread's flush of it, which must follow.  0, -ENOMEM, or
	 * -EAGAIN when the registry's queue is full even for barriers.
	 */
	int (*mark)(void *arg, struct registry_tally *tally, void **ret_mark);
	void *arg;
};

/*
 * What the daemon gives every worker; all of it outlives the workers.  A
 * worker sees no struct daemon: it acks, counts and reaches the store
 * through these alone.
 */
struct worker_env {
	const struct kvs_config *cfg;
	struct worker_acks *acks;	      /* where acks go */
	struct counters_global *ctr;	      /* the daemon's counters */
	struct store *store;		      /* the block store: SAVE, QUERY */
	struct lease_table *leases;	      /* QUERY's leases: LOAD, RELEASE */
	const struct worker_cluster *cluster; /* NULL: no cluster */
	bool peer;			      /* the peer service runs (control/peer-host.c) */
};

#endif /* KVS_WORKER_TYPES_H */
