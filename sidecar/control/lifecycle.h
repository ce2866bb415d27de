/* SPDX-License-Identifier: MIT */
/*
 * The daemon's life (control/lifecycle.c): start every module in order,
 * run the control loop, drain and stop them in reverse.  main() is its
 * one caller.
 */
#ifndef KVS_LIFECYCLE_H
#define KVS_LIFECYCLE_H

struct daemon;
struct kvs_config;

int daemon_init(struct daemon *d, struct kvs_config *cfg, const char *config_path);
/* Run the control loop until SIGTERM/SIGINT and the drain finished. */
int daemon_run(struct daemon *d);
/* Stop what daemon_init() started; also after a failed daemon_init(). */
void daemon_fini(struct daemon *d);

#endif /* KVS_LIFECYCLE_H */
