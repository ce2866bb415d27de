/* SPDX-License-Identifier: MIT */
/*
 * The S3-FIFO queue (sidecar/store/evict.c):
 *   - new entries go to small; an unused one is evicted at small's old
 *     end and leaves its fingerprint in the ghost; a used one moves to
 *     main there (not before), its count reset, without being offered;
 *   - an entry inserted while its fingerprint is a ghost goes straight to
 *     main; evictions from main and plain removals leave no ghost;
 *   - main: a count is spent per look and the entry goes round; counts
 *     saturate at 3;
 *   - small is the source while it holds its share (10 %), else main
 *     (or small when main refuses everything);
 *   - refused (pinned) entries go to the new end of their queue, pick
 *     returns NULL once everything was refused, asking each entry once
 *     (again only after a count was spent), and stays linear when pinned
 *     entries are promoted on the way;
 *     max_scan bounds the looks;
 *   - the ghost keeps main's share of the queue, at most
 *     S3FIFO_GHOST_MAX; a stale ring entry (of a fingerprint re-admitted
 *     and evicted again) does not forget the newer one; against a model,
 *     through growth, ring wraparound and 32-bit number wraparound;
 *   - s3fifo_fini() frees the ghost (allocator byte counts).
 */
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ASan and TSan allocate for glibc: ask their allocator instead of mallinfo2(). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZER_ALLOCATOR 1
#endif
#endif
#ifdef SANITIZER_ALLOCATOR
/* In every sanitizer runtime, but gcc ships no header that declares it. */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#include "store/evict.h"
#include "unit.h"

#define N 128

static struct s3fifo q;
static struct s3fifo_node nodes[N];
static uint64_t fps[N];	  /* nodes[i]'s fingerprint */
static unsigned asked[N]; /* evictable() calls per node */
static bool refused[N];

static unsigned idx(const struct s3fifo_node *n)
{
	ck_assert_ptr_nonnull(n);
	ck_assert(n >= nodes && n < nodes + N);
	return (unsigned)(n - nodes);
}

static bool evictable(struct s3fifo_node *n, void *arg)
{
	unsigned i = idx(n);

	ck_assert_ptr_eq(arg, &q);
	asked[i]++;
	return !refused[i];
}

/* The entries of @list, oldest first, as "1 2 3". */
static const char *order(struct cds_list_head *list)
{
	static char buf[4096];
	struct s3fifo_node *n;
	size_t len = 0;

	buf[0] = 0;
	for (struct cds_list_head *p = list->prev; p != list; p = p->prev) {
		n = cds_list_entry(p, struct s3fifo_node, link);
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%u", len ? " " : "",
					idx(n));
		ck_assert_uint_lt(len, sizeof(buf));
	}
	return buf;
}

/* The counters agree with the lists and every entry knows its queue. */
static void check_counts(void)
{
	size_t ns = 0, nm = 0, wrong = 0;
	struct cds_list_head *p;

	/* One assertion, not one per entry: each is a write to Check's pipe. */
	for (p = q.small.next; p != &q.small; p = p->next) {
		wrong += cds_list_entry(p, struct s3fifo_node, link)->where != S3FIFO_SMALL;
		ns++;
	}
	for (p = q.main.next; p != &q.main; p = p->next) {
		wrong += cds_list_entry(p, struct s3fifo_node, link)->where != S3FIFO_MAIN;
		nm++;
	}
	ck_assert_msg(!wrong && q.nsmall == ns && q.nmain == nm && q.n == ns + nm,
		      "%zu entries in the wrong queue; small %zu listed, %zu counted; main %zu "
		      "listed, %zu counted; n %zu",
		      wrong, ns, q.nsmall, nm, q.nmain, q.n);
}

static void insert(unsigned i)
{
	s3fifo_insert(&q, &nodes[i], fps[i]);
	check_counts();
}

/* A fresh queue holding nodes 0..n-1, 0 the oldest. */
static void setup_n(unsigned n)
{
	s3fifo_fini(&q);
	s3fifo_init(&q);
	for (unsigned i = 0; i < N; i++) {
		nodes[i] = (struct s3fifo_node){ 0 };
		fps[i] = 0x5eed000000000000ull + i;
		asked[i] = 0;
		refused[i] = false;
	}
	for (unsigned i = 0; i < n; i++)
		insert(i);
	ck_assert_uint_eq(q.n, n);
}

static void teardown(void)
{
	s3fifo_fini(&q);
}

static struct s3fifo_node *pick(void)
{
	return s3fifo_pick(&q, evictable, &q, 0);
}

/* Pick a victim and evict it, as the store does; its index. */
static unsigned evict(void)
{
	struct s3fifo_node *v = pick();
	unsigned i = idx(v);

	ck_assert_uint_ne(v->where, S3FIFO_NONE);
	s3fifo_evict(&q, v, fps[i]);
	ck_assert_uint_eq(v->where, S3FIFO_NONE);
	check_counts();
	return i;
}

static void hit(unsigned i, unsigned times)
{
	while (times--)
		s3fifo_hit(&nodes[i]);
}

static uint8_t freq(unsigned i)
{
	return nodes[i].freq;
}

static bool ghost(uint64_t fp)
{
	return s3fifo_ghost_has(&q, fp);
}

static void clear_asked(void)
{
	memset(asked, 0, sizeof(asked));
}

/* Node @i into main, unused, the way a block gets there: saved again while a ghost. */
static void to_main(unsigned i)
{
	fps[N - 1] = fps[i];
	s3fifo_insert(&q, &nodes[N - 1], fps[i]);
	s3fifo_evict(&q, &nodes[N - 1], fps[i]);
	insert(i);
	ck_assert_uint_eq(nodes[i].where, S3FIFO_MAIN);
}

/* A fresh queue holding nodes 1..n-1 in main, 1 the oldest, small empty. */
static void setup_main(unsigned n)
{
	setup_n(0);
	for (unsigned i = 1; i < n; i++)
		to_main(i);
	ck_assert_uint_eq(q.nsmall, 0);
	ck_assert_uint_eq(q.nmain, n - 1);
}

START_TEST(test_empty)
{
	setup_n(0);
	ck_assert_ptr_null(pick());
	ck_assert_ptr_null(s3fifo_pick(&q, evictable, &q, 5));
	ck_assert_uint_eq(q.n, 0);
	ck_assert(!ghost(fps[0]));
	/* Finishing a queue whose ghost never grew, and twice, is harmless. */
	s3fifo_fini(&q);
	s3fifo_fini(&q);
	ck_assert(!ghost(fps[0]));
}
END_TEST

START_TEST(test_insert_small)
{
	setup_n(3);
	ck_assert_str_eq(order(&q.small), "0 1 2");
	ck_assert_str_eq(order(&q.main), "");
	/* A node coming back with a stale count is queued unused. */
	nodes[5].freq = 3;
	insert(5);
	ck_assert_uint_eq(freq(5), 0);
	ck_assert_uint_eq(nodes[5].where, S3FIFO_SMALL);
	/* A hit counts, but moves nothing. */
	hit(0, 1);
	ck_assert_uint_eq(freq(0), 1);
	ck_assert_uint_eq(nodes[0].where, S3FIFO_SMALL);
	ck_assert_str_eq(order(&q.small), "0 1 2 5");
}
END_TEST

/* A full cache: each eviction makes room for a new entry. */
START_TEST(test_unused_evicted_in_order)
{
	setup_n(10);
	for (unsigned i = 0; i < 20; i++) {
		ck_assert(!ghost(fps[i]));
		ck_assert_uint_eq(evict(), i);
		ck_assert_uint_eq(asked[i], 1);
		ck_assert(ghost(fps[i]));
		insert(10 + i);
	}
	/* Ten entries, small's share 1: the ghost holds the last nine. */
	ck_assert(!ghost(fps[10]));
	for (unsigned i = 11; i < 20; i++)
		ck_assert(ghost(fps[i]));
	ck_assert_uint_eq(q.ghost.members, 9);
}
END_TEST

START_TEST(test_promote_at_old_end)
{
	setup_n(10);
	hit(0, 1);
	hit(2, 2);
	refused[2] = true; /* a used entry is promoted, never offered */
	ck_assert_uint_eq(evict(), 1);
	ck_assert_uint_eq(nodes[0].where, S3FIFO_MAIN);
	ck_assert_uint_eq(freq(0), 0);
	ck_assert_uint_eq(asked[0], 0);
	/* 2 is used too, but 1 went before small's old end reached it. */
	ck_assert_uint_eq(nodes[2].where, S3FIFO_SMALL);
	ck_assert_uint_eq(freq(2), 2);
	insert(10);
	ck_assert_uint_eq(evict(), 3);
	ck_assert_uint_eq(nodes[2].where, S3FIFO_MAIN);
	ck_assert_uint_eq(freq(2), 0);
	ck_assert_uint_eq(asked[2], 0);
	ck_assert_str_eq(order(&q.main), "0 2");
	ck_assert_str_eq(order(&q.small), "4 5 6 7 8 9 10");
	/* Evicted from small: ghosts; promoted: not. */
	ck_assert(ghost(fps[1]) && ghost(fps[3]));
	ck_assert(!ghost(fps[0]) && !ghost(fps[2]));
}
END_TEST

START_TEST(test_ghost_readmit)
{
	setup_n(10);
	ck_assert_uint_eq(evict(), 0);
	ck_assert(ghost(fps[0]));
	/* The same key saved again (a new block): straight to main, unused. */
	fps[10] = fps[0];
	nodes[10].freq = 2;
	insert(10);
	ck_assert_uint_eq(nodes[10].where, S3FIFO_MAIN);
	ck_assert_uint_eq(freq(10), 0);
	ck_assert(!ghost(fps[0]));
	/* Small holds its share: its unused entries go, not the re-admitted one. */
	for (unsigned i = 1; i <= 5; i++) {
		ck_assert_uint_eq(evict(), i);
		insert(10 + i);
	}
	ck_assert_uint_eq(nodes[10].where, S3FIFO_MAIN);
	ck_assert_uint_eq(asked[10], 0);
	/* Evicted from main (e.g. with its extent): no ghost, so the next save is new. */
	s3fifo_evict(&q, &nodes[10], fps[10]);
	ck_assert(!ghost(fps[0]));
	fps[20] = fps[0];
	insert(20);
	ck_assert_uint_eq(nodes[20].where, S3FIFO_SMALL);
	/* Removed (dropped, not evicted) from small: no ghost either. */
	s3fifo_remove(&q, &nodes[7]);
	check_counts();
	ck_assert(!ghost(fps[7]));
	fps[21] = fps[7];
	insert(21);
	ck_assert_uint_eq(nodes[21].where, S3FIFO_SMALL);
	/* Any fingerprint works, 0 included. */
	fps[22] = 0;
	insert(22);
	s3fifo_evict(&q, &nodes[22], 0);
	ck_assert(ghost(0));
	fps[23] = 0;
	insert(23);
	ck_assert_uint_eq(nodes[23].where, S3FIFO_MAIN);
	ck_assert(!ghost(0));
}
END_TEST

START_TEST(test_main_counts)
{
	setup_main(10);
	ck_assert_str_eq(order(&q.main), "1 2 3 4 5 6 7 8 9");
	hit(3, 2);
	hit(5, 1);
	ck_assert_uint_eq(evict(), 1);
	ck_assert_uint_eq(evict(), 2);
	/* 3 spends a count and goes round; 4 is next. */
	ck_assert_uint_eq(evict(), 4);
	ck_assert_uint_eq(freq(3), 1);
	ck_assert_uint_eq(asked[3], 0);
	ck_assert_str_eq(order(&q.main), "5 6 7 8 9 3");
	ck_assert_uint_eq(evict(), 6);
	ck_assert_uint_eq(freq(5), 0);
	ck_assert_str_eq(order(&q.main), "7 8 9 3 5");
	ck_assert_uint_eq(evict(), 7);
	ck_assert_uint_eq(evict(), 8);
	ck_assert_uint_eq(evict(), 9);
	/* 3 has one count left: round once more, behind 5. */
	ck_assert_uint_eq(evict(), 5);
	ck_assert_uint_eq(freq(3), 0);
	ck_assert_uint_eq(evict(), 3);
	ck_assert_ptr_null(pick());
}
END_TEST

START_TEST(test_saturation)
{
	setup_n(1);
	hit(0, 10);
	ck_assert_uint_eq(freq(0), S3FIFO_FREQ_MAX);
	ck_assert_uint_eq(S3FIFO_FREQ_MAX, 3);
	hit(0, 300); /* no wrap either */
	ck_assert_uint_eq(freq(0), 3);

	/* In main, 3 counts are 3 rounds: three looks spend them, the fourth evicts. */
	setup_main(2);
	hit(1, 50);
	ck_assert_ptr_null(s3fifo_pick(&q, evictable, &q, 3));
	ck_assert_uint_eq(freq(1), 0);
	ck_assert_uint_eq(asked[1], 0);
	ck_assert_uint_eq(idx(s3fifo_pick(&q, evictable, &q, 1)), 1);
	ck_assert_uint_eq(asked[1], 1);
}
END_TEST

START_TEST(test_small_share)
{
	/* 30 entries: small's share is 3. */
	setup_n(30);
	for (unsigned i = 0; i < 27; i++)
		hit(i, 1);
	/* Promotions down to the share, then small's unused oldest. */
	ck_assert_uint_eq(evict(), 27);
	ck_assert_uint_eq(q.nmain, 27);
	ck_assert_str_eq(order(&q.small), "28 29");
	/* 29 entries, share 2: small still has it. */
	ck_assert_uint_eq(evict(), 28);
	/* 28 entries, share 2, small holds 1: main's oldest goes. */
	ck_assert_uint_eq(evict(), 0);
	ck_assert(ghost(fps[27]) && ghost(fps[28]) && !ghost(fps[0]));
	/* Small below its share, but main refuses everything: small it is. */
	for (unsigned i = 1; i < 27; i++)
		refused[i] = true;
	clear_asked();
	ck_assert_uint_eq(evict(), 29);
	for (unsigned i = 1; i < 27; i++)
		ck_assert_uint_eq(asked[i], 1);
}
END_TEST

START_TEST(test_refused_small)
{
	setup_n(10);
	refused[0] = true;
	ck_assert_uint_eq(evict(), 1);
	ck_assert_uint_eq(asked[0], 1);
	/* Refused: to small's new end, queued, no ghost. */
	ck_assert_uint_eq(nodes[0].where, S3FIFO_SMALL);
	ck_assert_str_eq(order(&q.small), "2 3 4 5 6 7 8 9 0");
	ck_assert(!ghost(fps[0]));
	insert(10);
	refused[0] = false;
	for (unsigned i = 2; i < 10; i++)
		ck_assert_uint_eq(evict(), i);
	ck_assert_uint_eq(evict(), 0);
	ck_assert(ghost(fps[0]));
	ck_assert_uint_eq(evict(), 10);
	ck_assert_ptr_null(pick());
}
END_TEST

START_TEST(test_refused_main)
{
	setup_main(6);
	refused[1] = refused[2] = true;
	hit(2, 1);
	/* 1 refused, 2 spends its count, both to the new end; 3 goes. */
	ck_assert_uint_eq(evict(), 3);
	ck_assert_uint_eq(asked[1], 1);
	ck_assert_uint_eq(asked[2], 0);
	ck_assert_uint_eq(freq(2), 0);
	ck_assert_str_eq(order(&q.main), "4 5 1 2");
}
END_TEST

START_TEST(test_all_refused)
{
	setup_n(10);
	for (unsigned i = 0; i < 5; i++)
		hit(i, 1);
	ck_assert_uint_eq(evict(), 5);
	ck_assert_str_eq(order(&q.main), "0 1 2 3 4");
	ck_assert_str_eq(order(&q.small), "6 7 8 9");
	for (unsigned i = 0; i < N; i++)
		refused[i] = true;
	clear_asked();
	/* Nothing: every entry asked once, no more (not a scan to max_scan). */
	ck_assert_ptr_null(pick());
	for (unsigned i = 0; i < 10; i++)
		ck_assert_uint_eq(asked[i], i == 5 ? 0 : 1);
	ck_assert_str_eq(order(&q.main), "0 1 2 3 4");
	ck_assert_str_eq(order(&q.small), "6 7 8 9");
	check_counts();

	/* With a count to spend: it is spent, and the others asked again after it. */
	hit(2, 2);
	clear_asked();
	ck_assert_ptr_null(pick());
	ck_assert_uint_eq(freq(2), 0);
	for (unsigned i = 6; i < 10; i++)
		ck_assert_uint_eq(asked[i], 1);
	for (unsigned i = 0; i < 5; i++)
		ck_assert_uint_le(asked[i], 3);
	ck_assert_uint_eq(asked[2], 1);
	ck_assert_uint_eq(q.n, 9);
	check_counts();

	/* Allowed again: the oldest unused entry of small. */
	refused[7] = false;
	ck_assert_uint_eq(evict(), 7);
}
END_TEST

/*
 * Main refuses everything and small's used entries are pinned too: each
 * is promoted and refused in turn, without lapping main again, so the
 * default scan reaches the one entry that can go.
 */
START_TEST(test_refused_promotions)
{
	setup_main(101); /* main: 1..100 */
	for (unsigned i = 101; i <= 111; i++)
		insert(i);
	/* 111 entries: small (11) holds its share (11). */
	for (unsigned i = 101; i <= 110; i++)
		hit(i, 1);
	for (unsigned i = 1; i <= 110; i++)
		refused[i] = true;
	ck_assert_uint_eq(evict(), 111);
	for (unsigned i = 1; i <= 110; i++)
		ck_assert_uint_eq(asked[i], 1);
	ck_assert_uint_eq(q.nmain, 110);
	ck_assert_uint_eq(q.nsmall, 0);
	/* And with nothing to evict: NULL, each entry asked once more. */
	clear_asked();
	ck_assert_ptr_null(pick());
	for (unsigned i = 1; i <= 110; i++)
		ck_assert_uint_eq(asked[i], 1);
}
END_TEST

START_TEST(test_max_scan)
{
	/* A promotion is a look. */
	setup_n(5);
	for (unsigned i = 0; i < 5; i++)
		hit(i, 1);
	ck_assert_ptr_null(s3fifo_pick(&q, evictable, &q, 2));
	ck_assert_str_eq(order(&q.main), "0 1");
	ck_assert_str_eq(order(&q.small), "2 3 4");
	ck_assert_uint_eq(freq(2), 1);

	/* A refusal is a look. */
	setup_n(5);
	for (unsigned i = 0; i < 5; i++)
		refused[i] = true;
	ck_assert_ptr_null(s3fifo_pick(&q, evictable, &q, 3));
	ck_assert_uint_eq(asked[0] + asked[1] + asked[2], 3);
	ck_assert_uint_eq(asked[3] + asked[4], 0);

	/* A count spent is a look. */
	setup_main(10);
	for (unsigned i = 1; i < 10; i++)
		hit(i, 3);
	ck_assert_ptr_null(s3fifo_pick(&q, evictable, &q, 9));
	for (unsigned i = 1; i < 10; i++)
		ck_assert_uint_eq(freq(i), 2);

	/* The default: enough for every count to run out, the victim on the fourth lap. */
	setup_main(10);
	for (unsigned i = 1; i < 10; i++)
		hit(i, 3);
	refused[1] = true;
	ck_assert_uint_eq(evict(), 2);
	for (unsigned i = 3; i < 10; i++)
		ck_assert_uint_eq(freq(i), 0);
}
END_TEST

START_TEST(test_remove)
{
	setup_n(6);
	hit(0, 1);
	ck_assert_uint_eq(evict(), 1); /* 0 to main */
	s3fifo_remove(&q, &nodes[3]);
	check_counts();
	ck_assert_uint_eq(nodes[3].where, S3FIFO_NONE);
	s3fifo_remove(&q, &nodes[3]); /* twice: harmless */
	check_counts();
	s3fifo_remove(&q, &nodes[0]);
	check_counts();
	ck_assert_str_eq(order(&q.small), "2 4 5");
	ck_assert_str_eq(order(&q.main), "");
	ck_assert(!ghost(fps[3]) && !ghost(fps[0]));
	/* A removed node can be queued again, as new. */
	insert(3);
	ck_assert_str_eq(order(&q.small), "2 4 5 3");
	ck_assert_uint_eq(evict(), 2);
	ck_assert_uint_eq(evict(), 4);
}
END_TEST

/* ---- the ghost on its own ----------------------------------------------- */

/*
 * Queue fillers (nodes 0..n-2, never picked) so that the queue holds @n
 * entries when a ghost is pushed: the ghost keeps n - n/10 (main's share).
 */
static void set_fill(unsigned n)
{
	ck_assert_uint_le(n, N - 1);
	while (q.n + 1 > n) {
		unsigned i = (unsigned)q.n - 1;

		s3fifo_remove(&q, &nodes[i]);
	}
	while (q.n + 1 < n)
		insert((unsigned)q.n);
	check_counts();
}

/* Evict an entry of fingerprint @fp from small (node N-1: queued as new, then evicted). */
static void push(uint64_t fp)
{
	fps[N - 1] = fp;
	insert(N - 1);
	ck_assert_uint_eq(nodes[N - 1].where, S3FIFO_SMALL);
	s3fifo_evict(&q, &nodes[N - 1], fp);
}

/* Save @fp again while it is a ghost: to main, and no longer a ghost.  Dropped at once. */
static void readmit(uint64_t fp)
{
	fps[N - 1] = fp;
	insert(N - 1);
	ck_assert_uint_eq(nodes[N - 1].where, S3FIFO_MAIN);
	s3fifo_remove(&q, &nodes[N - 1]);
	ck_assert(!ghost(fp));
}

#define FP(k) (0xf00d000000000000ull + (k))

START_TEST(test_ghost_bound)
{
	setup_n(0);
	set_fill(10); /* bound 9 */
	for (unsigned k = 0; k < 9; k++)
		push(FP(k));
	for (unsigned k = 0; k < 9; k++)
		ck_assert(ghost(FP(k)));
	ck_assert_uint_eq(q.ghost.members, 9);
	push(FP(9));
	ck_assert(!ghost(FP(0)));
	for (unsigned k = 1; k < 10; k++)
		ck_assert(ghost(FP(k)));
	ck_assert_uint_eq(q.ghost.members, 9);

	/* 100 entries: 90, the ghost grows. */
	set_fill(100);
	for (unsigned k = 100; k < 190; k++)
		push(FP(k));
	for (unsigned k = 0; k < 10; k++)
		ck_assert(!ghost(FP(k)));
	for (unsigned k = 100; k < 190; k++)
		ck_assert(ghost(FP(k)));
	ck_assert_uint_eq(q.ghost.members, 90);
	push(FP(190));
	ck_assert(!ghost(FP(100)));
	ck_assert(ghost(FP(101)) && ghost(FP(190)));
	ck_assert_uint_eq(q.ghost.members, 90);

	/* Back to 10 entries: the next push keeps the newest 9. */
	set_fill(10);
	push(FP(191));
	for (unsigned k = 101; k < 183; k++)
		ck_assert(!ghost(FP(k)));
	for (unsigned k = 183; k < 192; k++)
		ck_assert(ghost(FP(k)));
	ck_assert_uint_eq(q.ghost.members, 9);
}
END_TEST

/*
 * Counted entries no list holds, so that the queue looks @more entries
 * larger to the ghost's bound; the helpers that check the counters must
 * not run meanwhile.
 */
static void pretend(long more)
{
	q.n += (size_t)more;
	q.nsmall += (size_t)more;
}

/* push() without the checks, for pretend(). */
static void push_raw(uint64_t fp)
{
	s3fifo_insert(&q, &nodes[N - 1], fp);
	s3fifo_evict(&q, &nodes[N - 1], fp);
}

START_TEST(test_ghost_max)
{
	const size_t more = 10;

	setup_n(0);
	pretend(3l << 20); /* a bound of 2.8M */
	for (size_t k = 0; k < S3FIFO_GHOST_MAX + more; k++)
		push_raw(FP(k));
	pretend(-(3l << 20));
	ck_assert_uint_eq(q.ghost.members, S3FIFO_GHOST_MAX);
	ck_assert_uint_eq(q.ghost.cap, S3FIFO_GHOST_MAX);
	for (size_t k = 0; k < more; k++)
		ck_assert(!ghost(FP(k)));
	for (size_t k = more; k < more + 1000; k++)
		ck_assert(ghost(FP(k)));
	ck_assert(ghost(FP(S3FIFO_GHOST_MAX + more - 1)));
}
END_TEST

/*
 * A re-admitted fingerprint's ring entry stays, stale, and counts towards
 * the bound; when it is pushed out it must not take the fingerprint's
 * newer entry with it.
 */
START_TEST(test_ghost_stale)
{
	setup_n(0);
	set_fill(10); /* bound 9 */
	for (unsigned k = 0; k < 9; k++)
		push(FP(k)); /* ring: 0..8 */
	readmit(FP(0));
	ck_assert_uint_eq(q.ghost.members, 8);
	/* The stale entry of 0 is the oldest: this push drops it, nothing else. */
	push(FP(9)); /* ring: 1..9 */
	for (unsigned k = 1; k < 10; k++)
		ck_assert(ghost(FP(k)));
	ck_assert_uint_eq(q.ghost.members, 9);
	/* Stale entries count: 2 (stale) and 1 go with the next two pushes. */
	readmit(FP(2));
	push(FP(10)); /* ring: 2(stale) 3..10 */
	ck_assert(!ghost(FP(1)));
	ck_assert(ghost(FP(3)));
	push(FP(11)); /* ring: 3..11 */
	ck_assert(ghost(FP(3)));
	ck_assert_uint_eq(q.ghost.members, 9);

	/* 4 re-admitted, evicted from small again: a newer ring entry. */
	readmit(FP(4));
	push(FP(4)); /* drops 3; ring: 4(stale) 5..11 4 */
	ck_assert(ghost(FP(4)));
	push(FP(12)); /* drops the stale 4: the newer one stays */
	ck_assert(ghost(FP(4)));
	ck_assert_uint_eq(q.ghost.members, 9);
	for (unsigned k = 13; k < 20; k++)
		push(FP(k)); /* drops 5..11 */
	ck_assert(ghost(FP(4)));
	push(FP(20)); /* drops the newer 4 */
	ck_assert(!ghost(FP(4)));
	ck_assert_uint_eq(q.ghost.members, 9);
}
END_TEST

/* splitmix64 */
static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#define U	   200	/* fingerprints in play */
#define MODEL_RING 4096 /* > any bound used */

/* The ghost as specified: a bounded FIFO; a member is one whose latest push is still in it. */
static struct {
	unsigned ring[MODEL_RING]; /* fingerprint indices */
	uint64_t seq[MODEL_RING];
	size_t head, len;
	uint64_t next;
	uint64_t live[U]; /* seq of the member's entry, 0: not a member */
	size_t members;
} M;

static void model_push(unsigned u, size_t bound)
{
	while (M.len >= bound) {
		size_t h = M.head % MODEL_RING;

		if (M.live[M.ring[h]] == M.seq[h]) {
			M.live[M.ring[h]] = 0;
			M.members--;
		}
		M.head++;
		M.len--;
	}
	M.ring[(M.head + M.len) % MODEL_RING] = u;
	M.seq[(M.head + M.len) % MODEL_RING] = ++M.next;
	M.len++;
	if (!M.live[u])
		M.members++;
	M.live[u] = M.next;
}

static bool model_take(unsigned u)
{
	if (!M.live[u])
		return false;
	M.live[u] = 0;
	M.members--;
	return true;
}

/*
 * Random saves, evictions and queue sizes against the model: the ghost
 * grows (bounds up to 114), its ring wraps many times, and its numbers
 * cross 2^32 (they start just below).  Fingerprints are random, so the
 * table sees clusters and backward shifts.
 */
START_TEST(test_ghost_model)
{
	uint64_t rng = 42, fp[U];
	unsigned pushes = 0, readmits = 0;

	memset(&M, 0, sizeof(M));
	for (unsigned u = 0; u < U; u++)
		fp[u] = rnd(&rng) | 2; /* never 0 or 1: those are one fingerprint */
	setup_n(0);
	q.ghost.oldest = q.ghost.next = (1ull << 32) - 3000;
	set_fill(20);
	for (unsigned step = 0; step < 40000; step++) {
		uint64_t r = rnd(&rng);

		if (r % 100 < 3) {
			/* A new queue size: mostly small (tight tables), at times up to 126. */
			unsigned span = r % 7 ? 30 : 125;

			set_fill(2 + (unsigned)(r >> 8) % span);
		} else {
			unsigned u = (unsigned)((r >> 8) % U);
			bool was = M.live[u] != 0;

			fps[N - 1] = fp[u];
			insert(N - 1);
			ck_assert_uint_eq(nodes[N - 1].where, was ? S3FIFO_MAIN : S3FIFO_SMALL);
			ck_assert(model_take(u) == was);
			if (was) {
				readmits++;
				/* From main, evicted or dropped: no ghost either way. */
				if (r & (1ull << 40))
					s3fifo_evict(&q, &nodes[N - 1], fp[u]);
				else
					s3fifo_remove(&q, &nodes[N - 1]);
			} else {
				size_t n = q.n, share = n / 10 ? n / 10 : 1;

				s3fifo_evict(&q, &nodes[N - 1], fp[u]);
				model_push(u, n - share ? n - share : 1);
				pushes++;
			}
		}
		ck_assert_uint_eq(q.ghost.members, M.members);
		/* Not ck_assert() per lookup: each is a write to Check's pipe. */
		for (unsigned u = 0; u < U; u++)
			if (ghost(fp[u]) != (M.live[u] != 0))
				ck_abort_msg("step %u: fingerprint %u: ghost %d, model %d", step, u,
					     ghost(fp[u]), M.live[u] != 0);
	}
	/* The run did what it claims. */
	ck_assert_uint_gt(q.ghost.next, 1ull << 32);
	ck_assert_uint_ge(q.ghost.cap, 128);
	ck_assert_uint_gt(pushes, 20 * q.ghost.cap);
	ck_assert_uint_gt(readmits, 1000);
}
END_TEST

/* Bytes the allocator has handed out and not got back. */
static size_t allocated(void)
{
#ifdef SANITIZER_ALLOCATOR
	return __sanitizer_get_current_allocated_bytes();
#else
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
#endif
}

START_TEST(test_fini)
{
	size_t before, grown, freed, again, freed_again;
	bool had;

	setup_n(0);
	/*
	 * Nothing but the queue between the measurements (Check's own
	 * bookkeeping allocates), and a ghost of 900 (one allocation of each
	 * array, all too large for glibc's per-thread caches, which count as
	 * in use).
	 */
	pretend(1000);
	before = allocated();
	for (unsigned k = 0; k < 2000; k++)
		push_raw(FP(k));
	grown = allocated();
	s3fifo_fini(&q);
	freed = allocated();
	push_raw(FP(1));
	had = ghost(FP(1));
	again = allocated();
	s3fifo_fini(&q);
	freed_again = allocated();
	pretend(-1000);

	ck_assert_uint_gt(grown, before);
	ck_assert_uint_eq(freed, before);
	ck_assert(had);
	ck_assert_uint_gt(again, before);
	ck_assert_uint_eq(freed_again, before);
	ck_assert_ptr_null(q.ghost.ring);
	ck_assert_ptr_null(q.ghost.fps);
	ck_assert_ptr_null(q.ghost.nums);
	ck_assert_uint_eq(q.ghost.cap, 0);
	ck_assert_uint_eq(q.ghost.members, 0);
	ck_assert(!ghost(FP(1)));
}
END_TEST

UNIT_TESTS(test_empty, test_insert_small, test_unused_evicted_in_order, test_promote_at_old_end,
	   test_ghost_readmit, test_main_counts, test_saturation, test_small_share,
	   test_refused_small, test_refused_main, test_all_refused, test_refused_promotions,
	   test_max_scan, test_remove, test_ghost_bound, test_ghost_max, test_ghost_stale,
	   test_ghost_model, test_fini)

const struct unit_suite unit_suite = {
	.name = "evict",
	.teardown = teardown,
	.add_tests = add_tests,
};
