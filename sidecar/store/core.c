/* SPDX-License-Identifier: MIT */
/*
 * The store's core (core.h): a block's life under the store lock, from
 * its slots to its destruction, and the room a SAVE or a read back needs
 * (S3-FIFO eviction, extents taken across classes, partial blocks
 * reclaimed, eviction ahead of need into the SSD tier).  Runs on the
 * thread holding the store lock: an I/O worker (SAVE, QUERY's read
 * back), the control thread (classes, namespaces, reclaim, peer fetches)
 * or a drive thread (a write's or read's end, through the tier).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "obs/log.h"
#include "store/core.h"

/*
 * A block's fingerprint for its S3-FIFO queue's ghost: (namespace, key)
 * through the index's keyed hash (as shard 0), so a block saved again
 * after its eviction is recognised, and nobody can aim collisions at the
 * ghost (one would only admit a block straight to main).
 */
static uint64_t block_fp(const struct store *st, const struct block *b)
{
	return index_hash(&st->index, b->ns_id, 0, b->key);
}

static void free_block_rcu(struct rcu_head *h)
{
	struct block *b = caa_container_of(h, struct block, rcu);

	tsan_acquire(&index_readers_done);
	tsan_acquire(b);
	free(b);
}

static uint64_t slot_bytes_of(const struct store *st, const struct block *b)
{
	return st->pool->classes[b->class_id].slot_bytes;
}

/* Store lock held: @t pays for @sh's slot until its block seals or the shard goes. */
void charge(struct store *st, struct shard *sh, struct store_tenant *t)
{
	if (!t)
		return;
	if (t->unsealed == 0)
		cds_list_add_tail(&t->node, &st->tenants);
	t->unsealed += slot_bytes_of(st, sh->blk);
	sh->tenant = t;
}

void uncharge(struct store *st, struct shard *sh)
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
void block_destroy(struct store *st, struct block *b)
{
	for (uint32_t i = 0; i < b->nshards; i++) {
		struct shard *sh = &b->shards[i];

		if (sh->state == SHARD_EMPTY)
			continue;
		uncharge(st, sh);
		index_del(&st->index, sh);
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

void core_tier_init(struct store *st)
{
	const struct spill_cbs cbs = { .drop = tier_drop, .requeue = tier_requeue, .core = st };

	spill_init(&st->tier, st->pool, st->queues, &cbs);
}

/*
 * Claim for eviction (store lock held): sealed, unpinned and not still
 * being written to SSD (a rescued block, spill_end()), moved to
 * BLOCK_EVICTING.
 */
bool claim(struct block *b)
{
	int32_t zero = 0;

	if (!b->sealed || b->spilling)
		return false;
	/*
	 * Pairs with the CAS loop in query_pin(): a pinner that loses sees
	 * BLOCK_EVICTING and treats the block as a miss.
	 */
	return __atomic_compare_exchange_n(&b->pins, &zero, BLOCK_EVICTING, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_RELAXED);
}

/* A failed read's block, once unpinned: moved to BLOCK_EVICTING, as claim() does. */
bool claim_failed(struct block *b)
{
	int32_t zero = 0;

	/* Pairs with the CAS loop in query_pin(), as claim()'s. */
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

void reclaim(struct store *st, struct block *b)
{
	block_destroy(st, b);
	stat_add(&st->stats.partial_reclaimed, 1);
}

/*
 * Store lock held, @b claimed (so sealed): evicted, remembered by its
 * queue's ghost.  With @may_spill it may go to SSD first: then its slots
 * are freed only when the writes end, and this returns false.
 */
bool evict(struct store *st, struct block *b, bool may_spill)
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
int take_slot(struct store *st, const struct store_place *p, const struct store_tenant *t,
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
struct block *find_or_create(struct store *st, struct store_ns *ns, const struct store_place *p,
			     const uint8_t *key)
{
	struct block *b;

	for (uint32_t s = 0; s < p->nshards; s++) {
		struct shard *sh = index_lookup(&st->index, ns->id, s, key);

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
void store_lock(struct store *st)
{
	pthread_mutex_lock(&st->lock);
	urcu_memb_read_lock();
}

void store_unlock(struct store *st)
{
	index_read_unlock();
	pthread_mutex_unlock(&st->lock);
}

/* Store lock held: every shard is DONE, publish the block (@owner: the hook's). */
void seal(struct store *st, struct block *b, void *owner)
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

/*
 * Store lock held, @b claimed: if it is being written to SSD (its slots
 * still hold it, whole), take it back for a QUERY with its pin instead
 * of losing it when the writes land (spill_end()).  Only the store lock
 * moves a block away from BLOCK_EVICTING: lock-free pinners still see
 * it claimed until the store-release here, then pin it as any other.
 */
bool rescue(struct block *b)
{
	if (!b->spilling || b->rescued)
		return false; /* dropped, not spilled; or rescued, so query_pin() took it */
	b->rescued = 1;
	/* Pairs with the CAS loop in query_pin(): pinned by this QUERY from here. */
	__atomic_store_n(&b->pins, 1, __ATOMIC_RELEASE);
	return true;
}

/* Store lock held: the class of @slot_bytes some registration holds, or POOL_NO_CLASS. */
uint32_t class_of_bytes(const struct store *st, uint64_t slot_bytes)
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
		index_del(&st->index, sh);
		pool_free(st->pool, &sh->slot);
		sh->state = SHARD_EMPTY;
	}
	cds_list_add_tail(&b->partial, &st->failed);
	stat_add(&st->stats.read_failed, 1);
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
bool read_end(struct store *st, struct shard *sh, int res)
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
struct block *read_back(struct store *st, const struct store_query_req *q, const uint8_t *key,
			uint32_t cls, bool *ret_ended)
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
		index_add(&st->index, sh);
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
		query_unpin(b); /* it fails (now or at its last read): the prefix ends before it */
		return NULL;
	}
	return b;
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
bool reclaim_class(struct store *st)
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
