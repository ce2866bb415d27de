/* SPDX-License-Identifier: MIT */
/*
 * kvstash-evict-sim: block hit ratios of eviction policies on synthetic
 * prefix-cache traces, to check the choice of S3-FIFO for kvstashd's pool.
 *
 * The "kvstashd" policy is kvstashd's own S3-FIFO queue (sidecar/store/evict.c,
 * compiled into this tool), ghost included, driven as store.c drives it.
 * LRU, SIEVE (kvstashd's policy before S3-FIFO, as its sidecar/store/evict.c
 * had it, less the pinning), FIFO, an
 * S3-FIFO-lite (an independent sketch of the paper's algorithm) and
 * SIEVE-warm (SIEVE with a block inserted as visited, so a new block
 * survives one lap of the hand) are implemented here.  Every policy gets
 * the same capacity in blocks and the same trace.
 *
 * A request is a chain of block keys, as an engine hashes a prompt:
 *   [system prompt: --sys blocks, shared by every request]
 *   [prompt: --prompt blocks, shared by the requests of one of --prompts
 *    prompts, picked by Zipf(--zipf)]
 *   [suffix: --unique blocks, seen once]
 * The engine QUERYs the chain and gets the longest resident prefix (each
 * block found is a hit: S3-FIFO's use count, SIEVE's visited bit, LRU's
 * move to the front);
 * it then computes and SAVEs the rest, and every block of the rest that
 * is not resident is inserted (one already resident is skipped, as
 * kvstashd's SAVE skips it, without counting as a use).
 *
 * Workloads:
 *   zipf   the requests above
 *   scan   the same, and one request in --scan-every is a long one-off
 *          document instead: the system prompt, then --scan-len unique
 *          blocks (a scan that LRU lets flush the cache)
 *   chat   multi-turn conversations: a conversation (Zipf over
 *          --prompts) resends its whole history plus --unique new blocks
 *          per turn, up to --turns turns, then starts over fresh
 *
 * Output: block hit ratio (hits / blocks asked for) per workload x cache
 * size (a fraction of the workload's distinct blocks) x policy, with the
 * hit ratio of an infinite cache for scale.  Deterministic for a --seed.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/evict.h"

#define TOOL_NAME "kvstash-evict-sim"
#include "tool.h"

static double rnd01(uint64_t *s)
{
	return (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- a key -> u32 map (open addressing, linear probing) ------------- */

/* Keys are never 0: 0 marks an empty cell. */
struct map {
	uint64_t *keys;
	uint32_t *vals;
	size_t mask;
};

static uint64_t hash64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	return k ^ (k >> 33);
}

static void map_init(struct map *m, size_t entries)
{
	size_t cap = 16;

	while (cap < 2 * entries)
		cap *= 2;
	m->keys = xcalloc(cap, sizeof(*m->keys));
	m->vals = xcalloc(cap, sizeof(*m->vals));
	m->mask = cap - 1;
}

static void map_free(struct map *m)
{
	free(m->keys);
	free(m->vals);
}

/* The cell of @k, or of the empty cell where it would go. */
static size_t map_cell(const struct map *m, uint64_t k)
{
	size_t i = hash64(k) & m->mask;

	while (m->keys[i] && m->keys[i] != k)
		i = (i + 1) & m->mask;
	return i;
}

static bool map_get(const struct map *m, uint64_t k, uint32_t *ret)
{
	size_t i = map_cell(m, k);

	if (!m->keys[i])
		return false;
	*ret = m->vals[i];
	return true;
}

static void map_put(struct map *m, uint64_t k, uint32_t v)
{
	size_t i = map_cell(m, k);

	m->keys[i] = k;
	m->vals[i] = v;
}

/* Backward-shift deletion keeps every probe sequence unbroken. */
static void map_del(struct map *m, uint64_t k)
{
	size_t i = map_cell(m, k), j = i;

	if (!m->keys[i])
		return;
	for (;;) {
		size_t home;

		j = (j + 1) & m->mask;
		if (!m->keys[j])
			break;
		home = hash64(m->keys[j]) & m->mask;
		/* Move j back to i unless its home lies cyclically in (i, j]. */
		if (i <= j ? (home > i && home <= j) : (home > i || home <= j))
			continue;
		m->keys[i] = m->keys[j];
		m->vals[i] = m->vals[j];
		i = j;
	}
	m->keys[i] = 0;
}

/* ---- policies ---------------------------------------------------------- */

struct policy {
	const char *name;
	void *(*create)(size_t cap);
	/* A QUERY meets @k: true (and a use recorded) when resident. */
	bool (*hit)(void *p, uint64_t k);
	bool (*contains)(void *p, uint64_t k);
	/* A SAVE of a block not resident: insert, evicting one block when full. */
	void (*insert)(void *p, uint64_t k);
	void (*destroy)(void *p);
};

/*
 * What every policy starts with (its first member, so that a policy is a
 * pointer to it): the resident keys, each mapped to its node, and the
 * indices of the free nodes (for the node-based policies).
 */
struct resident {
	struct map m;
	uint32_t *free;
	uint32_t nfree;
	size_t cap;
};

static void resident_init(struct resident *r, size_t cap, bool nodes)
{
	map_init(&r->m, cap);
	r->cap = cap;
	if (!nodes)
		return;
	r->free = xcalloc(cap, sizeof(*r->free));
	for (size_t i = 0; i < cap; i++)
		r->free[i] = (uint32_t)(cap - 1 - i);
	r->nfree = (uint32_t)cap;
}

static void resident_fini(struct resident *r)
{
	map_free(&r->m);
	free(r->free);
}

/* Every policy's contains(). */
static bool resident_has(void *p, uint64_t k)
{
	uint32_t i;

	return map_get(&((struct resident *)p)->m, k, &i);
}

/* A free node for @k, now resident. */
static uint32_t resident_add(struct resident *r, uint64_t k)
{
	uint32_t i = r->free[--r->nfree];

	map_put(&r->m, k, i);
	return i;
}

/* @k, in node @i, leaves. */
static void resident_del(struct resident *r, uint64_t k, uint32_t i)
{
	map_del(&r->m, k);
	r->free[r->nfree++] = i;
}

/* kvstashd: its S3-FIFO queue (sidecar/store/evict.c), the key as the fingerprint. */
struct kv_node {
	struct s3fifo_node qn;
	uint64_t key;
};

struct kv {
	struct resident r;
	struct s3fifo q;
	struct kv_node *nodes;
};

static void *kv_create(size_t cap)
{
	struct kv *s = xcalloc(1, sizeof(*s));

	resident_init(&s->r, cap, true);
	s3fifo_init(&s->q);
	s->nodes = xcalloc(cap, sizeof(*s->nodes));
	return s;
}

static bool kv_hit(void *p, uint64_t k)
{
	struct kv *s = p;
	uint32_t i;

	if (!map_get(&s->r.m, k, &i))
		return false;
	s3fifo_hit(&s->nodes[i].qn);
	return true;
}

static bool kv_any(struct s3fifo_node *n, void *arg)
{
	return true; /* nothing is pinned in a simulation */
}

static void kv_insert(void *p, uint64_t k)
{
	struct kv *s = p;
	uint32_t i;

	if (s->q.n == s->r.cap) {
		struct s3fifo_node *v = s3fifo_pick(&s->q, kv_any, NULL, 0);
		struct kv_node *vn;

		if (!v)
			die("kvstashd's queue found no victim in %zu unpinned entries", s->q.n);
		vn = caa_container_of(v, struct kv_node, qn);
		s3fifo_evict(&s->q, v, vn->key);
		resident_del(&s->r, vn->key, (uint32_t)(vn - s->nodes));
	}
	i = resident_add(&s->r, k);
	s->nodes[i].key = k;
	s3fifo_insert(&s->q, &s->nodes[i].qn, k);
}

static void kv_destroy(void *p)
{
	struct kv *s = p;

	s3fifo_fini(&s->q);
	resident_fini(&s->r);
	free(s->nodes);
	free(s);
}

/*
 * SIEVE (Zhang et al., NSDI '24), as kvstashd ran it before S3-FIFO: a
 * FIFO with a visited bit per entry and a hand walking from the oldest
 * entry towards the newest, clearing bits, evicting the first unvisited
 * entry, and wrapping from the newest back to the oldest.
 */
struct sv_node {
	struct cds_list_head link; /* list head = newest */
	uint64_t key;
	bool visited;
};

struct sv {
	struct resident r;
	struct cds_list_head list;
	struct sv_node *hand; /* NULL: start at the oldest */
	struct sv_node *nodes;
	size_t n;
	bool warm; /* insert as visited: one lap of grace for new blocks */
};

static void *sv_create(size_t cap)
{
	struct sv *s = xcalloc(1, sizeof(*s));

	resident_init(&s->r, cap, true);
	CDS_INIT_LIST_HEAD(&s->list);
	s->nodes = xcalloc(cap, sizeof(*s->nodes));
	return s;
}

static bool sv_hit(void *p, uint64_t k)
{
	struct sv *s = p;
	uint32_t i;

	if (!map_get(&s->r.m, k, &i))
		return false;
	s->nodes[i].visited = true;
	return true;
}

static struct sv_node *sv_oldest(struct sv *s)
{
	return cds_list_entry(s->list.prev, struct sv_node, link);
}

/* The entry one step newer than @n, wrapping from the newest to the oldest. */
static struct sv_node *sv_newer(struct sv *s, struct sv_node *n)
{
	if (n->link.prev == &s->list)
		return sv_oldest(s);
	return cds_list_entry(n->link.prev, struct sv_node, link);
}

static void sv_insert(void *p, uint64_t k)
{
	struct sv *s = p;
	uint32_t i;

	if (s->n == s->r.cap) {
		struct sv_node *v = s->hand ? s->hand : sv_oldest(s);

		/* Everything is evictable: at most one lap clears every bit. */
		while (v->visited) {
			v->visited = false;
			v = sv_newer(s, v);
		}
		s->hand = sv_newer(s, v);
		if (s->hand == v)
			s->hand = NULL;
		cds_list_del(&v->link);
		s->n--;
		resident_del(&s->r, v->key, (uint32_t)(v - s->nodes));
	}
	i = resident_add(&s->r, k);
	s->nodes[i].key = k;
	s->nodes[i].visited = s->warm;
	cds_list_add(&s->nodes[i].link, &s->list);
	s->n++;
}

static void *sv_create_warm(size_t cap)
{
	struct sv *s = sv_create(cap);

	s->warm = true;
	return s;
}

static void sv_destroy(void *p)
{
	struct sv *s = p;

	resident_fini(&s->r);
	free(s->nodes);
	free(s);
}
/* LRU: a doubly linked list by index, most recent at the head. */
struct lru_node {
	uint64_t key;
	uint32_t prev, next;
};

struct lru {
	struct resident r;
	struct lru_node *nodes; /* nodes[cap] is the list head */
	size_t n;
};

static void lru_unlink(struct lru *l, uint32_t i)
{
	l->nodes[l->nodes[i].prev].next = l->nodes[i].next;
	l->nodes[l->nodes[i].next].prev = l->nodes[i].prev;
}

static void lru_push(struct lru *l, uint32_t i)
{
	uint32_t h = (uint32_t)l->r.cap;

	l->nodes[i].prev = h;
	l->nodes[i].next = l->nodes[h].next;
	l->nodes[l->nodes[h].next].prev = i;
	l->nodes[h].next = i;
}

static void *lru_create(size_t cap)
{
	struct lru *l = xcalloc(1, sizeof(*l));

	resident_init(&l->r, cap, true);
	l->nodes = xcalloc(cap + 1, sizeof(*l->nodes));
	l->nodes[cap].prev = l->nodes[cap].next = (uint32_t)cap;
	return l;
}

static bool lru_hit(void *p, uint64_t k)
{
	struct lru *l = p;
	uint32_t i;

	if (!map_get(&l->r.m, k, &i))
		return false;
	lru_unlink(l, i);
	lru_push(l, i);
	return true;
}

static void lru_insert(void *p, uint64_t k)
{
	struct lru *l = p;
	uint32_t i;

	if (l->n == l->r.cap) {
		i = l->nodes[l->r.cap].prev; /* the least recent */
		lru_unlink(l, i);
		resident_del(&l->r, l->nodes[i].key, i);
		l->n--;
	}
	i = resident_add(&l->r, k);
	l->nodes[i].key = k;
	lru_push(l, i);
	l->n++;
}

static void lru_destroy(void *p)
{
	struct lru *l = p;

	resident_fini(&l->r);
	free(l->nodes);
	free(l);
}

/* A ring of u64 (keys or node indices). */
struct ring {
	uint64_t *v;
	size_t cap, head, n; /* head: the oldest */
};

static void ring_init(struct ring *r, size_t cap)
{
	r->v = xcalloc(cap, sizeof(*r->v));
	r->cap = cap;
	r->head = r->n = 0;
}

static void ring_push(struct ring *r, uint64_t x)
{
	r->v[(r->head + r->n) % r->cap] = x;
	r->n++;
}

static uint64_t ring_pop(struct ring *r)
{
	uint64_t x = r->v[r->head];

	r->head = (r->head + 1) % r->cap;
	r->n--;
	return x;
}

/* FIFO: evict the oldest insert; hits change nothing. */
struct fifo {
	struct resident r; /* no nodes: the ring holds the keys */
	struct ring keys;
};

static void *fifo_create(size_t cap)
{
	struct fifo *f = xcalloc(1, sizeof(*f));

	resident_init(&f->r, cap, false);
	ring_init(&f->keys, cap);
	return f;
}

static void fifo_insert(void *p, uint64_t k)
{
	struct fifo *f = p;

	if (f->keys.n == f->r.cap)
		map_del(&f->r.m, ring_pop(&f->keys));
	ring_push(&f->keys, k);
	map_put(&f->r.m, k, 0);
}

static void fifo_destroy(void *p)
{
	struct fifo *f = p;

	resident_fini(&f->r);
	free(f->keys.v);
	free(f);
}

/*
 * S3-FIFO-lite (after Yang et al., SOSP '23): a small FIFO (10 % of the
 * capacity) takes new blocks; one used again while there moves to the
 * main FIFO, the others leave and are remembered in a ghost FIFO of keys.
 * A block inserted while its key is a ghost goes straight to main.  Main
 * is a CLOCK with a 2-bit use count.  "Lite": one use promotes (the paper
 * also uses one), no size adaptation.
 */
struct s3_node {
	uint64_t key;
	uint8_t freq;
	uint8_t inq; /* 1 small, 2 main */
};

struct s3 {
	struct resident r; /* key -> node */
	struct map g;	   /* ghost key -> its position count */
	struct s3_node *nodes;
	struct ring small, main, ghost;
	uint64_t ghost_seq; /* pushes so far: a ghost's identity */
	size_t small_cap, ghost_cap;
};

static void *s3_create(size_t cap)
{
	struct s3 *s = xcalloc(1, sizeof(*s));

	s->small_cap = cap / 10 ? cap / 10 : 1;
	s->ghost_cap = cap - s->small_cap ? cap - s->small_cap : 1;
	resident_init(&s->r, cap, true);
	map_init(&s->g, s->ghost_cap);
	s->nodes = xcalloc(cap, sizeof(*s->nodes));
	ring_init(&s->small, cap + 1);
	ring_init(&s->main, cap + 1);
	ring_init(&s->ghost, s->ghost_cap);
	return s;
}

static bool s3_hit(void *p, uint64_t k)
{
	struct s3 *s = p;
	uint32_t i;

	if (!map_get(&s->r.m, k, &i))
		return false;
	if (s->nodes[i].freq < 3)
		s->nodes[i].freq++;
	return true;
}

static void s3_ghost_add(struct s3 *s, uint64_t k)
{
	if (s->ghost.n == s->ghost_cap) {
		uint64_t old = ring_pop(&s->ghost);
		uint32_t seq;

		/* Forget it unless a later eviction re-added it (another seq). */
		if (map_get(&s->g, old, &seq) && seq == (uint32_t)(s->ghost_seq - s->ghost_cap))
			map_del(&s->g, old);
	}
	map_put(&s->g, k, (uint32_t)s->ghost_seq++);
	ring_push(&s->ghost, k);
}

static void s3_free_node(struct s3 *s, uint32_t i)
{
	resident_del(&s->r, s->nodes[i].key, i);
}

static void s3_evict_main(struct s3 *s)
{
	while (s->main.n) {
		uint32_t i = (uint32_t)ring_pop(&s->main);

		if (s->nodes[i].freq) {
			s->nodes[i].freq--;
			ring_push(&s->main, i);
			continue;
		}
		s3_free_node(s, i);
		return;
	}
}

static void s3_evict(struct s3 *s)
{
	if (s->small.n < s->small_cap && s->main.n) {
		s3_evict_main(s);
		return;
	}
	while (s->small.n) {
		uint32_t i = (uint32_t)ring_pop(&s->small);

		if (s->nodes[i].freq) {
			s->nodes[i].freq = 0;
			s->nodes[i].inq = 2;
			ring_push(&s->main, i);
			if (s->main.n > s->r.cap - s->small_cap)
				s3_evict_main(s);
			if (s->small.n + s->main.n < s->r.cap)
				return;
			continue;
		}
		s3_ghost_add(s, s->nodes[i].key);
		s3_free_node(s, i);
		return;
	}
	s3_evict_main(s);
}

static void s3_insert(void *p, uint64_t k)
{
	struct s3 *s = p;
	uint32_t i, seq;
	bool ghost = map_get(&s->g, k, &seq);

	while (s->small.n + s->main.n >= s->r.cap)
		s3_evict(s);
	i = resident_add(&s->r, k);
	s->nodes[i] = (struct s3_node){ .key = k, .freq = 0, .inq = ghost ? 2 : 1 };
	if (ghost) {
		map_del(&s->g, k);
		ring_push(&s->main, i);
	} else {
		ring_push(&s->small, i);
	}
}

static void s3_destroy(void *p)
{
	struct s3 *s = p;

	resident_fini(&s->r);
	map_free(&s->g);
	free(s->nodes);
	free(s->small.v);
	free(s->main.v);
	free(s->ghost.v);
	free(s);
}

/* FIFO's hit: a lookup that changes nothing. */
static const struct policy POLICIES[] = {
	{ "LRU", lru_create, lru_hit, resident_has, lru_insert, lru_destroy },
	{ "kvstashd", kv_create, kv_hit, resident_has, kv_insert, kv_destroy },
	{ "SIEVE", sv_create, sv_hit, resident_has, sv_insert, sv_destroy },
	{ "FIFO", fifo_create, resident_has, resident_has, fifo_insert, fifo_destroy },
	{ "S3-FIFO-lite", s3_create, s3_hit, resident_has, s3_insert, s3_destroy },
	{ "SIEVE-warm", sv_create_warm, sv_hit, resident_has, sv_insert, sv_destroy },
};
#define NR_POLICIES (sizeof(POLICIES) / sizeof(POLICIES[0]))

/* ---- traces ----------------------------------------------------------- */

static struct {
	uint32_t prompts, sys, prompt, unique, scan_every, scan_len, turns;
	uint64_t requests;
	double zipf;
	uint64_t seed;
	double sizes[16];
	unsigned nsizes;
	bool workloads[3];
	bool json;
} O;

static const char *const WORKLOADS[] = { "zipf", "scan", "chat" };

/* A trace: block keys, request after request; req[i] is where request i starts. */
struct trace {
	uint64_t *keys;
	size_t n, cap;
	size_t *req;
	size_t nreq;
	uint64_t distinct;
	double ideal; /* hit ratio of an infinite cache */
};

static void trace_add(struct trace *t, uint64_t k)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 1 << 20;
		t->keys = realloc(t->keys, t->cap * sizeof(*t->keys));
		if (!t->keys)
			die("out of memory for the trace");
	}
	t->keys[t->n++] = k;
}

/* Zipf(s) over [0, n): the CDF, searched by bisection. */
struct zipf {
	double *cdf;
	uint32_t n;
};

static void zipf_init(struct zipf *z, uint32_t n, double s)
{
	double sum = 0;

	z->n = n;
	z->cdf = xcalloc(n, sizeof(*z->cdf));
	for (uint32_t i = 0; i < n; i++) {
		sum += 1.0 / pow((double)(i + 1), s);
		z->cdf[i] = sum;
	}
	for (uint32_t i = 0; i < n; i++)
		z->cdf[i] /= sum;
}

static uint32_t zipf_pick(const struct zipf *z, uint64_t *rng)
{
	double u = rnd01(rng);
	uint32_t lo = 0, hi = z->n - 1;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (z->cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Key spaces (top byte): 1 system prompt, 2 prompt blocks (prompt << 24 |
 * block), 3 unique blocks (a counter), 4 chat turns (conversation, run,
 * block).  Keys stand for prefix hashes: a block's key names its whole
 * prefix, so equal keys mean equal prefixes.
 */
#define KEY(space, v) (((uint64_t)(space) << 56) | (v))

static void gen_trace(struct trace *t, int workload)
{
	uint64_t rng = O.seed * 0x9e3779b97f4a7c15ull + (uint64_t)workload + 1, uniq = 1;
	uint32_t *turn = NULL, *run = NULL;
	struct zipf z;

	memset(t, 0, sizeof(*t));
	t->req = xcalloc(O.requests + 1, sizeof(*t->req));
	zipf_init(&z, O.prompts, O.zipf);
	if (workload == 2) {
		turn = xcalloc(O.prompts, sizeof(*turn));
		run = xcalloc(O.prompts, sizeof(*run));
	}
	for (uint64_t r = 0; r < O.requests; r++) {
		t->req[t->nreq++] = t->n;
		if (workload == 1 && O.scan_every && r % O.scan_every == O.scan_every - 1) {
			for (uint32_t b = 0; b < O.sys; b++)
				trace_add(t, KEY(1, b + 1));
			for (uint32_t b = 0; b < O.scan_len; b++)
				trace_add(t, KEY(3, uniq++));
			continue;
		}
		if (workload == 2) {
			uint32_t c = zipf_pick(&z, &rng);

			if (turn[c] == O.turns) {
				turn[c] = 0;
				run[c]++; /* a new conversation in that slot */
			}
			turn[c]++;
			for (uint32_t b = 0; b < O.sys; b++)
				trace_add(t, KEY(1, b + 1));
			/* History: every earlier turn's blocks, then this turn's. */
			for (uint32_t b = 0; b < turn[c] * O.unique; b++)
				trace_add(t, KEY(4, ((uint64_t)c << 36) | ((uint64_t)run[c] << 20) |
							    (b + 1)));
			continue;
		}
		{
			uint32_t p = zipf_pick(&z, &rng);

			for (uint32_t b = 0; b < O.sys; b++)
				trace_add(t, KEY(1, b + 1));
			for (uint32_t b = 0; b < O.prompt; b++)
				trace_add(t, KEY(2, ((uint64_t)p << 24) | (b + 1)));
			for (uint32_t b = 0; b < O.unique; b++)
				trace_add(t, KEY(3, uniq++));
		}
	}
	t->req[t->nreq] = t->n;
	free(z.cdf);
	free(turn);
	free(run);

	/* Distinct blocks, and the hits an infinite cache would get. */
	{
		struct map seen;
		uint64_t hits = 0;

		map_init(&seen, t->n);
		for (size_t q = 0; q < t->nreq; q++) {
			bool walking = true;

			for (size_t i = t->req[q]; i < t->req[q + 1]; i++) {
				uint32_t v;

				if (map_get(&seen, t->keys[i], &v)) {
					hits += walking;
					continue;
				}
				walking = false;
				map_put(&seen, t->keys[i], 1);
				t->distinct++;
			}
		}
		t->ideal = t->n ? (double)hits / (double)t->n : 0;
		map_free(&seen);
	}
}

/* Replay @t on @pol with @cap blocks; returns the block hit ratio. */
static double replay(const struct trace *t, const struct policy *pol, size_t cap)
{
	void *p = pol->create(cap);
	uint64_t hits = 0;

	for (size_t q = 0; q < t->nreq; q++) {
		size_t i = t->req[q], end = t->req[q + 1];

		/* QUERY: the longest resident prefix. */
		for (; i < end && pol->hit(p, t->keys[i]); i++)
			hits++;
		/* SAVE: the rest; resident blocks are skipped. */
		for (; i < end; i++)
			if (!pol->contains(p, t->keys[i]))
				pol->insert(p, t->keys[i]);
	}
	pol->destroy(p);
	return t->n ? (double)hits / (double)t->n : 0;
}

/* ---- main ------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvstash-evict-sim [OPTIONS]\n"
		"\n"
		"Block hit ratios of kvstashd's S3-FIFO queue (sidecar/store/evict.c), LRU,\n"
		"SIEVE, FIFO, S3-FIFO-lite and SIEVE-warm on synthetic prefix-cache\n"
		"traces.\n"
		"\n"
		"  --workloads LIST   zipf,scan,chat (default all)\n"
		"  --requests N       requests per trace (default 200000)\n"
		"  --prompts N        distinct prompts / conversations (default 2000)\n"
		"  --zipf S           Zipf exponent of prompt popularity (default 1.0)\n"
		"  --sys N            system-prompt blocks shared by all (default 16)\n"
		"  --prompt N         per-prompt blocks (default 32)\n"
		"  --unique N         unique suffix blocks per request / per chat turn\n"
		"                     (default 8)\n"
		"  --scan-every N     scan: one request in N is a one-off document (default 10)\n"
		"  --scan-len N       blocks of such a document (default 256)\n"
		"  --turns N          chat: turns per conversation (default 8)\n"
		"  --sizes LIST       cache sizes, percent of distinct blocks (default\n"
		"                     1,5,10,25)\n"
		"  --seed N           default 1\n"
		"  --json             JSON lines instead of tables\n");
}

static void parse_args(int argc, char **argv)
{
	enum {
		OPT_W = 1000,
		OPT_REQ,
		OPT_PR,
		OPT_Z,
		OPT_SYS,
		OPT_PB,
		OPT_U,
		OPT_SE,
		OPT_SL,
		OPT_T,
		OPT_SZ,
		OPT_SEED,
		OPT_JSON
	};
	static const struct option opts[] = {
		{ "workloads", required_argument, NULL, OPT_W },
		{ "requests", required_argument, NULL, OPT_REQ },
		{ "prompts", required_argument, NULL, OPT_PR },
		{ "zipf", required_argument, NULL, OPT_Z },
		{ "sys", required_argument, NULL, OPT_SYS },
		{ "prompt", required_argument, NULL, OPT_PB },
		{ "unique", required_argument, NULL, OPT_U },
		{ "scan-every", required_argument, NULL, OPT_SE },
		{ "scan-len", required_argument, NULL, OPT_SL },
		{ "turns", required_argument, NULL, OPT_T },
		{ "sizes", required_argument, NULL, OPT_SZ },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char buf[256], *save, *tok;
	int c;

	O.requests = 200000;
	O.prompts = 2000;
	O.zipf = 1.0;
	O.sys = 16;
	O.prompt = 32;
	O.unique = 8;
	O.scan_every = 10;
	O.scan_len = 256;
	O.turns = 8;
	O.seed = 1;
	O.nsizes = 4;
	O.sizes[0] = 1;
	O.sizes[1] = 5;
	O.sizes[2] = 10;
	O.sizes[3] = 25;
	O.workloads[0] = O.workloads[1] = O.workloads[2] = true;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_W:
			parse_names(optarg, O.workloads, WORKLOADS, 3, "workload");
			break;
		case OPT_REQ:
			O.requests = strtoull(optarg, NULL, 0);
			break;
		case OPT_PR:
			O.prompts = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case OPT_Z:
			O.zipf = strtod(optarg, NULL);
			break;
		case OPT_SYS:
			O.sys = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case OPT_PB:
			O.prompt = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case OPT_U:
			O.unique = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case OPT_SE:
			O.scan_every = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case OPT_SL:
			O.scan_len = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case OPT_T:
			O.turns = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case OPT_SZ:
			O.nsizes = 0;
			snprintf(buf, sizeof(buf), "%s", optarg);
			save = NULL;
			for (tok = strtok_r(buf, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				if (O.nsizes == 16)
					die("too many sizes");
				O.sizes[O.nsizes] = strtod(tok, NULL);
				if (O.sizes[O.nsizes] <= 0 || O.sizes[O.nsizes] > 100)
					die("sizes are percentages in (0, 100]");
				O.nsizes++;
			}
			break;
		case OPT_SEED:
			O.seed = strtoull(optarg, NULL, 0);
			break;
		case OPT_JSON:
			O.json = true;
			break;
		case 'h':
		default:
			usage_exit(usage, c);
		}
	}
	if (optind < argc)
		die("unexpected argument '%s'", argv[optind]);
	if (!O.requests || !O.prompts || !O.unique || !O.turns)
		die("--requests, --prompts, --unique and --turns must be positive");
	if (O.prompts >= 1u << 16 || O.prompt >= 1u << 24 || O.turns * O.unique >= 1u << 20)
		die("sizes too large for the key encoding");
}

int main(int argc, char **argv)
{
	uint64_t t0 = now_ns();

	parse_args(argc, argv);
	if (!O.json) {
		printf("kvstash-evict-sim: %" PRIu64 " requests, %u prompts, Zipf %.2f; chain = %u "
		       "system + %u prompt + %u unique blocks; scan: 1 in %u requests is %u unique "
		       "blocks; chat: %u turns of %u blocks; seed %" PRIu64 "\n",
		       O.requests, O.prompts, O.zipf, O.sys, O.prompt, O.unique, O.scan_every,
		       O.scan_len, O.turns, O.unique, O.seed);
		printf("\nBlock hit ratio (hits / blocks asked for; a QUERY counts the longest "
		       "resident prefix), cache = %% of the workload's distinct blocks\n\n");
		printf("| workload | blocks asked | distinct | infinite | cache %% |"
		       " cache blocks |");
		for (unsigned p = 0; p < NR_POLICIES; p++)
			printf(" %12s |", POLICIES[p].name);
		printf(" kvstashd - LRU |\n|----------|-------------:|---------:|---------:|--------:|"
		       "-------------:|");
		for (unsigned p = 0; p < NR_POLICIES; p++)
			printf("-------------:|");
		printf("---------------:|\n");
		fflush(stdout);
	}
	for (int w = 0; w < 3; w++) {
		struct trace t;

		if (!O.workloads[w])
			continue;
		gen_trace(&t, w);
		for (unsigned si = 0; si < O.nsizes; si++) {
			size_t cap = (size_t)((double)t.distinct * O.sizes[si] / 100.0);
			double hr[NR_POLICIES];

			if (cap < 1)
				cap = 1;
			for (unsigned p = 0; p < NR_POLICIES; p++)
				hr[p] = replay(&t, &POLICIES[p], cap);
			if (O.json) {
				printf("{\"workload\":\"%s\",\"blocks\":%zu,\"distinct\":%" PRIu64
				       ",\"infinite\":%.4f,\"cache_pct\":%g,\"cache_blocks\":%zu",
				       WORKLOADS[w], t.n, t.distinct, t.ideal, O.sizes[si], cap);
				for (unsigned p = 0; p < NR_POLICIES; p++)
					printf(",\"%s\":%.4f", POLICIES[p].name, hr[p]);
				printf("}\n");
			} else {
				printf("| %-8s | %12zu | %8" PRIu64 " | %8.4f | %7g | %12zu |",
				       WORKLOADS[w], t.n, t.distinct, t.ideal, O.sizes[si], cap);
				for (unsigned p = 0; p < NR_POLICIES; p++)
					printf(" %12.4f |", hr[p]);
				printf(" %+14.4f |\n", hr[1] - hr[0]);
			}
			fflush(stdout);
		}
		free(t.keys);
		free(t.req);
	}
	if (!O.json)
		printf("\n(%.1f s)\n", (double)(now_ns() - t0) / 1e9);
	return 0;
}
