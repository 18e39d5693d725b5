#!/bin/sh
# Build ember from a clean tree and run every test: the unit tests and the
# integration tests against the real binaries.  Exits with the suite's status.
# Arguments go to ./configure (scripts/test.sh --enable-sanitizers).
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

jobs=${EMBER_JOBS:-2}

scripts/install-deps.sh

echo "==> autoreconf" >&2
autoreconf -fi
echo "==> configure" >&2
./configure -q "$@"
echo "==> make" >&2
make -j"$jobs"
echo "==> make check" >&2
status=0
make -j"$jobs" check VERBOSE=1 || status=$?
if [ "$status" -eq 0 ]; then
	echo "==> all tests passed" >&2
else
	echo "==> tests failed (exit $status)" >&2
fi
exit "$status"
