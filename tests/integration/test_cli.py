"""The ember CLI as a person meets it: help, messages that say what is
wrong and what to do, the progress line on a terminal, ember status."""

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time

from harness import *

# Seven partitions that take a moment each: the progress line shows.
SLOW = range_plan(0, 70000, 7, ops=[{"pipe": {"command": "sleep 0.4; cat"}}])


@no_daemon
def test_help_and_version(_):
    for flag in ("-h", "--help"):
        r = run_cli([flag])
        check_eq(r.returncode, 0, "exit status of %s" % flag)
        check("usage: ember" in r.stdout and "status" in r.stdout,
              "%s output %r" % (flag, r.stdout))
    for flag in ("-V", "--version"):
        r = run_cli([flag])
        check_eq(r.returncode, 0, "exit status of %s" % flag)
        check(re.match(r"ember \d+\.\d+", r.stdout), "%s: %r" % (flag,
                                                                  r.stdout))
    r = run_cli(["run", "--help"])
    check_eq(r.returncode, 0, "run --help")


def _usage_error(args, *needles):
    r = run_cli(args)
    check_eq(r.returncode, 2, "exit status of ember %s" % " ".join(args))
    for n in needles:
        check(n in r.stderr, "ember %s: stderr %r lacks %r" %
              (" ".join(args), r.stderr, n))


@no_daemon
def test_missing_and_extra_arguments(_):
    _usage_error([], "missing a command",
                 "run, ops, cancel, checkpoint or status")
    _usage_error(["cancel"], "expected one operation id")
    _usage_error(["ops", "extra"], "takes only --json", '"extra"')
    _usage_error(["run"], "missing the plan", "- for standard input")
    _usage_error(["run", "a.json", "b.json"], "one plan only", '"b.json"')
    _usage_error(["status", "extra"], "takes no argument", '"extra"')
    _usage_error(["frobnicate"], 'unknown command "frobnicate"')


@no_daemon
def test_socket_messages(_):
    tmp = tempfile.mkdtemp(prefix="ember-cli-")
    try:
        plain = write_file(os.path.join(tmp, "plain"), "x")
        r = run_cli(["status"], socket_path=plain)
        check_eq(r.returncode, 1, "exit status")
        check("is not a socket" in r.stderr and plain in r.stderr,
              "not a socket: %r" % r.stderr)
        gone = os.path.join(tmp, "gone.sock")
        r = run_cli(["status"], socket_path=gone)
        check("is emberd running?" in r.stderr and "systemctl start emberd"
              in r.stderr, "not running: %r" % r.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@no_daemon
def test_permission_denied_names_the_group(_):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        print("SKIP: needs root and setpriv to connect as nobody")
        return
    d = Daemon(sets=["daemon.socket_group=daemon",
                     "daemon.socket_mode=0660"])
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup",
                        "--clear-groups", EMBER, "--socket", d.socket,
                        "status"], capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    check_eq(r.returncode, 1, "exit status")
    check("Permission denied" in r.stderr and "group daemon" in r.stderr,
          "stderr %r" % r.stderr)
    # A member of the group gets in.
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup",
                        "--groups=daemon", EMBER, "--socket", d.socket,
                        "status", "--json"], capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    check_eq(r.returncode, 0, "a member of the group (stderr %r)" % r.stderr)


def test_sessions_end_with_the_cli(d):
    """A program's session ends when it closes its handle: finished CLI
    runs leave no session behind for session.timeout, nor a broadcast."""
    plan = write_file(d.path("p.json"), json.dumps(range_plan(0, 10, 2)))
    for _ in range(3):
        r = d.cli(["run", "--count", plan])
        check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
    r = d.cli(["run", plan], input=None)
    check_eq(r.returncode, 0, "iterate (stderr %r)" % r.stderr)
    c = d.client()
    ok = wait_until(lambda: [s["id"] for s in c.status()["sessions"]] ==
                    [c.session], 5)
    check(ok, "sessions left: %r" % c.status()["sessions"])


def test_local_checkpoint_refused(d):
    """A local checkpoint dies with the CLI's session, at the end of the
    command that made it: refused, with why and what to do instead."""
    plan = write_file(d.path("p.json"), json.dumps(range_plan(0, 10, 2)))
    r = d.cli(["run", "--action", "checkpoint", "--option", "local=true",
               plan])
    check_eq((r.returncode, r.stdout), (2, ""),
             "exit status (stderr %r)" % r.stderr)
    check("session" in r.stderr and "local=false" in r.stderr,
          "the reason: %r" % r.stderr)
    with d.client() as c:
        check_eq(c.status().get("checkpoints", []), [], "checkpoints made")
    r = d.cli(["run", "--action", "checkpoint", "--option", "local=false",
               plan])
    check_eq(r.returncode, 0, "a reliable one (stderr %r)" % r.stderr)


def test_option_of_another_action(d):
    plan = write_file(d.path("p.json"), json.dumps(range_plan(0, 10, 2)))
    r = d.cli(["run", "--count", "--option", "path=/tmp/x", plan])
    check_eq(r.returncode, 1, "exit status")
    check("options.path belongs to action save, not count" in r.stderr,
          "stderr %r" % r.stderr)
    r = d.cli(["run", "--option", "fn=sum", plan])
    check("options.fn belongs to action reduce, not iterate" in r.stderr,
          "stderr %r" % r.stderr)


def test_options_after_the_plan(d):
    plan = write_file(d.path("p.json"), json.dumps(range_plan(0, 10, 2)))
    r = run_cli(["run", plan, "--count"], socket_path=d.socket)
    check_eq((r.returncode, r.stdout, r.stderr), (0, "10\n", ""),
             "ember run plan.json --count")
    r = run_cli(["run", plan, "--option", "fn=max", "--action", "reduce"],
                socket_path=d.socket)
    check_eq((r.returncode, r.stdout), (0, "9\n"), "options after the plan")


def test_json_errors_name_line_and_column(d):
    bad = '{"source":\n  {"range": nope}}\n'
    path = write_file(d.path("bad.json"), bad)
    r = d.cli(["run", path])
    check_eq(r.returncode, 1, "exit status")
    check("%s:2:16:" % path in r.stderr, "file: %r" % r.stderr)
    r = d.cli(["run", "-"], input=bad)
    check("<stdin>:2:16:" in r.stderr, "stdin: %r" % r.stderr)
    r = d.cli(["run", "-"], input="[1, 2]")
    check("must be a JSON object" in r.stderr, "array: %r" % r.stderr)


def test_count_by_value_null_and_empty(d):
    plan = records_plan(["a", "", None, "", None, None, "a", "a"], 3)
    reply = d.client().execute_ok(plan, "count_by_value")
    check_eq(reply["counts"], {"a": 3, "": 2}, "counts")
    check_eq(reply["nulls"], 3, "nulls")
    path = write_file(d.path("cbv.json"), json.dumps(plan))
    r = d.cli(["run", "--action", "count_by_value", path])
    check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
    check_eq(r.stdout, "3\ta\n2\t\n3\t\\N\n", "CLI output")


def test_count_by_value_order(d):
    # The largest count first, ties by the record's bytes (a prefix first,
    # a NUL before any letter), the records with a NUL among the rest.
    records = (["b"] * 2 + ["ab"] * 2 + ["a\0b"] * 2 + ["a"] * 2 +
               ["c"] * 3 + [""] + ["\0"] + [None] * 4)
    path = write_file(d.path("order.json"),
                      json.dumps(records_plan(records, 4)))
    r = subprocess.run([EMBER, "--socket", d.socket, "run", "--action",
                        "count_by_value", path],
                       capture_output=True, timeout=60)
    check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
    check_eq(r.stdout, b"3\tc\n2\ta\n2\ta\0b\n2\tab\n2\tb\n"
             b"1\t\n1\t\0\n4\t\\N\n", "CLI output")


def test_nul_in_plan_strings(d):
    records = ["a\0b", "ab", "xa\0bx", "", "\0"]
    plan = records_plan(records, 2, ops=[{"filter": {"contains": "a\0b"}}])
    c = d.client()
    check_eq(c.collect_all(plan), [b"a\0b", b"xa\0bx"], "contains a NUL")
    check_eq(c.collect_all(records_plan(records, 3)),
             [r.encode() for r in records], "parallelize with NULs")
    check_eq(c.collect_all(records_plan(records, 1, ops=[
        {"flat_map": {"split": "\0"}}])),
        [b"a", b"b", b"ab", b"xa", b"bx", b"", b"", b""], "split on NUL")
    path = write_file(d.path("nul.json"), json.dumps(plan))
    r = subprocess.run([EMBER, "--socket", d.socket, "run", path],
                       capture_output=True, timeout=60)
    check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
    check_eq(r.stdout, b"a\0b\nxa\0bx\n", "CLI output")


def _table(text, name):
    """The rows of ember status's table name: [{HEADING: cell}], the last
    column's cell with its spaces."""
    lines = text.split("\n")
    at = [i for i, l in enumerate(lines) if l.startswith(name + ": ")]
    check(at, "no %s table:\n%s" % (name, text))
    heads = lines[at[0] + 1].split()
    rows = []
    for line in lines[at[0] + 2:]:
        if not line.strip():
            break
        rows.append(dict(zip(heads, line.split(None, len(heads) - 1))))
    return rows


@with_daemon(sets=["workers.max=2"])
def test_status_at_80_columns(d):
    """ember status fits 80 columns with long commands, a detached and a
    failed operation; each operation says what it does, and its running
    tasks are the workers running them, as the first lines count them."""
    c = d.client()
    check_error(c.execute(records_plan(["x"], 1, ops=[
        {"pipe": {"command": "exit 3"}}]), "count"), "TASK_FAILED")
    long = "sleep 30; " + "echo a-rather-long-command " * 6
    # A count runs its 4 tasks at once, as far as 2 workers let it.
    busy = d.client()
    busy.send_json({"op": "execute", "action": "count", "plan": range_plan(
        0, 100, 4, ops=[{"filter": {"contains": "1"}},
                        {"pipe": {"command": long}}])})
    gone = d.client()
    gone.execute_ok(text_plan([os.path.join(SRCDIR, "README.md")], 2),
                    "iterate")
    gone.close_abruptly()
    check(wait_until(lambda: sum(w["state"] == "busy" for w in
                                 c.status()["workers"]) == 2, 10),
          "two busy workers")
    r = d.cli(["status"])
    check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
    lines = r.stdout.rstrip("\n").split("\n")
    wide = [l for l in lines if len(l) > 80]
    check_eq(wide, [], "lines past 80 columns")
    check(len(lines) <= 40, "%d lines:\n%s" % (len(lines), r.stdout))
    running = int(re.search(r"tasks: (\d+) running", r.stdout).group(1))
    ops = _table(r.stdout, "operations")
    check_eq(sum(int(o["RUN"]) for o in ops), running,
             "running tasks of the operations:\n%s" % r.stdout)
    what = {o["ACTION"] + " " + o["STATE"]: o.get("WHAT", "") for o in ops}
    check(what["count attached"].startswith("range 0..100 | filter c"),
          "what the attached one does:\n%s" % r.stdout)
    # A path of 24 bytes or fewer stays whole, then the column is cut
    # to end within 80 columns: what shows starts what it does.
    readme = os.path.join(SRCDIR, "README.md")
    full = "text " + (readme if len(readme) <= 24 else ".../README.md")
    check(len(what["iterate detached"]) > len("text ") and
          full.startswith(what["iterate detached"]),
          "the detached one:\n%s" % r.stdout)
    st = [o for o in c.status()["operations"] if o["action"] == "count"]
    check_eq(st[0]["what"], "range 0..100 | filter contains 1 | pipe " +
             long, "what in the status reply")
    busy.close_abruptly()


def test_status_for_people(d):
    c = d.client()
    fail = records_plan(["x"], 1, ops=[{"pipe": {"command": "exit 3"}}])
    check_error(c.execute(fail, "count"), "TASK_FAILED")
    busy = d.client()
    busy.execute_ok(records_plan(["x"], 1, ops=[
        {"pipe": {"command": "sleep 30"}}]), "iterate")
    busy.write_int(REQUEST_NEXT)
    d.worker_running("sleep 30")
    r = d.cli(["status"])
    check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
    wide = [l for l in r.stdout.split("\n") if len(l) > 80]
    check_eq(wide, [], "lines past 80 columns")
    check("failed=1" in r.stdout, "retirement causes:\n%s" % r.stdout)
    check("retired" not in r.stdout.lower() or "{" not in r.stdout,
          "raw JSON in:\n%s" % r.stdout)
    import pwd
    me = pwd.getpwuid(os.geteuid()).pw_name
    check(re.search(r"\b%s\b" % re.escape(me), r.stdout),
          "no user name %r in:\n%s" % (me, r.stdout))
    check(re.search(r"\b\d+(ms|\.\ds|s|m\d\ds)\b", r.stdout),
          "no age in:\n%s" % r.stdout)
    check(re.search(r"tasks: 1 running, \d+ queued", r.stdout),
          "running and queued:\n%s" % r.stdout)
    check(re.search(r"PARTS +RUN +LEFT", r.stdout), "operations:\n%s"
          % r.stdout)
    # Limits and counters are for -v.
    check("limits" not in r.stdout and "counters" not in r.stdout,
          "limits or counters without -v:\n%s" % r.stdout)
    r = d.cli(["status", "-v"])
    check_eq(r.returncode, 0, "status -v (stderr %r)" % r.stderr)
    wide = [l for l in r.stdout.split("\n") if len(l) > 80]
    check_eq(wide, [], "lines of -v past 80 columns")
    check("counters" in r.stdout, "no counters in -v:\n%s" % r.stdout)
    # Limits in bytes read as ember.conf writes sizes; counts stay counts.
    check(re.search(r"daemon\.max_input_per_uid +\d+(\.\d)?[kmg]? of 64m\n",
                    r.stdout), "max_input_per_uid:\n%s" % r.stdout)
    check(re.search(r"daemon\.max_broadcast_bytes +0 of 4g\n", r.stdout),
          "max_broadcast_bytes:\n%s" % r.stdout)
    check(re.search(r"daemon\.max_operations_per_uid +\d+ of 64\n",
                    r.stdout), "max_operations_per_uid:\n%s" % r.stdout)
    # Whatever the key is called: a size by its type in the conf table.
    check(re.search(r"daemon\.max_spool_per_uid +0 of 256m\n", r.stdout),
          "max_spool_per_uid:\n%s" % r.stdout)
    check(re.search(r"daemon\.max_checkpoints_per_uid +\d+ of 64\n",
                    r.stdout), "max_checkpoints_per_uid:\n%s" % r.stdout)
    r = d.cli(["status", "--json"])
    reply = json.loads(r.stdout)
    check(reply["ok"] and isinstance(reply["operations"], list),
          "--json %r" % r.stdout[:200])
    busy.close()


def _on_a_pty(d, args, same_terminal=False, interrupt_after=None,
              chunks=None):
    """Run ember with standard error on a pseudo-terminal (and standard
    output too with same_terminal); return (status, what the terminal
    got).  chunks, if a list, gets (seconds since the start, bytes) for
    each read."""
    master, slave = pty.openpty()
    out = open(d.path("cli.out"), "wb")
    p = subprocess.Popen([EMBER, "--socket", d.socket] + args,
                         stdin=subprocess.DEVNULL,
                         stdout=slave if same_terminal else out,
                         stderr=slave)
    os.close(slave)
    got = b""
    start = time.monotonic()
    sent = False
    while True:
        if (interrupt_after is not None and not sent and
                interrupt_after(got)):
            p.send_signal(signal.SIGINT)
            sent = True
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            got += chunk
            if chunks is not None:
                chunks.append((time.monotonic() - start, chunk))
        elif p.poll() is not None:
            break
        check(time.monotonic() - start < 60, "ember did not end")
    os.close(master)
    out.close()
    return p.wait(10), got


def test_progress_line_totals(d):
    plan = write_file(d.path("slow.json"), json.dumps(SLOW))
    for action in ("count", "count_by_value", "reduce", "iterate",
                   "collect"):
        args = ["run", "--action", action, plan]
        if action == "reduce":
            args[3:3] = ["--option", "fn=sum"]
        status, got = _on_a_pty(d, args)
        check_eq(status, 0, "%s: exit status (%r)" % (action, got))
        check(re.search(rb"\d/7 partitions", got),
              "%s: no progress line with the total: %r" % (action, got))
        check(b"/0 partitions" not in got, "%s: %r" % (action, got))
        check(got.endswith(b"\r\033[K"), "%s: not erased: %r" % (action,
                                                                   got[-40:]))


# A progress line as drawn, or its erase alone.
PROGRESS_LINE = re.compile(rb"\r\033\[K(\d+/[\d?]+ partitions[^\r\n\033]*)?")


def test_progress_on_the_same_terminal(d):
    """With the records on the same terminal, the line is erased before
    each result line is written and drawn again after: what is left
    without the lines is the records alone."""
    plan = write_file(d.path("slow.json"), json.dumps(SLOW))
    status, got = _on_a_pty(d, ["run", "--count", plan], same_terminal=True)
    check_eq(status, 0, "exit status")
    check(b"partitions" in got, "no progress line: %r" % got[-200:])
    check_eq(PROGRESS_LINE.sub(b"", got), b"70000\r\n", "the count alone")
    few = write_file(d.path("few.json"), json.dumps(range_plan(
        0, 12, 4, ops=[{"pipe": {"command": "sleep 0.5; cat"}}])))
    for action in ("iterate", "collect"):
        status, got = _on_a_pty(d, ["run", "--action", action, few],
                                same_terminal=True)
        check_eq(status, 0, "%s: exit status" % action)
        check(b"partitions" in got, "%s: no progress line" % action)
        check_eq(PROGRESS_LINE.sub(b"", got), b"".join(
            b"%d\r\n" % i for i in range(12)), "%s: the records" % action)


@skip_unless(shutil.which("tmux") is not None, "no tmux")
def test_progress_in_tmux(d):
    """What a person sees at an 80x24 terminal: the line while the job
    runs, then the records alone, the line gone."""
    few = write_file(d.path("few.json"), json.dumps(range_plan(
        0, 12, 4, ops=[{"pipe": {"command": "sleep 0.5; cat"}}])))
    tmux = ["tmux", "-L", "ember-test-%d" % os.getpid()]
    shell = "%s --socket %s run %s; echo EXIT=$?; sleep 60" % (
        EMBER, d.socket, few)
    subprocess.run(tmux + ["-f", "/dev/null", "new-session", "-d", "-x",
                           "80", "-y", "24", shell], check=True)

    def screen():
        return subprocess.run(tmux + ["capture-pane", "-p"],
                              capture_output=True, text=True).stdout
    try:
        check(wait_until(lambda: re.search(r"\d+/4 partitions", screen()),
                         10), "no progress line:\n%s" % screen())
        check(wait_until(lambda: "EXIT=" in screen(), 30),
              "ember did not end:\n%s" % screen())
        lines = screen().rstrip("\n").split("\n")
        check_eq(lines, [str(i) for i in range(12)] + ["EXIT=0"],
                 "the screen at the end")
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)


def test_progress_soon_and_often(d):
    """The line shows within a moment and is redrawn every 100ms or so,
    however few records come: a second of partitions with 3 records."""
    slow = write_file(d.path("slow.json"), json.dumps(range_plan(
        0, 12, 4, ops=[{"pipe": {"command": "sleep 1; cat"}}])))
    for args in (["--count"], ["--action", "iterate"],
                 ["--action", "reduce", "--option", "fn=sum"]):
        chunks = []
        start = time.monotonic()
        status, got = _on_a_pty(d, ["run"] + args + [slow], chunks=chunks)
        end = time.monotonic() - start
        check_eq(status, 0, "%s: exit status" % args)
        draws = [t for t, c in chunks if b"partitions" in c]
        check(draws and draws[0] < 1.0, "%s: the first line at %s (of %.1fs)"
              % (args, draws[:1], end))
        check(len(draws) >= end / 0.4, "%s: %d draws in %.1fs" %
              (args, len(draws), end))


def test_progress_erased_on_ctrl_c(d):
    # The interrupt comes the moment a line shows, while the thread that
    # draws may still be writing it: an erase must never be overdrawn.
    plan = write_file(d.path("slow.json"), json.dumps(SLOW))
    for action in ("count", "iterate") * 5:
        status, got = _on_a_pty(
            d, ["run", "--action", action, plan],
            interrupt_after=lambda got: b"partitions" in got)
        check_eq(status, -signal.SIGINT, "%s: killed by SIGINT" % action)
        check(got.endswith(b"\r\033[K"), "%s: not erased: %r" % (action,
                                                                 got[-40:]))


def test_progress_erased_on_epipe(d):
    big = write_file(d.path("big.json"), json.dumps(range_plan(
        0, 3000000, 6, ops=[{"pipe": {"command": "sleep 0.3; cat"}}])))
    master, slave = pty.openpty()
    p = subprocess.Popen("%s --socket %s run %s | head -1 >/dev/null" %
                         (EMBER, d.socket, big), shell=True,
                         stdin=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    got = b""
    while True:
        r, _, _ = select.select([master], [], [], 30)
        if not r:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    check_eq(p.wait(30), 0, "exit status of the pipeline")
    check(b"partitions" in got, "no progress line: %r" % got)
    check(got.endswith(b"\r\033[K"), "not erased: %r" % got[-40:])



# A job that runs until it is stopped: nothing matches in a trillion.
ENDLESS = range_plan(0, 10**12, 2, ops=[{"filter": {"contains": "zz"}}])


def _operations(d):
    with d.client() as c:
        return c.status()["operations"]


def _workers_free(d):
    with d.client() as c:
        st = c.status()
    return not st["operations"] and all(w["state"] != "busy"
                                        for w in st["workers"])


class Tmux:
    """A terminal of 80x24 in a tmux server of the test's own."""

    def __init__(self, d):
        self.name = "ember-test-%d" % os.getpid()
        self.d = d
        subprocess.run(["tmux", "-L", self.name, "new-session", "-d",
                        "-x", "80", "-y", "24"], check=True)

    def type(self, *keys):
        subprocess.run(["tmux", "-L", self.name, "send-keys"] + list(keys),
                       check=True)

    def screen(self):
        return subprocess.run(["tmux", "-L", self.name, "capture-pane",
                               "-p"], capture_output=True, text=True,
                              check=True).stdout

    def close(self):
        subprocess.run(["tmux", "-L", self.name, "kill-server"],
                       capture_output=True)


@skip_unless(shutil.which("tmux"), "tmux is not installed")
def test_ctrl_c_interrupts_the_operation(d):
    plan = write_file(d.path("endless.json"), json.dumps(ENDLESS))
    term = Tmux(d)
    try:
        for n, args in enumerate(["", "--count", "--collect"]):
            # (An interactive shell drops the rest of a line whose command
            # died of SIGINT; sh with a trap goes on, and ember gets SIGINT
            # back at its default.)
            term.type("clear; sh -c 'trap : INT; %s --socket %s run %s %s; "
                      "echo status=$?:%d'" % (EMBER, d.socket, args, plan, n),
                      "Enter")
            check(wait_until(lambda: any(o["running"] > 0
                                         for o in _operations(d)), 10),
                  "ember run %s did not start" % args)
            term.type("C-c")
            check(wait_until(lambda: "status=" in term.screen(), 5),
                  "ember run %s still runs: %r" % (args, term.screen()))
            check("status=130:%d" % n in term.screen(),
                  "ember run %s: %r" % (args, term.screen()))
            check(wait_until(lambda: _workers_free(d), 1.0),
                  "ember run %s: the operation goes on: %r" %
                  (args, _operations(d)))
    finally:
        term.close()


def test_ops_and_cancel(d):
    r = run_cli(["ops"], d.socket)
    check_eq((r.returncode, r.stdout), (0, "no operations\n"), "ops")
    plan = write_file(d.path("endless.json"), json.dumps(ENDLESS))
    p = subprocess.Popen([EMBER, "--socket", d.socket, "run", plan],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        check(wait_until(lambda: _operations(d), 10), "no operation")
        op = _operations(d)[0]["id"]
        r = run_cli(["ops"], d.socket)
        check_eq(r.returncode, 0, "ops: %s" % r.stderr)
        check(re.search(r"^%s +iterate +attached +0/2 " % op, r.stdout,
                        re.M), "ops: %r" % r.stdout)
        r = run_cli(["ops", "--json"], d.socket)
        check_eq([o["id"] for o in json.loads(r.stdout)], [op], "--json")
        r = run_cli(["cancel", "nothere"], d.socket)
        check_eq(r.returncode, 1, "cancel of nothing")
        check("no such operation" in r.stderr, r.stderr)
        r = run_cli(["cancel", op[:8]], d.socket)
        check_eq((r.returncode, r.stderr), (0, ""), "cancel")
        check_eq(p.wait(5), 1, "ember run after the cancel")
        check("interrupted" in p.stderr.read(), "its message")
        check(wait_until(lambda: _workers_free(d), 1.0), "workers busy")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stderr.close()


def test_limit_is_prompt(d):
    # A sparse match in a partition of 300M records: the limit stops it.
    plan = write_file(d.path("sparse.json"), json.dumps(range_plan(
        0, 300 * 10**6, 1, ops=[{"filter": {"contains": "777777"}}])))
    t0 = time.monotonic()
    r = run_cli(["run", "--option", "limit=1", plan], d.socket)
    took = time.monotonic() - t0
    check_eq((r.returncode, r.stdout), (0, "777777\n"), r.stderr)
    check(took < 2.0, "limit=1 took %.1f s" % took)
    check(wait_until(lambda: _workers_free(d), 1.0), "workers busy")


@with_daemon(sets=["workers.max=2"])
def test_iterate_computes_ahead(d):
    # 8 partitions of a second each on 2 workers: 4 s when the next
    # partition is computed while one is printed, 8 s one by one.
    plan = write_file(d.path("slow8.json"), json.dumps(range_plan(
        0, 80, 8, ops=[{"pipe": {"command": "sleep 1; cat"}}])))
    t0 = time.monotonic()
    p = subprocess.Popen([EMBER, "--socket", d.socket, "run", plan],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        most = 0
        while p.poll() is None:
            most = max([most] + [o["running"] for o in _operations(d)])
            time.sleep(0.05)
        took = time.monotonic() - t0
        out, err = p.communicate()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    check_eq((p.returncode, out), (0, "".join("%d\n" % i
                                              for i in range(80))), err)
    check(most >= 2, "tasks in flight at once: %d" % most)
    check(took < 6.5, "8 partitions took %.1f s" % took)
    r = run_cli(["-h"])
    check("prefetch" in r.stdout, "ember -h says nothing of prefetch")


if __name__ == "__main__":
    run_tests(globals())
