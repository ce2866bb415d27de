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
#include "store/lease.h"
#include "store/store.h"

#define LEASE_BUCKETS 4096u /* chains stay short: leases live seconds */

/* A uid's lease memory: made with its first live lease, freed with its last. */
struct lease_uid {
	uid_t uid;
	uint32_t leases;
	uint64_t bytes;
	struct lease_uid *next;
};

struct lease_table {
	pthread_mutex_t lock;
	struct lease *buckets[LEASE_BUCKETS];
	struct cds_list_head fifo;
	struct cds_list_head holders; /* holders with leases in the table */
	struct lease_uid *uids;	      /* uids with live leases: few */
	uint64_t ttl_ns;
	uint32_t max_per_holder;
	uint64_t max_bytes_holder, max_bytes_uid, max_bytes;
	uint64_t bytes; /* memory of all live leases */
	uint64_t next;	/* ids: a random start, then sequential */
	struct lease_stats st;
	struct lease_holder_ops ops;
};

static unsigned bucket(uint64_t id)
{
	return (unsigned)((id * 0x9e3779b97f4a7c15ull) >> 52) & (LEASE_BUCKETS - 1);
}

void lease_holder_init(struct lease_holder *h, const char *name, uint32_t world_size)
{
	memset(h, 0, sizeof(*h));
	h->name = name;
	h->world_size = world_size;
	CDS_INIT_LIST_HEAD(&h->list);
	CDS_INIT_LIST_HEAD(&h->node);
}

int lease_table_new(const struct lease_params *p, struct lease_table **ret)
{
	struct lease_table *lt = calloc(1, sizeof(*lt));

	if (!lt)
		return -ENOMEM;
	pthread_mutex_init(&lt->lock, NULL);
	CDS_INIT_LIST_HEAD(&lt->fifo);
	CDS_INIT_LIST_HEAD(&lt->holders);
	lt->ttl_ns = (uint64_t)p->ttl_ms * NSEC_PER_MSEC;
	lt->max_per_holder = p->max_per_holder;
	lt->max_bytes_holder = p->max_bytes_holder;
	lt->max_bytes_uid = p->max_bytes_uid;
	lt->max_bytes = p->max_bytes;
	lt->ops = *p->ops;
	/* Ids are not secrets (holders are checked), but should not repeat across restarts. */
	if (getrandom(&lt->next, sizeof(lt->next), 0) != sizeof(lt->next))
		lt->next = now_ns();
	lt->next = (lt->next >> 16) | 1;
	*ret = lt;
	return 0;
}

/* Table lock held. */
static struct lease **find(struct lease_table *lt, uint64_t id)
{
	struct lease **pp = &lt->buckets[bucket(id)];

	while (*pp && (*pp)->id != id)
		pp = &(*pp)->hnext;
	return pp;
}

/*
 * Table lock held: the link to lease @id if @h holds it (0), -ENOENT
 * when there is none (expired, consumed, released), -EACCES when another
 * holder's.  A lease id is only good from the session that got it.
 */
static int find_held(struct lease_table *lt, uint64_t id, const struct lease_holder *h,
		     struct lease ***ret_pp)
{
	struct lease **pp = find(lt, id);

	if (!*pp)
		return -ENOENT;
	if ((*pp)->holder != h)
		return -EACCES;
	*ret_pp = pp;
	return 0;
}

/* Table lock held: the account of @uid, or NULL. */
static struct lease_uid **find_uid(struct lease_table *lt, uid_t uid)
{
	struct lease_uid **pp = &lt->uids;

	while (*pp && (*pp)->uid != uid)
		pp = &(*pp)->next;
	return pp;
}

/*
 * Table lock held, the last reference to @l gone: its memory and pins no
 * longer count, though lease_free() (outside the lock) frees them just
 * after.  Every count of a lease is given back here and only here.
 */
static void uncount_locked(struct lease_table *lt, struct lease *l)
{
	struct lease_holder *h = l->holder;
	struct lease_uid *u = l->uid;

	h->leases--;
	h->bytes -= l->bytes;
	h->pinned -= l->pinned;
	lt->bytes -= l->bytes;
	u->bytes -= l->bytes;
	if (--u->leases == 0) {
		*find_uid(lt, u->uid) = u->next;
		free(u);
	}
}

/* Outside the table lock: the last reference to @l went (counts given back already). */
static void lease_free(struct lease_table *lt, struct lease *l)
{
	for (uint32_t i = 0; i < l->nblocks; i++)
		block_unpin(l->blocks[i]);
	lt->ops.put(l->holder);
	free(l->loaded);
	free(l);
}

/* Table lock held: take @l out of the table, dropping the table's ref. */
static bool unlink_locked(struct lease_table *lt, struct lease **pp)
{
	struct lease *l = *pp;
	struct lease_holder *h = l->holder;

	*pp = l->hnext;
	cds_list_del(&l->fifo);
	cds_list_del(&l->inode);
	if (cds_list_empty(&h->list))
		cds_list_del_init(&h->node);
	lt->st.live--;
	if (--l->refs)
		return false;
	uncount_locked(lt, l);
	return true;
}

/*
 * Table lock held.  Which memory bound a new lease of @bytes for @h and
 * @u (NULL: the uid has none yet) would pass, as text; NULL if none.
 */
static const char *over_bound(const struct lease_table *lt, const struct lease_holder *h,
			      const struct lease_uid *u, uint64_t bytes, uid_t uid, char *buf,
			      size_t len)
{
	if (h->bytes + bytes > lt->max_bytes_holder) {
		snprintf(buf, len,
			 "the instance's lease memory (%" PRIu64 " of %" PRIu64
			 " bytes in %u leases) is used up",
			 h->bytes, lt->max_bytes_holder, h->leases);
		return buf;
	}
	if ((u ? u->bytes : 0) + bytes > lt->max_bytes_uid) {
		snprintf(buf, len,
			 "the lease memory of uid %u (%" PRIu64 " of %" PRIu64 " bytes) is used up",
			 (unsigned)uid, u ? u->bytes : 0, lt->max_bytes_uid);
		return buf;
	}
	if (lt->bytes + bytes > lt->max_bytes) {
		snprintf(buf, len,
			 "the lease memory of all leases (%" PRIu64 " of %" PRIu64
			 " bytes) is used up",
			 lt->bytes, lt->max_bytes);
		return buf;
	}
	return NULL;
}

int lease_create(struct lease_table *lt, struct lease_holder *h, uint64_t creator, uid_t uid,
		 struct block **blocks, uint32_t n, uint64_t pinned, uint64_t *ret_id,
		 uint64_t *ret_ttl_ms, char *why, size_t wl)
{
	size_t words = (h->world_size + 63) / 64;
	/* What the two allocations below take, as malloc is asked. */
	uint64_t bytes = sizeof(struct lease) + (uint64_t)n * sizeof(struct block *) +
			 words * sizeof(uint64_t);
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
	l->consumers_left = h->world_size;
	l->world_size = h->world_size;
	l->nblocks = n;
	l->bytes = bytes;
	l->pinned = pinned;
	memcpy(l->blocks, blocks, n * sizeof(blocks[0]));
	/*
	 * The lease's reference, taken before the table lock: the owner's
	 * lock is never taken under it.  Dropped by lease_free(), or below.
	 */
	lt->ops.get(h);
	l->holder = h;

	pthread_mutex_lock(&lt->lock);
	up = find_uid(lt, uid);
	u = *up;
	if (h->leases >= lt->max_per_holder) {
		r = -EBUSY;
	} else if (over_bound(lt, h, u, bytes, uid, why, wl)) {
		r = -EDQUOT;
		/* Say it once per run of refusals: the engine sees each in its CQE. */
		if (h->refusing)
			why[0] = '\0';
		h->refusing = true;
	} else if (!u && !(u = calloc(1, sizeof(*u)))) {
		r = -ENOMEM;
	}
	if (r) {
		pthread_mutex_unlock(&lt->lock);
		lt->ops.put(h); /* the caller holds another */
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
	lt->bytes += bytes;
	l->uid = u;
	do {
		l->id = lt->next++;
		pp = find(lt, l->id);
	} while (l->id == 0 || *pp);
	l->expires_ns = now_ns() + lt->ttl_ns;
	l->hnext = NULL;
	*pp = l;
	cds_list_add_tail(&l->fifo, &lt->fifo);
	if (cds_list_empty(&h->list))
		cds_list_add_tail(&h->node, &lt->holders);
	cds_list_add_tail(&l->inode, &h->list);
	lt->st.live++;
	lt->st.created++;
	/*
	 * Read the id under the lock: once it is dropped the lease is the
	 * table's, and a sweep or a RELEASE (ids are guessable) may free it.
	 */
	*ret_id = l->id;
	pthread_mutex_unlock(&lt->lock);
	*ret_ttl_ms = lt->ttl_ns / NSEC_PER_MSEC;
	return 0;
}

int lease_take(struct lease_table *lt, uint64_t id, const struct lease_holder *h, uint32_t rank,
	       uint32_t n, struct lease **ret)
{
	struct lease **pp, *l;
	int r;

	pthread_mutex_lock(&lt->lock);
	r = find_held(lt, id, h, &pp);
	l = r == 0 ? *pp : NULL;
	if (l && (rank >= l->world_size || n > l->nblocks))
		r = -EINVAL; /* before the share is taken: the engine may correct its LOAD */
	else if (l && (l->loaded[rank / 64] & (1ull << (rank % 64))))
		r = -EALREADY;
	if (r == 0) {
		l->loaded[rank / 64] |= 1ull << (rank % 64);
		l->refs++; /* the LOAD's */
		if (--l->consumers_left == 0) {
			unlink_locked(lt, pp); /* the LOAD's ref keeps it */
			lt->st.consumed++;
		}
		*ret = l;
	}
	pthread_mutex_unlock(&lt->lock);
	return r;
}

void lease_put(struct lease_table *lt, struct lease *l)
{
	bool last;

	pthread_mutex_lock(&lt->lock);
	last = --l->refs == 0;
	if (last)
		uncount_locked(lt, l);
	pthread_mutex_unlock(&lt->lock);
	if (last)
		lease_free(lt, l);
}

int lease_release(struct lease_table *lt, uint64_t id, const struct lease_holder *h)
{
	struct lease **pp, *l = NULL;
	bool last = false;
	int r;

	pthread_mutex_lock(&lt->lock);
	r = find_held(lt, id, h, &pp);
	if (r == 0) {
		l = *pp;
		last = unlink_locked(lt, pp);
		lt->st.released++;
	}
	pthread_mutex_unlock(&lt->lock);
	if (last)
		lease_free(lt, l);
	return r;
}

/* What to drop: expired leases (by FIFO order) or a session's leases. */
struct drop_filter {
	uint64_t now;	  /* expire when expires_ns <= now; 0: not this */
	uint64_t creator; /* drop leases of this session; 0: not this */
};

static unsigned drop_where(struct lease_table *lt, const struct drop_filter *f, uint64_t *counter)
{
	struct lease *l, *tmp, *dead = NULL;
	unsigned n = 0;

	pthread_mutex_lock(&lt->lock);
	cds_list_for_each_entry_safe(l, tmp, &lt->fifo, fifo) {
		if (f->now && l->expires_ns > f->now)
			break; /* sorted by expiry: the rest are younger */
		if (f->creator && l->creator != f->creator)
			continue;
		if (unlink_locked(lt, find(lt, l->id))) {
			l->hnext = dead; /* free outside the lock */
			dead = l;
		}
		(*counter)++;
		n++;
	}
	pthread_mutex_unlock(&lt->lock);
	while (dead) {
		l = dead;
		dead = l->hnext;
		lease_free(lt, l);
	}
	return n;
}

unsigned lease_sweep(struct lease_table *lt)
{
	struct drop_filter f = { .now = now_ns() };

	return drop_where(lt, &f, &lt->st.expired);
}

unsigned lease_drop_creator(struct lease_table *lt, uint64_t session_id)
{
	struct drop_filter f = { .creator = session_id };

	return drop_where(lt, &f, &lt->st.released);
}

/* Table lock held: the holder pinning the most, if more than @saver, and its oldest unused lease. */
static struct lease *revocable(struct lease_table *lt, const struct lease_holder *saver)
{
	struct lease_holder *h, *best = NULL;
	struct lease *l;

	cds_list_for_each_entry(h, &lt->holders, node) {
		if (h == saver || h->pinned <= saver->pinned)
			continue;
		if (best && h->pinned <= best->pinned)
			continue;
		/* A lease a LOAD copies from (refs > 1) would not unpin before it ends. */
		cds_list_for_each_entry(l, &h->list, inode) {
			if (l->refs == 1) {
				best = h;
				break;
			}
		}
	}
	if (!best)
		return NULL;
	cds_list_for_each_entry(l, &best->list, inode)
		if (l->refs == 1)
			return l;
	return NULL;
}

unsigned lease_revoke_for(struct lease_table *lt, const struct lease_holder *saver, uint64_t need)
{
	struct lease *l, *dead = NULL;
	uint64_t freed = 0;
	unsigned n = 0;
	char victim[KVS_NAME_MAX] = "";
	bool several = false;

	pthread_mutex_lock(&lt->lock);
	while (freed < need && (l = revocable(lt, saver))) {
		/* Names are copied: the holder may go with its last lease. */
		several |= victim[0] && strcmp(victim, l->holder->name) != 0;
		snprintf(victim, sizeof(victim), "%s", l->holder->name);
		freed += l->pinned;
		if (unlink_locked(lt, find(lt, l->id))) {
			l->hnext = dead; /* free outside the lock */
			dead = l;
		}
		lt->st.released++;
		n++;
	}
	pthread_mutex_unlock(&lt->lock);
	while (dead) {
		l = dead;
		dead = l->hnext;
		lease_free(lt, l);
	}
	if (n)
		log_info("revoked %u leases of instance %s%s (%" PRIu64 " pinned bytes): a SAVE of "
			 "instance %s found nothing to evict",
			 n, several ? "and others, last " : "", victim, freed, saver->name);
	return n;
}

void lease_get_stats(struct lease_table *lt, struct lease_stats *ret)
{
	pthread_mutex_lock(&lt->lock);
	*ret = lt->st;
	pthread_mutex_unlock(&lt->lock);
}

void lease_table_free(struct lease_table *lt)
{
	struct lease *l, *tmp;

	if (!lt)
		return;
	cds_list_for_each_entry_safe(l, tmp, &lt->fifo, fifo) {
		if (unlink_locked(lt, find(lt, l->id)))
			lease_free(lt, l);
	}
	pthread_mutex_destroy(&lt->lock);
	free(lt);
}
