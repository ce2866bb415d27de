/* SPDX-License-Identifier: MIT */
/*
 * Building a registration: what a worker session's REGISTER makes of the
 * engine's memory (struct registration, io/registration.h, where the
 * worker reads it).  The builder is the control thread's: it runs on
 * REGISTER, maps engine memory and takes a pool class.  The result is
 * immutable once published to the worker (wsession_publish_reg()); freed
 * by the control thread after the worker handed it back (UNREGISTER) or
 * with the session.
 */
#ifndef KVS_CONTROL_REG_BUILD_H
#define KVS_CONTROL_REG_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "io/registration.h"
#include "store/store.h"

struct nspace;
struct reg_req;

/* What a registration is built from: a parsed REGISTER and its session's facts. */
struct registration_spec {
	const struct reg_req *req;
	int *fds;	      /* received with it; an import takes its fd and leaves -1 */
	uint32_t device_kind; /* the session's (KVS_DEVICE_*): its mover imports the memory */
	unsigned dev;	      /* the worker's device, of that mover */
	int node;	      /* the worker's NUMA node: the pool region */
	uint32_t tp_rank;
	uint32_t tp_size;
	struct nspace *ns;   /* checked against, or given, the layout's geometry */
	struct store *store; /* the class comes from its pool */
	/*
	 * May the session map @want more bytes of host memory?  0, or -errno
	 * with @why set.  Asked before anything is mapped.
	 */
	int (*may_map)(void *arg, uint64_t want, char *why, size_t wl);
	void *may_map_arg;
};

/*
 * Build the layout, check it, import the memory and take a pool class:
 * 0 and *@ret, or -errno with @why set and nothing kept (fds not taken
 * stay the caller's).
 */
int registration_build(const struct registration_spec *spec, struct registration **ret, char *why,
		       size_t wl);
/* Release the imports and the class.  NULL is fine. */
void registration_free(struct registration *reg);

#endif /* KVS_CONTROL_REG_BUILD_H */
