/* SPDX-License-Identifier: MIT */
/*
 * fuzz-peer-wire: a byte stream from a peer through libkvspeer's parsers
 * (peer/pwire.c), as a connection reads it: header first, its payload only
 * once the header's bounds held, then the parser of its type.
 *
 * Input: byte 0 picks the side (bit 0: 0 = a server reading a client's
 * requests, 1 = a client reading a server's replies); bytes 1-2 the keys
 * and byte 3 the shards the client asked for (what QUERY_REPLY and
 * RELEASE_REPLY are checked against); the rest is the stream.  What a
 * parser accepts must be what wire.h promises the library: lengths that
 * match the counts, counts inside their limits, names terminated and
 * valid, pointers inside the payload.
 */
#include <errno.h>

#include "peer/pwire.h"
#include "fuzz.h"

static bool name_ok(const char *s, size_t n)
{
	return memchr(s, '\0', n) && pw_check_name(s, n) == 0;
}

static bool inside(const uint8_t *p, size_t n, const uint8_t *base, size_t len)
{
	return n == 0 || (p >= base && n <= len && (size_t)(p - base) <= len - n);
}

static void server_side(const struct pw_hdr *h, const uint8_t *p)
{
	char why[256];

	switch (h->type) {
	case PW_HELLO: {
		struct pw_hello m;

		if (pw_parse_hello(p, h->len, &m, why, sizeof(why)) == 0) {
			FUZZ_CHECK(m.major == PW_MAJOR, "major %u", m.major);
			FUZZ_CHECK(m.transports && !(m.transports & ~PW_TRANSPORTS_KNOWN),
				   "transports 0x%x", m.transports);
			FUZZ_CHECK(name_ok(m.cluster, sizeof(m.cluster)) &&
					   name_ok(m.node, sizeof(m.node)),
				   "names accepted unchecked");
		}
		break;
	}
	case PW_AUTH: {
		struct pw_auth m;

		if (pw_parse_auth(p, h->len, &m, why, sizeof(why)) == 0)
			FUZZ_CHECK(h->len == sizeof(m), "AUTH of %u bytes", h->len);
		break;
	}
	case PW_QUERY: {
		struct pw_query q;
		const uint8_t *keys;

		if (pw_parse_query(p, h->len, KVSPEER_MAX_KEYS, &q, &keys, why, sizeof(why)) == 0) {
			FUZZ_CHECK(q.nr_keys >= 1 && q.nr_keys <= KVSPEER_MAX_KEYS, "%u keys",
				   q.nr_keys);
			FUZZ_CHECK(q.nr_shards >= 1 && q.nr_shards <= KVSPEER_MAX_SHARDS &&
					   (uint64_t)q.nr_keys * q.nr_shards <= KVSPEER_MAX_ENTRIES,
				   "%u shards", q.nr_shards);
			FUZZ_CHECK(h->len == sizeof(q) + (size_t)q.nr_keys * KVSPEER_KEY_SIZE,
				   "length");
			FUZZ_CHECK(inside(keys, (size_t)q.nr_keys * KVSPEER_KEY_SIZE, p, h->len),
				   "keys outside the payload");
			/* The library reads every key: make ASan see them all. */
			volatile uint8_t x = 0;
			for (size_t i = 0; i < (size_t)q.nr_keys * KVSPEER_KEY_SIZE; i++)
				x ^= keys[i];
			(void)x;
		}
		break;
	}
	case PW_FETCH: {
		struct pw_fetch m;

		if (pw_parse_fetch(p, h->len, &m, why, sizeof(why)) == 0)
			FUZZ_CHECK(m.count >= 1, "FETCH of 0 blocks");
		break;
	}
	case PW_RENEW: {
		struct pw_renew m;

		(void)pw_parse_renew(p, h->len, &m, why, sizeof(why));
		break;
	}
	case PW_RELEASE: {
		struct pw_release m;

		if (pw_parse_release(p, h->len, &m, why, sizeof(why)) == 0)
			FUZZ_CHECK(!(m.flags & ~PW_RELEASE_VERIFY), "flags 0x%x", m.flags);
		break;
	}
	default:
		break;
	}
}

static void client_side(const struct pw_hdr *h, const uint8_t *p, uint32_t nr_keys,
			uint32_t nr_shards)
{
	struct pw_reply_limits lim = { nr_keys, nr_shards, 1ull << 30 };
	char why[256];

	switch (h->type) {
	case PW_HELLO_REPLY: {
		struct pw_hello_reply m;
		uint32_t offered = PW_TRANSPORT_BIT(KVSPEER_TRANSPORT_TCP);

		if (pw_parse_hello_reply(p, h->len, offered, &m, why, sizeof(why)) == 0) {
			FUZZ_CHECK(m.transport == offered, "transport 0x%x", m.transport);
			FUZZ_CHECK(name_ok(m.cluster, sizeof(m.cluster)) &&
					   name_ok(m.node, sizeof(m.node)),
				   "names");
			FUZZ_CHECK(m.max_keys >= 1 && m.max_keys <= KVSPEER_MAX_KEYS &&
					   m.lock_ttl_ms,
				   "limits");
		}
		break;
	}
	case PW_AUTH_OK: {
		struct pw_auth_ok_info *info = calloc(1, sizeof(*info));

		if (!info)
			abort();
		if (pw_parse_auth_ok(p, h->len, info, why, sizeof(why)) == 0) {
			size_t sum = sizeof(struct pw_auth_ok) + info->taddr_len;

			FUZZ_CHECK(info->nr_regions <= PW_MAX_REGIONS &&
					   info->taddr_len <= PW_MAX_TADDR,
				   "counts");
			FUZZ_CHECK(inside(info->taddr, info->taddr_len, p, h->len),
				   "address outside");
			for (uint32_t i = 0; i < info->nr_regions; i++) {
				FUZZ_CHECK(inside(info->regions[i].rkey, info->regions[i].rkey_len,
						  p, h->len),
					   "key %u outside", i);
				FUZZ_CHECK(info->regions[i].len &&
						   info->regions[i].base + info->regions[i].len >
							   info->regions[i].base,
					   "region %u wraps", i);
				sum += sizeof(struct pw_region) + info->regions[i].rkey_len;
			}
			FUZZ_CHECK(sum == h->len, "AUTH_OK parts %zu of %u bytes", sum, h->len);
		}
		free(info);
		break;
	}
	case PW_QUERY_REPLY: {
		struct pw_query_reply m;
		const uint8_t *ents;

		if (pw_parse_query_reply(p, h->len, &lim, &m, &ents, why, sizeof(why)) == 0) {
			uint64_t n = m.nr_blocks ? (uint64_t)m.nr_blocks * m.nr_shards : 0;

			FUZZ_CHECK(m.nr_blocks <= nr_keys, "%u blocks for %u keys", m.nr_blocks,
				   nr_keys);
			FUZZ_CHECK(!m.nr_blocks || (m.nr_shards == nr_shards && m.lock_id),
				   "shards, lock");
			FUZZ_CHECK(h->len == sizeof(m) + n * sizeof(struct pw_entry), "length");
			for (uint64_t i = 0; i < n; i++) {
				struct pw_entry e;

				pw_entry_get(ents, (uint32_t)i, &e);
				FUZZ_CHECK(e.len >= 1 && e.len <= lim.max_shard_bytes,
					   "entry length %llu", (unsigned long long)e.len);
			}
		}
		break;
	}
	case PW_DATA: {
		struct pw_data m;

		if (pw_parse_data(p, h->len, &m, why, sizeof(why)) == 0)
			FUZZ_CHECK(m.len, "DATA of 0 bytes");
		break;
	}
	case PW_SHARD_END: {
		struct pw_shard_end m;

		(void)pw_parse_shard_end(p, h->len, &m, why, sizeof(why));
		break;
	}
	case PW_FETCH_END: {
		struct pw_fetch_end m;

		if (pw_parse_fetch_end(p, h->len, &m, why, sizeof(why)) == 0)
			FUZZ_CHECK(pw_status_ok(m.status), "status %d", m.status);
		break;
	}
	case PW_RENEW_REPLY: {
		struct pw_renew_reply m;

		(void)pw_parse_renew_reply(p, h->len, &m, why, sizeof(why));
		break;
	}
	case PW_RELEASE_REPLY: {
		struct pw_release_reply m;
		const uint8_t *gens;
		uint32_t max = nr_keys * nr_shards;

		if (pw_parse_release_reply(p, h->len, max, &m, &gens, why, sizeof(why)) == 0) {
			FUZZ_CHECK(m.nr <= max, "%u generations", m.nr);
			FUZZ_CHECK(inside(gens, (size_t)m.nr * 8, p, h->len),
				   "generations outside");
		}
		break;
	}
	case PW_HEALTH_REPLY: {
		struct pw_health_reply m;

		if (pw_parse_health_reply(p, h->len, &m, why, sizeof(why)) == 0)
			FUZZ_CHECK(name_ok(m.node, sizeof(m.node)), "node");
		break;
	}
	case PW_ERROR: {
		struct pw_error m;

		if (pw_parse_error(p, h->len, &m, why, sizeof(why)) == 0) {
			FUZZ_CHECK(m.status < 0 && pw_status_ok(m.status), "status %d", m.status);
			for (const char *c = m.text; *c; c++)
				FUZZ_CHECK(*c >= 0x20 && *c <= 0x7e, "unprintable text for a log");
		}
		break;
	}
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t nr_keys, nr_shards;
	bool client;
	size_t off = 4;

	if (size < 4)
		return 0;
	client = data[0] & 1;
	nr_keys = 1 + ((uint32_t)data[1] | (uint32_t)data[2] << 8) % KVSPEER_MAX_KEYS;
	nr_shards = 1 + data[3] % 16u;
	if ((uint64_t)nr_keys * nr_shards > KVSPEER_MAX_ENTRIES)
		nr_keys = KVSPEER_MAX_ENTRIES / nr_shards;
	while (size - off >= sizeof(struct pw_hdr)) {
		struct pw_hdr h;
		uint32_t lo, hi;
		uint8_t *payload;
		char why[256];

		if (pw_parse_hdr(data + off, &h, why, sizeof(why)) < 0)
			break;
		pw_payload_bounds(h.type, &lo, &hi);
		FUZZ_CHECK(h.len >= lo && h.len <= hi && h.len <= PW_MAX_PAYLOAD,
			   "header of type %u accepted with %u bytes", h.type, h.len);
		off += sizeof(h);
		if (size - off < h.len)
			break;
		/* An exact copy, as the connection's buffer holds it: ASan sees reads past it. */
		payload = fuzz_dup(data + off, h.len);
		if (client)
			client_side(&h, payload, nr_keys, nr_shards);
		else
			server_side(&h, payload);
		free(payload);
		off += h.len;
	}
	return 0;
}
