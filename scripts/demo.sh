#!/bin/sh
# Build ember if needed, start emberd on a private socket under run/, and run
# three real jobs through the ember CLI.  emberd is left running afterwards.
# Running the demo again restarts that emberd cleanly.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

run="$top/run"
sock="$run/emberd.sock"
log="$run/emberd.log"
pidfile="$run/emberd.pid"

say()
{
	printf '\n==> %s\n' "$*"
}

# Configure if needed, then bring the build up to date.
build()
{
	if [ ! -f Makefile ]; then
		say "configuring"
		autoreconf -fi
		./configure -q
	fi
	say "building"
	make -s -j2 >/dev/null
}

# The pid of the emberd answering on $sock, or nothing.
running_pid()
{
	./ember --socket "$sock" status --json 2>/dev/null |
	    python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])' \
	    2>/dev/null || true
}

# Stop an emberd left on $sock by an earlier demo, waiting for it to exit.
stop_previous()
{
	pid=$(running_pid)
	[ -n "$pid" ] || return 0
	say "stopping the emberd left by an earlier run (pid $pid)"
	kill "$pid" 2>/dev/null || return 0
	i=0
	while kill -0 "$pid" 2>/dev/null; do
		i=$((i + 1))
		if [ "$i" -gt 150 ]; then
			echo "emberd $pid did not exit; killing it" >&2
			kill -9 "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
}

# Start emberd in the background and wait until it answers.
start_emberd()
{
	say "starting emberd on $sock (log: run/emberd.log)"
	setsid ./emberd -f -c conf/ember.conf --set "daemon.socket=$sock" \
	    --set "checkpoint.dir=$run/checkpoints" \
	    </dev/null >"$log" 2>&1 &
	i=0
	until ./ember --socket "$sock" status >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -gt 100 ]; then
			echo "emberd did not start; its log:" >&2
			tail -n 20 "$log" >&2
			exit 1
		fi
		sleep 0.1
	done
	running_pid >"$pidfile"
}

# Show a plan, indented.
show_plan()
{
	printf '%s\n' "$1" | sed 's/^/    /'
}

# Show a plan, then run it with the given ember run options.
run_plan()
{
	plan=$1
	shift
	show_plan "$plan"
	printf '%s\n' "$plan" | ./ember --socket "$sock" run "$@" -
}

scripts/install-deps.sh
build
mkdir -p "$run"
stop_previous
start_emberd

say "job 1: word count over ember's own documentation, the top 15 words"
echo "    (a text source globbing the corpus; lower-case, split into words,"
echo "     keep the words, count each in the workers, merged by emberd)"
# The corpus goes where any user can read it: as root, emberd runs root's
# jobs as workers.root_user (nobody), never as root.
corpus=$(mktemp -d "${TMPDIR:-/tmp}/ember-demo.XXXXXX")
trap 'rm -rf "$corpus"' EXIT
cp docs/*.md README.md HACKING "$corpus"/
chmod 755 "$corpus"
chmod 644 "$corpus"/*
plan="{\"source\": {\"text\": {\"paths\": [\"$corpus/*\"]}},
 \"partitions\": 4,
 \"ops\": [{\"map\": \"lower\"}, {\"flat_map\": {\"split\": \" \"}},
         {\"filter\": {\"regex\": \"^[a-z]{3,}$\"}}]}"
show_plan "$plan"
printf '%s\n' "$plan" |
    ./ember --socket "$sock" run --action count_by_value - | head -n 15

say "job 2: the sum of the numbers from 0 to 999,999, reduced in 8 partitions"
run_plan '{"source": {"range": {"start": 0, "end": 1000000}},
 "partitions": 8}' --action reduce --option fn=sum

say "job 3: count the numbers from 0 to 10,000,000 in 8 partitions"
start=$(date +%s.%N)
run_plan '{"source": {"range": {"start": 0, "end": 10000000}},
 "partitions": 8}' --count
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { printf "    (%.2f s)\n", e - s }'

say "job 4: the same words counted through the shuffle, sorted by word"
echo "    (key each word, reduce_by_key count in the map tasks and after the"
echo "     shuffle, then sort_by the word: the first 10 of one sorted stream)"
plan="{\"source\": {\"text\": {\"paths\": [\"$corpus/*\"]}},
 \"partitions\": 4,
 \"ops\": [{\"map\": \"lower\"}, {\"flat_map\": {\"split\": \" \"}},
         {\"filter\": {\"regex\": \"^[a-z]{3,}$\"}}, {\"key_by\": {}},
         {\"reduce_by_key\": {\"fn\": \"count\"}},
         {\"sort_by\": {\"partitions\": 2}}]}"
show_plan "$plan"
printf '%s\n' "$plan" |
    ./ember --socket "$sock" run --action collect - | head -n 10

say "ember status"
./ember --socket "$sock" status

pid=$(cat "$pidfile")
say "emberd is still running"
cat <<MSG
    pid:     $pid
    socket:  $sock
    log:     $log
Try:  ./ember --socket $sock run --count PLAN.json
Stop it with:  kill $pid   (or leave it; running the demo again restarts it)
MSG
