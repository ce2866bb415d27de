/* SPDX-License-Identifier: MIT */
/*
 * Regions: create/attach round trip, spec validation, and attach refusing
 * every kind of bad fd or forged header with its precise errno.
 *
 * Forged headers are built by hand: take the header of a valid region,
 * change one field, write it into a fresh memfd of a chosen size and
 * seals, and attach.  Each test changes one thing only, so each errno is
 * pinned to one check.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shmq/shmq.h>

#include "unit.h"

#define APP_MAGIC   0x4b565354u /* "TSVK" */
#define APP_VERSION 7u

/* Two rings and an area: ring 1 is 64 x 64 B (two pages), ring 2 8 x 32 B. */
static const struct shmq_part_spec good_spec[] = {
	{ .kind = SHMQ_PART_RING, .id = 1, .entry_size = 64, .capacity = 64 },
	{ .kind = SHMQ_PART_RING, .id = 2, .entry_size = 32, .capacity = 8 },
	{ .kind = SHMQ_PART_AREA, .id = 3, .size = 5000 },
};
#define NR_GOOD (sizeof(good_spec) / sizeof(good_spec[0]))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* good_spec[0], as a constant. */
/* clang-format off */
#define PART_RING1 { .kind = SHMQ_PART_RING, .id = 1, .entry_size = 64, .capacity = 64 }
/* clang-format on */

static struct shmq_region *create_good(void)
{
	struct shmq_region *region = NULL;

	ck_assert_int_eq(
		shmq_region_create("test", APP_MAGIC, APP_VERSION, good_spec, NR_GOOD, &region), 0);
	ck_assert_ptr_nonnull(region);
	return region;
}

/* The header a valid create writes, read back through the fd. */
static void good_hdr(struct shmq_region_hdr *hdr)
{
	struct shmq_region *region = create_good();

	ck_assert_int_eq(pread(shmq_region_fd(region), hdr, sizeof(*hdr), 0),
			 (ssize_t)sizeof(*hdr));
	shmq_region_destroy(region);
}

static int memfd_with(const struct shmq_region_hdr *hdr, uint64_t file_size, int seals)
{
	int fd = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)file_size), 0);
	if (hdr && file_size >= sizeof(*hdr))
		ck_assert_int_eq(pwrite(fd, hdr, sizeof(*hdr), 0), (ssize_t)sizeof(*hdr));
	if (seals)
		ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

/*
 * Attach to @hdr in a memfd of @file_size bytes with @seals; return the
 * errno, checking that a failure leaves *ret_region untouched.
 */
static int attach_forged(const struct shmq_region_hdr *hdr, uint64_t file_size, int seals)
{
	struct shmq_region *sentinel = (struct shmq_region *)&sentinel;
	struct shmq_region *region = sentinel;
	int fd = memfd_with(hdr, file_size, seals);
	int r = shmq_region_attach(fd, APP_MAGIC, &region);

	close(fd);
	if (r < 0)
		ck_assert_ptr_eq(region, sentinel);
	else
		shmq_region_destroy(region);
	return r;
}

#define SEALED (F_SEAL_SHRINK | F_SEAL_GROW)

START_TEST(test_roundtrip)
{
	struct shmq_region *a = create_good(), *b = NULL;
	struct shmq_ring prod, cons;
	void *abase, *bbase;
	uint64_t asize, bsize;
	uint32_t idx;
	int fd, seals;

	/* Seals the creator promises: no shrink, no grow, no more seals. */
	seals = fcntl(shmq_region_fd(a), F_GET_SEALS);
	ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
			 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	ck_assert_int_eq(ftruncate(shmq_region_fd(a), 0), -1);
	ck_assert_int_eq(errno, EPERM);

	/* Attach through a copy of the fd that we then close: attach dup'ed its own. */
	fd = dup(shmq_region_fd(a));
	ck_assert_int_eq(shmq_region_attach(fd, APP_MAGIC, &b), 0);
	close(fd);
	ck_assert_int_ne(shmq_region_fd(b), fd);
	ck_assert_int_ne(shmq_region_fd(b), shmq_region_fd(a));
	ck_assert_int_ne(fcntl(shmq_region_fd(b), F_GETFD) & FD_CLOEXEC, 0);

	ck_assert_uint_eq(shmq_region_size(a), shmq_region_size(b));
	/* Header page + ring 1 (2 pages) + ring 2 (1 page) + area (2 pages). */
	ck_assert_uint_eq(shmq_region_size(a), 6 * SHMQ_PART_ALIGN);
	ck_assert_uint_eq(shmq_region_app_version(b), APP_VERSION);

	ck_assert_int_eq(shmq_region_area(a, 3, &abase, &asize), 0);
	ck_assert_int_eq(shmq_region_area(b, 3, &bbase, &bsize), 0);
	ck_assert_uint_eq(asize, 2 * SHMQ_PART_ALIGN);
	ck_assert_uint_eq(bsize, asize);
	memcpy(abase, "hello", 6);
	ck_assert_str_eq(bbase, "hello");

	/* Producer on the creator's side, consumer on the attacher's. */
	ck_assert_int_eq(shmq_ring_init(&prod, a, 1, SHMQ_PRODUCER), 0);
	ck_assert_int_eq(shmq_ring_init(&cons, b, 1, SHMQ_CONSUMER), 0);
	ck_assert_uint_eq(shmq_ring_capacity(&cons), 64);
	ck_assert_int_eq(shmq_prod_reserve(&prod, 1, &idx), 1);
	memcpy(shmq_ring_entry(&prod, idx), "entry", 6);
	ck_assert_int_eq(shmq_prod_commit(&prod, 0), 1);

	/* The creator may go away: the attached mapping stays valid. */
	shmq_region_destroy(a);
	ck_assert_int_eq(shmq_cons_peek(&cons, 8, &idx), 1);
	ck_assert_str_eq(shmq_ring_entry(&cons, idx), "entry");
	shmq_cons_release(&cons, 1);
	shmq_region_destroy(b);
}
END_TEST

START_TEST(test_lookup_errors)
{
	struct shmq_region *a = create_good();
	struct shmq_ring sentinel, ring;
	void *base = (void *)&base;
	uint64_t size = 42;

	ck_assert_int_eq(shmq_region_area(a, 1, &base, &size), -ENOENT); /* a ring */
	ck_assert_int_eq(shmq_region_area(a, 99, &base, &size), -ENOENT);
	ck_assert_ptr_eq(base, (void *)&base);
	ck_assert_uint_eq(size, 42);

	memset(&sentinel, 0xa5, sizeof(sentinel));
	ring = sentinel;
	ck_assert_int_eq(shmq_ring_init(&ring, a, 3, SHMQ_CONSUMER), -ENOENT); /* an area */
	ck_assert_int_eq(shmq_ring_init(&ring, a, 99, SHMQ_CONSUMER), -ENOENT);
	ck_assert_int_eq(shmq_ring_init(&ring, a, 1, 0), -EINVAL);
	ck_assert_int_eq(shmq_ring_init(&ring, a, 1, SHMQ_PRODUCER | SHMQ_CONSUMER), -EINVAL);
	ck_assert_mem_eq(&ring, &sentinel, sizeof(ring));

	shmq_region_destroy(a);
}
END_TEST

START_TEST(test_null)
{
	shmq_region_destroy(NULL);
	ck_assert_int_eq(shmq_region_fd(NULL), -EINVAL);
	ck_assert_uint_eq(shmq_region_size(NULL), 0);
	ck_assert_int_eq(shmq_region_area(NULL, 1, NULL, NULL), -EINVAL);
	ck_assert_int_eq(shmq_region_create("x", 1, 1, good_spec, NR_GOOD, NULL), -EINVAL);
	ck_assert_int_eq(shmq_region_attach(0, APP_MAGIC, NULL), -EINVAL);
	ck_assert_str_eq(shmq_version(), SHMQ_VERSION);
}
END_TEST

static int create_one(const struct shmq_part_spec *spec, unsigned nr)
{
	struct shmq_region *sentinel = (struct shmq_region *)&sentinel;
	struct shmq_region *region = sentinel;
	int r = shmq_region_create("spec", APP_MAGIC, 0, spec, nr, &region);

	if (r < 0)
		ck_assert_ptr_eq(region, sentinel);
	else
		shmq_region_destroy(region);
	return r;
}

static int create_ring(uint32_t entry_size, uint32_t capacity)
{
	struct shmq_part_spec s = {
		.kind = SHMQ_PART_RING, .id = 1, .entry_size = entry_size, .capacity = capacity
	};

	return create_one(&s, 1);
}

START_TEST(test_create_invalid)
{
	/* One ring of 64-byte entries... */
	static const struct {
		const char *what;
		uint32_t entry_size, capacity;
		int want;
	} rings[] = {
		/* The extremes that are allowed. */
		{ "smallest", SHMQ_ENTRY_SIZE_MIN, SHMQ_CAPACITY_MIN, 0 },
		{ "largest entries", SHMQ_ENTRY_SIZE_MAX, 4, 0 },
		{ "entry size not 2^k", 48, 64, -EINVAL },
		{ "entry size too small", 4, 64, -EINVAL },
		{ "entry size too large", 8192, 64, -EINVAL },
		{ "entry size 0", 0, 64, -EINVAL },
		{ "capacity too small", 64, 1, -EINVAL },
		{ "capacity not 2^k", 64, 100, -EINVAL },
		{ "capacity too large", 64, SHMQ_CAPACITY_MAX << 1, -EINVAL },
		{ "capacity 0", 64, 0, -EINVAL },
	};
	/* ... and specs of one or two parts. */
	static const struct {
		const char *what;
		struct shmq_part_spec spec[2];
		unsigned nr;
	} bad[] = {
		{ "no parts", { PART_RING1 }, 0 },
		/* Duplicate ids, even across kinds. */
		{ "duplicate ids",
		  { PART_RING1, { .kind = SHMQ_PART_AREA, .id = 1, .size = 5000 } },
		  2 },
		/* Unknown kind; fields that do not apply to a kind must be zero. */
		{ "kind 3", { { .kind = 3, .id = 1, .size = 4096 } }, 1 },
		{ "kind 0", { { .kind = 0, .id = 1, .size = 4096 } }, 1 },
		{ "area of 0 bytes", { { .kind = SHMQ_PART_AREA, .id = 1, .size = 0 } }, 1 },
		{ "area with a capacity",
		  { { .kind = SHMQ_PART_AREA, .id = 1, .size = 64, .capacity = 2 } },
		  1 },
		{ "ring with a size",
		  { { .kind = SHMQ_PART_RING,
		      .id = 1,
		      .entry_size = 64,
		      .capacity = 64,
		      .size = 4096 } },
		  1 },
		/* Sizes past the region limit, and sizes whose rounding overflows. */
		{ "area of the region limit",
		  { { .kind = SHMQ_PART_AREA, .id = 1, .size = SHMQ_REGION_SIZE_MAX } },
		  1 },
		{ "area of 2^64 - 1",
		  { { .kind = SHMQ_PART_AREA, .id = 1, .size = UINT64_MAX } },
		  1 },
		{ "areas that wrap",
		  { { .kind = SHMQ_PART_AREA, .id = 1, .size = UINT64_MAX - 4096 * 2 },
		    { .kind = SHMQ_PART_AREA, .id = 2, .size = 8192 } },
		  2 },
		{ "areas of half the limit each",
		  { { .kind = SHMQ_PART_AREA, .id = 1, .size = SHMQ_REGION_SIZE_MAX / 2 },
		    { .kind = SHMQ_PART_AREA, .id = 2, .size = SHMQ_REGION_SIZE_MAX / 2 } },
		  2 },
	};
	struct shmq_part_spec s[SHMQ_MAX_PARTS + 1];

	for (unsigned i = 0; i < ARRAY_SIZE(rings); i++)
		ck_assert_msg(create_ring(rings[i].entry_size, rings[i].capacity) == rings[i].want,
			      "ring: %s", rings[i].what);
	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++)
		ck_assert_msg(create_one(bad[i].spec, bad[i].nr) == -EINVAL, "spec: %s",
			      bad[i].what);
	ck_assert_int_eq(create_one(NULL, 1), -EINVAL);
	for (unsigned i = 0; i < SHMQ_MAX_PARTS + 1; i++)
		s[i] = (struct shmq_part_spec){ .kind = SHMQ_PART_AREA, .id = i, .size = 1 };
	ck_assert_int_eq(create_one(s, SHMQ_MAX_PARTS), 0);
	ck_assert_int_eq(create_one(s, SHMQ_MAX_PARTS + 1), -EINVAL);
}
END_TEST

/*
 * A forged header: the good one with up to two fields changed, in a memfd
 * of the forged header's region_size (or of @file_size bytes, or of the
 * good one's plus @file_add), with @seals (SEALED unless set).
 */
enum edit_op { EDIT_SET = 1, EDIT_ADD, EDIT_XOR, EDIT_COPY };

struct hdr_edit {
	enum edit_op op; /* 0: none */
	size_t off, size;
	uint64_t value; /* SET: the value; ADD: added (mod 2^bits); XOR: mask */
	size_t from;	/* COPY: the good header's field at this offset, plus value */
};

/* clang-format off */
#define HDR_FIELD(f) offsetof(struct shmq_region_hdr, f), sizeof(((struct shmq_region_hdr *)0)->f)
#define SET(f, v) { EDIT_SET, HDR_FIELD(f), (uint64_t)(v), 0 }
#define ADD(f, v) { EDIT_ADD, HDR_FIELD(f), (uint64_t)(v), 0 }
#define XOR(f, v) { EDIT_XOR, HDR_FIELD(f), (uint64_t)(v), 0 }
#define COPY(f, g, v) \
	{ EDIT_COPY, HDR_FIELD(f), (uint64_t)(v), offsetof(struct shmq_region_hdr, g) }
/* clang-format on */

struct forge_case {
	const char *what;
	struct hdr_edit edit[2];
	enum { FILE_FORGED, FILE_GOOD, FILE_ABS } file;
	int64_t file_size; /* FILE_GOOD: added; FILE_ABS: the size */
	int seals;	   /* 0: SEALED */
	bool no_hdr;	   /* a file of zeros, no header written */
	int want;
};

#define NO_SEALS (-1)

/* A field of @h, as an integer (header fields are little-endian, as is every host here). */
static uint64_t hdr_get(const struct shmq_region_hdr *h, size_t off, size_t size)
{
	uint64_t v = 0;

	memcpy(&v, (const uint8_t *)h + off, size);
	return v;
}

static void hdr_edit(struct shmq_region_hdr *h, const struct shmq_region_hdr *good,
		     const struct hdr_edit *e)
{
	uint64_t v = hdr_get(h, e->off, e->size);

	switch (e->op) {
	case EDIT_SET:
		v = e->value;
		break;
	case EDIT_ADD:
		v += e->value;
		break;
	case EDIT_XOR:
		v ^= e->value;
		break;
	case EDIT_COPY:
		v = hdr_get(good, e->from, e->size) + e->value;
		break;
	default:
		return;
	}
	memcpy((uint8_t *)h + e->off, &v, e->size);
}

static void check_forged(const struct forge_case *cases, size_t nr)
{
	struct shmq_region_hdr good, hdr;

	good_hdr(&good);
	for (size_t i = 0; i < nr; i++) {
		const struct forge_case *c = &cases[i];
		int seals = c->seals == NO_SEALS ? 0 : c->seals ? c->seals : SEALED;
		uint64_t size;
		int r;

		hdr = good;
		hdr_edit(&hdr, &good, &c->edit[0]);
		hdr_edit(&hdr, &good, &c->edit[1]);
		if (c->file == FILE_ABS)
			size = (uint64_t)c->file_size;
		else if (c->file == FILE_GOOD)
			size = good.region_size + (uint64_t)c->file_size;
		else
			size = hdr.region_size;
		r = attach_forged(c->no_hdr ? NULL : &hdr, size, seals);
		ck_assert_msg(r == c->want, "%s: %d, want %d", c->what, r, c->want);
	}
}

START_TEST(test_attach_good_forged)
{
	static const struct forge_case cases[] = {
		/* The harness itself: an untouched header attaches. */
		{ "untouched", .want = 0 },
		/* A newer minor (additions only) is accepted. */
		{ "newer minor", { SET(abi_minor, SHMQ_ABI_MINOR + 1) }, .want = 0 },
		/* More seals than required do no harm. */
		{ "newer minor, more seals",
		  { SET(abi_minor, SHMQ_ABI_MINOR + 1) },
		  .seals = SEALED | F_SEAL_SEAL,
		  .want = 0 },
	};

	check_forged(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_attach_bad_fd)
{
	struct shmq_region *region = NULL;
	int fds[2], fd;

	ck_assert_int_eq(shmq_region_attach(-1, APP_MAGIC, &region), -EBADF);
	fd = memfd_create("closed", MFD_CLOEXEC);
	close(fd);
	ck_assert_int_eq(shmq_region_attach(fd, APP_MAGIC, &region), -EBADF);
	ck_assert_int_eq(pipe(fds), 0);
	ck_assert_int_eq(shmq_region_attach(fds[0], APP_MAGIC, &region), -EBADF);
	close(fds[0]);
	close(fds[1]);
	ck_assert_ptr_null(region);
}
END_TEST

START_TEST(test_attach_unsealed)
{
	/* The right bytes, but the peer could still shrink the file under us. */
	static const struct forge_case cases[] = {
		{ "no seals", .seals = NO_SEALS, .want = -EPERM },
		{ "F_SEAL_SHRINK only", .seals = F_SEAL_SHRINK, .want = -EPERM },
		{ "F_SEAL_GROW only", .seals = F_SEAL_GROW, .want = -EPERM },
	};

	check_forged(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_attach_unsealable)
{
	struct shmq_region *region = NULL;
	struct shmq_region_hdr hdr;
	char path[] = "/tmp/test-shmq-region.XXXXXX";
	int fd;

	/* A regular file that cannot carry seals at all (F_GET_SEALS: EINVAL). */
	good_hdr(&hdr);
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	unlink(path);
	ck_assert_int_eq(ftruncate(fd, (off_t)hdr.region_size), 0);
	ck_assert_int_eq(pwrite(fd, &hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
	ck_assert_int_eq(shmq_region_attach(fd, APP_MAGIC, &region), -EPERM);
	close(fd);
}
END_TEST

START_TEST(test_attach_readonly)
{
	struct shmq_region *a = create_good(), *b = NULL;
	char path[64];
	int fd;

	/* Read-only fd: the shared writable mapping is refused by the kernel. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", shmq_region_fd(a));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(shmq_region_attach(fd, APP_MAGIC, &b), -EACCES);
	close(fd);
	shmq_region_destroy(a);
}
END_TEST

START_TEST(test_attach_size_mismatch)
{
	static const struct forge_case cases[] = {
		/* The file is longer, or shorter, than the header says. */
		{ "file a page longer", .file = FILE_GOOD, .file_size = SHMQ_PART_ALIGN,
		  .want = -EMSGSIZE },
		{ "file a page shorter", .file = FILE_GOOD, .file_size = -(int64_t)SHMQ_PART_ALIGN,
		  .want = -EMSGSIZE },
		/* Truncated below one header page, or empty. */
		{ "file of the header only", .file = FILE_ABS,
		  .file_size = sizeof(struct shmq_region_hdr), .want = -EMSGSIZE },
		{ "empty file", .file = FILE_ABS, .file_size = 0, .no_hdr = true,
		  .want = -EMSGSIZE },
	};

	check_forged(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_attach_bad_magic)
{
	static const struct forge_case cases[] = {
		{ "magic ^ 1", { XOR(magic, 1) }, .want = -EBADMSG },
		/* All zeros: the peer never wrote a header. */
		{ "all zeros", .file = FILE_ABS, .file_size = 2 * SHMQ_PART_ALIGN, .no_hdr = true,
		  .want = -EBADMSG },
	};
	struct shmq_region *a = create_good(), *b = NULL;

	check_forged(cases, ARRAY_SIZE(cases));
	/* Somebody else's region, valid in every other respect. */
	ck_assert_int_eq(shmq_region_attach(shmq_region_fd(a), APP_MAGIC + 1, &b), -EBADMSG);
	ck_assert_ptr_null(b);
	shmq_region_destroy(a);
}
END_TEST

START_TEST(test_attach_bad_abi)
{
	static const struct forge_case cases[] = {
		{ "next major", { SET(abi_major, SHMQ_ABI_MAJOR + 1) }, .want = -EPROTONOSUPPORT },
		{ "major 0", { SET(abi_major, 0) }, .want = -EPROTONOSUPPORT },
	};

	check_forged(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_attach_bad_hdr_fields)
{
	static const struct forge_case cases[] = {
		{ "hdr_size + 64",
		  { SET(hdr_size, sizeof(struct shmq_region_hdr) + 64) },
		  .want = -EINVAL },
		{ "no parts", { SET(nr_parts, 0) }, .want = -EINVAL },
		{ "too many parts", { SET(nr_parts, SHMQ_MAX_PARTS + 1) }, .want = -EINVAL },
		/* A part slot past nr_parts is not looked at. */
		{ "two of three parts", { SET(nr_parts, 2) }, .want = 0 },
	};

	check_forged(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_attach_absurd_sizes)
{
	static const struct forge_case cases[] = {
		/* A region size beyond the limit (and beyond the file). */
		{ "region size past the limit",
		  { SET(region_size, SHMQ_REGION_SIZE_MAX * 2) },
		  .file = FILE_GOOD,
		  .want = -EMSGSIZE },
		/* A sparse file that really is that large: refused before mmap. */
		{ "region and file past the limit",
		  { SET(region_size, SHMQ_REGION_SIZE_MAX * 2) },
		  .want = -EMSGSIZE },
		/* A part so large that offset + size wraps around 2^64. */
		{ "part size wraps",
		  { SET(parts[2].size, UINT64_MAX - SHMQ_PART_ALIGN + 1) },
		  .want = -EINVAL },
		/* Absurd capacity and entry size (capacity * entry_size past 2^32). */
		{ "capacity 2^31", { SET(parts[0].capacity, 1u << 31) }, .want = -EINVAL },
		{ "capacity past the maximum",
		  { SET(parts[0].capacity, SHMQ_CAPACITY_MAX * 2) },
		  .want = -EINVAL },
		{ "entry size 2^31", { SET(parts[0].entry_size, 1u << 31) }, .want = -EINVAL },
		{ "entries at 2^64 - a line", /* line aligned */
		  { SET(parts[0].entries_offset, UINT64_MAX - (SHMQ_LINE - 1)) },
		  .want = -EINVAL },
		{ "capacity 0", { SET(parts[0].capacity, 0) }, .want = -EINVAL },
	};

	check_forged(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_attach_overlap)
{
	static const struct forge_case cases[] = {
		/* Ring 2 moved onto the second page of ring 1. */
		{ "ring 2 in ring 1",
		  { COPY(parts[1].offset, parts[0].offset, SHMQ_PART_ALIGN) },
		  .want = -EINVAL },
		/* Two parts at the same place. */
		{ "area on ring 2",
		  { COPY(parts[2].offset, parts[1].offset, 0),
		    COPY(parts[2].size, parts[1].size, 0) },
		  .want = -EINVAL },
		/* A part over the header page. */
		{ "ring 2 on the header", { SET(parts[1].offset, 0) }, .want = -EINVAL },
		/* Duplicate ids (no overlap). */
		{ "duplicate ids", { COPY(parts[2].id, parts[0].id, 0) }, .want = -EINVAL },
	};

	check_forged(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_attach_past_end)
{
	static const struct forge_case cases[] = {
		/* The last part (the area) grown by a page past the end of the file. */
		{ "area a page past the end",
		  { ADD(parts[2].size, SHMQ_PART_ALIGN) },
		  .want = -EINVAL },
		/* Moved to start exactly at the end. */
		{ "area at the end", { COPY(parts[2].offset, region_size, 0) }, .want = -EINVAL },
	};

	check_forged(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_attach_misaligned)
{
	static const struct forge_case cases[] = {
		{ "area a line in", /* still inside the file */
		  { ADD(parts[2].offset, SHMQ_LINE),
		    ADD(parts[2].size, -(int64_t)SHMQ_PART_ALIGN) },
		  .want = -EINVAL },
		{ "area a byte short", { ADD(parts[2].size, -1) }, .want = -EINVAL },
		/* Entries must start on a line, after the control block. */
		{ "entries off a line", { ADD(parts[0].entries_offset, 8) }, .want = -EINVAL },
		{ "entries in the control block",
		  { SET(parts[0].entries_offset, SHMQ_LINE) },
		  .want = -EINVAL },
	};

	check_forged(cases, ARRAY_SIZE(cases));
}
END_TEST

START_TEST(test_attach_bad_ring_geometry)
{
	static const struct forge_case cases[] = {
		/*
		 * Capacity 63 of 64-byte entries still fits the ring's two pages:
		 * only the power-of-two check can refuse it.
		 */
		{ "capacity 63", { SET(parts[0].capacity, 63) }, .want = -EINVAL },
		/* Entry size 96 with 64 entries fits the two pages too, and is not 2^k. */
		{ "entry size 96", { SET(parts[0].entry_size, 96) }, .want = -EINVAL },
		/* Fewer entries than the part's size says: inconsistent geometry. */
		{ "capacity 8 in two pages", { SET(parts[0].capacity, 8) }, .want = -EINVAL },
		/* More entries than the part holds (would overrun into ring 2). */
		{ "capacity 1024 in one page", { SET(parts[1].capacity, 1024) }, .want = -EINVAL },
		/* An area claiming ring fields, an unknown kind. */
		{ "area with a capacity", { SET(parts[2].capacity, 2) }, .want = -EINVAL },
		{ "kind 9", { SET(parts[1].kind, 9) }, .want = -EINVAL },
	};

	check_forged(cases, ARRAY_SIZE(cases));
}
END_TEST

UNIT_TESTS(test_roundtrip, test_lookup_errors, test_null, test_create_invalid,
	   test_attach_good_forged, test_attach_bad_fd, test_attach_unsealed,
	   test_attach_unsealable, test_attach_readonly, test_attach_size_mismatch,
	   test_attach_bad_magic, test_attach_bad_abi, test_attach_bad_hdr_fields,
	   test_attach_absurd_sizes, test_attach_overlap, test_attach_past_end,
	   test_attach_misaligned, test_attach_bad_ring_geometry)

const struct unit_suite unit_suite = {
	.name = "shmq-region",
	.add_tests = add_tests,
};
