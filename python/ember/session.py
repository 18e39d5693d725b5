"""Sessions: connections to emberd, broadcasts, and where datasets start."""

from __future__ import annotations

import codecs
import os
import random
import sys
import tempfile
import uuid
from typing import (IO, TYPE_CHECKING, Any, Iterable, List, Optional,
                    Sequence, Set, TypeVar, Union)

from . import _wire
from ._stream import ReattachPolicy, ResultStream
from ._wire import Wire, path_list
from .errors import (ConnectionFailed, EmberError, ProtocolError,
                     SessionClosed)

if TYPE_CHECKING:
    from .dataset import Checkpoint, Dataset

DEFAULT_SOCKET = "/run/ember/emberd.sock"
SOCKET_ENV = "EMBER_SOCKET"
CLIENT_NAME = "ember-python"
BROADCAST_CHUNK = 1 << 20	# bytes per raw frame of a broadcast upload
MAX_IDLE = 2			# idle connections a session keeps

PathArg = Union[str, os.PathLike]
BroadcastData = Union[bytes, bytearray, memoryview, str, IO, Iterable]


def default_socket() -> str:
    """$EMBER_SOCKET, else the system socket /run/ember/emberd.sock."""
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


def connect(socket: Optional[PathArg] = None, *, decode: bool = True,
            errors: str = "strict", timeout: Optional[float] = None,
            reattach: ReattachPolicy = ReattachPolicy(),
            client: str = CLIENT_NAME) -> Session:
    """Connect to emberd and start a session.

    socket: the path of emberd's socket; by default ``$EMBER_SOCKET``,
    else ``/run/ember/emberd.sock``.  decode and errors: how records come
    back, unless an action says otherwise: ``str`` decoded from UTF-8 with
    that error handler, or ``bytes`` with ``decode=False``.  timeout:
    seconds any single socket read or write may take (None: no limit).
    reattach: how streams reconnect after a broken connection.

    Use the session as a context manager; leaving it closes the session,
    which interrupts its operations and frees its broadcasts.
    """
    return Session(socket, decode=decode, errors=errors, timeout=timeout,
                   reattach=reattach, client=client)


class Session:
    """A session of emberd, bound to this process's uid.

    It owns the operations started through it, its broadcasts and its local
    checkpoints.  It holds one connection at least; an iterator left open
    keeps a connection of its own, and a request made meanwhile opens
    another one into the same session.  A Session is not thread-safe: use
    one per thread.
    """

    def __init__(self, socket: Optional[PathArg] = None, *,
                 decode: bool = True, errors: str = "strict",
                 timeout: Optional[float] = None,
                 reattach: ReattachPolicy = ReattachPolicy(),
                 client: str = CLIENT_NAME):
        codecs.lookup_error(errors)
        self.socket_path: str = (os.fsdecode(os.fspath(socket))
                                 if socket is not None else default_socket())
        self.decode = decode
        self.errors = errors
        self.timeout = timeout
        self.reattach_policy = reattach
        self.client = client
        self.closed = False
        self.id: Optional[str] = None
        self.server: Optional[str] = None
        self._rng = random.Random()
        self._idle: List[Wire] = []
        self._wires: Set[Wire] = set()
        self._checkpoints: List[Checkpoint] = []
        self._release(self._connect())

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<ember.Session %s on %s%s>" % (
            self.id, self.socket_path, " closed" if self.closed else "")

    # Connections.

    def _connect(self, timeout: Optional[float] = None) -> Wire:
        """A new connection past hello, into this session (the first one
        starts it).  timeout, when given, bounds each socket call of the
        connect and hello instead of the session's timeout; the wire keeps
        it."""
        wire = Wire(self.socket_path,
                    self.timeout if timeout is None else timeout)
        try:
            reply = wire.hello(self.id, self.client)
        except BaseException:
            wire.close()
            raise
        if self.id is None:
            self.id = reply.get("session")
            self.server = reply.get("server")
            if not isinstance(self.id, str):
                wire.close()
                raise ProtocolError("hello reply without session: %r"
                                    % (reply,))
        self._wires.add(wire)
        return wire

    def _acquire(self) -> Wire:
        """An idle connection, or a new one."""
        if self.closed:
            raise SessionClosed("the session is closed")
        while self._idle:
            wire = self._idle.pop()
            if not wire.broken:
                return wire
            self._wires.discard(wire)
        return self._connect()

    def _release(self, wire: Optional[Wire]) -> None:
        """Hand back a connection that is between requests."""
        if wire is None:
            return
        if wire.broken or self.closed or len(self._idle) >= MAX_IDLE:
            self._wires.discard(wire)
            wire.close()
            return
        self._idle.append(wire)

    def _forget(self, wire: Wire) -> None:
        self._wires.discard(wire)

    def _discard(self, wire: Wire) -> None:
        """Close a connection in an unknown state (a stream cut short); keep
        another one open first, so that the session outlives it."""
        if not self.closed and not [w for w in self._idle if not w.broken]:
            try:
                self._idle.append(self._connect())
            except EmberError:
                pass
        self._wires.discard(wire)
        wire.close()

    def request(self, req: dict) -> dict:
        """Send one control request (a dict with "op"); its reply.  An
        error reply raises the exception named after its class."""
        wire = self._acquire()
        try:
            reply = wire.request(req)
        except EmberError:
            self._release(wire)
            raise
        except BaseException:
            # Cut off mid-request (Ctrl-C): its reply may still come.
            self._discard(wire)
            raise
        self._release(wire)
        return reply

    def _quiet_request(self, req: dict) -> None:
        """request(), ignoring any failure: for clean-ups."""
        if self.closed:
            return
        try:
            self.request(req)
        except EmberError:
            pass

    def execute(self, plan: dict, action: str,
                options: Optional[dict] = None) -> dict:
        """Execute plan with an action that answers with one reply (count,
        count_by_value, reduce, save, checkpoint); the reply."""
        req = self._execute_request(plan, action, options)
        try:
            return self.request(req)
        except KeyboardInterrupt:
            self._interrupt(req["operation"])
            raise

    @staticmethod
    def _execute_request(plan: dict, action: str,
                         options: Optional[dict]) -> dict:
        """An execute request, with an operation id of the client's own, so
        that the operation can be interrupted before its reply came."""
        req = {"op": "execute", "plan": plan, "action": action,
               "operation": str(uuid.uuid4())}
        if options:
            req["options"] = options
        return req

    def _interrupt(self, operation: str) -> None:
        """The user interrupted the program (Ctrl-C): interrupt the
        operation too, on another connection, so that its workers are
        freed now rather than at its end."""
        self._quiet_request({"op": "interrupt", "operation": operation})

    def stream(self, plan: dict, action: str,
               options: Optional[dict] = None) -> ResultStream:
        """Execute plan with iterate (pull) or collect (push); the open
        result stream."""
        req = self._execute_request(plan, action, options)
        wire = self._acquire()
        try:
            reply = wire.request(req)
        except EmberError:
            self._release(wire)
            raise
        except BaseException:
            self._discard(wire)
            if isinstance(sys.exc_info()[1], KeyboardInterrupt):
                self._interrupt(req["operation"])
            raise
        for key in ("operation", "partitions"):
            if key not in reply:
                wire.close()
                self._wires.discard(wire)
                raise ProtocolError("execute reply without %s: %r" %
                                    (key, reply))
        return ResultStream(self, wire, reply, pull=action == "iterate")

    def status(self) -> dict:
        """emberd's status: workers, pools, sessions, operations,
        counters."""
        return self.request({"op": "status"})

    def close(self) -> None:
        """Close the session: emberd interrupts its operations and frees its
        broadcasts and local checkpoints.  Closing twice does nothing."""
        if self.closed:
            return
        try:
            wire = self._acquire()
            wire.request({"op": "close_session"})
        except EmberError:
            pass
        self.closed = True
        for c in self._checkpoints:
            if c.local:
                c.dropped = True
        for wire in list(self._wires):
            wire.close()
        self._wires.clear()
        self._idle.clear()

    # Datasets.

    def range(self, start: int, end: Optional[int] = None, step: int = 1,
              *, partitions: Optional[int] = None) -> Dataset:
        """The integers from start up to end (excluded) by step, as decimal
        text, like Python's range: ``range(10)`` is 0 to 9.  Partition i
        holds the i-th contiguous slice."""
        from .dataset import Dataset

        if end is None:
            start, end = 0, start
        for name, v in (("start", start), ("end", end), ("step", step)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError("range %s: expected an int, got %r"
                                % (name, v))
        if step == 0:
            raise ValueError("range step must not be zero")
        return Dataset(self, {"range": {"start": start, "end": end,
                                        "step": step}}, partitions)

    def text_file(self, paths: Union[PathArg, Sequence[PathArg]], *,
                  partitions: Optional[int] = None) -> Dataset:
        """The lines of files (one path, or several; globs allowed),
        without their newline.  Relative paths are made absolute here,
        since emberd does not share this process's working directory."""
        from .dataset import Dataset

        return Dataset(self, {"text": {"paths": path_list(paths)}},
                       partitions)

    def parallelize(self, records: Iterable[Union[str, bytes, None]], *,
                    partitions: Optional[int] = None) -> Dataset:
        """The records given (str, UTF-8 bytes, or None for a null),
        carried in the plan itself and split into contiguous slices."""
        from .dataset import Dataset, text_of

        recs = [None if r is None else text_of(r, "parallelize record")
                for r in records]
        return Dataset(self, {"parallelize": {"records": recs}}, partitions)

    def from_checkpoint(self, checkpoint: Union[str, Checkpoint]
                        ) -> Dataset:
        """A dataset reading a checkpoint, given as a Checkpoint or its id
        (a reliable checkpoint made by an earlier session, say).  Its
        partitions are the checkpoint's."""
        from .dataset import Checkpoint, Dataset

        cid = checkpoint.id if isinstance(checkpoint, Checkpoint) \
            else checkpoint
        if not isinstance(cid, str):
            raise TypeError("checkpoint: expected an id, got %r" % (cid,))
        return Dataset(self, {"checkpoint": cid})

    def drop_checkpoint(self, checkpoint: Union[str, Checkpoint]) -> None:
        """Remove a checkpoint (checkpoint_drop)."""
        from .dataset import Checkpoint

        if isinstance(checkpoint, Checkpoint):
            checkpoint.drop()
            return
        self.request({"op": "checkpoint_drop", "checkpoint": checkpoint})

    # Broadcasts.

    def broadcast(self, data: BroadcastData) -> Broadcast:
        """Upload a broadcast: bytes (or str, as UTF-8), an iterable of
        lines (str or bytes; each gets a newline unless it ends with one),
        or an open file, whose descriptor is passed to emberd, which reads
        it from the file's start without the bytes crossing the socket.

        Plans use it with ``filter_in(b)`` or a udf's ``broadcasts``; a
        worker receives it once and keeps it across tasks.
        """
        if isinstance(data, str):
            data = data.encode("utf-8")
        if isinstance(data, (bytes, bytearray, memoryview)):
            return self._broadcast_bytes(memoryview(data).cast("B"))
        if hasattr(data, "fileno"):
            return self._broadcast_fd(data.fileno())
        with tempfile.TemporaryFile() as f:
            for line in data:
                if isinstance(line, str):
                    line = line.encode("utf-8")
                if not isinstance(line, (bytes, bytearray)):
                    raise TypeError("broadcast line: expected str or bytes,"
                                    " got %r" % (line,))
                f.write(line)
                if not line.endswith(b"\n"):
                    f.write(b"\n")
            f.flush()
            return self._broadcast_fd(f.fileno())

    def ship_module(self, module: Any) -> None:
        """Send the functions and classes of module, a module of yours
        the workers cannot import, by value with the functions that use
        them (cloudpickle's register_pickle_by_value)."""
        from . import functions

        functions.ship_module(module)

    def broadcast_object(self, obj: Any) -> ObjectBroadcast:
        """Upload a Python object, pickled once with cloudpickle: the
        returned ObjectBroadcast's ``value`` is obj here, and inside a
        function a worker runs, obj unpickled at most once per worker
        (and kept while the worker is reused); a big one (emberd's
        python.broadcast_preload) once per job, in the user's
        fork-server, and shared by the job's workers."""
        from . import functions

        data, _ = functions.dumps_bytes(obj)
        # Pickle bytes have no lines for a filter to look up: no index.
        made = self._broadcast_bytes(memoryview(data), index=False)
        return ObjectBroadcast(self, int(made.id), made.size, obj)

    def _broadcast_bytes(self, data: memoryview,
                         index: bool = True) -> Broadcast:
        req = {"op": "broadcast_put", "size": len(data)}
        if not index:
            req["index"] = False
        wire = self._acquire()
        try:
            wire.send_json(req)
            for i in range(0, len(data), BROADCAST_CHUNK):
                wire.send_frame(bytes(data[i:i + BROADCAST_CHUNK]))
            reply = wire.recv_json()
        finally:
            self._release(wire)
        return self._broadcast_made(reply)

    def _broadcast_fd(self, fd: int) -> Broadcast:
        body = b'{"op":"broadcast_put","fd":true}'
        wire = self._acquire()
        try:
            wire.send_with_fd(_wire._INT.pack(len(body)) + body, fd)
            reply = wire.recv_json()
        finally:
            self._release(wire)
        return self._broadcast_made(reply)

    def _broadcast_made(self, reply: dict) -> Broadcast:
        from .errors import error_from_reply

        if not reply["ok"]:
            raise error_from_reply(reply)
        bid = reply.get("broadcast")
        if not isinstance(bid, int):
            raise ProtocolError("broadcast_put reply without broadcast: %r"
                                % (reply,))
        return Broadcast(self, bid, reply.get("size"))


Held = TypeVar("Held", bound="_Held")


class _Held:
    """What a session holds until it is dropped, a broadcast or a
    checkpoint: ``drop()``, or leaving it as a context manager, removes it
    with the request ``<kind>_drop``."""

    _kind = ""			# "broadcast", "checkpoint"
    session: Session
    id: Union[int, str]
    dropped: bool

    def __enter__(self: Held) -> Held:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.dropped and not self.session.closed:
            self.drop()

    def drop(self) -> None:
        """Remove it from the session (broadcast_drop, checkpoint_drop):
        plans made after that are refused."""
        self.session.request({"op": self._kind + "_drop",
                              self._kind: self.id})
        self.dropped = True


class Broadcast(_Held):
    """A broadcast of a session: ``id`` names it in plans, ``size`` is its
    length in bytes.  ``drop()`` (or leaving it as a context manager)
    removes it; plans made after that can no longer use it, and a second
    drop raises BroadcastNotFound."""

    _kind = "broadcast"

    def __init__(self, session: Session, bid: int, size: Optional[int]):
        self.session = session
        self.id = bid
        self.size = size
        self.dropped = False

    def __repr__(self) -> str:
        return "<ember.Broadcast %s (%s bytes)%s>" % (
            self.id, self.size, " dropped" if self.dropped else "")


class ObjectBroadcast(Broadcast):
    """A broadcast of a Python object (Session.broadcast_object).  A
    function that refers to it reads ``b.value``; pickled into the
    function it is only its id, and the op lists it among its
    ``broadcasts``."""

    def __init__(self, session: Session, bid: int, size: Optional[int],
                 value: Any):
        Broadcast.__init__(self, session, bid, size)
        self.value = value

    def __reduce__(self) -> Any:
        from . import _pyref, functions

        functions.note_broadcast(int(self.id))
        return (_pyref.worker_broadcast, (self.id,))
