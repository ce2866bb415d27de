/* SPDX-License-Identifier: MIT */
/*
 * Stream ordering: the session's fence slots (KVS_PART_FENCES, struct
 * kvs_fence in abi.h) and the watchdog that keeps an engine's streams
 * from waiting for ever on a kvstashd that is gone.
 *
 * Slots are handed out oldest-freed first, so a slot is reused as late
 * as possible (a kernel that reads a LOAD's status after its wait reads
 * that LOAD's).  Each slot's values only grow: an operation takes the
 * slot's last value as its base and ends at base + count, so a late
 * write of an earlier operation (an engine stream's signal for a SAVE
 * kvstashd refused) is at most the base of the next, and satisfies none
 * of its waits.  A slot whose SAVE signal has not landed yet is skipped
 * until it has.
 *
 * The watchdog thread holds duplicates of the session's socket and, when
 * the kernel gives one, of a pidfd of kvstashd.  On the socket's hang-up
 * it releases every armed LOAD (status -ECONNRESET, the last value): the
 * engine's host thread may be blocked in a synchronize behind one of its
 * waits, calling nothing of ours.  It releases them again once the pidfd
 * says the process is gone, when its copy streams can no longer write
 * (a dying process closes its socket before its GPU context is torn
 * down), and, pidfd or not, again 10, 100, 1000 and 3000 ms after the
 * hang-up: a write of the dying process's copy stream that lands after
 * a release takes the value back (seen on the H200), and nothing else
 * would ever put it forward again.
 *
 * Between the client's thread and the watchdog: armed[] and final[] and
 * kind[] (final and kind written before armed, armed stored and loaded
 * sequentially consistent, as dead_gen: an arm that races a sweep is
 * released by one of the two, see client_fence_arm()), and under lock
 * the watchdog's fds and the slots it writes.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client.h"

struct client_fences {
	/* client thread */
	struct kvs_fence *slots; /* the session's; NULL: none mapped */
	uint32_t nr;
	uint32_t gen;			/* session number: a ref of another is stale */
	uint32_t last[KVS_FENCE_SLOTS]; /* each slot's value after its last operation */
	uint32_t fifo[KVS_FENCE_SLOTS]; /* free slots, oldest freed first */
	uint32_t fifo_head, fifo_n;
	uint64_t dptr;		  /* slots' device address; 0: not registered with CUDA */
	struct shmq_region **old; /* retired regions, their slots registered */
	void **old_slots;
	unsigned nold;

	/* client thread and watchdog (see the top) */
	uint8_t armed[KVS_FENCE_SLOTS];
	uint8_t kind[KVS_FENCE_SLOTS];
	uint32_t final[KVS_FENCE_SLOTS];
	uint32_t dead_gen; /* the gen the watchdog saw die; 0: none */

	/* watchdog */
	pthread_t thread;
	bool running;
	int efd; /* the client thread's word to it: look at the fds again */
	pthread_mutex_t lock;
	/* under lock: the session handed over (wd_new), then taken up by the watchdog */
	struct kvs_fence *next_slots;
	uint32_t next_gen;
	int wd_sock, wd_pidfd; /* its duplicates; -1: none */
	bool wd_new, stop;
	struct kvs_fence *wd_slots; /* the slots of the session it watches; NULL: gone */
	uint32_t wd_gen;
};

/* Release every armed LOAD of @slots; the caller holds the lock. */
static void sweep(struct client_fences *fx, struct kvs_fence *slots, uint32_t gen)
{
	__atomic_store_n(&fx->dead_gen, gen, __ATOMIC_SEQ_CST);
	for (uint32_t s = 0; s < fx->nr && slots; s++) {
		if (!__atomic_load_n(&fx->armed[s], __ATOMIC_SEQ_CST) ||
		    __atomic_load_n(&fx->kind[s], __ATOMIC_RELAXED) != FENCE_LOAD)
			continue;
		__atomic_store_n(&slots[s].status, -ECONNRESET, __ATOMIC_RELAXED);
		/* Pairs with the GPU's wait and kvs_fence_done()'s load-acquire: status first. */
		__atomic_store_n(&slots[s].value, __atomic_load_n(&fx->final[s], __ATOMIC_RELAXED),
				 __ATOMIC_RELEASE);
	}
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void *watchdog(void *arg)
{
	static const int again_ms[] = { 10, 90, 900, 2000 }; /* at 10, 100, 1000, 3000 ms */
	struct client_fences *fx = arg;
	int sock = -1, pidfd = -1, again = -1;

	for (;;) {
		struct pollfd p[3] = {
			{ .fd = fx->efd, .events = POLLIN },
			{ .fd = sock, .events = POLLRDHUP },
			{ .fd = pidfd, .events = POLLIN },
		};
		int t = again >= 0 ? again_ms[again] : -1;
		int n = poll(p, 3, t);
		uint64_t v;

		if (n < 0 && errno != EINTR)
			break; /* cannot happen with valid arguments */
		pthread_mutex_lock(&fx->lock);
		if (p[0].revents & POLLIN) {
			if (read(fx->efd, &v, sizeof(v)) < 0) {
				/* Nothing to read is as good as the word: the state says it all. */
			}
			if (fx->stop) {
				pthread_mutex_unlock(&fx->lock);
				break;
			}
			if (fx->wd_new) {
				/* A new session: its fds, ours now; the old ones go. */
				close_fd(&sock);
				close_fd(&pidfd);
				sock = fx->wd_sock;
				pidfd = fx->wd_pidfd;
				fx->wd_sock = fx->wd_pidfd = -1;
				fx->wd_slots = fx->next_slots;
				fx->wd_gen = fx->next_gen;
				fx->wd_new = false;
				again = -1;
			}
		}
		if (sock >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
			sweep(fx, fx->wd_slots, fx->wd_gen);
			close_fd(&sock);
			again = 0;
		} else if (pidfd >= 0 && (p[2].revents & POLLIN)) {
			/* Its copy streams are gone: nothing writes after this. */
			sweep(fx, fx->wd_slots, fx->wd_gen);
			close_fd(&pidfd);
		} else if (n == 0 && again >= 0) {
			sweep(fx, fx->wd_slots, fx->wd_gen);
			again = again + 1 < (int)(sizeof(again_ms) / sizeof(again_ms[0]))
					? again + 1
					: -1;
		}
		pthread_mutex_unlock(&fx->lock);
	}
	close_fd(&sock);
	close_fd(&pidfd);
	return NULL;
}

static void kick(struct client_fences *fx)
{
	uint64_t one = 1;

	if (write(fx->efd, &one, sizeof(one)) < 0) {
		/* The counter is full: the watchdog has a wake-up coming already. */
	}
}

int client_fences_new(struct kvs_client *c)
{
	struct client_fences *fx = calloc(1, sizeof(*fx));
	sigset_t all, old;
	int r;

	if (!fx)
		return -ENOMEM;
	fx->wd_sock = fx->wd_pidfd = -1;
	fx->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fx->efd < 0) {
		r = -errno;
		free(fx);
		return r;
	}
	pthread_mutex_init(&fx->lock, NULL);
	/* No signal of the application's is ever delivered on our thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = -pthread_create(&fx->thread, NULL, watchdog, fx);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		close(fx->efd);
		pthread_mutex_destroy(&fx->lock);
		free(fx);
		return r;
	}
	fx->running = true;
	c->fx = fx;
	return 0;
}

/* kvstashd's pidfd, from the socket's peer credentials; -1 when there is none. */
static int peer_pidfd(int sock)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.pid <= 0)
		return -1;
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, cr.pid, 0);
#else
	return -1;
#endif
}

/* The slots registered with CUDA (mapped, portable), once per session region. */
static int register_slots(struct kvs_client *c)
{
	struct client_fences *fx = c->fx;
	int r;

	if (fx->dptr)
		return 0;
	r = client_cuda_host_register(fx->slots, (size_t)fx->nr * sizeof(*fx->slots), &fx->dptr);
	if (r < 0)
		client_log(c, KVS_LOG_ERR, "cannot register the fence slots with CUDA: %s",
			   kvs_strerror(r));
	return r;
}

int client_fences_attach(struct kvs_client *c, struct kvs_fence *slots, uint64_t bytes)
{
	struct client_fences *fx = c->fx;
	int sock;

	if (bytes < (uint64_t)KVS_FENCE_SLOTS * sizeof(*slots))
		return -EBADMSG;
	sock = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
	if (sock < 0)
		return -errno;
	fx->slots = slots;
	fx->nr = KVS_FENCE_SLOTS;
	fx->gen++;
	if (fx->gen == 0)
		fx->gen = 1; /* 0 is dead_gen's "none" */
	fx->dptr = 0;
	fx->fifo_head = 0;
	fx->fifo_n = fx->nr;
	for (uint32_t s = 0; s < fx->nr; s++) {
		fx->fifo[s] = s;
		fx->last[s] = 0;
		fx->kind[s] = 0;
		fx->final[s] = 0;
		__atomic_store_n(&fx->armed[s], 0, __ATOMIC_RELAXED);
	}
	pthread_mutex_lock(&fx->lock);
	if (fx->wd_new) { /* a session the watchdog never took up */
		close_fd(&fx->wd_sock);
		close_fd(&fx->wd_pidfd);
	}
	fx->wd_sock = sock;
	fx->wd_pidfd = peer_pidfd(sock);
	fx->next_slots = slots;
	fx->next_gen = fx->gen;
	fx->wd_new = true;
	pthread_mutex_unlock(&fx->lock);
	kick(fx);
	/*
	 * A CUDA session's slots are registered now, not in its first
	 * kvs_prep_save_stream() or kvs_prep_load_progress(): registering
	 * host memory may wait for the device, and there it would wait behind
	 * the engine's queued work, the very work the fence is meant to
	 * order after.  A failure is tried again, and reported, at first use.
	 */
	if (c->opts.device_kind == KVS_DEVICE_CUDA)
		register_slots(c);
	return 0;
}

bool client_fences_retire(struct kvs_client *c, struct shmq_region *region)
{
	struct client_fences *fx = c->fx;
	struct shmq_region **o;
	void **os;
	bool keep;

	if (!fx || !region)
		return false;
	/* The watchdog lets go of these slots before they can go. */
	pthread_mutex_lock(&fx->lock);
	if (fx->wd_slots == fx->slots)
		fx->wd_slots = NULL;
	if (fx->next_slots == fx->slots)
		fx->next_slots = NULL;
	pthread_mutex_unlock(&fx->lock);
	keep = fx->dptr != 0;
	if (keep) {
		o = realloc(fx->old, (fx->nold + 1) * sizeof(*o));
		if (o)
			fx->old = o;
		os = o ? realloc(fx->old_slots, (fx->nold + 1) * sizeof(*os)) : NULL;
		if (os) {
			fx->old_slots = os;
			fx->old[fx->nold] = region;
			fx->old_slots[fx->nold++] = fx->slots;
		} else {
			/* Out of memory: the mapping stays for the process, registered. */
			client_log(c, KVS_LOG_WARNING, "fence slots of the old session leaked");
		}
	}
	fx->slots = NULL;
	fx->dptr = 0;
	return keep;
}

void client_fences_free(struct kvs_client *c)
{
	struct client_fences *fx = c->fx;

	if (!fx)
		return;
	/* Whatever is still armed: no stream may wait for it after this. */
	pthread_mutex_lock(&fx->lock);
	if (fx->slots)
		sweep(fx, fx->slots, fx->gen);
	fx->stop = true;
	pthread_mutex_unlock(&fx->lock);
	kick(fx);
	if (fx->running)
		pthread_join(fx->thread, NULL);
	close_fd(&fx->wd_sock);
	close_fd(&fx->wd_pidfd);
	close(fx->efd);
	pthread_mutex_destroy(&fx->lock);
	if (fx->dptr && fx->slots)
		client_cuda_host_unregister(fx->slots);
	for (unsigned i = 0; i < fx->nold; i++) {
		client_cuda_host_unregister(fx->old_slots[i]);
		shmq_region_destroy(fx->old[i]);
	}
	free(fx->old);
	free(fx->old_slots);
	free(fx);
	c->fx = NULL;
}

int client_fence_arm(struct kvs_client *c, int kind, uint32_t count, struct kvs_fence_ref *ret)
{
	struct client_fences *fx = c->fx;
	struct kvs_fence *f;
	uint32_t s = 0, base;
	bool found = false;

	if (!fx)
		return -EINVAL;
	if (!fx->slots)
		return -ECONNRESET;
	for (uint32_t tries = fx->fifo_n; tries && !found; tries--) {
		s = fx->fifo[fx->fifo_head];
		fx->fifo_head = (fx->fifo_head + 1) % fx->nr;
		/* A SAVE's signal still to land would write over the next operation's start. */
		if (fx->kind[s] == FENCE_SAVE &&
		    (int32_t)(__atomic_load_n(&fx->slots[s].value, __ATOMIC_ACQUIRE) -
			      fx->last[s]) < 0) {
			fx->fifo[(fx->fifo_head + fx->fifo_n - 1) % fx->nr] = s;
			continue;
		}
		found = true;
	}
	if (!found)
		return -EBUSY;
	fx->fifo_n--;
	base = fx->last[s];
	f = &fx->slots[s];
	__atomic_store_n(&f->status, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&f->blocks, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&f->value, base, __ATOMIC_RELEASE);
	fx->last[s] = base + count;
	__atomic_store_n(&fx->final[s], base + count, __ATOMIC_RELAXED);
	__atomic_store_n(&fx->kind[s], (uint8_t)kind, __ATOMIC_RELAXED);
	__atomic_store_n(&fx->armed[s], 1, __ATOMIC_SEQ_CST);
	/*
	 * A sweep that ran before the store above missed this slot; one
	 * that runs after it sees it.  Either way it is released.
	 */
	if (kind == FENCE_LOAD && __atomic_load_n(&fx->dead_gen, __ATOMIC_SEQ_CST) == fx->gen) {
		__atomic_store_n(&f->status, -ECONNRESET, __ATOMIC_RELAXED);
		__atomic_store_n(&f->value, base + count, __ATOMIC_RELEASE);
	}
	*ret = (struct kvs_fence_ref){ .slot = s, .base = base, .count = count, .gen = fx->gen };
	return 0;
}

void client_fence_end(struct kvs_client *c, int32_t slot, int32_t res)
{
	struct client_fences *fx = c->fx;
	struct kvs_fence *f;

	if (!fx || slot < 0 || (uint32_t)slot >= fx->nr ||
	    !__atomic_load_n(&fx->armed[slot], __ATOMIC_RELAXED))
		return;
	if (fx->slots && fx->kind[slot] == FENCE_LOAD) {
		/*
		 * kvstashd did this already when it was there to; a daemon
		 * that did not (gone, or broken) must not hold the streams.
		 */
		f = &fx->slots[slot];
		if (res < 0)
			__atomic_store_n(&f->status, res, __ATOMIC_RELAXED);
		__atomic_store_n(&f->value, fx->final[slot], __ATOMIC_RELEASE);
	}
	__atomic_store_n(&fx->armed[slot], 0, __ATOMIC_SEQ_CST);
	fx->fifo[(fx->fifo_head + fx->fifo_n) % fx->nr] = (uint32_t)slot;
	fx->fifo_n++;
}

/* ---- the API ---------------------------------------------------------- */

/* @fence of this session, value @i: 0, or -errno (a stale ref: -ECONNRESET). */
static int check_ref(struct kvs_client *c, const struct kvs_fence_ref *fence, uint32_t i)
{
	struct client_fences *fx = c->fx;

	if (!fx || !fence || fence->slot >= KVS_FENCE_SLOTS || i >= fence->count)
		return -EINVAL;
	if (fence->gen != fx->gen || !fx->slots)
		return -ECONNRESET;
	return 0;
}

/* The slots' device address; registered at attach, or here if that failed. */
static int device_addr(struct kvs_client *c, uint32_t slot, uint64_t *ret)
{
	int r = register_slots(c);

	if (r < 0)
		return r;
	*ret = c->fx->dptr + (uint64_t)slot * sizeof(struct kvs_fence);
	return 0;
}

int kvs_fence_signal(struct kvs_client *c, const struct kvs_fence_ref *fence, void *stream)
{
	uint64_t d;
	int r = check_ref(c, fence, 0);

	if (r == 0)
		r = device_addr(c, fence->slot, &d);
	if (r == 0)
		r = client_cuda_stream_write(stream, d, fence->base + fence->count);
	return r;
}

int kvs_fence_signal_host(struct kvs_client *c, const struct kvs_fence_ref *fence)
{
	int r = check_ref(c, fence, 0);

	/* Pairs with kvstashd's load-acquire (fence_reached()): the KV before the value. */
	if (r == 0)
		__atomic_store_n(&c->fx->slots[fence->slot].value, fence->base + fence->count,
				 __ATOMIC_RELEASE);
	return r;
}

int kvs_fence_wait(struct kvs_client *c, const struct kvs_fence_ref *fence, uint32_t i,
		   void *stream)
{
	uint64_t d;
	int r = check_ref(c, fence, i);

	if (r == 0)
		r = device_addr(c, fence->slot, &d);
	if (r == 0)
		r = client_cuda_stream_wait(stream, d, fence->base + 1 + i);
	return r;
}

int kvs_fence_done(struct kvs_client *c, const struct kvs_fence_ref *fence, uint32_t i,
		   int32_t *ret_status, uint32_t *ret_blocks)
{
	const struct kvs_fence *f;
	uint32_t v;
	int r = check_ref(c, fence, i);

	if (r < 0)
		return r;
	f = &c->fx->slots[fence->slot];
	/* Pairs with the store-release of whoever wrote it: status and blocks before it. */
	v = __atomic_load_n(&f->value, __ATOMIC_ACQUIRE);
	if (ret_status)
		*ret_status = __atomic_load_n(&f->status, __ATOMIC_RELAXED);
	if (ret_blocks)
		*ret_blocks = __atomic_load_n(&f->blocks, __ATOMIC_RELAXED);
	return (int32_t)(v - (fence->base + 1 + i)) >= 0;
}

int kvs_fence_device_ptr(struct kvs_client *c, const struct kvs_fence_ref *fence,
			 uint64_t *ret_dptr)
{
	uint64_t d;
	int r = check_ref(c, fence, 0);

	if (r == 0)
		r = device_addr(c, fence->slot, &d);
	if (r == 0)
		*ret_dptr = d;
	return r;
}
