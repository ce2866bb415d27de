/* SPDX-License-Identifier: MIT */
/*
 * Namespaces (sidecar/control/nspace.c), as a table handle, with their
 * blocks in a real store:
 *   - one namespace per name, each with an id of its own; the sweep
 *     frees those with neither a session nor a block, and a freed name
 *     comes back as a new namespace (a new id);
 *   - geometry: the first registration sets it, a different one in any
 *     of its parts is refused;
 *   - slots: with the table full, a new name takes the slot of the
 *     namespace idle longest, its blocks dropped through the table's
 *     hook; never one with a session (-EUSERS when all have one).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "control/nspace.h"
#include "storetest.h"
#include "unit.h"
#include "wire/layout.h"

static struct pool *pool;
static struct store *st;
static struct store_place place;

/* What the drop hook was called with. */
static unsigned drops;
static char dropped[KVS_NS_MAX];

static unsigned drop(void *arg, struct nspace *ns)
{
	ck_assert_ptr_eq(arg, st);
	drops++;
	snprintf(dropped, sizeof(dropped), "%s", ns->name);
	return store_drop_nspace(arg, &ns->in_store);
}

static void setup(void)
{
	st_setup();
	pool = st_pool_new();
	st = st_store_new(pool, 100, NULL);
	place = st_place(st, ST_SLOT, 0, 1);
	drops = 0;
	dropped[0] = '\0';
}

static void teardown(void)
{
	store_free(st);
	pool_destroy(pool);
	st_teardown();
}

static struct nspace *get(struct nspace_table *tab, const char *name)
{
	struct nspace *ns = NULL;

	ck_assert_int_eq(nspace_get(tab, name, &ns), 0);
	ck_assert_ptr_nonnull(ns);
	ck_assert_str_eq(ns->name, name);
	return ns;
}

START_TEST(test_get_put_sweep)
{
	struct nspace_table *tab;
	struct nspace *x, *x2, *y;
	uint32_t xid;

	ck_assert_int_eq(nspace_table_new(8, drop, st, &tab), 0);
	x = get(tab, "x");
	x2 = get(tab, "x");
	y = get(tab, "y");
	ck_assert_ptr_eq(x, x2);
	ck_assert_ptr_ne(x, y);
	ck_assert_uint_eq(x->sessions, 2);
	ck_assert_uint_ne(x->in_store.id, 0);
	ck_assert_uint_ne(x->in_store.id, y->in_store.id);
	ck_assert_ptr_eq(x->tab, tab);
	xid = x->in_store.id;
	/* Sessions hold them. */
	ck_assert_uint_eq(nspace_sweep(tab), 0);
	nspace_put(x);
	ck_assert_uint_eq(nspace_sweep(tab), 0);
	nspace_put(x2);
	/* y's session leaves, but y has a block: kept. */
	ck_assert_uint_eq(st_save(st, NULL, &y->in_store, &place, 0, 1), 1);
	nspace_put(y);
	ck_assert_uint_eq(x->sessions, 0);
	ck_assert_uint_eq(nspace_sweep(tab), 1); /* x */
	ck_assert_uint_eq(store_drop_nspace(st, &y->in_store), 1);
	ck_assert_uint_eq(nspace_sweep(tab), 1); /* y, its block gone */
	ck_assert_uint_eq(nspace_sweep(tab), 0);
	/* A name that comes back is a new namespace: its old blocks can never match. */
	x = get(tab, "x");
	ck_assert_uint_ne(x->in_store.id, xid);
	ck_assert_uint_eq(drops, 0);
	nspace_put(x);
	nspace_put(NULL);
	nspace_table_free(tab); /* frees what is left */
	nspace_table_free(NULL);
}
END_TEST

/* ---- geometry ------------------------------------------------------------------------------------ */

static const struct geom_case {
	uint64_t fingerprint, slot_bytes;
	bool replicated;
	uint32_t tp;
	int res;
} geom_cases[] = {
	{ 11, 4096, false, 2, 0 },	{ 12, 4096, false, 2, -EXDEV },
	{ 11, 8192, false, 2, -EXDEV }, { 11, 4096, true, 2, -EXDEV },
	{ 11, 4096, false, 4, -EXDEV },
};

START_TEST(test_adopt)
{
	const struct geom_case *c = &geom_cases[_i];
	struct layout first = { .fingerprint = 11, .slot_bytes = 4096 };
	struct layout lay = { .fingerprint = c->fingerprint,
			      .slot_bytes = c->slot_bytes,
			      .replicated = c->replicated };
	struct nspace_table *tab;
	struct nspace *ns;
	char why[256] = "";
	bool is_first = false;

	ck_assert_int_eq(nspace_table_new(8, NULL, NULL, &tab), 0);
	ns = get(tab, "m");
	ck_assert(!ns->has_geometry);
	ck_assert_int_eq(nspace_adopt(ns, &first, 2, why, sizeof(why), &is_first), 0);
	ck_assert(is_first);
	ck_assert(ns->has_geometry);
	ck_assert_uint_eq(ns->slot_bytes, 4096);
	ck_assert_uint_eq(ns->tp_size, 2);
	ck_assert_int_eq(nspace_adopt(ns, &lay, c->tp, why, sizeof(why), &is_first), c->res);
	ck_assert(!is_first);
	if (c->res)
		ck_assert_msg(strstr(why, "layout differs from namespace m's (4096-byte blocks, "
					  "tp_size 2)"),
			      "why: %s", why);
	/* Refused or not, the geometry is the first one's. */
	ck_assert_uint_eq(ns->fingerprint, 11);
	ck_assert_uint_eq(ns->slot_bytes, 4096);
	ck_assert_uint_eq(ns->tp_size, 2);
	ck_assert(!ns->replicated);
	nspace_put(ns);
	nspace_table_free(tab);
}
END_TEST

/* ---- slots ------------------------------------------------------------------------------------------ */

START_TEST(test_slot_reclaim)
{
	struct nspace_table *tab;
	struct nspace *a, *b, *c, *d, *e = NULL;

	ck_assert_int_eq(nspace_table_new(2, drop, st, &tab), 0);
	a = get(tab, "a");
	b = get(tab, "b");
	ck_assert_uint_eq(st_save(st, NULL, &a->in_store, &place, 0, 3), 3);
	ck_assert_uint_eq(st_save(st, NULL, &b->in_store, &place, 0, 2), 2);
	nspace_put(b);
	nspace_put(a);
	/* Which one is idle longest is what idle_since says, not the order of the puts. */
	a->idle_since = 100;
	b->idle_since = 200;
	/* Full: c takes a's slot, and a's blocks go with it; b keeps its own. */
	c = get(tab, "c");
	ck_assert_uint_eq(drops, 1);
	ck_assert_str_eq(dropped, "a");
	ck_assert_uint_eq(st_query(st, &b->in_store, 0, 2, NULL, NULL), 2);
	ck_assert_uint_eq(__atomic_load_n(&b->in_store.blocks, __ATOMIC_RELAXED), 2);
	/* b is the only one without a session: d takes its slot. */
	d = get(tab, "d");
	ck_assert_uint_eq(drops, 2);
	ck_assert_str_eq(dropped, "b");
	/* Both have sessions: no slot for e, nothing dropped. */
	ck_assert_int_eq(nspace_get(tab, "e", &e), -EUSERS);
	ck_assert_ptr_null(e);
	ck_assert_uint_eq(drops, 2);
	/* A name present is found whatever the table's fill. */
	ck_assert_ptr_eq(get(tab, "c"), c);
	nspace_put(c);
	nspace_put(c);
	nspace_put(d);
	nspace_table_free(tab);
}
END_TEST

static void add_tests(TCase *tc)
{
	tcase_add_test(tc, test_get_put_sweep);
	tcase_add_loop_test(tc, test_adopt, 0, ST_CASES(geom_cases));
	tcase_add_test(tc, test_slot_reclaim);
}

const struct unit_suite unit_suite = {
	.name = "nspace",
	.setup = setup,
	.teardown = teardown,
	.timeout_s = 30,
	.add_tests = add_tests,
};
