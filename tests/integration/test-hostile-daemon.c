/* SPDX-License-Identifier: MIT */
/*
 * libkvstash against a hostile kvstashd.  The engine library treats the
 * daemon's replies and shared memory as untrusted (DESIGN.md, Security):
 * here a child process plays kvstashd on a real SOCK_SEQPACKET socket,
 * speaking wire.h and making its session regions with libshmq as the
 * daemon does, and lies.  The test process is the engine, linking the
 * real libkvstash.
 *
 *   - HELLO replies with absurd fields (max_inflight 0, 2^32-1 or above the
 *     CQ; ring sizes that are no power of two, too large, or differ from
 *     the region; a region size or argument size that lies; a status that
 *     is no -errno; a truncated or mistyped reply; another revision), and
 *     region fds that are no session region (none, two, a pipe, unsealed,
 *     garbage, 8-byte SQ entries, another layout version, a CQ already
 *     holding entries): kvs_connect() fails with a precise error, nothing
 *     is mapped or leaked, nothing crashes (and nothing absurd is
 *     allocated: this runs under ASan, which aborts on a 64 GiB calloc);
 *   - CQEs rewritten after the library took them: what kvs_peek_cqe()
 *     hands out does not change until kvs_cqe_seen();
 *   - a CQE for an SQE still being prepared (its tag is in shared memory
 *     already) completes nothing, and the SQE's cancelled prep frees its
 *     slot once (twice overflowed the free list);
 *   - CQEs with impossible results (more hits than keys, a count for a
 *     NOP, INT_MIN, stored + skipped above a SAVE's count, the library's
 *     own KVS_CQE_LOCAL mark) reach the application as -EBADMSG marked
 *     KVS_CQE_LOCAL, with the application's user_data; a plausible one
 *     unchanged; a corrupt CQ tail ends the session with -ECONNRESET;
 *   - a daemon flipping the result of every CQE while the library reaps
 *     it: every completion the application sees is one of the two values;
 *   - REGISTER, UNREGISTER and admin replies that lie (a positive status,
 *     the wrong type, fds attached, an unterminated string, an admin
 *     train that never ends): -EBADMSG or -ETIMEDOUT, never a positive
 *     "success", never a hang;
 *   - a stats message longer than its struct: -EBADMSG from a daemon of
 *     the library's own wire revision; from one of a newer minor revision
 *     the part the library knows, and message types it does not know
 *     skipped (<kvstash/stats.h>: how a group grows).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <shmq/shmq.h>

#include "itest.h"

#define WAIT_MS 10000 /* bounded waits: a hang, not a slow machine */
#define SQ	8u
#define CQ	16u
#define ARGB	65536u

/* The fake daemon's listener and the control channel, set before each fork. */
static char sock_path[108];
static int lfd = -1;
static int ctl[2] = { -1, -1 }; /* [0]: the engine (parent), [1]: the fake daemon */

/* ---- the fake daemon's side ------------------------------------------ */

struct fake {
	int conn;
	struct shmq_region *region;
	struct shmq_ring sq, cq; /* consumer, producer: as kvstashd */
};

static int accept_conn(void)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	int fd;

	CHECK(poll(&p, 1, WAIT_MS) == 1, "fake daemon: nobody connected");
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	CHECK(fd >= 0, "accept: %s", strerror(errno));
	return fd;
}

/* One request into @buf; its seq.  Fds that came are closed. */
static uint32_t recv_req(int conn, void *buf, size_t cap, uint32_t want_type)
{
	struct kvs_msg_hdr *h = buf;
	ssize_t n = raw_recv(conn, buf, cap, NULL, 0, NULL, WAIT_MS);

	CHECK(n >= (ssize_t)sizeof(*h), "fake daemon: no request (%zd)", n);
	CHECK(h->type == want_type, "fake daemon: request type %u, want %u", h->type, want_type);
	return h->seq;
}

static int make_region(uint32_t sq, uint32_t cq, uint64_t argb, uint32_t sqe_size, uint32_t version,
		       struct shmq_region **ret)
{
	struct shmq_part_spec parts[3] = {
		{ SHMQ_PART_RING, KVS_PART_SQ, sqe_size, sq, 0 },
		{ SHMQ_PART_RING, KVS_PART_CQ, sizeof(struct kvs_cqe), cq, 0 },
		{ SHMQ_PART_AREA, KVS_PART_ARGS, 0, 0, argb },
	};

	return shmq_region_create("kvstash-session", KVS_REGION_MAGIC, version, parts, 3, ret);
}

/* A reply exactly as kvstashd's handle_hello() makes it, for @region. */
static void good_reply(struct kvs_msg_hello_reply *rep, uint32_t seq,
		       const struct shmq_region *region, uint32_t sq, uint32_t cq, uint64_t argb)
{
	memset(rep, 0, sizeof(*rep));
	rep->r.hdr.type = KVS_MSG_HELLO_REPLY;
	rep->r.hdr.size = sizeof(*rep);
	rep->r.hdr.seq = seq;
	rep->r.rev_major = KVS_WIRE_MAJOR;
	rep->r.rev_minor = KVS_WIRE_MINOR;
	rep->session_id = 1;
	rep->sq_entries = sq;
	rep->cq_entries = cq;
	rep->arg_bytes = argb;
	rep->region_size = region ? shmq_region_size(region) : 0;
	rep->max_keys = 1024;
	rep->max_inflight = cq;
	rep->max_layers = 64;
	rep->lease_ttl_ms = 600000;
}

/* Accept, answer the HELLO with a good session of @max_inflight, map the rings. */
static void fake_session(struct fake *f, uint32_t max_inflight)
{
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	uint32_t seq;
	int fd;

	f->conn = accept_conn();
	seq = recv_req(f->conn, &h, sizeof(h), KVS_MSG_HELLO);
	CHECK(make_region(SQ, CQ, ARGB, sizeof(struct kvs_sqe), KVS_REGION_VERSION, &f->region) ==
		      0,
	      "region");
	CHECK(shmq_ring_init(&f->sq, f->region, KVS_PART_SQ, SHMQ_CONSUMER) == 0 &&
		      shmq_ring_init(&f->cq, f->region, KVS_PART_CQ, SHMQ_PRODUCER) == 0,
	      "rings");
	good_reply(&rep, seq, f->region, SQ, CQ, ARGB);
	rep.max_inflight = max_inflight;
	fd = shmq_region_fd(f->region);
	CHECK(raw_send(f->conn, &rep, sizeof(rep), &fd, 1) == 0, "send the HELLO reply");
}

/* Wait for the engine to hang up, then go. */
static int fake_end(struct fake *f)
{
	CHECK(raw_eof(f->conn, 2 * WAIT_MS), "the engine never closed its session");
	close(f->conn);
	shmq_region_destroy(f->region);
	return 0;
}

/* The next submitted SQE, copied out and released (a bounded wait). */
static struct kvs_sqe take_sqe(struct fake *f)
{
	uint64_t deadline = test_now_ns() + WAIT_MS * 1000000ull;
	struct kvs_sqe sqe;
	uint32_t idx;

	while (shmq_cons_peek(&f->sq, 1, &idx) != 1) {
		CHECK(test_now_ns() < deadline, "fake daemon: no SQE came");
		shmq_cons_wait(&f->sq, 100 * 1000000ll);
	}
	memcpy(&sqe, shmq_ring_entry(&f->sq, idx), sizeof(sqe));
	shmq_cons_release(&f->sq, 1);
	return sqe;
}

/* Publish @e; returns the CQ entry it went to (still writable by us). */
static struct kvs_cqe *post(struct fake *f, const struct kvs_cqe *e)
{
	struct kvs_cqe *slot;
	uint32_t idx;

	CHECK(shmq_prod_reserve(&f->cq, 1, &idx) == 1, "fake daemon: CQ full");
	slot = shmq_ring_entry(&f->cq, idx);
	memcpy(slot, e, sizeof(*e));
	shmq_prod_commit(&f->cq, 0);
	return slot;
}

/* ---- the control channel ---------------------------------------------- */

static void ctl_send(int fd, uint32_t code)
{
	CHECK(send(fd, &code, sizeof(code), MSG_NOSIGNAL) == sizeof(code), "ctl send: %s",
	      strerror(errno));
}

static void ctl_wait(int fd, uint32_t code)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint32_t got = 0;

	CHECK(poll(&p, 1, 2 * WAIT_MS) == 1, "ctl: no word %u", code);
	CHECK(recv(fd, &got, sizeof(got), 0) == sizeof(got) && got == code, "ctl: got %u, want %u",
	      got, code);
}

/* ---- the engine's side ------------------------------------------------- */

static void fake_listen(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	CHECK(lfd >= 0, "socket");
	unlink(sock_path);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind %s: %s", sock_path,
	      strerror(errno));
	CHECK(listen(lfd, 4) == 0, "listen");
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) == 0, "socketpair");
}

/* Fork the fake daemon running @fn; the engine keeps only its ctl end. */
static void fake_spawn(it_child_fn fn, unsigned i)
{
	it_spawn(fn, NULL, i);
	close(lfd);
	close(ctl[1]);
	lfd = ctl[1] = -1;
}

static void fake_done(void)
{
	it_wait_all();
	close(ctl[0]);
	ctl[0] = -1;
	unlink(sock_path);
}

static int engine_connect(uint32_t role, int timeout_ms, struct kvs_client **ret)
{
	struct kvs_connect_opts o;

	kvs_connect_opts_init(&o);
	o.role = role;
	o.instance = "hostile-daemon";
	o.ns = "hostile-daemon/ns";
	o.timeout_ms = timeout_ms;
	return kvs_connect(sock_path, &o, ret);
}

static struct kvs_client *engine_session(void)
{
	struct kvs_client *c;
	int r = engine_connect(KVS_ROLE_WORKER, WAIT_MS, &c);

	CHECK(r == 0, "connect to the fake daemon: %s", kvs_strerror(r));
	return c;
}

static struct kvs_cqe wait_one(struct kvs_client *c)
{
	struct kvs_cqe *p, e;
	int r = kvs_wait_cqe(c, &p, WAIT_MS);

	CHECK(r == 0, "no completion: %s", kvs_strerror(r));
	e = *p;
	kvs_cqe_seen(c, p);
	return e;
}

/* ---- HELLO replies ----------------------------------------------------- */

enum mut {
	M_NONE,
	M_INFLIGHT_0,
	M_INFLIGHT_MAX,
	M_INFLIGHT_OVER_CQ,
	M_SQ_0,
	M_SQ_NOT_POW2,
	M_SQ_HUGE,
	M_SQ_DIFFERS,
	M_CQ_BELOW_2SQ,
	M_ARGS_DIFFER,
	M_ARGS_HUGE,
	M_REGION_SIZE_LIE,
	M_MAX_KEYS_0,
	M_STATUS_POSITIVE,
	M_STATUS_INT_MIN,
	M_STATUS_REFUSED,
	M_TRUNCATED,
	M_HDR_ONLY,
	M_SIZE_LIE,
	M_WRONG_TYPE,
	M_REV_MAJOR,
	M_NO_FD,
	M_TWO_FDS,
	M_FD_PIPE,
	M_FD_UNSEALED,
	M_FD_GARBAGE,
	M_SQE_8_BYTES,
	M_REGION_VERSION,
	M_CQ_NOT_EMPTY,
	M_SILENT,
	M_ADMIN_FD,
	M_ADMIN_OK,
};

static const struct hello_case {
	enum mut mut;
	const char *what;
	int want;
} cases[] = {
	{ M_NONE, "a good reply (the fake daemon itself is right)", 0 },
	{ M_INFLIGHT_0, "max_inflight 0", -EBADMSG },
	{ M_INFLIGHT_MAX, "max_inflight 2^32-1", -EBADMSG },
	{ M_INFLIGHT_OVER_CQ, "max_inflight above the CQ", -EBADMSG },
	{ M_SQ_0, "SQ entries 0", -EBADMSG },
	{ M_SQ_NOT_POW2, "SQ entries 12", -EBADMSG },
	{ M_SQ_HUGE, "SQ entries 2^20 (a region that has them)", -EBADMSG },
	{ M_SQ_DIFFERS, "SQ entries other than the region's", -EBADMSG },
	{ M_CQ_BELOW_2SQ, "a CQ as small as the SQ", -EBADMSG },
	{ M_ARGS_DIFFER, "an argument size other than the region's", -EBADMSG },
	{ M_ARGS_HUGE, "an argument area of 2^40 bytes", -EBADMSG },
	{ M_REGION_SIZE_LIE, "a region size other than the fd's", -EBADMSG },
	{ M_MAX_KEYS_0, "max_keys 0", -EBADMSG },
	{ M_STATUS_POSITIVE, "status 7 (no errno)", -EBADMSG },
	{ M_STATUS_INT_MIN, "status INT_MIN", -EBADMSG },
	{ M_STATUS_REFUSED, "a refusal with unterminated text", -EACCES },
	{ M_TRUNCATED, "a reply cut after 100 bytes", -EBADMSG },
	{ M_HDR_ONLY, "a plain reply's size as a HELLO reply", -EBADMSG },
	{ M_SIZE_LIE, "a header size of 4096", -EBADMSG },
	{ M_WRONG_TYPE, "a successful reply typed KVS_MSG_REPLY", -EBADMSG },
	{ M_REV_MAJOR, "wire major 2 in a successful reply", -EPROTONOSUPPORT },
	{ M_NO_FD, "no region fd", -EBADMSG },
	{ M_TWO_FDS, "two region fds", -EBADMSG },
	{ M_FD_PIPE, "a pipe for a region", -EBADMSG },
	{ M_FD_UNSEALED, "an unsealed memfd for a region", -EBADMSG },
	{ M_FD_GARBAGE, "a sealed memfd of garbage", -EBADMSG },
	{ M_SQE_8_BYTES, "an SQ of 8-byte entries", -EBADMSG },
	{ M_REGION_VERSION, "session region version 2", -EPROTONOSUPPORT },
	{ M_CQ_NOT_EMPTY, "a CQ holding 3 entries already", -EBADMSG },
	{ M_SILENT, "no reply at all", -ETIMEDOUT },
	{ M_ADMIN_FD, "a region for an admin session", -EBADMSG },
	{ M_ADMIN_OK, "a good admin reply", 0 },
};

static int memfd_of(uint64_t size, bool seal, bool garbage)
{
	int fd = memfd_create("kvstash-session", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0, "memfd");
	if (garbage) {
		uint8_t b[4096];

		for (unsigned i = 0; i < sizeof(b); i++)
			b[i] = (uint8_t)(i * 131 + 7);
		CHECK(pwrite(fd, b, sizeof(b), 0) == (ssize_t)sizeof(b), "pwrite");
	}
	if (seal)
		CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0, "seal");
	return fd;
}

static int hello_child(void *arg, unsigned i)
{
	const struct hello_case *hc = &cases[i];
	uint32_t sq = SQ, cq = CQ, sqe_size = sizeof(struct kvs_sqe), version = KVS_REGION_VERSION;
	uint64_t argb = ARGB;
	struct shmq_region *region = NULL;
	struct kvs_msg_hello_reply rep;
	struct kvs_msg_hello h;
	size_t len = sizeof(rep);
	int conn, fds[2], nfds = 1, extra = -1, pipefd[2] = { -1, -1 };
	uint32_t seq;

	(void)arg;
	conn = accept_conn();
	seq = recv_req(conn, &h, sizeof(h), KVS_MSG_HELLO);
	if (hc->mut == M_SQ_HUGE)
		sq = 1u << 20, cq = 1u << 21;
	if (hc->mut == M_CQ_BELOW_2SQ)
		cq = sq;
	if (hc->mut == M_SQE_8_BYTES)
		sqe_size = 8;
	if (hc->mut == M_REGION_VERSION)
		version = 2;
	CHECK(make_region(sq, cq, argb, sqe_size, version, &region) == 0, "region");
	good_reply(&rep, seq, region, sq, cq, argb);
	fds[0] = shmq_region_fd(region);
	switch (hc->mut) {
	case M_INFLIGHT_0:
		rep.max_inflight = 0;
		break;
	case M_INFLIGHT_MAX:
		rep.max_inflight = UINT32_MAX;
		break;
	case M_INFLIGHT_OVER_CQ:
		rep.max_inflight = cq + 1;
		break;
	case M_SQ_0:
		rep.sq_entries = 0;
		break;
	case M_SQ_NOT_POW2:
		rep.sq_entries = 12;
		break;
	case M_SQ_DIFFERS:
		rep.sq_entries =
			sq / 2; /* a power of two, the CQ twice it: only the region says no */
		break;
	case M_ARGS_DIFFER:
		rep.arg_bytes = 2 * argb;
		break;
	case M_ARGS_HUGE:
		rep.arg_bytes = 1ull << 40;
		break;
	case M_REGION_SIZE_LIE:
		rep.region_size += 4096;
		break;
	case M_MAX_KEYS_0:
		rep.max_keys = 0;
		break;
	case M_STATUS_POSITIVE:
		rep.r.status = 7;
		break;
	case M_STATUS_INT_MIN:
		rep.r.hdr.type = KVS_MSG_REPLY;
		rep.r.status = INT_MIN;
		len = sizeof(rep.r);
		rep.r.hdr.size = (uint32_t)len;
		nfds = 0;
		break;
	case M_STATUS_REFUSED:
		rep.r.hdr.type = KVS_MSG_REPLY;
		rep.r.status = -EACCES;
		memset(rep.r.text, 'A', sizeof(rep.r.text));
		len = sizeof(rep.r);
		rep.r.hdr.size = (uint32_t)len;
		break;
	case M_TRUNCATED:
		len = 100;
		break;
	case M_HDR_ONLY:
		len = sizeof(rep.r);
		rep.r.hdr.size = (uint32_t)len;
		break;
	case M_SIZE_LIE:
		rep.r.hdr.size = 4096;
		break;
	case M_WRONG_TYPE:
		rep.r.hdr.type = KVS_MSG_REPLY;
		break;
	case M_REV_MAJOR:
		rep.r.rev_major = KVS_WIRE_MAJOR + 1;
		break;
	case M_NO_FD:
	case M_ADMIN_OK:
		nfds = 0;
		break;
	case M_TWO_FDS:
		extra = memfd_of(4096, true, false);
		fds[1] = extra;
		nfds = 2;
		break;
	case M_FD_PIPE:
		CHECK(pipe2(pipefd, O_CLOEXEC) == 0, "pipe");
		fds[0] = pipefd[0];
		break;
	case M_FD_UNSEALED:
		extra = memfd_of(rep.region_size, false, false);
		fds[0] = extra;
		break;
	case M_FD_GARBAGE:
		extra = memfd_of(rep.region_size, true, true);
		fds[0] = extra;
		break;
	case M_CQ_NOT_EMPTY: {
		struct shmq_ring r;
		uint32_t idx;

		CHECK(shmq_ring_init(&r, region, KVS_PART_CQ, SHMQ_PRODUCER) == 0, "cq");
		CHECK(shmq_prod_reserve(&r, 3, &idx) == 3, "reserve");
		for (uint32_t k = 0; k < 3; k++)
			memset(shmq_ring_entry(&r, idx + k), 0x5a, sizeof(struct kvs_cqe));
		shmq_prod_commit(&r, 0);
		break;
	}
	default:
		break;
	}
	if (hc->mut != M_SILENT)
		CHECK(raw_send(conn, &rep, len, fds, (unsigned)nfds) == 0, "send the reply");
	/* An admin session that connected stays until the engine closes it. */
	CHECK(raw_eof(conn, 2 * WAIT_MS), "the engine did not hang up");
	close(conn);
	if (extra >= 0)
		close(extra);
	if (pipefd[0] >= 0)
		close(pipefd[0]), close(pipefd[1]);
	shmq_region_destroy(region);
	return 0;
}

static void hello_replies(void)
{
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct hello_case *hc = &cases[i];
		bool admin = hc->mut == M_ADMIN_FD || hc->mut == M_ADMIN_OK;
		int fds = proc_fd_count(getpid()), r;
		struct kvs_client *c = NULL;

		fake_listen();
		fake_spawn(hello_child, i);
		r = engine_connect(admin ? KVS_ROLE_ADMIN : KVS_ROLE_WORKER,
				   hc->mut == M_SILENT ? 300 : WAIT_MS, &c);
		CHECK_RES(r, hc->want, hc->what);
		CHECK(r == 0 || c == NULL, "%s: the client was set on failure", hc->what);
		if (r == 0) {
			struct kvs_session_info info;

			kvs_session_info(c, &info);
			CHECK(admin || (info.sq_entries == SQ && info.max_inflight == CQ),
			      "%s: session info %u/%u", hc->what, info.sq_entries,
			      info.max_inflight);
		} else {
			CHECK(proc_map_count(getpid(), "kvstash-session") == 0,
			      "%s: a region stayed mapped", hc->what);
		}
		kvs_close(c);
		fake_done();
		CHECK(proc_fd_count(getpid()) == fds, "%s: %d fds open, %d before", hc->what,
		      proc_fd_count(getpid()), fds);
		CHECK(proc_map_count(getpid(), "kvstash-session") == 0, "%s: a region leaked",
		      hc->what);
	}
	it_ok("%zu HELLO replies: every lie refused with its error, nothing mapped or leaked",
	      sizeof(cases) / sizeof(cases[0]));
}

/* ---- CQEs rewritten after the library took them ------------------------ */

enum { W_POSTED = 1, W_PEEKED, W_REWRITTEN, W_RESERVED };

static int rewrite_child(void *arg, unsigned i)
{
	struct fake f;
	struct kvs_sqe sqe;
	struct kvs_cqe e = { 0 }, *slot;

	(void)arg;
	(void)i;
	fake_session(&f, CQ);
	sqe = take_sqe(&f);
	e.user_data = sqe.user_data;
	slot = post(&f, &e);
	ctl_send(ctl[1], W_POSTED);
	ctl_wait(ctl[1], W_PEEKED);
	/* The engine holds the CQE now: rewrite every field of it. */
	slot->user_data = sqe.user_data ^ 0xdeadbeef00000000ull;
	slot->res = 12345;
	slot->flags = 0xffffffffu;
	slot->result0 = slot->result1 = UINT64_MAX;
	ctl_send(ctl[1], W_REWRITTEN);
	return fake_end(&f);
}

static void rewritten_cqe(void)
{
	struct kvs_client *c;
	struct kvs_cqe *p, seen;
	struct kvs_sqe *sqe;

	fake_listen();
	fake_spawn(rewrite_child, 0);
	c = engine_session();
	sqe = kvs_get_sqe(c);
	CHECK(sqe && kvs_prep_nop(c, sqe, 42) == 0 && kvs_submit(c) == 1, "NOP");
	ctl_wait(ctl[0], W_POSTED);
	CHECK(kvs_peek_cqe(c, &p) == 0, "no CQE");
	seen = *p;
	CHECK(seen.user_data == 42 && seen.res == 0 && seen.flags == 0, "CQE %llu res %d flags %u",
	      (unsigned long long)seen.user_data, seen.res, seen.flags);
	ctl_send(ctl[0], W_PEEKED);
	ctl_wait(ctl[0], W_REWRITTEN);
	CHECK(memcmp(p, &seen, sizeof(seen)) == 0,
	      "the CQE changed under the application: user_data %llx res %d flags %x",
	      (unsigned long long)p->user_data, p->res, p->flags);
	kvs_cqe_seen(c, p);
	CHECK(kvs_peek_cqe(c, &p) == -EAGAIN, "a rewritten entry came back as a second CQE");
	CHECK(kvs_pending(c) == 0, "%u pending", kvs_pending(c));
	kvs_close(c);
	fake_done();
	it_ok("a CQE kvstashd rewrites after the library took it stays what it was");
}

/* ---- a CQE for an SQE still being prepared ----------------------------- */

static int early_child(void *arg, unsigned i)
{
	struct fake f;
	struct kvs_cqe e = { 0 };
	struct kvs_sqe sqe;

	(void)arg;
	(void)i;
	fake_session(&f, 1);
	ctl_wait(ctl[1], W_RESERVED);
	/* Not yet submitted, but its tag is already in the SQ's first entry. */
	memcpy(&sqe, shmq_ring_entry(&f.sq, 0), sizeof(sqe));
	e.user_data = sqe.user_data;
	post(&f, &e);
	ctl_send(ctl[1], W_POSTED);
	sqe = take_sqe(&f); /* the NOP submitted after the cancelled SAVE */
	e.user_data = sqe.user_data;
	post(&f, &e);
	return fake_end(&f);
}

static void early_cqe(void)
{
	struct kvs_client *c;
	struct kvs_cqe *p, e;
	struct kvs_sqe *sqe;
	uint8_t keys[KVS_KEY_SIZE] = { 0 };

	fake_listen();
	fake_spawn(early_child, 0);
	c = engine_session(); /* max_inflight 1: one slot, a second free of it overflows */
	sqe = kvs_get_sqe(c);
	CHECK(sqe != NULL, "no SQE");
	ctl_send(ctl[0], W_RESERVED);
	ctl_wait(ctl[0], W_POSTED);
	CHECK(kvs_peek_cqe(c, &p) == -EAGAIN, "a CQE completed an SQE nobody submitted");
	/* The prep fails (more keys than max_keys): the SQE and its slot go back, once. */
	CHECK_RES(kvs_prep_query(c, sqe, keys, 1025, 1, 0, 1), -E2BIG, "QUERY of 1025 keys");
	CHECK(kvs_pending(c) == 0, "%u pending after the cancel", kvs_pending(c));
	sqe = kvs_get_sqe(c);
	CHECK(sqe && kvs_prep_nop(c, sqe, 77) == 0 && kvs_submit(c) == 1, "NOP");
	CHECK(kvs_get_sqe(c) == NULL, "a second SQE with max_inflight 1");
	e = wait_one(c);
	CHECK(e.user_data == 77 && e.res == 0, "CQE %llu res %d", (unsigned long long)e.user_data,
	      e.res);
	CHECK(kvs_peek_cqe(c, &p) == -EAGAIN && kvs_pending(c) == 0, "more completions");
	kvs_close(c);
	fake_done();
	it_ok("a CQE for an SQE still being prepared completes nothing; its cancel frees one slot");
}

/* ---- impossible results ------------------------------------------------ */

static const struct result_case {
	uint8_t op;
	uint32_t n; /* keys / block ids */
	int32_t res;
	uint32_t flags;
	uint64_t r0, r1;
	int32_t want; /* what the application sees */
	uint32_t want_flags;
	const char *what;
} results[] = {
	{ KVS_OP_QUERY, 4, 5, 0, 1, 0, -EBADMSG, KVS_CQE_LOCAL, "5 hits of 4 keys" },
	{ KVS_OP_QUERY, 4, 4, 0, 99, 7, 4, 0, "4 hits of 4 keys" },
	{ KVS_OP_NOP, 0, 3, 0, 0, 0, -EBADMSG, KVS_CQE_LOCAL, "a NOP with a count" },
	{ KVS_OP_NOP, 0, INT_MIN, 0, 0, 0, -EBADMSG, KVS_CQE_LOCAL, "res INT_MIN" },
	{ KVS_OP_NOP, 0, -4096, 0, 0, 0, -EBADMSG, KVS_CQE_LOCAL, "res -4096" },
	{ KVS_OP_SAVE, 2, 2, 0, 2, 1, -EBADMSG, KVS_CQE_LOCAL, "3 of 2 blocks stored or skipped" },
	{ KVS_OP_SAVE, 2, 2, 0, UINT64_MAX, 3, -EBADMSG, KVS_CQE_LOCAL, "stored + skipped wraps" },
	{ KVS_OP_SAVE, 2, -ENOSPC, 0, 1, 1, -ENOSPC, 0, "a full pool, 1 stored 1 skipped" },
	{ KVS_OP_LOAD, 3, 4, 0, 0, 0, -EBADMSG, KVS_CQE_LOCAL, "4 blocks loaded of 3" },
	{ KVS_OP_LOAD, 3, -EIO, 0, 0, 0, -EIO, 0, "a failed copy" },
	{ KVS_OP_RELEASE, 0, 0, KVS_CQE_LOCAL, 0, 0, 0, 0, "the library's LOCAL mark" },
	{ KVS_OP_FLUSH, 0, 0, 0x80000000u, 0, 0, 0, 0x80000000u, "an unknown flag passes" },
};

#define NRESULTS (sizeof(results) / sizeof(results[0]))

static int results_child(void *arg, unsigned i)
{
	struct fake f;

	(void)arg;
	(void)i;
	fake_session(&f, CQ);
	for (unsigned k = 0; k < NRESULTS; k++) {
		struct kvs_sqe sqe = take_sqe(&f);
		struct kvs_cqe e = { sqe.user_data, results[k].res, results[k].flags, results[k].r0,
				     results[k].r1 };

		CHECK(sqe.opcode == results[k].op, "SQE %u: opcode %u", k, sqe.opcode);
		post(&f, &e);
	}
	/* Then a tail far beyond capacity: the engine must drop the session. */
	take_sqe(&f);
	__atomic_store_n(
		(uint32_t *)((uint8_t *)shmq_ring_entry(&f.cq, 0) - SHMQ_RING_ENTRIES_OFFSET),
		UINT32_MAX / 2, __ATOMIC_RELEASE);
	return fake_end(&f);
}

static void impossible_results(void)
{
	uint8_t keys[4 * KVS_KEY_SIZE] = { 1 };
	uint32_t ids[4] = { 0, 1, 2, 3 };
	struct kvs_client *c;
	struct kvs_sqe *sqe;
	struct kvs_cqe e;

	fake_listen();
	fake_spawn(results_child, 0);
	c = engine_session();
	for (unsigned k = 0; k < NRESULTS; k++) {
		const struct result_case *rc = &results[k];
		uint64_t ud = 1000 + k;
		int r = -EINVAL;

		sqe = kvs_get_sqe(c);
		CHECK(sqe != NULL, "no SQE");
		switch (rc->op) {
		case KVS_OP_QUERY:
			r = kvs_prep_query(c, sqe, keys, rc->n, 1, 0, ud);
			break;
		case KVS_OP_SAVE:
			r = kvs_prep_save(c, sqe, keys, ids, rc->n, ud);
			break;
		case KVS_OP_LOAD:
			r = kvs_prep_load(c, sqe, 5, ids, rc->n, 0, 0, ud);
			break;
		case KVS_OP_RELEASE:
			r = kvs_prep_release(c, sqe, 5, ud);
			break;
		case KVS_OP_FLUSH:
			r = kvs_prep_flush(c, sqe, 0, ud);
			break;
		default:
			r = kvs_prep_nop(c, sqe, ud);
			break;
		}
		CHECK(r == 0 && kvs_submit(c) == 1, "prep %s", rc->what);
		e = wait_one(c);
		CHECK(e.user_data == ud, "%s: user_data %llu", rc->what,
		      (unsigned long long)e.user_data);
		CHECK_RES(e.res, rc->want, rc->what);
		CHECK(e.flags == rc->want_flags, "%s: flags %x, want %x", rc->what, e.flags,
		      rc->want_flags);
		if (e.res == -EBADMSG)
			CHECK(e.result0 == 0 && e.result1 == 0, "%s: results kept", rc->what);
		else
			CHECK(e.result0 == rc->r0 && e.result1 == rc->r1, "%s: results changed",
			      rc->what);
	}
	sqe = kvs_get_sqe(c);
	CHECK(sqe && kvs_prep_nop(c, sqe, 9) == 0 && kvs_submit(c) == 1, "NOP");
	e = wait_one(c);
	CHECK(e.user_data == 9 && e.res == -ECONNRESET && (e.flags & KVS_CQE_LOCAL),
	      "after a corrupt CQ tail: user_data %llu res %d flags %x",
	      (unsigned long long)e.user_data, e.res, e.flags);
	CHECK(kvs_connected(c) == 0, "still connected after a corrupt CQ tail");
	kvs_close(c);
	fake_done();
	it_ok("%zu impossible or odd results: -EBADMSG (KVS_CQE_LOCAL) where no operation could "
	      "give them, kept where one could; a corrupt CQ tail ends the session",
	      NRESULTS);
}

/* ---- results flipped while the library reaps --------------------------- */

#define FLIPS 1000u
#define JUNK  999999

static int flip_child(void *arg, unsigned i)
{
	struct fake f;

	(void)arg;
	(void)i;
	fake_session(&f, CQ);
	for (unsigned k = 0; k < FLIPS; k++) {
		struct kvs_sqe sqe = take_sqe(&f);
		struct kvs_cqe e = { .user_data = sqe.user_data };
		volatile struct kvs_cqe *slot = post(&f, &e);
		uint64_t deadline = test_now_ns() + WAIT_MS * 1000000ull;

		/* Flip res until the engine has taken the entry (its head passed it). */
		for (unsigned n = 0; shmq_prod_inflight(&f.cq) > 0; n++) {
			CHECK(test_now_ns() < deadline, "the engine never reaped");
			slot->res = n & 1 ? JUNK : 0;
		}
	}
	return fake_end(&f);
}

static void flipped_results(void)
{
	unsigned bad = 0, good = 0;
	struct kvs_client *c;

	fake_listen();
	fake_spawn(flip_child, 0);
	c = engine_session();
	for (unsigned k = 0; k < FLIPS; k++) {
		struct kvs_sqe *sqe = kvs_get_sqe(c);
		struct kvs_cqe *p, first;
		int r;

		CHECK(sqe && kvs_prep_nop(c, sqe, k) == 0 && kvs_submit(c) == 1, "NOP %u", k);
		r = kvs_wait_cqe(c, &p, WAIT_MS);
		CHECK(r == 0, "NOP %u: %s", k, kvs_strerror(r));
		first = *p;
		CHECK(first.user_data == k && (first.res == 0 || first.res == -EBADMSG),
		      "NOP %u: user_data %llu res %d", k, (unsigned long long)first.user_data,
		      first.res);
		CHECK(memcmp(p, &first, sizeof(first)) == 0, "NOP %u: the CQE changed while held",
		      k);
		if (first.res)
			bad++;
		else
			good++;
		kvs_cqe_seen(c, p);
	}
	kvs_close(c);
	fake_done();
	it_ok("%u CQEs whose res kvstashd flipped while they were reaped: %u seen as 0, %u as "
	      "-EBADMSG, never anything else",
	      FLIPS, good, bad);
}

/* ---- REGISTER, UNREGISTER and admin replies ---------------------------- */

static void send_reply(int conn, uint32_t seq, uint32_t type, int32_t status, const int *fds,
		       unsigned nfds)
{
	struct kvs_msg_reply r;

	memset(&r, 0, sizeof(r));
	r.hdr.type = type;
	r.hdr.size = sizeof(r);
	r.hdr.seq = seq;
	r.status = status;
	r.rev_major = KVS_WIRE_MAJOR;
	CHECK(raw_send(conn, &r, sizeof(r), fds, nfds) == 0, "send a reply");
}

static int register_child(void *arg, unsigned i)
{
	static uint8_t buf[KVS_MSG_MAX];
	struct fake f;
	uint32_t seq;
	int junk;

	(void)arg;
	(void)i;
	fake_session(&f, CQ);
	seq = recv_req(f.conn, buf, sizeof(buf), KVS_MSG_REGISTER);
	send_reply(f.conn, seq, KVS_MSG_REPLY, 7, NULL, 0);
	seq = recv_req(f.conn, buf, sizeof(buf), KVS_MSG_REGISTER);
	send_reply(f.conn, seq, KVS_MSG_HELLO_REPLY, 0, NULL, 0);
	seq = recv_req(f.conn, buf, sizeof(buf), KVS_MSG_REGISTER);
	junk = memfd_of(4096, true, false);
	send_reply(f.conn, seq, KVS_MSG_REPLY, -EXDEV, &junk, 1);
	close(junk);
	seq = recv_req(f.conn, buf, sizeof(buf), KVS_MSG_REGISTER);
	send_reply(f.conn, seq, KVS_MSG_REPLY, 0, NULL, 0);
	seq = recv_req(f.conn, buf, sizeof(buf), KVS_MSG_UNREGISTER);
	send_reply(f.conn, seq, KVS_MSG_REPLY, 5, NULL, 0);
	seq = recv_req(f.conn, buf, sizeof(buf), KVS_MSG_UNREGISTER);
	send_reply(f.conn, seq, KVS_MSG_REPLY, INT_MIN, NULL, 0);
	return fake_end(&f);
}

static void register_replies(void)
{
	struct kvs_client *c;
	struct test_kv kv;
	int fds;

	CHECK(test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, 2, 4, 512) == 0, "KV memory");
	fds = proc_fd_count(getpid());
	fake_listen();
	fake_spawn(register_child, 0);
	c = engine_session();
	CHECK_RES(test_kv_register(c, &kv), -EBADMSG, "REGISTER answered with status 7");
	CHECK_RES(test_kv_register(c, &kv), -EBADMSG, "REGISTER answered with a HELLO reply");
	CHECK_RES(test_kv_register(c, &kv), -EXDEV, "REGISTER refused, a memfd attached");
	CHECK_RES(test_kv_register(c, &kv), 0, "REGISTER accepted");
	CHECK_RES(kvs_unregister(c), -EBADMSG, "UNREGISTER answered with status 5");
	CHECK_RES(kvs_unregister(c), -EBADMSG, "UNREGISTER answered with status INT_MIN");
	kvs_close(c);
	fake_done();
	CHECK(proc_fd_count(getpid()) == fds, "%d fds open, %d before", proc_fd_count(getpid()),
	      fds);
	test_kv_free(&kv);
	it_ok("REGISTER and UNREGISTER replies that lie: -EBADMSG, never a positive status; "
	      "fds sent along closed");
}

static int admin_child(void *arg, unsigned i)
{
	struct kvs_msg_hello_reply rep;
	struct kvs_msg_hello h;
	struct kvs_msg_hdr req;
	int conn;
	uint32_t seq;

	(void)arg;
	(void)i;
	conn = accept_conn();
	seq = recv_req(conn, &h, sizeof(h), KVS_MSG_HELLO);
	good_reply(&rep, seq, NULL, 0, 0, 0);
	CHECK(raw_send(conn, &rep, sizeof(rep), NULL, 0) == 0, "admin reply");

	/* STATUS: a session whose instance name has no end. */
	seq = recv_req(conn, &req, sizeof(req), KVS_MSG_STATUS);
	{
		struct kvs_msg_status_session m;

		memset(&m, 'x', sizeof(m));
		m.hdr = (struct kvs_msg_hdr){ KVS_MSG_STATUS_SESSION, sizeof(m), seq, 0 };
		CHECK(raw_send(conn, &m, sizeof(m), NULL, 0) == 0, "status session");
	}
	/* STATS: refused with a positive status. */
	seq = recv_req(conn, &req, sizeof(req), KVS_MSG_STATS);
	send_reply(conn, seq, KVS_MSG_REPLY, 9, NULL, 0);
	/* STATUS: a train that never ends, until the engine hangs up. */
	seq = recv_req(conn, &req, sizeof(req), KVS_MSG_STATUS);
	for (;;) {
		struct kvs_msg_stats_node m;

		memset(&m, 0, sizeof(m));
		m.hdr = (struct kvs_msg_hdr){ KVS_MSG_STATS_NODE, sizeof(m), seq, 0 };
		if (raw_send(conn, &m, sizeof(m), NULL, 0) < 0)
			break; /* EPIPE: the engine closed */
		usleep(10000); /* pacing only, to spare the CPU: any rate never ends */
	}
	close(conn);
	return 0;
}

static int count_cb(void *arg, const struct kvs_msg_hdr *m)
{
	(void)m;
	(*(unsigned *)arg)++;
	return 0;
}

static void admin_replies(void)
{
	struct kvs_client *c;
	unsigned n = 0;
	int r;

	fake_listen();
	fake_spawn(admin_child, 0);
	/* timeout_ms bounds the endless train below, and the HELLO: no shorter than the rest. */
	r = engine_connect(KVS_ROLE_ADMIN, WAIT_MS, &c);
	CHECK(r == 0, "admin connect: %s", kvs_strerror(r));
	CHECK_RES(kvs_admin_request(c, KVS_MSG_STATUS, count_cb, &n), -EBADMSG,
		  "STATUS with an unterminated name");
	CHECK(n == 0, "the callback saw an unterminated name");
	CHECK_RES(kvs_admin_request(c, KVS_MSG_STATS, count_cb, &n), -EBADMSG,
		  "STATS refused with status 9");
	CHECK_RES(kvs_admin_request(c, KVS_MSG_STATUS, count_cb, &n), -ETIMEDOUT,
		  "STATUS that never ends");
	kvs_close(c);
	fake_done();
	it_ok("admin replies that lie: -EBADMSG; an endless train ends at timeout_ms (%u "
	      "messages taken)",
	      n);
}

/* STATS from a daemon of minor revision KVS_WIRE_MINOR + @i: a node message 8 bytes long. */
static int newer_child(void *arg, unsigned i)
{
	struct kvs_msg_hello_reply rep;
	struct kvs_msg_hello h;
	struct kvs_msg_hdr req, end;
	struct kvs_msg_stats_global g;
	uint8_t node[sizeof(struct kvs_msg_stats_node) + 8], other[40];
	int conn;
	uint32_t seq;

	(void)arg;
	conn = accept_conn();
	seq = recv_req(conn, &h, sizeof(h), KVS_MSG_HELLO);
	good_reply(&rep, seq, NULL, 0, 0, 0);
	rep.r.rev_minor = (uint16_t)(KVS_WIRE_MINOR + i);
	CHECK(raw_send(conn, &rep, sizeof(rep), NULL, 0) == 0, "admin reply");
	seq = recv_req(conn, &req, sizeof(req), KVS_MSG_STATS);
	memset(&g, 0, sizeof(g));
	g.hdr = (struct kvs_msg_hdr){ KVS_MSG_STATS_GLOBAL, sizeof(g), seq, 0 };
	g.query_ops = 7;
	CHECK(raw_send(conn, &g, sizeof(g), NULL, 0) == 0, "stats global");
	memset(node, 0, sizeof(node));
	memcpy(node, &(struct kvs_msg_hdr){ KVS_MSG_STATS_NODE, sizeof(node), seq, 0 },
	       sizeof(struct kvs_msg_hdr));
	if (raw_send(conn, node, sizeof(node), NULL, 0) < 0 || i == 0)
		goto out; /* our revision: the engine hangs up on it */
	/* A message type of the newer revision, then the end. */
	memset(other, 0, sizeof(other));
	memcpy(other, &(struct kvs_msg_hdr){ 99, sizeof(other), seq, 0 },
	       sizeof(struct kvs_msg_hdr));
	CHECK(raw_send(conn, other, sizeof(other), NULL, 0) == 0, "a newer message type");
	end = (struct kvs_msg_hdr){ KVS_MSG_END, sizeof(end), seq, 0 };
	CHECK(raw_send(conn, &end, sizeof(end), NULL, 0) == 0, "end");
out:
	/* Until the engine closes: a reply sent to a closed socket is not a failure here. */
	while (recv(conn, &req, sizeof(req), 0) > 0)
		;
	close(conn);
	return 0;
}

struct seen {
	unsigned n;
	uint32_t node_size;
	uint64_t query_ops;
};

static int seen_cb(void *arg, const struct kvs_msg_hdr *m)
{
	struct seen *s = arg;

	s->n++;
	if (m->type == KVS_MSG_STATS_NODE)
		s->node_size = m->size;
	else if (m->type == KVS_MSG_STATS_GLOBAL)
		s->query_ops = ((const struct kvs_msg_stats_global *)m)->query_ops;
	else
		s->n += 100; /* not one the library should pass on */
	return 0;
}

static void admin_newer_minor(void)
{
	for (unsigned i = 0; i < 2; i++) {
		struct seen seen = { 0 };
		struct kvs_client *c;
		int r;

		fake_listen();
		fake_spawn(newer_child, i);
		r = engine_connect(KVS_ROLE_ADMIN, WAIT_MS, &c);
		CHECK(r == 0, "admin connect: %s", kvs_strerror(r));
		r = kvs_admin_request(c, KVS_MSG_STATS, seen_cb, &seen);
		if (i == 0) {
			CHECK_RES(r, -EBADMSG,
				  "a longer node message from a daemon of our revision");
		} else {
			CHECK_RES(r, 0, "a longer node message from a newer minor revision");
			CHECK(seen.n == 2 && seen.query_ops == 7 &&
				      seen.node_size == sizeof(struct kvs_msg_stats_node) + 8,
			      "callback saw %u messages, node %u bytes, query_ops %llu", seen.n,
			      seen.node_size, (unsigned long long)seen.query_ops);
		}
		kvs_close(c);
		fake_done();
	}
	it_ok("stats messages longer than known: -EBADMSG from our revision; from a newer minor "
	      "the part we know, unknown types skipped");
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	char dir[64];

	it_watchdog(300);
	snprintf(dir, sizeof(dir), "%s/kvstash-hostile-daemon.XXXXXX", tmp ? tmp : "/tmp");
	CHECK(mkdtemp(dir) != NULL, "mkdtemp %s: %s", dir, strerror(errno));
	snprintf(sock_path, sizeof(sock_path), "%s/kvstash.sock", dir);
	hello_replies();
	rewritten_cqe();
	early_cqe();
	impossible_results();
	flipped_results();
	register_replies();
	admin_replies();
	admin_newer_minor();
	rmdir(dir);
	return 0;
}
