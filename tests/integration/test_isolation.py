#!/usr/bin/env python3
"""
Each user alone, and nobody starved.

Run as root (as CI does), these tests create two unprivileged users of
their own (removed at the end), run emberd as root and check, as one user
against the other: that status and every error show a user only what is
theirs; that operation ids are the uid's own; that a job's commands start
in a clean environment (PATH from workers.path, the user's HOME, USER,
LOGNAME and SHELL, workers.env's variables and nothing else of emberd's)
in the user's home or /; that workers are shared fairly; and that a
client that stops reading does not hold a worker past
stream.stall_timeout, yet gets every record exactly once when it reads
again.  Not root, they say so and do nothing.
"""

import http.client
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403
from users import *	# noqa: E402,F403

SHARED = ["daemon.socket_mode=0666"]
SECRET = "ember-secret-%d" % os.getpid()
# emberd's own environment in the tests that look at a job's.
DAEMON_ENV = {"EMBER_TEST_SECRET": SECRET, "LANG": "C.UTF-8",
              "LC_PAPER": "C", "PATH": "/root/secret-bin:/usr/bin:/bin"}
# What /bin/sh may add of its own.
SHELL_VARS = {"PWD", "OLDPWD", "SHLVL", "_"}


def error_of(reply):
    """(class, message) of an error reply, or None."""
    if reply.get("ok") is not False:
        return None
    return (reply["error"]["class"], reply["error"]["message"])


def sleeper(n=1):
    """A plan whose tasks hold a worker for a while."""
    return records_plan(["x"] * n, n, ops=[{"pipe": {"command":
                                                     "sleep 30"}}])


def pipe_output(d, command):
    """The lines command prints, run through a pipe op by the caller."""
    with d.client() as c:
        recs = c.collect_all(records_plan(["x"], 1, ops=[
            {"pipe": {"command": command}}]))
        return [r.decode("utf-8", "replace") for r in recs]


def env_of(lines):
    env = {}
    for line in lines:
        k, _, v = line.partition("=")
        env[k] = v
    return env


# ---------------------------------------------------------------------------
# What a user sees

def _holding_a(d, op_id, path):
    """As a: a session with a broadcast and an operation (id op_id, a text
    plan on path, then a pipe) that holds a worker; ready with what b must
    not see."""
    def run(ctl):
        c = d.client()
        bid = c.broadcast_put(b"a's broadcast\n")
        plan = text_plan([path], 1, ops=[{"pipe": {"command": "sleep 30"}}])
        reply = c.execute(plan, "iterate", operation=op_id)
        check(reply["ok"], "a's execute: %r" % reply)
        c.write_int(REQUEST_NEXT)
        # The stream holds c: look from another connection of the session.
        c2 = d.client(hello=False)
        c2.hello(session=c.session)

        def busy():
            st = c2.status()
            return st if any(w.get("task", {}).get("operation") == op_id
                             for w in st["workers"]) else None
        st = wait_until(busy, 10)
        check(st is not None, "a's task never ran")
        ctl.ready({"session": c.session, "broadcast": bid,
                   "workers": [w["pid"] for w in st["workers"]],
                   "operations": [o["id"] for o in st["operations"]]})
        ctl.wait_go()
        return True
    return run


@needs_users
@with_daemon(sets=SHARED)
def test_root_status_prints_no_control_from_a_user(d):
    """User a's plan names terminal controls (C0's ESC and BEL, C1's CSI,
    OSC and ST, which a terminal takes in UTF-8 too) where its
    description quotes it, early enough to be in the column ember status
    shows; root's ember status shows a's operation, and prints none of
    them on root's terminal."""
    controls = "\x1b[2J\x07\u009b2J\u009d0;owned\u009c"
    plan = {"source": {"range": {"start": 0, "end": 1}}, "partitions": 1,
            "ops": [{"pipe": {"command": controls}}]}

    def hold(ctl):
        c = d.client()
        reply = c.execute_ok(plan, "iterate")
        ctl.ready(reply["operation"])
        ctl.wait_go()
        c.close()
        return 0
    a = AsUser(USERS["a"], hold)
    try:
        op = a.wait_ready()
        r = d.cli(["status"])
    finally:
        a.close()
    check_eq(r.returncode, 0, "ember status: %s" % r.stderr)
    check(op[:8] in r.stdout, "a's operation not shown:\n%s" % r.stdout)
    bad = sorted({"U+%04X" % ord(ch) for ch in r.stdout
                  if ch != "\n" and (ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0)})
    check(not bad, "root's terminal got %s:\n%r" % (bad, r.stdout))


@needs_users
@with_daemon(sets=SHARED + ["workers.max=2"])
def test_status_shows_a_user_only_theirs(d):
    """b's status holds none of a's sessions, operations, workers, pools,
    broadcasts or limits; a sees its own; root sees both."""
    path = write_file(d.path("a-private-input.txt"), "one\ntwo\n")
    os.chmod(path, 0o644)
    op_id = str(uuid.uuid4())
    a = AsUser(USERS["a"], _holding_a(d, op_id, path))
    try:
        mine = a.wait_ready()
        check_eq(mine["operations"], [op_id], "a's operations")
        check(len(mine["workers"]) == 1, "a's workers: %r" % mine)
        root_c = d.client()
        root_op = root_c.execute_ok(sleeper(), "iterate")["operation"]
        root_c.write_int(REQUEST_NEXT)

        def b_status():
            with d.client() as c:
                return c.status()
        st = as_user("b", b_status)
        text = json.dumps(st)
        a_uid, _, a_name = USERS["a"]
        for what, value in (("operation id", op_id),
                            ("session", mine["session"]),
                            ("path", path), ("name", a_name),
                            ("root's operation", root_op)):
            check(value not in text, "b's status shows a's %s %s: %s" %
                  (what, value, text))
        for w in st["workers"]:
            check(w["pid"] not in mine["workers"], "b sees a's worker %d"
                  % w["pid"])
        for p in st["pools"]:
            check(p["client"] != a_uid, "b sees a's pool: %r" % p)
        for u in st["limits"]["users"]:
            check(u["uid"] != a_uid, "b sees a's limits: %r" % u)
        check(all(s["uid"] == USERS["b"][0] for s in st["sessions"]),
              "b sees others' sessions: %r" % st["sessions"])
        check_eq(len(st["broadcasts"]), 0, "broadcasts b sees (b's own "
                 "session is another)")

        # The CLI renders what b may see, and nothing of a's.
        def b_cli():
            r = run_cli(["status"], socket_path=d.socket)
            return [r.returncode, r.stdout, r.stderr]
        rc, out, err = as_user("b", b_cli)
        check_eq(rc, 0, "ember status as b (stderr %r)" % err)
        check("workers" in out.lower(), "ember status as b: %r" % out)
        for value in [op_id, mine["session"]] + [str(p) for p in
                                                 mine["workers"]]:
            check(not re.search(r"\b%s\b" % value, out),
                  "ember status shows b %s of a's:\n%s" % (value, out))

        with d.client() as c:
            root = c.status()
        check(op_id in json.dumps(root["operations"]), "root does not see "
              "a's operation")
        check(set(mine["workers"]) <= {w["pid"] for w in root["workers"]},
              "root does not see a's workers")
        check(any(p["client"] == a_uid for p in root["pools"]),
              "root does not see a's pool")
    finally:
        a.close()


def _index_maps(pid):
    """/proc/PID/map_files entries of the broadcast set indexes a process
    maps (read as root)."""
    found = []
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            if "/memfd:ember-index-" in line:
                found.append("/proc/%d/map_files/%s" % (pid,
                                                       line.split()[0]))
    return found


def _b_reads(paths):
    """As b: the paths of these b could open and read a byte of."""
    def run():
        opened = []
        for path in paths:
            try:
                with open(path, "rb") as f:
                    f.read(1)
                opened.append(path)
            except OSError:
                pass
        return opened
    return as_user("b", run)


@needs_users
@with_daemon(sets=SHARED + ["workers.max=2"])
def test_broadcast_index_is_the_users_own(d):
    """a's broadcast is indexed at put and a's worker maps the index; b
    can open neither that mapping, nor a worker's or emberd's
    descriptors, and b's plan naming a's broadcast is refused."""
    def a_run(ctl):
        c = d.client()
        reply = c.broadcast_put_request(b"a-secret-1\na-secret-2\n")
        check(reply["ok"] and reply.get("index", 0) > 0,
              "a's put: %r" % reply)
        bid = reply["broadcast"]
        got = c.collect_all(records_plan(["a-secret-2", "x"], 1,
                                         ops=[{"filter": {
                                             "in_broadcast": bid}}]))
        check_eq(got, [b"a-secret-2"], "a's records")
        ctl.ready({"broadcast": bid, "workers": [w["pid"] for w in
                                                 c.status()["workers"]]})
        ctl.wait_go()
        return True
    a = AsUser(USERS["a"], a_run)
    try:
        mine = a.wait_ready()
        maps = [m for pid in mine["workers"] for m in _index_maps(pid)]
        check(maps, "a's workers map no index")
        check_eq(_b_reads(maps), [], "a's index mappings b could read")
        fds = ["/proc/%d/fd/%s" % (pid, fd) for pid in mine["workers"] +
               [d.pid] for fd in os.listdir("/proc/%d/fd" % pid)]
        check_eq(_b_reads(fds), [], "descriptors b could read")

        def b_plan():
            with d.client() as c:
                return c.execute(range_plan(0, 10, 1, ops=[{"filter": {
                    "in_broadcast": mine["broadcast"]}}]), "count")
        reply = as_user("b", b_plan)
        check_error(reply, "PLAN_INVALID", "no broadcast %d" %
                    mine["broadcast"])
        a.go()
        check_eq(a.result(), True, "a")
    finally:
        a.close()


@needs_users
@with_daemon(sets=SHARED + ["workers.max=2"])
def test_operation_ids_are_the_users_own(d):
    """Another uid's operation id is OPERATION_NOT_FOUND to reattach,
    release and interrupt, and a free id for its execute; a's tombstone
    is a's alone."""
    path = write_file(d.path("a-private-input.txt"), "one\ntwo\n")
    os.chmod(path, 0o644)
    op_id = str(uuid.uuid4())
    a = AsUser(USERS["a"], _holding_a(d, op_id, path))
    try:
        mine = a.wait_ready()

        def b_tries():
            out = []
            with d.client() as c:
                out.append(error_of(c.request({
                    "op": "reattach", "operation": op_id, "partition": 0,
                    "offset": 0})))
                out.append(error_of(c.request({
                    "op": "release", "operation": op_id, "partition": 0,
                    "offset": 0})))
                out.append(error_of(c.request({
                    "op": "interrupt", "operation": op_id})))
                reply = c.execute(range_plan(0, 5, 1), "count",
                                  operation=op_id)
                out.append(reply)
                out.append(error_of(c.execute(range_plan(0, 5, 1),
                                              "count", operation=op_id)))
            return out
        got = as_user("b", b_tries)
        for err, what in zip(got[:3], ("reattach", "release", "interrupt")):
            check(err is not None and err[0] == "OPERATION_NOT_FOUND",
                  "b's %s of a's id: %r" % (what, err))
        check(got[3].get("ok") is True and got[3].get("count") == 5,
              "b's execute with a's id: %r" % got[3])
        # b's own count left a tombstone of b's: now the id is b's too.
        check(got[4] is not None and got[4][0] in
              ("OPERATION_ALREADY_EXISTS",), "b's second execute with "
              "the same id: %r" % (got[4],))
        for err in got[:3] + [got[4]]:
            for value in (mine["session"], path, USERS["a"][2]):
                check(value not in err[1], "b's error names a's %s: %r" %
                      (value, err))
    finally:
        a.close()

    # a's operation is gone (its client closed): its tombstone answers a,
    # and b still gets OPERATION_NOT_FOUND, never a's reason.
    def reattach():
        with d.client() as c:
            return error_of(c.request({"op": "reattach", "operation": op_id,
                                       "partition": 0, "offset": 0}))

    def a_sees_interrupted():
        def interrupt():
            with d.client() as c:
                return c.request({"op": "interrupt", "operation": op_id})
        return as_user("a", interrupt)
    a_sees_interrupted()
    err = as_user("a", reattach)
    check(err is not None and err[0] != "OPERATION_NOT_FOUND",
          "a's own reattach of its ended operation: %r" % (err,))
    err_b = as_user("b", reattach)
    check(err_b is not None and err_b[0] in ("OPERATION_FINISHED",
                                             "OPERATION_NOT_FOUND"),
          "b's reattach: %r" % (err_b,))
    check(err_b[1] != err[1], "b gets a's tombstone message: %r" % (err_b,))


@needs_users
@with_daemon(sets=SHARED + ["operation.tombstones=16", "workers.max=2"])
def test_tombstones_are_kept_per_uid(d):
    """More operations of a than operation.tombstones do not evict b's
    tombstone: b's execute with its finished operation's id gets the
    tombstone's answer, not a second run (exactly once)."""
    op_id = str(uuid.uuid4())

    def b_runs():
        with d.client() as c:
            return c.execute(range_plan(0, 5, 1), "count", operation=op_id)
    check(as_user("b", b_runs).get("count") == 5, "b's count")

    def a_floods():
        with d.client() as c:
            for _ in range(40):
                c.execute(range_plan(0, 1, 1), "count")
        return True
    as_user("a", a_floods)

    def b_again():
        with d.client() as c:
            return [error_of(c.execute(range_plan(0, 5, 1), "count",
                                       operation=op_id)),
                    error_of(c.request({"op": "reattach", "operation": op_id,
                                        "partition": 0, "offset": 0}))]
    again, reattach = as_user("b", b_again)
    check(again is not None and again[0] == "OPERATION_ALREADY_EXISTS",
          "b's execute with its finished id ran again: %r" % (again,))
    check(reattach is not None and reattach[0] == "OPERATION_FINISHED",
          "b's reattach of its finished id: %r" % (reattach,))


def status_json(d):
    """/status.json of d's status listener."""
    conn = http.client.HTTPConnection("127.0.0.1", status_port(d), timeout=10)
    try:
        conn.request("GET", "/status.json")
        r = conn.getresponse()
        check_eq(r.status, 200, "/status.json")
        return json.loads(r.read())
    finally:
        conn.close()


@needs_users
@with_daemon(sets=SHARED + ["status.listen=127.0.0.1:0", "status.users=*",
                            "workers.max=2"])
def test_failures_are_kept_per_uid(d):
    """40 failing tasks of a leave b's one failure on the status page."""
    failing = range_plan(0, 2, 1, ops=[{"pipe": {"command": "exit 3"}}])

    def fail(n):
        def run():
            with d.client() as c:
                return [c.execute(failing, "count")["ok"]
                        for _ in range(n)]
        return run
    check(as_user("b", fail(1)) == [False], "b's job did not fail")
    check(not any(as_user("a", fail(40))), "a's jobs did not fail")
    users = [f["user"] for f in status_json(d)["failures"]]
    check(USERS["b"][2] in users, "b's failure is gone from the status "
          "page: %d of a's shown" % users.count(USERS["a"][2]))
    check(0 < users.count(USERS["a"][2]) <= 32, "a's failures shown: %d" %
          users.count(USERS["a"][2]))


# ---------------------------------------------------------------------------
# The environment a job starts in

@needs_users
@with_daemon(sets=SHARED, env=DAEMON_ENV)
def test_pipe_environment_is_clean(d):
    """A pipe command gets PATH from workers.path, the user's HOME, USER,
    LOGNAME and SHELL, LANG (named by workers.env's default) and nothing
    else of emberd's: not its secret, not its PATH, not LC_PAPER."""
    env = env_of(as_user("a", lambda: pipe_output(d, "env")))
    name = USERS["a"][2]
    pw = pwd.getpwnam(name)
    check_eq(env.get("PATH"), "/usr/local/bin:/usr/bin:/bin", "PATH")
    check_eq(env.get("HOME"), pw.pw_dir, "HOME")
    check_eq(env.get("USER"), name, "USER")
    check_eq(env.get("LOGNAME"), name, "LOGNAME")
    check_eq(env.get("SHELL"), pw.pw_shell, "SHELL")
    check_eq(env.get("LANG"), "C.UTF-8", "LANG")
    extra = set(env) - {"PATH", "HOME", "USER", "LOGNAME", "SHELL",
                        "LANG"} - SHELL_VARS
    check_eq(sorted(extra), [], "variables a job got of emberd's")
    check(SECRET not in json.dumps(env), "emberd's secret reached a job")


@needs_users
@with_daemon(sets=SHARED + ["workers.path=/bin:/usr/bin",
                            "workers.env=LC_PAPER, TZ PATH"],
             env=dict(DAEMON_ENV, TZ="UTC"))
def test_pipe_environment_follows_the_conf(d):
    """workers.path and workers.env say what a job gets; workers.env
    cannot bring emberd's PATH."""
    env = env_of(as_user("b", lambda: pipe_output(d, "env")))
    check_eq(env.get("PATH"), "/bin:/usr/bin", "PATH")
    check_eq(env.get("LC_PAPER"), "C", "LC_PAPER")
    check_eq(env.get("TZ"), "UTC", "TZ")
    check("LANG" not in env, "LANG, not in workers.env: %r" % env)
    check(SECRET not in json.dumps(env), "emberd's secret reached a job")


@with_daemon(sets=SHARED, env=DAEMON_ENV)
def test_forkserver_binds_its_libraries_alone(d):
    """The fork-server starts with LD_BIND_NOW, so that its workers inherit
    every library's calls bound (bench/README.md, "Fresh worker"); a
    job's command does not get it: it is emberd's, not the job's."""
    env = env_of(pipe_output(d, "env"))
    with open("/proc/%d/environ" % d.forkserver_pid(), "rb") as f:
        start = f.read().split(b"\0")
    check(b"LD_BIND_NOW=1" in start,
          "the fork-server started without LD_BIND_NOW: %r" % start)
    check("LD_BIND_NOW" not in env, "a job got LD_BIND_NOW: %r" % env)


@no_daemon
def test_bad_workers_env_is_refused(_):
    """A workers.env word that is no variable name is refused, naming the
    key."""
    r = run_emberd(["-f", "--set", "daemon.socket=/nonexistent/x.sock",
                    "--set", "workers.env=LANG x-y"])
    check(r.returncode != 0, "emberd ran with workers.env \"LANG x-y\"")
    check("workers.env" in r.stderr and "environment variable" in r.stderr,
          "the refusal: %r" % r.stderr)


@needs_users
@with_daemon(sets=SHARED)
def test_pipe_working_directory(d):
    """A job runs in its user's home when the user can enter it, else in
    /; never in emberd's working directory."""
    a_name, b_name = USERS["a"][2], USERS["b"][2]
    home = d.path("home-b")
    os.mkdir(home, 0o700)
    os.chown(home, USERS["b"][0], USERS["b"][1])
    closed = d.path("home-closed")
    os.mkdir(closed, 0o700)		# root's: a cannot enter it
    subprocess.run(["usermod", "-d", home, b_name], check=True,
                   capture_output=True)
    subprocess.run(["usermod", "-d", closed, a_name], check=True,
                   capture_output=True)
    check_eq(as_user("b", lambda: pipe_output(d, "pwd; echo $HOME")),
             [home, home], "b's working directory and HOME")
    check_eq(as_user("a", lambda: pipe_output(d, "pwd; echo $HOME")),
             ["/", closed], "a's working directory (a home it cannot "
             "enter) and HOME")



# ---------------------------------------------------------------------------
# Fairness

def slow_count_plan(n, seconds):
    """n partitions of one record, each a task of about seconds."""
    return records_plan(["x"] * n, n, ops=[{"pipe": {
        "command": "sleep %s; cat" % seconds}}])


def timed_count(d, plan):
    """[count, seconds it took] of plan, run by the caller."""
    with d.client() as c:
        start = time.monotonic()
        n = c.count(plan)
        return [n, time.monotonic() - start]


def a_counts(d, plan, want):
    """As a: a count of plan, ready once sent; its result checks that it
    counted want."""
    def run(ctl):
        with d.client() as c:
            c.send_json({"op": "execute", "action": "count", "plan": plan})
            ctl.ready()
            reply = c.recv_json()
            check(reply.get("ok") and reply.get("count") == want,
                  "a's count: %r" % reply)
            return True
    return AsUser(USERS["a"], run)


@needs_users
@with_daemon(sets=SHARED + ["workers.max=2"])
def test_a_busy_user_does_not_starve_another(d):
    """While a holds every worker with a long queue of tasks, b's
    one-record count gets a worker as soon as one of a's tasks ends."""
    a = a_counts(d, slow_count_plan(40, 0.3), 40)
    try:
        a.wait_ready()

        def a_running():
            with d.client() as c:
                return sum(1 for w in c.status()["workers"]
                           if "task" in w) == 2
        check(wait_until(a_running, 10), "a never held both workers")
        n, took = as_user("b", lambda: timed_count(d, range_plan(0, 1, 1)))
        check_eq(n, 1, "b's count")
        check(took < 2.0, "b's one-record count took %.2fs behind a's "
              "queue" % took)
        check(a.result(), "a's count")
    finally:
        a.close()


@needs_users
@with_daemon(sets=SHARED + ["workers.max=2"])
def test_a_users_operations_share_its_workers(d):
    """A user's second operation does not wait for the whole of its
    first."""
    def both():
        with d.client() as c1, d.client() as c2:
            c1.send_json({"op": "execute", "action": "count",
                          "plan": slow_count_plan(40, 0.3)})
            time.sleep(0.5)
            n, took = timed_count(d, range_plan(0, 1, 1))
            reply = c1.recv_json()
            return [n, took, reply.get("count")]
    n, took, first = as_user("a", both)
    check_eq(n, 1, "the second count")
    check(took < 2.0, "a's second operation took %.2fs behind its first"
          % took)
    check_eq(first, 40, "the first count")


@needs_users
@with_daemon(sets=SHARED + ["workers.max=4", "workers.max_per_user=1"])
def test_workers_max_per_user_queues(d):
    """workers.max_per_user caps the workers a user holds at once: the
    rest of its tasks queue (no error), and another user still gets
    workers."""
    busiest = [0]

    def a_job():
        return timed_count(d, slow_count_plan(4, 0.4))
    a = AsUser(USERS["a"], lambda ctl: a_job())

    def watch():
        with d.client() as c:
            busy = sum(1 for w in c.status()["workers"] if "task" in w)
        busiest[0] = max(busiest[0], busy)
        return False
    check_during(lambda: not watch(), 1.0, "watching")
    n, took = a.result()
    check_eq(n, 4, "a's count")
    check(took >= 1.5, "a's 4 tasks of 0.4s ran in %.2fs: more than one "
          "worker at once" % took)
    check(busiest[0] <= 1, "a held %d workers at once" % busiest[0])
    n, took = as_user("b", lambda: timed_count(d, range_plan(0, 1, 1)))
    check_eq(n, 1, "b's count")


@needs_users
@with_daemon(sets=SHARED + ["workers.max=2"])
def test_long_tasks_do_not_hold_another_user_back(d):
    """a's four 6-second tasks hold both of workers.max=2 (two run, two
    wait behind them); b's ten-record count does not wait for any of
    them: a user holding no worker gets one past workers.max."""
    a = a_counts(d, slow_count_plan(4, 6), 4)
    try:
        a.wait_ready()
        check(a_holds_workers(d, 2), "a never held both workers")
        n, took = as_user("b", lambda: timed_count(
            d, range_plan(0, 10, 1, ops=[{"pipe": {"command": "cat"}}])))
        check_eq(n, 10, "b's count")
        check(took < 3.0, "b's ten-record count took %.2fs behind a's "
              "6-second tasks" % took)
        with d.client() as c:
            workers = len(c.status()["workers"])
        check(workers <= 4, "%d workers past workers.max_total" % workers)
        check(a.result(), "a's count")
    finally:
        a.close()


@needs_users
@with_daemon(sets=SHARED + ["workers.max=1", "workers.max_total=1"])
def test_workers_max_total_is_a_hard_cap(d):
    """With workers.max_total at workers.max, no worker runs past it: b
    waits for a's task."""
    a = a_counts(d, slow_count_plan(1, 2), 1)
    try:
        a.wait_ready()
        check(a_holds_workers(d, 1), "a never held the worker")
        n, took = as_user("b", lambda: timed_count(d, range_plan(0, 1, 1)))
        check_eq(n, 1, "b's count")
        check(took > 0.8, "b's count took %.2fs: a worker past "
              "workers.max_total" % took)
        check(a.result(), "a's count")
    finally:
        a.close()


# ---------------------------------------------------------------------------
# Processes and memory per user

PIDS_V1 = "/sys/fs/cgroup/pids"
# a's fork bomb: forks children that sleep, for up to 5 s or 400 of them,
# going on when a fork fails; then holds them for 20 s.
FORK_BOMB = ("python3 -c 'import os, time\n"
             "end = time.monotonic() + 5\n"
             "n = 0\n"
             "while n < 400 and time.monotonic() < end:\n"
             "    try:\n"
             "        pid = os.fork()\n"
             "    except OSError:\n"
             "        time.sleep(0.01)\n"
             "        continue\n"
             "    if pid == 0:\n"
             "        time.sleep(20)\n"
             "        os._exit(0)\n"
             "    n += 1\n"
             "time.sleep(20)\n'")


def service_pids_cgroup(d, limit):
    """Put emberd (its keeper and itself: the fork-servers and all they
    start follow) in a pids cgroup of limit tasks, as a service's
    TasksMax does: one bound shared by every user.  Its path, or None
    where no pids hierarchy can be written."""
    path = os.path.join(PIDS_V1, "ember-test-%d" % os.getpid())
    try:
        os.mkdir(path)
    except OSError:
        return None
    with open(os.path.join(path, "pids.max"), "w") as f:
        f.write(str(limit))
    for pid, _ in session_processes(d.sid):
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(pid))
        except ProcessLookupError:
            pass	# gone since it was listed: nothing of it to bound
    return path


def remove_pids_cgroup(path):
    """Move what is left back to the root and remove the cgroup."""
    def empty():
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids = f.read().split()
        for pid in pids:
            try:
                with open(os.path.join(PIDS_V1, "cgroup.procs"), "w") as f:
                    f.write(pid)
            except OSError:
                pass
        return not pids
    wait_until(empty, 5)
    os.rmdir(path)


def processes_of(uid):
    n = 0
    for pid in all_pids():
        try:
            if os.stat("/proc/%d" % pid).st_uid == uid:
                n += 1
        except OSError:
            pass
    return n


def pipe_count(d):
    """The count of ten records piped through cat, or the error."""
    with d.client() as c:
        reply = c.execute(range_plan(0, 10, 1, ops=[
            {"pipe": {"command": "cat"}}]), "count")
        return reply.get("count", reply)


@needs_users
@with_daemon(sets=SHARED + ["workers.max=4",
                            "workers.max_pids_per_user=24"])
def test_fork_bomb_does_not_starve_another(d):
    """a's fork bomb through a pipe stops at a's own bound (here
    RLIMIT_NPROC, or pids.max where cgroups can be written), far below
    the service's: b's job, which forks too, still runs."""
    # Without a pids v1 hierarchy to stand for the service's limit, a's
    # own bound is still checked.
    path = service_pids_cgroup(d, 120)
    try:
        check_eq(as_user("b", lambda: pipe_count(d)), 10, "b's first count")

        def bomb(ctl):
            with d.client() as c:
                c.send_json({"op": "execute", "action": "count",
                             "plan": records_plan(["x"], 1, ops=[
                                 {"pipe": {"command": FORK_BOMB}}])})
                ctl.ready()
                return c.recv_json()
        a = AsUser(USERS["a"], bomb)
        try:
            a.wait_ready()
            uid_a = USERS["a"][0]
            check(wait_until(lambda: processes_of(uid_a) > 15, 10),
                  "a's fork bomb did not start")
            held = wait_steady(lambda: processes_of(uid_a), 15, settle=1.0)
            # 24, and a's client, which runs outside a's cgroup.
            check(held <= 25, "a's bomb reached %d processes" % held)
            check_eq(as_user("b", lambda: pipe_count(d)), 10,
                     "b's count beside a's fork bomb")
        finally:
            a.close()
    finally:
        if path is not None:
            remove_pids_cgroup(path)


@needs_users
@with_daemon(sets=SHARED + ["workers.max_pids_per_user=50",
                            "workers.max_memory_per_user=1g",
                            "workers.cpu_weight=50"])
def test_status_shows_the_bound_per_user(d):
    """status, and the log at start, say how the per-user bounds are held:
    by a cgroup of each user's (pids.max, memory.max, cpu.weight) or, where
    cgroups cannot be written, by rlimits, and why."""
    with d.client() as c:
        b = c.status().get("user_bounds")
    check(isinstance(b, dict), "no user_bounds in status")
    check(b.get("by") in ("cgroup", "rlimit"), "user_bounds: %r" % b)
    check_eq(b.get("pids"), 50, "user_bounds' pids")
    check_eq(b.get("memory"), 1 << 30, "user_bounds' memory")
    if b["by"] == "rlimit":
        check(b.get("why"), "rlimit without a reason: %r" % b)
    check(re.search(r"per-user bounds: (cgroup|rlimit)", d.log_text()),
          "no per-user bounds line in the log")
    r = run_cli(["status"], socket_path=d.socket)
    check(re.search(r"by +%s" % b["by"], r.stdout),
          "ember status does not show the bound:\n%s" % r.stdout)


# ---------------------------------------------------------------------------
# Stalled streams

# Records per partition of the stalled plans: some 4 MB, far more than the
# socket buffers, stream.buffer and a worker's read-ahead hold.
STALL_RECORDS = 400000
# No worker past workers.max: b's count must get one of a's back.
STALL_SETS = SHARED + ["workers.max=2", "workers.max_total=2",
                       "stream.stall_timeout=1s"]


def stalled_plan(pipe):
    ops = [{"pipe": {"command": "cat"}}] if pipe else None
    return range_plan(0, STALL_RECORDS, 1, ops=ops)


def read_whole_stream(c):
    """Every record of an iterate stream whose first partition was asked
    for already, then its end."""
    records = []
    check_eq(c.read_int(), STREAM_PARTITION, "the stalled partition's 1")
    while True:
        rec = c.read_record()
        if rec == END_OF_DATA_SECTION:
            break
        if rec == EXCEPTION_THROWN:
            raise TaskFailed(rec, c.read_error_frame(), records)
        check(isinstance(rec, bytes), "record %d: %r" % (len(records), rec))
        records.append(rec)
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_DONE, "the stream's end")
    return records


def stalled_iterators(d, n, pipe, check_first):
    """As a: n iterators that ask for their partition and read nothing;
    after go, the first check_first read everything, which must be the
    plan's output exactly once."""
    def run(ctl):
        clients = []
        for _ in range(n):
            c = d.client()
            c.execute_ok(stalled_plan(pipe), "iterate")
            c.write_int(REQUEST_NEXT)
            clients.append(c)
        ctl.ready()
        ctl.wait_go()
        want = [str(i).encode() for i in range(STALL_RECORDS)]
        for c in clients[:check_first]:
            got = read_whole_stream(c)
            check_eq(len(got), len(want), "records of a stalled stream")
            check(got == want, "a stalled stream's records differ from "
                  "the plan's output")
        return True
    return AsUser(USERS["a"], run, timeout=200)


def a_holds_workers(d, n):
    def held():
        with d.client() as c:
            return sum(1 for w in c.status()["workers"] if "task" in w) >= n
    return wait_until(held, 20)


def stalled_against_count(d, pipe):
    a = stalled_iterators(d, 32, pipe, 2)
    try:
        a.wait_ready()
        check(a_holds_workers(d, 2), "a's stalled streams never held the "
              "workers")
        n, took = as_user("b", lambda: timed_count(d, range_plan(0, 1, 1)))
        check_eq(n, 1, "b's count")
        check(took < 2.0, "b's one-record count took %.2fs against 32 "
              "stalled iterators" % took)
        with d.client() as c:
            st = c.status()
        a.go()
        check(a.result(), "a's stalled streams")
        return st
    finally:
        a.close()


@needs_users
@with_daemon(sets=STALL_SETS)
def test_stalled_iterators_do_not_starve_another(d):
    """32 iterators that never read (a deterministic plan) do not keep b's
    count from running; each stopped task is computed again from where its
    client got to, and the client gets every record exactly once."""
    st = stalled_against_count(d, pipe=False)
    check(st["pools"] and sum(p["retired"].get("stalled", 0)
                              for p in st["pools"]) >= 1,
          "no worker was given back: %r" % st["pools"])


@needs_users
@with_daemon(sets=STALL_SETS)
def test_stalled_pipe_iterators_are_spooled(d):
    """The same with a pipe plan, which cannot be computed again: the rest
    of each stalled partition is spooled, the worker goes on, and the
    client gets every record exactly once."""
    st = stalled_against_count(d, pipe=True)
    spooled = sum(o.get("spooled_bytes", 0) for o in st["operations"])
    check(spooled > 0, "nothing was spooled: %r" % st["operations"])


@needs_users
@with_daemon(sets=STALL_SETS + ["daemon.max_spool_per_uid=1m"])
def test_spool_limit_names_its_key(d):
    """A stalled pipe stream whose spool passes daemon.max_spool_per_uid
    ends with an error naming the key, after the records before it, in
    order; emberd serves on."""
    def run(ctl):
        c = d.client()
        c.execute_ok(stalled_plan(True), "iterate")
        c.write_int(REQUEST_NEXT)
        ctl.ready()
        ctl.wait_go()
        try:
            read_whole_stream(c)
        except TaskFailed as e:
            got = e.records
            return [e.message, len(got),
                    got == [str(i).encode() for i in range(len(got))]]
        return None
    a = AsUser(USERS["a"], run)
    try:
        a.wait_ready()

        def failed():
            with d.client() as c:
                return c.status()["counters"]["tasks_failed"] >= 1
        check(wait_until(failed, 20), "the spool never hit its limit")
        a.go()
        out = a.result()
        check(out is not None, "the stream ended without an error")
        msg, n, in_order = out
        check("daemon.max_spool_per_uid" in msg, "the error: %r" % msg)
        check(in_order and 0 < n < STALL_RECORDS, "%d records before the "
              "error, in order %r" % (n, in_order))
    finally:
        a.close()
    n, _ = as_user("b", lambda: timed_count(d, range_plan(0, 10, 2)))
    check_eq(n, 10, "b's count after")



@needs_users
@with_daemon(sets=STALL_SETS)
def test_waiting_partitions_are_not_stalled(d):
    """A partition computed ahead, waiting for a slow partition before it
    while the client reads, keeps its worker: stream.stall_timeout is for
    clients that stop reading."""
    # Partition 0 takes 3 s; partition 1's 300000 lines fill every buffer
    # at once and wait behind it, for longer than stream.stall_timeout.
    command = ('read x; if [ "$x" = slow ]; then sleep 3; fi; '
               'yes "$x" | head -n 300000')
    plan = records_plan(["slow", "fast"], 2, ops=[{"pipe": {
        "command": command}}])

    def run(ctl):
        with d.client() as c:
            c.execute_ok(plan, "collect")
            ctl.ready()
            parts = c.read_stream(pull=False)
            return [len(p) for p in parts] == [300000, 300000] and \
                parts[1][0] == b"fast" and parts[0][-1] == b"slow"
    a = AsUser(USERS["a"], run)
    try:
        a.wait_ready()

        def not_stalled():
            with d.client() as c:
                st = c.status()
            got = [sum(o.get("spooled_bytes", 0) + o.get("parked", 0)
                       for o in st["operations"]),
                   sum(p["retired"].get("stalled", 0) for p in st["pools"])]
            check(got == [0, 0], "a partition waiting its turn was "
                  "stalled: spooled bytes and parked tasks, stalled "
                  "workers %r" % (got,))
            return True
        check_during(not_stalled, 2.5, "not reached")
        check(a.result(), "the collect's records")
    finally:
        a.close()


SLOW_GETPW = os.path.join(BUILDDIR, "tests", "integration", "slow_getpw.so")
SLOW_GETPW_MS = 3000


@needs_users
@with_daemon(sets=SHARED, env={
    "LD_PRELOAD": SLOW_GETPW, "EMBER_SLOW_GETPW_MS": str(SLOW_GETPW_MS),
    # A sanitized emberd takes a preload after its runtime.
    "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
    ":verify_asan_link_order=0"})
def test_slow_user_lookup_does_not_stall_others(d):
    """With a passwd database that takes seconds a lookup (LDAP, sssd), a
    new user's first job waits for its user; another client's status is
    served all along, and the new user's job then runs."""
    def b_counts(ctl):
        with d.client() as c:
            return c.count(range_plan(0, 10, 1))

    with d.client() as c:
        check(c.status().get("ok") is True, "root's status")
        start = time.monotonic()
        b = AsUser(USERS["b"], b_counts)
        worst = 0.0
        while time.monotonic() - start < SLOW_GETPW_MS / 1000.0 + 0.5:
            t = time.monotonic()
            check(c.status().get("ok") is True, "root's status")
            worst = max(worst, time.monotonic() - t)
            time.sleep(0.05)
        check(worst < 1.0, "a status took %.2f s while b's user was "
              "looked up" % worst)
        got = b.result()
        check(got == 10, "b's count: %r" % got)
        check(time.monotonic() - start >= SLOW_GETPW_MS / 1000.0,
              "b's job waited for its user")


if __name__ == "__main__":
    run_tests(globals())
