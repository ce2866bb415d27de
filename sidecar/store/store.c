/* SPDX-License-Identifier: MIT */
/*
 * The block store's calls (store.h) on its core (core.h): a store's
 * making and end, tenants, SAVE's two phases, QUERY across both tiers,
 * the SSD tier's callbacks, reclaim, classes, namespaces, stats and the
 * scan.  Runs on the threads that call in: the I/O workers (SAVE,
 * QUERY, LOAD's unpin), the control thread (everything else, and peer
 * fetches' SAVEs), the drive threads (store_ssd_*()); each takes the
 * store lock where it changes the store (see store.h, "Locking").
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "store/core.h"
#include "store/store.h"

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

int store_new(const struct store_params *p, struct store **ret)
{
	struct store *st = calloc(1, sizeof(*st));
	int r;

	if (!st)
		return -ENOMEM;
	r = index_init(&st->index);
	if (r) {
		free(st);
		return r;
	}
	pthread_mutex_init(&st->lock, NULL);
	query_pool_init(&st->query, &st->index);
	st->pool = p->pool;
	st->revoke = p->revoke;
	st->leases = p->leases;
	st->hooks = p->hooks;
	for (unsigned i = 0; i < POOL_MAX_CLASSES; i++)
		s3fifo_init(&st->queues[i]);
	CDS_INIT_LIST_HEAD(&st->partial);
	CDS_INIT_LIST_HEAD(&st->tenants);
	CDS_INIT_LIST_HEAD(&st->failed);
	core_tier_init(st);
	st->unsealed_cap = unsealed_cap(p->pool, p->unsealed_share);
	/* Last: pthread_create() orders everything above before the resizer's first step. */
	r = index_start(&st->index);
	if (r) {
		query_pool_fini(&st->query);
		pthread_mutex_destroy(&st->lock);
		index_fini(&st->index);
		free(st);
		return r;
	}
	query_pool_start(&st->query, p->query_helpers);
	*ret = st;
	return 0;
}

struct pool *store_pool(const struct store *st)
{
	return st->pool;
}

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

/* One SAVE's first phase under the store lock, key after key. */
struct save_run {
	struct store_tenant *t;
	struct store_ns *ns;
	uint64_t bytes; /* of a slot of the class */
	bool full;	/* a key got no slot: the rest of the class gets none either */
	bool revoked;	/* leases were revoked once for this SAVE */
	struct {
		uint32_t nents;	  /* begun: WRITING, to copy */
		uint32_t skipped; /* in the index already (saved, being saved or fetched) */
		uint32_t nospace; /* no slot (or no memory for the block) */
		uint32_t quota;	  /* past the tenant's unsealed share */
	} res;
};

/*
 * Nothing to evict for a shard of @run, @left shards still to place:
 * revoke the leases of whoever pins more than this instance, once per
 * SAVE.  The lease lock is never taken under the store lock, so let it
 * go; the shards taken so far are WRITING, which nothing but
 * store_save_end() touches.  True when leases went: try the key again,
 * from its lookup.
 */
static bool save_revoke(struct store *st, struct save_run *run, uint64_t left)
{
	struct store_tenant *t = run->t;
	uint64_t need = left * run->bytes;
	unsigned nrev;

	if (run->revoked || !t || !t->leases || !st->revoke)
		return false;
	if (st->unsealed_cap != UINT64_MAX)
		need = MIN(need, st->unsealed_cap - t->unsealed);
	run->revoked = true;
	store_unlock(st);
	nrev = st->revoke(st->leases, t->leases, need);
	store_lock(st);
	return nrev;
}

/*
 * Store lock held: begin shard @p->shard of @key for @run, @left shards
 * of the SAVE still to place (this one included).  Returns 1 with
 * *@ret_sh WRITING in the index, 0 when it is not begun (counted in
 * run->res), -EAGAIN when leases were revoked for it: try it again.
 */
static int save_one(struct store *st, struct save_run *run, const struct store_place *p,
		    const uint8_t *key, uint64_t left, struct shard **ret_sh)
{
	struct store_tenant *t = run->t;
	struct block *b;
	struct shard *sh;

	if (index_lookup(&st->index, run->ns->id, p->shard, key)) {
		run->res.skipped++;
		return 0;
	}
	/*
	 * No room for one key, none for the next of the same class:
	 * searching again per key cost a scan of the whole queue each.
	 */
	if (run->full) {
		run->res.nospace++;
		return 0;
	}
	/* Past the share; one block always, or a block above it could never be saved. */
	if (t && t->unsealed && t->unsealed + run->bytes > st->unsealed_cap) {
		run->res.quota++;
		return 0;
	}
	b = find_or_create(st, run->ns, p, key);
	if (!b) {
		run->res.nospace++;
		return 0;
	}
	sh = &b->shards[p->shard];
	if (take_slot(st, p, t, sh) < 0) {
		if (b->present == 0 && b->writers == 0)
			block_destroy(st, b);
		/* Everything left is pinned: unpin others' blocks, then this key again. */
		if (save_revoke(st, run, left))
			return -EAGAIN;
		run->full = true;
		run->res.nospace++;
		return 0;
	}
	sh->state = SHARD_WRITING;
	b->writers++;
	charge(st, sh, t);
	index_add(&st->index, sh);
	run->res.nents++;
	*ret_sh = sh;
	return 1;
}

void store_save_begin(struct store *st, struct store_tenant *t, struct store_ns *ns,
		      const struct store_place *p, const uint8_t *keys, const uint32_t *block_ids,
		      uint32_t n, struct save_ent *ents, uint32_t *ret_nents, uint32_t *ret_skipped,
		      uint32_t *ret_nospace, uint32_t *ret_quota)
{
	struct save_run run = { .t = t, .ns = ns };
	uint32_t i = 0;

	store_lock(st);
	/* The caller holds the class (store_class_get()): its size cannot change under us. */
	run.bytes = st->pool->classes[p->class_id].slot_bytes;
	while (i < n) {
		struct shard *sh;
		int r = save_one(st, &run, p, keys + (size_t)i * KVS_KEY_SIZE, n - i, &sh);

		if (r == -EAGAIN)
			continue;
		if (r > 0)
			ents[run.res.nents - 1] = (struct save_ent){ sh, block_ids[i] };
		i++;
	}
	store_unlock(st);
	*ret_nents = run.res.nents;
	*ret_skipped = run.res.skipped;
	*ret_nospace = run.res.nospace;
	*ret_quota = run.res.quota;
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
		index_del(&st->index, sh);
		pool_free(st->pool, &sh->slot);
		sh->state = SHARD_EMPTY;
		if (b->present == 0 && b->writers == 0)
			block_destroy(st, b);
	}
	index_read_unlock();
	pthread_mutex_unlock(&st->lock);
}

void block_unpin(struct block *b)
{
	query_unpin(b);
}

/*
 * The SSD part of an unleased QUERY from @r->hits: counted, not read
 * (nothing would hold what was read).  Either tier per key.  No lock.
 */
static void query_ssd_counted(struct store *st, const struct store_query_req *q,
			      struct store_query_res *r)
{
	urcu_memb_read_lock();
	for (; r->hits < q->n; r->hits++) {
		const uint8_t *key = q->keys + (size_t)r->hits * KVS_KEY_SIZE;
		struct shard *sh = index_lookup(&st->index, q->ns->id, 0, key);

		if (sh && query_hit(sh->blk, q, r))
			continue;
		if (spill_has(&st->tier, q->ns, key) < 0)
			break;
		r->ssd++;
	}
	index_read_unlock();
}

/*
 * Store lock held: pin what DRAM holds past the prefix first, as the
 * slots read_back() takes evict the coldest blocks, and the rest of this
 * very prompt is likely among them.
 */
static void pin_ahead(struct store *st, const struct store_query_req *q, uint32_t from)
{
	for (uint32_t i = from; i < q->n; i++) {
		struct shard *sh =
			index_lookup(&st->index, q->ns->id, 0, q->keys + (size_t)i * KVS_KEY_SIZE);

		q->ret_blocks[i] = NULL;
		if (sh && block_tier(sh->blk) == BLOCK_RESIDENT && sh->blk->sealed &&
		    (query_pin(sh->blk) || rescue(sh->blk)))
			q->ret_blocks[i] = sh->blk;
	}
}

/*
 * The SSD part of a leased QUERY from @r->hits, under the store lock
 * once for all its keys: DRAM hits pinned ahead, the rest read back from
 * SSD into blocks READING.  *@ret_ended: a read ended already.
 */
static void query_ssd_pinned(struct store *st, const struct store_query_req *q,
			     struct store_query_res *r, bool *ret_ended)
{
	uint32_t cls;

	store_lock(st);
	cls = class_of_bytes(st, q->ns->slot_bytes);
	if (cls == POOL_NO_CLASS) {
		store_unlock(st); /* no registration of that size: nothing could load them */
		return;
	}
	pin_ahead(st, q, r->hits);
	for (; r->hits < q->n; r->hits++) {
		const uint8_t *key = q->keys + (size_t)r->hits * KVS_KEY_SIZE;
		struct shard *sh;
		struct block *b = q->ret_blocks[r->hits];

		if (b) {
			query_counted(b, r);
			continue;
		}
		/* Saved or read back since the walk above, maybe (or READING: joined). */
		sh = index_lookup(&st->index, q->ns->id, 0, key);
		if (sh) {
			if (!query_hit(sh->blk, q, r))
				break;
			continue;
		}
		b = read_back(st, q, key, cls, ret_ended);
		if (!b)
			break;
		q->ret_blocks[r->hits] = b;
		r->bytes += b->bytes;
		r->ssd++;
		r->pending++;
	}
	/* Past the prefix: the pins taken ahead go. */
	for (uint32_t i = r->hits; i < q->n; i++)
		if (q->ret_blocks[i])
			block_unpin(q->ret_blocks[i]);
	store_unlock(st);
}

void store_query_tiers(struct store *st, const struct store_query_req *q,
		       struct store_query_res *ret)
{
	struct store_query_res r;
	bool ended = false;

	query_dram(&st->query, q, &r);
	if (r.hits == q->n || q->dram_only || !spill_on(&st->tier, q->ns)) {
		*ret = r;
		return;
	}
	if (q->pin)
		query_ssd_pinned(st, q, &r, &ended);
	else
		query_ssd_counted(st, q, &r);
	stat_add(&st->stats.hits_ssd, r.ssd);
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
	index_read_unlock();
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
	ret->hits_ssd = __atomic_load_n(&st->stats.hits_ssd, __ATOMIC_RELAXED);
	ret->read_failed = __atomic_load_n(&st->stats.read_failed, __ATOMIC_RELAXED);
	ret->spilling_bytes = sp.spilling_bytes;
	ret->written_ahead = sp.written_ahead;
}

void store_clear(struct store *st)
{
	struct cds_lfht_iter it;
	struct shard *sh, *next;

	pthread_mutex_lock(&st->lock);
	urcu_memb_read_lock();
	for (sh = index_first(&st->index, &it); sh; sh = next) {
		next = index_next(&st->index, &it);
		/* Destroy through the first shard met; the others go with it. */
		if (sh->state != SHARD_EMPTY)
			block_destroy(st, sh->blk);
	}
	/* Failed reads hold no slot, so no index entry: their list. */
	while (!cds_list_empty(&st->failed))
		block_destroy(st, cds_list_first_entry(&st->failed, struct block, partial));
	index_read_unlock();
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
	index_stop(&st->index);
	query_pool_stop(&st->query);
	store_clear(st);
	for (unsigned i = 0; i < POOL_MAX_CLASSES; i++)
		s3fifo_fini(&st->queues[i]);
	urcu_memb_barrier(); /* run pending frees (they touch blocks only, not the store) */
	index_fini(&st->index);
	query_pool_fini(&st->query);
	pthread_mutex_destroy(&st->lock);
	free(st);
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
