/* SPDX-License-Identifier: MIT */
/* Copy batches and their sinks: see batch.h. */
#include <errno.h>
#include <stdlib.h>

#include <shmq/shmq.h>

#include "common/mem.h"
#include "io/batch.h"
#include "io/mem.h"
#include "store/pool.h"
#include "wire/layout.h"

int copy_batch_add(struct copy_batch *b, uint64_t dev, uint8_t *pool, uint64_t len)
{
	if (b->n > b->merge_floor) {
		struct piece *p = &b->pieces[b->n - 1];

		/* Adjacent on both sides: one copy instead of two. */
		if (p->dev + p->len == dev && p->pool + p->len == pool) {
			p->len += len;
			b->bytes += len;
			return 0;
		}
	}
	if (b->n == b->cap) {
		uint32_t cap = b->cap ? 2 * b->cap : 16;
		struct piece *p = realloc(b->pieces, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		b->pieces = p;
		b->cap = cap;
	}
	b->pieces[b->n++] = (struct piece){ dev, pool, len };
	b->bytes += len;
	return 0;
}

int copy_batch_add_block(struct copy_batch *b, const struct layout *lay,
			 const struct mem_import *mems, uint32_t block_id, const struct slot *slot,
			 uint32_t first, uint32_t count)
{
	uint64_t ext = ((uint64_t)slot->region << 32 | slot->ext) + 1;

	if (ext != b->last_extent)
		b->merge_floor = b->n; /* never above n: it only ever moves up to it */
	b->last_extent = ext;
	for (uint32_t l = first; l < first + count; l++) {
		const struct layer_view *v = &lay->layers[l];

		for (uint32_t seg = 0; seg < v->segments; seg++) {
			uint64_t dev = mems[v->mem].base + layer_block_offset(v, block_id, seg);
			int r = copy_batch_add(b, dev,
					       slot->addr + v->slot_off + seg * v->segment_bytes,
					       v->segment_bytes);

			if (r < 0)
				return r;
		}
	}
	return 0;
}

void copy_batch_free(struct copy_batch *b)
{
	b->pieces = mfree(b->pieces);
	b->sig_end = mfree(b->sig_end);
	b->n = b->cap = b->nsig = b->merge_floor = 0;
	b->last_extent = 0;
}

/* ---- sinks ------------------------------------------------------------ */

void batch_sink_init(struct batch_sink *k, uint32_t *word)
{
	k->word = word;
	pthread_mutex_init(&k->lock, NULL);
	CDS_INIT_LIST_HEAD(&k->remote);
	CDS_INIT_LIST_HEAD(&k->local);
}

void batch_sink_own(struct batch_sink *k)
{
	/*
	 * Read by other threads only in batch_complete() of a batch this
	 * thread submitted after this store: the hand-off of the batch (e.g.
	 * the host copy queue's lock) orders the two.
	 */
	k->owner = pthread_self();
}

void batch_sink_fini(struct batch_sink *k)
{
	pthread_mutex_destroy(&k->lock);
}

void batch_complete(struct copy_batch *b, int err)
{
	struct batch_sink *k = b->sink;

	if (err && !b->err)
		b->err = err;
	if (pthread_equal(pthread_self(), k->owner)) {
		cds_list_add_tail(&b->node, &k->local);
		return;
	}
	pthread_mutex_lock(&k->lock);
	cds_list_add_tail(&b->node, &k->remote);
	/*
	 * The wake comes before the unlock: the owner takes the batch under
	 * this lock only after it, and once it has every batch back it may
	 * stop and free the sink and its word, so nothing of them may be
	 * touched after the unlock.  Release: the batch is visible to the
	 * owner that sees the new value (its load-acquire of the word before
	 * it reaps).
	 */
	__atomic_fetch_add(k->word, 1, __ATOMIC_RELEASE);
	shmq_wake_word(k->word);
	pthread_mutex_unlock(&k->lock);
}

bool batch_sink_reap(struct batch_sink *k, struct cds_list_head *list)
{
	CDS_INIT_LIST_HEAD(list);
	pthread_mutex_lock(&k->lock);
	cds_list_splice(&k->remote, list);
	CDS_INIT_LIST_HEAD(&k->remote);
	pthread_mutex_unlock(&k->lock);
	/* At the head: the ones completed on this thread come first. */
	cds_list_splice(&k->local, list);
	CDS_INIT_LIST_HEAD(&k->local);
	return !cds_list_empty(list);
}
