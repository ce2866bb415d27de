/* SPDX-License-Identifier: MIT */
/*
 * kill -9 in the middle of a write storm, again and again (50 rounds, or
 * $KVSTASH_SSD_CRASH_ROUNDS): a child process opens the SSD tier on the
 * same file (recovering what the last round left), writes blocks whose
 * payloads derive from their keys and reports each completed write over
 * a pipe; the parent SIGKILLs it after a random number of completions,
 * reopens the file and reads back every block the index offers.  Pass:
 * zero mismatching bytes over all rounds (a torn or stale block may only
 * be a miss), and every acknowledged write is found except at most the
 * queue depth of the open region's tail (whose chain a write still in
 * flight interrupted).  Half the rounds the parent itself stops
 * uncleanly too, so recovery runs after recovery.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ssdtest.h"

#define MiB	  (1ull << 20)
#define PER_CHILD 120u
#define DEPTH	  8u
#define MINLEN	  4096u
#define MAXLEN	  150000u

static int ack_fd = -1;

static void child_write_done(void *arg, void *cookie, int res)
{
	uint64_t key = (uint64_t)(uintptr_t)cookie;

	void **slot = &((void **)arg)[key % 64];

	free(*slot);
	/* Pairs with the load-acquire in child(): the slot may be reused. */
	__atomic_store_n(slot, NULL, __ATOMIC_RELEASE);
	if (res == 0 && write(ack_fd, &key, sizeof(key)) != sizeof(key))
		_exit(3);
}

static void child_read_done(void *arg, void *cookie, int res)
{
}

/* The child: recover, then write PER_CHILD blocks, DEPTH at a time, until killed. */
static void child(struct st *t, uint64_t base)
{
	static void *bufs[64];
	char err[256];
	uint8_t ident[SSD_NS_MAX];
	struct ssd *ssd;
	uint32_t ns;
	int n;

	t->cfg.cb_arg = bufs;
	t->cfg.write_done = child_write_done;
	t->cfg.read_done = child_read_done;
	t->cfg.log = NULL;
	if (ssd_open(&t->cfg, &ssd, err, sizeof(err)) < 0) {
		fprintf(stderr, "child: %s\n", err);
		_exit(2);
	}
	if (ssd_wait_recovered(ssd, ST_TIMEOUT_MS) < 0)
		_exit(2);
	n = ssd_ns_ident("crash-model", 0x1234abcdull, 4096, 1, false, ident);
	if (n < 0 || ssd_ns(ssd, ident, (size_t)n, &ns) < 0)
		_exit(2);
	for (uint64_t i = base; i < base + PER_CHILD; i++) {
		uint32_t len = st_len(i, MINLEN, MAXLEN);
		uint8_t key[16];
		void *buf;
		struct ssd_write w = { .ns = ns,
				       .key = key,
				       .len = len,
				       .value = 1,
				       .hits = 1,
				       .cookie = (void *)(uintptr_t)i };

		/* At most DEPTH in flight: wait for the buffer slot to come back. */
		while (__atomic_load_n(&bufs[i % 64], __ATOMIC_ACQUIRE) ||
		       __atomic_load_n(&bufs[(i + 64 - DEPTH) % 64], __ATOMIC_ACQUIRE))
			usleep(100);
		if (posix_memalign(&buf, 512, len))
			_exit(2);
		st_fill(i, buf, len);
		st_key(i, key);
		w.buf = buf;
		__atomic_store_n(&bufs[i % 64], buf, __ATOMIC_RELEASE);
		if (ssd_write(ssd, &w, NULL) != 0)
			_exit(4);
	}
	ssd_wait_idle(ssd, ST_TIMEOUT_MS);
	pause(); /* wait to be killed: the parent decides when */
	_exit(0);
}

START_TEST(test_kill9_storm)
{
	const char *env = getenv("KVSTASH_SSD_CRASH_ROUNDS");
	unsigned rounds = env ? (unsigned)atoi(env) : 50;
	struct st t = { 0 };
	unsigned total_found = 0, total_acked = 0, total_bad = 0;
	unsigned seed = (unsigned)getpid();

	st_config(&t, 1, 24 * MiB, 1 * MiB);
	t.cfg.queue_depth = DEPTH;
	t.quiet = true;
	for (unsigned round = 0; round < rounds; round++) {
		uint64_t base = (uint64_t)round * PER_CHILD;
		unsigned target, acked = 0, found = 0, acked_found = 0;
		bool *is_acked = calloc(PER_CHILD, sizeof(bool));
		int pfd[2], status;
		pid_t pid;
		uint32_t ns;
		struct ssd_stats s;

		ck_assert_int_eq(pipe(pfd), 0);
		seed = seed * 1103515245u + 12345u;
		target = 1 + (seed >> 8) % (PER_CHILD - 20);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			close(pfd[0]);
			ack_fd = pfd[1];
			child(&t, base);
		}
		close(pfd[1]);
		/* Acknowledgements until the target, then kill -9 mid-storm. */
		while (acked < target) {
			struct pollfd p = { .fd = pfd[0], .events = POLLIN };
			uint64_t k;

			ck_assert_msg(poll(&p, 1, ST_TIMEOUT_MS) == 1, "round %u: child silent",
				      round);
			if (read(pfd[0], &k, sizeof(k)) != sizeof(k))
				break; /* the child died by itself */
			ck_assert(k >= base && k < base + PER_CHILD);
			is_acked[k - base] = true;
			acked++;
		}
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFSIGNALED(status), "round %u: child exited %d", round,
			      WEXITSTATUS(status));
		for (;;) { /* acks written before the kill */
			uint64_t k;

			if (read(pfd[0], &k, sizeof(k)) != sizeof(k))
				break;
			if (!is_acked[k - base]) {
				is_acked[k - base] = true;
				acked++;
			}
		}
		close(pfd[0]);

		ck_assert_int_eq(st_open(&t), 0);
		ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
		ns = st_ns(&t, "crash-model", 4096);
		/* Every block of every round so far: byte-exact or a miss, nothing else. */
		for (uint64_t i = 0; i < base + PER_CHILD; i++) {
			int r = st_get(&t, ns, i, st_len(i, MINLEN, MAXLEN));

			ck_assert_msg(r == 0 || r == -ENOENT || r == -EBADMSG, "key %llu: %d",
				      (unsigned long long)i, r);
			total_bad += r == -EBADMSG;
			if (i >= base) {
				found += r == 0;
				acked_found += r == 0 && is_acked[i - base];
			}
		}
		ssd_get_stats(t.ssd, &s);
		ck_assert_msg(acked_found + DEPTH >= acked,
			      "round %u: %u of %u acknowledged writes found after kill -9", round,
			      acked_found, acked);
		total_found += found;
		total_acked += acked;
		if (round % 2)
			st_abandon(&t);
		else
			st_close(&t);
		free(is_acked);
	}
	fprintf(stderr,
		"%u rounds: %u writes acknowledged, %u found, %u checksum misses, 0 wrong bytes\n",
		rounds, total_acked, total_found, total_bad);
	ck_assert_uint_gt(total_found, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssd-crash");
	TCase *tc = tcase_create("crash");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 900);
	tcase_add_test(tc, test_kill9_storm);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
