/* SPDX-License-Identifier: MIT */
/*
 * A registration as the data path reads it: what a worker session's
 * REGISTER built, the engine's memory as kvstashd uses it.  The layout
 * (wire/layout.h) says where each layer of each block lies; the imports
 * (io/mem.h) make those bytes reachable by the session's mover; the place
 * (store/store.h) says where the session's shards go in the store: a slot
 * class, held for as long as the registration lives, the pool region of
 * the session's worker, and its shard of each block.
 *
 * Defined here, not with its builder (control/reg-build.h), so that
 * the I/O worker reads it without a control-plane header.  Immutable once
 * published to the worker (wsession_publish_reg(), io/worker.h); freed
 * by the control thread after the worker handed it back (UNREGISTER) or
 * with the session.
 */
#ifndef KVS_IO_REGISTRATION_H
#define KVS_IO_REGISTRATION_H

#include <stdint.h>

#include "store/store.h"

struct layout;
struct mem_import;

struct registration {
	struct layout *layout;
	uint32_t nr_mems;
	struct mem_import *mems;
	struct store *store;	  /* whose class place.class_id is held */
	struct store_place place; /* class, region, shard: where its blocks go */
	uint64_t mapped_bytes;	  /* host: the pages mapped; GPU: the allocations' sizes */
	uint32_t nr_fds;	  /* imports that keep an fd (counted in the uid's fds) */
};

#endif /* KVS_IO_REGISTRATION_H */
