/* SPDX-License-Identifier: MIT */
/*
 * The stats tables (<kvstash/stats.h>) and what libkvstash exports of them:
 * the descriptors agree with the structs of wire.h, the fields of wire
 * revision 1.0 keep their offsets (a row added anywhere but at the end of
 * its table would move them), every message is its fields then reserved
 * words, and the rows obey the rules every view relies on (Prometheus
 * names, text fragments).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvstash/kvstash.h>

#include "unit.h"

struct row {
	const char *name;
	size_t off, size;
	unsigned kind;
	const char *key, *line, *text, *prom;
};

/* F rows only, of the message struct M. */
#define ROW_(shape, ...) ROW_##shape(__VA_ARGS__)
#define ROW_F(type, name, kind, src, unit, section, key, line, text, prom, help)                 \
	{ #name, offsetof(M, name), sizeof(((M *)0)->name), KVS_STATS_K_##kind, key, line, text, \
	  prom },
#define ROW_D(...)
#define ROW_S(...)
#define ROW_I(...)

#define M struct kvs_msg_stats_global
static const struct row global_rows[] = { KVS_STATS_GLOBAL(ROW_) };
#undef M
#define M struct kvs_msg_stats_node
static const struct row node_rows[] = { KVS_STATS_NODE(ROW_) };
#undef M
#define M struct kvs_msg_stats_session
static const struct row session_rows[] = { KVS_STATS_SESSION(ROW_) };
#undef M
#define M struct kvs_msg_stats_registry
static const struct row registry_rows[] = { KVS_STATS_REGISTRY(ROW_) };
#undef M
#define M struct kvs_msg_stats_ssd
static const struct row ssd_rows[] = { KVS_STATS_SSD(ROW_) };
#undef M
#define M struct kvs_msg_stats_ssd_drive
static const struct row ssd_drive_rows[] = { KVS_STATS_SSD_DRIVE(ROW_) };
#undef M
#define M struct kvs_msg_stats_peer
static const struct row peer_rows[] = { KVS_STATS_PEER(ROW_) };
#undef M
#define M struct kvs_msg_stats_peer_info
static const struct row peer_info_rows[] = { KVS_STATS_PEER_INFO(ROW_) };
#undef M

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
	uint32_t type;
	const char *name;
	size_t size;
	uint32_t flags;
	const struct row *rows;
	size_t nrows;
	size_t resv; /* offset of resv */
} groups[] = {
	{ KVS_MSG_STATS_GLOBAL, "global", sizeof(struct kvs_msg_stats_global), 0, global_rows,
	  N(global_rows), offsetof(struct kvs_msg_stats_global, resv) },
	{ KVS_MSG_STATS_NODE, "nodes", sizeof(struct kvs_msg_stats_node), KVS_STATS_GROUP_MANY,
	  node_rows, N(node_rows), offsetof(struct kvs_msg_stats_node, resv) },
	{ KVS_MSG_STATS_SESSION, "sessions", sizeof(struct kvs_msg_stats_session),
	  KVS_STATS_GROUP_MANY, session_rows, N(session_rows),
	  offsetof(struct kvs_msg_stats_session, resv) },
	{ KVS_MSG_STATS_REGISTRY, "registry", sizeof(struct kvs_msg_stats_registry), 0,
	  registry_rows, N(registry_rows), offsetof(struct kvs_msg_stats_registry, resv) },
	{ KVS_MSG_STATS_SSD, "ssd", sizeof(struct kvs_msg_stats_ssd), 0, ssd_rows, N(ssd_rows),
	  offsetof(struct kvs_msg_stats_ssd, resv) },
	{ KVS_MSG_STATS_SSD_DRIVE, "ssd_drives", sizeof(struct kvs_msg_stats_ssd_drive),
	  KVS_STATS_GROUP_MANY, ssd_drive_rows, N(ssd_drive_rows),
	  offsetof(struct kvs_msg_stats_ssd_drive, resv) },
	{ KVS_MSG_STATS_PEER, "peer", sizeof(struct kvs_msg_stats_peer), 0, peer_rows, N(peer_rows),
	  offsetof(struct kvs_msg_stats_peer, resv) },
	{ KVS_MSG_STATS_PEER_INFO, "peers", sizeof(struct kvs_msg_stats_peer_info),
	  KVS_STATS_GROUP_MANY, peer_info_rows, N(peer_info_rows),
	  offsetof(struct kvs_msg_stats_peer_info, resv) },
};

START_TEST(test_descriptors)
{
	struct kvs_stats_group g, untouched;
	struct kvs_stats_field f, fu;

	for (uint32_t i = 0; i < N(groups); i++) {
		ck_assert_int_eq(kvs_stats_group(i, &g), 0);
		ck_assert_uint_eq(g.msg_type, groups[i].type);
		ck_assert_str_eq(g.name, groups[i].name);
		ck_assert_uint_eq(g.size, groups[i].size);
		ck_assert_uint_eq(g.flags, groups[i].flags);
		ck_assert_uint_eq(g.nr_fields, groups[i].nrows);
		for (uint32_t k = 0; k < groups[i].nrows; k++) {
			const struct row *r = &groups[i].rows[k];

			ck_assert_int_eq(kvs_stats_field(g.msg_type, k, &f), 0);
			ck_assert_str_eq(f.name, r->name);
			ck_assert_uint_eq(f.offset, r->off);
			ck_assert_uint_eq(f.size, r->size);
			ck_assert_uint_eq(f.kind, r->kind);
		}
		memset(&fu, 0x5a, sizeof(fu));
		f = fu;
		ck_assert_int_eq(kvs_stats_field(g.msg_type, g.nr_fields, &f), -ENOENT);
		ck_assert_mem_eq(&f, &fu, sizeof(f)); /* ret_* untouched on failure */
	}
	memset(&untouched, 0x5a, sizeof(untouched));
	g = untouched;
	ck_assert_int_eq(kvs_stats_group(N(groups), &g), -ENOENT);
	ck_assert_mem_eq(&g, &untouched, sizeof(g));
	ck_assert_int_eq(kvs_stats_field(KVS_MSG_STATUS_DAEMON, 0, &f), -EINVAL);
	ck_assert_int_eq(kvs_stats_field(0, 0, &f), -EINVAL);
}
END_TEST

/* A message is its header, its fields back to back, then reserved words. */
START_TEST(test_packed)
{
	for (size_t i = 0; i < N(groups); i++) {
		size_t end = sizeof(struct kvs_msg_hdr);

		for (size_t k = 0; k < groups[i].nrows; k++) {
			ck_assert_uint_eq(groups[i].rows[k].off, end);
			end += groups[i].rows[k].size;
		}
		ck_assert_uint_eq(groups[i].resv, end);
		ck_assert_uint_gt(groups[i].size, end);
		ck_assert_uint_eq((groups[i].size - end) % 8, 0);
	}
}
END_TEST

/* Wire revision 1.0: these fields stay where they are, whatever is added. */
START_TEST(test_frozen)
{
	static const char *const global[] = {
		"uptime_ms",
		"pool_capacity_bytes",
		"pool_used_bytes",
		"blocks_resident",
		"blocks_partial",
		"query_ops",
		"query_blocks_hit",
		"query_blocks_missed",
		"save_ops",
		"save_blocks_stored",
		"save_blocks_skipped",
		"load_ops",
		"load_blocks",
		"evictions",
		"partial_reclaimed",
		"leases_live",
		"leases_created",
		"leases_expired",
		"leases_released",
		"bytes_saved",
		"bytes_loaded",
		"save_ns",
		"load_ns",
		"errors",
		"sessions_live",
		"sessions_total",
		"sessions_refused",
		"protocol_errors",
	};
	static const struct {
		const char *name;
		size_t off;
	} node[] = {
		{ "node", 16 },		 { "hugepages", 20 },	  { "capacity_bytes", 24 },
		{ "used_bytes", 32 },	 { "extents_total", 40 }, { "extents_free", 48 },
	}, session[] = {
		{ "session_id", 16 }, { "pid", 24 },	     { "tp_rank", 28 },
		{ "ops", 32 },	      { "errors", 40 },	     { "save_blocks", 48 },
		{ "load_blocks", 56 }, { "query_hits", 64 },  { "query_misses", 72 },
		{ "bytes_saved", 80 }, { "bytes_loaded", 88 }, { "inflight", 96 },
		{ "instance", 104 },
	};

	ck_assert_uint_ge(N(global_rows), N(global));
	for (size_t i = 0; i < N(global); i++) {
		ck_assert_str_eq(global_rows[i].name, global[i]);
		ck_assert_uint_eq(global_rows[i].off, 16 + 8 * i);
	}
	ck_assert_uint_ge(N(node_rows), N(node));
	for (size_t i = 0; i < N(node); i++) {
		ck_assert_str_eq(node_rows[i].name, node[i].name);
		ck_assert_uint_eq(node_rows[i].off, node[i].off);
	}
	ck_assert_uint_ge(N(session_rows), N(session));
	for (size_t i = 0; i < N(session); i++) {
		ck_assert_str_eq(session_rows[i].name, session[i].name);
		ck_assert_uint_eq(session_rows[i].off, session[i].off);
	}
	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_global), 304);
	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_node), 88);
	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_session), 200);
}
END_TEST

/*
 * Wire revision 1.1: the registry's message, and every field of struct
 * registry_stats (sidecar/cluster/registry.h) in it, exported to
 * Prometheus under kvstash_registry_*.
 */
START_TEST(test_registry)
{
	static const struct {
		const char *name;
		size_t off;
		const char *prom;
	} reg[] = {
		{ "state_name", 16, NULL },
		{ "state", 80, "kvstash_registry_state" },
		{ "connected", 84, "kvstash_registry_connected" },
		{ "leased", 88, "kvstash_registry_leased" },
		{ "backfilling", 92, "kvstash_registry_backfilling" },
		{ "epoch", 96, "kvstash_registry_epoch" },
		{ "queue_depth", 104, "kvstash_registry_queue_depth" },
		{ "queue_capacity", 112, "kvstash_registry_queue_capacity" },
		{ "enqueued", 120, "kvstash_registry_enqueued_total" },
		{ "delivered", 128, "kvstash_registry_delivered_total" },
		{ "dropped_overflow", 136, "kvstash_registry_dropped_total{reason=\"overflow\"}" },
		{ "dropped_offline", 144, "kvstash_registry_dropped_total{reason=\"offline\"}" },
		{ "dropped_failed", 152, "kvstash_registry_dropped_total{reason=\"failed\"}" },
		{ "backfilled", 160, "kvstash_registry_backfilled_total" },
		{ "round_trips", 168, "kvstash_registry_round_trips_total" },
		{ "last_rtt_us", 176, "kvstash_registry_last_rtt_seconds" },
		{ "errors", 184, "kvstash_registry_errors_total" },
		{ "connects", 192, "kvstash_registry_connects_total" },
		{ "disconnects", 200, "kvstash_registry_disconnects_total" },
		{ "leases_acquired", 208, "kvstash_registry_leases_acquired_total" },
		{ "leases_lost", 216, "kvstash_registry_leases_lost_total" },
		{ "queries", 224, "kvstash_registry_queries_total" },
		{ "query_hits", 232, "kvstash_registry_query_hits_total" },
		{ "flushes", 240, "kvstash_registry_flushes_total" },
		/* Minor 5: the master, Sentinel, the incarnation (the message grew to 640). */
		{ "master", 248, NULL },
		{ "discovery", 312, NULL },
		{ "master_name", 376, NULL },
		{ "sentinels", 440, NULL },
		{ "sentinels_up", 444, "kvstash_registry_sentinels_up" },
		{ "failovers", 448, "kvstash_registry_failovers_total" },
		{ "last_failover_ms", 456, NULL },
		{ "last_failover_from", 464, NULL },
		{ "incarnation", 528, NULL },
	};

	ck_assert_uint_eq(KVS_MSG_STATS_REGISTRY, 24);
	ck_assert_uint_ge(N(registry_rows), N(reg));
	for (size_t i = 0; i < N(reg); i++) {
		ck_assert_str_eq(registry_rows[i].name, reg[i].name);
		ck_assert_uint_eq(registry_rows[i].off, reg[i].off);
		if (reg[i].prom)
			ck_assert_str_eq(registry_rows[i].prom, reg[i].prom);
		else
			ck_assert_ptr_null(registry_rows[i].prom);
	}
	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_registry), 640);
}
END_TEST

/*
 * Wire revision 1.2: the SSD tier's message and its drives' (one each),
 * with struct ssd_stats, the store's spills and hits by tier in them,
 * exported to Prometheus under kvstash_ssd_* and kvstash_tier_hits_total.
 */
START_TEST(test_ssd)
{
	static const struct {
		const char *name;
		size_t off;
		const char *prom;
	} tier[] = {
		{ "nr_drives", 16, "kvstash_ssd_drives" },
		{ "drives_online", 20, "kvstash_ssd_drives_online" },
		{ "capacity_bytes", 24, NULL },
		{ "hits_dram", 32, "kvstash_tier_hits_total{tier=\"dram\"}" },
		{ "hits_ssd", 40, "kvstash_tier_hits_total{tier=\"ssd\"}" },
		{ "read_failed", 48, "kvstash_ssd_read_failed_total" },
		{ "reads_pending", 56, NULL },
		{ "spilled", 64, "kvstash_ssd_spilled_total" },
		{ "spill_skipped", 72, "kvstash_ssd_spill_skipped_total" },
		{ "spill_failed", 80, "kvstash_ssd_spill_failed_total" },
		{ "spill_dropped", 88, "kvstash_ssd_spill_dropped_total" },
		{ "spilling_bytes", 96, "kvstash_ssd_spilling_bytes" },
		{ "admitted", 104, "kvstash_ssd_admitted_total" },
		{ "not_admitted", 112, "kvstash_ssd_not_admitted_total" },
		{ "exists", 120, "kvstash_ssd_write_exists_total" },
		{ "dropped", 128, "kvstash_ssd_backpressure_total{reason=\"refused\"}" },
		{ "displaced", 136, "kvstash_ssd_backpressure_total{reason=\"displaced\"}" },
		{ "lookups", 144, "kvstash_ssd_lookups_total" },
		{ "lookup_hits", 152, "kvstash_ssd_lookup_hits_total" },
		{ "index_entries", 160, "kvstash_ssd_index_blocks" },
		{ "index_bytes", 168, "kvstash_ssd_index_bytes" },
		{ "bytes_written", 176, NULL },
		{ "bytes_read", 184, NULL },
		{ "written_ahead", 192, "kvstash_ssd_written_ahead_total" },
	}, drive[] = {
		{ "drive", 16, "drive" },
		{ "state", 20, "kvstash_ssd_drive_state" },
		{ "path", 24, NULL },
		{ "state_name", 88, NULL },
		{ "capacity_bytes", 152, "kvstash_ssd_capacity_bytes" },
		{ "bytes_written", 160, "kvstash_ssd_bytes_total{direction=\"write\"}" },
		{ "bytes_read", 168, "kvstash_ssd_bytes_total{direction=\"read\"}" },
		{ "writes", 176, "kvstash_ssd_ios_total{direction=\"write\"}" },
		{ "reads", 184, "kvstash_ssd_ios_total{direction=\"read\"}" },
		{ "write_errors", 192, "kvstash_ssd_errors_total{kind=\"write\"}" },
		{ "read_errors", 200, "kvstash_ssd_errors_total{kind=\"read\"}" },
		{ "crc_errors", 208, "kvstash_ssd_errors_total{kind=\"crc\"}" },
	}, drive_late[] = {
		/* Rows added in reserved words: their offsets never move. */
		{ "regions_opened", 360, "kvstash_ssd_regions_opened_total" },
		{ "erase_syncs", 368, "kvstash_ssd_erase_syncs_total" },
	};

	ck_assert_uint_eq(KVS_MSG_STATS_SSD, 25);
	ck_assert_uint_eq(KVS_MSG_STATS_SSD_DRIVE, 26);
	ck_assert_uint_ge(N(ssd_rows), N(tier));
	for (size_t i = 0; i < N(tier); i++) {
		ck_assert_str_eq(ssd_rows[i].name, tier[i].name);
		ck_assert_uint_eq(ssd_rows[i].off, tier[i].off);
		if (tier[i].prom)
			ck_assert_str_eq(ssd_rows[i].prom, tier[i].prom);
		else
			ck_assert_ptr_null(ssd_rows[i].prom);
	}
	ck_assert_uint_ge(N(ssd_drive_rows), N(drive));
	for (size_t i = 0; i < N(drive); i++) {
		ck_assert_str_eq(ssd_drive_rows[i].name, drive[i].name);
		ck_assert_uint_eq(ssd_drive_rows[i].off, drive[i].off);
		if (drive[i].prom)
			ck_assert_str_eq(ssd_drive_rows[i].prom, drive[i].prom);
		else
			ck_assert_ptr_null(ssd_drive_rows[i].prom);
	}
	for (size_t k = 0; k < N(drive_late); k++) {
		size_t i = 0;

		while (i < N(ssd_drive_rows) && strcmp(ssd_drive_rows[i].name, drive_late[k].name))
			i++;
		ck_assert_msg(i < N(ssd_drive_rows), "%s: no such row", drive_late[k].name);
		ck_assert_uint_eq(ssd_drive_rows[i].off, drive_late[k].off);
		ck_assert_str_eq(ssd_drive_rows[i].prom, drive_late[k].prom);
	}
	ck_assert_uint_eq(ssd_drive_rows[0].kind, KVS_STATS_K_KEY);
	ck_assert_uint_eq(ssd_drive_rows[2].kind, KVS_STATS_K_KEY);
	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_ssd), 256);
	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_ssd_drive), 448);
}
END_TEST

/*
 * Wire revision 1.3: the peer service's message and its peers' (one
 * each), with struct kvspeer_stats in it, its failures per side and kind
 * (enum kvspeer_fail's order), exported to Prometheus under
 * kvstash_peer_*; its peers are not exported (labels per peer).
 */
START_TEST(test_peer)
{
	static const struct {
		const char *name;
		size_t off;
		const char *prom;
	} svc[] = {
		{ "nr_peers", 16, "kvstash_peer_peers" },
		{ "peers_failed", 20, "kvstash_peer_peers_failed" },
		{ "fetches", 24, NULL },
		{ "fetches_full", 32, "kvstash_peer_fetches_total{result=\"full\"}" },
		{ "fetches_partial", 40, "kvstash_peer_fetches_total{result=\"partial\"}" },
		{ "fetches_empty", 48, "kvstash_peer_fetches_total{result=\"empty\"}" },
		{ "fetch_blocks", 56, "kvstash_peer_fetched_blocks_total" },
		{ "fetch_bytes", 64, "kvstash_peer_fetched_bytes_total" },
		{ "fetch_p50_us", 72, NULL },
		{ "fetch_p99_us", 80, NULL },
		{ "fetch_latency_sum_us", 88, NULL },
		{ "fetch_failures", 96, NULL },
		{ "serve_blocks", 104, "kvstash_peer_served_blocks_total" },
		{ "serve_bytes", 112, "kvstash_peer_served_bytes_total" },
		{ "locks_held", 120, "kvstash_peer_locks_held" },
		{ "locks_granted", 128, "kvstash_peer_locks_granted_total" },
		{ "locks_released", 136, "kvstash_peer_locks_total{end=\"released\"}" },
		{ "locks_expired", 144, "kvstash_peer_locks_total{end=\"expired\"}" },
		{ "locks_dropped", 152, "kvstash_peer_locks_total{end=\"dropped\"}" },
		{ "conns_open", 160, "kvstash_peer_connections" },
		{ "conns_accepted", 168, "kvstash_peer_connections_accepted_total" },
		{ "serve_failures", 176, NULL },
	}, info[] = {
		{ "addr", 16, NULL },
		{ "node", 80, NULL },
		{ "role", 144, NULL },
		{ "role_name", 148, NULL },
		{ "state", 212, NULL },
		{ "state_name", 216, NULL },
		{ "conns", 280, NULL },
		{ "locks", 284, NULL },
		{ "epoch", 288, NULL },
		{ "blocks", 296, NULL },
		{ "bytes", 304, NULL },
		{ "failures", 312, NULL },
		{ "idle_ms", 320, NULL },
		{ "last_error", 328, NULL },
		{ "authenticated", 332, NULL },
		{ "last_error_text", 336, NULL },
	};
	/* kvspeer_fail_name() of each kind, in order (peer/service.c). */
	static const char *const kinds[] = {
		"connect",  "timeout", "reset",	  "auth",      "protocol",
		"stale",    "alloc",   "refused", "allowlist", "limit",
		"bad_lock", "range",   "stall",	  "host",      "transport",
	};
	static const char *const sides[] = { "fetch", "serve" };
	size_t i = N(svc);

	ck_assert_uint_eq(KVS_MSG_STATS_PEER, 27);
	ck_assert_uint_eq(KVS_MSG_STATS_PEER_INFO, 28);
	ck_assert_uint_ge(N(peer_rows), N(svc) + 2 * N(kinds));
	for (size_t k = 0; k < N(svc); k++) {
		ck_assert_str_eq(peer_rows[k].name, svc[k].name);
		ck_assert_uint_eq(peer_rows[k].off, svc[k].off);
		if (svc[k].prom)
			ck_assert_str_eq(peer_rows[k].prom, svc[k].prom);
		else
			ck_assert_ptr_null(peer_rows[k].prom);
	}
	/* Then one counter per side and kind: one family, the kind as JSON member and label. */
	for (size_t sd = 0; sd < N(sides); sd++) {
		for (size_t k = 0; k < N(kinds); k++, i++) {
			char name[64], prom[128];

			snprintf(name, sizeof(name), "%s_fail_%s", sides[sd], kinds[k]);
			snprintf(prom, sizeof(prom),
				 "kvstash_peer_failures_total{side=\"%s\",kind=\"%s\"}", sides[sd],
				 kinds[k]);
			ck_assert_str_eq(peer_rows[i].name, name);
			ck_assert_uint_eq(peer_rows[i].off, 184 + 8 * (i - N(svc)));
			ck_assert_uint_eq(peer_rows[i].kind, KVS_STATS_K_COUNTER);
			ck_assert_str_eq(peer_rows[i].key, kinds[k]);
			ck_assert_str_eq(peer_rows[i].prom, prom);
		}
	}
	ck_assert_uint_eq(N(peer_info_rows), N(info));
	for (size_t k = 0; k < N(info); k++) {
		ck_assert_str_eq(peer_info_rows[k].name, info[k].name);
		ck_assert_uint_eq(peer_info_rows[k].off, info[k].off);
		ck_assert_ptr_null(peer_info_rows[k].prom);
	}
	ck_assert_uint_eq(peer_info_rows[0].kind, KVS_STATS_K_KEY);
	ck_assert_uint_eq(peer_info_rows[1].kind, KVS_STATS_K_KEY);
	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_peer), 512);
	ck_assert_uint_eq(sizeof(struct kvs_msg_stats_peer_info), 448);
}
END_TEST

/* Every row a Prometheus family, with all its rows (D and I ones too). */
struct prom {
	const char *prom;
	unsigned kind; /* KVS_STATS_K_*, or 0: a histogram */
};

#define PROM_(shape, ...) PROM_##shape(__VA_ARGS__)
#define PROM_F(type, name, kind, src, unit, section, key, line, text, prom, help) \
	{ prom, KVS_STATS_K_##kind },
#define PROM_D(name, formula, a, b, section, key, line, text, prom, help) \
	{ prom, KVS_STATS_K_GAUGE },
#define PROM_S(...)
#define PROM_I(type, name, prom, help) { prom, PROM_I_##type },
#define PROM_I_U64		       KVS_STATS_K_COUNTER
#define PROM_I_ERRKIND		       KVS_STATS_K_COUNTER
#define PROM_I_HIST		       0

static const struct prom proms[] = { KVS_STATS_GLOBAL(PROM_) KVS_STATS_NODE(PROM_)
					     KVS_STATS_SESSION(PROM_) KVS_STATS_REGISTRY(PROM_)
						     KVS_STATS_SSD(PROM_) KVS_STATS_SSD_DRIVE(PROM_)
							     KVS_STATS_PEER(PROM_)
								     KVS_STATS_PEER_INFO(PROM_) };

static size_t family_len(const char *p)
{
	return strcspn(p, "{");
}

START_TEST(test_prom_names)
{
	for (size_t i = 0; i < N(proms); i++) {
		const char *p = proms[i].prom;
		size_t n;

		if (!p)
			continue;
		n = family_len(p);
		if (proms[i].kind == KVS_STATS_K_KEY) {
			/* A label name: no prefix, no braces. */
			ck_assert_uint_eq(n, strlen(p));
			ck_assert_int_ne(strncmp(p, "kvstash_", 8), 0);
			continue;
		}
		ck_assert_msg(strncmp(p, "kvstash_", 8) == 0, "%s: not kvstash_*", p);
		if (proms[i].kind == KVS_STATS_K_COUNTER)
			ck_assert_msg(n > 6 && strncmp(p + n - 6, "_total", 6) == 0,
				      "counter %s does not end in _total", p);
		else
			ck_assert_msg(n <= 6 || strncmp(p + n - 6, "_total", 6) != 0,
				      "%s ends in _total and is no counter", p);
		if (p[n])
			ck_assert_msg(p[strlen(p) - 1] == '}', "%s: constant labels not closed", p);
	}
}
END_TEST

/* The text of a line is fragments with one value each; a column title has none. */
struct text {
	const char *line, *text;
};

#define TEXT_(shape, ...)							  TEXT_##shape(__VA_ARGS__)
#define TEXT_F(type, name, kind, src, unit, section, key, line, text, prom, help) { line, text },
#define TEXT_D(name, formula, a, b, section, key, line, text, prom, help)	  { line, text },
#define TEXT_S(...)
#define TEXT_I(...)

static const struct text global_text[] = { KVS_STATS_GLOBAL(TEXT_) };
/* A group of one message is lines too (kvstash(1)'s "Registry:"). */
static const struct text lines_text[] = { KVS_STATS_REGISTRY(TEXT_) KVS_STATS_SSD(TEXT_)
						  KVS_STATS_PEER(TEXT_) };
static const struct text table_text[] = {
	KVS_STATS_NODE(TEXT_) KVS_STATS_SESSION(TEXT_)	      /* per node, per session */
	KVS_STATS_SSD_DRIVE(TEXT_) KVS_STATS_PEER_INFO(TEXT_) /* per drive, per peer */
};

START_TEST(test_text)
{
	for (size_t i = 0; i < N(global_text) + N(lines_text); i++) {
		const struct text *x =
			i < N(global_text) ? &global_text[i] : &lines_text[i - N(global_text)];
		const char *t = x->text, *at;

		if (!t)
			continue;
		ck_assert_ptr_nonnull(x->line);
		at = strstr(t, "%s");
		ck_assert_msg(at && !strstr(at + 2, "%") && !memchr(t, '%', (size_t)(at - t)),
			      "fragment \"%s\" needs exactly one %%s", t);
	}
	for (size_t i = 0; i < N(table_text); i++) {
		ck_assert_ptr_null(table_text[i].line);
		if (table_text[i].text)
			ck_assert_ptr_null(strchr(table_text[i].text, '%'));
	}
}
END_TEST

UNIT_TESTS(test_descriptors, test_packed, test_frozen, test_registry, test_ssd, test_peer,
	   test_prom_names, test_text)

const struct unit_suite unit_suite = {
	.name = "stats",
	.add_tests = add_tests,
};
