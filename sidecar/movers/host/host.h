/* SPDX-License-Identifier: MIT */
/*
 * The host mover: engine memory is a sealed memfd the engine shares,
 * mapped here (import.c); a copy is memcpy (host.c).  It serves host
 * sessions (KVS_DEVICE_HOST) with one device, the host, and one I/O
 * worker.  Outside this folder only the mover table (io/movers.c) names it.
 */
#ifndef KVS_MOVERS_HOST_H
#define KVS_MOVERS_HOST_H

#include <stddef.h>
#include <stdint.h>

#include <kvstash/wire.h>

#include "io/mover.h"

extern const struct mover_ops host_mover;

/* ---- import.c, for host.c's ops table ---- */

/*
 * Import host allocation @m (with its fd, which the import takes over on
 * success), mapping only its bytes [@lo, @hi) (rounded out to pages): the
 * hull of the layer views into it, which must lie inside m->size.  The fd
 * must be a shmem memfd (-EBADF: not a memfd; -EOPNOTSUPP: hugetlbfs or
 * another file system), sealed against shrinking (-EPERM), and at least
 * m->size long (-ERANGE).  Nothing is faulted in.  @why gets a reason.
 */
int host_mem_import(unsigned dev, const struct kvs_wire_mem *m, int fd, uint64_t lo, uint64_t hi,
		    struct mem_import *ret, char *why, size_t wl);

/* Bytes host_mem_import() maps for [@lo, @hi): whole pages around it. */
uint64_t host_map_bytes(uint64_t lo, uint64_t hi);

/*
 * Hand the mapping and the fd to the release thread (when it runs; else
 * let them go at once), so the caller, the control thread, never waits
 * for the kernel to tear down an engine's pages.
 */
void host_mem_release(struct mem_import *imp);

/* The release thread: started before the first import, stopped (drained) after the last. */
int host_release_start(void);
void host_release_stop(void);

#endif /* KVS_MOVERS_HOST_H */
