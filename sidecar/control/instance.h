/* SPDX-License-Identifier: MIT */
/*
 * Instances: the ranks of one engine instance (its tp_size worker
 * sessions, plus any scheduler sessions) under one name.  An instance is
 * sealed once all world_size ranks have registered; data operations need
 * a sealed instance.  Leases are scoped to an instance.
 *
 * The table is a handle (struct instance_table), made over the store
 * whose tenants its instances are.  Each instance embeds what the store
 * and the lease table know of it: its tenant account (store.h) and its
 * lease holder (lease.h), whose ops are instance_lease_ops.
 *
 * Locking: the table lock guards membership and registration counts (the
 * control thread changes them); `sealed` is read by I/O workers with
 * load-acquire.  References: sessions and leases; the last put frees.
 */
#ifndef KVS_INSTANCE_H
#define KVS_INSTANCE_H

#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>

#include <urcu/list.h>

#include <kvstash/wire.h>

#include "io/saveorder.h"
#include "store/lease.h"

struct instance_table;
struct registry_tally;
struct session;
struct store;
struct store_tenant;
struct nspace;

struct instance {
	struct instance_table *tab;
	uint32_t id; /* scopes leases; a recreated instance gets a new id */
	char name[KVS_NAME_MAX];
	struct nspace *ns;
	uint32_t tp_size;
	uint32_t world_size;
	uint32_t refs;	     /* table lock */
	uint32_t registered; /* ranks with memory registered */
	struct lease_holder lh;	     /* its leases: lease.c's, under the lease lock */
	struct store_tenant *tenant; /* its account in the store (store.h) */
	uint8_t sealed;	     /* release/acquire: see instance_register() */
	uint64_t fingerprint;
	struct session **ranks; /* worker session per tp rank */
	struct cds_list_head sessions; /* all sessions, schedulers too */
	struct cds_list_head node;
	/* SAVEs in flight in the whole instance, oldest first: FLUSH_INSTANCE */
	struct save_order saves;
	/*
	 * The registry's count of the instance's registrations, shared by its
	 * sessions that connected with KVS_CONNECT_CLUSTER (reg_users of
	 * them): control/cluster.c, on the control thread.
	 */
	struct registry_tally *reg_tally;
	uint32_t reg_users;
};

/* A table whose instances are tenants of @store. */
int instance_table_new(struct store *store, struct instance_table **ret);
/* After the last instance went (sessions and leases hold them).  NULL is fine. */
void instance_table_free(struct instance_table *tab);

/* The lease table's way to hold an instance (instance_get()/instance_put()). */
extern const struct lease_holder_ops instance_lease_ops;

/*
 * Join (creating if needed) instance @s->hello.instance.  Workers take
 * their rank's place: -EADDRINUSE if taken; the namespace, tp_size and
 * world_size must match the instance's (-EXDEV).  Returns a reference.
 */
int instance_join(struct instance_table *tab, struct session *s, char *why, size_t wl,
		  struct instance **ret);
void instance_leave(struct session *s);

/*
 * A rank registered / unregistered.  Registration checks the geometry
 * fingerprint against the other ranks' (-EXDEV).  Returns 1 when the
 * instance just became sealed.
 */
int instance_register(struct instance *inst, uint64_t fingerprint, char *why, size_t wl);
void instance_unregister(struct instance *inst);

void instance_get(struct instance *inst);
void instance_put(struct instance *inst);

static inline bool instance_sealed(const struct instance *inst)
{
	/* Pairs with the store-release in instance_register(). */
	return __atomic_load_n(&inst->sealed, __ATOMIC_ACQUIRE);
}

unsigned instance_count(struct instance_table *tab);

#endif /* KVS_INSTANCE_H */
