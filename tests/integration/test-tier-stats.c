/* SPDX-License-Identifier: MIT */
/*
 * The SSD tier in the admin views: a real kvstashd with [ssd] on two
 * files of a real disk (O_DIRECT), a real engine over real rings, the
 * real `kvstash` CLI and the real /metrics endpoint.
 *   - with [ssd], after blocks spilled (a pool of 256 blocks takes 512)
 *     and an evicted prompt came back from SSD: STATS carries one
 *     KVS_MSG_STATS_SSD and one KVS_MSG_STATS_SSD_DRIVE per drive;
 *     `kvstash stats --json` has "ssd" with spills, writes and bytes
 *     written, SSD hits (at least the prompt loaded back) and DRAM hits,
 *     both drives "online" with their paths, reads and latencies, regions
 *     opened and the datasyncs that made their erases durable;
 *     `kvstash stats` shows "SSD tier:" and the drives' table; /metrics
 *     exports kvstash_ssd_* per drive and kvstash_tier_hits_total, the
 *     drives' latencies as Prometheus histograms (cumulative buckets, the
 *     +Inf one equal to _count);
 *   - without [ssd]: no such message, no "ssd" member, no line, no family.
 * The JSON is checked by python3 (skipped without it, as test-metrics.sh
 * does), /metrics over a plain HTTP/1.0 socket (without libmicrohttpd:
 * skipped).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"
#include "ssdtest.h"

#define BLOCKS	64u
#define BATCH	16u
#define PROMPTS 32u /* 512 blocks through a pool of 256 */
#define SEG	8192u
#define LAYERS	4u

#if HAVE_MICROHTTPD
#define HAVE_METRICS true
#else
#define HAVE_METRICS false
#endif

static char ini[1024];
static bool have_python;

/* A TCP port free a moment ago (the kernel's pick), for [metrics] listen. */
static unsigned free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0, "socket: %s", strerror(errno));
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "bind: %s", strerror(errno));
	CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0, "getsockname");
	close(fd);
	return ntohs(a.sin_port);
}

static const char *stats_ini(bool ssd, unsigned port)
{
	int n = snprintf(ini, sizeof(ini), "[pool]\nsize = %u\nextent_size = 256K\n", 8u << 20);

#if HAVE_MICROHTTPD
	n += snprintf(ini + n, sizeof(ini) - (size_t)n, "[metrics]\nlisten = 127.0.0.1:%u\n", port);
#else
	(void)port;
#endif
	if (ssd)
		snprintf(ini + n, sizeof(ini) - (size_t)n,
			 "[ssd]\npath = %s/stats0, %s/stats1\nsize = 64M\nregion_size = 1M\n",
			 st_dir(), st_dir());
	return ini;
}

/* How many messages of each SSD type a STATS reply holds. */
struct count {
	unsigned tier, drives, online;
};

static int count_msg(void *arg, const struct kvs_msg_hdr *m)
{
	struct count *c = arg;

	if (m->type == KVS_MSG_STATS_SSD)
		c->tier++;
	if (m->type == KVS_MSG_STATS_SSD_DRIVE) {
		const struct kvs_msg_stats_ssd_drive *d = (const void *)m;

		c->drives++;
		c->online += d->state == 1 && strcmp(d->state_name, "online") == 0;
	}
	return 0;
}

/* What the tier still has to write: the store's bytes held, the drives' queues. */
static int busy_msg(void *arg, const struct kvs_msg_hdr *m)
{
	uint64_t *busy = arg;

	if (m->type == KVS_MSG_STATS_SSD)
		*busy += ((const struct kvs_msg_stats_ssd *)(const void *)m)->spilling_bytes;
	if (m->type == KVS_MSG_STATS_SSD_DRIVE)
		*busy += ((const struct kvs_msg_stats_ssd_drive *)(const void *)m)->queued_writes;
	return 0;
}

/*
 * Wait until the tier wrote all it took (the engine goes at the drive's
 * pace, as in test-tier-roundtrip.c; a block the drive was too slow for
 * is dropped, counted, and this test needs only some to come back).
 */
static void wait_idle(const struct kvsd *d)
{
	struct kvs_client *a;
	int r = test_admin(d, &a);

	CHECK(r == 0, "admin connect: %s", kvs_strerror(r));
	for (int i = 0; i < 3000; i++) {
		uint64_t busy = 0;

		r = kvs_admin_request(a, KVS_MSG_STATS, busy_msg, &busy);
		CHECK(r == 0, "STATS: %s", kvs_strerror(r));
		if (!busy) {
			kvs_close(a);
			return;
		}
		usleep(10000);
	}
	CHECK(false, "the SSD tier never finished its writes");
}

static struct count count_ssd(const struct kvsd *d)
{
	struct count c = { 0 };
	struct kvs_client *a;
	int r = test_admin(d, &a);

	CHECK(r == 0, "admin connect: %s", kvs_strerror(r));
	r = kvs_admin_request(a, KVS_MSG_STATS, count_msg, &c);
	CHECK(r == 0, "STATS: %s", kvs_strerror(r));
	kvs_close(a);
	return c;
}

/* Run @cmd with sh; its output into @out (NUL-terminated); its exit status. */
static int run(const char *cmd, char *out, size_t cap)
{
	FILE *f = popen(cmd, "r");
	size_t n = 0, k;
	int st;

	CHECK(f, "popen %s", cmd);
	while (n + 1 < cap && (k = fread(out + n, 1, cap - 1 - n, f)) > 0)
		n += k;
	out[n] = '\0';
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *cli(const struct kvsd *d, const char *args)
{
	static char cmd[1024];
	const char *top = getenv("top_builddir");

	snprintf(cmd, sizeof(cmd), "%s/tools/kvstash --socket %s %s", top ? top : ".", d->sock,
		 args);
	return cmd;
}

/*
 * `kvstash stats --json` through python3: with @ssd, what the traffic
 * makes certain (loose: the spill-ahead may still be writing); without,
 * no "ssd" member.  Exits non-zero and prints why when one fails.
 */
static const char check_ssd_py[] =
	"import json, sys\n"
	"d = json.load(sys.stdin)\n"
	"s = d['ssd']\n"
	"def need(ok, what):\n"
	"    if not ok: print('FAIL:', what, json.dumps(s, indent=1)); sys.exit(1)\n"
	"need(s['drives'] == 2 and s['drives_online'] == 2, 'two drives online')\n"
	"need(s['capacity_bytes'] > 0, 'capacity')\n"
	"need(s['spills']['spilled'] > 0, 'spilled > 0')\n"
	"need(s['writes']['admitted'] > 0, 'admitted > 0')\n"
	"need(s['bytes']['written'] > 0 and s['bytes']['read'] > 0, 'bytes written and read')\n"
	"need(s['hits']['ssd'] >= 16, 'the prompt loaded back counted as SSD hits')\n"
	"need(s['hits']['dram'] > 0, 'DRAM hits')\n"
	"need(0 < s['hits']['ssd_share'] < 1, 'the SSD share of hits')\n"
	"need(s['index']['blocks'] > 0 and s['index']['lookup_hits'] > 0, 'index')\n"
	"dr = s['per_drive']\n"
	"need([x['drive'] for x in dr] == [0, 1], 'drives 0 and 1')\n"
	"need([x['path'].endswith('/stats%d' % i) for i, x in enumerate(dr)] == [True, True],\n"
	"     'the paths')\n"
	"need(all(x['state'] == 'online' and x['state_code'] == 1 for x in dr), 'online')\n"
	"need(sum(x['ios']['writes'] for x in dr) > 0, 'writes')\n"
	"need(sum(x['bytes']['written'] for x in dr) <= s['bytes']['written'], 'byte sums')\n"
	"need(sum(x['ios']['reads'] for x in dr) > 0, 'reads')\n"
	"need(all(x['capacity_bytes'] > 0 and x['regions']['total'] > 0 for x in dr), 'sizes')\n"
	"need(all(x['regions']['opened'] >= 1 for x in dr), 'regions opened')\n"
	"need(all(1 <= x['regions']['erase_syncs'] <= x['regions']['opened'] for x in dr),\n"
	"     'datasyncs of the erases')\n"
	"need(any(x['latency']['write_p99_us'] > 0 for x in dr), 'write latency')\n"
	"need(any(x['latency']['read_p99_us'] > 0 for x in dr), 'read latency')\n"
	"need(all(x['latency']['write_p50_us'] <= x['latency']['write_p99_us'] for x in dr),\n"
	"     'p50 <= p99')\n"
	"need(all(sum(x['errors'].values()) == 0 for x in dr), 'no errors')\n";

static const char check_none_py[] = "import json, sys\n"
				    "d = json.load(sys.stdin)\n"
				    "sys.exit(0 if 'ssd' not in d and 'queries' in d else 1)\n";

static void check_json(const struct kvsd *d, bool ssd)
{
	static char out[65536];
	char cmd[2048], path[512];
	FILE *f;
	int st;

	if (!have_python)
		return;
	snprintf(path, sizeof(path), "%s/check.py", d->dir);
	f = fopen(path, "w");
	CHECK(f, "%s: %s", path, strerror(errno));
	fputs(ssd ? check_ssd_py : check_none_py, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "%s | python3 %s 2>&1", cli(d, "stats --json"), path);
	st = run(cmd, out, sizeof(out));
	CHECK(st == 0, "kvstash stats --json %s the SSD tier:\n%s", ssd ? "does not show" : "shows",
	      out);
}

static void check_text(const struct kvsd *d, bool ssd)
{
	static char out[65536];
	char cmd[1100];
	int st;

	snprintf(cmd, sizeof(cmd), "%s 2>&1", cli(d, "stats"));
	st = run(cmd, out, sizeof(out));
	CHECK(st == 0, "kvstash stats: %d\n%s", st, out);
	if (!ssd) {
		CHECK(!strstr(out, "SSD") && !strstr(out, "drive"), "SSD lines without [ssd]:\n%s",
		      out);
		return;
	}
	CHECK(strstr(out, "\nSSD tier:\n") && strstr(out, "\n  drives     2, 2 online"),
	      "no SSD tier lines:\n%s", out);
	CHECK(strstr(out, "\nPer drive:\n") && strstr(out, "/stats0") && strstr(out, "/stats1") &&
		      strstr(out, "online"),
	      "no drive table:\n%s", out);
}

#if HAVE_MICROHTTPD
/* GET /metrics over HTTP/1.0 into @buf; the body. */
static const char *scrape(unsigned port, char *buf, size_t cap)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	size_t n = 0;
	ssize_t k;
	const char *body;

	CHECK(fd >= 0, "socket");
	CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect to /metrics: %s",
	      strerror(errno));
	CHECK(write(fd, req, sizeof(req) - 1) == (ssize_t)sizeof(req) - 1, "send");
	while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	close(fd);
	buf[n] = '\0';
	CHECK(strncmp(buf, "HTTP/1.", 7) == 0 && strstr(buf, " 200 "), "scrape: %.80s", buf);
	body = strstr(buf, "\r\n\r\n");
	CHECK(body, "no body");
	return body + 4;
}

/* The value of sample line @name (labels included, exactly), or -1. */
static double sample(const char *body, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, name, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

/* One drive's histogram: cumulative buckets, +Inf == _count > 0, a _sum. */
static void check_hist(const char *body, const char *dir, unsigned drive, bool need_some)
{
	char name[256];
	double last = 0, v, count;
	int buckets = 0;
	const char *p;

	snprintf(name, sizeof(name),
		 "kvstash_ssd_io_duration_seconds_count{direction=\"%s\",drive=\"%u\"}", dir,
		 drive);
	count = sample(body, name);
	CHECK(count >= 0, "no %s", name);
	CHECK(!need_some || count > 0, "%s is 0", name);
	snprintf(name, sizeof(name),
		 "kvstash_ssd_io_duration_seconds_bucket{direction=\"%s\",drive=\"%u\",le=", dir,
		 drive);
	for (p = strstr(body, name); p; p = strstr(p + 1, name)) {
		v = strtod(strchr(p, ' ') + 1, NULL);
		CHECK(v >= last, "%s: buckets not cumulative", name);
		last = v;
		buckets++;
		if (strncmp(p + strlen(name), "\"+Inf\"}", 7) == 0)
			CHECK(v == count, "%s+Inf} %g != _count %g", name, v, count);
	}
	CHECK(buckets == 24, "%s: %d buckets", name, buckets);
	snprintf(name, sizeof(name),
		 "kvstash_ssd_io_duration_seconds_sum{direction=\"%s\",drive=\"%u\"}", dir, drive);
	v = sample(body, name);
	CHECK(v >= 0 && (count == 0 || v > 0), "%s: %g", name, v);
}

static void check_metrics(unsigned port, bool ssd)
{
	static char buf[1 << 20];
	const char *body = scrape(port, buf, sizeof(buf));
	double w0, w1;

	if (!ssd) {
		CHECK(!strstr(body, "kvstash_ssd_") && !strstr(body, "kvstash_tier_hits_total"),
		      "SSD families without [ssd]");
		return;
	}
	CHECK(strstr(body, "# TYPE kvstash_ssd_io_duration_seconds histogram\n"),
	      "no latency histogram family");
	CHECK(strstr(body, "# TYPE kvstash_tier_hits_total counter\n"), "no hits by tier");
	CHECK(sample(body, "kvstash_ssd_drives") == 2, "kvstash_ssd_drives");
	CHECK(sample(body, "kvstash_ssd_drives_online") == 2, "kvstash_ssd_drives_online");
	CHECK(sample(body, "kvstash_tier_hits_total{tier=\"ssd\"}") >= BATCH, "SSD hits");
	CHECK(sample(body, "kvstash_tier_hits_total{tier=\"dram\"}") > 0, "DRAM hits");
	CHECK(sample(body, "kvstash_ssd_spilled_total") > 0, "spilled");
	for (unsigned i = 0; i < 2; i++) {
		char name[128];

		snprintf(name, sizeof(name), "kvstash_ssd_drive_state{drive=\"%u\"}", i);
		CHECK(sample(body, name) == 1, "%s: not online", name);
		snprintf(name, sizeof(name), "kvstash_ssd_queued_writes{drive=\"%u\"}", i);
		CHECK(sample(body, name) >= 0, "no %s", name);
		snprintf(name, sizeof(name), "kvstash_ssd_errors_total{kind=\"crc\",drive=\"%u\"}",
			 i);
		CHECK(sample(body, name) == 0, "%s", name);
		snprintf(name, sizeof(name), "kvstash_ssd_erase_syncs_total{drive=\"%u\"}", i);
		CHECK(sample(body, name) >= 1, "%s", name);
		check_hist(body, "write", i, false);
		check_hist(body, "read", i, false);
	}
	w0 = sample(body, "kvstash_ssd_ios_total{direction=\"write\",drive=\"0\"}");
	w1 = sample(body, "kvstash_ssd_ios_total{direction=\"write\",drive=\"1\"}");
	CHECK(w0 >= 0 && w1 >= 0 && w0 + w1 > 0, "SSD writes: %g + %g", w0, w1);
	CHECK(sample(body,
		     "kvstash_ssd_io_duration_seconds_count{direction=\"write\",drive=\"0\"}") +
			      sample(body, "kvstash_ssd_io_duration_seconds_count{direction="
					   "\"write\",drive=\"1\"}") >
		      0,
	      "no write in the histograms");
}
#else
static void check_metrics(unsigned port, bool ssd)
{
	(void)port;
	(void)ssd;
}
#endif

static void with_ssd(void)
{
	static uint8_t keys[PROMPTS][BATCH * 16];
	unsigned port = free_port(), pending, p;
	uint32_t ids[BATCH];
	struct kvs_client *c;
	struct test_kv kv;
	struct kvs_cqe q, e;
	struct count n;
	struct kvsd d;

	it_start(&d, stats_ini(true, port));
	c = it_worker(&d, "stats", "model-stats", 0, 1, &kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS,
		      SEG);
	for (p = 0; p < PROMPTS; p++) {
		it_keys(keys[p], BATCH, 300 + p);
		it_ids(ids, BATCH, (p % 2) * BATCH);
		for (unsigned i = 0; i < BATCH; i++)
			test_kv_fill(&kv, ids[i], it_seed(300 + p, i));
		CHECK_RES(it_save(c, keys[p], ids, BATCH).res, BATCH, "SAVE");
		it_flush(c);
		wait_idle(&d);
	}
	/* The oldest prompt the tier kept whole, evicted long ago: it comes back from SSD. */
	for (p = 0; p < PROMPTS / 2; p++)
		if (it_query(c, keys[p], BATCH, KVS_QUERY_NOLEASE).res == BATCH &&
		    it_query(c, keys[p], BATCH, KVS_QUERY_NOLEASE | KVS_QUERY_DRAM).res == 0)
			break;
	CHECK(p < PROMPTS / 2, "no evicted prompt is whole on SSD");
	it_ids(ids, BATCH, 2 * BATCH);
	q = it_query(c, keys[p], BATCH, 0);
	CHECK_RES(q.res, BATCH, "QUERY of an evicted prompt");
	pending = KVS_CQE_PENDING(q.flags);
	CHECK(pending > 0, "the evicted prompt was not read from SSD");
	e = it_load(c, q.result0, ids, BATCH, 0, 0);
	CHECK_RES(e.res, BATCH, "LOAD from SSD");
	for (unsigned i = 0; i < BATCH; i++)
		CHECK(test_kv_check(&kv, ids[i], it_seed(300 + p, i)), "block %u differs", i);
	/* The newest prompt is still in DRAM: hits of the other tier. */
	q = it_query(c, keys[PROMPTS - 1], BATCH, KVS_QUERY_NOLEASE | KVS_QUERY_DRAM);
	CHECK(q.res > 0, "the newest prompt is not in DRAM (%d)", q.res);

	n = count_ssd(&d);
	CHECK(n.tier == 1 && n.drives == 2 && n.online == 2,
	      "STATS: %u SSD tier messages, %u drives, %u online", n.tier, n.drives, n.online);
	check_json(&d, true);
	check_text(&d, true);
	check_metrics(port, true);
	it_ok("with [ssd]: the tier and its 2 drives in STATS, kvstash stats (text, JSON%s) and "
	      "/metrics%s after %u blocks spilled and %u came back",
	      have_python ? "" : " skipped: no python3", HAVE_METRICS ? "" : " (not built)",
	      PROMPTS * BATCH, pending);
	kvs_close(c);
	test_kv_free(&kv);
	it_stop(&d);
}

static void without_ssd(void)
{
	unsigned port = free_port();
	struct count n;
	struct kvsd d;

	it_start(&d, stats_ini(false, port));
	n = count_ssd(&d);
	CHECK(n.tier == 0 && n.drives == 0, "STATS without [ssd]: %u tier, %u drive messages",
	      n.tier, n.drives);
	check_json(&d, false);
	check_text(&d, false);
	check_metrics(port, false);
	it_ok("without [ssd]: nothing of the tier in STATS, kvstash stats or /metrics");
	it_stop(&d);
}

int main(void)
{
	it_watchdog(240);
	have_python = system("python3 -c '' >/dev/null 2>&1") == 0;
	(void)st_dir(); /* exits 77 without a disk for O_DIRECT */
	without_ssd();
	with_ssd();
	return 0;
}
