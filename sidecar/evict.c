/* SPDX-License-Identifier: MIT */
#include "evict.h"

void sieve_insert(struct sieve *q, struct sieve_node *n)
{
	n->visited = 0;
	n->queued = 1;
	cds_list_add(&n->link, &q->list);
	q->n++;
}

/* The node one step newer than @n (towards the head), or NULL at the head. */
static struct sieve_node *newer(struct sieve *q, struct sieve_node *n)
{
	if (n->link.prev == &q->list)
		return NULL;
	return cds_list_entry(n->link.prev, struct sieve_node, link);
}

static struct sieve_node *oldest(struct sieve *q)
{
	if (cds_list_empty(&q->list))
		return NULL;
	return cds_list_entry(q->list.prev, struct sieve_node, link);
}

void sieve_remove(struct sieve *q, struct sieve_node *n)
{
	if (!n->queued)
		return;
	if (q->hand == n)
		q->hand = newer(q, n);
	cds_list_del(&n->link);
	n->queued = 0;
	q->n--;
}

struct sieve_node *sieve_pick(struct sieve *q, bool (*evictable)(struct sieve_node *, void *),
			      void *arg, size_t max_scan)
{
	struct sieve_node *n = q->hand ? q->hand : oldest(q);

	if (!max_scan)
		max_scan = 2 * q->n + 1;
	for (size_t i = 0; n && i < max_scan; i++) {
		struct sieve_node *next = newer(q, n);

		if (!next)
			next = oldest(q); /* wrap from the head back to the tail */
		if (__atomic_load_n(&n->visited, __ATOMIC_RELAXED)) {
			__atomic_store_n(&n->visited, 0, __ATOMIC_RELAXED);
		} else if (evictable(n, arg)) {
			q->hand = next == n ? NULL : next;
			return n;
		}
		n = next;
	}
	q->hand = n;
	return NULL;
}
