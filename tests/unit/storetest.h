/* SPDX-License-Identifier: MIT */
/*
 * What the unit tests of the store, the lease table, instances and
 * namespaces share: a small host pool (8 MiB of 256 KiB extents, NUMA
 * off, no hugepages) and a store over it, keys, SAVE and QUERY in one
 * call, and a lease holder that counts the references the lease table
 * takes.  Every test thread must be a registered RCU reader
 * (st_setup() in a checked fixture does it).
 */
#ifndef KVS_STORETEST_H
#define KVS_STORETEST_H

#include <stdbool.h>
#include <stdint.h>

#include "store/lease.h"
#include "store/pool.h"
#include "store/store.h"

#define ST_KiB	  (1ull << 10)
#define ST_MiB	  (1ull << 20)
#define ST_POOL	  (8 * ST_MiB)
#define ST_EXTENT (256 * ST_KiB)
#define ST_SLOT	  (64 * ST_KiB)			  /* the usual slot size: 4 per extent */
#define ST_SLOTS  ((uint32_t)(ST_POOL / ST_SLOT)) /* 128 */
#define ST_MAX	  1024u				  /* keys per st_save_begin() */

/* Checked fixture: register the test thread with RCU, and back. */
void st_setup(void);
void st_teardown(void);

/* Entries of a table of cases, for tcase_add_loop_test(). */
#define ST_CASES(a) ((int)(sizeof(a) / sizeof((a)[0])))

struct pool *st_pool_new(void);

/*
 * A store over @pool with [pool] unsealed_share @share; with @leases,
 * SAVEs that find nothing to evict revoke through lease_revoke_for().
 */
struct store *st_store_new(struct pool *pool, uint32_t share, struct lease_table *leases);

/* A class of @slot_bytes held in @st, region 0, shard @shard of @nshards. */
struct store_place st_place(struct store *st, uint64_t slot_bytes, uint32_t shard,
			    uint32_t nshards);

/* Key @i: distinct for distinct @i, never all zero. */
void st_key(uint8_t *key, uint32_t i);

struct st_save {
	uint32_t nents, skipped, nospace, quota;
	struct save_ent ents[ST_MAX];
};

/* SAVE phase 1 of keys @first..@first+@n-1 (engine block ids 0..n-1). */
void st_save_begin(struct store *st, struct store_tenant *t, struct store_ns *ns,
		   const struct store_place *p, uint32_t first, uint32_t n, struct st_save *ret);
/* Both phases, the copy a success: how many shards were stored. */
uint32_t st_save(struct store *st, struct store_tenant *t, struct store_ns *ns,
		 const struct store_place *p, uint32_t first, uint32_t n);

/* QUERY of keys @first..@first+@n-1; with @blocks, pinned into it. */
uint32_t st_query(struct store *st, const struct store_ns *ns, uint32_t first, uint32_t n,
		  struct block **blocks, uint64_t *ret_bytes);
void st_unpin(struct block **blocks, uint32_t n);

/* A lease holder whose references (st_holder_ops) are counted. */
struct st_holder {
	struct lease_holder lh;
	int refs;
	char name[32];
};
extern const struct lease_holder_ops st_holder_ops;
void st_holder_init(struct st_holder *h, const char *name, uint32_t world_size);

/* A lease table with these bounds and st_holder_ops (ttl in ms: 0 expires at the next sweep). */
struct lease_table *st_leases_new(uint32_t ttl_ms, uint32_t max_per_holder,
				  uint64_t max_bytes_holder, uint64_t max_bytes_uid,
				  uint64_t max_bytes);

#endif /* KVS_STORETEST_H */
