/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/util.h"
#include "obs/log.h"
#include "store/spill.h"
#include "store/store.h"

/*
 * ThreadSanitizer cannot see liburcu's grace periods (the library is not
 * instrumented), so it takes every deferred free for a race with the last
 * reader, and reporting thousands of those made a TSan kvstashd take
 * minutes to exit.  Say what the grace period guarantees: the destroyer's
 * accesses and every lock-free reader's section happen before the free.
 */
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#define tsan_release(p) __tsan_release(p)
#define tsan_acquire(p) __tsan_acquire(p)
#else
#define tsan_release(p) ((void)(p))
#define tsan_acquire(p) ((void)(p))
#endif
/*
 * TSan's stand-in for "a grace period passed": one for the process, as
 * liburcu's grace periods are (every store shares the one RCU flavour).
 */
static int rcu_readers_done;

/* End a read-side section of the store: before any free of what it saw. */
static inline void read_unlock(void)
{
	urcu_memb_read_unlock();
	tsan_release(&rcu_readers_done);
}

#define EVICT_TRIES 64
#define SPILL_AHEAD_MAX 16 /* victims spilled ahead per slot taken: a bounded step (spill_ahead()) */
/*
 * Index size.  liburcu's own auto-resize grows a table only once it holds
 * 8 nodes per bucket (count >> 3 >= size, checked at powers of two), so
 * between 32k and 256k blocks a lookup walks ~4 chain nodes, each a cache
 * miss in a different block: a 32768-key QUERY over 160k resident blocks
 * took 55 ms.  The store keeps the load between 1/8 and 1 itself: it
 * counts the nodes under the store lock and asks the resizer thread
 * (cds_lfht_resize() is synchronous, and a shrink waits for grace periods:
 * never on the I/O worker) for twice the nodes when they pass the buckets,
 * and for half the buckets when they fall below an eighth.
 */
#define HT_MIN_BUCKETS (1ul << 12)

/*
 * Long QUERYs look up their DRAM prefix on several threads: a lookup is a
 * few dependent cache misses (55 ns a key on the H200 host), so 32768 keys
 * took 2 ms on one core.  From QUERY_PAR_MIN keys the keys are cut into
 * chunks (QUERY_CHUNK keys, or more so there are at most QUERY_MAX_CHUNKS)
 * that the caller and the store's query helpers claim in turn; the prefix
 * is the chunks in order up to the first miss.
 */
#define QUERY_PAR_MIN 4096u
#define QUERY_CHUNK 1024u
#define QUERY_MAX_CHUNKS 64u
#define QUERY_MAX_HELPERS 15u

struct query_job {
	struct cds_list_head node; /* in qjobs until a helper finds it claimed (qlock) */
	const struct store_query_req *q;
	uint32_t chunk;		       /* keys per chunk */
	uint32_t nchunks;
	uint32_t next;		       /* the next chunk to claim (atomic) */
	uint32_t done;		       /* chunks finished (atomic) */
	unsigned users;		       /* helpers inside the job (qlock) */
	struct store_query_res res[QUERY_MAX_CHUNKS]; /* hits: where the chunk's prefix ends */
};

struct store {
	pthread_mutex_t lock; /* the store lock */
	struct cds_lfht *ht;
	unsigned long ht_nodes;	  /* shards in the index (store lock) */
	unsigned long ht_buckets; /* size last asked for (store lock) */
	pthread_t resizer;
	bool resizer_running;
	pthread_mutex_t rlock; /* the resizer's: nests inside the store lock */
	pthread_cond_t rcond;
	unsigned long resize_to; /* rlock; 0: nothing asked */
	bool resizer_stop;	 /* rlock */
	/* The query helpers (QUERY_PAR_MIN), waiting for jobs under qlock. */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct cds_list_head qjobs;
	bool qstop; /* qlock */
	unsigned nhelpers;
	pthread_t helpers[QUERY_MAX_HELPERS];

	struct pool *pool; /* the caller's */
	/* store_params.revoke and its table (may be NULL: nothing revoked). */
	unsigned (*revoke)(struct lease_table *, const struct lease_holder *, uint64_t);
	struct lease_table *leases;
	const struct store_hooks *hooks;	/* store_params.hooks; NULL: none */
	struct s3fifo queues[POOL_MAX_CLASSES]; /* sealed blocks per class */
	struct cds_list_head partial;		/* oldest first */
	struct cds_list_head tenants;		/* tenants with unsealed bytes */
	uint64_t unsealed_cap;			/* bytes one tenant may hold unsealed */
	uint64_t seed[2];			/* keyed hash against collision floods */
	struct store_stats stats;		/* counters: relaxed atomics */

	struct cds_list_head failed; /* blocks whose read failed, until unpinned (store lock) */
	/* The SSD tier (store_set_ssd()), called through spill.h; it calls back through spill_cbs. */
	struct spill tier;
};

struct lookup_key {
	uint32_t ns_id;
	uint32_t shard;
	const uint8_t *key;
};

static inline unsigned long hash_key(const struct store *st, uint32_t ns_id, uint32_t shard,
				     const uint8_t *key)
{
	uint64_t k0, k1;

	memcpy(&k0, key, 8);
	memcpy(&k1, key + 8, 8);
	return fmix64(k0 ^ st->seed[0]) ^
	       fmix64(k1 ^ st->seed[1] ^ ((uint64_t)ns_id << 32) ^ shard);
}

/*
 * A block's fingerprint for its S3-FIFO queue's ghost: (namespace, key)
 * through the index's keyed hash (as shard 0), so a block saved again
 * after its eviction is recognised, and nobody can aim collisions at the
 * ghost (one would only admit a block straight to main).
 */
static uint64_t block_fp(const struct store *st, const struct block *b)
{
	return hash_key(st, b->ns_id, 0, b->key);
}

static int match(struct cds_lfht_node *node, const void *arg)
{
	const struct lookup_key *lk = arg;
	const struct shard *sh = caa_container_of(node, struct shard, hnode);

	return sh->idx == lk->shard && sh->blk->ns_id == lk->ns_id &&
	       memcmp(sh->blk->key, lk->key, KVS_KEY_SIZE) == 0;
}

/* Caller holds the RCU read lock (or the store lock, for writers). */
static struct shard *lookup(const struct store *st, uint32_t ns_id, uint32_t shard,
			    const uint8_t *key)
{
	struct lookup_key lk = { ns_id, shard, key };
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;

	cds_lfht_lookup(st->ht, hash_key(st, ns_id, shard, key), match, &lk, &it);
	n = cds_lfht_iter_get_node(&it);
	return n ? caa_container_of(n, struct shard, hnode) : NULL;
}

static void *resizer_main(void *arg)
{
	struct store *st = arg;

	/* A registered reader: the resize links bucket nodes under the read lock. */
	urcu_memb_register_thread();
	pthread_mutex_lock(&st->rlock);
	for (;;) {
		unsigned long to;

		while (!st->resize_to && !st->resizer_stop)
			pthread_cond_wait(&st->rcond, &st->rlock);
		if (st->resizer_stop)
			break;
		to = st->resize_to;
		st->resize_to = 0;
		pthread_mutex_unlock(&st->rlock);
		/* Concurrent with lookups, adds and deletes; never in a read-side section. */
		cds_lfht_resize(st->ht, to);
		pthread_mutex_lock(&st->rlock);
	}
	pthread_mutex_unlock(&st->rlock);
	urcu_memb_unregister_thread();
	return NULL;
}

static void *query_helper(void *arg);

/* Store lock held: one node more (@delta 1) or less (-1); resize when the load leaves [1/8, 1]. */
static void ht_account(struct store *st, long delta)
{
	unsigned long want = st->ht_buckets;

	st->ht_nodes += (unsigned long)delta;
	if (st->ht_nodes > st->ht_buckets)
		want = 2 * st->ht_buckets;
	else if (st->ht_nodes < st->ht_buckets / 8 && st->ht_buckets > HT_MIN_BUCKETS)
		want = st->ht_buckets / 2;
	if (want == st->ht_buckets || !st->resizer_running)
		return;
	st->ht_buckets = want;
	pthread_mutex_lock(&st->rlock);
	st->resize_to = want;
	pthread_cond_signal(&st->rcond);
	pthread_mutex_unlock(&st->rlock);
}

/*
 * Bytes one tenant may hold unsealed: @share percent of a region, not of
 * the pool, as a session's shards all go to its worker's region (NUMA
 * node): half of a two-node pool would be all of one node.  Regions are
 * of one size.  At most 2^50 bytes ([pool] size) times 100: no overflow.
 * 100: no share but the pool, whose own ENOSPC is then the answer.
 */
static uint64_t unsealed_cap(const struct pool *pool, uint32_t share)
{
	uint64_t region = UINT64_MAX;

	if (share >= 100)
		return UINT64_MAX;
	for (unsigned i = 0; i < pool->nr_regions; i++)
		region = MIN(region, (uint64_t)pool->regions[i].nr_extents * pool->extent_size);
	return region * share / 100;
}

void store_ns_init(struct store_ns *ns, uint32_t id)
{
	ns->id = id;
	ns->blocks = 0;
	CDS_INIT_LIST_HEAD(&ns->list);
}

static void block_destroy(struct store *st, struct block *b);

/* spill_cbs.drop: an evicted block's writes to SSD ended; its slots go. */
static void tier_drop(void *core, struct block *b)
{
	block_destroy(core, b);
}

/* spill_cbs.requeue: a block rescued mid-write is resident and evictable again. */
static void tier_requeue(void *core, struct block *b)
{
	struct store *st = core;

	s3fifo_insert(&st->queues[b->class_id], &b->qn, block_fp(st, b));
}

int store_new(const struct store_params *p, struct store **ret)
{
	struct store *st = calloc(1, sizeof(*st));
	int r;

	if (!st)
		return -ENOMEM;
	pthread_mutex_init(&st->lock, NULL);
	pthread_mutex_init(&st->rlock, NULL);
	pthread_cond_init(&st->rcond, NULL);
	pthread_mutex_init(&st->qlock, NULL);
	pthread_cond_init(&st->qcond, NULL);
	CDS_INIT_LIST_HEAD(&st->qjobs);
	if (getrandom(st->seed, sizeof(st->seed), 0) != sizeof(st->seed)) {
		st->seed[0] = now_ns();
		st->seed[1] = (uint64_t)(uintptr_t)st ^ 0x9e3779b97f4a7c15ull;
	}
	/* No CDS_LFHT_AUTO_RESIZE: ht_account() sizes the table (see HT_MIN_BUCKETS). */
	st->ht = cds_lfht_new_flavor(HT_MIN_BUCKETS, HT_MIN_BUCKETS, 0, 0, &urcu_memb_flavor, NULL);
	if (!st->ht) {
		r = -ENOMEM;
		goto fail;
	}
	st->ht_buckets = HT_MIN_BUCKETS;
	st->pool = p->pool;
	st->revoke = p->revoke;
	st->leases = p->leases;
	st->hooks = p->hooks;
	for (unsigned i = 0; i < POOL_MAX_CLASSES; i++)
		s3fifo_init(&st->queues[i]);
	CDS_INIT_LIST_HEAD(&st->partial);
	CDS_INIT_LIST_HEAD(&st->tenants);
	CDS_INIT_LIST_HEAD(&st->failed);
	spill_init(&st->tier, p->pool, st->queues,
		   &(struct spill_cbs){ .drop = tier_drop, .requeue = tier_requeue, .core = st });
	st->unsealed_cap = unsealed_cap(p->pool, p->unsealed_share);
	/* Last: pthread_create() orders everything above before the resizer's first step. */
	r = -pthread_create(&st->resizer, NULL, resizer_main, st);
	if (r)
		goto fail;
	pthread_setname_np(st->resizer, "kvs-resize");
	st->resizer_running = true;
	/* Helpers are an accelerator: as many as start (none: one thread looks up). */
	for (unsigned i = 0; i < MIN(p->query_helpers, QUERY_MAX_HELPERS); i++) {
		if (pthread_create(&st->helpers[st->nhelpers], NULL, query_helper, st))
			break;
		pthread_setname_np(st->helpers[st->nhelpers++], "kvs-query");
	}
	*ret = st;
	return 0;
fail:
	if (st->ht)
		cds_lfht_destroy(st->ht, NULL);
	pthread_cond_destroy(&st->qcond);
	pthread_mutex_destroy(&st->qlock);
	pthread_cond_destroy(&st->rcond);
	pthread_mutex_destroy(&st->rlock);
	pthread_mutex_destroy(&st->lock);
	free(st);
	return r;
}

struct pool *store_pool(const struct store *st)
{
	return st->pool;
}

static void free_block_rcu(struct rcu_head *h)
{
	struct block *b = caa_container_of(h, struct block, rcu);

	tsan_acquire(&rcu_readers_done);
	tsan_acquire(b);
	free(b);
}

static void stat_add(uint64_t *c, int64_t v)
{
	__atomic_fetch_add(c, (uint64_t)v, __ATOMIC_RELAXED);
}

/* ---- tenants ------------------------------------------------------ */

struct store_tenant *store_tenant_new(struct store *st, const char *name,
				      struct lease_holder *leases)
{
	struct store_tenant *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->st = st;
	t->leases = leases;
	CDS_INIT_LIST_HEAD(&t->node);
	snprintf(t->name, sizeof(t->name), "%s", name);
	return t;
}

void store_tenant_put(struct store_tenant *t)
{
	struct store *st;

	if (!t)
		return;
	st = t->st;
	pthread_mutex_lock(&st->lock);
	t->gone = true;
	if (t->unsealed == 0)
		free(t); /* not in st->tenants: only tenants with a charge are */
	pthread_mutex_unlock(&st->lock);
}

static uint64_t slot_bytes_of(const struct store *st, const struct block *b)
{
	return st->pool->classes[b->class_id].slot_bytes;
}

/* Store lock held: @t pays for @sh's slot until its block seals or the shard goes. */
static void charge(struct store *st, struct shard *sh, struct store_tenant *t)
{
	if (!t)
		return;
	if (t->unsealed == 0)
		cds_list_add_tail(&t->node, &st->tenants);
	t->unsealed += slot_bytes_of(st, sh->blk);
	sh->tenant = t;
}

static void uncharge(struct store *st, struct shard *sh)
{
	struct store_tenant *t = sh->tenant;

	if (!t)
		return;
	sh->tenant = NULL;
	t->unsealed -= slot_bytes_of(st, sh->blk);
	if (t->unsealed)
		return;
	cds_list_del_init(&t->node);
	if (t->gone)
		free(t); /* its instance went first: the last charge frees it */
}

/* Store lock held.  Remove the block's shards, free their slots and it. */
static void block_destroy(struct store *st, struct block *b)
{
	for (uint32_t i = 0; i < b->nshards; i++) {
		struct shard *sh = &b->shards[i];

		if (sh->state == SHARD_EMPTY)
			continue;
		uncharge(st, sh);
		cds_lfht_del(st->ht, &sh->hnode);
		ht_account(st, -1);
		pool_free(st->pool, &sh->slot);
		sh->state = SHARD_EMPTY;
	}
	if (b->sealed) {
		/* No-op after evict(), which took it out as an eviction. */
		s3fifo_remove(&st->queues[b->class_id], &b->qn);
		stat_add(&st->stats.resident, -1);
		spill_block_gone(&st->tier, b);
		if (st->hooks && b->ns->tagged)
			st->hooks->gone(st->hooks->arg, b->ns->tag, b->key);
	} else if (b->tier == BLOCK_RESIDENT) {
		cds_list_del(&b->partial);
		stat_add(&st->stats.partial, -1);
	} else {
		/* A failed read's (st->failed); a READING block is never destroyed. */
		cds_list_del(&b->partial);
	}
	cds_list_del(&b->ns_node);
	/* Release: pairs with the load-acquire in nspace.c's free_if_unused(). */
	__atomic_fetch_sub(&b->ns->blocks, 1, __ATOMIC_RELEASE);
	/* Lock-free readers may still hold it: free after a grace period. */
	tsan_release(b);
	urcu_memb_call_rcu(&b->rcu, free_block_rcu);
}

/*
 * Claim for eviction (store lock held): sealed, unpinned and not still
 * being written to SSD (a rescued block, spill_end()), moved to
 * BLOCK_EVICTING.
 */
static bool claim(struct block *b)
{
	int32_t zero = 0;

	if (!b->sealed || b->spilling)
		return false;
	/*
	 * Pairs with the CAS loop in pin(): a pinner that loses sees
	 * BLOCK_EVICTING and treats the block as a miss.
	 */
	return __atomic_compare_exchange_n(&b->pins, &zero, BLOCK_EVICTING, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_RELAXED);
}

/* A failed read's block, once unpinned: moved to BLOCK_EVICTING, as claim() does. */
static bool claim_failed(struct block *b)
{
	int32_t zero = 0;

	/* Pairs with the CAS loop in pin(), as claim()'s. */
	return __atomic_compare_exchange_n(&b->pins, &zero, BLOCK_EVICTING, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_RELAXED);
}

static bool queue_claim(struct s3fifo_node *n, void *arg)
{
	return claim(caa_container_of(n, struct block, qn));
}

/*
 * The biggest unsealed holding among the tenants charged for @b, when @b
 * is a partial block no copy writes and that holding is larger than
 * @self's (whose SAVE needs the room); else 0: not to be reclaimed.
 */
static uint64_t partial_holder(const struct block *b, const struct store_tenant *self)
{
	uint64_t floor = self ? self->unsealed : 0, best = 0;

	if (b->sealed || b->writers)
		return 0;
	for (uint32_t i = 0; i < b->nshards; i++) {
		const struct store_tenant *t = b->shards[i].tenant;

		if (t && t != self && t->unsealed > floor && t->unsealed > best)
			best = t->unsealed;
	}
	return best;
}

/* What a SAVE may take room from: sealed unpinned blocks, and with @self, partial ones. */
struct room {
	bool partials;
	const struct store_tenant *self;
};

static bool owner_evictable(void *owner, void *arg)
{
	const struct room *room = arg;
	struct block *b = ((struct shard *)owner)->blk;

	if (b->sealed)
		return __atomic_load_n(&b->pins, __ATOMIC_RELAXED) == 0;
	return room && room->partials && partial_holder(b, room->self);
}

static void reclaim(struct store *st, struct block *b)
{
	block_destroy(st, b);
	stat_add(&st->stats.partial_reclaimed, 1);
}

/*
 * Store lock held, @b claimed (so sealed): evicted, remembered by its
 * queue's ghost.  With @may_spill it may go to SSD first: then its slots
 * are freed only when the writes end, and this returns false.
 */
static bool evict(struct store *st, struct block *b, bool may_spill)
{
	s3fifo_evict(&st->queues[b->class_id], &b->qn, block_fp(st, b));
	stat_add(&st->stats.evictions, 1);
	if (may_spill && spill_block(&st->tier, b))
		return false;
	block_destroy(st, b);
	return true;
}

/* Empty extent @e by evicting every block with a shard in it (or reclaiming, per @room). */
static bool evict_extent(struct store *st, struct pool_extent *e, const struct room *room)
{
	for (uint32_t i = 0; i < e->nslots; i++) {
		struct shard *sh = e->owners[i];

		if (!sh)
			continue;
		if (!sh->blk->sealed && room && room->partials &&
		    partial_holder(sh->blk, room->self))
			reclaim(st, sh->blk);
		else if (claim(sh->blk))
			evict(st, sh->blk, false); /* the extent must be empty now */
		else
			return false; /* pinned meanwhile: try elsewhere */
	}
	return true;
}

/*
 * Store lock held, nothing sealed left to evict for a slot of class @cls:
 * reclaim a partial block of whoever holds more unsealed bytes than
 * @self, the biggest holder first (then the oldest).  One of @cls gives
 * its slot at once; else a whole extent of them (another size) must go.
 * The walk is over every partial block: a slow path, taken only when a
 * SAVE would otherwise fail.
 */
static bool reclaim_partial_for(struct store *st, const struct store_tenant *self, unsigned region,
				uint32_t cls)
{
	struct room room = { true, self };
	struct block *b, *best = NULL;
	struct pool_extent *e;
	uint64_t best_holder = 0;

	cds_list_for_each_entry(b, &st->partial, partial) {
		uint64_t h;

		if (b->class_id != cls)
			continue;
		h = partial_holder(b, self);
		if (h > best_holder) {
			best = b;
			best_holder = h;
		}
	}
	if (best) {
		reclaim(st, best);
		return true;
	}
	e = pool_pick_extent_any(st->pool, region, cls, owner_evictable, &room);
	return e && evict_extent(st, e, &room);
}

/*
 * Store lock held, a slot of @p's class just taken.  With an SSD tier,
 * eviction runs ahead of need: while the region's free room plus what
 * writes to SSD hold (their slots come back when they land) is below
 * the reserve (spill_cap), the coldest blocks spill.  A SAVE then finds
 * free slots at the drive's pace; when it finds none, the drive is behind
 * and take_slot() drops a victim unwritten, at once (counted), as an
 * eviction never waits for the SSD.  Spilling only once the pool was
 * full made every slot taken cost writes until the reserve was held,
 * then drops anyway.
 */
static void spill_ahead(struct store *st, const struct store_place *p)
{
	const struct pool_region *r = &st->pool->regions[p->region];
	uint64_t cap = (uint64_t)r->nr_extents * st->pool->extent_size;
	uint64_t slot = st->pool->classes[p->class_id].slot_bytes;

	for (int i = 0; i < SPILL_AHEAD_MAX; i++) {
		uint64_t used = __atomic_load_n(&r->used_bytes, __ATOMIC_RELAXED);
		struct s3fifo_node *victim;

		if (!spill_wants_ahead(&st->tier, cap - MIN(used, cap), slot))
			return;
		victim = s3fifo_pick(&st->queues[p->class_id], queue_claim, NULL, 0);
		if (!victim)
			return;
		evict(st, caa_container_of(victim, struct block, qn), true);
	}
}

/* Store lock held, @b claimed: evicted now; with an SSD tier, counted if it is not there. */
static void evict_now(struct store *st, struct block *b)
{
	spill_note_dropped(&st->tier, b);
	evict(st, b, false);
}

/* Store lock held.  A slot of @p's class in its region, evicting if needed. */
static int take_slot(struct store *st, const struct store_place *p, const struct store_tenant *t,
		     struct shard *sh)
{
	uint32_t cls = p->class_id;

	for (int tries = 0; tries < EVICT_TRIES; tries++) {
		struct s3fifo_node *victim;
		struct pool_extent *e;
		int r = pool_alloc(st->pool, p->region, cls, sh, &sh->slot);

		if (r == 0)
			spill_ahead(st, p);
		if (r != -ENOSPC)
			return r;
		/*
		 * Grow by taking a whole extent from a class over its share of
		 * recent demand, so several block sizes share the pool; else
		 * make room inside the class with S3-FIFO.
		 */
		if (pool_class_under_share(st->pool, p->region, cls) || st->queues[cls].n == 0) {
			e = pool_pick_extent(st->pool, p->region, cls, owner_evictable, NULL);
			if (e && evict_extent(st, e, NULL))
				continue;
		}
		victim = s3fifo_pick(&st->queues[cls], queue_claim, NULL, 0);
		if (victim) {
			/* Needed now: not spilled (its slot would come back only later). */
			evict_now(st, caa_container_of(victim, struct block, qn));
			continue;
		}
		e = pool_pick_extent(st->pool, p->region, cls, owner_evictable, NULL);
		if (!e)
			e = pool_pick_extent_any(st->pool, p->region, cls, owner_evictable, NULL);
		if (e && evict_extent(st, e, NULL))
			continue;
		/* Everything is pinned, partial or in flight: take from who holds most. */
		if (!reclaim_partial_for(st, t, p->region, cls))
			return -ENOSPC;
	}
	return -ENOSPC;
}

/* A new block of @ns for @key, @nshards shards of class @cls, on no list yet. */
static struct block *block_alloc(struct store *st, struct store_ns *ns, const uint8_t *key,
				 uint32_t cls, uint32_t nshards)
{
	struct block *b = calloc(1, sizeof(*b) + nshards * sizeof(b->shards[0]));

	if (!b)
		return NULL;
	b->ns = ns;
	b->ns_id = ns->id;
	memcpy(b->key, key, KVS_KEY_SIZE);
	b->class_id = cls;
	b->nshards = nshards;
	b->bytes = (uint64_t)nshards * st->pool->classes[cls].slot_bytes;
	b->created_ns = now_ns();
	for (uint32_t s = 0; s < nshards; s++) {
		b->shards[s].blk = b;
		b->shards[s].idx = (uint16_t)s;
		cds_lfht_node_init(&b->shards[s].hnode);
	}
	return b;
}

/* Store lock held.  The block for (ns, key), found through any shard, or a new one. */
static struct block *find_or_create(struct store *st, struct store_ns *ns,
				    const struct store_place *p, const uint8_t *key)
{
	struct block *b;

	for (uint32_t s = 0; s < p->nshards; s++) {
		struct shard *sh = lookup(st, ns->id, s, key);

		if (sh)
			return sh->blk;
	}
	b = block_alloc(st, ns, key, p->class_id, p->nshards);
	if (!b)
		return NULL;
	cds_list_add_tail(&b->partial, &st->partial);
	cds_list_add_tail(&b->ns_node, &ns->list);
	__atomic_fetch_add(&ns->blocks, 1, __ATOMIC_RELAXED);
	stat_add(&st->stats.partial, 1);
	return b;
}

/* Take and drop the store lock with the RCU read side writers need to traverse the table. */
static void store_lock(struct store *st)
{
	pthread_mutex_lock(&st->lock);
	urcu_memb_read_lock();
}

static void store_unlock(struct store *st)
{
	read_unlock();
	pthread_mutex_unlock(&st->lock);
}

void store_save_begin(struct store *st, struct store_tenant *t, struct store_ns *ns,
		      const struct store_place *p, const uint8_t *keys, const uint32_t *block_ids,
		      uint32_t n, struct save_ent *ents, uint32_t *ret_nents, uint32_t *ret_skipped,
		      uint32_t *ret_nospace, uint32_t *ret_quota)
{
	uint32_t nents = 0, skipped = 0, nospace = 0, quota = 0, i = 0;
	bool full = false, revoked = false;
	uint64_t bytes;

	store_lock(st);
	/* The caller holds the class (store_class_get()): its size cannot change under us. */
	bytes = st->pool->classes[p->class_id].slot_bytes;
	while (i < n) {
		const uint8_t *key = keys + (size_t)i * KVS_KEY_SIZE;
		struct block *b;
		struct shard *sh;

		if (lookup(st, ns->id, p->shard, key)) {
			skipped++;
			i++;
			continue;
		}
		/*
		 * No room for one key, none for the next of the same class:
		 * searching again per key cost a scan of the whole queue each.
		 */
		if (full) {
			nospace++;
			i++;
			continue;
		}
		/* Past the share; one block always, or a block above it could never be saved. */
		if (t && t->unsealed && t->unsealed + bytes > st->unsealed_cap) {
			quota++;
			i++;
			continue;
		}
		b = find_or_create(st, ns, p, key);
		if (!b) {
			nospace++;
			i++;
			continue;
		}
		sh = &b->shards[p->shard];
		if (take_slot(st, p, t, sh) < 0) {
			if (b->present == 0 && b->writers == 0)
				block_destroy(st, b);
			if (!revoked && t && t->leases && st->revoke) {
				uint64_t need = (uint64_t)(n - i) * bytes;
				unsigned nrev;

				if (t && st->unsealed_cap != UINT64_MAX)
					need = MIN(need, st->unsealed_cap - t->unsealed);
				/*
				 * Everything left is pinned: leases of whoever pins
				 * more than this instance go, once per batch.  The
				 * lease lock is never taken under the store lock, so
				 * let it go; the shards taken so far are WRITING, which
				 * nothing but store_save_end() touches.  Then this key
				 * again, from its lookup.
				 */
				revoked = true;
				store_unlock(st);
				nrev = st->revoke(st->leases, t->leases, need);
				store_lock(st);
				if (nrev)
					continue;
			}
			full = true;
			nospace++;
			i++;
			continue;
		}
		sh->state = SHARD_WRITING;
		b->writers++;
		charge(st, sh, t);
		cds_lfht_add(st->ht, hash_key(st, ns->id, p->shard, key), &sh->hnode);
		ht_account(st, 1);
		ents[nents++] = (struct save_ent){ sh, block_ids[i] };
		i++;
	}
	store_unlock(st);
	*ret_nents = nents;
	*ret_skipped = skipped;
	*ret_nospace = nospace;
	*ret_quota = quota;
}

/* Store lock held: every shard is DONE, publish the block (@owner: the hook's). */
static void seal(struct store *st, struct block *b, void *owner)
{
	/* Evictable from now on: no tenant holds it any more. */
	for (uint32_t i = 0; i < b->nshards; i++)
		uncharge(st, &b->shards[i]);
	cds_list_del(&b->partial);
	stat_add(&st->stats.partial, -1);
	stat_add(&st->stats.resident, 1);
	spill_block_sealed(&st->tier);
	s3fifo_insert(&st->queues[b->class_id], &b->qn, block_fp(st, b));
	/*
	 * Store-release: the slot bytes (written by the copy before
	 * store_save_end) are visible to anyone who sees sealed == 1 with
	 * load-acquire in store_query().
	 */
	__atomic_store_n(&b->sealed, 1, __ATOMIC_RELEASE);
	/* After the seal: a listener told now finds the block when it asks. */
	if (st->hooks && b->ns->tagged)
		st->hooks->visible(st->hooks->arg, b->ns->tag, b->key, owner);
}

void store_save_end(struct store *st, struct save_ent *ents, uint32_t n, bool ok, void *owner)
{
	pthread_mutex_lock(&st->lock);
	urcu_memb_read_lock();
	for (uint32_t i = 0; i < n; i++) {
		struct shard *sh = ents[i].shard;
		struct block *b = sh->blk;

		b->writers--;
		if (ok) {
			sh->state = SHARD_DONE;
			if (++b->present == b->nshards)
				seal(st, b, owner);
			continue;
		}
		uncharge(st, sh);
		cds_lfht_del(st->ht, &sh->hnode);
		ht_account(st, -1);
		pool_free(st->pool, &sh->slot);
		sh->state = SHARD_EMPTY;
		if (b->present == 0 && b->writers == 0)
			block_destroy(st, b);
	}
	read_unlock();
	pthread_mutex_unlock(&st->lock);
}

static bool pin(struct block *b)
{
	int32_t v = __atomic_load_n(&b->pins, __ATOMIC_RELAXED);

	do {
		if (v < 0)
			return false;
		/* Pairs with the CAS in claim(). */
	} while (!__atomic_compare_exchange_n(&b->pins, &v, v + 1, true, __ATOMIC_ACQUIRE,
					      __ATOMIC_RELAXED));
	return true;
}

void block_unpin(struct block *b)
{
	/* Release: our reads of the slot happen before an evictor reuses it. */
	__atomic_fetch_sub(&b->pins, 1, __ATOMIC_RELEASE);
}

/*
 * Store lock held, @b claimed: if it is being written to SSD (its slots
 * still hold it, whole), take it back for a QUERY with its pin instead
 * of losing it when the writes land (spill_end()).  Only the store lock
 * moves a block away from BLOCK_EVICTING: lock-free pinners still see
 * it claimed until the store-release here, then pin it as any other.
 */
static bool rescue(struct block *b)
{
	if (!b->spilling || b->rescued)
		return false; /* dropped, not spilled; or rescued, so pin() took it */
	b->rescued = 1;
	/* Pairs with the CAS loop in pin(): pinned by this QUERY from here. */
	__atomic_store_n(&b->pins, 1, __ATOMIC_RELEASE);
	return true;
}

/* A hit on @b, pinned if the QUERY pins: its bytes, its use. */
static void counted(struct block *b, struct store_query_res *r)
{
	r->bytes += b->bytes;
	if (block_tier(b) == BLOCK_RESIDENT)
		s3fifo_hit(&b->qn);
	/* A hint for spill() (its value under backpressure): a lost update costs nothing. */
	__atomic_store_n(&b->uses, __atomic_load_n(&b->uses, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELAXED);
}

/*
 * One key of a QUERY: @b counts as a hit (pinned into ret_blocks with
 * @q->pin) or ends the prefix.  A block READING from SSD is a hit still
 * pending: the LOAD waits for it.  RCU read side or the store lock.
 */
static bool hit(struct block *b, const struct store_query_req *q, struct store_query_res *r)
{
	/* Pairs with the store-release of tier in read_sealed() and read_failed(). */
	enum block_tier t = block_tier(b);

	if (t == BLOCK_FAILED)
		return false;
	/* Pairs with the store-release in seal() (and read_sealed(), before its tier). */
	if (t == BLOCK_RESIDENT && !__atomic_load_n(&b->sealed, __ATOMIC_ACQUIRE))
		return false;
	if (q->pin) {
		if (!pin(b))
			return false;
		q->ret_blocks[r->hits] = b;
	} else if (__atomic_load_n(&b->pins, __ATOMIC_RELAXED) < 0) {
		return false;
	}
	if (t == BLOCK_READING)
		r->pending++;
	counted(b, r);
	return true;
}

/* Store lock held: the class of @slot_bytes some registration holds, or POOL_NO_CLASS. */
static uint32_t class_of_bytes(const struct store *st, uint64_t slot_bytes)
{
	for (uint32_t c = 0; c < st->pool->nr_classes; c++) {
		const struct pool_class *pc = &st->pool->classes[c];

		if (pc->slot_bytes == slot_bytes && pc->users)
			return c;
	}
	return POOL_NO_CLASS;
}

/* Store lock held: a read back from SSD failed; its slots go, the block waits for its pins. */
static void read_failed(struct store *st, struct block *b)
{
	for (uint32_t i = 0; i < b->nshards; i++) {
		struct shard *sh = &b->shards[i];

		if (sh->state == SHARD_EMPTY)
			continue;
		cds_lfht_del(st->ht, &sh->hnode);
		ht_account(st, -1);
		pool_free(st->pool, &sh->slot);
		sh->state = SHARD_EMPTY;
	}
	cds_list_add_tail(&b->partial, &st->failed);
	stat_add(&st->stats.ssd_read_failed, 1);
	/* Release: a LOAD that sees FAILED (block_tier()) copies nothing of it. */
	__atomic_store_n(&b->tier, BLOCK_FAILED, __ATOMIC_RELEASE);
}

/* Store lock held: every shard was read back, byte-exact: a resident block like any other. */
static void read_sealed(struct store *st, struct block *b)
{
	stat_add(&st->stats.resident, 1);
	s3fifo_insert(&st->queues[b->class_id], &b->qn, block_fp(st, b));
	__atomic_store_n(&b->sealed, 1, __ATOMIC_RELEASE);
	/*
	 * Release: the bytes the drive wrote into the slots (its completion
	 * was reaped before read_done ran) happen before a LOAD that sees
	 * BLOCK_RESIDENT with load-acquire copies them.
	 */
	__atomic_store_n(&b->tier, BLOCK_RESIDENT, __ATOMIC_RELEASE);
	if (st->hooks && b->ns->tagged)
		st->hooks->visible(st->hooks->arg, b->ns->tag, b->key, NULL);
}

/* Store lock held: one shard's read ended with @res; true once the block's last one did. */
static bool read_end(struct store *st, struct shard *sh, int res)
{
	struct block *b = sh->blk;

	b->writers--;
	if (res == 0) {
		sh->state = SHARD_DONE;
		b->present++;
	} else {
		b->read_err = 1;
	}
	if (b->writers)
		return false;
	if (b->read_err)
		read_failed(st, b);
	else
		read_sealed(st, b);
	return true;
}

/*
 * Store lock held: (@q->ns, @key) is on SSD in every shard: a new block
 * READING into slots of @cls, pinned for the QUERY, its reads started.
 * NULL when it cannot be (no slot, a read refused at once, the SSD no
 * longer has it): the prefix ends there.  *@ret_ended: a read ended here.
 */
static struct block *read_back(struct store *st, const struct store_query_req *q,
			       const uint8_t *key, uint32_t cls, bool *ret_ended)
{
	struct store_ns *ns = (struct store_ns *)q->ns;
	uint64_t bytes = st->pool->classes[cls].slot_bytes;
	struct block *b;
	uint32_t s;

	if (spill_has(&st->tier, ns, key) < 0)
		return NULL;
	b = block_alloc(st, ns, key, cls, ns->nshards);
	if (!b)
		return NULL;
	b->tier = BLOCK_READING;
	b->on_ssd = 1; /* and stays valid there: evicting it again costs no write */
	CDS_INIT_LIST_HEAD(&b->partial);
	for (s = 0; s < b->nshards; s++) {
		struct store_place p = { cls, q->region, s, b->nshards };

		if (take_slot(st, &p, NULL, &b->shards[s]) < 0)
			break;
	}
	if (s < b->nshards) {
		/* Never published: nobody else saw it. */
		while (s--)
			pool_free(st->pool, &b->shards[s].slot);
		free(b);
		return NULL;
	}
	/* The QUERY's pin, before anyone can find it. */
	b->pins = 1;
	cds_list_add_tail(&b->ns_node, &ns->list);
	__atomic_fetch_add(&ns->blocks, 1, __ATOMIC_RELAXED);
	for (s = 0; s < b->nshards; s++) {
		struct shard *sh = &b->shards[s];

		sh->state = SHARD_WRITING;
		b->writers++;
		cds_lfht_add(st->ht, hash_key(st, ns->id, s, key), &sh->hnode);
		ht_account(st, 1);
	}
	/* In prefix order, every shard at once: the drives order nothing else. */
	for (s = 0; s < b->nshards; s++) {
		struct shard *sh = &b->shards[s];
		int r = spill_read(&st->tier, ns, key, s, sh->slot.addr, bytes, sh);

		/* No callback comes for a read refused here. */
		if (r < 0)
			*ret_ended |= read_end(st, sh, r);
	}
	if (b->read_err) {
		block_unpin(b); /* it fails (now or at its last read): the prefix ends before it */
		return NULL;
	}
	return b;
}

/*
 * The DRAM prefix from key @r->hits up to @end: each key's lookup and hit,
 * until the first miss.  Takes the read lock.
 */
static void dram_prefix(struct store *st, const struct store_query_req *q, uint32_t end,
			struct store_query_res *r)
{
	urcu_memb_read_lock();
	for (; r->hits < end; r->hits++) {
		/* Shard 0 exists in every sealed block, so one lookup per key. */
		struct shard *sh =
			lookup(st, q->ns->id, 0, q->keys + (size_t)r->hits * KVS_KEY_SIZE);

		if (!sh || !hit(sh->blk, q, r))
			break;
	}
	read_unlock();
}

/* One chunk of a job: its keys' lookups and hits, from its start to its first miss. */
static void query_chunk(struct store *st, struct query_job *j, uint32_t k)
{
	struct store_query_res r = { .hits = k * j->chunk };

	dram_prefix(st, j->q, MIN(j->q->n, (k + 1) * j->chunk), &r);
	j->res[k] = r;
	/* Pairs with the acquire in query_par(): the chunk's pins and result are seen. */
	__atomic_fetch_add(&j->done, 1, __ATOMIC_RELEASE);
}

/* Claim and look up chunks of @j until none is left. */
static void query_claim(struct store *st, struct query_job *j)
{
	uint32_t k;

	while ((k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->nchunks)
		query_chunk(st, j, k);
}

static void *query_helper(void *arg)
{
	struct store *st = arg;

	/* A registered reader: query_chunk() takes the read lock. */
	urcu_memb_register_thread();
	pthread_mutex_lock(&st->qlock);
	for (;;) {
		struct query_job *j;

		while (cds_list_empty(&st->qjobs) && !st->qstop)
			pthread_cond_wait(&st->qcond, &st->qlock);
		if (st->qstop)
			break;
		j = cds_list_first_entry(&st->qjobs, struct query_job, node);
		/* Every chunk claimed: off the list (its caller waits for the last ones). */
		if (__atomic_load_n(&j->next, __ATOMIC_RELAXED) >= j->nchunks) {
			cds_list_del_init(&j->node);
			continue;
		}
		j->users++;
		pthread_mutex_unlock(&st->qlock);
		query_claim(st, j);
		pthread_mutex_lock(&st->qlock);
		j->users--;
	}
	pthread_mutex_unlock(&st->qlock);
	urcu_memb_unregister_thread();
	return NULL;
}

/*
 * The DRAM prefix of a long QUERY with the helpers: what dram_prefix()
 * over all its keys on one thread finds.  Chunks past the first that ends
 * early give their pins back; their hits were counted (a block's S3-FIFO
 * mark and use count: hints, off by one QUERY at worst).  Outside any
 * read-side section: each chunk takes its own.
 */
static void query_par(struct store *st, const struct store_query_req *q,
		      struct store_query_res *ret)
{
	struct query_job j = { .q = q };
	struct store_query_res r = { 0 };
	bool ended = false;

	j.chunk = MAX(QUERY_CHUNK, (q->n + QUERY_MAX_CHUNKS - 1) / QUERY_MAX_CHUNKS);
	j.nchunks = (q->n + j.chunk - 1) / j.chunk;
	pthread_mutex_lock(&st->qlock);
	cds_list_add_tail(&j.node, &st->qjobs);
	pthread_cond_broadcast(&st->qcond);
	pthread_mutex_unlock(&st->qlock);
	query_claim(st, &j);
	/* Pairs with the release in query_chunk(). */
	while (__atomic_load_n(&j.done, __ATOMIC_ACQUIRE) < j.nchunks)
		cpu_relax();
	/* The job is on this stack: no helper may still hold it. */
	pthread_mutex_lock(&st->qlock);
	if (!cds_list_empty(&j.node))
		cds_list_del_init(&j.node);
	while (j.users) {
		pthread_mutex_unlock(&st->qlock);
		cpu_relax();
		pthread_mutex_lock(&st->qlock);
	}
	pthread_mutex_unlock(&st->qlock);
	for (uint32_t k = 0; k < j.nchunks; k++) {
		uint32_t start = k * j.chunk;

		if (ended) {
			for (uint32_t i = start; q->pin && i < j.res[k].hits; i++)
				block_unpin(q->ret_blocks[i]);
			continue;
		}
		r.hits = j.res[k].hits;
		r.bytes += j.res[k].bytes;
		r.pending += j.res[k].pending;
		ended = j.res[k].hits < MIN(q->n, start + j.chunk);
	}
	*ret = r;
}

void store_query_tiers(struct store *st, const struct store_query_req *q,
		       struct store_query_res *ret)
{
	struct store_query_res r = { 0 };
	bool ended = false;
	uint32_t cls;

	if (st->nhelpers && q->n >= QUERY_PAR_MIN)
		query_par(st, q, &r);
	else
		dram_prefix(st, q, q->n, &r);
	if (r.hits == q->n || q->dram_only || !spill_on(&st->tier, q->ns)) {
		*ret = r;
		return;
	}
	if (!q->pin) {
		/* Counted, not read: nothing would hold what was read.  Either tier per key. */
		urcu_memb_read_lock();
		for (; r.hits < q->n; r.hits++) {
			const uint8_t *key = q->keys + (size_t)r.hits * KVS_KEY_SIZE;
			struct shard *sh = lookup(st, q->ns->id, 0, key);

			if (sh && hit(sh->blk, q, &r))
				continue;
			if (spill_has(&st->tier, q->ns, key) < 0)
				break;
			r.ssd++;
		}
		read_unlock();
		stat_add(&st->stats.ssd_hits, r.ssd);
		*ret = r;
		return;
	}
	store_lock(st);
	cls = class_of_bytes(st, q->ns->slot_bytes);
	if (cls == POOL_NO_CLASS) {
		store_unlock(st); /* no registration of that size: nothing could load them */
		*ret = r;
		return;
	}
	/*
	 * Pin what DRAM holds further on first: the slots read_back() takes
	 * evict the coldest blocks, and the rest of this very prompt is
	 * likely among them.
	 */
	for (uint32_t i = r.hits; i < q->n; i++) {
		struct shard *sh = lookup(st, q->ns->id, 0, q->keys + (size_t)i * KVS_KEY_SIZE);

		q->ret_blocks[i] = NULL;
		if (sh && block_tier(sh->blk) == BLOCK_RESIDENT && sh->blk->sealed &&
		    (pin(sh->blk) || rescue(sh->blk)))
			q->ret_blocks[i] = sh->blk;
	}
	for (; r.hits < q->n; r.hits++) {
		const uint8_t *key = q->keys + (size_t)r.hits * KVS_KEY_SIZE;
		struct shard *sh;
		struct block *b = q->ret_blocks[r.hits];

		if (b) {
			counted(b, &r);
			continue;
		}
		/* Saved or read back since the walk above, maybe (or READING: joined). */
		sh = lookup(st, q->ns->id, 0, key);
		if (sh) {
			if (!hit(sh->blk, q, &r))
				break;
			continue;
		}
		b = read_back(st, q, key, cls, &ended);
		if (!b)
			break;
		q->ret_blocks[r.hits] = b;
		r.bytes += b->bytes;
		r.ssd++;
		r.pending++;
	}
	/* Past the prefix: the pins taken ahead go. */
	for (uint32_t i = r.hits; i < q->n; i++)
		if (q->ret_blocks[i])
			block_unpin(q->ret_blocks[i]);
	store_unlock(st);
	stat_add(&st->stats.ssd_hits, r.ssd);
	if (ended)
		spill_wake(&st->tier);
	*ret = r;
}

uint32_t store_query(struct store *st, const struct store_ns *ns, const uint8_t *keys, uint32_t n,
		     bool do_pin, struct block **ret_blocks, uint64_t *ret_bytes)
{
	struct store_query_req q = {
		.ns = ns,
		.keys = keys,
		.n = n,
		.pin = do_pin,
		.dram_only = true,
		.ret_blocks = ret_blocks,
	};
	struct store_query_res r;

	store_query_tiers(st, &q, &r);
	if (do_pin)
		*ret_bytes = r.bytes;
	return r.hits;
}

/* ---- the SSD tier ---------------------------------------------------- */

void store_set_ssd(struct store *st, struct ssd *ssd, bool write_ahead, void (*wake)(void *arg),
		   void *wake_arg)
{
	spill_attach(&st->tier, ssd, write_ahead, wake, wake_arg);
}

int store_ns_tier(struct store *st, struct store_ns *ns, const char *name, uint64_t fingerprint,
		  uint64_t slot_bytes, uint32_t tp_size, bool replicated)
{
	return spill_ns(&st->tier, ns, name, fingerprint, slot_bytes, tp_size, replicated);
}

void store_ssd_write_done(void *arg, void *cookie, int res)
{
	struct store *st = arg;

	store_lock(st);
	spill_write_done(&st->tier, cookie, res);
	store_unlock(st);
}

/* The SSD tier's idle hook (a drive thread, no lock held; struct ssd_config): spill_idle(). */
void store_ssd_idle(void *arg)
{
	struct store *st = arg;

	if (!spill_idle_wanted(&st->tier))
		return;
	store_lock(st);
	spill_idle(&st->tier);
	store_unlock(st);
}

void store_ssd_read_done(void *arg, void *cookie, int res)
{
	struct store *st = arg;
	bool ended;

	store_lock(st);
	ended = read_end(st, cookie, res);
	store_unlock(st);
	/* After the unlock: a woken worker's LOAD sees the block's tier at once. */
	if (ended)
		spill_wake(&st->tier);
}

unsigned store_reclaim_partial(struct store *st, uint64_t timeout_ns)
{
	uint64_t now = now_ns();
	struct block *b, *tmp;
	unsigned n = 0, nfailed = 0;

	pthread_mutex_lock(&st->lock);
	urcu_memb_read_lock();
	cds_list_for_each_entry_safe(b, tmp, &st->partial, partial) {
		if (now - b->created_ns < timeout_ns)
			break; /* oldest first: the rest are younger */
		if (b->writers)
			continue;
		block_destroy(st, b);
		n++;
	}
	/* Failed reads from SSD, once no lease pins them (any age: they hold no slot). */
	cds_list_for_each_entry_safe(b, tmp, &st->failed, partial) {
		if (!claim_failed(b))
			continue;
		block_destroy(st, b);
		nfailed++;
	}
	read_unlock();
	pthread_mutex_unlock(&st->lock);
	if (n)
		stat_add(&st->stats.partial_reclaimed, n);
	return n + nfailed;
}

void store_get_stats(struct store *st, struct store_stats *ret)
{
	ret->resident = __atomic_load_n(&st->stats.resident, __ATOMIC_RELAXED);
	ret->partial = __atomic_load_n(&st->stats.partial, __ATOMIC_RELAXED);
	ret->evictions = __atomic_load_n(&st->stats.evictions, __ATOMIC_RELAXED);
	ret->partial_reclaimed = __atomic_load_n(&st->stats.partial_reclaimed, __ATOMIC_RELAXED);
	struct spill_stats sp;

	spill_get_stats(&st->tier, &sp);
	ret->spilled = sp.spilled;
	ret->spill_skipped = sp.skipped;
	ret->spill_failed = sp.failed;
	ret->spill_dropped = sp.dropped;
	ret->ssd_hits = __atomic_load_n(&st->stats.ssd_hits, __ATOMIC_RELAXED);
	ret->ssd_read_failed = __atomic_load_n(&st->stats.ssd_read_failed, __ATOMIC_RELAXED);
	ret->spilling_bytes = sp.spilling_bytes;
	ret->written_ahead = sp.written_ahead;
}

void store_clear(struct store *st)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;

	pthread_mutex_lock(&st->lock);
	urcu_memb_read_lock();
	cds_lfht_first(st->ht, &it);
	while ((node = cds_lfht_iter_get_node(&it)) != NULL) {
		struct shard *sh = caa_container_of(node, struct shard, hnode);

		cds_lfht_next(st->ht, &it);
		/* Destroy through the first shard met; the others go with it. */
		if (sh->state != SHARD_EMPTY)
			block_destroy(st, sh->blk);
	}
	/* Failed reads hold no slot, so no index entry: their list. */
	while (!cds_list_empty(&st->failed))
		block_destroy(st, cds_list_first_entry(&st->failed, struct block, partial));
	read_unlock();
	pthread_mutex_unlock(&st->lock);
}

unsigned store_scan(struct store *st, uint64_t *cursor, struct store_scan_ent *out, unsigned max)
{
	const struct pool *pool = st->pool;
	unsigned n = 0;
	uint64_t c;

	/* Cursor: region in the top 16 bits, extent in the next 24, slot in the low 24. */
	pthread_mutex_lock(&st->lock);
	for (c = *cursor; n < max; c++) {
		uint32_t r = (uint32_t)(c >> 48), x = (uint32_t)(c >> 24) & 0xffffff;
		uint32_t i = (uint32_t)c & 0xffffff;
		const struct pool_extent *e;
		const struct shard *sh;

		if (r >= pool->nr_regions)
			break;
		if (x >= pool->regions[r].nr_extents) {
			c = ((uint64_t)(r + 1) << 48) - 1; /* the next region */
			continue;
		}
		e = &pool->regions[r].extents[x];
		if (i >= e->nslots || e->class_id == POOL_NO_CLASS) {
			c = (((uint64_t)r << 48) | ((uint64_t)(x + 1) << 24)) - 1;
			continue;
		}
		sh = e->owners[i];
		/* One entry per block: through its first shard. */
		if (!sh || sh->idx != 0 || !sh->blk->sealed || !sh->blk->ns->tagged)
			continue;
		memcpy(out[n].tag, sh->blk->ns->tag, KVS_KEY_SIZE);
		memcpy(out[n].key, sh->blk->key, KVS_KEY_SIZE);
		n++;
	}
	pthread_mutex_unlock(&st->lock);
	*cursor = c;
	return n;
}

void store_free(struct store *st)
{
	if (!st)
		return;
	if (st->resizer_running) {
		pthread_mutex_lock(&st->rlock);
		st->resizer_stop = true;
		pthread_cond_signal(&st->rcond);
		pthread_mutex_unlock(&st->rlock);
		pthread_join(st->resizer, NULL);
		st->resizer_running = false;
	}
	pthread_mutex_lock(&st->qlock);
	st->qstop = true;
	pthread_cond_broadcast(&st->qcond);
	pthread_mutex_unlock(&st->qlock);
	for (unsigned i = 0; i < st->nhelpers; i++)
		pthread_join(st->helpers[i], NULL);
	st->nhelpers = 0;
	store_clear(st);
	for (unsigned i = 0; i < POOL_MAX_CLASSES; i++)
		s3fifo_fini(&st->queues[i]);
	urcu_memb_barrier(); /* run pending frees (they touch blocks only, not the store) */
	cds_lfht_destroy(st->ht, NULL);
	pthread_cond_destroy(&st->qcond);
	pthread_mutex_destroy(&st->qlock);
	pthread_cond_destroy(&st->rcond);
	pthread_mutex_destroy(&st->rlock);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

/*
 * Store lock held.  Empty class @cls, which no registration uses, of its
 * blocks; false if one of them is pinned (a lease may outlive the ranks
 * that registered the class).
 */
static bool drop_class(struct store *st, uint32_t cls, unsigned *ret_blocks)
{
	bool all = true;

	for (unsigned r = 0; r < st->pool->nr_regions; r++) {
		struct pool_region *reg = &st->pool->regions[r];

		for (uint32_t x = 0; x < reg->nr_extents; x++) {
			struct pool_extent *e = &reg->extents[x];

			/* An emptied extent leaves the class: check it per slot. */
			for (uint32_t i = 0; i < e->nslots && e->class_id == cls; i++) {
				struct shard *sh = e->owners[i];

				if (!sh)
					continue;
				if (!sh->blk->sealed && !sh->blk->writers) {
					reclaim(st, sh->blk);
				} else if (claim(sh->blk)) {
					evict(st, sh->blk, false);
				} else {
					all = false;
					continue;
				}
				(*ret_blocks)++;
			}
		}
	}
	return all;
}

/*
 * Store lock held, every class taken: give up the slot of an unused class
 * (no registration; kept only by its blocks), the one of least recent
 * demand first.  Without this, on an idle pool (nothing evicts) the
 * blocks of sizes nobody registers any more refused every new size.
 */
static bool reclaim_class(struct store *st)
{
	bool tried[POOL_MAX_CLASSES] = { false };

	for (;;) {
		uint32_t victim = POOL_NO_CLASS;
		unsigned blocks = 0;
		uint64_t bytes;

		for (uint32_t c = 0; c < st->pool->nr_classes; c++) {
			const struct pool_class *pc = &st->pool->classes[c];

			if (pc->slot_bytes && !pc->users && !tried[c] &&
			    (victim == POOL_NO_CLASS ||
			     pc->demand < st->pool->classes[victim].demand))
				victim = c;
		}
		if (victim == POOL_NO_CLASS)
			return false;
		tried[victim] = true;
		bytes = st->pool->classes[victim].slot_bytes;
		if (drop_class(st, victim, &blocks)) {
			/* Its last extent went back: pool_free() gave the slot up. */
			log_info("reclaimed block size %" PRIu64
				 " bytes (%u blocks dropped): all %u "
				 "block sizes of the pool were taken",
				 bytes, blocks, POOL_MAX_CLASSES);
			return true;
		}
	}
}

int store_class_get(struct store *st, uint64_t slot_bytes, uint32_t *ret_class)
{
	int r;

	store_lock(st);
	r = pool_class_get(st->pool, slot_bytes, ret_class);
	if (r == -ENOSPC && reclaim_class(st))
		r = pool_class_get(st->pool, slot_bytes, ret_class);
	store_unlock(st);
	return r;
}

unsigned store_drop_nspace(struct store *st, struct store_ns *ns)
{
	struct block *b, *tmp;
	unsigned n = 0;

	store_lock(st);
	cds_list_for_each_entry_safe(b, tmp, &ns->list, ns_node) {
		/* No session: nothing can pin or write it (nspace.h); check all the same. */
		if (b->tier == BLOCK_FAILED) {
			if (!claim_failed(b))
				continue;
			block_destroy(st, b);
		} else if (!b->sealed && !b->writers)
			reclaim(st, b);
		else if (claim(b))
			evict(st, b, false);
		else
			continue;
		n++;
	}
	store_unlock(st);
	return n;
}

void store_class_put(struct store *st, uint32_t class_id)
{
	pthread_mutex_lock(&st->lock);
	pool_class_put(st->pool, class_id);
	pthread_mutex_unlock(&st->lock);
}

unsigned store_region_stats(struct store *st, struct store_region_stats *ret, unsigned max)
{
	unsigned n;

	pthread_mutex_lock(&st->lock);
	n = MIN(max, st->pool->nr_regions);
	for (unsigned i = 0; i < n; i++) {
		const struct pool_region *r = &st->pool->regions[i];

		ret[i] = (struct store_region_stats){
			.node = r->node,
			.huge = r->huge,
			.capacity_bytes = (uint64_t)r->nr_extents * st->pool->extent_size,
			.used_bytes = __atomic_load_n(&r->used_bytes, __ATOMIC_RELAXED),
			.extents_total = r->nr_extents,
			.extents_free = r->nr_free_extents,
		};
	}
	pthread_mutex_unlock(&st->lock);
	return n;
}
