/* SPDX-License-Identifier: MIT */
/*
 * libkvspeer's wire protocol (peer/pwire.h): the layout and numbers that
 * cross hosts are pinned here, and every parser refuses what it must,
 * with the errno the library acts on (a different major before anything
 * else, EBADMSG for lengths that do not add up, E2BIG for counts over a
 * limit).  fuzz/fuzz-peer-wire checks the same promises on random input.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peer/pwire.h"
#include "unit.h"

#define OFF(type, field, off) ck_assert_uint_eq(offsetof(type, field), off)

static uint8_t buf[PW_MAX_PAYLOAD + 64];

START_TEST(test_layout_and_numbers)
{
	/* Frozen: another host of another build reads these bytes. */
	ck_assert_uint_eq(PW_MAGIC, 0x5053564bu);
	ck_assert_uint_eq(PW_MAJOR, 1);
	ck_assert_uint_eq(PW_HELLO, 1);
	ck_assert_uint_eq(PW_QUERY, 5);
	ck_assert_uint_eq(PW_DATA, 8);
	ck_assert_uint_eq(PW_RELEASE, 13);
	ck_assert_uint_eq(PW_ERROR, 17);
	ck_assert_uint_eq(KVSPEER_TRANSPORT_TCP, 1);
	ck_assert_uint_eq(KVSPEER_TRANSPORT_UCX, 2);
	OFF(struct pw_hdr, type, 4);
	OFF(struct pw_hdr, flags, 6);
	OFF(struct pw_hello, major, 0);
	OFF(struct pw_hello, transports, 4);
	OFF(struct pw_hello, epoch, 8);
	OFF(struct pw_hello_reply, proof, 192);
	OFF(struct pw_query, ttl_ms, 40);
	OFF(struct pw_query_reply, regions_version, 24);
	OFF(struct pw_entry, generation, 8);
	OFF(struct pw_entry, addr, 16);
	OFF(struct pw_fetch, count, 12);
	OFF(struct pw_data, shard, 12);
	OFF(struct pw_shard_end, generation, 16);
	OFF(struct pw_release, flags, 8);
	OFF(struct pw_error, req_type, 4);
}
END_TEST

START_TEST(test_header)
{
	struct pw_buf b = { 0 };
	struct pw_hdr h, bad;
	struct pw_fetch f = { .lock_id = 5, .count = 1 };

	ck_assert_int_eq(pw_put(&b, PW_FETCH, 9, &f, sizeof(f), NULL, 0), 0);
	ck_assert_uint_eq(b.len, sizeof(h) + sizeof(f));
	ck_assert_int_eq(pw_parse_hdr(b.p, &h, NULL, 0), 0);
	ck_assert_uint_eq(h.type, PW_FETCH);
	ck_assert_uint_eq(h.len, sizeof(f));
	ck_assert_uint_eq(h.seq, 9);
	bad = h;
	bad.magic ^= 1;
	ck_assert_int_eq(pw_parse_hdr(&bad, &h, NULL, 0), -EBADMSG);
	bad = h;
	bad.flags = 1;
	ck_assert_int_eq(pw_parse_hdr(&bad, &h, NULL, 0), -EBADMSG);
	bad = h;
	bad.type = PW__TYPE_MAX;
	ck_assert_int_eq(pw_parse_hdr(&bad, &h, NULL, 0), -EPROTO);
	bad.type = 0;
	ck_assert_int_eq(pw_parse_hdr(&bad, &h, NULL, 0), -EPROTO);
	/* Bounded by the type before a payload byte is read. */
	bad = h;
	bad.len = sizeof(f) + 1;
	ck_assert_int_eq(pw_parse_hdr(&bad, &h, NULL, 0), -EBADMSG);
	bad.type = PW_QUERY;
	bad.len = sizeof(struct pw_query) + KVSPEER_MAX_KEYS * KVSPEER_KEY_SIZE + 1;
	ck_assert_int_eq(pw_parse_hdr(&bad, &h, NULL, 0), -EBADMSG);
	bad.type = PW_QUERY_REPLY;
	bad.len = PW_MAX_PAYLOAD + 1;
	ck_assert_int_eq(pw_parse_hdr(&bad, &h, NULL, 0), -EBADMSG);
	bad.type = PW_HEALTH;
	bad.len = 1;
	ck_assert_int_eq(pw_parse_hdr(&bad, &h, NULL, 0), -EBADMSG);
	pw_buf_free(&b);
}
END_TEST

static void hello(struct pw_hello *h)
{
	memset(h, 0, sizeof(*h));
	h->major = PW_MAJOR;
	h->transports = PW_TRANSPORT_BIT(KVSPEER_TRANSPORT_TCP);
	strcpy(h->cluster, "prod");
	strcpy(h->node, "node-a");
}

START_TEST(test_hello)
{
	struct pw_hello h, out;
	uint16_t major = 2;

	hello(&h);
	ck_assert_int_eq(pw_parse_hello(&h, sizeof(h), &out, NULL, 0), 0);
	ck_assert_str_eq(out.node, "node-a");
	/* Another major is told apart from its first two bytes, whatever follows. */
	ck_assert_int_eq(pw_parse_hello(&major, sizeof(major), &out, NULL, 0), -EPROTONOSUPPORT);
	h.major = 2;
	ck_assert_int_eq(pw_parse_hello(&h, sizeof(h), &out, NULL, 0), -EPROTONOSUPPORT);
	hello(&h);
	ck_assert_int_eq(pw_parse_hello(&h, sizeof(h) - 1, &out, NULL, 0), -EBADMSG);
	/* A later minor appends: accepted, the rest ignored. */
	memset(buf, 0, sizeof(buf));
	memcpy(buf, &h, sizeof(h));
	ck_assert_int_eq(pw_parse_hello(buf, sizeof(h) + 64, &out, NULL, 0), 0);
	ck_assert_int_eq(pw_parse_hello(buf, PW_HELLO_MAX + 1, &out, NULL, 0), -EBADMSG);
	h.resv[3] = 1;
	ck_assert_int_eq(pw_parse_hello(&h, sizeof(h), &out, NULL, 0), -EINVAL);
	hello(&h);
	h.transports = 0;
	ck_assert_int_eq(pw_parse_hello(&h, sizeof(h), &out, NULL, 0), -EINVAL);
	h.transports = 1u << 9;
	ck_assert_int_eq(pw_parse_hello(&h, sizeof(h), &out, NULL, 0), -EINVAL);
	hello(&h);
	memset(h.node, 'n', sizeof(h.node)); /* no NUL */
	ck_assert_int_eq(pw_parse_hello(&h, sizeof(h), &out, NULL, 0), -EINVAL);
	hello(&h);
	strcpy(h.cluster, "a b");
	ck_assert_int_eq(pw_parse_hello(&h, sizeof(h), &out, NULL, 0), -EINVAL);
	h.cluster[0] = '\0';
	ck_assert_int_eq(pw_parse_hello(&h, sizeof(h), &out, NULL, 0), -EINVAL);
}
END_TEST

START_TEST(test_hello_reply)
{
	struct pw_hello_reply r = { .major = PW_MAJOR,
				    .transport = 2,
				    .lock_ttl_ms = 1,
				    .max_keys = 4,
				    .max_locks = 1 },
			      out;
	uint32_t tcp = PW_TRANSPORT_BIT(KVSPEER_TRANSPORT_TCP);

	strcpy(r.cluster, "prod");
	strcpy(r.node, "b");
	ck_assert_int_eq(pw_parse_hello_reply(&r, sizeof(r), tcp, &out, NULL, 0), 0);
	/* Not one the client offered, or two at once. */
	r.transport = PW_TRANSPORT_BIT(KVSPEER_TRANSPORT_UCX);
	ck_assert_int_eq(pw_parse_hello_reply(&r, sizeof(r), tcp, &out, NULL, 0), -EINVAL);
	r.transport = PW_TRANSPORTS_KNOWN;
	ck_assert_int_eq(pw_parse_hello_reply(&r, sizeof(r), PW_TRANSPORTS_KNOWN, &out, NULL, 0),
			 -EINVAL);
	r.transport = tcp;
	r.max_keys = KVSPEER_MAX_KEYS + 1;
	ck_assert_int_eq(pw_parse_hello_reply(&r, sizeof(r), tcp, &out, NULL, 0), -EINVAL);
}
END_TEST

START_TEST(test_query)
{
	struct pw_query q = { .nr_keys = 3, .nr_shards = 2 }, out;
	const uint8_t *keys;
	size_t len = sizeof(q) + 3 * KVSPEER_KEY_SIZE;

	memset(buf, 0x7a, sizeof(buf));
	memcpy(buf, &q, sizeof(q));
	ck_assert_int_eq(pw_parse_query(buf, len, 100, &out, &keys, NULL, 0), 0);
	ck_assert_ptr_eq(keys, buf + sizeof(q));
	ck_assert_int_eq(pw_parse_query(buf, len - 1, 100, &out, &keys, NULL, 0), -EBADMSG);
	ck_assert_int_eq(pw_parse_query(buf, len + 16, 100, &out, &keys, NULL, 0), -EBADMSG);
	/* Over the server's max_keys, or the protocol's. */
	ck_assert_int_eq(pw_parse_query(buf, len, 2, &out, &keys, NULL, 0), -E2BIG);
	q.nr_keys = 0;
	memcpy(buf, &q, sizeof(q));
	ck_assert_int_eq(pw_parse_query(buf, sizeof(q), 100, &out, &keys, NULL, 0), -E2BIG);
	q.nr_keys = KVSPEER_MAX_KEYS;
	q.nr_shards = KVSPEER_MAX_SHARDS; /* keys x shards over KVSPEER_MAX_ENTRIES */
	memcpy(buf, &q, sizeof(q));
	ck_assert_int_eq(pw_parse_query(buf, sizeof(q) + KVSPEER_MAX_KEYS * KVSPEER_KEY_SIZE,
					KVSPEER_MAX_KEYS, &out, &keys, NULL, 0),
			 -E2BIG);
	q.nr_keys = 3;
	q.nr_shards = 0;
	memcpy(buf, &q, sizeof(q));
	ck_assert_int_eq(pw_parse_query(buf, len, 100, &out, &keys, NULL, 0), -E2BIG);
	q.nr_shards = 1;
	q.flags = 1;
	memcpy(buf, &q, sizeof(q));
	ck_assert_int_eq(pw_parse_query(buf, len, 100, &out, &keys, NULL, 0), -EINVAL);
}
END_TEST

static size_t reply(uint32_t blocks, uint32_t shards, uint64_t len, int32_t status)
{
	struct pw_query_reply r = { .status = status,
				    .nr_blocks = blocks,
				    .nr_shards = shards,
				    .ttl_ms = 100,
				    .lock_id = 3 };
	struct pw_entry e = { .len = len, .generation = 1 };

	memcpy(buf, &r, sizeof(r));
	for (uint32_t i = 0; i < blocks * shards; i++)
		memcpy(buf + sizeof(r) + i * sizeof(e), &e, sizeof(e));
	return sizeof(r) + (size_t)blocks * shards * sizeof(e);
}

START_TEST(test_query_reply)
{
	struct pw_reply_limits lim = { .nr_keys = 4, .nr_shards = 2, .max_shard_bytes = 1 << 20 };
	struct pw_query_reply out;
	const uint8_t *ents;
	struct pw_entry e;
	size_t n;

	n = reply(4, 2, 4096, 0);
	ck_assert_int_eq(pw_parse_query_reply(buf, n, &lim, &out, &ents, NULL, 0), 0);
	pw_entry_get(ents, 7, &e);
	ck_assert_uint_eq(e.len, 4096);
	n = reply(0, 0, 0, 0);
	ck_assert_int_eq(pw_parse_query_reply(buf, n, &lim, &out, &ents, NULL, 0), 0);
	ck_assert_uint_eq(out.nr_blocks, 0);
	/* More blocks than keys, other shards, sizes over the limit or zero. */
	n = reply(5, 2, 4096, 0);
	ck_assert_int_eq(pw_parse_query_reply(buf, n, &lim, &out, &ents, NULL, 0), -EINVAL);
	n = reply(4, 1, 4096, 0);
	ck_assert_int_eq(pw_parse_query_reply(buf, n, &lim, &out, &ents, NULL, 0), -EINVAL);
	n = reply(4, 2, (1 << 20) + 1, 0);
	ck_assert_int_eq(pw_parse_query_reply(buf, n, &lim, &out, &ents, NULL, 0), -EINVAL);
	n = reply(4, 2, 0, 0);
	ck_assert_int_eq(pw_parse_query_reply(buf, n, &lim, &out, &ents, NULL, 0), -EINVAL);
	/* Bytes that do not match the counts. */
	n = reply(4, 2, 4096, 0);
	ck_assert_int_eq(pw_parse_query_reply(buf, n - 1, &lim, &out, &ents, NULL, 0), -EBADMSG);
	ck_assert_int_eq(pw_parse_query_reply(buf, n + 32, &lim, &out, &ents, NULL, 0), -EBADMSG);
	/* An error with blocks, a status that is no errno. */
	n = reply(1, 2, 4096, -ENOENT);
	ck_assert_int_eq(pw_parse_query_reply(buf, n, &lim, &out, &ents, NULL, 0), -EINVAL);
	n = reply(0, 2, 4096, -5000);
	ck_assert_int_eq(pw_parse_query_reply(buf, n, &lim, &out, &ents, NULL, 0), -EINVAL);
	n = reply(0, 2, 4096, 7);
	ck_assert_int_eq(pw_parse_query_reply(buf, n, &lim, &out, &ents, NULL, 0), -EINVAL);
}
END_TEST

START_TEST(test_auth_ok)
{
	struct pw_auth_ok a = { .nr_regions = 1, .taddr_len = 8 };
	struct pw_region r = { .base = 4096, .len = 4096, .rkey_len = 4 };
	struct pw_auth_ok_info *info = calloc(1, sizeof(*info));
	size_t n = 0;

	memcpy(buf, &a, sizeof(a));
	n = sizeof(a) + 8;
	memcpy(buf + n, &r, sizeof(r));
	n += sizeof(r) + 4;
	ck_assert_int_eq(pw_parse_auth_ok(buf, n, info, NULL, 0), 0);
	ck_assert_ptr_eq(info->taddr, buf + sizeof(a));
	ck_assert_ptr_eq(info->regions[0].rkey, buf + sizeof(a) + 8 + sizeof(r));
	ck_assert_int_eq(pw_parse_auth_ok(buf, n - 1, info, NULL, 0), -EBADMSG);
	ck_assert_int_eq(pw_parse_auth_ok(buf, n + 1, info, NULL, 0), -EBADMSG);
	/* A region that wraps, a key longer than the message. */
	r.base = UINT64_MAX - 10;
	memcpy(buf + sizeof(a) + 8, &r, sizeof(r));
	ck_assert_int_eq(pw_parse_auth_ok(buf, n, info, NULL, 0), -EINVAL);
	r.base = 4096;
	r.rkey_len = 400;
	memcpy(buf + sizeof(a) + 8, &r, sizeof(r));
	ck_assert_int_eq(pw_parse_auth_ok(buf, n, info, NULL, 0), -EBADMSG);
	a.nr_regions = PW_MAX_REGIONS + 1;
	memcpy(buf, &a, sizeof(a));
	ck_assert_int_eq(pw_parse_auth_ok(buf, n, info, NULL, 0), -EINVAL);
	a.nr_regions = 0;
	a.taddr_len = PW_MAX_TADDR + 1;
	memcpy(buf, &a, sizeof(a));
	ck_assert_int_eq(pw_parse_auth_ok(buf, n, info, NULL, 0), -EINVAL);
	free(info);
}
END_TEST

START_TEST(test_small_messages)
{
	struct pw_fetch f = { .lock_id = 1, .count = 0 };
	struct pw_release rl = { .lock_id = 1, .flags = 2 };
	struct pw_release_reply rr = { .nr = 3, .lock_id = 1 };
	struct pw_error e, out;
	struct pw_data d = { .lock_id = 1, .len = 0 };
	const uint8_t *gens;

	ck_assert_int_eq(pw_parse_fetch(&f, sizeof(f), &f, NULL, 0), -EINVAL);
	ck_assert_int_eq(pw_parse_release(&rl, sizeof(rl), &rl, NULL, 0), -EINVAL);
	ck_assert_int_eq(pw_parse_data(&d, sizeof(d), &d, NULL, 0), -EINVAL);
	memcpy(buf, &rr, sizeof(rr));
	ck_assert_int_eq(pw_parse_release_reply(buf, sizeof(rr) + 24, 3, &rr, &gens, NULL, 0), 0);
	ck_assert_int_eq(pw_parse_release_reply(buf, sizeof(rr) + 24, 2, &rr, &gens, NULL, 0),
			 -EINVAL);
	ck_assert_int_eq(pw_parse_release_reply(buf, sizeof(rr) + 16, 3, &rr, &gens, NULL, 0),
			 -EBADMSG);
	/* An ERROR's text goes to a log: never a control character. */
	pw_make_error(&e, -ENOENT, PW_FETCH, "bad\x1b[2Jtext");
	ck_assert_int_eq(pw_parse_error(&e, sizeof(e), &out, NULL, 0), 0);
	ck_assert_ptr_null(strchr(out.text, 0x1b));
	e.status = 0;
	ck_assert_int_eq(pw_parse_error(&e, sizeof(e), &out, NULL, 0), -EINVAL);
	pw_make_error(&e, -ENOENT, PW_FETCH, "x");
	memset(e.text, 'x', sizeof(e.text));
	ck_assert_int_eq(pw_parse_error(&e, sizeof(e), &out, NULL, 0), -EINVAL);
}
END_TEST

UNIT_TESTS(test_layout_and_numbers, test_header, test_hello, test_hello_reply, test_query,
	   test_query_reply, test_auth_ok, test_small_messages)

const struct unit_suite unit_suite = {
	.name = "peer-wire",
	.add_tests = add_tests,
};
