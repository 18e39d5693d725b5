"""The actions that answer with one reply: count_by_value, reduce and save,
through the protocol and the CLI."""

import json
import os
import signal
import time

from harness import *


def _reply(c, plan, action, options=None):
    reply = c.execute(plan, action, options)
    if not reply["ok"]:
        raise RequestFailed(reply)
    return reply


def test_count_by_value(d):
    c = d.client()
    words = ["a", "b", "a", "c", "a", "b", None, "", None]
    reply = _reply(c, records_plan(words, 4), "count_by_value")
    check_eq(reply["counts"], {"a": 3, "b": 2, "c": 1, "": 1}, "counts")
    check_eq(reply["nulls"], 2, "nulls")
    check_eq(reply["partitions"], 4, "partitions")


def test_count_by_value_merges_partitions(d):
    """Each record value appears in many partitions; the merge adds them."""
    c = d.client()
    plan = range_plan(0, 100000, 37, ops=[{"pipe": {"command":
                                                    "awk '{print $1 % 7}'"}}])
    reply = _reply(c, plan, "count_by_value")
    want = {}
    for i in range(100000):
        want[str(i % 7)] = want.get(str(i % 7), 0) + 1
    check_eq(reply["counts"], want, "counts")


def test_count_by_value_binary_records(d):
    """Records that are not UTF-8 are counted, their bad bytes replaced."""
    c = d.client()
    plan = range_plan(0, 3, 1, ops=[{"pipe": {"command":
                                              "printf 'a\\377\\nok\\nok\\n'"}}])
    reply = _reply(c, plan, "count_by_value")
    check_eq(reply["counts"], {"a\ufffd": 1, "ok": 2}, "counts")


def test_count_by_value_records_with_nul(d):
    """A record holding a NUL byte is not a key of counts (jansson, like
    other parsers, refuses such a key): it comes in pairs, and a C client
    reads the reply."""
    records = ["a\0b", "ab", "a\0b", "", None, "\0", "b\0"]
    c = d.client()
    reply = _reply(c, records_plan(records, 3), "count_by_value")
    check_eq(reply["counts"], {"ab": 1, "": 1}, "counts")
    check_eq(reply["pairs"], [["\0", 1], ["a\0b", 2], ["b\0", 1]], "pairs")
    check_eq(reply["nulls"], 1, "nulls")
    # The CLI (libember, jansson) prints each record's bytes, NULs
    # included; the null as \N, the empty record as nothing.
    path = write_file(d.path("nul.json"), json.dumps(records_plan(records,
                                                                  3)))
    r = d.cli(["run", "--action", "count_by_value", path])
    check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
    check_eq(r.stdout, "2\ta\0b\n1\t\n1\t\0\n1\tab\n1\tb\0\n1\t\\N\n",
             "CLI output")
    # Without such a record the reply is as it always was.
    reply = _reply(c, records_plan(["x", "y"], 2), "count_by_value")
    check("pairs" not in reply, "pairs in %r" % reply)


def test_word_count(d):
    """Word count: text + flat_map split + count_by_value."""
    path = d.path("words.txt")
    with open(path, "w") as f:
        for i in range(2000):
            f.write("the quick fox the lazy dog the end\n")
    c = d.client()
    plan = text_plan([path], 5, ops=[{"flat_map": {"split": " "}}])
    reply = _reply(c, plan, "count_by_value")
    check_eq(reply["counts"], {"the": 6000, "quick": 2000, "fox": 2000,
                               "lazy": 2000, "dog": 2000, "end": 2000},
             "word counts")


@with_daemon(sets=["daemon.max_result=4096"])
def test_count_by_value_over_max_result(d):
    c = d.client()
    reply = c.execute(range_plan(0, 20000, 4), "count_by_value")
    check_error(reply, "RESULT_TOO_LARGE", "daemon.max_result")
    check_eq(c.count(range_plan(0, 10, 2)), 10, "the next job")


def test_reduce_sum_min_max(d):
    c = d.client()
    plan = range_plan(-50, 1001, 9)
    check_eq(_reply(c, plan, "reduce", {"fn": "sum"})["value"],
             sum(range(-50, 1001)), "sum")
    check_eq(_reply(c, plan, "reduce", {"fn": "min"})["value"], -50, "min")
    check_eq(_reply(c, plan, "reduce", {"fn": "max"})["value"], 1000, "max")
    check_eq(_reply(c, plan, "reduce", {"fn": "sum"})["count"], 1051,
             "count")


def test_reduce_reals(d):
    c = d.client()
    plan = records_plan(["1.5", "2", "-0.25", "1e2"], 3)
    r = _reply(c, plan, "reduce", {"fn": "sum"})
    check(abs(r["value"] - 103.25) < 1e-9, "sum %r" % r["value"])
    check_eq(_reply(c, plan, "reduce", {"fn": "min"})["value"], -0.25, "min")
    check_eq(_reply(c, plan, "reduce", {"fn": "max"})["value"], 100.0, "max")


def test_reduce_int64_overflow_becomes_real(d):
    c = d.client()
    big = str(2 ** 62)
    r = _reply(c, records_plan([big] * 4, 4), "reduce", {"fn": "sum"})
    check(isinstance(r["value"], float), "value %r is not a real" % r["value"])
    check(abs(r["value"] - 4 * 2 ** 62) / (4 * 2 ** 62) < 1e-12,
          "sum %r" % r["value"])


def test_reduce_empty(d):
    c = d.client()
    r = _reply(c, range_plan(0, 0, 3), "reduce", {"fn": "max"})
    check_eq(r["value"], None, "value")
    check_eq(r["count"], 0, "count")


def test_reduce_not_a_number(d):
    c = d.client()
    reply = c.execute(records_plan(["1", "2", "x7", "3"], 2), "reduce",
                      {"fn": "sum"})
    check_error(reply, "TASK_FAILED", "x7", "partition 1")
    check_eq(c.count(range_plan(0, 10, 2)), 10, "the next job")


def test_action_options_refused(d):
    c = d.client()
    plan = range_plan(0, 10, 2)
    check_error(c.execute(plan, "reduce"), "ACTION_INVALID", "options.fn")
    check_error(c.execute(plan, "reduce", {"fn": "avg"}), "ACTION_INVALID",
                "options.fn", "avg")
    check_error(c.execute(plan, "save"), "ACTION_INVALID", "options.path")
    check_error(c.execute(plan, "save", {"path": "relative/dir"}),
                "ACTION_INVALID", "options.path", "absolute")
    check_error(c.execute(plan, "count", {"prefetch": 2}), "ACTION_INVALID",
                "options.prefetch")
    check_error(c.execute(plan, "count_by_value", {"bogus": 1}),
                "ACTION_INVALID", "options.bogus")
    check_eq(c.count(plan), 10, "the next job")


def _parts(path):
    return sorted(n for n in os.listdir(path) if n.startswith("part-"))


def test_save(d):
    out = os.path.join(job_writable(d.path("w")), "out")
    c = d.client()
    r = _reply(c, range_plan(0, 1000, 4), "save", {"path": out})
    check_eq(r["files"], 4, "files")
    check_eq(r["records"], 1000, "records")
    check_eq(_parts(out), ["part-%05d" % i for i in range(4)], "part files")
    check(os.path.exists(os.path.join(out, "_SUCCESS")), "no _SUCCESS")
    check(not os.path.exists(os.path.join(out, "_temporary")),
          "_temporary left behind")
    lines = []
    for p in _parts(out):
        with open(os.path.join(out, p), "rb") as f:
            lines += f.read().splitlines()
    check_eq(lines, numbers(1000), "saved records, in partition order")


def test_save_refuses_a_non_empty_directory(d):
    out = os.path.join(job_writable(d.path("w")), "out")
    c = d.client()
    _reply(c, range_plan(0, 10, 2), "save", {"path": out})
    check_error(c.execute(range_plan(0, 10, 2), "save", {"path": out}),
                "ACTION_INVALID", "not empty", "overwrite")
    r = _reply(c, range_plan(0, 30, 3), "save",
               {"path": out, "overwrite": True})
    check_eq(r["files"], 3, "files")
    check_eq(_parts(out), ["part-00000", "part-00001", "part-00002"],
             "only the new parts")
    foreign = os.path.join(job_writable(d.path("f")), "foreign")
    os.mkdir(foreign)
    open(os.path.join(foreign, "keep.txt"), "w").close()
    check_error(c.execute(range_plan(0, 10, 2), "save",
                          {"path": foreign, "overwrite": True}),
                "ACTION_INVALID", "not empty")
    check(os.path.exists(os.path.join(foreign, "keep.txt")),
          "a file a save did not write was removed")


def test_save_failure_leaves_nothing(d):
    """A failing partition: no _SUCCESS and no part file, not even those
    of the partitions that succeeded."""
    out = os.path.join(job_writable(d.path("w")), "out")
    c = d.client()
    plan = range_plan(0, 40, 4, ops=[{"pipe": {"command":
        "read first; case $first in 20) exit 3;; esac; echo $first; cat"}}])
    check_error(c.execute(plan, "save", {"path": out}), "TASK_FAILED",
                "partition 2")
    check(not os.path.exists(os.path.join(out, "_SUCCESS")), "_SUCCESS")
    check_eq(_parts(out), [], "part files")
    check(not os.path.exists(os.path.join(out, "_temporary")),
          "_temporary left behind")


def test_save_worker_killed_mid_save(d):
    out = os.path.join(job_writable(d.path("w")), "out")
    c = d.client()
    plan = range_plan(0, 4, 2, ops=[{"pipe": {"command":
                                              "cat; sleep 30"}}])
    c.send_json({"op": "execute", "plan": plan, "action": "save",
                 "options": {"path": out}})
    worker = d.worker_running("sleep 30")
    os.kill(worker, signal.SIGKILL)
    reply = c.recv_json()
    check_error(reply, "TASK_FAILED", "SIGKILL")
    check(not os.path.exists(os.path.join(out, "_SUCCESS")), "_SUCCESS")
    check_eq(_parts(out), [], "part files")


def test_save_abandoned_by_its_client(d):
    out = os.path.join(job_writable(d.path("w")), "out")
    c = d.client()
    plan = range_plan(0, 4, 2, ops=[{"pipe": {"command": "cat; sleep 30"}}])
    c.send_json({"op": "execute", "plan": plan, "action": "save",
                 "options": {"path": out, "reattachable": False}})
    d.worker_running("sleep 30")
    c.close_abruptly()
    check(wait_until(lambda: not os.path.exists(
        os.path.join(out, "_temporary")), 5.0), "_temporary left behind")
    check(not os.path.exists(os.path.join(out, "_SUCCESS")), "_SUCCESS")


@with_daemon(sets=["daemon.max_helpers_per_uid=1"])
def test_helper_steps_back_to_back_within_one_helper(d):
    """A save over a text source asks for two helpers in a row (the plan's
    check, then save_begin) with nothing between: with one helper allowed,
    the first's slot is free once it answered, not once emberd heard that
    its process exited."""
    src = write_file(d.path("in.txt"), "a\nb\nc\n")
    os.chmod(d.tmpdir, 0o755)
    with d.client() as c:
        for i in range(10):
            out = os.path.join(job_writable(d.path("w%d" % i)), "out")
            reply = c.execute(text_plan([src], 2), "save", {"path": out})
            check(reply.get("ok") is True, "save %d: %r" % (i, reply))
            check(os.path.exists(os.path.join(out, "_SUCCESS")),
                  "save %d: no _SUCCESS" % i)


def _helpers_of(d):
    return [p for p in descendants(d.pid)
            if "ember-worker: helper" in cmdline(p)]


@with_daemon(sets=["daemon.max_helpers_per_uid=1",
                   "daemon.helper_timeout=15s"])
def test_save_abandoned_while_helpers_are_at_their_limit(d):
    """The undo of an abandoned save is emberd's background work: it does
    not wait for the user's helpers, at their limit (another of theirs
    runs), and the _temporary goes while that one still runs."""
    out = os.path.join(job_writable(d.path("w")), "out")
    loop = d.path("loop")
    os.mkdir(loop, 0o755)
    for name in "abcd":
        os.symlink(".", os.path.join(loop, name))
    c = d.client()
    plan = range_plan(0, 4, 2, ops=[{"pipe": {"command": "cat; sleep 30"}}])
    c.send_json({"op": "execute", "plan": plan, "action": "save",
                 "options": {"path": out, "reattachable": False}})
    d.worker_running("sleep 30")
    # A glob that takes hours holds the user's one helper.
    g = d.client()
    g.send_json({"op": "execute", "action": "count",
                 "plan": text_plan([loop + "/*" * 12 + "/x"])})
    check(wait_until(lambda: len(_helpers_of(d)) == 1, 10), "no helper")
    c.close_abruptly()
    check(wait_until(lambda: not os.path.exists(
        os.path.join(out, "_temporary")), 2.0), "_temporary left behind")
    check(len(_helpers_of(d)) == 1, "the glob's helper is gone: the test "
          "proves nothing")
    check_error(g.recv_json(), "LIMIT_EXCEEDED", "daemon.helper_timeout")


def test_cli_actions(d):
    words = d.path("w.txt")
    with open(words, "w") as f:
        f.write("b a b c b a\n")
    plan = d.path("plan.json")
    with open(plan, "w") as f:
        json.dump(text_plan([words], ops=[{"flat_map": {"split": " "}}]), f)
    r = d.cli(["run", "--action", "count_by_value", plan])
    check_eq(r.returncode, 0, "exit (stderr %r)" % r.stderr)
    check_eq(r.stdout, "3\tb\n2\ta\n1\tc\n", "count_by_value output")

    with open(plan, "w") as f:
        json.dump(range_plan(1, 101, 4), f)
    r = d.cli(["run", "--action", "reduce", "--option", "fn=sum", plan])
    check_eq((r.returncode, r.stdout), (0, "5050\n"), "reduce")
    out = os.path.join(job_writable(d.path("w")), "saved")
    r = d.cli(["run", "--action", "save", "--option", "path=" + out, plan])
    check_eq((r.returncode, r.stdout), (0, "100 records in 4 files\n"),
             "save (stderr %r)" % r.stderr)
    r = d.cli(["run", "--action", "reduce", plan])
    check_eq(r.returncode, 1, "exit without fn")
    check("ACTION_INVALID" in r.stderr and "options.fn" in r.stderr,
          "stderr %r" % r.stderr)


def test_options_limit_is_global(d):
    c = d.client()
    plan = range_plan(0, 100000, 8)
    for action, limit in (("iterate", 12345), ("collect", 7)):
        c.execute_ok(plan, action, options={"limit": limit})
        got = []
        while True:	# fewer partitions than execute said: read by hand
            if action == "iterate":
                c.write_int(REQUEST_NEXT)
            status, payload = c.read_partition()
            if status == STREAM_DONE:
                break
            check_eq(status, STREAM_PARTITION, "%s response" % action)
            got += payload
        check_eq(got, numbers(limit), "%s with limit" % action)
    check_eq(c.collect_all(plan, options={"limit": 200000}), numbers(100000),
             "a limit past the end")
    check_error(c.execute(plan, "count", options={"limit": 3}),
                "ACTION_INVALID", "options.limit belongs to action")
    check_eq(c.count(plan), 100000, "the next job")


if __name__ == "__main__":
    run_tests(globals())
