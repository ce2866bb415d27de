#!/bin/sh
# SPDX-License-Identifier: MIT
#
# libshmq.so exports exactly the functions shmq.h declares, each under the
# SHMQ_0.1 version node, and nothing else (no helper leaks into the ABI).

: "${top_builddir:?}" "${top_srcdir:?}"
so="$top_builddir/shmq/.libs/libshmq.so"
if [ ! -f "$so" ]; then
	echo "no shared libshmq (static-only build): skipped"
	exit 77
fi
if ! command -v nm >/dev/null 2>&1; then
	echo "nm not found: skipped"
	exit 77
fi

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

# What the header declares out of line (static inline helpers excluded).
sed -n '/^static/d; s/^[a-z_0-9 ]*[ *]\(shmq_[a-z_0-9]*\)(.*/\1/p' "$top_srcdir/include/shmq/shmq.h" |
	sort -u >"$tmp/declared"
# What the library exports: functions with their version, version nodes.
nm -D --defined-only "$so" | awk '$2 != "A" { print $3 }' | sort -u >"$tmp/exported"
nm -D --defined-only "$so" | awk '$2 == "A" { print $3 }' | sort -u >"$tmp/nodes"

status=0
if [ ! -s "$tmp/declared" ]; then
	echo "found no declarations in shmq.h"
	exit 99
fi
sed 's/$/@@SHMQ_0.1/' "$tmp/declared" >"$tmp/want"
if ! cmp -s "$tmp/want" "$tmp/exported"; then
	echo "exported symbols differ from shmq.h (< declared, > exported):"
	diff "$tmp/want" "$tmp/exported"
	status=1
fi
if [ "$(cat "$tmp/nodes")" != "SHMQ_0.1" ]; then
	echo "unexpected version nodes:"
	cat "$tmp/nodes"
	status=1
fi
exit $status
