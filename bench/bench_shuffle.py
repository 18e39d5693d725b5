#!/usr/bin/env python3
"""The shuffle's jobs on ember against the tools people use for them, in
one run, on the same files:

- sort: 1 GB of 100-byte records (random letters and digits, one a line)
  sorted: ember's `sort_by` (iterate, through `ember run`) against
  `LC_ALL=C sort -S 50% --parallel=2` and DuckDB's ORDER BY, each
  writing the sorted lines to a file; the three files must be equal.
- groupby: a 1 GB CSV of `key,value` lines (1M keys, values 0-999) summed
  by key: ember's `key_by` + `reduce_by_key sum` against DuckDB's GROUP
  BY, a Python dict and PySpark local[2]'s reduceByKey; the sums must
  agree key for key.
- join: 10M `key,v` rows joined with 1M `key,w` rows (every key once),
  inner, each side writing the joined rows: ember's `join` against
  DuckDB and a Python dict; the row counts and the sums of v and w must
  agree.
- wordcount: bench/gen_words' 500 MB file, words counted with `key_by` +
  `reduce_by_key count` against ember's own `count_by_value`; the counts
  must agree word for word.

The ember side is plans (the plan language of docs/plans.md) run with the
`ember` CLI, so it measures what a user gets.  Until emberd has the
shuffle, it prints "ember: shuffle not available" and the baselines
alone.  --scale 0.1 makes every file a tenth.  ember runs RUNS times
(median, least, greatest); each baseline once (they are the heavy
ones).  The last lines are `result NAME VALUE` for bench/run.sh.
"""

import argparse
import collections
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WHAT = ["sort", "groupby", "join", "wordcount"]
ALNUM = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def readable(path):
    """Make path readable by the user emberd's workers run as."""
    os.chmod(path, 0o644)
    return path


def fresh(path, size):
    return os.path.exists(path) and os.path.getsize(path) == size


def gen_sort(path, records):
    """records lines of 100 random letters and digits (seeded)."""
    if fresh(path, records * 101):
        return readable(path)
    rng = random.Random(1)
    table = bytes(ALNUM[i % len(ALNUM)] for i in range(256))
    with open(path + ".tmp", "wb") as f:
        left = records
        while left:
            n = min(left, 100000)
            raw = rng.randbytes(n * 100).translate(table)
            f.write(b"".join(raw[i:i + 100] + b"\n"
                             for i in range(0, n * 100, 100)))
            left -= n
    os.rename(path + ".tmp", path)
    return readable(path)


def awk_lines(path, size, program):
    """A file written by awk's program (seeded), unless it has size."""
    if not fresh(path, size):
        with open(path + ".tmp", "wb") as f:
            subprocess.run(["awk", "BEGIN { srand(1); " + program + " }"],
                           stdout=f, check=True)
        os.rename(path + ".tmp", path)
        if os.path.getsize(path) != size:
            raise SystemExit("bench_shuffle: %s: %d bytes, not %d"
                             % (path, os.path.getsize(path), size))
    return readable(path)


def gen_groupby(path, rows, keys):
    return awk_lines(path, rows * 13, 'for (i = 0; i < %d; i++) '
                     'printf "k%%07d,%%03d\\n", int(rand() * %d), '
                     'int(rand() * 1000)' % (rows, keys))


def gen_join(left, right, rows, keys):
    awk_lines(left, rows * 16, 'for (i = 0; i < %d; i++) '
              'printf "k%%07d,%%06d\\n", int(rand() * %d), '
              'int(rand() * 1000000)' % (rows, keys))
    awk_lines(right, keys * 16, 'for (i = 0; i < %d; i++) '
              'printf "k%%07d,%%06d\\n", i, int(rand() * 1000000)' % keys)
    return left, right


def gen_words(builddir, path, mb):
    if not os.path.exists(path) or os.path.getsize(path) < mb * 1000000:
        subprocess.run([os.path.join(builddir, "bench", "gen_words"),
                        "--mb", str(mb), path], check=True,
                       stdout=subprocess.DEVNULL)
    return readable(path)


# The ember side: plans through the CLI.

def text(paths, partitions, ops):
    return {"source": {"text": {"paths": paths}}, "partitions": partitions,
            "ops": ops}


def field(i):
    return {"field": {"sep": ",", "index": i}}


def key_value():
    return {"key_by": {"field": {"sep": ",", "index": 0},
                       "value": field(1)}}


class Ember:
    def __init__(self, cli, sock, tmp):
        self.cli, self.sock, self.tmp = cli, sock, tmp

    def run(self, plan, out, action=None, timeout=None):
        """Run plan with `ember run`, its output into the file out;
        seconds, or raise with ember's error."""
        path = os.path.join(self.tmp, "plan.json")
        with open(path, "w") as f:
            json.dump(plan, f)
        args = [self.cli, "--socket", self.sock, "run"]
        if action:
            args += ["--action", action]
        t0 = time.perf_counter()
        with open(out, "wb") as f:
            try:
                r = subprocess.run(args + [path], stdout=f,
                                   stderr=subprocess.PIPE, timeout=timeout)
            except subprocess.TimeoutExpired:
                raise RuntimeError("no answer in %s s" % timeout)
        t = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(r.stderr.decode(errors="replace").strip())
        return t

    def shuffle(self):
        """None when emberd runs a reduce_by_key, else why not."""
        plan = {"source": {"parallelize": {"records": ["a", "b", "a"]}},
                "partitions": 2,
                "ops": [{"key_by": {}}, {"reduce_by_key": {"fn": "count"}}]}
        out = os.path.join(self.tmp, "probe.out")
        try:
            self.run(plan, out, timeout=60)
        except RuntimeError as e:
            return str(e)
        with open(out) as f:
            got = sorted(f.read().split("\n")[:-1])
        if got != ["a\t2", "b\t1"]:
            return "a reduce_by_key gave %r" % (got,)
        return None


# Timing and checks.

def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def same_files(a, b, what):
    if subprocess.run(["cmp", "-s", a, b]).returncode != 0:
        raise SystemExit("bench_shuffle: %s: %s and %s differ" % (what, a, b))


def sums_of(path):
    """{key: int} of `key<TAB>n` lines."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("\t")
            out[k] = int(v)
    return out


def join_summary(path):
    """(rows, sum of v, sum of w) of `key<TAB>v<TAB>w` lines."""
    n = sv = sw = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            _, v, w = line.rstrip("\n").split("\t")
            n += 1
            sv += int(v)
            sw += int(w)
    return n, sv, sw


def agree(got, want, what):
    if got != want:
        raise SystemExit("bench_shuffle: %s disagree: %s against %s"
                         % (what, str(got)[:200], str(want)[:200]))


def duckdb_connect(tmp):
    import duckdb
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET memory_limit = '4GB'")
    con.execute("SET temp_directory = '%s'" % os.path.join(tmp, "duckdb"))
    con.execute("SET preserve_insertion_order = false")
    return con


def csv(path, columns):
    cols = ", ".join("'%s': '%s'" % c for c in columns)
    return ("read_csv('%s', header = false, delim = ',', quote = '', "
            "columns = {%s})" % (path, cols))


class Bench:
    def __init__(self, args, ember, why):
        self.args = args
        self.ember = ember
        self.why = why			# None: the shuffle runs
        self.tmp = args.dir
        self.results = []
        self.lines = []

    def result(self, name, value, fmt="%.3f"):
        self.results.append("result %s %s" % (name, fmt % value))

    def out(self, name):
        return os.path.join(self.tmp, name)

    def base(self, name, what, t):
        print("%s: %s %.3f s" % (name, what, t))
        self.result("sh_%s_%s_s" % (name, what), t)
        sys.stdout.flush()

    def ember_runs(self, name, plan, check, action=None):
        """Run plan RUNS times (its output checked each time); print and
        keep median, least and greatest.  None without the shuffle."""
        if self.why is not None:
            print("%s: ember: shuffle not available" % name)
            self.result("sh_%s_unavailable" % name, 1, "%d")
            return None
        times = []
        for _ in range(self.args.runs):
            out = self.out(name + ".ember")
            times.append(self.ember.run(plan, out, action))
            check(out)
        med = statistics.median(times)
        print("%s: ember median of %d %.3f s (min %.3f, max %.3f)"
              % (name, len(times), med, min(times), max(times)))
        self.result("sh_%s_ember_s" % name, med)
        self.result("sh_%s_ember_min_s" % name, min(times))
        self.result("sh_%s_ember_max_s" % name, max(times))
        sys.stdout.flush()
        return med

    def sort(self):
        n = int(10000000 * self.args.scale)
        path = gen_sort(self.out("sort.txt"), n)
        print("sort: %d records of 100 B (%d bytes)" % (n, n * 101))
        ref = self.out("sort.sorted")
        env = dict(os.environ, LC_ALL="C", TMPDIR=self.tmp)
        self.base("sort", "gnu", timed(lambda: subprocess.run(
            ["sort", "-S", "50%", "--parallel=2", "-o", ref, path],
            env=env, check=True)))
        if self.args.duckdb:
            out = self.out("sort.duckdb")
            con = duckdb_connect(self.tmp)
            self.base("sort", "duckdb", timed(lambda: con.execute(
                "COPY (SELECT line FROM %s ORDER BY line) TO '%s' "
                "(FORMAT csv, HEADER false, QUOTE '')"
                % (csv(path, [("line", "VARCHAR")]), out))))
            con.close()
            same_files(out, ref, "DuckDB's sort")
        self.ember_runs("sort", text([path], 16, [{"sort_by": {}}]),
                        lambda out: same_files(out, ref, "ember's sort"))

    def groupby(self):
        rows = int(1e9 * self.args.scale / 13)
        keys = int(1000000 * self.args.scale) or 1
        path = gen_groupby(self.out("groupby.csv"), rows, keys)
        print("groupby: %d rows, keys of %d (%d bytes)"
              % (rows, keys, rows * 13))
        want = {}

        def pydict():
            d = collections.defaultdict(int)
            with open(path, encoding="ascii") as f:
                for line in f:
                    d[line[:8]] += int(line[9:12])
            want.update(d)
        self.base("groupby", "python", timed(pydict))
        if self.args.duckdb:
            con = duckdb_connect(self.tmp)
            got = {}
            self.base("groupby", "duckdb", timed(lambda: got.update(
                con.execute("SELECT key, sum(value) FROM %s GROUP BY key"
                            % csv(path, [("key", "VARCHAR"),
                                         ("value", "BIGINT")])).fetchall())))
            con.close()
            agree(got, want, "DuckDB's sums")
        if self.args.spark:
            from bench_pyspark import spark_context
            sc = spark_context(True)
            got = {}
            try:
                self.base("groupby", "pyspark", timed(lambda: got.update(
                    sc.textFile(path, 8)
                    .map(lambda l: (l[:8], int(l[9:12])))
                    .reduceByKey(lambda a, b: a + b).collect())))
            finally:
                sc.stop()
            agree(got, want, "PySpark's sums")
        self.ember_runs("groupby", text([path], 8, [
            key_value(), {"reduce_by_key": {"fn": "sum"}}]),
            lambda out: agree(sums_of(out), want, "ember's sums"))

    def join(self):
        rows = int(10000000 * self.args.scale)
        keys = int(1000000 * self.args.scale) or 1
        left, right = gen_join(self.out("join-left.csv"),
                               self.out("join-right.csv"), rows, keys)
        print("join: %d rows x %d rows" % (rows, keys))
        want = []

        def pydict():
            w = {}
            with open(right, encoding="ascii") as f:
                for line in f:
                    w[line[:8]] = line[9:15]
            n = sv = sw = 0
            with open(left, encoding="ascii") as f, \
                    open(self.out("join.python"), "w") as out:
                for line in f:
                    k = line[:8]
                    x = w.get(k)
                    if x is not None:
                        out.write("%s\t%s\t%s\n" % (k, line[9:15], x))
            want.append(join_summary(self.out("join.python")))
        self.base("join", "python", timed(pydict))
        want = want[0]
        if self.args.duckdb:
            out = self.out("join.duckdb")
            con = duckdb_connect(self.tmp)
            self.base("join", "duckdb", timed(lambda: con.execute(
                "COPY (SELECT a.key, a.v, b.w FROM %s a JOIN %s b "
                "ON a.key = b.key) TO '%s' (FORMAT csv, HEADER false, "
                "DELIMITER '\t', QUOTE '')"
                % (csv(left, [("key", "VARCHAR"), ("v", "VARCHAR")]),
                   csv(right, [("key", "VARCHAR"), ("w", "VARCHAR")]),
                   out))))
            con.close()
            agree(join_summary(out), want, "DuckDB's join")
        self.ember_runs("join", text([left], 8, [key_value(), {"join": {
            "plan": text([right], 2, [key_value()]), "how": "inner"}}]),
            lambda out: agree(join_summary(out), want, "ember's join"))

    def wordcount(self):
        mb = max(1, int(500 * self.args.scale))
        path = gen_words(self.args.builddir, self.out("words-shuffle.txt"),
                         mb)
        print("wordcount: %d MB of words" % mb)
        split = [{"flat_map": {"split": " "}}]
        ref = self.out("wordcount.cbv")
        want = {}
        t = self.ember.run(text([path], 8, split), ref, "count_by_value")
        for line in open(ref, encoding="utf-8"):
            n, _, w = line.rstrip("\n").partition("\t")
            want[w] = int(n)
        self.base("wordcount", "count_by_value", t)
        self.ember_runs("wordcount", text([path], 8, split + [
            {"key_by": {}}, {"reduce_by_key": {"fn": "count"}}]),
            lambda out: agree(sums_of(out), want, "reduce_by_key's counts"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--ember", default="ember", help="the ember CLI")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", action="append", choices=WHAT)
    ap.add_argument("--no-spark", dest="spark", action="store_false")
    args = ap.parse_args()
    args.builddir = os.environ.get("EMBER_BUILDDIR") or os.getcwd()
    try:
        import duckdb  # noqa: F401
        args.duckdb = True
    except ImportError:
        print("bench_shuffle: no DuckDB for this python3 "
              "(scripts/install-deps.sh installs it): its baselines skipped")
        args.duckdb = False
    if args.spark:
        try:
            import pyspark  # noqa: F401
            args.spark = shutil.which("java") is not None
        except ImportError:
            args.spark = False
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.makedirs(os.path.join(args.dir, "duckdb"), exist_ok=True)

    ember = Ember(args.ember, args.socket, args.dir)
    why = ember.shuffle()
    if why is not None:
        print("ember: shuffle not available (%s)" % why)
    b = Bench(args, ember, why)
    for what in args.only or WHAT:
        getattr(b, what)()
    print("\n".join(b.results))


if __name__ == "__main__":
    main()
