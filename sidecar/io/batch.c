/* SPDX-License-Identifier: MIT */
/* Copy batches: see batch.h. */
#include <errno.h>
#include <stdlib.h>

#include "io/batch.h"
#include "io/mem.h"
#include "wire/layout.h"

int copy_batch_add(struct copy_batch *b, uint64_t eng, uint8_t *pool, uint64_t len)
{
	if (b->n) {
		struct piece *p = &b->pieces[b->n - 1];

		/* Adjacent on both sides: one copy instead of two. */
		if (p->eng + p->len == eng && p->pool + p->len == pool) {
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
	b->pieces[b->n++] = (struct piece){ eng, pool, len };
	b->bytes += len;
	return 0;
}

int copy_batch_add_block(struct copy_batch *b, const struct layout *lay,
			 const struct mem_import *mems, uint32_t block_id, uint8_t *slot,
			 uint32_t first, uint32_t count)
{
	for (uint32_t l = first; l < first + count; l++) {
		const struct layer_view *v = &lay->layers[l];

		for (uint32_t seg = 0; seg < v->segments; seg++) {
			uint64_t eng = mems[v->mem].base + layer_block_offset(v, block_id, seg);
			int r = copy_batch_add(b, eng, slot + v->slot_off + seg * v->segment_bytes,
					       v->segment_bytes);

			if (r < 0)
				return r;
		}
	}
	return 0;
}

void copy_batch_free(struct copy_batch *b)
{
	free(b->pieces);
	b->pieces = NULL;
	b->n = b->cap = 0;
}
