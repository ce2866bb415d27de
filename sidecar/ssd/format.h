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
 *   [hdr unit][payload, padded to a unit] [hdr unit][payload] ...
 *   ... free ... [summary: a copy of every block header][trailer unit]
 *
 * A block header (512 bytes in a 4 KiB unit of its own) says which
 * region cycle it belongs to (region index and sequence, block sequence),
 * where it is (its own byte offset), what it is (the namespace identity:
 * model name and geometry as exact bytes, plus its digest; the 16-byte
 * key; the shard), and the payload's length and CRC-32C; its own CRC
 * closes it.  When a region is full (or at a clean stop) the drive thread
 * writes the summary of the blocks whose writes completed and then the
 * trailer (region, sequence, count, summary CRC): recovery of a sealed
 * region reads its first header unit and its tail, never its payloads.
 * Only a region that was open when the process died has no trailer; it
 * is walked header by header.
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

#define SSD_UNIT	   4096u /* layout unit; the device's DIO alignment must divide it */
#define SSD_SUPER_COPIES   2u
#define SSD_DATA_ALIGN	   (1u << 20) /* first region at 1 MiB */
#define SSD_FORMAT_VERSION 1u
#define SSD_KEY_SIZE	   16u
#define SSD_NS_MAX	   256u /* namespace identity bytes */
#define SSD_HDR_SIZE	   512u

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
	uint32_t resv0;
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
	uint64_t offset; /* this header's byte offset in the file */
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
	uint32_t nr_blocks;
	uint32_t summary_crc; /* CRC-32C of nr_blocks * SSD_HDR_SIZE bytes */
	uint64_t summary_off; /* from the region's start */
	uint64_t used_bytes;  /* end of the last block, from the region's start */
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
 * a file of @file_bytes.  -EINVAL for a bad region size, -ENOSPC when not
 * even two regions fit (FIFO reuse needs one to fill while one drains).
 */
int ssd_geom_init(uint64_t file_bytes, uint64_t region_bytes, struct ssd_geom *ret);

static inline uint64_t ssd_region_off(const struct ssd_geom *g, uint32_t region)
{
	return g->data_off + (uint64_t)region * g->region_bytes;
}

/* Bytes a block of @payload_len takes in a region: header unit + payload. */
static inline uint64_t ssd_block_bytes(uint64_t payload_len)
{
	return SSD_UNIT + (payload_len + SSD_UNIT - 1) / SSD_UNIT * SSD_UNIT;
}

/* Units the summary of @n blocks takes. */
static inline uint64_t ssd_summary_bytes(uint32_t n)
{
	return ((uint64_t)n * SSD_HDR_SIZE + SSD_UNIT - 1) / SSD_UNIT * SSD_UNIT;
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
 * Beyond the checks of every decoder: the header must belong to @file_id
 * and lie where @g puts a header (region in range, @expect_off if not 0,
 * payload inside its region).
 */
int ssd_block_hdr_decode(const void *buf, const uint8_t file_id[16], const struct ssd_geom *g,
			 uint64_t expect_off, struct ssd_block_hdr *ret);

void ssd_trailer_encode(const struct ssd_trailer *t, void *buf);
int ssd_trailer_decode(const void *buf, const uint8_t file_id[16], const struct ssd_geom *g,
		       uint32_t expect_region, struct ssd_trailer *ret);

/* CRC-32C of a namespace identity: the digest in every header. */
uint32_t ssd_ns_digest(const void *ns, size_t len);

#endif /* KVS_SSD_FORMAT_H */
