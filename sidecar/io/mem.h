/* SPDX-License-Identifier: MIT */
/*
 * Engine memory imported by kvstashd: one import per allocation named in
 * a REGISTER, shared by every layer view into it.  The session's mover
 * (io/mover.h) makes it and lets it go: the host mover maps a sealed
 * memfd (movers/host/import.c), the CUDA mover opens IPC handles and maps
 * VMM fds (movers/cuda/import.c).  An import is released after the
 * session's in-flight copies finish (UNREGISTER or death).
 */
#ifndef KVS_MEM_H
#define KVS_MEM_H

#include <stddef.h>
#include <stdint.h>

#include <kvstash/wire.h>

struct mover_ops;

struct mem_import {
	const struct mover_ops *mover; /* which imported it, and releases it */
	uint32_t kind;		       /* KVS_MEM_* */
	uint64_t size;		       /* usable bytes: min(declared, real) */
	/*
	 * Byte 0 of the allocation as the mover addresses it (struct
	 * piece.dev): CUDA, a device address; host, a pointer in our address
	 * space that may lie outside the mapping, which covers only the pages
	 * the layer views reach ([map, map + map_len)).
	 */
	uint64_t base;
	uint64_t mapped;  /* what it holds of our address space: host pages mapped, GPU bytes */
	void *map;	  /* host: what mmap() returned, for munmap() */
	uint64_t map_len; /* host: the length mapped, for munmap() */
	int fd;		  /* host / VMM: our copy; else -1 */
	void *priv;	  /* the mover's state */
};

/*
 * Import allocation @m (with its fd, -1 for kinds that carry none; the
 * import takes it over on success) through @mover for its device @dev.
 * [@lo, @hi) is the hull of the layer views into it, inside m->size: a
 * mover that maps memory maps only that.  Returns 0 or -errno with a
 * reason in @why; @ret is untouched on failure.
 */
int mem_import(const struct mover_ops *mover, unsigned dev, const struct kvs_wire_mem *m, int fd,
	       uint64_t lo, uint64_t hi, struct mem_import *ret, char *why, size_t wl);

/*
 * Drop an import (control thread).  It never waits for the kernel to tear
 * down an engine's pages: the host mover hands mappings and fds to its
 * release thread.  Accepts NULL, and an import never made (fd -1).
 */
void mem_release(struct mem_import *imp);

#endif /* KVS_MEM_H */
