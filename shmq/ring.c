/* SPDX-License-Identifier: MIT */
/*
 * The SPSC index protocol.
 *
 * Indices are free-running u32 values (they wrap at 2^32, not at the
 * capacity) and are masked only when an entry is addressed, so "tail -
 * head" is the fill level even across the wrap and a full ring needs no
 * spare slot.
 *
 * Each side owns one index and keeps the authoritative copy privately
 * (ring->local); the shared copy is only ever written by its owner and is
 * published with a store-release.  The other side's index is read with a
 * load-acquire and checked before it is believed:
 *
 *   producer: head must lie in [cached head, our committed tail]
 *   consumer: tail must lie in [cached tail, our head + capacity]
 *
 * i.e. an honest peer only moves its index forward and never past ours.
 * Anything else is -EPROTO; nothing is ever addressed through an unchecked
 * index, and entries are addressed through the private mask, so a hostile
 * peer can at worst feed us garbage entries (which the application
 * validates after copying them out), never make us touch memory outside
 * the ring.
 *
 * Ordering pairs (see also wait.c and shmq(7)):
 *   P1 store-release of tail, shmq_prod_commit()
 *      -> C1 load-acquire of tail, cons_refresh(): entry contents are
 *         visible to the consumer before it sees the new tail.
 *   C2 store-release of head, shmq_cons_release()
 *      -> P2 load-acquire of head, prod_refresh(): the consumer's reads of
 *         a slot are done before the producer refills it.
 *   P3 seq_cst fence in ring_wake() <-> C3 seq_cst fence in arm()
 *      (wait.c): the NEED_WAKEUP handshake.
 *   W  release increment of the wake word, ring_wake()
 *      -> load-acquire of the wake word in arm() (wait.c).
 */
#include <errno.h>
#include <limits.h>

#include <shmq/shmq.h>

#include "futex.h"

/*
 * Re-read the consumer's head.  Invariant on entry and exit:
 * local + pending - cached <= capacity.
 */
static int prod_refresh(struct shmq_ring *ring)
{
	/* P2: load-acquire pairs with the store-release C2 in shmq_cons_release(). */
	uint32_t head = __atomic_load_n(ring->p_head, __ATOMIC_ACQUIRE);

	/*
	 * An honest head moved forward from what we saw last and not past
	 * what we committed.  Checking against the cached head (not only
	 * "tail - head <= capacity") also rejects a head that jumps back,
	 * which would make us count reserved slots twice.
	 */
	if (head - ring->cached > ring->local - ring->cached)
		return -EPROTO;
	ring->cached = head;
	return 0;
}

int shmq_prod_reserve(struct shmq_ring *ring, uint32_t n, uint32_t *ret_idx)
{
	uint32_t next = ring->local + ring->pending;
	uint32_t space = ring->capacity - (next - ring->cached);

	/* Touch the consumer's line only when the cached head does not suffice. */
	if (space < n) {
		int r = prod_refresh(ring);

		if (r < 0)
			return r;
		space = ring->capacity - (next - ring->cached);
	}
	if (n > space)
		n = space;
	ring->pending += n;
	*ret_idx = next;
	return (int)n;
}

/*
 * Wake the consumer if it said it sleeps.  Second half of the Dekker
 * handshake whose first half is arm() in wait.c:
 *
 *   producer                         consumer
 *   store tail        (P1)           store flags = NEED_WAKEUP
 *   fence seq_cst     (P3)           fence seq_cst              (C3)
 *   load flags                       load tail (re-check)
 *
 * The two fences are totally ordered, so at least one side sees the
 * other's store: either the consumer finds the entries and does not sleep,
 * or we find NEED_WAKEUP and wake it.  Never both miss.
 */
static int ring_wake(struct shmq_ring *ring)
{
	uint32_t flags;

	/* P3: pairs with the seq_cst fence C3 in arm() and many_waitv() (wait.c). */
	shmq_fence_seq_cst();
	/* Relaxed: ordered after the tail store by the fence above. */
	flags = __atomic_load_n(ring->p_flags, __ATOMIC_RELAXED);
	if (!(flags & SHMQ_RING_NEED_WAKEUP))
		return 0;

	/*
	 * Bump the futex word before waking, so a consumer that read the
	 * old value but has not yet entered FUTEX_WAIT gets EAGAIN instead
	 * of sleeping through this wake.  Release pairs with the
	 * load-acquire of the wake word in arm() and many_waitv().
	 */
	__atomic_fetch_add(ring->p_wake, 1, __ATOMIC_RELEASE);
	shmq_futex_wake_shared(ring->p_wake);
	return 1;
}

int shmq_prod_commit(struct shmq_ring *ring, unsigned flags)
{
	uint32_t n = ring->pending;

	if (n == 0)
		return 0;
	ring->local += n;
	ring->pending = 0;
	/*
	 * P1: one store-release publishes the whole batch; pairs with the
	 * load-acquire C1 in cons_refresh().  Entry writes before this store
	 * are visible to a consumer that sees the new tail.
	 */
	__atomic_store_n(ring->p_tail, ring->local, __ATOMIC_RELEASE);
	if (!(flags & SHMQ_COMMIT_NOWAKE))
		ring_wake(ring);
	return (int)n;
}

int shmq_prod_wake(struct shmq_ring *ring)
{
	return ring_wake(ring);
}

void shmq_prod_cancel(struct shmq_ring *ring, uint32_t n)
{
	/* Reserved entries are private until commit: nothing shared to undo. */
	if (n > ring->pending)
		n = ring->pending;
	ring->pending -= n;
}

uint32_t shmq_prod_space_cached(const struct shmq_ring *ring)
{
	return ring->capacity - (ring->local + ring->pending - ring->cached);
}

int shmq_prod_inflight(struct shmq_ring *ring)
{
	int r = prod_refresh(ring);

	if (r < 0)
		return r;
	return (int)(ring->local - ring->cached);
}

/*
 * Re-read the producer's tail.  Invariant on entry and exit:
 * cached - local <= capacity.
 */
static int cons_refresh(struct shmq_ring *ring)
{
	/* C1: load-acquire pairs with the store-release P1 in shmq_prod_commit(). */
	uint32_t tail = __atomic_load_n(ring->p_tail, __ATOMIC_ACQUIRE);

	/*
	 * An honest tail moved forward from what we saw last and at most
	 * capacity past our head.  A tail that jumps back would hand out
	 * entries twice and let our head overtake it.
	 */
	if (tail - ring->cached > ring->capacity - (ring->cached - ring->local))
		return -EPROTO;
	ring->cached = tail;
	return 0;
}

int shmq_cons_peek(struct shmq_ring *ring, uint32_t max, uint32_t *ret_idx)
{
	uint32_t avail = ring->cached - ring->local;

	/* Touch the producer's line only when the cached tail does not suffice. */
	if (avail < max) {
		int r = cons_refresh(ring);

		if (r < 0)
			return r;
		avail = ring->cached - ring->local;
	}
	if (avail > max)
		avail = max;
	*ret_idx = ring->local;
	return (int)avail;
}

void shmq_cons_release(struct shmq_ring *ring, uint32_t n)
{
	uint32_t avail = ring->cached - ring->local;

	/* Never publish a head beyond the tail we validated. */
	if (n > avail)
		n = avail;
	if (n == 0)
		return;
	ring->local += n;
	/*
	 * C2: store-release pairs with the load-acquire P2 in prod_refresh():
	 * our reads of the released entries happen before the producer may
	 * overwrite them.
	 */
	__atomic_store_n(ring->p_head, ring->local, __ATOMIC_RELEASE);
}
