/* SPDX-License-Identifier: MIT */
/*
 * What a worker posts (io/post.c): CQEs to its sessions, acks to the
 * control thread.  Worker thread.
 */
#ifndef KVS_IO_POST_H
#define KVS_IO_POST_H

#include <stdbool.h>
#include <stdint.h>

#include "io/worker-types.h"

/* Tell the control thread about @s through @a (any worker thread). */
void post_ack(struct worker *w, struct wmsg *a, struct wsession *s, enum wcmd_type type);
/*
 * @cqe into @s's CQ, or its backlog while the CQ is full; @ans: the CQE's
 * cluster answer (KVS_CQE_CLUSTER), or NULL.  Drops the session's count
 * of ops in flight.  Seen by the engine at post_publish().
 */
void post_cqe(struct worker *w, struct wsession *s, struct kvs_cqe *cqe,
	      const struct kvs_cluster_answer *ans);
void post_flags(struct worker *w, struct wsession *s, uint64_t user_data, int32_t res, uint64_t r0,
		uint64_t r1, uint32_t flags);
void post(struct worker *w, struct wsession *s, uint64_t user_data, int32_t res, uint64_t r0,
	  uint64_t r1);
/* Move what the backlog holds into the CQ as far as it has room: true if any moved. */
bool post_backlog(struct wsession *s);
void post_publish(struct worker *w);

#endif /* KVS_IO_POST_H */
