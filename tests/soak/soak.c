/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "soak.h"

unsigned soak_env(const char *name, unsigned def)
{
	const char *v = getenv(name);
	char *end;
	unsigned long n;

	if (!v || !*v)
		return def;
	n = strtoul(v, &end, 10);
	return *end ? def : (unsigned)n;
}

struct soak_res soak_res(const struct kvsd *d)
{
	struct soak_res r;

	r.g = it_stats(d); /* first: the admin session is gone again when we count */
	r.fds = proc_fd_count(d->pid);
	r.regions = proc_memfd_count(d->pid, "kvstash-session");
	r.maps = proc_map_count(d->pid, "kvstash-kv");
	return r;
}

struct soak_res soak_settle(const struct kvsd *d, uint64_t sessions, uint64_t leases, int fds,
			    int regions, int maps, int timeout_ms)
{
	uint64_t t0 = test_now_ns();
	struct soak_res r;

	for (;;) {
		r = soak_res(d);
		if ((r.g.sessions_live == sessions &&
		     (leases == UINT64_MAX || r.g.leases_live == leases) &&
		     (fds < 0 || r.fds == fds) && (regions < 0 || r.regions == regions) &&
		     (maps < 0 || r.maps == maps)) ||
		    test_now_ns() - t0 > (uint64_t)timeout_ms * 1000000)
			return r;
		usleep(10000);
	}
}

unsigned soak_pin_pool(struct kvs_client *c, struct test_kv *kv, uint32_t src, unsigned batch,
		       uint64_t seed0, uint64_t *leases, unsigned max)
{
	uint8_t *keys = malloc((size_t)batch * KVS_KEY_SIZE);
	uint32_t *ids = malloc(batch * sizeof(*ids));
	unsigned nb = 0;
	struct kvs_cqe e;

	CHECK(keys && ids, "out of memory");
	it_ids(ids, batch, src);
	for (;; nb++) {
		CHECK(nb < max, "the pool took more than %u batches of %u blocks", max, batch);
		it_keys(keys, batch, seed0 + nb);
		for (unsigned i = 0; i < batch; i++)
			test_kv_fill(kv, src + i, it_seed(seed0 + nb, i));
		e = it_save(c, keys, ids, batch);
		if (e.res == -ENOSPC)
			break;
		CHECK_RES(e.res, batch, "SAVE while filling the pool");
		it_flush(c);
		e = it_query(c, keys, batch, 0);
		CHECK_RES(e.res, batch, "QUERY of the batch just saved");
		leases[nb] = e.result0;
	}
	free(keys);
	free(ids);
	return nb;
}

struct soak_barrier {
	uint32_t parties, count, gen;
	pid_t owner;
};

struct soak_barrier *soak_barrier_new(unsigned parties)
{
	struct soak_barrier *b = it_shared(sizeof(*b));

	b->parties = parties;
	b->owner = getpid();
	return b;
}

void soak_barrier_wait(struct soak_barrier *b)
{
	/* Acquire/release: what each party did before is seen by all after. */
	uint32_t gen = __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);

	if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == b->parties) {
		__atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&b->gen, gen + 1, __ATOMIC_RELEASE);
		return;
	}
	while (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == gen) {
		if (getpid() == b->owner) {
			int st;
			pid_t pid = waitpid(-1, &st, WNOHANG);

			CHECK(pid <= 0,
			      "engine process %d ended (status 0x%x) while the others "
			      "waited for it",
			      (int)pid, st);
		}
		usleep(1000);
	}
}

int raw_sess_hello(struct raw_sess *rs, const struct kvsd *d, const struct kvs_msg_hello *h)
{
	int rfd = -1, r;

	memset(rs, 0, sizeof(*rs));
	rs->fd = raw_connect(d->sock);
	CHECK(rs->fd >= 0, "connect: %s", strerror(-rs->fd));
	r = raw_hello(rs->fd, h, &rs->rep, &rfd);
	if (r < 0) {
		if (rfd >= 0)
			close(rfd);
		return r;
	}
	if (h->role == KVS_ROLE_ADMIN)
		return 0;
	CHECK(rfd >= 0, "HELLO reply without a region");
	r = shmq_region_attach(rfd, KVS_REGION_MAGIC, &rs->region);
	close(rfd);
	CHECK(r == 0, "attach: %s", strerror(-r));
	CHECK(shmq_ring_init(&rs->sq, rs->region, KVS_PART_SQ, SHMQ_PRODUCER) == 0, "SQ");
	CHECK(shmq_ring_init(&rs->cq, rs->region, KVS_PART_CQ, SHMQ_CONSUMER) == 0, "CQ");
	CHECK(shmq_region_area(rs->region, KVS_PART_ARGS, (void **)&rs->args, &rs->args_size) == 0,
	      "args");
	return 0;
}

void raw_sess_open(struct raw_sess *rs, const struct kvsd *d, uint32_t role, const char *inst,
		   const char *ns, uint32_t rank, uint32_t tp, uint32_t sq_entries)
{
	struct kvs_msg_hello h;
	int r;

	raw_hello_init(&h, role, inst, ns, rank, tp);
	h.sq_entries = sq_entries;
	r = raw_sess_hello(rs, d, &h);
	CHECK(r == 0, "HELLO of %s: %s", inst ? inst : "admin", kvs_strerror(r));
}

void raw_sess_close(struct raw_sess *rs)
{
	shmq_region_destroy(rs->region);
	rs->region = NULL;
	if (rs->fd >= 0)
		close(rs->fd);
	rs->fd = -1;
}

static int reply_status(struct raw_sess *rs)
{
	struct kvs_msg_reply rep;
	ssize_t n = raw_recv(rs->fd, &rep, sizeof(rep), NULL, 0, NULL, 10000);

	if (n < 0)
		return (int)n;
	if (n < (ssize_t)sizeof(rep))
		return n == 0 ? -ECONNRESET : -EBADMSG;
	return rep.status;
}

int raw_sess_register(struct raw_sess *rs, const struct kvs_wire_mem *mems, unsigned nm,
		      const struct kvs_wire_layer *layers, unsigned nl, uint32_t flags,
		      const int *fds, unsigned nfds)
{
	size_t len = sizeof(struct kvs_msg_register) + nm * sizeof(*mems) + nl * sizeof(*layers);
	struct kvs_msg_register *m = calloc(1, len);
	int r;

	CHECK(m, "out of memory");
	m->hdr.type = KVS_MSG_REGISTER;
	m->hdr.size = (uint32_t)len;
	m->hdr.seq = 2;
	m->nr_mems = nm;
	m->nr_layers = nl;
	m->flags = flags;
	memcpy(m + 1, mems, nm * sizeof(*mems));
	memcpy((uint8_t *)(m + 1) + nm * sizeof(*mems), layers, nl * sizeof(*layers));
	r = raw_send(rs->fd, m, len, fds, nfds);
	free(m);
	return r < 0 ? r : reply_status(rs);
}

int raw_sess_request(struct raw_sess *rs, uint32_t type)
{
	struct kvs_msg_hdr h = { .type = type, .size = sizeof(h), .seq = 3 };
	int r = raw_send(rs->fd, &h, sizeof(h), NULL, 0);

	return r < 0 ? r : reply_status(rs);
}

unsigned raw_sess_submit(struct raw_sess *rs, const struct kvs_sqe *sqes, unsigned n)
{
	uint32_t idx;
	int got = shmq_prod_reserve(&rs->sq, n, &idx);

	if (got <= 0)
		return 0;
	for (int i = 0; i < got; i++)
		memcpy(shmq_ring_entry(&rs->sq, idx + (uint32_t)i), &sqes[i], sizeof(sqes[i]));
	shmq_prod_commit(&rs->sq, 0);
	return (unsigned)got;
}

int raw_sess_reap(struct raw_sess *rs, struct kvs_cqe *ret, int timeout_ms)
{
	uint64_t deadline = test_now_ns() + (uint64_t)timeout_ms * 1000000;
	uint32_t idx;

	for (;;) {
		int n = shmq_cons_peek(&rs->cq, 1, &idx);

		if (n < 0)
			return n;
		if (n == 1) {
			memcpy(ret, shmq_ring_entry(&rs->cq, idx), sizeof(*ret));
			shmq_cons_release(&rs->cq, 1);
			return 0;
		}
		if (test_now_ns() >= deadline)
			return -ETIMEDOUT;
		n = shmq_cons_wait(&rs->cq, 20 * 1000000);
		if (n < 0 && n != -ETIMEDOUT && n != -EINTR)
			return n;
	}
}

int raw_sess_op(struct raw_sess *rs, struct kvs_sqe *sqe, struct kvs_cqe *ret)
{
	int r;

	sqe->user_data = ++rs->next_user_data;
	CHECK(raw_sess_submit(rs, sqe, 1) == 1, "SQ full");
	r = raw_sess_reap(rs, ret, OP_TIMEOUT_MS);
	CHECK(r == 0, "no CQE: %s", kvs_strerror(r));
	CHECK(ret->user_data == sqe->user_data, "CQE for %llu, not %llu",
	      (unsigned long long)ret->user_data, (unsigned long long)sqe->user_data);
	return ret->res;
}

int soak_memfd(const char *name, uint64_t size, uint8_t **ret_base)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *p;

	CHECK(fd >= 0, "memfd_create: %s", strerror(errno));
	CHECK(ftruncate(fd, (off_t)size) == 0, "ftruncate: %s", strerror(errno));
	CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0, "seal: %s",
	      strerror(errno));
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
	*ret_base = p;
	return fd;
}
