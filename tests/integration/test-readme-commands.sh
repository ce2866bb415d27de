#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The README's two commands exit with the status they promise.
#
# scripts/run-demo (the main job) runs for real against this build tree
# (SKIP_BUILD=1: nothing installed, configured or built): it exits 0 after
# a good run, with kvstashd stopped and its temporary directory gone (its
# EXIT trap once failed under set -e and made every good run exit 1), and
# with the example engine's status when the engine fails, cleaning up all
# the same.
#
# scripts/run-tests cannot run for real here: it runs `make check`, which
# runs this test.  (.ci/run runs it for real as its first step, so a run
# that passes but exits non-zero fails CI.)  Here the script itself,
# copied unchanged from the source tree, runs in a scratch tree whose
# configure writes a Makefile with one trivial test, once passing, once
# failing: run-tests must exit 0, then 1 with the failing test's log
# shown, and pass its arguments to configure.

: "${top_builddir:?}" "${top_srcdir:?}"
for f in sidecar/kvstashd examples/kvstash-example-engine; do
	if [ ! -x "$top_builddir/$f" ]; then
		echo "$top_builddir/$f not built: skipped"
		exit 77
	fi
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvstash-readme.XXXXXX") || exit 1
cleanup() {
	[ -n "${KVSTASH_TEST_KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

fail() {
	echo "FAIL: $*"
	for f in "$dir"/*.out; do
		[ -f "$f" ] || continue
		echo "--- $f"
		cat "$f"
	done
	exit 1
}

# demo OUT [ARGS]: run scripts/run-demo into OUT; its exit status.
demo() {
	out=$1
	shift
	SKIP_BUILD=1 BUILD_DIR=$top_builddir "$top_srcdir/scripts/run-demo" "$@" >"$out" 2>&1
}

# gone OUT: the kvstashd and the directory a demo named in OUT are gone.
gone() {
	line=$(grep '^== kvstashd started (pid ' "$1") || fail "$1: kvstashd did not start"
	pid=$(echo "$line" | sed 's/^== kvstashd started (pid \([0-9]*\), .*/\1/')
	run=$(echo "$line" | sed 's/.*, socket \(.*\)\/kvstash\.sock)$/\1/')
	case $run in /tmp/kvstash-demo.*) ;; *) fail "$1: no run directory in: $line" ;; esac
	[ ! -e "$run" ] || fail "$1: $run was left behind"
	# The demo reaped its kvstashd; a process with that pid now is another one.
	if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$run"; then
		fail "$1: kvstashd $pid still runs"
	fi
}

# ---- scripts/run-demo -----------------------------------------------------

demo "$dir/demo.out"
st=$?
[ "$st" = 0 ] || fail "scripts/run-demo exited with $st after its job"
grep -q '^== kvstashd stopped cleanly' "$dir/demo.out" || fail "run-demo: no clean stop"
gone "$dir/demo.out"
echo "ok - scripts/run-demo: exit status 0, kvstashd stopped, its directory removed"

demo "$dir/demo-bad.out" --no-such-option
st=$?
[ "$st" = 2 ] || fail "run-demo with a failing engine exited with $st, want the engine's 2"
gone "$dir/demo-bad.out"
rm -f "$dir/demo.out" "$dir/demo-bad.out"
echo "ok - scripts/run-demo: a failing engine's status 2, and the same cleanup"

# ---- scripts/run-tests, in a scratch tree ------------------------------------

fake=$dir/tree
mkdir -p "$fake/scripts" || exit 1
cp "$top_srcdir/scripts/run-tests" "$fake/scripts/run-tests" || exit 1
cp "$top_srcdir/scripts/show-failures" "$fake/scripts/show-failures" || exit 1
printf '#!/bin/sh\nexit 0\n' >"$fake/scripts/install-deps"
printf '#!/bin/sh\necho "bootstrap must not run: configure is newer" >&2\nexit 1\n' \
	>"$fake/bootstrap"
# configure: records its arguments and writes a Makefile whose one test
# passes or fails as FAKE_CHECK says, leaving a .log and .trs as automake's.
{
	echo '#!/bin/sh'
	echo 'echo "$*" >configure.args'
	echo 'printf "all:\n\t@:\ncheck:\n\t@mkdir -p tests; echo \"output of the fake test\" >tests/fake.log; echo \":test-result: \$\$FAKE_CHECK\" >tests/fake.trs; echo \"\$\$FAKE_CHECK: tests/fake\"; test \"\$\$FAKE_CHECK\" = PASS\n" >Makefile'
} >"$fake/configure"
chmod +x "$fake/scripts/run-tests" "$fake/scripts/show-failures" "$fake/scripts/install-deps" "$fake/bootstrap" \
	"$fake/configure"
: >"$fake/configure.ac"
touch -t 200001010000 "$fake/configure.ac"

# Not the jobserver of the make that runs this test.
unset MAKEFLAGS MFLAGS MAKELEVEL

FAKE_CHECK=PASS BUILD_DIR=b "$fake/scripts/run-tests" --enable-werror >"$dir/pass.out" 2>&1
st=$?
[ "$st" = 0 ] || fail "run-tests exited with $st when make check passed"
[ "$(cat "$fake/b/configure.args")" = "-q --enable-werror" ] ||
	fail "configure got: $(cat "$fake/b/configure.args")"
grep -q '^PASS: tests/fake' "$dir/pass.out" || fail "make check did not run"

FAKE_CHECK=FAIL BUILD_DIR=b "$fake/scripts/run-tests" >"$dir/fail.out" 2>&1
st=$?
[ "$st" = 1 ] || fail "run-tests exited with $st when make check failed, want 1"
grep -q '^======== ./tests/fake.log' "$dir/fail.out" &&
	grep -q '^output of the fake test' "$dir/fail.out" || fail "the failing test's log was not shown"
echo "ok - scripts/run-tests: exit status 0 when make check passes, 1 (with the log) when it fails"
exit 0
