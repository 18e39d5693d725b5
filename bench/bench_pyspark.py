#!/usr/bin/env python3
"""The seeds' PySpark measurements on PySpark local[2] and on ember, in
one run, on the same data, through the same code: each job is a function
of a SparkContext, given PySpark's (`pyspark.SparkContext`, master
local[2]) or ember's (`ember.pyspark.SparkContext`, emberd with
workers.max 2); only the import differs.

- tasks: `parallelize(range(N), N).map(lambda x: x).count()`, N one-record
  partitions through a Python map: microseconds per task.
- iterate: `textFile(F, 2).toLocalIterator()` over a file of lines of 100
  bytes, counted: MB/s of records.
- broadcast: Spark's worker-reuse experiment, verbatim:
  `b = sc.broadcast(set(range(30000000)))`, then
  `sc.parallelize(range(24000), 100).filter(lambda x: x in b.value)
  .count()`, with worker reuse on and off (a second emberd with
  workers.reuse no; a second SparkContext with spark.python.worker.reuse
  false).  The set is built once, outside the timing; the broadcast and
  the count are timed together, as the experiment's script was.  ember
  loads the set once, in the fork-server (python.broadcast_preload);
  --socket-perworker names an emberd with python.broadcast_preload 0,
  where each worker unpickles it, for the same job on ember alone.
- upper: `textFile(F, 2).map(lambda s: s.upper()).count()` over a file of
  10M decimal numbers, against a plain Python loop reading the same file
  and upper-casing each line in one process, the two alternating: per
  worker, ember's records a second over the loop's (two workers), the
  median of the pairs' ratios.
- wordcount: `textFile(W, 8).flatMap(lambda l: l.split(" "))
  .countByValue()` over bench/gen_words' 500 MB file.
- checkpoint: the words of a 100 MB file longer than 3 letters,
  `checkpoint()`ed, counted (the write), then `countByValue()` over the
  checkpoint (the reuse) against the same without a checkpoint
  (recomputed).

--quick divides the data by 10 (the broadcast's set is then 3M, not 30M:
PySpark's reuse-off run alone takes minutes at full size).  Every result
is checked: the counts, and the two systems' word counts equal word for
word.  ember runs RUNS times after a warm-up, PySpark SPARK_RUNS times
(the heavy ones HEAVY times: PySpark's word count and checkpoint, the
reuse-off broadcast, PySpark's reuse-on one at full size, and the
per-worker one, whose reused workers keep the last object they
unpickled); median,
least and greatest are printed.  The last lines are
`result NAME VALUE` for bench/run.sh.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

WHAT = ["tasks", "iterate", "upper", "wordcount", "checkpoint", "broadcast"]


# The jobs: the same code for both SparkContexts.

def job_tasks(sc, n):
    return sc.parallelize(range(n), n).map(lambda x: x).count()


def job_iterate(sc, path):
    n = size = 0
    for r in sc.textFile(path, 2).toLocalIterator():
        n += 1
        size += len(r)
    return n, size


def job_broadcast(sc, s):
    b = sc.broadcast(s)
    n = sc.parallelize(range(24000), 100).filter(
        lambda x: x in b.value).count()
    b.unpersist()
    return n


def job_upper(sc, path):
    return sc.textFile(path, 2).map(lambda s: s.upper()).count()


def job_wordcount(sc, path):
    return dict(sc.textFile(path, 8).flatMap(
        lambda l: l.split(" ")).countByValue())


def long_words(sc, path):
    return sc.textFile(path, 8).flatMap(lambda l: l.split(" ")).filter(
        lambda w: len(w) > 3)


# Timing.

def runs_of(fn, runs, check, warm=True):
    """Times of runs calls of fn (after a warm-up when warm), each result
    passed to check."""
    if warm:
        check(fn())
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        got = fn()
        times.append(time.perf_counter() - t0)
        check(got)
    return times


def spread(times):
    return statistics.median(times), min(times), max(times)


def equal(want, what):
    def check(got):
        if got != want:
            raise SystemExit("bench_pyspark: %s: %r, not %r"
                             % (what, str(got)[:200], str(want)[:200]))
    return check


def loop_upper(path):
    """The plain Python loop: each line of the file upper-cased."""
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line[:-1].upper()
            n += 1
    return n


# Data, readable by the user ember's workers run as.

def numbers_file(path, n):
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        with open(path + ".tmp", "w") as f:
            for i in range(0, n, 100000):
                f.write("".join("%d\n" % j
                                for j in range(i, min(n, i + 100000))))
        os.rename(path + ".tmp", path)
    os.chmod(path, 0o644)
    return path


def lines_file(path, n):
    line = ("%0100d\n" % 0).encode()
    if not os.path.exists(path) or os.path.getsize(path) != n * 101:
        with open(path + ".tmp", "wb") as f:
            for i in range(0, n, 10000):
                f.write(line * min(10000, n - i))
        os.rename(path + ".tmp", path)
    os.chmod(path, 0o644)
    return path


def words_file(builddir, path, mb):
    if not os.path.exists(path) or os.path.getsize(path) < mb * 1000000:
        subprocess.run([os.path.join(builddir, "bench", "gen_words"),
                        "--mb", str(mb), path], check=True,
                       stdout=subprocess.DEVNULL)
    os.chmod(path, 0o644)
    return path


def spark_context(reuse):
    from pyspark import SparkConf, SparkContext
    conf = (SparkConf().setMaster("local[2]").setAppName("bench_pyspark")
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.driver.memory", "4g")
            .set("spark.python.worker.reuse", "true" if reuse else "false"))
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    # The JVM's first job (class loading, JIT) is not any benchmark's.
    sc.parallelize(range(10), 2).map(lambda x: x).count()
    return sc


class Bench:
    def __init__(self, args):
        self.args = args
        self.scale = 10 if args.quick else 1
        self.results = []

    def result(self, name, value, fmt="%.3f"):
        self.results.append("result %s %s" % (name, fmt % value))

    def both(self, name, unit, ember_times, spark_times, per=1.0,
             fmt="%.3f"):
        """Print and keep median, least and greatest of both, per unit."""
        em = [t / per for t in ember_times]
        sp = [t / per for t in spark_times]
        e, s = spread(em), spread(sp)
        print("%s: ember median of %d %s %s (min %s, max %s) | PySpark "
              "local[2] median of %d %s (min %s, max %s) | PySpark/ember "
              "%.1f" % (name, len(em), fmt % e[0], unit, fmt % e[1],
                        fmt % e[2], len(sp), fmt % s[0], fmt % s[1],
                        fmt % s[2], s[0] / e[0]))
        for side, v in (("ember", e), ("spark", s)):
            for k, x in zip(("", "_min", "_max"), v):
                self.result("ps_%s_%s%s" % (name, side, k), x, fmt)
        self.result("ps_%s_ratio" % name, s[0] / e[0], "%.1f")
        sys.stdout.flush()

    def tasks(self, esc, ssc):
        n = self.args.tasks
        check = equal(n, "tasks")
        et = runs_of(lambda: job_tasks(esc, n), self.args.runs, check)
        st = runs_of(lambda: job_tasks(ssc, n), self.args.spark_runs, check,
                     warm=False)
        self.both("tasks", "us/task", et, st, n / 1e6, "%.1f")

    def iterate(self, esc, ssc):
        n = 1000000 // self.scale
        path = lines_file(os.path.join(self.args.dir, "lines.txt"), n)
        check = equal((n, n * 100), "iterate")
        et = runs_of(lambda: job_iterate(esc, path), self.args.runs, check)
        st = runs_of(lambda: job_iterate(ssc, path), self.args.spark_runs,
                     check)
        # Seconds per MB, printed as MB/s below.
        self.both("iterate", "s/MB", et, st, n * 100 / 1e6, "%.5f")
        e = statistics.median(et)
        s = statistics.median(st)
        print("iterate (%d records of 100 B): ember %.0f MB/s | PySpark "
              "%.0f MB/s" % (n, n * 100 / 1e6 / e, n * 100 / 1e6 / s))
        self.result("ps_iterate_ember_mbs", n * 100 / 1e6 / e, "%.0f")
        self.result("ps_iterate_spark_mbs", n * 100 / 1e6 / s, "%.0f")

    def upper(self, esc, ssc):
        n = 10000000 // self.scale
        path = numbers_file(os.path.join(self.args.dir, "numbers.txt"), n)
        check = equal(n, "upper")
        # The loop and ember alternate, so that a machine getting busier
        # or quieter favours neither; each pair gives a ratio.
        check(job_upper(esc, path))
        lt, et = [], []
        for _ in range(self.args.runs):
            lt += runs_of(lambda: loop_upper(path), 1, check, warm=False)
            et += runs_of(lambda: job_upper(esc, path), 1, check,
                          warm=False)
        st = runs_of(lambda: job_upper(ssc, path), self.args.spark_runs,
                     check)
        self.both("upper", "s", et, st)
        loop = spread(lt)
        per = [a / (2 * b) for a, b in zip(lt, et)]
        print("upper (%d records): plain Python loop median %.3f s "
              "(%.2f M records/s) | ember per worker / loop: median %.2f "
              "(min %.2f, max %.2f)" % (n, loop[0], n / loop[0] / 1e6,
                                        statistics.median(per), min(per),
                                        max(per)))
        self.result("ps_upper_loop_s", loop[0])
        self.result("ps_upper_per_worker", statistics.median(per), "%.2f")
        self.result("ps_upper_per_worker_min", min(per), "%.2f")
        self.result("ps_upper_per_worker_max", max(per), "%.2f")

    def wordcount(self, esc, ssc):
        mb = 500 // self.scale
        path = words_file(self.args.builddir,
                          os.path.join(self.args.dir, "words500.txt"), mb)
        want = job_wordcount(esc, path)
        check = equal(want, "word count")
        et = runs_of(lambda: job_wordcount(esc, path), self.args.runs,
                     check, warm=False)
        st = runs_of(lambda: job_wordcount(ssc, path), self.args.heavy,
                     check, warm=False)
        self.both("wordcount", "s", et, st)
        self.result("ps_wordcount_mb", os.path.getsize(path) / 1e6, "%.0f")

    def checkpoint(self, esc, ssc):
        mb = 100 // self.scale
        path = words_file(self.args.builddir,
                          os.path.join(self.args.dir, "words100.txt"), mb)
        ck = os.path.join(self.args.dir, "spark-checkpoints")
        os.makedirs(ck, exist_ok=True)
        ssc.setCheckpointDir(ck)
        esc.setCheckpointDir(ck)
        want = dict(long_words(esc, path).countByValue())
        total = sum(want.values())
        out = {}
        for side, sc, runs in (("ember", esc, self.args.runs),
                               ("spark", ssc, self.args.heavy)):
            w, r, c = [], [], []
            for _ in range(runs):
                rdd = long_words(sc, path)
                rdd.checkpoint()
                t0 = time.perf_counter()
                equal(total, "checkpoint write")(rdd.count())
                w.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                equal(want, "over the checkpoint")(dict(rdd.countByValue()))
                r.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                equal(want, "recomputed")(
                    dict(long_words(sc, path).countByValue()))
                c.append(time.perf_counter() - t0)
            out[side] = (w, r, c)
        for i, what in enumerate(("ckwrite", "ckreuse", "ckrecompute")):
            self.both(what, "s", out["ember"][i], out["spark"][i])
        shutil.rmtree(ck, ignore_errors=True)

    def broadcast(self, esc, ssc, reuse):
        """The experiment on one pair of contexts: reuse on (RUNS and
        SPARK_RUNS runs) or off (HEAVY runs each)."""
        n = 30000000 // self.scale
        t0 = time.perf_counter()
        s = set(range(n))
        print("broadcast: set(range(%d)) built in %.1f s (once, not timed)"
              % (n, time.perf_counter() - t0))
        check = equal(24000, "broadcast count")
        if not reuse:
            runs = (self.args.heavy, self.args.heavy)
        elif self.args.quick:
            runs = (self.args.runs, self.args.spark_runs)
        else:
            # The workers that shared a loaded set are retired when it is
            # dropped (unpersist): ember's runs keep nothing.
            runs = (self.args.runs, self.args.heavy)
        et = runs_of(lambda: job_broadcast(esc, s), runs[0], check,
                     warm=False)
        st = runs_of(lambda: job_broadcast(ssc, s), runs[1], check,
                     warm=False)
        self.both("bcast_on" if reuse else "bcast_off", "s", et, st)
        self.result("ps_bcast_n", n, "%d")
        if reuse and self.args.socket_perworker:
            self.broadcast_perworker(s, check)

    def broadcast_perworker(self, s, check):
        """The reuse-on job on an emberd whose workers each unpickle the
        set (python.broadcast_preload 0); HEAVY runs at full size, since
        a reused worker keeps the last object it unpickled: at 30M, 2.5
        GB a worker."""
        from ember.pyspark import SparkContext as EmberContext
        esc = EmberContext("local[2]", "bench",
                           socket=self.args.socket_perworker)
        try:
            runs = self.args.runs if self.args.quick else self.args.heavy
            et = runs_of(lambda: job_broadcast(esc, s), runs, check,
                         warm=False)
        finally:
            esc.stop()
        m = spread(et)
        print("bcast_perworker: ember, each worker unpickling, median of %d "
              "%.3f s (min %.3f, max %.3f)" % (len(et), m[0], m[1], m[2]))
        for k, x in zip(("", "_min", "_max"), m):
            self.result("ps_bcast_perworker%s" % k, x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--socket-off", help="an emberd with workers.reuse no")
    ap.add_argument("--socket-perworker",
                    help="an emberd with python.broadcast_preload 0")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--spark-runs", type=int, default=3)
    ap.add_argument("--heavy", type=int, default=1)
    ap.add_argument("--only", action="append", choices=WHAT)
    args = ap.parse_args()
    args.builddir = os.environ.get("EMBER_BUILDDIR") or os.getcwd()
    only = args.only or WHAT

    try:
        import pyspark  # noqa: F401
        java = shutil.which("java")
    except ImportError:
        java = None
    if java is None:
        print("bench_pyspark: skipped: needs PySpark and Java "
              "(scripts/install-deps.sh)")
        print("result ps_skipped 1")
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from ember.pyspark import SparkContext as EmberContext

    b = Bench(args)
    print("bench_pyspark: %s; ember runs %d, PySpark runs %d, heavy runs "
          "%d" % ("quick (data / 10)" if args.quick else "full size",
                  args.runs, args.spark_runs, args.heavy))
    esc = EmberContext("local[2]", "bench", socket=args.socket)
    ssc = spark_context(True)
    try:
        for what in only:
            if what == "broadcast":
                b.broadcast(esc, ssc, True)
            else:
                getattr(b, what)(esc, ssc)
    finally:
        ssc.stop()
        esc.stop()
    if "broadcast" in only and args.socket_off:
        # One SparkContext at a time: reuse off needs a context of its own.
        esc = EmberContext("local[2]", "bench", socket=args.socket_off)
        ssc = spark_context(False)
        try:
            b.broadcast(esc, ssc, False)
        finally:
            ssc.stop()
            esc.stop()
    print("\n".join(b.results))


if __name__ == "__main__":
    main()
