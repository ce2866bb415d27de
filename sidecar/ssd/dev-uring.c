/* SPDX-License-Identifier: MIT */
/*
 * The io_uring drive (dev.h): a file or block device opened O_DIRECT and
 * locked, one io_uring with the file fixed and the tier's memory (its
 * bounce area, the pool) registered as fixed buffers, and an eventfd read
 * always armed in the ring so that wake() ends a wait.
 *
 * Threads: ssd_dev_uring_open() and the sync calls on the thread that
 * opens the tier (and on the drive thread at close); the ring is made by
 * start() on the drive thread, which alone submits and reaps
 * (IORING_SETUP_SINGLE_ISSUER where the kernel has it) and tears it down
 * (stop()); wake() from any thread (an eventfd write, ordered by the
 * kernel against the armed read); close() after the drive thread is
 * joined.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <linux/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "common/mem.h"
#include "ssd/dev.h"
#include "ssd/format.h"

#define FIXED_PIECE (1ull << 30) /* the kernel's limit per registered buffer */
#define MAX_FIXED   1024u

struct fixed_map {
	uint8_t *base;
	uint64_t len;
	unsigned first; /* buffer index of its first 1 GiB piece */
};

struct uring_dev {
	struct ssd_dev dev; /* first: the tier holds &dev */
	char *path;
	int fd, efd;
	kvs_log_hook *log;
	void *log_arg;
	struct io_uring ring;
	bool ring_ok;
	bool fixed_file, fixed_bufs;
	struct fixed_map fixed[MAX_FIXED];
	unsigned nr_fixed_maps;
	uint64_t wake_val; /* the armed eventfd read's target */
};

static struct uring_dev *to_u(struct ssd_dev *dev)
{
	return (struct uring_dev *)dev;
}

/* ---- synchronous I/O (superblocks) ------------------------------------- */

static int ur_read_sync(struct ssd_dev *dev, void *buf, uint32_t len, uint64_t off)
{
	ssize_t n = pread(to_u(dev)->fd, buf, len, (off_t)off);

	return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
}

static int ur_write_sync(struct ssd_dev *dev, const void *buf, uint32_t len, uint64_t off)
{
	ssize_t n = pwrite(to_u(dev)->fd, buf, len, (off_t)off);

	return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
}

static int ur_datasync(struct ssd_dev *dev)
{
	return fdatasync(to_u(dev)->fd) < 0 ? -errno : 0;
}

/* ---- the ring (drive thread) -------------------------------------------- */

static struct io_uring_sqe *get_sqe(struct uring_dev *u)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

	if (!sqe) {
		io_uring_submit(&u->ring);
		sqe = io_uring_get_sqe(&u->ring);
	}
	return sqe;
}

/* Which fixed buffer covers [p, p + len), or -1. */
static int fixed_index(struct uring_dev *u, const void *p, uint64_t len)
{
	const uint8_t *a = p;

	if (!u->fixed_bufs)
		return -1;
	for (unsigned i = 0; i < u->nr_fixed_maps; i++) {
		const struct fixed_map *m = &u->fixed[i];
		uint64_t off, piece;

		if (a < m->base || a + len > m->base + m->len)
			continue;
		off = (uint64_t)(a - m->base);
		piece = off / FIXED_PIECE;
		if ((off + len - 1) / FIXED_PIECE != piece)
			return -1; /* crosses two pieces: plain I/O */
		return (int)(m->first + piece);
	}
	return -1;
}

static int ur_prep_rw(struct ssd_dev *dev, bool write, void *buf, uint32_t len, uint64_t off,
		      uint64_t tag)
{
	struct uring_dev *u = to_u(dev);
	struct io_uring_sqe *sqe = get_sqe(u);
	int fidx = fixed_index(u, buf, len);
	int fd = u->fixed_file ? 0 : u->fd;

	if (!sqe)
		return -EBUSY;
	if (fidx >= 0) {
		if (write)
			io_uring_prep_write_fixed(sqe, fd, buf, len, off, fidx);
		else
			io_uring_prep_read_fixed(sqe, fd, buf, len, off, fidx);
	} else if (write) {
		io_uring_prep_write(sqe, fd, buf, len, off);
	} else {
		io_uring_prep_read(sqe, fd, buf, len, off);
	}
	if (u->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, tag);
	return 0;
}

static int ur_prep_sync(struct ssd_dev *dev, uint64_t tag)
{
	struct uring_dev *u = to_u(dev);
	struct io_uring_sqe *sqe = get_sqe(u);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_fsync(sqe, u->fixed_file ? 0 : u->fd, IORING_FSYNC_DATASYNC);
	if (u->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, tag);
	return 0;
}

/* The wake-up read: completes when wake() writes the eventfd, re-armed each time. */
static void arm_wake(struct uring_dev *u)
{
	struct io_uring_sqe *sqe = get_sqe(u);

	if (!sqe)
		return;
	io_uring_prep_read(sqe, u->efd, &u->wake_val, sizeof(u->wake_val), 0);
	io_uring_sqe_set_data64(sqe, SSD_DEV_TAG_RESERVED);
}

static void ur_submit(struct ssd_dev *dev)
{
	io_uring_submit(&to_u(dev)->ring);
}

static unsigned ur_reap(struct ssd_dev *dev, unsigned wait_nr, uint64_t timeout_ns,
			ssd_dev_done_fn *done, void *arg)
{
	struct uring_dev *u = to_u(dev);
	struct __kernel_timespec ts = { (long long)(timeout_ns / 1000000000ull),
					(long long)(timeout_ns % 1000000000ull) };
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	io_uring_submit_and_wait_timeout(&u->ring, &cqe, wait_nr, &ts, NULL);
	io_uring_for_each_cqe(&u->ring, head, cqe)
	{
		uint64_t tag = io_uring_cqe_get_data64(cqe);

		if (tag == SSD_DEV_TAG_RESERVED)
			arm_wake(u);
		else
			done(arg, tag, cqe->res);
		n++;
	}
	io_uring_cq_advance(&u->ring, n);
	return n;
}

static void ur_wake(struct ssd_dev *dev)
{
	uint64_t one = 1;

	/* The eventfd read armed in the ring completes; the thread runs its loop. */
	if (write(to_u(dev)->efd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is saturated, a wake-up is pending anyway. */
	}
}

/*
 * SINGLE_ISSUER (one thread owns the ring) and SUBMIT_ALL, where the
 * kernel has them; not COOP_TASKRUN or DEFER_TASKRUN, which hold each
 * completion until this thread enters the kernel again: on this
 * project's shared 2-core machine they were never faster, and once
 * half as fast (docs/PERFORMANCE.md).  Tried in order; a flag the
 * kernel lacks fails with EINVAL and the next set is tried.
 * $KVSTASH_SSD_SETUP=N starts at set N (benchmarks).
 */
static int ring_init(struct uring_dev *u, unsigned entries, struct ssd_dev_setup *ret)
{
	static const unsigned flag_sets[] = {
		IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER,
		IORING_SETUP_SUBMIT_ALL,
		0,
	};
	const char *first = getenv("KVSTASH_SSD_SETUP");
	int r = -EINVAL;

	for (unsigned i = first ? (unsigned)atoi(first) : 0;
	     i < sizeof(flag_sets) / sizeof(flag_sets[0]); i++) {
		struct io_uring_params p = { .flags = flag_sets[i] | IORING_SETUP_CQSIZE };

		p.cq_entries = entries * 2;
		r = io_uring_queue_init_params(entries, &u->ring, &p);
		if (r == 0) {
			ret->setup_flags = flag_sets[i];
			break;
		}
		if (r != -EINVAL)
			break;
	}
	return r;
}

/* Fixed buffers: @mem in order (the tier's bounce area first), each in 1 GiB pieces. */
static int register_mem(struct uring_dev *u, const struct ssd_dev_mem *mem, unsigned nr)
{
	struct iovec *iov = calloc(MAX_FIXED + 1, sizeof(*iov));
	unsigned n = 0;
	int r;

	if (!iov)
		return -ENOMEM;
	u->nr_fixed_maps = 0;
	for (unsigned b = 0; b < nr && u->nr_fixed_maps < MAX_FIXED; b++) {
		uint8_t *base = mem[b].base;
		uint64_t len = mem[b].len;

		if (!base || !len)
			continue;
		u->fixed[u->nr_fixed_maps++] = (struct fixed_map){ base, len, n };
		for (uint64_t off = 0; off < len && n < MAX_FIXED; off += FIXED_PIECE) {
			iov[n].iov_base = base + off;
			iov[n++].iov_len = len - off < FIXED_PIECE ? len - off : FIXED_PIECE;
		}
	}
	r = io_uring_register_buffers(&u->ring, iov, n);
	free(iov);
	if (r == 0) {
		u->fixed_bufs = true;
	} else {
		/* RLIMIT_MEMLOCK, or memory the kernel will not pin: plain reads and writes. */
		LOG_HOOK(u->log, u->log_arg, LOG_INFO, r,
			 "%s: buffers not registered with io_uring; plain I/O", u->path);
		u->nr_fixed_maps = 0;
	}
	return 0;
}

static int ur_start(struct ssd_dev *dev, unsigned entries, const struct ssd_dev_mem *mem,
		    unsigned nr, struct ssd_dev_setup *ret)
{
	struct uring_dev *u = to_u(dev);
	int r = ring_init(u, entries, ret);

	if (r < 0)
		return r;
	u->ring_ok = true;
	if (io_uring_register_files(&u->ring, &u->fd, 1) == 0)
		u->fixed_file = true;
	r = register_mem(u, mem, nr);
	if (r < 0)
		return r;
	arm_wake(u);
	ret->fixed_file = u->fixed_file;
	ret->fixed_buffers = u->fixed_bufs;
	return 0;
}

static void ur_stop(struct ssd_dev *dev)
{
	struct uring_dev *u = to_u(dev);

	if (u->ring_ok)
		io_uring_queue_exit(&u->ring);
	u->ring_ok = false;
}

static void ur_close(struct ssd_dev *dev)
{
	struct uring_dev *u = to_u(dev);

	if (!u)
		return;
	if (u->efd >= 0)
		close(u->efd);
	if (u->fd >= 0) {
		/* Now, not when the kernel drops the ring's reference to the file. */
		flock(u->fd, LOCK_UN);
		close(u->fd);
	}
	free(u->path);
	free(u);
}

static const struct ssd_dev_ops uring_ops = {
	.read_sync = ur_read_sync,
	.write_sync = ur_write_sync,
	.datasync = ur_datasync,
	.start = ur_start,
	.prep_rw = ur_prep_rw,
	.prep_sync = ur_prep_sync,
	.submit = ur_submit,
	.reap = ur_reap,
	.wake = ur_wake,
	.stop = ur_stop,
	.close = ur_close,
};

/* ---- opening (the caller's thread) -------------------------------------- */

static int dio_alignment(struct uring_dev *u)
{
	struct statx sx;
	uint32_t io = 0, mem = 0;
	int lbs;

	if (statx(u->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
	    (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align) {
		io = sx.stx_dio_offset_align;
		mem = sx.stx_dio_mem_align;
	}
	if (!io && u->dev.bdev && ioctl(u->fd, BLKSSZGET, &lbs) == 0 && lbs > 0)
		io = (uint32_t)lbs;
	if (!io)
		io = SSD_UNIT; /* unknown: the safest, every device accepts it */
	if (!mem || mem < io)
		mem = mem ? mem : io;
	u->dev.io_align = io;
	u->dev.mem_align = mem < 8 ? 8 : mem;
	if (io > SSD_UNIT || (io & (io - 1)))
		return -EINVAL;
	return 0;
}

/* Open O_DIRECT and take the lock that keeps a second kvstashd off the drive. */
static int open_locked(struct uring_dev *u, char *err, size_t errlen)
{
	int r;

	u->fd = open(u->path, O_RDWR | O_DIRECT | O_CLOEXEC | O_CREAT, 0600);
	if (u->fd < 0) {
		r = -errno;
		if (r == -EINVAL)
			snprintf(err, errlen, "%s: O_DIRECT is not supported there (tmpfs?)",
				 u->path);
		else
			snprintf(err, errlen, "%s: cannot open: %s", u->path, strerror(-r));
		return r;
	}
	/*
	 * A process that just died may still hold the lock for a moment: its
	 * ring's registered file is released by the kernel after the exit.
	 */
	for (unsigned tries = 0; flock(u->fd, LOCK_EX | LOCK_NB) < 0; tries++) {
		struct timespec ts = { 0, 10 * 1000000 };

		r = -errno;
		if (r == -EWOULDBLOCK && tries < 300) {
			nanosleep(&ts, NULL);
			continue;
		}
		snprintf(err, errlen, "%s: in use by another process (%s)", u->path, strerror(-r));
		return r == -EWOULDBLOCK ? -EBUSY : r;
	}
	return 0;
}

/* A block device's size (@size 0: all of it), or a file preallocated to @size. */
static int size_drive(struct uring_dev *u, const struct stat *st, uint64_t size, char *err,
		      size_t errlen)
{
	int r;

	if (S_ISBLK(st->st_mode)) {
		uint64_t devsz = 0;

		u->dev.bdev = true;
		if (ioctl(u->fd, BLKGETSIZE64, &devsz) < 0) {
			r = -errno;
			snprintf(err, errlen, "%s: cannot read the device size: %s", u->path,
				 strerror(-r));
			return r;
		}
		if (size == 0)
			size = devsz;
		if (size > devsz) {
			snprintf(err, errlen,
				 "%s: size %" PRIu64 " exceeds the device (%" PRIu64 ")", u->path,
				 size, devsz);
			return -ENOSPC;
		}
	} else if (S_ISREG(st->st_mode)) {
		if (size == 0) {
			snprintf(err, errlen, "%s: [ssd] size is needed for a file", u->path);
			return -EINVAL;
		}
		if ((uint64_t)st->st_size < size && fallocate(u->fd, 0, 0, (off_t)size) < 0) {
			r = -errno;
			snprintf(err, errlen, "%s: cannot preallocate %" PRIu64 " bytes: %s",
				 u->path, size, strerror(-r));
			return r;
		}
	} else {
		snprintf(err, errlen, "%s: not a regular file or a block device", u->path);
		return -EINVAL;
	}
	u->dev.size = size;
	return 0;
}

static int open_steps(struct uring_dev *u, uint64_t size, char *err, size_t errlen)
{
	struct stat st;
	int r = open_locked(u, err, errlen);

	if (r < 0)
		return r;
	if (fstat(u->fd, &st) < 0) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", u->path, strerror(-r));
		return r;
	}
	r = size_drive(u, &st, size, err, errlen);
	if (r < 0)
		return r;
	/* The superblock's record of the file (the fd keeps naming the same one). */
	u->dev.dev = u->dev.bdev ? (uint64_t)st.st_rdev : (uint64_t)st.st_dev;
	u->dev.ino = (uint64_t)st.st_ino;
	r = dio_alignment(u);
	if (r < 0) {
		snprintf(err, errlen, "%s: direct I/O alignment %u is not supported (at most %u)",
			 u->path, u->dev.io_align, SSD_UNIT);
		return r;
	}
	u->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (u->efd < 0) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", u->path, strerror(-r));
		return r;
	}
	return 0;
}

int ssd_dev_uring_open(const char *path, uint64_t size, kvs_log_hook *log, void *log_arg,
		       struct ssd_dev **ret, char *err, size_t errlen)
{
	struct uring_dev *u = calloc(1, sizeof(*u));
	int r;

	if (!u)
		return -ENOMEM;
	u->dev.ops = &uring_ops;
	u->fd = u->efd = -1;
	u->log = log;
	u->log_arg = log_arg;
	u->path = strdup(path);
	if (!u->path) {
		ur_close(&u->dev);
		return -ENOMEM;
	}
	r = open_steps(u, size, err, errlen);
	if (r < 0) {
		ur_close(&u->dev);
		return r;
	}
	*ret = &u->dev;
	return 0;
}
