/* SPDX-License-Identifier: MIT */
/*
 * Sleeping consumers: the NEED_WAKEUP protocol (io_uring SQPOLL style).
 *
 * A consumer that finds its ring empty and wants to sleep:
 *
 *   1. reads the ring's futex word (prod.wake),
 *   2. stores NEED_WAKEUP into its flags word (cons.flags),
 *   3. issues a seq_cst fence                               (C3)
 *   4. re-checks the tail,
 *   5. FUTEX_WAITs on the word with the value from step 1.
 *
 * The producer, after its store-release of the tail, issues a seq_cst
 * fence (P3, ring_wake() in ring.c), loads the flags and, if NEED_WAKEUP is
 * set, increments the futex word and FUTEX_WAKEs.  The fences make step 4
 * and the producer's flag load a Dekker pair: at least one of them sees
 * the other side's store.  Step 1 coming before step 4 closes the last gap:
 * a wake that lands between the re-check and the FUTEX_WAIT has changed
 * the word, so FUTEX_WAIT returns EAGAIN instead of sleeping.
 *
 * The futex words sit in a mapping shared with another process: they are
 * waited on as shared futexes (no FUTEX_PRIVATE_FLAG).  The peer can
 * change them at will; the worst it can do is make us loop (EAGAIN) until
 * our own deadline, so every wait except SHMQ_WAIT_FOREVER is bounded by
 * the caller's timeout, measured on CLOCK_MONOTONIC.
 *
 * NEED_WAKEUP is cleared before every return.  Clearing needs no ordering:
 * a stale flag costs the producer one needless wake syscall, nothing more.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>

#include <shmq/shmq.h>

#include "futex.h"

/* Longest sleep of the polling fallback of shmq_wait_many(). */
#define SHMQ_POLL_SLICE_NS 1000000LL

/* How many spins between two clock reads in the adaptive wait. */
#define SHMQ_SPIN_CHECK 64

static bool timeout_ok(int64_t timeout_ns)
{
	return timeout_ns >= 0 || timeout_ns == SHMQ_WAIT_FOREVER;
}

static int64_t deadline_of(int64_t timeout_ns)
{
	return timeout_ns == SHMQ_WAIT_FOREVER ? INT64_MAX : shmq_deadline(timeout_ns);
}

static int avail(struct shmq_ring *ring)
{
	uint32_t idx;

	return shmq_cons_peek(ring, UINT32_MAX, &idx);
}

static void clear_need_wakeup(struct shmq_ring *ring)
{
	/* Relaxed: no partner; a stale flag only costs the producer a syscall. */
	__atomic_store_n(ring->p_flags, 0, __ATOMIC_RELAXED);
}

/*
 * Steps 1-4 of the protocol for one ring.  Returns the futex value to wait
 * for through *ret_seen, and what the re-check found (count or -EPROTO).
 */
static int arm(struct shmq_ring *ring, uint32_t *ret_seen)
{
	/*
	 * Load-acquire of the wake word pairs with the release fetch_add in
	 * ring_wake(): a wake issued after this load changes the word.
	 */
	*ret_seen = __atomic_load_n(ring->p_wake, __ATOMIC_ACQUIRE);
	/* Relaxed: ordered before the re-check by the fence below. */
	__atomic_store_n(ring->p_flags, SHMQ_RING_NEED_WAKEUP, __ATOMIC_RELAXED);
	/* C3: pairs with the seq_cst fence P3 in ring_wake() (ring.c). */
	shmq_fence_seq_cst();
	return avail(ring);
}

/*
 * Sleep on one ring until it has entries or CLOCK_MONOTONIC reaches
 * @deadline (INT64_MAX: never).  Returns a count > 0, -ETIMEDOUT, -EINTR
 * or -EPROTO; NEED_WAKEUP is clear on return.
 */
static int cons_sleep(struct shmq_ring *ring, int64_t deadline)
{
	int n;

	for (;;) {
		struct timespec rel, *relp = NULL;
		uint32_t seen;
		int r;

		n = arm(ring, &seen);
		if (n != 0)
			break;
		if (deadline != INT64_MAX) {
			int64_t now = shmq_now_ns();

			if (now >= deadline) {
				n = -ETIMEDOUT;
				break;
			}
			rel = shmq_ns_to_timespec(deadline - now);
			relp = &rel;
		}
		r = shmq_futex_wait_shared(ring->p_wake, seen, relp);
		/*
		 * 0 (woken, maybe spuriously), EAGAIN (the word moved), and
		 * ETIMEDOUT (re-checked against our own clock above) all loop
		 * back to the re-check; EINTR and anything else end the wait.
		 */
		if (r < 0 && r != -EAGAIN && r != -ETIMEDOUT) {
			n = r;
			break;
		}
	}
	clear_need_wakeup(ring);
	/* Entries that arrived as we gave up win over the error. */
	if (n == -ETIMEDOUT || n == -EINTR) {
		int m = avail(ring);

		if (m != 0)
			n = m;
	}
	return n;
}

int shmq_cons_wait(struct shmq_ring *ring, int64_t timeout_ns)
{
	int n;

	if (!ring || ring->role != SHMQ_CONSUMER || !timeout_ok(timeout_ns))
		return -EINVAL;
	n = avail(ring);
	if (n != 0)
		return n;
	if (timeout_ns == 0)
		return -ETIMEDOUT;
	return cons_sleep(ring, deadline_of(timeout_ns));
}

int shmq_cons_wait_adaptive(struct shmq_ring *ring, const struct shmq_spin *spin,
			    int64_t timeout_ns)
{
	int64_t spin_ns = spin ? spin->spin_ns : 0;
	int64_t sleep_ns = spin ? spin->sleep_ns : 0;
	int64_t deadline, spin_end;
	int n;

	if (!ring || ring->role != SHMQ_CONSUMER || !timeout_ok(timeout_ns) || spin_ns < 0 ||
	    sleep_ns < 0)
		return -EINVAL;
	n = avail(ring);
	if (n != 0)
		return n;
	if (timeout_ns == 0)
		return -ETIMEDOUT;

	deadline = deadline_of(timeout_ns);
	if (spin_ns > 0) {
		spin_end = shmq_deadline(spin_ns);
		if (spin_end > deadline)
			spin_end = deadline;
		do {
			/* Read the clock only every few spins: it costs more than a peek. */
			for (int i = 0; i < SHMQ_SPIN_CHECK; i++) {
				shmq_cpu_relax();
				n = avail(ring);
				if (n != 0)
					return n;
			}
		} while (shmq_now_ns() < spin_end);
	}

	/*
	 * Sleep in slices of sleep_ns: a producer that forgets to wake us
	 * (commits with SHMQ_COMMIT_NOWAKE and never calls shmq_prod_wake)
	 * then costs latency, not a hang until the deadline.
	 */
	for (;;) {
		int64_t now = shmq_now_ns();
		int64_t slice_end;

		if (now >= deadline)
			return -ETIMEDOUT;
		if (sleep_ns == 0 || __builtin_add_overflow(now, sleep_ns, &slice_end) ||
		    slice_end > deadline)
			slice_end = deadline;
		n = cons_sleep(ring, slice_end);
		if (n != -ETIMEDOUT)
			return n;
	}
}

/*
 * Is anything ready?  The index of the first ring with entries, @n if
 * *extra moved, -EAGAIN if nothing, -EPROTO (and *ret_bad) for a broken ring.
 */
static int many_ready(struct shmq_ring *const *rings, unsigned n, const uint32_t *extra,
		      uint32_t extra_val, unsigned *ret_bad)
{
	for (unsigned i = 0; i < n; i++) {
		int r = avail(rings[i]);

		if (r > 0)
			return (int)i;
		if (r < 0) {
			if (ret_bad)
				*ret_bad = i;
			return r;
		}
	}
	/*
	 * Load-acquire pairs with the caller's store (release, before
	 * shmq_wake_word()) of the extra word: what it published before
	 * changing the word is visible once we report the change.
	 */
	if (extra && __atomic_load_n(extra, __ATOMIC_ACQUIRE) != extra_val)
		return (int)n;
	return -EAGAIN;
}

static void many_clear(struct shmq_ring *const *rings, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		clear_need_wakeup(rings[i]);
}

/* Set when futex_waitv turned out to be unavailable: poll from then on. */
static int waitv_missing;

static int many_waitv(struct shmq_ring *const *rings, unsigned n, const uint32_t *extra,
		      uint32_t extra_val, int64_t deadline, unsigned *ret_bad)
{
	struct shmq_futex_waitv w[SHMQ_WAITV_MAX];
	unsigned nr = n;
	int r;

	for (unsigned i = 0; i < n; i++) {
		w[i].uaddr = (uint64_t)(uintptr_t)rings[i]->p_wake;
		/* Shared futex: the producer wakes it from another process. */
		w[i].flags = FUTEX_32;
		w[i].resv = 0;
	}
	if (extra) {
		w[nr].uaddr = (uint64_t)(uintptr_t)extra;
		w[nr].val = extra_val;
		/* The caller's own word, woken by shmq_wake_word(). */
		w[nr].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
		w[nr].resv = 0;
		nr++;
	}

	for (;;) {
		struct timespec abs, *absp = NULL;

		/*
		 * Steps 1-3 of the protocol for every ring (see the top of
		 * this file), then one re-check of them all.
		 */
		for (unsigned i = 0; i < n; i++) {
			/* Load-acquire pairs with the release fetch_add in ring_wake(). */
			w[i].val = __atomic_load_n(rings[i]->p_wake, __ATOMIC_ACQUIRE);
			/* Relaxed: ordered before the re-check by the fence below. */
			__atomic_store_n(rings[i]->p_flags, SHMQ_RING_NEED_WAKEUP,
					 __ATOMIC_RELAXED);
		}
		/* C3: pairs with the seq_cst fence P3 in ring_wake() (ring.c). */
		shmq_fence_seq_cst();
		r = many_ready(rings, n, extra, extra_val, ret_bad);
		if (r != -EAGAIN)
			break;

		if (deadline != INT64_MAX) {
			if (shmq_now_ns() >= deadline) {
				r = -ETIMEDOUT;
				break;
			}
			abs = shmq_ns_to_timespec(deadline);
			absp = &abs;
		}
		r = shmq_futex_waitv(w, nr, absp);
		/* Woken (index), or a word moved under us: re-check. */
		if (r >= 0 || r == -EAGAIN)
			continue;
		/*
		 * ENOSYS: kernel before 5.16.  EPERM: a seccomp filter that
		 * does not know the call (older container runtimes answer
		 * unknown system calls so); futex_waitv itself never says it.
		 */
		if (r == -ENOSYS || r == -EPERM) {
			/* Relaxed: a cached kernel property, no ordering partner. */
			__atomic_store_n(&waitv_missing, 1, __ATOMIC_RELAXED);
			r = -ENOSYS;
		}
		break;
	}
	many_clear(rings, n);
	if (r == -ETIMEDOUT || r == -EINTR) {
		int m = many_ready(rings, n, extra, extra_val, ret_bad);

		if (m != -EAGAIN)
			r = m;
	}
	return r;
}

static int many_poll(struct shmq_ring *const *rings, unsigned n, const uint32_t *extra,
		     uint32_t extra_val, int64_t deadline, unsigned *ret_bad)
{
	for (;;) {
		struct timespec rel;
		int64_t now, left;
		int r;

		r = many_ready(rings, n, extra, extra_val, ret_bad);
		if (r != -EAGAIN)
			return r;
		now = shmq_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		left = deadline - now;
		rel = shmq_ns_to_timespec(left < SHMQ_POLL_SLICE_NS ? left : SHMQ_POLL_SLICE_NS);
		/* clock_nanosleep() returns the error number itself, not -1. */
		r = clock_nanosleep(CLOCK_MONOTONIC, 0, &rel, NULL);
		if (r == EINTR) {
			r = many_ready(rings, n, extra, extra_val, ret_bad);
			return r == -EAGAIN ? -EINTR : r;
		}
	}
}

int shmq_wait_many(struct shmq_ring *const *rings, unsigned n, const uint32_t *extra,
		   uint32_t extra_val, int64_t timeout_ns, unsigned *ret_bad)
{
	int64_t deadline;
	int r;

	/* n itself is a return value, so it must fit an int. */
	if ((n && !rings) || (!n && !extra) || n >= INT_MAX || !timeout_ok(timeout_ns))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (!rings[i] || rings[i]->role != SHMQ_CONSUMER)
			return -EINVAL;

	r = many_ready(rings, n, extra, extra_val, ret_bad);
	if (r != -EAGAIN)
		return r;
	if (timeout_ns == 0)
		return -ETIMEDOUT;
	deadline = deadline_of(timeout_ns);

	/* One slot of futex_waitv's 128 is kept for the extra word. */
	/* Relaxed: a cached kernel property, no ordering partner. */
	if (n < SHMQ_WAITV_MAX && !__atomic_load_n(&waitv_missing, __ATOMIC_RELAXED)) {
		r = many_waitv(rings, n, extra, extra_val, deadline, ret_bad);
		if (r != -ENOSYS)
			return r;
	}
	return many_poll(rings, n, extra, extra_val, deadline, ret_bad);
}

int shmq_wake_word(uint32_t *word)
{
	if (!word)
		return -EINVAL;
	return shmq_futex_wake_private(word);
}
