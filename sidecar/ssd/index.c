/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/mem.h"
#include "common/bits.h"
#include "ssd/index.h"

struct ssd_ns_ent {
	uint32_t next; /* bucket chain */
	uint32_t hash;
	uint16_t len;
	uint8_t ident[];
};

/*
 * Keyed with a random seed: keys are engine-chosen hashes, and an engine
 * must not be able to aim them all at one chain.
 */
static uint64_t ent_hash(const struct ssd_index *idx, uint32_t ns, const uint8_t *key,
			 uint16_t shard)
{
	uint64_t a, b;

	memcpy(&a, key, 8);
	memcpy(&b, key + 8, 8);
	return fmix64(a ^ idx->seed[0]) ^
	       fmix64(b ^ idx->seed[1] ^ ((uint64_t)ns << 16 | shard)) * 0x9e3779b97f4a7c15ull;
}

static inline uint32_t stripe_of(uint32_t bucket)
{
	return bucket % SSD_INDEX_STRIPES;
}

int ssd_index_init(struct ssd_index *idx, uint64_t expect, uint64_t max_entries)
{
	uint64_t nb = SSD_INDEX_STRIPES;

	memset(idx, 0, sizeof(*idx));
	while (nb < expect && nb < (1u << 30))
		nb <<= 1;
	if (max_entries > UINT32_MAX - 1)
		max_entries = UINT32_MAX - 1;
	idx->max_chunks = (uint32_t)((max_entries + SSD_CHUNK_ENTRIES - 1) / SSD_CHUNK_ENTRIES);
	if (idx->max_chunks == 0)
		idx->max_chunks = 1;
	idx->nbuckets = (uint32_t)nb;
	idx->buckets = malloc(nb * sizeof(uint32_t));
	idx->chunks = calloc(idx->max_chunks, sizeof(*idx->chunks));
	idx->ns_nbuckets = 1024;
	idx->ns_buckets = malloc(idx->ns_nbuckets * sizeof(uint32_t));
	idx->ns_by_id = calloc(SSD_MAX_NAMESPACES, sizeof(*idx->ns_by_id));
	if (!idx->buckets || !idx->chunks || !idx->ns_buckets || !idx->ns_by_id) {
		ssd_index_fini(idx);
		return -ENOMEM;
	}
	memset(idx->buckets, 0xff, nb * sizeof(uint32_t));
	memset(idx->ns_buckets, 0xff, idx->ns_nbuckets * sizeof(uint32_t));
	if (getrandom(idx->seed, sizeof(idx->seed), 0) != sizeof(idx->seed)) {
		idx->seed[0] = (uint64_t)(uintptr_t)idx ^ 0x5bd1e995ull;
		idx->seed[1] = fmix64(idx->seed[0]);
	}
	idx->free_head = SSD_NO_ENTRY;
	for (unsigned i = 0; i < SSD_INDEX_STRIPES; i++)
		pthread_mutex_init(&idx->stripe[i], NULL);
	pthread_mutex_init(&idx->alloc_lock, NULL);
	pthread_mutex_init(&idx->ns_lock, NULL);
	return 0;
}

void ssd_index_fini(struct ssd_index *idx)
{
	if (!idx)
		return;
	if (idx->chunks)
		for (uint32_t i = 0; i < idx->nchunks; i++)
			free(idx->chunks[i]);
	if (idx->ns_by_id)
		for (uint32_t i = 0; i < idx->nr_ns; i++)
			free(idx->ns_by_id[i]);
	idx->chunks = mfree(idx->chunks);
	idx->buckets = mfree(idx->buckets);
	idx->ns_buckets = mfree(idx->ns_buckets);
	idx->ns_by_id = mfree(idx->ns_by_id);
}

/* ---- namespaces ------------------------------------------------------- */

int ssd_index_ns(struct ssd_index *idx, const void *ident, size_t len, uint32_t *ret_id)
{
	uint32_t h, b, i;
	struct ssd_ns_ent *e;
	int r = 0;

	if (len == 0 || len > SSD_NS_MAX)
		return -EINVAL;
	h = ssd_ns_digest(ident, len);
	pthread_mutex_lock(&idx->ns_lock);
	b = h & (idx->ns_nbuckets - 1);
	for (i = idx->ns_buckets[b]; i != SSD_NO_ENTRY; i = idx->ns_by_id[i]->next) {
		e = idx->ns_by_id[i];
		if (e->hash == h && e->len == len && memcmp(e->ident, ident, len) == 0) {
			*ret_id = i;
			goto out;
		}
	}
	if (idx->nr_ns == SSD_MAX_NAMESPACES) {
		r = -EUSERS;
		goto out;
	}
	e = malloc(sizeof(*e) + len);
	if (!e) {
		r = -ENOMEM;
		goto out;
	}
	e->hash = h;
	e->len = (uint16_t)len;
	memcpy(e->ident, ident, len);
	e->next = idx->ns_buckets[b];
	i = idx->nr_ns++;
	idx->ns_by_id[i] = e;
	idx->ns_buckets[b] = i;
	*ret_id = i;
out:
	pthread_mutex_unlock(&idx->ns_lock);
	return r;
}

const uint8_t *ssd_index_ns_ident(struct ssd_index *idx, uint32_t id, uint16_t *ret_len)
{
	const struct ssd_ns_ent *e = NULL;

	pthread_mutex_lock(&idx->ns_lock);
	if (id < idx->nr_ns)
		e = idx->ns_by_id[id];
	pthread_mutex_unlock(&idx->ns_lock);
	if (!e)
		return NULL;
	*ret_len = e->len;
	return e->ident;
}

/* ---- entry allocation ------------------------------------------------- */

static int ent_alloc(struct ssd_index *idx, uint32_t *ret)
{
	uint32_t i;
	int r = 0;

	pthread_mutex_lock(&idx->alloc_lock);
	if (idx->free_head == SSD_NO_ENTRY) {
		struct ssd_ent *c;
		uint32_t base;

		if (idx->nchunks == idx->max_chunks) {
			r = -ENOMEM;
			goto out;
		}
		c = malloc(sizeof(*c) * SSD_CHUNK_ENTRIES);
		if (!c) {
			r = -ENOMEM;
			goto out;
		}
		base = idx->nchunks << SSD_CHUNK_SHIFT;
		for (uint32_t j = 0; j < SSD_CHUNK_ENTRIES; j++) {
			c[j].state = SSD_E_FREE;
			c[j].hnext = j + 1 < SSD_CHUNK_ENTRIES ? base + j + 1 : SSD_NO_ENTRY;
		}
		/*
		 * The chunk pointer is stored before any index that reaches
		 * it is handed out; a thread that later finds the entry
		 * through a stripe lock is ordered after this by that lock.
		 */
		idx->chunks[idx->nchunks] = c;
		/* Relaxed: ssd_index_kill() reads it only as a bound. */
		__atomic_store_n(&idx->nchunks, idx->nchunks + 1, __ATOMIC_RELAXED);
		idx->free_head = base;
	}
	i = idx->free_head;
	idx->free_head = ssd_ent_at(idx, i)->hnext;
	idx->nalloc++;
	*ret = i;
out:
	pthread_mutex_unlock(&idx->alloc_lock);
	return r;
}

static void ent_free(struct ssd_index *idx, uint32_t i)
{
	struct ssd_ent *e = ssd_ent_at(idx, i);

	pthread_mutex_lock(&idx->alloc_lock);
	e->state = SSD_E_FREE;
	e->hnext = idx->free_head;
	idx->free_head = i;
	idx->nalloc--;
	pthread_mutex_unlock(&idx->alloc_lock);
}

/* ---- hash ------------------------------------------------------------- */

/*
 * Grow the table when it averages more than two entries per bucket:
 * every stripe lock, in order, so no lookup runs meanwhile.
 */
static void maybe_grow(struct ssd_index *idx)
{
	uint64_t n = __atomic_load_n(&idx->nvalid, __ATOMIC_RELAXED) +
		     __atomic_load_n(&idx->nwriting, __ATOMIC_RELAXED);
	uint32_t *nb, oldn, newn;

	if (n <= 2ull * idx->nbuckets || idx->nbuckets >= (1u << 30))
		return;
	for (unsigned s = 0; s < SSD_INDEX_STRIPES; s++)
		pthread_mutex_lock(&idx->stripe[s]);
	oldn = idx->nbuckets;
	if (n <= 2ull * oldn)
		goto out;
	newn = oldn * 2;
	nb = malloc((size_t)newn * sizeof(uint32_t));
	if (!nb)
		goto out; /* longer chains, still correct */
	memset(nb, 0xff, (size_t)newn * sizeof(uint32_t));
	for (uint32_t b = 0; b < oldn; b++) {
		uint32_t i = idx->buckets[b];

		while (i != SSD_NO_ENTRY) {
			struct ssd_ent *e = ssd_ent_at(idx, i);
			uint32_t next = e->hnext;
			uint32_t nbk =
				(uint32_t)(ent_hash(idx, e->ns, e->key, e->shard) & (newn - 1));

			e->hnext = nb[nbk];
			nb[nbk] = i;
			i = next;
		}
	}
	free(idx->buckets);
	idx->buckets = nb;
	/* Pairs with the unlocked first read in lock_bucket(), checked again under a stripe. */
	__atomic_store_n(&idx->nbuckets, newn, __ATOMIC_RELAXED);
out:
	for (unsigned s = SSD_INDEX_STRIPES; s-- > 0;)
		pthread_mutex_unlock(&idx->stripe[s]);
}

/*
 * Lock the stripe of (ns, key, shard): the bucket depends on nbuckets,
 * which a resize changes only with every stripe held, so it is read
 * again once the stripe is held.
 */
static uint32_t lock_bucket(struct ssd_index *idx, uint64_t h)
{
	for (;;) {
		uint32_t nb = __atomic_load_n(&idx->nbuckets, __ATOMIC_RELAXED);
		uint32_t s = stripe_of((uint32_t)(h & (nb - 1)));

		pthread_mutex_lock(&idx->stripe[s]);
		/* The resize's stores to nbuckets happened under this lock too. */
		if (idx->nbuckets == nb)
			return (uint32_t)(h & (nb - 1));
		pthread_mutex_unlock(&idx->stripe[s]);
	}
}

static void unlock_bucket(struct ssd_index *idx, uint32_t b)
{
	pthread_mutex_unlock(&idx->stripe[stripe_of(b)]);
}

static uint32_t *find_link(struct ssd_index *idx, uint32_t b, uint32_t ns, const uint8_t *key,
			   uint16_t shard)
{
	uint32_t *link = &idx->buckets[b];

	while (*link != SSD_NO_ENTRY) {
		struct ssd_ent *e = ssd_ent_at(idx, *link);

		if (e->ns == ns && e->shard == shard && memcmp(e->key, key, SSD_KEY_SIZE) == 0)
			return link;
		link = &e->hnext;
	}
	return NULL;
}

/* Unlink entry @i from its chain; the caller holds its stripe. */
static bool unlink_ent(struct ssd_index *idx, uint32_t b, uint32_t i)
{
	uint32_t *link = &idx->buckets[b];

	while (*link != SSD_NO_ENTRY) {
		if (*link == i) {
			*link = ssd_ent_at(idx, i)->hnext;
			return true;
		}
		link = &ssd_ent_at(idx, *link)->hnext;
	}
	return false;
}

int ssd_index_begin(struct ssd_index *idx, uint32_t ns, const uint8_t *key, uint16_t shard,
		    uint8_t drive, uint32_t *ret_ent)
{
	uint64_t h = ent_hash(idx, ns, key, shard);
	struct ssd_ent *e;
	uint32_t i, b;
	int r;

	if (ssd_index_contains(idx, ns, key, shard))
		return -EEXIST;
	r = ent_alloc(idx, &i);
	if (r < 0)
		return r;
	e = ssd_ent_at(idx, i);
	memcpy(e->key, key, SSD_KEY_SIZE);
	e->ns = ns;
	e->shard = shard;
	e->drive = drive;
	e->state = SSD_E_WRITING;
	e->rnext = SSD_NO_ENTRY;
	b = lock_bucket(idx, h);
	if (find_link(idx, b, ns, key, shard)) {
		unlock_bucket(idx, b);
		ent_free(idx, i);
		return -EEXIST;
	}
	e->hnext = idx->buckets[b];
	idx->buckets[b] = i;
	unlock_bucket(idx, b);
	__atomic_fetch_add(&idx->nwriting, 1, __ATOMIC_RELAXED);
	maybe_grow(idx);
	*ret_ent = i;
	return 0;
}

/* Where @loc says the block lies (the drive is set where the entry is claimed). */
static void ent_place(struct ssd_ent *e, const struct ssd_loc *loc)
{
	e->region = loc->region;
	e->region_seq = loc->region_seq;
	e->off_units = loc->off_units;
	e->len = loc->len;
	e->crc = loc->crc;
}

void ssd_index_commit(struct ssd_index *idx, uint32_t i, struct ssd_region *r,
		      const struct ssd_loc *loc)
{
	struct ssd_ent *e = ssd_ent_at(idx, i);
	uint32_t b = lock_bucket(idx, ent_hash(idx, e->ns, e->key, e->shard));

	ent_place(e, loc);
	/* Visible to lookups from here: the stripe lock orders the fields before. */
	e->state = SSD_E_VALID;
	unlock_bucket(idx, b);
	e->rnext = r->entries;
	r->entries = i;
	__atomic_fetch_sub(&idx->nwriting, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&idx->nvalid, 1, __ATOMIC_RELAXED);
}

void ssd_index_abort(struct ssd_index *idx, uint32_t i)
{
	struct ssd_ent *e = ssd_ent_at(idx, i);
	uint32_t b = lock_bucket(idx, ent_hash(idx, e->ns, e->key, e->shard));

	unlink_ent(idx, b, i);
	unlock_bucket(idx, b);
	__atomic_fetch_sub(&idx->nwriting, 1, __ATOMIC_RELAXED);
	ent_free(idx, i);
}

static bool newer(uint32_t seq_a, uint32_t off_a, uint32_t seq_b, uint32_t off_b)
{
	if (seq_a != seq_b)
		return ssd_seq_after(seq_a, seq_b);
	return off_a > off_b;
}

int ssd_index_recover(struct ssd_index *idx, uint32_t ns, const uint8_t *key, uint16_t shard,
		      struct ssd_region *r, const struct ssd_loc *loc)
{
	uint64_t h = ent_hash(idx, ns, key, shard);
	struct ssd_ent *e, *old;
	uint32_t i, b, *link;
	int ret = 1;

	if (ent_alloc(idx, &i) < 0)
		return 0; /* out of index memory: a miss */
	e = ssd_ent_at(idx, i);
	memcpy(e->key, key, SSD_KEY_SIZE);
	e->ns = ns;
	e->shard = shard;
	e->drive = (uint8_t)loc->drive;
	ent_place(e, loc);
	e->state = SSD_E_VALID;
	b = lock_bucket(idx, h);
	link = find_link(idx, b, ns, key, shard);
	if (link) {
		old = ssd_ent_at(idx, *link);
		if (old->state == SSD_E_VALID && old->drive == e->drive &&
		    !newer(e->region_seq, e->off_units, old->region_seq, old->off_units)) {
			/* The copy already indexed is newer: this one is dead on arrival. */
			e->state = SSD_E_DEAD;
			ret = 0;
		} else if (old->state == SSD_E_VALID) {
			/* Replace the older copy in its chain; it stays on its region's list. */
			e->hnext = old->hnext;
			*link = i;
			old->state = SSD_E_DEAD;
			__atomic_fetch_sub(&idx->nvalid, 1, __ATOMIC_RELAXED);
		} else {
			e->state = SSD_E_DEAD; /* a write of it is under way */
			ret = 0;
		}
	}
	if (!link) {
		e->hnext = idx->buckets[b];
		idx->buckets[b] = i;
	}
	unlock_bucket(idx, b);
	if (ret) {
		__atomic_fetch_add(&idx->nvalid, 1, __ATOMIC_RELAXED);
		maybe_grow(idx);
	}
	e->rnext = r->entries;
	r->entries = i;
	return ret;
}

int ssd_index_lookup(struct ssd_index *idx, uint32_t ns, const uint8_t *key, uint16_t shard,
		     struct ssd_loc *ret_loc)
{
	uint32_t b = lock_bucket(idx, ent_hash(idx, ns, key, shard));
	uint32_t *link = find_link(idx, b, ns, key, shard);
	int r = -ENOENT;

	if (link) {
		struct ssd_ent *e = ssd_ent_at(idx, *link);

		if (e->state == SSD_E_VALID) {
			ret_loc->drive = e->drive;
			ret_loc->region = e->region;
			ret_loc->region_seq = e->region_seq;
			ret_loc->off_units = e->off_units;
			ret_loc->len = e->len;
			ret_loc->crc = e->crc;
			ret_loc->ent = *link;
			r = 0;
		}
	}
	unlock_bucket(idx, b);
	return r;
}

bool ssd_index_contains(struct ssd_index *idx, uint32_t ns, const uint8_t *key, uint16_t shard)
{
	uint32_t b = lock_bucket(idx, ent_hash(idx, ns, key, shard));
	bool found = find_link(idx, b, ns, key, shard) != NULL;

	unlock_bucket(idx, b);
	return found;
}

void ssd_index_kill(struct ssd_index *idx, const struct ssd_loc *loc)
{
	struct ssd_ent *e;
	uint32_t b;

	if (loc->ent >> SSD_CHUNK_SHIFT >= __atomic_load_n(&idx->nchunks, __ATOMIC_RELAXED))
		return;
	e = ssd_ent_at(idx, loc->ent);
	b = lock_bucket(idx, ent_hash(idx, e->ns, e->key, e->shard));
	if (e->state == SSD_E_VALID && e->region == loc->region &&
	    e->region_seq == loc->region_seq && e->off_units == loc->off_units &&
	    e->drive == loc->drive) {
		unlink_ent(idx, b, loc->ent);
		e->state = SSD_E_DEAD;
		__atomic_fetch_sub(&idx->nvalid, 1, __ATOMIC_RELAXED);
	}
	unlock_bucket(idx, b);
}

uint32_t ssd_index_drop_region(struct ssd_index *idx, struct ssd_region *r)
{
	uint32_t i = r->entries, dropped = 0;

	while (i != SSD_NO_ENTRY) {
		struct ssd_ent *e = ssd_ent_at(idx, i);
		uint32_t next = e->rnext;
		uint32_t b = lock_bucket(idx, ent_hash(idx, e->ns, e->key, e->shard));

		if (e->state == SSD_E_VALID) {
			unlink_ent(idx, b, i);
			__atomic_fetch_sub(&idx->nvalid, 1, __ATOMIC_RELAXED);
			dropped++;
		} else if (e->state == SSD_E_DEAD) {
			/* A DEAD entry may still be chained (a recovery loser never was). */
			unlink_ent(idx, b, i);
		}
		e->state = SSD_E_FREE;
		unlock_bucket(idx, b);
		ent_free(idx, i);
		i = next;
	}
	r->entries = SSD_NO_ENTRY;
	return dropped;
}

uint64_t ssd_index_bytes(const struct ssd_index *idx)
{
	/*
	 * A gauge for STATS, read without the locks: relaxed loads, paired
	 * with the relaxed stores of growth (maybe_grow(), the chunk
	 * allocator); a figure a growth old is fine.
	 */
	uint32_t nchunks = __atomic_load_n(&idx->nchunks, __ATOMIC_RELAXED);
	uint32_t nbuckets = __atomic_load_n(&idx->nbuckets, __ATOMIC_RELAXED);

	return (uint64_t)nchunks * SSD_CHUNK_ENTRIES * sizeof(struct ssd_ent) +
	       (uint64_t)nbuckets * sizeof(uint32_t) + (uint64_t)idx->max_chunks * sizeof(void *);
}
