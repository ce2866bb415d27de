/* SPDX-License-Identifier: MIT */
/*
 * What the SSD tier's integration tests share: a directory on a real disk
 * where O_DIRECT works (tmpfs has none), payloads derived from their keys
 * (any wrong byte, length or block is detectable), and a harness around
 * ssd_open() that collects the callbacks and waits for them with bounded
 * polls (never sleeps as synchronisation).
 */
#ifndef KVS_SSDTEST_H
#define KVS_SSDTEST_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ssd/ssd.h"

#define ST_MAX_OPS    65536u
#define ST_TIMEOUT_MS 30000

struct st {
	struct ssd *ssd;
	struct ssd_config cfg;
	const char *paths[SSD_MAX_DRIVES];
	char pathbuf[SSD_MAX_DRIVES][512];
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int wres[ST_MAX_OPS]; /* INT32_MIN: no callback yet */
	int rres[ST_MAX_OPS];
	unsigned wdone, rdone;
	unsigned log_lines;
	bool quiet;
};

/*
 * A fresh directory for the test's files: $KVSTASH_SSD_TEST_DIR, else the
 * build tree, else /var/tmp; the first where O_DIRECT writes work.  Exits
 * 77 when there is none.  Removed at exit unless KVSTASH_TEST_KEEP=1.
 */
const char *st_dir(void);

/* Defaults: @nr files "drive0.." of @size in st_dir(), regions of @region. */
void st_config(struct st *t, unsigned nr, uint64_t size, uint64_t region);
/* ssd_open() on t->cfg; returns its result (err printed on failure). */
int st_open(struct st *t);
/* st_open() and wait for the recovery: the test fails unless both succeed. */
void st_start(struct st *t);
void st_close(struct st *t);
void st_abandon(struct st *t);

/* Key i in namespace ns: deterministic bytes; payload length from the key. */
void st_key(uint64_t i, uint8_t key[16]);
uint32_t st_len(uint64_t i, uint32_t min, uint32_t max);
void st_fill(uint64_t i, uint8_t *buf, uint32_t len);
/* 0 when @buf holds exactly key i's payload of @len. */
int st_check(uint64_t i, const uint8_t *buf, uint32_t len);

/* An aligned, zeroed buffer (512-byte aligned like pool slots). */
void *st_alloc(size_t len);

/* Namespace of @name (its identity as kvstashd builds it). */
uint32_t st_ns(struct st *t, const char *name, uint64_t slot_bytes);

/* Queue a write of key i (cookie = op); returns ssd_write()'s result. */
int st_write(struct st *t, uint32_t ns, uint64_t i, unsigned op, const void *buf, uint32_t len,
	     uint32_t value, uint32_t hits, void **ret_displaced);
/* Wait for op's write_done / read_done: its res, or INT32_MIN on timeout. */
int st_wait_write(struct st *t, unsigned op);
int st_wait_read(struct st *t, unsigned op);
/* Write key i and wait: its write_done res (or the submit error). */
int st_put(struct st *t, uint32_t ns, uint64_t i, uint32_t len);
/*
 * Look key i up and read it into a fresh buffer: 0 and byte-exact, -ENOENT
 * (miss), or the read's error (a miss too).  Any wrong byte fails the test.
 */
int st_get(struct st *t, uint32_t ns, uint64_t i, uint32_t len);

/* Which of keys 0..n-1 ssd_lookup() finds now (had[i]); their count. */
unsigned st_present(struct st *t, uint32_t ns, unsigned n, bool *had);
/*
 * st_get() of keys 0..n-1 (lengths st_len(i, min, max)): the test fails
 * on a key found that had[] says was gone, or on any error but a miss.
 * Returns how many were found.
 */
unsigned st_only_present(struct st *t, uint32_t ns, unsigned n, const bool *had, uint32_t min,
			 uint32_t max);

void st_reset_ops(struct st *t);

#endif
