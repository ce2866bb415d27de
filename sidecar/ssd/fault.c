/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssd/fault.h"

#define MAX_RULES	 64u
#define MAX_FAULT_DRIVES 16u

enum { OP_READ, OP_WRITE, OP_SYNC, OP_ANY };

struct rule {
	int drive; /* -1: any */
	int op;
	bool every;
	uint64_t n;
	enum ssd_fault action;
};

struct ssd_faults {
	unsigned nr;
	struct rule rules[MAX_RULES];
	uint64_t count[MAX_FAULT_DRIVES][3]; /* atomic: I/Os seen per drive, per OP_READ..OP_SYNC */
};

static int parse_rule(char *s, struct rule *r)
{
	char *eq, *at;
	static const struct {
		const char *name;
		enum ssd_fault f;
	} actions[] = {
		{ "eio", SSD_FAULT_EIO },     { "enodev", SSD_FAULT_ENODEV },
		{ "short", SSD_FAULT_SHORT }, { "tear", SSD_FAULT_TEAR },
		{ "flip", SSD_FAULT_FLIP },
	};
	char *end;
	unsigned i;

	r->drive = -1;
	if (s[0] == 'd' && s[1] >= '0' && s[1] <= '9') {
		long d = strtol(s + 1, &end, 10);

		if (*end != ':' || d < 0 || d >= (long)MAX_FAULT_DRIVES)
			return -EINVAL;
		r->drive = (int)d;
		s = end + 1;
	}
	eq = strchr(s, '=');
	at = strpbrk(s, "@%");
	if (!eq || !at || at > eq)
		return -EINVAL;
	r->every = *at == '%';
	*at = '\0';
	*eq = '\0';
	if (strcmp(s, "read") == 0)
		r->op = OP_READ;
	else if (strcmp(s, "write") == 0)
		r->op = OP_WRITE;
	else if (strcmp(s, "sync") == 0)
		r->op = OP_SYNC;
	else if (strcmp(s, "any") == 0)
		r->op = OP_ANY;
	else
		return -EINVAL;
	r->n = strtoull(at + 1, &end, 10);
	if (end != eq || r->n == 0)
		return -EINVAL;
	for (i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
		if (strcmp(eq + 1, actions[i].name) == 0)
			break;
	if (i == sizeof(actions) / sizeof(actions[0]))
		return -EINVAL;
	r->action = actions[i].f;
	/* A datasync moves no bytes: it can only fail. */
	if (r->op == OP_SYNC && r->action != SSD_FAULT_EIO && r->action != SSD_FAULT_ENODEV)
		return -EINVAL;
	return 0;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf;
	size_t n;

	if (!f)
		return NULL;
	buf = calloc(1, 65536);
	if (buf) {
		n = fread(buf, 1, 65535, f);
		buf[n] = '\0';
	}
	fclose(f);
	return buf;
}

int ssd_faults_parse(const char *spec, struct ssd_faults **ret, char *err, size_t errlen)
{
	struct ssd_faults *f;
	char *dup, *save = NULL, *tok;
	int r = 0;

	if (!spec || !*spec) {
		*ret = NULL;
		return 0;
	}
	dup = spec[0] == '@' ? read_file(spec + 1) : strdup(spec);
	if (!dup) {
		snprintf(err, errlen, "fault rules %s: cannot read", spec);
		return -EINVAL;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		free(dup);
		return -ENOMEM;
	}
	for (tok = strtok_r(dup, ";\n \t", &save); tok; tok = strtok_r(NULL, ";\n \t", &save)) {
		char copy[128];

		if (tok[0] == '#')
			continue;
		snprintf(copy, sizeof(copy), "%s", tok);
		if (f->nr == MAX_RULES || parse_rule(tok, &f->rules[f->nr]) < 0) {
			snprintf(
				err, errlen,
				"fault rule '%s': expected [dN:]read|write|sync|any@N|%%N=eio|enodev|short|tear|flip",
				copy);
			r = -EINVAL;
			break;
		}
		f->nr++;
	}
	free(dup);
	if (r < 0 || f->nr == 0) {
		free(f);
		if (r == 0)
			*ret = NULL;
		return r;
	}
	*ret = f;
	return 0;
}

void ssd_faults_free(struct ssd_faults *f)
{
	free(f);
}

static enum ssd_fault fault_next(struct ssd_faults *f, unsigned drive, int op)
{
	uint64_t mine, other = 0;

	if (!f || drive >= MAX_FAULT_DRIVES)
		return SSD_FAULT_NONE;
	/* Relaxed: each count is its own; no other memory is ordered by it. */
	mine = __atomic_add_fetch(&f->count[drive][op], 1, __ATOMIC_RELAXED);
	if (op != OP_SYNC)
		other = __atomic_load_n(&f->count[drive][op == OP_WRITE ? OP_READ : OP_WRITE],
					__ATOMIC_RELAXED);
	for (unsigned i = 0; i < f->nr; i++) {
		const struct rule *r = &f->rules[i];
		uint64_t c;

		if (r->drive >= 0 && (unsigned)r->drive != drive)
			continue;
		if (r->op == OP_ANY && op != OP_SYNC)
			c = mine + other;
		else if (r->op == op)
			c = mine;
		else
			continue;
		if (r->every ? c % r->n == 0 : c == r->n)
			return r->action;
	}
	return SSD_FAULT_NONE;
}

enum ssd_fault ssd_fault_next(struct ssd_faults *f, unsigned drive, bool write)
{
	return fault_next(f, drive, write ? OP_WRITE : OP_READ);
}

enum ssd_fault ssd_fault_sync(struct ssd_faults *f, unsigned drive)
{
	return fault_next(f, drive, OP_SYNC);
}
