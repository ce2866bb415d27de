#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The man pages: every page renders without a single groff warning and is
# installed (named in man/Makefile.inc); every function kvstash.h,
# shmq.h and peer.h declare (inline helpers included) has a page of its
# own name, which is, or sources with ".so man3/PAGE.3", a page naming
# the function in NAME and in SYNOPSIS; the overviews libkvstash(3),
# shmq(3) and kvspeer(3) have a synopsis line for every function (the
# pages are in the source tree whether or not libkvspeer is built, so
# they are checked in every build); and, with kvstashd built,
# kvstash.conf(5) documents every configuration key in its section and
# kvstashd(8) names every generated --SECTION-KEY option.

: "${top_srcdir:?}"
GROFF=${GROFF:-groff}
if [ "$GROFF" = no ] || ! command -v "$GROFF" >/dev/null 2>&1; then
	echo "groff not found: skipped"
	exit 77
fi
man=$top_srcdir/man
status=0

# The page a ".so man3/PAGE.3" page sources, or nothing for a real page.
so_target() {
	sed -n '1s,^\.so man[1-8]/\([^/]*\)$,\1,p' "$1"
}

pages=0
for page in "$man"/*.[1-8]; do
	[ -f "$page" ] || continue
	name=$(basename "$page")
	pages=$((pages + 1))
	if ! grep -q "man/$name\\>" "$man/Makefile.inc"; then
		echo "$name: not in man/Makefile.inc (make install would not install it)"
		status=1
	fi
	target=$(so_target "$page")
	if [ -n "$target" ]; then
		if [ "$(wc -l <"$page")" -ne 1 ]; then
			echo "$name: a .so page holds the .so line only"
			status=1
		elif [ ! -f "$man/$target" ] || [ -n "$(so_target "$man/$target")" ]; then
			echo "$name: sources $target, which is not a page"
			status=1
		fi
		continue
	fi
	out=$(LC_ALL=C "$GROFF" -man -ww -z "$page" 2>&1)
	if [ -n "$out" ]; then
		echo "$name: groff warnings:"
		echo "$out"
		status=1
	fi
done
if [ $pages -lt 5 ]; then
	echo "only $pages man pages in $man"
	status=1
fi

# Does @page have a synopsis line for function @fn?
has_synopsis() {
	grep -q "^\\.BI\\{0,1\\} .*\\<$2\\>" "$1"
}
# Does the NAME section of @page list function @fn?
names() {
	awk -v fn="$2" '
		/^\.SH / { in_name = ($0 == ".SH NAME"); next }
		in_name { sub(/ \\-.*/, ""); n = split($0, w, /[ ,]+/); for (i = 1; i <= n; i++) if (w[i] == fn) found = 1 }
		END { exit !found }' "$1"
}

# check_functions HEADER PREFIX OVERVIEW
check_functions() {
	for fn in $(sed -n "s/^[a-z_0-9 ]*[ *]\\($2[a-z_0-9]*\\)(.*/\\1/p" "$1" | sort -u); do
		if ! has_synopsis "$man/$3" "$fn"; then
			echo "$3: no synopsis line for $fn"
			status=1
		fi
		if [ ! -f "$man/$fn.3" ]; then
			echo "$fn: no man page ($(basename "$1") declares it)"
			status=1
			continue
		fi
		page=$fn.3
		target=$(so_target "$man/$page")
		[ -n "$target" ] && page=$target
		[ -f "$man/$page" ] || continue # reported above
		if ! names "$man/$page" "$fn"; then
			echo "$page: NAME does not list $fn"
			status=1
		fi
		if ! has_synopsis "$man/$page" "$fn"; then
			echo "$page: no synopsis line for $fn"
			status=1
		fi
	done
}
check_functions "$top_srcdir/include/kvstash/kvstash.h" kvs_ libkvstash.3
check_functions "$top_srcdir/include/shmq/shmq.h" shmq_ shmq.3
check_functions "$top_srcdir/include/kvstash/peer.h" kvspeer_ kvspeer.3

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

# kvstash-bench(1) documents every option kvstash-bench --help lists.
bench=${top_builddir:-.}/tools/kvstash-bench
if [ -x "$bench" ]; then
	opts=$("$bench" --help | grep -o -- '--[a-z0-9][a-z0-9-]*' | sort -u)
	[ -n "$opts" ] || { echo "kvstash-bench --help lists no option"; status=1; }
	for o in $opts; do
		if ! grep -q "$(printf '%s' "$o" | sed 's/-/\\\\-/g')\\>" "$man/kvstash-bench.1"; then
			echo "kvstash-bench.1: no $o (kvstash-bench --help lists it)"
			status=1
		fi
	done
fi
exit $status
