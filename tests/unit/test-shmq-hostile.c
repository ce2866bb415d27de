/* SPDX-License-Identifier: MIT */
/*
 * A hostile peer: a child process maps the region raw (not through
 * libshmq) and scribbles over the shared indices, the flags and wake
 * words and the header while this process produces and consumes.  Every
 * call must return a legal value (a count within the ring, or -EPROTO),
 * no wait may overrun its timeout, and nothing may crash; built with
 * AddressSanitizer an access outside the ring fails the test too.
 *
 * The benign cases are checked separately: corruption that an honest
 * peer could also have produced (a spurious NEED_WAKEUP, a moved wake
 * word, garbage in entries, any change to the header after attach) must
 * leave the ring working.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shmq/shmq.h>

#include "unit.h"

#define APP_MAGIC   0x484f5354u
#define RING_ID	    4
#define AREA_ID	    5
#define CAP	    64u
#define MS	    1000000LL
#define SEC	    (1000 * MS)
#define SCRIBBLE_NS (800 * MS)

static struct shmq_region *region;
static struct shmq_ring prod, cons;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static void setup(void)
{
	const struct shmq_part_spec spec[] = {
		{ .kind = SHMQ_PART_AREA, .id = AREA_ID, .size = 4096 },
		{ .kind = SHMQ_PART_RING, .id = RING_ID, .entry_size = 64, .capacity = CAP },
	};

	ck_assert_int_eq(shmq_region_create("hostile", APP_MAGIC, 3, spec, 2, &region), 0);
	ck_assert_int_eq(shmq_ring_init(&prod, region, RING_ID, SHMQ_PRODUCER), 0);
	ck_assert_int_eq(shmq_ring_init(&cons, region, RING_ID, SHMQ_CONSUMER), 0);
}

static void teardown(void)
{
	shmq_region_destroy(region);
	region = NULL;
}

/* Map the region the way an attacker would: raw, whole, writable. */
static void *map_raw(size_t *ret_size)
{
	size_t size = shmq_region_size(region);
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, shmq_region_fd(region), 0);

	ck_assert_ptr_ne(p, MAP_FAILED);
	*ret_size = size;
	return p;
}

/*
 * The child: for SCRIBBLE_NS, write random words into the ring's control
 * block (mostly the four live words) and the header page.  A third of
 * the index writes are near-plausible (a small offset from the current
 * value), the rest arbitrary.
 */
static void scribbler(void *map, uint64_t ring_off)
{
	uint32_t *hdr = map, *ctrl = hdr + ring_off / 4;
	/* The four live words: tail, wake, head, flags. */
	const unsigned live[] = {
		offsetof(struct shmq_ring_ctrl, prod.tail) / 4,
		offsetof(struct shmq_ring_ctrl, prod.wake) / 4,
		offsetof(struct shmq_ring_ctrl, cons.head) / 4,
		offsetof(struct shmq_ring_ctrl, wakeup.flags) / 4,
	};
	uint64_t rng = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull | 1;
	int64_t end = now_ns() + SCRIBBLE_NS;

	while (now_ns() < end) {
		uint64_t x = xorshift(&rng);
		uint32_t *w;

		switch (x % 4) {
		case 0:
		case 1:
			w = &ctrl[live[(x >> 8) % 4]];
			if ((x >> 16) % 3 == 0)
				__atomic_store_n(w, *w + (uint32_t)((x >> 24) % 8) - 4,
						 __ATOMIC_RELAXED);
			else
				__atomic_store_n(w, (uint32_t)(x >> 32), __ATOMIC_RELAXED);
			break;
		case 2:
			/* Anywhere in the control block, entries too. */
			w = &ctrl[(x >> 8) % ((SHMQ_RING_ENTRIES_OFFSET + CAP * 64) / 4)];
			__atomic_store_n(w, (uint32_t)(x >> 32), __ATOMIC_RELAXED);
			break;
		default:
			/* The header page, part table included. */
			w = hdr + (x >> 8) % (SHMQ_PART_ALIGN / 4);
			__atomic_store_n(w, (uint32_t)(x >> 32), __ATOMIC_RELAXED);
			break;
		}
	}
}

/* Where the ring sits: the only part lookup the test does outside libshmq. */
static uint64_t ring_offset(const void *base)
{
	const struct shmq_region_hdr *hdr = base;

	for (unsigned i = 0; i < hdr->nr_parts; i++)
		if (hdr->parts[i].id == RING_ID)
			return hdr->parts[i].offset;
	ck_abort_msg("ring part not found");
	return 0;
}

START_TEST(test_hostile_indices)
{
	uint64_t ops = 0, eproto = 0, waits = 0;
	size_t size;
	void *base = map_raw(&size);
	uint64_t ring_off = ring_offset(base);
	int status;
	pid_t pid;

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		scribbler(base, ring_off);
		_exit(0);
	}

	for (;;) {
		uint32_t idx;
		uint8_t buf[64];
		int n;

		n = shmq_prod_reserve(&prod, 1 + ops % 8, &idx);
		ck_assert(n == -EPROTO || (n >= 0 && n <= (int)(1 + ops % 8)));
		for (int i = 0; i < n; i++)
			memset(shmq_ring_entry(&prod, idx + (uint32_t)i), (int)ops, 64);
		n = shmq_prod_commit(&prod, ops % 2 ? SHMQ_COMMIT_NOWAKE : 0);
		ck_assert(n >= 0 && n <= 8);
		n = shmq_prod_wake(&prod);
		ck_assert(n == 0 || n == 1);
		n = shmq_prod_inflight(&prod);
		ck_assert(n == -EPROTO || (n >= 0 && n <= (int)CAP));
		eproto += n == -EPROTO;

		n = shmq_cons_peek(&cons, 1 + ops % 16, &idx);
		ck_assert(n == -EPROTO || (n >= 0 && n <= (int)(1 + ops % 16)));
		eproto += n == -EPROTO;
		for (int i = 0; i < n; i++)
			memcpy(buf, shmq_ring_entry(&cons, idx + (uint32_t)i), sizeof(buf));
		if (n > 0)
			shmq_cons_release(&cons, (uint32_t)n);

		/* Now and then sleep too: bounded, whatever the peer does. */
		if (ops % 4096 == 0) {
			int64_t t0 = now_ns();

			n = shmq_cons_wait(&cons, MS);
			ck_assert(n == -EPROTO || n == -ETIMEDOUT || (n > 0 && n <= (int)CAP));
			ck_assert_int_lt(now_ns() - t0, 5 * SEC);
			waits++;
		}
		/* Re-made views start from the indices there, validated. */
		if (ops % 1024 == 0) {
			struct shmq_ring r;

			n = shmq_ring_init(&r, region, RING_ID, SHMQ_CONSUMER);
			ck_assert(n == 0 || n == -EPROTO);
		}
		ops++;
		if (ops % 1024 == 0 && waitpid(pid, &status, WNOHANG) == pid)
			break;
	}
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_uint_gt(eproto, 0);
	ck_assert_uint_gt(waits, 0);
	munmap(base, size);
}
END_TEST

/*
 * Everything the attached side knows came from its private copy: wiping
 * the shared header afterwards changes none of it, and the rings keep
 * working; only a new attach notices.
 */
START_TEST(test_header_after_attach)
{
	struct shmq_region *b = NULL, *c = NULL;
	struct shmq_ring bcons, again;
	uint8_t junk[SHMQ_PART_ALIGN];
	void *area, *area2;
	uint64_t asize, asize2, size;
	uint32_t idx;

	ck_assert_int_eq(shmq_region_attach(shmq_region_fd(region), APP_MAGIC, &b), 0);
	size = shmq_region_size(b);
	ck_assert_int_eq(shmq_region_area(b, AREA_ID, &area, &asize), 0);

	/* A page of garbage over the header, through the fd. */
	memset(junk, 0xff, sizeof(junk));
	ck_assert_int_eq(pwrite(shmq_region_fd(region), junk, sizeof(junk), 0),
			 (ssize_t)sizeof(junk));

	ck_assert_uint_eq(shmq_region_size(b), size);
	ck_assert_uint_eq(shmq_region_app_version(b), 3);
	ck_assert_int_eq(shmq_region_area(b, AREA_ID, &area2, &asize2), 0);
	ck_assert_ptr_eq(area2, area);
	ck_assert_uint_eq(asize2, asize);
	ck_assert_int_eq(shmq_ring_init(&bcons, b, RING_ID, SHMQ_CONSUMER), 0);
	ck_assert_uint_eq(shmq_ring_capacity(&bcons), CAP);
	/* The creator's side is no different. */
	ck_assert_int_eq(shmq_ring_init(&again, region, RING_ID, SHMQ_PRODUCER), 0);

	ck_assert_int_eq(shmq_prod_reserve(&again, CAP, &idx), (int)CAP);
	for (uint32_t i = 0; i < CAP; i++)
		*(uint32_t *)shmq_ring_entry(&again, idx + i) = i;
	ck_assert_int_eq(shmq_prod_commit(&again, 0), (int)CAP);
	ck_assert_int_eq(shmq_cons_peek(&bcons, UINT32_MAX, &idx), (int)CAP);
	for (uint32_t i = 0; i < CAP; i++)
		ck_assert_uint_eq(*(uint32_t *)shmq_ring_entry(&bcons, idx + i), i);
	shmq_cons_release(&bcons, CAP);

	/* A fresh attach reads the garbage and refuses it. */
	ck_assert_int_eq(shmq_region_attach(shmq_region_fd(region), APP_MAGIC, &c), -EBADMSG);
	ck_assert_ptr_null(c);
	shmq_region_destroy(b);
}
END_TEST

START_TEST(test_benign_corruption)
{
	uint32_t idx;
	int64_t t0;

	/* A spurious NEED_WAKEUP costs the producer a syscall, nothing else. */
	*cons.p_flags = 0xffffffffu;
	ck_assert_int_eq(shmq_prod_reserve(&prod, 2, &idx), 2);
	ck_assert_int_eq(shmq_prod_commit(&prod, SHMQ_COMMIT_NOWAKE), 2);
	ck_assert_int_eq(shmq_prod_wake(&prod), 1);
	ck_assert_int_eq(shmq_cons_peek(&cons, 8, &idx), 2);
	shmq_cons_release(&cons, 2);

	/* A wake word moved by the peer: the sleeper loops, but only until its timeout. */
	*prod.p_wake = 12345;
	t0 = now_ns();
	ck_assert_int_eq(shmq_cons_wait(&cons, 20 * MS), -ETIMEDOUT);
	ck_assert_int_ge(now_ns() - t0, 20 * MS);
	ck_assert_int_lt(now_ns() - t0, 5 * SEC);
	/* ...and flags are ours again after the wait. */
	ck_assert_uint_eq(*cons.p_flags, 0);

	/* Garbage in entries is the application's to validate; indices are unharmed. */
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), 1);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 1);
	memset(shmq_ring_entry(&prod, idx), 0xee, 64);
	ck_assert_int_eq(shmq_cons_peek(&cons, 8, &idx), 1);
	shmq_cons_release(&cons, 1);

	/*
	 * A head moved forward but not past the tail (an honest consumer
	 * could have done that) is accepted.
	 */
	ck_assert_int_eq(shmq_prod_reserve(&prod, 10, &idx), 10);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 10);
	*cons.p_head += 4;
	ck_assert_int_eq(shmq_prod_inflight(&prod), 6);

	/* A wiped shared tail copy does not move the producer's own tail. */
	*prod.p_tail = 0;
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), 1);
	ck_assert_uint_eq(idx, 13);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 1);
	ck_assert_uint_eq(*prod.p_tail, 14);
}
END_TEST

UNIT_TESTS(test_hostile_indices, test_header_after_attach, test_benign_corruption)

const struct unit_suite unit_suite = {
	.name = "shmq-hostile",
	.setup = setup,
	.teardown = teardown,
	.timeout_s = 120,
	.add_tests = add_tests,
};
