/* SPDX-License-Identifier: MIT */
/*
 * The peer protocol on the wire (TCP), and its pure parsers.
 *
 * Every message is a 16-byte header (struct pw_hdr) and hdr.len bytes of
 * payload, bounded per type (pw_payload_bounds()).  The one exception is
 * PW_DATA: its 32-byte payload announces a shard, and that shard's raw
 * bytes follow it outside any message, exactly data.len of them, which
 * the receiver checks against what the lock promised before it reads
 * them.  Requests carry a seq that the reply echoes.
 *
 *   client                                  server
 *   HELLO (nonce_c, cluster, node) -->
 *                                   <--     HELLO_REPLY (nonce_s, proof_s)
 *   AUTH (proof_c)                  -->
 *                                   <--     AUTH_OK (UCX address, regions) | ERROR
 *   QUERY (digest, keys)            -->
 *                                   <--     QUERY_REPLY (lock, per shard: len, generation)
 *   FETCH (lock, first, count)      -->     (TCP transport)
 *                                   <--     DATA, bytes, SHARD_END(generation) ... FETCH_END
 *   RENEW / RELEASE (lock)          -->
 *                                   <--     RENEW_REPLY / RELEASE_REPLY (generations)
 *   HEALTH                          -->
 *                                   <--     HEALTH_REPLY
 *
 * proof_s = HMAC-SHA256(secret, "kvspeer-1 server" || HELLO || HELLO_REPLY
 * with proof zeroed), proof_c = HMAC-SHA256(secret, "kvspeer-1 client" ||
 * HELLO || HELLO_REPLY): both nonces and both names are bound, the labels
 * keep one side's proof from being replayed as the other's (auth.c).
 *
 * Revision: HELLO's first 4 bytes (major, minor) never move; a different
 * major is refused before anything else is read; a minor only appends to
 * HELLO and HELLO_REPLY.  Integers are little-endian; the structs below
 * are the bytes (naturally aligned, no padding: asserted), so the hosts
 * kvstash supports (x86-64, aarch64) copy them as they are.  Strings are
 * NUL-padded fixed arrays that must hold a NUL; reserved fields are zero.
 * Status fields carry -errno (Linux numbering) or 0.
 *
 * The parsers copy nothing they do not validate and follow no length they
 * did not bound: they take a private copy of the payload (the caller's
 * receive buffer) and fill host structures.  No I/O, no state: the
 * fuzzer (fuzz/fuzz-peer-wire.c) drives exactly this code.
 */
#ifndef KVS_PEER_PWIRE_H
#define KVS_PEER_PWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvstash/peer.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "the peer wire structs are little-endian bytes: convert in pwire.c first");

#define PW_MAGIC       0x5053564bu /* "KVSP" as little-endian bytes */
#define PW_MAJOR       1u
#define PW_MINOR       0u
#define PW_NONCE_SIZE  32u
#define PW_MAC_SIZE    32u
#define PW_TEXT_MAX    88u
#define PW_MAX_REGIONS 64u
#define PW_MAX_TADDR   4096u /* a UCX worker address */
#define PW_MAX_RKEY    1024u /* one packed UCX memory key */
#define PW_HELLO_MAX   1024u /* HELLO and HELLO_REPLY of a later minor */

/* Message types (pw_hdr.type). */
enum pw_type {
	PW_HELLO = 1,
	PW_HELLO_REPLY = 2,
	PW_AUTH = 3,
	PW_AUTH_OK = 4,
	PW_QUERY = 5,
	PW_QUERY_REPLY = 6,
	PW_FETCH = 7,
	PW_DATA = 8,
	PW_SHARD_END = 9,
	PW_FETCH_END = 10,
	PW_RENEW = 11,
	PW_RENEW_REPLY = 12,
	PW_RELEASE = 13,
	PW_RELEASE_REPLY = 14,
	PW_HEALTH = 15,
	PW_HEALTH_REPLY = 16,
	PW_ERROR = 17,
	PW__TYPE_MAX
};

/* Transports, as a bitmask (HELLO: what the client speaks; reply: the one chosen). */
#define PW_TRANSPORT_BIT(t) (1u << (t))
#define PW_TRANSPORTS_KNOWN \
	(PW_TRANSPORT_BIT(KVSPEER_TRANSPORT_TCP) | PW_TRANSPORT_BIT(KVSPEER_TRANSPORT_UCX))

/* RELEASE flags */
#define PW_RELEASE_VERIFY 1u /* answer with every shard's current generation */

struct pw_hdr {
	uint32_t magic;
	uint16_t type;
	uint16_t flags; /* zero */
	uint32_t len;	/* payload bytes after this header */
	uint32_t seq;	/* requester's; echoed in the reply */
};

struct pw_hello {
	uint16_t major; /* frozen position */
	uint16_t minor;
	uint32_t transports;
	uint64_t epoch;
	uint8_t nonce[PW_NONCE_SIZE];
	char cluster[KVSPEER_NAME_MAX];
	char node[KVSPEER_NAME_MAX];
	uint8_t resv[16];
};

struct pw_hello_reply {
	uint16_t major; /* frozen position */
	uint16_t minor;
	uint32_t transport; /* one bit of the client's */
	uint64_t epoch;
	uint8_t nonce[PW_NONCE_SIZE];
	char cluster[KVSPEER_NAME_MAX];
	char node[KVSPEER_NAME_MAX];
	uint32_t lock_ttl_ms;
	uint32_t max_keys;
	uint32_t max_locks;
	uint32_t resv0;
	uint8_t proof[PW_MAC_SIZE];
	uint8_t resv[32];
};

struct pw_auth {
	uint8_t proof[PW_MAC_SIZE];
	uint8_t resv[32];
};

/* Followed by taddr_len bytes of UCX worker address, then nr_regions x (pw_region + rkey). */
struct pw_auth_ok {
	uint32_t nr_regions;
	uint32_t taddr_len;
	uint32_t regions_version;
	uint32_t resv;
};

struct pw_region {
	uint64_t base;
	uint64_t len;
	uint32_t rkey_len; /* the packed key's bytes follow */
	uint32_t resv;
};

/* Followed by nr_keys x KVSPEER_KEY_SIZE bytes. */
struct pw_query {
	uint8_t digest[KVSPEER_DIGEST_SIZE];
	uint32_t nr_keys;
	uint32_t nr_shards;
	uint32_t ttl_ms; /* wanted; the server caps it */
	uint32_t flags;	 /* zero */
};

/* Followed by nr_blocks x nr_shards entries, block-major. */
struct pw_query_reply {
	int32_t status;
	uint32_t nr_blocks; /* the locked prefix; 0: nothing, no lock */
	uint32_t nr_shards;
	uint32_t ttl_ms;
	uint64_t lock_id;
	uint32_t regions_version; /* UCX: must be the AUTH_OK's */
	uint32_t resv;
};

struct pw_entry {
	uint64_t len;
	uint64_t generation;
	uint64_t addr;	 /* UCX: remote address inside region; TCP: zero */
	uint32_t region; /* UCX: index into AUTH_OK's regions; TCP: zero */
	uint32_t resv;
};

struct pw_fetch {
	uint64_t lock_id;
	uint32_t first; /* block index in the lock */
	uint32_t count;
	uint8_t resv[16];
};

struct pw_data {
	uint64_t lock_id;
	uint32_t block;
	uint32_t shard;
	uint64_t len; /* raw bytes that follow */
	uint64_t resv;
};

struct pw_shard_end {
	uint64_t lock_id;
	uint32_t block;
	uint32_t shard;
	uint64_t generation; /* read after the shard's last byte was sent */
	uint64_t resv;
};

struct pw_fetch_end {
	int32_t status;
	uint32_t sent; /* blocks, from first */
	uint64_t lock_id;
};

struct pw_renew {
	uint64_t lock_id;
	uint32_t ttl_ms;
	uint32_t resv;
};

struct pw_renew_reply {
	int32_t status;
	uint32_t ttl_ms;
	uint64_t lock_id;
};

struct pw_release {
	uint64_t lock_id;
	uint32_t flags; /* PW_RELEASE_* */
	uint32_t resv;
};

/* Followed by nr x u64 generations (VERIFY), block-major. */
struct pw_release_reply {
	int32_t status;
	uint32_t nr;
	uint64_t lock_id;
};

struct pw_health_reply {
	int32_t status;
	uint32_t locks;
	uint64_t epoch;
	uint64_t uptime_ms;
	uint32_t conns;
	uint32_t transport;
	char node[KVSPEER_NAME_MAX];
};

struct pw_error {
	int32_t status;
	uint16_t req_type;
	uint16_t resv;
	char text[PW_TEXT_MAX];
};

_Static_assert(sizeof(struct pw_hdr) == 16, "pw_hdr");
_Static_assert(offsetof(struct pw_hdr, len) == 8 && offsetof(struct pw_hdr, seq) == 12, "pw_hdr");
_Static_assert(sizeof(struct pw_hello) == 192, "pw_hello");
_Static_assert(offsetof(struct pw_hello, minor) == 2 && offsetof(struct pw_hello, nonce) == 16 &&
		       offsetof(struct pw_hello, cluster) == 48 &&
		       offsetof(struct pw_hello, node) == 112 &&
		       offsetof(struct pw_hello, resv) == 176,
	       "pw_hello");
_Static_assert(sizeof(struct pw_hello_reply) == 256, "pw_hello_reply");
_Static_assert(offsetof(struct pw_hello_reply, lock_ttl_ms) == 176 &&
		       offsetof(struct pw_hello_reply, proof) == 192 &&
		       offsetof(struct pw_hello_reply, resv) == 224,
	       "pw_hello_reply");
_Static_assert(sizeof(struct pw_auth) == 64, "pw_auth");
_Static_assert(sizeof(struct pw_auth_ok) == 16, "pw_auth_ok");
_Static_assert(sizeof(struct pw_region) == 24, "pw_region");
_Static_assert(sizeof(struct pw_query) == 48 && offsetof(struct pw_query, nr_keys) == 32,
	       "pw_query");
_Static_assert(sizeof(struct pw_query_reply) == 32 &&
		       offsetof(struct pw_query_reply, lock_id) == 16,
	       "pw_query_reply");
_Static_assert(sizeof(struct pw_entry) == 32 && offsetof(struct pw_entry, region) == 24,
	       "pw_entry");
_Static_assert(sizeof(struct pw_fetch) == 32, "pw_fetch");
_Static_assert(sizeof(struct pw_data) == 32 && offsetof(struct pw_data, len) == 16, "pw_data");
_Static_assert(sizeof(struct pw_shard_end) == 32 && offsetof(struct pw_shard_end, generation) == 16,
	       "pw_shard_end");
_Static_assert(sizeof(struct pw_fetch_end) == 16, "pw_fetch_end");
_Static_assert(sizeof(struct pw_renew) == 16, "pw_renew");
_Static_assert(sizeof(struct pw_renew_reply) == 16, "pw_renew_reply");
_Static_assert(sizeof(struct pw_release) == 16, "pw_release");
_Static_assert(sizeof(struct pw_release_reply) == 16, "pw_release_reply");
_Static_assert(sizeof(struct pw_health_reply) == 96 && offsetof(struct pw_health_reply, node) == 32,
	       "pw_health_reply");
_Static_assert(sizeof(struct pw_error) == 96 && offsetof(struct pw_error, text) == 8, "pw_error");

/* The largest payload any message may have: a QUERY_REPLY of KVSPEER_MAX_ENTRIES. */
#define PW_MAX_PAYLOAD \
	((uint32_t)(sizeof(struct pw_query_reply) + KVSPEER_MAX_ENTRIES * sizeof(struct pw_entry)))

/* ---- Parsed forms (host structures) ---------------------------------- */

struct pw_auth_ok_info {
	uint32_t nr_regions;
	uint32_t regions_version;
	uint32_t taddr_len;
	const uint8_t *taddr; /* points into the caller's payload */
	struct {
		uint64_t base;
		uint64_t len;
		uint32_t rkey_len;
		const uint8_t *rkey; /* into the payload */
	} regions[PW_MAX_REGIONS];
};

/* Bounds the caller of pw_parse_query_reply() knows from its own request. */
struct pw_reply_limits {
	uint32_t nr_keys;
	uint32_t nr_shards;
	uint64_t max_shard_bytes;
};

/*
 * The header.  Checks magic, flags, the type and the payload length
 * against the type's bounds.  0, -EBADMSG (not ours / out of bounds) or
 * -EPROTO (an unknown type).
 */
int pw_parse_hdr(const void *buf, struct pw_hdr *ret, char *why, size_t wl);

/* [min, max] payload bytes of @type, for the receive loop's bounds. */
void pw_payload_bounds(unsigned type, uint32_t *ret_min, uint32_t *ret_max);

/* The payload parsers: @p is the payload (@len bytes) of a message of that type. */
int pw_parse_hello(const void *p, size_t len, struct pw_hello *ret, char *why, size_t wl);
int pw_parse_hello_reply(const void *p, size_t len, uint32_t client_transports,
			 struct pw_hello_reply *ret, char *why, size_t wl);
int pw_parse_auth(const void *p, size_t len, struct pw_auth *ret, char *why, size_t wl);
int pw_parse_auth_ok(const void *p, size_t len, struct pw_auth_ok_info *ret, char *why, size_t wl);
/* *@ret_keys points into @p (nr_keys x KVSPEER_KEY_SIZE). */
int pw_parse_query(const void *p, size_t len, uint32_t max_keys, struct pw_query *ret,
		   const uint8_t **ret_keys, char *why, size_t wl);
/* *@ret_entries points into @p; entries are validated (sizes, reserved). */
int pw_parse_query_reply(const void *p, size_t len, const struct pw_reply_limits *lim,
			 struct pw_query_reply *ret, const uint8_t **ret_entries, char *why,
			 size_t wl);
/* Entry @i of a parsed QUERY_REPLY. */
void pw_entry_get(const uint8_t *entries, uint32_t i, struct pw_entry *ret);
int pw_parse_fetch(const void *p, size_t len, struct pw_fetch *ret, char *why, size_t wl);
int pw_parse_data(const void *p, size_t len, struct pw_data *ret, char *why, size_t wl);
int pw_parse_shard_end(const void *p, size_t len, struct pw_shard_end *ret, char *why, size_t wl);
int pw_parse_fetch_end(const void *p, size_t len, struct pw_fetch_end *ret, char *why, size_t wl);
int pw_parse_renew(const void *p, size_t len, struct pw_renew *ret, char *why, size_t wl);
int pw_parse_renew_reply(const void *p, size_t len, struct pw_renew_reply *ret, char *why,
			 size_t wl);
int pw_parse_release(const void *p, size_t len, struct pw_release *ret, char *why, size_t wl);
/* *@ret_gens points into @p (nr x u64). */
int pw_parse_release_reply(const void *p, size_t len, uint32_t max_nr, struct pw_release_reply *ret,
			   const uint8_t **ret_gens, char *why, size_t wl);
int pw_parse_health_reply(const void *p, size_t len, struct pw_health_reply *ret, char *why,
			  size_t wl);
int pw_parse_error(const void *p, size_t len, struct pw_error *ret, char *why, size_t wl);

/* Names: 1 .. KVSPEER_NAME_MAX-1 characters of [A-Za-z0-9._:/@+=-]. */
int pw_check_name(const char *s, size_t size);
/* A status a peer may send: 0 or -1 .. -4095. */
bool pw_status_ok(int32_t status);

/* ---- Building messages ----------------------------------------------- */

/* A growable output buffer. */
struct pw_buf {
	uint8_t *p;
	size_t len;
	size_t cap;
};

int pw_buf_reserve(struct pw_buf *b, size_t more);
void pw_buf_free(struct pw_buf *b);

/*
 * Append a message: header, @fixed (@flen bytes), then @tail (@tlen).
 * The header's len is flen + tlen, except for PW_DATA (the raw bytes are
 * the caller's).  0 or -ENOMEM.
 */
int pw_put(struct pw_buf *b, unsigned type, uint32_t seq, const void *fixed, size_t flen,
	   const void *tail, size_t tlen);

/* Fill an ERROR payload. */
void pw_make_error(struct pw_error *e, int status, unsigned req_type, const char *text);

#endif /* KVS_PEER_PWIRE_H */
