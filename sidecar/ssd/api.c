/* SPDX-License-Identifier: MIT */
/*
 * The SSD tier's public API (ssd.h): opening the drives and starting
 * their threads, closing them, and what any thread may call: lookups,
 * writes (drive choice, admission filter, backpressure), reads, waits
 * and stats.  The tier's insides are tier.h's files; the drives' I/O is
 * dev.h's.
 *
 * Threads: ssd_open(), ssd_open_mem(), ssd_close() and ssd_abandon() on
 * the daemon's start/stop thread; the rest on any thread, taking only an
 * index stripe, a drive's qlock or door_lock, never while calling back.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <syslog.h>
#include <time.h>

#include "ssd/crc32c.h"
#include "ssd/tier.h"

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
		for (unsigned i = 0; i < drive_nr_iops(d); i++) {
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
	if (d->dev)
		d->dev->ops->close(d->dev); /* its thread is joined (stop_all()) */
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

/* The tier without its drives: checked configuration, fault rules, the admission filter. */
static int ssd_new(const struct ssd_config *cfg, struct ssd **ret, char *err, size_t errlen)
{
	struct ssd *ssd;
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
		ssd_free(ssd);
		return r;
	}
	if (cfg->policy == SSD_POLICY_FILTER) {
		ssd->door = calloc(DOOR_BITS / 8, 1);
		if (!ssd->door || getrandom(&ssd->door_seed, sizeof(ssd->door_seed), 0) < 0) {
			ssd_free(ssd);
			return -ENOMEM;
		}
	}
	*ret = ssd;
	return 0;
}

/* Drive @i's I/O: memory drive @mems[i], or the file or device [ssd] path names. */
static int open_dev(struct ssd *ssd, struct drive *d, struct ssd_mem *const *mems, char *err,
		    size_t errlen)
{
	int r;

	if (!mems)
		return ssd_dev_uring_open(d->path, ssd->cfg.size, ssd->cfg.log, ssd->cfg.cb_arg,
					  &d->dev, err, errlen);
	r = ssd_mem_claim(mems[d->id], &d->dev);
	if (r < 0)
		snprintf(err, errlen, "%s: the memory drive is open in another tier", d->path);
	return r;
}

/* Open every drive, load its superblock, then size the index over all of them. */
static int open_drives(struct ssd *ssd, struct ssd_mem *const *mems, char *err, size_t errlen)
{
	const struct ssd_config *cfg = &ssd->cfg;
	uint64_t total = 0, max_entries = 0;
	int r;

	for (unsigned i = 0; i < cfg->nr_paths; i++) {
		for (unsigned j = 0; j < i; j++)
			if (strcmp(cfg->paths[i], cfg->paths[j]) == 0) {
				snprintf(err, errlen, "%s: named twice", cfg->paths[i]);
				return -EINVAL;
			}
		ssd->drives[i] = drive_new(ssd, i, cfg->paths[i]);
		if (!ssd->drives[i])
			return -ENOMEM;
		ssd->nr = i + 1;
		r = open_dev(ssd, ssd->drives[i], mems, err, errlen);
		if (r == 0)
			r = drive_load(ssd->drives[i], err, errlen);
		if (r < 0)
			return r;
		total += ssd->drives[i]->geom.file_bytes;
		max_entries += ssd->drives[i]->geom.nr_regions *
			       (ssd->drives[i]->geom.region_bytes / (2 * SSD_UNIT));
	}
	r = ssd_index_init(&ssd->idx,
			   total / (cfg->expect_block_bytes ? cfg->expect_block_bytes : 2u << 20),
			   max_entries);
	if (r < 0)
		snprintf(err, errlen, "cannot allocate the SSD index");
	return r;
}

/* The drive's regions, and its thread, once that thread has set up its I/O. */
static int drive_start(struct drive *d, char *err, size_t errlen)
{
	struct ssd *ssd = d->ssd;
	int r;

	d->regions = calloc(d->geom.nr_regions, sizeof(*d->regions));
	d->recov_seq = calloc(d->geom.nr_regions, sizeof(*d->recov_seq));
	d->recov_valid = calloc(d->geom.nr_regions, sizeof(*d->recov_valid));
	if (!d->regions || !d->recov_seq || !d->recov_valid) {
		snprintf(err, errlen, "%s: %s", d->path, strerror(ENOMEM));
		return -ENOMEM;
	}
	for (uint32_t j = 0; j < d->geom.nr_regions; j++)
		d->regions[j].entries = SSD_NO_ENTRY;
	r = -pthread_create(&d->thread, NULL, drive_main, d);
	if (r < 0) {
		snprintf(err, errlen, "%s: cannot start its thread: %s", d->path, strerror(-r));
		return r;
	}
	d->thread_started = true;
	/* Pairs with the broadcast in drive_main() once its setup is done. */
	pthread_mutex_lock(&ssd->wait_lock);
	while (!d->setup_done)
		pthread_cond_wait(&ssd->wait_cond, &ssd->wait_lock);
	r = d->setup_res;
	pthread_mutex_unlock(&ssd->wait_lock);
	if (r < 0) {
		snprintf(err, errlen, "%s: io_uring setup failed: %s", d->path, strerror(-r));
		return r;
	}
	slog(ssd, LOG_INFO, 0,
	     "%s: %" PRIu64 " bytes, %u regions of %" PRIu64
	     " bytes, direct I/O alignment %u, setup flags 0x%x, fixed buffers %s%s",
	     d->path, d->geom.file_bytes, d->geom.nr_regions, d->geom.region_bytes, d->io_align,
	     d->st.setup_flags, d->st.fixed_buffers ? "yes" : "no",
	     d->formatted ? ", formatted" : "");
	return 0;
}

static int open_tier(const struct ssd_config *cfg, struct ssd_mem *const *mems, struct ssd **ret,
		     char *err, size_t errlen)
{
	struct ssd *ssd;
	int r = ssd_new(cfg, &ssd, err, errlen);

	if (r < 0)
		return r;
	r = open_drives(ssd, mems, err, errlen);
	for (unsigned i = 0; r == 0 && i < ssd->nr; i++)
		r = drive_start(ssd->drives[i], err, errlen);
	if (r < 0) {
		stop_all(ssd, 2);
		ssd_free(ssd);
		return r;
	}
	*ret = ssd;
	return 0;
}

int ssd_open(const struct ssd_config *cfg, struct ssd **ret, char *err, size_t errlen)
{
	return open_tier(cfg, NULL, ret, err, errlen);
}

int ssd_open_mem(const struct ssd_config *cfg, struct ssd_mem *const *mems, struct ssd **ret,
		 char *err, size_t errlen)
{
	if (!mems) {
		snprintf(err, errlen, "no memory drives");
		return -EINVAL;
	}
	return open_tier(cfg, mems, ret, err, errlen);
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
	ADD(&ssd->lookup_hits, 1);
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

/* The MOD rows of the tier and of a drive, each a relaxed load. */
KVS_STATS_COPY(tier_copy, ssd_stats, ssd, KVS_STATS_SSD, MOD)
KVS_STATS_COPY(drive_copy, ssd_drive_stats, ssd_drive_stats, KVS_STATS_SSD_DRIVE, MOD)

void ssd_get_stats(struct ssd *ssd, struct ssd_stats *ret)
{
	struct ssd_stats s;

	memset(&s, 0, sizeof(s));
	s.nr_drives = ssd->nr;
	tier_copy(&s, ssd);
	s.index_entries = LOAD(&ssd->idx.nvalid);
	s.index_bytes = ssd_index_bytes(&ssd->idx);
	for (unsigned i = 0; i < ssd->nr; i++) {
		const struct ssd_drive_stats *src = &ssd->drives[i]->st;
		struct ssd_drive_stats *o = &s.drive[i];

		drive_copy(o, src);
#define C(f) o->f = LOAD(&src->f)
		C(setup_flags);
		C(fixed_file);
		C(recovery_ns);
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
