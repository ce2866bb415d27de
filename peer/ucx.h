/* SPDX-License-Identifier: MIT */
/*
 * The RDMA READ transport (KVSPEER_TRANSPORT_UCX, ucx.c): the worker and
 * its wakeup fd, registered memory's keys, endpoints to peers' workers and
 * the gets a fetch issues.  Service thread only, but for mem_map/unmap
 * (under reg_lock, from kvspeer_mem_register()).
 */
#ifndef KVS_PEER_UCX_H
#define KVS_PEER_UCX_H

#include "peer/internal.h"

/* A get finished (@status 0 or -errno), on the service thread. */
typedef void (*pucx_get_done_fn)(void *arg, uint32_t block, int status);

int pucx_new(struct kvspeer *kp, struct pucx **ret, char *why, size_t wl);
void pucx_free(struct pucx *u);
int pucx_fd(struct pucx *u);
/* Progress until idle, then re-arm the wakeup fd. */
void pucx_progress(struct pucx *u);
int pucx_address(struct pucx *u, const void **ret_addr, size_t *ret_len);
int pucx_mem_map(struct pucx *u, void *addr, size_t len, void **ret_memh, void **ret_rkey,
		 size_t *ret_rkey_len);
void pucx_mem_unmap(struct pucx *u, void *memh, void *rkey);
int pucx_ep_new(struct pucx *u, const void *addr, size_t len, struct conn *c, struct pucx_ep **ret);
/* Force-close; outstanding gets complete with errors before this returns. */
void pucx_ep_close(struct pucx *u, struct pucx_ep *ep);
int pucx_rkey_unpack(struct pucx_ep *ep, const void *buf, size_t len, struct pucx_rkey **ret);
void pucx_rkey_free(struct pucx_rkey *k);
/*
 * Read @len bytes at @raddr into @dst; @done(@arg, @block, status) when
 * done, also when done at once (before this returns 0).  Not called when
 * this fails.
 */
int pucx_get(struct pucx_ep *ep, void *dst, uint64_t len, uint64_t raddr, struct pucx_rkey *k,
	     pucx_get_done_fn done, void *arg, uint32_t block);

#endif /* KVS_PEER_UCX_H */
