/* SPDX-License-Identifier: MIT */
/*
 * The lease table (sidecar/store/lease.c), as a handle, with holders
 * whose references it takes are counted (storetest.h):
 *   - a lease has world_size consumers, one LOAD per rank; a LOAD is
 *     checked against the lease (holder, rank, count) before its share
 *     is taken; the last consumer takes the lease out of the table, and
 *     the blocks are unpinned only when the last LOAD put it back;
 *   - RELEASE by the holder only; unknown ids are -ENOENT, never silent;
 *   - the TTL sweep and a creator's death drop what they should and
 *     nothing else, a LOAD in progress keeping its blocks;
 *   - memory bounds per holder, per uid and in all, and the count per
 *     holder: a refused QUERY pins nothing and says why once per run;
 *   - revocation: the oldest unused leases of the holder pinning the
 *     most, while it pins more than the saver, until enough is unpinned;
 *     and through the store, a SAVE with everything pinned revokes;
 *   - every reference the table takes on a holder it gives back.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storetest.h"
#include "unit.h"

#define NB  8u /* blocks per lease */
#define BIG (1ull << 40)

static struct block *blocks[4 * NB];
static struct st_holder A, B, C;

/* Fake blocks: the table only unpins them. */
static void setup(void)
{
	st_setup();
	for (unsigned i = 0; i < 4 * NB; i++) {
		blocks[i] = calloc(1, sizeof(struct block));
		ck_assert_ptr_nonnull(blocks[i]);
	}
	st_holder_init(&A, "a", 2);
	st_holder_init(&B, "b", 2);
	st_holder_init(&C, "c", 1);
}

static void teardown(void)
{
	for (unsigned i = 0; i < 4 * NB; i++)
		free(blocks[i]);
	st_teardown();
}

/* Pin @n blocks from @first (what a QUERY does) and make a lease of them. */
static int lease(struct lease_table *lt, struct st_holder *h, uint64_t creator, uid_t uid,
		 unsigned first, uint32_t n, uint64_t pinned, uint64_t *ret_id, char *why)
{
	uint64_t ttl = 0;
	char buf[256];
	int r;

	for (unsigned i = 0; i < n; i++)
		blocks[first + i]->pins++;
	r = lease_create(lt, &h->lh, creator, uid, &blocks[first], n, pinned, ret_id, &ttl,
			 why ? why : buf, sizeof(buf));
	if (r < 0) /* the caller unpins */
		for (unsigned i = 0; i < n; i++)
			blocks[first + i]->pins--;
	return r;
}

static int pins(unsigned first, unsigned n)
{
	int p = 0;

	for (unsigned i = 0; i < n; i++)
		p += blocks[first + i]->pins;
	return p;
}

static struct lease_stats stats(struct lease_table *lt)
{
	struct lease_stats s;

	lease_get_stats(lt, &s);
	return s;
}

/* What a lease of @n blocks for @world ranks costs, as lease.c counts it. */
static uint64_t lease_bytes(uint32_t n, uint32_t world)
{
	return sizeof(struct lease) + n * sizeof(struct block *) + (world + 63) / 64 * 8;
}

/* ---- create, take, put ------------------------------------------------------ */

START_TEST(test_create_take_put)
{
	struct lease_table *lt = st_leases_new(600000, 16, BIG, BIG, BIG);
	struct lease *l0, *l1, *x;
	uint64_t id0, id, ttl;
	char why[256];

	ck_assert_int_eq(lease(lt, &A, 7, 1000, 0, NB, NB * ST_SLOT, &id0, NULL), 0);
	ck_assert_uint_ne(id0, 0);
	ck_assert_int_eq(A.refs, 1);
	ck_assert_uint_eq(A.lh.leases, 1);
	ck_assert_uint_eq(A.lh.pinned, NB * ST_SLOT);
	ck_assert_uint_eq(A.lh.bytes, lease_bytes(NB, 2));
	ck_assert_uint_eq(stats(lt).live, 1);
	ck_assert_uint_eq(stats(lt).created, 1);
	/* The TTL comes back with the id. */
	blocks[NB]->pins++;
	ck_assert_int_eq(
		lease_create(lt, &A.lh, 7, 1000, &blocks[NB], 1, 0, &id, &ttl, why, sizeof(why)),
		0);
	ck_assert_uint_eq(ttl, 600000);
	ck_assert_uint_ne(id, id0);
	ck_assert_int_eq(lease_release(lt, id, &A.lh), 0);
	ck_assert_int_eq(blocks[NB]->pins, 0);

	ck_assert_int_eq(lease(lt, &A, 7, 1000, 2 * NB, NB, NB * ST_SLOT, &id, NULL), 0);
	/* Rank 0 takes its share; again is -EALREADY. */
	ck_assert_int_eq(lease_take(lt, id, &A.lh, 0, NB, &l0), 0);
	ck_assert_uint_eq(l0->refs, 2);
	ck_assert_uint_eq(l0->consumers_left, 1);
	ck_assert_int_eq(lease_take(lt, id, &A.lh, 0, NB, &x), -EALREADY);
	/* The last rank (fewer blocks is fine): consumed, out of the table, still pinned. */
	ck_assert_int_eq(lease_take(lt, id, &A.lh, 1, NB / 2, &l1), 0);
	ck_assert_ptr_eq(l1, l0);
	ck_assert_uint_eq(stats(lt).consumed, 1);
	ck_assert_uint_eq(stats(lt).live, 1);
	ck_assert_int_eq(lease_take(lt, id, &A.lh, 1, NB, &x), -ENOENT);
	ck_assert_int_eq(lease_release(lt, id, &A.lh), -ENOENT);
	ck_assert_int_eq(pins(2 * NB, NB), NB);
	ck_assert_uint_eq(A.lh.leases, 2); /* counted until the last reference */
	lease_put(lt, l0);
	ck_assert_int_eq(pins(2 * NB, NB), NB);
	lease_put(lt, l1);
	ck_assert_int_eq(pins(2 * NB, NB), 0);
	ck_assert_uint_eq(A.lh.leases, 1);
	ck_assert_uint_eq(A.lh.pinned, NB * ST_SLOT);
	ck_assert_int_eq(A.refs, 1);
	/* The first is still there, and goes with the table. */
	ck_assert_int_eq(pins(0, NB), NB);
	lease_table_free(lt);
	ck_assert_int_eq(pins(0, NB), 0);
	ck_assert_int_eq(A.refs, 0);
	lease_table_free(NULL);
}
END_TEST

/* LOADs a lease refuses, each before the share is taken. */
static const struct take_case {
	bool unknown; /* an id the table never gave */
	bool other;   /* another holder's session */
	uint32_t rank, n;
	int res;
} take_cases[] = {
	{ true, false, 0, NB, -ENOENT },      { false, true, 0, NB, -EACCES },
	{ false, false, 2, NB, -EINVAL },     { false, false, UINT32_MAX, 1, -EINVAL },
	{ false, false, 0, NB + 1, -EINVAL },
};

START_TEST(test_take_refused)
{
	const struct take_case *c = &take_cases[_i];
	struct lease_table *lt = st_leases_new(600000, 16, BIG, BIG, BIG);
	struct lease *l = NULL;
	uint64_t id;

	ck_assert_int_eq(lease(lt, &A, 7, 1000, 0, NB, 0, &id, NULL), 0);
	ck_assert_int_eq(lease_take(lt, c->unknown ? id + 1 : id, c->other ? &B.lh : &A.lh, c->rank,
				    c->n, &l),
			 c->res);
	ck_assert_ptr_null(l);
	/* Nothing spent: both ranks still take their LOAD. */
	ck_assert_int_eq(lease_take(lt, id, &A.lh, 0, NB, &l), 0);
	lease_put(lt, l);
	ck_assert_int_eq(lease_take(lt, id, &A.lh, 1, NB, &l), 0);
	lease_put(lt, l);
	ck_assert_int_eq(pins(0, NB), 0);
	ck_assert_int_eq(A.refs, 0);
	lease_table_free(lt);
}
END_TEST

START_TEST(test_release)
{
	struct lease_table *lt = st_leases_new(600000, 16, BIG, BIG, BIG);
	struct lease *l;
	uint64_t id;

	ck_assert_int_eq(lease(lt, &A, 7, 1000, 0, NB, 0, &id, NULL), 0);
	ck_assert_int_eq(lease_release(lt, id, &B.lh), -EACCES);
	ck_assert_int_eq(lease_release(lt, id + 1, &A.lh), -ENOENT);
	ck_assert_int_eq(pins(0, NB), NB);
	ck_assert_int_eq(lease_release(lt, id, &A.lh), 0);
	ck_assert_int_eq(pins(0, NB), 0);
	ck_assert_int_eq(A.refs, 0);
	ck_assert_uint_eq(stats(lt).released, 1);
	ck_assert_uint_eq(stats(lt).live, 0);
	ck_assert_int_eq(lease_release(lt, id, &A.lh), -ENOENT);
	/* Released while a LOAD copies from it: the LOAD keeps the blocks. */
	ck_assert_int_eq(lease(lt, &A, 7, 1000, 0, NB, 0, &id, NULL), 0);
	ck_assert_int_eq(lease_take(lt, id, &A.lh, 0, NB, &l), 0);
	ck_assert_int_eq(lease_release(lt, id, &A.lh), 0);
	ck_assert_int_eq(pins(0, NB), NB);
	ck_assert_int_eq(lease_take(lt, id, &A.lh, 1, NB, &l), -ENOENT);
	lease_put(lt, l);
	ck_assert_int_eq(pins(0, NB), 0);
	ck_assert_int_eq(A.refs, 0);
	lease_table_free(lt);
}
END_TEST

/* ---- sweep, creator death ------------------------------------------------------ */

START_TEST(test_sweep)
{
	/* A TTL of 0 expires every lease at the next sweep; 600 s none. */
	struct lease_table *now = st_leases_new(0, 16, BIG, BIG, BIG);
	struct lease_table *later = st_leases_new(600000, 16, BIG, BIG, BIG);
	uint64_t id[3], kept;
	struct lease *l;

	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(lease(now, &A, 7, 1000, i * NB, NB, 0, &id[i], NULL), 0);
	ck_assert_int_eq(lease_take(now, id[1], &A.lh, 0, NB, &l), 0);
	ck_assert_int_eq(lease(later, &B, 8, 1000, 3 * NB, NB, 0, &kept, NULL), 0);
	ck_assert_uint_eq(lease_sweep(later), 0);
	ck_assert_uint_eq(lease_sweep(now), 3);
	ck_assert_uint_eq(stats(now).expired, 3);
	ck_assert_uint_eq(stats(now).live, 0);
	ck_assert_int_eq(lease_take(now, id[0], &A.lh, 1, NB, &l), -ENOENT);
	/* The LOAD in progress keeps its blocks until it ends. */
	ck_assert_int_eq(pins(0, NB), 0);
	ck_assert_int_eq(pins(NB, NB), NB);
	ck_assert_int_eq(pins(2 * NB, NB), 0);
	lease_put(now, l);
	ck_assert_int_eq(pins(NB, NB), 0);
	ck_assert_int_eq(A.refs, 0);
	ck_assert_uint_eq(lease_sweep(now), 0);
	/* The other table's lease is untouched. */
	ck_assert_uint_eq(stats(later).live, 1);
	ck_assert_int_eq(pins(3 * NB, NB), NB);
	lease_table_free(now);
	lease_table_free(later);
	ck_assert_int_eq(pins(3 * NB, NB), 0);
	ck_assert_int_eq(B.refs, 0);
}
END_TEST

START_TEST(test_drop_creator)
{
	struct lease_table *lt = st_leases_new(600000, 16, BIG, BIG, BIG);
	uint64_t id[3];
	struct lease *l;

	ck_assert_int_eq(lease(lt, &A, 1, 1000, 0, NB, 0, &id[0], NULL), 0);
	ck_assert_int_eq(lease(lt, &A, 2, 1000, NB, NB, 0, &id[1], NULL), 0);
	ck_assert_int_eq(lease(lt, &B, 1, 1000, 2 * NB, NB, 0, &id[2], NULL), 0);
	ck_assert_uint_eq(lease_drop_creator(lt, 3), 0);
	/* Session 1 dies: its leases go, whatever instance; session 2's stays. */
	ck_assert_uint_eq(lease_drop_creator(lt, 1), 2);
	ck_assert_uint_eq(stats(lt).released, 2);
	ck_assert_int_eq(pins(0, NB), 0);
	ck_assert_int_eq(pins(2 * NB, NB), 0);
	ck_assert_int_eq(lease_take(lt, id[0], &A.lh, 0, NB, &l), -ENOENT);
	ck_assert_int_eq(lease_take(lt, id[1], &A.lh, 0, NB, &l), 0);
	lease_put(lt, l);
	ck_assert_int_eq(pins(NB, NB), NB);
	ck_assert_int_eq(B.refs, 0);
	lease_table_free(lt);
	ck_assert_int_eq(A.refs, 0);
}
END_TEST

/* ---- bounds ----------------------------------------------------------------------------- */

enum bound { PER_HOLDER, PER_UID, ALL, COUNT };

static const struct bound_case {
	enum bound which;
	const char *why; /* in the first refusal's reason */
} bound_cases[] = {
	{ PER_HOLDER, "the instance's lease memory" },
	{ PER_UID, "the lease memory of uid 1000" },
	{ ALL, "the lease memory of all leases" },
	{ COUNT, NULL },
};

/*
 * Each bound set to 3 leases of NB blocks: A's third lease fits, its
 * fourth does not; what is refused and what still passes tells which
 * bound it is.
 */
START_TEST(test_bounds)
{
	const struct bound_case *c = &bound_cases[_i];
	const uint64_t three = 3 * lease_bytes(NB, 2);
	struct lease_table *lt = st_leases_new(
		600000, c->which == COUNT ? 3 : 16, c->which == PER_HOLDER ? three : BIG,
		c->which == PER_UID ? three : BIG, c->which == ALL ? three : BIG);
	int refused = c->which == COUNT ? -EBUSY : -EDQUOT;
	uint64_t id[4], other;
	char why[256];

	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(lease(lt, &A, 7, 1000, 0, NB, 0, &id[i], NULL), 0);
	ck_assert_int_eq(lease(lt, &A, 7, 1000, 0, NB, 0, &id[3], why), refused);
	/* Refused: nothing pinned, nothing counted, no reference kept. */
	ck_assert_int_eq(pins(0, NB), 3 * NB);
	ck_assert_uint_eq(A.lh.leases, 3);
	ck_assert_uint_eq(A.lh.bytes, three);
	ck_assert_int_eq(A.refs, 3);
	if (c->why) {
		ck_assert_msg(strstr(why, c->why), "why: %s", why);
		/* Said once per run of refusals. */
		ck_assert_int_eq(lease(lt, &A, 7, 1000, 0, NB, 0, &id[3], why), refused);
		ck_assert_str_eq(why, "");
	}
	/* Another instance of the same uid: refused only by the uid's bound and the total's. */
	ck_assert_int_eq(lease(lt, &B, 8, 1000, NB, NB, 0, &other, NULL),
			 c->which == PER_UID || c->which == ALL ? -EDQUOT : 0);
	/* Another uid: refused only by the total's. */
	ck_assert_int_eq(lease(lt, &C, 9, 2000, 2 * NB, NB, 0, &other, NULL),
			 c->which == ALL ? -EDQUOT : 0);
	/* One released makes room, and the next refusal says why again. */
	ck_assert_int_eq(lease_release(lt, id[0], &A.lh), 0);
	if (c->which == PER_HOLDER || c->which == COUNT) {
		ck_assert_int_eq(lease(lt, &A, 7, 1000, 0, NB, 0, &id[0], NULL), 0);
		ck_assert_int_eq(lease(lt, &A, 7, 1000, 0, NB, 0, &id[3], why), refused);
		if (c->why)
			ck_assert_msg(strstr(why, c->why), "why: %s", why);
	}
	lease_table_free(lt);
	ck_assert_int_eq(pins(0, 3 * NB), 0);
	ck_assert_int_eq(A.refs + B.refs + C.refs, 0);
}
END_TEST

/* ---- revocation ------------------------------------------------------------------------ */

/*
 * A holds three leases of 100 pinned bytes (oldest first), B one of 50;
 * the saver asks for @need bytes.
 */
static const struct revoke_case {
	int saver; /* 0: A, 1: B, 2: C (pins nothing) */
	uint64_t need;
	unsigned loading; /* bit i: lease i is being copied from (a LOAD holds it) */
	unsigned revoked;
	bool left[4]; /* A's three, B's: still there */
} revoke_cases[] = {
	{ 2, 150, 0, 2, { false, false, true, true } },
	{ 2, 100, 0, 1, { false, true, true, true } },
	{ 2, 1, 1, 1, { true, false, true, true } },
	{ 2, 1000, 0, 4, { false, false, false, false } },
	{ 1, 1000, 0, 3, { false, false, false, true } },
	{ 0, 1000, 0, 0, { true, true, true, true } },
	{ 2, 0, 0, 0, { true, true, true, true } },
	/* The biggest pinner has nothing unused: the next one gives. */
	{ 2, 1000, 7, 1, { true, true, true, false } },
};

START_TEST(test_revoke)
{
	const struct revoke_case *c = &revoke_cases[_i];
	struct st_holder *saver[] = { &A, &B, &C };
	struct lease_table *lt = st_leases_new(600000, 16, BIG, BIG, BIG);
	struct lease *l[4] = { NULL };
	uint64_t id[4];

	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(lease(lt, &A, 7, 1000, i * NB, NB, 100, &id[i], NULL), 0);
	ck_assert_int_eq(lease(lt, &B, 8, 1000, 3 * NB, NB, 50, &id[3], NULL), 0);
	for (unsigned i = 0; i < 4; i++)
		if (c->loading & (1u << i))
			ck_assert_int_eq(lease_take(lt, id[i], i < 3 ? &A.lh : &B.lh, 0, NB, &l[i]),
					 0);
	ck_assert_uint_eq(lease_revoke_for(lt, &saver[c->saver]->lh, c->need), c->revoked);
	ck_assert_uint_eq(stats(lt).released, c->revoked);
	for (unsigned i = 0; i < 4; i++) {
		ck_assert_int_eq(lease_release(lt, id[i], i < 3 ? &A.lh : &B.lh),
				 c->left[i] ? 0 : -ENOENT);
		ck_assert_int_eq(pins(i * NB, NB), l[i] ? NB : 0);
		if (l[i])
			lease_put(lt, l[i]);
	}
	ck_assert_int_eq(pins(0, 4 * NB), 0);
	ck_assert_int_eq(A.refs + B.refs, 0);
	ck_assert_uint_eq(A.lh.pinned + B.lh.pinned, 0);
	lease_table_free(lt);
}
END_TEST

/* Through the store: a SAVE that finds everything pinned revokes the biggest pinner's lease. */
START_TEST(test_revoke_for_save)
{
	struct lease_table *lt = st_leases_new(600000, 16, BIG, BIG, BIG);
	struct pool *pool = st_pool_new();
	struct store *st = st_store_new(pool, 100, lt);
	struct store_place p = st_place(st, ST_SLOT, 0, 1);
	struct store_tenant *ta = store_tenant_new(st, "a", &A.lh);
	struct store_tenant *tb = store_tenant_new(st, "b", &B.lh);
	struct store_tenant *tn = store_tenant_new(st, "nobody", NULL);
	static struct block *b[ST_SLOTS];
	static struct st_save s;
	struct store_ns ns;
	struct lease *l;
	uint64_t bytes, id, ttl;
	char why[256];

	store_ns_init(&ns, 1);
	ck_assert_uint_eq(st_save(st, ta, &ns, &p, 0, ST_SLOTS), ST_SLOTS);
	ck_assert_uint_eq(st_query(st, &ns, 0, ST_SLOTS, b, &bytes), ST_SLOTS);
	ck_assert_int_eq(
		lease_create(lt, &A.lh, 7, 1000, b, ST_SLOTS, bytes, &id, &ttl, why, sizeof(why)),
		0);
	ck_assert_uint_eq(A.lh.pinned, ST_POOL);
	/* The biggest pinner itself revokes nothing; nor does a tenant without leases. */
	st_save_begin(st, ta, &ns, &p, 1000, 8, &s);
	ck_assert_uint_eq(s.nents, 0);
	ck_assert_uint_eq(s.nospace, 8);
	st_save_begin(st, tn, &ns, &p, 1000, 8, &s);
	ck_assert_uint_eq(s.nents, 0);
	/* A LOAD copies from it: it cannot be revoked, so nothing is stored. */
	ck_assert_int_eq(lease_take(lt, id, &A.lh, 0, 1, &l), 0);
	st_save_begin(st, tb, &ns, &p, 1000, 8, &s);
	ck_assert_uint_eq(s.nents, 0);
	ck_assert_uint_eq(s.nospace, 8);
	ck_assert_uint_eq(stats(lt).released, 0);
	lease_put(lt, l);
	/* Unused now: revoked for b's SAVE, which then evicts what it needs. */
	ck_assert_uint_eq(st_save(st, tb, &ns, &p, 1000, 8), 8);
	ck_assert_uint_eq(stats(lt).released, 1);
	ck_assert_uint_eq(A.lh.leases, 0);
	ck_assert_uint_eq(A.lh.pinned, 0);
	ck_assert_int_eq(A.refs, 0);
	ck_assert_uint_eq(st_query(st, &ns, 1000, 8, NULL, NULL), 8);
	lease_table_free(lt);
	store_tenant_put(ta);
	store_tenant_put(tb);
	store_tenant_put(tn);
	store_free(st);
	pool_destroy(pool);
}
END_TEST

static void add_tests(TCase *tc)
{
	tcase_add_test(tc, test_create_take_put);
	tcase_add_loop_test(tc, test_take_refused, 0, ST_CASES(take_cases));
	tcase_add_test(tc, test_release);
	tcase_add_test(tc, test_sweep);
	tcase_add_test(tc, test_drop_creator);
	tcase_add_loop_test(tc, test_bounds, 0, ST_CASES(bound_cases));
	tcase_add_loop_test(tc, test_revoke, 0, ST_CASES(revoke_cases));
	tcase_add_test(tc, test_revoke_for_save);
}

const struct unit_suite unit_suite = {
	.name = "lease",
	.setup = setup,
	.teardown = teardown,
	.timeout_s = 30,
	.add_tests = add_tests,
};
