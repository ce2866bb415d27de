/* SPDX-License-Identifier: MIT */
/*
 * Instances (sidecar/control/instance.c), as a table handle over a store,
 * with sessions made by hand (only what instance.c reads of them):
 *   - join: one instance per name, each worker rank once, schedulers
 *     beside them; a session that differs in namespace, tp_size or
 *     world_size is refused, and a refused session leaves no trace;
 *     leave frees the rank, the last reference the instance;
 *   - seal: sealed once every rank registered one geometry, unsealed by
 *     an unregister; another geometry is refused;
 *   - what the store and the lease table know of an instance: its
 *     tenant (with its lease holder) and the holder's ops, which keep it
 *     alive after its sessions left, as a lease does;
 *   - the SAVE marks of FLUSH with KVS_FLUSH_INSTANCE.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/instance.h"
#include "control/nspace.h"
#include "control/session.h"
#include "storetest.h"
#include "unit.h"

static struct pool *pool;
static struct store *st;
static struct nspace_table *nst;
static struct instance_table *tab;
static uint64_t next_id;

static void setup(void)
{
	st_setup();
	pool = st_pool_new();
	st = st_store_new(pool, 100, NULL);
	ck_assert_int_eq(nspace_table_new(8, NULL, NULL, &nst), 0);
	ck_assert_int_eq(instance_table_new(st, &tab), 0);
}

static void teardown(void)
{
	ck_assert_uint_eq(instance_count(tab), 0);
	instance_table_free(tab);
	/* As the daemon does: the store's blocks go before their namespaces. */
	store_free(st);
	nspace_table_free(nst);
	pool_destroy(pool);
	st_teardown();
}

/* A session of instance @inst in namespace @ns, as HELLO leaves it (with its namespace reference). */
static struct session *sess(const char *inst, const char *ns, uint32_t role, uint32_t rank,
			    uint32_t tp, uint32_t world)
{
	struct session *s = calloc(1, sizeof(*s));

	ck_assert_ptr_nonnull(s);
	s->id = ++next_id;
	s->hello.role = role;
	s->hello.tp_rank = rank;
	s->hello.tp_size = tp;
	s->hello.world_size = world;
	snprintf(s->hello.instance, sizeof(s->hello.instance), "%s", inst);
	snprintf(s->hello.ns, sizeof(s->hello.ns), "%s", ns);
	CDS_INIT_LIST_HEAD(&s->inst_node);
	ck_assert_int_eq(nspace_get(nst, ns, &s->ns), 0);
	return s;
}

static int join(struct session *s, char *why)
{
	char buf[256];

	return instance_join(tab, s, why ? why : buf, 256, &s->inst);
}

/* As session_free() does. */
static void end(struct session *s)
{
	instance_leave(s);
	ck_assert_ptr_null(s->inst);
	nspace_put(s->ns);
	free(s);
}

/* ---- join and leave --------------------------------------------------------- */

/* Sessions of instance "a" (tp 2, world 2, namespace m) that are refused. */
static const struct refusal {
	const char *ns;
	uint32_t role, rank, tp, world;
	int res;
	const char *why;
} refusals[] = {
	{ "m", KVS_ROLE_WORKER, 0, 2, 2, -EADDRINUSE, "rank 0 of instance a is already connected" },
	{ "m", KVS_ROLE_WORKER, 1, 4, 4, -EXDEV, "instance a has namespace m, tp_size 2" },
	{ "m", KVS_ROLE_WORKER, 1, 2, 3, -EXDEV, "world_size 2: this session differs" },
	{ "other", KVS_ROLE_WORKER, 1, 2, 2, -EXDEV, "instance a has namespace m" },
	{ "other", KVS_ROLE_SCHEDULER, 0, 2, 2, -EXDEV, "instance a has namespace m" },
};

START_TEST(test_join_refused)
{
	const struct refusal *c = &refusals[_i];
	struct session *w0 = sess("a", "m", KVS_ROLE_WORKER, 0, 2, 2);
	struct session *x = sess("a", c->ns, c->role, c->rank, c->tp, c->world);
	struct session *w1;
	char why[256] = "";

	ck_assert_int_eq(join(w0, NULL), 0);
	ck_assert_uint_eq(w0->inst->refs, 1);
	ck_assert_int_eq(join(x, why), c->res);
	ck_assert_msg(strstr(why, c->why), "why: %s", why);
	ck_assert_ptr_null(x->inst);
	/* No trace: the same references, and rank 1 is still free. */
	ck_assert_uint_eq(w0->inst->refs, 1);
	ck_assert_uint_eq(instance_count(tab), 1);
	w1 = sess("a", "m", KVS_ROLE_WORKER, 1, 2, 2);
	ck_assert_int_eq(join(w1, NULL), 0);
	ck_assert_ptr_eq(w1->inst, w0->inst);
	end(x);
	end(w1);
	end(w0);
}
END_TEST

START_TEST(test_join_leave)
{
	struct session *w0 = sess("a", "m", KVS_ROLE_WORKER, 0, 2, 2);
	struct session *w1 = sess("a", "m", KVS_ROLE_WORKER, 1, 2, 2);
	struct session *sch = sess("a", "m", KVS_ROLE_SCHEDULER, 0, 2, 2);
	struct session *b = sess("b", "m", KVS_ROLE_WORKER, 0, 1, 1);
	struct session *again;
	struct instance *inst;

	ck_assert_int_eq(join(w0, NULL), 0);
	inst = w0->inst;
	ck_assert_str_eq(inst->name, "a");
	ck_assert_ptr_eq(inst->tab, tab);
	ck_assert_ptr_eq(inst->ns, w0->ns);
	ck_assert_uint_eq(inst->tp_size, 2);
	ck_assert_uint_eq(inst->world_size, 2);
	ck_assert_ptr_eq(inst->ranks[0], w0);
	ck_assert(!instance_sealed(inst));
	/* The instance holds its namespace as a session does. */
	ck_assert_uint_eq(w0->ns->sessions, 4 + 1);
	ck_assert_int_eq(join(w1, NULL), 0);
	ck_assert_int_eq(join(sch, NULL), 0); /* a scheduler takes no rank */
	ck_assert_ptr_eq(w1->inst, inst);
	ck_assert_ptr_eq(sch->inst, inst);
	ck_assert_ptr_eq(inst->ranks[1], w1);
	ck_assert_uint_eq(inst->refs, 3);
	ck_assert_int_eq(join(b, NULL), 0);
	ck_assert_ptr_ne(b->inst, inst);
	ck_assert_uint_ne(b->inst->id, inst->id);
	ck_assert_uint_eq(instance_count(tab), 2);

	/* Leaving frees the rank for the next session of it. */
	end(w0);
	ck_assert_ptr_null(inst->ranks[0]);
	ck_assert_uint_eq(inst->refs, 2);
	again = sess("a", "m", KVS_ROLE_WORKER, 0, 2, 2);
	ck_assert_int_eq(join(again, NULL), 0);
	ck_assert_ptr_eq(again->inst, inst);
	end(again);
	end(w1);
	end(sch);
	/* The last one gone, so is the instance; a new one of the name is a new instance. */
	ck_assert_uint_eq(instance_count(tab), 1);
	again = sess("a", "m", KVS_ROLE_WORKER, 0, 1, 1);
	ck_assert_int_eq(join(again, NULL), 0); /* other tp_size: no old instance in the way */
	ck_assert_uint_eq(instance_count(tab), 2);
	end(again);
	end(b);
	ck_assert_uint_eq(nspace_sweep(nst), 1);
}
END_TEST

/* ---- seal -------------------------------------------------------------------------------- */

START_TEST(test_seal)
{
	struct session *w0 = sess("a", "m", KVS_ROLE_WORKER, 0, 2, 2);
	struct session *w1 = sess("a", "m", KVS_ROLE_WORKER, 1, 2, 2);
	struct instance *inst;
	char why[256] = "";

	ck_assert_int_eq(join(w0, NULL), 0);
	ck_assert_int_eq(join(w1, NULL), 0);
	inst = w0->inst;
	ck_assert_int_eq(instance_register(inst, 42, why, sizeof(why)), 0);
	ck_assert(!instance_sealed(inst));
	ck_assert_int_eq(instance_register(inst, 43, why, sizeof(why)), -EXDEV);
	ck_assert_msg(strstr(why, "layout differs from the other ranks of instance a"), "why: %s",
		      why);
	ck_assert(!instance_sealed(inst));
	ck_assert_int_eq(instance_register(inst, 42, why, sizeof(why)), 1);
	ck_assert(instance_sealed(inst));
	ck_assert_uint_eq(inst->registered, 2);
	/* One rank unregisters: no new data operation until it is back. */
	instance_unregister(inst);
	ck_assert(!instance_sealed(inst));
	ck_assert_uint_eq(inst->registered, 1);
	ck_assert_int_eq(instance_register(inst, 42, why, sizeof(why)), 1);
	ck_assert(instance_sealed(inst));
	instance_unregister(inst);
	instance_unregister(inst);
	instance_unregister(inst); /* nothing registered: stays at 0 */
	ck_assert_uint_eq(inst->registered, 0);
	/* With nothing registered, any geometry may come first. */
	ck_assert_int_eq(instance_register(inst, 7, why, sizeof(why)), 0);
	end(w0);
	end(w1);
}
END_TEST

/* ---- what the store and the lease table know of it ------------------------------------------- */

START_TEST(test_tenant_and_holder)
{
	struct session *w0 = sess("a", "m", KVS_ROLE_WORKER, 0, 1, 3);
	struct store_place p = st_place(st, ST_SLOT, 0, 2);
	struct instance *inst;

	ck_assert_int_eq(join(w0, NULL), 0);
	inst = w0->inst;
	ck_assert_ptr_nonnull(inst->tenant);
	ck_assert_ptr_eq(inst->tenant->st, st);
	ck_assert_ptr_eq(inst->tenant->leases, &inst->lh);
	ck_assert_str_eq(inst->tenant->name, "a");
	ck_assert_str_eq(inst->lh.name, "a");
	ck_assert_uint_eq(inst->lh.world_size, 3);
	/* A partial block charged to it, then its session goes... */
	ck_assert_uint_eq(st_save(st, inst->tenant, &w0->ns->in_store, &p, 0, 4), 4);
	ck_assert_uint_eq(inst->tenant->unsealed, 4 * ST_SLOT);
	/* ... but a lease's reference keeps it. */
	instance_lease_ops.get(&inst->lh);
	ck_assert_uint_eq(inst->refs, 2);
	instance_leave(w0);
	ck_assert_uint_eq(instance_count(tab), 1);
	ck_assert_uint_eq(inst->refs, 1);
	instance_lease_ops.put(&inst->lh);
	ck_assert_uint_eq(instance_count(tab), 0);
	/* The account outlives it until its partial blocks go. */
	ck_assert_uint_eq(store_reclaim_partial(st, 0), 4);
	nspace_put(w0->ns);
	free(w0);
}
END_TEST

/* A real lease table on instances: a lease keeps its instance, and gives it back. */
START_TEST(test_lease_keeps_instance)
{
	const struct lease_params lp = { .ttl_ms = 600000,
					 .max_per_holder = 4,
					 .max_bytes_holder = 1 << 20,
					 .max_bytes_uid = 1 << 20,
					 .max_bytes = 1 << 20,
					 .ops = &instance_lease_ops };
	struct session *w0 = sess("a", "m", KVS_ROLE_WORKER, 0, 1, 1);
	struct block *blk = calloc(1, sizeof(*blk));
	struct lease_table *lt;
	uint64_t id, ttl;
	char why[256];

	ck_assert_int_eq(lease_table_new(&lp, &lt), 0);
	ck_assert_int_eq(join(w0, NULL), 0);
	blk->pins = 1;
	ck_assert_int_eq(lease_create(lt, &w0->inst->lh, w0->id, 0, &blk, 1, ST_SLOT, &id, &ttl,
				      why, sizeof(why)),
			 0);
	instance_leave(w0);
	ck_assert_uint_eq(instance_count(tab), 1);
	ck_assert_uint_eq(lease_drop_creator(lt, w0->id), 1);
	ck_assert_uint_eq(instance_count(tab), 0);
	ck_assert_int_eq(blk->pins, 0);
	lease_table_free(lt);
	nspace_put(w0->ns);
	free(w0);
	free(blk);
}
END_TEST

/* ---- SAVE marks --------------------------------------------------------------------------------- */

START_TEST(test_save_marks)
{
	struct session *w0 = sess("a", "m", KVS_ROLE_WORKER, 0, 1, 1);
	struct save_mark m1, m2;
	struct instance *inst;
	uint64_t mark;

	ck_assert_int_eq(join(w0, NULL), 0);
	inst = w0->inst;
	ck_assert(save_order_done_before(&inst->saves, save_order_mark(&inst->saves)));
	save_order_enter(&inst->saves, &m1);
	save_order_enter(&inst->saves, &m2);
	mark = save_order_mark(&inst->saves);
	ck_assert_uint_eq(mark, m2.seq + 1);
	ck_assert(!save_order_done_before(&inst->saves, m2.seq));
	/* The older one done: a flush up to the newer is. */
	save_order_leave(&inst->saves, &m1);
	ck_assert(save_order_done_before(&inst->saves, m2.seq));
	ck_assert(!save_order_done_before(&inst->saves, mark));
	save_order_leave(&inst->saves, &m2);
	ck_assert(save_order_done_before(&inst->saves, mark));
	end(w0);
}
END_TEST

static void add_tests(TCase *tc)
{
	tcase_add_loop_test(tc, test_join_refused, 0, ST_CASES(refusals));
	tcase_add_test(tc, test_join_leave);
	tcase_add_test(tc, test_seal);
	tcase_add_test(tc, test_tenant_and_holder);
	tcase_add_test(tc, test_lease_keeps_instance);
	tcase_add_test(tc, test_save_marks);
}

const struct unit_suite unit_suite = {
	.name = "instance",
	.setup = setup,
	.teardown = teardown,
	.timeout_s = 30,
	.add_tests = add_tests,
};
