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

#include <kvstash/abi.h>

#include "store/store.h"
#include "control/daemon.h"
#include "control/instance.h"
#include "store/lease.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "base/util.h"

const double hist_bounds_s[HIST_BUCKETS - 1] = {
	100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0,
};

void hist_observe(struct hist *h, uint64_t ns)
{
	unsigned b = 0;

	while (b < HIST_BUCKETS - 1 && (double)ns > hist_bounds_s[b] * 1e9)
		b++;
	__atomic_fetch_add(&h->buckets[b], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->sum_ns, ns, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
}

static const char *const err_names[ERRK_COUNT] = {
	[ERRK_INVAL] = "invalid",	 [ERRK_RANGE] = "block_out_of_range",
	[ERRK_TOOBIG] = "too_many_keys", [ERRK_FAULT] = "bad_arguments",
	[ERRK_NOTSUP] = "unknown_op",	 [ERRK_PERM] = "not_permitted",
	[ERRK_UNSEALED] = "unsealed",	 [ERRK_NOLEASE] = "unknown_lease",
	[ERRK_ALREADY] = "lease_already_used", [ERRK_ACCES] = "foreign_lease",
	[ERRK_NOSPC] = "pool_full",	 [ERRK_BUSY] = "lease_limit",
	[ERRK_IO] = "copy_failed",	 [ERRK_CANCELED] = "canceled",
	[ERRK_NOMEM] = "out_of_memory",	 [ERRK_OTHER] = "other",
};

enum err_kind err_kind_of(int e)
{
	switch (-e) {
	case EINVAL: return ERRK_INVAL;
	case ERANGE: return ERRK_RANGE;
	case E2BIG: return ERRK_TOOBIG;
	case EFAULT: return ERRK_FAULT;
	case EOPNOTSUPP: return ERRK_NOTSUP;
	case EPERM: return ERRK_PERM;
	case KVS_EUNSEALED: return ERRK_UNSEALED;
	case ENOENT: return ERRK_NOLEASE;
	case EALREADY: return ERRK_ALREADY;
	case EACCES: return ERRK_ACCES;
	case ENOSPC: return ERRK_NOSPC;
	case EBUSY: return ERRK_BUSY;
	case EIO: return ERRK_IO;
	case ECANCELED: return ERRK_CANCELED;
	case ENOMEM: return ERRK_NOMEM;
	default: return ERRK_OTHER;
	}
}

const char *err_kind_name(enum err_kind k)
{
	return k < ERRK_COUNT ? err_names[k] : "other";
}

#if HAVE_MICROHTTPD

static struct {
	struct MHD_Daemon *mhd;
	struct daemon *d;
	int ready; /* atomic */
} M;

struct buf {
	char *p;
	size_t len, cap;
	bool oom;
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

static void family(struct buf *b, const char *name, const char *type, const char *help)
{
	put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void scalar(struct buf *b, const char *name, const char *type, const char *help, uint64_t v)
{
	family(b, name, type, help);
	put(b, "%s %" PRIu64 "\n", name, v);
}

static void histogram(struct buf *b, const char *dir, const struct hist *h)
{
	uint64_t cum = 0;

	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		cum += __atomic_load_n(&h->buckets[i], __ATOMIC_RELAXED);
		if (i < HIST_BUCKETS - 1)
			put(b, "kvstash_copy_duration_seconds_bucket{direction=\"%s\",le=\"%g\"} %" PRIu64 "\n",
			    dir, hist_bounds_s[i], cum);
		else
			put(b, "kvstash_copy_duration_seconds_bucket{direction=\"%s\",le=\"+Inf\"} %" PRIu64 "\n",
			    dir, cum);
	}
	put(b, "kvstash_copy_duration_seconds_sum{direction=\"%s\"} %.9f\n", dir,
	    __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED) / 1e9);
	put(b, "kvstash_copy_duration_seconds_count{direction=\"%s\"} %" PRIu64 "\n", dir,
	    __atomic_load_n(&h->count, __ATOMIC_RELAXED));
}

/* Everything here is readable from any thread: atomics or lock-taking getters. */
static void render(struct buf *b, struct daemon *d)
{
	struct store_region_stats rs[POOL_MAX_REGIONS];
	struct store_stats st;
	struct lease_stats ls;
	unsigned nr = store_region_stats(d->store, rs, POOL_MAX_REGIONS);
	uint64_t total = STAT_GET(d, sessions_total), closed = STAT_GET(d, sessions_closed);

	store_get_stats(d->store, &st);
	lease_get_stats(d->leases, &ls);

	family(b, "kvstash_build_info", "gauge", "Version of the running kvstashd.");
	put(b, "kvstash_build_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
	scalar(b, "kvstash_uptime_seconds", "gauge", "Seconds since kvstashd started.",
	       (now_ns() - d->start_ns) / NSEC_PER_SEC);

	family(b, "kvstash_pool_capacity_bytes", "gauge", "Host pool bytes, per NUMA node.");
	for (unsigned i = 0; i < nr; i++)
		put(b, "kvstash_pool_capacity_bytes{node=\"%d\"} %" PRIu64 "\n", rs[i].node,
		    rs[i].capacity_bytes);
	family(b, "kvstash_pool_used_bytes", "gauge", "Host pool bytes holding blocks, per NUMA node.");
	for (unsigned i = 0; i < nr; i++)
		put(b, "kvstash_pool_used_bytes{node=\"%d\"} %" PRIu64 "\n", rs[i].node,
		    rs[i].used_bytes);

	scalar(b, "kvstash_blocks_resident", "gauge", "Blocks visible to QUERY (every shard saved).",
	       st.resident);
	scalar(b, "kvstash_blocks_partial", "gauge", "Blocks waiting for shards of other ranks.",
	       st.partial);
	scalar(b, "kvstash_query_ops_total", "counter", "QUERY operations.", STAT_GET(d, query_ops));
	scalar(b, "kvstash_query_blocks_hit_total", "counter", "Blocks found by QUERY.",
	       STAT_GET(d, query_blocks_hit));
	scalar(b, "kvstash_query_blocks_missed_total", "counter",
	       "Blocks asked for by QUERY and not found (from the first miss on).",
	       STAT_GET(d, query_blocks_missed));
	scalar(b, "kvstash_save_ops_total", "counter", "SAVE operations.", STAT_GET(d, save_ops));
	scalar(b, "kvstash_save_blocks_stored_total", "counter", "Blocks copied into the pool.",
	       STAT_GET(d, save_blocks_stored));
	scalar(b, "kvstash_save_blocks_skipped_total", "counter",
	       "Blocks not copied because they were resident already.",
	       STAT_GET(d, save_blocks_skipped));
	scalar(b, "kvstash_load_ops_total", "counter", "LOAD operations.", STAT_GET(d, load_ops));
	scalar(b, "kvstash_load_blocks_total", "counter", "Blocks copied back to engines.",
	       STAT_GET(d, load_blocks));
	scalar(b, "kvstash_evictions_total", "counter", "Blocks evicted to make room.", st.evictions);
	scalar(b, "kvstash_partial_blocks_reclaimed_total", "counter",
	       "Blocks dropped because not every shard arrived in time.", st.partial_reclaimed);

	scalar(b, "kvstash_leases_live", "gauge", "Leases pinning blocks now.", ls.live);
	scalar(b, "kvstash_leases_created_total", "counter", "Leases created by QUERY.", ls.created);
	scalar(b, "kvstash_leases_expired_total", "counter", "Leases that reached their TTL.",
	       ls.expired);
	scalar(b, "kvstash_leases_released_total", "counter",
	       "Leases dropped by RELEASE or by their session's end.", ls.released);

	family(b, "kvstash_copy_bytes_total", "counter", "Bytes copied, per direction.");
	put(b, "kvstash_copy_bytes_total{direction=\"save\"} %" PRIu64 "\n", STAT_GET(d, bytes_saved));
	put(b, "kvstash_copy_bytes_total{direction=\"load\"} %" PRIu64 "\n", STAT_GET(d, bytes_loaded));
	family(b, "kvstash_copy_duration_seconds", "histogram",
	       "Time from an operation's copy start to its completion, per direction.");
	histogram(b, "save", &d->stats.save_hist);
	histogram(b, "load", &d->stats.load_hist);

	scalar(b, "kvstash_sessions", "gauge", "Engine and scheduler sessions connected.",
	       total - closed);
	scalar(b, "kvstash_sessions_total", "counter", "Sessions accepted since start.", total);
	scalar(b, "kvstash_sessions_refused_total", "counter", "HELLOs refused.",
	       STAT_GET(d, sessions_refused));
	scalar(b, "kvstash_protocol_errors_total", "counter",
	       "Sessions ended for breaking the ring protocol.", STAT_GET(d, protocol_errors));
	family(b, "kvstash_errors_total", "counter", "Operations that completed with an error, by kind.");
	for (unsigned k = 0; k < ERRK_COUNT; k++)
		put(b, "kvstash_errors_total{kind=\"%s\"} %" PRIu64 "\n", err_names[k],
		    __atomic_load_n(&d->stats.errors_by_kind[k], __ATOMIC_RELAXED));
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
		struct buf b = { malloc(16384), 0, 16384, false };

		if (!b.p)
			return MHD_NO;
		render(&b, M.d);
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

int metrics_start(struct daemon *d)
{
	const char *listen = d->cfg->metrics_listen;
	struct sockaddr_storage ss;
	/* poll(), not select(): kvstashd's fds pass FD_SETSIZE (main() raises RLIMIT_NOFILE). */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;

	if (!listen[0])
		return 0;
	if (parse_listen(listen, &ss) < 0)
		return log_error_errno(EINVAL, "[metrics] listen = %s: expected HOST:PORT", listen);
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	M.d = d;
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

int metrics_start(struct daemon *d)
{
	if (d->cfg->metrics_listen[0])
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
