#!/bin/sh
# make distcheck from a clean tree: make the tarball, then build it
# out of tree with its source read-only, run the whole suite there, install
# and uninstall it under a private prefix, and check that distclean leaves
# nothing.  Prints "suite: 1 passed, 0 failed" (or 0 passed, 1 failed) and
# exits with distcheck's status.  Arguments go to ./configure.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

jobs=${EMBER_JOBS:-2}

scripts/install-deps.sh

if [ -f Makefile ]; then
	echo "==> make distclean" >&2
	make distclean >/dev/null
fi
echo "==> autoreconf" >&2
autoreconf -fi
echo "==> configure" >&2
./configure -q "$@"
echo "==> make distcheck" >&2
if make -j"$jobs" distcheck; then
	echo "suite: 1 passed, 0 failed"
else
	echo "suite: 0 passed, 1 failed"
	exit 1
fi
