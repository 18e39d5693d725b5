"""
Faults injected into the processes that do file work for emberd and into
the fork-server that forks them: a save's helper killed in the middle of
its step, emberd killed in the middle of a save, a fork-server killed while
jobs that need a helper arrive, checkpoint removals slowed while the
user's own requests need helpers, and a text file cut short while a
worker reads it through a mapping.  Each save must end whole (every part
and _SUCCESS, and a success reply) or absent (no part file in its path,
and a failure reply), and a save to the same path again must then
succeed; no fault is told to a client as INTERNAL.

The windows are widened with strace: attached to the fork-server with -f,
it delays the exit of the syscalls a step makes, so that the test can kill
the helper after the step did some of its work and before it answered.
"""

import os
import select
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403

STRACE = shutil.which("strace")
NEEDS_STRACE = skip_unless(STRACE is not None, "strace is not installed")


class Delay:
    """strace on the fork-server and its children to come, delaying the
    exit of each syscall named by 300ms."""

    def __init__(self, d, syscalls):
        with d.client() as c:		# the fork-server starts on first use
            c.request_ok({"op": "execute", "plan": range_plan(0, 2, 1),
                          "action": "count"})
        self.fs = d.forkserver_pid()
        names = ",".join(syscalls)
        self.proc = subprocess.Popen(
            [STRACE, "-f", "-qq", "-o", "/dev/null", "-e", "trace=" + names,
             "-e", "inject=%s:delay_exit=300000" % names,
             "-p", str(self.fs)], stdin=subprocess.DEVNULL)
        check(wait_until(lambda: self._traced(), 10),
              "strace did not attach to fork-server %d" % self.fs)

    def _traced(self):
        try:
            with open("/proc/%d/status" % self.fs) as f:
                for line in f:
                    if line.startswith("TracerPid:"):
                        return int(line.split()[1]) == self.proc.pid
        except OSError:
            pass
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def helper_pids(d):
    """The helpers running now: children of the fork-server so titled."""
    fs = d.forkserver_pid()
    table = process_table()
    return [p for p, st in table.items()
            if st[2] == fs and st[1] not in ("Z", "X") and
            cmdline(p).startswith("ember-worker: helper")]


def kill_helper_when(d, cond, timeout=20):
    """Once cond() holds, SIGKILL the one helper running; its pid."""
    check(wait_until(cond, timeout), "the step never got that far")
    pids = helper_pids(d)
    check_eq(len(pids), 1, "helpers running")
    os.kill(pids[0], signal.SIGKILL)
    return pids[0]


def listing(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def parts(path):
    return [n for n in listing(path) if n.startswith("part-")]


def save(d, out, plan, operation=None):
    """Send a save; the client, for its reply."""
    c = d.client()
    req = {"op": "execute", "plan": plan, "action": "save",
           "options": {"path": out}}
    if operation is not None:
        req["operation"] = operation
    c.send_json(req)
    return c


def check_whole_or_absent(out, reply, n):
    """A save's outcome: whole with a success reply, or absent with a
    failure reply."""
    if reply.get("ok"):
        check_eq(listing(out), ["_SUCCESS"] + ["part-%05d" % i
                                               for i in range(n)],
                 "what %s holds after a save that succeeded" % out)
    else:
        check_eq([n for n in listing(out) if n != "_temporary"], [],
                 "what %s holds after a save that failed (%r)" %
                 (out, reply))


def check_saves_again(d, out, n, overwrite=False):
    """The same save, again, succeeds whole."""
    with d.client() as c:
        c.send_json({"op": "execute", "plan": range_plan(0, 4 * n, n),
                     "action": "save", "options": {"path": out,
                                                   "overwrite": overwrite}})
        r = c.recv_json()
    check(r.get("ok"), "saving again: %r" % r)
    check_eq(listing(out), ["_SUCCESS"] + ["part-%05d" % i for i in range(n)],
             "what %s holds after saving again" % out)


@NEEDS_STRACE
@with_daemon(sets=["workers.max=2"])
def test_commit_helper_killed(d):
    """save_commit's helper killed after it moved a part into the path:
    the commit is run again, and the client hears how it ended."""
    out = os.path.join(job_writable(d.path("w")), "out")
    delay = Delay(d, ["renameat", "renameat2", "rename", "linkat", "link"])
    try:
        c = save(d, out, range_plan(0, 32, 8))
        kill_helper_when(d, lambda: len(parts(out)) > 0)
    finally:
        delay.stop()
    r = c.recv_json()
    c.close()
    check_whole_or_absent(out, r, 8)
    check(r.get("ok"), "the commit was not run again: %r" % r)
    check("the commit was run again and succeeded" in d.log_text(),
          "the log does not say the commit ran again")
    check_saves_again(d, out, 8, overwrite=True)


@NEEDS_STRACE
@with_daemon(sets=["workers.max=2"])
def test_commit_helper_killed_every_run(d):
    """save_commit's helper killed at every run: the parts the runs put
    in the path are taken back, and the client hears that it failed."""
    out = os.path.join(job_writable(d.path("w")), "out")
    delay = Delay(d, ["renameat", "renameat2", "rename", "linkat", "link"])
    killed = []
    try:
        c = save(d, out, range_plan(0, 32, 8))
        killed.append(kill_helper_when(d, lambda: len(parts(out)) > 0))
        while len(killed) < 3:
            killed.append(kill_helper_when(d, lambda: [
                p for p in helper_pids(d) if p not in killed]))
    finally:
        delay.stop()
    r = c.recv_json()
    c.close()
    check_error(r, "HELPER_FAILED")
    check_whole_or_absent(out, r, 8)
    check(wait_until(lambda: listing(out) == [], 10),
          "the save's debris stays: %r" % listing(out))
    check_saves_again(d, out, 8)


@NEEDS_STRACE
@with_daemon(sets=["workers.max=2"])
def test_abort_helper_killed(d):
    """save_abort's helper killed after it removed a part: the undo is
    tried again until nothing of the save is left."""
    out = os.path.join(job_writable(d.path("w")), "out")
    fail_last = ('read x; if [ "$x" = 30 ]; then sleep 1; exit 3; fi; '
                 'echo "$x"; cat')
    c = save(d, out, range_plan(0, 40, 4, ops=[
        {"pipe": {"command": fail_last}}]))
    task_dir = os.path.join(out, "_temporary")
    check(wait_until(lambda: len(listing(task_dir)) == 1, 10),
          "no operation directory in %s" % task_dir)
    op_dir = os.path.join(task_dir, listing(task_dir)[0])
    check(wait_until(lambda: len(parts(op_dir)) == 3, 20),
          "three parts were not written: %r" % listing(op_dir))
    delay = Delay(d, ["unlinkat", "unlink"])
    try:
        kill_helper_when(d, lambda: 0 < len(parts(op_dir)) < 3)
    finally:
        delay.stop()
    r = c.recv_json()
    c.close()
    check_error(r, "TASK_FAILED")
    check(wait_until(lambda: listing(out) == [], 15),
          "the save's debris stays: %r" % listing(op_dir))
    check_saves_again(d, out, 4)


@NEEDS_STRACE
@with_daemon(sets=["workers.max=2"])
def test_begin_helper_killed(d):
    """save_begin's helper killed after it made the operation's
    directory: it is removed, and the client gets a retryable class."""
    out = os.path.join(job_writable(d.path("w")), "out")
    os.mkdir(out)
    os.chown(out, *owner_of(os.path.dirname(out)))
    task_dir = os.path.join(out, "_temporary")
    delay = Delay(d, ["mkdirat", "mkdir"])
    try:
        c = save(d, out, range_plan(0, 16, 4))
        kill_helper_when(d, lambda: len(listing(task_dir)) > 0)
    finally:
        delay.stop()
    r = c.recv_json()
    c.close()
    check_error(r, "HELPER_FAILED")
    check_eq(listing(out), [], "what %s holds" % out)
    check_saves_again(d, out, 4)


@with_daemon(sets=["workers.max=2"])
def test_save_left_by_a_crash(d):
    """emberd killed while a save's tasks run: the next start undoes the
    save, and the same save then succeeds."""
    out = os.path.join(job_writable(d.path("w")), "out")
    hang_last = ('read x; if [ "$x" = 30 ]; then exec sleep 60; fi; '
                 'echo "$x"; cat')
    c = save(d, out, range_plan(0, 40, 4, ops=[
        {"pipe": {"command": hang_last}}]))
    task_dir = os.path.join(out, "_temporary")
    check(wait_until(lambda: len(listing(task_dir)) == 1, 10),
          "no operation directory in %s" % task_dir)
    op_dir = os.path.join(task_dir, listing(task_dir)[0])
    check(wait_until(lambda: len(parts(op_dir)) == 3, 20),
          "three parts were not written: %r" % listing(op_dir))
    d.signal(signal.SIGKILL)
    d.wait()
    c.close()
    d.start()
    check(wait_until(lambda: listing(out) == [], 15),
          "the save's debris stays: %r" % listing(op_dir))
    check_saves_again(d, out, 4)


@NEEDS_STRACE
@with_daemon(sets=["workers.max=2"])
def test_commit_left_by_a_crash(d):
    """emberd killed while a save's commit runs: the next start runs the
    commit again, and the output is whole."""
    out = os.path.join(job_writable(d.path("w")), "out")
    delay = Delay(d, ["renameat", "renameat2", "rename", "linkat", "link"])
    try:
        c = save(d, out, range_plan(0, 32, 8))
        check(wait_until(lambda: len(parts(out)) > 0, 20),
              "the commit did not start")
        helper = helper_pids(d)
        d.signal(signal.SIGKILL)
        d.wait()
        c.close()
        check(wait_until(lambda: not any(is_running(p) for p in helper), 10),
              "the helper outlived emberd")
        check(len(parts(out)) < 8, "the commit ended before the kill")
    finally:
        delay.stop()
    d.start()
    # The commit writes _SUCCESS, then takes _temporary away.
    check(wait_until(lambda: "_SUCCESS" in listing(out) and
                     "_temporary" not in listing(out), 15),
          "the commit was not run again: %r" % listing(out))
    check_whole_or_absent(out, {"ok": True}, 8)


@NEEDS_STRACE
@with_daemon(sets=["daemon.max_helpers_per_uid=8"])
def test_removals_leave_the_users_helpers(d):
    """Nine reliable checkpoints dropped at once, their removals slowed:
    the user's own next request still gets a helper, and a helper or two
    remove them all."""
    path = job_readable(write_file(d.path("removals.txt"), "a\nb\nc\n"))
    plan = range_plan(0, 40, 4)
    with d.client() as c:
        ids = [c.request_ok({"op": "execute", "plan": plan,
                             "action": "checkpoint"})["checkpoint"]
               for _ in range(9)]
    top = os.path.join(d.tmpdir, "checkpoints")
    delay = Delay(d, ["unlinkat", "unlink", "rmdir"])
    try:
        with d.client() as c:
            for cid in ids:
                c.request_ok({"op": "checkpoint_drop", "checkpoint": cid})
            r = c.request({"op": "execute", "plan": text_plan([path], 1),
                           "action": "count"})
    finally:
        delay.stop()
    check(r.get("ok"), "count while the removals run: %r" % r)
    check_eq(r["count"], 3, "count")
    check(wait_until(lambda: all(
        listing(os.path.join(top, u)) == [] for u in listing(top)), 20),
        "checkpoints left: %r" % [(u, listing(os.path.join(top, u)))
                                  for u in listing(top)])
    helpers = d.log_text().count("checkpoint_remove for uid")
    check(helpers <= 3, "%d helpers removed 9 checkpoints" % helpers)


@with_daemon(sets=["workers.fork_backoff=200ms"])
def test_forkserver_killed_under_load(d):
    """Jobs that need a helper, sent without a pause while the fork-server
    is killed again and again: none is told INTERNAL; a helper killed
    with its fork-server is HELPER_FAILED."""
    path = job_readable(write_file(d.path("load.txt"), "a\nb\n"))
    plan = text_plan([path], 1)
    with d.client() as c:
        c.request_ok({"op": "execute", "plan": plan, "action": "count"})
    classes = {}
    stop = time.monotonic() + 6

    def run():
        with d.client() as c:
            while time.monotonic() < stop:
                r = c.request({"op": "execute", "plan": plan,
                               "action": "count"})
                k = "ok" if r.get("ok") else r["error"]["class"]
                classes.setdefault(k, r)
    joins = [in_thread(run) for _ in range(3)]
    kills = 0
    while time.monotonic() < stop - 1.5:
        time.sleep(1)
        os.kill(d.forkserver_pid(), signal.SIGKILL)
        kills += 1
    for join in joins:
        join(30)
    check(kills >= 3, "the fork-server was killed %d times" % kills)
    check("ok" in classes, "no job succeeded")
    check(set(classes) <= {"ok", "HELPER_FAILED"},
          "replies: %r" % [r for k, r in classes.items() if k != "ok"])


def owner_of(path):
    st = os.stat(path)
    return st.st_uid, st.st_gid


@with_daemon(sets=["workers.fork_backoff=2s"])
def test_forkserver_restart_waited_for(d):
    """Jobs that need a helper while the fork-server restarts wait for
    it, as the jobs that need only workers do."""
    path = job_readable(write_file(d.path("restart.txt"), "".join(
        "%d\n" % i for i in range(100))))
    with d.client() as c:
        check_eq(c.request_ok({"op": "execute", "plan": text_plan([path], 2),
                               "action": "count"})["count"], 100, "count")
    os.kill(d.forkserver_pid(), signal.SIGKILL)
    check(wait_until(lambda: "restarting it in" in d.log_text(), 10),
          "emberd did not see the fork-server die")
    out = os.path.join(job_writable(d.path("w")), "out")
    saver = save(d, out, range_plan(0, 8, 2))
    counter = d.client()
    counter.send_json({"op": "execute", "plan": text_plan([path], 2),
                       "action": "count"})
    r = counter.recv_json()
    counter.close()
    check(r.get("ok"), "count during the restart: %r" % r)
    check_eq(r["count"], 100, "count")
    check("waits for its fork-server" in d.log_text(),
          "no helper request waited for the fork-server")
    r = saver.recv_json()
    saver.close()
    check(r.get("ok"), "save during the restart: %r" % r)
    check_eq(listing(out), ["_SUCCESS", "part-00000", "part-00001"],
             "what %s holds" % out)


@with_daemon(sets=["workers.max=1"])
def test_text_file_truncated_while_read(d):
    """A text file truncated while a worker reads it through its mapping
    (a filter that takes blocks of lines) fails the task saying the file
    shrank: the reads past its new end raised SIGBUS, which is neither the
    worker's death nor a count of the bytes that are gone; the worker's
    next task runs."""
    path = job_readable(write_file(d.path("shrinks.txt"),
                                   "quick brown\n" * (4 << 20)))
    os.chmod(path, 0o666)		# the job's user truncates it
    # The command truncates the file once the worker's first lines reach
    # it; the worker, a pipe's buffer ahead at most, is still reading the
    # first of 48 MB.
    cut = "head -c 1 >/dev/null; truncate -s 0 '%s'; cat >/dev/null" % path
    with d.client() as c:
        reply = c.execute(text_plan([path], 1, ops=[
            {"filter": {"regex": "quick"}}, {"pipe": {"command": cut}}]),
            "count")
        check_error(reply, "TASK_FAILED", "shrinks.txt",
                    "the file shrank while it was read")
        check_eq(os.path.getsize(path), 0, "the file's size")
        check_eq(c.count(range_plan(0, 100, 2)), 100, "the next job")


@with_daemon(sets=["workers.max=1"])
def test_text_file_truncated_while_streamed(d):
    """A text file truncated while a plan of no ops streams it (its lines
    read through the mapping and handed to the output a block at a time)
    fails the task saying the file shrank, after records that are all
    the file's own lines: none read over the zeros past its new end
    reaches the client. The worker's next task runs."""
    line = b"quick brown"
    path = job_readable(write_file(d.path("streamed.txt"),
                                   "quick brown\n" * (4 << 20)))
    with d.client() as c:
        c.execute_ok(text_plan([path], 1), "iterate")
        c.write_int(REQUEST_NEXT)
        check_eq(c.read_int(), STREAM_PARTITION, "the stream's answer")
        check_eq(c.read_record(), line, "the first record")
        # The worker is held a few batches ahead of the client, in the
        # first MBs of 48.
        os.truncate(path, 0)
        n = 1
        while True:
            rec = c.read_record()
            if not isinstance(rec, bytes):
                break
            if rec != line:
                raise AssertionError("record %d is %r" % (n, rec[:40]))
            n += 1
        check_eq(rec, EXCEPTION_THROWN, "the end of the partition after "
                 "%d records" % n)
        msg = c.read_error_frame()
        check("the file shrank while it was read" in msg,
              "the error: %s" % msg)
        check(n < 4 << 20, "records before the error: %d" % n)
    with d.client() as c:
        check_eq(c.count(range_plan(0, 100, 2)), 100, "the next job")


def _holds_file(pid, path):
    """Whether process pid has path open or mapped."""
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)) == path:
                return True
        with open("/proc/%d/maps" % pid) as f:
            return path in f.read()
    except OSError:
        return False


@with_daemon(sets=["workers.max=1"])
def test_text_file_truncated_while_counted(d):
    """A count of a text file with no ops, the file truncated once the
    worker holds it, either fails the task saying the file shrank or
    counts the file as it was when measured: every line (done first) or
    none (cut before the worker's fstat); never the lines read before
    the cut as if they were the file's."""
    lines = 100 << 20
    path = job_readable(write_file(d.path("counted.txt"), b"\n" * lines))
    with d.client() as c:
        c.send_json({"op": "execute", "plan": text_plan([path], 1),
                     "action": "count"})
        def held_or_done():
            if select.select([c.sock], [], [], 0)[0]:
                return "done"
            return any(_holds_file(p, path) for p in d.worker_pids())
        held = wait_until(held_or_done, 30, interval=0.002)
        check(held, "no worker opened %s" % path)
        if held is True:
            os.truncate(path, 0)
        reply = c.recv_json()
        print("the count %s the cut: %r" % (
            "before" if held == "done" else "with", reply))
        if reply["ok"]:
            check(reply["count"] in (lines, 0),
                  "the count: got %r, want %d or 0" % (reply["count"], lines))
        else:
            check_error(reply, "TASK_FAILED", "counted.txt",
                        "the file shrank while it was read")
        check_eq(c.count(range_plan(0, 100, 2)), 100, "the next job")


@with_daemon(sets=["workers.max=1"])
def test_long_line_cut_while_streamed(d):
    """A line far longer than a batch, cut while the worker scans it for
    its end: the worker copies it before the check that the file is
    whole, so none of the zeros read past the cut reaches the client,
    however the cut falls in time."""
    size = 40 << 20
    for attempt in range(6):
        path = job_readable(write_file(d.path("long-line-%d.txt" % attempt),
                                       b"ab\n" * 10 + b"x" * size))
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)	# the pages clean, so that they can be dropped:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # slow reads
        os.close(fd)
        with d.client() as c:
            c.execute_ok(text_plan([path], 1), "iterate")
            time.sleep(0.01 * attempt)
            os.truncate(path, 30 + size - (1 << 20))
            c.write_int(REQUEST_NEXT)
            first = c.read_int()
            records = []
            if first == STREAM_PARTITION:
                while True:
                    end = c.read_record()
                    if not isinstance(end, bytes):
                        break
                    records.append(end)
                if end == EXCEPTION_THROWN:
                    c.read_error_frame()
            else:	# failed before its first record
                check_eq(first, -1, "the stream's answer")
                c.read_error_frame()
            for r in records:
                check(not r.endswith(b"\0"), "attempt %d: a record of %d "
                      "bytes ends in zeros" % (attempt, len(r)))
        os.unlink(path)


def _cut_once(path, size, to):
    """A Python map that cuts path to `to` bytes on its first record,
    while the worker is still reading the block that holds the cut."""
    def fn(s):
        import os
        if os.path.getsize(path) == size:
            os.truncate(path, to)
        return s
    return fn


@needs_python
@with_daemon()
def test_text_file_cut_within_a_page(d):
    """A file cut by a few bytes inside its last page raises no SIGBUS:
    the mapping reads zeros there. The task fails saying so, instead of
    handing on a last record with bytes the file never had."""
    sys.path.insert(0, os.path.join(SRCDIR, "python"))
    import ember
    os.chmod(d.tmpdir, 0o777)
    data = ("a" * 99 + "\n") * 20000 + "tail" * 10	# no final newline
    path = job_readable(write_file(d.path("cut-page.txt"), data))
    os.chmod(path, 0o666)
    with ember.connect(d.socket) as sc:
        try:
            got = sc.text_file(path, partitions=1).filter_regex("a").map(
                _cut_once(path, len(data), len(data) - 5)).collect()
        except ember.EmberError as e:
            check("the file shrank while it was read" in str(e),
                  "the error: %s" % e)
        else:
            raise AssertionError("the job succeeded; its last record %r"
                                 % got[-1][-12:])


@needs_python
@with_daemon()
def test_text_file_cut_inside_a_block(d):
    """A file cut in the middle of a line of the block being walked fails
    the task cleanly; the worker does not die on the block's lost end."""
    sys.path.insert(0, os.path.join(SRCDIR, "python"))
    import ember
    os.chmod(d.tmpdir, 0o777)
    data = ("a" * 99 + "\n") * 20000
    path = job_readable(write_file(d.path("cut-block.txt"), data))
    os.chmod(path, 0o666)
    with ember.connect(d.socket) as sc:
        try:
            n = sc.text_file(path, partitions=1).filter_regex("a").map(
                _cut_once(path, len(data), 150050)).count()
        except ember.EmberError as e:
            check("the file shrank while it was read" in str(e),
                  "the error: %s" % e)
        else:
            raise AssertionError("the job succeeded: %d records" % n)
        check_eq(sc.range(10, partitions=2).count(), 10, "the next job")

if __name__ == "__main__":
    run_tests(globals())
