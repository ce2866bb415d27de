/* SPDX-License-Identifier: MIT */
/*
 * What every part of libkvspeer uses of the service (kp.c): its log, its
 * thread's identity, its epoch, registered memory's lookup, epoll
 * registration, and the queue that hands work to the service thread.
 */
#ifndef KVS_PEER_KP_H
#define KVS_PEER_KP_H

#include "peer/internal.h"

void kp_log(struct kvspeer *kp, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A line caused by a peer: rate-limited so no peer can flood the host's log. */
void kp_log_peer(struct kvspeer *kp, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool kp_on_thread(struct kvspeer *kp);
uint64_t kp_epoch(struct kvspeer *kp);

/* Region lookup for a range; under reg_lock.  Index or -1. */
int kp_region_find(struct kvspeer *kp, const void *addr, uint64_t len);

/* Watch @fd for @events; they go to @src->fn on the service thread.  0 or -errno. */
int kp_epoll_add(struct kvspeer *kp, int fd, struct ev_src *src, uint32_t events);

/* Make the service thread run its queues (run_cmds() in service.c). */
void kp_wake(struct kvspeer *kp);
/* Queue a fetch for the thread.  -ESHUTDOWN once kvspeer_free() began. */
int kp_submit(struct kvspeer *kp, struct fetch *f);
/* Run @fn on the service thread and wait for it.  Its result, -EDEADLK or -ESHUTDOWN. */
int kp_ctl(struct kvspeer *kp, void (*fn)(struct kvspeer *, struct ctl_req *), void *arg);

#endif /* KVS_PEER_KP_H */
