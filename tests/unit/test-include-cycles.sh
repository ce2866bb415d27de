#!/bin/sh
# SPDX-License-Identifier: MIT
#
# No include cycle of kvstashd's modules leaves the control plane
# (scripts/include-cycles): control/ may depend on itself in circles, the
# rest of sidecar/ must form layers.  A module that joins a cycle outside
# control/ fails this test.

: "${top_srcdir:?}"
if ! command -v python3 >/dev/null 2>&1; then
	echo "python3 not found: skipped"
	exit 77
fi
exec python3 "$top_srcdir/scripts/include-cycles" --root "$top_srcdir"
