#!/usr/bin/env python3
"""What one small job costs emberd in system calls: the request/reply path
of docs/design.md ("One job's round trip").

A count of one partition on a warm worker is, in principle, a read of the
request, a write of the task to the worker, a read of its reply and a
write of the answer, with one wait of the loop before each read.  strace
-c counts emberd's calls across many such jobs on one connection: the
answer is written straight away (no write event armed, no loop pass for
it), and an operation's id costs one getrandom, not libuuid's reseeding.
"""

import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403

STRACE = shutil.which("strace")
NEEDS_STRACE = skip_unless(STRACE is not None, "strace is not installed")
JOBS = 200


def _traced_by(pid, tracer):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1]) == tracer
    except OSError:
        pass
    return False


def count_syscalls(d, c, plan, jobs):
    """Run jobs counts of plan on c under strace -c on emberd; the calls
    of each system call made meanwhile, by name."""
    out = d.path("strace.out")
    proc = subprocess.Popen([STRACE, "-c", "-o", out, "-p", str(d.pid)],
                            stdin=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        check(wait_until(lambda: _traced_by(d.pid, proc.pid), 10),
              "strace did not attach to emberd %d" % d.pid)
        for _ in range(jobs):
            check_eq(c.count(plan), 1, "a count under strace")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    calls = {}
    with open(out) as f:
        for line in f:
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?"
                         r"(\w+)\s*$", line)
            if m and m.group(2) != "total":
                calls[m.group(2)] = int(m.group(1))
    return calls


@NEEDS_STRACE
@with_daemon(sets=["daemon.log_level=info"])	# no debug line per job
def test_count_syscalls(d):
    plan = range_plan(0, 1, 1)
    with d.client() as c:
        for _ in range(20):		# a warm worker, its pool grown
            check_eq(c.count(plan), 1, "a warm-up count")
        calls = count_syscalls(d, c, plan, JOBS)
    per_job = {k: v / JOBS for k, v in calls.items()}
    # The answer is not left to the loop: no write event armed and
    # disarmed per job, and no loop pass to write it.
    check(per_job.get("epoll_ctl", 0) < 0.1,
          "epoll_ctl per job: %r" % per_job)
    check(per_job.get("epoll_wait", 0) <= 2.1,
          "epoll_wait per job: %r" % per_job)
    check(per_job.get("writev", 0) + per_job.get("write", 0) <= 2.1,
          "writes per job: %r" % per_job)
    # A new operation's id: one getrandom, nothing else.
    for name in ("getpid", "getppid", "gettid", "getuid"):
        check(per_job.get(name, 0) < 0.1, "%s per job: %r" %
              (name, per_job))
    check(per_job.get("getrandom", 0) <= 1.1,
          "getrandom per job: %r" % per_job)


if __name__ == "__main__":
    run_tests(globals())
