#!/bin/sh
# bench_spark: the seeds' word count and regex filter on PySpark local[2]
# beside ember, in the same run on the same file: emberd (ember run),
# the same plans on Spark (ember submit --master local[2], the ops in
# ember-worker on the executors) and PySpark's own Python functions
# (textFile, flatMap, countByValue; filter with re).
#
# usage: bench_spark.sh --socket PATH --dir DIR [--mb N] [--partitions N]
#
# Every result is checked: the three word counts must be equal, and the
# three counts of matching lines.  Spark's figures include its JVM start,
# as a user waits for it; the line "spark start" measures a job of no
# records, to read them without it.  Prints "result NAME VALUE" lines for
# bench/run.sh.

set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${EMBER_BUILDDIR:-$(pwd)}
python=${PYTHON3:-python3}
regex='\bqu[a-z]+k\b'

usage() {
	echo "usage: bench_spark.sh --socket PATH --dir DIR [--mb N]" \
	    "[--partitions N]" >&2
	exit 2
}

sock=
dir=
mb=100
parts=8
while [ $# -gt 0 ]; do
	case $1 in
	--socket) [ $# -ge 2 ] || usage; sock=$2; shift 2 ;;
	--dir) [ $# -ge 2 ] || usage; dir=$2; shift 2 ;;
	--mb) [ $# -ge 2 ] || usage; mb=$2; shift 2 ;;
	--partitions) [ $# -ge 2 ] || usage; parts=$2; shift 2 ;;
	*) usage ;;
	esac
done
[ -n "$sock" ] && [ -n "$dir" ] || usage

. "$srcdir/bench/lib.sh"

if ! "$python" -c 'import pyspark' 2>/dev/null ||
    ! command -v java >/dev/null 2>&1; then
	echo "bench_spark: skipped: needs PySpark and Java" \
	    "(scripts/install-deps.sh)"
	echo "result spark_skipped 1"
	exit 0
fi
spark_bin=$("$python" -c 'import os, pyspark
print(os.path.join(os.path.dirname(pyspark.__file__), "bin"))')
export SPARK_LOCAL_IP=127.0.0.1
export EMBER_SPARK_JOB="$srcdir/python/ember/spark_job.py"

file=$dir/words/words.txt
size=$(words_file "$file" "$mb")
out=$dir/spark
mkdir -p "$out"
echo "file: $file, $size bytes; $parts partitions; Spark local[2]"

cat >"$out/wc.json" <<PLAN
{"source": {"text": {"paths": ["$file"]}}, "partitions": $parts,
 "ops": [{"flat_map": {"split": " "}}]}
PLAN
cat >"$out/re.json" <<PLAN
{"source": {"text": {"paths": ["$file"]}}, "partitions": $parts,
 "ops": [{"filter": {"regex": "$(printf '%s' "$regex" | sed 's/\\/\\\\/g')"}}]}
PLAN
cat >"$out/empty.json" <<PLAN
{"source": {"parallelize": {"records": []}}, "partitions": 1}
PLAN
cat >"$out/pyspark_job.py" <<'PY'
import re, sys
from pyspark import SparkContext
sc = SparkContext(appName="bench")
sc.setLogLevel("ERROR")
what, path, parts = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = sc.textFile(path, parts)
if what == "wc":
    counts = lines.flatMap(lambda l: l.split(" ")).countByValue()
    for w, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print("%d\t%s" % (n, w))
else:
    pat = re.compile(sys.argv[4])
    print(lines.filter(lambda l: pat.search(l) is not None).count())
sc.stop()
PY

submit() {
	"$builddir/ember" submit --master 'local[2]' \
	    --spark-submit "$spark_bin/spark-submit" \
	    --worker "$builddir/ember-worker" \
	    --conf spark.ui.enabled=false "$@" 2>>"$out/spark.log"
}

pyspark() {
	"$spark_bin/spark-submit" --master 'local[2]' \
	    --conf spark.ui.enabled=false --conf spark.log.level=ERROR \
	    "$out/pyspark_job.py" "$@" 2>>"$out/spark.log"
}

# Time "$@" into $t, its output into $out/$name.
timed() {
	name=$1
	shift
	t0=$(now)
	"$@" >"$out/$name"
	t=$(elapsed "$t0" "$(now)")
}

timed start submit --count "$out/empty.json"
start=$t
echo "spark start (ember submit of no records): $start s"

timed wc_ember "$builddir/ember" --socket "$sock" run \
    --action count_by_value "$out/wc.json"
wc_ember=$t
timed wc_submit submit --action count_by_value "$out/wc.json"
wc_submit=$t
timed wc_pyspark pyspark wc "$file" "$parts"
wc_pyspark=$t
for x in wc_submit wc_pyspark; do
	if ! cmp -s "$out/wc_ember" "$out/$x"; then
		echo "bench_spark: $x's word count differs from ember's" >&2
		exit 1
	fi
done
echo "word count: ember $wc_ember s | ember submit local[2] $wc_submit s" \
    "| PySpark local[2] $wc_pyspark s"

timed re_ember "$builddir/ember" --socket "$sock" run --count "$out/re.json"
re_ember=$t
timed re_submit submit --count "$out/re.json"
re_submit=$t
timed re_pyspark pyspark re "$file" "$parts" "$regex"
re_pyspark=$t
for x in re_submit re_pyspark; do
	if ! cmp -s "$out/re_ember" "$out/$x"; then
		echo "bench_spark: $x counted $(cat "$out/$x") lines," \
		    "ember $(cat "$out/re_ember")" >&2
		exit 1
	fi
done
echo "regex count: ember $re_ember s | ember submit local[2] $re_submit s" \
    "| PySpark local[2] $re_pyspark s ($(cat "$out/re_ember") lines)"

echo "result spark_mb $(awk -v n="$size" 'BEGIN { printf "%.0f", n / 1e6 }')"
echo "result spark_start_s $start"
echo "result spark_wc_ember_s $wc_ember"
echo "result spark_wc_submit_s $wc_submit"
echo "result spark_wc_pyspark_s $wc_pyspark"
echo "result spark_re_ember_s $re_ember"
echo "result spark_re_submit_s $re_submit"
echo "result spark_re_pyspark_s $re_pyspark"
