/* SPDX-License-Identifier: MIT */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "ssd/crc32c.h"
#include "ssd/format.h"

int ssd_geom_init(uint64_t file_bytes, uint64_t region_bytes, struct ssd_geom *ret)
{
	struct ssd_geom g;
	uint64_t n, entries;

	if (region_bytes % SSD_UNIT || region_bytes < 4 * SSD_UNIT || region_bytes > (1ull << 40))
		return -EINVAL;
	if (file_bytes < SSD_DATA_ALIGN)
		return -ENOSPC;
	n = (file_bytes - SSD_DATA_ALIGN) / region_bytes;
	if (n < 2)
		return -ENOSPC;
	if (n > UINT32_MAX / 2) /* serial arithmetic orders fewer than 2^31 */
		n = UINT32_MAX / 2;
	/* A header entry per 64 KiB: blocks smaller than that fill the zone first. */
	entries = region_bytes / SSD_ZONE_BYTES_PER_ENTRY;
	if (entries < SSD_HDRS_PER_UNIT)
		entries = SSD_HDRS_PER_UNIT;
	memset(&g, 0, sizeof(g));
	g.file_bytes = file_bytes;
	g.region_bytes = region_bytes;
	g.data_off = SSD_DATA_ALIGN;
	g.nr_regions = (uint32_t)n;
	g.zone_entries = (uint32_t)entries;
	g.zone_bytes = ssd_tail_bytes(g.zone_entries) - SSD_UNIT;
	if (g.zone_bytes + 2 * SSD_UNIT > region_bytes)
		return -EINVAL;
	g.payload_bytes = region_bytes - SSD_UNIT - g.zone_bytes;
	*ret = g;
	return 0;
}

uint32_t ssd_ns_digest(const void *ns, size_t len)
{
	return crc32c(0, ns, len);
}

/* ---- superblock ------------------------------------------------------- */

void ssd_super_encode(const struct ssd_super *sb, void *buf)
{
	struct ssd_super_disk d;

	memset(&d, 0, sizeof(d));
	d.magic = htole32(SSD_SUPER_MAGIC);
	d.version = htole16(SSD_FORMAT_VERSION);
	d.size = htole16(sizeof(d));
	d.generation = htole32(sb->generation);
	d.flags = htole32(sb->flags);
	memcpy(d.file_id, sb->file_id, 16);
	memcpy(d.host_id, sb->host_id, 16);
	d.file_bytes = htole64(sb->geom.file_bytes);
	d.region_bytes = htole64(sb->geom.region_bytes);
	d.data_off = htole64(sb->geom.data_off);
	d.nr_regions = htole32(sb->geom.nr_regions);
	d.unit = htole32(SSD_UNIT);
	d.io_align = htole32(sb->io_align);
	d.zone_entries = htole32(sb->geom.zone_entries);
	d.dev = htole64(sb->dev);
	d.ino = htole64(sb->ino);
	d.format_time = htole64(sb->format_time);
	d.open_time = htole64(sb->open_time);
	d.crc = htole32(crc32c(0, &d, offsetof(struct ssd_super_disk, crc)));
	memcpy(buf, &d, sizeof(d));
}

int ssd_super_decode(const void *buf, struct ssd_super *ret)
{
	struct ssd_super_disk d;
	struct ssd_super sb;
	struct ssd_geom g;

	memcpy(&d, buf, sizeof(d));
	if (le32toh(d.magic) != SSD_SUPER_MAGIC || le16toh(d.size) != sizeof(d))
		return -EBADMSG;
	if (le32toh(d.crc) != crc32c(0, &d, offsetof(struct ssd_super_disk, crc)))
		return -EBADMSG;
	if (le16toh(d.version) != SSD_FORMAT_VERSION)
		return -EPROTO;
	if (le32toh(d.unit) != SSD_UNIT)
		return -ERANGE;
	memset(&sb, 0, sizeof(sb));
	sb.generation = le32toh(d.generation);
	sb.flags = le32toh(d.flags);
	memcpy(sb.file_id, d.file_id, 16);
	memcpy(sb.host_id, d.host_id, 16);
	sb.geom.file_bytes = le64toh(d.file_bytes);
	sb.geom.region_bytes = le64toh(d.region_bytes);
	sb.geom.data_off = le64toh(d.data_off);
	sb.geom.nr_regions = le32toh(d.nr_regions);
	sb.io_align = le32toh(d.io_align);
	sb.dev = le64toh(d.dev);
	sb.ino = le64toh(d.ino);
	sb.format_time = le64toh(d.format_time);
	sb.open_time = le64toh(d.open_time);
	/* The geometry must be one ssd_geom_init() could have made. */
	if (ssd_geom_init(sb.geom.file_bytes, sb.geom.region_bytes, &g) < 0 ||
	    g.data_off != sb.geom.data_off || g.nr_regions != sb.geom.nr_regions ||
	    g.zone_entries != le32toh(d.zone_entries))
		return -ERANGE;
	sb.geom = g;
	*ret = sb;
	return 0;
}

int ssd_super_pick(const void *a, const void *b, struct ssd_super *ret)
{
	struct ssd_super sa, sbk;
	bool va = ssd_super_decode(a, &sa) == 0;
	bool vb = ssd_super_decode(b, &sbk) == 0;

	if (va && vb && memcmp(sa.file_id, sbk.file_id, 16) != 0)
		vb = false; /* a copy of another format: copy A is written first */
	if (!va && !vb)
		return -EBADMSG;
	if (va && (!vb || !ssd_seq_after(sbk.generation, sa.generation))) {
		*ret = sa;
		return 0;
	}
	*ret = sbk;
	return 1;
}

/* ---- block header ----------------------------------------------------- */

void ssd_block_hdr_encode(const struct ssd_block_hdr *h, void *buf)
{
	struct ssd_block_hdr_disk d;
	size_t ns_len = h->ns_len > SSD_NS_MAX ? SSD_NS_MAX : h->ns_len;

	memset(&d, 0, sizeof(d));
	d.magic = htole32(SSD_BLOCK_MAGIC);
	d.version = htole16(SSD_FORMAT_VERSION);
	d.size = htole16(sizeof(d));
	memcpy(d.file_id, h->file_id, 16);
	d.region = htole32(h->region);
	d.region_seq = htole32(h->region_seq);
	d.block_seq = htole32(h->block_seq);
	d.offset = htole64(h->offset);
	d.payload_len = htole32(h->payload_len);
	d.payload_crc = htole32(h->payload_crc);
	memcpy(d.key, h->key, SSD_KEY_SIZE);
	d.shard = htole32(h->shard);
	d.ns_len = htole16((uint16_t)ns_len);
	memcpy(d.ns, h->ns, ns_len);
	d.ns_digest = htole32(ssd_ns_digest(d.ns, ns_len));
	d.crc = htole32(crc32c(0, &d, offsetof(struct ssd_block_hdr_disk, crc)));
	memcpy(buf, &d, sizeof(d));
}

int ssd_block_hdr_decode(const void *buf, const uint8_t file_id[16], const struct ssd_geom *g,
			 uint32_t expect_region, uint32_t expect_entry, struct ssd_block_hdr *ret)
{
	struct ssd_block_hdr_disk d;
	struct ssd_block_hdr h;
	uint64_t rstart, rend;

	memcpy(&d, buf, sizeof(d));
	if (le32toh(d.magic) != SSD_BLOCK_MAGIC || le16toh(d.size) != sizeof(d))
		return -EBADMSG;
	if (le32toh(d.crc) != crc32c(0, &d, offsetof(struct ssd_block_hdr_disk, crc)))
		return -EBADMSG;
	if (le16toh(d.version) != SSD_FORMAT_VERSION)
		return -EPROTO;
	if (memcmp(d.file_id, file_id, 16) != 0)
		return -EBADMSG; /* an earlier format of this file, or another file */
	memset(&h, 0, sizeof(h));
	memcpy(h.file_id, d.file_id, 16);
	h.region = le32toh(d.region);
	h.region_seq = le32toh(d.region_seq);
	h.block_seq = le32toh(d.block_seq);
	h.offset = le64toh(d.offset);
	h.payload_len = le32toh(d.payload_len);
	h.payload_crc = le32toh(d.payload_crc);
	memcpy(h.key, d.key, SSD_KEY_SIZE);
	h.shard = le32toh(d.shard);
	h.ns_len = le16toh(d.ns_len);
	if (h.region >= g->nr_regions || h.ns_len == 0 || h.ns_len > SSD_NS_MAX)
		return -ERANGE;
	if (le32toh(d.ns_digest) != ssd_ns_digest(d.ns, h.ns_len))
		return -EBADMSG;
	rstart = ssd_region_off(g, h.region);
	rend = rstart + g->payload_bytes;
	/* The payload inside its region's payload area, the entry inside the zone. */
	if (h.offset % SSD_UNIT || h.offset < rstart || h.payload_len == 0 ||
	    h.payload_len > g->payload_bytes || h.offset + ssd_block_bytes(h.payload_len) > rend ||
	    h.block_seq >= g->zone_entries)
		return -ERANGE;
	if ((expect_region != UINT32_MAX && h.region != expect_region) ||
	    (expect_entry != UINT32_MAX && h.block_seq != expect_entry))
		return -ERANGE;
	memcpy(h.ns, d.ns, h.ns_len);
	*ret = h;
	return 0;
}

/* ---- region trailer --------------------------------------------------- */

void ssd_trailer_encode(const struct ssd_trailer *t, void *buf)
{
	struct ssd_trailer_disk d;

	memset(&d, 0, sizeof(d));
	d.magic = htole32(SSD_TRAILER_MAGIC);
	d.version = htole16(SSD_FORMAT_VERSION);
	d.size = htole16(sizeof(d));
	memcpy(d.file_id, t->file_id, 16);
	d.region = htole32(t->region);
	d.region_seq = htole32(t->region_seq);
	d.nr_blocks = htole32(t->nr_blocks);
	d.summary_crc = htole32(t->summary_crc);
	d.summary_off = htole64(t->summary_off);
	d.used_bytes = htole64(t->used_bytes);
	d.crc = htole32(crc32c(0, &d, offsetof(struct ssd_trailer_disk, crc)));
	memcpy(buf, &d, sizeof(d));
}

int ssd_trailer_decode(const void *buf, const uint8_t file_id[16], const struct ssd_geom *g,
		       uint32_t expect_region, struct ssd_trailer *ret)
{
	struct ssd_trailer_disk d;
	struct ssd_trailer t;

	memcpy(&d, buf, sizeof(d));
	if (le32toh(d.magic) != SSD_TRAILER_MAGIC || le16toh(d.size) != sizeof(d))
		return -EBADMSG;
	if (le32toh(d.crc) != crc32c(0, &d, offsetof(struct ssd_trailer_disk, crc)))
		return -EBADMSG;
	if (le16toh(d.version) != SSD_FORMAT_VERSION)
		return -EPROTO;
	if (memcmp(d.file_id, file_id, 16) != 0)
		return -EBADMSG;
	memset(&t, 0, sizeof(t));
	memcpy(t.file_id, d.file_id, 16);
	t.region = le32toh(d.region);
	t.region_seq = le32toh(d.region_seq);
	t.nr_blocks = le32toh(d.nr_blocks);
	t.summary_crc = le32toh(d.summary_crc);
	t.summary_off = le64toh(d.summary_off);
	t.used_bytes = le64toh(d.used_bytes);
	if (t.region != expect_region || t.region >= g->nr_regions)
		return -ERANGE;
	/* Payloads, then the zone, then this unit: in that order, in the region. */
	if (t.summary_off != g->payload_bytes || t.used_bytes % SSD_UNIT ||
	    t.used_bytes > g->payload_bytes || t.nr_blocks > g->zone_entries)
		return -ERANGE;
	*ret = t;
	return 0;
}
