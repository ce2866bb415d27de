/* SPDX-License-Identifier: MIT */
/*
 * What the benchmark and simulator programs of tools/ share: a clock, a
 * fatal error, an allocation that cannot fail, a seeded random stream and
 * the common parts of their command lines.
 * Tools are single files that exit on error; define TOOL_NAME (the prefix
 * of error messages) before including this.  Not for the installed admin
 * CLI, which reports errors per command.
 */
#ifndef KVS_TOOLS_TOOL_H
#define KVS_TOOLS_TOOL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef TOOL_NAME
#error "define TOOL_NAME before including tools/tool.h"
#endif

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Print "TOOL_NAME: message" and exit with EXIT_FAILURE. */
static inline __attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, TOOL_NAME ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(EXIT_FAILURE);
}

/* calloc() that dies instead of returning NULL (and never asks for 0 bytes). */
static inline void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p)
		die("out of memory (%zu x %zu bytes)", n, size);
	return p;
}

/* splitmix64: a deterministic stream from the seed *@s. */
static inline uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A comma-separated list of @n @names ("page,mla") into @out[i] = named; dies on others. */
static inline void parse_names(const char *s, bool *out, const char *const *names, unsigned n,
			       const char *what)
{
	char buf[256], *save = NULL, *tok;

	memset(out, 0, n * sizeof(*out));
	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned i;

		for (i = 0; i < n && strcmp(tok, names[i]); i++)
			;
		if (i == n)
			die("unknown %s '%s'", what, tok);
		out[i] = true;
	}
}

/*
 * The end of a tool's option switch: -h (@opt 'h') prints the usage to
 * stdout and exits 0, any other option to stderr and exits 2.
 */
static inline __attribute__((noreturn)) void usage_exit(void (*usage)(FILE *f), int opt)
{
	usage(opt == 'h' ? stdout : stderr);
	exit(opt == 'h' ? 0 : 2);
}

#endif /* KVS_TOOLS_TOOL_H */
