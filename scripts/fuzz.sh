#!/bin/sh
# Build the fuzzing targets from a clean tree (./configure --enable-fuzzing:
# clang, libFuzzer, ASan and UBSan) and run each on its corpus for
# FUZZ_TIME seconds (default 60).  A crash, a leak or a slow input fails
# its target; the input is left in fuzz-corpus/.  Prints "suite: N passed,
# M failed" (one per target) and exits non-zero if one failed.
# Arguments go to ./configure.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

jobs=${EMBER_JOBS:-2}
time=${FUZZ_TIME:-60}
targets="tests/fuzz/fuzz_plan tests/fuzz/fuzz_request tests/fuzz/fuzz_result
    tests/fuzz/fuzz_batch tests/fuzz/fuzz_shuffle_file tests/fuzz/fuzz_bindex
    tests/fuzz/fuzz_hmsg tests/fuzz/fuzz_taskdesc"

scripts/install-deps.sh --fuzzing

if [ -f Makefile ]; then
	echo "==> make distclean" >&2
	make distclean >/dev/null
fi
echo "==> autoreconf" >&2
autoreconf -fi
echo "==> configure --enable-fuzzing" >&2
./configure -q --enable-fuzzing "$@"
echo "==> make $targets" >&2
# shellcheck disable=SC2086
make -j"$jobs" $targets

passed=0
failed=0
for t in $targets; do
	if make fuzz FUZZ_TARGETS="$t" FUZZ_TIME="$time"; then
		passed=$((passed + 1))
	else
		echo "==> $t failed: see fuzz-corpus/ for the input" >&2
		failed=$((failed + 1))
	fi
done
echo "suite: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
