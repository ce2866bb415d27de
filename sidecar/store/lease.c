/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "store/store.h"
#include "control/instance.h"
#include "store/lease.h"
#include "base/util.h"

#define LEASE_BUCKETS 4096u /* chains stay short: leases live seconds */

static struct {
	pthread_mutex_t lock;
	struct lease *buckets[LEASE_BUCKETS];
	struct cds_list_head fifo;
	uint64_t ttl_ns;
	uint32_t max_per_instance;
	uint64_t next;	/* ids: a random start, then sequential */
	struct lease_stats st;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER };

static unsigned bucket(uint64_t id)
{
	return (unsigned)((id * 0x9e3779b97f4a7c15ull) >> 52) & (LEASE_BUCKETS - 1);
}

int lease_table_init(uint32_t ttl_ms, uint32_t max_per_instance)
{
	memset(T.buckets, 0, sizeof(T.buckets));
	CDS_INIT_LIST_HEAD(&T.fifo);
	T.ttl_ns = (uint64_t)ttl_ms * NSEC_PER_MSEC;
	T.max_per_instance = max_per_instance;
	memset(&T.st, 0, sizeof(T.st));
	/* Ids are not secrets (instances are checked), but should not repeat across restarts. */
	if (getrandom(&T.next, sizeof(T.next), 0) != sizeof(T.next))
		T.next = now_ns();
	T.next = (T.next >> 16) | 1;
	return 0;
}

/* Table lock held. */
static struct lease **find(uint64_t id)
{
	struct lease **pp = &T.buckets[bucket(id)];

	while (*pp && (*pp)->id != id)
		pp = &(*pp)->hnext;
	return pp;
}

static void lease_free(struct lease *l)
{
	for (uint32_t i = 0; i < l->nblocks; i++)
		block_unpin(l->blocks[i]);
	__atomic_fetch_sub(&l->inst->leases, 1, __ATOMIC_RELAXED);
	instance_put(l->inst);
	free(l->loaded);
	free(l);
}

/* Table lock held: take @l out of the table, dropping the table's ref. */
static bool unlink_locked(struct lease **pp)
{
	struct lease *l = *pp;

	*pp = l->hnext;
	cds_list_del(&l->fifo);
	T.st.live--;
	return --l->refs == 0;
}

int lease_create(struct instance *inst, uint64_t creator, struct block **blocks, uint32_t n,
		 uint64_t *ret_id, uint64_t *ret_ttl_ms)
{
	struct lease *l;
	struct lease **pp;

	if (__atomic_add_fetch(&inst->leases, 1, __ATOMIC_RELAXED) > T.max_per_instance) {
		__atomic_fetch_sub(&inst->leases, 1, __ATOMIC_RELAXED);
		return -EBUSY;
	}
	l = malloc(sizeof(*l) + n * sizeof(l->blocks[0]));
	if (l)
		l->loaded = calloc((inst->world_size + 63) / 64, sizeof(uint64_t));
	if (!l || !l->loaded) {
		free(l);
		__atomic_fetch_sub(&inst->leases, 1, __ATOMIC_RELAXED);
		return -ENOMEM;
	}
	instance_get(inst);
	l->inst = inst;
	l->creator = creator;
	l->refs = 1;
	l->consumers_left = inst->world_size;
	l->world_size = inst->world_size;
	l->nblocks = n;
	memcpy(l->blocks, blocks, n * sizeof(blocks[0]));

	pthread_mutex_lock(&T.lock);
	do {
		l->id = T.next++;
		pp = find(l->id);
	} while (l->id == 0 || *pp);
	l->expires_ns = now_ns() + T.ttl_ns;
	l->hnext = NULL;
	*pp = l;
	cds_list_add_tail(&l->fifo, &T.fifo);
	T.st.live++;
	T.st.created++;
	/*
	 * Read the id under the lock: once it is dropped the lease is the
	 * table's, and a sweep or a RELEASE (ids are guessable) may free it.
	 */
	*ret_id = l->id;
	pthread_mutex_unlock(&T.lock);
	*ret_ttl_ms = T.ttl_ns / NSEC_PER_MSEC;
	return 0;
}

int lease_take(uint64_t id, const struct instance *inst, uint32_t rank, uint32_t n,
	       struct lease **ret)
{
	struct lease **pp, *l;
	int r = 0;

	pthread_mutex_lock(&T.lock);
	pp = find(id);
	l = *pp;
	if (!l) {
		r = -ENOENT;
	} else if (l->inst != inst) {
		r = -EACCES;
	} else if (rank >= l->world_size || n > l->nblocks) {
		/* Before the share is taken: the engine may correct its LOAD. */
		r = -EINVAL;
	} else if (l->loaded[rank / 64] & (1ull << (rank % 64))) {
		r = -EALREADY;
	} else {
		l->loaded[rank / 64] |= 1ull << (rank % 64);
		l->refs++; /* the LOAD's */
		if (--l->consumers_left == 0) {
			unlink_locked(pp); /* the LOAD's ref keeps it */
			T.st.consumed++;
		}
		*ret = l;
	}
	pthread_mutex_unlock(&T.lock);
	return r;
}

void lease_put(struct lease *l)
{
	bool last;

	pthread_mutex_lock(&T.lock);
	last = --l->refs == 0;
	pthread_mutex_unlock(&T.lock);
	if (last)
		lease_free(l);
}

int lease_release(uint64_t id, const struct instance *inst)
{
	struct lease **pp, *l;
	bool last = false;
	int r = 0;

	pthread_mutex_lock(&T.lock);
	pp = find(id);
	l = *pp;
	if (!l) {
		r = -ENOENT;
	} else if (l->inst != inst) {
		r = -EACCES;
	} else {
		last = unlink_locked(pp);
		T.st.released++;
	}
	pthread_mutex_unlock(&T.lock);
	if (last)
		lease_free(l);
	return r;
}

/* What to drop: expired leases (by FIFO order) or a session's leases. */
struct drop_filter {
	uint64_t now;	  /* expire when expires_ns <= now; 0: not this */
	uint64_t creator; /* drop leases of this session; 0: not this */
};

static unsigned drop_where(const struct drop_filter *f, uint64_t *counter)
{
	struct lease *l, *tmp, *dead = NULL;
	unsigned n = 0;

	pthread_mutex_lock(&T.lock);
	cds_list_for_each_entry_safe(l, tmp, &T.fifo, fifo) {
		if (f->now && l->expires_ns > f->now)
			break; /* sorted by expiry: the rest are younger */
		if (f->creator && l->creator != f->creator)
			continue;
		if (unlink_locked(find(l->id))) {
			l->hnext = dead; /* free outside the lock */
			dead = l;
		}
		(*counter)++;
		n++;
	}
	pthread_mutex_unlock(&T.lock);
	while (dead) {
		l = dead;
		dead = l->hnext;
		lease_free(l);
	}
	return n;
}

unsigned lease_sweep(void)
{
	struct drop_filter f = { .now = now_ns() };

	return drop_where(&f, &T.st.expired);
}

unsigned lease_drop_creator(uint64_t session_id)
{
	struct drop_filter f = { .creator = session_id };

	return drop_where(&f, &T.st.released);
}

void lease_get_stats(struct lease_stats *ret)
{
	pthread_mutex_lock(&T.lock);
	*ret = T.st;
	pthread_mutex_unlock(&T.lock);
}

void lease_table_fini(void)
{
	struct lease *l, *tmp;

	cds_list_for_each_entry_safe(l, tmp, &T.fifo, fifo) {
		if (unlink_locked(find(l->id)))
			lease_free(l);
	}
}
