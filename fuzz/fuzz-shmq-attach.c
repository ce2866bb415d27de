/* SPDX-License-Identifier: MIT */
/*
 * fuzz-shmq-attach: a region a peer sends, through shmq_region_attach(),
 * then used the way kvstashd and libkvstash use one.
 *
 * Input: byte 0 chooses the seals (0-3: shrink and grow, as required;
 * 4: shrink only; 5: grow only; 6: none; 7: shrink, grow and seal), byte
 * 1 the size in pages (mod 64, plus one), the rest is the region's
 * content from offset 0 (the remainder reads as zeros).  It is written
 * into a memfd, sealed and attached as a kvstash session region.
 *
 * A region that attaches is exercised through every ring and area its
 * header names (the fuzzer sets the ids), as both ends: the consumer
 * peeks and reads every entry it is offered, the producer reserves and
 * fills every entry it gets, an area is written end to end.  Any access
 * outside the mapping faults, which libFuzzer reports.  Then the shared
 * header is scribbled over, as a hostile peer may do at any time, and
 * every lookup must answer exactly as before: attach validated a private
 * copy and never reads the shared one again.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <kvstash/abi.h>
#include <shmq/shmq.h>

#include "fuzz.h"

#define PREFIX	  2u
#define MAX_PAGES 64u

struct seen {
	int area_r, ring_r[2];
	void *area;
	uint64_t area_size;
	uint32_t capacity[2];
};

static const unsigned seal_sets[8] = {
	F_SEAL_SHRINK | F_SEAL_GROW,
	F_SEAL_SHRINK | F_SEAL_GROW,
	F_SEAL_SHRINK | F_SEAL_GROW,
	F_SEAL_SHRINK | F_SEAL_GROW,
	F_SEAL_SHRINK,
	F_SEAL_GROW,
	0,
	F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL,
};

/* Use ring part @id as consumer and as producer; what ring_init said. */
static void exercise_ring(const struct shmq_region *region, uint32_t id, struct seen *sn)
{
	static uint8_t sink[SHMQ_ENTRY_SIZE_MAX];
	struct shmq_ring ring;
	uint32_t idx;
	int n;

	sn->ring_r[0] = shmq_ring_init(&ring, region, id, SHMQ_CONSUMER);
	if (sn->ring_r[0] == 0) {
		uint32_t esz = 1u << ring.entry_shift;

		FUZZ_CHECK(esz >= SHMQ_ENTRY_SIZE_MIN && esz <= SHMQ_ENTRY_SIZE_MAX, "entry %u",
			   esz);
		sn->capacity[0] = shmq_ring_capacity(&ring);
		n = shmq_cons_peek(&ring, UINT32_MAX, &idx);
		FUZZ_CHECK(n <= (int)sn->capacity[0], "peeked %d of %u", n, sn->capacity[0]);
		for (int i = 0; i < n; i++)
			memcpy(sink, shmq_ring_entry(&ring, idx + (uint32_t)i), esz);
		if (n > 0)
			shmq_cons_release(&ring, (uint32_t)n);
	}
	sn->ring_r[1] = shmq_ring_init(&ring, region, id, SHMQ_PRODUCER);
	if (sn->ring_r[1] == 0) {
		uint32_t esz = 1u << ring.entry_shift;

		sn->capacity[1] = shmq_ring_capacity(&ring);
		n = shmq_prod_reserve(&ring, UINT32_MAX, &idx);
		FUZZ_CHECK(n <= (int)sn->capacity[1], "reserved %d of %u", n, sn->capacity[1]);
		for (int i = 0; i < n; i++)
			memset(shmq_ring_entry(&ring, idx + (uint32_t)i), 0x5a, esz);
		if (n > 0)
			shmq_prod_commit(&ring, SHMQ_COMMIT_NOWAKE);
		(void)shmq_prod_inflight(&ring);
	}
}

static void exercise(const struct shmq_region *region, uint32_t id, struct seen *sn)
{
	memset(sn, 0, sizeof(*sn));
	sn->area_r = shmq_region_area(region, id, &sn->area, &sn->area_size);
	if (sn->area_r == 0) {
		FUZZ_CHECK(sn->area_size > 0 && sn->area_size < shmq_region_size(region),
			   "area of %llu bytes in a region of %llu",
			   (unsigned long long)sn->area_size,
			   (unsigned long long)shmq_region_size(region));
		memset(sn->area, 0xa5, sn->area_size);
	}
	exercise_ring(region, id, sn);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shmq_region_hdr hdr;
	struct shmq_region *region;
	uint32_t ids[SHMQ_MAX_PARTS + 3];
	struct seen before[SHMQ_MAX_PARTS + 3], after;
	size_t pages, bytes, content;
	void *peer;
	int fd, r;

	if (size < PREFIX)
		return 0;
	pages = 1 + data[1] % MAX_PAGES;
	bytes = pages * SHMQ_PART_ALIGN;
	content = size - PREFIX < bytes ? size - PREFIX : bytes;
	fd = memfd_create("fuzz-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	FUZZ_CHECK(fd >= 0, "memfd_create: %d", errno);
	FUZZ_CHECK(ftruncate(fd, (off_t)bytes) == 0, "ftruncate: %d", errno);
	FUZZ_CHECK(pwrite(fd, data + PREFIX, content, 0) == (ssize_t)content, "pwrite: %d", errno);
	if (seal_sets[data[0] % 8])
		FUZZ_CHECK(fcntl(fd, F_ADD_SEALS, seal_sets[data[0] % 8]) == 0, "seal: %d", errno);

	r = shmq_region_attach(fd, KVS_REGION_MAGIC, &region);
	if (r < 0) {
		FUZZ_CHECK(r == -EPERM || r == -EBADMSG || r == -EPROTONOSUPPORT ||
				   r == -EMSGSIZE || r == -EINVAL,
			   "undocumented error %d", r);
		FUZZ_CHECK((seal_sets[data[0] % 8] & (F_SEAL_SHRINK | F_SEAL_GROW)) ==
					   (F_SEAL_SHRINK | F_SEAL_GROW) ||
				   r == -EPERM,
			   "an unsealed region refused for another reason first: %d", r);
		close(fd);
		return 0;
	}
	FUZZ_CHECK((seal_sets[data[0] % 8] & (F_SEAL_SHRINK | F_SEAL_GROW)) ==
			   (F_SEAL_SHRINK | F_SEAL_GROW),
		   "a region without shrink and grow seals attached");
	FUZZ_CHECK(shmq_region_size(region) == bytes, "size %llu of %zu",
		   (unsigned long long)shmq_region_size(region), bytes);

	/* The ids the header names (as the peer wrote them), and kvstash's own. */
	memset(&hdr, 0, sizeof(hdr));
	memcpy(&hdr, data + PREFIX, content < sizeof(hdr) ? content : sizeof(hdr));
	for (unsigned i = 0; i < SHMQ_MAX_PARTS; i++)
		ids[i] = hdr.parts[i].id;
	ids[SHMQ_MAX_PARTS] = KVS_PART_SQ;
	ids[SHMQ_MAX_PARTS + 1] = KVS_PART_CQ;
	ids[SHMQ_MAX_PARTS + 2] = KVS_PART_ARGS;
	for (unsigned i = 0; i < SHMQ_MAX_PARTS + 3; i++)
		exercise(region, ids[i], &before[i]);

	/* A hostile peer rewrites the header: nothing we look up may change. */
	peer = mmap(NULL, SHMQ_PART_ALIGN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	FUZZ_CHECK(peer != MAP_FAILED, "mmap: %d", errno);
	for (size_t i = 0; i < SHMQ_PART_ALIGN; i++)
		((uint8_t *)peer)[i] = (uint8_t)(0xff - i);
	munmap(peer, SHMQ_PART_ALIGN);
	for (unsigned i = 0; i < SHMQ_MAX_PARTS + 3; i++) {
		exercise(region, ids[i], &after);
		FUZZ_CHECK(after.area_r == before[i].area_r && after.area == before[i].area &&
				   after.area_size == before[i].area_size,
			   "part %u: the area changed with the shared header", ids[i]);
		/*
		 * Indices live in the parts, not the header, and the first
		 * pass left them consistent: the same answers again.
		 */
		FUZZ_CHECK(after.ring_r[0] == before[i].ring_r[0] &&
				   after.ring_r[1] == before[i].ring_r[1] &&
				   after.capacity[0] == before[i].capacity[0] &&
				   after.capacity[1] == before[i].capacity[1],
			   "part %u: the ring changed with the shared header", ids[i]);
	}
	shmq_region_destroy(region);
	close(fd);
	return 0;
}
