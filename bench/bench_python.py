#!/usr/bin/env python3
"""The Python client's overhead: the same jobs through the package
(python/ember) and through the C CLI (`ember run`), side by side.

- tasks: a count of N one-record partitions, each through the worker's
  ops (`map upper`), so that every task is dispatched, run and retired;
  the package's `count()` against `ember run --count`.
- jobs: J sequential one-partition counts: the package on one session,
  the CLI one process per job (what a shell script pays).
- iterate: a text file of 1,000,000 lines of 100 bytes, listed COPIES
  times, one partition per copy, iterated to the end: the package as
  bytes (decode=False) and as str, against `ember run PLAN >/dev/null`;
  and, a figure of its own, the package's lists of records
  (to_local_batches, bytes) counted a list at a time.

Each figure is checked: the counts, and emberd's tasks_completed and
records_sent counters before and after each run, so a run that lost work
fails instead of printing a figure.  Runs alternate between the package
and the CLI, after a warm-up of each; the best run counts (the median is
printed too).  The last lines are `result NAME VALUE` for bench/run.sh.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import ember  # noqa: E402

LINE = 100			# bytes of a line, without its newline
LINES = 1000000			# lines of the file


def counters(sc):
    return sc.status()["counters"]


def grew(sc, before, name, want, what):
    """Check that emberd's counter name grew by want since before."""
    got = counters(sc)[name] - before[name]
    if got != want:
        raise SystemExit("bench_python: %s: %s grew by %d, not %d"
                         % (what, name, got, want))


def cli(args, sock, plan_path, options=(), capture=False):
    """Run `ember run OPTIONS PLAN`, its output kept when capture, else
    sent to /dev/null; (seconds, output, the child's CPU seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([args.ember, "--socket", sock, "run"] +
                       list(options) + [plan_path],
                       stdout=subprocess.PIPE if capture
                       else subprocess.DEVNULL, stderr=subprocess.PIPE)
    t = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit("bench_python: ember run: %s"
                         % r.stderr.decode(errors="replace"))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime -
                                                before.ru_stime)
    return t, r.stdout, cpu


def write_plan(directory, name, plan):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        json.dump(plan, f)
    return path


def stats(times):
    times = sorted(times)
    return times[0], times[len(times) // 2]


def bench_tasks(args, sc, directory):
    n = args.tasks
    ds = sc.range(n, partitions=n).map_upper()
    plan = write_plan(directory, "tasks.json", ds.plan)
    pkg, cmd = [], []
    for i in range(args.runs + 1):
        before = counters(sc)
        t0 = time.perf_counter()
        got = ds.count()
        t = time.perf_counter() - t0
        if got != n:
            raise SystemExit("bench_python: count %d, not %d" % (got, n))
        grew(sc, before, "tasks_completed", n, "package count")
        before = counters(sc)
        tc, out, _ = cli(args, sc.socket_path, plan, ["--count"], True)
        if int(out) != n:
            raise SystemExit("bench_python: ember run --count printed %r"
                             % out)
        grew(sc, before, "tasks_completed", n, "ember run --count")
        if i > 0:		# the first of each is the warm-up
            pkg.append(t)
            cmd.append(tc)
    (pb, pm), (cb, cm) = stats(pkg), stats(cmd)
    print("tasks: count of %d one-record partitions (map upper), x %d: "
          "package best %.1f ms (median %.1f, %.1f us/task) | ember run "
          "--count best %.1f ms (median %.1f, %.1f us/task) | "
          "package/CLI %.2f" % (n, args.runs, pb * 1e3, pm * 1e3,
                                pb * 1e6 / n, cb * 1e3, cm * 1e3,
                                cb * 1e6 / n, pb / cb))
    return {"py_tasks_ms": pb * 1e3, "py_tasks_cli_ms": cb * 1e3,
            "py_tasks_ratio": pb / cb}


def bench_jobs(args, sc, directory):
    j = args.jobs
    ds = sc.range(1, partitions=1).map_upper()
    plan = write_plan(directory, "job.json", ds.plan)
    for _ in range(20):
        ds.count()
    cli(args, sc.socket_path, plan, ["--count"], True)
    pkg, cmd = [], []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        for _ in range(j):
            if ds.count() != 1:
                raise SystemExit("bench_python: a job's count is not 1")
        pkg.append((time.perf_counter() - t0) / j)
        t0 = time.perf_counter()
        for _ in range(j):
            _, out, _ = cli(args, sc.socket_path, plan, ["--count"], True)
            if int(out) != 1:
                raise SystemExit("bench_python: ember run --count printed "
                                 "%r" % out)
        cmd.append((time.perf_counter() - t0) / j)
    (pb, pm), (cb, cm) = stats(pkg), stats(cmd)
    print("jobs: %d one-partition counts in a row, x %d: package (one "
          "session) best %.0f us/job (median %.0f) | ember run --count (a "
          "process each) best %.0f us/job (median %.0f) | package/CLI %.2f"
          % (j, args.runs, pb * 1e6, pm * 1e6, cb * 1e6, cm * 1e6, pb / cb))
    return {"py_job_us": pb * 1e6, "py_job_cli_us": cb * 1e6,
            "py_job_ratio": pb / cb}


def make_lines(directory):
    """A file of LINES lines of LINE bytes; its path."""
    path = os.path.join(directory, "lines-%d.txt" % LINE)
    if os.path.exists(path) and os.path.getsize(path) == LINES * (LINE + 1):
        return path
    fill = "x" * (LINE - 10)
    with open(path + ".tmp", "w") as f:
        for start in range(0, LINES, 10000):
            f.write("".join("%010d%s\n" % (i, fill)
                            for i in range(start, start + 10000)))
    os.chmod(path + ".tmp", 0o644)
    os.rename(path + ".tmp", path)
    return path


def iterate(ds, decode):
    """Iterate ds to the end as a caller would: (records, seconds, CPU s)."""
    n = 0
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in ds.to_local_iterator(decode=decode):
        n += 1
    return n, time.perf_counter() - t0, time.process_time() - c0


def iterate_batches(ds):
    """The same a list of records at a time, as bytes."""
    n = 0
    c0, t0 = time.process_time(), time.perf_counter()
    for batch in ds.to_local_batches(decode=False):
        n += len(batch)
    return n, time.perf_counter() - t0, time.process_time() - c0


def bench_iterate(args, sc, directory):
    path = make_lines(directory)
    want = LINES * args.copies
    mb = want * LINE / 1e6
    ds = sc.text_file([path] * args.copies, partitions=args.copies)
    plan = write_plan(directory, "iterate.json", ds.plan)
    kinds = ("bytes", "str", "cli", "batches")
    runs = {k: [] for k in kinds}
    cpu = {k: [] for k in kinds}
    for i in range(args.runs + 1):
        for kind in kinds:
            before = counters(sc)
            if kind == "cli":
                t, _, c = cli(args, sc.socket_path, plan)
                n = want
            elif kind == "batches":
                n, t, c = iterate_batches(ds)
            else:
                n, t, c = iterate(ds, kind == "str")
            if n != want:
                raise SystemExit("bench_python: %d records, not %d"
                                 % (n, want))
            grew(sc, before, "records_sent", want, "iterate (%s)" % kind)
            if i > 0:
                runs[kind].append(t)
                cpu[kind].append(c)
    best = {k: stats(v)[0] for k, v in runs.items()}
    med = {k: stats(v)[1] for k, v in runs.items()}
    for kind, name in (("bytes", "package, bytes"), ("str", "package, str"),
                       ("cli", "ember run >/dev/null"),
                       ("batches", "package, lists of bytes")):
        print("iterate: %d records of %d B (%.0f MB), x %d: %s best %.2f s "
              "(median %.2f; %.0f MB/s, %.2f Mrec/s; client CPU %.2f s)"
              % (want, LINE, mb, args.runs, name, best[kind], med[kind],
                 mb / best[kind], want / best[kind] / 1e6,
                 min(cpu[kind])))
    # Each round's package/CLI ratio: the two ran side by side.
    ratios = sorted(c / b for b, c in zip(runs["bytes"], runs["cli"]))
    print("iterate: package/CLI by round: median %.2f, min %.2f, max %.2f"
          % (ratios[len(ratios) // 2], ratios[0], ratios[-1]))
    lists = sorted(c / b for b, c in zip(runs["batches"], runs["cli"]))
    print("iterate: package lists/CLI by round: median %.2f, min %.2f, "
          "max %.2f" % (lists[len(lists) // 2], lists[0], lists[-1]))
    return {"py_iter_mbs": mb / best["bytes"],
            "py_iter_ratio_median": ratios[len(ratios) // 2],
            "py_iter_ratio_min": ratios[0],
            "py_iter_ratio_max": ratios[-1],
            "py_iter_str_mbs": mb / best["str"],
            "py_iter_cli_mbs": mb / best["cli"],
            "py_iter_ratio": best["cli"] / best["bytes"],
            "py_iter_str_ratio": best["cli"] / best["str"],
            "py_iter_mrecs": want / best["bytes"] / 1e6,
            "py_iter_batches_mbs": mb / best["batches"],
            "py_iter_batches_ratio_median": lists[len(lists) // 2]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--ember", default="./ember", help="the CLI")
    ap.add_argument("--dir", help="for the plans and the data file "
                    "(default: a temporary directory)")
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=["tasks", "jobs", "iterate"])
    args = ap.parse_args()
    if not os.access(args.ember, os.X_OK):
        ap.error("no CLI at %s (--ember)" % args.ember)

    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        # When run as root, emberd runs root's jobs as nobody.
        os.chmod(directory, 0o755)
        results = {}
        with ember.connect(args.socket) as sc:
            for name, fn in (("tasks", bench_tasks), ("jobs", bench_jobs),
                             ("iterate", bench_iterate)):
                if args.only in (None, name):
                    results.update(fn(args, sc, directory))
    for k, v in results.items():
        print("result %s %.2f" % (k, v))


if __name__ == "__main__":
    main()
