/* SPDX-License-Identifier: MIT */
/*
 * kvstash counters: one table per stats group, every view generated from it.
 *
 * A group is one kind of message in the reply to KVS_MSG_STATS (wire.h):
 * global (one message), node (one per pool region), session (one per engine
 * session), registry (one, only from a kvstashd with [cluster]), ssd (one,
 * only from a kvstashd with [ssd]), ssd_drives (one per drive, with it),
 * peer (one, only from a kvstashd with a peer service) and peers (one per
 * peer, with it).  A later module adds its own group: a table here, a
 * message type in wire.h, an entry in kvs_stats_group().  Each table
 * lists its message's fields in wire order, and from it come
 *
 *   - the message's struct (wire.h): the fields, then reserved words up to
 *     the group's size;
 *   - kvstashd's counters of the group (rows it counts as events happen)
 *     and their copy into the reply (sidecar/obs/counters.h);
 *   - the Prometheus families (sidecar/obs/metrics.c);
 *   - what `kvstash stats` prints, as text and as JSON (tools/kvstash.c);
 *   - the descriptors libkvstash exports, kvs_stats_group() and
 *     kvs_stats_field(), from which the Python binding builds its
 *     structures (python/kvstash/admin.py).
 *
 * So a new counter is one row (plus the line that counts it); it appears in
 * every view.  Its row goes at the end of its table: the fields before it
 * keep their offsets, and it takes a reserved word (a reader that does not
 * know it ignores the word, one that does reads 0 from an older daemon,
 * as reserved words are zero).  When a group's reserved words are used up,
 * its size grows with the wire's minor revision (KVS_WIRE_MINOR): libkvstash
 * reads the part of a longer message it knows, and skips message types it
 * does not know, when the daemon's minor revision is newer than its own.
 *
 * A table is called with X, and X with the row's shape first, so that a
 * view can take the shapes it needs (#define V(shape, ...) V_##shape(...)):
 *
 *   F(type, name, kind, src, unit, section, key, line, text, prom, help)
 *     A field of the message.
 *     type     U64, U32, I32, BOOL (a u32 that is 0 or 1), NAME
 *              (char[KVS_NAME_MAX], NUL-terminated).
 *     kind     KEY: says which node, session ... the message is about;
 *              COUNTER: only grows; GAUGE: a value of the moment.
 *     src      CTR: counted by kvstashd as it happens (its counters);
 *              MOD: the field of the group's module stats struct by the
 *              same name, copied as is (see "a module's own fields");
 *              STORE: the same, of struct store_stats; SMP: read or
 *              computed from its owner for each reply (sums, quantiles,
 *              names: by hand, in sidecar/control/admin.c).
 *     unit     NONE, COUNT, BYTES, NS, MS, US.
 *     section, key   JSON: member @key of object @section ("": the top
 *              level; a group shown as a list: its items).  key NULL: not
 *              in the JSON by this table (KEY rows: the CLI prints them).
 *     line, text     Text: for the global group, @text is a fragment of the
 *              line titled @line, "%s" standing for the value; for a group
 *              shown as a table, @line is NULL and @text the column title.
 *              text NULL: not in the text.
 *     prom     Prometheus family, constant labels in braces after it; for a
 *              KEY row, the label it gives the group's samples.  NULL: not
 *              exported.  Labels stay bounded: never per session or per key.
 *     help     What it is (the HELP line of its family).
 *
 *   D(name, formula, a, b, section, key, line, text, prom, help)
 *     A value derived from two others, in the views that name it:
 *     SUB0 a - b, not below 0 (in a's unit); PCT a / b as a percentage;
 *     SHARE a / (a + b), a ratio in JSON, a percentage in text; RATE a per
 *     second of b nanoseconds; PAIR "a/b": of fields of the message, for
 *     the CLI.  DIFF a - b: of kvstashd's counters, for Prometheus.
 *
 *   S(group, section, key, line)
 *     Where the messages of another group appear in this group's views:
 *     the JSON list @key in @section, the text table after line @line
 *     (NULL: after the last), the Prometheus families at this place.  A
 *     group of one message (no KVS_STATS_GROUP_MANY) is the JSON object
 *     @key and, in text, its own lines under its title; a reply without
 *     its message shows nothing of it (no member, no line, no family).
 *
 *   I(type, name, prom, help)
 *     A counter of kvstashd not in the message: U64, HIST (a latency
 *     histogram), ERRKIND (one count per error kind); Prometheus only.
 *
 * Within a section (and a line), values appear in table order; sections
 * and lines appear in the order of their first row.  A Prometheus family
 * spans consecutive exported rows of the same name.
 */
#ifndef KVSTASH_STATS_H
#define KVSTASH_STATS_H

/* clang-format off */

#define KVS_STATS_GLOBAL(X)                                                                        \
	X(F, U64, uptime_ms, GAUGE, SMP, MS, "", "uptime_ms", NULL, NULL,                          \
	  "kvstash_uptime_seconds", "Seconds since kvstashd started.")                             \
	X(F, U64, pool_capacity_bytes, GAUGE, SMP, BYTES, "pool", "capacity_bytes",                \
	  "Pool", "%s capacity", NULL, "Host pool bytes, all nodes together.")                     \
	X(F, U64, pool_used_bytes, GAUGE, SMP, BYTES, "pool", "used_bytes",                        \
	  "Pool", ", %s used", NULL, "Host pool bytes holding blocks, all nodes together.")        \
	X(D, pool_used_pct, PCT, pool_used_bytes, pool_capacity_bytes, NULL, NULL,                 \
	  "Pool", " (%s)", NULL, NULL)                                                             \
	X(D, pool_free_bytes, SUB0, pool_capacity_bytes, pool_used_bytes, "pool", "free_bytes",    \
	  "Pool", ", %s free", NULL, NULL)                                                         \
	X(S, NODE, "pool", "nodes", "Pool")                                                        \
	X(F, U64, blocks_resident, GAUGE, SMP, COUNT, "blocks", "resident",                        \
	  "Blocks", "%s resident",                                                                 \
	  "kvstash_blocks_resident", "Blocks visible to QUERY (every shard saved).")               \
	X(F, U64, blocks_partial, GAUGE, SMP, COUNT, "blocks", "partial",                          \
	  "Blocks", ", %s partial (waiting for shards)",                                           \
	  "kvstash_blocks_partial", "Blocks waiting for shards of other ranks.")                   \
	X(F, U64, query_ops, COUNTER, CTR, COUNT, "queries", "ops",                                \
	  "Queries", "%s ops:",                                                                    \
	  "kvstash_query_ops_total", "QUERY operations.")                                          \
	X(F, U64, query_blocks_hit, COUNTER, CTR, COUNT, "queries", "blocks_hit",                  \
	  "Queries", " %s blocks hit",                                                             \
	  "kvstash_query_blocks_hit_total", "Blocks found by QUERY.")                              \
	X(F, U64, query_blocks_missed, COUNTER, CTR, COUNT, "queries", "blocks_missed",            \
	  "Queries", ", %s missed",                                                                \
	  "kvstash_query_blocks_missed_total",                                                     \
	  "Blocks asked for by QUERY and not found (from the first miss on).")                     \
	X(D, query_hit_ratio, SHARE, query_blocks_hit, query_blocks_missed, "queries", "hit_ratio",\
	  "Queries", ", hit ratio %s", NULL, NULL)                                                 \
	X(F, U64, save_ops, COUNTER, CTR, COUNT, "saves", "ops",                                   \
	  "Saves", "%s ops:",                                                                      \
	  "kvstash_save_ops_total", "SAVE operations.")                                            \
	X(F, U64, save_blocks_stored, COUNTER, CTR, COUNT, "saves", "blocks_stored",               \
	  "Saves", " %s blocks stored",                                                            \
	  "kvstash_save_blocks_stored_total", "Blocks copied into the pool.")                      \
	X(F, U64, save_blocks_skipped, COUNTER, CTR, COUNT, "saves", "blocks_skipped",             \
	  "Saves", ", %s skipped (already resident)",                                              \
	  "kvstash_save_blocks_skipped_total",                                                     \
	  "Blocks not copied because they were resident already.")                                 \
	X(F, U64, load_ops, COUNTER, CTR, COUNT, "loads", "ops",                                   \
	  "Loads", "%s ops:",                                                                      \
	  "kvstash_load_ops_total", "LOAD operations.")                                            \
	X(F, U64, load_blocks, COUNTER, CTR, COUNT, "loads", "blocks",                             \
	  "Loads", " %s blocks",                                                                   \
	  "kvstash_load_blocks_total", "Blocks copied back to engines.")                           \
	X(F, U64, evictions, COUNTER, SMP, COUNT, "blocks", "evictions",                           \
	  "Evictions", "%s",                                                                       \
	  "kvstash_evictions_total", "Blocks evicted to make room.")                               \
	X(F, U64, partial_reclaimed, COUNTER, SMP, COUNT, "blocks", "partial_reclaimed",           \
	  "Evictions", ", partial blocks reclaimed %s",                                            \
	  "kvstash_partial_blocks_reclaimed_total",                                                \
	  "Blocks dropped because not every shard arrived in time.")                               \
	X(F, U64, leases_live, GAUGE, SMP, COUNT, "leases", "live",                                \
	  "Leases", "%s live",                                                                     \
	  "kvstash_leases_live", "Leases pinning blocks now.")                                     \
	X(F, U64, leases_created, COUNTER, SMP, COUNT, "leases", "created",                        \
	  "Leases", ", %s created",                                                                \
	  "kvstash_leases_created_total", "Leases created by QUERY.")                              \
	X(F, U64, leases_expired, COUNTER, SMP, COUNT, "leases", "expired",                        \
	  "Leases", ", %s expired",                                                                \
	  "kvstash_leases_expired_total", "Leases that reached their TTL.")                        \
	X(F, U64, leases_released, COUNTER, SMP, COUNT, "leases", "released",                      \
	  "Leases", ", %s released",                                                               \
	  "kvstash_leases_released_total", "Leases dropped by RELEASE or by their session's end.") \
	X(F, U64, bytes_saved, COUNTER, CTR, BYTES, "saves", "bytes",                              \
	  "Copies", "saved %s",                                                                    \
	  "kvstash_copy_bytes_total{direction=\"save\"}", "Bytes copied, per direction.")          \
	X(D, save_rate, RATE, bytes_saved, save_ns, NULL, NULL, "Copies", " at %s", NULL, NULL)    \
	X(F, U64, bytes_loaded, COUNTER, CTR, BYTES, "loads", "bytes",                             \
	  "Copies", ", loaded %s",                                                                 \
	  "kvstash_copy_bytes_total{direction=\"load\"}", "Bytes copied, per direction.")          \
	X(D, load_rate, RATE, bytes_loaded, load_ns, NULL, NULL, "Copies", " at %s", NULL, NULL)   \
	X(I, HIST, save_hist, "kvstash_copy_duration_seconds{direction=\"save\"}",                 \
	  "Time from an operation's copy start to its completion, per direction.")                 \
	X(I, HIST, load_hist, "kvstash_copy_duration_seconds{direction=\"load\"}",                 \
	  "Time from an operation's copy start to its completion, per direction.")                 \
	X(F, U64, save_ns, COUNTER, CTR, NS, "saves", "copy_ns", NULL, NULL,                       \
	  NULL, "Time spent in save copies.")                                                      \
	X(D, save_bytes_per_second, RATE, bytes_saved, save_ns, "saves", "bytes_per_second",       \
	  NULL, NULL, NULL, NULL)                                                                  \
	X(F, U64, load_ns, COUNTER, CTR, NS, "loads", "copy_ns", NULL, NULL,                       \
	  NULL, "Time spent in load copies.")                                                      \
	X(D, load_bytes_per_second, RATE, bytes_loaded, load_ns, "loads", "bytes_per_second",      \
	  NULL, NULL, NULL, NULL)                                                                  \
	X(F, U64, errors, COUNTER, CTR, COUNT, "", "errors",                                       \
	  "Errors", "%s operations failed",                                                        \
	  NULL, "Completions with a negative result.")                                             \
	X(F, U64, sessions_live, GAUGE, SMP, COUNT, "sessions", "live",                            \
	  "Sessions", "%s live",                                                                   \
	  NULL, "Engine and scheduler sessions past their handshake.")                             \
	X(D, sessions, DIFF, sessions_total, sessions_closed, NULL, NULL, NULL, NULL,              \
	  "kvstash_sessions", "Engine and scheduler sessions connected.")                          \
	X(F, U64, sessions_total, COUNTER, CTR, COUNT, "sessions", "total",                        \
	  "Sessions", ", %s total",                                                                \
	  "kvstash_sessions_total", "Sessions accepted since start.")                              \
	X(F, U64, sessions_refused, COUNTER, CTR, COUNT, "sessions", "refused",                    \
	  "Sessions", ", %s refused",                                                              \
	  "kvstash_sessions_refused_total", "HELLOs refused.")                                     \
	X(F, U64, protocol_errors, COUNTER, CTR, COUNT, "sessions", "protocol_errors",             \
	  "Sessions", ", %s protocol errors",                                                      \
	  "kvstash_protocol_errors_total", "Sessions ended for breaking the ring protocol.")       \
	X(I, U64, sessions_closed, NULL, "Sessions of sessions_total freed since.")                \
	X(I, ERRKIND, errors_by_kind, "kvstash_errors_total",                                      \
	  "Operations that completed with an error, by kind.")                                     \
	X(S, SESSION, "", "per_session", NULL)                                                     \
	X(S, REGISTRY, "", "registry", NULL)                                                       \
	X(S, SSD, "", "ssd", NULL)                                                                 \
	X(S, PEER, "", "peer", NULL)

#define KVS_STATS_NODE(X)                                                                          \
	X(F, I32, node, KEY, SMP, NONE, NULL, NULL, NULL, NULL,                                    \
	  "node", "NUMA node of the pool region; -1: not bound.")                                  \
	X(F, BOOL, hugepages, KEY, SMP, NONE, NULL, NULL, NULL, NULL,                              \
	  NULL, "Backed by hugetlb pages (else transparent hugepages are advised).")               \
	X(F, U64, capacity_bytes, GAUGE, SMP, BYTES, "", "capacity_bytes", NULL, "CAPACITY",       \
	  "kvstash_pool_capacity_bytes", "Host pool bytes, per NUMA node.")                        \
	X(F, U64, used_bytes, GAUGE, SMP, BYTES, "", "used_bytes", NULL, "USED",                   \
	  "kvstash_pool_used_bytes", "Host pool bytes holding blocks, per NUMA node.")             \
	X(D, free_bytes, SUB0, capacity_bytes, used_bytes, "", "free_bytes", NULL, "FREE",         \
	  NULL, NULL)                                                                              \
	X(F, U64, extents_total, GAUGE, SMP, COUNT, "", "extents_total", NULL, NULL,               \
	  NULL, "Extents of the region.")                                                          \
	X(F, U64, extents_free, GAUGE, SMP, COUNT, "", "extents_free", NULL, NULL,                 \
	  NULL, "Extents given to no block size.")                                                 \
	X(D, extents, PAIR, extents_free, extents_total, NULL, NULL, NULL, "EXTENTS FREE/TOTAL",   \
	  NULL, NULL)

#define KVS_STATS_SESSION(X)                                                                       \
	X(F, U64, session_id, KEY, SMP, NONE, NULL, NULL, NULL, NULL,                              \
	  NULL, "The session's id.")                                                               \
	X(F, U32, pid, KEY, SMP, NONE, NULL, NULL, NULL, NULL,                                     \
	  NULL, "The engine's process id.")                                                        \
	X(F, U32, tp_rank, KEY, SMP, NONE, NULL, NULL, NULL, NULL,                                 \
	  NULL, "The session's tensor-parallel rank.")                                             \
	X(F, U64, ops, COUNTER, CTR, COUNT, "", "ops", NULL, "OPS",                                \
	  NULL, "SQEs taken.")                                                                     \
	X(F, U64, errors, COUNTER, CTR, COUNT, "", "errors", NULL, "ERRORS",                       \
	  NULL, "Completions with a negative result.")                                             \
	X(F, U64, save_blocks, COUNTER, CTR, COUNT, "", "save_blocks", NULL, "SAVED",              \
	  NULL, "Blocks copied into the pool.")                                                    \
	X(F, U64, load_blocks, COUNTER, CTR, COUNT, "", "load_blocks", NULL, "LOADED",             \
	  NULL, "Blocks copied back to the engine.")                                               \
	X(F, U64, query_hits, COUNTER, CTR, COUNT, "", "query_hits", NULL, "HITS",                 \
	  NULL, "Blocks found by QUERY.")                                                          \
	X(F, U64, query_misses, COUNTER, CTR, COUNT, "", "query_misses", NULL, "MISSES",           \
	  NULL, "Blocks asked for by QUERY and not found.")                                        \
	X(F, U64, bytes_saved, COUNTER, CTR, BYTES, "", "bytes_saved", NULL, "BYTES SAVED",        \
	  NULL, "Bytes copied into the pool.")                                                     \
	X(F, U64, bytes_loaded, COUNTER, CTR, BYTES, "", "bytes_loaded", NULL, "BYTES LOADED",     \
	  NULL, "Bytes copied back to the engine.")                                                \
	X(F, U64, inflight, GAUGE, SMP, COUNT, "", "inflight", NULL, NULL,                         \
	  NULL, "SQEs taken and not completed yet.")                                               \
	X(F, NAME, instance, KEY, SMP, NONE, NULL, NULL, NULL, NULL,                               \
	  NULL, "The engine instance of the session.")

/*
 * The cluster registry client (sidecar/cluster/registry.h): struct
 * registry_stats field for field, read with registry_get_stats() for each
 * reply, and the state's name from registry_state_name(), so a CLI needs
 * no table of states.  One message, sent only by a kvstashd with a
 * [cluster] section, in the STATS reply and in the STATUS reply.
 */
#define KVS_STATS_REGISTRY(X)                                                                      \
	X(F, NAME, state_name, GAUGE, SMP, NONE, "", "state", "state", "%s",                       \
	  NULL, "The state's name (registry_state_name()).")                                       \
	X(F, U32, state, GAUGE, MOD, NONE, "", "state_code", NULL, NULL,                           \
	  "kvstash_registry_state",                                                                \
	  "Registry client state: 0 disconnected, 1 connecting, 2 handshake, 3 ready, "            \
	  "4 conflict, 5 closed.")                                                                 \
	X(F, BOOL, connected, GAUGE, MOD, NONE, "", "connected", "state", ", connected %s",        \
	  "kvstash_registry_connected", "1 while connected to Redis.")                             \
	X(F, BOOL, leased, GAUGE, MOD, NONE, "", "leased", "state", ", leased %s",                 \
	  "kvstash_registry_leased", "1 while this node holds its lease.")                         \
	X(F, BOOL, backfilling, GAUGE, MOD, NONE, "", "backfilling", "state", ", backfilling %s",  \
	  "kvstash_registry_backfilling",                                                          \
	  "1 while resident blocks are re-registered after a lease acquisition.")                  \
	X(F, U64, epoch, GAUGE, MOD, NONE, "", "epoch", "state", ", epoch %s",                     \
	  "kvstash_registry_epoch", "Epoch of the lease held or last held; 0: never leased.")      \
	X(F, U64, queue_depth, GAUGE, MOD, COUNT, "queue", "depth", NULL, NULL,                    \
	  "kvstash_registry_queue_depth", "Changes waiting in the registration queue.")            \
	X(F, U64, queue_capacity, GAUGE, MOD, COUNT, "queue", "capacity", NULL, NULL,              \
	  "kvstash_registry_queue_capacity", "Entries of the registration queue.")                 \
	X(D, queue, PAIR, queue_depth, queue_capacity, NULL, NULL, "queue", "%s queued",           \
	  NULL, NULL)                                                                              \
	X(F, U64, enqueued, COUNTER, MOD, COUNT, "queue", "enqueued", "queue", ", %s enqueued",    \
	  "kvstash_registry_enqueued_total", "Registrations and removals enqueued.")               \
	X(F, U64, delivered, COUNTER, MOD, COUNT, "queue", "delivered", "queue", ", %s delivered", \
	  "kvstash_registry_delivered_total", "Changes Redis applied (netted ones included).")     \
	X(F, U64, dropped_overflow, COUNTER, MOD, COUNT, "dropped", "overflow",                    \
	  "dropped", "%s overflow",                                                                \
	  "kvstash_registry_dropped_total{reason=\"overflow\"}",                                   \
	  "Changes dropped, by reason: queue full (overflow), no lease or connection when "        \
	  "dequeued (offline), a failed or fenced attempt (failed).")                              \
	X(F, U64, dropped_offline, COUNTER, MOD, COUNT, "dropped", "offline",                      \
	  "dropped", ", %s offline",                                                               \
	  "kvstash_registry_dropped_total{reason=\"offline\"}",                                    \
	  "Changes dropped, by reason: queue full (overflow), no lease or connection when "        \
	  "dequeued (offline), a failed or fenced attempt (failed).")                              \
	X(F, U64, dropped_failed, COUNTER, MOD, COUNT, "dropped", "failed",                        \
	  "dropped", ", %s failed",                                                                \
	  "kvstash_registry_dropped_total{reason=\"failed\"}",                                     \
	  "Changes dropped, by reason: queue full (overflow), no lease or connection when "        \
	  "dequeued (offline), a failed or fenced attempt (failed).")                              \
	X(F, U64, backfilled, COUNTER, MOD, COUNT, "queue", "backfilled", "queue",                 \
	  ", %s backfilled",                                                                       \
	  "kvstash_registry_backfilled_total", "Blocks re-registered after a lease acquisition.")  \
	X(F, U64, round_trips, COUNTER, MOD, COUNT, "redis", "round_trips", "redis", "%s replies", \
	  "kvstash_registry_round_trips_total", "Replies received from Redis.")                    \
	X(F, U64, last_rtt_us, GAUGE, MOD, US, "redis", "last_rtt_us", "redis",                    \
	  ", last round trip %s",                                                                  \
	  "kvstash_registry_last_rtt_seconds", "Round trip of the last reply from Redis.")         \
	X(F, U64, errors, COUNTER, MOD, COUNT, "redis", "errors", "redis", ", %s errors",          \
	  "kvstash_registry_errors_total", "Error replies, timeouts and protocol violations.")     \
	X(F, U64, connects, COUNTER, MOD, COUNT, "redis", "connects", "redis", ", %s connects",    \
	  "kvstash_registry_connects_total", "Connections to Redis established.")                  \
	X(F, U64, disconnects, COUNTER, MOD, COUNT, "redis", "disconnects", "redis",               \
	  ", %s disconnects",                                                                      \
	  "kvstash_registry_disconnects_total", "Connections to Redis lost or closed.")            \
	X(F, U64, leases_acquired, COUNTER, MOD, COUNT, "leases", "acquired", "leases",            \
	  "%s acquired",                                                                           \
	  "kvstash_registry_leases_acquired_total", "Node leases acquired (each a new epoch).")    \
	X(F, U64, leases_lost, COUNTER, MOD, COUNT, "leases", "lost", "leases", ", %s lost",       \
	  "kvstash_registry_leases_lost_total", "Node leases lost: expired, fenced or taken over.")\
	X(F, U64, queries, COUNTER, MOD, COUNT, "queries", "ops", "ops", "%s cluster queries",     \
	  "kvstash_registry_queries_total", "Cluster queries asked of the registry.")              \
	X(F, U64, query_hits, COUNTER, MOD, COUNT, "queries", "hits", "ops",                       \
	  ", %s with a holder",                                                                    \
	  "kvstash_registry_query_hits_total", "Cluster queries answered with another holder.")    \
	X(F, U64, flushes, COUNTER, MOD, COUNT, "", "flushes", "ops", ", %s flushes",              \
	  "kvstash_registry_flushes_total", "Cluster flushes asked of the registry.")              \
	X(F, NAME, master, GAUGE, SMP, NONE, "redis", "master", "master", "%s",                    \
	  NULL, "The Redis this node registers with (HOST:PORT), or last did; empty: none yet.")   \
	X(F, NAME, discovery, GAUGE, SMP, NONE, "redis", "discovery", "master", " (%s)",           \
	  NULL, "How it was found: direct ([cluster] redis) or sentinel ([cluster] sentinels).")   \
	X(F, NAME, master_name, GAUGE, SMP, NONE, "redis", "master_name", NULL, NULL,        \
	  NULL, "With Sentinel: the master's name ([cluster] master_name); else empty.")           \
	X(F, U32, sentinels, GAUGE, MOD, COUNT, "redis", "sentinels", NULL, NULL,                  \
	  NULL, "Sentinels configured.")                                                           \
	X(F, U32, sentinels_up, GAUGE, MOD, COUNT, "redis", "sentinels_up", NULL, NULL,            \
	  "kvstash_registry_sentinels_up",                                                         \
	  "Sentinels that answered this node's last look for the master.")                         \
	X(F, U64, failovers, COUNTER, MOD, COUNT, "redis", "failovers", "failover", "%s followed", \
	  "kvstash_registry_failovers_total",                                                      \
	  "Failovers followed: the registry moved to another master the sentinels named.")        \
	X(F, U64, last_failover_ms, GAUGE, SMP, MS, "redis", "last_failover_ms", "failover",       \
	  ", the last %s ms ago", NULL,                                                            \
	  "Time since the last failover followed; 0: none.")                                       \
	X(F, NAME, last_failover_from, GAUGE, SMP, NONE, "redis", "last_failover_from", NULL,      \
	  NULL, NULL, "The master before the last failover followed.")                            \
	X(F, NAME, incarnation, GAUGE, SMP, NONE, "", "incarnation", "state",                      \
	  ", incarnation %s", NULL,                                                                \
	  "This process's incarnation id: with the node and the epoch it names this node's "       \
	  "incarnation, never repeated even when Redis forgot every epoch.")                       \
	X(F, U64, connect_attempts, COUNTER, MOD, COUNT, "redis", "connect_attempts", "redis",     \
	  ", %s attempts", "kvstash_registry_connect_attempts_total",                              \
	  "Connections to Redis tried, made or not: less connects, the retries of a node that "    \
	  "cannot reach it.")

/*
 * The SSD tier (sidecar/ssd/ssd.h, sidecar/store/store.h): the tier-wide
 * counters of struct ssd_stats, the store's use of the tier (struct
 * store_stats: spills, SSD hits), and the hits by tier.  One message,
 * sent only by a kvstashd with an [ssd] section, in the STATS reply; its
 * drives follow it, one KVS_STATS_SSD_DRIVE message each (the S row: in
 * the views, the drives come after every line of the tier).
 */
#define KVS_STATS_SSD(X)                                                                           \
	X(F, U32, nr_drives, GAUGE, SMP, COUNT, "", "drives", "drives", "%s",                      \
	  "kvstash_ssd_drives", "Drives of the SSD tier.")                                         \
	X(F, U32, drives_online, GAUGE, SMP, COUNT, "", "drives_online", "drives", ", %s online",  \
	  "kvstash_ssd_drives_online", "Drives of the SSD tier online (recovered, no fault).")     \
	X(F, U64, capacity_bytes, GAUGE, SMP, BYTES, "", "capacity_bytes", "drives",               \
	  ", %s capacity", NULL, "Bytes of every drive together.")                                 \
	X(F, U64, hits_dram, COUNTER, SMP, COUNT, "hits", "dram", "hits", "%s in DRAM",            \
	  "kvstash_tier_hits_total{tier=\"dram\"}",                                                \
	  "Blocks found by QUERY, by the tier that held them (DRAM: query hits less SSD hits).")   \
	X(F, U64, hits_ssd, COUNTER, STORE, COUNT, "hits", "ssd", "hits", ", %s on SSD",           \
	  "kvstash_tier_hits_total{tier=\"ssd\"}",                                                 \
	  "Blocks found by QUERY, by the tier that held them (DRAM: query hits less SSD hits).")   \
	X(D, ssd_share, SHARE, hits_ssd, hits_dram, "hits", "ssd_share", "hits",                   \
	  " (%s from SSD)", NULL, NULL)                                                            \
	X(F, U64, read_failed, COUNTER, STORE, COUNT, "hits", "read_failed", "hits",               \
	  ", %s read back failed", "kvstash_ssd_read_failed_total",                                \
	  "SSD hits whose read back failed (a shorter prefix, never wrong bytes).")                \
	X(F, U64, reads_pending, GAUGE, SMP, COUNT, "hits", "reads_pending", "hits",               \
	  ", %s being read", NULL, "SSD hits being read into DRAM now, every drive together.")     \
	X(F, U64, spilled, COUNTER, STORE, COUNT, "spills", "spilled", "spills", "%s spilled",     \
	  "kvstash_ssd_spilled_total", "Evicted blocks whose shards were queued for the SSD.")     \
	X(F, U64, spill_skipped, COUNTER, STORE, COUNT, "spills", "skipped", "spills",             \
	  ", %s skipped", "kvstash_ssd_spill_skipped_total",                                       \
	  "Evicted blocks not written: already on SSD, refused, or no room.")                      \
	X(F, U64, spill_failed, COUNTER, STORE, COUNT, "spills", "failed", "spills",               \
	  ", %s failed", "kvstash_ssd_spill_failed_total",                                         \
	  "Spilled blocks whose write did not make it.")                                           \
	X(F, U64, spill_dropped, COUNTER, STORE, COUNT, "spills", "dropped", "spills",             \
	  ", %s dropped (drive behind)", "kvstash_ssd_spill_dropped_total",                        \
	  "Evicted blocks dropped unwritten: needed at once while the drive was behind.")          \
	X(F, U64, spilling_bytes, GAUGE, STORE, BYTES, "spills", "spilling_bytes", "spills",       \
	  ", %s being written", "kvstash_ssd_spilling_bytes",                                      \
	  "Pool bytes held by writes to the SSD.")                                                 \
	X(F, U64, admitted, COUNTER, MOD, COUNT, "writes", "admitted", "writes", "%s admitted",    \
	  "kvstash_ssd_admitted_total", "Writes the admission policy let through.")                \
	X(F, U64, not_admitted, COUNTER, MOD, COUNT, "writes", "not_admitted", "writes",           \
	  ", %s not admitted", "kvstash_ssd_not_admitted_total",                                   \
	  "Writes the admission filter refused (one-hit blocks).")                                 \
	X(F, U64, exists, COUNTER, MOD, COUNT, "writes", "exists", "writes",                       \
	  ", %s already on SSD", "kvstash_ssd_write_exists_total",                                 \
	  "Writes skipped: the block was on SSD already.")                                         \
	X(F, U64, dropped, COUNTER, MOD, COUNT, "writes", "dropped", "writes", ", %s refused",     \
	  "kvstash_ssd_backpressure_total{reason=\"refused\"}",                                    \
	  "Writes lost to backpressure, by reason: refused at a full queue, displaced from it "    \
	  "by a write worth more.")                                                                \
	X(F, U64, displaced, COUNTER, MOD, COUNT, "writes", "displaced", "writes",                 \
	  ", %s displaced", "kvstash_ssd_backpressure_total{reason=\"displaced\"}",                \
	  "Writes lost to backpressure, by reason: refused at a full queue, displaced from it "    \
	  "by a write worth more.")                                                                \
	X(F, U64, lookups, COUNTER, MOD, COUNT, "index", "lookups", "index", "%s lookups",         \
	  "kvstash_ssd_lookups_total", "Lookups in the SSD index.")                                \
	X(F, U64, lookup_hits, COUNTER, MOD, COUNT, "index", "lookup_hits", "index",               \
	  ", %s found", "kvstash_ssd_lookup_hits_total", "Lookups in the SSD index that found.")   \
	X(F, U64, index_entries, GAUGE, SMP, COUNT, "index", "blocks", "index", ", %s blocks",     \
	  "kvstash_ssd_index_blocks", "Blocks the SSD index holds (every drive).")                 \
	X(F, U64, index_bytes, GAUGE, SMP, BYTES, "index", "bytes", "index", " in %s of DRAM",     \
	  "kvstash_ssd_index_bytes", "DRAM the SSD index takes.")                                  \
	X(F, U64, bytes_written, COUNTER, SMP, BYTES, "bytes", "written", "bytes", "%s written",   \
	  NULL, "Bytes written to every drive together.")                                          \
	X(F, U64, bytes_read, COUNTER, SMP, BYTES, "bytes", "read", "bytes", ", %s read",          \
	  NULL, "Bytes read from every drive together.")                                           \
	X(F, U64, written_ahead, COUNTER, STORE, COUNT, "spills", "written_ahead", "spills",       \
	  ", %s written ahead", "kvstash_ssd_written_ahead_total",                                 \
	  "Resident blocks written to the SSD while its drives were idle, before eviction.")      \
	X(S, SSD_DRIVE, "", "per_drive", NULL)

/*
 * One drive of the SSD tier: struct ssd_drive_stats of ssd_get_stats(),
 * the state's name from ssd_drive_state_name(), and its latency
 * histograms: as quantiles in the message (the upper bound of the bucket
 * where the quantile falls, 0 with no I/O yet) and, for Prometheus, as
 * histograms of their own (the I rows: the sampler's, not the message's).
 */
#define KVS_STATS_SSD_DRIVE(X)                                                                     \
	X(F, U32, drive, KEY, SMP, NONE, NULL, NULL, NULL, NULL,                                   \
	  "drive", "The drive's index, in the order of [ssd] path.")                               \
	X(F, U32, state, GAUGE, MOD, NONE, "", "state_code", NULL, NULL,                           \
	  "kvstash_ssd_drive_state",                                                               \
	  "SSD drive state: 0 recovering, 1 online, 2 offline, 3 closed.")                         \
	X(F, NAME, path, KEY, SMP, NONE, NULL, NULL, NULL, NULL,                                   \
	  NULL, "The drive's file or device (its last bytes when longer).")                        \
	X(F, NAME, state_name, GAUGE, SMP, NONE, "", "state", NULL, "STATE",                       \
	  NULL, "The state's name (ssd_drive_state_name()).")                                      \
	X(F, U64, capacity_bytes, GAUGE, MOD, BYTES, "", "capacity_bytes", NULL, "CAPACITY",       \
	  "kvstash_ssd_capacity_bytes", "Bytes of the drive the tier uses.")                       \
	X(F, U64, bytes_written, COUNTER, MOD, BYTES, "bytes", "written", NULL, "WRITTEN",         \
	  "kvstash_ssd_bytes_total{direction=\"write\"}", "Bytes moved, per direction.")           \
	X(F, U64, bytes_read, COUNTER, MOD, BYTES, "bytes", "read", NULL, "READ",                  \
	  "kvstash_ssd_bytes_total{direction=\"read\"}", "Bytes moved, per direction.")            \
	X(F, U64, writes, COUNTER, MOD, COUNT, "ios", "writes", NULL, NULL,                        \
	  "kvstash_ssd_ios_total{direction=\"write\"}",                                            \
	  "Block I/Os completed successfully, per direction.")                                     \
	X(F, U64, reads, COUNTER, MOD, COUNT, "ios", "reads", NULL, NULL,                          \
	  "kvstash_ssd_ios_total{direction=\"read\"}",                                             \
	  "Block I/Os completed successfully, per direction.")                                     \
	X(F, U64, write_errors, COUNTER, MOD, COUNT, "errors", "write", NULL, "W ERR",             \
	  "kvstash_ssd_errors_total{kind=\"write\"}",                                              \
	  "I/O errors, by kind: a failed or short write or read, a payload failing its "           \
	  "checksum (crc).")                                                                       \
	X(F, U64, read_errors, COUNTER, MOD, COUNT, "errors", "read", NULL, "R ERR",               \
	  "kvstash_ssd_errors_total{kind=\"read\"}",                                               \
	  "I/O errors, by kind: a failed or short write or read, a payload failing its "           \
	  "checksum (crc).")                                                                       \
	X(F, U64, crc_errors, COUNTER, MOD, COUNT, "errors", "crc", NULL, "CRC",                   \
	  "kvstash_ssd_errors_total{kind=\"crc\"}",                                                \
	  "I/O errors, by kind: a failed or short write or read, a payload failing its "           \
	  "checksum (crc).")                                                                       \
	X(F, U64, stale_reads, COUNTER, MOD, COUNT, "", "stale_reads", NULL, NULL,                 \
	  "kvstash_ssd_stale_reads_total", "Reads of a block whose region was reused first.")      \
	X(F, U64, drops, COUNTER, MOD, COUNT, "", "drops", NULL, "DROPS",                          \
	  "kvstash_ssd_drops_total", "Writes not made: backpressure or the rate cap.")             \
	X(F, U64, regions_reclaimed, COUNTER, MOD, COUNT, "regions", "reclaimed", NULL, NULL,      \
	  "kvstash_ssd_regions_reclaimed_total", "Regions reused (FIFO over regions).")            \
	X(F, U64, blocks_evicted, COUNTER, MOD, COUNT, "regions", "blocks_evicted", NULL, NULL,    \
	  "kvstash_ssd_evictions_total", "Blocks dropped from the SSD index by region reuse.")     \
	X(F, U64, regions_abandoned, COUNTER, MOD, COUNT, "regions", "abandoned", NULL, NULL,      \
	  "kvstash_ssd_regions_abandoned_total", "Regions given up after an I/O error.")           \
	X(F, U64, recovered_blocks, GAUGE, MOD, COUNT, "recovery", "blocks", NULL, NULL,           \
	  "kvstash_ssd_recovered_blocks", "Blocks found by the start-up scan.")                    \
	X(F, U64, recovered_regions, GAUGE, MOD, COUNT, "recovery", "regions", NULL, NULL,         \
	  "kvstash_ssd_recovered_regions", "Regions found by the start-up scan.")                  \
	X(F, U64, recovery_bad, GAUGE, MOD, COUNT, "recovery", "bad", NULL, NULL,                  \
	  "kvstash_ssd_recovery_bad_blocks", "Blocks the start-up scan found torn or corrupt.")    \
	X(F, U64, recovery_us, GAUGE, SMP, US, "recovery", "time_us", NULL, NULL,                  \
	  "kvstash_ssd_recovery_seconds", "Time the start-up scan took; 0 until it is done.")      \
	X(F, U64, recovery_bytes_read, GAUGE, MOD, BYTES, "recovery", "bytes_read", NULL, NULL,    \
	  NULL, "Bytes the start-up scan read.")                                                   \
	X(F, U32, nr_regions, GAUGE, MOD, COUNT, "regions", "total", NULL, NULL,                   \
	  "kvstash_ssd_regions", "Regions of the drive.")                                          \
	X(F, U32, io_align, GAUGE, MOD, BYTES, "", "io_align", NULL, NULL,                         \
	  NULL, "Direct I/O alignment of the drive.")                                              \
	X(F, BOOL, fixed_buffers, GAUGE, MOD, NONE, "", "fixed_buffers", NULL, NULL,               \
	  NULL, "The pool is registered with the drive's io_uring.")                               \
	X(F, BOOL, last_clean, GAUGE, MOD, NONE, "", "last_clean", NULL, NULL,                     \
	  NULL, "The previous stop was clean.")                                                    \
	X(F, BOOL, formatted, GAUGE, MOD, NONE, "", "formatted", NULL, NULL,                       \
	  NULL, "The drive was formatted at this start.")                                          \
	X(F, U32, queued_writes, GAUGE, MOD, COUNT, "", "queued_writes", NULL, "QUEUED",           \
	  "kvstash_ssd_queued_writes", "Writes waiting in the drive's queue.")                     \
	X(F, U32, inflight, GAUGE, MOD, COUNT, "", "inflight", NULL, "INFLIGHT",                   \
	  "kvstash_ssd_inflight", "Block I/Os submitted and not completed.")                       \
	X(F, U32, reads_pending, GAUGE, MOD, COUNT, "", "reads_pending", NULL, "READING",          \
	  "kvstash_ssd_reads_pending", "Reads queued or in flight.")                               \
	X(F, U64, write_p50_us, GAUGE, SMP, US, "latency", "write_p50_us", NULL, NULL,             \
	  NULL, "Median write latency (a bucket's upper bound).")                                  \
	X(F, U64, write_p99_us, GAUGE, SMP, US, "latency", "write_p99_us", NULL, "W P99",          \
	  NULL, "99th percentile write latency (a bucket's upper bound).")                         \
	X(F, U64, read_p50_us, GAUGE, SMP, US, "latency", "read_p50_us", NULL, NULL,               \
	  NULL, "Median read latency (a bucket's upper bound).")                                   \
	X(F, U64, read_p99_us, GAUGE, SMP, US, "latency", "read_p99_us", NULL, "R P99",            \
	  NULL, "99th percentile read latency (a bucket's upper bound).")                          \
	X(F, U64, regions_opened, COUNTER, MOD, COUNT, "regions", "opened", NULL, NULL,            \
	  "kvstash_ssd_regions_opened_total",                                                      \
	  "Regions emptied for new blocks (their old cycle erased), ahead of the writes.")         \
	X(F, U64, erase_syncs, COUNTER, MOD, COUNT, "regions", "erase_syncs", NULL, NULL,          \
	  "kvstash_ssd_erase_syncs_total",                                                         \
	  "Datasyncs (cache flushes) that made a batch of those erases durable.")                  \
	X(I, HIST, write_lat, "kvstash_ssd_io_duration_seconds{direction=\"write\"}",              \
	  "Time from a block I/O's submission to its completion, per direction.")                  \
	X(I, HIST, read_lat, "kvstash_ssd_io_duration_seconds{direction=\"read\"}",                \
	  "Time from a block I/O's submission to its completion, per direction.")

/*
 * The failure kinds of the peer service, in the order of enum kvspeer_fail
 * (<kvstash/peer.h>): M(..., KIND, kind, what) for each, the arguments
 * after M first.  From this list come the enum, kvspeer_fail_name() and
 * both sides' rows of KVS_STATS_PEER (and their copy in kvstashd), so a
 * new kind is one line at its end.  Here rather than in <kvstash/peer.h>:
 * wire.h's struct kvs_msg_stats_peer needs it where libkvspeer is not
 * installed.
 */
#define KVS_PEER_FAILS(M, ...)                                                                     \
	M(__VA_ARGS__, CONNECT, connect, "fetch: connect refused, unreachable")                    \
	M(__VA_ARGS__, TIMEOUT, timeout, "fetch: deadline; serve: handshake not done in time")     \
	M(__VA_ARGS__, RESET, reset, "connection lost mid-request")                                \
	M(__VA_ARGS__, AUTH, auth, "wrong secret or cluster, either side")                         \
	M(__VA_ARGS__, PROTOCOL, protocol, "malformed, oversized or unexpected message")           \
	M(__VA_ARGS__, STALE, stale, "generation changed / epoch or node not expected")            \
	M(__VA_ARGS__, ALLOC, alloc, "fetch: the host's alloc returned NULL")                      \
	M(__VA_ARGS__, REFUSED, refused, "fetch: the peer answered with an error")                 \
	M(__VA_ARGS__, ALLOWLIST, allowlist, "serve: a connection from an address not allowed")    \
	M(__VA_ARGS__, LIMIT, limit, "serve: a connection or lock over a limit")                   \
	M(__VA_ARGS__, BAD_LOCK, bad_lock, "serve: a lock id this connection does not hold")       \
	M(__VA_ARGS__, RANGE, range, "serve: blocks or sizes out of range")                        \
	M(__VA_ARGS__, STALL, stall, "a peer stalled mid-message or stopped reading")              \
	M(__VA_ARGS__, HOST, host, "serve: lock callback error, range outside registered memory")  \
	M(__VA_ARGS__, TRANSPORT, transport, "UCX error")

/*
 * One failure kind of the peer service (KVS_PEER_FAILS, whose order the
 * rows keep) on one side, fetching from peers or serving them: field,
 * JSON member and Prometheus label come from the same two words.  The
 * rows of both sides are consecutive: one family.
 */
#define KVS_STATS_PEER_FAIL(X, side, KIND, kind, what)                                             \
	X(F, U64, side##_fail_##kind, COUNTER, SMP, COUNT, #side "_failures", #kind, NULL, NULL,   \
	  "kvstash_peer_failures_total{side=\"" #side "\",kind=\"" #kind "\"}",                    \
	  "Failures of the peer service, by side (fetching from peers, serving them) and kind.")

/*
 * The peer service (libkvspeer, <kvstash/peer.h>; sidecar/control/peer-host.h):
 * struct kvspeer_stats of peer_sample(), the fetch latency as quantiles
 * (the upper bound of the log2 microsecond bucket where the quantile
 * falls, 0 before any fetch) and, for Prometheus, as a histogram (the I
 * row: the sampler's), the failures per side and kind, and the peers'
 * number.  One message, sent only by a kvstashd with a peer service
 * ([cluster] peer_listen), in the STATS reply and in the STATUS reply; its
 * peers follow it, one KVS_STATS_PEER_INFO message each.
 */
#define KVS_STATS_PEER(X)                                                                          \
	X(F, U32, nr_peers, GAUGE, SMP, COUNT, "", "peers", "peers", "%s",                         \
	  "kvstash_peer_peers",                                                                    \
	  "Peers of the service: servers fetched from, clients fetching (256 at most).")           \
	X(F, U32, peers_failed, GAUGE, SMP, COUNT, "", "peers_failed", "peers", ", %s failed",     \
	  "kvstash_peer_peers_failed", "Peers whose last attempt failed.")                         \
	X(F, U64, fetches, COUNTER, MOD, COUNT, "fetches", "completed", "fetches", "%s completed:",\
	  NULL, "Fetches completed (full, partial and empty together).")                           \
	X(F, U64, fetches_full, COUNTER, MOD, COUNT, "fetches", "full", "fetches", " %s full",     \
	  "kvstash_peer_fetches_total{result=\"full\"}",                                           \
	  "Fetches completed, by result: every key fetched (full), some (partial), none (empty).") \
	X(F, U64, fetches_partial, COUNTER, MOD, COUNT, "fetches", "partial", "fetches",           \
	  ", %s partial", "kvstash_peer_fetches_total{result=\"partial\"}",                        \
	  "Fetches completed, by result: every key fetched (full), some (partial), none (empty).") \
	X(F, U64, fetches_empty, COUNTER, MOD, COUNT, "fetches", "empty", "fetches", ", %s empty", \
	  "kvstash_peer_fetches_total{result=\"empty\"}",                                          \
	  "Fetches completed, by result: every key fetched (full), some (partial), none (empty).") \
	X(F, U64, fetch_blocks, COUNTER, MOD, COUNT, "fetches", "blocks", "fetched", "%s blocks",  \
	  "kvstash_peer_fetched_blocks_total", "Blocks fetched from peers and verified.")          \
	X(F, U64, fetch_bytes, COUNTER, MOD, BYTES, "fetches", "bytes", "fetched", ", %s",         \
	  "kvstash_peer_fetched_bytes_total", "Bytes of the blocks fetched from peers, verified.") \
	X(F, U64, fetch_p50_us, GAUGE, SMP, US, "fetches", "p50_us", "fetched",                    \
	  ", latency p50 %s", NULL,                                                                \
	  "Median fetch latency, submission to completion (a bucket's upper bound).")              \
	X(F, U64, fetch_p99_us, GAUGE, SMP, US, "fetches", "p99_us", "fetched", ", p99 %s",        \
	  NULL, "99th percentile fetch latency (a bucket's upper bound).")                         \
	X(F, U64, fetch_latency_sum_us, COUNTER, MOD, US, "fetches", "latency_sum_us", NULL, NULL, \
	  NULL, "Fetch latencies summed.")                                                         \
	X(I, HIST, fetch_lat, "kvstash_peer_fetch_duration_seconds",                               \
	  "Time from a fetch's submission to its completion.")                                     \
	X(F, U64, fetch_failures, COUNTER, SMP, COUNT, "fetches", "failures", "fetches",           \
	  ", %s failed", NULL, "Fetches that ended on a failure (every kind together).")           \
	X(F, U64, serve_blocks, COUNTER, MOD, COUNT, "serves", "blocks", "served", "%s blocks",    \
	  "kvstash_peer_served_blocks_total",                                                      \
	  "Blocks served to peers: every shard sent (TCP) or verified (UCX).")                     \
	X(F, U64, serve_bytes, COUNTER, MOD, BYTES, "serves", "bytes", "served", ", %s",           \
	  "kvstash_peer_served_bytes_total", "Bytes of the blocks served to peers.")               \
	X(F, U64, locks_held, GAUGE, MOD, COUNT, "locks", "held", "locks", "%s held",              \
	  "kvstash_peer_locks_held", "Locks peers hold on blocks of this node now.")               \
	X(F, U64, locks_granted, COUNTER, MOD, COUNT, "locks", "granted", "locks", ", %s granted", \
	  "kvstash_peer_locks_granted_total", "Lock requests of peers that pinned blocks.")        \
	X(F, U64, locks_released, COUNTER, MOD, COUNT, "locks", "released", "locks",               \
	  ", %s released", "kvstash_peer_locks_total{end=\"released\"}",                           \
	  "Locks ended, by how: released by the peer, expired at their TTL, dropped with their "   \
	  "connection.")                                                                           \
	X(F, U64, locks_expired, COUNTER, MOD, COUNT, "locks", "expired", "locks", ", %s expired", \
	  "kvstash_peer_locks_total{end=\"expired\"}",                                             \
	  "Locks ended, by how: released by the peer, expired at their TTL, dropped with their "   \
	  "connection.")                                                                           \
	X(F, U64, locks_dropped, COUNTER, MOD, COUNT, "locks", "dropped", "locks", ", %s dropped", \
	  "kvstash_peer_locks_total{end=\"dropped\"}",                                             \
	  "Locks ended, by how: released by the peer, expired at their TTL, dropped with their "   \
	  "connection.")                                                                           \
	X(F, U64, conns_open, GAUGE, MOD, COUNT, "conns", "open", "conns", "%s open",              \
	  "kvstash_peer_connections", "Peer connections open now, both sides.")                    \
	X(F, U64, conns_accepted, COUNTER, MOD, COUNT, "conns", "accepted", "conns",               \
	  ", %s accepted", "kvstash_peer_connections_accepted_total",                              \
	  "Connections accepted from peers.")                                                      \
	X(F, U64, serve_failures, COUNTER, SMP, COUNT, "serves", "failures", "served",             \
	  ", %s failures", NULL, "Failures serving peers (every kind together).")                  \
	KVS_PEER_FAILS(KVS_STATS_PEER_FAIL, X, fetch)                                              \
	KVS_PEER_FAILS(KVS_STATS_PEER_FAIL, X, serve)                                              \
	X(F, U64, conns_unauth, GAUGE, MOD, COUNT, "conns", "unauthenticated", "conns",            \
	  ", %s not authenticated", "kvstash_peer_connections_unauthenticated",                    \
	  "Peer connections served that have not authenticated yet.")                              \
	X(F, U64, refused_host_conns, COUNTER, MOD, COUNT, "refused", "host_conns", "refused",     \
	  "%s over a host's connections", "kvstash_peer_refused_total{reason=\"host_conns\"}",     \
	  "Peer connections and locks refused, by the limit: a host's connections "                \
	  "(host_conns), its unauthenticated ones (host_unauth), the unauthenticated budget "      \
	  "(unauth_budget), every connection (max_conns), a host's locks (host_locks).")           \
	X(F, U64, refused_host_unauth, COUNTER, MOD, COUNT, "refused", "host_unauth", "refused",   \
	  ", %s over its unauthenticated", "kvstash_peer_refused_total{reason=\"host_unauth\"}",   \
	  "Peer connections and locks refused, by the limit: a host's connections "                \
	  "(host_conns), its unauthenticated ones (host_unauth), the unauthenticated budget "      \
	  "(unauth_budget), every connection (max_conns), a host's locks (host_locks).")           \
	X(F, U64, refused_unauth_budget, COUNTER, MOD, COUNT, "refused", "unauth_budget",          \
	  "refused", ", %s over the unauthenticated budget",                                       \
	  "kvstash_peer_refused_total{reason=\"unauth_budget\"}",                                  \
	  "Peer connections and locks refused, by the limit: a host's connections "                \
	  "(host_conns), its unauthenticated ones (host_unauth), the unauthenticated budget "      \
	  "(unauth_budget), every connection (max_conns), a host's locks (host_locks).")           \
	X(F, U64, refused_total, COUNTER, MOD, COUNT, "refused", "max_conns", "refused",           \
	  ", %s over every connection", "kvstash_peer_refused_total{reason=\"max_conns\"}",        \
	  "Peer connections and locks refused, by the limit: a host's connections "                \
	  "(host_conns), its unauthenticated ones (host_unauth), the unauthenticated budget "      \
	  "(unauth_budget), every connection (max_conns), a host's locks (host_locks).")           \
	X(F, U64, locks_refused_host, COUNTER, MOD, COUNT, "refused", "host_locks", "refused",     \
	  ", %s locks over a host's", "kvstash_peer_refused_total{reason=\"host_locks\"}",         \
	  "Peer connections and locks refused, by the limit: a host's connections "                \
	  "(host_conns), its unauthenticated ones (host_unauth), the unauthenticated budget "      \
	  "(unauth_budget), every connection (max_conns), a host's locks (host_locks).")           \
	X(F, U64, evicted_unauth, COUNTER, MOD, COUNT, "refused", "evicted_unauth", "refused",     \
	  "; %s unauthenticated closed for a newcomer", "kvstash_peer_unauth_evicted_total",       \
	  "Unauthenticated peer connections closed to make room for a newcomer (the host "         \
	  "holding the most of the unauthenticated budget gives its oldest).")                     \
	X(F, U64, fetch_staged_bytes, GAUGE, SMP, BYTES, "fetches", "staged_bytes", "staged",      \
	  "%s held by fetches in flight", "kvstash_peer_fetch_staged_bytes",                       \
	  "Pool bytes fetches in flight hold, counted in their instances' unsealed share.")        \
	X(S, PEER_INFO, "", "per_peer", NULL)

/*
 * One peer of the peer service: struct kvspeer_peer_info of peer_sample(),
 * with the names of its role and state, so a CLI needs no table of them,
 * and the text of its last error.  Not exported to Prometheus: its labels
 * would be per peer.
 */
#define KVS_STATS_PEER_INFO(X)                                                                     \
	X(F, NAME, addr, KEY, SMP, NONE, NULL, NULL, NULL, NULL,                                   \
	  NULL, "Server: its listen address; client: the address it comes from (ADDR:PORT).")      \
	X(F, NAME, node, KEY, SMP, NONE, NULL, NULL, NULL, NULL,                                   \
	  NULL, "Its authenticated node name; empty until then.")                                  \
	X(F, U32, role, GAUGE, SMP, NONE, "", "role_code", NULL, NULL,                             \
	  NULL, "1: a server this node fetches from; 2: a client fetching from this node.")        \
	X(F, NAME, role_name, GAUGE, SMP, NONE, "", "role", NULL, "ROLE",                          \
	  NULL, "The role's name: server or client.")                                              \
	X(F, U32, state, GAUGE, SMP, NONE, "", "state_code", NULL, NULL,                           \
	  NULL, "Peer state: 1 idle, 2 busy, 3 connecting, 4 failed, 5 closed.")                   \
	X(F, NAME, state_name, GAUGE, SMP, NONE, "", "state", NULL, "STATE",                       \
	  NULL, "The state's name.")                                                               \
	X(F, U32, conns, GAUGE, SMP, COUNT, "", "conns", NULL, "CONNS",                            \
	  NULL, "Connections open with it.")                                                       \
	X(F, U32, locks, GAUGE, SMP, COUNT, "", "locks", NULL, "LOCKS",                            \
	  NULL, "Locks held: this node's on it (server), its on this node (client).")              \
	X(F, U64, epoch, GAUGE, SMP, NONE, "", "epoch", NULL, NULL,                                \
	  NULL, "Its registry epoch, as it told in its handshake.")                                \
	X(F, U64, blocks, COUNTER, SMP, COUNT, "", "blocks", NULL, "BLOCKS",                       \
	  NULL, "Blocks fetched from it (server) or served to it (client).")                       \
	X(F, U64, bytes, COUNTER, SMP, BYTES, "", "bytes", NULL, "BYTES",                          \
	  NULL, "Bytes of those blocks.")                                                          \
	X(F, U64, failures, COUNTER, SMP, COUNT, "", "failures", NULL, "FAILURES",                 \
	  NULL, "Failures with it.")                                                               \
	X(F, U64, idle_ms, GAUGE, SMP, MS, "", "idle_ms", NULL, NULL,                              \
	  NULL, "Time since its last activity.")                                                   \
	X(F, I32, last_error, GAUGE, SMP, NONE, "", "last_error", NULL, NULL,                      \
	  NULL, "-errno of its last failure; 0: none.")                                            \
	X(F, BOOL, authenticated, GAUGE, SMP, NONE, "", "authenticated", NULL, NULL,               \
	  NULL, "It proved the cluster secret: its node name is known.")                           \
	X(F, NAME, last_error_text, GAUGE, SMP, NONE, "", "last_error_text", NULL, "LAST_ERROR",   \
	  NULL, "The last error's text (strerror()); empty: none.")

/* clang-format on */

/*
 * Message sizes, header and reserved words included: fixed for a wire
 * minor revision (see above).
 */
#define KVS_STATS_GLOBAL_SIZE  304u
#define KVS_STATS_NODE_SIZE    88u
#define KVS_STATS_SESSION_SIZE 200u
#define KVS_STATS_REGISTRY_SIZE 640u /* minor 5; 320 before */
#define KVS_STATS_SSD_SIZE	 256u
#define KVS_STATS_SSD_DRIVE_SIZE 448u
#define KVS_STATS_PEER_SIZE	 512u
#define KVS_STATS_PEER_INFO_SIZE 448u

/* ---- the message structs (wire.h) ------------------------------------ */

#define KVS_STATS_CTYPE_U64  uint64_t
#define KVS_STATS_CTYPE_U32  uint32_t
#define KVS_STATS_CTYPE_I32  int32_t
#define KVS_STATS_CTYPE_BOOL uint32_t
#define KVS_STATS_CTYPE_NAME char
#define KVS_STATS_CDIM_U64
#define KVS_STATS_CDIM_U32
#define KVS_STATS_CDIM_I32
#define KVS_STATS_CDIM_BOOL
#define KVS_STATS_CDIM_NAME [KVS_NAME_MAX]

#define KVS_STATS_MEMBER_(shape, ...)	    KVS_STATS_MEMBER_##shape(__VA_ARGS__)
#define KVS_STATS_MEMBER_F(type, name, ...) KVS_STATS_CTYPE_##type name KVS_STATS_CDIM_##type;
#define KVS_STATS_MEMBER_D(...)
#define KVS_STATS_MEMBER_S(...)
#define KVS_STATS_MEMBER_I(...)

#define KVS_STATS_BYTES_(shape, ...) KVS_STATS_BYTES_##shape(__VA_ARGS__)
#define KVS_STATS_BYTES_F(type, ...) +sizeof(KVS_STATS_CTYPE_##type KVS_STATS_CDIM_##type)
#define KVS_STATS_BYTES_D(...)
#define KVS_STATS_BYTES_S(...)
#define KVS_STATS_BYTES_I(...)

/* Reserved words left in a message of @size bytes with the fields of @table. */
#define KVS_STATS_RESV(size, table) \
	(((size) - sizeof(struct kvs_msg_hdr) - (0 table(KVS_STATS_BYTES_))) / sizeof(uint64_t))

/* The struct of a group's message: header, fields, reserved words (zero). */
/* clang-format off */
#define KVS_STATS_STRUCT(tag, table, size)                          \
	struct tag {                                                \
		struct kvs_msg_hdr hdr;                             \
		table(KVS_STATS_MEMBER_)                            \
		uint64_t resv[KVS_STATS_RESV(size, table)];         \
	}
/* clang-format on */

/* ---- a module's own fields (kvstashd) -------------------------------- */

/*
 * The rows of source MOD are fields of the group's module stats struct by
 * the same name and type (struct registry_stats, ssd_stats,
 * ssd_drive_stats: declared from these rows; struct kvspeer_stats, the
 * peer library's public struct, by hand), those of source STORE fields of
 * struct store_stats.  A module declares them with
 * table(KVS_STATS_MOD_MEMBER_) (or _STORE_MEMBER_) and copies them, from
 * its live counters into a snapshot and from the snapshot into its
 * message, with a function of KVS_STATS_COPY(): so a counter of the
 * module is one row here and the line that counts it.
 */
#define KVS_STATS_MOD_MEMBER_(shape, ...) \
	KVS_STATS_OWN_##shape(MOD, KVS_STATS_OWN_MEMBER, __VA_ARGS__)
#define KVS_STATS_STORE_MEMBER_(shape, ...) \
	KVS_STATS_OWN_##shape(STORE, KVS_STATS_OWN_MEMBER, __VA_ARGS__)
#define KVS_STATS_MOD_COPY_(shape, ...) KVS_STATS_OWN_##shape(MOD, KVS_STATS_OWN_COPY, __VA_ARGS__)
#define KVS_STATS_STORE_COPY_(shape, ...) \
	KVS_STATS_OWN_##shape(STORE, KVS_STATS_OWN_COPY, __VA_ARGS__)

/* f(type, name) for a row of source @own, nothing for the others. */
#define KVS_STATS_OWN_F(own, f, type, name, kind, src, ...) \
	KVS_STATS_IF_##own##_##src(f, type, name)
#define KVS_STATS_OWN_D(...)
#define KVS_STATS_OWN_S(...)
#define KVS_STATS_OWN_I(...)
#define KVS_STATS_IF_MOD_MOD(f, ...) f(__VA_ARGS__)
#define KVS_STATS_IF_MOD_STORE(...)
#define KVS_STATS_IF_MOD_CTR(...)
#define KVS_STATS_IF_MOD_SMP(...)
#define KVS_STATS_IF_STORE_STORE(f, ...) f(__VA_ARGS__)
#define KVS_STATS_IF_STORE_MOD(...)
#define KVS_STATS_IF_STORE_CTR(...)
#define KVS_STATS_IF_STORE_SMP(...)

#define KVS_STATS_OWN_MEMBER(type, name) KVS_STATS_CTYPE_##type name KVS_STATS_CDIM_##type;
/*
 * Each a relaxed load: the source may be counted as it is copied (each
 * value alone, ordered against nothing); from a snapshot, a plain load.
 */
#define KVS_STATS_OWN_COPY(type, name) d->name = __atomic_load_n(&s->name, __ATOMIC_RELAXED);

/*
 * fn(d, s): copy the fields of source @own (MOD, STORE) of @table from
 * @s (a struct @stag) into @d (a struct @dtag).
 */
/* clang-format off */
#define KVS_STATS_COPY(fn, dtag, stag, table, own)                            \
	static inline void fn(struct dtag *d, const struct stag *s)           \
	{                                                                     \
		table(KVS_STATS_##own##_COPY_)                                \
	}
/* clang-format on */

/* ---- descriptors exported by libkvstash (kvstash.h) ------------------ */

/* kvs_stats_field.type */
#define KVS_STATS_T_U64	 1u
#define KVS_STATS_T_U32	 2u
#define KVS_STATS_T_I32	 3u
#define KVS_STATS_T_BOOL 4u
#define KVS_STATS_T_NAME 5u

/* kvs_stats_field.kind */
#define KVS_STATS_K_KEY	    1u
#define KVS_STATS_K_COUNTER 2u
#define KVS_STATS_K_GAUGE   3u

/* kvs_stats_field.unit */
#define KVS_STATS_U_NONE  0u
#define KVS_STATS_U_COUNT 1u
#define KVS_STATS_U_BYTES 2u
#define KVS_STATS_U_NS	  3u
#define KVS_STATS_U_MS	  4u
#define KVS_STATS_U_US	  5u

#endif /* KVSTASH_STATS_H */
