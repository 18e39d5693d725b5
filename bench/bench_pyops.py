#!/usr/bin/env python3
"""Python functions in plans, against baselines of the same run.

- tasks: a count of N one-record partitions through a Python map (every
  task dispatched, run in a reused worker and retired), against the same
  with the C `map upper`: the dummy task's time, in microseconds.
- upper: `map(lambda s: s.upper())` over R records (a range source, two
  partitions), counted, against the C `map upper` of the same records
  and against a plain Python loop over R str in this process.

Each run is checked (the counts, and emberd's tasks_completed counter),
the best of RUNS counts.  Without --socket it starts its own emberd
(workers.max=2) in a temporary directory and stops it on the way out.
The last lines are `result NAME VALUE`.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import ember  # noqa: E402


def best(fn, runs):
    """The best time of runs calls of fn, after a warm-up; fn checks its
    own result."""
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def tasks(sc, n, op):
    """Count n one-record partitions through op; check every task ran."""
    before = sc.status()["counters"]["tasks_completed"]
    ds = sc.range(n, partitions=n)
    got = (ds.map(op) if callable(op) else ds.map_upper()).count()
    done = sc.status()["counters"]["tasks_completed"] - before
    if got != n or done != n:
        raise SystemExit("bench_pyops: %d records, %d tasks, not %d"
                         % (got, done, n))


def upper(sc, n, python):
    ds = sc.range(n, partitions=2)
    ds = ds.map(lambda s: s.upper()) if python else ds.map_upper()
    if ds.count() != n:
        raise SystemExit("bench_pyops: upper lost records")


def loop(n):
    strs = [str(i) for i in range(n)]
    t0 = time.perf_counter()
    out = [s.upper() for s in strs]
    t = time.perf_counter() - t0
    if len(out) != n:
        raise SystemExit("bench_pyops: the loop lost records")
    return t


def start_emberd(builddir, tmp):
    sock = os.path.join(tmp, "e.sock")
    p = subprocess.Popen([os.path.join(builddir, "emberd"), "-f",
                          "--set", "daemon.socket=" + sock,
                          "--set", "daemon.log_level=warn",
                          "--set", "workers.max=2",
                          "--set", "checkpoint.dir=" +
                          os.path.join(tmp, "ck")])
    for _ in range(200):
        if os.path.exists(sock):
            return p, sock
        time.sleep(0.05)
    p.kill()
    raise SystemExit("bench_pyops: emberd did not start")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket")
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--records", type=int, default=1000000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    builddir = os.environ.get("EMBER_BUILDDIR") or os.path.dirname(HERE)

    tmp = proc = None
    sock = args.socket
    try:
        if sock is None:
            tmp = tempfile.mkdtemp(prefix="bench-pyops-")
            os.chmod(tmp, 0o755)
            proc, sock = start_emberd(builddir, tmp)
        with ember.connect(sock) as sc:
            n = args.tasks
            t_py = best(lambda: tasks(sc, n, lambda s: s), args.runs)
            t_c = best(lambda: tasks(sc, n, None), args.runs)
            r = args.records
            u_py = best(lambda: upper(sc, r, True), args.runs)
            u_c = best(lambda: upper(sc, r, False), args.runs)
        u_loop = min(loop(r) for _ in range(args.runs))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    print("tasks: %d one-record partitions: Python map %.0f us/task, "
          "C map upper %.0f us/task" % (n, t_py / n * 1e6, t_c / n * 1e6))
    print("upper: %d records: Python map %.2f s (%.2f M records/s), "
          "C map upper %.2f s, plain Python loop %.2f s"
          % (r, u_py, r / u_py / 1e6, u_c, u_loop))
    print("result pyops_task_us %.1f" % (t_py / n * 1e6))
    print("result c_task_us %.1f" % (t_c / n * 1e6))
    print("result pyops_upper_s %.3f" % u_py)
    print("result c_upper_s %.3f" % u_c)
    print("result python_loop_upper_s %.3f" % u_loop)


if __name__ == "__main__":
    main()
