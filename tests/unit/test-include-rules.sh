#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The include rules of docs/ARCHITECTURE.md ("### Include rules") hold over
# the whole tree (scripts/check-includes): every quoted include is one its
# folder may make, and the product's modules form no cycle, control/
# included.  Then the check itself is checked: a copy of the tree with one
# forbidden include (io/ reaching up into control/) and one with a cycle
# between two modules of one folder must both fail, or the check proves
# nothing.

: "${top_srcdir:?}"
if ! command -v python3 >/dev/null 2>&1; then
	echo "python3 not found: skipped"
	exit 77
fi
check="$top_srcdir/scripts/check-includes"
python3 "$check" --root "$top_srcdir" || exit 1

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The sources and docs only (an in-tree build leaves objects beside them).
(cd "$top_srcdir" &&
	find include common shmq client peer sidecar tools examples tests fuzz docs \
		\( -name '*.[ch]' -o -name '*.cu' -o -name '*.S' -o -name '*.md' \) -type f 2>/dev/null |
	tar -cf - -T -) | tar -C "$tmp" -xf - || exit 1

# A worker that reaches up into the control plane.
printf '#include "control/daemon.h"\n' >>"$tmp/sidecar/io/batch.c"
if python3 "$check" --root "$tmp" >"$tmp/out1" 2>&1; then
	echo "FAIL: io/ including control/daemon.h was not caught"
	exit 1
fi
grep -q 'sidecar/io/batch.c' "$tmp/out1" || { cat "$tmp/out1"; exit 1; }
sed -i '$d' "$tmp/sidecar/io/batch.c"
python3 "$check" --root "$tmp" >/dev/null || { echo "FAIL: the copy does not pass"; exit 1; }

# A cycle inside one folder, which the folder table alone allows.
printf '#include "control/lifecycle.h"\n' >>"$tmp/sidecar/control/slots.c"
if python3 "$check" --root "$tmp" >"$tmp/out2" 2>&1; then
	echo "FAIL: the cycle control/slots -> control/lifecycle -> control/slots was not caught"
	exit 1
fi
grep -q 'cycle' "$tmp/out2" || { cat "$tmp/out2"; exit 1; }
echo "the include rules hold; a forbidden include and a cycle are both caught"
