/* SPDX-License-Identifier: MIT */
/*
 * A connection's bytes (conn.c), for either side: it calls the side only
 * through the handlers the side set (c->ops, c->rx: internal.h), never a
 * serve_* or fetch_* function.  Service thread only.
 */
#ifndef KVS_PEER_CONN_H
#define KVS_PEER_CONN_H

#include "peer/internal.h"

/*
 * A connection on @fd (owned by it from here on, but for a NULL return)
 * for @side, whose handlers are @ops; its first state's messages go to
 * @rx (NULL for a connect in progress: @ops->connected sets it).
 */
struct conn *conn_new(struct kvspeer *kp, int fd, enum conn_side side, const struct conn_ops *ops,
		      const struct conn_rx *rx, const struct sockaddr *sa, socklen_t salen);
/* Close (once): unregister, then c->ops->closed (drops locks or fails the user). */
void conn_close(struct conn *c, int err);
void conn_free(struct conn *c);
/* Queue a message; flushed by conn_flush().  0 or -ENOMEM (the conn is closed). */
int conn_send(struct conn *c, unsigned type, uint32_t seq, const void *fixed, size_t flen,
	      const void *tail, size_t tlen);
int conn_send_error(struct conn *c, uint32_t seq, int status, unsigned req_type, const char *text);
/* Write what is queued (and a serve stream); adjusts EPOLLOUT.  0, or -errno (closed). */
int conn_flush(struct conn *c);
void conn_set_sockopts(struct kvspeer *kp, int fd);

#endif /* KVS_PEER_CONN_H */
