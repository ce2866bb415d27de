/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/mem.h"
#include "base/conf.h"
#include "obs/log.h"
#include "store/pool.h"
#include "base/util.h"

#define HUGE_2M ((uint64_t)2 << 20)
#define EXTENT_MIN (64ull << 10)
#define EXTENT_MAX (64ull << 20)
#define DEMAND_DECAY_EVERY 4096u

/*
 * A region is made ready in chunks of whole pin units, one chunk per CPU
 * of its node.  Each chunk has two threads: a faulter touches its pages
 * (the kernel zeroes them) one pin unit after another, and a pinner pins
 * each unit (pool_pin, e.g. cudaHostRegister) as soon as the faulter is
 * past it, so faulting, which waits on memory, and pinning, which walks
 * page tables, overlap.  On the H200 host, 96 GiB of hugetlb pages: 2.5-2.8
 * s this way, 3.7-3.9 s faulting a chunk and then pinning it, 19-22 s
 * letting the pin fault the pages itself (docs/PERFORMANCE.md).
 */
#define PIN_UNIT (256ull << 20) /* rounded up to whole extents */

struct prefault_job {
	uint8_t *base;
	uint64_t len;
	uint64_t unit; /* pin unit: whole extents; the region's last one may be shorter */
	uint64_t step; /* page size */
	int node;
	const struct pool_pin *pin;
	uint64_t *progress; /* bytes touched, all chunks (relaxed atomic) */
	/* faulter -> pinner, under lock: bytes of the chunk touched so far */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t touched;
	bool pin_after; /* no pinner thread: the faulter pins when done */
	unsigned pinned; /* units pinned, a prefix of the chunk's */
	uint64_t fault_ns, pin_ns;
	int pin_err; /* the first pin's error; the pinner stops there */
};

static void job_pin(struct prefault_job *j)
{
	uint64_t t0 = now_ns();

	if (j->node >= 0)
		numa_run_on_node(j->node);
	for (uint64_t off = 0; off < j->len; off += j->unit) {
		uint64_t len = MIN(j->unit, j->len - off);

		pthread_mutex_lock(&j->lock);
		while (j->touched < off + len)
			pthread_cond_wait(&j->cond, &j->lock);
		pthread_mutex_unlock(&j->lock);
		j->pin_err = j->pin->pin(j->base + off, len);
		if (j->pin_err)
			break;
		j->pinned++;
	}
	j->pin_ns = now_ns() - t0;
}

static void *pin_thread(void *arg)
{
	job_pin(arg);
	return NULL;
}

static void job_fault(struct prefault_job *j)
{
	const uint64_t report = 64ull << 20;
	uint64_t since = 0, t0 = now_ns();

	/* Fault on the region's node so first-touch and the CPU agree. */
	if (j->node >= 0)
		numa_run_on_node(j->node);
	for (uint64_t off = 0; off < j->len; off += j->step) {
		/* A write, not a read: a read would map the shared zero page. */
		((volatile uint8_t *)j->base)[off] = 0;
		since += j->step;
		if (since >= report) {
			__atomic_fetch_add(j->progress, since, __ATOMIC_RELAXED);
			since = 0;
		}
		if ((off + j->step) % j->unit == 0 || off + j->step >= j->len) {
			/* A unit done: the pinner may take it. */
			pthread_mutex_lock(&j->lock);
			j->touched = MIN(off + j->step, j->len);
			pthread_cond_signal(&j->cond);
			pthread_mutex_unlock(&j->lock);
		}
	}
	__atomic_fetch_add(j->progress, since, __ATOMIC_RELAXED);
	j->fault_ns = now_ns() - t0;
	if (j->pin && j->pin_after)
		job_pin(j);
}

static void *fault_thread(void *arg)
{
	job_fault(arg);
	return NULL;
}

static unsigned node_cpus(int node)
{
	struct bitmask *m;
	unsigned n = 0;

	if (node < 0 || numa_available() < 0)
		return (unsigned)MAX(sysconf(_SC_NPROCESSORS_ONLN), 1);
	m = numa_allocate_cpumask();
	if (m && numa_node_to_cpus(node, m) == 0)
		n = numa_bitmask_weight(m);
	numa_free_cpumask(m);
	return n ? n : 1;
}

/* The pins of @r (r->pin_unit bytes each, the last one shorter) undone: the first @n of them. */
static void region_unpin(const struct pool *pool, const struct pool_region *r, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		pool->pin->unpin(r->base + (uint64_t)i * r->pin_unit);
}

static int prefault(struct pool *pool, struct pool_region *r, unsigned nthreads)
{
	struct prefault_job jobs[POOL_MAX_THREADS];
	pthread_t fault_tid[POOL_MAX_THREADS], pin_tid[POOL_MAX_THREADS];
	bool faulting[POOL_MAX_THREADS] = { false }, pinning[POOL_MAX_THREADS] = { false };
	uint64_t progress = 0, step = r->huge ? HUGE_2M : (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t fault_ns = 0, pin_ns = 0, per, unit, chunk;
	unsigned njobs = 0, last_tenth = 0, pins = 0;
	int err = 0;

	nthreads = MAX(1u, MIN(nthreads, POOL_MAX_THREADS));
	per = round_up_u64((r->size + nthreads - 1) / nthreads, pool->extent_size);
	unit = MIN(per, round_up_u64(PIN_UNIT, pool->extent_size));
	chunk = round_up_u64(per, unit); /* whole units: the pins have one stride */
	for (; njobs < nthreads; njobs++) {
		uint64_t off = (uint64_t)njobs * chunk;
		struct prefault_job *j = &jobs[njobs];

		if (off >= r->size)
			break;
		*j = (struct prefault_job){ .base = r->base + off,
					    .len = MIN(chunk, r->size - off),
					    .unit = unit,
					    .step = step,
					    .node = r->node,
					    .pin = pool->pin,
					    .progress = &progress };
		pthread_mutex_init(&j->lock, NULL);
		pthread_cond_init(&j->cond, NULL);
		/* The pinner first: the faulter must know whether to pin itself. */
		if (j->pin)
			pinning[njobs] = pthread_create(&pin_tid[njobs], NULL, pin_thread, j) == 0;
		j->pin_after = j->pin && !pinning[njobs];
		faulting[njobs] = pthread_create(&fault_tid[njobs], NULL, fault_thread, j) == 0;
	}
	/* Chunks no faulter took: here, slower but complete (their pinners keep up). */
	for (unsigned i = 0; i < njobs; i++)
		if (!faulting[i])
			job_fault(&jobs[i]);
	/* Progress lines for pools large enough to take a while. */
	if (r->size >= (1ull << 30)) {
		for (;;) {
			uint64_t done = __atomic_load_n(&progress, __ATOMIC_RELAXED);
			unsigned tenth = (unsigned)(done * 10 / r->size);

			if (tenth > last_tenth && tenth < 10) {
				log_info("pool: node %d: pre-faulted %" PRIu64 " of %" PRIu64 " MiB",
					 r->node, done >> 20, r->size >> 20);
				last_tenth = tenth;
			}
			if (done >= r->size)
				break;
			usleep(100000);
		}
	}
	for (unsigned i = 0; i < njobs; i++) {
		struct prefault_job *j = &jobs[i];

		if (faulting[i])
			pthread_join(fault_tid[i], NULL);
		if (pinning[i])
			pthread_join(pin_tid[i], NULL);
		pthread_cond_destroy(&j->cond);
		pthread_mutex_destroy(&j->lock);
		fault_ns = MAX(fault_ns, j->fault_ns);
		pin_ns = MAX(pin_ns, j->pin_ns);
		pins += j->pinned;
		if (j->pin_err && !err)
			err = j->pin_err;
	}
	if (err) {
		/* The movers logged why; every unit that did pin is unpinned. */
		for (unsigned i = 0; i < njobs; i++)
			for (unsigned u = 0; u < jobs[i].pinned; u++)
				pool->pin->unpin(jobs[i].base + (uint64_t)u * unit);
		return err;
	}
	r->pin_unit = unit;
	r->nr_pins = pins;
	r->nr_chunks = njobs;
	r->pinned = pool->pin != NULL;
	r->fault_ns = fault_ns;
	r->pin_ns = pin_ns;
	return 0;
}

static uint64_t auto_extent(uint64_t region, bool huge)
{
	uint64_t e = region / 64;

	e = MAX(e, EXTENT_MIN);
	e = MIN(e, EXTENT_MAX);
	e &= ~(EXTENT_MIN - 1);
	if (huge)
		e = round_up_u64(e, HUGE_2M);
	return e;
}

unsigned pool_free_hugepages(int node)
{
	char path[128];
	unsigned v = 0;
	FILE *f;

	if (node >= 0)
		snprintf(path, sizeof(path),
			 "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/free_hugepages",
			 node);
	else
		snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
	f = fopen(path, "re");
	if (f) {
		if (fscanf(f, "%u", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

static int region_map(struct pool_region *r)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	void *p;

	if (r->huge)
		flags |= MAP_HUGETLB;
	p = mmap(NULL, r->size, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (p == MAP_FAILED) {
		int err = -errno;

		if (r->huge)
			return log_error_errno(err,
					       "pool: node %d: cannot map %" PRIu64
					       " MiB of hugepages (%u free 2 MiB pages, %" PRIu64
					       " needed; raise vm.nr_hugepages or set [pool] hugepages = no)",
					       r->node, r->size >> 20, pool_free_hugepages(r->node),
					       r->size / HUGE_2M);
		return log_error_errno(err, "pool: node %d: cannot map %" PRIu64 " MiB", r->node,
				       r->size >> 20);
	}
	r->base = p;
	if (r->node >= 0) {
		/* Bind before the first touch so every page lands on the node. */
		unsigned long mask[16] = { 0 };

		mask[r->node / (8 * sizeof(long))] |= 1ul << (r->node % (8 * sizeof(long)));
		if (mbind(p, r->size, MPOL_BIND, mask, sizeof(mask) * 8, 0) < 0)
			log_warning_errno(errno, "pool: node %d: mbind failed, memory not bound",
					  r->node);
	}
	if (!r->huge && madvise(p, r->size, MADV_HUGEPAGE) < 0)
		log_debug_errno(errno, "pool: transparent hugepages not available");
	/* A fork (e.g. a helper) must not copy-on-write the pool. */
	madvise(p, r->size, MADV_DONTFORK);
	return 0;
}

static int region_init(struct pool *pool, struct pool_region *r, const struct kvs_config *cfg)
{
	uint64_t t0 = now_ns(), t1, lock_ns;
	char then[96];
	unsigned threads;
	int err;

	err = region_map(r);
	if (err)
		return err;
	/*
	 * A chunk per CPU of the node: faulting is the kernel zeroing pages,
	 * and pinning walks them, both per page and parallel.  (MAP_NORESERVE
	 * hugetlb faults SIGBUS when the pages run out: pool_create checked
	 * the count.)
	 */
	threads = cfg->prefault_threads ? cfg->prefault_threads : node_cpus(r->node);
	err = prefault(pool, r, threads);
	if (err)
		return err;
	/* Pinned pages cannot be swapped out; only an unpinned pool needs the lock. */
	t1 = now_ns();
	if (!r->pinned && mlock(r->base, r->size) < 0)
		log_warning_errno(errno,
				  "pool: node %d: cannot lock %" PRIu64
				  " MiB in memory (raise LimitMEMLOCK / RLIMIT_MEMLOCK)",
				  r->node, r->size >> 20);
	lock_ns = now_ns() - t1;

	r->nr_extents = (uint32_t)(r->size / pool->extent_size);
	r->extents = calloc(r->nr_extents, sizeof(*r->extents));
	r->free_extents = calloc(r->nr_extents, sizeof(*r->free_extents));
	if (!r->extents || !r->free_extents)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->nr_extents; i++) {
		r->extents[i].base = r->base + (uint64_t)i * pool->extent_size;
		r->extents[i].class_id = POOL_NO_CLASS;
		CDS_INIT_LIST_HEAD(&r->extents[i].node);
		/* Stack top = lowest address first: nicer to read in dumps. */
		r->free_extents[i] = r->nr_extents - 1 - i;
	}
	r->nr_free_extents = r->nr_extents;
	for (unsigned c = 0; c < POOL_MAX_CLASSES; c++)
		CDS_INIT_LIST_HEAD(&r->cls[c].partial);
	r->ready_ns = now_ns() - t0;
	if (r->pinned)
		snprintf(then, sizeof(then),
			 "pinned alongside in %u pins of %" PRIu64 " MiB, done after up to %.2f s",
			 r->nr_pins, r->pin_unit >> 20, r->pin_ns / 1e9);
	else
		snprintf(then, sizeof(then), "then locked in %.2f s", lock_ns / 1e9);
	log_info("pool: node %d: %" PRIu64 " MiB ready in %.2f s = %.1f GB/s (%s; %u chunks, "
		 "faulting for up to %.2f s, %s; %u extents of %" PRIu64 " KiB)",
		 r->node, r->size >> 20, r->ready_ns / 1e9, (double)r->size / (double)r->ready_ns,
		 r->huge ? "hugetlb 2 MiB pages" : "transparent hugepages advised", r->nr_chunks,
		 r->fault_ns / 1e9, then, r->nr_extents, pool->extent_size >> 10);
	return 0;
}

int pool_create(const struct kvs_config *cfg, const int *nodes, unsigned nr_nodes,
		const struct pool_pin *pin, struct pool **ret_pool)
{
	struct pool *pool;
	uint64_t per;
	int err = 0;

	if (nr_nodes == 0 || nr_nodes > POOL_MAX_REGIONS)
		return -EINVAL;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pool->pin = pin;
	per = cfg->pool_size / nr_nodes;
	if (cfg->hugepages)
		per = per / HUGE_2M * HUGE_2M;
	pool->extent_size = cfg->extent_size ? cfg->extent_size : auto_extent(per, cfg->hugepages);
	if (cfg->hugepages && pool->extent_size % HUGE_2M) {
		free(pool);
		return log_error_errno(EINVAL, "pool: extent_size must be a multiple of 2 MiB with hugepages");
	}
	if (pool->extent_size % 512 || per < pool->extent_size) {
		uint64_t e = pool->extent_size;

		free(pool);
		return log_error_errno(EINVAL,
				       "pool: %" PRIu64 " bytes per node cannot hold one extent of %" PRIu64
				       " bytes (extent_size must be a multiple of 512 and at most the pool)",
				       per, e);
	}
	per = per / pool->extent_size * pool->extent_size;

	for (unsigned i = 0; i < nr_nodes; i++) {
		struct pool_region *r = &pool->regions[i];

		r->node = nodes[i];
		r->huge = cfg->hugepages;
		r->size = per;
		if (r->huge && pool_free_hugepages(r->node) < per / HUGE_2M) {
			err = log_error_errno(ENOMEM,
					      "pool: hugepages = yes but node %d has %u free 2 MiB hugepages, "
					      "%" PRIu64 " needed (raise vm.nr_hugepages or set [pool] hugepages = no)",
					      r->node, pool_free_hugepages(r->node), per / HUGE_2M);
			break;
		}
		pool->nr_regions = i + 1;
		err = region_init(pool, r, cfg);
		if (err)
			break;
		pool->capacity_bytes += r->nr_extents * pool->extent_size;
	}
	if (err) {
		pool_destroy(pool);
		return err;
	}
	*ret_pool = pool;
	return 0;
}

void pool_destroy(struct pool *pool)
{
	if (!pool)
		return;
	for (unsigned i = 0; i < pool->nr_regions; i++) {
		struct pool_region *r = &pool->regions[i];

		for (uint32_t e = 0; r->extents && e < r->nr_extents; e++) {
			free(r->extents[e].free_stack);
			free(r->extents[e].owners);
			free(r->extents[e].gens);
		}
		free(r->extents);
		free(r->free_extents);
		if (r->pinned)
			region_unpin(pool, r, r->nr_pins);
		if (r->base)
			munmap(r->base, r->size);
	}
	free(pool);
}

unsigned pool_region_for_node(const struct pool *pool, int node)
{
	for (unsigned i = 0; i < pool->nr_regions; i++)
		if (pool->regions[i].node == node)
			return i;
	return 0;
}

int pool_class_get(struct pool *pool, uint64_t slot_bytes, uint32_t *ret_class)
{
	uint32_t free_id = POOL_NO_CLASS;

	if (slot_bytes == 0 || slot_bytes > pool->extent_size)
		return -E2BIG;
	for (uint32_t c = 0; c < pool->nr_classes; c++) {
		if (pool->classes[c].slot_bytes == slot_bytes) {
			pool->classes[c].users++;
			*ret_class = c;
			return 0;
		}
		if (free_id == POOL_NO_CLASS && pool->classes[c].slot_bytes == 0)
			free_id = c;
	}
	if (free_id == POOL_NO_CLASS) {
		if (pool->nr_classes == POOL_MAX_CLASSES)
			return -ENOSPC;
		free_id = pool->nr_classes++;
	}
	pool->classes[free_id] = (struct pool_class){
		.slot_bytes = slot_bytes,
		.slots_per_extent = (uint32_t)(pool->extent_size / slot_bytes),
		.users = 1,
	};
	*ret_class = free_id;
	return 0;
}

static bool class_has_extents(const struct pool *pool, uint32_t class_id)
{
	for (unsigned i = 0; i < pool->nr_regions; i++)
		if (pool->regions[i].cls[class_id].nr_extents)
			return true;
	return false;
}

void pool_class_put(struct pool *pool, uint32_t class_id)
{
	struct pool_class *c = &pool->classes[class_id];

	/* A class lives on while blocks still occupy its extents. */
	if (--c->users == 0 && !class_has_extents(pool, class_id))
		c->slot_bytes = 0;
}

static void decay_demand(struct pool *pool)
{
	if (++pool->allocs_since_decay < DEMAND_DECAY_EVERY)
		return;
	pool->allocs_since_decay = 0;
	for (uint32_t c = 0; c < pool->nr_classes; c++)
		pool->classes[c].demand /= 2;
}

static int extent_assign(struct pool *pool, struct pool_region *r, uint32_t class_id)
{
	struct pool_class *c = &pool->classes[class_id];
	struct pool_extent *e;
	uint32_t idx;

	if (r->nr_free_extents == 0)
		return -ENOSPC;
	idx = r->free_extents[--r->nr_free_extents];
	e = &r->extents[idx];
	/* Per-class arrays are sized for this class; sizes differ by class. */
	free(e->free_stack);
	free(e->owners);
	free(e->gens);
	/*
	 * New slots, new counters from 0: nothing holds a slot of a free
	 * extent, so no generation read spans the change of class.
	 */
	e->free_stack = malloc(c->slots_per_extent * sizeof(*e->free_stack));
	e->owners = calloc(c->slots_per_extent, sizeof(*e->owners));
	e->gens = calloc(c->slots_per_extent, sizeof(*e->gens));
	if (!e->free_stack || !e->owners || !e->gens) {
		e->free_stack = mfree(e->free_stack);
		e->owners = mfree(e->owners);
		e->gens = mfree(e->gens);
		r->free_extents[r->nr_free_extents++] = idx;
		return -ENOMEM;
	}
	e->class_id = class_id;
	e->nslots = c->slots_per_extent;
	e->nused = 0;
	for (uint32_t i = 0; i < e->nslots; i++)
		e->free_stack[i] = e->nslots - 1 - i;
	e->free_top = e->nslots;
	cds_list_add(&e->node, &r->cls[class_id].partial);
	e->in_partial = true;
	r->cls[class_id].nr_extents++;
	return 0;
}

int pool_alloc(struct pool *pool, unsigned region, uint32_t class_id, void *owner,
	       struct slot *ret_slot)
{
	struct pool_region *r = &pool->regions[region];
	struct pool_region_class *rc = &r->cls[class_id];
	struct pool_class *c = &pool->classes[class_id];
	struct pool_extent *e;
	uint32_t idx;

	c->demand++;
	decay_demand(pool);
	if (cds_list_empty(&rc->partial)) {
		int err = extent_assign(pool, r, class_id);

		if (err)
			return err;
	}
	e = cds_list_first_entry(&rc->partial, struct pool_extent, node);
	idx = e->free_stack[--e->free_top];
	e->owners[idx] = owner;
	e->nused++;
	if (e->free_top == 0) {
		cds_list_del_init(&e->node);
		e->in_partial = false;
	}
	__atomic_fetch_add(&r->used_bytes, c->slot_bytes, __ATOMIC_RELAXED);
	*ret_slot = (struct slot){
		.addr = e->base + (uint64_t)idx * c->slot_bytes,
		.ext = (uint32_t)(e - r->extents),
		.region = (uint16_t)region,
		.idx = idx,
	};
	return 0;
}

void pool_free(struct pool *pool, const struct slot *slot)
{
	struct pool_region *r = &pool->regions[slot->region];
	struct pool_extent *e = &r->extents[slot->ext];
	uint32_t class_id = e->class_id;

	e->owners[slot->idx] = NULL;
	/*
	 * Seqlock: the new generation, then a release fence, before anyone
	 * can take the slot and write it; a reader's acquire load after it
	 * sent the slot's bytes (pool_slot_generation()) sees the bump if
	 * the slot was reused meanwhile.
	 */
	__atomic_fetch_add(&e->gens[slot->idx], 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	e->free_stack[e->free_top++] = slot->idx;
	e->nused--;
	__atomic_fetch_sub(&r->used_bytes, pool->classes[class_id].slot_bytes, __ATOMIC_RELAXED);
	if (e->nused == 0) {
		/* Empty: back to the region so any class can take it. */
		if (e->in_partial)
			cds_list_del_init(&e->node);
		e->in_partial = false;
		e->class_id = POOL_NO_CLASS;
		r->cls[class_id].nr_extents--;
		r->free_extents[r->nr_free_extents++] = slot->ext;
		if (pool->classes[class_id].users == 0 && !class_has_extents(pool, class_id))
			pool->classes[class_id].slot_bytes = 0;
	} else if (!e->in_partial) {
		cds_list_add(&e->node, &r->cls[class_id].partial);
		e->in_partial = true;
	}
}

/* Extents of @region the class deserves by its share of recent demand. */
static double fair_extents(const struct pool *pool, const struct pool_region *r, uint32_t class_id)
{
	uint64_t total = 0;

	for (uint32_t c = 0; c < pool->nr_classes; c++)
		total += pool->classes[c].demand;
	if (total == 0)
		return r->nr_extents;
	return (double)r->nr_extents * pool->classes[class_id].demand / total;
}

bool pool_class_under_share(const struct pool *pool, unsigned region, uint32_t class_id)
{
	const struct pool_region *r = &pool->regions[region];

	return r->cls[class_id].nr_extents + 1 <= fair_extents(pool, r, class_id);
}

static struct pool_extent *pick_extent(struct pool *pool, unsigned region, uint32_t class_id,
				       bool (*evictable)(void *owner, void *arg), void *arg,
				       bool over_share_only)
{
	struct pool_region *r = &pool->regions[region];

	for (uint32_t n = 0; n < r->nr_extents; n++) {
		struct pool_extent *e = &r->extents[r->steal_hand];
		bool ok = true;

		r->steal_hand = (r->steal_hand + 1) % r->nr_extents;
		if (e->class_id == POOL_NO_CLASS || e->class_id == class_id)
			continue;
		/* Normally only from a class holding more than its share. */
		if (over_share_only &&
		    r->cls[e->class_id].nr_extents <= fair_extents(pool, r, e->class_id))
			continue;
		for (uint32_t i = 0; i < e->nslots && ok; i++)
			if (e->owners[i] && !evictable(e->owners[i], arg))
				ok = false;
		if (ok)
			return e;
	}
	return NULL;
}

struct pool_extent *pool_pick_extent(struct pool *pool, unsigned region, uint32_t class_id,
				     bool (*evictable)(void *owner, void *arg), void *arg)
{
	return pick_extent(pool, region, class_id, evictable, arg, true);
}

struct pool_extent *pool_pick_extent_any(struct pool *pool, unsigned region, uint32_t class_id,
					 bool (*evictable)(void *owner, void *arg), void *arg)
{
	return pick_extent(pool, region, class_id, evictable, arg, false);
}

uint64_t pool_used_bytes(const struct pool *pool)
{
	uint64_t u = 0;

	for (unsigned i = 0; i < pool->nr_regions; i++)
		u += __atomic_load_n(&pool->regions[i].used_bytes, __ATOMIC_RELAXED);
	return u;
}
