"""
The save action's commit under attack: links planted and swapped while a
save runs, saves to places the user cannot write, one user's saves against
another's output, saves racing for one path, and a task started again after
its worker was killed halfway through its part file.

Run as root (as CI does), emberd runs as root and the attacks come from
two unprivileged users the tests create (tests/integration/users.py); not
root, the tests that need them say so and do nothing.  Each test checks
that the files outside the save's own are exactly as they were.
"""

import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403
from users import *	# noqa: E402,F403


def parts(path):
    """The part files in path, sorted."""
    return sorted(n for n in os.listdir(path) if n.startswith("part-"))


def check_saved(out, n):
    """out holds n part files, _SUCCESS, and nothing else."""
    check_eq(sorted(os.listdir(out)),
             ["_SUCCESS"] + ["part-%05d" % i for i in range(n)],
             "what %s holds" % out)


@no_daemon
def test_reuse_switched_mid_save(_):
    """A SIGHUP that turns workers.reuse off while a save runs kills the
    worker that had started the next partition's part file; the partition
    runs again on a new worker and must not trip over that file."""
    d = Daemon(conf=None, start=False)
    conf = write_file(d.path("ember.conf"),
                      "[workers]\nmax = 1\nreuse = true\n")
    d.conf = conf
    d.start()
    out = os.path.join(job_writable(d.path("w")), "out")
    c = d.client()
    plan = range_plan(0, 8, 4, ops=[{"pipe": {"command": "cat; sleep 0.5"}}])
    c.send_json({"op": "execute", "plan": plan, "action": "save",
                 "options": {"path": out}})
    d.worker_running("sleep 0.5")
    write_file(conf, "[workers]\nmax = 1\nreuse = false\n")
    d.signal(signal.SIGHUP)
    r = c.recv_json()
    check(r.get("ok"), "the save failed: %r" % r)
    check_eq((r["files"], r["records"]), (4, 8), "files and records")
    check_saved(out, 4)
    lines = []
    for p in parts(out):
        with open(os.path.join(out, p), "rb") as f:
            lines += f.read().splitlines()
    check_eq(lines, numbers(8), "saved records")

SHARED = ["daemon.socket_mode=0666", "workers.max=2"]


def user_dir(d, tag, name, mode=0o755):
    """A directory of user tag's in the test's directory."""
    path = d.path(name)
    os.mkdir(path)
    os.chown(path, USERS[tag][0], USERS[tag][1])
    os.chmod(path, mode)
    return path


def root_victim(d):
    """A root-owned directory with a file and a part file in it, and an
    operation's name under it; {path: (content, owner)} to check later."""
    victim = d.path("victim")
    os.makedirs(os.path.join(victim, OP_ID))
    files = {}
    for name in ("keep", "part-00000", os.path.join(OP_ID, "part-00000"),
                 os.path.join(OP_ID, "keep")):
        path = os.path.join(victim, name)
        write_file(path, "root's %s\n" % name)
        files[path] = "root's %s\n" % name
    return victim, files


def check_untouched(files):
    """Each file holds what it held, and is root's."""
    for path, content in files.items():
        check(os.path.isfile(path) and not os.path.islink(path),
              "%s is gone" % path)
        with open(path) as f:
            check_eq(f.read(), content, "what %s holds" % path)
        st = os.lstat(path)
        check_eq((st.st_uid, st.st_gid), (0, 0), "owner of %s" % path)


def save_request(out, plan, overwrite=False, operation=None):
    req = {"op": "execute", "plan": plan, "action": "save",
           "options": {"path": out, "overwrite": overwrite}}
    if operation is not None:
        req["operation"] = operation
    return req


def save_as(tag, d, out, plan, overwrite=False):
    """Save as user tag; the reply."""
    def run():
        with d.client() as c:
            c.send_json(save_request(out, plan, overwrite))
            return c.recv_json()
    return as_user(tag, run)


def error_class(reply):
    check(reply.get("ok") is False, "the save succeeded: %r" % reply)
    return reply["error"]["class"], reply["error"]["message"]


OP_ID = "5a7e0000-0000-4000-8000-00000000a77a"
SLOW = [{"pipe": {"command": "cat; sleep 1"}}]


@needs_users
@with_daemon(sets=SHARED)
def test_save_where_the_user_cannot_write(d):
    """A save to a place the user cannot write is refused with the
    system's reason, and nothing is made there: not as root, not given to
    the user."""
    private = d.path("root-only")
    os.mkdir(private, 0o700)
    a_dir = user_dir(d, "a", "a-dir")
    targets = ["/root/ember-%d-a/x" % os.getpid(),
               "/etc/ember-%d.d" % os.getpid(),
               os.path.join(private, "out"),
               os.path.join(a_dir, "..", "root-only", "deep", "out")]
    tops = []
    for out in targets:
        top = out
        while not os.path.exists(os.path.dirname(top)):
            top = os.path.dirname(top)
        tops.append(top)
    try:
        for out in targets:
            cls, msg = error_class(save_as("a", d, out,
                                           range_plan(0, 10, 2)))
            check_eq(cls, "ACTION_INVALID", "class (message %r)" % msg)
            check("options.path" in msg and "Permission denied" in msg,
                  "message %r" % msg)
        for top in tops:
            check(not os.path.lexists(top), "%s was made" % top)
        check_eq(os.listdir(private), [],
                 "what the root-only directory holds")
    finally:
        for top in tops[:2]:
            shutil.rmtree(top, ignore_errors=True)


@needs_users
@with_daemon(sets=SHARED)
def test_success_planted_as_a_link(d):
    """User a replaces _SUCCESS by a link to a root-owned file while the
    save runs: the file is neither truncated nor given to a."""
    victim, files = root_victim(d)
    a_dir = user_dir(d, "a", "a-dir")
    out = os.path.join(a_dir, "out")

    def attack(ctl):
        with d.client() as c:
            c.send_json(save_request(out, range_plan(0, 4, 2, ops=SLOW)))
            check(wait_until(lambda: os.path.isdir(
                os.path.join(out, "_temporary")), 10), "no _temporary")
            os.symlink(os.path.join(victim, "keep"),
                       os.path.join(out, "_SUCCESS"))
            return c.recv_json()
    reply = AsUser(USERS["a"], attack).result()
    check_untouched(files)
    cls, msg = error_class(reply)
    check_eq(cls, "SAVE_FAILED", "class (message %r)" % msg)
    check(os.path.islink(os.path.join(out, "_SUCCESS")), "the link went")
    check(not os.path.exists(os.path.join(out, "_temporary")),
          "_temporary left behind")


@needs_users
@with_daemon(sets=SHARED)
def test_temporary_swapped_before_an_abort(d):
    """User a swaps _temporary for a link to a root-owned directory while
    a save that fails runs: the abort removes nothing there."""
    victim, files = root_victim(d)
    a_dir = user_dir(d, "a", "a-dir")
    out = os.path.join(a_dir, "out")
    plan = range_plan(0, 4, 2, ops=[{"pipe": {"command":
                                              "cat; sleep 1; exit 3"}}])

    def attack(ctl):
        with d.client() as c:
            c.send_json(save_request(out, plan, operation=OP_ID))
            tmp = os.path.join(out, "_temporary")
            check(wait_until(lambda: os.path.isdir(
                os.path.join(tmp, OP_ID)), 10), "no operation directory")
            os.rename(tmp, os.path.join(a_dir, "moved"))
            os.symlink(victim, tmp)
            return c.recv_json()
    reply = AsUser(USERS["a"], attack).result()
    check_eq(error_class(reply)[0], "TASK_FAILED", "class")
    check_untouched(files)


@needs_users
@with_daemon(sets=SHARED)
def test_temporary_link_and_overwrite(d):
    """An earlier output whose _temporary is a link to a root-owned
    directory, saved over with overwrite: nothing there is removed."""
    victim, files = root_victim(d)
    a_dir = user_dir(d, "a", "a-dir")
    out = os.path.join(a_dir, "out")
    check(save_as("a", d, out, range_plan(0, 4, 2)).get("ok"), "first save")
    as_user("a", lambda: os.symlink(victim, os.path.join(out,
                                                          "_temporary")))
    reply = save_as("a", d, out, range_plan(0, 4, 2), overwrite=True)
    check_untouched(files)
    cls, msg = error_class(reply)
    check_eq(cls, "ACTION_INVALID", "class (message %r)" % msg)
    check("symbolic link" in msg, "message %r" % msg)


@needs_users
@with_daemon(sets=SHARED)
def test_other_users_output(d):
    """User b can neither replace nor remove user a's save output in a's
    private directory, nor make a directory of its own in a's."""
    private = user_dir(d, "a", "a-private", 0o700)
    out = os.path.join(private, "out")
    check(save_as("a", d, out, range_plan(0, 6, 3)).get("ok"), "a's save")
    before = {n: open(os.path.join(out, n)).read()
              for n in os.listdir(out)}
    for overwrite in (True, False):
        cls, msg = error_class(save_as("b", d, out, range_plan(0, 2, 1),
                                       overwrite=overwrite))
        check_eq(cls, "ACTION_INVALID", "class (message %r)" % msg)
        check("Permission denied" in msg, "message %r" % msg)
    after = {n: open(os.path.join(out, n)).read() for n in os.listdir(out)}
    check_eq(after, before, "a's output")
    readable = user_dir(d, "a", "a-readable", 0o755)
    cls, msg = error_class(save_as("b", d, os.path.join(readable, "b-out"),
                                   range_plan(0, 2, 1)))
    check("Permission denied" in msg, "message %r" % msg)
    check_eq(os.listdir(readable), [], "what a's directory holds")


@with_daemon(sets=["workers.max=4"])
def test_two_saves_racing(d):
    """Two saves with overwrite to one path, the second begun while the
    first runs (and, but for a loaded machine, committed first): both
    succeed, and the path holds the whole output of one of them and
    nothing of the other's."""
    out = os.path.join(job_writable(d.path("w")), "out")
    first = d.client()
    first.send_json(save_request(out, range_plan(0, 6, 2, ops=[
        {"pipe": {"command": "sleep 2; sed s/^/first-/"}}]),
        overwrite=True))
    tmp = os.path.join(out, "_temporary")
    check(wait_until(lambda: os.path.isdir(tmp) and os.listdir(tmp), 10),
          "the first save did not begin")
    second = d.client()
    second.send_json(save_request(out, range_plan(0, 9, 3, ops=[
        {"pipe": {"command": "sed s/^/second-/"}}]), overwrite=True))
    r2 = second.recv_json()
    check(r2.get("ok"), "the second save: %r" % r2)
    r1 = first.recv_json()
    check(r1.get("ok"), "the first save: %r" % r1)
    lines = []
    for p in parts(out):
        with open(os.path.join(out, p)) as f:
            lines += f.read().splitlines()
    if lines and lines[0].startswith("first-"):
        check_saved(out, 2)
        check_eq(lines, ["first-%d" % i for i in range(6)], "the output")
    else:
        check_saved(out, 3)
        check_eq(lines, ["second-%d" % i for i in range(9)], "the output")

@needs_users
@with_daemon(sets=SHARED)
def test_task_directory_swapped(d):
    """User a swaps the operation's directory for a link to a root-owned
    directory of part files while the save runs: no file of it is moved
    into a's output, nor removed."""
    victim, files = root_victim(d)
    a_dir = user_dir(d, "a", "a-dir")
    out = os.path.join(a_dir, "out")

    def attack(ctl):
        with d.client() as c:
            c.send_json(save_request(out, range_plan(0, 2, 1, ops=SLOW),
                                     operation=OP_ID))
            task = os.path.join(out, "_temporary", OP_ID)
            # Once the tasks write into it, save_begin is over: the swap
            # comes while the save runs, not while it is checked.
            check(wait_until(lambda: os.path.isdir(task) and
                             os.listdir(task), 10),
                  "no task writing in the operation directory")
            os.rename(task, os.path.join(a_dir, "moved"))
            os.symlink(os.path.join(victim, OP_ID), task)
            return c.recv_json()
    reply = AsUser(USERS["a"], attack).result()
    check_untouched(files)
    check_eq(error_class(reply)[0], "SAVE_FAILED", "class")
    check_eq(parts(out), [], "parts in a's output")


@with_daemon(sets=["workers.max=2"])
def test_save_undone_at_shutdown(d):
    """A save whose client went away (the operation goes on, detached) is
    undone when emberd stops: its _temporary is gone once emberd has
    exited, and no part reached the path."""
    out = os.path.join(job_writable(d.path("w")), "out")
    c = d.client()
    c.send_json(save_request(out, range_plan(0, 4, 2, ops=[
        {"pipe": {"command": "cat; sleep 30"}}])))
    d.worker_running("sleep 30")
    c.close_abruptly()
    check(os.path.isdir(os.path.join(out, "_temporary")), "no _temporary")
    d.signal(signal.SIGTERM)
    check_eq(d.wait(10), 0, "exit status after SIGTERM")
    check_eq(sorted(os.listdir(out)), [], "what %s holds" % out)


if __name__ == "__main__":
    run_tests(globals())
