/* SPDX-License-Identifier: MIT */
/*
 * Host mover: engine memory is a memfd mapped into kvstashd, so a copy is
 * memcpy.  Small batches are copied by the I/O worker itself (no hand-off
 * latency); large ones are cut into chunks of about equal bytes and spread
 * over the copy threads so one session can approach memory bandwidth.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/conf.h"
#include "io/mover.h"
#include "obs/log.h"
#include "base/util.h"
#include "io/worker.h"

#define CHUNK_MIN (256u << 10) /* below this, a thread hand-off costs more than it saves */

struct chunk {
	struct worker *w;
	struct op *op;
	struct piece *pieces; /* into the job's sub-piece array */
	uint32_t n;
	struct cds_list_head node;
};

struct job {
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
		void *eng = (void *)(uintptr_t)p[i].eng;

		if (dir == COPY_SAVE)
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

		run(c->op->batch.dir, c->pieces, c->n);
		/*
		 * acq_rel: every chunk's copy happens-before the last
		 * decrement, whose thread hands the op back (worker_complete
		 * then publishes it to the worker under its lock).
		 */
		if (__atomic_sub_fetch(&c->op->batch.chunks_left, 1, __ATOMIC_ACQ_REL) == 0) {
			struct op *op = c->op;
			struct worker *w = c->w;
			struct job *j = (struct job *)op->batch_priv;

			free(j->sub);
			free(j);
			op->batch_priv = NULL;
			worker_complete(w, op);
		}
	}
	return NULL;
}

int copy_host_init(const struct kvs_config *cfg)
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
			copy_host_fini();
			return -r;
		}
		pthread_setname_np(H.threads[H.n], "kvs-copy");
	}
	return 0;
}

void copy_host_fini(void)
{
	pthread_mutex_lock(&H.lock);
	H.stop = true;
	pthread_cond_broadcast(&H.cond);
	pthread_mutex_unlock(&H.lock);
	for (unsigned i = 0; i < H.n; i++)
		pthread_join(H.threads[i], NULL);
	free(H.threads);
	H.threads = NULL;
	H.n = 0;
}

/* Inline: the worker thread copies and completes without any hand-off. */
static void inline_copy(struct worker *w, struct op *op)
{
	run(op->batch.dir, op->batch.pieces, op->batch.n);
	cds_list_add_tail(&op->node, &w->local_done);
}

void copy_host_submit(struct worker *w, struct op *op)
{
	struct copy_batch *b = &op->batch;
	uint64_t target, acc = 0;
	uint32_t nchunks, ci = 0, si = 0;
	struct job *j;

	if (b->bytes <= H.inline_bytes || H.n == 0) {
		inline_copy(w, op);
		return;
	}
	nchunks = (uint32_t)MIN((uint64_t)H.n, MAX(b->bytes / CHUNK_MIN, 1));
	target = (b->bytes + nchunks - 1) / nchunks;
	j = malloc(sizeof(*j) + nchunks * sizeof(j->chunks[0]));
	if (j)
		j->sub = malloc((b->n + nchunks) * sizeof(*j->sub));
	if (!j || !j->sub) {
		free(j);
		inline_copy(w, op); /* no memory for the plan: still copy */
		return;
	}
	/* Cut the pieces into chunks of ~target bytes, splitting a piece if needed. */
	j->chunks[0] = (struct chunk){ w, op, j->sub, 0 };
	for (uint32_t i = 0; i < b->n; i++) {
		struct piece p = b->pieces[i];

		while (p.len) {
			uint64_t take = MIN(p.len, target - acc);

			j->sub[si++] = (struct piece){ p.eng, p.pool, take };
			j->chunks[ci].n++;
			p.eng += take;
			p.pool += take;
			p.len -= take;
			acc += take;
			if (acc == target && ci + 1 < nchunks) {
				ci++;
				acc = 0;
				j->chunks[ci] = (struct chunk){ w, op, &j->sub[si], 0 };
			}
		}
	}
	nchunks = ci + 1;
	op->batch_priv = j;
	b->chunks_left = nchunks;
	pthread_mutex_lock(&H.lock);
	for (uint32_t c = 0; c < nchunks; c++)
		cds_list_add_tail(&j->chunks[c].node, &H.queue);
	pthread_cond_broadcast(&H.cond);
	pthread_mutex_unlock(&H.lock);
}
