/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/nspace.h"
#include "obs/log.h"
#include "control/reg-build.h"
#include "io/mem.h"
#include "io/mover.h"
#include "wire/layout.h"
#include "wire/proto.h"

void registration_free(struct registration *reg)
{
	if (!reg)
		return;
	for (uint32_t i = 0; i < reg->nr_mems; i++)
		mem_release(&reg->mems[i]);
	if (reg->place.class_id != POOL_NO_CLASS)
		store_class_put(reg->store, reg->place.class_id);
	free(reg->mems);
	free(reg->layout);
	free(reg);
}

/*
 * Every allocation is the memory of @mv, the mover of the session's
 * device, and mapping the spans of them the layout needs costs
 * *@ret_bytes of host address space (0 for a mover that maps none).
 */
static int check_mems(const struct registration_spec *spec, const struct registration *reg,
		      const struct mover_ops *mv, uint64_t *ret_bytes, char *why, size_t wl)
{
	const struct reg_req *req = spec->req;
	uint64_t host_bytes = 0;

	for (uint32_t i = 0; i < req->nr_mems; i++) {
		const struct kvs_wire_mem *m = &req->mems[i];
		const struct mover_ops *mk = mover_for_mem(m->kind);
		uint64_t lo, hi, n;

		if (mk != mv) {
			snprintf(why, wl, "allocation %u: %s memory in a %s session", i,
				 mk ? mk->dev_name : "unknown", mv->dev_name);
			return -EINVAL;
		}
		if (mv->map_bytes) {
			layout_mem_span(reg->layout, i, &lo, &hi);
			n = mv->map_bytes(lo, hi);
			if (__builtin_add_overflow(host_bytes, n, &host_bytes))
				host_bytes = UINT64_MAX;
		}
	}
	*ret_bytes = host_bytes;
	return 0;
}

/* Import each allocation's needed span through @mv; the imports own the fds they took. */
static int import_mems(const struct registration_spec *spec, struct registration *reg,
		       const struct mover_ops *mv, char *why, size_t wl)
{
	const struct reg_req *req = spec->req;

	for (uint32_t i = 0; i < req->nr_mems; i++) {
		const struct kvs_wire_mem *m = &req->mems[i];
		char w2[KVS_TEXT_MAX - 32];
		int fd = proto_mem_has_fd(m->kind) ? spec->fds[m->fd_index] : -1;
		uint64_t lo, hi;
		int r;

		layout_mem_span(reg->layout, i, &lo, &hi);
		r = mem_import(mv, spec->dev, m, fd, lo, hi, &reg->mems[i], w2, sizeof(w2));
		if (r < 0) {
			snprintf(why, wl, "allocation %u: %s", i, w2);
			return r;
		}
		if (fd >= 0)
			spec->fds[m->fd_index] = -1; /* the import owns it now */
		reg->nr_mems = i + 1;
		reg->nr_fds += reg->mems[i].fd >= 0;
		reg->mapped_bytes += reg->mems[i].mapped;
	}
	return 0;
}

/* The pool's slot class of the layout's block size. */
static int take_class(const struct registration_spec *spec, struct registration *reg, char *why,
		      size_t wl)
{
	int r = store_class_get(spec->store, reg->layout->slot_bytes, &reg->place.class_id);

	if (r < 0) {
		if (r == -E2BIG)
			snprintf(why, wl,
				 "a block of %" PRIu64
				 " bytes does not fit a pool extent: raise [pool] extent_size",
				 reg->layout->slot_bytes);
		else
			snprintf(why, wl, "too many distinct block sizes in the pool");
		reg->place.class_id = POOL_NO_CLASS;
	}
	return r;
}

/*
 * The layout becomes the namespace's (or must be the one it has).  The
 * geometry is the namespace's from now on: its identity in the SSD tier
 * is the name with it (control thread: the first comes once).  Without
 * one (the tier's namespace table is full) its blocks stay in DRAM: a
 * smaller cache, not a refused engine.
 */
static int adopt_layout(const struct registration_spec *spec, const struct registration *reg,
			char *why, size_t wl)
{
	bool first;
	int r = nspace_adopt(spec->ns, reg->layout, spec->tp_size, why, wl, &first);

	if (r == 0 && first) {
		int t = store_ns_tier(spec->store, &spec->ns->in_store, spec->ns->name,
				      reg->layout->fingerprint, reg->layout->slot_bytes,
				      spec->tp_size, reg->layout->replicated);

		if (t < 0)
			log_warning_errno(t, "namespace %s: not in the SSD tier, DRAM only",
					  spec->ns->name);
	}
	return r;
}

int registration_build(const struct registration_spec *spec, struct registration **ret, char *why,
		       size_t wl)
{
	const struct reg_req *req = spec->req;
	struct registration *reg = calloc(1, sizeof(*reg));
	uint64_t *sizes = calloc(req->nr_mems, sizeof(*sizes)), host_bytes = 0;
	const struct mover_ops *mv = mover_for_device(spec->device_kind);
	int r = 0;

	if (!reg || !sizes || !(reg->mems = calloc(req->nr_mems, sizeof(*reg->mems)))) {
		free(sizes);
		free(reg);
		snprintf(why, wl, "out of memory");
		return -ENOMEM;
	}
	reg->store = spec->store;
	reg->place.class_id = POOL_NO_CLASS;
	for (uint32_t i = 0; i < req->nr_mems; i++) {
		reg->mems[i].fd = -1;
		sizes[i] = req->mems[i].size;
	}
	/*
	 * Geometry first, against the declared sizes (an import refuses an
	 * allocation smaller than declared): the views say which bytes of
	 * each allocation are needed, and only those are mapped, after the
	 * bound on mapped bytes agreed.
	 */
	r = layout_build(req, sizes, &reg->layout, why, wl);
	free(sizes);
	if (!r)
		r = check_mems(spec, reg, mv, &host_bytes, why, wl);
	if (!r && host_bytes)
		r = spec->may_map(spec->may_map_arg, host_bytes, why, wl);
	if (!r)
		r = import_mems(spec, reg, mv, why, wl);
	if (!r)
		r = take_class(spec, reg, why, wl);
	if (!r)
		r = adopt_layout(spec, reg, why, wl);
	if (r < 0) {
		registration_free(reg);
		return r;
	}
	reg->place.region = pool_region_for_node(store_pool(spec->store), spec->node);
	reg->place.nshards = reg->layout->replicated ? 1 : spec->tp_size;
	reg->place.shard = reg->layout->replicated ? 0 : spec->tp_rank;
	*ret = reg;
	return 0;
}
