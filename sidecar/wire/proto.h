/* SPDX-License-Identifier: MIT */
/*
 * Parsing and validation of socket messages (wire.h) into private
 * structures.  Pure functions over a byte buffer: no I/O, no daemon
 * state, so the fuzzers drive exactly this code.  Every rejection returns
 * -errno and a reason in @why.
 */
#ifndef KVS_PROTO_H
#define KVS_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvstash/wire.h>

struct hello_req {
	uint16_t rev_major;
	uint16_t rev_minor;
	uint32_t role;
	uint32_t tp_rank;
	uint32_t tp_size;
	uint32_t world_size;
	uint32_t device_kind;
	uint8_t device_uuid[16];
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint64_t arg_bytes;
	uint32_t flags; /* KVS_HELLO_* */
	char instance[KVS_NAME_MAX];
	char ns[KVS_NS_MAX];
};

struct reg_req {
	uint32_t flags;
	uint32_t nr_mems;
	uint32_t nr_layers;
	struct kvs_wire_mem *mems;     /* private copies */
	struct kvs_wire_layer *layers; /* names NUL-terminated, checked */
};

#define PROTO_MAX_WORLD 1024u

/* Header of any packet: size consistent, flags zero.  0 or -EBADMSG.  The
 * type is checked by the caller, which knows which types it expects. */
int proto_check_header(const void *buf, size_t len, uint32_t *ret_type, uint32_t *ret_seq);

/*
 * HELLO.  The revision is checked first, before the size, so any other
 * major gets -EPROTONOSUPPORT whatever its layout.
 */
int proto_parse_hello(const void *buf, size_t len, struct hello_req *ret, char *why, size_t wl);

/*
 * REGISTER with @nfds fds received alongside.  Counts, sizes, fd indices
 * (each fd used exactly once, none missing or extra), memory kinds,
 * layer names (valid, unique) and mem indices.  Geometry is layout.c's.
 * On success *@ret owns two arrays; free with proto_reg_free().
 */
int proto_parse_register(const void *buf, size_t len, unsigned nfds, uint32_t max_layers,
			 struct reg_req *ret, char *why, size_t wl);
void proto_reg_free(struct reg_req *req);

/* Does memory kind @kind (KVS_MEM_*) come with an fd (its fd_index)? */
bool proto_mem_has_fd(uint32_t kind);

/* A message that must be just a header (UNREGISTER, GOODBYE, STATUS, STATS). */
int proto_parse_empty(const void *buf, size_t len, char *why, size_t wl);

/* Names in logs and status: letters, digits and ._:/@+=- only. */
int proto_check_name(const char *s, size_t max);

/* Fill a reply. */
void proto_make_reply(struct kvs_msg_reply *r, uint32_t seq, int status, const char *text);

#endif /* KVS_PROTO_H */
