/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <string.h>

#include "ssd/crc32c.h"

#define POLY 0x82F63B78u /* 0x1EDC6F41 reflected */

static uint32_t sw_table[8][256];
static uint32_t x2n_table[32];
static bool use_hw;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the slice-by-8 loop reads 8 bytes in little-endian order"
#endif

/*
 * a * b modulo the polynomial, both reflected (bit 31 is x^0): the
 * building block of crc32c_combine(), as in zlib's crc32_combine().
 */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;

	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
	}
	return p;
}

/* x^(n * 2^k) modulo the polynomial. */
static uint32_t x2nmodp(uint64_t n, unsigned k)
{
	uint32_t p = 1u << 31; /* x^0 */

	while (n) {
		if (n & 1)
			p = multmodp(x2n_table[k & 31], p);
		n >>= 1;
		k++;
	}
	return p;
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	/* Appending len_b bytes multiplies A's remainder by x^(8 len_b). */
	return multmodp(x2nmodp(len_b, 3), crc_a) ^ crc_b;
}

static void build_tables(void)
{
	uint32_t p = 1u << 30; /* x^1 */

	for (unsigned i = 0; i < 256; i++) {
		uint32_t c = i;

		for (unsigned j = 0; j < 8; j++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		sw_table[0][i] = c;
	}
	for (unsigned i = 0; i < 256; i++)
		for (unsigned t = 1; t < 8; t++)
			sw_table[t][i] =
				(sw_table[t - 1][i] >> 8) ^ sw_table[0][sw_table[t - 1][i] & 0xff];
	x2n_table[0] = p;
	for (unsigned n = 1; n < 32; n++)
		x2n_table[n] = p = multmodp(p, p);
}

/* Slice-by-8 over the internal (non-inverted) state. */
static uint32_t sw_update(uint32_t c, const uint8_t *p, size_t len)
{
	while (len && ((uintptr_t)p & 7)) {
		c = (c >> 8) ^ sw_table[0][(c ^ *p++) & 0xff];
		len--;
	}
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		v ^= c;
		c = sw_table[7][v & 0xff] ^ sw_table[6][(v >> 8) & 0xff] ^
		    sw_table[5][(v >> 16) & 0xff] ^ sw_table[4][(v >> 24) & 0xff] ^
		    sw_table[3][(v >> 32) & 0xff] ^ sw_table[2][(v >> 40) & 0xff] ^
		    sw_table[1][(v >> 48) & 0xff] ^ sw_table[0][v >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		c = (c >> 8) ^ sw_table[0][(c ^ *p++) & 0xff];
	return c;
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>

#define HW_ATTR __attribute__((target("sse4.2")))

HW_ATTR static uint32_t hw_update1(uint32_t c, const uint8_t *p, size_t len)
{
	uint64_t c64;

	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8(c, *p++);
		len--;
	}
	c64 = c;
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c64 = _mm_crc32_u64(c64, v);
		p += 8;
		len -= 8;
	}
	c = (uint32_t)c64;
	while (len--)
		c = _mm_crc32_u8(c, *p++);
	return c;
}

/*
 * Three streams over thirds of the buffer in one loop: each crc32 waits
 * three cycles for its predecessor, so three independent chains keep the
 * unit busy.  The thirds are joined by crc32c_combine().
 */
#define HW_3WAY_MIN 4096u

HW_ATTR static uint32_t hw_crc(uint32_t crc, const uint8_t *p, size_t len)
{
	uint64_t a, b, c;
	size_t n, i;

	if (len < HW_3WAY_MIN)
		return ~hw_update1(~crc, p, len);
	n = (len / 3) & ~(size_t)7;
	a = (uint32_t)~crc;
	b = c = 0xFFFFFFFFu;
	for (i = 0; i < n; i += 8) {
		uint64_t va, vb, vc;

		memcpy(&va, p + i, 8);
		memcpy(&vb, p + n + i, 8);
		memcpy(&vc, p + 2 * n + i, 8);
		a = _mm_crc32_u64(a, va);
		b = _mm_crc32_u64(b, vb);
		c = _mm_crc32_u64(c, vc);
	}
	c = hw_update1((uint32_t)c, p + 3 * n, len - 3 * n);
	return crc32c_combine(crc32c_combine(~(uint32_t)a, ~(uint32_t)b, n), ~(uint32_t)c,
			      len - 2 * n);
}

static bool cpu_has_sse42(void)
{
	unsigned eax, ebx, ecx, edx;

	if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
		return false;
	return ecx & bit_SSE4_2;
}
#else
static uint32_t hw_crc(uint32_t crc, const uint8_t *p, size_t len)
{
	return ~sw_update(~crc, p, len);
}

static bool cpu_has_sse42(void)
{
	return false;
}
#endif

static void init_once_fn(void)
{
	build_tables();
	use_hw = cpu_has_sse42();
}

bool crc32c_init(void)
{
	/* pthread_once() orders the tables' stores before every later reader. */
	pthread_once(&init_once, init_once_fn);
	return use_hw;
}

bool crc32c_hw(void)
{
	return use_hw;
}

uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	return ~sw_update(~crc, buf, len);
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	if (use_hw)
		return hw_crc(crc, buf, len);
	return ~sw_update(~crc, buf, len);
}
