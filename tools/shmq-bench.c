/* SPDX-License-Identifier: MIT */
/*
 * shmq-bench: what a libshmq ring costs between two processes, next to
 * the RPC it replaces (a Unix-domain socketpair), measured in one run on
 * one machine.
 *
 *   round trip   a 64-byte request one way, a 64-byte reply the other;
 *                p50/p99/p99.9 over --iterations
 *                  shmq busy-poll     both sides spin on their ring
 *                  shmq sleep/wake    both sides sleep in shmq_cons_wait()
 *                                     (NEED_WAKEUP + futex) every time
 *                  unix socketpair    blocking SOCK_SEQPACKET write/read
 *   streaming    --entries 64-byte entries one way, entries per second
 *                  shmq, batches of --batch and of 1
 *                  unix socketpair, one 64-byte message per entry
 *
 * The two processes are pinned to two different CPUs when the affinity
 * mask allows it.  Each test gets a fresh region and a fresh child that
 * attaches to it through the fd, like a real peer.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shmq/shmq.h>

#define APP_MAGIC	0x42454e43u /* "CNEB" */
#define REQ_ID		1
#define REP_ID		2
#define CTL_ID		3
#define ESZ		64
#define RTT_CAPACITY	64
#define STREAM_CAPACITY 4096
#define WARMUP		1000
#define STOP		UINT64_MAX
#define SEC		1000000000LL

struct msg {
	uint64_t seq;
	uint64_t word[7];
};
_Static_assert(sizeof(struct msg) == ESZ, "64-byte messages");

/* Shared between the two processes of one test, in an area part. */
struct ctl {
	uint32_t go;
	uint32_t resv;
	uint64_t wakes; /* wake syscalls the child made */
	uint64_t pad[6];
};

struct opts {
	uint64_t iterations;
	uint64_t entries;
	uint32_t batch;
	bool json;
	bool pin;
	int cpu[2]; /* parent, child; -1: not pinned */
};

struct lat {
	uint64_t p50, p99, p999;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

__attribute__((noreturn)) static void die(const char *what, int err)
{
	fprintf(stderr, "shmq-bench: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(EXIT_FAILURE);
}

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		die("sched_setaffinity", errno);
}

/* The first two CPUs we may run on; fewer than two: no pinning. */
static void pick_cpus(struct opts *o)
{
	cpu_set_t set;
	int found = 0;

	o->cpu[0] = o->cpu[1] = -1;
	if (!o->pin || sched_getaffinity(0, sizeof(set), &set) < 0)
		return;
	for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
		if (CPU_ISSET(c, &set))
			o->cpu[found++] = c;
	if (found < 2)
		o->cpu[0] = o->cpu[1] = -1;
}

/* ---- regions and children ---------------------------------------- */

struct bench {
	struct shmq_region *region;
	struct shmq_ring req, rep; /* our ends: producer of req, consumer of rep */
	struct ctl *ctl;
};

static void bench_region(struct bench *b, uint32_t capacity)
{
	const struct shmq_part_spec spec[] = {
		{ .kind = SHMQ_PART_RING, .id = REQ_ID, .entry_size = ESZ, .capacity = capacity },
		{ .kind = SHMQ_PART_RING, .id = REP_ID, .entry_size = ESZ, .capacity = capacity },
		{ .kind = SHMQ_PART_AREA, .id = CTL_ID, .size = sizeof(struct ctl) },
	};
	void *base;
	int r;

	r = shmq_region_create("shmq-bench", APP_MAGIC, 0, spec, 3, &b->region);
	if (r < 0)
		die("shmq_region_create", r);
	if ((r = shmq_ring_init(&b->req, b->region, REQ_ID, SHMQ_PRODUCER)) < 0 ||
	    (r = shmq_ring_init(&b->rep, b->region, REP_ID, SHMQ_CONSUMER)) < 0 ||
	    (r = shmq_region_area(b->region, CTL_ID, &base, NULL)) < 0)
		die("ring setup", r);
	b->ctl = base;
}

/* The child's view: attach through the fd, take the other ends. */
static void child_region(const struct bench *parent, struct bench *b)
{
	void *base;
	int r;

	r = shmq_region_attach(shmq_region_fd(parent->region), APP_MAGIC, &b->region);
	if (r < 0)
		die("shmq_region_attach", r);
	if ((r = shmq_ring_init(&b->req, b->region, REQ_ID, SHMQ_CONSUMER)) < 0 ||
	    (r = shmq_ring_init(&b->rep, b->region, REP_ID, SHMQ_PRODUCER)) < 0 ||
	    (r = shmq_region_area(b->region, CTL_ID, &base, NULL)) < 0)
		die("child ring setup", r);
	b->ctl = base;
}

/* Every benchmark's peer process, on the second CPU: 0 in the child, as fork() says. */
static pid_t fork_peer(const struct opts *o)
{
	pid_t pid = fork();

	if (pid < 0)
		die("fork", errno);
	if (pid == 0)
		pin(o->cpu[1]);
	return pid;
}

static void reap(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		die("child", ECHILD);
}

/* ---- round trips ------------------------------------------------- */

/* Send one message; returns 1 if that took a wake syscall. */
static int put(struct shmq_ring *r, const struct msg *m)
{
	uint32_t idx;
	int n;

	while ((n = shmq_prod_reserve(r, 1, &idx)) == 0)
		relax();
	if (n < 0)
		die("shmq_prod_reserve", n);
	memcpy(shmq_ring_entry(r, idx), m, sizeof(*m));
	/* Same as a plain commit, but tells us whether the peer slept. */
	shmq_prod_commit(r, SHMQ_COMMIT_NOWAKE);
	return shmq_prod_wake(r);
}

/* Take one message, spinning or sleeping until there is one. */
static void get(struct shmq_ring *r, struct msg *m, bool sleep)
{
	uint32_t idx;
	int n;

	for (;;) {
		n = shmq_cons_peek(r, 1, &idx);
		if (n > 0)
			break;
		if (n < 0)
			die("shmq_cons_peek", n);
		if (sleep) {
			n = shmq_cons_wait(r, 10 * SEC);
			if (n < 0)
				die("shmq_cons_wait", n);
		} else {
			relax();
		}
	}
	memcpy(m, shmq_ring_entry(r, idx), sizeof(*m));
	shmq_cons_release(r, 1);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static struct lat percentiles(uint64_t *v, uint64_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return (struct lat){
		.p50 = v[n / 2],
		.p99 = v[n * 99 / 100],
		.p999 = v[n * 999 / 1000],
	};
}

/* Wake syscalls made by each side in the last rtt_shmq() run. */
static uint64_t last_wakes[2];

static struct lat rtt_shmq(const struct opts *o, bool sleep)
{
	uint64_t n = o->iterations, *t = calloc(n, sizeof(*t));
	struct bench b, c;
	struct msg m = { 0 };
	pid_t pid;

	if (!t)
		die("calloc", ENOMEM);
	bench_region(&b, RTT_CAPACITY);
	pid = fork_peer(o);
	if (pid == 0) {
		/* Echo every request until STOP. */
		child_region(&b, &c);
		for (;;) {
			get(&c.req, &m, sleep);
			if (m.seq == STOP)
				_exit(0);
			m.word[0] = ~m.seq;
			c.ctl->wakes += (uint64_t)put(&c.rep, &m);
		}
	}
	pin(o->cpu[0]);
	last_wakes[0] = 0;
	for (uint64_t i = 0; i < WARMUP + n; i++) {
		int64_t t0 = now_ns();

		m.seq = i;
		last_wakes[0] += (uint64_t)put(&b.req, &m);
		get(&b.rep, &m, sleep);
		if (m.seq != i || m.word[0] != ~i)
			die("round trip", EBADMSG);
		if (i >= WARMUP)
			t[i - WARMUP] = (uint64_t)(now_ns() - t0);
	}
	m.seq = STOP;
	put(&b.req, &m);
	reap(pid);
	last_wakes[1] = b.ctl->wakes;
	shmq_region_destroy(b.region);

	struct lat l = percentiles(t, n);
	free(t);
	return l;
}

static void xfer(int fd, void *buf, bool out)
{
	ssize_t r = out ? write(fd, buf, ESZ) : read(fd, buf, ESZ);

	if (r != ESZ)
		die(out ? "write" : "read", r < 0 ? errno : EIO);
}

static struct lat rtt_unix(const struct opts *o)
{
	uint64_t n = o->iterations, *t = calloc(n, sizeof(*t));
	struct msg m = { 0 };
	int sv[2];
	pid_t pid;

	if (!t)
		die("calloc", ENOMEM);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair", errno);
	pid = fork_peer(o);
	if (pid == 0) {
		close(sv[0]);
		for (;;) {
			xfer(sv[1], &m, false);
			if (m.seq == STOP)
				_exit(0);
			m.word[0] = ~m.seq;
			xfer(sv[1], &m, true);
		}
	}
	close(sv[1]);
	pin(o->cpu[0]);
	for (uint64_t i = 0; i < WARMUP + n; i++) {
		int64_t t0 = now_ns();

		m.seq = i;
		xfer(sv[0], &m, true);
		xfer(sv[0], &m, false);
		if (m.seq != i || m.word[0] != ~i)
			die("round trip", EBADMSG);
		if (i >= WARMUP)
			t[i - WARMUP] = (uint64_t)(now_ns() - t0);
	}
	m.seq = STOP;
	xfer(sv[0], &m, true);
	reap(pid);
	close(sv[0]);

	struct lat l = percentiles(t, n);
	free(t);
	return l;
}

/* ---- streaming --------------------------------------------------- */

static void wait_go(struct ctl *ctl)
{
	/* Acquire pairs with the release store of go in stream_shmq(). */
	while (!__atomic_load_n(&ctl->go, __ATOMIC_ACQUIRE))
		relax();
}

/* Entries per second through one ring, in batches of @batch. */
static double stream_shmq(const struct opts *o, uint32_t batch)
{
	uint64_t total = o->entries, seq = 0;
	struct bench b, c;
	int64_t t0, t1;
	pid_t pid;

	bench_region(&b, STREAM_CAPACITY);
	pid = fork_peer(o);
	if (pid == 0) {
		/* Producer of the reply ring: whole 64-byte entries, one commit per batch. */
		child_region(&b, &c);
		wait_go(c.ctl);
		while (seq < total) {
			uint32_t want = total - seq < batch ? (uint32_t)(total - seq) : batch, idx;
			int n = shmq_prod_reserve(&c.rep, want, &idx);

			if (n < 0)
				_exit(1);
			if (n == 0) {
				relax();
				continue;
			}
			for (int i = 0; i < n; i++) {
				struct msg *e = shmq_ring_entry(&c.rep, idx + (uint32_t)i);

				e->seq = seq + (uint64_t)i;
				for (int k = 0; k < 7; k++)
					e->word[k] = seq;
			}
			shmq_prod_commit(&c.rep, 0);
			seq += (uint64_t)n;
		}
		_exit(0);
	}

	/* Consumer: copy every entry out and check its sequence number. */
	pin(o->cpu[0]);
	/* Release pairs with the load-acquire of go in wait_go(). */
	t0 = now_ns();
	__atomic_store_n(&b.ctl->go, 1, __ATOMIC_RELEASE);
	while (seq < total) {
		uint32_t idx;
		int n = shmq_cons_peek(&b.rep, batch, &idx);

		if (n < 0)
			die("shmq_cons_peek", n);
		if (n == 0) {
			relax();
			continue;
		}
		for (int i = 0; i < n; i++) {
			struct msg m;

			memcpy(&m, shmq_ring_entry(&b.rep, idx + (uint32_t)i), sizeof(m));
			if (m.seq != seq)
				die("stream order", EBADMSG);
			seq++;
		}
		shmq_cons_release(&b.rep, (uint32_t)n);
	}
	t1 = now_ns();
	reap(pid);
	shmq_region_destroy(b.region);
	return (double)total * 1e9 / (double)(t1 - t0);
}

/* The same stream as one 64-byte SOCK_SEQPACKET message per entry. */
static double stream_unix(const struct opts *o, uint64_t total)
{
	struct msg m = { 0 };
	int64_t t0, t1;
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair", errno);
	pid = fork_peer(o);
	if (pid == 0) {
		close(sv[0]);
		/* Wait for the go byte so that start-up is not timed. */
		xfer(sv[1], &m, false);
		for (uint64_t i = 0; i < total; i++) {
			m.seq = i;
			xfer(sv[1], &m, true);
		}
		_exit(0);
	}
	close(sv[1]);
	pin(o->cpu[0]);
	t0 = now_ns();
	xfer(sv[0], &m, true);
	for (uint64_t i = 0; i < total; i++) {
		xfer(sv[0], &m, false);
		if (m.seq != i)
			die("stream order", EBADMSG);
	}
	t1 = now_ns();
	reap(pid);
	close(sv[0]);
	return (double)total * 1e9 / (double)(t1 - t0);
}

/* ---- report ------------------------------------------------------ */

/* "AMD EPYC, 2 CPUs, Linux 6.1.0": enough to tell two runs' machines apart. */
static void machine(char *buf, size_t len)
{
	char model[128] = "unknown CPU", line[256];
	struct utsname u;
	FILE *f = fopen("/proc/cpuinfo", "re");

	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (!strncmp(line, "model name", 10) && colon) {
			snprintf(model, sizeof(model), "%s", colon + 2);
			model[strcspn(model, "\n")] = 0;
			break;
		}
	}
	if (f)
		fclose(f);
	if (uname(&u) < 0)
		snprintf(u.release, sizeof(u.release), "?");
	snprintf(buf, len, "%s, %ld CPUs, Linux %s", model, sysconf(_SC_NPROCESSORS_ONLN),
		 u.release);
}

static void row_lat(const struct opts *o, const char *name, struct lat l, struct lat base)
{
	double ratio = (double)base.p50 / (double)l.p50;

	if (o->json)
		printf("{\"test\":\"%s\",\"p50_ns\":%" PRIu64 ",\"p99_ns\":%" PRIu64
		       ",\"p999_ns\":%" PRIu64 ",\"unix_p50_ratio\":%.2f}\n",
		       name, l.p50, l.p99, l.p999, ratio);
	else
		printf("| %-34s | %10" PRIu64 " | %10" PRIu64 " | %10" PRIu64 " | %9.1fx |\n", name,
		       l.p50, l.p99, l.p999, ratio);
}

static void row_rate(const struct opts *o, const char *name, double rate, double base)
{
	if (o->json)
		printf("{\"test\":\"%s\",\"entries_per_s\":%.0f,\"bytes_per_s\":%.0f,"
		       "\"unix_ratio\":%.2f}\n",
		       name, rate, rate * ESZ, rate / base);
	else
		printf("| %-34s | %10.1f | %10.2f | %10s | %9.1fx |\n", name, rate / 1e6,
		       rate * ESZ / 1e9, "", rate / base);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shmq-bench [--iterations N] [--entries N] [--batch N] [--json] [--no-pin]\n"
		"  --iterations N  round trips per latency test (default 200000)\n"
		"  --entries N     entries per streaming test (default 50000000)\n"
		"  --batch N       entries per commit when streaming (default 64)\n"
		"  --json          one JSON object per result instead of a table\n"
		"  --no-pin        do not pin the two processes to different CPUs\n");
}

static uint64_t number(const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || !*s || *end || v == 0) {
		usage(stderr);
		exit(EXIT_FAILURE);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "iterations", required_argument, NULL, 'i' },
		{ "entries", required_argument, NULL, 'e' },
		{ "batch", required_argument, NULL, 'b' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-pin", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct opts o = { .iterations = 200000, .entries = 50000000, .batch = 64, .pin = true };
	struct lat busy, sleepwake, sock;
	uint64_t busy_wakes, sleep_wakes;
	double batched, single, sockrate;
	uint64_t unix_entries;
	int c;

	while ((c = getopt_long(argc, argv, "i:e:b:jPh", longopts, NULL)) != -1) {
		switch (c) {
		case 'i':
			o.iterations = number(optarg);
			break;
		case 'e':
			o.entries = number(optarg);
			break;
		case 'b':
			o.batch = (uint32_t)number(optarg);
			if (o.batch > STREAM_CAPACITY)
				o.batch = STREAM_CAPACITY;
			break;
		case 'j':
			o.json = true;
			break;
		case 'P':
			o.pin = false;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EXIT_FAILURE;
		}
	}
	pick_cpus(&o);
	/* A message per entry is ~100x slower: keep its run time comparable. */
	unix_entries = o.entries / 20 ? o.entries / 20 : 1;

	sock = rtt_unix(&o);
	busy = rtt_shmq(&o, false);
	busy_wakes = last_wakes[0] + last_wakes[1];
	sleepwake = rtt_shmq(&o, true);
	sleep_wakes = last_wakes[0] + last_wakes[1];
	batched = stream_shmq(&o, o.batch);
	single = stream_shmq(&o, 1);
	sockrate = stream_unix(&o, unix_entries);

	if (!o.json) {
		char m[256];

		machine(m, sizeof(m));
		printf("machine: %s\n", m);
		printf("shmq-bench %s: 64-byte entries, consumer on CPU %d, producer on CPU %d\n"
		       "%" PRIu64 " round trips per latency test, %" PRIu64
		       " entries per shmq stream, %" PRIu64 " per unix stream\n\n",
		       shmq_version(), o.cpu[0], o.cpu[1], o.iterations, o.entries, unix_entries);
		printf("| %-34s | %10s | %10s | %10s | %10s |\n", "round trip (64 B each way)",
		       "p50 ns", "p99 ns", "p99.9 ns", "vs unix");
		printf("|%s|%s|%s|%s|%s|\n", "------------------------------------",
		       "-----------:", "-----------:", "-----------:", "----------:");
	}
	row_lat(&o, "shmq busy-poll", busy, sock);
	row_lat(&o, "shmq sleep/wake (futex)", sleepwake, sock);
	row_lat(&o, "unix socketpair (SEQPACKET)", sock, sock);
	if (o.json)
		printf("{\"test\":\"wake syscalls\",\"busy_poll\":%" PRIu64
		       ",\"sleep_wake\":%" PRIu64 ",\"messages\":%" PRIu64 "}\n",
		       busy_wakes, sleep_wakes, 2 * (WARMUP + o.iterations));
	else
		printf("\nwake syscalls for %" PRIu64 " messages: busy-poll %" PRIu64
		       ", sleep/wake %" PRIu64 "\n",
		       2 * (WARMUP + o.iterations), busy_wakes, sleep_wakes);
	if (!o.json) {
		char name[64];

		printf("\n| %-34s | %10s | %10s | %10s | %10s |\n", "streaming (64 B entries)",
		       "M entries/s", "GB/s", "", "vs unix");
		printf("|%s|%s|%s|%s|%s|\n", "------------------------------------",
		       "-----------:", "-----------:", "-----------:", "----------:");
		snprintf(name, sizeof(name), "shmq batch %u", o.batch);
		row_rate(&o, name, batched, sockrate);
	} else {
		row_rate(&o, "shmq batched", batched, sockrate);
	}
	row_rate(&o, "shmq batch 1", single, sockrate);
	row_rate(&o, "unix socketpair, 1 msg per entry", sockrate, sockrate);
	return 0;
}
