#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The Python binding's ABI has one source, the C headers: python/gen-abi
# writes kvstash/_abi.py from them at build time.  This shows that a change
# in a C struct reaches Python or stops the build, never a user:
#   - the build's _abi.py is what gen-abi makes of today's headers;
#   - a field grown and a constant changed in a copy of the headers follow
#     in the generated layout (and in the ctypes Structure built from it);
#   - fields swapped in a header but not in gen-abi's table, a field added to a struct but not to gen-abi's table, and one
#     removed from a struct that the table names, fail the generator;
#   - a layout ctypes does not reproduce fails `import kvstash`.

: "${top_builddir:?}" "${top_srcdir:?}"
CC=${CC:-cc}
gen=$top_builddir/python/gen-abi
abi=$top_builddir/python/kvstash/_abi.py
for f in "$gen" "$abi"; do
	if [ ! -e "$f" ]; then
		echo "$f not built: skipped"
		exit 77
	fi
done
py=
for cand in "${PYTHON:-}" python3; do
	[ -n "$cand" ] && [ "$cand" != : ] && command -v "$cand" >/dev/null 2>&1 && py=$cand && break
done

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() {
	echo "FAIL: $*"
	exit 1
}

"$gen" >"$tmp/now.py" || fail "gen-abi failed on the headers"
cmp -s "$tmp/now.py" "$abi" || fail "$abi is not what gen-abi makes of the headers"

# gen-abi built against include/ of $1 (a copy of the headers, altered).
build_gen() {
	LC_ALL=C $CC -std=gnu11 -Wall -Werror -I"$1/include" -I"$top_builddir/include" \
		-o "$1/gen-abi" "$top_srcdir/python/gen-abi.c" 2>"$1/cc.log"
}
# A copy of the headers with sed script $2 applied to header $3.
altered() {
	mkdir -p "$tmp/$1/include" &&
		cp -R "$top_srcdir/include/kvstash" "$tmp/$1/include/" &&
		chmod -R u+w "$tmp/$1" &&
		sed -i "$2" "$tmp/$1/include/kvstash/$3" || fail "cannot alter $3"
	grep -q "$4" "$tmp/$1/include/kvstash/$3" || fail "the sed script for $1 no longer applies"
}

# 1. A field grown (device_uuid of struct kvs_connect_opts, 16 -> 24
#    bytes) and a constant changed: both follow in the generated module.
altered grown 's/^\tuint8_t device_uuid\[16\];/\tuint8_t device_uuid[24];/;s/^#define KVS_CONNECT_FENCES (1u << 1)/#define KVS_CONNECT_FENCES (1u << 5)/' \
	kvstash.h 'device_uuid\[24\]'
build_gen "$tmp/grown" || fail "gen-abi does not compile against a grown field: $(cat "$tmp/grown/cc.log")"
"$tmp/grown/gen-abi" >"$tmp/grown.py" || fail "gen-abi refused a grown field"
grep -q '("instance", "c_char_p", 0, 40)' "$abi" || fail "today's instance is not at 40"
grep -q '("instance", "c_char_p", 0, 48)' "$tmp/grown.py" ||
	fail "instance did not move after a grown device_uuid"
grep -q '^CONNECT_FENCES = 32$' "$tmp/grown.py" || fail "a changed constant did not follow"

# 1b. Two fields swapped: the table must list them as the header does.
altered moved '/^\tuint32_t max_keys;$/{h;d};/^\tuint32_t max_inflight;$/{G}' kvstash.h \
	'max_inflight;$'
build_gen "$tmp/moved" || fail "gen-abi does not compile against a moved field"
if "$tmp/moved/gen-abi" >/dev/null 2>"$tmp/moved.err"; then
	fail "gen-abi accepted fields out of the header's order"
fi
grep -q 'session_info.max_inflight: out of order' "$tmp/moved.err" || fail "unexpected: $(cat "$tmp/moved.err")"

# 2. A field added to struct kvs_session_info, not to gen-abi's table.
altered added 's/^\tuint16_t daemon_rev_major;$/\tuint32_t added;\n&/' kvstash.h '^.uint32_t added;$'
build_gen "$tmp/added" || fail "gen-abi does not compile against an added field"
if "$tmp/added/gen-abi" >/dev/null 2>"$tmp/added.err"; then
	fail "gen-abi accepted a field it does not list"
fi
grep -q 'session_info: bytes 40\.\.44' "$tmp/added.err" || fail "unexpected: $(cat "$tmp/added.err")"

# 3. A field removed from struct kvs_fence_ref: no generator.
altered removed '/^\tuint32_t gen;\t/d' kvstash.h 'uint32_t count;'
if build_gen "$tmp/removed"; then
	fail "gen-abi compiled without a field it lists"
fi
grep -q "has no member named 'gen'" "$tmp/removed/cc.log" || fail "unexpected: $(cat "$tmp/removed/cc.log")"

# 4. The import-time check: a C offset ctypes does not reproduce.
if [ -n "$py" ]; then
	mkdir -p "$tmp/py" && cp -R "$top_srcdir/python/kvstash" "$tmp/py/" && chmod -R u+w "$tmp/py" ||
		fail "cannot copy the package"
	cp "$tmp/grown.py" "$tmp/py/kvstash/_abi.py"
	PYTHONPATH=$tmp/py "$py" -B -c '
import ctypes, kvstash._lib as l
assert l.ConnectOpts.instance.offset == 48 and ctypes.sizeof(l.ConnectOpts) == 136
assert l.CONNECT_FENCES == 32
' || fail "the grown layout did not reach kvstash._lib"
	sed 's/("resv0", "c_uint32", 0, 44)/("resv0", "c_uint32", 0, 40)/' "$abi" >"$tmp/py/kvstash/_abi.py"
	if PYTHONPATH=$tmp/py "$py" -B -c 'import kvstash' 2>"$tmp/import.err"; then
		fail "import kvstash accepted a layout ctypes does not reproduce"
	fi
	grep -q 'ImportError: kvstash._abi: SessionInfo.resv0 at 44 in ctypes, 40 in C' "$tmp/import.err" ||
		fail "unexpected: $(cat "$tmp/import.err")"
else
	echo "no python3: import checks skipped"
fi
echo "ok"
