/* SPDX-License-Identifier: MIT */
/*
 * Private helpers of libshmq: futex system calls, the monotonic clock and
 * a CPU relax hint.  Nothing here is exported.
 *
 * Futex words of rings live in a MAP_SHARED mapping that another process
 * also maps, so they are waited on and woken WITHOUT FUTEX_PRIVATE_FLAG:
 * a private futex is keyed by (mm, address) and a wake from the peer's
 * address space would never find us.  Only the caller's own "extra" word
 * of shmq_wait_many() is private.
 *
 * Every helper returns 0 (or a count) or a negative errno, like the
 * public API.
 */
#ifndef SHMQ_FUTEX_H
#define SHMQ_FUTEX_H

#include <errno.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#define SHMQ_NSEC_PER_SEC 1000000000LL

/*
 * The kernel's struct futex_waitv (Linux 5.16), spelled out so that
 * the library builds against older headers too; the layout is ABI.
 */
struct shmq_futex_waitv {
	uint64_t val;
	uint64_t uaddr;
	uint32_t flags;
	uint32_t resv;
};

_Static_assert(sizeof(struct shmq_futex_waitv) == 24, "futex_waitv layout");
#if HAVE_STRUCT_FUTEX_WAITV_UADDR
_Static_assert(sizeof(struct shmq_futex_waitv) == sizeof(struct futex_waitv),
	       "futex_waitv matches the kernel's");
#endif

/* FUTEX_WAITV_MAX: the most words one futex_waitv call accepts. */
#define SHMQ_WAITV_MAX 128

/* Sleep while *uaddr == val, for at most *rel (NULL: no limit). */
static inline int shmq_futex_wait_shared(uint32_t *uaddr, uint32_t val, const struct timespec *rel)
{
	if (syscall(SYS_futex, uaddr, FUTEX_WAIT, val, rel, NULL, 0) < 0)
		return -errno;
	return 0;
}

/* Wake every waiter on a word that lives in shared memory. */
static inline int shmq_futex_wake_shared(uint32_t *uaddr)
{
	long r = syscall(SYS_futex, uaddr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);

	return r < 0 ? -errno : (int)r;
}

/* Wake every waiter on a word private to this process. */
static inline int shmq_futex_wake_private(uint32_t *uaddr)
{
	long r = syscall(SYS_futex, uaddr, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);

	return r < 0 ? -errno : (int)r;
}

/*
 * Sleep until one of @nr words differs from its expected value or the
 * absolute CLOCK_MONOTONIC time @abs passes (NULL: no limit).  Returns the
 * index of a woken word, or -errno (-ENOSYS where the kernel or libc lacks
 * futex_waitv).
 */
static inline int shmq_futex_waitv(struct shmq_futex_waitv *w, unsigned nr,
				   const struct timespec *abs)
{
#if HAVE_DECL_SYS_FUTEX_WAITV
	long r = syscall(SYS_futex_waitv, w, nr, 0, abs, CLOCK_MONOTONIC);

	return r < 0 ? -errno : (int)r;
#else
	(void)w;
	(void)nr;
	(void)abs;
	return -ENOSYS;
#endif
}

/* CLOCK_MONOTONIC in nanoseconds (vDSO: no system call). */
static inline int64_t shmq_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * SHMQ_NSEC_PER_SEC + ts.tv_nsec;
}

/*
 * Absolute deadline @timeout_ns from now, saturating at INT64_MAX
 * (which callers treat as "no deadline").  @timeout_ns >= 0.
 */
static inline int64_t shmq_deadline(int64_t timeout_ns)
{
	int64_t d;

	if (__builtin_add_overflow(shmq_now_ns(), timeout_ns, &d))
		return INT64_MAX;
	return d;
}

static inline struct timespec shmq_ns_to_timespec(int64_t ns)
{
	struct timespec ts = {
		.tv_sec = ns / SHMQ_NSEC_PER_SEC,
		.tv_nsec = ns % SHMQ_NSEC_PER_SEC,
	};

	return ts;
}

/*
 * The full fence of the NEED_WAKEUP handshake (P3 in ring.c, C3 in
 * wait.c).  GCC warns (-Wtsan) that ThreadSanitizer does not model
 * fences for race detection; the fence is still executed (as a call into
 * the TSan runtime), and every word it orders is accessed with __atomic
 * builtins, so TSan has no race to report there.  Silence that one
 * warning so that -Werror builds with TSan still work.
 */
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
static inline void shmq_fence_seq_cst(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/*
 * Tell the CPU we are spinning: on x86 PAUSE stops the core from
 * speculating down the loop (and frees resources for an SMT sibling).
 * The "memory" clobber is not an ordering point; loads in the loop are
 * __atomic loads already.
 */
static inline void shmq_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

#endif /* SHMQ_FUTEX_H */
