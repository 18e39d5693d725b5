"""A worker keeps the plan it parsed last: a task of another operation whose
plan is the same (docs/protocol.md, "reuse_plan") goes to it without the
plan, and gives the same answer; a plan that differs in anything the worker
would parse (a text file's size, a udf, a broadcast) is sent whole, and
a worker never gets another user's plan to reuse."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403
from users import *	# noqa: E402,F403

PLUGIN = job_readable(os.path.join(BUILDDIR, "examples", "udf_example.so"))


def udf(symbol, args=None):
    op = {"library": PLUGIN, "symbol": symbol}
    if args is not None:
        op["args"] = args
    return {"udf": op}


def plans(c):
    """(descriptors sent with a plan, descriptors told to reuse one)."""
    n = c.status()["counters"]
    return (n["plans_sent"], n["plans_reused"])


def check_plans(c, sent, reused, what):
    check_eq(plans(c), (sent, reused), "plans sent, reused after " + what)


@with_daemon(sets=["workers.max=1"])
def test_same_plan_reused_by_next_operation(d):
    """Two counts of one plan on one worker: the second operation's task
    carries no plan, and counts the same; a new plan is sent whole."""
    with d.client() as c:
        check_eq(c.count(range_plan(0, 1000, 1)), 1000, "first count")
        check_plans(c, 1, 0, "the first count")
        for i in range(3):
            check_eq(c.count(range_plan(0, 1000, 1)), 1000,
                     "count %d of the same plan" % (i + 2))
        check_plans(c, 1, 3, "the same plan thrice")
        check_eq(c.count(range_plan(0, 999, 1)), 999, "another plan")
        check_plans(c, 2, 3, "another plan")
        # The worker took the plan for each new operation: the one it holds
        # now is the last sent, not the first.
        check_eq(c.count(range_plan(0, 999, 1)), 999, "it again")
        check_plans(c, 2, 4, "it again")
        check_eq(c.collect_all(range_plan(0, 5, 1)), numbers(0, 5),
                 "collect")
        check_plans(c, 3, 4, "a collect")
        # Partitions of one descriptor's batch: the plan once per
        # operation, reused by the next.
        for i in range(2):
            check_eq(c.count(range_plan(0, 1000, 4)), 1000,
                     "count %d of four partitions" % (i + 1))
        check_plans(c, 4, 5, "two counts of four partitions")


@with_daemon(sets=["workers.max=2"])
def test_idle_worker_with_the_plan_preferred(d):
    """Of two idle workers, a task goes to the one that holds its plan,
    though the other went idle last: a plan run again after another
    reuses it."""
    slow = range_plan(0, 1, 1, ops=[{"pipe": {"command": "sleep 0.5; cat"}}])
    plan = range_plan(0, 10, 1)

    def count(p):
        with d.client() as c:
            return c.count(p)
    join = in_thread(count, slow)
    busy = d.worker_running("sleep 0.5")
    check_eq(count(plan), 10, "a count beside the slow one")
    check_eq(join(), 1, "the slow count")
    with d.client() as c:
        workers = c.status()["workers"]
        check_eq(len(workers), 2, "workers")
        check_eq([w["state"] for w in workers], ["idle", "idle"], "states")
        check_plans(c, 2, 0, "a plan on each worker")
        # The slow one went idle last: the first a task would find.
        check_eq(c.count(plan), 10, "the count again")
        check_plans(c, 2, 1, "the count again")
        check_eq(c.count(slow), 1, "the slow count again")
        check_plans(c, 2, 2, "the slow count again")
    check(busy in d.worker_pids(), "the slow count's worker is gone")


@with_daemon(sets=["workers.max=1"])
def test_file_of_another_size_sends_plan(d):
    """A text file that grew between two jobs of the same plan: the sizes
    emberd recorded differ, so the plan goes whole and the new lines are
    counted."""
    path = job_readable(write_file(d.path("lines.txt"), "a\nb\n"))
    with d.client() as c:
        check_eq(c.count(text_plan([path], 1)), 2, "two lines")
        check_eq(c.count(text_plan([path], 1)), 2, "two lines again")
        check_plans(c, 1, 1, "the same file twice")
        with open(path, "a") as f:
            f.write("c\n")
        check_eq(c.count(text_plan([path], 1)), 3, "three lines")
        check_plans(c, 2, 1, "the file grew")


@with_daemon(sets=["workers.max=1"])
def test_other_udf_sends_plan(d):
    """The same records through another udf, or the same udf with other
    arguments: a plan of its own each time."""
    recs = ["ab", "cde"]
    with d.client() as c:
        check_eq(c.collect_all(records_plan(recs, 1, ops=[udf("udf_wordlen")])),
                 [b"2", b"3"], "wordlen")
        check_eq(c.collect_all(records_plan(
            recs, 1, ops=[udf("udf_prefix", {"prefix": "<"})])),
            [b"<ab", b"<cde"], "prefix <")
        check_plans(c, 2, 0, "two udfs")
        check_eq(c.collect_all(records_plan(
            recs, 1, ops=[udf("udf_prefix", {"prefix": ">"})])),
            [b">ab", b">cde"], "prefix >")
        check_plans(c, 3, 0, "another prefix")
        check_eq(c.collect_all(records_plan(
            recs, 1, ops=[udf("udf_prefix", {"prefix": ">"})])),
            [b">ab", b">cde"], "prefix > again")
        check_plans(c, 3, 1, "the same prefix again")


@with_daemon(sets=["workers.max=1"])
def test_other_broadcast_sends_plan(d):
    """A filter on another broadcast is another plan."""
    with d.client() as c:
        b1 = c.broadcast_put(b"1\n2\n")
        b2 = c.broadcast_put(b"3\n")
        plan1 = range_plan(0, 10, 1, ops=[{"filter": {"in_broadcast": b1}}])
        plan2 = range_plan(0, 10, 1, ops=[{"filter": {"in_broadcast": b2}}])
        check_eq(c.count(plan1), 2, "in broadcast 1")
        check_eq(c.count(plan2), 1, "in broadcast 2")
        check_plans(c, 2, 0, "two broadcasts")
        check_eq(c.count(plan2), 1, "in broadcast 2 again")
        check_plans(c, 2, 1, "broadcast 2 again")


@needs_users
@with_daemon(sets=["daemon.socket_mode=0666", "workers.max=2"])
def test_plan_never_reused_by_another_user(d):
    """Users a and b run the same plan in turn: each has workers of their
    own, and each worker gets the plan whole the first time; a's second
    count reuses only a's."""
    plan = range_plan(0, 100, 1)

    def count():
        with d.client() as c:
            return c.count(plan)
    check_eq(as_user("a", count), 100, "a's count")
    check_eq(as_user("b", count), 100, "b's count")
    with d.client() as c:
        check_plans(c, 2, 0, "a's and b's counts")
    check_eq(as_user("a", count), 100, "a's second count")
    with d.client() as c:
        check_plans(c, 2, 1, "a's second count")


def nobody():
    """Make this process nobody for good."""
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def count_as_nobody(sock, plan):
    """A count of plan by a client that is nobody."""
    def count():
        with Client(sock) as c:
            return c.count(plan)
    return AsUser((65534, 65534, "nobody"), lambda ctl: count()).result()


@skip_unless(os.geteuid() == 0, "needs root to run emberd as nobody")
@no_daemon
def test_one_pool_never_shares_a_plan_between_users(d):
    """An emberd that is not root has one pool: root's and nobody's jobs
    share its one worker.  The same plan from the other user is still
    sent whole: a worker reuses only a plan of the user it came with."""
    tmp = tempfile.mkdtemp(prefix="ember-test-")
    os.chmod(tmp, 0o755)
    os.chown(tmp, 65534, 65534)
    sock = os.path.join(tmp, "e.sock")
    log = open(os.path.join(tmp, "emberd.log"), "w")
    proc = subprocess.Popen(
        [EMBERD, "-f", "--set", "daemon.socket=" + sock,
         "--set", "checkpoint.dir=" + os.path.join(tmp, "ck"),
         "--set", "daemon.local_dir=" + os.path.join(tmp, "local"),
         "--set", "daemon.socket_mode=0666", "--set", "workers.max=1"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        start_new_session=True, preexec_fn=nobody, cwd=tmp)
    log.close()
    try:
        wait_until(lambda: os.path.exists(sock) or proc.poll() is not None,
                   10)
        check(proc.poll() is None, "emberd as nobody exited")
        plan = range_plan(0, 100, 1)
        with Client(sock) as c:
            check_eq(c.count(plan), 100, "root's count")
        check_eq(count_as_nobody(sock, plan), 100, "nobody's count")
        with Client(sock) as c:
            check_eq(c.count(plan), 100, "root's count again")
            workers = c.status()["workers"]
            check_eq(len(workers), 1, "workers")
            check_plans(c, 3, 0, "root's, nobody's, root's counts")
            check_eq(c.count(plan), 100, "root's count once more")
            check_plans(c, 3, 1, "root's count once more")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
