/* SPDX-License-Identifier: MIT */
/*
 * Host engine memory: what kvstashd accepts and how it maps it.
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
 * bytes mapped per session and per uid (control/session.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "io/mover.h"
#include "io/mem.h"

#define WHY(...) (snprintf(why, wl, __VA_ARGS__))

static uint64_t page_size(void)
{
	static uint64_t pg;

	if (!pg)
		pg = (uint64_t)sysconf(_SC_PAGESIZE);
	return pg;
}

uint64_t mem_host_map_bytes(uint64_t lo, uint64_t hi)
{
	uint64_t pg = page_size();

	/* Saturate: no file is that long, and no bound lets it through. */
	if (hi > UINT64_MAX - (pg - 1))
		return UINT64_MAX;
	return ((hi + pg - 1) & ~(pg - 1)) - (lo & ~(pg - 1));
}

int mem_import_host(const struct kvs_wire_mem *m, int fd, uint64_t lo, uint64_t hi,
		    struct mem_import *ret, char *why, size_t wl)
{
	uint64_t off = lo & ~(page_size() - 1), len = mem_host_map_bytes(lo, hi);
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
		.map = p,
		.map_len = len,
		.fd = fd,
	};
	return 0;
}

void mem_release(struct mem_import *imp)
{
	if (!imp)
		return;
	switch (imp->kind) {
	case KVS_MEM_HOST_FD:
		/*
		 * Exactly what was mapped: munmap() of a hugetlbfs mapping
		 * with a length short of its huge page failed and left it
		 * mapped.
		 */
		if (imp->map)
			munmap(imp->map, imp->map_len);
		break;
	case KVS_MEM_CUDA_IPC:
	case KVS_MEM_CUDA_VMM_FD:
		copy_cuda_mem_release(imp);
		break;
	}
	if (imp->fd >= 0)
		close(imp->fd);
	imp->fd = -1;
	imp->base = 0;
	imp->map = NULL;
	imp->map_len = 0;
}
