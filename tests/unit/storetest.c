/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/compiler.h>

#include "base/conf.h"
#include "storetest.h"

void st_setup(void)
{
	urcu_memb_register_thread();
}

void st_teardown(void)
{
	urcu_memb_unregister_thread();
}

struct pool *st_pool_new(void)
{
	/* What ST_POOL and ST_EXTENT say, unbound and without hugepages. */
	static const char *const pool_keys[][2] = {
		{ "numa", "off" }, { "hugepages", "no" },     { "prefault_threads", "1" },
		{ "size", "8M" },  { "extent_size", "256K" },
	};
	struct kvs_config c;
	struct pool *p = NULL;
	const int node = -1;
	char err[256];

	ck_assert_int_eq(config_init(&c), 0);
	for (unsigned i = 0; i < ST_CASES(pool_keys); i++)
		ck_assert_msg(config_set(&c, "pool", pool_keys[i][0], pool_keys[i][1], err,
					 sizeof(err)) == 0,
			      "[pool] %s: %s", pool_keys[i][0], err);
	ck_assert_int_eq(pool_create(&c, &node, 1, NULL, &p), 0);
	ck_assert_uint_eq(p->capacity_bytes, ST_POOL);
	ck_assert_uint_eq(p->extent_size, ST_EXTENT);
	config_free(&c);
	return p;
}

struct store *st_store_new(struct pool *pool, uint32_t share, struct lease_table *leases)
{
	const struct store_params sp = {
		.pool = pool,
		.unsealed_share = share,
		.revoke = leases ? lease_revoke_for : NULL,
		.leases = leases,
	};
	struct store *st = NULL;

	ck_assert_int_eq(store_new(&sp, &st), 0);
	ck_assert_ptr_eq(store_pool(st), pool);
	return st;
}

struct store_place st_place(struct store *st, uint64_t slot_bytes, uint32_t shard, uint32_t nshards)
{
	struct store_place p = { .shard = shard, .nshards = nshards };

	ck_assert_int_eq(store_class_get(st, slot_bytes, &p.class_id), 0);
	return p;
}

void st_key(uint8_t *key, uint32_t i)
{
	memset(key, 0xa5, KVS_KEY_SIZE);
	memcpy(key, &i, sizeof(i));
}

static void keys(uint8_t *k, uint32_t first, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		st_key(k + (size_t)i * KVS_KEY_SIZE, first + i);
}

void st_save_begin(struct store *st, struct store_tenant *t, struct store_ns *ns,
		   const struct store_place *p, uint32_t first, uint32_t n, struct st_save *ret)
{
	static uint8_t k[ST_MAX * KVS_KEY_SIZE];
	static uint32_t ids[ST_MAX];

	ck_assert_uint_le(n, ST_MAX);
	keys(k, first, n);
	for (uint32_t i = 0; i < n; i++)
		ids[i] = i;
	store_save_begin(st, t, ns, p, k, ids, n, ret->ents, &ret->nents, &ret->skipped,
			 &ret->nospace, &ret->quota);
	/* Every key is accounted for once. */
	ck_assert_uint_eq(ret->nents + ret->skipped + ret->nospace + ret->quota, n);
}

uint32_t st_save(struct store *st, struct store_tenant *t, struct store_ns *ns,
		 const struct store_place *p, uint32_t first, uint32_t n)
{
	static struct st_save s;

	st_save_begin(st, t, ns, p, first, n, &s);
	store_save_end(st, s.ents, s.nents, true, NULL);
	return s.nents;
}

uint32_t st_query(struct store *st, const struct store_ns *ns, uint32_t first, uint32_t n,
		  struct block **blocks, uint64_t *ret_bytes)
{
	static uint8_t k[ST_MAX * KVS_KEY_SIZE];
	uint64_t bytes = 0;
	uint32_t hits;

	ck_assert_uint_le(n, ST_MAX);
	keys(k, first, n);
	hits = store_query(st, ns, k, n, blocks != NULL, blocks, &bytes);
	if (ret_bytes)
		*ret_bytes = bytes;
	return hits;
}

void st_unpin(struct block **blocks, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		block_unpin(blocks[i]);
}

static void holder_get(struct lease_holder *lh)
{
	caa_container_of(lh, struct st_holder, lh)->refs++;
}

static void holder_put(struct lease_holder *lh)
{
	struct st_holder *h = caa_container_of(lh, struct st_holder, lh);

	ck_assert_int_gt(h->refs, 0);
	h->refs--;
}

const struct lease_holder_ops st_holder_ops = { .get = holder_get, .put = holder_put };

void st_holder_init(struct st_holder *h, const char *name, uint32_t world_size)
{
	snprintf(h->name, sizeof(h->name), "%s", name);
	h->refs = 0;
	lease_holder_init(&h->lh, h->name, world_size);
}

struct lease_table *st_leases_new(uint32_t ttl_ms, uint32_t max_per_holder,
				  uint64_t max_bytes_holder, uint64_t max_bytes_uid,
				  uint64_t max_bytes)
{
	const struct lease_params p = {
		.ttl_ms = ttl_ms,
		.max_per_holder = max_per_holder,
		.max_bytes_holder = max_bytes_holder,
		.max_bytes_uid = max_bytes_uid,
		.max_bytes = max_bytes,
		.ops = &st_holder_ops,
	};
	struct lease_table *lt = NULL;

	ck_assert_int_eq(lease_table_new(&p, &lt), 0);
	return lt;
}
