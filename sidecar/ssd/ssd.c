/* SPDX-License-Identifier: MIT */
/*
 * The drives of the SSD tier: one thread and one io_uring each (ssd.h
 * says what the rest of the daemon may call from where).
 *
 * A drive thread runs one loop: take requests queued by other threads,
 * recover (at start), start reads, start writes (as far as the queue
 * depth, the open region and the rate cap allow), seal full regions, then
 * submit and wait for a completion, a wake-up (an eventfd read that is
 * always armed in the ring) or a 100 ms tick (health probe, error window).
 * It never blocks on anything but its own ring.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <linux/stat.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "common/mem.h"
#include "common/loghook.h"
#include "common/bits.h"
#include "ssd/crc32c.h"
#include "ssd/fault.h"
#include "ssd/format.h"
#include "ssd/region.h"
#include "ssd/ssd.h"

#define DEF_REGION_BYTES (256ull << 20)
#define DEF_DEPTH	 32u
#define DEF_MAX_ERRORS	 8u
#define DEF_DRAIN_MS	 10000u
#define ERROR_WINDOW_NS	 (10ull * 1000000000ull)
#define PROBE_IDLE_NS	 (500ull * 1000000ull)
#define TICK_NS		 (100ull * 1000000ull)
#define IDLE_AFTER_READ_NS (20ull * 1000000ull) /* drive_idle_in() */
#define READ_QUEUE_MAX	 1024u
#define RECOV_TAIL	 (128u << 10)
#define FIXED_PIECE	 (1ull << 30) /* the kernel's limit per registered buffer */
#define MAX_FIXED	 1024u
#define LOG_BURST	 10u
#define LOG_WINDOW_NS	 (5ull * 1000000000ull)
#define DOOR_BITS	 (1u << 22)

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t rup(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static inline uint64_t MIN_U64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}


/* ---- requests and in-flight operations -------------------------------- */

struct wreq {
	struct wreq *prev, *next;
	uint32_t ns;
	uint8_t key[SSD_KEY_SIZE];
	uint16_t shard;
	const void *buf;
	uint32_t len;
	uint32_t value;
	uint32_t ent;
	void *cookie;
	uint64_t t0;
};

struct rreq {
	struct rreq *next;
	struct ssd_loc loc;
	void *dst;
	size_t cap;
	void *cookie;
	uint64_t t0;
};

enum iop_kind {
	IOP_WAKE,
	IOP_WRITE,
	IOP_READ,
	IOP_RECOV,
	IOP_SEAL,
	IOP_PROBE,
	IOP_ZONE,
	IOP_OPEN,
	IOP_SYNC,
};

/* Regions erased ahead of the writes at most (erase_ahead()). */
#define AHEAD_MAX 8

enum recov_phase { RP_PROBE, RP_SUMMARY };

#define IOP_MAX_SQES 3

struct iop {
	int kind;
	int pending;
	int err;
	bool short_io;
	uint32_t expect[IOP_MAX_SQES];
	uint64_t t0;
	uint8_t *bounce; /* 2 units of the drive's registered bounce area */
	uint16_t bounce_idx;
	struct iop *next_free;
	enum ssd_fault fault;
	/* write; zone unit */
	struct wreq *w;
	uint32_t region;
	uint64_t off; /* the payload's */
	uint32_t entry, unit;
	bool payload_done, hdr_done;
	int hdr_err;
	struct iop *next_wait; /* in the drive's list of writes waiting for their header */
	uint8_t hdr[SSD_HDR_SIZE];
	uint32_t crc;
	uint8_t *tmp;
	/* read */
	struct rreq *r;
	uint32_t main_len, tail_len;
	/* recovery */
	int phase;
	uint8_t *rbuf;
	size_t rcap;
	uint32_t rseq; /* region sequence the chain walk follows */
	uint32_t next_block;
	uint64_t roff; /* next header's offset (chain) */
	/* wake */
	uint64_t wake_val;
};

struct fixed_map {
	uint8_t *base;
	uint64_t len;
	unsigned first; /* buffer index of its first 1 GiB piece */
};

struct drive_stats_atomic {
	struct ssd_drive_stats s; /* fields updated with relaxed atomics */
};

struct drive {
	struct ssd *ssd;
	unsigned id;
	char *path;
	int fd;
	bool bdev;
	uint32_t io_align, mem_align;
	struct ssd_super sb;
	struct ssd_geom geom;
	bool formatted, last_clean;

	/* drive thread */
	pthread_t thread;
	bool thread_started;
	struct io_uring ring;
	bool ring_ok;
	unsigned ring_entries;
	uint32_t depth;
	uint32_t inflight_blocks; /* reads + writes in flight */
	uint32_t inflight_total;  /* every iop but the wake read */
	struct iop *iops;
	struct iop *free_iops;
	unsigned nfree_iops;
	struct iop *landed_head, *landed_tail; /* reads landed, not yet checked */
	uint8_t *bounce_area;
	bool fixed_file, fixed_bufs;
	struct fixed_map fixed[MAX_FIXED];
	unsigned nr_fixed_maps;
	struct ssd_region *regions;
	uint32_t zreg[AHEAD_MAX + 8]; /* regions with a zone image: open or sealing */
	unsigned nzreg;
	struct iop *hwait; /* writes waiting for their header zone unit */
	uint32_t cur;	   /* open region, or SSD_NO_ENTRY */
	uint32_t next_open;
	/* Opened ahead of need, in FIFO order: where writes go when cur fills. */
	uint32_t ahead[AHEAD_MAX];
	unsigned nahead, ahead_want;
	unsigned erases_inflight; /* the current batch's erase writes */
	bool sync_inflight;	  /* its datasync */
	bool sync_wanted;	  /* erases landed since the last datasync was issued */
	uint32_t next_seq;
	struct rreq *rq_head, *rq_tail; /* reads taken from the queue, not started */
	double tokens;
	uint64_t tokens_ns;
	uint64_t err_window_start;
	uint32_t err_window_count;
	uint64_t last_completion_ns;
	uint64_t last_read_ns; /* the last read's end (drive thread): the idle hook waits after it */
	bool probe_inflight;
	uint8_t *probe_buf;
	/* recovery */
	uint32_t recov_cursor;
	uint32_t recov_inflight;
	uint32_t *recov_seq;
	bool *recov_valid;
	uint64_t recov_t0;
	/* stopping */
	uint64_t drain_deadline;
	bool sync_done;
	bool write_stalled;
	bool setup_done; /* wait_lock */
	int setup_res;

	/* shared with other threads (qlock) */
	pthread_mutex_t qlock;
	struct wreq *wq_head, *wq_tail; /* oldest first */
	uint32_t wq_len;
	uint32_t wq_max;
	struct wreq *wfree;
	struct rreq *rq_in_head, *rq_in_tail;
	uint32_t rq_len;
	bool sleeping;
	int efd;

	/* atomics */
	uint32_t state;	   /* enum ssd_drive_state, release/acquire */
	uint32_t stopping; /* 1: close, 2: abandon; store-release in ssd_close */

	/* log rate limit (drive thread and ssd_read/ssd_write callers: lock) */
	pthread_mutex_t log_lock;
	uint64_t log_window;
	uint32_t log_count, log_suppressed;

	struct ssd_drive_stats st;
};

struct ssd {
	struct ssd_config cfg;
	unsigned nr;
	struct drive *drives[SSD_MAX_DRIVES];
	struct ssd_index idx;
	struct ssd_faults *faults;
	pthread_mutex_t wait_lock;
	pthread_cond_t wait_cond;
	uint32_t rr; /* round robin (relaxed) */
	pthread_mutex_t door_lock;
	uint8_t *door;
	uint32_t door_adds;
	uint64_t door_seed;
	/* counters (relaxed atomics) */
	uint64_t lookups, hits, admitted, not_admitted, exists, dropped, displaced;
};

#define ADD(p, v)   __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define SUB(p, v)   __atomic_fetch_sub((p), (v), __ATOMIC_RELAXED)
#define LOAD(p)	    __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

/* ---- logging ---------------------------------------------------------- */

#define slog(ssd, level, err, ...) \
	LOG_HOOK((ssd)->cfg.log, (ssd)->cfg.cb_arg, (level), (err), __VA_ARGS__)

/* I/O errors: at most LOG_BURST lines per LOG_WINDOW_NS and drive, then a count. */
__attribute__((format(printf, 4, 5))) static void dlog_rl(struct drive *d, int level, int err,
							  const char *fmt, ...)
{
	char msg[400];
	uint32_t suppressed = 0;
	bool emit;
	uint64_t now = mono_ns();
	va_list ap;

	pthread_mutex_lock(&d->log_lock);
	if (now - d->log_window > LOG_WINDOW_NS) {
		suppressed = d->log_suppressed;
		d->log_window = now;
		d->log_count = 0;
		d->log_suppressed = 0;
	}
	emit = d->log_count < LOG_BURST;
	if (emit)
		d->log_count++;
	else
		d->log_suppressed++;
	pthread_mutex_unlock(&d->log_lock);
	if (suppressed)
		slog(d->ssd, LOG_WARNING, 0, "%s: %u similar messages suppressed", d->path,
		     suppressed);
	if (!emit)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	slog(d->ssd, level, err, "%s: %s", d->path, msg);
}

/* One I/O of @ns into histogram @h and its sum @sum_ns (Prometheus wants both). */
static void hist_add(uint64_t *h, uint64_t *sum_ns, uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned b = us ? 64 - __builtin_clzll(us) : 0;

	if (b >= SSD_HIST_BUCKETS)
		b = SSD_HIST_BUCKETS - 1;
	ADD(&h[b], 1);
	ADD(sum_ns, ns);
}

static uint32_t drive_state(const struct drive *d)
{
	/* Pairs with the store-release in set_state(). */
	return __atomic_load_n(&d->state, __ATOMIC_ACQUIRE);
}

static void set_state(struct drive *d, uint32_t s)
{
	__atomic_store_n(&d->state, s, __ATOMIC_RELEASE);
	STORE(&d->st.state, s);
}

static void notify_waiters(struct ssd *ssd)
{
	pthread_mutex_lock(&ssd->wait_lock);
	pthread_cond_broadcast(&ssd->wait_cond);
	pthread_mutex_unlock(&ssd->wait_lock);
}

/* ---- io_uring helpers ------------------------------------------------- */

static struct iop *iop_get(struct drive *d, int kind)
{
	struct iop *op = d->free_iops;

	if (!op)
		return NULL;
	d->free_iops = op->next_free;
	d->nfree_iops--;
	op->kind = kind;
	op->pending = 0;
	op->err = 0;
	op->short_io = false;
	op->fault = SSD_FAULT_NONE;
	op->w = NULL;
	op->r = NULL;
	op->tmp = NULL;
	op->t0 = mono_ns();
	if (kind != IOP_WAKE)
		d->inflight_total++;
	return op;
}

static void iop_put(struct drive *d, struct iop *op)
{
	if (op->kind != IOP_WAKE)
		d->inflight_total--;
	op->tmp = mfree(op->tmp);
	op->next_free = d->free_iops;
	d->free_iops = op;
	d->nfree_iops++;
}

static struct io_uring_sqe *get_sqe(struct drive *d)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);

	if (!sqe) {
		io_uring_submit(&d->ring);
		sqe = io_uring_get_sqe(&d->ring);
	}
	return sqe;
}

/* Which fixed buffer covers [p, p + len), or -1. */
static int fixed_index(struct drive *d, const void *p, uint64_t len)
{
	const uint8_t *a = p;

	if (!d->fixed_bufs)
		return -1;
	for (unsigned i = 0; i < d->nr_fixed_maps; i++) {
		const struct fixed_map *m = &d->fixed[i];
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

/* Queue one data SQE of @op: @len bytes at file offset @off from/to @buf. */
static int prep_io(struct drive *d, struct iop *op, bool write, void *buf, uint32_t len,
		   uint64_t off, uint32_t expect)
{
	struct io_uring_sqe *sqe = get_sqe(d);
	int fidx = fixed_index(d, buf, len);
	int fd = d->fixed_file ? 0 : d->fd;

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
	if (d->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	op->expect[op->pending] = expect;
	/* The SQE's number in the low bits: iops are 8-byte aligned. */
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op | (uint64_t)op->pending);
	op->pending++;
	return 0;
}

static void arm_wake(struct drive *d)
{
	struct iop *op = iop_get(d, IOP_WAKE);
	struct io_uring_sqe *sqe;

	if (!op)
		return;
	sqe = get_sqe(d);
	if (!sqe) {
		iop_put(d, op);
		return;
	}
	io_uring_prep_read(sqe, d->efd, &op->wake_val, sizeof(op->wake_val), 0);
	op->expect[0] = sizeof(op->wake_val);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
	op->pending = 1;
}

/* ---- errors and offline ------------------------------------------------ */

static void go_offline(struct drive *d, int err, const char *why)
{
	if (drive_state(d) == SSD_DRIVE_OFFLINE || drive_state(d) == SSD_DRIVE_CLOSED)
		return;
	set_state(d, SSD_DRIVE_OFFLINE);
	slog(d->ssd, LOG_ERR, err, "%s: drive offline (%s); its blocks are misses from now on",
	     d->path, why);
	notify_waiters(d->ssd);
}

static void note_error(struct drive *d, int err)
{
	uint64_t now = mono_ns();
	uint32_t max = d->ssd->cfg.max_errors ? d->ssd->cfg.max_errors : DEF_MAX_ERRORS;

	if (err == -ENODEV || err == -ENXIO) {
		go_offline(d, err, "device removed");
		return;
	}
	if (now - d->err_window_start > ERROR_WINDOW_NS) {
		d->err_window_start = now;
		d->err_window_count = 0;
	}
	if (++d->err_window_count >= max)
		go_offline(d, err, "too many I/O errors");
}

/* ---- superblock -------------------------------------------------------- */

static void host_identity(uint8_t id[16])
{
	char buf[64] = "";
	FILE *f = fopen("/etc/machine-id", "re");

	memset(id, 0, 16);
	if (f) {
		if (fgets(buf, sizeof(buf), f) && strlen(buf) >= 32) {
			for (unsigned i = 0; i < 16; i++) {
				unsigned v;

				if (sscanf(buf + 2 * i, "%2x", &v) != 1)
					break;
				id[i] = (uint8_t)v;
			}
		}
		fclose(f);
		return;
	}
	if (gethostname(buf, sizeof(buf) - 1) == 0) {
		uint32_t c = crc32c(0, buf, strlen(buf));

		memcpy(id, &c, 4);
		memcpy(id + 4, buf, strnlen(buf, 12));
	}
}

static int write_super(struct drive *d, const struct ssd_super *sb, unsigned copy)
{
	uint8_t *buf;
	int r = 0;

	if (posix_memalign((void **)&buf, SSD_UNIT, SSD_UNIT))
		return -ENOMEM;
	memset(buf, 0, SSD_UNIT);
	ssd_super_encode(sb, buf);
	if (pwrite(d->fd, buf, SSD_UNIT, (off_t)copy * SSD_UNIT) != SSD_UNIT)
		r = errno ? -errno : -EIO;
	free(buf);
	return r;
}

/* Mark the drive in use (or clean): the next generation into the other copy, synced. */
static int mark_super(struct drive *d, bool clean)
{
	struct stat st;
	int r;

	d->sb.generation++;
	d->sb.flags = clean ? SSD_SB_CLEAN : 0;
	host_identity(d->sb.host_id);
	if (fstat(d->fd, &st) == 0) {
		d->sb.dev = d->bdev ? (uint64_t)st.st_rdev : (uint64_t)st.st_dev;
		d->sb.ino = (uint64_t)st.st_ino;
	}
	d->sb.open_time = (uint64_t)time(NULL);
	r = write_super(d, &d->sb, d->sb.generation & 1);
	if (r == 0 && fdatasync(d->fd) < 0)
		r = -errno;
	return r;
}

/* ---- opening a drive (caller's thread) ---------------------------------- */

static int dio_alignment(struct drive *d)
{
	struct statx sx;
	uint32_t io = 0, mem = 0;
	int lbs;

	if (statx(d->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
	    (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align) {
		io = sx.stx_dio_offset_align;
		mem = sx.stx_dio_mem_align;
	}
	if (!io && d->bdev && ioctl(d->fd, BLKSSZGET, &lbs) == 0 && lbs > 0)
		io = (uint32_t)lbs;
	if (!io)
		io = SSD_UNIT; /* unknown: the safest, every device accepts it */
	if (!mem || mem < io)
		mem = mem ? mem : io;
	d->io_align = io;
	d->mem_align = mem < 8 ? 8 : mem;
	if (io > SSD_UNIT || (io & (io - 1)))
		return -EINVAL;
	return 0;
}

static int open_drive(struct ssd *ssd, struct drive *d, char *err, size_t errlen)
{
	const struct ssd_config *cfg = &ssd->cfg;
	uint64_t region = cfg->region_size ? cfg->region_size : DEF_REGION_BYTES;
	uint64_t size = cfg->size;
	struct ssd_super sb;
	struct stat st;
	uint8_t *buf = NULL;
	int r, pick;

	d->fd = open(d->path, O_RDWR | O_DIRECT | O_CLOEXEC | O_CREAT, 0600);
	if (d->fd < 0) {
		r = -errno;
		if (r == -EINVAL)
			snprintf(err, errlen, "%s: O_DIRECT is not supported there (tmpfs?)",
				 d->path);
		else
			snprintf(err, errlen, "%s: cannot open: %s", d->path, strerror(-r));
		return r;
	}
	/*
	 * A process that just died may still hold the lock for a moment: its
	 * ring's registered file is released by the kernel after the exit.
	 */
	for (unsigned tries = 0; flock(d->fd, LOCK_EX | LOCK_NB) < 0; tries++) {
		struct timespec ts = { 0, 10 * 1000000 };

		r = -errno;
		if (r == -EWOULDBLOCK && tries < 300) {
			nanosleep(&ts, NULL);
			continue;
		}
		snprintf(err, errlen, "%s: in use by another process (%s)", d->path, strerror(-r));
		return r == -EWOULDBLOCK ? -EBUSY : r;
	}
	if (fstat(d->fd, &st) < 0) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", d->path, strerror(-r));
		return r;
	}
	if (S_ISBLK(st.st_mode)) {
		uint64_t devsz = 0;

		d->bdev = true;
		if (ioctl(d->fd, BLKGETSIZE64, &devsz) < 0) {
			r = -errno;
			snprintf(err, errlen, "%s: cannot read the device size: %s", d->path,
				 strerror(-r));
			return r;
		}
		if (size == 0)
			size = devsz;
		if (size > devsz) {
			snprintf(err, errlen,
				 "%s: size %" PRIu64 " exceeds the device (%" PRIu64 ")", d->path,
				 size, devsz);
			return -ENOSPC;
		}
	} else if (S_ISREG(st.st_mode)) {
		if (size == 0) {
			snprintf(err, errlen, "%s: [ssd] size is needed for a file", d->path);
			return -EINVAL;
		}
		if ((uint64_t)st.st_size < size) {
			r = fallocate(d->fd, 0, 0, (off_t)size);
			if (r < 0) {
				r = -errno;
				snprintf(err, errlen,
					 "%s: cannot preallocate %" PRIu64 " bytes: %s", d->path,
					 size, strerror(-r));
				return r;
			}
		}
	} else {
		snprintf(err, errlen, "%s: not a regular file or a block device", d->path);
		return -EINVAL;
	}
	r = dio_alignment(d);
	if (r < 0) {
		snprintf(err, errlen, "%s: direct I/O alignment %u is not supported (at most %u)",
			 d->path, d->io_align, SSD_UNIT);
		return r;
	}
	size -= size % SSD_UNIT;
	r = ssd_geom_init(size, region, &d->geom);
	if (r < 0) {
		snprintf(err, errlen,
			 r == -ENOSPC ? "%s: too small for two regions of %" PRIu64 " bytes"
				      : "%s: bad region size %" PRIu64
					" (a multiple of 4 KiB, >= 16 KiB)",
			 d->path, region);
		return r;
	}
	if (posix_memalign((void **)&buf, SSD_UNIT, 2 * SSD_UNIT))
		return -ENOMEM;
	if (pread(d->fd, buf, 2 * SSD_UNIT, 0) != 2 * SSD_UNIT) {
		r = errno ? -errno : -EIO;
		free(buf);
		snprintf(err, errlen, "%s: cannot read the superblocks: %s", d->path, strerror(-r));
		return r;
	}
	pick = ssd_super_pick(buf, buf + SSD_UNIT, &sb);
	free(buf);
	if (pick >= 0 && sb.geom.file_bytes == d->geom.file_bytes &&
	    sb.geom.region_bytes == d->geom.region_bytes) {
		uint8_t host[16];

		d->sb = sb;
		d->last_clean = sb.flags & SSD_SB_CLEAN;
		host_identity(host);
		if (memcmp(host, sb.host_id, 16))
			slog(ssd, LOG_NOTICE, 0, "%s: last opened on another host", d->path);
		if (sb.ino != (uint64_t)st.st_ino && !d->bdev)
			slog(ssd, LOG_NOTICE, 0,
			     "%s: the file was replaced or copied since its last use", d->path);
	} else {
		if (pick >= 0)
			slog(ssd, LOG_NOTICE, 0,
			     "%s: geometry changed (%" PRIu64 " bytes, regions of %" PRIu64
			     " before): formatting, its blocks are gone",
			     d->path, sb.geom.file_bytes, sb.geom.region_bytes);
		memset(&d->sb, 0, sizeof(d->sb));
		if (getrandom(d->sb.file_id, 16, 0) != 16) {
			uint64_t t = mono_ns();

			memcpy(d->sb.file_id, &t, 8);
			t = crc32c((uint32_t)t, d->path, strlen(d->path)) ^ (uint64_t)getpid()
										    << 32;
			memcpy(d->sb.file_id + 8, &t, 8);
		}
		d->sb.geom = d->geom;
		d->sb.io_align = d->io_align;
		d->sb.format_time = (uint64_t)time(NULL);
		d->sb.generation = 0;
		d->formatted = true;
		/* Both copies, so a stale copy of an earlier format can never win. */
		r = write_super(d, &d->sb, 0);
		if (r == 0) {
			d->sb.generation = 1;
			r = write_super(d, &d->sb, 1);
		}
		if (r < 0) {
			snprintf(err, errlen, "%s: cannot write the superblock: %s", d->path,
				 strerror(-r));
			return r;
		}
	}
	r = mark_super(d, false);
	if (r < 0) {
		snprintf(err, errlen, "%s: cannot write the superblock: %s", d->path, strerror(-r));
		return r;
	}
	STORE(&d->st.capacity_bytes, (uint64_t)d->geom.nr_regions * d->geom.region_bytes);
	STORE(&d->st.nr_regions, d->geom.nr_regions);
	/* 1 GiB of regions erased ahead, at most an eighth of the drive (erase_ahead()). */
	d->ahead_want = (unsigned)MIN_U64(AHEAD_MAX, (1ull << 30) / d->geom.region_bytes);
	d->ahead_want = (unsigned)MIN_U64(d->ahead_want, d->geom.nr_regions / 8);
	if (d->ahead_want < 1)
		d->ahead_want = 1;
	STORE(&d->st.io_align, d->io_align);
	d->st.last_clean = d->last_clean;
	d->st.formatted = d->formatted;
	return 0;
}

/* ---- ring setup (drive thread) ----------------------------------------- */

static int setup_ring(struct drive *d)
{
	/*
	 * SINGLE_ISSUER (one thread owns the ring) and SUBMIT_ALL, where the
	 * kernel has them; not COOP_TASKRUN or DEFER_TASKRUN, which hold each
	 * completion until this thread enters the kernel again: on this
	 * project's shared 2-core machine they were never faster, and once
	 * half as fast (docs/PERFORMANCE.md).  Tried in order; a flag the
	 * kernel lacks fails with EINVAL and the next set is tried.
	 * $KVSTASH_SSD_SETUP=N starts at set N (benchmarks).
	 */
	static const unsigned flag_sets[] = {
		IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER,
		IORING_SETUP_SUBMIT_ALL,
		0,
	};
	const struct ssd_config *cfg = &d->ssd->cfg;
	struct iovec *iov;
	unsigned n = 0, nr_iops;
	int r = -EINVAL;

	d->ring_entries = next_pow2_u32(d->depth * IOP_MAX_SQES + 16);
	for (unsigned i = getenv("KVSTASH_SSD_SETUP") ? (unsigned)atoi(getenv("KVSTASH_SSD_SETUP"))
						      : 0;
	     i < sizeof(flag_sets) / sizeof(flag_sets[0]); i++) {
		struct io_uring_params p = { .flags = flag_sets[i] | IORING_SETUP_CQSIZE };

		p.cq_entries = d->ring_entries * 2;
		r = io_uring_queue_init_params(d->ring_entries, &d->ring, &p);
		if (r == 0) {
			STORE(&d->st.setup_flags, flag_sets[i]);
			break;
		}
		if (r != -EINVAL)
			break;
	}
	if (r < 0)
		return r;
	d->ring_ok = true;
	if (io_uring_register_files(&d->ring, &d->fd, 1) == 0)
		d->fixed_file = true;
	d->st.fixed_file = d->fixed_file;

	/* iops: blocks in flight, recovery reads, seals, the probe, the wake read. */
	nr_iops = d->depth * 2 + 8;
	d->iops = aligned_alloc(64, rup(sizeof(struct iop) * nr_iops, 64));
	if (posix_memalign((void **)&d->bounce_area, SSD_UNIT, (size_t)nr_iops * 2 * SSD_UNIT))
		d->bounce_area = NULL;
	if (posix_memalign((void **)&d->probe_buf, SSD_UNIT, SSD_UNIT))
		d->probe_buf = NULL;
	if (!d->iops || !d->bounce_area || !d->probe_buf)
		return -ENOMEM;
	memset(d->iops, 0, sizeof(struct iop) * nr_iops);
	for (unsigned i = 0; i < nr_iops; i++) {
		d->iops[i].bounce = d->bounce_area + (size_t)i * 2 * SSD_UNIT;
		d->iops[i].next_free = d->free_iops;
		d->free_iops = &d->iops[i];
	}
	d->nfree_iops = nr_iops;

	/* Fixed buffers: the bounce area first, then the caller's memory in 1 GiB pieces. */
	iov = calloc(MAX_FIXED + 1, sizeof(*iov));
	if (!iov)
		return -ENOMEM;
	iov[n].iov_base = d->bounce_area;
	iov[n++].iov_len = (size_t)nr_iops * 2 * SSD_UNIT;
	d->fixed[0] = (struct fixed_map){ d->bounce_area, (size_t)nr_iops * 2 * SSD_UNIT, 0 };
	d->nr_fixed_maps = 1;
	for (unsigned b = 0; b < cfg->nr_bufs && d->nr_fixed_maps < MAX_FIXED; b++) {
		uint8_t *base = cfg->bufs[b].base;
		uint64_t len = cfg->bufs[b].len;

		if (!base || !len)
			continue;
		d->fixed[d->nr_fixed_maps++] = (struct fixed_map){ base, len, n };
		for (uint64_t off = 0; off < len && n < MAX_FIXED; off += FIXED_PIECE) {
			iov[n].iov_base = base + off;
			iov[n++].iov_len = MIN_U64(FIXED_PIECE, len - off);
		}
	}
	r = io_uring_register_buffers(&d->ring, iov, n);
	free(iov);
	if (r == 0) {
		d->fixed_bufs = true;
	} else {
		/* RLIMIT_MEMLOCK, or memory the kernel will not pin: plain reads and writes. */
		slog(d->ssd, LOG_INFO, r, "%s: buffers not registered with io_uring; plain I/O",
		     d->path);
		d->nr_fixed_maps = 0;
	}
	d->st.fixed_buffers = d->fixed_bufs;
	return 0;
}

/* ---- recovery (drive thread) ------------------------------------------- */

static void recover_block(struct drive *d, uint32_t region, const struct ssd_block_hdr *h)
{
	struct ssd_region *r = &d->regions[region];
	struct ssd_loc loc;
	uint32_t ns;

	if (h->shard > UINT16_MAX || ssd_index_ns(&d->ssd->idx, h->ns, h->ns_len, &ns) < 0) {
		ADD(&d->st.recovery_bad, 1);
		return;
	}
	loc.drive = d->id;
	loc.region = region;
	loc.region_seq = h->region_seq;
	loc.off_units = (uint32_t)((h->offset - ssd_region_off(&d->geom, region)) / SSD_UNIT);
	loc.len = h->payload_len;
	loc.crc = h->payload_crc;
	loc.ent = SSD_NO_ENTRY;
	if (ssd_index_recover(&d->ssd->idx, ns, h->key, (uint16_t)h->shard, r, &loc))
		ADD(&d->st.recovered_blocks, 1);
	if (loc.off_units * (uint64_t)SSD_UNIT + ssd_block_bytes(loc.len) > r->used)
		r->used = loc.off_units * (uint64_t)SSD_UNIT + ssd_block_bytes(loc.len);
	r->nblocks++;
}

static void region_found(struct drive *d, uint32_t region, uint32_t seq)
{
	struct ssd_region *r = &d->regions[region];

	r->seq = seq;
	r->state = SSD_R_SEALED;
	r->nblocks = 0;
	r->used = 0;
	d->recov_seq[region] = seq;
	d->recov_valid[region] = true;
	ADD(&d->st.recovered_regions, 1);
}

static int recov_read(struct drive *d, struct iop *op, uint64_t off, size_t len)
{
	if (len > op->rcap) {
		op->rbuf = mfree(op->rbuf);
		op->rcap = 0;
		if (posix_memalign((void **)&op->rbuf, SSD_UNIT, len))
			return -ENOMEM;
		op->rcap = len;
	}
	ADD(&d->st.recovery_bytes_read, len);
	op->err = 0;
	op->short_io = false;
	op->main_len = (uint32_t)len;
	return prep_io(d, op, false, op->rbuf, (uint32_t)len, off, (uint32_t)len);
}

/* Read the last @len bytes of the op's region (its trailer and entries). */
static int recov_read_tail(struct drive *d, struct iop *op, uint64_t len)
{
	uint64_t rend = ssd_region_off(&d->geom, op->region) + d->geom.region_bytes;

	return recov_read(d, op, rend - len, len);
}

static uint64_t probe_len(const struct drive *d)
{
	return MIN_U64(RECOV_TAIL, SSD_UNIT + d->geom.zone_bytes);
}

/*
 * The tail of a region is in op->rbuf (op->main_len bytes ending at the
 * region's end): index its entries.  Sealed (a trailer of the entries'
 * cycle): entries 0..n-1; open when the process died: every entry of the
 * cycle of entry 0.  Each entry is checked on its own (CRC, file, region,
 * entry number, sequence, bounds), so a garbled entry costs that block
 * only.  Returns true when a longer tail must be read first.
 */
static bool scan_tail(struct drive *d, struct iop *op)
{
	uint32_t region = op->region;
	const uint8_t *end = op->rbuf + op->main_len - SSD_UNIT; /* the trailer's start */
	uint32_t avail = (op->main_len - SSD_UNIT) / SSD_HDR_SIZE;
	uint64_t rstart = ssd_region_off(&d->geom, region);
	struct ssd_block_hdr h0, h;
	struct ssd_trailer t;
	bool have0, sealed;
	uint32_t seq, n;
	uint64_t used;

	have0 = avail && ssd_block_hdr_decode(end - SSD_HDR_SIZE, d->sb.file_id, &d->geom, region,
					      0, &h0) == 0;
	sealed = ssd_trailer_decode(end, d->sb.file_id, &d->geom, region, &t) == 0 &&
		 (!have0 || t.region_seq == h0.region_seq);
	if (!sealed && !have0)
		return false; /* empty, or its first block never completed */
	seq = sealed ? t.region_seq : h0.region_seq;
	n = sealed ? t.nr_blocks : d->geom.zone_entries;
	used = sealed ? t.used_bytes : d->geom.payload_bytes;
	if (n > avail && op->main_len < ssd_tail_bytes(n)) {
		op->phase = RP_SUMMARY;
		return recov_read_tail(d, op, ssd_tail_bytes(n)) == 0;
	}
	if (n > avail)
		n = avail;
	region_found(d, region, seq);
	if (sealed &&
	    crc32c(0, end - (size_t)n * SSD_HDR_SIZE, (size_t)n * SSD_HDR_SIZE) != t.summary_crc)
		ADD(&d->st.recovery_bad, 1); /* some entry changed: each is checked below */
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *e = end - (size_t)(i + 1) * SSD_HDR_SIZE;

		if (ssd_block_hdr_decode(e, d->sb.file_id, &d->geom, region, i, &h) < 0 ||
		    h.region_seq != seq ||
		    h.offset + ssd_block_bytes(h.payload_len) > rstart + used) {
			/* Sealed: a hole (a failed write) or damage.  Open: mostly not written. */
			if (sealed && !all_zero(e, SSD_HDR_SIZE))
				ADD(&d->st.recovery_bad, 1);
			continue;
		}
		recover_block(d, region, &h);
	}
	return false;
}

/* A recovery read completed; returns true when the op has more to read. */
static bool recov_done(struct drive *d, struct iop *op)
{
	if (op->err || op->short_io) {
		/* An unreadable region is left out: its blocks are misses. */
		ADD(&d->st.recovery_bad, 1);
		note_error(d, op->err ? op->err : -EIO);
		return false;
	}
	return scan_tail(d, op);
}

static void recovery_finish(struct drive *d)
{
	uint32_t head;

	if (ssd_pick_head(d->recov_seq, d->recov_valid, d->geom.nr_regions, &head) == 0) {
		d->next_open = ssd_ring_next(&d->geom, head);
		d->next_seq = d->recov_seq[head] + 1;
	} else {
		d->next_open = 0;
		d->next_seq = 1;
	}
	d->cur = SSD_NO_ENTRY;
	d->nahead = 0;
	STORE(&d->st.recovery_ns, mono_ns() - d->recov_t0 + 1);
	for (unsigned i = 0; i < d->depth * 2 + 8; i++) {
		d->iops[i].rbuf = mfree(d->iops[i].rbuf);
		d->iops[i].rcap = 0;
	}
	if (drive_state(d) == SSD_DRIVE_RECOVERING)
		set_state(d, SSD_DRIVE_ONLINE);
	slog(d->ssd, LOG_INFO, 0,
	     "%s: %" PRIu64 " blocks in %" PRIu64 " regions recovered in %.3f s (%s)", d->path,
	     LOAD(&d->st.recovered_blocks), LOAD(&d->st.recovered_regions),
	     (double)LOAD(&d->st.recovery_ns) / 1e9,
	     d->formatted    ? "new drive"
	     : d->last_clean ? "clean stop before"
			     : "unclean stop before");
	notify_waiters(d->ssd);
}

static void recovery_pump(struct drive *d)
{
	while (d->recov_cursor < d->geom.nr_regions && d->recov_inflight < d->depth) {
		struct iop *op = iop_get(d, IOP_RECOV);

		if (!op)
			break;
		op->region = d->recov_cursor++;
		op->phase = RP_PROBE;
		if (recov_read_tail(d, op, probe_len(d)) < 0) {
			iop_put(d, op);
			break;
		}
		d->recov_inflight++;
	}
	if (d->recov_cursor == d->geom.nr_regions && d->recov_inflight == 0 &&
	    !LOAD(&d->st.recovery_ns))
		recovery_finish(d);
}

/* ---- header zones and sealing (drive thread) ----------------------------- */

/* Regions with a zone image (open or sealing): a few, so loops over them are cheap. */
static void zreg_add(struct drive *d, uint32_t region)
{
	d->zreg[d->nzreg++] = region;
}

static void zreg_del(struct drive *d, uint32_t region)
{
	for (unsigned i = 0; i < d->nzreg; i++)
		if (d->zreg[i] == region) {
			d->zreg[i] = d->zreg[--d->nzreg];
			return;
		}
}

/* Take entry @k out of the regions opened ahead, keeping their FIFO order. */
static void ahead_drop(struct drive *d, unsigned k)
{
	memmove(&d->ahead[k], &d->ahead[k + 1], (d->nahead - k - 1) * sizeof(d->ahead[0]));
	d->nahead--;
}

static void seal_begin(struct drive *d, uint32_t region)
{
	d->regions[region].state = SSD_R_SEALING;
	if (d->cur == region)
		d->cur = SSD_NO_ENTRY;
	for (unsigned k = 0; k < d->nahead; k++)
		if (d->ahead[k] == region) {
			ahead_drop(d, k);
			break;
		}
}

/*
 * Write the dirty zone units of @region that have no write in flight.
 * The unit is copied, so later entries change only the image; covered[]
 * remembers which entries this write carries.  A unit still filling
 * waits while payloads of the region are in flight: written at each
 * entry, it took a 4 KiB write per block between the 2 MiB ones, and
 * the tier wrote at 0.68 of fio on the GPU device's disk; filled first
 * it is one per SSD_HDRS_PER_UNIT blocks.  A block is visible only once
 * both its payload and its unit landed, so this orders nothing: a unit
 * waits at most for payloads already in flight.
 */
static void zone_kick(struct drive *d, uint32_t region)
{
	struct ssd_region *r = &d->regions[region];
	uint32_t last;

	if (!r->zone || !r->nblocks)
		return;
	last = ssd_entry_unit(r->nblocks - 1);
	for (uint32_t u = 0; u <= last; u++) {
		struct iop *op;

		if ((r->units[u] & (SSD_UNIT_DIRTY | SSD_UNIT_INFLIGHT)) != SSD_UNIT_DIRTY)
			continue;
		/* The last unit, not full, while this region's payloads still land. */
		if (u == last && r->nblocks % SSD_HDRS_PER_UNIT && r->payloads &&
		    r->state == SSD_R_OPEN)
			continue;
		op = iop_get(d, IOP_ZONE);
		if (!op)
			return; /* again after a completion */
		memcpy(op->bounce, ssd_region_unit(r, &d->geom, u), SSD_UNIT);
		op->region = region;
		op->unit = u;
		r->units[u] = SSD_UNIT_INFLIGHT;
		r->covered[u] = r->nblocks;
		r->inflight++;
		prep_io(d, op, true, op->bounce, SSD_UNIT,
			ssd_region_off(&d->geom, region) + ssd_zone_unit_off(&d->geom, u),
			SSD_UNIT);
	}
}

static void write_finish(struct drive *d, struct iop *op);

static void zone_done(struct drive *d, struct iop *zop)
{
	struct ssd_region *r = &d->regions[zop->region];
	uint32_t u = zop->unit, lo = u * SSD_HDRS_PER_UNIT, hi = r->covered[u];
	int err = zop->err ? zop->err : zop->short_io ? -EIO : 0;
	struct iop **link = &d->hwait;

	r->units[u] &= (uint8_t)~SSD_UNIT_INFLIGHT;
	r->inflight--;
	if (err) {
		ADD(&d->st.write_errors, 1);
		dlog_rl(d, LOG_WARNING, err, "region %u: header zone not written; region closed",
			zop->region);
		if (!r->abandoned) {
			r->abandoned = true;
			ADD(&d->st.regions_abandoned, 1);
		}
		if (r->state == SSD_R_OPEN)
			seal_begin(d, zop->region);
		note_error(d, err);
	}
	/* The writes whose entries this one carried have their headers on disk. */
	while (*link) {
		struct iop *w = *link;

		if (w->region == zop->region && w->entry >= lo && w->entry < hi &&
		    w->entry < lo + SSD_HDRS_PER_UNIT) {
			*link = w->next_wait;
			w->hdr_done = true;
			if (err && !w->hdr_err)
				w->hdr_err = err;
			if (w->payload_done) {
				write_finish(d, w);
				iop_put(d, w);
			}
			continue;
		}
		link = &w->next_wait;
	}
}

static void seal_pump(struct drive *d)
{
	for (unsigned k = 0; k < d->nzreg; k++) {
		uint32_t i = d->zreg[k];
		struct ssd_region *r = &d->regions[i];
		uint64_t n = r->nblocks;
		struct ssd_trailer t;
		struct iop *op;

		if (r->state != SSD_R_SEALING)
			continue;
		/* Entries cleared by failed writes are rewritten before the trailer. */
		zone_kick(d, i);
		/* inflight: block and zone writes not completed, or the trailer's own write. */
		if (r->inflight)
			continue;
		op = iop_get(d, IOP_SEAL);
		if (!op)
			return;
		memset(op->bounce, 0, SSD_UNIT);
		memcpy(t.file_id, d->sb.file_id, 16);
		t.region = i;
		t.region_seq = r->seq;
		t.nr_blocks = (uint32_t)n;
		t.summary_crc = crc32c(0, r->zone + d->geom.zone_bytes - n * SSD_HDR_SIZE,
				       n * SSD_HDR_SIZE);
		t.summary_off = d->geom.payload_bytes;
		t.used_bytes = r->used;
		ssd_trailer_encode(&t, op->bounce);
		op->region = i;
		r->inflight = 1; /* the trailer write: nothing reuses the region meanwhile */
		prep_io(d, op, true, op->bounce, SSD_UNIT,
			ssd_region_off(&d->geom, i) + d->geom.region_bytes - SSD_UNIT, SSD_UNIT);
	}
}

static void seal_done(struct drive *d, struct iop *op)
{
	struct ssd_region *r = &d->regions[op->region];

	r->inflight = 0;
	r->state = SSD_R_SEALED;
	ssd_region_close(r);
	zreg_del(d, op->region);
	if (op->err || op->short_io) {
		/* Its blocks stay valid; after a restart its entries are read one by one. */
		ADD(&d->st.write_errors, 1);
		dlog_rl(d, LOG_WARNING, op->err ? op->err : -EIO, "region %u: trailer not written",
			op->region);
		note_error(d, op->err ? op->err : -EIO);
	}
}

/* ---- the write queue (qlock) -------------------------------------------- */

static void wq_unlink(struct drive *d, struct wreq *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		d->wq_head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		d->wq_tail = w->prev;
	w->prev = w->next = NULL;
	d->wq_len--;
	STORE(&d->st.queued_writes, d->wq_len);
}

static void wq_push_tail(struct drive *d, struct wreq *w)
{
	w->next = NULL;
	w->prev = d->wq_tail;
	if (d->wq_tail)
		d->wq_tail->next = w;
	else
		d->wq_head = w;
	d->wq_tail = w;
	d->wq_len++;
	STORE(&d->st.queued_writes, d->wq_len);
}

static void wreq_free(struct drive *d, struct wreq *w)
{
	pthread_mutex_lock(&d->qlock);
	w->next = d->wfree;
	d->wfree = w;
	pthread_mutex_unlock(&d->qlock);
}

static void wake_drive(struct drive *d)
{
	uint64_t one = 1;

	/* The eventfd read armed in the ring completes; the thread runs its loop. */
	if (write(d->efd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is saturated, a wake-up is pending anyway. */
	}
}

/* ---- writes (drive thread) ---------------------------------------------- */

static void write_finish(struct drive *d, struct iop *op)
{
	struct ssd *ssd = d->ssd;
	struct ssd_region *r = &d->regions[op->region];
	struct wreq *w = op->w;
	bool ok = !op->err && !op->short_io && !op->hdr_err;
	int res = 0;

	if (ok) {
		struct ssd_loc loc = {
			.drive = d->id,
			.region = op->region,
			.region_seq = r->seq,
			.off_units = (uint32_t)((op->off - ssd_region_off(&d->geom, op->region)) /
						SSD_UNIT),
			.len = w->len,
			.crc = op->crc,
		};

		/* Payload and header both on disk at full length: visible from here. */
		ssd_index_commit(&ssd->idx, w->ent, r, &loc);
		ADD(&d->st.writes, 1);
		ADD(&d->st.bytes_written, w->len);
	} else {
		res = op->err ? op->err : op->hdr_err ? op->hdr_err : -EIO;
		ssd_index_abort(&ssd->idx, w->ent);
		ADD(&d->st.write_errors, 1);
		dlog_rl(d, LOG_WARNING, res, "region %u: %s write; block abandoned, region closed",
			op->region, op->err || op->hdr_err ? "failed" : "short");
		/* Its entry is cleared (rewritten before the trailer); nothing more goes in. */
		if (op->entry != UINT32_MAX)
			ssd_region_set_entry(r, &d->geom, op->entry, NULL);
		if (!r->abandoned) {
			r->abandoned = true;
			ADD(&d->st.regions_abandoned, 1);
		}
		if (r->state == SSD_R_OPEN)
			seal_begin(d, op->region);
		note_error(d, res);
	}
	r->inflight--;
	d->inflight_blocks--;
	STORE(&d->st.inflight, d->inflight_blocks);
	hist_add(d->st.write_lat, &d->st.write_lat_sum_ns, mono_ns() - w->t0);
	if (ssd->cfg.write_done)
		ssd->cfg.write_done(ssd->cfg.cb_arg, w->cookie, res);
	wreq_free(d, w);
}

/*
 * Before the first payload of a new cycle goes into a region, its old
 * first zone unit (entries 0-7) and trailer are zeroed, durably: without
 * entry 0 and the trailer recovery takes the region for empty, so no block
 * of the old cycle can come back after a crash, even where the new
 * payloads never overwrote it.  Writes into the region wait for that
 * (place_write()).  Durable means a datasync after the erase landed, a
 * cache flush on most disks; one per region (RWF_DSYNC on each erase) held
 * every region's writes until the flush had drained everything before it,
 * and the tier wrote at 0.36 of fio on the build VM's disk (fio never
 * flushes), 0.81 on the GPU device's.  So regions are erased ahead in
 * batches (erase_ahead()) with one datasync per batch.
 */
static void erase_done(struct drive *d, struct iop *op);

static void erase_old_cycle(struct drive *d, uint32_t region)
{
	struct ssd_region *r = &d->regions[region];
	struct iop *op = iop_get(d, IOP_OPEN);

	memset(op->bounce, 0, 2 * SSD_UNIT);
	op->region = region;
	r->opening = true;
	r->erased = r->syncing = false;
	r->inflight++;
	d->erases_inflight++;
	if (prep_io(d, op, true, op->bounce, 2 * SSD_UNIT,
		    ssd_region_off(&d->geom, region) + d->geom.region_bytes - 2 * SSD_UNIT,
		    2 * SSD_UNIT) < 0) {
		/* No SQE even after a submit: complete it as failed, the batch goes on. */
		op->err = -EBUSY;
		op->pending = 0;
		erase_done(d, op);
		iop_put(d, op);
	}
}

/*
 * A region whose erase, or the datasync after it, failed takes no block
 * this cycle: it is sealed empty, and the FIFO reuses it next time round.
 */
static void skip_unerased(struct drive *d, uint32_t region)
{
	struct ssd_region *r = &d->regions[region];

	r->opening = r->erased = r->syncing = false;
	if (!r->abandoned) {
		r->abandoned = true;
		ADD(&d->st.regions_abandoned, 1);
	}
	if (r->state == SSD_R_OPEN)
		seal_begin(d, region);
}

static void sync_done(struct drive *d, struct iop *op);

/* The batch's erases all landed: one datasync makes them durable. */
static void sync_erased(struct drive *d)
{
	struct io_uring_sqe *sqe;
	bool any = false;
	struct iop *op;

	/* Not while abandoning: what a kill -9 leaves syncs nothing. */
	if (!d->sync_wanted || d->erases_inflight || d->sync_inflight || LOAD(&d->stopping) == 2)
		return;
	for (unsigned k = 0; k < d->nzreg; k++) {
		struct ssd_region *r = &d->regions[d->zreg[k]];

		if (r->opening && r->erased) {
			r->syncing = true;
			any = true;
		}
	}
	if (!any) {
		d->sync_wanted = false;
		return;
	}
	op = iop_get(d, IOP_SYNC);
	if (op) {
		op->fault = ssd_fault_sync(d->ssd->faults, d->id);
		if (op->fault == SSD_FAULT_EIO || op->fault == SSD_FAULT_ENODEV) {
			op->err = op->fault == SSD_FAULT_EIO ? -EIO : -ENODEV;
			d->sync_wanted = false;
			sync_done(d, op);
			iop_put(d, op);
			return;
		}
	}
	sqe = op ? get_sqe(d) : NULL;
	if (!sqe) {
		/* No iop or SQE now: the regions stay waiting; the drive loop retries. */
		for (unsigned k = 0; k < d->nzreg; k++)
			d->regions[d->zreg[k]].syncing = false;
		if (op)
			iop_put(d, op);
		return;
	}
	io_uring_prep_fsync(sqe, d->fixed_file ? 0 : d->fd, IORING_FSYNC_DATASYNC);
	if (d->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	op->expect[0] = 0;
	op->pending = 1;
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
	d->sync_inflight = true;
	d->sync_wanted = false;
}

static void erase_done(struct drive *d, struct iop *op)
{
	struct ssd_region *r = &d->regions[op->region];
	int err = op->err ? op->err : op->short_io ? -EIO : 0;

	r->inflight--;
	d->erases_inflight--;
	if (err) {
		ADD(&d->st.write_errors, 1);
		dlog_rl(d, LOG_WARNING, err, "region %u: old cycle not erased; region skipped",
			op->region);
		skip_unerased(d, op->region);
		note_error(d, err);
	} else {
		r->erased = d->sync_wanted = true;
	}
	sync_erased(d);
}

static void sync_done(struct drive *d, struct iop *op)
{
	int err = op->err;

	d->sync_inflight = false;
	if (err) {
		ADD(&d->st.write_errors, 1);
		dlog_rl(d, LOG_WARNING, err, "datasync after erasing regions failed; they are skipped");
	} else {
		ADD(&d->st.erase_syncs, 1);
	}
	for (unsigned k = 0; k < d->nzreg; k++) {
		struct ssd_region *r = &d->regions[d->zreg[k]];

		if (!r->syncing)
			continue;
		if (err)
			skip_unerased(d, d->zreg[k]); /* zreg keeps it until sealed */
		else
			r->syncing = r->erased = r->opening = false;
	}
	if (err)
		note_error(d, err);
	sync_erased(d); /* erases that landed while this ran */
}

/*
 * The next region in FIFO order, reclaimed and its old cycle being erased
 * (erase_old_cycle()); SSD_NO_ENTRY if it cannot be reused yet.
 */
static uint32_t open_next_region(struct drive *d)
{
	struct ssd_region *r = &d->regions[d->next_open];
	uint32_t i = d->next_open;

	if (r->state == SSD_R_OPEN || r->state == SSD_R_SEALING || r->reads ||
	    d->nzreg == sizeof(d->zreg) / sizeof(d->zreg[0]))
		return SSD_NO_ENTRY;
	if (r->state == SSD_R_SEALED) {
		/* The old cycle's blocks leave the index before anything overwrites them. */
		uint32_t n = ssd_index_drop_region(&d->ssd->idx, r);

		r->state = SSD_R_EMPTY;
		ADD(&d->st.regions_reclaimed, 1);
		ADD(&d->st.blocks_evicted, n);
	}
	/*
	 * Its erase holds an iop until it lands: leave two, for the write
	 * place_write() is placing (its region's room is taken before its iop)
	 * and for the batch's datasync.
	 */
	if (d->nfree_iops <= 2 || ssd_region_open(r, &d->geom, d->next_seq) < 0)
		return SSD_NO_ENTRY;
	d->next_seq++;
	ADD(&d->st.regions_opened, 1);
	zreg_add(d, i);
	d->next_open = ssd_ring_next(&d->geom, d->next_open);
	erase_old_cycle(d, i);
	return i;
}

/*
 * Keep ahead_want regions opened ahead of the writes.  A new batch starts
 * only once the last one is durable and half of it has been taken, so
 * that each datasync covers about half the window, and the writes go on
 * into the other half while it runs.  The price: the old blocks of up to
 * ahead_want regions leave the index early (at most 1 GiB of regions, and
 * an eighth of the drive).  A region opened ahead and never written holds
 * nothing: recovery takes it for empty (no entry 0, no trailer), and the
 * FIFO reopens it next.
 */
static void erase_ahead(struct drive *d)
{
	if (d->erases_inflight || d->sync_inflight || d->nahead > d->ahead_want / 2)
		return;
	while (d->nahead < d->ahead_want) {
		uint32_t i = open_next_region(d);

		if (i == SSD_NO_ENTRY)
			break;
		if (d->regions[i].state == SSD_R_OPEN) /* else its erase failed at once */
			d->ahead[d->nahead++] = i;
	}
}

/* The oldest region opened ahead becomes the current one. */
static void take_ahead(struct drive *d)
{
	if (d->cur != SSD_NO_ENTRY || !d->nahead)
		return;
	d->cur = d->ahead[0];
	ahead_drop(d, 0);
}

/* The region writes go to: the current one, else the oldest opened ahead. */
static bool write_region(struct drive *d)
{
	take_ahead(d);
	erase_ahead(d);
	take_ahead(d);
	return d->cur != SSD_NO_ENTRY;
}

static void start_write(struct drive *d, struct wreq *w, uint64_t roff, uint32_t bseq)
{
	struct ssd *ssd = d->ssd;
	struct iop *op = iop_get(d, IOP_WRITE);
	struct ssd_region *r = &d->regions[d->cur];
	struct ssd_block_hdr h;
	const uint8_t *src = w->buf;
	uint32_t main_len, tail, plen, pexp;
	uint16_t ns_len;
	const uint8_t *ident = ssd_index_ns_ident(&ssd->idx, w->ns, &ns_len);

	op->w = w;
	op->region = d->cur;
	op->off = ssd_region_off(&d->geom, d->cur) + roff;
	op->entry = UINT32_MAX;
	op->payload_done = op->hdr_done = false;
	op->hdr_err = 0;
	op->crc = crc32c(0, w->buf, w->len);
	r->inflight++;
	d->inflight_blocks++;
	STORE(&d->st.inflight, d->inflight_blocks);

	op->fault = ssd_fault_next(ssd->faults, d->id, true);
	if (op->fault == SSD_FAULT_EIO || op->fault == SSD_FAULT_ENODEV || !ident) {
		op->err = !ident ? -EINVAL : op->fault == SSD_FAULT_EIO ? -EIO : -ENODEV;
		write_finish(d, op);
		iop_put(d, op);
		return;
	}
	memset(&h, 0, sizeof(h));
	memcpy(h.file_id, d->sb.file_id, 16);
	h.region = d->cur;
	h.region_seq = r->seq;
	h.block_seq = bseq;
	h.offset = op->off;
	h.payload_len = w->len;
	h.payload_crc = op->crc;
	memcpy(h.key, w->key, SSD_KEY_SIZE);
	h.shard = w->shard;
	h.ns_len = ns_len;
	memcpy(h.ns, ident, ns_len);
	ssd_block_hdr_encode(&h, op->hdr);
	/* The header goes into the zone image; zone_kick() writes its unit. */
	op->entry = bseq;
	ssd_region_set_entry(r, &d->geom, bseq, op->hdr);
	op->next_wait = d->hwait;
	d->hwait = op;

	main_len = w->len / d->io_align * d->io_align;
	tail = w->len - main_len;
	if ((uintptr_t)src % d->mem_align) {
		/* Memory direct I/O cannot use: one aligned copy (not the pool's case). */
		uint64_t full = rup(w->len, d->io_align);

		if (posix_memalign((void **)&op->tmp, d->mem_align > 512 ? d->mem_align : 512,
				   full)) {
			op->tmp = NULL;
			op->err = -ENOMEM;
		} else {
			memcpy(op->tmp, src, w->len);
			memset(op->tmp + w->len, 0, full - w->len);
			src = op->tmp;
			main_len = (uint32_t)full;
			tail = 0;
		}
	}
	if (main_len && !op->err) {
		plen = pexp = main_len;
		if (op->fault == SSD_FAULT_SHORT || op->fault == SSD_FAULT_TEAR) {
			plen = main_len / 2 / d->io_align * d->io_align;
			if (op->fault == SSD_FAULT_TEAR)
				pexp = plen;
		}
		if (plen)
			prep_io(d, op, true, (void *)src, plen, op->off, pexp);
		else if (op->fault == SSD_FAULT_SHORT)
			op->short_io = true;
	}
	if (tail && !op->err) {
		uint8_t *tb = op->bounce;

		memset(tb, 0, d->io_align);
		memcpy(tb, src + main_len, tail);
		prep_io(d, op, true, tb, d->io_align, op->off + main_len, d->io_align);
	}
	if (op->pending == 0)
		op->payload_done = true; /* nothing submitted: waits for its header alone */
	else
		r->payloads++; /* complete() counts it down */
}

static bool rate_ok(struct drive *d, uint32_t len)
{
	uint64_t rate = d->ssd->cfg.write_rate;
	uint64_t now;
	double burst;

	if (!rate)
		return true;
	now = mono_ns();
	burst = (double)rate / 10 > 4.0 * len ? (double)rate / 10 : 4.0 * len;
	d->tokens += (double)(now - d->tokens_ns) * (double)rate / 1e9;
	d->tokens_ns = now;
	if (d->tokens > burst)
		d->tokens = burst;
	if (d->tokens < 0)
		return false;
	d->tokens -= len;
	return true;
}

/* Nanoseconds left of the IDLE_AFTER_READ_NS pause after the last read (0: over). */
static uint64_t read_pause_left(const struct drive *d, uint64_t now)
{
	uint64_t since = now - d->last_read_ns;

	return since >= IDLE_AFTER_READ_NS ? 0 : IDLE_AFTER_READ_NS - since;
}

/*
 * A place for a payload of @len in the region writes go to (sealing a
 * full one and moving on): 0, -E2BIG (larger than any region takes), or
 * -EAGAIN (the rate cap, or no region ready yet: stall).  The rate cap's
 * tokens are spent only on a place found (given back when the region
 * that follows a full one is not ready yet).
 */
static int place_write(struct drive *d, uint32_t len, uint64_t *ret_off, uint32_t *ret_bseq)
{
	bool paid = false;

	for (;;) {
		int r;

		if (!write_region(d) || d->regions[d->cur].opening) {
			if (paid)
				d->tokens += len;
			return -EAGAIN; /* erase_old_cycle() first */
		}
		if (!paid && !rate_ok(d, len))
			return -EAGAIN;
		paid = true;
		r = ssd_region_place(&d->regions[d->cur], &d->geom, len, ret_off, ret_bseq);
		if (r != -ENOSPC)
			return r;
		seal_begin(d, d->cur);
	}
}

static void dispatch_writes(struct drive *d)
{
	struct wreq *w;
	uint32_t limit;

	d->write_stalled = false;
	/*
	 * While reads wait or run a write goes only with less than an eighth
	 * of the depth (at least one) in flight, and for IDLE_AFTER_READ_NS
	 * after a read writes leave a quarter of it to reads: a read is an
	 * engine waiting on its LOAD, a write only an eviction ahead of need,
	 * and with writes at the whole depth every SSD hit queued behind
	 * them.  Writes held back fill their bounded queue, and evictions
	 * then drop instead of waiting.  With no read for a while, writes
	 * take the whole depth.
	 */
	if (LOAD(&d->st.reads_pending))
		limit = d->depth >= 8 ? d->depth / 8 : 1;
	else if (read_pause_left(d, mono_ns()))
		limit = d->depth - d->depth / 4;
	else
		limit = d->depth; /* no read for a while: the whole depth, as fio would */
	while (d->inflight_blocks < limit && d->free_iops) {
		uint64_t roff;
		uint32_t bseq;
		int r;

		/*
		 * The head write leaves the queue only once it has a place:
		 * one taken out and put back would be missing meanwhile, and
		 * ssd_write() could refuse a valuable write that should have
		 * displaced it.  Under the queue lock, so nothing displaces the
		 * head while it is weighed; what is done here is the drive
		 * thread's own state, and the erase an open queues.
		 */
		pthread_mutex_lock(&d->qlock);
		w = d->wq_head;
		r = w ? place_write(d, w->len, &roff, &bseq) : 0;
		if (w && r != -EAGAIN)
			wq_unlink(d, w);
		pthread_mutex_unlock(&d->qlock);
		if (!w)
			return;
		if (r == -EAGAIN) {
			d->write_stalled = true;
			return;
		}
		if (r == -E2BIG) {
			ssd_index_abort(&d->ssd->idx, w->ent);
			if (d->ssd->cfg.write_done)
				d->ssd->cfg.write_done(d->ssd->cfg.cb_arg, w->cookie, -E2BIG);
			wreq_free(d, w);
			continue;
		}
		start_write(d, w, roff, bseq);
		/*
		 * One payload per submission: io_uring plugs a submission of
		 * more than two SQEs, and the plug merges payloads that lie back
		 * to back into one request of twice the size.  The GPU device's
		 * virtio disk wrote such 4 MiB requests at 0.78 of fio, which
		 * writes 2 MiB ones; on NVMe a request larger than the drive's
		 * transfer size is split again anyway.
		 */
		io_uring_submit(&d->ring);
	}
}

/* ---- reads (drive thread) ----------------------------------------------- */

/* The drive is done with @op's read: its place in the depth is free. */
static void read_landed(struct drive *d, struct iop *op)
{
	d->regions[op->r->loc.region].reads--;
	d->inflight_blocks--;
	STORE(&d->st.inflight, d->inflight_blocks);
}

/* Check what @op read (its read landed) and answer it. */
static void read_check(struct drive *d, struct iop *op)
{
	struct ssd *ssd = d->ssd;
	struct rreq *rr = op->r;
	uint8_t *dst = rr->dst;
	int res = 0;

	if (op->err || op->short_io) {
		res = op->err ? op->err : -EIO;
		ADD(&d->st.read_errors, 1);
		dlog_rl(d, LOG_WARNING, res, "region %u: %s read; a miss", rr->loc.region,
			op->err ? "failed" : "short");
		ssd_index_kill(&ssd->idx, &rr->loc);
		note_error(d, res);
	} else {
		if (op->tmp)
			memcpy(dst, op->tmp, rr->loc.len);
		else if (op->tail_len)
			memcpy(dst + op->main_len, op->bounce + SSD_UNIT, op->tail_len);
		if (op->fault == SSD_FAULT_FLIP)
			dst[rr->loc.len / 2] ^= 0x10;
		if (crc32c(0, dst, rr->loc.len) != rr->loc.crc) {
			res = -EBADMSG;
			ADD(&d->st.crc_errors, 1);
			dlog_rl(d, LOG_WARNING, 0,
				"region %u: block at unit %u failed its checksum; a miss",
				rr->loc.region, rr->loc.off_units);
			ssd_index_kill(&ssd->idx, &rr->loc);
		} else {
			ADD(&d->st.reads, 1);
			ADD(&d->st.bytes_read, rr->loc.len);
		}
	}
	SUB(&d->st.reads_pending, 1);
	d->last_read_ns = mono_ns();
	hist_add(d->st.read_lat, &d->st.read_lat_sum_ns, d->last_read_ns - rr->t0);
	if (ssd->cfg.read_done)
		ssd->cfg.read_done(ssd->cfg.cb_arg, rr->cookie, res);
	free(rr);
}

static void read_finish(struct drive *d, struct iop *op)
{
	read_landed(d, op);
	read_check(d, op);
}

/*
 * The reads that landed in this batch of completions: checked after the
 * next reads went to the drive, so the drive does not sit below its depth
 * while this thread computes checksums (2 MiB each).
 */
static void check_landed(struct drive *d)
{
	while (d->landed_head) {
		struct iop *op = d->landed_head;

		d->landed_head = op->next_free;
		if (!d->landed_head)
			d->landed_tail = NULL;
		read_check(d, op);
		iop_put(d, op);
	}
}

static void fail_read(struct drive *d, struct rreq *rr, int res)
{
	struct ssd *ssd = d->ssd;

	SUB(&d->st.reads_pending, 1);
	if (ssd->cfg.read_done)
		ssd->cfg.read_done(ssd->cfg.cb_arg, rr->cookie, res);
	free(rr);
}

static void start_read(struct drive *d, struct rreq *rr)
{
	const struct ssd_loc *loc = &rr->loc;
	struct ssd_region *r = &d->regions[loc->region];
	uint64_t off, full = rup(loc->len, d->io_align);
	uint32_t plen, main_len;
	struct iop *op;

	if (r->seq != loc->region_seq || r->state == SSD_R_EMPTY ||
	    (r->state == SSD_R_OPEN && r->seq != loc->region_seq)) {
		ADD(&d->st.stale_reads, 1);
		fail_read(d, rr, -ESTALE);
		return;
	}
	op = iop_get(d, IOP_READ);
	op->r = rr;
	op->tail_len = 0;
	r->reads++;
	d->inflight_blocks++;
	STORE(&d->st.inflight, d->inflight_blocks);
	off = ssd_region_off(&d->geom, loc->region) + (uint64_t)loc->off_units * SSD_UNIT;
	op->fault = ssd_fault_next(d->ssd->faults, d->id, false);
	if (op->fault == SSD_FAULT_EIO || op->fault == SSD_FAULT_ENODEV) {
		op->err = op->fault == SSD_FAULT_EIO ? -EIO : -ENODEV;
		read_finish(d, op);
		iop_put(d, op);
		return;
	}
	if ((uintptr_t)rr->dst % d->mem_align == 0 && rr->cap >= full) {
		main_len = (uint32_t)full;
		op->main_len = main_len;
		plen = main_len;
		if (op->fault == SSD_FAULT_SHORT || op->fault == SSD_FAULT_TEAR)
			plen = main_len / 2 / d->io_align * d->io_align;
		if (plen)
			prep_io(d, op, false, rr->dst, plen, off, main_len);
		else
			op->short_io = true;
	} else if ((uintptr_t)rr->dst % d->mem_align == 0) {
		/* The last partial sector into the bounce unit, copied after. */
		main_len = loc->len / d->io_align * d->io_align;
		op->main_len = main_len;
		op->tail_len = loc->len - main_len;
		if (main_len)
			prep_io(d, op, false, rr->dst, main_len, off, main_len);
		prep_io(d, op, false, op->bounce + SSD_UNIT, d->io_align, off + main_len,
			d->io_align);
	} else {
		if (posix_memalign((void **)&op->tmp, 512, full)) {
			op->tmp = NULL;
			op->err = -ENOMEM;
			read_finish(d, op);
			iop_put(d, op);
			return;
		}
		op->main_len = (uint32_t)full;
		prep_io(d, op, false, op->tmp, (uint32_t)full, off, (uint32_t)full);
	}
	if (op->pending == 0) {
		read_finish(d, op);
		iop_put(d, op);
	}
}

static void dispatch_reads(struct drive *d)
{
	while (d->rq_head && d->inflight_blocks < d->depth && d->free_iops) {
		struct rreq *rr = d->rq_head;

		d->rq_head = rr->next;
		if (!d->rq_head)
			d->rq_tail = NULL;
		start_read(d, rr);
	}
}

/* ---- the drive loop ------------------------------------------------------ */

/* Take queued reads; on an offline drive fail everything queued. */
static void pull(struct drive *d)
{
	struct ssd *ssd = d->ssd;
	struct rreq *rin;
	struct wreq *wdrop = NULL;
	bool offline = drive_state(d) == SSD_DRIVE_OFFLINE;
	bool cancel = offline || LOAD(&d->stopping) == 2;

	pthread_mutex_lock(&d->qlock);
	rin = d->rq_in_head;
	d->rq_in_head = d->rq_in_tail = NULL;
	d->rq_len = 0;
	if (cancel) {
		wdrop = d->wq_head;
		d->wq_head = d->wq_tail = NULL;
		d->wq_len = 0;
		STORE(&d->st.queued_writes, 0);
	}
	pthread_mutex_unlock(&d->qlock);
	if (cancel) {
		while (rin) {
			struct rreq *n = rin->next;

			fail_read(d, rin, offline ? -ENODEV : -ECANCELED);
			rin = n;
		}
		while (d->rq_head) {
			struct rreq *n = d->rq_head->next;

			fail_read(d, d->rq_head, offline ? -ENODEV : -ECANCELED);
			d->rq_head = n;
		}
		d->rq_tail = NULL;
		while (wdrop) {
			struct wreq *n = wdrop->next;

			ssd_index_abort(&ssd->idx, wdrop->ent);
			ADD(&d->st.drops, 1);
			if (ssd->cfg.write_done)
				ssd->cfg.write_done(ssd->cfg.cb_arg, wdrop->cookie,
						    offline ? -ENODEV : -ECANCELED);
			wreq_free(d, wdrop);
			wdrop = n;
		}
		return;
	}
	if (rin) {
		if (d->rq_tail)
			d->rq_tail->next = rin;
		else
			d->rq_head = rin;
		while (rin->next)
			rin = rin->next;
		d->rq_tail = rin;
	}
}

/* Drop every queued write (close past its deadline). */
static void drop_queued_writes(struct drive *d, int res)
{
	struct ssd *ssd = d->ssd;
	struct wreq *w;

	pthread_mutex_lock(&d->qlock);
	w = d->wq_head;
	d->wq_head = d->wq_tail = NULL;
	d->wq_len = 0;
	STORE(&d->st.queued_writes, 0);
	pthread_mutex_unlock(&d->qlock);
	while (w) {
		struct wreq *n = w->next;

		ssd_index_abort(&ssd->idx, w->ent);
		ADD(&d->st.drops, 1);
		if (ssd->cfg.write_done)
			ssd->cfg.write_done(ssd->cfg.cb_arg, w->cookie, res);
		wreq_free(d, w);
		w = n;
	}
}

static void probe(struct drive *d, uint64_t now)
{
	struct iop *op;

	if (d->probe_inflight || d->inflight_total || drive_state(d) != SSD_DRIVE_ONLINE ||
	    now - d->last_completion_ns < PROBE_IDLE_NS)
		return;
	op = iop_get(d, IOP_PROBE);
	if (!op)
		return;
	d->probe_inflight = true;
	prep_io(d, op, false, d->probe_buf, SSD_UNIT, 0, SSD_UNIT);
}

static void complete(struct drive *d, struct io_uring_cqe *cqe)
{
	uint64_t data = io_uring_cqe_get_data64(cqe);
	struct iop *op = (struct iop *)(uintptr_t)(data & ~7ull);
	unsigned k = (unsigned)(data & 7);
	int res = cqe->res;

	if (res < 0) {
		if (!op->err)
			op->err = res;
	} else if ((uint32_t)res != op->expect[k]) {
		op->short_io = true;
	}
	if (--op->pending)
		return;
	d->last_completion_ns = mono_ns();
	switch (op->kind) {
	case IOP_WAKE:
		iop_put(d, op);
		arm_wake(d);
		return;
	case IOP_WRITE:
		op->payload_done = true;
		d->regions[op->region].payloads--;
		if (!op->hdr_done)
			return; /* zone_done() finishes it */
		write_finish(d, op);
		break;
	case IOP_ZONE:
		zone_done(d, op);
		break;
	case IOP_OPEN:
		erase_done(d, op);
		break;
	case IOP_SYNC:
		sync_done(d, op);
		break;
	case IOP_READ:
		read_landed(d, op);
		op->next_free = NULL;
		if (d->landed_tail)
			d->landed_tail->next_free = op;
		else
			d->landed_head = op;
		d->landed_tail = op;
		return; /* check_landed() finishes it */
	case IOP_RECOV: {
		bool more;

		op->pending = 0;
		more = recov_done(d, op);
		if (more && op->pending)
			return;
		d->recov_inflight--;
		break;
	}
	case IOP_SEAL:
		seal_done(d, op);
		break;
	case IOP_PROBE:
		d->probe_inflight = false;
		if (op->err || op->short_io) {
			ADD(&d->st.read_errors, 1);
			dlog_rl(d, LOG_WARNING, op->err, "health probe failed");
			note_error(d, op->err ? op->err : -EIO);
		}
		break;
	}
	iop_put(d, op);
}

static bool any_sealing(const struct drive *d)
{
	for (unsigned k = 0; k < d->nzreg; k++)
		if (d->regions[d->zreg[k]].state == SSD_R_SEALING)
			return true;
	return false;
}

/*
 * Close, step by step, one step per loop: write what is queued (until the
 * deadline), wait for the writes, seal the open region, wait for the seals,
 * then sync and mark the superblock clean.  Returns true when done.
 */
static bool close_step(struct drive *d, uint64_t now)
{
	uint32_t st = drive_state(d);

	if (st == SSD_DRIVE_ONLINE) {
		if (now > d->drain_deadline)
			drop_queued_writes(d, -ECANCELED);
		if (LOAD(&d->st.queued_writes) || d->inflight_blocks || d->rq_head)
			return false;
		if (d->cur != SSD_NO_ENTRY && d->regions[d->cur].nblocks)
			seal_begin(d, d->cur);
		if (any_sealing(d))
			return false;
	}
	if (d->inflight_total || d->rq_head)
		return false;
	if (st == SSD_DRIVE_ONLINE && !d->sync_done) {
		int r = fdatasync(d->fd) < 0 ? -errno : 0;

		if (r == 0)
			r = mark_super(d, true);
		if (r < 0)
			slog(d->ssd, LOG_WARNING, r, "%s: cannot mark a clean stop", d->path);
		d->sync_done = true;
	}
	return true;
}

static bool can_progress(struct drive *d)
{
	bool room = d->inflight_blocks < d->depth && d->free_iops;

	if (d->rq_in_head || (d->rq_head && room))
		return true;
	if (d->wq_len && room && !d->write_stalled && drive_state(d) == SSD_DRIVE_ONLINE)
		return true;
	return false;
}

/*
 * Nothing to read or write (the drive thread), and no read for
 * IDLE_AFTER_READ_NS: the idle hook may give it writes.  Reads come in
 * bursts (a QUERY's SSD hits, then the next prompt's), so the pause keeps
 * the hook's writes from starting between two reads of a burst, where the
 * next read would wait behind them.  0: idle now; else the nanoseconds
 * left to wait (UINT64_MAX: busy).
 */
static uint64_t drive_idle_in(struct drive *d, uint64_t now)
{
	if (drive_state(d) != SSD_DRIVE_ONLINE || LOAD(&d->st.reads_pending) ||
	    LOAD(&d->st.queued_writes))
		return UINT64_MAX;
	return read_pause_left(d, now);
}

static void drive_loop(struct drive *d)
{
	struct ssd *ssd = d->ssd;

	d->recov_t0 = mono_ns();
	d->last_completion_ns = d->recov_t0;
	d->tokens_ns = d->recov_t0;
	arm_wake(d);
	for (;;) {
		struct __kernel_timespec ts = { 0, (long long)TICK_NS };
		struct io_uring_cqe *cqe;
		unsigned head, n = 0, wait_nr = 1;
		uint32_t stop = __atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE);
		uint64_t now = mono_ns(), idle_in = UINT64_MAX;

		pull(d);
		if (stop == 2) {
			/* Abandon: what a kill -9 leaves, once the kernel is done with our memory. */
			if (d->inflight_total == 0)
				break;
		} else {
			if (drive_state(d) == SSD_DRIVE_RECOVERING && !stop)
				recovery_pump(d);
			else if (drive_state(d) == SSD_DRIVE_RECOVERING && d->recov_inflight == 0)
				set_state(
					d,
					SSD_DRIVE_CLOSED); /* closed while recovering: stop scanning */
			dispatch_reads(d);
			if (drive_state(d) == SSD_DRIVE_ONLINE)
				dispatch_writes(d);
			/* The headers of what was just placed: one write per zone unit. */
			for (unsigned k = 0; k < d->nzreg; k++)
				zone_kick(d, d->zreg[k]);
			seal_pump(d);
			sync_erased(d);
			if (stop == 1 && close_step(d, now))
				break;
			probe(d, now);
			if (ssd->cfg.idle && !stop) {
				idle_in = drive_idle_in(d, now);
				if (idle_in == 0)
					ssd->cfg.idle(ssd->cfg.cb_arg);
			}
		}
		pthread_mutex_lock(&d->qlock);
		if (can_progress(d))
			wait_nr = 0;
		else
			d->sleeping = true;
		pthread_mutex_unlock(&d->qlock);
		if (wait_nr && d->ssd->cfg.write_rate && d->write_stalled)
			ts.tv_nsec = 10 * 1000000; /* tokens come back before the tick */
		if (wait_nr && idle_in && idle_in < (uint64_t)ts.tv_nsec)
			ts.tv_nsec = (long long)idle_in; /* the idle hook's turn, after the pause */
		io_uring_submit_and_wait_timeout(&d->ring, &cqe, wait_nr, &ts, NULL);
		pthread_mutex_lock(&d->qlock);
		d->sleeping = false;
		pthread_mutex_unlock(&d->qlock);
		io_uring_for_each_cqe(&d->ring, head, cqe)
		{
			complete(d, cqe);
			n++;
		}
		io_uring_cq_advance(&d->ring, n);
		if (d->landed_head) {
			pull(d);
			dispatch_reads(d);
			io_uring_submit(&d->ring);
			check_landed(d);
		}
		if (LOAD(&d->st.queued_writes) == 0 && d->inflight_blocks == 0 && n)
			notify_waiters(ssd);
	}
	pull(d);
	drop_queued_writes(d, -ECANCELED);
	set_state(d, SSD_DRIVE_CLOSED);
}

static void *drive_main(void *arg)
{
	struct drive *d = arg;
	struct ssd *ssd = d->ssd;
	int r;

	if (ssd->cfg.thread_init)
		ssd->cfg.thread_init(ssd->cfg.cb_arg);
	r = setup_ring(d);
	pthread_mutex_lock(&ssd->wait_lock);
	d->setup_res = r;
	d->setup_done = true;
	pthread_cond_broadcast(&ssd->wait_cond);
	pthread_mutex_unlock(&ssd->wait_lock);
	if (r == 0)
		drive_loop(d);
	if (d->ring_ok)
		io_uring_queue_exit(&d->ring);
	d->ring_ok = false;
	notify_waiters(ssd);
	if (ssd->cfg.thread_fini)
		ssd->cfg.thread_fini(ssd->cfg.cb_arg);
	return NULL;
}

/* ---- public API ---------------------------------------------------------- */

static void drive_free(struct drive *d)
{
	if (!d)
		return;
	if (d->regions) {
		for (uint32_t i = 0; i < d->geom.nr_regions; i++)
			ssd_region_close(&d->regions[i]);
		free(d->regions);
	}
	if (d->iops)
		for (unsigned i = 0; i < d->depth * 2 + 8; i++) {
			free(d->iops[i].rbuf);
			free(d->iops[i].tmp);
		}
	free(d->iops);
	free(d->bounce_area);
	free(d->probe_buf);
	free(d->recov_seq);
	free(d->recov_valid);
	while (d->wfree) {
		struct wreq *n = d->wfree->next;

		free(d->wfree);
		d->wfree = n;
	}
	if (d->efd >= 0)
		close(d->efd);
	if (d->fd >= 0) {
		/* Now, not when the kernel drops the ring's reference to the file. */
		flock(d->fd, LOCK_UN);
		close(d->fd);
	}
	pthread_mutex_destroy(&d->qlock);
	pthread_mutex_destroy(&d->log_lock);
	free(d->path);
	free(d);
}

static void stop_all(struct ssd *ssd, uint32_t how)
{
	for (unsigned i = 0; i < ssd->nr; i++) {
		struct drive *d = ssd->drives[i];
		uint32_t ms = ssd->cfg.drain_ms ? ssd->cfg.drain_ms : DEF_DRAIN_MS;

		if (!d || !d->thread_started)
			continue;
		d->drain_deadline = mono_ns() + (uint64_t)ms * 1000000ull;
		/* Pairs with the load-acquire at the top of drive_loop(): the deadline is seen. */
		__atomic_store_n(&d->stopping, how, __ATOMIC_RELEASE);
		wake_drive(d);
	}
	for (unsigned i = 0; i < ssd->nr; i++) {
		struct drive *d = ssd->drives[i];

		if (d && d->thread_started) {
			pthread_join(d->thread, NULL);
			d->thread_started = false;
		}
	}
}

static void ssd_free(struct ssd *ssd)
{
	for (unsigned i = 0; i < ssd->nr; i++)
		drive_free(ssd->drives[i]);
	ssd_index_fini(&ssd->idx);
	ssd_faults_free(ssd->faults);
	free(ssd->door);
	pthread_mutex_destroy(&ssd->wait_lock);
	pthread_cond_destroy(&ssd->wait_cond);
	pthread_mutex_destroy(&ssd->door_lock);
	free(ssd);
}

void ssd_close(struct ssd *ssd)
{
	if (!ssd)
		return;
	stop_all(ssd, 1);
	ssd_free(ssd);
}

void ssd_abandon(struct ssd *ssd)
{
	if (!ssd)
		return;
	stop_all(ssd, 2);
	ssd_free(ssd);
}

static struct drive *drive_new(struct ssd *ssd, unsigned id, const char *path)
{
	struct drive *d = calloc(1, sizeof(*d));
	uint32_t depth = ssd->cfg.queue_depth ? ssd->cfg.queue_depth : DEF_DEPTH;

	if (!d)
		return NULL;
	d->ssd = ssd;
	d->id = id;
	d->fd = -1;
	d->efd = -1;
	d->cur = SSD_NO_ENTRY;
	d->depth = depth;
	d->wq_max = ssd->cfg.write_queue ? ssd->cfg.write_queue : 4 * depth;
	d->state = SSD_DRIVE_RECOVERING;
	pthread_mutex_init(&d->qlock, NULL);
	pthread_mutex_init(&d->log_lock, NULL);
	d->path = strdup(path);
	if (!d->path) {
		drive_free(d);
		return NULL;
	}
	/* Queued writes plus those in flight: a request is held until it completes. */
	for (uint32_t i = 0; i < d->wq_max + depth; i++) {
		struct wreq *w = calloc(1, sizeof(*w));

		if (!w) {
			drive_free(d);
			return NULL;
		}
		w->next = d->wfree;
		d->wfree = w;
	}
	return d;
}

int ssd_open(const struct ssd_config *cfg, struct ssd **ret, char *err, size_t errlen)
{
	struct ssd *ssd;
	uint64_t total = 0, max_entries = 0;
	char ferr[256] = "";
	int r;

	if (!cfg || !ret || cfg->nr_paths == 0 || cfg->nr_paths > SSD_MAX_DRIVES) {
		snprintf(err, errlen, "between 1 and %u paths are needed", SSD_MAX_DRIVES);
		return -EINVAL;
	}
	if (cfg->queue_depth > 4096) {
		snprintf(err, errlen, "queue depth %u is above 4096", cfg->queue_depth);
		return -EINVAL;
	}
	crc32c_init();
	ssd = calloc(1, sizeof(*ssd));
	if (!ssd)
		return -ENOMEM;
	ssd->cfg = *cfg;
	pthread_mutex_init(&ssd->wait_lock, NULL);
	pthread_cond_init(&ssd->wait_cond, NULL);
	pthread_mutex_init(&ssd->door_lock, NULL);
	r = ssd_faults_parse(cfg->faults ? cfg->faults : getenv("KVSTASH_SSD_FAULTS"), &ssd->faults,
			     ferr, sizeof(ferr));
	if (r < 0) {
		snprintf(err, errlen, "%s", ferr);
		goto fail_early;
	}
	if (cfg->policy == SSD_POLICY_FILTER) {
		ssd->door = calloc(DOOR_BITS / 8, 1);
		if (!ssd->door || getrandom(&ssd->door_seed, sizeof(ssd->door_seed), 0) < 0) {
			r = -ENOMEM;
			goto fail_early;
		}
	}
	for (unsigned i = 0; i < cfg->nr_paths; i++) {
		for (unsigned j = 0; j < i; j++)
			if (strcmp(cfg->paths[i], cfg->paths[j]) == 0) {
				snprintf(err, errlen, "%s: named twice", cfg->paths[i]);
				r = -EINVAL;
				goto fail;
			}
		ssd->drives[i] = drive_new(ssd, i, cfg->paths[i]);
		if (!ssd->drives[i]) {
			r = -ENOMEM;
			goto fail;
		}
		ssd->nr = i + 1;
		r = open_drive(ssd, ssd->drives[i], err, errlen);
		if (r < 0)
			goto fail;
		total += ssd->drives[i]->geom.file_bytes;
		max_entries += ssd->drives[i]->geom.nr_regions *
			       (ssd->drives[i]->geom.region_bytes / (2 * SSD_UNIT));
	}
	r = ssd_index_init(&ssd->idx,
			   total / (cfg->expect_block_bytes ? cfg->expect_block_bytes : 2u << 20),
			   max_entries);
	if (r < 0) {
		snprintf(err, errlen, "cannot allocate the SSD index");
		goto fail;
	}
	for (unsigned i = 0; i < ssd->nr; i++) {
		struct drive *d = ssd->drives[i];

		d->regions = calloc(d->geom.nr_regions, sizeof(*d->regions));
		d->recov_seq = calloc(d->geom.nr_regions, sizeof(*d->recov_seq));
		d->recov_valid = calloc(d->geom.nr_regions, sizeof(*d->recov_valid));
		d->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (!d->regions || !d->recov_seq || !d->recov_valid || d->efd < 0) {
			r = d->efd < 0 ? -errno : -ENOMEM;
			snprintf(err, errlen, "%s: %s", d->path, strerror(-r));
			goto fail;
		}
		for (uint32_t j = 0; j < d->geom.nr_regions; j++)
			d->regions[j].entries = SSD_NO_ENTRY;
		r = -pthread_create(&d->thread, NULL, drive_main, d);
		if (r < 0) {
			snprintf(err, errlen, "%s: cannot start its thread: %s", d->path,
				 strerror(-r));
			goto fail;
		}
		d->thread_started = true;
		pthread_mutex_lock(&ssd->wait_lock);
		while (!d->setup_done)
			pthread_cond_wait(&ssd->wait_cond, &ssd->wait_lock);
		r = d->setup_res;
		pthread_mutex_unlock(&ssd->wait_lock);
		if (r < 0) {
			snprintf(err, errlen, "%s: io_uring setup failed: %s", d->path,
				 strerror(-r));
			goto fail;
		}
		slog(ssd, LOG_INFO, 0,
		     "%s: %" PRIu64 " bytes, %u regions of %" PRIu64
		     " bytes, direct I/O alignment %u, setup flags 0x%x, fixed buffers %s%s",
		     d->path, d->geom.file_bytes, d->geom.nr_regions, d->geom.region_bytes,
		     d->io_align, d->st.setup_flags, d->fixed_bufs ? "yes" : "no",
		     d->formatted ? ", formatted" : "");
	}
	*ret = ssd;
	return 0;
fail:
	stop_all(ssd, 2);
fail_early:
	ssd_free(ssd);
	return r;
}

int ssd_ns(struct ssd *ssd, const void *ident, size_t len, uint32_t *ret_ns)
{
	return ssd_index_ns(&ssd->idx, ident, len, ret_ns);
}

int ssd_ns_ident(const char *name, uint64_t fingerprint, uint64_t slot_bytes, uint32_t tp_size,
		 bool replicated, uint8_t ret_ident[SSD_NS_MAX])
{
	size_t n = strlen(name) + 1;
	uint8_t *p = ret_ident;
	uint32_t rep = replicated;

	if (n + 24 > SSD_NS_MAX)
		return -ENAMETOOLONG;
	memcpy(p, name, n);
	p += n;
	/* Little-endian on disk: the hosts kvstash runs on are (crc32c.c checks). */
	memcpy(p, &fingerprint, 8);
	memcpy(p + 8, &slot_bytes, 8);
	memcpy(p + 16, &tp_size, 4);
	memcpy(p + 20, &rep, 4);
	return (int)(n + 24);
}

static bool drive_serves(const struct drive *d)
{
	uint32_t s = drive_state(d);

	return s == SSD_DRIVE_ONLINE || s == SSD_DRIVE_RECOVERING;
}

int ssd_lookup(struct ssd *ssd, uint32_t ns, const uint8_t key[SSD_KEY_SIZE], uint32_t shard,
	       struct ssd_loc *ret_loc)
{
	struct ssd_loc loc;
	int r;

	if (shard > UINT16_MAX || !key)
		return -ENOENT;
	ADD(&ssd->lookups, 1);
	r = ssd_index_lookup(&ssd->idx, ns, key, (uint16_t)shard, &loc);
	if (r < 0)
		return r;
	if (loc.drive >= ssd->nr || !drive_serves(ssd->drives[loc.drive]))
		return -ENOENT;
	ADD(&ssd->hits, 1);
	*ret_loc = loc;
	return 0;
}

/*
 * The admission filter's doorkeeper: a Bloom filter of keys evicted
 * without a hit, cleared when an eighth of it is set.  A block is
 * admitted the second time it is evicted within that window.
 */
static bool door_admit(struct ssd *ssd, const struct ssd_write *w)
{
	uint64_t a, b, h1, h2;
	bool seen;

	memcpy(&a, w->key, 8);
	memcpy(&b, w->key + 8, 8);
	h1 = (a ^ ssd->door_seed) * 0x9e3779b97f4a7c15ull;
	h2 = (b ^ (ssd->door_seed >> 7) ^ ((uint64_t)w->ns << 20 | w->shard)) *
	     0xc2b2ae3d27d4eb4full;
	h1 = (h1 ^ (h1 >> 29)) % DOOR_BITS;
	h2 = (h2 ^ (h2 >> 31)) % DOOR_BITS;
	pthread_mutex_lock(&ssd->door_lock);
	seen = (ssd->door[h1 / 8] & (1u << (h1 % 8))) && (ssd->door[h2 / 8] & (1u << (h2 % 8)));
	if (!seen) {
		ssd->door[h1 / 8] |= (uint8_t)(1u << (h1 % 8));
		ssd->door[h2 / 8] |= (uint8_t)(1u << (h2 % 8));
		if (++ssd->door_adds > DOOR_BITS / 8) {
			memset(ssd->door, 0, DOOR_BITS / 8);
			ssd->door_adds = 0;
		}
	}
	pthread_mutex_unlock(&ssd->door_lock);
	return seen;
}

int ssd_write(struct ssd *ssd, const struct ssd_write *w, void **ret_displaced)
{
	struct drive *d = NULL;
	struct wreq *nw, *min = NULL;
	uint32_t ent, best = UINT32_MAX, start;
	uint16_t ns_len;
	bool wake;
	int r;

	if (!w || !w->key || !w->buf || !w->len || w->shard > UINT16_MAX ||
	    !ssd_index_ns_ident(&ssd->idx, w->ns, &ns_len))
		return -EINVAL;
	if (w->len > ssd_region_max_payload(&ssd->drives[0]->geom))
		return -E2BIG;
	if (ssd->cfg.policy == SSD_POLICY_FILTER && w->hits == 0) {
		/* A write ahead of eviction is neither counted nor remembered: the eviction decides. */
		if (w->ahead)
			return -EAGAIN;
		if (!door_admit(ssd, w)) {
			ADD(&ssd->not_admitted, 1);
			return -EAGAIN;
		}
	}
	/* The online drive with the shortest queue, ties in turn. */
	start = ADD(&ssd->rr, 1);
	for (unsigned i = 0; i < ssd->nr; i++) {
		struct drive *c = ssd->drives[(start + i) % ssd->nr];
		uint32_t q = LOAD(&c->st.queued_writes);

		if (drive_serves(c) && q < best) {
			best = q;
			d = c;
		}
	}
	if (!d)
		return -ENODEV;
	r = ssd_index_begin(&ssd->idx, w->ns, w->key, (uint16_t)w->shard, (uint8_t)d->id, &ent);
	if (r == -EEXIST) {
		ADD(&ssd->exists, 1);
		return r;
	}
	if (r < 0)
		return r;
	pthread_mutex_lock(&d->qlock);
	if (!drive_serves(d)) {
		pthread_mutex_unlock(&d->qlock);
		ssd_index_abort(&ssd->idx, ent);
		return -ENODEV;
	}
	if (d->wq_len >= d->wq_max || !d->wfree) {
		/* Full: the new write displaces the least valuable queued one, if it is worth more. */
		for (struct wreq *q = d->wq_head; q; q = q->next)
			if (!min || q->value < min->value)
				min = q;
		if (!min || min->value >= w->value) {
			pthread_mutex_unlock(&d->qlock);
			ssd_index_abort(&ssd->idx, ent);
			ADD(&ssd->dropped, 1);
			ADD(&d->st.drops, 1);
			return -ENOBUFS;
		}
		wq_unlink(d, min);
		nw = min;
	} else {
		nw = d->wfree;
		d->wfree = nw->next;
	}
	{
		void *old_cookie = min ? min->cookie : NULL;
		uint32_t old_ent = min ? min->ent : SSD_NO_ENTRY;

		nw->ns = w->ns;
		memcpy(nw->key, w->key, SSD_KEY_SIZE);
		nw->shard = (uint16_t)w->shard;
		nw->buf = w->buf;
		nw->len = w->len;
		nw->value = w->value;
		nw->cookie = w->cookie;
		nw->ent = ent;
		nw->t0 = mono_ns();
		wq_push_tail(d, nw);
		wake = d->sleeping;
		pthread_mutex_unlock(&d->qlock);
		if (wake)
			wake_drive(d);
		ADD(&ssd->admitted, 1);
		if (min) {
			ssd_index_abort(&ssd->idx, old_ent);
			ADD(&ssd->displaced, 1);
			ADD(&d->st.drops, 1);
			if (ret_displaced)
				*ret_displaced = old_cookie;
			return 1;
		}
	}
	return 0;
}

int ssd_read(struct ssd *ssd, const struct ssd_loc *loc, void *dst, size_t cap, void *cookie)
{
	struct drive *d;
	struct rreq *rr;
	bool wake;

	if (!loc || !dst || loc->drive >= ssd->nr || !loc->len || cap < loc->len)
		return -EINVAL;
	d = ssd->drives[loc->drive];
	if (loc->region >= d->geom.nr_regions ||
	    (uint64_t)loc->off_units * SSD_UNIT + ssd_block_bytes(loc->len) > d->geom.payload_bytes)
		return -EINVAL;
	if (!drive_serves(d))
		return -ENODEV;
	rr = malloc(sizeof(*rr));
	if (!rr)
		return -ENOMEM;
	rr->next = NULL;
	rr->loc = *loc;
	rr->dst = dst;
	rr->cap = cap;
	rr->cookie = cookie;
	rr->t0 = mono_ns();
	pthread_mutex_lock(&d->qlock);
	if (d->rq_len >= READ_QUEUE_MAX) {
		pthread_mutex_unlock(&d->qlock);
		free(rr);
		return -EBUSY;
	}
	if (d->rq_in_tail)
		d->rq_in_tail->next = rr;
	else
		d->rq_in_head = rr;
	d->rq_in_tail = rr;
	d->rq_len++;
	ADD(&d->st.reads_pending, 1);
	wake = d->sleeping;
	pthread_mutex_unlock(&d->qlock);
	if (wake)
		wake_drive(d);
	return 0;
}

static int wait_until(struct ssd *ssd, int timeout_ms, bool (*done)(struct ssd *))
{
	struct timespec dl;
	int r = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&ssd->wait_lock);
	while (!done(ssd)) {
		/* Short waits: a drive's notify can race ahead of our check. */
		struct timespec step;

		clock_gettime(CLOCK_REALTIME, &step);
		if (step.tv_sec > dl.tv_sec ||
		    (step.tv_sec == dl.tv_sec && step.tv_nsec >= dl.tv_nsec)) {
			r = -ETIMEDOUT;
			break;
		}
		step.tv_nsec += 10 * 1000000;
		if (step.tv_nsec >= 1000000000) {
			step.tv_sec++;
			step.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&ssd->wait_cond, &ssd->wait_lock, &step);
	}
	pthread_mutex_unlock(&ssd->wait_lock);
	return r;
}

static bool all_recovered(struct ssd *ssd)
{
	for (unsigned i = 0; i < ssd->nr; i++) {
		struct drive *d = ssd->drives[i];

		if (drive_state(d) == SSD_DRIVE_RECOVERING)
			return false;
	}
	return true;
}

static bool all_idle(struct ssd *ssd)
{
	for (unsigned i = 0; i < ssd->nr; i++) {
		struct drive *d = ssd->drives[i];

		if (drive_state(d) != SSD_DRIVE_ONLINE)
			continue;
		if (LOAD(&d->st.queued_writes) || LOAD(&d->st.inflight) ||
		    LOAD(&d->st.reads_pending))
			return false;
	}
	return true;
}

int ssd_wait_recovered(struct ssd *ssd, int timeout_ms)
{
	return wait_until(ssd, timeout_ms, all_recovered);
}

int ssd_wait_idle(struct ssd *ssd, int timeout_ms)
{
	return wait_until(ssd, timeout_ms, all_idle);
}

const char *ssd_drive_state_name(uint32_t state)
{
	static const char *const names[] = { "recovering", "online", "offline", "closed" };

	return state < 4 ? names[state] : "unknown";
}

const char *ssd_drive_path(const struct ssd *ssd, unsigned i)
{
	return i < ssd->nr ? ssd->drives[i]->path : NULL;
}

void ssd_get_stats(struct ssd *ssd, struct ssd_stats *ret)
{
	struct ssd_stats s;

	memset(&s, 0, sizeof(s));
	s.nr_drives = ssd->nr;
	s.lookups = LOAD(&ssd->lookups);
	s.hits = LOAD(&ssd->hits);
	s.admitted = LOAD(&ssd->admitted);
	s.not_admitted = LOAD(&ssd->not_admitted);
	s.exists = LOAD(&ssd->exists);
	s.dropped = LOAD(&ssd->dropped);
	s.displaced = LOAD(&ssd->displaced);
	s.index_entries = LOAD(&ssd->idx.nvalid);
	s.index_bytes = ssd_index_bytes(&ssd->idx);
	for (unsigned i = 0; i < ssd->nr; i++) {
		const struct ssd_drive_stats *src = &ssd->drives[i]->st;
		struct ssd_drive_stats *o = &s.drive[i];

#define C(f) o->f = LOAD(&src->f)
		C(state);
		C(setup_flags);
		C(fixed_file);
		C(fixed_buffers);
		C(last_clean);
		C(formatted);
		C(io_align);
		C(nr_regions);
		C(capacity_bytes);
		C(bytes_written);
		C(bytes_read);
		C(writes);
		C(reads);
		C(write_errors);
		C(read_errors);
		C(crc_errors);
		C(stale_reads);
		C(drops);
		C(regions_reclaimed);
		C(blocks_evicted);
		C(regions_abandoned);
		C(regions_opened);
		C(erase_syncs);
		C(recovered_blocks);
		C(recovered_regions);
		C(recovery_bad);
		C(recovery_ns);
		C(recovery_bytes_read);
		C(queued_writes);
		C(inflight);
		C(reads_pending);
		for (unsigned b = 0; b < SSD_HIST_BUCKETS; b++) {
			C(write_lat[b]);
			C(read_lat[b]);
		}
		C(write_lat_sum_ns);
		C(read_lat_sum_ns);
#undef C
	}
	*ret = s;
}
