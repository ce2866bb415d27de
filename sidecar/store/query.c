/* SPDX-License-Identifier: MIT */
/*
 * QUERY's DRAM walk (query.h): lookups of a QUERY's keys until the first
 * miss, pinning or counting each hit.  Runs on the querying thread (an
 * I/O worker, or the control thread for a peer) with no lock, and for
 * long QUERYs also on the query helper threads ("kvs-query"), which this
 * file owns.
 */
#include <pthread.h>

#include "base/util.h"
#include "store/query.h"

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

bool query_pin(struct block *b)
{
	int32_t v = __atomic_load_n(&b->pins, __ATOMIC_RELAXED);

	do {
		if (v < 0)
			return false;
		/* Pairs with the CAS in claim() (core.c). */
	} while (!__atomic_compare_exchange_n(&b->pins, &v, v + 1, true, __ATOMIC_ACQUIRE,
					      __ATOMIC_RELAXED));
	return true;
}

void query_unpin(struct block *b)
{
	/* Release: our reads of the slot happen before an evictor reuses it. */
	__atomic_fetch_sub(&b->pins, 1, __ATOMIC_RELEASE);
}

void query_counted(struct block *b, struct store_query_res *r)
{
	r->bytes += b->bytes;
	if (block_tier(b) == BLOCK_RESIDENT)
		s3fifo_hit(&b->qn);
	/* A hint for spill_block() (its value under backpressure): a lost update costs nothing. */
	__atomic_store_n(&b->uses, __atomic_load_n(&b->uses, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELAXED);
}

bool query_hit(struct block *b, const struct store_query_req *q, struct store_query_res *r)
{
	/* Pairs with the store-release of tier in read_sealed() and read_failed() (core.c). */
	enum block_tier t = block_tier(b);

	if (t == BLOCK_FAILED)
		return false;
	/* Pairs with the store-release in seal() (and read_sealed(), before its tier). */
	if (t == BLOCK_RESIDENT && !__atomic_load_n(&b->sealed, __ATOMIC_ACQUIRE))
		return false;
	if (q->pin) {
		if (!query_pin(b))
			return false;
		q->ret_blocks[r->hits] = b;
	} else if (__atomic_load_n(&b->pins, __ATOMIC_RELAXED) < 0) {
		return false;
	}
	if (t == BLOCK_READING)
		r->pending++;
	query_counted(b, r);
	return true;
}

/*
 * The DRAM prefix from key @r->hits up to @end: each key's lookup and hit,
 * until the first miss.  Takes the read lock.
 */
static void dram_prefix(const struct store_index *ix, const struct store_query_req *q,
			uint32_t end, struct store_query_res *r)
{
	urcu_memb_read_lock();
	for (; r->hits < end; r->hits++) {
		/* Shard 0 exists in every sealed block, so one lookup per key. */
		struct shard *sh =
			index_lookup(ix, q->ns->id, 0, q->keys + (size_t)r->hits * KVS_KEY_SIZE);

		if (!sh || !query_hit(sh->blk, q, r))
			break;
	}
	index_read_unlock();
}

/* One chunk of a job: its keys' lookups and hits, from its start to its first miss. */
static void query_chunk(const struct store_index *ix, struct query_job *j, uint32_t k)
{
	struct store_query_res r = { .hits = k * j->chunk };

	dram_prefix(ix, j->q, MIN(j->q->n, (k + 1) * j->chunk), &r);
	j->res[k] = r;
	/* Pairs with the acquire in query_par(): the chunk's pins and result are seen. */
	__atomic_fetch_add(&j->done, 1, __ATOMIC_RELEASE);
}

/* Claim and look up chunks of @j until none is left. */
static void query_claim(const struct store_index *ix, struct query_job *j)
{
	uint32_t k;

	while ((k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->nchunks)
		query_chunk(ix, j, k);
}

static void *query_helper(void *arg)
{
	struct query_pool *qp = arg;

	/* A registered reader: query_chunk() takes the read lock. */
	urcu_memb_register_thread();
	pthread_mutex_lock(&qp->qlock);
	for (;;) {
		struct query_job *j;

		while (cds_list_empty(&qp->qjobs) && !qp->qstop)
			pthread_cond_wait(&qp->qcond, &qp->qlock);
		if (qp->qstop)
			break;
		j = cds_list_first_entry(&qp->qjobs, struct query_job, node);
		/* Every chunk claimed: off the list (its caller waits for the last ones). */
		if (__atomic_load_n(&j->next, __ATOMIC_RELAXED) >= j->nchunks) {
			cds_list_del_init(&j->node);
			continue;
		}
		j->users++;
		pthread_mutex_unlock(&qp->qlock);
		query_claim(qp->ix, j);
		pthread_mutex_lock(&qp->qlock);
		j->users--;
	}
	pthread_mutex_unlock(&qp->qlock);
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
static void query_par(struct query_pool *qp, const struct store_query_req *q,
		      struct store_query_res *ret)
{
	struct query_job j = { .q = q };
	struct store_query_res r = { 0 };
	bool ended = false;

	j.chunk = MAX(QUERY_CHUNK, (q->n + QUERY_MAX_CHUNKS - 1) / QUERY_MAX_CHUNKS);
	j.nchunks = (q->n + j.chunk - 1) / j.chunk;
	pthread_mutex_lock(&qp->qlock);
	cds_list_add_tail(&j.node, &qp->qjobs);
	pthread_cond_broadcast(&qp->qcond);
	pthread_mutex_unlock(&qp->qlock);
	query_claim(qp->ix, &j);
	/* Pairs with the release in query_chunk(). */
	while (__atomic_load_n(&j.done, __ATOMIC_ACQUIRE) < j.nchunks)
		cpu_relax();
	/* The job is on this stack: no helper may still hold it. */
	pthread_mutex_lock(&qp->qlock);
	if (!cds_list_empty(&j.node))
		cds_list_del_init(&j.node);
	while (j.users) {
		pthread_mutex_unlock(&qp->qlock);
		cpu_relax();
		pthread_mutex_lock(&qp->qlock);
	}
	pthread_mutex_unlock(&qp->qlock);
	for (uint32_t k = 0; k < j.nchunks; k++) {
		uint32_t start = k * j.chunk;

		if (ended) {
			for (uint32_t i = start; q->pin && i < j.res[k].hits; i++)
				query_unpin(q->ret_blocks[i]);
			continue;
		}
		r.hits = j.res[k].hits;
		r.bytes += j.res[k].bytes;
		r.pending += j.res[k].pending;
		ended = j.res[k].hits < MIN(q->n, start + j.chunk);
	}
	*ret = r;
}

void query_dram(struct query_pool *qp, const struct store_query_req *q,
		struct store_query_res *ret)
{
	struct store_query_res r = { 0 };

	if (qp->nhelpers && q->n >= QUERY_PAR_MIN)
		query_par(qp, q, &r);
	else
		dram_prefix(qp->ix, q, q->n, &r);
	*ret = r;
}

void query_pool_init(struct query_pool *qp, const struct store_index *ix)
{
	qp->ix = ix;
	pthread_mutex_init(&qp->qlock, NULL);
	pthread_cond_init(&qp->qcond, NULL);
	CDS_INIT_LIST_HEAD(&qp->qjobs);
	qp->qstop = false;
	qp->nhelpers = 0;
}

void query_pool_start(struct query_pool *qp, unsigned n)
{
	/* Helpers are an accelerator: as many as start (none: one thread looks up). */
	for (unsigned i = 0; i < MIN(n, QUERY_MAX_HELPERS); i++) {
		if (pthread_create(&qp->helpers[qp->nhelpers], NULL, query_helper, qp))
			break;
		pthread_setname_np(qp->helpers[qp->nhelpers++], "kvs-query");
	}
}

void query_pool_stop(struct query_pool *qp)
{
	pthread_mutex_lock(&qp->qlock);
	qp->qstop = true;
	pthread_cond_broadcast(&qp->qcond);
	pthread_mutex_unlock(&qp->qlock);
	for (unsigned i = 0; i < qp->nhelpers; i++)
		pthread_join(qp->helpers[i], NULL);
	qp->nhelpers = 0;
}

void query_pool_fini(struct query_pool *qp)
{
	pthread_cond_destroy(&qp->qcond);
	pthread_mutex_destroy(&qp->qlock);
}
