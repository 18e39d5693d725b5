"""Plans with wide ops run in stages (docs/plans.md, "Stages"): emberd's
side of it.  The shuffle files live in the uid's own directory, which no
other user can list or plant in; they go when their operation ends,
whatever ends it; their bytes count against daemon.max_shuffle_per_uid;
a map stage's failure reaches the client.

Where emberd can (as root here), the uid's directory is a tmpfs of its
own (test_shuffle_mounts.py), mounted in the host's namespace: what the
test sees is what the users and their jobs see."""

import os
import re
import signal
import stat

from harness import *
from users import USERS, AsUser, needs_users


def keyed_plan(n=2000, partitions=4, ops=None):
    """Words w0..w9 over n records, counted per word."""
    return records_plan(["w%d,%d" % (i % 10, i) for i in range(n)],
                        partitions, ops=[{"key_by": {"field": {
                            "sep": ",", "index": 0}}}] + (ops or []))


def shuffle_dir(d, uid=0):
    """The uid's shuffle directory."""
    return os.path.join(d.socket + ".local", "shuffle", str(uid))


def shuffle_files(d, uid=0):
    """What the uid's shuffle directory holds; [] once it is gone."""
    try:
        return os.listdir(shuffle_dir(d, uid))
    except FileNotFoundError:
        return []


def mounted(d):
    """Whether each uid's shuffle directory is a tmpfs of its own."""
    return d.client().status()["shuffle_bounds"]["by"] == "tmpfs per user"


def hold_stream(d, n=20000):
    """A client whose stream of a sort has its map stage done and its
    first partition read: its operation holds its shuffle files."""
    c = d.client()
    op = c.execute_ok(keyed_plan(n, 4, ops=[{"sort_by": {}}]), "iterate",
                      {"prefetch": 0})["operation"]
    c.write_int(1)
    status, _ = c.read_partition()
    check_eq(status, STREAM_PARTITION, "the held stream's partition 0")
    c.held = op
    return c, op


def end_stream(c):
    """Read a held stream to its end and release it: its operation
    ends."""
    while True:
        c.write_int(1)
        status, _ = c.read_partition()
        if status == STREAM_DONE:
            break
        check_eq(status, STREAM_PARTITION, "the held stream")
    c.request_ok({"op": "release", "operation": c.held, "all": True})
    c.close()


def test_stages_answer(d):
    c = d.client()
    got = c.collect_all(keyed_plan(ops=[{"reduce_by_key": {"fn": "count"}},
                                        {"map": "key"}]))
    check_eq(sorted(got), [b"w%d" % i for i in range(10)], "keys")
    check_eq(c.count(keyed_plan(ops=[{"distinct": {"partitions": 3}}])),
             2000, "distinct pairs")


def _ends_clean(d, what, during=None):
    """Check that the uid's shuffle files are there during the operation
    that during() starts and ends, and gone after."""
    c, op = hold_stream(d)
    check(op in shuffle_files(d), "no shuffle files while a stream runs")
    # The uid's directory: the job user's alone.
    st = os.stat(shuffle_dir(d))
    check_eq(stat.S_IMODE(st.st_mode), 0o700, "mode of the uid's directory")
    if during is not None:
        during()
    end_stream(c)
    check(wait_until(lambda: shuffle_files(d) == [], 10),
          "shuffle files left after %s: %r" % (what, shuffle_files(d)))


def test_shuffle_files_go_when_the_operation_ends(d):
    c = d.client()
    # A finished operation's go.
    _ends_clean(d, "a count", lambda: c.count(keyed_plan(ops=[
        {"group_by_key": {}}])))
    # A failed operation's go too: a key_by value that is not a number.
    r = c.execute(keyed_plan(ops=[{"reduce_by_key": {"fn": "sum"}}]),
                  "count")
    check_error(r, "TASK_FAILED", "not a number")
    check(wait_until(lambda: shuffle_files(d) == [], 10),
          "shuffle files left after a failure: %r" % shuffle_files(d))
    # And an interrupted stream's (not reattachable: a reattachable one
    # whose client left in its map stage waits for a reattach).
    c2 = d.client()
    c2.execute_ok(keyed_plan(20000, 8, ops=[{"sort_by": {}}]), "iterate",
                  {"reattachable": False})
    c2.close()
    check(wait_until(lambda: shuffle_files(d) == [], 10),
          "shuffle files left after a client went: %r" % shuffle_files(d))
    check(d.alive(), "emberd died")


def test_an_operation_removes_its_own_files_while_others_run(d):
    """The uid's directory outlives an operation while another of the
    uid's holds it: the ended one's files go, the other's stay."""
    c, held = hold_stream(d)
    op = d.client().execute_ok(keyed_plan(ops=[{"group_by_key": {}}]),
                               "count")["operation"]
    check(wait_until(lambda: shuffle_files(d) == [held], 10),
          "the uid's directory holds %r, not only %r" % (shuffle_files(d),
                                                        held))
    check(op not in shuffle_files(d), "the ended operation's files")
    end_stream(c)
    check(wait_until(lambda: shuffle_files(d) == [], 10),
          "shuffle files left: %r" % shuffle_files(d))


def test_a_map_stage_failure_reaches_the_client(d):
    # The first stage's tasks fail: key_by a field past the end drops
    # every record, so make it fail in the value instead, as a number.
    plan = records_plan(["a,x", "b,y"], 2, ops=[
        {"key_by": {"field": {"sep": ",", "index": 0},
                    "value": {"field": {"sep": ",", "index": 1}}}},
        {"reduce_by_key": {"fn": "sum"}},
        {"sort_by": {}}])
    r = d.client().execute(plan, "count")
    msg = check_error(r, "TASK_FAILED", "stage 0", "not a number")
    check(d.alive(), "emberd died")


@with_daemon(sets=["daemon.shuffle_mounts=no"])
def test_a_restart_removes_what_a_crash_left(d):
    """Without mounts, what a crash leaves is on local_dir's filesystem
    until the next start removes it (with mounts, it goes with emberd:
    test_shuffle_mounts.py)."""
    # A stream whose map stage is done holds its shuffle files; emberd
    # is killed with it.
    c = d.client()
    c.execute_ok(keyed_plan(20000, 4, ops=[{"sort_by": {}}]), "iterate")
    c.write_int(1)
    check_eq(c.read_int(), 1, "a partition follows")
    check(not mounted(d), "a mount with daemon.shuffle_mounts=no")
    top = os.path.join(d.socket + ".local", "shuffle", "0")
    check(os.listdir(top) != [], "no shuffle files while the stream runs")
    d.signal(signal.SIGKILL)
    d.wait()
    d.kill_leftovers()
    check(os.listdir(top) != [], "the crash left no files to test with")
    d.start()
    check(wait_until(lambda: os.listdir(top) == [], 15),
          "a restart left %r" % os.listdir(top))


def test_a_lost_shuffle_file_reruns_only_its_map_task(d):
    words = ["%05d" % ((i * 7919) % 20000) for i in range(20000)]
    c = d.client()
    reply = c.execute_ok(records_plan(words, 4, ops=[{"key_by": {}},
                                                    {"sort_by": {}},
                                                    {"map": "key"}]),
                         "iterate", {"prefetch": 0})
    op = reply["operation"]
    c.write_int(1)
    check_eq(c.read_int(), 1, "partition 0 follows")
    got = []
    while True:
        n = c.read_int()
        if n == -1:
            break
        got.append(c.recv_exact(n))
    lost = os.path.join(shuffle_dir(d), op, "s0-m2.data")
    check(os.path.exists(lost), "no %s" % lost)
    os.unlink(lost)
    for p in range(1, 4):
        c.write_int(1)
        check_eq(c.read_int(), 1, "partition %d follows" % p)
        while True:
            n = c.read_int()
            if n == -1:
                break
            got.append(c.recv_exact(n))
    c.write_int(1)
    check_eq(c.read_int(), 0, "the end")
    check_eq(got, sorted(w.encode() for w in words), "sorted records")
    log = d.log_text()
    reruns = re.findall(r"running map task (\d+) of stage (\d+) again", log)
    check_eq(reruns, [("2", "0")], "map tasks run again")
    check(os.path.exists(lost), "the lost file was not written again")


def sorted_words(n=20000):
    return ["%05d" % ((i * 7919) % n) for i in range(n)]


def test_reattach_recomputes_from_the_shuffle_files(d):
    """A stream of a sort cut mid-partition and reattached goes on from
    its position; the partition is computed again from the shuffle files,
    and no map stage runs again."""
    words = sorted_words()
    want = sorted(w.encode() for w in words)
    c = d.client()
    op = c.execute_ok(records_plan(words, 4, ops=[
        {"sort_by": {"partitions": 4}}]), "iterate",
        {"prefetch": 0})["operation"]
    c.write_int(REQUEST_NEXT)
    status, part0 = c.read_partition()
    check_eq(status, STREAM_PARTITION, "partition 0")
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "partition 1 follows")
    got = [c.read_record() for _ in range(100)]
    stages = d.client().status()["counters"]["stages"]
    c.close_abruptly()
    c2 = d.client(hello=False)
    c2.request_ok({"op": "hello", "version": 1, "session": c.session})
    reply = c2.request({"op": "reattach", "operation": op, "partition": 1,
                        "offset": 100})
    check(reply.get("ok"), "reattach: %r" % reply)
    rest = []
    while True:
        c2.write_int(REQUEST_NEXT)
        status, part = c2.read_partition()
        if status == STREAM_DONE:
            break
        check_eq(status, STREAM_PARTITION, "after reattach")
        rest += part
    check_eq(part0 + got + rest, want, "the sorted stream")
    check_eq(d.client().status()["counters"]["stages"], stages,
             "map stages run after the reattach")


def test_a_checkpoint_cuts_the_lineage(d):
    """A checkpoint of a shuffled dataset holds its pairs; reading it runs
    no map stage."""
    c = d.client()
    reply = c.request({"op": "execute", "plan": keyed_plan(ops=[
        {"reduce_by_key": {"fn": "count", "partitions": 3}}]),
        "action": "checkpoint", "options": {}})
    check(reply.get("ok"), "checkpoint: %r" % reply)
    cid = reply["checkpoint"]
    stages = c.status()["counters"]["stages"]
    got = c.collect_all({"source": {"checkpoint": cid}})
    check_eq(sorted(got), sorted((b"w%d" % i, b"200") for i in range(10)),
             "the checkpoint's pairs")
    check_eq(c.status()["counters"]["stages"], stages,
             "map stages run to read the checkpoint")
    # And pairs read back feed a wide op of their own.
    got = c.collect_all({"source": {"checkpoint": cid}, "ops": [
        {"sort_by": {"descending": True, "partitions": 2}},
        {"map": "key"}]})
    check_eq(got, [b"w%d" % i for i in range(9, -1, -1)], "sorted keys")


def test_status_shows_the_running_stage(d):
    slow = job_readable(os.path.join(BUILDDIR, "tests", "integration",
                                     "slow_udf.so"))
    plan = records_plan(["w%d" % i for i in range(16)], 8, ops=[
        {"udf": {"library": slow, "symbol": "udf_slow",
                 "args": {"ms": 200}}},
        {"key_by": {}}, {"group_by_key": {"partitions": 3}}])
    c = d.client()
    c.send_json({"op": "execute", "plan": plan, "action": "count"})

    def stages():
        ops = d.client().status()["operations"]
        return ops[0].get("stages") if ops else None
    st = wait_until(stages, 10)
    check(st is not None, "no stages in the status")
    check_eq((st["count"], st["running"], st["tasks"]), (2, 0, 8),
             "the map stage running")
    out = d.cli(["status"]).stdout
    out = out.decode() if isinstance(out, bytes) else out
    check("s0:" in out, "ember status shows no stage:\n%s" % out)
    check_eq(c.recv_json()["count"], 16, "the groups")


@with_daemon(sets=["daemon.max_shuffle_per_uid=1k"])
def test_shuffle_bytes_are_bounded(d):
    """By the kernel where the uid's directory is a mount: the map task
    fails with ENOSPC, and the error names the key."""
    r = d.client().execute(keyed_plan(20000, 4, ops=[{"group_by_key": {}}]),
                           "count")
    if mounted(d):
        check_error(r, "TASK_FAILED", "No space left on device",
                    "daemon.max_shuffle_per_uid")
    else:
        check_error(r, "LIMIT_EXCEEDED", "max_shuffle")
    check(d.alive(), "emberd died")


@with_daemon(sets=["daemon.max_shuffle_per_uid=1k",
                   "daemon.shuffle_mounts=no"])
def test_shuffle_bytes_are_bounded_as_reported_without_mounts(d):
    r = d.client().execute(keyed_plan(20000, 4, ops=[{"group_by_key": {}}]),
                           "count")
    check_error(r, "LIMIT_EXCEEDED", "max_shuffle_per_uid")
    check(d.alive(), "emberd died")


def test_kinds_refused_before_any_task(d):
    r = d.client().execute(range_plan(0, 10, 2, ops=[
        {"reduce_by_key": {"fn": "sum"}}]), "count")
    check_error(r, "PLAN_INVALID", "takes no plain records")
    r = d.client().execute(range_plan(0, 10, 2, ops=[
        {"key_by": {}}, {"join": {"plan": {"source": {"range": {
            "end": 3}}}}}]), "count")
    check_error(r, "PLAN_INVALID", "join.plan", "not pairs")
    # count_by_value and reduce read plain records.
    for action, options in (("count_by_value", None),
                            ("reduce", {"fn": "sum"})):
        r = d.client().execute(range_plan(0, 10, 2, ops=[{"key_by": {}}]),
                               action, options)
        check_error(r, "PLAN_INVALID", "gives pair records", action)


@needs_users
@with_daemon(sets=["daemon.socket_mode=0666"])
def test_another_user_cannot_see_or_plant_shuffle_files(d):
    a_uid, _, _ = USERS["a"]

    def run_a(ctl):
        # a's stream holds its directory (and mount) while b looks.
        c, _ = hold_stream(d)
        ctl.ready(1)
        ctl.wait_go()
        end_stream(c)
        return 1

    a = AsUser(USERS["a"], run_a)
    a.wait_ready()
    top = shuffle_dir(d, a_uid)
    st = os.stat(top)
    check_eq(st.st_uid, a_uid, "owner of a's shuffle directory")
    check_eq(stat.S_IMODE(st.st_mode), 0o700, "its mode")
    check(shuffle_files(d, a_uid) != [], "a's files")
    host_top = top

    def b_looks(ctl):
        out = {}
        for what, fn in (("list", lambda: os.listdir(host_top)),
                         ("plant", lambda: open(os.path.join(host_top, "x"),
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
    # b's own jobs run in the same (the host's) mount namespace as b.
    check_eq(os.readlink("/proc/%d/ns/mnt" % d.pid),
             os.readlink("/proc/self/ns/mnt"), "emberd's mount namespace")
    a.go()
    check_eq(a.result(), 1, "a's stream")


if __name__ == "__main__":
    run_tests(globals())
