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

static int attach_hdr(const struct shmq_region_hdr *hdr)
{
	return attach_forged(hdr, hdr->region_size, SEALED);
}

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
	struct shmq_part_spec s[SHMQ_MAX_PARTS + 1];

	/* The extremes that are allowed. */
	ck_assert_int_eq(create_ring(SHMQ_ENTRY_SIZE_MIN, SHMQ_CAPACITY_MIN), 0);
	ck_assert_int_eq(create_ring(SHMQ_ENTRY_SIZE_MAX, 4), 0);

	ck_assert_int_eq(create_ring(48, 64), -EINVAL);	  /* entry size not 2^k */
	ck_assert_int_eq(create_ring(4, 64), -EINVAL);	  /* entry size too small */
	ck_assert_int_eq(create_ring(8192, 64), -EINVAL); /* entry size too large */
	ck_assert_int_eq(create_ring(0, 64), -EINVAL);
	ck_assert_int_eq(create_ring(64, 1), -EINVAL);	 /* capacity too small */
	ck_assert_int_eq(create_ring(64, 100), -EINVAL); /* capacity not 2^k */
	ck_assert_int_eq(create_ring(64, SHMQ_CAPACITY_MAX << 1), -EINVAL);
	ck_assert_int_eq(create_ring(64, 0), -EINVAL);

	ck_assert_int_eq(create_one(good_spec, 0), -EINVAL);
	ck_assert_int_eq(create_one(NULL, 1), -EINVAL);
	for (unsigned i = 0; i < SHMQ_MAX_PARTS + 1; i++)
		s[i] = (struct shmq_part_spec){ .kind = SHMQ_PART_AREA, .id = i, .size = 1 };
	ck_assert_int_eq(create_one(s, SHMQ_MAX_PARTS), 0);
	ck_assert_int_eq(create_one(s, SHMQ_MAX_PARTS + 1), -EINVAL);

	/* Duplicate ids, even across kinds. */
	s[0] = good_spec[0];
	s[1] = good_spec[2];
	s[1].id = s[0].id;
	ck_assert_int_eq(create_one(s, 2), -EINVAL);

	/* Unknown kind; fields that do not apply to a kind must be zero. */
	s[0] = (struct shmq_part_spec){ .kind = 3, .id = 1, .size = 4096 };
	ck_assert_int_eq(create_one(s, 1), -EINVAL);
	s[0] = (struct shmq_part_spec){ .kind = 0, .id = 1, .size = 4096 };
	ck_assert_int_eq(create_one(s, 1), -EINVAL);
	s[0] = (struct shmq_part_spec){ .kind = SHMQ_PART_AREA, .id = 1, .size = 0 };
	ck_assert_int_eq(create_one(s, 1), -EINVAL);
	s[0] = (struct shmq_part_spec){
		.kind = SHMQ_PART_AREA, .id = 1, .size = 64, .capacity = 2
	};
	ck_assert_int_eq(create_one(s, 1), -EINVAL);
	s[0] = good_spec[0];
	s[0].size = 4096;
	ck_assert_int_eq(create_one(s, 1), -EINVAL);

	/* Sizes past the region limit, and sizes whose rounding overflows. */
	s[0] = (struct shmq_part_spec){ .kind = SHMQ_PART_AREA,
					.id = 1,
					.size = SHMQ_REGION_SIZE_MAX };
	ck_assert_int_eq(create_one(s, 1), -EINVAL);
	s[0].size = UINT64_MAX;
	ck_assert_int_eq(create_one(s, 1), -EINVAL);
	s[0].size = UINT64_MAX - 4096 * 2;
	s[1] = (struct shmq_part_spec){ .kind = SHMQ_PART_AREA, .id = 2, .size = 8192 };
	ck_assert_int_eq(create_one(s, 2), -EINVAL);
	s[0].size = SHMQ_REGION_SIZE_MAX / 2;
	s[1].size = SHMQ_REGION_SIZE_MAX / 2;
	ck_assert_int_eq(create_one(s, 2), -EINVAL);
}
END_TEST

START_TEST(test_attach_good_forged)
{
	struct shmq_region_hdr hdr;

	/* The harness itself: an untouched header attaches. */
	good_hdr(&hdr);
	ck_assert_int_eq(attach_hdr(&hdr), 0);
	/* A newer minor (additions only) is accepted. */
	hdr.abi_minor = SHMQ_ABI_MINOR + 1;
	ck_assert_int_eq(attach_hdr(&hdr), 0);
	/* More seals than required do no harm. */
	ck_assert_int_eq(attach_forged(&hdr, hdr.region_size, SEALED | F_SEAL_SEAL), 0);
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
	struct shmq_region_hdr hdr;

	good_hdr(&hdr);
	/* The right bytes, but the peer could still shrink the file under us. */
	ck_assert_int_eq(attach_forged(&hdr, hdr.region_size, 0), -EPERM);
	ck_assert_int_eq(attach_forged(&hdr, hdr.region_size, F_SEAL_SHRINK), -EPERM);
	ck_assert_int_eq(attach_forged(&hdr, hdr.region_size, F_SEAL_GROW), -EPERM);
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
	struct shmq_region_hdr hdr;

	good_hdr(&hdr);
	/* The file is longer, or shorter, than the header says. */
	ck_assert_int_eq(attach_forged(&hdr, hdr.region_size + SHMQ_PART_ALIGN, SEALED), -EMSGSIZE);
	ck_assert_int_eq(attach_forged(&hdr, hdr.region_size - SHMQ_PART_ALIGN, SEALED), -EMSGSIZE);
	/* Truncated below one header page, or empty. */
	ck_assert_int_eq(attach_forged(&hdr, sizeof(hdr), SEALED), -EMSGSIZE);
	ck_assert_int_eq(attach_forged(NULL, 0, SEALED), -EMSGSIZE);
}
END_TEST

START_TEST(test_attach_bad_magic)
{
	struct shmq_region *a = create_good(), *b = NULL;
	struct shmq_region_hdr hdr;

	good_hdr(&hdr);
	hdr.magic ^= 1;
	ck_assert_int_eq(attach_hdr(&hdr), -EBADMSG);
	/* Somebody else's region, valid in every other respect. */
	ck_assert_int_eq(shmq_region_attach(shmq_region_fd(a), APP_MAGIC + 1, &b), -EBADMSG);
	ck_assert_ptr_null(b);
	shmq_region_destroy(a);
	/* All zeros: the peer never wrote a header. */
	ck_assert_int_eq(attach_forged(NULL, 2 * SHMQ_PART_ALIGN, SEALED), -EBADMSG);
}
END_TEST

START_TEST(test_attach_bad_abi)
{
	struct shmq_region_hdr hdr;

	good_hdr(&hdr);
	hdr.abi_major = SHMQ_ABI_MAJOR + 1;
	ck_assert_int_eq(attach_hdr(&hdr), -EPROTONOSUPPORT);
	hdr.abi_major = 0;
	ck_assert_int_eq(attach_hdr(&hdr), -EPROTONOSUPPORT);
}
END_TEST

START_TEST(test_attach_bad_hdr_fields)
{
	struct shmq_region_hdr good, hdr;

	good_hdr(&good);

	hdr = good;
	hdr.hdr_size = sizeof(hdr) + 64;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	hdr = good;
	hdr.nr_parts = 0;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	hdr = good;
	hdr.nr_parts = SHMQ_MAX_PARTS + 1;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	/* A part slot past nr_parts is not looked at. */
	hdr = good;
	hdr.nr_parts = 2;
	ck_assert_int_eq(attach_hdr(&hdr), 0);
}
END_TEST

START_TEST(test_attach_absurd_sizes)
{
	struct shmq_region_hdr good, hdr;

	good_hdr(&good);

	/* A region size beyond the limit (and beyond the file). */
	hdr = good;
	hdr.region_size = SHMQ_REGION_SIZE_MAX * 2;
	ck_assert_int_eq(attach_forged(&hdr, good.region_size, SEALED), -EMSGSIZE);
	/* A sparse file that really is that large: refused before mmap. */
	ck_assert_int_eq(attach_forged(&hdr, hdr.region_size, SEALED), -EMSGSIZE);

	/* A part so large that offset + size wraps around 2^64. */
	hdr = good;
	hdr.parts[2].size = UINT64_MAX - SHMQ_PART_ALIGN + 1;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);

	/* Absurd capacity and entry size (capacity * entry_size past 2^32). */
	hdr = good;
	hdr.parts[0].capacity = 1u << 31;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	hdr = good;
	hdr.parts[0].capacity = SHMQ_CAPACITY_MAX * 2;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	hdr = good;
	hdr.parts[0].entry_size = 1u << 31;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	hdr = good;
	hdr.parts[0].entries_offset = UINT64_MAX - (SHMQ_LINE - 1); /* line aligned */
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	hdr = good;
	hdr.parts[0].capacity = 0;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
}
END_TEST

START_TEST(test_attach_overlap)
{
	struct shmq_region_hdr good, hdr;

	good_hdr(&good);

	/* Ring 2 moved onto the second page of ring 1. */
	hdr = good;
	hdr.parts[1].offset = good.parts[0].offset + SHMQ_PART_ALIGN;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	/* Two parts at the same place. */
	hdr = good;
	hdr.parts[2].offset = good.parts[1].offset;
	hdr.parts[2].size = good.parts[1].size;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	/* A part over the header page. */
	hdr = good;
	hdr.parts[1].offset = 0;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	/* Duplicate ids (no overlap). */
	hdr = good;
	hdr.parts[2].id = good.parts[0].id;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
}
END_TEST

START_TEST(test_attach_past_end)
{
	struct shmq_region_hdr good, hdr;

	good_hdr(&good);

	/* The last part (the area) grown by a page past the end of the file. */
	hdr = good;
	hdr.parts[2].size += SHMQ_PART_ALIGN;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	/* Moved to start exactly at the end. */
	hdr = good;
	hdr.parts[2].offset = good.region_size;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
}
END_TEST

START_TEST(test_attach_misaligned)
{
	struct shmq_region_hdr good, hdr;

	good_hdr(&good);

	hdr = good;
	hdr.parts[2].offset += SHMQ_LINE;
	hdr.parts[2].size -= SHMQ_PART_ALIGN; /* still inside the file */
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	hdr = good;
	hdr.parts[2].size -= 1;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	/* Entries must start on a line, after the control block. */
	hdr = good;
	hdr.parts[0].entries_offset += 8;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	hdr = good;
	hdr.parts[0].entries_offset = SHMQ_LINE;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
}
END_TEST

START_TEST(test_attach_bad_ring_geometry)
{
	struct shmq_region_hdr good, hdr;

	good_hdr(&good);

	/*
	 * Capacity 63 of 64-byte entries still fits the ring's two pages:
	 * only the power-of-two check can refuse it.
	 */
	hdr = good;
	hdr.parts[0].capacity = 63;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	/* Entry size 96 with 64 entries fits the two pages too, and is not 2^k. */
	hdr = good;
	hdr.parts[0].entry_size = 96;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	/* Fewer entries than the part's size says: inconsistent geometry. */
	hdr = good;
	hdr.parts[0].capacity = 8;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	/* More entries than the part holds (would overrun into ring 2). */
	hdr = good;
	hdr.parts[1].capacity = 1024;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	/* An area claiming ring fields, an unknown kind. */
	hdr = good;
	hdr.parts[2].capacity = 2;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
	hdr = good;
	hdr.parts[1].kind = 9;
	ck_assert_int_eq(attach_hdr(&hdr), -EINVAL);
}
END_TEST

static void add_tests(TCase *tc)
{
	tcase_add_test(tc, test_roundtrip);
	tcase_add_test(tc, test_lookup_errors);
	tcase_add_test(tc, test_null);
	tcase_add_test(tc, test_create_invalid);
	tcase_add_test(tc, test_attach_good_forged);
	tcase_add_test(tc, test_attach_bad_fd);
	tcase_add_test(tc, test_attach_unsealed);
	tcase_add_test(tc, test_attach_unsealable);
	tcase_add_test(tc, test_attach_readonly);
	tcase_add_test(tc, test_attach_size_mismatch);
	tcase_add_test(tc, test_attach_bad_magic);
	tcase_add_test(tc, test_attach_bad_abi);
	tcase_add_test(tc, test_attach_bad_hdr_fields);
	tcase_add_test(tc, test_attach_absurd_sizes);
	tcase_add_test(tc, test_attach_overlap);
	tcase_add_test(tc, test_attach_past_end);
	tcase_add_test(tc, test_attach_misaligned);
	tcase_add_test(tc, test_attach_bad_ring_geometry);
}

const struct unit_suite unit_suite = {
	.name = "shmq-region",
	.add_tests = add_tests,
};
