/* SPDX-License-Identifier: MIT */
/*
 * Namespaces: a string naming model, dtype and layout.  Blocks are stored
 * per (namespace, key, shard); the first registration in a namespace fixes
 * its block geometry, and a different one is refused, so two layouts never
 * share blocks.
 *
 * Locking: the table lock guards lookup/creation and the geometry; the
 * counters are atomics.  A namespace is freed by nspace_sweep() (control
 * thread) once no session and no block refers to it.
 *
 * Slots: [session] max_namespaces bound the table.  When it is full, a
 * new namespace takes the slot of the one idle longest (no session since
 * the longest time): its blocks are dropped (nobody could reach them but
 * a session of that namespace), then it is freed.  Without that, blocks
 * kept their namespace alive until evicted, and on an idle pool nothing
 * is evicted: short sessions filled the table for ever.
 */
#ifndef KVS_NSPACE_H
#define KVS_NSPACE_H

#include <stdbool.h>
#include <stdint.h>

#include <urcu/list.h>

#include <kvstash/wire.h>

struct layout;

struct nspace {
	uint32_t id; /* part of every index key; never reused while alive */
	char name[KVS_NS_MAX];
	uint32_t sessions; /* atomic */
	uint64_t blocks;   /* atomic: blocks (resident or partial) */
	uint64_t idle_since;		   /* atomic (relaxed): when sessions last fell to 0 */
	struct cds_list_head store_blocks; /* its blocks (store lock, store.c) */
	/* geometry, set by the first registration (table lock) */
	bool has_geometry;
	uint64_t fingerprint;
	uint64_t slot_bytes;
	uint32_t tp_size;
	bool replicated;
	struct cds_list_head node;
};

/*
 * @drop empties a namespace with no session of its blocks, for a slot
 * (store_drop_nspace()); called without the table lock.
 */
int nspace_table_init(uint32_t max, unsigned (*drop)(struct nspace *ns));
void nspace_table_fini(void);

/*
 * Find or create, taking a session reference.  At the limit, reclaims
 * the slot of the namespace idle longest; -EUSERS when every namespace
 * has a session.  Control thread only (as every session reference is
 * taken there: an idle namespace stays idle while it is reclaimed).
 */
int nspace_get(const char *name, struct nspace **ret);
void nspace_put(struct nspace *ns);

/*
 * Check @lay (of a session of tp_size @tp_size) against the namespace's
 * geometry, adopting it if it has none.  -EXDEV with a reason on mismatch.
 * *@ret_first is true when this call set the geometry.
 */
int nspace_adopt(struct nspace *ns, const struct layout *lay, uint32_t tp_size, char *why,
		 size_t wl, bool *ret_first);

/* Free namespaces nobody uses; returns how many. */
unsigned nspace_sweep(void);

/* Shards a block of this namespace has. */
static inline uint32_t nspace_shards(const struct nspace *ns)
{
	return ns->replicated ? 1 : ns->tp_size;
}

#endif /* KVS_NSPACE_H */
