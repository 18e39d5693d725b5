"""emberd as a system service: sd_notify, detaching, the pidfile, the unit."""

import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import termios
import time

from harness import *

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def _can_be_nobody():
    """Whether this test can run emberd as nobody (root and setpriv)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        print("SKIP: needs root and setpriv to run emberd as nobody")
        return False
    return True


def _open_tmpdir():
    tmp = tempfile.mkdtemp(prefix="ember-sd-", dir="/tmp")
    # Writable by nobody, as /tmp is: sticky, or emberd would refuse a
    # local directory that anyone could replace.
    os.chmod(tmp, 0o1777)
    return tmp


class Notify:
    """A NOTIFY_SOCKET of our own that records what emberd says."""

    def __init__(self, tmp):
        self.path = os.path.join(tmp, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o777)
        self.sock.settimeout(0.2)
        # The sender of each message, as systemd sees it: by default it
        # takes messages from the process it started alone.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.messages = []
        self.senders = set()

    def _receive(self):
        data, anc, _, _ = self.sock.recvmsg(
            4096, socket.CMSG_SPACE(struct.calcsize("3i")))
        for level, kind, cred in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                self.senders.add(struct.unpack("3i", cred)[0])
        self.messages.append(data.decode())

    def wait_for(self, field, timeout=10):
        """Wait for a message with field (e.g. "READY=1"); return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.messages:
                if field in m.split("\n"):
                    self.messages.remove(m)
                    return m
            try:
                self._receive()
            except socket.timeout:
                pass
        raise AssertionError("no %s in %r" % (field, self.messages))

    def wait_prefix(self, prefix, timeout=10):
        """Wait for a line starting with prefix; return the line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.messages:
                for line in m.split("\n"):
                    if line.startswith(prefix):
                        self.messages.remove(m)
                        return line
            try:
                self._receive()
            except socket.timeout:
                pass
        raise AssertionError("no %s... in %r" % (prefix, self.messages))


def _parent_of(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _workers_of(pid):
    # A worker is a child of a fork-server: its own title may not be set
    # yet when emberd already holds it, so go by the parent.
    servers = [p for p in descendants(pid) if "fork-server" in cmdline(p)]
    return [p for p in descendants(pid) if _parent_of(p) in servers]


def _start(tmp, argv, env=None, nobody=False):
    full = dict(os.environ)
    full.update(env or {})
    log = open(os.path.join(tmp, "emberd.log"), "ab")
    try:
        return subprocess.Popen((NOBODY if nobody else []) + argv,
                                stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log, env=full, start_new_session=True)
    finally:
        log.close()


def _emberd(tmp, *sets, foreground=True):
    argv = [EMBERD] + (["-f"] if foreground else []) + [
        "-c", DEFAULT_CONF, "--set", "daemon.socket=%s/emberd.sock" % tmp]
    for s in sets:
        argv += ["--set", s]
    return argv


@no_daemon
def test_notify_ready_once_the_pool_is_warm(_):
    if not _can_be_nobody():
        return
    tmp = _open_tmpdir()
    n = Notify(tmp)
    p = _start(tmp, _emberd(tmp, "workers.min_idle=2", "workers.max=2"),
               env={"NOTIFY_SOCKET": n.path}, nobody=True)
    try:
        n.wait_for("READY=1")
        # Ready means min_idle workers are up already, not on their way.
        check(len(_workers_of(p.pid)) >= 2, "READY=1 before 2 warm workers:"
              " %r" % _workers_of(p.pid))
        status = n.wait_prefix("STATUS=")
        check("2 worker(s)" in status and "operation(s)" in status,
              "status %r" % status)
        p.send_signal(signal.SIGHUP)
        reload = n.wait_for("RELOADING=1")
        check("MONOTONIC_USEC=" in reload, "reload message %r" % reload)
        n.wait_for("READY=1")
        p.send_signal(signal.SIGTERM)
        n.wait_for("STOPPING=1")
        check_eq(p.wait(15), 0, "exit status")
        # Every message came from the process systemd would have started
        # (emberd runs under it, as it leads its session).
        check_eq(n.senders, {p.pid}, "senders of the notifications")
    finally:
        kill_quietly(p.pid)
        shutil.rmtree(tmp, ignore_errors=True)


@no_daemon
def test_notify_never_ready_when_the_pool_fails(_):
    if not _can_be_nobody():
        return
    tmp = _open_tmpdir()
    n = Notify(tmp)
    p = _start(tmp, _emberd(tmp, "daemon.worker_path=/bin/true"),
               env={"NOTIFY_SOCKET": n.path}, nobody=True)
    try:
        check(p.wait(15) != 0, "emberd without a fork-server exited 0")
        check(not any("READY=1" in m.split("\n") for m in n.messages),
              "READY=1 sent: %r" % n.messages)
    finally:
        kill_quietly(p.pid)
        shutil.rmtree(tmp, ignore_errors=True)


def _children(pid):
    return [p for p, st in process_table().items() if st[2] == pid]


def test_foreground_leader_keeps_emberd_out_of_the_lead(d):
    """Started with -f as a session leader (systemd and this harness start
    it so), emberd runs in the keeper's child, in the same session but not
    leading it, so no terminal can become its own."""
    keeper = d.proc.pid
    check_eq(os.getsid(keeper), keeper, "the harness starts a leader")
    check(d.pid != keeper, "emberd is the process started")
    check_eq(os.getsid(d.pid), keeper, "emberd's session")
    check_eq(_children(keeper), [d.pid], "the keeper's children")
    check_eq(cmdline(keeper), "emberd: keeper", "the keeper's title")
    check(cmdline(d.pid).startswith(EMBERD), "emberd's command line: %r" %
          cmdline(d.pid))
    check_eq(Client(d.socket).status()["pid"], d.pid, "status pid")
    # Signals sent to the keeper reach emberd: SIGHUP reloads it.
    d.signal(signal.SIGHUP)
    check(wait_until(lambda: "SIGHUP: conf reloaded" in d.log_tail(), 10),
          "no reload:\n%s" % d.log_tail())
    check(d.alive(), "the keeper went on SIGHUP")
    # emberd killed under it: the keeper ends the same way.
    d.snapshot()
    d.expect_exit = True
    os.kill(d.pid, signal.SIGKILL)
    check_eq(d.wait(10), -signal.SIGKILL, "the keeper's end")
    # The keeper killed outright: emberd goes with it.
    d.start()
    emberd = d.pid
    d.snapshot()
    d.expect_exit = True
    os.kill(d.proc.pid, signal.SIGKILL)
    check(wait_until(lambda: not is_running(emberd), 10),
          "emberd %d outlived its keeper" % emberd)


@no_daemon
def test_ctrl_c_on_the_keepers_terminal_drains(_):
    """emberd -f leading a terminal's session (tmux new 'exec emberd -f'):
    ^C reaches the keeper and emberd both, as their process group is the
    terminal's.  The keeper must not pass it on as well: a second SIGINT
    would end the drain at once, and the running job with it."""
    tmp = _open_tmpdir()
    master, slave = os.openpty()

    def lead_the_terminal():
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    log = open(os.path.join(tmp, "emberd.log"), "ab")
    p = subprocess.Popen(_emberd(tmp, "daemon.log_level=info"),
                         stdin=slave, stdout=log, stderr=log,
                         preexec_fn=lead_the_terminal, pass_fds=(slave,))
    log.close()
    os.close(slave)
    sock = os.path.join(tmp, "emberd.sock")
    try:
        check(wait_until(lambda: os.path.exists(sock), 10), "no socket")
        c = Client(sock)
        c.execute_ok(records_plan(["a", "b"], 2, ops=[
            {"pipe": {"command": "sleep 1; cat"}}]), "collect")
        os.write(master, b"\x03")
        parts = c.read_stream(False)
        check_eq(sorted(r for part in parts for r in part), [b"a", b"b"],
                 "the job's records after ^C")
        check_eq(p.wait(15), 0, "exit status")
        text = open(os.path.join(tmp, "emberd.log")).read()
        check("SIGINT: draining" in text, "no drain: %r" % text[-2000:])
        check("second SIGINT" not in text, "^C came twice: %r" %
              text[-2000:])
    finally:
        os.close(master)
        kill_quietly(p.pid)
        shutil.rmtree(tmp, ignore_errors=True)


@no_daemon
def _accepts(path):
    """Does emberd accept on path yet?  (The file is there from bind on,
    a moment before listen.)"""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_keeper_passes_on_the_exit_status(_):
    tmp = _open_tmpdir()
    try:
        # A socket path that cannot be bound: emberd exits 1, and so does
        # the keeper, with emberd's message on its standard error.
        p = _start(tmp, _emberd(tmp, "daemon.socket=%s/no/such/s.sock" %
                                tmp))
        check_eq(p.wait(15), 1, "exit status")
        log = open(os.path.join(tmp, "emberd.log")).read()
        check("s.sock" in log, "the error: %r" % log)
        # Not a session leader: no keeper, emberd is the process started.
        log = open(os.path.join(tmp, "emberd.log"), "ab")
        p = subprocess.Popen(_emberd(tmp), stdin=subprocess.DEVNULL,
                             stdout=log, stderr=log, process_group=0)
        log.close()
        try:
            check(wait_until(lambda: _accepts(
                os.path.join(tmp, "emberd.sock")), 10), "no socket")
            check_eq(Client(os.path.join(tmp, "emberd.sock")).status()[
                "pid"], p.pid, "status pid without a keeper")
            p.send_signal(signal.SIGTERM)
            check_eq(p.wait(15), 0, "exit status on SIGTERM")
        finally:
            kill_quietly(p.pid)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _detach(tmp, *sets, nobody=False):
    argv = (NOBODY if nobody else []) + _emberd(tmp, *sets, foreground=False)
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30)


@no_daemon
def test_detach_pidfile_and_chdir(_):
    tmp = _open_tmpdir()
    pidfile = os.path.join(tmp, "emberd.pid")
    r = _detach(tmp, "daemon.pidfile=" + pidfile)
    try:
        check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
        check_eq(r.stderr, "", "stderr of a good start")
        pid = int(open(pidfile).read())
        check(is_running(pid), "pidfile names no running process")
        check_eq(os.readlink("/proc/%d/cwd" % pid), "/", "working directory")
        check(os.getsid(pid) != pid, "emberd is a session leader")
        check_eq(os.readlink("/proc/%d/fd/2" % pid), "/dev/null", "stderr")
        check_eq(Client(os.path.join(tmp, "emberd.sock")).count(
            range_plan(0, 100, 4)), 100, "count")
        # A second one on the same pidfile says who holds it.
        second = _detach(tmp, "daemon.pidfile=" + pidfile,
                         "daemon.socket=%s/other.sock" % tmp)
        check(second.returncode != 0, "a second emberd took the pidfile")
        check("another emberd (pid %d)" % pid in second.stderr,
              "stderr %r" % second.stderr)
        check(not os.path.exists(os.path.join(tmp, "other.sock")),
              "the refused emberd left its socket")
        check(not os.path.exists(os.path.join(tmp, "other.sock.local")),
              "the refused emberd left its local directory")
        os.kill(pid, signal.SIGTERM)
        check(wait_until(lambda: not is_running(pid), 15), "still running")
        check(not os.path.exists(pidfile), "pidfile left behind")
        check(not os.path.exists(os.path.join(tmp, "emberd.sock")),
              "socket left behind")
    finally:
        if os.path.exists(pidfile):
            kill_quietly(int(open(pidfile).read() or 0) or -1)
        shutil.rmtree(tmp, ignore_errors=True)


@no_daemon
def test_detach_default_pidfile_beside_the_socket(_):
    tmp = _open_tmpdir()
    r = _detach(tmp)
    pidfile = os.path.join(tmp, "emberd.sock.pid")
    try:
        check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
        pid = int(open(pidfile).read())
        os.kill(pid, signal.SIGTERM)
        check(wait_until(lambda: not os.path.exists(pidfile), 15),
              "pidfile left behind")
    finally:
        if os.path.exists(pidfile):
            kill_quietly(int(open(pidfile).read() or 0) or -1)
        shutil.rmtree(tmp, ignore_errors=True)


@no_daemon
def test_detach_failures_are_a_message_and_an_exit(_):
    tmp = _open_tmpdir()
    try:
        r = _detach(tmp, "daemon.socket=%s/no/such/dir/s.sock" % tmp)
        check(r.returncode != 0, "exit 0 on a socket it cannot bind")
        check("s.sock" in r.stderr, "stderr %r" % r.stderr)
        r = _detach(tmp, "daemon.worker_path=/nonexistent/ember-worker")
        check(r.returncode != 0, "exit 0 without ember-worker")
        check("/nonexistent/ember-worker" in r.stderr, "stderr %r" % r.stderr)
        check_eq(sorted(os.listdir(tmp)), [], "left behind")
        if not _can_be_nobody():
            return
        # Found only once detached: the fork-server dies before its hello.
        r = _detach(tmp, "daemon.worker_path=/bin/true", nobody=True)
        check(r.returncode != 0, "exit 0 with a fork-server that dies")
        check("fork-server exited" in r.stderr, "stderr %r" % r.stderr)
        check_eq(sorted(os.listdir(tmp)), [], "left behind")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unit_dir():
    return os.path.join(BUILDDIR, "systemd")


@no_daemon
def test_unit_verifies(_):
    unit = os.path.join(_unit_dir(), "emberd.service")
    check(os.path.exists(unit), "%s not built" % unit)
    text = open(unit).read()
    check("Type=notify" in text, "not Type=notify")
    # The users' cgroups are made in the unit's, which must be writable.
    check("\nDelegate=yes\n" in text, "no Delegate=yes")
    check("ProtectControlGroups=yes" not in text,
          "ProtectControlGroups=yes makes the delegated cgroup read-only")
    # The users' shuffle mounts need CAP_SYS_ADMIN, and no namespace:
    # none may be made.
    check("\nRestrictNamespaces=yes\n" in text,
          "RestrictNamespaces is not yes")
    caps = [l for l in text.split("\n")
            if l.startswith("CapabilityBoundingSet=")]
    check(len(caps) == 1 and "CAP_SYS_ADMIN" in caps[0].split(),
          "CapabilityBoundingSet: %r" % caps)
    check("ExecStart=/" in text and "/emberd -f\n" in text,
          "ExecStart: %r" % [l for l in text.split("\n")
                             if l.startswith("ExecStart")])
    if shutil.which("systemd-analyze") is None:
        print("SKIP: systemd-analyze verify: no systemd-analyze")
        return
    # Verify against this build's emberd, wherever ExecStart points.
    tmp = tempfile.mkdtemp(prefix="ember-unit-")
    try:
        copy = os.path.join(tmp, "emberd.service")
        with open(copy, "w") as f:
            for line in text.split("\n"):
                if line.startswith("ExecStart="):
                    line = "ExecStart=%s -f" % EMBERD
                f.write(line + "\n")
        r = subprocess.run(["systemd-analyze", "verify", "--man=no", copy],
                           capture_output=True, text=True, timeout=60)
        bad = [l for l in r.stderr.split("\n")
               if "emberd.service" in l]
        check(r.returncode == 0 and not bad,
              "systemd-analyze verify: %d %r" % (r.returncode, r.stderr))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@no_daemon
def test_tmpfiles_entry(_):
    path = os.path.join(_unit_dir(), "ember.conf")
    check(os.path.exists(path), "%s not built" % path)
    lines = [l.split() for l in open(path) if l.strip() and l[0] != "#"]
    check_eq(lines, [["d", "/run/ember", "0755", "root", "root", "-"],
                     ["d", "/var/lib/ember", "0755", "root", "root", "-"]],
             "tmpfiles entries")
    if shutil.which("systemd-tmpfiles") is None or os.geteuid() != 0:
        print("SKIP: systemd-tmpfiles --create: needs root and the tool")
        return
    root = tempfile.mkdtemp(prefix="ember-tmpfiles-")
    try:
        r = subprocess.run(["systemd-tmpfiles", "--create", "--root", root,
                            path], capture_output=True, text=True,
                           timeout=60)
        check_eq(r.returncode, 0, "systemd-tmpfiles (%r)" % r.stderr)
        st = os.stat(os.path.join(root, "run/ember"))
        check_eq(st.st_mode & 0o7777, 0o755, "mode of /run/ember")
        st = os.stat(os.path.join(root, "var/lib/ember"))
        check_eq(st.st_mode & 0o7777, 0o755, "mode of /var/lib/ember")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
