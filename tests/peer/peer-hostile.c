/* SPDX-License-Identifier: MIT */
/*
 * peer-hostile: a peer that breaks the protocol on purpose.  As a client
 * it attacks a serving node (--peer); as a server (--listen) it attacks a
 * fetcher.  It speaks the protocol with the library's own wire and auth
 * code, since most attacks need to get past authentication first.
 *
 *   peer-hostile --peer ADDR --secret FILE --case NAME   (client cases)
 *   peer-hostile --listen ADDR --secret FILE --case NAME (server cases)
 *
 * --bind HOST:0 dials from HOST, for a node whose peer_allow names the
 * test's own addresses.
 * Each case checks what the other side must do (refuse with the right
 * status, close the connection, keep other locks) and prints
 * "case NAME: ok ..." or "case NAME: FAIL ..."; exit 0 only when it is ok.
 * Server cases serve one connection and exit; the fetcher's own checks
 * (peer-fetch: bytes and guards) say the rest.
 */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer/addr.h"
#include "peer/auth.h"
#include "peer/pwire.h"
#include "common.h"

static struct peer_secret secret;
static const char *cluster = "test";
static const char *peer_addr;
static const char *bind_addr; /* dial from here (--bind), else the kernel's choice */
static int io_ms = 10000;     /* how long to wait for the other side to act */
static struct geo g;
static uint32_t nblocks = 64;
static uint64_t seed = 1;
static const char *ns = "qwen3-8b/bf16/pf16";

#define FAIL(...)                               \
	do {                                    \
		printf("case %s: FAIL ", name); \
		printf(__VA_ARGS__);            \
		printf("\n");                   \
		return 1;                       \
	} while (0)
#define OK(...)                               \
	do {                                  \
		printf("case %s: ok ", name); \
		printf(__VA_ARGS__);          \
		printf("\n");                 \
		return 0;                     \
	} while (0)

static int dial(void)
{
	struct sockaddr_storage sa;
	socklen_t len;
	int fd, one = 1;

	if (peer_addr_parse(peer_addr, &sa, &len) < 0)
		return -EINVAL;
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (bind_addr) {
		struct sockaddr_storage ba;
		socklen_t blen;

		if (peer_addr_parse(bind_addr, &ba, &blen) < 0 ||
		    bind(fd, (struct sockaddr *)&ba, blen) < 0) {
			close(fd);
			return -EADDRNOTAVAIL;
		}
	}
	if (connect(fd, (struct sockaddr *)&sa, len) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

static int send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -errno;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int send_msg(int fd, unsigned type, uint32_t seq, const void *fixed, size_t flen,
		    const void *tail, size_t tlen)
{
	struct pw_buf b = { 0 };
	int r = pw_put(&b, type, seq, fixed, flen, tail, tlen);

	if (r == 0)
		r = send_all(fd, b.p, b.len);
	pw_buf_free(&b);
	return r;
}

/* Read exactly @n bytes within io_ms; 0, -ETIMEDOUT, or -ECONNRESET (closed). */
static int recv_all(int fd, void *p, size_t n, int ms)
{
	uint8_t *b = p;
	uint64_t end = now_ms() + (uint64_t)ms;

	while (n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int64_t left = (int64_t)(end - now_ms());
		ssize_t r;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return -ETIMEDOUT;
		r = recv(fd, b, n, 0);
		if (r == 0)
			return -ECONNRESET;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == ECONNRESET ? -ECONNRESET : -errno;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* One message; the payload into @buf (capacity @cap). */
static int recv_msg(int fd, struct pw_hdr *h, uint8_t *buf, size_t cap, int ms)
{
	uint8_t hb[sizeof(*h)];
	int r = recv_all(fd, hb, sizeof(hb), ms);

	if (r < 0)
		return r;
	if (pw_parse_hdr(hb, h, NULL, 0) < 0)
		return -EBADMSG;
	if (h->len > cap)
		return -EMSGSIZE;
	return recv_all(fd, buf, h->len, ms);
}

/* Wait for the peer to close: 0 if it did within @ms, -ETIMEDOUT if not. */
static int wait_closed(int fd, int ms)
{
	uint8_t junk[4096];
	uint64_t end = now_ms() + (uint64_t)ms;

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int64_t left = (int64_t)(end - now_ms());
		ssize_t r;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return -ETIMEDOUT;
		r = recv(fd, junk, sizeof(junk), 0);
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return 0;
		if (r < 0 && errno != EINTR)
			return 0;
	}
}

/* Expect an ERROR with @status (0: any) and return it. */
static int expect_error(int fd, int status, int *ret_status)
{
	uint8_t buf[PW_HELLO_MAX];
	struct pw_hdr h;
	struct pw_error e;
	int r = recv_msg(fd, &h, buf, sizeof(buf), io_ms);

	if (r < 0)
		return r;
	if (h.type != PW_ERROR || pw_parse_error(buf, h.len, &e, NULL, 0) < 0)
		return -EPROTO;
	*ret_status = e.status;
	return status && e.status != status ? -EBADE : 0;
}

static void make_hello(struct pw_hello *h, const char *cl)
{
	memset(h, 0, sizeof(*h));
	h->major = PW_MAJOR;
	h->minor = PW_MINOR;
	h->transports = PW_TRANSPORT_BIT(KVSPEER_TRANSPORT_TCP);
	peer_nonce(h->nonce);
	snprintf(h->cluster, sizeof(h->cluster), "%s", cl);
	snprintf(h->node, sizeof(h->node), "hostile");
}

/* The client's handshake with @key; 0 when the server accepted it. */
static int handshake(int fd, const struct peer_secret *key, bool *ret_server_proved)
{
	struct pw_hello hello;
	struct pw_hello_reply rep;
	struct pw_auth a = { 0 };
	uint8_t buf[PW_HELLO_MAX], want[PW_MAC_SIZE], proof[PW_MAC_SIZE];
	struct pw_hdr h;
	int r;

	make_hello(&hello, cluster);
	r = send_msg(fd, PW_HELLO, 1, &hello, sizeof(hello), NULL, 0);
	if (r < 0)
		return r;
	r = recv_msg(fd, &h, buf, sizeof(buf), io_ms);
	if (r < 0)
		return r;
	if (h.type != PW_HELLO_REPLY ||
	    pw_parse_hello_reply(buf, h.len, hello.transports, &rep, NULL, 0) < 0)
		return -EPROTO;
	memcpy(proof, rep.proof, sizeof(proof));
	memset(buf + offsetof(struct pw_hello_reply, proof), 0, PW_MAC_SIZE);
	peer_proof(key, PEER_SIDE_SERVER, &hello, sizeof(hello), buf, h.len, want);
	memcpy(buf + offsetof(struct pw_hello_reply, proof), proof, PW_MAC_SIZE);
	if (ret_server_proved)
		*ret_server_proved = peer_proof_equal(want, proof);
	peer_proof(key, PEER_SIDE_CLIENT, &hello, sizeof(hello), buf, h.len, a.proof);
	r = send_msg(fd, PW_AUTH, 2, &a, sizeof(a), NULL, 0);
	if (r < 0)
		return r;
	r = recv_msg(fd, &h, buf, sizeof(buf), io_ms);
	if (r < 0)
		return r;
	if (h.type == PW_ERROR)
		return -EACCES;
	return h.type == PW_AUTH_OK ? 0 : -EPROTO;
}

static int authed(void)
{
	int fd = dial();

	if (fd < 0)
		return fd;
	if (handshake(fd, &secret, NULL) < 0) {
		close(fd);
		return -EACCES;
	}
	return fd;
}

/* QUERY all blocks; the lock id, or 0 and *ret_status. */
static uint64_t query(int fd, uint32_t seq, uint32_t n, uint32_t *ret_blocks)
{
	uint8_t *keys = calloc(n, KVSPEER_KEY_SIZE);
	static uint8_t buf[PW_MAX_PAYLOAD];
	struct pw_query q = { .nr_keys = n, .nr_shards = g.tp };
	struct pw_hdr h;
	struct pw_query_reply rep;
	struct pw_reply_limits lim = { n, g.tp, 1ull << 30 };
	const uint8_t *ents;

	for (uint32_t i = 0; i < n; i++)
		make_key(seed, i, keys + (size_t)i * KVSPEER_KEY_SIZE);
	make_digest(ns, &g, q.digest);
	if (send_msg(fd, PW_QUERY, seq, &q, sizeof(q), keys, (size_t)n * KVSPEER_KEY_SIZE) < 0 ||
	    recv_msg(fd, &h, buf, sizeof(buf), io_ms) < 0 || h.type != PW_QUERY_REPLY ||
	    pw_parse_query_reply(buf, h.len, &lim, &rep, &ents, NULL, 0) < 0) {
		free(keys);
		return 0;
	}
	free(keys);
	*ret_blocks = rep.nr_blocks;
	return rep.lock_id;
}

/* ---- Client cases ---------------------------------------------------------------- */

static int c_garbage(const char *name)
{
	uint8_t junk[64];
	int fd = dial();

	if (fd < 0)
		FAIL("connect: %s", strerror(-fd));
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(splitmix64(i) & 0xff);
	send_all(fd, junk, sizeof(junk));
	if (wait_closed(fd, io_ms) < 0)
		FAIL("server kept a connection that sent garbage");
	close(fd);
	OK("closed");
}

static int c_huge_len(const char *name)
{
	struct pw_hdr h = { .magic = PW_MAGIC, .type = PW_HELLO, .len = 0x7fffffff, .seq = 1 };
	int fd = dial(), st = 0;

	if (fd < 0)
		FAIL("connect");
	send_all(fd, &h, sizeof(h));
	/* Refused from the header alone: an ERROR then the close, no 2 GiB read. */
	if (expect_error(fd, -EBADMSG, &st) < 0 || wait_closed(fd, io_ms) < 0)
		FAIL("status %d", st);
	close(fd);
	OK("refused before the payload");
}

static int c_wrong_type(const char *name)
{
	/* A reply type, at its largest, from a peer that has not even said HELLO. */
	struct pw_hdr h = {
		.magic = PW_MAGIC, .type = PW_QUERY_REPLY, .len = PW_MAX_PAYLOAD, .seq = 1
	};
	int fd = dial(), st = 0;

	if (fd < 0)
		FAIL("connect");
	send_all(fd, &h, sizeof(h));
	if (expect_error(fd, -EPROTO, &st) < 0 || wait_closed(fd, io_ms) < 0)
		FAIL("status %d", st);
	close(fd);
	OK("refused from its header");
}

static int c_bad_version(const char *name)
{
	struct pw_hello hello;
	int fd = dial(), st = 0;

	if (fd < 0)
		FAIL("connect");
	make_hello(&hello, cluster);
	hello.major = 9;
	send_msg(fd, PW_HELLO, 1, &hello, sizeof(hello), NULL, 0);
	if (expect_error(fd, -EPROTONOSUPPORT, &st) < 0 || wait_closed(fd, io_ms) < 0)
		FAIL("status %d", st);
	close(fd);
	OK("EPROTONOSUPPORT");
}

static int c_bad_hello(const char *name)
{
	struct pw_hello hello;
	int fd = dial(), st = 0;

	if (fd < 0)
		FAIL("connect");
	make_hello(&hello, cluster);
	memset(hello.node, 'x', sizeof(hello.node)); /* no NUL */
	send_msg(fd, PW_HELLO, 1, &hello, sizeof(hello), NULL, 0);
	if (expect_error(fd, -EINVAL, &st) < 0 || wait_closed(fd, io_ms) < 0)
		FAIL("status %d", st);
	close(fd);
	OK("EINVAL");
}

static int c_wrong_cluster(const char *name)
{
	struct pw_hello hello;
	int fd = dial(), st = 0;

	if (fd < 0)
		FAIL("connect");
	make_hello(&hello, "another");
	send_msg(fd, PW_HELLO, 1, &hello, sizeof(hello), NULL, 0);
	if (expect_error(fd, -EACCES, &st) < 0 || wait_closed(fd, io_ms) < 0)
		FAIL("status %d", st);
	close(fd);
	OK("EACCES");
}

static int c_wrong_secret(const char *name)
{
	struct peer_secret wrong = secret;
	bool proved = true;
	int fd = dial(), r;

	if (fd < 0)
		FAIL("connect");
	wrong.key[0] ^= 1;
	r = handshake(fd, &wrong, &proved);
	if (r != -EACCES)
		FAIL("handshake with a wrong secret: %d", r);
	/* And the server's proof does not check out against the wrong key either. */
	if (proved)
		FAIL("the server's proof matched a wrong secret");
	if (wait_closed(fd, io_ms) < 0)
		FAIL("not closed");
	close(fd);
	OK("EACCES both ways");
}

static int c_before_auth(const char *name)
{
	struct pw_hello hello;
	struct pw_query q = { .nr_keys = 1, .nr_shards = 1 };
	uint8_t key[16] = { 0 }, buf[PW_HELLO_MAX];
	struct pw_hdr h;
	int fd = dial(), st = 0;

	if (fd < 0)
		FAIL("connect");
	make_hello(&hello, cluster);
	send_msg(fd, PW_HELLO, 1, &hello, sizeof(hello), NULL, 0);
	if (recv_msg(fd, &h, buf, sizeof(buf), io_ms) < 0 || h.type != PW_HELLO_REPLY)
		FAIL("no HELLO_REPLY");
	send_msg(fd, PW_QUERY, 2, &q, sizeof(q), key, sizeof(key));
	if (expect_error(fd, -EPROTO, &st) < 0 || wait_closed(fd, io_ms) < 0)
		FAIL("QUERY before AUTH: status %d", st);
	close(fd);
	OK("EPROTO");
}

static int c_forged_lock(const char *name)
{
	int a = authed(), b = authed(), st = 0;
	uint32_t nb = 0;
	uint64_t lock;
	struct pw_fetch f = { .count = 1 };
	struct pw_release rel = { 0 };
	struct pw_renew ren = { .ttl_ms = 1000 };
	uint8_t buf[PW_HELLO_MAX + 1024];
	struct pw_hdr h;

	if (a < 0 || b < 0)
		FAIL("cannot authenticate");
	lock = query(a, 3, 4, &nb);
	if (!lock || nb != 4)
		FAIL("no lock for 4 blocks (%u)", nb);
	/* Another connection of the same peer cannot use it... */
	f.lock_id = rel.lock_id = ren.lock_id = lock;
	send_msg(b, PW_FETCH, 3, &f, sizeof(f), NULL, 0);
	if (expect_error(b, -ENOENT, &st) < 0)
		FAIL("FETCH of another connection's lock: %d", st);
	send_msg(b, PW_RENEW, 4, &ren, sizeof(ren), NULL, 0);
	if (expect_error(b, -ENOENT, &st) < 0)
		FAIL("RENEW of another connection's lock: %d", st);
	send_msg(b, PW_RELEASE, 5, &rel, sizeof(rel), NULL, 0);
	if (expect_error(b, -ENOENT, &st) < 0)
		FAIL("RELEASE of another connection's lock: %d", st);
	/* ...nor can guessed ids. */
	for (uint64_t i = 1; i <= 8; i++) {
		f.lock_id = lock + i * 7919;
		send_msg(a, PW_FETCH, (uint32_t)(10 + i), &f, sizeof(f), NULL, 0);
		if (expect_error(a, -ENOENT, &st) < 0)
			FAIL("FETCH of a forged lock: %d", st);
	}
	/* The owner still has it, whole. */
	rel.lock_id = lock;
	send_msg(a, PW_RELEASE, 30, &rel, sizeof(rel), NULL, 0);
	if (recv_msg(a, &h, buf, sizeof(buf), io_ms) < 0 || h.type != PW_RELEASE_REPLY)
		FAIL("the owner could not release its lock");
	close(a);
	close(b);
	OK("ENOENT for every forged use, the owner's lock intact");
}

static int c_out_of_range(const char *name)
{
	int fd = authed(), st = 0;
	uint32_t nb = 0;
	uint64_t lock;
	struct pw_fetch f = { 0 };
	struct pw_query q = { .nr_keys = KVSPEER_MAX_KEYS + 1, .nr_shards = 1 };
	uint8_t keys[2 * KVSPEER_KEY_SIZE] = { 0 };

	if (fd < 0)
		FAIL("cannot authenticate");
	lock = query(fd, 3, 4, &nb);
	if (!lock)
		FAIL("no lock");
	f.lock_id = lock;
	f.first = 4;
	f.count = 1;
	send_msg(fd, PW_FETCH, 4, &f, sizeof(f), NULL, 0);
	if (expect_error(fd, -ERANGE, &st) < 0)
		FAIL("FETCH past the lock: %d", st);
	f.first = 1;
	f.count = UINT32_MAX;
	send_msg(fd, PW_FETCH, 5, &f, sizeof(f), NULL, 0);
	if (expect_error(fd, -ERANGE, &st) < 0)
		FAIL("FETCH with a wrapping count: %d", st);
	/* Too many keys: refused from the fixed part, the keys need not even come. */
	send_msg(fd, PW_QUERY, 6, &q, sizeof(q), NULL, 0);
	if (expect_error(fd, 0, &st) < 0 || (st != -E2BIG && st != -EBADMSG))
		FAIL("QUERY of too many keys: %d", st);
	if (st == -EBADMSG) {
		if (wait_closed(fd, io_ms) < 0)
			FAIL("not closed after EBADMSG");
		close(fd);
		OK("ERANGE, ERANGE, EBADMSG");
	}
	/* Counts that do not match the bytes: the connection is ended. */
	q.nr_keys = 3;
	send_msg(fd, PW_QUERY, 7, &q, sizeof(q), keys, sizeof(keys));
	if (expect_error(fd, -EBADMSG, &st) < 0 || wait_closed(fd, io_ms) < 0)
		FAIL("QUERY of 3 keys with 2: %d", st);
	close(fd);
	OK("ERANGE, ERANGE, E2BIG, EBADMSG and closed");
}

static int c_stall_header(const char *name)
{
	struct pw_hdr h = { .magic = PW_MAGIC, .type = PW_HELLO, .len = sizeof(struct pw_hello) };
	int fd = dial();
	uint64_t t0 = now_ms();

	if (fd < 0)
		FAIL("connect");
	send_all(fd, &h, 8); /* half a header, then nothing */
	if (wait_closed(fd, io_ms) < 0)
		FAIL("a half header kept the connection for %d ms", io_ms);
	close(fd);
	OK("closed after %llu ms", (unsigned long long)(now_ms() - t0));
}

static int c_stall_payload(const char *name)
{
	struct pw_query q = { .nr_keys = 64, .nr_shards = 1 };
	uint8_t keys[32 * KVSPEER_KEY_SIZE] = { 0 };
	struct pw_hdr h = { .magic = PW_MAGIC,
			    .type = PW_QUERY,
			    .len = sizeof(q) + 64 * KVSPEER_KEY_SIZE,
			    .seq = 3 };
	int fd = authed();
	uint64_t t0 = now_ms();

	if (fd < 0)
		FAIL("cannot authenticate");
	send_all(fd, &h, sizeof(h));
	send_all(fd, &q, sizeof(q));
	send_all(fd, keys, sizeof(keys)); /* half the keys, then nothing */
	if (wait_closed(fd, io_ms) < 0)
		FAIL("a half message kept the connection");
	close(fd);
	OK("closed after %llu ms", (unsigned long long)(now_ms() - t0));
}

static int c_stall_reader(const char *name)
{
	int fd = authed(), small = 4096;
	uint32_t nb = 0;
	uint64_t lock, t0;
	struct pw_fetch f = { 0 };

	if (fd < 0)
		FAIL("cannot authenticate");
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	lock = query(fd, 3, nblocks, &nb);
	if (!lock)
		FAIL("no lock");
	f.lock_id = lock;
	f.count = nb;
	send_msg(fd, PW_FETCH, 4, &f, sizeof(f), NULL, 0);
	/* Never read: the server's send stalls; it must give up and drop the lock. */
	t0 = now_ms();
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLRDHUP };

		if (poll(&pfd, 1, 200) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			break;
		if (now_ms() - t0 > (uint64_t)io_ms * 3)
			FAIL("the server kept sending to a reader that stopped");
	}
	close(fd);
	OK("server gave up after %llu ms", (unsigned long long)(now_ms() - t0));
}

static int c_lock_flood(const char *name)
{
	int fd = authed(), st = 0;
	uint32_t nb = 0, got = 0;
	uint8_t key[KVSPEER_KEY_SIZE];
	struct pw_query q = { .nr_keys = 1, .nr_shards = g.tp };

	if (fd < 0)
		FAIL("cannot authenticate");
	make_key(seed, 0, key);
	make_digest(ns, &g, q.digest);
	for (int i = 0; i < 1000; i++) {
		uint8_t buf[4096];
		struct pw_hdr h;

		send_msg(fd, PW_QUERY, (uint32_t)(3 + i), &q, sizeof(q), key, sizeof(key));
		if (recv_msg(fd, &h, buf, sizeof(buf), io_ms) < 0)
			FAIL("no answer to lock request %d", i);
		if (h.type == PW_ERROR) {
			struct pw_error e;

			pw_parse_error(buf, h.len, &e, NULL, 0);
			st = e.status;
			break;
		}
		got++;
	}
	(void)nb;
	if (st != -EUSERS)
		FAIL("%u locks granted, then status %d", got, st);
	close(fd);
	OK("EUSERS after %u locks", got);
}

static int c_conn_flood(const char *name)
{
	int fds[64], n = 0, refused = 0;

	for (int i = 0; i < 64; i++) {
		fds[i] = dial();
		if (fds[i] >= 0)
			n++;
	}
	/* Those over the per-peer limit are closed at once, before any byte. */
	for (int i = 0; i < 64; i++) {
		struct pollfd pfd = { .fd = fds[i], .events = POLLIN };

		if (fds[i] < 0)
			continue;
		if (poll(&pfd, 1, 200) > 0) {
			uint8_t b;

			if (recv(fds[i], &b, 1, MSG_DONTWAIT) <= 0)
				refused++;
		}
	}
	for (int i = 0; i < 64; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (!refused)
		FAIL("64 connections from one peer, none refused");
	OK("%d of %d connections refused", refused, n);
}

/*
 * Admission attacks (kvspeer(7), ADMISSION), as tools for a test that
 * watches a legitimate node fetch meanwhile: the bounds are checked here
 * (what this host could hold) and by the test (the node's counters).
 */
static unsigned sl_conns = 64, sl_gap_ms = 5, sl_hold_ms = 3000, sl_expect_max;
static volatile sig_atomic_t sl_stop;

static void sl_on_term(int sig)
{
	(void)sig;
	sl_stop = 1;
}
static const char *sl_pattern = "partial", *sl_binds;

/* --binds A,B,...: the addresses dialled from, in turn (else --bind or the kernel's). */
static unsigned split_binds(char (*out)[64], unsigned max)
{
	unsigned n = 0;
	const char *p = sl_binds;

	while (p && *p && n < max) {
		size_t l = strcspn(p, ",");

		snprintf(out[n++], sizeof(out[0]), "%.*s:0", (int)l, p);
		p += l + (p[l] == ',');
	}
	return n;
}

/*
 * Slow handshakes, sustained: a connection every --gap-ms for --hold-ms,
 * each sending nothing (silent), a HELLO's header and half its payload
 * (partial), or the HELLO one byte every 100 ms (drip), and kept open as
 * long as the server lets it; at most --conns open at once (a closed
 * one's place is dialled again).  "attacking" is printed once the first
 * --conns were dialled.  A connection counts as held once it stayed open
 * 300 ms (a refusal closes it sooner).  --expect-max N: fail when more
 * than N were held at once.  SIGTERM ends it early, with the same report:
 * a test holds the attack until what it watches is done.
 */
static int c_slowloris(const char *name)
{
	enum { MAXC = 1024, HELD_MS = 300 };
	static int fds[MAXC];
	static uint64_t opened_at[MAXC];
	static size_t sent[MAXC];
	uint8_t hello[sizeof(struct pw_hdr) + sizeof(struct pw_hello)];
	struct pw_hdr *h = (struct pw_hdr *)hello;
	char binds[16][64];
	unsigned nb = split_binds(binds, 16), opened = 0, refused = 0, failed = 0, closed_later = 0;
	unsigned max_held = 0, alive_end = 0, slots = sl_conns;
	bool drip = !strcmp(sl_pattern, "drip"), silent = !strcmp(sl_pattern, "silent");
	uint64_t t0 = now_ms(), next_open = t0, end = t0 + sl_hold_ms, next_drip = t0;

	if (!slots || slots > MAXC)
		FAIL("--conns must be 1..%d", MAXC);
	signal(SIGTERM, sl_on_term);
	for (unsigned i = 0; i < slots; i++)
		fds[i] = -1;
	*h = (struct pw_hdr){
		.magic = PW_MAGIC, .type = PW_HELLO, .len = sizeof(struct pw_hello), .seq = 1
	};
	make_hello((struct pw_hello *)(h + 1), cluster);
	while (now_ms() < end && !sl_stop) {
		uint64_t now = now_ms();
		unsigned held = 0;

		if (now >= next_open) {
			unsigned i = 0;

			while (i < slots && fds[i] >= 0)
				i++;
			if (i < slots) {
				if (nb)
					bind_addr = binds[opened % nb];
				fds[i] = dial();
				opened_at[i] = now;
				sent[i] = 0;
				if (fds[i] < 0) {
					failed++;
				} else if (!silent) {
					size_t first =
						drip ? 1 : sizeof(*h) + sizeof(struct pw_hello) / 2;

					if (send_all(fds[i], hello, first) == 0)
						sent[i] = first;
				}
				if (++opened == slots) {
					/* For the test that waits to act under the attack. */
					printf("attacking: %u connections dialled\n", opened);
					fflush(stdout);
				}
			}
			next_open = now + sl_gap_ms;
		}
		for (unsigned i = 0; i < slots; i++) {
			struct pollfd pfd = { .fd = fds[i], .events = POLLIN };
			uint8_t junk[512];

			if (fds[i] < 0)
				continue;
			if (poll(&pfd, 1, 0) > 0) {
				ssize_t r = recv(fds[i], junk, sizeof(junk), MSG_DONTWAIT);

				if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
					if (now - opened_at[i] < HELD_MS)
						refused++;
					else
						closed_later++;
					close(fds[i]);
					fds[i] = -1;
					continue;
				}
			}
			if (drip && now >= next_drip && sent[i] < sizeof(hello) &&
			    send_all(fds[i], hello + sent[i], 1) == 0)
				sent[i]++;
			if (now - opened_at[i] >= HELD_MS)
				held++;
		}
		if (drip && now >= next_drip)
			next_drip = now + 100;
		if (held > max_held)
			max_held = held;
		usleep(1000);
	}
	for (unsigned i = 0; i < slots; i++)
		if (fds[i] >= 0) {
			alive_end++;
			close(fds[i]);
		}
	printf("case %s: %s dialled=%u failed=%u refused=%u closed_later=%u max_held=%u "
	       "alive_at_end=%u ms=%llu\n",
	       name, sl_expect_max && max_held > sl_expect_max ? "FAIL" : "ok", opened, failed,
	       refused, closed_later, max_held, alive_end, (unsigned long long)(now_ms() - t0));
	return sl_expect_max && max_held > sl_expect_max;
}

/*
 * The first block of kvstash-example-pd's prompt --pd-seed N (its first
 * run: --seed N), in namespace --pd-ns of --layers layers of
 * --seg-bytes, as a kvstashd names it: its key (the example's
 * derivation) and the namespace digest (kvspeer_kvstash_ns()).
 */
static uint64_t pd_seed, pd_seg = 16384;
static const char *pd_ns = "admit";

static uint64_t pd_mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int pd_block(uint8_t key[KVSPEER_KEY_SIZE], uint8_t digest[KVSPEER_DIGEST_SIZE])
{
	struct kvspeer_kvstash_layer lay[64];
	struct kvspeer_kvstash_ns kns = { .name = pd_ns, .tp_size = 1, .nr_layers = g.layers };
	uint64_t s = (pd_seed * 1000u + 1) ^ 0x70646b657973ull, k[2];

	if (!g.layers || g.layers > 64)
		return -EINVAL;
	for (uint32_t l = 0; l < g.layers; l++)
		lay[l] = (struct kvspeer_kvstash_layer){ .segments = 1, .segment_bytes = pd_seg };
	kns.layers = lay;
	k[0] = pd_mix(&s);
	k[1] = pd_mix(&s);
	memcpy(key, k, sizeof(k));
	return kvspeer_kvstash_ns(&kns, digest, NULL);
}

/*
 * Locks from one host over many connections: --conns authenticated
 * connections, each asking for locks until refused.  --expect-max N:
 * fail when more than N locks were granted in all.  With --pd-seed, the
 * lock is on a kvstashd's block that kvstash-example-pd --seed saved.
 */
static int c_lock_hog(const char *name)
{
	int fds[256];
	unsigned n = sl_conns < 256 ? sl_conns : 256, total = 0, conns = 0;
	uint8_t key[KVSPEER_KEY_SIZE];
	struct pw_query q = { .nr_keys = 1, .nr_shards = g.tp };

	make_key(seed, 0, key);
	make_digest(ns, &g, q.digest);
	if (pd_seed && pd_block(key, q.digest) < 0)
		FAIL("--pd-seed: no digest for %u layers", g.layers);
	for (unsigned c = 0; c < n; c++) {
		fds[c] = authed();
		if (fds[c] < 0)
			continue;
		conns++;
		for (int i = 0; i < 1000; i++) {
			uint8_t buf[4096];
			struct pw_hdr h;

			struct pw_query_reply rep;

			send_msg(fds[c], PW_QUERY, (uint32_t)(3 + i), &q, sizeof(q), key,
				 sizeof(key));
			if (recv_msg(fds[c], &h, buf, sizeof(buf), io_ms) < 0 ||
			    h.type != PW_QUERY_REPLY || h.len < sizeof(rep))
				break;
			memcpy(&rep, buf, sizeof(rep));
			if (!rep.nr_blocks)
				FAIL("the block to lock is not there (lock request %d)", i);
			total++;
		}
	}
	for (unsigned c = 0; c < n; c++)
		if (fds[c] >= 0)
			close(fds[c]);
	if (!conns)
		FAIL("no connection authenticated");
	if (sl_expect_max && total > sl_expect_max)
		FAIL("%u locks over %u connections from one host (limit %u)", total, conns,
		     sl_expect_max);
	OK("%u locks over %u connections from one host", total, conns);
}

/* ---- Server cases: one connection from a real fetcher ---------------------------------- */

static int srv_accept(const char *listen_addr)
{
	struct sockaddr_storage sa;
	socklen_t len;
	int fd, c, one = 1;

	if (peer_addr_parse(listen_addr, &sa, &len) < 0)
		return -EINVAL;
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, 4) < 0)
		return -errno;
	printf("listening %s\n", listen_addr);
	fflush(stdout);
	c = accept(fd, NULL, NULL);
	close(fd);
	return c;
}

/* The server's handshake; @bad_proof sends a proof made with another key. */
static int srv_handshake(int fd, bool bad_proof)
{
	uint8_t hello[PW_HELLO_MAX], buf[PW_HELLO_MAX];
	struct pw_hello_reply rep = { 0 };
	struct pw_hdr h;
	struct pw_auth_ok ok = { 0 };
	struct peer_secret key = secret;
	size_t hlen;

	if (recv_msg(fd, &h, hello, sizeof(hello), io_ms) < 0 || h.type != PW_HELLO)
		return -EPROTO;
	hlen = h.len;
	rep.major = PW_MAJOR;
	rep.transport = PW_TRANSPORT_BIT(KVSPEER_TRANSPORT_TCP);
	peer_nonce(rep.nonce);
	snprintf(rep.cluster, sizeof(rep.cluster), "%s", cluster);
	snprintf(rep.node, sizeof(rep.node), "hostile");
	rep.lock_ttl_ms = 10000;
	rep.max_keys = KVSPEER_MAX_KEYS;
	rep.max_locks = 64;
	if (bad_proof)
		key.key[0] ^= 1;
	peer_proof(&key, PEER_SIDE_SERVER, hello, hlen, &rep, sizeof(rep), rep.proof);
	send_msg(fd, PW_HELLO_REPLY, h.seq, &rep, sizeof(rep), NULL, 0);
	if (recv_msg(fd, &h, buf, sizeof(buf), io_ms) < 0)
		return -ECONNRESET; /* a fetcher that refused our proof hangs up */
	if (h.type != PW_AUTH)
		return -EPROTO;
	return send_msg(fd, PW_AUTH_OK, h.seq, &ok, sizeof(ok), NULL, 0);
}

/* Read the fetcher's QUERY and answer with @n blocks of @len bytes (0: geometry's). */
static int srv_query(int fd, uint32_t *ret_seq, uint32_t *ret_nkeys, uint32_t reply_blocks,
		     uint64_t len)
{
	static uint8_t buf[PW_MAX_PAYLOAD];
	struct pw_hdr h;
	struct pw_query q;
	const uint8_t *keys;
	struct pw_query_reply rep = { 0 };
	struct pw_entry *e;
	uint32_t n;
	int r;

	if (recv_msg(fd, &h, buf, sizeof(buf), io_ms) < 0 || h.type != PW_QUERY ||
	    pw_parse_query(buf, h.len, KVSPEER_MAX_KEYS, &q, &keys, NULL, 0) < 0)
		return -EPROTO;
	n = reply_blocks ? reply_blocks : q.nr_keys;
	rep.nr_blocks = n;
	rep.nr_shards = q.nr_shards;
	rep.ttl_ms = 10000;
	rep.lock_id = 77;
	e = calloc((size_t)n * q.nr_shards, sizeof(*e));
	for (uint32_t i = 0; i < n * q.nr_shards; i++) {
		e[i].len = len ? len : g.shard_bytes;
		e[i].generation = 1;
	}
	r = send_msg(fd, PW_QUERY_REPLY, h.seq, &rep, sizeof(rep), e,
		     (size_t)n * q.nr_shards * sizeof(*e));
	free(e);
	*ret_seq = h.seq;
	*ret_nkeys = q.nr_keys;
	return r;
}

static int srv_fetch_req(int fd, struct pw_fetch *f)
{
	uint8_t buf[256];
	struct pw_hdr h;

	if (recv_msg(fd, &h, buf, sizeof(buf), io_ms) < 0 || h.type != PW_FETCH ||
	    pw_parse_fetch(buf, h.len, f, NULL, 0) < 0)
		return -EPROTO;
	return 0;
}

/* Send block @b's shards, correct bytes; @gen for their SHARD_END. */
static int srv_send_block(int fd, uint32_t b, uint64_t gen)
{
	uint8_t key[KVSPEER_KEY_SIZE];
	uint8_t *data = malloc(g.shard_bytes);

	make_key(seed, b, key);
	for (uint32_t s = 0; s < g.tp; s++) {
		struct pw_data d = { .lock_id = 77, .block = b, .shard = s, .len = g.shard_bytes };
		struct pw_shard_end e = {
			.lock_id = 77, .block = b, .shard = s, .generation = gen
		};

		payload_fill(data, g.shard_bytes, key, s);
		if (send_msg(fd, PW_DATA, 0, &d, sizeof(d), NULL, 0) < 0 ||
		    send_all(fd, data, g.shard_bytes) < 0 ||
		    send_msg(fd, PW_SHARD_END, 0, &e, sizeof(e), NULL, 0) < 0) {
			free(data);
			return -ECONNRESET;
		}
	}
	free(data);
	return 0;
}

static int s_case(const char *name, const char *listen_addr)
{
	uint32_t seq, nkeys;
	struct pw_fetch f;
	int fd = srv_accept(listen_addr), r = 0;

	if (fd < 0)
		FAIL("listen: %s", strerror(-fd));
	if (!strcmp(name, "srv-wrong-secret")) {
		r = srv_handshake(fd, true);
		/* The fetcher must hang up rather than send AUTH to an unproven server. */
		if (r != -ECONNRESET)
			FAIL("the fetcher went on with a server that did not prove the secret");
		close(fd);
		OK("the fetcher hung up");
	}
	if (srv_handshake(fd, false) < 0)
		FAIL("handshake");
	if (!strcmp(name, "srv-too-many")) {
		/* More blocks than keys asked: a parse error for the fetcher, nothing written. */
		if (recv_msg(fd, &(struct pw_hdr){ 0 }, (uint8_t[PW_HELLO_MAX * 80]){ 0 },
			     PW_HELLO_MAX * 80, io_ms) < 0)
			FAIL("no QUERY");
		{
			struct pw_query_reply rep = {
				.nr_blocks = 5000, .nr_shards = g.tp, .ttl_ms = 1, .lock_id = 77
			};

			send_msg(fd, PW_QUERY_REPLY, 3, &rep, sizeof(rep), NULL, 0);
		}
	} else if (!strcmp(name, "srv-oversize")) {
		srv_query(fd, &seq, &nkeys, 0,
			  (2ull << 30)); /* 2 GiB a shard: over max_shard_bytes */
	} else if (!strcmp(name, "srv-long-data")) {
		/* DATA longer than the lock said: the fetcher must not read it into the buffer. */
		struct pw_data d = {
			.lock_id = 77, .block = 1, .shard = 0, .len = g.shard_bytes + 4096
		};
		uint8_t *junk = calloc(1, g.shard_bytes + 4096);

		srv_query(fd, &seq, &nkeys, 0, 0);
		if (srv_fetch_req(fd, &f) < 0)
			FAIL("no FETCH");
		srv_send_block(fd, 0, 1);
		send_msg(fd, PW_DATA, 0, &d, sizeof(d), NULL, 0);
		send_all(fd, junk, g.shard_bytes + 4096);
		free(junk);
	} else if (!strcmp(name, "srv-wrong-block")) {
		/* Block 2 where block 1 is due. */
		srv_query(fd, &seq, &nkeys, 0, 0);
		if (srv_fetch_req(fd, &f) < 0)
			FAIL("no FETCH");
		srv_send_block(fd, 0, 1);
		srv_send_block(fd, 2, 1);
	} else if (!strcmp(name, "srv-generation")) {
		srv_query(fd, &seq, &nkeys, 0, 0);
		if (srv_fetch_req(fd, &f) < 0)
			FAIL("no FETCH");
		srv_send_block(fd, 0, 1);
		srv_send_block(fd, 1, 1);
		srv_send_block(fd, 2, 2); /* recycled while sent */
	} else if (!strcmp(name, "srv-stall")) {
		/* Two blocks, then half a shard, then nothing: the fetcher's deadline ends it. */
		struct pw_data d = { .lock_id = 77, .block = 2, .shard = 0, .len = g.shard_bytes };
		uint8_t *half = calloc(1, g.shard_bytes / 2);

		srv_query(fd, &seq, &nkeys, 0, 0);
		if (srv_fetch_req(fd, &f) < 0)
			FAIL("no FETCH");
		srv_send_block(fd, 0, 1);
		srv_send_block(fd, 1, 1);
		send_msg(fd, PW_DATA, 0, &d, sizeof(d), NULL, 0);
		send_all(fd, half, g.shard_bytes / 2);
		free(half);
	} else {
		FAIL("unknown case");
	}
	/* The fetcher must end the connection (deadline or refusal), not us. */
	if (wait_closed(fd, io_ms * 3) < 0)
		FAIL("the fetcher kept the connection");
	close(fd);
	OK("the fetcher hung up");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "peer", 1, NULL, 'p' },      { "listen", 1, NULL, 'l' },
		{ "secret", 1, NULL, 's' },    { "case", 1, NULL, 'c' },
		{ "cluster", 1, NULL, 'C' },   { "io-ms", 1, NULL, 'i' },
		{ "blocks", 1, NULL, 'b' },    { "tp", 1, NULL, 't' },
		{ "layers", 1, NULL, 'L' },    { "bind", 1, NULL, 'B' },
		{ "conns", 1, NULL, 'n' },     { "gap-ms", 1, NULL, 'g' },
		{ "hold-ms", 1, NULL, 'H' },   { "pattern", 1, NULL, 'P' },
		{ "binds", 1, NULL, 'X' },     { "expect-max", 1, NULL, 'E' },
		{ "pd-seed", 1, NULL, 'S' },   { "pd-ns", 1, NULL, 'N' },
		{ "seg-bytes", 1, NULL, 'G' }, { NULL, 0, NULL, 0 },
	};
	static const struct {
		const char *name;
		int (*fn)(const char *);
	} cases[] = {
		{ "garbage", c_garbage },	    { "huge-len", c_huge_len },
		{ "wrong-type", c_wrong_type },	    { "bad-version", c_bad_version },
		{ "bad-hello", c_bad_hello },	    { "wrong-cluster", c_wrong_cluster },
		{ "wrong-secret", c_wrong_secret }, { "before-auth", c_before_auth },
		{ "forged-lock", c_forged_lock },   { "out-of-range", c_out_of_range },
		{ "stall-header", c_stall_header }, { "stall-payload", c_stall_payload },
		{ "stall-reader", c_stall_reader }, { "lock-flood", c_lock_flood },
		{ "conn-flood", c_conn_flood },	    { "slowloris", c_slowloris },
		{ "lock-hog", c_lock_hog },
	};
	const char *secret_file = NULL, *listen_addr = NULL, *name = NULL;
	uint32_t tp = 1, layers = 0;
	char why[256];
	int opt;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'p':
			peer_addr = optarg;
			break;
		case 'l':
			listen_addr = optarg;
			break;
		case 's':
			secret_file = optarg;
			break;
		case 'c':
			name = optarg;
			break;
		case 'C':
			cluster = optarg;
			break;
		case 'i':
			io_ms = atoi(optarg);
			break;
		case 'b':
			nblocks = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 't':
			tp = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'L':
			layers = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'B':
			bind_addr = optarg;
			break;
		case 'n':
			sl_conns = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'g':
			sl_gap_ms = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'H':
			sl_hold_ms = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'P':
			sl_pattern = optarg;
			break;
		case 'X':
			sl_binds = optarg;
			break;
		case 'E':
			sl_expect_max = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'S':
			pd_seed = strtoull(optarg, NULL, 0);
			break;
		case 'N':
			pd_ns = optarg;
			break;
		case 'G':
			pd_seg = strtoull(optarg, NULL, 0);
			break;
		default:
			return 2;
		}
	}
	if (!secret_file || !name || (!peer_addr && !listen_addr))
		return 2;
	signal(SIGPIPE, SIG_IGN);
	geo_init(&g, layers, tp, 0, 0);
	if (peer_secret_load(secret_file, &secret, why, sizeof(why)) < 0) {
		fprintf(stderr, "peer-hostile: %s\n", why);
		return 2;
	}
	if (listen_addr)
		return s_case(name, listen_addr);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(cases[i].name, name))
			return cases[i].fn(name);
	fprintf(stderr, "peer-hostile: no case %s\n", name);
	return 2;
}
