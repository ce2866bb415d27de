/* SPDX-License-Identifier: MIT */
/*
 * Engine memory imported by kvstashd: one import per allocation named in
 * a REGISTER, shared by every layer view into it.  The host backend maps
 * a sealed memfd; the CUDA backend (movers/cuda/cuda.c) imports IPC handles and
 * VMM fds.  An import is closed after the session's in-flight copies
 * finish (UNREGISTER or death).
 */
#ifndef KVS_MEM_H
#define KVS_MEM_H

#include <stdint.h>

#include <kvstash/wire.h>

struct mem_import {
	uint32_t kind;	/* KVS_MEM_* */
	uint64_t size;	/* usable bytes: min(declared, real) */
	uint64_t base;	/* host: a pointer in our address space; CUDA: a device address */
	void *map;	  /* host: what mmap() returned, for munmap() */
	uint64_t map_len; /* host: the length mapped, for munmap() */
	int fd;		/* host / VMM: our copy; else -1 */
	void *priv;	/* backend state */
};

/*
 * Import allocation @m (with its fd, which the import takes over on
 * success, or -1).  Host: the fd must be a shmem memfd (-EBADF: not a
 * memfd; -EOPNOTSUPP: hugetlbfs or another file system), sealed against
 * shrinking (-EPERM), and at least m->size long (-ERANGE).  @why gets a
 * reason.
 */
int mem_import_host(const struct kvs_wire_mem *m, int fd, struct mem_import *ret, char *why,
		    size_t wl);
void mem_release(struct mem_import *imp);

#endif /* KVS_MEM_H */
