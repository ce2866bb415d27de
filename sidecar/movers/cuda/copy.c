/* SPDX-License-Identifier: MIT */
/*
 * The CUDA mover's data path: three ways of moving a batch, one
 * completion path.
 *
 *   dma     one cudaMemcpyAsync per coalesced piece on the direction's
 *           stream (the worker builds pieces that merge ranges adjacent on
 *           both sides): free for the engine, at the PCIe limit when
 *           pieces are large (page-first layouts), but the copy engines
 *           pay per call, so 16-64 KiB fragments run at about a fifth;
 *   batch   one cudaMemcpyBatchAsync (CUDA 12.8) for the whole batch: the
 *           copy engines again, no SM, and the driver schedules the pieces
 *           itself; a batch of small pieces is cut into [cuda]
 *           batch_streams parts, one call each on its own stream, so that
 *           several copy engines share it; checked once per worker at
 *           start (PegaFlow dropped this API over driver trouble), and a
 *           failed call falls back to dma for that batch and turns batch
 *           off for the worker;
 *   kernel  one launch of kvs_gather over a descriptor array in mapped
 *           pinned memory: near the PCIe limit for 16-64 KiB fragments,
 *           but it time-slices with the engine's kernels.
 *
 * Each worker (one per GPU) owns a save stream and a load stream so both
 * directions run at once.  A batch's copies are followed by an event; the
 * worker polls the events in submission order per stream.  The ops table
 * at the end gathers this file's, device.c's and import.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/conf.h"
#include "base/util.h"
#include "io/batch.h"
#include "io/mover.h"
#include "movers/cuda/internal.h"
#include "obs/log.h"

#define DESC_RING_BYTES (8u << 20) /* per stream: ~350k descriptors */
#define KERNEL_SPLIT (64u << 10)   /* descriptors of at most this many bytes */
#define KERNEL_THREADS 512u
#define MAX_PARTS 16u		   /* [cuda] batch_streams at most */
#define PART_MIN_PIECES 64u	   /* a part of a split batch has at least this many */

struct kvs_desc {
	uint64_t dst;
	uint64_t src;
	uint64_t len;
};

extern const unsigned char kvs_gather_fatbin[];

struct cuda_stream {
	cudaStream_t stream;
	/*
	 * A split batch: the parts' streams wait for @fork, recorded on
	 * @stream, and @stream waits for each part's @join, so the batch's
	 * event on @stream still completes after all of it, in order.
	 */
	cudaStream_t part[MAX_PARTS];
	cudaEvent_t join[MAX_PARTS];
	cudaEvent_t fork;
	unsigned nparts;	   /* streams in part[] (0: none made) */
	struct cds_list_head fifo; /* batches in submission order (copy_batch.node) */
	struct kvs_desc *ring;	   /* mapped pinned descriptors */
	uint64_t cap;		   /* descriptors */
	uint64_t head, tail;	   /* free-running; [head, tail) in use */
};

struct cuda_worker {
	struct mover m;
	unsigned dev;
	unsigned wid;		  /* the worker's number, for logs */
	struct cuda_stream st[2]; /* by enum copy_dir */
	CUmodule mod;
	CUfunction gather;
	unsigned ctas;
	enum cuda_mover mode;		 /* [cuda] mover */
	enum cuda_frag_loads frag_loads; /* [cuda] fragmented_loads */
	uint64_t kernel_below;		 /* [cuda] kernel_below */
	unsigned batch_streams;		 /* [cuda] batch_streams */
	bool batch_ok;			 /* cudaMemcpyBatchAsync passed its check, never failed */
	/* cudaMemcpyBatchAsync's arrays, grown to the largest batch seen */
	void **bdst;
	const void **bsrc;
	size_t *blen;
	size_t bcap;
	unsigned inflight;
	cudaEvent_t *events; /* free stack */
	unsigned nevents, cap_events;
};

/* A batch in flight (copy_batch.priv). */
struct cuda_op {
	cudaEvent_t ev;
	uint64_t desc_end; /* ring tail after this batch (0: no descriptors) */
	bool kernel;
	int err; /* a failure at submit, reported when the event says the rest is done */
};

static inline struct cuda_worker *cuda_worker_of(struct mover *m)
{
	return caa_container_of(m, struct cuda_worker, m);
}

static int batch_room(struct cuda_worker *cw, size_t n)
{
	size_t cap = cw->bcap ? cw->bcap : 256;
	void **d;
	const void **s;
	size_t *l;

	if (n <= cw->bcap)
		return 0;
	while (cap < n)
		cap *= 2;
	d = realloc(cw->bdst, cap * sizeof(*d));
	if (d)
		cw->bdst = d;
	s = d ? realloc(cw->bsrc, cap * sizeof(*s)) : NULL;
	if (s)
		cw->bsrc = s;
	l = s ? realloc(cw->blen, cap * sizeof(*l)) : NULL;
	if (!l)
		return -ENOMEM; /* what grew stays: bcap says how much all three hold */
	cw->blen = l;
	cw->bcap = cap;
	return 0;
}

/*
 * One cudaMemcpyBatchAsync for the copies [@at, @at + @n) already in the
 * arrays, on stream @on.  Source order is the stream's: a SAVE's source
 * is engine memory whose writer a stream wait may yet order (GPU-side
 * ordering), a LOAD's a slot that was filled before the batch was
 * submitted.  The overlap flag asks the
 * driver to keep the copies off the engine's compute, which is why this
 * path exists.
 */
static cudaError_t batch_call_at(struct cuda_worker *cw, size_t at, size_t n, cudaStream_t on)
{
	struct cudaMemcpyAttributes attr = {
		.srcAccessOrder = cudaMemcpySrcAccessOrderStream,
		.flags = cudaMemcpyFlagPreferOverlapWithCompute,
	};
	size_t first = 0;

	return cudaMemcpyBatchAsync(cw->bdst + at, cw->bsrc + at, cw->blen + at, n, &attr, &first,
				    1, on);
}

/* All @n on @stream. */
static cudaError_t batch_call(struct cuda_worker *cw, size_t n, cudaStream_t stream)
{
	return batch_call_at(cw, 0, n, stream);
}

/*
 * At worker start: does cudaMemcpyBatchAsync work here (the runtime is
 * static, the driver may be older than 12.8, and PegaFlow saw drivers
 * misbehave)?  Two scattered pieces up and back down through it, the
 * bytes compared.  Any failure leaves batch off: the dma path moves
 * those batches instead, and the log says why.
 */
static void batch_check(struct cuda_worker *cw)
{
	enum { LEN = 8192, PIECE = 1536 };
	cudaStream_t st = cw->st[COPY_TO_POOL].stream;
	unsigned char *host = NULL, *dev = NULL;
	const char *what = "allocation";
	cudaError_t e;

	cw->batch_ok = false;
	e = cudaHostAlloc((void **)&host, 2 * LEN, cudaHostAllocDefault);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&dev, LEN);
	if (e == cudaSuccess)
		e = cudaMemsetAsync(dev, 0, LEN, st);
	if (e == cudaSuccess && batch_room(cw, 2) < 0)
		e = cudaErrorMemoryAllocation;
	if (e == cudaSuccess) {
		for (unsigned i = 0; i < 2 * LEN; i++)
			host[i] = i < LEN ? (unsigned char)(i * 7 + 1) : 0;
		/* Up: two pieces to swapped places on the GPU. */
		cw->bdst[0] = dev + 4096, cw->bsrc[0] = host, cw->blen[0] = PIECE;
		cw->bdst[1] = dev, cw->bsrc[1] = host + 4096, cw->blen[1] = PIECE;
		what = "host to device";
		e = batch_call(cw, 2, st);
	}
	if (e == cudaSuccess) {
		/* Down: both back into the second half of the host buffer. */
		cw->bdst[0] = host + LEN, cw->bsrc[0] = dev + 4096, cw->blen[0] = PIECE;
		cw->bdst[1] = host + LEN + 4096, cw->bsrc[1] = dev, cw->blen[1] = PIECE;
		what = "device to host";
		e = batch_call(cw, 2, st);
	}
	if (e == cudaSuccess) {
		what = "completion";
		e = cudaStreamSynchronize(st);
	}
	if (e == cudaSuccess) {
		what = "the bytes";
		if (memcmp(host, host + LEN, PIECE) || memcmp(host + 4096, host + LEN + 4096, PIECE))
			e = cudaErrorUnknown;
	}
	if (e == cudaSuccess) {
		cw->batch_ok = true;
		log_notice("cuda: worker %u: batched copies (cudaMemcpyBatchAsync) checked", cw->wid);
	} else {
		log_warning("cuda: worker %u: cudaMemcpyBatchAsync unusable (%s: %s): per-piece DMA "
			    "instead",
			    cw->wid, what, cudaGetErrorString(e));
		cudaGetLastError();
	}
	cudaFree(dev);
	cudaFreeHost(host);
}

/*
 * The streams that share a split batch.  Without them (or with fewer) a
 * batch is cut into fewer parts; nothing else changes.
 */
static void parts_init(struct cuda_worker *cw)
{
	for (int i = 0; i < 2; i++) {
		struct cuda_stream *s = &cw->st[i];

		if (cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming) != cudaSuccess)
			break;
		while (s->nparts < cw->batch_streams) {
			unsigned k = s->nparts;

			if (cudaStreamCreateWithFlags(&s->part[k], cudaStreamNonBlocking) !=
			    cudaSuccess)
				break;
			if (cudaEventCreateWithFlags(&s->join[k], cudaEventDisableTiming) !=
			    cudaSuccess) {
				cudaStreamDestroy(s->part[k]);
				break;
			}
			s->nparts++;
		}
	}
	cudaGetLastError();
	if (cw->st[0].nparts < cw->batch_streams || cw->st[1].nparts < cw->batch_streams)
		log_warning("cuda: worker %u: %u and %u of %u copy streams for split batches",
			    cw->wid, cw->st[0].nparts, cw->st[1].nparts, cw->batch_streams);
}

static int cuda_worker_init(unsigned dev, unsigned wid, struct mover **ret)
{
	const struct kvs_config *cfg = cuda_config();
	struct cuda_worker *cw = calloc(1, sizeof(*cw));
	CUresult cr;
	cudaError_t e;

	if (!cw)
		return -ENOMEM;
	cw->m.ops = &cuda_mover;
	cw->dev = dev;
	cw->wid = wid;
	e = cudaSetDevice(cuda_ordinal(dev));
	for (int i = 0; i < 2 && e == cudaSuccess; i++) {
		CDS_INIT_LIST_HEAD(&cw->st[i].fifo);
		e = cudaStreamCreateWithFlags(&cw->st[i].stream, cudaStreamNonBlocking);
		if (e == cudaSuccess)
			e = cudaHostAlloc((void **)&cw->st[i].ring, DESC_RING_BYTES,
					  cudaHostAllocMapped | cudaHostAllocPortable);
		cw->st[i].cap = DESC_RING_BYTES / sizeof(struct kvs_desc);
	}
	if (e != cudaSuccess) {
		log_error("cuda: worker %u: cannot create streams: %s", wid, cudaGetErrorString(e));
		free(cw);
		return cuda_errno(e);
	}
	cr = cuda_drv.module_load_data(&cw->mod, kvs_gather_fatbin);
	if (cr == CUDA_SUCCESS)
		cr = cuda_drv.module_get_function(&cw->gather, cw->mod, "kvs_gather");
	if (cr != CUDA_SUCCESS) {
		/* Without the kernel the DMA mover still works. */
		log_warning("cuda: worker %u: cannot load the gather kernel (error %d): DMA only",
			    wid, (int)cr);
		cw->gather = NULL;
	}
	/* Parsed at load (base/conf.c): nothing is compared per batch but numbers. */
	cw->mode = cfg->cuda_mover;
	cw->frag_loads = cfg->cuda_frag_loads;
	cw->kernel_below = cfg->cuda_kernel_below;
	cw->ctas = cfg->cuda_kernel_ctas ? cfg->cuda_kernel_ctas : 4 * cuda_device(dev)->sms;
	cw->batch_streams = MAX(1u, MIN(cfg->cuda_batch_streams, MAX_PARTS));
	if (cw->mode == CUDA_MOVER_BATCH || cw->mode == CUDA_MOVER_AUTO) {
		batch_check(cw);
		if (cw->batch_ok && cw->batch_streams > 1)
			parts_init(cw);
	}
	*ret = &cw->m;
	return 0;
}

static void cuda_worker_fini(struct mover *m)
{
	struct cuda_worker *cw = cuda_worker_of(m);

	cudaSetDevice(cuda_ordinal(cw->dev));
	for (int i = 0; i < 2; i++) {
		if (cw->st[i].stream) {
			cudaStreamSynchronize(cw->st[i].stream);
			cudaStreamDestroy(cw->st[i].stream);
		}
		if (cw->st[i].ring)
			cudaFreeHost(cw->st[i].ring);
		for (unsigned k = 0; k < cw->st[i].nparts; k++) {
			cudaStreamSynchronize(cw->st[i].part[k]);
			cudaStreamDestroy(cw->st[i].part[k]);
			cudaEventDestroy(cw->st[i].join[k]);
		}
		if (cw->st[i].fork)
			cudaEventDestroy(cw->st[i].fork);
	}
	for (unsigned i = 0; i < cw->nevents; i++)
		cudaEventDestroy(cw->events[i]);
	free(cw->events);
	free(cw->bdst);
	free(cw->bsrc);
	free(cw->blen);
	if (cw->mod)
		cuda_drv.module_unload(cw->mod);
	free(cw);
}

static int event_get(struct cuda_worker *cw, cudaEvent_t *ret)
{
	if (cw->nevents) {
		*ret = cw->events[--cw->nevents];
		return 0;
	}
	return cuda_errno(cudaEventCreateWithFlags(ret, cudaEventDisableTiming));
}

static void event_put(struct cuda_worker *cw, cudaEvent_t ev)
{
	if (cw->nevents == cw->cap_events) {
		unsigned cap = cw->cap_events ? 2 * cw->cap_events : 16;
		cudaEvent_t *e = realloc(cw->events, cap * sizeof(*e));

		if (!e) {
			cudaEventDestroy(ev);
			return;
		}
		cw->events = e;
		cw->cap_events = cap;
	}
	cw->events[cw->nevents++] = ev;
}

enum cuda_path { PATH_DMA, PATH_BATCH, PATH_KERNEL };

static bool kernel_fits(const struct cuda_worker *cw, const struct copy_batch *b)
{
	if (!cw->gather)
		return false;
	for (uint32_t i = 0; i < b->n; i++)
		if ((b->pieces[i].dev | (uintptr_t)b->pieces[i].pool | b->pieces[i].len) & 15)
			return false; /* the kernel moves 16-byte words */
	return true;
}

/*
 * Which path for this batch: see [cuda] mover, kernel_below and
 * fragmented_loads in kvstash.conf(5).  Batch and kernel fall back to
 * dma where they cannot be used.
 */
static enum cuda_path want_path(const struct cuda_worker *cw, const struct copy_batch *b)
{
	bool batch = cw->batch_ok;

	if (b->n == 0)
		return PATH_DMA;
	switch (cw->mode) {
	case CUDA_MOVER_DMA:
		return PATH_DMA;
	case CUDA_MOVER_BATCH:
		return batch ? PATH_BATCH : PATH_DMA;
	case CUDA_MOVER_KERNEL:
		return kernel_fits(cw, b) ? PATH_KERNEL : PATH_DMA;
	case CUDA_MOVER_AUTO:
		break;
	}
	/*
	 * auto: the copy engines, which cost the engine nothing, through one
	 * batched call (on the H200: fragmented saves 0.38-0.71 of the PCIe
	 * ceiling instead of 0.18-0.23 one call per piece, page-first
	 * 0.95-0.97 at 512 blocks instead of 0.92-0.93, docs/PERFORMANCE.md).
	 * The exception: fragmented loads, on the time-to-first-token path,
	 * where the kernel is fastest (0.85-0.90 against 0.38-0.60) unless
	 * the operator keeps the engine's SMs for the engine.  Not for a LOAD
	 * PROGRESS: the engine computes on its layers while the rest is
	 * copied, and a kernel of ours would time-slice with that compute.
	 */
	if (b->dir == COPY_FROM_POOL && b->bytes / b->n < cw->kernel_below &&
	    cw->frag_loads == CUDA_FRAG_KERNEL && !b->nsig && kernel_fits(cw, b))
		return PATH_KERNEL;
	return batch ? PATH_BATCH : PATH_DMA;
}

static uint64_t count_descs(const struct copy_batch *b, uint32_t first, uint32_t end)
{
	uint64_t n = 0;

	for (uint32_t i = first; i < end; i++)
		n += (b->pieces[i].len + KERNEL_SPLIT - 1) / KERNEL_SPLIT;
	return n;
}

/* Reserve @n contiguous descriptors in the ring; NULL when it has no room. */
static struct kvs_desc *ring_take(struct cuda_stream *s, uint64_t n, uint64_t *ret_end)
{
	uint64_t pos = s->tail;

	if (n > s->cap)
		return NULL;
	if (pos % s->cap + n > s->cap)
		pos += s->cap - pos % s->cap; /* wrap: never split a launch's array */
	if (pos + n - s->head > s->cap)
		return NULL;
	s->tail = pos + n;
	*ret_end = s->tail;
	return &s->ring[pos % s->cap];
}

/* Pieces [@first, @end) of @b: one launch; co->desc_end moves past its descriptors. */
static int launch_kernel(struct cuda_worker *cw, struct cuda_stream *s, struct copy_batch *b,
			 uint32_t first, uint32_t end, struct cuda_op *co)
{
	uint64_t n = count_descs(b, first, end), k = 0, tail0 = s->tail, dend;
	struct kvs_desc *d = n <= UINT32_MAX ? ring_take(s, n, &dend) : NULL;
	unsigned int nd = (unsigned int)n, grid;
	void *params[2];
	CUresult cr;

	if (!d)
		return -ENOSPC;
	for (uint32_t i = first; i < end; i++) {
		const struct piece *p = &b->pieces[i];

		for (uint64_t off = 0; off < p->len; off += KERNEL_SPLIT) {
			uint64_t len = MIN((uint64_t)KERNEL_SPLIT, p->len - off);
			uint64_t pool = (uint64_t)(uintptr_t)p->pool + off, dev = p->dev + off;

			d[k++] = b->dir == COPY_TO_POOL ? (struct kvs_desc){ pool, dev, len } :
							  (struct kvs_desc){ dev, pool, len };
		}
	}
	/* Host pointer == device pointer for mapped pinned memory (checked in cuda_pin()). */
	void *dd = d;

	params[0] = &dd;
	params[1] = &nd;
	grid = MIN(nd, cw->ctas);
	cr = cuda_drv.launch_kernel(cw->gather, grid, 1, 1, KERNEL_THREADS, 1, 1, 0,
				    (CUstream)s->stream, params, NULL);
	if (cr != CUDA_SUCCESS) {
		s->tail = tail0; /* nothing was queued: give the descriptors back */
		return cuda_drv_errno(cr);
	}
	co->desc_end = dend;
	co->kernel = true;
	return 0;
}

static int launch_dma(struct cuda_stream *s, const struct copy_batch *b, uint32_t first,
		      uint32_t end)
{
	for (uint32_t i = first; i < end; i++) {
		const struct piece *p = &b->pieces[i];
		void *eng = (void *)(uintptr_t)p->dev;
		cudaError_t e = b->dir == COPY_TO_POOL ?
					cudaMemcpyAsync(p->pool, eng, p->len, cudaMemcpyDeviceToHost,
							s->stream) :
					cudaMemcpyAsync(eng, p->pool, p->len, cudaMemcpyHostToDevice,
							s->stream);

		if (e != cudaSuccess) {
			log_error("cuda: cudaMemcpyAsync of %" PRIu64 " bytes failed: %s", p->len,
				  cudaGetErrorString(e));
			cudaGetLastError();
			return -EIO;
		}
	}
	return 0;
}

/*
 * How many parts for @n pieces of @bytes together: one unless the pieces
 * are small (average below kernel_below, where one copy engine is the
 * limit: on the H200, 32 KiB pieces of 32 blocks 22 GB/s on one stream,
 * 35 GB/s on four) and there are enough of them for every part to be
 * worth a call.
 */
static unsigned parts_for(const struct cuda_worker *cw, const struct cuda_stream *s, uint32_t n,
			  uint64_t bytes)
{
	if (s->nparts < 2 || n < 2 * PART_MIN_PIECES || bytes / n >= cw->kernel_below)
		return 1;
	return MIN(s->nparts, n / PART_MIN_PIECES);
}

/*
 * The arrays' @n copies as @k parts on the part streams, forked from and
 * joined back into @s's stream (struct cuda_stream).  A failure leaves
 * what was queued to run; the caller copies the whole range again by dma.
 */
static cudaError_t batch_split(struct cuda_worker *cw, struct cuda_stream *s, size_t n, unsigned k)
{
	cudaError_t e = cudaEventRecord(s->fork, s->stream);

	for (unsigned p = 0; p < k && e == cudaSuccess; p++) {
		size_t at = n * p / k, len = n * (p + 1) / k - at;

		e = cudaStreamWaitEvent(s->part[p], s->fork, 0);
		if (e == cudaSuccess)
			e = batch_call_at(cw, at, len, s->part[p]);
		if (e == cudaSuccess)
			e = cudaEventRecord(s->join[p], s->part[p]);
		if (e == cudaSuccess)
			e = cudaStreamWaitEvent(s->stream, s->join[p], 0);
	}
	return e;
}

static int launch_batch(struct cuda_worker *cw, struct cuda_stream *s, const struct copy_batch *b,
			uint32_t first, uint32_t end)
{
	uint32_t n = end - first;
	uint64_t bytes = 0;
	unsigned k;
	cudaError_t e;

	if (batch_room(cw, n) < 0)
		return -ENOMEM; /* dma instead, this once */
	for (uint32_t i = 0; i < n; i++) {
		const struct piece *p = &b->pieces[first + i];
		void *eng = (void *)(uintptr_t)p->dev;

		cw->bdst[i] = b->dir == COPY_TO_POOL ? p->pool : eng;
		cw->bsrc[i] = b->dir == COPY_TO_POOL ? eng : p->pool;
		cw->blen[i] = p->len;
		bytes += p->len;
	}
	k = parts_for(cw, s, n, bytes);
	e = k > 1 ? batch_split(cw, s, n, k) : batch_call(cw, n, s->stream);
	if (e == cudaSuccess)
		return 0;
	/*
	 * Whatever it queued before failing copies the same bytes again under
	 * dma, which is harmless; one failure is enough to stop trusting it.
	 */
	log_warning("cuda: worker %u: cudaMemcpyBatchAsync of %" PRIu32 " pieces failed (%s): "
		    "per-piece DMA from now on",
		    cw->wid, n, cudaGetErrorString(e));
	cudaGetLastError();
	cw->batch_ok = false;
	return cuda_errno(e);
}

/* Pieces [@first, @end) of @b by @path, or by dma where that cannot. */
static int launch_range(struct cuda_worker *cw, struct cuda_stream *s, struct copy_batch *b,
			uint32_t first, uint32_t end, enum cuda_path path, struct cuda_op *co)
{
	int r = -ENOSPC;

	if (first == end)
		return 0;
	switch (path) {
	case PATH_KERNEL:
		r = launch_kernel(cw, s, b, first, end, co);
		break;
	case PATH_BATCH:
		r = launch_batch(cw, s, b, first, end);
		break;
	case PATH_DMA:
		break;
	}
	return r < 0 ? launch_dma(s, b, first, end) : 0;
}

/*
 * A LOAD PROGRESS: each layer's group of pieces, then its value, in
 * stream order (the write's default memory barrier makes the copies
 * before it visible to whoever waits on the value).  A failed write
 * fails the batch; the worker's host-side end releases the waits anyway.
 */
static int launch_groups(struct cuda_worker *cw, struct cuda_stream *s, struct copy_batch *b,
			 enum cuda_path path, struct cuda_op *co)
{
	uint32_t first = 0;
	int err = 0;

	for (uint32_t j = 0; j < b->nsig; j++) {
		int r = launch_range(cw, s, b, first, b->sig_end[j], path, co);
		CUresult cr = cuda_drv.stream_write_value32((CUstream)s->stream, b->sig_addr,
							    b->sig_base + 1 + j, 0);

		if (r == 0 && cr != CUDA_SUCCESS)
			r = cuda_drv_errno(cr);
		if (r < 0 && !err)
			err = r;
		first = b->sig_end[j];
	}
	return err;
}

static void cuda_submit(struct mover *m, struct copy_batch *b)
{
	struct cuda_worker *cw = cuda_worker_of(m);
	struct cuda_stream *s = &cw->st[b->dir];
	struct cuda_op *co = calloc(1, sizeof(*co));
	int r = -ENOMEM;

	if (co && event_get(cw, &co->ev) == 0) {
		enum cuda_path path = want_path(cw, b);

		if (b->nsig && b->sig_end[b->nsig - 1] == b->n && cuda_drv.stream_write_value32)
			r = launch_groups(cw, s, b, path, co);
		else
			r = launch_range(cw, s, b, 0, b->n, path, co);
		if (cudaEventRecord(co->ev, s->stream) != cudaSuccess && r == 0)
			r = -EIO;
	}
	if (r < 0) {
		/*
		 * Copies already queued may still run: the batch completes
		 * through its event when one was recorded, else right away.
		 */
		r = r == -ENOSPC ? -EIO : r;
		if (!co || !co->ev) {
			free(co);
			b->priv = NULL;
			batch_complete(b, r);
			return;
		}
		co->err = r;
	}
	b->priv = co;
	cds_list_add_tail(&b->node, &s->fifo);
	cw->inflight++;
}

static bool cuda_poll(struct mover *m)
{
	struct cuda_worker *cw = cuda_worker_of(m);
	bool any = false;

	if (!cw->inflight)
		return false;
	for (int i = 0; i < 2; i++) {
		struct cuda_stream *s = &cw->st[i];

		while (!cds_list_empty(&s->fifo)) {
			struct copy_batch *b =
				cds_list_first_entry(&s->fifo, struct copy_batch, node);
			struct cuda_op *co = b->priv;
			cudaError_t e = cudaEventQuery(co->ev);
			int err = co->err;

			if (e == cudaErrorNotReady)
				break;
			if (e != cudaSuccess) {
				log_error("cuda: worker %u: copy failed: %s", cw->wid,
					  cudaGetErrorString(e));
				cudaGetLastError();
				if (!err)
					err = -EIO;
			}
			/* In-order stream: every earlier descriptor is free too. */
			if (co->desc_end)
				s->head = co->desc_end;
			event_put(cw, co->ev);
			free(co);
			b->priv = NULL;
			cds_list_del(&b->node);
			cw->inflight--;
			batch_complete(b, err);
			any = true;
		}
	}
	return any;
}

static unsigned cuda_inflight(const struct mover *m)
{
	return caa_container_of(m, const struct cuda_worker, m)->inflight;
}

const struct mover_ops cuda_mover = {
	.name = "cuda",
	.dev_name = "GPU",
	.device_kind = KVS_DEVICE_CUDA,
	.mem_kinds = MEM_KIND(KVS_MEM_CUDA_IPC) | MEM_KIND(KVS_MEM_CUDA_VMM_FD),
	.init = cuda_init,
	.fini = cuda_fini,
	.find_device = cuda_find_device,
	.device_node = cuda_device_node,
	.pin = cuda_pin,
	.unpin = cuda_unpin,
	.import = cuda_mem_import,
	.release = cuda_mem_release,
	.worker_init = cuda_worker_init,
	.worker_fini = cuda_worker_fini,
	.submit = cuda_submit,
	.poll = cuda_poll,
	.inflight = cuda_inflight,
};
