/* SPDX-License-Identifier: MIT */
/*
 * Host mover: engine memory is a memfd mapped into kvstashd (import.c), so
 * a copy is memcpy.  Small batches are copied by the I/O worker itself (no hand-off
 * latency); large ones are cut into chunks of about equal bytes and spread
 * over the copy threads so one session can approach memory bandwidth.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/mem.h"
#include "base/conf.h"
#include "base/util.h"
#include "io/batch.h"
#include "io/mover.h"
#include "movers/host/host.h"
#include "obs/log.h"

#define CHUNK_MIN (256u << 10) /* below this, a thread hand-off costs more than it saves */

struct job;

struct chunk {
	struct copy_batch *b;
	struct job *j;
	struct piece *pieces; /* into the job's sub-piece array */
	uint32_t n;
	struct cds_list_head node;
};

struct job {
	uint32_t left; /* atomic: chunks not yet copied */
	struct piece *sub;
	struct chunk chunks[];
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct cds_list_head queue;
	bool stop;
	pthread_t *threads;
	unsigned n;
	uint64_t inline_bytes;
} H = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void run(enum copy_dir dir, const struct piece *p, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		void *eng = (void *)(uintptr_t)p[i].dev;

		if (dir == COPY_TO_POOL)
			memcpy(p[i].pool, eng, p[i].len);
		else
			memcpy(eng, p[i].pool, p[i].len);
	}
}

static void *copy_thread(void *arg)
{
	for (;;) {
		struct chunk *c;

		pthread_mutex_lock(&H.lock);
		while (cds_list_empty(&H.queue) && !H.stop)
			pthread_cond_wait(&H.cond, &H.lock);
		if (cds_list_empty(&H.queue)) {
			pthread_mutex_unlock(&H.lock);
			break;
		}
		c = cds_list_first_entry(&H.queue, struct chunk, node);
		cds_list_del(&c->node);
		pthread_mutex_unlock(&H.lock);

		run(c->b->dir, c->pieces, c->n);
		/*
		 * acq_rel: every chunk's copy happens-before the last
		 * decrement, whose thread hands the batch back
		 * (batch_complete() then publishes it to the worker under the
		 * sink's lock).
		 */
		if (__atomic_sub_fetch(&c->j->left, 1, __ATOMIC_ACQ_REL) == 0) {
			struct copy_batch *b = c->b;
			struct job *j = c->j;

			free(j->sub);
			free(j);
			b->priv = NULL;
			batch_complete(b, 0);
		}
	}
	return NULL;
}

static void copy_threads_stop(void)
{
	pthread_mutex_lock(&H.lock);
	H.stop = true;
	pthread_cond_broadcast(&H.cond);
	pthread_mutex_unlock(&H.lock);
	for (unsigned i = 0; i < H.n; i++)
		pthread_join(H.threads[i], NULL);
	H.threads = mfree(H.threads);
	H.n = 0;
}

static int copy_threads_start(const struct kvs_config *cfg)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = cfg->copy_threads ? cfg->copy_threads : (unsigned)MIN(MAX(cpus, 1), 8);

	CDS_INIT_LIST_HEAD(&H.queue);
	H.stop = false;
	H.inline_bytes = cfg->inline_copy_bytes;
	H.threads = calloc(n, sizeof(*H.threads));
	if (!H.threads)
		return -ENOMEM;
	for (H.n = 0; H.n < n; H.n++) {
		int r = pthread_create(&H.threads[H.n], NULL, copy_thread, NULL);

		if (r) {
			copy_threads_stop();
			return -r;
		}
		pthread_setname_np(H.threads[H.n], "kvs-copy");
	}
	return 0;
}

/* One device, the host: one worker serves every host session. */
static int host_init(const struct kvs_config *cfg)
{
	int r = copy_threads_start(cfg);

	if (r < 0)
		return log_error_errno(r, "cannot start the copy threads");
	r = host_release_start();
	if (r < 0)
		return log_error_errno(r, "cannot start the engine-memory release thread");
	return 1;
}

static void host_fini(void)
{
	copy_threads_stop();
	host_release_stop(); /* after the last session: it drains what they left */
}

/* Nothing per worker: the copy threads are the process's. */
static struct mover host_instance = { .ops = &host_mover };

static int host_worker_init(unsigned dev, unsigned wid, struct mover **ret)
{
	*ret = &host_instance;
	return 0;
}

static void host_worker_fini(struct mover *m)
{
}

/* Inline: the worker thread copies and completes without any hand-off. */
static void inline_copy(struct copy_batch *b)
{
	run(b->dir, b->pieces, b->n);
	batch_complete(b, 0);
}

static void host_submit(struct mover *m, struct copy_batch *b)
{
	uint64_t target, acc = 0;
	uint32_t nchunks, ci = 0, si = 0;
	struct job *j;

	if (b->bytes <= H.inline_bytes || H.n == 0) {
		inline_copy(b);
		return;
	}
	nchunks = (uint32_t)MIN((uint64_t)H.n, MAX(b->bytes / CHUNK_MIN, 1));
	target = (b->bytes + nchunks - 1) / nchunks;
	j = malloc(sizeof(*j) + nchunks * sizeof(j->chunks[0]));
	if (j)
		j->sub = malloc((b->n + nchunks) * sizeof(*j->sub));
	if (!j || !j->sub) {
		free(j);
		inline_copy(b); /* no memory for the plan: still copy */
		return;
	}
	/* Cut the pieces into chunks of ~target bytes, splitting a piece if needed. */
	j->chunks[0] = (struct chunk){ b, j, j->sub, 0 };
	for (uint32_t i = 0; i < b->n; i++) {
		struct piece p = b->pieces[i];

		while (p.len) {
			uint64_t take = MIN(p.len, target - acc);

			j->sub[si++] = (struct piece){ p.dev, p.pool, take };
			j->chunks[ci].n++;
			p.dev += take;
			p.pool += take;
			p.len -= take;
			acc += take;
			if (acc == target && ci + 1 < nchunks) {
				ci++;
				acc = 0;
				j->chunks[ci] = (struct chunk){ b, j, &j->sub[si], 0 };
			}
		}
	}
	nchunks = ci + 1;
	b->priv = j;
	j->left = nchunks;
	pthread_mutex_lock(&H.lock);
	for (uint32_t c = 0; c < nchunks; c++)
		cds_list_add_tail(&j->chunks[c].node, &H.queue);
	pthread_cond_broadcast(&H.cond);
	pthread_mutex_unlock(&H.lock);
}

const struct mover_ops host_mover = {
	.name = "host",
	.dev_name = "host",
	.device_kind = KVS_DEVICE_HOST,
	.mem_kinds = MEM_KIND(KVS_MEM_HOST_FD),
	.init = host_init,
	.fini = host_fini,
	.map_bytes = host_map_bytes,
	.import = host_mem_import,
	.release = host_mem_release,
	.worker_init = host_worker_init,
	.worker_fini = host_worker_fini,
	.submit = host_submit,
};
