/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ssdtest.h"
#include "tiertest.h"

static char ini[2048];

const char *tt_path(const char *tag)
{
	static char path[1024];

	snprintf(path, sizeof(path), "%s/%s", st_dir(), tag);
	return path;
}

const char *tt_ini(const char *tag, uint64_t pool, const char *ssd_size, const char *extra)
{
	snprintf(ini, sizeof(ini),
		 "[pool]\nsize = %llu\nextent_size = 256K\n"
		 "[ssd]\npath = %s\nsize = %s\nregion_size = 1M\n%s",
		 (unsigned long long)pool, tt_path(tag), ssd_size, extra ? extra : "");
	return ini;
}

struct kvs_client *tt_worker(const struct kvsd *d, const char *inst, const char *ns,
			     struct test_kv *kv, uint64_t seg)
{
	return it_worker(d, inst, ns, 0, 1, kv, LAYOUT_PAGE_FIRST, TT_LAYERS, TT_BLOCKS, seg);
}

void tt_keys(uint64_t p, uint8_t keys[TT_BATCH * 16])
{
	it_keys(keys, TT_BATCH, p);
}

void tt_save(struct kvs_client *c, struct test_kv *kv, uint64_t p, uint32_t first)
{
	uint8_t keys[TT_BATCH * 16];
	uint32_t ids[TT_BATCH];

	tt_keys(p, keys);
	it_ids(ids, TT_BATCH, first);
	for (unsigned i = 0; i < TT_BATCH; i++)
		test_kv_fill(kv, ids[i], it_seed(p, i));
	CHECK_RES(it_save(c, keys, ids, TT_BATCH).res, TT_BATCH, "SAVE");
}

bool tt_counted(struct kvs_client *c, uint64_t p, unsigned i)
{
	uint8_t keys[TT_BATCH * 16];
	struct kvs_cqe q;

	tt_keys(p, keys);
	q = it_query(c, keys + 16 * i, 1, KVS_QUERY_NOLEASE);
	CHECK(q.res == 0 || q.res == 1, "QUERY of one key: %d", q.res);
	return q.res == 1;
}

bool tt_wait_counted(struct kvs_client *c, uint64_t p, unsigned i)
{
	for (int t = 0; t < 1000; t++) {
		if (tt_counted(c, p, i))
			return true;
		usleep(10000);
	}
	return false;
}

int tt_check_key(struct kvs_client *c, struct test_kv *kv, uint64_t p, unsigned i, uint32_t dst)
{
	uint8_t keys[TT_BATCH * 16];
	struct kvs_cqe q, e;

	tt_keys(p, keys);
	test_kv_poison(kv, dst, POISON);
	q = it_query(c, keys + 16 * i, 1, 0);
	CHECK(q.res == 0 || q.res == 1, "QUERY of one key: %d", q.res);
	if (q.res == 0)
		return 0;
	e = it_load(c, q.result0, &dst, 1, 0, 0);
	CHECK(e.res == 0 || e.res == 1, "LOAD of one block: %d", e.res);
	if (e.res == 0) {
		CHECK(test_kv_is_poison(kv, dst, POISON),
		      "prompt %llu block %u: a LOAD that copied nothing wrote the engine's block",
		      (unsigned long long)p, i);
		return 0;
	}
	CHECK(test_kv_check(kv, dst, it_seed(p, i)), "prompt %llu block %u: wrong bytes",
	      (unsigned long long)p, i);
	return 1;
}

int tt_check_prompt(struct kvs_client *c, struct test_kv *kv, uint64_t p, uint32_t dst,
		    int *ret_counted)
{
	uint8_t keys[TT_BATCH * 16];
	uint32_t ids[TT_BATCH];
	struct kvs_cqe q, e;

	tt_keys(p, keys);
	it_ids(ids, TT_BATCH, dst);
	for (unsigned i = 0; i < TT_BATCH; i++)
		test_kv_poison(kv, ids[i], POISON);
	q = it_query(c, keys, TT_BATCH, 0);
	CHECK(q.res >= 0 && q.res <= (int32_t)TT_BATCH, "QUERY of prompt %llu: %d",
	      (unsigned long long)p, q.res);
	if (ret_counted)
		*ret_counted = q.res;
	if (q.res == 0)
		return 0;
	e = it_load(c, q.result0, ids, (uint32_t)q.res, 0, 0);
	CHECK(e.res >= 0 && e.res <= q.res, "LOAD of prompt %llu's %d hits: %d",
	      (unsigned long long)p, q.res, e.res);
	for (int i = 0; i < e.res; i++)
		CHECK(test_kv_check(kv, ids[i], it_seed(p, (unsigned)i)),
		      "prompt %llu block %d: wrong bytes", (unsigned long long)p, i);
	for (unsigned i = (unsigned)e.res; i < TT_BATCH; i++)
		CHECK(test_kv_is_poison(kv, ids[i], POISON),
		      "prompt %llu block %u: past the LOAD's res %d, yet written",
		      (unsigned long long)p, i, e.res);
	return e.res;
}

void tt_wait_recovered(const struct kvsd *d, int n)
{
	int got = wait_log_count(d, "recovered in", n, 30000);

	CHECK(got >= n, "the SSD recovery never ended (%d of %d log lines)", got, n);
}

unsigned tt_check_all(struct kvs_client *c, struct test_kv *kv, unsigned nprompts)
{
	unsigned hits = 0;

	for (unsigned p = 0; p < nprompts; p++) {
		tt_check_prompt(c, kv, p, 2 * TT_BATCH, NULL);
		for (unsigned i = 0; i < TT_BATCH; i++)
			if (tt_counted(c, p, i))
				hits += (unsigned)tt_check_key(c, kv, p, i, 2 * TT_BATCH + i);
	}
	return hits;
}

struct kvs_client *tt_start(struct kvsd *d, const char *conf, const char *ns, struct test_kv *kv)
{
	struct kvs_client *c;

	it_start(d, conf);
	c = tt_worker(d, "tier", ns, kv, TT_SEG);
	tt_wait_recovered(d, 1);
	return c;
}

void tt_stop(struct kvsd *d, struct kvs_client *c, struct test_kv *kv)
{
	kvs_close(c);
	test_kv_free(kv);
	it_stop(d);
}
