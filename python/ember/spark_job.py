"""The driver that runs an ember plan on Spark, started by spark-submit.

`ember submit` and `ember.submit()` run this file with spark-submit; it
reads a plan and an action, refuses what Spark cannot do the way emberd
does before any job starts, builds the RDD and prints what `ember run`
prints (docs/spark.md).  The ops of the plan run on the executors in
`ember-worker --stdio` (the code emberd's workers run), fed by
mapPartitionsWithIndex; python ops run as Spark's own Python functions.

It imports nothing of the ember package: spark-submit runs it as a file.
"""

import argparse
import base64
import collections
import copy
import functools
import itertools
import json
import math
import os
import pickle
import re
import struct
import subprocess
import sys
import threading
import types

# Run as a file, this file's directory (the ember package) comes first on
# sys.path, where ember's pyspark.py would shadow the real PySpark.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

EXIT_FAILED = 1
EXIT_USAGE = 2

END_OF_DATA_SECTION = -1
NULL = -5
PAIR = -7
GROUP = -8

PYTHON_KINDS = ("map", "filter", "flat_map", "map_partitions", "reduce",
                "fold")
ACTIONS = ("iterate", "collect", "count", "count_by_value", "reduce", "save",
           "checkpoint")
REDUCE_FNS = ("sum", "min", "max")
# The ops that end a stage (docs/plans.md, "Stages").
WIDE_OPS = ("reduce_by_key", "group_by_key", "distinct", "sort_by",
            "repartition", "join", "union")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class Refused(Exception):
    """What cannot run on Spark as it runs on emberd: said before any job."""

    def __init__(self, error_class, message):
        super().__init__(message)
        self.error_class = error_class


# --- The plan, cut into what Spark does and what ember-worker does ---------

def is_python_op(op):
    return isinstance(op, dict) and "python" in op


def op_name(op):
    return next(iter(op)) if isinstance(op, dict) and len(op) == 1 else None


def op_broadcasts(op):
    """The broadcasts an op names: [(field, id)]."""
    name = op_name(op)
    args = op[name] if name else None
    if name == "filter" and isinstance(args, dict) and \
            "in_broadcast" in args:
        return [("filter.in_broadcast", args["in_broadcast"])]
    if name in ("udf", "python") and isinstance(args, dict) and \
            isinstance(args.get("broadcasts"), list):
        return [("%s.broadcasts[%d]" % (name, j), b)
                for j, b in enumerate(args["broadcasts"])]
    return []


def check_op(i, op, given=(), where="plan"):
    """Refuse an op Spark has no counterpart for, or that names a
    broadcast not given (as emberd refuses one its session lacks)."""
    if not isinstance(op, dict) or len(op) != 1:
        return      # ember-worker --check names the fault
    name = op_name(op)
    if name in ("join", "union") and isinstance(op[name], dict) and \
            "plan" in op[name]:
        check_source("%s.ops[%d].%s.plan" % (where, i, name),
                     op[name]["plan"])
        check_ops("%s.ops[%d].%s.plan" % (where, i, name),
                  op[name]["plan"].get("ops", []), given)
    for field, bid in op_broadcasts(op):
        if isinstance(bid, int) and not isinstance(bid, bool) and \
                bid not in given:
            raise Refused("PLAN_INVALID", "%s.ops[%d].%s: no broadcast %d "
                          "given (ember submit --broadcast %d=FILE)" %
                          (where, i, field, bid, bid))
    if is_python_op(op):
        py = op["python"]
        if not isinstance(py, dict):
            raise Refused("PLAN_INVALID",
                          "%s.ops[%d].python: must be an object" % (where, i))
        kinds = [k for k in PYTHON_KINDS if k in py]
        if len(kinds) != 1:
            raise Refused("PLAN_INVALID", "%s.ops[%d].python: give one "
                          "of %s" % (where, i, ", ".join(PYTHON_KINDS)))
        mine = "%d.%d" % sys.version_info[:2]
        if py.get("version") != mine:
            raise Refused("PLAN_INVALID", "%s.ops[%d].python: version: "
                          "the client pickled with Python %s, Spark's "
                          "driver runs Python %s" % (where, i,
                                                      py.get("version"),
                                                      mine))


def check_ops(where, ops, given=()):
    if not isinstance(ops, list):
        raise Refused("PLAN_INVALID", "%s.ops: must be an array" % where)
    sorted_by = False
    for i, op in enumerate(ops):
        check_op(i, op, given, where)
        name = op_name(op)
        if sorted_by and name in ("limit", "sample"):
            raise Refused("PLAN_INVALID", "%s.ops[%d].%s: after sort_by, "
                          "which keys fall in which partition follows "
                          "Spark's sample of them, not emberd's: a %s "
                          "per partition would keep other records" %
                          (where, i, name, name))
        if name in WIDE_OPS:
            sorted_by = name == "sort_by"


def check_source(where, plan):
    if not isinstance(plan, dict):
        raise Refused("PLAN_INVALID", "%s: must be an object" % where)
    source = plan.get("source")
    if not isinstance(source, dict) or len(source) != 1:
        raise Refused("PLAN_INVALID", "%s.source: give one of range, "
                      "text, parallelize" % where)
    kind = next(iter(source))
    if kind == "checkpoint":
        raise Refused("PLAN_INVALID", "%s.source.checkpoint: an ember "
                      "checkpoint is emberd's; read its saved files with "
                      "a text source on Spark" % where)
    if kind not in ("range", "text", "parallelize"):
        raise Refused("PLAN_INVALID", "%s.source.%s: unknown source" %
                      (where, kind))


def probe_plan(plan, python):
    """The plan ember-worker --check reads: the sources Spark reads made
    empty, in every nested plan too; python ops said to be of the
    worker's Python (python; None: left out, ember-worker has none), as
    they run in Spark's, so that the kinds of records they give are
    followed as emberd follows them."""
    probe = dict(plan)
    if "text" in plan.get("source", {}):
        probe["source"] = {"parallelize": {"records": []}}
    ops = []
    for op in plan.get("ops", []):
        if is_python_op(op) and isinstance(op["python"], dict):
            if python is None:
                continue
            op = {"python": dict(op["python"], version=python)}
        name = op_name(op)
        if name in ("join", "union") and isinstance(op[name], dict) and \
                isinstance(op[name].get("plan"), dict):
            op = {name: dict(op[name], plan=probe_plan(op[name]["plan"],
                                                       python))}
        ops.append(op)
    probe["ops"] = ops
    return probe


def has_python(plan):
    """Does the plan, or a plan nested in it, hold a python op?"""
    for op in plan.get("ops", []):
        name = op_name(op)
        if is_python_op(op) or (name in ("join", "union") and
                                isinstance(op[name], dict) and
                                isinstance(op[name].get("plan"), dict) and
                                has_python(op[name]["plan"])):
            return True
    return False


def worker_python(worker):
    """The Python major.minor ember-worker was built with, or None: its
    check of a python op names it."""
    probe = {"source": {"parallelize": {"records": []}},
             "ops": [{"python": {"map": "-", "version": "0.0"}}]}
    run = subprocess.run([worker, "--stdio", "--check", "--plan",
                          json.dumps(probe)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    found = re.search(rb"workers run Python ([0-9]+\.[0-9]+)", run.stderr)
    return found.group(1).decode() if found else None


def plan_kind(plan, joins=False):
    """What the plan's last op gives: "record", "pair" or "group" (ember's
    plan check has refused an op that cannot take what it gets); with
    joins, "join" for a join's groups."""
    kind = "record"
    for op in plan.get("ops", []):
        name = op_name(op)
        if name == "key_by" or name == "reduce_by_key":
            kind = "pair"
        elif name == "group_by_key" or (name == "join" and not joins):
            kind = "group"
        elif name == "join":
            kind = "join"
        elif name in ("map", "flat_map", "udf", "pipe") or is_python_op(op):
            kind = "record"
    return kind


def segments(ops):
    """Cut the ops into runs: ("c", [ops]) for ember-worker, ("py", [ops])
    for Spark's Python: consecutive python ops pass Python objects."""
    out = []
    for kind, run in itertools.groupby(ops, lambda op: "py" if
                                       is_python_op(op) else "c"):
        out.append((kind, list(run)))
    return out


def check_plan(plan, action, options, worker, given=()):
    """Refuse, before Spark starts, what cannot run there.  given: the ids
    of the broadcasts the job was given."""
    if not isinstance(plan, dict):
        raise Refused("PLAN_INVALID", "plan: must be an object")
    unknown = set(plan) - {"source", "partitions", "ops"}
    if unknown:
        raise Refused("PLAN_INVALID", "plan.%s: unknown field" %
                      sorted(unknown)[0])
    check_source("plan", plan)
    parts = plan.get("partitions")
    if parts is not None and (not isinstance(parts, int) or
                              isinstance(parts, bool) or
                              not 1 <= parts <= 1000000):
        raise Refused("PLAN_INVALID",
                      "plan.partitions: must be from 1 to 1000000")
    check_ops("plan", plan.get("ops", []), given)
    check_action(action, options)
    if action in ("count_by_value", "reduce") and \
            plan_kind(plan) != "record":
        raise Refused("PLAN_INVALID", "action: %s takes plain records, "
                      "and this plan gives %ss (map key or value makes "
                      "records)" % (action, plan_kind(plan)))
    # ember's own checks, by ember's own code: the whole plan with the
    # source made empty where it is Spark's.
    probe = probe_plan(plan, worker_python(worker) if has_python(plan)
                       else None)
    run = subprocess.run([worker, "--stdio", "--check", "--plan",
                          json.dumps(probe)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if run.returncode != 0:
        message = run.stderr.decode("utf-8", "replace").strip()
        raise Refused("PLAN_INVALID", message.split("PLAN_INVALID: ", 1)[-1])


def check_action(action, options):
    if action not in ACTIONS:
        raise Refused("PLAN_INVALID", "action: unknown action \"%s\"" %
                      action)
    if action == "reduce" and options.get("fn") not in REDUCE_FNS:
        raise Refused("PLAN_INVALID", "options.fn: reduce takes sum, min "
                      "or max")
    if action == "save" and not isinstance(options.get("path"), str):
        raise Refused("PLAN_INVALID", "options.path: save needs a path")
    if action == "checkpoint" and options.get("local"):
        raise Refused("PLAN_INVALID", "options.local: a local checkpoint "
                      "dies with its Spark application, which ends with "
                      "this job: write a reliable one")
    if action == "checkpoint" and options.get("eager") is False:
        raise Refused("PLAN_INVALID", "options.eager: a lazy checkpoint "
                      "would be written by a later job of this "
                      "application, and there is none")


# --- Executors: ember-worker --stdio as a partition function ---------------

def frame(record):
    """A record in ember's framing: a pair (key, value) and a group (key,
    [values]) after their markers."""
    if record is None:
        return struct.pack(">i", NULL)
    if isinstance(record, tuple):
        key, value = record
        head = struct.pack(">ii", GROUP if isinstance(value, list) else
                           PAIR, len(key)) + key
        if isinstance(value, list):
            return head + struct.pack(">i", len(value)) + \
                b"".join(map(frame, value))
        return head + frame(value)
    return struct.pack(">i", len(record)) + record


class CutShort(Exception):
    """ember-worker's output ended inside a record."""


def read_frame(read, null=True):
    """One frame's bytes (None for a null) from read; CutShort at an end."""
    head = read(4)
    if len(head) < 4:
        raise CutShort()
    n = struct.unpack(">i", head)[0]
    if n == NULL and null:
        return None
    if n < 0:
        raise CutShort()
    data = read(n)
    if len(data) < n:
        raise CutShort()
    return data


def read_keyed(read, marker):
    """The rest of a pair or group after its marker."""
    key = read_frame(read, null=False)
    if marker == PAIR:
        return (key, read_frame(read))
    head = read(4)
    if len(head) < 4:
        raise CutShort()
    return (key, [read_frame(read) for _ in
                  range(struct.unpack(">i", head)[0])])


# What the executors are given: ember-worker's path (shipped: the copy
# spark-submit --files made), and the job's broadcasts, {id: Held}.
Executors = collections.namedtuple("Executors", "worker shipped held")
# A broadcast on Spark: Spark's Broadcast of its bytes, and a key that
# names it in an executor's caches (unique in the application).
Held = collections.namedtuple("Held", "key handle")


def executor_worker(env):
    """ember-worker's path on this executor: env.worker, or the copy Spark
    fetched when it was shipped with the job (spark-submit --files)."""
    if not env.shipped:
        return env.worker
    from pyspark import SparkFiles  # type: ignore
    path = SparkFiles.get(os.path.basename(env.worker))
    if not os.access(path, os.X_OK):
        os.chmod(path, 0o755)
    return path


def executor_cache(name):
    """A dict that lasts as long as this executor's Python worker (the
    functions Spark ships are unpickled anew for each task; a module
    stays)."""
    mod = sys.modules.get("_ember_spark_held")
    if mod is None:
        mod = types.ModuleType("_ember_spark_held")
        sys.modules["_ember_spark_held"] = mod
    return mod.__dict__.setdefault(name, {})


def held_fd(held):
    """A memfd of this Python worker holding a broadcast's bytes, written
    at its first use and kept: ember-worker maps it as emberd's workers
    map the file of a broadcast."""
    fds = executor_cache("fds")
    if held.key not in fds:
        fd = os.memfd_create("ember-broadcast")
        data = memoryview(held.handle.value)
        while data:
            data = data[os.write(fd, data):]
        fds[held.key] = fd
    return fds[held.key]


def chain_partition(env, plan_text, bids=()):
    """The function mapPartitionsWithIndex runs: the partition through
    ember-worker, fed by a thread (as RDD.pipe feeds its command), given
    the broadcasts bids its ops name."""
    def run(index, records):
        argv = [executor_worker(env), "--stdio", "--plan", plan_text,
                "--partition", str(index)]
        fds = []
        for bid in bids:
            fds.append(held_fd(env.held[bid]))
            # The child inherits the descriptor at the same number.
            argv += ["--broadcast", "%d=/proc/self/fd/%d" % (bid, fds[-1])]
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, pass_fds=fds)
        errors = []

        def feed():
            try:
                for r in records:
                    proc.stdin.write(frame(r))
            except BrokenPipeError:
                pass    # a limit stopped reading: the rest is not wanted
            except BaseException as e:  # the source failed: say so
                errors.append(e)
            finally:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
        tail = []

        def drain():
            for line in proc.stderr:
                tail.append(line)
                del tail[:-50]
        threads = [threading.Thread(target=feed, daemon=True),
                   threading.Thread(target=drain, daemon=True)]
        for t in threads:
            t.start()
        whole = False
        try:
            read = proc.stdout.read
            while True:
                head = read(4)
                if len(head) < 4:
                    break
                n = struct.unpack(">i", head)[0]
                if n == END_OF_DATA_SECTION:
                    whole = True
                    break
                if n == NULL:
                    yield None
                    continue
                try:
                    if n in (PAIR, GROUP):
                        yield read_keyed(read, n)
                        continue
                except CutShort:
                    break
                data = read(n) if n >= 0 else b""
                if len(data) < n or n < 0:
                    break
                yield data
        finally:
            if not whole:
                proc.kill()
            proc.stdout.close()
            rc = proc.wait()
            for t in threads:
                t.join()
        if errors:
            raise errors[0]
        if rc != 0 or not whole:
            why = b"".join(tail).decode("utf-8", "replace").strip()
            raise RuntimeError("ember-worker: %s" % (why or
                               "exited with status %d" % rc))
    return run


# --- Python ops: Spark's own Python functions ------------------------------

def to_python(record):
    """A record as a python op sees it (worker/python.c): str,
    undecodable bytes kept as surrogates, None for a null; a pair as
    (key, value), a group as (key, [values])."""
    if record is None:
        return None
    if isinstance(record, tuple):
        key, value = record
        return (to_python(key), [to_python(v) for v in value]
                if isinstance(value, list) else to_python(value))
    return record.decode("utf-8", "surrogateescape")


def from_record(value):
    """An object leaving Python as a record, as ember's workers send it:
    str, bytes, None, or an int or a float (exactly) as its text."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if type(value) is int:
        return str(value).encode()
    if type(value) is float:
        return repr(value).encode()
    raise TypeError("python: TypeError: a record leaving Python must be "
                    "str, bytes, None, int or float, not %s" %
                    type(value).__name__)


def from_python(value):
    """What a python op gave, as ember's workers take it: a 2-tuple is a
    pair, or a group when its second item is a list."""
    if type(value) is not tuple or len(value) != 2:
        return from_record(value)
    key, v = value
    if key is None:
        raise TypeError("python: TypeError: a pair's key must not be None")
    return (from_record(key), [from_record(x) for x in v]
            if isinstance(v, list) else from_record(v))


class HeldObject:
    """A broadcast of a Python object as a function sees it on Spark, as
    in emberd's workers (worker/pyworker.py): .value is the object,
    unpickled at most once per Python worker."""

    __slots__ = ("id", "held")

    def __init__(self, bid, held):
        self.id, self.held = bid, held

    @property
    def value(self):
        objects = executor_cache("objects")
        if self.held.key not in objects:
            objects[self.held.key] = pickle.loads(self.held.handle.value)
        return objects[self.held.key]

    def __repr__(self):
        return "Broadcast(%d)" % self.id


def hold_objects(held):
    """Be ember_worker, the module a pickled broadcast looks itself up
    in (ember/_pyref.py), for the job's broadcasts."""
    def broadcast(bid):
        if bid not in held:
            raise KeyError("broadcast %d is not held by this worker" % bid)
        return HeldObject(bid, held[bid])
    mod = types.ModuleType("ember_worker")
    mod.broadcast = broadcast
    sys.modules["ember_worker"] = mod


def python_reduce(fn, it):
    """A partition's reduce, one pickled record (none if it is empty), as
    emberd's workers leave it."""
    it = iter(it)
    for acc in it:
        yield pickle.dumps(functools.reduce(fn, it, acc),
                           pickle.HIGHEST_PROTOCOL)


def python_fold(fn, zero, it):
    """A partition's fold from a copy of zero, one pickled record."""
    yield pickle.dumps(functools.reduce(fn, it, copy.deepcopy(zero)),
                       pickle.HIGHEST_PROTOCOL)


def python_compose(specs, it):
    """What the ops of specs [(kind, fn, zero)] make of it, as
    worker/pyworker.py composes them."""
    for kind, fn, zero in specs:
        if kind == "map":
            it = map(fn, it)
        elif kind == "filter":
            it = filter(fn, it)
        elif kind == "flat_map":
            it = itertools.chain.from_iterable(map(fn, it))
        elif kind == "map_partitions":
            it = iter(fn(it))
        elif kind == "reduce":
            it = python_reduce(fn, it)
        else:
            it = python_fold(fn, zero, it)
    return it


def python_stage(ops, held):
    """The partition function of consecutive python ops, given the job's
    broadcasts held (their b.value)."""
    payloads = [(k, op["python"][k], op["python"].get("zero"))
                for op in ops for k in PYTHON_KINDS if k in op["python"]]

    def run(records):
        # The functions were pickled by cloudpickle: their loads need it.
        import cloudpickle  # type: ignore  # noqa: F401
        hold_objects(held)
        specs = [(kind, pickle.loads(base64.b64decode(fn)),
                  None if zero is None else
                  pickle.loads(base64.b64decode(zero)))
                 for kind, fn, zero in payloads]
        return map(from_python, python_compose(specs,
                                                map(to_python, records)))
    return run


# --- Sources -----------------------------------------------------------------

def plan_slice(n, partitions, i):
    return n * i // partitions, n * (i + 1) // partitions


def source_range(sc, spec, partitions):
    r = range(spec.get("start", 0), spec["end"], spec.get("step", 1))

    def part(i, _):
        begin, end = plan_slice(len(r), partitions, i)
        return (str(v).encode() for v in r[begin:end])
    return sc.parallelize(range(partitions), partitions) \
             .mapPartitionsWithIndex(part, preservesPartitioning=True)


def source_parallelize(sc, spec, partitions):
    records = [None if r is None else r.encode("utf-8", "surrogatepass")
               for r in spec.get("records", [])]
    slices = [records[slice(*plan_slice(len(records), partitions, i))]
              for i in range(partitions)]
    return sc.parallelize(range(partitions), partitions) \
             .mapPartitionsWithIndex(lambda i, _: iter(slices[i]))


def source_text(sc, spec, partitions):
    """Spark's own reader.  The record delimiter set to "\\n" makes Hadoop
    split at \\n alone, as ember does: a \\r stays data."""
    paths = [p if "://" in p else os.path.abspath(p)
             for p in spec.get("paths", [])]
    conf = {"textinputformat.record.delimiter": "\n"}
    if partitions:
        size = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
        if size > 0:
            conf["mapreduce.input.fileinputformat.split.maxsize"] = \
                str(max(1, math.ceil(size / partitions)))
    pairs = sc.newAPIHadoopFile(
        ",".join(paths),
        "org.apache.hadoop.mapreduce.lib.input.TextInputFormat",
        "org.apache.hadoop.io.LongWritable", "org.apache.hadoop.io.Text",
        conf=conf)
    return pairs.map(lambda kv: kv[1].encode("utf-8"))


# The source of ops after a python op: records of any kind come in, as
# after a union (a python op gives what its function returns).
ANY_SOURCE = {"shuffle": {"op": {"union": {}}, "inputs": [
    {"stage": 0, "maps": 1}, {"stage": 1, "maps": 1}]}}


def narrow(rdd, ops, source, env):
    """Run a stage's narrow ops over rdd: ember-worker for runs of
    built-in and udf ops (told the stage's source, or after a python op
    that any kind of record may come), Spark's Python for runs of python
    ops."""
    for seg_kind, run in segments(ops):
        if seg_kind == "py":
            rdd = rdd.mapPartitions(python_stage(run, env.held))
            source = ANY_SOURCE
        else:
            sub = {"source": source, "ops": run}
            bids = sorted({b for op in run for _, b in op_broadcasts(op)})
            rdd = rdd.mapPartitionsWithIndex(chain_partition(
                env, json.dumps(sub), bids))
    return rdd


def build_rdd(sc, plan, env):
    """The plan's RDD, cut at each wide op as emberd cuts it into stages
    (daemon/stage.c)."""
    return build_stages(sc, plan, env)[0]


def build_stages(sc, plan, env):
    """The plan's RDD and its partition count as emberd counts them: a
    wide op's default partitions are its input's by the plan, not
    Spark's splits of a text source."""
    source = plan["source"]
    kind, spec = next(iter(source.items()))
    partitions = plan.get("partitions")
    if kind == "text":
        rdd = source_text(sc, spec, partitions)
        partitions = partitions or rdd.getNumPartitions()
    else:
        partitions = partitions or sc.defaultParallelism
        make = source_range if kind == "range" else source_parallelize
        rdd = make(sc, spec, partitions)
    stage, ops = {"parallelize": {"records": []}}, []
    for op in plan.get("ops", []):
        if op_name(op) not in WIDE_OPS:
            ops.append(op)
            continue
        rdd = narrow(rdd, ops, stage, env)
        rdd, partitions = wide_op(sc, rdd, partitions, op, env)
        stage, ops = stage_source(op), []
    return narrow(rdd, ops, stage, env), partitions


# --- Wide ops: Spark's shuffle, in ember's order ----------------------------
#
# Each wide op tags its records with ember's bucket (worker/hash.h's hash of
# the key, modulo the op's partitions), the key as ember's reduce side
# orders it, and the map partition and position, and lets Spark partition
# by the bucket and sort within each partition: every reduce partition then
# holds ember's keys in ember's order, each key's values in input order.

_K0, _K1, _K2 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db, 0x8ebc6af09c88c6e3
_M64 = (1 << 64) - 1


def _mix(a, b):
    r = a * b
    return (r ^ (r >> 64)) & _M64


def ember_hash(p):
    """worker/hash.h's hash_bytes, loads in host order as ember's."""
    n, at, h = len(p), 0, _K0 ^ len(p)
    while n > 16:
        a, b = struct.unpack_from("=QQ", p, at)
        h = _mix(a ^ _K1, b ^ h)
        at += 16
        n -= 16
    if n >= 8:
        a = struct.unpack_from("=Q", p, at)[0]
        b = struct.unpack_from("=Q", p, at + n - 8)[0]
    elif n >= 4:
        a = struct.unpack_from("=I", p, at)[0]
        b = struct.unpack_from("=I", p, at + n - 4)[0]
    elif n > 0:
        a, b = (p[at] << 16) | (p[at + n // 2] << 8) | p[at + n - 1], 0
    else:
        a = b = 0
    return _mix(_K1 ^ len(p), _mix(a ^ _K2, b ^ h))


def bucket_of(key, buckets):
    """The reduce partition of a key (None: a null record) as ember's."""
    if buckets == 1 or key is None:
        return 0
    return ember_hash(key) % buckets


def byte_order(key):
    """A key's place in ember's bytewise order: null first."""
    return (0, b"") if key is None else (1, key)


def whole_pair(record):
    """distinct's key of a pair, as ember writes it: both frames."""
    key, value = record
    return struct.pack(">i", len(key)) + key + frame(value)


def shown(data):
    """Up to 64 bytes of a key or value in an error, as ember shows them."""
    return "".join("\\" + chr(c) if c in b'"\\' else
                   "\\x%02x" % c if c < 0x20 or c >= 0x7f else chr(c)
                   for c in data[:64]) + ("..." if len(data) > 64 else "")


def number(data):
    """A value as ember reads a number: ("int", n), ("real", x) or None."""
    try:
        return reduce_parse(data)
    except ValueError:
        return None


def fold_step(fn, st, num):
    """worker/kvfold.c's fold of one number into st (real, i, r)."""
    kind, v = num
    i, d = (v, 0.0) if kind == "int" else (0, v)
    if st is None:
        return (kind == "real", i, d)
    real, fi, fr = st
    if not real and kind == "int":
        if fn in ("sum", "count"):
            if INT64_MIN <= fi + i <= INT64_MAX:
                return (False, fi + i, fr)
        elif fn == "min":
            return (False, min(fi, i), fr)
        else:
            return (False, max(fi, i), fr)
    if not real:
        fr = float(fi)
    if kind == "int":
        d = float(i)
    if fn == "min":
        fr = min(fr, d)
    elif fn == "max":
        fr = max(fr, d)
    else:
        fr += d
    return (True, fi, fr)


def fold_text(st):
    """A fold's result as ember writes it: an integer in decimal, a real
    as the shortest text that reads back the same."""
    real, i, r = st
    if not real:
        return b"%d" % i
    for prec in (15, 16, 17):
        text = b"%.*g" % (prec, r)
        if float(text) == r:
            break
    return text


class KvFold:
    """reduce_by_key's fold of a key's values (texts), as kvfold.c."""

    def __init__(self, fn, sep, partials):
        self.fn, self.sep, self.partials = fn, sep, partials

    def value(self, key, v):
        """A value alone as the map side writes it: checked, not parsed."""
        if self.fn == "count":
            return b"1"
        if self.fn == "concat":
            return v or b""
        if v is None or number(v) is None:
            raise ValueError(self.nan(key, v))
        return v

    def fold(self, key, values):
        """Fold texts (partials: counts are numbers too) to one text."""
        if self.fn == "concat":
            return self.sep.join(v or b"" for v in values)
        st = None
        for v in values:
            if self.fn == "count" and not self.partials:
                num = ("int", 1)
            else:
                num = None if v is None else number(v)
            if num is None:
                raise ValueError(self.nan(key, v))
            st = fold_step(self.fn, st, num)
        return fold_text(st)

    @staticmethod
    def nan(key, v):
        return 'reduce_by_key: key "%s": value %s is not a number' % (
            shown(key), "null" if v is None else '"%s"' % shown(v))


def by_bucket(tagged, n):
    """Spark's shuffle of (sort key, payload) items whose sort key starts
    with the bucket: each partition its bucket's items, sorted."""
    return tagged.repartitionAndSortWithinPartitions(
        n, partitionFunc=lambda k: k[0])


def wide_reduce_by_key(rdd, args, n):
    fn = args.get("fn")
    sep = args.get("sep", "").encode("utf-8", "surrogatepass")

    def map_side(m, records):
        # The map side's combine: each step folds the text so far with the
        # next value, as ember's writer combines two entries.
        one, two = KvFold(fn, sep, False), KvFold(fn, sep, True)
        acc = {}
        for key, v in records:
            v = one.value(key, v)
            acc[key] = two.fold(key, [acc[key], v]) if key in acc else v
        return (((bucket_of(k, n), k, m), v) for k, v in acc.items())

    def reduce_side(items):
        fold = KvFold(fn, sep, True)
        for key, run in itertools.groupby(items, lambda kv: kv[0][1]):
            yield (key, fold.fold(key, [v for _, v in run]))
    return by_bucket(rdd.mapPartitionsWithIndex(map_side), n) \
        .mapPartitions(reduce_side, preservesPartitioning=True)


def wide_group_by_key(rdd, n):
    def map_side(m, records):
        return (((bucket_of(k, n), k, m, pos), v)
                for pos, (k, v) in enumerate(records))

    def reduce_side(items):
        for key, run in itertools.groupby(items, lambda kv: kv[0][1]):
            yield (key, [v for _, v in run])
    return by_bucket(rdd.mapPartitionsWithIndex(map_side), n) \
        .mapPartitions(reduce_side, preservesPartitioning=True)


def wide_distinct(rdd, n):
    def map_side(m, records):
        for pos, r in enumerate(records):
            key = whole_pair(r) if isinstance(r, tuple) else r
            yield (bucket_of(key, n), byte_order(key), m, pos), r

    def reduce_side(items):
        for _, run in itertools.groupby(items, lambda kv: kv[0][1]):
            yield next(run)[1]
    return by_bucket(rdd.mapPartitionsWithIndex(map_side), n) \
        .mapPartitions(reduce_side, preservesPartitioning=True)


def wide_repartition(rdd, n):
    # Each map task deals its records round robin from its own index.
    def map_side(m, records):
        return ((((m + pos) % n, m, pos), r)
                for pos, r in enumerate(records))
    return by_bucket(rdd.mapPartitionsWithIndex(map_side), n) \
        .map(lambda kv: kv[1], preservesPartitioning=True)


def sort_order(key, numeric, descending):
    """A key's place in sort_by's order, as a value Python sorts: bytewise
    (null first) or as a number, reversed when descending."""
    if numeric:
        num = None if key is None else number(key)
        if num is None:
            raise ValueError("sort_by: a null record is not a number"
                             if key is None else 'sort_by: key "%s" is '
                             'not a number' % shown(key))
        kind, v = num
        # int64s compare as integers, the rest as doubles.
        order = (float(v), v - int(float(v)) if kind == "int" else 0)
        return (-order[0], -order[1]) if descending else order
    if not descending:
        return byte_order(key)
    if key is None:
        return (1, b"")
    # Each byte inverted and escaped, the end above them all: longer
    # keys first among those that share a prefix.
    return (0, b"".join(b"\x00" + bytes((255 - c,)) for c in key) + b"\x01")


def wide_sort_by(sc, rdd, args, n):
    numeric = bool(args.get("numeric"))
    descending = bool(args.get("descending"))

    def tag(m, records):
        for pos, r in enumerate(records):
            key = r[0] if isinstance(r, tuple) else r
            yield (sort_order(key, numeric, descending), m, pos), r
    out = rdd.mapPartitionsWithIndex(tag).sortBy(
        lambda kv: kv[0], ascending=True, numPartitions=n)
    if out.getNumPartitions() != n:     # Spark keeps an empty input's
        return sc.parallelize([], n)
    return out.map(lambda kv: kv[1], preservesPartitioning=True)


def wide_join(left, right, how, n):
    # The right side's values of a key sort before the left's, so that the
    # reduce side holds them when the left's come.
    def map_side(side):
        def tag(m, records):
            return (((bucket_of(k, n), k, side, m, pos), v)
                    for pos, (k, v) in enumerate(records))
        return tag

    def reduce_side(items):
        for key, run in itertools.groupby(items, lambda kv: kv[0][1]):
            ws = []
            for (_, _, side, _, _), v in run:
                if side == 0:
                    ws.append(v)
                    continue
                if not ws and how == "left":
                    yield (key, [v, None])
                for w in ws:
                    yield (key, [v, w])
    tagged = left.mapPartitionsWithIndex(map_side(1)).union(
        right.mapPartitionsWithIndex(map_side(0)))
    return by_bucket(tagged, n).mapPartitions(reduce_side,
                                              preservesPartitioning=True)


def wide_op(sc, rdd, parts, op, env):
    """The RDD a wide op gives from rdd of parts partitions (its other
    plan built here), and its partition count."""
    name = op_name(op)
    args = op[name] if isinstance(op[name], dict) else {}
    other, others = None, 0
    if name in ("join", "union"):
        other, others = build_stages(sc, args["plan"], env)
    if name == "union":
        return rdd.union(other), parts + others
    n = args.get("partitions") or max(parts, others)
    if name == "reduce_by_key":
        return wide_reduce_by_key(rdd, args, n), n
    if name == "group_by_key":
        return wide_group_by_key(rdd, n), n
    if name == "distinct":
        return wide_distinct(rdd, n), n
    if name == "repartition":
        return wide_repartition(rdd, n), n
    if name == "sort_by":
        return wide_sort_by(sc, rdd, args, n), n
    return wide_join(rdd, other, args.get("how", "inner"), n), n


def stage_source(op):
    """The source of the stage after a wide op, as emberd gives it to its
    tasks: ember-worker --stdio then knows what kind of records come."""
    name = op_name(op)
    args = dict(op[name]) if isinstance(op[name], dict) else {}
    args.pop("plan", None)
    return {"shuffle": {"op": {name: args}, "inputs": [
        {"stage": i, "maps": 1} for i in
        range(2 if name in ("join", "union") else 1)]}}


# --- Actions -----------------------------------------------------------------

def reduce_parse(record):
    """A record as reduce reads it, ("int", n) or ("real", x), by the rules
    of ember's worker (worker/run.c); a failure is worded as its."""
    if record is None:
        raise ValueError("reduce: record null is not a number")
    integer, ok = True, len(record) > 0
    for k, c in enumerate(record):
        if 0x30 <= c <= 0x39 or (c in b"+-" and k == 0):
            continue
        if c in b".eE+-":
            integer = False
        else:
            ok = False
            break
    if ok:
        text = record.decode()
        if integer and INT64_MIN <= int(text) <= INT64_MAX:
            return ("int", int(text))
        try:
            x = float(text)
            if math.isfinite(x):
                return ("real", x)
        except ValueError:
            pass
    raise ValueError('reduce: record "%s" is not a number' % shown(record))


def reduce_step(fn, acc, value):
    """Fold value into acc as ember's worker does: exact in int64 until a
    real or an overflow, then a double."""
    if acc is None:
        return value
    (ak, a), (vk, v) = acc, value
    if ak == "int" and vk == "int":
        if fn == "sum":
            s = a + v
            if INT64_MIN <= s <= INT64_MAX:
                return ("int", s)
        else:
            return ("int", min(a, v) if fn == "min" else max(a, v))
    a, v = float(a), float(v)
    if fn == "sum":
        return ("real", a + v)
    return ("real", min(a, v) if fn == "min" else max(a, v))


def action_reduce(rdd, fn):
    def partial(records):
        acc = None
        for r in records:
            acc = reduce_step(fn, acc, reduce_parse(r))
        yield acc
    acc = None
    for p in rdd.mapPartitions(partial).collect():
        if p is not None:
            acc = reduce_step(fn, acc, p)
    if acc is None:
        return None
    if acc[0] == "real" and not math.isfinite(acc[1]):
        raise ValueError("reduce: the sum is out of range")
    return acc


def save_path(path):
    return path if "://" in path else os.path.abspath(path)


def action_save(sc, rdd, options):
    path = save_path(options["path"])
    if options.get("overwrite"):
        jpath = sc._jvm.org.apache.hadoop.fs.Path(path)
        jpath.getFileSystem(sc._jsc.hadoopConfiguration()).delete(jpath,
                                                                  True)
    records = sc.accumulator(0)

    def line(r):
        records.add(1)
        return record_line(r)
    rdd.map(line).saveAsTextFile(path)
    return {"records": records.value, "files": rdd.getNumPartitions()}


def action_checkpoint(sc, rdd, options):
    directory = options.get("dir") or os.environ.get(
        "EMBER_SPARK_CHECKPOINT_DIR") or sc.getConf().get(
        "spark.checkpoint.dir", None)
    if not directory:
        raise Refused("PLAN_INVALID", "options.dir: a Spark checkpoint "
                      "needs a directory (options.dir, "
                      "$EMBER_SPARK_CHECKPOINT_DIR or spark.checkpoint.dir)")
    sc.setCheckpointDir(save_path(directory))
    rdd.checkpoint()
    rdd.count()
    return rdd.getCheckpointFile()


def plain_record(r):
    """What count_by_value and reduce read of a record: a pair that a
    python op made is read as its value, as emberd's workers read it."""
    return r[1] if isinstance(r, tuple) and not isinstance(r[1], list) \
        else r


def run_action(sc, rdd, action, options):
    """Run the action: ("records", iterable) or ("value", result)."""
    limit = options.get("limit")
    if action == "iterate":
        it = rdd.toLocalIterator(prefetchPartitions=bool(
            options.get("prefetch", 1)))
        return "records", itertools.islice(it, limit) if limit else it
    if action == "collect":
        return "records", rdd.take(limit) if limit else rdd.collect()
    if action == "count":
        return "value", rdd.count()
    if action == "count_by_value":
        return "value", dict(rdd.map(plain_record).countByValue())
    if action == "reduce":
        return "value", action_reduce(rdd.map(plain_record), options["fn"])
    if action == "save":
        return "value", action_save(sc, rdd, options)
    return "value", action_checkpoint(sc, rdd, options)


# --- Output: what ember run prints -------------------------------------------

def record_line(r):
    """A record as ember run prints it and save writes it: a null as
    nothing, a pair as key<TAB>value, a group as key<TAB>v1<TAB>v2..."""
    if r is None:
        return b""
    if isinstance(r, tuple):
        key, value = r
        values = value if isinstance(value, list) else [value]
        return key + b"".join(b"\t" + (v or b"") for v in values)
    return r


def print_records(out, records):
    buf = []
    size = 0
    for r in records:
        r = record_line(r)
        buf.append(r)
        buf.append(b"\n")
        size += len(r) + 1
        if size >= 1 << 20:
            out.write(b"".join(buf))
            buf, size = [], 0
    out.write(b"".join(buf))


def print_value(out, action, value):
    if action == "count":
        out.write(b"%d\n" % value)
    elif action == "count_by_value":
        nulls = value.pop(None, 0)
        for record, n in sorted(value.items(), key=lambda kv: (-kv[1],
                                                               kv[0])):
            out.write(b"%d\t%s\n" % (n, record))
        if nulls:
            out.write(b"%d\t\\N\n" % nulls)
    elif action == "reduce":
        if value is None:
            out.write(b"null\n")
        elif value[0] == "int":
            out.write(b"%d\n" % value[1])
        else:
            out.write(b"%.17g\n" % value[1])
    elif action == "save":
        out.write(b"%d records in %d files\n" % (value["records"],
                                                 value["files"]))
    else:
        out.write(value.encode() + b"\n")


def write_result(path, kind, action, result, records="record"):
    """The result for ember.submit(), pickled: records as bytes/None, pairs
    (key, value), groups (key, [values]); records says which ("join": a
    join's groups)."""
    if kind == "records":
        result = list(result)
    with open(path, "wb") as f:
        pickle.dump({"action": action, "result": result, "records": records},
                    f)


# --- Main --------------------------------------------------------------------

def fail(error_class, message):
    sys.stderr.write("ember: %s: %s\n" % (error_class, message))
    sys.stderr.flush()
    sys.exit(EXIT_FAILED)


def broadcast_files(args):
    """--broadcast ID=FILE arguments as {id: file}."""
    files = {}
    for arg in args:
        bid, sep, path = arg.partition("=")
        if not sep or not bid.isdigit() or not path:
            raise ValueError("--broadcast %s: expected ID=FILE" % arg)
        files[int(bid)] = path
    return files


def load_jobs(args):
    """The jobs to run: the one of --plan-file, or the list of --batch
    ({"plan", "action", "options", "broadcasts": {id: file}, "output" or
    "result"} each)."""
    if args.batch:
        with open(args.batch, "rb") as f:
            jobs = json.loads(f.read())
        for job in jobs:
            job["broadcasts"] = {int(k): v for k, v in
                                 job.get("broadcasts", {}).items()}
        return jobs
    with open(args.plan_file, "rb") as f:
        plan = json.loads(f.read())
    return [{"plan": plan, "action": args.action,
             "options": json.loads(args.options), "result": args.result,
             "broadcasts": broadcast_files(args.broadcast)}]


def read_broadcasts(files):
    """The broadcasts' bytes, read here: {id: bytes}.  A file that cannot
    be read is refused as a plan naming an unknown broadcast is."""
    data = {}
    for bid, path in files.items():
        try:
            with open(path, "rb") as f:
                data[bid] = f.read()
        except OSError as e:
            raise Refused("PLAN_INVALID", "broadcast %d: %s: %s" %
                          (bid, path, e.strerror)) from e
    return data


_broadcasts = itertools.count()


def run_job(sc, job, worker, out, shipped=False, data=None):
    """Run one checked job, printing to out or pickling its result; data
    holds its broadcasts' bytes ({id: bytes}), each a sc.broadcast for
    the job's time."""
    held = {bid: Held("%s/%d" % (sc.applicationId, next(_broadcasts)),
                      sc.broadcast(b)) for bid, b in (data or {}).items()}
    try:
        rdd = build_rdd(sc, job["plan"], Executors(worker, shipped, held))
        kind, result = run_action(sc, rdd, job["action"], job["options"])
        if job.get("result"):
            write_result(job["result"], kind, job["action"], result,
                         plan_kind(job["plan"], joins=True))
        elif kind == "records":
            print_records(out, result)
        else:
            print_value(out, job["action"], result)
        out.flush()
    finally:
        for h in held.values():
            h.handle.unpersist()


def run_batch(sc, jobs, worker, shipped=False):
    """Several jobs in one application (the JVMs start once): each job's
    output and error go to files of its own, and a failure ends only its
    job."""
    for job in jobs:
        try:
            with open(job["output"], "wb") as out:
                check_plan(job["plan"], job["action"], job["options"],
                           worker, job["broadcasts"])
                run_job(sc, job, worker, out, shipped,
                        read_broadcasts(job["broadcasts"]))
        except Refused as e:
            error = "ember: %s: %s\n" % (e.error_class, e)
        except Exception as e:  # noqa: BLE001: a job's failure, reported
            error = "ember: JOB_FAILED: %s\n" % job_error(e)
        else:
            continue
        with open(job["output"] + ".err", "w") as f:
            f.write(error)


def main(argv):
    ap = argparse.ArgumentParser(prog="ember submit")
    ap.add_argument("--worker", required=True)
    ap.add_argument("--shipped", action="store_true",
                    help="--worker was shipped with spark-submit --files: "
                    "executors run the copy Spark fetched")
    ap.add_argument("--plan-file")
    ap.add_argument("--action", default="iterate")
    ap.add_argument("--options", default="{}")
    ap.add_argument("--result", help="pickle the result here, print nothing")
    ap.add_argument("--broadcast", action="append", default=[],
                    metavar="ID=FILE", help="broadcast ID's bytes are "
                    "FILE's, read here (any number of times)")
    ap.add_argument("--batch", help="a JSON list of jobs to run in one "
                    "application, each printing to its own output file")
    ap.add_argument("--stderr-file", help="where this process's standard "
                    "error goes: spark-submit merges it into standard "
                    "output, which must hold the records alone")
    args = ap.parse_args(argv)
    if args.stderr_file:
        fd = os.open(args.stderr_file, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 2)
        os.close(fd)
    if not args.batch and not args.plan_file:
        ap.error("give --plan-file or --batch")
    try:
        jobs = load_jobs(args)
    except (OSError, ValueError) as e:
        fail("PLAN_INVALID", "%s: %s" % (args.batch or args.plan_file, e))
    data = None
    if not args.batch:
        try:
            check_plan(jobs[0]["plan"], jobs[0]["action"],
                       jobs[0]["options"], args.worker,
                       jobs[0]["broadcasts"])
            data = read_broadcasts(jobs[0]["broadcasts"])
        except Refused as e:
            fail(e.error_class, str(e))

    from pyspark import SparkContext  # type: ignore
    sc = SparkContext(appName="ember")
    sc.setLogLevel("ERROR")
    try:
        if args.batch:
            run_batch(sc, jobs, args.worker, args.shipped)
        else:
            run_job(sc, jobs[0], args.worker, sys.stdout.buffer,
                    args.shipped, data)
    except Refused as e:
        fail(e.error_class, str(e))
    except Exception as e:      # noqa: BLE001: a job's failure, reported
        fail("JOB_FAILED", job_error(e))
    finally:
        sc.stop()


def job_error(e):
    """The root cause of a Spark job's failure, without Java's stack."""
    text = str(e)
    found = re.findall(r"(?:RuntimeError|ValueError|TypeError): "
                       r"(ember-worker: .*|reduce: .*|reduce_by_key: .*|"
                       r"sort_by: .*|python: .*)", text)
    if found:
        return found[-1].strip()
    # A python op's function raised: the last line of its traceback.
    raised = re.findall(r"Traceback \(most recent call last\):\n"
                        r"(?:[ \t].*\n)*(\w[\w.]*: .*)", text)
    if raised:
        return "python: %s" % raised[-1].strip()
    return text.strip().splitlines()[0] if text.strip() else repr(e)


if __name__ == "__main__":
    main(sys.argv[1:])
