"""One connection to emberd: frames, JSON control messages and the records
of a result stream (docs/protocol.md, section 1).

Every integer is a big-endian int32; a frame is a length and that many
bytes; negative lengths are the special values below.
"""

from __future__ import annotations

import errno
import itertools
import json
import operator
import os
import socket
import struct
from typing import (Any, Dict, List, Optional, Sequence, Tuple, Union,
                    cast)

from .errors import ConnectionFailed, ProtocolError, error_from_reply

# Special lengths (PySpark's SpecialLengths).
END_OF_DATA_SECTION = -1
EXCEPTION_THROWN = -2
NULL = -5
# Keyed records on the result stream: a pair (key frame, value frame) and
# a group (key frame, int32 n, n value frames).
PAIR = -7
GROUP = -8

# Result stream responses and requests.
STREAM_DONE = 0
STREAM_PARTITION = 1
STREAM_DETACHED = 2
STREAM_ERROR = -1
REQUEST_STOP = 0
REQUEST_NEXT = 1

PROTOCOL_VERSION = 1
CHUNK = 1 << 20			# bytes asked of one recv
MAX_FRAME = 16 << 20		# emberd's default daemon.max_frame

_INT = struct.Struct(">i")
_unpack_int = _INT.unpack_from

# A plain record (bytes, or None for a null), a pair (key, value) or a
# group (key, [values]).
RawRecord = Union[None, bytes, Tuple[bytes, Optional[bytes]],
                  Tuple[bytes, List[Optional[bytes]]]]


class Wire:
    """A connected, blocking AF_UNIX socket to emberd with a read buffer.

    Any failure of the socket raises ConnectionFailed and leaves the wire
    ``broken``; bytes the protocol does not allow raise ProtocolError and
    break it too.
    """

    def __init__(self, path: str, timeout: Optional[float] = None,
                 sock: Optional[socket.socket] = None):
        """Connect to emberd at path, or use sock, connected already."""
        self.path = path
        self.broken = False
        self._dead: Optional[socket.socket] = None
        # Bytes read and not yet taken: buf[pos:end].
        self.buf = bytearray()
        self._view = memoryview(self.buf)
        self.pos = 0
        self.end = 0
        self._run_wait = 0		# records read one by one before a run
        self._run_backoff = RUN_MIN
        if sock is not None:
            self.sock = sock
            return
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
        except OSError as e:
            self.sock.close()
            hint = ""
            if e.errno in (errno.ENOENT, errno.ECONNREFUSED):
                hint = " (is emberd running?)"
            raise ConnectionFailed("connect %s: %s%s" %
                                   (path, e.strerror or e, hint)) from e

    def set_timeout(self, timeout: Optional[float]) -> None:
        """Seconds any later socket call may take (None: no limit)."""
        self.sock.settimeout(timeout)

    def close(self) -> None:
        """Close the socket; an open result stream ends its operation."""
        self.broken = True
        for sock in (self.sock, self._dead):
            try:
                if sock is not None:
                    sock.close()
            except OSError:
                pass

    def _refusal(self):
        """The error emberd sent before it closed a connection whose write
        just failed (LIMIT_EXCEEDED, SHUTTING_DOWN), or None."""
        sock = self.sock
        try:
            sock.settimeout(1.0)
            data = sock.recv(65536)
            (n,) = _unpack_int(data, 0)
            reply = json.loads(data[4:4 + n].decode("utf-8"))
            if isinstance(reply, dict) and reply.get("ok") is False:
                return error_from_reply(reply)
        except (OSError, ValueError, struct.error):
            pass
        finally:
            self.close()
        return None

    def _fail(self, what: str, e: BaseException) -> ConnectionFailed:
        self.close()
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        return ConnectionFailed("%s %s: %s" % (what, self.path, reason))

    def _protocol(self, message: str) -> ProtocolError:
        self.close()
        return ProtocolError(message)

    # Bytes.

    def send(self, data: bytes) -> None:
        if self.broken:
            raise ConnectionFailed("write %s: the connection is closed"
                                   % self.path)
        try:
            self.sock.sendall(data)
        except OSError as e:
            # Keep the socket to read what emberd said before closing.
            self.broken = True
            self._dead = self.sock
            reason = e.strerror or str(e)
            raise ConnectionFailed("write %s: %s" % (self.path, reason)) \
                from e

    def send_with_fd(self, data: bytes, fd: int) -> None:
        """Send data with fd passed alongside (SCM_RIGHTS)."""
        try:
            sent = socket.send_fds(self.sock, [data], [fd])
            if sent < len(data):
                self.sock.sendall(data[sent:])
        except OSError as e:
            raise self._fail("write", e) from e

    def _fill(self, need: int = 1) -> None:
        """Read until at least need bytes are buffered past pos."""
        # One buffer, read into: what is left unread (a record cut in
        # two) moves to its front.  A bytes object a read, joined to that
        # rest, cost a copy of every byte and fresh pages to fault in.
        buf, pos, end = self.buf, self.pos, self.end
        have = end - pos
        size = max(need, CHUNK)
        if len(buf) < need or (len(buf) > size and have <= CHUNK):
            buf = bytearray(size)
            buf[:have] = self._view[pos:end]
            self._view.release()
            self.buf, self._view = buf, memoryview(buf)
        elif pos:
            buf[:have] = buf[pos:end]
        pos, end = 0, have
        view = self._view
        while end < need:
            try:
                got = self.sock.recv_into(view[end:])
            except OSError as e:
                raise self._fail("read", e) from e
            if not got:
                self.close()
                raise ConnectionFailed("read %s: emberd closed the "
                                       "connection" % self.path)
            end += got
        self.pos, self.end = pos, end

    def recv_exact(self, n: int) -> bytes:
        if self.end - self.pos < n:
            self._fill(n)
        data = self._view[self.pos:self.pos + n].tobytes()
        self.pos += n
        return data

    # Integers and frames.

    def read_int(self) -> int:
        if self.end - self.pos < 4:
            self._fill(4)
        (n,) = _unpack_int(self.buf, self.pos)
        self.pos += 4
        return n

    def write_int(self, n: int) -> None:
        self.send(_INT.pack(n))

    def send_frame(self, data: bytes) -> None:
        self.send(_INT.pack(len(data)) + data)

    def recv_frame(self) -> bytes:
        n = self.read_int()
        if n < 0 or n > MAX_FRAME:
            raise self._protocol("expected a frame, got length %d" % n)
        return self.recv_exact(n)

    # Control messages.

    def send_json(self, obj: dict) -> None:
        self.send_frame(json.dumps(obj, separators=(",", ":")).encode())

    def recv_json(self) -> dict:
        """One reply: the object, whatever its "ok" says."""
        data = self.recv_frame()
        try:
            obj = json.loads(data.decode("utf-8"))
        except ValueError as e:
            raise self._protocol("reply is not JSON (%s): %r" %
                                 (e, data[:200])) from e
        if not isinstance(obj, dict) or not isinstance(obj.get("ok"), bool):
            raise self._protocol("reply is not {\"ok\": bool, ...}: %r"
                                 % (obj,))
        return obj

    def request(self, obj: dict) -> dict:
        """Send a control request; its reply, raising the error it names
        when "ok" is false."""
        try:
            self.send_json(obj)
        except ConnectionFailed as e:
            raise self._refusal() or e
        reply = self.recv_json()
        if not reply["ok"]:
            raise error_from_reply(reply)
        return reply

    def hello(self, session: Optional[str], client: str) -> dict:
        """Say hello, resuming session if given."""
        req = {"op": "hello", "version": PROTOCOL_VERSION, "client": client}
        if session is not None:
            req["session"] = session
        return self.request(req)

    # The result stream.

    def read_error_frame(self) -> str:
        return self.recv_frame().decode("utf-8", "replace")

    def read_batch(self, text: Optional[str] = None
                   ) -> Tuple[List[RawRecord], int]:
        """The records of the open partition that are buffered (reading
        more when none is), and what ends them: 0 if more records follow,
        END_OF_DATA_SECTION, or EXCEPTION_THROWN (an error frame follows,
        still unread).  With text (an error handler of bytes.decode),
        the records come decoded from UTF-8: str, pairs and groups of
        str."""
        while True:
            records, status = self._parse_batch(text)
            if records or status:
                return records, status
            self._fill(self._next_need())

    def _next_need(self) -> int:
        """Bytes needed past pos for the next record to be whole."""
        have = self.end - self.pos
        if have < 4:
            return 4
        (n,) = _unpack_int(self.buf, self.pos)
        if n == PAIR or n == GROUP:
            return self._keyed(self._view, self.pos, self.end, n)[1]
        return 4 + n if n > 0 else 4

    def _keyed(self, buf: Union[bytes, memoryview], pos: int, end: int,
               marker: int
               ) -> Tuple[RawRecord, int]:
        try:
            return _read_keyed(buf, pos, end, marker)
        except ValueError as e:
            raise self._protocol("result stream: %s" % e) from e

    def _parse_batch(self, text: Optional[str] = None
                     ) -> Tuple[List[RawRecord], int]:
        # The client's hot loop.  Records of one length in a row (fixed
        # width data, say) are read RUN_MAX at a time by one struct call,
        # kept when every length is the same; a try that fails waits for
        # more records one by one before the next, so that varied lengths
        # lose next to nothing.  One by one, names are bound locally (a
        # quarter less CPU per record than with module globals), and
        # records are sliced from a bytes copy of the buffer, made once
        # while a quarter of it or more is left to read (a memoryview's
        # slice and tobytes cost twice a bytes slice).
        buf, view, pos, end = self.buf, self._view, self.pos, self.end
        snap = None
        out: List[Any] = []
        append = out.append
        unpack, max_frame, null = _unpack_int, MAX_FRAME, NULL
        status = 0
        wait = self._run_wait
        while pos + 4 <= end:
            n = unpack(buf, pos)[0]
            start = pos + 4
            if n >= 0:
                if n > max_frame:
                    raise self._protocol("record of %d bytes" % n)
                if wait <= 0:
                    k = (end - pos) // (n + 4)
                    if k >= RUN_MIN:
                        got = _read_run(buf, pos, n, k, text)
                        if got is not None:
                            out += got
                            pos += len(got) * (n + 4)
                            self._run_backoff = RUN_MIN
                            continue
                        self._run_backoff = min(self._run_backoff * 2,
                                                RUN_BACKOFF_MAX)
                        wait = self._run_backoff
                wait -= 1
                stop = start + n
                if stop > end:
                    break
                if snap is not None:
                    data = snap[start:stop]
                elif (end - pos) * 4 >= end:
                    snap = bytes(view[:end])
                    data = snap[start:stop]
                else:		# a buffer's last few: not worth a copy
                    data = view[start:stop].tobytes()
                append(data if text is None
                       else data.decode("utf-8", text))
                pos = stop
            elif n == null:
                append(None)
                pos = start
            elif n == END_OF_DATA_SECTION or n == EXCEPTION_THROWN:
                status = n
                pos = start
                break
            elif n == PAIR or n == GROUP:
                record: RawRecord = None
                if snap is None:
                    snap = bytes(view[:end])
                if n == PAIR and start + 8 <= end:
                    # The common one inline: a pair whose value is not
                    # null, whole in buf.
                    kn = unpack(buf, start)[0]
                    vs = start + 8 + kn
                    if 0 <= kn <= max_frame and vs <= end:
                        vn = unpack(buf, vs - 4)[0]
                        if 0 <= vn <= max_frame and vs + vn <= end:
                            record = (snap[start + 4:vs - 4],
                                      snap[vs:vs + vn])
                            stop = vs + vn - pos
                if record is None:
                    record, stop = self._keyed(snap, pos, end, n)
                    if record is None:
                        break
                append(record if text is None
                       else _decode_keyed(record, text))
                pos += stop
            else:
                raise self._protocol("unexpected length %d in a partition"
                                     % n)
        self.pos = pos
        self._run_wait = wait
        return out, status


# A run of records of one length: at least RUN_MIN, at most RUN_MAX read by
# one call; after a run that failed, the next try waits for up to
# RUN_BACKOFF_MAX records.
RUN_MIN = 8
RUN_MAX = 1024
RUN_BACKOFF_MAX = 4096
# For (n, k): the struct that reads k records of n bytes past their
# lengths, the four bytes every one of the k lengths must have, each
# repeated k times, and what cuts the run decoded as ASCII into records.
_Run = Tuple[struct.Struct, Tuple[bytes, ...], Any]
_runs: Dict[Tuple[int, int], _Run] = {}


def _read_run(buf: bytearray, pos: int, n: int, k: int,
              text: Optional[str] = None) -> Optional[Tuple[Any, ...]]:
    """The records of n bytes at pos, as many as one run reads (up to k,
    whole and in buf), or None if a length differs among them; decoded
    from UTF-8 with text as the error handler when given."""
    if k > RUN_MAX:
        k = RUN_MAX
    else:
        k = 1 << (k.bit_length() - 1)	# few formats for a buffer's tail
    run = _runs.get((n, k))
    if run is None:
        if len(_runs) >= 256:
            _runs.clear()
        length = _INT.pack(n)
        # Cuts the str of a run's bytes into its records, when the
        # lengths are ASCII (each byte below 128).
        cut = None
        if max(length) < 128:
            cut = operator.itemgetter(*[slice(i * (n + 4) + 4,
                                              (i + 1) * (n + 4))
                                        for i in range(k)])
        run = _runs[(n, k)] = (struct.Struct(">" + "4x%ds" % n * k),
                               tuple(bytes([b]) * k for b in length), cut)
    fmt, lengths, cut = run
    # The lengths are checked a byte at a time, by strided slices (in C;
    # an int made for each cost more than the record).
    stop, step = pos + k * (n + 4), n + 4
    if (buf[pos + 3:stop:step] != lengths[3] or
            buf[pos + 2:stop:step] != lengths[2] or
            buf[pos + 1:stop:step] != lengths[1] or
            buf[pos:stop:step] != lengths[0]):
        return None
    if text is None:
        return fmt.unpack_from(buf, pos)
    if cut is not None:
        # All ASCII, lengths and records: one decode of the run, cut by
        # offsets (a bytes object a record, then its str, cost twice).
        try:
            return cut(str(memoryview(buf)[pos:stop], "ascii"))
        except UnicodeDecodeError:
            pass
    return tuple(map(bytes.decode, fmt.unpack_from(buf, pos),
                     itertools.repeat("utf-8"), itertools.repeat(text)))


def _decode_keyed(record: Any, text: str) -> Any:
    """A pair or group of bytes as one of str, decoded with text as the
    error handler (a null value stays None)."""
    key, value = record
    if isinstance(value, list):
        return (key.decode("utf-8", text),
                [v if v is None else v.decode("utf-8", text)
                 for v in value])
    return (key.decode("utf-8", text),
            value if value is None else value.decode("utf-8", text))


def _read_keyed(buf: Union[bytes, memoryview], pos: int, end: int,
                marker: int
                ) -> Tuple[RawRecord, int]:
    """The pair or group whose marker is at pos, and the bytes it takes
    past pos; or, when buf does not hold all of it, None and the bytes
    past pos needed to read further.  A length no record has (a null key,
    a negative count) raises ValueError."""
    unpack = _unpack_int
    p = pos + 4
    frames: List[Optional[bytes]] = []
    count = 1				# values to read after the key
    while len(frames) <= count:
        if p + 4 > end:
            return None, p + 4 - pos
        (n,) = unpack(buf, p)
        p += 4
        if n == NULL and frames:
            frames.append(None)
            continue
        if n < 0 or n > MAX_FRAME:
            raise ValueError("a %s with a frame of length %d" %
                             ("pair" if marker == PAIR else "group", n))
        if p + n > end:
            return None, p + n - pos
        frames.append(bytes(buf[p:p + n]))
        p += n
        if len(frames) == 1 and marker == GROUP:
            if p + 4 > end:
                return None, p + 4 - pos
            (count,) = unpack(buf, p)
            if count < 0 or count > MAX_FRAME // 4:
                raise ValueError("a group of %d values" % count)
            p += 4
    key = cast(bytes, frames[0])
    if marker == PAIR:
        return (key, frames[1]), p - pos
    return (key, frames[1:]), p - pos


def close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def path_list(paths: Union[str, os.PathLike, Sequence]) -> List[str]:
    """paths (one or several, str or path-like) made absolute here: emberd
    and its workers have another working directory."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    out = []
    for p in paths:
        p = os.fsdecode(os.fspath(p))
        out.append(os.path.abspath(p))
    return out
