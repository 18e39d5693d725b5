"""
The integration test harness: starts the real emberd on a private socket,
speaks the client protocol of docs/protocol.md over AF_UNIX, runs the ember
CLI, and runs a file's test_* functions in order under a watchdog.

A test file ends with:

    if __name__ == "__main__":
        run_tests(globals())

Each test function takes one argument: a started Daemon (see with_daemon and
no_daemon to change that).  `make check` sets EMBER_BUILDDIR (where emberd,
ember and ember-worker were built) and EMBER_SRCDIR.

Python 3 standard library only.
"""

import atexit
import json
import os
import pwd
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("EMBER_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
BUILDDIR = os.environ.get("EMBER_BUILDDIR") or SRCDIR
EMBERD = os.path.join(BUILDDIR, "emberd")
EMBER = os.path.join(BUILDDIR, "ember")
EMBER_WORKER = os.path.join(BUILDDIR, "ember-worker")
DEFAULT_CONF = os.path.join(SRCDIR, "conf", "ember.conf")

# Special lengths (docs/protocol.md).
END_OF_DATA_SECTION = -1
EXCEPTION_THROWN = -2
TIMING_DATA = -3
END_OF_STREAM = -4
NULL = -5
PAIR = -7		# a keyed record: key frame, value frame
GROUP = -8		# key frame, int32 n, n value frames

# Result stream responses and requests.
STREAM_DONE = 0
STREAM_PARTITION = 1
STREAM_DETACHED = 2
STREAM_ERROR = -1
REQUEST_STOP = 0
REQUEST_NEXT = 1

FILE_WATCHDOG = 240		# seconds for a whole test file
TEST_TIMEOUT = 120		# seconds for one test
SOCKET_TIMEOUT = 20		# seconds for one socket read or write
START_TIMEOUT = 10		# seconds for emberd to accept connections
STOP_TIMEOUT = 15		# seconds for emberd to exit after SIGTERM


class ProtocolError(AssertionError):
    """emberd sent something the protocol does not allow."""


class RequestFailed(AssertionError):
    """A request got {"ok": false}; carries the error class and message."""

    def __init__(self, reply):
        err = reply.get("error") or {}
        self.reply = reply
        self.error_class = err.get("class")
        self.message = err.get("message", "")
        AssertionError.__init__(self, "%s: %s" % (self.error_class,
                                                 self.message))


class TaskFailed(AssertionError):
    """The result stream ended with an error frame."""

    def __init__(self, status, message, records=None):
        self.status = status
        self.message = message
        self.records = records or []
        AssertionError.__init__(self, "stream error %d: %s" % (status,
                                                              message))


class TestTimeout(BaseException):
    """The watchdog fired."""


# ---------------------------------------------------------------------------
# Processes

def read_stat(pid):
    """Return (comm, state, ppid, pgrp, sid, starttime) of pid, or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    comm = data[data.index("(") + 1:data.rindex(")")]
    fields = data[data.rindex(")") + 2:].split()
    return (comm, fields[0], int(fields[1]), int(fields[2]), int(fields[3]),
            int(fields[19]))


def all_pids():
    """Every pid in /proc."""
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def process_table():
    """Map pid -> read_stat tuple for every live process."""
    table = {}
    for pid in all_pids():
        st = read_stat(pid)
        if st is not None:
            table[pid] = st
    return table


def cmdline(pid):
    """The command line of pid as a string ("" if gone)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8",
                                                        "replace").strip()
    except OSError:
        return ""


def is_running(pid, starttime=None):
    """Is pid alive and not a zombie (and the same process, if starttime)?"""
    st = read_stat(pid)
    if st is None or st[1] in ("Z", "X"):
        return False
    return starttime is None or st[5] == starttime


def descendants(root, table=None):
    """Every pid whose parent chain leads to root."""
    table = table if table is not None else process_table()
    children = {}
    for pid, st in table.items():
        children.setdefault(st[2], []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def ancestors(pid, table=None):
    """The parent chain of pid, pid first, up to pid 1."""
    table = table if table is not None else process_table()
    chain = []
    while pid in table and pid not in chain:
        chain.append(pid)
        pid = table[pid][2]
    return chain


def session_processes(sid):
    """Live (non-zombie) pids in session sid, with their command lines."""
    found = []
    for pid, st in process_table().items():
        if st[4] == sid and st[1] not in ("Z", "X") and pid != os.getpid():
            found.append((pid, cmdline(pid) or st[0]))
    return found


def kill_quietly(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def wait_until(predicate, timeout, interval=0.05):
    """Poll predicate until it returns a true value or timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def status_port(d, timeout=5.0):
    """The port emberd d says its status listener (status.listen on
    127.0.0.1) took."""
    found = []

    def listening():
        m = re.search(r"status: listening on 127\.0\.0\.1:(\d+)",
                      d.log_text())
        if m:
            found.append(int(m.group(1)))
        return bool(found)
    check(wait_until(listening, timeout), "no status listener in the log")
    return found[0]


def wait_steady(value, timeout, settle=0.3, interval=0.05):
    """Poll value() until it has not changed for settle seconds (a flow
    that stopped: a buffer that filled up); that value.  Raise if it still
    changes after timeout."""
    deadline = time.monotonic() + timeout
    last, since = value(), time.monotonic()
    while True:
        time.sleep(interval)
        now, current = time.monotonic(), value()
        if current != last:
            last, since = current, now
        elif now - since >= settle:
            return current
        if now >= deadline:
            raise AssertionError("still changing after %ss: %r" %
                                 (timeout, current))


def check_during(predicate, seconds, message, interval=0.05):
    """Assert that predicate() holds at every poll for seconds: that
    something does not happen too soon."""
    deadline = time.monotonic() + seconds
    while True:
        if not predicate():
            raise AssertionError(message)
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


def assert_no_processes_left(sid, pids=(), timeout=5.0):
    """Assert that, within timeout, no process of session sid is running and
    none of pids (pid, starttime) pairs is either."""
    def leftovers():
        left = session_processes(sid)
        for pid, start in pids:
            if is_running(pid, start) and pid not in [p for p, _ in left]:
                left.append((pid, cmdline(pid)))
        return left
    wait_until(lambda: not leftovers(), timeout)
    left = leftovers()
    if left:
        raise AssertionError("processes left after emberd: %s" % ", ".join(
            "%d (%s)" % (p, c) for p, c in left))


_sanitizers = None


def build_sanitizers():
    """The sanitizers emberd was built with: a set of "address" and
    "undefined", read from the runtime's symbols in the binary, so that it
    holds however the build was configured."""
    global _sanitizers
    if _sanitizers is None:
        try:
            with open(EMBERD, "rb") as f:
                image = f.read()
        except OSError:
            image = b""
        _sanitizers = set()
        if b"__asan_init" in image:
            _sanitizers.add("address")
        if b"__ubsan_handle_" in image:
            _sanitizers.add("undefined")
    return _sanitizers


def status_kb(pid, field):
    """A size of pid's in kB from /proc/PID/status: VmRSS, RssAnon..."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s for pid %d" % (field, pid))


def vm_rss_kb(pid):
    """Resident set size of pid in kB (from /proc/PID/status)."""
    return status_kb(pid, "VmRSS")


# ---------------------------------------------------------------------------
# emberd

_daemons = []		# every Daemon of the running test


def _unescape_mountinfo(field):
    """A mountinfo path with its octal escapes (space, tab, newline,
    backslash) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)),
                  field)


def mounts_under(top):
    """The mount points /proc/self/mountinfo lists under top, deepest
    first."""
    top = os.path.realpath(top).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = _unescape_mountinfo(line.split()[4])
            if point.startswith(top):
                found.append(point)
    return sorted(found, key=lambda p: -p.count("/"))


def unmount_under(top):
    """Unmount (detached) every mount under top, stacked ones too: a
    killed emberd leaves its users' shuffle mounts.  What was found."""
    left = []
    for _ in range(16):
        points = mounts_under(top)
        if not points:
            break
        for point in points:
            left.append(point)
            subprocess.run(["umount", "-l", point], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    return left


def _make_tmpdir():
    """A directory of the test's own whose socket path fits in sun_path.
    Others may read it: as root, emberd runs root's jobs as
    workers.root_user, whose workers read the files a test writes here."""
    tmp = tempfile.mkdtemp(prefix="ember-test-")
    if len(os.path.join(tmp, "emberd.sock")) >= 100:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp = tempfile.mkdtemp(prefix="ember-test-", dir="/tmp")
    os.chmod(tmp, 0o755)
    return tmp


_readable_dir = None


def job_readable(path):
    """path, or when running as root a copy that workers running as
    workers.root_user can read whatever the modes above path are."""
    global _readable_dir
    if os.geteuid() != 0 or not os.path.exists(path):
        return path
    if _readable_dir is None:
        _readable_dir = tempfile.mkdtemp(prefix="ember-test-files-")
        os.chmod(_readable_dir, 0o755)
        atexit.register(shutil.rmtree, _readable_dir, True)
    copy = os.path.join(_readable_dir, os.path.basename(path))
    if not os.path.exists(copy):
        shutil.copy2(path, copy)
        os.chmod(copy, 0o755)
    return copy


def job_writable(path):
    """Make the directory path, one that root's jobs can write into: as
    root, emberd runs them as workers.root_user (nobody), and a save
    writes as the job's user, so the directory is nobody's."""
    os.mkdir(path)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("nobody")
        os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


def _nofile_preexec(nofile):
    def preexec():
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    return preexec


class Daemon:
    """emberd on a socket of its own, in a session of its own.

    Daemon(sets=["workers.max=1"], nofile=1024).  Use as a context manager,
    or let the test runner clean it up.
    """

    def __init__(self, sets=(), nofile=None, conf=DEFAULT_CONF, args=(),
                 socket_path=None, log_level="debug", start=True, env=None):
        self.tmpdir = _make_tmpdir()
        self.socket = socket_path or os.path.join(self.tmpdir, "emberd.sock")
        self.log_path = os.path.join(self.tmpdir, "emberd.log")
        self.sets = list(sets)
        self.nofile = nofile
        self.conf = conf
        self.args = list(args)
        self.log_level = log_level
        self.env = env		# added to emberd's environment
        self.proc = None
        self.sid = None
        self.emberd_pid = None
        self.known = {}		# pid -> starttime of every descendant seen
        self.expect_exit = False
        self.keep = False
        _daemons.append(self)
        if start:
            self.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup(failed=exc[0] is not None)
        return False

    @property
    def pid(self):
        """emberd's own pid: started as a session leader (as systemd and
        this harness start it), emberd runs in the child of a keeper."""
        return self.emberd_pid or self.proc.pid

    def argv(self):
        """emberd's command line."""
        argv = [EMBERD, "-f"]
        if self.conf is not None:
            argv += ["-c", self.conf]
        argv += ["--set", "daemon.socket=" + self.socket]
        argv += ["--set", "checkpoint.dir=" +
                 os.path.join(self.tmpdir, "checkpoints")]
        if self.log_level is not None:
            argv += ["--set", "daemon.log_level=" + self.log_level]
        for s in self.sets:
            argv += ["--set", s]
        return argv + self.args

    def start(self):
        """Start emberd and wait until its socket accepts."""
        log = open(self.log_path, "ab")
        preexec = _nofile_preexec(self.nofile) if self.nofile else None
        env = None
        if self.env:
            env = dict(os.environ)
            env.update(self.env)
        try:
            self.proc = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=log,
                stderr=log, start_new_session=True, preexec_fn=preexec,
                cwd=self.tmpdir, env=env)
        finally:
            log.close()
        self.sid = self.proc.pid
        # A fresh emberd is expected to live, whatever ended the last one.
        self.expect_exit = False
        self.wait_ready()
        self.emberd_pid = self._find_emberd()
        self.snapshot()

    def _find_emberd(self):
        """The keeper's one child, which serves the socket by now."""
        if os.getsid(self.proc.pid) != self.proc.pid:
            return None
        table = process_table()
        kids = [p for p, st in table.items() if st[2] == self.proc.pid]
        if len(kids) != 1:
            raise AssertionError("emberd's keeper %d has children %r" %
                                 (self.proc.pid, kids))
        return kids[0]

    def wait_ready(self, timeout=START_TIMEOUT):
        """Wait until the socket accepts a connection."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(
                    "emberd exited with %s before accepting:\n%s" %
                    (self.proc.returncode, self.log_tail()))
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.socket)
                break
            except OSError:
                pass
            finally:
                s.close()
            if time.monotonic() >= deadline:
                raise AssertionError("emberd did not accept on %s in %ds:\n%s"
                                     % (self.socket, timeout,
                                        self.log_tail()))
            time.sleep(0.02)
        # The socket takes connections before the start is done: where the
        # log says so, wait for its "ready" line, so that a test reads
        # every line the start writes.
        if self.log_level in ("info", "debug"):
            while (" ready on " not in self.log_text() and
                   time.monotonic() < deadline and self.proc.poll() is None):
                time.sleep(0.01)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def snapshot(self):
        """Record every current descendant, to find it again later."""
        if not self.alive():
            return []
        table = process_table()
        pids = descendants(self.proc.pid, table)
        for pid in pids:
            self.known.setdefault(pid, table[pid][5])
        return pids

    def forkserver_pid(self, timeout=5.0):
        """The fork-server: emberd's child running ember-worker."""
        def find():
            table = process_table()
            for pid, st in table.items():
                if st[2] == self.pid and st[1] not in ("Z", "X"):
                    return pid
            return None
        pid = wait_until(find, timeout)
        if pid is None:
            raise AssertionError("no fork-server under emberd %d" %
                                 self.pid)
        return pid

    def worker_pids(self):
        """The live workers: children of the fork-server."""
        table = process_table()
        fs = [p for p, st in table.items()
              if st[2] == self.pid and st[1] not in ("Z", "X")]
        return [p for p, st in table.items()
                if st[2] in fs and st[1] not in ("Z", "X")]

    def worker_running(self, needle, timeout=10.0):
        """The worker whose descendant's command line contains needle."""
        def find():
            table = process_table()
            for pid in descendants(self.proc.pid, table):
                if needle in cmdline(pid):
                    chain = ancestors(pid, table)
                    if self.pid in chain:
                        i = chain.index(self.pid)
                        if i >= 2:
                            return chain[i - 2]
            return None
        pid = wait_until(find, timeout)
        if pid is None:
            raise AssertionError("no worker running %r" % needle)
        self.snapshot()
        return pid

    def rss_kb(self):
        return vm_rss_kb(self.pid)

    def signal(self, sig):
        """Send sig to emberd; any but SIGHUP is expected to end it.  It
        goes to the process started, which passes it on when it is a
        keeper, but for SIGKILL, which goes to emberd itself: the keeper
        then ends only after emberd is gone, as a restart needs."""
        self.snapshot()
        if sig != signal.SIGHUP:
            self.expect_exit = True
        os.kill(self.pid if sig == signal.SIGKILL else self.proc.pid, sig)

    def wait(self, timeout=STOP_TIMEOUT):
        """Wait for emberd to exit; its exit code (negative: signal)."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("emberd %d still running after %ss:\n%s" %
                                 (self.pid, timeout, self.log_tail()))
        # A keeper killed outright takes emberd with it, a moment later.
        if self.emberd_pid is not None and not wait_until(
                lambda: not is_running(self.emberd_pid), timeout):
            raise AssertionError("emberd %d outlived its keeper" %
                                 self.emberd_pid)
        return code

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, wait, then SIGKILL; return the exit code."""
        if self.proc is None:
            return None
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                return self.wait(timeout)
            except AssertionError:
                self.proc.kill()
        return self.wait()

    def kill_leftovers(self):
        """SIGKILL whatever of this emberd still runs; return what it was."""
        left = []
        if self.sid is not None:
            left += session_processes(self.sid)
        for pid, start in self.known.items():
            if is_running(pid, start) and pid not in [p for p, _ in left]:
                left.append((pid, cmdline(pid)))
        for pid, _ in left:
            kill_quietly(pid)
        return left

    def cleanup(self, failed=False):
        """Stop emberd, kill leftovers; remove the directory unless kept."""
        if self.proc is not None:
            self.stop()
        left = self.kill_leftovers()
        if left:
            print("note: killed processes left by emberd: %s" % ", ".join(
                "%d (%s)" % (p, c) for p, c in left))
        # Before the directory goes, and kept or not: no mount of a test
        # outlives it on the machine.
        mounts = []
        for top in sorted({self.tmpdir, self.socket + ".local"}):
            if os.path.isdir(top):
                mounts += unmount_under(top)
        if mounts:
            print("note: unmounted what emberd left: %s" % ", ".join(mounts))
        if self in _daemons:
            _daemons.remove(self)
        if failed or self.keep:
            print("logs kept in %s" % self.tmpdir)
        else:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def sanitizer_reports(self):
        """The lines of the log where a sanitizer reported an error."""
        markers = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                   "runtime error:", "WARNING: ThreadSanitizer")
        return [l for l in self.log_text().splitlines()
                if any(m in l for m in markers)]

    def log_tail(self, lines=40):
        return "\n".join(self.log_text().splitlines()[-lines:])

    def client(self, **kw):
        return Client(self.socket, **kw)

    def cli(self, args, **kw):
        return run_cli(args, socket_path=self.socket, **kw)

    def path(self, name):
        """A path inside the daemon's private directory."""
        return os.path.join(self.tmpdir, name)


def run_emberd(args, timeout=10, conf=DEFAULT_CONF):
    """Run emberd to completion (for option and conf errors)."""
    argv = [EMBERD] + (["-c", conf] if conf is not None else []) + list(args)
    return subprocess.run(argv, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------------------
# The client protocol

class Client:
    """A raw client of emberd's socket (docs/protocol.md section 1)."""

    def __init__(self, path, timeout=SOCKET_TIMEOUT, hello=True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = bytearray()
        self.session = None
        self.partitions = None		# of the last execute
        if hello:
            reply = self.hello()
            if not reply.get("ok"):
                raise RequestFailed(reply)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def close_abruptly(self):
        """Close with a reset, as a crashed client would."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()

    # Bytes.

    def send(self, data):
        self.sock.sendall(data)

    def recv_exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ProtocolError("connection closed after %d of %d bytes"
                                    % (len(self.buf), n))
            self.buf += chunk
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def recv_some(self, n):
        """Read up to n bytes (b"" at end of file)."""
        if self.buf:
            data = bytes(self.buf[:n])
            del self.buf[:n]
            return data
        return self.sock.recv(n)

    def at_eof(self, timeout=5.0):
        """Does the peer close the connection within timeout (after any
        bytes it still sends)?"""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            while True:
                if self.sock.recv(65536) == b"":
                    return True
        except socket.timeout:
            return False
        except OSError:
            return True
        finally:
            self.sock.settimeout(old)

    # Integers and frames.

    def read_int(self):
        return struct.unpack(">i", self.recv_exact(4))[0]

    def write_int(self, n):
        self.send(struct.pack(">i", n))

    def send_frame(self, data):
        self.send(struct.pack(">i", len(data)) + data)

    def recv_frame(self):
        n = self.read_int()
        if n < 0:
            raise ProtocolError("expected a frame, got length %d" % n)
        return self.recv_exact(n)

    # Control frames.

    def send_json(self, obj):
        self.send_frame(json.dumps(obj).encode())

    def recv_json(self):
        data = self.recv_frame()
        try:
            obj = json.loads(data.decode("utf-8"))
        except ValueError as e:
            raise ProtocolError("reply is not JSON (%s): %r" % (e, data[:200]))
        if not isinstance(obj, dict) or not isinstance(obj.get("ok"), bool):
            raise ProtocolError("reply is not {\"ok\": bool, ...}: %r" % obj)
        if not obj["ok"]:
            err = obj.get("error")
            if (not isinstance(err, dict) or
                    not isinstance(err.get("class"), str) or
                    not isinstance(err.get("message"), str)):
                raise ProtocolError("error reply without class and message: "
                                    "%r" % obj)
        return obj

    def request(self, obj):
        """Send one control request; return its reply."""
        self.send_json(obj)
        return self.recv_json()

    def request_ok(self, obj):
        """request(), raising RequestFailed on {"ok": false}."""
        reply = self.request(obj)
        if not reply["ok"]:
            raise RequestFailed(reply)
        return reply

    def hello(self, version=1, **fields):
        reply = self.request(dict(op="hello", version=version, **fields))
        if reply["ok"]:
            self.session = reply.get("session")
        return reply

    def status(self):
        return self.request_ok({"op": "status"})

    def execute(self, plan, action, options=None, operation=None):
        """Send execute; return the reply (the stream follows if ok)."""
        req = {"op": "execute", "plan": plan, "action": action}
        if options is not None:
            req["options"] = options
        if operation is not None:
            req["operation"] = operation
        reply = self.request(req)
        if reply["ok"]:
            self.partitions = reply.get("partitions")
        return reply

    def execute_ok(self, plan, action, options=None):
        reply = self.execute(plan, action, options)
        if not reply["ok"]:
            raise RequestFailed(reply)
        if not isinstance(reply.get("operation"), str):
            raise ProtocolError("execute reply without operation: %r" % reply)
        if not isinstance(reply.get("partitions"), int):
            raise ProtocolError("execute reply without partitions: %r" % reply)
        return reply

    # The result stream (section 2.2).

    def read_value(self):
        """A key's value frame: bytes, or None for NULL."""
        n = self.read_int()
        if n == NULL:
            return None
        if n < 0:
            raise ProtocolError("a value of length %d" % n)
        return self.recv_exact(n)

    def read_record(self):
        """One record: bytes, None for NULL, a (key, value) pair, a
        (key, [values]) group, or a special length int."""
        n = self.read_int()
        if n >= 0:
            return self.recv_exact(n)
        if n == NULL:
            return None
        if n == PAIR:
            return (self.recv_exact(self.read_int()), self.read_value())
        if n == GROUP:
            key = self.recv_exact(self.read_int())
            return (key, [self.read_value() for _ in range(self.read_int())])
        return n

    def read_error_frame(self):
        return self.recv_frame().decode("utf-8", "replace")

    def read_partition(self):
        """Read one response of the result stream.

        Returns (status, payload):
          (1, [records])                 a whole partition
          (0, None)                      the stream is complete
          (-1, message)                  a failure before the partition's data
          (-2, (records, message))       a failure after some records
          (2, None)                      detached
        """
        r = self.read_int()
        if r == STREAM_DONE or r == STREAM_DETACHED:
            return (r, None)
        if r == STREAM_ERROR:
            return (r, self.read_error_frame())
        if r != STREAM_PARTITION:
            raise ProtocolError("unexpected stream response %d" % r)
        records = []
        while True:
            rec = self.read_record()
            if rec == END_OF_DATA_SECTION:
                return (STREAM_PARTITION, records)
            if rec == EXCEPTION_THROWN:
                return (EXCEPTION_THROWN, (records, self.read_error_frame()))
            if isinstance(rec, int):
                raise ProtocolError("unexpected length %d in a partition "
                                    "after %d records" % (rec, len(records)))
            records.append(rec)

    def read_stream(self, pull):
        """Read partitions until 0; return the list of partitions."""
        parts = []
        while True:
            if pull:
                self.write_int(REQUEST_NEXT)
            status, payload = self.read_partition()
            if status == STREAM_DONE:
                break
            if status == STREAM_PARTITION:
                parts.append(payload)
                continue
            if status == EXCEPTION_THROWN:
                raise TaskFailed(status, payload[1], payload[0])
            if status == STREAM_ERROR:
                raise TaskFailed(status, payload)
            raise ProtocolError("unexpected stream status %d" % status)
        if self.partitions is not None and len(parts) != self.partitions:
            raise ProtocolError("execute said %d partitions, stream had %d"
                                % (self.partitions, len(parts)))
        return parts

    def iterate_partitions(self, plan, options=None):
        self.execute_ok(plan, "iterate", options)
        return self.read_stream(pull=True)

    def collect_partitions(self, plan, options=None):
        self.execute_ok(plan, "collect", options)
        return self.read_stream(pull=False)

    def iterate_all(self, plan, options=None):
        """Every record of plan, by the iterate action."""
        return [r for p in self.iterate_partitions(plan, options) for r in p]

    def collect_all(self, plan, options=None):
        """Every record of plan, by the collect action."""
        return [r for p in self.collect_partitions(plan, options) for r in p]

    def count(self, plan, options=None):
        reply = self.execute_ok(plan, "count", options)
        if not isinstance(reply.get("count"), int):
            raise ProtocolError("count reply without count: %r" % reply)
        return reply["count"]

    # Broadcasts.

    def broadcast_put_request(self, data, chunk=65536, index=None):
        """Send broadcast_put for data, its bytes as raw frames of at most
        chunk bytes (and "index" when not None); return the reply."""
        req = {"op": "broadcast_put", "size": len(data)}
        if index is not None:
            req["index"] = index
        self.send_json(req)
        for i in range(0, len(data), max(1, chunk)):
            self.send_frame(data[i:i + chunk])
        return self.recv_json()

    def broadcast_put(self, data, chunk=65536):
        """Upload data as a broadcast; return its id."""
        reply = self.broadcast_put_request(data, chunk)
        if not reply["ok"]:
            raise RequestFailed(reply)
        if not isinstance(reply.get("broadcast"), int):
            raise ProtocolError("broadcast_put reply without broadcast: %r"
                                % reply)
        if reply.get("size") != len(data):
            raise ProtocolError("broadcast_put reply says size %r, sent %d"
                                % (reply.get("size"), len(data)))
        return reply["broadcast"]

    def broadcast_put_fd(self, fd):
        """Send broadcast_put with "fd": true, the descriptor passed with the
        request (SCM_RIGHTS); return the reply."""
        body = json.dumps({"op": "broadcast_put", "fd": True}).encode()
        socket.send_fds(self.sock, [struct.pack(">i", len(body)) + body],
                        [fd])
        return self.recv_json()

    def broadcast_drop(self, bid):
        """Send broadcast_drop; return the reply."""
        return self.request({"op": "broadcast_drop", "broadcast": bid})


# ---------------------------------------------------------------------------
# The CLI

def run_cli(args, socket_path=None, input=None, timeout=60, env=None):
    """Run ember [--socket PATH] ARGS; returns a CompletedProcess with text
    stdout and stderr."""
    argv = [EMBER]
    if socket_path is not None:
        argv += ["--socket", socket_path]
    argv += list(args)
    full_env = dict(os.environ)
    full_env.pop("EMBER_SOCKET", None)
    if env:
        full_env.update(env)
    return subprocess.run(argv, input=input, capture_output=True, text=True,
                          timeout=timeout, env=full_env,
                          stdin=None if input is not None
                          else subprocess.DEVNULL)


# ---------------------------------------------------------------------------
# Plans and small helpers

def range_plan(start, end, partitions, step=None, ops=None):
    r = {"start": start, "end": end}
    if step is not None:
        r["step"] = step
    plan = {"source": {"range": r}, "partitions": partitions}
    if ops:
        plan["ops"] = ops
    return plan


def records_plan(records, partitions, ops=None):
    plan = {"source": {"parallelize": {"records": records}},
            "partitions": partitions}
    if ops:
        plan["ops"] = ops
    return plan


def text_plan(paths, partitions=None, ops=None):
    plan = {"source": {"text": {"paths": list(paths)}}}
    if partitions is not None:
        plan["partitions"] = partitions
    if ops:
        plan["ops"] = ops
    return plan


def numbers(*args):
    """range(*args) as the records emberd sends: decimal text."""
    return [str(i).encode() for i in range(*args)]


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return path


def check(cond, message="check failed"):
    if not cond:
        raise AssertionError(message)


def check_eq(got, want, what="value"):
    if got != want:
        g, w = repr(got), repr(want)
        if len(g) > 400:
            g = g[:400] + "..."
        if len(w) > 400:
            w = w[:400] + "..."
        raise AssertionError("%s: got %s, want %s" % (what, g, w))


def check_error(reply, error_class, *needles):
    """Assert reply is an error of error_class whose message has needles."""
    if reply.get("ok") is not False:
        raise AssertionError("expected %s, got %r" % (error_class, reply))
    err = reply["error"]
    check_eq(err["class"], error_class, "error class (message: %r)" %
             err.get("message"))
    for n in needles:
        check(n in err["message"], "error message %r lacks %r" %
              (err["message"], n))
    return err["message"]


def in_thread(fn, *args):
    """Run fn(*args) in a thread; join() returns (result, exception)."""
    box = {}

    def run():
        try:
            box["result"] = fn(*args)
        except BaseException as e:	# reported by the caller
            box["error"] = e
            box["trace"] = traceback.format_exc()
    t = threading.Thread(target=run, daemon=True)
    t.start()

    def join(timeout=60):
        t.join(timeout)
        if t.is_alive():
            raise AssertionError("thread still running after %ss" % timeout)
        if "error" in box:
            raise AssertionError("in thread: %s" % box["trace"])
        return box.get("result")
    return join


# ---------------------------------------------------------------------------
# The runner

def with_daemon(**kwargs):
    """Decorate a test to get a Daemon(**kwargs) instead of the default."""
    def mark(fn):
        fn.daemon_kwargs = kwargs
        return fn
    return mark


def no_daemon(fn):
    """Decorate a test that starts its own daemons (it gets None)."""
    fn.daemon_kwargs = None
    return fn


def skip_with_sanitizer(sanitizer, why):
    """Decorate a test that cannot hold in a build with sanitizer ("address"
    or "undefined"): there it is skipped, and says why."""
    def mark(fn):
        fn.skip_with = (sanitizer, why)
        return fn
    return mark


def skip_unless(condition, why):
    """Decorate a test that needs what this machine may lack (a program,
    say): without it, the test is skipped and says why."""
    def mark(fn):
        if not condition:
            fn.skip_why = why
        return fn
    return mark


def _worker_has_python():
    # The python ops are a module beside ember-worker (worker/pyload.c).
    return os.path.exists(os.path.join(os.path.dirname(EMBER_WORKER),
                                       "ember-worker-python.so"))


def _have_cloudpickle():
    try:
        import cloudpickle  # noqa: F401
        return True
    except ImportError:
        return False


# Python ops need both: an ember-worker that embeds Python, and cloudpickle
# in the client's Python to send the functions.
WORKER_HAS_PYTHON = _worker_has_python()
HAVE_CLOUDPICKLE = _have_cloudpickle()


def with_lingering_workers(*sets):
    """A daemon whose workers stay on after emberd closed their socket
    (linger.so, preloaded into emberd and, through workers.env, them)."""
    linger = job_readable(os.path.join(BUILDDIR, "tests", "integration",
                                       "linger.so"))
    return with_daemon(
        sets=list(sets) + ["workers.env=LD_PRELOAD ASAN_OPTIONS"],
        env={"LD_PRELOAD": linger,
             "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
             ":verify_asan_link_order=0"})


def needs_python(fn):
    """Decorate a test that runs Python functions: skipped, saying which of
    the two is missing, when this build or this python3 cannot."""
    if not WORKER_HAS_PYTHON:
        fn.skip_why = ("ember-worker was built without Python "
                       "(./configure --without-python)")
    elif not HAVE_CLOUDPICKLE:
        fn.skip_why = "the client's Python has no cloudpickle"
    return fn


def skip_reason(fn):
    """Why fn cannot run in this build, or None."""
    if getattr(fn, "skip_why", None) is not None:
        return fn.skip_why
    sanitizer, why = getattr(fn, "skip_with", (None, None))
    if sanitizer is not None and sanitizer in build_sanitizers():
        return "built with -fsanitize=%s: %s" % (sanitizer, why)
    return None


def _alarm_cb(signum, frame):
    raise TestTimeout()


def _tests_of(module_globals):
    return [(name, fn) for name, fn in module_globals.items()
            if name.startswith("test_") and callable(fn)]


def _report_failure(name, trace):
    print("FAIL %s" % name)
    print(trace.rstrip())
    for d in list(_daemons):
        print("--- emberd %s log tail (%s):" %
              (d.pid if d.proc else "-", d.log_path))
        print(d.log_tail())
        print("---")


def _run_body(fn, kwargs, deadline):
    """Start the test's daemon and run the test; None, or why it failed."""
    signal.alarm(max(1, int(min(TEST_TIMEOUT, deadline - time.monotonic()))))
    try:
        d = Daemon(**kwargs) if kwargs is not None else None
        fn(d)
        for daemon in _daemons:
            if not daemon.expect_exit and not daemon.alive():
                raise AssertionError("emberd %d died during the test "
                                     "(exit status %s)" %
                                     (daemon.pid,
                                      daemon.proc.returncode))
        return None
    except TestTimeout:
        return "timed out after %ds (watchdog)" % TEST_TIMEOUT
    except BaseException:
        return traceback.format_exc()
    finally:
        signal.alarm(0)


def _stop_daemons():
    """Stop the test's daemons; None, or the sanitizer reports found in
    their logs."""
    problems = []
    for daemon in list(_daemons):
        if daemon.proc is None:
            continue
        expected = daemon.expect_exit
        if not expected and not daemon.alive():
            problems.append("emberd %d died during the test (exit status "
                            "%s)" % (daemon.pid, daemon.proc.returncode))
            expected = True
        try:
            code = daemon.stop()
        except BaseException:
            problems.append(traceback.format_exc())
            code = 0
        if not expected and code != 0:
            problems.append("emberd %d exited with status %s on SIGTERM" %
                            (daemon.pid, code))
        reports = daemon.sanitizer_reports()
        if reports:
            problems.append("emberd %d's log has sanitizer reports:\n%s" %
                            (daemon.pid, "\n".join(reports)))
    return "\n".join(problems) or None


def _run_one(name, fn, deadline):
    """Run one test; True if it passed, None if it was skipped."""
    reason = skip_reason(fn)
    if reason is not None:
        print("SKIP %s: %s" % (name, reason))
        sys.stdout.flush()
        return None
    trace = _run_body(fn, getattr(fn, "daemon_kwargs", {}), deadline)
    stopped = _stop_daemons()
    if trace is None:
        trace = stopped
    if trace is not None:
        _report_failure(name, trace)
    for daemon in list(_daemons):
        try:
            daemon.cleanup(failed=trace is not None)
        except BaseException:
            traceback.print_exc()
    if trace is None:
        print("PASS %s" % name)
    sys.stdout.flush()
    return trace is None


def run_tests(module_globals, watchdog=FILE_WATCHDOG):
    """Run the test_* functions of a module in order; exit 0 if all
    passed, 1 otherwise."""
    for prog in (EMBERD, EMBER, EMBER_WORKER):
        if not os.access(prog, os.X_OK):
            print("FAIL setup: %s is not built" % prog)
            print("0 passed, 1 failed")
            sys.exit(1)
    signal.signal(signal.SIGALRM, _alarm_cb)
    deadline = time.monotonic() + watchdog
    only = sys.argv[1:]
    passed = failed = skipped = 0
    for name, fn in _tests_of(module_globals):
        if only and name not in only:
            continue
        if time.monotonic() >= deadline:
            print("FAIL %s (not run: the file's %ds are up)" %
                  (name, watchdog))
            failed += 1
            continue
        ok = _run_one(name, fn, deadline)
        if ok is None:
            skipped += 1
        elif ok:
            passed += 1
        else:
            failed += 1
    if skipped:
        print("%d skipped" % skipped)
    print("%d passed, %d failed" % (passed, failed))
    sys.stdout.flush()
    sys.exit(0 if failed == 0 else 1)
