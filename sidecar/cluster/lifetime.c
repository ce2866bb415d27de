/* SPDX-License-Identifier: MIT */
/*
 * The registry client's lifetime, counters and Sentinel hookup
 * (registry.h): registry_new() copies the configuration, opens the
 * registry's epoll fd (pump.c runs it), the queue and the ledger, and
 * finds the master: the address given, resolved once, or the sentinels
 * (sentinel.c), whose answers arrive in on_master(); registry_shutdown()
 * gives the lease back, registry_free() drops what is left.  The rest of
 * the client is split by what it owns (registry-internal.h lists the
 * files); without hiredis, stub.c stands in for all of them.
 *
 * Control thread: everything here but registry_get_stats(), any thread's
 * (relaxed atomic loads of the counters; the strings under st_lock, which
 * on_master() takes to write them).
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <syslog.h>
#include <unistd.h>

#include "cluster/aconn.h"
#include "cluster/regaddr.h"
#include "cluster/barrier.h"
#include "cluster/ledger.h"
#include "cluster/link.h"
#include "cluster/nodelease.h"
#include "cluster/pipeline.h"
#include "cluster/pump.h"
#include "cluster/regquery.h"
#include "cluster/queue.h"
#include "cluster/registry-internal.h"
#include "cluster/registry.h"
#include "cluster/sentinel.h"

const char *registry_state_name(int s)
{
	static const char *const names[] = { "disconnected", "connecting", "handshake",
					     "ready",	     "conflict",   "closed" };

	return s >= 0 && s <= REG_CLOSED ? names[s] : "unknown";
}

bool registry_compiled_in(void)
{
	return true;
}

int registry_digest(const struct nsdigest_geometry *g, uint8_t ret[REG_DIGEST_SIZE])
{
	return nsdigest(g, ret);
}

/* ---- the master, from the sentinels -------------------------------------------------- */

/*
 * The sentinels name @ip:@port the master (sentinel.h).  Another one than
 * ours: a failover to follow, at once, whatever state we are in: the
 * connection (if any) to the old one goes, and the new one takes a new
 * lease (a new epoch: the ACQUIRE's floor) and re-registers everything
 * resident, so that what a lagging replica lost comes back.
 */
static void on_master(void *arg, const char *ip, int port, bool announced)
{
	struct registry *r = arg;
	char now_addr[REG_ADDR_MAX];
	bool had = r->ip[0] != '\0';

	if (had && !strcmp(ip, r->ip) && port == r->addr.port)
		return; /* the one we have */
	snprintf(now_addr, sizeof(now_addr), strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
	pthread_mutex_lock(&r->st_lock);
	if (had) {
		snprintf(r->st.last_failover_from, sizeof(r->st.last_failover_from), "%s",
			 r->redis);
		ST_SET(r, last_failover_ns, now_ns());
	}
	snprintf(r->st.master, sizeof(r->st.master), "%s", now_addr);
	pthread_mutex_unlock(&r->st_lock);
	if (had) {
		ST_ADD(r, failovers, 1);
		rlog(r, LOG_WARNING, 0,
		     "registry: failover of %s: the sentinels name %s the master (was %s, %s)",
		     r->master_name, now_addr, r->redis,
		     announced ? "announced" : "found by asking them");
	} else {
		rlog(r, LOG_NOTICE, 0, "registry: the sentinels name %s the master of %s", now_addr,
		     r->master_name);
	}
	snprintf(r->ip, sizeof(r->ip), "%s", ip);
	r->addr.port = port;
	snprintf(r->redis, sizeof(r->redis), "%s", now_addr);
	if (r->ac) {
		/* pump_run() closes it; conn_gone() sees switching and reconnects at once. */
		r->switching = 1;
		want_close(r, "following the failover");
	} else {
		r->failures = 0;
		r->next_attempt = 0;
	}
	kick(r);
}

/* The sentinels' lines go where the registry's go. */
static void sentinel_log(void *arg, int level, int err, const char *msg)
{
	struct registry *r = arg;

	rlog(r, level, err, "%s", msg);
}

static int resolve_host(struct registry *r, char *why, size_t wl)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	int rc;

	if (r->addr.unix_path)
		return 0;
	rc = getaddrinfo(r->addr.host, NULL, &hints, &res);
	if (rc) {
		snprintf(why, wl, "[cluster] redis: cannot resolve %s: %s", r->addr.host,
			 gai_strerror(rc));
		return -EINVAL;
	}
	rc = getnameinfo(res->ai_addr, res->ai_addrlen, r->ip, sizeof(r->ip), NULL, 0,
			 NI_NUMERICHOST);
	freeaddrinfo(res);
	if (rc) {
		snprintf(why, wl, "[cluster] redis: %s: %s", r->addr.host, gai_strerror(rc));
		return -EINVAL;
	}
	return 0;
}

/* The configuration's copies, and the keys this node writes and reads (scripts.h). */
static void copy_config(struct registry *r, const struct registry_config *cfg,
			const struct registry_ops *ops)
{
	char w[256];

	if (cfg->sentinels && cfg->sentinels[0]) {
		snprintf(r->master_name, sizeof(r->master_name), "%s", cfg->master_name);
		snprintf(r->redis, sizeof(r->redis), "the master of %s", r->master_name);
	} else {
		snprintf(r->redis, sizeof(r->redis), "%s", cfg->redis);
		reg_addr_parse(cfg->redis, &r->addr, w, sizeof(w));
	}
	snprintf(r->user, sizeof(r->user), "%s", cfg->user ? cfg->user : "");
	snprintf(r->cluster, sizeof(r->cluster), "%s", cfg->cluster);
	snprintf(r->node, sizeof(r->node), "%s", cfg->node);
	snprintf(r->peer_addr, sizeof(r->peer_addr), "%s", cfg->peer_addr ? cfg->peer_addr : "");
	r->ttl_ms = cfg->lease_ttl_ms;
	r->connect_ms = cfg->connect_timeout_ms;
	r->command_ms = cfg->command_timeout_ms;
	r->flush_ms = cfg->flush_timeout_ms;
	r->query_ms = cfg->query_timeout_ms;
	r->entry_ttl_ms = cfg->entry_ttl_ms ? cfg->entry_ttl_ms : 6 * 3600 * 1000ull;
	r->ops = *ops;
	snprintf(r->lease_key, sizeof(r->lease_key), "kvs:%s:lease:%s", r->cluster, r->node);
	snprintf(r->epoch_key, sizeof(r->epoch_key), "kvs:%s:epoch:%s", r->cluster, r->node);
	snprintf(r->lease_prefix, sizeof(r->lease_prefix), "kvs:%s:lease:", r->cluster);
	snprintf(r->sprefix, sizeof(r->sprefix), "kvs:%s:n:", r->cluster);
	snprintf(r->sets_key, sizeof(r->sets_key), "kvs:%s:sets:%s", r->cluster, r->node);
	snprintf(r->nodes_key, sizeof(r->nodes_key), "kvs:%s:nodes", r->cluster);
}

/* The password's copy and the buffers a batch or a query chunk is built in.  -ENOMEM. */
static int alloc_buffers(struct registry *r, const struct registry_config *cfg)
{
	if (cfg->password && cfg->password[0] && !(r->password = strdup(cfg->password)))
		return -ENOMEM;
	r->ops_buf = malloc(BATCH_MAX * sizeof(*r->ops_buf));
	r->net = calloc(NET_SLOTS, sizeof(*r->net));
	r->bf_buf = malloc(BATCH_MAX * sizeof(*r->bf_buf));
	r->qtmp = malloc(REPLY_MAX_NODES * sizeof(*r->qtmp));
	/* Keys for a batch (BATCH_MAX) or a query chunk (QUERY_CHUNK), plus our words. */
	r->argv = malloc(ARGV_MAX * sizeof(*r->argv));
	r->argvlen = malloc(ARGV_MAX * sizeof(*r->argvlen));
	r->gcount = malloc((size_t)BATCH_MAX * sizeof(*r->gcount));
	r->gdigest = malloc((size_t)BATCH_MAX * sizeof(*r->gdigest));
	r->member = malloc((size_t)BATCH_MAX * sizeof(*r->member));
	if (!r->ops_buf || !r->net || !r->bf_buf || !r->qtmp || !r->argv || !r->argvlen ||
	    !r->gcount || !r->gdigest || !r->member)
		return -ENOMEM;
	return 0;
}

/* The netting table's seed and this process's incarnation id. */
static void draw_ids(struct registry *r)
{
	uint64_t inc;

	if (getrandom(&r->net_seed, sizeof(r->net_seed), 0) != sizeof(r->net_seed))
		r->net_seed = now_ns();
	/*
	 * This process's incarnation id: with the node and the epoch it names
	 * an incarnation that never repeats, even if Redis forgets every
	 * epoch (a restart then starts the counter over; this id differs).
	 */
	if (getrandom(&inc, sizeof(inc), 0) != sizeof(inc))
		inc = now_ns() ^ ((uint64_t)getpid() << 40);
	snprintf(r->inc, sizeof(r->inc), "%016" PRIx64, inc);
	snprintf(r->st.incarnation, sizeof(r->st.incarnation), "%s", r->inc);
}

/* registry_fd()'s epoll fd, with the wake eventfd and the timerfd in it.  -errno. */
static int open_loop(struct registry *r)
{
	struct epoll_event e = { .events = EPOLLIN };

	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	r->mc.epfd = r->epfd;
	if (r->epfd < 0 || r->evfd < 0 || r->tfd < 0)
		return -errno;
	e.data.u32 = TAG_WAKE;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->evfd, &e) < 0)
		return -errno;
	e.data.u32 = TAG_TIMER;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->tfd, &e) < 0)
		return -errno;
	return 0;
}

/* The queue of changes (woken through r->evfd) and the ledger over it.  -errno. */
static int open_queue(struct registry *r, const struct registry_config *cfg)
{
	int rc;

	/* A 64th of the queue is kept for flush marks (queue.h): a full queue still takes them. */
	rc = rq_init(&r->q, cfg->queue_entries, cfg->queue_entries / 64, r->evfd);
	if (rc < 0)
		return rc;
	rc = ledger_init(&r->led, BATCH_MAX, &r->q.enqueued, &r->q.overflow);
	if (rc < 0)
		return rc;
	ST_SET(r, queue_capacity, cfg->queue_entries);
	return 0;
}

/* Where the master is: the sentinels say (on_master()), or the address, resolved now.  -errno. */
static int find_master(struct registry *r, const struct registry_config *cfg, char *why, size_t wl)
{
	int rc;

	if (r->master_name[0]) {
		const struct sentinel_config sc = {
			.list = cfg->sentinels,
			.master_name = cfg->master_name,
			.user = cfg->sentinel_user,
			.password = cfg->sentinel_password,
			.connect_timeout_ms = cfg->connect_timeout_ms,
			.command_timeout_ms = cfg->command_timeout_ms,
			.check_ms = cfg->sentinel_check_ms ? cfg->sentinel_check_ms : 1000,
		};
		const struct sentinel_ops so = { .master = on_master,
						 .log = sentinel_log,
						 .arg = r };

		rc = sentinel_new(&sc, &so, r->epfd, TAG_SENTINELS, &r->sent, why, wl);
		if (rc < 0)
			return rc;
		sentinel_counts(r->sent, &r->st.sentinels, &r->st.sentinels_up);
		r->st.sentinel = 1;
		snprintf(r->st.master_name, sizeof(r->st.master_name), "%s", r->master_name);
		return 0;
	}
	rc = resolve_host(r, why, wl);
	if (rc < 0)
		return rc;
	snprintf(r->st.master, sizeof(r->st.master), "%s", r->redis);
	return 0;
}

int registry_new(const struct registry_config *cfg, const struct registry_ops *ops,
		 struct registry **ret, char *why, size_t wl)
{
	struct registry *r;
	char w[256] = "";
	int rc;

	rc = registry_config_check(cfg, w, sizeof(w));
	if (rc < 0) {
		snprintf(why, wl, "%s", w);
		return rc;
	}
	if (!ops || !ops->backfill) {
		snprintf(why, wl, "registry: no backfill callback");
		return -EINVAL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->epfd = r->evfd = r->tfd = -1;
	aconn_init(&r->mc, -1, TAG_REDIS);
	pthread_mutex_init(&r->st_lock, NULL);
	copy_config(r, cfg, ops);
	rc = alloc_buffers(r, cfg);
	if (rc < 0)
		goto fail;
	draw_ids(r);
	rc = open_loop(r);
	if (rc < 0)
		goto fail;
	rc = open_queue(r, cfg);
	if (rc < 0)
		goto fail;
	rc = find_master(r, cfg, why, wl);
	if (rc < 0)
		goto fail;
	set_state(r, REG_DISCONNECTED);
	r->next_attempt = 0;
	kick(r); /* the first dispatch connects */
	*ret = r;
	return 0;
fail:
	if (!why[0] || rc == -ENOMEM)
		snprintf(why, wl, "registry: %s", strerror(-rc));
	r->closing = 1;
	registry_free(r);
	return rc;
}

void registry_shutdown(struct registry *r)
{
	if (!r || r->closing)
		return;
	r->closing = 1;
	r->close_deadline = now_ns() + (uint64_t)(r->command_ms < 500 ? r->command_ms : 500) * MS;
	/* Peers stop asking this node at once, instead of after one TTL. */
	if (r->ac && r->state == REG_READY && !r->want_close)
		nodelease_release(r);
	pipeline_drain(r);
	pump_run(r);
}

bool registry_closed(const struct registry *r)
{
	return !r || r->state == REG_CLOSED;
}

void registry_free(struct registry *r)
{
	if (!r)
		return;
	if (!r->closing)
		registry_shutdown(r);
	r->closing = 1;
	if (r->ac)
		link_close(r, "freed", 0);
	/* Every batch came back (link_close()): what the queue still holds, marks too, goes. */
	if (r->q.cells && r->led.runs)
		pipeline_drain(r);
	barrier_complete(r, UINT64_MAX, 1);
	query_pump(r, UINT64_MAX, 1);
	query_free_all(r);
	sentinel_free(r->sent);
	ledger_fini(&r->led);
	rq_fini(&r->q);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->evfd >= 0)
		close(r->evfd);
	if (r->tfd >= 0)
		close(r->tfd);
	if (r->password) {
		explicit_bzero(r->password, strlen(r->password));
		free(r->password);
	}
	free(r->ops_buf);
	free(r->net);
	free(r->bf_buf);
	free(r->qtmp);
	free(r->argv);
	free(r->argvlen);
	free(r->gcount);
	free(r->gdigest);
	free(r->member);
	pthread_mutex_destroy(&r->st_lock);
	free(r);
}

/* Every field of a MOD row of KVS_STATS_REGISTRY, each a relaxed load. */
KVS_STATS_COPY(stats_copy, registry_stats, registry_stats, KVS_STATS_REGISTRY, MOD)

void registry_get_stats(const struct registry *r, struct registry_stats *ret)
{
	stats_copy(ret, &r->st);
	ret->last_failover_ns = __atomic_load_n(&r->st.last_failover_ns, __ATOMIC_RELAXED);
	ret->sentinel = r->st.sentinel; /* constant */
	/* The strings change with a failover (control thread), under st_lock. */
	pthread_mutex_lock((pthread_mutex_t *)&r->st_lock);
	memcpy(ret->incarnation, r->st.incarnation, sizeof(ret->incarnation));
	memcpy(ret->master, r->st.master, sizeof(ret->master));
	memcpy(ret->last_failover_from, r->st.last_failover_from, sizeof(ret->last_failover_from));
	memcpy(ret->master_name, r->st.master_name, sizeof(ret->master_name));
	pthread_mutex_unlock((pthread_mutex_t *)&r->st_lock);
	/* Queue figures live: the control thread refreshes its copies only when it runs. */
	ret->queue_depth = rq_depth(&r->q);
	ret->enqueued = __atomic_load_n(&r->q.enqueued, __ATOMIC_RELAXED);
	ret->dropped_overflow = __atomic_load_n(&r->q.overflow, __ATOMIC_RELAXED);
}
