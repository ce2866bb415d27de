/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvstash/peer.h>

#include "store/store.h"
#include "io/mover.h"
#include "control/daemon.h"
#include "control/instance.h"
#include "wire/layout.h"
#include "store/lease.h"
#include "store/pool.h"
#include "control/session.h"
#include "control/admin.h"
#include "obs/metrics.h"
#include "cluster/registry.h"
#include "ssd/ssd.h"
#include "control/peer-host.h"
#include "base/util.h"

#define HDR(m, t, sq)                     \
	do {                              \
		(m).hdr.type = (t);       \
		(m).hdr.size = sizeof(m); \
		(m).hdr.seq = (sq);       \
	} while (0)

/*
 * Replies go out as a train of packets ended by KVS_MSG_END: a few hundred
 * at max_sessions, more than a socket buffer holds.  The train is built
 * whole here (a snapshot of one moment) and queued on the session, which
 * sends it as the reader drains its socket (EPOLLOUT): the control thread
 * never blocks, and a slow reader gets every packet.  A reader that stops
 * reading costs this one train until admin_idle_timeout closes it.
 */
struct train {
	uint8_t *buf;
	size_t len, cap;
	int err;
};

static void put(struct train *t, const void *m, size_t len)
{
	if (t->err)
		return;
	if (t->len + len > t->cap) {
		size_t cap = MAX(t->cap * 2, t->len + len + 4096);
		uint8_t *n = realloc(t->buf, cap);

		if (!n) {
			t->err = -ENOMEM;
			return;
		}
		t->buf = n;
		t->cap = cap;
	}
	memcpy(t->buf + t->len, m, len);
	t->len += len;
}

static int send_train(struct session *admin, struct train *t, uint32_t seq)
{
	struct kvs_msg_hdr h = { .type = KVS_MSG_END, .size = sizeof(h), .seq = seq };

	put(t, &h, sizeof(h));
	if (t->err) {
		free(t->buf);
		return t->err;
	}
	return session_queue(admin, t->buf, t->len);
}

static bool listed(const struct session *s)
{
	return s->state == S_ACTIVE && s->hello.role != KVS_ROLE_ADMIN;
}

/*
 * The module's fields of each group's message: its rows of source MOD
 * (STORE) in <kvstash/stats.h>, copied by name.  The rows of source SMP
 * are filled below by hand: names, sums, quantiles, times since.
 */
KVS_STATS_COPY(registry_msg_copy, kvs_msg_stats_registry, registry_stats, KVS_STATS_REGISTRY, MOD)
KVS_STATS_COPY(ssd_msg_copy, kvs_msg_stats_ssd, ssd_stats, KVS_STATS_SSD, MOD)
KVS_STATS_COPY(store_msg_copy, kvs_msg_stats_ssd, store_stats, KVS_STATS_SSD, STORE)
KVS_STATS_COPY(drive_msg_copy, kvs_msg_stats_ssd_drive, ssd_drive_stats, KVS_STATS_SSD_DRIVE, MOD)
KVS_STATS_COPY(peer_msg_copy, kvs_msg_stats_peer, kvspeer_stats, KVS_STATS_PEER, MOD)

/*
 * The registry client's message, when kvstashd has one ([cluster]); false
 * without, and the replies and the scrape then carry none.  The values are
 * registry_get_stats()'s relaxed reads: safe on the metrics thread too,
 * where d->reg outlives every scrape (metrics_stop() comes first in
 * daemon_fini()).
 */
static bool sample_registry(struct daemon *d, struct kvs_msg_stats_registry *m)
{
	struct registry_stats st;

	if (!d->reg)
		return false;
	registry_get_stats(d->reg, &st);
	registry_msg_copy(m, &st);
	strscpy_trunc(m->state_name, registry_state_name((int)st.state), sizeof(m->state_name));
	strscpy_trunc(m->master, st.master, sizeof(m->master));
	/* Literals of ours: GCC takes strscpy_trunc()'s bound for a read past them. */
	snprintf(m->discovery, sizeof(m->discovery), "%s", st.sentinel ? "sentinel" : "direct");
	strscpy_trunc(m->master_name, st.master_name, sizeof(m->master_name));
	m->last_failover_ms =
		st.last_failover_ns ? (now_ns() - st.last_failover_ns) / NSEC_PER_MSEC : 0;
	strscpy_trunc(m->last_failover_from, st.last_failover_from, sizeof(m->last_failover_from));
	snprintf(m->incarnation, sizeof(m->incarnation), "%s", st.incarnation);
	return true;
}

_Static_assert(METRICS_SSD_BUCKETS == SSD_HIST_BUCKETS, "metrics.h mirrors the SSD histograms");
_Static_assert(METRICS_SSD_DRIVES >= SSD_MAX_DRIVES, "a scrape holds every drive");

/*
 * The upper bound, in microseconds, of the bucket of @h (@n buckets) where
 * quantile @permille falls (bucket i: below 2^i us; the last is open, its
 * lower bound stands in); 0 when @h is empty.
 */
static uint64_t quantile_us(const uint64_t *h, unsigned n, unsigned permille)
{
	uint64_t total = 0, want, cum = 0;

	for (unsigned i = 0; i < n; i++)
		total += h[i];
	if (!total)
		return 0;
	want = (total * permille + 999) / 1000;
	for (unsigned i = 0; i < n - 1; i++) {
		cum += h[i];
		if (cum >= want)
			return 1ull << i;
	}
	return 1ull << (n - 2);
}

/* @path's last bytes that fit a wire name: the file's name matters most. */
static void path_tail(char *dst, const char *path)
{
	size_t n = strlen(path);

	strscpy_trunc(dst, n < KVS_NAME_MAX ? path : path + n - (KVS_NAME_MAX - 1), KVS_NAME_MAX);
}

static void hist_copy(struct metrics_ssd_hist *dst, const uint64_t *h, uint64_t sum_ns)
{
	memcpy(dst->buckets, h, sizeof(dst->buckets));
	dst->sum_ns = sum_ns;
}

/*
 * The SSD tier's message and one per drive (into @drv, and their
 * histograms into @hists unless NULL), when kvstashd has the tier
 * ([ssd]); false without, and the replies and the scrape carry none.
 * ssd_get_stats() and store_get_stats() are relaxed reads, safe on the
 * metrics thread too, where d->ssd outlives every scrape (metrics_stop()
 * comes before tier_close() in daemon_fini()).
 */
static bool sample_ssd(struct daemon *d, struct kvs_msg_stats_ssd *m,
		       struct kvs_msg_stats_ssd_drive *drv, struct metrics_ssd_hists *hists)
{
	struct ssd_stats ss;
	struct store_stats st;
	uint64_t hits;

	if (!d->ssd)
		return false;
	/*
	 * DRAM hits are every QUERY hit less the SSD ones.  The store counts
	 * a QUERY's SSD hits before the worker counts its hits (account_query()
	 * after store_query_tiers(), one thread): reading the store first
	 * keeps the difference from going below what it was.
	 */
	store_get_stats(d->store, &st);
	hits = counter_get(&d->ctr.query_blocks_hit);
	ssd_get_stats(d->ssd, &ss);
	ssd_msg_copy(m, &ss);
	store_msg_copy(m, &st);
	m->nr_drives = ss.nr_drives;
	m->hits_dram = hits > st.hits_ssd ? hits - st.hits_ssd : 0;
	m->index_entries = ss.index_entries;
	m->index_bytes = ss.index_bytes;
	for (unsigned i = 0; i < ss.nr_drives && i < SSD_MAX_DRIVES; i++) {
		const struct ssd_drive_stats *s = &ss.drive[i];
		struct kvs_msg_stats_ssd_drive *o = &drv[i];
		const char *path = ssd_drive_path(d->ssd, i);

		m->drives_online += s->state == SSD_DRIVE_ONLINE;
		m->capacity_bytes += s->capacity_bytes;
		m->reads_pending += s->reads_pending;
		m->bytes_written += s->bytes_written;
		m->bytes_read += s->bytes_read;
		drive_msg_copy(o, s);
		o->drive = i;
		path_tail(o->path, path ? path : "");
		strscpy_trunc(o->state_name, ssd_drive_state_name(s->state), sizeof(o->state_name));
		o->recovery_us = s->recovery_ns / 1000;
		o->write_p50_us = quantile_us(s->write_lat, SSD_HIST_BUCKETS, 500);
		o->write_p99_us = quantile_us(s->write_lat, SSD_HIST_BUCKETS, 990);
		o->read_p50_us = quantile_us(s->read_lat, SSD_HIST_BUCKETS, 500);
		o->read_p99_us = quantile_us(s->read_lat, SSD_HIST_BUCKETS, 990);
		if (hists) {
			hist_copy(&hists[i].write_lat, s->write_lat, s->write_lat_sum_ns);
			hist_copy(&hists[i].read_lat, s->read_lat, s->read_lat_sum_ns);
		}
	}
	return true;
}

/* Append the SSD tier's messages to @t, if kvstashd has the tier. */
static void put_ssd(struct daemon *d, struct train *t, uint32_t seq)
{
	struct kvs_msg_stats_ssd m = { 0 };
	struct kvs_msg_stats_ssd_drive drv[SSD_MAX_DRIVES] = { 0 };

	if (!sample_ssd(d, &m, drv, NULL))
		return;
	HDR(m, KVS_MSG_STATS_SSD, seq);
	put(t, &m, sizeof(m));
	for (unsigned i = 0; i < m.nr_drives && i < SSD_MAX_DRIVES; i++) {
		HDR(drv[i], KVS_MSG_STATS_SSD_DRIVE, seq);
		put(t, &drv[i], sizeof(drv[i]));
	}
}

_Static_assert(METRICS_SSD_BUCKETS == KVSPEER_HIST_BUCKETS, "metrics.h mirrors the peer histogram");
_Static_assert(KVSPEER_ADDR_MAX <= KVS_NAME_MAX && KVSPEER_NAME_MAX <= KVS_NAME_MAX,
	       "a peer's address and node name fit a wire name");

/*
 * The peers a reply lists, and a scrape counts, at most: the sampler's
 * array is fixed (kvspeer_peers() leaves the others out), and a node
 * talks to its cluster's few dozen peers, far fewer.
 */
#define PEERS_MAX 256u

static const char *peer_role_name(uint32_t role)
{
	switch (role) {
	case KVSPEER_PEER_SERVER:
		return "server";
	case KVSPEER_PEER_CLIENT:
		return "client";
	default:
		return "unknown";
	}
}

static const char *peer_state_name(uint32_t state)
{
	static const char *const names[] = {
		[KVSPEER_PEER_IDLE] = "idle",
		[KVSPEER_PEER_BUSY] = "busy",
		[KVSPEER_PEER_CONNECTING] = "connecting",
		[KVSPEER_PEER_FAILED] = "failed",
		[KVSPEER_PEER_CLOSED] = "closed",
	};

	return state < ARRAY_SIZE(names) && names[state] ? names[state] : "unknown";
}

/*
 * The peer service's message into @m and its fetch latency histogram into
 * @hist unless NULL, when kvstashd has the service ([cluster]
 * peer_listen); false without, and the replies and the scrape carry none.
 * With @peers (PEERS_MAX of them), its peers too, counted in @m.
 * peer_sample() is safe on the control and the metrics thread.
 */
static bool sample_peer(struct daemon *d, struct kvs_msg_stats_peer *m,
			struct kvspeer_peer_info *peers, struct metrics_ssd_hist *hist)
{
	struct kvspeer_stats st;
	unsigned nr = 0;

	if (!peer_sample(d, &st, peers, peers ? PEERS_MAX : 0, &nr))
		return false;
	m->nr_peers = nr;
	for (unsigned i = 0; i < nr; i++)
		m->peers_failed += peers[i].state == KVSPEER_PEER_FAILED;
	peer_msg_copy(m, &st);
	m->fetch_p50_us = quantile_us(st.fetch_latency_us, KVSPEER_HIST_BUCKETS, 500);
	m->fetch_p99_us = quantile_us(st.fetch_latency_us, KVSPEER_HIST_BUCKETS, 990);
	m->fetch_staged_bytes = peer_staged_bytes(d);
	for (unsigned k = 0; k < KVSPEER_FAIL__MAX; k++) {
		m->fetch_failures += st.fetch_fail[k];
		m->serve_failures += st.serve_fail[k];
	}
	/* Both sides of each kind: its rows of KVS_STATS_PEER (stats.h). */
#define FAIL_(_, KIND, kind, what)                                         \
	do {                                                               \
		m->fetch_fail_##kind = st.fetch_fail[KVSPEER_FAIL_##KIND]; \
		m->serve_fail_##kind = st.serve_fail[KVSPEER_FAIL_##KIND]; \
	} while (0);
	KVS_PEER_FAILS(FAIL_, _)
#undef FAIL_
	if (hist)
		hist_copy(hist, st.fetch_latency_us, st.fetch_latency_sum_us * 1000);
	return true;
}

/* One peer's message, from the service's snapshot @p. */
static void peer_info_msg(struct kvs_msg_stats_peer_info *o, const struct kvspeer_peer_info *p)
{
	strscpy_trunc(o->addr, p->addr, sizeof(o->addr));
	strscpy_trunc(o->node, p->node, sizeof(o->node));
	o->role = p->role;
	/* Literals of ours: GCC takes strscpy_trunc()'s bound for a read past them. */
	snprintf(o->role_name, sizeof(o->role_name), "%s", peer_role_name(p->role));
	o->state = p->state;
	snprintf(o->state_name, sizeof(o->state_name), "%s", peer_state_name(p->state));
	o->conns = p->conns;
	o->locks = p->locks;
	o->epoch = p->epoch;
	o->blocks = p->blocks;
	o->bytes = p->bytes;
	o->failures = p->failures;
	o->idle_ms = p->idle_ms;
	o->last_error = p->last_error;
	o->authenticated = o->node[0] != '\0';
	if (p->last_error < 0)
		strscpy_trunc(o->last_error_text, strerror(-p->last_error),
			      sizeof(o->last_error_text));
}

/*
 * Append the peer service's message and one per peer to @t, if kvstashd
 * has the service.  The snapshot is on the heap: PEERS_MAX of them is
 * too much for the control thread's stack.
 */
static void put_peer(struct daemon *d, struct train *t, uint32_t seq)
{
	struct kvs_msg_stats_peer m = { 0 };
	struct kvspeer_peer_info *peers;

	if (!d->peer)
		return; /* no service: nothing to sample, nothing to allocate */
	peers = calloc(PEERS_MAX, sizeof(*peers));
	if (!peers) {
		t->err = -ENOMEM;
		return;
	}
	if (sample_peer(d, &m, peers, NULL)) {
		HDR(m, KVS_MSG_STATS_PEER, seq);
		put(t, &m, sizeof(m));
		for (unsigned i = 0; i < m.nr_peers; i++) {
			struct kvs_msg_stats_peer_info o = { 0 };

			peer_info_msg(&o, &peers[i]);
			HDR(o, KVS_MSG_STATS_PEER_INFO, seq);
			put(t, &o, sizeof(o));
		}
	}
	free(peers);
}

/* Append the registry's message to @t, if kvstashd has a registry. */
static void put_registry(struct daemon *d, struct train *t, uint32_t seq)
{
	struct kvs_msg_stats_registry m = { 0 };

	if (!sample_registry(d, &m))
		return;
	HDR(m, KVS_MSG_STATS_REGISTRY, seq);
	put(t, &m, sizeof(m));
}

int admin_send_status(struct daemon *d, struct session *admin, uint32_t seq)
{
	struct kvs_msg_status_daemon dm = { 0 };
	struct train t = { 0 };
	struct session *s;

	HDR(dm, KVS_MSG_STATUS_DAEMON, seq);
	strscpy_trunc(dm.version, PACKAGE_VERSION, sizeof(dm.version));
	dm.pid = (uint32_t)getpid();
	dm.nr_sessions = session_count_active(d);
	dm.uptime_ms = (now_ns() - d->start_ns) / NSEC_PER_MSEC;
	dm.nr_workers = d->nr_workers;
	dm.nr_instances = instance_count(d->instances);
	dm.cuda_available = movers_device_count(KVS_DEVICE_CUDA) > 0;
	put(&t, &dm, sizeof(dm));
	/* `kvstash status` shows the registry and the peers too: one request, one moment. */
	put_registry(d, &t, seq);
	put_peer(d, &t, seq);
	cds_list_for_each_entry(s, &d->sessions, node) {
		struct kvs_msg_status_session m = { 0 };
		struct registration *reg = session_reg(s);

		if (!listed(s))
			continue;
		HDR(m, KVS_MSG_STATUS_SESSION, seq);
		m.session_id = s->id;
		m.pid = (uint32_t)s->pid;
		m.uid = (uint32_t)s->uid;
		m.role = s->hello.role;
		m.tp_rank = s->hello.tp_rank;
		m.tp_size = s->hello.tp_size;
		m.world_size = s->hello.world_size;
		m.device_kind = s->hello.device_kind;
		m.worker = s->worker ? s->worker->id : 0;
		memcpy(m.device_uuid, s->hello.device_uuid, sizeof(m.device_uuid));
		m.sealed = s->inst && instance_sealed(s->inst);
		if (reg) {
			m.nr_layers = reg->layout->nr_layers;
			m.slot_bytes = reg->layout->slot_bytes;
			m.mapped_bytes = reg->mapped_bytes;
			strscpy_trunc(m.first_layer, reg->layout->layers[0].name,
				      sizeof(m.first_layer));
			strscpy_trunc(m.last_layer,
				      reg->layout->layers[reg->layout->nr_layers - 1].name,
				      sizeof(m.last_layer));
		}
		strscpy_trunc(m.instance, s->hello.instance, sizeof(m.instance));
		strscpy_trunc(m.ns, s->hello.ns, sizeof(m.ns));
		put(&t, &m, sizeof(m));
	}
	return send_train(admin, &t, seq);
}

/*
 * Everything of the global and node messages but sessions_live, which
 * only the control thread can count: store, lease table and counters
 * answer on any thread.  The nodes that fit @max; their number.
 */
static unsigned sample(struct daemon *d, struct kvs_msg_stats_global *g,
		       struct kvs_msg_stats_node *nodes, unsigned max)
{
	struct store_region_stats rs[POOL_MAX_REGIONS];
	struct store_stats st;
	struct lease_stats ls;
	unsigned nr;

	store_get_stats(d->store, &st);
	lease_get_stats(d->leases, &ls);
	nr = store_region_stats(d->store, rs, POOL_MAX_REGIONS);
	g->uptime_ms = (now_ns() - d->start_ns) / NSEC_PER_MSEC;
	for (unsigned i = 0; i < nr; i++) {
		g->pool_capacity_bytes += rs[i].capacity_bytes;
		g->pool_used_bytes += rs[i].used_bytes;
	}
	g->blocks_resident = st.resident;
	g->blocks_partial = st.partial;
	g->evictions = st.evictions;
	g->partial_reclaimed = st.partial_reclaimed;
	g->leases_live = ls.live;
	g->leases_created = ls.created;
	g->leases_expired = ls.expired;
	g->leases_released = ls.released;
	counters_global_read(&d->ctr, g);
	nr = MIN(nr, max);
	for (unsigned i = 0; i < nr; i++) {
		struct kvs_msg_stats_node *m = &nodes[i];

		m->node = rs[i].node;
		m->hugepages = rs[i].huge;
		m->capacity_bytes = rs[i].capacity_bytes;
		m->used_bytes = rs[i].used_bytes;
		m->extents_total = rs[i].extents_total;
		m->extents_free = rs[i].extents_free;
	}
	return nr;
}

void admin_sample(void *arg, struct metrics_sample *smp)
{
	struct daemon *d = arg;
	struct kvspeer_peer_info *peers;

	smp->nr_nodes = sample(d, &smp->global, smp->nodes, smp->max_nodes);
	smp->ctr = &d->ctr;
	smp->nr_registry = sample_registry(d, &smp->registry);
	smp->nr_ssd = sample_ssd(d, &smp->ssd, smp->ssd_drives, smp->ssd_hists);
	smp->nr_ssd_drives = smp->nr_ssd ? MIN(smp->ssd.nr_drives, METRICS_SSD_DRIVES) : 0;
	/* Its peers only to count them; without memory for them, no peer family this time. */
	if (!d->peer)
		return;
	peers = calloc(PEERS_MAX, sizeof(*peers));
	smp->nr_peer = peers && sample_peer(d, &smp->peer, peers, &smp->peer_hists.fetch_lat);
	free(peers);
}

int admin_send_stats(struct daemon *d, struct session *admin, uint32_t seq)
{
	struct kvs_msg_stats_global g = { 0 };
	struct kvs_msg_stats_node nodes[POOL_MAX_REGIONS] = { 0 };
	struct train t = { 0 };
	struct session *s;
	unsigned nr;

	nr = sample(d, &g, nodes, POOL_MAX_REGIONS);
	HDR(g, KVS_MSG_STATS_GLOBAL, seq);
	g.sessions_live = session_count_active(d);
	put(&t, &g, sizeof(g));
	for (unsigned i = 0; i < nr; i++) {
		HDR(nodes[i], KVS_MSG_STATS_NODE, seq);
		put(&t, &nodes[i], sizeof(nodes[i]));
	}
	cds_list_for_each_entry(s, &d->sessions, node) {
		struct kvs_msg_stats_session m = { 0 };

		if (!listed(s))
			continue;
		HDR(m, KVS_MSG_STATS_SESSION, seq);
		m.session_id = s->id;
		m.pid = (uint32_t)s->pid;
		m.tp_rank = s->hello.tp_rank;
		strscpy_trunc(m.instance, s->hello.instance, sizeof(m.instance));
		counters_session_read(&s->st, &m);
		/* The worker's, single writer: a relaxed load of the moment. */
		m.inflight = __atomic_load_n(&s->w.inflight, __ATOMIC_RELAXED);
		put(&t, &m, sizeof(m));
	}
	put_registry(d, &t, seq);
	put_ssd(d, &t, seq);
	put_peer(d, &t, seq);
	return send_train(admin, &t, seq);
}
