/* SPDX-License-Identifier: MIT */
/*
 * kvstashd's side of peer transfer (libkvspeer, include/kvstash/peer.h;
 * the design is docs/PEER.md): the one file that knows both the store and
 * the library.
 *
 * Serving: [cluster] peer_listen starts the library's service on the
 * cluster interface over the host pool's regions (only the pool is ever
 * served).  A peer's lock request names a namespace by its registry
 * digest; the host ops find it, pin the leading resident blocks with the
 * leases' CAS (store_query()), and hand the library each shard's slot,
 * length and generation (pool_slot_generation()).  Unlock unpins.
 *
 * Fetching: a QUERY with KVS_QUERY_FETCH reaches the control thread as a
 * cluster op (io/worker.h) with its local hits counted.  With a node hint,
 * or once the registry named the holder of the longest run, peer_fetch()
 * submits one fetch; its alloc callback takes a slot per shard as a SAVE
 * does (store_save_begin(): in the index but unsealed, so no QUERY sees
 * it and no eviction takes it), its done callback seals the verified
 * prefix and drops the rest (store_save_end(): sealing registers the new
 * copies with the registry through the store's hooks), then hands the op
 * back to its worker, which answers over what is resident then.  A second
 * fetching QUERY whose first missing key is being fetched joins that
 * fetch (kvspeer_fetch_join()) instead of starting one.
 *
 * Threads: peer_init/_shutdown/_fini and peer_fetch on the control thread;
 * the host ops, alloc and done on the library's service thread (a
 * registered RCU reader: thread_start).  The in-flight list has its own
 * mutex (the join's ordering partner of done).
 */
#ifndef KVS_CONTROL_PEER_HOST_H
#define KVS_CONTROL_PEER_HOST_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

struct daemon;
struct kvs_config;
struct op;

/* --check-config: the peer keys of [cluster].  0 or -errno with the reason in @why. */
int peer_check_config(const struct kvs_config *cfg, char *why, size_t wl);

/*
 * Start the peer service when [cluster] peer_listen is set (d->peer stays
 * NULL otherwise).  After the store and the namespace table, before the
 * workers.  -errno, logged.
 */
int peer_init(struct daemon *d);

/*
 * SIGTERM: every fetch in flight completes (its QUERY answers with what
 * came), every lock held for a peer is released, the service stops.
 */
void peer_shutdown(struct daemon *d);

/* After the workers stopped and the metrics thread ended: free what is left. */
void peer_fini(struct daemon *d);

/*
 * The service's counters into @ret_stats and up to @max of its peers into
 * @ret_peers (their number into *@ret_nr; NULL/0: none asked), for STATS,
 * STATUS and /metrics: false without a peer service.  After the drain
 * stopped the service, its last counters and no peer.  Control and
 * metrics threads (kvspeer_peers() is a call into the service thread,
 * never made from it).
 */
struct kvspeer_stats;
struct kvspeer_peer_info;
/* Pool bytes held by fetches in flight (their slots, charged to their instances). */
uint64_t peer_staged_bytes(struct daemon *d);
bool peer_sample(struct daemon *d, struct kvspeer_stats *ret_stats,
		 struct kvspeer_peer_info *ret_peers, unsigned max, unsigned *ret_nr);

/* The registry leased this node under @epoch: peers that connect from now on are told. */
void peer_set_epoch(struct daemon *d, uint64_t epoch);

/* Start the fetch of a fetching QUERY's @op; it always goes back to its worker. */
void peer_fetch(struct daemon *d, struct op *op, const char *addr, const char *node,
		uint64_t epoch, uint32_t nkeys);

#endif /* KVS_CONTROL_PEER_HOST_H */
