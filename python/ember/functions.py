"""Python functions in plans: the client's side of the python ops.

A function is pickled here with cloudpickle, with the Python major.minor
it was pickled by, into the plan's ``{"python": {KIND: ...}}`` op
(docs/plans.md).  Only the user's own workers unpickle it: emberd checks
the version and passes the text on.  cloudpickle is needed for these ops
alone; the rest of the package runs on the standard library.
"""

from __future__ import annotations

import base64
import pickle
import sys
import threading
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _pyref

# The Python the functions are pickled by: the workers must run the same
# major.minor, or emberd refuses the plan.
VERSION = "%d.%d" % sys.version_info[:2]

_collecting = threading.local()


def _cloudpickle() -> Any:
    try:
        import cloudpickle  # type: ignore
    except ImportError as e:
        raise ImportError("ember: Python functions in plans need "
                          "cloudpickle (pip install cloudpickle, or "
                          "Debian's python3-cloudpickle)") from e
    # What a broadcast unpickles to in a worker is made by a function of
    # _pyref, which the worker cannot import: send it by value.
    cloudpickle.register_pickle_by_value(_pyref)
    return cloudpickle


def ship_module(module: types.ModuleType) -> None:
    """Send module's functions and classes with the functions that use
    them, by value, instead of naming them for the workers to import: for
    a module of the client's own that the workers cannot import (a file
    beside the script, say).  Modules it imports must be importable
    there."""
    _cloudpickle().register_pickle_by_value(module)


def dumps_bytes(obj: Any) -> Tuple[bytes, List[int]]:
    """obj pickled with cloudpickle, and the ids of the broadcasts of
    Python objects it refers to (the op lists them, so that emberd sends
    them to the workers)."""
    cloudpickle = _cloudpickle()
    ids: List[int] = []
    _collecting.ids = ids
    try:
        data = cloudpickle.dumps(obj, pickle.DEFAULT_PROTOCOL)
    finally:
        _collecting.ids = None
    return data, sorted(set(ids))


def dumps(obj: Any) -> Tuple[str, List[int]]:
    """dumps_bytes, as the base64 text a plan carries."""
    data, ids = dumps_bytes(obj)
    return base64.b64encode(data).decode("ascii"), ids


def python_op(kind: str, fn: Callable, zero: Any = None,
              with_zero: bool = False,
              deterministic: bool = False) -> Dict[str, Any]:
    """The plan op for a function: ``{"python": {kind: ..., "version":
    ...}}``, with fold's ``zero``, the ``broadcasts`` it reads, and
    ``"deterministic": true`` when the caller says it gives the same
    records every time (then emberd may compute a partition again)."""
    if not callable(fn):
        raise TypeError("%s: expected a function, got %r" % (kind, fn))
    text, ids = dumps(fn)
    op: Dict[str, Any] = {kind: text, "version": VERSION}
    if with_zero:
        op["zero"], more = dumps(zero)
        ids = sorted(set(ids) | set(more))
    if ids:
        op["broadcasts"] = ids
    if deterministic:
        op["deterministic"] = True
    return {"python": op}


def note_broadcast(bid: int) -> None:
    """Called as a broadcast is pickled into a function."""
    ids: Optional[List[int]] = getattr(_collecting, "ids", None)
    if ids is not None:
        ids.append(bid)
