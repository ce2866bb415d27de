#!/bin/sh
# SPDX-License-Identifier: MIT
#
# libkvspeer.so exports exactly the functions kvstash/peer.h declares,
# each under the KVSPEER_0.1 node (no wire or auth helper leaks into the
# ABI, nor into the hosts that link it), and kvspeer(3) has a synopsis
# line for every one of them.

: "${top_builddir:?}" "${top_srcdir:?}"
so="$top_builddir/peer/.libs/libkvspeer.so"
if [ ! -f "$so" ]; then
	echo "no shared libkvspeer (static-only build): skipped"
	exit 77
fi
command -v nm >/dev/null 2>&1 || { echo "nm not found: skipped"; exit 77; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

sed -n 's/^[a-z_0-9 ]*[ *]\(kvspeer_[a-z_0-9]*\)(.*/\1/p' "$top_srcdir/include/kvstash/peer.h" |
	sort -u >"$tmp/declared"
[ -s "$tmp/declared" ] || { echo "found no declarations in peer.h"; exit 99; }
nm -D --defined-only "$so" | awk '$2 != "A" { print $3 }' | sort -u >"$tmp/exported"
nm -D --defined-only "$so" | awk '$2 == "A" { print $3 }' | sort -u >"$tmp/nodes"
status=0
sed 's/$/@@KVSPEER_0.1/' "$tmp/declared" >"$tmp/want"
if ! cmp -s "$tmp/want" "$tmp/exported"; then
	echo "exported symbols differ from peer.h (< declared, > exported):"
	diff "$tmp/want" "$tmp/exported"
	status=1
fi
if [ "$(cat "$tmp/nodes")" != "KVSPEER_0.1" ]; then
	echo "unexpected version nodes: $(cat "$tmp/nodes")"
	status=1
fi
for fn in $(cat "$tmp/declared"); do
	if ! grep -q "^\.BI\{0,1\} .*\\<$fn(" "$top_srcdir/man/kvspeer.3"; then
		echo "kvspeer.3: no synopsis line for $fn"
		status=1
	fi
done
exit $status
