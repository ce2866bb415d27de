/* SPDX-License-Identifier: MIT */
/*
 * Node death and epoch fencing through kvstashd, two nodes (lease_ttl 3 s)
 * on one real redis-server:
 *   - SIGKILL n1: its lease is never renewed again, so from one TTL after
 *     the kill on, n2's cluster QUERY no longer names n1.  The rule: a
 *     QUERY sent later than 2 TTLs after the kill (one TTL of the lease,
 *     one of slack for a loaded box) must not name it, and once n1 is no
 *     longer named it stays so;
 *   - n1 restarted takes a higher epoch; its new blocks are answered under
 *     it;
 *   - SIGSTOP n1 until Redis has dropped its lease, queue a SAVE on it,
 *     SIGCONT: n1 must re-acquire (a higher epoch again) before any of its
 *     blocks is answered, so no answer ever names n1 with the epoch it had
 *     before the pause; once it has, everything resident (the blocks saved
 *     before the pause, and the SAVE queued during it) is answered under
 *     the new epoch (backfill);
 *   - the lease's token replaced in Redis behind n1's back (another
 *     process took the name): n1's next registrations are refused by
 *     Redis (fenced), so its FLUSH reports them dropped and nobody finds
 *     them, until the foreign lease expires and n1 re-acquires under a
 *     higher epoch and backfills;
 *   - a second kvstashd with the same node name takes the node over (its
 *     address, a higher epoch, only its blocks answered); the first one
 *     registers nothing while displaced, and takes the node back (yet
 *     another epoch, its own blocks again) once the second one left.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "ctest.h"

#define NS     "mistral-7b/bf16/death"
#define N      32
#define TTL_MS 3000

static const char cluster_ini[] = "lease_ttl = 3s\nconnect_timeout = 1s\ncommand_timeout = 1s\n";

/* Does @c's cluster QUERY of @keys name @node?  Its holder entry into @ret. */
static bool names(struct kvs_client *c, const uint8_t *keys, uint32_t n, const char *node,
		  struct kvs_cluster_holder *ret, struct kvs_cluster_answer *a)
{
	const struct kvs_cluster_holder *h;
	int r = ct_cquery(c, keys, n, a);

	CHECK(r == 0, "n2's cluster QUERY failed: %s", ct_answer_str(r, a));
	h = ct_holder(a, node);
	if (h && ret)
		*ret = *h;
	return h != NULL;
}

static void flush_ok(struct kvs_client *c, uint64_t at_least)
{
	uint64_t reg, drop;
	int r = ct_cflush(c, &reg, &drop);

	CHECK(r == 0 && reg >= at_least && drop == 0,
	      "cluster FLUSH: res %d (%s) registered %llu dropped %llu", r, kvs_strerror(r),
	      (unsigned long long)reg, (unsigned long long)drop);
}

/*
 * 8 blocks saved on @ca while its node cannot write (fenced or
 * displaced): its cluster FLUSH reports them all dropped, none
 * registered, and @cb never finds them at n1.
 */
static void want_fenced(struct kvs_client *ca, struct test_kv *kva, struct kvs_client *cb,
			const uint8_t *keys, uint32_t seed, const char *what)
{
	struct kvs_cluster_answer ans;
	uint64_t reg = 0, drop = 0;
	int r;

	ct_save(ca, kva, keys, 8, seed);
	r = ct_cflush(ca, &reg, &drop);
	CHECK((r == 0 || r == -ETIMEDOUT) && reg == 0 && drop >= 8,
	      "cluster FLUSH on %s: res %d (%s) registered %llu dropped %llu (want 0, >= 8)", what,
	      r, kvs_strerror(r), (unsigned long long)reg, (unsigned long long)drop);
	CHECK(!names(cb, keys, 8, "n1", NULL, &ans), "%s: its blocks answered: %s", what,
	      ct_answer_str(0, &ans));
}

static void sigkill(struct redis *rd, struct cnode *a, struct kvs_client *cb, const uint8_t *keys)
{
	struct kvs_cluster_answer ans;
	uint64_t t_kill, t_gone = 0;

	CHECK(names(cb, keys, N, a->name, NULL, &ans) && ans.best == N,
	      "before the kill n2 must find n1's blocks: %s", ct_answer_str(0, &ans));
	t_kill = now_ms();
	cnode_kill(a);
	for (;;) {
		uint64_t sent = now_ms();

		if (!names(cb, keys, N, a->name, NULL, &ans)) {
			t_gone = sent;
			break;
		}
		CHECK(sent <= t_kill + 2 * TTL_MS,
		      "a QUERY sent %llu ms after SIGKILL still names the dead node "
		      "(lease_ttl %d ms): %s",
		      (unsigned long long)(sent - t_kill), TTL_MS, ct_answer_str(0, &ans));
		usleep(20000);
	}
	CHECK(ans.best == 0 && ans.nr_holders == 0, "after the death: %s", ct_answer_str(0, &ans));
	for (int i = 0; i < 5; i++)
		CHECK(!names(cb, keys, N, a->name, NULL, &ans),
		      "the dead node is answered again: %s", ct_answer_str(0, &ans));
	CHECK(ct_lease_epoch(rd, a->name) == 0, "the dead node's lease is still in Redis");
	printf("# n1's blocks not answered from %llu ms after SIGKILL on (lease_ttl %d ms)\n",
	       (unsigned long long)(t_gone - t_kill), TTL_MS);
}

int main(void)
{
	static uint8_t k1[N * 16], k2[N * 16], k3[8 * 16], k4[8 * 16], k5[8 * 16], k6[8 * 16];
	struct redis rd = { 0 };
	struct cnode a, b;
	struct test_kv kva, kvb;
	struct kvs_client *ca, *cb;
	struct kvs_cluster_answer ans;
	struct kvs_cluster_holder h;
	struct kvs_cqe *cqe;
	struct kvs_sqe *sqe;
	uint32_t ids[8];
	uint64_t e1, e2, e3 = 0, e4, e5, e6, reg, drop;
	struct cnode a2;
	struct test_kv kva2;
	struct kvs_client *ca2;
	char out[256];
	bool k2_seen = false, k3_seen = false;
	int r;

	ct_init(240);
	test_keys(k1, N, 21);
	test_keys(k2, N, 22);
	test_keys(k3, 8, 23);
	test_keys(k4, 8, 24);
	test_keys(k5, 8, 25);
	test_keys(k6, 8, 26);
	ct_redis_start(&rd);
	cnode_start(&a, &rd, "n1", cluster_ini, NULL);
	cnode_start(&b, &rd, "n2", cluster_ini, NULL);
	e1 = ct_wait_lease(&rd, "n1", 0);
	ct_wait_lease(&rd, "n2", 0);
	ca = ct_worker(&a, NS, &kva, 2, 64, 4096);
	cb = ct_worker(&b, NS, &kvb, 2, 64, 4096);
	ct_save(ca, &kva, k1, N, 1);
	flush_ok(ca, N);

	/* ---- SIGKILL ---- */
	sigkill(&rd, &a, cb, k1);
	printf("ok - a killed node is no longer answered within the lease\n");

	/* ---- restarted: a new epoch ---- */
	r = kvsd_restart(&a.d);
	CHECK(r == 0, "restart n1: %s", strerror(-r));
	e2 = ct_wait_lease(&rd, "n1", e1);
	/* The engine comes back as engines do: the same session options, memory and cluster flag. */
	r = kvs_reconnect(ca);
	CHECK(r == 0, "reconnect to the restarted n1: %s", kvs_strerror(r));
	ct_save(ca, &kva, k2, N, 2);
	flush_ok(ca, N);
	CHECK(names(cb, k2, N, "n1", &h, &ans) && ans.best == N && h.epoch == e2,
	      "n1 restarted (epoch %llu): %s", (unsigned long long)e2, ct_answer_str(0, &ans));
	/* What it held before the kill is gone with its pool. */
	CHECK(!names(cb, k1, N, "n1", NULL, &ans), "n1's blocks from before the kill: %s",
	      ct_answer_str(0, &ans));
	printf("ok - a restarted node takes a higher epoch\n");

	/* ---- fencing: paused past the lease ---- */
	kill(a.d.pid, SIGSTOP);
	ct_wait_no_lease(&rd, "n1");
	CHECK(!names(cb, k2, N, "n1", NULL, &ans), "n1's lease expired but it is answered: %s",
	      ct_answer_str(0, &ans));
	/* Sits in the SQ until n1 runs again. */
	sqe = kvs_get_sqe(ca);
	CHECK(sqe, "no SQE");
	for (uint32_t i = 0; i < 8; i++) {
		ids[i] = 32 + i;
		test_kv_fill(&kva, ids[i], 300 + i);
	}
	r = kvs_prep_save(ca, sqe, k3, ids, 8, 3);
	CHECK(r == 0, "prep SAVE: %s", kvs_strerror(r));
	CHECK(kvs_submit(ca) == 1, "submit SAVE");
	kill(a.d.pid, SIGCONT);
	/*
	 * Every answer from now on may name n1 only under an epoch above e2;
	 * poll until n1 is back under one, holding what was resident and what
	 * the queued SAVE brought.
	 */
	for (uint64_t end = now_ms() + CT_POLL_MS; now_ms() < end && !(e3 && k2_seen && k3_seen);
	     usleep(20000)) {
		if (names(cb, k2, N, "n1", &h, &ans)) {
			CHECK(h.epoch > e2, "n1 answered under its pre-pause epoch %llu: %s",
			      (unsigned long long)e2, ct_answer_str(0, &ans));
			CHECK(!e3 || h.epoch == e3, "n1's epoch changed again: %s",
			      ct_answer_str(0, &ans));
			e3 = h.epoch;
			k2_seen = k2_seen || ans.best == N;
		}
		if (names(cb, k3, 8, "n1", &h, &ans)) {
			CHECK(h.epoch > e2, "n1 answered under its pre-pause epoch %llu: %s",
			      (unsigned long long)e2, ct_answer_str(0, &ans));
			k3_seen = k3_seen || ans.best == 8;
		}
	}
	CHECK(e3 > e2 && k2_seen && k3_seen,
	      "n1 never came back after the pause (epoch %llu, resident found %d, queued SAVE "
	      "found %d)",
	      (unsigned long long)e3, k2_seen, k3_seen);
	CHECK(ct_lease_epoch(&rd, "n1") == e3, "n1's lease is not the epoch answered");
	r = kvs_wait_cqe(ca, &cqe, CT_OP_MS);
	CHECK(r == 0 && cqe->user_data == 3 && cqe->res == 8,
	      "the SAVE queued during the pause: %d res %d", r, r == 0 ? cqe->res : 0);
	kvs_cqe_seen(ca, cqe);
	printf("ok - a paused node re-advertises only under a new epoch (%llu -> %llu)\n",
	       (unsigned long long)e2, (unsigned long long)e3);

	/* ---- fencing: the lease taken over behind n1's back ---- */
	/* The queued SAVE's inserts may have gone either way: count from here. */
	r = ct_cflush(ca, &reg, &drop);
	CHECK(r == 0, "cluster FLUSH after the pause: %d (%s)", r, kvs_strerror(r));
	/* Another incarnation's: its token and its incarnation id (scripts.h, ACQUIRE). */
	CHECK(redis_cmd(&rd, out, sizeof(out), "HSET kvs:%s:lease:n1 tok %llu:forged inc forged",
			ct_cluster(), (unsigned long long)e3) == 0 &&
		      !strcmp(out, "0"),
	      "forging n1's lease token: %s", out);
	want_fenced(ca, &kva, cb, k4, 4, "n1 under a lease it no longer holds");
	/* Nobody renews the forged lease: n1 takes the next epoch when it expires. */
	e4 = ct_wait_lease(&rd, "n1", e3);
	for (uint64_t end = now_ms() + CT_POLL_MS;; usleep(20000)) {
		if (names(cb, k4, 8, "n1", &h, &ans) && ans.best == 8 && h.epoch == e4)
			break;
		CHECK(now_ms() < end, "n1 never re-registered after the takeover (epoch %llu): %s",
		      (unsigned long long)e4, ct_answer_str(0, &ans));
	}
	printf("ok - writes under a lost lease are fenced (%llu -> %llu)\n", (unsigned long long)e3,
	       (unsigned long long)e4);

	/* ---- a second process named n1 takes the node over ---- */
	cnode_start(&a2, &rd, "n1", cluster_ini, NULL);
	e5 = ct_wait_lease(&rd, "n1", e4);
	CHECK(redis_cmd(&rd, out, sizeof(out), "HGET kvs:%s:lease:n1 addr", ct_cluster()) == 0 &&
		      !strcmp(out, a2.peer),
	      "n1's lease after the takeover: addr %s, want %s", out, a2.peer);
	ca2 = ct_worker(&a2, NS, &kva2, 2, 64, 4096);
	ct_save(ca2, &kva2, k5, 8, 5);
	flush_ok(ca2, 8);
	CHECK(names(cb, k5, 8, "n1", &h, &ans) && ans.best == 8 && h.epoch == e5 &&
		      !strcmp(h.addr, a2.peer),
	      "the new n1's blocks (epoch %llu at %s): %s", (unsigned long long)e5, a2.peer,
	      ct_answer_str(0, &ans));
	/* The first one's blocks were registered under an epoch that is not the lease's. */
	CHECK(!names(cb, k4, 8, "n1", NULL, &ans), "the displaced n1's blocks answered: %s",
	      ct_answer_str(0, &ans));
	r = ct_cflush(ca, &reg, &drop);
	CHECK(r == 0, "cluster FLUSH on the displaced n1: %d", r);
	want_fenced(ca, &kva, cb, k6, 6, "the displaced n1");
	/* The winner leaves (releasing its lease): the first one takes the node back. */
	kvs_close(ca2);
	test_kv_free(&kva2);
	cnode_stop(&a2);
	e6 = ct_wait_lease(&rd, "n1", e5);
	for (uint64_t end = now_ms() + CT_POLL_MS;; usleep(20000)) {
		if (names(cb, k6, 8, "n1", &h, &ans) && ans.best == 8 && h.epoch == e6 &&
		    !strcmp(h.addr, a.peer))
			break;
		CHECK(now_ms() < end, "the first n1 never took the node back (epoch %llu): %s",
		      (unsigned long long)e6, ct_answer_str(0, &ans));
	}
	CHECK(!names(cb, k5, 8, "n1", NULL, &ans), "the departed n1's blocks answered: %s",
	      ct_answer_str(0, &ans));
	printf("ok - a second process of one name takes over; the first waits, then returns "
	       "(%llu -> %llu -> %llu)\n",
	       (unsigned long long)e4, (unsigned long long)e5, (unsigned long long)e6);

	ct_stop_pair(ca, &kva, &a, cb, &kvb, &b);
	ct_pass("cluster death: SIGKILL, restart, fencing after a pause");
}
