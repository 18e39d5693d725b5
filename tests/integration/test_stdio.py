"""
A job holds nothing of emberd's, and emberd's log stays its own.

The fork-server starts with /dev/null on fd 0 and a pipe on fds 1 and 2,
in a session of its own without a terminal: no udf of a user's can type
into the terminal of emberd -f (TIOCSTI), write lines into emberd's log as
emberd, or truncate it.  What a user's processes write reaches the log
through emberd, each line prefixed with the uid and escaped; client
strings are escaped in the text log; with daemon.log_format=json every
line of the log, whichever process said it, is one JSON object.
"""

import fcntl
import json
import os
import pty
import pwd
import re
import subprocess
import sys
import termios
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403

PLUGIN = job_readable(os.path.join(BUILDDIR, "tests", "integration",
                                   "stdio_udf.so"))
FORGED = "2026-01-01T00:00:00.000Z emberd[1] error: forged by a udf"


def job_uid():
    """The uid root's jobs run as (workers.root_user), else ours."""
    if os.geteuid() == 0:
        return pwd.getpwnam("nobody").pw_uid
    return os.getuid()


def udf(symbol, **args):
    return {"udf": {"library": PLUGIN, "symbol": symbol, "args": args}}


def report(d, inject):
    """What a udf finds of its stdio, session and terminal, as a dict."""
    with d.client() as c:
        rows = c.collect_all(records_plan(["x"], 1, ops=[
            udf("udf_stdio_report", inject=inject)]))
    check_eq(len(rows), 1, "the report's records")
    return dict(kv.split("=", 1) for kv in rows[0].decode().split())


def where(pid, fd):
    return os.readlink("/proc/%d/fd/%d" % (pid, fd))


def test_job_holds_no_stdio_of_emberds(d):
    """fd 0 is /dev/null, fds 1 and 2 are not emberd's log, the session
    is not emberd's and has no terminal."""
    got = report(d, inject="true\n")
    check_eq(got["fd0"], "/dev/null", "a job's fd 0")
    log = where(d.pid, 2)
    for fd in ("fd1", "fd2"):
        check(got[fd] != log and got[fd].startswith("pipe:"),
              "a job's %s is %s (emberd's stderr: %s)" % (fd, got[fd], log))
    check(int(got["sid"]) != os.getsid(d.pid), "a job in emberd's session")
    check(got["tty"] != "0", "a job opened /dev/tty")
    check(got["tiocsti"] != "0", "TIOCSTI on a job's fd 0 worked")


def test_forged_log_line_is_the_users(d):
    """A udf that writes a line as emberd would, with an escape sequence,
    then truncates its stderr: the line shows as the user's, escaped, and
    the log keeps what it had."""
    first = d.log_text().splitlines()[0]
    with d.client() as c:
        rows = c.collect_all(records_plan(["x"], 1, ops=[
            udf("udf_stdio_forge", line=FORGED + "\x1b[2J\nsecond\n")]))
    check_eq(len(rows), 1, "the udf's records")
    prefix = "uid %d: " % job_uid()

    def logged():
        return [l for l in d.log_text().splitlines()
                if "forged by a udf" in l]
    lines = wait_until(logged, 10)
    check(lines, "the forged line never reached the log:\n%s" %
          d.log_tail())
    text = d.log_text()
    check_eq(text.splitlines()[0], first, "the log's first line")
    for line in lines:
        check(not line.startswith(FORGED[:24] + " emberd[1]"),
              "a forged line stands as emberd's: %r" % line)
        check(prefix + FORGED in line, "not prefixed with %r: %r" %
              (prefix, line))
    check("\x1b" not in text, "an ESC reached the log")
    check(wait_until(lambda: prefix + "second" in d.log_text(), 10),
          "the udf's second line is not the user's:\n%s" % d.log_tail())


def test_client_string_escaped_in_text_log(d):
    """A client name with a newline and an ESC in it, logged by hello,
    stays on its line, escaped."""
    c = d.client(hello=False)
    try:
        reply = c.hello(client="evil\n" + FORGED + "\x1b]0;pwned\x07")
        check(reply["ok"], "hello: %r" % reply)
    finally:
        c.close()
    check(wait_until(lambda: "hello from evil" in d.log_text(), 10),
          "no hello logged")
    text = d.log_text()
    check("\x1b" not in text and "\x07" not in text,
          "control bytes reached the log")
    for line in text.splitlines():
        check(not line.startswith(FORGED[:24]), "a forged line: %r" % line)
    line = [l for l in text.splitlines() if "hello from evil" in l][0]
    check(FORGED in line, "the rest of the name left its line: %r" % line)


@with_daemon(sets=["daemon.log_format=json"])
def test_client_string_escaped_in_json_log(d):
    """With daemon.log_format=json, a client name with C0 and C1 controls
    (ESC, CSI, OSC, ST) is logged by hello with each escaped (\\u001b,
    \\u009b), none raw: a reader that prints the message (jq -r) sends
    no escape sequence to the operator's terminal; the message reads back
    the same."""
    name = "evil\x1b[2J\u009b2J\u009d0;pwned\u009c"
    c = d.client(hello=False)
    try:
        check(c.hello(client=name)["ok"], "hello")
    finally:
        c.close()
    check(wait_until(lambda: "hello from evil" in d.log_text(), 10),
          "no hello logged")
    text = d.log_text()
    bad = sorted({"U+%04X" % ord(ch) for ch in text
                  if ch != "\n" and (ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0)})
    check(not bad, "controls raw in the log: %s" % bad)
    line = [l for l in text.splitlines() if "hello from evil" in l][0]
    check(name in json.loads(line)["message"], "the message: %r" % line)


@with_daemon(sets=["daemon.log_format=json"])
def test_json_log_from_every_process(d):
    """With daemon.log_format=json, every line is one JSON object: emberd's,
    the fork-server's and helpers' debug lines, a udf's raw stderr."""
    text_path = job_readable(write_file(d.path("in.txt"), "a\nb\n"))
    with d.client() as c:
        check_eq(c.count(text_plan([text_path])), 2, "a text source's "
                 "count (a helper opens it)")
        c.collect_all(records_plan(["x"], 1, ops=[
            udf("udf_stdio_forge", line='{"level":"error","message":'
                '"forged"}\n' + FORGED + "\n\xff\xfe\n")]))
    prefix = "uid %d: " % job_uid()
    check(wait_until(lambda: FORGED in d.log_text(), 10),
          "the udf's line never reached the log:\n%s" % d.log_tail())
    seen = set()
    for line in d.log_text().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            raise AssertionError("not JSON: %r" % line)
        check(isinstance(obj, dict), "not an object: %r" % line)
        msg = obj.get("message", "")
        check(obj.get("process") == "emberd",
              "a line said by %r: %r" % (obj.get("process"), line))
        check(msg != "forged", "a forged line: %r" % line)
        if "forged" in msg:
            check(msg.startswith(prefix), "not the user's: %r" % line)
        if "ember-worker[" in msg:
            seen.add("ember-worker")
    check("ember-worker" in seen, "no line of the fork-server's")


FLOOD_LINES = 2000000
JOBLOG_LINE_MAX = 1024		# daemon/joblog.h
JOBLOG_RATE = 50
JOBLOG_BURST = 500


@with_daemon(sets=["workers.max=2"])
def test_flood_is_bounded(d):
    """A job that writes a line of 100 KB and then two million lines on its
    stderr: emberd cuts the long one, logs no more lines than the rate
    lets through, counts every other one as dropped, serves another job
    meanwhile and does not grow."""
    rss = d.rss_kb()
    start = time.monotonic()
    flood = in_thread(lambda: d.client().count(records_plan(["x"], 1, ops=[
        udf("udf_stdio_flood", lines=FLOOD_LINES, long=100000)])))
    with d.client() as c:
        check_eq(c.count(range_plan(0, 1000, 2)), 1000, "a job meanwhile")
    check_eq(flood(60), 1, "the flooding job's count")
    elapsed = time.monotonic() - start
    grown = d.rss_kb() - rss
    check(grown < 8 * 1024, "emberd grew by %d kB" % grown)
    check_eq(d.stop(), 0, "emberd's exit")
    prefix = "uid %d: " % job_uid()
    log = d.log_text().splitlines()
    logged = sum(1 for l in log if l.endswith(prefix + "0123456789abcdef"))
    check(0 < logged <= JOBLOG_BURST + JOBLOG_RATE * (elapsed + 1),
          "%d lines logged in %.1fs" % (logged, elapsed))
    dropped = sum(int(n) for n in re.findall(
        r"uid \d+: (\d+) lines of its processes' output dropped",
        "\n".join(log)))
    # The other processes of the user (the fork-server, the job run
    # meanwhile) write into the same pipe: a line of theirs may land
    # inside a flood line, or end the long line early.
    check(FLOOD_LINES - logged - 20 <= dropped <= FLOOD_LINES - logged + 100,
          "%d logged, %d told as dropped" % (logged, dropped))
    long = [l[l.index(prefix) + len(prefix):] for l in log
            if prefix + "aaaa" in l]
    check(long and long[0] == "a" * JOBLOG_LINE_MAX + " [cut]",
          "the long line, not cut: %r" % [l[-80:] for l in long])
    for line in long:
        check(re.fullmatch(r"a{1,%d}( \[cut\])?" % JOBLOG_LINE_MAX, line),
              "a long line's part: %r" % line[-80:])


@with_daemon(sets=["workers.preload=" + PLUGIN,
                  "workers.env=STDIO_UDF_LAST_WORDS"],
             env={"STDIO_UDF_LAST_WORDS": "1"})
def test_last_words_logged(d):
    """A fork-server whose last words, as it exits, are more than its pipe
    holds (a sanitizer's leak report, say): emberd reads them while it
    waits for the fork-server at its own exit, which is not held up."""
    with d.client() as c:
        check_eq(c.count(range_plan(0, 10, 1)), 10, "a job's count")
    check_eq(d.stop(), 0, "emberd's exit")
    log = d.log_text()
    check("did not exit; killing it" not in log,
          "a fork-server held up at its exit:\n%s" % d.log_tail())
    check("uid %d: stdio_udf: last words end" % job_uid() in log,
          "the fork-server's last words lost:\n%s" % d.log_tail())


# ---------------------------------------------------------------------------
# emberd -f on a terminal

class PtyDaemon(Daemon):
    """emberd -f with a terminal as its stdio and controlling terminal,
    as an operator starts it by hand; the terminal's output is the log."""

    def start(self):
        master, slave = pty.openpty()
        self.master, self.slave = master, slave

        def ctty():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.proc = subprocess.Popen(
            self.argv(), stdin=slave, stdout=slave, stderr=slave,
            start_new_session=True, preexec_fn=ctty, cwd=self.tmpdir)
        self.sid = self.proc.pid
        self.reader = threading.Thread(target=self._copy, daemon=True)
        self.reader.start()
        self.wait_ready()
        self.emberd_pid = self._find_emberd()
        self.snapshot()

    def _copy(self):
        """The terminal's output into the log file, until it closes."""
        with open(self.log_path, "ab") as log:
            while True:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    return
                if not data:
                    return
                log.write(data)
                log.flush()

    def pending_input(self):
        """Bytes typed into the terminal and not read yet."""
        buf = fcntl.ioctl(self.slave, termios.FIONREAD, b"\0\0\0\0")
        return int.from_bytes(buf, sys.byteorder)

    def cleanup(self, failed=False):
        try:
            Daemon.cleanup(self, failed)
        finally:
            os.close(self.slave)
            os.close(self.master)


@no_daemon
def test_no_tiocsti_into_emberds_terminal(_):
    """emberd -f on a terminal: a udf's TIOCSTI on its fd 0 types nothing
    into it (once emberd stopped, root's shell would run it)."""
    d = PtyDaemon(start=False)
    try:
        d.start()
        check(os.getsid(d.pid) == d.proc.pid, "emberd not in the "
              "terminal's session")
        got = report(d, inject="id\n")
        check_eq(got["fd0"], "/dev/null", "a job's fd 0")
        check(got["tiocsti"] != "0", "TIOCSTI worked: %r" % got)
        check(got["tty"] != "0", "a job opened /dev/tty")
        check_eq(d.pending_input(), 0, "bytes typed into emberd's terminal")
    finally:
        d.cleanup()


if __name__ == "__main__":
    run_tests(globals())
