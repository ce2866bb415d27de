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
	/*
	 * Byte 0 of the allocation: CUDA, a device address; host, a pointer
	 * in our address space that may lie outside the mapping, which covers
	 * only the pages the layer views reach ([map, map + map_len)).
	 */
	uint64_t base;
	void *map;	  /* host: what mmap() returned, for munmap() */
	uint64_t map_len; /* host: the length mapped, for munmap() */
	int fd;		/* host / VMM: our copy; else -1 */
	void *priv;	/* backend state */
};

/*
 * Import host allocation @m (with its fd, which the import takes over on
 * success), mapping only its bytes [@lo, @hi) (rounded out to pages): the
 * hull of the layer views into it, which must lie inside m->size.  The fd
 * must be a shmem memfd (-EBADF: not a memfd; -EOPNOTSUPP: hugetlbfs or
 * another file system), sealed against shrinking (-EPERM), and at least
 * m->size long (-ERANGE).  Nothing is faulted in.  @why gets a reason.
 */
int mem_import_host(const struct kvs_wire_mem *m, int fd, uint64_t lo, uint64_t hi,
		    struct mem_import *ret, char *why, size_t wl);

/* Bytes mem_import_host() maps for [@lo, @hi): whole pages around it. */
uint64_t mem_host_map_bytes(uint64_t lo, uint64_t hi);

/*
 * Drop an import.  Host mappings and fds go to the release thread (when
 * it runs; else at once), so the caller, the control thread, never waits
 * for the kernel to tear down an engine's pages.
 */
void mem_release(struct mem_import *imp);

/* The release thread: started before the first import, stopped (drained) after the last. */
int mem_release_start(void);
void mem_release_stop(void);

#endif /* KVS_MEM_H */
