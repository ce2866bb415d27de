/* SPDX-License-Identifier: MIT */
/*
 * The fetch API of include/kvstash/peer.h: a request copied into a struct
 * fetch and queued for the service thread (kp_submit()), its result read
 * and waited for, its references.  Runs on the callers' threads; what it
 * shares with the service thread is f->lock's (internal.h), or handed
 * over whole through the command queue (cmd_lock).  The fetch itself runs
 * in fetch.c; it ends in fetch-end.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/bits.h"
#include "peer/kp.h"

void kvspeer_fetch_params_init(struct kvspeer_fetch_params *p)
{
	memset(p, 0, sizeof(*p));
}

void kvspeer_fetch_ref(struct kvspeer_fetch *kf)
{
	struct fetch *f = (struct fetch *)kf;

	/* Relaxed: taking a reference orders nothing; the last unref is acq_rel. */
	__atomic_fetch_add(&f->refs, 1, __ATOMIC_RELAXED);
}

void kvspeer_fetch_unref(struct kvspeer_fetch *kf)
{
	struct fetch *f = (struct fetch *)kf;
	struct waiter *w, *tmp;

	if (!f)
		return;
	/* acq_rel: every use of @f by other holders happens before the free below. */
	if (__atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL))
		return;
	cds_list_for_each_entry_safe(w, tmp, &f->waiters, link)
		free(w);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
	free(f->keys);
	free(f->ents);
	free(f->dst);
	free(f);
}

static struct fetch *fetch_alloc(struct kvspeer *kp, enum fetch_kind kind, const char *peer,
				 uint32_t timeout_ms)
{
	struct fetch *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->kp = kp;
	f->kind = kind;
	f->refs = 2; /* the caller's and the service thread's (dropped in fetch_finish()) */
	snprintf(f->peer, sizeof(f->peer), "%s", peer);
	f->submit_ns = peer_now_ns();
	f->deadline_ns = f->submit_ns + (uint64_t)timeout_ms * NSEC_PER_MSEC;
	f->result = -EINPROGRESS;
	f->get_failed_at = UINT32_MAX;
	CDS_INIT_LIST_HEAD(&f->link);
	CDS_INIT_LIST_HEAD(&f->wait_link);
	CDS_INIT_LIST_HEAD(&f->waiters);
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	return f;
}

int kvspeer_fetch_submit(struct kvspeer *kp, const struct kvspeer_fetch_params *p,
			 struct kvspeer_fetch **ret_f)
{
	struct sockaddr_storage sa;
	socklen_t salen;
	struct fetch *f;
	int r;

	if (!kp || !p || !ret_f || !p->peer || !p->digest || !p->keys || !p->alloc)
		return -EINVAL;
	if (strlen(p->peer) >= KVSPEER_ADDR_MAX || peer_addr_parse(p->peer, &sa, &salen) < 0) {
		kp_log(kp, KVSPEER_LOG_ERR, "fetch: peer '%s' is not ADDR:PORT or [ADDR]:PORT",
		       p->peer);
		return -EINVAL;
	}
	if (!p->nr_keys || p->nr_keys > KVSPEER_MAX_KEYS || !p->nr_shards ||
	    p->nr_shards > KVSPEER_MAX_SHARDS ||
	    (uint64_t)p->nr_keys * p->nr_shards > KVSPEER_MAX_ENTRIES || !p->timeout_ms ||
	    p->resv0 || !all_zero(p->resv, sizeof(p->resv)))
		return -EINVAL;
	if (p->expect_node && (strlen(p->expect_node) >= KVSPEER_NAME_MAX ||
			       pw_check_name(p->expect_node, strlen(p->expect_node) + 1) < 0))
		return -EINVAL;
	f = fetch_alloc(kp, FK_FETCH, p->peer, p->timeout_ms);
	if (!f)
		return -ENOMEM;
	f->keys = malloc((size_t)p->nr_keys * KVSPEER_KEY_SIZE);
	if (!f->keys) {
		f->refs = 1;
		kvspeer_fetch_unref((struct kvspeer_fetch *)f);
		return -ENOMEM;
	}
	memcpy(f->keys, p->keys, (size_t)p->nr_keys * KVSPEER_KEY_SIZE);
	memcpy(f->digest, p->digest, sizeof(f->digest));
	f->nr_keys = p->nr_keys;
	f->nr_shards = p->nr_shards;
	f->expect_epoch = p->expect_epoch;
	if (p->expect_node)
		snprintf(f->expect_node, sizeof(f->expect_node), "%s", p->expect_node);
	f->alloc = p->alloc;
	f->landed = p->landed;
	f->done = p->done;
	f->arg = p->arg;
	r = kp_submit(kp, f);
	if (r < 0) {
		f->refs = 1;
		kvspeer_fetch_unref((struct kvspeer_fetch *)f);
		return r;
	}
	*ret_f = (struct kvspeer_fetch *)f;
	return 0;
}

int kvspeer_fetch_join(struct kvspeer_fetch *kf, kvspeer_done_fn done, void *arg)
{
	struct fetch *f = (struct fetch *)kf;
	struct waiter *w;

	if (!f || !done)
		return -EINVAL;
	w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct waiter){ .done = done, .arg = arg };
	pthread_mutex_lock(&f->lock);
	if (f->completed) {
		pthread_mutex_unlock(&f->lock);
		free(w);
		return -EALREADY;
	}
	cds_list_add_tail(&w->link, &f->waiters);
	pthread_mutex_unlock(&f->lock);
	return 0;
}

int kvspeer_fetch_result(const struct kvspeer_fetch *kf, int *ret_error)
{
	struct fetch *f = (struct fetch *)kf;
	int r;

	if (!f)
		return -EINVAL;
	pthread_mutex_lock(&f->lock);
	r = f->resolved ? f->result : -EINPROGRESS;
	if (f->resolved && ret_error)
		*ret_error = f->err;
	pthread_mutex_unlock(&f->lock);
	return r;
}

int kvspeer_fetch_wait(struct kvspeer_fetch *kf, int *ret_error)
{
	struct fetch *f = (struct fetch *)kf;

	if (!f)
		return -EINVAL;
	if (kp_on_thread(f->kp))
		return -EDEADLK;
	pthread_mutex_lock(&f->lock);
	while (!f->completed)
		pthread_cond_wait(&f->cond, &f->lock);
	pthread_mutex_unlock(&f->lock);
	return kvspeer_fetch_result(kf, ret_error);
}

int kvspeer_fetch(struct kvspeer *kp, const struct kvspeer_fetch_params *p, int *ret_error)
{
	struct kvspeer_fetch *f;
	int r;

	if (kp && kp_on_thread(kp))
		return -EDEADLK;
	r = kvspeer_fetch_submit(kp, p, &f);
	if (r < 0)
		return r;
	r = kvspeer_fetch_wait(f, ret_error);
	kvspeer_fetch_unref(f);
	return r;
}

int kvspeer_health(struct kvspeer *kp, const char *peer, int timeout_ms, struct kvspeer_health *ret)
{
	struct sockaddr_storage sa;
	socklen_t salen;
	struct fetch *f;
	int r, err = 0;

	if (!kp || !peer || !ret || timeout_ms <= 0 || strlen(peer) >= KVSPEER_ADDR_MAX ||
	    peer_addr_parse(peer, &sa, &salen) < 0)
		return -EINVAL;
	if (kp_on_thread(kp))
		return -EDEADLK;
	f = fetch_alloc(kp, FK_HEALTH, peer, (uint32_t)timeout_ms);
	if (!f)
		return -ENOMEM;
	r = kp_submit(kp, f);
	if (r < 0) {
		f->refs = 1;
		kvspeer_fetch_unref((struct kvspeer_fetch *)f);
		return r;
	}
	r = kvspeer_fetch_wait((struct kvspeer_fetch *)f, &err);
	if (r >= 0 && !err)
		*ret = f->health;
	kvspeer_fetch_unref((struct kvspeer_fetch *)f);
	return r < 0 ? r : err;
}
