"""A task whose worker is lost runs again (workers.task_retries): a
worker killed from outside, or its fork-server gone, costs a rerun of that
task alone, not the job.  Only deterministic plans are run again; a task
that failed of itself (an error, a crash signal) fails the job as before,
and a stream's retried partition resumes after the last record sent."""

import os
import signal
import sys

from harness import *

sys.path.insert(0, os.path.join(SRCDIR, "python"))
from ember import functions  # noqa: E402

SLOW = job_readable(os.path.join(BUILDDIR, "tests", "integration",
                                 "slow_udf.so"))


def slow(ms, pad=0, partition=None):
    args = {"ms": ms, "pad": pad}
    if partition is not None:
        args["partition"] = partition
    return {"udf": {"library": SLOW, "symbol": "udf_slow", "args": args}}


def busy_worker(c, timeout=10.0, besides=()):
    """The pid of a worker running a task, other than those in besides."""
    def find():
        for w in c.status()["workers"]:
            if w["state"] == "busy" and w["pid"] not in besides:
                return w["pid"]
        return None
    pid = wait_until(find, timeout)
    check(pid is not None, "no busy worker")
    return pid


def counters(c):
    return c.status()["counters"]


@with_daemon(sets=["workers.max=2"])
def test_count_survives_a_killed_worker(d):
    """The seed's case: one worker of a count SIGKILLed; the count is
    right, and only that task ran again."""
    c = d.client()
    c.send_json({"op": "execute", "action": "count",
                 "plan": range_plan(0, 40, 4, ops=[slow(50)])})
    watcher = d.client()
    os.kill(busy_worker(watcher), signal.SIGKILL)
    reply = c.recv_json()
    check(reply.get("ok"), "count: %r" % reply)
    check_eq(reply["count"], 40, "count")
    check_eq(counters(watcher)["tasks_retried"], 1, "tasks retried")
    check_eq(counters(watcher)["tasks"], 4, "tasks made")
    check("running it again (retry 1 of workers.task_retries 3)" in
          d.log_text(), "no retry logged:\n%s" % d.log_tail())


def worker_of_partition(c, partition, timeout=10.0):
    """The pid of the worker whose head task is partition."""
    def find():
        for w in c.status()["workers"]:
            if w.get("task", {}).get("partition") == partition:
                return w["pid"]
        return None
    pid = wait_until(find, timeout)
    check(pid is not None, "no worker runs partition %d" % partition)
    return pid


@with_daemon(sets=["workers.max=2"])
def test_worker_lost_mid_batch(d):
    """Tiny tasks share descriptors, and their ends one message: a worker
    killed inside its batch costs a rerun of the task it ran alone; the
    tasks of the batch behind it go back to the queue (no retry counted),
    those before it stay done, and the count is exact."""
    n, slow_one = 3000, 1500
    c = d.client()
    watcher = d.client()
    before = counters(watcher)["tasks_completed"]
    c.send_json({"op": "execute", "action": "count", "plan": range_plan(
        0, n, n, ops=[slow(3000, partition=slow_one)])})
    os.kill(worker_of_partition(watcher, slow_one), signal.SIGKILL)
    reply = c.recv_json()
    check(reply.get("ok"), "count: %r" % reply)
    check_eq(reply["count"], n, "count")
    after = counters(watcher)
    check_eq(after["tasks_retried"], 1, "tasks retried")
    check_eq(after["tasks"], n, "tasks made")
    check_eq(after["tasks_completed"] - before, n, "tasks completed")
    check("running it again (retry 1 of workers.task_retries 3)" in
          d.log_text(), "no retry logged:\n%s" % d.log_tail())


@with_daemon(sets=["workers.max=1"])
def test_stream_resumes_after_the_last_record(d):
    """Records already sent are not sent again: every record once, in
    order, across the kill."""
    c = d.client()
    n = 16
    plan = range_plan(0, n, 1, ops=[slow(60, pad=40000)])
    c.execute_ok(plan, "iterate")
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    got = [c.read_record() for _ in range(3)]
    os.kill(busy_worker(d.client()), signal.SIGKILL)
    while True:
        rec = c.read_record()
        if rec == END_OF_DATA_SECTION:
            break
        check(not isinstance(rec, int), "special length %r after %d "
              "records" % (rec, len(got)))
        got.append(rec)
    keys = [r.rstrip(b".").decode() for r in got]
    check_eq(keys, [str(i) for i in range(n)], "records")
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_DONE, "end of the stream")
    check_eq(counters(c)["tasks_retried"], 1, "tasks retried")


@with_daemon(sets=["workers.max=1", "workers.task_retries=2"])
def test_retries_are_bounded(d):
    """A task lost more often than workers.task_retries fails the job,
    naming the last loss."""
    c = d.client()
    c.send_json({"op": "execute", "action": "count",
                 "plan": range_plan(0, 100, 1, ops=[slow(50)])})
    watcher = d.client()
    killed = []
    for _ in range(3):
        pid = busy_worker(watcher, besides=killed)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    msg = check_error(c.recv_json(), "TASK_FAILED", "SIGKILL")
    check("worker %d" % killed[-1] in msg, "%r names not the last worker"
          % msg)
    check_eq(counters(watcher)["tasks_retried"], 2, "tasks retried")


@with_daemon(sets=["workers.max=1"])
def test_crash_signal_is_not_retried(d):
    """SIGSEGV is a crash of the task's own: no rerun."""
    c = d.client()
    c.send_json({"op": "execute", "action": "count",
                 "plan": range_plan(0, 100, 1, ops=[slow(50)])})
    watcher = d.client()
    os.kill(busy_worker(watcher), signal.SIGSEGV)
    check_error(c.recv_json(), "TASK_FAILED", "SIGSEGV")
    check_eq(counters(watcher)["tasks_retried"], 0, "tasks retried")


@with_daemon(sets=["workers.max=1"])
def test_pipe_is_not_retried(d):
    """A plan with a pipe may not give the same records twice: a lost
    task of it fails the job."""
    c = d.client()
    c.send_json({"op": "execute", "action": "count",
                 "plan": records_plan(["x"], 1, ops=[{"pipe": {
                     "command": "exec sleep 30"}}])})
    os.kill(d.worker_running("sleep 30"), signal.SIGKILL)
    check_error(c.recv_json(), "TASK_FAILED", "SIGKILL")
    check_eq(counters(d.client())["tasks_retried"], 0, "tasks retried")


@with_daemon(sets=["workers.max=2"])
def test_forkserver_lost_mid_job(d):
    """The fork-server killed: its workers go with it, and their tasks
    run again once it is back."""
    c = d.client()
    c.send_json({"op": "execute", "action": "count",
                 "plan": range_plan(0, 40, 4, ops=[slow(50)])})
    watcher = d.client()
    busy_worker(watcher)
    os.kill(d.forkserver_pid(), signal.SIGKILL)
    reply = c.recv_json()
    check(reply.get("ok"), "count: %r" % reply)
    check_eq(reply["count"], 40, "count")
    check(counters(watcher)["tasks_retried"] >= 1, "no task retried")


@with_daemon(sets=["workers.max=1", "workers.task_retries=0"])
def test_retries_off(d):
    c = d.client()
    c.send_json({"op": "execute", "action": "count",
                 "plan": range_plan(0, 100, 1, ops=[slow(50)])})
    os.kill(busy_worker(d.client()), signal.SIGKILL)
    check_error(c.recv_json(), "TASK_FAILED", "SIGKILL")


def slow_python_map(deterministic):
    import time

    def slow(s):
        time.sleep(0.05)
        return s
    return functions.python_op("map", slow, deterministic=deterministic)


@needs_python
@with_daemon(sets=["workers.max=1"])
def test_python_function_retried_only_when_deterministic(d):
    """A Python function is run again only when its client says it is
    deterministic (as ember.pyspark does for every function)."""
    watcher = d.client()
    for deterministic in (False, True):
        c = d.client()
        c.send_json({"op": "execute", "action": "count", "plan": range_plan(
            0, 100, 1, ops=[slow_python_map(deterministic)])})
        os.kill(busy_worker(watcher), signal.SIGKILL)
        reply = c.recv_json()
        if deterministic:
            check(reply.get("ok"), "count: %r" % reply)
            check_eq(reply["count"], 100, "count")
        else:
            check_error(reply, "TASK_FAILED", "SIGKILL")
    check_eq(counters(watcher)["tasks_retried"], 1, "tasks retried")


if __name__ == "__main__":
    run_tests(globals())
