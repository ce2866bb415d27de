/* SPDX-License-Identifier: MIT */
/*
 * The store's index (index.h): the RCU hash table of shards, its keyed
 * hash, and its sizing.  Lookups run on any registered RCU reader (the
 * I/O workers, the query helpers, the control and drive threads under
 * the store lock); adds and deletes under the store lock; the resizes on
 * the resizer thread ("kvs-resize"), which this file owns.
 */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "base/util.h"
#include "store/index.h"

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

int index_readers_done;

struct lookup_key {
	uint32_t ns_id;
	uint32_t shard;
	const uint8_t *key;
};

unsigned long index_hash(const struct store_index *ix, uint32_t ns_id, uint32_t shard,
			 const uint8_t *key)
{
	uint64_t k0, k1;

	memcpy(&k0, key, 8);
	memcpy(&k1, key + 8, 8);
	return fmix64(k0 ^ ix->seed[0]) ^
	       fmix64(k1 ^ ix->seed[1] ^ ((uint64_t)ns_id << 32) ^ shard);
}

static int match(struct cds_lfht_node *node, const void *arg)
{
	const struct lookup_key *lk = arg;
	const struct shard *sh = caa_container_of(node, struct shard, hnode);

	return sh->idx == lk->shard && sh->blk->ns_id == lk->ns_id &&
	       memcmp(sh->blk->key, lk->key, KVS_KEY_SIZE) == 0;
}

struct shard *index_lookup(const struct store_index *ix, uint32_t ns_id, uint32_t shard,
			   const uint8_t *key)
{
	struct lookup_key lk = { ns_id, shard, key };
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;

	cds_lfht_lookup(ix->ht, index_hash(ix, ns_id, shard, key), match, &lk, &it);
	n = cds_lfht_iter_get_node(&it);
	return n ? caa_container_of(n, struct shard, hnode) : NULL;
}

static struct shard *shard_of(struct cds_lfht_iter *it)
{
	struct cds_lfht_node *n = cds_lfht_iter_get_node(it);

	return n ? caa_container_of(n, struct shard, hnode) : NULL;
}

struct shard *index_first(const struct store_index *ix, struct cds_lfht_iter *it)
{
	cds_lfht_first(ix->ht, it);
	return shard_of(it);
}

struct shard *index_next(const struct store_index *ix, struct cds_lfht_iter *it)
{
	cds_lfht_next(ix->ht, it);
	return shard_of(it);
}

static void *resizer_main(void *arg)
{
	struct store_index *ix = arg;

	/* A registered reader: the resize links bucket nodes under the read lock. */
	urcu_memb_register_thread();
	pthread_mutex_lock(&ix->rlock);
	for (;;) {
		unsigned long to;

		while (!ix->resize_to && !ix->stop)
			pthread_cond_wait(&ix->rcond, &ix->rlock);
		if (ix->stop)
			break;
		to = ix->resize_to;
		ix->resize_to = 0;
		pthread_mutex_unlock(&ix->rlock);
		/* Concurrent with lookups, adds and deletes; never in a read-side section. */
		cds_lfht_resize(ix->ht, to);
		pthread_mutex_lock(&ix->rlock);
	}
	pthread_mutex_unlock(&ix->rlock);
	urcu_memb_unregister_thread();
	return NULL;
}

/* Store lock held: one node more (@delta 1) or less (-1); resize when the load leaves [1/8, 1]. */
static void account(struct store_index *ix, long delta)
{
	unsigned long want = ix->buckets;

	ix->nodes += (unsigned long)delta;
	if (ix->nodes > ix->buckets)
		want = 2 * ix->buckets;
	else if (ix->nodes < ix->buckets / 8 && ix->buckets > HT_MIN_BUCKETS)
		want = ix->buckets / 2;
	if (want == ix->buckets || !ix->running)
		return;
	ix->buckets = want;
	/* rlock nests inside the store lock; the resizer takes it alone. */
	pthread_mutex_lock(&ix->rlock);
	ix->resize_to = want;
	pthread_cond_signal(&ix->rcond);
	pthread_mutex_unlock(&ix->rlock);
}

void index_add(struct store_index *ix, struct shard *sh)
{
	cds_lfht_add(ix->ht, index_hash(ix, sh->blk->ns_id, sh->idx, sh->blk->key), &sh->hnode);
	account(ix, 1);
}

void index_del(struct store_index *ix, struct shard *sh)
{
	cds_lfht_del(ix->ht, &sh->hnode);
	account(ix, -1);
}

int index_init(struct store_index *ix)
{
	*ix = (struct store_index){ 0 };
	if (getrandom(ix->seed, sizeof(ix->seed), 0) != sizeof(ix->seed)) {
		ix->seed[0] = now_ns();
		ix->seed[1] = (uint64_t)(uintptr_t)ix ^ 0x9e3779b97f4a7c15ull;
	}
	/* No CDS_LFHT_AUTO_RESIZE: account() sizes the table (see HT_MIN_BUCKETS). */
	ix->ht = cds_lfht_new_flavor(HT_MIN_BUCKETS, HT_MIN_BUCKETS, 0, 0, &urcu_memb_flavor, NULL);
	if (!ix->ht)
		return -ENOMEM;
	ix->buckets = HT_MIN_BUCKETS;
	pthread_mutex_init(&ix->rlock, NULL);
	pthread_cond_init(&ix->rcond, NULL);
	return 0;
}

int index_start(struct store_index *ix)
{
	/* pthread_create() orders everything before it before the resizer's first step. */
	int r = -pthread_create(&ix->resizer, NULL, resizer_main, ix);

	if (r)
		return r;
	pthread_setname_np(ix->resizer, "kvs-resize");
	ix->running = true;
	return 0;
}

void index_stop(struct store_index *ix)
{
	if (!ix->running)
		return;
	pthread_mutex_lock(&ix->rlock);
	ix->stop = true;
	pthread_cond_signal(&ix->rcond);
	pthread_mutex_unlock(&ix->rlock);
	pthread_join(ix->resizer, NULL);
	ix->running = false;
}

void index_fini(struct store_index *ix)
{
	if (!ix->ht)
		return;
	cds_lfht_destroy(ix->ht, NULL);
	ix->ht = NULL;
	pthread_cond_destroy(&ix->rcond);
	pthread_mutex_destroy(&ix->rlock);
}
