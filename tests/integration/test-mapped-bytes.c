/* SPDX-License-Identifier: MIT */
/*
 * kvstashd maps of an engine's host memory only the pages its layer views
 * reach and faults nothing in when it registers.
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
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctltest.h"
#include "dp.h"

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
		test_kv_fill(&kv, 0, dp_seed(n, 0));
		test_kv_fill(&kv, 1, dp_seed(n, 1));
		dp_keys(keys, 2, 1000 + n);
		CHECK_RES(dp_save(c, keys, ids, 2).res, 2, "bystander SAVE");
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

	dp_start(&d, NULL);
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

	dp_spawn(bystander, NULL, 0);
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
		dp_keys(key, 1, 500 + n);
		CHECK_RES(dp_save(c, key, &id, 1).res, 1, "SAVE of the sparse view");
		dp_flush(c);
		q = dp_query(c, key, 1, 0);
		CHECK_RES(q.res, 1, "QUERY");
		memset(view, POISON, VIEW);
		CHECK_RES(dp_load(c, q.result0, &id, 1, 0, 1).res, 1, "LOAD into the sparse view");
		for (unsigned b = 0; b < VIEW; b++)
			CHECK(view[b] == (uint8_t)(n + 1), "byte %u of the view: 0x%02x", b,
			      view[b]);
		CHECK(view[-1] == 0 && view[VIEW] == 0, "LOAD wrote beside the view");

		CHECK_RES(kvs_unregister(c), 0, "UNREGISTER");
		CHECK(wait_map_count(d.pid, "kvstash-sparse", 0, 5000) == 0,
		      "the sparse memfd is still mapped after UNREGISTER");
	}
	dp_wait_all();
	dp_ok("a sparse 4 GiB memfd with a 512-byte view, registered %u times beside a bystander's "
	      "%u HELLO+REGISTER+SAVE: one page mapped each time, RssShmem +%ld KiB at most",
	      ROUNDS, ROUNDS, worst);
	kvs_close(c);
	kvs_close(admin);
	munmap(p, SPARSE_SIZE);
	close(fd);
	dp_stop(&d);
}

int main(void)
{
	dp_watchdog(300);
	sparse_beside_bystander();
	return 0;
}
