"""Broadcasts: uploaded once per session, sent to each worker once, removed
from a worker when its task no longer uses them, and refused once dropped
or to another session."""

import os
import re
import struct

from harness import *

# Each partition's pipe prints the pid of the worker running it.
ECHO_PID = {"pipe": {"command": "cat >/dev/null; echo $PPID"}}


def in_bc(bid):
    return {"filter": {"in_broadcast": bid}}


def counters(c):
    return c.status()["counters"]


def held(c):
    """pid -> the sorted broadcast ids each worker holds."""
    return {w["pid"]: sorted(w["broadcasts"]) for w in c.status()["workers"]}


def listed(c):
    """id -> the status entry of each broadcast status lists."""
    return {b["id"]: b for b in c.status()["broadcasts"]}


def emberd_memfd(d, name):
    """The path, through /proc, of emberd's memfd named name, or None."""
    fds = "/proc/%d/fd" % d.pid
    for fd in os.listdir(fds):
        try:
            target = os.readlink(os.path.join(fds, fd))
        except OSError:
            continue
        if target.startswith("/memfd:%s " % name):
            return os.path.join(fds, fd)
    return None


def bc_file(d, bid):
    """Where emberd keeps a broadcast's bytes: a memfd of its own, named
    after the broadcast, reached here through /proc (emberd's descriptor);
    a path that does not exist once emberd holds no such memfd."""
    return (emberd_memfd(d, "ember-broadcast-%d" % bid) or
            "/proc/%d/fd/none" % d.pid)


def lines(values):
    return "".join("%d\n" % v for v in values).encode()


def refused_message(i, bid):
    return ("plan.ops[%d].filter.in_broadcast: no broadcast %d in this "
            "session" % (i, bid))


# ---------------------------------------------------------------------------
# Upload

def test_put_answers_id_and_size(d):
    """broadcast_put sent in several frames answers an id and the size, and
    status lists the broadcast."""
    c = d.client()
    data = lines(range(100))
    bid = c.broadcast_put(data, chunk=7)
    other = c.broadcast_put(b"a\nb\n")
    check(bid != other, "two broadcasts share id %d" % bid)
    bcs = listed(c)
    check(bid in bcs and other in bcs, "status broadcasts: %r" % bcs)
    check_eq(bcs[bid]["size"], len(data), "listed size")
    check_eq(bcs[bid]["complete"], True, "listed as complete")
    check_eq(bcs[bid]["session"], c.session, "listed session")
    check_eq(counters(c)["broadcasts"], 2, "broadcasts counter")
    with open(bc_file(d, bid), "rb") as f:
        check_eq(f.read(), data, "the bytes emberd keeps")


def test_filter_keeps_the_lines(d):
    """in_broadcast keeps the records equal to one of the lines, in every
    partition; a last line without a newline counts."""
    c = d.client()
    bid = c.broadcast_put(b"7\n42\n42\n1999\n100000\nx\n1234")
    got = c.collect_all(range_plan(0, 2000, 4, ops=[in_bc(bid)]))
    check_eq(got, [b"7", b"42", b"1234", b"1999"], "records kept")
    check_eq(c.count(range_plan(0, 2000, 8, ops=[in_bc(bid)])), 4, "count")


def test_empty_broadcast(d):
    """A broadcast of 0 bytes is answered at once and keeps no record."""
    c = d.client()
    bid = c.broadcast_put(b"")
    check_eq(listed(c)[bid]["size"], 0, "listed size")
    check_eq(c.collect_all(range_plan(0, 100, 2, ops=[in_bc(bid)])), [],
             "records kept")
    check_eq(c.count(range_plan(0, 100, 2)), 100, "a job after")


def test_frame_past_size_refused(d):
    """A frame that goes past the announced size breaks the framing: the
    broadcast is abandoned and the connection closed."""
    c = d.client()
    c.send_json({"op": "broadcast_put", "size": 4})
    c.send_frame(b"ab")
    c.send_frame(b"cde")
    check_error(c.recv_json(), "FRAME_INVALID")
    check(c.at_eof(), "connection still open")
    c2 = d.client()
    check_eq(listed(c2), {}, "broadcasts listed")
    check_eq(counters(c2)["broadcasts"], 0, "broadcasts counter")
    check_eq(c2.count(range_plan(0, 10, 2)), 10, "a job after")


def test_negative_frame_refused(d):
    """A negative length among a broadcast's frames breaks the framing."""
    c = d.client()
    c.send_json({"op": "broadcast_put", "size": 4})
    c.send_frame(b"ab")
    c.send(struct.pack(">i", -1))
    check_error(c.recv_json(), "FRAME_INVALID")
    check(c.at_eof(), "connection still open")
    check_eq(listed(d.client()), {}, "broadcasts listed")


def test_upload_cut_short_abandoned(d):
    """A client that closes before the last byte leaves no broadcast."""
    c = d.client()
    c.send_json({"op": "broadcast_put", "size": 100})
    c.send_frame(b"1\n2\n")
    c2 = d.client()
    wait_until(lambda: os.path.exists(bc_file(d, 0)), 2)
    c.close()
    wait_until(lambda: not os.path.exists(bc_file(d, 0)), 2)
    check(not os.path.exists(bc_file(d, 0)), "the partial upload's file "
          "is left")
    check_eq(listed(c2), {}, "broadcasts listed")
    check_eq(counters(c2)["broadcasts"], 0, "broadcasts counter")
    bid = c2.broadcast_put(b"1\n")
    check_eq(c2.count(range_plan(0, 10, 1, ops=[in_bc(bid)])), 1,
             "a broadcast after")


def test_bad_size_refused(d):
    """A negative size is refused and the connection stays usable."""
    c = d.client()
    check_error(c.request({"op": "broadcast_put", "size": -1}),
                "REQUEST_INVALID", "size")
    check_error(c.request({"op": "broadcast_put"}), "REQUEST_INVALID",
                "size")
    bid = c.broadcast_put(b"5\n")
    check_eq(c.collect_all(range_plan(0, 10, 1, ops=[in_bc(bid)])), [b"5"],
             "a broadcast after")


@with_daemon(sets=["daemon.max_broadcast=1k"])
def test_size_over_max_broadcast_refused(d):
    """A size over daemon.max_broadcast is refused before any byte."""
    c = d.client()
    check_error(c.request({"op": "broadcast_put", "size": 1025}),
                "REQUEST_INVALID", "daemon.max_broadcast")
    check_eq(c.broadcast_put(b"x" * 1024, chunk=100) >= 0, True,
             "a broadcast of the limit")


# ---------------------------------------------------------------------------
# What workers hold

@with_daemon(sets=["workers.max=1"])
def test_unused_broadcast_removed_from_worker(d):
    """A task using A and B, then a task using only B: the worker drops A
    and is not sent B again."""
    c = d.client()
    a = c.broadcast_put(lines(range(0, 100, 2)))
    b = c.broadcast_put(lines(range(0, 100, 3)))
    got = c.collect_all(range_plan(0, 100, 1, ops=[in_bc(a), in_bc(b)]))
    check_eq(got, numbers(0, 100, 6), "records in A and B")
    [(pid, ids)] = held(c).items()
    check_eq(ids, sorted([a, b]), "broadcasts worker %d holds" % pid)
    before = counters(c)
    check_eq(before["broadcasts_sent"], 2, "broadcasts sent")
    got = c.collect_all(range_plan(0, 100, 1, ops=[in_bc(b)]))
    check_eq(got, numbers(0, 100, 3), "records in B")
    check_eq(held(c), {pid: [b]}, "broadcasts held after a task using B")
    after = counters(c)
    check_eq(after["broadcasts_removed"], before["broadcasts_removed"] + 1,
             "broadcasts removed")
    check_eq(after["broadcasts_sent"], 2, "broadcasts sent")
    check_eq(c.count(range_plan(0, 100, 1)), 100, "a job without")
    check_eq(held(c), {pid: []}, "broadcasts held after a task using none")
    check_eq(counters(c)["broadcasts_removed"],
             before["broadcasts_removed"] + 2, "broadcasts removed")


@with_daemon(sets=["workers.max=1"])
def test_removed_broadcast_sent_again(d):
    """A broadcast removed from a worker is sent again when a later task
    uses it, and still filters right."""
    c = d.client()
    a = c.broadcast_put(b"3\n")
    b = c.broadcast_put(b"4\n")
    for bid, want in ((a, b"3"), (b, b"4"), (a, b"3")):
        check_eq(c.collect_all(range_plan(0, 10, 1, ops=[in_bc(bid)])),
                 [want], "records in broadcast %d" % bid)
        check_eq(list(held(c).values()), [[bid]], "held")
    k = counters(c)
    check_eq(k["broadcasts_sent"], 3, "broadcasts sent")
    check_eq(k["broadcasts_removed"], 2, "broadcasts removed")
    check_eq(k["broadcast_bytes_sent"], 6, "broadcast bytes sent")


BIG = lines(range(0, 1000000, 2))	# ~3.4 MB, 500000 lines


@with_daemon(sets=["workers.max=1"])
def test_bytes_cross_once(d):
    """Many tasks on one worker: the broadcast's bytes cross once."""
    c = d.client()
    bid = c.broadcast_put(BIG, chunk=1 << 20)
    for _ in range(3):
        check_eq(c.count(range_plan(0, 20000, 8, ops=[in_bc(bid)])), 10000,
                 "count")
    got = c.collect_all(range_plan(999990, 1000010, 4, ops=[in_bc(bid)]))
    check_eq(got, [b"999990", b"999992", b"999994", b"999996", b"999998"],
             "collect")
    k = counters(c)
    check_eq(k["tasks_completed"], 28, "tasks completed")
    check_eq(k["broadcasts_sent"], 1, "broadcasts sent")
    check_eq(k["broadcast_bytes_sent"], len(BIG), "broadcast bytes sent")
    check_eq(list(held(c).values()), [[bid]], "held")


@with_daemon(sets=["workers.max=3"])
def test_bytes_cross_once_per_worker(d):
    """Several workers: each gets the broadcast once, however many of its
    tasks use it."""
    c = d.client()
    bid = c.broadcast_put(BIG, chunk=1 << 20)
    pids = []
    for _ in range(2):
        parts = c.collect_partitions(range_plan(0, 24000, 12, ops=[
            in_bc(bid), ECHO_PID]))
        pids += [int(p[0]) for p in parts]
    workers = set(pids)
    check(len(pids) > len(workers), "no worker ran two tasks: %s" % pids)
    k = counters(c)
    check_eq(k["broadcasts_sent"], len(workers), "broadcasts sent to %d "
             "workers" % len(workers))
    check_eq(k["broadcast_bytes_sent"], len(workers) * len(BIG),
             "broadcast bytes sent")
    for pid, ids in held(c).items():
        check_eq(ids, [bid], "broadcasts worker %d holds" % pid)


@with_daemon(sets=["workers.max=1"])
def test_same_broadcast_twice_in_plan(d):
    """A plan naming a broadcast twice has it sent once."""
    c = d.client()
    bid = c.broadcast_put(b"4\n8\n")
    got = c.collect_all(range_plan(0, 10, 2, ops=[in_bc(bid),
                                                  {"map": "trim"},
                                                  in_bc(bid)]))
    check_eq(got, [b"4", b"8"], "records")
    check_eq(counters(c)["broadcasts_sent"], 1, "broadcasts sent")
    check_eq(list(held(c).values()), [[bid]], "held")


# ---------------------------------------------------------------------------
# Dropping, sessions

def test_drop_removes_the_file(d):
    """Dropping an unused broadcast removes its bytes from disk."""
    c = d.client()
    bid = c.broadcast_put(b"1\n")
    check(os.path.exists(bc_file(d, bid)), "no file for the broadcast")
    check(c.broadcast_drop(bid)["ok"], "drop")
    # The copies emberd passed a helper (the index's build) are closed by
    # the closer thread, soon but not before the drop's answer.
    check(wait_until(lambda: not os.path.exists(bc_file(d, bid)), 5),
          "the dropped broadcast's file is left")


def worker_maps(pid, name):
    """Does process pid map a memfd named name?"""
    with open("/proc/%d/maps" % pid) as f:
        return any(re.search(r"/memfd:%s( |$)" % re.escape(name), line)
                   for line in f)


@with_daemon(sets=["workers.max=1"])
def test_drop_lets_idle_workers_go_of_it(d):
    """A dropped broadcast is let go by the idle worker that held it at
    once, not at its next task: its memory does not outlive the drop in a
    worker waiting for work, and the next task does not unmap it.  The
    worker stays, and runs the next job."""
    c = d.client()
    bid = c.broadcast_put(BIG)
    check_eq(c.count(range_plan(0, 1000, 1, ops=[in_bc(bid)])), 500,
             "records in the broadcast")
    [(pid, ids)] = held(c).items()
    check_eq(ids, [bid], "held")
    name = "ember-broadcast-%d" % bid
    check(worker_maps(pid, name), "worker %d does not map %s" % (pid, name))
    removed = counters(c)["broadcasts_removed"]
    check(c.broadcast_drop(bid)["ok"], "drop")
    check(wait_until(lambda: not worker_maps(pid, name), 5),
          "worker %d still maps %s after the drop" % (pid, name))
    check_eq(held(c), {pid: []}, "held after the drop")
    check_eq(counters(c)["broadcasts_removed"], removed + 1,
             "broadcasts removed")
    other = c.broadcast_put(b"4\n")
    check_eq(c.collect_all(range_plan(0, 10, 1, ops=[in_bc(other)])),
             [b"4"], "the next job")
    check_eq(list(held(c)), [pid], "the same worker")


@with_daemon(sets=["workers.max=1"])
def test_drop_lets_a_stopped_worker_go_of_it(d):
    """A broadcast dropped while a stream through it is stopped is freed
    when the operation ends, while its worker still winds the stopped
    task down: that worker lets it go too once the task has ended."""
    c = d.client()
    bid = c.broadcast_put(BIG)
    c.execute_ok(range_plan(0, 20000000, 1, ops=[in_bc(bid)]), "iterate")
    other = d.client(hello=False)
    other.hello(session=c.session)
    check(wait_until(lambda: held(other), 10), "no worker holds it")
    [pid] = list(held(other))
    check(other.broadcast_drop(bid)["ok"], "drop")
    c.write_int(REQUEST_STOP)
    c.read_int()
    name = "ember-broadcast-%d" % bid
    check(wait_until(lambda: not worker_maps(pid, name), 5),
          "worker %d still maps %s after the stop: %r" %
          (pid, name, other.status()["workers"]))
    check_eq(held(other), {pid: []}, "held")
    check_eq(other.count(range_plan(0, 10, 1)), 10, "the next job")


def test_status_counts_operations_using(d):
    """status says how many operations use a broadcast."""
    c = d.client()
    bid = c.broadcast_put(b"1\n")
    check_eq(listed(c)[bid]["operations"], 0, "operations before")
    c.execute_ok(range_plan(0, 10, 2, ops=[in_bc(bid)]), "iterate")
    c2 = d.client()
    check_eq(listed(c2)[bid]["operations"], 1, "operations while one runs")
    check_eq([r for p in c.read_stream(pull=True) for r in p], [b"1"],
             "records")
    check_eq(listed(c)[bid]["operations"], 0, "operations after")


# ---------------------------------------------------------------------------
# The set index, built once at put

INDEX_HEADER = 64	# common/bindex.h


def index_file(d, bid):
    """The memfd of a broadcast's set index, as bc_file finds its bytes'."""
    return emberd_memfd(d, "ember-index-%d" % bid)


def real_lines():
    """The lines of a few files of the source tree, with duplicates, empty
    lines, a '\\r' before some newlines and a last line without one."""
    data = b""
    for name in ("docs/design.md", "docs/protocol.md", "Makefile.am"):
        with open(os.path.join(SRCDIR, name), "rb") as f:
            data += f.read()
    return data + b"crlf\r\n\n\nlast line, no newline"


def valid_utf8(b):
    """Can b go in a plan's JSON as text?"""
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


@with_daemon(sets=["workers.max=2"])
def test_index_answers_as_the_lines(d):
    """A broadcast is indexed when it is put (its reply says how big the
    index is, emberd holds it in a memfd of its own); the workers answer
    from it, building no set, exactly as the set of its lines answers:
    every line, and each cut short, grown, or with a '\\r' more."""
    data = real_lines()
    c = d.client()
    reply = c.broadcast_put_request(data)
    check(reply["ok"], "put: %r" % reply)
    bid = reply["broadcast"]
    check(isinstance(reply.get("index"), int) and
          reply["index"] > INDEX_HEADER, "put reply's index: %r" % reply)
    path = index_file(d, bid)
    check(path is not None, "no index memfd in emberd")
    check_eq(os.stat(path).st_size, reply["index"], "the index's size")
    check_eq(listed(c)[bid]["index"], reply["index"], "status's index")

    pieces = data.split(b"\n")
    members = set(pieces[:-1]) | ({pieces[-1]} if pieces[-1] else set())
    probes = set()
    for line in pieces:
        probes |= {line, line[:-1], line + b"x", line + b"\r", b"\r" + line}
    probes = sorted(p for p in probes if valid_utf8(p))
    got = c.collect_all(records_plan([p.decode() for p in probes], 4,
                                     ops=[in_bc(bid)]))
    check_eq(sorted(got), sorted(p for p in probes if p in members),
             "records kept")
    check(not re.search(r"set of \d+ lines .* built in", d.log_text()),
          "a worker built the set: %s" % d.log_tail())


def test_put_without_index(d):
    """"index": false puts the bytes alone (a pickled object has no lines
    to look up): no helper builds an index, and a filter on it still
    answers, from a set the worker builds."""
    c = d.client()
    reply = c.broadcast_put_request(b"3\n5\n", index=False)
    check(reply["ok"], "put: %r" % reply)
    bid = reply["broadcast"]
    check_eq(reply.get("index"), 0, "the reply's index")
    check(index_file(d, bid) is None, "an index memfd in emberd")
    check_eq(listed(c)[bid]["index"], 0, "status's index")
    check("(broadcast_index, uid" not in d.log_text(),
          "a helper built an index: %s" % d.log_tail())
    check_eq(sorted(c.collect_all(range_plan(0, 10, 2, ops=[in_bc(bid)]))),
             [b"3", b"5"], "records kept")
    check_error(c.broadcast_put_request(b"x", index=1), "REQUEST_INVALID",
                "broadcast_put: index: expected true or false")


@with_daemon(sets=["workers.max=1",
                   "daemon.max_broadcast_bytes_per_uid=4k"])
def test_index_counts_toward_the_limits(d):
    """The index's bytes are charged with the broadcast's; one that would
    pass the limits is not made, and the broadcast works without it (the
    worker builds its set)."""
    c = d.client()
    small = lines(range(10))
    reply = c.broadcast_put_request(small)
    check(reply["ok"], "put: %r" % reply)
    check(reply.get("index", 0) > INDEX_HEADER, "small index: %r" % reply)
    used = {u["uid"]: u["limits"] for u in c.status()["limits"]["users"]}
    check_eq(used[os.getuid()]["daemon.max_broadcast_bytes_per_uid"]["used"],
             len(small) + reply["index"], "bytes charged")

    big = lines(range(400))	# 1490 bytes; an index of 4.3k
    reply = c.broadcast_put_request(big)
    check(reply["ok"], "put: %r" % reply)
    check_eq(reply.get("index"), 0, "the index over the limit")
    check(index_file(d, reply["broadcast"]) is None, "an index memfd kept")
    check_eq(c.collect_all(range_plan(395, 405, 2,
                                      ops=[in_bc(reply["broadcast"])])),
             [b"395", b"396", b"397", b"398", b"399"], "records kept")
    check("no index: " in d.log_text(), "the log does not say why")
    check(re.search(r"set of 400 lines .* built in", d.log_text()),
          "the worker did not build the set: %s" % d.log_tail())


@with_daemon(sets=["daemon.max_helpers_per_uid=1"])
def test_put_with_no_helper_free_has_no_index(d):
    """With the user's one helper busy (a glob that takes hours), a put
    is not refused for want of a helper to index it: it completes with
    no index, and the worker builds the set."""
    loop = d.path("loop")
    os.mkdir(loop, 0o755)
    for name in "abcd":
        os.symlink(".", os.path.join(loop, name))
    os.chmod(d.tmpdir, 0o755)
    g = d.client()
    g.send_json({"op": "execute", "action": "count",
                 "plan": text_plan([loop + "/*" * 12 + "/x"])})
    check(wait_until(lambda: any("ember-worker: helper" in cmdline(p)
                                 for p in descendants(d.pid)), 10),
          "no helper")
    c = d.client()
    reply = c.broadcast_put_request(lines(range(5)))
    check(reply["ok"], "put: %r" % reply)
    check_eq(reply.get("index"), 0, "the index with no helper free")
    check_eq(c.collect_all(range_plan(3, 8, 1,
                                      ops=[in_bc(reply["broadcast"])])),
             [b"3", b"4"], "records kept")
    g.close_abruptly()


@with_daemon(sets=["workers.max=1"])
def test_dropped_broadcast_refused(d):
    """A dropped broadcast is refused in new plans, naming the op."""
    c = d.client()
    bid = c.broadcast_put(b"1\n")
    check_eq(c.count(range_plan(0, 10, 1, ops=[in_bc(bid)])), 1, "before")
    check(c.broadcast_drop(bid)["ok"], "drop")
    check(bid not in listed(c), "a dropped broadcast is listed")
    r = c.execute(range_plan(0, 10, 1, ops=[{"map": "trim"}, in_bc(bid)]),
                  "count")
    check_error(r, "PLAN_INVALID", refused_message(1, bid))
    check_error(c.broadcast_drop(bid), "BROADCAST_NOT_FOUND")
    check_eq(c.count(range_plan(0, 10, 1)), 10, "a job without it")
    check_eq(list(held(c).values()), [[]], "held after the drop")


def test_unknown_broadcast_refused(d):
    """A broadcast that was never uploaded is refused."""
    c = d.client()
    r = c.execute(range_plan(0, 10, 1, ops=[in_bc(4242)]), "collect")
    check_error(r, "PLAN_INVALID", refused_message(0, 4242))
    check_error(c.broadcast_drop(4242), "BROADCAST_NOT_FOUND")
    check_eq(c.count(range_plan(0, 10, 1)), 10, "a job after")


def test_nested_plan_uses_broadcast(d):
    """A broadcast named only inside a union's or a join's nested plan is
    sent to the workers that run that plan."""
    c = d.client()
    bid = c.broadcast_put(b"3\n5\n")
    nested = range_plan(0, 10, 2, ops=[in_bc(bid)])
    got = c.collect_all(range_plan(0, 2, 1, ops=[{"union": {"plan": nested}}]))
    check_eq(sorted(got), [b"0", b"1", b"3", b"5"], "union")
    keyed = range_plan(0, 10, 2, ops=[in_bc(bid), {"key_by": {}}])
    got = c.collect_all(range_plan(0, 10, 2, ops=[
        {"key_by": {}}, {"join": {"plan": keyed}}]))
    check_eq(sorted(k for k, _ in got), [b"3", b"5"], "join")


def test_nested_plan_unknown_broadcast_refused(d):
    """A nested plan's unknown broadcast is refused under its own field."""
    c = d.client()
    nested = range_plan(0, 10, 2, ops=[in_bc(4242)])
    r = c.execute(range_plan(0, 2, 1, ops=[{"union": {"plan": nested}}]),
                  "count")
    check_error(r, "PLAN_INVALID", "plan.ops[0].union.plan.ops[0].filter."
                "in_broadcast: no broadcast 4242 in this session")


def test_other_session_cannot_use(d):
    """Another session can neither use nor drop a broadcast."""
    c = d.client()
    bid = c.broadcast_put(b"2\n")
    other = d.client()
    check(other.session != c.session, "the same session twice")
    r = other.execute(range_plan(0, 10, 1, ops=[in_bc(bid)]), "count")
    check_error(r, "PLAN_INVALID", refused_message(0, bid))
    check_error(other.broadcast_drop(bid), "BROADCAST_NOT_FOUND")
    check_eq(c.collect_all(range_plan(0, 10, 1, ops=[in_bc(bid)])), [b"2"],
             "the owner still uses it")


def test_resumed_session_can_use(d):
    """A connection that resumes the session uses its broadcasts."""
    c = d.client()
    bid = c.broadcast_put(b"2\n3\n")
    other = d.client(hello=False)
    check(other.hello(session=c.session)["ok"], "resume the session")
    check_eq(other.collect_all(range_plan(0, 10, 2, ops=[in_bc(bid)])),
             [b"2", b"3"], "records")
    check(other.broadcast_drop(bid)["ok"], "drop from the other connection")
    r = c.execute(range_plan(0, 10, 1, ops=[in_bc(bid)]), "count")
    check_error(r, "PLAN_INVALID", refused_message(0, bid))


def test_closed_session_frees_broadcasts(d):
    """close_session frees the session's broadcasts."""
    c = d.client()
    bid = c.broadcast_put(b"2\n")
    c.request_ok({"op": "close_session"})
    check(c.hello()["ok"], "a new session")
    check(bid not in listed(c), "the closed session's broadcast is listed")
    r = c.execute(range_plan(0, 10, 1, ops=[in_bc(bid)]), "count")
    check_error(r, "PLAN_INVALID", refused_message(0, bid))


@with_daemon(sets=["workers.max=1", "workers.reuse=no"])
def test_drop_while_operation_runs(d):
    """Dropping a broadcast that a running operation uses: the operation
    still finishes, even on workers that get it after the drop."""
    c = d.client()
    bid = c.broadcast_put(lines(range(0, 1000, 5)))
    c.execute_ok(range_plan(0, 1000, 4, ops=[in_bc(bid)]), "iterate")
    c.write_int(REQUEST_NEXT)
    status, first = c.read_partition()
    check_eq(status, STREAM_PARTITION, "partition 0 (payload %r)" %
             (first,))
    c2 = d.client(hello=False)
    check(c2.hello(session=c.session)["ok"], "resume the session")
    check(c2.broadcast_drop(bid)["ok"], "drop while the operation runs")
    check(bid not in listed(c2), "a dropped broadcast is listed")
    check(os.path.exists(bc_file(d, bid)), "the file went while in use")
    got = list(first)
    for i in range(1, 4):
        c.write_int(REQUEST_NEXT)
        status, records = c.read_partition()
        check_eq(status, STREAM_PARTITION, "partition %d (payload %r)" %
                 (i, records))
        got += records
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_DONE, "end of the stream")
    check_eq(got, numbers(0, 1000, 5), "records")
    check_eq(counters(c)["broadcasts_sent"], 4, "sent to each new worker")
    wait_until(lambda: not os.path.exists(bc_file(d, bid)), 2)
    check(not os.path.exists(bc_file(d, bid)), "the file is left after "
          "the operation")
    r = c.execute(range_plan(0, 10, 1, ops=[in_bc(bid)]), "count")
    check_error(r, "PLAN_INVALID", refused_message(0, bid))


def test_put_by_descriptor(d):
    """A broadcast from a descriptor the client passes: emberd reads the
    file through it (not through the socket), and leaves the client's file
    position where it was."""
    path = d.path("lines.txt")
    with open(path, "w") as f:
        f.write("".join("%d\n" % i for i in range(0, 10000, 7)))
    c = d.client()
    with open(path, "rb") as f:
        f.seek(5)
        reply = c.broadcast_put_fd(f.fileno())
        check_eq(f.tell(), 5, "the client's file position")
    check(reply["ok"], "broadcast_put by fd: %r" % reply)
    check_eq(reply["size"], os.path.getsize(path), "size")
    plan = range_plan(0, 1000, 4, ops=[{"filter": {"in_broadcast":
                                                   reply["broadcast"]}}])
    check_eq(c.collect_all(plan), numbers(0, 1000, 7), "filtered records")


def test_put_by_descriptor_needs_one(d):
    """"fd": true without a descriptor is refused; the connection goes on;
    a descriptor that is not a regular file is refused too."""
    c = d.client()
    check_error(c.request({"op": "broadcast_put", "fd": True}),
                "REQUEST_INVALID", "fd", "no descriptor")
    r, w = os.pipe()
    try:
        check_error(c.broadcast_put_fd(r), "REQUEST_INVALID",
                    "not a regular file")
    finally:
        os.close(r)
        os.close(w)
    check_eq(c.count(range_plan(0, 10, 2)), 10, "the next job")


def test_two_daemons_side_by_side(d):
    """Two emberds with sockets in one directory keep their broadcasts
    apart: each has a local directory of its own."""
    with Daemon(socket_path=os.path.join(d.tmpdir, "other.sock")) as other:
        c, o = d.client(), other.client()
        mine = c.broadcast_put(b"1\n2\n3\n")
        theirs = o.broadcast_put(b"7\n8\n")
        check_eq(mine, theirs, "both first broadcasts have the same id")
        plan = range_plan(0, 10, 2, ops=[{"filter": {"in_broadcast": mine}}])
        check_eq(c.collect_all(plan), numbers(1, 4), "first daemon's set")
        check_eq(o.collect_all(plan), numbers(7, 9), "second daemon's set")


if __name__ == "__main__":
    run_tests(globals())
