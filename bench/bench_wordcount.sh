#!/bin/sh
# bench_wordcount: ember's word count and regex filter over a large text
# file, beside the usual tools run on the same file in the same run.
#
# usage: bench_wordcount.sh --socket PATH --dir DIR [--mb N]
#            [--partitions N] [wordcount] [regex]
#
# The file (DIR/words/words.txt, N MB, default 500) is written by
# bench/gen_words unless it is already there with that size, so several
# runs in one directory share it.  Every result is checked: the word counts
# of the three programs must be equal word for word, and ember's count of
# matching lines must equal grep's.  Prints readable lines, then "result
# NAME VALUE" lines for bench/run.sh.

set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${EMBER_BUILDDIR:-$(pwd)}
python=${PYTHON3:-python3}
regex='\bqu[a-z]+k\b'

usage() {
	echo "usage: bench_wordcount.sh --socket PATH --dir DIR [--mb N]" \
	    "[--partitions N] [wordcount] [regex]" >&2
	exit 2
}

sock=
dir=
mb=500
parts=8
do_wc=
do_re=
while [ $# -gt 0 ]; do
	case $1 in
	--socket) [ $# -ge 2 ] || usage; sock=$2; shift 2 ;;
	--dir) [ $# -ge 2 ] || usage; dir=$2; shift 2 ;;
	--mb) [ $# -ge 2 ] || usage; mb=$2; shift 2 ;;
	--partitions) [ $# -ge 2 ] || usage; parts=$2; shift 2 ;;
	wordcount) do_wc=1; shift ;;
	regex) do_re=1; shift ;;
	*) usage ;;
	esac
done
if [ -z "$sock" ] || [ -z "$dir" ]; then
	usage
fi
if [ -z "$do_wc" ] && [ -z "$do_re" ]; then
	do_wc=1
	do_re=1
fi

. "$srcdir/bench/lib.sh"

file=$dir/words/words.txt
size=$(words_file "$file" "$mb")
workers=$("$builddir/ember" --socket "$sock" status --json |
    "$python" -c 'import json, sys; print(json.load(sys.stdin)["workers_max"])')
echo "file: $file, $size bytes; ember: $parts partitions, workers.max" \
    "$workers"

out=$dir/wc.tmp
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT

if [ -n "$do_wc" ]; then
	printf '{"source":{"text":{"paths":["%s"]}},"partitions":%s,%s}\n' \
	    "$file" "$parts" '"ops":[{"flat_map":{"split":" "}}]' \
	    >"$out/wc.json"

	# Five runs, each result the same as the first.
	times=
	for i in 1 2 3 4 5; do
		t0=$(now)
		"$builddir/ember" --socket "$sock" run --action count_by_value \
		    "$out/wc.json" >"$out/ember.run"
		t1=$(now)
		t=$(elapsed "$t0" "$t1")
		echo "ember text + flat_map split + count_by_value, run $i:" \
		    "$t s, $(mbps "$size" "$t") MB/s"
		times="$times $t"
		if [ "$i" = 1 ]; then
			LC_ALL=C sort "$out/ember.run" >"$out/ember.raw"
		elif ! LC_ALL=C sort "$out/ember.run" |
		    cmp -s - "$out/ember.raw"; then
			echo "bench_wordcount: ember run $i counted otherwise" >&2
			exit 1
		fi
	done
	# shellcheck disable=SC2086
	set -- $(spread $times)
	wc_ember=$1
	wc_ember_min=$2
	wc_ember_max=$3
	echo "ember: median $wc_ember s ($(mbps "$size" "$wc_ember") MB/s)," \
	    "min $wc_ember_min s, max $wc_ember_max s"

	t0=$(now)
	LC_ALL=C tr -s ' ' '\n' <"$file" |
	    LC_ALL=C sort -S 1G --parallel=2 -T "$out" |
	    LC_ALL=C uniq -c >"$out/sort.raw"
	t1=$(now)
	wc_sort=$(elapsed "$t0" "$t1")
	echo "tr | sort -S 1G --parallel=2 | uniq -c: $wc_sort s," \
	    "$(mbps "$size" "$wc_sort") MB/s"

	t0=$(now)
	"$python" "$srcdir/bench/wordcount.py" "$file" >"$out/counter.raw"
	t1=$(now)
	wc_counter=$(elapsed "$t0" "$t1")
	echo "python collections.Counter: $wc_counter s," \
	    "$(mbps "$size" "$wc_counter") MB/s"

	# The same "count word" lines, largest count first, ties by word.
	for k in ember sort counter; do
		awk '{ print $1, $2 }' "$out/$k.raw" |
		    LC_ALL=C sort -k1,1nr -k2,2 >"$out/$k.txt"
	done
	if ! cmp -s "$out/ember.txt" "$out/sort.txt" ||
	    ! cmp -s "$out/ember.txt" "$out/counter.txt"; then
		echo "bench_wordcount: the word counts differ" >&2
		head -n 10 "$out/ember.txt" "$out/sort.txt" \
		    "$out/counter.txt" >&2
		exit 1
	fi
	distinct=$(wc -l <"$out/ember.txt")
	total=$(awk '{ n += $1 } END { print n }' "$out/ember.txt")
	echo "all three agree: $total words, $distinct distinct; top 10:"
	head -n 10 "$out/ember.txt" | awk '{ printf "  %10d %s\n", $1, $2 }'
	echo "ember is $(ratio "$wc_sort" "$wc_ember")x sort | uniq -c," \
	    "$(ratio "$wc_counter" "$wc_ember")x Counter"
	echo "result wc_mb $(awk -v n="$size" 'BEGIN { printf "%.0f", n / 1e6 }')"
	echo "result wc_ember_s $wc_ember"
	echo "result wc_ember_mbs $(mbps "$size" "$wc_ember")"
	echo "result wc_ember_min_mbs $(mbps "$size" "$wc_ember_max")"
	echo "result wc_ember_max_mbs $(mbps "$size" "$wc_ember_min")"
	echo "result wc_sort_s $wc_sort"
	echo "result wc_sort_mbs $(mbps "$size" "$wc_sort")"
	echo "result wc_counter_s $wc_counter"
	echo "result wc_counter_mbs $(mbps "$size" "$wc_counter")"
	rm -f "$out"/*.raw "$out"/*.txt "$out"/*.run
fi

if [ -n "$do_re" ]; then
	printf '{"source":{"text":{"paths":["%s"]}},"partitions":%s,%s}\n' \
	    "$file" "$parts" \
	    '"ops":[{"filter":{"regex":"\\bqu[a-z]+k\\b"}}]' >"$out/re.json"

	# Five runs each, alternating; each pair's speed ratio.
	re_ember=
	re_grep=
	re_ratios=
	for i in 1 2 3 4 5; do
		t0=$(now)
		n_ember=$("$builddir/ember" --socket "$sock" run --count \
		    "$out/re.json")
		t1=$(now)
		te=$(elapsed "$t0" "$t1")
		echo "ember filter regex + count, run $i: $te s, $n_ember lines"
		re_ember="$re_ember $te"

		t0=$(now)
		n_grep=$(LC_ALL=C grep -cE "$regex" "$file" || true)
		t1=$(now)
		tg=$(elapsed "$t0" "$t1")
		echo "LC_ALL=C grep -cE, run $i: $tg s, $n_grep lines"
		re_grep="$re_grep $tg"
		re_ratios="$re_ratios $(ratio "$tg" "$te")"
		if [ "$n_ember" != "$n_grep" ]; then
			echo "bench_wordcount: ember counted $n_ember lines," \
			    "grep $n_grep" >&2
			exit 1
		fi
	done
	# shellcheck disable=SC2086
	re_ember=$(spread $re_ember | cut -d' ' -f1)
	# shellcheck disable=SC2086
	re_grep=$(spread $re_grep | cut -d' ' -f1)
	# shellcheck disable=SC2086
	set -- $(spread $re_ratios)
	re_ratio=$1
	re_ratio_min=$2
	re_ratio_max=$3
	lines=$(wc -l <"$file")
	printf 'regex %s: %s of %s lines match; ember %s MB/s, grep %s MB/s, ' \
	    "$regex" "$n_ember" "$lines" "$(mbps "$size" "$re_ember")" \
	    "$(mbps "$size" "$re_grep")"
	printf 'ember/grep speed, median of the pairs %s (min %s, max %s)\n' \
	    "$re_ratio" "$re_ratio_min" "$re_ratio_max"
	echo "result re_count $n_ember"
	echo "result re_ember_s $re_ember"
	echo "result re_ember_mbs $(mbps "$size" "$re_ember")"
	echo "result re_grep_s $re_grep"
	echo "result re_grep_mbs $(mbps "$size" "$re_grep")"
	echo "result re_ratio $re_ratio"
	echo "result re_ratio_min $re_ratio_min"
	echo "result re_ratio_max $re_ratio_max"
fi
