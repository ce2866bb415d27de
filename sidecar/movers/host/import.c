/* SPDX-License-Identifier: MIT */
/*
 * Host engine memory: what kvstashd accepts, how it maps it, and the
 * thread that lets it go.
 *
 * No memory an engine shares may ever raise a signal in kvstashd.  A
 * mapping faults fatally (SIGBUS) when a page cannot be supplied: beyond
 * the file's end, or in a hole no page can fill.  So kvstashd takes only
 *  - memfds sealed with F_SEAL_SHRINK: the file can never end before the
 *    mapping does (growth is harmless);
 *  - on shmem (tmpfs), where a hole punched by the engine
 *    (fallocate(FALLOC_FL_PUNCH_HOLE), which the seal does not stop) is
 *    refilled with a fresh page on the next fault, like any anonymous
 *    memory.  hugetlbfs (MFD_HUGETLB) is refused: there a hole needs a
 *    free huge page, the engine can take them all, and the fault is then
 *    SIGBUS.  Transparent huge pages of shmem are not hugetlbfs and are
 *    fine.  Memfds live on the kernel's internal shmem mount, which has
 *    no size limit, so a fault cannot meet ENOSPC either; tmpfs files of
 *    a mounted tmpfs cannot be sealed (they start with F_SEAL_SEAL).
 *
 * What a hole costs: a page kvstashd faults into a hole is charged to
 * kvstashd (memcg and RSS), not to the engine.  That is why only the pages
 * the layer views reach are mapped, and why the control thread bounds the
 * bytes mapped per session and per uid (control/protocol.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/why.h"
#include "io/mem.h"
#include "movers/host/host.h"


static uint64_t page_size(void)
{
	static uint64_t pg;

	if (!pg)
		pg = (uint64_t)sysconf(_SC_PAGESIZE);
	return pg;
}

uint64_t host_map_bytes(uint64_t lo, uint64_t hi)
{
	uint64_t pg = page_size();

	/* Saturate: no file is that long, and no bound lets it through. */
	if (hi > UINT64_MAX - (pg - 1))
		return UINT64_MAX;
	return ((hi + pg - 1) & ~(pg - 1)) - (lo & ~(pg - 1));
}

int host_mem_import(unsigned dev, const struct kvs_wire_mem *m, int fd, uint64_t lo, uint64_t hi,
		    struct mem_import *ret, char *why, size_t wl)
{
	uint64_t off = lo & ~(page_size() - 1), len = host_map_bytes(lo, hi);
	struct statfs sfs;
	struct stat st;
	int seals;
	void *p;

	/*
	 * Seals first, size after: until F_SEAL_SHRINK is set the engine can
	 * shrink the file between any size we read and our mapping.  Once we
	 * have seen the seal, the file can only grow, so the size read after
	 * it is a lower bound for as long as we map the file.
	 */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0) {
		int err = -errno;

		if (err == -EINVAL) {
			WHY("memory fd is not a memfd (it cannot carry seals)");
			return -EBADF;
		}
		WHY("memory fd: F_GET_SEALS: %m");
		return err;
	}
	if (!(seals & F_SEAL_SHRINK)) {
		WHY("memory fd must be a memfd sealed with F_SEAL_SHRINK");
		return -EPERM;
	}
	if (fstatfs(fd, &sfs) < 0) {
		int err = -errno;

		WHY("memory fd: fstatfs: %m");
		return err;
	}
	if ((unsigned long)sfs.f_type == HUGETLBFS_MAGIC) {
		WHY("memory fd is a hugetlbfs memfd (MFD_HUGETLB): refused, an engine can make its "
		    "pages fault fatally; use a plain memfd (transparent huge pages are fine)");
		return -EOPNOTSUPP;
	}
	if ((unsigned long)sfs.f_type != TMPFS_MAGIC) {
		WHY("memory fd is not shmem (file system 0x%lx): only plain memfds are mapped",
		    (unsigned long)sfs.f_type);
		return -EOPNOTSUPP;
	}
	if (fstat(fd, &st) < 0) {
		int err = -errno;

		WHY("memory fd: %m");
		return err;
	}
	if (!S_ISREG(st.st_mode)) {
		WHY("memory fd is not a memfd");
		return -EBADF;
	}
	if ((uint64_t)st.st_size < m->size) {
		WHY("allocation declared %" PRIu64 " bytes, the fd has %lld", m->size,
		    (long long)st.st_size);
		return -ERANGE;
	}
	/*
	 * Only the views' pages, and none faulted in now: MAP_POPULATE made
	 * the control thread fault in whatever an engine declared (a sparse
	 * 4 GiB memfd: 4 GiB, for seconds).  The copies fault pages in as
	 * they touch them, on the I/O worker; an engine's pages are resident
	 * already, so those are minor faults, a few per 64 KiB (fault-around).
	 */
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
	if (p == MAP_FAILED) {
		int err = -errno;

		WHY("cannot map the allocation: %m");
		return err;
	}
	madvise(p, len, MADV_DONTFORK);
	*ret = (struct mem_import){
		.kind = KVS_MEM_HOST_FD,
		.size = m->size,
		/* Modular: byte 0 may lie before the mapping; views start at off or later. */
		.base = (uint64_t)(uintptr_t)p - off,
		.mapped = len,
		.map = p,
		.map_len = len,
		.fd = fd,
	};
	return 0;
}

/* ---- the release thread --------------------------------------------- */

/*
 * munmap() of an engine's mapping costs about 25 ms per GiB of pages
 * kvstashd touched, and when the engine is gone already our close() is
 * the last reference and frees its whole memfd (about 160 ms per GiB
 * measured on the project's VM).  Done on the control thread, one dead
 * 64 GiB engine would hold every other session's HELLO and REGISTER for
 * seconds; so the control thread queues them here.  By then no copy uses
 * the memory (the worker acked), so the only thing that waits is the
 * kernel's teardown.
 */
struct unmap {
	void *addr;
	uint64_t len;
	int fd;
	struct unmap *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct unmap *head, **tail;
	pthread_t thread;
	bool running;
	bool stop;
} U = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void unmap_now(void *addr, uint64_t len, int fd)
{
	if (addr)
		munmap(addr, len);
	if (fd >= 0)
		close(fd);
}

static void *release_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&U.lock);
	for (;;) {
		struct unmap *u = U.head;

		if (!u) {
			/* Drain first: host_release_stop() returns with nothing mapped. */
			if (U.stop)
				break;
			pthread_cond_wait(&U.cond, &U.lock);
			continue;
		}
		U.head = u->next;
		if (!U.head)
			U.tail = &U.head;
		pthread_mutex_unlock(&U.lock);
		unmap_now(u->addr, u->len, u->fd);
		free(u);
		pthread_mutex_lock(&U.lock);
	}
	pthread_mutex_unlock(&U.lock);
	return NULL;
}

int host_release_start(void)
{
	int r;

	U.head = NULL;
	U.tail = &U.head;
	U.stop = false;
	r = pthread_create(&U.thread, NULL, release_thread, NULL);
	if (r)
		return -r;
	pthread_setname_np(U.thread, "kvs-unmap");
	U.running = true;
	return 0;
}

void host_release_stop(void)
{
	if (!U.running)
		return;
	pthread_mutex_lock(&U.lock);
	U.stop = true;
	pthread_cond_signal(&U.cond);
	pthread_mutex_unlock(&U.lock);
	pthread_join(U.thread, NULL);
	U.running = false;
}

static void release_host(struct mem_import *imp)
{
	struct unmap *u = U.running ? malloc(sizeof(*u)) : NULL;

	if (!u) {
		/* No thread (or no memory for the hand-off): slower, never leaked. */
		unmap_now(imp->map, imp->map_len, imp->fd);
		return;
	}
	*u = (struct unmap){ imp->map, imp->map_len, imp->fd, NULL };
	/* The lock hands the node to release_thread(), which takes it under the same lock. */
	pthread_mutex_lock(&U.lock);
	*U.tail = u;
	U.tail = &u->next;
	pthread_cond_signal(&U.cond);
	pthread_mutex_unlock(&U.lock);
}

void host_mem_release(struct mem_import *imp)
{
	/* Exactly what was mapped: a shorter length would leave the rest mapped. */
	release_host(imp);
	imp->fd = -1; /* the release thread closes it with the mapping */
}
