/* SPDX-License-Identifier: MIT */
/*
 * gen-abi: writes python/kvstash/_abi.py, the constants and struct layouts
 * of include/kvstash/ that the Python binding (python/kvstash/_lib.py)
 * builds its ctypes declarations from.  Run by the build (python/Makefile.inc)
 * whenever a public header changes, so that the binding never carries a
 * copy of C that can drift from it.
 *
 * Each field below is named once; the compiler gives its offset, size and
 * type (CTYPE(), a _Generic over the types the ABI uses), so a renamed or
 * removed field fails to compile, a moved or retyped one follows by
 * itself, and one added to a struct but not listed here leaves a hole that
 * check_struct() refuses (the build stops, naming the struct and bytes).
 * Python then compares ctypes' own layout of the result with the offsets
 * written here (_lib.py, at import).
 *
 * Sees the public headers only (docs/ARCHITECTURE.md "### Include rules").
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvstash/abi.h>
#include <kvstash/kvstash.h>
#include <kvstash/wire.h>

/*
 * The ctypes type of a scalar, pointer or nested struct.  int and int32_t
 * are one type here (c_int is c_int32 on Linux); a type not listed gives
 * NULL, which check_struct() reports rather than guessing.
 */
#define CTYPE(x)                                               \
	_Generic((x),                                          \
		char: "c_char",                                \
		int8_t: "c_int8",                              \
		uint8_t: "c_uint8",                            \
		int16_t: "c_int16",                            \
		uint16_t: "c_uint16",                          \
		int32_t: "c_int32",                            \
		uint32_t: "c_uint32",                          \
		int64_t: "c_int64",                            \
		uint64_t: "c_uint64",                          \
		const char *: "c_char_p",                      \
		void *: "c_void_p",                            \
		kvs_log_fn: "LogFn",                           \
		struct kvs_msg_hdr: "MsgHdr",                  \
		struct kvs_cluster_holder: "ClusterHolder",    \
		default: NULL)

struct field {
	const char *name;
	const char *type; /* CTYPE() of the field, of an element for arrays */
	size_t off;
	size_t size;
	size_t align; /* of the field, of an element for arrays */
	size_t count; /* array length; 0: not an array */
	int decays;   /* F() of an array, A() of a pointer: a table mistake */
};

#define MEMBER(T, m) (((T *)0)->m)
#define IS_POINTER(T, m) \
	__builtin_types_compatible_p(__typeof__(MEMBER(T, m)), __typeof__(&MEMBER(T, m)[0]))

/* A scalar, pointer or struct member. */
#define F(T, m)                                                                           \
	{ #m, CTYPE(MEMBER(T, m)), offsetof(T, m), sizeof(MEMBER(T, m)),                  \
	  _Alignof(__typeof__(MEMBER(T, m))), 0,                                          \
	  sizeof(MEMBER(T, m)) != sizeof(__typeof__((void)0, MEMBER(T, m))) }
/* An array member. */
#define A(T, m)                                                                           \
	{ #m, CTYPE(MEMBER(T, m)[0]), offsetof(T, m), sizeof(MEMBER(T, m)),               \
	  _Alignof(__typeof__(MEMBER(T, m)[0])),                                          \
	  sizeof(MEMBER(T, m)) / sizeof(MEMBER(T, m)[0]), IS_POINTER(T, m) }

struct layout {
	const char *pyname;
	const char *cname;
	size_t size;
	size_t align;
	const struct field *fields;
	size_t nr_fields;
};

#define LAYOUT(py, T, ...)                                                       \
	{ py, #T, sizeof(T), _Alignof(T), (const struct field[]){ __VA_ARGS__ },  \
	  sizeof((const struct field[]){ __VA_ARGS__ }) / sizeof(struct field) }

typedef struct kvs_connect_opts connect_opts;
typedef struct kvs_session_info session_info;
typedef struct kvs_mem mem;
typedef struct kvs_layer layer;
typedef struct kvs_cqe cqe;
typedef struct kvs_fence_ref fence_ref;
typedef struct kvs_cluster_holder holder;
typedef struct kvs_cluster_answer answer;
typedef struct kvs_cuda_arena arena;
typedef struct kvs_cuda_layer cuda_layer;
typedef struct kvs_msg_hdr hdr;
typedef struct kvs_msg_status_daemon status_daemon;
typedef struct kvs_msg_status_session status_session;

/* In dependency order: a struct before the ones that embed it. */
static const struct layout layouts[] = {
	LAYOUT("ConnectOpts", connect_opts, F(connect_opts, role), F(connect_opts, tp_rank),
	       F(connect_opts, tp_size), F(connect_opts, world_size), F(connect_opts, device_kind),
	       A(connect_opts, device_uuid), F(connect_opts, instance), F(connect_opts, ns),
	       F(connect_opts, sq_entries), F(connect_opts, cq_entries), F(connect_opts, arg_bytes),
	       F(connect_opts, timeout_ms), F(connect_opts, log), F(connect_opts, log_arg),
	       F(connect_opts, flags), F(connect_opts, wait_spin_us), A(connect_opts, resv)),
	LAYOUT("SessionInfo", session_info, F(session_info, session_id),
	       F(session_info, sq_entries), F(session_info, cq_entries), F(session_info, arg_bytes),
	       F(session_info, max_keys), F(session_info, max_inflight), F(session_info, max_layers),
	       F(session_info, lease_ttl_ms), F(session_info, daemon_rev_major),
	       F(session_info, daemon_rev_minor), F(session_info, resv0)),
	LAYOUT("Mem", mem, F(mem, kind), F(mem, fd), F(mem, size), A(mem, ipc_handle)),
	LAYOUT("LayerDesc", layer, F(layer, name), F(layer, mem), F(layer, segments),
	       F(layer, offset), F(layer, num_blocks), F(layer, segment_bytes), F(layer, kv_stride),
	       F(layer, block_stride)),
	LAYOUT("Cqe", cqe, F(cqe, user_data), F(cqe, res), F(cqe, flags), F(cqe, result0),
	       F(cqe, result1)),
	LAYOUT("FenceRef", fence_ref, F(fence_ref, slot), F(fence_ref, base), F(fence_ref, count),
	       F(fence_ref, gen)),
	LAYOUT("ClusterHolder", holder, A(holder, node), A(holder, addr), F(holder, epoch),
	       F(holder, blocks), F(holder, resv0)),
	LAYOUT("ClusterAnswer", answer, F(answer, status), F(answer, best), F(answer, nr_holders),
	       F(answer, round_trips), A(answer, resv), A(answer, holders)),
	LAYOUT("CudaArena", arena, F(arena, dptr), F(arena, size), F(arena, kind),
	       F(arena, device), A(arena, priv)),
	LAYOUT("CudaLayerDesc", cuda_layer, F(cuda_layer, name), F(cuda_layer, base),
	       F(cuda_layer, segments), F(cuda_layer, num_blocks), F(cuda_layer, segment_bytes),
	       F(cuda_layer, kv_stride), F(cuda_layer, block_stride)),
	LAYOUT("MsgHdr", hdr, F(hdr, type), F(hdr, size), F(hdr, seq), F(hdr, flags)),
	LAYOUT("StatusDaemon", status_daemon, F(status_daemon, hdr), A(status_daemon, version),
	       F(status_daemon, pid), F(status_daemon, nr_sessions), F(status_daemon, uptime_ms),
	       F(status_daemon, nr_workers), F(status_daemon, nr_instances),
	       F(status_daemon, cuda_available), F(status_daemon, resv0), A(status_daemon, resv)),
	LAYOUT("StatusSession", status_session, F(status_session, hdr),
	       F(status_session, session_id), F(status_session, pid), F(status_session, uid),
	       F(status_session, role), F(status_session, tp_rank), F(status_session, tp_size),
	       F(status_session, world_size), F(status_session, device_kind),
	       F(status_session, worker), A(status_session, device_uuid),
	       F(status_session, nr_layers), F(status_session, sealed),
	       F(status_session, slot_bytes), F(status_session, mapped_bytes),
	       A(status_session, instance), A(status_session, ns), A(status_session, first_layer),
	       A(status_session, last_layer), A(status_session, resv)),
};

/* The constants, named in Python without their KVS_ prefix. */
#define K(name) { #name, (unsigned long long)(name) }
static const struct constant {
	const char *name;
	unsigned long long value;
} constants[] = {
	K(KVS_KEY_SIZE),	   K(KVS_OP_NOP),	     K(KVS_OP_SAVE),
	K(KVS_OP_QUERY),	   K(KVS_OP_LOAD),	     K(KVS_OP_RELEASE),
	K(KVS_OP_FLUSH),	   K(KVS_QUERY_NOLEASE),     K(KVS_QUERY_CLUSTER),
	K(KVS_QUERY_DRAM),	   K(KVS_QUERY_FETCH),	     K(KVS_FETCH_HINT_MAX),
	K(KVS_FLUSH_INSTANCE),	   K(KVS_FLUSH_CLUSTER),     K(KVS_CQE_LOCAL),
	K(KVS_CQE_CLUSTER),	   K(KVS_CQE_PENDING_SHIFT), K(KVS_CQE_PENDING_MAX),
	K(KVS_CONNECT_CLUSTER),	   K(KVS_CONNECT_FENCES),    K(KVS_FENCE_SLOTS),
	K(KVS_CLUSTER_NAME_MAX),   K(KVS_CLUSTER_ADDR_MAX),  K(KVS_CLUSTER_HOLDERS),
	K(KVS_ROLE_WORKER),	   K(KVS_ROLE_SCHEDULER),    K(KVS_ROLE_ADMIN),
	K(KVS_DEVICE_HOST),	   K(KVS_DEVICE_CUDA),	     K(KVS_MEM_HOST_FD),
	K(KVS_MEM_CUDA_IPC),	   K(KVS_MEM_CUDA_VMM_FD),   K(KVS_REGISTER_REPLICATED),
	K(KVS_MSG_STATUS),	   K(KVS_MSG_STATUS_DAEMON), K(KVS_MSG_STATUS_SESSION),
	K(KVS_MSG_STATS),	   K(KVS_MSG_STATS_GLOBAL),  K(KVS_MSG_STATS_NODE),
	K(KVS_MSG_STATS_SESSION),  K(KVS_NAME_MAX),	     K(KVS_NS_MAX),
	K(KVS_IPC_HANDLE_SIZE),	   K(KVS_LOG_ERR),	     K(KVS_LOG_WARNING),
	K(KVS_LOG_INFO),	   K(KVS_LOG_DEBUG),
};

static size_t round_up(size_t n, size_t align)
{
	return (n + align - 1) / align * align;
}

/*
 * Every byte of the struct is a listed field or the padding ctypes puts
 * there too (up to the next field's alignment, and the struct's at the
 * end): anything else is a field this table does not know.
 */
static int check_struct(const struct layout *l)
{
	size_t end = 0;

	/* First, so that fields swapped in the header are named as such. */
	for (size_t i = 1; i < l->nr_fields; i++) {
		if (l->fields[i].off < l->fields[i - 1].off) {
			fprintf(stderr, "gen-abi: %s.%s: out of order (python/gen-abi.c lists "
				"the fields as the header does)\n", l->cname, l->fields[i].name);
			return -1;
		}
	}
	for (size_t i = 0; i < l->nr_fields; i++) {
		const struct field *f = &l->fields[i];

		if (!f->type || f->decays) {
			fprintf(stderr, "gen-abi: %s.%s: %s (python/gen-abi.c)\n", l->cname, f->name,
				f->decays ? "listed with F() but an array, or A() but a pointer" :
					    "a type CTYPE() does not map");
			return -1;
		}
		if (f->off != round_up(end, f->align)) {
			fprintf(stderr,
				"gen-abi: %s: bytes %zu..%zu before .%s are no listed field: "
				"add the new field to python/gen-abi.c\n",
				l->cname, end, f->off, f->name);
			return -1;
		}
		end = f->off + f->size;
	}
	if (l->size != round_up(end, l->align)) {
		fprintf(stderr,
			"gen-abi: %s: bytes %zu..%zu at the end are no listed field: "
			"add the new field to python/gen-abi.c\n",
			l->cname, end, l->size);
		return -1;
	}
	return 0;
}

static void emit_struct(const struct layout *l)
{
	printf("    \"%s\": (\n        %zu,\n        [\n", l->pyname, l->size);
	for (size_t i = 0; i < l->nr_fields; i++) {
		const struct field *f = &l->fields[i];

		printf("            (\"%s\", \"%s\", %zu, %zu),\n", f->name, f->type, f->count,
		       f->off);
	}
	printf("        ],\n    ),\n");
}

int main(void)
{
	size_t nr_layouts = sizeof(layouts) / sizeof(layouts[0]);
	size_t nr_constants = sizeof(constants) / sizeof(constants[0]);

	for (size_t i = 0; i < nr_layouts; i++)
		if (check_struct(&layouts[i]) < 0)
			return EXIT_FAILURE;

	printf("# SPDX-License-Identifier: MIT\n"
	       "# Generated by python/gen-abi from include/kvstash/*.h: do not edit.\n"
	       "\"\"\"The constants and struct layouts of libkvstash's ABI, as the C compiler\n"
	       "sees them.  kvstash._lib builds its ctypes declarations from these.\n\"\"\"\n\n");
	for (size_t i = 0; i < nr_constants; i++)
		printf("%s = %llu\n", constants[i].name + strlen("KVS_"), constants[i].value);
	printf("\n# name: (sizeof, [(field, ctypes type, array length or 0, offsetof)])\n"
	       "STRUCTS = {\n");
	for (size_t i = 0; i < nr_layouts; i++)
		emit_struct(&layouts[i]);
	printf("}\n");
	return fflush(stdout) == 0 && !ferror(stdout) ? EXIT_SUCCESS : EXIT_FAILURE;
}
