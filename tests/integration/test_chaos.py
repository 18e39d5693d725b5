"""Chaos, in short: mixed jobs (streams, reply actions, text sources
that need a helper, saves) while a killer SIGKILLs emberd's workers,
helpers and now and then its fork-server at random.  No job may give a
wrong answer or hang; every save ends whole (its _SUCCESS and all its
records) or absent (no part file, no _SUCCESS); emberd stays up.  The
counts go to the log for the record."""

import collections
import socket
import os
import random
import signal
import threading
import time

from harness import *

SEED = int(os.environ.get("EMBER_CHAOS_SEED", "0")) or int(time.time())
JOBS = int(os.environ.get("EMBER_CHAOS_JOBS", "200"))
JOB_TIMEOUT = 60	# a job past this has hung


def fork_server_children(d):
    """Workers and helpers: the children of emberd's fork-servers."""
    table = process_table()
    servers = [p for p, st in table.items()
               if st[2] == d.pid and st[1] not in ("Z", "X")]
    return servers, [p for p, st in table.items()
                     if st[2] in servers and st[1] not in ("Z", "X")]


class Killer(threading.Thread):
    """SIGKILLs a child of the fork-server every 10 to 80 ms, and the
    fork-server itself one time in twenty-five."""

    def __init__(self, d, rng):
        super().__init__(daemon=True)
        self.d, self.rng = d, rng
        self.stop = threading.Event()
        self.kills = collections.Counter()

    def run(self):
        while not self.stop.wait(self.rng.uniform(0.01, 0.08)):
            servers, children = fork_server_children(self.d)
            if servers and self.rng.random() < 1 / 25:
                victim, what = self.rng.choice(servers), "fork-server"
            elif children:
                victim, what = self.rng.choice(children), "child"
            else:
                continue
            try:
                os.kill(victim, signal.SIGKILL)
                self.kills[what] += 1
            except ProcessLookupError:
                pass


def parts_of(path):
    return sorted(n for n in os.listdir(path) if n.startswith("part-"))


class Jobs:
    """The mixed jobs: each returns "ok", or an error class; a wrong
    answer raises."""

    def __init__(self, d):
        self.d = d
        self.text = os.path.join(job_readable_dir(d), "lines.txt")
        write_file(self.text, b"".join(b"line %d\n" % i
                                       for i in range(20000)))
        self.out = job_writable(d.path("out"))
        self.saves = 0

    def client(self):
        c = self.d.client()
        c.sock.settimeout(JOB_TIMEOUT)
        return c

    def reply(self, plan, action, options=None):
        c = self.client()
        try:
            r = c.execute(plan, action, options)
        finally:
            c.close()
        return r

    def count(self):
        r = self.reply(range_plan(0, 300000, 4,
                                  ops=[{"filter": {"contains": "7"}}]),
                       "count")
        if not r["ok"]:
            return r["error"]["class"]
        want = sum(1 for i in range(300000) if "7" in str(i))
        check_eq(r["count"], want, "count")
        return "ok"

    def iterate(self):
        c = self.client()
        try:
            got = c.iterate_all(range_plan(0, 60000, 3))
        except TaskFailed:
            return "TASK_FAILED"
        finally:
            c.close()
        check(got == numbers(60000), "iterate: %d records, not the "
              "range" % len(got))
        return "ok"

    def count_by_value(self):
        words = ["w%d" % (i % 37) for i in range(5000)]
        r = self.reply(records_plan(words, 4), "count_by_value")
        if not r["ok"]:
            return r["error"]["class"]
        check_eq(r["counts"], dict(collections.Counter(words)), "counts")
        return "ok"

    def reduce(self):
        r = self.reply(range_plan(0, 200000, 4), "reduce", {"fn": "sum"})
        if not r["ok"]:
            return r["error"]["class"]
        check_eq(int(r["value"]), sum(range(200000)), "sum")
        return "ok"

    def text_count(self):
        r = self.reply({"source": {"text": {"paths": [self.text]}},
                        "partitions": 3}, "count")
        if not r["ok"]:
            return r["error"]["class"]
        check_eq(r["count"], 20000, "text count")
        return "ok"

    def save(self, ops=None):
        self.saves += 1
        path = os.path.join(self.out, "s%d" % self.saves)
        r = self.reply(range_plan(0, 20000, 4, ops=ops), "save",
                       {"path": path})
        if r["ok"]:
            check(os.path.exists(os.path.join(path, "_SUCCESS")),
                  "save %s answered ok without _SUCCESS" % path)
            lines = []
            for name in parts_of(path):
                with open(os.path.join(path, name), "rb") as f:
                    lines += f.read().splitlines()
            check(lines == numbers(20000), "save %s: %d lines, not the "
                  "range" % (path, len(lines)))
            return "ok"
        # Absent: nothing of it in the path.
        if os.path.isdir(path):
            check_eq(parts_of(path), [], "part files of failed save %s "
                     "(%r)" % (path, r["error"]))
            check(not os.path.exists(os.path.join(path, "_SUCCESS")),
                  "failed save %s has _SUCCESS" % path)
        return r["error"]["class"]

    def save_pipe(self):
        """A save through a pipe: not run again when its worker is lost,
        so it fails, and must leave nothing."""
        return self.save(ops=[{"pipe": {"command": "sleep 0.05; cat"}}])

    def count_pipe(self):
        r = self.reply(range_plan(0, 20000, 4, ops=[{"pipe": {
            "command": "sleep 0.05; grep 7"}}]), "count")
        if not r["ok"]:
            return r["error"]["class"]
        check_eq(r["count"], sum(1 for i in range(20000) if "7" in str(i)),
                 "count through a pipe")
        return "ok"


def job_readable_dir(d):
    path = d.path("in")
    os.mkdir(path)
    os.chmod(path, 0o755)
    return path


def test_chaos(d):
    rng = random.Random(SEED)
    jobs = Jobs(d)
    kinds = [jobs.count, jobs.iterate, jobs.count_by_value, jobs.reduce,
             jobs.text_count, jobs.save, jobs.save_pipe, jobs.count_pipe]
    outcomes = collections.Counter()
    killer = Killer(d, random.Random(SEED + 1))
    killer.start()
    try:
        for i in range(JOBS):
            job = kinds[i % len(kinds)] if i < len(kinds) else \
                rng.choice(kinds)
            start = time.monotonic()
            try:
                what = job()
            except (socket.timeout, TimeoutError):
                raise AssertionError("job %d (%s) hung" % (i, job.__name__))
            check(time.monotonic() - start < JOB_TIMEOUT,
                  "job %d (%s) took too long" % (i, job.__name__))
            outcomes[(job.__name__, what)] += 1
            check(d.alive(), "emberd died during job %d" % i)
    finally:
        killer.stop.set()
        killer.join()
    ok = sum(n for (_, what), n in outcomes.items() if what == "ok")
    print("chaos: seed %d, %d jobs, %d ok, kills %s, outcomes %s" %
          (SEED, JOBS, ok, dict(killer.kills), dict(outcomes)))
    retried = d.client().status()["counters"]["tasks_retried"]
    print("chaos: %d tasks retried" % retried)
    check(ok >= JOBS // 3, "only %d of %d jobs succeeded" % (ok, JOBS))
    # And it works as new once the killing stops.
    check_eq(d.client().count(range_plan(0, 1000, 4)), 1000, "count after")


if __name__ == "__main__":
    run_tests(globals())
