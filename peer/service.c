/* SPDX-License-Identifier: MIT */
/*
 * The service: parameters, the service thread's loop, registered memory,
 * statistics and the peers snapshot.  serve.c answers peers, fetch.c
 * fetches from them, conn.c moves their bytes, ucx.c is the RDMA
 * transport, kp.c what they share of the service.
 *
 * The loop knows no kind of event source: each epoll event goes to the
 * function its source's owner set (struct ev_src), as sidecar/control/
 * loop.c does; the loop adds the timers (serve_tick(), fetch_tick()) and
 * the end of each turn (fetch_kick(), the dead connections' frees).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/bits.h"
#include "peer/admit.h"
#include "peer/conn.h"
#include "peer/fetch-pool.h"
#include "peer/fetch.h"
#include "peer/kp.h"
#include "peer/serve.h"
#include "peer/ucx.h"

/* ---- Names ------------------------------------------------------------- */

const char *kvspeer_version(void)
{
	return PACKAGE_VERSION;
}

#define FAIL_NAME_(_, KIND, kind, what) [KVSPEER_FAIL_##KIND] = #kind,
static const char *const fail_names[KVSPEER_FAIL__MAX] = { KVS_PEER_FAILS(FAIL_NAME_, _) };
#undef FAIL_NAME_

const char *kvspeer_fail_name(unsigned kind)
{
	return kind < KVSPEER_FAIL__MAX ? fail_names[kind] : NULL;
}

/* ---- Parameters ---------------------------------------------------------- */

void kvspeer_params_init(struct kvspeer_params *p)
{
	memset(p, 0, sizeof(*p));
	p->transport = KVSPEER_TRANSPORT_TCP;
	p->lock_ttl_ms = 10000;
	p->max_conns = 256;
	p->max_conns_per_peer = 16;
	p->max_locks_per_peer = 64;
	p->max_keys = KVSPEER_MAX_KEYS;
	p->hello_timeout_ms = 5000;
	p->io_timeout_ms = 5000;
	p->idle_timeout_ms = 60000;
	p->pool_idle = 4;
	p->max_shard_bytes = 1ull << 30;
}

#define BAD(...)                                          \
	do {                                              \
		kp_log(kp, KVSPEER_LOG_ERR, __VA_ARGS__); \
		return -EINVAL;                           \
	} while (0)

static int check_params(struct kvspeer *kp, const struct kvspeer_params *p)
{
	const struct kvspeer_host_ops *o = p->ops;

	if (!p->cluster || strlen(p->cluster) >= KVSPEER_NAME_MAX ||
	    pw_check_name(p->cluster, strlen(p->cluster) + 1) < 0)
		BAD("cluster must be 1-%u characters of [A-Za-z0-9._:/@+=-]", KVSPEER_NAME_MAX - 1);
	if (!p->node || strlen(p->node) >= KVSPEER_NAME_MAX ||
	    pw_check_name(p->node, strlen(p->node) + 1) < 0)
		BAD("node must be 1-%u characters of [A-Za-z0-9._:/@+=-]", KVSPEER_NAME_MAX - 1);
	if (!p->secret_file || !*p->secret_file)
		BAD("a cluster secret file is required");
	if (p->transport != KVSPEER_TRANSPORT_TCP && p->transport != KVSPEER_TRANSPORT_UCX)
		BAD("unknown transport %u", p->transport);
	if (p->flags & ~KVSPEER_F__ALL)
		BAD("unknown flags 0x%x", p->flags & ~KVSPEER_F__ALL);
	if ((p->flags & KVSPEER_F_UCX_ALLOW_TCP) && p->transport != KVSPEER_TRANSPORT_UCX)
		BAD("KVSPEER_F_UCX_ALLOW_TCP needs the UCX transport");
	if (!p->lock_ttl_ms || p->lock_ttl_ms > 600000)
		BAD("lock_ttl_ms must be 1..600000");
	if (!p->max_keys || p->max_keys > KVSPEER_MAX_KEYS)
		BAD("max_keys must be 1..%u", KVSPEER_MAX_KEYS);
	if (!p->max_conns || p->max_conns > 65536 || !p->max_conns_per_peer ||
	    !p->max_locks_per_peer)
		BAD("connection and lock limits must be positive (max_conns at most 65536)");
	if (p->max_unauth > p->max_conns || p->max_unauth_per_peer > 1024)
		BAD("max_unauth must be at most max_conns, max_unauth_per_peer at most 1024");
	if (!p->hello_timeout_ms || !p->io_timeout_ms || !p->idle_timeout_ms)
		BAD("timeouts must be positive");
	if (!p->max_shard_bytes)
		BAD("max_shard_bytes must be positive");
	if (p->pool_idle > 64)
		BAD("pool_idle must be at most 64");
	if (p->sock_buf_bytes > (1u << 30))
		BAD("sock_buf_bytes must be at most 1 GiB");
	if (!all_zero(p->resv, sizeof(p->resv)))
		BAD("reserved parameters must be zero");
	if (o && (o->resv[0] || o->resv[1] || o->resv[2] || o->resv[3]))
		BAD("reserved host ops must be NULL");
	if (p->listen) {
		if (!o || !o->lock || !o->unlock || !o->generation)
			BAD("serving (listen) needs host ops lock, unlock and generation");
		if (!p->allow)
			BAD("serving (listen) needs an allow-list of peer networks");
	}
	return 0;
}

/* ---- Registered memory --------------------------------------------------- */

int kvspeer_mem_register(struct kvspeer *kp, const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	struct region r = { .base = a, .len = len };
	int ret = 0;

	if (!kp || !addr || !len || a + len < a)
		return -EINVAL;
	if (kp_on_thread(kp))
		return -EDEADLK;
	pthread_mutex_lock(&kp->reg_lock);
	for (uint32_t i = 0; i < kp->nr_regions; i++) {
		const struct region *o = &kp->regions[i];

		if (a < o->base + o->len && o->base < a + len) {
			ret = -EINVAL;
			goto out;
		}
	}
	if (kp->nr_regions == PW_MAX_REGIONS) {
		ret = -ENOSPC;
		goto out;
	}
	if (kp->ucx) {
		ret = pucx_mem_map(kp->ucx, (void *)addr, len, &r.memh, &r.rkey, &r.rkey_len);
		if (ret < 0)
			goto out;
	}
	kp->regions[kp->nr_regions++] = r;
	kp->regions_version++;
out:
	pthread_mutex_unlock(&kp->reg_lock);
	if (ret < 0)
		kp_log(kp, KVSPEER_LOG_ERR, "cannot register %zu bytes at %p: %s", len, addr,
		       strerror(-ret));
	return ret;
}

int kvspeer_mem_unregister(struct kvspeer *kp, const void *addr)
{
	int ret = -ENOENT;

	if (!kp)
		return -EINVAL;
	if (kp_on_thread(kp))
		return -EDEADLK;
	pthread_mutex_lock(&kp->reg_lock);
	for (uint32_t i = 0; i < kp->nr_regions; i++) {
		struct region *r = &kp->regions[i];

		if (r->base != (uintptr_t)addr)
			continue;
		if (r->refs) {
			ret = -EBUSY;
			break;
		}
		if (kp->ucx)
			pucx_mem_unmap(kp->ucx, r->memh, r->rkey);
		memmove(r, r + 1, (kp->nr_regions - i - 1) * sizeof(*r));
		kp->nr_regions--;
		/* Peers holding the old table (UCX indices) must fetch it again. */
		kp->regions_version++;
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&kp->reg_lock);
	return ret;
}

/* ---- The loop -------------------------------------------------------------- */

/* The wake eventfd: what the callers' threads queued (kp.c), and kvspeer_free()'s stop. */
static void run_cmds(struct ev_src *src, uint32_t events)
{
	struct kvspeer *kp = caa_container_of(src, struct kvspeer, wake_ev);
	struct cds_list_head cmds, ctl, *pos, *tmp;
	uint64_t v;

	if (read(kp->wakefd, &v, sizeof(v)) < 0) {
	}
	CDS_INIT_LIST_HEAD(&cmds);
	CDS_INIT_LIST_HEAD(&ctl);
	pthread_mutex_lock(&kp->cmd_lock);
	/* Take the lists whole: submitters append under cmd_lock only. */
	cds_list_splice(&kp->cmds, &cmds);
	CDS_INIT_LIST_HEAD(&kp->cmds);
	cds_list_splice(&kp->ctl, &ctl);
	CDS_INIT_LIST_HEAD(&kp->ctl);
	kp->quit = kp->stopping;
	pthread_mutex_unlock(&kp->cmd_lock);

	cds_list_for_each_safe(pos, tmp, &ctl)
	{
		struct ctl_req *r = cds_list_entry(pos, struct ctl_req, link);

		cds_list_del_init(pos);
		r->fn(kp, r);
		pthread_mutex_lock(&kp->cmd_lock);
		r->done = true;
		/* Under cmd_lock: pairs with the waiter's check in kp_ctl(). */
		pthread_cond_signal(&r->cond);
		pthread_mutex_unlock(&kp->cmd_lock);
	}
	cds_list_for_each_safe(pos, tmp, &cmds)
	{
		struct fetch *f = cds_list_entry(pos, struct fetch, link);

		cds_list_del_init(pos);
		fetch_start(kp, f);
	}
}

static void free_dead(struct kvspeer *kp)
{
	struct cds_list_head *pos, *tmp;

	cds_list_for_each_safe(pos, tmp, &kp->dead)
	{
		struct conn *c = cds_list_entry(pos, struct conn, dead_link);

		cds_list_del_init(pos);
		conn_free(c);
	}
}

static void close_all(struct kvspeer *kp)
{
	struct cds_list_head *pos, *tmp;

	cds_list_for_each_safe(pos, tmp, &kp->conns)
	{
		struct conn *c = cds_list_entry(pos, struct conn, link);

		conn_close(c, -ESHUTDOWN);
	}
	free_dead(kp);
}

/* The UCX worker's wakeup fd. */
static void ucx_event(struct ev_src *src, uint32_t events)
{
	struct kvspeer *kp = caa_container_of(src, struct kvspeer, ucx_ev);

	pucx_progress(kp->ucx);
}

static void *service(void *arg)
{
	struct kvspeer *kp = arg;
	struct epoll_event evs[64];
	if (kp->p.ops && kp->p.ops->thread_start)
		kp->p.ops->thread_start(kp->p.host);
	while (!kp->quit) {
		bool busy = !cds_list_empty(&kp->conns) || !cds_list_empty(&kp->fetches);
		int n = epoll_wait(kp->epfd, evs, 64, busy ? PEER_TICK_MS : 1000);
		uint64_t now;

		for (int i = 0; i < n; i++) {
			struct ev_src *src = evs[i].data.ptr;

			src->fn(src, evs[i].events);
		}
		/* UCX completions may be due without an fd event (they were queued). */
		if (kp->ucx)
			pucx_progress(kp->ucx);
		now = peer_now_ns();
		if (now >= kp->next_tick_ns) {
			serve_tick(kp, now);
			fetch_tick(kp, now);
			kp->next_tick_ns = now + PEER_TICK_MS * NSEC_PER_MSEC;
		}
		fetch_kick(kp);
		free_dead(kp);
	}
	/* kvspeer_free(): every fetch completes, every lock is given back. */
	fetch_fail_all(kp, -ESHUTDOWN);
	close_all(kp);
	if (kp->p.ops && kp->p.ops->thread_stop)
		kp->p.ops->thread_stop(kp->p.host);
	return NULL;
}

/* ---- Create / destroy -------------------------------------------------------- */

static void kp_destroy(struct kvspeer *kp)
{
	struct cds_list_head *pos, *tmp;

	cds_list_for_each_safe(pos, tmp, &kp->cmds)
	{
		struct fetch *f = cds_list_entry(pos, struct fetch, link);

		cds_list_del_init(pos);
		kvspeer_fetch_unref((struct kvspeer_fetch *)f);
	}
	pool_free(kp);
	if (kp->ucx) {
		for (uint32_t i = 0; i < kp->nr_regions; i++)
			pucx_mem_unmap(kp->ucx, kp->regions[i].memh, kp->regions[i].rkey);
		pucx_free(kp->ucx);
	}
	if (kp->listenfd >= 0)
		close(kp->listenfd);
	if (kp->wakefd >= 0)
		close(kp->wakefd);
	if (kp->epfd >= 0)
		close(kp->epfd);
	peer_secret_wipe(&kp->secret);
	pthread_mutex_destroy(&kp->cmd_lock);
	pthread_mutex_destroy(&kp->reg_lock);
	admit_fini(kp);
	free((char *)kp->p.listen);
	free((char *)kp->p.allow);
	free((char *)kp->p.ucx_devices);
	free((char *)kp->p.secret_file);
	free(kp);
}

/* The parameters kept: copies of @p's strings, the defaults for what is 0. */
static int copy_params(struct kvspeer *kp, const struct kvspeer_params *p)
{
	int r = check_params(kp, p);

	if (r < 0)
		return r;
	kp->p = *p;
	kp->p.listen = kp->p.allow = kp->p.ucx_devices = kp->p.secret_file = NULL;
	/* 0: the defaults (a caller built before these fields passes zeros). */
	if (!kp->p.max_unauth)
		kp->p.max_unauth = kp->p.max_conns / 4 ? kp->p.max_conns / 4 : 1;
	if (!kp->p.max_unauth_per_peer)
		kp->p.max_unauth_per_peer = 4;
	kp->p.secret_file = strdup(p->secret_file);
	if ((p->listen && !(kp->p.listen = strdup(p->listen))) ||
	    (p->allow && !(kp->p.allow = strdup(p->allow))) ||
	    (p->ucx_devices && !(kp->p.ucx_devices = strdup(p->ucx_devices))) || !kp->p.secret_file)
		return -ENOMEM;
	snprintf(kp->cluster, sizeof(kp->cluster), "%s", p->cluster);
	snprintf(kp->node, sizeof(kp->node), "%s", p->node);
	kp->epoch = p->epoch;
	kp->start_ns = peer_now_ns();
	return 0;
}

/* Serving (kvspeer_params.listen): the allow-list, the address, admission. */
static int setup_serving(struct kvspeer *kp, const struct kvspeer_params *p)
{
	char why[256] = "";
	int r;

	r = peer_allow_parse(p->allow, &kp->allow, why, sizeof(why));
	if (r < 0) {
		kp_log(kp, KVSPEER_LOG_ERR, "allow: %s", why);
		return r;
	}
	r = peer_addr_parse(p->listen, &kp->listen_sa, &kp->listen_salen);
	if (r < 0) {
		kp_log(kp, KVSPEER_LOG_ERR, "listen '%s' is not ADDR:PORT or [ADDR]:PORT",
		       p->listen);
		return r;
	}
	if (peer_addr_is_wildcard((struct sockaddr *)&kp->listen_sa)) {
		kp_log(kp, KVSPEER_LOG_ERR,
		       "listen '%s' would bind every interface: name the cluster interface's address",
		       p->listen);
		return -EINVAL;
	}
	kp->serving = true;
	return admit_init(kp);
}

/* The thread's event sources: its wake eventfd, the listening socket, UCX's worker. */
static int setup_sources(struct kvspeer *kp, const struct kvspeer_params *p)
{
	char why[256] = "";
	int r;

	kp->epfd = epoll_create1(EPOLL_CLOEXEC);
	kp->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (kp->epfd < 0 || kp->wakefd < 0)
		return -errno;
	kp->wake_ev.fn = run_cmds;
	kp->ucx_ev.fn = ucx_event;
	r = kp_epoll_add(kp, kp->wakefd, &kp->wake_ev, EPOLLIN);
	if (r < 0)
		return r;
	if (kp->serving) {
		r = serve_listen(kp);
		if (r < 0)
			return r;
	}
	if (p->transport == KVSPEER_TRANSPORT_UCX) {
		r = pucx_new(kp, &kp->ucx, why, sizeof(why));
		if (r < 0) {
			kp_log(kp, KVSPEER_LOG_ERR, "UCX transport: %s", why);
			return r;
		}
		r = kp_epoll_add(kp, pucx_fd(kp->ucx), &kp->ucx_ev, EPOLLIN);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Lock ids start at a random point, so a restart does not reuse ids soon. */
static int seed_lock_ids(struct kvspeer *kp)
{
	uint8_t rnd[PW_NONCE_SIZE];
	int r = peer_nonce(rnd);

	if (r < 0)
		return r;
	memcpy(&kp->next_lock_id, rnd, sizeof(kp->next_lock_id));
	kp->next_lock_id = (kp->next_lock_id >> 2) | 1;
	return 0;
}

int kvspeer_new(const struct kvspeer_params *p, struct kvspeer **ret_kp)
{
	char why[256] = "";
	struct kvspeer *kp;
	int r;

	if (!p || !ret_kp)
		return -EINVAL;
	kp = calloc(1, sizeof(*kp));
	if (!kp)
		return -ENOMEM;
	kp->p.log = p->log;
	kp->p.log_arg = p->log_arg;
	kp->epfd = kp->wakefd = kp->listenfd = -1;
	pthread_mutex_init(&kp->cmd_lock, NULL);
	pthread_mutex_init(&kp->reg_lock, NULL);
	CDS_INIT_LIST_HEAD(&kp->cmds);
	CDS_INIT_LIST_HEAD(&kp->ctl);
	CDS_INIT_LIST_HEAD(&kp->conns);
	CDS_INIT_LIST_HEAD(&kp->dead);
	CDS_INIT_LIST_HEAD(&kp->fetches);
	CDS_INIT_LIST_HEAD(&kp->peers);
	CDS_INIT_LIST_HEAD(&kp->kick);
	r = copy_params(kp, p);
	if (r < 0)
		goto fail;
	r = peer_secret_load(p->secret_file, &kp->secret, why, sizeof(why));
	if (r < 0) {
		kp_log(kp, KVSPEER_LOG_ERR, "%s", why);
		goto fail;
	}
	r = p->listen ? setup_serving(kp, p) : 0;
	if (r < 0)
		goto fail;
	r = setup_sources(kp, p);
	if (r < 0)
		goto fail;
	r = seed_lock_ids(kp);
	if (r < 0)
		goto fail;
	r = pthread_create(&kp->thread, NULL, service, kp);
	if (r) {
		r = -r;
		goto fail;
	}
	kp->thread_started = true;
	*ret_kp = kp;
	return 0;
fail:
	kp_destroy(kp);
	return r;
}

void kvspeer_free(struct kvspeer *kp)
{
	if (!kp)
		return;
	pthread_mutex_lock(&kp->cmd_lock);
	kp->stopping = true;
	pthread_mutex_unlock(&kp->cmd_lock);
	kp_wake(kp);
	if (kp->thread_started)
		pthread_join(kp->thread, NULL);
	kp->thread_started = false;
	kp_destroy(kp);
}

int kvspeer_local_addr(struct kvspeer *kp, char *buf, size_t len)
{
	if (!kp || !buf || !len)
		return -EINVAL;
	if (!kp->serving)
		return -ENOTCONN;
	if (strlen(kp->listen_str) >= len)
		return -ENOSPC;
	memcpy(buf, kp->listen_str, strlen(kp->listen_str) + 1);
	return 0;
}

/* ---- Statistics and peers ------------------------------------------------------- */

int kvspeer_stats(struct kvspeer *kp, struct kvspeer_stats *ret)
{
	const uint64_t *src;
	uint64_t *dst;

	if (!kp || !ret)
		return -EINVAL;
	_Static_assert(sizeof(struct kvspeer_stats) % sizeof(uint64_t) == 0, "stats are u64s");
	src = (const uint64_t *)&kp->st;
	dst = (uint64_t *)ret;
	/*
	 * Per field, in order, each an acquire: locks_held pairs with its
	 * release in lock_end(), so what was counted before a lock ended (its
	 * reason, a serve failure: fields after it) is seen with it.  The
	 * other counters pair with nothing.
	 */
	_Static_assert(offsetof(struct kvspeer_stats, locks_held) <
			       offsetof(struct kvspeer_stats, locks_released) &&
		       offsetof(struct kvspeer_stats, locks_held) <
			       offsetof(struct kvspeer_stats, serve_fail),
		       "locks_held is read before what a lock's end counts");
	for (size_t i = 0; i < sizeof(*ret) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_ACQUIRE);
	return 0;
}

/* What we know of a peer we fetch from. */
static void server_info(struct kvspeer_peer_info *i, const struct peer_ent *pe, uint64_t now)
{
	*i = (struct kvspeer_peer_info){
		.role = KVSPEER_PEER_SERVER,
		.state = pe->busy		    ? KVSPEER_PEER_BUSY
			 : pe->conns && pe->ever_ok ? KVSPEER_PEER_IDLE
			 : pe->conns		    ? KVSPEER_PEER_CONNECTING
			 : pe->last_error	    ? KVSPEER_PEER_FAILED
						    : KVSPEER_PEER_CLOSED,
		.conns = pe->conns,
		.locks = pe->locks,
		.epoch = pe->epoch,
		.blocks = pe->blocks,
		.bytes = pe->bytes,
		.failures = pe->failures,
		.last_error = pe->last_error,
		.idle_ms = (now - pe->last_ns) / NSEC_PER_MSEC,
	};
	snprintf(i->addr, sizeof(i->addr), "%s", pe->addr);
	memcpy(i->node, pe->node, sizeof(i->node));
}

/* What we know of a peer that fetches from us, through its connection @c. */
static void client_info(struct kvspeer_peer_info *i, const struct conn *c, uint64_t now)
{
	uint64_t last = c->last_rx_ns > c->last_tx_ns ? c->last_rx_ns : c->last_tx_ns;

	*i = (struct kvspeer_peer_info){
		.role = KVSPEER_PEER_CLIENT,
		.state = c->state < CS_READY	      ? KVSPEER_PEER_CONNECTING
			 : (c->stream || c->nr_locks) ? KVSPEER_PEER_BUSY
						      : KVSPEER_PEER_IDLE,
		.conns = 1,
		.locks = c->nr_locks,
		.epoch = c->epoch,
		.blocks = c->blocks_served,
		.bytes = c->bytes_served,
		.failures = c->errors,
		.idle_ms = (now - last) / NSEC_PER_MSEC,
	};
	snprintf(i->addr, sizeof(i->addr), "%s", c->addr_str);
	if (c->state == CS_READY)
		memcpy(i->node, c->node, sizeof(i->node));
}

/* kvspeer_peers() on the thread: those we fetch from, then those fetching from us. */
static int peers_snapshot(struct kvspeer *kp, struct kvspeer_peer_info *ret, unsigned max)
{
	uint64_t now = peer_now_ns();
	struct peer_ent *pe;
	struct conn *c;
	unsigned n = 0;

	cds_list_for_each_entry(pe, &kp->peers, link) {
		if (n < max)
			server_info(&ret[n], pe, now);
		n++;
	}
	cds_list_for_each_entry(c, &kp->conns, link) {
		if (c->side != SIDE_SERVE)
			continue;
		if (n < max)
			client_info(&ret[n], c, now);
		n++;
	}
	return (int)n;
}

struct peers_arg {
	struct kvspeer_peer_info *ret;
	unsigned max;
};

static void peers_fn(struct kvspeer *kp, struct ctl_req *r)
{
	struct peers_arg *a = r->arg;

	r->result = peers_snapshot(kp, a->ret, a->max);
}

int kvspeer_peers(struct kvspeer *kp, struct kvspeer_peer_info *ret, unsigned max)
{
	struct peers_arg a = { .ret = ret, .max = max };

	if (!kp || (!ret && max))
		return -EINVAL;
	return kp_ctl(kp, peers_fn, &a);
}
