/* SPDX-License-Identifier: MIT */
/*
 * A save order: the SAVEs in flight in one engine instance (across all
 * its sessions, and so across I/O workers), oldest first, for FLUSH with
 * KVS_FLUSH_INSTANCE.  Each SAVE enters with a sequence number and leaves
 * when stored; a flush waits until nothing older than its mark is left.
 *
 * The instance (control/instance.h) embeds one; workers reach it through
 * their session's data-path view (struct wsession, io/worker-types.h), so the
 * data path needs no control-plane header.
 *
 * Locking: the mutex orders every enter, leave and mark of all workers
 * against each other; each call takes it once.
 */
#ifndef KVS_SAVEORDER_H
#define KVS_SAVEORDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu/list.h>

/* One SAVE's place in its instance's order (embedded in the SAVE's op). */
struct save_mark {
	struct cds_list_head node;
	uint64_t seq;
};

struct save_order {
	pthread_mutex_t lock;
	struct cds_list_head saves; /* of struct save_mark, by seq */
	uint64_t next;		    /* the next SAVE's sequence */
};

void save_order_init(struct save_order *o);
/* With no SAVE left in it.  NULL is fine. */
void save_order_fini(struct save_order *o);

void save_order_enter(struct save_order *o, struct save_mark *m);
void save_order_leave(struct save_order *o, struct save_mark *m);
/* The next sequence: a flush's mark. */
uint64_t save_order_mark(struct save_order *o);
/* No SAVE older than @mark is in flight. */
bool save_order_done_before(struct save_order *o, uint64_t mark);

#endif /* KVS_SAVEORDER_H */
