/* SPDX-License-Identifier: MIT */
/*
 * The SIEVE queue (sidecar/evict.c): eviction order without hits is FIFO;
 * a hit entry survives one pass of the hand and loses its bit; entries the
 * caller refuses are skipped untouched; the hand keeps its place across
 * removals (of its own node too) and wraps from the newest entry back to
 * the oldest.
 */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>

#include "../../sidecar/evict.h"

#define N 8

static struct sieve q;
static struct sieve_node nodes[N];
static unsigned asked[N];	/* evictable() calls per node */
static bool refused[N];

static unsigned idx(const struct sieve_node *n)
{
	ck_assert_ptr_nonnull(n);
	return (unsigned)(n - nodes);
}

static bool evictable(struct sieve_node *n, void *arg)
{
	unsigned i = idx(n);

	ck_assert_ptr_eq(arg, &q);
	asked[i]++;
	return !refused[i];
}

/* Insert nodes 0..n-1: 0 is the oldest. */
static void setup_n(unsigned n)
{
	sieve_init(&q);
	for (unsigned i = 0; i < N; i++) {
		nodes[i] = (struct sieve_node){ 0 };
		asked[i] = 0;
		refused[i] = false;
	}
	for (unsigned i = 0; i < n; i++)
		sieve_insert(&q, &nodes[i]);
	ck_assert_uint_eq(q.n, n);
}

static struct sieve_node *pick(void)
{
	return sieve_pick(&q, evictable, &q, 0);
}

/* Pick and remove; returns the victim's index. */
static unsigned evict(void)
{
	struct sieve_node *v = pick();
	unsigned i = idx(v);

	ck_assert(v->queued);
	sieve_remove(&q, v);
	ck_assert(!v->queued);
	return i;
}

START_TEST(test_empty)
{
	setup_n(0);
	ck_assert_ptr_null(pick());
	ck_assert_ptr_null(sieve_pick(&q, evictable, &q, 5));
	ck_assert_uint_eq(q.n, 0);
}
END_TEST

START_TEST(test_fifo)
{
	setup_n(5);
	for (unsigned i = 0; i < 5; i++) {
		ck_assert_uint_eq(evict(), i);
		ck_assert_uint_eq(q.n, 4 - i);
	}
	ck_assert_ptr_null(pick());
	/* Inserted after some went: still oldest first. */
	setup_n(3);
	ck_assert_uint_eq(evict(), 0);
	sieve_insert(&q, &nodes[5]);
	sieve_insert(&q, &nodes[6]);
	ck_assert_uint_eq(evict(), 1);
	ck_assert_uint_eq(evict(), 2);
	ck_assert_uint_eq(evict(), 5);
	ck_assert_uint_eq(evict(), 6);
	ck_assert_ptr_null(pick());
}
END_TEST

START_TEST(test_single)
{
	setup_n(1);
	ck_assert_uint_eq(evict(), 0);
	ck_assert_ptr_null(q.hand);
	ck_assert_ptr_null(pick());
	/* A lone visited entry survives the first pass, not the second. */
	setup_n(1);
	sieve_hit(&nodes[0]);
	ck_assert_uint_eq(evict(), 0);
}
END_TEST

START_TEST(test_visited_survives_once)
{
	setup_n(4);
	sieve_hit(&nodes[0]);
	sieve_hit(&nodes[0]); /* two hits are one bit */
	ck_assert_uint_eq(nodes[0].visited, 1);
	/* The hand passes 0, clearing it, and takes 1. */
	ck_assert_uint_eq(evict(), 1);
	ck_assert_uint_eq(nodes[0].visited, 0);
	ck_assert(nodes[0].queued);
	ck_assert_uint_eq(asked[0], 0); /* a visited entry is not even offered */
	/* The hand goes on from where it stopped, not from the oldest. */
	ck_assert_uint_eq(evict(), 2);
	ck_assert_uint_eq(evict(), 3);
	/* Wrapped around: 0, its bit spent, goes now. */
	ck_assert_uint_eq(evict(), 0);
	ck_assert_ptr_null(pick());
}
END_TEST

START_TEST(test_all_visited)
{
	setup_n(4);
	for (unsigned i = 0; i < 4; i++)
		sieve_hit(&nodes[i]);
	/* One lap clears every bit; the next takes the oldest. */
	ck_assert_uint_eq(evict(), 0);
	for (unsigned i = 1; i < 4; i++)
		ck_assert_uint_eq(nodes[i].visited, 0);
	ck_assert_uint_eq(evict(), 1);
}
END_TEST

START_TEST(test_hit_after_pass)
{
	setup_n(4);
	sieve_hit(&nodes[1]);
	ck_assert_uint_eq(evict(), 0); /* hand now at 1 */
	/* 1 is passed (bit cleared), 2 taken; a new hit on 1 earns it another round. */
	ck_assert_uint_eq(evict(), 2);
	sieve_hit(&nodes[1]);
	ck_assert_uint_eq(evict(), 3);
	ck_assert_uint_eq(nodes[1].visited, 1);
	/* Only 1 is left: one more pass and it goes. */
	ck_assert_uint_eq(evict(), 1);
}
END_TEST

START_TEST(test_refused)
{
	unsigned before;

	setup_n(4);
	refused[0] = true;
	refused[1] = true;
	sieve_hit(&nodes[2]);
	/* 0 and 1 refused (asked once each), 2 visited (passed), 3 taken. */
	ck_assert_uint_eq(evict(), 3);
	ck_assert_uint_eq(asked[0], 1);
	ck_assert_uint_eq(asked[1], 1);
	ck_assert_uint_eq(asked[2], 0);
	ck_assert_uint_eq(asked[3], 1);
	ck_assert(nodes[0].queued && nodes[1].queued && nodes[2].queued);
	ck_assert_uint_eq(nodes[2].visited, 0);
	/* A refused entry keeps its bit: refusing is not a pass. */
	ck_assert_uint_eq(nodes[0].visited, 0);
	ck_assert_uint_eq(nodes[1].visited, 0);
	sieve_hit(&nodes[1]);
	refused[1] = false;
	/* Wrapping from 3 (the newest) to 0: refused again, 1 visited, 2 taken. */
	ck_assert_uint_eq(evict(), 2);
	ck_assert_uint_eq(nodes[1].visited, 0);
	ck_assert_uint_eq(asked[0], 2);
	/* Everything refused: nothing, after every entry was asked, within two laps. */
	refused[1] = true;
	before = asked[0] + asked[1];
	ck_assert_ptr_null(pick());
	ck_assert_uint_ge(asked[0], 3);
	ck_assert_uint_ge(asked[1], 2);
	ck_assert_uint_le(asked[0] + asked[1] - before, 2 * 2 + 1);
	ck_assert_uint_eq(q.n, 2);
	/* Once allowed again, the hand's next candidate goes. */
	refused[0] = refused[1] = false;
	ck_assert_uint_eq(q.n, 2);
	evict();
	evict();
	ck_assert_ptr_null(pick());
}
END_TEST

START_TEST(test_refused_visited)
{
	/* A visited entry that would be refused loses its bit anyway (it is never asked). */
	setup_n(3);
	sieve_hit(&nodes[0]);
	refused[0] = true;
	ck_assert_uint_eq(evict(), 1);
	ck_assert_uint_eq(nodes[0].visited, 0);
	ck_assert_uint_eq(asked[0], 0);
}
END_TEST

START_TEST(test_max_scan)
{
	setup_n(4);
	sieve_hit(&nodes[0]);
	sieve_hit(&nodes[1]);
	/* Two looks: both visited entries passed, no victim; the hand stays at 2. */
	ck_assert_ptr_null(sieve_pick(&q, evictable, &q, 2));
	ck_assert_ptr_eq(q.hand, &nodes[2]);
	ck_assert_uint_eq(nodes[0].visited + nodes[1].visited, 0);
	ck_assert_uint_eq(evict(), 2);
}
END_TEST

START_TEST(test_remove_hand)
{
	setup_n(5);
	ck_assert_uint_eq(evict(), 0);
	ck_assert_ptr_eq(q.hand, &nodes[1]);
	/* The hand's node goes (e.g. its block was dropped): the hand moves to the next newer. */
	sieve_remove(&q, &nodes[1]);
	ck_assert_ptr_eq(q.hand, &nodes[2]);
	/* Removing another node does not move it. */
	sieve_remove(&q, &nodes[4]);
	ck_assert_ptr_eq(q.hand, &nodes[2]);
	/* Removing twice is harmless. */
	sieve_remove(&q, &nodes[4]);
	ck_assert_uint_eq(q.n, 2);
	ck_assert_uint_eq(evict(), 2);
	ck_assert_uint_eq(evict(), 3);
	ck_assert_ptr_null(pick());
}
END_TEST

START_TEST(test_remove_hand_newest)
{
	setup_n(4);
	sieve_hit(&nodes[0]);
	sieve_hit(&nodes[1]);
	sieve_hit(&nodes[2]);
	ck_assert_uint_eq(evict(), 3); /* the hand wraps to 0 */
	ck_assert_uint_eq(evict(), 0);
	ck_assert_ptr_eq(q.hand, &nodes[1]);
	sieve_insert(&q, &nodes[4]);
	sieve_hit(&nodes[1]);
	ck_assert_uint_eq(evict(), 2); /* 1 passed again */
	ck_assert_ptr_eq(q.hand, &nodes[4]);
	/* The hand on the newest node, removed: it restarts at the oldest. */
	sieve_remove(&q, &nodes[4]);
	ck_assert_ptr_null(q.hand);
	ck_assert_uint_eq(evict(), 1);
	ck_assert_uint_eq(q.n, 0);
}
END_TEST

/* New entries are queued ahead of the hand: it meets them before wrapping. */
START_TEST(test_wrap_and_new)
{
	setup_n(3);
	sieve_hit(&nodes[0]);
	ck_assert_uint_eq(evict(), 1);
	ck_assert_ptr_eq(q.hand, &nodes[2]);
	sieve_insert(&q, &nodes[3]);
	sieve_hit(&nodes[2]);
	ck_assert_uint_eq(evict(), 3); /* 2 passed, 3 newer than it */
	/* Wrapped: 0 (passed once already) then 2. */
	ck_assert_uint_eq(evict(), 0);
	ck_assert_uint_eq(evict(), 2);
	ck_assert_ptr_null(pick());
}
END_TEST

START_TEST(test_reinsert)
{
	/* A node removed and inserted again comes back as new and unvisited. */
	setup_n(3);
	sieve_hit(&nodes[0]);
	sieve_remove(&q, &nodes[0]);
	sieve_insert(&q, &nodes[0]);
	ck_assert_uint_eq(nodes[0].visited, 0);
	ck_assert_uint_eq(q.n, 3);
	ck_assert_uint_eq(evict(), 1);
	ck_assert_uint_eq(evict(), 2);
	ck_assert_uint_eq(evict(), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("evict");
	TCase *tc = tcase_create("sieve");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_fifo);
	tcase_add_test(tc, test_single);
	tcase_add_test(tc, test_visited_survives_once);
	tcase_add_test(tc, test_all_visited);
	tcase_add_test(tc, test_hit_after_pass);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_refused_visited);
	tcase_add_test(tc, test_max_scan);
	tcase_add_test(tc, test_remove_hand);
	tcase_add_test(tc, test_remove_hand_newest);
	tcase_add_test(tc, test_wrap_and_new);
	tcase_add_test(tc, test_reinsert);
	suite_add_tcase(s, tc);

	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
