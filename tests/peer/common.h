/* SPDX-License-Identifier: MIT */
/*
 * Shared by the peer test programs (peer-serve, peer-fetch, peer-hostile,
 * kvspeer-bench): the Qwen3-like page-first geometry, block keys derived
 * from a seed, the namespace digest, and payloads derived from the keys,
 * so a fetcher checks every byte without being told what to expect.
 */
#ifndef KVS_TESTS_PEER_COMMON_H
#define KVS_TESTS_PEER_COMMON_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvstash/peer.h>

/*
 * Qwen3-8B, page-first, bf16: 36 layers, 8 KV heads of 128, 16 tokens a
 * block, K and V: 64 KiB per layer and block, 2.25 MiB per block for one
 * rank (the seed's handoff: 33 blocks, 74.25 MiB).  TP splits the heads.
 * MLA (DeepSeek-like latent, replicated): 576 values a token, one shard.
 */
#define QWEN3_LAYERS	  36u
#define QWEN3_LAYER_BYTES (2u * 16u * 8u * 128u * 2u)
#define MLA_LAYER_BYTES	  (576u * 16u * 2u)

struct geo {
	uint32_t layers;
	uint32_t tp; /* shards per block (1 when replicated) */
	int mla;     /* replicated latent layout */
	uint64_t shard_bytes;
};

static inline void geo_init(struct geo *g, uint32_t layers, uint32_t tp, int mla,
			    uint64_t shard_bytes)
{
	g->layers = layers ? layers : QWEN3_LAYERS;
	g->mla = mla;
	g->tp = mla ? 1 : (tp ? tp : 1);
	if (shard_bytes)
		g->shard_bytes = shard_bytes;
	else if (mla)
		g->shard_bytes = (uint64_t)MLA_LAYER_BYTES * g->layers;
	else
		g->shard_bytes = (uint64_t)QWEN3_LAYER_BYTES / g->tp * g->layers;
}

static inline uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Key i of a prefix chain named by @seed (opaque to the library). */
static inline void make_key(uint64_t seed, uint32_t i, uint8_t key[KVSPEER_KEY_SIZE])
{
	uint64_t a = splitmix64(seed * 1000003ull + i), b = splitmix64(a ^ 0x5bd1e995u);

	memcpy(key, &a, 8);
	memcpy(key + 8, &b, 8);
}

/* The namespace digest: the name and the geometry, as kvstash's registry would. */
static inline void make_digest(const char *ns, const struct geo *g,
			       uint8_t digest[KVSPEER_DIGEST_SIZE])
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *c = ns; *c; c++)
		h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
	h ^= splitmix64(g->layers) ^ splitmix64((uint64_t)g->tp << 8) ^ splitmix64(g->shard_bytes) ^
	     (g->mla ? 0x4d4c41ull : 0);
	for (int i = 0; i < 4; i++) {
		uint64_t w = splitmix64(h + (uint64_t)i);

		memcpy(digest + 8 * i, &w, 8);
	}
}

static inline uint64_t payload_word(const uint8_t key[KVSPEER_KEY_SIZE], uint32_t shard, uint64_t w)
{
	uint64_t k0, k1;

	memcpy(&k0, key, 8);
	memcpy(&k1, key + 8, 8);
	return splitmix64(k0 ^ (k1 * 31) ^ ((uint64_t)shard << 56) ^ w);
}

/* Fill @len bytes (a multiple of 8) of shard @shard of the block with @key. */
static inline void payload_fill(uint8_t *dst, uint64_t len, const uint8_t key[KVSPEER_KEY_SIZE],
				uint32_t shard)
{
	for (uint64_t w = 0; w < len / 8; w++) {
		uint64_t v = payload_word(key, shard, w);

		memcpy(dst + 8 * w, &v, 8);
	}
}

/* Bytes that differ from the pattern. */
static inline uint64_t payload_check(const uint8_t *src, uint64_t len,
				     const uint8_t key[KVSPEER_KEY_SIZE], uint32_t shard)
{
	uint64_t bad = 0;

	for (uint64_t w = 0; w < len / 8; w++) {
		uint64_t v = payload_word(key, shard, w), got;

		memcpy(&got, src + 8 * w, 8);
		if (got != v)
			for (int b = 0; b < 8; b++)
				bad += ((got >> (8 * b)) & 0xff) != ((v >> (8 * b)) & 0xff);
	}
	return bad;
}

static inline uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline const char *errname(int e)
{
	static char buf[32];

	switch (e) {
	case 0:
		return "0";
	case -ETIMEDOUT:
		return "ETIMEDOUT";
	case -ECONNREFUSED:
		return "ECONNREFUSED";
	case -ECONNRESET:
		return "ECONNRESET";
	case -EHOSTUNREACH:
		return "EHOSTUNREACH";
	case -ENETUNREACH:
		return "ENETUNREACH";
	case -EACCES:
		return "EACCES";
	case -EPROTO:
		return "EPROTO";
	case -ESTALE:
		return "ESTALE";
	case -ENOSPC:
		return "ENOSPC";
	case -EREMOTEIO:
		return "EREMOTEIO";
	case -ESHUTDOWN:
		return "ESHUTDOWN";
	case -EIO:
		return "EIO";
	case -EPIPE:
		return "EPIPE";
	case -EPROTONOSUPPORT:
		return "EPROTONOSUPPORT";
	case -EPERM:
		return "EPERM";
	case -EINVAL:
		return "EINVAL";
	default:
		snprintf(buf, sizeof(buf), "E%d", -e);
		return buf;
	}
}

/* "name=value ..." of the counters, on one line (the test scripts grep it). */
static inline void print_stats(FILE *out, const struct kvspeer_stats *s)
{
	fprintf(out,
		"stats locks_held=%llu locks_granted=%llu locks_released=%llu locks_expired=%llu "
		"locks_dropped=%llu serve_blocks=%llu serve_bytes=%llu conns_open=%llu "
		"conns_accepted=%llu fetches=%llu fetch_blocks=%llu fetch_bytes=%llu",
		(unsigned long long)s->locks_held, (unsigned long long)s->locks_granted,
		(unsigned long long)s->locks_released, (unsigned long long)s->locks_expired,
		(unsigned long long)s->locks_dropped, (unsigned long long)s->serve_blocks,
		(unsigned long long)s->serve_bytes, (unsigned long long)s->conns_open,
		(unsigned long long)s->conns_accepted, (unsigned long long)s->fetches,
		(unsigned long long)s->fetch_blocks, (unsigned long long)s->fetch_bytes);
	for (unsigned k = 0; k < KVSPEER_FAIL__MAX; k++)
		fprintf(out, " serve_fail_%s=%llu", kvspeer_fail_name(k),
			(unsigned long long)s->serve_fail[k]);
	for (unsigned k = 0; k < KVSPEER_FAIL__MAX; k++)
		fprintf(out, " fetch_fail_%s=%llu", kvspeer_fail_name(k),
			(unsigned long long)s->fetch_fail[k]);
	fputc('\n', out);
	fflush(out);
}

#endif /* KVS_TESTS_PEER_COMMON_H */
