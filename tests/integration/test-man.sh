#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Every man page renders without a single groff warning; libkvstash(3) has
# a synopsis line for every function kvstash.h declares; and, with kvstashd
# built, kvstash.conf(5) documents every configuration key in its section
# and kvstashd(8) names every generated --SECTION-KEY option.

: "${top_srcdir:?}"
GROFF=${GROFF:-groff}
if [ "$GROFF" = no ] || ! command -v "$GROFF" >/dev/null 2>&1; then
	echo "groff not found: skipped"
	exit 77
fi
man=$top_srcdir/man
status=0

pages=0
for page in "$man"/*.[1-8]; do
	[ -f "$page" ] || continue
	pages=$((pages + 1))
	out=$(LC_ALL=C "$GROFF" -man -ww -z "$page" 2>&1)
	if [ -n "$out" ]; then
		echo "$(basename "$page"): groff warnings:"
		echo "$out"
		status=1
	fi
done
if [ $pages -lt 5 ]; then
	echo "only $pages man pages in $man"
	status=1
fi

for fn in $(sed -n 's/^[a-z_0-9 ]*[ *]\(kvs_[a-z_0-9]*\)(.*/\1/p' \
	"$top_srcdir/include/kvstash/kvstash.h" | sort -u); do
	if ! grep -q "^\.BI\{0,1\} .*\\<$fn\\>" "$man/libkvstash.3"; then
		echo "libkvstash.3: no synopsis line for $fn"
		status=1
	fi
done

kvstashd=${top_builddir:-.}/sidecar/kvstashd
if [ -x "$kvstashd" ]; then
	if ! "$kvstashd" --config /dev/null --check-config >"${TMPDIR:-/tmp}/kvstash-man.$$"; then
		echo "kvstashd --check-config failed"
		status=1
	fi
	# "[section] key" pairs, from the daemon and from the page's .SH/.BR lines.
	awk '/^\[/ { s = $0; next } / = / { print s, $1 }' "${TMPDIR:-/tmp}/kvstash-man.$$" |
	while read -r section key; do
		if ! awk -v s=".SH $section" -v k=".BR $key " '
			$0 == s { in_s = 1; next }
			/^\.SH / { in_s = 0 }
			in_s && index($0, k) == 1 { found = 1 }
			END { exit !found }' "$man/kvstash.conf.5"; then
			echo "kvstash.conf.5: $section $key is not documented in its section"
			exit 1
		fi
		opt=$(printf '%s-%s' "$section" "$key" | tr -d '[]' | tr _ - | sed 's/-/\\\\-/g')
		if ! grep -q "\\\\-\\\\-$opt\\>" "$man/kvstashd.8"; then
			echo "kvstashd.8: no --$(printf '%s-%s' "$section" "$key" | tr -d '[]' | tr _ -)"
			exit 1
		fi
	done || status=1
	rm -f "${TMPDIR:-/tmp}/kvstash-man.$$"
fi
exit $status
