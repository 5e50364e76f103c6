#!/bin/bash
# Runs every test of cudasnap twice: in a normal build and in an
# AddressSanitizer + UndefinedBehaviorSanitizer build; then builds it with
# clang too (where clang is installed; RUN_ALL_CLANG=0 leaves it out) and
# runs the unit tests and fuzz replays there. Ends with the line
# "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
tests/deps.sh || exit 2

passed=0 failed=0
run_build() { # dir, meson options...
	local dir=$1; shift
	# The logs live in the build directory, which git ignores, so that a run
	# leaves nothing to commit at the top of the tree. The directory has to
	# exist before meson setup runs, since the setup log is written into it.
	local log=$dir/run-all
	mkdir -p "$dir" || { failed=$((failed + 1)); return; }
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" "$@" >"$log.setup.log" 2>&1 || { cat "$log.setup.log"; failed=$((failed + 1)); return; }
	fi
	if ! ninja -C "$dir" >"$log.build.log" 2>&1; then
		cat "$log.build.log"; failed=$((failed + 1)); return
	fi
	local args=("${MESON_TEST_ARGS[@]}")
	# TEST_ONLY: a pattern of the test names to run here (when none are given)
	if [ -n "${TEST_ONLY:-}" ] && [ ${#args[@]} -eq 0 ]; then
		mapfile -t args < <(meson test -C "$dir" --list 2>/dev/null | sed 's|^.* / ||' | grep -E "$TEST_ONLY")
	fi
	meson test -C "$dir" --print-errorlogs --num-processes 2 "${args[@]}" 2>&1 | tee "$log.test.log"
	local ok fail
	ok=$(awk '/^Ok:/ {print $2}' "$log.test.log"); fail=0
	for k in Fail: Timeout: "Unexpected Pass:"; do
		v=$(grep "^$k" "$log.test.log" | awk '{print $NF}')
		fail=$((fail + ${v:-0}))
	done
	[ -n "$ok" ] || { echo "no test summary from $dir"; fail=$((fail + 1)); ok=0; }
	passed=$((passed + ok)); failed=$((failed + fail))
}

MESON_TEST_ARGS=("$@")
run_build build -Dtests=true
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
	run_build build-asan -Dtests=true -Db_sanitize=address,undefined -Db_lundef=false
if [ "${RUN_ALL_CLANG:-1}" != 0 ] && command -v clang >/dev/null 2>&1; then
	CC=clang TEST_ONLY='^(unit-|fuzz-replay-)' run_build build-clang -Dtests=true
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
