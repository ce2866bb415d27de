/* SPDX-License-Identifier: MIT */
/*
 * The SAVE path and the FLUSHes that wait for it (io/save.c).  Worker
 * thread.
 */
#ifndef KVS_IO_SAVE_H
#define KVS_IO_SAVE_H

#include <stdbool.h>
#include <stdint.h>

struct sqe_args;

#include "io/worker-types.h"

/* A decoded SAVE of @s against its registration @reg: copied, or watched for its fence. */
void save_start(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
		const struct sqe_args *a, const struct registration *reg);
/* A SAVE's copy came back through the sink: the store's end of it, and its CQE. */
void save_finish(struct worker *w, struct op *op);
/* SAVE AFTERs whose fence came (or that gave up) to the mover: true if any moved. */
bool save_check_waiting(struct worker *w);
void flush_start(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe);
/* FLUSHes whose SAVEs all ended are answered (or sent to the registry): true if any. */
bool flush_check(struct worker *w);

#endif /* KVS_IO_SAVE_H */
