/* SPDX-License-Identifier: MIT */
/*
 * kvstash: the admin CLI of kvstashd.  See kvstash(1).
 *
 *   kvstash [--socket PATH] [--json] [--timeout MS] status|stats|version
 *
 * It opens a session in the admin role (no shared-memory region, no limit
 * slot), sends one STATUS or STATS request through kvs_admin_request() and
 * prints the reply train, for humans or as one JSON object.
 *
 * Exit codes: 0 ok; 1 kvstashd not reachable or the request failed;
 * 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvstash/kvstash.h>

#define EXIT_UNREACHABLE 1
#define EXIT_USAGE 2

/* ---- options and connection ------------------------------------------ */

static struct {
	const char *socket;
	bool json;
	int timeout_ms;
	char last_log[512]; /* libkvstash's reason for a refusal, if any */
} opt = { .timeout_ms = 5000 };

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvstash [OPTIONS] COMMAND\n"
		"\n"
		"Show what kvstashd is doing.\n"
		"\n"
		"Commands:\n"
		"  status    daemon facts, the cluster registry's state, the peers, the sessions\n"
		"  stats     pool, block, operation, session, registry, SSD tier and peer counters\n"
		"  version   versions of this tool, libkvstash and kvstashd\n"
		"\n"
		"Options:\n"
		"  -s, --socket=PATH   kvstashd's socket (default $KVSTASH_SOCKET, else %s)\n"
		"  -j, --json          print one JSON object instead of text\n"
		"  -t, --timeout=MS    give up on kvstashd after MS milliseconds (default 5000)\n"
		"  -h, --help          this text\n"
		"  -V, --version       print the version of this tool\n"
		"\n"
		"Exit status: 0 ok, 1 kvstashd not reachable or the request failed, 2 bad usage.\n",
		KVS_DEFAULT_SOCKET);
}

static const char *socket_path(void)
{
	const char *env = getenv("KVSTASH_SOCKET");

	if (opt.socket)
		return opt.socket;
	return env && *env ? env : KVS_DEFAULT_SOCKET;
}

/* Keep the library's last message: it carries the daemon's reason for a refusal. */
static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	snprintf(opt.last_log, sizeof(opt.last_log), "%s", msg);
}

static int connect_admin(struct kvs_client **ret)
{
	struct kvs_connect_opts o;
	int r;

	kvs_connect_opts_init(&o);
	o.role = KVS_ROLE_ADMIN;
	o.timeout_ms = opt.timeout_ms;
	o.log = log_cb;
	opt.last_log[0] = '\0';
	r = kvs_connect(socket_path(), &o, ret);
	if (r < 0) {
		fprintf(stderr, "kvstash: cannot reach kvstashd at %s: %s\n", socket_path(),
			kvs_strerror(r));
		/* "cannot connect" repeats the line above; a refusal's reason does not. */
		if (opt.last_log[0] && strncmp(opt.last_log, "cannot connect", 14) != 0)
			fprintf(stderr, "kvstash: %s\n", opt.last_log);
	}
	return r;
}

/* ---- the reply train -------------------------------------------------- */

/* Everything one request brought back; arrays grow as messages arrive. */
struct reply {
	bool have_daemon, have_global;
	struct kvs_msg_status_daemon daemon;
	struct kvs_msg_status_session *sessions;
	size_t nr_sessions;
	struct kvs_msg_stats_global global;
	struct kvs_msg_stats_node *nodes;
	size_t nr_nodes;
	struct kvs_msg_stats_session *sstats;
	size_t nr_sstats;
	/* Only from a kvstashd with [cluster], in STATUS and STATS replies. */
	bool have_registry;
	struct kvs_msg_stats_registry registry;
	/* Only from a kvstashd with [ssd], in STATS replies: the tier, then its drives. */
	bool have_ssd;
	struct kvs_msg_stats_ssd ssd;
	struct kvs_msg_stats_ssd_drive *ssd_drives;
	size_t nr_ssd_drives;
	/* Only from a kvstashd with a peer service, in STATUS and STATS replies; then its peers. */
	bool have_peer;
	struct kvs_msg_stats_peer peer;
	struct kvs_msg_stats_peer_info *peers;
	size_t nr_peers;
};

static int push(void *arrp, size_t *n, size_t size, const void *item)
{
	void *a = realloc(*(void **)arrp, (*n + 1) * size);

	if (!a)
		return -ENOMEM;
	memcpy((char *)a + *n * size, item, size);
	*(void **)arrp = a;
	(*n)++;
	return 0;
}

static int collect(void *arg, const struct kvs_msg_hdr *msg)
{
	struct reply *r = arg;

	/* kvs_admin_request() checked each message's size against its type. */
	switch (msg->type) {
	case KVS_MSG_STATUS_DAEMON:
		memcpy(&r->daemon, msg, sizeof(r->daemon));
		r->have_daemon = true;
		return 0;
	case KVS_MSG_STATUS_SESSION:
		return push(&r->sessions, &r->nr_sessions, sizeof(*r->sessions), msg);
	case KVS_MSG_STATS_GLOBAL:
		memcpy(&r->global, msg, sizeof(r->global));
		r->have_global = true;
		return 0;
	case KVS_MSG_STATS_NODE:
		return push(&r->nodes, &r->nr_nodes, sizeof(*r->nodes), msg);
	case KVS_MSG_STATS_SESSION:
		return push(&r->sstats, &r->nr_sstats, sizeof(*r->sstats), msg);
	case KVS_MSG_STATS_REGISTRY:
		memcpy(&r->registry, msg, sizeof(r->registry));
		r->have_registry = true;
		return 0;
	case KVS_MSG_STATS_SSD:
		memcpy(&r->ssd, msg, sizeof(r->ssd));
		r->have_ssd = true;
		return 0;
	case KVS_MSG_STATS_SSD_DRIVE:
		return push(&r->ssd_drives, &r->nr_ssd_drives, sizeof(*r->ssd_drives), msg);
	case KVS_MSG_STATS_PEER:
		memcpy(&r->peer, msg, sizeof(r->peer));
		r->have_peer = true;
		return 0;
	case KVS_MSG_STATS_PEER_INFO:
		return push(&r->peers, &r->nr_peers, sizeof(*r->peers), msg);
	default:
		return 0; /* a newer daemon's addition: not ours to show */
	}
}

static void reply_free(struct reply *r)
{
	free(r->sessions);
	free(r->nodes);
	free(r->sstats);
	free(r->ssd_drives);
	free(r->peers);
}

static int request(struct kvs_client *c, uint32_t type, struct reply *r)
{
	int err = kvs_admin_request(c, type, collect, r);

	if (err == 0 && type == KVS_MSG_STATUS && !r->have_daemon)
		err = -EBADMSG;
	if (err == 0 && type == KVS_MSG_STATS && !r->have_global)
		err = -EBADMSG;
	if (err < 0)
		fprintf(stderr, "kvstash: %s request to kvstashd at %s failed: %s\n",
			type == KVS_MSG_STATUS ? "status" : "stats", socket_path(),
			kvs_strerror(err));
	return err;
}

/*
 * Wire strings are fixed arrays that should hold a NUL; never trust that
 * they do.  Copies into @buf (at least @n + 1 bytes).
 */
static const char *wstr(char *buf, const char *field, size_t n)
{
	size_t len = strnlen(field, n);

	memcpy(buf, field, len);
	buf[len] = '\0';
	return buf;
}

#define WSTR(field) wstr((char[sizeof(field) + 1]){ 0 }, (field), sizeof(field))

/* ---- text helpers ----------------------------------------------------- */

/* 1536 -> "1.5 KiB"; below 1 KiB exact bytes. */
static const char *human_bytes(char *buf, size_t len, uint64_t v)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double d = (double)v;
	unsigned u = 0;

	if (v < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", v);
		return buf;
	}
	d /= 1024;
	while (d >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
		d /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", d, unit[u]);
	return buf;
}

#define HB(v) human_bytes((char[32]){ 0 }, 32, (v))

/* Bytes per second as "5.2 GiB/s", or "-" when nothing was timed. */
static const char *human_rate(char *buf, size_t len, uint64_t bytes, uint64_t ns)
{
	char b[32];

	if (ns == 0 || bytes == 0) {
		snprintf(buf, len, "-");
		return buf;
	}
	snprintf(buf, len, "%s/s", human_bytes(b, sizeof(b), (uint64_t)((double)bytes * 1e9 / ns)));
	return buf;
}

#define HR(b, ns) human_rate((char[40]){ 0 }, 40, (b), (ns))

static const char *human_uptime(char *buf, size_t len, uint64_t ms)
{
	uint64_t s = ms / 1000, d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;

	if (d)
		snprintf(buf, len, "%" PRIu64 "d %" PRIu64 "h %" PRIu64 "m", d, h, m);
	else if (h)
		snprintf(buf, len, "%" PRIu64 "h %" PRIu64 "m %" PRIu64 "s", h, m, s % 60);
	else if (m)
		snprintf(buf, len, "%" PRIu64 "m %" PRIu64 "s", m, s % 60);
	else
		snprintf(buf, len, "%" PRIu64 ".%01" PRIu64 "s", s, ms % 1000 / 100);
	return buf;
}

/* Free = capacity - used; counters read at slightly different times never go below 0. */
static uint64_t sub0(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

static const char *pct(char *buf, size_t len, uint64_t part, uint64_t whole)
{
	if (whole == 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f %%", 100.0 * (double)part / (double)whole);
	return buf;
}

#define PCT(p, w) pct((char[16]){ 0 }, 16, (p), (w))

static const char *role_name(uint32_t role)
{
	switch (role) {
	case KVS_ROLE_WORKER:
		return "worker";
	case KVS_ROLE_SCHEDULER:
		return "scheduler";
	case KVS_ROLE_ADMIN:
		return "admin";
	default:
		return "unknown";
	}
}

/* "host", or the GPU's UUID the way nvidia-smi prints it. */
static const char *device_name(char *buf, size_t len, uint32_t kind, const uint8_t *u)
{
	if (kind == KVS_DEVICE_HOST) {
		snprintf(buf, len, "host");
	} else if (kind == KVS_DEVICE_CUDA) {
		snprintf(buf, len,
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
			 u[12], u[13], u[14], u[15]);
	} else {
		snprintf(buf, len, "kind-%u", kind);
	}
	return buf;
}

/* A terminal gets no control characters from the daemon. */
static const char *printable(char *s)
{
	for (char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return s;
}

/* A table whose columns fit their widest cell; cells are copied. */
#define MAX_COLS 16

struct table {
	unsigned ncols;
	const char *head[MAX_COLS];
	bool right[MAX_COLS]; /* numbers align right */
	size_t width[MAX_COLS];
	char **cells;
	size_t nrows;
};

static void table_init(struct table *t, unsigned ncols, const char *const *head, const char *align)
{
	memset(t, 0, sizeof(*t));
	t->ncols = ncols;
	for (unsigned i = 0; i < ncols; i++) {
		t->head[i] = head[i];
		t->right[i] = align[i] == 'r';
		t->width[i] = strlen(head[i]);
	}
}

static int table_row(struct table *t, ...)
{
	char **cells = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(*cells));
	va_list ap;

	if (!cells)
		return -ENOMEM;
	t->cells = cells;
	va_start(ap, t);
	for (unsigned i = 0; i < t->ncols; i++) {
		char *c = strdup(va_arg(ap, const char *));

		if (!c)
			c = strdup("?");
		if (c)
			printable(c);
		cells[t->nrows * t->ncols + i] = c;
		if (c && strlen(c) > t->width[i])
			t->width[i] = strlen(c);
	}
	va_end(ap);
	t->nrows++;
	return 0;
}

/* A row of t->ncols cells from an array. */
static int table_row_v(struct table *t, const char *const *cells)
{
	char **c = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(*c));

	if (!c)
		return -ENOMEM;
	t->cells = c;
	for (unsigned i = 0; i < t->ncols; i++) {
		char *d = strdup(cells[i]);

		if (!d)
			d = strdup("?");
		if (d)
			printable(d);
		c[t->nrows * t->ncols + i] = d;
		if (d && strlen(d) > t->width[i])
			t->width[i] = strlen(d);
	}
	t->nrows++;
	return 0;
}

static void table_print(struct table *t, const char *indent)
{
	fputs(indent, stdout);
	for (unsigned i = 0; i < t->ncols; i++)
		printf("%s%-*s", i ? "  " : "", i + 1 < t->ncols || t->right[i] ? (int)t->width[i] : 0,
		       t->head[i]);
	putchar('\n');
	for (size_t r = 0; r < t->nrows; r++) {
		fputs(indent, stdout);
		for (unsigned i = 0; i < t->ncols; i++) {
			const char *c = t->cells[r * t->ncols + i];
			int w = i + 1 < t->ncols || t->right[i] ? (int)t->width[i] : 0;

			printf("%s%*s", i ? "  " : "", t->right[i] ? w : -w, c ? c : "?");
		}
		putchar('\n');
	}
}

static void table_free(struct table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

/* A short-lived formatted cell (table_row copies it). */
static char *fmt(const char *f, ...)
{
	static char ring[16][256];
	static unsigned next;
	char *b = ring[next++ % 16];
	va_list ap;

	va_start(ap, f);
	vsnprintf(b, sizeof(ring[0]), f, ap);
	va_end(ap);
	return b;
}

/* ---- JSON --------------------------------------------------------------- */

/*
 * Length of the valid UTF-8 sequence at @s (1-4), or 0 if it is not one:
 * overlong forms, surrogates and code points past U+10FFFF are invalid.
 */
static unsigned utf8_len(const unsigned char *s)
{
	unsigned n, cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07;
	else
		return 0;
	for (unsigned i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0; /* also stops at the NUL */
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* A JSON string: quotes, backslashes and control characters escaped, bad UTF-8 replaced. */
static void json_str(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	putchar('"');
	while (*p) {
		unsigned n = utf8_len(p);

		if (n == 0) {
			fputs("\\ufffd", stdout);
			p++;
		} else if (n > 1) {
			fwrite(p, 1, n, stdout);
			p += n;
		} else {
			switch (*p) {
			case '"':
				fputs("\\\"", stdout);
				break;
			case '\\':
				fputs("\\\\", stdout);
				break;
			case '\n':
				fputs("\\n", stdout);
				break;
			case '\r':
				fputs("\\r", stdout);
				break;
			case '\t':
				fputs("\\t", stdout);
				break;
			default:
				if (*p < 0x20)
					printf("\\u%04x", *p);
				else
					putchar(*p);
			}
			p++;
		}
	}
	putchar('"');
}

/* Members of the object being written: "key": value, comma-separated. */
struct jobj {
	bool first[16];
	unsigned depth;
};

static void jkey(struct jobj *j, const char *key)
{
	if (!j->first[j->depth])
		putchar(',');
	j->first[j->depth] = false;
	if (key) {
		json_str(key);
		putchar(':');
	}
}

static void jopen(struct jobj *j, const char *key, char brace)
{
	if (j->depth)
		jkey(j, key);
	putchar(brace);
	j->first[++j->depth] = true;
}

static void jclose(struct jobj *j, char brace)
{
	putchar(brace);
	j->depth--;
}

static void jstr(struct jobj *j, const char *key, const char *v)
{
	jkey(j, key);
	json_str(v);
}

static void ju64(struct jobj *j, const char *key, uint64_t v)
{
	jkey(j, key);
	printf("%" PRIu64, v);
}

static void ji64(struct jobj *j, const char *key, int64_t v)
{
	jkey(j, key);
	printf("%" PRId64, v);
}

static void jbool(struct jobj *j, const char *key, bool v)
{
	jkey(j, key);
	fputs(v ? "true" : "false", stdout);
}

static void jnull(struct jobj *j, const char *key)
{
	jkey(j, key);
	fputs("null", stdout);
}

/* A ratio, or null when the denominator is 0 (JSON has no NaN). */
static void jratio(struct jobj *j, const char *key, double num, double den)
{
	if (den == 0) {
		jnull(j, key);
		return;
	}
	jkey(j, key);
	printf("%.6g", num / den);
}

/* Bytes per second of copy time, a whole number; null before anything was timed. */
static void jrate(struct jobj *j, const char *key, uint64_t bytes, uint64_t ns)
{
	if (ns == 0) {
		jnull(j, key);
		return;
	}
	ju64(j, key, (uint64_t)((double)bytes * 1e9 / (double)ns));
}

/* ---- status ------------------------------------------------------------- */

/* The registry's and the peers' groups, as `kvstash stats` shows them (below); nothing without. */
static void registry_json(struct jobj *j, const struct reply *r);
static void registry_text(const struct reply *r);
static void peer_json(struct jobj *j, const struct reply *r);
static void peer_text(const struct reply *r);

static void status_json(const struct reply *r)
{
	const struct kvs_msg_status_daemon *d = &r->daemon;
	struct jobj j = { { true } };

	jopen(&j, NULL, '{');
	jstr(&j, "socket", socket_path());
	jopen(&j, "daemon", '{');
	jstr(&j, "version", WSTR(d->version));
	ju64(&j, "pid", d->pid);
	ju64(&j, "uptime_ms", d->uptime_ms);
	ju64(&j, "workers", d->nr_workers);
	ju64(&j, "instances", d->nr_instances);
	ju64(&j, "sessions", d->nr_sessions);
	jbool(&j, "cuda_available", d->cuda_available);
	jclose(&j, '}');
	registry_json(&j, r);
	peer_json(&j, r);
	jopen(&j, "sessions", '[');
	for (size_t i = 0; i < r->nr_sessions; i++) {
		const struct kvs_msg_status_session *s = &r->sessions[i];
		char dev[64];

		jopen(&j, NULL, '{');
		ju64(&j, "id", s->session_id);
		ju64(&j, "pid", s->pid);
		ju64(&j, "uid", s->uid);
		jstr(&j, "role", role_name(s->role));
		jstr(&j, "instance", WSTR(s->instance));
		ju64(&j, "tp_rank", s->tp_rank);
		ju64(&j, "tp_size", s->tp_size);
		ju64(&j, "world_size", s->world_size);
		jstr(&j, "namespace", WSTR(s->ns));
		jstr(&j, "device", device_name(dev, sizeof(dev), s->device_kind, s->device_uuid));
		ju64(&j, "worker", s->worker);
		jopen(&j, "layers", '{');
		ju64(&j, "count", s->nr_layers);
		if (s->nr_layers) {
			jstr(&j, "first", WSTR(s->first_layer));
			jstr(&j, "last", WSTR(s->last_layer));
		} else {
			jnull(&j, "first");
			jnull(&j, "last");
		}
		ju64(&j, "block_bytes", s->slot_bytes);
		ju64(&j, "mapped_bytes", s->mapped_bytes);
		jclose(&j, '}');
		jbool(&j, "sealed", s->sealed);
		jclose(&j, '}');
	}
	jclose(&j, ']');
	jclose(&j, '}');
	putchar('\n');
}

static void status_text(const struct reply *r)
{
	static const char *const head[] = { "SESSION", "PID",	 "UID",	   "ROLE",  "INSTANCE",
					    "RANK",    "NAMESPACE", "DEVICE", "WORKER", "LAYERS",
					    "FIRST..LAST", "BLOCK", "MAPPED", "SEALED" };
	const struct kvs_msg_status_daemon *d = &r->daemon;
	struct table t;
	char up[32], ver[sizeof(d->version) + 1];

	wstr(ver, d->version, sizeof(d->version));
	printf("kvstashd %s is up at %s\n", printable(ver), socket_path());
	printf("  pid        %u\n", d->pid);
	printf("  uptime     %s\n", human_uptime(up, sizeof(up), d->uptime_ms));
	printf("  workers    %u\n", d->nr_workers);
	printf("  instances  %u\n", d->nr_instances);
	printf("  sessions   %u\n", d->nr_sessions);
	printf("  CUDA       %s\n", d->cuda_available ? "available" : "not available");
	registry_text(r);
	peer_text(r);
	if (r->nr_sessions == 0) {
		printf("\nNo engine sessions.\n");
		return;
	}
	putchar('\n');
	table_init(&t, 14, head, "rrrlllllrrlrrl");
	for (size_t i = 0; i < r->nr_sessions; i++) {
		const struct kvs_msg_status_session *s = &r->sessions[i];
		char dev[64], range[2 * KVS_NAME_MAX + 4];
		bool reg = s->nr_layers != 0;

		if (reg)
			snprintf(range, sizeof(range), "%s..%s", WSTR(s->first_layer),
				 WSTR(s->last_layer));
		else
			snprintf(range, sizeof(range), "-");
		table_row(&t, fmt("%" PRIu64, s->session_id), fmt("%u", s->pid), fmt("%u", s->uid),
			  role_name(s->role), WSTR(s->instance),
			  s->role == KVS_ROLE_WORKER ? fmt("%u/%u", s->tp_rank, s->tp_size) : "-",
			  WSTR(s->ns), device_name(dev, sizeof(dev), s->device_kind, s->device_uuid),
			  fmt("%u", s->worker), reg ? fmt("%u", s->nr_layers) : "-", range,
			  reg ? HB(s->slot_bytes) : "-", reg ? HB(s->mapped_bytes) : "-",
			  s->sealed ? "yes" : "no");
	}
	table_print(&t, "");
	table_free(&t);
}

/* ---- stats -------------------------------------------------------------- */

/*
 * What `kvstash stats` shows comes from the tables of <kvstash/stats.h>:
 * each row names its JSON member and its text, and this code only walks
 * them.  What the tables cannot say is here: the header line, and the KEY
 * fields of the groups shown as lists (which node, which session).
 */
enum crow_shape {
	CR_FIELD,
	CR_DERIVED,
	CR_GROUP,
};

enum crow_formula {
	CF_SUB0,
	CF_PCT,
	CF_SHARE,
	CF_RATE,
	CF_PAIR,
};

enum crow_group {
	CG_NODE,
	CG_SESSION,
	CG_REGISTRY,
	CG_SSD,
	CG_SSD_DRIVE,
	CG_PEER,
	CG_PEER_INFO,
};

struct crow {
	uint8_t shape;
	uint8_t type;		   /* CR_FIELD: KVS_STATS_T_* */
	uint8_t unit;		   /* CR_FIELD: KVS_STATS_U_* */
	uint8_t formula;	   /* CR_DERIVED */
	uint8_t group;		   /* CR_GROUP */
	uint16_t off;		   /* CR_FIELD */
	uint16_t a, b;		   /* CR_DERIVED: the operands' offsets */
	const char *section, *key; /* JSON; key NULL: not in it */
	const char *line, *text;   /* text; text NULL: not in it */
};

/* CMSG: the message struct of the table expanded. */
#define CROW_(shape, ...) CROW_##shape(__VA_ARGS__)
#define CROW_F(type, name, kind, src, unit, section, key, line, text, prom, help) \
	{ CR_FIELD,                                                               \
	  KVS_STATS_T_##type,                                                     \
	  KVS_STATS_U_##unit,                                                     \
	  0,                                                                      \
	  0,                                                                      \
	  offsetof(CMSG, name),                                                   \
	  0,                                                                      \
	  0,                                                                      \
	  section,                                                                \
	  key,                                                                    \
	  line,                                                                   \
	  text },
#define CROW_D(name, formula, a, b, section, key, line, text, prom, help) \
	CROW_D_##formula(a, b, section, key, line, text)
#define CROW_DV(f, a, b, section, key, line, text)                                \
	{                                                                         \
		CR_DERIVED,	   0,	    0,	 f,    0,   0, offsetof(CMSG, a), \
		offsetof(CMSG, b), section, key, line, text                       \
	},
#define CROW_D_SUB0(...)  CROW_DV(CF_SUB0, __VA_ARGS__)
#define CROW_D_PCT(...)	  CROW_DV(CF_PCT, __VA_ARGS__)
#define CROW_D_SHARE(...) CROW_DV(CF_SHARE, __VA_ARGS__)
#define CROW_D_RATE(...)  CROW_DV(CF_RATE, __VA_ARGS__)
#define CROW_D_PAIR(...)  CROW_DV(CF_PAIR, __VA_ARGS__)
#define CROW_D_DIFF(...)  /* of kvstashd's counters: Prometheus's */
#define CROW_S(group, section, key, line) \
	{ CR_GROUP, 0, 0, 0, CG_##group, 0, 0, 0, section, key, line, NULL },
#define CROW_I(...)

#define CMSG struct kvs_msg_stats_global
static const struct crow global_rows[] = { KVS_STATS_GLOBAL(CROW_) };
#undef CMSG
#define CMSG struct kvs_msg_stats_node
static const struct crow node_rows[] = { KVS_STATS_NODE(CROW_) };
#undef CMSG
#define CMSG struct kvs_msg_stats_session
static const struct crow session_rows[] = { KVS_STATS_SESSION(CROW_) };
#undef CMSG
#define CMSG struct kvs_msg_stats_registry
static const struct crow registry_rows[] = { KVS_STATS_REGISTRY(CROW_) };
#undef CMSG
#define CMSG struct kvs_msg_stats_ssd
static const struct crow ssd_rows[] = { KVS_STATS_SSD(CROW_) };
#undef CMSG
#define CMSG struct kvs_msg_stats_ssd_drive
static const struct crow ssd_drive_rows[] = { KVS_STATS_SSD_DRIVE(CROW_) };
#undef CMSG
#define CMSG struct kvs_msg_stats_peer
static const struct crow peer_rows[] = { KVS_STATS_PEER(CROW_) };
#undef CMSG
#define CMSG struct kvs_msg_stats_peer_info
static const struct crow peer_info_rows[] = { KVS_STATS_PEER_INFO(CROW_) };
#undef CMSG

#define NROWS(a) (sizeof(a) / sizeof((a)[0]))

/* The KEY fields of a group's items: table columns and JSON members. */
static void node_keys(const void *msg, const char **cells)
{
	const struct kvs_msg_stats_node *n = msg;

	cells[0] = n->node < 0 ? "-" : fmt("%d", n->node);
	cells[1] = n->hugepages ? "hugetlb" : "THP";
}

static void session_keys(const void *msg, const char **cells)
{
	const struct kvs_msg_stats_session *s = msg;

	cells[0] = fmt("%" PRIu64, s->session_id);
	cells[1] = fmt("%u", s->pid);
	cells[2] = fmt("%s", WSTR(s->instance));
	cells[3] = fmt("%u", s->tp_rank);
}

static void ssd_drive_keys(const void *msg, const char **cells)
{
	const struct kvs_msg_stats_ssd_drive *s = msg;
	char path[KVS_NAME_MAX + 1];

	wstr(path, s->path, KVS_NAME_MAX);
	cells[0] = fmt("%u", s->drive);
	cells[1] = fmt("%s", printable(path));
}

static void peer_info_keys(const void *msg, const char **cells)
{
	const struct kvs_msg_stats_peer_info *p = msg;

	cells[0] = fmt("%s", WSTR(p->addr));
	/* Not authenticated (yet): no name to show. */
	cells[1] = p->node[0] ? fmt("%s", WSTR(p->node)) : "-";
}

static void node_keys_json(struct jobj *j, const void *msg)
{
	const struct kvs_msg_stats_node *n = msg;

	ji64(j, "node", n->node);
	jbool(j, "hugepages", n->hugepages);
}

static void session_keys_json(struct jobj *j, const void *msg)
{
	const struct kvs_msg_stats_session *s = msg;

	ju64(j, "id", s->session_id);
	ju64(j, "pid", s->pid);
	jstr(j, "instance", WSTR(s->instance));
	ju64(j, "tp_rank", s->tp_rank);
}

static void ssd_drive_keys_json(struct jobj *j, const void *msg)
{
	const struct kvs_msg_stats_ssd_drive *s = msg;

	ju64(j, "drive", s->drive);
	jstr(j, "path", WSTR(s->path));
}

static void peer_info_keys_json(struct jobj *j, const void *msg)
{
	const struct kvs_msg_stats_peer_info *p = msg;

	jstr(j, "addr", WSTR(p->addr));
	jstr(j, "node", WSTR(p->node));
}

static const struct cgroup {
	const struct crow *rows;
	size_t nrows;
	bool single;	   /* one message: lines of its own, a JSON object */
	const char *title; /* text: the line above its table, NULL: none */
	unsigned nkeys;
	const char *key_head[4];
	const char *key_align;
	void (*keys)(const void *msg, const char **cells);
	void (*keys_json)(struct jobj *j, const void *msg);
} cgroups[] = {
	[CG_NODE] = { node_rows,
		      NROWS(node_rows),
		      false,
		      NULL,
		      2,
		      { "NODE", "PAGES" },
		      "ll",
		      node_keys,
		      node_keys_json },
	[CG_SESSION] = { session_rows,
			 NROWS(session_rows),
			 false,
			 "Per session:",
			 4,
			 { "SESSION", "PID", "INSTANCE", "RANK" },
			 "rrlr",
			 session_keys,
			 session_keys_json },
	[CG_REGISTRY] = { registry_rows,
			  NROWS(registry_rows),
			  true,
			  "Registry:",
			  0,
			  { NULL },
			  "",
			  NULL,
			  NULL },
	[CG_SSD] = { ssd_rows, NROWS(ssd_rows), true, "SSD tier:", 0, { NULL }, "", NULL, NULL },
	[CG_SSD_DRIVE] = { ssd_drive_rows,
			   NROWS(ssd_drive_rows),
			   false,
			   "Per drive:",
			   2,
			   { "DRIVE", "PATH" },
			   "rl",
			   ssd_drive_keys,
			   ssd_drive_keys_json },
	[CG_PEER] = { peer_rows,
		      NROWS(peer_rows),
		      true,
		      "Peer service:",
		      0,
		      { NULL },
		      "",
		      NULL,
		      NULL },
	[CG_PEER_INFO] = { peer_info_rows,
			   NROWS(peer_info_rows),
			   false,
			   "Per peer:",
			   2,
			   { "ADDR", "NODE" },
			   "ll",
			   peer_info_keys,
			   peer_info_keys_json },
};

/* The messages of group @g in reply @r. */
static const void *group_msgs(const struct reply *r, unsigned g, size_t *ret_n, size_t *ret_size)
{
	if (g == CG_NODE) {
		*ret_n = r->nr_nodes;
		*ret_size = sizeof(*r->nodes);
		return r->nodes;
	}
	if (g == CG_REGISTRY) {
		*ret_n = r->have_registry;
		*ret_size = sizeof(r->registry);
		return &r->registry;
	}
	if (g == CG_SSD) {
		*ret_n = r->have_ssd;
		*ret_size = sizeof(r->ssd);
		return &r->ssd;
	}
	if (g == CG_SSD_DRIVE) {
		*ret_n = r->nr_ssd_drives;
		*ret_size = sizeof(*r->ssd_drives);
		return r->ssd_drives;
	}
	if (g == CG_PEER) {
		*ret_n = r->have_peer;
		*ret_size = sizeof(r->peer);
		return &r->peer;
	}
	if (g == CG_PEER_INFO) {
		*ret_n = r->nr_peers;
		*ret_size = sizeof(*r->peers);
		return r->peers;
	}
	*ret_n = r->nr_sstats;
	*ret_size = sizeof(*r->sstats);
	return r->sstats;
}

static uint64_t msg_u64(const void *msg, uint16_t off)
{
	uint64_t v;

	memcpy(&v, (const uint8_t *)msg + off, sizeof(v));
	return v;
}

static uint32_t msg_u32(const void *msg, uint16_t off)
{
	uint32_t v;

	memcpy(&v, (const uint8_t *)msg + off, sizeof(v));
	return v;
}

/* The unit of the field at @off of @rows (a derived value's first operand's). */
static uint8_t unit_at(const struct crow *rows, size_t n, uint16_t off)
{
	for (size_t i = 0; i < n; i++)
		if (rows[i].shape == CR_FIELD && rows[i].off == off)
			return rows[i].unit;
	return KVS_STATS_U_NONE;
}

/* Row @c of @rows as text, into @buf. */
static const char *text_value(char *buf, size_t len, const struct crow *rows, size_t n,
			      const struct crow *c, const void *msg)
{
	uint64_t a = 0, b = 0, v;
	uint8_t unit = c->unit;

	if (c->shape == CR_DERIVED) {
		a = msg_u64(msg, c->a);
		b = msg_u64(msg, c->b);
	}
	if (c->shape == CR_FIELD && c->type == KVS_STATS_T_I32) {
		snprintf(buf, len, "%d", (int32_t)msg_u32(msg, c->off));
		return buf;
	}
	if (c->shape == CR_FIELD && c->type == KVS_STATS_T_NAME) {
		wstr(buf, (const char *)msg + c->off,
		     len - 1 < KVS_NAME_MAX ? len - 1 : KVS_NAME_MAX);
		/* An empty name (a peer's last error when there was none): "-", as other absent values. */
		return buf[0] ? printable(buf) : "-";
	}
	if (c->shape == CR_FIELD && c->type == KVS_STATS_T_BOOL) {
		snprintf(buf, len, "%s", msg_u32(msg, c->off) ? "yes" : "no");
		return buf;
	}
	if (c->shape == CR_FIELD) {
		v = c->type == KVS_STATS_T_U64 ? msg_u64(msg, c->off) : msg_u32(msg, c->off);
	} else {
		switch (c->formula) {
		case CF_SUB0:
			v = sub0(a, b);
			unit = unit_at(rows, n, c->a);
			break;
		case CF_PCT:
			return pct(buf, len, a, b);
		case CF_SHARE:
			return pct(buf, len, a, a + b);
		case CF_RATE:
			return human_rate(buf, len, a, b);
		default: /* CF_PAIR */
			snprintf(buf, len, "%" PRIu64 "/%" PRIu64, a, b);
			return buf;
		}
	}
	if (unit == KVS_STATS_U_BYTES)
		return human_bytes(buf, len, v);
	snprintf(buf, len, "%" PRIu64 "%s", v, unit == KVS_STATS_U_US ? " us" : "");
	return buf;
}

/* A fragment of a text line: "%s" is the value. */
static void fragment(const char *text, const char *value)
{
	const char *at = strstr(text, "%s");

	if (!at) {
		fputs(text, stdout);
		return;
	}
	fwrite(text, 1, (size_t)(at - text), stdout);
	fputs(value, stdout);
	fputs(at + 2, stdout);
}

static bool same(const char *x, const char *y)
{
	return x && y && strcmp(x, y) == 0;
}

static void lines_text(const struct reply *r, const struct crow *rows, size_t n, const void *msg,
		       const char *indent, int width);

/*
 * A group's items as a table: its KEY columns, then every row with a text;
 * a group of one message as lines under its title.
 */
static void group_text(const struct reply *r, unsigned g)
{
	const struct cgroup *cg = &cgroups[g];
	const char *head[MAX_COLS], *cells[MAX_COLS];
	char align[MAX_COLS + 1], vals[MAX_COLS][64];
	unsigned nc = cg->nkeys;
	size_t n, size;
	const uint8_t *msgs = group_msgs(r, g, &n, &size);
	struct table t;

	if (n == 0)
		return;
	if (cg->title)
		printf("\n%s\n", cg->title);
	if (cg->single) {
		lines_text(NULL, cg->rows, cg->nrows, msgs, "  ", 11);
		/* Its own groups after its lines (the SSD tier's drives). */
		for (size_t k = 0; k < cg->nrows; k++)
			if (cg->rows[k].shape == CR_GROUP && !cg->rows[k].line)
				group_text(r, cg->rows[k].group);
		return;
	}
	for (unsigned i = 0; i < cg->nkeys; i++) {
		head[i] = cg->key_head[i];
		align[i] = cg->key_align[i];
	}
	for (size_t i = 0; i < cg->nrows && nc < MAX_COLS; i++) {
		const struct crow *c = &cg->rows[i];

		if (!c->text || c->shape == CR_GROUP)
			continue;
		head[nc] = c->text;
		/* Numbers align right, names (a state, an error's text) left. */
		align[nc++] = c->shape == CR_FIELD && c->type == KVS_STATS_T_NAME ? 'l' : 'r';
	}
	align[nc] = '\0';
	table_init(&t, nc, head, align);
	for (size_t m = 0; m < n; m++) {
		const void *msg = msgs + m * size;
		unsigned c = cg->nkeys;

		cg->keys(msg, cells);
		for (size_t i = 0; i < cg->nrows && c < nc; i++) {
			if (!cg->rows[i].text || cg->rows[i].shape == CR_GROUP)
				continue;
			cells[c] = text_value(vals[c], sizeof(vals[c]), cg->rows, cg->nrows,
					      &cg->rows[i], msg);
			c++;
		}
		table_row_v(&t, cells);
	}
	table_print(&t, "  ");
	table_free(&t);
}

/*
 * The lines of @rows of message @msg: one per title, in the order of its
 * first row, "@indent title" padded to @width, then its fragments.  With
 * @r, the groups placed after a line follow it.
 */
static void lines_text(const struct reply *r, const struct crow *rows, size_t n, const void *msg,
		       const char *indent, int width)
{
	for (size_t i = 0; i < n; i++) {
		bool seen = false;

		if (!rows[i].line || !rows[i].text || rows[i].shape == CR_GROUP)
			continue;
		for (size_t k = 0; k < i && !seen; k++)
			seen = rows[k].text && rows[k].shape != CR_GROUP &&
			       same(rows[k].line, rows[i].line);
		if (seen)
			continue;
		printf("%s%-*s", indent, width, rows[i].line);
		for (size_t k = i; k < n; k++) {
			char v[64];

			if (rows[k].text && rows[k].shape != CR_GROUP &&
			    same(rows[k].line, rows[i].line))
				fragment(rows[k].text,
					 text_value(v, sizeof(v), rows, n, &rows[k], msg));
		}
		putchar('\n');
		for (size_t k = 0; r && k < n; k++)
			if (rows[k].shape == CR_GROUP && same(rows[k].line, rows[i].line))
				group_text(r, rows[k].group);
	}
}

static void stats_text(const struct reply *r)
{
	const struct crow *rows = global_rows;
	const size_t n = NROWS(global_rows);
	char up[32];

	printf("kvstashd at %s, up %s\n\n", socket_path(),
	       human_uptime(up, sizeof(up), r->global.uptime_ms));
	/* One line per title, in the order of its first row; the groups placed after it. */
	lines_text(r, rows, n, &r->global, "", 12);
	for (size_t k = 0; k < n; k++)
		if (rows[k].shape == CR_GROUP && !rows[k].line)
			group_text(r, rows[k].group);
}

static void json_group(struct jobj *j, const char *key, const struct reply *r, unsigned g);

/* Row @c as member @c->key of the object being written. */
static void json_value(struct jobj *j, const struct reply *r, const struct crow *c, const void *msg)
{
	uint64_t a, b;

	if (c->shape == CR_GROUP) {
		json_group(j, c->key, r, c->group);
		return;
	}
	if (c->shape == CR_FIELD) {
		switch (c->type) {
		case KVS_STATS_T_I32:
			ji64(j, c->key, (int32_t)msg_u32(msg, c->off));
			break;
		case KVS_STATS_T_BOOL:
			jbool(j, c->key, msg_u32(msg, c->off) != 0);
			break;
		case KVS_STATS_T_U32:
			ju64(j, c->key, msg_u32(msg, c->off));
			break;
		case KVS_STATS_T_NAME:
			jstr(j, c->key,
			     wstr((char[KVS_NAME_MAX + 1]){ 0 }, (const char *)msg + c->off,
				  KVS_NAME_MAX));
			break;
		default:
			ju64(j, c->key, msg_u64(msg, c->off));
		}
		return;
	}
	a = msg_u64(msg, c->a);
	b = msg_u64(msg, c->b);
	switch (c->formula) {
	case CF_SUB0:
		ju64(j, c->key, sub0(a, b));
		break;
	case CF_PCT:
		jratio(j, c->key, (double)a, (double)b);
		break;
	case CF_SHARE:
		jratio(j, c->key, (double)a, (double)a + (double)b);
		break;
	case CF_RATE:
		jrate(j, c->key, a, b);
		break;
	default: /* CF_PAIR */
		jstr(j, c->key, fmt("%" PRIu64 "/%" PRIu64, a, b));
	}
}

/*
 * The rows of @rows that have a JSON key: members of the top level in
 * place, the others inside the object of their section, each section
 * where its first row is.
 */
static void json_rows(struct jobj *j, const struct reply *r, const struct crow *rows, size_t n,
		      const void *msg)
{
	for (size_t i = 0; i < n; i++) {
		bool seen = false;

		if (!rows[i].key)
			continue;
		if (!rows[i].section[0]) {
			json_value(j, r, &rows[i], msg);
			continue;
		}
		for (size_t k = 0; k < i && !seen; k++)
			seen = rows[k].key && same(rows[k].section, rows[i].section);
		if (seen)
			continue;
		jopen(j, rows[i].section, '{');
		for (size_t k = i; k < n; k++)
			if (rows[k].key && same(rows[k].section, rows[i].section))
				json_value(j, r, &rows[k], msg);
		jclose(j, '}');
	}
}

/*
 * A group's items as a list: its KEY members, then its rows.  A group of
 * one message is an object, and no member at all without its message.
 */
static void json_group(struct jobj *j, const char *key, const struct reply *r, unsigned g)
{
	const struct cgroup *cg = &cgroups[g];
	size_t n, size;
	const uint8_t *msgs = group_msgs(r, g, &n, &size);

	if (cg->single) {
		if (n == 0)
			return;
		jopen(j, key, '{');
		json_rows(j, r, cg->rows, cg->nrows, msgs);
		jclose(j, '}');
		return;
	}

	jopen(j, key, '[');
	for (size_t m = 0; m < n; m++) {
		jopen(j, NULL, '{');
		cg->keys_json(j, msgs + m * size);
		json_rows(j, r, cg->rows, cg->nrows, msgs + m * size);
		jclose(j, '}');
	}
	jclose(j, ']');
}

static void stats_json(const struct reply *r)
{
	struct jobj j = { { true } };

	jopen(&j, NULL, '{');
	jstr(&j, "socket", socket_path());
	json_rows(&j, r, global_rows, NROWS(global_rows), &r->global);
	jclose(&j, '}');
	putchar('\n');
}

static void registry_json(struct jobj *j, const struct reply *r)
{
	json_group(j, "registry", r, CG_REGISTRY);
}

static void registry_text(const struct reply *r)
{
	group_text(r, CG_REGISTRY);
}

static void peer_json(struct jobj *j, const struct reply *r)
{
	json_group(j, "peer", r, CG_PEER);
}

static void peer_text(const struct reply *r)
{
	group_text(r, CG_PEER);
}

/* ---- commands ------------------------------------------------------------ */

static int cmd_query(uint32_t type)
{
	struct reply r = { 0 };
	struct kvs_client *c;
	int err;

	if (connect_admin(&c) < 0)
		return EXIT_UNREACHABLE;
	err = request(c, type, &r);
	kvs_close(c);
	if (err == 0) {
		if (type == KVS_MSG_STATUS)
			(opt.json ? status_json : status_text)(&r);
		else
			(opt.json ? stats_json : stats_text)(&r);
	}
	reply_free(&r);
	return err < 0 ? EXIT_UNREACHABLE : 0;
}

static int cmd_version(void)
{
	struct kvs_session_info info = { 0 };
	struct reply r = { 0 };
	struct kvs_client *c = NULL;
	char ver[sizeof(r.daemon.version) + 1];
	int err;

	/* Our side first: it is worth printing even when the daemon is down. */
	if (!opt.json) {
		printf("kvstash %s\n", PACKAGE_VERSION);
		printf("libkvstash %s (wire %u.%u)\n", kvs_version(), KVS_WIRE_MAJOR,
		       KVS_WIRE_MINOR);
		fflush(stdout);
	}
	err = connect_admin(&c);
	if (err == 0) {
		kvs_session_info(c, &info);
		err = request(c, KVS_MSG_STATUS, &r);
		kvs_close(c);
	}
	if (err == 0)
		wstr(ver, r.daemon.version, sizeof(r.daemon.version));
	if (opt.json) {
		struct jobj j = { { true } };

		jopen(&j, NULL, '{');
		jstr(&j, "kvstash", PACKAGE_VERSION);
		jstr(&j, "libkvstash", kvs_version());
		jstr(&j, "wire", fmt("%u.%u", KVS_WIRE_MAJOR, KVS_WIRE_MINOR));
		if (err == 0) {
			jopen(&j, "daemon", '{');
			jstr(&j, "version", ver);
			jstr(&j, "wire",
			     fmt("%u.%u", info.daemon_rev_major, info.daemon_rev_minor));
			ju64(&j, "pid", r.daemon.pid);
			jclose(&j, '}');
		} else {
			jnull(&j, "daemon");
		}
		jclose(&j, '}');
		putchar('\n');
	} else if (err == 0) {
		printf("kvstashd %s (wire %u.%u, pid %u)\n", printable(ver), info.daemon_rev_major,
		       info.daemon_rev_minor, r.daemon.pid);
	}
	reply_free(&r);
	return err < 0 ? EXIT_UNREACHABLE : 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	const char *cmd;
	int c, r;

	/* GNU getopt permutes: options may come before or after the command. */
	while ((c = getopt_long(argc, argv, "s:jt:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			opt.socket = optarg;
			break;
		case 'j':
			opt.json = true;
			break;
		case 't': {
			char *end;
			long v;

			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || v <= 0 || v > 3600000) {
				fprintf(stderr, "kvstash: --timeout wants milliseconds (1-3600000), not '%s'\n",
					optarg);
				return EXIT_USAGE;
			}
			opt.timeout_ms = (int)v;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kvstash %s (libkvstash %s, wire %u.%u)\n", PACKAGE_VERSION,
			       kvs_version(), KVS_WIRE_MAJOR, KVS_WIRE_MINOR);
			return 0;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "kvstash: a command is needed (status, stats or version)\n");
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = argv[optind];
	if (optind + 1 < argc) {
		fprintf(stderr, "kvstash: unexpected argument '%s'\n", argv[optind + 1]);
		return EXIT_USAGE;
	}
	if (opt.socket && (!*opt.socket || strlen(opt.socket) >= 108)) {
		fprintf(stderr, "kvstash: --socket needs a path of 1-107 bytes\n");
		return EXIT_USAGE;
	}
	if (strcmp(cmd, "status") == 0)
		r = cmd_query(KVS_MSG_STATUS);
	else if (strcmp(cmd, "stats") == 0)
		r = cmd_query(KVS_MSG_STATS);
	else if (strcmp(cmd, "version") == 0)
		r = cmd_version();
	else {
		fprintf(stderr, "kvstash: unknown command '%s' (status, stats or version)\n", cmd);
		return EXIT_USAGE;
	}
	/* A full disk or a closed pipe must not look like success. */
	if (fflush(stdout) != 0 || ferror(stdout)) {
		perror("kvstash: writing the output");
		return EXIT_UNREACHABLE;
	}
	return r;
}
