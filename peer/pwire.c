/* SPDX-License-Identifier: MIT */
/* The peer protocol's parsers and builders (pwire.h says what they promise). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "common/bits.h"
#include "common/name.h"
#include "common/why.h"
#include "peer/pwire.h"


static bool has_nul(const char *s, size_t n)
{
	return memchr(s, '\0', n) != NULL;
}

int pw_check_name(const char *s, size_t size)
{
	return name_check(s, size);
}

bool pw_status_ok(int32_t status)
{
	return status <= 0 && status >= -4095;
}

void pw_payload_bounds(unsigned type, uint32_t *ret_min, uint32_t *ret_max)
{
	uint32_t lo = 0, hi = 0;

	switch (type) {
	case PW_HELLO:
		lo = sizeof(struct pw_hello);
		hi = PW_HELLO_MAX;
		break;
	case PW_HELLO_REPLY:
		lo = sizeof(struct pw_hello_reply);
		hi = PW_HELLO_MAX;
		break;
	case PW_AUTH:
		lo = hi = sizeof(struct pw_auth);
		break;
	case PW_AUTH_OK:
		lo = sizeof(struct pw_auth_ok);
		hi = sizeof(struct pw_auth_ok) + PW_MAX_TADDR +
		     PW_MAX_REGIONS * (sizeof(struct pw_region) + PW_MAX_RKEY);
		break;
	case PW_QUERY:
		lo = sizeof(struct pw_query) + KVSPEER_KEY_SIZE;
		hi = sizeof(struct pw_query) + KVSPEER_MAX_KEYS * KVSPEER_KEY_SIZE;
		break;
	case PW_QUERY_REPLY:
		lo = sizeof(struct pw_query_reply);
		hi = PW_MAX_PAYLOAD;
		break;
	case PW_FETCH:
		lo = hi = sizeof(struct pw_fetch);
		break;
	case PW_DATA:
		lo = hi = sizeof(struct pw_data);
		break;
	case PW_SHARD_END:
		lo = hi = sizeof(struct pw_shard_end);
		break;
	case PW_FETCH_END:
		lo = hi = sizeof(struct pw_fetch_end);
		break;
	case PW_RENEW:
		lo = hi = sizeof(struct pw_renew);
		break;
	case PW_RENEW_REPLY:
		lo = hi = sizeof(struct pw_renew_reply);
		break;
	case PW_RELEASE:
		lo = hi = sizeof(struct pw_release);
		break;
	case PW_RELEASE_REPLY:
		lo = sizeof(struct pw_release_reply);
		hi = sizeof(struct pw_release_reply) + KVSPEER_MAX_ENTRIES * sizeof(uint64_t);
		break;
	case PW_HEALTH:
		lo = hi = 0;
		break;
	case PW_HEALTH_REPLY:
		lo = hi = sizeof(struct pw_health_reply);
		break;
	case PW_ERROR:
		lo = hi = sizeof(struct pw_error);
		break;
	default:
		break;
	}
	*ret_min = lo;
	*ret_max = hi;
}

int pw_parse_hdr(const void *buf, struct pw_hdr *ret, char *why, size_t wl)
{
	struct pw_hdr h;
	uint32_t lo, hi;

	memcpy(&h, buf, sizeof(h));
	if (h.magic != PW_MAGIC) {
		WHY("bad magic 0x%08x", h.magic);
		return -EBADMSG;
	}
	if (h.flags) {
		WHY("header flags 0x%x", h.flags);
		return -EBADMSG;
	}
	if (h.type == 0 || h.type >= PW__TYPE_MAX) {
		WHY("unknown message type %u", h.type);
		return -EPROTO;
	}
	pw_payload_bounds(h.type, &lo, &hi);
	if (h.len < lo || h.len > hi) {
		WHY("type %u with %u payload bytes (bounds %u..%u)", h.type, h.len, lo, hi);
		return -EBADMSG;
	}
	*ret = h;
	return 0;
}

/* A fixed-size payload: exactly sizeof(*ret) bytes. */
static int fixed(const void *p, size_t len, void *ret, size_t size, const char *what, char *why,
		 size_t wl)
{
	if (len != size) {
		WHY("%s of %zu bytes, expected %zu", what, len, size);
		return -EBADMSG;
	}
	memcpy(ret, p, size);
	return 0;
}

int pw_parse_hello(const void *p, size_t len, struct pw_hello *ret, char *why, size_t wl)
{
	struct pw_hello h;
	uint16_t major;

	/* The major sits at a frozen offset: any revision can read it. */
	if (len < sizeof(major)) {
		WHY("HELLO of %zu bytes", len);
		return -EBADMSG;
	}
	memcpy(&major, p, sizeof(major));
	if (major != PW_MAJOR) {
		WHY("protocol %u not supported (this side speaks %u.%u)", major, PW_MAJOR,
		    PW_MINOR);
		return -EPROTONOSUPPORT;
	}
	/* A later minor appends; read ours, ignore the rest. */
	if (len < sizeof(h) || len > PW_HELLO_MAX) {
		WHY("HELLO of %zu bytes", len);
		return -EBADMSG;
	}
	memcpy(&h, p, sizeof(h));
	if (!all_zero(h.resv, sizeof(h.resv))) {
		WHY("reserved HELLO bytes are not zero");
		return -EINVAL;
	}
	if (!h.transports || (h.transports & ~PW_TRANSPORTS_KNOWN)) {
		WHY("transports 0x%x", h.transports);
		return -EINVAL;
	}
	if (pw_check_name(h.cluster, sizeof(h.cluster)) < 0 ||
	    pw_check_name(h.node, sizeof(h.node)) < 0) {
		WHY("cluster and node must be 1-%u characters of [A-Za-z0-9._:/@+=-]",
		    KVSPEER_NAME_MAX - 1);
		return -EINVAL;
	}
	*ret = h;
	return 0;
}

int pw_parse_hello_reply(const void *p, size_t len, uint32_t client_transports,
			 struct pw_hello_reply *ret, char *why, size_t wl)
{
	struct pw_hello_reply h;
	uint16_t major;

	if (len < sizeof(major)) {
		WHY("HELLO_REPLY of %zu bytes", len);
		return -EBADMSG;
	}
	memcpy(&major, p, sizeof(major));
	if (major != PW_MAJOR) {
		WHY("peer speaks protocol %u, this side %u.%u", major, PW_MAJOR, PW_MINOR);
		return -EPROTONOSUPPORT;
	}
	if (len < sizeof(h) || len > PW_HELLO_MAX) {
		WHY("HELLO_REPLY of %zu bytes", len);
		return -EBADMSG;
	}
	memcpy(&h, p, sizeof(h));
	if (h.resv0 || !all_zero(h.resv, sizeof(h.resv))) {
		WHY("reserved HELLO_REPLY bytes are not zero");
		return -EINVAL;
	}
	/* Exactly one transport, and one the client offered. */
	if (!h.transport || (h.transport & (h.transport - 1)) ||
	    !(h.transport & client_transports & PW_TRANSPORTS_KNOWN)) {
		WHY("transport 0x%x not among the offered 0x%x", h.transport, client_transports);
		return -EINVAL;
	}
	if (pw_check_name(h.cluster, sizeof(h.cluster)) < 0 ||
	    pw_check_name(h.node, sizeof(h.node)) < 0) {
		WHY("cluster or node name invalid");
		return -EINVAL;
	}
	if (!h.lock_ttl_ms || !h.max_keys || h.max_keys > KVSPEER_MAX_KEYS || !h.max_locks) {
		WHY("limits ttl %u keys %u locks %u", h.lock_ttl_ms, h.max_keys, h.max_locks);
		return -EINVAL;
	}
	*ret = h;
	return 0;
}

int pw_parse_auth(const void *p, size_t len, struct pw_auth *ret, char *why, size_t wl)
{
	struct pw_auth a;
	int r = fixed(p, len, &a, sizeof(a), "AUTH", why, wl);

	if (r < 0)
		return r;
	if (!all_zero(a.resv, sizeof(a.resv))) {
		WHY("reserved AUTH bytes are not zero");
		return -EINVAL;
	}
	*ret = a;
	return 0;
}

int pw_parse_auth_ok(const void *p, size_t len, struct pw_auth_ok_info *ret, char *why, size_t wl)
{
	const uint8_t *b = p;
	struct pw_auth_ok a;
	size_t off = sizeof(a);

	if (len < sizeof(a)) {
		WHY("AUTH_OK of %zu bytes", len);
		return -EBADMSG;
	}
	memcpy(&a, b, sizeof(a));
	if (a.resv) {
		WHY("reserved AUTH_OK field is not zero");
		return -EINVAL;
	}
	if (a.nr_regions > PW_MAX_REGIONS || a.taddr_len > PW_MAX_TADDR) {
		WHY("AUTH_OK with %u regions, address of %u bytes", a.nr_regions, a.taddr_len);
		return -EINVAL;
	}
	if (len - off < a.taddr_len) {
		WHY("AUTH_OK address runs past the message");
		return -EBADMSG;
	}
	ret->nr_regions = a.nr_regions;
	ret->regions_version = a.regions_version;
	ret->taddr_len = a.taddr_len;
	ret->taddr = a.taddr_len ? b + off : NULL;
	off += a.taddr_len;
	for (uint32_t i = 0; i < a.nr_regions; i++) {
		struct pw_region r;

		if (len - off < sizeof(r)) {
			WHY("AUTH_OK region %u runs past the message", i);
			return -EBADMSG;
		}
		memcpy(&r, b + off, sizeof(r));
		off += sizeof(r);
		if (r.resv || !r.len || r.base + r.len < r.base || r.rkey_len > PW_MAX_RKEY) {
			WHY("AUTH_OK region %u invalid", i);
			return -EINVAL;
		}
		if (len - off < r.rkey_len) {
			WHY("AUTH_OK region %u key runs past the message", i);
			return -EBADMSG;
		}
		ret->regions[i].base = r.base;
		ret->regions[i].len = r.len;
		ret->regions[i].rkey_len = r.rkey_len;
		ret->regions[i].rkey = r.rkey_len ? b + off : NULL;
		off += r.rkey_len;
	}
	if (off != len) {
		WHY("AUTH_OK has %zu bytes past its regions", len - off);
		return -EBADMSG;
	}
	return 0;
}

int pw_parse_query(const void *p, size_t len, uint32_t max_keys, struct pw_query *ret,
		   const uint8_t **ret_keys, char *why, size_t wl)
{
	struct pw_query q;

	if (len < sizeof(q)) {
		WHY("QUERY of %zu bytes", len);
		return -EBADMSG;
	}
	memcpy(&q, p, sizeof(q));
	if (q.flags) {
		WHY("QUERY flags 0x%x", q.flags);
		return -EINVAL;
	}
	if (max_keys > KVSPEER_MAX_KEYS)
		max_keys = KVSPEER_MAX_KEYS;
	if (q.nr_keys == 0 || q.nr_keys > max_keys) {
		WHY("QUERY of %u keys (1..%u)", q.nr_keys, max_keys);
		return -E2BIG;
	}
	if (q.nr_shards == 0 || q.nr_shards > KVSPEER_MAX_SHARDS ||
	    (uint64_t)q.nr_keys * q.nr_shards > KVSPEER_MAX_ENTRIES) {
		WHY("QUERY of %u keys x %u shards", q.nr_keys, q.nr_shards);
		return -E2BIG;
	}
	if (len != sizeof(q) + (size_t)q.nr_keys * KVSPEER_KEY_SIZE) {
		WHY("QUERY of %zu bytes for %u keys", len, q.nr_keys);
		return -EBADMSG;
	}
	*ret = q;
	*ret_keys = (const uint8_t *)p + sizeof(q);
	return 0;
}

void pw_entry_get(const uint8_t *entries, uint32_t i, struct pw_entry *ret)
{
	memcpy(ret, entries + (size_t)i * sizeof(*ret), sizeof(*ret));
}

int pw_parse_query_reply(const void *p, size_t len, const struct pw_reply_limits *lim,
			 struct pw_query_reply *ret, const uint8_t **ret_entries, char *why,
			 size_t wl)
{
	struct pw_query_reply q;
	const uint8_t *ents;
	uint64_t n;

	if (len < sizeof(q)) {
		WHY("QUERY_REPLY of %zu bytes", len);
		return -EBADMSG;
	}
	memcpy(&q, p, sizeof(q));
	if (q.resv || !pw_status_ok(q.status)) {
		WHY("QUERY_REPLY status %d resv %u", q.status, q.resv);
		return -EINVAL;
	}
	if (q.status < 0 && q.nr_blocks) {
		WHY("QUERY_REPLY with an error and %u blocks", q.nr_blocks);
		return -EINVAL;
	}
	if (q.nr_blocks > lim->nr_keys) {
		WHY("QUERY_REPLY of %u blocks for %u keys", q.nr_blocks, lim->nr_keys);
		return -EINVAL;
	}
	if (q.nr_blocks && (q.nr_shards != lim->nr_shards || !q.lock_id || !q.ttl_ms)) {
		WHY("QUERY_REPLY with %u shards (asked %u), lock %llu, ttl %u", q.nr_shards,
		    lim->nr_shards, (unsigned long long)q.lock_id, q.ttl_ms);
		return -EINVAL;
	}
	n = (uint64_t)q.nr_blocks * q.nr_shards;
	if (!q.nr_blocks)
		n = 0;
	if (len != sizeof(q) + n * sizeof(struct pw_entry)) {
		WHY("QUERY_REPLY of %zu bytes for %llu entries", len, (unsigned long long)n);
		return -EBADMSG;
	}
	ents = (const uint8_t *)p + sizeof(q);
	for (uint64_t i = 0; i < n; i++) {
		struct pw_entry e;

		pw_entry_get(ents, (uint32_t)i, &e);
		if (e.resv || e.len == 0 || e.len > lim->max_shard_bytes) {
			WHY("QUERY_REPLY entry %llu: %llu bytes (limit %llu)",
			    (unsigned long long)i, (unsigned long long)e.len,
			    (unsigned long long)lim->max_shard_bytes);
			return -EINVAL;
		}
	}
	*ret = q;
	*ret_entries = ents;
	return 0;
}

int pw_parse_fetch(const void *p, size_t len, struct pw_fetch *ret, char *why, size_t wl)
{
	struct pw_fetch f;
	int r = fixed(p, len, &f, sizeof(f), "FETCH", why, wl);

	if (r < 0)
		return r;
	if (!all_zero(f.resv, sizeof(f.resv)) || f.count == 0) {
		WHY("FETCH of %u blocks, reserved bytes", f.count);
		return -EINVAL;
	}
	*ret = f;
	return 0;
}

int pw_parse_data(const void *p, size_t len, struct pw_data *ret, char *why, size_t wl)
{
	struct pw_data d;
	int r = fixed(p, len, &d, sizeof(d), "DATA", why, wl);

	if (r < 0)
		return r;
	if (d.resv || d.len == 0) {
		WHY("DATA of %llu bytes", (unsigned long long)d.len);
		return -EINVAL;
	}
	*ret = d;
	return 0;
}

int pw_parse_shard_end(const void *p, size_t len, struct pw_shard_end *ret, char *why, size_t wl)
{
	struct pw_shard_end e;
	int r = fixed(p, len, &e, sizeof(e), "SHARD_END", why, wl);

	if (r < 0)
		return r;
	if (e.resv) {
		WHY("reserved SHARD_END field is not zero");
		return -EINVAL;
	}
	*ret = e;
	return 0;
}

int pw_parse_fetch_end(const void *p, size_t len, struct pw_fetch_end *ret, char *why, size_t wl)
{
	struct pw_fetch_end e;
	int r = fixed(p, len, &e, sizeof(e), "FETCH_END", why, wl);

	if (r < 0)
		return r;
	if (!pw_status_ok(e.status)) {
		WHY("FETCH_END status %d", e.status);
		return -EINVAL;
	}
	*ret = e;
	return 0;
}

int pw_parse_renew(const void *p, size_t len, struct pw_renew *ret, char *why, size_t wl)
{
	struct pw_renew m;
	int r = fixed(p, len, &m, sizeof(m), "RENEW", why, wl);

	if (r < 0)
		return r;
	if (m.resv) {
		WHY("reserved RENEW field is not zero");
		return -EINVAL;
	}
	*ret = m;
	return 0;
}

int pw_parse_renew_reply(const void *p, size_t len, struct pw_renew_reply *ret, char *why,
			 size_t wl)
{
	struct pw_renew_reply m;
	int r = fixed(p, len, &m, sizeof(m), "RENEW_REPLY", why, wl);

	if (r < 0)
		return r;
	if (!pw_status_ok(m.status)) {
		WHY("RENEW_REPLY status %d", m.status);
		return -EINVAL;
	}
	*ret = m;
	return 0;
}

int pw_parse_release(const void *p, size_t len, struct pw_release *ret, char *why, size_t wl)
{
	struct pw_release m;
	int r = fixed(p, len, &m, sizeof(m), "RELEASE", why, wl);

	if (r < 0)
		return r;
	if (m.resv || (m.flags & ~PW_RELEASE_VERIFY)) {
		WHY("RELEASE flags 0x%x", m.flags);
		return -EINVAL;
	}
	*ret = m;
	return 0;
}

int pw_parse_release_reply(const void *p, size_t len, uint32_t max_nr, struct pw_release_reply *ret,
			   const uint8_t **ret_gens, char *why, size_t wl)
{
	struct pw_release_reply m;

	if (len < sizeof(m)) {
		WHY("RELEASE_REPLY of %zu bytes", len);
		return -EBADMSG;
	}
	memcpy(&m, p, sizeof(m));
	if (!pw_status_ok(m.status) || m.nr > max_nr || (m.status < 0 && m.nr)) {
		WHY("RELEASE_REPLY status %d with %u generations (at most %u)", m.status, m.nr,
		    max_nr);
		return -EINVAL;
	}
	if (len != sizeof(m) + (size_t)m.nr * sizeof(uint64_t)) {
		WHY("RELEASE_REPLY of %zu bytes for %u generations", len, m.nr);
		return -EBADMSG;
	}
	*ret = m;
	*ret_gens = (const uint8_t *)p + sizeof(m);
	return 0;
}

int pw_parse_health_reply(const void *p, size_t len, struct pw_health_reply *ret, char *why,
			  size_t wl)
{
	struct pw_health_reply m;
	int r = fixed(p, len, &m, sizeof(m), "HEALTH_REPLY", why, wl);

	if (r < 0)
		return r;
	if (!pw_status_ok(m.status) || pw_check_name(m.node, sizeof(m.node)) < 0) {
		WHY("HEALTH_REPLY status %d or node name invalid", m.status);
		return -EINVAL;
	}
	*ret = m;
	return 0;
}

int pw_parse_error(const void *p, size_t len, struct pw_error *ret, char *why, size_t wl)
{
	struct pw_error m;
	int r = fixed(p, len, &m, sizeof(m), "ERROR", why, wl);

	if (r < 0)
		return r;
	if (!pw_status_ok(m.status) || m.status == 0 || m.resv ||
	    !has_nul(m.text, sizeof(m.text))) {
		WHY("ERROR status %d", m.status);
		return -EINVAL;
	}
	/* The text goes to a log: printable ASCII only. */
	for (char *c = m.text; *c; c++)
		if (*c < 0x20 || *c > 0x7e)
			*c = '?';
	*ret = m;
	return 0;
}

int pw_buf_reserve(struct pw_buf *b, size_t more)
{
	size_t cap;
	uint8_t *p;

	if (b->cap - b->len >= more)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap - b->len < more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

void pw_buf_free(struct pw_buf *b)
{
	b->p = mfree(b->p);
	b->len = b->cap = 0;
}

int pw_put(struct pw_buf *b, unsigned type, uint32_t seq, const void *fixed, size_t flen,
	   const void *tail, size_t tlen)
{
	struct pw_hdr h = {
		.magic = PW_MAGIC,
		.type = (uint16_t)type,
		.len = (uint32_t)(flen + tlen),
		.seq = seq,
	};
	int r = pw_buf_reserve(b, sizeof(h) + flen + tlen);

	if (r < 0)
		return r;
	memcpy(b->p + b->len, &h, sizeof(h));
	b->len += sizeof(h);
	if (flen)
		memcpy(b->p + b->len, fixed, flen);
	b->len += flen;
	if (tlen)
		memcpy(b->p + b->len, tail, tlen);
	b->len += tlen;
	return 0;
}

void pw_make_error(struct pw_error *e, int status, unsigned req_type, const char *text)
{
	memset(e, 0, sizeof(*e));
	e->status = status < 0 ? status : -EPROTO;
	e->req_type = (uint16_t)req_type;
	if (text)
		snprintf(e->text, sizeof(e->text), "%s", text);
}
