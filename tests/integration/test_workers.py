"""The worker pool's lifecycle: reuse, workers that fail, are stopped or are
killed from outside, and the limits of the [workers] section (idle_timeout,
min_idle, max_tasks, max_memory, task_timeout)."""

import os
import re
import shutil
import signal
import subprocess
import time

from harness import *

# Each partition's pipe prints the pid of the worker running it: the
# command's shell is the worker's child.
ECHO_PID = {"pipe": {"command": "cat >/dev/null; echo $PPID"}}


def pids_plan(partitions, command=None):
    """One record per partition, each piped through a command that prints
    the worker's pid."""
    op = {"pipe": {"command": command}} if command else ECHO_PID
    return records_plan(["x"] * partitions, partitions, ops=[op])


def job_pids(c, partitions, command=None):
    """Run pids_plan by collect; the worker pid of each partition."""
    parts = c.collect_partitions(pids_plan(partitions, command))
    check_eq(len(parts), partitions, "partitions")
    pids = []
    for i, p in enumerate(parts):
        check_eq(len(p), 1, "records of partition %d" % i)
        check(p[0].isdigit(), "partition %d printed %r, not a pid" %
              (i, p[0]))
        pids.append(int(p[0]))
    return pids


def pool(c):
    return c.status()["pools"][0]


def retired(c):
    return pool(c)["retired"]


def status_workers(c):
    """pid -> the status entry of each worker emberd has."""
    return {w["pid"]: w for w in c.status()["workers"]}


def pid_in_message(message):
    """The worker pid an error message names."""
    m = re.search(r"worker (\d+)", message)
    check(m is not None, "%r names no worker pid" % message)
    return int(m.group(1))


def wait_gone(pids, timeout=5.0):
    """Assert that every pid exits within timeout."""
    wait_until(lambda: not any(is_running(p) for p in pids), timeout)
    left = [p for p in pids if is_running(p)]
    check(not left, "processes still running: %s" % left)


def wait_forgotten(c, pids, timeout=5.0):
    """Assert that emberd's status drops every pid within timeout."""
    wait_until(lambda: not set(pids) & set(status_workers(c)), timeout)
    left = set(pids) & set(status_workers(c))
    check(not left, "status still lists workers %s" % sorted(left))


# ---------------------------------------------------------------------------
# Reuse

@with_daemon(sets=["workers.max=2"])
def test_second_job_reuses_workers(d):
    """The workers of a second job are among the first job's."""
    c = d.client()
    first = job_pids(c, 4)
    reuses = pool(c)["reuses"]
    second = job_pids(c, 4)
    check(set(second) <= set(first), "second job's workers %s are not "
          "among the first's %s" % (sorted(set(second)), sorted(set(first))))
    check(len(set(first)) <= 2, "more workers than workers.max: %s" % first)
    check(pool(c)["reuses"] >= reuses + 4, "reuses counter did not grow "
          "by the second job's 4 tasks")
    for pid in first:
        check(is_running(pid), "worker %d of the first job is gone" % pid)
    check_eq(retired(c)["no_reuse"], 0, "retired for no_reuse")


@with_daemon(sets=["workers.max=2", "workers.reuse=no"])
def test_no_reuse_gives_new_workers(d):
    """With workers.reuse=no every task gets a fresh worker."""
    c = d.client()
    first = job_pids(c, 3)
    second = job_pids(c, 3)
    check_eq(len(set(first)), 3, "distinct workers of the first job %s" %
             first)
    check_eq(len(set(second)), 3, "distinct workers of the second job %s" %
             second)
    check(not set(first) & set(second), "second job reused workers %s" %
          sorted(set(first) & set(second)))
    wait_gone(first + second)
    check_eq(retired(c)["no_reuse"], 6, "retired for no_reuse")
    check_eq(pool(c)["reuses"], 0, "reuses")


@with_daemon(sets=["workers.max=1", "workers.reuse=no"])
def test_fresh_worker_ends_without_a_kill(d):
    """A fresh worker whose task ended cleanly is let go by the end of its
    socket, not killed through the fork-server: no FS_KILL, no kill(2),
    one wake-up of the fork-server less (bench/README.md, "Fresh
    worker")."""
    c = d.client()
    pids = job_pids(c, 3)
    wait_gone(pids)
    check(wait_until(lambda: retired(c)["no_reuse"] == 3, 5),
          "retired for no_reuse: %r" % retired(c))
    check(wait_until(lambda: not c.status()["workers"], 5),
          "workers left: %r" % c.status()["workers"])
    check_eq(c.status()["counters"]["workers_killed"], 0, "workers killed")
    check_eq(c.count(range_plan(0, 10, 2)), 10, "a job after")


@with_daemon(sets=["workers.max=1", "workers.max_tasks=2",
                   "workers.idle_timeout=1s"])
def test_retired_idle_worker_ends_without_a_kill(d):
    """A worker retired idle, for workers.max_tasks or idle_timeout, is let
    go by the end of its socket as a fresh one is, not killed through the
    fork-server."""
    c = d.client()
    pids = [job_pids(c, 1)[0] for _ in range(3)]
    check_eq(len(set(pids)), 2, "workers of three jobs: %s" % pids)
    check(wait_until(lambda: retired(c)["max_tasks"] == 1 and
                     retired(c)["idle_timeout"] == 1, 5),
          "retired: %r" % retired(c))
    wait_gone(pids)
    wait_forgotten(c, pids)
    check_eq(c.status()["counters"]["workers_killed"], 0, "workers killed")
    check_eq(c.count(range_plan(0, 10, 2)), 10, "a job after")


def spare_pid(d, c, busy=()):
    """The worker forked ahead: the fork-server's live child that emberd
    does not know of (nor busy, workers that may still be exiting), or
    None."""
    known = set(status_workers(c)) | set(busy)
    left = [p for p in d.worker_pids() if p not in known]
    check(len(left) <= 1, "more than one worker forked ahead: %s" % left)
    return left[0] if left else None


def wait_spare(d, c, busy=()):
    """Wait for a worker forked ahead; its pid."""
    pid = wait_until(lambda: spare_pid(d, c, busy), 5)
    check(pid is not None, "no worker forked ahead; the fork-server's "
          "children: %s, emberd's workers: %s" %
          (d.worker_pids(), sorted(status_workers(c))))
    return pid


def fd_targets(pid):
    """What pid's descriptors point at (socket:[inode], paths); one it
    closes while they are listed is left out."""
    fds = "/proc/%d/fd" % pid
    found = set()
    for n in os.listdir(fds):
        try:
            found.add(os.readlink(os.path.join(fds, n)))
        except FileNotFoundError:
            pass
    return found


@with_daemon(sets=["workers.max=1", "workers.reuse=no"])
def test_fresh_worker_forked_ahead(d):
    """With workers.reuse=no the fork-server forks the next worker while a
    task runs, and hands it out at the next request: the fork is off the
    task's path (bench/README.md, "Fresh worker, forked ahead").  Until
    then it is the fork-server's alone: not in emberd's status, running
    nothing, and not holding emberd's control channel."""
    c = d.client()
    [first] = job_pids(c, 1)
    spare = wait_spare(d, c, [first])
    check(spare != first, "the job's worker %d is the spare" % first)
    fs = d.forkserver_pid()
    check_eq(read_stat(spare)[2], fs, "the spare's parent")
    check_eq(read_stat(spare)[3], spare, "the spare's process group")
    check_eq(descendants(spare), [], "the spare's children")
    control = os.readlink("/proc/%d/fd/3" % fs)
    check(control.startswith("socket:"), "fork-server's fd 3: %r" % control)
    check(control not in fd_targets(spare), "the spare holds the "
          "fork-server's control channel")
    forks = pool(c)["forks"]
    [second] = job_pids(c, 1)
    check_eq(second, spare, "the second job's worker")
    check_eq(pool(c)["forks"], forks + 1, "forks counted when handed out")
    wait_spare(d, c, [first, second])
    check_eq(c.status()["counters"]["workers_killed"], 0, "workers killed")


@with_daemon(sets=["workers.max=2"])
def test_reused_workers_forked_none_ahead(d):
    """Reused workers are not forked ahead: every child of the fork-server
    is a worker emberd has."""
    c = d.client()
    job_pids(c, 4)
    check(wait_until(lambda: _all_idle(d, c), 5),
          "workers not all idle: %r" % status_workers(c))
    check_during(lambda: spare_pid(d, c) is None, 0.3,
                 "a worker forked ahead with workers.reuse=yes")


@with_daemon(sets=["workers.max=1", "workers.reuse=no",
                  "workers.idle_timeout=1500ms"])
def test_fresh_worker_ahead_let_go_when_idle(d):
    """No request for workers.idle_timeout: the worker forked ahead is let
    go, as an idle worker would be, and its exit reported to no one."""
    c = d.client()
    [first] = job_pids(c, 1)
    spare = wait_spare(d, c, [first])
    wait_gone([spare])
    check_eq(pool(c)["workers"], 0, "emberd's workers")
    check_eq(c.status()["counters"]["workers_killed"], 0, "workers killed")
    check_eq(job_pids(c, 1)[0] != spare, True, "a job after")


@with_daemon(sets=["workers.max=1", "workers.reuse=no"])
def test_fresh_worker_ahead_gone_after_shutdown(d):
    """SIGTERM: emberd drains, its fork-server exits, and the worker forked
    ahead goes with it."""
    c = d.client()
    [first] = job_pids(c, 1)
    spare = wait_spare(d, c, [first])
    c.close()
    check_eq(d.stop(), 0, "emberd's exit code")
    wait_gone([spare])


@with_daemon(sets=["workers.max=1", "workers.reuse=no"])
def test_fresh_worker_ahead_killed_from_outside(d):
    """A worker forked ahead that its user kills before it is handed out is
    forgotten: the next job gets a worker of its own and runs."""
    c = d.client()
    [first] = job_pids(c, 1)
    spare = wait_spare(d, c, [first])
    os.kill(spare, signal.SIGKILL)
    wait_gone([spare])
    forks = pool(c)["forks"]
    [second] = job_pids(c, 1)
    check(second != spare, "the killed spare ran the job")
    check_eq(pool(c)["forks"], forks + 1,
             "forks for the job (a dead spare handed out costs one more)")
    check_eq(c.count(range_plan(0, 10, 2)), 10, "a job after")


@with_daemon(sets=["workers.max=1", "workers.reuse=no",
                  "daemon.helper_timeout=10s"])
def test_helper_holds_nothing_of_the_worker_forked_ahead(d):
    """A helper forked while a worker waits ahead holds no socket of the
    fork-server's: the end of the spare's socket that is handed to emberd
    with it stays the fork-server's alone until then."""
    c = d.client()
    [first] = job_pids(c, 1)
    wait_spare(d, c, [first])
    loop = d.path("loop")
    os.mkdir(loop, 0o755)
    for name in "abcd":
        os.symlink(".", os.path.join(loop, name))
    checker = d.client()
    checker.send_json({"op": "execute", "action": "count",
                       "plan": text_plan([loop + "/*" * 12 + "/x"])})
    fs = d.forkserver_pid()

    def helper():
        for pid in d.worker_pids():
            try:
                if "ember-worker: helper" in cmdline(pid):
                    return pid
            except OSError:
                pass
        return None
    pid = wait_until(helper, 10)
    check(pid is not None, "no helper for the glob")

    def shared():
        return ({t for t in fd_targets(pid) if t.startswith("socket:")} &
                fd_targets(fs))
    # Until the fork-server closes its copy of the helper's own end, just
    # after the fork, they share that one: a leak is what stays.
    wait_until(lambda: not shared(), 5)
    check_eq(shared(), set(), "sockets the helper shares with the "
             "fork-server")
    checker.close()


@skip_unless(shutil.which("strace"), "no strace")
@with_daemon(sets=["workers.max=1", "workers.reuse=no"])
def test_fresh_worker_opens_nothing(d):
    """A fresh worker's task of C ops opens no file: what every worker
    needs once (jansson's hash seed from /dev/urandom) the fork-server
    made before it forked (bench/README.md, "Fresh worker")."""
    c = d.client()
    check_eq(c.count(range_plan(0, 2, 1, ops=[{"map": "upper"}])), 2,
             "the first job")
    fs = d.forkserver_pid()
    out = os.path.join(d.tmpdir, "strace.out")
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-e",
                               "trace=open,openat", "-o", out, "-p",
                               str(fs)], stderr=subprocess.DEVNULL)
    try:
        # strace says nothing once attached: wait until it is tracing.
        check(wait_until(lambda: _traced(fs), 10),
              "strace did not attach to the fork-server")
        check_eq(c.count(range_plan(0, 2, 1, ops=[{"map": "upper"}])), 2,
                 "the traced job")
    finally:
        tracer.terminate()
        tracer.wait()
    with open(out) as f:
        opens = [line.strip() for line in f if "open" in line]
    check_eq(opens, [], "files the fork-server and its worker opened")


# What the fork-server itself does for a fresh worker, its debug lines off:
# read the request, make the socketpair, fork, answer, kill on emberd's
# word, reap, report.
FRESH_WORKER_SYSCALLS = 21


@skip_unless(shutil.which("strace"), "no strace")
@with_daemon(sets=["workers.max=1", "workers.reuse=no",
                  "daemon.log_level=info"])
def test_fresh_worker_reaped_in_one_pass(d):
    """The fork-server reaps a worker in the loop pass that hears of its
    exit: no signal handler interrupting its poll to write to a pipe the
    next pass reads (bench/README.md, "Fresh worker").  Counted as the
    system calls it makes, alone, per fresh worker."""
    c = d.client()
    check_eq(c.count(range_plan(0, 2, 1, ops=[{"map": "upper"}])), 2,
             "the first job")
    fs = d.forkserver_pid()
    out = os.path.join(d.tmpdir, "strace.out")
    tracer = subprocess.Popen(["strace", "-qq", "-o", out, "-p", str(fs)],
                              stderr=subprocess.DEVNULL)
    n = 20
    try:
        check(wait_until(lambda: _traced(fs), 10),
              "strace did not attach to the fork-server")
        before = pool(c)["forks"]
        check_eq(c.count(range_plan(0, n, n, ops=[{"map": "upper"}])), n,
                 "the traced job")
        check(wait_until(lambda: pool(c)["workers"] == 0, 10),
              "the workers were not all reaped")
        check_eq(pool(c)["forks"] - before, n, "workers forked")
    finally:
        tracer.terminate()
        tracer.wait()
    with open(out) as f:
        lines = [line for line in f if not line.startswith(("---", "+++"))]
    calls = len(lines) / n
    check(calls <= FRESH_WORKER_SYSCALLS,
          "the fork-server made %.1f system calls a fresh worker (at most "
          "%d): %s" % (calls, FRESH_WORKER_SYSCALLS,
                       "".join(lines[-30:])))


@with_daemon(sets=["workers.max=1", "workers.reuse=no"])
def test_forkserver_maps_no_name_service(d):
    """The fork-server looks its user up (name, groups) in a child that
    exits: the name service's modules (libnss_systemd and what it links)
    are never in the address space every worker is forked from
    (bench/README.md, "Fresh worker")."""
    c = d.client()
    check_eq(c.count(range_plan(0, 2, 1, ops=[{"map": "upper"}])), 2,
             "a job")
    fs = d.forkserver_pid()
    with open("/proc/%d/maps" % fs) as f:
        nss = sorted(set(line.split()[-1] for line in f
                         if "libnss_" in line))
    check_eq(nss, [], "name-service modules in the fork-server")


# ember-worker's own libraries, linked into it when configure found their
# static archives.
WORKER_STATIC_LIBS = ("libevent", "libjansson", "libinih", "libuuid",
                      "libpcre2-8", "libelf", "libz", "libunistring")


def _worker_libs_static():
    """Did configure link ember-worker's libraries statically?  Only a
    build that says no (--disable-static-worker-libs, or no archives
    found) maps them as shared objects."""
    try:
        with open(os.path.join(BUILDDIR, "Makefile")) as f:
            return not any(line.strip() == "WORKER_STATIC = no"
                           for line in f)
    except OSError:
        return True


@skip_unless(_worker_libs_static(),
             "ember-worker was built with its libraries shared "
             "(./configure --disable-static-worker-libs, or no archives)")
@with_daemon(sets=["workers.reuse=no"])
def test_forkserver_maps_no_worker_library(d):
    """ember-worker's own libraries are in its executable, not shared
    objects: each is five mappings, and fork copies every mapping of the
    fork-server for every fresh worker (bench/README.md, "Fresh
    worker")."""
    c = d.client()
    check_eq(c.count(range_plan(0, 2, 1, ops=[{"map": "upper"}])), 2,
             "a job")
    fs = d.forkserver_pid()
    with open("/proc/%d/maps" % fs) as f:
        objs = set(os.path.basename(line.split()[-1]) for line in f
                   if len(line.split()) >= 6 and "/" in line.split()[-1])
    shared = sorted(o for o in objs for lib in WORKER_STATIC_LIBS
                    if o.startswith((lib + ".so", lib + "-")))
    check_eq(shared, [], "the worker's libraries mapped in the fork-server")


def _traced(pid):
    """Is pid being traced?"""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("TracerPid:"):
                return int(line.split()[1]) != 0
    return False


# ---------------------------------------------------------------------------
# Workers that are not reused

@with_daemon(sets=["workers.max=1"])
def test_worker_gone_after_exception(d):
    """A worker whose task threw is not reused; the next job runs."""
    c = d.client()
    [before] = job_pids(c, 1)
    c.execute_ok(records_plan(["x"], 1, ops=[{"pipe": {
        "command": "cat >/dev/null; echo broken >&2; exit 3"}}]), "collect")
    status, message = c.read_partition()
    check_eq(status, STREAM_ERROR, "response (payload %r)" % (message,))
    check("broken" in message, "%r lacks the command's stderr" % message)
    check_eq(pid_in_message(message), before, "the failing worker")
    wait_gone([before])
    wait_forgotten(c, [before])
    check_eq(retired(c)["failed"], 1, "retired as failed")
    [after] = job_pids(c, 1)
    check(after != before, "the failed worker %d ran the next job" % before)


@with_daemon(sets=["workers.max=1"])
def test_worker_gone_after_killed_task(d):
    """A worker killed mid-task is reported; the next job gets a new one."""
    c = d.client()
    c.execute_ok(records_plan(["x"], 1, ops=[{"pipe": {
        "command": "exec sleep 30"}}]), "collect")
    pid = d.worker_running("sleep 30")
    os.kill(pid, signal.SIGKILL)
    status, message = c.read_partition()
    check_eq(status, STREAM_ERROR, "response (payload %r)" % (message,))
    check_eq(pid_in_message(message), pid, "the worker named")
    check("SIGKILL" in message, "%r does not name SIGKILL" % message)
    wait_forgotten(c, [pid])
    check_eq(retired(c)["exited"], 1, "retired as exited")
    [after] = job_pids(c, 1)
    check(after != pid, "a dead worker's pid ran the next job")


@with_daemon(sets=["workers.max=1"])
def test_worker_gone_after_client_leaves(d):
    """A client that closes mid-task gets its worker and command killed
    (the operation is not reattachable: it ends with its connection)."""
    c = d.client()
    c.execute_ok(records_plan(["x"], 1, ops=[{"pipe": {
        "command": "exec sleep 31"}}]), "collect", {"reattachable": False})
    pid = d.worker_running("sleep 31")
    sleeper = [p for p in descendants(pid) if "sleep 31" in cmdline(p)]
    check(sleeper, "no sleep under worker %d" % pid)
    c.close()
    wait_gone([pid] + sleeper)
    c = d.client()
    wait_forgotten(c, [pid])
    check_eq(retired(c)["interrupted"], 1, "retired as interrupted")
    [after] = job_pids(c, 1)
    check(after != pid, "the interrupted worker ran the next job")


@with_daemon(sets=["workers.max=3"])
def test_workers_gone_after_early_stop(d):
    """Stopping a stream early kills the workers still running its tasks;
    the idle ones stay (the one that finished partition 0, unless it took a
    prefetched partition before a new worker was ready)."""
    c = d.client()
    # Partition 0 answers at once, partitions 1 and 2 sleep.
    plan = records_plan(["0", "32", "32"], 3, ops=[{"pipe": {
        "command": "read x; echo $PPID; exec sleep $x"}}])
    c.execute_ok(plan, "iterate", {"prefetch": 2})
    c.write_int(REQUEST_NEXT)
    status, records = c.read_partition()
    check_eq(status, STREAM_PARTITION, "partition 0 (payload %r)" %
             (records,))
    done = int(records[0])
    def sleeping():
        return [p for p in d.worker_pids()
                if any("sleep 32" in cmdline(q) for q in descendants(p))]
    wait_until(lambda: len(sleeping()) >= 2, 5)
    busy = sleeping()
    check_eq(len(busy), 2, "workers running the prefetched partitions")
    sleepers = [q for p in busy for q in descendants(p)]
    idle = [p for p in d.worker_pids() if p not in busy]
    check(idle, "no idle worker besides %r" % busy)
    check(done in idle or done in busy, "partition 0's worker %d" % done)
    c.write_int(REQUEST_STOP)
    check_eq(c.read_int(), STREAM_DONE, "answer to stop")
    wait_gone(busy + sleepers)
    wait_forgotten(c, busy)
    check_eq(retired(c)["interrupted"], 2, "retired as interrupted")
    for pid in idle:
        check(is_running(pid), "idle worker %d is gone" % pid)
        check_eq(status_workers(c)[pid]["state"], "idle", "its state")
    pids = job_pids(c, 3)
    check(not set(pids) & set(busy), "stopped workers ran the next job")


def _idle_workers_killed(d, sig):
    c = d.client()
    first = set(job_pids(c, 4, "cat >/dev/null; sleep 0.2; echo $PPID"))
    check_eq(len(first), 2, "workers of the first job")
    for pid, w in status_workers(c).items():
        check_eq(w["state"], "idle", "state of worker %d" % pid)
    for pid in first:
        os.kill(pid, sig)
    wait_gone(first)
    # No waiting for emberd to notice: the next job comes at once.
    second = job_pids(c, 4)
    check(not set(second) & first, "a killed worker's pid ran a task")
    check_eq(c.count(range_plan(0, 1000, 4)), 1000, "another job")
    check_eq(retired(c)["exited"], 2, "retired as exited")


@with_daemon(sets=["workers.max=2"])
def test_idle_workers_sigterm(d):
    """Idle workers ended by SIGTERM from outside: the next job runs."""
    _idle_workers_killed(d, signal.SIGTERM)


@with_daemon(sets=["workers.max=2"])
def test_idle_workers_sigkill(d):
    """Idle workers ended by SIGKILL from outside: the next job runs."""
    _idle_workers_killed(d, signal.SIGKILL)


def _all_idle(d, c):
    """Are the fork-server's live workers all there, and idle, in emberd's
    status?"""
    workers = status_workers(c)
    live = set(d.worker_pids())
    return (live and set(workers) == live and
            all(w["state"] == "idle" for w in workers.values()))


@with_daemon(sets=["workers.max=2"])
def test_idle_workers_killed_just_before_a_job(d):
    """Idle workers killed the moment before a job arrives: the job's tasks
    never started on them, so the job still runs."""
    c = d.client()
    for sig in (signal.SIGKILL, signal.SIGTERM):
        check_eq(c.count(range_plan(0, 100, 2)), 100, "a job to start "
                 "workers")
        # Idle in emberd's eyes, every one: a worker still forking when
        # it is killed may get the job's task before emberd knows.
        check(wait_until(lambda: _all_idle(d, c), 10),
              "workers not all idle: %r" % status_workers(c))
        idle = d.worker_pids()
        for pid in idle:
            os.kill(pid, sig)
        reply = c.execute(range_plan(0, 100, 2), "count")
        check(reply["ok"], "the job right after idle workers got %s: %r" %
              (signal.Signals(sig).name, reply))
        check_eq(reply["count"], 100, "count")


# ---------------------------------------------------------------------------
# Limits

@with_daemon(sets=["workers.max=2", "workers.idle_timeout=1s"])
def test_idle_timeout(d):
    """Idle workers are stopped after workers.idle_timeout, not before."""
    c = d.client()
    pids = set(job_pids(c, 4, "cat >/dev/null; sleep 0.2; echo $PPID"))
    ended = time.monotonic()
    check_eq(len(pids), 2, "workers of the job")
    check_during(lambda: set(status_workers(c)) == pids, 0.4,
                 "a worker of the job gone within 0.4s of it")
    wait_forgotten(c, pids, timeout=3)
    check(time.monotonic() - ended >= 0.9, "workers stopped after %.2fs, "
          "before idle_timeout" % (time.monotonic() - ended))
    wait_gone(pids)
    check_eq(retired(c)["idle_timeout"], 2, "retired for idle_timeout")
    after = job_pids(c, 2)
    check(not set(after) & pids, "a timed-out worker ran the next job")


def _wait_warm(c, n):
    """Wait until emberd has n idle workers; their status entries."""
    def idle():
        return {p: w for p, w in status_workers(c).items()
                if w["state"] == "idle"}
    wait_until(lambda: len(idle()) >= n, 3)
    return idle()


@with_daemon(sets=["workers.max=4", "workers.min_idle=2"])
def test_min_idle_forked_ahead(d):
    """workers.min_idle idle workers are kept ready, forked before a job
    needs them (and forked again while a job keeps one busy): a job on two
    workers then runs on warm ones."""
    c = d.client()
    [first] = job_pids(c, 1)
    warm = _wait_warm(c, 2)
    check(len(warm) >= 2, "idle workers after a job on one: %d" % len(warm))
    check(first in warm, "the first job's worker is not kept")
    check(pool(c)["forks"] in (2, 3), "forks: %d" % pool(c)["forks"])
    pids = job_pids(c, 2, "cat >/dev/null; sleep 0.3; echo $PPID")
    check(set(pids) <= set(warm), "workers of a job on two %s are not the "
          "warm ones %s" % (sorted(pids), sorted(warm)))

@with_daemon(sets=["workers.max=4", "workers.min_idle=2"])
def test_min_idle_warm_at_start(d):
    """Not root, emberd's one pool is warm before the first job; as root a
    user's pool (and its fork-server) starts with that user's first job."""
    c = d.client()
    if os.geteuid() != 0:
        check_eq(len(_wait_warm(c, 2)), 2, "warm workers before any job")
        check_eq(pool(c)["forks"], 2, "forks")
    else:
        check_during(lambda: c.status()["pools"] == [], 0.3,
                     "a pool before any job")
        job_pids(c, 1)
        check(len(_wait_warm(c, 2)) >= 2, "warm workers after a job")


@with_daemon(sets=["workers.max=4", "workers.min_idle=2",
                   "workers.idle_timeout=1s"])
def test_min_idle_kept_past_idle_timeout(d):
    """After idle_timeout, min_idle workers stay and the rest go."""
    c = d.client()
    pids = set(job_pids(c, 4, "cat >/dev/null; sleep 0.3; echo $PPID"))
    check_eq(len(pids), 4, "workers of the job")
    wait_until(lambda: retired(c)["idle_timeout"] >= 2, 3)
    check(wait_until(lambda: len(status_workers(c)) == 2, 5),
          "workers left after idle_timeout: %s" % sorted(status_workers(c)))
    # Another idle_timeout: still two.
    check_during(lambda: len(status_workers(c)) == 2, 1.2,
                 "not two workers left past idle_timeout")
    left = status_workers(c)
    check_eq(len(left), 2, "workers left %s" % sorted(left))
    check(set(left) <= pids, "the workers kept are the job's")
    for pid, w in left.items():
        check_eq(w["state"], "idle", "state of kept worker %d" % pid)
    check_eq(retired(c)["idle_timeout"], 2, "retired for idle_timeout")
    wait_gone(pids - set(left))


@with_daemon(sets=["workers.max=4", "workers.min_idle=2"])
def test_min_idle_replaced(d):
    """A warm worker killed from outside is replaced.  (A pool exists once
    its user ran a job; while the job keeps a worker busy a third may be
    forked to keep two idle.)"""
    c = d.client()
    job_pids(c, 1)
    warm = set(_wait_warm(c, 2))
    check(len(warm) in (2, 3), "warm workers: %d" % len(warm))
    victim = sorted(warm)[0]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: victim not in status_workers(c) and
               len(status_workers(c)) == 2, 3)
    now = status_workers(c)
    check(victim not in now, "the killed worker is still listed")
    check_eq(len(now), 2, "warm workers after the kill %s" % sorted(now))
    for pid, w in now.items():
        check_eq(w["state"], "idle", "state of worker %d" % pid)
    check_eq(pool(c)["forks"], 3, "forks")


@with_daemon(sets=["workers.max=1"])
def test_idle_worker_gives_back_count_by_value_table(d):
    """The slot arrays a worker keeps after count_by_value for its next
    tasks' tables (MiBs) go back to the system once it has sat idle a
    while: an idle worker holds no more than it needs."""
    c = d.client()
    # 15,000 distinct records: the table grows to 64K slots (2 MiB).
    reply = c.execute_ok(range_plan(0, 15000, 1), "count_by_value")
    check_eq(len(reply["counts"]), 15000, "distinct records")
    (pid,) = status_workers(c)
    held = status_kb(pid, "RssAnon")
    check(wait_until(lambda: status_kb(pid, "RssAnon") < held - 2048, 5),
          "worker %d holds %d kB of anonymous memory, %d kB right after "
          "the task" % (pid, status_kb(pid, "RssAnon"), held))
    reply = c.execute_ok(range_plan(0, 15000, 1), "count_by_value")
    check_eq(len(reply["counts"]), 15000, "distinct records again")
    check_eq(list(status_workers(c)), [pid], "the same worker")


MAX_TASKS = 3
JITTER = MAX_TASKS // 10	# workers.max_tasks gives or takes a tenth


@with_daemon(sets=["workers.max=1", "workers.max_tasks=%d" % MAX_TASKS])
def test_max_tasks_recycles(d):
    """A worker is recycled after workers.max_tasks tasks."""
    c = d.client()
    pids = [job_pids(c, 1)[0] for _ in range(3 * MAX_TASKS)]
    runs = []
    for pid in pids:
        if runs and runs[-1][0] == pid:
            runs[-1][1] += 1
        else:
            runs.append([pid, 1])
    check(len(set(p for p, _ in runs)) == len(runs),
          "a recycled worker came back: %s" % pids)
    for pid, n in runs[:-1]:
        check(MAX_TASKS <= n <= MAX_TASKS + JITTER, "worker %d ran %d "
              "tasks, max_tasks is %d: %s" % (pid, n, MAX_TASKS, pids))
    check(len(runs) >= 3, "only %d workers for %d tasks" % (len(runs),
                                                           len(pids)))
    wait_gone([p for p, _ in runs[:-1]])
    check_eq(retired(c)["max_tasks"], sum(1 for _, n in runs
                                         if n >= MAX_TASKS),
             "retired for max_tasks")


@with_daemon(sets=["workers.max=2", "workers.max_tasks=%d" % MAX_TASKS])
def test_max_tasks_with_queued_counts(d):
    """Counting tasks queued on a worker still respect max_tasks."""
    c = d.client()
    check_eq(c.count(range_plan(0, 30000, 30)), 30000, "count")
    for pid, w in status_workers(c).items():
        check(w["tasks"] <= MAX_TASKS + JITTER, "worker %d ran %d tasks" %
              (pid, w["tasks"]))
    p = pool(c)
    check(p["forks"] >= 30 // (MAX_TASKS + JITTER), "%d forks ran 30 tasks "
          "with max_tasks %d" % (p["forks"], MAX_TASKS))
    check(p["retired"]["max_tasks"] >= 30 // (MAX_TASKS + JITTER) - 2,
          "retired for max_tasks: %r" % p["retired"])
    check_eq(p["retired"]["interrupted"], 0, "retired as interrupted")


@skip_with_sanitizer("address", "AddressSanitizer maps terabytes of shadow "
                     "memory, more than the 64 MiB address-space limit of "
                     "workers.max_memory=32m lets a worker start with")
@with_daemon(sets=["workers.max=1", "workers.max_memory=32m"])
def test_max_memory(d):
    """A worker whose memory grows past workers.max_memory is killed and its
    task fails saying so; small jobs run fine before and after."""
    c = d.client()
    [before] = job_pids(c, 1)
    check(status_workers(c)[before]["rss_kb"] < 32 * 1024,
          "an idle worker over the limit")
    reply = c.execute(range_plan(0, 3000000, 1), "count_by_value")
    msg = check_error(reply, "TASK_FAILED", "exceeded workers.max_memory")
    check_eq(pid_in_message(msg), before, "the worker named")
    wait_gone([before])
    check_eq(retired(c)["max_memory"], 1, "retired for max_memory")
    reply = c.execute(range_plan(0, 1000, 2), "count_by_value")
    check(reply["ok"], "a small count_by_value after: %r" % reply)
    check_eq(len(reply["counts"]), 1000, "distinct values")
    [after] = job_pids(c, 1)
    check(after != before, "the killed worker ran the next job")


# Three commands of a pipe, each holding 60 MiB it has touched, for 20 s.
HOLDERS = ("cat >/dev/null; for i in 1 2 3; do python3 -c '"
           "import time; b = bytearray(60 << 20)\n"
           "for i in range(0, len(b), 4096): b[i] = 1\n"
           "time.sleep(20)' & done; wait")


@skip_with_sanitizer("address", "AddressSanitizer maps terabytes of shadow "
                     "memory, more than the address-space limit of "
                     "workers.max_memory lets a worker start with")
@with_daemon(sets=["workers.max=1", "workers.max_memory=96m"])
def test_max_memory_bounds_the_pipe(d):
    """workers.max_memory bounds the task's whole process tree: a pipe's
    commands, each under the limit, together past it, are killed with the
    worker, and the task fails saying so, long before they would end."""
    c = d.client()
    start = time.monotonic()
    reply = c.execute(records_plan(["x"], 1, ops=[{"pipe": {
        "command": HOLDERS}}]), "count")
    msg = check_error(reply, "TASK_FAILED", "exceeded workers.max_memory")
    check(time.monotonic() - start < 15, "killed only after %.1fs" %
          (time.monotonic() - start))
    check("with its commands" in msg, "%r does not say the commands "
          "counted" % msg)
    check(wait_until(lambda: not any("bytearray" in cmdline(p)
                                     for p in all_pids()), 5),
          "the pipe's commands outlived the worker")


@skip_with_sanitizer("address", "AddressSanitizer maps terabytes of shadow "
                     "memory, more than the 64 MiB address-space limit of "
                     "workers.max_memory=32m lets a worker start with")
@with_daemon(sets=["workers.max=1", "workers.max_memory=32m"])
def test_max_memory_allocation_failure(d):
    """A worker that dies of a failed allocation under its address-space
    limit (twice workers.max_memory) before the resident-memory check sees
    anything fails its task saying it exceeded workers.max_memory, not
    with an exit status."""
    # A broadcast the task uses takes 40 MiB of the worker's 64 MiB of
    # address space without counting in its resident memory; a text line
    # that never ends then doubles the worker's line buffer until an
    # allocation fails, with at most some 17 MiB resident: always the
    # allocation, never the resident-memory check.
    c = d.client()
    bid = c.broadcast_put(b"x" * (40 << 20))
    path = d.path("endless-line.txt")
    with open(path, "wb") as f:
        f.truncate(256 << 20)		# sparse: no newline, no disk
    os.chmod(path, 0o644)
    os.chmod(d.tmpdir, 0o755)		# workers.root_user reads it
    [before] = job_pids(c, 1)
    reply = c.execute(text_plan([path], 1, ops=[
        {"filter": {"in_broadcast": bid}}]), "count")
    msg = check_error(reply, "TASK_FAILED", "exceeded workers.max_memory",
                      "an allocation failed")
    check_eq(pid_in_message(msg), before, "the worker named")
    wait_gone([before])
    check_eq(retired(c)["max_memory"], 1, "retired for max_memory")
    check_eq(c.count(range_plan(0, 100, 2)), 100, "the next job")


def _mapped(d):
    """How many mappings of a 24 MB text file the worker reading it holds
    while it reads (a filter that takes blocks of lines): its pipe's
    command stops reading, and the worker waits on it, mid-file."""
    path = job_readable(write_file(d.path("mapped.txt"),
                                   "quick brown\n" * (2 << 20)))
    c = d.client()
    c.send_json({"op": "execute", "action": "count", "plan": text_plan(
        [path], 1, ops=[{"filter": {"regex": "quick"}},
                        {"pipe": {"command": "head -c 1 >/dev/null; "
                                  "exec sleep 34"}}])})
    pid = d.worker_running("sleep 34")
    with open("/proc/%d/maps" % pid) as f:
        maps = sum(path in line for line in f)
    for p in descendants(pid):
        if "sleep 34" in cmdline(p):
            os.kill(p, signal.SIGKILL)
    c.recv_json()			# the task's end, whatever it says
    c.close()
    return maps


@with_daemon(sets=["workers.max=1"])
def test_text_file_mapped(d):
    """Without workers.max_memory, a worker reads a text file through a
    mapping."""
    check_eq(_mapped(d), 1, "the mappings of the file")


@skip_with_sanitizer("address", "AddressSanitizer maps terabytes of shadow "
                     "memory, more than the 64 MiB address-space limit of "
                     "workers.max_memory=32m lets a worker start with")
@with_daemon(sets=["workers.max=1", "workers.max_memory=32m"])
def test_text_file_not_mapped_under_max_memory(d):
    """Under workers.max_memory, whose address-space limit a mapping
    counts in, a file that would take more than an eighth of it is read,
    not mapped: the task's own allocations keep the room they had."""
    check_eq(_mapped(d), 0, "the mappings of the file")


@with_daemon(sets=["workers.max=1", "workers.task_timeout=1s"])
def test_task_timeout(d):
    """A task running past workers.task_timeout is killed with its command,
    and fails saying so."""
    c = d.client()
    started = time.monotonic()
    c.send_json({"op": "execute", "action": "count", "plan": records_plan(
        ["x"], 1, ops=[{"pipe": {"command": "exec sleep 33"}}])})
    pid = d.worker_running("sleep 33")
    sleeper = [p for p in descendants(pid) if "sleep 33" in cmdline(p)]
    msg = check_error(c.recv_json(), "TASK_FAILED",
                      "exceeded workers.task_timeout")
    took = time.monotonic() - started
    check(0.9 <= took <= 5, "the task failed after %.2fs" % took)
    check_eq(pid_in_message(msg), pid, "the worker named")
    wait_gone([pid] + sleeper)
    check_eq(retired(c)["task_timeout"], 1, "retired for task_timeout")
    check_eq(c.count(range_plan(0, 100, 2)), 100, "the next job")


@with_daemon(sets=["workers.max=1", "workers.task_timeout=1s"])
def test_task_timeout_is_per_task(d):
    """Tasks under the timeout run, even when the job takes longer."""
    c = d.client()
    started = time.monotonic()
    pids = job_pids(c, 3, "cat >/dev/null; sleep 0.5; echo $PPID")
    check(time.monotonic() - started > 1.2, "the job was too quick to show "
          "anything")
    check_eq(len(set(pids)), 1, "one worker ran every task: %s" % pids)
    check_eq(retired(c)["task_timeout"], 0, "retired for task_timeout")


# ---------------------------------------------------------------------------
# A fork-server of another build

FAKE_FORKSERVER = os.path.join(BUILDDIR, "tests", "integration",
                               "fake_forkserver")
FS_HELLO, FS_EXIT = 1, 6
BACKOFF_MS = 200


def _upgrading_daemon(packet):
    """emberd whose daemon.worker_path runs ember-worker until the file
    "upgraded" exists in its directory, then fake_forkserver sending
    packet (type, id): an ember-worker installed while emberd runs.  Each
    start of the fake is a line (its pid) in the file "starts"."""
    d = Daemon(start=False, sets=["workers.fork_backoff=%dms" % BACKOFF_MS])
    script = d.path("ember-worker.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\n"
                "if [ -e %s ]; then\n"
                "\techo $$ >>%s\n"
                "\texec %s %d %d \"$@\"\n"
                "fi\n"
                "exec %s \"$@\"\n" % (d.path("upgraded"), d.path("starts"),
                                      FAKE_FORKSERVER, packet[0], packet[1],
                                      EMBER_WORKER))
    os.chmod(script, 0o755)
    d.sets.append("daemon.worker_path=" + script)
    d.start()
    return d, script


def _fake_starts(d):
    try:
        with open(d.path("starts")) as f:
            return [int(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def _refused_after_upgrade(packet, *needles):
    """Upgrade d's ember-worker to a fake sending packet and restart the
    fork-server: a job fails soon with needles in its error, emberd logs
    them and still answers, each fake is killed, and they are started no
    faster than the back-off.  emberd and the log line are returned."""
    d, script = _upgrading_daemon(packet)
    c = d.client(timeout=15)
    check_eq(c.count(range_plan(0, 100, 2)), 100, "count before the upgrade")
    open(d.path("upgraded"), "w").close()
    os.kill(d.forkserver_pid(), signal.SIGKILL)
    # Its idle workers, not yet gone with it, would take the job.
    check(wait_until(lambda: "fork-server was killed by signal 9" in
                     d.log_text() and not c.status()["workers"], 5),
          "the fork-server's end not seen:\n%s" % d.log_tail())
    t0 = time.monotonic()
    try:
        c.count(range_plan(0, 100, 2))
        check(False, "a job ran on the fork-server of another build")
    except RequestFailed as e:
        failed = e
    took = time.monotonic() - t0
    for n in needles:
        check(n in failed.message, "error %r lacks %r" % (failed.message, n))
    check(took < 5, "the job failed after %.1f s" % took)
    check(_fake_starts(d), "the fake fork-server never started")
    # No restart storm: over two seconds, the doubling back-off (from
    # 200 ms: starts 0.4, 0.8, 1.6 s apart) allows three starts at most.
    before = len(_fake_starts(d))
    time.sleep(2)
    started = len(_fake_starts(d)) - before
    check(started <= 3, "%d fork-servers started in 2 s" % started)
    # Each was killed: between two starts none is left.
    check(wait_until(lambda: not any(is_running(p)
                                     for p in _fake_starts(d)), 5),
          "fake fork-servers left: %s" %
          [p for p in _fake_starts(d) if is_running(p)])
    check(d.alive(), "emberd went")
    check_eq(c.status()["pid"], d.pid, "status after the refusals")
    with d.client() as c2:
        check_eq(c2.status()["pid"], d.pid, "status on a new connection")
    c.close()
    return d, failed


@no_daemon
def test_forkserver_of_another_build_refused(_):
    """An ember-worker of another worker protocol (one built before it had
    a version of its own says 1) is refused at its hello: killed, the jobs
    waiting for it failed with both versions and what to do, restarted
    only at the back-off's pace, and emberd serves on."""
    r = subprocess.run([EMBER_WORKER, "--version"], capture_output=True,
                       text=True, timeout=10)
    m = re.search(r"\(protocol (\d+), worker protocol (\d+)\)", r.stdout)
    check(m is not None, "ember-worker --version: %r" % r.stdout)
    ours = int(m.group(2))
    check(ours != 1, "the worker protocol is still the client's 1")
    d, failed = _refused_after_upgrade(
        (FS_HELLO, 1), "worker protocol 1", "emberd %d" % ours,
        "restarted after ember is upgraded")
    check("ember-worker.sh" in failed.message, "error %r names no worker "
          "path" % failed.message)
    # A request that waits for a helper (a glob's) fails at the next
    # refusal, saying the same.
    with d.client(timeout=15) as c:
        try:
            c.count(text_plan([d.path("*.log")]))
            check(False, "a glob was matched by the fork-server of another "
                  "build")
        except RequestFailed as e:
            check_eq(e.error_class, "HELPER_FAILED", "the glob's error class")
            check("worker protocol 1, emberd %d" % ours in e.message,
                  "the glob's error %r" % e.message)
    check_eq(failed.error_class, "TASK_FAILED", "error class")
    log = d.log_text()
    check(re.search(r"fork-server \d+ for uid \d+: \S+ember-worker\.sh "
                    r"speaks worker protocol 1, this emberd %d: restart "
                    r"emberd after upgrading ember" % ours, log),
          "no error logged:\n%s" % d.log_tail())


@no_daemon
def test_forkserver_message_before_hello_refused(_):
    """A fork-server whose first message is not its hello is refused as
    one of another build."""
    d, _ = _refused_after_upgrade((FS_EXIT, 0), "FS_EXIT",
                                  "before its hello")
    check("sent FS_EXIT (6) before its hello; killing it" in d.log_text(),
          "no error logged:\n%s" % d.log_tail())


@no_daemon
def test_forkserver_that_never_says_hello_is_killed(_):
    """A fork-server that never says hello (a name service that hangs, a
    preload that does not return) is killed at workers.start_timeout:
    the job waiting for it fails saying so, instead of waiting for ever,
    and emberd serves on."""
    d = Daemon(start=False, sets=["workers.start_timeout=500ms",
                                  "workers.fork_backoff=200ms"])
    script = d.path("ember-worker.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho $$ >>%s\nexec sleep 600\n" %
                d.path("starts"))
    os.chmod(script, 0o755)
    d.sets.append("daemon.worker_path=" + script)
    d.start()
    with d:
        c = d.client(timeout=15)
        t0 = time.monotonic()
        try:
            c.count(range_plan(0, 100, 2))
            check(False, "a job ran without a fork-server")
        except RequestFailed as e:
            check("did not start within workers.start_timeout (500ms)" in
                  e.message, "error %r" % e.message)
        took = time.monotonic() - t0
        check(took < 5, "the job failed after %.1f s" % took)
        check("did not say hello within 500ms (workers.start_timeout); "
              "killing it" in d.log_text(), "no error logged:\n%s" %
              d.log_tail())
        check(wait_until(lambda: not any(is_running(p)
                                         for p in _fake_starts(d)), 5),
              "fork-servers left: %s" % _fake_starts(d))
        check_eq(c.status()["pid"], d.pid, "status after the kill")
        c.close()


if __name__ == "__main__":
    run_tests(globals())
