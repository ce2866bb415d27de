/* SPDX-License-Identifier: MIT */
/*
 * Stress: a producer and a consumer process over one memfd ring move
 * SHMQ_STRESS_ENTRIES (default 50 million) 64-byte entries, each carrying
 * a sequence number and a checksum of its payload.  The consumer copies
 * every entry out and checks it: no loss, no duplicate, no reordering, no
 * torn entry.
 *
 *   busy   both sides busy-poll; the consumer never raises NEED_WAKEUP,
 *          so the producer must never make a wake syscall
 *   sleep  the consumer sleeps in shmq_cons_wait() whenever the ring is
 *          empty; the producer pauses now and then so that it really does
 *          (and counts the wakes it had to make)
 *   thread the same with the producer in a thread of this process, so a
 *          thread sanitizer sees both sides and checks the ordering
 *
 * Batch sizes vary from 1 to 64 on both sides so batches straddle the
 * wrap of the ring in every way.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shmq/shmq.h>

#include "unit.h"

#define APP_MAGIC	0x53545253u
#define RING_ID		1
#define STATS_ID	2
#define CAPACITY	4096
#define DEFAULT_ENTRIES 50000000ull
/* Sleep mode: the producer pauses once per this many entries. */
#define PAUSE_EVERY (1u << 18)
#define PAUSE_NS    200000
#define SEC	    1000000000LL

enum mode { BUSY, SLEEP };

struct entry {
	uint64_t seq;
	uint64_t payload[6];
	uint64_t csum;
};
_Static_assert(sizeof(struct entry) == 64, "64-byte entries");

/* What the producer reports back, in an area of the region. */
struct stats {
	uint64_t produced;
	uint64_t wakes;
	uint64_t pauses;
	int64_t error;
};

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static uint64_t checksum(const struct entry *e)
{
	uint64_t h = e->seq * 0x9e3779b97f4a7c15ull;

	for (unsigned i = 0; i < 6; i++) {
		h = (h ^ e->payload[i]) * 0xff51afd7ed558ccdull;
		h ^= h >> 29;
	}
	return h;
}

static uint64_t nr_entries(void)
{
	const char *s = getenv("SHMQ_STRESS_ENTRIES");
	char *end;
	unsigned long long n;

	if (!s || !*s)
		return DEFAULT_ENTRIES;
	errno = 0;
	n = strtoull(s, &end, 0);
	ck_assert_msg(!errno && !*end && n > 0, "bad SHMQ_STRESS_ENTRIES=%s", s);
	return n;
}

static void pause_ns(long ns)
{
	struct timespec ts = { .tv_nsec = ns };

	nanosleep(&ts, NULL);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void produce(struct shmq_ring *r, uint64_t total, enum mode mode, struct stats *st)
{
	uint64_t rng = 0x2545f4914f6cdd1dull, seq = 0;

	while (seq < total) {
		uint64_t left = total - seq;
		uint32_t want = 1 + (uint32_t)(xorshift(&rng) >> 58), idx;
		int n;

		if (want > left)
			want = (uint32_t)left;
		n = shmq_prod_reserve(r, want, &idx);
		if (n < 0) {
			st->error = n;
			return;
		}
		if (n == 0) {
			relax();
			continue;
		}
		for (int i = 0; i < n; i++) {
			struct entry *e = shmq_ring_entry(r, idx + (uint32_t)i);

			e->seq = seq + (uint64_t)i;
			for (unsigned k = 0; k < 6; k++)
				e->payload[k] = xorshift(&rng);
			e->csum = checksum(e);
		}
		shmq_prod_commit(r, SHMQ_COMMIT_NOWAKE);
		st->wakes += (uint64_t)shmq_prod_wake(r);
		seq += (uint64_t)n;
		if (mode == SLEEP && seq % PAUSE_EVERY < (uint64_t)n) {
			pause_ns(PAUSE_NS);
			st->pauses++;
		}
	}
	st->produced = seq;
}

/* Returns the number of good entries received; stops at the first bad one. */
static uint64_t consume(struct shmq_ring *r, uint64_t total, enum mode mode, int *ret_err)
{
	uint64_t rng = 0x9e3779b97f4a7c15ull, expect = 0;

	while (expect < total) {
		uint32_t want = 1 + (uint32_t)(xorshift(&rng) >> 58), idx;
		int n = shmq_cons_peek(r, want, &idx);

		if (n < 0) {
			*ret_err = n;
			return expect;
		}
		if (n == 0) {
			if (mode == BUSY) {
				relax();
				continue;
			}
			/* A live producer commits well within this; else it died. */
			n = shmq_cons_wait(r, 30 * SEC);
			if (n < 0) {
				*ret_err = n;
				return expect;
			}
			continue;
		}
		for (int i = 0; i < n; i++) {
			struct entry e;

			/* Copy out, then check the private copy only. */
			memcpy(&e, shmq_ring_entry(r, idx + (uint32_t)i), sizeof(e));
			if (e.seq != expect || e.csum != checksum(&e)) {
				*ret_err = -EBADMSG;
				return expect;
			}
			expect++;
		}
		shmq_cons_release(r, (uint32_t)n);
	}
	*ret_err = 0;
	return expect;
}

struct setup {
	struct shmq_region *region;
	struct shmq_ring cons;
	struct stats *stats;
};

static void make_region(struct setup *s)
{
	const struct shmq_part_spec spec[] = {
		{ .kind = SHMQ_PART_RING, .id = RING_ID, .entry_size = 64, .capacity = CAPACITY },
		{ .kind = SHMQ_PART_AREA, .id = STATS_ID, .size = sizeof(struct stats) },
	};
	void *base;

	ck_assert_int_eq(shmq_region_create("stress", APP_MAGIC, 0, spec, 2, &s->region), 0);
	ck_assert_int_eq(shmq_ring_init(&s->cons, s->region, RING_ID, SHMQ_CONSUMER), 0);
	ck_assert_int_eq(shmq_region_area(s->region, STATS_ID, &base, NULL), 0);
	s->stats = base;
}

static void check_result(const char *name, struct setup *s, uint64_t total, uint64_t got, int err,
			 int64_t t0)
{
	double secs = (double)(now_ns() - t0) / 1e9;
	uint32_t idx;

	printf("%s: %" PRIu64 "/%" PRIu64 " entries in %.2f s (%.1f M/s), %" PRIu64
	       " wakes, %" PRIu64 " pauses\n",
	       name, got, total, secs, (double)got / secs / 1e6, s->stats->wakes, s->stats->pauses);
	ck_assert_msg(err == 0, "%s: consumer error %d after %" PRIu64 " entries", name, err, got);
	ck_assert_int_eq(s->stats->error, 0);
	ck_assert_uint_eq(got, total);
	ck_assert_uint_eq(s->stats->produced, total);
	/* Nothing beyond the last entry: no duplicate at the tail either. */
	ck_assert_int_eq(shmq_cons_peek(&s->cons, UINT32_MAX, &idx), 0);
}

static void run_processes(const char *name, enum mode mode)
{
	uint64_t total = nr_entries(), got;
	struct setup s;
	int status, err = 0;
	int64_t t0;
	pid_t pid;

	make_region(&s);
	t0 = now_ns();
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct shmq_region *mine;
		struct shmq_ring prod;
		void *base;

		/* The producer attaches through the fd, as a real peer would. */
		if (shmq_region_attach(shmq_region_fd(s.region), APP_MAGIC, &mine) < 0 ||
		    shmq_ring_init(&prod, mine, RING_ID, SHMQ_PRODUCER) < 0 ||
		    shmq_region_area(mine, STATS_ID, &base, NULL) < 0)
			_exit(2);
		produce(&prod, total, mode, base);
		_exit(0);
	}
	got = consume(&s.cons, total, mode, &err);
	if (err)
		kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(err || (WIFEXITED(status) && WEXITSTATUS(status) == 0), "producer failed");
	check_result(name, &s, total, got, err, t0);
	if (mode == BUSY)
		/* The consumer never slept, so a wake was never needed. */
		ck_assert_uint_eq(s.stats->wakes, 0);
	else
		/* It did sleep (the pauses saw to that), and was woken. */
		ck_assert_uint_gt(s.stats->wakes, 0);
	shmq_region_destroy(s.region);
}

START_TEST(test_stress_busy)
{
	run_processes("busy", BUSY);
}
END_TEST

START_TEST(test_stress_sleep)
{
	run_processes("sleep", SLEEP);
}
END_TEST

struct thread_arg {
	struct shmq_region *region;
	uint64_t total;
	struct stats *stats;
};

static void *producer_thread(void *p)
{
	struct thread_arg *a = p;
	struct shmq_ring prod;

	ck_assert_int_eq(shmq_ring_init(&prod, a->region, RING_ID, SHMQ_PRODUCER), 0);
	produce(&prod, a->total, SLEEP, a->stats);
	return NULL;
}

START_TEST(test_stress_threads)
{
	uint64_t total = nr_entries() / 10 + 1, got;
	struct thread_arg a;
	struct setup s;
	pthread_t th;
	int err = 0;
	int64_t t0;

	make_region(&s);
	a = (struct thread_arg){ .region = s.region, .total = total, .stats = s.stats };
	t0 = now_ns();
	ck_assert_int_eq(pthread_create(&th, NULL, producer_thread, &a), 0);
	got = consume(&s.cons, total, SLEEP, &err);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	check_result("threads", &s, total, got, err, t0);
	shmq_region_destroy(s.region);
}
END_TEST

UNIT_TESTS(test_stress_busy, test_stress_sleep, test_stress_threads)

const struct unit_suite unit_suite = {
	.name = "shmq-stress",
	.timeout_s = 600,
	.add_tests = add_tests,
};
