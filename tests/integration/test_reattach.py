"""
Reattachable execution, after Spark Connect's ReattachableExecuteSuite:
sessions that outlive connections, streams cut on purpose and reattached
mid-partition and at boundaries in both modes, release, recompute beyond
the buffer, the reaper, session expiry, interrupt, another uid, and the
CLI through a proxy that cuts every connection.
"""

import http.client
import json
import os
import pwd
import re
import signal
import subprocess
import time
import traceback

from harness import (EMBER, REQUEST_NEXT, REQUEST_STOP, STREAM_DETACHED,
                     STREAM_DONE, STREAM_ERROR, STREAM_PARTITION,
                     END_OF_DATA_SECTION, check, check_eq, check_error,
                     numbers, range_plan, records_plan, run_cli, run_tests,
                     status_port, text_plan, wait_until, with_daemon)
from proxy import CuttingProxy

ROOT = os.geteuid() == 0
PLAN = range_plan(0, 20000, 4)		# 5000 records a partition
PARTS = [numbers(i * 5000, (i + 1) * 5000) for i in range(4)]


def read_records(c, n):
    """Read n records of the open partition."""
    got = []
    for _ in range(n):
        rec = c.read_record()
        check(isinstance(rec, bytes), "expected a record, got %r" % (rec,))
        got.append(rec)
    return got


def read_rest(c):
    """Read records up to END_OF_DATA_SECTION."""
    got = []
    while True:
        rec = c.read_record()
        if rec == END_OF_DATA_SECTION:
            return got
        check(isinstance(rec, bytes), "expected a record, got %r" % (rec,))
        got.append(rec)


def in_session(d, session):
    """A new connection that resumes session."""
    c = d.client(hello=False)
    c.request_ok({"op": "hello", "version": 1, "session": session})
    c.session = session
    return c


def open_stream(d, action="iterate", plan=PLAN, options=None):
    """Execute plan; for iterate, ask for partition 0.  Past its "1":
    (client, operation id)."""
    c = d.client()
    op = c.execute_ok(plan, action, options)["operation"]
    if action == "iterate":
        c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    return c, op


def reattach(d, session, op, partition, offset, expect_ok=True):
    """A new connection that resumes session and reattaches to op."""
    c = in_session(d, session)
    reply = c.request({"op": "reattach", "operation": op,
                       "partition": partition, "offset": offset})
    if expect_ok:
        check(reply.get("ok"), "reattach: %r" % reply)
        check_eq(reply["operation"], op, "reattach reply")
    return c, reply


def read_to_end(c, pull, first_partition):
    """Read whole partitions until 0; return them."""
    parts = []
    while True:
        if pull:
            c.write_int(REQUEST_NEXT)
        status, payload = c.read_partition()
        if status == STREAM_DONE:
            return parts
        check_eq(status, STREAM_PARTITION, "response after %d partitions "
                 "(from %d): %r" % (len(parts), first_partition, payload))
        parts.append(payload)


def status_of(d, op):
    with d.client() as c:
        for o in c.status()["operations"]:
            if o["id"] == op:
                return o
    return None


def release_all(c, op):
    c.request_ok({"op": "release", "operation": op, "all": True})


# ---------------------------------------------------------------------------
# Reattach in both modes

def test_iterate_mid_partition(d):
    """A connection lost inside partition 1; the stream goes on from the
    last record received, nothing missing, nothing repeated."""
    c = d.client()
    op = c.execute_ok(PLAN, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_partition(), (STREAM_PARTITION, PARTS[0]), "partition 0")
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    head = read_records(c, 1234)
    c.close_abruptly()
    c2, reply = reattach(d, c.session, op, 1, 1234)
    check_eq((reply["partition"], reply["offset"]), (1, 1234), "position")
    c2.write_int(REQUEST_NEXT)
    check_eq(c2.read_int(), STREAM_PARTITION, "response after reattach")
    check_eq(head + read_rest(c2), PARTS[1], "partition 1")
    check_eq(read_to_end(c2, True, 2), PARTS[2:], "partitions 2 and 3")
    # Another request on that connection shows the end arrived.
    c2.status()
    check(wait_until(lambda: status_of(d, op) is None, 5),
          "the operation outlived its confirmed end")


def test_iterate_at_boundary(d):
    c = d.client()
    op = c.execute_ok(PLAN, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_partition(), (STREAM_PARTITION, PARTS[0]), "partition 0")
    c.close()
    # (0, 5000) and (1, 0) are the same point; the first still shows the
    # end of partition 0.
    c2, _ = reattach(d, c.session, op, 0, 5000)
    c2.write_int(REQUEST_NEXT)
    check_eq(c2.read_partition(), (STREAM_PARTITION, []), "end of 0")
    c2.close()
    c3, _ = reattach(d, c.session, op, 1, 0)
    check_eq(read_to_end(c3, True, 1), PARTS[1:], "partitions 1 to 3")


def test_collect_mid_partition_and_boundary(d):
    c = d.client()
    op = c.execute_ok(PLAN, "collect")["operation"]
    check_eq(c.read_partition(), (STREAM_PARTITION, PARTS[0]), "partition 0")
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    head = read_records(c, 777)
    c.close_abruptly()
    c2, _ = reattach(d, c.session, op, 1, 777)
    check_eq(c2.read_int(), STREAM_PARTITION, "pushed after reattach")
    check_eq(head + read_rest(c2), PARTS[1], "partition 1")
    check_eq(c2.read_partition(), (STREAM_PARTITION, PARTS[2]), "partition 2")
    c2.close()
    c3, _ = reattach(d, c.session, op, 3, 0)
    check_eq(read_to_end(c3, False, 3), PARTS[3:], "partition 3")


def test_reattach_repeatedly_same_position(d):
    """Reattaching twice at one position sends the same records twice."""
    c, op = open_stream(d)
    read_records(c, 10)
    c.close()
    for _ in range(3):
        c2, _ = reattach(d, c.session, op, 0, 10)
        c2.write_int(REQUEST_NEXT)
        check_eq(c2.read_int(), STREAM_PARTITION, "response")
        check_eq(read_records(c2, 100), PARTS[0][10:110], "records")
        c2.close_abruptly()


def test_new_attach_detaches_old(d):
    """One attached stream per operation: a reattach takes the stream from
    the connection that had it, which is closed."""
    c, op = open_stream(d)
    read_records(c, 5)
    c2, _ = reattach(d, c.session, op, 0, 5)
    check(c.at_eof(5.0), "the old connection stays open")
    c2.write_int(REQUEST_NEXT)
    check_eq(c2.read_int(), STREAM_PARTITION, "response")
    check_eq(read_rest(c2), PARTS[0][5:], "partition 0")
    check_eq(read_to_end(c2, True, 1), PARTS[1:], "the rest")


@with_daemon(sets=["stream.retry_buffer=0", "stream.buffer=4k"])
def test_take_from_a_full_connection(d):
    """A reattach taking the stream from a connection whose output is full:
    the detach trims the buffer under the position, which is then
    recomputed, not replayed from a hole."""
    plan = range_plan(0, 2000000, 2)
    c, op = open_stream(d, plan=plan)
    time.sleep(0.3)		# c reads nothing: its output fills
    c2, _ = reattach(d, c.session, op, 0, 0)
    c2.write_int(REQUEST_NEXT)
    check_eq(c2.read_int(), STREAM_PARTITION, "response")
    check_eq(read_records(c2, 50000), numbers(0, 50000), "partition 0")


@with_daemon(sets=["workers.max=2"])
def test_prefetched_partitions_survive_detach(d):
    """Partitions computed ahead are not lost by a detach: a pipe plan
    (which could not be computed again) reattaches without a task more."""
    plan = range_plan(0, 6000, 6, ops=[{"pipe": {"command": "cat"}}])
    with d.client() as s:
        before = s.status()["counters"]["tasks"]
    c = d.client()
    op = c.execute_ok(plan, "iterate", {"prefetch": 3})["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_partition(), (STREAM_PARTITION, numbers(0, 1000)),
             "partition 0")
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    read_records(c, 10)
    time.sleep(0.3)
    c.close_abruptly()
    c2, _ = reattach(d, c.session, op, 1, 10)
    c2.write_int(REQUEST_NEXT)
    check_eq(c2.read_int(), STREAM_PARTITION, "response")
    check_eq(read_rest(c2), numbers(1010, 2000), "partition 1")
    got = read_to_end(c2, True, 2)
    check_eq(got, [numbers(i * 1000, (i + 1) * 1000) for i in range(2, 6)],
             "partitions 2 to 5")
    with d.client() as s:
        check_eq(s.status()["counters"]["tasks"] - before, 6,
                 "tasks run (none again)")


@with_daemon(sets=["workers.max=1"])
def test_reply_action_reattached(d):
    """A count outlives its connection; a reattach gets its reply."""
    plan = range_plan(0, 100, 2, ops=[{"pipe": {"command": "sleep 1; cat"}}])
    c = d.client()
    c.send_json({"op": "execute", "plan": plan, "action": "count",
                 "operation": "0b9c8a52-0d3e-4b7a-9c51-2f0e8b1d7a44"})
    d.worker_running("sleep 1")
    c.close_abruptly()
    c2, reply = reattach(d, c.session,
                         "0b9c8a52-0d3e-4b7a-9c51-2f0e8b1d7a44", 0, 0)
    check_eq(reply["count"], 100, "count after reattach")
    check_error(c2.request({"op": "reattach", "operation":
                            "0b9c8a52-0d3e-4b7a-9c51-2f0e8b1d7a44",
                            "partition": 0, "offset": 0}),
                "OPERATION_FINISHED", "complete")


# ---------------------------------------------------------------------------
# Graceful cuts

def _read_through_cuts(d, action):
    """Read a stream that emberd cuts, reattaching on the same connection
    after each 2; (partitions, cuts)."""
    c = d.client()
    op = c.execute_ok(PLAN, action)["operation"]
    got, cuts = [], 0
    while True:
        if action == "iterate":
            c.write_int(REQUEST_NEXT)
        status, payload = c.read_partition()
        if status == STREAM_DONE:
            return got, cuts
        if status == STREAM_DETACHED:
            cuts += 1
            c.request_ok({"op": "reattach", "operation": op,
                          "partition": len(got), "offset": 0})
            continue
        check_eq(status, STREAM_PARTITION, "response")
        got.append(payload)


@with_daemon(sets=["stream.max_bytes=1k"])
def test_cut_by_max_bytes(d):
    """Past stream.max_bytes the stream ends at a partition boundary with
    2 (DETACHED), in both modes; the client reattaches on the same
    connection.  The real end is still 0."""
    for action in ("iterate", "collect"):
        got, cuts = _read_through_cuts(d, action)
        check_eq(got, PARTS, "partitions (%s)" % action)
        check_eq(cuts, 3, "cuts, one after each partition but the last "
                 "(%s)" % action)


@with_daemon(sets=["stream.max_duration=200ms"])
def test_cut_by_max_duration(d):
    c = d.client()
    op = c.execute_ok(PLAN, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_partition(), (STREAM_PARTITION, PARTS[0]), "partition 0")
    time.sleep(0.4)
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_DETACHED, "response after max_duration")
    st = status_of(d, op)
    check_eq(st["state"], "detached", "state after the cut")
    c.request_ok({"op": "reattach", "operation": op, "partition": 1,
                  "offset": 0})
    check_eq(read_to_end(c, True, 1), PARTS[1:], "the rest")


# ---------------------------------------------------------------------------
# Release, the buffer's bound, recompute

def test_release_then_recompute(d):
    """A released position is computed again from a deterministic plan."""
    c, op = open_stream(d)
    read_records(c, 3000)
    with in_session(d, c.session) as side:
        side.request_ok({"op": "release", "operation": op, "partition": 0,
                         "offset": 2500})
        st = [o for o in side.status()["operations"] if o["id"] == op][0]
        check_eq(st["buffered_from"], "0:2500", "buffer start")
    c.close_abruptly()
    # Released, but the plan is deterministic: recomputed from 2000.
    c2, _ = reattach(d, c.session, op, 0, 2000)
    c2.write_int(REQUEST_NEXT)
    check_eq(c2.read_int(), STREAM_PARTITION, "response")
    check_eq(read_rest(c2), PARTS[0][2000:], "partition 0 recomputed")
    check_eq(read_to_end(c2, True, 1), PARTS[1:], "the rest")


@with_daemon(sets=["stream.retry_buffer=0", "stream.buffer=4k"])
def test_beyond_the_buffer_recomputed(d):
    """With no retry buffer, positions behind the stream are recomputed,
    mid-partition, in both modes."""
    plan = range_plan(0, 200000, 4)
    want = [numbers(i * 50000, (i + 1) * 50000) for i in range(4)]
    for action in ("iterate", "collect"):
        c = d.client()
        op = c.execute_ok(plan, action)["operation"]
        if action == "iterate":
            c.write_int(REQUEST_NEXT)
        check_eq(c.read_int(), STREAM_PARTITION, "response")
        read_records(c, 10)
        time.sleep(0.3)		# emberd sends far beyond record 10
        c.close_abruptly()
        st = wait_until(lambda: status_of(d, op)["state"] == "detached"
                        and status_of(d, op), 5)
        check(st["buffered_from"] != "0:0", "the buffer kept it all: %r"
              % st)
        c2, _ = reattach(d, c.session, op, 0, 10)
        if action == "iterate":
            c2.write_int(REQUEST_NEXT)
        check_eq(c2.read_int(), STREAM_PARTITION, "response")
        check_eq(read_rest(c2), want[0][10:], "partition 0 (%s)" % action)
        check_eq(read_to_end(c2, action == "iterate", 1), want[1:],
                 "the rest (%s)" % action)


def test_pipe_not_recomputed(d):
    """A pipe plan is not deterministic: a released position is gone."""
    plan = range_plan(0, 4000, 2, ops=[{"pipe": {"command": "cat"}}])
    c = d.client()
    op = c.execute_ok(plan, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    read_records(c, 500)
    with in_session(d, c.session) as side:
        side.request_ok({"op": "release", "operation": op, "partition": 0,
                         "offset": 400})
    c.close_abruptly()
    _, reply = reattach(d, c.session, op, 0, 300, expect_ok=False)
    check_error(reply, "POSITION_NOT_AVAILABLE", "pipe")
    c3, _ = reattach(d, c.session, op, 0, 450)
    c3.write_int(REQUEST_NEXT)
    check_eq(c3.read_int(), STREAM_PARTITION, "response")
    check_eq(read_rest(c3), numbers(450, 2000), "from the buffer")


def test_release_all_ends_the_operation(d):
    c = d.client()
    op = c.execute_ok(PLAN, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_partition(), (STREAM_PARTITION, PARTS[0]), "partition 0")
    c.close()
    with in_session(d, c.session) as side:
        release_all(side, op)
        check(status_of(d, op) is None, "still in status after release")
        check_error(side.request({"op": "reattach", "operation": op,
                                  "partition": 1, "offset": 0}),
                    "OPERATION_NOT_FOUND")


@with_daemon(sets=["workers.max=2", "stream.buffer=64k",
                   "stream.retry_buffer=256k"])
def test_detached_memory_is_bounded(d):
    """An iterate of ~1 GB whose client vanishes costs emberd at most its
    retry buffer and stream buffers."""
    big = range_plan(0, 100000000, 2)
    with d.client() as warm:
        check_eq(warm.count(range_plan(0, 1000, 2)), 1000, "warm-up")
    baseline = d.rss_kb()
    c = d.client()
    op = c.execute_ok(big, "iterate", {"prefetch": 1})["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    read_records(c, 100000)
    c.close_abruptly()
    time.sleep(1.0)
    grew = (d.rss_kb() - baseline) / 1024.0
    st = status_of(d, op)
    check(st["buffered_bytes"] <= 256 * 1024 + 64 * 1024 + 65536,
          "buffered %d bytes" % st["buffered_bytes"])
    check(grew < 32, "emberd's RSS grew %.1f MB" % grew)


def heap_in_use(port):
    """ember_heap_in_use_bytes of emberd's /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        body = conn.getresponse().read().decode()
    finally:
        conn.close()
    for line in body.splitlines():
        if line.startswith("ember_heap_in_use_bytes "):
            return float(line.split()[1])
    raise AssertionError("no ember_heap_in_use_bytes in /metrics")


@with_daemon(sets=["status.listen=127.0.0.1:0",
                   "daemon.max_connections_per_uid=300",
                   "daemon.max_operations_per_uid=300"])
def test_small_detached_operation_is_small(d):
    """A detached stream of a few records costs emberd its operation and
    those records, not a kilobyte chain or a table of 64 partitions."""
    port = status_port(d)
    plan = range_plan(0, 10, 1)
    n = 200
    with d.client() as owner:
        check_eq(owner.count(plan), 10, "warm-up")
        start = heap_in_use(port)
        ops = []
        for _ in range(n):
            c = in_session(d, owner.session)
            ops.append(c.execute_ok(plan, "iterate")["operation"])
            c.write_int(REQUEST_NEXT)
            check_eq(c.read_int(), STREAM_PARTITION, "response")
            c.close_abruptly()
        check(wait_until(lambda: all(
            (status_of(d, op) or {}).get("state") == "detached"
            for op in ops[-3:]), 10), "the operations detached")
        per_op = (heap_in_use(port) - start) / n
        check(per_op < 2048, "%.0f bytes of heap per detached operation"
              % per_op)
        for op in ops:
            release_all(owner, op)
        check(wait_until(lambda: heap_in_use(port) - start < 32 * 1024, 10),
              "%.0f bytes of heap left after the release"
              % (heap_in_use(port) - start))


# ---------------------------------------------------------------------------
# Errors, each of its own class

def test_position_errors(d):
    c = d.client()
    op = c.execute_ok(PLAN, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_partition(), (STREAM_PARTITION, PARTS[0]), "partition 0")
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    read_records(c, 10)
    c.close_abruptly()
    with in_session(d, c.session) as s:

        def attempt(p, k):
            return s.request({"op": "reattach", "operation": op,
                              "partition": p, "offset": k})
        check_error(attempt(-1, 0), "POSITION_INVALID", "negative")
        check_error(attempt(0, -5), "POSITION_INVALID", "negative")
        check_error(attempt(9, 0), "POSITION_INVALID", "4 partitions")
        check_error(attempt(0, 5001), "POSITION_INVALID", "has 5000 records")
        check_error(attempt(3, 0), "POSITION_INVALID", "were sent")
        check_error(s.request({"op": "reattach", "operation": op,
                               "partition": "x", "offset": 0}),
                    "REQUEST_INVALID", "partition")
        check_error(s.request({"op": "release", "operation": op,
                               "partition": 7, "offset": 0}),
                    "POSITION_INVALID")
        check_error(s.request({"op": "reattach", "operation":
                               "00000000-0000-4000-8000-000000000000",
                               "partition": 0, "offset": 0}),
                    "OPERATION_NOT_FOUND")
        # Still serving, and the operation still reattachable.
        s.request_ok({"op": "reattach", "operation": op, "partition": 1,
                      "offset": 10})
        s.write_int(REQUEST_NEXT)
        check_eq(s.read_int(), STREAM_PARTITION, "response")
        check_eq(read_rest(s), PARTS[1][10:], "partition 1")
        s.write_int(REQUEST_STOP)
        check_eq(s.read_int(), STREAM_DONE, "stopped")
        # A stopped operation is finished, and says so.
        check_error(s.request({"op": "reattach", "operation": op,
                               "partition": 2, "offset": 0}),
                    "OPERATION_FINISHED", "stopped")


def test_wrong_session(d):
    c = d.client()
    op = c.execute_ok(PLAN, "iterate")["operation"]
    c.close()
    with d.client() as other:	# the same uid, another session
        check_error(other.request({"op": "reattach", "operation": op,
                                   "partition": 0, "offset": 0}),
                    "SESSION_MISMATCH", c.session)
        check_error(other.request({"op": "interrupt", "operation": op}),
                    "SESSION_MISMATCH")
        check_error(other.request({"op": "release", "operation": op,
                                   "all": True}), "SESSION_MISMATCH")


def test_failed_operation_is_finished(d):
    plan = range_plan(0, 10, 1, ops=[{"pipe": {"command": "exit 3"}}])
    c = d.client()
    op = c.execute_ok(plan, "collect")["operation"]
    status, msg = c.read_partition()
    check_eq(status, STREAM_ERROR, "the task failed")
    check_error(c.request({"op": "reattach", "operation": op,
                           "partition": 0, "offset": 0}),
                "OPERATION_FINISHED", "failed")


def test_not_reattachable(d):
    c = d.client()
    op = c.execute_ok(PLAN, "iterate", {"reattachable": False})
    check_eq(op["reattachable"], False, "reply says so")
    c.close()
    with in_session(d, c.session) as s:
        check(wait_until(lambda: status_of(d, op["operation"]) is None, 5),
              "a non-reattachable operation outlived its connection")
        check_error(s.request({"op": "reattach", "operation":
                               op["operation"], "partition": 0,
                               "offset": 0}), "OPERATION_NOT_FOUND")


def test_client_chosen_id(d):
    oid = "3f2c8a52-0d3e-4b7a-9c51-2f0e8b1d7a44"
    c = d.client()
    check_eq(c.execute(PLAN, "iterate", operation=oid)["operation"], oid,
             "operation id")
    with d.client() as other:
        check_error(other.execute(PLAN, "iterate", operation=oid),
                    "OPERATION_ALREADY_EXISTS")


# ---------------------------------------------------------------------------
# The reaper, sessions, interrupt

@with_daemon(sets=["operation.detached_timeout=300ms",
                   "operation.maintenance_interval=50ms"])
def test_reaper_removes_detached(d):
    c, op = open_stream(d)
    c.close_abruptly()
    check(wait_until(lambda: status_of(d, op) is None, 5),
          "the reaper left the operation")
    with in_session(d, c.session) as s:
        check_error(s.request({"op": "reattach", "operation": op,
                               "partition": 0, "offset": 0}),
                    "OPERATION_ABANDONED", "detached_timeout")
        # A tombstoned id is not run again.
        check_error(s.execute(PLAN, "iterate", operation=op),
                    "OPERATION_ALREADY_EXISTS")
        # An attached operation is never reaped, however long it runs.
        op2 = s.execute_ok(PLAN, "iterate")["operation"]
        time.sleep(0.6)
        check_eq(read_to_end(s, True, 0), PARTS, "attached stream")


@with_daemon(sets=["session.timeout=400ms",
                   "operation.maintenance_interval=50ms"])
def test_session_resume_and_expiry(d):
    c = d.client()
    sid = c.session
    bid = c.broadcast_put(b"a\nb\n")
    op = c.execute_ok(PLAN, "iterate")["operation"]
    c.close()
    # Resumed within the timeout: its broadcasts and operations are there.
    with d.client(hello=False) as s:
        check_eq(s.request_ok({"op": "hello", "version": 1,
                               "session": sid})["session"], sid, "resumed")
        st = s.status()
        mine = [x for x in st["sessions"] if x["id"] == sid]
        check_eq(mine[0]["connections"], 1, "connections of the session")
        check([o for o in st["operations"] if o["id"] == op],
              "the operation is kept")
        check_eq(s.collect_all(records_plan(["a", "c"], 1, ops=[{
            "filter": {"in_broadcast": bid}}])), [b"a"], "broadcast kept")
    # Left alone past the timeout: closed, its operations interrupted.
    check(wait_until(lambda: status_of(d, op) is None, 5),
          "the operation of an expired session")
    with d.client(hello=False) as s:
        check_error(s.request({"op": "hello", "version": 1,
                               "session": sid}), "SESSION_NOT_FOUND")


# The maintenance interval stays at its default (30s): a timeout ends
# at its own time, not at the next tick.
@with_daemon(sets=["operation.detached_timeout=1s", "session.timeout=1m"])
def test_detached_timeout_on_time(d):
    c, op = open_stream(d)
    c.close_abruptly()
    t0 = time.monotonic()
    check(wait_until(lambda: status_of(d, op) is None, 8),
          "the operation outlived operation.detached_timeout by 8s")
    check(time.monotonic() - t0 >= 0.5, "removed before its timeout")
    with in_session(d, c.session) as s:
        check_error(s.request({"op": "reattach", "operation": op,
                               "partition": 0, "offset": 0}),
                    "OPERATION_ABANDONED", "detached_timeout")


@with_daemon(sets=["session.timeout=1s"])
def test_session_timeout_on_time(d):
    c = d.client()
    sid = c.session
    c.close()
    # A session resumed and let go again gets its own, later deadline.
    time.sleep(0.5)
    with in_session(d, sid):
        pass
    t0 = time.monotonic()

    def gone():
        with d.client() as s:
            return all(x["id"] != sid for x in s.status()["sessions"])
    check(wait_until(gone, 8), "the session outlived session.timeout by 8s")
    check(time.monotonic() - t0 >= 0.5, "closed before its timeout")


@with_daemon(sets=["session.timeout=0"])
def test_session_without_timeout_ends_with_its_connection(d):
    """With session.timeout 0 a session closes with its last connection,
    and its running operation ends at once: emberd frees the session
    once, and serves on."""
    c = d.client()
    sid = c.session
    c.execute_ok(range_plan(0, 100000, 1), "iterate")
    c.close()
    with d.client() as s:
        check(wait_until(lambda: all(x["id"] != sid for x in
                                     s.status()["sessions"]), 5),
              "the session outlived its connection")
        check_eq(s.count(range_plan(0, 10, 2)), 10, "a job after")
    check(d.proc.poll() is None, "emberd exited")

@with_daemon(sets=["workers.max=1"])
def test_interrupt(d):
    """interrupt from another connection of the session: the attached
    stream ends with -1 and a message, the worker is freed."""
    plan = range_plan(0, 10, 1, ops=[{"pipe": {"command": "sleep 30"}}])
    c = d.client()
    op = c.execute_ok(plan, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    d.worker_running("sleep 30")
    with in_session(d, c.session) as s:
        s.request_ok({"op": "interrupt", "operation": op})
        status, msg = c.read_partition()
        check_eq(status, STREAM_ERROR, "the stream's end")
        check("interrupted" in msg, "message %r" % msg)
        check_error(s.request({"op": "reattach", "operation": op,
                               "partition": 0, "offset": 0}),
                    "OPERATION_FINISHED", "interrupted")
        # The connection is back to control frames, the worker free.
        check_eq(c.count(range_plan(0, 10, 1)), 10, "next job")


# ---------------------------------------------------------------------------
# Another uid

def other_user():
    for name in ("nobody",):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        return (pw.pw_uid, pw.pw_gid)
    return None


def as_user(user, fn):
    """Run fn() as user in a child; its JSON result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            signal.alarm(60)
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
            out = {"result": fn()}
        except BaseException:
            out = {"error": traceback.format_exc()}
        with os.fdopen(w, "w") as f:
            f.write(json.dumps(out))
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    out = json.loads(data)
    if "error" in out:
        raise AssertionError(out["error"])
    return out["result"]


@with_daemon(sets=["daemon.socket_mode=0666"])
def test_other_uid_sees_nothing(d):
    """To another uid, a session and its operations do not exist."""
    user = other_user()
    if not ROOT or user is None:
        print("skip: needs root and a nobody user")
        return
    os.chmod(d.tmpdir, 0o711)
    c, op = open_stream(d)
    read_records(c, 10)
    sid = c.session

    def probe():
        out = {}
        with d.client(hello=False) as o:
            out["hello"] = o.request({"op": "hello", "version": 1,
                                      "session": sid})
        with d.client() as o:
            st = o.status()
            out["sees"] = [x["id"] for x in st["sessions"] +
                           st["operations"] if x["id"] in (sid, op)]
            out["reattach"] = o.request({"op": "reattach", "operation": op,
                                         "partition": 0, "offset": 0})
            out["release"] = o.request({"op": "release", "operation": op,
                                        "all": True})
            out["interrupt"] = o.request({"op": "interrupt",
                                          "operation": op})
            out["execute"] = o.execute(PLAN, "count", operation=op)
        return out
    out = as_user(user, probe)
    check_error(out["hello"], "SESSION_NOT_FOUND")
    check_eq(out["sees"], [], "what the other uid sees")
    for what in ("reattach", "release", "interrupt"):
        check_error(out[what], "OPERATION_NOT_FOUND")
    check(out["execute"].get("ok"), "ids are per uid: %r" % out["execute"])
    # Untouched: the stream goes on.
    check_eq(read_rest(c), PARTS[0][10:], "partition 0")


# ---------------------------------------------------------------------------
# Status

def test_status_shows_detached(d):
    c = d.client()
    op = c.execute_ok(PLAN, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_partition(), (STREAM_PARTITION, PARTS[0]), "partition 0")
    c.close()
    st = wait_until(lambda: status_of(d, op)["state"] == "detached" and
                    status_of(d, op), 5)
    check_eq(st["sent"], "1:0", "sent position")
    check(st["buffered_bytes"] > 0, "buffered bytes %r" % st)
    check("detached_ms" in st, "detached_ms")
    r = d.cli(["status", "-v"])
    check_eq(r.returncode, 0, "ember status (stderr %r)" % r.stderr)
    # People see ids cut to 8 characters; --json has them whole.
    for needle in (op[:8], "detached", "BUFFERED", "CONNS"):
        check(needle in r.stdout, "ember status lacks %r:\n%s" %
              (needle, r.stdout))


# ---------------------------------------------------------------------------
# The CLI through a proxy that cuts every connection

def test_cli_through_cutting_proxy(d):
    """`ember run` through connections that break every 300 KB prints
    exactly what an unbroken run prints, in both modes, from the retry
    buffer alone too (a pipe cannot be computed again)."""
    proxy = CuttingProxy(d.socket, d.path("proxy.sock"), 300 * 1024)
    runs = []
    for i, op in enumerate(({"map": "upper"}, {"pipe": {"command": "cat"}})):
        plan = d.path("plan%d.json" % i)
        with open(plan, "w") as f:
            json.dump(range_plan(0, 1000000, 7, ops=[op]), f)
        runs += [[plan], ["--collect", plan]]
    try:
        for args in runs:
            mode, plan = args[:-1], args[-1]
            direct = d.cli(["run"] + mode + [plan], timeout=120)
            check_eq(direct.returncode, 0, "direct run (%r)" % direct.stderr)
            cuts = proxy.cuts
            cut = run_cli(["run"] + mode + [plan], socket_path=proxy.path,
                          timeout=120)
            check_eq(cut.returncode, 0, "run through the proxy (stderr %r)"
                     % cut.stderr[-2000:])
            check(proxy.cuts - cuts >= 10, "the proxy cut only %d times" %
                  (proxy.cuts - cuts))
            check(cut.stdout == direct.stdout, "output differs (%d bytes "
                  "against %d)" % (len(cut.stdout), len(direct.stdout)))
    finally:
        proxy.close()
    # Everything was released: no operation is left behind.
    check(wait_until(lambda: not d.client().status()["operations"], 5),
          "operations left after the CLI runs")


def test_cli_gives_up_past_its_budget(d):
    """When emberd is gone for good, the CLI says so after its retries."""
    plan = d.path("plan.json")
    with open(plan, "w") as f:
        json.dump(range_plan(0, 3000000, 2), f)
    proxy = CuttingProxy(d.socket, d.path("proxy.sock"), 200 * 1024)
    p = subprocess.Popen([EMBER, "--socket", proxy.path, "run", plan],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    wait_until(lambda: proxy.cuts > 0, 10)
    proxy.close()
    os.unlink(proxy.path)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("the CLI kept retrying")
    check(p.returncode != 0, "exit status %d" % p.returncode)
    check("reattach" in err and "gave up" in err, "stderr %r" % err)


# ---------------------------------------------------------------------------
# The wire, byte for byte

GOLDEN_OID = "5b1e0c7a-8d2f-4e6b-a3c9-0f7d2e4b6a18"


def golden_exchange(d):
    """The raw reply frames of reattach, release, interrupt and
    checkpoint_drop, in their error and ok forms."""
    c = d.client()
    check_eq(c.execute(PLAN, "iterate", operation=GOLDEN_OID)["operation"],
             GOLDEN_OID, "operation id")
    frames = []
    with in_session(d, c.session) as s:
        for req in [
                {"op": "reattach", "operation": GOLDEN_OID, "x": 1},
                {"op": "reattach", "operation": "0" * 8},
                {"op": "release", "operation": GOLDEN_OID, "all": 3},
                {"op": "release", "operation": GOLDEN_OID,
                 "partition": 9, "offset": 0},
                {"op": "release", "operation": GOLDEN_OID,
                 "partition": 0, "offset": 0},
                {"op": "checkpoint_drop", "checkpoint": "nope"},
                {"op": "checkpoint_drop",
                 "checkpoint": "0b1e0c7a-8d2f-4e6b-a3c9-0f7d2e4b6a18"},
                {"op": "checkpoint_drop"},
                {"op": "reattach", "operation": GOLDEN_OID,
                 "partition": 0, "offset": 0}]:
            s.send_json(req)
            frames.append(s.recv_frame())
        s.write_int(REQUEST_STOP)
        frames.append(s.recv_exact(4))
        s.send_json({"op": "interrupt", "operation": GOLDEN_OID})
        frames.append(s.recv_frame())
    other = GOLDEN_OID[:-1] + "9"
    c = d.client()
    check_eq(c.execute(PLAN, "iterate", operation=other)["operation"],
             other, "the other operation's id")
    with in_session(d, c.session) as s:
        s.send_json({"op": "interrupt", "operation": other})
        frames.append(s.recv_frame())
    return frames


GOLDEN = [
    b'{"ok":false,"error":{"class":"REQUEST_INVALID","message":'
    b'"reattach: x: unknown field"}}',
    b'{"ok":false,"error":{"class":"OPERATION_NOT_FOUND","message":'
    b'"reattach: no operation 00000000"}}',
    b'{"ok":false,"error":{"class":"REQUEST_INVALID","message":'
    b'"release: all: expected true or false"}}',
    b'{"ok":false,"error":{"class":"POSITION_INVALID","message":'
    b'"release: operation 5b1e0c7a-8d2f-4e6b-a3c9-0f7d2e4b6a18: '
    b'partition 9: the operation has 4 partitions"}}',
    b'{"ok":true}',
    b'{"ok":false,"error":{"class":"REQUEST_INVALID","message":'
    b'"checkpoint_drop: checkpoint: \\"nope\\" is not a UUID"}}',
    b'{"ok":false,"error":{"class":"CHECKPOINT_NOT_FOUND","message":'
    b'"no checkpoint 0b1e0c7a-8d2f-4e6b-a3c9-0f7d2e4b6a18"}}',
    b'{"ok":false,"error":{"class":"REQUEST_INVALID","message":'
    b'"checkpoint_drop: checkpoint: missing"}}',
    b'{"ok":true,"operation":"5b1e0c7a-8d2f-4e6b-a3c9-0f7d2e4b6a18",'
    b'"partitions":4,"partition":0,"offset":0}',
    b'\x00\x00\x00\x00',
    b'{"ok":false,"error":{"class":"OPERATION_FINISHED","message":'
    b'"interrupt: operation 5b1e0c7a-8d2f-4e6b-a3c9-0f7d2e4b6a18 was '
    b'stopped by its client"}}',
    b'{"ok":true}',
]


def test_answers_byte_for_byte(d):
    """reattach, release, interrupt and checkpoint_drop answer with
    exactly these bytes (docs/protocol.md), whichever module decides
    the answer."""
    got = golden_exchange(d)
    check_eq(len(got), len(GOLDEN), "replies")
    for i, (frame, want) in enumerate(zip(got, GOLDEN)):
        check_eq(frame, want, "reply %d" % i)


def execute_exchange(d):
    """The raw reply frames of execute: refused at once, refused after
    its helper, a stream's, a lazy checkpoint's."""
    c = d.client()
    frames = []
    oid = GOLDEN_OID[:-2] + "21"
    for req in [
            {"op": "execute", "action": "count"},
            {"op": "execute", "action": "sum", "plan": PLAN},
            {"op": "execute", "action": "count", "plan": text_plan(
                ["/nonexistent/ember-golden-*.txt"])},
            {"op": "execute", "action": "checkpoint", "plan": PLAN,
             "operation": oid, "options": {"eager": False}},
            {"op": "execute", "action": "iterate", "plan": PLAN,
             "operation": GOLDEN_OID}]:
        c.send_json(req)
        frames.append(c.recv_frame())
    return frames


EXECUTE_GOLDEN = [
    b'{"ok":false,"error":{"class":"PLAN_INVALID","message":'
    b'"plan: missing"}}',
    b'{"ok":false,"error":{"class":"ACTION_INVALID","message":'
    b'"action: unknown action \\"sum\\" (expected iterate, collect, '
    b'count, count_by_value, reduce, save or checkpoint)"}}',
    b'{"ok":false,"error":{"class":"PLAN_INVALID","message":'
    b'"plan.source.text.paths[0]: /nonexistent/ember-golden-*.txt: '
    b'no file matches"}}',
    b'{"ok":true,"operation":"5b1e0c7a-8d2f-4e6b-a3c9-0f7d2e4b6a21",'
    b'"partitions":4,"checkpoint":"UUID","kind":"reliable",'
    b'"eager":false,"records":0,"bytes":0}',
    b'{"ok":true,"operation":"5b1e0c7a-8d2f-4e6b-a3c9-0f7d2e4b6a18",'
    b'"partitions":4,"reattachable":true}',
]


def test_execute_answers_byte_for_byte(d):
    """execute answers with exactly these bytes, refused at once or after
    its helper, for a lazy checkpoint and for a stream (a new
    checkpoint's id aside)."""
    got = execute_exchange(d)
    check_eq(len(got), len(EXECUTE_GOLDEN), "replies")
    for i, (frame, want) in enumerate(zip(got, EXECUTE_GOLDEN)):
        frame = re.sub(rb'"checkpoint":"[0-9a-f-]{36}"',
                       b'"checkpoint":"UUID"', frame)
        check_eq(frame, want, "reply %d" % i)


if __name__ == "__main__":
    run_tests(globals())
