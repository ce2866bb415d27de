/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

#define MAX_CHILDREN 64

static struct kvsd *daemon_;
static bool in_child;
static pid_t children[MAX_CHILDREN];
static unsigned nr_children;

static void kill_children(void)
{
	for (unsigned i = 0; i < nr_children; i++)
		if (children[i] > 0)
			kill(children[i], SIGKILL);
	for (unsigned i = 0; i < nr_children; i++)
		if (children[i] > 0)
			waitpid(children[i], NULL, 0);
	nr_children = 0;
}

void it_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: FAILED: %s: ", file, line, expr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	if (in_child)
		_exit(1); /* the parent cleans up */
	kill_children();
	if (daemon_) {
		kvsd_kill(daemon_);
		kvsd_dump_log(daemon_);
		kvsd_cleanup(daemon_);
	}
	exit(1);
}

void it_ok(const char *fmt, ...)
{
	va_list ap;

	printf("ok - ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void on_alarm(int sig)
{
	static const char msg[] = "watchdog: the test hangs; killing it\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nothing better to do */
	}
	for (unsigned i = 0; i < nr_children; i++)
		if (children[i] > 0)
			kill(children[i], SIGKILL);
	if (daemon_ && daemon_->pid > 0)
		kill(daemon_->pid, SIGKILL);
	_exit(1);
}

void it_watchdog(unsigned seconds)
{
	signal(SIGALRM, on_alarm);
	alarm(seconds);
}

void it_start(struct kvsd *d, const char *extra_ini)
{
	int r = kvsd_start(d, extra_ini);

	if (r < 0) {
		fprintf(stderr, "cannot start kvstashd: %s\n", strerror(-r));
		kvsd_cleanup(d);
		exit(1);
	}
	daemon_ = d;
}

void it_stop(struct kvsd *d)
{
	int st = kvsd_stop(d);

	CHECK(st == 0, "kvstashd exited with status %d", st);
	kvsd_cleanup(d);
	if (daemon_ == d)
		daemon_ = NULL;
}

pid_t it_spawn(it_child_fn fn, void *arg, unsigned i)
{
	pid_t pid;

	CHECK(nr_children < MAX_CHILDREN, "too many children");
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		in_child = true;
		nr_children = 0;
		/* Never outlive the test. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(0);
		_exit(fn(arg, i));
	}
	children[nr_children++] = pid;
	return pid;
}

void it_wait_all(void)
{
	unsigned left = nr_children;

	while (left) {
		int st;
		pid_t pid = wait(&st);

		if (pid < 0 && errno == EINTR)
			continue;
		CHECK(pid > 0, "wait: %s", strerror(errno));
		for (unsigned i = 0; i < nr_children; i++) {
			if (children[i] != pid)
				continue;
			children[i] = 0;
			left--;
			if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
				continue;
			it_fail(__FILE__, __LINE__, "child", "engine process %d %s %d", (int)pid,
				WIFEXITED(st) ? "exited with" : "killed by signal",
				WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		}
	}
	nr_children = 0;
}

void it_in_child(int (*fn)(void *arg, void *ret), void *arg, void *ret, size_t size)
{
	int p[2], st;
	pid_t pid;

	CHECK(pipe(p) == 0, "pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int r;

		in_child = true;
		nr_children = 0;
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(0);
		close(p[0]);
		r = fn(arg, ret);
		_exit(write(p[1], ret, size) == (ssize_t)size ? r : 1);
	}
	close(p[1]);
	CHECK(read(p[0], ret, size) == (ssize_t)size, "no result from the child");
	close(p[0]);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "child status 0x%x", st);
}

void it_become_nobody(void)
{
	if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
		_exit(SKIP);
	/* After setuid(), which clears it: never outlive a failed test. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
}

void *it_shared(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
	return p;
}

struct it_barrier {
	pthread_barrier_t b;
};

struct it_barrier *it_barrier_new(unsigned parties)
{
	struct it_barrier *b = it_shared(sizeof(*b));
	pthread_barrierattr_t a;

	pthread_barrierattr_init(&a);
	pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	CHECK(pthread_barrier_init(&b->b, &a, parties) == 0, "barrier");
	pthread_barrierattr_destroy(&a);
	return b;
}

void it_barrier_wait(struct it_barrier *b)
{
	pthread_barrier_wait(&b->b);
}

struct kvs_client *it_worker(const struct kvsd *d, const char *instance, const char *ns,
			     uint32_t rank, uint32_t tp, struct test_kv *kv,
			     enum test_layout_kind kind, unsigned layers, unsigned blocks,
			     uint64_t seg)
{
	struct kvs_client *c;
	int r = test_kv_alloc(kv, kind, layers, blocks, seg);

	CHECK(r == 0, "test_kv_alloc: %s", kvs_strerror(r));
	r = test_connect(d, KVS_ROLE_WORKER, instance, ns, rank, tp, &c);
	CHECK(r == 0, "connect %s rank %u: %s", instance, rank, kvs_strerror(r));
	r = test_kv_register(c, kv);
	CHECK(r == 0, "register %s rank %u: %s", instance, rank, kvs_strerror(r));
	return c;
}

void it_submit_wait(struct kvs_client *c, struct kvs_cqe *ret)
{
	struct kvs_cqe *cqe;
	int r;

	CHECK(kvs_submit(c) == 1, "kvs_submit");
	r = kvs_wait_cqe(c, &cqe, OP_TIMEOUT_MS);
	CHECK(r == 0, "kvs_wait_cqe: %s", kvs_strerror(r));
	*ret = *cqe;
	kvs_cqe_seen(c, cqe);
}

static struct kvs_sqe *sqe_of(struct kvs_client *c)
{
	struct kvs_sqe *sqe = kvs_get_sqe(c);

	CHECK(sqe, "no free SQE");
	return sqe;
}

struct kvs_cqe it_save(struct kvs_client *c, const uint8_t *keys, const uint32_t *ids, uint32_t n)
{
	struct kvs_cqe cqe;
	int r = kvs_prep_save(c, sqe_of(c), keys, ids, n, 0x5a);

	CHECK(r == 0, "kvs_prep_save: %s", kvs_strerror(r));
	it_submit_wait(c, &cqe);
	CHECK(cqe.user_data == 0x5a, "user_data %llx", (unsigned long long)cqe.user_data);
	return cqe;
}

struct kvs_cqe it_query(struct kvs_client *c, const uint8_t *keys, uint32_t n, uint32_t flags)
{
	struct kvs_cqe cqe;
	int r = kvs_prep_query(c, sqe_of(c), keys, n, 7, flags, 0x9e);

	CHECK(r == 0, "kvs_prep_query: %s", kvs_strerror(r));
	it_submit_wait(c, &cqe);
	CHECK(cqe.user_data == 0x9e, "user_data %llx", (unsigned long long)cqe.user_data);
	return cqe;
}

struct kvs_cqe it_load(struct kvs_client *c, uint64_t lease, const uint32_t *ids, uint32_t n,
		       uint32_t layer_begin, uint32_t layer_count)
{
	struct kvs_cqe cqe;
	int r = kvs_prep_load(c, sqe_of(c), lease, ids, n, layer_begin, layer_count, 0x10ad);

	CHECK(r == 0, "kvs_prep_load: %s", kvs_strerror(r));
	it_submit_wait(c, &cqe);
	CHECK(cqe.user_data == 0x10ad, "user_data %llx", (unsigned long long)cqe.user_data);
	return cqe;
}

struct kvs_cqe it_release(struct kvs_client *c, uint64_t lease)
{
	struct kvs_cqe cqe;
	int r = kvs_prep_release(c, sqe_of(c), lease, 0x4e1);

	CHECK(r == 0, "kvs_prep_release: %s", kvs_strerror(r));
	it_submit_wait(c, &cqe);
	CHECK(cqe.user_data == 0x4e1, "user_data %llx", (unsigned long long)cqe.user_data);
	return cqe;
}

void it_flush(struct kvs_client *c)
{
	struct kvs_cqe cqe;
	int r = kvs_prep_flush(c, sqe_of(c), 0, 0xf1);

	CHECK(r == 0, "kvs_prep_flush: %s", kvs_strerror(r));
	it_submit_wait(c, &cqe);
	CHECK_RES(cqe.res, 0, "FLUSH");
}

bool it_all_poison(struct test_kv *kv, uint8_t v)
{
	/* Whole allocations: catches a write anywhere, not only inside block views. */
	for (unsigned m = 0; m < kv->nmems; m++)
		for (uint64_t i = 0; i < kv->sizes[m]; i++)
			if (kv->bases[m][i] != v)
				return false;
	return true;
}

void it_keys(uint8_t *keys, unsigned n, uint64_t seed)
{
	uint64_t s = seed ^ 0x6b76737461736831ull;
	uint64_t parent[2] = { test_splitmix64(&s), test_splitmix64(&s) };

	for (unsigned i = 0; i < n; i++) {
		/* Both words of the parent, and the position, through the mixer. */
		uint64_t t = parent[0] + 0x632be59bd9b4e019ull * (i + 1);
		uint64_t k[2];

		k[0] = test_splitmix64(&t) ^ parent[1];
		k[1] = test_splitmix64(&t);
		t ^= k[0];
		k[0] = test_splitmix64(&t);
		memcpy(keys + 16 * (size_t)i, k, 16);
		parent[0] = k[0];
		parent[1] = k[1];
	}
}

void it_ids(uint32_t *ids, uint32_t n, uint32_t first)
{
	for (uint32_t i = 0; i < n; i++)
		ids[i] = first + i;
}

struct kvs_msg_stats_global it_stats(const struct kvsd *d)
{
	struct kvs_msg_stats_global g;
	struct kvs_client *a;
	int r = test_admin(d, &a);

	CHECK(r == 0, "admin connect: %s", kvs_strerror(r));
	r = test_stats(a, &g);
	CHECK(r == 0, "stats: %s", kvs_strerror(r));
	kvs_close(a);
	return g;
}

/* ---- raw socket, STATUS and /proc --------------------------------- */

int raw_connect(const char *sock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

int raw_send(int fd, const void *buf, size_t len, const int *fds, unsigned nfds)
{
	char ctl[CMSG_SPACE(sizeof(int) * 256)] __attribute__((aligned(8)));
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds > 256)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *c;

		memset(ctl, 0, sizeof(ctl));
		msg.msg_control = ctl;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	n = sendmsg(fd, &msg, MSG_NOSIGNAL);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EMSGSIZE;
}

ssize_t raw_recv(int fd, void *buf, size_t cap, int *fds, unsigned max, unsigned *ret_nfds,
		 int timeout_ms)
{
	char ctl[CMSG_SPACE(sizeof(int) * 64)] __attribute__((aligned(8)));
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctl,
		.msg_controllen = sizeof(ctl),
	};
	struct pollfd p = { .fd = fd, .events = POLLIN };
	unsigned nfds = 0;
	ssize_t n;
	int r;

	do {
		r = poll(&p, 1, timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		unsigned cnt;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		cnt = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (unsigned i = 0; i < cnt; i++) {
			int got;

			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fds && nfds < max)
				fds[nfds++] = got;
			else
				close(got);
		}
	}
	if (ret_nfds)
		*ret_nfds = nfds;
	return n;
}

bool raw_eof(int fd, int timeout_ms)
{
	uint64_t deadline = test_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	static uint8_t buf[KVS_MSG_MAX];

	for (;;) {
		uint64_t now = test_now_ns();
		ssize_t n;

		if (now >= deadline)
			return false;
		n = raw_recv(fd, buf, sizeof(buf), NULL, 0, NULL,
			     (int)((deadline - now) / 1000000 + 1));
		if (n == 0)
			return true;
		if (n < 0 && n != -EAGAIN)
			return n != -ETIMEDOUT;
	}
}

void raw_hello_init(struct kvs_msg_hello *h, uint32_t role, const char *instance, const char *ns,
		    uint32_t rank, uint32_t tp)
{
	memset(h, 0, sizeof(*h));
	h->hdr.type = KVS_MSG_HELLO;
	h->hdr.size = sizeof(*h);
	h->hdr.seq = 1;
	h->rev_major = KVS_WIRE_MAJOR;
	h->rev_minor = KVS_WIRE_MINOR;
	h->role = role;
	h->tp_rank = rank;
	h->tp_size = tp;
	h->world_size = tp;
	h->device_kind = KVS_DEVICE_HOST;
	if (instance)
		snprintf(h->instance, sizeof(h->instance), "%s", instance);
	if (ns)
		snprintf(h->ns, sizeof(h->ns), "%s", ns);
}

int raw_hello(int fd, const struct kvs_msg_hello *h, struct kvs_msg_hello_reply *rep, int *ret_fd)
{
	int fds[4];
	unsigned nfds = 0;
	ssize_t n;
	int r;

	memset(rep, 0, sizeof(*rep));
	*ret_fd = -1;
	r = raw_send(fd, h, sizeof(*h), NULL, 0);
	if (r < 0)
		return r;
	n = raw_recv(fd, rep, sizeof(*rep), fds, 4, &nfds, 5000);
	if (n < 0)
		return (int)n;
	if (n < (ssize_t)sizeof(struct kvs_msg_reply))
		return -EBADMSG;
	if (nfds)
		*ret_fd = fds[0];
	for (unsigned i = 1; i < nfds; i++)
		close(fds[i]);
	return rep->r.status;
}

struct find {
	uint64_t id;
	struct kvs_msg_status_session *out;
	bool found;
};

static int find_cb(void *arg, const struct kvs_msg_hdr *m)
{
	struct find *f = arg;
	const struct kvs_msg_status_session *s = (const void *)m;

	if (m->type == KVS_MSG_STATUS_SESSION && s->session_id == f->id) {
		memcpy(f->out, s, sizeof(*s));
		f->found = true;
	}
	return 0;
}

int status_session(struct kvs_client *admin, uint64_t id, struct kvs_msg_status_session *ret)
{
	struct find f = { .id = id, .out = ret };
	int r = kvs_admin_request(admin, KVS_MSG_STATUS, find_cb, &f);

	if (r < 0)
		return r;
	return f.found ? 0 : -ENOENT;
}

#define WAIT_COUNT(expr)                                                               \
	do {                                                                           \
		uint64_t deadline = test_now_ns() + (uint64_t)timeout_ms * 1000000ull; \
		int n;                                                                 \
		while ((n = (expr)) != want && test_now_ns() < deadline)               \
			usleep(5000);                                                  \
		return n;                                                              \
	} while (0)

int wait_fd_count(pid_t pid, int want, int timeout_ms)
{
	WAIT_COUNT(proc_fd_count(pid));
}

int wait_memfd_count(pid_t pid, const char *name, int want, int timeout_ms)
{
	WAIT_COUNT(proc_memfd_count(pid, name));
}

int wait_map_count(pid_t pid, const char *needle, int want, int timeout_ms)
{
	WAIT_COUNT(proc_map_count(pid, needle));
}

int wait_log_count(const struct kvsd *d, const char *needle, int want, int timeout_ms)
{
	WAIT_COUNT((int)kvsd_log_count(d, needle));
}

bool pid_alive(pid_t pid)
{
	char path[64], line[512];
	char *p;
	FILE *f;

	if (pid <= 0 || kill(pid, 0) < 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	p = fgets(line, sizeof(line), f);
	fclose(f);
	/* "pid (comm) S ...": the state follows the last ')'. */
	if (!p || !(p = strrchr(line, ')')))
		return false;
	return p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

const char *kvstashd_bin(void)
{
	static char bin[512];
	const char *b = getenv("top_builddir");

	snprintf(bin, sizeof(bin), "%s/sidecar/kvstashd", b ? b : ".");
	return bin;
}
