"""
Users of a test's own, for tests that attack emberd as one local user and
check that another is unharmed.

Run as root, make_users() creates two unprivileged system users, "a" and
"b", named after the test process (so that concurrent runs do not clash),
and removes them when the process exits; users a killed run left behind
are removed first.  needs_users skips a test, saying why, when not root.
AsUser runs a function in a child that became the user for good.
"""

import atexit
import json
import os
import pwd
import re
import signal
import subprocess
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, kill_quietly	# noqa: E402

ROOT = os.geteuid() == 0
USER_PREFIX = "emtst"
USERS = {}		# "a", "b" -> (uid, gid, name)

__all__ = ["ROOT", "USERS", "make_users", "needs_users", "AsUser", "as_user"]



def _userdel(name):
    subprocess.run(["userdel", name], capture_output=True)


def _remove_stale_users():
    """Users a killed run of this file left behind."""
    pattern = re.compile(r"^%s(\d+)[ab]$" % USER_PREFIX)
    for pw in pwd.getpwall():
        m = pattern.match(pw.pw_name)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            _userdel(pw.pw_name)


def _remove_users():
    for _, _, name in USERS.values():
        _userdel(name)
    USERS.clear()


def make_users():
    """Create users a and b (once); they go when the file ends."""
    if USERS or not ROOT:
        return
    _remove_stale_users()
    atexit.register(_remove_users)
    for tag in ("a", "b"):
        name = "%s%d%s" % (USER_PREFIX, os.getpid(), tag)
        r = subprocess.run(["useradd", "--system", "--no-create-home",
                            "--home-dir", "/nonexistent", "--shell",
                            "/usr/sbin/nologin", "--user-group", name],
                           capture_output=True, text=True)
        check(r.returncode == 0, "useradd %s: %s" % (name, r.stderr))
        pw = pwd.getpwnam(name)
        USERS[tag] = (pw.pw_uid, pw.pw_gid, name)


def needs_users(fn):
    """Skip, saying why, unless root: the test creates users."""
    def test(d):
        if not ROOT:
            print("skip %s: needs root to create two users" % fn.__name__)
            return None
        make_users()
        os.chmod(d.tmpdir, 0o755)
        return fn(d)
    test.__name__ = fn.__name__
    test.__doc__ = fn.__doc__
    test.daemon_kwargs = getattr(fn, "daemon_kwargs", {})
    return test


class AsUser:
    """Run fn(ctl) in a child process that became user for good.

    ctl.ready(value) hands value to the parent's wait_ready(); ctl.wait_go()
    blocks until the parent's go().  result() is what fn returned (JSON
    values only), or raises the child's failure."""

    def __init__(self, user, fn, timeout=100):
        self.user = user
        up_r, up_w = os.pipe()
        down_r, down_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            self._child(fn, timeout, up_w, down_r, (up_r, down_w))
        os.close(up_w)
        os.close(down_r)
        self.up = os.fdopen(up_r)
        self.down = down_w
        self.done = None

    def _child(self, fn, timeout, up_w, down_r, theirs):
        out = None
        try:
            for fd in theirs:
                os.close(fd)
            signal.alarm(timeout)
            os.setgroups([])
            os.setgid(self.user[1])
            os.setuid(self.user[0])
            out = {"result": fn(_Ctl(up_w, down_r))}
        except BaseException:
            out = {"error": traceback.format_exc()}
        finally:
            try:
                os.write(up_w, (json.dumps(out) + "\n").encode())
            finally:
                os._exit(0)

    def _line(self):
        line = self.up.readline()
        if not line:
            raise AssertionError("the client as %s died" % self.user[2])
        msg = json.loads(line)
        if "error" in msg:
            raise AssertionError("as %s:\n%s" % (self.user[2], msg["error"]))
        return msg

    def wait_ready(self):
        msg = self._line()
        if "ready" not in msg:
            self.done = msg
            raise AssertionError("as %s: ended before ready: %r" %
                                 (self.user[2], msg))
        return msg["ready"]

    def go(self):
        os.write(self.down, b"g")

    def result(self):
        try:
            msg = self.done or self._line()
            return msg["result"]
        finally:
            self.close()

    def close(self):
        if self.pid is None:
            return
        try:
            os.close(self.down)
        except OSError:
            pass
        kill_quietly(self.pid)
        os.waitpid(self.pid, 0)
        self.up.close()
        self.pid = None


class _Ctl:
    def __init__(self, up, down):
        self.up = up
        self.down = down

    def ready(self, value=None):
        os.write(self.up, (json.dumps({"ready": value}) + "\n").encode())

    def wait_go(self):
        os.read(self.down, 1)


def as_user(tag, fn):
    """fn() run as user tag; what it returned."""
    return AsUser(USERS[tag], lambda ctl: fn()).result()
