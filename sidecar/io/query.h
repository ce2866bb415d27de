/* SPDX-License-Identifier: MIT */
/*
 * QUERY, local, cluster and fetching (io/query.c).  Worker thread.
 */
#ifndef KVS_IO_QUERY_H
#define KVS_IO_QUERY_H

#include <stdbool.h>
#include <stdint.h>

struct sqe_args;

#include "io/worker-types.h"

void query_start(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
		 const struct sqe_args *a);
/* A fetching QUERY is back from the control side: answer it over what is resident now. */
void query_fetch_answer(struct worker *w, struct op *op);

#endif /* KVS_IO_QUERY_H */
