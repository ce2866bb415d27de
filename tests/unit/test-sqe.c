/* SPDX-License-Identifier: MIT */
/*
 * SQE validation and argument decoding (sidecar/wire/sqe.c): every opcode's
 * good form, then each rule of kvstash/abi.h's error list broken on its
 * own, and the copy discipline: decoded arguments live in the private
 * copy, so an engine rewriting the shared area afterwards changes nothing.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <kvstash/abi.h>
#include <kvstash/wire.h>

#include "wire/sqe.h"
#include "unit.h"

#define AREA 4096u
#define MAX_KEYS 64u
#define NUM_BLOCKS 100u
#define NR_LAYERS 10u

static uint8_t area[AREA] __attribute__((aligned(64)));
static uint64_t copy[(MAX_KEYS * (KVS_KEY_SIZE + 4) + 7) / 8];

#define NR_FENCES 16u

static const struct sqe_limits worker = {
	.role = KVS_ROLE_WORKER,
	.max_keys = MAX_KEYS,
	.num_blocks = NUM_BLOCKS,
	.nr_layers = NR_LAYERS,
	.nr_fences = NR_FENCES,
};

/* A worker session without fence slots (no KVS_HELLO_FENCES). */
static const struct sqe_limits unfenced = {
	.role = KVS_ROLE_WORKER,
	.max_keys = MAX_KEYS,
	.num_blocks = NUM_BLOCKS,
	.nr_layers = NR_LAYERS,
};

static const struct sqe_limits scheduler = {
	.role = KVS_ROLE_SCHEDULER,
	.max_keys = MAX_KEYS,
	.num_blocks = 0,
	.nr_layers = 0,
};

/* Keys 0x10.., 0x20.., ... and block ids 7, 8, 9, ... at @off. */
static void fill_save(uint32_t off, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = 7 + i;

		memset(area + off + i * KVS_KEY_SIZE, (int)(0x10 * (i + 1)), KVS_KEY_SIZE);
		memcpy(area + off + n * KVS_KEY_SIZE + i * 4, &id, 4);
	}
}

static void put_ids(uint32_t off, const uint32_t *ids, uint32_t n)
{
	memcpy(area + off, ids, n * sizeof(*ids));
}

static struct kvs_sqe sqe_save(uint32_t off, uint32_t n)
{
	fill_save(off, n);
	return (struct kvs_sqe){ .opcode = KVS_OP_SAVE, .count = n, .user_data = 1, .arg_off = off,
				 .arg_len = n * (KVS_KEY_SIZE + 4) };
}

static struct kvs_sqe sqe_query(uint32_t off, uint32_t n)
{
	fill_save(off, n);
	return (struct kvs_sqe){ .opcode = KVS_OP_QUERY, .count = n, .arg_off = off,
				 .arg_len = n * KVS_KEY_SIZE, .req_id = 99 };
}

static struct kvs_sqe sqe_load(uint32_t off, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = 20 + i;

		put_ids(off + 4 * i, &id, 1);
	}
	return (struct kvs_sqe){ .opcode = KVS_OP_LOAD, .count = n, .arg_off = off,
				 .arg_len = n * 4, .lease = 5 };
}

static int decode(const struct kvs_sqe *s, const struct sqe_limits *lim, struct sqe_args *a)
{
	struct sqe_args local;

	return sqe_decode(s, area, AREA, lim, copy, a ? a : &local);
}

static bool in_copy(const void *p)
{
	return (const uint8_t *)p >= (const uint8_t *)copy &&
	       (const uint8_t *)p < (const uint8_t *)copy + sizeof(copy);
}

/* ---- good SQEs -------------------------------------------------------- */

START_TEST(test_nop)
{
	struct kvs_sqe s = { .opcode = KVS_OP_NOP, .user_data = ~0ull };
	struct sqe_args a;

	memset(&a, 0xab, sizeof(a));
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_ptr_null(a.keys);
	ck_assert_ptr_null(a.block_ids);
	ck_assert_uint_eq(a.n, 0);
	ck_assert_int_eq(decode(&s, &scheduler, &a), 0);
}
END_TEST

START_TEST(test_save)
{
	struct kvs_sqe s = sqe_save(128, 3);
	struct sqe_args a;

	ck_assert_uint_eq(sqe_arg_bytes(KVS_OP_SAVE, 3), 60);
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_uint_eq(a.n, 3);
	ck_assert(in_copy(a.keys));
	ck_assert(in_copy(a.block_ids));
	ck_assert_uint_eq(a.keys[0], 0x10);
	ck_assert_uint_eq(a.keys[2 * KVS_KEY_SIZE + 15], 0x30);
	ck_assert_ptr_eq(a.block_ids, (const uint32_t *)(a.keys + 3 * KVS_KEY_SIZE));
	ck_assert_uint_eq(a.block_ids[0], 7);
	ck_assert_uint_eq(a.block_ids[2], 9);
	ck_assert_uint_eq(a.layer_begin, 0);
	ck_assert_uint_eq(a.layer_count, 0);
	/* Arguments need not be aligned in the area: they are copied out. */
	s = sqe_save(131, 2);
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_uint_eq(a.block_ids[1], 8);
}
END_TEST

START_TEST(test_query)
{
	struct kvs_sqe s = sqe_query(0, 2);
	struct sqe_args a;

	ck_assert_uint_eq(sqe_arg_bytes(KVS_OP_QUERY, 2), 32);
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_uint_eq(a.n, 2);
	ck_assert(in_copy(a.keys));
	ck_assert_ptr_null(a.block_ids);
	ck_assert_uint_eq(a.keys[KVS_KEY_SIZE], 0x20);
	s.flags = KVS_QUERY_NOLEASE;
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	/* A scheduler queries, with nothing registered. */
	ck_assert_int_eq(decode(&s, &scheduler, &a), 0);
}
END_TEST

/*
 * A fetching QUERY may carry a node hint after its keys: a NUL-terminated
 * string padded with zeros to 8s, at most KVS_FETCH_HINT_MAX bytes, read
 * from the copy; anything else about it is malformed.
 */
START_TEST(test_query_fetch_hint)
{
	static const char hint[] = "10.9.0.2:7471"; /* 14 bytes with its NUL: 16 padded */
	struct kvs_sqe s = sqe_query(0, 2);
	struct sqe_args a;

	/* No hint: the registry says where. */
	s.flags = KVS_QUERY_FETCH;
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_ptr_null(a.hint);
	memset(area + 32, 0, 64);
	memcpy(area + 32, hint, sizeof(hint));
	s.arg_len = 32 + 16;
	ck_assert_int_eq(decode(&s, &scheduler, &a), 0);
	ck_assert(in_copy(a.hint));
	ck_assert_str_eq(a.hint, hint);
	ck_assert_uint_eq(a.n, 2);
	/* Changing the shared bytes afterwards changes nothing decoded. */
	area[32] = '9';
	ck_assert_str_eq(a.hint, hint);
	area[32] = '1';
	/* Not a multiple of 8, too long, no NUL, empty, bytes after the NUL. */
	s.arg_len = 32 + 15;
	ck_assert_int_eq(decode(&s, &worker, &a), -EINVAL);
	s.arg_len = 32 + KVS_FETCH_HINT_MAX + 8;
	ck_assert_int_eq(decode(&s, &worker, &a), -EINVAL);
	memset(area + 32, 'x', 64);
	s.arg_len = 32 + KVS_FETCH_HINT_MAX;
	ck_assert_int_eq(decode(&s, &worker, &a), -EINVAL);
	memset(area + 32, 0, 64);
	s.arg_len = 32 + 8;
	ck_assert_int_eq(decode(&s, &worker, &a), -EINVAL);
	memcpy(area + 32, "1.2.3", 6);
	area[39] = 'z';
	ck_assert_int_eq(decode(&s, &worker, &a), -EINVAL);
	area[39] = 0;
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_str_eq(a.hint, "1.2.3");
	/* A hint without the fetch flag is just a wrong length; fetch with cluster is refused. */
	s.flags = 0;
	ck_assert_int_eq(decode(&s, &worker, &a), -EINVAL);
	s.flags = KVS_QUERY_FETCH | KVS_QUERY_CLUSTER;
	s.arg_len = 32;
	ck_assert_int_eq(decode(&s, &worker, &a), -EINVAL);
}
END_TEST

START_TEST(test_load)
{
	struct kvs_sqe s = sqe_load(64, 4);
	struct sqe_args a;

	ck_assert_uint_eq(sqe_arg_bytes(KVS_OP_LOAD, 4), 16);
	/* layer_count 0: every layer. */
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_uint_eq(a.n, 4);
	ck_assert(in_copy(a.block_ids));
	ck_assert_ptr_null(a.keys);
	ck_assert_uint_eq(a.block_ids[3], 23);
	ck_assert_uint_eq(a.layer_begin, 0);
	ck_assert_uint_eq(a.layer_count, NR_LAYERS);
	/* From a layer to the end. */
	s.layer_begin = 3;
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_uint_eq(a.layer_begin, 3);
	ck_assert_uint_eq(a.layer_count, NR_LAYERS - 3);
	/* An explicit range, up to the last layer exactly. */
	s.layer_begin = 2;
	s.layer_count = NR_LAYERS - 2;
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_uint_eq(a.layer_count, NR_LAYERS - 2);
	s.layer_begin = NR_LAYERS - 1;
	s.layer_count = 1;
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_uint_eq(a.layer_begin, NR_LAYERS - 1);
	ck_assert_uint_eq(a.layer_count, 1);
}
END_TEST

START_TEST(test_release_flush)
{
	struct kvs_sqe s = { .opcode = KVS_OP_RELEASE, .lease = 12345 };
	struct sqe_args a;

	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_int_eq(decode(&s, &scheduler, &a), 0);
	ck_assert_uint_eq(a.n, 0);
	s = (struct kvs_sqe){ .opcode = KVS_OP_FLUSH };
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	s.flags = KVS_FLUSH_INSTANCE;
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert_uint_eq(sqe_arg_bytes(KVS_OP_FLUSH, 5), 0);
	ck_assert_uint_eq(sqe_arg_bytes(KVS_OP_RELEASE, 5), 0);
	ck_assert_uint_eq(sqe_arg_bytes(KVS_OP_NOP, 5), 0);
}
END_TEST

/* ---- rules -------------------------------------------------------------- */

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define OP(op)	      (1u << (op))
#define ALL_OPS	      (OP(KVS_OP_LAST + 1) - 1)

/* An SQE of @op with @n arguments (2 when 0), good for the worker. */
static struct kvs_sqe make(uint8_t op, uint32_t n)
{
	n = n ? n : 2;
	switch (op) {
	case KVS_OP_SAVE:
		return sqe_save(0, n);
	case KVS_OP_QUERY:
		return sqe_query(0, n);
	case KVS_OP_LOAD:
		return sqe_load(0, n);
	case KVS_OP_RELEASE:
		return (struct kvs_sqe){ .opcode = op, .lease = 3 };
	default:
		return (struct kvs_sqe){ .opcode = op };
	}
}

/* Every opcode's good SQE, for rules that apply to all of them. */
static struct kvs_sqe good(uint8_t op)
{
	return make(op, 2);
}

/* A field of struct kvs_sqe, by place and width, and a value for it. */
struct field_set {
	const char *name; /* NULL: no field */
	size_t off, size;
	uint64_t value;
};
/* clang-format off */
#define FIELD(f, v) { #f, offsetof(struct kvs_sqe, f), sizeof(((struct kvs_sqe *)0)->f), (v) }
/* clang-format on */

/* The low bytes of the value: the ABI, and so this test, is little-endian only. */
static void set_field(struct kvs_sqe *s, const struct field_set *f)
{
	if (f->name)
		memcpy((uint8_t *)s + f->off, &f->value, f->size);
}

/*
 * One rule: the SQE of @op (with @n arguments) changed by up to two field
 * settings, decoded with @lim, gives @want.
 */
struct rule_case {
	const char *what;
	uint8_t op;
	uint32_t n;
	struct field_set set[2];
	const struct sqe_limits *lim;
	int want;
};

static void check_rules(const struct rule_case *rules, size_t nr)
{
	for (size_t i = 0; i < nr; i++) {
		const struct rule_case *r = &rules[i];
		struct kvs_sqe s = make(r->op, r->n);

		set_field(&s, &r->set[0]);
		set_field(&s, &r->set[1]);
		ck_assert_msg(decode(&s, r->lim, NULL) == r->want, "%s: %d, want %d", r->what,
			      decode(&s, r->lim, NULL), r->want);
	}
}

START_TEST(test_opcode)
{
	struct kvs_sqe s = { 0 };

	static const uint8_t bad[] = { KVS_OP_LAST + 1, 6, 0x7f, 0x80, 0xff };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		s.opcode = bad[i];
		ck_assert_int_eq(decode(&s, &worker, NULL), -EOPNOTSUPP);
		ck_assert_int_eq(decode(&s, &scheduler, NULL), -EOPNOTSUPP);
	}
}
END_TEST

/* A scheduler with a layout (it never has one, but the role alone decides). */
static const struct sqe_limits scheduler_layout = {
	.role = KVS_ROLE_SCHEDULER,
	.max_keys = MAX_KEYS,
	.num_blocks = NUM_BLOCKS,
	.nr_layers = NR_LAYERS,
};

/* A worker whose instance has registered nothing. */
static const struct sqe_limits unregistered = {
	.role = KVS_ROLE_WORKER,
	.max_keys = MAX_KEYS,
};

START_TEST(test_scheduler_role)
{
	static const struct rule_case rules[] = {
		{ "scheduler SAVE", KVS_OP_SAVE, 1, {}, &scheduler, -EPERM },
		{ "scheduler LOAD", KVS_OP_LOAD, 1, {}, &scheduler, -EPERM },
		{ "scheduler LOAD, with a layout", KVS_OP_LOAD, 1, {}, &scheduler_layout, -EPERM },
		{ "scheduler SAVE, with a layout", KVS_OP_SAVE, 1, {}, &scheduler_layout, -EPERM },
	};

	check_rules(rules, ARRAY_SIZE(rules));
}
END_TEST

START_TEST(test_flags)
{
	for (uint8_t op = 0; op <= KVS_OP_LAST; op++) {
		struct kvs_sqe s = good(op);
		uint8_t allowed = op == KVS_OP_QUERY   ? KVS_QUERY_NOLEASE | KVS_QUERY_CLUSTER |
								 KVS_QUERY_DRAM | KVS_QUERY_FETCH
				  : op == KVS_OP_FLUSH ? KVS_FLUSH_INSTANCE | KVS_FLUSH_CLUSTER
				  : op == KVS_OP_SAVE  ? KVS_SAVE_AFTER
				  : op == KVS_OP_LOAD  ? KVS_LOAD_PROGRESS
						       : 0;

		if (op == KVS_OP_LOAD)
			s.layer_count = 1; /* PROGRESS names its layer count */
		ck_assert_int_eq(decode(&s, &worker, NULL), 0);
		for (unsigned bit = 0; bit < 8; bit++) {
			s.flags = (uint8_t)(1u << bit);
			ck_assert_msg(decode(&s, &worker, NULL) == ((s.flags & allowed) ? 0 : -EINVAL),
				      "op %u flag 0x%x", op, s.flags);
		}
		s.flags = (uint8_t)(allowed | 0x80);
		ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
	}
}
END_TEST

/* A field set on its own in the good SQE of each opcode in @ops: -EINVAL. */
struct field_case {
	struct field_set set;
	uint32_t ops;
};

static void check_fields(const struct field_case *cases, size_t nr)
{
	for (size_t i = 0; i < nr; i++) {
		for (uint8_t op = 0; op <= KVS_OP_LAST; op++) {
			struct kvs_sqe s = good(op);

			if (!(cases[i].ops & OP(op)))
				continue;
			set_field(&s, &cases[i].set);
			ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u %s", op,
				      cases[i].set.name);
		}
	}
}

START_TEST(test_reserved)
{
	static const struct field_case reserved[] = {
		{ FIELD(resv0, 1), ALL_OPS },
		{ FIELD(fence_slot, 1), ALL_OPS },
		{ FIELD(fence_value, 1u << 31), ALL_OPS },
		{ FIELD(resv2, 1), ALL_OPS },
	};

	check_fields(reserved, ARRAY_SIZE(reserved));
}
END_TEST

/* Fields an opcode does not use must be zero. */
START_TEST(test_unused_fields)
{
	static const uint32_t no_args =
		ALL_OPS & ~(OP(KVS_OP_SAVE) | OP(KVS_OP_QUERY) | OP(KVS_OP_LOAD));
	static const struct field_case unused[] = {
		{ FIELD(count, 1), no_args },
		{ FIELD(arg_off, 8), no_args },
		{ FIELD(arg_len, 16), no_args },
		{ FIELD(lease, 1), ALL_OPS & ~(OP(KVS_OP_LOAD) | OP(KVS_OP_RELEASE)) },
		{ FIELD(req_id, 1), ALL_OPS & ~OP(KVS_OP_QUERY) },
		{ FIELD(layer_begin, 1), ALL_OPS & ~OP(KVS_OP_LOAD) },
		{ FIELD(layer_count, 1), ALL_OPS & ~OP(KVS_OP_LOAD) },
	};

	check_fields(unused, ARRAY_SIZE(unused));
	/* user_data is anything, for every opcode. */
	for (uint8_t op = 0; op <= KVS_OP_LAST; op++) {
		struct kvs_sqe s = good(op);

		s.user_data = ~0ull;
		ck_assert_int_eq(decode(&s, &worker, NULL), 0);
	}
}
END_TEST

START_TEST(test_count)
{
	static const uint8_t ops[] = { KVS_OP_SAVE, KVS_OP_QUERY, KVS_OP_LOAD };

	for (unsigned i = 0; i < 3; i++) {
		uint8_t op = ops[i];
		struct kvs_sqe s = good(op);
		uint32_t max_ids[MAX_KEYS];

		s.count = 0;
		s.arg_len = 0;
		ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u count 0", op);
		/* max_keys is allowed, one more is E2BIG (whatever arg_len says). */
		for (uint32_t k = 0; k < MAX_KEYS; k++)
			max_ids[k] = k;
		if (op == KVS_OP_LOAD)
			put_ids(0, max_ids, MAX_KEYS);
		else
			fill_save(0, MAX_KEYS);
		s.count = MAX_KEYS;
		s.arg_len = (uint32_t)sqe_arg_bytes(op, MAX_KEYS);
		ck_assert_msg(decode(&s, &worker, NULL) == 0, "op %u max_keys", op);
		s.count = MAX_KEYS + 1;
		s.arg_len = (uint32_t)sqe_arg_bytes(op, MAX_KEYS + 1);
		ck_assert_msg(decode(&s, &worker, NULL) == -E2BIG, "op %u max_keys + 1", op);
		s.count = UINT32_MAX;
		ck_assert_msg(decode(&s, &worker, NULL) == -E2BIG, "op %u count 2^32-1", op);
	}
}
END_TEST

START_TEST(test_arg_len)
{
	static const uint8_t ops[] = { KVS_OP_SAVE, KVS_OP_QUERY, KVS_OP_LOAD };

	for (unsigned i = 0; i < 3; i++) {
		struct kvs_sqe s = good(ops[i]);
		uint32_t len = s.arg_len;

		s.arg_len = len - 1;
		ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
		s.arg_len = len + 1;
		ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
		s.arg_len = 0;
		ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
		/* A SAVE's length is keys and ids, not keys alone. */
		s.arg_len = s.count * KVS_KEY_SIZE;
		if (ops[i] != KVS_OP_QUERY)
			ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
	}
}
END_TEST

/*
 * Where the arguments may lie: @base (the area's size, or 2^32) plus
 * @len_mul times the arguments' length plus @add, for each opcode.
 */
static const struct window_case {
	const char *what;
	uint64_t base;
	int len_mul;
	int64_t add;
	int want;
} windows[] = {
	/* Ending on the area's last byte is fine; one byte further is not. */
	{ "ending on the last byte", AREA, -1, 0, 0 },
	{ "one byte past the end", AREA, -1, 1, -EFAULT },
	{ "at the end", AREA, 0, 0, -EFAULT },
	/* Offsets near 2^32: the end must not wrap in 32 bits to a small number. */
	{ "off + len == 2^32", 1ull << 32, -1, 0, -EFAULT },
	{ "off 2^32 - 8", 1ull << 32, 0, -8, -EFAULT },
	{ "off 2^32 - 1", 1ull << 32, 0, -1, -EFAULT },
};

START_TEST(test_arg_window)
{
	static const uint8_t ops[] = { KVS_OP_SAVE, KVS_OP_QUERY, KVS_OP_LOAD };
	/* An area smaller than one argument block (a QUERY of 2 keys: 32 bytes). */
	static const struct {
		uint64_t area;
		int want;
	} small[] = { { 31, -EFAULT }, { 32, 0 }, { 0, -EFAULT } };

	for (unsigned i = 0; i < ARRAY_SIZE(ops); i++) {
		struct kvs_sqe s = good(ops[i]);
		uint32_t len = s.arg_len;

		memmove(area + AREA - len, area, len);
		for (unsigned w = 0; w < ARRAY_SIZE(windows); w++) {
			const struct window_case *c = &windows[w];

			s.arg_off = (uint32_t)(c->base + (int64_t)c->len_mul * len + c->add);
			ck_assert_msg(decode(&s, &worker, NULL) == c->want, "op %u %s (arg_off %u)",
				      ops[i], c->what, s.arg_off);
		}
	}
	for (unsigned i = 0; i < ARRAY_SIZE(small); i++) {
		struct kvs_sqe s = sqe_query(0, 2);
		struct sqe_args a;

		ck_assert_msg(sqe_decode(&s, area, small[i].area, &worker, copy, &a) ==
				      small[i].want,
			      "area of %llu bytes", (unsigned long long)small[i].area);
	}
}
END_TEST

START_TEST(test_unsealed)
{
	static const struct rule_case rules[] = {
		{ "SAVE, nothing registered", KVS_OP_SAVE, 1, {}, &unregistered, -KVS_EUNSEALED },
		{ "LOAD, nothing registered", KVS_OP_LOAD, 1, {}, &unregistered, -KVS_EUNSEALED },
		/* QUERY, RELEASE, FLUSH and NOP need no registration. */
		{ "QUERY, nothing registered", KVS_OP_QUERY, 1, {}, &unregistered, 0 },
		{ "RELEASE, nothing registered", KVS_OP_RELEASE, 0, {}, &unregistered, 0 },
		{ "FLUSH, nothing registered", KVS_OP_FLUSH, 0, {}, &unregistered, 0 },
	};

	check_rules(rules, ARRAY_SIZE(rules));
}
END_TEST

START_TEST(test_block_ids)
{
	/* Three block ids; the one past the end is in each position once. */
	static const struct {
		uint8_t op;
		uint32_t ids[3];
		int want;
	} cases[] = {
		/* SAVE: ids follow the keys. */
		{ KVS_OP_SAVE, { 0, NUM_BLOCKS - 1, 5 }, 0 },
		{ KVS_OP_SAVE, { 0, NUM_BLOCKS - 1, NUM_BLOCKS }, -ERANGE },
		{ KVS_OP_SAVE, { 0, NUM_BLOCKS - 1, UINT32_MAX }, -ERANGE },
		{ KVS_OP_LOAD, { 0, NUM_BLOCKS - 1, 5 }, 0 },
		{ KVS_OP_LOAD, { NUM_BLOCKS, NUM_BLOCKS - 1, 5 }, -ERANGE },
	};
	struct kvs_sqe s;

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		s = make(cases[i].op, 3);
		put_ids(cases[i].op == KVS_OP_SAVE ? 3 * KVS_KEY_SIZE : 0, cases[i].ids, 3);
		ck_assert_msg(decode(&s, &worker, NULL) == cases[i].want, "op %u ids %u %u %u",
			      cases[i].op, cases[i].ids[0], cases[i].ids[1], cases[i].ids[2]);
	}
	/* QUERY carries keys only: nothing to range-check. */
	memset(area, 0xff, 64);
	s = sqe_query(64, 2);
	memset(area + 64, 0xff, 32);
	ck_assert_int_eq(decode(&s, &worker, NULL), 0);
}
END_TEST

START_TEST(test_layer_range)
{
	/* LOAD layer ranges outside the NR_LAYERS the layout has. */
	static const struct {
		uint32_t begin, count;
	} bad[] = {
		{ NR_LAYERS, 0 },
		{ NR_LAYERS, 1 },
		{ 0, NR_LAYERS + 1 },
		{ NR_LAYERS - 1, 2 },
		/* begin + count wrapping 32 bits to a small number. */
		{ 1, UINT32_MAX },
		{ UINT32_MAX, 2 },
		{ UINT32_MAX, 0 },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		struct kvs_sqe s = sqe_load(0, 1);

		s.layer_begin = bad[i].begin;
		s.layer_count = bad[i].count;
		ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "layers %u + %u", bad[i].begin,
			      bad[i].count);
	}
}
END_TEST

START_TEST(test_lease_zero)
{
	static const struct rule_case rules[] = {
		{ "LOAD of lease 0", KVS_OP_LOAD, 1, { FIELD(lease, 0) }, &worker, -ENOENT },
		{ "RELEASE of lease 0", KVS_OP_RELEASE, 0, { FIELD(lease, 0) }, &worker, -ENOENT },
		{ "RELEASE of lease 0 by a scheduler",
		  KVS_OP_RELEASE,
		  0,
		  { FIELD(lease, 0) },
		  &scheduler,
		  -ENOENT },
	};

	check_rules(rules, ARRAY_SIZE(rules));
}
END_TEST

/*
 * The arguments are read once, into the copy: rewriting the shared area
 * after the decode (an engine racing the daemon) changes nothing the
 * daemon goes on to use, and cannot turn a checked block id bad.
 */
START_TEST(test_copy_isolation)
{
	struct kvs_sqe s = sqe_save(256, 4);
	uint8_t keys_before[4 * KVS_KEY_SIZE];
	struct sqe_args a;

	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	memcpy(keys_before, a.keys, sizeof(keys_before));
	memset(area + 256, 0xee, 4 * (KVS_KEY_SIZE + 4));
	ck_assert_int_eq(memcmp(a.keys, keys_before, sizeof(keys_before)), 0);
	for (uint32_t i = 0; i < 4; i++)
		ck_assert_uint_eq(a.block_ids[i], 7 + i);

	s = sqe_load(512, 2);
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	memset(area + 512, 0xff, 8);
	ck_assert_uint_eq(a.block_ids[0], 20);
	ck_assert_uint_eq(a.block_ids[1], 21);
	ck_assert(in_copy(a.block_ids) && in_copy(a.block_ids + 1));
}
END_TEST

/* A refused SQE reports the first rule broken, in the order the header lists them. */
/*
 * SAVE AFTER and LOAD PROGRESS: their fence slot inside the session's
 * slots (none: every slot is outside), a LOAD's layer count explicit; the
 * fence fields come out decoded; the flags on other opcodes, or the
 * fields without the flag, are -EINVAL (test_flags, test_reserved).
 */
START_TEST(test_fences)
{
	static const struct rule_case rules[] = {
		{ "SAVE AFTER, slot 0",
		  KVS_OP_SAVE,
		  2,
		  { FIELD(flags, KVS_SAVE_AFTER), FIELD(fence_value, 0xfffffff0u) },
		  &worker,
		  0 },
		{ "SAVE AFTER, last slot",
		  KVS_OP_SAVE,
		  2,
		  { FIELD(flags, KVS_SAVE_AFTER), FIELD(fence_slot, NR_FENCES - 1) },
		  &worker,
		  0 },
		{ "SAVE AFTER, slot past the last",
		  KVS_OP_SAVE,
		  2,
		  { FIELD(flags, KVS_SAVE_AFTER), FIELD(fence_slot, NR_FENCES) },
		  &worker,
		  -EINVAL },
		{ "SAVE AFTER without fence slots",
		  KVS_OP_SAVE,
		  2,
		  { FIELD(flags, KVS_SAVE_AFTER) },
		  &unfenced,
		  -EINVAL },
		{ "LOAD PROGRESS of layer_count 0",
		  KVS_OP_LOAD,
		  2,
		  { FIELD(flags, KVS_LOAD_PROGRESS), FIELD(layer_count, 0) },
		  &worker,
		  -EINVAL },
		{ "LOAD PROGRESS without fence slots",
		  KVS_OP_LOAD,
		  2,
		  { FIELD(flags, KVS_LOAD_PROGRESS), FIELD(layer_count, 1) },
		  &unfenced,
		  -EINVAL },
		{ "QUERY with SAVE AFTER's bit set (KVS_QUERY_NOLEASE: fine) and a slot",
		  KVS_OP_QUERY,
		  2,
		  { FIELD(flags, KVS_QUERY_NOLEASE), FIELD(fence_slot, 1) },
		  &worker,
		  -EINVAL },
	};
	struct kvs_sqe s;
	struct sqe_args a;

	check_rules(rules, ARRAY_SIZE(rules));
	s = make(KVS_OP_LOAD, 3); /* after the rules: they write their own arguments */
	s.flags = KVS_LOAD_PROGRESS;
	s.fence_slot = 5;
	s.fence_value = 77;
	s.layer_count = 4;
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert(a.fenced);
	ck_assert_uint_eq(a.fence_slot, 5);
	ck_assert_uint_eq(a.fence_value, 77);
	ck_assert_uint_eq(a.layer_count, 4);
	s = make(KVS_OP_LOAD, 3);
	ck_assert_int_eq(decode(&s, &worker, &a), 0);
	ck_assert(!a.fenced);
}
END_TEST

START_TEST(test_precedence)
{
	static const struct rule_case rules[] = {
		/* Unknown opcode before anything else. */
		{ "opcode 9 with every flag",
		  KVS_OP_SAVE,
		  1,
		  { FIELD(opcode, 9), FIELD(flags, 0xff) },
		  &scheduler,
		  -EOPNOTSUPP },
		/* Role before fields. */
		{ "scheduler SAVE with every flag",
		  KVS_OP_SAVE,
		  1,
		  { FIELD(flags, 0xff) },
		  &scheduler,
		  -EPERM },
		/* A malformed SQE is -EINVAL even when nothing is registered. */
		{ "LOAD with a fence value but no PROGRESS, nothing registered",
		  KVS_OP_LOAD,
		  1,
		  { FIELD(fence_value, 1) },
		  &unregistered,
		  -EINVAL },
	};

	check_rules(rules, ARRAY_SIZE(rules));
}
END_TEST

UNIT_TESTS(test_nop, test_save, test_query, test_query_fetch_hint, test_load, test_release_flush, test_opcode,
	   test_scheduler_role, test_flags, test_reserved, test_unused_fields, test_count,
	   test_arg_len, test_arg_window, test_unsealed, test_block_ids, test_layer_range,
	   test_lease_zero, test_copy_isolation, test_fences, test_precedence)

const struct unit_suite unit_suite = {
	.name = "sqe",
	.add_tests = add_tests,
};
