/* SPDX-License-Identifier: MIT */
/*
 * The embedded service serving a kvstashd: tests/peer/peer-serve, a
 * standalone program that keeps its KV blocks in its own memory and runs
 * libkvspeer itself (as an engine embedding it would), describes its
 * namespace with kvspeer_kvstash_ns() and serves a kvstashd node whose
 * engine's QUERY with KVS_QUERY_FETCH names it as the hint:
 *   - page-first, tp 1 (one segment a layer): 64 blocks fetched, LOADed
 *     into other block ids, every byte of every layer compared with what
 *     the program holds (the slot order: layers, then segments);
 *   - split K/V (two segments a layer) at tp 2: both ranks LOAD, each its
 *     own shard, K and V in their places;
 *   - the same name with another segment size (a geometry mismatch): no
 *     block, within the deadline;
 * and after each the program holds no pin (its locks were released).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctest.h"
/* The peer tests' keys and payloads; its clock is ctest's under another name. */
#define now_ms peer_test_now_ms
#include "../peer/common.h"
#undef now_ms

#define NS_PF  "qwen3-8b/bf16/embedded"
#define NS_KV  "llama-8b/bf16/embedded-kv"
#define N      64
#define BLOCKS 128

struct server {
	pid_t pid;
	FILE *in, *out;
	char addr[64];
	uint64_t seed;
};

struct exec_arg {
	int in[2], out[2];
	const char *cmd;
};

/* In the child (ct_spawn(): stopped with the test if it fails): the program on the pipes. */
static int exec_server(void *arg)
{
	struct exec_arg *e = arg;

	dup2(e->in[0], 0);
	dup2(e->out[1], 1);
	close(e->in[1]);
	close(e->out[0]);
	execl("/bin/sh", "sh", "-c", e->cmd, (char *)NULL);
	return 127;
}

/* Start peer-serve on @addr in kvstash mode with @args; wait for "listening". */
static void server_start(struct server *sv, const char *addr, uint64_t seed, const char *args)
{
	const char *top = getenv("top_builddir");
	char cmd[1024], allow[64], line[256];
	struct exec_arg e = { .cmd = cmd };

	ct_peer_net("0/24", allow, sizeof(allow));
	snprintf(cmd, sizeof(cmd),
		 "exec %s/tests/peer/peer-serve --listen %s --allow %s --secret %s --cluster %s "
		 "--node engine --blocks %u --seed %llu %s",
		 top ? top : ".", addr, allow, ct_secret(), ct_cluster(), N,
		 (unsigned long long)seed, args);
	CHECK(pipe(e.in) == 0 && pipe(e.out) == 0, "pipe");
	sv->pid = ct_spawn(exec_server, &e);
	close(e.in[0]);
	close(e.out[1]);
	sv->in = fdopen(e.in[1], "w");
	sv->out = fdopen(e.out[0], "r");
	sv->seed = seed;
	CHECK(sv->in && sv->out, "fdopen");
	CHECK(fgets(line, sizeof(line), sv->out) && sscanf(line, "listening %63s", sv->addr) == 1,
	      "peer-serve did not start: %s", line);
}

/* The pins the program's blocks hold now (its "stats" answer). */
static int server_pins(struct server *sv)
{
	char line[512];
	int pins = -1;

	fprintf(sv->in, "stats\n");
	fflush(sv->in);
	while (pins < 0 && fgets(line, sizeof(line), sv->out))
		sscanf(line, "pins %d", &pins);
	return pins;
}

static void server_stop(struct server *sv)
{
	fprintf(sv->in, "quit\n");
	fclose(sv->in);
	CHECK(ct_reap(sv->pid, 10000) == 0, "peer-serve did not exit cleanly");
	fclose(sv->out);
}

/*
 * Compare block @id of @kv with the program's shard @shard of key @key: the
 * shard is the slot, layer after layer and segment after segment.
 */
static void check_block(struct test_kv *kv, uint32_t id, const uint8_t *key, uint32_t shard,
			const char *what)
{
	unsigned segs = test_kv_segments(kv);

	for (unsigned l = 0; l < kv->layers; l++)
		for (unsigned s = 0; s < segs; s++) {
			const uint8_t *p = test_kv_seg(kv, l, id, s);
			uint64_t w0 = ((uint64_t)l * segs + s) * kv->seg / 8;

			for (uint64_t w = 0; w < kv->seg / 8; w++) {
				uint64_t want = payload_word(key, shard, w0 + w), got;

				memcpy(&got, p + 8 * w, 8);
				CHECK(got == want,
				      "%s: block %u shard %u layer %u segment %u word %llu differs",
				      what, id, shard, l, s, (unsigned long long)w);
			}
		}
}

static void keys_of(uint64_t seed, uint8_t *keys)
{
	for (uint32_t i = 0; i < N; i++)
		make_key(seed, i, keys + (size_t)i * KVSPEER_KEY_SIZE);
}

int main(void)
{
	static uint8_t keys[N * KVSPEER_KEY_SIZE];
	struct redis rd = { 0 };
	struct cnode b;
	struct server sv;
	struct test_kv kv, kv2[2];
	struct kvs_client *c, *sched, *rk[2];
	uint32_t ids[N];
	uint64_t lease, t0, ms;
	char addr[64];
	int r;

	ct_init(240);
	ct_redis_start(&rd);
	cnode_start_peer(&b, &rd, "b", NULL, "[pool]\nsize = 64M\nextent_size = 1M\n");
	/* The program on an address of b's /24 (peer_allow), a port of its own. */
	ct_peer_net("240:0", addr, sizeof(addr));

	/* ---- page-first, tp 1 ---- */
	c = ct_worker(&b, NS_PF, &kv, 4, BLOCKS, 64 * 1024);
	server_start(&sv, addr, 11,
		     "--kvstash-ns " NS_PF " --layers 4 --segments 1 --segment-bytes 65536");
	keys_of(sv.seed, keys);
	r = kvs_query_fetch_sync(c, keys, N, 0, 0, sv.addr, CT_OP_MS, &lease);
	CHECK(r == N, "fetch from the embedded service: %d of %d (%s)", r, N,
	      r < 0 ? kvs_strerror(r) : "count");
	for (uint32_t i = 0; i < N; i++) {
		ids[i] = N + i;
		test_kv_poison(&kv, ids[i], 0xa5);
	}
	r = kvs_load_sync(c, lease, ids, N, 0, 0, CT_OP_MS);
	CHECK(r == N, "LOAD: %d", r);
	for (uint32_t i = 0; i < N; i++)
		check_block(&kv, ids[i], keys + (size_t)i * KVSPEER_KEY_SIZE, 0, "page-first");
	CHECK(server_pins(&sv) == 0, "the program still holds pins after the fetch");
	/* Resident on b now: a second QUERY is local, the program not asked. */
	CHECK(ct_query(c, keys, N) == N, "b holds the fetched blocks");
	server_stop(&sv);
	printf("ok - page-first: 64 blocks from the embedded service, byte-exact, no pin left\n");

	/* ---- a geometry mismatch: the same name, another segment size ---- */
	server_start(&sv, addr, 12,
		     "--kvstash-ns " NS_PF " --layers 4 --segments 1 --segment-bytes 32768");
	keys_of(sv.seed, keys);
	t0 = now_ms();
	r = kvs_query_fetch_sync(c, keys, N, 0, 0, sv.addr, CT_OP_MS, &lease);
	ms = now_ms() - t0;
	CHECK(r == 0, "another geometry served %d blocks", r);
	CHECK(server_pins(&sv) == 0, "the program holds pins after a mismatch");
	server_stop(&sv);
	printf("ok - another geometry: 0 blocks in %llu ms, no pin\n", (unsigned long long)ms);
	kvs_close(c);
	test_kv_free(&kv);

	/* ---- split K/V at tp 2: each rank its own shard ---- */
	for (unsigned i = 0; i < 2; i++)
		rk[i] = ct_worker_kind(&b, NS_KV, "decode-kv", i, 2, LAYOUT_SPLIT_KV, &kv2[i], 3,
				       BLOCKS, 8192);
	sched = ct_connect(&b, KVS_ROLE_SCHEDULER, NS_KV, "decode-kv", 0, 2);
	server_start(&sv, addr, 13,
		     "--kvstash-ns " NS_KV " --layers 3 --segments 2 --segment-bytes 8192 --tp 2");
	keys_of(sv.seed, keys);
	r = kvs_query_fetch_sync(sched, keys, N, 0, 0, sv.addr, CT_OP_MS, &lease);
	CHECK(r == N, "tp 2 fetch from the embedded service: %d of %d (%s)", r, N,
	      r < 0 ? kvs_strerror(r) : "count");
	for (unsigned k = 0; k < 2; k++) {
		for (uint32_t i = 0; i < N; i++) {
			ids[i] = (7 + i) % BLOCKS;
			test_kv_poison(&kv2[k], ids[i], 0x3c);
		}
		r = kvs_load_sync(rk[k], lease, ids, N, 0, 0, CT_OP_MS);
		CHECK(r == N, "rank %u LOAD: %d", k, r);
		for (uint32_t i = 0; i < N; i++)
			check_block(&kv2[k], ids[i], keys + (size_t)i * KVSPEER_KEY_SIZE, k,
				    "split K/V tp 2");
	}
	CHECK(server_pins(&sv) == 0, "the program still holds pins after the tp 2 fetch");
	server_stop(&sv);
	printf("ok - split K/V at tp 2: 64 blocks x 2 shards, each rank its own, byte-exact\n");
	kvs_close(sched);
	for (unsigned i = 0; i < 2; i++) {
		kvs_close(rk[i]);
		test_kv_free(&kv2[i]);
	}
	ct_pass("the embedded service serves a kvstashd");
}
