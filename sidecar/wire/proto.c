/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "common/bits.h"
#include "common/name.h"
#include "common/why.h"
#include "wire/proto.h"
#include "base/util.h"


int proto_check_name(const char *s, size_t max)
{
	return name_check(s, max);
}

int proto_check_header(const void *buf, size_t len, uint32_t *ret_type, uint32_t *ret_seq)
{
	struct kvs_msg_hdr h;

	if (len < sizeof(h) || len > KVS_MSG_MAX)
		return -EBADMSG;
	memcpy(&h, buf, sizeof(h));
	if (h.size != len || h.flags != 0)
		return -EBADMSG;
	*ret_type = h.type;
	*ret_seq = h.seq;
	return 0;
}

int proto_parse_empty(const void *buf, size_t len, char *why, size_t wl)
{
	if (len != sizeof(struct kvs_msg_hdr)) {
		WHY("message of %zu bytes where %zu expected", len, sizeof(struct kvs_msg_hdr));
		return -EBADMSG;
	}
	return 0;
}

int proto_parse_hello(const void *buf, size_t len, struct hello_req *ret, char *why, size_t wl)
{
	struct kvs_msg_hello m;
	struct hello_req h = { 0 };

	/* The revision sits at a frozen offset: check it before anything else. */
	if (len < offsetof(struct kvs_msg_hello, rev_minor) + sizeof(m.rev_minor)) {
		WHY("HELLO of %zu bytes is too short", len);
		return -EBADMSG;
	}
	memcpy(&m.rev_major, (const char *)buf + offsetof(struct kvs_msg_hello, rev_major), 2);
	memcpy(&m.rev_minor, (const char *)buf + offsetof(struct kvs_msg_hello, rev_minor), 2);
	if (m.rev_major != KVS_WIRE_MAJOR) {
		WHY("wire revision %u.%u not supported: kvstashd speaks %u.%u", m.rev_major,
		    m.rev_minor, KVS_WIRE_MAJOR, KVS_WIRE_MINOR);
		return -EPROTONOSUPPORT;
	}
	/* A newer minor may append fields; we read ours and ignore the rest. */
	if (len < sizeof(m)) {
		WHY("HELLO of %zu bytes, expected %zu", len, sizeof(m));
		return -EBADMSG;
	}
	memcpy(&m, buf, sizeof(m));
	if (m.resv0 || !all_zero(m.resv, sizeof(m.resv))) {
		WHY("reserved HELLO fields are not zero");
		return -EINVAL;
	}
	if (m.flags & ~(KVS_HELLO_CLUSTER | KVS_HELLO_FENCES)) {
		WHY("unknown HELLO flags 0x%x", m.flags);
		return -EINVAL;
	}
	if ((m.flags & KVS_HELLO_FENCES) && m.role != KVS_ROLE_WORKER) {
		WHY("fences are for worker sessions (their SAVEs and LOADs)");
		return -EINVAL;
	}
	h.rev_major = m.rev_major;
	h.rev_minor = m.rev_minor;
	h.role = m.role;
	switch (m.role) {
	case KVS_ROLE_ADMIN:
		if (m.flags) {
			WHY("an admin session has no region: HELLO flags must be 0");
			return -EINVAL;
		}
		*ret = h;
		return 0;
	case KVS_ROLE_WORKER:
	case KVS_ROLE_SCHEDULER:
		break;
	default:
		WHY("unknown role %u", m.role);
		return -EINVAL;
	}
	if (!wire_string(h.instance, m.instance, sizeof(m.instance)) ||
	    proto_check_name(h.instance, sizeof(h.instance)) < 0) {
		WHY("instance must be 1-%u characters of [A-Za-z0-9._:/@+=-]", KVS_NAME_MAX - 1);
		return -EINVAL;
	}
	if (!wire_string(h.ns, m.ns, sizeof(m.ns)) || proto_check_name(h.ns, sizeof(h.ns)) < 0) {
		WHY("namespace must be 1-%u characters of [A-Za-z0-9._:/@+=-]", KVS_NS_MAX - 1);
		return -EINVAL;
	}
	if (m.tp_size == 0 || m.tp_size > PROTO_MAX_WORLD || m.tp_rank >= m.tp_size) {
		WHY("tp_rank %u / tp_size %u out of range", m.tp_rank, m.tp_size);
		return -EINVAL;
	}
	/* Pipeline stages register as separate instances (kvstash(7)). */
	if (m.world_size != m.tp_size) {
		WHY("world_size %u must equal tp_size %u", m.world_size, m.tp_size);
		return -EINVAL;
	}
	if (m.device_kind != KVS_DEVICE_HOST && m.device_kind != KVS_DEVICE_CUDA) {
		WHY("unknown device kind %u", m.device_kind);
		return -EINVAL;
	}
	if (m.device_kind == KVS_DEVICE_CUDA && all_zero(m.device_uuid, sizeof(m.device_uuid))) {
		WHY("a CUDA device needs its UUID");
		return -EINVAL;
	}
	if (m.device_kind == KVS_DEVICE_HOST && !all_zero(m.device_uuid, sizeof(m.device_uuid))) {
		WHY("a host device has no UUID");
		return -EINVAL;
	}
	h.flags = m.flags;
	h.tp_rank = m.tp_rank;
	h.tp_size = m.tp_size;
	h.world_size = m.world_size;
	h.device_kind = m.device_kind;
	memcpy(h.device_uuid, m.device_uuid, sizeof(h.device_uuid));
	h.sq_entries = m.sq_entries;
	h.cq_entries = m.cq_entries;
	h.arg_bytes = m.arg_bytes;
	*ret = h;
	return 0;
}

void proto_reg_free(struct reg_req *req)
{
	if (!req)
		return;
	req->mems = mfree(req->mems);
	req->layers = mfree(req->layers);
}

bool proto_mem_has_fd(uint32_t kind)
{
	return kind == KVS_MEM_HOST_FD || kind == KVS_MEM_CUDA_VMM_FD;
}

/* REGISTER's fixed part: its flags, its counts and the length they imply. */
static int register_check_counts(const struct kvs_msg_register *m, size_t len, unsigned nfds,
				 uint32_t max_layers, char *why, size_t wl)
{
	uint64_t want;

	if (m->resv0) {
		WHY("reserved REGISTER field is not zero");
		return -EINVAL;
	}
	if (m->flags & ~KVS_REGISTER_REPLICATED) {
		WHY("unknown REGISTER flags 0x%x", m->flags);
		return -EINVAL;
	}
	if (m->nr_layers == 0 || m->nr_mems == 0) {
		WHY("a registration needs at least one layer and one allocation");
		return -EINVAL;
	}
	if (m->nr_layers > max_layers) {
		WHY("%u layers exceed the limit of %u", m->nr_layers, max_layers);
		return -E2BIG;
	}
	if (m->nr_mems > m->nr_layers) {
		WHY("%u allocations for %u layers: every allocation must be used", m->nr_mems,
		    m->nr_layers);
		return -EINVAL;
	}
	want = sizeof(*m) + (uint64_t)m->nr_mems * sizeof(struct kvs_wire_mem) +
	       (uint64_t)m->nr_layers * sizeof(struct kvs_wire_layer);
	if (want != len) {
		WHY("REGISTER of %zu bytes, counts imply %llu", len, (unsigned long long)want);
		return -EBADMSG;
	}
	if (nfds > KVS_MAX_FDS) {
		WHY("too many fds");
		return -EBADF;
	}
	return 0;
}

/*
 * Allocation @i: a known kind of nonzero size, with a received fd used by
 * no other (counted in @fd_used, @fd_kinds) or an IPC handle and no fd.
 */
static int register_check_mem(const struct kvs_wire_mem *mm, uint32_t i, unsigned nfds,
			      bool *fd_used, unsigned *fd_kinds, char *why, size_t wl)
{
	if (!all_zero(mm->resv, sizeof(mm->resv))) {
		WHY("allocation %u: reserved fields are not zero", i);
		return -EINVAL;
	}
	if (mm->kind != KVS_MEM_HOST_FD && mm->kind != KVS_MEM_CUDA_IPC &&
	    mm->kind != KVS_MEM_CUDA_VMM_FD) {
		WHY("allocation %u: unknown memory kind %u", i, mm->kind);
		return -EINVAL;
	}
	if (mm->size == 0) {
		WHY("allocation %u: size 0", i);
		return -EINVAL;
	}
	if (!proto_mem_has_fd(mm->kind)) {
		if (mm->fd_index != 0) {
			WHY("allocation %u: fd_index set for an IPC handle", i);
			return -EINVAL;
		}
		return 0;
	}
	if (mm->fd_index >= nfds) {
		WHY("allocation %u: fd %u missing (%u received)", i, mm->fd_index, nfds);
		return -EBADF;
	}
	if (fd_used[mm->fd_index]) {
		WHY("allocation %u: fd %u used twice", i, mm->fd_index);
		return -EBADF;
	}
	if (!all_zero(mm->ipc_handle, sizeof(mm->ipc_handle))) {
		WHY("allocation %u: an fd allocation carries no IPC handle", i);
		return -EINVAL;
	}
	fd_used[mm->fd_index] = true;
	(*fd_kinds)++;
	return 0;
}

/* Every allocation valid, and every fd received used by exactly one. */
static int register_check_mems(const struct reg_req *r, unsigned nfds, char *why, size_t wl)
{
	bool fd_used[KVS_MAX_FDS] = { false };
	unsigned fd_kinds = 0;

	for (uint32_t i = 0; i < r->nr_mems; i++) {
		int err = register_check_mem(&r->mems[i], i, nfds, fd_used, &fd_kinds, why, wl);

		if (err)
			return err;
	}
	if (fd_kinds != nfds) {
		WHY("%u fds received, %u allocations use one", nfds, fd_kinds);
		return -EBADF;
	}
	return 0;
}

/* Layer @i: a valid name no earlier layer has, over an allocation that exists. */
static int register_check_layer(const struct reg_req *r, uint32_t i, char *why, size_t wl)
{
	const struct kvs_wire_layer *l = &r->layers[i];

	if (!memchr(l->name, '\0', sizeof(l->name)) ||
	    proto_check_name(l->name, sizeof(l->name)) < 0) {
		WHY("layer %u: name must be 1-%u characters of [A-Za-z0-9._:/@+=-]", i,
		    KVS_NAME_MAX - 1);
		return -EINVAL;
	}
	if (l->resv0 || !all_zero(l->resv, sizeof(l->resv))) {
		WHY("layer %s: reserved fields are not zero", l->name);
		return -EINVAL;
	}
	if (l->mem_index >= r->nr_mems) {
		WHY("layer %s: allocation %u does not exist", l->name, l->mem_index);
		return -EINVAL;
	}
	for (uint32_t j = 0; j < i; j++) {
		if (strcmp(r->layers[j].name, l->name) == 0) {
			WHY("layer name %s is used twice", l->name);
			return -EEXIST;
		}
	}
	return 0;
}

/* Every layer valid, and every allocation used by one. */
static int register_check_layers(const struct reg_req *r, char *why, size_t wl)
{
	for (uint32_t i = 0; i < r->nr_layers; i++) {
		int err = register_check_layer(r, i, why, wl);

		if (err)
			return err;
	}
	for (uint32_t i = 0; i < r->nr_mems; i++) {
		bool used = false;

		for (uint32_t j = 0; j < r->nr_layers && !used; j++)
			used = r->layers[j].mem_index == i;
		if (!used) {
			WHY("allocation %u is not used by any layer", i);
			return -EINVAL;
		}
	}
	return 0;
}

int proto_parse_register(const void *buf, size_t len, unsigned nfds, uint32_t max_layers,
			 struct reg_req *ret, char *why, size_t wl)
{
	const char *p = (const char *)buf + sizeof(struct kvs_msg_register);
	struct kvs_msg_register m;
	struct reg_req r = { 0 };
	int err;

	if (len < sizeof(m)) {
		WHY("REGISTER of %zu bytes is too short", len);
		return -EBADMSG;
	}
	memcpy(&m, buf, sizeof(m));
	err = register_check_counts(&m, len, nfds, max_layers, why, wl);
	if (err)
		return err;
	r.flags = m.flags;
	r.nr_mems = m.nr_mems;
	r.nr_layers = m.nr_layers;
	r.mems = calloc(m.nr_mems, sizeof(*r.mems));
	r.layers = calloc(m.nr_layers, sizeof(*r.layers));
	if (!r.mems || !r.layers) {
		proto_reg_free(&r);
		WHY("out of memory");
		return -ENOMEM;
	}
	memcpy(r.mems, p, m.nr_mems * sizeof(*r.mems));
	p += m.nr_mems * sizeof(*r.mems);
	memcpy(r.layers, p, m.nr_layers * sizeof(*r.layers));
	err = register_check_mems(&r, nfds, why, wl);
	if (!err)
		err = register_check_layers(&r, why, wl);
	if (err) {
		proto_reg_free(&r);
		return err;
	}
	*ret = r;
	return 0;
}

void proto_make_reply(struct kvs_msg_reply *r, uint32_t seq, int status, const char *text)
{
	memset(r, 0, sizeof(*r));
	r->hdr.type = KVS_MSG_REPLY;
	r->hdr.size = sizeof(*r);
	r->hdr.seq = seq;
	r->status = status;
	r->rev_major = KVS_WIRE_MAJOR;
	r->rev_minor = KVS_WIRE_MINOR;
	if (text)
		strscpy_trunc(r->text, text, sizeof(r->text));
}
