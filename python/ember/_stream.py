"""The result stream of one operation (docs/protocol.md, "Result stream"),
with the reattach loop of the contract in ARCHITECTURE.md, section 4.

A stream knows its position: the partition it is in (or will ask for next)
and how many of that partition's records the caller has consumed.  When the
connection breaks, or emberd ends the stream early with DETACHED (2), an
operation emberd called reattachable is resumed exactly after that
position:

1. connect again (bounded, jittered exponential backoff);
2. hello with the session's id;
3. release what was consumed (partition + offset);
4. reattach at that position; the stream then goes on as after an execute
   reply: a request (in pull mode), then ``1`` and the rest of the
   partition, possibly empty, or ``0`` when no partition is left.

When it completes, or the caller stops early, a reattachable operation is
released (``"all": true``) so emberd can free it at once.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, Generator, Iterable,
                    Iterator, List, Optional, Tuple, cast)

from . import _wire
from ._wire import RawRecord, Wire
from .errors import (ConnectionFailed, EmberError, Interrupted,
                     ProtocolError, error_from_stream)

if TYPE_CHECKING:
    from .session import Session


@dataclass(frozen=True)
class ReattachPolicy:
    """How a stream reconnects after a broken connection.

    The first try is at once; the wait before try n + 1 is drawn
    uniformly from 0 to ``min(max_delay, initial_delay * 2 ** (n - 1))``
    ("full jitter").  The client gives up after ``attempts`` tries or
    ``timeout`` seconds, whichever comes first, and raises
    ConnectionFailed; each try (connect, hello, release, reattach) is
    bounded by what is left of ``timeout``, so a peer that accepts and
    never answers cannot hold it longer.  A refusal (the operation was
    reaped, say) raises its own exception at once.  ``attempts=0`` turns
    reattaching off.
    """

    attempts: int = 10
    initial_delay: float = 0.05
    max_delay: float = 2.0
    timeout: float = 60.0

    def delays(self, rng: random.Random) -> Iterator[float]:
        """The waits before each try: the first try waits nothing."""
        ceiling = self.initial_delay
        for i in range(self.attempts):
            yield 0.0 if i == 0 else rng.uniform(0.0, ceiling)
            if i > 0:
                ceiling = min(self.max_delay, ceiling * 2)


class ResultStream:
    """The records of one iterate or collect operation, partition by
    partition, as lists of raw records (bytes, or None for a null)."""

    def __init__(self, session: Session, wire: Wire, reply: dict,
                 pull: bool):
        self.session = session
        self.wire: Optional[Wire] = wire
        self.operation: str = reply["operation"]
        self.partitions: int = reply["partitions"]
        self.reattachable = reply.get("reattachable") is True
        self.pull = pull
        self.partition = 0		# being read, or asked for next
        self.offset = 0			# its records the caller consumed
        self.open = False		# between 1 and the partition's end
        self.finished = False
        self.reattaches = 0
        # Records decoded from UTF-8 as they are read, with this error
        # handler; None: bytes.
        self.text: Optional[str] = None

    @property
    def _conn(self) -> Wire:
        """The stream's connection; ProtocolError past its end (a bug)."""
        if self.wire is None:
            raise ProtocolError("operation %s: the stream has no connection"
                                % self.operation)
        return self.wire

    # The generator.

    def batches(self) -> Generator[List[RawRecord], None, None]:
        """Lists of records, in order, until the stream is complete.

        Closing the generator early stops the operation (pull mode) or
        abandons it (push mode); any other exception out of it leaves the
        connection closed and the operation ended.
        """
        try:
            while True:
                if not self.open and not self._start_partition():
                    self._finish()
                    return
                records, status = self._read()
                message = None
                if status == _wire.END_OF_DATA_SECTION:
                    self.open = False
                elif status == _wire.EXCEPTION_THROWN:
                    # The stream is over: the error waits for the caller
                    # to take the records before it.
                    message = self._conn.read_error_frame()
                    self._finish(released=False)
                if records:
                    yield records
                    self.offset += len(records)
                if message is not None:
                    raise error_from_stream(message)
                if status == _wire.END_OF_DATA_SECTION:
                    self.partition += 1
                    self.offset = 0
        except GeneratorExit:
            self.stop()
            raise
        except KeyboardInterrupt:
            # The user's interrupt is the operation's.
            if not self.finished:
                self.session._interrupt(self.operation)
                self.abandon()
            raise
        except BaseException:
            if not self.finished:
                self.abandon()
            raise

    def _start_partition(self) -> bool:
        """Ask for the next partition (pull mode) and read the answer: True
        when its records follow, False when the stream is complete."""
        while True:
            self._check_session()
            try:
                if self.pull:
                    self._conn.write_int(_wire.REQUEST_NEXT)
                response = self._conn.read_int()
            except ConnectionFailed as e:
                self._recover(e)
                continue
            if response == _wire.STREAM_PARTITION:
                self.open = True
                return True
            if response == _wire.STREAM_DONE:
                return False
            if response == _wire.STREAM_DETACHED:
                self._reattach_after_detach()
                continue
            if response == _wire.STREAM_ERROR:
                message = self._conn.read_error_frame()
                self._finish(released=False)
                raise error_from_stream(message)
            self._conn.close()
            raise ProtocolError("unexpected stream response %d" % response)

    def _read(self) -> Tuple[List[RawRecord], int]:
        try:
            return self._conn.read_batch(self.text)
        except ConnectionFailed as e:
            self._check_session()
            self._recover(e)
            return [], 0

    def _check_session(self) -> None:
        if self.session.closed:
            self.finished = True
            raise Interrupted("operation %s: session closed" % self.operation)

    # Reattaching.

    def _recover(self, cause: ConnectionFailed) -> None:
        """Resume after a broken connection, or raise cause when the
        operation cannot be reattached."""
        self._conn.close()
        self.session._forget(self._conn)
        policy = self.session.reattach_policy
        if not self.reattachable or policy.attempts <= 0:
            self.finished = True
            raise cause
        self.wire = None
        start = time.monotonic()
        deadline = start + policy.timeout
        last: EmberError = cause
        tries = 0
        for delay in policy.delays(self.session._rng):
            if time.monotonic() + delay >= deadline:
                break
            time.sleep(delay)
            tries += 1
            # Each try is bounded by what is left of the timeout, so that
            # a peer that accepts and never answers cannot hold it.
            left = max(deadline - time.monotonic(), 0.001)
            if self.session.timeout is not None:
                left = min(left, self.session.timeout)
            try:
                wire = self.session._connect(timeout=left)
            except ConnectionFailed as e:
                last = e
                continue
            except EmberError:
                self.finished = True
                raise
            try:
                self._reattach(wire)
            except ConnectionFailed as e:
                self.session._forget(wire)
                last = e
                continue
            except EmberError:
                self.session._forget(wire)
                wire.close()
                self.finished = True
                raise
            wire.set_timeout(self.session.timeout)
            self.wire = wire
            return
        self.finished = True
        raise ConnectionFailed("operation %s: could not reattach at "
                               "partition %d offset %d after %d tries in "
                               "%.1f s: %s" %
                               (self.operation, self.partition, self.offset,
                                tries, time.monotonic() - start,
                                last.message)) from cause

    def _reattach(self, wire: Wire) -> None:
        """Release what was consumed, then reattach after it, on wire."""
        where = {"operation": self.operation, "partition": self.partition,
                 "offset": self.offset}
        wire.request(dict(where, op="release"))
        wire.request(dict(where, op="reattach"))
        self.open = False
        self.reattaches += 1

    def _reattach_after_detach(self) -> None:
        """emberd ended the stream at a partition boundary (2): the
        connection is back to control frames; reattach on it."""
        if not self.reattachable:
            self.reattachable = True	# emberd said it goes on
        try:
            self._reattach(self._conn)
        except ConnectionFailed as e:
            self._recover(e)
        except EmberError:
            self.finished = True
            wire, self.wire = self.wire, None
            self.session._release(wire)
            raise

    # Endings.

    def _finish(self, released: bool = True) -> None:
        """The stream is over and the connection back to control frames:
        release the operation (when reattachable) and hand the connection
        back to the session."""
        self.finished = True
        wire, self.wire = self._conn, None
        if released and self.reattachable:
            try:
                wire.request({"op": "release", "operation": self.operation,
                              "all": True})
            except ConnectionFailed:
                pass
            except EmberError:
                pass		# already gone: nothing is held
        self.session._release(wire)

    def stop(self) -> None:
        """Stop early: write 0, read what emberd sent of the open
        partition before it took the 0 (it ends the partition at once),
        wait for emberd's 0.  A push stream (collect) takes no requests:
        its connection is closed instead, which ends the operation."""
        if self.finished:
            return
        if not self.pull:
            self.abandon()
            return
        try:
            self._conn.write_int(_wire.REQUEST_STOP)
            if self.open:
                self._drain()
            if self.finished:
                return
            response = self._conn.read_int()
            if response != _wire.STREAM_DONE:
                raise ProtocolError("answer %d to a stop" % response)
        except EmberError:
            self.abandon()
            return
        self._finish()

    def _drain(self) -> None:
        """Read and drop the rest of the open partition."""
        while True:
            _, status = self._conn.read_batch()
            if status == _wire.END_OF_DATA_SECTION:
                self.open = False
                return
            if status == _wire.EXCEPTION_THROWN:
                # The stream ended before emberd took the 0, which it
                # reads as a control frame: the connection goes.
                self._conn.read_error_frame()
                self.abandon()
                return

    def abandon(self) -> None:
        """End the operation by closing its connection (and, when it would
        outlive that, by releasing it)."""
        self.finished = True
        wire, self.wire = self.wire, None
        if wire is not None:
            self.session._discard(wire)
        if self.reattachable:
            self.session._quiet_request({"op": "release",
                                         "operation": self.operation,
                                         "all": True})


class Records(itertools.chain):
    """The records of a stream one by one: what Dataset.to_local_iterator
    returns.  Its __next__ is chain's, in C, so that a record costs no
    Python call (a generator resumed per record was a fifth of the
    client's CPU); a batch costs one resume of ResultStream.batches and
    one call of the converter.  close(), or dropping the iterator, stops
    the operation, as closing a generator did."""

    __slots__ = ("_stream", "_batches")

    _stream: ResultStream
    _batches: Generator[List[RawRecord], None, None]

    @classmethod
    def of(cls, stream: ResultStream,
           convert: Optional[Callable[[List[RawRecord]], List[Any]]]
           ) -> Records:
        """The records of stream, each batch through convert if given."""
        batches = stream.batches()
        source: Iterable[List[Any]] = batches
        if convert is not None:
            source = map(convert, batches)
        it = cast(Records, cls.from_iterable(source))
        it._stream = stream
        it._batches = batches
        return it

    def close(self) -> None:
        """Stop the operation now; the records not yet read are lost."""
        self._batches.close()
        if not self._stream.finished:
            self._stream.stop()

    def __del__(self) -> None:
        if hasattr(self, "_stream"):
            self.close()
