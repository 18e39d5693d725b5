"""PySpark's own worker tests (python/pyspark/tests/test_worker.py), run
against ember.pyspark and the real emberd with only the import changed in
spirit: a job after a task raised runs, and the workers that did not fail
are reused (test_after_exception, worker reuse); 1,100 partitions under a
limit of 1,024 descriptors leak none (test_fd_leak); a worker killed
mid-task costs that task alone, the fork-server (PySpark's daemon.py)
lives on, and the next job runs (test_cancel_task's kill, then a job)."""

import os
import signal
import sys
import threading

from harness import *

sys.path.insert(0, os.path.join(SRCDIR, "python"))
import ember  # noqa: E402

class _Stop(Exception):
    pass


class _PlanRecorder:
    """Stands in for a session: keeps the plan an action sends, and
    stops it there."""

    parallelize = ember.session.Session.parallelize
    decode, errors = True, "strict"

    def __init__(self):
        self.plans = []

    def stream(self, plan, action, *args, **kw):
        self.plans.append(plan)
        raise _Stop()

    execute = stream


def _pyspark_jobs_retried():
    """Whether every op of an ember.pyspark job is sent deterministic, so
    that emberd may run a lost worker's task again."""
    from ember.pyspark import SparkContext
    sc = SparkContext.__new__(SparkContext)
    sc.session = _PlanRecorder()
    sc.defaultParallelism = 2
    try:
        sc.parallelize(range(1), 1).map(str).count()
    except _Stop:
        pass
    return all(op["python"].get("deterministic")
               for op in sc.session.plans[-1]["ops"] if "python" in op)


def _context(d):
    from ember.pyspark import SparkContext
    return SparkContext("local[2]", "test_worker", socket=d.socket)


def _pids(rdd):
    return set(rdd.map(lambda x: os.getpid()).collect())


def _open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def _raise_exception(_):
    raise RuntimeError("raised on purpose")


@needs_python
@with_daemon(sets=["workers.max=2"])
def test_reuse_worker_after_exception(d):
    """PySpark's test_after_exception and worker reuse: after a foreach
    that raised, the next job runs, the worker that raised is never used
    again, the one that did not is, and the fork-server is the same."""
    with _context(d) as sc:
        rdd = sc.parallelize(range(20), 8)
        before = _pids(rdd)
        forkserver = d.forkserver_pid()
        check_eq(_pids(rdd) <= before, True, "workers reused between jobs")
        try:
            sc.parallelize(range(100), 1).foreach(_raise_exception)
        except ember.PythonError as e:
            check("RuntimeError: raised on purpose" in e.traceback,
                  e.traceback)
            failed = int(e.worker)
        else:
            raise AssertionError("foreach did not raise")
        check(failed in before, "the failed task ran in a reused worker")
        check_eq(sc.parallelize(range(100), 1).map(str).count(), 100,
                 "a job after the exception")
        after = _pids(rdd) | _pids(rdd)
        check(failed not in after, "the worker that raised was reused")
        kept = before - {failed}
        if kept:
            check(kept & after, "the workers that did not raise (%s) were "
                  "not reused: %s" % (kept, after))
    check_eq(d.forkserver_pid(), forkserver, "fork-server")


@needs_python
@with_daemon(sets=["workers.max=2"], nofile=1024)
def test_fd_leak(d):
    """PySpark's test_fd_leak: 1,100 partitions, each a task, under a limit
    of 1,024 descriptors; then as many again, and neither emberd nor the
    fork-server holds one descriptor more than after the first."""
    n = 1100
    with _context(d) as sc:
        rdd = sc.parallelize(range(n), n)
        check_eq(rdd.map(lambda x: x).count(), n, "count")
        # A worker that meets Python has its fork-server start it, which
        # then closes the socket it was asked on: two descriptors fewer,
        # a moment after the job.
        check(wait_until(lambda: "Python started: the workers forked"
                         in d.log_text(), 10), "Python never started in "
              "the fork-server")
        fs = d.forkserver_pid()
        fds = (_open_fds(d.pid), _open_fds(fs))
        check_eq(rdd.count(), n, "count again")
        check_eq(rdd.map(lambda x: x + 1).count(), n, "a map's count")
        check_eq((_open_fds(d.pid), _open_fds(fs)), fds,
                 "descriptors of emberd and the fork-server")


def _sleep_once(marker):
    """A function that notes its process in marker and sleeps, the first
    time it runs; a rerun of its task returns at once."""
    def sleep(x):
        import time
        if os.path.exists(marker):
            return x
        with open(marker + ".tmp", "w") as f:
            f.write("%d %d" % (os.getppid(), os.getpid()))
        os.rename(marker + ".tmp", marker)
        time.sleep(100)
        return x
    return sleep


def _killed_mid_task(d, sc, marker):
    """Start a one-task job whose function sleeps, kill its worker with
    SIGKILL, and answer (the job's thread, the fork-server's pid, the
    killed worker's pid)."""
    rdd = sc.parallelize(range(1), 1).map(_sleep_once(marker))
    box = {}

    def run():
        try:
            box["count"] = rdd.count()
        except ember.EmberError as e:
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    check(wait_until(lambda: os.path.exists(marker), 30),
          "the task never started")
    with open(marker) as f:
        ppid, pid = map(int, f.read().split())
    os.kill(pid, signal.SIGKILL)
    t.join(30)
    check(not t.is_alive(), "the job hung after its worker was killed")
    return box, ppid, pid


@needs_python
@with_daemon(sets=["workers.max=2", "workers.task_retries=0"])
def test_job_after_killed_worker(d):
    """PySpark's test_cancel_task, without retries: the worker killed
    mid-task fails the job naming its pid and the signal, the fork-server
    (its parent) lives on, and the next job runs."""
    os.chmod(d.tmpdir, 0o777)
    with _context(d) as sc:
        box, ppid, pid = _killed_mid_task(d, sc, d.path("worker"))
        err = box.get("error")
        check(isinstance(err, ember.TaskFailed), "job: %r" % box)
        check_eq(int(err.worker), pid, "the failed worker")
        check("SIGKILL" in str(err), str(err))
        check_eq(ppid, d.forkserver_pid(), "the killed worker's parent")
        check(is_running(ppid), "the fork-server died with its worker")
        check_eq(sc.parallelize(range(100), 1).map(str).count(), 100,
                 "a job after the kill")
        check(pid not in {w["pid"] for w in sc.session.status()["workers"]},
              "the killed worker is still listed")


@needs_python
@with_daemon(sets=["workers.max=2"])
def test_killed_worker_task_retried(d):
    """With retries (the default), ember.pyspark's functions count as
    deterministic, as Spark takes them: the killed worker's task runs
    again and the job answers right; then the next job runs."""
    check(_pyspark_jobs_retried(), "ember.pyspark sends an op without "
          "deterministic: emberd may not run a lost worker's task again")
    os.chmod(d.tmpdir, 0o777)
    with _context(d) as sc:
        box, ppid, pid = _killed_mid_task(d, sc, d.path("worker"))
        check_eq(box, {"count": 1}, "the job")
        check_eq(sc.session.status()["counters"]["tasks_retried"], 1,
                 "tasks retried")
        check(is_running(ppid), "the fork-server died with its worker")
        check_eq(sc.parallelize(range(100), 1).map(str).count(), 100,
                 "a job after the kill")


if __name__ == "__main__":
    run_tests(globals())
