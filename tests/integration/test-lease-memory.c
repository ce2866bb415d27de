/* SPDX-License-Identifier: MIT */
/*
 * Lease memory is bounded (issue 11, item 3).  A lease of n blocks costs
 * kvstashd about 8 n bytes; before the bound, QUERYs of 65536 keys (512
 * KiB each) grew the daemon by 1 GiB in 8 s.  Three bounds, each a
 * QUERY refused with -EDQUOT past it, pinning nothing:
 *   - per instance, default 64 MiB: 65536-key QUERYs of one instance stop
 *     at 127 leases and the daemon's RSS grows by about that; another
 *     instance still gets leases, and a RELEASE makes room again;
 *   - per uid ([lease] memory_per_uid): two instances of one uid share
 *     it; closing one instance's session gives its share back;
 *   - all leases together ([lease] memory).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

#define BIG 65536u /* keys of the QUERYs */

/* Resident set of @pid in KiB. */
static unsigned long rss_kib(pid_t pid)
{
	char path[64], line[256];
	unsigned long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	CHECK(f, "cannot open %s", path);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %lu kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* QUERYs of @keys (n) with a lease until one is refused or @max succeeded; the leases into @ids. */
static unsigned lease_until_refused(struct kvs_client *c, const uint8_t *keys, uint32_t n,
				    unsigned max, uint64_t *ids, int *ret_res)
{
	for (unsigned i = 0; i < max; i++) {
		struct kvs_cqe e = it_query(c, keys, n, 0);

		if (e.res != (int32_t)n) {
			*ret_res = e.res;
			return i;
		}
		if (ids)
			ids[i] = e.result0;
	}
	*ret_res = (int)n;
	return max;
}

/* Save @n keys of 512-byte blocks (engine blocks i % @blocks) in batches of 16384. */
static void save_all(struct kvs_client *c, const uint8_t *keys, uint32_t n, uint32_t blocks)
{
	static uint32_t ids[16384];

	for (uint32_t i = 0; i < n; i += 16384) {
		uint32_t m = n - i < 16384u ? n - i : 16384u;

		for (uint32_t j = 0; j < m; j++)
			ids[j] = (i + j) % blocks;
		CHECK_RES(it_save(c, keys + (size_t)i * KVS_KEY_SIZE, ids, m).res, m, "SAVE");
	}
	it_flush(c);
}

static void per_instance(void)
{
	static uint8_t keys[BIG * KVS_KEY_SIZE];
	static uint64_t ids[400];
	struct kvs_msg_stats_global g;
	struct kvs_client *a, *b;
	struct test_kv kva, kvb;
	unsigned long rss0, rss1;
	struct kvsd d;
	unsigned n;
	int res;

	/* 65536 blocks of 512 bytes: 32 MiB, in a pool twice that. */
	it_start(&d, "[pool]\nsize = 64M\nextent_size = 256K\n");
	a = it_worker(&d, "lmem-a", "lmem/pf", 0, 1, &kva, LAYOUT_PAGE_FIRST, 1, BIG, 512);
	b = it_worker(&d, "lmem-b", "lmem/pf", 0, 1, &kvb, LAYOUT_PAGE_FIRST, 1, 16, 512);
	it_keys(keys, BIG, 1);
	save_all(a, keys, BIG, BIG);
	rss0 = rss_kib(d.pid);
	n = lease_until_refused(a, keys, BIG, 400, ids, &res);
	rss1 = rss_kib(d.pid);
	printf("# %u leases of %u keys before a refusal (%s); kvstashd grew by %lu MiB\n", n, BIG,
	       res < 0 ? kvs_strerror(res) : "none", (rss1 - rss0) >> 10);
	CHECK_RES(res, -EDQUOT, "a QUERY past the instance's lease memory");
	/* 64 MiB at 8 bytes a block, less a little per lease. */
	CHECK(n >= 120 && n <= 128, "%u leases of %u keys within 64 MiB", n, BIG);
	CHECK(rss1 - rss0 < (96ul << 10), "kvstashd grew by %lu MiB for %u leases of 512 KiB",
	      (rss1 - rss0) >> 10, n);
	CHECK(kvsd_log_contains(&d, "lease memory"), "the log does not say why");
	g = it_stats(&d);
	CHECK(g.leases_live == n, "%llu leases live, %u made", (unsigned long long)g.leases_live,
	      n);
	/* The refused QUERY pinned nothing: every lease is B's to take, B's own bound is free. */
	CHECK_RES(it_query(b, keys, BIG, 0).res, BIG, "another instance's QUERY");
	CHECK_RES(it_release(a, ids[0]).res, 0, "RELEASE of one of A's leases");
	CHECK_RES(it_query(a, keys, BIG, 0).res, BIG, "A's QUERY after a RELEASE");
	CHECK_RES(it_query(a, keys, BIG, 0).res, -EDQUOT, "and the next one");
	/* Counting only: no lease, no memory. */
	CHECK_RES(it_query(a, keys, BIG, KVS_QUERY_NOLEASE).res, BIG, "QUERY without a lease");
	it_ok("65536-key QUERYs of one instance stop at %u leases with -EDQUOT (kvstashd grew "
	      "%lu MiB); other instances unaffected, a RELEASE gives room back",
	      n, (rss1 - rss0) >> 10);
	kvs_close(a);
	kvs_close(b);
	test_kv_free(&kva);
	test_kv_free(&kvb);
	it_stop(&d);
}

#define SMALL 1024u /* keys per QUERY: leases of 8 KiB */

/*
 * Instance A takes leases until its bound (1 MiB), then B of the same
 * uid until the second bound named by @cfg (1.5 MiB): B is refused
 * with less than its own bound.  Closing A gives the room back to B.
 */
static void shared_bound(const char *cfg, const char *what, const char *log_word)
{
	static uint8_t keys[SMALL * KVS_KEY_SIZE];
	struct kvs_client *a, *b;
	struct test_kv kva, kvb;
	unsigned na, nb, nb2;
	struct kvsd d;
	uint64_t t0;
	int res;

	it_start(&d, cfg);
	a = it_worker(&d, "lmem-share-a", "lmem/share", 0, 1, &kva, LAYOUT_PAGE_FIRST, 1, SMALL,
		      512);
	b = it_worker(&d, "lmem-share-b", "lmem/share", 0, 1, &kvb, LAYOUT_PAGE_FIRST, 1, 16, 512);
	it_keys(keys, SMALL, 2);
	save_all(a, keys, SMALL, SMALL);
	na = lease_until_refused(a, keys, SMALL, 400, NULL, &res);
	CHECK_RES(res, -EDQUOT, "A's QUERY past its instance's lease memory");
	nb = lease_until_refused(b, keys, SMALL, 400, NULL, &res);
	printf("# %s: A %u leases, then B %u\n", what, na, nb);
	CHECK_RES(res, -EDQUOT, what);
	/* 8 KiB and a little per lease: A about 1 MiB, A and B about 1.5 MiB together. */
	CHECK(na >= 120 && na <= 128, "A got %u leases of 8 KiB within 1 MiB", na);
	CHECK(nb >= 56 && nb <= 64 && (na + nb) * SMALL * 8 <= (1536u << 10),
	      "B got %u leases after A's %u: the shared bound is 1.5 MiB", nb, na);
	CHECK(kvsd_log_contains(&d, log_word), "the log does not name the %s", log_word);
	/* A's leases die with its session: B gets what A held. */
	kvs_close(a);
	t0 = test_now_ns();
	while ((nb2 = lease_until_refused(b, keys, SMALL, 1, NULL, &res)) == 0 && res == -EDQUOT &&
	       test_now_ns() - t0 < 10000000000ull)
		;
	CHECK(nb2 == 1, "B after A's session ended: %s", kvs_strerror(res));
	nb2 = lease_until_refused(b, keys, SMALL, 400, NULL, &res);
	CHECK_RES(res, -EDQUOT, "B at its own bound");
	CHECK(nb + 1 + nb2 >= 120 && nb + 1 + nb2 <= 128, "B holds %u leases at its own bound",
	      nb + 1 + nb2);
	it_ok("%s: two instances of one uid share it (A %u leases, B %u), and get it back", what,
	      na, nb);
	kvs_close(b);
	test_kv_free(&kva);
	test_kv_free(&kvb);
	it_stop(&d);
}

int main(void)
{
	it_watchdog(600);
	per_instance();
	shared_bound("[lease]\nmemory_per_instance = 1M\nmemory_per_uid = 1536K\n",
		     "the uid's lease memory", "uid");
	shared_bound("[lease]\nmemory_per_instance = 1M\nmemory = 1536K\n", "all leases' memory",
		     "all leases");
	return 0;
}
