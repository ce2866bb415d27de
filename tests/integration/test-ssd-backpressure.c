/* SPDX-License-Identifier: MIT */
/*
 * When the drive is slower than evictions (here: capped by write_rate),
 * ssd_write() never waits: a full queue refuses a block worth no more than
 * what is queued (-ENOBUFS, counted), and a more valuable block displaces
 * the least valuable queued one, whose cookie comes back at once and whose
 * write_done never comes; every write accepted and not displaced completes
 * and reads back byte-exact.  With write_policy = filter a block never
 * used is written only the second time it is evicted.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssdtest.h"

#define MiB (1ull << 20)
#define LEN 65536u
#define NB  60u

START_TEST(test_drops_and_displacement)
{
	struct st t = { 0 };
	uint8_t *bufs[NB];
	int sub[NB];
	bool displaced[NB] = { false };
	unsigned dropped = 0, nd = 0, last;
	struct ssd_stats s;
	uint32_t ns;

	st_config(&t, 1, 64 * MiB, 4 * MiB);
	t.cfg.write_queue = 4;
	t.cfg.queue_depth = 2;
	t.cfg.write_rate = 256 * 1024; /* a burst of four blocks, then four a second */
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "bp", 1);
	for (unsigned i = 0; i < NB; i++) {
		bufs[i] = st_alloc(LEN);
		st_fill(i, bufs[i], LEN);
	}
	/* A burst of cheap blocks: a few are taken, the rest refused at once. */
	for (unsigned i = 0; i < 40; i++) {
		sub[i] = st_write(&t, ns, i, i, bufs[i], LEN, 1, 1, NULL);
		ck_assert_msg(sub[i] == 0 || sub[i] == -ENOBUFS, "write %u: %d", i, sub[i]);
		dropped += sub[i] == -ENOBUFS;
	}
	ck_assert_uint_ge(dropped, 40 - 4 - 2 - 2);
	/*
	 * Valuable ones push cheap queued ones out, until the queue holds only
	 * valuable ones and the next is refused.  The drive drains a slot now
	 * and then (write_rate), so how many it takes depends on the machine;
	 * what each answer may be does not.
	 */
	for (last = 40; last < NB; last++) {
		void *out = NULL;

		sub[last] = st_write(&t, ns, last, last, bufs[last], LEN, 10, 1, &out);
		ck_assert_msg(sub[last] == 1 || sub[last] == 0 || sub[last] == -ENOBUFS,
			      "write %u: %d", last, sub[last]);
		if (sub[last] == -ENOBUFS) {
			dropped++;
			break;
		}
		if (sub[last] == 1) {
			unsigned victim = (unsigned)(uintptr_t)out;

			ck_assert_uint_lt(victim, 40);
			ck_assert_int_eq(sub[victim], 0);
			ck_assert(!displaced[victim]);
			displaced[victim] = true;
			nd++;
		}
	}
	ck_assert_uint_lt(last, NB);
	ck_assert_uint_ge(nd, 1);
	/*
	 * Worth less than everything queued now: refused, never displacing;
	 * taken only into a slot the drive freed meanwhile.
	 */
	for (last++; last < NB; last++) {
		sub[last] = st_write(&t, ns, last, last, bufs[last], LEN, 5, 1, NULL);
		ck_assert_msg(sub[last] == 0 || sub[last] == -ENOBUFS, "write %u: %d", last,
			      sub[last]);
		if (sub[last] == -ENOBUFS) {
			dropped++;
			break;
		}
	}
	ck_assert_uint_lt(last, NB);
	ck_assert_int_eq(ssd_wait_idle(t.ssd, 60000), 0);
	for (unsigned i = 0; i <= last; i++) {
		int r = st_get(&t, ns, i, LEN);

		if (sub[i] >= 0 && !displaced[i]) {
			ck_assert_msg(t.wres[i] == 0, "write %u: write_done %d", i, t.wres[i]);
			ck_assert_int_eq(r, 0);
		} else {
			ck_assert_msg(t.wres[i] == INT32_MIN, "write %u: a callback after a drop",
				      i);
			ck_assert_int_eq(r, -ENOENT);
		}
	}
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.dropped, dropped);
	ck_assert_uint_eq(s.displaced, nd);
	ck_assert_uint_eq(s.drive[0].drops, dropped + nd);
	st_close(&t);
	for (unsigned i = 0; i < NB; i++)
		free(bufs[i]);
}
END_TEST

START_TEST(test_admission_filter)
{
	struct st t = { 0 };
	uint8_t *buf = st_alloc(LEN);
	struct ssd_stats s;
	uint32_t ns;

	st_config(&t, 1, 32 * MiB, 4 * MiB);
	t.cfg.policy = SSD_POLICY_FILTER;
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "adm", 1);
	st_fill(1, buf, LEN);
	/* Never used, first eviction: not written. */
	ck_assert_int_eq(st_write(&t, ns, 1, 1, buf, LEN, 0, 0, NULL), -EAGAIN);
	ck_assert_int_eq(st_get(&t, ns, 1, LEN), -ENOENT);
	/* Evicted again: written. */
	ck_assert_int_eq(st_write(&t, ns, 1, 1, buf, LEN, 0, 0, NULL), 0);
	ck_assert_int_eq(st_wait_write(&t, 1), 0);
	ck_assert_int_eq(st_get(&t, ns, 1, LEN), 0);
	/* Used in DRAM: written the first time. */
	st_fill(2, buf, LEN);
	ck_assert_int_eq(st_write(&t, ns, 2, 2, buf, LEN, 0, 3, NULL), 0);
	ck_assert_int_eq(st_wait_write(&t, 2), 0);
	ck_assert_int_eq(st_get(&t, ns, 2, LEN), 0);
	ssd_get_stats(t.ssd, &s);
	ck_assert_uint_eq(s.not_admitted, 1);
	st_close(&t);

	/* With policy = spill the first eviction is written. */
	st_config(&t, 1, 32 * MiB, 4 * MiB);
	ck_assert_int_eq(st_open(&t), 0);
	ck_assert_int_eq(ssd_wait_recovered(t.ssd, ST_TIMEOUT_MS), 0);
	ns = st_ns(&t, "adm", 1);
	st_fill(3, buf, LEN);
	ck_assert_int_eq(st_write(&t, ns, 3, 3, buf, LEN, 0, 0, NULL), 0);
	ck_assert_int_eq(st_wait_write(&t, 3), 0);
	st_close(&t);
	free(buf);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssd-backpressure");
	TCase *tc = tcase_create("backpressure");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_drops_and_displacement);
	tcase_add_test(tc, test_admission_filter);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
