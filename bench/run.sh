#!/bin/sh
# Run ember's benchmarks against a private emberd and print one summary.
#
# Run from the build directory (`make bench` does); EMBER_BUILDDIR overrides.
# Every figure is printed beside a baseline measured in the same run.

set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${EMBER_BUILDDIR:-$(pwd)}
python=${PYTHON3:-python3}

cd "$builddir"
if [ ! -x ./emberd ] || [ ! -x ./ember-worker ] ||
    [ ! -x bench/bench_tasks ] || [ ! -x bench/bench_stream ]; then
	make bench/bench_tasks bench/bench_stream emberd ember-worker
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-bench.XXXXXX")
pid=

# Stop emberd (SIGTERM, then wait) and remove the temporary files.
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

sock=$dir/e.sock
./emberd -f --set "daemon.socket=$sock" --set daemon.log_level=warn \
    2>"$dir/emberd.log" &
pid=$!

# Wait for the socket, up to 10 seconds.
i=0
while [ ! -S "$sock" ]; do
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$dir/emberd.log" >&2
		echo "run.sh: emberd exited before listening" >&2
		exit 1
	fi
	i=$((i + 1))
	if [ "$i" -gt 100 ]; then
		echo "run.sh: no socket at $sock after 10 seconds" >&2
		exit 1
	fi
	sleep 0.1
done

# Run a benchmark named $1 (the command follows), showing its output and
# keeping it in $dir/$1.out; stop the whole run if it fails.
run() {
	name=$1
	shift
	echo "== $name"
	{
		rc=0
		"$@" || rc=$?
		echo "$rc" >"$dir/$name.rc"
	} | tee "$dir/$name.out"
	if [ "$(cat "$dir/$name.rc")" != 0 ]; then
		echo "run.sh: $name failed" >&2
		exit 1
	fi
}

run bench_tasks bench/bench_tasks --socket "$sock"
run bench_pool "$python" "$srcdir/bench/bench_pool.py"
run bench_stream bench/bench_stream --socket "$sock" --dir "$dir"

if [ -s "$dir/emberd.log" ]; then
	echo "== emberd log"
	cat "$dir/emberd.log"
fi

# Print the figure named $1 from the benchmarks' "result" lines.
result() {
	awk -v k="$1" '$1 == "result" && $2 == k { v = $3 } END {
		if (v == "") exit 1; print v }' "$dir"/*.out
}

task=$(result task_us)
pingpong=$(result pingpong_us)
pool=$(result pool_us)
lmed=$(result latency_median_us)
lp99=$(result latency_p99_us)
pp99=$(result pingpong_p99_us)
sgbs=$(result stream_gbs)
smrec=$(result stream_mrecs)
rgbs=$(result relay_gbs)
sratio=$(result stream_ratio)

# Say whether a comparison holds: met or MISSED.
verdict() {
	awk "BEGIN { if ($1) print \"met\"; else print \"MISSED\" }"
}

pratio=$(awk -v a="$task" -v b="$pool" 'BEGIN { printf "%.2f", a / b }')

echo
echo "== summary"
printf 'task overhead: ember count %s us/task | raw ping-pong %s us/rt | ' \
    "$task" "$pingpong"
printf 'Python Pool %s us/task | ember/Pool %s  [target < 1: %s]\n' \
    "$pool" "$pratio" "$(verdict "$task < $pool")"
printf 'latency: median %s us, p99 %s us (ping-pong round trip %s us, ' \
    "$lmed" "$lp99" "$pingpong"
printf 'its p99 %s us)  ' "$pp99"
printf '[target median < 150: %s]\n' "$(verdict "$lmed < 150")"
printf 'stream: ember %s GB/s (%s Mrec/s) | raw relay %s GB/s | ' \
    "$sgbs" "$smrec" "$rgbs"
printf 'ratio %s  [target >= 0.5: %s]\n' "$sratio" \
    "$(verdict "$sratio >= 0.5")"
