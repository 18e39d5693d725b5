"""ember submit (docs/spark.md): plans run unchanged on a real Spark
standalone cluster, a master and two workers on 127.0.0.1 started by this
file, print byte for byte what `ember run` prints through emberd; a worker
killed mid-job does not change the answer; what Spark cannot do the way
emberd does is refused before the job starts.

Needs PySpark (spark-submit, spark-class) and Java: without them every
test is skipped, saying which is missing.  The cluster is started once,
by the first test that needs it, and stopped (with everything below it)
by the last test and at exit."""

import atexit
import base64
import glob
import json
import os
import pickle
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import harness
from harness import *

# A test here starts JVMs (a cluster, a driver, executors) that take tens
# of seconds each on a busy machine: more than the usual minute or two.
harness.TEST_TIMEOUT = 300

PLUGIN = job_readable(os.path.join(BUILDDIR, "examples", "udf_example.so"))
SUBMIT_TIMEOUT = 100     # seconds for one ember submit, JVMs included
CLUSTER_TIMEOUT = 60     # seconds for the master and both workers to be up


def _spark_bin():
    """The directory of spark-submit and spark-class, or None."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        try:
            import pyspark
            home = os.path.dirname(pyspark.__file__)
        except ImportError:
            return None
    path = os.path.join(home, "bin")
    return path if os.access(os.path.join(path, "spark-class"),
                             os.X_OK) else None


SPARK_BIN = _spark_bin()
# Every JVM and driver of this file binds 127.0.0.1 alone.
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
JAVA = shutil.which("java") or (os.environ.get("JAVA_HOME") and
                                os.path.join(os.environ["JAVA_HOME"],
                                             "bin", "java"))
NEEDS_SPARK = SPARK_BIN is not None and JAVA is not None
WHY = ("PySpark is not installed (python3 -m pip install pyspark; "
       "scripts/install-deps.sh does it)" if SPARK_BIN is None else
       "no Java for Spark (openjdk-17-jre-headless)")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A Spark standalone master and two workers, each a process of its
    own in a session of its own, on 127.0.0.1."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ember-spark-")
        os.chmod(self.dir, 0o755)
        self.port = _free_port()
        self.url = "spark://127.0.0.1:%d" % self.port
        self.procs = {}
        self.env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1",
                        SPARK_LOG_DIR=self.dir, SPARK_PID_DIR=self.dir,
                        SPARK_WORKER_DIR=os.path.join(self.dir, "work"),
                        SPARK_NO_DAEMONIZE="1")

    def _spawn(self, name, argv):
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        self.procs[name] = subprocess.Popen(
            [os.path.join(SPARK_BIN, "spark-class")] + argv,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=self.env, start_new_session=True)
        log.close()

    def log(self, name):
        with open(os.path.join(self.dir, name + ".log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def start(self):
        self._spawn("master", ["org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port",
                               str(self.port), "--webui-port", "0"])
        for name in ("worker1", "worker2"):
            self._spawn(name, ["org.apache.spark.deploy.worker.Worker",
                               self.url, "--host", "127.0.0.1",
                               "--webui-port", "0", "--cores", "1",
                               "--memory", "1g", "--work-dir",
                               os.path.join(self.dir, name)])
        wait_until(lambda: self.workers_registered() >= 2 or
                   self.dead(), CLUSTER_TIMEOUT, interval=0.2)
        check(not self.dead(), "a cluster process died:\n%s" % self.tails())
        check(self.workers_registered() >= 2,
              "the workers did not register:\n%s" % self.tails())

    def workers_registered(self):
        return len(re.findall(r"Registering worker", self.log("master")))

    def dead(self):
        return [n for n, p in self.procs.items() if p.poll() is not None]

    def tails(self):
        return "\n".join("--- %s\n%s" % (n, self.log(n)[-2000:])
                         for n in self.procs)

    def kill_worker(self, name):
        """Kill a worker and what it started (its executors), as a lost
        machine would."""
        pid = self.procs[name].pid
        for p in [pid] + descendants(pid):
            kill_quietly(p)
        self.procs[name].wait(10)

    def stop(self):
        """SIGTERM every process group, SIGKILL what lingers."""
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)
        shutil.rmtree(self.dir, True)


_cluster = None


def cluster():
    global _cluster
    if _cluster is None:
        _cluster = Cluster()
        atexit.register(_cluster.stop)
        _cluster.start()
    return _cluster


def submit_command(args, master=None):
    """ember submit ARGS on the cluster: argv and environment."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1",
               EMBER_SPARK_JOB=os.path.join(SRCDIR, "python", "ember",
                                            "spark_job.py"))
    env["PATH"] = SPARK_BIN + os.pathsep + env.get("PATH", "")
    argv = [EMBER, "submit", "--master", master or cluster().url,
            "--worker", EMBER_WORKER,
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.executor.memory=512m",
            "--conf", "spark.ui.enabled=false"] + list(args)
    return argv, env


def submit(args, master=None, timeout=SUBMIT_TIMEOUT):
    """ember submit ARGS on the cluster; a CompletedProcess with bytes."""
    argv, env = submit_command(args, master)
    return subprocess.run(argv, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=timeout, env=env)


def run(d, args):
    """ember run ARGS through the test's emberd; bytes."""
    return subprocess.run([EMBER, "--socket", d.socket, "run"] + list(args),
                          stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=60)


def data_dir():
    path = tempfile.mkdtemp(prefix="ember-spark-data-")
    os.chmod(path, 0o755)
    atexit.register(shutil.rmtree, path, True)
    return path


def write_plan(d, name, plan):
    path = d.path(name + ".json")
    with open(path, "w") as f:
        json.dump(plan, f)
    os.chmod(path, 0o644)
    return path


def action_of(args):
    """The action and options of ember run's arguments, and ember
    submit's broadcasts ({id: file} of --broadcast ID=FILE)."""
    action, options, broadcasts, i = "iterate", {}, {}, 0
    while i < len(args):
        if args[i] in ("--count", "--collect"):
            action = args[i][2:]
        elif args[i] == "--broadcast":
            i += 1
            bid, path = args[i].split("=", 1)
            broadcasts[bid] = path
        elif args[i] == "--action":
            i += 1
            action = args[i]
        elif args[i] == "--option":
            i += 1
            key, value = args[i].split("=", 1)
            try:
                options[key] = json.loads(value)
            except ValueError:
                options[key] = value
        i += 1
    return action, options, broadcasts


def submit_batch(jobs):
    """Run jobs [(plan, args)] in one Spark application with spark_job.py's
    batch mode (what ember submit runs, with JVMs started once): a list of
    (status, output bytes, error text)."""
    tmp = data_dir()
    batch = []
    for i, (plan, args) in enumerate(jobs):
        action, options, broadcasts = action_of(args)
        batch.append({"plan": plan, "action": action, "options": options,
                      "broadcasts": broadcasts,
                      "output": os.path.join(tmp, "out%d" % i)})
    path = os.path.join(tmp, "batch.json")
    with open(path, "w") as f:
        json.dump(batch, f)
    argv, env = submit_command([], cluster().url)
    argv = [os.path.join(SPARK_BIN, "spark-submit"), "--master",
            cluster().url, "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.executor.memory=512m",
            "--conf", "spark.ui.enabled=false",
            env["EMBER_SPARK_JOB"], "--worker", EMBER_WORKER,
            "--batch", path]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=SUBMIT_TIMEOUT * 2,
                          env=env)
    check_eq(done.returncode, 0, "spark-submit --batch's status (%s)" %
             done.stderr.decode("utf-8", "replace")[-3000:])
    results = []
    for job in batch:
        err = job["output"] + ".err"
        if os.path.exists(err):
            with open(err) as f:
                results.append((1, b"", f.read()))
        else:
            with open(job["output"], "rb") as f:
                results.append((0, f.read(), ""))
    return results


def check_same(name, want, got, args, ordered=True):
    """ember run's output (want) against ember submit's (got), as sorted
    lines where the action's order is not defined (not ordered)."""
    status, out, err = got
    check(status == 0, "%s: ember submit failed: %s" % (name, err))
    if not ordered:
        if out != want:
            print("%s: the same lines in another order" % name)
        out, want = sorted(out.split(b"\n")), sorted(want.split(b"\n"))
    check_eq(out, want, "%s: ember submit's output" % name)


TEXT = ("hello World\r\n"
        "straße and Éclair\n"
        "ǅemal ΟΔΟΣ final sigma\n"
        "\n"
        "tab\tseparated,fields,here\n"
        "  padded  \n"
        "123-ABC\n"
        "no newline at the end").encode()


def corpus():
    """Two text files with non-ASCII, CRLF and no final newline, and a
    copy of ember's docs, as the demo's word count reads them."""
    top = data_dir()
    with open(os.path.join(top, "a.txt"), "wb") as f:
        f.write(TEXT)
    with open(os.path.join(top, "b.txt"), "wb") as f:
        f.write("second file\nÀ LA CARTE\n".encode() * 50)
    docs = os.path.join(top, "docs")
    os.mkdir(docs)
    for p in glob.glob(os.path.join(SRCDIR, "docs", "*.md")) + \
            [os.path.join(SRCDIR, "README.md")]:
        shutil.copy(p, docs)
    for root, dirs, files in os.walk(top):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    return top


def cases(top):
    """(name, plan, ember run's arguments): the demo's jobs
    (scripts/demo.sh, examples/wordcount.py) and ops whose semantics are
    ember's own (PCRE2, Unicode case, split, the udf ABI), each action.
    Every action here has a defined order: count_by_value prints largest
    count first, then by record."""
    paths = [os.path.join(top, "*.txt")]
    return [
        ("wordcount", {
            "source": {"text": {"paths": [os.path.join(top, "docs", "*")]}},
            "partitions": 4,
            "ops": [{"map": "lower"}, {"flat_map": {"split": " "}},
                    {"filter": {"regex": "^[a-z]{3,}$"}}]},
         ["--action", "count_by_value"]),
        ("sum", range_plan(0, 1000000, 8),
         ["--action", "reduce", "--option", "fn=sum"]),
        ("count", range_plan(0, 1000000, 8,
                             ops=[{"filter": {"contains": "7"}}]),
         ["--count"]),
        ("demo count", range_plan(0, 10000000, 8), ["--count"]),
        ("regex upper split", {
            "source": {"text": {"paths": paths}},
            "ops": [{"filter": {"regex": "(?i)éclair|σ|^[0-9]{3}-|ǅ|file"}},
                    {"map": "upper"}, {"flat_map": {"split": " "}}]},
         ["--action", "iterate"]),
        ("lower trim field", {
            "source": {"text": {"paths": paths}}, "partitions": 3,
            "ops": [{"map": "lower"}, {"map": "trim"},
                    {"map": {"field": {"sep": ",", "index": -1}}}]},
         ["--collect"]),
        ("udf", {
            "source": {"text": {"paths": paths}},
            "ops": [{"udf": {"library": PLUGIN, "symbol": "udf_prefix",
                             "args": {"prefix": "» "}}},
                    {"map": {"field": {"sep": " ", "index": 1}}},
                    {"udf": {"library": PLUGIN, "symbol": "udf_wordlen"}}]},
         ["--collect"]),
        ("nulls limit", {
            "source": {"parallelize": {"records": [
                "b", None, "a", "", None, "b", "ß", "b"]}},
            "partitions": 3, "ops": [{"limit": 2}]},
         ["--action", "count_by_value"]),
        ("reals", {
            "source": {"parallelize": {"records": [
                "0.1", "2", "1e-3", "-7", "0.2"]}},
            "partitions": 2}, ["--action", "reduce", "--option", "fn=sum"]),
        ("max", range_plan(-50, 50, 3, step=7),
         ["--action", "reduce", "--option", "fn=max"]),
        ("sample", range_plan(0, 5000, 4, ops=[
            {"sample": {"fraction": 0.01, "seed": 7}}]), ["--collect"]),
        ("pipe", range_plan(0, 30, 3, ops=[{"pipe": {"command": "rev"}}]),
         ["--collect"]),
        ("iterate limit", range_plan(0, 100, 4),
         ["--option", "limit=30", "--option", "prefetch=2"]),
    ]


def python_case():
    """A python op between C ops, and the records it must give."""
    import cloudpickle
    fn = base64.b64encode(cloudpickle.dumps(
        lambda s: None if s == "3" else s[::-1] + "!")).decode()
    version = "%d.%d" % sys.version_info[:2]
    plan = range_plan(0, 40, 4, ops=[
        {"filter": {"regex": "^[0-9]$|3"}},
        {"python": {"map": fn, "version": version}},
        {"map": "upper"}])
    want = b""
    for i in range(40):
        s = str(i)
        if re.search("^[0-9]$|3", s):
            want += b"\n" if s == "3" else (s[::-1] + "!").upper().encode() \
                + b"\n"
    return plan, want


# Refused before any job runs, or failing as emberd fails: (plan, args,
# what the error says).
REFUSED = [
    ({"source": {"range": {"end": 10}},
      "ops": [{"filter": {"in_broadcast": 1}}]}, [],
     "PLAN_INVALID: plan.ops[0].filter.in_broadcast: no broadcast 1 "
     "given"),
    ({"source": {"checkpoint": "0b697aef-9a9d-44bf-a3db-6f881122a3e3"}}, [],
     "PLAN_INVALID: plan.source.checkpoint"),
    ({"source": {"range": {"end": 10}},
      "ops": [{"udf": {"library": PLUGIN, "symbol": "nope"}}]}, [],
     "PLAN_INVALID: plan.ops[0].udf.symbol"),
    ({"source": {"range": {"end": 10}}},
     ["--action", "checkpoint", "--option", "local=true"],
     "PLAN_INVALID: options.local"),
    ({"source": {"range": {"end": 10}}, "partitions": 2},
     ["--action", "reduce", "--option", "fn=avg"],
     "PLAN_INVALID: options.fn"),
    ({"source": {"parallelize": {"records": ["1", "two"]}}},
     ["--action", "reduce", "--option", "fn=sum"],
     'JOB_FAILED: reduce: record "two" is not a number'),
]


def py(kind, fn, **more):
    """A python op of fn, pickled as the Python client pickles it."""
    import cloudpickle
    op = {kind: base64.b64encode(cloudpickle.dumps(fn)).decode(),
          "version": "%d.%d" % sys.version_info[:2]}
    for key, value in more.items():
        op[key] = base64.b64encode(cloudpickle.dumps(value)).decode() \
            if key == "zero" else value
    return {"python": op}


def function_cases():
    """(name, plan, ordered[, args]): python ops as emberd runs them
    (collected, unless args say otherwise): reduce and fold leaving each
    partition's result pickled, and functions given pairs and groups
    (after key_by, a wide op) that give back pairs, groups or plain
    records, with C and wide ops and actions after them."""
    import operator
    csv = {"parallelize": {"records": ["a,1", "b,2", "a,3", None, "c",
                                       "b,", "c,5"]}}
    by_field = {"key_by": {"field": {"sep": ",", "index": 0},
                           "value": {"field": {"sep": ",", "index": 1}}}}
    return [
        ("python reduce", range_plan(0, 10, 3, ops=[
            py("map", int), py("reduce", operator.add)]), True),
        ("python reduce empty", range_plan(0, 0, 3, ops=[
            py("reduce", operator.add)]), True),
        ("python fold then map", range_plan(0, 10, 3, ops=[
            py("fold", lambda acc, x: acc + [x], zero=[]),
            py("map", lambda b: "%s %d" % (type(b).__name__, len(b)))]),
         True),
        ("python fold", range_plan(0, 10, 3, ops=[
            py("fold", lambda acc, x: acc + [x], zero=[])]), True),
        ("python pairs", {"source": csv, "partitions": 2, "ops": [
            by_field, py("map", lambda kv: (kv[0].upper(), None if
                                            kv[1] == "2" else kv[1] + "!")),
            {"map": "value"}]}, True),
        ("python groups", {"source": csv, "partitions": 2, "ops": [
            by_field, {"group_by_key": {"partitions": 2}},
            py("map", lambda kv: (kv[0], kv[1] + [None, 7])),
            {"limit": 5}]}, False),
        ("python groups to records", {"source": csv, "partitions": 2,
                                      "ops": [
            by_field, {"group_by_key": {"partitions": 3}},
            py("filter", lambda kv: len(kv[1]) > 1),
            py("map", repr)]}, False),
        ("python pairs shuffled", range_plan(0, 20, 3, ops=[
            py("map", lambda s: (str(int(s) % 3), s)),
            {"reduce_by_key": {"fn": "concat", "sep": "+",
                               "partitions": 2}},
            py("map_partitions", lambda it: ("%s=%s" % kv for kv in it))]),
         False),
        ("python pairs counted", range_plan(0, 9, 2, ops=[
            py("map", lambda s: (s, str(int(s) % 4)))]), True,
         ["--action", "count_by_value"]),
    ]


# A python function that raises, and the last line of emberd's error.
def function_failures():
    return [(range_plan(0, 4, 2, ops=[py("map", lambda s: 1 // 0)]),
             "python: ZeroDivisionError: integer division or modulo by "
             "zero")]


def emberd_lines(records):
    """Records as ember run prints them: a pair key<TAB>value, a group
    key<TAB>v1<TAB>v2..., a null as an empty line."""
    out = b""
    for r in records:
        if isinstance(r, tuple):
            values = list(r[1]) if isinstance(r[1], (list, tuple)) else \
                [r[1]]
            r = r[0] + b"".join(b"\t" + (v or b"") for v in values)
        out += (r or b"") + b"\n"
    return out


def broadcast_jobs(d):
    """Plans reading broadcasts (filter in_broadcast, a udf's, a python
    op's b.value) through emberd, in a session of the Python client that
    holds them, and the same on the cluster with each broadcast's bytes
    in a file (--broadcast ID=FILE): [(name, want, plan, args)]."""
    sys.path.insert(0, os.path.join(SRCDIR, "python"))
    import ember
    from ember import functions
    top = data_dir()
    jobs = []
    with ember.connect(d.socket) as sc:
        lines = sc.broadcast(b"a\nb\r\n\nq")
        numbers = sc.broadcast(b"3\n14\n29\n7\n")
        names = {"1": "one", "3": ["three", 3]}
        objects = sc.broadcast_object(names)
        files = {}
        for b, data in ((lines, b"a\nb\r\n\nq"),
                        (numbers, b"3\n14\n29\n7\n"),
                        (objects, functions.dumps_bytes(names)[0])):
            files[b.id] = os.path.join(top, "b%d" % b.id)
            with open(files[b.id], "wb") as f:
                f.write(data)
        plans = [
            ("in_broadcast", {"source": {"parallelize": {"records": [
                "a", "b\r", "", None, "zz", "q", "a", "b"]}},
                "partitions": 2,
                "ops": [{"filter": {"in_broadcast": lines.id}}]}),
            ("udf broadcast", range_plan(0, 30, 3, ops=[
                {"udf": {"library": PLUGIN, "symbol": "udf_in_broadcast",
                         "args": {"broadcast": numbers.id},
                         "broadcasts": [numbers.id]}}])),
            ("python broadcast", sc.range(0, 6, partitions=2).map(
                lambda k: repr(objects.value.get(k, "?"))).plan),
        ]
        for name, plan in plans:
            ds = ember.Dataset(sc, plan["source"], plan.get("partitions"),
                               tuple(plan.get("ops", ())))
            args = ["--collect"]
            for bid in sorted(files):
                args += ["--broadcast", "%d=%s" % (bid, files[bid])]
            jobs.append((name, emberd_lines(ds.collect(decode=False)),
                         plan, args))
    return jobs


def function_jobs(d):
    """Python ops and broadcasts through emberd and the jobs to run them
    on the cluster: (batch, check), as keyed_jobs."""
    jobs = []
    for name, plan, ordered, *args in function_cases():
        args = args[0] if args else ["--collect"]
        done = run(d, args + [write_plan(d, name.replace(" ", "_"), plan)])
        check(done.returncode == 0, "%s: ember run: %s" % (name,
                                                            done.stderr))
        jobs.append((name, done.stdout, plan, args, ordered))
    jobs += [job + (True,) for job in broadcast_jobs(d)]
    failures = function_failures()
    for plan, needle in failures:
        done = run(d, [write_plan(d, "failure", plan)])
        check(done.returncode == 1 and done.stderr.decode().rstrip()
              .endswith(needle.split(": ", 1)[1]), "ember run's error: %r"
              % done.stderr)

    def check_results(got):
        for (name, want, _, args, ordered), result in zip(jobs, got):
            check_same(name, want, result, args, ordered)
        for (_, needle), (status, _, err) in zip(failures, got[len(jobs):]):
            check(status == 1 and "JOB_FAILED: " + needle in err,
                  "%r not in the error: %r" % (needle, err))
    return [(plan, args) for _, _, plan, args, _ in jobs] + \
        [(plan, []) for plan, _ in failures], check_results


@skip_unless(NEEDS_SPARK, WHY)
def test_plans_print_what_emberd_prints(d):
    """Each case through emberd (ember run) and on the cluster, in one
    Spark application: the same bytes; a save writes the same part files;
    a python op runs as Spark's Python; what cannot run is refused; and
    the keyed plans (keyed_jobs) likewise."""
    top = corpus()
    keyed, check_keyed_results = keyed_jobs(d, top)
    functions, check_functions = function_jobs(d) if HAVE_CLOUDPICKLE \
        else ([], lambda got: None)
    jobs = cases(top)
    want = {}
    for name, plan, args in jobs:
        done = run(d, args + [write_plan(d, name.replace(" ", "_"), plan)])
        check(done.returncode == 0, "%s: ember run: %s" % (name,
                                                            done.stderr))
        want[name] = done.stdout
    batch = [(plan, args) for _, plan, args in jobs]
    if HAVE_CLOUDPICKLE:
        py_plan, py_want = python_case()
        batch.append((py_plan, ["--collect"]))
    out = data_dir()
    save_plan = {"source": {"parallelize": {"records": [
        "x", None, "ÿ", "z"]}}, "partitions": 2, "ops": [{"map": "upper"}]}
    theirs = job_writable(os.path.join(out, "ember"))
    saved = run(d, ["--action", "save", "--option", "path=" + theirs,
                    "--option", "overwrite=true",
                    write_plan(d, "save", save_plan)])
    check(saved.returncode == 0, "ember run save: %s" % saved.stderr)
    mine = os.path.join(out, "spark")
    batch.append((save_plan, ["--action", "save", "--option",
                              "path=" + mine]))
    batch += [(plan, args) for plan, args, _ in REFUSED]
    got = submit_batch(batch + keyed + functions)
    check_functions(got[len(batch) + len(keyed):])
    check_keyed_results(got[len(batch):len(batch) + len(keyed)])
    got = got[:len(batch)]
    for (name, _, args), result in zip(jobs, got):
        check_same(name, want[name], result, args)
    check(b"STRASSE" in want["regex upper split"] and
          b"\xc3\x89CLAIR" in want["regex upper split"],
          "Unicode case mapping in the output")
    got = got[len(jobs):]
    if HAVE_CLOUDPICKLE:
        check_same("python", py_want, got.pop(0), [])
        done = run(d, ["--collect", write_plan(d, "python", py_plan)])
        if done.returncode == 0:    # an emberd built with Python
            check_eq(py_want, done.stdout, "ember run's python op")
    else:
        print("python op not checked: cloudpickle is not installed")
    check_same("save", saved.stdout, got.pop(0), [])
    for part in ("part-00000", "part-00001", "_SUCCESS"):
        with open(os.path.join(theirs, part), "rb") as a, \
                open(os.path.join(mine, part), "rb") as b:
            check_eq(b.read(), a.read(), part)
    for (_, _, needle), (status, _, err) in zip(REFUSED, got):
        check(status == 1 and needle in err,
              "%r not in the error: %r" % (needle, err))


def keyed_cases(top):
    """(name, plan, ember run's arguments, ordered): keyed plans, every
    wide op on text and parallelize sources, with narrow ops after them.
    Where ember's docs leave the order open (a hash-partitioned op's
    partitions), ordered is False and sorted lines are compared; the
    bytes are the same anyway, as ember's partitioner is used."""
    text = {"text": {"paths": [os.path.join(top, "*.txt")]}}
    docs = {"text": {"paths": [os.path.join(top, "docs", "*")]}}
    words = [{"map": "lower"}, {"flat_map": {"split": " "}},
             {"filter": {"regex": "^[a-z]{3,}$"}}]
    csv = {"parallelize": {"records": [
        "a,1", "b,2.5", "a,3", "c,9223372036854775807", None, "c,1",
        "b,-0.5", "d,0.1", "d,0.2", "a,-4", "e,x7", "c,+2", "e,", "a,007",
        "f", "b,1e2"]}}
    by_field = {"key_by": {"field": {"sep": ",", "index": 0},
                           "value": {"field": {"sep": ",", "index": 1}}}}
    numeric = {"source": csv, "partitions": 3, "ops": [
        {"filter": {"regex": "^[a-d],"}}, by_field]}
    right = {"source": {"parallelize": {"records": [
        "a,x", "c,y", "a,z", "g,w", "b,", "a,x"]}}, "partitions": 2,
        "ops": [by_field]}
    digit = {"key_by": {"regex": "[0-9]$"}}
    return [
        ("wordcount by key", {"source": docs, "partitions": 4, "ops": words + [
            {"key_by": {}}, {"reduce_by_key": {"fn": "count",
                                               "partitions": 3}}]},
         ["--collect"], False),
        ("sum by key", dict(numeric, ops=numeric["ops"] + [
            {"reduce_by_key": {"fn": "sum", "partitions": 2}}]),
         ["--collect"], False),
        ("min max by key", range_plan(0, 1000, 8, ops=[
            digit, {"reduce_by_key": {"fn": "min"}},
            {"map": "value"}, {"key_by": {"regex": "^[0-9]"}},
            {"reduce_by_key": {"fn": "max", "partitions": 3}}]),
         ["--action", "iterate"], False),
        ("concat by key", {"source": csv, "partitions": 3, "ops": [
            by_field, {"reduce_by_key": {"fn": "concat", "sep": "+"}}]},
         ["--collect"], False),
        ("group by key", {"source": text, "ops": [
            {"key_by": {"field": {"sep": " ", "index": 0}}},
            {"group_by_key": {"partitions": 2}}]}, ["--collect"], False),
        ("group then key", {"source": csv, "partitions": 2, "ops": [
            by_field, {"group_by_key": {}}, {"map": "key"}]},
         ["--collect"], False),
        ("distinct", {"source": text, "partitions": 3, "ops": [
            {"flat_map": {"split": " "}}, {"distinct": {}}]},
         ["--collect"], False),
        ("distinct pairs", {"source": {"parallelize": {"records": [
            "a,1", "a,1", "b,1", "a,2", "b,1", "", None, "a,"]}},
            "partitions": 2, "ops": [{"distinct": {"partitions": 3}}, by_field,
                                     {"distinct": {"partitions": 2}}]},
         ["--collect"], False),
        ("sort words", {"source": docs, "partitions": 3, "ops": words + [
            {"sort_by": {"partitions": 4}}]}, ["--collect"], True),
        ("demo words by key sorted", {
            "source": docs, "partitions": 4, "ops": words + [
                {"key_by": {}}, {"reduce_by_key": {"fn": "count"}},
                {"sort_by": {"partitions": 2}}]}, ["--collect"], True),
        ("sort numeric descending", range_plan(0, 300, 5, step=7, ops=[
            digit, {"sort_by": {"numeric": True, "descending": True,
                                "partitions": 3}}]), ["--collect"], True),
        ("sort numbers", {"source": {"parallelize": {"records": [
            "10", "9.5", "-1", "1e2", "+3", "007", "3", "-0.5"]}},
            "partitions": 2, "ops": [{"sort_by": {"numeric": True}}]},
         ["--action", "iterate"], True),
        ("sort bytes descending", {"source": text, "ops": [
            {"key_by": {"field": {"sep": " ", "index": 0}}},
            {"sort_by": {"descending": True, "partitions": 2}}]},
         ["--collect"], True),
        ("repartition limit", range_plan(0, 50, 4, ops=[
            {"repartition": {"partitions": 3}}, {"limit": 5}]),
         ["--collect"], True),
        # Spark's splits of a text file are not emberd's byte ranges:
        # the same records, dealt from other map partitions.
        ("repartition text", {"source": text, "ops": [
            {"repartition": {"partitions": 3}}]}, ["--collect"], False),
        ("join", dict(numeric, ops=numeric["ops"] + [
            {"join": {"plan": right, "partitions": 3}}]),
         ["--collect"], False),
        ("left join text", {"source": text, "partitions": 2, "ops": [
            {"key_by": {"regex": "^[a-z]"}},
            {"join": {"plan": right, "how": "left"}}, {"limit": 3}]},
         ["--collect"], False),
        ("union", range_plan(0, 20, 2, ops=[{"union": {"plan": {
            "source": text, "ops": [{"map": "upper"}]}}},
            {"filter": {"regex": "^[0-9S]"}}]), ["--collect"], True),
        ("union count", range_plan(0, 20, 2, ops=[
            {"key_by": {}}, {"union": {"plan": right}},
            {"group_by_key": {}}]), ["--count"], True),
    ]


# Keyed plans refused, or failing as emberd fails.
KEYED_REFUSED = [
    ({"source": {"parallelize": {"records": ["a,1", "a,x"]}}, "ops": [
        {"key_by": {"field": {"sep": ",", "index": 0},
                    "value": {"field": {"sep": ",", "index": 1}}}},
        {"reduce_by_key": {"fn": "sum"}}]}, ["--collect"],
     'JOB_FAILED: reduce_by_key: key "a": value "x" is not a number'),
    ({"source": {"parallelize": {"records": ["1", "y"]}}, "ops": [
        {"sort_by": {"numeric": True}}]}, ["--collect"],
     'JOB_FAILED: sort_by: key "y" is not a number'),
    ({"source": {"range": {"end": 10}}, "ops": [{"key_by": {}}]},
     ["--action", "count_by_value"], "PLAN_INVALID: action: count_by_value "
     "takes plain records"),
    ({"source": {"range": {"end": 10}}, "ops": [
        {"sort_by": {"partitions": 2}}, {"map": "upper"}, {"limit": 3}]},
     ["--collect"], "PLAN_INVALID: plan.ops[2].limit: after sort_by"),
]


def keyed_jobs(d, top):
    """Keyed plans through emberd, and the jobs to run them on the
    cluster: (batch, check), check(results) comparing the bytes (sorted
    lines where ember leaves the order open), a save of groups part file
    by part file, and an error of the fold or the sort with emberd's."""
    jobs = keyed_cases(top)
    want = {}
    for name, plan, args, _ in jobs:
        done = run(d, args + [write_plan(d, name.replace(" ", "_"), plan)])
        check(done.returncode == 0, "%s: ember run: %s" % (name,
                                                            done.stderr))
        want[name] = done.stdout
    batch = [(plan, args) for _, plan, args, _ in jobs]
    out = data_dir()
    save_plan = {"source": {"parallelize": {"records": [
        "x,1", "y,2", "x,3", "z,", "y,5"]}}, "partitions": 2, "ops": [
        {"key_by": {"field": {"sep": ",", "index": 0}}},
        {"group_by_key": {"partitions": 3}}]}
    theirs = job_writable(os.path.join(out, "ember"))
    saved = run(d, ["--action", "save", "--option", "path=" + theirs,
                    "--option", "overwrite=true",
                    write_plan(d, "save", save_plan)])
    check(saved.returncode == 0, "ember run save: %s" % saved.stderr)
    mine = os.path.join(out, "spark")
    batch.append((save_plan, ["--action", "save", "--option",
                              "path=" + mine]))
    batch += [(plan, args) for plan, args, _ in KEYED_REFUSED]
    batch.append((save_plan, ["--action", "checkpoint", "--option",
                              "dir=" + os.path.join(out, "checkpoints")]))
    return batch, lambda got: check_keyed(d, jobs, want, saved, theirs,
                                          mine, got)


def check_keyed(d, jobs, want, saved, theirs, mine, got):
    """The keyed jobs' results (got) against emberd's."""
    for (name, _, args, ordered), result in zip(jobs, got):
        check_same(name, want[name], result, args, ordered)
    got = got[len(jobs):]
    check_same("save", saved.stdout, got.pop(0), [])
    for part in ("part-00000", "part-00001", "part-00002", "_SUCCESS"):
        with open(os.path.join(theirs, part), "rb") as a, \
                open(os.path.join(mine, part), "rb") as b:
            check_eq(b.read(), a.read(), part)
    for (plan, args, needle), (status, _, err) in zip(KEYED_REFUSED, got):
        check(status == 1 and needle in err,
              "%r not in the error: %r" % (needle, err))
        if needle.startswith("JOB_FAILED: "):
            done = run(d, args + [write_plan(d, "failed", plan)])
            check(done.returncode == 1 and needle[12:].encode() in
                  done.stderr, "ember run's error: %r" % done.stderr)
    status, out, err = got[len(KEYED_REFUSED)]
    path = out.strip().decode()
    check(status == 0 and os.path.isdir(path[len("file:"):] if
                                        path.startswith("file:") else path),
          "a checkpoint of groups: %r %r" % (out, err))


@skip_unless(NEEDS_SPARK, WHY)
def test_cli_submit(d):
    """ember submit itself: its standard output holds the records alone,
    as ember run's does, here of a plan with a broadcast given by
    --broadcast; a plan it cannot run is refused, before any job, with
    the reason on standard error and nothing on standard output."""
    top = corpus()
    # --broadcast ID=FILE: the plan's broadcast, as emberd's session holds
    # it for a client that put it there (ember run has no session to put
    # one in): the records emberd gives that client.
    sys.path.insert(0, os.path.join(SRCDIR, "python"))
    import ember
    wanted = b"HELLO WORLD\r\n123-ABC\nNO NEWLINE AT THE END\n"
    with ember.connect(d.socket) as sc:
        b = sc.broadcast(wanted)
        ds = sc.text_file(os.path.join(top, "a.txt")).map_upper().filter_in(b)
        want = emberd_lines(ds.collect(decode=False))
        plan = ds.plan
    path = os.path.join(data_dir(), "lines")
    with open(path, "wb") as f:
        f.write(wanted)
    got = submit(["--collect", "--broadcast", "%d=%s" % (b.id, path),
                  write_plan(d, "cli_broadcast", plan)])
    check_eq((got.returncode, got.stdout), (0, want),
             "ember submit --broadcast (%r)" % got.stderr[-1500:])
    check(len(want.split(b"\n")) == 4, "three lines kept: %r" % want)
    path = write_plan(d, "refused", {"source": {"range": {"end": 10}},
                                     "ops": [{"filter": {"regex": "("}}]})
    # A master no one listens on: a job that started would fail there.
    got = submit([path], master="spark://127.0.0.1:%d" % _free_port())
    err = got.stderr.decode("utf-8", "replace")
    check_eq(got.returncode, 1, "exit status")
    check("ember: PLAN_INVALID: plan.ops[0].filter.regex: missing closing "
          "parenthesis" in err, "the error: %s" % err[-1500:])
    check_eq(got.stdout, b"", "standard output")


@no_daemon
def test_python_client_keyed_answer(_):
    """What the driver pickles for ember.submit() of keyed records reads
    back as the Dataset gives them: pairs (key, value), groups (key,
    [values]), a join's (key, (v, w)), a null value None."""
    sys.path.insert(0, os.path.join(SRCDIR, "python"))
    sys.path.insert(0, os.path.join(SRCDIR, "python", "ember"))
    import spark_job
    from ember import spark
    by_field = {"key_by": {"field": {"sep": ",", "index": 0},
                           "value": {"field": {"sep": ",", "index": 1}}}}
    plan = {"source": {"range": {"end": 1}}, "ops": [by_field]}
    path = os.path.join(data_dir(), "result")
    for ops, records, want in [
            ([], [(b"a", b"1"), (b"b", None)], [("a", "1"), ("b", None)]),
            ([{"group_by_key": {}}], [(b"a", [b"1", None])],
             [("a", ["1", None])]),
            ([{"join": {"plan": plan, "how": "left"}}],
             [(b"a", [b"1", None])], [("a", ("1", None))]),
            ([{"join": {"plan": plan}}, {"map": "key"}], [b"a"], ["a"])]:
        keyed = dict(plan, ops=plan["ops"] + ops)
        spark_job.write_result(path, "records", "collect", records,
                               spark_job.plan_kind(keyed, joins=True))
        with open(path, "rb") as f:
            answer = pickle.load(f)
        check_eq(spark._answer("collect", answer["result"], True, "strict",
                               answer["records"]), want, "%r" % ops)


def client_submit(ember, plan):
    """ember.submit(plan, "collect") on the cluster."""
    return ember.submit(plan, "collect", master=cluster().url,
                        worker=EMBER_WORKER,
                        conf={"spark.driver.host": "127.0.0.1",
                              "spark.executor.memory": "512m",
                              "spark.ui.enabled": "false"},
                        timeout=SUBMIT_TIMEOUT)


@skip_unless(NEEDS_SPARK, WHY)
def test_python_client_submit(d):
    """ember.submit() answers what the Dataset action answers: here the
    records of ember run, as str, a null as None."""
    sys.path.insert(0, os.path.join(SRCDIR, "python"))
    import ember
    plan = {"source": {"parallelize": {"records": ["ab", None, "çé"]}},
            "partitions": 2, "ops": [{"map": "upper"}]}
    got = client_submit(ember, plan)
    check_eq(got, ["AB", None, "ÇÉ"], "records")
    want = run(d, ["--collect", write_plan(d, "client", plan)])
    check_eq("".join((r or "") + "\n" for r in got).encode(), want.stdout,
             "ember run's records")
    if not HAVE_CLOUDPICKLE:
        print("reduce with a function not checked: no cloudpickle")
        return
    # A function's reduce, reading a broadcast of an object the client
    # holds: what Dataset.reduce answers through emberd.
    import operator
    with ember.connect(d.socket) as sc:
        weights = sc.broadcast_object({"0": 10, "5": [100]})
        ds = sc.range(0, 8, partitions=3).map(
            lambda s: weights.value.get(s, 1)).map(
            lambda w: w[0] if isinstance(w, list) else w)
        want = ds.reduce(operator.add)
        got = ember.submit(ds, "reduce", options={"fn": operator.add},
                           broadcasts=[weights], master=cluster().url,
                           worker=EMBER_WORKER,
                           conf={"spark.driver.host": "127.0.0.1",
                                 "spark.executor.memory": "512m",
                                 "spark.ui.enabled": "false"},
                           timeout=SUBMIT_TIMEOUT)
    check_eq((got, want), (116, 116), "reduce(operator.add)")


@no_daemon
def test_python_client_combines(_):
    """ember.submit()'s reduce and fold with a function combine the
    partitions' results as the Dataset's do: an empty dataset's reduce is
    the same ValueError, a fold starts from zero."""
    import operator
    sys.path.insert(0, os.path.join(SRCDIR, "python"))
    from ember import spark
    try:
        spark._combine("reduce", {"fn": operator.add}, [])
        check(False, "an empty reduce raised nothing")
    except ValueError as e:
        check_eq(str(e), "reduce: the dataset is empty", "the error")
    parts = [pickle.dumps(x, pickle.HIGHEST_PROTOCOL) for x in (3, 4)]
    check_eq(spark._combine("reduce", {"fn": operator.add}, parts), 7,
             "reduce")
    check_eq(spark._combine("fold", {"zero": [], "fn": operator.add},
                            [pickle.dumps([1]), pickle.dumps([2])]),
             [1, 2], "fold")
    check_eq(spark._combine("fold", {"zero": 5, "fn": operator.add}, []), 5,
             "an empty fold")


@no_daemon
def test_stdio_chain_pairs(_):
    """Pairs leave --stdio as they leave a worker for emberd: -7, the key
    frame and the value frame, never the value alone with its key lost."""
    plan = json.dumps({"source": {"parallelize": {"records": []}},
                       "ops": [{"key_by": {"field": {"sep": ",",
                                                     "index": 0}}}]})
    done = subprocess.run([EMBER_WORKER, "--stdio", "--plan", plan],
                          input=frames([b"a,1", None, b"b,2"]),
                          capture_output=True, timeout=30)
    check_eq(done.returncode, 0, "status (%r)" % done.stderr)
    pair = lambda k, v: (struct.pack(">ii", -7, len(k)) + k +
                         struct.pack(">i", len(v)) + v)
    check_eq(done.stdout, pair(b"a", b"a,1") + pair(b"b", b"b,2") +
             struct.pack(">i", -1), "pairs framed, the null dropped")


def keyed_frame(key, values, group=False):
    """A pair (values one value) or a group in ember's framing."""
    head = struct.pack(">ii", -8 if group else -7, len(key)) + key
    if not group:
        values = [values]
    return head + (struct.pack(">i", len(values)) if group else b"") + \
        frames(values)


def stage_plan(op, ops, inputs=1):
    """The plan of a stage after a wide op, as emberd gives its tasks."""
    return json.dumps({"source": {"shuffle": {"op": op, "inputs": [
        {"stage": i, "maps": 1} for i in range(inputs)]}}, "ops": ops})


@no_daemon
def test_stdio_chain_reads_pairs(_):
    """After a wide op the executors feed --stdio the pairs and groups the
    op gave, under the stage's plan: they are read whole, a pair's value
    mapped, a group passed on byte for byte, one cut short refused."""
    pairs = keyed_frame(b"k", b"v") + keyed_frame(b"n", None) + \
        keyed_frame(b"", b"")
    done = subprocess.run(
        [EMBER_WORKER, "--stdio", "--plan", stage_plan(
            {"reduce_by_key": {"fn": "concat"}}, [{"map": "value"}])],
        input=pairs, capture_output=True, timeout=30)
    check_eq((done.returncode, done.stderr), (0, b""), "pairs' status")
    check_eq(done.stdout, frames([b"v", None, b""]) +
             struct.pack(">i", -1), "their values")
    groups = keyed_frame(b"g", [b"a", None, b""], group=True) + \
        keyed_frame(b"h", [], group=True)
    done = subprocess.run(
        [EMBER_WORKER, "--stdio", "--plan", stage_plan(
            {"join": {"how": "left"}}, [{"limit": 5}], inputs=2)],
        input=groups, capture_output=True, timeout=30)
    check_eq((done.returncode, done.stderr), (0, b""), "groups' status")
    check_eq(done.stdout, groups + struct.pack(">i", -1), "the groups")
    for cut in (pairs[:6], pairs[:12], groups[:14]):
        done = subprocess.run(
            [EMBER_WORKER, "--stdio", "--plan", stage_plan(
                {"group_by_key": {}}, [])],
            input=cut, capture_output=True, timeout=30)
        check(done.returncode == 1 and b"cut short" in done.stderr,
              "a keyed record cut short: %r" % done.stderr)


@skip_unless(NEEDS_SPARK, WHY)
def test_worker_killed_mid_job(d):
    """A Spark worker and its executor killed while tasks run: Spark runs
    the lost tasks again on the other worker, and the answer is right.
    ember-worker is shipped with the job (--ship)."""
    c = cluster()
    tmp = data_dir()
    path = os.path.join(tmp, "slow.json")
    # Each task sleeps in its pipe, so the job lasts long enough to lose
    # a worker in the middle.
    with open(path, "w") as f:
        json.dump(range_plan(0, 100000, 8, ops=[
            {"pipe": {"command": "sleep 1.5; cat"}},
            {"filter": {"contains": "9"}}]), f)
    # Shipped: the executors run the copy of ember-worker Spark fetched.
    argv, env = submit_command(["--count", "--ship", path])
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)
    try:
        victim = c.procs["worker1"].pid

        def running_there():
            return [p for p in descendants(victim)
                    if "--stdio" in cmdline(p)]
        wait_until(lambda: running_there() or proc.poll() is not None,
                   SUBMIT_TIMEOUT)
        check(proc.poll() is None and running_there(),
              "no task ran under worker1 while the job ran")
        shipped = cmdline(running_there()[0]).split()[0]
        check(shipped != EMBER_WORKER and shipped.startswith(c.dir),
              "the executor runs %s, not a copy of its own" % shipped)
        c.kill_worker("worker1")
        out, err = proc.communicate(timeout=SUBMIT_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    want = sum(1 for i in range(100000) if "9" in str(i))
    check_eq(proc.returncode, 0, "ember submit's status (%s)" %
             err.decode("utf-8", "replace")[-2000:])
    check_eq(out, b"%d\n" % want, "the count")


def frames(records):
    return b"".join(struct.pack(">i", -5) if r is None else
                    struct.pack(">i", len(r)) + r for r in records)


def stdio(ops, records, partition=0, raw=None, more=()):
    """ember-worker --stdio over records: (status, records out or None if
    the end marker is missing, stderr)."""
    plan = json.dumps({"source": {"parallelize": {"records": []}},
                       "ops": ops})
    done = subprocess.run([EMBER_WORKER, "--stdio", "--plan", plan,
                           "--partition", str(partition)] + list(more),
                          input=frames(records) if raw is None else raw,
                          capture_output=True, timeout=30)
    out, pos, whole = [], 0, False
    while pos + 4 <= len(done.stdout):
        n = struct.unpack(">i", done.stdout[pos:pos + 4])[0]
        pos += 4
        if n == -1:
            whole = pos == len(done.stdout)
            break
        if n == -5:
            out.append(None)
            continue
        out.append(done.stdout[pos:pos + n])
        pos += n
    # A udf runs on a context of its own, of which AddressSanitizer warns
    # once; that warning is the build's, not the chain's.
    err = re.sub(r"(?m)^==\d+==WARNING: ASan doesn't fully support "
                 r"makecontext.*\n", "",
                 done.stderr.decode("utf-8", "replace"))
    return done.returncode, out if whole else None, err


@no_daemon
def test_stdio_chain(_):
    """ember-worker --stdio, what the executors run, needs no Spark:
    records and nulls framed in and out, the end marker after the last, a
    limit that stops reading, a udf's failure and a broken frame as exit 1
    with the reason; a pipe's stderr kept out of the stream."""
    rc, out, err = stdio([{"filter": {"regex": "(?i)éclair|^$"}},
                          {"map": "upper"}, {"flat_map": {"split": " "}}],
                         ["straße Éclair".encode(), None, b"", b"x",
                          "ǆ éclair".encode()])
    check_eq((rc, err), (0, ""), "status")
    check_eq(out, ["STRASSE".encode(), "ÉCLAIR".encode(), b"",
                   "Ǆ".encode(), "ÉCLAIR".encode()], "records")
    rc, out, _ = stdio([{"limit": 2}], [b"r%d" % i for i in range(100000)])
    check_eq((rc, out), (0, [b"r0", b"r1"]), "limit")
    rc, out, _ = stdio([{"map": "trim"}], [None, b" a "])
    check_eq(out, [None, b"a"], "a null passes a map")
    a = stdio([{"sample": {"fraction": 0.5, "seed": 3}}],
              [b"%d" % i for i in range(200)], partition=1)
    b = stdio([{"sample": {"fraction": 0.5, "seed": 3}}],
              [b"%d" % i for i in range(200)], partition=2)
    check(a[1] != b[1] and a[1] == stdio(
        [{"sample": {"fraction": 0.5, "seed": 3}}],
        [b"%d" % i for i in range(200)], partition=1)[1],
          "sample seeds from --partition")
    rc, out, err = stdio([{"udf": {"library": PLUGIN,
                                   "symbol": "udf_fail"}}], [b"x"],
                         partition=4)
    check(rc == 1 and out is None and "partition 4: " in err and
          "deliberate failure" in err, "udf failure: %r" % err)
    rc, out, err = stdio([], None, raw=struct.pack(">i", 10) + b"abc")
    check(rc == 1 and "cut short" in err, "short frame: %r" % err)
    rc, out, err = stdio([], None, raw=struct.pack(">i", -9))
    check(rc == 1 and "bad frame length -9" in err, "bad length: %r" % err)
    rc, out, err = stdio([{"pipe": {"command": "echo noise; cat"}}], [b"a"])
    check_eq((rc, out), (0, [b"noise", b"a"]), "a pipe's records")
    rc, out, err = stdio([{"pipe": {"command": "echo noise >&2; cat"}}],
                         [b"a"])
    check(rc == 0 and out == [b"a"], "a pipe's stderr stays out: %r" % out)
    rc, out, err = stdio([{"filter": {"regex": "("}}], [])
    check(rc == 1 and err.startswith("PLAN_INVALID: plan.ops[0].filter."
                                     "regex"), "bad plan: %r" % err)


@no_daemon
def test_stdio_chain_broadcasts(_):
    """--broadcast ID=FILE gives --stdio's ops the broadcast as emberd's
    workers hold it: in_broadcast's set of lines (a \\r kept, an empty
    line counted), a udf's bytes; a missing file or a broadcast not given
    fails saying which."""
    path = os.path.join(data_dir(), "b")
    with open(path, "wb") as f:
        f.write(b"a\nb\r\n\nq")
    records = [b"a", b"b\r", b"b", b"", None, b"q", b"qq"]
    rc, out, err = stdio([{"filter": {"in_broadcast": 4}}], records,
                         more=["--broadcast", "4=" + path])
    check_eq((rc, err, out), (0, "", [b"a", b"b\r", b"", b"q"]),
             "in_broadcast")
    rc, out, err = stdio([{"udf": {"library": PLUGIN,
                                   "symbol": "udf_in_broadcast",
                                   "args": {"broadcast": 4},
                                   "broadcasts": [4]}}], records,
                         more=["--broadcast", "4=" + path])
    check_eq((rc, err, out), (0, "", [b"a", b"b\r", b"", b"q"]), "a udf's")
    rc, out, err = stdio([{"filter": {"in_broadcast": 4}}], records,
                         more=["--broadcast", "4=" + path + ".none"])
    check(rc == 1 and "broadcast 4: " in err and path in err and
          "No such file" in err, "a missing file: %r" % err)
    rc, out, err = stdio([{"filter": {"in_broadcast": 5}}], records,
                         more=["--broadcast", "4=" + path])
    check(rc == 1 and "broadcast 5 is not held" in err,
          "a broadcast not given: %r" % err)


@skip_unless(NEEDS_SPARK, WHY)
@no_daemon
def test_zz_cluster_stops(d):
    """Every process of the cluster is gone after stop."""
    c = cluster()
    pids = [p.pid for p in c.procs.values()]
    for pid in list(pids):
        pids += descendants(pid)
    c.stop()
    wait_until(lambda: not any(is_running(p) for p in pids), 15)
    check(not any(is_running(p) for p in pids),
          "left running: %r" % [p for p in pids if is_running(p)])


if __name__ == "__main__":
    run_tests(globals(), watchdog=600)
