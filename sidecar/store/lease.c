/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/conf.h"
#include "store/store.h"
#include "control/instance.h"
#include "store/lease.h"
#include "obs/log.h"
#include "base/util.h"

#define LEASE_BUCKETS 4096u /* chains stay short: leases live seconds */

/* A uid's lease memory: made with its first live lease, freed with its last. */
struct lease_uid {
	uid_t uid;
	uint32_t leases;
	uint64_t bytes;
	struct lease_uid *next;
};

static struct {
	pthread_mutex_t lock;
	struct lease *buckets[LEASE_BUCKETS];
	struct cds_list_head fifo;
	struct cds_list_head holders; /* instances with leases in the table */
	struct lease_uid *uids;	      /* uids with live leases: few */
	uint64_t ttl_ns;
	uint32_t max_per_instance;
	uint64_t max_bytes_instance, max_bytes_uid, max_bytes;
	uint64_t bytes; /* memory of all live leases */
	uint64_t next;	/* ids: a random start, then sequential */
	struct lease_stats st;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER };

static unsigned bucket(uint64_t id)
{
	return (unsigned)((id * 0x9e3779b97f4a7c15ull) >> 52) & (LEASE_BUCKETS - 1);
}

void lease_holder_init(struct lease_holder *h)
{
	memset(h, 0, sizeof(*h));
	CDS_INIT_LIST_HEAD(&h->list);
	CDS_INIT_LIST_HEAD(&h->node);
}

int lease_table_init(const struct kvs_config *cfg)
{
	memset(T.buckets, 0, sizeof(T.buckets));
	CDS_INIT_LIST_HEAD(&T.fifo);
	CDS_INIT_LIST_HEAD(&T.holders);
	T.uids = NULL;
	T.ttl_ns = (uint64_t)cfg->lease_ttl_ms * NSEC_PER_MSEC;
	T.max_per_instance = cfg->max_leases;
	T.max_bytes_instance = cfg->lease_memory_per_instance;
	T.max_bytes_uid = cfg->lease_memory_per_uid;
	T.max_bytes = cfg->lease_memory;
	T.bytes = 0;
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

/* Table lock held: the account of @uid, or NULL. */
static struct lease_uid **find_uid(uid_t uid)
{
	struct lease_uid **pp = &T.uids;

	while (*pp && (*pp)->uid != uid)
		pp = &(*pp)->next;
	return pp;
}

/*
 * Table lock held, the last reference to @l gone: its memory and pins no
 * longer count, though lease_free() (outside the lock) frees them just
 * after.  Every count of a lease is given back here and only here.
 */
static void uncount_locked(struct lease *l)
{
	struct lease_holder *h = &l->inst->lh;
	struct lease_uid *u = l->uid;

	h->leases--;
	h->bytes -= l->bytes;
	h->pinned -= l->pinned;
	T.bytes -= l->bytes;
	u->bytes -= l->bytes;
	if (--u->leases == 0) {
		*find_uid(u->uid) = u->next;
		free(u);
	}
}

static void lease_free(struct lease *l)
{
	for (uint32_t i = 0; i < l->nblocks; i++)
		block_unpin(l->blocks[i]);
	instance_put(l->inst);
	free(l->loaded);
	free(l);
}

/* Table lock held: take @l out of the table, dropping the table's ref. */
static bool unlink_locked(struct lease **pp)
{
	struct lease *l = *pp;
	struct lease_holder *h = &l->inst->lh;

	*pp = l->hnext;
	cds_list_del(&l->fifo);
	cds_list_del(&l->inode);
	if (cds_list_empty(&h->list))
		cds_list_del_init(&h->node);
	T.st.live--;
	if (--l->refs)
		return false;
	uncount_locked(l);
	return true;
}

/*
 * Table lock held.  Which memory bound a new lease of @bytes for @h and
 * @u (NULL: the uid has none yet) would pass, as text; NULL if none.
 */
static const char *over_bound(const struct lease_holder *h, const struct lease_uid *u,
			      uint64_t bytes, uid_t uid, char *buf, size_t len)
{
	if (h->bytes + bytes > T.max_bytes_instance) {
		snprintf(buf, len,
			 "the instance's lease memory (%" PRIu64 " of %" PRIu64
			 " bytes in %u leases) is used up",
			 h->bytes, T.max_bytes_instance, h->leases);
		return buf;
	}
	if ((u ? u->bytes : 0) + bytes > T.max_bytes_uid) {
		snprintf(buf, len,
			 "the lease memory of uid %u (%" PRIu64 " of %" PRIu64 " bytes) is used up",
			 (unsigned)uid, u ? u->bytes : 0, T.max_bytes_uid);
		return buf;
	}
	if (T.bytes + bytes > T.max_bytes) {
		snprintf(buf, len,
			 "the lease memory of all leases (%" PRIu64 " of %" PRIu64
			 " bytes) is used up",
			 T.bytes, T.max_bytes);
		return buf;
	}
	return NULL;
}

int lease_create(struct instance *inst, uint64_t creator, uid_t uid, struct block **blocks,
		 uint32_t n, uint64_t pinned, uint64_t *ret_id, uint64_t *ret_ttl_ms, char *why,
		 size_t wl)
{
	size_t words = (inst->world_size + 63) / 64;
	/* What the two allocations below take, as malloc is asked. */
	uint64_t bytes = sizeof(struct lease) + (uint64_t)n * sizeof(struct block *) +
			 words * sizeof(uint64_t);
	struct lease_holder *h = &inst->lh;
	struct lease_uid **up, *u;
	struct lease *l;
	struct lease **pp;
	int r = 0;

	why[0] = '\0';
	/*
	 * Allocate first, count under the lock: one lock round per QUERY.  A
	 * lease refused after its allocation is freed at once, so memory past
	 * the bounds is at most one lease per I/O worker, for a moment.
	 */
	l = malloc(sizeof(*l) + n * sizeof(l->blocks[0]));
	if (l)
		l->loaded = calloc(words, sizeof(uint64_t));
	if (!l || !l->loaded) {
		free(l);
		return -ENOMEM;
	}
	l->creator = creator;
	l->refs = 1;
	l->consumers_left = inst->world_size;
	l->world_size = inst->world_size;
	l->nblocks = n;
	l->bytes = bytes;
	l->pinned = pinned;
	memcpy(l->blocks, blocks, n * sizeof(blocks[0]));
	/*
	 * The lease's reference, taken before the table lock: the instance
	 * lock is never taken under it.  Dropped by lease_free(), or below.
	 */
	instance_get(inst);
	l->inst = inst;

	pthread_mutex_lock(&T.lock);
	up = find_uid(uid);
	u = *up;
	if (h->leases >= T.max_per_instance) {
		r = -EBUSY;
	} else if (over_bound(h, u, bytes, uid, why, wl)) {
		r = -EDQUOT;
		/* Say it once per run of refusals: the engine sees each in its CQE. */
		if (h->refusing)
			why[0] = '\0';
		h->refusing = true;
	} else if (!u && !(u = calloc(1, sizeof(*u)))) {
		r = -ENOMEM;
	}
	if (r) {
		pthread_mutex_unlock(&T.lock);
		instance_put(inst); /* the caller's session holds another */
		free(l->loaded);
		free(l);
		return r;
	}
	if (!*up) {
		u->uid = uid;
		*up = u;
	}
	u->leases++;
	u->bytes += bytes;
	h->leases++;
	h->bytes += bytes;
	h->pinned += pinned;
	h->refusing = false;
	T.bytes += bytes;
	l->uid = u;
	do {
		l->id = T.next++;
		pp = find(l->id);
	} while (l->id == 0 || *pp);
	l->expires_ns = now_ns() + T.ttl_ns;
	l->hnext = NULL;
	*pp = l;
	cds_list_add_tail(&l->fifo, &T.fifo);
	if (cds_list_empty(&h->list))
		cds_list_add_tail(&h->node, &T.holders);
	cds_list_add_tail(&l->inode, &h->list);
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
	if (last)
		uncount_locked(l);
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

/* Table lock held: the instance pinning the most, if more than @saver, and its oldest unused lease. */
static struct lease *revocable(const struct instance *saver)
{
	struct instance *inst, *best = NULL;
	struct lease *l;

	cds_list_for_each_entry(inst, &T.holders, lh.node) {
		if (inst == saver || inst->lh.pinned <= saver->lh.pinned)
			continue;
		if (best && inst->lh.pinned <= best->lh.pinned)
			continue;
		/* A lease a LOAD copies from (refs > 1) would not unpin before it ends. */
		cds_list_for_each_entry(l, &inst->lh.list, inode) {
			if (l->refs == 1) {
				best = inst;
				break;
			}
		}
	}
	if (!best)
		return NULL;
	cds_list_for_each_entry(l, &best->lh.list, inode)
		if (l->refs == 1)
			return l;
	return NULL;
}

unsigned lease_revoke_for(const struct instance *saver, uint64_t need)
{
	struct lease *l, *dead = NULL;
	uint64_t freed = 0;
	unsigned n = 0;
	char victim[KVS_NAME_MAX] = "";
	bool several = false;

	pthread_mutex_lock(&T.lock);
	while (freed < need && (l = revocable(saver))) {
		/* Names are copied: the instance may go with its last lease. */
		several |= victim[0] && strcmp(victim, l->inst->name) != 0;
		snprintf(victim, sizeof(victim), "%s", l->inst->name);
		freed += l->pinned;
		if (unlink_locked(find(l->id))) {
			l->hnext = dead; /* free outside the lock */
			dead = l;
		}
		T.st.released++;
		n++;
	}
	pthread_mutex_unlock(&T.lock);
	while (dead) {
		l = dead;
		dead = l->hnext;
		lease_free(l);
	}
	if (n)
		log_info("revoked %u leases of instance %s%s (%" PRIu64 " pinned bytes): a SAVE of "
			 "instance %s found nothing to evict",
			 n, several ? "and others, last " : "", victim, freed, saver->name);
	return n;
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
