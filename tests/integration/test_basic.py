"""The normal path: hello, every source and op, the three actions, the CLI,
status, and concurrent clients."""

import json
import os

from harness import *


def test_hello(d):
    c = d.client(hello=False)
    r = c.hello(client="test_basic")
    check(r["ok"], "hello failed: %r" % r)
    check_eq(r.get("version"), 1, "version")
    check(isinstance(r.get("session"), str) and r["session"] != "",
          "hello reply has no session: %r" % r)
    check(isinstance(r.get("server"), str) and r["server"] != "",
          "hello reply has no server: %r" % r)
    other = d.client(hello=False).hello()
    check(other["session"] != r["session"], "two connections, one session")


def test_request_before_hello(d):
    c = d.client(hello=False)
    check_error(c.request({"op": "status"}), "HELLO_REQUIRED")
    check_error(c.request({"op": "execute", "plan": range_plan(0, 10, 1),
                           "action": "count"}), "HELLO_REQUIRED")
    check(c.hello()["ok"], "hello after HELLO_REQUIRED failed")
    check(c.status()["ok"], "status after hello failed")


def test_version_mismatch(d):
    c = d.client(hello=False)
    r = c.hello(version=2)
    check_error(r, "VERSION_MISMATCH")
    check_eq(r.get("version"), 1, "the version the server speaks")


def _slices(n, partitions):
    return [n * i // partitions for i in range(partitions + 1)]


def _check_range_partitions(parts, n, partitions):
    check_eq(len(parts), partitions, "partitions")
    check_eq([r for p in parts for r in p], numbers(n), "records")
    sizes = [len(p) for p in parts]
    check(max(sizes) - min(sizes) <= 1, "unbalanced partitions: %r" % sizes)


def test_iterate_range_many_partitions(d):
    c = d.client()
    _check_range_partitions(c.iterate_partitions(range_plan(0, 1000, 37)),
                            1000, 37)
    # The connection is back to control frames: run another job on it.
    check_eq(c.iterate_all(range_plan(0, 10, 3)), numbers(10), "second job")


def test_iterate_empty_partitions(d):
    """range 0..5 in 16 partitions: eleven partitions are exactly 1, -1."""
    c = d.client()
    c.execute_ok(range_plan(0, 5, 16), "iterate")
    check_eq(c.partitions, 16, "partitions")
    records, empty = [], 0
    for i in range(16):
        c.write_int(REQUEST_NEXT)
        check_eq(c.read_int(), STREAM_PARTITION, "response for partition %d"
                 % i)
        n = 0
        while True:
            rec = c.read_record()
            if rec == END_OF_DATA_SECTION:
                break
            check(isinstance(rec, bytes), "bad record %r" % (rec,))
            records.append(rec)
            n += 1
        empty += n == 0
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_DONE, "end of stream")
    check_eq(records, numbers(5), "records")
    check_eq(empty, 11, "empty partitions")


def test_collect_range(d):
    c = d.client()
    _check_range_partitions(c.collect_partitions(range_plan(0, 1000, 37)),
                            1000, 37)
    parts = c.collect_partitions(range_plan(0, 5, 16))
    check_eq(len(parts), 16, "partitions")
    check_eq([r for p in parts for r in p], numbers(5), "records")
    check_eq(c.collect_all(range_plan(0, 0, 4)), [], "an empty range")


def test_range_steps(d):
    c = d.client()
    check_eq(c.collect_all(range_plan(0, 100, 5, step=7)),
             numbers(0, 100, 7), "step 7")
    check_eq(c.collect_all(range_plan(10, 0, 3, step=-3)),
             numbers(10, 0, -3), "step -3")
    check_eq(c.collect_all(range_plan(-5, 5, 2)), numbers(-5, 5),
             "negative numbers")


def test_count(d):
    c = d.client()
    check_eq(c.count(range_plan(0, 1000000, 8)), 1000000, "count")
    want = sum(1 for i in range(1000000) if "7" in str(i))
    check_eq(c.count(range_plan(0, 1000000, 8,
                                ops=[{"filter": {"contains": "7"}}])),
             want, "count of a filter")
    check_eq(c.count(range_plan(0, 0, 3)), 0, "count of nothing")


def test_parallelize_with_nulls(d):
    c = d.client()
    recs = ["a", None, "", "b", None, "ccc"]
    want = [b"a", None, b"", b"b", None, b"ccc"]
    check_eq(c.iterate_all(records_plan(recs, 3)), want, "iterate")
    check_eq(c.collect_all(records_plan(recs, 4)), want, "collect")
    check_eq(c.count(records_plan(recs, 2)), 6, "count")
    check_eq(c.iterate_all(records_plan(["x"], 4)), [b"x"],
             "more partitions than records")


def _write_texts(d):
    files = {
        "a.txt": "ember runs jobs\nnothing here\nthe ember daemon\n",
        "b.txt": "",
        "c.txt": "no newline at the end: ember",
        "d.txt": "\n\nember\n  ember with spaces  \n",
    }
    paths = []
    for name in sorted(files):
        paths.append(write_file(d.path(name), files[name]))
    lines = []
    for name in sorted(files):
        lines += files[name].splitlines()
    return paths, lines


def test_text_source(d):
    c = d.client()
    paths, lines = _write_texts(d)
    # As many partitions as files; they split the files' concatenation by
    # byte range (docs/protocol.md section 3), so they need not follow the
    # file boundaries.
    parts = c.iterate_partitions(text_plan(paths))
    check_eq(len(parts), len(paths), "partitions")
    check_eq([r for p in parts for r in p], [l.encode() for l in lines],
             "lines")
    ops = [{"filter": {"contains": "ember"}}, {"map": "upper"}]
    want = [l.upper().encode() for l in lines if "ember" in l]
    check_eq(c.collect_all(text_plan(paths, ops=ops)), want,
             "filter contains + map upper")


def test_text_split_by_bytes(d):
    """More partitions than files: byte ranges aligned to lines."""
    c = d.client()
    lines = ["line %d %s" % (i, "x" * (i % 13)) for i in range(2000)]
    a = write_file(d.path("big1.txt"), "\n".join(lines[:1500]) + "\n")
    b = write_file(d.path("big2.txt"), "\n".join(lines[1500:]) + "\n")
    for partitions in (1, 2, 7, 64):
        got = c.collect_all(text_plan([a, b], partitions=partitions))
        check_eq(got, [l.encode() for l in lines],
                 "lines with %d partitions" % partitions)
    check_eq(c.count(text_plan([a, b], partitions=5)), 2000, "count")


def test_map_ops(d):
    c = d.client()
    recs = ["  Hello World  ", "abc", "MiXeD\t", "", "\t x \t"]
    check_eq(c.collect_all(records_plan(recs, 2, ops=[{"map": "upper"}])),
             [r.upper().encode() for r in recs], "upper")
    check_eq(c.collect_all(records_plan(recs, 2, ops=[{"map": "lower"}])),
             [r.lower().encode() for r in recs], "lower")
    check_eq(c.collect_all(records_plan(recs, 2, ops=[{"map": "trim"}])),
             [r.strip().encode() for r in recs], "trim")
    ops = [{"map": "trim"}, {"filter": {"contains": "l"}}, {"map": "upper"}]
    check_eq(c.collect_all(records_plan(recs, 3, ops=ops)),
             [r.strip().upper().encode() for r in recs if "l" in r.strip()],
             "trim, filter, upper")


def test_pipe(d):
    c = d.client()
    recs = ["abc", "def", "Ghi"]
    ops = [{"pipe": {"command": "tr a-z A-Z"}}]
    check_eq(c.iterate_all(records_plan(recs, 2, ops=ops)),
             [b"ABC", b"DEF", b"GHI"], "tr a-z A-Z")
    ops = [{"pipe": {"command": "grep 1"}}]
    check_eq(c.collect_all(range_plan(0, 200, 4, ops=ops)),
             [n for n in numbers(200) if b"1" in n], "grep 1")
    ops = [{"pipe": {"command": "cat"}}, {"filter": {"contains": "9"}}]
    check_eq(c.count(range_plan(0, 100000, 4, ops=ops)),
             sum(1 for i in range(100000) if "9" in str(i)), "count of a pipe")


def _plan_file(d, plan, name="plan.json"):
    return write_file(d.path(name), json.dumps(plan))


def test_cli_run(d):
    paths, lines = _write_texts(d)
    ops = [{"filter": {"contains": "ember"}}, {"map": "upper"}]
    plan = _plan_file(d, text_plan(paths, ops=ops))
    want = "".join(l.upper() + "\n" for l in lines if "ember" in l)
    r = d.cli(["run", plan])
    check_eq(r.returncode, 0, "exit status (stderr: %r)" % r.stderr)
    check_eq(r.stdout, want, "ember run output")


def test_cli_collect_and_count(d):
    plan = _plan_file(d, range_plan(0, 1000, 7))
    r = d.cli(["run", "--collect", plan])
    check_eq(r.returncode, 0, "collect exit status (stderr: %r)" % r.stderr)
    check_eq(r.stdout, "".join("%d\n" % i for i in range(1000)),
             "collect output")
    r = d.cli(["run", "--count", plan])
    check_eq(r.returncode, 0, "count exit status (stderr: %r)" % r.stderr)
    check_eq(r.stdout.strip(), "1000", "count output")


def test_cli_plan_from_stdin(d):
    plan = json.dumps(range_plan(0, 20, 3, ops=[{"filter":
                                                 {"contains": "1"}}]))
    r = d.cli(["run", "-"], input=plan)
    check_eq(r.returncode, 0, "exit status (stderr: %r)" % r.stderr)
    check_eq(r.stdout, "".join("%d\n" % i for i in range(20) if "1" in str(i)),
             "output")


def test_cli_socket_from_environment(d):
    plan = _plan_file(d, range_plan(0, 10, 2))
    r = run_cli(["run", "--count", plan], env={"EMBER_SOCKET": d.socket})
    check_eq(r.returncode, 0, "exit status (stderr: %r)" % r.stderr)
    check_eq(r.stdout.strip(), "10", "count output")


def test_cli_status(d):
    r = d.cli(["status"])
    check_eq(r.returncode, 0, "exit status (stderr: %r)" % r.stderr)
    check(r.stdout.strip() != "", "ember status printed nothing")


def test_any_nonzero_request(d):
    """Any non-zero int32 asks for the next partition."""
    c = d.client()
    c.execute_ok(range_plan(0, 30, 3), "iterate")
    got = []
    for ask in (1, 42, -7):
        c.write_int(ask)
        status, recs = c.read_partition()
        check_eq(status, STREAM_PARTITION, "answer to %d" % ask)
        got += recs
    c.write_int(2)
    check_eq(c.read_int(), STREAM_DONE, "end")
    check_eq(got, numbers(30), "records")


def test_client_chosen_operation_id(d):
    op = "6f1c8a52-0d3e-4b7a-9c51-2f0e8b1d7a44"
    c = d.client()
    r = c.execute(range_plan(0, 100, 4), "iterate", operation=op)
    check(r["ok"], "execute with an operation id: %r" % r)
    check_eq(r["operation"], op, "operation id")
    other = d.client()
    check_error(other.execute(range_plan(0, 10, 1), "count", operation=op),
                "OPERATION_ALREADY_EXISTS")
    check_eq(c.read_stream(pull=True), [numbers(0, 25), numbers(25, 50),
                                    numbers(50, 75), numbers(75, 100)],
             "the stream of the first")


def test_close_session(d):
    c = d.client()
    first = c.session
    c.request_ok({"op": "close_session"})
    r = c.hello()
    check(r["ok"], "hello after close_session: %r" % r)
    check(r["session"] != first, "close_session kept the session")
    check_eq(c.count(range_plan(0, 10, 2)), 10, "a job in the new session")


def test_status_op(d):
    c = d.client()
    check_eq(c.count(range_plan(0, 100, 4)), 100, "count")
    st = c.status()
    for key in ("server", "pid", "uptime_ms", "workers", "pools", "sessions",
                "operations", "counters"):
        check(key in st, "status reply lacks %r: %r" % (key, st))
    check_eq(st["pid"], d.pid, "status pid")
    check(isinstance(st["uptime_ms"], int) and st["uptime_ms"] >= 0,
          "uptime_ms: %r" % st["uptime_ms"])
    check(isinstance(st["counters"], dict), "counters is not an object")


def _job(d, kind, k):
    """One of eight different jobs and what it must return."""
    with d.client() as c:
        if kind == 0:
            return c.iterate_all(range_plan(0, 20000 + k, 9)), numbers(20000 + k)
        if kind == 1:
            return (c.collect_all(range_plan(0, 5000, 5,
                                             ops=[{"filter":
                                                   {"contains": "3"}}])),
                    [n for n in numbers(5000) if b"3" in n])
        if kind == 2:
            return c.count(range_plan(0, 300000, 6)), 300000
        if kind == 3:
            recs = ["r%d" % i for i in range(500)]
            return (c.iterate_all(records_plan(recs, 7,
                                               ops=[{"map": "upper"}])),
                    [r.upper().encode() for r in recs])
        if kind == 4:
            return (c.collect_all(range_plan(0, 3000, 3, ops=[
                {"pipe": {"command": "tr 0-9 a-j"}}])),
                [n.translate(bytes.maketrans(b"0123456789", b"abcdefghij"))
                 for n in numbers(3000)])
        if kind == 5:
            return c.iterate_all(range_plan(1000, 0, 4, step=-1)), \
                numbers(1000, 0, -1)
        if kind == 6:
            return c.count(records_plan([None] * 77, 3)), 77
        return (c.collect_all(range_plan(0, 2000, 11,
                                         ops=[{"map": "trim"}])),
                numbers(2000))


def test_concurrent_clients(d):
    joins = [in_thread(_job, d, k, k) for k in range(8)]
    for k, join in enumerate(joins):
        got, want = join(90)
        check_eq(got, want, "job %d" % k)
    check(d.client().status()["ok"], "status after the jobs")


if __name__ == "__main__":
    run_tests(globals())
