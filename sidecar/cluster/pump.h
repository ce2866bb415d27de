/* SPDX-License-Identifier: MIT */
/*
 * The registry's turn on the control loop (pump.c).  Control thread only.
 */
#ifndef KVS_REG_PUMP_H
#define KVS_REG_PUMP_H

struct registry;

/*
 * Act on what the callbacks recorded, the deadlines and the queue: close
 * or open the connection, drive the lease, send batches and queries,
 * complete flushes, then re-arm the timer.  Outside hiredis' callbacks
 * (registry_dispatch(), registry_tick(), registry_shutdown()).
 */
void pump_run(struct registry *r);

#endif /* KVS_REG_PUMP_H */
