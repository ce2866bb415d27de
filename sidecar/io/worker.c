/* SPDX-License-Identifier: MIT */
/*
 * The I/O worker's thread and what control/ calls (io/worker.h): the
 * commands to it and the acks from it, the loop (worker_main()) that
 * takes SQEs, dispatches each to its operation (io/save.c, io/load.c,
 * io/query.c), reaps finished copies and settles detaching sessions, and
 * the worker's start and stop.  The loop and everything it calls run on
 * the worker thread; worker_command(), worker_wake() and
 * worker_cluster_done() on any.
 */
#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <urcu/urcu-memb.h>

#include "base/conf.h"
#include "wire/layout.h"
#include "store/lease.h"
#include "obs/account.h"
#include "obs/log.h"
#include "io/batch.h"
#include "io/load.h"
#include "io/mover.h"
#include "io/op.h"
#include "io/post.h"
#include "io/query.h"
#include "io/save.h"
#include "wire/sqe.h"
#include "base/util.h"
#include "io/worker.h"

#define POLL_BUDGET 32u		  /* SQEs per session per round: fairness */
#define SLEEP_MAX_NS (1000 * NSEC_PER_MSEC)
#define SLEEP_PENDING_NS (NSEC_PER_MSEC) /* while flushes or backlogs wait */
#define WATCH_NAP_NS 20000 /* naps while a SAVE AFTER waits for its fence value */

static void bump(struct worker *w)
{
	/*
	 * Release: the queued command or completion is visible to the worker
	 * that sees the new value (load-acquire at the top of its loop).
	 */
	__atomic_fetch_add(&w->word, 1, __ATOMIC_RELEASE);
	shmq_wake_word(&w->word);
}

static void send_cmd(struct worker *w, struct wmsg *c, enum wcmd_type type, struct wsession *s)
{
	c->type = type;
	c->s = s;
	/* The unlock orders what the control thread wrote before the worker's take. */
	pthread_mutex_lock(&w->lock);
	cds_list_add_tail(&c->node, &w->cmds);
	pthread_mutex_unlock(&w->lock);
	bump(w);
}

void worker_command(struct worker *w, enum wcmd_type type, struct wsession *s)
{
	send_cmd(w, &s->cmds[type], type, s);
}

void worker_wake(struct worker *w)
{
	bump(w);
}

void worker_cluster_done(struct op *op)
{
	send_cmd(op->w, &op->cmsg, WCMD_CLUSTER, op->s);
}

/* ---- acks to the control thread ---------------------------------- */

int worker_acks_init(struct worker_acks *a)
{
	CDS_INIT_LIST_HEAD(&a->list);
	pthread_mutex_init(&a->lock, NULL);
	a->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return a->efd < 0 ? -errno : 0;
}

void worker_acks_fini(struct worker_acks *a)
{
	if (a->efd >= 0)
		close(a->efd);
	a->efd = -1;
	pthread_mutex_destroy(&a->lock);
}

void worker_acks_take(struct worker_acks *a, struct cds_list_head *list)
{
	uint64_t v;
	ssize_t r = read(a->efd, &v, sizeof(v));

	(void)r; /* the list says what is there; the count only woke us */
	pthread_mutex_lock(&a->lock);
	cds_list_splice(&a->list, list);
	CDS_INIT_LIST_HEAD(&a->list);
	pthread_mutex_unlock(&a->lock);
}

static void ack(struct worker *w, struct wsession *s, enum wcmd_type type)
{
	post_ack(w, &s->acks[type], s, type);
}

/* A cluster op is back from the control thread. */
static void cluster_done(struct worker *w, struct op *op)
{
	op->s->cluster_out--;
	if (op->opcode == KVS_OP_QUERY && (op->flags & KVS_QUERY_FETCH))
		query_fetch_answer(w, op);
	else
		op_cluster_post(w, op);
}

static void finish(struct worker *w, struct op *op)
{
	if (op->opcode == KVS_OP_SAVE)
		save_finish(w, op);
	else
		load_finish(w, op);
}

static bool reap_done(struct worker *w)
{
	struct cds_list_head list;
	struct copy_batch *b, *tmp;

	if (!batch_sink_reap(&w->sink, &list))
		return false;
	cds_list_for_each_entry_safe(b, tmp, &list, node)
		finish(w, caa_container_of(b, struct op, batch));
	return true;
}

static void handle_sqe(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe)
{
	struct registration *reg = s->unregistering ? NULL : wsession_reg(s);
	struct sqe_limits lim = {
		.role = s->role,
		.max_keys = w->cfg->max_keys,
		.num_blocks = reg ? reg->layout->num_blocks : 0,
		.nr_layers = reg ? reg->layout->nr_layers : 0,
		.nr_fences = s->nr_fences,
	};
	struct sqe_args a;
	int r;

	__atomic_store_n(&s->inflight, s->inflight + 1, __ATOMIC_RELAXED);
	account_sqe(s->st);
	r = sqe_decode(sqe, s->args, s->args_size, &lim, w->scratch, &a);
	if (r == 0 &&
	    (sqe->opcode == KVS_OP_SAVE || sqe->opcode == KVS_OP_LOAD ||
	     sqe->opcode == KVS_OP_QUERY) &&
	    !wsession_sealed(s))
		r = -KVS_EUNSEALED;
	if (r < 0) {
		/* An engine can submit these in a loop: rate-limited per session. */
		if (r == -EOPNOTSUPP || log_enabled(LOG_DEBUG))
			slog_info_errno_rl(&s->log_rl, s, r, "SQE opcode %u rejected", sqe->opcode);
		load_refused(w, s, sqe, r); /* any opcode: only a LOAD's fence is released */
		return;
	}
	switch (sqe->opcode) {
	case KVS_OP_NOP:
		post(w, s, sqe->user_data, 0, 0, 0);
		break;
	case KVS_OP_QUERY:
		query_start(w, s, sqe, &a);
		break;
	case KVS_OP_RELEASE:
		post(w, s, sqe->user_data, lease_release(w->leases, sqe->lease, s->lh), 0, 0);
		break;
	case KVS_OP_SAVE:
		save_start(w, s, sqe, &a, reg);
		break;
	case KVS_OP_LOAD:
		load_start(w, s, sqe, &a, reg);
		break;
	case KVS_OP_FLUSH:
		flush_start(w, s, sqe);
		break;
	}
}

static bool poll_session(struct worker *w, struct wsession *s)
{
	struct kvs_sqe sqe;
	uint32_t idx, room;
	int n;

	if (s->broken || s->detaching)
		return false;
	post_backlog(s);
	if (s->bl_n)
		return false; /* the engine is not reaping: take nothing new */
	room = s->max_inflight - s->inflight;
	if (room == 0)
		return false;
	n = shmq_cons_peek(&s->sq, MIN(room, POLL_BUDGET), &idx);
	if (n < 0) {
		s->broken = true;
		return true;
	}
	for (int i = 0; i < n; i++) {
		/* A private copy: the engine may rewrite the slot at any time. */
		memcpy(&sqe, shmq_ring_entry(&s->sq, idx + (uint32_t)i), sizeof(sqe));
		handle_sqe(w, s, &sqe);
	}
	/* Arguments were copied above: the engine may reuse them after this. */
	if (n)
		shmq_cons_release(&s->sq, (uint32_t)n);
	return n > 0;
}

/* ---- commands and session bookkeeping ---------------------------- */

static void attach(struct worker *w, struct wsession *s)
{
	s->attached = true;
	cds_list_add_tail(&s->wnode, &w->sessions);
	w->nr_sessions++;
	w->rings_stale = true;
}

static bool process_cmds(struct worker *w)
{
	struct wmsg *c, *tmp;
	struct cds_list_head list;
	bool any;

	CDS_INIT_LIST_HEAD(&list);
	pthread_mutex_lock(&w->lock);
	cds_list_splice(&w->cmds, &list);
	CDS_INIT_LIST_HEAD(&w->cmds);
	pthread_mutex_unlock(&w->lock);
	any = !cds_list_empty(&list);
	cds_list_for_each_entry_safe(c, tmp, &list, node) {
		/* Off every list before it is handled: the session may send this type again. */
		cds_list_del(&c->node);
		switch (c->type) {
		case WCMD_ATTACH:
			attach(w, c->s);
			break;
		case WCMD_DETACH:
			c->s->detaching = true;
			w->rings_stale = true;
			break;
		case WCMD_UNREGISTER:
			c->s->unregistering = true;
			break;
		case WCMD_CLUSTER:
			cluster_done(w, caa_container_of(c, struct op, cmsg));
			break;
		default:
			break;
		}
	}
	return any;
}

/* Finish detaches and unregistrations whose copies have drained. */
static void settle_sessions(struct worker *w)
{
	struct wsession *s, *tmp;

	cds_list_for_each_entry_safe(s, tmp, &w->sessions, wnode) {
		if (s->broken && !s->broken_acked) {
			/* The control thread closes the socket, then sends DETACH. */
			s->broken_acked = true;
			w->rings_stale = true;
			slog_error(s, "ring protocol violated (impossible index): ending the session");
			ack(w, s, WCMD_BROKEN);
		}
		if (s->unregistering && s->copies == 0) {
			s->retired = wsession_reg(s);
			wsession_publish_reg(s, NULL);
			s->unregistering = false;
			ack(w, s, WCMD_UNREGISTER);
		}
		/* Cluster ops come back whatever happens (the registry has deadlines). */
		if (s->detaching && s->copies == 0 && s->cluster_out == 0) {
			bool flushing = false;
			struct op *op;

			cds_list_for_each_entry(op, &w->flushes, node)
				flushing |= op->s == s;
			if (flushing)
				continue;
			cds_list_del(&s->wnode);
			w->nr_sessions--;
			w->rings_stale = true;
			s->attached = false;
			ack(w, s, WCMD_DETACH);
		}
	}
}

/* ---- the loop ------------------------------------------------------ */

static int rebuild_rings(struct worker *w)
{
	struct wsession *s;
	unsigned n = 0;

	if (w->rings_cap < w->nr_sessions) {
		unsigned cap = MAX(w->nr_sessions, 2 * w->rings_cap);
		struct shmq_ring **r = realloc(w->rings, cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		w->rings = r;
		struct wsession **ss = realloc(w->ring_sessions, cap * sizeof(*ss));
		if (!ss)
			return -ENOMEM;
		w->ring_sessions = ss;
		w->rings_cap = cap;
	}
	cds_list_for_each_entry(s, &w->sessions, wnode) {
		if (s->broken || s->detaching)
			continue;
		w->rings[n] = &s->sq;
		w->ring_sessions[n] = s;
		n++;
	}
	w->rings_stale = false;
	return (int)n;
}

static bool needs_short_sleep(struct worker *w)
{
	struct wsession *s;

	/* Parked LOADs: the store's wake-up is the way on, a short sleep the safety net. */
	if (!cds_list_empty(&w->flushes) || !cds_list_empty(&w->parked))
		return true;
	cds_list_for_each_entry(s, &w->sessions, wnode)
		if (s->bl_n || s->detaching || s->unregistering)
			return true;
	return false;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t spin_ns = (uint64_t)w->cfg->spin_us * 1000;
	int64_t doze_ns = (int64_t)w->cfg->doze_us * 1000;
	uint64_t doze_for = (uint64_t)w->cfg->doze_ms * NSEC_PER_MSEC;
	uint64_t idle_since = now_ns();
	int nrings = 0;

	urcu_memb_register_thread();
	batch_sink_own(&w->sink);
	if (w->node >= 0 && numa_available() >= 0)
		numa_run_on_node(w->node);
	/* Here, not in worker_start(): a device context may belong to the thread that made it. */
	if (w->mover_ops->worker_init(w->dev, w->id, &w->mover) < 0) {
		w->mover = NULL;
		log_error("worker %u: %s %u unusable: its sessions will fail their copies", w->id,
			  w->mover_ops->dev_name, w->dev);
	}
	for (;;) {
		/*
		 * Pairs with the release in bump() and in batch_complete():
		 * commands and completions queued before are seen.
		 */
		uint32_t seen = __atomic_load_n(&w->word, __ATOMIC_ACQUIRE);
		struct wsession *s;
		bool busy = false;

		busy |= process_cmds(w);
		if (w->mover && w->mover->ops->poll)
			busy |= w->mover->ops->poll(w->mover);
		busy |= reap_done(w);
		cds_list_for_each_entry(s, &w->sessions, wnode)
			busy |= poll_session(w, s);
		busy |= reap_done(w); /* inline copies finished above */
		busy |= flush_check(w);
		if (load_check_parked(w))
			busy |= reap_done(w); /* copies done inline (nothing left to copy) */
		if (save_check_waiting(w))
			busy |= reap_done(w);
		post_publish(w);
		settle_sessions(w);
		/* Pairs with the store-release in worker_stop(). */
		if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE) && w->nr_sessions == 0)
			break;
		/* Copies only polling completes (GPU events): keep polling, do not sleep. */
		if (busy ||
		    (w->mover && w->mover->ops->inflight && w->mover->ops->inflight(w->mover))) {
			idle_since = now_ns();
			continue;
		}
		if (now_ns() - idle_since < spin_ns) {
			cpu_relax();
			continue;
		}
		if (w->rings_stale)
			nrings = rebuild_rings(w);
		if (nrings < 0) {
			nrings = 0;
			w->rings_stale = true;
		}
		unsigned bad = 0;
		int64_t sleep_ns = needs_short_sleep(w) ? SLEEP_PENDING_NS : SLEEP_MAX_NS;
		/*
		 * Dozing: naps, for a while after the last work, instead of a
		 * sleep only a submit's futex wake ends.  A thread that wakes
		 * often keeps its CPU out of deep idle (and a VM's vCPU out of
		 * the host's halt), which is most of what a wake-up costs.
		 */
		bool dozing = doze_ns && now_ns() - idle_since < doze_for;
		/* A SAVE AFTER's word is memory, not a futex: looked at between naps. */
		bool watching = !cds_list_empty(&w->waiting);
		int64_t nap = dozing ? MIN(doze_ns, sleep_ns) : sleep_ns;
		int r = shmq_wait_many(w->rings, (unsigned)nrings, &w->word, seen,
				       watching ? MIN(nap, WATCH_NAP_NS) : nap, &bad);

		if (r == -EPROTO && bad < (unsigned)nrings) {
			w->ring_sessions[bad]->broken = true;
			w->rings_stale = true;
		}
		/* A nap that ran out is not work: no spin after it, the dozing window runs on. */
		if ((dozing || watching) && r == -ETIMEDOUT)
			continue;
		idle_since = now_ns();
	}
	if (w->mover)
		w->mover->ops->worker_fini(w->mover);
	urcu_memb_unregister_thread();
	return NULL;
}

int worker_start(const struct worker_env *env, unsigned id, int node, const struct mover_ops *mover,
		 unsigned dev, struct worker **ret)
{
	struct worker *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return -ENOMEM;
	w->id = id;
	w->node = node;
	w->mover_ops = mover;
	w->dev = dev;
	w->cfg = env->cfg;
	w->acks = env->acks;
	w->ctr = env->ctr;
	w->store = env->store;
	w->leases = env->leases;
	w->cluster = env->cluster;
	w->peer = env->peer;
	snprintf(w->name, sizeof(w->name), "kvs-io-%u", id);
	pthread_mutex_init(&w->lock, NULL);
	CDS_INIT_LIST_HEAD(&w->cmds);
	batch_sink_init(&w->sink, &w->word);
	CDS_INIT_LIST_HEAD(&w->sessions);
	CDS_INIT_LIST_HEAD(&w->flushes);
	CDS_INIT_LIST_HEAD(&w->parked);
	CDS_INIT_LIST_HEAD(&w->waiting);
	w->scratch_size = sqe_arg_bytes(KVS_OP_SAVE, w->cfg->max_keys) + KVS_FETCH_HINT_MAX;
	w->scratch = aligned_alloc(64, round_up_u64(w->scratch_size, 64));
	w->blocks = calloc(w->cfg->max_keys, sizeof(*w->blocks));
	if (!w->scratch || !w->blocks) {
		free(w->scratch);
		free(w->blocks);
		free(w);
		return -ENOMEM;
	}
	r = -pthread_create(&w->thread, NULL, worker_main, w);
	if (r) {
		free(w->scratch);
		free(w->blocks);
		free(w);
		return r;
	}
	pthread_setname_np(w->thread, w->name);
	w->running = true;
	*ret = w;
	return 0;
}

void worker_stop(struct worker *w)
{
	if (!w)
		return;
	if (w->running) {
		__atomic_store_n(&w->stop, true, __ATOMIC_RELEASE);
		bump(w);
		pthread_join(w->thread, NULL);
	}
	free(w->rings);
	free(w->ring_sessions);
	free(w->scratch);
	free(w->blocks);
	batch_sink_fini(&w->sink);
	pthread_mutex_destroy(&w->lock);
	free(w);
}
