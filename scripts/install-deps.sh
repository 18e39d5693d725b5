#!/bin/sh
# Install the Debian packages ember needs to build and test, when missing.
# Runs apt-get as root, through sudo otherwise; without either it prints the
# command to run and fails.  With --fuzzing, also clang and its libFuzzer
# runtime, for ./configure --enable-fuzzing (scripts/fuzz.sh).
set -eu

fuzzing=no
case "${1:-}" in
--fuzzing) fuzzing=yes ;;
"") ;;
*) echo "usage: install-deps.sh [--fuzzing]" >&2; exit 2 ;;
esac

PACKAGES="build-essential autoconf automake libtool pkg-config libevent-dev
libjansson-dev libinih-dev uuid-dev libpcre2-dev libelf-dev libunistring-dev
libsystemd-dev zlib1g-dev check python3 procps util-linux strace libpython3-dev
python3-cloudpickle"

if [ "$fuzzing" = yes ]; then
	# libFuzzer is in the runtime package of clang's own version.
	llvm=$(apt-cache show clang 2>/dev/null |
	    sed -n 's/^Depends:.*clang-\([0-9][0-9]*\).*/\1/p' | head -1)
	PACKAGES="$PACKAGES clang libclang-rt-${llvm:-14}-dev"
fi

# What some tests use when it is there, and skip (saying so) or replace
# when it is not: promtool (prometheus) checks /metrics, chromium loads
# the status page, mypy checks the Python client's type hints, Java runs
# the Spark cluster of test_spark.py (with PySpark, below).  A failure to
# install them never fails this script.
OPTIONAL="prometheus chromium mypy openjdk-17-jre-headless"

# What the build needs, by command and by pkg-config module, for systems
# without dpkg (libunistring has no .pc file: its header is looked for).
TOOLS="cc make autoreconf automake libtoolize pkg-config python3"
MODULES="libevent jansson inih uuid libpcre2-8 libelf zlib check python3-embed"
[ "$fuzzing" = no ] || TOOLS="$TOOLS clang"

# The Python client pickles functions with cloudpickle, and the workers
# unpickle them with Debian's: the python3 on PATH (a pyenv's, say, not
# Debian's) gets the same version from the package index if it lacks it.
client_cloudpickle()
{
	python3 -c 'import cloudpickle' 2>/dev/null && return 0
	v=$(dpkg-query -W -f='${Version}' python3-cloudpickle 2>/dev/null |
	    sed 's/-.*//')
	echo "install-deps: cloudpickle${v:+ $v} for $(command -v python3)" >&2
	python3 -m pip install -q "cloudpickle${v:+==$v}" >/dev/null 2>&1 ||
	    echo "install-deps: cloudpickle did not install for" \
	        "$(command -v python3); the Python client cannot ship" \
	        "functions" >&2
}

# ember submit runs plans on Spark (docs/spark.md): test_spark.py starts
# a standalone cluster from PySpark's spark-class, so the python3 on PATH
# gets PySpark when Java is there.  Without either the tests skip, saying
# which is missing.
client_pyspark()
{
	python3 -c 'import pyspark' 2>/dev/null && return 0
	command -v java >/dev/null 2>&1 || return 0
	echo "install-deps: pyspark for $(command -v python3)" >&2
	python3 -m pip install -q "pyspark>=3.5" >/dev/null 2>&1 ||
	    echo "install-deps: pyspark did not install for" \
	        "$(command -v python3); test_spark.py skips" >&2
}

# bench/bench_shuffle.py measures the shuffle against DuckDB: the python3
# on PATH gets it from the package index (Debian has no package of it).
# Without it the benchmark says so and skips DuckDB's figures.
bench_duckdb()
{
	python3 -c 'import duckdb' 2>/dev/null && return 0
	echo "install-deps: duckdb for $(command -v python3), for bench/" >&2
	python3 -m pip install -q duckdb >/dev/null 2>&1 ||
	    echo "install-deps: duckdb did not install for" \
	        "$(command -v python3); bench_shuffle.py skips it" >&2
}

# Print the packages of PACKAGES that are not installed.
missing_packages()
{
	for p in ${1:-$PACKAGES}; do
		status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
		case "$status" in
		*" installed") ;;
		*) printf '%s\n' "$p" ;;
		esac
	done
}

# Print what of TOOLS and MODULES is missing.
missing_tools()
{
	for t in $TOOLS; do
		command -v "$t" >/dev/null 2>&1 || printf '%s\n' "$t"
	done
	command -v pkg-config >/dev/null 2>&1 || return 0
	for m in $MODULES; do
		pkg-config --exists "$m" 2>/dev/null || printf '%s\n' "$m"
	done
	printf '#include <unicase.h>\n' | cc -E -x c - >/dev/null 2>&1 ||
	    printf '%s\n' libunistring
}

if ! command -v dpkg-query >/dev/null 2>&1; then
	missing=$(missing_tools | tr '\n' ' ' | sed 's/ *$//')
	if [ -z "$missing" ]; then
		echo "install-deps: not a Debian system; the tools and" \
		    "libraries are there, going on" >&2
		exit 0
	fi
	echo "install-deps: not a Debian system, and missing: $missing" >&2
	echo "install-deps: install them (Debian names: $(echo $PACKAGES))" >&2
	exit 1
fi

missing=$(missing_packages | tr '\n' ' ' | sed 's/ *$//')
optional=$(missing_packages "$OPTIONAL" | tr '\n' ' ' | sed 's/ *$//')
if [ -z "$missing" ] && [ -z "$optional" ]; then
	client_cloudpickle
	client_pyspark
	bench_duckdb
	exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
	as_root=""
elif command -v sudo >/dev/null 2>&1; then
	as_root="sudo"
elif [ -z "$missing" ]; then
	echo "install-deps: not installed, for some tests: $optional" >&2
	exit 0
else
	echo "install-deps: missing packages: $missing" >&2
	echo "install-deps: as root, run:" >&2
	echo "  apt-get update && apt-get install -y $missing" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
$as_root env DEBIAN_FRONTEND=noninteractive apt-get -qq update >/dev/null ||
    [ -z "$missing" ]
if [ -n "$missing" ]; then
	echo "install-deps: installing $missing" >&2
	# shellcheck disable=SC2086
	$as_root env DEBIAN_FRONTEND=noninteractive apt-get -qq install -y \
	    --no-install-recommends $missing >/dev/null
fi
if [ -n "$optional" ]; then
	echo "install-deps: installing, for some tests: $optional" >&2
	for p in $optional; do
		$as_root env DEBIAN_FRONTEND=noninteractive apt-get -qq \
		    install -y --no-install-recommends "$p" >/dev/null 2>&1 ||
		    echo "install-deps: $p did not install; the tests" \
		        "that use it skip or fall back" >&2
	done
fi
client_cloudpickle
client_pyspark
bench_duckdb
echo "install-deps: done" >&2
