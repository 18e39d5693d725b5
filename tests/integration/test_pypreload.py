"""Broadcasts of Python objects loaded in the fork-server (docs/design.md,
"Broadcasts of Python objects"): a big one a job's functions read is
unpickled once, in the user's fork-server, and shared by the workers it
forks after; never in another user's; one that raises fails the job with
its traceback and leaves the fork-server serving; a dropped one leaves the
fork-server."""

import os
import sys
import time

from harness import *
from users import USERS, AsUser, needs_users

sys.path.insert(0, os.path.join(SRCDIR, "python"))
import ember  # noqa: E402

# Every broadcast of these tests is preloaded: the bound is one byte.
PRELOAD = ["python.broadcast_preload=1", "workers.max=2"]


def _marked(marks, name, value):
    """What a marked broadcast unpickles to: value, after a line "name
    uid pid" in marks."""
    with open(marks, "a") as f:
        f.write("%s %d %d\n" % (name, os.getuid(), os.getpid()))
    return value


class Marked:
    """A broadcast's value whose unpickling leaves a line in marks."""

    def __init__(self, marks, name, value):
        self.marks, self.name, self.value = marks, name, value

    def __reduce__(self):
        return (_marked, (self.marks, self.name, self.value))


def _explode():
    return 1 // 0


class Exploding:
    """A broadcast that raises as it is unpickled."""

    def __reduce__(self):
        return (_explode, ())


class Deaf:
    """A broadcast whose unpickling leaves the fork-server ignoring
    SIGCHLD: its children are reaped by the kernel, and their exits are
    never reported to emberd."""

    def __reduce__(self):
        import signal
        return (signal.signal, (signal.SIGCHLD, signal.SIG_IGN))


class _Freed(dict):
    """A broadcast's value that says who freed it."""

    def __del__(self):
        with open(self["marks"], "a") as f:
            f.write("freed %s %d\n" % (self["name"], os.getpid()))


def _tracked(marks, name):
    return _Freed(marks=marks, name=name)


class Tracked:
    def __init__(self, marks, name):
        self.marks, self.name = marks, name

    def __reduce__(self):
        return (_tracked, (self.marks, self.name))


def _lines(path):
    try:
        with open(path) as f:
            return [line.split() for line in f.read().splitlines()]
    except FileNotFoundError:
        return []


def _marks(d):
    os.chmod(d.tmpdir, 0o777)
    return d.path("marks")


def _slow_lookup(b):
    """A function over b's value that takes a while, so that the tasks of
    a job spread over the workers: (pid, parent pid, value)."""
    def fn(x):
        time.sleep(0.05)
        return "%d %d %s" % (os.getpid(), os.getppid(),
                             "y" if int(x) in b.value else "n")
    return fn


@needs_python
@with_daemon(sets=PRELOAD)
def test_unpickled_once_for_the_job(d):
    """A job over several workers unpickles its broadcast once in all: in
    the fork-server, the workers' parent; a second job does not again."""
    marks = _marks(d)
    with ember.connect(d.socket) as sc:
        b = sc.broadcast_object(Marked(marks, "evens",
                                       frozenset(range(0, 40, 2))))
        got = sc.range(16, partitions=8).map(_slow_lookup(b)).collect()
        again = sc.range(4, partitions=4).filter(
            lambda x: int(x) in b.value).count()
    check_eq([r.split()[2] for r in got],
             ["y" if i % 2 == 0 else "n" for i in range(16)], "answers")
    check_eq(again, 2, "the second job's count")
    pids = {r.split()[0] for r in got}
    parents = {r.split()[1] for r in got}
    check(len(pids) >= 2, "one worker ran every task: %r" % pids)
    loads = _lines(marks)
    check_eq(len(loads), 1, "unpickled once (%r)" % loads)
    check_eq(parents, {loads[0][2]}, "unpickled by the workers' parent")


@needs_python
@with_daemon(sets=PRELOAD)
def test_nested_plan_preloads(d):
    """A union's plan runs in the job's tasks too: a function there that
    reads a big broadcast has it loaded in the fork-server, not in each
    worker."""
    marks = _marks(d)
    with ember.connect(d.socket) as sc:
        b = sc.broadcast_object(Marked(marks, "odds",
                                       frozenset(range(1, 40, 2))))
        other = sc.range(16, partitions=8).map(_slow_lookup(b))
        got = sc.range(0, partitions=1).union(other).collect()
    check_eq(sorted(r.split()[2] for r in got), sorted(
        "y" if i % 2 else "n" for i in range(16)), "answers")
    parents = {r.split()[1] for r in got}
    loads = _lines(marks)
    check_eq(len(loads), 1, "unpickled once (%r)" % loads)
    check_eq(parents, {loads[0][2]}, "unpickled by the workers' parent")


@needs_python
@with_daemon(sets=PRELOAD + ["workers.min_idle=2"])
def test_workers_forked_before_are_not_used(d):
    """Idle workers forked before the load lack the object: the job runs
    on workers forked after it, and nothing unpickles it again."""
    marks = _marks(d)
    with ember.connect(d.socket) as sc:
        before = {int(p) for p in sc.range(4, partitions=4).map(
            lambda _: os.getpid()).collect()}
        b = sc.broadcast_object(Marked(marks, "big", list(range(100))))
        got = sc.range(6, partitions=6).map(
            lambda x: "%d %d" % (os.getpid(), b.value[int(x)])).collect()
    check_eq([int(r.split()[1]) for r in got], list(range(6)), "answers")
    check(not ({int(r.split()[0]) for r in got} & before),
          "a worker forked before the load ran the job")
    check_eq(len(_lines(marks)), 1, "unpickled once")


@needs_users
@needs_python
@with_daemon(sets=PRELOAD + ["daemon.socket_mode=0666"])
def test_other_user_never_sees_it(d):
    """User a's broadcast is loaded in a's fork-server only: b's jobs,
    running beside a's, never unpickle it, and b cannot name it."""
    marks = _marks(d)

    def run(tag):
        def job(ctl):
            with ember.connect(d.socket) as sc:
                b = sc.broadcast_object(Marked(marks + "-" + tag, tag,
                                               tag * 3))
                ctl.ready(b.id)
                ctl.wait_go()
                got = sc.range(6, partitions=6).map(
                    lambda _: "%d %s" % (os.getuid(), b.value)).collect()
                return {"records": got, "broadcast": b.id}
        return job

    a = AsUser(USERS["a"], run("a"))
    b = AsUser(USERS["b"], run("b"))
    a.wait_ready()
    b.wait_ready()
    a.go()
    b.go()
    res = {"a": a.result(), "b": b.result()}
    for tag in "ab":
        check_eq(set(res[tag]["records"]),
                 {"%d %s" % (USERS[tag][0], tag * 3)}, "%s's values" % tag)
    def loads():
        return sorted((name, int(uid)) for tag in "ab"
                      for name, uid, _ in _lines(marks + "-" + tag))
    check_eq(loads(), [("a", USERS["a"][0]), ("b", USERS["b"][0])],
             "who unpickled what")

    def steal():
        op = ember.functions.python_op("map", str.upper)
        op["python"]["broadcasts"] = [res["a"]["broadcast"]]
        with ember.connect(d.socket) as sc:
            try:
                sc.execute({"source": {"range": {"end": 1}}, "ops": [op]},
                           "count")
            except ember.PlanInvalid as e:
                return e.message
            return "accepted"
    msg = AsUser(USERS["b"], lambda ctl: steal()).result()
    check("plan.ops[0].python.broadcasts[0]" in msg, msg)
    check_eq(len(loads()), 2, "unpickled again")


@needs_python
@with_daemon(sets=PRELOAD)
def test_failing_unpickle_fails_the_job(d):
    """A broadcast that raises in the fork-server fails the job that reads
    it with the traceback; the same fork-server serves the next job."""
    marks = _marks(d)
    with ember.connect(d.socket) as sc:
        parent = {int(p) for p in sc.range(2, partitions=2).map(
            lambda _: os.getppid()).collect()}
        bad = sc.broadcast_object(Exploding())
        try:
            sc.range(4, partitions=4).map(lambda _: bad.value).collect()
        except ember.PythonError as e:
            tb = e.traceback
        else:
            raise AssertionError("the job read a broadcast that raised")
        check("did not unpickle in the fork-server" in tb, tb)
        check("ZeroDivisionError" in tb and "_explode" in tb, tb)
        good = sc.broadcast_object(Marked(marks, "good", 7))
        got = sc.range(3, partitions=3).map(
            lambda _: "%d %d" % (os.getppid(), good.value)).collect()
    check_eq({r.split()[1] for r in got}, {"7"}, "the next job's values")
    check_eq({int(r.split()[0]) for r in got}, parent,
             "the fork-server was replaced")
    check_eq([int(line[2]) for line in _lines(marks)], list(parent),
             "who unpickled the next one")


def _spare(d, c, busy):
    """The worker the fork-server forked ahead (emberd does not know it
    yet), once there is one."""
    def find():
        known = set(busy) | {w["pid"] for w in c.status()["workers"]}
        left = [p for p in d.worker_pids() if p not in known]
        return left[0] if len(left) == 1 else None
    pid = wait_until(find, 5)
    check(pid is not None, "no worker forked ahead: %s" % d.worker_pids())
    return pid


@needs_python
@with_daemon(sets=PRELOAD + ["workers.reuse=no", "workers.max=1"])
def test_worker_forked_ahead_lacks_the_load(d):
    """With workers.reuse=no a worker is forked ahead of the next request;
    one forked before a load lacks the object: it is let go, and the job
    that reads the object runs on a worker forked after the load."""
    marks = _marks(d)
    c = d.client()
    with ember.connect(d.socket) as sc:
        # Python starts in the fork-server at the first python op; the
        # worker forked ahead after that has it.
        busy = [int(p) for _ in range(2) for p in sc.range(1).map(
            lambda _: os.getpid()).collect()]
        spare = _spare(d, c, busy)
        b = sc.broadcast_object(Marked(marks, "big", list(range(10))))
        got = sc.range(1).map(
            lambda x: "%d %d" % (os.getpid(), b.value[int(x) + 3])).collect()
    pid, value = (int(v) for v in got[0].split())
    check_eq(value, 3, "the answer")
    check(pid != spare, "the worker forked before the load ran the job")
    check(wait_until(lambda: not is_running(spare), 5),
          "the worker forked before the load is still there")
    check_eq(len(_lines(marks)), 1, "unpickled once")


@needs_python
@with_daemon(sets=PRELOAD)
def test_dropped_broadcast_leaves_the_fork_server(d):
    """A broadcast dropped is freed in the fork-server, and the workers
    that shared it are not used again."""
    marks = _marks(d)
    with ember.connect(d.socket) as sc:
        b = sc.broadcast_object(Tracked(marks, "first"))
        got = sc.range(4, partitions=4).map(
            lambda _: "%d %d %s" % (os.getpid(), os.getppid(),
                                    b.value["name"])).collect()
        check_eq({r.split()[2] for r in got}, {"first"}, "values")
        check_eq(_lines(marks), [], "freed before the drop")
        check_eq(sc.status()["pools"][0]["python_broadcasts"], [int(b.id)],
                 "what status says the fork-server holds")
        b.drop()
        wait_until(lambda: _lines(marks), 10)
        check_eq(sc.status()["pools"][0]["python_broadcasts"], [],
                 "what status says it holds after the drop")
        workers = {int(p) for p in sc.range(4, partitions=4).map(
            lambda _: os.getpid()).collect()}
    parent = {r.split()[1] for r in got}
    check_eq(_lines(marks), [["freed", "first", p] for p in parent],
             "freed, by the fork-server")
    check(not (workers & {int(r.split()[0]) for r in got}),
          "a worker that shared the dropped object was used again")


@needs_python
@with_daemon(sets=["python.broadcast_preload=1", "workers.max=1",
                   "python.broadcast_preload_max=1"])
def test_fork_server_holds_at_most_the_cap(d):
    """Past python.broadcast_preload_max, loading another drops the
    oldest from the fork-server; a job reading it still gets it."""
    marks = _marks(d)
    with ember.connect(d.socket) as sc:
        first = sc.broadcast_object(Tracked(marks, "first"))
        second = sc.broadcast_object(Tracked(marks, "second"))
        check_eq(sc.range(1).map(lambda _: first.value["name"]).collect(),
                 ["first"], "the first")
        parent = sc.range(1).map(
            lambda _: "%d %s" % (os.getppid(), second.value["name"])
        ).collect()[0].split()
        check_eq(parent[1], "second", "the second")
        wait_until(lambda: _lines(marks), 10)
        check_eq(_lines(marks), [["freed", "first", parent[0]]],
                 "what the fork-server let go")
        check_eq(sc.range(1).map(lambda _: first.value["name"]).collect(),
                 ["first"], "the first again")


@needs_python
@with_daemon(sets=PRELOAD + ["python.broadcast_preload_timeout=1s"])
def test_fork_server_that_hides_exits_is_replaced(d):
    """The user's code ran in the fork-server: one that no longer reports
    its workers' exits would keep their places counted in workers.max
    for ever.  Past python.broadcast_preload_timeout it is killed and
    started again, and jobs run on the new one."""
    with ember.connect(d.socket, timeout=30) as sc:
        b = sc.broadcast_object(Deaf())
        first = {int(r.split()[0]) for r in sc.range(2, partitions=2).map(
            lambda _: "%d %s" % (os.getppid(), b.value)).collect()}
        # The workers that shared it are retired; their exits are hidden.
        b.drop()
        check(wait_until(lambda: "not reported" in d.log_text(), 10),
              "the fork-server that hid exits was kept")
        got = sc.range(4, partitions=4).map(
            lambda x: "%d %s" % (os.getppid(), x)).collect()
    check_eq([r.split()[1] for r in got], ["0", "1", "2", "3"], "answers")
    check(not (first & {int(r.split()[0]) for r in got}),
          "the same fork-server forked the next job's workers")


@needs_python
@with_lingering_workers(*PRELOAD, "workers.reuse=no",
                        "python.broadcast_preload_timeout=300ms")
def test_worker_let_go_is_not_a_hidden_exit(d):
    """A worker let go by closing its socket may stay on for a while
    before it is killed (here linger.so keeps it, as a user's code could):
    its exit is not yet owed, so a fork-server that preloaded a broadcast
    is not taken for one that hides exits, however short the timeout."""
    with ember.connect(d.socket, timeout=30) as sc:
        b = sc.broadcast_object(frozenset(range(0, 40, 2)))
        check_eq(sc.range(4, partitions=2).filter(
            lambda x: int(x) in b.value).count(), 2, "the count")
        with d.client() as c:
            check(wait_until(
                lambda: c.status()["counters"]["workers_killed"] >= 2, 10),
                "the lingering workers were not killed")
            check(wait_until(lambda: not c.status()["workers"], 5),
                  "workers left: %r" % c.status()["workers"])
        check_eq(sc.range(2, partitions=2).filter(
            lambda x: int(x) in b.value).count(), 1, "the next job")
    check("not reported" not in d.log_text(),
          "the fork-server was killed for exits it had not yet seen")


@needs_users
@needs_python
@with_daemon(sets=["workers.max=2", "workers.idle_timeout=200ms",
                   "python.broadcast_preload_timeout=1s",
                   "daemon.socket_mode=0666"])
def test_fork_server_deaf_from_the_users_site(d):
    """Python's start in the fork-server runs the user's own site
    (~/.local's usercustomize, .pth files) with no broadcast loaded: a
    user whose usercustomize ignores SIGCHLD hides the exits of every
    worker retired after, which would keep their places in workers.max,
    everyone's, for good.  The fork-server is replaced as one that hid
    them after a load is."""
    import subprocess
    uid, gid, name = USERS["a"]
    home = d.path("home-a")
    site = os.path.join(home, ".local", "lib", "python%d.%d" %
                        sys.version_info[:2], "site-packages")
    os.makedirs(site)
    with open(os.path.join(site, "usercustomize.py"), "w") as f:
        f.write("import signal\nsignal.signal(signal.SIGCHLD, "
                "signal.SIG_IGN)\n")
    for top, dirs, files in os.walk(home):
        for n in [top] + [os.path.join(top, x) for x in dirs + files]:
            os.chown(n, uid, gid)
    subprocess.run(["usermod", "--home", home, name], check=True)
    try:
        def job(ctl):
            with ember.connect(d.socket, timeout=30) as sc:
                return sorted(sc.range(2, partitions=2).map(
                    lambda x: str(int(x) * 2)).collect())
        check_eq(AsUser(USERS["a"], job).result(), ["0", "2"], "the job")
        check(wait_until(lambda: "not reported" in d.log_text(), 10),
              "the fork-server that hid exits was kept:\n%s" % d.log_tail())
        check_eq(AsUser(USERS["a"], job).result(), ["0", "2"], "job after")
    finally:
        subprocess.run(["usermod", "--home", "/nonexistent", name])


def _stall_once(marker):
    """Sleep for good the first time (in the fork-server), after leaving
    marker; return at once after that (in the workers)."""
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        time.sleep(3600)
    return {1, 2}


class StallsOnce:
    """A broadcast whose first unpickling never returns."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (_stall_once, (self.marker,))


@needs_python
@with_daemon(sets=PRELOAD + ["python.broadcast_preload_timeout=1s"])
def test_fork_server_stalled_by_a_load_is_replaced(d):
    """A broadcast whose unpickling never returns stalls the fork-server:
    the forks asked after it are never answered, and they would hold
    their places in workers.max, everyone's, past any task timeout.  One
    that leaves a fork request unanswered past
    python.broadcast_preload_timeout is replaced; the job runs on the
    next fork-server, its workers unpickling the broadcast themselves."""
    marker = _marks(d) + "-stalled"

    def job():
        with ember.connect(d.socket, timeout=30) as sc:
            b = sc.broadcast_object(StallsOnce(marker))
            return sc.range(4, partitions=4).map(
                lambda x: "%s %s" % (x, int(x) in b.value)).collect()
    got = in_thread(job)(20)
    check_eq(got, ["0 False", "1 True", "2 True", "3 False"], "answers")
    check(os.path.exists(marker), "the load did not start")
    check("not answered" in d.log_text(), "no fork-server replaced:\n%s"
          % d.log_tail())


def _slow_once(marker, value):
    """Take 1.2 s the first time (in the fork-server), after leaving
    marker; return at once after that."""
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        time.sleep(1.2)
    return value


class SlowOnce:
    """A broadcast whose first unpickling takes 1.2 s."""

    def __init__(self, marker, value):
        self.marker = marker
        self.value = value

    def __reduce__(self):
        return (_slow_once, (self.marker, self.value))


@needs_python
@with_daemon(sets=PRELOAD + ["python.broadcast_preload_timeout=2s"])
def test_fork_server_busy_with_loads_is_kept(d):
    """Three loads of 1.2 s each, every one within
    python.broadcast_preload_timeout (2 s): the fork request that waits
    behind all three (3.6 s) is allowed as long for each, and the
    fork-server is kept."""
    marks = _marks(d)

    def job():
        with ember.connect(d.socket, timeout=60) as sc:
            bs = [sc.broadcast_object(SlowOnce("%s-%d" % (marks, i), i))
                  for i in range(3)]
            return sc.range(2, partitions=2).map(
                lambda x: sum(b.value for b in bs) + int(x)).collect()
    got = in_thread(job)(60)
    check_eq(sorted(got), ["3", "4"], "answers")
    check(all(os.path.exists("%s-%d" % (marks, i)) for i in range(3)),
          "a load did not run")
    check("not answered" not in d.log_text(), "a fork-server busy with "
          "loads was replaced:\n%s" % d.log_tail())


if __name__ == "__main__":
    run_tests(globals())
