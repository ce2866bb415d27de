/* SPDX-License-Identifier: MIT */
/*
 * The registry's sentinels (sentinel.h): a persistent connection to each
 * for looks, one subscription to +switch-master, on the registry's epoll
 * fd and timer.  The control thread's.  hiredis calls back into us from
 * inside aconn_event() and aconn_close() only; those callbacks record, and
 * settle() acts on what they recorded once hiredis returned.
 */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "common/loghook.h"
#include "cluster/aconn.h"
#include "cluster/regaddr.h"
#include "cluster/limits.h"
#include "cluster/reply.h"
#include "cluster/sentinel.h"

#define MS	     1000000ull
#define SUB_RETRY_MS 500u /* a lost subscription is made again on the next sentinel after */

struct sconn {
	struct sentinel *s;
	char addr[REG_ADDR_MAX]; /* as configured, for logs */
	char ip[64];
	int port;
	struct aconn qc; /* its connection for looks */
	struct reply_budget budget;
	uint64_t asked; /* the look its latest question belongs to; 0: none */
	/*
	 * Questions sent and not answered: replies come in order, so only the
	 * one that brings this to 0 answers the latest (an older look's, from
	 * a hung sentinel, would name the master from before a failover).
	 */
	uint32_t pending;
	bool answered, ok, failing;
	struct sentinel_master m;
};

struct sentinel {
	struct sentinel_ops ops;
	char name[REG_NAME_MAX];
	char user[REG_NAME_MAX];
	char *password;
	uint32_t connect_ms, command_ms, check_ms;
	int epfd;
	uint32_t tag_base; /* the subscription's; sentinel i's is tag_base + 1 + i */
	unsigned n;
	struct sconn sc[SENTINEL_MAX];

	/* the look running (0: none), its deadline; when the next one starts */
	uint64_t look, looks, look_deadline, next_look;
	uint32_t up; /* sentinels that answered the last look */
	bool none_logged;

	/* the subscription */
	struct aconn sub;
	struct reply_budget sub_budget;
	unsigned sub_i;
	bool sub_live, sub_lost_logged, closing;
	uint64_t sub_retry_at;

	/* a master to report once hiredis returned (settle()) */
	bool report, report_announced;
	struct sentinel_master rep;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define slog(s, level, err, ...) LOG_HOOK((s)->ops.log, (s)->ops.arg, (level), (err), __VA_ARGS__)

/* ---- connections ---------------------------------------------------------- */

static void auth(struct sentinel *s, redisAsyncContext *ac)
{
	/* Its reply is not waited for: a refused AUTH fails the command after it. */
	if (!s->password)
		return;
	if (s->user[0])
		redisAsyncCommand(ac, NULL, NULL, "AUTH %s %s", s->user, s->password);
	else
		redisAsyncCommand(ac, NULL, NULL, "AUTH %s", s->password);
}

static void q_connected(const redisAsyncContext *ac, int status)
{
	(void)ac;
	(void)status; /* a failure fails the question: q_reply() gets NULL */
}

static void q_disconnected(const redisAsyncContext *ac, int status)
{
	(void)ac;
	(void)status;
}

static int q_open(struct sconn *c)
{
	char why[128];

	if (c->qc.ac)
		return 0;
	if (aconn_open(&c->qc, c->ip, c->port, &c->budget, c, q_connected, q_disconnected, why,
		       sizeof(why)) < 0)
		return -ECONNREFUSED;
	auth(c->s, c->qc.ac);
	return 0;
}

/* ---- looks ------------------------------------------------------------------ */

/* A sentinel's answer (or NULL: its connection went), inside hiredis. */
static void q_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct sconn *c = priv;

	(void)ac;
	if (c->pending)
		c->pending--;
	if (c->pending || c->asked != c->s->look || c->answered)
		return;
	c->answered = true;
	c->ok = reply && reply_sentinel_master(reply, &c->m) == 0;
	if (!c->ok && reply) {
		char e[128];

		reply_error_text(reply, e, sizeof(e));
		if (!c->failing)
			slog(c->s, LOG_WARNING, EIO,
			     "registry: sentinel %s does not name a master of %s: %s", c->addr,
			     c->s->name, e);
		c->failing = true;
	}
}

static void sub_close(struct sentinel *s, const char *why);

static void look_start(struct sentinel *s, uint64_t now)
{
	s->look = ++s->looks;
	s->look_deadline = now + (uint64_t)(s->connect_ms + s->command_ms) * MS;
	for (unsigned i = 0; i < s->n; i++) {
		struct sconn *c = &s->sc[i];

		c->answered = c->ok = false;
		c->asked = s->look;
		if (q_open(c) < 0 || redisAsyncCommand(c->qc.ac, q_reply, c, "SENTINEL MASTER %s",
						       s->name) != REDIS_OK)
			c->answered = true;
		else
			c->pending++;
	}
}

/*
 * Every sentinel answered, or the deadline passed: the master is the one
 * named with the highest config epoch (a failover raises it, so a
 * sentinel that missed one names an older master with an older epoch).
 */
static void look_finish(struct sentinel *s, uint64_t now)
{
	const struct sentinel_master *best = NULL;
	uint32_t up = 0;

	for (unsigned i = 0; i < s->n; i++) {
		struct sconn *c = &s->sc[i];

		if (!c->answered && c->qc.ac) {
			/* Hung (stopped, partitioned): made again at the next look. */
			c->asked = 0;
			aconn_close(&c->qc);
		}
		if (!c->ok) {
			if (!c->failing)
				slog(s, LOG_WARNING, ETIMEDOUT,
				     "registry: sentinel %s does not answer", c->addr);
			c->failing = true;
			continue;
		}
		if (c->failing)
			slog(s, LOG_NOTICE, 0, "registry: sentinel %s answers again", c->addr);
		c->failing = false;
		up++;
		if (!best || c->m.config_epoch > best->config_epoch)
			best = &c->m;
	}
	s->look = 0;
	s->up = up;
	s->next_look = now + (uint64_t)s->check_ms * MS;
	if (!best) {
		if (!s->none_logged)
			slog(s, LOG_ERR, EHOSTUNREACH,
			     "registry: no sentinel names a master of %s (%u asked)", s->name,
			     s->n);
		s->none_logged = true;
		return;
	}
	s->none_logged = false;
	s->rep = *best;
	s->report = true;
	s->report_announced = false;
	/* The subscribed sentinel failed the look: subscribe on the next. */
	if (s->sub.ac && !s->sc[s->sub_i].ok)
		sub_close(s, "its sentinel does not answer");
}

/* ---- the subscription --------------------------------------------------------- */

static void sub_lost(struct sentinel *s, const char *why)
{
	if (s->closing)
		return;
	if (s->sub_live || !s->sub_lost_logged)
		slog(s, LOG_WARNING, ECONNRESET,
		     "registry: subscription to sentinel %s lost: %s; on %s next",
		     s->sc[s->sub_i].addr, why, s->sc[(s->sub_i + 1) % s->n].addr);
	s->sub_lost_logged = true;
	s->sub_live = false;
	s->sub_i = (s->sub_i + 1) % s->n;
	s->sub_retry_at = now_ns() + SUB_RETRY_MS * MS;
}

/*
 * Ours to close: hiredis says so (sub_disconnected()) only of a connection
 * that was up, so one still connecting is told here.
 */
static void sub_close(struct sentinel *s, const char *why)
{
	bool up = s->sub.ac && (s->sub.ac->c.flags & REDIS_CONNECTED);

	aconn_close(&s->sub);
	if (!up)
		sub_lost(s, why);
}

static void sub_connected(const redisAsyncContext *ac, int status)
{
	struct sentinel *s = ac->data;

	if (status != REDIS_OK)
		sub_lost(s, ac->errstr && ac->errstr[0] ? ac->errstr : "cannot connect");
}

static void sub_disconnected(const redisAsyncContext *ac, int status)
{
	struct sentinel *s = ac->data;

	(void)status;
	sub_lost(s, ac->errstr && ac->errstr[0] ? ac->errstr : "closed");
}

/* Every message of the subscription, inside hiredis (NULL: it went). */
static void sub_message(redisAsyncContext *ac, void *reply, void *priv)
{
	struct sentinel *s = priv;
	const redisReply *r = reply;
	struct sentinel_master m;

	(void)ac;
	if (!r)
		return;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
	    r->element[0]->type == REDIS_REPLY_STRING && !strcmp(r->element[0]->str, "subscribe")) {
		if (s->sub_lost_logged)
			slog(s, LOG_NOTICE, 0, "registry: following failovers through sentinel %s",
			     s->sc[s->sub_i].addr);
		s->sub_live = true;
		s->sub_lost_logged = false;
		return;
	}
	if (reply_switch_master(r, s->name, &m) == 0) {
		s->rep = m;
		s->report = true;
		s->report_announced = true;
		/*
		 * A look still running asked before the failover: its answers
		 * would name the old master and switch us back.  Dropped
		 * (q_reply() ignores them); the next one confirms.
		 */
		s->look = 0;
		s->next_look = now_ns() + (uint64_t)s->check_ms * MS;
	}
}

static void sub_open(struct sentinel *s)
{
	struct sconn *c = &s->sc[s->sub_i];
	char why[128];

	if (aconn_open(&s->sub, c->ip, c->port, &s->sub_budget, s, sub_connected, sub_disconnected,
		       why, sizeof(why)) < 0) {
		sub_lost(s, why);
		return;
	}
	auth(s, s->sub.ac);
	redisAsyncCommand(s->sub.ac, sub_message, s, "SUBSCRIBE +switch-master");
}

/* ---- the loop -------------------------------------------------------------------- */

/* After hiredis returned: end the look if it can, tell what is to be told. */
static void settle(struct sentinel *s, uint64_t now)
{
	if (s->look) {
		bool all = true;

		for (unsigned i = 0; i < s->n; i++)
			all = all && s->sc[i].answered;
		if (all || now >= s->look_deadline)
			look_finish(s, now);
	}
	if (s->report) {
		s->report = false;
		s->ops.master(s->ops.arg, s->rep.ip, s->rep.port, s->report_announced);
	}
}

void sentinel_look(struct sentinel *s)
{
	if (s && !s->look)
		look_start(s, now_ns());
}

bool sentinel_owns(const struct sentinel *s, uint32_t tag)
{
	return s && tag >= s->tag_base && tag <= s->tag_base + s->n;
}

void sentinel_event(struct sentinel *s, uint32_t tag, uint32_t events)
{
	if (tag == s->tag_base)
		aconn_event(&s->sub, events);
	else
		aconn_event(&s->sc[tag - s->tag_base - 1].qc, events);
	settle(s, now_ns());
}

uint64_t sentinel_tick(struct sentinel *s, uint64_t now)
{
	uint64_t next;

	if (!s->look && now >= s->next_look)
		look_start(s, now);
	if (!s->sub.ac && now >= s->sub_retry_at)
		sub_open(s);
	settle(s, now);
	next = s->look ? s->look_deadline : s->next_look;
	if (!s->sub.ac && s->sub_retry_at < next)
		next = s->sub_retry_at;
	return next;
}

void sentinel_counts(const struct sentinel *s, uint32_t *ret_n, uint32_t *ret_up)
{
	*ret_n = s ? s->n : 0;
	*ret_up = s ? s->up : 0;
}

/* ---- lifetime ------------------------------------------------------------------- */

static int resolve(struct sconn *c, char *why, size_t wl)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	struct reg_addr a = { 0 };
	char w[160];
	int rc;

	if (reg_addr_parse(c->addr, &a, w, sizeof(w)) < 0 || a.unix_path) {
		snprintf(why, wl, "[cluster] sentinels: %s",
			 a.unix_path ? "host:port, not a path" : w);
		return -EINVAL;
	}
	rc = getaddrinfo(a.host, NULL, &hints, &res);
	if (rc) {
		snprintf(why, wl, "[cluster] sentinels: cannot resolve %s: %s", a.host,
			 gai_strerror(rc));
		return -EINVAL;
	}
	rc = getnameinfo(res->ai_addr, res->ai_addrlen, c->ip, sizeof(c->ip), NULL, 0,
			 NI_NUMERICHOST);
	freeaddrinfo(res);
	if (rc) {
		snprintf(why, wl, "[cluster] sentinels: %s: %s", a.host, gai_strerror(rc));
		return -EINVAL;
	}
	c->port = a.port;
	return 0;
}

int sentinel_new(const struct sentinel_config *cfg, const struct sentinel_ops *ops, int epfd,
		 uint32_t tag_base, struct sentinel **ret, char *why, size_t wl)
{
	struct sentinel *s = calloc(1, sizeof(*s));
	const char *p = cfg->list;
	int rc = 0;

	if (!s)
		return -ENOMEM;
	s->ops = *ops;
	snprintf(s->name, sizeof(s->name), "%s", cfg->master_name);
	snprintf(s->user, sizeof(s->user), "%s", cfg->user ? cfg->user : "");
	if (cfg->password && cfg->password[0] && !(s->password = strdup(cfg->password))) {
		free(s);
		return -ENOMEM;
	}
	s->connect_ms = cfg->connect_timeout_ms;
	s->command_ms = cfg->command_timeout_ms;
	s->check_ms = cfg->check_ms;
	s->epfd = epfd;
	s->tag_base = tag_base;
	aconn_init(&s->sub, epfd, tag_base);
	while (p && *p && !rc) {
		size_t l = strcspn(p, ", \t");
		struct sconn *c;

		if (!l) {
			p++;
			continue;
		}
		if (s->n == SENTINEL_MAX || l >= sizeof(s->sc[0].addr)) {
			snprintf(why, wl, "[cluster] sentinels: at most %u, each below %zu bytes",
				 SENTINEL_MAX, sizeof(s->sc[0].addr));
			rc = -EINVAL;
			break;
		}
		c = &s->sc[s->n];
		c->s = s;
		memcpy(c->addr, p, l);
		c->addr[l] = '\0';
		aconn_init(&c->qc, epfd, tag_base + 1 + s->n);
		rc = resolve(c, why, wl);
		s->n++;
		p += l;
	}
	if (!rc && !s->n) {
		snprintf(why, wl, "[cluster] sentinels: none named");
		rc = -EINVAL;
	}
	if (rc) {
		sentinel_free(s);
		return rc;
	}
	s->sub_i = 0;
	*ret = s;
	return 0;
}

void sentinel_free(struct sentinel *s)
{
	if (!s)
		return;
	/* Their callbacks see NULL replies and record nothing of use: nobody settles after. */
	s->look = 0;
	s->closing = true;
	for (unsigned i = 0; i < s->n; i++)
		aconn_close(&s->sc[i].qc);
	aconn_close(&s->sub);
	if (s->password) {
		explicit_bzero(s->password, strlen(s->password));
		free(s->password);
	}
	free(s);
}
