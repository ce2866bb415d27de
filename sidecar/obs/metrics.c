/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#if HAVE_MICROHTTPD
#include <microhttpd.h>
#endif

#include <kvstash/wire.h>

#include "obs/log.h"
#include "obs/metrics.h"
#include "base/util.h"

#if HAVE_MICROHTTPD

/*
 * The rows of the tables of <kvstash/stats.h> as Prometheus sees them: a
 * value (a field of the group's message, a difference of counters, a
 * histogram, the error kinds) or a label (a KEY field), or the place of
 * another group's families.
 */
enum prow_what {
	PR_SKIP,
	PR_FIELD,   /* a field of the message, at off */
	PR_LABEL,   /* a KEY field of the message, at off: a label of its samples */
	PR_CTR,	    /* a counter, at off in the counters */
	PR_DIFF,    /* counters at off minus off_b */
	PR_HIST,    /* a struct hist at off in the counters */
	PR_ERRKIND, /* the error kinds' counts at off in the counters */
	PR_GROUP,   /* the families of group `group` */
};

enum prow_group {
	PG_NODE,
	PG_SESSION,
	PG_REGISTRY,
	PG_SSD,
	PG_SSD_DRIVE, /* within PG_SSD's: rendered with it */
	PG_PEER,
	PG_PEER_INFO, /* within PG_PEER's: not exported (per peer) */
};

struct prow {
	uint8_t what;
	uint8_t type; /* PR_FIELD, PR_LABEL: KVS_STATS_T_* */
	uint8_t unit; /* PR_FIELD: KVS_STATS_U_* */
	uint8_t group;
	uint32_t off, off_b;
	const char *prom; /* the family's name, then its constant labels in braces */
	const char *ptype;
	const char *help;
};

#define PR_KIND_KEY	PR_LABEL
#define PR_KIND_COUNTER PR_FIELD
#define PR_KIND_GAUGE	PR_FIELD
#define PR_TYPE_KEY	NULL
#define PR_TYPE_COUNTER "counter"
#define PR_TYPE_GAUGE	"gauge"
#define PR_I_U64	PR_CTR, "counter"
#define PR_I_HIST	PR_HIST, "histogram"
#define PR_I_ERRKIND	PR_ERRKIND, "counter"

/* PMSG and PCTR: the message and counter structs of the table expanded. */
#define PROW_(shape, ...) PROW_##shape(__VA_ARGS__)
#define PROW_F(type, name, kind, src, unit, sec, key, line, text, prom, help) \
	{ PR_KIND_##kind,                                                     \
	  KVS_STATS_T_##type,                                                 \
	  KVS_STATS_U_##unit,                                                 \
	  0,                                                                  \
	  offsetof(PMSG, name),                                               \
	  0,                                                                  \
	  prom,                                                               \
	  PR_TYPE_##kind,                                                     \
	  help },
#define PROW_D(name, formula, a, b, sec, key, line, text, prom, help) \
	PROW_D_##formula(a, b, prom, help)
#define PROW_D_DIFF(a, b, prom, help) \
	{ PR_DIFF, 0, 0, 0, offsetof(PCTR, a), offsetof(PCTR, b), prom, "gauge", help },
#define PROW_D_SUB0(...)
#define PROW_D_PCT(...)
#define PROW_D_SHARE(...)
#define PROW_D_RATE(...)
#define PROW_D_PAIR(...)
#define PROW_S(group, ...)	       { PR_GROUP, 0, 0, PG_##group, 0, 0, NULL, NULL, NULL },
#define PROW_I(type, name, prom, help) PROW_I2(PR_I_##type, name, prom, help)
#define PROW_I2(...)		       PROW_I3(__VA_ARGS__)
#define PROW_I3(what, ptype, name, prom, help) \
	{ what, 0, 0, 0, offsetof(PCTR, name), 0, prom, ptype, help },

#define PMSG struct kvs_msg_stats_global
#define PCTR struct counters_global
static const struct prow global_rows[] = { KVS_STATS_GLOBAL(PROW_) };
#undef PMSG
#undef PCTR
#define PMSG struct kvs_msg_stats_node
static const struct prow node_rows[] = { KVS_STATS_NODE(PROW_) };
#undef PMSG
#define PMSG struct kvs_msg_stats_session
static const struct prow session_rows[] = { KVS_STATS_SESSION(PROW_) };
#undef PMSG
#define PMSG struct kvs_msg_stats_registry
static const struct prow registry_rows[] = { KVS_STATS_REGISTRY(PROW_) };
#undef PMSG
#define PMSG struct kvs_msg_stats_ssd
static const struct prow ssd_rows[] = { KVS_STATS_SSD(PROW_) };
#undef PMSG
/* Its I rows are histograms of the sampler's struct metrics_ssd_hists, one per drive. */
#define PMSG struct kvs_msg_stats_ssd_drive
#define PCTR struct metrics_ssd_hists
static const struct prow ssd_drive_rows[] = { KVS_STATS_SSD_DRIVE(PROW_) };
#undef PMSG
#undef PCTR
/* Its I row is the histogram of the sampler's struct metrics_peer_hists. */
#define PMSG struct kvs_msg_stats_peer
#define PCTR struct metrics_peer_hists
static const struct prow peer_rows[] = { KVS_STATS_PEER(PROW_) };
#undef PMSG
#undef PCTR

static struct {
	struct MHD_Daemon *mhd;
	metrics_sample_fn *sample;
	void *arg;
	int ready; /* atomic */
} M;

struct buf {
	char *p;
	size_t len, cap;
	bool oom;
	const char *family; /* the last family whose header went out */
	size_t family_len;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap * 2 + (size_t)(n > 0 ? n : 0);
		char *p = realloc(b->p, cap);

		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

static size_t name_len(const char *prom)
{
	return strcspn(prom, "{");
}

/* HELP and TYPE of @r's family, unless the row before it began the same family. */
static void family(struct buf *b, const struct prow *r)
{
	size_t n = name_len(r->prom);

	if (b->family && b->family_len == n && memcmp(b->family, r->prom, n) == 0)
		return;
	b->family = r->prom;
	b->family_len = n;
	put(b, "# HELP %.*s %s\n# TYPE %.*s %s\n", (int)n, r->prom, r->help, (int)n, r->prom,
	    r->ptype);
}

/* "{constant labels,@more}" of @r's samples, or "" with neither. */
static const char *labels(char *out, size_t len, const struct prow *r, const char *more)
{
	const char *c = r->prom + name_len(r->prom);
	size_t cl = c[0] ? strlen(c) - 2 : 0; /* the constant labels, braces off */

	if (!cl && !more[0])
		out[0] = '\0';
	else
		snprintf(out, len, "{%.*s%s%s}", (int)cl, cl ? c + 1 : "", cl && more[0] ? "," : "",
			 more);
	return out;
}

static uint64_t msg_u64(const void *msg, const struct prow *r)
{
	uint64_t v = 0;
	uint32_t v32;

	if (r->type == KVS_STATS_T_U64) {
		memcpy(&v, (const uint8_t *)msg + r->off, sizeof(v));
	} else { /* U32, BOOL: an I32 field is a KEY (a label) so far */
		memcpy(&v32, (const uint8_t *)msg + r->off, sizeof(v32));
		v = v32;
	}
	/* Time in milliseconds is exported in whole seconds (uptime_ms). */
	return r->unit == KVS_STATS_U_MS ? v / 1000 : v;
}

static uint64_t ctr_u64(const struct counters_global *c, uint32_t off)
{
	return counter_get((const uint64_t *)((const uint8_t *)c + off));
}

static void histogram(struct buf *b, const struct prow *r, const struct hist *live)
{
	size_t n = name_len(r->prom);
	const char *c = r->prom + n; /* "{direction=\"save\"}" or "" */
	int cl = c[0] ? (int)strlen(c) - 2 : 0;
	const char *cv = cl ? c + 1 : ""; /* the constant labels, braces off */
	struct hist h;
	uint64_t cum = 0;

	hist_read(live, &h);
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		cum += h.buckets[i];
		if (i < HIST_BUCKETS - 1)
			put(b, "%.*s_bucket{%.*s%sle=\"%g\"} %" PRIu64 "\n", (int)n, r->prom, cl,
			    cv, cl ? "," : "", hist_bounds_s[i], cum);
		else
			put(b, "%.*s_bucket{%.*s%sle=\"+Inf\"} %" PRIu64 "\n", (int)n, r->prom, cl,
			    cv, cl ? "," : "", cum);
	}
	put(b, "%.*s_sum%s %.9f\n", (int)n, r->prom, c, h.sum_ns / 1e9);
	put(b, "%.*s_count%s %" PRIu64 "\n", (int)n, r->prom, c, h.count);
}

/* The labels @msg's KEY fields name, comma-separated, into @lab. */
static const char *key_labels(char *lab, size_t len, const struct prow *rows, size_t nrows,
			      const uint8_t *msg)
{
	size_t ll = 0;

	lab[0] = '\0';
	for (size_t k = 0; k < nrows && ll < len; k++) {
		const struct prow *kr = &rows[k];
		int32_t i32;
		uint32_t u32;
		uint64_t u64;

		if (kr->what != PR_LABEL || !kr->prom)
			continue;
		if (kr->type == KVS_STATS_T_I32) {
			memcpy(&i32, msg + kr->off, sizeof(i32));
			ll += snprintf(lab + ll, len - ll, "%s%s=\"%d\"", ll ? "," : "", kr->prom,
				       i32);
		} else if (kr->type == KVS_STATS_T_U64) {
			memcpy(&u64, msg + kr->off, sizeof(u64));
			ll += snprintf(lab + ll, len - ll, "%s%s=\"%" PRIu64 "\"", ll ? "," : "",
				       kr->prom, u64);
		} else {
			memcpy(&u32, msg + kr->off, sizeof(u32));
			ll += snprintf(lab + ll, len - ll, "%s%s=\"%u\"", ll ? "," : "", kr->prom,
				       u32);
		}
	}
	return lab;
}

/*
 * A drive's or the peer service's latency histogram (metrics.h: bucket i
 * below 2^i us) as a Prometheus histogram in seconds, with the drive's
 * labels @lab ("" for the peer service's).
 */
static void ssd_histogram(struct buf *b, const struct prow *r, const char *lab,
			  const struct metrics_ssd_hist *h)
{
	int n = (int)name_len(r->prom);
	char le[320], all[512];
	uint64_t cum = 0;

	for (unsigned i = 0; i < METRICS_SSD_BUCKETS; i++) {
		cum += h->buckets[i];
		if (i < METRICS_SSD_BUCKETS - 1)
			snprintf(le, sizeof(le), "%s%sle=\"%g\"", lab, lab[0] ? "," : "",
				 (double)(1ull << i) / 1e6);
		else
			snprintf(le, sizeof(le), "%s%sle=\"+Inf\"", lab, lab[0] ? "," : "");
		put(b, "%.*s_bucket%s %" PRIu64 "\n", n, r->prom, labels(all, sizeof(all), r, le),
		    cum);
	}
	put(b, "%.*s_sum%s %.9f\n", n, r->prom, labels(all, sizeof(all), r, lab),
	    (double)h->sum_ns / 1e9);
	put(b, "%.*s_count%s %" PRIu64 "\n", n, r->prom, labels(all, sizeof(all), r, lab), cum);
}

/*
 * The families of a group with @n messages of @size bytes each; its I
 * rows (histograms) from @hists, @hsize bytes per message (NULL: none).
 */
static void group(struct buf *b, const struct prow *rows, size_t nrows, const void *msgs,
		  unsigned n, size_t size, const void *hists, size_t hsize)
{
	for (size_t i = 0; i < nrows; i++) {
		const struct prow *r = &rows[i];

		if (r->what == PR_HIST && hists && r->prom) {
			family(b, r);
			for (unsigned m = 0; m < n; m++) {
				char lab[256];

				key_labels(lab, sizeof(lab), rows, nrows,
					   (const uint8_t *)msgs + m * size);
				ssd_histogram(
					b, r, lab,
					(const struct metrics_ssd_hist *)((const uint8_t *)hists +
									  m * hsize + r->off));
			}
			continue;
		}
		if (r->what != PR_FIELD || !r->prom)
			continue;
		family(b, r);
		for (unsigned m = 0; m < n; m++) {
			const uint8_t *msg = (const uint8_t *)msgs + m * size;
			char lab[256], all[384];

			key_labels(lab, sizeof(lab), rows, nrows, msg);
			/* Microseconds are exported as (fractional) seconds, the base unit. */
			if (r->unit == KVS_STATS_U_US)
				put(b, "%.*s%s %.6f\n", (int)name_len(r->prom), r->prom,
				    labels(all, sizeof(all), r, lab),
				    (double)msg_u64(msg, r) / 1e6);
			else
				put(b, "%.*s%s %" PRIu64 "\n", (int)name_len(r->prom), r->prom,
				    labels(all, sizeof(all), r, lab), msg_u64(msg, r));
		}
	}
}

/* Everything here is readable from any thread: the sampler's figures and atomics. */
static void render(struct buf *b, const struct metrics_sample *smp)
{
	const struct counters_global *c = smp->ctr;
	char lab[128];

	family(b, &(struct prow){ .prom = "kvstash_build_info",
				  .ptype = "gauge",
				  .help = "Version of the running kvstashd." });
	put(b, "kvstash_build_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
	for (size_t i = 0; i < ARRAY_SIZE(global_rows); i++) {
		const struct prow *r = &global_rows[i];
		const uint64_t *kinds;

		if (r->what == PR_GROUP) {
			if (r->group == PG_NODE) {
				group(b, node_rows, ARRAY_SIZE(node_rows), smp->nodes,
				      smp->nr_nodes, sizeof(*smp->nodes), NULL, 0);
			} else if (r->group == PG_REGISTRY) {
				/* No [cluster]: not even the HELP lines. */
				if (smp->nr_registry)
					group(b, registry_rows, ARRAY_SIZE(registry_rows),
					      &smp->registry, 1, sizeof(smp->registry), NULL, 0);
			} else if (r->group == PG_SSD) {
				/* No [ssd]: not even the HELP lines.  Its drives after it. */
				if (!smp->nr_ssd)
					continue;
				group(b, ssd_rows, ARRAY_SIZE(ssd_rows), &smp->ssd, 1,
				      sizeof(smp->ssd), NULL, 0);
				group(b, ssd_drive_rows, ARRAY_SIZE(ssd_drive_rows),
				      smp->ssd_drives, smp->nr_ssd_drives, sizeof(*smp->ssd_drives),
				      smp->ssd_hists, sizeof(*smp->ssd_hists));
			} else if (r->group == PG_PEER) {
				/* No peer service: not even the HELP lines.  Its peers: never. */
				if (smp->nr_peer)
					group(b, peer_rows, ARRAY_SIZE(peer_rows), &smp->peer, 1,
					      sizeof(smp->peer), &smp->peer_hists,
					      sizeof(smp->peer_hists));
			} else {
				group(b, session_rows, ARRAY_SIZE(session_rows), NULL, 0,
				      sizeof(struct kvs_msg_stats_session), NULL, 0);
			}
			continue;
		}
		if (!r->prom || r->what == PR_LABEL || r->what == PR_SKIP)
			continue;
		family(b, r);
		switch (r->what) {
		case PR_FIELD:
			put(b, "%s %" PRIu64 "\n", r->prom, msg_u64(&smp->global, r));
			break;
		case PR_CTR:
			put(b, "%s %" PRIu64 "\n", r->prom, ctr_u64(c, r->off));
			break;
		case PR_DIFF:
			put(b, "%s %" PRIu64 "\n", r->prom,
			    ctr_u64(c, r->off) - ctr_u64(c, r->off_b));
			break;
		case PR_HIST:
			histogram(b, r, (const struct hist *)((const uint8_t *)c + r->off));
			break;
		case PR_ERRKIND:
			kinds = (const uint64_t *)((const uint8_t *)c + r->off);
			for (unsigned k = 0; k < ERRK_COUNT; k++) {
				char kind[64];

				snprintf(kind, sizeof(kind), "kind=\"%s\"", err_kind_name(k));
				put(b, "%.*s%s %" PRIu64 "\n", (int)name_len(r->prom), r->prom,
				    labels(lab, sizeof(lab), r, kind), counter_get(&kinds[k]));
			}
			break;
		}
	}
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
			     void *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result r;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	r = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_len, void **state)
{
	static char not_found[] = "not found\n", not_allowed[] = "method not allowed\n";
	static char ok[] = "ok\n", not_ready[] = "not ready\n";

	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", not_allowed,
			     sizeof(not_allowed) - 1, MHD_RESPMEM_PERSISTENT);
	if (strcmp(url, "/health") == 0) {
		bool ready = __atomic_load_n(&M.ready, __ATOMIC_ACQUIRE);

		return reply(conn, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
			     ready ? ok : not_ready, (ready ? sizeof(ok) : sizeof(not_ready)) - 1,
			     MHD_RESPMEM_PERSISTENT);
	}
	if (strcmp(url, "/metrics") == 0) {
		struct buf b = { .p = malloc(16384), .cap = 16384 };
		struct metrics_sample smp = { .max_nodes = METRICS_MAX_NODES };

		smp.nodes = calloc(smp.max_nodes, sizeof(*smp.nodes));
		if (!b.p || !smp.nodes) {
			free(b.p);
			free(smp.nodes);
			return MHD_NO;
		}
		M.sample(M.arg, &smp);
		render(&b, &smp);
		free(smp.nodes);
		if (b.oom) {
			free(b.p);
			return MHD_NO;
		}
		return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len,
			     MHD_RESPMEM_MUST_FREE);
	}
	return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain", not_found, sizeof(not_found) - 1,
		     MHD_RESPMEM_PERSISTENT);
}

/* "127.0.0.1:9464", "[::1]:9464" or ":9464" (all addresses). */
static int parse_listen(const char *s, struct sockaddr_storage *ss)
{
	char host[128];
	const char *colon = strrchr(s, ':');
	char *end;
	unsigned long port;

	if (!colon || (size_t)(colon - s) >= sizeof(host))
		return -EINVAL;
	port = strtoul(colon + 1, &end, 10);
	if (*end || end == colon + 1 || port == 0 || port > 65535)
		return -EINVAL;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	memset(ss, 0, sizeof(*ss));
	if (host[0] == '[') {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		size_t n = strlen(host);

		if (n < 2 || host[n - 1] != ']')
			return -EINVAL;
		host[n - 1] = '\0';
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		return inet_pton(AF_INET6, host + 1, &a->sin6_addr) == 1 ? 0 : -EINVAL;
	}
	struct sockaddr_in *a = (struct sockaddr_in *)ss;

	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)port);
	if (!host[0]) {
		a->sin_addr.s_addr = htonl(INADDR_ANY);
		return 0;
	}
	return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -EINVAL;
}

int metrics_start(const char *listen, metrics_sample_fn *fn, void *arg)
{
	struct sockaddr_storage ss;
	/* poll(), not select(): kvstashd's fds pass FD_SETSIZE (main() raises RLIMIT_NOFILE). */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;

	if (!listen[0])
		return 0;
	if (parse_listen(listen, &ss) < 0)
		return log_error_errno(EINVAL, "[metrics] listen = %s: expected HOST:PORT", listen);
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	M.sample = fn;
	M.arg = arg;
	M.mhd = MHD_start_daemon(flags, ntohs(((struct sockaddr_in *)&ss)->sin_port), NULL, NULL,
				 handle, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				 MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_CONNECTION_TIMEOUT,
				 10u, MHD_OPTION_END);
	if (!M.mhd)
		return log_error_errno(EADDRINUSE, "[metrics] cannot listen on %s", listen);
	log_info("metrics on http://%s/metrics", listen);
	return 0;
}

void metrics_set_ready(bool ready)
{
	/* Pairs with the load-acquire in handle(). */
	__atomic_store_n(&M.ready, ready, __ATOMIC_RELEASE);
}

void metrics_stop(void)
{
	if (M.mhd)
		MHD_stop_daemon(M.mhd);
	M.mhd = NULL;
}

#else /* !HAVE_MICROHTTPD */

int metrics_start(const char *listen, metrics_sample_fn *fn, void *arg)
{
	if (listen[0])
		return log_error_errno(ENOTSUP, "[metrics] listen is set but kvstashd was built without libmicrohttpd");
	return 0;
}

void metrics_set_ready(bool ready)
{
}

void metrics_stop(void)
{
}

#endif
