#!/usr/bin/env python3
"""Per-task time of Python's multiprocessing.Pool, the peer ember is held to.

Pool(2).map(f, range(N), chunksize=1) with f the identity: every element is
one task sent to a worker process and one result sent back.  The pool is
started and warmed up first; the figure is the best of a few timed maps.
--method picks the start method (fork, spawn, forkserver; default: the
platform's), and --result names the figure printed for bench/run.sh.
"""

import argparse
import multiprocessing
import time


def ident(x):
    """Return the argument: the task does no work of its own."""
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--method", choices=["fork", "spawn", "forkserver"])
    ap.add_argument("--result", default="pool_us")
    args = ap.parse_args()

    expect = list(range(args.tasks))
    times = []
    ctx = multiprocessing.get_context(args.method)
    t0 = time.perf_counter()
    with ctx.Pool(args.processes) as pool:
        pool.map(ident, range(1000), chunksize=1)
        start = time.perf_counter() - t0
        for _ in range(args.runs):
            t0 = time.perf_counter()
            got = pool.map(ident, range(args.tasks), chunksize=1)
            times.append(time.perf_counter() - t0)
            if got != expect:
                raise SystemExit("Pool.map returned wrong results")

    times.sort()
    best = times[0] * 1e6 / args.tasks
    median = times[len(times) // 2] * 1e6 / args.tasks
    method = ctx.get_start_method()
    print(f"python Pool({args.processes}).map ({method}): {args.tasks} "
          f"tasks, chunksize=1, x {args.runs}: best {best:.2f} us/task, "
          f"median {median:.2f} us/task (start and warm-up {start:.3f} s)")
    print(f"result {args.result} {best:.2f}")


if __name__ == "__main__":
    main()
