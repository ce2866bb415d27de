/* SPDX-License-Identifier: MIT */
/*
 * What the SSD tier's end-to-end tests (test-tier-*.c) share: kvstashd's
 * [ssd] section on a file under st_dir() (which outlives every daemon of
 * the test, so a restarted one finds the blocks), prompts whose blocks
 * hold bytes derived from their key, and the checks that every block a
 * QUERY advertises loads byte-exact into poisoned other block ids.
 */
#ifndef KVS_TEST_TIERTEST_H
#define KVS_TEST_TIERTEST_H

#include <stdint.h>

#include "itest.h"

#define TT_BATCH  16u /* keys per prompt */
#define TT_LAYERS 4u
#define TT_BLOCKS 64u /* the engine's KV cache, in blocks */
#define TT_SEG	  8192u

/*
 * kvstashd's config: a pool of @pool bytes, [ssd] path st_dir()/@tag of
 * @ssd_size bytes (regions of 1M), then @extra verbatim (may be NULL).
 * The text is static: one config at a time.
 */
const char *tt_ini(const char *tag, uint64_t pool, const char *ssd_size, const char *extra);
/* The path of st_dir()/@tag (static). */
const char *tt_path(const char *tag);

/*
 * A worker (rank 0 of 1) of instance @inst in namespace @ns, segment size
 * @seg (TT_LAYERS, TT_BLOCKS, page-first).  Engines that follow each
 * other closely take different instance names: kvstashd may still hold
 * the last one's session when the next one says HELLO.
 */
struct kvs_client *tt_worker(const struct kvsd *d, const char *inst, const char *ns,
			     struct test_kv *kv, uint64_t seg);

/* Keys of prompt @p (TT_BATCH of them, a prefix chain); block i holds it_seed(@p, i). */
void tt_keys(uint64_t p, uint8_t keys[TT_BATCH * 16]);
/* SAVE prompt @p from ids [@first, @first + TT_BATCH) filled with its bytes. */
void tt_save(struct kvs_client *c, struct test_kv *kv, uint64_t p, uint32_t first);

/* Does a QUERY without a lease count key i of prompt @p (a prefix of one)? */
bool tt_counted(struct kvs_client *c, uint64_t p, unsigned i);
/* Wait (bounded: 10 s) until tt_counted(); false if it never is. */
bool tt_wait_counted(struct kvs_client *c, uint64_t p, unsigned i);

/*
 * Key i of prompt @p alone: QUERY with a lease; on a hit LOAD it into the
 * poisoned id @dst and check every byte.  A LOAD that copies nothing (the
 * read failed) must leave @dst poisoned.  Returns 1 for a block loaded
 * byte-exact, 0 for a miss (or a LOAD that copied nothing).
 */
int tt_check_key(struct kvs_client *c, struct test_kv *kv, uint64_t p, unsigned i, uint32_t dst);

/*
 * Prompt @p as an engine asks for it: QUERY the chain with a lease, LOAD
 * the prefix it counts into poisoned ids from @dst, check the res blocks
 * copied byte-exact and every id past res still poisoned.  Returns res;
 * the QUERY's count in *@ret_counted (may be NULL).
 */
int tt_check_prompt(struct kvs_client *c, struct test_kv *kv, uint64_t p, uint32_t dst,
		    int *ret_counted);

/* Wait (bounded) until the log holds @n lines of an SSD recovery's end. */
void tt_wait_recovered(const struct kvsd *d, int n);

/*
 * Prompts 0 .. @nprompts - 1, each as a prefix (tt_check_prompt()) and
 * key by key: every counted key loads byte-exact (the test fails
 * otherwise), the rest are misses.  Returns the keys that hit.
 */
unsigned tt_check_all(struct kvs_client *c, struct test_kv *kv, unsigned nprompts);

/*
 * kvstashd on @conf and the test's worker in namespace @ns over a new
 * test_kv, once the SSD tier recovered; and the end of both, the daemon
 * checked to exit 0 (no crash, a close that did not hang).
 */
struct kvs_client *tt_start(struct kvsd *d, const char *conf, const char *ns, struct test_kv *kv);
void tt_stop(struct kvsd *d, struct kvs_client *c, struct test_kv *kv);

#endif /* KVS_TEST_TIERTEST_H */
