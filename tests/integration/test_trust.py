"""
emberd never acts on a path a client named with its own rights.

Run as root (as CI does), these tests run emberd as root and attack it as
two unprivileged users of their own (removed at the end): through the
errors of a text source's glob and open (listing a root-only directory,
learning whether a root-only file exists), with a udf library the user
cannot read, with a terminal named as a text path, with checks so slow
they would freeze a daemon that ran them itself.  The file work runs in a
helper that the user's fork-server forks, as the user, off emberd's loop;
these tests also check that helpers are bounded, timed out and cancelled.
Not root, each test says why it does nothing.
"""

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403
from users import *	# noqa: E402,F403

SHARED = ["daemon.socket_mode=0666", "workers.max=2"]
PLUGIN = os.path.join(BUILDDIR, "examples", "udf_example.so")
# Deep enough that a glob of it never ends: every level has four links
# back to itself.
LOOP_DEPTH = 12


def error_of(reply):
    """(class, message) of an error reply, or None."""
    if reply.get("ok") is not False:
        return None
    return (reply["error"]["class"], reply["error"]["message"])


def execute_as(d, tag, plan, action="count", options=None):
    """The reply to one execute of plan by user tag."""
    def run():
        with d.client() as c:
            return c.execute(plan, action, options)
    return as_user(tag, run)


def private_dir(d, name="private"):
    """A root-only directory holding secret.txt."""
    path = d.path(name)
    os.mkdir(path, 0o700)
    write_file(os.path.join(path, "secret.txt"), "root's secret\n")
    return path


def loop_dir(d):
    """A directory whose four entries all lead back to it, and a glob of
    it that would take hours: 4^LOOP_DEPTH directories to read."""
    path = d.path("loop")
    os.mkdir(path, 0o755)
    for name in "abcd":
        os.symlink(".", os.path.join(path, name))
    return path, path + "/*" * LOOP_DEPTH + "/x"


def helpers(d, uid=None):
    """Pids of the helpers under emberd, of uid if given."""
    found = []
    for pid in descendants(d.pid):
        try:
            if "ember-worker: helper" not in cmdline(pid):
                continue
            if uid is not None and os.stat("/proc/%d" % pid).st_uid != uid:
                continue
        except OSError:
            continue
        found.append(pid)
    return found


def helpers_held(d, uid):
    """What status says uid holds of daemon.max_helpers_per_uid."""
    with d.client() as c:
        users = c.status()["limits"]["users"]
    for u in users:
        if u["uid"] == uid:
            return u["limits"]["daemon.max_helpers_per_uid"]["used"]
    return 0


class StatusWatch:
    """Time root's status round trips, one after another, until stopped."""

    def __init__(self, d):
        self.client = d.client()
        self.worst = 0.0
        self.count = 0
        self.running = True
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while self.running:
                start = time.monotonic()
                self.client.status()
                self.worst = max(self.worst, time.monotonic() - start)
                self.count += 1
                time.sleep(0.01)
        except BaseException as e:	# noqa: B902
            self.error = e

    def stop(self):
        self.running = False
        self.thread.join(30)
        self.client.close()
        check(self.error is None, "status failed: %r" % self.error)
        check(self.count > 0, "no status round trip completed")
        return self.worst


# ---------------------------------------------------------------------------
# What a user learns through errors

@needs_users
@with_daemon(sets=SHARED)
def test_root_only_file_looks_as_it_does_to_the_user(d):
    """A root-only file and a missing one in a root-only directory give
    user a the same error: permission denied, the error the user's own
    open gives; nothing tells them the file exists."""
    private = private_dir(d)
    there = execute_as(d, "a", text_plan([private + "/secret.txt"]))
    missing = execute_as(d, "a", text_plan([private + "/nosuch.txt"]))
    for reply, name in ((there, "secret.txt"), (missing, "nosuch.txt")):
        err = error_of(reply)
        check(err is not None, "the plan of %s was accepted" % name)
        check_eq(err[0], "PLAN_INVALID", "class for %s (%r)" % (name, err))
        check("Permission denied" in err[1], "message %r" % err[1])
    check_eq(error_of(there)[1].replace("secret", "X"),
             error_of(missing)[1].replace("nosuch", "X"),
             "the errors for a file there and a missing one")


@needs_users
@with_daemon(sets=SHARED)
def test_glob_cannot_list_a_root_only_directory(d):
    """A glob into a root-only directory matches nothing for user a, as
    it would for the user's own shell: no file name comes back."""
    private = private_dir(d)
    for pattern in ("/*", "/s*", "/*.txt", "/[s]*"):
        err = error_of(execute_as(d, "a", text_plan([private + pattern])))
        check(err is not None, "the glob %s was accepted" % pattern)
        check_eq(err[0], "PLAN_INVALID", "class (%r)" % (err,))
        check("secret.txt" not in err[1], "the error names the file: %r" %
              err[1])
        check("no file matches" in err[1], "message %r" % err[1])


@needs_users
@with_daemon(sets=SHARED)
def test_udf_library_the_user_cannot_read(d):
    """A udf library readable by root alone is refused for user a, with
    the user's own error; a copy the user can read is accepted."""
    private = private_dir(d)
    hidden = os.path.join(private, "udf.so")
    shutil.copy(PLUGIN, hidden)
    os.chmod(hidden, 0o600)
    shared = d.path("udf.so")
    shutil.copy(PLUGIN, shared)
    os.chmod(shared, 0o644)

    def plan(lib):
        return range_plan(0, 10, 2, ops=[{"udf": {"library": lib,
                                                  "symbol": "udf_wordlen"}}])
    err = error_of(execute_as(d, "a", plan(hidden)))
    check(err is not None, "a library the user cannot read was accepted")
    check_eq(err[0], "PLAN_INVALID", "class (%r)" % (err,))
    check(err[1].startswith("plan.ops[0].udf.library: ") and
          "Permission denied" in err[1], "message %r" % err[1])
    reply = execute_as(d, "a", plan(shared))
    check(reply.get("ok") is True, "the user's own library: %r" % reply)
    check_eq(reply.get("count"), 10, "count")


# ---------------------------------------------------------------------------
# Helpers: off the loop, bounded, cancelled

@needs_users
@with_daemon(sets=SHARED)
def test_deep_glob_does_not_freeze_others(d):
    """User a's deep globs (the one of /usr, and one that never ends)
    run outside emberd's loop: root's status round trips stay under
    0.5 s all along, and user b's job is served meanwhile."""
    _, endless = loop_dir(d)
    b_file = write_file(d.path("b.txt"), "one\ntwo\n")
    os.chmod(b_file, 0o644)
    watch = StatusWatch(d)

    def attack(ctl):
        with d.client() as c1, d.client() as c2:
            c1.send_json({"op": "execute", "action": "count", "plan":
                          text_plan(["/usr" + "/*" * 10 + "/x"])})
            c2.send_json({"op": "execute", "action": "count", "plan":
                          text_plan([endless])})
            ctl.ready()
            ctl.wait_go()
            return error_of(c1.recv_json())
    a = AsUser(USERS["a"], attack)
    try:
        a.wait_ready()
        wait_until(lambda: len(helpers(d, USERS["a"][0])) >= 1, 10)
        start = time.monotonic()
        counted = as_user("b", lambda: d.client().count(text_plan([b_file])))
        check_eq(counted, 2, "user b's count")
        # (Its fork-server and worker start meanwhile: seconds under the
        # load of a whole suite, never the glob's minutes.)
        check(time.monotonic() - start < 5.0, "user b waited %.2fs" %
              (time.monotonic() - start))
        time.sleep(1.0)
        a.go()
        err = a.result()
    finally:
        a.close()
    worst = watch.stop()
    print("worst status round trip during the globs: %.3fs" % worst)
    check(worst < 0.5, "status took %.3fs during the globs" % worst)
    check(err is not None and err[0] == "PLAN_INVALID", "the /usr glob: %r"
          % (err,))


@needs_users
@with_daemon(sets=SHARED)
def test_helper_cancelled_when_the_client_leaves(d):
    """A client that goes away while its plan is checked leaves nothing
    behind: the helper is killed and no longer counted."""
    _, endless = loop_dir(d)
    uid = USERS["a"][0]

    def attack(ctl):
        c = d.client()
        c.send_json({"op": "execute", "action": "count", "plan":
                     text_plan([endless])})
        ctl.ready()
        ctl.wait_go()
        c.close_abruptly()
    a = AsUser(USERS["a"], attack)
    try:
        a.wait_ready()
        wait_until(lambda: len(helpers(d, uid)) == 1, 10)
        check_eq(helpers_held(d, uid), 1, "helpers held while it runs")
        a.go()
        a.result()
    finally:
        a.close()
    check(wait_until(lambda: not helpers(d, uid), 5),
          "the helper outlived its client: %r" % helpers(d, uid))
    check(wait_until(lambda: helpers_held(d, uid) == 0, 5),
          "the helper is still counted")


@needs_users
@with_daemon(sets=SHARED + ["daemon.helper_timeout=500ms"])
def test_helper_timeout(d):
    """A check that takes longer than daemon.helper_timeout is refused,
    naming the key, and its helper killed."""
    _, endless = loop_dir(d)
    start = time.monotonic()
    err = error_of(execute_as(d, "a", text_plan([endless])))
    took = time.monotonic() - start
    check(err is not None, "an endless glob was accepted")
    check_eq(err[0], "LIMIT_EXCEEDED", "class (%r)" % (err,))
    check(err[1].startswith("plan: ") and "daemon.helper_timeout is 500ms"
          in err[1], "message %r" % err[1])
    check(took < 5, "the refusal took %.2fs" % took)
    check(wait_until(lambda: not helpers(d), 5), "the helper lives on")


@needs_users
@with_daemon(sets=SHARED + ["daemon.helper_timeout=1s"])
def test_connection_busy_while_the_plan_is_checked(d):
    """While its plan is checked, the connection reads no other request:
    a status sent right behind the execute is answered after it, in
    order."""
    _, endless = loop_dir(d)

    def run():
        with d.client() as c:
            c.send_json({"op": "execute", "action": "count", "plan":
                         text_plan([endless])})
            c.send_json({"op": "status"})
            first = c.recv_json()
            second = c.recv_json()
            return [error_of(first), second.get("ok"), "workers" in second]
    first, ok, is_status = as_user("a", run)
    check(first is not None and first[0] == "LIMIT_EXCEEDED",
          "the first reply is the execute's: %r" % (first,))
    check(ok is True and is_status, "the second reply is the status")


@with_daemon(sets=SHARED + ["daemon.helper_timeout=1s",
                            "daemon.shutdown_grace=30s"])
def test_drain_does_not_wait_for_a_refused_check(d):
    """SIGTERM while a plan is checked: once the check ends (here its
    timeout), the drain has nothing left to wait for and emberd exits,
    long before the grace period."""
    _, endless = loop_dir(d)
    c = d.client()
    c.send_json({"op": "execute", "action": "count", "plan":
                 text_plan([endless])})
    check(wait_until(lambda: len(helpers(d)) == 1, 10), "no helper")
    start = time.monotonic()
    d.signal(signal.SIGTERM)
    err = error_of(c.recv_json())
    check(err is not None and err[0] in ("LIMIT_EXCEEDED", "SHUTTING_DOWN"),
          "the execute's reply: %r" % (err,))
    check_eq(d.wait(15), 0, "exit status")
    took = time.monotonic() - start
    check(took < 10, "emberd took %.1fs to drain" % took)


@with_daemon(sets=SHARED + ["daemon.helper_timeout=60s",
                            "daemon.shutdown_grace=1s"])
def test_grace_over_while_a_plan_is_checked(d):
    """The grace ends while a helper still checks a plan: the client is
    told SHUTTING_DOWN, not left with a bare end of file, the helper is
    stopped, and emberd exits."""
    _, endless = loop_dir(d)
    c = d.client()
    c.send_json({"op": "execute", "action": "count", "plan":
                 text_plan([endless])})
    check(wait_until(lambda: len(helpers(d)) == 1, 10), "no helper")
    [helper] = helpers(d)
    d.signal(signal.SIGTERM)
    err = error_of(c.recv_json())
    check(err is not None and err[0] == "SHUTTING_DOWN",
          "the execute's reply: %r" % (err,))
    check_eq(d.wait(15), 0, "exit status")
    check(wait_until(lambda: not os.path.exists("/proc/%d" % helper), 5),
          "the helper outlived emberd")


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_helpers_per_uid=1"])
def test_helpers_bounded_per_uid(d):
    """User a has one helper at most; a second check is refused naming
    daemon.max_helpers_per_uid, while user b is served."""
    _, endless = loop_dir(d)
    b_file = write_file(d.path("b.txt"), "one\n")
    os.chmod(b_file, 0o644)
    uid = USERS["a"][0]

    def attack(ctl):
        with d.client() as c1:
            c1.send_json({"op": "execute", "action": "count", "plan":
                          text_plan([endless])})
            ctl.ready()
            ctl.wait_go()
            with d.client() as c2:
                return error_of(c2.execute(text_plan([endless]), "count"))
    a = AsUser(USERS["a"], attack)
    try:
        a.wait_ready()
        wait_until(lambda: len(helpers(d, uid)) == 1, 10)
        a.go()
        err = a.result()
    finally:
        a.close()
    check(err is not None and err[0] == "LIMIT_EXCEEDED" and
          err[1].startswith("daemon.max_helpers_per_uid is 1"),
          "the second check: %r" % (err,))
    counted = as_user("b", lambda: d.client().count(text_plan([b_file])))
    check_eq(counted, 1, "user b's count")


def tty_nr(pid):
    """The controlling terminal of pid (field 7 of /proc/PID/stat), 0 for
    none."""
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2:].split()[4])


@needs_users
@with_daemon(sets=SHARED)
def test_pty_as_a_text_path(d):
    """User a names a terminal of their own as a text path, then types
    ^\\ and ^C on it: the plan is refused (not a regular file), the
    terminal became nobody's controlling one, and emberd and the
    fork-servers live on.  Started with -f as a session leader, as here,
    emberd runs under a keeper and leads no session: even an open without
    O_NOCTTY could not make a terminal its own."""
    fs_before = None

    def attack(ctl):
        master, slave = os.openpty()
        name = os.ttyname(slave)
        with d.client() as c:
            reply = c.execute(text_plan([name]), "count")
            # A glob that matches the terminal alone.
            glob_reply = c.execute(text_plan([name[:-1] + "[" + name[-1] +
                                              "]"]), "count")
        ctl.ready(name)
        ctl.wait_go()
        os.write(master, b"\x1c\x03\x1a")
        time.sleep(0.5)
        return [error_of(reply), error_of(glob_reply)]
    a = AsUser(USERS["a"], attack)
    try:
        name = a.wait_ready()
        fs_before = sorted(fs for fs in descendants(d.pid)
                           if "fork-server" in cmdline(fs))
        # Nothing of emberd's took the terminal: not emberd, not a
        # fork-server, helper or worker.
        check(os.getsid(d.pid) != d.pid, "emberd leads its session")
        for pid in [d.proc.pid, d.pid] + list(descendants(d.pid)):
            try:
                check_eq(tty_nr(pid), 0, "the terminal of %s %d" %
                         (cmdline(pid), pid))
            except OSError:
                pass		# gone meanwhile
        a.go()
        errs = a.result()
    finally:
        a.close()
    for err in errs:
        check(err is not None and err[0] == "PLAN_INVALID" and
              "not a regular file" in err[1], "the pty's plan: %r" % (err,))
    check(d.alive(), "emberd died of the terminal %s" % name)
    for pid in fs_before:
        check(is_running(pid), "fork-server %d died" % pid)
    with d.client() as c:
        check_eq(c.count(range_plan(0, 5, 1)), 5, "a job after the attack")


# ---------------------------------------------------------------------------
# Broadcasts by descriptor

def user_dir(d, tag, name):
    """A directory of user tag's own under the daemon's."""
    path = d.path(name)
    os.mkdir(path, 0o700)
    os.chown(path, USERS[tag][0], USERS[tag][1])
    return path


@needs_users
@with_daemon(sets=SHARED)
def test_broadcast_by_descriptor_is_read_as_the_user(d):
    """A descriptor that does not let user a read the file (O_PATH, or
    write-only) is refused; a descriptor user a can read works, and the
    job filters with those bytes."""
    secret = write_file(d.path("secret.txt"), "root\nonly\n")
    os.chmod(secret, 0o600)
    mine = user_dir(d, "a", "a-files")

    def attack():
        out = {}
        with d.client() as c:
            fd = os.open(secret, os.O_PATH)
            out["o_path"] = error_of(c.broadcast_put_fd(fd))
            os.close(fd)
            own = os.path.join(mine, "wo.txt")
            fd = os.open(own, os.O_WRONLY | os.O_CREAT, 0o200)
            os.write(fd, b"3\n")
            out["write_only"] = error_of(c.broadcast_put_fd(fd))
            os.close(fd)
            own = os.path.join(mine, "keep.txt")
            with open(own, "w") as f:
                f.write("3\n5\n")
            fd = os.open(own, os.O_RDONLY)
            reply = c.broadcast_put_fd(fd)
            os.close(fd)
            out["own"] = reply
            out["kept"] = c.collect_all(range_plan(0, 10, 2, ops=[
                {"filter": {"in_broadcast": reply["broadcast"]}}]))
        return [out["o_path"], out["write_only"], out["own"],
                [r.decode() for r in out["kept"]]]
    o_path, write_only, own, kept = as_user("a", attack)
    for what, err in (("an O_PATH descriptor", o_path),
                      ("a write-only descriptor", write_only)):
        check(err is not None, "%s was accepted" % what)
        check(err[1].startswith("broadcast_put: fd: ") and
              "not open for reading" in err[1] or "Bad file" in err[1],
              "%s: %r" % (what, err))
    check(own.get("ok") is True and own.get("size") == 4,
          "the user's own file: %r" % own)
    check_eq(kept, ["3", "5"], "records kept by the user's broadcast")


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_broadcast=3m",
                            "daemon.max_broadcast_bytes_per_uid=1m"])
def test_broadcast_by_descriptor_within_the_limits(d):
    """What a helper copies is bounded as bytes sent in frames are: over
    the uid's broadcast bytes is LIMIT_EXCEEDED naming the key, over
    daemon.max_broadcast is refused naming it, and nothing is kept."""
    mine = user_dir(d, "a", "a-files")

    def put():
        out = []
        with d.client() as c:
            for size in (2 << 20, 4 << 20):
                path = os.path.join(mine, "f%d" % size)
                with open(path, "wb") as f:
                    f.write(b"x" * size)
                fd = os.open(path, os.O_RDONLY)
                out.append(error_of(c.broadcast_put_fd(fd)))
                os.close(fd)
            out.append(c.status()["limits"]["users"][0]["limits"]
                       ["daemon.max_broadcast_bytes_per_uid"]["used"])
        return out
    per_uid, too_big, held = as_user("a", put)
    check(per_uid is not None and per_uid[0] == "LIMIT_EXCEEDED" and
          per_uid[1].startswith("daemon.max_broadcast_bytes_per_uid is "
                                "1048576"), "2 MiB: %r" % (per_uid,))
    check(too_big is not None and "daemon.max_broadcast" in too_big[1],
          "4 MiB: %r" % (too_big,))
    check_eq(held, 0, "broadcast bytes held after the refusals")


@needs_users
@with_daemon(sets=SHARED)
def test_big_broadcast_by_descriptor_does_not_freeze_others(d):
    """User a puts a 1 GiB file as a broadcast by descriptor: it is read
    off emberd's loop, as the user, and root's status round trips stay
    under 0.5 s all along."""
    mine = user_dir(d, "a", "a-files")
    size = 1 << 30
    watch = None

    def put(ctl):
        path = os.path.join(mine, "big")
        with open(path, "wb") as f:
            # Real bytes, not a hole, so the copy costs what it would.
            block = (b"%015d\n" % 7) * (1 << 16)	# 1 MiB
            for _ in range(size // len(block)):
                f.write(block)
        fd = os.open(path, os.O_RDONLY)
        with d.client() as c:
            ctl.ready()
            ctl.wait_go()
            start = time.monotonic()
            reply = c.broadcast_put_fd(fd)
            took = time.monotonic() - start
            os.close(fd)
            if reply.get("ok"):
                c.broadcast_drop(reply["broadcast"])
        os.unlink(path)
        return [reply, took]
    a = AsUser(USERS["a"], put, timeout=200)
    try:
        a.wait_ready()
        watch = StatusWatch(d)
        a.go()
        reply, took = a.result()
    finally:
        a.close()
    worst = watch.stop()
    print("1 GiB broadcast by descriptor: %.2fs; worst status round trip "
          "meanwhile %.3fs" % (took, worst))
    check(reply.get("ok") is True and reply.get("size") == size,
          "the put: %r" % reply)
    check(worst < 0.5, "status took %.3fs during the put" % worst)


def lingering_socket():
    """A TCP socket whose last close waits for up to an hour: SO_LINGER
    set, its send buffer full, its peer (returned too, and to be kept
    open) reading nothing."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    s.connect(server.getsockname())
    peer, _ = server.accept()
    server.close()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    try:
        while True:
            s.send(b"x" * 65536)
    except BlockingIOError:
        pass
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                 struct.pack("ii", 1, 3600))
    return s, peer


@needs_users
@with_daemon(sets=SHARED)
def test_lingering_socket_passed_does_not_freeze(d):
    """User a passes emberd lingering sockets (lingering_socket), each
    its only holder: with a hello, which takes none, kept until the
    connection ends; and ten on one frame, more than a connection keeps.
    emberd closes them off its loop: root's status round trips stay
    under 0.5 s while user a keeps the peers open, not reading."""
    watch = None

    def attack(ctl):
        peers = []
        s, peer = lingering_socket()
        peers.append(peer)
        c = Client(d.socket, hello=False)
        hello = json.dumps({"op": "hello", "version": 1}).encode()
        socket.send_fds(c.sock, [struct.pack(">i", len(hello)) + hello],
                        [s.fileno()])
        s.close()
        check(c.recv_json()["ok"], "the hello")
        many = [lingering_socket() for _ in range(10)]
        peers += [p for _, p in many]
        socket.send_fds(c.sock, [struct.pack(">i", 16) + b'{"op": "status"}'],
                        [m.fileno() for m, _ in many])
        for m, _ in many:
            m.close()
        c.recv_json()
        ctl.ready()
        ctl.wait_go()
        c.close()		# emberd closes the one it kept
        time.sleep(3)
        return len(peers)
    a = AsUser(USERS["a"], attack, timeout=60)
    try:
        a.wait_ready()
        watch = StatusWatch(d)
        a.go()
        a.result()
    finally:
        a.close()
        if watch is not None:
            worst = watch.stop()
    print("worst status round trip while the sockets linger: %.3fs" % worst)
    check(worst < 0.5, "status took %.3fs: emberd waited on a close" % worst)


def open_fds(pid):
    """How many descriptors pid holds."""
    return len(os.listdir("/proc/%d/fd" % pid))


def _attack_then_connections(d, attack, n, then=None):
    """Run attack as user a; once it is ready (its connection gone), n
    connections that come and go must leave emberd holding no descriptor
    more than before them; then then(), if given, while a's peers stay
    open."""
    a = AsUser(USERS["a"], attack, timeout=60)
    try:
        a.wait_ready()
        time.sleep(1)		# emberd sees a's connection end
        start = open_fds(d.pid)
        for _ in range(n):
            with d.client(timeout=5):
                pass
        check(wait_until(lambda: open_fds(d.pid) <= start, 5.0),
              "emberd holds %d descriptors, %d before the %d connections" %
              (open_fds(d.pid), start, n))
        if then is not None:
            then()
        a.go()
        a.result()
    finally:
        a.close()


@needs_users
@with_daemon(sets=SHARED)
def test_lingering_socket_in_flight_does_not_hold_the_closer(d):
    """User a's connection is busy (a plan whose glob never ends is being
    checked), so emberd reads no more of it than its read-ahead: a sends
    that much and more, then a lingering socket (lingering_socket), and
    leaves.  The socket is still in flight in emberd's end of the
    connection when it is closed, whose close would release it and wait;
    drained first, it waits for nothing, and the 50 connections that
    come and go after hold no descriptor of emberd's."""
    _, pattern = loop_dir(d)

    def attack(ctl):
        s, peer = lingering_socket()
        c = Client(d.socket)
        c.send_json({"op": "execute", "action": "count",
                     "plan": text_plan([pattern])})
        time.sleep(0.5)
        # Twice emberd's read-ahead (64 KiB), well within what the
        # socket queues (208 KiB): the socket sent after it stays in
        # flight.  Sent without waiting: a Unix socket polls writable
        # only while a quarter of that is queued, which emberd, busy,
        # may never bring it back to.
        c.sock.setblocking(False)
        for _ in range(8):
            check_eq(c.sock.send(b"\0" * 16384), 16384, "bytes sent")
        socket.send_fds(c.sock, [b"x"], [s.fileno()])
        c.sock.setblocking(True)
        s.close()
        c.close()
        ctl.ready()
        ctl.wait_go()
        return peer.fileno()
    _attack_then_connections(d, attack, 50)


# ---------------------------------------------------------------------------
# emberd's local directory

def start_refused(socket_path, what, sets=()):
    """Run emberd -f on socket_path (and sets); it must refuse to start.
    Its stderr."""
    args = ["-f", "--set", "daemon.socket=" + socket_path,
            "--set", "daemon.log_level=info"]
    for kv in sets:
        args += ["--set", kv]
    try:
        r = run_emberd(args, timeout=5)
    except subprocess.TimeoutExpired:
        raise AssertionError("emberd started with %s" % what)
    check(r.returncode != 0, "emberd exited 0 with %s" % what)
    return r.stderr


@no_daemon
def test_squatted_local_dir(_):
    """User a makes <socket>.local first, in a world-writable (sticky)
    directory, and plants broadcast-N links to a file of root's: emberd
    refuses to start, naming daemon.local_dir and the owner, and neither
    the links nor their target are touched."""
    if not ROOT:
        print("skip test_squatted_local_dir: needs root to create users")
        return
    make_users()
    top = tempfile.mkdtemp(prefix="ember-trust-")
    try:
        pub = os.path.join(top, "pub")
        os.mkdir(pub)
        os.chmod(top, 0o755)
        os.chmod(pub, 0o1777)
        victim = os.path.join(top, "victim")
        write_file(victim, "root's own\n")
        os.chmod(victim, 0o644)
        sock = os.path.join(pub, "emberd.sock")

        def squat():
            os.mkdir(sock + ".local", 0o777)
            os.chmod(sock + ".local", 0o777)
            for i in range(4):
                os.symlink(victim, os.path.join(sock + ".local",
                                                "broadcast-%d" % i))
        as_user("a", squat)
        err = start_refused(sock, "a squatted local directory")
        check("daemon.local_dir" in err and "owned by uid %d" %
              USERS["a"][0] in err, "emberd's error: %r" % err)
        st = os.stat(victim)
        check_eq((st.st_uid, st.st_size), (0, len("root's own\n")),
                 "the victim's owner and size")
        with open(victim) as f:
            check_eq(f.read(), "root's own\n", "the victim")
        check_eq(sorted(os.listdir(sock + ".local")),
                 ["broadcast-%d" % i for i in range(4)], "the planted links")
        # Root's own directory with loose permissions is refused too.
        mine = os.path.join(top, "mine.sock")
        os.mkdir(mine + ".local", 0o755)
        os.chmod(mine + ".local", 0o755)
        err = start_refused(mine, "a local directory of mode 0755")
        check("daemon.local_dir" in err and "0755" in err,
              "emberd's error: %r" % err)
        # So is a link, even to a good directory.
        good = os.path.join(top, "good")
        os.mkdir(good, 0o700)
        link = os.path.join(top, "link.sock")
        os.symlink(good, link + ".local")
        err = start_refused(link, "a local directory that is a link")
        check("symbolic link" in err, "emberd's error: %r" % err)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@no_daemon
def test_local_dir_under_a_writable_parent(_):
    """A local directory whose parent anyone may write (without the
    sticky bit) is refused: anyone could replace it."""
    top = tempfile.mkdtemp(prefix="ember-trust-")
    try:
        pub = os.path.join(top, "pub")
        os.mkdir(pub)
        os.chmod(top, 0o755)
        os.chmod(pub, 0o777)
        local = os.path.join(pub, "emberd.local")
        err = start_refused(os.path.join(top, "emberd.sock"),
                            "a world-writable parent",
                            ["daemon.local_dir=" + local])
        check("daemon.local_dir" in err and "sticky" in err,
              "emberd's error: %r" % err)
        check(not os.path.exists(local), "the local directory was made")
    finally:
        shutil.rmtree(top, ignore_errors=True)


@no_daemon
def test_socket_directory_others_may_write(_):
    """A socket (daemon.socket, or status.listen's) in a directory that
    others may write without the sticky bit, or that a user owns, is
    refused, naming the key: whoever writes there could replace it."""
    if not ROOT:
        print("skip test_socket_directory_others_may_write: needs root")
        return
    make_users()
    top = tempfile.mkdtemp(prefix="ember-trust-")
    try:
        os.chmod(top, 0o755)
        local = os.path.join(top, "emberd.local")
        pub = os.path.join(top, "pub")
        os.mkdir(pub)
        os.chmod(pub, 0o777)
        sock = os.path.join(pub, "emberd.sock")
        err = start_refused(sock, "a world-writable socket directory",
                            ["daemon.local_dir=" + local])
        check("daemon.socket" in err and pub in err and "writable" in err,
              "emberd's error: %r" % err)
        check(not os.path.exists(sock), "the socket was made")
        users = os.path.join(top, "users")
        os.mkdir(users, 0o755)
        os.chown(users, USERS["a"][0], USERS["a"][1])
        err = start_refused(os.path.join(users, "emberd.sock"),
                            "a socket directory a user owns",
                            ["daemon.local_dir=" + local])
        check("daemon.socket" in err and "owned by uid %d" %
              USERS["a"][0] in err, "emberd's error: %r" % err)
        err = start_refused(os.path.join(top, "emberd.sock"),
                            "a status socket in a world-writable directory",
                            ["daemon.local_dir=" + local, "status.listen=" +
                             os.path.join(pub, "status.sock")])
        check("status.listen" in err and "writable" in err,
              "emberd's error: %r" % err)
        check(not os.path.exists(os.path.join(pub, "status.sock")),
              "the status socket was made")
    finally:
        shutil.rmtree(top, ignore_errors=True)


@no_daemon
def test_socket_modes_without_chmod(_):
    """The sockets have their modes from the start (no chmod after bind
    that a rename could redirect): daemon.socket_mode, and 0666 for the
    status socket."""
    d = Daemon(start=False)
    status = d.path("status.sock")
    d.sets = ["daemon.socket_mode=0620", "status.listen=" + status]
    d.start()
    check_eq(oct(os.stat(d.socket).st_mode & 0o777), oct(0o620),
             "daemon.socket's mode")
    check_eq(oct(os.stat(status).st_mode & 0o777), oct(0o666),
             "the status socket's mode")
    d.stop()
    d.cleanup()


def _status_get(path, sock=None):
    """GET /metrics on the status socket at path: the status line."""
    s = sock or socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    if sock is None:
        s.connect(path)
    s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    return out.split(b"\r\n", 1)[0].decode(errors="replace")


@no_daemon
def test_status_listener_caps_each_peer(_):
    """User a's flood of connections to the status socket is held to
    status.max_connections_per_peer: its oldest are closed, and b's
    connection, opened before the flood, is answered."""
    if not ROOT:
        print("skip test_status_listener_caps_each_peer: needs root")
        return
    make_users()
    d = Daemon(start=False)
    os.chmod(d.tmpdir, 0o755)
    path = d.path("status.sock")
    d.sets = ["status.listen=" + path, "status.max_connections=8",
              "status.max_connections_per_peer=4"]
    d.start()

    def b_waits(ctl):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        ctl.ready()
        ctl.wait_go()
        return _status_get(path, s)

    def a_floods():
        socks = []
        for _ in range(20):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            socks.append(s)

        def closed(s):
            s.settimeout(0.05)
            try:
                return s.recv(1) == b""
            except socket.timeout:
                return False
            except OSError:
                return True
        wait_until(lambda: sum(closed(s) for s in socks) >= 16, 5)
        n = sum(closed(s) for s in socks)
        for s in socks:
            s.close()
        return n

    b = AsUser(USERS["b"], b_waits)
    try:
        b.wait_ready()
        closed = as_user("a", a_floods)
        b.go()
        line = b.result()
    finally:
        b.close()
    check_eq(closed, 16, "a's connections closed past its cap of 4")
    check(line.endswith("200 OK"), "b's request on its older connection: "
          "%r" % line)
    d.stop()
    d.cleanup()


@no_daemon
def test_local_dir_made_private(_):
    """The local directory emberd makes is its own, mode 0711, and goes
    at exit."""
    with Daemon(sets=["daemon.log_level=info"]) as d:
        # The socket accepts before the start is over; a reply is after.
        with d.client() as c:
            c.status()
        st = os.lstat(d.socket + ".local")
        check_eq((st.st_uid, oct(st.st_mode & 0o7777)),
                 (os.geteuid(), "0o711"), "owner and mode")
        d.stop()
    check(not os.path.exists(d.socket + ".local"), "left behind")


# ---------------------------------------------------------------------------
# Relative paths

@with_daemon(sets=SHARED)
def test_relative_paths_refused(d):
    """emberd resolves nothing against its own working directory: a
    relative text path or udf library is refused, naming the field."""
    c = d.client()
    check_error(c.execute(text_plan(["etc/passwd"]), "count"),
                "PLAN_INVALID", "plan.source.text.paths[0]",
                "not an absolute path")
    check_error(c.execute(text_plan(["/etc/hostname", "*.txt"]), "count"),
                "PLAN_INVALID", "plan.source.text.paths[1]",
                "not an absolute path")
    check_error(c.execute(range_plan(0, 4, 2, ops=[{"udf": {
        "library": "udf_example.so", "symbol": "udf_wordlen"}}]), "count"),
        "PLAN_INVALID", "plan.ops[0].udf.library", "not an absolute path")
    check_error(c.execute(range_plan(0, 4, 2), "save",
                          {"path": "out/dir"}),
                "ACTION_INVALID", "options.path", "absolute")
    check_eq(c.count(range_plan(0, 4, 2)), 4, "the next job")


@with_daemon(sets=SHARED)
def test_cli_makes_paths_absolute(d):
    """The CLI sends its relative paths made absolute against its own
    working directory, wherever emberd runs."""
    work = d.path("work")
    os.mkdir(work)
    write_file(os.path.join(work, "a.txt"), "1\n2\n3\n")
    plan = write_file(os.path.join(work, "plan.json"), json.dumps(
        text_plan(["a.txt"])))
    here = os.getcwd()
    os.chdir(work)
    try:
        r = run_cli(["run", "--count", "plan.json"], d.socket)
    finally:
        os.chdir(here)
    check_eq(r.returncode, 0, "ember's exit status (stderr %r)" % r.stderr)
    check_eq(r.stdout.strip(), "3", "the count")


@with_daemon()
def test_shuffle_dir_planted_link(d):
    """The operation id is the client's to choose, and the uid's shuffle
    directory is the user's: a link planted where an operation's
    directory goes, to another directory of the user's, is refused.  The
    workers make and open it themselves (mkdirat, then O_NOFOLLOW and
    O_DIRECTORY): nothing is written through the link, and nothing behind
    it is removed when the operation is cleaned up."""
    c = d.client()
    plan = records_plan(["a,1", "b,2", "a,3"], 2, ops=[
        {"key_by": {"field": {"sep": ",", "index": 0}}},
        {"group_by_key": {}}])
    check_eq(len(c.collect_all(plan)), 2, "a first staged job")
    # A stream holds the uid's directory, which may be a mount that goes
    # with the uid's last operation in stages.
    held = d.client()
    held.execute_ok(records_plan(["%05d" % i for i in range(5000)], 4,
                                 ops=[{"sort_by": {}}]), "iterate",
                    {"prefetch": 0})
    held.write_int(REQUEST_NEXT)
    check_eq(held.read_partition()[0], STREAM_PARTITION, "the held stream")
    base = _shuffle_base(d)
    check(os.path.isdir(base), "no shuffle directory %s" % base)
    target = job_writable(d.path("elsewhere"))
    write_file(os.path.join(target, "keep"), b"mine")
    opid = "0f4c1d7e-5a0b-4c8e-9f3a-2b6d8e1c7a90"
    os.symlink(target, os.path.join(base, opid))
    reply = c.execute(plan, "collect", operation=opid)
    if reply["ok"]:
        status, message = c.read_partition()
        check_eq(status, STREAM_ERROR, "the stream of the planted job")
    else:
        message = reply["error"]["message"]
    check("symbolic links" in message or "Not a directory" in message,
          "the error says why: %r" % message)
    check_eq(sorted(os.listdir(target)), ["keep"],
             "nothing written through the link")
    with open(os.path.join(target, "keep"), "rb") as f:
        check_eq(f.read(), b"mine", "what the link points to")
    check_eq(len(c.collect_all(plan)), 2, "the next job")
    held.close()


def _shuffle_base(d):
    """The uid's shuffle directory (its mount, where emberd can)."""
    return os.path.join(d.socket + ".local", "shuffle", str(os.getuid()))


def _map_file_forgeries(real, secret):
    """What a user's code may leave where a map task's shuffle file goes
    (docs/protocol.md, "Shuffle files"), each with a word the reduce
    task's reason must hold: bytes that are no file, a file cut short,
    one byte flipped (whose entry or block then fails), a first entry
    claiming a 2 GiB key, a footer claiming a million buckets, a FIFO, a
    link to a root-only file."""
    middle = len(real) // 2
    flipped = real[:middle] + bytes([real[middle] ^ 0x40]) + real[middle + 1:]
    huge = real[:1] + b"\x7f\xff\xff\xff" + real[5:]
    # The trailer: buckets, flags, table offset, CRC, magic.
    lying = real[:-28] + (1000000).to_bytes(4, "big") + real[-24:]
    return [
        ("garbage", b"\xa5" * 4096, ("footer",)),
        ("empty", b"", ("footer",)),
        ("truncated", real[:middle], ("footer",)),
        ("flipped", flipped, ("CRC", "entry")),
        ("a 2 GiB key", huge, ("runs past its",)),
        ("a million buckets", lying, ("footer CRC",)),
        ("a FIFO", None, ("footer",)),
        ("a link", secret, ("symbolic links",)),
    ]


def _sort_forging(d, plan, forge):
    """Iterate plan (prefetch 0), calling forge with the path of map task
    2's shuffle file once partition 0 is read: the records."""
    base = _shuffle_base(d)
    with d.client() as c:
        op = c.execute_ok(plan, "iterate", {"prefetch": 0})["operation"]
        got = []
        for p in range(4):
            if p == 1:
                forge(os.path.join(base, op, "s0-m2.data"))
            c.write_int(REQUEST_NEXT)
            status, part = c.read_partition()
            check_eq(status, STREAM_PARTITION, "partition %d" % p)
            got += part
        c.write_int(REQUEST_NEXT)
        check_eq(c.read_int(), 0, "the end")
    return got


@with_daemon(sets=["workers.max=2"])
def test_forged_map_files_are_lost_not_read(d):
    """A map task's shuffle file is the job user's, and the user's code
    may replace it with anything before a reduce task reads it.  The
    reader (common/shuffle_file.c) bounds every length by the file's
    bytes and checks every CRC: each forgery is a SHUFFLE_LOST naming
    why, the map task runs again, and the sort comes out whole.  No
    worker crashes, blocks on a FIFO, or reads through a link."""
    words = ["%05d" % ((i * 7919) % 20000) for i in range(20000)]
    want = sorted(w.encode() for w in words)
    secret = os.path.join(private_dir(d), "secret.txt")
    plan = records_plan(words, 4, ops=[{"sort_by": {}}])
    real = []

    def keep(path):
        with open(path, "rb") as f:
            real.append(f.read())
    check_eq(_sort_forging(d, plan, keep), want, "the sort")
    for n, (what, forged, why) in enumerate(
            _map_file_forgeries(real[0], secret)):
        def forge(path):
            os.unlink(path)
            if forged is None:
                os.mkfifo(path, 0o666)
            elif isinstance(forged, str):
                os.symlink(forged, path)
            else:
                write_file(path, forged)
        check_eq(_sort_forging(d, plan, forge), want,
                 "the sort, after %s" % what)
        lost = re.findall(r"SHUFFLE_LOST stage 0 map 2: shuffle file "
                          r"s0-m2\.data: ([^;\n]*); running map task 2 of "
                          r"stage 0 again", d.log_text())
        check_eq(len(lost), n + 1, "map task 2 ran again for %s" % what)
        check(any(w in lost[-1] for w in why),
              "%s: the reason %r says one of %r" % (what, lost[-1], why))
    check("signal" not in d.log_text(), "no worker killed by a signal")

def _hello_with(sock, fds):
    """Say hello on sock with fds, which a hello takes none of."""
    hello = json.dumps({"op": "hello", "version": 1}).encode()
    socket.send_fds(sock, [struct.pack(">i", len(hello)) + hello], fds)


def _passed_socket_holds_nothing(d, make):
    """User a passes emberd, with a hello, a Unix socket that make(s)
    returns, in which a lingering socket s (lingering_socket) is in
    flight, and leaves; the closer must take s out and close it without
    waiting, so that 200 connections that come and go after it leave no
    descriptor of emberd's open and root's status is answered at once."""
    def attack(ctl):
        s, peer = lingering_socket()
        x = make(s)
        s.close()
        c = Client(d.socket, hello=False)
        _hello_with(c.sock, [x.fileno()])
        x.close()
        c.recv_json()
        c.close()
        ctl.ready()
        ctl.wait_go()
        return peer.fileno()
    def status_at_once():
        t0 = time.monotonic()
        with d.client(timeout=5) as c:
            c.status()
        check(time.monotonic() - t0 < 1, "root's status took %.2f s" %
              (time.monotonic() - t0))
    _attack_then_connections(d, attack, 200, status_at_once)


@needs_users
@with_daemon(sets=SHARED)
def test_empty_datagram_does_not_end_the_drain(d):
    """A datagram socket whose queue starts with an empty datagram, the
    lingering socket in flight behind it."""
    def make(s):
        x, y = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        y.send(b"")
        socket.send_fds(y, [b"x"], [s.fileno()])
        y.close()
        return x
    _passed_socket_holds_nothing(d, make)


@needs_users
@with_daemon(sets=SHARED)
def test_credentials_do_not_crowd_out_the_drain(d):
    """A socket set to pass credentials, 253 descriptors in flight in one
    message, the last the lingering socket: credentials read with them
    would leave no room for it, and the kernel would close it itself."""
    def make(s):
        x, y = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        x.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        r, w = os.pipe()
        socket.send_fds(y, [b"x"], [r] * 252 + [s.fileno()])
        os.close(r)
        os.close(w)
        y.close()
        return x
    _passed_socket_holds_nothing(d, make)


@needs_users
@with_daemon(sets=SHARED)
def test_listener_connections_are_drained(d):
    """A listening Unix socket whose connection, not accepted, holds the
    lingering socket in flight."""
    def make(s):
        path = "/tmp/ember-listen-%d" % os.getpid()
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(5)
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(path)
        socket.send_fds(conn, [b"x"], [s.fileno()])
        conn.close()
        os.unlink(path)
        return listener
    _passed_socket_holds_nothing(d, make)


if __name__ == "__main__":
    run_tests(globals())
