/* SPDX-License-Identifier: MIT */
/*
 * Rings in one process: the index protocol without concurrency.  Both
 * ends share one region; the shared indices are poked directly through
 * the views' pointers to stage wraparound and impossible indices.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <shmq/shmq.h>

#include "unit.h"

#define APP_MAGIC 0x52494e47u
#define CAP	  16u
#define ESZ	  64u

struct ent {
	uint64_t seq;
	uint8_t payload[ESZ - 8];
};

static struct shmq_region *region;
static struct shmq_ring prod, cons;

static void setup(void)
{
	const struct shmq_part_spec spec = {
		.kind = SHMQ_PART_RING, .id = 1, .entry_size = ESZ, .capacity = CAP
	};

	ck_assert_int_eq(shmq_region_create("ring", APP_MAGIC, 0, &spec, 1, &region), 0);
	ck_assert_int_eq(shmq_ring_init(&prod, region, 1, SHMQ_PRODUCER), 0);
	ck_assert_int_eq(shmq_ring_init(&cons, region, 1, SHMQ_CONSUMER), 0);
}

static void teardown(void)
{
	shmq_region_destroy(region);
	region = NULL;
}

static void fill(uint32_t idx, uint64_t seq)
{
	struct ent *e = shmq_ring_entry(&prod, idx);

	e->seq = seq;
	memset(e->payload, (int)seq, sizeof(e->payload));
}

/* Reserve exactly @n, fill with seq, seq+1, ..., commit; returns first index. */
static uint32_t produce(uint32_t n, uint64_t seq)
{
	uint32_t idx;

	ck_assert_int_eq(shmq_prod_reserve(&prod, n, &idx), (int)n);
	for (uint32_t i = 0; i < n; i++)
		fill(idx + i, seq + i);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), (int)n);
	return idx;
}

/* Peek exactly @n, check seq, seq+1, ..., release. */
static void consume(uint32_t n, uint64_t seq)
{
	uint32_t idx;

	ck_assert_int_eq(shmq_cons_peek(&cons, n, &idx), (int)n);
	for (uint32_t i = 0; i < n; i++) {
		const struct ent *e = shmq_ring_entry(&cons, idx + i);

		ck_assert_uint_eq(e->seq, seq + i);
		ck_assert_uint_eq(e->payload[sizeof(e->payload) - 1], (uint8_t)(seq + i));
	}
	shmq_cons_release(&cons, n);
}

START_TEST(test_single)
{
	uint32_t idx = 77;

	ck_assert_uint_eq(shmq_ring_capacity(&prod), CAP);
	ck_assert_int_eq(shmq_cons_peek(&cons, 1, &idx), 0);
	ck_assert_uint_eq(produce(1, 100), 0);
	consume(1, 100);
	ck_assert_int_eq(shmq_cons_peek(&cons, 1, &idx), 0);
	ck_assert_uint_eq(*prod.p_tail, 1);
	ck_assert_uint_eq(*cons.p_head, 1);
}
END_TEST

START_TEST(test_batch)
{
	uint32_t idx, idx2;

	/* Two reservations, one commit: the second continues the first. */
	ck_assert_int_eq(shmq_prod_reserve(&prod, 3, &idx), 3);
	ck_assert_int_eq(shmq_prod_reserve(&prod, 2, &idx2), 2);
	ck_assert_uint_eq(idx2, idx + 3);
	for (uint32_t i = 0; i < 5; i++)
		((struct ent *)shmq_ring_entry(&prod, idx + i))->seq = i;

	/* Nothing is visible before the commit, and the tail did not move. */
	ck_assert_int_eq(shmq_cons_peek(&cons, 8, &idx2), 0);
	ck_assert_uint_eq(*prod.p_tail, 0);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 5);
	ck_assert_uint_eq(*prod.p_tail, 5);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 0);

	/* Peek is idempotent until release; it caps at max. */
	ck_assert_int_eq(shmq_cons_peek(&cons, 3, &idx), 3);
	ck_assert_uint_eq(idx, 0);
	ck_assert_int_eq(shmq_cons_peek(&cons, 100, &idx), 5);
	ck_assert_uint_eq(idx, 0);
	shmq_cons_release(&cons, 2);
	ck_assert_uint_eq(*cons.p_head, 2);
	ck_assert_int_eq(shmq_cons_peek(&cons, 100, &idx), 3);
	ck_assert_uint_eq(idx, 2);
	ck_assert_uint_eq(((struct ent *)shmq_ring_entry(&cons, idx))->seq, 2);
	ck_assert_int_eq(shmq_prod_inflight(&prod), 3);
	shmq_cons_release(&cons, 3);
	ck_assert_int_eq(shmq_prod_inflight(&prod), 0);
}
END_TEST

START_TEST(test_cancel)
{
	uint32_t idx;

	/* Give back the tail end of a reservation: the rest commits. */
	ck_assert_int_eq(shmq_prod_reserve(&prod, 5, &idx), 5);
	fill(idx, 40);
	fill(idx + 1, 41);
	shmq_prod_cancel(&prod, 3);
	ck_assert_uint_eq(shmq_prod_space_cached(&prod), CAP - 2);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 2);
	ck_assert_uint_eq(*prod.p_tail, 2);

	/* The next reservation reuses the cancelled slots. */
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), 1);
	ck_assert_uint_eq(idx, 2);
	/* More than reserved cancels all of it; nothing is published. */
	shmq_prod_cancel(&prod, 100);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 0);
	ck_assert_uint_eq(*prod.p_tail, 2);
	shmq_prod_cancel(&prod, 1);
	ck_assert_uint_eq(shmq_prod_space_cached(&prod), CAP - 2);
	consume(2, 40);
}
END_TEST

START_TEST(test_full)
{
	uint32_t idx;

	ck_assert_uint_eq(shmq_prod_space_cached(&prod), CAP);
	/* Asking for more than fits reserves what fits. */
	ck_assert_int_eq(shmq_prod_reserve(&prod, CAP + 5, &idx), (int)CAP);
	ck_assert_uint_eq(shmq_prod_space_cached(&prod), 0);
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), 0);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), (int)CAP);
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), 0);
	ck_assert_int_eq(shmq_prod_inflight(&prod), (int)CAP);

	/* The cached view lags until the producer needs more room. */
	ck_assert_int_eq(shmq_cons_peek(&cons, 1, &idx), 1);
	shmq_cons_release(&cons, 1);
	ck_assert_uint_eq(shmq_prod_space_cached(&prod), 0);
	ck_assert_int_eq(shmq_prod_reserve(&prod, 2, &idx), 1);
	ck_assert_uint_eq(idx, CAP);
	ck_assert_uint_eq(shmq_prod_space_cached(&prod), 0);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 1);
	ck_assert_int_eq(shmq_cons_peek(&cons, UINT32_MAX, &idx), (int)CAP);
}
END_TEST

START_TEST(test_release_clamped)
{
	uint32_t idx;

	produce(3, 0);
	ck_assert_int_eq(shmq_cons_peek(&cons, 3, &idx), 3);
	/* Releasing more than was seen never moves head past the tail. */
	shmq_cons_release(&cons, 10);
	ck_assert_uint_eq(*cons.p_head, 3);
	ck_assert_int_eq(shmq_prod_inflight(&prod), 0);
	shmq_cons_release(&cons, 1);
	ck_assert_uint_eq(*cons.p_head, 3);
}
END_TEST

START_TEST(test_entry_mask)
{
	/* Free-running indices map onto slots by the mask. */
	ck_assert_ptr_eq(shmq_ring_entry(&prod, 3), shmq_ring_entry(&prod, 3 + CAP));
	ck_assert_ptr_eq(shmq_ring_entry(&prod, UINT32_MAX), shmq_ring_entry(&prod, CAP - 1));
	ck_assert_int_eq(
		(uint8_t *)shmq_ring_entry(&prod, 1) - (uint8_t *)shmq_ring_entry(&prod, 0), ESZ);
	ck_assert_ptr_eq(shmq_ring_entry(&prod, 0), shmq_ring_entry(&cons, 0));
}
END_TEST

/*
 * Start both ends just below 2^32 and run well past it in uneven
 * batches; every entry must come out once, in order.
 */
START_TEST(test_wraparound)
{
	const uint32_t start = 0xFFFFFFF0u;
	uint64_t sent = 0, got = 0;
	uint32_t idx;

	*prod.p_tail = start;
	*cons.p_head = start;
	ck_assert_int_eq(shmq_ring_init(&prod, region, 1, SHMQ_PRODUCER), 0);
	ck_assert_int_eq(shmq_ring_init(&cons, region, 1, SHMQ_CONSUMER), 0);
	ck_assert_uint_eq(shmq_prod_space_cached(&prod), CAP);

	/* Fill exactly to the wrap point: a full ring across 2^32. */
	ck_assert_uint_eq(produce(CAP, 0), start);
	sent = CAP;
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), 0);
	ck_assert_uint_eq(*prod.p_tail, 0);
	ck_assert_int_eq(shmq_prod_inflight(&prod), (int)CAP);
	consume(5, got);
	got += 5;

	for (unsigned round = 0; round < 200; round++) {
		uint32_t n = 1 + round % 7;

		if (shmq_prod_space_cached(&prod) < n)
			shmq_prod_inflight(&prod);
		if (shmq_prod_space_cached(&prod) >= n) {
			produce(n, sent);
			sent += n;
		}
		n = 1 + round % 5;
		if (sent - got >= n) {
			consume(n, got);
			got += n;
		}
	}
	consume((uint32_t)(sent - got), got);
	ck_assert_uint_gt(sent, 2 * CAP);
	/* The shared indices wrapped and agree. */
	ck_assert_uint_eq(*prod.p_tail, (uint32_t)(start + sent));
	ck_assert_uint_eq(*cons.p_head, (uint32_t)(start + sent));
	ck_assert_uint_lt(*prod.p_tail, start);
}
END_TEST

START_TEST(test_init_eproto)
{
	struct shmq_ring r;
	uint32_t idx;

	/* A tail more than capacity past the head: neither end may start. */
	*prod.p_tail = CAP + 1;
	ck_assert_int_eq(shmq_ring_init(&r, region, 1, SHMQ_PRODUCER), -EPROTO);
	ck_assert_int_eq(shmq_ring_init(&r, region, 1, SHMQ_CONSUMER), -EPROTO);
	/* A head past the tail is the same thing seen from the other side. */
	*prod.p_tail = 5;
	*cons.p_head = 6;
	ck_assert_int_eq(shmq_ring_init(&r, region, 1, SHMQ_CONSUMER), -EPROTO);
	/* Exactly full is fine, across the wrap too. */
	*prod.p_tail = CAP - 3;
	*cons.p_head = (uint32_t)-3;
	ck_assert_int_eq(shmq_ring_init(&r, region, 1, SHMQ_CONSUMER), 0);
	ck_assert_int_eq(shmq_cons_peek(&r, UINT32_MAX, &idx), (int)CAP);
	ck_assert_uint_eq(idx, (uint32_t)-3);
}
END_TEST

START_TEST(test_tail_eproto)
{
	uint32_t idx;

	/* The tail claims more than capacity entries. */
	*prod.p_tail = CAP + 1;
	ck_assert_int_eq(shmq_cons_peek(&cons, 1, &idx), -EPROTO);
	*prod.p_tail = 0x80000000u;
	ck_assert_int_eq(shmq_cons_peek(&cons, 1, &idx), -EPROTO);
	/* Not followed: our head stayed where it was, and release is a no-op. */
	shmq_cons_release(&cons, 1);
	ck_assert_uint_eq(*cons.p_head, 0);
	/* A fixed tail is believed again. */
	*prod.p_tail = CAP;
	ck_assert_int_eq(shmq_cons_peek(&cons, UINT32_MAX, &idx), (int)CAP);

	/* A tail that moves backwards, below what we already saw. */
	*prod.p_tail = 2;
	ck_assert_int_eq(shmq_cons_peek(&cons, UINT32_MAX, &idx), -EPROTO);
}
END_TEST

START_TEST(test_head_eproto)
{
	uint32_t idx;

	produce(CAP, 0);
	/* The head claims the consumer read entries never committed. */
	*cons.p_head = CAP + 1;
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), -EPROTO);
	ck_assert_int_eq(shmq_prod_inflight(&prod), -EPROTO);
	*cons.p_head = (uint32_t)-1;
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), -EPROTO);
	/* Nothing was reserved by the failed calls. */
	*cons.p_head = 4;
	ck_assert_int_eq(shmq_prod_reserve(&prod, 100, &idx), 4);
	ck_assert_uint_eq(idx, CAP);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 4);
	/* A head that moves backwards from what we saw (4 -> 2). */
	*cons.p_head = 2;
	ck_assert_int_eq(shmq_prod_inflight(&prod), -EPROTO);
}
END_TEST

/*
 * A head that moves back but stays within capacity of the tail passes a
 * plain "tail - head <= capacity" check; with entries reserved on the
 * strength of the later head, believing it would make the free count
 * negative (wrapping to a huge reservation over unread entries).
 */
START_TEST(test_head_back_within_capacity)
{
	uint32_t idx;

	produce(CAP, 0);
	consume(8, 0);
	/* Reserve the 8 freed slots: the producer now relies on head == 8. */
	ck_assert_int_eq(shmq_prod_reserve(&prod, 4, &idx), 4);
	ck_assert_int_eq(shmq_prod_reserve(&prod, 4, &idx), 4);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 8);
	ck_assert_int_eq(shmq_prod_reserve(&prod, 0, &idx), 0);
	/* tail 24, head back from 8 to 6: 18 > 16 in flight, plainly bad. */
	*cons.p_head = 6;
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), -EPROTO);

	/* Now with reservations pending: tail 24 + 2 reserved, head 10 -> 9. */
	*cons.p_head = 10;
	ck_assert_int_eq(shmq_prod_reserve(&prod, 2, &idx), 2);
	ck_assert_uint_eq(shmq_prod_space_cached(&prod), 0);
	*cons.p_head = 9;
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), -EPROTO);
	ck_assert_int_eq(shmq_prod_inflight(&prod), -EPROTO);
	ck_assert_uint_eq(shmq_prod_space_cached(&prod), 0);
}
END_TEST

UNIT_TESTS(test_single, test_batch, test_cancel, test_full, test_release_clamped, test_entry_mask,
	   test_wraparound, test_init_eproto, test_tail_eproto, test_head_eproto,
	   test_head_back_within_capacity)

const struct unit_suite unit_suite = {
	.name = "shmq-ring",
	.setup = setup,
	.teardown = teardown,
	.add_tests = add_tests,
};
