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
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#define NS "death/bf16/pf"
#define KILLS 50
#define LAYERS 4
#define BLOCKS 64
#define SEG 4096

static struct kvsd d;

static void start(void)
{
	it_start(&d, NULL);
}

static struct kvs_client *conn(uint32_t role, const char *inst)
{
	struct kvs_client *c = NULL;
	int r = test_connect(&d, role, inst, NS, 0, 1, &c);

	CHECK(r == 0, "connect %s: %s", inst, kvs_strerror(r));
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

static void test_engine_sigkill(void)
{
	static struct test_kv gkv;
	struct kvs_client *good, *admin;
	struct kvs_msg_stats_global g;
	int fds0, regions0, maps0;

	start();
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	/* A bystander with registered memory: it must not notice anything. */
	good = conn(KVS_ROLE_WORKER, "death-good");
	CHECK_INT(test_kv_alloc(&gkv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG), ==, 0);
	CHECK_INT(test_kv_register(good, &gkv), ==, 0);
	CHECK_INT(save_blocks(good, 0, 4, 1), ==, 4);
	fds0 = proc_fd_count(d.pid);
	regions0 = proc_memfd_count(d.pid, "kvstash-session");
	maps0 = proc_map_count(d.pid, "kvstash-kv");
	CHECK_INT(regions0, ==, 1);
	CHECK_INT(maps0, ==, 1);
	CHECK_INT(test_status_sessions(admin), ==, 1);

	for (unsigned i = 0; i < KILLS; i++) {
		int p[2], st;
		char c = 0;
		pid_t pid;

		CHECK_INT(pipe(p), ==, 0);
		pid = fork();
		CHECK_INT(pid, >=, 0);
		if (pid == 0) {
			close(p[0]);
			engine(p[1], i);
		}
		close(p[1]);
		if (read(p[0], &c, 1) != 1) {
			waitpid(pid, &st, 0);
			CHECK(false, "engine %u ended before it was busy (status 0x%x)", i, st);
		}
		close(p[0]);
		/* Vary the moment a little: mid-batch, mid-copy, between batches. */
		usleep((i % 4) * 300);
		kill(pid, SIGKILL);
		CHECK_INT(waitpid(pid, &st, 0), ==, pid);
		CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		      "engine %u exited by itself (status 0x%x)", i, st);
	}

	/* Back to the baseline: nothing of the 50 dead engines is left. */
	CHECK_INT(wait_memfd_count(d.pid, "kvstash-session", regions0, 5000), ==, regions0);
	CHECK_INT(wait_map_count(d.pid, "kvstash-kv", maps0, 5000), ==, maps0);
	CHECK_INT(wait_fd_count(d.pid, fds0, 5000), ==, fds0);
	CHECK_INT(test_status_sessions(admin), ==, 1);
	CHECK_INT(test_stats(admin, &g), ==, 0);
	CHECK_UINT(g.sessions_live, ==, 1);
	CHECK_UINT(g.sessions_total, >=, KILLS + 1);
	CHECK_UINT(g.save_ops, >=, KILLS + 1);
	CHECK_UINT(g.leases_live, ==, 0);
	CHECK_UINT(g.protocol_errors, ==, 0);
	CHECK_TRUE(pid_alive(d.pid));

	/* The bystander's session and registration are intact. */
	CHECK_INT(kvs_nop_sync(good, 5000), ==, 0);
	CHECK_INT(save_blocks(good, 4, 4, 2), ==, 4);
	CHECK_INT(kvs_flush_sync(good, 0, 5000), ==, 0);
	CHECK_INT(query_blocks(good, 4, 2), ==, 4);
	kvs_close(good);
	kvs_close(admin);
	test_kv_free(&gkv);
	CHECK_INT(kvsd_stop(&d), ==, 0);
	kvsd_cleanup(&d);
	it_ok("%u engines SIGKILLed with work in flight leave kvstashd as it was", KILLS);
}

/*
 * An engine gone between its HELLO and the reply (killed right after it
 * spoke): kvstashd cannot send the reply and must free the session at
 * once, region, socket and the instance's rank with it.  (It once kept
 * them for ever, and the instance could not connect again until kvstashd
 * restarted.)  kvstashd is stopped while the engine speaks and goes, so
 * it always finds the HELLO and the EOF together.
 */
static void test_gone_before_reply(void)
{
	struct kvs_client *c = NULL, *admin;
	struct kvs_msg_hello h;
	int fds0, fd;

	start();
	CHECK_INT(test_admin(&d, &admin), ==, 0);
	CHECK_INT(test_status_sessions(admin), ==, 0);
	fds0 = proc_fd_count(d.pid);
	for (unsigned i = 0; i < 3; i++) {
		CHECK_INT(kill(d.pid, SIGSTOP), ==, 0);
		CHECK_INT(wait_stopped(d.pid, 5000), ==, 0);
		fd = raw_connect(d.sock);
		CHECK_INT(fd, >=, 0);
		raw_hello_init(&h, KVS_ROLE_WORKER, "gone-early", NS, 0, 1);
		CHECK_INT(raw_send(fd, &h, sizeof(h), NULL, 0), ==, 0);
		close(fd);
		CHECK_INT(kill(d.pid, SIGCONT), ==, 0);
		/*
		 * kvstashd handles the HELLO (EPOLLIN comes before the hang-up)
		 * and its reply fails.  Wait for that first: until kvstashd has
		 * run, the counts below hold trivially.
		 */
		CHECK_INT(wait_log_count(&d, "cannot send a reply", (int)i + 1, 10000), ==,
			  (int)i + 1);
		CHECK_INT(wait_memfd_count(d.pid, "kvstash-session", 0, 5000), ==, 0);
		CHECK_INT(wait_fd_count(d.pid, fds0, 5000), ==, fds0);
	}
	/* The rank was given back: the same instance connects. */
	CHECK_INT(test_connect(&d, KVS_ROLE_WORKER, "gone-early", NS, 0, 1, &c), ==, 0);
	CHECK_INT(kvs_nop_sync(c, 5000), ==, 0);
	kvs_close(c);
	kvs_close(admin);
	CHECK_INT(kvsd_stop(&d), ==, 0);
	kvsd_cleanup(&d);
	it_ok("an engine gone before the HELLO reply is freed at once");
}

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
	CHECK_INT(kill(d.pid, SIGSTOP), ==, 0);
	CHECK_INT(wait_stopped(d.pid, 5000), ==, 0);
	CHECK_INT(pthread_create(&k->thread, NULL, killer_main, k), ==, 0);
}

static void reconnected(struct kvs_client *c, struct kvs_client **admin)
{
	struct kvs_session_info info;
	struct kvs_msg_status_session st;

	kvsd_kill(&d); /* reap */
	CHECK_INT(kvsd_restart(&d), ==, 0);
	CHECK_INT(kvs_reconnect(c), ==, 0);
	CHECK_INT(kvs_connected(c), ==, 1);
	CHECK_INT(test_admin(&d, admin), ==, 0);
	/* The registration came back with the session. */
	CHECK_INT(kvs_session_info(c, &info), ==, 0);
	CHECK_INT(status_session(*admin, info.session_id, &st), ==, 0);
	CHECK_UINT(st.nr_layers, ==, LAYERS);
	CHECK_UINT(st.sealed, ==, 1);
	CHECK_INT(proc_map_count(d.pid, "kvstash-kv"), ==, 1);
}

static void test_daemon_sigkill(void)
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
	CHECK_INT(test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG), ==, 0);
	CHECK_INT(test_kv_register(c, &kv), ==, 0);
	CHECK_INT(save_blocks(c, 0, 2, 10), ==, 2);

	/* NOP, SAVE, NOP pending in a frozen daemon; it dies under kvs_wait_cqe(-1). */
	kill_later(&k, 200);
	test_keys(keys, 2, 11);
	for (unsigned i = 0; i < 3; i++) {
		struct kvs_sqe *sqe = kvs_get_sqe(c);

		CHECK_TRUE(sqe != NULL);
		if (i == 1)
			CHECK_INT(kvs_prep_save(c, sqe, keys, ids, 2, 100 + i), ==, 0);
		else
			CHECK_INT(kvs_prep_nop(c, sqe, 100 + i), ==, 0);
	}
	CHECK_INT(kvs_submit(c), ==, 3);
	CHECK_UINT(kvs_pending(c), ==, 3);
	r = kvs_wait_cqe(c, &cqe, -1);
	t_ret = test_now_ns();
	CHECK_INT(pthread_join(k.thread, NULL), ==, 0);
	CHECK_INT(r, ==, 0);
	CHECK(t_ret >= k.t_kill, "the wait returned before kvstashd died");
	CHECK(t_ret - k.t_kill < 1000000000ull, "the wait took %.3f s to see the death",
	      (t_ret - k.t_kill) / 1e9);
	for (unsigned i = 0; i < 3; i++) {
		if (i)
			CHECK_INT(kvs_peek_cqe(c, &cqe), ==, 0);
		CHECK_INT(cqe->res, ==, -ECONNRESET);
		CHECK_UINT(cqe->flags & KVS_CQE_LOCAL, ==, KVS_CQE_LOCAL);
		CHECK_TRUE(cqe->user_data >= 100 && cqe->user_data < 103);
		CHECK_TRUE(!seen[cqe->user_data - 100]);
		seen[cqe->user_data - 100] = true;
		kvs_cqe_seen(c, cqe);
	}
	CHECK_UINT(kvs_pending(c), ==, 0);
	/* Nothing left that could complete: waits say so at once, as do new ops. */
	CHECK_INT(kvs_wait_cqe(c, &cqe, -1), ==, -ECONNRESET);
	CHECK_INT(kvs_connected(c), ==, 0);
	CHECK_INT(kvs_nop_sync(c, -1), ==, -ECONNRESET);
	{
		struct kvs_sqe *sqe = kvs_get_sqe(c);

		CHECK_TRUE(sqe != NULL);
		CHECK_INT(kvs_prep_nop(c, sqe, 200), ==, 0);
		CHECK_INT(kvs_submit(c), ==, 1);
		CHECK_INT(kvs_wait_cqe(c, &cqe, -1), ==, 0);
		CHECK_UINT(cqe->user_data, ==, 200);
		CHECK_INT(cqe->res, ==, -ECONNRESET);
		CHECK_UINT(cqe->flags, ==, KVS_CQE_LOCAL);
		kvs_cqe_seen(c, cqe);
	}

	/* Restarted: reconnect, registered again, SAVE works. */
	reconnected(c, &admin);
	CHECK_INT(kvs_nop_sync(c, 5000), ==, 0);
	CHECK_INT(save_blocks(c, 20, 4, 12), ==, 4);
	CHECK_INT(kvs_flush_sync(c, 0, 5000), ==, 0);
	CHECK_INT(query_blocks(c, 4, 12), ==, 4);
	kvs_close(admin);

	/* Killed under kvs_nop_sync(-1) this time. */
	kill_later(&k, 200);
	r = kvs_nop_sync(c, -1);
	t_ret = test_now_ns();
	CHECK_INT(pthread_join(k.thread, NULL), ==, 0);
	CHECK_INT(r, ==, -ECONNRESET);
	CHECK(t_ret >= k.t_kill, "kvs_nop_sync returned before kvstashd died");
	CHECK(t_ret - k.t_kill < 1000000000ull, "kvs_nop_sync took %.3f s to see the death",
	      (t_ret - k.t_kill) / 1e9);
	CHECK_UINT(kvs_pending(c), ==, 0);

	reconnected(c, &admin);
	CHECK_INT(save_blocks(c, 30, 2, 13), ==, 2);
	kvs_close(admin);
	kvs_close(c);
	test_kv_free(&kv);
	CHECK_INT(kvsd_stop(&d), ==, 0);
	kvsd_cleanup(&d);
	it_ok("kvstashd SIGKILLed under a wait: -ECONNRESET within 1 s, reconnect");
}

static void test_sigterm(void)
{
	static struct test_kv kv;
	struct kvs_client *w, *s;
	struct kvs_cqe *cqe;
	struct stat sb;
	int st;

	start();
	w = conn(KVS_ROLE_WORKER, "term");
	s = conn(KVS_ROLE_SCHEDULER, "term");
	CHECK_INT(test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, LAYERS, BLOCKS, SEG), ==, 0);
	CHECK_INT(test_kv_register(w, &kv), ==, 0);
	CHECK_INT(save_blocks(w, 0, 4, 20), ==, 4);
	CHECK_INT(kvs_nop_sync(s, 5000), ==, 0);

	st = kvsd_stop(&d);
	if (st != 0)
		kvsd_dump_log(&d);
	CHECK_INT(st, ==, 0);
	CHECK_TRUE(kvsd_log_contains(&d, "all sessions drained"));
	/* The socket is gone with the daemon. */
	CHECK_INT(stat(d.sock, &sb), ==, -1);

	CHECK_INT(kvs_nop_sync(w, 5000), ==, -ECONNRESET);
	CHECK_INT(kvs_nop_sync(s, 5000), ==, -ECONNRESET);
	CHECK_INT(kvs_connected(w), ==, 0);
	CHECK_INT(kvs_connected(s), ==, 0);
	CHECK_INT(kvs_wait_cqe(w, &cqe, -1), ==, -ECONNRESET);
	CHECK_INT(save_blocks(w, 4, 2, 21), ==, -ECONNRESET);
	CHECK_INT(kvs_unregister(w), ==, -ECONNRESET);
	/* No daemon to come back to. */
	CHECK_INT(kvs_reconnect(s), ==, -ENOENT);
	kvs_close(s);
	kvs_close(w);
	test_kv_free(&kv);
	kvsd_cleanup(&d);
	it_ok("SIGTERM drains, exits 0, clients see -ECONNRESET");
}

int main(void)
{
	it_watchdog(90);
	test_engine_sigkill();
	it_watchdog(90);
	test_gone_before_reply();
	it_watchdog(90);
	test_daemon_sigkill();
	it_watchdog(90);
	test_sigterm();
	return 0;
}
