#!/bin/sh
# bench_checkpoint: what a checkpoint saves, and what writing one costs,
# each beside its baseline in the same run.
#
# usage: bench_checkpoint.sh --socket PATH --dir DIR [--mb N]
#            [--partitions N] [--checkpoints DIR]
#
# 1. Reading a checkpoint against recomputing: the word count's input
#    after its lower, split and regex stages (text source, map lower,
#    flat_map split, filter regex) is checkpointed once (eager, reliable);
#    then the word count (count_by_value) runs over the checkpoint and over
#    the stages recomputed from the text file.  Both counts must be equal.
# 2. Write throughput: an eager reliable checkpoint of the file's lines
#    (every partition file written and fsynced, the manifest last), in MB/s
#    of checkpoint bytes, against dd writing the same bytes (the
#    checkpoint's own files copied to one file, read from the page cache)
#    with conv=fsync, to the same file system; twice each, alternating,
#    the best of each.
#    --checkpoints names emberd's checkpoint.dir, where the files are read
#    for dd (as root; else dd writes that many bytes of the text file).
#
# The file is DIR/words/words.txt (N MB, default 200), made by
# bench/gen_words unless already there with that size.  Prints readable
# lines, then "result NAME VALUE" lines for bench/run.sh.

set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${EMBER_BUILDDIR:-$(pwd)}
python=${PYTHON3:-python3}

usage() {
	echo "usage: bench_checkpoint.sh --socket PATH --dir DIR [--mb N]" \
	    "[--partitions N] [--checkpoints DIR]" >&2
	exit 2
}

sock=
dir=
ckdir=
mb=200
parts=8
while [ $# -gt 0 ]; do
	case $1 in
	--socket) [ $# -ge 2 ] || usage; sock=$2; shift 2 ;;
	--dir) [ $# -ge 2 ] || usage; dir=$2; shift 2 ;;
	--mb) [ $# -ge 2 ] || usage; mb=$2; shift 2 ;;
	--partitions) [ $# -ge 2 ] || usage; parts=$2; shift 2 ;;
	--checkpoints) [ $# -ge 2 ] || usage; ckdir=$2; shift 2 ;;
	*) usage ;;
	esac
done
if [ -z "$sock" ] || [ -z "$dir" ]; then
	usage
fi

. "$srcdir/bench/lib.sh"

# A member of a JSON object on standard input.
member() {
	"$python" -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

ember() {
	"$builddir/ember" --socket "$sock" "$@"
}

file=$dir/words/words.txt
size=$(words_file "$file" "$mb")
echo "file: $file, $size bytes; ember: $parts partitions"

out=$dir/ckpt.tmp
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT

stages='{"map":"lower"},{"flat_map":{"split":" "}},{"filter":{"regex":"^[a-z]+$"}}'
printf '{"source":{"text":{"paths":["%s"]}},"partitions":%s,"ops":[%s]}\n' \
    "$file" "$parts" "$stages" >"$out/stages.json"
printf '{"source":{"text":{"paths":["%s"]}},"partitions":%s}\n' \
    "$file" "$parts" >"$out/lines.json"

# 1. The word count over the stages recomputed, then over a checkpoint.
t0=$(now)
ember run --action count_by_value "$out/stages.json" | sort >"$out/recompute"
t1=$(now)
t_re=$(elapsed "$t0" "$t1")
echo "word count, stages recomputed from the text: $t_re s"

t0=$(now)
id=$(ember run --action checkpoint "$out/stages.json")
t1=$(now)
t_make=$(elapsed "$t0" "$t1")
echo "checkpoint of the stages (eager, reliable): $t_make s, id $id"
printf '{"source":{"checkpoint":"%s"}}\n' "$id" >"$out/read.json"

t0=$(now)
ember run --action count_by_value "$out/read.json" | sort >"$out/read"
t1=$(now)
t_read=$(elapsed "$t0" "$t1")
echo "word count over the checkpoint: $t_read s"
if ! cmp -s "$out/recompute" "$out/read"; then
	echo "bench_checkpoint: the counts differ" >&2
	exit 1
fi
echo "counts equal: $(wc -l <"$out/read") distinct words"
ember checkpoint drop "$id"

# 2. Write throughput: a checkpoint of the lines, against dd with fsync,
# twice each, alternating; the best of each counts.
t_write=
t_dd=
for run in 1 2; do
	sync
	t0=$(now)
	id=$(ember run --action checkpoint "$out/lines.json")
	t1=$(now)
	t=$(elapsed "$t0" "$t1")
	t_write=$(awk -v a="$t" -v b="$t_write" \
	    'BEGIN { print (b == "" || a + 0 < b + 0) ? a : b }')
	bytes=$(ember status --json | "$python" -c '
import json, sys
for c in json.load(sys.stdin)["checkpoints"]:
    if c["id"] == sys.argv[1]:
        print(c["bytes"])' "$id")
	echo "checkpoint of the lines: $bytes bytes in $t s," \
	    "$(mbps "$bytes" "$t") MB/s"
	if [ "$run" = 1 ]; then
		# The same bytes in one file, for dd to read from the page
		# cache.
		src=
		if [ -n "$ckdir" ] && [ -r "$ckdir" ]; then
			src=$(find "$ckdir" -path "*/$id/part-*" 2>/dev/null |
			    sort)
		fi
		if [ -n "$src" ]; then
			# shellcheck disable=SC2086
			cat $src >"$out/dd.in"
		else
			head -c "$bytes" "$file" >"$out/dd.in"
		fi
	fi
	ember checkpoint drop "$id"
	cat "$out/dd.in" >/dev/null
	rm -f "$out/dd.out"
	sync
	t0=$(now)
	dd if="$out/dd.in" of="$out/dd.out" bs=1M conv=fsync 2>/dev/null
	t1=$(now)
	t=$(elapsed "$t0" "$t1")
	t_dd=$(awk -v a="$t" -v b="$t_dd" \
	    'BEGIN { print (b == "" || a + 0 < b + 0) ? a : b }')
	dd_bytes=$(stat -c %s "$out/dd.out")
	echo "dd conv=fsync of the same $dd_bytes bytes: $t s," \
	    "$(mbps "$dd_bytes" "$t") MB/s"
done

echo "result ck_mb $((size / 1000000))"
echo "result ck_recompute_s $t_re"
echo "result ck_make_s $t_make"
echo "result ck_read_s $t_read"
echo "result ck_read_speedup $(ratio "$t_re" "$t_read")"
echo "result ck_write_bytes $bytes"
echo "result ck_write_mbs $(mbps "$bytes" "$t_write")"
echo "result ck_dd_mbs $(mbps "$dd_bytes" "$t_dd")"
echo "result ck_write_ratio $(ratio "$(mbps "$bytes" "$t_write")" \
    "$(mbps "$dd_bytes" "$t_dd")")"
