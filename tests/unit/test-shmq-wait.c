/* SPDX-License-Identifier: MIT */
/*
 * Sleeping and waking: timeouts, the NEED_WAKEUP handshake across
 * processes, shmq_wait_many() on futex_waitv and on its polling fallback.
 *
 * Timing is only checked one way: a timed-out wait must not return early,
 * and must return at all (a generous upper bound, since the box may be
 * loaded).  Cross-process wakes are checked by a child producer that
 * waits until it SEES the parent's NEED_WAKEUP flag before producing, so
 * the parent is known to be asleep (or about to be) when the wake comes.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <shmq/shmq.h>

#include "unit.h"

#define APP_MAGIC 0x57414954u
#define MS	  1000000LL
#define SEC	  (1000 * MS)
#define NR_RINGS  3

/* Child exit codes. */
#define CHILD_OK      0
#define CHILD_NO_FLAG 10
#define CHILD_NO_WAKE 11
#define CHILD_SETUP   12

static struct shmq_region *region;
static struct shmq_ring prod[NR_RINGS], cons[NR_RINGS];

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / SEC, .tv_nsec = ns % SEC };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void setup(void)
{
	struct shmq_part_spec spec[NR_RINGS];

	for (unsigned i = 0; i < NR_RINGS; i++)
		spec[i] = (struct shmq_part_spec){
			.kind = SHMQ_PART_RING, .id = i, .entry_size = 64, .capacity = 8
		};
	ck_assert_int_eq(shmq_region_create("wait", APP_MAGIC, 0, spec, NR_RINGS, &region), 0);
	for (unsigned i = 0; i < NR_RINGS; i++) {
		ck_assert_int_eq(shmq_ring_init(&prod[i], region, i, SHMQ_PRODUCER), 0);
		ck_assert_int_eq(shmq_ring_init(&cons[i], region, i, SHMQ_CONSUMER), 0);
	}
}

static void teardown(void)
{
	shmq_region_destroy(region);
	region = NULL;
}

static void produce_one(struct shmq_ring *r, unsigned flags)
{
	uint32_t idx;

	ck_assert_int_eq(shmq_prod_reserve(r, 1, &idx), 1);
	memset(shmq_ring_entry(r, idx), 0x5a, 64);
	ck_assert_int_eq(shmq_prod_commit(r, flags), 1);
}

static uint32_t flags_of(const struct shmq_ring *r)
{
	return __atomic_load_n(r->p_flags, __ATOMIC_ACQUIRE);
}

/*
 * Fork a producer for ring @id that attaches through the fd like a real
 * peer, waits until the consumer has set NEED_WAKEUP (or, with
 * @delay_ns, just sleeps that long), commits one entry and wakes.
 */
static pid_t spawn_producer(struct shmq_region *rg, uint32_t id, int64_t delay_ns)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct shmq_region *mine;
		struct shmq_ring r;
		uint32_t idx;
		int64_t give_up = now_ns() + 20 * SEC;

		if (shmq_region_attach(shmq_region_fd(rg), APP_MAGIC, &mine) < 0 ||
		    shmq_ring_init(&r, mine, id, SHMQ_PRODUCER) < 0)
			_exit(CHILD_SETUP);
		if (delay_ns) {
			sleep_ns(delay_ns);
		} else {
			while (!(__atomic_load_n(r.p_flags, __ATOMIC_ACQUIRE) &
				 SHMQ_RING_NEED_WAKEUP)) {
				if (now_ns() > give_up)
					_exit(CHILD_NO_FLAG);
				sleep_ns(MS / 10);
			}
		}
		if (shmq_prod_reserve(&r, 1, &idx) != 1)
			_exit(CHILD_SETUP);
		memset(shmq_ring_entry(&r, idx), 0x5a, 64);
		shmq_prod_commit(&r, SHMQ_COMMIT_NOWAKE);
		if (!delay_ns && shmq_prod_wake(&r) != 1)
			_exit(CHILD_NO_WAKE);
		if (delay_ns)
			shmq_prod_wake(&r);
		_exit(CHILD_OK);
	}
	return pid;
}

static void reap(pid_t pid)
{
	int status;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status), "child died");
	ck_assert_int_eq(WEXITSTATUS(status), CHILD_OK);
}

START_TEST(test_timeout)
{
	int64_t t0;

	t0 = now_ns();
	ck_assert_int_eq(shmq_cons_wait(&cons[0], 50 * MS), -ETIMEDOUT);
	ck_assert_int_ge(now_ns() - t0, 50 * MS);
	ck_assert_int_lt(now_ns() - t0, 10 * SEC);
	ck_assert_uint_eq(flags_of(&cons[0]), 0);

	/* A zero timeout only looks. */
	ck_assert_int_eq(shmq_cons_wait(&cons[0], 0), -ETIMEDOUT);
	ck_assert_int_eq(shmq_cons_wait(&cons[0], -2), -EINVAL);
	/* Only a consumer view may sleep. */
	ck_assert_int_eq(shmq_cons_wait(&prod[0], MS), -EINVAL);

	t0 = now_ns();
	ck_assert_int_eq(shmq_cons_wait_adaptive(
				 &cons[0],
				 &(struct shmq_spin){ .spin_ns = 5 * MS, .sleep_ns = 7 * MS },
				 50 * MS),
			 -ETIMEDOUT);
	ck_assert_int_ge(now_ns() - t0, 50 * MS);
	ck_assert_int_lt(now_ns() - t0, 10 * SEC);
	ck_assert_uint_eq(flags_of(&cons[0]), 0);
	ck_assert_int_eq(
		shmq_cons_wait_adaptive(&cons[0], &(struct shmq_spin){ .spin_ns = -1 }, MS),
		-EINVAL);
}
END_TEST

START_TEST(test_ready_returns_at_once)
{
	produce_one(&prod[0], 0);
	produce_one(&prod[0], 0);
	ck_assert_int_eq(shmq_cons_wait(&cons[0], SHMQ_WAIT_FOREVER), 2);
	ck_assert_int_eq(shmq_cons_wait_adaptive(&cons[0], NULL, SHMQ_WAIT_FOREVER), 2);
	ck_assert_int_eq(shmq_cons_wait(&cons[0], 0), 2);
	/* Not sleeping, so no flag was ever raised. */
	ck_assert_uint_eq(flags_of(&cons[0]), 0);
}
END_TEST

START_TEST(test_wake_across_processes)
{
	int64_t t0 = now_ns();
	pid_t pid;

	/* The child produces only after it saw NEED_WAKEUP, then must wake us. */
	pid = spawn_producer(region, 0, 0);
	ck_assert_int_eq(shmq_cons_wait(&cons[0], 20 * SEC), 1);
	ck_assert_int_lt(now_ns() - t0, 20 * SEC);
	ck_assert_uint_eq(flags_of(&cons[0]), 0);
	reap(pid);

	/* Again, with the adaptive wait spinning first. */
	shmq_cons_release(&cons[0], 1);
	pid = spawn_producer(region, 0, 0);
	ck_assert_int_eq(
		shmq_cons_wait_adaptive(&cons[0],
					&(struct shmq_spin){ .spin_ns = MS, .sleep_ns = 20 * SEC },
					20 * SEC),
		1);
	ck_assert_uint_eq(flags_of(&cons[0]), 0);
	reap(pid);
}
END_TEST

START_TEST(test_wake_only_when_asked)
{
	uint32_t wake0 = *prod[0].p_wake;

	/* Flag clear: commit and wake make no system call. */
	produce_one(&prod[0], SHMQ_COMMIT_NOWAKE);
	ck_assert_int_eq(shmq_prod_wake(&prod[0]), 0);
	produce_one(&prod[0], 0);
	ck_assert_uint_eq(*prod[0].p_wake, wake0);

	/* Flag set (as a sleeping consumer leaves it): each wake bumps the word. */
	*cons[0].p_flags = SHMQ_RING_NEED_WAKEUP;
	ck_assert_int_eq(shmq_prod_wake(&prod[0]), 1);
	ck_assert_uint_eq(*prod[0].p_wake, wake0 + 1);
	produce_one(&prod[0], 0);
	ck_assert_uint_eq(*prod[0].p_wake, wake0 + 2);
	produce_one(&prod[0], SHMQ_COMMIT_NOWAKE);
	ck_assert_uint_eq(*prod[0].p_wake, wake0 + 2);
	/* An empty commit publishes nothing and wakes nobody. */
	ck_assert_int_eq(shmq_prod_commit(&prod[0], 0), 0);
	ck_assert_uint_eq(*prod[0].p_wake, wake0 + 2);
}
END_TEST

static void on_alarm(int sig)
{
	(void)sig;
}

START_TEST(test_eintr)
{
	struct sigaction sa = { .sa_handler = on_alarm };
	struct itimerval it = { .it_value = { .tv_usec = 50000 } };

	/* No SA_RESTART: a handled signal ends the sleep with -EINTR. */
	ck_assert_int_eq(sigaction(SIGALRM, &sa, NULL), 0);
	ck_assert_int_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	ck_assert_int_eq(shmq_cons_wait(&cons[0], 20 * SEC), -EINTR);
	ck_assert_uint_eq(flags_of(&cons[0]), 0);
	ck_assert_int_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	ck_assert_int_eq(shmq_wait_many((struct shmq_ring *[]){ &cons[0], &cons[1] }, 2, NULL, 0,
					20 * SEC, NULL),
			 -EINTR);
}
END_TEST

START_TEST(test_wait_many_ring)
{
	struct shmq_ring *rings[NR_RINGS] = { &cons[0], &cons[1], &cons[2] };
	int64_t t0 = now_ns();
	pid_t pid;

	/* Ring 1's producer waits for our flag: all three rings are armed. */
	pid = spawn_producer(region, 1, 0);
	ck_assert_int_eq(shmq_wait_many(rings, NR_RINGS, NULL, 0, 20 * SEC, NULL), 1);
	ck_assert_int_lt(now_ns() - t0, 20 * SEC);
	for (unsigned i = 0; i < NR_RINGS; i++)
		ck_assert_uint_eq(flags_of(&cons[i]), 0);
	reap(pid);

	/* Entries already there: the first ready ring, no sleep. */
	produce_one(&prod[2], 0);
	ck_assert_int_eq(shmq_wait_many(rings, NR_RINGS, NULL, 0, 0, NULL), 1);
	ck_assert_int_eq(shmq_wait_many(&rings[2], 1, NULL, 0, 0, NULL), 0);
}
END_TEST

struct bump {
	uint32_t word;
	int64_t delay_ns;
};

static void *bump_thread(void *arg)
{
	struct bump *b = arg;

	sleep_ns(b->delay_ns);
	/* Release pairs with the load-acquire of the extra word in shmq_wait_many(). */
	__atomic_store_n(&b->word, 1, __ATOMIC_RELEASE);
	shmq_wake_word(&b->word);
	return NULL;
}

START_TEST(test_wait_many_extra)
{
	struct shmq_ring *rings[NR_RINGS] = { &cons[0], &cons[1], &cons[2] };
	struct bump b = { .word = 0, .delay_ns = 50 * MS };
	pthread_t th;
	int64_t t0 = now_ns();

	ck_assert_int_eq(pthread_create(&th, NULL, bump_thread, &b), 0);
	ck_assert_int_eq(shmq_wait_many(rings, NR_RINGS, &b.word, 0, 20 * SEC, NULL), NR_RINGS);
	ck_assert_int_lt(now_ns() - t0, 20 * SEC);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	for (unsigned i = 0; i < NR_RINGS; i++)
		ck_assert_uint_eq(flags_of(&cons[i]), 0);

	/* No rings at all: a plain wait on the word. */
	b.word = 0;
	ck_assert_int_eq(pthread_create(&th, NULL, bump_thread, &b), 0);
	ck_assert_int_eq(shmq_wait_many(NULL, 0, &b.word, 0, 20 * SEC, NULL), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(shmq_wake_word(NULL), -EINVAL);
}
END_TEST

START_TEST(test_wait_many_timeout)
{
	struct shmq_ring *rings[NR_RINGS] = { &cons[0], &cons[1], &cons[2] };
	uint32_t word = 5;
	int64_t t0 = now_ns();

	ck_assert_int_eq(shmq_wait_many(rings, NR_RINGS, &word, 5, 50 * MS, NULL), -ETIMEDOUT);
	ck_assert_int_ge(now_ns() - t0, 50 * MS);
	ck_assert_int_lt(now_ns() - t0, 10 * SEC);
	for (unsigned i = 0; i < NR_RINGS; i++)
		ck_assert_uint_eq(flags_of(&cons[i]), 0);
	ck_assert_int_eq(shmq_wait_many(rings, NR_RINGS, NULL, 0, 0, NULL), -ETIMEDOUT);
}
END_TEST

START_TEST(test_wait_many_errors)
{
	struct shmq_ring *rings[NR_RINGS] = { &cons[0], &cons[1], &cons[2] };
	struct shmq_ring *mixed[2] = { &cons[0], &prod[1] };
	unsigned bad = 99;

	ck_assert_int_eq(shmq_wait_many(mixed, 2, NULL, 0, 0, NULL), -EINVAL);
	ck_assert_int_eq(shmq_wait_many(NULL, 2, NULL, 0, 0, NULL), -EINVAL);
	ck_assert_int_eq(shmq_wait_many(NULL, 0, NULL, 0, 0, NULL), -EINVAL);
	ck_assert_int_eq(shmq_wait_many(rings, NR_RINGS, NULL, 0, -5, NULL), -EINVAL);

	/* A ring whose tail is impossible is named, not followed. */
	*prod[2].p_tail = 1000;
	ck_assert_int_eq(shmq_wait_many(rings, NR_RINGS, NULL, 0, 20 * SEC, &bad), -EPROTO);
	ck_assert_uint_eq(bad, 2);
	ck_assert_int_eq(shmq_cons_wait(&cons[2], 20 * SEC), -EPROTO);
}
END_TEST

/*
 * More rings than futex_waitv takes: the polling fallback must still find
 * the ready one, honour the extra word and time out.
 */
#define NR_MANY	   130
#define PER_REGION SHMQ_MAX_PARTS

START_TEST(test_wait_many_poll)
{
	struct shmq_region *rg[(NR_MANY + PER_REGION - 1) / PER_REGION];
	static struct shmq_ring many[NR_MANY];
	struct shmq_ring *rings[NR_MANY];
	struct shmq_part_spec spec[PER_REGION];
	unsigned nr_rg = (NR_MANY + PER_REGION - 1) / PER_REGION;
	struct bump b = { .word = 0, .delay_ns = 30 * MS };
	pthread_t th;
	int64_t t0;
	pid_t pid;

	for (unsigned i = 0; i < PER_REGION; i++)
		spec[i] = (struct shmq_part_spec){
			.kind = SHMQ_PART_RING, .id = i, .entry_size = 8, .capacity = 2
		};
	for (unsigned g = 0; g < nr_rg; g++)
		ck_assert_int_eq(shmq_region_create("many", APP_MAGIC, 0, spec, PER_REGION, &rg[g]),
				 0);
	for (unsigned i = 0; i < NR_MANY; i++) {
		ck_assert_int_eq(
			shmq_ring_init(&many[i], rg[i / PER_REGION], i % PER_REGION, SHMQ_CONSUMER),
			0);
		rings[i] = &many[i];
	}

	t0 = now_ns();
	ck_assert_int_eq(shmq_wait_many(rings, NR_MANY, NULL, 0, 30 * MS, NULL), -ETIMEDOUT);
	ck_assert_int_ge(now_ns() - t0, 30 * MS);

	/* The last ring gets an entry from another process after a while. */
	pid = spawn_producer(rg[(NR_MANY - 1) / PER_REGION], (NR_MANY - 1) % PER_REGION, 30 * MS);
	ck_assert_int_eq(shmq_wait_many(rings, NR_MANY, NULL, 0, 20 * SEC, NULL), NR_MANY - 1);
	reap(pid);
	/* Polling never asks producers for wakes. */
	ck_assert_uint_eq(flags_of(&many[NR_MANY - 1]), 0);

	/* The extra word, also without futex_waitv; ring 129 is drained first. */
	shmq_cons_release(&many[NR_MANY - 1], 1);
	ck_assert_int_eq(pthread_create(&th, NULL, bump_thread, &b), 0);
	ck_assert_int_eq(shmq_wait_many(rings, NR_MANY, &b.word, 0, 20 * SEC, NULL), NR_MANY);
	ck_assert_int_eq(pthread_join(th, NULL), 0);

	for (unsigned g = 0; g < nr_rg; g++)
		shmq_region_destroy(rg[g]);
}
END_TEST

/*
 * Make futex_waitv fail with @err in this (forked) test process, the way
 * an old kernel (ENOSYS) or an old container seccomp profile (EPERM)
 * does.  Returns false where that cannot be arranged.
 */
static bool deny_futex_waitv(int err)
{
#ifdef SYS_futex_waitv
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_futex_waitv, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((uint32_t)err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(filter) / sizeof(filter[0]), .filter = filter };

	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
#else
	(void)err;
	return false;
#endif
}

static void wait_many_without_waitv(int err)
{
	struct shmq_ring *rings[NR_RINGS] = { &cons[0], &cons[1], &cons[2] };
	int64_t t0;
	pid_t pid;

	if (!deny_futex_waitv(err)) {
		fprintf(stderr, "cannot install a seccomp filter: not tested\n");
		return;
	}
	t0 = now_ns();
	ck_assert_int_eq(shmq_wait_many(rings, NR_RINGS, NULL, 0, 30 * MS, NULL), -ETIMEDOUT);
	ck_assert_int_ge(now_ns() - t0, 30 * MS);
	for (unsigned i = 0; i < NR_RINGS; i++)
		ck_assert_uint_eq(flags_of(&cons[i]), 0);

	pid = spawn_producer(region, 2, 30 * MS);
	ck_assert_int_eq(shmq_wait_many(rings, NR_RINGS, NULL, 0, 20 * SEC, NULL), 2);
	reap(pid);
	ck_assert_uint_eq(flags_of(&cons[2]), 0);
}

START_TEST(test_wait_many_enosys)
{
	wait_many_without_waitv(ENOSYS);
}
END_TEST

START_TEST(test_wait_many_seccomp_eperm)
{
	wait_many_without_waitv(EPERM);
}
END_TEST

UNIT_TESTS(test_timeout, test_ready_returns_at_once, test_wake_across_processes,
	   test_wake_only_when_asked, test_eintr, test_wait_many_ring, test_wait_many_extra,
	   test_wait_many_timeout, test_wait_many_errors, test_wait_many_poll,
	   test_wait_many_enosys, test_wait_many_seccomp_eperm)

const struct unit_suite unit_suite = {
	.name = "shmq-wait",
	.setup = setup,
	.teardown = teardown,
	.timeout_s = 60,
	.add_tests = add_tests,
};
