# The python ops' side of an ember worker (docs/design.md, "Python
# functions").  The fork-server runs this once as the module ember_worker;
# every worker it forks inherits it.  worker/python.c hands a stage (a run
# of consecutive python ops) a list of records at a time and takes back
# the list of records it made; between the ops of a stage records stay
# Python objects.
import _thread
import base64
import copy
import functools
import gc
import itertools
import pickle
import sys
import traceback

import _ember_worker

# The Python major.minor the worker runs: a client's plan must match it.
VERSION = "%d.%d" % sys.version_info[:2]

# What a function prints goes to the job's log a line at a time, so that
# the lines of workers writing at once do not mix.
for _stream in (sys.stdout, sys.stderr):
    if _stream is not None:
        _stream.reconfigure(line_buffering=True)


def _flush():
    """Write out what a function printed without a newline."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass


# A stage hands back at most this many records at a time.
BATCH = 1024

# Functions unpickled, by their pickle's text: a reused worker unpickles
# an operation's functions once, not once per task.
_functions = {}
_FUNCTIONS_MAX = 256

# Broadcast objects unpickled, by id: (the bytes' address, the object).
_broadcasts = {}

# Broadcast objects the fork-server unpickled (preload), by id: the
# object, or a _LoadFailed.  A worker forked after the load shares them
# copy-on-write; emberd retires the workers forked before a load or a
# drop, so what a worker finds here is what its fork-server held.
_preloaded = {}
_MISSING = object()


class _LoadFailed:
    """A broadcast that raised as the fork-server unpickled it."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text


class BroadcastError(Exception):
    """A broadcast's object could not be unpickled."""


def preload(bid, view):
    """Unpickle broadcast bid in the fork-server, for every worker it
    forks after; None, or the traceback if it raised (kept: a function
    that reads the broadcast raises it).  gc.freeze() then leaves what is
    loaded out of the workers' collections, which would otherwise write
    to the shared pages."""
    try:
        _preloaded[bid] = pickle.loads(view)
        failed = None
    except BaseException as e:
        failed = format_error(e)
        _preloaded[bid] = _LoadFailed(failed)
    gc.freeze()
    return failed


def unload(bid):
    """Let go of a broadcast preload made (it was dropped, or another
    took its place); unfrozen first, so that its cycles are collected."""
    if _preloaded.pop(bid, _MISSING) is _MISSING:
        return
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _load(text):
    """Unpickle a function (or fold's zero) of the plan, once."""
    fn = _functions.get(text)
    if fn is None:
        if len(_functions) >= _FUNCTIONS_MAX:
            _functions.clear()
        fn = pickle.loads(base64.b64decode(text))
        _functions[text] = fn
    return fn


class Broadcast:
    """A broadcast of a Python object, as a function sees it: .value is
    the object the fork-server loaded, or else unpickled from the worker's
    copy of the bytes at most once per worker, and kept while the worker
    is reused."""

    __slots__ = ("id",)

    def __init__(self, bid):
        self.id = bid

    @property
    def value(self):
        view, address = _ember_worker.broadcast(self.id)
        pre = _preloaded.get(self.id, _MISSING)
        if pre is not _MISSING:
            if type(pre) is _LoadFailed:
                raise BroadcastError("broadcast %d did not unpickle in the "
                                     "fork-server:\n%s" % (self.id, pre.text))
            return pre
        held = _broadcasts.get(self.id)
        if held is not None and held[0] == address:
            return held[1]
        _prune_broadcasts()
        value = pickle.loads(view)
        _broadcasts[self.id] = (address, value)
        return value

    def __repr__(self):
        return "Broadcast(%d)" % self.id


def _prune_broadcasts():
    """Forget the objects of the broadcasts the worker no longer holds
    (dropped, or replaced), before unpickling another: a reused worker
    must not keep every broadcast it ever saw."""
    for bid, (address, _) in list(_broadcasts.items()):
        try:
            if _ember_worker.broadcast(bid)[1] == address:
                continue
        except Exception:
            pass
        del _broadcasts[bid]


def broadcast(bid):
    """What a client's broadcast unpickles to inside a worker."""
    return Broadcast(bid)


class _Abandon(BaseException):
    """Raised into a map_partitions function whose task ended early."""


def _compose(ops, it):
    """The iterator of what ops make of the records of it."""
    for kind, fn, zero in ops:
        if kind == "map":
            it = map(fn, it)
        elif kind == "filter":
            it = filter(fn, it)
        elif kind == "flat_map":
            it = itertools.chain.from_iterable(map(fn, it))
        elif kind == "map_partitions":
            it = iter(fn(it))
        elif kind == "reduce":
            it = _reduce(fn, it)
        else:
            it = _fold(fn, zero, it)
    return it


_EMPTY = object()


def _reduce(fn, it):
    """A partition's reduce, as one pickled record (none if empty)."""
    acc = _EMPTY
    for x in it:
        acc = x if acc is _EMPTY else fn(acc, x)
    if acc is not _EMPTY:
        yield pickle.dumps(acc, pickle.HIGHEST_PROTOCOL)


def _fold(fn, zero, it):
    """A partition's fold from the zero value, as one pickled record."""
    # A copy per partition, as the zero may be mutable (a list, say).
    yield pickle.dumps(functools.reduce(fn, it, copy.deepcopy(zero)),
                       pickle.HIGHEST_PROTOCOL)


class Stage:
    """Stateless ops (map, filter, flat_map): each batch on its own."""

    def __init__(self, ops):
        self.ops = ops

    def push(self, batch):
        return list(_compose(self.ops, batch))

    def more(self):
        return None

    def finish(self):
        return []

    def close(self):
        _flush()


class PullStage:
    """Ops that see the whole partition (map_partitions, reduce, fold).
    Their function pulls from an iterator while the chain pushes batches,
    so it runs on a thread of its own; the two take turns, never run at
    once: push() and more() return a list when the function wants more
    input or has made BATCH records; more() returns None when it wants
    input, and both return False once it has ended (the chain then stops
    reading the partition).

    The first batch is held back: a partition that fits in it (the chain
    hands over a batch when it is full, or at the end) has all its input
    at finish(), and the function then runs on the worker's own thread,
    as a plain iterator drained BATCH records at a time.  No thread is
    started and no turns are taken: for a one-record partition that was
    most of the task's time."""

    def __init__(self, ops):
        self.ops = ops
        self.held = None        # the first batch, held back
        self.sync = None        # the iterator, when run without a thread
        self.inbox = None
        self.eof = False
        self.out = []
        self.waiting = False    # the function waits for input
        self.done = False
        self.error = None
        self.abandoned = False
        self.to_thread = _thread.allocate_lock()
        self.to_main = _thread.allocate_lock()
        self.to_thread.acquire()
        self.to_main.acquire()
        self.started = False

    def _feed(self):
        while True:
            batch, self.inbox = self.inbox, None
            if batch:
                yield from batch
            elif self.eof:
                return
            else:
                self.waiting = True
                self._turn()

    def _turn(self):
        self.to_main.release()
        self.to_thread.acquire()
        if self.abandoned:
            raise _Abandon()

    def _run(self):
        self.to_thread.acquire()
        try:
            if not self.abandoned:
                for x in _compose(self.ops, self._feed()):
                    self.out.append(x)
                    if len(self.out) >= BATCH:
                        self._turn()
        except _Abandon:
            pass
        except BaseException as e:
            self.error = e
        self.done = True
        self.to_main.release()

    def _resume(self):
        if self.done:
            return False        # the function returned: no more input

        if not self.started:
            self.started = True
            _thread.start_new_thread(self._run, ())
        self.waiting = False
        self.to_thread.release()
        self.to_main.acquire()
        if self.error is not None:
            e, self.error = self.error, None
            raise e
        out, self.out = self.out, []
        return out

    def push(self, batch):
        if not self.started and not self.done:
            if self.held is None:
                self.held = batch
                return None
            batch, self.held = self.held + batch, None
        self.inbox = batch
        return self._resume()

    def _drain(self):
        out = list(itertools.islice(self.sync, BATCH))
        if not out:
            self.sync = None
            self.done = True
            return False
        return out

    def more(self):
        if self.sync is not None:
            return self._drain()
        if self.waiting:
            return None
        return self._resume()

    def finish(self):
        self.eof = True
        if not self.started and not self.done:
            batch, self.held = self.held or [], None
            self.sync = iter(_compose(self.ops, iter(batch)))
            return self._drain() or []
        return self._resume() or []

    def close(self):
        """Unwind a function the task left halfway."""
        self.sync = None
        if self.started and not self.done:
            self.abandoned = True
            self.to_thread.release()
            self.to_main.acquire()
        _flush()


_PULL = ("map_partitions", "reduce", "fold")


def stage(specs):
    """Make a stage from [(kind, fn text, zero text or None), ...]."""
    ops = [(kind, _load(fn), None if zero is None else _load(zero))
           for kind, fn, zero in specs]
    if any(kind in _PULL for kind, _, _ in ops):
        return PullStage(ops)
    return Stage(ops)


def format_error(e):
    """The whole traceback of an exception, as Python prints it."""
    tb = e.__traceback__
    # From the function on: ember_worker's own frames tell the user nothing.
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))
