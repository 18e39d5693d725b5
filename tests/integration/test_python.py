"""The Python client (python/ember) against a real emberd: every op and
action against Python's own answers, early stops, errors (every class
emberd sends has its exception), broadcasts, connections cut by a proxy,
reattach giving up and coming too late, and pip's offline install."""

import collections
import json
import re
import socket
import signal
import subprocess
import sys
import tempfile
import time
import uuid

from harness import *
from proxy import REFUSE, RELAY, STALL, CuttingProxy

sys.path.insert(0, os.path.join(SRCDIR, "python"))
import ember  # noqa: E402

PLUGIN = job_readable(os.path.join(BUILDDIR, "examples", "udf_example.so"))


def _session(d, **kw):
    return ember.connect(d.socket, **kw)


def _no_operations(d):
    def quiet():
        with d.client() as c:
            return not c.status()["operations"]
    check(wait_until(quiet, 10), "operations left behind")


def test_connect_default_socket(d):
    old = os.environ.get("EMBER_SOCKET")
    try:
        os.environ["EMBER_SOCKET"] = d.socket
        with ember.connect() as s:
            check_eq(s.socket_path, d.socket, "socket from $EMBER_SOCKET")
            sid = s.id
            check_eq(s.range(10).count(), 10, "count")
        with d.client() as c:
            ids = [x["id"] for x in c.status()["sessions"]]
        check(sid not in ids, "the session outlived its context")
        del os.environ["EMBER_SOCKET"]
        check_eq(ember.default_socket(), "/run/ember/emberd.sock",
                 "the system socket")
        try:
            ember.connect(d.path("nothere.sock"))
        except ember.ConnectionFailed as e:
            check("is emberd running?" in e.message, e.message)
        else:
            raise AssertionError("connect to a missing socket")
    finally:
        if old is None:
            os.environ.pop("EMBER_SOCKET", None)
        else:
            os.environ["EMBER_SOCKET"] = old


def test_sources(d):
    with _session(d) as s:
        for args in [(100,), (5, 50, 7), (10, 0, -3), (0, 0)]:
            check_eq(s.range(*args, partitions=3).collect(),
                     [str(i) for i in range(*args)], "range%r" % (args,))
        recs = ["a", None, "", "b", "c"]
        check_eq(s.parallelize(recs, partitions=2).collect(), recs,
                 "parallelize")
        text = "one\ntwo\n\nthree"
        write_file(d.path("a.txt"), text)
        os.chmod(d.path("a.txt"), 0o644)
        cwd = os.getcwd()
        os.chdir(d.tmpdir)
        try:
            ds = s.text_file("a.txt", partitions=2)
        finally:
            os.chdir(cwd)
        check_eq(ds.plan["source"]["text"]["paths"], [d.path("a.txt")],
                 "paths made absolute")
        check_eq(ds.collect(), text.split("\n"), "text_file")
        check_eq(s.text_file([d.path("*.txt")]).count(), 4, "a glob")


def test_ops(d):
    with _session(d) as s:
        nums = [str(i) for i in range(2000)]
        base = s.range(2000, partitions=4)
        cases = [
            (base.filter_contains("7"), [n for n in nums if "7" in n]),
            (base.filter_regex("^1[0-9]5$"),
             [n for n in nums if re.search("^1[0-9]5$", n)]),
            (base.limit(3), [n for p in range(4)
                             for n in nums[p * 500:p * 500 + 3]]),
            (base.pipe("tr 0-9 a-j"),
             [n.translate(str.maketrans("0123456789", "abcdefghij"))
              for n in nums]),
            (base.udf(PLUGIN, "udf_wordlen"), [str(len(n)) for n in nums]),
            (base.udf(PLUGIN, "udf_prefix", prefix="> "),
             ["> " + n for n in nums]),
        ]
        words = ["Hello World ", " a,b,c", "x", "  Mixed,Case  "]
        w = s.parallelize(words, partitions=2)
        cases += [
            (w.map_upper(), [x.upper() for x in words]),
            (w.map_lower(), [x.lower() for x in words]),
            (w.map_trim(), [x.strip() for x in words]),
            (w.map_field(",", 1), [(x.split(",") + [""])[1]
                                   if len(x.split(",")) > 1 else ""
                                   for x in words]),
            (w.map_field(",", -1), [x.split(",")[-1] for x in words]),
            (w.flat_map_split(" "), [p for x in words for p in x.split(" ")]),
        ]
        docs = [json.dumps({"u": {"city": c}}) for c in ["Oslo", "Rome"]]
        cases.append((s.parallelize(docs + ["not json"]).map_json("u.city"),
                      ["Oslo", "Rome"]))
        for ds, want in cases:
            check_eq(ds.collect(), want, "op %r" % (ds.plan["ops"],))
        a = base.sample(0.3, seed=7).collect()
        check_eq(base.sample(0.3, seed=7).collect(), a, "sample repeats")
        check(0 < len(a) < 2000 and set(a) <= set(nums), "a sample")
        check_eq(base.sample(0).count(), 0, "fraction 0")
        check_eq(base.sample(1).count(), 2000, "fraction 1")
        plan = base.filter_contains("1").map_upper().plan
        check_eq(plan, {"source": {"range": {"start": 0, "end": 2000,
                                             "step": 1}},
                        "partitions": 4,
                        "ops": [{"filter": {"contains": "1"}},
                                {"map": "upper"}]}, "plan")
        check("ops" not in base.plan, "an op leaves its parent alone")


def test_actions(d):
    with _session(d) as s:
        words = ["b", "a", "b", None, "c", "b", ""]
        ds = s.parallelize(words, partitions=3)
        check_eq(ds.count(), len(words), "count")
        check_eq(ds.count_by_value(), collections.Counter(words),
                 "count_by_value")
        check_eq(ds.count_by_value(decode=False),
                 collections.Counter(None if w is None else w.encode()
                                     for w in words), "bytes keys")
        # Records with a NUL byte come in the reply's pairs.
        nul = ["a\0b", "a\0b", "ab", "\0", None, ""]
        check_eq(s.parallelize(nul, partitions=2).count_by_value(),
                 collections.Counter(nul), "count_by_value with NULs")
        r = s.range(-50, 1000, 3, partitions=4)
        want = list(range(-50, 1000, 3))
        check_eq((r.reduce("sum"), r.min(), r.max(), r.sum()),
                 (sum(want), min(want), max(want), sum(want)), "reduce")
        check_eq(s.parallelize(["0.5", "1"]).sum(), 1.5, "a real sum")
        check_eq(s.range(0).reduce("max"), None, "empty max")
        check_eq(s.range(0).sum(), 0, "empty sum")
        out = os.path.join(job_writable(d.path("w")), "saved")
        res = r.save(out)
        check_eq((res.files, res.records), (4, len(want)), "save")
        got = []
        for name in sorted(os.listdir(out)):
            if name.startswith("part-"):
                with open(os.path.join(out, name)) as f:
                    got += f.read().splitlines()
        check_eq(got, [str(i) for i in want], "saved records")
        check(os.path.exists(os.path.join(out, "_SUCCESS")), "_SUCCESS")
        try:
            r.save(out)
        except ember.EmberError as e:
            check("overwrite" in e.message, e.message)
        else:
            raise AssertionError("a save over a save without overwrite")
        check_eq(r.save(out, overwrite=True).records, len(want), "overwrite")
        check_eq(s.range(100).take(5), ["0", "1", "2", "3", "4"], "take")
        check_eq(s.range(3, 9).first(), "3", "first")


def test_decoding(d):
    data = b"caf\xc3\xa9\nbad\xff\n"
    write_file(d.path("b.txt"), data)
    os.chmod(d.path("b.txt"), 0o644)
    with _session(d) as s:
        ds = s.text_file(d.path("b.txt"))
        check_eq(ds.collect(decode=False), [b"caf\xc3\xa9", b"bad\xff"],
                 "bytes")
        check_eq(list(ds.to_local_iterator(errors="replace")),
                 ["café", "bad\ufffd"], "errors=replace")
        try:
            ds.collect()
        except UnicodeDecodeError:
            pass
        else:
            raise AssertionError("strict decoding passed bad UTF-8")
    with _session(d, decode=False) as s:
        check_eq(s.parallelize(["x", None]).collect(), [b"x", None],
                 "session default")


def test_iterator(d):
    with _session(d) as s:
        ds = s.range(100000, partitions=10)
        for prefetch in (0, 1, 4):
            check_eq(list(ds.to_local_iterator(prefetch=prefetch)),
                     [str(i) for i in range(100000)], "prefetch %d" %
                     prefetch)
        got = []
        for rec in ds:
            got.append(rec)
            if rec == "25001":		# mid-partition 2
                break
        check_eq(got, [str(i) for i in range(25002)], "before the break")
        _no_operations(d)
        it = ds.to_local_iterator()
        check_eq(next(it), "0", "first record")
        it.close()
        ds.to_local_iterator(prefetch=2).close()	# never iterated
        _no_operations(d)
        # A request while an iterator is open runs on another connection
        # of the same session.
        it = iter(s.range(1000, partitions=4))
        check_eq(next(it), "0", "open iterator")
        check_eq(s.range(10).count(), 10, "count meanwhile")
        check_eq(len(list(it)), 999, "the iterator goes on")
        check_eq(s.range(5).collect(), ["0", "1", "2", "3", "4"],
                 "the session goes on after the stops")


def test_iterator_batches(d):
    """to_local_batches gives to_local_iterator's records as lists, each
    from one partition, none empty, decoded as asked; closing it, or
    dropping it, stops the operation."""
    with _session(d) as s:
        ds = s.range(50000, partitions=3)
        for decode, want in ((True, [str(i) for i in range(50000)]),
                             (False, [b"%d" % i for i in range(50000)])):
            lists = list(ds.to_local_batches(decode=decode))
            check(all(isinstance(b, list) and b for b in lists),
                  "a batch that is not a non-empty list")
            check_eq([r for b in lists for r in b], want,
                     "batches, decode=%s" % decode)
        it = ds.to_local_batches(prefetch=1)
        check_eq(next(it)[0], "0", "first batch")
        it.close()
        ds.to_local_batches().close()		# never iterated
        for batch in ds.to_local_batches():
            break
        del batch
        _no_operations(d)
        nulls = s.parallelize(["x", None, "y"], partitions=1)
        check_eq(next(nulls.to_local_batches(decode=True)),
                 ["x", None, "y"], "a null decoded")


class _Pieces:
    """A socket whose reads return these pieces of bytes, one a read
    (fewer bytes when a read asks for fewer), then end of file."""

    def __init__(self, pieces):
        self.pieces = [p for p in pieces if p]

    def recv(self, n):
        if not self.pieces:
            return b""
        p = self.pieces.pop(0)
        if len(p) > n:
            self.pieces.insert(0, p[n:])
            p = p[:n]
        return p

    def recv_into(self, view, n=0):
        p = self.recv(min(n or len(view), len(view)))
        view[:len(p)] = p
        return len(p)

    def settimeout(self, timeout):
        pass

    def close(self):
        pass


def _frame(r):
    return struct_int(-5) if r is None else struct_int(len(r)) + r


def struct_int(n):
    import struct
    return struct.pack(">i", n)


def _read_partition(wire, text=None):
    """A partition's records as Wire.read_batch gives them, and its end."""
    got = []
    while True:
        records, status = wire.read_batch(text)
        got += records
        if status:
            return got, status


@no_daemon
def test_wire_reads_records_across_reads(_):
    """The result stream's records come out whole, as bytes or decoded,
    in order, wherever the reads cut the stream: runs of one length (odd
    ones, 0, 200, runs longer than one parse takes, ASCII or not), lengths
    that vary, nulls, the partition's end, and an error frame (-2) after
    records."""
    import itertools
    import random
    from ember import _wire
    rng = random.Random(7)

    def mimic(more):
        """A record of 37 + more bytes that reads as frames of 37."""
        fake = b"c" * 37 + _frame(b"b" * 37) * (more // 41)
        return fake + b"c" * (37 + more - len(fake))
    # Runs of one length, then lengths that differ from their
    # neighbours' in one byte, holding what looks like their frames.
    records = ([b"a" * 37] * 300 + [b"b" * 37] * 20 + [mimic(1024)] +
               [b"b" * 37] * 40 + [mimic(65536)] + [b"b" * 37] * 40 +
               [b"", b"x", None, b"yyy"] +
               [bytes([i % 251]) * rng.choice((1, 3, 100, 101, 255))
                for i in range(400)] + [b""] * 40 + [None] * 9 +
               [b"%05d" % i for i in range(700)] + [b"z" * 3000] +
               [b"caf\xc3\xa9"] * 30 + [b"w" * 200] * 30 +
               [b"\xff" * 3] * 30 + [b"x" * 3] * 30)
    body = b"".join(_frame(r) for r in records)
    cases = [(body + struct_int(-1), -1, None),
             (body + struct_int(-2) + _frame(b"task failed: boom"), -2,
              "task failed: boom")]
    for data, end, message in cases:
        cuts = [[data]]
        cuts += [[data[:c], data[c:]] for c in range(0, 400)]
        cuts += [[data[:c], data[c:]]
                 for c in range(len(data) - 300, len(data))]
        for _ in range(60):
            pieces, rest = [], data
            while rest:
                n = rng.choice((1, 2, 5, 104, 333, 4096, 70000))
                pieces.append(rest[:n])
                rest = rest[n:]
            cuts.append(pieces)
        for pieces, text in itertools.product(cuts, (None, "replace")):
            wire = _wire.Wire("scripted", sock=_Pieces(pieces))
            got, status = _read_partition(wire, text)
            where = "pieces of %s, text %s" % ([len(p) for p in pieces[:6]],
                                               text)
            check_eq(status, end, "end, " + where)
            kind = bytes if text is None else str
            want = records if text is None else [
                r if r is None else r.decode("utf-8", text) for r in records]
            check(got == want, "records differ, " + where)
            check(all(type(r) is kind for r in got if r is not None),
                  "a record that is not %s, %s" % (kind.__name__, where))
            if message is not None:
                check_eq(wire.read_error_frame(), message, "the error")
    # Strict decoding: a run with a byte that is not UTF-8 raises.
    wire = _wire.Wire("scripted", sock=_Pieces([
        _frame(b"ok") * 40 + _frame(b"\xff") * 40 + struct_int(-1)]))
    try:
        _read_partition(wire, "strict")
        check(False, "a byte that is not UTF-8 was decoded")
    except UnicodeDecodeError:
        pass
    # A length no record has, after records: the wire refuses it.
    data = _frame(b"ok") * 20 + struct_int(-3)
    wire = _wire.Wire("scripted", sock=_Pieces([data]))
    try:
        _read_partition(wire)
        check(False, "length -3 was taken")
    except ember.ProtocolError as e:
        check("-3" in str(e), "message %r" % e)
    check(wire.broken, "the wire is still open after a protocol error")


def _counter(d, name):
    with d.client() as c:
        return c.status()["counters"][name]


def test_early_stop_is_prompt(d):
    # The guide's first example: a sparse match early in a partition of
    # 500M records.  Breaking out stops the task mid-partition.
    with _session(d) as s:
        t0 = time.monotonic()
        for line in s.range(10**9, partitions=2).filter_contains("777777"):
            check_eq(line, "777777", "the first match")
            break
        took = time.monotonic() - t0
        check(took < 2.0, "break took %.1f s" % took)
        _no_operations(d)
        # take, first and a limit on a partition of 30M records.
        ds = s.range(30 * 10**6, partitions=1)
        for what, fn in [("take", lambda: ds.take(1)),
                         ("first", lambda: [ds.first()]),
                         ("take sparse", lambda: s.range(
                             30 * 10**6, partitions=1).filter_contains(
                             "777777").take(1))]:
            t0 = time.monotonic()
            got = fn()
            took = time.monotonic() - t0
            check(len(got) == 1, "%s: %r" % (what, got))
            check(took < 2.0, "%s took %.1f s" % (what, took))
        _no_operations(d)
        # Each task stopped where it was, and its worker was kept.
        check_eq(_counter(d, "workers_killed"), 0, "workers killed")
        # A pipe command that does not return: its worker is killed soon.
        it = iter(s.range(10, partitions=1).pipe("cat; sleep 30"))
        check_eq(next(it), "0", "the pipe's first record")
        t0 = time.monotonic()
        it.close()
        check(time.monotonic() - t0 < 2.0, "the stop waited for the pipe")
        check(wait_until(lambda: _counter(d, "workers_killed") == 1, 6),
              "the worker of the pipe was not killed")


def test_errors(d):
    with _session(d) as s:
        for bad, cls, needle in [
                (lambda: s.range(10).map_field("", 0).count(),
                 ember.PlanInvalid, "plan.ops[0].map.field.sep"),
                (lambda: s.range(10).filter_regex("(").collect(),
                 ember.PlanInvalid, "plan.ops[0].filter.regex"),
                (lambda: s.range(10).reduce("avg"), ember.ActionInvalid,
                 "fn"),
                (lambda: s.range(10).pipe("exit 3").count(),
                 ember.TaskFailed, "exited with status 3")]:
            try:
                bad()
            except cls as e:
                check(needle in e.message, "%r lacks %r" % (e.message,
                                                            needle))
                check(isinstance(e, ember.EmberError), "under EmberError")
            else:
                raise AssertionError("no %s" % cls.__name__)
        # A failure after records: they come first, then the error.
        ds = s.parallelize(["x"]).pipe("echo a; echo b; sleep 1; "
                                       "echo late >&2; exit 4")
        got = []
        try:
            for rec in ds:
                got.append(rec)
        except ember.TaskFailed as e:
            check_eq((e.partition, "late" in e.reason, e.worker > 0),
                     (0, True, True), "partition, reason, worker")
        else:
            raise AssertionError("no TaskFailed")
        check_eq(got, ["a", "b"], "records before the failure")
        try:
            ds.collect()
        except ember.TaskFailed as e:
            check_eq(e.records, ["a", "b"], "collect's records")
        check_eq(s.range(10).count(), 10, "a job after the failures")


def test_interrupted(d):
    with _session(d) as s:
        it = iter(s.range(1000, partitions=10))
        check_eq(next(it), "0", "first record")
        for _ in range(99):
            next(it)
        with d.client(hello=False) as other:
            other.hello(session=s.id)
            other.request_ok({"op": "close_session"})
        try:
            list(it)
        except ember.Interrupted as e:
            check("session closed" in e.message, e.message)
        else:
            raise AssertionError("no Interrupted")


def _interrupted_by_ctrl_c(d, body):
    # A Python program runs body on a long job; Ctrl-C (SIGINT) must
    # interrupt the operation, not leave it running.
    code = ("import sys, time\n"
            "sys.path.insert(0, %r)\n"
            "import ember\n"
            "s = ember.connect(%r)\n"
            "ds = s.range(10**12, partitions=2).filter_contains('zz')\n"
            "try:\n"
            "    %s\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted', flush=True)\n"
            "    s.close()\n" % (os.path.join(SRCDIR, "python"), d.socket,
                                 body))
    # SIGINT as a terminal leaves it, whatever started the suite: a
    # shell that runs it in the background hands SIGINT down ignored.
    p = subprocess.Popen([sys.executable, "-c", code],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                          signal.SIG_DFL))
    try:
        def running():
            with d.client() as c:
                return any(o["running"] > 0
                           for o in c.status()["operations"])
        check(wait_until(running, 10), "the job did not start")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=5)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    check_eq(out.decode().strip(), "interrupted", "stdout (%s)" % err)

    def free():
        with d.client() as c:
            st = c.status()
        return not st["operations"] and all(
            w["state"] != "busy" for w in st["workers"])
    check(wait_until(free, 1.5), "the workers are still busy")


def test_ctrl_c_interrupts(d):
    for body in ["ds.count()", "ds.collect()",
                 "[x for x in ds.to_local_iterator()]"]:
        _interrupted_by_ctrl_c(d, body)


@with_daemon(sets=["daemon.max_connections_per_uid=2"])
def test_limit_exceeded(d):
    held = [d.client(), d.client()]
    try:
        ember.connect(d.socket)
    except ember.LimitExceeded as e:
        check_eq(e.error_class, "LIMIT_EXCEEDED", "class")
    else:
        raise AssertionError("no LimitExceeded")
    for c in held:
        c.close()


def test_broadcasts(d):
    with _session(d) as s:
        ds = s.range(100, partitions=3)
        want = ["3", "42", "77"]
        lines = "\n".join(want) + "\n"
        path = write_file(d.path("set.txt"), lines)
        for data in (lines.encode(), lines, want, iter(want),
                     [w + "\n" for w in want]):
            with s.broadcast(data) as b:
                check_eq(ds.filter_in(b).collect(), want, "from %r" % (data,))
        with open(path, "rb") as f:
            b = s.broadcast(f)
        check_eq(b.size, len(lines), "size from the descriptor")
        check_eq(ds.filter_in(b.id).collect(), want, "by descriptor")
        check_eq(ds.udf(PLUGIN, "udf_in_broadcast", broadcast=b).plan[
            "ops"][0]["udf"]["broadcasts"], [b.id], "udf broadcasts")
        check_eq(ds.udf(PLUGIN, "udf_in_broadcast", broadcast=b).collect(),
                 want, "udf_in_broadcast")
        b.drop()
        try:
            ds.filter_in(b).count()
        except ember.PlanInvalid:
            pass
        else:
            raise AssertionError("a dropped broadcast still in use")
        try:
            b.drop()
        except ember.BroadcastNotFound:
            pass
        else:
            raise AssertionError("dropped twice")


def _task_trace(d, name):
    """A shell command for pipe that counts its runs in a file of the
    test's, and a function that reads the count."""
    trace = d.path(name)
    os.mkdir(trace)
    os.chmod(trace, 0o777)		# the job's user writes it
    runs = os.path.join(trace, "runs")

    def count():
        if not os.path.exists(runs):
            return 0
        with open(runs) as f:
            return len(f.read().splitlines())
    return "echo run >> %s; cat" % runs, count


def test_checkpoints(d):
    """An eager reliable checkpoint runs each task once, and reading it
    never runs them again; another session of the uid reads it; a
    checkpoint of a plan over it works; a drop refuses later plans and a
    second drop; a local checkpoint goes with its session."""
    command, runs = _task_trace(d, "eager")
    want = [str(i) for i in range(1000)]
    with _session(d) as s:
        cp = s.range(1000, partitions=4).pipe(command).checkpoint()
        check_eq(runs(), 4, "tasks of the eager checkpoint")
        check_eq((cp.local, cp.eager, cp.partitions, cp.records),
                 (False, True, 4, 1000), "what the reply said")
        check(cp.size > 0, "size %r" % (cp.size,))
        check_eq(cp.plan, {"source": {"checkpoint": cp.id}}, "its plan")
        check_eq(cp.collect(), want, "collect")
        check_eq(list(cp.map_upper()), want, "iterate over an op")
        check_eq(cp.filter_contains("7").count(),
                 len([w for w in want if "7" in w]), "count")
        check_eq(runs(), 4, "reads ran the plan again")
        cid = cp.id
    check(not cp.dropped, "a reliable checkpoint dropped with its session")
    with _session(d) as s:
        ds = s.from_checkpoint(cid)
        check_eq(ds.collect(), want, "read from another session")
        local = ds.filter_contains("7").checkpoint(local=True)
        check_eq(local.collect(), [w for w in want if "7" in w],
                 "a local checkpoint of a plan over a checkpoint")
        s.drop_checkpoint(cid)
        for what, fn in (("a plan", ds.count),
                         ("a second drop", lambda: s.drop_checkpoint(cid))):
            try:
                fn()
            except ember.CheckpointNotFound as e:
                check(isinstance(e, KeyError), "also a KeyError")
            else:
                raise AssertionError("%s after the drop" % what)
    check(local.dropped, "the local checkpoint outlived its session")
    with _session(d) as s:
        try:
            s.from_checkpoint(local.id).count()
        except ember.CheckpointNotFound:
            pass
        else:
            raise AssertionError("a local checkpoint outlived its session")
    check_eq(runs(), 4, "tasks in all")


def test_checkpoint_lazy_and_failed(d):
    """A lazy checkpoint runs its tasks at its first read only; leaving it
    as a context manager drops it; a failing task fails an eager
    checkpoint with TaskFailed, and nothing of it is left."""
    command, runs = _task_trace(d, "lazy")
    with _session(d) as s:
        ds = s.range(100, partitions=2).pipe(command)
        with ds.checkpoint(local=True, eager=False) as cp:
            check_eq((runs(), cp.eager, cp.records), (0, False, 0),
                     "a lazy checkpoint before its first read")
            check_eq(cp.count(), 100, "the first read")
            check_eq(runs(), 2, "tasks of the first read")
            check_eq(cp.collect(), [str(i) for i in range(100)], "collect")
            check_eq(runs(), 2, "tasks after the second read")
        check(cp.dropped, "left as a context manager, not dropped")
        try:
            cp.count()
        except ember.CheckpointNotFound:
            pass
        else:
            raise AssertionError("a dropped checkpoint read")
        try:
            s.range(10, partitions=2).pipe("exit 3").checkpoint()
        except ember.TaskFailed as e:
            check("exited with status 3" in e.message, e.message)
        else:
            raise AssertionError("a failing checkpoint")
        st = s.status()
        check_eq(st.get("checkpoints"), [], "checkpoints left")
        try:
            s.range(10).checkpoint(local="yes")
        except TypeError:
            pass
        else:
            raise AssertionError("local='yes' taken")


def test_connection_cut(d):
    """A proxy cuts every connection after 300 kB: the iterator reattaches
    each time right after the last record it yielded, and the records come
    once each, in order; the operation is released at the end."""
    proxy = CuttingProxy(d.socket, d.path("proxy.sock"), 300000)
    with ember.connect(proxy.path) as s:
        got = list(s.range(1000000, partitions=4))
        check_eq(len(got), 1000000, "records through the cuts")
        check(got == [str(i) for i in range(1000000)], "records in order")
    check("reattached" in d.log_text(), "no reattach in emberd's log")
    _no_operations(d)
    proxy.close()


@with_daemon(sets=["stream.max_bytes=1k"])
def test_graceful_cuts(d):
    """Past stream.max_bytes emberd ends the stream at each partition
    boundary with DETACHED; the iterator and collect reattach on the same
    connection and see every record once, in order; the operations are
    released at the end."""
    want = [str(i) for i in range(20000)]
    with _session(d) as s:
        ds = s.range(20000, partitions=8)
        for prefetch in (0, 2):
            check_eq(list(ds.to_local_iterator(prefetch=prefetch)), want,
                     "iterate, prefetch %d" % prefetch)
        check_eq(ds.collect(), want, "collect")
        check_eq(ds.take(6000), want[:6000], "a stop after two cuts")
    cuts = d.log_text().count("stream cut at partition")
    check(cuts >= 3 * 7, "%d cuts in emberd's log" % cuts)
    _no_operations(d)


def test_reattach_gives_up(d):
    """When emberd cannot be reached again, the iterator raises
    ConnectionFailed in bounded time: a proxy that refuses every reconnect
    gets exactly the policy's tries, and one that accepts and never
    answers holds the iterator no longer than the policy's timeout."""
    cases = [
        (REFUSE, ember.ReattachPolicy(attempts=5, initial_delay=0.01,
                                      max_delay=0.05, timeout=30)),
        (REFUSE, ember.ReattachPolicy(attempts=10000, initial_delay=0.02,
                                      max_delay=0.1, timeout=1.0)),
        (STALL, ember.ReattachPolicy(attempts=10000, initial_delay=0.02,
                                     max_delay=0.1, timeout=1.5)),
    ]
    for i, (mode, policy) in enumerate(cases):
        proxy = CuttingProxy(d.socket, d.path("proxy%d.sock" % i), 300000,
                             after_cut=mode)
        s = ember.connect(proxy.path, reattach=policy)
        got = []

        def read():
            try:
                for rec in s.range(1000000, partitions=4):
                    got.append(rec)
            except ember.ConnectionFailed as e:
                return e, time.monotonic()
            return None, time.monotonic()
        join = in_thread(read)
        check(wait_until(lambda: proxy.cuts > 0, 20), "no cut")
        cut = time.monotonic()
        err, end = join(30)
        what = "%s, %r" % (mode, policy)
        check(err is not None, "%s: no ConnectionFailed" % what)
        check("could not reattach at partition" in err.message,
              "%s: %s" % (what, err.message))
        check(0 < len(got) < 1000000 and
              got == [str(n) for n in range(len(got))],
              "%s: records before the cut" % what)
        tries = proxy.refused + proxy.stalled
        if policy.attempts == 5:
            check_eq(tries, 5, "%s: tries" % what)
            check("after 5 tries" in err.message, err.message)
        else:
            check(end - cut >= policy.timeout * 0.5,
                  "%s: gave up after %.2f s" % (what, end - cut))
        check(end - cut < policy.timeout + 3,
              "%s: took %.2f s" % (what, end - cut))
        # The operation given up on is still emberd's, detached, holding
        # a worker: release it from a connection of its own into the
        # session, as another process could.
        with d.client(hello=False) as c:
            c.hello(session=s.id)
            ops = [o["id"] for o in c.status()["operations"]
                   if o["session"] == s.id]
            check_eq(len(ops), 1, "%s: the detached operation" % what)
            c.request_ok({"op": "release", "operation": ops[0],
                          "all": True})
        proxy.close()		# the session's close then fails at once
        s.close()
    _no_operations(d)


@with_daemon(sets=["operation.detached_timeout=300ms",
                   "operation.maintenance_interval=50ms"])
def test_operation_abandoned(d):
    """A stream whose reconnects are refused past
    operation.detached_timeout is reaped by emberd; the iterator's late
    reattach raises OperationAbandoned, after each record before the cut
    exactly once."""
    proxy = CuttingProxy(d.socket, d.path("proxy.sock"), 300000,
                         after_cut=REFUSE)
    policy = ember.ReattachPolicy(attempts=100000, initial_delay=0.02,
                                  max_delay=0.1, timeout=60)

    def reopen():
        check(wait_until(lambda: proxy.cuts > 0, 20), "no cut")
        _no_operations(d)
        check(proxy.refused > 0, "no reattach was refused")
        proxy.mode = RELAY
    join = in_thread(reopen)
    got = []
    with ember.connect(proxy.path, reattach=policy) as s:
        try:
            for rec in s.range(1000000, partitions=4):
                got.append(rec)
        except ember.OperationAbandoned as e:
            check("detached_timeout" in e.message, e.message)
        else:
            raise AssertionError("no OperationAbandoned")
        join()
        check(0 < len(got) < 1000000 and
              got == [str(n) for n in range(len(got))],
              "records before the cut")
        check_eq(s.range(10).count(), 10, "the session goes on")
    proxy.close()


def test_error_classes_sent(d):
    """The classes of execute, reattach and release, met as emberd sends
    them, raise their own exceptions."""
    s, other = _session(d), _session(d)

    def raises(session, cls, req):
        try:
            session.request(req)
        except ember.EmberError as e:
            check(type(e) is cls, "%r raised %r" % (req, e))
            check_eq(e.error_class, cls.error_class, "class")
        else:
            raise AssertionError("%r: no %s" % (req, cls.__name__))
    plan = s.range(10).plan
    op = str(uuid.uuid4())
    count = {"op": "execute", "plan": plan, "action": "count",
             "operation": op}
    check_eq(s.request(count)["count"], 10, "count")
    raises(s, ember.OperationAlreadyExists, count)
    raises(s, ember.OperationFinished, {"op": "reattach", "operation": op,
                                        "partition": 0, "offset": 0})
    raises(s, ember.OperationNotFound, {"op": "release", "operation":
                                        str(uuid.uuid4()), "all": True})
    stream = s.stream(s.range(100000, partitions=4).plan, "iterate")
    where = {"op": "reattach", "operation": stream.operation}
    raises(s, ember.PositionInvalid, dict(where, partition=9, offset=0))
    raises(other, ember.SessionMismatch, dict(where, partition=0, offset=0))
    stream.stop()
    stream = s.stream(plan, "iterate", {"reattachable": False})
    raises(s, ember.OperationNotReattachable,
           dict(where, operation=stream.operation, partition=0, offset=0))
    stream.stop()
    raises(s, ember.ActionInvalid, {"op": "execute", "plan": plan,
                                    "action": "shout"})
    raises(s, ember.RequestInvalid, {"op": "dance"})
    raises(s, ember.SessionNotFound, {"op": "hello", "version": 1,
                                      "session": str(uuid.uuid4())})
    s.close()
    other.close()
    _no_operations(d)


def _classes_emberd_sends():
    """The error classes of daemon/'s sources: the upper-case string
    literals of the statements that handle a class (a variable or field
    named *class, or a call of a function with a class parameter), which
    leaves out other upper-case strings (environment names, say)."""
    texts = []
    daemon = os.path.join(SRCDIR, "daemon")
    for name in sorted(os.listdir(daemon)):
        if name.endswith((".c", ".h")):
            with open(os.path.join(daemon, name)) as f:
                texts.append(re.sub(r"/\*.*?\*/", " ", f.read(),
                                    flags=re.S))
    funcs = set()
    for text in texts:
        funcs |= set(re.findall(r"\b(\w+)\s*\([^;{)]*const char\s*\*+"
                                r"\s*class\b", text))
    calls = re.compile(r"\b(?:%s)\s*\(" % "|".join(sorted(funcs)))
    sent = set()
    for text in texts:
        for statement in text.split(";"):
            found = re.findall(r'"([A-Z]{2,}(?:_[A-Z]+)*)"', statement)
            if found and (re.search(r"class\b", statement) or
                          calls.search(statement)):
                sent |= set(found)
    return sent


@no_daemon
def test_error_classes_named(_):
    """Every error class emberd can send (a class string of daemon/'s
    sources, a row of docs/protocol.md's table) has an exception named
    after it, under EmberError: a class emberd gains fails here until the
    package names it."""
    sent = _classes_emberd_sends()
    with open(os.path.join(SRCDIR, "docs", "protocol.md")) as f:
        documented = set(re.findall(r"^\| `([A-Z_]+)` \|", f.read(), re.M))
    check(len(sent) > 15 and len(documented) > 15,
          "found %d classes in daemon/, %d in docs" % (len(sent),
                                                        len(documented)))
    check_eq(sorted(sent - documented), [],
             "classes emberd sends that docs/protocol.md does not list")
    for cls in sorted(sent | documented):
        e = ember.errors.error_from_reply(
            {"ok": False, "error": {"class": cls, "message": "m"}})
        want = "".join(w.capitalize() for w in cls.split("_"))
        check_eq(type(e).__name__, want, "the exception of %s" % cls)
        check(getattr(ember, want, None) is type(e), "ember.%s" % want)
        check_eq((e.error_class, e.message, str(e)),
                 (cls, "m", cls + ": m"), "%s's fields" % want)
    for msg, cls in [("SHUTTING_DOWN: operation x: grace", "ShuttingDown"),
                     ("INTERRUPTED: operation x: released", "Interrupted"),
                     ("partition 3: worker 42: killed", "TaskFailed"),
                     ("partition 3: no worker", "TaskFailed"),
                     ("gone", "Interrupted")]:
        e = ember.errors.error_from_stream(msg)
        check_eq(type(e).__name__, cls, "the exception of %r" % msg)
    e = ember.errors.error_from_stream("partition 3: worker 42: killed")
    check_eq((e.partition, e.worker, e.reason), (3, 42, "killed"),
             "TaskFailed's fields")


def test_map_case_is_unicode(d):
    """map_upper and map_lower map Unicode, as their docs say."""
    with _session(d) as s:
        ds = s.parallelize(["straße", "Ǆ"])
        check_eq(ds.map_upper().collect(), ["STRASSE", "Ǆ"], "map_upper")
        check_eq(ds.map_lower().collect(), ["straße", "ǆ"], "map_lower")
    for fn in (ember.Dataset.map_upper, ember.Dataset.map_lower):
        check("Unicode" in fn.__doc__, "%s: %r" % (fn.__name__, fn.__doc__))
    with open(os.path.join(SRCDIR, "docs", "python.md")) as f:
        row = [l for l in f if l.startswith("| `map_upper()`")][0]
    check("ASCII case" not in row and "Unicode" in row, row)


def test_save_refusal_names_the_argument(d):
    """A save over an earlier one says what to pass in Python."""
    out = job_writable(d.path("saved"))
    with _session(d) as s:
        s.range(10).save(out)
        try:
            s.range(10).save(out)
        except ember.EmberError as e:
            check("overwrite=True" in e.message, e.message)
            check("options.overwrite" not in e.message, e.message)
        else:
            raise AssertionError("a second save went over the first")
        check_eq(s.range(10).save(out, overwrite=True).records, 10,
                 "with overwrite=True")


def test_guide_own_logic_example(d):
    """docs/python.md's section on a user's own logic (pipe and udf) has
    an example that runs."""
    with open(os.path.join(SRCDIR, "docs", "python.md")) as f:
        guide = f.read()
    m = re.search(r"^## Your own logic\n(.*?)^## ", guide, re.S | re.M)
    check(m is not None, "docs/python.md has no \"## Your own logic\"")
    section = m.group(1)
    check("pipe(" in section and "udf(" in section, "pipe and udf")
    code = re.findall(r"```python\n(.*?)```", section, re.S)
    check(code, "no example")
    env = dict(os.environ, EMBER_SOCKET=d.socket,
               PYTHONPATH=os.path.join(SRCDIR, "python"))
    r = subprocess.run([sys.executable, "-c", code[0]], env=env,
                       capture_output=True, text=True, timeout=60,
                       cwd=d.path(""))
    check_eq((r.returncode, r.stderr), (0, ""), "the example")
    check(r.stdout.strip(), "the example printed nothing")


@no_daemon
def test_guide_covers_the_package(_):
    """docs/python.md names every public name of the package and every
    public method of its classes, so that the guide keeps up with it."""
    with open(os.path.join(SRCDIR, "docs", "python.md")) as f:
        guide = f.read()
    names = set(ember.__all__)
    for cls in (ember.Session, ember.Dataset, ember.Checkpoint,
                ember.Broadcast, ember.ReattachPolicy):
        names |= {n for n in vars(cls) if not n.startswith("_")}
    missing = sorted(n for n in names
                     if not re.search(r"\b%s\b" % re.escape(n), guide))
    check_eq(missing, [], "names docs/python.md does not mention")


MYPY = shutil.which("mypy")
TYPED_CALLER = """
import collections
from typing import List, Optional, Union
import ember

def use(sc: ember.Session) -> None:
    ds: ember.Dataset = sc.range(10, partitions=2).map_upper().limit(3)
    n: int = ds.count()
    recs: List[ember.Record] = ds.collect(decode=False)
    c: "collections.Counter[ember.Record]" = ds.count_by_value()
    it = ds.to_local_iterator(prefetch=1)
    first: ember.Record = next(it)
    it.close()
    with ds.checkpoint(local=True, eager=False) as cp:
        cp.filter_contains("1").count()
    with sc.broadcast(["a", b"b"]) as b:
        ds.filter_in(b).udf("/lib/x.so", "f", k=1, b=b).count()
    top: Optional[Union[int, float]] = ds.max()
    saved: ember.SaveResult = ds.save("/tmp/x", overwrite=True)
    try:
        sc.request({"op": "status"})
    except ember.TaskFailed as e:
        where: Optional[int] = e.partition
"""


@no_daemon
@skip_unless(MYPY is not None, "no mypy (scripts/install-deps.sh installs "
             "it when it can)")
def test_type_hints(_):
    """mypy finds the package's annotations consistent, a caller typed
    against them checks, and the same caller with a wrong type does not
    (so the hints are read, not taken as Any)."""
    tmp = tempfile.mkdtemp()
    try:
        good = os.path.join(tmp, "good.py")
        bad = os.path.join(tmp, "bad.py")
        write_file(good, TYPED_CALLER)
        write_file(bad, TYPED_CALLER + "    wrong: str = ds.count()\n")
        env = dict(os.environ, MYPYPATH=os.path.join(SRCDIR, "python"))
        for target, ok in ((["-p", "ember"], True), ([good], True),
                           ([bad], False)):
            r = subprocess.run([MYPY, "--cache-dir=/dev/null",
                                "--no-error-summary"] + target,
                               capture_output=True, text=True, env=env,
                               timeout=120)
            if ok:
                check_eq(r.returncode, 0, "mypy %s: %s" % (target,
                                                            r.stdout))
            else:
                check(r.returncode != 0 and "bad.py:" in r.stdout and
                      "str" in r.stdout, "mypy passed a wrong type: %r"
                      % r.stdout)
    finally:
        shutil.rmtree(tmp)


@no_daemon
def test_shutting_down(_):
    """A stream emberd interrupts when its drain's grace runs out raises
    ShuttingDown, not Interrupted."""
    d = Daemon(sets=["daemon.shutdown_grace=1s"])
    s = _session(d)
    it = s.parallelize(["x"]).pipe("sleep 30").to_local_iterator()

    def drain():
        try:
            list(it)
        except ember.EmberError as e:
            return e
    join = in_thread(drain)
    d.worker_running("sleep 30")
    d.signal(signal.SIGTERM)
    e = join(20)
    check(type(e) is ember.ShuttingDown, "raised %r" % (e,))
    check(e.message.startswith("operation "), e.message)
    check_eq(d.wait(10), 0, "exit status")
    s.close()


def test_wordcount_example(d):
    """examples/wordcount.py prints what the CLI's count_by_value does."""
    corpus = d.path("corpus")
    os.mkdir(corpus)
    for name in ("README.md", "HACKING"):
        shutil.copy(os.path.join(SRCDIR, name), corpus)
    os.chmod(corpus, 0o755)
    for name in os.listdir(corpus):
        os.chmod(os.path.join(corpus, name), 0o644)
    env = dict(os.environ, EMBER_SOCKET=d.socket,
               PYTHONPATH=os.path.join(SRCDIR, "python"))
    out = subprocess.run([sys.executable,
                          os.path.join(SRCDIR, "examples", "wordcount.py"),
                          os.path.join(corpus, "*"), "15"],
                         capture_output=True, text=True, env=env, timeout=60)
    check_eq(out.returncode, 0, "exit status (stderr %r)" % out.stderr)
    plan = {"source": {"text": {"paths": [os.path.join(corpus, "*")]}},
            "partitions": 4,
            "ops": [{"map": "lower"}, {"flat_map": {"split": " "}},
                    {"filter": {"regex": "^[a-z]{3,}$"}}]}
    cli = d.cli(["run", "--action", "count_by_value", "-"],
                input=json.dumps(plan))
    check_eq(out.stdout.splitlines(), cli.stdout.splitlines()[:15],
             "the top 15 words")


def test_pip_install_offline(d):
    """pip install ./python in a fresh venv, with no index at all."""
    venv = d.path("venv")
    r = subprocess.run([sys.executable, "-m", "venv", venv],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print("skip: python3 -m venv failed: %s" % r.stderr.strip())
        return
    py = os.path.join(venv, "bin", "python")
    r = subprocess.run([py, "-m", "pip", "install", "--no-index", "-q",
                        os.path.join(SRCDIR, "python")],
                       capture_output=True, text=True, timeout=120)
    check_eq(r.returncode, 0, "pip install (%s)" % r.stderr)
    r = subprocess.run([py, "-c", "import ember, sys; "
                        "s = ember.connect(sys.argv[1]); "
                        "print(ember.__file__, s.range(10).sum())",
                        d.socket], capture_output=True, text=True,
                       timeout=60, cwd=d.tmpdir)
    check_eq(r.returncode, 0, "the installed package (%s)" % r.stderr)
    check(r.stdout.startswith(venv) and r.stdout.split()[-1] == "45",
          "imported from the venv: %r" % r.stdout)


if __name__ == "__main__":
    run_tests(globals())
