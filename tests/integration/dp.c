/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp.h"

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

void dp_fail(const char *file, int line, const char *expr, const char *fmt, ...)
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

void dp_ok(const char *fmt, ...)
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

void dp_watchdog(unsigned seconds)
{
	signal(SIGALRM, on_alarm);
	alarm(seconds);
}

void dp_start(struct kvsd *d, const char *extra_ini)
{
	int r = kvsd_start(d, extra_ini);

	if (r < 0) {
		fprintf(stderr, "cannot start kvstashd: %s\n", strerror(-r));
		kvsd_cleanup(d);
		exit(1);
	}
	daemon_ = d;
}

void dp_stop(struct kvsd *d)
{
	int st = kvsd_stop(d);

	CHECK(st == 0, "kvstashd exited with status %d", st);
	kvsd_cleanup(d);
	if (daemon_ == d)
		daemon_ = NULL;
}

pid_t dp_spawn(dp_child_fn fn, void *arg, unsigned i)
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

void dp_wait_all(void)
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
			dp_fail(__FILE__, __LINE__, "child", "engine process %d %s %d", (int)pid,
				WIFEXITED(st) ? "exited with" : "killed by signal",
				WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		}
	}
	nr_children = 0;
}

void *dp_shared(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
	return p;
}

struct dp_barrier {
	pthread_barrier_t b;
};

struct dp_barrier *dp_barrier_new(unsigned parties)
{
	struct dp_barrier *b = dp_shared(sizeof(*b));
	pthread_barrierattr_t a;

	pthread_barrierattr_init(&a);
	pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	CHECK(pthread_barrier_init(&b->b, &a, parties) == 0, "barrier");
	pthread_barrierattr_destroy(&a);
	return b;
}

void dp_barrier_wait(struct dp_barrier *b)
{
	pthread_barrier_wait(&b->b);
}

struct kvs_client *dp_worker(const struct kvsd *d, const char *instance, const char *ns,
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

void dp_submit_wait(struct kvs_client *c, struct kvs_cqe *ret)
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

struct kvs_cqe dp_save(struct kvs_client *c, const uint8_t *keys, const uint32_t *ids, uint32_t n)
{
	struct kvs_cqe cqe;
	int r = kvs_prep_save(c, sqe_of(c), keys, ids, n, 0x5a);

	CHECK(r == 0, "kvs_prep_save: %s", kvs_strerror(r));
	dp_submit_wait(c, &cqe);
	CHECK(cqe.user_data == 0x5a, "user_data %llx", (unsigned long long)cqe.user_data);
	return cqe;
}

struct kvs_cqe dp_query(struct kvs_client *c, const uint8_t *keys, uint32_t n, uint32_t flags)
{
	struct kvs_cqe cqe;
	int r = kvs_prep_query(c, sqe_of(c), keys, n, 7, flags, 0x9e);

	CHECK(r == 0, "kvs_prep_query: %s", kvs_strerror(r));
	dp_submit_wait(c, &cqe);
	CHECK(cqe.user_data == 0x9e, "user_data %llx", (unsigned long long)cqe.user_data);
	return cqe;
}

struct kvs_cqe dp_load(struct kvs_client *c, uint64_t lease, const uint32_t *ids, uint32_t n,
		       uint32_t layer_begin, uint32_t layer_count)
{
	struct kvs_cqe cqe;
	int r = kvs_prep_load(c, sqe_of(c), lease, ids, n, layer_begin, layer_count, 0x10ad);

	CHECK(r == 0, "kvs_prep_load: %s", kvs_strerror(r));
	dp_submit_wait(c, &cqe);
	CHECK(cqe.user_data == 0x10ad, "user_data %llx", (unsigned long long)cqe.user_data);
	return cqe;
}

struct kvs_cqe dp_release(struct kvs_client *c, uint64_t lease)
{
	struct kvs_cqe cqe;
	int r = kvs_prep_release(c, sqe_of(c), lease, 0x4e1);

	CHECK(r == 0, "kvs_prep_release: %s", kvs_strerror(r));
	dp_submit_wait(c, &cqe);
	CHECK(cqe.user_data == 0x4e1, "user_data %llx", (unsigned long long)cqe.user_data);
	return cqe;
}

void dp_flush(struct kvs_client *c)
{
	struct kvs_cqe cqe;
	int r = kvs_prep_flush(c, sqe_of(c), 0, 0xf1);

	CHECK(r == 0, "kvs_prep_flush: %s", kvs_strerror(r));
	dp_submit_wait(c, &cqe);
	CHECK_RES(cqe.res, 0, "FLUSH");
}

bool dp_layer_is_poison(struct test_kv *kv, unsigned l, unsigned b, uint8_t v)
{
	for (unsigned s = 0; s < test_kv_segments(kv); s++) {
		const uint8_t *p = test_kv_seg(kv, l, b, s);

		for (uint64_t i = 0; i < kv->seg; i++)
			if (p[i] != v)
				return false;
	}
	return true;
}

bool dp_all_poison(struct test_kv *kv, uint8_t v)
{
	/* Whole allocations: catches a write anywhere, not only inside block views. */
	for (unsigned m = 0; m < kv->nmems; m++)
		for (uint64_t i = 0; i < kv->sizes[m]; i++)
			if (kv->bases[m][i] != v)
				return false;
	return true;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void dp_keys(uint8_t *keys, unsigned n, uint64_t seed)
{
	uint64_t s = seed ^ 0x6b76737461736831ull;
	uint64_t parent[2] = { splitmix(&s), splitmix(&s) };

	for (unsigned i = 0; i < n; i++) {
		/* Both words of the parent, and the position, through the mixer. */
		uint64_t t = parent[0] + 0x632be59bd9b4e019ull * (i + 1);
		uint64_t k[2];

		k[0] = splitmix(&t) ^ parent[1];
		k[1] = splitmix(&t);
		t ^= k[0];
		k[0] = splitmix(&t);
		memcpy(keys + 16 * (size_t)i, k, 16);
		parent[0] = k[0];
		parent[1] = k[1];
	}
}

void dp_ids(uint32_t *ids, uint32_t n, uint32_t first)
{
	for (uint32_t i = 0; i < n; i++)
		ids[i] = first + i;
}

struct kvs_msg_stats_global dp_stats(const struct kvsd *d)
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
