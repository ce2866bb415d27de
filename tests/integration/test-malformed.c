/* SPDX-License-Identifier: MIT */
/*
 * Malformed input: raw sockets send every kind of broken message; the
 * daemon answers with an error where it can, ends only the offending
 * session (or, for a refused registration, keeps it), leaks no fd, and a
 * well-behaved session opened before keeps working throughout.  Then the
 * same at the ring level: a client that corrupts its SQ indices loses its
 * session; unknown opcodes get -EOPNOTSUPP.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <shmq/shmq.h>

#include "itest.h"

#define NS "mal/bf16"
#define ANY_ERROR 1   /* want: some -errno, which one depends on the bytes */
#define NO_REPLY 2    /* want: the daemon just closes */

static struct kvsd d;

static void start(void)
{
	it_start(&d, "[session]\nmax_layers = 8\n");
}

static void stop(void)
{
	it_stop(&d);
}

/* ---- messages ------------------------------------------------------ */

enum pre {
	PRE_NONE,   /* a fresh connection */
	PRE_WORKER, /* after a good worker HELLO */
	PRE_ADMIN,  /* after a good admin HELLO */
};

struct pkt {
	uint8_t buf[140000];
	size_t len;
	int fds[80];
	unsigned nfds;
};

/* A memfd the daemon must close again: its name is counted at the end. */
static int junk_fd(void)
{
	int fd = memfd_create("kvstash-junk", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	CHECK_INT(fd, >=, 0);
	CHECK_INT(ftruncate(fd, 1 << 16), ==, 0);
	CHECK_INT(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), ==, 0);
	return fd;
}

static void hdr(struct pkt *p, uint32_t type, size_t len)
{
	struct kvs_msg_hdr h = { .type = type, .size = (uint32_t)len, .seq = 9 };

	memset(p->buf, 0, len);
	memcpy(p->buf, &h, sizeof(h));
	p->len = len;
}

static struct kvs_msg_hello *hello(struct pkt *p)
{
	struct kvs_msg_hello *h = (void *)p->buf;

	raw_hello_init(h, KVS_ROLE_WORKER, "mal-raw", NS, 0, 1);
	h->hdr.seq = 9;
	p->len = sizeof(*h);
	return h;
}

/* REGISTER with @nm host memories and @nl page-first layers over 64 KiB. */
static struct kvs_msg_register *reg(struct pkt *p, unsigned nm, unsigned nl)
{
	size_t len = sizeof(struct kvs_msg_register) + nm * sizeof(struct kvs_wire_mem) +
		     nl * sizeof(struct kvs_wire_layer);
	struct kvs_msg_register *m = (void *)p->buf;
	struct kvs_wire_mem *wm = (void *)(m + 1);
	struct kvs_wire_layer *wl = (void *)(wm + nm);

	hdr(p, KVS_MSG_REGISTER, len);
	m->nr_mems = nm;
	m->nr_layers = nl;
	for (unsigned i = 0; i < nm; i++) {
		wm[i].kind = KVS_MEM_HOST_FD;
		wm[i].fd_index = i;
		wm[i].size = 1 << 16;
		p->fds[p->nfds++] = junk_fd();
	}
	for (unsigned i = 0; i < nl; i++) {
		snprintf(wl[i].name, sizeof(wl[i].name), "l%u", i);
		wl[i].mem_index = i < nm ? i : 0;
		wl[i].segments = 1;
		wl[i].offset = (i < nm ? 0 : i) * 1024;
		wl[i].num_blocks = 8;
		wl[i].segment_bytes = 1024;
		wl[i].block_stride = 8192;
	}
	return m;
}

static struct kvs_wire_mem *reg_mem(struct pkt *p, unsigned i)
{
	return (struct kvs_wire_mem *)(p->buf + sizeof(struct kvs_msg_register)) + i;
}

static struct kvs_wire_layer *reg_layer(struct pkt *p, unsigned nm, unsigned i)
{
	return (struct kvs_wire_layer *)(p->buf + sizeof(struct kvs_msg_register) +
					 nm * sizeof(struct kvs_wire_mem)) + i;
}

/* Builders, one per row. */
static void b_short(struct pkt *p) { hdr(p, KVS_MSG_HELLO, 16); p->len = 8; }
static void b_empty(struct pkt *p) { p->len = 0; }
static void b_size_big(struct pkt *p) { hdr(p, KVS_MSG_STATUS, 16); ((uint32_t *)p->buf)[1] = 64; }
static void b_size_small(struct pkt *p)
{
	hdr(p, KVS_MSG_STATUS, 32);
	((uint32_t *)p->buf)[1] = 16;
}
static void b_hdr_flags(struct pkt *p) { hello(p)->hdr.flags = 1; }
static void b_oversized(struct pkt *p) { hdr(p, KVS_MSG_REGISTER, 140000); }
static void b_unknown(struct pkt *p) { hdr(p, 99, 16); }
static void b_reply_type(struct pkt *p)
{
	hdr(p, KVS_MSG_HELLO_REPLY, sizeof(struct kvs_msg_hello_reply));
}
static void b_register(struct pkt *p) { reg(p, 1, 1); }
static void b_status(struct pkt *p) { hdr(p, KVS_MSG_STATUS, 16); }
static void b_hello(struct pkt *p) { hello(p); }
static void b_hello_short(struct pkt *p) { hello(p)->hdr.size = 100; p->len = 100; }
static void b_hello_newer(struct pkt *p)
{
	/* A newer minor appends fields: the daemon reads its own and ignores the rest. */
	hello(p)->rev_minor = KVS_WIRE_MINOR + 1;
	p->len = sizeof(struct kvs_msg_hello) + 64;
	((struct kvs_msg_hdr *)p->buf)->size = (uint32_t)p->len;
	memset(p->buf + sizeof(struct kvs_msg_hello), 0xab, 64);
	snprintf(((struct kvs_msg_hello *)p->buf)->instance, KVS_NAME_MAX, "mal-newer");
}
static void b_inst_unterminated(struct pkt *p) { memset(hello(p)->instance, 'a', KVS_NAME_MAX); }
static void b_ns_unterminated(struct pkt *p) { memset(hello(p)->ns, 'n', KVS_NS_MAX); }
static void b_inst_empty(struct pkt *p) { hello(p)->instance[0] = '\0'; }
static void b_inst_chars(struct pkt *p) { snprintf(hello(p)->instance, KVS_NAME_MAX, "a b\n"); }
static void b_role_zero(struct pkt *p) { hello(p)->role = 0; }
static void b_role_bad(struct pkt *p) { hello(p)->role = 99; }
static void b_rank(struct pkt *p)
{
	struct kvs_msg_hello *h = hello(p);

	h->tp_rank = 2;
	h->tp_size = h->world_size = 2;
}
static void b_tp_zero(struct pkt *p)
{
	struct kvs_msg_hello *h = hello(p);

	h->tp_size = h->world_size = 0;
}
static void b_world(struct pkt *p) { hello(p)->world_size = 3; }
/* Past KVS_HELLO_CLUSTER. */
static void b_flags(struct pkt *p)
{
	hello(p)->flags = 4; /* past KVS_HELLO_FENCES */
}
static void b_resv0(struct pkt *p) { hello(p)->resv0 = 1; }
static void b_resv(struct pkt *p) { hello(p)->resv[3] = 1; }
static void b_device(struct pkt *p) { hello(p)->device_kind = 7; }
static void b_host_uuid(struct pkt *p) { hello(p)->device_uuid[5] = 1; }
static void b_hello_fd(struct pkt *p) { hello(p); p->fds[p->nfds++] = junk_fd(); }
static void b_unreg_payload(struct pkt *p) { hdr(p, KVS_MSG_UNREGISTER, 24); }
static void b_bye_payload(struct pkt *p) { hdr(p, KVS_MSG_GOODBYE, 20); }
static void b_unreg_fd(struct pkt *p)
{
	hdr(p, KVS_MSG_UNREGISTER, 16);
	p->fds[p->nfds++] = junk_fd();
}
static void b_reg_short(struct pkt *p) { reg(p, 1, 1); ((uint32_t *)p->buf)[1] = 20; p->len = 20; }
static void b_reg_zero_layers(struct pkt *p) { reg(p, 1, 1)->nr_layers = 0; }
static void b_reg_zero_mems(struct pkt *p) { reg(p, 1, 1)->nr_mems = 0; }
static void b_reg_counts_big(struct pkt *p) { reg(p, 1, 2)->nr_layers = 3; }
static void b_reg_counts_small(struct pkt *p) { reg(p, 1, 2)->nr_layers = 1; }
static void b_reg_counts_huge(struct pkt *p) { reg(p, 1, 1)->nr_mems = 0xffffffffu; }
static void b_reg_layers_huge(struct pkt *p) { reg(p, 1, 1)->nr_layers = 0x80000000u; }
static void b_reg_resv(struct pkt *p) { reg(p, 1, 1)->resv0 = 1; }
static void b_reg_flags(struct pkt *p) { reg(p, 1, 1)->flags = 0x80; }
static void b_reg_mem_resv(struct pkt *p) { reg(p, 1, 1); reg_mem(p, 0)->resv[1] = 1; }
static void b_reg_mem_kind(struct pkt *p) { reg(p, 1, 1); reg_mem(p, 0)->kind = 77; }
static void b_reg_mem_size0(struct pkt *p) { reg(p, 1, 1); reg_mem(p, 0)->size = 0; }
static void b_reg_missing_fd(struct pkt *p)
{
	reg(p, 1, 1);
	close(p->fds[0]);
	p->nfds = 0;
}
static void b_reg_extra_fd(struct pkt *p) { reg(p, 1, 1); p->fds[p->nfds++] = junk_fd(); }
static void b_reg_fd_index(struct pkt *p) { reg(p, 1, 1); reg_mem(p, 0)->fd_index = 5; }
static void b_reg_fd_twice(struct pkt *p)
{
	reg(p, 2, 2);
	reg_mem(p, 1)->fd_index = 0;
	close(p->fds[1]);
	p->nfds = 1;
}
static void b_reg_cuda(struct pkt *p)
{
	reg(p, 1, 1);
	reg_mem(p, 0)->kind = KVS_MEM_CUDA_IPC;
	reg_mem(p, 0)->fd_index = 0;
	close(p->fds[0]);
	p->nfds = 0;
}
static void b_reg_ipc_on_fd(struct pkt *p) { reg(p, 1, 1); reg_mem(p, 0)->ipc_handle[0] = 1; }
static void b_reg_name(struct pkt *p)
{
	reg(p, 1, 1);
	memset(reg_layer(p, 1, 0)->name, 'x', KVS_NAME_MAX);
}
static void b_reg_layer_resv(struct pkt *p) { reg(p, 1, 1); reg_layer(p, 1, 0)->resv[0] = 1; }
static void b_reg_layer_mem(struct pkt *p) { reg(p, 1, 1); reg_layer(p, 1, 0)->mem_index = 1; }
static void b_reg_many_fds(struct pkt *p)
{
	reg(p, 1, 1);
	while (p->nfds < KVS_MAX_FDS + 1)
		p->fds[p->nfds++] = junk_fd();
}
static void b_reg_admin(struct pkt *p) { reg(p, 1, 1); }
static void b_garbage(struct pkt *p)
{
	uint64_t s = 0x5eed;

	p->len = 200;
	for (size_t i = 0; i < p->len; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		p->buf[i] = (uint8_t)(s >> 56);
	}
}
static void b_garbage_hello(struct pkt *p)
{
	/* A header that frames right, then noise where the HELLO should be. */
	b_garbage(p);
	p->len = sizeof(struct kvs_msg_hello);
	memcpy(p->buf, &(struct kvs_msg_hdr){ KVS_MSG_HELLO, (uint32_t)p->len, 3, 0 },
	       sizeof(struct kvs_msg_hdr));
}

struct row {
	const char *what;
	enum pre pre;
	void (*build)(struct pkt *p);
	int want;    /* reply status; ANY_ERROR; NO_REPLY */
	bool closes; /* false: the session must keep working */
};

static const struct row rows[] = {
	{ "short packet", PRE_NONE, b_short, -EBADMSG, true },
	{ "empty packet", PRE_NONE, b_empty, NO_REPLY, true },
	{ "header size above the packet's", PRE_NONE, b_size_big, -EBADMSG, true },
	{ "header size below the packet's", PRE_NONE, b_size_small, -EBADMSG, true },
	{ "header flags set", PRE_NONE, b_hdr_flags, -EBADMSG, true },
	{ "oversized packet", PRE_NONE, b_oversized, -EMSGSIZE, true },
	{ "oversized packet after HELLO", PRE_WORKER, b_oversized, -EMSGSIZE, true },
	{ "unknown type first", PRE_NONE, b_unknown, -EPROTO, true },
	{ "REGISTER first", PRE_NONE, b_register, -EPROTO, true },
	{ "STATUS first", PRE_NONE, b_status, -EPROTO, true },
	{ "HELLO twice", PRE_WORKER, b_hello, -EISCONN, true },
	{ "HELLO after admin HELLO", PRE_ADMIN, b_hello, -EISCONN, true },
	{ "HELLO too short", PRE_NONE, b_hello_short, -EBADMSG, true },
	{ "HELLO of a newer minor", PRE_NONE, b_hello_newer, 0, false },
	{ "HELLO instance not terminated", PRE_NONE, b_inst_unterminated, -EINVAL, true },
	{ "HELLO namespace not terminated", PRE_NONE, b_ns_unterminated, -EINVAL, true },
	{ "HELLO empty instance", PRE_NONE, b_inst_empty, -EINVAL, true },
	{ "HELLO instance with bad characters", PRE_NONE, b_inst_chars, -EINVAL, true },
	{ "HELLO role 0", PRE_NONE, b_role_zero, -EINVAL, true },
	{ "HELLO role 99", PRE_NONE, b_role_bad, -EINVAL, true },
	{ "HELLO tp_rank >= tp_size", PRE_NONE, b_rank, -EINVAL, true },
	{ "HELLO tp_size 0", PRE_NONE, b_tp_zero, -EINVAL, true },
	{ "HELLO world_size != tp_size", PRE_NONE, b_world, -EINVAL, true },
	{ "HELLO flags set", PRE_NONE, b_flags, -EINVAL, true },
	{ "HELLO resv0 set", PRE_NONE, b_resv0, -EINVAL, true },
	{ "HELLO resv[3] set", PRE_NONE, b_resv, -EINVAL, true },
	{ "HELLO unknown device kind", PRE_NONE, b_device, -EINVAL, true },
	{ "HELLO host device with a UUID", PRE_NONE, b_host_uuid, -EINVAL, true },
	{ "HELLO carrying an fd", PRE_NONE, b_hello_fd, -EBADF, true },
	{ "unknown type", PRE_WORKER, b_unknown, -EBADMSG, true },
	{ "a reply type sent to the daemon", PRE_WORKER, b_reply_type, -EBADMSG, true },
	{ "UNREGISTER with a payload", PRE_WORKER, b_unreg_payload, -EBADMSG, true },
	{ "GOODBYE with a payload", PRE_WORKER, b_bye_payload, -EBADMSG, true },
	{ "UNREGISTER carrying an fd", PRE_WORKER, b_unreg_fd, -EBADF, true },
	{ "REGISTER carrying 65 fds", PRE_WORKER, b_reg_many_fds, -EMSGSIZE, true },
	{ "REGISTER on an admin session", PRE_ADMIN, b_reg_admin, -EPERM, true },
	/* A refused registration is an answer, not a protocol breach: the session stays. */
	{ "REGISTER shorter than its header", PRE_WORKER, b_reg_short, -EBADMSG, false },
	{ "REGISTER without layers", PRE_WORKER, b_reg_zero_layers, -EINVAL, false },
	{ "REGISTER without memory", PRE_WORKER, b_reg_zero_mems, -EINVAL, false },
	{ "REGISTER counts above its size", PRE_WORKER, b_reg_counts_big, -EBADMSG, false },
	{ "REGISTER counts below its size", PRE_WORKER, b_reg_counts_small, -EBADMSG, false },
	{ "REGISTER 2^32-1 memories", PRE_WORKER, b_reg_counts_huge, -EINVAL, false },
	{ "REGISTER 2^31 layers", PRE_WORKER, b_reg_layers_huge, -E2BIG, false },
	{ "REGISTER resv0 set", PRE_WORKER, b_reg_resv, -EINVAL, false },
	{ "REGISTER unknown flags", PRE_WORKER, b_reg_flags, -EINVAL, false },
	{ "REGISTER memory resv set", PRE_WORKER, b_reg_mem_resv, -EINVAL, false },
	{ "REGISTER unknown memory kind", PRE_WORKER, b_reg_mem_kind, -EINVAL, false },
	{ "REGISTER memory of size 0", PRE_WORKER, b_reg_mem_size0, -EINVAL, false },
	{ "REGISTER missing fd", PRE_WORKER, b_reg_missing_fd, -EBADF, false },
	{ "REGISTER extra fd", PRE_WORKER, b_reg_extra_fd, -EBADF, false },
	{ "REGISTER fd index out of range", PRE_WORKER, b_reg_fd_index, -EBADF, false },
	{ "REGISTER one fd for two memories", PRE_WORKER, b_reg_fd_twice, -EBADF, false },
	{ "REGISTER GPU memory on a host session", PRE_WORKER, b_reg_cuda, -EINVAL, false },
	{ "REGISTER IPC handle on an fd memory", PRE_WORKER, b_reg_ipc_on_fd, -EINVAL, false },
	{ "REGISTER layer name not terminated", PRE_WORKER, b_reg_name, -EINVAL, false },
	{ "REGISTER layer resv set", PRE_WORKER, b_reg_layer_resv, -EINVAL, false },
	{ "REGISTER layer on a missing memory", PRE_WORKER, b_reg_layer_mem, -EINVAL, false },
	{ "garbage bytes", PRE_NONE, b_garbage, ANY_ERROR, true },
	{ "garbage bytes after HELLO", PRE_WORKER, b_garbage, ANY_ERROR, true },
	{ "garbage HELLO body", PRE_NONE, b_garbage_hello, ANY_ERROR, true },
};

/* Each row is its own instance: the last row's session may still be closing. */
static int pre_hello(int fd, enum pre pre, size_t row)
{
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	char inst[32];
	int rfd, r;

	if (pre == PRE_NONE)
		return 0;
	snprintf(inst, sizeof(inst), "mal-raw-%zu", row);
	raw_hello_init(&h, pre == PRE_ADMIN ? KVS_ROLE_ADMIN : KVS_ROLE_WORKER, inst, NS, 0, 1);
	r = raw_hello(fd, &h, &rep, &rfd);
	if (rfd >= 0)
		close(rfd);
	return r;
}

/* The session of a row that must survive still answers a request. */
static void still_serves(const struct row *row, int fd)
{
	struct kvs_msg_hdr req = { .type = KVS_MSG_UNREGISTER, .size = 16, .seq = 77 };
	struct kvs_msg_reply rep;
	ssize_t n;

	CHECK_INT(raw_send(fd, &req, sizeof(req), NULL, 0), ==, 0);
	n = raw_recv(fd, &rep, sizeof(rep), NULL, 0, NULL, 5000);
	CHECK(n == sizeof(rep), "%s: the session stopped answering (%zd)", row->what, n);
	CHECK_UINT(rep.hdr.seq, ==, 77);
	CHECK_INT(rep.status, ==, 0);
}

/* Send row @i's packet on a new connection; check the answer and the session's fate. */
static void run_row(const struct row *row, size_t i)
{
	static struct pkt p;
	struct kvs_msg_reply rep;
	int fd, r, rfd[4];
	unsigned nr = 0;
	ssize_t n;

	fd = raw_connect(d.sock);
	CHECK_INT(fd, >=, 0);
	r = pre_hello(fd, row->pre, i);
	CHECK(r == 0, "%s: HELLO before the row: %d", row->what, r);
	p.nfds = 0;
	row->build(&p);
	r = raw_send(fd, p.buf, p.len, p.fds, p.nfds);
	CHECK(r == 0, "%s: send: %s", row->what, strerror(-r));
	for (unsigned k = 0; k < p.nfds; k++)
		close(p.fds[k]);

	if (row->want == NO_REPLY) {
		CHECK(raw_eof(fd, 3000), "%s: session not closed", row->what);
		close(fd);
		return;
	}
	memset(&rep, 0, sizeof(rep));
	n = raw_recv(fd, &rep, sizeof(rep), rfd, 4, &nr, 5000);
	CHECK(n >= (ssize_t)sizeof(rep), "%s: no reply (%zd)", row->what, n);
	for (unsigned k = 0; k < nr; k++)
		close(rfd[k]);
	rep.text[sizeof(rep.text) - 1] = '\0';
	if (row->want == ANY_ERROR)
		CHECK(rep.status < 0, "%s: status %d", row->what, rep.status);
	else
		CHECK(rep.status == row->want, "%s: status %d (%s: %s), want %d (%s)", row->what,
		      rep.status, kvs_strerror(rep.status), rep.text, row->want,
		      kvs_strerror(row->want));
	CHECK_UINT(rep.rev_major, ==, KVS_WIRE_MAJOR);
	if (row->want < 0)
		CHECK(rep.text[0], "%s: no reason given", row->what);
	if (row->closes)
		CHECK(raw_eof(fd, 3000), "%s: session not closed", row->what);
	else
		still_serves(row, fd);
	close(fd);
}

static void test_socket_garbage(void)
{
	struct kvs_client *good, *admin;
	struct kvs_msg_stats_global g;
	int fds0, sessions0;

	start();
	good = NULL;
	CHECK_INT(test_connect(&d, KVS_ROLE_WORKER, "mal-good", NS, 0, 1, &good), ==, 0);
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	fds0 = proc_fd_count(d.pid);
	sessions0 = proc_memfd_count(d.pid, "kvstash-session");
	CHECK_INT(sessions0, ==, 1);

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		run_row(&rows[i], i);
		/* The well-behaved session never notices. */
		CHECK(kvs_nop_sync(good, 5000) == 0, "after %s: good session broken", rows[i].what);
		CHECK(pid_alive(d.pid), "after %s: kvstashd died", rows[i].what);
	}

	/* Every fd the garbage brought in was closed, every session freed. */
	CHECK_INT(wait_memfd_count(d.pid, "kvstash-junk", 0, 3000), ==, 0);
	CHECK_INT(wait_memfd_count(d.pid, "kvstash-session", sessions0, 3000), ==, sessions0);
	CHECK_INT(wait_fd_count(d.pid, fds0, 3000), ==, fds0);
	CHECK_INT(proc_map_count(d.pid, "kvstash-junk"), ==, 0);
	CHECK_INT(test_status_sessions(admin), ==, 1);
	CHECK_INT(test_stats(admin, &g), ==, 0);
	CHECK_UINT(g.sessions_live, ==, 1);
	CHECK_INT(kvs_nop_sync(good, 5000), ==, 0);
	kvs_close(good);
	kvs_close(admin);
	stop();
	it_ok("malformed socket messages: an error reply, the session closed");
}

/* ---- the rings ------------------------------------------------------ */

/* A raw worker session with its region attached and the SQ as producer. */
struct raw_session {
	int fd;
	struct shmq_region *region;
	struct shmq_ring sq;
};

static void raw_session_open(struct raw_session *rs, const char *inst)
{
	struct kvs_msg_hello h;
	struct kvs_msg_hello_reply rep;
	int rfd;

	rs->fd = raw_connect(d.sock);
	CHECK_INT(rs->fd, >=, 0);
	raw_hello_init(&h, KVS_ROLE_WORKER, inst, NS, 0, 1);
	CHECK_INT(raw_hello(rs->fd, &h, &rep, &rfd), ==, 0);
	CHECK_INT(rfd, >=, 0);
	CHECK_INT(shmq_region_attach(rfd, KVS_REGION_MAGIC, &rs->region), ==, 0);
	close(rfd);
	CHECK_INT(shmq_ring_init(&rs->sq, rs->region, KVS_PART_SQ, SHMQ_PRODUCER), ==, 0);
	CHECK_UINT(shmq_ring_capacity(&rs->sq), ==, rep.sq_entries);
}

static void raw_session_close(struct raw_session *rs)
{
	shmq_region_destroy(rs->region);
	close(rs->fd);
}

static uint64_t protocol_errors(struct kvs_client *admin)
{
	struct kvs_msg_stats_global g;

	CHECK_INT(test_stats(admin, &g), ==, 0);
	return g.protocol_errors;
}

static void test_ring_garbage(void)
{
	static const char *const bad[] = { "tail past capacity", "tail behind the head" };
	struct kvs_client *good, *admin;
	uint64_t perr0;

	start();
	good = NULL;
	CHECK_INT(test_connect(&d, KVS_ROLE_WORKER, "ring-good", NS, 0, 1, &good), ==, 0);
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	perr0 = protocol_errors(admin);

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct raw_session rs;
		uint32_t cap, tail;
		char inst[32];

		snprintf(inst, sizeof(inst), "ring-bad-%u", i);
		raw_session_open(&rs, inst);
		CHECK_INT(proc_memfd_count(d.pid, "kvstash-session"), ==, 2);
		cap = shmq_ring_capacity(&rs.sq);
		tail = i == 0 ? cap + 5 : UINT32_MAX;
		/* What a buggy or hostile engine might store as its SQ tail. */
		__atomic_store_n(rs.sq.p_tail, tail, __ATOMIC_RELEASE);
		shmq_prod_wake(&rs.sq);
		CHECK(raw_eof(rs.fd, 3000), "%s: session not ended", bad[i]);
		CHECK_INT(kvs_nop_sync(good, 5000), ==, 0);
		CHECK_INT(wait_memfd_count(d.pid, "kvstash-session", 1, 3000), ==, 1);
		raw_session_close(&rs);
		CHECK_UINT(protocol_errors(admin), ==, perr0 + i + 1);
	}
	CHECK_TRUE(kvsd_log_contains(&d, "ring protocol violated"));
	CHECK_TRUE(pid_alive(d.pid));
	CHECK_INT(test_status_sessions(admin), ==, 1);
	CHECK_INT(kvs_nop_sync(good, 5000), ==, 0);
	kvs_close(good);
	kvs_close(admin);
	stop();
	it_ok("an impossible ring index ends the session");
}

static void test_unknown_opcode(void)
{
	static const uint8_t ops[] = { KVS_OP_LAST + 1, 0x7f, 0xff };
	struct kvs_client *c = NULL;

	start();
	CHECK_INT(test_connect(&d, KVS_ROLE_WORKER, "opc", NS, 0, 1, &c), ==, 0);
	for (unsigned i = 0; i < sizeof(ops); i++) {
		struct kvs_sqe *sqe = kvs_get_sqe(c);
		struct kvs_cqe *cqe;

		CHECK_TRUE(sqe != NULL);
		CHECK_INT(kvs_prep_nop(c, sqe, 1000 + i), ==, 0);
		sqe->opcode = ops[i];
		CHECK_INT(kvs_submit(c), ==, 1);
		CHECK_INT(kvs_wait_cqe(c, &cqe, 5000), ==, 0);
		CHECK_UINT(cqe->user_data, ==, 1000 + i);
		CHECK_INT(cqe->res, ==, -EOPNOTSUPP);
		CHECK_UINT(cqe->flags & KVS_CQE_LOCAL, ==, 0);
		kvs_cqe_seen(c, cqe);
		/* The session goes on. */
		CHECK_INT(kvs_nop_sync(c, 5000), ==, 0);
	}
	CHECK_TRUE(kvsd_log_contains(&d, "rejected"));
	kvs_close(c);
	stop();
	it_ok("unknown opcodes complete with -EOPNOTSUPP");
}

int main(void)
{
	it_watchdog(60);
	test_socket_garbage();
	it_watchdog(60);
	test_ring_garbage();
	it_watchdog(60);
	test_unknown_opcode();
	return 0;
}
