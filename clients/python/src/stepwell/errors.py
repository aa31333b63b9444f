"""Exceptions of the stepwell client, named after the sidecar's ErrorInfo reasons.

Every failed RPC raises a :class:`StepwellError` (or a subclass). The sidecar
sends a ``google.rpc.Status`` in the ``grpc-status-details-bin`` trailer with a
``google.rpc.ErrorInfo`` (domain ``stepwell.dev``) and, for invalid input, a
``google.rpc.BadRequest``; they are decoded into ``.reason``, ``.metadata`` and
``.field``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple, Type

import grpc
from google.rpc import error_details_pb2, status_pb2

from .v1 import waits_pb2

DOMAIN = "stepwell.dev"
_DETAILS_KEY = "grpc-status-details-bin"


class StepwellError(Exception):
    """A failed stepwell RPC.

    Attributes:
        code: the ``grpc.StatusCode``.
        reason: the ErrorInfo reason (``""`` when the server sent none).
        field: the first BadRequest field violation's field, or ``""``.
        metadata: the ErrorInfo metadata (a dict of strings).
        message: the status message.
        violations: every BadRequest violation as ``(field, description)``.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str = "",
        reason: str = "",
        field: str = "",
        metadata: Optional[Dict[str, str]] = None,
        violations: Optional[List[Tuple[str, str]]] = None,
    ) -> None:
        self.code = code
        self.message = message
        self.reason = reason
        self.field = field
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.violations: List[Tuple[str, str]] = list(violations or [])
        text = f"{code.name}"
        if reason:
            text += f" {reason}"
        if field:
            text += f" (field {field})"
        if message:
            text += f": {message}"
        super().__init__(text)


class CheckpointConflict(StepwellError):
    """ALREADY_EXISTS / CHECKPOINT_CONFLICT: same dedup key, different content."""


class WorkflowVersionMismatch(StepwellError):
    """FAILED_PRECONDITION / WORKFLOW_VERSION_MISMATCH on Restore."""

    @property
    def expected_version(self) -> str:
        return self.metadata.get("expected_version", "")

    @property
    def recorded_version(self) -> str:
        return self.metadata.get("recorded_version", "")


class KeyReused(StepwellError):
    """FAILED_PRECONDITION / KEY_REUSED: the key was begun with another fingerprint."""


class LeaseLost(StepwellError):
    """ABORTED / LEASE_LOST: the token is not the current holder's."""


class NotAcquired(StepwellError):
    """FAILED_PRECONDITION / NOT_ACQUIRED: the key is not held."""


class ResultMismatch(StepwellError):
    """ALREADY_EXISTS / RESULT_MISMATCH: Complete repeated with another result."""


class RecordExists(StepwellError):
    """ALREADY_EXISTS / RECORD_EXISTS: a PutRecords with PUT_MODE_CREATE met
    an address already taken, so nothing of it was written; ``.metadata``
    names the record (``turn_id``, ``scope``, ``kind``, ``id``)."""


class RecordNotFound(StepwellError):
    """NOT_FOUND / RECORD_NOT_FOUND: a PutRecords with PUT_MODE_UPDATE met
    an address holding no record (deleted, or never written), so nothing of
    it was written; ``.metadata`` names the record (``turn_id``, ``scope``,
    ``kind``, ``id``)."""


class KeyNotFound(StepwellError):
    """NOT_FOUND / KEY_NOT_FOUND: Get on an unknown key."""


class InvalidArgument(StepwellError):
    """INVALID_ARGUMENT (any reason); ``.field`` names the offending field."""


class Overloaded(StepwellError):
    """RESOURCE_EXHAUSTED / OVERLOADED: too many requests in flight or the write
    queue is full; nothing stored. Retried with backoff by the client."""


class MessageTooLarge(StepwellError):
    """RESOURCE_EXHAUSTED / MESSAGE_TOO_LARGE: the request message is over the
    sidecar's ``--message-bytes-max``; nothing stored. Never retried: the same
    request can never succeed."""

    @property
    def limit_bytes(self) -> Optional[int]:
        """The sidecar's message size limit in bytes, when it sent one."""
        try:
            return int(self.metadata["limit_bytes"])
        except (KeyError, ValueError):
            return None


class StoreFull(StepwellError):
    """RESOURCE_EXHAUSTED / STORE_FULL: the sidecar's disk or SQLite size cap is
    full; nothing stored. Reads still work; writes succeed again only after an
    operator frees space (deletes turns), so the client does not retry."""


class Unauthenticated(StepwellError):
    """UNAUTHENTICATED: the call carried no token, or one the sidecar does not
    know. Never retried: the same token is refused again."""


class PermissionDenied(StepwellError):
    """PERMISSION_DENIED: the token is known but has no grant of the needed
    role for the namespace. Never retried: only an operator's grant helps."""


class ThreadBusy(StepwellError):
    """Raised by a fenced :mod:`stepwell.langgraph` saver when another worker
    holds the lease of the thread (Begin answered IN_PROGRESS): the thread is
    being run elsewhere right now. ``.metadata`` has ``key``, ``thread_id``
    and, when known, ``lease_expires_at`` (RFC 3339)."""

    @property
    def thread_id(self) -> str:
        return self.metadata.get("thread_id", "")


class Unavailable(StepwellError):
    """UNAVAILABLE: the store could not commit or the sidecar is unreachable."""


class OperationFailed(StepwellError):
    """Raised by ``once()`` when the key's record is FAILED (a permanent release)."""


class OnceTimeout(StepwellError):
    """Raised by ``once()`` when another holder kept the key past ``wait_timeout``."""


class WaitError(StepwellError):
    """A wait that cannot give what was asked of it; ``.wait`` is the wait
    as the sidecar last reported it (None when it sent none)."""

    wait: Optional[waits_pb2.Wait] = None


class WaitSettled(WaitError):
    """ALREADY_EXISTS / WAIT_SETTLED: a Signal (or CancelWait) of a wait that
    another call settled otherwise. ``.wait`` is the settled wait, the
    winner's payload included (the client reads it with GetWait when it was
    too large for the error's trailers, and then ``payload_omitted`` stays
    True only if that read failed)."""

    payload_omitted: bool = False


class WaitNotFound(StepwellError):
    """NOT_FOUND / WAIT_NOT_FOUND: Await, GetWait of an unknown wait (or one
    deleted with its turn)."""


class WaitExpired(WaitError):
    """Raised by ``wait_for_signal()`` and ``sleep_until()`` when the wait was
    settled EXPIRED at its ``expire_at``: no signal will ever resolve it."""


class WaitCancelled(WaitError):
    """Raised by ``wait_for_signal()`` and ``sleep_until()`` when the wait was
    settled CANCELLED (CancelWait)."""


class WaitTimeout(WaitError):
    """Raised by ``wait_for_signal()`` when its ``timeout`` passed with the
    wait still pending; the wait stays pending, so a later call (in this
    process or another) can wait for it again."""


_BY_REASON: Dict[str, Type[StepwellError]] = {
    "CHECKPOINT_CONFLICT": CheckpointConflict,
    "WORKFLOW_VERSION_MISMATCH": WorkflowVersionMismatch,
    "KEY_REUSED": KeyReused,
    "LEASE_LOST": LeaseLost,
    "NOT_ACQUIRED": NotAcquired,
    "RESULT_MISMATCH": ResultMismatch,
    "KEY_NOT_FOUND": KeyNotFound,
    "RECORD_EXISTS": RecordExists,
    "RECORD_NOT_FOUND": RecordNotFound,
    "OVERLOADED": Overloaded,
    "MESSAGE_TOO_LARGE": MessageTooLarge,
    "STORE_FULL": StoreFull,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
    "WAIT_SETTLED": WaitSettled,
    "WAIT_NOT_FOUND": WaitNotFound,
}

_BY_CODE: Dict[grpc.StatusCode, Type[StepwellError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    # A proxy in front of the sidecar may refuse a call without an ErrorInfo.
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
}


def _details(trailing: Optional[Iterable[Any]]) -> Optional[bytes]:
    if not trailing:
        return None
    for item in trailing:
        key, value = item[0], item[1]
        if key == _DETAILS_KEY:
            return value if isinstance(value, bytes) else None
    return None


def from_rpc_error(err: grpc.RpcError) -> StepwellError:
    """Converts a ``grpc.RpcError`` (sync or aio) into a :class:`StepwellError`."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN  # type: ignore[attr-defined]
    message = err.details() if hasattr(err, "details") else str(err)  # type: ignore[attr-defined]
    try:
        trailing = err.trailing_metadata()  # type: ignore[attr-defined]
    except Exception:  # pragma: no cover - defensive
        trailing = None
    reason, field = "", ""
    metadata: Dict[str, str] = {}
    violations: List[Tuple[str, str]] = []
    settled: Optional[waits_pb2.WaitSettled] = None
    raw = _details(trailing)
    if raw:
        status = status_pb2.Status()
        try:
            status.ParseFromString(raw)
        except Exception:  # pragma: no cover - a malformed trailer
            status = status_pb2.Status()
        for any_ in status.details:
            if any_.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                any_.Unpack(info)
                if not reason or info.domain == DOMAIN:
                    reason = info.reason
                    metadata = dict(info.metadata)
            elif any_.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                any_.Unpack(bad)
                for v in bad.field_violations:
                    violations.append((v.field, v.description))
            elif any_.Is(waits_pb2.WaitSettled.DESCRIPTOR):
                settled = waits_pb2.WaitSettled()
                any_.Unpack(settled)
        if violations:
            field = violations[0][0]
    if not reason and _connection_lost(code, message or ""):
        code, message = grpc.StatusCode.UNAVAILABLE, f"connection to the sidecar lost: {message}"
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code) or StepwellError
    exc = cls(code, message or "", reason, field, metadata, violations)
    if settled is not None and isinstance(exc, WaitSettled):
        exc.wait = settled.wait
        # The operation that called fills in the payload the trailers left out.
        exc.payload_omitted = settled.payload_omitted
    return exc


def _connection_lost(code: grpc.StatusCode, message: str) -> bool:
    """Whether a status that did not come from the sidecar (every status of
    the sidecar's own carries an ErrorInfo) is gRPC's report of a connection
    to it lost mid-call, which is then UNAVAILABLE (and retried) like a
    connection that cannot be made.

    gRPC reports a connection that was closed or reset under a call as
    UNAVAILABLE already ("Stream removed (Socket closed)"), though not
    always: its status for a stream removed with its transport has been
    UNKNOWN or INTERNAL too. A stream the peer reset with CANCEL (a proxy in
    between that lost the sidecar) is CANCELLED ("Received RST_STREAM with
    error code 8"). gRPC Python gives no cause to look at, so its words
    decide; a CANCELLED of the caller's own ("Locally cancelled by
    application!", "Channel closed!") has neither and stays one, as does a
    stream the peer reset for another reason (e.g. a protocol error).
    """
    if code == grpc.StatusCode.CANCELLED:
        return "RST_STREAM with error code 8" in message
    if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
        return "Stream removed" in message and "RST_STREAM" not in message
    return False
