/* SPDX-License-Identifier: MIT */
/*
 * A drive's superblocks (format.h draws them): its geometry from the
 * configured region size, adopting what is on the drive or formatting it
 * anew, and marking it in use at open and clean at a clean stop.  Two
 * copies, written alternately by generation, so a torn write of one
 * leaves the other.
 *
 * Threads: drive_load() on the thread that opens the tier (ssd_open()),
 * before the drive thread starts; mark_super() there and on the drive
 * thread at close (close_step()), never both at once.  Synchronous I/O
 * through the drive's ops (read_sync, write_sync, datasync).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <syslog.h>
#include <unistd.h>

#include "ssd/crc32c.h"
#include "ssd/tier.h"

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
	int r;

	if (posix_memalign((void **)&buf, SSD_UNIT, SSD_UNIT))
		return -ENOMEM;
	memset(buf, 0, SSD_UNIT);
	ssd_super_encode(sb, buf);
	r = d->dev->ops->write_sync(d->dev, buf, SSD_UNIT, (uint64_t)copy * SSD_UNIT);
	free(buf);
	return r;
}

/* Mark the drive in use (or clean): the next generation into the other copy, synced. */
int mark_super(struct drive *d, bool clean)
{
	int r;

	d->sb.generation++;
	d->sb.flags = clean ? SSD_SB_CLEAN : 0;
	host_identity(d->sb.host_id);
	d->sb.dev = d->dev->dev;
	d->sb.ino = d->dev->ino;
	d->sb.open_time = (uint64_t)time(NULL);
	r = write_super(d, &d->sb, d->sb.generation & 1);
	if (r == 0)
		r = d->dev->ops->datasync(d->dev);
	return r;
}

/* The geometry [ssd] asks for on the drive's size. */
static int drive_geom(struct drive *d, char *err, size_t errlen)
{
	const struct ssd_config *cfg = &d->ssd->cfg;
	uint64_t region = cfg->region_size ? cfg->region_size : DEF_REGION_BYTES;
	uint64_t size = d->dev->size - d->dev->size % SSD_UNIT;
	int r;

	d->io_align = d->dev->io_align;
	d->mem_align = d->dev->mem_align;
	r = ssd_geom_init(size, region, &d->geom);
	if (r < 0)
		snprintf(err, errlen,
			 r == -ENOSPC ? "%s: too small for two regions of %" PRIu64 " bytes"
				      : "%s: bad region size %" PRIu64
					" (a multiple of 4 KiB, >= 16 KiB)",
			 d->path, region);
	return r;
}

/*
 * Read both copies: 0 and in *@ret_pick what ssd_super_pick() made of
 * them (the copy in *@ret, or -EBADMSG: none valid), or -errno.
 */
static int read_supers(struct drive *d, struct ssd_super *ret, int *ret_pick, char *err,
		       size_t errlen)
{
	uint8_t *buf = NULL;
	int r;

	if (posix_memalign((void **)&buf, SSD_UNIT, 2 * SSD_UNIT))
		return -ENOMEM;
	r = d->dev->ops->read_sync(d->dev, buf, 2 * SSD_UNIT, 0);
	if (r < 0) {
		free(buf);
		snprintf(err, errlen, "%s: cannot read the superblocks: %s", d->path, strerror(-r));
		return r;
	}
	*ret_pick = ssd_super_pick(buf, buf + SSD_UNIT, ret);
	free(buf);
	return 0;
}

/* The superblock on the drive has our geometry: its blocks are ours to recover. */
static void adopt_super(struct drive *d, const struct ssd_super *sb)
{
	uint8_t host[16];

	d->sb = *sb;
	d->last_clean = sb->flags & SSD_SB_CLEAN;
	host_identity(host);
	if (memcmp(host, sb->host_id, 16))
		slog(d->ssd, LOG_NOTICE, 0, "%s: last opened on another host", d->path);
	if (sb->ino != d->dev->ino && !d->dev->bdev)
		slog(d->ssd, LOG_NOTICE, 0,
		     "%s: the file was replaced or copied since its last use", d->path);
}

/* A new file identity and geometry, in both copies. */
static int format_super(struct drive *d, char *err, size_t errlen)
{
	int r;

	memset(&d->sb, 0, sizeof(d->sb));
	if (getrandom(d->sb.file_id, 16, 0) != 16) {
		uint64_t t = mono_ns();

		memcpy(d->sb.file_id, &t, 8);
		t = crc32c((uint32_t)t, d->path, strlen(d->path)) ^ (uint64_t)getpid() << 32;
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
	if (r < 0)
		snprintf(err, errlen, "%s: cannot write the superblock: %s", d->path, strerror(-r));
	return r;
}

/* What the drive's stats say from the start, and how far to erase ahead. */
static void drive_sized(struct drive *d)
{
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
}

/*
 * The drive is open (d->dev): its geometry, its superblock adopted (a
 * drive whose geometry differs is formatted anew: its blocks are gone) or
 * written, and marked in use.  A reason naming the path into @err.
 */
int drive_load(struct drive *d, char *err, size_t errlen)
{
	struct ssd_super sb;
	int r, pick;

	r = drive_geom(d, err, errlen);
	if (r < 0)
		return r;
	r = read_supers(d, &sb, &pick, err, errlen);
	if (r < 0)
		return r;
	if (pick >= 0 && sb.geom.file_bytes == d->geom.file_bytes &&
	    sb.geom.region_bytes == d->geom.region_bytes) {
		adopt_super(d, &sb);
	} else {
		if (pick >= 0)
			slog(d->ssd, LOG_NOTICE, 0,
			     "%s: geometry changed (%" PRIu64 " bytes, regions of %" PRIu64
			     " before): formatting, its blocks are gone",
			     d->path, sb.geom.file_bytes, sb.geom.region_bytes);
		r = format_super(d, err, errlen);
		if (r < 0)
			return r;
	}
	r = mark_super(d, false);
	if (r < 0) {
		snprintf(err, errlen, "%s: cannot write the superblock: %s", d->path, strerror(-r));
		return r;
	}
	drive_sized(d);
	return 0;
}
