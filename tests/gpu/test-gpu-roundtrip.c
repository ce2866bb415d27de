/* SPDX-License-Identifier: MIT */
/*
 * Byte-exact round trips through a real kvstashd on a real GPU: both
 * memory kinds (legacy IPC handle, VMM fd), the three layout kinds
 * (page-first, split K/V, MLA replicated), every mover (per-piece DMA,
 * batched DMA through cudaMemcpyBatchAsync, whose split K/V and MLA
 * batches of 24 blocks are cut across the four default copy streams, the
 * gather kernel) and auto
 * with batched fragmented loads.  Block ids are scattered, data is written by a
 * kernel, destinations and bystanders are poisoned, and every check runs
 * on the GPU.  Exits 77 without a GPU.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

#define BLOCKS 64
#define SAVED 24

static void run_case(const struct kvsd *d, const char *mover, enum gpu_layout layout,
		     uint32_t kind)
{
	static const char *lname[] = { "page-first", "split-kv", "mla" };
	unsigned layers = layout == GPU_MLA ? 61 : 36;
	uint64_t seg = layout == GPU_MLA ? 41 * 1024 : layout == GPU_SPLIT_KV ? 16384 : 32768;
	char inst[96], ns[96];
	uint8_t keys[16 * SAVED];
	uint32_t ids[BLOCKS], src[SAVED], dst[SAVED];
	struct kvs_client *c;
	struct gpu_kv kv;
	uint64_t lease = 0, stored = 0, skipped = 0;
	int r;

	snprintf(inst, sizeof(inst), "gpu-rt-%s-%s-%u", mover, lname[layout], kind);
	snprintf(ns, sizeof(ns), "gpu-rt/%s/%s/%u", mover, lname[layout], kind);
	/* 16-byte multiples keep the kernel mover eligible (41 KiB is one). */
	seg = seg / 16 * 16;
	CHECK(gpu_kv_alloc(&kv, layout, kind, layers, BLOCKS, seg) == 0, "alloc");
	r = gpu_connect(d, inst, ns, 0, 1, &c);
	CHECK(r == 0, "connect: %s", kvs_strerror(r));
	r = gpu_kv_register(c, &kv);
	CHECK(r == 0, "register %s kind %u: %s", lname[layout], kind, kvs_strerror(r));

	permute(ids, BLOCKS, 42 + layout * 10 + kind);
	for (unsigned i = 0; i < SAVED; i++) {
		src[i] = ids[i];
		dst[i] = ids[SAVED + i];
		CHECK(gpu_kv_fill(&kv, src[i], 1000 + i) == 0, "fill");
		CHECK(gpu_kv_poison(&kv, dst[i], 0xa5) == 0, "poison");
	}
	for (unsigned i = 2 * SAVED; i < BLOCKS; i++)
		CHECK(gpu_kv_poison(&kv, ids[i], 0x5a) == 0, "poison");
	CHECK(gpu_sync() == 0, "sync");
	test_keys(keys, SAVED, 7 + layout * 100 + kind * 1000 + (mover[0] == 'k'));

	r = kvs_save_sync(c, keys, src, SAVED, 30000, &stored, &skipped);
	CHECK(r == SAVED && stored == SAVED, "save: %d (%s) stored %llu", r, kvs_strerror(r),
	      (unsigned long long)stored);
	CHECK(kvs_flush_sync(c, 0, 30000) == 0, "flush");
	r = kvs_query_sync(c, keys, SAVED, 1, 0, 30000, &lease);
	CHECK(r == SAVED && lease, "query: %d", r);
	r = kvs_load_sync(c, lease, dst, SAVED, 0, 0, 30000);
	CHECK(r == SAVED, "load: %d (%s)", r, kvs_strerror(r));

	for (unsigned i = 0; i < SAVED; i++) {
		long long bad = gpu_kv_check(&kv, dst[i], 1000 + i, 0, layers);

		CHECK(bad == 0, "%s/%s kind %u: loaded block %u has %lld bad words", mover,
		      lname[layout], kind, dst[i], bad);
		CHECK(gpu_kv_check(&kv, src[i], 1000 + i, 0, layers) == 0, "source changed");
	}
	for (unsigned i = 2 * SAVED; i < BLOCKS; i++)
		CHECK(gpu_kv_count_ne(&kv, ids[i], 0x5a) == 0, "bystander %u touched", ids[i]);

	/* A layer range: only layers [3, 8) of each target change. */
	r = kvs_query_sync(c, keys, SAVED, 2, 0, 30000, &lease);
	CHECK(r == SAVED, "query 2: %d", r);
	for (unsigned i = 0; i < SAVED; i++)
		CHECK(gpu_kv_poison(&kv, dst[i], 0xa5) == 0, "poison");
	CHECK(gpu_sync() == 0, "sync");
	r = kvs_load_sync(c, lease, dst, SAVED, 3, 5, 30000);
	CHECK(r == SAVED, "layer-range load: %d (%s)", r, kvs_strerror(r));
	for (unsigned i = 0; i < SAVED; i++) {
		CHECK(gpu_kv_check(&kv, dst[i], 1000 + i, 3, 5) == 0, "layer range data");
		for (unsigned l = 0; l < layers; l++) {
			if (l >= 3 && l < 8)
				continue;
			for (unsigned s = 0; s < gpu_kv_segments(&kv); s++)
				CHECK(gpu_count_ne(gpu_kv_seg(&kv, l, dst[i], s), seg, 0xa5) == 0,
				      "layer %u outside the range was written", l);
		}
	}
	kvs_close(c);
	gpu_kv_free(&kv);
	printf("ok %s %s %s\n", mover, lname[layout], kind == KVS_MEM_CUDA_IPC ? "ipc" : "vmm");
}

int main(void)
{
	static const char *movers[] = { "dma", "kernel", "batch", "auto" };
	static const char checked[] = "batched copies (cudaMemcpyBatchAsync) checked";
	int r = gpu_init();

	if (r)
		return r;
	for (unsigned m = 0; m < 4; m++) {
		bool batch = !strcmp(movers[m], "batch") || !strcmp(movers[m], "auto");
		char ini[256];
		struct kvsd d;

		/* auto with batched fragmented loads: split K/V and MLA go through batch both ways. */
		snprintf(ini, sizeof(ini),
			 "[pool]\nsize = 1G\n[cuda]\nenable = yes\nmover = %s\n%s", movers[m],
			 m == 3 ? "fragmented_loads = batch\n" : "");
		CHECK(kvsd_start(&d, ini) == 0, "start kvstashd");
		/*
		 * The batched path is checked at worker start and must have
		 * passed, or these cases would prove only the DMA fallback;
		 * and no call may have failed since.
		 */
		for (unsigned ms = 0; batch && ms < 10000 && !kvsd_log_count(&d, checked); ms += 10)
			usleep(10000);
		/* One line per GPU's worker. */
		CHECK(batch ? kvsd_log_count(&d, checked) >= 1 : kvsd_log_count(&d, checked) == 0,
		      "mover %s: the log says %u times '%s'", movers[m], kvsd_log_count(&d, checked),
		      checked);
		for (int layout = GPU_PAGE_FIRST; layout <= GPU_MLA; layout++) {
			run_case(&d, movers[m], layout, KVS_MEM_CUDA_IPC);
			run_case(&d, movers[m], layout, KVS_MEM_CUDA_VMM_FD);
		}
		CHECK(kvsd_log_count(&d, "cudaMemcpyBatchAsync") == kvsd_log_count(&d, checked),
		      "mover %s: a batched copy failed (see the log)", movers[m]);
		CHECK(kvsd_stop(&d) == 0, "kvstashd exit status");
		kvsd_cleanup(&d);
	}
	return 0;
}
