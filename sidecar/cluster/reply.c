/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/reply.h"

/* ---- bounded construction (hiredis.c's default functions, with a budget) */

static void *obj_new(const redisReadTask *task, int type, size_t bytes)
{
	struct reply_budget *b = task->privdata;
	redisReply *r;

	if (b) {
		/* A task without a parent starts a new reply: a new budget. */
		if (!task->parent) {
			b->objects = 0;
			b->bytes = 0;
		}
		if (++b->objects > REPLY_MAX_OBJECTS || bytes > REPLY_MAX_BYTES ||
		    (b->bytes += bytes) > REPLY_MAX_BYTES)
			return NULL; /* the reader reports "out of memory": we disconnect */
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->type = type;
	return r;
}

static void obj_link(const redisReadTask *task, redisReply *r)
{
	if (task->parent) {
		redisReply *p = task->parent->obj;

		/* hiredis' reader only nests under arrays, at idx < elements. */
		p->element[task->idx] = r;
	}
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
	redisReply *r = obj_new(task, task->type, len);

	if (!r)
		return NULL;
	r->str = malloc(len + 1);
	if (!r->str) {
		free(r);
		return NULL;
	}
	memcpy(r->str, str, len);
	r->str[len] = '\0';
	r->len = len;
	obj_link(task, r);
	return r;
}

static void *create_array(const redisReadTask *task, int elements)
{
	redisReply *r;

	if (elements > 0 && (unsigned)elements > REPLY_MAX_OBJECTS)
		return NULL;
	r = obj_new(task, REDIS_REPLY_ARRAY, elements > 0 ? (size_t)elements * sizeof(void *) : 0);
	if (!r)
		return NULL;
	if (elements > 0) {
		r->element = calloc((size_t)elements, sizeof(*r->element));
		if (!r->element) {
			free(r);
			return NULL;
		}
	}
	r->elements = elements > 0 ? (size_t)elements : 0;
	obj_link(task, r);
	return r;
}

static void *create_integer(const redisReadTask *task, long long v)
{
	redisReply *r = obj_new(task, REDIS_REPLY_INTEGER, 0);

	if (!r)
		return NULL;
	r->integer = v;
	obj_link(task, r);
	return r;
}

static void *create_nil(const redisReadTask *task)
{
	redisReply *r = obj_new(task, REDIS_REPLY_NIL, 0);

	if (!r)
		return NULL;
	obj_link(task, r);
	return r;
}

redisReplyObjectFunctions reply_bounded_fns = {
	.createString = create_string,
	.createArray = create_array,
	.createInteger = create_integer,
	.createNil = create_nil,
	.freeObject = freeReplyObject,
};

/* ---- validation -------------------------------------------------------- */

void reply_error_text(const redisReply *r, char *buf, size_t len)
{
	size_t n = 0;

	if (!len)
		return;
	if (r && (r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS) && r->str) {
		for (size_t i = 0; i < r->len && n + 1 < len; i++)
			buf[n++] = (r->str[i] >= 0x20 && r->str[i] < 0x7f) ? r->str[i] : '?';
	} else {
		snprintf(buf, len, "%s", r ? "unexpected reply" : "no reply");
		return;
	}
	buf[n] = '\0';
}

static int not_error(const redisReply *r)
{
	if (!r)
		return -EPROTO;
	return r->type == REDIS_REPLY_ERROR ? -EIO : 0;
}

int reply_ok(const redisReply *r)
{
	int e = not_error(r);

	if (e)
		return e;
	return r->type == REDIS_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0
		       ? 0
		       : -EPROTO;
}

int reply_sha(const redisReply *r, char sha[41])
{
	int e = not_error(r);

	if (e)
		return e;
	if (r->type != REDIS_REPLY_STRING || r->len != 40)
		return -EPROTO;
	for (size_t i = 0; i < 40; i++)
		if (!strchr("0123456789abcdef", r->str[i]) || !r->str[i])
			return -EPROTO;
	memcpy(sha, r->str, 40);
	sha[40] = '\0';
	return 0;
}

int reply_bool(const redisReply *r, int *ret)
{
	int e = not_error(r);

	if (e)
		return e;
	if (r->type != REDIS_REPLY_INTEGER || (r->integer != 0 && r->integer != 1))
		return -EPROTO;
	*ret = (int)r->integer;
	return 0;
}

/* A decimal u64 without sign or leading zero, > 0. */
static int parse_epoch(const char *s, size_t len, uint64_t *ret)
{
	uint64_t v = 0;

	if (len == 0 || len > 20 || s[0] == '0')
		return -EPROTO;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EPROTO;
		if (v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			return -EPROTO;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*ret = v;
	return 0;
}

/* "<epoch>:<16 lowercase hex>" */
static int token_ok(const redisReply *r, uint64_t *ret_epoch)
{
	const char *colon;
	uint64_t e;

	if (r->type != REDIS_REPLY_STRING || r->len >= REG_TOKEN_MAX || r->len < 18)
		return -EPROTO;
	colon = memchr(r->str, ':', r->len);
	if (!colon || (size_t)(r->str + r->len - colon - 1) != 16)
		return -EPROTO;
	if (parse_epoch(r->str, (size_t)(colon - r->str), &e) < 0)
		return -EPROTO;
	for (const char *p = colon + 1; p < r->str + r->len; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return -EPROTO;
	if (ret_epoch)
		*ret_epoch = e;
	return 0;
}

int reply_acquire(const redisReply *r, const char *nonce, struct acquire_result *ret)
{
	struct acquire_result a = { 0 };
	uint64_t te;
	int e = not_error(r);

	if (e)
		return e;
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER)
		return -EPROTO;
	if (r->element[0]->integer == 1) {
		const redisReply *tok = r->element[1], *ep = r->element[2], *old;

		if (r->elements != 4 || token_ok(tok, &te) < 0 || ep->type != REDIS_REPLY_INTEGER ||
		    ep->integer <= 0 || (uint64_t)ep->integer != te)
			return -EPROTO;
		if (!nonce || strlen(nonce) != 16 || memcmp(tok->str + tok->len - 16, nonce, 16))
			return -EPROTO;
		old = r->element[3];
		if (old->type != REDIS_REPLY_STRING || (old->len && token_ok(old, NULL) < 0))
			return -EPROTO;
		a.granted = 1;
		memcpy(a.token, tok->str, tok->len);
		a.epoch = te;
		memcpy(a.displaced, old->str, old->len);
	} else if (r->element[0]->integer == 0) {
		const redisReply *tok = r->element[1], *ttl = r->element[2];

		if (r->elements != 3 || token_ok(tok, NULL) < 0 || ttl->type != REDIS_REPLY_INTEGER)
			return -EPROTO;
		memcpy(a.token, tok->str, tok->len);
		a.pttl_ms = ttl->integer;
	} else {
		return -EPROTO;
	}
	*ret = a;
	return 0;
}

int reply_register(const redisReply *r, uint64_t count)
{
	if (!r)
		return -EPROTO;
	if (r->type == REDIS_REPLY_ERROR)
		return r->len >= 6 && memcmp(r->str, "FENCED", 6) == 0 ? -ESTALE : -EIO;
	if (r->type != REDIS_REPLY_INTEGER || r->integer < 0 || (uint64_t)r->integer != count)
		return -EPROTO;
	return 0;
}

int reply_members(const redisReply *r, uint32_t len, uint32_t *ret_lead)
{
	uint32_t lead = 0;
	int e = not_error(r);

	if (e)
		return e;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != len)
		return -EPROTO;
	for (uint32_t i = 0; i < len; i++) {
		const redisReply *m = r->element[i];

		if (m->type != REDIS_REPLY_INTEGER || (m->integer != 0 && m->integer != 1))
			return -EPROTO;
		if (lead == i && m->integer == 1)
			lead++;
	}
	*ret_lead = lead;
	return 0;
}

int reply_name_ok(const char *s, size_t len)
{
	if (len == 0 || len >= REG_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

static int addr_ok(const redisReply *r)
{
	if (r->type != REDIS_REPLY_STRING || r->len >= REG_ADDR_MAX)
		return 0;
	for (size_t i = 0; i < r->len; i++)
		if (r->str[i] <= 0x20 || r->str[i] >= 0x7f)
			return 0;
	return 1;
}

int reply_query(const redisReply *r, uint32_t chunk, struct query_node *out, uint32_t max,
		uint32_t *ret_n)
{
	uint32_t n;
	int e = not_error(r);

	if (e)
		return e;
	if (r->type != REDIS_REPLY_ARRAY || r->elements % 4 || r->elements / 4 > REPLY_MAX_NODES ||
	    r->elements / 4 > max)
		return -EPROTO;
	n = (uint32_t)(r->elements / 4);
	for (uint32_t i = 0; i < n; i++) {
		const redisReply *node = r->element[4 * i], *run = r->element[4 * i + 1],
				 *ep = r->element[4 * i + 2], *addr = r->element[4 * i + 3];
		struct query_node *q = &out[i];

		if (node->type != REDIS_REPLY_STRING || !reply_name_ok(node->str, node->len) ||
		    run->type != REDIS_REPLY_INTEGER || run->integer < 1 ||
		    (unsigned long long)run->integer > chunk || ep->type != REDIS_REPLY_STRING ||
		    parse_epoch(ep->str, ep->len, &q->epoch) < 0 || !addr_ok(addr))
			return -EPROTO;
		memcpy(q->node, node->str, node->len);
		q->node[node->len] = '\0';
		memcpy(q->addr, addr->str, addr->len);
		q->addr[addr->len] = '\0';
		q->run = (uint32_t)run->integer;
		/* A field of a hash is there once: a node twice is not Redis talking. */
		for (uint32_t j = 0; j < i; j++)
			if (strcmp(out[j].node, q->node) == 0)
				return -EPROTO;
	}
	*ret_n = n;
	return 0;
}

/* ---- Sentinel ------------------------------------------------------------ */

/* A numeric host: digits, hex, '.' and ':' (IPv6), below the buffer. */
/*
 * A numeric address, which hiredis connects to without a name lookup (one
 * would block the control thread): "cafe" or "::::" are not.
 */
static int ip_ok(const char *s, size_t len, size_t max)
{
	char buf[INET6_ADDRSTRLEN];
	struct in6_addr a6;

	if (len == 0 || len >= max || len >= sizeof(buf) || memchr(s, '\0', len))
		return 0;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return inet_pton(AF_INET, buf, &a6) == 1 || inet_pton(AF_INET6, buf, &a6) == 1;
}

static int port_of(const char *s, size_t len, int *ret)
{
	uint64_t v;

	if (parse_epoch(s, len, &v) < 0 || v > 65535)
		return -EPROTO;
	*ret = (int)v;
	return 0;
}

static int is_str(const redisReply *r)
{
	return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

int reply_sentinel_master(const redisReply *r, struct sentinel_master *ret)
{
	struct sentinel_master m = { .port = 0 };
	int have_ip = 0, e = not_error(r);

	if (e)
		return e;
	if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 || r->elements > 256)
		return -EPROTO;
	for (size_t i = 0; i < r->elements; i += 2) {
		const redisReply *k = r->element[i], *v = r->element[i + 1];

		if (!is_str(k) || !is_str(v))
			return -EPROTO;
		if (k->len == 2 && !memcmp(k->str, "ip", 2)) {
			if (!ip_ok(v->str, v->len, sizeof(m.ip)))
				return -EPROTO;
			memcpy(m.ip, v->str, v->len);
			m.ip[v->len] = '\0';
			have_ip = 1;
		} else if (k->len == 4 && !memcmp(k->str, "port", 4)) {
			if (port_of(v->str, v->len, &m.port) < 0)
				return -EPROTO;
		} else if (k->len == 12 && !memcmp(k->str, "config-epoch", 12)) {
			/* 0 before the first failover: not an epoch of ours, any decimal. */
			if (!(v->len == 1 && v->str[0] == '0') &&
			    parse_epoch(v->str, v->len, &m.config_epoch) < 0)
				return -EPROTO;
		} else if (k->len == 5 && !memcmp(k->str, "flags", 5)) {
			m.down = memmem(v->str, v->len, "s_down", 6) ||
				 memmem(v->str, v->len, "o_down", 6);
		}
	}
	if (!have_ip || !m.port)
		return -EPROTO;
	*ret = m;
	return 0;
}

int reply_switch_master(const redisReply *r, const char *name, struct sentinel_master *ret)
{
	struct sentinel_master m = { .port = 0 };
	const char *f[5], *p, *end;
	size_t fl[5], nl = strlen(name);
	const redisReply *t;
	unsigned n = 0;

	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 || !is_str(r->element[0]) ||
	    !is_str(r->element[1]) || !is_str(r->element[2]))
		return -EPROTO;
	if (r->element[0]->len != 7 || memcmp(r->element[0]->str, "message", 7) ||
	    r->element[1]->len != 14 || memcmp(r->element[1]->str, "+switch-master", 14))
		return -ENOENT;
	t = r->element[2];
	for (p = t->str, end = t->str + t->len; p < end && n < 5;) {
		const char *sp = memchr(p, ' ', (size_t)(end - p));
		size_t l = sp ? (size_t)(sp - p) : (size_t)(end - p);

		f[n] = p;
		fl[n++] = l;
		p += l + (sp ? 1 : 0);
	}
	if (n != 5 || p != end)
		return -EPROTO;
	if (fl[0] != nl || memcmp(f[0], name, nl))
		return -ENOENT;
	if (!ip_ok(f[3], fl[3], sizeof(m.ip)) || port_of(f[4], fl[4], &m.port) < 0)
		return -EPROTO;
	memcpy(m.ip, f[3], fl[3]);
	m.ip[fl[3]] = '\0';
	*ret = m;
	return 0;
}

int reply_role_master(const redisReply *r, int *ret)
{
	int e = not_error(r);

	if (e)
		return e;
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || !is_str(r->element[0]))
		return -EPROTO;
	*ret = r->element[0]->len == 6 && !memcmp(r->element[0]->str, "master", 6);
	return 0;
}
