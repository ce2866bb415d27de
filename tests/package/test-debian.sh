#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Install-and-run test of the Debian packages, as an operator would meet
# them.  Run by .ci/run (not by make check: it needs root, installs packages
# system-wide and takes minutes), on a fresh Debian 12:
#
#   1. installs the build dependencies (apt-get build-dep on debian/control),
#   2. builds the packages from a copy of the source in a temporary directory
#      with DEB_BUILD_OPTIONS=nocheck (CI ran the test suite already),
#   3. runs lintian on them (any error fails),
#   4. installs them with dpkg -i (apt-get -f install for runtime
#      dependencies) and checks the kvstash user and group, and
#      /run/kvstash (0750, group kvstash),
#   5. starts the installed /usr/sbin/kvstashd with the installed
#      /etc/kvstash/kvstash.conf, as user kvstash with an unlimited memlock
#      limit (what the systemd unit does), no init system involved,
#   6. runs the installed kvstash-example-engine against it; builds a small
#      C program against the installed libkvstash (pkg-config, shared and
#      static) that makes a NOP round trip; checks `kvstash stats --json`
#      and the Prometheus endpoint; imports the Python binding,
#   7. stops kvstashd with SIGTERM (it must exit 0),
#   8. purges every package and checks that nothing they installed remains.
#      The kvstash system user and group do remain (Debian Policy 9.2.2).
#
# Exit status 0: passed; 1: failed; 77: skipped (not root, not Debian).
# Environment:
#   KVSTASH_DEB_DIR=DIR      use the .debs and .changes already in DIR
#                            instead of building (steps 1-2 skipped)
#   KVSTASH_METRICS_PORT=N   port of the metrics endpoint (default 9464)
#   KVSTASH_KEEP=1           keep the temporary directory

set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "test-debian: not root: skipped"
	exit 77
fi
if [ ! -r /etc/debian_version ] || ! command -v dpkg >/dev/null || ! command -v apt-get >/dev/null; then
	echo "test-debian: not a Debian system: skipped"
	exit 77
fi

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
port=${KVSTASH_METRICS_PORT:-9464}
sock=/run/kvstash/kvstash.sock
start=$(date +%s)
work=$(mktemp -d /tmp/kvstash-deb.XXXXXX)
export DEBIAN_FRONTEND=noninteractive

pid=
pkgs=()
installed=0
status=1

step() { echo; echo "==== test-debian: $* ($(($(date +%s) - start)) s)"; }
fail() {
	echo "test-debian: FAIL: $*" >&2
	exit 1
}

cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [ $status != 0 ]; then
		[ -s "$work/kvstashd.log" ] && { echo "---- kvstashd log"; tail -50 "$work/kvstashd.log"; }
		# Leave the system as we found it, as far as our packages go.
		if [ $installed = 1 ]; then
			echo "test-debian: purging the packages after the failure"
			dpkg --purge "${pkgs[@]}" >/dev/null 2>&1 || true
		fi
	fi
	if [ "${KVSTASH_KEEP:-0}" = 1 ] || [ $status != 0 ]; then
		echo "test-debian: files kept in $work"
	else
		rm -rf "$work"
	fi
}
trap 'status=$?; cleanup' EXIT

# ---------------------------------------------------------------------
if [ -n "${KVSTASH_DEB_DIR:-}" ]; then
	step "using the packages in $KVSTASH_DEB_DIR"
	debdir=$(cd "$KVSTASH_DEB_DIR" && pwd)
	apt-get install -y -qq --no-install-recommends lintian curl pkg-config gcc libc6-dev \
		python3 >/dev/null
else
	step "build dependencies"
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends build-essential dpkg-dev debhelper \
		lintian curl >/dev/null
	# Build-Depends of debian/control, without those of the test suite.
	apt-get build-dep -y -qq --no-install-recommends -P nocheck "$srcdir" >/dev/null

	step "copy of the source in $work/src"
	mkdir "$work/src"
	if git -C "$srcdir" rev-parse --git-dir >/dev/null 2>&1; then
		(cd "$srcdir" && git ls-files -co --exclude-standard -z) |
			(cd "$srcdir" && tar -cf - --null -T -) | tar -xf - -C "$work/src"
	else
		# A release tarball: everything but build trees.
		tar -C "$srcdir" --exclude='./build*' --exclude='./debian/.debhelper' -cf - . |
			tar -xf - -C "$work/src"
	fi

	step "dpkg-buildpackage -us -uc -b (DEB_BUILD_OPTIONS=nocheck)"
	if ! (cd "$work/src" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
		dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1; then
		tail -60 "$work/build.log"
		fail "dpkg-buildpackage (log: $work/build.log)"
	fi
	debdir=$work
fi

changes=
for f in "$debdir"/kvstash_*.changes; do [ -f "$f" ] && changes=$f; done
[ -n "$changes" ] || fail "no kvstash_*.changes in $debdir"
debs=()
for f in "$debdir"/*.deb; do
	case $f in *-dbgsym_*) continue ;; esac
	debs+=("$f")
	pkgs+=("$(dpkg-deb -f "$f" Package)")
done
[ ${#debs[@]} -ge 5 ] || fail "only ${#debs[@]} packages built: ${pkgs[*]}"
echo "packages: ${pkgs[*]}"
for f in "${debs[@]}"; do
	echo "--- $(basename "$f")"
	dpkg-deb -c "$f" | awk '$1 !~ /^d/ { print "    " $6 ($7 ? " " $7 " " $8 : "") }'
done

# ---------------------------------------------------------------------
step "lintian"
lintian_rc=0
lintian --fail-on error "$changes" >"$work/lintian.log" 2>&1 || lintian_rc=$?
cat "$work/lintian.log"
[ $lintian_rc = 0 ] || fail "lintian reported errors (exit $lintian_rc)"
echo "lintian: $(grep -c '^E:' "$work/lintian.log" || true) errors, $(grep -c '^W:' "$work/lintian.log" || true) warnings"

# ---------------------------------------------------------------------
step "install"
for p in "${pkgs[@]}"; do
	if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -qv 'not-installed'; then
		echo "test-debian: $p is already on this system: purging it first"
		dpkg --purge "$p" >/dev/null 2>&1 || true
	fi
done
installed=1
dpkg -i "${debs[@]}" || echo "(dpkg -i left dependencies to apt-get -f install)"
apt-get install -f -y -qq --no-install-recommends >/dev/null
for p in "${pkgs[@]}"; do
	s=$(dpkg-query -W -f='${Status}' "$p")
	[ "$s" = "install ok installed" ] || fail "$p: $s"
done
# What each package installed, for the check after the purge.
for p in "${pkgs[@]}"; do
	dpkg -L "$p"
done | sort -u >"$work/files"

getent passwd kvstash >/dev/null || fail "no user kvstash"
getent group kvstash >/dev/null || fail "no group kvstash"
[ -d /run/kvstash ] || fail "/run/kvstash missing"
[ "$(stat -c '%a %G' /run/kvstash)" = "750 kvstash" ] ||
	fail "/run/kvstash is $(stat -c '%a %U:%G' /run/kvstash), want 0750 group kvstash"
dpkg-query -W -f='${Conffiles}\n' kvstash | grep -q ' /etc/kvstash/kvstash.conf ' ||
	fail "/etc/kvstash/kvstash.conf is not a conffile"
[ -f /lib/systemd/system/kvstashd.service ] || fail "no systemd unit"
echo "user kvstash: $(getent passwd kvstash)"
echo "/run/kvstash: $(stat -c '%A %U:%G' /run/kvstash)"

# ---------------------------------------------------------------------
step "start the installed kvstashd"
conf=/etc/kvstash/kvstash.conf
args=(--config "$conf" -o pool.size=256M)
/usr/sbin/kvstashd "${args[@]}" --check-config >/dev/null || fail "the installed configuration does not check"
metrics=skip
if ! /usr/sbin/kvstashd "${args[@]}" -o "metrics.listen=127.0.0.1:$port" --check-config >/dev/null 2>&1; then
	echo "kvstashd has no [metrics] listen key: the metrics checks are skipped"
elif ! ldd /usr/sbin/kvstashd | grep -q libmicrohttpd; then
	echo "kvstashd is built without libmicrohttpd: the metrics checks are skipped"
else
	metrics=yes
	args+=(-o "metrics.listen=127.0.0.1:$port")
fi
[ -e "$sock" ] && fail "$sock exists before kvstashd started (another kvstashd?)"
# As the unit runs it: user kvstash, unlimited locked memory (the pool is
# pinned).  A container without CAP_SYS_RESOURCE cannot raise the memlock
# limit: there kvstashd gets CAP_IPC_LOCK instead, and without that either
# it runs with its pool unlocked (kvstashd warns and carries on).  prlimit
# and setpriv exec, so $! is kvstashd itself.
launch=(setpriv --reuid=kvstash --regid=kvstash --init-groups)
if prlimit --memlock=unlimited:unlimited true 2>/dev/null; then
	launch=(prlimit --memlock=unlimited:unlimited "${launch[@]}")
elif setpriv --inh-caps=+ipc_lock --ambient-caps=+ipc_lock true 2>/dev/null; then
	echo "cannot raise RLIMIT_MEMLOCK here: kvstashd runs with CAP_IPC_LOCK instead"
	launch+=(--inh-caps=+ipc_lock --ambient-caps=+ipc_lock)
else
	echo "neither RLIMIT_MEMLOCK nor CAP_IPC_LOCK here: the pool stays unlocked"
fi
"${launch[@]}" /usr/sbin/kvstashd "${args[@]}" >"$work/kvstashd.log" 2>&1 &
pid=$!
ready=0
for _ in $(seq 600); do
	kill -0 "$pid" 2>/dev/null || fail "kvstashd exited at start-up"
	if [ -S "$sock" ] && kvstash --socket "$sock" status >/dev/null 2>&1; then
		ready=1
		break
	fi
	sleep 0.1
done
[ $ready = 1 ] || fail "kvstashd not ready after 60 s"
[ "$(stat -c '%U' "$sock")" = kvstash ] || fail "socket owned by $(stat -c '%U' "$sock"), not kvstash"
kvstash --socket "$sock" status

# ---------------------------------------------------------------------
step "the installed example engine"
kvstash-example-engine --socket "$sock" || fail "kvstash-example-engine"

# ---------------------------------------------------------------------
step "a program built against the installed libkvstash (pkg-config)"
cat >"$work/nop.c" <<'EOF'
#include <stdio.h>
#include <kvstash/kvstash.h>

int main(int argc, char **argv)
{
	struct kvs_connect_opts o;
	struct kvs_client *c;
	struct kvs_sqe *sqe;
	struct kvs_cqe *cqe;
	int r;

	kvs_connect_opts_init(&o);
	o.instance = "test-debian";
	o.ns = "test-debian/nop";
	r = kvs_connect(argc > 1 ? argv[1] : NULL, &o, &c);
	if (r < 0) {
		fprintf(stderr, "kvs_connect: %s\n", kvs_strerror(r));
		return 1;
	}
	sqe = kvs_get_sqe(c);
	if (!sqe || kvs_prep_nop(c, sqe, 42) < 0 || kvs_submit(c) != 1) {
		fprintf(stderr, "submitting a NOP failed\n");
		return 1;
	}
	r = kvs_wait_cqe(c, &cqe, 5000);
	if (r < 0) {
		fprintf(stderr, "kvs_wait_cqe: %s\n", kvs_strerror(r));
		return 1;
	}
	if (cqe->user_data != 42 || cqe->res != 0) {
		fprintf(stderr, "NOP completed with user_data %llu res %d\n",
			(unsigned long long)cqe->user_data, (int)cqe->res);
		return 1;
	}
	kvs_cqe_seen(c, cqe);
	kvs_close(c);
	printf("NOP round trip ok (libkvstash %s)\n", kvs_version());
	return 0;
}
EOF
echo "pkg-config --cflags --libs kvstash: $(pkg-config --cflags --libs kvstash)"
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Werror -o "$work/nop" "$work/nop.c" $(pkg-config --cflags --libs kvstash) ||
	fail "building against libkvstash"
ldd "$work/nop" | grep -q '/libkvstash\.so\.0 ' || fail "nop is not linked to the installed libkvstash.so.0"
"$work/nop" "$sock" || fail "NOP round trip (shared library)"
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Werror -o "$work/nop-static" "$work/nop.c" $(pkg-config --cflags kvstash) \
	-Wl,-Bstatic $(pkg-config --static --libs kvstash) -Wl,-Bdynamic || fail "building against libkvstash.a"
ldd "$work/nop-static" | grep -q libkvstash && fail "nop-static still needs libkvstash.so"
"$work/nop-static" "$sock" || fail "NOP round trip (static library)"

# ---------------------------------------------------------------------
step "kvstash stats --json"
kvstash --socket "$sock" stats --json >"$work/stats.json" || fail "kvstash stats --json"
/usr/bin/python3 - "$work/stats.json" <<'EOF' || fail "stats counters"
import json, sys
s = json.load(open(sys.argv[1]))
def find(d, *path):
    for k in path:
        d = d[k]
    return d
checks = {("saves", "blocks_stored"): 1, ("loads", "blocks"): 1, ("queries", "blocks_hit"): 1}
for path, least in checks.items():
    v = find(s, *path)
    assert v >= least, f"stats {'.'.join(path)} = {v}, want >= {least}"
    print(f"stats {'.'.join(path)} = {v}")
EOF

# ---------------------------------------------------------------------
step "metrics at 127.0.0.1:$port"
if [ $metrics = yes ]; then
	curl -sf "http://127.0.0.1:$port/metrics" >"$work/metrics" || fail "scraping /metrics"
	for fam in kvstash_build_info kvstash_pool_capacity_bytes kvstash_save_blocks_stored_total \
		kvstash_load_blocks_total kvstash_query_blocks_hit_total kvstash_copy_duration_seconds; do
		grep -q "^# TYPE $fam " "$work/metrics" || fail "no family $fam in /metrics"
	done
	for c in kvstash_save_blocks_stored_total kvstash_load_blocks_total; do
		v=$(awk -v n="$c" '$1 == n { print $2 }' "$work/metrics")
		echo "$c $v"
		awk -v v="${v:-0}" 'BEGIN { exit !(v > 0) }' || fail "$c did not move ($v)"
	done
	echo "metrics: $(grep -c '^# TYPE kvstash_' "$work/metrics") kvstash_* families"
else
	echo "skipped (see above)"
fi

# ---------------------------------------------------------------------
step "Python binding"
# The system's python3, which python3-kvstash is for (not one on PATH).
if printf '%s\n' "${pkgs[@]}" | grep -qx python3-kvstash; then
	/usr/bin/python3 -c 'import kvstash' || fail "import kvstash"
	/usr/bin/python3 - "$sock" <<'EOF' || fail "kvstash.stats() through the installed libkvstash"
import sys, kvstash
g = kvstash.stats(sys.argv[1])["global"]
print("python: import kvstash ok; kvstash.stats() sees", len(g), "counters")
EOF
else
	echo "python3-kvstash not built: skipped"
fi

# ---------------------------------------------------------------------
step "stop kvstashd (SIGTERM)"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ $rc = 0 ] || fail "kvstashd exited with status $rc after SIGTERM"
[ -e "$sock" ] && echo "note: $sock remains after kvstashd exited"

# ---------------------------------------------------------------------
step "purge"
dpkg --purge "${pkgs[@]}"
installed=0
left=0
while IFS= read -r f; do
	[ -e "$f" ] || [ -L "$f" ] || continue
	if [ -d "$f" ]; then
		# A directory (or a link to one, as /lib on merged /usr) may stay
		# when another package owns it or it holds files that are not
		# ours (those that are ours are checked on their own lines).
		dpkg -S "$f" >/dev/null 2>&1 && continue
		[ -n "$(ls -A "$f")" ] && continue
	fi
	echo "left after purge: $f"
	left=1
done <"$work/files"
[ -e /run/kvstash ] && { echo "left after purge: /run/kvstash"; left=1; }
[ $left = 0 ] || fail "files remain after dpkg --purge"
getent passwd kvstash >/dev/null &&
	echo "the system user kvstash remains, as Debian Policy 9.2.2 asks"

step "passed"
