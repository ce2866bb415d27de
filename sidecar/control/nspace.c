/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/layout.h"
#include "control/nspace.h"

static struct {
	pthread_mutex_t lock;
	struct cds_list_head list;
	uint32_t count, max, next_id;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER };

int nspace_table_init(uint32_t max)
{
	CDS_INIT_LIST_HEAD(&T.list);
	T.count = 0;
	T.max = max;
	T.next_id = 1;
	return 0;
}

void nspace_table_fini(void)
{
	struct nspace *ns, *tmp;

	pthread_mutex_lock(&T.lock);
	cds_list_for_each_entry_safe(ns, tmp, &T.list, node) {
		cds_list_del(&ns->node);
		free(ns);
	}
	T.count = 0;
	pthread_mutex_unlock(&T.lock);
}

int nspace_get(const char *name, struct nspace **ret)
{
	struct nspace *ns;
	int r = 0;

	pthread_mutex_lock(&T.lock);
	cds_list_for_each_entry(ns, &T.list, node) {
		if (strcmp(ns->name, name) == 0)
			goto found;
	}
	if (T.count >= T.max) {
		r = -EUSERS;
		goto out;
	}
	ns = calloc(1, sizeof(*ns));
	if (!ns) {
		r = -ENOMEM;
		goto out;
	}
	ns->id = T.next_id++;
	if (T.next_id == 0)
		T.next_id = 1;
	snprintf(ns->name, sizeof(ns->name), "%s", name);
	cds_list_add_tail(&ns->node, &T.list);
	T.count++;
found:
	__atomic_fetch_add(&ns->sessions, 1, __ATOMIC_RELAXED);
	*ret = ns;
out:
	pthread_mutex_unlock(&T.lock);
	return r;
}

void nspace_put(struct nspace *ns)
{
	if (ns)
		__atomic_fetch_sub(&ns->sessions, 1, __ATOMIC_RELAXED);
}

int nspace_adopt(struct nspace *ns, const struct layout *lay, uint32_t tp_size, char *why,
		 size_t wl, bool *ret_first)
{
	int r = 0;

	pthread_mutex_lock(&T.lock);
	*ret_first = false;
	if (!ns->has_geometry) {
		ns->has_geometry = true;
		ns->fingerprint = lay->fingerprint;
		ns->slot_bytes = lay->slot_bytes;
		ns->tp_size = tp_size;
		ns->replicated = lay->replicated;
		*ret_first = true;
	} else if (ns->fingerprint != lay->fingerprint || ns->slot_bytes != lay->slot_bytes ||
		   ns->replicated != lay->replicated || ns->tp_size != tp_size) {
		snprintf(why, wl,
			 "layout differs from namespace %s's (%" PRIu64 "-byte blocks, tp_size %u%s): "
			 "different layouts must use different namespaces",
			 ns->name, ns->slot_bytes, ns->tp_size, ns->replicated ? ", replicated" : "");
		r = -EXDEV;
	}
	pthread_mutex_unlock(&T.lock);
	return r;
}

unsigned nspace_sweep(void)
{
	struct nspace *ns, *tmp;
	unsigned n = 0;

	pthread_mutex_lock(&T.lock);
	cds_list_for_each_entry_safe(ns, tmp, &T.list, node) {
		/*
		 * Both counts only rise through a session of the namespace,
		 * which needs nspace_get() under this lock: zero here stays zero.
		 */
		if (__atomic_load_n(&ns->sessions, __ATOMIC_ACQUIRE) == 0 &&
		    __atomic_load_n(&ns->blocks, __ATOMIC_ACQUIRE) == 0) {
			cds_list_del(&ns->node);
			T.count--;
			free(ns);
			n++;
		}
	}
	pthread_mutex_unlock(&T.lock);
	return n;
}
