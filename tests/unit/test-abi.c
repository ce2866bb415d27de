/* SPDX-License-Identifier: MIT */
/*
 * The session-region ABI (kvstash/abi.h) and the wire protocol
 * (kvstash/wire.h): sizes, every field's offset, the values of every
 * constant that crosses a process boundary, and the little-endian encoding
 * the headers promise.
 *
 * The headers' _Static_asserts cover the sizes and some offsets; this test
 * pins every offset, so moving a field (even one the asserts forget) or
 * renumbering an opcode fails here, and an engine built against an older
 * header keeps working only as long as this test passes unchanged.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <kvstash/abi.h>
#include <kvstash/wire.h>

#include "unit.h"

#define OFF(type, field, off) ck_assert_uint_eq(offsetof(type, field), off)
#define FSIZE(type, field, n) ck_assert_uint_eq(sizeof(((type *)0)->field), n)

/* Write @v as @n little-endian bytes at @p. */
static void put_le(uint8_t *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

START_TEST(test_host_is_little_endian)
{
	/* The ABI's integers are native in memory: only valid on a little-endian host. */
	const uint32_t v = 0x04030201u;
	uint8_t b[4];

	memcpy(b, &v, sizeof(b));
	ck_assert_uint_eq(b[0], 1);
	ck_assert_uint_eq(b[3], 4);
}
END_TEST

START_TEST(test_sqe_layout)
{
	ck_assert_uint_eq(sizeof(struct kvs_sqe), 64);
	OFF(struct kvs_sqe, opcode, 0);
	OFF(struct kvs_sqe, flags, 1);
	OFF(struct kvs_sqe, resv0, 2);
	OFF(struct kvs_sqe, count, 4);
	OFF(struct kvs_sqe, user_data, 8);
	OFF(struct kvs_sqe, arg_off, 16);
	OFF(struct kvs_sqe, arg_len, 20);
	OFF(struct kvs_sqe, lease, 24);
	OFF(struct kvs_sqe, req_id, 32);
	OFF(struct kvs_sqe, layer_begin, 40);
	OFF(struct kvs_sqe, layer_count, 44);
	OFF(struct kvs_sqe, fence_slot, 48);
	OFF(struct kvs_sqe, fence_value, 52);
	OFF(struct kvs_sqe, resv2, 56);
	FSIZE(struct kvs_sqe, opcode, 1);
	FSIZE(struct kvs_sqe, flags, 1);
	FSIZE(struct kvs_sqe, resv0, 2);
	FSIZE(struct kvs_sqe, count, 4);
	FSIZE(struct kvs_sqe, arg_off, 4);
	FSIZE(struct kvs_sqe, arg_len, 4);
	FSIZE(struct kvs_sqe, lease, 8);
	/* 64-byte entries in a ring: no entry straddles a cache line. */
	ck_assert_uint_eq(_Alignof(struct kvs_sqe), 8);
}
END_TEST

START_TEST(test_sqe_encoding)
{
	uint8_t raw[64] = { 0 };
	struct kvs_sqe sqe;

	/* An SQE as another language's binding would write it, byte by byte. */
	raw[0] = KVS_OP_LOAD;
	raw[1] = 0x01;
	put_le(raw + 4, 0x11223344u, 4);
	put_le(raw + 8, 0x0102030405060708ull, 8);
	put_le(raw + 16, 0xa0b0c0d0u, 4);
	put_le(raw + 20, 0x00000400u, 4);
	put_le(raw + 24, 0xdeadbeefcafef00dull, 8);
	put_le(raw + 32, 42, 8);
	put_le(raw + 40, 3, 4);
	put_le(raw + 44, 5, 4);
	memcpy(&sqe, raw, sizeof(sqe));
	ck_assert_uint_eq(sqe.opcode, 3);
	ck_assert_uint_eq(sqe.flags, 1);
	ck_assert_uint_eq(sqe.resv0, 0);
	ck_assert_uint_eq(sqe.count, 0x11223344u);
	ck_assert_uint_eq(sqe.user_data, 0x0102030405060708ull);
	ck_assert_uint_eq(sqe.arg_off, 0xa0b0c0d0u);
	ck_assert_uint_eq(sqe.arg_len, 0x400);
	ck_assert_uint_eq(sqe.lease, 0xdeadbeefcafef00dull);
	ck_assert_uint_eq(sqe.req_id, 42);
	ck_assert_uint_eq(sqe.layer_begin, 3);
	ck_assert_uint_eq(sqe.layer_count, 5);
	ck_assert_uint_eq(sqe.fence_slot, 0);
	ck_assert_uint_eq(sqe.fence_value, 0);
	ck_assert_uint_eq(sqe.resv2, 0);
}
END_TEST

START_TEST(test_cqe_layout)
{
	uint8_t raw[32] = { 0 };
	struct kvs_cqe cqe;

	ck_assert_uint_eq(sizeof(struct kvs_cqe), 32);
	OFF(struct kvs_cqe, user_data, 0);
	OFF(struct kvs_cqe, res, 8);
	OFF(struct kvs_cqe, flags, 12);
	OFF(struct kvs_cqe, result0, 16);
	OFF(struct kvs_cqe, result1, 24);
	/* res is a signed two's-complement -errno. */
	put_le(raw + 8, (uint32_t)-ENOENT, 4);
	put_le(raw + 12, KVS_CQE_LOCAL, 4);
	put_le(raw + 16, 0x8877665544332211ull, 8);
	memcpy(&cqe, raw, sizeof(cqe));
	ck_assert_int_eq(cqe.res, -ENOENT);
	ck_assert_uint_eq(cqe.flags, KVS_CQE_LOCAL);
	ck_assert_uint_eq(cqe.result0, 0x8877665544332211ull);
}
END_TEST

START_TEST(test_abi_constants)
{
	const uint32_t magic = KVS_REGION_MAGIC;

	/* The magic reads "KVST" in memory. */
	ck_assert_int_eq(memcmp(&magic, "KVST", 4), 0);
	ck_assert_uint_eq(KVS_REGION_VERSION, 1);
	ck_assert_uint_eq(KVS_PART_SQ, 1);
	ck_assert_uint_eq(KVS_PART_CQ, 2);
	ck_assert_uint_eq(KVS_PART_ARGS, 3);
	ck_assert_uint_eq(KVS_KEY_SIZE, 16);
	ck_assert_uint_eq(KVS_ARG_ALIGN, 8);
	/* Argument bytes per key: a SAVE's key and its u32 block id, a QUERY's key, a LOAD's id. */
	ck_assert_uint_eq(KVS_SAVE_ARG_SIZE, 20);
	ck_assert_uint_eq(KVS_QUERY_ARG_SIZE, 16);
	ck_assert_uint_eq(KVS_LOAD_ARG_SIZE, 4);
	ck_assert_uint_eq(KVS_OP_NOP, 0);
	ck_assert_uint_eq(KVS_OP_SAVE, 1);
	ck_assert_uint_eq(KVS_OP_QUERY, 2);
	ck_assert_uint_eq(KVS_OP_LOAD, 3);
	ck_assert_uint_eq(KVS_OP_RELEASE, 4);
	ck_assert_uint_eq(KVS_OP_FLUSH, 5);
	ck_assert_uint_eq(KVS_OP_LAST, KVS_OP_FLUSH);
	ck_assert_uint_eq(KVS_QUERY_NOLEASE, 1);
	ck_assert_uint_eq(KVS_FLUSH_INSTANCE, 1);
	ck_assert_uint_eq(KVS_CQE_LOCAL, 1);
	/* An errno value, so the same on every Linux architecture kvstash builds for. */
	ck_assert_int_eq(KVS_EUNSEALED, EUNATCH);
}
END_TEST

START_TEST(test_wire_header)
{
	uint8_t raw[16];
	struct kvs_msg_hdr h;

	ck_assert_uint_eq(sizeof(struct kvs_msg_hdr), 16);
	OFF(struct kvs_msg_hdr, type, 0);
	OFF(struct kvs_msg_hdr, size, 4);
	OFF(struct kvs_msg_hdr, seq, 8);
	OFF(struct kvs_msg_hdr, flags, 12);
	put_le(raw, KVS_MSG_REGISTER, 4);
	put_le(raw + 4, 0x00010020, 4);
	put_le(raw + 8, 0xfffffffe, 4);
	put_le(raw + 12, 0, 4);
	memcpy(&h, raw, sizeof(h));
	ck_assert_uint_eq(h.type, 3);
	ck_assert_uint_eq(h.size, 0x00010020);
	ck_assert_uint_eq(h.seq, 0xfffffffe);
}
END_TEST

/*
 * The frozen prefixes: any two revisions can read each other's revision
 * from a HELLO (bytes 16-19) and a reply's status and revision (16-23).
 */
START_TEST(test_wire_frozen_prefix)
{
	uint8_t raw[sizeof(struct kvs_msg_reply)] = { 0 };
	struct kvs_msg_reply r;
	struct kvs_msg_hello h;

	OFF(struct kvs_msg_hello, rev_major, 16);
	OFF(struct kvs_msg_hello, rev_minor, 18);
	FSIZE(struct kvs_msg_hello, rev_major, 2);
	OFF(struct kvs_msg_reply, status, 16);
	OFF(struct kvs_msg_reply, rev_major, 20);
	OFF(struct kvs_msg_reply, rev_minor, 22);
	FSIZE(struct kvs_msg_reply, status, 4);

	put_le(raw + 16, 7, 2);
	put_le(raw + 18, 9, 2);
	memcpy(&h, raw, sizeof(struct kvs_msg_hdr) + 4);
	ck_assert_uint_eq(h.rev_major, 7);
	ck_assert_uint_eq(h.rev_minor, 9);

	put_le(raw + 16, (uint32_t)-EPROTONOSUPPORT, 4);
	put_le(raw + 20, 2, 2);
	put_le(raw + 22, 1, 2);
	memcpy(&r, raw, sizeof(r));
	ck_assert_int_eq(r.status, -EPROTONOSUPPORT);
	ck_assert_uint_eq(r.rev_major, 2);
	ck_assert_uint_eq(r.rev_minor, 1);
}
END_TEST

START_TEST(test_wire_hello)
{
	ck_assert_uint_eq(sizeof(struct kvs_msg_hello), 304);
	OFF(struct kvs_msg_hello, hdr, 0);
	OFF(struct kvs_msg_hello, role, 20);
	OFF(struct kvs_msg_hello, tp_rank, 24);
	OFF(struct kvs_msg_hello, tp_size, 28);
	OFF(struct kvs_msg_hello, world_size, 32);
	OFF(struct kvs_msg_hello, device_kind, 36);
	OFF(struct kvs_msg_hello, device_uuid, 40);
	OFF(struct kvs_msg_hello, sq_entries, 56);
	OFF(struct kvs_msg_hello, cq_entries, 60);
	OFF(struct kvs_msg_hello, arg_bytes, 64);
	OFF(struct kvs_msg_hello, flags, 72);
	OFF(struct kvs_msg_hello, resv0, 76);
	OFF(struct kvs_msg_hello, instance, 80);
	OFF(struct kvs_msg_hello, ns, 144);
	OFF(struct kvs_msg_hello, resv, 272);
	FSIZE(struct kvs_msg_hello, device_uuid, 16);
	FSIZE(struct kvs_msg_hello, instance, 64);
	FSIZE(struct kvs_msg_hello, ns, 128);

	ck_assert_uint_eq(sizeof(struct kvs_msg_reply), 216);
	OFF(struct kvs_msg_reply, text, 24);
	FSIZE(struct kvs_msg_reply, text, 192);

	ck_assert_uint_eq(sizeof(struct kvs_msg_hello_reply), 304);
	OFF(struct kvs_msg_hello_reply, r, 0);
	OFF(struct kvs_msg_hello_reply, session_id, 216);
	OFF(struct kvs_msg_hello_reply, sq_entries, 224);
	OFF(struct kvs_msg_hello_reply, cq_entries, 228);
	OFF(struct kvs_msg_hello_reply, arg_bytes, 232);
	OFF(struct kvs_msg_hello_reply, region_size, 240);
	OFF(struct kvs_msg_hello_reply, max_keys, 248);
	OFF(struct kvs_msg_hello_reply, max_inflight, 252);
	OFF(struct kvs_msg_hello_reply, max_layers, 256);
	OFF(struct kvs_msg_hello_reply, lease_ttl_ms, 260);
	OFF(struct kvs_msg_hello_reply, worker, 264);
	OFF(struct kvs_msg_hello_reply, resv0, 268);
	OFF(struct kvs_msg_hello_reply, resv, 272);
}
END_TEST

START_TEST(test_wire_register)
{
	ck_assert_uint_eq(sizeof(struct kvs_msg_register), 32);
	OFF(struct kvs_msg_register, nr_mems, 16);
	OFF(struct kvs_msg_register, nr_layers, 20);
	OFF(struct kvs_msg_register, flags, 24);
	OFF(struct kvs_msg_register, resv0, 28);

	ck_assert_uint_eq(sizeof(struct kvs_wire_mem), 96);
	OFF(struct kvs_wire_mem, kind, 0);
	OFF(struct kvs_wire_mem, fd_index, 4);
	OFF(struct kvs_wire_mem, size, 8);
	OFF(struct kvs_wire_mem, ipc_handle, 16);
	OFF(struct kvs_wire_mem, resv, 80);
	FSIZE(struct kvs_wire_mem, ipc_handle, 64);

	ck_assert_uint_eq(sizeof(struct kvs_wire_layer), 128);
	OFF(struct kvs_wire_layer, name, 0);
	OFF(struct kvs_wire_layer, mem_index, 64);
	OFF(struct kvs_wire_layer, segments, 68);
	OFF(struct kvs_wire_layer, offset, 72);
	OFF(struct kvs_wire_layer, num_blocks, 80);
	OFF(struct kvs_wire_layer, resv0, 84);
	OFF(struct kvs_wire_layer, segment_bytes, 88);
	OFF(struct kvs_wire_layer, kv_stride, 96);
	OFF(struct kvs_wire_layer, block_stride, 104);
	OFF(struct kvs_wire_layer, resv, 112);

	/* The largest registration the daemon allows (512 layers, one mem each) fits a packet. */
	ck_assert_uint_le(sizeof(struct kvs_msg_register) + 512 * sizeof(struct kvs_wire_mem) +
				  512 * sizeof(struct kvs_wire_layer),
			  KVS_MSG_MAX);
}
END_TEST

START_TEST(test_wire_admin)
{
	ck_assert_uint_eq(sizeof(struct kvs_msg_status_daemon), 112);
	OFF(struct kvs_msg_status_daemon, version, 16);
	OFF(struct kvs_msg_status_daemon, pid, 48);
	OFF(struct kvs_msg_status_daemon, nr_sessions, 52);
	OFF(struct kvs_msg_status_daemon, uptime_ms, 56);
	OFF(struct kvs_msg_status_daemon, nr_workers, 64);
	OFF(struct kvs_msg_status_daemon, nr_instances, 68);
	OFF(struct kvs_msg_status_daemon, cuda_available, 72);
	OFF(struct kvs_msg_status_daemon, resv, 80);

	ck_assert_uint_eq(sizeof(struct kvs_msg_status_session), 448);
	OFF(struct kvs_msg_status_session, session_id, 16);
	OFF(struct kvs_msg_status_session, pid, 24);
	OFF(struct kvs_msg_status_session, uid, 28);
	OFF(struct kvs_msg_status_session, role, 32);
	OFF(struct kvs_msg_status_session, tp_rank, 36);
	OFF(struct kvs_msg_status_session, tp_size, 40);
	OFF(struct kvs_msg_status_session, world_size, 44);
	OFF(struct kvs_msg_status_session, device_kind, 48);
	OFF(struct kvs_msg_status_session, worker, 52);
	OFF(struct kvs_msg_status_session, device_uuid, 56);
	OFF(struct kvs_msg_status_session, nr_layers, 72);
	OFF(struct kvs_msg_status_session, sealed, 76);
	OFF(struct kvs_msg_status_session, slot_bytes, 80);
	OFF(struct kvs_msg_status_session, mapped_bytes, 88);
	OFF(struct kvs_msg_status_session, instance, 96);
	OFF(struct kvs_msg_status_session, ns, 160);
	OFF(struct kvs_msg_status_session, first_layer, 288);
	OFF(struct kvs_msg_status_session, last_layer, 352);
	OFF(struct kvs_msg_status_session, resv, 416);

	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_global), 304);
	OFF(struct kvs_msg_stats_global, uptime_ms, 16);
	OFF(struct kvs_msg_stats_global, pool_capacity_bytes, 24);
	OFF(struct kvs_msg_stats_global, leases_live, 16 + 15 * 8);
	OFF(struct kvs_msg_stats_global, protocol_errors, 16 + 27 * 8);
	OFF(struct kvs_msg_stats_global, resv, 16 + 28 * 8);

	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_node), 88);
	OFF(struct kvs_msg_stats_node, node, 16);
	OFF(struct kvs_msg_stats_node, hugepages, 20);
	OFF(struct kvs_msg_stats_node, capacity_bytes, 24);
	OFF(struct kvs_msg_stats_node, used_bytes, 32);
	OFF(struct kvs_msg_stats_node, extents_total, 40);
	OFF(struct kvs_msg_stats_node, extents_free, 48);
	OFF(struct kvs_msg_stats_node, resv, 56);

	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_session), 200);
	OFF(struct kvs_msg_stats_session, session_id, 16);
	OFF(struct kvs_msg_stats_session, pid, 24);
	OFF(struct kvs_msg_stats_session, tp_rank, 28);
	OFF(struct kvs_msg_stats_session, ops, 32);
	OFF(struct kvs_msg_stats_session, inflight, 96);
	OFF(struct kvs_msg_stats_session, instance, 104);
	OFF(struct kvs_msg_stats_session, resv, 168);
}
END_TEST

START_TEST(test_wire_constants)
{
	ck_assert_uint_eq(KVS_WIRE_MAJOR, 1);
	ck_assert_uint_eq(KVS_MSG_MAX, 131072);
	ck_assert_uint_eq(KVS_MAX_FDS, 64);
	ck_assert_uint_eq(KVS_NAME_MAX, 64);
	ck_assert_uint_eq(KVS_NS_MAX, 128);
	ck_assert_uint_eq(KVS_TEXT_MAX, 192);
	ck_assert_uint_eq(KVS_IPC_HANDLE_SIZE, 64);
	ck_assert_uint_eq(KVS_MSG_HELLO, 1);
	ck_assert_uint_eq(KVS_MSG_HELLO_REPLY, 2);
	ck_assert_uint_eq(KVS_MSG_REGISTER, 3);
	ck_assert_uint_eq(KVS_MSG_UNREGISTER, 4);
	ck_assert_uint_eq(KVS_MSG_GOODBYE, 5);
	ck_assert_uint_eq(KVS_MSG_REPLY, 6);
	ck_assert_uint_eq(KVS_MSG_STATUS, 16);
	ck_assert_uint_eq(KVS_MSG_STATUS_DAEMON, 17);
	ck_assert_uint_eq(KVS_MSG_STATUS_SESSION, 18);
	ck_assert_uint_eq(KVS_MSG_STATS, 19);
	ck_assert_uint_eq(KVS_MSG_STATS_GLOBAL, 20);
	ck_assert_uint_eq(KVS_MSG_STATS_NODE, 21);
	ck_assert_uint_eq(KVS_MSG_STATS_SESSION, 22);
	ck_assert_uint_eq(KVS_MSG_END, 23);
	ck_assert_uint_eq(KVS_ROLE_WORKER, 1);
	ck_assert_uint_eq(KVS_ROLE_SCHEDULER, 2);
	ck_assert_uint_eq(KVS_ROLE_ADMIN, 3);
	ck_assert_uint_eq(KVS_DEVICE_HOST, 1);
	ck_assert_uint_eq(KVS_DEVICE_CUDA, 2);
	ck_assert_uint_eq(KVS_MEM_HOST_FD, 1);
	ck_assert_uint_eq(KVS_MEM_CUDA_IPC, 2);
	ck_assert_uint_eq(KVS_MEM_CUDA_VMM_FD, 3);
	ck_assert_uint_eq(KVS_REGISTER_REPLICATED, 1);
}
END_TEST

UNIT_TESTS(test_host_is_little_endian, test_sqe_layout, test_sqe_encoding, test_cqe_layout,
	   test_abi_constants, test_wire_header, test_wire_frozen_prefix, test_wire_hello,
	   test_wire_register, test_wire_admin, test_wire_constants)

const struct unit_suite unit_suite = {
	.name = "abi",
	.add_tests = add_tests,
};
