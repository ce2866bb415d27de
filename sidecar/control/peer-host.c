/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <urcu/urcu-memb.h>

#include <kvstash/peer.h>

#include "base/util.h"
#include "cluster/registry.h"
#include "control/daemon.h"
#include "control/nspace.h"
#include "control/peer-host.h"
#include "control/session.h"
#include "io/worker.h"
#include "obs/log.h"
#include "store/store.h"

/*
 * The service's state beside struct daemon.  Written on the control
 * thread before kvspeer_new() (which orders it before the service thread
 * runs) and constant after, but for the in-flight list (its mutex) and
 * the lock scratch (service thread only).
 */
struct peer {
	struct daemon *d;
	struct kvspeer *kp;
	pthread_mutex_t lock;	      /* the fetches in flight: join vs done */
	struct cds_list_head fetches; /* struct pfetch.node */
	struct block **scratch;	      /* lock(): KVSPEER_MAX_KEYS hits (service thread) */
	uint32_t timeout_ms;
	uint32_t max_keys;
	bool closing; /* peer_shutdown() ran: no new fetch (control thread) */
	/*
	 * kp for the samplers (control and metrics threads): NULL once
	 * peer_shutdown() freed the service, and final its last counters.
	 */
	pthread_mutex_t slock;
	struct kvspeer_stats final;
	/*
	 * Pool bytes that fetches in flight hold (slots taken, not sealed or
	 * dropped yet): charged to their instances' unsealed share like a
	 * SAVE's.  Service thread writes, samplers read: relaxed.
	 */
	uint64_t staged;
};

/* One fetch in flight, owned by the op that started it. */
struct pfetch {
	struct peer *p;
	struct op *op;
	struct store_ns *ns;
	struct store_tenant *tenant;
	struct store_place place; /* class held; shard set per allocation */
	uint64_t slot_bytes;
	uint64_t staged;     /* bytes of the slots it took (peer.staged) */
	const uint8_t *keys; /* into op->ckeys, nkeys of them */
	uint32_t nkeys;
	struct save_ent *ents; /* nkeys x nshards; .shard NULL where none was taken */
	struct kvspeer_fetch *f;
	struct cds_list_head node; /* in peer.fetches (peer.lock) */
};

static struct peer *peer_of(const struct daemon *d)
{
	return d->peer;
}

/* ---- serving: the host ops (service thread) ------------------------- */

struct lock_ctx {
	struct peer *p;
	const struct kvspeer_lock_req *req;
	struct kvspeer_shard *shards;
	uint64_t *cookies;
};

/* Under the namespace table's lock (nspace_with_tag()): the pins keep it alive after. */
static int lock_in_ns(void *arg, struct nspace *ns)
{
	struct lock_ctx *c = arg;
	const struct kvspeer_lock_req *req = c->req;
	struct pool *pool = store_pool(c->p->d->store);
	uint32_t shards = ns->replicated ? 1 : ns->tp_size;
	struct block **b = c->p->scratch;
	uint64_t bytes;
	uint32_t n, i;

	/* A requester of another shard count has another geometry: nothing matches. */
	if (req->nr_shards != shards)
		return 0;
	n = store_query(c->p->d->store, &ns->in_store, req->keys, req->nr_keys, true, b, &bytes);
	for (i = 0; i < n; i++) {
		/* DRAM only: a block still read back from SSD has no bytes yet. */
		if (block_tier(b[i]) != BLOCK_RESIDENT)
			break;
		for (uint32_t s = 0; s < shards; s++) {
			const struct slot *slot = &b[i]->shards[s].slot;

			c->shards[(size_t)i * shards + s] = (struct kvspeer_shard){
				.addr = slot->addr,
				.len = ns->slot_bytes,
				.generation = pool_slot_generation(pool, slot),
			};
		}
		c->cookies[i] = (uint64_t)(uintptr_t)b[i];
	}
	for (uint32_t j = i; j < n; j++)
		block_unpin(b[j]);
	return (int)i;
}

static int host_lock(void *host, const struct kvspeer_lock_req *req,
		     struct kvspeer_shard *ret_shards, uint64_t *ret_cookies)
{
	struct peer *p = host;
	struct lock_ctx c = { p, req, ret_shards, ret_cookies };
	int r;

	/* A namespace digest is the registry's 16 bytes, zero-padded (docs/PEER.md). */
	for (unsigned i = KVS_KEY_SIZE; i < KVSPEER_DIGEST_SIZE; i++)
		if (req->digest[i])
			return 0;
	r = nspace_with_tag(p->d->nspaces, req->digest, lock_in_ns, &c);
	return r == -ENOENT ? 0 : r;
}

static void host_unlock(void *host, const uint64_t *cookies, uint32_t nr)
{
	(void)host;
	for (uint32_t i = 0; i < nr; i++)
		block_unpin((struct block *)(uintptr_t)cookies[i]);
}

static uint64_t host_generation(void *host, uint64_t cookie, uint32_t shard)
{
	struct peer *p = host;
	const struct block *b = (const struct block *)(uintptr_t)cookie;

	/* Pinned by the lock: its slots stay allocated, their extents keep their arrays. */
	return pool_slot_generation(store_pool(p->d->store), &b->shards[shard].slot);
}

static void host_thread_start(void *host)
{
	(void)host;
	/* Lookups, pins and the fetches' slot allocation are the store's RCU readers. */
	urcu_memb_register_thread();
}

static void host_thread_stop(void *host)
{
	(void)host;
	urcu_memb_unregister_thread();
}

static const struct kvspeer_host_ops host_ops = {
	.lock = host_lock,
	.unlock = host_unlock,
	.generation = host_generation,
	.thread_start = host_thread_start,
	.thread_stop = host_thread_stop,
};

static void peer_log(void *arg, int level, const char *msg)
{
	(void)arg;
	log_full(level, 0, NULL, "peer: %s", msg);
}

/* ---- fetching ------------------------------------------------------- */

/* Service thread: a slot for shard @shard of block @block, taken as a SAVE takes one. */
static void *fetch_alloc(void *arg, uint32_t block, uint32_t shard, uint64_t len)
{
	struct pfetch *pf = arg;
	struct store_place place = pf->place;
	uint32_t nents = 0, skipped, nospace, quota, id = 0;
	struct save_ent ent;

	if (len != pf->slot_bytes || block >= pf->nkeys || shard >= place.nshards)
		return NULL;
	place.shard = shard;
	/*
	 * In the index as WRITING: no QUERY sees the block and no eviction
	 * takes it until store_save_end().  A key another SAVE or fetch has
	 * in the index already ends the prefix here (what is resident past
	 * it still counts when the worker answers).
	 */
	store_save_begin(pf->p->d->store, pf->tenant, pf->ns, &place,
			 pf->keys + (size_t)block * KVS_KEY_SIZE, &id, 1, &ent, &nents, &skipped,
			 &nospace, &quota);
	if (nents != 1)
		return NULL;
	pf->ents[(size_t)block * place.nshards + shard] = ent;
	pf->staged += pf->slot_bytes;
	__atomic_fetch_add(&pf->p->staged, pf->slot_bytes, __ATOMIC_RELAXED);
	return ent.shard->slot.addr;
}

static void pfetch_free(struct pfetch *pf)
{
	if (!pf)
		return;
	if (pf->place.class_id != POOL_NO_CLASS)
		store_class_put(pf->p->d->store, pf->place.class_id);
	free(pf->ents);
	free(pf);
}

/* A joiner's op: the owner's done sealed what came; its worker answers over it. */
static void fetch_joined(void *arg, struct kvspeer_fetch *f, int nr_blocks)
{
	struct op *op = arg;
	int err = 0;

	(void)kvspeer_fetch_result(f, &err);
	op->fetched = nr_blocks;
	op->fetch_err = err;
	worker_cluster_done(op);
}

/* Service thread: the fetch ended; by now the library writes none of its slots. */
static void fetch_done(void *arg, struct kvspeer_fetch *f, int nr_blocks)
{
	struct pfetch *pf = arg;
	struct store *st = pf->p->d->store;
	uint32_t nshards = pf->place.nshards;
	int err = 0;

	(void)kvspeer_fetch_result(f, &err);
	/*
	 * Seal the verified prefix (registering it, as the fetching session's:
	 * its own from now on, kvstash(7)), drop every other slot taken.
	 */
	for (uint32_t i = 0; i < pf->nkeys; i++)
		for (uint32_t s = 0; s < nshards; s++) {
			struct save_ent *e = &pf->ents[(size_t)i * nshards + s];

			if (e->shard)
				store_save_end(st, e, 1, i < (uint32_t)nr_blocks,
					       pf->op->s->reg_tally);
		}
	__atomic_fetch_sub(&pf->p->staged, pf->staged, __ATOMIC_RELAXED);
	/* Off the list first: a QUERY that finds it now joins, one that does not re-fetches. */
	pthread_mutex_lock(&pf->p->lock);
	cds_list_del(&pf->node);
	pthread_mutex_unlock(&pf->p->lock);
	pf->op->fetched = nr_blocks;
	pf->op->fetch_err = err;
	worker_cluster_done(pf->op);
	kvspeer_fetch_unref(pf->f);
	pfetch_free(pf);
}

/* peer.lock held: the fetch in flight in @ns that is fetching @key, or NULL. */
static struct pfetch *find_fetch(struct peer *p, const struct store_ns *ns, const uint8_t *key)
{
	struct pfetch *pf;

	cds_list_for_each_entry(pf, &p->fetches, node) {
		if (pf->ns != ns)
			continue;
		for (uint32_t i = 0; i < pf->nkeys; i++)
			if (memcmp(pf->keys + (size_t)i * KVS_KEY_SIZE, key, KVS_KEY_SIZE) == 0)
				return pf;
	}
	return NULL;
}

/* Control thread: the fetch's state for @op, with its slot class held. */
static int pfetch_new(struct peer *p, struct op *op, uint32_t nkeys, struct pfetch **ret)
{
	struct session *s = session_of(op->s);
	const struct nspace *ns = s->ns;
	struct pfetch *pf;
	uint32_t nshards;
	int r;

	/* Geometry comes with the namespace's first registration (nspace_adopt()). */
	if (!ns || !ns->has_geometry)
		return -ENOENT;
	nshards = ns->replicated ? 1 : ns->tp_size;
	nkeys = MIN(nkeys, p->max_keys);
	nkeys = MIN(nkeys, KVSPEER_MAX_ENTRIES / nshards);
	pf = calloc(1, sizeof(*pf));
	if (!pf)
		return -ENOMEM;
	pf->p = p;
	pf->op = op;
	pf->ns = op->s->ns;
	pf->tenant = op->s->tenant;
	pf->slot_bytes = ns->slot_bytes;
	pf->keys = (const uint8_t *)(op->ckeys + op->hits0);
	pf->nkeys = nkeys;
	pf->place = (struct store_place){
		.class_id = POOL_NO_CLASS,
		.region = pool_region_for_node(store_pool(p->d->store), op->w->node),
		.nshards = nshards,
	};
	pf->ents = calloc((size_t)nkeys * nshards, sizeof(*pf->ents));
	if (!pf->ents) {
		pfetch_free(pf);
		return -ENOMEM;
	}
	r = store_class_get(p->d->store, ns->slot_bytes, &pf->place.class_id);
	if (r < 0) {
		pf->place.class_id = POOL_NO_CLASS;
		pfetch_free(pf);
		return r;
	}
	*ret = pf;
	return 0;
}

void peer_fetch(struct daemon *d, struct op *op, const char *addr, const char *node, uint64_t epoch,
		uint32_t nkeys)
{
	struct peer *p = peer_of(d);
	struct kvspeer_fetch_params fp;
	struct pfetch *pf = NULL, *other;
	uint8_t digest[KVSPEER_DIGEST_SIZE] = { 0 };
	int r;

	if (!p || p->closing) {
		op->fetch_err = -ESHUTDOWN;
		worker_cluster_done(op);
		return;
	}
	r = pfetch_new(p, op, nkeys, &pf);
	if (r < 0) {
		op->fetch_err = r;
		worker_cluster_done(op);
		return;
	}
	memcpy(digest, op->tag, KVS_KEY_SIZE);
	kvspeer_fetch_params_init(&fp);
	fp.peer = addr;
	fp.digest = digest;
	fp.keys = pf->keys;
	fp.nr_keys = pf->nkeys;
	fp.nr_shards = pf->place.nshards;
	fp.timeout_ms = p->timeout_ms;
	fp.expect_node = node;
	fp.expect_epoch = epoch;
	fp.alloc = fetch_alloc;
	fp.done = fetch_done;
	fp.arg = pf;

	/* Join or submit under the list's lock: fetch_done() takes it before it unlists. */
	pthread_mutex_lock(&p->lock);
	other = find_fetch(p, pf->ns, pf->keys);
	if (other) {
		r = kvspeer_fetch_join(other->f, fetch_joined, op);
		pthread_mutex_unlock(&p->lock);
		pfetch_free(pf);
		if (r < 0) {
			/* It just completed: what it sealed is there for the answer. */
			op->fetch_err = r == -EALREADY ? 0 : r;
			worker_cluster_done(op);
		}
		return;
	}
	cds_list_add_tail(&pf->node, &p->fetches);
	r = kvspeer_fetch_submit(p->kp, &fp, &pf->f);
	if (r < 0)
		cds_list_del(&pf->node);
	pthread_mutex_unlock(&p->lock);
	if (r < 0) {
		log_warning_errno(r, "peer: cannot fetch from %s", addr);
		pfetch_free(pf);
		op->fetch_err = r;
		worker_cluster_done(op);
	}
}

/* ---- lifetime ------------------------------------------------------- */

/* The library's parameters from [cluster]; @host holds the node name when it is the host's. */
static int peer_params(const struct kvs_config *cfg, struct kvspeer_params *kp, char *host,
		       size_t hostlen, char *why, size_t wl)
{
	int r;

	kvspeer_params_init(kp);
	if (!cfg->peer_allow || !cfg->peer_allow[0]) {
		snprintf(why, wl, "[cluster] peer_listen needs peer_allow (the peers' networks)");
		return -EINVAL;
	}
	r = cluster_node_name(cfg, host, hostlen, &kp->node, why, wl);
	if (r < 0)
		return r;
	kp->transport = cfg->peer_transport == PEER_TRANSPORT_UCX ? KVSPEER_TRANSPORT_UCX
								  : KVSPEER_TRANSPORT_TCP;
	kp->cluster = cfg->cluster_name;
	kp->secret_file = cfg->peer_secret_file;
	kp->listen = cfg->peer_listen;
	kp->allow = cfg->peer_allow;
	kp->ucx_devices =
		cfg->peer_ucx_devices && cfg->peer_ucx_devices[0] ? cfg->peer_ucx_devices : NULL;
	if (cfg->peer_ucx_allow_tcp)
		kp->flags |= KVSPEER_F_UCX_ALLOW_TCP;
	kp->lock_ttl_ms = cfg->peer_lock_ttl_ms;
	kp->io_timeout_ms = cfg->peer_io_timeout_ms;
	kp->max_conns = cfg->peer_max_conns;
	kp->max_conns_per_peer = cfg->peer_max_conns_per_peer;
	kp->max_locks_per_peer = cfg->peer_max_locks_per_peer;
	kp->max_unauth = cfg->peer_max_unauth;
	kp->max_unauth_per_peer = cfg->peer_max_unauth_per_peer;
	kp->hello_timeout_ms = cfg->peer_handshake_timeout_ms;
	if (kp->max_unauth > kp->max_conns) {
		snprintf(why, wl, "[cluster] peer_max_unauth (%u) above peer_max_conns (%u)",
			 kp->max_unauth, kp->max_conns);
		return -EINVAL;
	}
	kp->log = peer_log;
	return 0;
}

int peer_check_config(const struct kvs_config *cfg, char *why, size_t wl)
{
	struct kvspeer_params kp;
	char host[KVSPEER_NAME_MAX];

	why[0] = '\0';
	if (!cfg->peer_listen || !cfg->peer_listen[0])
		return 0;
	return peer_params(cfg, &kp, host, sizeof(host), why, wl);
}

int peer_init(struct daemon *d)
{
	struct kvspeer_params kp;
	char host[KVSPEER_NAME_MAX], why[256] = "", addr[KVSPEER_ADDR_MAX];
	struct peer *p;
	int r;

	if (!d->cfg->peer_listen || !d->cfg->peer_listen[0])
		return 0;
	r = peer_params(d->cfg, &kp, host, sizeof(host), why, sizeof(why));
	if (r < 0)
		return log_error_errno(r, "%s", why);
	p = calloc(1, sizeof(*p));
	if (p)
		p->scratch = calloc(KVSPEER_MAX_KEYS, sizeof(*p->scratch));
	if (!p || !p->scratch) {
		free(p);
		return log_error_errno(ENOMEM, "peer service");
	}
	p->d = d;
	p->timeout_ms = d->cfg->peer_fetch_timeout_ms;
	p->max_keys = MIN(d->cfg->peer_fetch_max_keys, KVSPEER_MAX_KEYS);
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->slock, NULL);
	CDS_INIT_LIST_HEAD(&p->fetches);
	kp.ops = &host_ops;
	kp.host = p;
	r = kvspeer_new(&kp, &p->kp);
	if (r < 0) {
		pthread_mutex_destroy(&p->lock);
		pthread_mutex_destroy(&p->slock);
		free(p->scratch);
		free(p);
		return log_error_errno(r, "cannot start the peer service on %s",
				       d->cfg->peer_listen);
	}
	d->peer = p;
	/* Only the pool is ever served. */
	for (unsigned i = 0; i < d->pool->nr_regions; i++) {
		r = kvspeer_mem_register(p->kp, d->pool->regions[i].base, d->pool->regions[i].size);
		if (r < 0)
			return log_error_errno(r, "peer service: cannot register pool region %u",
					       i);
	}
	if (kvspeer_local_addr(p->kp, addr, sizeof(addr)) < 0)
		strscpy_trunc(addr, d->cfg->peer_listen, sizeof(addr));
	log_info("peer service: node %s of cluster %s on %s (%s), peers %s", kp.node, kp.cluster,
		 addr, kp.transport == KVSPEER_TRANSPORT_UCX ? "ucx" : "tcp", kp.allow);
	return 0;
}

void peer_set_epoch(struct daemon *d, uint64_t epoch)
{
	struct peer *p = peer_of(d);

	if (p)
		kvspeer_set_epoch(p->kp, epoch);
}

void peer_shutdown(struct daemon *d)
{
	struct peer *p = peer_of(d);
	struct kvspeer *kp;

	if (!p || p->closing)
		return;
	/* No new fetch from here (peer_fetch(), this thread). */
	p->closing = true;
	pthread_mutex_lock(&p->slock);
	kvspeer_stats(p->kp, &p->final);
	kp = p->kp;
	p->kp = NULL;
	pthread_mutex_unlock(&p->slock);
	/* Completes every fetch (their ops go back), unlocks every peer's lock. */
	kvspeer_free(kp);
}

void peer_fini(struct daemon *d)
{
	struct peer *p = peer_of(d);

	if (!p)
		return;
	peer_shutdown(d);
	d->peer = NULL;
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->slock);
	free(p->scratch);
	free(p);
}

uint64_t peer_staged_bytes(struct daemon *d)
{
	struct peer *p = peer_of(d);

	return p ? __atomic_load_n(&p->staged, __ATOMIC_RELAXED) : 0;
}

bool peer_sample(struct daemon *d, struct kvspeer_stats *ret_stats,
		 struct kvspeer_peer_info *ret_peers, unsigned max, unsigned *ret_nr)
{
	struct peer *p = peer_of(d);
	int n = 0;

	if (!p)
		return false;
	pthread_mutex_lock(&p->slock);
	if (p->kp) {
		if (kvspeer_stats(p->kp, ret_stats) < 0)
			memset(ret_stats, 0, sizeof(*ret_stats));
		if (ret_peers && max)
			n = kvspeer_peers(p->kp, ret_peers, max);
	} else {
		*ret_stats = p->final;
	}
	pthread_mutex_unlock(&p->slock);
	if (ret_nr)
		*ret_nr = n > 0 ? MIN((unsigned)n, max) : 0;
	return true;
}
