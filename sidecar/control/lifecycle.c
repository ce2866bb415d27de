/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <numa.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <urcu/urcu-memb.h>
#if HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "store/store.h"
#include "io/mover.h"
#include "control/admin.h"
#include "control/cluster.h"
#include "control/peer-host.h"
#include "control/tier-attach.h"
#include "control/daemon.h"
#include "control/lifecycle.h"
#include "control/instance.h"
#include "store/lease.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "control/nspace.h"
#include "store/pool.h"
#include "control/server.h"
#include "control/protocol.h"
#include "control/session.h"
#include "base/util.h"

#define DRAIN_TIMEOUT_NS (30 * NSEC_PER_SEC)

/* The workers acked (control loop). */
static void on_acks(struct ev_source *src, uint32_t events)
{
	struct daemon *d = container_of(src, struct daemon, acked);
	struct cds_list_head list;
	struct wmsg *a, *tmp;

	CDS_INIT_LIST_HEAD(&list);
	worker_acks_take(&d->acks, &list);
	cds_list_for_each_entry_safe(a, tmp, &list, node) {
		/* Off the list first: the session may be freed, or get this type again. */
		cds_list_del(&a->node);
		if (a->type == WCMD_CLUSTER)
			cluster_on_op(d, caa_container_of(a, struct op, cmsg));
		else
			session_on_ack(session_of(a->s), a->type);
	}
}

static int parse_nodes(const struct kvs_config *cfg, int *nodes, unsigned max)
{
	unsigned n = 0;

	if (strcmp(cfg->numa, "off") == 0 || numa_available() < 0) {
		if (strcmp(cfg->numa, "off") && strcmp(cfg->numa, "auto"))
			log_warning("[pool] numa = %s but this host has no NUMA support: unbound",
				    cfg->numa);
		nodes[0] = -1;
		return 1;
	}
	/* One region per NUMA node that hosts a device (a GPU). */
	if (strcmp(cfg->numa, "auto") == 0 && (n = movers_device_nodes(nodes, max)) > 0)
		return (int)n;
	if (strcmp(cfg->numa, "auto") == 0) {
		/* Without GPUs the host worker is the only device: one region on its node. */
		int cpu = sched_getcpu();

		nodes[0] = cpu >= 0 ? numa_node_of_cpu(cpu) : 0;
		if (nodes[0] < 0)
			nodes[0] = 0;
		return 1;
	}
	for (const char *p = cfg->numa; *p && n < max;) {
		char *end;
		long v = strtol(p, &end, 10);

		if (end == p)
			break;
		if (v < 0 || v > numa_max_node()) {
			log_error("[pool] numa: node %ld does not exist (max %d)", v, numa_max_node());
			return -EINVAL;
		}
		nodes[n++] = (int)v;
		p = *end == ',' ? end + 1 : end;
	}
	return n ? (int)n : -EINVAL;
}

/* A namespace's slot is reclaimed: its blocks go from the store. */
static unsigned drop_nspace(void *arg, struct nspace *ns)
{
	return store_drop_nspace(arg, &ns->in_store);
}

/*
 * [server] max_fds_per_uid, 0 meaning half of the fds kvstashd may open
 * (main() raised the soft limit to the hard one): one uid's sessions can
 * never take the fds every other uid's connections need.
 */
static unsigned fds_per_uid(const struct kvs_config *cfg)
{
	struct rlimit rl;

	if (cfg->max_fds_per_uid)
		return cfg->max_fds_per_uid;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1u << 20;
	return (unsigned)MIN(rl.rlim_cur / 2, 1u << 30);
}

/*
 * One I/O worker per device of every mover, in table order, each on its
 * device's NUMA node (devices without one: @node, the pool's first): the
 * host worker is workers[0], GPU i's workers[1 + i].
 */
static int start_workers(struct daemon *d, int node)
{
	const struct worker_env env = {
		.cfg = d->cfg,
		.acks = &d->acks,
		.ctr = &d->ctr,
		.store = d->store,
		.leases = d->leases,
		.cluster = d->reg ? &d->wcluster : NULL,
		.peer = d->peer != NULL,
	};
	const struct mover_ops *mv;
	unsigned devs;

	for (unsigned k = 0; (mv = mover_at(k, &devs)); k++) {
		for (unsigned dev = 0; dev < devs; dev++) {
			struct worker *w;
			int r;

			/* Sized for every device: a worker missing here would be a hole at HELLO. */
			if (d->nr_workers == MAX_WORKERS)
				return log_error_errno(E2BIG, "more than %u devices", MAX_WORKERS);
			r = worker_start(&env, d->nr_workers,
					 mv->device_node ? mv->device_node(dev) : node, mv, dev,
					 &w);
			if (r < 0)
				return log_error_errno(r, "cannot start the I/O worker of %s %u",
						       mv->dev_name, dev);
			d->workers[d->nr_workers] = w;
			/* Release: the worker before its count (tier_wake()'s load-acquire). */
			__atomic_store_n(&d->nr_workers, d->nr_workers + 1, __ATOMIC_RELEASE);
			if (mv == mover_for_device(KVS_DEVICE_HOST))
				d->host_worker = w;
		}
	}
	return 0;
}

/* Every tick (100 ms): lease TTLs; listening again after EMFILE. */
static void on_tick(struct ev_timer *t, uint64_t now)
{
	struct daemon *d = container_of(t, struct daemon, tick);

	lease_sweep(d->leases);
	server_resume(d);
}

/* Each second: partial blocks, idle namespaces, silent connections. */
static void on_sweep(struct ev_timer *t, uint64_t now)
{
	struct daemon *d = container_of(t, struct daemon, sweep);

	store_reclaim_partial(d->store, (uint64_t)d->cfg->partial_timeout_ms * NSEC_PER_MSEC);
	nspace_sweep(d->nspaces);
	slots_sweep(&d->slots, now);
}

static void handle_signals(struct ev_source *src, uint32_t events);

/* The slot table closes a connection through its session. */
static void close_slot(struct slot_holder *h, int why)
{
	session_close(container_of(h, struct session, sl), why);
}

/* A connection has 10 s to say HELLO: libkvstash says it with its connect(). */
#define HANDSHAKE_TIMEOUT_NS (10 * NSEC_PER_SEC)

/* The movers pin the pool's chunks as its start-up threads fault them. */
static const struct pool_pin pool_pin = { movers_pin, movers_unpin };

/*
 * The control loop and its first sources: the signalfd, the workers'
 * acks, the tick and the sweep.  First of all: it makes what
 * daemon_fini() takes apart (also on failure).
 */
static int init_loop(struct daemon *d)
{
	sigset_t mask;
	int r;

	/* Signals go to the signalfd only: block them before any thread starts. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	r = ev_loop_init(&d->loop);
	if (r == 0)
		r = worker_acks_init(&d->acks);
	if (r == 0) {
		d->signals.fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
		r = d->signals.fd < 0 ? -errno : 0;
	}
	if (r < 0)
		return log_error_errno(r, "cannot create the control loop's fds");
	d->signals.fn = handle_signals;
	d->acked.fd = d->acks.efd;
	d->acked.fn = on_acks;
	ev_add(&d->loop, &d->signals, EPOLLIN);
	ev_add(&d->loop, &d->acked, EPOLLIN);
	ev_timer_add(&d->loop, &d->tick, 0, on_tick);
	ev_timer_add(&d->loop, &d->sweep, NSEC_PER_SEC, on_sweep);
	return 0;
}

/*
 * The pool on NUMA nodes @nodes (@n of them), pinned for the movers, and
 * the store over it, with @sp's limits.
 */
static int init_store(struct daemon *d, struct store_params *sp, const int *nodes, unsigned n)
{
	struct pool *pool;
	int r;

	r = pool_create(d->cfg, nodes, n, movers_pin_memory() ? &pool_pin : NULL, &pool);
	if (r < 0)
		return r;
	/* Ours from here: daemon_fini() unpins and destroys it. */
	d->pool = pool;
	sp->pool = pool;
	sp->revoke = lease_revoke_for;
	sp->leases = d->leases;
	cluster_store_hooks(d, &d->hooks);
	sp->hooks = &d->hooks;
	r = store_new(sp, &d->store);
	if (r < 0)
		return log_error_errno(r, "cannot create the block index");
	return 0;
}

int daemon_init(struct daemon *d, struct kvs_config *cfg, const char *config_path)
{
	const struct lease_params lp = {
		.ttl_ms = cfg->lease_ttl_ms,
		.max_per_holder = cfg->max_leases,
		.max_bytes_holder = cfg->lease_memory_per_instance,
		.max_bytes_uid = cfg->lease_memory_per_uid,
		.max_bytes = cfg->lease_memory,
		.ops = &instance_lease_ops,
	};
	struct store_params sp = {
		.unsealed_share = cfg->unsealed_share,
		/* [worker] query_threads counts the worker; 0: the online CPUs, at most 8. */
		.query_helpers = (cfg->query_threads ? cfg->query_threads
						     : (unsigned)MIN(MAX(sysconf(_SC_NPROCESSORS_ONLN), 1), 8)) -
				 1,
	};
	const struct slot_limits slot_lim = {
		.handshakes = cfg->max_handshakes,
		.handshakes_per_uid = cfg->max_handshakes_per_uid,
		.admins = cfg->max_admin_sessions,
		.admins_per_uid = cfg->max_admin_sessions_per_uid,
		.engines = cfg->max_sessions,
		.engines_per_uid = cfg->max_sessions_per_uid,
		.fds_per_uid = fds_per_uid(cfg),
		.handshake_ns = HANDSHAKE_TIMEOUT_NS,
		.admin_idle_ns = (uint64_t)cfg->admin_idle_timeout_ms * NSEC_PER_MSEC,
		.log_window_ns = (uint64_t)cfg->log_ratelimit_interval_ms * NSEC_PER_MSEC,
	};
	int nodes[POOL_MAX_REGIONS];
	int n, r;

	memset(d, 0, sizeof(*d));
	d->cfg = cfg;
	d->config_path = config_path;
	d->listen.fd = d->signals.fd = d->acked.fd = d->lock_fd = d->reg_ev.fd = -1;
	d->start_ns = now_ns();
	CDS_INIT_LIST_HEAD(&d->sessions);
	slots_init(&d->slots, &slot_lim, &d->ctr, close_slot);
	d->acks.efd = -1;
	r = init_loop(d);
	if (r < 0)
		return r;

	urcu_memb_register_thread();
	r = lease_table_new(&lp, &d->leases);
	if (r < 0)
		return log_error_errno(r, "cannot create the lease table");
	/* Every mover finds its devices: the pool goes where they are. */
	r = movers_init(cfg);
	if (r < 0)
		return r;
	n = parse_nodes(cfg, nodes, POOL_MAX_REGIONS);
	if (n < 0)
		return n;
	/* Fail early on a socket held by a live daemon, before pinning memory. */
	r = server_listen(d);
	if (r < 0)
		return r;
	r = init_store(d, &sp, nodes, (unsigned)n);
	if (r < 0)
		return r;
	/* Before the workers: they enqueue registrations from their first SAVE on. */
	r = cluster_init(d);
	if (r < 0)
		return r;
	/* Before the workers too: their first eviction may spill, their first QUERY read. */
	r = tier_init(d);
	if (r < 0)
		return r;
	r = nspace_table_new(cfg->max_namespaces, drop_nspace, d->store, &d->nspaces);
	if (r == 0)
		r = instance_table_new(d->store, &d->instances);
	if (r < 0)
		return log_error_errno(r, "cannot create the namespace and instance tables");
	/* Before the workers (they learn whether QUERY may fetch), after what it serves from. */
	r = peer_init(d);
	if (r < 0)
		return r;
	r = start_workers(d, nodes[0]);
	if (r < 0)
		return r;
	return metrics_start(cfg->metrics_listen, admin_sample, d);
}

static void begin_drain(struct daemon *d)
{
	struct session *s, *tmp;

	log_info("shutting down: %u sessions to drain", d->nr_sessions);
#if HAVE_SYSTEMD
	sd_notify(0, "STOPPING=1");
#endif
	metrics_set_ready(false);
	d->stopping = true;
	server_unlisten(d);
	/* First: pending cluster FLUSHes and QUERYs complete while their sessions still read. */
	cluster_shutdown(d);
	/* Fetches in flight complete (their QUERYs answer), peers' locks go. */
	peer_shutdown(d);
	cds_list_for_each_entry_safe(s, tmp, &d->sessions, node)
		session_close(s, -ESHUTDOWN);
}

/* The signalfd is readable (control loop). */
static void handle_signals(struct ev_source *src, uint32_t events)
{
	struct daemon *d = container_of(src, struct daemon, signals);
	struct signalfd_siginfo si;

	while (read(src->fd, &si, sizeof(si)) == sizeof(si)) {
		switch (si.ssi_signo) {
		case SIGTERM:
		case SIGINT:
			if (!d->stopping)
				begin_drain(d);
			break;
		case SIGHUP:
			if (log_reopen() < 0)
				log_warning("SIGHUP: cannot reopen the log file");
			else
				log_info("SIGHUP: logs reopened");
			break;
		}
	}
}

int daemon_run(struct daemon *d)
{
	uint64_t drain_deadline = 0;

	/* The registry's lease release gets its bounded time (registry_shutdown()). */
	while (!d->stopping || d->nr_sessions || !cluster_closed(d)) {
		int r = ev_loop_run_once(&d->loop, EV_TICK_MS);

		if (r < 0)
			return log_error_errno(r, "epoll_wait");
		if (d->stopping) {
			if (!drain_deadline)
				drain_deadline = now_ns() + DRAIN_TIMEOUT_NS;
			if (now_ns() > drain_deadline) {
				log_error("drain did not finish within %llu s: exiting with %u sessions",
					  (unsigned long long)(DRAIN_TIMEOUT_NS / NSEC_PER_SEC),
					  d->nr_sessions);
				return -ETIMEDOUT;
			}
		}
	}
	log_info("all sessions drained%s", d->reg ? ", registry closed" : "");
	return 0;
}

void daemon_fini(struct daemon *d)
{
	metrics_stop();
	/*
	 * The SSD tier first: its last writes read pool slots and free them
	 * in the store, its last reads wake the workers (control/tier-attach.h).
	 */
	tier_close(d);
	/*
	 * Without a drain (start-up failed) the service stops here: its
	 * callbacks still need the workers and the store.  After
	 * metrics_stop(): the scrape samples it.
	 */
	peer_fini(d);
	for (unsigned i = 0; i < d->nr_workers; i++)
		worker_stop(d->workers[i]);
	d->nr_workers = 0;
	/* Leases first (they pin blocks and hold instances), the pool last (the store's slots). */
	lease_table_free(d->leases);
	d->leases = NULL;
	store_free(d->store);
	d->store = NULL;
	/* After the store: clearing it reported its blocks gone to the registry. */
	cluster_fini(d);
	pool_destroy(d->pool); /* unpins it for the movers */
	d->pool = NULL;
	movers_fini(); /* after the last session: the host's drains what they left mapped */
	nspace_table_free(d->nspaces);
	d->nspaces = NULL;
	instance_table_free(d->instances);
	d->instances = NULL;
	server_unlisten(d);
	ev_loop_fini(&d->loop); /* frees the sessions freed in the last batch */
	slots_fini(&d->slots);
	log_ratelimit_flush(&d->accept_rl, "accept");
	if (d->signals.fd >= 0)
		close(d->signals.fd);
	worker_acks_fini(&d->acks);
	urcu_memb_unregister_thread();
}
