"""Keyed data on the client side: pairs (-7) and groups (-8) on the result
stream read by libember, the CLI and the Python client, byte for byte
from a scripted peer; the Python client's keyed Dataset methods and
ember.pyspark's keyed RDD methods building plans; and the same against a
real emberd, compared with plain Python."""

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading

from harness import *

sys.path.insert(0, os.path.join(SRCDIR, "python"))
import ember  # noqa: E402

KEYED_READER = os.path.join(BUILDDIR, "tests", "integration", "keyed_reader")


# ---------------------------------------------------------------------------
# The result stream's bytes, as docs/protocol.md ("Pairs and groups") has
# them.

def frame(b):
    """A frame, or -5 for None."""
    if b is None:
        return struct.pack(">i", -5)
    return struct.pack(">i", len(b)) + b


def pair(k, v):
    return struct.pack(">i", -7) + frame(k) + frame(v)


def group(k, vs):
    return (struct.pack(">i", -8) + frame(k) + struct.pack(">i", len(vs)) +
            b"".join(frame(v) for v in vs))


class ScriptedEmberd:
    """A peer on a Unix socket that speaks emberd's control frames and
    answers every execute with the partitions it was given (each the bytes
    of its records), in pull or push mode.  It remembers the plans it was
    sent."""

    def __init__(self, partitions):
        self.partitions = partitions
        self.dir = tempfile.mkdtemp(prefix="ember-scripted-")
        self.path = os.path.join(self.dir, "emberd.sock")
        self.plans = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.threads = []
        self.accepting = in_thread(self._accept)

    def close(self):
        try:
            socket.socket(socket.AF_UNIX).connect(self.path)
        except OSError:
            pass
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.sock.fileno() == -1:
                conn.close()
                return
            t = threading.Thread(target=self._serve, args=(conn,),
                                 daemon=True)
            t.start()
            self.threads.append(t)

    @staticmethod
    def _recv(conn, n):
        data = b""
        while len(data) < n:
            got = conn.recv(n - len(data))
            if not got:
                raise EOFError
            data += got
        return data

    def _int(self, conn):
        return struct.unpack(">i", self._recv(conn, 4))[0]

    def _reply(self, conn, obj):
        body = json.dumps(obj).encode()
        conn.sendall(struct.pack(">i", len(body)) + body)

    def _serve(self, conn):
        try:
            with conn:
                while True:
                    req = json.loads(self._recv(conn, self._int(conn)))
                    if req.get("op") == "hello":
                        self._reply(conn, {"ok": True, "version": 1,
                                           "session": "s-1",
                                           "server": "scripted"})
                    elif req.get("op") == "execute":
                        self.plans.append(req["plan"])
                        self._reply(conn, {
                            "ok": True, "operation": "o-1",
                            "partitions": len(self.partitions),
                            "reattachable": False})
                        self._stream(conn, req["action"] == "iterate")
                    else:
                        self._reply(conn, {"ok": True})
        except (EOFError, OSError):
            pass

    def _stream(self, conn, pull):
        for body in self.partitions:
            if pull and self._int(conn) == 0:
                conn.sendall(struct.pack(">i", 0))
                return
            conn.sendall(struct.pack(">i", 1) + body + struct.pack(">i", -1))
        if pull:
            self._int(conn)
        conn.sendall(struct.pack(">i", 0))


# A value of over a megabyte makes libember's buffer grow and move in the
# middle of a group: its pointers must be taken after.
BIG = b"x" * (1536 * 1024)
KEYED = [
    frame(b"plain") + pair(b"k", b"v") + pair(b"nul", None) +
    group(b"g", [b"a", None, b"", b"b\tc"]),
    group(b"empty", []) + frame(None) + pair(b"a\x00b", b"") +
    group(b"big", [b"1", BIG, b"2"]) + pair(b"after", b"big"),
]
KEYED_LINES = [b"plain", b"k\tv", b"nul\t", b"g\ta\t\t\tb\tc",
               b"empty", b"", b"a\x00b\t", b"big\t1\t" + BIG + b"\t2",
               b"after\tbig"]


@no_daemon
def test_cli_prints_pairs_and_groups(_):
    """The CLI prints a pair as key<TAB>value and a group as
    key<TAB>v1<TAB>v2..., a null value as an empty one (as save writes
    them), iterating and collecting."""
    with ScriptedEmberd(KEYED) as peer:
        plan = os.path.join(peer.dir, "plan.json")
        write_file(plan, '{"source": {"range": {"start": 0, "end": 1}}}')
        for mode in ([], ["--collect"]):
            r = subprocess.run([EMBER, "--socket", peer.path, "run"] + mode +
                               [plan], capture_output=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
            check_eq(r.stdout.split(b"\n"), KEYED_LINES + [b""],
                     "lines %s" % mode)


@no_daemon
def test_libember_next_refuses_a_keyed_record(_):
    """ember_next reads the plain records and refuses a pair or a group
    (KEYED_RECORD) leaving it unread; ember_next_item then reads it, with
    its key and values apart, and the stream goes on."""
    check(os.path.exists(KEYED_READER), "%s is built (make check builds "
          "it)" % KEYED_READER)
    with ScriptedEmberd(KEYED) as peer:
        r = subprocess.run([KEYED_READER, peer.path], capture_output=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
        want = [b"record plain", b"refused KEYED_RECORD",
                b"pair k v", b"refused KEYED_RECORD", b"pair nul (null)",
                b"refused KEYED_RECORD",
                b"group g 4: a (null)  b\tc",
                b"refused KEYED_RECORD", b"group empty 0:",
                b"record (null)", b"refused KEYED_RECORD",
                b"pair a\\0b ", b"refused KEYED_RECORD",
                b"group big 3: 1 <1572864 bytes of x> 2",
                b"refused KEYED_RECORD", b"pair after big", b"end"]
        check_eq(r.stdout.split(b"\n"), want + [b""], "what it read")


@no_daemon
def test_python_decodes_pairs_and_groups(_):
    """The Python client gives a pair as (key, value), a group as (key,
    [values]), str or bytes as asked, collecting and iterating."""
    with ScriptedEmberd(KEYED) as peer:
        s = ember.connect(peer.path)
        try:
            ds = s.range(0, 1)
            want = [b"plain", (b"k", b"v"), (b"nul", None),
                    (b"g", [b"a", None, b"", b"b\tc"]), (b"empty", []),
                    None, (b"a\x00b", b""), (b"big", [b"1", BIG, b"2"]),
                    (b"after", b"big")]
            check_eq(ds.collect(decode=False), want, "bytes")
            check_eq(list(ds.to_local_iterator(decode=False)), want,
                     "bytes, iterated")

            def text(r):
                if isinstance(r, bytes):
                    return r.decode()
                if isinstance(r, tuple):
                    k, v = r
                    return (k.decode(), [text(x) for x in v]
                            if isinstance(v, list) else text(v))
                return r
            check_eq(ds.collect(), [text(r) for r in want], "str")
            check_eq(list(ds), [text(r) for r in want], "str, iterated")
        finally:
            s.close()


@no_daemon
def test_python_reads_keyed_records_a_byte_at_a_time(_):
    """Every cut of the stream inside a pair or a group waits for the rest
    (the batch reader never gives part of one)."""
    from ember import _wire
    body = (KEYED[0] + group(b"empty", []) + frame(None) +
            pair(b"a\x00b", b"") + struct.pack(">i", -1))
    whole, status = _wire_of(body)._parse_batch()
    check_eq(status, -1, "status")
    for cut in range(len(body) - 1):
        w = _wire_of(body[:cut])
        got, status = w._parse_batch()
        check_eq(status, 0, "status at %d" % cut)
        check_eq(got, whole[:len(got)], "records at %d" % cut)
        check(w.pos + w._next_need() > cut, "need at %d" % cut)
    bad = struct.pack(">i", -7) + frame(None) + frame(b"v")
    try:
        _wire_of(bad)._parse_batch()
        check(False, "a null key was taken")
    except ember.ProtocolError as e:
        check("length -5" in str(e), "message %r" % e)
    check(_wire.PAIR == -7 and _wire.GROUP == -8, "markers")


@no_daemon
def test_dataset_keyed_plans(_):
    """Each keyed method adds the op of docs/plans.md; join and union
    embed the other dataset's whole plan; reduce_by_key takes the
    built-in functions and their Python names, and refuses others."""
    import operator
    with ScriptedEmberd([]) as peer:
        s = ember.connect(peer.path)
        try:
            ds = s.parallelize(["a,1", "b,2"], partitions=2)
            other = s.range(0, 3, partitions=1).key_by()

            def last(d):
                return d.plan["ops"][-1]
            check_eq(last(ds.key_by()), {"key_by": {}}, "key_by")
            check_eq(last(ds.key_by((",", 0), value=(",", 1))),
                     {"key_by": {"field": {"sep": ",", "index": 0},
                                 "value": {"field": {"sep": ",",
                                                     "index": 1}}}},
                     "key_by field")
            check_eq(last(ds.key_by(regex=r"(\w),", group=1)),
                     {"key_by": {"regex": r"(\w),", "group": 1}},
                     "key_by regex")
            kv = ds.key_by((",", 0))
            check_eq(last(kv.keys()), {"map": "key"}, "keys")
            check_eq(last(kv.values()), {"map": "value"}, "values")
            check_eq(last(kv.reduce_by_key("sum")),
                     {"reduce_by_key": {"fn": "sum"}}, "reduce_by_key")
            check_eq(last(kv.reduce_by_key(operator.add, partitions=3)),
                     {"reduce_by_key": {"fn": "sum", "partitions": 3}},
                     "operator.add")
            check_eq(last(kv.reduce_by_key(max)),
                     {"reduce_by_key": {"fn": "max"}}, "max")
            check_eq(last(kv.reduce_by_key("concat", sep="+")),
                     {"reduce_by_key": {"fn": "concat", "sep": "+"}},
                     "concat")
            # A Python function: combined per partition, grouped, folded.
            ops = kv.reduce_by_key(lambda a, b: a + b).plan["ops"]
            check(any("group_by_key" in op for op in ops),
                  "reduce_by_key(lambda): %r" % [list(op) for op in ops])
            for bad, exc in (("product", ValueError),):
                try:
                    kv.reduce_by_key(bad)
                    check(False, "reduce_by_key(%r) taken" % (bad,))
                except exc:
                    pass
            check_eq(last(kv.group_by_key(partitions=4)),
                     {"group_by_key": {"partitions": 4}}, "group_by_key")
            check_eq(last(ds.distinct()), {"distinct": {}}, "distinct")
            check_eq(last(kv.sort_by_key(descending=True, numeric=True)),
                     {"sort_by": {"descending": True, "numeric": True}},
                     "sort_by_key")
            check_eq(last(ds.repartition(5)),
                     {"repartition": {"partitions": 5}}, "repartition")
            check_eq(last(kv.join(other)),
                     {"join": {"plan": other.plan}}, "join")
            check_eq(last(kv.left_outer_join(other, partitions=2)),
                     {"join": {"plan": other.plan, "how": "left",
                               "partitions": 2}}, "left_outer_join")
            check_eq(last(ds.union(s.range(0, 2))),
                     {"union": {"plan": s.range(0, 2).plan}}, "union")
            try:
                ds.repartition(0)
                check(False, "repartition(0) taken")
            except ValueError:
                pass
        finally:
            s.close()


@no_daemon
def test_join_results_are_pairs_of_values(_):
    """A join's groups of two values come back as (key, (v, w)); a
    group_by_key's as (key, [values])."""
    stream = [group(b"k", [b"v", None]) + group(b"j", [b"1", b"2"])]
    with ScriptedEmberd(stream) as peer:
        s = ember.connect(peer.path)
        try:
            kv = s.parallelize(["a"]).key_by()
            check_eq(kv.left_outer_join(kv).collect(),
                     [("k", ("v", None)), ("j", ("1", "2"))], "join")
            check_eq(kv.join(kv).limit(5).collect(decode=False),
                     [(b"k", (b"v", None)), (b"j", (b"1", b"2"))],
                     "join, bytes, then limit")
            check_eq(kv.group_by_key().collect(),
                     [("k", ["v", None]), ("j", ["1", "2"])], "groups")
        finally:
            s.close()


@no_daemon
def test_pyspark_key_bytes_keep_equality_and_order(_):
    """ember.pyspark's keys cross the shuffle as bytes that give back the
    object, and sort as Python sorts str and numbers."""
    from ember import _pyref
    numbers = [0, -1, 1, 2 ** 40, -2 ** 40, 0.5, -0.25, 1e300, -1e300,
               3, 2.75, -7, 10 ** 30]
    check_eq(sorted(numbers, key=_pyref.enc), sorted(numbers), "numbers")
    words = ["", "a", "ab", "b", "\u00e9", "\U0001f600", "Z", "a\x00"]
    check_eq(sorted(words, key=_pyref.enc), sorted(words), "str")
    for x in numbers + words + [None, (1, "a"), frozenset([1]), b"x",
                                True, [1, 2]]:
        b = _pyref.enc(x)
        check_eq(_pyref.dec(b), x, "round trip of %r" % (x,))
        check_eq(_pyref.dec(b.decode("utf-8", "surrogateescape")), x,
                 "round trip of %r as a worker gives it" % (x,))
        check_eq(_pyref.enc(_pyref.dec(b)), b, "bytes of %r" % (x,))
    check_eq([_pyref.num_dec(_pyref.num_enc(x)) for x in (3, -2, 0.5)],
             [3, -2, 0.5], "numbers for sum")


@no_daemon
def test_pyspark_keyed_methods_exist(_):
    """The keyed RDD methods are there; reduceByKey of operator.add is
    ember's own sum, of any other function a group and a fold."""
    import operator
    from ember import pyspark
    with ScriptedEmberd([]) as peer:
        sc = pyspark.SparkContext(socket=peer.path)
        try:
            rdd = sc.parallelize([("a", 1), ("b", 2)], 2)
            for name in ("reduceByKey", "groupByKey", "sortBy", "sortByKey",
                         "join", "leftOuterJoin", "distinct", "repartition",
                         "union", "keys", "values", "mapValues", "keyBy",
                         "countByKey"):
                check(callable(getattr(rdd, name)), name)
            ops = rdd.reduceByKey(operator.add, 3)._ds.plan["ops"]
            check_eq(ops[-2], {"reduce_by_key": {"fn": "sum",
                                                 "partitions": 3}},
                     "reduceByKey(add)")
            check_eq(rdd.reduceByKey(operator.add, 3).getNumPartitions(), 3,
                     "partitions")
            check_eq(rdd.union(rdd).getNumPartitions(), 4, "union's")
            # Any other function: combined per partition, grouped, folded.
            ops = rdd.reduceByKey(lambda a, b: a * b, 3)._ds.plan["ops"]
            check(any("group_by_key" in op for op in ops),
                  "reduceByKey(lambda): no group_by_key in %r" %
                  [list(op) for op in ops])
        finally:
            sc.stop()


# ---------------------------------------------------------------------------
# Against emberd: each keyed method's records, compared with plain Python.

WORDS = ("the cat sat on the mat the end a cat is not a dog "
         "on a log").split()
LINES = ["%s,%d" % (w, i % 7) for i, w in enumerate(WORDS * 13)]


def _session(d, **kw):
    return ember.connect(d.socket, **kw)


def _sums(lines):
    out = {}
    for line in lines:
        k, v = line.split(",")
        out[k] = out.get(k, 0) + int(v)
    return out


def test_reduce_by_key_as_python(d):
    """reduce_by_key's sum, count, min, max and concat give what Python
    gives, over several partitions in and out."""
    with _session(d) as s:
        kv = s.parallelize(LINES, partitions=4).key_by(
            (",", 0), value=(",", 1))
        got = dict(kv.reduce_by_key("sum", partitions=3).collect())
        check_eq({k: int(v) for k, v in got.items()}, _sums(LINES), "sum")
        counts = {}
        for line in LINES:
            k = line.split(",")[0]
            counts[k] = counts.get(k, 0) + 1
        check_eq({k: int(v) for k, v in
                  kv.reduce_by_key("count").collect()}, counts, "count")
        for fn, py in (("min", min), ("max", max)):
            want = {}
            for line in LINES:
                k, v = line.split(",")
                want[k] = py(want.get(k, int(v)), int(v))
            check_eq({k: int(v) for k, v in
                      kv.reduce_by_key(fn).collect()}, want, fn)
        # Any associative Python function, over the values as Python
        # gets them: folded in input order, as Spark folds them.
        got = dict(kv.reduce_by_key(lambda a, b: a + "|" + b,
                                    partitions=2).collect())
        want = {}
        for line in LINES:
            k, v = line.split(",")
            want[k] = want[k] + "|" + v if k in want else v
        check_eq(got, want, "a Python function, in input order")
        concat = dict(kv.reduce_by_key("concat", sep="+").collect())
        want = {}
        for line in LINES:
            k, v = line.split(",")
            want.setdefault(k, []).append(v)
        check_eq(concat, {k: "+".join(v) for k, v in want.items()},
                 "concat, in input order")


def test_group_by_key_keeps_input_order(d):
    """group_by_key gives each key once, its values in input order."""
    with _session(d) as s:
        groups = s.parallelize(LINES, partitions=3).key_by(
            (",", 0), value=(",", 1)).group_by_key(partitions=2).collect()
        want = {}
        for line in LINES:
            k, v = line.split(",")
            want.setdefault(k, []).append(v)
        check_eq(sorted(k for k, _ in groups), sorted(want), "keys")
        check_eq(dict(groups), want, "values")


def test_sort_by_is_one_sorted_stream(d):
    """sort_by over partitions gives one sorted stream, by bytes or as
    numbers, ascending or descending; sort_by_key sorts pairs by key."""
    nums = [str((i * 7919) % 1000 - 500) for i in range(400)]
    with _session(d) as s:
        ds = s.parallelize(nums, partitions=4)
        check_eq(ds.sort_by(partitions=3).collect(), sorted(nums), "bytes")
        check_eq(ds.sort_by(numeric=True, partitions=3).collect(),
                 sorted(nums, key=int), "numeric")
        check_eq(ds.sort_by(numeric=True, descending=True).collect(),
                 sorted(nums, key=int, reverse=True), "descending")
        pairs = s.parallelize(LINES, partitions=3).key_by(
            (",", 0), value=(",", 1)).sort_by_key().collect()
        check_eq([k for k, _ in pairs], sorted(l.split(",")[0]
                                               for l in LINES), "keys")
        # Stable: equal keys keep their input order.
        check_eq(pairs, sorted([tuple(l.split(",")) for l in LINES],
                               key=lambda kv: kv[0]), "stable")


def test_distinct_repartition_union(d):
    """distinct, repartition and union as Python's set, list and +."""
    with _session(d) as s:
        ds = s.parallelize(WORDS, partitions=3)
        got = ds.distinct(partitions=2).collect()
        check_eq(sorted(got), sorted(set(WORDS)), "distinct")
        check_eq(len(got), len(set(WORDS)), "each once")
        kv = ds.key_by()
        check_eq(sorted(kv.distinct().collect()),
                 sorted({(w, w) for w in WORDS}), "distinct pairs")
        r = ds.repartition(5)
        check_eq(sorted(r.collect()), sorted(WORDS), "repartition")
        with d.client() as c:
            check_eq(c.request({"op": "execute", "plan": r.plan,
                                "action": "count"})["partitions"], 5,
                     "repartition's partitions")
        other = s.range(0, 5, partitions=2)
        check_eq(ds.union(other).collect(),
                 WORDS + [str(i) for i in range(5)], "union")


def test_join_as_python(d):
    """join and left_outer_join give Python's nested-loop join."""
    left = [("k%d" % (i % 6), "l%d" % i) for i in range(20)]
    right = [("k%d" % (i % 4), "r%d" % i) for i in range(9)]

    def pairs(s, rows, n):
        return s.parallelize(["%s,%s" % r for r in rows],
                             partitions=n).key_by((",", 0),
                                                  value=(",", 1))
    inner = sorted((k, (v, w)) for k, v in left for k2, w in right
                   if k == k2)
    keys = {k for k, _ in right}
    outer = sorted(inner + [(k, (v, None)) for k, v in left
                            if k not in keys])
    with _session(d) as s:
        a, b = pairs(s, left, 3), pairs(s, right, 2)
        check_eq(sorted(a.join(b).collect()), inner, "inner")
        check_eq(sorted(a.left_outer_join(b, partitions=4).collect()),
                 outer, "left")


def test_keyed_iterate_take_and_cli(d):
    """Pairs stream through iterate (take counts a pair as one record)
    and the CLI prints them as key<TAB>value."""
    with _session(d) as s:
        kv = s.parallelize(LINES, partitions=3).key_by(
            (",", 0), value=(",", 1)).reduce_by_key("sum", partitions=2)
        want = {k: str(v) for k, v in _sums(LINES).items()}
        check_eq(dict(kv.to_local_iterator()), want, "iterated")
        check_eq(len(kv.take(3)), 3, "take(3)")
        plan = d.path("plan.json")
        write_file(plan, json.dumps(kv.plan))
        r = run_cli(["run", plan], socket_path=d.socket)
        check_eq(r.returncode, 0, "ember run (stderr %r)" % r.stderr)
        lines = r.stdout.splitlines()
        check_eq(dict(l.split("\t") for l in lines), want, "CLI lines")


def test_keyed_limit_counts_pairs(d):
    """options.limit counts a pair or a group as one record: take(n) of
    pairs gives n of them, mid-partition and mid-batch."""
    want = [(str(i), str(i)) for i in range(200)]
    with _session(d) as s:
        kv = s.range(200, partitions=2).key_by()
        for n in (1, 3, 150):
            check_eq(kv.take(n), want[:n], "take(%d)" % n)
        groups = kv.group_by_key(partitions=2).take(3)
        check_eq(len(groups), 3, "take(3) of groups")
        check_eq([v for _, v in groups], [[k] for k, _ in groups],
                 "whole groups")


def test_keyed_stream_reattaches(d):
    """A proxy cuts every connection after 100 kB of a stream of pairs:
    the iterator reattaches right after the last pair it yielded, and
    each pair comes once, whole, in order."""
    from proxy import CuttingProxy
    proxy = CuttingProxy(d.socket, d.path("proxy.sock"), 100000)
    try:
        with ember.connect(proxy.path) as s:
            got = list(s.range(300000, partitions=3).key_by())
            check_eq(len(got), 300000, "pairs through the cuts")
            check(got == [(str(i), str(i)) for i in range(300000)],
                  "pairs in order")
        check(proxy.cuts > 0, "no cut")
    finally:
        proxy.close()


def test_libember_reads_a_join(d):
    """libember reads a real join's groups and a reduce_by_key's pairs,
    key and values apart."""
    def pairs(rows, n):
        return {"source": {"parallelize": {"records": rows}},
                "partitions": n,
                "ops": [{"key_by": {"field": {"sep": ",", "index": 0},
                                    "value": {"field": {"sep": ",",
                                                        "index": 1}}}}]}
    plan = pairs(["a,1", "b,2", "a,3"], 2)
    plan["ops"].append({"join": {"plan": pairs(["a,x", "c,y"], 1),
                                 "how": "left", "partitions": 1}})
    r = subprocess.run([KEYED_READER, d.socket, json.dumps(plan)],
                       capture_output=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    check_eq(r.returncode, 0, "exit status (stderr %r)" % r.stderr)
    lines = r.stdout.split(b"\n")
    check_eq(lines[-2:], [b"end", b""], "the end")
    check_eq(lines[0:-2:2], [b"refused KEYED_RECORD"] * 3, "refusals")
    check_eq(sorted(lines[1:-2:2]), [b"group a 2: 1 x", b"group a 2: 3 x",
                                      b"group b 2: 2 (null)"], "groups")


def test_cli_prints_what_save_writes(d):
    """ember run prints pairs and groups, null values among them, as the
    lines save writes."""
    with _session(d) as s:
        a = s.parallelize(["a,1", "b,2", "a,3"], partitions=2).key_by(
            (",", 0), value=(",", 1))
        b = s.parallelize(["a,x"], partitions=1).key_by(
            (",", 0), value=(",", 1))
        for i, ds in enumerate((a.left_outer_join(b, partitions=2),
                                a.reduce_by_key("concat", sep="+"))):
            out = job_writable(d.path("saved%d" % i))
            ds.save(out, overwrite=True)
            saved = b"".join(
                open(os.path.join(out, p), "rb").read()
                for p in sorted(os.listdir(out)) if p.startswith("part-"))
            plan = d.path("plan.json")
            write_file(plan, json.dumps(ds.plan))
            r = subprocess.run([EMBER, "--socket", d.socket, "run", plan],
                               capture_output=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            check_eq(r.returncode, 0, "ember run (stderr %r)" % r.stderr)
            check_eq(r.stdout, saved, "ember run's lines and save's")
            check((b"b\t2\t\n" if i == 0 else b"b\t2\n") in saved,
                  "lines %r" % saved)


def test_pyspark_keyed_as_python(d):
    """ember.pyspark's keyed methods give what plain Python (PySpark's
    semantics) gives, keys and values of several types."""
    import operator
    from ember import pyspark
    sc = pyspark.SparkContext(socket=d.socket)
    try:
        words = sc.parallelize(WORDS, 3)
        counts = words.map(lambda w: (w, 1)).reduceByKey(operator.add, 2)
        want = {}
        for w in WORDS:
            want[w] = want.get(w, 0) + 1
        check_eq(dict(counts.collect()), want, "word count")
        check_eq(counts.getNumPartitions(), 2, "partitions")
        nums = sc.parallelize([(i % 5, i * 0.5) for i in range(40)], 4)
        sums = {}
        for i in range(40):
            sums[i % 5] = sums.get(i % 5, 0) + i * 0.5
        check_eq(dict(nums.reduceByKey(operator.add).collect()), sums,
                 "int keys, float sums")
        check_eq(dict(words.map(lambda w: (w, [w])).reduceByKey(
            lambda a, b: a + b, 2).mapValues(len).collect()), want,
                 "a lambda reduceByKey over lists")
        prods = {}
        for i in range(40):
            prods[i % 5] = prods.get(i % 5, 1) * (i + 1)
        check_eq(dict(sc.parallelize([(i % 5, i + 1) for i in range(40)], 4)
                      .reduceByKey(lambda a, b: a * b).collect()), prods,
                 "a lambda reduceByKey, as PySpark")
        check_eq(dict(nums.reduceByKey(max).collect()),
                 {k: max(i * 0.5 for i in range(40) if i % 5 == k)
                  for k in range(5)}, "max")
        groups = dict(nums.groupByKey().collect())
        check_eq(groups, {k: [i * 0.5 for i in range(40) if i % 5 == k]
                          for k in range(5)}, "groupByKey")
        mixed = [(-3, "a"), (10, "b"), (2.5, "c"), (-0.5, "d"), (0, "e")]
        check_eq(sc.parallelize(mixed, 2).sortByKey().collect(),
                 sorted(mixed), "sortByKey of numbers")
        check_eq(sc.parallelize(WORDS, 2).sortBy(lambda w: w,
                                                 ascending=False)
                 .collect(), sorted(WORDS, reverse=True), "sortBy")
        a = sc.parallelize([(1, "x"), (2, "y"), (2, "z"), (3, None)], 2)
        b = sc.parallelize([(2, ("t", 1)), (3, 4), (4, 5)], 2)
        check_eq(sorted(a.join(b).collect(), key=repr),
                 sorted([(2, ("y", ("t", 1))), (2, ("z", ("t", 1))),
                         (3, (None, 4))], key=repr), "join")
        check_eq(sorted(a.leftOuterJoin(b).collect(), key=repr),
                 sorted([(1, ("x", None)), (2, ("y", ("t", 1))),
                         (2, ("z", ("t", 1))), (3, (None, 4))], key=repr),
                 "leftOuterJoin")
        check_eq(sorted(sc.parallelize([1, 2, 2, (1,), (1,)], 2)
                        .distinct().collect(), key=repr),
                 sorted([1, 2, (1,)], key=repr), "distinct of objects")
        check_eq(sorted(words.distinct().collect()), sorted(set(WORDS)),
                 "distinct of text")
        check_eq(sorted(nums.repartition(3).collect()), sorted(
            (i % 5, i * 0.5) for i in range(40)), "repartition")
        check_eq(a.keys().union(words).collect(),
                 [1, 2, 2, 3] + WORDS, "union")
        check_eq(dict(nums.countByKey()), {k: 8 for k in range(5)},
                 "countByKey")
        check_eq(sorted(counts.mapValues(lambda n: n * 10).values()
                        .collect()), sorted(n * 10 for n in want.values()),
                 "mapValues, values")
    finally:
        sc.stop()


@no_daemon
def test_pyspark_actions_read_shuffled_pairs_here(_):
    """An action right after a shuffle makes its elements of the pairs
    and groups here, from their bytes as ember.pyspark's Python ops wrote
    them (a number's text for reduceByKey's values)."""
    import operator
    from ember import _pyref, pyspark
    key = val = _pyref.enc
    stream = [pair(key("a"), b"3") + pair(key(7), b"2.5"),
              pair(key((1, "t")), b"-4")]
    with ScriptedEmberd(stream) as peer:
        sc = pyspark.SparkContext(socket=peer.path)
        try:
            counts = sc.parallelize([("a", 1)], 2).reduceByKey(operator.add)
            want = [("a", 3), (7, 2.5), ((1, "t"), -4)]
            check_eq(counts.collect(), want, "collect")
            check_eq(counts.take(2), want[:2], "take")
            check_eq(list(counts.toLocalIterator()), want, "iterator")
            check_eq(counts.getNumPartitions(), 2, "partitions")
            ops = [next(iter(op)) for op in counts._raw.plan["ops"]]
            check_eq(ops, ["python", "python", "reduce_by_key"],
                     "no Python op after the shuffle")
        finally:
            sc.stop()
    stream = [group(key("k"), [val(None), val({"x": 1})]) +
              group(key(2), [val("w"), None])]
    with ScriptedEmberd(stream) as peer:
        sc = pyspark.SparkContext(socket=peer.path)
        try:
            rdd = sc.parallelize([("a", 1)], 2)
            check_eq(rdd.leftOuterJoin(rdd).collect(),
                     [("k", (None, {"x": 1})), (2, ("w", None))],
                     "leftOuterJoin")
        finally:
            sc.stop()


def _wire_of(data):
    """A Wire with data buffered and no socket behind it."""
    from ember import _wire

    class Once:
        def recv_into(self, view):
            n = len(data)
            view[:n] = data
            return n
    w = _wire.Wire("scripted", sock=Once())
    if data:
        w._fill(len(data))
    w.sock = socket.socket(socket.AF_UNIX)
    return w


if __name__ == "__main__":
    run_tests(globals())
