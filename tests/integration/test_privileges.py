"""
Whom workers run as, and what the fork-server sets up before it forks.

Run as root (as CI does), emberd starts one fork-server per submitting
user; these tests connect as other uids (a child process that drops to
them) and check that the jobs, the workers and the fork-servers run as
that user, with its groups, no way back to root, and nothing running as
root at all.  Run as another user, emberd's pool runs as that user: the
same checks are made against it, and the ones that need a second uid say
so and check what can be checked.
"""

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403

ROOT = os.geteuid() == 0
# Uids with no passwd entry (no supplementary groups), and one with one.
USER_A = (61234, 61234)
USER_B = (61235, 61236)
PLUGIN = os.path.join(BUILDDIR, "examples", "udf_example.so")
SETS = ["daemon.socket_mode=0666", "workers.max=2"]


def shared(d):
    """Let other uids reach the daemon's socket and working directory."""
    os.chmod(d.tmpdir, 0o711)


def passwd_user():
    """A (uid, gid, name) with a passwd entry, not root, or None."""
    for name in ("nobody", "daemon"):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        if pw.pw_uid != 0:
            return (pw.pw_uid, pw.pw_gid, name)
    return None


def as_uid(user, fn, timeout=60):
    """Run fn() in a child process that became user (uid, gid) for good;
    return what it returned (JSON values only), or raise its failure."""
    uid, gid = user[0], user[1]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            signal.alarm(timeout)
            if ROOT:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
            out = {"result": fn()}
        except BaseException:
            out = {"error": traceback.format_exc()}
        try:
            with os.fdopen(w, "w") as f:
                f.write(json.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    if not data:
        raise AssertionError("the client as uid %d died" % uid)
    out = json.loads(data)
    if "error" in out:
        raise AssertionError("as uid %d:\n%s" % (uid, out["error"]))
    return out["result"]


def pipe_lines(d, command, records=1):
    """Run command through a pipe op as the caller; its output lines."""
    def run():
        with d.client() as c:
            recs = c.collect_all(range_plan(0, records, 1,
                                            ops=[{"pipe": {"command":
                                                           command}}]))
            return [r.decode("utf-8", "replace") for r in recs]
    return run


def ids(pid):
    """(uids, gids, groups, no_new_privs) of pid from /proc/PID/status."""
    st = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            st[key] = value.split()
    return ([int(x) for x in st["Uid"]], [int(x) for x in st["Gid"]],
            sorted(int(x) for x in st.get("Groups", [])),
            st.get("NoNewPrivs", ["?"])[0])


def forkservers(d):
    """The fork-servers: emberd's live children."""
    table = process_table()
    return [p for p, st in table.items()
            if st[2] == d.pid and st[1] not in ("Z", "X")]


def check_no_root(d):
    """Nothing emberd started runs as root, in any of its uids."""
    for pid in descendants(d.pid):
        try:
            uids = ids(pid)[0]
        except OSError:
            continue		# gone meanwhile
        check(0 not in uids, "process %d (%s) runs as root: uids %r" %
              (pid, cmdline(pid), uids))


def check_user(pid, user, what):
    """pid runs as user for good: real, effective, saved and fs ids."""
    uids, gids, groups, nnp = ids(pid)
    check_eq(uids, [user[0]] * 4, "%s %d uids" % (what, pid))
    check_eq(gids, [user[1]] * 4, "%s %d gids" % (what, pid))
    if ROOT:
        check_eq(nnp, "1", "%s %d NoNewPrivs" % (what, pid))
    return groups


def workers_of(d, fs_pid):
    table = process_table()
    return [p for p, st in table.items()
            if st[2] == fs_pid and st[1] not in ("Z", "X")]


def me():
    return (os.getuid(), os.getgid())


@with_daemon(sets=SETS)
def test_jobs_run_as_the_submitting_user(d):
    """A job's commands, its workers and their fork-server run as the user
    who submitted it, without supplementary groups it does not have and
    without a way to gain privileges."""
    shared(d)
    user = USER_A if ROOT else me()
    out = as_uid(user, pipe_lines(d, "id -u; id -g; "
                                  "grep NoNewPrivs /proc/self/status"))
    check_eq(out[:2], [str(user[0]), str(user[1])], "id -u, id -g")
    if ROOT:
        check_eq(out[2].split(), ["NoNewPrivs:", "1"], "the command's "
                 "NoNewPrivs")
    found = 0
    for fs in forkservers(d):
        if ids(fs)[0][0] != user[0]:
            continue
        groups = check_user(fs, user, "fork-server")
        if ROOT:
            check_eq(groups, [], "fork-server %d groups" % fs)
        for w in workers_of(d, fs):
            check_user(w, user, "worker")
            found += 1
    check(found >= 1, "no worker of uid %d left idle" % user[0])
    check_no_root(d)


@with_daemon(sets=SETS)
def test_supplementary_groups_of_a_passwd_user(d):
    """A user with a passwd entry gets its supplementary groups, and only
    those."""
    shared(d)
    user = passwd_user() if ROOT else (os.getuid(), os.getgid(), None)
    if user is None:
        print("note: no passwd user but root here; the uid without one is "
              "checked by the other tests")
        return
    want = sorted(set(os.getgrouplist(user[2], user[1]))) if ROOT else \
        sorted(set(os.getgroups()))
    out = as_uid(user, pipe_lines(d, "id -u; id -G"))
    check_eq(out[0], str(user[0]), "id -u")
    check_eq(sorted(set(int(g) for g in out[1].split())),
             sorted(set(want + [user[1]])), "id -G")
    check_no_root(d)


@with_daemon(sets=SETS)
def test_two_users_two_pools(d):
    """Two users' jobs run in two pools, each as its own user."""
    shared(d)
    if not ROOT:
        print("note: not root: one pool as uid %d; two users need root"
              % os.getuid())
        out = as_uid(me(), pipe_lines(d, "id -u"))
        check_eq(out, [str(os.getuid())], "id -u")
        return
    a = as_uid(USER_A, pipe_lines(d, "id -u; id -g", records=1))
    b = as_uid(USER_B, pipe_lines(d, "id -u; id -g", records=1))
    check_eq(a, [str(USER_A[0]), str(USER_A[1])], "user A's ids")
    check_eq(b, [str(USER_B[0]), str(USER_B[1])], "user B's ids")
    owners = {}
    for fs in forkservers(d):
        owners.setdefault(ids(fs)[0][0], []).append(fs)
    for user in (USER_A, USER_B):
        check(user[0] in owners, "no fork-server as uid %d: %r" %
              (user[0], owners))
        for fs in owners[user[0]]:
            check_user(fs, user, "fork-server")
            for w in workers_of(d, fs):
                check_user(w, user, "worker")
    # Again: each user gets its own pool's workers back.
    check_eq(as_uid(USER_A, pipe_lines(d, "id -u")), [str(USER_A[0])],
             "user A again")
    check_eq(as_uid(USER_B, pipe_lines(d, "id -u")), [str(USER_B[0])],
             "user B again")
    check_no_root(d)


@with_daemon(sets=SETS)
def test_root_client_never_runs_as_root(d):
    """A root client's job is refused or runs as someone else."""
    if not ROOT:
        print("note: not root: emberd cannot run anything as root here")
        check_no_root(d)
        return
    with d.client() as c:
        reply = c.execute(range_plan(0, 1, 1, ops=[
            {"pipe": {"command": "id -u"}}]), "collect")
        if reply["ok"]:
            try:
                out = [r for p in c.read_stream(pull=False) for r in p]
            except TaskFailed:
                out = []
            check(b"0" not in out, "a root client's job ran as root: %r"
                  % out)
    check_no_root(d)


@with_daemon(sets=SETS)
def test_permission_errors_name_the_user(d):
    """A permission error says whose rights failed: the user the job ran
    as, and for root's jobs the key that chose it."""
    if not ROOT:
        print("note: not root: every job runs as emberd's own user")
        return
    shared(d)
    secret = write_file(d.path("secret"), "root's\n")
    os.chmod(secret, 0o600)
    root_user = " nobody (workers.root_user)"
    with d.client() as c:
        reply = c.execute(text_plan([secret]), "count")
        check_error(reply, "PLAN_INVALID", "Permission denied", root_user)
        cat = range_plan(0, 1, 1, ops=[{"pipe": {"command":
                                                 "cat " + secret}}])
        check_error(c.execute(cat, "count"), "TASK_FAILED",
                    "Permission denied", root_user)
        c.execute_ok(cat, "iterate")
        try:
            c.read_stream(pull=True)
        except TaskFailed as e:
            check("Permission denied" in e.message and root_user in
                  e.message, "stream error: %r" % e.message)
        else:
            raise AssertionError("cat of a root-only file worked")

    def as_a():
        with d.client() as c:
            return c.execute(text_plan([secret]), "count")
    reply = as_uid(USER_A, as_a)
    check_error(reply, "PLAN_INVALID", "Permission denied",
                "uid %d" % USER_A[0])
    check("workers.root_user" not in reply["error"]["message"],
          reply["error"]["message"])


@with_daemon(sets=SETS)
def test_setuid_programs_gain_nothing(d):
    """A set-uid root program a job runs does not run as root."""
    shared(d)
    user = USER_A if ROOT else me()
    prog = d.path("suid-id")
    shutil.copy("/usr/bin/id", prog)
    os.chmod(prog, 0o4755)
    if not ROOT:
        print("note: not root: the set-uid copy is ours, not root's; "
              "checking that it changes nothing")

    # Outside emberd the bit works, or this system ignores it here.
    def probe():
        return subprocess.run([prog, "-u"], capture_output=True,
                              text=True).stdout.strip()
    direct = as_uid(user, probe)
    out = as_uid(user, pipe_lines(d, prog + " -u"))
    check_eq(out, [str(user[0])], "a set-uid program's euid in a job")
    if ROOT and direct != "0":
        print("note: %s is on a nosuid file system (it printed %s run "
              "directly): the job's result proves nothing more" %
              (prog, direct))
    check_no_root(d)


@with_daemon(sets=SETS + ["workers.preload=" + PLUGIN])
def test_plugins_preloaded_before_fork(d):
    """The preloaded plugin is in the fork-server and in every worker
    before any task uses it, loaded as the pool's user."""
    check(os.path.exists(PLUGIN), "%s is not built" % PLUGIN)
    shared(d)
    user = USER_A if ROOT else me()
    check_eq(as_uid(user, pipe_lines(d, "id -u")), [str(user[0])], "id -u")
    seen = 0
    for fs in forkservers(d):
        if ids(fs)[0][0] != user[0]:
            continue
        for pid in [fs] + workers_of(d, fs):
            with open("/proc/%d/maps" % pid) as f:
                maps = f.read()
            check(PLUGIN in maps, "process %d (%s) has not loaded %s" %
                  (pid, cmdline(pid), PLUGIN))
            seen += 1
    check(seen >= 2, "no fork-server and worker of uid %d found" % user[0])
    check("preloaded %s" % PLUGIN in d.log_text(), "no preload in the log")


@skip_with_sanitizer("address", "AddressSanitizer maps terabytes of shadow "
                     "memory, more than the 2 GiB address-space limit of "
                     "workers.max_memory=1g lets a worker start with")
@with_daemon(sets=SETS + ["workers.max_memory=1g"])
def test_memory_limit_on_workers(d):
    """Twice workers.max_memory is each worker's address-space limit,
    soft and hard: a backstop behind the resident-memory check, with room
    for what a worker maps but does not use."""
    shared(d)
    user = USER_A if ROOT else me()
    check_eq(as_uid(user, pipe_lines(d, "ulimit -v")), [str(2 << 20)],
             "ulimit -v (KiB) in a job")
    workers = [w for fs in forkservers(d) for w in workers_of(d, fs)]
    check(workers, "no worker left idle")
    for w in workers:
        with open("/proc/%d/limits" % w) as f:
            line = [l for l in f if l.startswith("Max address space")][0]
        check_eq(line.split()[3:5], [str(2 << 30)] * 2,
                 "worker %d address-space limit" % w)


@with_daemon(sets=SETS)
def test_process_titles(d):
    """ps tells the fork-server and the workers apart."""
    shared(d)
    user = USER_A if ROOT else me()
    as_uid(user, pipe_lines(d, "id -u"))
    titles = set()
    for fs in forkservers(d):
        titles.add(cmdline(fs))
        for w in workers_of(d, fs):
            check_eq(cmdline(w), "ember-worker: worker", "worker title")
            check_eq(read_stat(w)[0], "ember-worker", "worker name")
    want = ("ember-worker: fork-server uid %d" % user[0] if ROOT else
            "ember-worker: fork-server")
    check(want in titles, "no fork-server titled %r: %r" % (want, titles))


@with_daemon(sets=SETS)
def test_broadcast_used_by_a_user_pool(d):
    """A user's broadcast reaches its workers, which do not run as
    root and must still read it."""
    shared(d)
    user = USER_A if ROOT else me()

    def run():
        with d.client() as c:
            bid = c.broadcast_put(b"3\n5\n8\n")
            plan = range_plan(0, 10, 2, ops=[{"filter":
                                              {"in_broadcast": bid}}])
            first = c.collect_all(plan)
            again = c.collect_all(plan)
            return [r.decode() for r in first + again]
    check_eq(as_uid(user, run), ["3", "5", "8"] * 2, "filtered records")
    check_no_root(d)


if __name__ == "__main__":
    run_tests(globals())
