"""Python functions in plans (docs/python.md, "Python functions"): results
against plain Python, C and Python ops in one chain, map_partitions over
batches and early stops, the types a record may leave Python as,
broadcasts of Python objects unpickled once per worker, workers reused
after a good task and not after an exception, the whole traceback, the
version check, users kept apart, and ember.pyspark."""

import collections
import itertools
import json
import os
import re
import sys

from harness import *
from users import USERS, AsUser, needs_users

sys.path.insert(0, os.path.join(SRCDIR, "python"))
import ember  # noqa: E402

VERSION = "%d.%d" % sys.version_info[:2]


WORDS = """The quick brown fox jumps over the lazy dog
the dog barks; the FOX runs
Über straße and the Fox again
""" * 50

EVENTS = [json.dumps({"user": {"name": "u%d" % (i % 7)}, "n": i,
                      "tags": ["a", "b"][: i % 3]}) for i in range(500)]


def _session(d, **kw):
    return ember.connect(d.socket, **kw)


def _text(d, name, content):
    """A file the job's user can read."""
    os.chmod(d.tmpdir, 0o755)
    path = d.path(name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    os.chmod(path, 0o644)
    return path


@needs_python
def test_word_count_mixed_chain(d):
    """text -> C lower -> a Python filter -> C split -> Python map ->
    count_by_value, against plain Python."""
    path = _text(d, "words.txt", WORDS)
    stop = {"the", "and"}
    with _session(d) as sc:
        got = (sc.text_file(path, partitions=3)
               .map_lower()
               .filter(lambda line: "dog" in line or "fox" in line)
               .flat_map_split(" ")
               .map(lambda w: w.strip(";"))
               .filter(lambda w: w and w not in stop)
               .count_by_value())
    want = collections.Counter(
        w.strip(";") for line in WORDS.splitlines()
        if "dog" in line.lower() or "fox" in line.lower()
        for w in line.lower().split(" ")
        if w.strip(";") and w.strip(";") not in stop)
    check_eq(dict(got), dict(want), "word counts")


@needs_python
def test_regex_json_closure(d):
    """A regex, JSON fields and a closure over local variables, each
    against plain Python."""
    pattern = re.compile(r"^u[135]$")
    threshold, suffix = 250, "!"
    with _session(d) as sc:
        ds = sc.parallelize(EVENTS, partitions=4)
        names = (ds.map(lambda s: json.loads(s)["user"]["name"])
                 .filter(lambda n: pattern.match(n) is not None).collect())
        big = (ds.map(json.loads)
               .filter(lambda e: e["n"] >= threshold)
               .flat_map(lambda e: [t + suffix for t in e["tags"]])
               .collect())
        lens = ds.map(lambda s: len(json.loads(s)["tags"])).collect()
    events = [json.loads(s) for s in EVENTS]
    check_eq(names, [e["user"]["name"] for e in events
                     if pattern.match(e["user"]["name"])], "regex")
    check_eq(big, [t + suffix for e in events if e["n"] >= threshold
                   for t in e["tags"]], "closure")
    check_eq(lens, [str(len(e["tags"])) for e in events], "ints as text")


@needs_python
def test_map_partitions_streams(d):
    """map_partitions sees each partition whole, over many batches, and
    what it yields streams; a limit after it stops it halfway, and the
    worker goes on."""
    n = 20000
    with _session(d) as sc:
        def running(it):
            total = 0
            for x in it:
                total += int(x)
                yield total
        got = sc.range(n, partitions=2).map_partitions(running).collect()
        want = []
        for lo, hi in ((0, n // 2), (n // 2, n)):
            total = 0
            for x in range(lo, hi):
                total += x
                want.append(str(total))
        check_eq(got, want, "running sums")
        first = (sc.range(10 ** 7, partitions=2).map_partitions(running)
                 .limit(3).collect())
        check_eq(first[:3], ["0", "1", "3"], "limit after map_partitions")
        # A function that returns early stops the partition's reading:
        # half a billion records each would take minutes.
        got = sc.range(10 ** 9, partitions=2).map_partitions(
            lambda it: itertools.islice(it, 2)).collect()
        check_eq(got, ["0", "1", "500000000", "500000001"], "islice")
        try:
            sc.range(10, partitions=1).map_partitions(_fail_third).count()
        except ember.PythonError as e:
            check(re.search(r"in _fail_third\n.*\nKeyError: 'third'\Z",
                            e.traceback), e.traceback)
        else:
            raise AssertionError("map_partitions did not fail")
        check_eq(sc.range(5, partitions=1)
                 .map_partitions(lambda it: [sum(map(int, it))])
                 .map(lambda x: x * 2).collect(), ["20"], "then a map")


@needs_python
def test_small_partition_needs_no_thread(d):
    """A partition that fits in one batch (1,024 records) is all there
    when the stage finishes: map_partitions, reduce and fold run on the
    worker's own thread, no Python thread started; a bigger one streams
    through one."""
    def threads(it):
        import _thread
        return ["%d %d" % (sum(1 for _ in it), _thread._count())]
    with _session(d) as sc:
        check_eq(sc.range(1000, partitions=1).map_partitions(threads)
                 .collect(), ["1000 0"], "one batch")
        check_eq(sc.range(5000, partitions=1).map_partitions(threads)
                 .collect(), ["5000 1"], "five batches")
        check_eq(sc.range(10, partitions=2).map(int).fold(
            0, lambda a, b: a + b), 45, "fold")


def _fail_third(it):
    for i, x in enumerate(it):
        if i == 2:
            raise KeyError("third")
        yield x


@needs_python
def test_reduce_and_fold(d):
    with _session(d) as sc:
        ds = sc.range(1, 1001, partitions=7)
        check_eq(ds.reduce(lambda a, b: str(int(a) + int(b))),
                 str(sum(range(1, 1001))), "reduce")
        check_eq(ds.map(int).reduce(max), 1000, "reduce max")
        check_eq(ds.map(int).fold(0, lambda a, b: a + b),
                 sum(range(1, 1001)), "fold")
        # A mutable zero: each partition folds into a copy of its own.
        got = ds.fold([], lambda acc, x: acc + [x] if isinstance(x, str)
                      else acc + x)
        check_eq(sorted(got, key=int), [str(i) for i in range(1, 1001)],
                 "fold into a list")
        check_eq(ds.reduce("sum"), sum(range(1, 1001)), "reduce sum")
        try:
            sc.range(0).reduce(lambda a, b: a)
        except ValueError as e:
            check("empty" in str(e), str(e))
        else:
            raise AssertionError("reduce of nothing")


@needs_python
def test_record_types(d):
    """What may leave Python: str, bytes, None, int, float; bytes that
    are not UTF-8 go through a function unchanged; anything else fails
    naming its type."""
    with _session(d) as sc:
        got = sc.parallelize(["1", None, "x"], partitions=1).map(
            lambda s: {"1": 1, None: None, "x": 2.5}[s]).collect()
        check_eq(got, ["1", None, "2.5"], "int, None, float")
        got = sc.parallelize(["ab"], partitions=1).map(
            lambda s: s.encode() + b"\xff").collect(decode=False)
        check_eq(got, [b"ab\xff"], "bytes")
        raw = sc.parallelize(["a"], partitions=1).pipe(
            "printf 'caf\\351\\n'")
        check_eq(raw.map(lambda s: s.upper()).collect(decode=False),
                 [b"CAF\xe9"], "bytes that are not UTF-8")
        for bad, name in ((lambda s: {"a": 1}, "dict"),
                          (lambda s: True, "bool"),
                          (lambda s: [s], "list")):
            try:
                sc.range(3).map(bad).count()
            except ember.TaskFailed as e:
                check(("not %s" % name) in e.reason, e.reason)
            else:
                raise AssertionError("a %s left Python" % name)
        # Between python ops records stay Python objects.
        check_eq(sc.range(3).map(lambda s: {"v": int(s)})
                 .map(lambda o: o["v"] * 10).collect(),
                 ["0", "10", "20"], "objects between python ops")


@needs_python
@with_daemon(sets=["workers.max=1"])
def test_broadcast_unpickled_once_per_worker(d):
    """b.value is unpickled at most once per worker, and kept while it is
    reused."""
    marks = d.path("unpickled")
    os.chmod(d.tmpdir, 0o777)

    class Table(dict):
        def __reduce__(self):
            return (_load_table, (marks, dict(self)))

    with _session(d) as sc:
        table = sc.broadcast_object(Table(a="1", b="2"))
        check_eq(table.value["a"], "1", "the client's value")
        for _ in range(3):
            got = sc.parallelize(["a", "b", "a", "c"], partitions=4).map(
                lambda k: table.value.get(k, "-")).collect()
            check_eq(got, ["1", "2", "1", "-"], "looked up")
        pids = sc.range(4, partitions=4).map(
            lambda _: os.getpid()).collect()
    with open(marks) as f:
        lines = f.read().split()
    check_eq(len(set(pids)), 1, "one worker")
    check_eq(lines, [pids[0]], "unpickled once, by the worker")


@needs_python
def test_object_broadcast_is_not_indexed(d):
    """A pickled object has no lines to look up: it is put without a set
    index, so no helper spends the put building one."""
    with _session(d) as sc:
        b = sc.broadcast_object(list(range(1000)))
        entry = [x for x in sc.status()["broadcasts"] if x["id"] == b.id]
        check_eq([x.get("index") for x in entry], [0], "its index")
        check_eq(sc.range(3, partitions=1).map(
            lambda i: b.value[int(i) * 10]).collect(), ["0", "10", "20"],
            "its value")
    check("(broadcast_index, uid" not in d.log_text(),
          "a helper built an index: %s" % d.log_tail())


@needs_python
@with_daemon(sets=["workers.max=1"])
def test_dropped_broadcast_is_forgotten(d):
    """A reused worker does not keep the object of a broadcast that was
    dropped: unpickling the next one frees it."""
    marks = d.path("freed")
    os.chmod(d.tmpdir, 0o777)

    class Tracked(dict):
        def __reduce__(self):
            return (_load_tracked, (marks, self["name"]))

    with _session(d) as sc:
        first = sc.broadcast_object(Tracked(name="first"))
        sc.range(2, partitions=2).map(lambda _: first.value["name"]) \
            .collect()
        first.drop()
        second = sc.broadcast_object(Tracked(name="second"))
        got = sc.range(2, partitions=2).map(
            lambda _: second.value["name"]).collect()
        check_eq(got, ["second", "second"], "the second broadcast")
    with open(marks) as f:
        freed = f.read().split()
    check("first" in freed, "the dropped broadcast's object was kept "
          "(freed: %r)" % freed)


class _TrackedValue(dict):
    """A broadcast's value that says when the worker frees it."""

    def __del__(self):
        with open(self.marks, "a") as f:
            f.write(self["name"] + "\n")


def _load_tracked(marks, name):
    v = _TrackedValue(name=name)
    v.marks = marks
    return v


def _load_table(marks, items):
    with open(marks, "a") as f:
        f.write("%d\n" % os.getpid())
    return dict(items)


@needs_python
@with_daemon(sets=["workers.max=1"])
def test_worker_reuse(d):
    """A worker is reused after a good task, across jobs, and not after
    one whose function raised."""
    with _session(d) as sc:
        def pids():
            return set(sc.range(3, partitions=3).map(
                lambda _: os.getpid()).collect())
        first = pids()
        check_eq(len(first), 1, "one worker for three tasks")
        check_eq(pids(), first, "the same worker for the next job")
        try:
            sc.range(3, partitions=1).map(lambda _: 1 / 0).count()
        except ember.PythonError as e:
            failed = str(e.worker)
        else:
            raise AssertionError("the function did not fail")
        check_eq({failed}, first, "the failure came from that worker")
        after = pids()
        check(not (after & first), "the failed worker was reused")


def _rss_anon_kb(pid):
    """The anonymous memory process pid has resident, in kB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon for %d" % pid)


@needs_python
@with_daemon(sets=["workers.reuse=no", "workers.max=1"])
def test_python_started_when_first_wanted(d):
    """The fork-server starts Python only when a job first wants it: until
    then its workers fork from a process without the interpreter's heap
    (bench/README.md, "Fresh worker").  The first python task's worker
    starts it itself, the fork-server then starts it for the workers
    after, and every task's result is the same."""
    with _session(d) as sc:
        check_eq(sc.range(10, partitions=2).map_upper().count(), 10,
                 "a job without python ops")
        fs = d.forkserver_pid()
        lean = _rss_anon_kb(fs)
        got = sc.range(6, partitions=3).map(lambda x: int(x) * 7).collect()
        check_eq(got, [str(x * 7) for x in range(6)],
                 "the python job's records")
        check(wait_until(lambda: _rss_anon_kb(fs) > lean + 1024, 10),
              "the fork-server held Python before any job wanted it "
              "(anonymous memory %d kB before the python job, %d kB "
              "after)" % (lean, _rss_anon_kb(fs)))
        got = sc.range(6, partitions=3).map(lambda x: int(x) + 1).collect()
        check_eq(got, [str(x + 1) for x in range(6)],
                 "a python job on workers forked after")
    check_eq(d.forkserver_pid(), fs, "the same fork-server all along")


def _maps_python(pid):
    """Whether process pid has libpython mapped."""
    with open("/proc/%d/maps" % pid) as f:
        return "libpython" in f.read()


@needs_python
@with_daemon(sets=["workers.reuse=no", "workers.max=1"])
def test_libpython_mapped_when_first_wanted(d):
    """libpython and its libraries are out of the fork-server's address
    space until Python is first wanted (the python ops are a module
    dlopen'ed then): a worker without python ops forks without their
    mappings.  Once a python job has run, the fork-server has them, and
    its workers run python ops from the fork."""
    with _session(d) as sc:
        check_eq(sc.range(10, partitions=2).map_upper().count(), 10,
                 "a job without python ops")
        fs = d.forkserver_pid()
        check(not _maps_python(fs),
              "the fork-server mapped libpython before any job wanted it")
        got = sc.range(4, partitions=2).map(lambda x: int(x) * 3).collect()
        check_eq(got, [str(x * 3) for x in range(4)],
                 "the python job's records")
        check(wait_until(lambda: _maps_python(fs), 10),
              "the fork-server never loaded libpython once wanted")
        got = sc.range(4, partitions=2).map(lambda x: int(x) + 2).collect()
        check_eq(got, [str(x + 2) for x in range(4)],
                 "a python job on workers forked after")
    check_eq(d.forkserver_pid(), fs, "the same fork-server all along")


def _inner(x):
    raise ValueError("boom on %r" % x)


def _middle(x):
    return _inner(x) + "never"


def _outer(x):
    return _middle(x)


@needs_python
def test_traceback_arrives_whole(d):
    """The task's error is the whole Python traceback, naming the
    partition and worker; the client raises PythonError."""
    with _session(d) as sc:
        try:
            sc.range(10, partitions=2).map(
                lambda x: x if int(x) < 7 else _outer(x)).collect()
        except ember.PythonError as e:
            err = e
        else:
            raise AssertionError("no exception")
    check(isinstance(err, ember.TaskFailed), "a TaskFailed")
    check_eq(err.partition, 1, "partition")
    check(err.worker is not None and err.worker > 0, "worker pid")
    tb = err.traceback
    check(tb.startswith("Traceback (most recent call last):\n"), tb)
    check(tb.endswith("ValueError: boom on '7'"), tb)
    frames = re.findall(r"in (\S+)\n", tb)
    check_eq(frames, ["<lambda>", "_outer", "_middle", "_inner"], "frames")
    check('return _inner(x) + "never"' in tb, "source lines: " + tb)
    check("in <lambda>" in tb, tb)
    check("ember_worker" not in tb, "ember's own frames: " + tb)
    check_eq(err.records, ["0", "1", "2", "3", "4"], "records before")


@needs_python
def test_version_mismatch_refused(d):
    """A function pickled by another Python is refused before any task
    runs, naming both versions."""
    op = ember.functions.python_op("map", str.upper)
    op["python"]["version"] = "2.7"
    plan = {"source": {"range": {"end": 3}}, "ops": [op]}
    with _session(d) as sc:
        try:
            sc.execute(plan, "count")
        except ember.PlanInvalid as e:
            check(e.message.startswith("plan.ops[0].python: version: "),
                  e.message)
            check("2.7" in e.message and VERSION in e.message, e.message)
        else:
            raise AssertionError("a 2.7 function ran")
        check_eq(sc.status()["workers"], [], "workers started")


@needs_python
def test_plan_checked(d):
    """The python op's fields are checked like any op's."""
    good = ember.functions.python_op("map", str.upper)["python"]
    cases = [({}, "expected exactly one of"),
             (dict(good, filter=good["map"]), "expected exactly one of"),
             ({"map": good["map"]}, "version: missing"),
             ({"fold": good["map"], "version": VERSION}, "zero: missing"),
             (dict(good, zero="x"), "zero: only for fold"),
             (dict(good, map=""), "map: is empty"),
             (dict(good, broadcasts=[99]), "broadcasts[0]")]
    with _session(d) as sc:
        for op, needle in cases:
            try:
                sc.execute({"source": {"range": {"end": 1}},
                            "ops": [{"python": op}]}, "count")
            except ember.PlanInvalid as e:
                check(needle in e.message, "%s: %s" % (needle, e.message))
            else:
                raise AssertionError("accepted %r" % op)


@needs_python
def test_bad_pickle_fails_task(d):
    """A function that does not unpickle fails the task, in the worker."""
    op = {"python": {"map": "bm90IGEgcGlja2xl", "version": VERSION}}
    with _session(d) as sc:
        try:
            sc.execute({"source": {"range": {"end": 1}}, "ops": [op]},
                       "count")
        except ember.TaskFailed as e:
            check("did not unpickle" in e.reason, e.reason)
        else:
            raise AssertionError("a bad pickle ran")


@needs_python
@needs_users
@with_daemon(sets=["daemon.socket_mode=0666", "workers.max=2"])
def test_users_apart(d):
    """A function runs as the user who sent it, in that user's workers:
    never in another user's, nor in emberd (the unpickling side effect
    is the user's own), and a user cannot name another's broadcast."""
    marks = d.path("marks")
    os.mkdir(marks)
    os.chmod(marks, 0o777)

    class Mark:
        def __init__(self, tag):
            self.tag = tag

        def __reduce__(self):
            return (_mark, (marks, self.tag))

    def run(tag):
        def job():
            mark = Mark(tag)
            with ember.connect(d.socket) as sc:
                b = sc.broadcast_object(tag)
                got = sc.range(4, partitions=4).map(
                    lambda _: "%d %d %s %s" % (os.getuid(), os.getpid(),
                                               b.value, mark)).collect()
                return {"records": got, "broadcast": b.id}
        return job

    a = AsUser(USERS["a"], lambda ctl: run("a")()).result()
    b = AsUser(USERS["b"], lambda ctl: run("b")()).result()
    for tag, res in (("a", a), ("b", b)):
        uids = {r.split()[0] for r in res["records"]}
        check_eq(uids, {str(USERS[tag][0])}, "uid of %s's function" % tag)
        check_eq({tuple(r.split()[2:]) for r in res["records"]},
                 {(tag, tag)}, "values")
    pids_a = {r.split()[1] for r in a["records"]}
    pids_b = {r.split()[1] for r in b["records"]}
    check(not (pids_a & pids_b), "a worker ran both users' functions")
    for name in os.listdir(marks):
        tag, uid = name.split("-")[:2]
        check_eq(int(uid), USERS[tag][0], "who unpickled %s" % name)
    check(os.listdir(marks), "nothing unpickled")

    def steal():
        op = ember.functions.python_op("map", str.upper)
        op["python"]["broadcasts"] = [a["broadcast"]]
        with ember.connect(d.socket) as sc:
            try:
                sc.execute({"source": {"range": {"end": 1}}, "ops": [op]},
                           "count")
            except ember.PlanInvalid as e:
                return e.message
            return "accepted"
    msg = AsUser(USERS["b"], lambda ctl: steal()).result()
    check("plan.ops[0].python.broadcasts[0]" in msg, msg)


def _mark(marks, tag):
    path = os.path.join(marks, "%s-%d-%d" % (tag, os.getuid(), os.getpid()))
    open(path, "w").close()
    return tag


@needs_python
def test_pyspark(d):
    """ember.pyspark's SparkContext and RDD against plain Python."""
    from ember.pyspark import SparkContext
    path = _text(d, "words.txt", WORDS)
    out = d.path("saved")
    os.chmod(d.tmpdir, 0o777)
    lines = WORDS.splitlines()
    with SparkContext("local[4]", "test", socket=d.socket) as sc:
        rdd = sc.textFile(path, 3)
        check_eq(rdd.getNumPartitions(), 3, "partitions")
        words = rdd.flatMap(lambda l: l.split()).map(lambda w: w.lower())
        check_eq(dict(words.countByValue()),
                 dict(collections.Counter(w.lower() for l in lines
                                          for w in l.split())),
                 "countByValue")
        check_eq(words.count(), sum(len(l.split()) for l in lines), "count")
        nums = sc.parallelize([(i, i * i) for i in range(100)], 4)
        check_eq(nums.collect(), [(i, i * i) for i in range(100)], "tuples")
        check_eq(nums.map(lambda p: p[1]).filter(lambda x: x % 2).take(3),
                 [1, 9, 25], "take")
        check_eq(sc.range(10).first(), 0, "first")
        check_eq(sc.range(1, 11).reduce(lambda a, b: a * b), 3628800,
                 "reduce")
        check_eq(sc.range(10, numSlices=3).fold(0, lambda a, b: a + b), 45,
                 "fold")
        check_eq(sc.range(10, numSlices=3).mapPartitions(
            lambda it: [sum(it)]).collect(), [3, 12, 30], "mapPartitions")
        check_eq(list(sc.range(7, numSlices=3).toLocalIterator(
            prefetchPartitions=True)), list(range(7)), "toLocalIterator")
        b = sc.broadcast({"k": 5})
        check_eq(sc.range(3).map(lambda x: x + b.value["k"]).collect(),
                 [5, 6, 7], "broadcast")
        seen = d.path("foreach")
        sc.range(5).foreach(lambda x: open(seen, "a").write("%d\n" % x))
        with open(seen) as f:
            check_eq(sorted(map(int, f.read().split())), list(range(5)),
                     "foreach ran in the workers")
        sc.range(4).map(lambda x: x * 1.5).saveAsTextFile(out)
        parts = sorted(n for n in os.listdir(out) if n.startswith("part-"))
        text = "".join(open(os.path.join(out, p)).read() for p in parts)
        check_eq(text.split(), ["0.0", "1.5", "3.0", "4.5"], "saved")
        rdd = sc.range(6).map(lambda x: {"x": x})
        rdd.localCheckpoint()
        check_eq(rdd.collect(), [{"x": x} for x in range(6)], "checkpoint")
        check_eq(rdd.map(lambda o: o["x"]).reduce(lambda a, c: a + c), 15,
                 "after the checkpoint")
        for name in ("cogroup", "aggregateByKey", "cache"):
            try:
                getattr(rdd, name)
            except NotImplementedError as e:
                check(name in str(e), str(e))
            else:
                raise AssertionError("RDD.%s exists" % name)


MODULE = """
import re

WORD = re.compile(r"[a-z]+")


class Tally:
    def __init__(self):
        self.n = 0


def words(line):
    return WORD.findall(line.lower())
"""


@needs_python
def test_ship_module(d):
    """A module of the client's that the workers cannot import goes by
    value with the functions that use it, once shipped."""
    import importlib.util
    import cloudpickle
    private = d.path("private")
    os.mkdir(private, 0o700)		# the job's user cannot read it
    path = os.path.join(private, "pyops_helpers.py")
    with open(path, "w") as f:
        f.write(MODULE)
    spec = importlib.util.spec_from_file_location("pyops_helpers", path)
    helpers = importlib.util.module_from_spec(spec)
    sys.modules["pyops_helpers"] = helpers
    spec.loader.exec_module(helpers)
    try:
        with _session(d) as sc:
            ds = sc.parallelize(["Ab cd", "EF"], partitions=1)
            try:
                ds.flat_map(helpers.words).collect()
            except ember.TaskFailed as e:
                check("No module named 'pyops_helpers'" in e.reason,
                      e.reason)
            else:
                raise AssertionError("the worker imported a private module")
            sc.ship_module(helpers)
            check_eq(ds.flat_map(helpers.words).collect(),
                     ["ab", "cd", "ef"], "words")
            check_eq(ds.map(lambda s: type(helpers.Tally()).__name__)
                     .collect(), ["Tally", "Tally"], "a class of it")
        from ember.pyspark import SparkContext
        with SparkContext(socket=d.socket) as spark:
            spark.addPyFile(path)
            got = spark.parallelize(["x y"], 1).flatMap(
                sys.modules["pyops_helpers"].words).collect()
            check_eq(got, ["x", "y"], "addPyFile")
    finally:
        cloudpickle.unregister_pickle_by_value(helpers)
        sys.modules.pop("pyops_helpers", None)


@needs_python
@with_daemon(sets=["python.preload=wave, no_such_module_here"])
def test_preload(d):
    """python.preload's modules are imported by the fork-server, so a
    worker starts with them; one that does not import is logged and
    skipped."""
    with _session(d) as sc:
        got = sc.range(2, partitions=2).map(
            lambda _: str("wave" in sys.modules)).collect()
    check_eq(got, ["True", "True"], "wave imported before the task")
    with _session(d) as sc:
        got = sc.range(1).map(lambda _: str("colorsys" in sys.modules)).collect()
    check_eq(got, ["False"], "a module nobody imported")
    check(wait_until(lambda: "python.preload no_such_module_here: "
                     "Traceback" in d.log_text(), 10),
          "the bad module was not logged")


@needs_python
@with_daemon(sets=["workers.max=2"])
def test_print_whole_lines(d):
    """What functions print reaches the job's log a line at a time, whole,
    however many workers print at once."""
    n = 400
    with _session(d) as sc:
        sc.range(n, partitions=2).map(
            lambda s: print(*["<%s>" % s] * 40, sep="") or s).count()
    want = {("<%d>" % i) * 40 for i in range(n)}

    def seen():
        return {m.group(1) for m in
                re.finditer(r"uid \d+: ((?:<\d+>)+)$", d.log_text(),
                            re.MULTILINE)}
    check(wait_until(lambda: want <= seen(), 10),
          "lines missing or cut: %d of %d whole" % (len(want & seen()), n))


@skip_unless(not WORKER_HAS_PYTHON, "built with Python")
def test_plan_refused_without_python(d):
    """Without Python a python op is refused before any task runs."""
    plan = {"source": {"range": {"end": 1}},
            "ops": [{"python": {"map": "eA==", "version": VERSION}}]}
    with d.client() as c:
        c.send_json({"op": "execute", "plan": plan, "action": "count"})
        check_error(c.recv_json(), "PLAN_INVALID", "built without Python")


if __name__ == "__main__":
    run_tests(globals())
