"""Plans with wide ops run in stages (docs/plans.md, "Stages"): emberd's
side of it.  The shuffle files live in the uid's own directory, which no
other user can list or plant in; they go when their operation ends,
whatever ends it; their bytes count against daemon.max_shuffle_per_uid;
a map stage's failure reaches the client."""

import os
import stat

from harness import *
from users import USERS, AsUser, needs_users


def keyed_plan(n=2000, partitions=4, ops=None):
    """Words w0..w9 over n records, counted per word."""
    return records_plan(["w%d,%d" % (i % 10, i) for i in range(n)],
                        partitions, ops=[{"key_by": {"field": {
                            "sep": ",", "index": 0}}}] + (ops or []))


def shuffle_dir(d, uid=0):
    return os.path.join(d.socket + ".local", "shuffle", str(uid))


def test_stages_answer(d):
    c = d.client()
    got = c.collect_all(keyed_plan(ops=[{"reduce_by_key": {"fn": "count"}},
                                        {"map": "key"}]))
    check_eq(sorted(got), [b"w%d" % i for i in range(10)], "keys")
    check_eq(c.count(keyed_plan(ops=[{"distinct": {"partitions": 3}}])),
             2000, "distinct pairs")


def test_shuffle_files_go_when_the_operation_ends(d):
    c = d.client()
    c.count(keyed_plan(ops=[{"group_by_key": {}}]))
    top = shuffle_dir(d)
    st = os.stat(top)
    # The uid's directory: the job user's alone.
    check_eq(stat.S_IMODE(st.st_mode), 0o700, "mode of the uid's directory")
    check(wait_until(lambda: os.listdir(top) == [], 10),
          "shuffle files left: %r" % os.listdir(top))
    # A failed operation's go too: a key_by value that is not a number.
    r = c.execute(keyed_plan(ops=[{"reduce_by_key": {"fn": "sum"}}]),
                  "count")
    check_error(r, "TASK_FAILED", "not a number")
    check(wait_until(lambda: os.listdir(top) == [], 10),
          "shuffle files left after a failure: %r" % os.listdir(top))
    # And an interrupted stream's.
    c2 = d.client()
    c2.execute_ok(keyed_plan(20000, 8, ops=[{"sort_by": {}}]), "iterate")
    c2.close()
    check(wait_until(lambda: os.listdir(top) == [], 10),
          "shuffle files left after a client went: %r" % os.listdir(top))
    check(d.alive(), "emberd died")


def test_a_map_stage_failure_reaches_the_client(d):
    # The first stage's tasks fail: key_by a field past the end drops
    # every record, so make it fail in the value instead, as a number.
    plan = records_plan(["a,x", "b,y"], 2, ops=[
        {"key_by": {"field": {"sep": ",", "index": 0},
                    "value": {"field": {"sep": ",", "index": 1}}}},
        {"reduce_by_key": {"fn": "sum"}},
        {"sort_by": {}}])
    r = d.client().execute(plan, "collect")
    msg = check_error(r, "TASK_FAILED")
    check("not a number" in msg, "message: %r" % msg)
    check(d.alive(), "emberd died")


@with_daemon(sets=["daemon.max_shuffle_per_uid=1k"])
def test_shuffle_bytes_are_bounded(d):
    r = d.client().execute(keyed_plan(20000, 4, ops=[{"group_by_key": {}}]),
                           "count")
    check_error(r, "LIMIT_EXCEEDED", "max_shuffle")
    check(d.alive(), "emberd died")


def test_kinds_refused_before_any_task(d):
    r = d.client().execute(range_plan(0, 10, 2, ops=[
        {"reduce_by_key": {"fn": "sum"}}]), "count")
    check_error(r, "PLAN_INVALID", "takes no plain records")
    r = d.client().execute(range_plan(0, 10, 2, ops=[
        {"key_by": {}}, {"join": {"plan": {"source": {"range": {
            "end": 3}}}}}]), "count")
    check_error(r, "PLAN_INVALID", "join.plan", "not pairs")


@needs_users
def test_another_user_cannot_see_or_plant_shuffle_files(d):
    a_uid, _, _ = USERS["a"]

    def run_a(ctl):
        from harness import Client
        with Client(d.socket) as c:
            return c.count(keyed_plan(ops=[{"group_by_key": {}}]))

    a = AsUser(USERS["a"], run_a)
    check_eq(a.result(), 10, "a's groups")
    top = shuffle_dir(d, a_uid)
    st = os.stat(top)
    check_eq(st.st_uid, a_uid, "owner of a's shuffle directory")
    check_eq(stat.S_IMODE(st.st_mode), 0o700, "its mode")

    def b_looks(ctl):
        out = {}
        for what, fn in (("list", lambda: os.listdir(top)),
                         ("plant", lambda: open(os.path.join(top, "x"),
                                                "w"))):
            try:
                fn()
                out[what] = "allowed"
            except PermissionError:
                out[what] = "refused"
        return out

    b = AsUser(USERS["b"], b_looks)
    check_eq(b.result(), {"list": "refused", "plant": "refused"},
             "b in a's shuffle directory")


if __name__ == "__main__":
    run_tests(globals())
