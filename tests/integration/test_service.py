"""emberd as a service: signals, no orphans, conf errors, the socket file."""

import os
import shutil
import signal
import socket
import tempfile
import time

from harness import *


def _spawn_workers(d):
    """Run jobs so that workers exist; return the recorded descendants."""
    with d.client() as c:
        check_eq(c.count(range_plan(0, 100000, 8)), 100000, "count")
    d.snapshot()
    check(d.worker_pids(), "no worker after a job")
    return dict(d.known)


@no_daemon
def test_sigterm_exits_cleanly(_):
    d = Daemon()
    known = _spawn_workers(d)
    d.signal(signal.SIGTERM)
    check_eq(d.wait(), 0, "exit status after SIGTERM")
    assert_no_processes_left(d.sid, known.items())
    check(not os.path.exists(d.socket), "socket file left behind")


@no_daemon
def test_sigint_exits_cleanly(_):
    d = Daemon()
    known = _spawn_workers(d)
    d.signal(signal.SIGINT)
    check_eq(d.wait(), 0, "exit status after SIGINT")
    assert_no_processes_left(d.sid, known.items())


@no_daemon
def test_sigterm_with_a_running_job(_):
    d = Daemon(sets=["daemon.shutdown_grace=1s"])
    c = d.client()
    c.execute_ok(records_plan(["x"], 1, ops=[
        {"pipe": {"command": "sleep 30"}}]), "iterate")
    c.write_int(REQUEST_NEXT)
    d.worker_running("sleep 30")
    known = dict(d.known)
    start = time.monotonic()
    d.signal(signal.SIGTERM)
    check_eq(d.wait(10), 0, "exit status after SIGTERM")
    check(time.monotonic() - start < 8, "the drain outlasted its grace")
    # The client is told, or at least not left hanging.
    try:
        status, payload = c.read_partition()
        check(status in (STREAM_ERROR, EXCEPTION_THROWN),
              "a cut stream must end with an error, got %d" % status)
    except (ProtocolError, OSError):
        pass
    assert_no_processes_left(d.sid, known.items())


@no_daemon
def test_sigterm_refuses_new_work(_):
    d = Daemon(sets=["daemon.shutdown_grace=3s"])
    c = d.client()
    c.execute_ok(records_plan(["x"], 1, ops=[
        {"pipe": {"command": "sleep 30"}}]), "iterate")
    c.write_int(REQUEST_NEXT)
    d.worker_running("sleep 30")
    d.signal(signal.SIGTERM)
    check(wait_until(lambda: not os.path.exists(d.socket) or
                     not _accepts(d.socket), 5),
          "still accepting after SIGTERM")
    check_eq(d.wait(10), 0, "exit status")


def _accepts(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


@no_daemon
def test_sigkill_leaves_no_orphans(_):
    d = Daemon()
    _spawn_workers(d)
    c = d.client()
    c.execute_ok(records_plan(["x"], 1, ops=[
        {"pipe": {"command": "sleep 30"}}]), "iterate")
    c.write_int(REQUEST_NEXT)
    d.worker_running("sleep 30")
    known = dict(d.known)
    check(len(known) >= 3, "expected a fork-server, workers and a command: "
          "%r" % known)
    d.signal(signal.SIGKILL)
    check_eq(d.wait(5), -signal.SIGKILL, "emberd's end")
    assert_no_processes_left(d.sid, known.items(), timeout=5.0)


def _conf_error(text, *needles, sets=()):
    """emberd with conf text (None: the shipped conf) and sets must fail
    at once, naming needles (FILE stands for the conf's path); its stderr."""
    tmp = tempfile.mkdtemp(prefix="ember-conf-")
    try:
        conf = None
        if text is not None:
            conf = write_file(os.path.join(tmp, "bad.conf"), text)
        args = ["-f", "--set", "daemon.socket=" + os.path.join(tmp, "s")]
        for s in sets:
            args += ["--set", s]
        r = run_emberd(args, conf=conf if conf else DEFAULT_CONF)
        check(r.returncode != 0, "emberd accepted it: %r" % r.stderr)
        for n in needles:
            n = n.replace("FILE", conf or "")
            check(n in r.stderr, "stderr %r lacks %r" % (r.stderr, n))
        check(not os.path.exists(os.path.join(tmp, "s")),
              "a socket was created")
        return r.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@no_daemon
def test_conf_unknown_key(_):
    _conf_error("[daemon]\nlog_level = info\n\nbogus_key = 1\n",
                "FILE:4", "bogus_key")


@no_daemon
def test_conf_bad_value(_):
    _conf_error("# comment\n[workers]\nmax = lots\n", "FILE:3", "workers.max",
                "lots")
    _conf_error("[daemon]\nshutdown_grace = 10parsecs\n", "FILE:2",
                "daemon.shutdown_grace")
    _conf_error("[daemon]\nmax_frame = 16q\n", "FILE:2", "daemon.max_frame")


@no_daemon
def test_conf_unknown_section(_):
    _conf_error("[nowhere]\nsocket = /tmp/x\n", "FILE:2", "nowhere")


@no_daemon
def test_conf_missing_file(_):
    r = run_emberd(["-f"], conf="/nonexistent/ember.conf")
    check(r.returncode != 0, "emberd started without its conf file")
    check("/nonexistent/ember.conf" in r.stderr, "stderr %r" % r.stderr)


@no_daemon
def test_set_bad_value(_):
    _conf_error(None, "workers.max", sets=["workers.max=lots"])
    _conf_error(None, "daemon.log_level", sets=["daemon.log_level=loud"])
    _conf_error(None, "daemon.nope", sets=["daemon.nope=1"])
    _conf_error(None, "nodot", sets=["nodot"])


@no_daemon
def test_shipped_conf_is_the_defaults(_):
    shipped = run_emberd(["--dump-conf"])
    check_eq(shipped.returncode, 0, "dump with conf/ember.conf (stderr %r)"
             % shipped.stderr)
    empty = run_emberd(["--dump-conf"], conf="/dev/null")
    check_eq(empty.returncode, 0, "dump with an empty conf")
    check_eq(shipped.stdout, empty.stdout, "conf/ember.conf vs the defaults")


@no_daemon
def test_sighup_rereads_the_conf(_):
    d = Daemon(conf=None, start=False)
    conf = write_file(d.path("ember.conf"), "[workers]\nmax = 1\n")
    d.conf = conf
    d.start()
    check_eq(d.client().status()["workers_max"], 1, "workers_max at start")
    write_file(conf, "[workers]\nmax = 3\n")
    d.signal(signal.SIGHUP)
    check(wait_until(lambda: d.client().status()["workers_max"] == 3, 5),
          "workers_max after SIGHUP")
    write_file(conf, "[workers]\nmax = lots\n")
    d.signal(signal.SIGHUP)
    check(wait_until(lambda: "keeping the running conf" in d.log_text(), 5),
          "no word of the broken conf:\n%s" % d.log_tail())
    check(d.alive(), "emberd died on a broken conf")
    check_eq(d.client().status()["workers_max"], 3, "workers_max kept")
    check_eq(d.client().count(range_plan(0, 100, 4)), 100, "count")


@no_daemon
def test_stale_socket_replaced(_):
    d = Daemon(start=False)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(d.socket)
    stale.close()
    check(os.path.exists(d.socket), "no stale socket to start with")
    d.start()
    check_eq(d.client().count(range_plan(0, 10, 2)), 10, "count")
    d.signal(signal.SIGTERM)
    check_eq(d.wait(), 0, "exit status")


@no_daemon
def test_socket_in_use(_):
    first = Daemon()
    r = run_emberd(["-f", "--set", "daemon.socket=" + first.socket])
    check(r.returncode != 0, "a second emberd took a live socket")
    check(first.socket in r.stderr, "stderr %r lacks the socket" % r.stderr)
    check_eq(first.client().count(range_plan(0, 10, 2)), 10,
             "the first emberd still serves")


@no_daemon
def test_socket_mode(_):
    d = Daemon(sets=["daemon.socket_mode=0600"])
    check_eq(os.stat(d.socket).st_mode & 0o777, 0o600, "socket mode")


@no_daemon
def test_version(_):
    r = run_emberd(["-V"])
    check_eq(r.returncode, 0, "exit status of -V")
    check(r.stdout.startswith("emberd "), "version output %r" % r.stdout)


if __name__ == "__main__":
    run_tests(globals())
