/* SPDX-License-Identifier: MIT */
/*
 * Liveness: socket EOF is the death signal, both ways.
 *   - An engine SIGKILLed with work in flight, 50 times over, leaves
 *     kvstashd exactly as it was (fds, session regions, engine mappings,
 *     sessions) and other sessions untouched.
 *   - kvstashd SIGKILLed under a client blocked in a wait: the wait
 *     returns within 1 s, every pending operation completes locally with
 *     -ECONNRESET; after a restart kvs_reconnect() brings the session and
 *     its registration back.
 *   - SIGTERM drains: kvstashd exits 0 and clients see -ECONNRESET.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctltest.h"

#define NS "death/bf16/pf"
#define KILLS 50
#define LAYERS 4
#define BLOCKS 64
#define SEG 4096

static struct kvsd d;

static void start(void)
{
	int r = kvsd_start(&d, NULL);

	ck_assert_msg(r == 0, "kvstashd did not start: %s", strerror(-r));
}

static struct kvs_client *conn(uint32_t role, const char *inst)
{
	struct kvs_client *c = NULL;
	int r = test_connect(&d, role, inst, NS, 0, 1, &c);

	ck_assert_msg(r == 0, "connect %s: %s", inst, kvs_strerror(r));
	return c;
}

static int save_blocks(struct kvs_client *c, uint32_t first, uint32_t n, uint64_t seed)
{
	uint8_t keys[16 * 8];
	uint32_t ids[8];

	test_keys(keys, n, seed);
	for (uint32_t i = 0; i < n; i++)
		ids[i] = first + i;
	return kvs_save_sync(c, keys, ids, n, 5000, NULL, NULL);
}

static int query_blocks(struct kvs_client *c, uint32_t n, uint64_t seed)
{
	uint8_t keys[16 * 8];

	test_keys(keys, n, seed);
	return kvs_query_sync(c, keys, n, 1, KVS_QUERY_NOLEASE, 5000, NULL);
}

/* ---- engines that die ---------------------------------------------- */

/*
 * Connect, register, then submit NOPs and SAVEs until killed; "r" once a
 * SAVE has completed (the session really works) and more are submitted.
 */
static void __attribute__((noreturn)) engine(int wfd, unsigned iter)
{
	static struct test_kv kv;
	struct kvs_client *c = NULL;
	bool told = false;
	uint64_t n = 0, saved = 0;
	char inst[32];

	snprintf(inst, sizeof(inst), "death-%u", iter);
	if (test_connect(&d, KVS_ROLE_WORKER, inst, NS, 0, 1, &c) < 0)
		_exit(2);
	if (test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG) < 0 ||
	    test_kv_register(c, &kv) < 0)
		_exit(3);
	for (;;) {
		struct kvs_sqe *sqe = NULL;
		struct kvs_cqe *cqe;

		for (int j = 0; j < 8; j++, n++) {
			uint8_t keys[16 * 4];
			uint32_t ids[4];

			sqe = kvs_get_sqe(c);
			if (!sqe)
				break;
			if (n % 2) {
				kvs_prep_nop(c, sqe, n);
				continue;
			}
			test_keys(keys, 4, iter * 1000003ull + n);
			for (uint32_t k = 0; k < 4; k++)
				ids[k] = (uint32_t)(n + k) % BLOCKS;
			if (kvs_prep_save(c, sqe, keys, ids, 4, n) < 0)
				break;
		}
		kvs_submit(c);
		if (!told && saved) {
			if (write(wfd, "r", 1) != 1)
				_exit(4);
			told = true;
		}
		while (kvs_peek_cqe(c, &cqe) == 0) {
			if (cqe->res == -ECONNRESET)
				_exit(5);
			saved += cqe->user_data % 2 == 0 && cqe->res > 0;
			kvs_cqe_seen(c, cqe);
		}
		if (!sqe && kvs_wait_cqe(c, &cqe, 10) == -ECONNRESET)
			_exit(5);
	}
}

START_TEST(test_engine_sigkill)
{
	static struct test_kv gkv;
	struct kvs_client *good, *admin;
	struct kvs_msg_stats_global g;
	int fds0, regions0, maps0;

	start();
	ck_assert_int_eq(test_admin(&d, &admin), 0);
	/* A bystander with registered memory: it must not notice anything. */
	good = conn(KVS_ROLE_WORKER, "death-good");
	ck_assert_int_eq(test_kv_alloc(&gkv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG), 0);
	ck_assert_int_eq(test_kv_register(good, &gkv), 0);
	ck_assert_int_eq(save_blocks(good, 0, 4, 1), 4);
	fds0 = proc_fd_count(d.pid);
	regions0 = proc_memfd_count(d.pid, "kvstash-session");
	maps0 = proc_map_count(d.pid, "kvstash-kv");
	ck_assert_int_eq(regions0, 1);
	ck_assert_int_eq(maps0, 1);
	ck_assert_int_eq(test_status_sessions(admin), 1);

	for (unsigned i = 0; i < KILLS; i++) {
		int p[2], st;
		char c = 0;
		pid_t pid;

		ck_assert_int_eq(pipe(p), 0);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			close(p[0]);
			engine(p[1], i);
		}
		close(p[1]);
		if (read(p[0], &c, 1) != 1) {
			waitpid(pid, &st, 0);
			ck_abort_msg("engine %u ended before it was busy (status 0x%x)", i, st);
		}
		close(p[0]);
		/* Vary the moment a little: mid-batch, mid-copy, between batches. */
		usleep((i % 4) * 300);
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
			      "engine %u exited by itself (status 0x%x)", i, st);
	}

	/* Back to the baseline: nothing of the 50 dead engines is left. */
	ck_assert_int_eq(wait_memfd_count(d.pid, "kvstash-session", regions0, 5000), regions0);
	ck_assert_int_eq(wait_map_count(d.pid, "kvstash-kv", maps0, 5000), maps0);
	ck_assert_int_eq(wait_fd_count(d.pid, fds0, 5000), fds0);
	ck_assert_int_eq(test_status_sessions(admin), 1);
	ck_assert_int_eq(test_stats(admin, &g), 0);
	ck_assert_uint_eq(g.sessions_live, 1);
	ck_assert_uint_ge(g.sessions_total, KILLS + 1);
	ck_assert_uint_ge(g.save_ops, KILLS + 1);
	ck_assert_uint_eq(g.leases_live, 0);
	ck_assert_uint_eq(g.protocol_errors, 0);
	ck_assert(pid_alive(d.pid));

	/* The bystander's session and registration are intact. */
	ck_assert_int_eq(kvs_nop_sync(good, 5000), 0);
	ck_assert_int_eq(save_blocks(good, 4, 4, 2), 4);
	ck_assert_int_eq(kvs_flush_sync(good, 0, 5000), 0);
	ck_assert_int_eq(query_blocks(good, 4, 2), 4);
	kvs_close(good);
	kvs_close(admin);
	test_kv_free(&gkv);
	ck_assert_int_eq(kvsd_stop(&d), 0);
	kvsd_cleanup(&d);
}
END_TEST

/*
 * An engine gone between its HELLO and the reply (killed right after it
 * spoke): kvstashd cannot send the reply and must free the session at
 * once, region, socket and the instance's rank with it.  (It once kept
 * them for ever, and the instance could not connect again until kvstashd
 * restarted.)  kvstashd is stopped while the engine speaks and goes, so
 * it always finds the HELLO and the EOF together.
 */
START_TEST(test_gone_before_reply)
{
	struct kvs_client *c = NULL, *admin;
	struct kvs_msg_hello h;
	int fds0, fd;

	start();
	ck_assert_int_eq(test_admin(&d, &admin), 0);
	ck_assert_int_eq(test_status_sessions(admin), 0);
	fds0 = proc_fd_count(d.pid);
	for (unsigned i = 0; i < 3; i++) {
		ck_assert_int_eq(kill(d.pid, SIGSTOP), 0);
		ck_assert_int_eq(wait_stopped(d.pid, 5000), 0);
		fd = raw_connect(d.sock);
		ck_assert_int_ge(fd, 0);
		raw_hello_init(&h, KVS_ROLE_WORKER, "gone-early", NS, 0, 1);
		ck_assert_int_eq(raw_send(fd, &h, sizeof(h), NULL, 0), 0);
		close(fd);
		ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
		/*
		 * kvstashd handles the HELLO (EPOLLIN comes before the hang-up)
		 * and its reply fails.  Wait for that first: until kvstashd has
		 * run, the counts below hold trivially.
		 */
		ck_assert_int_eq(wait_log_count(&d, "cannot send a reply", (int)i + 1, 10000),
				 (int)i + 1);
		ck_assert_int_eq(wait_memfd_count(d.pid, "kvstash-session", 0, 5000), 0);
		ck_assert_int_eq(wait_fd_count(d.pid, fds0, 5000), fds0);
	}
	/* The rank was given back: the same instance connects. */
	ck_assert_int_eq(test_connect(&d, KVS_ROLE_WORKER, "gone-early", NS, 0, 1, &c), 0);
	ck_assert_int_eq(kvs_nop_sync(c, 5000), 0);
	kvs_close(c);
	kvs_close(admin);
	ck_assert_int_eq(kvsd_stop(&d), 0);
	kvsd_cleanup(&d);
}
END_TEST

/* ---- kvstashd that dies -------------------------------------------- */

struct killer {
	pid_t pid;
	unsigned delay_us;
	uint64_t t_kill;
	pthread_t thread;
};

static void *killer_main(void *arg)
{
	struct killer *k = arg;

	usleep(k->delay_us);
	k->t_kill = test_now_ns();
	kill(k->pid, SIGKILL);
	return NULL;
}

/* Freeze kvstashd so whatever is submitted stays pending; SIGKILL it later. */
static void kill_later(struct killer *k, unsigned delay_ms)
{
	k->pid = d.pid;
	k->delay_us = delay_ms * 1000;
	k->t_kill = 0;
	ck_assert_int_eq(kill(d.pid, SIGSTOP), 0);
	ck_assert_int_eq(wait_stopped(d.pid, 5000), 0);
	ck_assert_int_eq(pthread_create(&k->thread, NULL, killer_main, k), 0);
}

static void reconnected(struct kvs_client *c, struct kvs_client **admin)
{
	struct kvs_session_info info;
	struct kvs_msg_status_session st;

	kvsd_kill(&d); /* reap */
	ck_assert_int_eq(kvsd_restart(&d), 0);
	ck_assert_int_eq(kvs_reconnect(c), 0);
	ck_assert_int_eq(kvs_connected(c), 1);
	ck_assert_int_eq(test_admin(&d, admin), 0);
	/* The registration came back with the session. */
	ck_assert_int_eq(kvs_session_info(c, &info), 0);
	ck_assert_int_eq(status_session(*admin, info.session_id, &st), 0);
	ck_assert_uint_eq(st.nr_layers, LAYERS);
	ck_assert_uint_eq(st.sealed, 1);
	ck_assert_int_eq(proc_map_count(d.pid, "kvstash-kv"), 1);
}

START_TEST(test_daemon_sigkill)
{
	static struct test_kv kv;
	struct kvs_client *c, *admin;
	struct kvs_cqe *cqe;
	struct killer k;
	uint8_t keys[16 * 2];
	uint32_t ids[2] = { 10, 11 };
	bool seen[3] = { false };
	uint64_t t_ret;
	int r;

	start();
	c = conn(KVS_ROLE_WORKER, "death-d");
	ck_assert_int_eq(test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG), 0);
	ck_assert_int_eq(test_kv_register(c, &kv), 0);
	ck_assert_int_eq(save_blocks(c, 0, 2, 10), 2);

	/* NOP, SAVE, NOP pending in a frozen daemon; it dies under kvs_wait_cqe(-1). */
	kill_later(&k, 200);
	test_keys(keys, 2, 11);
	for (unsigned i = 0; i < 3; i++) {
		struct kvs_sqe *sqe = kvs_get_sqe(c);

		ck_assert_ptr_nonnull(sqe);
		if (i == 1)
			ck_assert_int_eq(kvs_prep_save(c, sqe, keys, ids, 2, 100 + i), 0);
		else
			ck_assert_int_eq(kvs_prep_nop(c, sqe, 100 + i), 0);
	}
	ck_assert_int_eq(kvs_submit(c), 3);
	ck_assert_uint_eq(kvs_pending(c), 3);
	r = kvs_wait_cqe(c, &cqe, -1);
	t_ret = test_now_ns();
	ck_assert_int_eq(pthread_join(k.thread, NULL), 0);
	ck_assert_int_eq(r, 0);
	ck_assert_msg(t_ret >= k.t_kill, "the wait returned before kvstashd died");
	ck_assert_msg(t_ret - k.t_kill < 1000000000ull, "the wait took %.3f s to see the death",
		      (t_ret - k.t_kill) / 1e9);
	for (unsigned i = 0; i < 3; i++) {
		if (i)
			ck_assert_int_eq(kvs_peek_cqe(c, &cqe), 0);
		ck_assert_int_eq(cqe->res, -ECONNRESET);
		ck_assert_uint_eq(cqe->flags & KVS_CQE_LOCAL, KVS_CQE_LOCAL);
		ck_assert(cqe->user_data >= 100 && cqe->user_data < 103);
		ck_assert(!seen[cqe->user_data - 100]);
		seen[cqe->user_data - 100] = true;
		kvs_cqe_seen(c, cqe);
	}
	ck_assert_uint_eq(kvs_pending(c), 0);
	/* Nothing left that could complete: waits say so at once, as do new ops. */
	ck_assert_int_eq(kvs_wait_cqe(c, &cqe, -1), -ECONNRESET);
	ck_assert_int_eq(kvs_connected(c), 0);
	ck_assert_int_eq(kvs_nop_sync(c, -1), -ECONNRESET);
	{
		struct kvs_sqe *sqe = kvs_get_sqe(c);

		ck_assert_ptr_nonnull(sqe);
		ck_assert_int_eq(kvs_prep_nop(c, sqe, 200), 0);
		ck_assert_int_eq(kvs_submit(c), 1);
		ck_assert_int_eq(kvs_wait_cqe(c, &cqe, -1), 0);
		ck_assert_uint_eq(cqe->user_data, 200);
		ck_assert_int_eq(cqe->res, -ECONNRESET);
		ck_assert_uint_eq(cqe->flags, KVS_CQE_LOCAL);
		kvs_cqe_seen(c, cqe);
	}

	/* Restarted: reconnect, registered again, SAVE works. */
	reconnected(c, &admin);
	ck_assert_int_eq(kvs_nop_sync(c, 5000), 0);
	ck_assert_int_eq(save_blocks(c, 20, 4, 12), 4);
	ck_assert_int_eq(kvs_flush_sync(c, 0, 5000), 0);
	ck_assert_int_eq(query_blocks(c, 4, 12), 4);
	kvs_close(admin);

	/* Killed under kvs_nop_sync(-1) this time. */
	kill_later(&k, 200);
	r = kvs_nop_sync(c, -1);
	t_ret = test_now_ns();
	ck_assert_int_eq(pthread_join(k.thread, NULL), 0);
	ck_assert_int_eq(r, -ECONNRESET);
	ck_assert_msg(t_ret >= k.t_kill, "kvs_nop_sync returned before kvstashd died");
	ck_assert_msg(t_ret - k.t_kill < 1000000000ull, "kvs_nop_sync took %.3f s to see the death",
		      (t_ret - k.t_kill) / 1e9);
	ck_assert_uint_eq(kvs_pending(c), 0);

	reconnected(c, &admin);
	ck_assert_int_eq(save_blocks(c, 30, 2, 13), 2);
	kvs_close(admin);
	kvs_close(c);
	test_kv_free(&kv);
	ck_assert_int_eq(kvsd_stop(&d), 0);
	kvsd_cleanup(&d);
}
END_TEST

START_TEST(test_sigterm)
{
	static struct test_kv kv;
	struct kvs_client *w, *s;
	struct kvs_cqe *cqe;
	struct stat sb;
	int st;

	start();
	w = conn(KVS_ROLE_WORKER, "term");
	s = conn(KVS_ROLE_SCHEDULER, "term");
	ck_assert_int_eq(test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG), 0);
	ck_assert_int_eq(test_kv_register(w, &kv), 0);
	ck_assert_int_eq(save_blocks(w, 0, 4, 20), 4);
	ck_assert_int_eq(kvs_nop_sync(s, 5000), 0);

	st = kvsd_stop(&d);
	if (st != 0)
		kvsd_dump_log(&d);
	ck_assert_int_eq(st, 0);
	ck_assert(kvsd_log_contains(&d, "all sessions drained"));
	/* The socket is gone with the daemon. */
	ck_assert_int_eq(stat(d.sock, &sb), -1);

	ck_assert_int_eq(kvs_nop_sync(w, 5000), -ECONNRESET);
	ck_assert_int_eq(kvs_nop_sync(s, 5000), -ECONNRESET);
	ck_assert_int_eq(kvs_connected(w), 0);
	ck_assert_int_eq(kvs_connected(s), 0);
	ck_assert_int_eq(kvs_wait_cqe(w, &cqe, -1), -ECONNRESET);
	ck_assert_int_eq(save_blocks(w, 4, 2, 21), -ECONNRESET);
	ck_assert_int_eq(kvs_unregister(w), -ECONNRESET);
	/* No daemon to come back to. */
	ck_assert_int_eq(kvs_reconnect(s), -ENOENT);
	kvs_close(s);
	kvs_close(w);
	test_kv_free(&kv);
	kvsd_cleanup(&d);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("death");
	TCase *tc = tcase_create("death");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_engine_sigkill);
	tcase_add_test(tc, test_gone_before_reply);
	tcase_add_test(tc, test_daemon_sigkill);
	tcase_add_test(tc, test_sigterm);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
