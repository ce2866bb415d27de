/* SPDX-License-Identifier: MIT */
/*
 * fuzz-proto: socket messages through the daemon's parsers.
 *
 * Input: byte 0 is the number of fds that came with the packet (mod 66, so
 * one more than KVS_MAX_FDS can arrive at the parser too), byte 1 the
 * daemon's [session] max_layers (0: the default, 256), the rest is the
 * packet.  The packet goes through proto_check_header() and then, by its
 * type, through the parser session_handle_input() gives it to, in the same
 * order and with the same early refusals.  What a parser accepts must be
 * what wire.h promises the rest of the daemon; what it refuses must come
 * with an -errno from the documented set and a reason.
 */
#include <errno.h>

#include "wire/proto.h"
#include "fuzz.h"

#define DEFAULT_MAX_LAYERS 256u

static bool terminated(const char *s, size_t n)
{
	return memchr(s, '\0', n) != NULL;
}

static void check_hello(const struct hello_req *h)
{
	FUZZ_CHECK(h->rev_major == KVS_WIRE_MAJOR, "major %u", h->rev_major);
	FUZZ_CHECK(h->role == KVS_ROLE_WORKER || h->role == KVS_ROLE_SCHEDULER ||
			   h->role == KVS_ROLE_ADMIN,
		   "role %u", h->role);
	FUZZ_CHECK(!(h->flags & ~(KVS_HELLO_CLUSTER | KVS_HELLO_FENCES)) &&
			   (h->role != KVS_ROLE_ADMIN || !h->flags) &&
			   (h->role == KVS_ROLE_WORKER || !(h->flags & KVS_HELLO_FENCES)),
		   "HELLO flags 0x%x for role %u", h->flags, h->role);
	if (h->role == KVS_ROLE_ADMIN)
		return;
	FUZZ_CHECK(terminated(h->instance, sizeof(h->instance)) &&
			   proto_check_name(h->instance, sizeof(h->instance)) == 0,
		   "instance name accepted unchecked");
	FUZZ_CHECK(terminated(h->ns, sizeof(h->ns)) && proto_check_name(h->ns, sizeof(h->ns)) == 0,
		   "namespace accepted unchecked");
	FUZZ_CHECK(h->tp_size >= 1 && h->tp_size <= PROTO_MAX_WORLD && h->tp_rank < h->tp_size,
		   "tp %u/%u", h->tp_rank, h->tp_size);
	FUZZ_CHECK(h->world_size == h->tp_size, "world %u", h->world_size);
	FUZZ_CHECK(h->device_kind == KVS_DEVICE_HOST || h->device_kind == KVS_DEVICE_CUDA,
		   "device kind %u", h->device_kind);
}

static void check_register(const struct reg_req *r, size_t len, unsigned nfds, uint32_t max_layers)
{
	bool fd_seen[KVS_MAX_FDS] = { false };
	unsigned fd_kinds = 0;

	FUZZ_CHECK(r->nr_mems >= 1 && r->nr_layers >= 1 && r->nr_layers <= max_layers &&
			   r->nr_mems <= r->nr_layers,
		   "%u mems, %u layers (max %u)", r->nr_mems, r->nr_layers, max_layers);
	FUZZ_CHECK(len == sizeof(struct kvs_msg_register) +
				   (size_t)r->nr_mems * sizeof(struct kvs_wire_mem) +
				   (size_t)r->nr_layers * sizeof(struct kvs_wire_layer),
		   "length %zu does not match the counts", len);
	FUZZ_CHECK(!(r->flags & ~KVS_REGISTER_REPLICATED), "flags 0x%x", r->flags);
	for (uint32_t i = 0; i < r->nr_mems; i++) {
		const struct kvs_wire_mem *m = &r->mems[i];

		FUZZ_CHECK(m->size > 0, "mem %u of size 0", i);
		if (m->kind == KVS_MEM_HOST_FD || m->kind == KVS_MEM_CUDA_VMM_FD) {
			FUZZ_CHECK(m->fd_index < nfds && !fd_seen[m->fd_index],
				   "mem %u: fd %u of %u, or twice", i, m->fd_index, nfds);
			fd_seen[m->fd_index] = true;
			fd_kinds++;
		} else {
			FUZZ_CHECK(m->kind == KVS_MEM_CUDA_IPC && m->fd_index == 0,
				   "mem %u: kind %u fd_index %u", i, m->kind, m->fd_index);
		}
	}
	FUZZ_CHECK(fd_kinds == nfds, "%u fds, %u used", nfds, fd_kinds);
	for (uint32_t i = 0; i < r->nr_layers; i++) {
		const struct kvs_wire_layer *l = &r->layers[i];

		FUZZ_CHECK(terminated(l->name, sizeof(l->name)) &&
				   proto_check_name(l->name, sizeof(l->name)) == 0,
			   "layer %u name accepted unchecked", i);
		FUZZ_CHECK(l->mem_index < r->nr_mems, "layer %u: mem %u", i, l->mem_index);
		for (uint32_t j = 0; j < i; j++)
			FUZZ_CHECK(strcmp(r->layers[j].name, l->name) != 0, "layer name twice");
	}
	for (uint32_t i = 0; i < r->nr_mems; i++) {
		bool used = false;

		for (uint32_t j = 0; j < r->nr_layers; j++)
			used |= r->layers[j].mem_index == i;
		FUZZ_CHECK(used, "mem %u unused", i);
	}
}

static void check_refusal(int r, const char *why, const int *allowed)
{
	bool ok = false;

	for (; *allowed; allowed++)
		ok |= r == *allowed;
	FUZZ_CHECK(ok, "undocumented error %d", r);
	FUZZ_CHECK(why[0] != '\0', "refusal %d without a reason", r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int hello_errs[] = { -EBADMSG, -EPROTONOSUPPORT, -EINVAL, 0 };
	static const int reg_errs[] = { -EBADMSG, -EINVAL, -E2BIG, -EBADF, -EEXIST, -ENOMEM, 0 };
	static const int empty_errs[] = { -EBADMSG, 0 };
	char why[KVS_TEXT_MAX];
	uint32_t type, seq, max_layers;
	unsigned nfds;
	uint8_t *msg;
	size_t len;
	int r;

	if (size < 2)
		return 0;
	nfds = data[0] % (KVS_MAX_FDS + 2);
	max_layers = data[1] ? data[1] * 2u : DEFAULT_MAX_LAYERS;
	len = size - 2;
	msg = fuzz_dup(data + 2, len);
	memset(why, 0, sizeof(why));

	r = proto_check_header(msg, len, &type, &seq);
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG, "header: %d", r);
		goto out;
	}
	FUZZ_CHECK(len >= sizeof(struct kvs_msg_hdr) && len <= KVS_MSG_MAX &&
			   fuzz_u32(msg + offsetof(struct kvs_msg_hdr, size)) == len,
		   "a header of %zu bytes passed", len);
	/* session_handle_input(): fds ride only on REGISTER. */
	if (type != KVS_MSG_REGISTER && nfds)
		goto out;
	switch (type) {
	case KVS_MSG_HELLO: {
		struct hello_req h;

		r = proto_parse_hello(msg, len, &h, why, sizeof(why));
		if (r == 0)
			check_hello(&h);
		else
			check_refusal(r, why, hello_errs);
		break;
	}
	case KVS_MSG_REGISTER: {
		struct reg_req req = { 0 };

		r = proto_parse_register(msg, len, nfds, max_layers, &req, why, sizeof(why));
		if (r == 0) {
			check_register(&req, len, nfds, max_layers);
			proto_reg_free(&req);
		} else {
			check_refusal(r, why, reg_errs);
			FUZZ_CHECK(!req.mems && !req.layers, "a refused REGISTER left allocations");
		}
		break;
	}
	case KVS_MSG_UNREGISTER:
	case KVS_MSG_GOODBYE:
	case KVS_MSG_STATUS:
	case KVS_MSG_STATS:
		r = proto_parse_empty(msg, len, why, sizeof(why));
		if (r == 0)
			FUZZ_CHECK(len == sizeof(struct kvs_msg_hdr), "payload accepted");
		else
			check_refusal(r, why, empty_errs);
		break;
	default:
		break; /* refused by type alone */
	}
	FUZZ_CHECK(terminated(why, sizeof(why)), "reason not terminated");
out:
	free(msg);
	return 0;
}
