/* SPDX-License-Identifier: MIT */
/*
 * Validation of everything Redis answers the registry.  Redis is trusted
 * infrastructure, but nothing it says is followed blindly: hiredis builds
 * each reply through bounded object functions (at most REPLY_MAX_OBJECTS
 * objects and REPLY_MAX_BYTES of strings per reply: past that the reader
 * fails and the connection is dropped), and every reply is checked here
 * for type, count, size and syntax before a field of it is used.  Nothing
 * from Redis is ever used for memory access: a registry entry only says
 * which node to ask.  Pure functions over a redisReply; fuzzed
 * (fuzz/fuzz-registry-reply.c).
 */
#ifndef KVS_REG_REPLY_H
#define KVS_REG_REPLY_H

#include <stdint.h>

#include <hiredis/hiredis.h>

#include "cluster/limits.h"

#define REPLY_MAX_OBJECTS (1u << 20)
#define REPLY_MAX_BYTES	  (64u << 20)
#define REPLY_MAX_NODES	  1024u /* candidates one query chunk may answer */
#define REG_TOKEN_MAX	  64u

/* Bounded reply construction: install on a context's reader. */
struct reply_budget {
	uint64_t objects;
	uint64_t bytes;
};
extern redisReplyObjectFunctions reply_bounded_fns;

/* A Redis error text made safe to log: printable ASCII, at most @len-1 bytes. */
void reply_error_text(const redisReply *r, char *buf, size_t len);

/* +OK.  0, -EIO (an error reply), -EPROTO (anything else). */
int reply_ok(const redisReply *r);

/* A script's SHA1: 40 lowercase hex digits into @sha (41 bytes). */
int reply_sha(const redisReply *r, char sha[41]);

/* 0 or 1 (RENEW, RELEASE): *ret.  -EIO, -EPROTO. */
int reply_bool(const redisReply *r, int *ret);

struct acquire_result {
	int granted;
	char token[REG_TOKEN_MAX]; /* ours when granted, the holder's otherwise */
	uint64_t epoch;		   /* granted */
	char displaced[REG_TOKEN_MAX];
	int64_t pttl_ms; /* refused: the holder's remaining lease */
};
/* ACQUIRE.  Tokens are "<epoch>:<16 hex>"; a granted one must carry @nonce. */
int reply_acquire(const redisReply *r, const char *nonce, struct acquire_result *ret);

/* REGISTER: 0 when Redis applied @count keys; -ESTALE fenced; -EIO; -EPROTO. */
int reply_register(const redisReply *r, uint64_t count);

struct query_node {
	char node[REG_NAME_MAX];
	char addr[REG_ADDR_MAX];
	uint64_t epoch;
	uint32_t run;
};
/*
 * SMISMEMBER over @len keys: an array of exactly @len integers, each 0 or
 * 1; *@ret_lead = how many leading ones (the run).  0, -EIO (an error
 * reply), -EPROTO.
 */
int reply_members(const redisReply *r, uint32_t len, uint32_t *ret_lead);

/*
 * QUERY over a chunk of @chunk keys: up to @max candidates into @out,
 * their number in *@ret_n.  Runs in [1, @chunk], names and addresses
 * syntax-checked, no node twice.  -EIO, -EPROTO.
 */
int reply_query(const redisReply *r, uint32_t chunk, struct query_node *out, uint32_t max,
		uint32_t *ret_n);

/* Names as registry_config_check() wants them. */
int reply_name_ok(const char *s, size_t len);

/* ---- Sentinel --------------------------------------------------------- */

/* A master's address as the sentinels give it: a numeric IPv4 or IPv6 host and a port. */
struct sentinel_master {
	char ip[64];
	int port;
	uint64_t config_epoch; /* SENTINEL MASTER only; 0 otherwise */
	int down;	       /* SENTINEL MASTER: flagged s_down or o_down */
};

/*
 * SENTINEL MASTER <name>: a flat array of field names and values, of
 * which ip, port, flags and config-epoch are taken (an unknown name is an
 * error reply: -EIO).  0, -EIO, -EPROTO.
 */
int reply_sentinel_master(const redisReply *r, struct sentinel_master *ret);

/*
 * A +switch-master announcement of a subscription: ["message",
 * "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"]
 * about master @name: the new one into @ret.  0; -ENOENT: another
 * message, or another master's; -EPROTO.
 */
int reply_switch_master(const redisReply *r, const char *name, struct sentinel_master *ret);

/* ROLE: 1 when the server is a master, 0 when it is anything else.  -EIO, -EPROTO. */
int reply_role_master(const redisReply *r, int *ret);

#endif /* KVS_REG_REPLY_H */
