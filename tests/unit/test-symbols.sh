#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The ABI of the shared libraries, in four places that must agree: the
# functions the public header declares out of line, the version script
# that lists each of them by name under its version node, what the built
# library exports (each symbol at the node the script puts it in, no
# other symbol, no other node), and the Debian symbols file.  A function
# added to the header but not to the script is not exported; one added to
# the script but not the header is a leak: both fail here.
#
# And the versioning rule of CONTRIBUTING.md ("Library versions"): one
# node per release, PREFIX_MAJOR.MINOR, none newer than the package's
# version in configure.ac, each inheriting the one before it; the Debian
# symbols file gives every symbol the release of its node (MAJOR.MINOR.0)
# and names the library's soname.  In a git checkout, against the release
# tags behind HEAD (vMAJOR.MINOR.PATCH): a tagged release's nodes are
# frozen (the same symbols under the same nodes as at the tag, and no new
# node as old as the tag), and -version-info (configure.ac) is 0:0:0
# until the first release, then the last release's or the next one by
# libtool's rules (current+1:0:age+1 when symbols were added since,
# otherwise current and age unchanged).  A release already tagged is not
# judged again: only what the tree can still fix fails here.

: "${top_builddir:?}" "${top_srcdir:?}"
if ! command -v nm >/dev/null 2>&1; then
	echo "nm not found: skipped"
	exit 77
fi

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
status=0
checked=0

# The package version of configure.ac: AC_INIT([kvstash], [X.Y.Z], ...).
pkgver_of() {
	sed -n 's/^AC_INIT(\[[^]]*\], *\[\([^]]*\)\].*/\1/p' "$1"
}
# The -version-info of library variable $2 in configure.ac $1:
# AC_SUBST([NAME_LT_VERSION], [C:R:A]).
ltver_of() {
	sed -n "s/^AC_SUBST(\\[$2\\], *\\[\\([0-9]*:[0-9]*:[0-9]*\\)\\]).*/\\1/p" "$1"
}
pkgver=$(pkgver_of "$top_srcdir/configure.ac")
case $pkgver in
[0-9]*.[0-9]*.[0-9]*) ;;
*)
	echo "cannot read the package version from $top_srcdir/configure.ac"
	exit 99
	;;
esac
pkg_mm=${pkgver%.*}

# The release tags behind HEAD, oldest first, where top_srcdir is a git
# checkout of its own (not a tarball, nor a tarball unpacked in another
# repository).
git_ok=0
tags=
if command -v git >/dev/null 2>&1 &&
	gtop=$(git -C "$top_srcdir" rev-parse --show-toplevel 2>/dev/null) &&
	[ "$(cd "$gtop" && pwd -P)" = "$(cd "$top_srcdir" && pwd -P)" ]; then
	git_ok=1
	tags=$(git -C "$top_srcdir" tag -l --merged HEAD 'v[0-9]*.[0-9]*.[0-9]*' | sort -V)
fi

# parse_map < SCRIPT: the version script "NODE {", "global:", "sym;" ...,
# "local:", "*;", "} [PARENT];" (comments stripped).  Prints "sym@NODE"
# per symbol and "@NODE PARENT" per node, in the script's order; a
# pattern in a global section is an error.
parse_map() {
	sed 's,/\*.*\*/,,; /\/\*/,/\*\//d' | awk '
		{ gsub(/[ \t]+/, " "); sub(/^ /, ""); sub(/ $/, "") }
		$0 == "" { next }
		/^[A-Za-z_][A-Za-z0-9_.]* *\{$/ { node = $1; scope = ""; next }
		/^\} *[A-Za-z_][A-Za-z0-9_.]* *;$/ || /^\} *;$/ {
			parent = $0; sub(/^\} */, "", parent); sub(/ *;$/, "", parent)
			print "@" node " " parent; node = ""; next
		}
		$0 == "global:" || $0 == "local:" { scope = $0; next }
		node != "" && scope == "global:" {
			sym = $0; sub(/;$/, "", sym)
			if (sym ~ /[*?\[]/) { print "pattern:" sym; next }
			print sym "@" node; next
		}
		node != "" && scope == "local:" && $0 == "*;" { next }
		{ print "unparsed:" $0 }'
}

# The release of a node, "PREFIX_X.Y" -> "X.Y".
node_release() {
	echo "${1##*_}"
}

# mm_le A B: release A (X.Y) is B or older.
mm_le() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		split(a, x, "."); split(b, y, ".")
		exit !(x[1] + 0 < y[1] + 0 || (x[1] + 0 == y[1] + 0 && x[2] + 0 <= y[2] + 0))
	}'
}

# upto FILE X.Y: the lines "sym@NODE" of FILE whose node is release X.Y or
# older.
upto() {
	while IFS= read -r l; do
		if mm_le "$(node_release "${l#*@}")" "$2"; then
			echo "$l"
		fi
	done <"$1"
}

# check_lib NAME SO HEADER PREFIX MAP DEBIAN_SYMBOLS NODE_PREFIX LT_VARIABLE
check_lib() {
	name=$1 so=$2 header=$3 prefix=$4 map=$5 deb=$6 nprefix=$7 ltvar=$8
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

	parse_map <"$map" >"$d/map.raw"
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
	sed -n 's/^@//p' "$d/map.raw" >"$d/chain"
	cut -d' ' -f1 "$d/chain" | sort >"$d/nodes"
	if [ -n "$(cut -d@ -f1 "$d/listed" | uniq -d)" ]; then
		echo "$name: $map lists a symbol twice:"
		cut -d@ -f1 "$d/listed" | uniq -d
		status=1
	fi

	# One node per release, named for it, none newer than the package,
	# in order, each inheriting the one before, none empty.
	awk -v p="$nprefix" -v pkg="$pkg_mm" -v pkgver="$pkgver" -v map="$map" '
		function key(v, x) { split(v, x, "."); return x[1] * 1000000 + x[2] }
		{
			node = $1; parent = $2
			if (node !~ "^" p "_(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)$") {
				printf "%s: node %s is not named for a release (%s_MAJOR.MINOR)\n", map, node, p
				bad = 1; next
			}
			v = substr(node, length(p) + 2)
			if (key(v) > key(pkg)) {
				printf "%s: node %s is for release %s.0, newer than the package (%s, configure.ac)\n",
					map, node, v, pkgver
				bad = 1
			}
			if (prev == "" && parent != "") {
				printf "%s: the first node %s inherits %s\n", map, node, parent
				bad = 1
			}
			if (prev != "" && parent != prev) {
				printf "%s: node %s inherits \"%s\", not the node before it, %s\n",
					map, node, parent, prev
				bad = 1
			}
			if (prev != "" && key(v) <= key(pv)) {
				printf "%s: node %s comes after %s: nodes go oldest release first\n",
					map, node, prev
				bad = 1
			}
			prev = node; pv = v
		}
		END { exit bad }' "$d/chain" || status=1
	while IFS= read -r n; do
		if ! grep -q "@$n\$" "$d/listed"; then
			echo "$name: $map: node $n has no symbol"
			status=1
		fi
	done <"$d/nodes"

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

	# The soname: what -version-info C:R:A makes of it (libNAME.so.C-A),
	# and the first line of the Debian symbols file ("SONAME PACKAGE").
	lt=$(ltver_of "$top_srcdir/configure.ac" "$ltvar")
	if [ -z "$lt" ]; then
		echo "$name: no $ltvar in $top_srcdir/configure.ac"
		status=1
	elif command -v objdump >/dev/null 2>&1; then
		soname=$(objdump -p "$so" | awk '$1 == "SONAME" { print $2 }')
		c=${lt%%:*} a=${lt##*:}
		if [ "$soname" != "$name.so.$((c - a))" ]; then
			echo "$name: soname $soname, but $ltvar $lt makes $name.so.$((c - a))"
			status=1
		fi
		base=${soname%%.so.*} n=${soname##*.so.}
		case $base in
		*[0-9]) dpkg=$base-$n ;;
		*) dpkg=$base$n ;;
		esac
		if [ "$(sed -n '1s/^\([^ ]*\) \([^ ]*\) .*/\1 \2/p' "$deb")" != "$soname $dpkg" ]; then
			echo "$name: $deb does not begin with \"$soname $dpkg\""
			status=1
		fi
	fi

	# The Debian symbols file: " sym@NODE VERSION" and " NODE@NODE
	# VERSION", VERSION the release of NODE (a Debian revision or a ~
	# suffix aside).
	sed -n 's/^ \([^ ]*\) \([^ ~-]*\).*/\1 \2/p' "$deb" | sort >"$d/debian"
	{
		cat "$d/listed"
		sed 's/.*/&@&/' "$d/nodes"
	} | sed 's/^\(.*_\([0-9][0-9.]*\)\)$/\1 \2.0/' | sort >"$d/want-debian"
	if ! cmp -s "$d/want-debian" "$d/debian"; then
		echo "$name: $(basename "$map") and $deb differ (< listed, > debian):"
		diff "$d/want-debian" "$d/debian"
		status=1
	fi

	check_releases
}

# The release tags against the script and -version-info (variables of
# check_lib).
check_releases() {
	[ $git_ok -eq 1 ] || return 0
	rel_map=${map#"$top_srcdir"/}
	prev_tag='' prev_lt=''
	for t in $tags; do
		tv=${t#v}
		mm_le "${tv%.*}" "$pkg_mm" || {
			echo "$name: tag $t is newer than the package ($pkgver in configure.ac)"
			status=1
			continue
		}
		git -C "$top_srcdir" show "$t:./$rel_map" >"$d/tag.map" 2>/dev/null || continue
		git -C "$top_srcdir" show "$t:./configure.ac" >"$d/tag.ac" 2>/dev/null || continue
		t_lt=$(ltver_of "$d/tag.ac" "$ltvar")
		parse_map <"$d/tag.map" | grep -v -e '^@' -e '^pattern:' -e '^unparsed:' |
			sort >"$d/tag.listed"

		# Frozen: the symbols of the nodes up to this release, then and now.
		upto "$d/listed" "${tv%.*}" >"$d/now.upto"
		if ! cmp -s "$d/tag.listed" "$d/now.upto"; then
			echo "$name: $rel_map changed a node frozen by release $t" \
				"(< at $t, > now, nodes up to ${tv%.*}):"
			diff "$d/tag.listed" "$d/now.upto"
			status=1
		fi
		prev_tag=$t prev_lt=$t_lt
		cp "$d/tag.listed" "$d/prev.listed"
	done

	# Now: 0:0:0 before the first release; after one, its -version-info
	# (between releases), or the next one by the rules (the release commit).
	if [ -z "$prev_tag" ]; then
		if [ "$lt" != 0:0:0 ]; then
			echo "$name: $ltvar is $lt with no release tagged: 0:0:0 until the first"
			status=1
		fi
	elif [ -n "$prev_lt" ] && [ "$lt" != "$prev_lt" ]; then
		check_lt_step "$prev_tag" "$prev_lt" "HEAD" "$lt" "$d/prev.listed" \
			"$d/listed" || status=1
	fi
}

# check_lt_step TAG1 LT1 TAG2 LT2 LISTED1 LISTED2: libtool's rules from
# a release to the next (symbols are never removed: the nodes are
# frozen).
check_lt_step() {
	c1=$(echo "$2" | cut -d: -f1) r1=$(echo "$2" | cut -d: -f2) a1=$(echo "$2" | cut -d: -f3)
	c2=$(echo "$4" | cut -d: -f1) r2=$(echo "$4" | cut -d: -f2) a2=$(echo "$4" | cut -d: -f3)
	if cmp -s "$5" "$6"; then
		if [ "$c2" -ne "$c1" ] || [ "$a2" -ne "$a1" ] || [ "$r2" -lt "$r1" ]; then
			echo "$name: $ltvar $2 at $1, $4 at $3: no symbol added," \
				"so current and age stay ($c1:R:$a1, R >= $r1)"
			return 1
		fi
	elif [ "$4" != "$((c1 + 1)):0:$((a1 + 1))" ]; then
		echo "$name: $ltvar $2 at $1, $4 at $3: symbols added," \
			"so $((c1 + 1)):0:$((a1 + 1))"
		return 1
	fi
	return 0
}

check_lib libshmq "$top_builddir/shmq/.libs/libshmq.so" "$top_srcdir/include/shmq/shmq.h" \
	shmq_ "$top_srcdir/shmq/libshmq.sym" "$top_srcdir/debian/libshmq0.symbols" \
	SHMQ SHMQ_LT_VERSION
check_lib libkvstash "$top_builddir/client/.libs/libkvstash.so" \
	"$top_srcdir/include/kvstash/kvstash.h" kvs_ "$top_srcdir/client/libkvstash.sym" \
	"$top_srcdir/debian/libkvstash0.symbols" KVSTASH KVSTASH_LT_VERSION
# libkvspeer exists only where configure found UCX (m4/kvs_ucx.m4).
check_lib libkvspeer "$top_builddir/peer/.libs/libkvspeer.so" \
	"$top_srcdir/include/kvstash/peer.h" kvspeer_ "$top_srcdir/peer/libkvspeer.sym" \
	"$top_srcdir/debian/libkvspeer0.symbols" KVSPEER KVSPEER_LT_VERSION

if [ $status -eq 0 ] && [ $checked -eq 0 ]; then
	echo "no shared library built: skipped"
	exit 77
fi
exit $status
