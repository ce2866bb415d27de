/* SPDX-License-Identifier: MIT */
#include "io/saveorder.h"

void save_order_init(struct save_order *o)
{
	CDS_INIT_LIST_HEAD(&o->saves);
	o->next = 0;
	pthread_mutex_init(&o->lock, NULL);
}

void save_order_fini(struct save_order *o)
{
	if (!o)
		return;
	pthread_mutex_destroy(&o->lock);
}

void save_order_enter(struct save_order *o, struct save_mark *m)
{
	pthread_mutex_lock(&o->lock);
	m->seq = o->next++;
	cds_list_add_tail(&m->node, &o->saves);
	pthread_mutex_unlock(&o->lock);
}

void save_order_leave(struct save_order *o, struct save_mark *m)
{
	pthread_mutex_lock(&o->lock);
	cds_list_del(&m->node);
	pthread_mutex_unlock(&o->lock);
}

uint64_t save_order_mark(struct save_order *o)
{
	uint64_t v;

	pthread_mutex_lock(&o->lock);
	v = o->next;
	pthread_mutex_unlock(&o->lock);
	return v;
}

bool save_order_done_before(struct save_order *o, uint64_t mark)
{
	bool done;

	pthread_mutex_lock(&o->lock);
	done = cds_list_empty(&o->saves) ||
	       cds_list_first_entry(&o->saves, struct save_mark, node)->seq >= mark;
	pthread_mutex_unlock(&o->lock);
	return done;
}
