/* SPDX-License-Identifier: MIT */
/*
 * TP=2 on one GPU: two engine processes, ranks 0 and 1 of one instance,
 * each with its own GPU memory and its own data per shard.  A block is
 * invisible until both ranks saved it; one lease is consumed by one LOAD
 * per rank, each getting its own shard; a second LOAD by a rank fails.
 * Exits 77 without a GPU.
 *
 * The ranks run in step through two pipes: every check that depends on
 * the other rank (its registration, its SAVE, its LOAD, its session
 * still being there) comes after a token the other rank sent once that
 * was done, never after a delay.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define BLOCKS 32
#define N 12

static void put(int fd, uint64_t v)
{
	if (write(fd, &v, sizeof(v)) != sizeof(v))
		FAIL("pipe write");
}

static uint64_t get(int fd)
{
	uint64_t v;

	if (read(fd, &v, sizeof(v)) != sizeof(v))
		FAIL("pipe read (the other rank died?)");
	return v;
}

/* Rank @rank: @in / @out are pipes to the other rank's process. */
static int rank_main(const struct kvsd *d, unsigned rank, int in, int out)
{
	uint8_t keys[16 * N];
	uint32_t src[N], dst[N];
	struct kvs_client *c;
	struct gpu_kv kv;
	uint64_t lease = 0;
	int r = gpu_init();

	if (r)
		return r;
	CHECK(gpu_kv_alloc(&kv, GPU_SPLIT_KV, KVS_MEM_CUDA_IPC, 36, BLOCKS, 8192) == 0, "alloc");
	r = gpu_connect(d, "gpu-tp2", "gpu-tp2/split", rank, 2, &c);
	CHECK(r == 0, "rank %u connect: %s", rank, kvs_strerror(r));
	CHECK(gpu_kv_register(c, &kv) == 0, "rank %u register", rank);
	test_keys(keys, N, 99);
	for (unsigned i = 0; i < N; i++) {
		src[i] = i;
		dst[i] = BLOCKS - 1 - i;
		/* Each rank's shard has its own bytes: a mix-up would show. */
		CHECK(gpu_kv_fill(&kv, src[i], 5000 + i + 77 * rank) == 0, "fill");
		CHECK(gpu_kv_poison(&kv, dst[i], 0xa5) == 0, "poison");
	}
	CHECK(gpu_sync() == 0, "sync");
	/*
	 * The instance's layout is complete (sealed) once both ranks have
	 * registered; a SAVE before that is -EUNATCH by design, so rank 0
	 * waits for rank 1's registration.
	 */
	if (rank == 1)
		put(out, 0);
	else
		get(in);

	if (rank == 0) {
		r = kvs_save_sync(c, keys, src, N, 30000, NULL, NULL);
		CHECK(r == N, "rank 0 save: %d (%s)", r, kvs_strerror(r));
		CHECK(kvs_flush_sync(c, 0, 30000) == 0, "flush");
		/* Only one shard saved: nothing visible. */
		r = kvs_query_sync(c, keys, N, 1, KVS_QUERY_NOLEASE, 30000, NULL);
		CHECK(r == 0, "half-saved blocks visible: %d hits", r);
		put(out, 1); /* rank 1: save now */
		get(in);
		r = kvs_query_sync(c, keys, N, 2, 0, 30000, &lease);
		CHECK(r == N && lease, "query after both ranks saved: %d", r);
		put(out, lease);
	} else {
		get(in);
		r = kvs_save_sync(c, keys, src, N, 30000, NULL, NULL);
		CHECK(r == N, "rank 1 save: %d (%s)", r, kvs_strerror(r));
		CHECK(kvs_flush_sync(c, KVS_FLUSH_INSTANCE, 30000) == 0, "instance flush");
		put(out, 1);
		lease = get(in);
	}
	r = kvs_load_sync(c, lease, dst, N, 0, 0, 30000);
	CHECK(r == N, "rank %u load: %d (%s)", rank, r, kvs_strerror(r));
	for (unsigned i = 0; i < N; i++)
		CHECK(gpu_kv_check(&kv, dst[i], 5000 + i + 77 * rank, 0, 36) == 0,
		      "rank %u block %u: wrong shard or bytes", rank, dst[i]);
	r = kvs_load_sync(c, lease, dst, N, 0, 0, 30000);
	CHECK(r == -EALREADY || r == -ENOENT, "rank %u second load: %d, want -EALREADY/-ENOENT",
	      rank, r);
	put(out, 2);
	get(in);
	/* Both ranks loaded: the lease is gone for everyone. */
	r = kvs_load_sync(c, lease, dst, N, 0, 0, 30000);
	CHECK(r == -ENOENT, "rank %u load after both consumed: %d, want -ENOENT", rank, r);
	/*
	 * Close only once the other rank has made that LOAD too.  A session
	 * that closes unregisters its rank, which unseals the instance
	 * (session_free() -> instance_unregister()), and kvstashd checks the
	 * seal before the lease: the slower rank's LOAD would get
	 * -KVS_EUNSEALED instead of -ENOENT whenever the faster one had
	 * closed and been freed in between (it failed so once in five runs
	 * with -j4 beside the other GPU tests).
	 */
	put(out, 3);
	get(in);
	kvs_close(c);
	gpu_kv_free(&kv);
	return 0;
}

int main(void)
{
	int a[2], b[2], st, rc = 0;
	struct kvsd d;
	pid_t p0, p1;
	int n = 0;

	/* Probe without touching CUDA in this process: the ranks fork from here. */
	if (system("nvidia-smi -L >/dev/null 2>&1") != 0) {
		fprintf(stderr, "no GPU: skipping\n");
		return 77;
	}
	(void)n;
	CHECK(kvsd_start(&d, "[pool]\nsize = 1G\n[cuda]\nenable = yes\n") == 0, "start kvstashd");
	if (pipe(a) || pipe(b))
		FAIL("pipe");
	/*
	 * Each rank keeps only its own ends, so that a rank that dies is an
	 * EOF in the other's get() rather than a read that never returns.
	 */
	p0 = fork();
	if (p0 == 0) {
		close(a[1]);
		close(b[0]);
		_exit(rank_main(&d, 0, a[0], b[1]));
	}
	p1 = fork();
	if (p1 == 0) {
		close(a[0]);
		close(b[1]);
		_exit(rank_main(&d, 1, b[0], a[1]));
	}
	close(a[0]);
	close(a[1]);
	close(b[0]);
	close(b[1]);
	for (int i = 0; i < 2; i++) {
		pid_t p = wait(&st);

		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "rank process %d failed (status %d)\n", (int)p, st);
			rc = WIFEXITED(st) && WEXITSTATUS(st) == 77 ? 77 : 1;
			kill(p == p0 ? p1 : p0, SIGKILL);
		}
	}
	if (rc == 1)
		kvsd_dump_log(&d);
	CHECK(kvsd_stop(&d) == 0 || rc, "kvstashd exit status");
	kvsd_cleanup(&d);
	return rc;
}
