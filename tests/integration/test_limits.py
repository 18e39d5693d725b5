"""
One user must not starve another, nor make emberd grow without bound.

Run as root (as CI does), these tests create two unprivileged users of
their own (removed at the end), run emberd as root, and attack it as one
user while the other, or root, checks that it is still served: limits hit
with LIMIT_EXCEEDED naming their conf key, partial frames timed out, merged
results bounded, passed descriptors that cannot lock others out, stalled
streams that do not hold the workers, the memory of closed sessions given
back.  Not root, the tests that need users
say so and do nothing; the shutdown test runs either way.
"""

import json
import os
import re
import resource
import signal
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403
from users import *	# noqa: E402,F403

SHARED = ["daemon.socket_mode=0666"]


def check_limit(err, key_is, what):
    """err, an (class, message) pair, is LIMIT_EXCEEDED naming the limit:
    its message starts with key_is ("daemon.max_x is N")."""
    check(err is not None, "%s: no error" % what)
    check_eq(err[0], "LIMIT_EXCEEDED", "%s (message %r)" % (what, err[1]))
    check(err[1].startswith(key_is), "%s: message %r" % (what, err[1]))


def error_of(reply):
    """(class, message) of an error reply, or None."""
    if reply.get("ok") is not False:
        return None
    return (reply["error"]["class"], reply["error"]["message"])


class RssWatch:
    """Sample emberd's resident memory every 20 ms until stopped."""

    def __init__(self, d):
        self.d = d
        self.start_kb = d.rss_kb()
        self.peak_kb = self.start_kb
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while self.running:
            try:
                self.peak_kb = max(self.peak_kb, self.d.rss_kb())
            except (OSError, AssertionError):
                return
            time.sleep(0.02)

    def stop(self):
        self.running = False
        self.thread.join()
        return (self.peak_kb - self.start_kb) // 1024


# ---------------------------------------------------------------------------
# Fairness and stalls

def _long_lines(d, n=2000, width=4000):
    lines = ["%05d %s" % (i, "x" * width) for i in range(n)]
    path = write_file(d.path("long.txt"), "\n".join(lines) + "\n")
    os.chmod(path, 0o644)
    return path, [l.encode() for l in lines]


# ---------------------------------------------------------------------------
# Frames, connections, descriptors

@needs_users
@with_daemon(sets=SHARED + ["daemon.request_timeout=2s"])
def test_stalled_partial_frames_are_closed(d):
    """64 connections of user a each send most of a 16 MiB frame and stop:
    emberd holds no more of them than daemon.max_input_per_uid allows,
    closes every one within the request timeout, and its RSS stays
    bounded; user b is served all along."""
    size = 16 * 1024 * 1024 - 64
    body = b"{" + b" " * (size - 1024)

    def attack(ctl):
        results = [None] * 64

        def one(i):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(15)
            s.connect(d.socket)
            start = time.monotonic()
            reply = None
            try:
                s.sendall(struct.pack(">i", size) + body)
            except OSError:
                pass
            buf = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
            except OSError:
                pass
            if len(buf) >= 4:
                n = struct.unpack(">i", buf[:4])[0]
                if 0 <= n <= len(buf) - 4:
                    reply = json.loads(buf[4:4 + n])
            results[i] = [time.monotonic() - start,
                          error_of(reply) if reply else None]
            s.close()
        threads = [threading.Thread(target=one, args=(i,))
                   for i in range(64)]
        for t in threads:
            t.start()
        ctl.ready()
        for t in threads:
            t.join()
        return results

    watch = RssWatch(d)
    a = AsUser(USERS["a"], attack)
    try:
        a.wait_ready()
        time.sleep(0.5)

        def status_round_trip():
            with d.client() as c:
                start = time.monotonic()
                c.status()
                return time.monotonic() - start
        took = as_user("b", status_round_trip)
        check(took < 1.0, "b's status took %.2fs during the attack" % took)
        results = a.result()
    finally:
        a.close()
    grew = watch.stop()
    check(grew < 200 + _asan_slack(), "emberd grew by %d MiB" % grew)
    for took, err in results:
        check(took < 2.0 + 4.0, "a stalled frame's connection was closed "
              "after %.1fs" % took)
    errors = [e for _, e in results if e is not None]
    check(all(e[0] == "LIMIT_EXCEEDED" for e in errors),
          "errors: %r" % errors[:3])
    timed = [e for e in errors if e[1].startswith("daemon.request_timeout")]
    refused = [e for e in errors if e[1].startswith(
        "daemon.max_input_per_uid")]
    check(timed, "no connection was told daemon.request_timeout: %r" %
          errors[:3])
    check(refused, "no frame was refused by daemon.max_input_per_uid: %r" %
          errors[:3])
    with d.client() as c:
        check_eq(c.count(range_plan(0, 10, 2)), 10, "a job after")


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_connections_per_uid=120"],
             nofile=1024)
def test_passed_descriptors_do_not_lock_others_out(d):
    """With nofile at 1024, users a and b each hold 120 connections that
    passed descriptors with every frame: root still connects and is
    served."""
    target = d.path("passed")
    write_file(target, "x")
    os.chmod(target, 0o644)

    def hold(ctl):
        socks = []
        for _ in range(120):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            try:
                s.connect(d.socket)
            except OSError:
                break
            fds = [os.open(target, os.O_RDONLY) for _ in range(4)]
            try:
                socket.send_fds(s, [struct.pack(">i", 2) + b"{}"], fds)
            except OSError:
                pass
            for fd in fds:
                os.close(fd)
            socks.append(s)
        ctl.ready(len(socks))
        ctl.wait_go()
        return len(socks)

    holders = [AsUser(USERS[tag], hold) for tag in ("a", "b")]
    try:
        for h in holders:
            h.wait_ready()
        time.sleep(0.5)
        c = d.client(timeout=5)
        check_eq(c.count(range_plan(0, 100, 2)), 100, "root's job")
        c.close()
    finally:
        for h in holders:
            h.close()


@needs_users
@with_daemon(sets=SHARED, nofile=1024)
def test_descriptor_flood_waits_for_the_closer(d):
    """User a sends, on 8 connections for 4 s, messages of 253 descriptors
    each (the most one carries), none of which a request takes: emberd
    takes them as fast as its closer's thread closes them, not faster.
    With nofile at 1024 it never holds more than 900 descriptors, and
    root connects and is served, each job within 2 s, all along."""
    def flood(ctl):
        r, w = os.pipe()
        socks = []
        for _ in range(8):
            s = socket.socket(socket.AF_UNIX)
            s.connect(d.socket)
            s.settimeout(0.2)
            socks.append(s)
        ctl.ready()
        ctl.wait_go()
        end = time.monotonic() + 4
        sent = 0
        while time.monotonic() < end:
            for s in socks:
                try:
                    socket.send_fds(s, [b"\0"], [r] * 253)
                    sent += 1
                except OSError:
                    pass
        return sent
    a = AsUser(USERS["a"], flood)
    peak = [0]
    running = [True]

    def sample():
        while running[0]:
            try:
                peak[0] = max(peak[0], len(os.listdir("/proc/%d/fd" %
                                                      d.pid)))
            except OSError:
                pass
            time.sleep(0.01)
    sampler = threading.Thread(target=sample, daemon=True)
    jobs, worst = 0, 0.0
    try:
        a.wait_ready()
        sampler.start()
        a.go()
        end = time.monotonic() + 4
        while time.monotonic() < end:
            start = time.monotonic()
            with d.client(timeout=5) as c:
                check_eq(c.count(range_plan(0, 10, 2)), 10, "root's job")
            worst = max(worst, time.monotonic() - start)
            jobs += 1
        sent = a.result()
    finally:
        running[0] = False
        a.close()
    sampler.join(5)
    print("%d messages of 253 descriptors; emberd held %d at most; %d "
          "jobs of root's meanwhile, the slowest %.3fs" % (sent, peak[0],
                                                          jobs, worst))
    check(peak[0] < 900, "emberd held %d descriptors" % peak[0])
    check(worst < 2.0, "root's job took %.3fs" % worst)


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_connections_per_uid=3",
                            "daemon.max_connections=5"])
def test_connection_limits_name_their_keys(d):
    """The per-uid and the total connection limits, each by its key."""
    def hold(n, ctl):
        clients = [d.client() for _ in range(n)]
        extra = d.client(hello=False)
        ctl.ready(error_of(extra.recv_json()))
        ctl.wait_go()
        return len(clients)

    a = AsUser(USERS["a"], lambda ctl: hold(3, ctl))
    try:
        err = a.wait_ready()
        check_limit(err, "daemon.max_connections_per_uid is 3",
                    "a's 4th connection")

        def two_then_refused():
            held = [d.client(), d.client()]
            extra = d.client(hello=False)
            return [error_of(extra.recv_json()), len(held)]
        err, _ = as_user("b", two_then_refused)
        check_limit(err, "daemon.max_connections is 5", "b's 3rd connection")
    finally:
        a.close()

    def connect():
        # emberd may read the closed connections' ends after this one.
        try:
            return d.client()
        except RequestFailed:
            return None
    c = wait_until(connect, 10)
    check(c is not None, "a connection once a and b left")
    with c:
        check_eq(c.count(range_plan(0, 10, 2)), 10, "a job once a left")


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_sessions_per_uid=4",
                            "daemon.max_sessions=5"])
def test_sessions_bounded_per_uid(d):
    """Each hello makes a session that outlives its connection, for
    session.timeout: user a's thousand hellos, each on a connection left
    without close_session, leave a holding 4 sessions, its newest, and
    the older ones closed to make room.  Sessions all held by their
    connections are refused, each bound by its key, and another uid's
    session is never closed to make room."""
    def flood():
        kept = []
        for _ in range(1000):
            with d.client() as c:
                kept.append(c.session)
        return kept[-4:]
    newest = as_user("a", flood)

    def hold(n, ctl):
        clients = [d.client() for _ in range(n)]
        extra = d.client(hello=False)
        extra.send_json({"op": "hello", "version": 1})
        ctl.ready(error_of(extra.recv_json()))
        ctl.wait_go()
        return [c.session for c in clients]

    def sessions_of(uid):
        with d.client() as c:
            s = c.status()
            ids = [x["id"] for x in s["sessions"] if x["uid"] == uid]
            c.request_ok({"op": "close_session"})
        return ids
    check_eq(sorted(sessions_of(USERS["a"][0])), sorted(newest),
             "a's sessions after a thousand hellos")
    a = AsUser(USERS["a"], lambda ctl: hold(4, ctl))
    try:
        err = a.wait_ready()
        check_limit(err, "daemon.max_sessions_per_uid is 4",
                    "a's 5th session, the 4 others held")

        def one_then_refused():
            held = d.client()
            extra = d.client(hello=False)
            extra.send_json({"op": "hello", "version": 1})
            return [error_of(extra.recv_json()), held.session]
        err, _ = as_user("b", one_then_refused)
        check_limit(err, "daemon.max_sessions is 5", "b's 2nd session")
        a.go()
        held = a.result()
    finally:
        a.close()
    check_eq(len(held), 4, "a's sessions held")
    log = d.log_text()
    check("closed to make room" in log, "no session closed to make room")


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_sessions_per_uid=4",
                            "daemon.max_sessions=5"])
def test_root_reaches_emberd_past_everyone_s_sessions(d):
    """With daemon.max_sessions taken by other users, root's hello still
    makes a session, bound by max_sessions_per_uid alone: root must see
    who holds them."""
    def hold(n, ctl):
        clients = [d.client() for _ in range(n)]
        ctl.ready(len(clients))
        ctl.wait_go()
        return [c.session for c in clients]
    a = AsUser(USERS["a"], lambda ctl: hold(4, ctl))
    b = AsUser(USERS["b"], lambda ctl: hold(1, ctl))
    try:
        check_eq(a.wait_ready(), 4, "a's sessions")
        check_eq(b.wait_ready(), 1, "b's sessions")
        with d.client() as c:
            s = c.status()
            uids = sorted(x["uid"] for x in s["sessions"])
        check_eq(uids, sorted([USERS["a"][0]] * 4 + [USERS["b"][0], 0]),
                 "sessions root's status shows")
        roots = [d.client() for _ in range(4)]
        extra = d.client(hello=False)
        extra.send_json({"op": "hello", "version": 1})
        check_limit(error_of(extra.recv_json()),
                    "daemon.max_sessions_per_uid is 4",
                    "root's 5th session")
        for c in roots + [extra]:
            c.close()
        a.go()
        b.go()
        a.result()
        b.result()
    finally:
        a.close()
        b.close()


def private_dirty_kb(pid):
    """The pages pid wrote and keeps (smaps_rollup's Private_Dirty), kB:
    the heap malloc holds, freed or not, as the kernel charges it."""
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Private_Dirty:"):
                return int(line.split()[1])
    raise AssertionError("no Private_Dirty for pid %d" % pid)


@skip_with_sanitizer("address", "its allocator is not malloc's")
@with_daemon(sets=["daemon.max_connections_per_uid=2100",
                   "daemon.max_connections=2100",
                   "daemon.max_sessions_per_uid=2100"], nofile=8192)
def test_closed_sessions_give_their_memory_back(d):
    """2,000 sessions held, then closed: emberd's written pages come back
    to within 1 MiB of the start (libevent's entries for their descriptor
    numbers were made at the start, not among each connection's
    allocations, and the freed pages are trimmed)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with d.client() as c:
        check_eq(c.count(range_plan(0, 10, 1)), 10, "a warm-up job")
    start = wait_steady(lambda: private_dirty_kb(d.pid), 5.0)
    clients = [d.client() for _ in range(2000)]
    held = private_dirty_kb(d.pid)
    check(held - start > 2048, "2,000 sessions took %d kB" % (held - start))
    for c in clients:
        c.request_ok({"op": "close_session"})
        c.close()
    back = wait_until(lambda: private_dirty_kb(d.pid) - start <= 1024,
                      10.0)
    check(back, "still %d kB over the start of %d kB, after "
          "holding %d kB more" % (private_dirty_kb(d.pid) - start, start,
                                  held - start))


def _two_kept_as_text(d, plan):
    """Two operations of plan, left running: emberd's memory grows by
    less than 32 MB for them.  Their clients, to close."""
    with d.client() as c:
        check_eq(c.count(range_plan(0, 10, 1)), 10, "a warm-up job")
    start = wait_steady(lambda: private_dirty_kb(d.pid), 5.0)
    clients = []
    try:
        for _ in range(2):
            c = d.client()
            clients.append(c)
            c.execute_ok(plan, "iterate")
        kept = lambda: private_dirty_kb(d.pid) - start	# noqa: E731
        small = wait_until(lambda: kept() < 32 * 1024, 10.0)
        check(small, "two operations keep %d kB of emberd's" % kept())
    except BaseException:
        for c in clients:
            c.close()
        raise
    return clients


@skip_with_sanitizer("address", "its allocator is not malloc's")
@with_daemon()
def test_parallelize_records_are_not_kept_as_a_tree(d):
    """Two operations whose plans hold a million empty records each (4 MB
    frames), left running: emberd keeps their plans' text, not the
    records' tree, which costs twenty times more (80 bytes a record) and
    would let a user's 64 operations hold gigabytes of emberd's."""
    n = 1000000
    clients = _two_kept_as_text(d, {"source": {"parallelize": {
        "records": [""] * n}}, "partitions": 1})
    try:
        with d.client() as c:
            ops = [o for o in c.status()["operations"]
                   if o["what"] == "parallelize %d" % n]
        check_eq(len(ops), 2, "the operations, described")
    finally:
        for c in clients:
            c.close()


@skip_with_sanitizer("address", "its allocator is not malloc's")
@with_daemon()
def test_wide_plans_records_are_not_kept_as_a_tree(d):
    """The same for a plan cut into stages: a distinct over a million
    empty records, left running, keeps its stages' text, not a tree of
    the records for its map stage."""
    clients = _two_kept_as_text(d, {"source": {"parallelize": {
        "records": [""] * 1000000}}, "partitions": 1,
        "ops": [{"distinct": {"partitions": 1}}]})
    try:
        c = clients[0]
        c.write_int(REQUEST_NEXT)
        check_eq(c.read_partition(), (1, [b""]), "the distinct records")
    finally:
        for c in clients:
            c.close()


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_plan_bytes_per_uid=1m",
                            "daemon.max_plan_bytes=3m", "session.timeout=0"])
def test_plans_kept_are_bounded(d):
    """The text of the plans emberd keeps for running operations (a
    parallelize source's records are in it) is held against
    daemon.max_plan_bytes_per_uid and daemon.max_plan_bytes: a third
    operation of 400 kB is refused while two run, and fits once one
    ended; an operation in stages is charged its stages' plans."""
    def plan(n, wide=False):
        p = {"source": {"parallelize": {"records": ["x" * 99] * n}},
             "partitions": 1}
        if wide:
            p["ops"] = [{"distinct": {"partitions": 1}}]
        return p

    def hold_two_then_third():
        held = [d.client(), d.client()]
        for c in held:
            c.execute_ok(plan(4000), "iterate")
        third = d.client()
        err = error_of(third.execute(plan(4000), "iterate"))
        used = [u["limits"]["daemon.max_plan_bytes_per_uid"]["used"]
                for u in third.status()["limits"]["users"]]
        held[0].close()
        ok = wait_until(lambda: third.execute(plan(4000), "count").get(
            "ok") is True, 10)
        wide = error_of(third.execute(plan(7000, True), "count"))
        return [err, used, ok, wide]
    err, used, ok, wide = as_user("a", hold_two_then_third)
    check_limit(err, "daemon.max_plan_bytes_per_uid is 1048576",
                "a third operation of 400 kB")
    check(len(used) == 1 and 800000 < used[0] <= 1048576,
          "held: %r" % used)
    check(ok, "an operation once one of the two ended")
    check_limit(wide, "daemon.max_plan_bytes_per_uid is 1048576",
                "a distinct of 700 kB, kept as its map stage's plan")
    asked = int(re.search(r"asked for (\d+) more", wide[1]).group(1))
    check(700000 < asked < 800000, "the distinct asked for %d" % asked)
    with d.client() as c:
        check_eq(c.count(plan(4000)), 4000, "root's job beside a's")

@skip_with_sanitizer("address", "its allocator is not malloc's")
@with_daemon()
def test_lazy_checkpoint_plans_are_kept_as_text(d):
    """Two lazy checkpoints, one local and one reliable, of plans holding
    a million empty records each (4 MB frames): emberd keeps their plans
    as text, not as a tree twenty times bigger, each of the 64 a uid may
    hold for as long as it likes; the checkpoints still compute."""
    n = 1000000
    plan = {"source": {"parallelize": {"records": [""] * n}},
            "partitions": 1}
    with d.client() as c:
        check_eq(c.count(range_plan(0, 10, 1)), 10, "a warm-up job")
        start = wait_steady(lambda: private_dirty_kb(d.pid), 5.0)
        ids = [c.execute_ok(plan, "checkpoint", {"local": local,
                                                 "eager": False})
               ["checkpoint"] for local in (True, False)]
        kept = lambda: private_dirty_kb(d.pid) - start	# noqa: E731
        small = wait_until(lambda: kept() < 32 * 1024, 10.0)
        check(small, "two lazy checkpoints keep %d kB of emberd's" % kept())
        for cid in ids:
            check_eq(c.count({"source": {"checkpoint": cid}}), n,
                     "checkpoint %s counted" % cid)


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_input_per_uid=64k"])
def test_input_limit_names_its_key(d):
    def big_frame():
        c = d.client()
        c.send(struct.pack(">i", 100 * 1024) + b"{")
        return [error_of(c.recv_json()), c.at_eof(5)]
    err, closed = as_user("a", big_frame)
    check_limit(err, "daemon.max_input_per_uid is 65536",
                "a frame over the input limit")
    check(closed, "the connection stays open")
    with d.client() as c:
        check_eq(c.count(range_plan(0, 10, 2)), 10, "a job after")


@needs_users
@with_daemon(sets=SHARED + ["daemon.request_timeout=1s",
                            "daemon.idle_timeout=1500ms"])
def test_request_and_idle_timeouts(d):
    """A partial frame is closed after daemon.request_timeout, an idle
    connection after daemon.idle_timeout; a stream being read slowly is
    not idle."""
    def partial():
        c = d.client()
        start = time.monotonic()
        c.send(struct.pack(">i", 1000) + b"{\"op\"")
        err = error_of(c.recv_json())
        return [err, c.at_eof(5), time.monotonic() - start]
    err, closed, took = as_user("a", partial)
    check_limit(err, "daemon.request_timeout is 1000ms", "a partial frame")
    check(closed and 0.9 < took < 4, "closed %r after %.2fs" % (closed, took))

    def idle():
        c = d.client()
        start = time.monotonic()
        closed = c.at_eof(6)
        return [closed, time.monotonic() - start]
    closed, took = as_user("b", idle)
    check(closed and 1.4 < took < 5, "idle connection closed %r after "
          "%.2fs" % (closed, took))

    path, lines = _long_lines(d)

    def slow_reader():
        c = d.client()
        c.execute_ok(text_plan([path], 1), "iterate")
        c.write_int(REQUEST_NEXT)
        check_eq(c.read_int(), STREAM_PARTITION, "partition")
        got = []
        start = time.monotonic()
        while True:
            rec = c.read_record()
            if rec == END_OF_DATA_SECTION:
                break
            got.append(rec)
            time.sleep(0.002)
        c.write_int(REQUEST_NEXT)
        return [c.read_partition()[0], got == lines,
                time.monotonic() - start]
    done, same, took = as_user("a", slow_reader)
    check_eq(done, STREAM_DONE, "the slow stream's end")
    check(same, "the slow stream's records")
    check(took > 3, "the stream was read in %.1fs, not slowly" % took)


# ---------------------------------------------------------------------------
# Operations, results, broadcasts

def _asan_slack():
    """MiB that AddressSanitizer keeps of freed memory (its quarantine,
    256 MiB by default, with the shadow and the allocator's own pages of
    what it holds) and that RSS then counts: not emberd's growth."""
    return 384 if "address" in build_sanitizers() else 0


def _sleeper(n=1):
    return records_plan(["x"] * n, n, ops=[{"pipe": {"command":
                                                     "sleep 30"}}])


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_operations_per_uid=2",
                            "daemon.max_operations=3", "workers.max=4"])
def test_operation_limits_name_their_keys(d):
    def hold(n, ctl):
        clients = []
        for _ in range(n):
            c = d.client()
            # Not reattachable: closing the client ends it, so the
            # limit is free again for served() below.
            c.execute_ok(_sleeper(), "iterate", {"reattachable": False})
            clients.append(c)
        extra = d.client()
        ctl.ready(error_of(extra.execute(_sleeper(), "iterate")))
        ctl.wait_go()
        return n

    a = AsUser(USERS["a"], lambda ctl: hold(2, ctl))
    try:
        err = a.wait_ready()
        check_limit(err, "daemon.max_operations_per_uid is 2",
                    "a's 3rd operation")

        def b_ops():
            c1 = d.client()
            c1.execute_ok(_sleeper(), "iterate", {"reattachable": False})
            c2 = d.client()
            return error_of(c2.execute(_sleeper(), "iterate"))
        err = as_user("b", b_ops)
        check_limit(err, "daemon.max_operations is 3",
                    "b's 2nd operation, 4th in all")
    finally:
        a.close()

    def served():
        with d.client() as c:
            return c.count(range_plan(0, 10, 2)) == 10
    check(wait_until(lambda: as_user("a", served), 10, 0.2),
          "a is not served once its operations ended")


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_results_per_uid=64m",
                            "workers.max=2"])
def test_concurrent_count_by_value_bounded(d):
    """Four concurrent count_by_value jobs of user a with 3M distinct values
    each are refused by daemon.max_results_per_uid and emberd's RSS stays
    bounded; meanwhile user b's count_by_value is answered, and a's next
    small one too."""
    plan = range_plan(0, 3000000, 4)

    def attack(ctl):
        results = [None] * 4

        def one(i):
            with d.client(timeout=90) as c:
                results[i] = error_of(c.execute(plan, "count_by_value"))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        ctl.ready()
        for t in threads:
            t.join()
        with d.client() as c:
            small = c.execute(range_plan(0, 1000, 4), "count_by_value")
            check(small["ok"], "a's small count_by_value: %r" % small)
        return [results, len(small.get("counts", {}))]

    watch = RssWatch(d)
    a = AsUser(USERS["a"], attack)
    try:
        a.wait_ready()

        def small():
            with d.client(timeout=90) as c:
                return c.execute(records_plan(["x", "y", "x"], 2),
                                 "count_by_value").get("counts")
        check_eq(as_user("b", small), {"x": 2, "y": 1}, "b's counts")
        results, small_counts = a.result()
    finally:
        a.close()
    grew = watch.stop()
    for err in results:
        check_limit(err, "daemon.max_results_per_uid is 67108864",
                    "a count_by_value of 3M values")
    check_eq(small_counts, 1000, "a's small count_by_value after")
    check(grew < 64 + 160 + _asan_slack(), "emberd grew by %d MiB" % grew)


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_results=4m"])
def test_total_results_limit_names_its_key(d):
    def big():
        with d.client() as c:
            return error_of(c.execute(range_plan(0, 200000, 2),
                                      "count_by_value"))
    err = as_user("a", big)
    check_limit(err, "daemon.max_results is 4194304",
                "over daemon.max_results")


def _results_held(d, uid):
    """What uid holds of daemon.max_results_per_uid, and its connections,
    as root's status shows them."""
    with d.client() as c:
        for u in c.status()["limits"]["users"]:
            if u["uid"] == uid:
                lim = u["limits"]
                return (lim["daemon.max_results_per_uid"]["used"],
                        lim["daemon.max_connections_per_uid"]["used"])
    return (0, 0)


def _operations_of(d, uid):
    with d.client() as c:
        return [o for o in c.status()["operations"]
                if o["session"] in _sessions_of(c, uid)]


def _sessions_of(c, uid):
    return [s["id"] for s in c.status()["sessions"] if s["uid"] == uid]


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_results_per_uid=16m",
                            "workers.max=2"])
def test_unread_replies_are_charged(d):
    """count_by_value replies that user a leaves unread (a small receive
    buffer, never read) are charged to a's daemon.max_results_per_uid
    until written: status shows them held, a further count_by_value is
    refused with LIMIT_EXCEEDED naming the key, and emberd does not grow
    with them; b is served meanwhile."""
    plan = range_plan(0, 100000, 2)	# a reply of about 1 MiB
    uid = USERS["a"][0]

    def attack(ctl):
        held = []
        for _ in range(12):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(d.socket)
            c = Client.__new__(Client)
            c.sock, c.buf, c.session = s, bytearray(), None
            c.sock.settimeout(30)
            check(c.hello()["ok"], "hello")
            c.send_json({"op": "execute", "plan": plan,
                         "action": "count_by_value"})
            held.append(c)
            # One at a time: the next one sees what this one holds.
            check(c.sock.recv(1, socket.MSG_PEEK) != b"", "closed")
            ctl.ready()
            ctl.wait_go()
        with d.client(timeout=60) as c:
            err = error_of(c.execute(plan, "count_by_value"))
        ctl.ready(err)
        ctl.wait_go()
        return len(held)

    watch = RssWatch(d)
    a = AsUser(USERS["a"], attack)
    try:
        for _ in range(12):
            a.wait_ready()
            check(wait_until(lambda: not [
                o for o in _operations_of(d, uid)
                if o["state"] != "complete"], 30), "a's count_by_value "
                "did not end")
            a.go()
        err = a.wait_ready()
        held, conns = _results_held(d, uid)
        check_limit(err, "daemon.max_results_per_uid is 16777216",
                    "a's count_by_value past its unread replies")
        check(held > 4 << 20, "a's unread replies hold %d bytes of "
              "results" % held)
        check(held <= 16 << 20, "a holds %d bytes, over its bound" % held)

        def small():
            with d.client() as c:
                return c.execute(records_plan(["x", "y", "x"], 2),
                                 "count_by_value").get("counts")
        check_eq(as_user("b", small), {"x": 2, "y": 1}, "b's counts")
        a.go()
        check_eq(a.result(), 12, "a's unread connections")
    finally:
        a.close()
    grew = watch.stop()
    check(grew < 16 + 64 + _asan_slack(), "emberd grew by %d MiB" % grew)
    check(wait_until(lambda: _results_held(d, uid) == (0, 0), 10),
          "a's closed connections still hold %r" % (_results_held(d, uid),))


@needs_users
@with_daemon(sets=SHARED + ["daemon.write_timeout=1s",
                            "daemon.idle_timeout=30s"])
def test_unread_output_cut_after_write_timeout(d):
    """A client that takes none of a queued reply for daemon.write_timeout
    is cut, and what its reply held is free again; one that reads slowly
    is not."""
    uid = USERS["a"][0]

    def attack(ctl):
        c = d.client()
        c.send_json({"op": "execute", "plan": range_plan(0, 100000, 2),
                     "action": "count_by_value"})
        ctl.ready()
        ctl.wait_go()
        # Cut: what the kernel held arrives, then the end, not the reply.
        n = c.read_int()
        got = 0
        try:
            while got < n:
                chunk = c.sock.recv(65536)
                if not chunk:
                    break
                got += len(chunk)
        except OSError:
            pass
        return [n, got]

    a = AsUser(USERS["a"], attack)
    try:
        a.wait_ready()
        start = time.monotonic()
        check(wait_until(lambda: _results_held(d, uid)[0] > 0, 30),
              "a's reply is not held")
        check(wait_until(lambda: _results_held(d, uid) == (0, 0), 10),
              "a's unread connection still open and holding %r after %.1fs"
              % (_results_held(d, uid), time.monotonic() - start))
        a.go()
        n, got = a.result()
    finally:
        a.close()
    check(got < n, "the whole reply (%d of %d bytes) after the cut" %
          (got, n))
    check("daemon.write_timeout" in d.log_text(), "the log does not name "
          "daemon.write_timeout")

    path, lines = _long_lines(d, n=300)

    def slow_reader():
        with d.client() as c:
            c.execute_ok(text_plan([path], 1), "iterate")
            c.write_int(REQUEST_NEXT)
            check_eq(c.read_int(), STREAM_PARTITION, "partition")
            got = []
            while True:
                rec = c.read_record()
                if rec == END_OF_DATA_SECTION:
                    break
                got.append(rec)
                time.sleep(0.01)
            c.write_int(REQUEST_NEXT)
            return [c.read_partition()[0], got == lines]
    done, same = as_user("b", slow_reader)
    check_eq(done, STREAM_DONE, "the slow stream's end")
    check(same, "the slow stream's records")


def _refused_put(c, size):
    """broadcast_put of size bytes, refused at once: (class, message)."""
    return error_of(c.request({"op": "broadcast_put", "size": size}))


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_broadcasts_per_uid=2",
                            "daemon.max_broadcasts=3",
                            "daemon.max_broadcast_bytes_per_uid=1m",
                            "daemon.max_broadcast_bytes=1500k"])
def test_broadcast_limits_name_their_keys(d):
    """Per uid and in all, the count and the bytes of broadcasts kept."""
    def a_puts(ctl):
        c = d.client()
        c.broadcast_put(b"x" * (600 * 1024))
        over_bytes = _refused_put(c, 600 * 1024)
        c.broadcast_put(b"1\n")
        over_count = _refused_put(c, 2)
        ctl.ready([over_bytes, over_count])
        ctl.wait_go()
        return None

    a = AsUser(USERS["a"], a_puts)
    try:
        over_bytes, over_count = a.wait_ready()
        check_limit(over_bytes,
                    "daemon.max_broadcast_bytes_per_uid is 1048576",
                    "a's 600k more")
        check_limit(over_count, "daemon.max_broadcasts_per_uid is 2",
                    "a's 3rd broadcast")

        def b_puts():
            c = d.client()
            over_bytes = _refused_put(c, 1000 * 1024)
            c.broadcast_put(b"x" * (800 * 1024))
            over_count = _refused_put(c, 2)
            return [over_bytes, over_count]
        over_bytes, over_count = as_user("b", b_puts)
    finally:
        a.close()
    check_limit(over_bytes, "daemon.max_broadcast_bytes is 1536000",
                "b over the total bytes")
    check_limit(over_count, "daemon.max_broadcasts is 3",
                "b over the total count")


# ---------------------------------------------------------------------------
# Shutdown

@no_daemon
def test_shutting_down_frames(_):
    """When the grace runs out, an interrupted stream gets an error frame
    that starts with SHUTTING_DOWN and an interrupted count the error
    class, both written before emberd closes."""
    d = Daemon(sets=["daemon.shutdown_grace=1s", "workers.max=2"])
    stream = d.client()
    stream.execute_ok(_sleeper(), "iterate")
    stream.write_int(REQUEST_NEXT)
    counting = d.client()
    counting.send_json({"op": "execute", "plan": _sleeper(), "action":
                        "count"})
    wait_until(lambda: len([p for p in d.snapshot()
                            if "sleep 30" in cmdline(p)]) >= 2, 10)
    d.signal(signal.SIGTERM)
    status, message = stream.read_partition()
    check(status in (STREAM_ERROR, EXCEPTION_THROWN), "stream status %d" %
          status)
    if status == EXCEPTION_THROWN:
        message = message[1]
    check(message.startswith("SHUTTING_DOWN: "), "stream's error frame %r"
          % message)
    check_error(counting.recv_json(), "SHUTTING_DOWN")
    check(stream.at_eof(5) and counting.at_eof(5), "connections left open")
    check_eq(d.wait(10), 0, "exit status")


@no_daemon
def test_sessions_over_a_lowered_bound_make_room(_):
    """After a SIGHUP lowers daemon.max_sessions_per_uid below the idle
    sessions a uid holds, its next hello closes as many of them as it
    takes, not one, and is answered."""
    d = Daemon(conf=None, start=False)
    conf = write_file(d.path("ember.conf"),
                      "[daemon]\nmax_sessions_per_uid = 8\n")
    d.conf = conf
    d.start()
    for _ in range(6):
        with d.client():
            pass
    write_file(conf, "[daemon]\nmax_sessions_per_uid = 3\n")
    d.signal(signal.SIGHUP)
    check(wait_until(lambda: "SIGHUP: conf reloaded" in d.log_text(), 5),
          "no reload:\n%s" % d.log_tail())
    with d.client(hello=False) as c:
        reply = c.hello()
        check(reply.get("ok"), "hello over the lowered bound: %r" % reply)
        mine = [x for x in c.status()["sessions"] if x["uid"] == 0]
        check_eq(len(mine), 3, "root's sessions")
    d.cleanup()


if __name__ == "__main__":
    run_tests(globals())
