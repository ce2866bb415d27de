/* SPDX-License-Identifier: MIT */
/*
 * kvs_connect_opts.wait_spin_us: how long kvs_wait_cqe() busy-polls the
 * completion queue before it sleeps on it.  Told to poll for a second, a
 * wait with nothing to complete burns its thread's CPU for the wait's
 * length; by default (50 us) the same wait sleeps and burns next to none.
 * What is compared is the waiting thread's CPU time, not any latency: a
 * busy box lowers the first figure (the threshold leaves it a twentieth
 * of the wait) and the second stays a small part of it.
 */
#include <errno.h>
#include <time.h>

#include "itest.h"

#define NS "qwen3-8b/bf16/pf16"
#define WAIT_MS 400

static struct kvsd d;

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The CPU one kvs_wait_cqe() of WAIT_MS with nothing to complete takes, for @spin_us. */
static uint64_t wait_cpu_ns(uint32_t spin_us, const char *inst)
{
	struct kvs_connect_opts o;
	struct kvs_client *c = NULL;
	struct kvs_cqe *cqe;
	uint64_t t0;
	int r;

	kvs_connect_opts_init(&o);
	CHECK_UINT(o.wait_spin_us, ==, 0);
	o.instance = inst;
	o.ns = NS;
	o.wait_spin_us = spin_us;
	CHECK_INT(kvs_connect(d.sock, &o, &c), ==, 0);
	t0 = thread_cpu_ns();
	r = kvs_wait_cqe(c, &cqe, WAIT_MS);
	t0 = thread_cpu_ns() - t0;
	CHECK_INT(r, ==, -ETIMEDOUT);
	kvs_close(c);
	return t0;
}

int main(void)
{
	uint64_t spun, slept;

	it_watchdog(60);
	it_start(&d, NULL);
	spun = wait_cpu_ns(1000000, "ws-spin");
	slept = wait_cpu_ns(0, "ws-default");
	CHECK(spun >= WAIT_MS * 1000000ull / 20,
	      "wait_spin_us = 1 s: the wait took %.1f ms of CPU in %d ms, want it polling",
	      spun / 1e6, WAIT_MS);
	/* Asleep but for its 50 us at each of the wait's 20 ms slices, and the socket checks. */
	CHECK(slept * 4 <= spun,
	      "wait_spin_us = 0 (50 us): the wait took %.1f ms of CPU in %d ms (polling: %.1f), "
	      "want it asleep",
	      slept / 1e6, WAIT_MS, spun / 1e6);
	it_ok("kvs_wait_cqe(): %.1f ms of CPU polling for 1 s, %.2f ms by default, over %d ms",
	      spun / 1e6, slept / 1e6, WAIT_MS);
	it_stop(&d);
	return 0;
}
