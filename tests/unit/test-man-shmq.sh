#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The libshmq man pages render without a single groff warning, and shmq(3)
# documents every function shmq.h declares.

: "${top_srcdir:?}"
GROFF=${GROFF:-groff}
if [ "$GROFF" = no ] || ! command -v "$GROFF" >/dev/null 2>&1; then
	echo "groff not found: skipped"
	exit 77
fi

status=0
for page in shmq.3 shmq.7; do
	out=$(LC_ALL=C "$GROFF" -man -ww -z "$top_srcdir/man/$page" 2>&1)
	if [ -n "$out" ]; then
		echo "$page: groff warnings:"
		echo "$out"
		status=1
	fi
done

# Every public function, inline helpers included, has its own entry.
for fn in $(sed -n 's/^[a-z_0-9 ]*[ *]\(shmq_[a-z_0-9]*\)(.*/\1/p' \
	"$top_srcdir/include/shmq/shmq.h" | sort -u); do
	if ! grep -q "^\.BI\{0,1\} .*\\<$fn\\>" "$top_srcdir/man/shmq.3"; then
		echo "shmq.3: no synopsis line for $fn"
		status=1
	fi
done
exit $status
