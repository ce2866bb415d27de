/* SPDX-License-Identifier: MIT */
/*
 * Namespaces: a string naming model, dtype and layout.  Blocks are stored
 * per (namespace, key, shard); the first registration in a namespace fixes
 * its block geometry, and a different one is refused, so two layouts never
 * share blocks.
 *
 * The table is a handle (struct nspace_table).  Each namespace embeds
 * what the store knows of it (struct store_ns: its id and its blocks).
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

#include "store/store.h"

struct layout;
struct nspace_table;

struct nspace {
	/* Its id (part of every index key; never reused while alive) and blocks. */
	struct store_ns in_store;
	struct nspace_table *tab;
	char name[KVS_NS_MAX];
	uint32_t sessions;   /* atomic */
	uint64_t idle_since; /* atomic (relaxed): when sessions last fell to 0 */
	/* geometry, set by the first registration (table lock) */
	bool has_geometry;
	uint64_t fingerprint;
	uint64_t slot_bytes;
	uint32_t tp_size;
	bool replicated;
	struct cds_list_head node;
};

/*
 * A table of at most @max namespaces.  @drop(@arg, ns) empties a
 * namespace with no session of its blocks, for a slot (in every tier:
 * store_drop_nspace()), and returns how many went; called without the
 * table lock.  NULL: nothing to drop.
 */
int nspace_table_new(uint32_t max, unsigned (*drop)(void *arg, struct nspace *ns), void *arg,
		     struct nspace_table **ret);
/* Free the table and every namespace left.  NULL is fine. */
void nspace_table_free(struct nspace_table *tab);

/*
 * Find or create, taking a session reference.  At the limit, reclaims
 * the slot of the namespace idle longest; -EUSERS when every namespace
 * has a session.  Control thread only (as every session reference is
 * taken there: an idle namespace stays idle while it is reclaimed).
 */
int nspace_get(struct nspace_table *tab, const char *name, struct nspace **ret);
void nspace_put(struct nspace *ns);

/*
 * Check @lay (of a session of tp_size @tp_size) against the namespace's
 * geometry, adopting it if it has none.  -EXDEV with a reason on mismatch.
 * *@ret_first is true when this call set the geometry.
 */
/*
 * Run @fn(@arg, ns) on the namespace whose registry digest (its tag) is
 * @tag, with the table lock held: nspace_sweep() cannot free it meanwhile,
 * so @fn may pin its blocks, which then keep it alive.  Any thread.
 * @fn's return value, or -ENOENT when no namespace has that tag.
 */
int nspace_with_tag(struct nspace_table *tab, const uint8_t tag[KVS_KEY_SIZE],
		    int (*fn)(void *arg, struct nspace *ns), void *arg);

int nspace_adopt(struct nspace *ns, const struct layout *lay, uint32_t tp_size, char *why,
		 size_t wl, bool *ret_first);

/* Free namespaces nobody uses; returns how many. */
unsigned nspace_sweep(struct nspace_table *tab);

#endif /* KVS_NSPACE_H */
