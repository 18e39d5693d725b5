"""Plans run on a Spark cluster: `ember.submit(plan, action, master=...)`.

The same plan as `Session` runs through emberd, run by spark-submit with
spark_job.py (beside this file) on a Spark master, answering what the
Dataset action answers.  docs/spark.md says what maps to what.
"""

import collections
import functools
import json
import os
import pickle
import re
import shutil
import subprocess
import tempfile
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from .errors import EmberError, error_from_reply

__all__ = ["submit", "SPARK_JOB"]

# The driver spark-submit runs; installed with the package.
SPARK_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "spark_job.py")

# Where ember-worker is looked for without worker= or $EMBER_WORKER.
_WORKER_PLACES = ("/usr/libexec/ember-worker",
                  "/usr/local/libexec/ember-worker",
                  "/usr/lib/ember/ember-worker")


def _find_worker(worker: Optional[str]) -> str:
    for path in (worker, os.environ.get("EMBER_WORKER")) + _WORKER_PLACES:
        if path and os.access(path, os.X_OK):
            return os.path.abspath(path)
    raise EmberError("ember-worker not found: give worker=PATH or set "
                     "EMBER_WORKER (its path on every Spark node)",
                     "WORKER_NOT_FOUND")


def _find_spark_submit(spark_submit: Optional[str]) -> str:
    if spark_submit:
        return spark_submit
    home = os.environ.get("SPARK_HOME")
    if home:
        return os.path.join(home, "bin", "spark-submit")
    try:
        import pyspark  # type: ignore
        path = os.path.join(os.path.dirname(pyspark.__file__), "bin",
                            "spark-submit")
        if os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    return shutil.which("spark-submit") or "spark-submit"


def _plan_of(plan: Any) -> dict:
    """A Dataset's plan, or a plan given as a dict or JSON text."""
    if hasattr(plan, "plan"):
        return plan.plan
    if isinstance(plan, (str, bytes)):
        return json.loads(plan)
    return plan


def _raise_from(stderr: str, status: int) -> None:
    """Raise the error the driver printed ("ember: CLASS: message")."""
    found = re.findall(r"^ember: ([A-Z_]+): (.*)$", stderr, re.M)
    if found:
        cls, message = found[-1]
        raise error_from_reply({"ok": False, "error": {
            "class": cls, "message": message}})
    raise EmberError("spark-submit exited with status %d: %s" %
                     (status, stderr.strip()[-2000:]), "SPARK_FAILED")


def _decode(record: Optional[bytes], decode: bool, errors: str) -> Any:
    if record is None or not decode:
        return record
    return record.decode("utf-8", errors)


def _item(r: Any, decode: bool, errors: str, join: bool) -> Any:
    """A record, a pair (key, value) or a group (key, [values]); a join's
    group as (key, (v, w)), as the Dataset gives them."""
    if not isinstance(r, tuple):
        return _decode(r, decode, errors)
    key, value = r
    if not isinstance(value, list):
        return (_decode(key, decode, errors), _decode(value, decode, errors))
    values = [_decode(v, decode, errors) for v in value]
    return (_decode(key, decode, errors), tuple(values) if join else values)


def _answer(action: str, result: Any, decode: bool, errors: str,
            records: str = "record") -> Any:
    """What the Dataset action answers, from the driver's result."""
    if action in ("iterate", "collect"):
        return [_item(r, decode, errors, records == "join") for r in result]
    if action == "count_by_value":
        return collections.Counter({_decode(k, decode, errors): n
                                    for k, n in result.items()})
    if action == "reduce":
        return None if result is None else result[1]
    return result


BroadcastsArg = Union[Mapping[Any, Any], Iterable[Any]]


def _broadcast_bytes(b: Any, data: Any) -> Tuple[int, bytes]:
    """A broadcast's id and bytes: an ObjectBroadcast alone (its value
    pickled as broadcast_object pickles it), or a Broadcast or id with
    its data as Session.broadcast takes it (bytes, str as UTF-8, an open
    binary file) or a path (os.PathLike) of a file holding it."""
    bid = getattr(b, "id", b)
    if not isinstance(bid, int) or isinstance(bid, bool):
        raise TypeError("broadcasts: expected a Broadcast or its id, got %r"
                        % (b,))
    if data is None and hasattr(b, "value"):
        from . import functions
        return bid, functions.dumps_bytes(b.value)[0]
    if isinstance(data, str):
        return bid, data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bid, bytes(data)
    if isinstance(data, os.PathLike):
        with open(data, "rb") as f:
            return bid, f.read()
    if hasattr(data, "read"):
        return bid, data.read()
    raise TypeError("broadcast %d: give its data (bytes, str, a file or "
                    "a path), or an ObjectBroadcast" % bid)


def _broadcast_items(broadcasts: BroadcastsArg) -> List[Tuple[int, bytes]]:
    """The (id, bytes) of each broadcast given to submit()."""
    items = broadcasts.items() if isinstance(broadcasts, Mapping) else \
        ((b, None) if not isinstance(b, tuple) else b for b in broadcasts)
    return [_broadcast_bytes(b, data) for b, data in items]


def _function_plan(plan: dict, action: str,
                   options: Dict[str, Any]) -> dict:
    """The plan a reduce or fold with a function runs, as the Dataset's:
    a python op that leaves each partition's result pickled."""
    from . import functions
    op = functions.python_op(action, options["fn"], options.get("zero"),
                             with_zero=action == "fold")
    return dict(plan, ops=list(plan.get("ops", [])) + [op])


def _combine(action: str, options: Dict[str, Any],
             partials: List[bytes]) -> Any:
    """The partitions' results combined here with the same function, as
    Dataset.reduce(fn) and Dataset.fold(zero, fn) combine them."""
    values = (pickle.loads(p) for p in partials)
    if action == "fold":
        return functools.reduce(options["fn"], values, options.get("zero"))
    if not partials:
        raise ValueError("reduce: the dataset is empty")
    return functools.reduce(options["fn"], values)


def submit(plan: Any, action: str = "collect", *, master: str,
           options: Optional[Dict[str, Any]] = None,
           broadcasts: BroadcastsArg = (),
           worker: Optional[str] = None, spark_submit: Optional[str] = None,
           conf: Optional[Dict[str, str]] = None,
           spark_args: Iterable[str] = (), ship: bool = False,
           decode: bool = True,
           errors: str = "strict", timeout: Optional[float] = None) -> Any:
    """Run plan (a Dataset, a dict or JSON text) on Spark at master
    ("spark://host:7077", "local[4]", "yarn"...) and answer what the action
    answers through emberd: a list of records for iterate and collect
    (str, or bytes with decode=False; None for a null), an int for count,
    a Counter for count_by_value, a number (None if there are no records)
    for reduce (options={"fn": "sum"}), {"records", "files"} for save, the
    checkpoint's directory for checkpoint.  reduce with options={"fn":
    f} and fold with options={"zero": z, "fn": f} answer what
    Dataset.reduce(f) and Dataset.fold(z, f) answer: each partition
    reduced on the executors, the results here.

    broadcasts gives the plan's broadcasts their bytes, as the session
    holds them for emberd: ObjectBroadcasts (their value), or pairs (or
    a dict) of a Broadcast or id and its data (bytes, str, an open
    binary file, a path).

    worker is ember-worker's path on every Spark node (else $EMBER_WORKER
    or the usual libexec places), or with ship=True here, and Spark copies
    it to the executors; conf and spark_args go to spark-submit.
    What Spark cannot run as emberd does raises PlanInvalid before any
    job; a failed job raises the ember error its message names."""
    options = dict(options or {})
    if action in ("reduce", "fold") and callable(options.get("fn")):
        partials = submit(
            _function_plan(_plan_of(plan), action, options), "collect",
            master=master, broadcasts=broadcasts, worker=worker,
            spark_submit=spark_submit, conf=conf, spark_args=spark_args,
            ship=ship, decode=False, timeout=timeout)
        return _combine(action, options, partials)
    worker = _find_worker(worker)
    argv = [_find_spark_submit(spark_submit), "--master", master,
            "--conf", "spark.log.level=WARN"]
    for key, value in (conf or {}).items():
        argv += ["--conf", "%s=%s" % (key, value)]
    argv += list(spark_args)
    if ship:    # Spark copies ember-worker to each executor
        argv += ["--files", worker]
    with tempfile.TemporaryDirectory(prefix="ember-submit-") as tmp:
        plan_path = os.path.join(tmp, "plan.json")
        result_path = os.path.join(tmp, "result")
        stderr_path = os.path.join(tmp, "stderr")
        with open(plan_path, "w") as f:
            json.dump(_plan_of(plan), f)
        open(stderr_path, "w").close()
        argv += [SPARK_JOB, "--worker", worker, "--plan-file", plan_path,
                 "--action", action, "--options", json.dumps(options),
                 "--result", result_path, "--stderr-file", stderr_path]
        for bid, data in _broadcast_items(broadcasts):
            path = os.path.join(tmp, "broadcast-%d" % bid)
            with open(path, "wb") as f:
                f.write(data)
            argv += ["--broadcast", "%d=%s" % (bid, path)]
        if ship:
            argv.append("--shipped")
        done = subprocess.run(argv, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=timeout)
        with open(stderr_path, errors="replace") as f:
            driver_stderr = f.read()
        if done.returncode != 0 or not os.path.exists(result_path):
            _raise_from(driver_stderr + done.stderr.decode("utf-8",
                                                           "replace"),
                        done.returncode)
        with open(result_path, "rb") as f:
            answer = pickle.load(f)
    return _answer(action, answer["result"], decode, errors,
                   answer.get("records", "record"))
