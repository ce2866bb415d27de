/* SPDX-License-Identifier: MIT */
/*
 * A fetch's end (fetch_finish()): exactly once, on the service thread,
 * when nothing can write its buffers any more; its counters, its peer's
 * record, its result, then the host's done callbacks.  And the peer's
 * lock given back on the way out (fetch_release()).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peer/conn.h"
#include "peer/fetch-end.h"
#include "peer/kp.h"

static unsigned fail_kind(int err)
{
	switch (err) {
	case -ETIMEDOUT:
		return KVSPEER_FAIL_TIMEOUT;
	case -ECONNREFUSED:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -EADDRNOTAVAIL:
	case -EMFILE:
		return KVSPEER_FAIL_CONNECT;
	case -EACCES:
		return KVSPEER_FAIL_AUTH;
	case -EPROTO:
	case -EBADMSG:
	case -EPROTONOSUPPORT:
		return KVSPEER_FAIL_PROTOCOL;
	case -ESTALE:
		return KVSPEER_FAIL_STALE;
	case -ENOSPC:
		return KVSPEER_FAIL_ALLOC;
	case -EREMOTEIO:
		return KVSPEER_FAIL_REFUSED;
	case -EIO:
		return KVSPEER_FAIL_TRANSPORT;
	default:
		return KVSPEER_FAIL_RESET;
	}
}

void fetch_detach(struct fetch *f)
{
	if (!f->c)
		return;
	f->c->f = NULL;
	f->c = NULL;
	if (f->pe && f->pe->busy)
		f->pe->busy--;
}

/* The peer's lock is released (or being released): no longer ours to count. */
static void lock_gone(struct fetch *f)
{
	if (f->lock_held && f->pe)
		f->pe->locks--;
	f->lock_held = false;
}

/* The first cause wins: a shorter prefix has one reason. */
void fetch_set_err(struct fetch *f, int err)
{
	if (err && !f->err)
		f->err = err;
}

void fetch_finish(struct fetch *f, int err)
{
	struct kvspeer *kp = f->kp;
	struct peer_ent *pe = f->pe;
	uint64_t us, bytes = 0;
	unsigned bucket = 0;
	int n;

	if (f->state == FS_DONE)
		return;
	fetch_set_err(f, err);
	f->state = FS_DONE;
	fetch_detach(f);
	lock_gone(f);
	cds_list_del_init(&f->link);
	cds_list_del_init(&f->wait_link);
	n = f->kind == FK_FETCH ? (int)f->verified : 0;
	us = (peer_now_ns() - f->submit_ns) / 1000;
	if (f->kind == FK_FETCH) {
		for (uint32_t i = 0; i < f->verified * f->nr_shards; i++)
			bytes += f->ents[i].len;
		STAT_ADD(kp, fetches, 1);
		if (f->verified == f->nr_keys)
			STAT_ADD(kp, fetches_full, 1);
		else if (f->verified)
			STAT_ADD(kp, fetches_partial, 1);
		else
			STAT_ADD(kp, fetches_empty, 1);
		STAT_ADD(kp, fetch_blocks, f->verified);
		STAT_ADD(kp, fetch_bytes, bytes);
		while (bucket < KVSPEER_HIST_BUCKETS - 1 && us >= (1ull << bucket))
			bucket++;
		STAT_ADD(kp, fetch_latency_us[bucket], 1);
		STAT_ADD(kp, fetch_latency_sum_us, us);
	}
	if (f->err && f->err != -ESHUTDOWN)
		STAT_ADD(kp, fetch_fail[fail_kind(f->err)], 1);
	if (pe) {
		pe->last_ns = peer_now_ns();
		pe->blocks += f->verified;
		pe->bytes += bytes;
		if (f->err && f->err != -ESHUTDOWN) {
			pe->failures++;
			pe->last_error = f->err;
		} else if (f->err == 0) {
			pe->last_error = 0;
		}
	}
	if (f->err && f->err != -ESHUTDOWN && f->kind == FK_FETCH)
		kp_log_peer(kp, KVSPEER_LOG_INFO, "fetch of %u keys from %s: %u blocks (%s)",
			    f->nr_keys, f->peer, f->verified, strerror(-f->err));

	pthread_mutex_lock(&f->lock);
	f->result = n;
	f->resolved = true; /* readable from the callbacks on (kvspeer_fetch_result()) */
	pthread_mutex_unlock(&f->lock);
	/*
	 * Callbacks first, then "completed": a host that waits and then frees
	 * what it gave as arg must find every callback finished.  Joiners that
	 * come while callbacks run are picked up by the loop; once it sees none
	 * under f->lock it marks the fetch completed, and joins get -EALREADY.
	 */
	if (f->done)
		f->done(f->arg, (struct kvspeer_fetch *)f, n);
	for (;;) {
		struct cds_list_head todo;
		struct waiter *w, *tmp;

		CDS_INIT_LIST_HEAD(&todo);
		pthread_mutex_lock(&f->lock);
		cds_list_splice(&f->waiters, &todo);
		CDS_INIT_LIST_HEAD(&f->waiters);
		if (cds_list_empty(&todo)) {
			f->completed = true;
			/* Under f->lock: pairs with the waiter's check in kvspeer_fetch_wait(). */
			pthread_cond_broadcast(&f->cond);
			pthread_mutex_unlock(&f->lock);
			break;
		}
		pthread_mutex_unlock(&f->lock);
		cds_list_for_each_entry_safe(w, tmp, &todo, link) {
			w->done(w->arg, (struct kvspeer_fetch *)f, n);
			free(w);
		}
	}
	kvspeer_fetch_unref((struct kvspeer_fetch *)f);
}

/* Give the peer's lock back: RELEASE when the conn is usable, else closing it does. */
void fetch_release(struct fetch *f, struct conn *c, int err)
{
	struct pw_release m = { .lock_id = f->lock_id };

	if (c && c->state == CS_READY && f->lock_id) {
		uint32_t seq = ++c->seq;

		if (conn_send(c, PW_RELEASE, seq, &m, sizeof(m), NULL, 0) == 0) {
			f->lock_id = 0;
			fetch_finish(f, err);
			c->drain_seq = seq;
			c->idle_since_ns = peer_now_ns();
			conn_flush(c);
			return;
		}
	}
	fetch_finish(f, err);
	if (c && c->state != CS_DEAD)
		conn_close(c, err);
}
