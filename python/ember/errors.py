"""The exceptions of the ember client.

Every error emberd reports carries a stable class string
(docs/protocol.md, "Error classes"); each has an exception named after it
here, and all of them derive from EmberError.  A class this module does not
know yet still raises EmberError, with ``error_class`` set.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Type

__all__ = [
    "EmberError", "ConnectionFailed", "ProtocolError", "SessionClosed",
    "FrameInvalid", "RequestInvalid", "HelloRequired", "VersionMismatch",
    "PlanInvalid", "ActionInvalid", "OperationAlreadyExists",
    "OperationNotFound", "OperationAbandoned", "OperationFinished",
    "OperationNotReattachable", "SessionMismatch", "PositionInvalid",
    "PositionNotAvailable", "TaskFailed", "ResultTooLarge", "SaveFailed",
    "SessionNotFound", "BroadcastNotFound", "CheckpointNotFound",
    "CheckpointFailed", "PythonError",
    "Interrupted", "LimitExceeded", "ShuttingDown", "HelperFailed",
    "Internal",
    "error_from_reply", "error_from_stream", "error_classes",
]


class EmberError(Exception):
    """An error from emberd or from the client.

    ``error_class`` is emberd's class string (``"PLAN_INVALID"``) or one of
    the client's own (``"IO_ERROR"``, ``"PROTOCOL_ERROR"``), and ``message``
    the text that came with it.
    """

    error_class: str = "EMBER_ERROR"

    def __init__(self, message: str, error_class: Optional[str] = None):
        Exception.__init__(self, message)
        self.message = message
        if error_class is not None:
            self.error_class = error_class

    def __str__(self) -> str:
        return "%s: %s" % (self.error_class, self.message)


class ConnectionFailed(EmberError, ConnectionError):
    """The socket could not be reached, or broke (the client's IO_ERROR).

    An operation that cannot be reattached ends with its connection.
    """

    error_class = "IO_ERROR"


class ProtocolError(EmberError):
    """emberd sent something the protocol does not allow."""

    error_class = "PROTOCOL_ERROR"


class SessionClosed(EmberError):
    """A request on a session this client has closed."""

    error_class = "SESSION_CLOSED"


class FrameInvalid(EmberError):
    """emberd found the framing broken and closed the connection."""

    error_class = "FRAME_INVALID"


class RequestInvalid(EmberError):
    """emberd refused a request: bad JSON, unknown op, wrong field type."""

    error_class = "REQUEST_INVALID"


class HelloRequired(EmberError):
    """A request came before hello."""

    error_class = "HELLO_REQUIRED"


class VersionMismatch(EmberError):
    """emberd does not speak this client's protocol version."""

    error_class = "VERSION_MISMATCH"


class PlanInvalid(EmberError, ValueError):
    """The plan was refused; the message starts with the field at fault
    (``plan.ops[2].filter.regex: ...``)."""

    error_class = "PLAN_INVALID"


class ActionInvalid(EmberError, ValueError):
    """Unknown action, or bad options for it."""

    error_class = "ACTION_INVALID"


class OperationAlreadyExists(EmberError):
    """The client-chosen operation id is in use, or was used by an
    operation emberd still remembers."""

    error_class = "OPERATION_ALREADY_EXISTS"


_TASK_MESSAGE = re.compile(r"partition (\d+): (?:worker (\d+): )?(.*)\Z",
                           re.DOTALL)


class TaskFailed(EmberError):
    """A task failed in a worker.

    ``partition`` is the partition's index and ``worker`` the worker's pid
    (either None when emberd did not say), ``reason`` the worker's own
    message (or the signal that killed it).  ``records`` holds what an
    action that returns a list (collect) received before the failure; an
    iterator has already yielded those records, and leaves it empty.
    """

    error_class = "TASK_FAILED"

    def __init__(self, message: str, error_class: Optional[str] = None,
                 records: Optional[list] = None):
        EmberError.__init__(self, message, error_class)
        self.partition: Optional[int] = None
        self.worker: Optional[int] = None
        self.reason: str = message
        self.records: list = records if records is not None else []
        m = _TASK_MESSAGE.search(message)
        if m is not None:
            self.partition = int(m.group(1))
            if m.group(2) is not None:
                self.worker = int(m.group(2))
            self.reason = m.group(3)


class ResultTooLarge(EmberError):
    """A count_by_value result grew past emberd's daemon.max_result."""

    error_class = "RESULT_TOO_LARGE"


class SaveFailed(EmberError):
    """The commit of a save failed."""

    error_class = "SAVE_FAILED"


class SessionNotFound(EmberError):
    """The session to resume is gone (it ended with its last connection,
    expired, or was closed)."""

    error_class = "SESSION_NOT_FOUND"


class BroadcastNotFound(EmberError, KeyError):
    """The session has no such broadcast."""

    error_class = "BROADCAST_NOT_FOUND"

    __str__ = EmberError.__str__


class Interrupted(EmberError):
    """The operation was stopped: its session was closed, or emberd
    interrupted it."""

    error_class = "INTERRUPTED"


class LimitExceeded(EmberError):
    """A per-uid limit of emberd was reached."""

    error_class = "LIMIT_EXCEEDED"


class ShuttingDown(EmberError):
    """emberd is draining and takes no new work."""

    error_class = "SHUTTING_DOWN"


class HelperFailed(EmberError):
    """The process doing the request's file work as the user died before
    it answered; what it began was undone, and the same request may
    succeed if sent again."""

    error_class = "HELPER_FAILED"


class Internal(EmberError):
    """A bug in emberd; its log says more."""

    error_class = "INTERNAL"


class OperationNotFound(EmberError):
    """No such operation (reattach, release, interrupt)."""

    error_class = "OPERATION_NOT_FOUND"


class OperationAbandoned(EmberError):
    """The operation was detached longer than emberd's
    operation.detached_timeout and removed; a late reattach gets this
    rather than a silent new run."""

    error_class = "OPERATION_ABANDONED"


class OperationFinished(EmberError):
    """A reattach or release of an operation that has ended: failed,
    interrupted, stopped by its client, or a reply action whose reply was
    sent; the message says which."""

    error_class = "OPERATION_FINISHED"


class OperationNotReattachable(EmberError):
    """A reattach of an operation executed with reattachable false."""

    error_class = "OPERATION_NOT_REATTACHABLE"


class SessionMismatch(EmberError):
    """The operation belongs to another session of the same uid."""

    error_class = "SESSION_MISMATCH"


class PositionInvalid(EmberError, ValueError):
    """A reattach or release named a position the stream never had: a
    negative one, one past the partition count, or past what was sent."""

    error_class = "POSITION_INVALID"


class PositionNotAvailable(EmberError):
    """A reattach asked for a position emberd can neither replay nor
    recompute (the plan is not deterministic)."""

    error_class = "POSITION_NOT_AVAILABLE"


class CheckpointNotFound(EmberError, KeyError):
    """No such checkpoint for this uid: never made, dropped, removed with
    its session, or another uid's; from checkpoint_drop, or from a plan
    that reads it (refused before any task runs)."""

    error_class = "CHECKPOINT_NOT_FOUND"

    __str__ = EmberError.__str__


class CheckpointFailed(EmberError):
    """A checkpoint could not be made: emberd's checkpoint.dir is not
    usable, its manifest could not be written, or the computation a lazy
    checkpoint's first read waited for failed (the next read tries
    again)."""

    error_class = "CHECKPOINT_FAILED"


class PythonError(TaskFailed):
    """A Python function of the job raised in a worker: a TaskFailed
    (class TASK_FAILED) whose ``traceback`` is the worker's whole Python
    traceback, the exception's line last."""

    def __init__(self, message: str, error_class: Optional[str] = None,
                 records: Optional[list] = None):
        TaskFailed.__init__(self, message, error_class, records)
        self.traceback = self.reason[len(_PYTHON):]


_PYTHON = "python: "

_BY_CLASS: Dict[str, Type[EmberError]] = {
    cls.error_class: cls
    for cls in (globals().get(name) for name in __all__)
    if isinstance(cls, type) and issubclass(cls, EmberError)
    and cls is not EmberError and cls is not PythonError
}


def _task_failed(message: str, error_class: Optional[str] = None
                 ) -> TaskFailed:
    """TaskFailed, or PythonError when a function raised."""
    err = TaskFailed(message, error_class)
    if err.reason.startswith(_PYTHON):
        return PythonError(message, error_class)
    return err

_STREAM_CLASS = re.compile(r"([A-Z][A-Z_]*[A-Z]): (.*)\Z", re.DOTALL)


def error_from_reply(reply: dict) -> EmberError:
    """The exception for an ``{"ok": false, "error": {...}}`` reply."""
    err = reply.get("error")
    if not isinstance(err, dict):
        return ProtocolError("error reply without an error object: %r"
                             % (reply,))
    error_class = err.get("class")
    message = err.get("message")
    if not isinstance(error_class, str) or not isinstance(message, str):
        return ProtocolError("error reply without class and message: %r"
                             % (reply,))
    cls = _BY_CLASS.get(error_class, EmberError)
    if cls is TaskFailed:
        return _task_failed(message, error_class)
    return cls(message, error_class)


def error_from_stream(message: str) -> EmberError:
    """The exception for the error frame that ends a result stream.

    A task's failure names its partition (``partition 3: worker 4242:
    ...``) and raises TaskFailed; emberd's own reasons start with their
    class (``SHUTTING_DOWN: operation ...``, ``INTERRUPTED: ...``) and
    raise its exception; anything else stopped the operation
    (Interrupted).
    """
    m = _STREAM_CLASS.match(message)
    if m is not None:
        return _BY_CLASS.get(m.group(1), EmberError)(m.group(2), m.group(1))
    err = _task_failed(message)
    if err.partition is not None:
        return err
    return Interrupted(message)


def error_classes() -> List[str]:
    """The error classes that have an exception of their own, emberd's
    and the client's (IO_ERROR, PROTOCOL_ERROR, SESSION_CLOSED)."""
    return sorted(_BY_CLASS)
