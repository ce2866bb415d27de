#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The Python binding's test suite (python/tests) against this build tree:
# its libkvstash and kvstashd, a real daemon per test.  Skipped (77) when no
# python3 with pytest is found (Debian: python3-pytest), or when the library
# is built with sanitizers (their runtime cannot be loaded into python3).

top_builddir=${top_builddir:-$(pwd)}
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
lib=$top_builddir/client/.libs/libkvstash.so.0
daemon=$top_builddir/sidecar/kvstashd
for f in "$lib" "$daemon"; do
	if [ ! -e "$f" ]; then
		echo "$f not built: skipped"
		exit 77
	fi
done
if command -v ldd >/dev/null 2>&1 && ldd "$lib" | grep -q 'lib[at]san'; then
	echo "libkvstash is built with sanitizers: skipped"
	exit 77
fi

# The first python3 that has pytest (PYTHON as chosen by configure, then the
# one on PATH, then the system's: a user's pyenv may lack Debian's modules).
py=
for cand in "${PYTHON:-}" python3 /usr/bin/python3; do
	[ -n "$cand" ] && [ "$cand" != : ] || continue
	if "$cand" -c 'import pytest' >/dev/null 2>&1; then
		py=$cand
		break
	fi
done
if [ -z "$py" ]; then
	echo "no python3 with pytest (apt-get install python3-pytest): skipped"
	exit 77
fi

KVSTASH_LIB=$lib KVSTASHD=$daemon
export KVSTASH_LIB KVSTASHD
# Whether kvstashd has the peer service (libkvspeer, --with-ucx): its tests skip without.
if grep -q '^#define HAVE_UCX 1' "$top_builddir/config.h" 2>/dev/null; then
	KVSTASH_HAVE_PEER=1
else
	KVSTASH_HAVE_PEER=0
fi
export KVSTASH_HAVE_PEER
# -B and no cache: never write into the source tree (it may be read-only).
cd "$top_srcdir" || exit 1
exec "$py" -B -m pytest -q -p no:cacheprovider python/tests
