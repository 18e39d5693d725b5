"""Worker messages that no real worker sends: counts and metrics below
zero or past an int64, forged onto a worker's socket by forge_udf.so.
emberd refuses each as a corrupt worker message (docs/protocol.md): it
kills the worker, fails the task, and stays up for the next job."""

import os
import re
import time

from harness import *

FORGE = job_readable(os.path.join(BUILDDIR, "tests", "integration",
                                  "forge_udf.so"))
INT64_MAX = (1 << 63) - 1
RECORDS_OUT = 1		# common/protocol.h: enum ember_metric
ELAPSED_NS = 3


def forged(records, message, value, metric=None, more=None):
    """A plan of one partition per record whose last partition ends with
    the forged message, the others as they run."""
    args = {"partition": len(records) - 1, "message": message,
            "value": value}
    if metric is not None:
        args["metric"] = metric
    args.update(more or {})
    return records_plan(records, len(records), ops=[{"udf": {
        "library": FORGE, "symbol": "udf_forge", "args": args}}])


def wait_forgers_gone(d):
    """Wait until emberd has retired every worker that forged a message:
    killed as corrupt, or seen exiting after a forgery it took (until then
    it may hand that worker the next task)."""
    def gone():
        log = d.log_text()
        pids = re.findall(r"forge_udf: worker (\d+) forged", log)
        return pids and all("worker %s retired" % p in log for p in pids)
    check(wait_until(gone, 10), "forging workers not retired:\n%s" %
          d.log_tail())


def refused(d, c, plan, action):
    """The job fails as a corrupt worker message, its worker is killed, and
    a job after it runs."""
    check_error(c.execute(plan, action), "TASK_FAILED",
                "worker sent a corrupt message")
    check("; killing it" in d.log_text(), "no worker killed as corrupt:\n%s"
          % d.log_tail())
    wait_forgers_gone(d)
    check_eq(c.count(range_plan(0, 100, 2)), 100, "count after")


def test_forged_in_range_taken(d):
    """What the plugin forges is taken while it is in range: the other
    cases fail for their values alone."""
    c = d.client()
    check_eq(c.count(forged(["x", "y"], "metrics", 5, RECORDS_OUT)), 6,
             "count of a real partition and a forged one")
    wait_forgers_gone(d)
    reply = c.execute(forged(["a", "a"], "counts", 3), "count_by_value")
    check(reply["ok"], "count_by_value: %r" % reply)
    check_eq(reply["counts"], {"a": 4}, "counts")


def test_records_out_overflow(d):
    """A partition that claims INT64_MAX records, after one that has one."""
    refused(d, d.client(), forged(["x", "y"], "metrics", INT64_MAX,
                                  RECORDS_OUT), "count")


def test_records_out_negative(d):
    refused(d, d.client(), forged(["x"], "metrics", -5, RECORDS_OUT),
            "count")


def test_elapsed_claim_not_believed(d):
    """A task that claims to have taken INT64_MAX nanoseconds: emberd
    times its tasks itself, so the claim sums into nothing and the job
    ends as it would without it."""
    c = d.client()
    check_eq(c.count(forged(["x", "y"], "metrics", INT64_MAX, ELAPSED_NS)),
             1, "count of a real partition and a forged one")
    wait_forgers_gone(d)
    check_eq(c.count(range_plan(0, 100, 2)), 100, "count after")


def test_counts_overflow(d):
    """count_by_value's partial counts of one record past an int64."""
    refused(d, d.client(), forged(["a", "a"], "counts", INT64_MAX),
            "count_by_value")


def test_counts_negative(d):
    refused(d, d.client(), forged(["x"], "counts", -1), "count_by_value")


# Record batches whose header lies about the frames behind it: (records
# claimed, payload bytes, the first frame's length).
LYING_BATCHES = [
    (1, 4, 100),	# a frame of 100 bytes, none of them sent
    (10, 0, 0),		# ten records in no bytes
    (1, 8, -7),		# a frame length below zero, no special one
    (0, 4, 0),		# bytes that are no record
    (3, 8, 0),		# fewer records than it says
]


def lying(records, length, frame):
    """A one-partition plan whose batch claims records in length bytes."""
    return forged(["x"], "batch", length,
                  more={"records": records, "frame": frame})


def stream_refused(d, options):
    """Each lying batch, relayed with options, fails its partition as a
    corrupt worker message; emberd stays up."""
    for records, length, frame in LYING_BATCHES:
        c = d.client()
        plan = lying(records, length, frame)
        c.execute_ok(plan, "iterate", options)
        c.write_int(REQUEST_NEXT)
        status, payload = c.read_partition()
        check_eq(status, STREAM_ERROR, "response to batch %r: %r" %
                 ((records, length, frame), payload))
        check("worker sent a corrupt message" in payload,
              "error %r" % payload)
        c.close()
        check(d.alive(), "emberd died of batch %r:\n%s" %
              ((records, length, frame), d.log_tail()))
    wait_forgers_gone(d)
    check_eq(d.client().count(range_plan(0, 100, 2)), 100, "count after")


def test_lying_batch_with_limit(d):
    """options.limit walks the batch to cut it: a lie must not reach it."""
    stream_refused(d, {"limit": 1})


def test_lying_batch_streamed(d):
    stream_refused(d, None)


def test_lying_batch_replayed(d):
    """A reattach inside a batch walks the retry buffer's copy of it: a
    lie must never be buffered.  The stream is cut after the first
    response, and the reattach asks for the fifth record."""
    c = d.client()
    c.hello()
    plan = lying(10, 0, 0)
    op = c.execute_ok(plan, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    c.read_int()
    session = c.session
    c.close_abruptly()
    c2 = d.client()
    c2.hello(session=session)
    reply = c2.request({"op": "reattach", "operation": op, "partition": 0,
                        "offset": 5})
    if reply.get("ok"):
        status, payload = c2.read_partition()
        check(status in (STREAM_ERROR, EXCEPTION_THROWN),
              "reattached stream: %r %r" % (status, payload))
    else:
        check_error(reply, "OPERATION_FINISHED",
                    "worker sent a corrupt message")
    check(d.alive(), "emberd died of a replayed batch:\n%s" %
          d.log_tail())
    wait_forgers_gone(d)
    check_eq(d.client().count(range_plan(0, 100, 2)), 100, "count after")


def test_lying_batch_counts(d):
    """The reply actions' reader refuses the same lies."""
    for records, length, frame in LYING_BATCHES:
        refused(d, d.client(), lying(records, length, frame),
                "count_by_value")


def forged_ends(n, first, count=1):
    """A one-partition plan whose worker answers with a TASKS_DONE of n
    ends, naming partitions first, first + 1..., count records each."""
    return forged(["x"], "done", n, more={"first": first, "count": count})


def test_forged_task_ends_taken(d):
    """A TASKS_DONE that ends exactly the task its worker holds is the
    task's end, its count taken as any end's."""
    c = d.client()
    check_eq(c.count(forged_ends(1, 0, 7)), 7, "count of the forged end")
    wait_forgers_gone(d)


def test_forged_task_ends_refused(d):
    """A TASKS_DONE with more ends than the worker holds tasks, or one
    naming a partition it does not hold, ends nothing: a corrupt message."""
    for n, first, why in [(2, 0, "more task ends than tasks"),
                          (1, 5, "a task end for another partition"),
                          (3, 0, "more task ends than tasks")]:
        refused(d, d.client(), forged_ends(n, first), "count")
        check(why in d.log_text(), "not refused as %r:\n%s" %
              (why, d.log_tail()))


def fork_server_socket(d):
    """emberd's link to its fork-server, taken from the fork-server (fd
    3) with pidfd_getfd: what the fork-server itself could write."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(d.forkserver_pid())
    try:
        fd = libc.syscall(438, pidfd, 3, 0)	# SYS_pidfd_getfd
        check(fd >= 0, "pidfd_getfd: %s" % os.strerror(ctypes.get_errno()))
        return fd
    finally:
        os.close(pidfd)


def test_forkserver_malformed_packet(d):
    """A packet of the wrong size from a fork-server is a corrupt message:
    emberd kills that fork-server, starts another, and jobs go on."""
    c = d.client()
    check_eq(c.count(range_plan(0, 100, 2)), 100, "count before")
    first = d.forkserver_pid()
    fd = fork_server_socket(d)
    try:
        os.write(fd, b"x" * 17)
    finally:
        os.close(fd)
    check(wait_until(lambda: "sent a malformed packet; killing it" in
                     d.log_text(), 10),
          "no fork-server killed as corrupt:\n%s" % d.log_tail())

    def restarted():
        try:
            return d.forkserver_pid(timeout=0.5) != first
        except AssertionError:
            return False
    check(wait_until(restarted, 10), "the fork-server was not started again")
    check_eq(c.count(range_plan(0, 100, 2)), 100, "count after")


def emberd_fds(d):
    """How many descriptors emberd holds."""
    return len(os.listdir("/proc/%d/fd" % d.pid))


def send_packets(fd, packets):
    """Send fork-server packets on its link: (type, id, pid, value, fd or
    None) each; how many went before the link closed or filled."""
    import socket
    import struct
    s = socket.socket(fileno=os.dup(fd))
    s.setblocking(False)
    sent = 0
    try:
        for t, i, pid, value, passed in packets:
            msg = struct.pack(">iiii", t, i, pid, value)
            try:
                if passed is None:
                    s.send(msg)
                else:
                    socket.send_fds(s, [msg], [passed])
            except OSError:
                break
            sent += 1
    finally:
        s.close()
    return sent


FS_FORKED = 3		# common/protocol.h: enum fs_msg_type


@with_daemon(sets=["workers.max=2"])
def test_forkserver_unasked_workers_refused(d):
    """A fork-server (the user's process: a Python broadcast unpickles
    in it) that sends FS_FORKED for workers emberd never asked for would
    have emberd hold each one's descriptor and count it a worker, past
    workers.max and emberd's own descriptor limit.  The first is refused:
    the fork-server is killed, and the next one serves."""
    import socket
    c = d.client()
    check_eq(c.count(range_plan(0, 100, 2)), 100, "count before")
    wait_until(lambda: len(c.status()["workers"]) == 2, 5)
    before = emberd_fds(d)
    fd = fork_server_socket(d)
    pairs = [socket.socketpair() for _ in range(200)]
    try:
        send_packets(fd, [(FS_FORKED, 0, 4000000 + i, 0, a.fileno())
                          for i, (a, _) in enumerate(pairs)])
    finally:
        os.close(fd)
        for a, b in pairs:
            a.close()
    for _, b in pairs:
        b.close()
    wait_steady(lambda: emberd_fds(d), 5)
    check(emberd_fds(d) < before + 10, "emberd holds %d descriptors, %d "
          "before" % (emberd_fds(d), before))
    workers = c.status()["workers"]
    check(len(workers) <= 2, "%d workers past workers.max=2" % len(workers))
    check("FS_FORKED for a worker emberd did not ask for" in d.log_text(),
          "no fork-server refused:\n%s" % d.log_tail())
    check_eq(c.count(range_plan(0, 100, 2)), 100, "count after")


@with_daemon(sets=["workers.max=1", "workers.idle_timeout=100ms"])
def test_forkserver_worker_without_a_socket_refused(d):
    """A fork-server that answers a fork request with a descriptor that
    is no socket (a pipe, a file) is refused: emberd would otherwise
    take it for the worker's socket and write tasks into it."""
    import signal
    import socket
    c = d.client()
    check_eq(c.count(range_plan(0, 100, 1)), 100, "count before")
    check(wait_until(lambda: not c.status()["workers"], 10),
          "the idle worker stayed")
    fs = d.forkserver_pid()
    os.kill(fs, signal.SIGSTOP)
    try:
        job = in_thread(d.client().count, range_plan(0, 100, 1))
        check(wait_until(lambda: any(p["starting"] > 0 for p in
                                     c.status()["pools"]), 10),
              "no worker asked for")
        r, w = os.pipe()
        fd = fork_server_socket(d)
        try:
            send_packets(fd, [(FS_FORKED, 1, 4000000, 0, r)])
        finally:
            os.close(fd)
            os.close(r)
        check(wait_until(lambda: "descriptor that is not its socket" in
                         d.log_text(), 10),
              "no fork-server refused:\n%s" % d.log_tail())
    finally:
        try:
            os.kill(fs, signal.SIGCONT)
        except ProcessLookupError:
            pass
    check_eq(job(), 100, "the job, on the next fork-server")
    os.close(w)


@with_daemon(sets=["workers.max=1", "workers.idle_timeout=100ms",
                   "python.broadcast_preload_timeout=1s"])
def test_forkserver_stopped_by_its_user_is_replaced(d):
    """The user may stop their own fork-server (SIGSTOP: it runs as
    them); the forks asked for then would wait, holding their places in
    workers.max, everyone's, for as long as the user likes.  A fork
    request unanswered past python.broadcast_preload_timeout has the
    fork-server killed and started again, and the job runs."""
    import signal
    c = d.client()
    check_eq(c.count(range_plan(0, 100, 1)), 100, "count before")
    check(wait_until(lambda: not c.status()["workers"], 10),
          "the idle worker stayed")
    os.kill(d.forkserver_pid(), signal.SIGSTOP)
    job = in_thread(d.client().count, range_plan(0, 100, 1))
    check_eq(job(20), 100, "the job, on the next fork-server")
    check("fork requests not answered" in d.log_text(),
          "no fork-server replaced:\n%s" % d.log_tail())


FROZEN_CLOCK = job_readable(os.path.join(BUILDDIR, "tests", "integration",
                                         "frozen_clock.so"))
SLOW = job_readable(os.path.join(BUILDDIR, "tests", "integration",
                                 "slow_udf.so"))


@with_daemon(sets=["workers.max=2", "workers.env=LD_PRELOAD ASAN_OPTIONS"],
             env={"LD_PRELOAD": FROZEN_CLOCK,
                  # A sanitized emberd takes a preload after its runtime.
                  "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
                  ":verify_asan_link_order=0"})
def test_claimed_task_time_not_trusted(d):
    """Workers whose tasks all claim to take no time are not handed a
    millisecond's worth of them each (up to 256): emberd sizes a worker's
    queue by the time it sees tasks take, so 50 ms tasks stay a few in
    flight, and other users' jobs find workers."""
    plan = range_plan(0, 40, 40, ops=[{"udf": {
        "library": SLOW, "symbol": "udf_slow", "args": {"ms": 50}}}])
    with d.client() as c:
        c.send_json({"op": "execute", "plan": plan, "action": "count"})
        most = 0
        with d.client() as watcher:
            check(wait_until(lambda: watcher.status()["operations"], 10),
                  "the count never started")
            while True:
                ops = watcher.status()["operations"]
                if not ops:
                    break
                most = max([most] + [o["running"] for o in ops])
                time.sleep(0.02)
        reply = c.recv_json()
    check(reply.get("ok"), "count: %r" % reply)
    check_eq(reply.get("count"), 40, "count")
    check(most <= 8, "tasks in flight at once: %d" % most)


@with_lingering_workers("workers.max=1", "workers.reuse=no")
def test_fresh_worker_that_lingers_is_killed(d):
    """A fresh worker that stays on after emberd closed its socket (its
    user's code can do that) does not keep its place in workers.max: it
    is killed after a deadline, and the next tasks get workers."""
    with d.client() as c:
        check_eq(c.count(range_plan(0, 30, 3, ops=[{"map": "upper"}])), 30,
                 "a job of three fresh workers, one at a time")
        check(wait_until(
            lambda: c.status()["counters"]["workers_killed"] == 3, 5),
            "workers killed: %r" % c.status()["counters"]["workers_killed"])
        check(wait_until(lambda: not c.status()["workers"], 5),
              "workers left: %r" % c.status()["workers"])



@with_lingering_workers("workers.max=1", "workers.max_tasks=1")
def test_retired_worker_that_lingers_is_killed(d):
    """A worker retired idle (here for workers.max_tasks) that stays on
    after emberd closed its socket is killed after the deadline, as a
    fresh one is, and the next tasks get workers."""
    with d.client() as c:
        for i in range(3):
            check_eq(c.count(range_plan(0, 10, 1, ops=[{"map": "upper"}])),
                     10, "job %d" % (i + 1))
        check(wait_until(
            lambda: c.status()["counters"]["workers_killed"] == 3, 5),
            "workers killed: %r" % c.status()["counters"]["workers_killed"])
        check(wait_until(lambda: not c.status()["workers"], 5),
              "workers left: %r" % c.status()["workers"])
    # Killed by the deadline, not at once as they were retired.
    check_eq(d.log_text().count("after its socket closed; killing it"), 3,
             "workers killed after the deadline")


if __name__ == "__main__":
    run_tests(globals())
