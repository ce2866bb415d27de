#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The size rules of CONTRIBUTING.md ("Style") hold over the product's
# sources (scripts/check-size): no .c file over 1000 lines, no function
# over 100.  The check itself is checked first: a copy of the sources
# with one function grown past the limit must fail and name it, or the
# check proves nothing.

: "${top_srcdir:?}"
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
check="$top_srcdir/scripts/check-size"
copy=$(mktemp -d) || exit 1
trap 'rm -rf "$copy"' EXIT

# The product's .c files only (an in-tree build leaves objects beside them),
# and a function of 101 lines at the end of one: "{", 99 statements, "}".
(cd "$top_srcdir" && find include common shmq client peer sidecar -name '*.c' -type f 2>/dev/null |
	tar -cf - -T -) | tar -C "$copy" -xf - || exit 1
{
	printf '\nint size_rules_too_long(void)\n{\n\tint x = 0;\n'
	for _ in $(seq 98); do
		printf '\tx++;\n'
	done
	printf '}\n'
} >>"$copy/sidecar/io/batch.c"
if python3 "$check" --root "$copy" >"$copy/out" 2>&1; then
	echo "FAIL: a function of 101 lines was not caught"
	exit 1
fi
grep -q 'sidecar/io/batch.c:.*size_rules_too_long() is 101 lines' "$copy/out" || {
	cat "$copy/out"
	exit 1
}

python3 "$check" --root "$top_srcdir" || exit 1
echo "the size rules hold; a function over the limit is caught"
