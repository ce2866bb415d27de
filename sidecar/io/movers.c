/* SPDX-License-Identifier: MIT */
/*
 * The mover table and what kvstashd does through it (see io/mover.h).
 * This is the one file outside movers/ that names a backend; no header
 * names it, so the backends' headers can include io/mover.h without a
 * circle.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "base/util.h"
#include "io/mem.h"
#include "io/mover.h"
#include "movers/cuda/cuda.h"
#include "movers/host/host.h"

/*
 * In this order: worker numbers follow it (HELLO replies carry them, and
 * the control thread finds GPU i's worker at 1 + i).
 */
static const struct mover_ops *const movers[] = {
	&host_mover,
	&cuda_mover,
};

#define NR_MOVERS (sizeof(movers) / sizeof(movers[0]))

/* Control thread only: set by movers_init(), read after it. */
static struct {
	bool inited;	  /* init was called: fini is due */
	unsigned devices; /* what init returned */
} state[NR_MOVERS];

const struct mover_ops *mover_for_device(uint32_t kind)
{
	for (unsigned i = 0; i < NR_MOVERS; i++)
		if (kind && movers[i]->device_kind == kind)
			return movers[i];
	return NULL;
}

const struct mover_ops *mover_for_mem(uint32_t kind)
{
	for (unsigned i = 0; i < NR_MOVERS; i++)
		if (kind < 32 && (movers[i]->mem_kinds & MEM_KIND(kind)))
			return movers[i];
	return NULL;
}

const struct mover_ops *mover_at(unsigned i, unsigned *ret_devices)
{
	if (i >= NR_MOVERS)
		return NULL;
	if (ret_devices)
		*ret_devices = state[i].devices;
	return movers[i];
}

int mover_route(uint32_t device_kind, const uint8_t uuid[16], unsigned *ret_worker, char *why,
		size_t wl)
{
	unsigned first = 0;

	for (unsigned i = 0; i < NR_MOVERS; i++) {
		int dev = 0;

		if (!device_kind || movers[i]->device_kind != device_kind) {
			first += state[i].devices;
			continue;
		}
		if (movers[i]->find_device && (dev = movers[i]->find_device(uuid, why, wl)) < 0)
			return -ENODEV;
		/* Only a device with a worker: workers[] has one per device counted here. */
		if ((unsigned)dev >= state[i].devices) {
			snprintf(why, wl, "%s %d has no I/O worker in kvstashd", movers[i]->dev_name,
				 dev);
			return -ENODEV;
		}
		*ret_worker = first + (unsigned)dev;
		return 0;
	}
	snprintf(why, wl, "no mover for device kind %u", device_kind);
	return -ENODEV;
}

unsigned movers_device_count(uint32_t device_kind)
{
	for (unsigned i = 0; i < NR_MOVERS; i++)
		if (device_kind && movers[i]->device_kind == device_kind)
			return state[i].devices;
	return 0;
}

int movers_init(const struct kvs_config *cfg)
{
	for (unsigned i = 0; i < NR_MOVERS; i++) {
		int r;

		state[i].inited = true;
		r = movers[i]->init(cfg);
		if (r < 0)
			return r;
		state[i].devices = (unsigned)MIN(r, MOVER_MAX_DEVICES);
	}
	return 0;
}

void movers_fini(void)
{
	for (unsigned i = NR_MOVERS; i-- > 0;) {
		if (!state[i].inited)
			continue;
		movers[i]->fini();
		state[i].inited = false;
		state[i].devices = 0;
	}
}

bool movers_pin_memory(void)
{
	for (unsigned i = 0; i < NR_MOVERS; i++)
		if (state[i].inited && state[i].devices && movers[i]->pin)
			return true;
	return false;
}

int movers_pin(void *base, uint64_t size)
{
	for (unsigned i = 0; i < NR_MOVERS; i++) {
		int r;

		if (!state[i].inited || !movers[i]->pin)
			continue;
		r = movers[i]->pin(base, size);
		if (r < 0) {
			while (i-- > 0)
				if (state[i].inited && movers[i]->unpin)
					movers[i]->unpin(base);
			return r;
		}
	}
	return 0;
}

void movers_unpin(void *base)
{
	for (unsigned i = NR_MOVERS; i-- > 0;)
		if (state[i].inited && movers[i]->unpin)
			movers[i]->unpin(base);
}

unsigned movers_device_nodes(int *nodes, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < NR_MOVERS; i++) {
		if (!movers[i]->device_node)
			continue;
		for (unsigned dev = 0; dev < state[i].devices; dev++) {
			int node = movers[i]->device_node(dev);
			bool seen = false;

			for (unsigned j = 0; j < n; j++)
				seen |= nodes[j] == node;
			if (!seen && n < max)
				nodes[n++] = node;
		}
	}
	return n;
}

/* ---- engine memory (io/mem.h) ------------------------------------------ */

int mem_import(const struct mover_ops *mover, unsigned dev, const struct kvs_wire_mem *m, int fd,
	       uint64_t lo, uint64_t hi, struct mem_import *ret, char *why, size_t wl)
{
	struct mem_import imp;
	int r;

	if (!mover->import || !(mover->mem_kinds & MEM_KIND(m->kind))) {
		snprintf(why, wl, "memory kind %u is not %s memory", m->kind, mover->dev_name);
		return -EINVAL;
	}
	r = mover->import(dev, m, fd, lo, hi, &imp, why, wl);
	if (r < 0)
		return r;
	imp.mover = mover;
	*ret = imp;
	return 0;
}

void mem_release(struct mem_import *imp)
{
	if (!imp)
		return;
	if (imp->mover)
		imp->mover->release(imp);
	if (imp->fd >= 0)
		close(imp->fd);
	imp->mover = NULL;
	imp->fd = -1;
	imp->base = 0;
	imp->mapped = 0;
	imp->map = NULL;
	imp->map_len = 0;
	imp->priv = NULL;
}
