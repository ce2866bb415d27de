/* SPDX-License-Identifier: MIT */
#include "obs/hist.h"

const double hist_bounds_s[HIST_BUCKETS - 1] = {
	100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0,
};

void hist_observe(struct hist *h, uint64_t ns)
{
	unsigned b = 0;

	while (b < HIST_BUCKETS - 1 && (double)ns > hist_bounds_s[b] * 1e9)
		b++;
	/* Relaxed: counts only; hist_read() orders nothing against them. */
	__atomic_fetch_add(&h->buckets[b], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->sum_ns, ns, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
}

void hist_read(const struct hist *h, struct hist *ret)
{
	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		ret->buckets[i] = __atomic_load_n(&h->buckets[i], __ATOMIC_RELAXED);
	ret->sum_ns = __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED);
	ret->count = __atomic_load_n(&h->count, __ATOMIC_RELAXED);
}
