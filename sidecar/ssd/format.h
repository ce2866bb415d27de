/* SPDX-License-Identifier: MIT */
/*
 * The SSD tier's on-disk format.  Everything is little-endian, fixed
 * width, checksummed with CRC-32C, and self-describing: a drive (a file
 * or a block device) can be read back without anything kvstashd kept in
 * memory, after a clean stop, a kill -9 or a power loss.
 *
 *   offset 0        superblock copy A (one 4 KiB unit)
 *   offset 4096     superblock copy B
 *   data_off        region 0, region 1, ... region nr_regions-1
 *
 * Superblock: magic, version, the file's random identity (file_id, in
 * every block header too, so nothing from an earlier format of the same
 * file is ever taken for a block of this one), the host that last opened
 * it, the geometry, a clean-shutdown flag and a generation.  The two
 * copies are written alternately (generation g goes to copy g & 1) and
 * the newest valid one wins, so a torn superblock write leaves the other.
 *
 * Regions: the log.  Blocks are appended to one open region at a time;
 * regions are reused whole in FIFO order (region i+1 after region i, the
 * drive sees sequential overwrites), each reuse under a new region
 * sequence number.  Inside a region:
 *
 *   [payload 0][payload 1] ...  free  ... [header zone][trailer unit]
 *
 * Payloads are placed back to back from the region's start, each padded
 * to a 4 KiB unit, so blocks of a power-of-two size stay aligned to their
 * size (regions start on 2 MiB boundaries): drives and virtual disks are
 * fastest that way.  Their headers are not inline but in the header zone
 * at the region's end, 512 bytes each, entry i at 512 * (i + 1) bytes
 * before the trailer, so the entries in use always sit right before it.
 * A block header says which region cycle it belongs to (region index and
 * sequence, block sequence = its entry), where its payload is (byte
 * offset), what it is (the namespace identity: model name and geometry as
 * exact bytes, plus its digest; the 16-byte key; the shard), and the
 * payload's length and CRC-32C; its own CRC closes it.  Header zone units
 * (eight entries each) are rewritten as entries are added, never two
 * writes of one unit at a time; a torn rewrite of a unit leaves each
 * 512-byte entry old or new (sector atomicity), and the entries already
 * there are the same bytes in both.  When a region is full (or at a clean
 * stop) the drive thread writes the trailer (region, sequence, number of
 * entries, their CRC).  Recovery of a region reads only its tail: the
 * trailer and the entries in use, one I/O (the "summary"); a region
 * without a valid trailer of its cycle (open when the process died) is
 * taken up to its first invalid entry.
 *
 * What makes a block a miss rather than wrong bytes:
 *   - a header or summary entry whose CRC, magic, version, file_id,
 *     region, offset or bounds do not check out;
 *   - a header from an earlier cycle of its region (its sequence is not
 *     the region's current one: the region was reused);
 *   - a payload whose CRC-32C does not match (checked on every read: a
 *     torn write, a flipped bit, garbage written over it);
 *   - a namespace identity that is not byte-for-byte the caller's (its
 *     geometry changed).
 *
 * Sequence numbers are u32 and compared in serial-number arithmetic (RFC
 * 1982): a drive with fewer than 2^31 regions orders them correctly
 * across the wrap from 0xffffffff to 0.
 */
#ifndef KVS_SSD_FORMAT_H
#define KVS_SSD_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SSD_UNIT		 4096u /* layout unit; the device's DIO alignment must divide it */
#define SSD_SUPER_COPIES	 2u
#define SSD_DATA_ALIGN		 (2u << 20)  /* first region at 2 MiB */
#define SSD_ZONE_BYTES_PER_ENTRY (64u << 10) /* one header entry per 64 KiB of region */
#define SSD_HDRS_PER_UNIT	 (SSD_UNIT / SSD_HDR_SIZE)
#define SSD_FORMAT_VERSION	 1u
#define SSD_KEY_SIZE		 16u
#define SSD_NS_MAX		 256u /* namespace identity bytes */
#define SSD_HDR_SIZE		 512u

#define SSD_SUPER_MAGIC	  0x5353564bu /* "KVSS" */
#define SSD_BLOCK_MAGIC	  0x4253564bu /* "KVSB" */
#define SSD_TRAILER_MAGIC 0x5453564bu /* "KVST" */

#define SSD_SB_CLEAN 0x1u /* the last stop drained, synced and sealed its region */

/* ---- on-disk structures (little-endian) ------------------------------- */

struct ssd_super_disk {
	uint32_t magic;
	uint16_t version;
	uint16_t size;
	uint32_t generation;
	uint32_t flags;
	uint8_t file_id[16];
	uint8_t host_id[16];
	uint64_t file_bytes;
	uint64_t region_bytes;
	uint64_t data_off;
	uint32_t nr_regions;
	uint32_t unit;
	uint32_t io_align;
	uint32_t zone_entries;
	uint64_t dev;
	uint64_t ino;
	uint64_t format_time;
	uint64_t open_time;
	uint32_t resv[27];
	uint32_t crc; /* CRC-32C of every byte before it */
};
_Static_assert(sizeof(struct ssd_super_disk) == 232, "superblock layout");
_Static_assert(offsetof(struct ssd_super_disk, crc) == 228, "superblock crc offset");

struct ssd_block_hdr_disk {
	uint32_t magic;
	uint16_t version;
	uint16_t size;
	uint8_t file_id[16];
	uint32_t region;
	uint32_t region_seq;
	uint32_t block_seq;
	uint32_t flags;
	uint64_t offset; /* the payload's byte offset in the file */
	uint32_t payload_len;
	uint32_t payload_crc;
	uint8_t key[SSD_KEY_SIZE];
	uint32_t shard;
	uint32_t ns_digest; /* CRC-32C of ns[0..ns_len) */
	uint16_t ns_len;
	uint16_t resv0;
	uint8_t ns[SSD_NS_MAX];
	uint8_t resv[168];
	uint32_t crc; /* CRC-32C of every byte before it */
};
_Static_assert(sizeof(struct ssd_block_hdr_disk) == SSD_HDR_SIZE, "block header layout");
_Static_assert(offsetof(struct ssd_block_hdr_disk, offset) == 40, "block header offset field");
_Static_assert(offsetof(struct ssd_block_hdr_disk, ns) == 84, "block header ns field");
_Static_assert(offsetof(struct ssd_block_hdr_disk, crc) == SSD_HDR_SIZE - 4, "block header crc");

struct ssd_trailer_disk {
	uint32_t magic;
	uint16_t version;
	uint16_t size;
	uint8_t file_id[16];
	uint32_t region;
	uint32_t region_seq;
	uint32_t nr_blocks;   /* header zone entries in use */
	uint32_t summary_crc; /* CRC-32C of those entries, as they lie on disk */
	uint64_t summary_off; /* the header zone's start, from the region's start */
	uint64_t used_bytes;  /* end of the last payload, from the region's start */
	uint32_t resv[5];
	uint32_t crc;
};
_Static_assert(sizeof(struct ssd_trailer_disk) == 80, "trailer layout");
_Static_assert(offsetof(struct ssd_trailer_disk, crc) == 76, "trailer crc offset");

/* ---- host-order views, what the code works with ----------------------- */

struct ssd_geom {
	uint64_t file_bytes;
	uint64_t region_bytes;
	uint64_t data_off;
	uint32_t nr_regions;
	uint32_t zone_entries;	/* header entries per region */
	uint64_t zone_bytes;	/* their units */
	uint64_t payload_bytes; /* payload area of a region: before the zone */
};

struct ssd_super {
	uint32_t generation;
	uint32_t flags;
	uint8_t file_id[16];
	uint8_t host_id[16];
	struct ssd_geom geom;
	uint32_t io_align;
	uint64_t dev, ino;
	uint64_t format_time, open_time;
};

struct ssd_block_hdr {
	uint8_t file_id[16];
	uint32_t region;
	uint32_t region_seq;
	uint32_t block_seq;
	uint64_t offset;
	uint32_t payload_len;
	uint32_t payload_crc;
	uint8_t key[SSD_KEY_SIZE];
	uint32_t shard;
	uint16_t ns_len;
	uint8_t ns[SSD_NS_MAX];
};

struct ssd_trailer {
	uint8_t file_id[16];
	uint32_t region;
	uint32_t region_seq;
	uint32_t nr_blocks;
	uint32_t summary_crc;
	uint64_t summary_off;
	uint64_t used_bytes;
};

/* ---- geometry --------------------------------------------------------- */

/*
 * Regions of @region_bytes (a multiple of SSD_UNIT, at least 4 units) in
 * a file of @file_bytes, each with a header entry per 64 KiB (at least 8).
 * -EINVAL for a bad region size, -ENOSPC when not even two regions fit
 * (FIFO reuse needs one to fill while one drains).
 */
int ssd_geom_init(uint64_t file_bytes, uint64_t region_bytes, struct ssd_geom *ret);

static inline uint64_t ssd_region_off(const struct ssd_geom *g, uint32_t region)
{
	return g->data_off + (uint64_t)region * g->region_bytes;
}

/* Bytes a payload of @payload_len takes in a region: padded to a unit. */
static inline uint64_t ssd_block_bytes(uint64_t payload_len)
{
	return (payload_len + SSD_UNIT - 1) / SSD_UNIT * SSD_UNIT;
}

/* Offset of header entry @i from its region's start. */
static inline uint64_t ssd_entry_off(const struct ssd_geom *g, uint32_t i)
{
	return g->region_bytes - SSD_UNIT - (uint64_t)(i + 1) * SSD_HDR_SIZE;
}

/* The unit holding entry @i, counted back from the trailer (0: next to it). */
static inline uint32_t ssd_entry_unit(uint32_t i)
{
	return i / SSD_HDRS_PER_UNIT;
}

/* Offset of zone unit @u (ssd_entry_unit()) from its region's start. */
static inline uint64_t ssd_zone_unit_off(const struct ssd_geom *g, uint32_t u)
{
	return g->region_bytes - SSD_UNIT - (uint64_t)(u + 1) * SSD_UNIT;
}

/* Bytes of the tail (entries 0..n-1 and the trailer), rounded to units. */
static inline uint64_t ssd_tail_bytes(uint32_t n)
{
	return SSD_UNIT + ((uint64_t)n * SSD_HDR_SIZE + SSD_UNIT - 1) / SSD_UNIT * SSD_UNIT;
}

/* ---- serial numbers (RFC 1982) ---------------------------------------- */

/* a comes after b. */
static inline bool ssd_seq_after(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

/* ---- encode / decode -------------------------------------------------- */

/*
 * Encoders fill a zeroed SSD_UNIT buffer (@buf) with the structure at its
 * start and its CRC.  Decoders copy the structure out of @buf (which may
 * hold anything: it came from the disk) and validate it before touching
 * any field: -EBADMSG for a bad magic, size or CRC, -EPROTO for an
 * unknown version, -ERANGE for a field out of bounds.
 */
void ssd_super_encode(const struct ssd_super *sb, void *buf);
int ssd_super_decode(const void *buf, struct ssd_super *ret);

/*
 * Newest valid superblock of the two copies (@a, @b: one SSD_UNIT each):
 * 0 or 1 for the copy chosen, -EBADMSG when neither is valid.
 */
int ssd_super_pick(const void *a, const void *b, struct ssd_super *ret);

void ssd_block_hdr_encode(const struct ssd_block_hdr *h, void *buf);
/*
 * Beyond the checks of every decoder: the header must belong to @file_id,
 * its region be in range and its payload inside that region's payload
 * area, its entry inside the zone; and @expect_region / @expect_entry
 * when not UINT32_MAX.
 */
int ssd_block_hdr_decode(const void *buf, const uint8_t file_id[16], const struct ssd_geom *g,
			 uint32_t expect_region, uint32_t expect_entry, struct ssd_block_hdr *ret);

void ssd_trailer_encode(const struct ssd_trailer *t, void *buf);
int ssd_trailer_decode(const void *buf, const uint8_t file_id[16], const struct ssd_geom *g,
		       uint32_t expect_region, struct ssd_trailer *ret);

/* CRC-32C of a namespace identity: the digest in every header. */
uint32_t ssd_ns_digest(const void *ns, size_t len);

#endif /* KVS_SSD_FORMAT_H */
