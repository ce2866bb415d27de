/* SPDX-License-Identifier: MIT */
/*
 * The log-structured tier's insides, shared by its files (ssd.h says what
 * the rest of the daemon sees): one struct drive per [ssd] path, its
 * regions, its queues and its I/O in flight, over the drive I/O layer
 * (dev.h), which it calls only through the ops table.
 *
 *   tier.c     what every step needs: logging, errors and offline, the
 *              iop pool, data requests, the write queue
 *   super.c    superblocks: geometry, format or adopt, mark in use/clean
 *   recover.c  recovery on open: the regions' tails into the index
 *   writeout.c block writes, header zones, sealing
 *   reclaim.c  opening regions in FIFO order: old cycle out of the
 *              index (eviction), erased, synced, ahead of the writes
 *   reads.c    block reads and their checksums
 *   drive-thread.c the drive thread: its loop, completions, close
 *   api.c      the public API (ssd.h), open and close
 *
 * Threads: everything of a struct drive not marked otherwise below is its
 * drive thread's; the write and read queues are shared under qlock, the
 * state and stopping flags are atomics, the stats relaxed atomics.
 */
#ifndef KVS_SSD_TIER_H
#define KVS_SSD_TIER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "common/loghook.h"
#include "ssd/dev.h"
#include "ssd/fault.h"
#include "ssd/format.h"
#include "ssd/index.h"
#include "ssd/region-alloc.h"
#include "ssd/ssd.h"

#define DEF_REGION_BYTES   (256ull << 20)
#define DEF_DEPTH	   32u
#define DEF_MAX_ERRORS	   8u
#define DEF_DRAIN_MS	   10000u
#define ERROR_WINDOW_NS	   (10ull * 1000000000ull)
#define PROBE_IDLE_NS	   (500ull * 1000000ull)
#define TICK_NS		   (100ull * 1000000ull)
#define IDLE_AFTER_READ_NS (20ull * 1000000ull) /* drive_idle_in() */
#define READ_QUEUE_MAX	   1024u
#define RECOV_TAIL	   (128u << 10)
#define LOG_BURST	   10u
#define LOG_WINDOW_NS	   (5ull * 1000000000ull)
#define DOOR_BITS	   (1u << 22)

static inline uint64_t mono_ns(void)
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
};

struct drive {
	struct ssd *ssd;
	unsigned id;
	char *path;
	struct ssd_dev *dev; /* its I/O, only through dev->ops */
	uint32_t io_align, mem_align;
	struct ssd_super sb;
	struct ssd_geom geom;
	bool formatted, last_clean;

	/* drive thread */
	pthread_t thread;
	bool thread_started;
	uint32_t depth;
	uint32_t inflight_blocks; /* reads + writes in flight */
	uint32_t inflight_total;  /* every iop */
	struct iop *iops;
	struct iop *free_iops;
	unsigned nfree_iops;
	struct iop *landed_head, *landed_tail; /* reads landed, not yet checked */
	uint8_t *bounce_area;
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
	uint64_t
		last_read_ns; /* the last read's end (drive thread): the idle hook waits after it */
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
	KVS_STATS_SSD(KVS_STATS_MOD_MEMBER_)
};

#define ADD(p, v)   __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define SUB(p, v)   __atomic_fetch_sub((p), (v), __ATOMIC_RELAXED)
#define LOAD(p)	    __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

/* ---- logging ---------------------------------------------------------- */

#define slog(ssd, level, err, ...) \
	LOG_HOOK((ssd)->cfg.log, (ssd)->cfg.cb_arg, (level), (err), __VA_ARGS__)

/* Iops of a drive: blocks in flight, recovery reads, seals, erases, the datasync, the probe. */
static inline unsigned drive_nr_iops(const struct drive *d)
{
	return d->depth * 2 + 8;
}

static inline uint32_t drive_state(const struct drive *d)
{
	/* Pairs with the store-release in set_state(). */
	return __atomic_load_n(&d->state, __ATOMIC_ACQUIRE);
}

/* Nanoseconds left of the IDLE_AFTER_READ_NS pause after the last read (0: over). */
static inline uint64_t read_pause_left(const struct drive *d, uint64_t now)
{
	uint64_t since = now - d->last_read_ns;

	return since >= IDLE_AFTER_READ_NS ? 0 : IDLE_AFTER_READ_NS - since;
}

/* Regions with a zone image (open or sealing): a few, so loops over them are cheap. */
static inline void zreg_add(struct drive *d, uint32_t region)
{
	d->zreg[d->nzreg++] = region;
}

static inline void zreg_del(struct drive *d, uint32_t region)
{
	for (unsigned i = 0; i < d->nzreg; i++)
		if (d->zreg[i] == region) {
			d->zreg[i] = d->zreg[--d->nzreg];
			return;
		}
}

/* ---- tier.c: what every step needs ------------------------------------- */

__attribute__((format(printf, 4, 5))) void dlog_rl(struct drive *d, int level, int err,
						   const char *fmt, ...);
void hist_add(uint64_t *h, uint64_t *sum_ns, uint64_t ns);
void set_state(struct drive *d, uint32_t s);
void notify_waiters(struct ssd *ssd);
void go_offline(struct drive *d, int err, const char *why);
void note_error(struct drive *d, int err);
struct iop *iop_get(struct drive *d, int kind);
void iop_put(struct drive *d, struct iop *op);
int prep_io(struct drive *d, struct iop *op, bool write, void *buf, uint32_t len, uint64_t off,
	    uint32_t expect);
void wq_unlink(struct drive *d, struct wreq *w);
void wq_push_tail(struct drive *d, struct wreq *w);
void wreq_free(struct drive *d, struct wreq *w);
void wake_drive(struct drive *d);

/* ---- super.c (the opening thread; mark_super() also the drive thread at close) */

int drive_load(struct drive *d, char *err, size_t errlen);
int mark_super(struct drive *d, bool clean);

/* ---- recover.c (drive thread) ------------------------------------------ */

void recovery_pump(struct drive *d);
bool recov_done(struct drive *d, struct iop *op);

/* ---- writeout.c (drive thread) ----------------------------------------- */

void ahead_drop(struct drive *d, unsigned k);
void seal_begin(struct drive *d, uint32_t region);
void zone_kick(struct drive *d, uint32_t region);
void zone_done(struct drive *d, struct iop *zop);
void seal_pump(struct drive *d);
void seal_done(struct drive *d, struct iop *op);
void write_finish(struct drive *d, struct iop *op);
void dispatch_writes(struct drive *d);

/* ---- reclaim.c (drive thread) ------------------------------------------ */

bool write_region(struct drive *d);
void sync_erased(struct drive *d);
void erase_done(struct drive *d, struct iop *op);
void sync_done(struct drive *d, struct iop *op);

/* ---- reads.c (drive thread) -------------------------------------------- */

void read_landed(struct drive *d, struct iop *op);
void check_landed(struct drive *d);
void fail_read(struct drive *d, struct rreq *rr, int res);
void dispatch_reads(struct drive *d);

/* ---- drive-thread.c ----------------------------------------------------- */

void *drive_main(void *arg); /* the drive thread (pthread_create() in ssd_open()) */

#endif /* KVS_SSD_TIER_H */
