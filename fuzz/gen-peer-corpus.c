/* SPDX-License-Identifier: MIT */
/*
 * Seeds for fuzz-peer-wire: the messages of a real exchange in both
 * directions, as libkvspeer's own builders (pw_put) lay them out, and a
 * few near-valid ones.  `make fuzz-corpus` runs it into
 * $(srcdir)/fuzz/corpus/fuzz-peer-wire; the output is committed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "peer/pwire.h"

static const char *outdir;

static void put(const char *name, uint8_t side, uint16_t keys, uint8_t shards,
		const struct pw_buf *b)
{
	char path[4096];
	uint8_t pre[4] = { side, (uint8_t)((keys - 1) & 0xff), (uint8_t)((keys - 1) >> 8),
			   (uint8_t)(shards - 1) };
	FILE *f;

	snprintf(path, sizeof(path), "%s/fuzz-peer-wire", outdir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/fuzz-peer-wire/seed-%s", outdir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(pre, 1, 4, f) != 4 || fwrite(b->p, 1, b->len, f) != b->len ||
	    fclose(f) != 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		exit(1);
	}
}

static void hello(struct pw_hello *h)
{
	memset(h, 0, sizeof(*h));
	h->major = PW_MAJOR;
	h->minor = PW_MINOR;
	h->transports = PW_TRANSPORT_BIT(KVSPEER_TRANSPORT_TCP);
	h->epoch = 7;
	memset(h->nonce, 0x5a, sizeof(h->nonce));
	snprintf(h->cluster, sizeof(h->cluster), "prod");
	snprintf(h->node, sizeof(h->node), "decode-3");
}

int main(int argc, char **argv)
{
	struct pw_buf b = { 0 };
	struct pw_hello h;
	struct pw_auth a = { { 0 } };
	struct pw_query q = { .nr_keys = 4, .nr_shards = 2, .ttl_ms = 5000 };
	uint8_t keys[4 * KVSPEER_KEY_SIZE];
	struct pw_fetch f = { .lock_id = 99, .first = 0, .count = 4 };
	struct pw_renew rn = { .lock_id = 99, .ttl_ms = 5000 };
	struct pw_release rl = { .lock_id = 99, .flags = PW_RELEASE_VERIFY };

	if (argc != 2) {
		fprintf(stderr, "usage: gen-peer-corpus DIR\n");
		return 2;
	}
	outdir = argv[1];
	for (size_t i = 0; i < sizeof(keys); i++)
		keys[i] = (uint8_t)(i * 37);

	/* A server's view: a whole client session. */
	hello(&h);
	pw_put(&b, PW_HELLO, 1, &h, sizeof(h), NULL, 0);
	pw_put(&b, PW_AUTH, 2, &a, sizeof(a), NULL, 0);
	pw_put(&b, PW_QUERY, 3, &q, sizeof(q), keys, sizeof(keys));
	pw_put(&b, PW_FETCH, 4, &f, sizeof(f), NULL, 0);
	pw_put(&b, PW_RENEW, 5, &rn, sizeof(rn), NULL, 0);
	pw_put(&b, PW_RELEASE, 6, &rl, sizeof(rl), NULL, 0);
	pw_put(&b, PW_HEALTH, 7, NULL, 0, NULL, 0);
	put("client-session", 0, 4, 2, &b);
	b.len = 0;
	h.major = 2;
	pw_put(&b, PW_HELLO, 1, &h, sizeof(h), NULL, 0);
	put("hello-next-major", 0, 4, 2, &b);
	b.len = 0;
	q.nr_keys = 5; /* one more than the bytes */
	pw_put(&b, PW_QUERY, 3, &q, sizeof(q), keys, sizeof(keys));
	put("query-short", 0, 4, 2, &b);

	/* A client's view: a whole server side of a TCP fetch of 2 blocks x 2 shards. */
	{
		struct pw_hello_reply r = { .major = PW_MAJOR,
					    .transport = h.transports,
					    .lock_ttl_ms = 10000,
					    .max_keys = 4096,
					    .max_locks = 64 };
		struct pw_auth_ok ok = { 0 };
		struct pw_query_reply qr = {
			.nr_blocks = 2, .nr_shards = 2, .ttl_ms = 5000, .lock_id = 99
		};
		struct pw_entry e[4];
		struct pw_fetch_end fe = { .status = 0, .sent = 2, .lock_id = 99 };
		struct pw_release_reply rr = { .nr = 4, .lock_id = 99 };
		uint64_t gens[4] = { 1, 1, 1, 1 };
		struct pw_health_reply hr = { .epoch = 7, .transport = 1 };
		struct pw_error er;

		snprintf(r.cluster, sizeof(r.cluster), "prod");
		snprintf(r.node, sizeof(r.node), "prefill-0");
		snprintf(hr.node, sizeof(hr.node), "prefill-0");
		memset(e, 0, sizeof(e));
		for (int i = 0; i < 4; i++) {
			e[i].len = 4096;
			e[i].generation = 1;
		}
		b.len = 0;
		pw_put(&b, PW_HELLO_REPLY, 1, &r, sizeof(r), NULL, 0);
		pw_put(&b, PW_AUTH_OK, 2, &ok, sizeof(ok), NULL, 0);
		pw_put(&b, PW_QUERY_REPLY, 3, &qr, sizeof(qr), e, sizeof(e));
		for (uint32_t blk = 0; blk < 2; blk++)
			for (uint32_t s = 0; s < 2; s++) {
				struct pw_data d = {
					.lock_id = 99, .block = blk, .shard = s, .len = 4096
				};
				struct pw_shard_end se = {
					.lock_id = 99, .block = blk, .shard = s, .generation = 1
				};

				pw_put(&b, PW_DATA, 0, &d, sizeof(d), NULL, 0);
				pw_put(&b, PW_SHARD_END, 0, &se, sizeof(se), NULL, 0);
			}
		pw_put(&b, PW_FETCH_END, 0, &fe, sizeof(fe), NULL, 0);
		pw_put(&b, PW_RELEASE_REPLY, 6, &rr, sizeof(rr), gens, sizeof(gens));
		pw_put(&b, PW_HEALTH_REPLY, 7, &hr, sizeof(hr), NULL, 0);
		pw_make_error(&er, -ENOENT, PW_FETCH, "no such lock");
		pw_put(&b, PW_ERROR, 8, &er, sizeof(er), NULL, 0);
		put("server-session", 1, 4, 2, &b);

		/* AUTH_OK of the UCX transport: an address and two regions with keys. */
		{
			struct pw_auth_ok uo = { .nr_regions = 2,
						 .taddr_len = 40,
						 .regions_version = 3 };
			uint8_t tail[40 + 2 * (sizeof(struct pw_region) + 16)];
			struct pw_region rg = { .base = 0x7f0000000000ull,
						.len = 1 << 30,
						.rkey_len = 16 };
			size_t n = 40;

			memset(tail, 0x11, sizeof(tail));
			for (int i = 0; i < 2; i++) {
				memcpy(tail + n, &rg, sizeof(rg));
				n += sizeof(rg) + 16;
				rg.base += 1ull << 30;
			}
			b.len = 0;
			pw_put(&b, PW_AUTH_OK, 2, &uo, sizeof(uo), tail, n);
			put("auth-ok-ucx", 1, 4, 2, &b);
		}
		/* More blocks than keys asked: must be refused. */
		b.len = 0;
		qr.nr_blocks = 3;
		pw_put(&b, PW_QUERY_REPLY, 3, &qr, sizeof(qr), e, sizeof(e));
		put("query-reply-too-many", 1, 2, 2, &b);
	}
	pw_buf_free(&b);
	return 0;
}
