/* SPDX-License-Identifier: MIT */
/*
 * Leases: a QUERY with hits pins the hit blocks under a lease, so they
 * cannot be evicted before the instance's ranks load them.  A lease is
 * scoped to one instance, has world_size consumers (one LOAD per rank)
 * and a TTL swept by the control thread.
 *
 * The table is a handle (struct lease_table), made with the bounds it
 * enforces; it knows an instance only as its struct lease_holder, which
 * the instance embeds (control/instance.h), and keeps a holder alive
 * through the ops it was made with (the instance's reference count).
 *
 * Lifetime: the table holds one reference while the lease is live; each
 * LOAD in progress holds one more.  The blocks are unpinned when the last
 * reference goes, so a load that is still copying keeps its blocks even
 * after the lease expired or was consumed by the other ranks.
 *
 * Memory: a lease of n blocks costs about 8 n bytes (65536 keys: 512
 * KiB), and [lease] max_leases alone let one instance hold 2 GiB.  What
 * live leases take is bounded per instance, per uid (the creating
 * session's) and for all of them ([lease] memory_per_instance,
 * memory_per_uid, memory); a QUERY past a bound is -EDQUOT and pins
 * nothing.  The bytes are counted under the table lock from the lease's
 * creation until its last reference goes, wherever that happens (an I/O
 * worker's LOAD or RELEASE, the control thread's sweep or session end).
 *
 * Pins: each lease also counts the pool bytes of its blocks against its
 * instance ("pinned", a block under two leases twice).  When a SAVE finds
 * nothing to evict, lease_revoke_for() drops the oldest unused leases of
 * the instance pinning the most, if that is more than the saver's own.
 *
 * Locking: one mutex per table guards it and all of the counts above;
 * leases are created and consumed at operation (not block) rate.  It is
 * never held with the store lock, nor with the holders' owners' locks
 * (ops->get() is called before it is taken, ops->put() after).
 */
#ifndef KVS_LEASE_H
#define KVS_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <urcu/list.h>

struct block;
struct lease_holder;
struct lease_table;
struct lease_uid;

struct lease {
	uint64_t id;
	struct lease_holder *holder; /* kept alive: the table's ops->get() */
	uint64_t creator;      /* session id */
	uint64_t expires_ns;
	uint32_t refs;
	uint32_t consumers_left;
	uint32_t nblocks;
	uint32_t world_size;
	uint64_t bytes;		     /* its memory, as counted against the bounds */
	uint64_t pinned;	     /* pool bytes of its blocks */
	struct lease_uid *uid;	     /* the uid counted for it */
	struct lease *hnext;	     /* hash chain */
	struct cds_list_head fifo;   /* by expiry (a fixed TTL keeps it sorted) */
	struct cds_list_head inode;  /* in its instance's list while in the table */
	uint64_t *loaded;	     /* bitmap: ranks that took their LOAD */
	struct block *blocks[];
};

struct lease_stats {
	uint64_t live;
	uint64_t created;
	uint64_t expired;
	uint64_t released;
	uint64_t consumed;
};

/*
 * An instance's part of the table (in struct instance; lease lock but
 * the two set by lease_holder_init(), which do not change).
 */
struct lease_holder {
	const char *name;	   /* the instance's, for logs: lives as long as the holder */
	uint32_t world_size;	   /* consumers of each lease: one LOAD per rank */
	uint32_t leases;	   /* live leases */
	uint64_t bytes;		   /* their memory */
	uint64_t pinned;	   /* pool bytes their blocks hold */
	struct cds_list_head list; /* its leases in the table, oldest first */
	struct cds_list_head node; /* in the table's holders while list is not empty */
	bool refusing;		   /* the last QUERY was refused for memory */
};

void lease_holder_init(struct lease_holder *h, const char *name, uint32_t world_size);

/*
 * How the table keeps a holder alive while one of its leases lives: the
 * owner's reference count (instance_get()/instance_put()).  get() is
 * called before the table lock is taken, put() after it was let go, from
 * whichever thread drops a lease's last reference.
 */
struct lease_holder_ops {
	void (*get)(struct lease_holder *h);
	void (*put)(struct lease_holder *h);
};

/* What a table enforces ([lease] in the configuration). */
struct lease_params {
	uint32_t ttl_ms;
	uint32_t max_per_holder;   /* live leases of one holder: -EBUSY past it */
	uint64_t max_bytes_holder; /* their memory, per holder: -EDQUOT past it */
	uint64_t max_bytes_uid;	   /* per uid of the creating session */
	uint64_t max_bytes;	   /* all live leases together */
	const struct lease_holder_ops *ops;
};

int lease_table_new(const struct lease_params *p, struct lease_table **ret);
/* Drop every lease left (unpinning its blocks), then the table.  NULL is fine. */
void lease_table_free(struct lease_table *lt);

/*
 * A lease over @blocks (already pinned; the lease takes the pins over),
 * which hold @pinned pool bytes, for a session of uid @uid.  -EBUSY when
 * the instance has max_leases live, -EDQUOT past a memory bound (the
 * caller unpins).  With -EDQUOT, @why gets which bound, but only for the
 * first refusal since the instance's last lease (for a log line that a
 * QUERY loop cannot repeat); else it is left empty.
 */
int lease_create(struct lease_table *lt, struct lease_holder *h, uint64_t creator, uid_t uid,
		 struct block **blocks, uint32_t n, uint64_t pinned, uint64_t *ret_id,
		 uint64_t *ret_ttl_ms, char *why, size_t wl);

/*
 * Take rank @rank's share for a LOAD of @n blocks.  -ENOENT unknown/
 * expired/consumed, -EACCES another holder's, -EINVAL more blocks than
 * the lease has, -EALREADY this rank loaded already: all checked before
 * the share is spent, so a refused LOAD can be corrected.  On success
 * the caller holds a reference: lease_put() after the copy.
 */
int lease_take(struct lease_table *lt, uint64_t id, const struct lease_holder *h, uint32_t rank,
	       uint32_t n, struct lease **ret);
void lease_put(struct lease_table *lt, struct lease *l);

/* RELEASE: -ENOENT / -EACCES as above. */
int lease_release(struct lease_table *lt, uint64_t id, const struct lease_holder *h);

/* Expire leases past their TTL; returns how many. */
unsigned lease_sweep(struct lease_table *lt);

/* Drop every lease a session created (its death). */
unsigned lease_drop_creator(struct lease_table *lt, uint64_t session_id);

/*
 * A SAVE of @saver found nothing to evict: revoke the oldest leases no
 * LOAD is using of the instance pinning the most pool bytes, while that
 * is more than @saver pins, until @need bytes were unpinned or nothing
 * is left to revoke.  Logs what went; returns how many leases.  Without
 * the store lock.
 */
unsigned lease_revoke_for(struct lease_table *lt, const struct lease_holder *saver, uint64_t need);

void lease_get_stats(struct lease_table *lt, struct lease_stats *ret);

#endif /* KVS_LEASE_H */
