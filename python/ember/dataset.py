"""Datasets: plans built lazily, op by op, run by their actions."""

from __future__ import annotations

import copy
import functools
import itertools
import operator
import pickle
import os
from collections import Counter
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, Dict, Generator, Iterable,
                    Iterator, List, Optional, Tuple, Union, cast)

from . import _pyref, functions
from .errors import EmberError, ProtocolError, TaskFailed
from ._stream import Records
from .session import _Held

if TYPE_CHECKING:
    from ._stream import ResultStream
    from .session import Broadcast, Session

Plain = Union[str, bytes, None]
# A plain record, a pair (key, value), a group (key, [values]) or a join's
# (key, (v, w)).
Record = Union[Plain, Tuple[Any, Any]]
Number = Union[int, float]
Converter = Callable[[List[Any]], List[Record]]
Pick = Union[None, str, Tuple[Union[str, bytes], int], Dict[str, Any]]

# The functions reduce_by_key knows by name (docs/plans.md,
# reduce_by_key), and the Python ones that mean the same.
KV_FNS = ("sum", "min", "max", "count", "concat")
_KNOWN_FNS = {operator.add: "sum", min: "min", max: "max"}

# Ops that pass a record on as it is, of whatever kind.
_KIND_KEEPING = ("limit", "sample")


def text_of(value: Union[str, bytes], what: str) -> str:
    """value as the JSON string a plan carries: str, or UTF-8 bytes."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError("%s: plans carry text; %r is not UTF-8"
                             % (what, value)) from e
    if not isinstance(value, str):
        raise TypeError("%s: expected str or bytes, got %r" % (what, value))
    return value


def _broadcast_id(b: Union[Broadcast, int]) -> int:
    bid = getattr(b, "id", b)
    if not isinstance(bid, int) or isinstance(bid, bool):
        raise TypeError("expected a Broadcast or its id, got %r" % (b,))
    return bid


@dataclass(frozen=True)
class SaveResult:
    """What a save wrote: ``files`` part files holding ``records``
    records, under ``path``."""

    path: str
    files: int
    records: int


class Dataset:
    """A lazy dataset: a source, a partition count and operations.

    Nothing runs until an action (count, collect, to_local_iterator, ...).
    Each op returns a new Dataset and leaves this one as it was; ``plan``
    is the JSON plan of docs/plans.md, as a dict.
    """

    def __init__(self, session: Session, source: dict,
                 partitions: Optional[int] = None, ops: Tuple = ()):
        if partitions is not None and (not isinstance(partitions, int) or
                                       isinstance(partitions, bool)):
            raise TypeError("partitions: expected an int, got %r"
                            % (partitions,))
        self.session = session
        self._source = source
        self._partitions = partitions
        self._ops = tuple(ops)

    @property
    def plan(self) -> dict:
        """The plan sent to emberd (a fresh copy: changing it changes
        nothing here)."""
        plan: Dict[str, Any] = {"source": copy.deepcopy(self._source)}
        if self._partitions is not None:
            plan["partitions"] = self._partitions
        if self._ops:
            plan["ops"] = copy.deepcopy(list(self._ops))
        return plan

    def __repr__(self) -> str:
        return "<ember.Dataset %r>" % (self.plan,)

    def _with(self, op: dict) -> Dataset:
        return Dataset(self.session, self._source, self._partitions,
                       self._ops + (op,))

    def _shuffled(self, name: str, args: Dict[str, Any],
                  partitions: Optional[int]) -> Dataset:
        """A wide op (docs/plans.md, "Keyed data and the shuffle"), with
        its partition count when given."""
        if partitions is not None:
            if not isinstance(partitions, int) or \
                    isinstance(partitions, bool) or partitions < 1:
                raise ValueError("%s: partitions: expected an int >= 1, "
                                 "got %r" % (name, partitions))
            args["partitions"] = partitions
        return self._with({name: args})

    def _other_plan(self, other: Dataset, what: str) -> dict:
        """other's plan, to embed in a join or a union."""
        if not isinstance(other, Dataset):
            raise TypeError("%s: expected a Dataset, got %r" % (what, other))
        if other.session is not self.session:
            raise ValueError("%s: the other dataset is of another session"
                             % what)
        return other.plan

    def _joined(self) -> bool:
        """Whether the records are a join's groups of [v, w]."""
        for op in reversed(self._ops):
            name = next(iter(op)) if isinstance(op, dict) else op
            if name not in _KIND_KEEPING:
                return name == "join"
        return False

    def with_partitions(self, partitions: int) -> Dataset:
        """The same plan split into another number of partitions."""
        return Dataset(self.session, self._source, partitions, self._ops)

    # Ops (docs/plans.md, "Operations").

    def filter_contains(self, substring: Union[str, bytes]) -> Dataset:
        """Keep the records holding substring."""
        return self._with({"filter": {"contains": text_of(
            substring, "filter_contains")}})

    def filter_regex(self, pattern: Union[str, bytes]) -> Dataset:
        """Keep the records the PCRE2 pattern matches anywhere."""
        return self._with({"filter": {"regex": text_of(
            pattern, "filter_regex")}})

    def filter_in(self, broadcast: Union[Broadcast, int]) -> Dataset:
        """Keep the records that are one of the broadcast's lines."""
        return self._with({"filter": {"in_broadcast":
                                      _broadcast_id(broadcast)}})

    def map_upper(self) -> Dataset:
        """Unicode upper case, as str.upper ("straße" -> "STRASSE");
        bytes that are not UTF-8 pass through."""
        return self._with({"map": "upper"})

    def map_lower(self) -> Dataset:
        """Unicode lower case, as str.lower; bytes that are not UTF-8
        pass through."""
        return self._with({"map": "lower"})

    def map_trim(self) -> Dataset:
        """Remove ASCII whitespace at both ends."""
        return self._with({"map": "trim"})

    def map_field(self, sep: Union[str, bytes], index: int) -> Dataset:
        """The index-th field (negative: from the end) of the record split
        by sep; a missing field is an empty record."""
        return self._with({"map": {"field": {
            "sep": text_of(sep, "map_field sep"), "index": index}}})

    def map_json(self, path: str) -> Dataset:
        """The value at a dotted path of a JSON record; records without
        one are dropped."""
        return self._with({"map": {"json": text_of(path, "map_json")}})

    def flat_map_split(self, sep: Union[str, bytes]) -> Dataset:
        """Each piece of the record split by sep, as str.split(sep)."""
        return self._with({"flat_map": {"split": text_of(
            sep, "flat_map_split")}})

    def sample(self, fraction: float, seed: int = 0) -> Dataset:
        """Keep each record with probability fraction; deterministic per
        partition and seed."""
        return self._with({"sample": {"fraction": fraction, "seed": seed}})

    def limit(self, n: int) -> Dataset:
        """The first n records of each partition."""
        return self._with({"limit": n})

    def pipe(self, command: str) -> Dataset:
        """Each partition through ``/bin/sh -c command``, one record per
        line each way."""
        return self._with({"pipe": {"command": text_of(command, "pipe")}})

    def udf(self, library: Union[str, os.PathLike], symbol: str,
            broadcasts: Tuple = (), **args: Any) -> Dataset:
        """A function of a plugin (docs/udf.md).  args become the op's
        ``args`` object; a Broadcast among them is given as its id and
        added to ``broadcasts``, the broadcasts the function reads."""
        ids = [_broadcast_id(b) for b in broadcasts]
        plain = {}
        for k, v in args.items():
            if hasattr(v, "id") and hasattr(v, "drop"):
                v = _broadcast_id(v)
                if v not in ids:
                    ids.append(v)
            plain[k] = v
        op: Dict[str, Any] = {"library": os.path.abspath(os.fspath(library)),
                              "symbol": symbol, "args": plain}
        if ids:
            op["broadcasts"] = ids
        return self._with({"udf": op})

    # Keyed data (docs/python.md, "Keyed data").  Records may be pairs,
    # a key and a value, and groups, a key and a list of values; they come
    # back as (key, value) and (key, [values]) tuples.  The wide ops split
    # the plan into stages at a shuffle; partitions= is how many
    # partitions they give (by default, as many as their input has).

    def key_by(self, field: Pick = None, *, regex: Union[str, bytes,
                                                          None] = None,
               group: int = 0, value: Pick = None) -> Dataset:
        """Pairs: the key is the record (by default), its field (field=
        (sep, index), as map_field picks it) or a capture group of regex;
        the value is the record, value=(sep, index) its field, or
        value={"regex": p, "group": g} a capture group.  A record without
        the field or a match is dropped."""
        if field is not None and regex is not None:
            raise ValueError("key_by: field= or regex=, not both")
        args: Dict[str, Any] = {}
        if field is not None:
            args["field"] = _field(field, "key_by field")
        elif regex is not None:
            args["regex"] = text_of(regex, "key_by regex")
            if group:
                args["group"] = group
        if isinstance(value, dict) and "regex" in value:
            args["value"] = dict(value)
        elif value is not None and value != "record":
            args["value"] = {"field": _field(value, "key_by value")}
        return self._with({"key_by": args})

    def keys(self) -> Dataset:
        """The key of each pair or group, as a plain record."""
        return self._with({"map": "key"})

    def values(self) -> Dataset:
        """The value of each pair, as a plain record."""
        return self._with({"map": "value"})

    def reduce_by_key(self, fn: Union[str, Callable[[Any, Any], Any]], *,
                      sep: Union[str, bytes] = "",
                      partitions: Optional[int] = None) -> Dataset:
        """One pair per key, its values folded by fn: "sum", "min", "max"
        (numbers, as reduce reads them), "count" (how many) or "concat"
        (joined by sep, in input order).  operator.add, min and max mean
        sum, min and max, folded in C on both sides of the shuffle.  Any
        other function folds the values as Python gives them (str or
        bytes) in Python: first each partition's values of a key, then,
        after a group_by_key, the partial results."""
        if callable(fn) and _KNOWN_FNS.get(fn) is None:
            return self.map_partitions(
                functools.partial(_pyref.combine_pairs, fn),
                deterministic=True).group_by_key(
                    partitions=partitions).map(
                        functools.partial(_pyref.fold_group, fn),
                        deterministic=True)
        name = _kv_fn(fn)
        args: Dict[str, Any] = {"fn": name}
        if name == "concat" and sep:
            args["sep"] = text_of(sep, "reduce_by_key sep")
        return self._shuffled("reduce_by_key", args, partitions)

    def group_by_key(self, *, partitions: Optional[int] = None) -> Dataset:
        """One group per key: (key, [values]), the values in input
        order."""
        return self._shuffled("group_by_key", {}, partitions)

    def distinct(self, *, partitions: Optional[int] = None) -> Dataset:
        """Each distinct record (or whole pair) once."""
        return self._shuffled("distinct", {}, partitions)

    def sort_by(self, *, descending: bool = False, numeric: bool = False,
                partitions: Optional[int] = None) -> Dataset:
        """Sorted, stably: pairs by key, plain records by themselves, as
        bytes or, numeric, as numbers.  Partition 0 holds the smallest
        (largest when descending): in partition order, one sorted
        stream."""
        args: Dict[str, Any] = {}
        if descending:
            args["descending"] = True
        if numeric:
            args["numeric"] = True
        return self._shuffled("sort_by", args, partitions)

    def sort_by_key(self, *, descending: bool = False,
                    numeric: bool = False,
                    partitions: Optional[int] = None) -> Dataset:
        """sort_by of pairs: by their keys."""
        return self.sort_by(descending=descending, numeric=numeric,
                            partitions=partitions)

    def repartition(self, partitions: int) -> Dataset:
        """The same records in partitions partitions, dealt round
        robin."""
        return self._shuffled("repartition", {}, partitions)

    def join(self, other: Dataset, how: str = "inner", *,
             partitions: Optional[int] = None) -> Dataset:
        """Pairs of this and other by key: (key, (v, w)) for each v of
        this and w of other with that key.  how="left" keeps the keys
        other lacks, with w None."""
        if how not in ("inner", "left"):
            raise ValueError("join: how: \"inner\" or \"left\", got %r"
                             % (how,))
        args: Dict[str, Any] = {"plan": self._other_plan(other, "join")}
        if how != "inner":
            args["how"] = how
        return self._shuffled("join", args, partitions)

    def left_outer_join(self, other: Dataset, *,
                        partitions: Optional[int] = None) -> Dataset:
        """join(other, how="left")."""
        return self.join(other, "left", partitions=partitions)

    def union(self, other: Dataset) -> Dataset:
        """The records of this dataset, then other's (of the same kind);
        as many partitions as both have."""
        return self._with({"union": {"plan": self._other_plan(other,
                                                                "union")}})

    # Python functions (docs/python.md, "Python functions").  Records
    # enter a function as str (None for a null); what leaves the last of
    # consecutive python ops must be str, bytes, None, int or float.

    # deterministic=True says fn gives the same records every time for
    # the same input: then emberd may compute a partition again (a
    # reattach past the retry buffer, a task whose worker was lost).

    def map(self, fn: Callable[[Any], Any], *,
            deterministic: bool = False) -> Dataset:
        """fn of each record."""
        return self._with(functions.python_op(
            "map", fn, deterministic=deterministic))

    def filter(self, fn: Callable[[Any], Any], *,
               deterministic: bool = False) -> Dataset:
        """The records for which fn is true."""
        return self._with(functions.python_op(
            "filter", fn, deterministic=deterministic))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], *,
                 deterministic: bool = False) -> Dataset:
        """Each element of the iterable fn gives for each record."""
        return self._with(functions.python_op(
            "flat_map", fn, deterministic=deterministic))

    def map_partitions(self, fn: Callable[[Iterator[Any]], Iterable[Any]],
                       *, deterministic: bool = False) -> Dataset:
        """What fn makes of an iterator over a whole partition: an
        iterable, consumed as the partition streams."""
        return self._with(functions.python_op(
            "map_partitions", fn, deterministic=deterministic))

    def fold(self, zero: Any, fn: Callable[[Any, Any], Any]) -> Any:
        """Fold each partition from a copy of zero with fn in the workers,
        then the partitions' results from zero again here, as PySpark's
        fold."""
        partials = self._with(functions.python_op(
            "fold", fn, zero, with_zero=True)).collect(decode=False)
        return functools.reduce(fn, _unpickled(partials), zero)

    # Actions.

    def _stream(self, action: str, options: Optional[dict],
                decode: Optional[bool], errors: Optional[str]
                ) -> Tuple[ResultStream, Optional[Converter]]:
        """The stream of action, and what turns its batches into what the
        caller asked for (None when they come so: bytes, or str that the
        stream decodes as it reads, the plain records' fast path)."""
        stream = self.session.stream(self.plan, action, options)
        if self._joined():
            return stream, self._decoding(decode, errors)
        if self.session.decode if decode is None else decode:
            stream.text = self.session.errors if errors is None else errors
        return stream, None

    def _decoding(self, decode: Optional[bool], errors: Optional[str]
                  ) -> Optional[Converter]:
        """What turns a batch of raw records into what the caller asked
        for: None when bytes, as they come.  (Plain records are decoded
        by the stream itself: _stream uses this for joins.)"""
        decode = self.session.decode if decode is None else decode
        how = self.session.errors if errors is None else errors
        joined = self._joined()
        if not decode and not joined:
            return None

        def text(r: Optional[bytes]) -> Optional[str]:
            return r.decode("utf-8", how) if r is not None else None

        def keyed(r: Any) -> Record:
            key, value = r
            if decode:
                key = text(key)
                value = text(value) if not isinstance(value, list) \
                    else [text(v) for v in value]
            if joined and isinstance(value, list) and len(value) == 2:
                value = tuple(value)
            return (key, value)

        def convert(rs: List[Any]) -> List[Record]:
            return [keyed(r) if isinstance(r, tuple)
                    else (text(r) if decode else r) for r in rs]
        return convert

    def count(self) -> int:
        """The number of records."""
        reply = self.session.execute(self.plan, "count")
        n = reply.get("count")
        if not isinstance(n, int):
            raise ProtocolError("count reply without count: %r" % (reply,))
        return n

    def collect(self, *, decode: Optional[bool] = None,
                errors: Optional[str] = None) -> List[Record]:
        """Every record, in order (emberd pushes every partition).  A
        failed task raises TaskFailed, its ``records`` holding what came
        before."""
        stream, convert = self._stream("collect", None, decode, errors)
        out: List[Record] = []
        try:
            for batch in stream.batches():
                if convert is None:
                    out.extend(batch)
                else:
                    out.extend(convert(batch))
        except TaskFailed as e:
            e.records = out
            raise
        return out

    def to_local_iterator(self, prefetch: Optional[int] = None, *,
                          decode: Optional[bool] = None,
                          errors: Optional[str] = None
                          ) -> Records:
        """The records, one partition at a time: a partition is asked for
        when the one before is consumed, and prefetch partitions are
        computed ahead meanwhile (by default emberd's choice: one per
        worker, fewer for large partitions; 0 for none).

        Breaking out of the loop, or closing the iterator, stops the
        operation at once (emberd ends the partition being read and stops
        the tasks where they are).  A failed task raises
        TaskFailed after the records before it.  A reattachable operation
        whose connection breaks resumes right after the last record
        yielded.
        """
        return self._iterator({} if prefetch is None else
                              {"prefetch": prefetch}, decode, errors)

    def to_local_batches(self, prefetch: Optional[int] = None, *,
                         decode: Optional[bool] = None,
                         errors: Optional[str] = None
                         ) -> Iterator[List[Record]]:
        """The records of to_local_iterator, a list at a time as they
        arrive (each from one partition; none empty), for a caller that
        handles them in bulk.  Taking a list counts all its records as
        read: a reattach resumes after them."""
        stream, convert = self._stream("iterate", None if prefetch is None
                                       else {"prefetch": prefetch},
                                       decode, errors)
        batches = _batches(stream, convert)
        next(batches)		# started: closing it now stops the stream
        return cast(Iterator[List[Record]], batches)

    def _iterator(self, options: dict, decode: Optional[bool],
                  errors: Optional[str]) -> Records:
        """The records of an iterate with these options."""
        stream, convert = self._stream("iterate", options or None, decode,
                                       errors)
        return Records.of(stream, convert)

    def __iter__(self) -> Iterator[Record]:
        return self.to_local_iterator()

    def take(self, n: int, prefetch: Optional[int] = None, *,
             decode: Optional[bool] = None,
             errors: Optional[str] = None) -> List[Record]:
        """The first n records (stopping the operation after them: emberd
        is told the limit, and stops the tasks once it has sent them)."""
        if n <= 0:
            return []
        options: dict = {"limit": n}
        if prefetch is not None:
            options["prefetch"] = prefetch
        it = self._iterator(options, decode, errors)
        try:
            return list(itertools.islice(it, n))
        finally:
            it.close()

    def first(self, **kw: Any) -> Record:
        """The first record; ValueError if there is none."""
        got = self.take(1, **kw)
        if not got:
            raise ValueError("first: the dataset is empty")
        return got[0]

    def count_by_value(self, *, decode: Optional[bool] = None
                       ) -> Counter[Record]:
        """Each distinct record with its count, as a Counter (None counts
        the nulls).  emberd merges the counts as text: bytes that are not
        UTF-8 come back as U+FFFD; with decode=False the keys are that
        text's UTF-8 bytes."""
        reply = self.session.execute(self.plan, "count_by_value")
        counts = reply.get("counts")
        if not isinstance(counts, dict):
            raise ProtocolError("count_by_value reply without counts: %r"
                                % (reply,))
        pairs = reply.get("pairs", [])
        if not isinstance(pairs, list) or not all(
                isinstance(p, list) and len(p) == 2 and
                isinstance(p[0], str) and isinstance(p[1], int)
                for p in pairs):
            raise ProtocolError("count_by_value reply with bad pairs: %r"
                                % (reply,))
        decode = self.session.decode if decode is None else decode
        c: Counter[Record] = Counter(
            counts if decode else {k.encode("utf-8"): v
                                   for k, v in counts.items()})
        # Records holding a NUL byte come as [record, count] pairs.
        for record, n in pairs:
            c[record if decode else record.encode("utf-8")] += n
        nulls = reply.get("nulls") or 0
        if nulls:
            c[None] = nulls
        return c

    def reduce(self, fn: Union[str, Callable[[Any, Any], Any]]) -> Any:
        """Reduce the records, each a number, with "sum", "min" or "max":
        an int while exact, else a float; None when there is no record.
        With a function of two records: each partition is reduced in the
        workers, the partitions' results here (ValueError when there is
        no record)."""
        if callable(fn):
            partials = self._with(functions.python_op(
                "reduce", fn)).collect(decode=False)
            if not partials:
                raise ValueError("reduce: the dataset is empty")
            return functools.reduce(fn, _unpickled(partials))
        reply = self.session.execute(self.plan, "reduce", {"fn": fn})
        if "value" not in reply:
            raise ProtocolError("reduce reply without value: %r" % (reply,))
        return reply["value"]

    def sum(self) -> Number:
        """reduce("sum"), 0 when empty."""
        v = self.reduce("sum")
        return 0 if v is None else v

    def min(self) -> Optional[Number]:
        """reduce("min")."""
        return self.reduce("min")

    def max(self) -> Optional[Number]:
        """reduce("max")."""
        return self.reduce("max")

    def save(self, path: Union[str, os.PathLike],
             overwrite: bool = False) -> SaveResult:
        """Write one part file per partition under path (made absolute),
        committed with a _SUCCESS marker once all are written."""
        path = os.path.abspath(os.fspath(path))
        try:
            reply = self.session.execute(self.plan, "save",
                                         {"path": path,
                                          "overwrite": overwrite})
        except EmberError as e:
            # emberd names the protocol's option; here it is an argument.
            e.message = e.message.replace("set options.overwrite",
                                          "pass overwrite=True")
            e.args = (e.message,)
            raise
        return SaveResult(path, reply.get("files", 0),
                          reply.get("records", 0))

    def checkpoint(self, local: bool = False,
                   eager: bool = True) -> Checkpoint:
        """Materialize the dataset: a Checkpoint, a dataset whose source is
        the written records, so that what is built on it never runs this
        plan again.

        eager: compute and write every partition now (the call returns
        once all of it is written); eager=False returns at once, and the
        first action that reads the checkpoint writes it.  local: kept in
        emberd's local directory and removed with the session; otherwise
        reliable: written under emberd's checkpoint.dir, it belongs to the
        uid, survives the session and emberd's restarts, and stays until
        dropped.
        """
        for name, value in (("local", local), ("eager", eager)):
            if not isinstance(value, bool):
                raise TypeError("checkpoint %s: expected a bool, got %r"
                                % (name, value))
        reply = self.session.execute(self.plan, "checkpoint",
                                     {"local": local, "eager": eager})
        cid = reply.get("checkpoint")
        if not isinstance(cid, str):
            raise ProtocolError("checkpoint reply without checkpoint: %r"
                                % (reply,))
        cp = Checkpoint(self.session, cid, local=local, eager=eager,
                        partitions=reply.get("partitions"),
                        records=reply.get("records"),
                        size=reply.get("bytes"))
        self.session._checkpoints.append(cp)
        return cp


class Checkpoint(Dataset, _Held):
    """A dataset whose source is a checkpoint (``{"checkpoint": id}``).

    ``id`` names it: give it to Session.from_checkpoint in a later session
    to read a reliable one again.  ``local`` and ``eager`` are as it was
    made; ``partitions`` its partition count, and ``records`` and ``size``
    (bytes) what an eager one holds (0 for a lazy one, None when unknown).
    Its plan leaves the partition count out: it is the checkpoint's.
    ``drop()``, or leaving it as a context manager, removes it (a read
    under way finishes first; later plans and a second drop raise
    CheckpointNotFound); closing the session removes a local one.
    """

    _kind = "checkpoint"

    def __init__(self, session: Session, cid: str, *, local: bool = False,
                 eager: bool = True, partitions: Optional[int] = None,
                 records: Optional[int] = None, size: Optional[int] = None):
        Dataset.__init__(self, session, {"checkpoint": cid})
        self.id = cid
        self.local = local
        self.eager = eager
        self.partitions = partitions
        self.records = records
        self.size = size
        self.dropped = False

    def __repr__(self) -> str:
        return "<ember.Checkpoint %s (%s)%s>" % (
            self.id, "local" if self.local else "reliable",
            " dropped" if self.dropped else "")


def _field(pick: Pick, what: str) -> Dict[str, Any]:
    """A field pick: (sep, index), or {"sep": s, "index": i}."""
    if isinstance(pick, dict):
        sep, index = pick.get("sep"), pick.get("index", 0)
    elif isinstance(pick, tuple) and len(pick) == 2:
        sep, index = pick
    else:
        raise TypeError("%s: expected (sep, index), got %r" % (what, pick))
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError("%s: index: expected an int, got %r"
                        % (what, index))
    return {"sep": text_of(cast(Union[str, bytes], sep), what + " sep"),
            "index": index}


def _kv_fn(fn: Union[str, Callable[[Any, Any], Any]]) -> str:
    """reduce_by_key's built-in function for fn."""
    if isinstance(fn, str):
        if fn not in KV_FNS:
            raise ValueError("reduce_by_key: fn: one of %s, got %r"
                             % (", ".join(KV_FNS), fn))
        return fn
    name = _KNOWN_FNS.get(fn) if callable(fn) else None
    if name is None:
        raise NotImplementedError(
            "reduce_by_key: %r: only the built-in functions (%s, or "
            "operator.add, min, max) run in the shuffle; a Python "
            "function is not supported yet" % (fn, ", ".join(KV_FNS)))
    return name


def _batches(stream: ResultStream, convert: Optional[Converter]
             ) -> Generator[Optional[List[Record]], None, None]:
    """The lists of stream, after a first None that only starts the
    generator (so that closing it before any list still stops the
    operation)."""
    batches = stream.batches()
    try:
        yield None
        for batch in batches:
            yield (cast(List[Record], batch) if convert is None
                   else convert(batch))
    finally:
        batches.close()
        if not stream.finished:
            stream.stop()


def _unpickled(records: List[Record]) -> Iterator[Any]:
    """The partitions' results of a reduce or fold, pickled by the job's
    own workers (the user's processes, never emberd)."""
    for r in records:
        if not isinstance(r, bytes):
            raise ProtocolError("a partition's result is not bytes: %r"
                                % (r,))
        yield pickle.loads(r)
