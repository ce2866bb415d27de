/* SPDX-License-Identifier: MIT */
/*
 * regnode: one cluster node's registry, as kvstashd will drive it, in a
 * process of its own, steered by a test over stdin/stdout.  It keeps a
 * resident set (what a node's store would hold), enqueues inserts and
 * removes from a producer thread as the I/O workers will, answers the
 * backfill callback from the resident set, and runs the registry on an
 * epoll loop with registry_fd()/registry_dispatch() only.
 *
 *   regnode --redis ADDR --node NAME [--cluster C] [--peer ADDR] [--ttl MS]
 *           [--queue N] [--command-timeout MS] [--password-file F] [--user U]
 *
 * Lines in: "<id> <command> args"; lines out: "<id> <answer>" (flush and
 * query answer when they complete).  Commands:
 *   geom NS NAME LAYERS SEGMENTS SEGBYTES TP REPLICATED  define namespace NS
 *   insert NS SEED FIRST N    resident + registry_insert()  -> ok ENQUEUED
 *   remove NS SEED FIRST N    not resident + registry_remove() -> ok ENQUEUED
 *   flush TIMEOUT_MS          registry_mark() + registry_flush() (everyone's
 *                             changes since the previous flush)
 *                             -> flush STATUS DELIVERED DROPPED
 *   alternate NS SEED I N     N inserts of key(SEED, I), one at a time,
 *                             owners (tallies) 0 and 1 in turn, on this
 *                             thread: the registry takes them in one go
 *                             -> ok ENQUEUED
 *   tflush T TIMEOUT_MS       as flush, of owner T's changes (0 or 1)
 *   query NS SEED FIRST N TIMEOUT_MS
 *                             -> query STATUS BEST NHOLDERS node:blocks:epoch:addr...
 *   stats                     -> stats key=value...
 *   shutdown                  registry_shutdown(), dispatch until closed -> closed
 * Keys: key(SEED, i) is SEED then i, little-endian u64s.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "cluster/registry.h"

#define MAX_NS 16

static struct registry_tally *owners[2];

struct res {
	uint8_t ns[REG_DIGEST_SIZE];
	uint8_t key[REG_KEY_SIZE];
	int present;
};

static struct registry *reg;
static uint8_t digests[MAX_NS][REG_DIGEST_SIZE];
static int have_ns[MAX_NS];
static struct res *resv;
static size_t nres, capres;
static uint32_t *index_;
static size_t index_cap; /* power of two */

static uint64_t h64(const uint8_t *ns, const uint8_t *key)
{
	uint64_t a, b;

	memcpy(&a, key, 8);
	memcpy(&b, key + 8, 8);
	a ^= b * 0x9e3779b97f4a7c15ull;
	a ^= (uint64_t)ns[0] << 56 | (uint64_t)ns[1] << 48;
	return a * 0xff51afd7ed558ccdull;
}

static void index_put(size_t i);

static void index_grow(void)
{
	free(index_);
	index_cap = index_cap ? index_cap * 2 : 1024;
	index_ = calloc(index_cap, sizeof(*index_));
	if (!index_)
		abort();
	for (size_t i = 0; i < nres; i++)
		index_put(i);
}

static void index_put(size_t i)
{
	uint64_t h = h64(resv[i].ns, resv[i].key);

	for (size_t p = 0;; p++) {
		uint32_t *s = &index_[(h + p) & (index_cap - 1)];

		if (!*s) {
			*s = (uint32_t)i + 1;
			return;
		}
	}
}

static struct res *find(const uint8_t *ns, const uint8_t *key)
{
	uint64_t h = h64(ns, key);

	if (!index_cap)
		return NULL;
	for (size_t p = 0;; p++) {
		uint32_t s = index_[(h + p) & (index_cap - 1)];

		if (!s)
			return NULL;
		if (!memcmp(resv[s - 1].ns, ns, REG_DIGEST_SIZE) &&
		    !memcmp(resv[s - 1].key, key, REG_KEY_SIZE))
			return &resv[s - 1];
	}
}

static void set_resident(const uint8_t *ns, const uint8_t *key, int present)
{
	struct res *e = find(ns, key);

	if (e) {
		e->present = present;
		return;
	}
	if (!present)
		return;
	if (nres == capres) {
		capres = capres ? 2 * capres : 4096;
		resv = realloc(resv, capres * sizeof(*resv));
		if (!resv)
			abort();
	}
	memcpy(resv[nres].ns, ns, REG_DIGEST_SIZE);
	memcpy(resv[nres].key, key, REG_KEY_SIZE);
	resv[nres].present = 1;
	nres++;
	if (nres * 2 > index_cap)
		index_grow();
	else
		index_put(nres - 1);
}

static uint32_t backfill(void *arg, uint64_t *cursor, struct registry_entry *out, uint32_t max)
{
	uint32_t n = 0;

	(void)arg;
	while (*cursor < nres && n < max) {
		const struct res *e = &resv[(*cursor)++];

		if (!e->present)
			continue;
		memcpy(out[n].ns, e->ns, REG_DIGEST_SIZE);
		memcpy(out[n].key, e->key, REG_KEY_SIZE);
		n++;
	}
	return n;
}

static void log_cb(void *arg, int level, int err, const char *msg)
{
	(void)arg;
	fprintf(stderr, "regnode[%d] log %d%s%s: %s\n", (int)getpid(), level, err ? " " : "",
		err ? strerror(err) : "", msg);
}

static void make_key(uint8_t *k, uint64_t seed, uint64_t i)
{
	memcpy(k, &seed, 8);
	memcpy(k + 8, &i, 8);
}

/* ---- the producer thread: enqueue as an I/O worker would --------------- */

struct produce {
	int op;
	const uint8_t *ns;
	uint8_t (*keys)[REG_KEY_SIZE];
	uint32_t n, done;
};

static void *producer(void *p)
{
	struct produce *w = p;

	w->done = w->op == 1
			  ? registry_insert(reg, NULL, w->ns, (const uint8_t(*)[16])w->keys, w->n)
			  : registry_remove(reg, NULL, w->ns, (const uint8_t(*)[16])w->keys, w->n);
	return NULL;
}

static uint32_t produce(int op, int nsid, uint64_t seed, uint64_t first, uint32_t n)
{
	struct produce w = { op, digests[nsid], malloc((size_t)n * REG_KEY_SIZE + 1), n, 0 };
	pthread_t t;

	if (!w.keys)
		abort();
	for (uint32_t i = 0; i < n; i++) {
		make_key(w.keys[i], seed, first + i);
		set_resident(digests[nsid], w.keys[i], op == 1);
	}
	/* Another thread, so the queue's multi-producer side is what runs. */
	if (pthread_create(&t, NULL, producer, &w) || pthread_join(t, NULL))
		abort();
	free(w.keys);
	return w.done;
}

/* ---- async answers ---------------------------------------------------------- */

static void flush_done(void *arg, const struct registry_flush_result *res)
{
	printf("%lu flush %d %" PRIu64 " %" PRIu64 "\n", (unsigned long)(uintptr_t)arg, res->status,
	       res->delivered, res->dropped);
	fflush(stdout);
}

static void query_done(void *arg, const struct registry_query_result *res)
{
	printf("%lu query %d %u %u", (unsigned long)(uintptr_t)arg, res->status, res->best,
	       res->nr_holders);
	for (uint32_t i = 0; i < res->nr_holders; i++)
		printf(" %s:%u:%" PRIu64 ":%s", res->holders[i].node, res->holders[i].blocks,
		       res->holders[i].epoch, res->holders[i].addr[0] ? res->holders[i].addr : "-");
	printf("\n");
	fflush(stdout);
}

static void print_stats(unsigned long id)
{
	struct registry_stats s;

	registry_get_stats(reg, &s);
	printf("%lu stats state=%s connected=%u leased=%u backfilling=%u epoch=%" PRIu64
	       " depth=%" PRIu64 " enqueued=%" PRIu64 " delivered=%" PRIu64
	       " dropped_overflow=%" PRIu64 " dropped_offline=%" PRIu64 " dropped_failed=%" PRIu64
	       " backfilled=%" PRIu64 " errors=%" PRIu64 " connects=%" PRIu64
	       " leases_acquired=%" PRIu64 " leases_lost=%" PRIu64 " rtt_us=%" PRIu64 "\n",
	       id, registry_state_name((int)s.state), s.connected, s.leased, s.backfilling, s.epoch,
	       s.queue_depth, s.enqueued, s.delivered, s.dropped_overflow, s.dropped_offline,
	       s.dropped_failed, s.backfilled, s.errors, s.connects, s.leases_acquired,
	       s.leases_lost, s.last_rtt_us);
	fflush(stdout);
}

static int handle(char *line, int *quit)
{
	char cmd[32], name[128];
	unsigned long id;
	int nsid, n;
	unsigned long long seed, first, cnt, layers, segs, segb, tp, repl, tmo;

	if (sscanf(line, "%lu %31s%n", &id, cmd, &n) < 2)
		return -1;
	line += n;
	if (!strcmp(cmd, "geom")) {
		struct nsdigest_layer lg[64];
		struct nsdigest_geometry g;

		if (sscanf(line, "%d %127s %llu %llu %llu %llu %llu", &nsid, name, &layers, &segs,
			   &segb, &tp, &repl) != 7 ||
		    nsid < 0 || nsid >= MAX_NS || layers == 0 || layers > 64)
			return -1;
		for (unsigned i = 0; i < layers; i++)
			lg[i] = (struct nsdigest_layer){ (uint32_t)segs, segb };
		g = (struct nsdigest_geometry){ name,	   repl ? 1 : (uint32_t)tp, (uint32_t)tp,
						repl != 0, (uint32_t)layers,	    lg };
		if (registry_digest(&g, digests[nsid]) < 0)
			return -1;
		have_ns[nsid] = 1;
		printf("%lu ok\n", id);
	} else if (!strcmp(cmd, "insert") || !strcmp(cmd, "remove")) {
		if (sscanf(line, "%d %llu %llu %llu", &nsid, &seed, &first, &cnt) != 4 ||
		    nsid < 0 || nsid >= MAX_NS || !have_ns[nsid])
			return -1;
		printf("%lu ok %u\n", id,
		       produce(cmd[0] == 'i' ? 1 : 2, nsid, seed, first, (uint32_t)cnt));
	} else if (!strcmp(cmd, "alternate")) {
		uint8_t key[REG_KEY_SIZE];
		uint32_t done = 0;

		if (sscanf(line, "%d %llu %llu %llu", &nsid, &seed, &first, &cnt) != 4 ||
		    nsid < 0 || nsid >= MAX_NS || !have_ns[nsid])
			return -1;
		for (int t = 0; t < 2; t++)
			if (!owners[t] && !(owners[t] = registry_tally_new(reg, NULL)))
				return -1;
		make_key(key, seed, first);
		set_resident(digests[nsid], key, 1);
		for (unsigned long long i = 0; i < cnt; i++)
			done += registry_insert(reg, owners[i & 1], digests[nsid],
						(const uint8_t(*)[16])key, 1);
		printf("%lu ok %u\n", id, done);
	} else if (!strcmp(cmd, "flush") || !strcmp(cmd, "tflush")) {
		struct registry_tally *t = NULL;
		struct registry_mark m;
		unsigned ti = 0;

		if (cmd[0] == 't') {
			if (sscanf(line, "%u %llu", &ti, &tmo) != 2 || ti > 1 || !owners[ti])
				return -1;
			t = owners[ti];
		} else if (sscanf(line, "%llu", &tmo) != 1) {
			return -1;
		}
		if (registry_mark(reg, t, &m) < 0 ||
		    registry_flush(reg, &m, (uint32_t)tmo, flush_done, (void *)(uintptr_t)id) < 0)
			return -1;
	} else if (!strcmp(cmd, "query")) {
		uint8_t(*keys)[REG_KEY_SIZE];
		int r;

		if (sscanf(line, "%d %llu %llu %llu %llu", &nsid, &seed, &first, &cnt, &tmo) != 5 ||
		    nsid < 0 || nsid >= MAX_NS || !have_ns[nsid] || !cnt)
			return -1;
		keys = malloc(cnt * REG_KEY_SIZE);
		for (unsigned long long i = 0; i < cnt; i++)
			make_key(keys[i], seed, first + i);
		r = registry_query(reg, digests[nsid], (const uint8_t(*)[16])keys, (uint32_t)cnt,
				   (uint32_t)tmo, query_done, (void *)(uintptr_t)id);
		free(keys);
		if (r < 0)
			return -1;
	} else if (!strcmp(cmd, "stats")) {
		print_stats(id);
	} else if (!strcmp(cmd, "shutdown")) {
		registry_shutdown(reg);
		*quit = (int)id;
	} else {
		return -1;
	}
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "redis", required_argument, NULL, 'r' },
		{ "node", required_argument, NULL, 'n' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "peer", required_argument, NULL, 'p' },
		{ "ttl", required_argument, NULL, 't' },
		{ "queue", required_argument, NULL, 'q' },
		{ "command-timeout", required_argument, NULL, 'o' },
		{ "password-file", required_argument, NULL, 'P' },
		{ "user", required_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
	};
	struct registry_config cfg = {
		.cluster = "test",
		.peer_addr = "",
		.lease_ttl_ms = 3000,
		.connect_timeout_ms = 500,
		.command_timeout_ms = 1000,
		.flush_timeout_ms = 10000,
		.query_timeout_ms = 5000,
		.queue_entries = 1u << 16,
	};
	struct registry_ops ops = { .backfill = backfill, .log = log_cb };
	static char secret[REG_SECRET_MAX];
	char why[512] = "", line[4096];
	struct epoll_event e = { .events = EPOLLIN };
	size_t have = 0;
	int c, ep, quit = 0, eof = 0;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			cfg.redis = optarg;
			break;
		case 'n':
			cfg.node = optarg;
			break;
		case 'c':
			cfg.cluster = optarg;
			break;
		case 'p':
			cfg.peer_addr = optarg;
			break;
		case 't':
			cfg.lease_ttl_ms = (uint32_t)atoi(optarg);
			break;
		case 'q':
			cfg.queue_entries = (uint32_t)atoi(optarg);
			break;
		case 'o':
			cfg.command_timeout_ms = (uint32_t)atoi(optarg);
			break;
		case 'P':
			if (registry_read_secret(optarg, secret, sizeof(secret), why, sizeof(why)) <
			    0) {
				fprintf(stderr, "regnode: %s\n", why);
				return 2;
			}
			cfg.password = secret;
			break;
		case 'u':
			cfg.user = optarg;
			break;
		default:
			return 2;
		}
	}
	if (registry_new(&cfg, &ops, &reg, why, sizeof(why)) < 0) {
		fprintf(stderr, "regnode: %s\n", why);
		return 2;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	e.data.u32 = 0;
	epoll_ctl(ep, EPOLL_CTL_ADD, 0, &e);
	e.data.u32 = 1;
	epoll_ctl(ep, EPOLL_CTL_ADD, registry_fd(reg), &e);
	for (;;) {
		struct epoll_event ev[4];
		int n = epoll_wait(ep, ev, 4, -1);

		if (n < 0 && errno == EINTR)
			continue;
		for (int i = 0; i < n; i++) {
			if (ev[i].data.u32 == 1) {
				registry_dispatch(reg);
				continue;
			}
			ssize_t rd = read(0, line + have, sizeof(line) - 1 - have);

			if (rd <= 0) {
				eof = 1;
				epoll_ctl(ep, EPOLL_CTL_DEL, 0, NULL);
				if (!quit) {
					registry_shutdown(reg);
					quit = -1;
				}
				continue;
			}
			have += (size_t)rd;
			line[have] = '\0';
			for (char *nl; (nl = strchr(line, '\n'));) {
				*nl = '\0';
				if (line[0] && handle(line, &quit) < 0) {
					printf("%s error\n", line);
					fflush(stdout);
				}
				size_t used = (size_t)(nl + 1 - line);

				memmove(line, line + used, have - used + 1);
				have -= used;
			}
		}
		if (quit && registry_closed(reg)) {
			if (quit > 0)
				printf("%d closed\n", quit);
			fflush(stdout);
			break;
		}
		(void)eof;
	}
	registry_free(reg);
	free(resv);
	free(index_);
	return 0;
}
