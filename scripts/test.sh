#!/bin/sh
# Build ember from a clean tree (make distclean first if it was built) and
# run every test: the unit tests and the integration tests against the real
# binaries.  Exits with the suite's status.
# Arguments go to ./configure (scripts/test.sh --enable-sanitizers).
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

jobs=${EMBER_JOBS:-2}

scripts/install-deps.sh

# A tree configured before, maybe with other flags, starts again from
# nothing: objects built without the sanitizers must not be linked with
# ones built with them.
if [ -f Makefile ]; then
	echo "==> make distclean" >&2
	make distclean >/dev/null
fi
echo "==> autoreconf" >&2
autoreconf -fi
echo "==> configure" >&2
./configure -q "$@"
echo "==> make" >&2
make -j"$jobs"
echo "==> make check" >&2
status=0
make -j"$jobs" check VERBOSE=1 || status=$?

# One closing line for the whole suite, summed over every test program's
# log: Check's "Checks: N, Failures: F, Errors: E" and the integration
# runner's "N passed, M failed" (and "K skipped", apart: a skipped test
# neither passed nor failed).
cat tests/unit/*.log tests/integration/*.log 2>/dev/null | awk '
	/Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+/ {
		line = $0
		sub(/.*Checks: /, "", line)
		split(line, f, /[^0-9]+/)
		passed += f[1] - f[2] - f[3]; failed += f[2] + f[3]
	}
	/^[0-9]+ passed, [0-9]+ failed$/ { passed += $1; failed += $3 }
	/^[0-9]+ skipped$/ { skipped += $1 }
	END {
		if (skipped > 0)
			printf "suite: %d skipped\n", skipped
		printf "suite: %d passed, %d failed\n", passed, failed
	}'
if [ "$status" -eq 0 ]; then
	echo "==> all tests passed" >&2
else
	echo "==> tests failed (exit $status)" >&2
fi
exit "$status"
