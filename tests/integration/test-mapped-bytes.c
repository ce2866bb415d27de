/* SPDX-License-Identifier: MIT */
/*
 * kvstashd maps of an engine's host memory only the pages its layer views
 * reach, faults nothing in when it registers, and bounds the bytes mapped
 * per session and per uid.
 *
 *  1. Sparse memory.  An engine registers a sparse 4 GiB memfd with one
 *     512-byte view, over and over, while a bystander process connects,
 *     registers and saves again and again.  Each time, kvstashd maps one
 *     page (STATUS mapped_bytes, and its /proc/PID/maps), its shared-memory
 *     RSS stays small (a daemon that faulted in the declared allocation
 *     would hold 4 GiB more), the view's bytes round-trip through SAVE and
 *     LOAD at the right place, the mapping goes after UNREGISTER, and the
 *     bystander's every step succeeds.  Nothing here is timed: a control
 *     thread stalled for seconds would show as the bystander failing its
 *     operations' generous timeouts, never as a slow number.
 *  2. Bounds.  With [session] max_mapped_bytes = 64K and [server]
 *     max_mapped_bytes_per_uid = 96K: a registration reaching one page more
 *     than 64K (whole pages count: an unaligned 64K view reaches 17) is
 *     -E2BIG; one that would take the uid past 96K is -EDQUOT, with a
 *     reason naming the key; exactly the bounds pass; an UNREGISTER gives
 *     its bytes back to the uid.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "itest.h"

#define SPARSE_SIZE  (4ull << 30)
#define SPARSE_OFF   ((3ull << 30) + 100) /* unaligned on purpose */
#define VIEW	     512u
#define ROUNDS	     20u
#define RSS_SLACK_KB (64u << 10)

static struct kvsd d;

/* "Field:   N kB" of /proc/PID/status. */
static long status_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t n = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

/* Bytes of the mappings in /proc/PID/maps whose path mentions @needle. */
static uint64_t map_bytes(pid_t pid, const char *needle)
{
	char path[64], line[512];
	uint64_t total = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long a, b;

		if (strstr(line, needle) && sscanf(line, "%llx-%llx", &a, &b) == 2)
			total += b - a;
	}
	if (f)
		fclose(f);
	return total;
}

static uint64_t session_id(struct kvs_client *c)
{
	struct kvs_session_info i;

	CHECK(kvs_session_info(c, &i) == 0, "session info");
	return i.session_id;
}

static uint64_t mapped_of(struct kvs_client *admin, struct kvs_client *c)
{
	struct kvs_msg_status_session st;
	int r = status_session(admin, session_id(c), &st);

	CHECK(r == 0, "STATUS: %s", kvs_strerror(r));
	return st.mapped_bytes;
}

/* ---- 1. a sparse 4 GiB memfd beside a bystander ---------------------- */

static int bystander(void *arg, unsigned i)
{
	(void)arg;
	for (unsigned n = 0; n < ROUNDS; n++) {
		uint8_t keys[2 * KVS_KEY_SIZE];
		uint32_t ids[2] = { 0, 1 };
		struct kvs_client *c;
		struct test_kv kv;
		char inst[32];
		int r;

		snprintf(inst, sizeof(inst), "bystander-%u", n);
		r = test_connect(&d, KVS_ROLE_WORKER, inst, "model-bystander", 0, 1, &c);
		CHECK(r == 0, "bystander HELLO %u: %s", n, kvs_strerror(r));
		CHECK(test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, 2, 4, 4096) == 0, "test_kv_alloc");
		CHECK_RES(test_kv_register(c, &kv), 0, "bystander REGISTER");
		test_kv_fill(&kv, 0, it_seed(n, 0));
		test_kv_fill(&kv, 1, it_seed(n, 1));
		it_keys(keys, 2, 1000 + n);
		CHECK_RES(it_save(c, keys, ids, 2).res, 2, "bystander SAVE");
		kvs_close(c);
		test_kv_free(&kv);
	}
	(void)i;
	return 0;
}

static void sparse_beside_bystander(void)
{
	struct kvs_layer lay = { .name = "sparse.0",
				 .mem = 0,
				 .segments = 1,
				 .offset = SPARSE_OFF,
				 .num_blocks = 1,
				 .segment_bytes = VIEW,
				 .block_stride = VIEW };
	struct kvs_mem mem = { .kind = KVS_MEM_HOST_FD, .size = SPARSE_SIZE };
	struct kvs_client *c, *admin;
	uint8_t key[KVS_KEY_SIZE], *view;
	long rss0, rss, worst = 0;
	uint32_t id = 0;
	uint8_t *p;
	int fd, r;

	it_start(&d, NULL);
	CHECK(test_admin(&d, &admin) == 0, "admin");
	r = test_connect(&d, KVS_ROLE_WORKER, "sparse", "model-sparse", 0, 1, &c);
	CHECK(r == 0, "connect: %s", kvs_strerror(r));
	fd = memfd_create("kvstash-sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)SPARSE_SIZE) == 0 &&
		      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0,
	      "sparse memfd: %s", strerror(errno));
	p = mmap(NULL, SPARSE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED, "map the sparse memfd: %s", strerror(errno));
	view = p + SPARSE_OFF;
	mem.fd = fd;
	rss0 = status_kb(d.pid, "RssShmem");
	CHECK(rss0 >= 0, "no RssShmem in /proc/%d/status", (int)d.pid);

	it_spawn(bystander, NULL, 0);
	for (unsigned n = 0; n < ROUNDS; n++) {
		struct kvs_cqe q;

		CHECK_RES(kvs_register(c, &mem, 1, &lay, 1, 0), 0, "REGISTER of the sparse memfd");
		CHECK(mapped_of(admin, c) == 4096,
		      "STATUS says %llu bytes mapped, one page expected",
		      (unsigned long long)mapped_of(admin, c));
		CHECK(map_bytes(d.pid, "kvstash-sparse") == 4096,
		      "kvstashd maps %llu bytes of the sparse memfd, one page expected",
		      (unsigned long long)map_bytes(d.pid, "kvstash-sparse"));
		rss = status_kb(d.pid, "RssShmem") - rss0;
		worst = rss > worst ? rss : worst;
		CHECK(rss < RSS_SLACK_KB, "kvstashd's shared-memory RSS grew by %ld KiB", rss);

		/* The view's bytes go out and come back at the right place. */
		memset(view, (int)(n + 1), VIEW);
		it_keys(key, 1, 500 + n);
		CHECK_RES(it_save(c, key, &id, 1).res, 1, "SAVE of the sparse view");
		it_flush(c);
		q = it_query(c, key, 1, 0);
		CHECK_RES(q.res, 1, "QUERY");
		memset(view, POISON, VIEW);
		CHECK_RES(it_load(c, q.result0, &id, 1, 0, 1).res, 1, "LOAD into the sparse view");
		for (unsigned b = 0; b < VIEW; b++)
			CHECK(view[b] == (uint8_t)(n + 1), "byte %u of the view: 0x%02x", b,
			      view[b]);
		CHECK(view[-1] == 0 && view[VIEW] == 0, "LOAD wrote beside the view");

		CHECK_RES(kvs_unregister(c), 0, "UNREGISTER");
		CHECK(wait_map_count(d.pid, "kvstash-sparse", 0, 5000) == 0,
		      "the sparse memfd is still mapped after UNREGISTER");
	}
	it_wait_all();
	it_ok("a sparse 4 GiB memfd with a 512-byte view, registered %u times beside a bystander's "
	      "%u HELLO+REGISTER+SAVE: one page mapped each time, RssShmem +%ld KiB at most",
	      ROUNDS, ROUNDS, worst);
	kvs_close(c);
	kvs_close(admin);
	munmap(p, SPARSE_SIZE);
	close(fd);
	it_stop(&d);
}

/* ---- 2. per-session and per-uid bounds ------------------------------- */

#define SESSION_MAX (64u << 10)
#define UID_MAX	    (96u << 10)

static int reg_view(struct kvs_client *c, int fd, uint64_t off, uint64_t bytes)
{
	struct kvs_layer l = { .name = "bound.0",
			       .mem = 0,
			       .segments = 1,
			       .offset = off,
			       .num_blocks = 1,
			       .segment_bytes = bytes,
			       .block_stride = bytes };
	struct kvs_mem m = { .kind = KVS_MEM_HOST_FD, .fd = fd, .size = 1u << 20 };

	return kvs_register(c, &m, 1, &l, 1, 0);
}

static struct kvs_client *worker(const char *inst)
{
	struct kvs_client *c;
	/* A namespace each: the sessions register views of different sizes. */
	int r = test_connect(&d, KVS_ROLE_WORKER, inst, inst, 0, 1, &c);

	CHECK(r == 0, "connect %s: %s", inst, kvs_strerror(r));
	return c;
}

static void bounds(void)
{
	struct kvs_client *a, *b, *c, *admin;
	void *p;
	int fd;

	it_start(&d,
		 "[session]\nmax_mapped_bytes = 64K\n[server]\nmax_mapped_bytes_per_uid = 96K\n");
	CHECK(test_admin(&d, &admin) == 0, "admin");
	CHECK(kvs_host_alloc(1u << 20, &fd, &p) == 0, "kvs_host_alloc");
	a = worker("bound-a");
	b = worker("bound-b");
	c = worker("bound-c");

	CHECK_RES(reg_view(a, fd, 0, SESSION_MAX), 0, "a session's bound exactly");
	CHECK(mapped_of(admin, a) == SESSION_MAX, "STATUS: %llu bytes mapped",
	      (unsigned long long)mapped_of(admin, a));
	CHECK_RES(reg_view(b, fd, 0, SESSION_MAX + 1), -E2BIG, "one byte past a session's bound");
	CHECK_RES(reg_view(b, fd, 100, SESSION_MAX), -E2BIG,
		  "64K from an unaligned offset (17 pages)");
	CHECK(kvsd_log_contains(&d, "max_mapped_bytes = 65536"), "E2BIG without its reason");
	CHECK_RES(reg_view(b, fd, 0, 48u << 10), -EDQUOT, "past the uid's bound");
	CHECK(kvsd_log_contains(&d, "max_mapped_bytes_per_uid = 98304"),
	      "EDQUOT without its reason");
	CHECK_RES(reg_view(b, fd, 0, UID_MAX - SESSION_MAX), 0, "up to the uid's bound exactly");
	CHECK_RES(reg_view(c, fd, 0, 4096), -EDQUOT, "one page past the uid's bound");
	CHECK(mapped_of(admin, b) == UID_MAX - SESSION_MAX, "STATUS of b");
	CHECK(mapped_of(admin, c) == 0, "a refused REGISTER left bytes counted");

	/* An UNREGISTER gives the uid its bytes back. */
	CHECK_RES(kvs_unregister(a), 0, "UNREGISTER");
	CHECK_RES(reg_view(c, fd, 0, SESSION_MAX), 0, "after another session's UNREGISTER");
	CHECK_RES(kvs_nop_sync(a, OP_TIMEOUT_MS), 0, "NOP of the refused-and-unregistered");
	it_ok("host memory mapped: 64K per session (E2BIG past it, whole pages counted), 96K per "
	      "uid (EDQUOT), given back by UNREGISTER");
	kvs_close(a);
	kvs_close(b);
	kvs_close(c);
	kvs_close(admin);
	kvs_host_free(fd, p, 1u << 20);
	it_stop(&d);
}

int main(void)
{
	it_watchdog(300);
	sparse_beside_bystander();
	bounds();
	return 0;
}
