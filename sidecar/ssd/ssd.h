/* SPDX-License-Identifier: MIT */
/*
 * The SSD tier: KV blocks evicted from the host pool spill to local NVMe
 * (files or block devices) and come back from it, across restarts,
 * kill -9 and power loss, never as torn, corrupt or stale bytes.
 *
 * Pieces (one concept, one file):
 *   crc32c.c   CRC-32C, SSE4.2 (three streams) with a table fallback
 *   format.c   on-disk structures: superblock, block header, region trailer
 *              (format.h draws the layout and says what makes a miss)
 *   region-alloc.c the region allocator (FIFO over regions, placement, head pick)
 *   index.c    the in-memory index over all drives (52 bytes per block)
 *   fault.c    the fault-injection seam (tests only; inert unless configured)
 *   ssdconf.c  [ssd] keys of kvstash.conf into a struct ssd_config
 *   dev.h      the drive I/O layer: an ops table per drive, so the tier
 *              never names io_uring; dev-uring.c (files and block devices,
 *              O_DIRECT, one io_uring each) and dev-mem.c (a memory buffer,
 *              for unit tests of the tier)
 *   tier.h     the log-structured tier over those drives, one thread each:
 *              tier.c (shared steps), super.c (superblocks), recover.c
 *              (recovery on open), writeout.c (writes, header zones,
 *              sealing), reclaim.c (FIFO reuse: eviction, erase), reads.c
 *              (reads, checksums), drive-thread.c (the drive thread)
 *   api.c      this API: open, close, lookups, writes (backpressure,
 *              admission), reads, stats
 *   stub.c     the same API without liburing: ssd_open() says it is not
 *              compiled in
 *
 * ---- Threads and locking -----------------------------------------------
 *
 * Each drive has one thread that owns its io_uring (created by that
 * thread, with IORING_SETUP_SINGLE_ISSUER and SUBMIT_ALL where the kernel
 * has them; fixed file; the bufs below as fixed buffers), its regions and
 * its in-flight I/O.  Every public function
 * below except ssd_open() and ssd_close() may be called from any thread
 * at any time, concurrently; none of them waits for I/O.  They take only
 * short internal locks (an index stripe, a drive's queue lock), never
 * while calling back, so the caller may hold its own locks (the store
 * lock) while calling them.
 *
 * Callbacks (write_done, read_done, log) run on a drive thread with no
 * lock of this module held.  They may call ssd_lookup(), ssd_write(),
 * ssd_read() and ssd_get_stats(), and take the caller's own locks, but
 * should not block for long: the drive's I/O waits meanwhile.  They must
 * not call ssd_close().
 *
 *   call               thread            locks it takes        may wait for I/O
 *   ssd_open           daemon start      -                     yes (superblocks)
 *   ssd_close          daemon stop       -                     yes (drain, sync)
 *   ssd_ns             any               namespace lock        no
 *   ssd_lookup         any               one index stripe      no
 *   ssd_write          any               stripe, queue lock    no
 *   ssd_read           any               queue lock            no
 *   ssd_get_stats      any               none (relaxed reads)  no
 *
 * ---- How kvstashd uses it ---------------------------------------------
 *
 * In kvstashd the tier is the store's second tier: besides the store,
 * only kvstashd's side in control/tier-attach.c (open, close) and the stats
 * sampler (control/admin.c: ssd_get_stats()) call this module.
 *
 * 1. Start-up (tier_init(), from daemon_init() after the store, before
 *    the workers): ssd_config_from_kvs() maps [ssd]; with no path it
 *    returns 0 and nr_paths == 0, and kvstashd runs on DRAM only.  bufs[]
 *    are the pool regions, which the drive rings register as fixed
 *    buffers; log calls log_full() with the "ssd" prefix; thread_init and
 *    thread_fini make each drive thread an RCU reader; write_done,
 *    read_done and idle are the store's (store_ssd_write_done(),
 *    store_ssd_read_done(), store_ssd_idle(); cb_arg the store).  A
 *    failed ssd_open() fails start-up, logged as "ssd: <reason>".
 *    ssd_open() returns once the files are open and their superblocks
 *    read and marked in use; recovery then runs on the drive threads
 *    while the daemon serves DRAM: regions come online as they are
 *    scanned (ssd_lookup() finds a block as soon as its region is
 *    scanned), writes start after it.  store_set_ssd() then hands the
 *    tier to the store.  --check-config maps [ssd] the same way
 *    (tier_check_config()), and refuses a path in a build without
 *    liburing.
 *
 * 2. Namespaces (store_ns_tier(), from registration_build() when a
 *    namespace's first registration sets its geometry): ssd_ns_ident()
 *    serialises the name and the geometry (fingerprint, slot_bytes,
 *    tp_size, replicated) and ssd_ns() interns it; the id is kept in the
 *    namespace's struct store_ns (ssd_ns, published by the store-release
 *    of on_ssd).  A namespace whose geometry changed gets another
 *    identity, so its old blocks on SSD are misses by construction.
 *
 * 3. Spill (store/core.c and store/spill.c, under the store lock).
 *    Eviction runs ahead of need (spill_ahead(), after each slot taken): while a region's free room
 *    plus the bytes of writes in flight is below a reserve (a quarter of
 *    the pool, at most 4 GiB), the coldest blocks are evicted and written
 *    (spill_block()), since a victim written at the moment of need frees its
 *    slot only later; a victim needed at once (take_slot()) is dropped
 *    unwritten and counted.  For each shard, ssd_write() with the slot's
 *    address and length, value and hits = the block's QUERY uses (a
 *    higher value survives backpressure), cookie = the shard.  The
 *    evictor never waits:
 *      0          queued: the slot stays allocated and the block stays in
 *                 the index, claimed (a miss for QUERY, unless a QUERY
 *                 takes it back: rescue()); write_done(cookie, res) later
 *                 (drive thread) takes the store lock and frees the slot;
 *                 res == 0 means the block is on SSD, else it is gone.
 *      1          queued, and *ret_displaced is the cookie of a lower-
 *                 value write removed from the queue: that write ends at
 *                 once, as -ENOBUFS (its write_done never comes).
 *      -EEXIST    already on SSD (or being written), -EAGAIN not
 *                 admitted (policy = filter: a block never queried and
 *                 not seen evicted before), -ENOBUFS (queue full of
 *                 writes worth more), -ENODEV (no drive online), -E2BIG:
 *                 the shard is not kept; a block with no write queued
 *                 frees its slots at once.
 *    claim() refuses a block whose writes are in flight (spilling), as
 *    it refuses a pinned one.  With [ssd] write_ahead, an idle drive
 *    (idle: store_ssd_idle()) is given the coldest resident blocks not
 *    yet on SSD (value 0, so any eviction's write displaces them; at most
 *    2 MiB in flight): they stay hits, and eviction waits for their
 *    writes.
 *
 * 4. QUERY across tiers (store_query_tiers()): the DRAM walk is
 *    store_query()'s; where it ends, unless the QUERY says KVS_QUERY_DRAM
 *    or the namespace has no identity here, the prefix goes on through
 *    the keys every shard of which ssd_lookup() finds.  A leased QUERY
 *    makes each of them a block BLOCK_READING in slots of the worker's
 *    region (the store lock, once, for all of them), pinned by its lease,
 *    and starts ssd_read() of every shard at once, in prefix order; a
 *    block already READING (another QUERY's) is joined.  Without a lease
 *    they are only counted.  The CQE's res is the whole prefix, and
 *    KVS_CQE_PENDING(flags) the hits still being read (abi.h).  No slot,
 *    or an ssd_read() refused at once (-ENODEV, -EBUSY, -EINVAL), ends
 *    the prefix there.
 *
 * 5. Reads end (store_ssd_read_done(), drive thread, store lock): once
 *    every shard of a block is in, byte-exact (its CRC-32C was checked),
 *    it is resident like any other (sealed, in its S3-FIFO queue,
 *    BLOCK_RESIDENT with a store-release) and reported to the registry's
 *    hook; if a shard failed (-EIO, -EBADMSG: checksum, -ESTALE: region
 *    reused, -ENODEV), its slots are freed and it stays BLOCK_FAILED
 *    until its last pin goes (store_reclaim_partial()).  Either way the
 *    store's wake hook (control/tier-attach.c) wakes every worker.  A block read
 *    back stays valid on SSD, so evicting it again costs no write
 *    (-EEXIST).
 *
 * 6. LOAD waiting for reads (io/worker.c): a LOAD of blocks still
 *    READING parks on the worker's list; each time the worker is woken
 *    it copies the blocks that arrived, in prefix order (load_part()),
 *    and posts one CQE once none is READING and the last part is copied.
 *    A FAILED block shortens the LOAD to the prefix before it: res is the
 *    count copied, never more, so the engine recomputes the rest; nothing
 *    half read is ever copied.
 *
 * 7. Metrics: control/admin.c samples ssd_get_stats() (relaxed reads)
 *    and the store's side of the tier (store_get_stats()) into the
 *    "ssd" stats group and the "ssd_drives" group, one message per drive
 *    (include/kvstash/stats.h), which `kvstash stats` and Prometheus show.
 *
 * 8. Shutdown (tier_close(), first in daemon_fini() once the metrics
 *    thread stopped: before the workers stop, as ended reads wake them,
 *    and before the store and the pool go, as queued writes read pool
 *    slots and free them in the store): ssd_close() writes what is still
 *    queued (up to drain_ms), waits for every I/O, seals the open
 *    regions, syncs and marks each superblock clean.
 *
 * 9. The systemd unit (systemd/kvstashd.service.in) has
 *    ProtectSystem=strict and a closed device policy; it makes
 *    /var/lib/kvstash/ssd (StateDirectory=) for the drives' files.  Files
 *    elsewhere need a drop-in with ReadWritePaths=, raw NVMe devices one
 *    with DeviceAllow=/dev/nvmeXnY rw; LimitMEMLOCK=infinity covers the
 *    pool registered once more per drive as fixed buffers.
 *
 * ---- Return values -------------------------------------------------------
 *
 * 0 or a positive count on success, -errno on failure; ret_* outputs are
 * untouched on failure; ssd_close(NULL) does nothing.
 */
#ifndef KVS_SSD_H
#define KVS_SSD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvstash/stats.h>

#include "common/loghook.h"
#include "ssd/index.h"

#define SSD_MAX_DRIVES	 16u
#define SSD_HIST_BUCKETS 24u /* log2 microseconds: [2^i, 2^(i+1)) us; bucket 0 from 0 */

struct kvs_config;
struct ssd;

enum ssd_policy {
	SSD_POLICY_SPILL,  /* every block evicted from DRAM is written */
	SSD_POLICY_FILTER, /* only blocks used in DRAM or evicted before (one-hit blocks are not) */
};

enum ssd_drive_state {
	SSD_DRIVE_RECOVERING, /* scanning: lookups find what is scanned, writes wait */
	SSD_DRIVE_ONLINE,
	SSD_DRIVE_OFFLINE, /* errors or a removed device: every lookup misses */
	SSD_DRIVE_CLOSED,
};

/* Memory the drives may register as io_uring fixed buffers (the pool). */
struct ssd_buf {
	void *base;
	uint64_t len;
};

struct ssd_config {
	const char *const *paths; /* files (created, preallocated) or block devices */
	unsigned nr_paths;
	uint64_t size;	      /* bytes per file; block devices: 0 = whole device */
	uint64_t region_size; /* 0: 256 MiB */
	uint32_t queue_depth; /* block I/Os in flight per drive; 0: 32 */
	uint32_t write_queue; /* writes waiting per drive before drops; 0: 4 * depth */
	enum ssd_policy policy;
	uint64_t write_rate;	     /* bytes per second per drive; 0: no cap */
	uint32_t max_errors;	     /* I/O errors in 10 s that take a drive offline; 0: 8 */
	uint32_t drain_ms;	     /* ssd_close(): how long queued writes may take; 0: 10 s */
	uint64_t expect_block_bytes; /* sizes the index; 0: 2 MiB */
	const struct ssd_buf *bufs;
	unsigned nr_bufs;
	/* Fault rules (fault.h); NULL: $KVSTASH_SSD_FAULTS; "" or unset: none. */
	const char *faults;

	void *cb_arg;
	/*
	 * Optional: run first and last on each drive thread, so the caller
	 * can make it what its callbacks need (kvstashd: an RCU reader).
	 */
	void (*thread_init)(void *arg);
	void (*thread_fini)(void *arg);
	void (*write_done)(void *arg, void *cookie, int res);
	void (*read_done)(void *arg, void *cookie, int res);
	/*
	 * Optional: a drive thread found nothing to do (no read queued or
	 * pending, no write queued, no read ended in the last 20 ms) and may
	 * be given writes (ssd_write()).  No lock held; called again after
	 * each completion while idle, and at least every 100 ms.
	 */
	void (*idle)(void *arg);
	/* level: syslog LOG_*; err: errno or 0; msg without a newline. */
	kvs_log_hook *log; /* common/loghook.h */
};

/* [ssd] of kvstash.conf; *ret points into @cfg (paths are split into @ret's own array). */
struct ssd_conf_paths {
	char *buf;
	const char *paths[SSD_MAX_DRIVES];
};
int ssd_config_from_kvs(const struct kvs_config *cfg, struct ssd_config *ret,
			struct ssd_conf_paths *store, char *err, size_t errlen);
void ssd_conf_paths_free(struct ssd_conf_paths *store);

/*
 * Open every drive: create and preallocate files (fallocate to size),
 * check O_DIRECT and its alignment, read the superblocks (a drive whose
 * geometry differs from the configuration is formatted anew: its blocks
 * are gone), mark them in use, start the drive threads (which recover the
 * index).  On failure a reason naming the path goes into @err and nothing
 * is left open: -ENOENT, -EACCES, -ENOSPC (cannot preallocate), -EINVAL
 * (no O_DIRECT, e.g. tmpfs; bad geometry), -EOPNOTSUPP (not compiled in).
 */
int ssd_open(const struct ssd_config *cfg, struct ssd **ret, char *err, size_t errlen);

/*
 * ssd_open() over memory drives (dev.h: ssd_mem_new()), for unit tests of
 * the tier: @mems[i] is drive i, cfg->paths[i] only its name; cfg->size
 * is not used (a memory drive's size is its own).  The bytes stay in the
 * memory drive after ssd_close(), so opening it again recovers them.
 * -EBUSY when one of them is open in another tier.
 */
struct ssd_mem;
int ssd_open_mem(const struct ssd_config *cfg, struct ssd_mem *const *mems, struct ssd **ret,
		 char *err, size_t errlen);

/* Drain, seal, sync, mark clean, stop the threads, free.  NULL: nothing. */
void ssd_close(struct ssd *ssd);

/*
 * Simulated crash for tests: stop the threads without draining, sealing,
 * syncing or marking anything (what kill -9 leaves on disk), then free.
 */
void ssd_abandon(struct ssd *ssd);

/* Intern a namespace identity (name and geometry bytes, at most SSD_NS_MAX). */
int ssd_ns(struct ssd *ssd, const void *ident, size_t len, uint32_t *ret_ns);

/*
 * The identity kvstashd uses: name (NUL included), then fingerprint,
 * slot_bytes (LE u64), tp_size, replicated (LE u32).  Returns its length,
 * -ENAMETOOLONG if it does not fit SSD_NS_MAX.
 */
int ssd_ns_ident(const char *name, uint64_t fingerprint, uint64_t slot_bytes, uint32_t tp_size,
		 bool replicated, uint8_t ret_ident[SSD_NS_MAX]);

/*
 * Where (ns, key, shard) is on SSD: 0 and *@ret_loc, or -ENOENT (not
 * there, not yet recovered, still being written, or its drive offline).
 */
int ssd_lookup(struct ssd *ssd, uint32_t ns, const uint8_t key[SSD_KEY_SIZE], uint32_t shard,
	       struct ssd_loc *ret_loc);

struct ssd_write {
	uint32_t ns;
	const uint8_t *key; /* SSD_KEY_SIZE bytes, copied */
	uint32_t shard;	    /* < 65536 */
	const void *buf;    /* valid until write_done (or until displaced) */
	uint32_t len;
	uint32_t value; /* lower values are dropped first under backpressure */
	uint32_t hits;	/* uses in DRAM; 0 with policy = filter: admitted only if seen before */
	/*
	 * Written ahead of its eviction (the block stays in DRAM): with policy
	 * = filter and no hits it is refused (-EAGAIN) without being counted
	 * or remembered, as its eviction will be judged on its own.
	 */
	bool ahead;
	void *cookie;
};

/*
 * Queue a write of @w (see step 3 above for every result).  Never waits.
 * Returns 0 or 1 (queued; 1: *@ret_displaced is a dropped write's cookie),
 * or -EEXIST, -EAGAIN, -ENOBUFS, -ENODEV, -E2BIG, -EINVAL.
 */
int ssd_write(struct ssd *ssd, const struct ssd_write *w, void **ret_displaced);

/*
 * Read the block at @loc into @dst (@cap bytes, at least loc->len; the
 * pool's 512-byte alignment makes it direct I/O): 0, and read_done(cookie,
 * res) comes later with 0 (byte-exact, checksum verified) or -errno.
 * -ENODEV (drive offline), -EBUSY (too many reads queued), -EINVAL (a
 * @loc not from ssd_lookup(), @cap too small): no callback.
 */
int ssd_read(struct ssd *ssd, const struct ssd_loc *loc, void *dst, size_t cap, void *cookie);

/*
 * Wait until every drive finished recovery (or went offline): 0, or
 * -ETIMEDOUT after @timeout_ms.  For tools and tests; the daemon does not
 * need to wait.
 */
int ssd_wait_recovered(struct ssd *ssd, int timeout_ms);

/*
 * Wait until no write is queued or in flight: 0, or -ETIMEDOUT.  For
 * tools and tests.
 */
int ssd_wait_idle(struct ssd *ssd, int timeout_ms);

/*
 * A drive's figures, and the tier's.  The fields of the rows of source MOD
 * of KVS_STATS_SSD_DRIVE and KVS_STATS_SSD (<kvstash/stats.h>) come from
 * the rows, so a counter is one row there; what the daemon computes
 * (quantiles, sums over the drives, the recovery time in us) or only the
 * tier keeps follows.
 */
struct ssd_drive_stats {
	KVS_STATS_SSD_DRIVE(KVS_STATS_MOD_MEMBER_)
	uint32_t setup_flags; /* IORING_SETUP_* in use */
	bool fixed_file;
	uint64_t recovery_ns;		      /* 0 until done */
	uint64_t write_lat[SSD_HIST_BUCKETS]; /* submit to completion */
	uint64_t read_lat[SSD_HIST_BUCKETS];
	uint64_t write_lat_sum_ns, read_lat_sum_ns; /* of the I/Os in the histograms */
};

struct ssd_stats {
	KVS_STATS_SSD(KVS_STATS_MOD_MEMBER_) /* admissions, lookups */
	uint32_t nr_drives;
	uint64_t index_entries, index_bytes;
	struct ssd_drive_stats drive[SSD_MAX_DRIVES];
};

void ssd_get_stats(struct ssd *ssd, struct ssd_stats *ret);

/* Drive @i's path as [ssd] path names it (valid until ssd_close()); NULL past the last. */
const char *ssd_drive_path(const struct ssd *ssd, unsigned i);

/* "recovering", "online", "offline", "closed". */
const char *ssd_drive_state_name(uint32_t state);

#endif /* KVS_SSD_H */
