/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "obs/log.h"
#include "wire/layout.h"
#include "cluster/registry.h"
#include "control/nspace.h"

#define KVS_NS_TAG_LAYERS 128 /* layers digested without an allocation */

struct nspace_table {
	pthread_mutex_t lock;
	struct cds_list_head list;
	uint32_t count, max, next_id;
	unsigned (*drop)(void *arg, struct nspace *ns);
	void *drop_arg;
};

int nspace_table_new(uint32_t max, unsigned (*drop)(void *arg, struct nspace *ns), void *arg,
		     struct nspace_table **ret)
{
	struct nspace_table *tab = calloc(1, sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	pthread_mutex_init(&tab->lock, NULL);
	CDS_INIT_LIST_HEAD(&tab->list);
	tab->max = max;
	tab->next_id = 1;
	tab->drop = drop;
	tab->drop_arg = arg;
	*ret = tab;
	return 0;
}

/* Table lock held.  Both counts zero: nothing refers to @ns, free it. */
static bool free_if_unused(struct nspace_table *tab, struct nspace *ns)
{
	/*
	 * Both counts only rise through a session of the namespace, which
	 * needs nspace_get() under this lock: zero here stays zero.  Acquire
	 * pairs with the release of the last block_destroy() (store.c).
	 */
	if (__atomic_load_n(&ns->sessions, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&ns->in_store.blocks, __ATOMIC_ACQUIRE))
		return false;
	cds_list_del(&ns->node);
	tab->count--;
	free(ns);
	return true;
}

/* Table lock held: the namespace without sessions idle longest, or NULL. */
static struct nspace *idlest(struct nspace_table *tab)
{
	struct nspace *ns, *best = NULL;

	cds_list_for_each_entry(ns, &tab->list, node) {
		if (__atomic_load_n(&ns->sessions, __ATOMIC_ACQUIRE))
			continue;
		if (!best || __atomic_load_n(&ns->idle_since, __ATOMIC_RELAXED) <
				     __atomic_load_n(&best->idle_since, __ATOMIC_RELAXED))
			best = ns;
	}
	return best;
}

/*
 * Table lock held, the table full: give the slot of the namespace idle
 * longest to a new one.  Its blocks are dropped with the table lock let
 * go (the store lock is never taken under it); the victim cannot go
 * meanwhile, as only nspace_sweep() frees and it runs on this (control)
 * thread too, nor get a session.  False when every namespace has one.
 */
static bool reclaim_slot(struct nspace_table *tab)
{
	struct nspace *victim = idlest(tab);
	uint64_t idle_ms;
	unsigned dropped = 0;
	char name[KVS_NS_MAX];

	if (!victim)
		return false;
	idle_ms =
		(now_ns() - __atomic_load_n(&victim->idle_since, __ATOMIC_RELAXED)) / NSEC_PER_MSEC;
	snprintf(name, sizeof(name), "%s", victim->name);
	if (tab->drop) {
		pthread_mutex_unlock(&tab->lock);
		dropped = tab->drop(tab->drop_arg, victim);
		pthread_mutex_lock(&tab->lock);
	}
	if (!free_if_unused(tab, victim))
		return false; /* cannot happen (see nspace_get()); never loop on it */
	log_info("reclaimed namespace %s (idle for %llu ms, %u blocks dropped): the table of %u "
		 "namespaces was full",
		 name, (unsigned long long)idle_ms, dropped, tab->max);
	return true;
}

void nspace_table_free(struct nspace_table *tab)
{
	struct nspace *ns, *tmp;

	if (!tab)
		return;
	cds_list_for_each_entry_safe(ns, tmp, &tab->list, node) {
		cds_list_del(&ns->node);
		free(ns);
	}
	pthread_mutex_destroy(&tab->lock);
	free(tab);
}

int nspace_get(struct nspace_table *tab, const char *name, struct nspace **ret)
{
	struct nspace *ns;
	int r = 0;

	pthread_mutex_lock(&tab->lock);
	cds_list_for_each_entry(ns, &tab->list, node) {
		if (strcmp(ns->name, name) == 0)
			goto found;
	}
	if (tab->count >= tab->max && !reclaim_slot(tab)) {
		r = -EUSERS;
		goto out;
	}
	ns = calloc(1, sizeof(*ns));
	if (!ns) {
		r = -ENOMEM;
		goto out;
	}
	store_ns_init(&ns->in_store, tab->next_id++);
	if (tab->next_id == 0)
		tab->next_id = 1;
	ns->tab = tab;
	snprintf(ns->name, sizeof(ns->name), "%s", name);
	cds_list_add_tail(&ns->node, &tab->list);
	tab->count++;
found:
	__atomic_fetch_add(&ns->sessions, 1, __ATOMIC_RELAXED);
	*ret = ns;
out:
	pthread_mutex_unlock(&tab->lock);
	return r;
}

void nspace_put(struct nspace *ns)
{
	if (!ns)
		return;
	/*
	 * The time on every put and before the decrement: once sessions is 0
	 * the control thread may free the namespace, and an instance's last
	 * put may run on an I/O worker (lease_free()), so nothing may touch
	 * it after.  The release pairs with the load-acquire of sessions in
	 * idlest(): whoever sees no session sees when the last one left.
	 */
	__atomic_store_n(&ns->idle_since, now_ns(), __ATOMIC_RELAXED);
	__atomic_fetch_sub(&ns->sessions, 1, __ATOMIC_RELEASE);
}

/*
 * The namespace's identity across nodes: the registry's digest of its name
 * and geometry, so that nodes match blocks only when both are the same.
 * Set before the first registration is published to a worker (the
 * caller's store-release of the registration orders it before every SAVE).
 * Without the cluster compiled in there is no digest: the namespace stays
 * untagged and the store reports none of its blocks.
 */
static void tag(struct nspace *ns, const struct layout *lay, uint32_t tp_size)
{
	struct nsdigest_layer geom[KVS_NS_TAG_LAYERS];
	struct nsdigest_layer *g = geom;
	struct nsdigest_geometry rg = {
		.ns = ns->name,
		.shards = lay->replicated ? 1 : tp_size,
		.tp_size = tp_size,
		.replicated = lay->replicated,
		.nr_layers = lay->nr_layers,
	};

	if (lay->nr_layers > KVS_NS_TAG_LAYERS && !(g = calloc(lay->nr_layers, sizeof(*g))))
		return; /* untagged: its blocks are not registered, nothing else changes */
	for (uint32_t i = 0; i < lay->nr_layers; i++)
		g[i] = (struct nsdigest_layer){ lay->layers[i].segments,
						     lay->layers[i].segment_bytes };
	rg.layers = g;
	ns->in_store.tagged = registry_digest(&rg, ns->in_store.tag) == 0;
	if (g != geom)
		free(g);
}

int nspace_adopt(struct nspace *ns, const struct layout *lay, uint32_t tp_size, char *why,
		 size_t wl, bool *ret_first)
{
	int r = 0;

	pthread_mutex_lock(&ns->tab->lock);
	*ret_first = false;
	if (!ns->has_geometry) {
		ns->has_geometry = true;
		ns->fingerprint = lay->fingerprint;
		ns->slot_bytes = lay->slot_bytes;
		ns->tp_size = tp_size;
		ns->replicated = lay->replicated;
		tag(ns, lay, tp_size);
		*ret_first = true;
	} else if (ns->fingerprint != lay->fingerprint || ns->slot_bytes != lay->slot_bytes ||
		   ns->replicated != lay->replicated || ns->tp_size != tp_size) {
		snprintf(why, wl,
			 "layout differs from namespace %s's (%" PRIu64 "-byte blocks, tp_size %u%s): "
			 "different layouts must use different namespaces",
			 ns->name, ns->slot_bytes, ns->tp_size, ns->replicated ? ", replicated" : "");
		r = -EXDEV;
	}
	pthread_mutex_unlock(&ns->tab->lock);
	return r;
}

int nspace_with_tag(struct nspace_table *tab, const uint8_t tag[KVS_KEY_SIZE],
		    int (*fn)(void *arg, struct nspace *ns), void *arg)
{
	struct nspace *ns;
	int r = -ENOENT;

	pthread_mutex_lock(&tab->lock);
	cds_list_for_each_entry(ns, &tab->list, node) {
		/* The tag is set with the geometry, both under this lock (nspace_adopt()). */
		if (ns->has_geometry && ns->in_store.tagged &&
		    memcmp(ns->in_store.tag, tag, KVS_KEY_SIZE) == 0) {
			r = fn(arg, ns);
			break;
		}
	}
	pthread_mutex_unlock(&tab->lock);
	return r;
}

unsigned nspace_sweep(struct nspace_table *tab)
{
	struct nspace *ns, *tmp;
	unsigned n = 0;

	pthread_mutex_lock(&tab->lock);
	cds_list_for_each_entry_safe(ns, tmp, &tab->list, node)
		n += free_if_unused(tab, ns);
	pthread_mutex_unlock(&tab->lock);
	return n;
}
