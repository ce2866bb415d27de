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
 *     NOP, INT_MIN, stored + skipped above a SAVE's count, more hits
 *     still being read from SSD than hits, the library's
 *     own KVS_CQE_LOCAL mark) reach the application as -EBADMSG marked
 *     KVS_CQE_LOCAL, with the application's user_data; a plausible one
 *     unchanged; a corrupt CQ tail ends the session with -ECONNRESET;
 *   - cluster sessions (wire minor 1): a region without the answer area
 *     or with one smaller than the CQ, and a daemon of minor 0 (ignoring
 *     or refusing KVS_HELLO_CLUSTER): refused (-EBADMSG, -EOPNOTSUPP); an
 *     area nobody asked for is ignored; cluster answers that lie (5
 *     holders, unterminated names, best above the keys left, holders'
 *     blocks out of order or range, holders with a failure status, an
 *     unknown status, reserved words) and KVS_CQE_CLUSTER where it does
 *     not belong (a NOP, a plain QUERY, a FLUSH, a failed QUERY) or
 *     missing from a cluster QUERY: -EBADMSG (KVS_CQE_LOCAL), no answer;
 *     an honest answer rewritten after the library took it stays what it
 *     was; the sync calls get their own answer while another is kept, and
 *     a reconnect keeps the flag and the kept answers;
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

/* A session region; with a cluster answer area of @ans_bytes when not 0. */
static int make_region_ans(uint32_t sq, uint32_t cq, uint64_t argb, uint32_t sqe_size,
			   uint32_t version, uint64_t ans_bytes, struct shmq_region **ret)
{
	struct shmq_part_spec parts[4] = {
		{ SHMQ_PART_RING, KVS_PART_SQ, sqe_size, sq, 0 },
		{ SHMQ_PART_RING, KVS_PART_CQ, sizeof(struct kvs_cqe), cq, 0 },
		{ SHMQ_PART_AREA, KVS_PART_ARGS, 0, 0, argb },
		{ SHMQ_PART_AREA, KVS_PART_CLUSTER, 0, 0, ans_bytes },
	};

	return shmq_region_create("kvstash-session", KVS_REGION_MAGIC, version, parts,
				  ans_bytes ? 4 : 3, ret);
}

static int make_region(uint32_t sq, uint32_t cq, uint64_t argb, uint32_t sqe_size, uint32_t version,
		       struct shmq_region **ret)
{
	return make_region_ans(sq, cq, argb, sqe_size, version, 0, ret);
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

static int engine_connect_flags(uint32_t role, uint32_t flags, int timeout_ms,
				struct kvs_client **ret)
{
	struct kvs_connect_opts o;

	kvs_connect_opts_init(&o);
	o.role = role;
	o.flags = flags;
	o.instance = "hostile-daemon";
	o.ns = "hostile-daemon/ns";
	o.timeout_ms = timeout_ms;
	return kvs_connect(sock_path, &o, ret);
}

static int engine_connect(uint32_t role, int timeout_ms, struct kvs_client **ret)
{
	return engine_connect_flags(role, 0, timeout_ms, ret);
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
	struct kvs_cqe e;
	int r = test_wait_cqe(c, WAIT_MS, &e);

	CHECK(r == 0, "no completion: %s", kvs_strerror(r));
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
	M_CL_OK,
	M_CL_NO_PART,
	M_CL_PART_SHORT,
	M_CL_OLD_MINOR,
	M_CL_OLD_REFUSES,
	M_CL_NEW_REFUSES,
	M_CL_UNASKED_PART,
};

static const struct hello_case {
	enum mut mut;
	const char *what;
	int want;
	bool cluster; /* connect with KVS_CONNECT_CLUSTER */
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
	{ M_CL_OK, "a good cluster session", 0, true },
	{ M_CL_NO_PART, "a cluster session without the answer area", -EBADMSG, true },
	{ M_CL_PART_SHORT, "an answer area of half the CQ", -EBADMSG, true },
	{ M_CL_OLD_MINOR, "wire minor 0 accepting the flag (an old daemon)", -EOPNOTSUPP, true },
	{ M_CL_OLD_REFUSES, "wire minor 0 refusing the flag with -EINVAL", -EOPNOTSUPP, true },
	{ M_CL_NEW_REFUSES, "wire minor 1 refusing with -EINVAL", -EINVAL, true },
	{ M_CL_UNASKED_PART, "an answer area nobody asked for (ignored)", 0 },
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
	uint64_t argb = ARGB, ans_bytes = 0;
	struct shmq_region *region = NULL;
	struct kvs_msg_hello_reply rep;
	struct kvs_msg_hello h;
	size_t len = sizeof(rep);
	int conn, fds[2], nfds = 1, extra = -1, pipefd[2] = { -1, -1 };
	uint32_t seq;

	(void)arg;
	conn = accept_conn();
	seq = recv_req(conn, &h, sizeof(h), KVS_MSG_HELLO);
	CHECK(h.flags == (hc->cluster ? KVS_HELLO_CLUSTER : 0u), "%s: HELLO flags %x", hc->what,
	      h.flags);
	if (hc->mut == M_SQ_HUGE)
		sq = 1u << 20, cq = 1u << 21;
	if (hc->mut == M_CQ_BELOW_2SQ)
		cq = sq;
	if (hc->mut == M_SQE_8_BYTES)
		sqe_size = 8;
	if (hc->mut == M_REGION_VERSION)
		version = 2;
	if (hc->mut == M_CL_OK || hc->mut == M_CL_UNASKED_PART || hc->mut == M_CL_PART_SHORT)
		ans_bytes = (uint64_t)cq * sizeof(struct kvs_cluster_answer) /
			    (hc->mut == M_CL_PART_SHORT ? 2 : 1);
	CHECK(make_region_ans(sq, cq, argb, sqe_size, version, ans_bytes, &region) == 0, "region");
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
	case M_CL_OLD_MINOR:
		rep.r.rev_minor = 0;
		break;
	case M_CL_OLD_REFUSES:
	case M_CL_NEW_REFUSES:
		rep.r.hdr.type = KVS_MSG_REPLY;
		rep.r.status = -EINVAL;
		rep.r.rev_minor = hc->mut == M_CL_OLD_REFUSES ? 0 : 1;
		snprintf(rep.r.text, sizeof(rep.r.text), "unknown HELLO flags");
		len = sizeof(rep.r);
		rep.r.hdr.size = (uint32_t)len;
		nfds = 0;
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
		r = engine_connect_flags(admin ? KVS_ROLE_ADMIN : KVS_ROLE_WORKER,
					 hc->cluster ? KVS_CONNECT_CLUSTER : 0,
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
	{ KVS_OP_QUERY, 4, 2, 3u << KVS_CQE_PENDING_SHIFT, 1, 0, -EBADMSG, KVS_CQE_LOCAL,
	  "3 of 2 hits still being read from SSD" },
	{ KVS_OP_QUERY, 4, 3, 3u << KVS_CQE_PENDING_SHIFT, 1, 0, 3, 3u << KVS_CQE_PENDING_SHIFT,
	  "3 of 3 hits still being read from SSD" },
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

/* ---- cluster answers ---------------------------------------------------- */

/* A cluster session (KVS_HELLO_CLUSTER asked and given): the rings and the answer area. */
static void fake_cluster_session(struct fake *f, struct kvs_cluster_answer **ret_ans)
{
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	uint64_t size;
	uint32_t seq;
	void *a;
	int fd;

	f->conn = accept_conn();
	seq = recv_req(f->conn, &h, sizeof(h), KVS_MSG_HELLO);
	CHECK(h.flags == KVS_HELLO_CLUSTER, "fake daemon: HELLO flags %x", h.flags);
	CHECK(make_region_ans(SQ, CQ, ARGB, sizeof(struct kvs_sqe), KVS_REGION_VERSION,
			      CQ * sizeof(struct kvs_cluster_answer), &f->region) == 0,
	      "region");
	CHECK(shmq_ring_init(&f->sq, f->region, KVS_PART_SQ, SHMQ_CONSUMER) == 0 &&
		      shmq_ring_init(&f->cq, f->region, KVS_PART_CQ, SHMQ_PRODUCER) == 0 &&
		      shmq_region_area(f->region, KVS_PART_CLUSTER, &a, &size) == 0,
	      "rings, answers");
	*ret_ans = a;
	good_reply(&rep, seq, f->region, SQ, CQ, ARGB);
	fd = shmq_region_fd(f->region);
	CHECK(raw_send(f->conn, &rep, sizeof(rep), &fd, 1) == 0, "send the HELLO reply");
}

/* Publish @e with @a (NULL: none) at its ring index, the answer first, as kvstashd does. */
static struct kvs_cluster_answer *post_cluster(struct fake *f, struct kvs_cluster_answer *area,
					       const struct kvs_cqe *e,
					       const struct kvs_cluster_answer *a)
{
	uint32_t idx;

	CHECK(shmq_prod_reserve(&f->cq, 1, &idx) == 1, "fake daemon: CQ full");
	if (a)
		area[idx & (CQ - 1)] = *a;
	memcpy(shmq_ring_entry(&f->cq, idx), e, sizeof(*e));
	shmq_prod_commit(&f->cq, 0);
	return &area[idx & (CQ - 1)];
}

/* An honest answer to a QUERY of 4 keys with 1 local hit: 2 more at b, 1 at c. */
static struct kvs_cluster_answer good_answer(void)
{
	struct kvs_cluster_answer a;

	memset(&a, 0, sizeof(a));
	a.best = 2;
	a.nr_holders = 2;
	a.round_trips = 1;
	snprintf(a.holders[0].node, sizeof(a.holders[0].node), "node-b");
	snprintf(a.holders[0].addr, sizeof(a.holders[0].addr), "10.0.0.2:7000");
	a.holders[0].epoch = 3;
	a.holders[0].blocks = 2;
	snprintf(a.holders[1].node, sizeof(a.holders[1].node), "node-c");
	a.holders[1].epoch = 9;
	a.holders[1].blocks = 1;
	return a;
}

enum ans_mut {
	A_GOOD,
	A_HOLDERS_5,
	A_NODE_UNTERMINATED,
	A_ADDR_UNTERMINATED,
	A_BEST_OVER,
	A_BLOCKS_0,
	A_HEAD_NOT_BEST,
	A_ASCENDING,
	A_NOTCONN_HOLDERS,
	A_NOTCONN,
	A_STATUS_EIO,
	A_RESV,
	A_HOLDER_RESV,
	A_BEST_NO_HOLDER,
	A_ALL_LOCAL,
	A_NO_FLAG,
	A_REFUSED,
	A_REFUSED_FLAG,
	A_ON_NOP,
	A_ON_PLAIN_QUERY,
	A_ON_FLUSH,
};

static const struct ans_case {
	enum ans_mut mut;
	int32_t res;	  /* of a QUERY of 4 keys */
	uint32_t flags;	  /* of the CQE */
	int32_t want;	  /* what the application sees */
	bool want_answer; /* kvs_cqe_cluster() gives one */
	const char *what;
} acases[] = {
	{ A_GOOD, 1, KVS_CQE_CLUSTER, 1, true, "an honest answer (rewritten once taken)" },
	{ A_HOLDERS_5, 1, KVS_CQE_CLUSTER, -EBADMSG, false, "nr_holders 5" },
	{ A_NODE_UNTERMINATED, 1, KVS_CQE_CLUSTER, -EBADMSG, false, "a node name without NUL" },
	{ A_ADDR_UNTERMINATED, 1, KVS_CQE_CLUSTER, -EBADMSG, false, "an address without NUL" },
	{ A_BEST_OVER, 2, KVS_CQE_CLUSTER, -EBADMSG, false, "best 3 > 4 keys - 2 hits" },
	{ A_BLOCKS_0, 1, KVS_CQE_CLUSTER, -EBADMSG, false, "a holder of 0 blocks" },
	{ A_HEAD_NOT_BEST, 1, KVS_CQE_CLUSTER, -EBADMSG, false,
	  "the first holder's blocks < best" },
	{ A_ASCENDING, 1, KVS_CQE_CLUSTER, -EBADMSG, false, "holders by blocks ascending" },
	{ A_NOTCONN_HOLDERS, 1, KVS_CQE_CLUSTER, -EBADMSG, false, "-ENOTCONN with holders" },
	{ A_NOTCONN, 1, KVS_CQE_CLUSTER, 1, true, "-ENOTCONN, local hits only" },
	{ A_STATUS_EIO, 1, KVS_CQE_CLUSTER, -EBADMSG, false, "status -EIO" },
	{ A_RESV, 1, KVS_CQE_CLUSTER, -EBADMSG, false, "a reserved word set" },
	{ A_HOLDER_RESV, 1, KVS_CQE_CLUSTER, -EBADMSG, false, "a holder's reserved word set" },
	{ A_BEST_NO_HOLDER, 1, KVS_CQE_CLUSTER, -EBADMSG, false, "best 2 with no holder" },
	{ A_ALL_LOCAL, 4, KVS_CQE_CLUSTER, 4, true, "every key a local hit, nothing asked" },
	{ A_NO_FLAG, 1, 0, -EBADMSG, false, "a cluster QUERY's CQE without KVS_CQE_CLUSTER" },
	{ A_REFUSED, -EOPNOTSUPP, 0, -EOPNOTSUPP, false, "a refused cluster QUERY" },
	{ A_REFUSED_FLAG, -EOPNOTSUPP, KVS_CQE_CLUSTER, -EBADMSG, false,
	  "a refused cluster QUERY with KVS_CQE_CLUSTER" },
	{ A_ON_NOP, 0, KVS_CQE_CLUSTER, -EBADMSG, false, "KVS_CQE_CLUSTER on a NOP" },
	{ A_ON_PLAIN_QUERY, 1, KVS_CQE_CLUSTER, -EBADMSG, false,
	  "KVS_CQE_CLUSTER on a QUERY without KVS_QUERY_CLUSTER" },
	{ A_ON_FLUSH, 0, KVS_CQE_CLUSTER, -EBADMSG, false, "KVS_CQE_CLUSTER on a cluster FLUSH" },
};

#define NACASES (sizeof(acases) / sizeof(acases[0]))

static struct kvs_cluster_answer mutated_answer(enum ans_mut m)
{
	struct kvs_cluster_answer a = good_answer();

	switch (m) {
	case A_HOLDERS_5:
		a.nr_holders = 5;
		a.holders[2] = a.holders[3] = a.holders[1];
		break;
	case A_NODE_UNTERMINATED:
		memset(a.holders[1].node, 'n', sizeof(a.holders[1].node));
		break;
	case A_ADDR_UNTERMINATED:
		memset(a.holders[0].addr, 'a', sizeof(a.holders[0].addr));
		break;
	case A_BEST_OVER:
		a.best = 3;
		a.holders[0].blocks = 3;
		break;
	case A_BLOCKS_0:
		a.holders[1].blocks = 0;
		break;
	case A_HEAD_NOT_BEST:
		a.holders[0].blocks = 1;
		break;
	case A_ASCENDING:
		a.best = 3;
		a.holders[0].blocks = 1;
		a.holders[1].blocks = 3;
		break;
	case A_NOTCONN_HOLDERS:
		a.status = -ENOTCONN;
		break;
	case A_NOTCONN:
	case A_ALL_LOCAL:
		memset(&a, 0, sizeof(a));
		a.status = m == A_NOTCONN ? -ENOTCONN : 0;
		/* Past nr_holders: junk the library must not hand on. */
		memset(a.holders, 'j', sizeof(a.holders));
		break;
	case A_STATUS_EIO:
		memset(&a, 0, sizeof(a));
		a.status = -EIO;
		break;
	case A_RESV:
		a.resv[1] = 1;
		break;
	case A_HOLDER_RESV:
		a.holders[1].resv0 = 1;
		break;
	case A_BEST_NO_HOLDER:
		a.nr_holders = 0;
		break;
	default:
		break;
	}
	return a;
}

static int answers_child(void *arg, unsigned i)
{
	struct kvs_cluster_answer *area;
	struct fake f;

	(void)arg;
	(void)i;
	fake_cluster_session(&f, &area);
	for (unsigned k = 0; k < NACASES; k++) {
		const struct ans_case *ac = &acases[k];
		struct kvs_sqe sqe = take_sqe(&f);
		struct kvs_cqe e = { sqe.user_data, ac->res, ac->flags, 0, 0 };
		struct kvs_cluster_answer a = mutated_answer(ac->mut), *slot;

		if (ac->res >= 0 && sqe.opcode == KVS_OP_QUERY)
			e.result0 = 77; /* the lease */
		slot = post_cluster(&f, area, &e, &a);
		if (ac->mut == A_GOOD) {
			/* The engine holds the CQE now: an answer kvstashd lies in afterwards. */
			ctl_wait(ctl[1], W_PEEKED);
			memset(slot, 0xff, sizeof(*slot));
			ctl_send(ctl[1], W_REWRITTEN);
		}
	}
	return fake_end(&f);
}

static void check_answer(const struct kvs_cluster_answer *got,
			 const struct kvs_cluster_answer *want, const char *what)
{
	CHECK(got->status == want->status && got->best == want->best &&
		      got->nr_holders == want->nr_holders,
	      "%s: status %d best %u holders %u", what, got->status, got->best, got->nr_holders);
	for (uint32_t h = 0; h < KVS_CLUSTER_HOLDERS; h++) {
		struct kvs_cluster_holder none = { { 0 } };
		const struct kvs_cluster_holder *w =
			h < want->nr_holders ? &want->holders[h] : &none;

		CHECK(memcmp(&got->holders[h], w, sizeof(*w)) == 0, "%s: holder %u differs", what,
		      h);
	}
}

static void cluster_answers(void)
{
	uint8_t keys[4 * KVS_KEY_SIZE] = { 1 };
	struct kvs_cluster_answer ans;
	struct kvs_client *c;
	int r;

	fake_listen();
	fake_spawn(answers_child, 0);
	r = engine_connect_flags(KVS_ROLE_WORKER, KVS_CONNECT_CLUSTER, WAIT_MS, &c);
	CHECK(r == 0, "cluster connect to the fake daemon: %s", kvs_strerror(r));
	for (unsigned k = 0; k < NACASES; k++) {
		const struct ans_case *ac = &acases[k];
		struct kvs_sqe *sqe = kvs_get_sqe(c);
		uint64_t ud = 2000 + k;
		struct kvs_cqe *p, e;

		CHECK(sqe != NULL, "no SQE");
		if (ac->mut == A_ON_NOP)
			r = kvs_prep_nop(c, sqe, ud);
		else if (ac->mut == A_ON_FLUSH)
			r = kvs_prep_flush(c, sqe, KVS_FLUSH_CLUSTER, ud);
		else
			r = kvs_prep_query(c, sqe, keys, 4, 1,
					   ac->mut == A_ON_PLAIN_QUERY ? 0 : KVS_QUERY_CLUSTER, ud);
		CHECK(r == 0 && kvs_submit(c) == 1, "prep %s", ac->what);
		r = kvs_wait_cqe(c, &p, WAIT_MS);
		CHECK(r == 0, "%s: no completion: %s", ac->what, kvs_strerror(r));
		e = *p;
		CHECK(e.user_data == ud, "%s: user_data %llu", ac->what,
		      (unsigned long long)e.user_data);
		CHECK_RES(e.res, ac->want, ac->what);
		if (ac->want == -EBADMSG)
			CHECK(e.flags == KVS_CQE_LOCAL && e.result0 == 0,
			      "%s: flags %x results %llu", ac->what, e.flags,
			      (unsigned long long)e.result0);
		if (ac->mut == A_GOOD) {
			ctl_send(ctl[0], W_PEEKED);
			ctl_wait(ctl[0], W_REWRITTEN);
		}
		memset(&ans, 0x5a, sizeof(ans));
		r = kvs_cqe_cluster(c, p, &ans);
		if (ac->want_answer) {
			struct kvs_cluster_answer want = mutated_answer(ac->mut);

			CHECK(r == 0, "%s: kvs_cqe_cluster: %s", ac->what, kvs_strerror(r));
			CHECK(e.flags == KVS_CQE_CLUSTER && e.result0 == 77,
			      "%s: flags %x lease %llu", ac->what, e.flags,
			      (unsigned long long)e.result0);
			if (ac->mut != A_GOOD)
				want.nr_holders = 0;
			check_answer(&ans, &want, ac->what);
		} else {
			CHECK_RES(r, -ENOENT, ac->what);
			CHECK(ans.best == 0x5a5a5a5au, "%s: the answer was written", ac->what);
		}
		CHECK_RES(kvs_cqe_cluster(c, NULL, &ans), -EINVAL, "a NULL CQE");
		CHECK_RES(kvs_cqe_cluster(c, &e, &ans), -EINVAL, "a CQE not the library's");
		kvs_cqe_seen(c, p);
		CHECK_RES(kvs_cqe_cluster(c, p, &ans), -EINVAL, "a CQE already seen");
	}
	CHECK(kvs_pending(c) == 0, "%u pending", kvs_pending(c));
	kvs_close(c);
	fake_done();
	it_ok("%zu cluster answers: the honest ones copied as they were when taken, every "
	      "malformed or misplaced one -EBADMSG (KVS_CQE_LOCAL) with no answer",
	      NACASES);
}

/* A cluster QUERY, 3 of 4 keys elsewhere (answer @best at one holder). */
static struct kvs_cluster_answer one_holder(uint32_t best, const char *node)
{
	struct kvs_cluster_answer a;

	memset(&a, 0, sizeof(a));
	a.best = best;
	a.nr_holders = 1;
	snprintf(a.holders[0].node, sizeof(a.holders[0].node), "%s", node);
	a.holders[0].blocks = best;
	return a;
}

static int sync_child(void *arg, unsigned i)
{
	struct kvs_cluster_answer *area, a;
	struct kvs_sqe q1, q2, fl;
	struct kvs_cqe e;
	struct fake f;

	(void)arg;
	(void)i;
	fake_cluster_session(&f, &area);
	/* An async cluster QUERY, then a sync one: both answered, the async one first. */
	q1 = take_sqe(&f);
	q2 = take_sqe(&f);
	CHECK(q1.opcode == KVS_OP_QUERY && q1.flags == KVS_QUERY_CLUSTER &&
		      q2.opcode == KVS_OP_QUERY &&
		      q2.flags == (KVS_QUERY_CLUSTER | KVS_QUERY_NOLEASE),
	      "fake daemon: QUERY flags %x, %x", q1.flags, q2.flags);
	e = (struct kvs_cqe){ q1.user_data, 1, KVS_CQE_CLUSTER, 5, 0 };
	a = one_holder(3, "async");
	post_cluster(&f, area, &e, &a);
	e = (struct kvs_cqe){ q2.user_data, 2, KVS_CQE_CLUSTER, 6, 0 };
	a = one_holder(2, "sync");
	post_cluster(&f, area, &e, &a);
	/* Cluster FLUSHes: done, past the deadline, refused. */
	fl = take_sqe(&f);
	CHECK(fl.opcode == KVS_OP_FLUSH && fl.flags == (KVS_FLUSH_CLUSTER | KVS_FLUSH_INSTANCE),
	      "fake daemon: FLUSH flags %x", fl.flags);
	post(&f, &(struct kvs_cqe){ fl.user_data, 0, 0, 7, 2 });
	fl = take_sqe(&f);
	post(&f, &(struct kvs_cqe){ fl.user_data, -ETIMEDOUT, 0, 3, 4 });
	fl = take_sqe(&f);
	post(&f, &(struct kvs_cqe){ fl.user_data, -EOPNOTSUPP, 0, 0, 0 });
	/* A cluster QUERY answered, then the engine reconnects before it reaps it. */
	q1 = take_sqe(&f);
	e = (struct kvs_cqe){ q1.user_data, 0, KVS_CQE_CLUSTER, 8, 0 };
	a = one_holder(4, "kept");
	post_cluster(&f, area, &e, &a);
	ctl_send(ctl[1], W_POSTED);
	fake_end(&f);
	/* The new session asks for the answer area again. */
	fake_cluster_session(&f, &area);
	q1 = take_sqe(&f);
	e = (struct kvs_cqe){ q1.user_data, 0, KVS_CQE_CLUSTER, 9, 0 };
	a = one_holder(1, "again");
	post_cluster(&f, area, &e, &a);
	return fake_end(&f);
}

static void cluster_sync(void)
{
	uint8_t keys[4 * KVS_KEY_SIZE] = { 2 };
	struct kvs_cluster_answer ans, want;
	uint64_t lease = 0, reg, drop;
	struct kvs_client *c;
	struct kvs_sqe *sqe;
	struct kvs_cqe *p;
	int r;

	fake_listen();
	fake_spawn(sync_child, 0);
	r = engine_connect_flags(KVS_ROLE_WORKER, KVS_CONNECT_CLUSTER, WAIT_MS, &c);
	CHECK(r == 0, "cluster connect to the fake daemon: %s", kvs_strerror(r));
	sqe = kvs_get_sqe(c);
	CHECK(sqe && kvs_prep_query(c, sqe, keys, 4, 1, KVS_QUERY_CLUSTER, 31) == 0 &&
		      kvs_submit(c) == 1,
	      "async cluster QUERY");
	r = kvs_query_cluster_sync(c, keys, 4, 2, KVS_QUERY_NOLEASE, WAIT_MS, &lease, &ans);
	CHECK_RES(r, 2, "sync cluster QUERY");
	want = one_holder(2, "sync");
	CHECK(lease == 6, "lease %llu", (unsigned long long)lease);
	check_answer(&ans, &want, "the sync QUERY's own answer");
	/* The async one was kept meanwhile, with its own answer. */
	CHECK(kvs_peek_cqe(c, &p) == 0 && p->user_data == 31 && p->res == 1, "the kept QUERY");
	CHECK_RES(kvs_cqe_cluster(c, p, &ans), 0, "the kept QUERY's answer");
	want = one_holder(3, "async");
	check_answer(&ans, &want, "the kept QUERY's answer");
	kvs_cqe_seen(c, p);

	reg = drop = 99;
	CHECK_RES(kvs_flush_cluster_sync(c, KVS_FLUSH_INSTANCE, WAIT_MS, &reg, &drop), 0,
		  "cluster FLUSH");
	CHECK(reg == 7 && drop == 2, "registered %llu dropped %llu", (unsigned long long)reg,
	      (unsigned long long)drop);
	CHECK_RES(kvs_flush_cluster_sync(c, 0, WAIT_MS, &reg, &drop), -ETIMEDOUT,
		  "cluster FLUSH past its deadline");
	CHECK(reg == 3 && drop == 4, "registered %llu dropped %llu after -ETIMEDOUT",
	      (unsigned long long)reg, (unsigned long long)drop);
	CHECK_RES(kvs_flush_cluster_sync(c, 0, WAIT_MS, &reg, &drop), -EOPNOTSUPP,
		  "cluster FLUSH refused");
	CHECK(reg == 3 && drop == 4, "outputs written on -EOPNOTSUPP");

	/* Kept across kvs_reconnect(): the completion and its answer; the flag too. */
	sqe = kvs_get_sqe(c);
	CHECK(sqe && kvs_prep_query(c, sqe, keys, 4, 3, KVS_QUERY_CLUSTER, 41) == 0 &&
		      kvs_submit(c) == 1,
	      "cluster QUERY before the reconnect");
	ctl_wait(ctl[0], W_POSTED);
	CHECK_RES(kvs_reconnect(c), 0, "reconnect");
	CHECK(kvs_peek_cqe(c, &p) == 0 && p->user_data == 41 && p->res == 0, "the kept QUERY");
	CHECK_RES(kvs_cqe_cluster(c, p, &ans), 0, "the kept QUERY's answer");
	want = one_holder(4, "kept");
	check_answer(&ans, &want, "the answer kept across the reconnect");
	kvs_cqe_seen(c, p);
	memset(&ans, 0, sizeof(ans));
	CHECK_RES(kvs_query_cluster_sync(c, keys, 4, 4, 0, WAIT_MS, &lease, &ans), 0,
		  "cluster QUERY after the reconnect");
	want = one_holder(1, "again");
	check_answer(&ans, &want, "the answer after the reconnect");
	CHECK(kvs_pending(c) == 0, "%u pending", kvs_pending(c));
	kvs_close(c);
	fake_done();
	it_ok("the cluster sync calls: their own answer and results while another cluster "
	      "completion is kept with its answer; a reconnect keeps the flag and kept answers");
}

/* What the library refuses before anything reaches a daemon. */
static int plain_child(void *arg, unsigned i)
{
	struct fake f;

	(void)arg;
	(void)i;
	fake_session(&f, CQ);
	return fake_end(&f);
}

static void cluster_refusals(void)
{
	uint8_t keys[KVS_KEY_SIZE] = { 3 };
	struct kvs_client *c = NULL;
	struct kvs_sqe *sqe;

	CHECK_RES(engine_connect_flags(KVS_ROLE_WORKER, 1u << 2, WAIT_MS, &c), -EINVAL,
		  "an unknown connect flag");
	CHECK_RES(engine_connect_flags(KVS_ROLE_ADMIN, KVS_CONNECT_CLUSTER, WAIT_MS, &c), -EINVAL,
		  "KVS_CONNECT_CLUSTER for an admin session");
	CHECK(c == NULL, "the client was set on failure");
	fake_listen();
	fake_spawn(plain_child, 0);
	c = engine_session();
	sqe = kvs_get_sqe(c);
	CHECK(sqe != NULL, "no SQE");
	CHECK_RES(kvs_prep_query(c, sqe, keys, 1, 1, KVS_QUERY_CLUSTER, 1), -EINVAL,
		  "KVS_QUERY_CLUSTER without KVS_CONNECT_CLUSTER");
	CHECK(kvs_pending(c) == 0, "%u pending after the refused prep", kvs_pending(c));
	CHECK_RES(kvs_query_cluster_sync(c, keys, 1, 1, 0, WAIT_MS, NULL, NULL), -EINVAL,
		  "kvs_query_cluster_sync without KVS_CONNECT_CLUSTER");
	CHECK(kvs_pending(c) == 0, "%u pending after the refused sync call", kvs_pending(c));
	kvs_close(c);
	fake_done();
	it_ok("unknown connect flags, the cluster for an admin session and a cluster QUERY on "
	      "a session without it: -EINVAL, nothing submitted");
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

/*
 * STATS from a daemon of minor 4, whose registry message was 320 bytes:
 * @i 0 sends that (taken, the newer fields zero), 1 one byte short of it,
 * 2 one byte over (neither size that revision had: -EBADMSG).
 */
static int older_child(void *arg, unsigned i)
{
	static const uint32_t size[] = { 320, 319, 321 };
	struct kvs_msg_hello_reply rep;
	struct kvs_msg_hello h;
	struct kvs_msg_hdr req, end;
	uint8_t reg[sizeof(struct kvs_msg_stats_registry)];
	int conn;
	uint32_t seq;

	(void)arg;
	conn = accept_conn();
	seq = recv_req(conn, &h, sizeof(h), KVS_MSG_HELLO);
	good_reply(&rep, seq, NULL, 0, 0, 0);
	rep.r.rev_minor = 4;
	CHECK(raw_send(conn, &rep, sizeof(rep), NULL, 0) == 0, "admin reply");
	seq = recv_req(conn, &req, sizeof(req), KVS_MSG_STATS);
	/* Garbage where the newer fields would be: they must not be read. */
	memset(reg, 0x41, sizeof(reg));
	memset(reg, 0, 320 < size[i] ? 320 : size[i]);
	memcpy(reg, &(struct kvs_msg_hdr){ KVS_MSG_STATS_REGISTRY, size[i], seq, 0 },
	       sizeof(struct kvs_msg_hdr));
	((struct kvs_msg_stats_registry *)reg)->flushes = 5;
	if (raw_send(conn, reg, size[i], NULL, 0) < 0 || i)
		goto out;
	end = (struct kvs_msg_hdr){ KVS_MSG_END, sizeof(end), seq, 0 };
	CHECK(raw_send(conn, &end, sizeof(end), NULL, 0) == 0, "end");
out:
	while (recv(conn, &req, sizeof(req), 0) > 0)
		;
	close(conn);
	return 0;
}

static int older_cb(void *arg, const struct kvs_msg_hdr *m)
{
	struct kvs_msg_stats_registry *out = arg;

	if (m->type == KVS_MSG_STATS_REGISTRY && m->size == sizeof(*out))
		memcpy(out, m, sizeof(*out));
	return 0;
}

static void admin_older_minor(void)
{
	for (unsigned i = 0; i < 3; i++) {
		struct kvs_msg_stats_registry reg = { 0 };
		struct kvs_client *c;
		int r;

		fake_listen();
		fake_spawn(older_child, i);
		r = engine_connect(KVS_ROLE_ADMIN, WAIT_MS, &c);
		CHECK(r == 0, "admin connect: %s", kvs_strerror(r));
		r = kvs_admin_request(c, KVS_MSG_STATS, older_cb, &reg);
		if (i == 0) {
			CHECK_RES(r, 0, "a minor-4 registry message of 320 bytes");
			CHECK(reg.flushes == 5 && reg.master[0] == 0 && reg.incarnation[0] == 0 &&
				      reg.failovers == 0,
			      "the minor-4 message: flushes %llu, master '%.8s', failovers %llu",
			      (unsigned long long)reg.flushes, reg.master,
			      (unsigned long long)reg.failovers);
		} else {
			CHECK_RES(r, -EBADMSG, "a minor-4 registry message of neither size");
		}
		kvs_close(c);
		fake_done();
	}
	it_ok("an older daemon's shorter registry message: taken, the newer fields zero; any "
	      "other size refused");
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
	cluster_answers();
	cluster_sync();
	cluster_refusals();
	flipped_results();
	register_replies();
	admin_replies();
	admin_newer_minor();
	admin_older_minor();
	rmdir(dir);
	return 0;
}
