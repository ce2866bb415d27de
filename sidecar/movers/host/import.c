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

int mem_import_host(const struct kvs_wire_mem *m, int fd, struct mem_import *ret, char *why,
		    size_t wl)
{
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
	/* Populate now: faults on the copy path would cost more than the copy. */
	p = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED) {
		int err = -errno;

		WHY("cannot map the allocation: %m");
		return err;
	}
	madvise(p, m->size, MADV_DONTFORK);
	*ret = (struct mem_import){
		.kind = KVS_MEM_HOST_FD,
		.size = m->size,
		.base = (uint64_t)(uintptr_t)p,
		.map = p,
		.map_len = m->size,
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
