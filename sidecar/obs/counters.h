/* SPDX-License-Identifier: MIT */
/*
 * kvstashd's counters, generated from the tables of <kvstash/stats.h>.
 *
 * A group's counters are the rows kvstashd counts itself: fields of source
 * CTR and the I rows (counters, histograms, error kinds that only
 * Prometheus shows).  A module declares the counters of its group with
 * COUNTERS_STRUCT() (the global and per-session ones are here; a drive's or
 * a peer's go with the module that owns the drive or the peer) and copies
 * them into its reply message with COUNTERS_READ().  The fields of
 * sources MOD and STORE are the owning module's (KVS_STATS_COPY(), stats.h)
 * and those of source SMP the module fills itself, from whoever owns them.
 *
 * Every counter is a relaxed atomic: threads count concurrently and a
 * reader takes each value alone, ordered against nothing (a reply is a
 * moment, not a transaction).  The events that count them are in
 * obs/account.h.
 */
#ifndef KVS_COUNTERS_H
#define KVS_COUNTERS_H

#include <stdint.h>

#include <kvstash/wire.h>

#include "obs/errkind.h"
#include "obs/hist.h"

#define CTR_ITYPE_U64	  uint64_t
#define CTR_ITYPE_HIST	  struct hist
#define CTR_ITYPE_ERRKIND uint64_t
#define CTR_IDIM_U64
#define CTR_IDIM_HIST
#define CTR_IDIM_ERRKIND [ERRK_COUNT]

#define CTR_MEMBER_(shape, ...)			 CTR_MEMBER_##shape(__VA_ARGS__)
#define CTR_MEMBER_F(type, name, kind, src, ...) CTR_MEMBER_##src(name)
#define CTR_MEMBER_CTR(name)			 uint64_t name;
#define CTR_MEMBER_SMP(name)
#define CTR_MEMBER_MOD(name)
#define CTR_MEMBER_STORE(name)
#define CTR_MEMBER_D(...)
#define CTR_MEMBER_S(...)
#define CTR_MEMBER_I(type, name, ...) CTR_ITYPE_##type name CTR_IDIM_##type;

/* struct @tag: the counters of the group of @table. */
#define COUNTERS_STRUCT(tag, table) \
	struct tag {                \
		table(CTR_MEMBER_)  \
	}

#define CTR_READ_(shape, ...)		       CTR_READ_##shape(__VA_ARGS__)
#define CTR_READ_F(type, name, kind, src, ...) CTR_READ_##src(name)
#define CTR_READ_CTR(name)		       m->name = counter_get(&c->name);
#define CTR_READ_SMP(name)
#define CTR_READ_MOD(name)
#define CTR_READ_STORE(name)
#define CTR_READ_D(...)
#define CTR_READ_S(...)
#define CTR_READ_I(...)

/* fn(c, m): copy the counters @c (struct @ctag) into their fields of message @m. */
#define COUNTERS_READ(fn, ctag, mtag, table)                        \
	static inline void fn(const struct ctag *c, struct mtag *m) \
	{                                                           \
		table(CTR_READ_)                                    \
	}

static inline void counter_add(uint64_t *c, uint64_t v)
{
	__atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

static inline uint64_t counter_get(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/* The daemon's, one per process (struct daemon holds it). */
COUNTERS_STRUCT(counters_global, KVS_STATS_GLOBAL);
/* One per session (struct session holds it). */
COUNTERS_STRUCT(counters_session, KVS_STATS_SESSION);

COUNTERS_READ(counters_global_read, counters_global, kvs_msg_stats_global, KVS_STATS_GLOBAL)
COUNTERS_READ(counters_session_read, counters_session, kvs_msg_stats_session, KVS_STATS_SESSION)

#endif /* KVS_COUNTERS_H */
