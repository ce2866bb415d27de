/* SPDX-License-Identifier: MIT */
/*
 * The LOAD path, parked LOADs and their parts included (io/load.c).
 * Worker thread.
 */
#ifndef KVS_IO_LOAD_H
#define KVS_IO_LOAD_H

#include <stdbool.h>
#include <stdint.h>

struct sqe_args;

#include "io/worker-types.h"

/* A decoded LOAD of @s against its registration @reg: copied, or parked for its blocks. */
void load_start(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe,
		const struct sqe_args *a, const struct registration *reg);
/*
 * An SQE refused before it took a lease share: its CQE with @err, and a
 * LOAD PROGRESS's fence released (any opcode: only a LOAD's is).
 */
void load_refused(struct worker *w, struct wsession *s, const struct kvs_sqe *sqe, int err);
/* A LOAD's copy, or a part of a parked one, came back through the sink. */
void load_finish(struct worker *w, struct op *op);
/* Parked LOADs go on as their blocks arrive: true if any moved. */
bool load_check_parked(struct worker *w);

#endif /* KVS_IO_LOAD_H */
