#!/usr/bin/env python3
"""Per-task time of Python's multiprocessing.Pool, the peer ember is held to.

Pool(2).map(f, range(N), chunksize=1) with f the identity: every element is
one task sent to a worker process and one result sent back.  The pool is
started and warmed up first; the figure is the best of a few timed maps.
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
    args = ap.parse_args()

    expect = list(range(args.tasks))
    times = []
    with multiprocessing.Pool(args.processes) as pool:
        pool.map(ident, range(1000), chunksize=1)
        for _ in range(args.runs):
            t0 = time.perf_counter()
            got = pool.map(ident, range(args.tasks), chunksize=1)
            times.append(time.perf_counter() - t0)
            if got != expect:
                raise SystemExit("Pool.map returned wrong results")

    times.sort()
    best = times[0] * 1e6 / args.tasks
    median = times[len(times) // 2] * 1e6 / args.tasks
    print(f"python Pool({args.processes}).map: {args.tasks} tasks, "
          f"chunksize=1, x {args.runs}: best {best:.2f} us/task, "
          f"median {median:.2f} us/task")
    print(f"result pool_us {best:.2f}")


if __name__ == "__main__":
    main()
