/* SPDX-License-Identifier: MIT */
/*
 * kvspeer-bench: libkvspeer's transfer throughput and handoff latency,
 * against a raw TCP stream between the same two hosts (or namespaces) in
 * the same run.  tools/kvspeer-bench.sh runs the whole table between two
 * network namespaces; this program is one side of one measurement:
 *
 *   kvspeer-bench serve     --listen A:P --allow CIDR --secret F --block-bytes B --blocks N [UCX]
 *   kvspeer-bench fetch     --peer A:P --secret F --block-bytes B --blocks N --repeat R [--cold] [UCX]
 *   kvspeer-bench raw-serve --listen A:P [--block-bytes B]
 *   kvspeer-bench raw-fetch --peer A:P --bytes B --repeat R
 *     UCX: --transport ucx --ucx-allow-tcp --ucx-devices DEV
 *
 * fetch prints "fetch MBps=X median_ms=Y min_ms=Z" (MB = 10^6 bytes);
 * --cold makes a new service (so a new connection and handshake) for
 * every fetch, as a decode node's first fetch from a prefill node.
 * raw-fetch prints "raw MBps=X": one connection, R transfers of B bytes,
 * each asked for with an 8-byte request, the same shape as a fetch;
 * raw-serve sends them in writes of B bytes (default 16 MiB), the size of
 * the writes a block server makes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <kvstash/peer.h>

#define TOOL_NAME "kvspeer-bench"
#include "tool.h"

static const uint8_t digest[KVSPEER_DIGEST_SIZE] = { 'b', 'e', 'n', 'c', 'h' };

struct bench {
	uint8_t *mem;
	uint64_t block_bytes;
	uint32_t blocks;
};

/* tool.h's monotonic clock, in seconds. */
static double now_s(void)
{
	return (double)now_ns() / 1e9;
}

static void key_of(uint32_t i, uint8_t key[KVSPEER_KEY_SIZE])
{
	memset(key, 0, KVSPEER_KEY_SIZE);
	memcpy(key, &i, sizeof(i));
}

static int b_lock(void *arg, const struct kvspeer_lock_req *req, struct kvspeer_shard *ret,
		  uint64_t *cookies)
{
	struct bench *b = arg;
	uint32_t n = 0;

	if (req->nr_shards != 1)
		return 0;
	for (uint32_t i = 0; i < req->nr_keys; i++) {
		uint32_t idx;

		memcpy(&idx, req->keys + (size_t)i * KVSPEER_KEY_SIZE, sizeof(idx));
		if (idx >= b->blocks)
			break;
		ret[i].addr = b->mem + (uint64_t)idx * b->block_bytes;
		ret[i].len = b->block_bytes;
		ret[i].generation = 1;
		cookies[i] = idx;
		n++;
	}
	return (int)n;
}

static void b_unlock(void *arg, const uint64_t *cookies, uint32_t nr)
{
}

static uint64_t b_generation(void *arg, uint64_t cookie, uint32_t shard)
{
	return 1;
}

static void *b_alloc(void *arg, uint32_t block, uint32_t shard, uint64_t len)
{
	struct bench *b = arg;

	return block < b->blocks && len == b->block_bytes ? b->mem + (uint64_t)block * len : NULL;
}

static void log_cb(void *arg, int level, const char *msg)
{
	if (level <= KVSPEER_LOG_WARNING)
		fprintf(stderr, "kvspeer-bench: %s\n", msg);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static uint8_t *big(uint64_t bytes)
{
	uint8_t *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap %llu bytes: %s", (unsigned long long)bytes, strerror(errno));
	/* Fault it in now: page faults are not what is measured. */
	memset(p, 0x5a, bytes);
	return p;
}

static int tcp_socket(const char *addr, struct sockaddr_in *sa)
{
	char host[64];
	const char *colon = strrchr(addr, ':');
	int one = 1, fd;

	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		return -1;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return -1;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	return fd;
}

/* The baseline: a plain TCP stream, the bytes sent straight from a buffer. */
static int raw_serve(const char *addr, uint64_t chunk)
{
	struct sockaddr_in sa;
	int fd = tcp_socket(addr, &sa), c;
	uint64_t want;
	static uint8_t buf[16 << 20];

	memset(buf, 0x5a, sizeof(buf));
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4) < 0) {
		perror("raw-serve");
		return 2;
	}
	printf("listening %s\n", addr);
	fflush(stdout);
	while ((c = accept(fd, NULL, NULL)) >= 0) {
		while (recv(c, &want, sizeof(want), MSG_WAITALL) == sizeof(want)) {
			while (want) {
				size_t n = want < chunk ? (size_t)want : (size_t)chunk;
				ssize_t w = send(c, buf, n, MSG_NOSIGNAL);

				if (w <= 0)
					break;
				want -= (uint64_t)w;
			}
		}
		close(c);
	}
	return 0;
}

static int raw_fetch(const char *addr, uint64_t bytes, int repeat)
{
	struct sockaddr_in sa;
	int fd = tcp_socket(addr, &sa);
	uint8_t *dst = big(bytes);
	double t0, total = 0;

	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("raw-fetch");
		return 2;
	}
	for (int i = 0; i < repeat; i++) {
		uint64_t got = 0;

		t0 = now_s();
		if (send(fd, &bytes, sizeof(bytes), 0) != sizeof(bytes))
			return 2;
		while (got < bytes) {
			ssize_t r = recv(fd, dst + got, bytes - got, 0);

			if (r <= 0)
				return 2;
			got += (uint64_t)r;
		}
		total += now_s() - t0;
	}
	printf("raw MBps=%.0f\n", (double)bytes * repeat / total / 1e6);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", 1, NULL, 'l' },
		{ "allow", 1, NULL, 'a' },
		{ "secret", 1, NULL, 's' },
		{ "peer", 1, NULL, 'p' },
		{ "block-bytes", 1, NULL, 'B' },
		{ "blocks", 1, NULL, 'n' },
		{ "repeat", 1, NULL, 'r' },
		{ "cold", 0, NULL, 'c' },
		{ "transport", 1, NULL, 'T' },
		{ "ucx-allow-tcp", 0, NULL, 'U' },
		{ "ucx-devices", 1, NULL, 'D' },
		{ "bytes", 1, NULL, 'b' },
		{ NULL, 0, NULL, 0 },
	};
	static const struct kvspeer_host_ops ops = { b_lock, b_unlock, b_generation };
	struct kvspeer_params p;
	struct bench b = { .block_bytes = 2 << 20, .blocks = 64 };
	const char *mode, *listen_addr = NULL, *peer = NULL;
	uint64_t bytes = 0, chunk = 16u << 20; /* raw-serve's writes */
	int repeat = 5, cold = 0, opt, r;
	struct kvspeer *kp = NULL;

	if (argc < 2) {
		fprintf(stderr, "usage: kvspeer-bench serve|fetch|raw-serve|raw-fetch ...\n");
		return 2;
	}
	mode = argv[1];
	optind = 2;
	kvspeer_params_init(&p);
	p.cluster = "bench";
	p.log = log_cb;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			listen_addr = optarg;
			break;
		case 'a':
			p.allow = optarg;
			break;
		case 's':
			p.secret_file = optarg;
			break;
		case 'p':
			peer = optarg;
			break;
		case 'B':
			b.block_bytes = strtoull(optarg, NULL, 0);
			chunk = b.block_bytes < (16u << 20) ? b.block_bytes : 16u << 20;
			break;
		case 'n':
			b.blocks = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'r':
			repeat = atoi(optarg);
			break;
		case 'c':
			cold = 1;
			break;
		case 'T':
			p.transport = !strcmp(optarg, "ucx") ? KVSPEER_TRANSPORT_UCX
							     : KVSPEER_TRANSPORT_TCP;
			break;
		case 'U':
			p.flags |= KVSPEER_F_UCX_ALLOW_TCP;
			break;
		case 'D':
			p.ucx_devices = optarg;
			break;
		case 'b':
			bytes = strtoull(optarg, NULL, 0);
			break;
		default:
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(mode, "raw-serve"))
		return listen_addr && chunk ? raw_serve(listen_addr, chunk) : 2;
	if (!strcmp(mode, "raw-fetch"))
		return peer && bytes ? raw_fetch(peer, bytes, repeat) : 2;
	if (!b.blocks || b.blocks > KVSPEER_MAX_KEYS || !b.block_bytes)
		return 2;
	b.mem = big(b.block_bytes * b.blocks);
	if (!strcmp(mode, "serve")) {
		char addr[KVSPEER_ADDR_MAX];
		char line[64];

		p.node = "bench-serve";
		p.listen = listen_addr;
		p.ops = &ops;
		p.host = &b;
		r = kvspeer_new(&p, &kp);
		if (r < 0 || kvspeer_mem_register(kp, b.mem, b.block_bytes * b.blocks) < 0) {
			printf("error kvspeer_new: %d\n", r);
			return 3;
		}
		kvspeer_local_addr(kp, addr, sizeof(addr));
		printf("listening %s\n", addr);
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin))
			;
		kvspeer_free(kp);
		return 0;
	}
	if (strcmp(mode, "fetch") || !peer)
		return 2;
	{
		struct kvspeer_fetch_params f;
		uint8_t *keys = calloc(b.blocks, KVSPEER_KEY_SIZE);
		double *ms = calloc((size_t)repeat, sizeof(double)), total = 0;

		p.node = "bench-fetch";
		for (uint32_t i = 0; i < b.blocks; i++)
			key_of(i, keys + (size_t)i * KVSPEER_KEY_SIZE);
		kvspeer_fetch_params_init(&f);
		f.peer = peer;
		f.digest = digest;
		f.keys = keys;
		f.nr_keys = b.blocks;
		f.nr_shards = 1;
		f.timeout_ms = 60000;
		f.alloc = b_alloc;
		f.arg = &b;
		if (!cold && kvspeer_new(&p, &kp) < 0)
			return 3;
		/* One untimed fetch: the connection (and for UCX the endpoint) set up. */
		if (!cold && kvspeer_fetch(kp, &f, NULL) != (int)b.blocks) {
			fprintf(stderr, "kvspeer-bench: warm-up fetch came short\n");
			return 1;
		}
		for (int i = 0; i < repeat; i++) {
			double t0;
			int err = 0, n;

			/* Cold: a service with no pooled connection (connect and handshake timed). */
			if (cold && kvspeer_new(&p, &kp) < 0)
				return 3;
			t0 = now_s();
			n = kvspeer_fetch(kp, &f, &err);
			ms[i] = (now_s() - t0) * 1e3;
			if (cold) {
				kvspeer_free(kp);
				kp = NULL;
			}
			if (n != (int)b.blocks) {
				fprintf(stderr, "kvspeer-bench: fetched %d of %u (%s)\n", n,
					b.blocks, strerror(-err));
				return 1;
			}
			total += ms[i];
		}
		kvspeer_free(kp);
		qsort(ms, (size_t)repeat, sizeof(double), cmp_double);
		printf("fetch MBps=%.0f median_ms=%.2f min_ms=%.2f\n",
		       (double)b.block_bytes * b.blocks * repeat / (total / 1e3) / 1e6,
		       ms[repeat / 2], ms[0]);
		free(ms);
		free(keys);
	}
	return 0;
}
