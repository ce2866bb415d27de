/* SPDX-License-Identifier: MIT */
/*
 * Movers: what moves bytes between pool slots and the memory of a device
 * (an engine's host memory, a GPU), behind one ops table per backend in
 * the spirit of libfabric's struct ofi_hmem_ops (include/ofi_hmem.h).
 * Nothing outside a mover's folder names it but the table in io/movers.c:
 *
 *   host  movers/host/  engine memory is a sealed memfd mapped here: memcpy,
 *                       inline for small batches, on the copy threads for
 *                       large ones
 *   cuda  movers/cuda/  engine memory is GPU memory: copy engines or a
 *                       gather kernel, on a save and a load stream per GPU
 *
 * Adding a mover is a folder (its sources, its Makefile fragment, its
 * configure m4 when it has a dependency) and one entry in that table.
 *
 * Three parts, three kinds of caller:
 *  - process-wide (daemon start and end): init finds the devices and
 *    starts what the mover's workers share (control thread); pin
 *    registers pool memory with the devices, a chunk at a time from the
 *    pool's start-up threads, several at once (movers_pin());
 *  - engine memory (control thread, REGISTER): import and release, through
 *    mem_import()/mem_release() (io/mem.h);
 *  - the data path (one I/O worker per device): worker_init makes the
 *    worker's instance, a struct mover; submit starts a batch and never
 *    blocks; poll reaps what finished; in-flight says whether the worker
 *    must keep polling rather than sleep.  Every batch, failed or not,
 *    goes back through batch_complete() (io/batch.h) exactly once: inline
 *    from submit, from poll, or from a thread of the mover's own.
 *
 * A mover sees of the worker only the batch (its pieces, direction and
 * sink) and its own instance; it never sees an op, a session or a worker.
 *
 * The SSD tier (ssd/) and peer transfer (libkvspeer, control/peer-host.c) are
 * not movers: each runs its own threads (an io_uring per drive, kvspeer's
 * service thread) and meets the store, not a worker's batches; what they
 * need of a worker is its wake path (worker_wake()) and its command path
 * (worker_cluster_done()).  A mover is what an engine's memory needs.
 *
 * GPU-side ordering: a SAVE that waits for an engine's signal never
 * reaches a mover before the signal is there (the worker parks it and
 * polls the fence word: a GPU stream wait on a page the engine can write
 * would let one engine hold the device's copy stream, and every other
 * session's copies, forever).  A LOAD PROGRESS is the mover's part: struct
 * copy_batch's sig_* fields name a 32-bit word and the pieces where each
 * layer ends, and a mover that can write on its device queue writes layer
 * i's value after that layer's copies (CUDA: cuStreamWriteValue32).  One
 * that cannot ignores them; the worker writes the final value and the
 * status when the batch completes either way.
 */
#ifndef KVS_MOVER_H
#define KVS_MOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/batch.h"

struct kvs_config;
struct kvs_wire_mem;
struct mem_import;

/* Devices one mover drives at most: one I/O worker each. */
#define MOVER_MAX_DEVICES 64

struct mover;

struct mover_ops {
	const char *name;     /* "host", "cuda": in logs */
	const char *dev_name; /* "host", "GPU": its devices and memory, in replies to engines */
	uint32_t device_kind; /* KVS_DEVICE_* of the sessions it serves; 0: none */
	uint32_t mem_kinds;   /* MEM_KIND(KVS_MEM_*) of each memory kind import takes */

	/* ---- process-wide (control thread; pin: the pool's start-up threads) ---- */

	/*
	 * Find the devices and start what the mover's workers share.  Returns
	 * how many devices (one I/O worker each, at most MOVER_MAX_DEVICES;
	 * 0: none usable, and sessions of its kind are refused at HELLO), or
	 * -errno when kvstashd must not start.  Logs what it found.
	 */
	int (*init)(const struct kvs_config *cfg);
	/* After every worker stopped; also after a failed or partial init. */
	void (*fini)(void);
	/*
	 * Optional: which of its devices a HELLO names (@uuid: the HELLO's
	 * device_uuid), or -ENODEV with the reason the engine is told in
	 * @why.  NULL: device 0, whatever the HELLO says (one device).
	 */
	int (*find_device)(const uint8_t uuid[16], char *why, size_t wl);
	/* NUMA node of device @dev, -1: none.  NULL: wherever the pool's first region is. */
	int (*device_node)(unsigned dev);
	/*
	 * Optional: make a chunk of a pool region reachable by the devices'
	 * DMA (pinning); logs failures.  Called from the pool's start-up
	 * threads, for several chunks at once.
	 */
	int (*pin)(void *base, uint64_t size);
	void (*unpin)(void *base);

	/* ---- engine memory (control thread, REGISTER) ---- */

	/*
	 * Optional: bytes of kvstashd's address space an import of [@lo, @hi)
	 * maps and its copies may fault in (charged to kvstashd), checked
	 * against the session's and the uid's bounds before anything is
	 * mapped.  NULL: none (device memory).
	 */
	uint64_t (*map_bytes)(uint64_t lo, uint64_t hi);
	/* See mem_import() in io/mem.h, which calls it.  NULL: no engine memory. */
	int (*import)(unsigned dev, const struct kvs_wire_mem *m, int fd, uint64_t lo, uint64_t hi,
		      struct mem_import *ret, char *why, size_t wl);
	/* Let an import go; whatever fd remains in it, mem_release() closes. */
	void (*release)(struct mem_import *imp);

	/* ---- the data path (the worker's thread) ---- */

	/* The worker's instance for device @dev (@wid names the worker in logs). */
	int (*worker_init)(unsigned dev, unsigned wid, struct mover **ret);
	/* Waits for what is in flight: DMA cannot be cancelled. */
	void (*worker_fini)(struct mover *m);
	/* Start @b (b->sink set); it completes through batch_complete(), maybe before this returns. */
	void (*submit)(struct mover *m, struct copy_batch *b);
	/* Optional: reap finished batches; true if any completed. */
	bool (*poll)(struct mover *m);
	/*
	 * Optional: batches only poll() will complete.  While there are, the
	 * worker polls instead of sleeping; completions from the mover's own
	 * threads wake it instead and are not counted here.
	 */
	unsigned (*inflight)(const struct mover *m);
};

#define MEM_KIND(k) (1u << (k))

/* A worker's instance of a mover; each backend embeds it in its own state. */
struct mover {
	const struct mover_ops *ops;
};

/* The mover of sessions of device kind @kind (KVS_DEVICE_*), NULL if none. */
const struct mover_ops *mover_for_device(uint32_t kind);
/* The mover that imports memory kind @kind (KVS_MEM_*), NULL if none. */
const struct mover_ops *mover_for_mem(uint32_t kind);

/*
 * The table, in order: the host mover first, so the host worker is
 * worker 0 and GPU i's is worker 1 + i.  @i-th mover and (after
 * movers_init()) its device count; NULL past the end.
 */
const struct mover_ops *mover_at(unsigned i, unsigned *ret_devices);

/*
 * Where a HELLO's session goes: the worker (numbered as mover_at() orders
 * them, each mover's devices in turn) of the device that @uuid names, of
 * the mover of sessions of @device_kind.  0 and *@ret_worker, or -ENODEV
 * (also for a kind no mover serves) with the reason in @why.  After
 * movers_init().
 */
int mover_route(uint32_t device_kind, const uint8_t uuid[16], unsigned *ret_worker, char *why,
		size_t wl);
/*
 * How many devices (what its init found, after movers_init()) the mover
 * of sessions of @device_kind drives; 0 if no mover serves that kind.
 * STATUS says from it whether GPUs are there, naming no backend.
 */
unsigned movers_device_count(uint32_t device_kind);

/* Every mover's init, in table order; the first failure fails it. */
int movers_init(const struct kvs_config *cfg);
/* Every initialised mover's fini, in reverse order.  Safe after a failed movers_init(). */
void movers_fini(void);
/* Does a mover with devices pin host memory (so the pool need not lock it)? */
bool movers_pin_memory(void);
/*
 * Pin a chunk of the pool for every mover that pins; on failure nothing
 * stays pinned.  Thread-safe: the pool's start-up threads pin their
 * chunks at once (struct pool_pin).
 */
int movers_pin(void *base, uint64_t size);
void movers_unpin(void *base);
/*
 * The NUMA nodes (-1: unknown) of the devices of every mover that places
 * them (device_node), each once, in table and device order: where the
 * pool belongs.  Returns how many (<= @max); 0 when no such device.
 */
unsigned movers_device_nodes(int *nodes, unsigned max);

#endif /* KVS_MOVER_H */
