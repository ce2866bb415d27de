/* SPDX-License-Identifier: MIT */
/*
 * Regions: the sealed memfd that holds a header page and the parts (rings
 * and byte areas) it describes.
 *
 * Trust model.  The creator lays the region out and seals it against
 * shrinking and growing, so that neither side can later make a page of
 * the mapping disappear (which would turn an ordinary load into SIGBUS).
 * The attacher trusts nothing it receives: it checks the seals itself,
 * copies the header into private memory and validates the copy against
 * the size the kernel reports for the fd.  From then on the shared header
 * is never read again by either side; every offset, size and ring geometry
 * comes from the private copy in struct shmq_region.  A peer that scribbles
 * over the header after that point changes nothing for us.
 *
 * Ring views (shmq_ring_init) are made here too, because they are lookups
 * into that private copy; the index protocol itself is in ring.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shmq/shmq.h>

#include "common/bits.h"

#if !HAVE_DECL_MEMFD_CREATE || !HAVE_DECL_F_ADD_SEALS
#error "libshmq needs memfd_create() and file seals (Linux >= 3.17, glibc >= 2.27)"
#endif

/* The ABI says little-endian; this build reads the words natively. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shmq ABI is little-endian");

/* What attach insists on: no page may ever vanish under the mapping. */
#define SHMQ_REQUIRED_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

struct shmq_region {
	uint8_t *base; /* MAP_SHARED mapping of the whole memfd */
	uint64_t size; /* validated: hdr.region_size == the fd's size */
	int fd;	       /* ours: created, or dup'ed from the peer's */
	/* Private copy, validated; the shared header is never read again. */
	struct shmq_region_hdr hdr;
};

/* Round @x up to SHMQ_PART_ALIGN; -EINVAL if that overflows. */
static int align_part(uint64_t x, uint64_t *ret)
{
	uint64_t r;

	if (__builtin_add_overflow(x, (uint64_t)SHMQ_PART_ALIGN - 1, &r))
		return -EINVAL;
	*ret = r & ~((uint64_t)SHMQ_PART_ALIGN - 1);
	return 0;
}

/*
 * Bytes of a ring part: control block and padding up to @entries_offset,
 * the entries, rounded up to a whole part.  The one formula create lays
 * out with and attach checks against.
 */
static int ring_part_size(uint32_t entry_size, uint32_t capacity, uint64_t entries_offset,
			  uint64_t *ret)
{
	uint64_t bytes, end;

	if (__builtin_mul_overflow((uint64_t)entry_size, (uint64_t)capacity, &bytes) ||
	    __builtin_add_overflow(bytes, entries_offset, &end))
		return -EINVAL;
	return align_part(end, ret);
}

static bool ring_geometry_ok(uint32_t entry_size, uint32_t capacity)
{
	return is_pow2(entry_size) && entry_size >= SHMQ_ENTRY_SIZE_MIN &&
	       entry_size <= SHMQ_ENTRY_SIZE_MAX && is_pow2(capacity) &&
	       capacity >= SHMQ_CAPACITY_MIN && capacity <= SHMQ_CAPACITY_MAX;
}

/*
 * Check one part description (from a private copy) on its own: kind,
 * alignment, bounds inside a region of @region_size bytes, and ring
 * geometry.  Overlap and id uniqueness need all parts: see parts_check().
 */
static int part_check(const struct shmq_part *p, uint64_t region_size)
{
	uint64_t end, want;

	if (p->offset % SHMQ_PART_ALIGN || p->size % SHMQ_PART_ALIGN || p->size == 0)
		return -EINVAL;
	/* The header owns the first page; no part may start inside it. */
	if (p->offset < SHMQ_PART_ALIGN)
		return -EINVAL;
	if (__builtin_add_overflow(p->offset, p->size, &end) || end > region_size)
		return -EINVAL;

	switch (p->kind) {
	case SHMQ_PART_RING:
		if (!ring_geometry_ok(p->entry_size, p->capacity))
			return -EINVAL;
		/*
		 * The control block must fit before the entries, and entries
		 * start on a line so no entry shares a line with the indices.
		 */
		if (p->entries_offset < SHMQ_RING_ENTRIES_OFFSET || p->entries_offset % SHMQ_LINE)
			return -EINVAL;
		if (ring_part_size(p->entry_size, p->capacity, p->entries_offset, &want) < 0 ||
		    want != p->size)
			return -EINVAL;
		return 0;
	case SHMQ_PART_AREA:
		if (p->entry_size || p->capacity || p->entries_offset)
			return -EINVAL;
		return 0;
	default:
		return -EINVAL;
	}
}

/* Every part valid, ids unique, no two parts overlapping. */
static int parts_check(const struct shmq_region_hdr *hdr)
{
	for (uint32_t i = 0; i < hdr->nr_parts; i++) {
		const struct shmq_part *a = &hdr->parts[i];
		int r = part_check(a, hdr->region_size);

		if (r < 0)
			return r;
		for (uint32_t j = 0; j < i; j++) {
			const struct shmq_part *b = &hdr->parts[j];

			if (a->id == b->id)
				return -EINVAL;
			/* Both ends are overflow-checked by part_check(). */
			if (a->offset < b->offset + b->size && b->offset < a->offset + a->size)
				return -EINVAL;
		}
	}
	return 0;
}

/*
 * Validate the private copy of a header against what we know for sure:
 * the fd's real size and the application magic we expect.  The errno
 * tells the peer's kind of wrong: not ours at all, a different ABI, a size
 * lie, or an inconsistent description.
 */
static int hdr_check(const struct shmq_region_hdr *hdr, uint32_t app_magic, uint64_t fd_size)
{
	if (hdr->magic != SHMQ_MAGIC || hdr->app_magic != app_magic)
		return -EBADMSG;
	if (hdr->abi_major != SHMQ_ABI_MAJOR)
		return -EPROTONOSUPPORT;
	if (hdr->hdr_size != sizeof(struct shmq_region_hdr))
		return -EINVAL;
	if (hdr->region_size != fd_size || hdr->region_size > SHMQ_REGION_SIZE_MAX)
		return -EMSGSIZE;
	if (hdr->nr_parts == 0 || hdr->nr_parts > SHMQ_MAX_PARTS)
		return -EINVAL;
	return parts_check(hdr);
}

/*
 * Lay out @parts after the header page into @hdr.  Specs are checked
 * strictly: fields that do not apply to a kind must be zero, so that a
 * later meaning for them cannot be mistaken for today's.
 */
static int layout(const struct shmq_part_spec *parts, unsigned nr_parts, uint32_t app_magic,
		  uint32_t app_version, struct shmq_region_hdr *hdr)
{
	uint64_t off = SHMQ_PART_ALIGN;

	if (nr_parts == 0 || nr_parts > SHMQ_MAX_PARTS || !parts)
		return -EINVAL;

	memset(hdr, 0, sizeof(*hdr));
	hdr->magic = SHMQ_MAGIC;
	hdr->abi_major = SHMQ_ABI_MAJOR;
	hdr->abi_minor = SHMQ_ABI_MINOR;
	hdr->hdr_size = sizeof(*hdr);
	hdr->nr_parts = nr_parts;
	hdr->app_magic = app_magic;
	hdr->app_version = app_version;

	for (unsigned i = 0; i < nr_parts; i++) {
		const struct shmq_part_spec *s = &parts[i];
		struct shmq_part *p = &hdr->parts[i];
		uint64_t size;

		switch (s->kind) {
		case SHMQ_PART_RING:
			if (!ring_geometry_ok(s->entry_size, s->capacity) || s->size)
				return -EINVAL;
			if (ring_part_size(s->entry_size, s->capacity, SHMQ_RING_ENTRIES_OFFSET,
					   &size) < 0)
				return -EINVAL;
			p->entry_size = s->entry_size;
			p->capacity = s->capacity;
			p->entries_offset = SHMQ_RING_ENTRIES_OFFSET;
			break;
		case SHMQ_PART_AREA:
			if (s->entry_size || s->capacity || s->size == 0)
				return -EINVAL;
			if (align_part(s->size, &size) < 0)
				return -EINVAL;
			break;
		default:
			return -EINVAL;
		}
		p->kind = s->kind;
		p->id = s->id;
		p->offset = off;
		p->size = size;
		if (__builtin_add_overflow(off, size, &off) || off > SHMQ_REGION_SIZE_MAX)
			return -EINVAL;
	}
	hdr->region_size = off;

	/* Same rules as attach (ids, overlaps): create never makes what attach refuses. */
	return parts_check(hdr);
}

int shmq_region_create(const char *name, uint32_t app_magic, uint32_t app_version,
		       const struct shmq_part_spec *parts, unsigned nr_parts,
		       struct shmq_region **ret_region)
{
	struct shmq_region *region;
	int r;

	if (!ret_region)
		return -EINVAL;

	region = calloc(1, sizeof(*region));
	if (!region)
		return -ENOMEM;
	region->fd = -1;
	region->base = MAP_FAILED;

	r = layout(parts, nr_parts, app_magic, app_version, &region->hdr);
	if (r < 0)
		goto fail;
	region->size = region->hdr.region_size;

	region->fd = memfd_create(name ? name : "shmq", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (region->fd < 0)
		goto fail_errno;
	if (ftruncate(region->fd, (off_t)region->size) < 0)
		goto fail_errno;
	region->base = mmap(NULL, region->size, PROT_READ | PROT_WRITE, MAP_SHARED, region->fd, 0);
	if (region->base == MAP_FAILED)
		goto fail_errno;

	/*
	 * The fresh memfd reads as zeros, so every ring starts with head ==
	 * tail == 0, no NEED_WAKEUP and a zero wake word.  No ordering is
	 * needed for the header: the peer can only see it after we pass the
	 * fd, and that passing (sendmsg/fork) is a full barrier.
	 */
	memcpy(region->base, &region->hdr, sizeof(region->hdr));

	/*
	 * F_SEAL_SEAL too, so nobody (us included) can later add
	 * F_SEAL_WRITE and break the peer's writable mapping.
	 */
	if (fcntl(region->fd, F_ADD_SEALS, SHMQ_REQUIRED_SEALS | F_SEAL_SEAL) < 0)
		goto fail_errno;

	*ret_region = region;
	return 0;

fail_errno:
	r = -errno;
fail:
	shmq_region_destroy(region);
	return r;
}

int shmq_region_attach(int fd, uint32_t app_magic, struct shmq_region **ret_region)
{
	struct shmq_region *region;
	struct stat st;
	int seals, r;

	if (fd < 0)
		return -EBADF;
	if (!ret_region)
		return -EINVAL;

	region = calloc(1, sizeof(*region));
	if (!region)
		return -ENOMEM;
	region->base = MAP_FAILED;

	/* Our own descriptor: the caller may close theirs at once. */
	region->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (region->fd < 0)
		goto fail_errno;
	if (fstat(region->fd, &st) < 0)
		goto fail_errno;
	if (!S_ISREG(st.st_mode)) {
		r = -EBADF;
		goto fail;
	}

	/*
	 * Seals first, size second: once SHRINK and GROW are set they stay
	 * set, so the size we read below is the size for ever and no access
	 * within it can fault.  A file that cannot carry seals (EINVAL) is as
	 * unsealed as one that carries none.
	 */
	seals = fcntl(region->fd, F_GET_SEALS);
	if (seals < 0 || (seals & SHMQ_REQUIRED_SEALS) != SHMQ_REQUIRED_SEALS) {
		r = -EPERM;
		goto fail;
	}
	if (st.st_size < SHMQ_PART_ALIGN || (uint64_t)st.st_size > SHMQ_REGION_SIZE_MAX) {
		r = -EMSGSIZE;
		goto fail;
	}
	region->size = (uint64_t)st.st_size;

	region->base = mmap(NULL, region->size, PROT_READ | PROT_WRITE, MAP_SHARED, region->fd, 0);
	if (region->base == MAP_FAILED)
		goto fail_errno;

	/*
	 * Copy once, then validate and use only the copy: the peer may be
	 * rewriting the shared header while we look at it (no check-then-use).
	 */
	memcpy(&region->hdr, region->base, sizeof(region->hdr));
	r = hdr_check(&region->hdr, app_magic, region->size);
	if (r < 0)
		goto fail;
	/* Slots past nr_parts were not validated: make sure none is ever used. */
	memset(&region->hdr.parts[region->hdr.nr_parts], 0,
	       (SHMQ_MAX_PARTS - region->hdr.nr_parts) * sizeof(struct shmq_part));

	*ret_region = region;
	return 0;

fail_errno:
	r = -errno;
fail:
	shmq_region_destroy(region);
	return r;
}

void shmq_region_destroy(struct shmq_region *region)
{
	if (!region)
		return;
	if (region->base != MAP_FAILED)
		munmap(region->base, region->size);
	if (region->fd >= 0)
		close(region->fd);
	free(region);
}

int shmq_region_fd(const struct shmq_region *region)
{
	return region ? region->fd : -EINVAL;
}

uint64_t shmq_region_size(const struct shmq_region *region)
{
	return region ? region->size : 0;
}

uint32_t shmq_region_app_version(const struct shmq_region *region)
{
	return region ? region->hdr.app_version : 0;
}

static const struct shmq_part *find_part(const struct shmq_region *region, uint32_t id,
					 uint32_t kind)
{
	for (uint32_t i = 0; i < region->hdr.nr_parts; i++) {
		const struct shmq_part *p = &region->hdr.parts[i];

		if (p->id == id)
			return p->kind == kind ? p : NULL;
	}
	return NULL;
}

int shmq_region_area(const struct shmq_region *region, uint32_t id, void **ret_base,
		     uint64_t *ret_size)
{
	const struct shmq_part *p;

	if (!region)
		return -EINVAL;
	p = find_part(region, id, SHMQ_PART_AREA);
	if (!p)
		return -ENOENT;
	if (ret_base)
		*ret_base = region->base + p->offset;
	if (ret_size)
		*ret_size = p->size;
	return 0;
}

int shmq_ring_init(struct shmq_ring *ring, const struct shmq_region *region, uint32_t id,
		   uint32_t role)
{
	struct shmq_ring_ctrl *ctrl;
	const struct shmq_part *p;
	struct shmq_ring v = { 0 };
	uint32_t head, tail;

	if (!ring || !region || (role != SHMQ_PRODUCER && role != SHMQ_CONSUMER))
		return -EINVAL;
	p = find_part(region, id, SHMQ_PART_RING);
	if (!p)
		return -ENOENT;

	/* Via void *: the offset was validated page aligned at attach. */
	ctrl = (void *)(region->base + p->offset);
	v.p_tail = &ctrl->prod.tail;
	v.p_wake = &ctrl->prod.wake;
	v.p_head = &ctrl->cons.head;
	v.p_flags = &ctrl->wakeup.flags;
	v.entries = region->base + p->offset + p->entries_offset;
	v.capacity = p->capacity;
	v.mask = p->capacity - 1;
	v.entry_shift = (uint32_t)__builtin_ctz(p->entry_size);
	v.role = role;

	/*
	 * Start from the indices in shared memory (a view may be re-made,
	 * e.g. after the other side restarted), but validate them like any
	 * later read.  Load-acquire of head pairs with the store-release in
	 * shmq_cons_release(), so a producer never refills a slot the
	 * consumer is still reading; load-acquire of tail pairs with the
	 * store-release in shmq_prod_commit(), so a consumer sees the
	 * contents of every entry below it.
	 */
	head = __atomic_load_n(v.p_head, __ATOMIC_ACQUIRE);
	tail = __atomic_load_n(v.p_tail, __ATOMIC_ACQUIRE);
	if (tail - head > v.capacity)
		return -EPROTO;
	if (role == SHMQ_PRODUCER) {
		v.local = tail;
		v.cached = head;
	} else {
		v.local = head;
		v.cached = tail;
	}

	*ring = v;
	return 0;
}
