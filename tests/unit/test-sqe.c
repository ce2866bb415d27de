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

static const struct sqe_limits worker = {
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

START_TEST(test_scheduler_role)
{
	struct kvs_sqe s = sqe_save(0, 1);
	struct sqe_limits lim = scheduler;

	ck_assert_int_eq(decode(&s, &scheduler, NULL), -EPERM);
	s = sqe_load(0, 1);
	ck_assert_int_eq(decode(&s, &scheduler, NULL), -EPERM);
	/* Even with a layout (a scheduler never has one, but the role alone decides). */
	lim.num_blocks = NUM_BLOCKS;
	lim.nr_layers = NR_LAYERS;
	ck_assert_int_eq(decode(&s, &lim, NULL), -EPERM);
	s = sqe_save(0, 1);
	ck_assert_int_eq(decode(&s, &lim, NULL), -EPERM);
}
END_TEST

/* Every opcode's good SQE, for rules that apply to all of them. */
static struct kvs_sqe good(uint8_t op)
{
	switch (op) {
	case KVS_OP_SAVE:
		return sqe_save(0, 2);
	case KVS_OP_QUERY:
		return sqe_query(0, 2);
	case KVS_OP_LOAD:
		return sqe_load(0, 2);
	case KVS_OP_RELEASE:
		return (struct kvs_sqe){ .opcode = op, .lease = 3 };
	default:
		return (struct kvs_sqe){ .opcode = op };
	}
}

START_TEST(test_flags)
{
	for (uint8_t op = 0; op <= KVS_OP_LAST; op++) {
		struct kvs_sqe s = good(op);
		uint8_t allowed = op == KVS_OP_QUERY ? KVS_QUERY_NOLEASE :
				  op == KVS_OP_FLUSH ? KVS_FLUSH_INSTANCE : 0;

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

START_TEST(test_reserved)
{
	for (uint8_t op = 0; op <= KVS_OP_LAST; op++) {
		struct kvs_sqe s = good(op);

		s.resv0 = 1;
		ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u resv0", op);
		s = good(op);
		s.resv1 = 1ull << 63;
		ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u resv1", op);
		s = good(op);
		s.resv2 = 1;
		ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u resv2", op);
	}
}
END_TEST

/* Fields an opcode does not use must be zero. */
START_TEST(test_unused_fields)
{
	for (uint8_t op = 0; op <= KVS_OP_LAST; op++) {
		bool args = op == KVS_OP_SAVE || op == KVS_OP_QUERY || op == KVS_OP_LOAD;
		struct kvs_sqe s;

		if (!args) {
			s = good(op);
			s.count = 1;
			ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u count", op);
			s = good(op);
			s.arg_off = 8;
			ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u arg_off", op);
			s = good(op);
			s.arg_len = 16;
			ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u arg_len", op);
		}
		if (op != KVS_OP_LOAD && op != KVS_OP_RELEASE) {
			s = good(op);
			s.lease = 1;
			ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u lease", op);
		}
		if (op != KVS_OP_QUERY) {
			s = good(op);
			s.req_id = 1;
			ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u req_id", op);
		}
		if (op != KVS_OP_LOAD) {
			s = good(op);
			s.layer_begin = 1;
			ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u layer_begin", op);
			s = good(op);
			s.layer_count = 1;
			ck_assert_msg(decode(&s, &worker, NULL) == -EINVAL, "op %u layer_count", op);
		}
	}
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

START_TEST(test_arg_window)
{
	static const uint8_t ops[] = { KVS_OP_SAVE, KVS_OP_QUERY, KVS_OP_LOAD };

	for (unsigned i = 0; i < 3; i++) {
		struct kvs_sqe s = good(ops[i]);
		uint32_t len = s.arg_len;

		/* Ending on the area's last byte is fine; one byte further is not. */
		memmove(area + AREA - len, area, len);
		s.arg_off = AREA - len;
		ck_assert_int_eq(decode(&s, &worker, NULL), 0);
		s.arg_off = AREA - len + 1;
		ck_assert_int_eq(decode(&s, &worker, NULL), -EFAULT);
		s.arg_off = AREA;
		ck_assert_int_eq(decode(&s, &worker, NULL), -EFAULT);
		/* Offsets near 2^32: the end must not wrap in 32 bits to a small number. */
		s.arg_off = UINT32_MAX - len + 1; /* off + len == 2^32 */
		ck_assert_int_eq(decode(&s, &worker, NULL), -EFAULT);
		s.arg_off = UINT32_MAX - 7;
		ck_assert_int_eq(decode(&s, &worker, NULL), -EFAULT);
		s.arg_off = UINT32_MAX;
		ck_assert_int_eq(decode(&s, &worker, NULL), -EFAULT);
	}
	/* An area smaller than one argument block. */
	{
		struct kvs_sqe s = sqe_query(0, 2);
		struct sqe_args a;

		ck_assert_int_eq(sqe_decode(&s, area, 31, &worker, copy, &a), -EFAULT);
		ck_assert_int_eq(sqe_decode(&s, area, 32, &worker, copy, &a), 0);
		ck_assert_int_eq(sqe_decode(&s, area, 0, &worker, copy, &a), -EFAULT);
	}
}
END_TEST

START_TEST(test_unsealed)
{
	struct sqe_limits none = worker;
	struct kvs_sqe s;

	none.num_blocks = 0;
	none.nr_layers = 0;
	s = sqe_save(0, 1);
	ck_assert_int_eq(decode(&s, &none, NULL), -KVS_EUNSEALED);
	s = sqe_load(0, 1);
	ck_assert_int_eq(decode(&s, &none, NULL), -KVS_EUNSEALED);
	/* QUERY, RELEASE, FLUSH and NOP need no registration. */
	s = sqe_query(0, 1);
	ck_assert_int_eq(decode(&s, &none, NULL), 0);
	s = good(KVS_OP_RELEASE);
	ck_assert_int_eq(decode(&s, &none, NULL), 0);
	s = good(KVS_OP_FLUSH);
	ck_assert_int_eq(decode(&s, &none, NULL), 0);
}
END_TEST

START_TEST(test_block_ids)
{
	uint32_t ids[3] = { 0, NUM_BLOCKS - 1, 5 };
	struct kvs_sqe s;

	/* SAVE: ids follow the keys. */
	s = sqe_save(0, 3);
	memcpy(area + 3 * KVS_KEY_SIZE, ids, sizeof(ids));
	ck_assert_int_eq(decode(&s, &worker, NULL), 0);
	ids[2] = NUM_BLOCKS; /* the last one, just past the end */
	memcpy(area + 3 * KVS_KEY_SIZE, ids, sizeof(ids));
	ck_assert_int_eq(decode(&s, &worker, NULL), -ERANGE);
	ids[2] = UINT32_MAX;
	memcpy(area + 3 * KVS_KEY_SIZE, ids, sizeof(ids));
	ck_assert_int_eq(decode(&s, &worker, NULL), -ERANGE);

	/* LOAD. */
	ids[2] = 5;
	s = sqe_load(0, 3);
	put_ids(0, ids, 3);
	ck_assert_int_eq(decode(&s, &worker, NULL), 0);
	ids[0] = NUM_BLOCKS;
	put_ids(0, ids, 3);
	ck_assert_int_eq(decode(&s, &worker, NULL), -ERANGE);
	/* QUERY carries keys only: nothing to range-check. */
	memset(area, 0xff, 64);
	s = sqe_query(64, 2);
	memset(area + 64, 0xff, 32);
	ck_assert_int_eq(decode(&s, &worker, NULL), 0);
}
END_TEST

START_TEST(test_layer_range)
{
	struct kvs_sqe s = sqe_load(0, 1);

	s.layer_begin = NR_LAYERS;
	ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
	s.layer_count = 1;
	ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
	s.layer_begin = 0;
	s.layer_count = NR_LAYERS + 1;
	ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
	s.layer_begin = NR_LAYERS - 1;
	s.layer_count = 2;
	ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
	/* begin + count wrapping 32 bits to a small number. */
	s.layer_begin = 1;
	s.layer_count = UINT32_MAX;
	ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
	s.layer_begin = UINT32_MAX;
	s.layer_count = 2;
	ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
	s.layer_begin = UINT32_MAX;
	s.layer_count = 0;
	ck_assert_int_eq(decode(&s, &worker, NULL), -EINVAL);
}
END_TEST

START_TEST(test_lease_zero)
{
	struct kvs_sqe s = sqe_load(0, 1);

	s.lease = 0;
	ck_assert_int_eq(decode(&s, &worker, NULL), -ENOENT);
	s = good(KVS_OP_RELEASE);
	s.lease = 0;
	ck_assert_int_eq(decode(&s, &worker, NULL), -ENOENT);
	ck_assert_int_eq(decode(&s, &scheduler, NULL), -ENOENT);
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
START_TEST(test_precedence)
{
	struct kvs_sqe s = sqe_save(0, 1);

	/* Unknown opcode before anything else. */
	s.opcode = 9;
	s.flags = 0xff;
	ck_assert_int_eq(decode(&s, &scheduler, NULL), -EOPNOTSUPP);
	/* Role before fields. */
	s = sqe_save(0, 1);
	s.flags = 0xff;
	ck_assert_int_eq(decode(&s, &scheduler, NULL), -EPERM);
	/* A malformed SQE is -EINVAL even when nothing is registered. */
	s = sqe_load(0, 1);
	s.resv1 = 1;
	ck_assert_int_eq(decode(&s, &(struct sqe_limits){ .role = KVS_ROLE_WORKER,
							  .max_keys = MAX_KEYS },
				NULL),
			 -EINVAL);
}
END_TEST

static void add_tests(TCase *tc)
{
	tcase_add_test(tc, test_nop);
	tcase_add_test(tc, test_save);
	tcase_add_test(tc, test_query);
	tcase_add_test(tc, test_load);
	tcase_add_test(tc, test_release_flush);
	tcase_add_test(tc, test_opcode);
	tcase_add_test(tc, test_scheduler_role);
	tcase_add_test(tc, test_flags);
	tcase_add_test(tc, test_reserved);
	tcase_add_test(tc, test_unused_fields);
	tcase_add_test(tc, test_count);
	tcase_add_test(tc, test_arg_len);
	tcase_add_test(tc, test_arg_window);
	tcase_add_test(tc, test_unsealed);
	tcase_add_test(tc, test_block_ids);
	tcase_add_test(tc, test_layer_range);
	tcase_add_test(tc, test_lease_zero);
	tcase_add_test(tc, test_copy_isolation);
	tcase_add_test(tc, test_precedence);
}

const struct unit_suite unit_suite = {
	.name = "sqe",
	.add_tests = add_tests,
};
