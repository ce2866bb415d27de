/* SPDX-License-Identifier: MIT */
/*
 * libshmq: single-producer/single-consumer rings of fixed-size entries in
 * POSIX shared memory, for two processes that do not trust each other.
 *
 * Model (see shmq(7)):
 *   - One side creates a region (a sealed memfd) holding rings and byte
 *     areas, and passes the fd to the other side (e.g. with SCM_RIGHTS),
 *     which attaches to it.  Attach validates the header against the fd's
 *     real size and keeps a private copy; the shared header is never read
 *     again.
 *   - Each ring has exactly one producer and one consumer.  The producer
 *     reserves entries, fills them and commits (one release store of the
 *     tail covers the whole batch); the consumer peeks, reads, and
 *     releases (one release store of the head).
 *   - A consumer that runs out of work may sleep: it sets NEED_WAKEUP in
 *     the ring and futex-waits; a producer makes the wake syscall only when
 *     that flag is set (io_uring SQPOLL style).  Every wait has a timeout,
 *     so a dead peer cannot block a waiter forever.
 *
 * Errors: every function that can fail returns a negative errno.  Output
 * parameters are named ret_* and are untouched on failure.  The library
 * never prints, exits or installs handlers.
 *
 * Thread safety: a region may be shared by threads; a given ring end
 * (producer or consumer view) must be used by one thread at a time.
 *
 *   call                        external locking needed
 *   shmq_region_create/attach   no
 *   shmq_region_destroy         yes: no ring of the region may be in use
 *   shmq_ring_init              no
 *   shmq_prod_*                 yes, per ring producer view
 *   shmq_cons_*                 yes, per ring consumer view
 *   shmq_wait_many              yes, per ring consumer view
 */
#ifndef SHMQ_SHMQ_H
#define SHMQ_SHMQ_H

#include <stdint.h>
#include <stddef.h>

#include <shmq/abi.h>
#include <shmq/version.h>

#ifdef __cplusplus
extern "C" {
#endif

struct shmq_region;

/* What the creator asks for, one per part. */
struct shmq_part_spec {
	uint32_t kind;	     /* SHMQ_PART_RING or SHMQ_PART_AREA */
	uint32_t id;	     /* unique within the region */
	uint32_t entry_size; /* ring: power of two in [8, 4096] */
	uint32_t capacity;   /* ring: power of two in [2, 2^24] */
	uint64_t size;	     /* area: bytes (rounded up to a page) */
};

/* Process-local view of one ring end.  Fields are private to libshmq. */
struct shmq_ring {
	uint32_t *p_tail;     /* shared: producer index */
	uint32_t *p_wake;     /* shared: futex word */
	uint32_t *p_head;     /* shared: consumer index */
	uint32_t *p_flags;    /* shared: NEED_WAKEUP */
	uint8_t *entries;     /* shared: entry array */
	uint32_t capacity;    /* private copy, validated */
	uint32_t mask;	      /* capacity - 1 */
	uint32_t entry_shift; /* log2(entry_size) */
	uint32_t role;	      /* SHMQ_PRODUCER or SHMQ_CONSUMER */
	uint32_t local;	      /* our own index: never re-read from shm */
	uint32_t cached;      /* last peer index seen (validated) */
	uint32_t pending;     /* producer: reserved, not committed */
	uint32_t resv[5];
};

#define SHMQ_PRODUCER 1u
#define SHMQ_CONSUMER 2u

/* Wait for ever: only for callers that learn of peer death elsewhere. */
#define SHMQ_WAIT_FOREVER (-1LL)

/* ---- regions ---------------------------------------------------- */

/*
 * Create a region: memfd named @name (for /proc only), sized for @parts,
 * initialised, sealed against grow and shrink, mapped shared.
 * Returns 0, or -EINVAL (bad spec), -ENOMEM, or the errno of
 * memfd_create/ftruncate/fcntl/mmap.
 */
int shmq_region_create(const char *name, uint32_t app_magic, uint32_t app_version,
		       const struct shmq_part_spec *parts, unsigned nr_parts,
		       struct shmq_region **ret_region);

/*
 * Attach to a region received from a peer.  @fd is duplicated; the caller
 * keeps its own.  Validates against fstat(): size, seals (grow and shrink
 * must be sealed), magic, ABI, header size, every part's bounds, overlaps,
 * alignment and ring geometry.  Returns 0 or:
 *   -EBADF      fd is not usable
 *   -EPERM      the fd is not sealed against grow/shrink
 *   -EBADMSG    wrong magic or application magic
 *   -EPROTONOSUPPORT  ABI major differs
 *   -EMSGSIZE   region size differs from the header's, or is absurd
 *   -EINVAL     any part description is inconsistent
 *   -ENOMEM     out of memory / address space
 *   or the errno of fcntl/fstat/mmap (e.g. -EACCES for a read-only fd).
 */
int shmq_region_attach(int fd, uint32_t app_magic, struct shmq_region **ret_region);

/* Unmap, close and free.  Accepts NULL. */
void shmq_region_destroy(struct shmq_region *region);

/* The region's memfd (owned by the region: do not close). */
int shmq_region_fd(const struct shmq_region *region);
uint64_t shmq_region_size(const struct shmq_region *region);
uint32_t shmq_region_app_version(const struct shmq_region *region);

/*
 * Locate an area part by id.  -ENOENT if absent or not an area.
 */
int shmq_region_area(const struct shmq_region *region, uint32_t id, void **ret_base,
		     uint64_t *ret_size);

/*
 * Fill @ring with a view of ring part @id for @role (SHMQ_PRODUCER or
 * SHMQ_CONSUMER), starting from the indices currently in shared memory
 * (validated: -EPROTO if they claim more than capacity entries).
 * -ENOENT if absent or not a ring, -EINVAL on a bad role.
 */
int shmq_ring_init(struct shmq_ring *ring, const struct shmq_region *region, uint32_t id,
		   uint32_t role);

/* Ring geometry from the private copy. */
static inline uint32_t shmq_ring_capacity(const struct shmq_ring *ring)
{
	return ring->capacity;
}

/* Entry for free-running index @idx (masked here). */
static inline void *shmq_ring_entry(const struct shmq_ring *ring, uint32_t idx)
{
	return ring->entries + ((size_t)(idx & ring->mask) << ring->entry_shift);
}

/* ---- producer --------------------------------------------------- */

/*
 * Reserve up to @n entries after those already reserved.  Returns the
 * number reserved (0 when full) and the first index in @ret_idx; fill
 * shmq_ring_entry(ring, idx + i) for each.  -EPROTO if the consumer's
 * head claims more than capacity entries are in flight.
 */
int shmq_prod_reserve(struct shmq_ring *ring, uint32_t n, uint32_t *ret_idx);

/*
 * Publish every reserved entry with one store-release of the tail, then,
 * if the consumer sleeps (NEED_WAKEUP), bump the wake word and futex-wake
 * it.  Returns the number published (>= 0).
 * With SHMQ_COMMIT_NOWAKE the wake is skipped (caller calls
 * shmq_prod_wake() later, e.g. once for several rings).
 */
#define SHMQ_COMMIT_NOWAKE (1u << 0)
int shmq_prod_commit(struct shmq_ring *ring, unsigned flags);

/*
 * Wake the consumer if it asked for it.  Returns 1 if a wake syscall was
 * made, 0 if not needed.
 */
int shmq_prod_wake(struct shmq_ring *ring);

/*
 * Give back the last @n reserved, not yet committed entries (e.g. a
 * prepared request that failed validation).  @n larger than what is
 * reserved gives back everything reserved.
 */
void shmq_prod_cancel(struct shmq_ring *ring, uint32_t n);

/* Free entries as last observed (no shared-memory read). */
uint32_t shmq_prod_space_cached(const struct shmq_ring *ring);

/*
 * Entries the consumer has not yet released (re-reads its head).
 * -EPROTO on an impossible head.
 */
int shmq_prod_inflight(struct shmq_ring *ring);

/* ---- consumer --------------------------------------------------- */

/*
 * Up to @max entries available starting at *ret_idx.  Returns the count
 * (0 when empty), or -EPROTO if the producer's tail claims more than
 * capacity entries (the ring is then unusable: end the session).
 */
int shmq_cons_peek(struct shmq_ring *ring, uint32_t max, uint32_t *ret_idx);

/*
 * Hand @n peeked entries back to the producer with one store-release of
 * the head.  Read (copy out) everything you need from them first.
 */
void shmq_cons_release(struct shmq_ring *ring, uint32_t n);

/*
 * Sleep until entries are available or @timeout_ns passes: sets
 * NEED_WAKEUP, re-checks, futex-waits on the wake word.  Returns the
 * number available (> 0), -ETIMEDOUT, -EINTR (signal), -EPROTO, or
 * -EINVAL (not a consumer view, or a negative timeout other than
 * SHMQ_WAIT_FOREVER).  NEED_WAKEUP is cleared again before returning.
 */
int shmq_cons_wait(struct shmq_ring *ring, int64_t timeout_ns);

/* Adaptive wait: spin (busy-poll) for up to @spin_ns, then sleep. */
struct shmq_spin {
	int64_t spin_ns;  /* busy-poll budget before sleeping (0: none) */
	int64_t sleep_ns; /* longest single sleep; loops until timeout */
};
int shmq_cons_wait_adaptive(struct shmq_ring *ring, const struct shmq_spin *spin,
			    int64_t timeout_ns);

/*
 * Sleep until any of @n consumer rings has entries, or *@extra (a private
 * futex word of the caller's, may be NULL) differs from @extra_val, or the
 * timeout passes.  Uses futex_waitv (Linux >= 5.16); with more than 127
 * rings, or where futex_waitv is missing, it falls back to polling sleeps
 * of at most 1 ms.  Returns the index of a ring with entries (>= 0),
 * n when *@extra changed, -ETIMEDOUT, -EINTR, or -EPROTO (the index of the
 * bad ring in *@ret_bad when non-NULL).
 */
int shmq_wait_many(struct shmq_ring *const *rings, unsigned n, const uint32_t *extra,
		   uint32_t extra_val, int64_t timeout_ns, unsigned *ret_bad);

/* Wake a private futex word used as @extra above (after changing it). */
int shmq_wake_word(uint32_t *word);

/* ---- version ---------------------------------------------------- */

/* The library's version string, e.g. "0.1.0"; compare with SHMQ_VERSION. */
const char *shmq_version(void);

#ifdef __cplusplus
}
#endif

#endif /* SHMQ_SHMQ_H */
