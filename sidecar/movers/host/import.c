/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/mover.h"
#include "io/mem.h"

#define WHY(...) (snprintf(why, wl, __VA_ARGS__))

int mem_import_host(const struct kvs_wire_mem *m, int fd, struct mem_import *ret, char *why,
		    size_t wl)
{
	struct stat st;
	int seals;
	void *p;

	if (fstat(fd, &st) < 0) {
		WHY("memory fd: %m");
		return -errno;
	}
	if (!S_ISREG(st.st_mode)) {
		WHY("memory fd is not a memfd or regular file");
		return -EBADF;
	}
	/*
	 * An engine that shrinks the file under our mapping would make our
	 * next copy fault with SIGBUS: only shrink-sealed memory is taken.
	 */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		WHY("memory fd must be a memfd sealed with F_SEAL_SHRINK");
		return -EPERM;
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
		if (imp->base)
			munmap((void *)(uintptr_t)imp->base, imp->size);
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
}
