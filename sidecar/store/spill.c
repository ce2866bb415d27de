/* SPDX-License-Identifier: MIT */
/*
 * The store's side of the SSD tier (spill.h): writes of evicted and of
 * cold resident blocks to SSD and their ends, lookups and reads there,
 * and the tier's counters.  Runs on whichever thread holds the store
 * lock and calls in: an I/O worker (SAVE's eviction, QUERY's read back),
 * the control thread (a class or namespace dropped), and the drive
 * threads (a write's end, the idle hook).  It calls the store core back
 * only through struct spill_cbs.
 */
#include <errno.h>
#include <stdint.h>

#include "base/util.h"
#include "ssd/ssd.h"
#include "store/spill.h"

/*
 * The SSD tier's reserve: writes to SSD may hold at most this share (1/n)
 * of the pool, capped at SPILL_RESERVE_MAX, and eviction spills ahead of
 * need until free room and those writes together reach it (the core's
 * spill_ahead(), through spill_wants_ahead()).
 */
#define SPILL_POOL_SHARE  4
#define SPILL_RESERVE_MAX (4ull << 30)
/*
 * Writes ahead of eviction (spill_idle()): at most this many bytes in
 * flight, as a read that comes meanwhile waits behind them (2 MiB: about
 * 0.3 ms on a 7 GB/s NVMe drive, 1.3 ms on the 1.5 GB/s virtio disks
 * measured here); each walk looks at the coldest AHEAD_WALK_MAX blocks of
 * a class (8 GiB of 2 MiB blocks; its time under the store lock: a few
 * hundred microseconds, and only while some block is not yet on SSD).
 */
#define AHEAD_INFLIGHT (2ull << 20)
#define AHEAD_WALK_MAX 4096

static void stat_add(uint64_t *c, int64_t v)
{
	__atomic_fetch_add(c, (uint64_t)v, __ATOMIC_RELAXED);
}

static uint64_t slot_bytes_of(const struct spill *sp, const struct block *b)
{
	return sp->pool->classes[b->class_id].slot_bytes;
}

void spill_init(struct spill *sp, struct pool *pool, struct s3fifo *queues,
		const struct spill_cbs *cbs)
{
	*sp = (struct spill){ .pool = pool, .queues = queues, .cbs = *cbs };
}

void spill_attach(struct spill *sp, struct ssd *ssd, bool write_ahead, void (*wake)(void *arg),
		  void *wake_arg)
{
	sp->ssd = ssd;
	sp->wake = wake;
	sp->wake_arg = wake_arg;
	sp->cap = MIN(sp->pool->capacity_bytes / SPILL_POOL_SHARE, SPILL_RESERVE_MAX);
	/*
	 * Release: the fields above before a drive thread's spill_idle_wanted()
	 * (its load-acquire) uses them; the drives run before this.
	 */
	__atomic_store_n(&sp->write_ahead, write_ahead, __ATOMIC_RELEASE);
}

bool spill_on(const struct spill *sp, const struct store_ns *ns)
{
	/* Pairs with the store-release in spill_ns(). */
	return sp->ssd && __atomic_load_n(&ns->on_ssd, __ATOMIC_ACQUIRE);
}

int spill_ns(struct spill *sp, struct store_ns *ns, const char *name, uint64_t fingerprint,
	     uint64_t slot_bytes, uint32_t tp_size, bool replicated)
{
	uint8_t ident[SSD_NS_MAX];
	uint32_t id;
	int len, r;

	if (!sp->ssd)
		return 0;
	len = ssd_ns_ident(name, fingerprint, slot_bytes, tp_size, replicated, ident);
	if (len < 0)
		return len;
	r = ssd_ns(sp->ssd, ident, (size_t)len, &id);
	if (r < 0)
		return r;
	ns->ssd_ns = id;
	ns->slot_bytes = slot_bytes;
	ns->nshards = replicated ? 1 : tp_size;
	/* Release: the fields above before a QUERY or eviction that sees on_ssd (spill_on()). */
	__atomic_store_n(&ns->on_ssd, true, __ATOMIC_RELEASE);
	return 0;
}

int spill_has(const struct spill *sp, const struct store_ns *ns, const uint8_t *key)
{
	struct ssd_loc loc;

	for (uint32_t s = 0; s < ns->nshards; s++)
		if (ssd_lookup(sp->ssd, ns->ssd_ns, key, s, &loc) < 0)
			return -ENOENT;
	return 0;
}

int spill_read(const struct spill *sp, const struct store_ns *ns, const uint8_t *key,
	       uint32_t shard, void *buf, uint64_t len, void *cookie)
{
	struct ssd_loc loc;
	int r = ssd_lookup(sp->ssd, ns->ssd_ns, key, shard, &loc);

	return r < 0 ? r : ssd_read(sp->ssd, &loc, buf, len, cookie);
}

void spill_wake(const struct spill *sp)
{
	if (sp->wake)
		sp->wake(sp->wake_arg);
}

void spill_block_sealed(struct spill *sp)
{
	stat_add(&sp->dirty, 1); /* spill_idle()'s to write */
}

void spill_block_gone(struct spill *sp, const struct block *b)
{
	if (b->sealed && !b->on_ssd)
		stat_add(&sp->dirty, -1);
}

/* @b sealed and resident: it is on SSD now, not dirty any more. */
static void mark_on_ssd(struct spill *sp, struct block *b)
{
	if (b->on_ssd)
		return;
	b->on_ssd = 1;
	stat_add(&sp->dirty, -1);
}

/*
 * One write ahead of @b's (write_ahead()) ended, or was displaced by an
 * eviction's (ahead_end()), or the count write_ahead() held while
 * queueing goes.  The last one marks the block written (its eviction
 * then costs nothing), unless one of them failed: then its eviction
 * writes it, as if this had never been tried.
 */
static void ahead_put(struct spill *sp, struct block *b)
{
	if (--b->spilling)
		return;
	b->ahead = 0;
	if (!b->ahead_err) {
		mark_on_ssd(sp, b);
		stat_add(&sp->stats.written_ahead, 1);
	}
	b->ahead_err = 0;
}

static void ahead_end(struct spill *sp, struct block *b, int res)
{
	__atomic_store_n(&sp->ahead_bytes, sp->ahead_bytes - slot_bytes_of(sp, b),
			 __ATOMIC_RELAXED);
	if (res != 0)
		b->ahead_err = 1;
	ahead_put(sp, b);
}

/*
 * One write to SSD of @b's (spill_block()) ended, or was displaced from a
 * drive's queue by one worth more.  The last one frees the block's slots
 * (the core's drop), or gives back a block a QUERY rescued.
 */
static void spill_end(struct spill *sp, struct shard *sh, int res)
{
	struct block *b = sh->blk;

	if (b->ahead) {
		ahead_end(sp, b, res);
		return;
	}
	stat_add(&sp->stats.spilling_bytes, -(int64_t)slot_bytes_of(sp, b));

	if (res != 0)
		stat_add(&sp->stats.failed, 1);
	if (--b->spilling)
		return;
	if (!b->rescued) {
		sp->cbs.drop(sp->cbs.core, b);
		return;
	}
	/* A QUERY took it back mid-write (the core's rescue()): resident again, evictable again. */
	b->rescued = 0;
	sp->cbs.requeue(sp->cbs.core, b);
}

void spill_write_done(struct spill *sp, void *cookie, int res)
{
	spill_end(sp, cookie, res);
}

/*
 * Queue @sh's write to SSD from its slot, worth @value under
 * backpressure, counted in its block's spilling (the write's end is
 * spill_end()'s).  A write it displaced from the queue ends at once.
 * Returns ssd_write()'s result.
 */
static int shard_write(struct spill *sp, struct shard *sh, uint32_t value, uint32_t hits,
		       bool ahead)
{
	struct block *b = sh->blk;
	struct ssd_write w = {
		.ns = b->ns->ssd_ns,
		.key = b->key,
		.shard = sh->idx,
		.buf = sh->slot.addr,
		.len = (uint32_t)slot_bytes_of(sp, b),
		.value = value,
		.hits = hits,
		.ahead = ahead,
		.cookie = sh,
	};
	void *displaced = NULL;
	int r = ssd_write(sp->ssd, &w, &displaced);

	if (r < 0)
		return r;
	b->spilling++;
	if (r == 1)
		spill_end(sp, displaced, -ENOBUFS);
	return r;
}

/*
 * @b claimed for eviction: queue its shards' writes to SSD, reading from
 * its slots, which stay allocated until the writes end
 * (spill_write_done()).  The block stays in the index meanwhile,
 * claimed: a miss for QUERY (and ssd_lookup() finds it only once
 * written), as good as resident for a SAVE of it.  Never waits: the
 * drives' queues are bounded and refuse, or displace a write worth less.
 */
bool spill_block(struct spill *sp, struct block *b)
{
	uint64_t bytes = slot_bytes_of(sp, b);
	uint32_t uses;

	if (!spill_on(sp, b->ns))
		return false;
	if (sp->stats.spilling_bytes + b->bytes > sp->cap) {
		stat_add(&sp->stats.skipped, 1);
		return false;
	}
	uses = __atomic_load_n(&b->uses, __ATOMIC_RELAXED);
	/* One extra count while queueing: a displaced write of this block cannot end it here. */
	b->spilling = 1;
	for (uint32_t i = 0; i < b->nshards; i++) {
		/* r < 0: on SSD already, not admitted, no room: this shard is not kept. */
		if (shard_write(sp, &b->shards[i], uses, uses, false) >= 0)
			stat_add(&sp->stats.spilling_bytes, (int64_t)bytes);
	}
	if (--b->spilling == 0) {
		stat_add(&sp->stats.skipped, 1);
		return false;
	}
	stat_add(&sp->stats.spilled, 1);
	return true;
}

void spill_note_dropped(struct spill *sp, const struct block *b)
{
	if (spill_on(sp, b->ns) && spill_has(sp, b->ns, b->key) < 0)
		stat_add(&sp->stats.dropped, 1);
}

bool spill_wants_ahead(const struct spill *sp, uint64_t free_bytes, uint64_t slot_bytes)
{
	uint64_t spilling = sp->stats.spilling_bytes;

	return sp->ssd && free_bytes + spilling < sp->cap && spilling + slot_bytes <= sp->cap;
}

/*
 * @b sealed, resident and queued: write its shards to SSD while it stays
 * where it is, a hit as before (pins and QUERYs do not mind the drive
 * reading its slots).  The core's claim() refuses it until the writes end
 * (ahead_end()), so its slots cannot be reused under them.  Value 0: any
 * eviction's write displaces it from a full queue.
 */
static void write_ahead(struct spill *sp, struct block *b)
{
	uint64_t bytes = slot_bytes_of(sp, b);
	uint32_t uses = __atomic_load_n(&b->uses, __ATOMIC_RELAXED), exist = 0;

	/* One extra count while queueing, as spill_block()'s. */
	b->spilling = 1;
	b->ahead = 1;
	for (uint32_t i = 0; i < b->nshards; i++) {
		int r = shard_write(sp, &b->shards[i], 0, uses, true);

		if (r >= 0)
			__atomic_store_n(&sp->ahead_bytes, sp->ahead_bytes + bytes,
					 __ATOMIC_RELAXED);
		else if (r == -EEXIST)
			exist++;
		else
			b->ahead_err = 1; /* not admitted (yet), no room, no drive: its eviction decides */
	}
	if (exist == b->nshards) {
		mark_on_ssd(sp, b); /* there already: written before a restart, or rescued */
		b->ahead_err = 1;   /* so not counted as written ahead */
	}
	ahead_put(sp, b);
}

static bool ahead_visit(struct s3fifo_node *n, void *arg)
{
	struct spill *sp = arg;
	struct block *b = caa_container_of(n, struct block, qn);

	/* One block at least, so any block size is written ahead; more only within the bound. */
	if (sp->ahead_bytes && sp->ahead_bytes + b->bytes > AHEAD_INFLIGHT)
		return false;
	if (!b->on_ssd && !b->spilling && spill_on(sp, b->ns))
		write_ahead(sp, b);
	return true;
}

bool spill_idle_wanted(const struct spill *sp)
{
	/*
	 * Pairs with the store-release in spill_attach().  Relaxed for the
	 * rest: a stale figure costs one walk or one call's delay.
	 */
	return __atomic_load_n(&sp->write_ahead, __ATOMIC_ACQUIRE) &&
	       __atomic_load_n(&sp->dirty, __ATOMIC_RELAXED) &&
	       __atomic_load_n(&sp->ahead_bytes, __ATOMIC_RELAXED) < AHEAD_INFLIGHT;
}

/*
 * The SSD tier's idle hook (store_ssd_idle(), a drive thread): nothing is
 * being read or queued, so write the coldest resident blocks not yet on
 * SSD, the next victims, a few at a time.  Their evictions then cost no
 * write, the reads a QUERY starts once the pool is full do not share the
 * drive with the spills of their own slot allocations, and a crash loses
 * none of them (test: test-tier-ahead).  A block is written at most once
 * (blocks never change), and the spill policy writes every evicted block
 * anyway, so this costs the drive only the blocks dropped before their
 * eviction (a deleted namespace).
 */
void spill_idle(struct spill *sp)
{
	for (uint32_t c = 0; c < sp->pool->nr_classes && sp->ahead_bytes < AHEAD_INFLIGHT; c++)
		s3fifo_walk_coldest(&sp->queues[c], ahead_visit, sp, AHEAD_WALK_MAX);
}

void spill_get_stats(const struct spill *sp, struct spill_stats *ret)
{
	ret->spilled = __atomic_load_n(&sp->stats.spilled, __ATOMIC_RELAXED);
	ret->skipped = __atomic_load_n(&sp->stats.skipped, __ATOMIC_RELAXED);
	ret->failed = __atomic_load_n(&sp->stats.failed, __ATOMIC_RELAXED);
	ret->dropped = __atomic_load_n(&sp->stats.dropped, __ATOMIC_RELAXED);
	ret->spilling_bytes = __atomic_load_n(&sp->stats.spilling_bytes, __ATOMIC_RELAXED);
	ret->written_ahead = __atomic_load_n(&sp->stats.written_ahead, __ATOMIC_RELAXED);
}
