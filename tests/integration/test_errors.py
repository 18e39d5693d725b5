"""Failures: task errors on the result stream, refused plans, actions and
requests, broken framing, and CLI errors.  After each, emberd keeps serving."""

import json
import os
import re
import struct

from harness import *


def _next_job_works(c):
    """The connection is back to control frames and runs a job."""
    check_eq(c.count(range_plan(0, 1000, 3)), 1000, "the next job")


def _check_worker_message(message, partition, text, status):
    """The message names the partition, the worker pid, the command's
    stderr and its exit status."""
    check("partition %d" % partition in message,
          "error %r does not name partition %d" % (message, partition))
    check(re.search(r"worker \d+", message),
          "error %r does not name the worker pid" % message)
    check(text in message, "error %r lacks the stderr %r" % (message, text))
    rest = re.sub(r"(partition|worker) \d+", "", message)
    check(re.search(r"\b%d\b" % status, rest),
          "error %r lacks the exit status %d" % (message, status))


def test_error_before_data(d):
    c = d.client()
    plan = records_plan(["x"], 1, ops=[
        {"pipe": {"command": "echo boom >&2; exit 3"}}])
    c.execute_ok(plan, "iterate")
    c.write_int(REQUEST_NEXT)
    status, message = c.read_partition()
    check_eq(status, STREAM_ERROR, "response (payload %r)" % (message,))
    _check_worker_message(message, 0, "boom", 3)
    _next_job_works(c)


def test_error_in_a_later_partition(d):
    c = d.client()
    plan = range_plan(0, 40, 4, ops=[{"pipe": {"command":
        "read first; case $first in 20) echo bad >&2; exit 5;; esac; "
        "echo $first; cat"}}])
    c.execute_ok(plan, "iterate")
    for i in range(2):
        c.write_int(REQUEST_NEXT)
        status, recs = c.read_partition()
        check_eq(status, STREAM_PARTITION, "partition %d" % i)
        check_eq(recs, numbers(i * 10, i * 10 + 10), "partition %d" % i)
    c.write_int(REQUEST_NEXT)
    status, message = c.read_partition()
    check_eq(status, STREAM_ERROR, "partition 2 (payload %r)" % (message,))
    _check_worker_message(message, 2, "bad", 5)
    _next_job_works(c)


def test_error_after_data(d):
    c = d.client()
    plan = records_plan(["x"], 1, ops=[
        {"pipe": {"command": "echo a; echo b; sleep 1; echo late >&2; "
                  "exit 4"}}])
    c.execute_ok(plan, "iterate")
    c.write_int(REQUEST_NEXT)
    status, payload = c.read_partition()
    check_eq(status, EXCEPTION_THROWN, "response (payload %r)" % (payload,))
    records, message = payload
    check_eq(records, [b"a", b"b"], "records before the failure")
    _check_worker_message(message, 0, "late", 4)
    _next_job_works(c)


def test_error_after_much_data(d):
    """A failure after many records still ends the partition with -2."""
    c = d.client()
    plan = range_plan(0, 200000, 1, ops=[{"pipe": {"command":
                                                   "cat; echo end >&2; "
                                                   "exit 6"}}])
    c.execute_ok(plan, "iterate")
    c.write_int(REQUEST_NEXT)
    status, payload = c.read_partition()
    check(status in (EXCEPTION_THROWN, STREAM_ERROR),
          "a failed task must end with an error, got %d" % status)
    if status == EXCEPTION_THROWN:
        records, message = payload
        check(len(records) > 0, "-2 with no record before it")
        check_eq(records, numbers(len(records)), "records before the failure")
    else:
        message = payload
    _check_worker_message(message, 0, "end", 6)
    _next_job_works(c)


def test_collect_error(d):
    c = d.client()
    plan = range_plan(0, 30, 3, ops=[{"pipe": {"command":
        "read first; case $first in 10) echo crash >&2; exit 7;; esac; "
        "echo $first; cat"}}])
    c.execute_ok(plan, "collect")
    status, recs = c.read_partition()
    check_eq(status, STREAM_PARTITION, "partition 0")
    check_eq(recs, numbers(10), "partition 0")
    status, message = c.read_partition()
    check_eq(status, STREAM_ERROR, "partition 1 (payload %r)" % (message,))
    _check_worker_message(message, 1, "crash", 7)
    _next_job_works(c)


def _raw_error_frame(c, plan):
    """Run plan with iterate; the error frame's bytes, undecoded."""
    c.execute_ok(plan, "iterate")
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_ERROR, "response")
    return c.recv_frame()


def test_error_frames_are_utf8(d):
    c = d.client()
    # stderr longer than the tail a worker keeps, its cut falling inside
    # a character (the tail's 4096 bytes start 1 byte into a euro sign),
    # and bytes that are not UTF-8 at all.
    raw = _raw_error_frame(c, records_plan(["x"], 1, ops=[{"pipe": {
        "command": "i=0; while [ $i -lt 3001 ]; do printf '\\342\\202\\254' "
                   ">&2; i=$((i+1)); done; printf 'bad \\377\\376 end!' >&2; "
                   "exit 3"}}]))
    text = raw.decode("utf-8")	# strict: raises if not UTF-8
    check("\u20ac" * 100 in text and "bad \ufffd\ufffd end" in text,
          "message %r" % text[-80:])
    # A message past the frame's limit, cut by the worker and by emberd.
    big = "é" * 40000
    raw = _raw_error_frame(c, records_plan(["x"], 1, ops=[{"pipe": {
        "command": "exit 3 # " + big}}]))
    check(len(raw) <= 64 * 1024, "frame of %d bytes" % len(raw))
    text = raw.decode("utf-8")
    check("éééé" in text, "message %r" % text[:80])
    # The same in a JSON reply.
    msg = check_error(c.execute(records_plan(["x"], 1, ops=[{"pipe": {
        "command": "printf 'x \\377' >&2; exit 3"}}]), "count"),
        "TASK_FAILED", "x \ufffd")
    _next_job_works(c)


def test_count_task_failed(d):
    c = d.client()
    plan = records_plan(["x", "y"], 2, ops=[
        {"pipe": {"command": "echo boom >&2; exit 3"}}])
    msg = check_error(c.execute(plan, "count"), "TASK_FAILED", "boom")
    check(re.search(r"worker \d+", msg), "no worker pid in %r" % msg)
    _next_job_works(c)


def test_plan_invalid(d):
    c = d.client()
    missing = d.path("no-such-file.txt")
    cases = [
        ({"source": {"range": {"end": 10}}, "ops": [{"explode": {}}]},
         "plan.ops[0]"),
        (range_plan(0, 10, 1, ops=[{"map": "upper"}, {"map": "shout"}]),
         "plan.ops[1].map"),
        (range_plan(0, 10, 1, ops=[{"filter": {"contains": 7}}]),
         "plan.ops[0].filter.contains"),
        ({"partitions": 2}, "plan.source"),
        ({"source": {"range": {"end": 10}}, "partitions": 0},
         "plan.partitions"),
        ({"source": {"range": {"end": 10}}, "partitions": "two"},
         "plan.partitions"),
        ({"source": {"nothing": {}}}, "plan.source"),
        ({"source": {"range": {"end": 10, "step": 0}}},
         "plan.source.range.step"),
        (text_plan([missing]), "plan.source.text.paths[0]"),
    ]
    for plan, field in cases:
        msg = check_error(c.execute(plan, "iterate"), "PLAN_INVALID", field)
        if "paths[0]" in field:
            check(missing in msg, "%r does not name the file" % msg)
        check(c.status()["ok"], "status after PLAN_INVALID")
    _next_job_works(c)


def test_file_deleted_between_jobs(d):
    c = d.client()
    a = write_file(d.path("a.txt"), "one\ntwo\n")
    b = write_file(d.path("b.txt"), "three\n")
    check_eq(c.collect_all(text_plan([a])), [b"one", b"two"], "first job")
    os.unlink(a)
    check_error(c.execute(text_plan([b, a]), "collect"), "PLAN_INVALID",
                "plan.source.text.paths[1]", a)
    check_eq(c.collect_all(text_plan([b])), [b"three"], "third job")


def test_file_name_not_utf8(d):
    """A glob matching a file whose name is not UTF-8 (any user can make
    one) is refused naming the pattern, with the name made readable: a
    file's name travels in JSON, which holds UTF-8 alone.  Before, the
    helper that expanded it died, and the client learnt only that."""
    c = d.client()
    top = d.path("names")
    os.mkdir(top)
    os.chmod(top, 0o755)
    write_file(os.path.join(top, "good.txt"), "one\n")
    with open(os.path.join(top.encode(), b"bad\xff.txt"), "w") as f:
        f.write("two\n")
    msg = check_error(c.execute(text_plan([os.path.join(top, "*.txt")]),
                                "count"), "PLAN_INVALID",
                      "plan.source.text.paths[0]", "not UTF-8",
                      "bad\ufffd.txt")
    check(top in msg, "%r does not name the pattern" % msg)
    check_eq(c.count(text_plan([os.path.join(top, "good.txt")])), 1,
             "a job of the good file")


def test_action_invalid(d):
    c = d.client()
    check_error(c.execute(range_plan(0, 10, 1), "explode"), "ACTION_INVALID")
    check_error(c.execute(range_plan(0, 10, 1), "iterate",
                          options={"prefetch": -1}), "ACTION_INVALID")
    _next_job_works(c)


def test_request_invalid(d):
    c = d.client()
    bad = [b"{not json", b"[1, 2]", b"\"op\"", b"{}",
           json.dumps({"op": "explode"}).encode(),
           json.dumps({"op": 5}).encode(),
           b"\xff\xfe not utf-8"]
    for frame in bad:
        c.send_frame(frame)
        check_error(c.recv_json(), "REQUEST_INVALID")
        check(c.status()["ok"], "status after %r" % frame)
    _next_job_works(c)


def _check_frame_invalid(d, data, what):
    """Send data on a fresh connection: FRAME_INVALID and/or a close; then
    emberd serves a new client."""
    c = d.client(hello=False, timeout=10)
    try:
        c.send(data)
    except OSError:
        pass
    try:
        n = c.read_int()
    except (ProtocolError, OSError):
        n = None		# closed without a reply
    if n is not None:
        check(0 < n < 65536, "%s: reply length %d" % (what, n))
        reply = json.loads(c.recv_exact(n).decode())
        check_error(reply, "FRAME_INVALID")
        check(c.at_eof(5), "%s: connection not closed" % what)
    c.close()
    check_eq(d.client().count(range_plan(0, 10, 2)), 10,
             "a new client after %s" % what)


def test_frame_invalid(d):
    _check_frame_invalid(d, b"\xde\xad\xbe\xef" * 8, "garbage")
    _check_frame_invalid(d, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP")
    _check_frame_invalid(d, struct.pack(">i", 0x7fffffff), "length 2^31-1")
    _check_frame_invalid(d, struct.pack(">i", -7), "a negative length")
    _check_frame_invalid(d, struct.pack(">i", -1), "length -1")


def test_frame_invalid_after_hello(d):
    c = d.client()
    c.send(struct.pack(">i", 0x7fffffff))
    reply = c.recv_json()
    check_error(reply, "FRAME_INVALID")
    check(c.at_eof(5), "connection not closed")
    check_eq(d.client().count(range_plan(0, 10, 2)), 10, "a new client")


@with_daemon(sets=["daemon.max_frame=1k"])
def test_frame_over_max_frame(d):
    c = d.client()
    small = records_plan(["x" * 600], 1)
    check_eq(c.iterate_all(small), [b"x" * 600], "a frame under the limit")
    c.send_json({"op": "execute", "action": "iterate",
                 "plan": records_plan(["x" * 2000], 1)})
    check_error(c.recv_json(), "FRAME_INVALID")
    check(c.at_eof(5), "connection not closed")
    check_eq(d.client().count(range_plan(0, 10, 2)), 10, "a new client")


def test_truncated_frame(d):
    for data in (struct.pack(">i", 100) + b"{\"op\"", b"\x00\x00"):
        c = d.client(hello=False)
        c.send(data)
        c.close()
    c = d.client()
    c.send(struct.pack(">i", 50) + b"{")
    c.close_abruptly()
    check_eq(d.client().count(range_plan(0, 10, 2)), 10, "a new client")


@with_daemon(sets=["daemon.max_connections_per_uid=3"])
def test_connection_limit(d):
    held = [d.client() for _ in range(3)]
    extra = d.client(hello=False)
    check_error(extra.recv_json(), "LIMIT_EXCEEDED")
    check(extra.at_eof(5), "a refused connection stays open")
    held.pop().close()

    def served():
        try:
            with d.client() as c:
                return c.count(range_plan(0, 10, 2)) == 10
        except (AssertionError, OSError):
            return False
    check(wait_until(served, 5, 0.1), "no room after a connection closed")


def test_cli_errors(d):
    plan = write_file(d.path("bad.json"), json.dumps(
        range_plan(0, 10, 1, ops=[{"explode": 1}])))
    r = d.cli(["run", plan])
    check_eq(r.returncode, 1, "exit status of a bad plan")
    check("plan.ops[0]" in r.stderr, "stderr %r lacks the field" % r.stderr)
    check_eq(r.stdout, "", "stdout of a bad plan")

    r = d.cli(["run", write_file(d.path("junk.json"), "{not json")])
    check_eq(r.returncode, 1, "exit status of a plan that is not JSON")
    check(r.stderr.strip() != "", "no message for a plan that is not JSON")

    r = d.cli(["run", d.path("missing.json")])
    check_eq(r.returncode, 1, "exit status of a missing plan file")
    check("missing.json" in r.stderr, "stderr %r lacks the file" % r.stderr)

    fail = write_file(d.path("fail.json"), json.dumps(records_plan(
        ["x"], 1, ops=[{"pipe": {"command": "echo boom >&2; exit 3"}}])))
    r = d.cli(["run", fail])
    check_eq(r.returncode, 1, "exit status of a failing task")
    check("boom" in r.stderr, "stderr %r lacks the task's message" % r.stderr)

    r = run_cli(["status"], socket_path=d.path("nobody.sock"))
    check_eq(r.returncode, 1, "exit status without a daemon")
    check("nobody.sock" in r.stderr, "stderr %r lacks the socket" % r.stderr)


if __name__ == "__main__":
    run_tests(globals())
