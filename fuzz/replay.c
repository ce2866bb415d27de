/* SPDX-License-Identifier: MIT */
/*
 * Replay: a fuzz target without libFuzzer, over files.  `make check` runs
 * one per target over fuzz/corpus/<target>/ (the seeds, and every input
 * that ever made a target fail, kept as a regression test); by hand,
 * `fuzz/replay-proto FILE...` re-runs a crash found by fuzz/run-fuzzers
 * under the debugger of your choice.  Exits 0 when every input passed; a
 * failed promise aborts.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#ifndef FUZZ_TARGET
#error "FUZZ_TARGET names the corpus directory"
#endif

static unsigned nfiles;

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0, n;

	if (!f) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	do {
		if (len == cap) {
			cap = cap ? 2 * cap : 65536;
			buf = realloc(buf, cap);
			if (!buf)
				abort();
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	fclose(f);
	/* An exact-size copy: reads past the input are ASan's to see. */
	uint8_t *exact = fuzz_dup(buf, len);

	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	nfiles++;
	return 0;
}

static int run_path(const char *path)
{
	struct dirent **ents;
	struct stat st;
	int n, r = 0;

	if (stat(path, &st) < 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return run_file(path);
	n = scandir(path, &ents, NULL, alphasort);
	if (n < 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char p[4096];

		if (ents[i]->d_name[0] != '.' && r == 0) {
			snprintf(p, sizeof(p), "%s/%s", path, ents[i]->d_name);
			r = run_file(p);
		}
		free(ents[i]);
	}
	free(ents);
	return r;
}

int main(int argc, char **argv)
{
	char dir[4096];
	const char *src = getenv("top_srcdir");

	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			if (run_path(argv[i]) < 0)
				return 1;
	} else {
		snprintf(dir, sizeof(dir), "%s/fuzz/corpus/%s", src ? src : ".", FUZZ_TARGET);
		if (run_path(dir) < 0)
			return 1;
		if (nfiles == 0) {
			fprintf(stderr, "%s: empty corpus\n", dir);
			return 1;
		}
	}
	printf("ok - %s: %u inputs replayed\n", FUZZ_TARGET, nfiles);
	return 0;
}
