#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The example configuration etc/kvstash.conf: kvstashd --check-config
# accepts it, it names every key of kvstashd's table in the table's order,
# and the defaults it shows are the real ones.  And --check-config rejects
# bad files (unknown section or key, bad or out-of-range value, syntax)
# and bad overrides with exit status 2 and a message naming file, line and
# key.

: "${top_builddir:?}" "${top_srcdir:?}"
kvstashd=$top_builddir/sidecar/kvstashd
example=$top_srcdir/etc/kvstash.conf
if [ ! -x "$kvstashd" ]; then
	echo "$kvstashd not built: skipped"
	exit 77
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvstash-config.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 1' HUP INT TERM
unset KVSTASH_CONFIG

fail() {
	echo "FAIL: $*"
	exit 1
}

# check_config FILE: the effective configuration without its first line
# (which names the file).
check_config() {
	"$kvstashd" --config "$1" --check-config >"$dir/out" 2>"$dir/err" ||
		fail "--check-config $1: exit status $?: $(cat "$dir/err")"
	sed 1d "$dir/out"
}

# keys FILE: "[section] key" for every key line, commented out or not.
keys() {
	sed -n 's/^\(\[[a-z_]*\]\)$/\1/p; s/^#\{0,1\}\([a-z_][a-z_]*\) =.*/\1/p' "$1" |
		awk '/^\[/ { s = $0; next } { print s, $0 }'
}

# ---- the example -------------------------------------------------------
: >"$dir/empty.conf"
check_config "$dir/empty.conf" >"$dir/defaults" || exit 1
check_config "$example" >"$dir/example" || exit 1
cmp -s "$dir/defaults" "$dir/example" ||
	fail "the example changes settings: $(diff "$dir/defaults" "$dir/example")"

keys "$dir/defaults" >"$dir/keys.daemon"
[ -s "$dir/keys.daemon" ] || fail "no keys in kvstashd --check-config's output"
grep -v '^#' "$example" | grep -Eq '^[a-z_]+ *=' && fail "the example sets keys; it should only show them"
keys "$example" >"$dir/keys.example"
cmp -s "$dir/keys.daemon" "$dir/keys.example" ||
	fail "the example's keys differ from kvstashd's: $(diff "$dir/keys.daemon" "$dir/keys.example")"

# Every default it shows is the real one: uncommented, it changes nothing.
sed 's/^#\([a-z_][a-z_]* =\)/\1/' "$example" >"$dir/uncommented.conf"
check_config "$dir/uncommented.conf" >"$dir/uncommented" || exit 1
cmp -s "$dir/defaults" "$dir/uncommented" ||
	fail "a default in the example is wrong: $(diff "$dir/defaults" "$dir/uncommented")"

# ---- rejections ----------------------------------------------------------
# reject NAME EXPECTED_MESSAGE [kvstashd args...]: exit status 2 and the
# message on stderr.
reject() {
	name=$1
	want=$2
	shift 2
	"$kvstashd" "$@" --check-config >/dev/null 2>"$dir/err"
	st=$?
	[ $st -eq 2 ] || fail "$name: exit status $st, not 2 ($(cat "$dir/err"))"
	grep -Fq -- "$want" "$dir/err" ||
		fail "$name: message '$(cat "$dir/err")' lacks '$want'"
}

f=$dir/unknown-key.conf
printf '# comment\n[pool]\nsize = 16M\nno_such_key = 1\n' >"$f"
reject "unknown key" "$f:4: [pool] no_such_key: unknown key" --config "$f"

f=$dir/bad-value.conf
printf '[server]\nmax_sessions = 10\n\n[lease]\nttl = soon\n' >"$f"
reject "bad duration" "$f:5: [lease] ttl: 'soon' is not a duration" --config "$f"

f=$dir/bad-size.conf
printf '[pool]\nsize = lots\n' >"$f"
reject "bad size" "$f:2: [pool] size: 'lots' is not a size" --config "$f"

f=$dir/range.conf
printf '[session]\nmax_layers = 513\n' >"$f"
reject "out of range" "$f:2: [session] max_layers: 513 is outside [1, 512]" --config "$f"

f=$dir/bool.conf
printf '[pool]\nhugepages = maybe\n' >"$f"
reject "bad boolean" "$f:2: [pool] hugepages: 'maybe' is not yes or no" --config "$f"

f=$dir/section.conf
printf '[pool]\nsize = 16M\n[nosuch]\nkey = 1\n' >"$f"
reject "unknown section" "$f:4: [nosuch] key: unknown section" --config "$f"

f=$dir/syntax.conf
printf '[pool]\nsize 16M\n' >"$f"
reject "syntax error" "$f:2: syntax error" --config "$f"

f=$dir/cross.conf
printf '[session]\nsq_entries = 3\n' >"$f"
reject "cross-key check" "[session] sq_entries and sq_entries_max must be powers of two" \
	--config "$f"

# [cluster] is checked as start-up would check it (the registry's rules).
f=$dir/cluster-timeouts.conf
printf '[cluster]\nredis = 127.0.0.1:6379\nlease_ttl = 2s\ncommand_timeout = 1s\n' >"$f"
if grep -q '^#define HAVE_HIREDIS 1' "$top_builddir/config.h"; then
	reject "[cluster] timeouts" "[cluster] connect_timeout and command_timeout" --config "$f"
	printf '[cluster]\nredis = 127.0.0.1:6379\npassword_file = %s/nosuch\n' "$dir" >"$dir/pw.conf"
	reject "[cluster] password_file" "$dir/nosuch" --config "$dir/pw.conf"
else
	reject "[cluster] without hiredis" "cluster support is not compiled in" --config "$f"
fi

reject "missing file" "$dir/nosuch.conf: No such file or directory" --config "$dir/nosuch.conf"
KVSTASH_CONFIG=$dir/bad-value.conf
export KVSTASH_CONFIG
reject "\$KVSTASH_CONFIG" "$dir/bad-value.conf:5: [lease] ttl:"
unset KVSTASH_CONFIG
reject "-o override" "command line: [pool] size: 'lots' is not a size" \
	--config "$dir/empty.conf" -o pool.size=lots
reject "generated option" "command line: [lease] max_leases: 0 is outside" \
	--config "$dir/empty.conf" --lease-max-leases=0
reject "-o without a section" "'size=1G': expected section.key=value" \
	--config "$dir/empty.conf" -o size=1G

# ---- the command line wins over the file ---------------------------------
printf '[pool]\nsize = 16M\n' >"$dir/pool.conf"
"$kvstashd" --config "$dir/pool.conf" --pool-size=2G -o lease.ttl=90s --check-config \
	>"$dir/out" 2>"$dir/err" || fail "overrides: exit status $?: $(cat "$dir/err")"
grep -q '^size = 2147483648$' "$dir/out" || fail "--pool-size did not win: $(cat "$dir/out")"
grep -q '^ttl = 90000ms$' "$dir/out" || fail "-o lease.ttl did not apply: $(cat "$dir/out")"
echo "ok"
exit 0
