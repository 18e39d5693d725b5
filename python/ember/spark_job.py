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

# Run as a file, this file's directory (the ember package) comes first on
# sys.path, where ember's pyspark.py would shadow the real PySpark.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

EXIT_FAILED = 1
EXIT_USAGE = 2

END_OF_DATA_SECTION = -1
NULL = -5

PYTHON_KINDS = ("map", "filter", "flat_map", "map_partitions", "reduce",
                "fold")
ACTIONS = ("iterate", "collect", "count", "count_by_value", "reduce", "save",
           "checkpoint")
REDUCE_FNS = ("sum", "min", "max")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class Refused(Exception):
    """What cannot run on Spark as it runs on emberd: said before any job."""

    def __init__(self, error_class, message):
        super().__init__(message)
        self.error_class = error_class


# --- The plan, cut into what Spark does and what ember-worker does ---------

def is_python_op(op):
    return isinstance(op, dict) and "python" in op


def check_op(i, op):
    """Refuse an op Spark has no counterpart for."""
    if not isinstance(op, dict) or len(op) != 1:
        return      # ember-worker --check names the fault
    if "filter" in op and isinstance(op["filter"], dict) and \
            "in_broadcast" in op["filter"]:
        raise Refused("PLAN_INVALID", "plan.ops[%d].filter.in_broadcast: "
                      "a broadcast lives in emberd's session; on Spark, "
                      "put its lines in a udf's args or a python op" % i)
    if is_python_op(op):
        py = op["python"]
        if not isinstance(py, dict):
            raise Refused("PLAN_INVALID",
                          "plan.ops[%d].python: must be an object" % i)
        kinds = [k for k in PYTHON_KINDS if k in py]
        if len(kinds) != 1:
            raise Refused("PLAN_INVALID", "plan.ops[%d].python: give one "
                          "of %s" % (i, ", ".join(PYTHON_KINDS)))
        if kinds[0] in ("reduce", "fold"):
            raise Refused("PLAN_INVALID", "plan.ops[%d].python.%s: not "
                          "run on Spark yet; use rdd.%s on Spark, or "
                          "emberd" % (i, kinds[0], kinds[0]))
        if py.get("broadcasts"):
            raise Refused("PLAN_INVALID", "plan.ops[%d].python.broadcasts: "
                          "a broadcast lives in emberd's session" % i)
        mine = "%d.%d" % sys.version_info[:2]
        if py.get("version") != mine:
            raise Refused("PLAN_INVALID", "plan.ops[%d].python: version: "
                          "the client pickled with Python %s, Spark's "
                          "driver runs Python %s" % (i, py.get("version"),
                                                      mine))


def segments(ops):
    """Cut the ops into runs: ("c", [ops]) for ember-worker, ("py", [ops])
    for Spark's Python: consecutive python ops pass Python objects."""
    out = []
    for kind, run in itertools.groupby(ops, lambda op: "py" if
                                       is_python_op(op) else "c"):
        out.append((kind, list(run)))
    return out


def check_plan(plan, action, options, worker):
    """Refuse, before Spark starts, what cannot run there."""
    if not isinstance(plan, dict):
        raise Refused("PLAN_INVALID", "plan: must be an object")
    unknown = set(plan) - {"source", "partitions", "ops"}
    if unknown:
        raise Refused("PLAN_INVALID", "plan.%s: unknown field" %
                      sorted(unknown)[0])
    source = plan.get("source")
    if not isinstance(source, dict) or len(source) != 1:
        raise Refused("PLAN_INVALID", "plan.source: give one of range, "
                      "text, parallelize")
    kind = next(iter(source))
    if kind == "checkpoint":
        raise Refused("PLAN_INVALID", "plan.source.checkpoint: an ember "
                      "checkpoint is emberd's; read its saved files with "
                      "a text source on Spark")
    if kind not in ("range", "text", "parallelize"):
        raise Refused("PLAN_INVALID", "plan.source.%s: unknown source" % kind)
    parts = plan.get("partitions")
    if parts is not None and (not isinstance(parts, int) or
                              isinstance(parts, bool) or
                              not 1 <= parts <= 1000000):
        raise Refused("PLAN_INVALID",
                      "plan.partitions: must be from 1 to 1000000")
    ops = plan.get("ops", [])
    if not isinstance(ops, list):
        raise Refused("PLAN_INVALID", "plan.ops: must be an array")
    for i, op in enumerate(ops):
        check_op(i, op)
    check_action(action, options)
    # ember's own checks, by ember's own code: the whole plan with the
    # python ops left out and the source made empty where it is Spark's.
    probe = dict(plan)
    probe["ops"] = [op for op in ops if not is_python_op(op)]
    if kind == "text":
        probe["source"] = {"parallelize": {"records": []}}
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
    if record is None:
        return struct.pack(">i", NULL)
    return struct.pack(">i", len(record)) + record


def executor_worker(worker, shipped):
    """ember-worker's path on this executor: worker, or the copy Spark
    fetched when it was shipped with the job (spark-submit --files)."""
    if not shipped:
        return worker
    from pyspark import SparkFiles  # type: ignore
    path = SparkFiles.get(os.path.basename(worker))
    if not os.access(path, os.X_OK):
        os.chmod(path, 0o755)
    return path


def chain_partition(worker, plan_text, shipped=False):
    """The function mapPartitionsWithIndex runs: the partition through
    ember-worker, fed by a thread (as RDD.pipe feeds its command)."""
    def run(index, records):
        worker_path = executor_worker(worker, shipped)
        proc = subprocess.Popen(
            [worker_path, "--stdio", "--plan", plan_text, "--partition",
             str(index)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
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
                data = read(n)
                if len(data) < n:
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
    """A record as a python op sees it: str, undecodable bytes kept as
    surrogates, None for a null."""
    if record is None:
        return None
    return record.decode("utf-8", "surrogateescape")


def from_python(value):
    """A record leaving Python, as ember's workers send it."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value).encode()
    raise TypeError("python: TypeError: a record leaving Python must be "
                    "str, bytes, None, int or float, not %s" %
                    type(value).__name__)


def python_stage(ops):
    """The partition function of consecutive python ops."""
    payloads = [(k, op["python"][k]) for op in ops
                for k in PYTHON_KINDS if k in op["python"]]

    def run(records):
        # The functions were pickled by cloudpickle: their loads need it.
        import cloudpickle  # type: ignore  # noqa: F401
        it = map(to_python, records)
        for kind, payload in payloads:
            fn = pickle.loads(base64.b64decode(payload))
            if kind == "map":
                it = map(fn, it)
            elif kind == "filter":
                it = filter(fn, it)
            elif kind == "flat_map":
                it = itertools.chain.from_iterable(map(fn, it))
            else:
                it = iter(fn(it))
        return map(from_python, it)
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


def build_rdd(sc, plan, worker, shipped=False):
    source = plan["source"]
    kind, spec = next(iter(source.items()))
    partitions = plan.get("partitions")
    if kind == "text":
        rdd = source_text(sc, spec, partitions)
    else:
        partitions = partitions or sc.defaultParallelism
        make = source_range if kind == "range" else source_parallelize
        rdd = make(sc, spec, partitions)
    for seg_kind, ops in segments(plan.get("ops", [])):
        if seg_kind == "py":
            rdd = rdd.mapPartitions(python_stage(ops))
        else:
            sub = {"source": {"parallelize": {"records": []}}, "ops": ops}
            rdd = rdd.mapPartitionsWithIndex(chain_partition(
                worker, json.dumps(sub), shipped))
    return rdd


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
    shown = "".join(
        "\\" + chr(c) if c in b'"\\' else
        "\\x%02x" % c if c < 0x20 or c >= 0x7f else chr(c)
        for c in record[:64]) + ("..." if len(record) > 64 else "")
    raise ValueError('reduce: record "%s" is not a number' % shown)


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
        return b"" if r is None else r
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
        return "value", dict(rdd.countByValue())
    if action == "reduce":
        return "value", action_reduce(rdd, options["fn"])
    if action == "save":
        return "value", action_save(sc, rdd, options)
    return "value", action_checkpoint(sc, rdd, options)


# --- Output: what ember run prints -------------------------------------------

def print_records(out, records):
    buf = []
    size = 0
    for r in records:
        r = b"" if r is None else r
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


def write_result(path, kind, action, result):
    """The result for ember.submit(), pickled: records as bytes/None."""
    if kind == "records":
        result = list(result)
    with open(path, "wb") as f:
        pickle.dump({"action": action, "result": result}, f)


# --- Main --------------------------------------------------------------------

def fail(error_class, message):
    sys.stderr.write("ember: %s: %s\n" % (error_class, message))
    sys.stderr.flush()
    sys.exit(EXIT_FAILED)


def load_jobs(args):
    """The jobs to run: the one of --plan-file, or the list of --batch
    ({"plan", "action", "options", "output" or "result"} each)."""
    if args.batch:
        with open(args.batch, "rb") as f:
            return json.loads(f.read())
    with open(args.plan_file, "rb") as f:
        plan = json.loads(f.read())
    return [{"plan": plan, "action": args.action,
             "options": json.loads(args.options), "result": args.result}]


def run_job(sc, job, worker, out, shipped=False):
    """Run one checked job, printing to out or pickling its result."""
    rdd = build_rdd(sc, job["plan"], worker, shipped)
    kind, result = run_action(sc, rdd, job["action"], job["options"])
    if job.get("result"):
        write_result(job["result"], kind, job["action"], result)
    elif kind == "records":
        print_records(out, result)
    else:
        print_value(out, job["action"], result)
    out.flush()


def run_batch(sc, jobs, worker, shipped=False):
    """Several jobs in one application (the JVMs start once): each job's
    output and error go to files of its own, and a failure ends only its
    job."""
    for job in jobs:
        try:
            with open(job["output"], "wb") as out:
                check_plan(job["plan"], job["action"], job["options"],
                           worker)
                run_job(sc, job, worker, out, shipped)
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
    if not args.batch:
        try:
            check_plan(jobs[0]["plan"], jobs[0]["action"],
                       jobs[0]["options"], args.worker)
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
                    args.shipped)
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
                       r"(ember-worker: .*|reduce: .*|python: .*)", text)
    if found:
        return found[-1].strip()
    return text.strip().splitlines()[0] if text.strip() else repr(e)


if __name__ == "__main__":
    main(sys.argv[1:])
