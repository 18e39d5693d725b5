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
    kept by surrogateescape (or bytes, as the client reads it)."""
    import pickle
    if isinstance(record, str):
        record = record.encode("utf-8", "surrogateescape")
    return pickle.loads(record)


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


def nothing(x):
    """An element as a null record, for count."""
    return None


# Keyed data (ember.pyspark): keys and values cross the shuffle as bytes.
# A str is its UTF-8 (surrogateescape), so that str keys sort as Python
# sorts them; a number is 0xff, 8 bytes that sort as the number does, and
# its pickle; any other object its pickle, whose first byte, 0x80, no
# UTF-8 text starts with.  Equal objects of these kinds give equal bytes.

def enc(x):
    """x as the bytes of a key or a value."""
    import math
    import pickle
    import struct
    if isinstance(x, str):
        return x.encode("utf-8", "surrogateescape")
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        try:
            f = float(x)
        except OverflowError:
            f = math.inf if x > 0 else -math.inf
        (bits,) = struct.unpack(">Q", struct.pack(">d", f))
        bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | 1 << 63
        return b"\xff" + struct.pack(">Q", bits) + pickle.dumps(x, 4)
    return pickle.dumps(x, 4)


def dec(b):
    """What enc made b of (b as bytes, or as a worker gives a record: str,
    its bytes kept by surrogateescape); None stays None."""
    import pickle
    if b is None:
        return None
    if isinstance(b, str):
        b = b.encode("utf-8", "surrogateescape")
    if b[:1] == b"\xff":
        return pickle.loads(b[9:])
    if b[:1] == b"\x80":
        return pickle.loads(b)
    return b.decode("utf-8", "surrogateescape")


def num_enc(x):
    """A value of reduceByKey's sum, min or max: a number, as text."""
    if isinstance(x, bool):
        x = int(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return repr(x)
    raise TypeError("ember.pyspark: reduceByKey: the value %r is not a "
                    "number: ember's shuffle sums, and compares, numbers"
                    % (x,))


def num_dec(b):
    """A number num_enc and the shuffle made: int while exact, else
    float."""
    if isinstance(b, bytes):
        b = b.decode("ascii")
    try:
        return int(b)
    except ValueError:
        return float(b)


# A pair leaves the Python ops as a 2-tuple of bytes, which the worker
# makes a pair of.

def pair_out(x):
    """An element (k, v) as a pair."""
    k, v = x
    return (enc(k), enc(v))


def num_pair_out(x):
    """An element (k, v), v a number, as a pair for sum, min or max."""
    k, v = x
    return (enc(k), num_enc(v))


def keyed_out(fn, x):
    """An element as a pair: fn(x) its key, x its value."""
    return (enc(fn(x)), enc(x))


def pair_in(x):
    """A pair back as (k, v)."""
    k, v = x
    return (dec(k), dec(v))


def num_pair_in(x):
    """A pair of reduceByKey back as (k, number)."""
    k, v = x
    return (dec(k), num_dec(v))


def group_in(x):
    """A group back as (k, [values])."""
    k, vs = x
    return (dec(k), [dec(v) for v in vs])


def join_in(x):
    """A join's group [v, w] back as (k, (v, w)); w None where the other
    side had no such key (leftOuterJoin)."""
    k, (v, w) = x
    return (dec(k), (dec(v), dec(w)))


def key_of(x):
    """RDD.keys."""
    return x[0]


def value_of(x):
    """RDD.values."""
    return x[1]


def map_value(fn, x):
    """RDD.mapValues."""
    return (x[0], fn(x[1]))


def key_by(fn, x):
    """RDD.keyBy."""
    return (fn(x), x)


def key_first(fn, kv):
    """sortByKey's keyfunc of a pair's key."""
    return fn(kv[0])


def combine_pairs(fn, it):
    """A partition's (key, value) pairs with each key's values folded by
    fn, keys in the order they first came."""
    acc = {}
    for k, v in it:
        acc[k] = fn(acc[k], v) if k in acc else v
    return iter(acc.items())


def fold_values(fn, values):
    """A key's values folded by fn, in order."""
    import functools
    return functools.reduce(fn, values)


def fold_group(fn, group):
    """A group (key, [values]) as the pair of its values folded by fn."""
    import functools
    key, values = group
    return (key, functools.reduce(fn, values))
