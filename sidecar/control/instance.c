/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/compiler.h>

#include "common/mem.h"
#include "control/instance.h"
#include "control/nspace.h"
#include "control/session.h"
#include "store/store.h"

struct instance_table {
	pthread_mutex_t lock;
	struct cds_list_head list;
	uint32_t next_id;
	unsigned count;
	struct store *store; /* whose tenants the instances are */
};

int instance_table_new(struct store *store, struct instance_table **ret)
{
	struct instance_table *tab = calloc(1, sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	pthread_mutex_init(&tab->lock, NULL);
	CDS_INIT_LIST_HEAD(&tab->list);
	tab->next_id = 1;
	tab->store = store;
	*ret = tab;
	return 0;
}

void instance_table_free(struct instance_table *tab)
{
	if (!tab)
		return;
	pthread_mutex_destroy(&tab->lock);
	free(tab);
}

unsigned instance_count(struct instance_table *tab)
{
	unsigned n;

	pthread_mutex_lock(&tab->lock);
	n = tab->count;
	pthread_mutex_unlock(&tab->lock);
	return n;
}

/*
 * Table lock held.  With the last reference, the instance is freed and
 * its store account returned, for store_tenant_put() once the table lock
 * is let go (the store lock is never taken under it); else NULL.
 */
static struct store_tenant *put_locked(struct instance *inst)
{
	struct store_tenant *t;

	if (--inst->refs)
		return NULL;
	t = inst->tenant;
	cds_list_del(&inst->node);
	inst->tab->count--;
	nspace_put(inst->ns);
	save_order_fini(&inst->saves);
	free(inst->ranks);
	free(inst);
	return t;
}

int instance_join(struct instance_table *tab, struct session *s, char *why, size_t wl,
		  struct instance **ret)
{
	const struct hello_req *h = &s->hello;
	struct store_tenant *dead = NULL;
	struct instance *inst;
	int r = 0;

	pthread_mutex_lock(&tab->lock);
	cds_list_for_each_entry(inst, &tab->list, node) {
		if (strcmp(inst->name, h->instance) == 0)
			goto found;
	}
	inst = calloc(1, sizeof(*inst));
	if (inst)
		inst->ranks = calloc(h->world_size, sizeof(*inst->ranks));
	if (inst && inst->ranks)
		inst->tenant = store_tenant_new(tab->store, h->instance, &inst->lh);
	if (!inst || !inst->ranks || !inst->tenant) {
		if (inst)
			free(inst->ranks);
		inst = mfree(inst);
		r = -ENOMEM;
		goto out;
	}
	inst->tab = tab;
	inst->id = tab->next_id++;
	snprintf(inst->name, sizeof(inst->name), "%s", h->instance);
	inst->ns = s->ns;
	inst->tp_size = h->tp_size;
	inst->world_size = h->world_size;
	lease_holder_init(&inst->lh, inst->name, inst->world_size);
	/* Hold the namespace as a session would, so the pointer stays valid. */
	__atomic_fetch_add(&s->ns->sessions, 1, __ATOMIC_RELAXED);
	CDS_INIT_LIST_HEAD(&inst->sessions);
	save_order_init(&inst->saves);
	cds_list_add_tail(&inst->node, &tab->list);
	tab->count++;
found:
	if (inst->ns != s->ns || inst->tp_size != h->tp_size ||
	    inst->world_size != h->world_size) {
		snprintf(why, wl,
			 "instance %s has namespace %s, tp_size %u, world_size %u: this session differs",
			 inst->name, inst->ns->name, inst->tp_size, inst->world_size);
		r = -EXDEV;
		goto out;
	}
	if (h->role == KVS_ROLE_WORKER) {
		if (inst->ranks[h->tp_rank]) {
			snprintf(why, wl, "rank %u of instance %s is already connected (session %llu)",
				 h->tp_rank, inst->name,
				 (unsigned long long)inst->ranks[h->tp_rank]->id);
			r = -EADDRINUSE;
			goto out;
		}
		inst->ranks[h->tp_rank] = s;
	}
	cds_list_add_tail(&s->inst_node, &inst->sessions);
	inst->refs++;
	*ret = inst;
out:
	if (r && inst && inst->refs == 0) {
		inst->refs = 1;
		dead = put_locked(inst);
	}
	pthread_mutex_unlock(&tab->lock);
	store_tenant_put(dead);
	return r;
}

void instance_leave(struct session *s)
{
	struct instance *inst = s->inst;
	struct instance_table *tab;
	struct store_tenant *dead;

	if (!inst)
		return;
	tab = inst->tab; /* put_locked() may free inst */
	pthread_mutex_lock(&tab->lock);
	if (s->hello.role == KVS_ROLE_WORKER && inst->ranks[s->hello.tp_rank] == s)
		inst->ranks[s->hello.tp_rank] = NULL;
	cds_list_del(&s->inst_node);
	s->inst = NULL;
	dead = put_locked(inst);
	pthread_mutex_unlock(&tab->lock);
	store_tenant_put(dead);
}

int instance_register(struct instance *inst, uint64_t fingerprint, char *why, size_t wl)
{
	int r = 0;

	pthread_mutex_lock(&inst->tab->lock);
	if (inst->registered && inst->fingerprint != fingerprint) {
		snprintf(why, wl, "layout differs from the other ranks of instance %s", inst->name);
		r = -EXDEV;
	} else {
		inst->fingerprint = fingerprint;
		if (++inst->registered == inst->world_size) {
			/* Pairs with the load-acquire in instance_sealed(). */
			__atomic_store_n(&inst->sealed, 1, __ATOMIC_RELEASE);
			r = 1;
		}
	}
	pthread_mutex_unlock(&inst->tab->lock);
	return r;
}

void instance_unregister(struct instance *inst)
{
	pthread_mutex_lock(&inst->tab->lock);
	if (inst->registered) {
		inst->registered--;
		__atomic_store_n(&inst->sealed, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&inst->tab->lock);
}

void instance_get(struct instance *inst)
{
	pthread_mutex_lock(&inst->tab->lock);
	inst->refs++;
	pthread_mutex_unlock(&inst->tab->lock);
}

void instance_put(struct instance *inst)
{
	struct instance_table *tab;
	struct store_tenant *dead;

	if (!inst)
		return;
	tab = inst->tab; /* put_locked() may free inst */
	pthread_mutex_lock(&tab->lock);
	dead = put_locked(inst);
	pthread_mutex_unlock(&tab->lock);
	store_tenant_put(dead);
}

static void holder_get(struct lease_holder *h)
{
	instance_get(caa_container_of(h, struct instance, lh));
}

static void holder_put(struct lease_holder *h)
{
	instance_put(caa_container_of(h, struct instance, lh));
}

const struct lease_holder_ops instance_lease_ops = { .get = holder_get, .put = holder_put };
