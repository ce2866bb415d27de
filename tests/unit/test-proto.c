/* SPDX-License-Identifier: MIT */
/*
 * Socket message parsers (sidecar/wire/proto.c): headers, HELLO, REGISTER and
 * the header-only messages, each rule with its own errno.
 *
 * Every case starts from a valid message and changes one field, so each
 * errno is pinned to one check.  Messages are built in buffers of exactly
 * the length passed, so the sanitizers catch a parser reading past what it
 * was given.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvstash/wire.h>

#include "wire/proto.h"
#include "unit.h"

static char why[256];

/* ---- header and empty messages ------------------------------------ */

START_TEST(test_header)
{
	uint8_t buf[64] = { 0 };
	struct kvs_msg_hdr h = { .type = KVS_MSG_STATUS, .size = 16, .seq = 77 };
	uint32_t type = 0, seq = 0;

	memcpy(buf, &h, sizeof(h));
	ck_assert_int_eq(proto_check_header(buf, 16, &type, &seq), 0);
	ck_assert_uint_eq(type, KVS_MSG_STATUS);
	ck_assert_uint_eq(seq, 77);

	/* Shorter than a header, or size disagreeing with the packet either way. */
	ck_assert_int_eq(proto_check_header(buf, 15, &type, &seq), -EBADMSG);
	ck_assert_int_eq(proto_check_header(buf, 0, &type, &seq), -EBADMSG);
	ck_assert_int_eq(proto_check_header(buf, 17, &type, &seq), -EBADMSG);
	h.size = 15;
	memcpy(buf, &h, sizeof(h));
	ck_assert_int_eq(proto_check_header(buf, 16, &type, &seq), -EBADMSG);
	h.size = 48;
	memcpy(buf, &h, sizeof(h));
	ck_assert_int_eq(proto_check_header(buf, 48, &type, &seq), 0);
	ck_assert_int_eq(proto_check_header(buf, 47, &type, &seq), -EBADMSG);
	/* No flags are defined. */
	h.size = 16;
	h.flags = 1u << 31;
	memcpy(buf, &h, sizeof(h));
	ck_assert_int_eq(proto_check_header(buf, 16, &type, &seq), -EBADMSG);
}
END_TEST

START_TEST(test_header_max)
{
	uint8_t *buf = calloc(1, KVS_MSG_MAX + 1);
	struct kvs_msg_hdr h = { .type = KVS_MSG_REGISTER, .size = KVS_MSG_MAX };
	uint32_t type, seq;

	ck_assert_ptr_nonnull(buf);
	memcpy(buf, &h, sizeof(h));
	ck_assert_int_eq(proto_check_header(buf, KVS_MSG_MAX, &type, &seq), 0);
	h.size = KVS_MSG_MAX + 1;
	memcpy(buf, &h, sizeof(h));
	ck_assert_int_eq(proto_check_header(buf, KVS_MSG_MAX + 1, &type, &seq), -EBADMSG);
	free(buf);
}
END_TEST

START_TEST(test_empty)
{
	uint8_t buf[17] = { 0 };

	ck_assert_int_eq(proto_parse_empty(buf, 16, why, sizeof(why)), 0);
	ck_assert_int_eq(proto_parse_empty(buf, 17, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "17"));
	ck_assert_int_eq(proto_parse_empty(buf, 15, why, sizeof(why)), -EBADMSG);
}
END_TEST

START_TEST(test_check_name)
{
	char name[KVS_NAME_MAX + 1];

	ck_assert_int_eq(proto_check_name("model.layers.0.self_attn", KVS_NAME_MAX), 0);
	ck_assert_int_eq(proto_check_name("a", KVS_NAME_MAX), 0);
	ck_assert_int_eq(proto_check_name("Az09._:/@+=-", KVS_NAME_MAX), 0);
	ck_assert_int_eq(proto_check_name("", KVS_NAME_MAX), -EINVAL);
	static const char *const bad[] = {
		"a b", "a\tb", "a\nb", "a*", "a%s", "a\"b", "a'b", "a\\b", "a;b", "a,b",
		"a#b", "caf\xc3\xa9", "\x7f", "a[0]", "a|b", "~", "a$b",
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(proto_check_name(bad[i], KVS_NAME_MAX) == -EINVAL, "'%s' accepted",
			      bad[i]);
	/* max - 1 characters fit (the NUL is the last byte); max do not. */
	memset(name, 'x', sizeof(name));
	name[KVS_NAME_MAX - 1] = '\0';
	ck_assert_int_eq(proto_check_name(name, KVS_NAME_MAX), 0);
	name[KVS_NAME_MAX - 1] = 'x';
	name[KVS_NAME_MAX] = '\0';
	ck_assert_int_eq(proto_check_name(name, KVS_NAME_MAX), -EINVAL);
}
END_TEST

/* ---- HELLO --------------------------------------------------------- */

static struct kvs_msg_hello good_hello(void)
{
	struct kvs_msg_hello m;

	memset(&m, 0, sizeof(m));
	m.hdr.type = KVS_MSG_HELLO;
	m.hdr.size = sizeof(m);
	m.rev_major = KVS_WIRE_MAJOR;
	m.rev_minor = KVS_WIRE_MINOR;
	m.role = KVS_ROLE_WORKER;
	m.tp_rank = 1;
	m.tp_size = 2;
	m.world_size = 2;
	m.device_kind = KVS_DEVICE_HOST;
	m.sq_entries = 128;
	m.cq_entries = 512;
	m.arg_bytes = 1 << 20;
	strcpy(m.instance, "vllm-0");
	strcpy(m.ns, "qwen3-8b/bf16/page16");
	return m;
}

/*
 * Parse the first @len bytes of @m from a heap copy of exactly @len bytes.
 * On failure *ret must be untouched.
 */
static int hello_len(const struct kvs_msg_hello *m, size_t len, struct hello_req *ret)
{
	struct hello_req sentinel, local;
	uint8_t *buf = malloc(len ? len : 1);
	int r;

	ck_assert_ptr_nonnull(buf);
	memcpy(buf, m, len < sizeof(*m) ? len : sizeof(*m));
	if (len > sizeof(*m))
		memset(buf + sizeof(*m), 0x5a, len - sizeof(*m));
	if (!ret)
		ret = &local;
	memset(ret, 0xab, sizeof(*ret));
	memcpy(&sentinel, ret, sizeof(sentinel));
	why[0] = '\0';
	r = proto_parse_hello(buf, len, ret, why, sizeof(why));
	free(buf);
	if (r < 0) {
		ck_assert_msg(memcmp(ret, &sentinel, sizeof(sentinel)) == 0,
			      "failed HELLO parse wrote its result");
		ck_assert_msg(why[0] != '\0', "HELLO refused (%d) without a reason", r);
	}
	return r;
}

static int hello(const struct kvs_msg_hello *m)
{
	return hello_len(m, sizeof(*m), NULL);
}

START_TEST(test_hello_good)
{
	struct kvs_msg_hello m = good_hello();
	struct hello_req h;

	ck_assert_int_eq(hello_len(&m, sizeof(m), &h), 0);
	ck_assert_uint_eq(h.rev_major, KVS_WIRE_MAJOR);
	ck_assert_uint_eq(h.rev_minor, KVS_WIRE_MINOR);
	ck_assert_uint_eq(h.role, KVS_ROLE_WORKER);
	ck_assert_uint_eq(h.tp_rank, 1);
	ck_assert_uint_eq(h.tp_size, 2);
	ck_assert_uint_eq(h.world_size, 2);
	ck_assert_uint_eq(h.device_kind, KVS_DEVICE_HOST);
	ck_assert_uint_eq(h.sq_entries, 128);
	ck_assert_uint_eq(h.cq_entries, 512);
	ck_assert_uint_eq(h.arg_bytes, 1 << 20);
	ck_assert_str_eq(h.instance, "vllm-0");
	ck_assert_str_eq(h.ns, "qwen3-8b/bf16/page16");

	/* A scheduler has the same fields. */
	m.role = KVS_ROLE_SCHEDULER;
	ck_assert_int_eq(hello_len(&m, sizeof(m), &h), 0);
	ck_assert_uint_eq(h.role, KVS_ROLE_SCHEDULER);

	/* A CUDA device comes with its UUID, copied. */
	m = good_hello();
	m.device_kind = KVS_DEVICE_CUDA;
	for (unsigned i = 0; i < 16; i++)
		m.device_uuid[i] = (uint8_t)(0xf0 + i);
	ck_assert_int_eq(hello_len(&m, sizeof(m), &h), 0);
	ck_assert_uint_eq(h.device_kind, KVS_DEVICE_CUDA);
	ck_assert_int_eq(memcmp(h.device_uuid, m.device_uuid, 16), 0);
}
END_TEST

START_TEST(test_hello_revision)
{
	struct kvs_msg_hello m = good_hello();
	char want_theirs[32], want_ours[32];

	m.rev_major = KVS_WIRE_MAJOR + 1;
	m.rev_minor = 7;
	snprintf(want_theirs, sizeof(want_theirs), "%u.7", KVS_WIRE_MAJOR + 1);
	snprintf(want_ours, sizeof(want_ours), "%u.%u", KVS_WIRE_MAJOR, KVS_WIRE_MINOR);

	/* Whatever the size of the rest: only the frozen 20 bytes matter. */
	static const size_t lens[] = { 20, 21, 64, sizeof(struct kvs_msg_hello) - 1,
				       sizeof(struct kvs_msg_hello), 4096 };
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		ck_assert_msg(hello_len(&m, lens[i], NULL) == -EPROTONOSUPPORT,
			      "other major in %zu bytes", lens[i]);
		ck_assert_msg(strstr(why, want_theirs) && strstr(why, want_ours),
			      "'%s' does not name %s and %s", why, want_theirs, want_ours);
	}
	/* Before every other rule: garbage fields do not change the answer. */
	m.flags = 1;
	m.role = 99;
	m.tp_rank = 5;
	m.tp_size = 0;
	memset(m.instance, '*', sizeof(m.instance));
	ck_assert_int_eq(hello(&m), -EPROTONOSUPPORT);
	m.hdr.size = 1;
	ck_assert_int_eq(hello(&m), -EPROTONOSUPPORT);

	m = good_hello();
	m.rev_major = 0;
	ck_assert_int_eq(hello(&m), -EPROTONOSUPPORT);
	m.rev_major = 0xffff;
	ck_assert_int_eq(hello_len(&m, 20, NULL), -EPROTONOSUPPORT);

	/* Too short to hold the revision at all. */
	ck_assert_int_eq(hello_len(&m, 19, NULL), -EBADMSG);
	ck_assert_int_eq(hello_len(&m, 0, NULL), -EBADMSG);
}
END_TEST

START_TEST(test_hello_size)
{
	struct kvs_msg_hello m = good_hello();

	/* Our major, but shorter than our HELLO. */
	ck_assert_int_eq(hello_len(&m, 20, NULL), -EBADMSG);
	ck_assert_int_eq(hello_len(&m, sizeof(m) - 1, NULL), -EBADMSG);
	/* A newer minor may append fields: read ours, ignore the rest. */
	m.rev_minor = KVS_WIRE_MINOR + 3;
	ck_assert_int_eq(hello_len(&m, sizeof(m) + 64, NULL), 0);
}
END_TEST

START_TEST(test_hello_reserved)
{
	struct kvs_msg_hello m = good_hello();

	m.flags = 4; /* past KVS_HELLO_FENCES */
	ck_assert_int_eq(hello(&m), -EINVAL);
	m = good_hello();
	m.flags = KVS_HELLO_FENCES;
	ck_assert_int_eq(hello(&m), 0);
	m = good_hello();
	m.role = KVS_ROLE_SCHEDULER;
	m.flags = KVS_HELLO_FENCES; /* fences order SAVEs and LOADs: workers only */
	ck_assert_int_eq(hello(&m), -EINVAL);
	m = good_hello();
	m.flags = KVS_HELLO_CLUSTER;
	ck_assert_int_eq(hello(&m), 0);
	m.role = KVS_ROLE_ADMIN; /* no region, so no answers */
	ck_assert_int_eq(hello(&m), -EINVAL);
	m = good_hello();
	m.resv0 = 0x80000000u;
	ck_assert_int_eq(hello(&m), -EINVAL);
	for (unsigned i = 0; i < 4; i++) {
		m = good_hello();
		m.resv[i] = 1ull << 63;
		ck_assert_msg(hello(&m) == -EINVAL, "resv[%u] ignored", i);
	}
}
END_TEST

START_TEST(test_hello_role)
{
	struct kvs_msg_hello m = good_hello();
	struct hello_req h;

	static const uint32_t bad[] = { 0, 4, 0x100, UINT32_MAX };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m.role = bad[i];
		ck_assert_msg(hello(&m) == -EINVAL, "role %u accepted", bad[i]);
	}
	/* An admin session names no instance, namespace or device. */
	memset(&m, 0, sizeof(m));
	m.rev_major = KVS_WIRE_MAJOR;
	m.role = KVS_ROLE_ADMIN;
	ck_assert_int_eq(hello_len(&m, sizeof(m), &h), 0);
	ck_assert_uint_eq(h.role, KVS_ROLE_ADMIN);
	/* Its reserved fields still count. */
	m.resv[3] = 1;
	ck_assert_int_eq(hello(&m), -EINVAL);
}
END_TEST

START_TEST(test_hello_names)
{
	struct kvs_msg_hello m = good_hello();
	struct hello_req h;

	/* Longest names: 63 and 127 characters and their NUL. */
	memset(m.instance, 'i', sizeof(m.instance) - 1);
	memset(m.ns, 'n', sizeof(m.ns) - 1);
	ck_assert_int_eq(hello_len(&m, sizeof(m), &h), 0);
	ck_assert_uint_eq(strlen(h.instance), KVS_NAME_MAX - 1);
	ck_assert_uint_eq(strlen(h.ns), KVS_NS_MAX - 1);
	/* No NUL anywhere in the array. */
	m.instance[KVS_NAME_MAX - 1] = 'i';
	ck_assert_int_eq(hello(&m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "instance"));
	m = good_hello();
	memset(m.ns, 'n', sizeof(m.ns));
	ck_assert_int_eq(hello(&m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "namespace"));
	/* Empty. */
	m = good_hello();
	m.instance[0] = '\0';
	ck_assert_int_eq(hello(&m), -EINVAL);
	m = good_hello();
	m.ns[0] = '\0';
	ck_assert_int_eq(hello(&m), -EINVAL);
	/* Characters outside the set, where logs and status would show them. */
	static const char *const bad[] = { "a b", "a\n", "x%n", "\xff", "a;rm" };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m = good_hello();
		strcpy(m.instance, bad[i]);
		ck_assert_msg(hello(&m) == -EINVAL, "instance '%s' accepted", bad[i]);
		m = good_hello();
		strcpy(m.ns, bad[i]);
		ck_assert_msg(hello(&m) == -EINVAL, "namespace '%s' accepted", bad[i]);
	}
}
END_TEST

START_TEST(test_hello_ranks)
{
	struct kvs_msg_hello m = good_hello();

	m.tp_size = 0;
	m.world_size = 0;
	m.tp_rank = 0;
	ck_assert_int_eq(hello(&m), -EINVAL);
	m = good_hello();
	m.tp_rank = 2; /* == tp_size */
	ck_assert_int_eq(hello(&m), -EINVAL);
	m.tp_rank = UINT32_MAX;
	ck_assert_int_eq(hello(&m), -EINVAL);
	m.tp_rank = 1;
	ck_assert_int_eq(hello(&m), 0);
	/* The largest world, and one more. */
	m.tp_size = m.world_size = PROTO_MAX_WORLD;
	m.tp_rank = PROTO_MAX_WORLD - 1;
	ck_assert_int_eq(hello(&m), 0);
	m.tp_size = m.world_size = PROTO_MAX_WORLD + 1;
	ck_assert_int_eq(hello(&m), -EINVAL);
	/* world_size must equal tp_size, either way. */
	m = good_hello();
	m.world_size = 4;
	ck_assert_int_eq(hello(&m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "world_size"));
	m.world_size = 1;
	ck_assert_int_eq(hello(&m), -EINVAL);
}
END_TEST

START_TEST(test_hello_device)
{
	struct kvs_msg_hello m = good_hello();

	static const uint32_t bad[] = { 0, 3, UINT32_MAX };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m.device_kind = bad[i];
		ck_assert_msg(hello(&m) == -EINVAL, "device kind %u accepted", bad[i]);
	}
	/* CUDA needs a UUID (an ordinal would be renumbered by CUDA_VISIBLE_DEVICES). */
	m = good_hello();
	m.device_kind = KVS_DEVICE_CUDA;
	ck_assert_int_eq(hello(&m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "UUID"));
	m.device_uuid[15] = 1; /* any non-zero byte, the last included */
	ck_assert_int_eq(hello(&m), 0);
	/* A host device has none. */
	m.device_kind = KVS_DEVICE_HOST;
	ck_assert_int_eq(hello(&m), -EINVAL);
	m.device_uuid[15] = 0;
	m.device_uuid[0] = 1;
	ck_assert_int_eq(hello(&m), -EINVAL);
}
END_TEST

/* ---- REGISTER ------------------------------------------------------ */

#define MAX_TEST_LAYERS 8

struct reg_msg {
	struct kvs_msg_register hdr;
	struct kvs_wire_mem mems[MAX_TEST_LAYERS];
	struct kvs_wire_layer layers[MAX_TEST_LAYERS];
};

static void set_layer(struct kvs_wire_layer *l, const char *name, uint32_t mem)
{
	memset(l, 0, sizeof(*l));
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->mem_index = mem;
	l->segments = 1;
	l->num_blocks = 16;
	l->segment_bytes = 4096;
	l->block_stride = 4096 * 3;
	l->offset = 0;
}

/* Two fd allocations, three layers: "model.layers.0" and ".2" in mem 0, ".1" in mem 1. */
static struct reg_msg good_reg(void)
{
	struct reg_msg m;

	memset(&m, 0, sizeof(m));
	m.hdr.hdr.type = KVS_MSG_REGISTER;
	m.hdr.nr_mems = 2;
	m.hdr.nr_layers = 3;
	m.mems[0].kind = KVS_MEM_HOST_FD;
	m.mems[0].fd_index = 0;
	m.mems[0].size = 1 << 20;
	m.mems[1].kind = KVS_MEM_HOST_FD;
	m.mems[1].fd_index = 1;
	m.mems[1].size = 2 << 20;
	set_layer(&m.layers[0], "model.layers.0", 0);
	set_layer(&m.layers[1], "model.layers.1", 1);
	set_layer(&m.layers[2], "model.layers.2", 0);
	m.layers[2].offset = 4096;
	return m;
}

/*
 * Serialise @m as the wire has it (mems then layers, packed by the
 * counts in @use_mems/@use_layers) into an exact-size heap buffer.
 */
static uint8_t *pack(const struct reg_msg *m, uint32_t use_mems, uint32_t use_layers,
		     size_t *len)
{
	size_t n = sizeof(m->hdr) + use_mems * sizeof(m->mems[0]) +
		   use_layers * sizeof(m->layers[0]);
	uint8_t *buf = malloc(n), *p = buf;

	ck_assert_ptr_nonnull(buf);
	memcpy(p, &m->hdr, sizeof(m->hdr));
	p += sizeof(m->hdr);
	memcpy(p, m->mems, use_mems * sizeof(m->mems[0]));
	p += use_mems * sizeof(m->mems[0]);
	memcpy(p, m->layers, use_layers * sizeof(m->layers[0]));
	((struct kvs_msg_hdr *)buf)->size = (uint32_t)n;
	*len = n;
	return buf;
}

/* Parse @m packed by its own counts with @nfds fds; *ret untouched on error. */
static int reg_full(const struct reg_msg *m, size_t len_delta, unsigned nfds, uint32_t max_layers,
		    struct reg_req *ret)
{
	struct reg_req local, sentinel;
	size_t len;
	uint8_t *buf = pack(m, m->hdr.nr_mems, m->hdr.nr_layers, &len);
	int r;

	if (!ret)
		ret = &local;
	memset(ret, 0xab, sizeof(*ret));
	sentinel = *ret;
	why[0] = '\0';
	r = proto_parse_register(buf, len + len_delta, nfds, max_layers, ret, why, sizeof(why));
	free(buf);
	if (r < 0) {
		ck_assert_msg(memcmp(ret, &sentinel, sizeof(sentinel)) == 0,
			      "failed REGISTER parse wrote its result");
		ck_assert_msg(why[0] != '\0', "REGISTER refused (%d) without a reason", r);
	} else if (ret == &local) {
		proto_reg_free(&local);
	}
	return r;
}

static int reg(const struct reg_msg *m, unsigned nfds)
{
	return reg_full(m, 0, nfds, 256, NULL);
}

START_TEST(test_register_good)
{
	struct reg_msg m = good_reg();
	struct reg_req r;

	ck_assert_int_eq(reg_full(&m, 0, 2, 256, &r), 0);
	ck_assert_uint_eq(r.flags, 0);
	ck_assert_uint_eq(r.nr_mems, 2);
	ck_assert_uint_eq(r.nr_layers, 3);
	ck_assert_uint_eq(r.mems[1].size, 2 << 20);
	ck_assert_uint_eq(r.mems[1].fd_index, 1);
	ck_assert_str_eq(r.layers[2].name, "model.layers.2");
	ck_assert_uint_eq(r.layers[2].offset, 4096);
	ck_assert_uint_eq(r.layers[1].mem_index, 1);
	proto_reg_free(&r);
	ck_assert_ptr_null(r.mems);
	ck_assert_ptr_null(r.layers);
	proto_reg_free(&r); /* idempotent */
	proto_reg_free(NULL);

	/* A replicated (MLA) layout. */
	m.hdr.flags = KVS_REGISTER_REPLICATED;
	ck_assert_int_eq(reg_full(&m, 0, 2, 256, &r), 0);
	ck_assert_uint_eq(r.flags, KVS_REGISTER_REPLICATED);
	proto_reg_free(&r);

	/* fds may come in any order. */
	m = good_reg();
	m.mems[0].fd_index = 1;
	m.mems[1].fd_index = 0;
	ck_assert_int_eq(reg(&m, 2), 0);
}
END_TEST

START_TEST(test_register_counts)
{
	struct reg_msg m = good_reg();
	uint8_t *buf;
	size_t len;

	/* One byte more or less than the counts imply. */
	ck_assert_int_eq(reg_full(&m, (size_t)-1, 2, 256, NULL), -EBADMSG);
	ck_assert_int_eq(reg_full(&m, 1, 2, 256, NULL), -EBADMSG);
	/* Counts claiming one layer more (or fewer) than the packet holds. */
	buf = pack(&m, 2, 3, &len);
	((struct kvs_msg_register *)buf)->nr_layers = 4;
	ck_assert_int_eq(proto_parse_register(buf, len, 2, 256, NULL, why, sizeof(why)), -EBADMSG);
	((struct kvs_msg_register *)buf)->nr_layers = 2;
	ck_assert_int_eq(proto_parse_register(buf, len, 2, 256, NULL, why, sizeof(why)), -EBADMSG);
	free(buf);
	/* Shorter than the fixed part. */
	buf = pack(&m, 0, 0, &len);
	ck_assert_int_eq(proto_parse_register(buf, len - 1, 2, 256, NULL, why, sizeof(why)),
			 -EBADMSG);
	free(buf);

	/*
	 * Counts whose byte total wraps 32 bits to the real length: 1 + 2^25
	 * layers of 128 bytes are 2^32 + 128.  Must be refused, not parsed.
	 */
	m = good_reg();
	m.hdr.nr_mems = 1;
	m.hdr.nr_layers = 1;
	m.layers[0].mem_index = 0;
	buf = pack(&m, 1, 1, &len);
	((struct kvs_msg_register *)buf)->nr_layers = 1u + (1u << 25);
	ck_assert_int_eq(proto_parse_register(buf, len, 1, UINT32_MAX, NULL, why, sizeof(why)),
			 -EBADMSG);
	/* Both counts wrapping: 2^27 mems of 96 and 2^27 layers of 128 bytes are 0 mod 2^32. */
	((struct kvs_msg_register *)buf)->nr_mems = 1u + (1u << 27);
	((struct kvs_msg_register *)buf)->nr_layers = 1u + (1u << 27);
	ck_assert_int_eq(proto_parse_register(buf, len, 1, UINT32_MAX, NULL, why, sizeof(why)),
			 -EBADMSG);
	free(buf);

	/* No layer, or no allocation. */
	m = good_reg();
	m.hdr.nr_layers = 0;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	m = good_reg();
	m.hdr.nr_mems = 0;
	ck_assert_int_eq(reg(&m, 0), -EINVAL);
	/* More allocations than layers cannot all be used. */
	m = good_reg();
	m.hdr.nr_mems = 3;
	m.hdr.nr_layers = 2;
	m.mems[2] = m.mems[1];
	m.mems[2].fd_index = 2;
	ck_assert_int_eq(reg(&m, 3), -EINVAL);
}
END_TEST

START_TEST(test_register_max_layers)
{
	struct reg_msg m = good_reg();
	uint8_t *buf;
	size_t len;

	ck_assert_int_eq(reg_full(&m, 0, 2, 3, NULL), 0);
	ck_assert_int_eq(reg_full(&m, 0, 2, 2, NULL), -E2BIG);
	ck_assert_ptr_nonnull(strstr(why, "limit"));
	/* The limit is checked before the size: a huge count is E2BIG, not a read. */
	buf = pack(&m, 2, 3, &len);
	((struct kvs_msg_register *)buf)->nr_layers = 100000;
	ck_assert_int_eq(proto_parse_register(buf, len, 2, 256, NULL, why, sizeof(why)), -E2BIG);
	free(buf);
}
END_TEST

START_TEST(test_register_flags)
{
	struct reg_msg m = good_reg();

	m.hdr.flags = 1u << 1;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	m.hdr.flags = KVS_REGISTER_REPLICATED | (1u << 31);
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	m = good_reg();
	m.hdr.resv0 = 1;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
}
END_TEST

START_TEST(test_register_mem_kinds)
{
	struct reg_msg m = good_reg();
	struct reg_req r;

	static const uint32_t bad[] = { 0, 4, UINT32_MAX };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m.mems[1].kind = bad[i];
		ck_assert_msg(reg(&m, 2) == -EINVAL, "memory kind %u accepted", bad[i]);
	}
	/* A VMM fd is an fd like a memfd. */
	m = good_reg();
	m.mems[1].kind = KVS_MEM_CUDA_VMM_FD;
	ck_assert_int_eq(reg(&m, 2), 0);
	/* A legacy IPC handle travels in the message and takes no fd. */
	m.mems[1].kind = KVS_MEM_CUDA_IPC;
	m.mems[1].fd_index = 0;
	m.mems[1].ipc_handle[0] = 0x42;
	m.mems[1].ipc_handle[63] = 0x24;
	ck_assert_int_eq(reg_full(&m, 0, 1, 256, &r), 0);
	ck_assert_uint_eq(r.mems[1].ipc_handle[63], 0x24);
	proto_reg_free(&r);
	ck_assert_int_eq(reg(&m, 2), -EBADF); /* the second fd is extra */
	/* ... and says so by fd_index 0. */
	m.mems[1].fd_index = 1;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	/* An fd allocation carries no handle. */
	m = good_reg();
	m.mems[0].ipc_handle[10] = 1;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	/* Size 0, reserved words. */
	m = good_reg();
	m.mems[1].size = 0;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	m = good_reg();
	m.mems[0].resv[1] = 1;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
}
END_TEST

START_TEST(test_register_fds)
{
	struct reg_msg m = good_reg();

	/* Missing: an index past the fds received. */
	ck_assert_int_eq(reg(&m, 1), -EBADF);
	ck_assert_int_eq(reg(&m, 0), -EBADF);
	m.mems[1].fd_index = 2;
	ck_assert_int_eq(reg(&m, 2), -EBADF);
	ck_assert_int_eq(reg(&m, 3), -EBADF); /* fd 1 then unused */
	/* Duplicate: two allocations on one fd. */
	m.mems[1].fd_index = 0;
	ck_assert_int_eq(reg(&m, 2), -EBADF);
	ck_assert_int_eq(reg(&m, 1), -EBADF);
	/* Extra: more fds than allocations use. */
	m = good_reg();
	ck_assert_int_eq(reg(&m, 3), -EBADF);
	ck_assert_int_eq(reg(&m, KVS_MAX_FDS), -EBADF);
	ck_assert_int_eq(reg(&m, KVS_MAX_FDS + 1), -EBADF);
	ck_assert_int_eq(reg(&m, ~0u), -EBADF);
	m.mems[1].fd_index = UINT32_MAX;
	ck_assert_int_eq(reg(&m, 2), -EBADF);
}
END_TEST

START_TEST(test_register_mem_use)
{
	struct reg_msg m = good_reg();

	/* Allocation 1 given but no layer in it. */
	m.layers[1].mem_index = 0;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "not used"));
	/* A layer in an allocation that does not exist. */
	m = good_reg();
	m.layers[1].mem_index = 2;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	m.layers[1].mem_index = UINT32_MAX;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
}
END_TEST

START_TEST(test_register_layer_names)
{
	struct reg_msg m = good_reg();

	strcpy(m.layers[2].name, "model.layers.0");
	ck_assert_int_eq(reg(&m, 2), -EEXIST);
	ck_assert_ptr_nonnull(strstr(why, "model.layers.0"));
	/* Neighbours too. */
	m = good_reg();
	strcpy(m.layers[1].name, "model.layers.0");
	ck_assert_int_eq(reg(&m, 2), -EEXIST);
	/* Duplicates are found however far apart (first and last). */
	m = good_reg();
	m.hdr.nr_layers = MAX_TEST_LAYERS;
	for (unsigned i = 3; i < MAX_TEST_LAYERS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "l%u", i);
		set_layer(&m.layers[i], name, 1);
	}
	ck_assert_int_eq(reg(&m, 2), 0);
	strcpy(m.layers[MAX_TEST_LAYERS - 1].name, "model.layers.0");
	ck_assert_int_eq(reg(&m, 2), -EEXIST);

	m = good_reg();
	m.layers[1].name[0] = '\0';
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	m = good_reg();
	memset(m.layers[1].name, 'a', sizeof(m.layers[1].name)); /* no NUL */
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	m.layers[1].name[KVS_NAME_MAX - 1] = '\0'; /* 63 characters */
	ck_assert_int_eq(reg(&m, 2), 0);
	m = good_reg();
	strcpy(m.layers[1].name, "layer 1");
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	/* Reserved words of a layer. */
	m = good_reg();
	m.layers[0].resv0 = 1;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
	m = good_reg();
	m.layers[2].resv[1] = 1;
	ck_assert_int_eq(reg(&m, 2), -EINVAL);
}
END_TEST

/* ---- replies ------------------------------------------------------- */

START_TEST(test_make_reply)
{
	struct kvs_msg_reply r;
	char text[KVS_TEXT_MAX + 50];

	memset(&r, 0xff, sizeof(r));
	proto_make_reply(&r, 9, -ENOENT, "no such lease");
	ck_assert_uint_eq(r.hdr.type, KVS_MSG_REPLY);
	ck_assert_uint_eq(r.hdr.size, sizeof(r));
	ck_assert_uint_eq(r.hdr.seq, 9);
	ck_assert_uint_eq(r.hdr.flags, 0);
	ck_assert_int_eq(r.status, -ENOENT);
	ck_assert_uint_eq(r.rev_major, KVS_WIRE_MAJOR);
	ck_assert_uint_eq(r.rev_minor, KVS_WIRE_MINOR);
	ck_assert_str_eq(r.text, "no such lease");
	/* The rest of the text is zero: nothing of the daemon's memory leaks out. */
	for (size_t i = strlen(r.text); i < sizeof(r.text); i++)
		ck_assert_uint_eq((uint8_t)r.text[i], 0);

	memset(text, 'x', sizeof(text));
	text[sizeof(text) - 1] = '\0';
	proto_make_reply(&r, 1, 0, text);
	ck_assert_uint_eq(strlen(r.text), KVS_TEXT_MAX - 1);
	proto_make_reply(&r, 1, 0, NULL);
	ck_assert_str_eq(r.text, "");
}
END_TEST

UNIT_TESTS(test_header, test_header_max, test_empty, test_check_name, test_hello_good,
	   test_hello_revision, test_hello_size, test_hello_reserved, test_hello_role,
	   test_hello_names, test_hello_ranks, test_hello_device, test_register_good,
	   test_register_counts, test_register_max_layers, test_register_flags,
	   test_register_mem_kinds, test_register_fds, test_register_mem_use,
	   test_register_layer_names, test_make_reply)

const struct unit_suite unit_suite = {
	.name = "proto",
	.add_tests = add_tests,
};
