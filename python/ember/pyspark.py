"""PySpark's RDD names over ember, so that a program written for PySpark's
core API runs with only its import changed::

    from ember.pyspark import SparkContext

    sc = SparkContext("local[*]", "wordcount")   # master, appName ignored
    counts = (sc.textFile("/data/books/*.txt")
                .flatMap(lambda line: line.split())
                .map(lambda w: w.lower())
                .countByValue())
    sc.stop()

Elements are Python objects, as in PySpark: ``parallelize([1, 2])`` gives
ints, ``range`` ints, ``textFile`` str.  Between functions they stay Python
objects in the worker; an action pickles them in the workers and unpickles
them here.  A method of PySpark's RDD that ember does not have raises
NotImplementedError naming it.
"""

from __future__ import annotations

import base64
import collections
import functools
import importlib.util
import operator
import os
import pickle
import sys
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional,
                    cast)

from . import _pyref
from .dataset import Dataset
from .session import ObjectBroadcast, Session, connect

__all__ = ["SparkContext", "RDD", "Broadcast"]

Broadcast = ObjectBroadcast

# reduceByKey's functions that ember's shuffle runs itself.
_KNOWN_FNS: Dict[Any, str] = {operator.add: "sum", min: "min", max: "max"}

# PySpark's RDD methods that ember does not have.
_MISSING = frozenset("""
aggregate aggregateByKey barrier cache cartesian coalesce cogroup collectAsMap
collectWithJobGroup combineByKey countApprox countApproxDistinct
flatMapValues foldByKey foreachPartition fullOuterJoin
getCheckpointFile getResourceProfile getStorageLevel glom groupBy
groupWith histogram intersection isCheckpointed isEmpty isLocallyCheckpointed
lookup mapPartitionsWithIndex
mapPartitionsWithSplit max mean min partitionBy persist pipe
randomSplit reduceByKeyLocally
repartitionAndSortWithinPartitions rightOuterJoin sample sampleByKey
sampleStdev sampleVariance saveAsHadoopDataset saveAsHadoopFile
saveAsNewAPIHadoopDataset saveAsNewAPIHadoopFile saveAsPickleFile
saveAsSequenceFile setName stats stdev subtract
subtractByKey sum sumApprox takeOrdered takeSample toDF toDebugString top
treeAggregate treeReduce unpersist variance withResources zip
zipWithIndex zipWithUniqueId
""".split())


class RDD:
    """A dataset of Python objects (PySpark's RDD), over an ember Dataset.

    ``objects`` says whether the last op is a Python function, so that
    records may be any Python object: an action then pickles them in the
    workers.  Otherwise they are str, as ember's ops leave them.
    """

    def __init__(self, ctx: SparkContext, ds: Dataset, objects: bool,
                 partitions: Optional[int] = None,
                 back: Optional[Callable[[Any], Any]] = None):
        self.ctx = ctx
        self._raw = ds
        # After a shuffle: what makes an element of each of its records
        # (a pair, a group), as they come here or into a Python op.
        self._back = back
        self._objects = objects or back is not None
        # After a shuffle, its partition count (the plan's is the
        # source's split).
        self._partitions = partitions

    @property
    def _ds(self) -> Dataset:
        """The dataset whose records are the elements."""
        if self._back is None:
            return self._raw
        return self._raw.map(self._back, deterministic=True)

    @_ds.setter
    def _ds(self, ds: Dataset) -> None:
        self._raw = ds
        self._back = None

    def __repr__(self) -> str:
        return "<ember.pyspark.RDD %r>" % (self._ds.plan,)

    def __getattr__(self, name: str) -> Any:
        if name in _MISSING:
            raise NotImplementedError("ember.pyspark: RDD.%s is not "
                                      "implemented" % name)
        raise AttributeError(name)

    def _py(self, ds: Dataset) -> RDD:
        return RDD(self.ctx, ds, True, self._partitions)

    def _out(self) -> Dataset:
        """The dataset whose records come back pickled, if need be."""
        return self._ds.map(_pyref.dumps, deterministic=True) if self._objects else self._ds

    def _records(self, records: Iterable[Any]) -> Iterator[Any]:
        if self._objects:
            return (pickle.loads(r) for r in records)
        return iter(records)

    def _decode(self) -> Optional[bool]:
        return False if self._objects else None

    # Transformations.  Spark recomputes a lost partition from its
    # lineage, so its functions are taken as deterministic: the same here.

    def map(self, f: Callable[[Any], Any],
            preservesPartitioning: bool = False) -> RDD:
        return self._py(self._ds.map(f, deterministic=True))

    def filter(self, f: Callable[[Any], Any]) -> RDD:
        return self._py(self._ds.filter(f, deterministic=True))

    def flatMap(self, f: Callable[[Any], Iterable[Any]],
                preservesPartitioning: bool = False) -> RDD:
        return self._py(self._ds.flat_map(f, deterministic=True))

    def mapPartitions(self, f: Callable[[Iterator[Any]], Iterable[Any]],
                      preservesPartitioning: bool = False) -> RDD:
        return self._py(self._ds.map_partitions(f, deterministic=True))

    def keys(self) -> RDD:
        return self._py(self._ds.map(_pyref.key_of, deterministic=True))

    def values(self) -> RDD:
        return self._py(self._ds.map(_pyref.value_of, deterministic=True))

    def mapValues(self, f: Callable[[Any], Any]) -> RDD:
        return self._py(self._ds.map(functools.partial(_pyref.map_value, f),
                                     deterministic=True))

    def keyBy(self, f: Callable[[Any], Any]) -> RDD:
        return self._py(self._ds.map(functools.partial(_pyref.key_by, f),
                                     deterministic=True))

    # Keyed methods: ember's shuffle (docs/python.md, "Keyed data").
    # Each element leaves the Python ops as a pair of bytes (_pyref.enc:
    # a str as its UTF-8, a number so that it sorts as a number, any other
    # object pickled).  What the shuffle gives becomes elements again here
    # for an action, or in the workers before a function.

    def _map(self, f: Callable[[Any], Any]) -> Dataset:
        return self._ds.map(f, deterministic=True)

    def _shuffled(self, ds: Dataset, back: Callable[[Any], Any],
                  partitions: Optional[int]) -> RDD:
        """The RDD of a shuffle's output, each record made an element by
        back."""
        return RDD(self.ctx, ds, True, partitions or
                   self.getNumPartitions(), back)

    def reduceByKey(self, func: Callable[[Any, Any], Any],
                    numPartitions: Optional[int] = None,
                    partitionFunc: Any = None) -> RDD:
        """operator.add, min and max of numbers run in ember's shuffle
        (with a combine on the map side, in C).  Any other function runs
        as Spark runs it: each partition's values of a key are combined
        first, then the partial results are grouped by key and folded."""
        fn = _KNOWN_FNS.get(func)
        if fn is None:
            combined = self.mapPartitions(
                functools.partial(_pyref.combine_pairs, func))
            return combined.groupByKey(numPartitions).mapValues(
                functools.partial(_pyref.fold_values, func))
        ds = self._map(_pyref.num_pair_out).reduce_by_key(
            fn, partitions=numPartitions)
        return self._shuffled(ds, _pyref.num_pair_in, numPartitions)

    def groupByKey(self, numPartitions: Optional[int] = None,
                   partitionFunc: Any = None) -> RDD:
        """(k, [values]): the values as a list, in input order."""
        ds = self._map(_pyref.pair_out).group_by_key(
            partitions=numPartitions)
        return self._shuffled(ds, _pyref.group_in, numPartitions)

    def sortBy(self, keyfunc: Callable[[Any], Any], ascending: bool = True,
               numPartitions: Optional[int] = None) -> RDD:
        """Sorted by keyfunc's keys: str keys as Python orders them,
        numbers as numbers (ints past 2**53 by their nearest float);
        other keys group together, in an order of their own."""
        ds = self._map(functools.partial(_pyref.keyed_out, keyfunc))
        ds = ds.sort_by(descending=not ascending,
                        partitions=numPartitions).values()
        return self._shuffled(ds, _pyref.dec, numPartitions)

    def sortByKey(self, ascending: bool = True,
                  numPartitions: Optional[int] = None,
                  keyfunc: Callable[[Any], Any] = lambda x: x) -> RDD:
        return self.sortBy(functools.partial(_pyref.key_first, keyfunc),
                           ascending, numPartitions)

    def _join(self, other: RDD, how: str,
              numPartitions: Optional[int]) -> RDD:
        ds = self._map(_pyref.pair_out).join(
            other._map(_pyref.pair_out), how, partitions=numPartitions)
        return self._shuffled(ds, _pyref.join_in, numPartitions or max(
            self.getNumPartitions(), other.getNumPartitions()))

    def join(self, other: RDD, numPartitions: Optional[int] = None) -> RDD:
        return self._join(other, "inner", numPartitions)

    def leftOuterJoin(self, other: RDD,
                      numPartitions: Optional[int] = None) -> RDD:
        return self._join(other, "left", numPartitions)

    def distinct(self, numPartitions: Optional[int] = None) -> RDD:
        if not self._objects:
            return RDD(self.ctx, self._ds.distinct(partitions=numPartitions),
                       False, numPartitions or self.getNumPartitions())
        ds = self._map(_pyref.enc).distinct(partitions=numPartitions)
        return self._shuffled(ds, _pyref.dec, numPartitions)

    def repartition(self, numPartitions: int) -> RDD:
        if not self._objects:
            return RDD(self.ctx, self._ds.repartition(numPartitions), False,
                       numPartitions)
        ds = self._map(_pyref.dumps).repartition(numPartitions)
        return self._shuffled(ds, _pyref.loads, numPartitions)

    def union(self, other: RDD) -> RDD:
        n = self.getNumPartitions() + other.getNumPartitions()
        if not self._objects and not other._objects:
            return RDD(self.ctx, self._ds.union(other._ds), False, n)
        ds = self._map(_pyref.dumps).union(other._map(_pyref.dumps))
        return self._shuffled(ds, _pyref.loads, n)

    # Actions.

    def collect(self) -> List[Any]:
        if self._back is not None:
            return [self._back(r) for r in self._raw.collect(decode=False)]
        return list(self._records(self._out().collect(
            decode=self._decode())))

    def count(self) -> int:
        if not self._objects or self._back is not None:
            return self._raw.count()
        # Each element leaves Python as a null record, whatever it is,
        # and emberd counts them: no stream of partial counts.
        return self._ds.map(_pyref.nothing, deterministic=True).count()

    def take(self, num: int) -> List[Any]:
        if self._back is not None:
            return [self._back(r) for r in self._raw.take(num,
                                                          decode=False)]
        return list(self._records(self._out().take(
            num, decode=self._decode())))

    def first(self) -> Any:
        got = self.take(1)
        if not got:
            raise ValueError("RDD is empty")
        return got[0]

    def reduce(self, f: Callable[[Any, Any], Any]) -> Any:
        return self._ds.reduce(f)

    def fold(self, zeroValue: Any, op: Callable[[Any, Any], Any]) -> Any:
        return self._ds.fold(zeroValue, op)

    def foreach(self, f: Callable[[Any], None]) -> None:
        """f of each element, run in the workers, as PySpark does."""
        self._ds.map_partitions(functools.partial(
            _pyref.run_foreach, f), deterministic=True).count()

    def toLocalIterator(self, prefetchPartitions: bool = False
                        ) -> Iterator[Any]:
        if self._back is not None:
            return map(self._back, self._raw.to_local_iterator(
                1 if prefetchPartitions else 0, decode=False))
        return self._records(self._out().to_local_iterator(
            1 if prefetchPartitions else 0, decode=self._decode()))

    def countByValue(self) -> Dict[Any, int]:
        out: Dict[Any, int] = collections.defaultdict(int)
        if not self._objects:
            out.update(self._ds.count_by_value())
            return out
        for r in self._ds.map_partitions(_pyref.counts,
                                             deterministic=True).collect(
                decode=False):
            for k, n in pickle.loads(cast(bytes, r)).items():
                out[k] += n
        return out

    def countByKey(self) -> Dict[Any, int]:
        return self.keys().countByValue()

    def saveAsTextFile(self, path: str,
                       compressionCodecClass: Optional[str] = None) -> None:
        if compressionCodecClass is not None:
            raise NotImplementedError("ember.pyspark: saveAsTextFile "
                                      "with compressionCodecClass")
        ds = self._ds.map(_pyref.text, deterministic=True) if self._objects else self._ds
        ds.save(path)

    def _checkpoint(self, local: bool) -> None:
        cp = self._out().checkpoint(local=local, eager=False)
        self._ds = cp.map(_pyref.loads, deterministic=True) if self._objects else cp

    def checkpoint(self) -> None:
        """Checkpoint (reliable, under emberd's checkpoint.dir), written
        by the next action and read by every later one."""
        self._checkpoint(False)

    def localCheckpoint(self) -> None:
        """Checkpoint into emberd's local directory, for the session."""
        self._checkpoint(True)

    def getNumPartitions(self) -> int:
        if self._partitions is not None:
            return self._partitions
        return self._raw.plan["partitions"]


class SparkContext:
    """A session of emberd under PySpark's name.  ``master`` and
    ``appName`` are accepted and ignored; ``socket`` is emberd's (by
    default ``$EMBER_SOCKET``, else the system one)."""

    _active: Optional[SparkContext] = None

    def __init__(self, master: Optional[str] = None,
                 appName: Optional[str] = None, conf: Any = None, *,
                 socket: Optional[str] = None):
        self.master = master
        self.appName = appName
        self.session: Session = connect(socket)
        self.defaultParallelism = os.cpu_count() or 2
        SparkContext._active = self

    @classmethod
    def getOrCreate(cls, conf: Any = None) -> SparkContext:
        if cls._active is None:
            return cls(conf=conf)
        return cls._active

    def __enter__(self) -> SparkContext:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            raise NotImplementedError("ember.pyspark: SparkContext.%s is "
                                      "not implemented" % name)
        raise AttributeError(name)

    def parallelize(self, c: Iterable[Any],
                    numSlices: Optional[int] = None) -> RDD:
        """The elements of c; any picklable objects (str and None go as
        they are, others pickled into the plan)."""
        items = list(c)
        n = numSlices or self.defaultParallelism
        if all(x is None or isinstance(x, str) for x in items):
            return RDD(self, self.session.parallelize(items, partitions=n),
                       False)
        records = [base64.b64encode(pickle.dumps(x)).decode("ascii")
                   for x in items]
        ds = self.session.parallelize(records, partitions=n)
        return RDD(self, ds.map(_pyref.b64_loads, deterministic=True),
                   True)

    def range(self, start: int, end: Optional[int] = None, step: int = 1,
              numSlices: Optional[int] = None) -> RDD:
        """ints, as PySpark's range."""
        ds = self.session.range(start, end, step,
                                partitions=numSlices or
                                self.defaultParallelism)
        return RDD(self, ds.map(int, deterministic=True), True)

    def textFile(self, name: str, minPartitions: Optional[int] = None,
                 use_unicode: bool = True) -> RDD:
        """The lines of the files (globs and comma-separated paths)."""
        n = minPartitions or min(self.defaultParallelism, 2)
        paths = name.split(",") if isinstance(name, str) else name
        return RDD(self, self.session.text_file(paths, partitions=n), False)

    def broadcast(self, value: Any) -> ObjectBroadcast:
        """value pickled once; ``b.value`` in a function is unpickled at
        most once per worker."""
        b = self.session.broadcast_object(value)
        b.unpersist = b.destroy = b.drop	# type: ignore[attr-defined]
        return b

    def addPyFile(self, path: str) -> None:
        """Import the module of a .py file here and send its functions
        and classes by value with the functions that use them: the
        workers need not have the file.  (A .zip or .egg is not taken.)"""
        if not path.endswith(".py"):
            raise NotImplementedError("ember.pyspark: addPyFile of %r: "
                                      "only .py files" % path)
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError("addPyFile: cannot load %s" % path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        self.session.ship_module(module)

    def setCheckpointDir(self, dirName: str) -> None:
        """Accepted and ignored: reliable checkpoints go to emberd's
        checkpoint.dir."""

    def stop(self) -> None:
        self.session.close()
        if SparkContext._active is self:
            SparkContext._active = None
