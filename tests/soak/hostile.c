/* SPDX-License-Identifier: MIT */
/*
 * A hostile engine.  It speaks the wire protocol and the ring ABI, but
 * writes its SQ, CQ and arguments by hand through the region it got in
 * HELLO, and lies:
 *   storm      HOSTILE_SQES (default 20000) random SQEs: any opcode, flags,
 *              counts, argument windows (inside, across and past the area),
 *              leases (real, spent, guessed), layer ranges, block ids
 *   flip       arguments (and submitted SQEs) rewritten by a thread while
 *              kvstashd reads them
 *   leases     every lease id near its own tried, LOAD and RELEASE: the
 *              well-behaved engine's leases answer -EACCES and stay valid
 *   namespace  the well-behaved engine's keys queried from another
 *              namespace never hit; the same keys saved there with other
 *              bytes never reach it
 *   indices    SQ tail beyond capacity, CQ head beyond the tail: the
 *              session ends; its own SQ head and CQ tail rewritten: ignored
 *   register   views that overlap, reach past the allocation, an allocation
 *              larger than its fd, an unsealed fd, a socket for memory, a
 *              second REGISTER, another layout for the namespace; then
 *              HOSTILE_REGISTERS (default 300) REGISTER / UNREGISTER storms
 *              over three sessions
 *   churn      HOSTILE_SESSIONS (default 5000) connections opened and
 *              dropped: without HELLO, after HELLO, with a NOP in flight,
 *              mid-message, with absurd ring sizes, as admin
 * Its memory is one memfd: guard bytes before, after and between the
 * registered blocks are poisoned, and must still be poison at the end:
 * kvstashd never touched memory outside what the session registered.
 * Every SQE gets exactly one CQE with a documented result.
 *
 * Meanwhile a well-behaved engine runs QUERY / LOAD / RELEASE / SAVE,
 * every LOAD checked byte for byte, before (HOSTILE_SECONDS, default 3),
 * during and after the attacks: zero errors, progress in every phase.
 * Its rate in each phase is printed (not asserted: the machine decides).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "soak.h"

#define GOOD_NS	    "good/bf16/pf"
#define BAD_NS	    "hostile/bf16/pf"
#define LAYERS	    4u
#define SEG	    2048u
#define BLOCKS	    16u
#define GUARD	    65536u
#define GAP	    1024u /* between blocks: unregistered */
#define BSTRIDE	    (LAYERS * SEG + GAP)
#define MEM_BYTES   (2 * GUARD + BLOCKS * BSTRIDE)
#define GUARD_BYTE  0xee
#define GUARDED_MAP "memfd:kvstash-hostile (deleted)" /* in kvstashd's /proc maps */
#define GMAXN	    8u
#define GPROMPTS    32u

/* ---- the well-behaved engine ----------------------------------------- */

enum { PH_BASE, PH_ATTACK, PH_AFTER, PH_STOP };

struct shared {
	const struct kvsd *d;
	uint32_t phase;
	uint64_t ops[3], loads[3], blocks[3];
};

static uint64_t good_seed(unsigned p)
{
	return 4200000 + p;
}

static int good(void *arg, unsigned unused)
{
	struct shared *sh = arg;
	uint64_t rs = 0x243f6a8885a308d3ull;
	uint8_t keys[GMAXN * KVS_KEY_SIZE];
	uint32_t ids[GMAXN];
	struct kvs_client *c;
	struct test_kv kv;
	struct kvs_cqe e;
	unsigned ph;

	c = it_worker(sh->d, "good", GOOD_NS, 0, 1, &kv, LAYOUT_PAGE_FIRST, LAYERS, 64, SEG);
	for (unsigned b = 32; b < 64; b++)
		test_kv_poison(&kv, b, POISON);
	while ((ph = __atomic_load_n(&sh->phase, __ATOMIC_ACQUIRE)) != PH_STOP) {
		unsigned p = (unsigned)(soak_rnd(&rs) % GPROMPTS);
		unsigned n = 1 + (unsigned)(soak_rnd(&rs) % GMAXN), h;
		uint64_t seed = good_seed(p);

		it_keys(keys, n, seed);
		e = it_query(c, keys, n, 0);
		CHECK(e.res >= 0 && e.res <= (int32_t)n, "good: QUERY: %d (%s)", e.res,
		      kvs_strerror(e.res));
		h = (unsigned)e.res;
		sh->ops[ph]++;
		if (h && soak_rnd(&rs) % 4 == 0) {
			CHECK_RES(it_release(c, e.result0).res, 0, "good: RELEASE");
			sh->ops[ph]++;
		} else if (h) {
			it_ids(ids, h, 32 + (unsigned)(soak_rnd(&rs) % (32 - GMAXN + 1)));
			e = it_load(c, e.result0, ids, h, 0, 0);
			CHECK(e.res == (int32_t)h, "good: LOAD of %u: %d (%s)", h, e.res,
			      kvs_strerror(e.res));
			for (unsigned i = 0; i < h; i++) {
				CHECK(test_kv_check(&kv, ids[i], it_seed(seed, i)),
				      "good: block %u of prompt %u differs", i, p);
				test_kv_poison(&kv, ids[i], POISON);
			}
			for (unsigned b = 32; b < 64; b++)
				CHECK(test_kv_is_poison(&kv, b, POISON), "good: block %u written",
				      b);
			sh->ops[ph]++;
			sh->loads[ph]++;
			sh->blocks[ph] += h;
		}
		if (h < n) {
			it_ids(ids, n - h, 0);
			for (unsigned i = h; i < n; i++)
				test_kv_fill(&kv, i - h, it_seed(seed, i));
			e = it_save(c, keys + h * KVS_KEY_SIZE, ids, n - h);
			CHECK(e.res == (int32_t)(n - h), "good: SAVE of %u: %d (%s)", n - h, e.res,
			      kvs_strerror(e.res));
			sh->ops[ph]++;
		}
	}
	kvs_close(c);
	test_kv_free(&kv);
	return 0;
}

/* ---- the hostile engine's guarded memory ------------------------------ */

static struct kvsd d;
static struct shared *sh;
static uint8_t *mem;
static int mem_fd;
static uint64_t protocol_errors0;
static unsigned broken_sessions;

static uint8_t *seg_at(unsigned l, unsigned b)
{
	return mem + GUARD + (uint64_t)b * BSTRIDE + (uint64_t)l * SEG;
}

static bool in_view(uint64_t off)
{
	uint64_t o;

	if (off < GUARD || off >= GUARD + (uint64_t)BLOCKS * BSTRIDE)
		return false;
	o = (off - GUARD) % BSTRIDE;
	return o < LAYERS * SEG;
}

/* Every byte outside the registered views still guard poison. */
static void check_guards(const char *after)
{
	uint64_t bad = 0, first = 0;

	for (uint64_t off = 0; off < MEM_BYTES; off++) {
		if (in_view(off) || mem[off] == GUARD_BYTE)
			continue;
		if (!bad++)
			first = off;
	}
	CHECK(bad == 0, "after %s: %llu guard bytes written, the first at offset %llu", after,
	      (unsigned long long)bad, (unsigned long long)first);
}

static void guarded_layout(struct kvs_wire_mem *m, struct kvs_wire_layer *lay)
{
	memset(m, 0, sizeof(*m));
	m->kind = KVS_MEM_HOST_FD;
	m->size = MEM_BYTES; /* the whole fd: only the views say what may be touched */
	memset(lay, 0, LAYERS * sizeof(*lay));
	for (unsigned l = 0; l < LAYERS; l++) {
		snprintf(lay[l].name, sizeof(lay[l].name), "model.layers.%u", l);
		lay[l].segments = 1;
		lay[l].offset = GUARD + l * SEG;
		lay[l].num_blocks = BLOCKS;
		lay[l].segment_bytes = SEG;
		lay[l].block_stride = BSTRIDE;
	}
}

static void open_guarded(struct raw_sess *rs, const char *inst)
{
	struct kvs_wire_mem m;
	struct kvs_wire_layer lay[LAYERS];

	raw_sess_open(rs, &d, KVS_ROLE_WORKER, inst, BAD_NS, 0, 1, 256);
	guarded_layout(&m, lay);
	CHECK_RES(raw_sess_register(rs, &m, 1, lay, LAYERS, 0, &mem_fd, 1), 0,
		  "REGISTER of the guarded views");
}

/* The CQE results abi.h documents (and 0 or a count). */
static bool documented(int32_t res)
{
	static const int errs[] = { EINVAL,  EFAULT, ERANGE,   E2BIG,  EOPNOTSUPP, EPERM,
				    EUNATCH, ENOENT, EALREADY, EACCES, ENOSPC,	   EBUSY };

	if (res >= 0)
		return true;
	for (unsigned i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		if (res == -errs[i])
			return true;
	return false;
}

/* Submit @n SQEs (user_data set here) and reap exactly their CQEs; results to @res. */
static void run_batch(struct raw_sess *rs, struct kvs_sqe *s, unsigned n, int32_t *res,
		      uint64_t *results1)
{
	uint64_t base = rs->next_user_data + 1;
	unsigned got = 0, sent = 0;
	bool *seen = calloc(n, sizeof(*seen));

	CHECK(seen, "out of memory");
	for (unsigned i = 0; i < n; i++)
		s[i].user_data = base + i;
	rs->next_user_data += n;
	while (got < n) {
		struct kvs_cqe e;
		int r;

		sent += raw_sess_submit(rs, s + sent, n - sent);
		r = raw_sess_reap(rs, &e, OP_TIMEOUT_MS);
		CHECK(r == 0, "hostile: %u of %u CQEs: %s", got, n, kvs_strerror(r));
		CHECK(e.user_data >= base && e.user_data < base + n && !seen[e.user_data - base],
		      "hostile: CQE for %llu", (unsigned long long)e.user_data);
		seen[e.user_data - base] = true;
		CHECK(documented(e.res), "hostile: undocumented result %d for opcode %u", e.res,
		      s[e.user_data - base].opcode);
		if (res)
			res[e.user_data - base] = e.res;
		if (results1)
			results1[e.user_data - base] = e.result0;
		got++;
	}
	free(seen);
}

/* ---- attacks ---------------------------------------------------------- */

static uint64_t rnd_s = 0xb7e151628aed2a6bull;

static uint64_t rnd(void)
{
	return soak_rnd(&rnd_s);
}

/* Fresh blocks in the hostile namespace, and a lease on them. */
static uint64_t save_and_lease(struct raw_sess *rs, uint64_t seed, unsigned n)
{
	struct kvs_sqe s;
	struct kvs_cqe e;

	memset(&s, 0, sizeof(s));
	it_keys(rs->args, n, seed);
	for (uint32_t i = 0; i < n; i++)
		memcpy(rs->args + n * KVS_KEY_SIZE + 4 * i, &i, 4);
	s.opcode = KVS_OP_SAVE;
	s.count = n;
	s.arg_len = n * (KVS_KEY_SIZE + 4);
	CHECK_RES(raw_sess_op(rs, &s, &e), (int)n, "hostile SAVE");
	memset(&s, 0, sizeof(s));
	s.opcode = KVS_OP_FLUSH;
	CHECK_RES(raw_sess_op(rs, &s, &e), 0, "hostile FLUSH");
	memset(&s, 0, sizeof(s));
	s.opcode = KVS_OP_QUERY;
	s.count = n;
	s.arg_len = n * KVS_KEY_SIZE;
	CHECK_RES(raw_sess_op(rs, &s, &e), (int)n, "hostile QUERY");
	return e.result0;
}

static uint64_t sqe_len(uint8_t op, uint32_t count)
{
	switch (op) {
	case KVS_OP_SAVE:
		return (uint64_t)count * (KVS_KEY_SIZE + 4);
	case KVS_OP_QUERY:
		return (uint64_t)count * KVS_KEY_SIZE;
	case KVS_OP_LOAD:
		return (uint64_t)count * 4;
	default:
		return 0;
	}
}

static void storm(struct raw_sess *rs)
{
	unsigned total = soak_env("HOSTILE_SQES", 20000), done = 0;
	uint64_t counts[8] = { 0 }, ok = 0, lease = save_and_lease(rs, 1, 8), r0[256];
	struct kvs_sqe s[256], rel[256];
	int32_t res[256];

	while (done < total) {
		unsigned n = 1 + (unsigned)(rnd() % 256);

		if (n > total - done)
			n = total - done;
		/* New garbage in the argument area now and then (block ids mostly small). */
		if (rnd() % 8 == 0) {
			for (uint64_t i = 0; i + 4 <= 65536; i += 4) {
				uint32_t v = rnd() % 4 ? (uint32_t)(rnd() % (BLOCKS + 2))
						       : (uint32_t)rnd();

				memcpy(rs->args + i, &v, 4);
			}
		}
		if (rnd() % 64 == 0) {
			memset(rel, 0, sizeof(rel));
			rel[0].opcode = KVS_OP_RELEASE;
			rel[0].lease = lease;
			run_batch(rs, rel, 1, NULL, NULL);
			lease = save_and_lease(rs, rnd(), 1 + (unsigned)(rnd() % 8));
		}
		memset(s, 0, sizeof(s));
		for (unsigned i = 0; i < n; i++) {
			struct kvs_sqe *q = &s[i];
			uint64_t x = rnd();

			q->opcode = x % 16 ? (uint8_t)(x % 6) : (uint8_t)(x >> 8);
			q->count = (x >> 16) % 4 ? (uint32_t)((x >> 20) % 24) : (uint32_t)rnd();
			q->arg_len = (uint32_t)sqe_len(q->opcode, q->count);
			switch ((x >> 28) % 8) {
			case 0:
				q->arg_len = (uint32_t)rnd();
				break;
			case 1:
				q->arg_off = (uint32_t)(rs->args_size - (rnd() % 64));
				break;
			case 2:
				q->arg_off = (uint32_t)rnd();
				break;
			default:
				q->arg_off = (uint32_t)(rnd() % 65536) & ~7u;
			}
			if (q->opcode == KVS_OP_LOAD || q->opcode == KVS_OP_RELEASE || x % 32 == 1)
				q->lease = (x >> 32) % 4 == 0 ? rnd() : lease + (x >> 34) % 3 - 1;
			if (q->opcode == KVS_OP_LOAD && (x >> 40) % 2) {
				q->layer_begin = (uint32_t)((x >> 41) % (LAYERS + 1));
				q->layer_count = (uint32_t)((x >> 44) % (LAYERS + 1));
			}
			if (x % 13 == 0)
				q->flags = (uint8_t)rnd();
			if (x % 29 == 0)
				q->req_id = rnd();
			if (x % 31 == 0) {
				uint64_t f = rnd();

				q->fence_slot = (uint32_t)f;
				q->fence_value = (uint32_t)(f >> 32);
			}
		}
		run_batch(rs, s, n, res, r0);
		unsigned nrel = 0;

		memset(rel, 0, sizeof(rel));
		for (unsigned i = 0; i < n; i++) {
			counts[s[i].opcode <= KVS_OP_LAST ? s[i].opcode : 6]++;
			ok += res[i] >= 0;
			/* Leases a random QUERY won: given back, or they would pin the pool. */
			if (s[i].opcode == KVS_OP_QUERY && res[i] > 0 && r0[i]) {
				rel[nrel].opcode = KVS_OP_RELEASE;
				rel[nrel++].lease = r0[i];
			}
		}
		if (nrel)
			run_batch(rs, rel, nrel, NULL, NULL);
		done += n;
	}
	memset(rel, 0, sizeof(rel));
	rel[0].opcode = KVS_OP_RELEASE;
	rel[0].lease = lease;
	run_batch(rs, rel, 1, NULL, NULL);
	check_guards("the SQE storm");
	printf("# storm: %u random SQEs (%llu NOP, %llu SAVE, %llu QUERY, %llu LOAD, %llu RELEASE, "
	       "%llu FLUSH, %llu unknown): %llu succeeded, every other one a documented -errno\n",
	       total, (unsigned long long)counts[0], (unsigned long long)counts[1],
	       (unsigned long long)counts[2], (unsigned long long)counts[3],
	       (unsigned long long)counts[4], (unsigned long long)counts[5],
	       (unsigned long long)counts[6], (unsigned long long)ok);
}

/*
 * Arguments rewritten while kvstashd reads them.  Windows in the argument
 * area: [0, 256) keys and [256, 320) block ids of a SAVE, [4096, 4160) ids
 * of a LOAD, both flipped between valid and out-of-range values by a
 * thread; [8192, 8448) keys of a QUERY, left alone (its lease feeds the
 * LOAD).  The thread also rewrites the opcode, count, argument window and
 * lease of SQEs sitting in the SQ (never user_data: every CQE must still
 * be matched to its SQE).
 */
struct flipper {
	struct raw_sess *rs;
	uint32_t stop;
	uint64_t flips;
};

static void store_u32(uint8_t *p, uint32_t v)
{
	/* Relaxed atomic stores: racing kvstashd's copy is the point. */
	__atomic_store_n((uint32_t *)(void *)p, v, __ATOMIC_RELAXED);
}

static void *flip_main(void *arg)
{
	struct flipper *f = arg;
	struct raw_sess *rs = f->rs;
	uint64_t s = 0x13198a2e03707344ull;
	uint32_t cap = shmq_ring_capacity(&rs->sq);

	while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
		bool bad = soak_rnd(&s) % 2;

		for (unsigned i = 0; i < 16; i++) {
			store_u32(rs->args + 256 + 4 * i,
				  bad && i == soak_rnd(&s) % 16 ? 0xffffffffu : i);
			store_u32(rs->args + 4096 + 4 * i, !bad ? 16 + i : i);
		}
		store_u32(rs->args + 4 * (soak_rnd(&s) % 64), (uint32_t)soak_rnd(&s));
		if (soak_rnd(&s) % 16 == 0) {
			uint8_t *e = shmq_ring_entry(&rs->sq, (uint32_t)soak_rnd(&s) % cap);
			unsigned off = (unsigned)(soak_rnd(&s) % 6) * 4;

			/* Bytes 0-7 and 16-31: opcode, flags, count, argument window, lease. */
			store_u32(e + (off < 8 ? off : off + 8), (uint32_t)soak_rnd(&s));
		}
		f->flips++;
	}
	return NULL;
}

static void flip(struct raw_sess *rs)
{
	unsigned rounds = soak_env("HOSTILE_FLIPS", 2000);
	uint64_t save_ok = 0, save_range = 0, load_ok = 0, load_range = 0, other = 0;
	struct flipper f = { .rs = rs };
	struct kvs_sqe s[2];
	struct kvs_cqe e;
	int32_t res[2];
	uint64_t r0[2];
	pthread_t t;

	/* The QUERY's keys, saved once with valid ids. */
	it_keys(rs->args + 8192, 16, 31337);
	for (uint32_t i = 0; i < 16; i++)
		memcpy(rs->args + 8192 + 256 + 4 * i, &i, 4);
	memset(s, 0, sizeof(s));
	s[0].opcode = KVS_OP_SAVE;
	s[0].count = 16;
	s[0].arg_off = 8192;
	s[0].arg_len = 16 * 20;
	CHECK_RES(raw_sess_op(rs, &s[0], &e), 16, "SAVE of the QUERY's keys");
	memset(s, 0, sizeof(s));
	s[0].opcode = KVS_OP_FLUSH;
	CHECK_RES(raw_sess_op(rs, &s[0], &e), 0, "FLUSH");

	CHECK(pthread_create(&t, NULL, flip_main, &f) == 0, "thread");
	for (unsigned r = 0; r < rounds; r++) {
		memset(s, 0, sizeof(s));
		s[0].opcode = KVS_OP_SAVE;
		s[0].count = 16;
		s[0].arg_len = 16 * 20;
		s[1].opcode = KVS_OP_QUERY;
		s[1].count = 16;
		s[1].arg_off = 8192;
		s[1].arg_len = 16 * 16;
		run_batch(rs, s, 2, res, r0);
		if (res[0] >= 0)
			save_ok++;
		else if (res[0] == -ERANGE)
			save_range++;
		else
			other++;
		if (res[1] <= 0 || !r0[1]) {
			other++;
			continue;
		}
		memset(s, 0, sizeof(s));
		s[0].opcode = KVS_OP_LOAD;
		s[0].count = (uint32_t)res[1];
		s[0].arg_off = 4096;
		s[0].arg_len = 4 * (uint32_t)res[1];
		s[0].lease = r0[1];
		run_batch(rs, s, 1, res, NULL);
		if (res[0] >= 0)
			load_ok++;
		else if (res[0] == -ERANGE)
			load_range++;
		else
			other++;
		if (res[0] < 0) {
			/* An SQE the thread rewrote may not have spent the lease. */
			memset(s, 0, sizeof(s));
			s[0].opcode = KVS_OP_RELEASE;
			s[0].lease = r0[1];
			run_batch(rs, s, 1, NULL, NULL);
		}
	}
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	check_guards("argument flipping");
	printf("# flip: %u rounds, %llu rewrites racing kvstashd's copies: SAVE %llu stored, %llu "
	       "-ERANGE; LOAD %llu loaded, %llu -ERANGE; %llu other documented results (SQEs "
	       "rewritten in the ring)\n",
	       rounds, (unsigned long long)f.flips, (unsigned long long)save_ok,
	       (unsigned long long)save_range, (unsigned long long)load_ok,
	       (unsigned long long)load_range, (unsigned long long)other);
	CHECK(save_ok && save_range && load_ok && load_range,
	      "the flips never raced both ways: the attack proved nothing");
}

/* Every lease id around our own: others' are -EACCES or -ENOENT, never ours to use. */
static void leases(struct raw_sess *rs)
{
	const unsigned span = 1500, batch = 200;
	uint64_t own = save_and_lease(rs, 4242, 2), eacces = 0, enoent = 0;
	struct kvs_sqe s[200];
	int32_t res[200];

	for (uint64_t id = own - span; id <= own + span;) {
		unsigned n = 0;

		memset(s, 0, sizeof(s));
		for (; n < batch && id <= own + span; id++) {
			uint32_t zero = 0;

			if (id == own || id == 0)
				continue;
			s[n].opcode = n % 2 ? KVS_OP_RELEASE : KVS_OP_LOAD;
			s[n].lease = id;
			if (s[n].opcode == KVS_OP_LOAD) {
				memcpy(rs->args + 60000, &zero, 4);
				s[n].count = 1;
				s[n].arg_off = 60000;
				s[n].arg_len = 4;
			}
			n++;
		}
		run_batch(rs, s, n, res, NULL);
		for (unsigned i = 0; i < n; i++) {
			CHECK(res[i] == -EACCES || res[i] == -ENOENT,
			      "%s of lease %llx (ours: %llx): %d (%s)",
			      s[i].opcode == KVS_OP_LOAD ? "LOAD" : "RELEASE",
			      (unsigned long long)s[i].lease, (unsigned long long)own, res[i],
			      kvs_strerror(res[i]));
			eacces += res[i] == -EACCES;
			enoent += res[i] == -ENOENT;
		}
	}
	memset(s, 0, sizeof(s));
	s[0].opcode = KVS_OP_RELEASE;
	s[0].lease = own;
	run_batch(rs, s, 1, res, NULL);
	CHECK_RES(res[0], 0, "RELEASE of our own lease after the probes");
	printf("# leases: %u ids around our own tried with LOAD or RELEASE: %llu -EACCES (leases "
	       "of other instances, left intact), %llu -ENOENT\n",
	       2 * span, (unsigned long long)eacces, (unsigned long long)enoent);
}

/* The good engine's keys from another namespace: never a hit, and our bytes never reach it. */
static void nspace(struct raw_sess *rs)
{
	struct kvs_sqe s;
	struct kvs_cqe e;
	unsigned hits = 0;

	for (unsigned p = 0; p < GPROMPTS; p++) {
		memset(&s, 0, sizeof(s));
		it_keys(rs->args, GMAXN, good_seed(p));
		s.opcode = KVS_OP_QUERY;
		s.count = GMAXN;
		s.arg_len = GMAXN * KVS_KEY_SIZE;
		s.flags = KVS_QUERY_NOLEASE;
		hits += (unsigned)raw_sess_op(rs, &s, &e);
	}
	CHECK(hits == 0, "%u hits on another namespace's keys", hits);
	/* The same keys, saved here with other bytes: the good engine checks it never sees them. */
	for (unsigned l = 0; l < LAYERS; l++)
		for (unsigned b = 0; b < GMAXN; b++)
			memset(seg_at(l, b), 0x66, SEG);
	for (unsigned p = 0; p < GPROMPTS; p++) {
		memset(&s, 0, sizeof(s));
		it_keys(rs->args, GMAXN, good_seed(p));
		for (uint32_t i = 0; i < GMAXN; i++)
			memcpy(rs->args + GMAXN * KVS_KEY_SIZE + 4 * i, &i, 4);
		s.opcode = KVS_OP_SAVE;
		s.count = GMAXN;
		s.arg_len = GMAXN * (KVS_KEY_SIZE + 4);
		CHECK(raw_sess_op(rs, &s, &e) >= 0, "SAVE of the good keys here: %s",
		      kvs_strerror(e.res));
	}
	printf("# namespace: %u prompts of another namespace queried, 0 hits; the same keys "
	       "saved here with other bytes\n",
	       GPROMPTS);
}

static bool session_ends(struct raw_sess *rs)
{
	return raw_eof(rs->fd, 5000);
}

static void indices(void)
{
	struct raw_sess rs;
	struct kvs_sqe s;
	struct kvs_cqe e;
	uint32_t junk = 0x7badf00d;
	uint64_t t0;

	/* SQ tail beyond capacity. */
	raw_sess_open(&rs, &d, KVS_ROLE_SCHEDULER, "hostile-idx-0", BAD_NS, 0, 1, 16);
	__atomic_store_n(rs.sq.p_tail, *rs.sq.p_head + shmq_ring_capacity(&rs.sq) + 1,
			 __ATOMIC_RELEASE);
	shmq_prod_wake(&rs.sq);
	CHECK(session_ends(&rs), "an SQ tail beyond capacity did not end the session");
	raw_sess_close(&rs);
	broken_sessions++;

	/*
	 * CQ head far beyond the tail.  kvstashd reads our head only when its
	 * cached one shows no room: the lie is found (and the session ended)
	 * once completions fill what the honest head left, never used before.
	 * (A head only a little ahead becomes true as the tail passes it: the
	 * engine then just stalls its own CQ.)
	 */
	raw_sess_open(&rs, &d, KVS_ROLE_SCHEDULER, "hostile-idx-1", BAD_NS, 0, 1, 16);
	__atomic_store_n(rs.cq.p_head, *rs.cq.p_tail + 0x40000000u, __ATOMIC_RELEASE);
	{
		bool ended = false;

		for (unsigned i = 0; i < 4 * rs.rep.cq_entries && !ended; i++) {
			memset(&s, 0, sizeof(s));
			s.user_data = 1 + i;
			raw_sess_submit(&rs, &s, 1);
			ended = raw_eof(rs.fd, 20);
		}
		CHECK(ended || session_ends(&rs),
		      "a CQ head beyond the tail did not end the session");
	}
	raw_sess_close(&rs);
	broken_sessions++;

	/* kvstashd's own words (SQ head, CQ tail) rewritten: it never reads them back. */
	raw_sess_open(&rs, &d, KVS_ROLE_SCHEDULER, "hostile-idx-2", BAD_NS, 0, 1, 16);
	for (unsigned i = 0; i < 50; i++) {
		/* Before the submit: kvstashd's next CQ commit must overwrite it. */
		__atomic_store_n(rs.cq.p_tail, junk + i, __ATOMIC_RELAXED);
		memset(&s, 0, sizeof(s));
		s.user_data = 100 + i;
		CHECK(raw_sess_submit(&rs, &s, 1) == 1, "submit");
		__atomic_store_n(rs.sq.p_head, junk + i, __ATOMIC_RELAXED);
		t0 = test_now_ns();
		while (__atomic_load_n(rs.cq.p_tail, __ATOMIC_ACQUIRE) == junk + i)
			CHECK(test_now_ns() - t0 < 5000000000ull,
			      "no CQE after a rewritten SQ head");
		CHECK(raw_sess_reap(&rs, &e, OP_TIMEOUT_MS) == 0 && e.user_data == 100 + i &&
			      e.res == 0,
		      "NOP after its SQ head and CQ tail were rewritten");
		/* Every SQE is consumed: the honest head, for our own producer's next check. */
		__atomic_store_n(rs.sq.p_head, *rs.sq.p_tail, __ATOMIC_RELEASE);
	}
	raw_sess_close(&rs);
	printf("# indices: SQ tail beyond capacity and CQ head beyond the tail ended their "
	       "sessions; kvstashd's own SQ head and CQ tail rewritten 50 times, ignored\n");
}

/* A page-first layout of @layers x @nb blocks of @seg bytes over one allocation. */
static void pf_layout(struct kvs_wire_mem *m, struct kvs_wire_layer *lay, unsigned layers,
		      unsigned nb, uint64_t seg, uint64_t size)
{
	memset(m, 0, sizeof(*m));
	m->kind = KVS_MEM_HOST_FD;
	m->size = size;
	memset(lay, 0, layers * sizeof(*lay));
	for (unsigned l = 0; l < layers; l++) {
		snprintf(lay[l].name, sizeof(lay[l].name), "layer.%u", l);
		lay[l].segments = 1;
		lay[l].offset = l * seg;
		lay[l].num_blocks = nb;
		lay[l].segment_bytes = seg;
		lay[l].block_stride = layers * seg;
	}
}

static void registers(void)
{
	const uint64_t size = 4 * 16 * 4096;
	struct kvs_wire_mem m;
	struct kvs_wire_layer lay[4];
	struct raw_sess rs;
	uint8_t *base;
	int fd = soak_memfd("kvstash-hostile-reg", size, &base), ufd, sv[2], r;
	struct kvs_sqe s;
	struct kvs_cqe e;

	raw_sess_open(&rs, &d, KVS_ROLE_WORKER, "hostile-reg", "hostile-reg/pf", 0, 1, 16);
	pf_layout(&m, lay, 4, 16, 4096, size);
	lay[2].offset = lay[1].offset;
	CHECK_RES(raw_sess_register(&rs, &m, 1, lay, 4, 0, &fd, 1), -ENOTUNIQ, "overlapping views");
	pf_layout(&m, lay, 4, 17, 4096, size);
	CHECK_RES(raw_sess_register(&rs, &m, 1, lay, 4, 0, &fd, 1), -ERANGE,
		  "views past the allocation");
	pf_layout(&m, lay, 4, 16, 4096, size);
	lay[3].offset = size - 4096 + 1;
	CHECK_RES(raw_sess_register(&rs, &m, 1, lay, 4, 0, &fd, 1), -ERANGE,
		  "a view starting near the end");
	pf_layout(&m, lay, 4, 16, 4096, size + 4096);
	CHECK_RES(raw_sess_register(&rs, &m, 1, lay, 4, 0, &fd, 1), -ERANGE,
		  "an allocation larger than its fd");
	ufd = memfd_create("kvstash-hostile-reg", MFD_CLOEXEC);
	CHECK(ufd >= 0 && ftruncate(ufd, (off_t)size) == 0, "memfd");
	pf_layout(&m, lay, 4, 16, 4096, size);
	CHECK_RES(raw_sess_register(&rs, &m, 1, lay, 4, 0, &ufd, 1), -EPERM, "an unsealed memfd");
	close(ufd);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	CHECK_RES(raw_sess_register(&rs, &m, 1, lay, 4, 0, &sv[0], 1), -EBADF,
		  "a socket as memory");
	close(sv[0]);
	close(sv[1]);
	CHECK(proc_map_count(d.pid, "kvstash-hostile-reg") == 0,
	      "kvstashd kept a mapping of refused memory");
	/* Another layout for a namespace that has one. */
	r = raw_sess_register(&rs, &m, 1, lay, 4, 0, &fd, 1);
	CHECK_RES(r, 0, "a valid REGISTER after the refusals");
	CHECK_RES(raw_sess_register(&rs, &m, 1, lay, 4, 0, &fd, 1), -EBUSY, "a second REGISTER");
	memset(&s, 0, sizeof(s));
	CHECK_RES(raw_sess_op(&rs, &s, &e), 0, "NOP after the refused REGISTERs");
	raw_sess_close(&rs);
	raw_sess_open(&rs, &d, KVS_ROLE_WORKER, "hostile-reg-2", "hostile-reg/pf", 0, 1, 16);
	pf_layout(&m, lay, 4, 16, 2048, size);
	CHECK_RES(raw_sess_register(&rs, &m, 1, lay, 4, 0, &fd, 1), -EXDEV,
		  "another layout in the namespace");
	raw_sess_close(&rs);
	CHECK(wait_map_count(d.pid, "kvstash-hostile-reg", 0, 5000) == 0,
	      "kvstashd kept a mapping of the closed sessions' memory");
	close(fd);
	munmap(base, size);
	printf("# register: overlapping views -ENOTUNIQ, views past the allocation and an "
	       "allocation past its fd -ERANGE, an unsealed memfd -EPERM, a socket -EBADF, a "
	       "second REGISTER -EBUSY, another layout -EXDEV; nothing of them mapped\n");
}

/* REGISTER / UNREGISTER storms over three sessions, valid and broken at random. */
static void register_storm(void)
{
	unsigned n = soak_env("HOSTILE_REGISTERS", 300), ok = 0, refused = 0;
	const uint64_t size = 2 * 8 * 4096;
	struct raw_sess rs[3];
	bool reg[3] = { false };
	uint8_t *base;
	int fd = soak_memfd("kvstash-hostile-storm", size, &base);

	for (unsigned i = 0; i < 3; i++) {
		char inst[32];

		snprintf(inst, sizeof(inst), "hostile-storm-%u", i);
		raw_sess_open(&rs[i], &d, KVS_ROLE_WORKER, inst, "hostile-storm/pf", 0, 1, 16);
	}
	for (unsigned it = 0; it < n; it++) {
		unsigned k = (unsigned)(rnd() % 3), how = (unsigned)(rnd() % 4);
		struct kvs_wire_mem m;
		struct kvs_wire_layer lay[2];
		int r;

		pf_layout(&m, lay, 2, 8, 4096, size);
		if (reg[k] && how == 0) {
			CHECK_RES(raw_sess_request(&rs[k], KVS_MSG_UNREGISTER), 0, "UNREGISTER");
			reg[k] = false;
			continue;
		}
		if (how == 1)
			lay[1].num_blocks = 9; /* past the allocation */
		else if (how == 2)
			lay[1].offset = 0; /* overlapping */
		r = raw_sess_register(&rs[k], &m, 1, lay, 2, 0, &fd, 1);
		if (reg[k])
			CHECK_RES(r, -EBUSY, "REGISTER while registered");
		else if (how == 1)
			CHECK_RES(r, -ERANGE, "REGISTER past the allocation");
		else if (how == 2)
			CHECK_RES(r, -ENOTUNIQ, "REGISTER of overlapping views");
		else
			CHECK_RES(r, 0, "REGISTER");
		reg[k] |= r == 0;
		ok += r == 0;
		refused += r != 0;
	}
	for (unsigned i = 0; i < 3; i++)
		raw_sess_close(&rs[i]);
	CHECK(wait_map_count(d.pid, "kvstash-hostile-storm", 0, 5000) == 0,
	      "mappings of the storm's memory left");
	close(fd);
	munmap(base, size);
	printf("# register storm: %u REGISTER/UNREGISTER over 3 sessions: %u registered, %u "
	       "refused with their -errno; no mapping left\n",
	       n, ok, refused);
}

/*
 * A HELLO of the churn.  kvstashd lets the sessions closed before go
 * asynchronously (their worker detaches them first), so on a loaded
 * machine the per-uid session bound may still count some of them and
 * refuse with -EUSERS: wait for them, boundedly.  Any other answer is
 * the test's.
 */
static int churn_hello(struct raw_sess *rs, const struct kvs_msg_hello *h)
{
	uint64_t t0 = test_now_ns();
	int r;

	while ((r = raw_sess_hello(rs, &d, h)) == -EUSERS && test_now_ns() - t0 < 10000000000ull) {
		close(rs->fd);
		usleep(1000);
	}
	return r;
}

/* Thousands of sessions, opened and dropped every way a client can. */
static void churn(void)
{
	unsigned n = soak_env("HOSTILE_SESSIONS", 5000), modes[6] = { 0 };
	int open_fds[64];
	unsigned nopen = 0;
	uint64_t t0 = test_now_ns();

	for (unsigned i = 0; i < n; i++) {
		unsigned mode = i % 6;
		struct kvs_msg_hello h;
		struct raw_sess rs;
		char inst[32];
		int r;

		snprintf(inst, sizeof(inst), "churn-%u", i);
		modes[mode]++;
		switch (mode) {
		case 0: /* no HELLO at all; some stay open a while */
			r = raw_connect(d.sock);
			CHECK(r >= 0, "connect: %s", strerror(-r));
			if (nopen == 64) {
				close(open_fds[0]);
				memmove(open_fds, open_fds + 1, 63 * sizeof(int));
				nopen--;
			}
			open_fds[nopen++] = r;
			break;
		case 1: /* HELLO, then gone */
			raw_hello_init(&h, KVS_ROLE_WORKER, inst, "churn/pf", 0, 1);
			CHECK_RES(churn_hello(&rs, &h), 0, "HELLO");
			raw_sess_close(&rs);
			break;
		case 2: /* a NOP in flight, never reaped */
			raw_hello_init(&h, KVS_ROLE_SCHEDULER, inst, "churn/pf", 0, 1);
			h.sq_entries = 8;
			CHECK_RES(churn_hello(&rs, &h), 0, "scheduler HELLO");
			{
				struct kvs_sqe s = { .user_data = 1 };

				raw_sess_submit(&rs, &s, 1);
			}
			raw_sess_close(&rs);
			break;
		case 3: /* half a HELLO */
			r = raw_connect(d.sock);
			CHECK(r >= 0, "connect");
			raw_hello_init(&h, KVS_ROLE_WORKER, inst, "churn/pf", 0, 1);
			h.hdr.size = 100;
			raw_send(r, &h, 100, NULL, 0);
			close(r);
			break;
		case 4: /* absurd ring and area sizes: clamped to the limits */
			raw_hello_init(&h, KVS_ROLE_WORKER, inst, "churn/pf", 0, 1);
			h.sq_entries = UINT32_MAX - (uint32_t)(rnd() % 3);
			h.cq_entries = (uint32_t)rnd();
			h.arg_bytes = rnd() | (1ull << 63);
			r = churn_hello(&rs, &h);
			CHECK_RES(r, 0, "HELLO with absurd sizes");
			CHECK(rs.rep.sq_entries == 4096 && rs.rep.arg_bytes == (64u << 20),
			      "absurd sizes gave SQ %u, arguments %llu", rs.rep.sq_entries,
			      (unsigned long long)rs.rep.arg_bytes);
			raw_sess_close(&rs);
			break;
		case 5: /* admin: STATS asked, the answer never read */
			raw_hello_init(&h, KVS_ROLE_ADMIN, NULL, NULL, 0, 1);
			CHECK_RES(churn_hello(&rs, &h), 0, "admin HELLO");
			{
				struct kvs_msg_hdr q = { .type = KVS_MSG_STATS,
							 .size = 16,
							 .seq = 2 };

				raw_send(rs.fd, &q, sizeof(q), NULL, 0);
			}
			raw_sess_close(&rs);
			break;
		}
	}
	for (unsigned i = 0; i < nopen; i++)
		close(open_fds[i]);
	printf("# churn: %u sessions in %.1f s: %u without HELLO (up to 64 open at once), %u "
	       "HELLO then gone, %u gone with a NOP in flight, %u half a HELLO, %u absurd sizes "
	       "(clamped), %u admin gone mid-answer\n",
	       n, (test_now_ns() - t0) / 1e9, modes[0], modes[1], modes[2], modes[3], modes[4],
	       modes[5]);
}

int main(void)
{
	unsigned secs = soak_env("HOSTILE_SECONDS", 3);
	struct raw_sess g, l;
	struct soak_res base, r;
	uint64_t t[4], o[4];
	const char *names[3] = { "before", "during", "after" };
	int maps;

	it_watchdog(900);
	/*
	 * An instance can pin max_leases x max_keys blocks until its leases
	 * expire: kept well below the pool here, so the well-behaved engine's
	 * SAVEs always find room (see docs/RELIABILITY.md).
	 */
	it_start(&d, "[pool]\nsize = 32M\nextent_size = 1M\n[session]\nmax_keys = 32\n"
		     "[lease]\nmax_leases = 16\n");
	sh = it_shared(sizeof(*sh));
	sh->d = &d;
	mem_fd = soak_memfd("kvstash-hostile", MEM_BYTES, &mem);
	memset(mem, GUARD_BYTE, MEM_BYTES);
	for (unsigned l0 = 0; l0 < LAYERS; l0++)
		for (unsigned b = 0; b < BLOCKS; b++)
			memset(seg_at(l0, b), (int)(l0 * BLOCKS + b), SEG);
	protocol_errors0 = it_stats(&d).protocol_errors;

	it_spawn(good, sh, 0);
	while (!__atomic_load_n(&sh->ops[PH_BASE], __ATOMIC_RELAXED))
		usleep(1000);
	t[0] = test_now_ns();
	o[0] = sh->ops[PH_BASE];
	sleep(secs);
	t[1] = test_now_ns();
	__atomic_store_n(&sh->phase, PH_ATTACK, __ATOMIC_RELEASE);

	open_guarded(&g, "hostile-g");
	open_guarded(&l, "hostile-l");
	storm(&g);
	flip(&g);
	leases(&l);
	nspace(&l);
	indices();
	registers();
	register_storm();
	churn();
	check_guards("every attack");

	t[2] = test_now_ns();
	__atomic_store_n(&sh->phase, PH_AFTER, __ATOMIC_RELEASE);
	sleep(secs);
	t[3] = test_now_ns();
	__atomic_store_n(&sh->phase, PH_STOP, __ATOMIC_RELEASE);
	it_wait_all();

	/* Only our two guarded sessions are left, and everything else is gone. */
	/* (Leases: SQEs the flipper rewrote into QUERYs may hold some.) */
	r = soak_settle(&d, 2, UINT64_MAX, -1, 2, -1, 10000);
	maps = wait_map_count(d.pid, GUARDED_MAP, 2, 5000);
	CHECK(r.g.sessions_live == 2 && r.regions == 2 && maps == 2,
	      "after the attacks: %llu sessions, %d regions, %d mappings (2 expected)",
	      (unsigned long long)r.g.sessions_live, r.regions, maps);
	CHECK(r.g.protocol_errors - protocol_errors0 == broken_sessions,
	      "%llu sessions ended for protocol errors, %u broke the protocol",
	      (unsigned long long)(r.g.protocol_errors - protocol_errors0), broken_sessions);
	raw_sess_close(&g);
	raw_sess_close(&l);
	check_guards("the sessions closed");
	base = soak_settle(&d, 0, 0, -1, 0, -1, 10000);
	maps = wait_map_count(d.pid, GUARDED_MAP, 0, 5000);
	CHECK(base.g.sessions_live == 0 && base.regions == 0 && maps == 0,
	      "at the end: %llu sessions, %d regions, %d mappings",
	      (unsigned long long)base.g.sessions_live, base.regions, maps);
	o[1] = sh->ops[PH_BASE];
	for (unsigned p = 0; p < 3; p++) {
		uint64_t ops = p == 0 ? o[1] - o[0] : sh->ops[p];
		double s = (t[p + 1] - t[p]) / 1e9;

		printf("# well-behaved engine %s the attacks: %llu ops in %.1f s = %.0f ops/s, "
		       "%llu loads (%llu blocks byte-exact), 0 errors\n",
		       names[p], (unsigned long long)ops, s, ops / s,
		       (unsigned long long)sh->loads[p], (unsigned long long)sh->blocks[p]);
		CHECK(ops > 0, "the well-behaved engine made no progress %s the attacks", names[p]);
	}
	it_stop(&d);
	it_ok("a hostile engine's storm, flips, lease and namespace probes, broken indices, bad "
	      "registrations and %u sessions: every SQE answered with a documented result, no "
	      "guard byte touched, the well-behaved engine exact and served throughout",
	      soak_env("HOSTILE_SESSIONS", 5000));
	return 0;
}
