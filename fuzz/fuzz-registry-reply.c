/* SPDX-License-Identifier: MIT */
/*
 * fuzz-registry-reply: what a (broken or hostile) Redis can send the
 * registry, through hiredis' real reader with the registry's bounded
 * object functions, then through every reply validator the registry uses.
 *
 * Input: byte 0 picks the query chunk length the answer is checked
 * against (1..256), the rest is a RESP byte stream, cut into replies by
 * the reader.  Promises: the reader never builds more than the budget
 * allows; a validator either refuses with -EIO/-EPROTO or returns fields
 * that are bounded, NUL-terminated and syntax-checked (names, epochs,
 * runs within the chunk, tokens carrying our nonce, SHA1 hex, the
 * sentinels' master addresses).
 */
#include <errno.h>

#include <hiredis/hiredis.h>

#include "cluster/reply.h"
#include "fuzz.h"

static void check_query(const redisReply *r, uint32_t chunk)
{
	static struct query_node out[REPLY_MAX_NODES];
	uint32_t n = 0;
	int rc = reply_query(r, chunk, out, REPLY_MAX_NODES, &n);

	FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EPROTO, "query: %d", rc);
	if (rc)
		return;
	FUZZ_CHECK(n <= REPLY_MAX_NODES && n * 4 == r->elements, "query: %u nodes", n);
	for (uint32_t i = 0; i < n; i++) {
		FUZZ_CHECK(memchr(out[i].node, 0, sizeof(out[i].node)) &&
				   reply_name_ok(out[i].node, strlen(out[i].node)),
			   "node name");
		FUZZ_CHECK(memchr(out[i].addr, 0, sizeof(out[i].addr)), "addr");
		FUZZ_CHECK(out[i].run >= 1 && out[i].run <= chunk, "run %u of %u", out[i].run,
			   chunk);
		FUZZ_CHECK(out[i].epoch > 0, "epoch 0");
		for (uint32_t j = 0; j < i; j++)
			FUZZ_CHECK(strcmp(out[i].node, out[j].node), "a node twice");
	}
}

static void check_reply(const redisReply *r, uint32_t chunk)
{
	struct acquire_result a;
	char sha[41], text[128];
	int rc, v = -1;

	reply_error_text(r, text, sizeof(text));
	FUZZ_CHECK(memchr(text, 0, sizeof(text)), "error text not terminated");
	for (const char *p = text; *p; p++)
		FUZZ_CHECK(*p >= 0x20 && *p < 0x7f, "unprintable error text");

	rc = reply_ok(r);
	FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EPROTO, "ok: %d", rc);
	rc = reply_sha(r, sha);
	FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EPROTO, "sha: %d", rc);
	if (!rc)
		FUZZ_CHECK(strlen(sha) == 40 && strspn(sha, "0123456789abcdef") == 40, "sha %s",
			   sha);
	rc = reply_bool(r, &v);
	FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EPROTO, "bool: %d", rc);
	if (!rc)
		FUZZ_CHECK(v == 0 || v == 1, "bool %d", v);
	rc = reply_acquire(r, "0123456789abcdef", &a);
	FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EPROTO, "acquire: %d", rc);
	if (!rc) {
		FUZZ_CHECK(memchr(a.token, 0, sizeof(a.token)) &&
				   memchr(a.displaced, 0, sizeof(a.displaced)),
			   "tokens not terminated");
		if (a.granted)
			FUZZ_CHECK(
				a.epoch > 0 && strlen(a.token) > 16 &&
					!strcmp(a.token + strlen(a.token) - 16, "0123456789abcdef"),
				"granted token %s", a.token);
	}
	rc = reply_register(r, chunk);
	FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EPROTO || rc == -ESTALE, "register: %d", rc);
	if (!rc)
		FUZZ_CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == chunk, "register count");
	check_query(r, chunk);
	{
		struct sentinel_master m;

		rc = reply_sentinel_master(r, &m);
		FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EPROTO, "sentinel master: %d", rc);
		if (!rc)
			FUZZ_CHECK(memchr(m.ip, 0, sizeof(m.ip)) && m.ip[0] && m.port > 0 &&
					   m.port < 65536,
				   "sentinel master %s:%d", m.ip, m.port);
		rc = reply_switch_master(r, "mymaster", &m);
		FUZZ_CHECK(rc == 0 || rc == -ENOENT || rc == -EPROTO, "switch-master: %d", rc);
		if (!rc)
			FUZZ_CHECK(memchr(m.ip, 0, sizeof(m.ip)) && m.ip[0] && m.port > 0 &&
					   m.port < 65536,
				   "switch-master %s:%d", m.ip, m.port);
		rc = reply_role_master(r, &v);
		FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EPROTO, "role: %d", rc);
	}
	{
		uint32_t lead = UINT32_MAX;

		rc = reply_members(r, chunk, &lead);
		FUZZ_CHECK(rc == 0 || rc == -EIO || rc == -EPROTO, "members: %d", rc);
		if (!rc)
			FUZZ_CHECK(lead <= chunk && r->type == REDIS_REPLY_ARRAY &&
					   r->elements == chunk,
				   "members: %u leading of %u", lead, chunk);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct reply_budget budget = { 0 };
	redisReader *rd;
	uint32_t chunk;
	void *reply;

	if (size < 1)
		return 0;
	chunk = 1u + data[0];
	rd = redisReaderCreateWithFunctions(&reply_bounded_fns);
	if (!rd)
		abort();
	rd->privdata = &budget;
	if (redisReaderFeed(rd, (const char *)data + 1, size - 1) == REDIS_OK) {
		for (int i = 0; i < 64; i++) {
			reply = NULL;
			if (redisReaderGetReply(rd, &reply) != REDIS_OK || !reply)
				break;
			FUZZ_CHECK(budget.objects <= REPLY_MAX_OBJECTS &&
					   budget.bytes <= REPLY_MAX_BYTES,
				   "budget overrun");
			check_reply(reply, chunk);
			freeReplyObject(reply);
		}
	}
	redisReaderFree(rd);
	return 0;
}
