#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The reference engine end to end: start a kvstashd, then for each layout
# (page-first, layer-first) run paged_engine.py cold (prefill, save) and
# warm (a new process: query, load, prefill the rest) and let the warm run
# check blocks and tokens.  Exit status non-zero on any mismatch.
#
#   python/examples/run_reference.sh [paged_engine options...]
#
# Environment: KVSTASHD (default: the build tree's sidecar/kvstashd, then
# $PATH), KVSTASH_LIB (default: the build tree's libkvstash, when built in
# the source tree), PYTHON (default python3), KVSTASH_POOL (pool size,
# default 1G), KVSTASH_KEEP=1 keeps the temporary directory.
# Extra arguments go to every paged_engine.py run, e.g. --device cpu --tiny.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
PYTHON=${PYTHON:-python3}
if [ -z "${KVSTASHD:-}" ]; then
	if [ -x "$top/sidecar/kvstashd" ]; then
		KVSTASHD=$top/sidecar/kvstashd
	else
		KVSTASHD=$(command -v kvstashd) || { echo "run_reference: kvstashd not found: set KVSTASHD" >&2; exit 2; }
	fi
fi
if [ -z "${KVSTASH_LIB:-}" ] && [ -e "$top/client/.libs/libkvstash.so.0" ]; then
	KVSTASH_LIB=$top/client/.libs/libkvstash.so.0
	export KVSTASH_LIB
fi
PYTHONPATH=$here/..${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvstash-ref.XXXXXX") || exit 2
sock=$dir/run/kvstash.sock
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	[ -n "${KVSTASH_KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat > "$dir/kvstash.conf" <<CONF
[server]
socket = $sock
[pool]
size = ${KVSTASH_POOL:-1G}
[log]
level = info
CONF
"$KVSTASHD" --config "$dir/kvstash.conf" > "$dir/kvstashd.log" 2>&1 &
pid=$!

# Ready when the socket accepts a connection (kvstashd creates it before it listens).
i=0
until "$PYTHON" -c "import socket, sys; socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET).connect(sys.argv[1])" "$sock" 2>/dev/null; do
	if ! kill -0 "$pid" 2>/dev/null || [ $i -ge 300 ]; then
		echo "run_reference: kvstashd did not start:" >&2
		cat "$dir/kvstashd.log" >&2
		exit 2
	fi
	i=$((i + 1))
	sleep 0.1
done

status=0
for layout in page-first layer-first; do
	json=$dir/$layout.json
	if "$PYTHON" -B "$here/paged_engine.py" --phase cold --socket "$sock" --layout "$layout" --json "$json" "$@" &&
		"$PYTHON" -B "$here/paged_engine.py" --phase warm --socket "$sock" --layout "$layout" --json "$json" "$@"; then
		echo "run_reference: $layout: ok"
	else
		echo "run_reference: $layout: FAILED" >&2
		status=1
	fi
done
if [ $status -ne 0 ]; then
	echo "---- kvstashd log ----" >&2
	tail -n 50 "$dir/kvstashd.log" >&2
fi
exit $status
