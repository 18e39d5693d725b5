"""What a broadcast of a Python object becomes in a function a worker
runs.  cloudpickle sends this module's functions by value (the workers
do not have the ember package), and the function finds ember_worker, the
module the worker's interpreter runs the python ops with."""


def worker_broadcast(bid):
    """The worker's handle of broadcast bid: its .value is unpickled at
    most once per worker."""
    import ember_worker  # type: ignore
    return ember_worker.broadcast(bid)


def dumps(x):
    """x pickled, to leave the workers as a record (ember.pyspark)."""
    import pickle
    return pickle.dumps(x, pickle.HIGHEST_PROTOCOL)


def loads(record):
    """A record dumps made, as it comes back into Python: str, its bytes
    kept by surrogateescape."""
    import pickle
    return pickle.loads(record.encode("utf-8", "surrogateescape"))


def text(x):
    """x as a line of saveAsTextFile, as PySpark writes it."""
    return x if isinstance(x, (str, bytes)) else str(x)


def counts(it):
    """A partition's countByValue, pickled."""
    import collections
    import pickle
    return [pickle.dumps(collections.Counter(it), pickle.HIGHEST_PROTOCOL)]


def run_foreach(fn, it):
    """RDD.foreach: fn of each element, in the workers; nothing comes
    out."""
    for x in it:
        fn(x)
    return ()


def b64_loads(record):
    """An element ember.pyspark's parallelize pickled into the plan."""
    import base64
    import pickle
    return pickle.loads(base64.b64decode(record))


def count(it):
    """A partition's count."""
    return [sum(1 for _ in it)]
