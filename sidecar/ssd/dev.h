/* SPDX-License-Identifier: MIT */
/*
 * The drive I/O layer: what the log-structured tier (tier.h) asks of one
 * drive, behind an ops table, so that the tier never names io_uring, a
 * file descriptor or O_DIRECT.  Two drives implement it:
 *
 *   dev-uring.c  a file or block device opened O_DIRECT, one io_uring
 *                (fixed file, the tier's memory as fixed buffers), an
 *                eventfd read always armed in it for wake-ups
 *   dev-mem.c    a malloc'ed buffer (like CacheLib navy's memory device):
 *                the same ops, I/O done at submit and completed from a
 *                queue, so the tier's logic runs in unit tests without a
 *                disk; it can fail the I/O of a byte range on demand
 *
 * The tier turns every block I/O into data requests here (prep_rw), each
 * with a 64-bit tag it gets back with the result (bytes or -errno) from
 * reap(); checking lengths, checksums and retries are the tier's.  Fault
 * injection (fault.c) stays in the tier: its rules count block reads and
 * writes, not the one to three requests each becomes.
 *
 * Threads: the sync calls (read_sync, write_sync, datasync) run on the
 * thread that opens the tier (superblocks) and on the drive thread at
 * close; start, prep_*, submit, reap and stop only on the drive thread,
 * after start() on it; wake() from any thread; close() once that thread
 * has been joined.
 */
#ifndef KVS_SSD_DEV_H
#define KVS_SSD_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/loghook.h"

struct ssd_dev;

/* Memory the tier does I/O from and to (registered as fixed buffers where the drive can). */
struct ssd_dev_mem {
	void *base;
	uint64_t len;
};

/* What start() made of the drive (the tier's stats show it). */
struct ssd_dev_setup {
	uint32_t setup_flags; /* IORING_SETUP_* in use; 0 for memory */
	bool fixed_file, fixed_buffers;
};

/* One completed request: @tag as given to prep_*, @res bytes moved or -errno. */
typedef void ssd_dev_done_fn(void *arg, uint64_t tag, int res);

/* Tag 0 is the drive's own (dev-uring.c: its wake-up read): the tier never passes it. */
#define SSD_DEV_TAG_RESERVED 0ull

struct ssd_dev_ops {
	/* Synchronous, whole or -errno (-EIO for a short transfer). */
	int (*read_sync)(struct ssd_dev *dev, void *buf, uint32_t len, uint64_t off);
	int (*write_sync)(struct ssd_dev *dev, const void *buf, uint32_t len, uint64_t off);
	int (*datasync)(struct ssd_dev *dev);
	/*
	 * On the drive thread: room for @entries requests, @mem[0..@nr) as
	 * fixed buffers where it can (not fatal when it cannot).  -errno.
	 */
	int (*start)(struct ssd_dev *dev, unsigned entries, const struct ssd_dev_mem *mem,
		     unsigned nr, struct ssd_dev_setup *ret);
	/* Queue a request (submitted by submit() or reap()): 0, or -EBUSY (no room). */
	int (*prep_rw)(struct ssd_dev *dev, bool write, void *buf, uint32_t len, uint64_t off,
		       uint64_t tag);
	int (*prep_sync)(struct ssd_dev *dev, uint64_t tag); /* a datasync; res 0 */
	void (*submit)(struct ssd_dev *dev);
	/*
	 * Submit, wait for @wait_nr completions (0 or 1) at most @timeout_ns
	 * or until wake(), then hand every completion to @done (which may
	 * prep more).  Returns the completions seen, wake-ups included.
	 */
	unsigned (*reap)(struct ssd_dev *dev, unsigned wait_nr, uint64_t timeout_ns,
			 ssd_dev_done_fn *done, void *arg);
	/* Any thread: make a waiting or the next reap() return. */
	void (*wake)(struct ssd_dev *dev);
	/* On the drive thread, last: tear down what start() made.  Safe without start(). */
	void (*stop)(struct ssd_dev *dev);
	/* Release the drive (dev-uring.c frees it; dev-mem.c keeps its bytes). */
	void (*close)(struct ssd_dev *dev);
};

struct ssd_dev {
	const struct ssd_dev_ops *ops;
	uint64_t size;	    /* bytes the tier may use (before its rounding to units) */
	uint32_t io_align;  /* offsets and lengths: a power of two, at most SSD_UNIT */
	uint32_t mem_align; /* buffer addresses */
	bool bdev;	    /* a block device (the superblock records st_rdev) */
	uint64_t dev, ino;  /* what the superblock records of the file */
};

/*
 * dev-uring.c: open @path O_DIRECT (created, preallocated to @size; a
 * block device: @size 0 is all of it), locked against other processes.
 * @log gets what is worth saying but not fatal.  On failure a reason
 * naming @path goes into @err: -ENOENT, -EACCES, -EBUSY, -ENOSPC, -EINVAL.
 */
int ssd_dev_uring_open(const char *path, uint64_t size, kvs_log_hook *log, void *log_arg,
		       struct ssd_dev **ret, char *err, size_t errlen);

/* ---- the memory drive (dev-mem.c) -------------------------------------- */

struct ssd_mem;

/* A zeroed drive of @size bytes (io_align and mem_align 512): -EINVAL, -ENOMEM. */
int ssd_mem_new(uint64_t size, struct ssd_mem **ret);
/* Free it; it must not be open (ssd_close() first).  NULL: nothing. */
void ssd_mem_free(struct ssd_mem *m);
/* Its bytes, for tests that look at or damage what the tier wrote. */
uint8_t *ssd_mem_bytes(struct ssd_mem *m, uint64_t *ret_size);
/*
 * From now on every queued read or write touching [@off, @off + @len)
 * completes with @err (nothing moved), until called again; @len 0 stops
 * it.  Any thread.
 */
void ssd_mem_fail(struct ssd_mem *m, uint64_t off, uint64_t len, int err);
/* Requests failed so far by ssd_mem_fail(). */
uint64_t ssd_mem_failed(struct ssd_mem *m);
/* The drive behind @m for the tier, -EBUSY while another tier has it open. */
int ssd_mem_claim(struct ssd_mem *m, struct ssd_dev **ret);

#endif /* KVS_SSD_DEV_H */
