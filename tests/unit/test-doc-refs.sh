#!/bin/sh
# SPDX-License-Identifier: MIT
#
# What the documentation names is in the tree (scripts/check-doc-refs):
# every file, file:line, project function and manual page that docs/*.md,
# README.md and CONTRIBUTING.md name in a code span.  Then the check itself
# is checked: a copy of the pages naming a file that is not there, a line
# one past the end of a file and a function nobody defines must fail,
# naming each where it is, and the last line of that file must pass, or
# the check proves nothing.
#
# The pages describe the repository, which holds more than a release
# tarball (.ci/ is not shipped), so the pages themselves are held to the
# tree only in a git checkout; the check's own test runs everywhere.

: "${top_srcdir:?}"
if ! command -v python3 >/dev/null 2>&1; then
	echo "python3 not found: skipped"
	exit 77
fi
check="$top_srcdir/scripts/check-doc-refs"
checkout=
if [ -e "$top_srcdir/.git" ]; then
	checkout=yes
	python3 "$check" --root "$top_srcdir" || exit 1
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The pages only: the references are checked against the real tree.
mkdir "$tmp/docs" &&
	cp "$top_srcdir"/docs/*.md "$tmp/docs/" &&
	cp "$top_srcdir/README.md" "$top_srcdir/CONTRIBUTING.md" "$tmp/" || exit 1
if [ -n "$checkout" ]; then
	python3 "$check" --root "$top_srcdir" --pages "$tmp" >/dev/null ||
		{ echo "FAIL: the copy of the pages does not pass"; exit 1; }
fi

page="$tmp/docs/ARCHITECTURE.md"
# Split, or this file (a source of identifiers for the check) would define it.
fn=store_no_such_'function'
last=$(wc -l <"$top_srcdir/sidecar/io/worker.c")
base=$(wc -l <"$page")
{
	echo
	echo "A file that is not there: \`sidecar/io/no-such-file.c\`."
	echo "A line past the end: \`sidecar/io/worker.c:$((last + 1))\`."
	echo "A function nobody defines: \`$fn()\`."
	echo "The last line, which is there: \`sidecar/io/worker.c:$last\`."
} >>"$page"
python3 "$check" --root "$top_srcdir" --pages "$tmp" >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -ne 1 ]; then
	cat "$tmp/out"
	echo "FAIL: stale references were not caught (exit $rc, not 1)"
	exit 1
fi
for want in \
	"docs/ARCHITECTURE.md:$((base + 2)): no such file in the tree: \`sidecar/io/no-such-file.c\`" \
	"docs/ARCHITECTURE.md:$((base + 3)): \`sidecar/io/worker.c:$((last + 1))\`: past the end" \
	"docs/ARCHITECTURE.md:$((base + 4)): no such function in the tree: \`$fn()\`"; do
	grep -qF "$want" "$tmp/out" || { cat "$tmp/out"; echo "FAIL: not reported: $want"; exit 1; }
done
if grep -qF "worker.c:$last\`" "$tmp/out"; then
	cat "$tmp/out"
	echo "FAIL: the last line of sidecar/io/worker.c was reported"
	exit 1
fi
echo "what the docs name is in the tree; a missing file, a line past the end and an unknown function are all caught"
