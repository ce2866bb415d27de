/* SPDX-License-Identifier: MIT */
/*
 * Seeds for the fuzz targets: valid (and a few near-valid) inputs in each
 * target's format, so libFuzzer starts from messages the daemon accepts
 * instead of having to discover the wire format byte by byte.
 *
 *   fuzz/gen-corpus DIR   writes DIR/fuzz-proto/seed-*, DIR/fuzz-sqe/seed-*, ...
 *
 * `make fuzz-corpus` runs it into $(srcdir)/fuzz/corpus; the output is
 * committed, so the seeds are reviewable and replayed by `make check`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kvstash/abi.h>
#include <kvstash/wire.h>
#include <shmq/shmq.h>

static const char *outdir;
static uint8_t buf[1 << 20];

static void put(const char *target, const char *name, const void *p, size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", outdir, target);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/seed-%s", outdir, target, name);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		exit(1);
	}
}

/* ---- fuzz-proto and fuzz-register-layout ---------------------------- */

static void hello(struct kvs_msg_hello *h, uint32_t role, uint32_t rank, uint32_t tp)
{
	memset(h, 0, sizeof(*h));
	h->hdr.type = KVS_MSG_HELLO;
	h->hdr.size = sizeof(*h);
	h->hdr.seq = 1;
	h->rev_major = KVS_WIRE_MAJOR;
	h->rev_minor = KVS_WIRE_MINOR;
	h->role = role;
	if (role == KVS_ROLE_ADMIN)
		return;
	h->tp_rank = rank;
	h->tp_size = tp;
	h->world_size = tp;
	h->device_kind = KVS_DEVICE_HOST;
	snprintf(h->instance, sizeof(h->instance), "vllm-0");
	snprintf(h->ns, sizeof(h->ns), "qwen3-8b/bf16/page-first-16");
}

struct reg {
	struct kvs_msg_register m;
	struct kvs_wire_mem mems[8];
	struct kvs_wire_layer layers[64];
	unsigned nm, nl;
};

static void reg_init(struct reg *r, uint32_t flags)
{
	memset(r, 0, sizeof(*r));
	r->m.hdr.type = KVS_MSG_REGISTER;
	r->m.hdr.seq = 2;
	r->m.flags = flags;
}

static void reg_mem(struct reg *r, uint32_t kind, uint32_t fd_index, uint64_t size)
{
	struct kvs_wire_mem *m = &r->mems[r->nm++];

	m->kind = kind;
	m->fd_index = fd_index;
	m->size = size;
	if (kind == KVS_MEM_CUDA_IPC)
		memset(m->ipc_handle, 0x11, sizeof(m->ipc_handle));
}

static void reg_layer(struct reg *r, uint32_t mem, uint32_t segs, uint64_t off, uint32_t nb,
		      uint64_t seg, uint64_t kvs, uint64_t bs)
{
	struct kvs_wire_layer *l = &r->layers[r->nl];

	snprintf(l->name, sizeof(l->name), "model.layers.%u.attn", r->nl);
	l->mem_index = mem;
	l->segments = segs;
	l->offset = off;
	l->num_blocks = nb;
	l->segment_bytes = seg;
	l->kv_stride = kvs;
	l->block_stride = bs;
	r->nl++;
}

/* The packet of @r into buf + @at; its length. */
static size_t reg_pack(struct reg *r, size_t at)
{
	size_t n = sizeof(r->m);

	r->m.nr_mems = r->nm;
	r->m.nr_layers = r->nl;
	r->m.hdr.size = (uint32_t)(sizeof(r->m) + r->nm * sizeof(r->mems[0]) +
				   r->nl * sizeof(r->layers[0]));
	memcpy(buf + at, &r->m, sizeof(r->m));
	memcpy(buf + at + n, r->mems, r->nm * sizeof(r->mems[0]));
	n += r->nm * sizeof(r->mems[0]);
	memcpy(buf + at + n, r->layers, r->nl * sizeof(r->layers[0]));
	return n + r->nl * sizeof(r->layers[0]);
}

/* Page-first: one allocation, a block's layers side by side. */
static void page_first(struct reg *r, unsigned layers, uint32_t nb, uint64_t seg, uint64_t guard)
{
	uint64_t bs = layers * seg;

	reg_init(r, 0);
	reg_mem(r, KVS_MEM_HOST_FD, 0, 2 * guard + nb * bs);
	for (unsigned l = 0; l < layers; l++)
		reg_layer(r, 0, 1, guard + l * seg, nb, seg, 0, bs);
}

/* Layer-first split K/V: an allocation per layer, K blocks then V blocks. */
static void split_kv(struct reg *r, unsigned layers, uint32_t nb, uint64_t seg)
{
	reg_init(r, 0);
	for (unsigned l = 0; l < layers; l++) {
		reg_mem(r, KVS_MEM_HOST_FD, l, 2 * nb * seg);
		reg_layer(r, l, 2, 0, nb, seg, nb * seg, seg);
	}
}

static void proto_seeds(void)
{
	struct kvs_msg_hello h;
	struct kvs_msg_hdr e = { .size = sizeof(e), .seq = 3 };
	struct reg r;
	size_t n;

	buf[0] = 0; /* no fds */
	buf[1] = 0; /* max_layers: default */
	hello(&h, KVS_ROLE_WORKER, 0, 1);
	memcpy(buf + 2, &h, sizeof(h));
	put("fuzz-proto", "hello-worker", buf, 2 + sizeof(h));
	hello(&h, KVS_ROLE_SCHEDULER, 1, 2);
	memcpy(buf + 2, &h, sizeof(h));
	put("fuzz-proto", "hello-scheduler", buf, 2 + sizeof(h));
	hello(&h, KVS_ROLE_WORKER, 3, 8);
	h.device_kind = KVS_DEVICE_CUDA;
	memset(h.device_uuid, 0xab, sizeof(h.device_uuid));
	h.sq_entries = 1024;
	h.arg_bytes = 1 << 20;
	memcpy(buf + 2, &h, sizeof(h));
	put("fuzz-proto", "hello-cuda", buf, 2 + sizeof(h));
	hello(&h, KVS_ROLE_ADMIN, 0, 0);
	memcpy(buf + 2, &h, sizeof(h));
	put("fuzz-proto", "hello-admin", buf, 2 + sizeof(h));
	hello(&h, KVS_ROLE_WORKER, 0, 1);
	h.rev_major = KVS_WIRE_MAJOR + 1;
	h.hdr.size = 20;
	memcpy(buf + 2, &h, 20);
	put("fuzz-proto", "hello-next-major", buf, 2 + 20);

	buf[0] = 1;
	page_first(&r, 4, 16, 4096, 0);
	n = reg_pack(&r, 2);
	put("fuzz-proto", "register-page-first", buf, 2 + n);
	buf[0] = 2;
	split_kv(&r, 2, 8, 2048);
	n = reg_pack(&r, 2);
	put("fuzz-proto", "register-split-kv", buf, 2 + n);
	buf[0] = 0;
	reg_init(&r, KVS_REGISTER_REPLICATED);
	reg_mem(&r, KVS_MEM_CUDA_IPC, 0, 1 << 20);
	reg_layer(&r, 0, 1, 0, 16, 4096, 0, 4096);
	n = reg_pack(&r, 2);
	put("fuzz-proto", "register-cuda-ipc", buf, 2 + n);
	buf[0] = 1;
	buf[1] = 1; /* max_layers 2 */
	page_first(&r, 3, 4, 512, 0);
	n = reg_pack(&r, 2);
	put("fuzz-proto", "register-over-max-layers", buf, 2 + n);

	buf[0] = 0;
	buf[1] = 0;
	for (uint32_t t = KVS_MSG_UNREGISTER; t <= KVS_MSG_STATS; t++) {
		char name[32];

		if (t != KVS_MSG_UNREGISTER && t != KVS_MSG_GOODBYE && t != KVS_MSG_STATUS &&
		    t != KVS_MSG_STATS)
			continue;
		e.type = t;
		memcpy(buf + 2, &e, sizeof(e));
		snprintf(name, sizeof(name), "empty-%u", t);
		put("fuzz-proto", name, buf, 2 + sizeof(e));
	}
}

#define LAYOUT_PREFIX (1 + 8 * 8)

static void layout_put(const char *name, struct reg *r, unsigned nfds, const uint64_t *real)
{
	size_t n;

	memset(buf, 0, LAYOUT_PREFIX);
	buf[0] = (uint8_t)nfds;
	if (real)
		memcpy(buf + 1, real, 8 * 8);
	n = reg_pack(r, LAYOUT_PREFIX);
	put("fuzz-register-layout", name, buf, LAYOUT_PREFIX + n);
}

static void layout_seeds(void)
{
	uint64_t real[8] = { 0 };
	struct reg r;

	page_first(&r, 8, 16, 4096, 0);
	layout_put("page-first", &r, 1, NULL);
	page_first(&r, 4, 16, 4096, 65536);
	layout_put("page-first-guarded", &r, 1, NULL);
	split_kv(&r, 4, 8, 2048);
	layout_put("split-kv", &r, 4, NULL);

	reg_init(&r, KVS_REGISTER_REPLICATED);
	for (unsigned l = 0; l < 4; l++) {
		reg_mem(&r, KVS_MEM_HOST_FD, l, 16 * 576);
		reg_layer(&r, l, 1, 0, 16, 576, 0, 576);
	}
	layout_put("mla-replicated", &r, 4, NULL);

	/* K and V of every layer interleaved in one allocation. */
	reg_init(&r, 0);
	reg_mem(&r, KVS_MEM_HOST_FD, 0, 4 * 2 * 8 * 1024);
	for (unsigned l = 0; l < 4; l++)
		reg_layer(&r, 0, 2, l * 1024, 8, 1024, 4 * 1024, 8 * 1024);
	layout_put("interleaved-kv", &r, 1, NULL);

	page_first(&r, 4, 16, 4096, 0);
	real[0] = 16 * 4 * 4096 - 1;
	layout_put("real-size-short", &r, 1, real);
	real[0] = 0;

	page_first(&r, 4, 16, 4096, 0);
	r.layers[2].offset = r.layers[1].offset;
	layout_put("overlap", &r, 1, NULL);

	page_first(&r, 4, 16, 4096, 0);
	r.layers[3].block_stride += 4096;
	layout_put("strides-differ", &r, 1, NULL);

	page_first(&r, 2, 16, 4096, 0);
	r.layers[1].num_blocks = 17;
	layout_put("past-allocation", &r, 1, NULL);

	reg_init(&r, 0);
	reg_mem(&r, KVS_MEM_CUDA_IPC, 0, 1ull << 40);
	reg_layer(&r, 0, 2, 0, 0xffffffffu, 1ull << 20, 1ull << 39, 1ull << 20);
	layout_put("huge-geometry", &r, 0, NULL);
}

/* ---- fuzz-sqe -------------------------------------------------------- */

static void sqe_put(const char *name, const struct kvs_sqe *sqe, uint32_t role, uint32_t max_keys,
		    uint32_t num_blocks, uint32_t nr_layers, const void *area, size_t area_len)
{
	memset(buf, 0, 80);
	memcpy(buf, sqe, sizeof(*sqe));
	buf[64] = role == KVS_ROLE_SCHEDULER;
	buf[66] = (uint8_t)(max_keys - 1);
	buf[67] = (uint8_t)((max_keys - 1) >> 8);
	memcpy(buf + 68, &num_blocks, 4);
	buf[72] = (uint8_t)(nr_layers - 1);
	buf[73] = (uint8_t)((nr_layers - 1) >> 8);
	memcpy(buf + 80, area, area_len);
	put("fuzz-sqe", name, buf, 80 + area_len);
}

static void sqe_seeds(void)
{
	static uint8_t area[4096];
	struct kvs_sqe s;
	uint32_t ids[4] = { 0, 5, 9, 15 };

	for (unsigned i = 0; i < 64; i++)
		area[i] = (uint8_t)(i * 7 + 1);
	memcpy(area + 64, ids, sizeof(ids));
	memcpy(area + 1024, ids, sizeof(ids));

	memset(&s, 0, sizeof(s));
	s.opcode = KVS_OP_NOP;
	s.user_data = 1;
	sqe_put("nop", &s, KVS_ROLE_WORKER, 64, 16, 4, area, 64);
	s.opcode = KVS_OP_SAVE;
	s.count = 4;
	s.arg_len = 4 * 20;
	sqe_put("save", &s, KVS_ROLE_WORKER, 64, 16, 4, area, sizeof(area));
	sqe_put("save-scheduler", &s, KVS_ROLE_SCHEDULER, 64, 16, 4, area, sizeof(area));
	sqe_put("save-unregistered", &s, KVS_ROLE_WORKER, 64, 0, 1, area, sizeof(area));
	s.opcode = KVS_OP_QUERY;
	s.arg_len = 4 * 16;
	s.req_id = 77;
	s.flags = KVS_QUERY_NOLEASE;
	sqe_put("query", &s, KVS_ROLE_SCHEDULER, 64, 0, 1, area, sizeof(area));
	/* Wire 1.3: a fetching QUERY with a node hint after its keys (one key: max_keys 1). */
	memcpy(area + 2048, area, 16);
	memcpy(area + 2064, "10.0.0.7:7471", 14);
	s.count = 1;
	s.arg_off = 2048;
	s.arg_len = 16 + 16;
	s.flags = KVS_QUERY_FETCH;
	sqe_put("query-fetch-hint", &s, KVS_ROLE_SCHEDULER, 1, 0, 1, area, sizeof(area));
	memset(&s, 0, sizeof(s));
	s.opcode = KVS_OP_LOAD;
	s.count = 4;
	s.arg_off = 1024;
	s.arg_len = 16;
	s.lease = 0x1234567;
	s.layer_begin = 1;
	s.layer_count = 2;
	sqe_put("load-layers", &s, KVS_ROLE_WORKER, 64, 16, 4, area, sizeof(area));
	s.arg_off = 4096 - 16;
	sqe_put("load-area-end", &s, KVS_ROLE_WORKER, 64, 16, 4, area, sizeof(area));
	memset(&s, 0, sizeof(s));
	s.opcode = KVS_OP_RELEASE;
	s.lease = 42;
	sqe_put("release", &s, KVS_ROLE_SCHEDULER, 1, 0, 1, area, 0);
	memset(&s, 0, sizeof(s));
	s.opcode = KVS_OP_FLUSH;
	s.flags = KVS_FLUSH_INSTANCE;
	sqe_put("flush", &s, KVS_ROLE_WORKER, 1, 16, 4, area, 0);
}

/* ---- fuzz-shmq-attach -------------------------------------------------- */

/* A region as kvstashd makes it, as the fuzz input: seals, pages, content. */
static void region_put(const char *name, const struct shmq_part_spec *parts, unsigned n,
		       uint32_t sq_tail, uint32_t sq_head, uint8_t seals)
{
	struct shmq_region *region;
	uint64_t size;
	size_t len;
	int r = shmq_region_create("gen", KVS_REGION_MAGIC, KVS_REGION_VERSION, parts, n, &region);

	if (r < 0) {
		fprintf(stderr, "shmq_region_create: %s\n", strerror(-r));
		exit(1);
	}
	size = shmq_region_size(region);
	if (size > 64 * 4096 || size > sizeof(buf) - 2) {
		fprintf(stderr, "region %s too large for a seed\n", name);
		exit(1);
	}
	buf[0] = seals;
	buf[1] = (uint8_t)(size / 4096 - 1);
	if (pread(shmq_region_fd(region), buf + 2, size, 0) != (ssize_t)size) {
		fprintf(stderr, "pread: %s\n", strerror(errno));
		exit(1);
	}
	if (sq_tail || sq_head) {
		/* The SQ is the first part: its control block starts the second page. */
		struct shmq_ring_ctrl *c = (void *)(buf + 2 + 4096);

		c->prod.tail = sq_tail;
		c->cons.head = sq_head;
	}
	/* The rest reads as zeros: drop trailing zeros to keep the file small. */
	len = 2 + size;
	while (len > 2 + sizeof(struct shmq_region_hdr) && buf[len - 1] == 0)
		len--;
	put("fuzz-shmq-attach", name, buf, len);
	shmq_region_destroy(region);
}

static void region_seeds(void)
{
	struct shmq_part_spec kvs[3] = {
		{ SHMQ_PART_RING, KVS_PART_SQ, sizeof(struct kvs_sqe), 8, 0 },
		{ SHMQ_PART_RING, KVS_PART_CQ, sizeof(struct kvs_cqe), 16, 0 },
		{ SHMQ_PART_AREA, KVS_PART_ARGS, 0, 0, 4096 },
	};
	struct shmq_part_spec many[8];

	region_put("session", kvs, 3, 0, 0, 0);
	region_put("session-busy", kvs, 3, 0xfffffffeu + 5, 0xfffffffeu, 0);
	region_put("session-past-capacity", kvs, 3, 9, 0, 0);
	region_put("session-shrink-only", kvs, 3, 0, 0, 4);
	for (unsigned i = 0; i < 8; i++)
		many[i] = i % 2 ? (struct shmq_part_spec){ SHMQ_PART_AREA, 10 + i, 0, 0, 100 }
				: (struct shmq_part_spec){ SHMQ_PART_RING, 10 + i, 8u << i, 2, 0 };
	region_put("eight-parts", many, 8, 0, 0, 0);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	outdir = argv[1];
	mkdir(outdir, 0755);
	proto_seeds();
	layout_seeds();
	sqe_seeds();
	region_seeds();
	return 0;
}
