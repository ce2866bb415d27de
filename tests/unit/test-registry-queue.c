/* SPDX-License-Identifier: MIT */
/*
 * The registration queue (sidecar/cluster/queue.c): four producer threads
 * and one consumer, as the I/O workers and the control thread use it.
 *   - every entry is taken exactly once, each producer's in its order, at
 *     contiguous positions (what flush marks count on);
 *   - a full queue refuses at once and counts what it refused, never
 *     waits;
 *   - wake-ups: a consumer that armed the wake and sleeps on the eventfd
 *     is always woken by a producer (a lost wake-up would leave the
 *     consumer asleep with entries queued: the test's generous poll would
 *     time out and fail).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cluster/queue.h"
#include "unit.h"

#define PRODUCERS 4
#define PER	  50000u

static struct rq q;
static uint8_t ns[16];

struct prod {
	uint32_t id;
	uint64_t refused;
};

static void *producer(void *p)
{
	struct prod *w = p;
	uint8_t k[8][16];

	for (uint32_t i = 0; i < PER;) {
		uint32_t n = 1 + (i % 8), got;

		if (n > PER - i)
			n = PER - i;
		for (uint32_t j = 0; j < n; j++) {
			uint32_t v = i + j;

			memcpy(k[j], &w->id, 4);
			memcpy(k[j] + 4, &v, 4);
		}
		got = rq_push(&q, RQ_INSERT, NULL, ns, (const uint8_t(*)[16])k, n);
		/* Refused ones are re-offered: a producer that retries sees no loss. */
		w->refused += n - got;
		i += got;
	}
	return NULL;
}

START_TEST(test_mpsc_order_and_wake)
{
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_t t[PRODUCERS];
	struct prod p[PRODUCERS];
	uint32_t next[PRODUCERS] = { 0 };
	uint64_t taken = 0, pos = 0, refused = 0, sleeps = 0;
	struct rq_item it;

	ck_assert_int_ge(efd, 0);
	ck_assert_int_eq(rq_init(&q, 256, 0, efd), 0);
	for (uint32_t i = 0; i < PRODUCERS; i++) {
		p[i] = (struct prod){ i, 0 };
		ck_assert_int_eq(pthread_create(&t[i], NULL, producer, &p[i]), 0);
	}
	while (taken < (uint64_t)PRODUCERS * PER) {
		if (rq_pop(&q, &it)) {
			uint32_t id, v;

			memcpy(&id, it.key, 4);
			memcpy(&v, it.key + 4, 4);
			ck_assert_uint_lt(id, PRODUCERS);
			ck_assert_uint_eq(v, next[id]);
			ck_assert_uint_eq(it.pos, pos);
			next[id]++;
			pos++;
			taken++;
			continue;
		}
		if (rq_arm_wake(&q))
			continue;
		/* Asleep until a producer wakes us; 20 s means the wake-up was lost. */
		struct pollfd pfd = { efd, POLLIN, 0 };
		uint64_t v;

		ck_assert_msg(poll(&pfd, 1, 20000) == 1, "lost wake-up with %lu entries to go",
			      (unsigned long)((uint64_t)PRODUCERS * PER - taken));
		ck_assert_int_eq(read(efd, &v, sizeof(v)), sizeof(v));
		sleeps++;
	}
	for (uint32_t i = 0; i < PRODUCERS; i++) {
		pthread_join(t[i], NULL);
		refused += p[i].refused;
	}
	ck_assert(!rq_pop(&q, &it));
	ck_assert_uint_eq(rq_tail(&q), (uint64_t)PRODUCERS * PER);
	ck_assert_uint_eq(__atomic_load_n(&q.overflow, __ATOMIC_RELAXED), refused);
	ck_assert_uint_eq(__atomic_load_n(&q.enqueued, __ATOMIC_RELAXED),
			  (uint64_t)PRODUCERS * PER);
	rq_fini(&q);
	close(efd);
}
END_TEST

START_TEST(test_full_refuses_and_counts)
{
	uint8_t k[100][16];
	struct rq_item it;

	memset(k, 0, sizeof(k));
	ck_assert_int_eq(rq_init(&q, 100, 0, -1), -EINVAL);
	ck_assert_int_eq(rq_init(&q, 64, 0, -1), 0);
	ck_assert_uint_eq(rq_push(&q, RQ_INSERT, NULL, ns, (const uint8_t(*)[16])k, 100), 64);
	ck_assert_uint_eq(rq_push(&q, RQ_REMOVE, NULL, ns, (const uint8_t(*)[16])k, 10), 0);
	ck_assert_uint_eq(q.overflow, 46);
	ck_assert_uint_eq(rq_depth(&q), 64);
	ck_assert(rq_pop(&q, &it));
	ck_assert_uint_eq(it.op, RQ_INSERT);
	/* One taken, one room: positions keep counting. */
	ck_assert_uint_eq(rq_push(&q, RQ_REMOVE, NULL, ns, (const uint8_t(*)[16])k, 2), 1);
	ck_assert_uint_eq(rq_tail(&q), 65);
	for (int i = 0; i < 64; i++)
		ck_assert(rq_pop(&q, &it));
	ck_assert_uint_eq(it.op, RQ_REMOVE);
	ck_assert_uint_eq(it.pos, 64);
	ck_assert(!rq_pop(&q, &it));
	rq_fini(&q);
}
END_TEST

/*
 * The cells kept for marks: changes stop @reserve cells short of full, a
 * mark takes one of them, and a mark is refused only with no cell at all.
 * Entries keep their tags and their positions.
 */
START_TEST(test_reserve_for_marks)
{
	uint8_t k[64][16];
	int tag_a, tag_m;
	struct rq_item it;

	memset(k, 0, sizeof(k));
	ck_assert_int_eq(rq_init(&q, 64, 64, -1), -EINVAL);
	ck_assert_int_eq(rq_init(&q, 64, 4, -1), 0);
	ck_assert_uint_eq(rq_push(&q, RQ_INSERT, &tag_a, ns, (const uint8_t(*)[16])k, 64), 60);
	ck_assert_uint_eq(q.overflow, 4);
	for (int i = 0; i < 4; i++)
		ck_assert(rq_push_mark(&q, &tag_m));
	ck_assert(!rq_push_mark(&q, &tag_m));
	ck_assert(rq_pop(&q, &it));
	ck_assert_ptr_eq(it.tag, &tag_a);
	ck_assert_uint_eq(it.op, RQ_INSERT);
	/* One cell free, but it is the reserve's: a change is refused, a mark is not. */
	ck_assert_uint_eq(rq_push(&q, RQ_REMOVE, &tag_a, ns, (const uint8_t(*)[16])k, 1), 0);
	ck_assert(rq_push_mark(&q, &tag_m));
	for (int i = 1; i < 60; i++)
		ck_assert(rq_pop(&q, &it));
	for (int i = 0; i < 5; i++) {
		ck_assert(rq_pop(&q, &it));
		ck_assert_uint_eq(it.op, RQ_MARK);
		ck_assert_ptr_eq(it.tag, &tag_m);
		ck_assert_uint_eq(it.pos, 60 + (uint64_t)i);
	}
	ck_assert(!rq_pop(&q, &it));
	ck_assert_uint_eq(rq_push(&q, RQ_REMOVE, NULL, ns, (const uint8_t(*)[16])k, 1), 1);
	rq_fini(&q);
}
END_TEST

UNIT_TESTS(test_mpsc_order_and_wake, test_full_refuses_and_counts, test_reserve_for_marks)

const struct unit_suite unit_suite = {
	.name = "registry-queue",
	.timeout_s = 120,
	.add_tests = add_tests,
};
