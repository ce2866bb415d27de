/* SPDX-License-Identifier: MIT */
/*
 * The registration pipeline (pipeline.c): changes from the queue and the
 * backfill, netted into batches, each one REGISTER, resolved in queue
 * position order.  Control thread only.
 */
#ifndef KVS_REG_PIPELINE_H
#define KVS_REG_PIPELINE_H

struct registry;

/* Leased: fill batches and send them, up to BATCHES_IN_FLIGHT (pump_run()). */
void pipeline_fill(struct registry *r);

/* Not leased: what the queue holds is dropped (the next lease backfills). */
void pipeline_drain(struct registry *r);

#endif /* KVS_REG_PIPELINE_H */
