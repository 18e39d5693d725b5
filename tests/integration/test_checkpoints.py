"""
Checkpoints (docs/protocol.md, "Checkpoints"): the checkpoint action, eager
and lazy, local and reliable; the checkpoint source; checkpoint_drop;
status; what is left on disk after a drop, a session's close, a failed
task, a restart and a SIGKILL; another uid refused through emberd and on
disk; bad ids, options and checkpoint.dir.

Tasks that must run a known number of times leave a trace: a pipe that
appends each record to a file (tee -a), so that counting its lines counts
the records the original plan computed.
"""

import http.client
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403
from users import *	# noqa: E402,F403

SHARED = ["daemon.socket_mode=0666"]


def range_plan(n=100, parts=4, ops=()):
    return {"source": {"range": {"start": 0, "end": n}}, "partitions": parts,
            "ops": list(ops)}


def traced_plan(trace, n=40, parts=4, before=""):
    """A plan whose every computed record is appended to trace."""
    return range_plan(n, parts, [{"pipe": {"command": "%stee -a %s" %
                                           (before, trace)}}])


def make_trace(d, name="trace"):
    """An empty file the jobs' workers (any user) may append to."""
    path = d.path(name)
    with open(path, "w"):
        pass
    os.chmod(path, 0o666)
    return path


def trace_lines(path):
    with open(path) as f:
        return len(f.read().splitlines())


def checkpoint(c, plan, **options):
    """Run the checkpoint action; its reply (ok or not)."""
    return c.request({"op": "execute", "plan": plan, "action": "checkpoint",
                      "options": options})


def checkpoint_ok(c, plan, **options):
    reply = checkpoint(c, plan, **options)
    if not reply.get("ok"):
        raise RequestFailed(reply)
    check(isinstance(reply.get("checkpoint"), str), "no id in %r" % reply)
    uuid.UUID(reply["checkpoint"])
    return reply


def source(cid, ops=(), **extra):
    plan = {"source": {"checkpoint": cid}, "ops": list(ops)}
    plan.update(extra)
    return plan


def collect(c, plan):
    c.execute_ok(plan, "collect")
    return c.read_stream(False)


def listed(c, cid):
    """The status entry of checkpoint cid, or None."""
    for entry in c.status()["checkpoints"]:
        if entry["id"] == cid:
            return entry
    return None


def reliable_dir(d, uid=0):
    return os.path.join(d.tmpdir, "checkpoints", str(uid))


def local_dir(d, uid=0):
    return os.path.join(d.socket + ".local", "checkpoints", str(uid))


def eventually(predicate, what, timeout=10):
    """Wait for predicate to hold, or fail saying what did not."""
    check(wait_until(predicate, timeout), "after %ss: %s" % (timeout, what))


def entries(path):
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def expected_partitions(n=100, parts=4, keep=lambda s: True):
    out = []
    for p in range(parts):
        lo, hi = p * n // parts, (p + 1) * n // parts
        out.append([str(i).encode() for i in range(lo, hi)
                    if keep(str(i))])
    return out


def test_eager_local_roundtrip(d):
    """An eager local checkpoint reads back the same records in the same
    partitions, in order; partitions may be omitted; ops run over it."""
    with d.client() as c:
        reply = checkpoint_ok(c, range_plan(), local=True)
        check_eq(reply["partitions"], 4, "partitions")
        check_eq(reply["records"], 100, "records")
        check_eq(reply["kind"], "local", "kind")
        cid = reply["checkpoint"]
        check_eq(collect(c, source(cid)), expected_partitions(), "records")
        check_eq(collect(c, source(cid, [{"filter": {"contains": "7"}}])),
                 expected_partitions(keep=lambda s: "7" in s), "filtered")
        entry = listed(c, cid)
        check(entry is not None, "status does not list it")
        for key, want in (("kind", "local"), ("state", "ready"),
                          ("partitions", 4), ("records", 100)):
            check_eq(entry[key], want, "status %s" % key)
        check(entry["bytes"] > 0, "status bytes %r" % entry)
        check_eq(entries(local_dir(d)), [cid], "local directory")


def test_null_and_binary_records(d):
    """Null records, empty ones and bytes that are not text survive."""
    records = ["a", None, "", "x\u00e9\u0000y", "z" * 100000]
    with d.client() as c:
        cid = checkpoint_ok(c, {"source": {"parallelize": {
            "records": records}}, "partitions": 2})["checkpoint"]
        got = [r for p in collect(c, source(cid)) for r in p]
        want = [None if r is None else r.encode() for r in records]
        check_eq(got, want, "records")


def test_eager_runs_each_task_once(d):
    """Eager: every task runs once, at the checkpoint; reads never run the
    original plan again."""
    trace = make_trace(d)
    with d.client() as c:
        cid = checkpoint_ok(c, traced_plan(trace))["checkpoint"]
        check_eq(trace_lines(trace), 40, "trace after the checkpoint")
        for _ in range(3):
            check_eq(c.count(source(cid)), 40, "count")
        check_eq(sorted(r for p in collect(c, source(cid)) for r in p),
                 sorted(str(i).encode() for i in range(40)), "records")
        check_eq(trace_lines(trace), 40, "trace after the reads")


def test_lazy_computes_on_first_read(d):
    """Lazy: the answer comes at once and nothing runs; the first read
    computes and writes it, later reads use it."""
    trace = make_trace(d)
    with d.client() as c:
        reply = checkpoint_ok(c, traced_plan(trace), eager=False)
        cid = reply["checkpoint"]
        check_eq(reply["eager"], False, "eager")
        check_eq(listed(c, cid)["state"], "pending", "state before")
        check_during(lambda: trace_lines(trace) == 0, 0.5,
                     "a lazy checkpoint ran before it was read")
        check_eq(c.count(source(cid)), 40, "first read")
        check_eq(trace_lines(trace), 40, "trace after the first read")
        check_eq(listed(c, cid)["state"], "ready", "state after")
        check_eq(c.count(source(cid)), 40, "second read")
        check_eq(len(collect(c, source(cid))), 4, "partitions")
        check_eq(trace_lines(trace), 40, "trace after more reads")


def test_lazy_concurrent_first_reads(d):
    """Two first reads at once compute it once, and both get it."""
    trace = make_trace(d)
    with d.client() as c1, d.client(hello=False) as c2:
        cid = checkpoint_ok(c1, traced_plan(trace, before="sleep 0.3; "),
                            eager=False)["checkpoint"]
        c2.hello(session=c1.session)
        req = {"op": "execute", "plan": source(cid), "action": "count"}
        c1.send_json(req)
        c2.send_json(req)
        r1, r2 = c1.recv_json(), c2.recv_json()
        check_eq((r1.get("count"), r2.get("count")), (40, 40),
                 "counts (%r, %r)" % (r1, r2))
        check_eq(trace_lines(trace), 40, "trace")


def test_reliable_on_disk(d):
    """A reliable checkpoint: a directory of the uid's own, 0700, each
    partition's file and the manifest; drop removes it all."""
    with d.client() as c:
        cid = checkpoint_ok(c, range_plan())["checkpoint"]
        top = reliable_dir(d)
        st = os.stat(top)
        check_eq(stat.S_IMODE(st.st_mode), 0o700, "mode of the uid's dir")
        check_eq(entries(top), [cid], "the uid's directory")
        check_eq(entries(os.path.join(top, cid)),
                 ["manifest.json", "part-00000", "part-00001", "part-00002",
                  "part-00003"], "the checkpoint's files")
        check_eq(listed(c, cid)["kind"], "reliable", "kind")
        c.request_ok({"op": "checkpoint_drop", "checkpoint": cid})
        check(listed(c, cid) is None, "status lists a dropped checkpoint")
        eventually(lambda: entries(top) == [],
                   "files left")
        check_error(c.request({"op": "checkpoint_drop", "checkpoint": cid}),
                    "CHECKPOINT_NOT_FOUND", cid)
        check_error(c.execute(source(cid), "count"), "CHECKPOINT_NOT_FOUND",
                    "plan.source.checkpoint", cid)


def test_session_close_removes_local(d):
    """Closing the session removes its local checkpoints and their files;
    reliable ones stay."""
    with d.client() as c:
        local = checkpoint_ok(c, range_plan(), local=True)["checkpoint"]
        reliable = checkpoint_ok(c, range_plan())["checkpoint"]
        check_eq(entries(local_dir(d)), [local], "local files")
        c.request_ok({"op": "close_session"})
    eventually(lambda: entries(local_dir(d)) == [],
               "files left")
    with d.client() as c:
        check_error(c.execute(source(local), "count"), "CHECKPOINT_NOT_FOUND")
        check_eq(c.count(source(reliable)), 100, "reliable after the close")


def test_emberd_exit_removes_local(d):
    """A local checkpoint dies with emberd: its files are gone once emberd
    has exited on SIGTERM, with its session still open (and the local
    directory with them); a reliable one stays."""
    c = d.client()
    local = checkpoint_ok(c, range_plan(), local=True)["checkpoint"]
    reliable = checkpoint_ok(c, range_plan())["checkpoint"]
    check_eq(entries(local_dir(d)), [local], "local files")
    d.signal(signal.SIGTERM)
    check_eq(d.wait(), 0, "exit status")
    c.close()
    check(not os.path.exists(d.socket + ".local"),
          "left of the local directory: %r" %
          [(r, f) for r, _, f in os.walk(d.socket + ".local")])
    check_eq(entries(reliable_dir(d)), [reliable], "reliable files")


@with_daemon(sets=["checkpoint.clean_interval=100ms"])
def test_cleaner(d):
    """The periodic cleaner removes what no checkpoint owns (a failed
    removal's leftovers, a local checkpoint whose session is gone) and
    leaves the live ones alone."""
    with d.client() as c:
        cid = checkpoint_ok(c, range_plan(), local=True)["checkpoint"]
        reliable = checkpoint_ok(c, range_plan())["checkpoint"]
        strays = []
        for top in (local_dir(d), reliable_dir(d)):
            stray = os.path.join(top, str(uuid.uuid4()))
            os.mkdir(stray)
            with open(os.path.join(stray, "part-00000"), "w") as f:
                f.write("left behind")
            st = os.stat(top)
            for p in (stray, os.path.join(stray, "part-00000")):
                os.chown(p, st.st_uid, st.st_gid)
            os.utime(stray, (time.time() - 60, time.time() - 60))
            strays.append(stray)
        eventually(lambda: not any(os.path.exists(p) for p in strays),
                   "the cleaner left %r" % strays)
        check_eq(entries(local_dir(d)), [cid], "local checkpoints")
        check_eq(entries(reliable_dir(d)), [reliable], "reliable ones")
        check_eq(c.count(source(cid)), 100, "the live local one")
        check_eq(c.count(source(reliable)), 100, "the live reliable one")


@with_daemon(sets=["checkpoint.clean_interval=100ms",
                  "daemon.log_format=json"])
def test_cleaner_warning_is_the_users(d):
    """A name made in the user's own checkpoint directory, a newline and a
    JSON line of emberd's in it, that the cleaner cannot remove: its
    warning is the user's, and every line of the JSON log is one object
    of emberd's."""
    with d.client() as c:
        checkpoint_ok(c, range_plan())
    top = reliable_dir(d)
    forged = json.dumps({"time": "2026-01-01T00:00:00.000Z",
                         "level": "error", "process": "emberd", "pid": 1,
                         "message": "forged"})
    stray = os.path.join(top, "x\n" + forged)
    os.mkdir(stray)
    inside = os.path.join(stray, "part-00000")
    with open(inside, "w") as f:
        f.write("kept")
    st = os.stat(top)
    for p in (stray, inside):
        os.chown(p, st.st_uid, st.st_gid)
    os.chmod(stray, 0o500)	# the user cannot empty it
    os.utime(stray, (time.time() - 60, time.time() - 60))
    eventually(lambda: "forged" in d.log_text(), "no warning of the stray")
    for line in d.log_text().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            raise AssertionError("not JSON: %r" % line)
        check(obj.get("process") == "emberd", "a line said by %r: %r" %
              (obj.get("process"), line))
        check(obj.get("message") != "forged", "a forged line: %r" % line)
        if "forged" in obj["message"]:
            check(obj["message"].startswith("uid "), "not the user's: %r" %
                  line)


@with_daemon(sets=["checkpoint.clean_interval=200ms",
                  "daemon.max_helpers_per_uid=1"])
def test_drops_past_the_helper_limit(d):
    """Drops past the user's helper limit (one helper per uid) are all
    removed, by background helpers outside that limit, and none comes
    back after a restart."""
    with d.client() as c:
        ids = [checkpoint_ok(c, range_plan(40))["checkpoint"]
               for _ in range(5)]
        for cid in ids:
            c.request_ok({"op": "checkpoint_drop", "checkpoint": cid})
    eventually(lambda: entries(reliable_dir(d)) == [], "files left")
    check_eq(d.stop(), 0, "emberd's exit")
    d.start()
    with d.client() as c:
        check_during(lambda: c.status()["checkpoints"] == [], 0.5,
                     "a dropped checkpoint came back")


@with_daemon(sets=["daemon.max_helpers_per_uid=1",
                  "checkpoint.clean_interval=200ms"])
def test_drop_then_kill(d):
    """emberd killed right after drops it had no time to carry out: after
    the restart none of them is served again, and their files go."""
    # Many files each, so that their removal cannot be done before the
    # kill that follows the drops at once.
    with d.client() as c:
        ids = [checkpoint_ok(c, range_plan(640, 64))["checkpoint"]
               for _ in range(5)]
        for cid in ids:
            c.request_ok({"op": "checkpoint_drop", "checkpoint": cid})
        d.signal(signal.SIGKILL)
        d.wait()
    check(entries(reliable_dir(d)) != [], "every removal was done before "
          "the kill: the test proves nothing")
    d.start()
    with d.client() as c:
        check_during(lambda: c.status()["checkpoints"] == [], 1,
                     "a dropped checkpoint came back")
        for cid in ids:
            check_error(c.execute(source(cid), "count"),
                        "CHECKPOINT_NOT_FOUND")
    eventually(lambda: entries(reliable_dir(d)) == [], "files left")


def test_reliable_survives_restart(d):
    """A reliable checkpoint is read by a restarted emberd, from another
    session; a local one is gone, files and all."""
    with d.client() as c:
        cid = checkpoint_ok(c, range_plan())["checkpoint"]
        local = checkpoint_ok(c, range_plan(), local=True)["checkpoint"]
    check_eq(d.stop(), 0, "emberd's exit")
    d.start()
    with d.client() as c:
        eventually(lambda: listed(c, cid) is not None,
                   "the restarted emberd does not list %s" % cid)
        check_eq(listed(c, cid)["state"], "ready", "state")
        check_eq(collect(c, source(cid)), expected_partitions(), "records")
        check_error(c.execute(source(local), "count"), "CHECKPOINT_NOT_FOUND")
    eventually(lambda: entries(local_dir(d)) == [],
               "files left")


def test_lazy_reliable_survives_restart(d):
    """A lazy reliable checkpoint outlives emberd before it is read: the
    restarted emberd computes it on its first read, once, and the computed
    one outlives the next restart too."""
    trace = make_trace(d)
    with d.client() as c:
        cid = checkpoint_ok(c, traced_plan(trace), eager=False)["checkpoint"]
        eventually(lambda: "manifest.json" in entries(
            os.path.join(reliable_dir(d), cid)), "no manifest")
    for run in range(2):
        check_eq(d.stop(), 0, "emberd's exit")
        d.start()
        with d.client() as c:
            eventually(lambda: listed(c, cid) is not None,
                       "the restarted emberd does not list %s" % cid)
            check_eq(listed(c, cid)["state"], ["pending", "ready"][run],
                     "state after restart %d" % run)
            check_eq(trace_lines(trace), 40 * run, "trace before the read")
            check_eq(c.count(source(cid)), 40, "count")
            check_eq(c.count(source(cid)), 40, "count again")
            check_eq(trace_lines(trace), 40, "trace after the reads")


@with_daemon(sets=["workers.max=1"])
def test_sigkill_mid_eager_reliable(d):
    """emberd killed in the middle of an eager reliable checkpoint leaves
    nothing readable (no manifest), and after the restart nothing on
    disk."""
    top = reliable_dir(d)
    plan = range_plan(40, 8, [{"pipe": {"command": "sleep 0.2; cat"}}])
    c = d.client()
    c.send_json({"op": "execute", "plan": plan, "action": "checkpoint"})

    def some_written():
        for e in entries(top):
            if any(f.startswith("part-")
                   for f in entries(os.path.join(top, e))):
                return True
        return False
    eventually(some_written, "no partition file was written", 20)
    d.signal(signal.SIGKILL)
    d.wait()
    c.close()
    check(entries(top) != [], "nothing was written before the kill")
    for e in entries(top):
        check("manifest.json" not in entries(os.path.join(top, e)),
              "a manifest was written")
    d.start()
    eventually(lambda: entries(top) == [],
               "files left")
    with d.client() as c:
        check_eq(c.status()["checkpoints"], [], "checkpoints")


def test_failing_task_leaves_nothing(d):
    """A task that fails fails the checkpoint, and leaves nothing."""
    plan = range_plan(100, 4, [{"pipe": {"command": "cat; exit 3"}}])
    with d.client() as c:
        check_error(checkpoint(c, plan), "TASK_FAILED")
        check_error(checkpoint(c, plan, local=True), "TASK_FAILED")
        check_eq(c.status()["checkpoints"], [], "checkpoints")
    eventually(lambda: entries(reliable_dir(d)) == [] and
               entries(local_dir(d)) == [], "files left")


def test_checkpoint_of_a_checkpoint(d):
    """A plan over a checkpoint can be checkpointed in turn."""
    with d.client() as c:
        first = checkpoint_ok(c, range_plan(), local=True)["checkpoint"]
        second = checkpoint_ok(c, source(first, [{"filter": {
            "contains": "3"}}]))["checkpoint"]
        lazy = checkpoint_ok(c, source(second, [{"map": "upper"}]),
                             eager=False)["checkpoint"]
        check_eq(collect(c, source(lazy)),
                 expected_partitions(keep=lambda s: "3" in s), "records")


def test_drop_while_reading(d):
    """A read in progress finishes before a drop removes the files."""
    with d.client() as c, d.client(hello=False) as other:
        cid = checkpoint_ok(c, range_plan())["checkpoint"]
        other.hello(session=c.session)
        c.execute_ok(source(cid), "iterate")
        c.write_int(REQUEST_NEXT)
        first = c.read_partition()
        check_eq(first, (STREAM_PARTITION, expected_partitions()[0]),
                 "first partition")
        other.request_ok({"op": "checkpoint_drop", "checkpoint": cid})
        check_error(other.execute(source(cid), "count"),
                    "CHECKPOINT_NOT_FOUND")
        rest = []
        while True:
            c.write_int(REQUEST_NEXT)
            status, records = c.read_partition()
            if status == STREAM_DONE:
                break
            check_eq(status, STREAM_PARTITION, "status (%r)" % (records,))
            rest.append(records)
        check_eq(rest, expected_partitions()[1:], "the rest of the read")
        # The files stay while the read may still be reattached to; its
        # next request says its end arrived, and the read is over.
        check(entries(reliable_dir(d)) != [], "removed during the read")
        c.status()
        eventually(lambda: entries(reliable_dir(d)) == [],
                   "files left")


def test_bad_input(d):
    """Bad ids and options get clear errors; emberd serves on."""
    bogus = str(uuid.uuid4())
    with d.client() as c:
        check_error(checkpoint(c, range_plan(), local="yes"),
                    "ACTION_INVALID", "options.local")
        check_error(checkpoint(c, range_plan(), eager=1),
                    "ACTION_INVALID", "options.eager")
        check_error(checkpoint(c, range_plan(), path="/tmp/x"),
                    "ACTION_INVALID", "options.path", "save")
        check_error(c.execute(source("not-a-uuid"), "count"),
                    "PLAN_INVALID", "plan.source.checkpoint", "UUID")
        check_error(c.execute(source(7), "count"),
                    "PLAN_INVALID", "plan.source.checkpoint")
        check_error(c.execute(source(bogus), "count"),
                    "CHECKPOINT_NOT_FOUND", bogus)
        check_error(c.request({"op": "checkpoint_drop",
                               "checkpoint": "../../etc"}),
                    "REQUEST_INVALID", "UUID")
        check_error(c.request({"op": "checkpoint_drop"}),
                    "REQUEST_INVALID", "checkpoint")
        check_error(c.request({"op": "checkpoint_drop", "checkpoint": bogus}),
                    "CHECKPOINT_NOT_FOUND", bogus)
        cid = checkpoint_ok(c, range_plan(), local=True)["checkpoint"]
        check_error(c.execute(source(cid, partitions=3), "count"),
                    "PLAN_INVALID", "plan.partitions", "4")
        check_eq(c.count(source(cid, partitions=4)), 100, "count")


@with_daemon(sets=["daemon.max_checkpoints_per_uid=1"])
def test_limit(d):
    """A uid's checkpoints are bounded; the error names the key, and a
    drop gives the room back."""
    with d.client() as c:
        cid = checkpoint_ok(c, range_plan(), local=True)["checkpoint"]
        check_error(checkpoint(c, range_plan()), "LIMIT_EXCEEDED",
                    "daemon.max_checkpoints_per_uid")
        c.request_ok({"op": "checkpoint_drop", "checkpoint": cid})
        checkpoint_ok(c, range_plan())


@with_daemon(sets=["daemon.max_checkpoint_bytes_per_uid=1k"])
def test_bytes_limit(d):
    """What a checkpoint writes counts against the uid's bytes; one that
    passes them fails and leaves nothing."""
    with d.client() as c:
        check_error(checkpoint(c, range_plan(10000)), "LIMIT_EXCEEDED",
                    "daemon.max_checkpoint_bytes_per_uid")
        check_eq(c.status()["checkpoints"], [], "checkpoints")
    eventually(lambda: entries(reliable_dir(d)) == [],
               "files left")


@no_daemon
def test_checkpoint_dir_missing(_):
    """A checkpoint.dir that cannot be made (below a file): a warning at
    start-up, and an error at the checkpoint, naming the directory; local
    checkpoints still work."""
    with Daemon(start=False) as d:
        write_file(d.path("file"), b"")
        bad = os.path.join(d.path("file"), "ember", "checkpoints")
        d.sets.append("checkpoint.dir=" + bad)
        d.start()
        # Logged at start-up; the log file may lag the socket.
        check(wait_until(lambda: re.search(r"warn: checkpoint\.dir: %s" %
                                           re.escape(bad), d.log_text()),
                         10), "start-up log: %s" % d.log_tail())
        with d.client() as c:
            check_error(checkpoint(c, range_plan()), "CHECKPOINT_FAILED",
                        "checkpoint.dir", bad)
            cid = checkpoint_ok(c, range_plan(), local=True)["checkpoint"]
            check_eq(c.count(source(cid)), 100, "local checkpoint")


@no_daemon
def test_checkpoint_dir_made_with_its_parents(_):
    """On a fresh machine /var/lib/ember is missing: emberd makes
    checkpoint.dir and the directories above it, and the first reliable
    checkpoint works."""
    with Daemon(start=False) as d:
        top = d.path("var")
        ck = os.path.join(top, "lib", "ember", "checkpoints")
        d.sets.append("checkpoint.dir=" + ck)
        d.start()
        with d.client() as c:
            cid = checkpoint_ok(c, range_plan())["checkpoint"]
            check_eq(c.count(source(cid)), 100, "reliable checkpoint")
        for p in (top, os.path.dirname(os.path.dirname(ck)),
                  os.path.dirname(ck)):
            st = os.stat(p)
            check_eq(st.st_uid, os.geteuid(), "owner of %s" % p)
            check_eq(st.st_mode & 0o7777, 0o755, "mode of %s" % p)
        check_eq(os.stat(ck).st_mode & 0o7777, 0o711, "mode of " + ck)


@no_daemon
def test_checkpoint_dir_behind_a_users_link(_):
    """A link in a sticky directory that another user owns, pointing at a
    directory of root's, is refused: its owner could point it elsewhere."""
    if os.geteuid() != 0:
        print("skip test_checkpoint_dir_behind_a_users_link: needs root")
        return
    with Daemon(start=False) as d:
        sticky = d.path("sticky")
        os.mkdir(sticky)
        os.chmod(sticky, 0o1777)
        target = d.path("roots")
        os.mkdir(target)
        link = os.path.join(sticky, "link")
        os.symlink(target, link)
        os.lchown(link, 65534, 65534)
        d.sets.append("checkpoint.dir=" + os.path.join(link, "ck"))
        d.start()
        with d.client() as c:
            check_error(checkpoint(c, range_plan()), "CHECKPOINT_FAILED",
                        "a link owned by uid 65534")
        check_eq(os.listdir(target), [], "the link's target")


@no_daemon
def test_checkpoint_dir_not_emberds(_):
    """A checkpoint.dir others may write, or a link, is refused."""
    with Daemon(start=False) as d:
        loose = d.path("loose")
        os.mkdir(loose)
        os.chmod(loose, 0o777)
        d.sets.append("checkpoint.dir=" + loose)
        d.start()
        with d.client() as c:
            check_error(checkpoint(c, range_plan()), "CHECKPOINT_FAILED",
                        loose, "writable by it alone")
    with Daemon(start=False) as d:
        target = d.path("target")
        os.mkdir(target)
        link = d.path("link")
        os.symlink(target, link)
        d.sets.append("checkpoint.dir=" + link)
        d.start()
        with d.client() as c:
            check_error(checkpoint(c, range_plan()), "CHECKPOINT_FAILED",
                        link)
        check_eq(os.listdir(target), [], "the link's target")


@no_daemon
def test_full_disk(_):
    """A full disk during a write fails the checkpoint cleanly: the error
    says so, nothing half-written is left, and emberd serves on."""
    if os.geteuid() != 0:
        print("skip test_full_disk: needs root to mount a small tmpfs")
        return
    with Daemon(start=False) as d:
        small = d.path("small")
        os.mkdir(small)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o",
                            "size=512k,mode=0755", "tmpfs", small],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("skip test_full_disk: mount -t tmpfs: %s" %
                  r.stderr.strip())
            return
        try:
            d.sets.append("checkpoint.dir=" + os.path.join(small, "ck"))
            d.start()
            top = os.path.join(small, "ck", "0")
            with d.client() as c:
                check_error(checkpoint(c, range_plan(300000, 4)),
                            "TASK_FAILED", "No space left on device")
                check_eq(c.status()["checkpoints"], [], "checkpoints")
                eventually(lambda: entries(top) == [], "files left")
                cid = checkpoint_ok(c, range_plan(1000))["checkpoint"]
                check_eq(c.count(source(cid)), 1000, "a checkpoint that fits")
            d.stop()
        finally:
            subprocess.run(["umount", "-l", small], capture_output=True)


@with_daemon(sets=["status.listen=127.0.0.1:0"])
def test_status_page_hides_checkpoints(d):
    """The status listener, which any local user can reach, shows no
    user's checkpoints unless status.users names that user."""
    port = status_port(d)
    with d.client() as c:
        cid = checkpoint_ok(c, range_plan(), local=True)["checkpoint"]
        check(listed(c, cid) is not None, "status request lists it")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/status.json")
        web = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    check_eq(web["checkpoints"], [], "checkpoints on the status page")
    check(cid not in json.dumps(web), "its id appears on the page")


@needs_users
@with_daemon(sets=SHARED)
def test_lazy_wide_checkpoint_of_a_user(d):
    """A user's lazy checkpoint of a plan in stages is computed, at its
    first read, with that user's shuffle directory."""
    plan = range_plan(1000, 4, ops=[{"distinct": {"partitions": 3}}])

    def make_and_read():
        with Client(d.socket) as c:
            cid = checkpoint_ok(c, plan, eager=False)["checkpoint"]
            return c.execute(source(cid), "count")
    reply = as_user("a", make_and_read)
    check_eq((reply.get("ok"), reply.get("count")), (True, 1000),
             "the checkpoint's first read: %r" % reply)

@needs_users
@with_daemon(sets=SHARED)
def test_other_uid_refused(d):
    """Another uid can neither read a checkpoint through emberd nor open
    its files on disk; its own ids and drops are scoped to it."""
    sock = d.socket
    plan = range_plan()

    def make():
        with Client(sock) as c:
            cid = checkpoint_ok(c, plan)["checkpoint"]
            check_eq(c.count(source(cid)), 100, "owner's read")
            return cid
    cid = as_user("a", make)
    uid_a = USERS["a"][0]
    files = os.path.join(reliable_dir(d, uid_a), cid)
    check_eq(os.stat(reliable_dir(d, uid_a)).st_uid, uid_a, "owner")
    check("part-00000" in os.listdir(files), "files: %r" %
          os.listdir(files))

    def attack():
        out = {}
        with Client(sock) as c:
            r = c.execute(source(cid), "count")
            out["read"] = r.get("error", {}).get("class")
            r = c.request({"op": "checkpoint_drop", "checkpoint": cid})
            out["drop"] = r.get("error", {}).get("class")
            out["listed"] = [e["id"] for e in c.status()["checkpoints"]]
        for path in (os.path.join(files, "part-00000"),
                     os.path.join(files, "manifest.json")):
            try:
                os.close(os.open(path, os.O_RDONLY))
                out[path] = "opened"
            except PermissionError:
                out[path] = "denied"
        try:
            os.listdir(reliable_dir(d, uid_a))
            out["list"] = "listed"
        except PermissionError:
            out["list"] = "denied"
        return out
    out = as_user("b", attack)
    check_eq(out.pop("read"), "CHECKPOINT_NOT_FOUND", "b's read")
    check_eq(out.pop("drop"), "CHECKPOINT_NOT_FOUND", "b's drop")
    check_eq(out.pop("listed"), [], "b's status")
    check_eq(set(out.values()), {"denied"}, "b on disk: %r" % out)

    def still_there():
        with Client(sock) as c:
            return c.count(source(cid))
    check_eq(as_user("a", still_there), 100, "a's read after b's attack")


def test_cli(d):
    """ember run --action checkpoint prints the id, a plan names it, and
    ember checkpoint drop removes it."""
    plan = d.path("plan.json")
    with open(plan, "w") as f:
        json.dump(range_plan(), f)
    r = d.cli(["run", "--action", "checkpoint", plan])
    check_eq(r.returncode, 0, "exit (%s)" % r.stderr)
    cid = r.stdout.strip()
    uuid.UUID(cid)
    reader = d.path("reader.json")
    with open(reader, "w") as f:
        json.dump(source(cid), f)
    r = d.cli(["run", "--count", reader])
    check_eq((r.returncode, r.stdout.strip()), (0, "100"), "count (%s)" %
             r.stderr)
    r = d.cli(["run", "--action", "checkpoint", "--option", "eager=false",
               "--option", "local=false", plan])
    check_eq(r.returncode, 0, "lazy (%s)" % r.stderr)
    r = d.cli(["checkpoint", "drop", cid])
    check_eq(r.returncode, 0, "drop (%s)" % r.stderr)
    r = d.cli(["checkpoint", "drop", cid])
    check_eq(r.returncode, 1, "second drop")
    check("CHECKPOINT_NOT_FOUND" in r.stderr, r.stderr)
    r = d.cli(["checkpoint", "remove", cid])
    check_eq(r.returncode, 2, "unknown subcommand")


if __name__ == "__main__":
    run_tests(globals())
