"""Workers that die, descriptors that run short, clients that come and go:
emberd reports what happened and keeps serving."""

import os
import re
import signal
import socket

from harness import *

SLEEPER = records_plan(["x"], 1, ops=[{"pipe": {"command": "sleep 30"}}])


def _check_killed_message(message, pid):
    check("partition 0" in message, "%r does not name the partition" %
          message)
    check("worker %d" % pid in message, "%r does not name worker %d" %
          (message, pid))
    check("SIGKILL" in message or re.search(r"signal 9\b", message),
          "%r does not name SIGKILL" % message)


def test_worker_killed_mid_task(d):
    c = d.client()
    c.execute_ok(SLEEPER, "iterate")
    c.write_int(REQUEST_NEXT)
    pid = d.worker_running("sleep 30")
    os.kill(pid, signal.SIGKILL)
    status, message = c.read_partition()
    check_eq(status, STREAM_ERROR, "response (payload %r)" % (message,))
    _check_killed_message(message, pid)
    check(d.alive(), "emberd died")
    check_eq(c.count(range_plan(0, 1000, 4)), 1000, "the next job")
    check_eq(d.client().iterate_all(range_plan(0, 100, 5)), numbers(100),
             "a new client")


def test_worker_killed_during_collect(d):
    c = d.client()
    c.execute_ok(SLEEPER, "collect")
    pid = d.worker_running("sleep 30")
    os.kill(pid, signal.SIGKILL)
    status, message = c.read_partition()
    check_eq(status, STREAM_ERROR, "response (payload %r)" % (message,))
    _check_killed_message(message, pid)
    check_eq(c.count(range_plan(0, 10, 2)), 10, "the next job")


def test_worker_killed_during_count(d):
    c = d.client()
    c.send_json({"op": "execute", "plan": SLEEPER, "action": "count"})
    pid = d.worker_running("sleep 30")
    os.kill(pid, signal.SIGKILL)
    msg = check_error(c.recv_json(), "TASK_FAILED")
    _check_killed_message(msg, pid)
    check_eq(c.count(range_plan(0, 10, 2)), 10, "the next job")


def test_idle_workers_killed(d):
    """Idle workers that die between jobs are replaced."""
    c = d.client()
    check_eq(c.count(range_plan(0, 100000, 8)), 100000, "first job")
    workers = d.worker_pids()
    for pid in workers:
        kill_quietly(pid)
    check(wait_until(lambda: all("worker %d retired" % p in d.log_text()
                                 for p in workers), 10),
          "emberd did not see its idle workers die:\n%s" % d.log_tail())
    check(d.alive(), "emberd died")
    check_eq(c.iterate_all(range_plan(0, 1000, 8)), numbers(1000),
             "a job after the idle workers died")
    check_eq(c.count(range_plan(0, 1000, 8)), 1000, "and another")


@with_daemon(sets=["workers.fork_backoff=100ms"])
def test_crash_storm(d):
    """Workers crashing in a row do not stop emberd from serving."""
    c = d.client()
    for i in range(5):
        r = c.execute(records_plan(["x"], 1, ops=[
            {"pipe": {"command": "kill -9 $PPID"}}]), "count")
        check_error(r, "TASK_FAILED")
    check_eq(c.count(range_plan(0, 1000, 4)), 1000, "a job after crashes")


@with_daemon(nofile=1024, sets=["workers.max=8"])
def test_many_partitions_low_nofile(d):
    c = d.client()
    parts = c.iterate_partitions(range_plan(0, 11000, 1100))
    check_eq(len(parts), 1100, "partitions")
    check_eq([r for p in parts for r in p], numbers(11000), "iterate")
    check_eq(c.count(range_plan(0, 11000, 1100)), 11000, "count")
    check_eq(c.collect_all(range_plan(0, 1100, 1100)), numbers(1100),
             "collect")


@with_daemon(nofile=64, sets=["workers.max=2"])
def test_connections_past_nofile(d):
    """More connections than descriptors: emberd refuses or delays some,
    and serves again once they close."""
    socks = []
    try:
        for _ in range(100):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            try:
                s.connect(d.socket)
            except OSError:
                s.close()
                break
            socks.append(s)
        # emberd takes every one, serving it or refusing it past
        # daemon.max_connections, or runs out of descriptors and pauses.
        # (The harness's own probe was the first connection.)
        def taken():
            log = d.log_text()
            return (log.count(" from pid ") +
                    log.count("refusing a connection") > len(socks) or
                    "pausing accept" in log)
        check(wait_until(taken, 10),
              "emberd did not take the connections:\n%s" % d.log_tail())
        check(d.alive(), "emberd died with %d connections" % len(socks))
    finally:
        for s in socks:
            s.close()
    check(wait_until(lambda: _serves(d), 10),
          "emberd does not serve once the connections closed")
    check_eq(d.client().count(range_plan(0, 1000, 4)), 1000,
             "a job once the connections closed")


def _serves(d):
    """Does a new client get its hello answered within a second?"""
    try:
        with d.client(timeout=1):
            return True
    except (OSError, AssertionError):
        return False


def test_connect_and_vanish(d):
    for i in range(200):
        c = d.client(hello=(i % 2 == 0))
        if i % 3 == 0:
            c.send(b"\x00\x00")
        c.close_abruptly() if i % 5 == 0 else c.close()
    check_eq(d.client().count(range_plan(0, 1000, 4)), 1000, "a job after")


def test_concurrent_failures_and_successes(d):
    def good(k):
        with d.client() as c:
            return c.collect_all(range_plan(0, 5000 + k, 7))

    def bad(k):
        with d.client() as c:
            c.execute_ok(records_plan(["x"], 2, ops=[
                {"pipe": {"command": "echo no >&2; exit 9"}}]), "collect")
            status, message = c.read_partition()
            check_eq(status, STREAM_ERROR, "a failing job")
            return message
    goods = [in_thread(good, k) for k in range(4)]
    bads = [in_thread(bad, k) for k in range(4)]
    for k, join in enumerate(goods):
        check_eq(join(60), numbers(5000 + k), "good job %d" % k)
    for join in bads:
        check("no" in join(60), "the failing job's message")


def resolver_pid(d):
    """emberd's resolver of user lookups: a process of emberd's session
    with emberd's command line (a fork of it), not emberd itself."""
    sid, line = read_stat(d.pid)[4], cmdline(d.pid)
    for pid, st in process_table().items():
        if (pid != d.pid and st[4] == sid and st[1] not in ("Z", "X") and
                cmdline(pid) == line):
            return pid
    return None


def test_user_lookups_survive_their_resolver(d):
    """The resolver of user lookups killed: emberd starts another, and a
    client's hello, which waits for its user, is answered."""
    first = wait_until(lambda: resolver_pid(d), 10)
    check(first is not None, "no resolver")
    os.kill(first, signal.SIGKILL)
    check(wait_until(lambda: "the resolver exited" in d.log_text(), 10),
          "emberd did not see its resolver go:\n%s" % d.log_tail())
    check(wait_until(lambda: resolver_pid(d) not in (None, first), 10),
          "no resolver started again")
    with d.client() as c:
        check_eq(c.count(range_plan(0, 10, 2)), 10, "count after")


if __name__ == "__main__":
    run_tests(globals())
