/* SPDX-License-Identifier: MIT */
/*
 * Limits on what a client controls that no other test reaches:
 *   - ring and argument sizes a HELLO asks for are clamped to [session]
 *     sq_entries_max and arg_bytes_max, whatever the client says (up to
 *     2^32-1 entries and 2^64-1 bytes: once an undefined shift that
 *     refused the session, or killed a UBSan kvstashd), and the region
 *     the client gets has exactly the sizes the reply names;
 *   - [server] max_sessions_per_uid: one uid's next HELLO is -EUSERS
 *     while another uid still gets in (as nobody, when run as root);
 *   - [session] max_namespaces: a new namespace is -EUSERS while every
 *     one has a session, a known one still joins; a namespace is given
 *     back once it has neither sessions nor blocks, and one with blocks
 *     but no session gives its slot to a new one (test-slot-reclaim);
 * (connection slots: test-connection-limits; fds: test-fd-exhaustion;
 * max_layers: test-register; max_keys: test-hostile-args; max_inflight:
 * tests/soak/soak-exhaustion; max_leases: test-lease; max_sessions:
 * test-handshake.)
 */
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shmq/shmq.h>

#include "itest.h"

#define SQ_MAX	1024u
#define ARG_MAX (8u << 20)

/* HELLO asking for @sq, @cq, @arg; returns the reply, the region checked against it. */
static struct kvs_msg_hello_reply ask(const struct kvsd *d, uint32_t sq, uint32_t cq, uint64_t arg)
{
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	struct shmq_region *region;
	struct shmq_ring sqr, cqr;
	void *args;
	uint64_t argsz;
	static unsigned n;
	int fd = raw_connect(d->sock), rfd, r;
	char inst[32];

	CHECK(fd >= 0, "connect: %s", strerror(-fd));
	snprintf(inst, sizeof(inst), "limits-rings-%u", n++);
	raw_hello_init(&h, KVS_ROLE_WORKER, inst, "limits/pf", 0, 1);
	h.sq_entries = sq;
	h.cq_entries = cq;
	h.arg_bytes = arg;
	r = raw_hello(fd, &h, &rep, &rfd);
	CHECK(r == 0, "HELLO asking SQ %u CQ %u arguments %llu: %s", sq, cq,
	      (unsigned long long)arg, kvs_strerror(r));
	CHECK(rfd >= 0, "no region");
	CHECK(shmq_region_attach(rfd, KVS_REGION_MAGIC, &region) == 0, "attach");
	CHECK(shmq_ring_init(&sqr, region, KVS_PART_SQ, SHMQ_PRODUCER) == 0 &&
		      shmq_ring_init(&cqr, region, KVS_PART_CQ, SHMQ_CONSUMER) == 0 &&
		      shmq_region_area(region, KVS_PART_ARGS, &args, &argsz) == 0,
	      "region parts");
	CHECK(shmq_ring_capacity(&sqr) == rep.sq_entries &&
		      shmq_ring_capacity(&cqr) == rep.cq_entries && argsz == rep.arg_bytes &&
		      shmq_region_size(region) == rep.region_size,
	      "the region differs from the reply: SQ %u/%u CQ %u/%u arguments %llu/%llu",
	      shmq_ring_capacity(&sqr), rep.sq_entries, shmq_ring_capacity(&cqr), rep.cq_entries,
	      (unsigned long long)argsz, (unsigned long long)rep.arg_bytes);
	shmq_region_destroy(region);
	close(rfd);
	close(fd);
	return rep;
}

static void rings(void)
{
	static const struct {
		uint32_t sq, cq;
		uint64_t arg;
		uint32_t want_sq, want_cq;
		uint64_t want_arg;
	} cases[] = {
		{ 0, 0, 0, 256, 512, 4u << 20 }, /* the defaults */
		{ 3, 0, 1, 4, 8, 4096 },	 /* rounded up; the least area */
		{ 2, 1, 4097, 2, 4, 8192 },	 /* CQ at least twice the SQ */
		{ 100, 1000, 10000, 128, 1024, 12288 },
		{ SQ_MAX, 2 * SQ_MAX, ARG_MAX, SQ_MAX, 2 * SQ_MAX, ARG_MAX },
		{ SQ_MAX + 1, 0, ARG_MAX + 1, SQ_MAX, 2 * SQ_MAX, ARG_MAX },
		{ 1u << 31, 1u << 31, 1ull << 40, SQ_MAX, 2 * SQ_MAX, ARG_MAX },
		{ (1u << 31) + 1, UINT32_MAX, UINT64_MAX, SQ_MAX, 2 * SQ_MAX, ARG_MAX },
		{ UINT32_MAX, UINT32_MAX - 1, UINT64_MAX - 4095, SQ_MAX, 2 * SQ_MAX, ARG_MAX },
		{ 0, UINT32_MAX, 0, 256, 2 * SQ_MAX, 4u << 20 },
	};
	struct kvsd d;

	it_start(&d, "[session]\nsq_entries_max = 1024\narg_bytes_max = 8M\n");
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kvs_msg_hello_reply rep = ask(&d, cases[i].sq, cases[i].cq, cases[i].arg);

		CHECK(rep.sq_entries == cases[i].want_sq && rep.cq_entries == cases[i].want_cq &&
			      rep.arg_bytes == cases[i].want_arg,
		      "asked SQ %u CQ %u arguments %llu: got %u %u %llu, want %u %u %llu",
		      cases[i].sq, cases[i].cq, (unsigned long long)cases[i].arg, rep.sq_entries,
		      rep.cq_entries, (unsigned long long)rep.arg_bytes, cases[i].want_sq,
		      cases[i].want_cq, (unsigned long long)cases[i].want_arg);
	}
	it_stop(&d);
	it_ok("%zu HELLOs, up to 2^32-1 entries and 2^64-1 bytes: sizes clamped to "
	      "sq_entries_max and arg_bytes_max, the region as the reply says",
	      sizeof(cases) / sizeof(cases[0]));
}

struct nobody_conn {
	const struct kvsd *d;
	const char *inst;
};

static int nobody_conn_main(void *arg, void *ret)
{
	const struct nobody_conn *a = arg;
	struct kvs_client *c = NULL;
	int *res = ret;

	it_become_nobody();
	*res = test_connect(a->d, KVS_ROLE_WORKER, a->inst, "limits/pf", 0, 1, &c);
	if (*res == 0)
		*res = kvs_nop_sync(c, OP_TIMEOUT_MS);
	kvs_close(c);
	return 0;
}

/* Connect as nobody in a child: its kvs_connect() result (then its NOP's). */
static int connect_as_nobody(const struct kvsd *d, const char *inst)
{
	struct nobody_conn a = { d, inst };
	int res = -ENOSYS;

	it_in_child(nobody_conn_main, &a, &res, sizeof(res));
	return res;
}

static void per_uid(void)
{
	struct kvs_client *a, *b, *c = NULL;
	struct kvsd d;
	uint64_t t0;
	int r;

	it_start(&d, "[server]\nmax_sessions_per_uid = 2\nsocket_mode = 0666\ndir_mode = 0755\n");
	CHECK(chmod(d.dir, 0755) == 0, "chmod");
	CHECK(test_connect(&d, KVS_ROLE_WORKER, "uid-a", "limits/pf", 0, 1, &a) == 0, "first");
	CHECK(test_connect(&d, KVS_ROLE_SCHEDULER, "uid-b", "limits/pf", 0, 1, &b) == 0, "second");
	CHECK_RES(test_connect(&d, KVS_ROLE_WORKER, "uid-c", "limits/pf", 0, 1, &c), -EUSERS,
		  "a third session of the same uid");
	CHECK(kvsd_log_contains(&d, "the session limit of uid"), "the log does not say why");
	if (geteuid() == 0) {
		/* Another uid is not counted with ours. */
		CHECK_RES(connect_as_nobody(&d, "uid-nobody"), 0, "a session of another uid");
	} else {
		printf("# not root: the other uid's session is not tried\n");
	}
	kvs_close(b);
	t0 = test_now_ns();
	while ((r = test_connect(&d, KVS_ROLE_WORKER, "uid-c", "limits/pf", 0, 1, &c)) == -EUSERS &&
	       test_now_ns() - t0 < 5000000000ull)
		usleep(10000);
	CHECK_RES(r, 0, "a session once one of the uid's closed");
	CHECK_RES(kvs_nop_sync(c, OP_TIMEOUT_MS), 0, "NOP");
	kvs_close(c);
	kvs_close(a);
	it_stop(&d);
	it_ok("max_sessions_per_uid = 2: the uid's third HELLO is -EUSERS%s; a closed session "
	      "makes room",
	      geteuid() == 0 ? ", another uid's is served" : "");
}

static void namespaces(void)
{
	uint8_t keys[4 * KVS_KEY_SIZE];
	uint32_t ids[4];
	struct kvs_client *a, *b, *c = NULL;
	struct test_kv kv;
	struct kvsd d;
	uint64_t t0;
	int r;

	it_start(&d, "[session]\nmax_namespaces = 2\n");
	a = it_worker(&d, "ns-a", "ns-a/pf", 0, 1, &kv, LAYOUT_PAGE_FIRST, 2, 8, 4096);
	CHECK(test_connect(&d, KVS_ROLE_SCHEDULER, "ns-b", "ns-b/pf", 0, 1, &b) == 0, "ns-b");
	CHECK_RES(test_connect(&d, KVS_ROLE_SCHEDULER, "ns-c", "ns-c/pf", 0, 1, &c), -EUSERS,
		  "a third namespace");
	CHECK(kvsd_log_contains(&d, "too many namespaces"), "the log does not say why");
	/* A known namespace still joins. */
	CHECK(test_connect(&d, KVS_ROLE_SCHEDULER, "ns-a2", "ns-b/pf", 0, 1, &c) == 0,
	      "a known namespace");
	kvs_close(c);

	/* ns-a keeps blocks but no session: a new namespace takes its slot. */
	it_keys(keys, 4, 1);
	it_ids(ids, 4, 0);
	CHECK_RES(it_save(a, keys, ids, 4).res, 4, "SAVE in ns-a");
	kvs_close(a);
	test_kv_free(&kv);
	t0 = test_now_ns();
	while ((r = test_connect(&d, KVS_ROLE_SCHEDULER, "ns-c", "ns-c/pf", 0, 1, &c)) == -EUSERS &&
	       test_now_ns() - t0 < 10000000000ull)
		usleep(50000);
	CHECK_RES(r, 0, "a third namespace once ns-a, holding only blocks, is idle");
	CHECK(kvsd_log_contains(&d, "reclaimed namespace ns-a/pf"), "ns-a was not the one taken");
	CHECK_RES(kvs_nop_sync(c, OP_TIMEOUT_MS), 0, "NOP");

	/* ns-b has neither sessions nor blocks once closed: swept, room for ns-d. */
	kvs_close(b);
	t0 = test_now_ns();
	while ((r = test_connect(&d, KVS_ROLE_SCHEDULER, "ns-d", "ns-d/pf", 0, 1, &b)) == -EUSERS &&
	       test_now_ns() - t0 < 10000000000ull)
		usleep(50000);
	CHECK_RES(r, 0, "a new namespace once an empty one was swept");
	CHECK_RES(kvs_nop_sync(b, OP_TIMEOUT_MS), 0, "NOP");
	kvs_close(b);
	kvs_close(c);
	it_stop(&d);
	it_ok("max_namespaces = 2: a third is -EUSERS while both hold sessions, known ones join, "
	      "an idle one gives its slot");
}

int main(void)
{
	it_watchdog(120);
	rings();
	per_uid();
	namespaces();
	return 0;
}
