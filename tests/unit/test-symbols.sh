#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The ABI of both shared libraries, in four places that must agree: the
# functions the public header declares out of line, the version script
# that lists each of them by name under its version node, what the built
# library exports (each symbol at the node the script puts it in, no
# other symbol, no other node), and the Debian symbols file.  A function
# added to the header but not to the script is not exported; one added to
# the script but not the header is a leak: both fail here.

: "${top_builddir:?}" "${top_srcdir:?}"
if ! command -v nm >/dev/null 2>&1; then
	echo "nm not found: skipped"
	exit 77
fi

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
status=0
checked=0

# check_lib NAME SO HEADER PREFIX MAP DEBIAN_SYMBOLS
check_lib() {
	name=$1 so=$2 header=$3 prefix=$4 map=$5 deb=$6
	d=$tmp/$name
	mkdir -p "$d"

	if [ ! -f "$so" ]; then
		echo "$name: no shared library (static-only build): not checked"
		return
	fi
	checked=$((checked + 1))

	# Out-of-line declarations of the header (static inline helpers excluded).
	sed -n "/^static/d; s/^[a-z_0-9 ]*[ *]\\(${prefix}[a-z_0-9]*\\)(.*/\\1/p" "$header" |
		sort -u >"$d/declared"
	if [ ! -s "$d/declared" ]; then
		echo "$name: found no declarations in $header"
		status=1
		return
	fi

	# The version script: "NODE {", "global:", "sym;" ..., "local:", "*;",
	# "} [PARENT];" (comments stripped).  Prints "sym@NODE" per symbol and
	# "@NODE" per node; a pattern in a global section is an error.
	sed 's,/\*.*\*/,,; /\/\*/,/\*\//d' "$map" | awk -v map="$map" '
		{ gsub(/[ \t]+/, " "); sub(/^ /, ""); sub(/ $/, "") }
		$0 == "" { next }
		/^[A-Za-z_][A-Za-z0-9_.]* *\{$/ { node = $1; print "@" node; scope = ""; next }
		/^\}/ { node = ""; next }
		$0 == "global:" || $0 == "local:" { scope = $0; next }
		node != "" && scope == "global:" {
			sym = $0; sub(/;$/, "", sym)
			if (sym ~ /[*?\[]/) { print "pattern:" sym; next }
			print sym "@" node; next
		}
		node != "" && scope == "local:" && $0 == "*;" { next }
		{ print "unparsed:" $0 }' >"$d/map.raw"
	if grep -q '^pattern:' "$d/map.raw"; then
		echo "$name: $map exports by pattern, not by name:"
		sed -n 's/^pattern:/	/p' "$d/map.raw"
		status=1
	fi
	if grep -q '^unparsed:' "$d/map.raw"; then
		echo "$name: $map has lines this test does not understand:"
		sed -n 's/^unparsed:/	/p' "$d/map.raw"
		status=1
	fi
	grep -v -e '^@' -e '^pattern:' -e '^unparsed:' "$d/map.raw" | sort >"$d/listed"
	sed -n 's/^@//p' "$d/map.raw" | sort >"$d/nodes"
	if [ -n "$(cut -d@ -f1 "$d/listed" | uniq -d)" ]; then
		echo "$name: $map lists a symbol twice:"
		cut -d@ -f1 "$d/listed" | uniq -d
		status=1
	fi

	cut -d@ -f1 "$d/listed" | sort -u >"$d/listed-names"
	if ! cmp -s "$d/declared" "$d/listed-names"; then
		echo "$name: $(basename "$header") and $(basename "$map") differ" \
			"(< declared, > listed):"
		diff "$d/declared" "$d/listed-names"
		status=1
	fi

	# What the library exports: defined symbols at their default version
	# (sym@@NODE, one @ after the edit below), and the version nodes.
	nm -D --defined-only "$so" | awk '$2 != "A" { print $3 }' | sed 's/@@/@/' |
		sort >"$d/exported"
	nm -D --defined-only "$so" | awk '$2 == "A" { print $3 }' | sort >"$d/exported-nodes"
	if ! cmp -s "$d/listed" "$d/exported"; then
		echo "$name: $(basename "$map") and $(basename "$so") differ (< listed, > exported):"
		diff "$d/listed" "$d/exported"
		status=1
	fi
	if ! cmp -s "$d/nodes" "$d/exported-nodes"; then
		echo "$name: version nodes differ (< $(basename "$map"), > exported):"
		diff "$d/nodes" "$d/exported-nodes"
		status=1
	fi

	# The Debian symbols file: " sym@NODE VERSION" and " NODE@NODE VERSION".
	sed -n 's/^ \([^ ]*\) .*/\1/p' "$deb" | sort >"$d/debian"
	{
		cat "$d/listed"
		sed 's/.*/&@&/' "$d/nodes"
	} | sort >"$d/want-debian"
	if ! cmp -s "$d/want-debian" "$d/debian"; then
		echo "$name: $(basename "$map") and $deb differ (< listed, > debian):"
		diff "$d/want-debian" "$d/debian"
		status=1
	fi
}

check_lib libshmq "$top_builddir/shmq/.libs/libshmq.so" "$top_srcdir/include/shmq/shmq.h" \
	shmq_ "$top_srcdir/shmq/libshmq.sym" "$top_srcdir/debian/libshmq0.symbols"
check_lib libkvstash "$top_builddir/client/.libs/libkvstash.so" \
	"$top_srcdir/include/kvstash/kvstash.h" kvs_ "$top_srcdir/client/libkvstash.sym" \
	"$top_srcdir/debian/libkvstash0.symbols"

if [ $status -eq 0 ] && [ $checked -eq 0 ]; then
	echo "no shared library built: skipped"
	exit 77
fi
exit $status
