"""A checkpoint store for "one logical checkpoint per execution" engines.

Fits the durable-execution model where each execution has ONE checkpoint that
is overwritten after every step (status running / failed / paused /
completed), on top of stepwell's append-only log:

* ``save()`` appends a checkpoint with a new, strictly increasing timestamp
  (the log keeps every version: "overwrite" means "the newest wins");
  the timestamp is the store's clock, but never at or below the newest
  timestamp the store has seen for that execution (by its own saves and
  loads), so a worker whose clock is behind another's still saves the
  newest version: the guarantee does not depend on clocks agreeing;
* ``load()`` is Restore(newest_first, page_size=1): the latest checkpoint;
* ``history()`` restores every version, oldest first;
* ``list()`` lists executions by status (ListTurns);
* ``delete()`` / ``cleanup()`` remove executions (DeleteTurn).

Only ``completed`` is *terminal* in stepwell's sense: a ``failed`` execution
is resumable (the failed step is retried on resume), so it stays an OPEN turn
and is listed among the executions to recover, like ``running`` and
``paused``. The checkpoint's stepwell phase is the status, so ``list(status)``
filters on the last phase.

:class:`AsyncCheckpointStore` is the asyncio twin, on an
:class:`stepwell.AsyncClient`. Both stores run the same logic (``_StoreLogic``,
operations in the sense of :mod:`stepwell._core`); only the driving differs.
"""

from __future__ import annotations

import datetime as _dt
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from . import _core
from ._core import Op
from .aio import AsyncClient
from .client import Client
from .v1 import checkpoint_pb2 as cp

RUNNING = "running"
FAILED = "failed"
PAUSED = "paused"
COMPLETED = "completed"
STATUSES = (RUNNING, FAILED, PAUSED, COMPLETED)
TERMINAL_STATUSES = (COMPLETED,)


def _ts_to_datetime(ts: Any) -> Optional[_dt.datetime]:
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    return ts.ToDatetime(tzinfo=_dt.timezone.utc)


@dataclass
class ExecutionCheckpoint:
    """One saved version of an execution's checkpoint."""

    execution_id: str
    status: str
    state: Any
    step_index: Optional[int] = None
    step_name: Optional[str] = None
    error: Optional[Dict[str, Any]] = None
    metadata: Dict[str, Any] = field(default_factory=dict)
    workflow_version: str = ""
    timestamp_ns: int = 0
    recorded_at: Optional[_dt.datetime] = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def resumable(self) -> bool:
        """running, paused and failed executions can be resumed."""
        return not self.terminal

    @property
    def timestamp(self) -> _dt.datetime:
        return _dt.datetime.fromtimestamp(self.timestamp_ns / 1e9, tz=_dt.timezone.utc)

    @classmethod
    def from_proto(cls, ck: cp.Checkpoint) -> "ExecutionCheckpoint":
        doc = json.loads(ck.state.decode("utf-8")) if ck.state else {}
        return cls(
            execution_id=ck.turn_id,
            status=doc.get("status", ck.phase),
            state=doc.get("state"),
            step_index=doc.get("step_index"),
            step_name=doc.get("step_name"),
            error=doc.get("error"),
            metadata=doc.get("metadata") or {},
            workflow_version=ck.workflow_version,
            timestamp_ns=ck.timestamp.seconds * 1_000_000_000 + ck.timestamp.nanos,
            recorded_at=_ts_to_datetime(ck.recorded_at),
        )


@dataclass
class ExecutionSummary:
    """An execution as ListTurns describes it."""

    execution_id: str
    status: str
    checkpoint_count: int
    updated_at: Optional[_dt.datetime]
    started_at: Optional[_dt.datetime]
    workflow_version: str

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class _StoreLogic:
    """What :class:`CheckpointStore` and :class:`AsyncCheckpointStore` do,
    written once: each method returns a :mod:`stepwell._core` operation, which
    the sync store runs on its :class:`Client` and the asyncio store on its
    :class:`AsyncClient`. The per-execution floor (``_last``) is plain state
    under a lock that is never held across a call, so it serves threads and
    tasks alike."""

    client: Any

    def __init__(
        self,
        client: Any,
        *,
        session_id: str = "",
        workflow_version: str = "",
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        """``clock`` returns the current time in nanoseconds since the epoch
        (default ``time.time_ns``); it stamps saves, subject to the
        per-execution floor described in :meth:`save`."""
        self.client = client
        self.session_id = session_id
        self.workflow_version = workflow_version
        self._clock = clock
        # Newest timestamp seen per execution (saved or loaded by this store).
        self._last: Dict[str, int] = {}
        self._lock = threading.Lock()

    def _seen(self, execution_id: str, ns: int) -> None:
        with self._lock:
            if ns > self._last.get(execution_id, 0):
                self._last[execution_id] = ns

    def _next_ns(self, execution_id: str) -> Op[int]:
        # Strictly above every timestamp seen for the execution, so a save is
        # the newest version whatever the clocks of earlier savers said, and
        # two saves never share a dedup key (which would make the second a
        # CHECKPOINT_CONFLICT).
        with self._lock:
            known = execution_id in self._last
        if not known:
            # Never saved nor loaded here: read the newest stored timestamp
            # once (one Restore newest_first, page_size=1).
            ck = yield from _core.latest(self.client, execution_id)
            self._seen(execution_id, ExecutionCheckpoint.from_proto(ck).timestamp_ns if ck is not None else 0)
        with self._lock:
            ns = max(self._clock(), self._last.get(execution_id, 0) + 1)
            self._last[execution_id] = ns
            return ns

    def _save(
        self,
        execution_id: str,
        state: Any,
        status: str,
        step_index: Optional[int],
        step_name: Optional[str],
        error: Optional[BaseException | str | Dict[str, Any]],
        metadata: Optional[Dict[str, Any]],
        workflow_version: Optional[str],
    ) -> Op[ExecutionCheckpoint]:
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
        err: Optional[Dict[str, Any]]
        if error is None:
            err = None
        elif isinstance(error, BaseException):
            err = {"type": type(error).__name__, "message": str(error)}
        elif isinstance(error, dict):
            err = dict(error)
        else:
            err = {"type": "Error", "message": str(error)}
        doc = {
            "status": status,
            "step_index": step_index,
            "step_name": step_name,
            "error": err,
            "metadata": metadata or {},
            "state": state,
        }
        version = self.workflow_version if workflow_version is None else workflow_version
        ns = yield from self._next_ns(execution_id)
        resp = yield from _core.checkpoint(
            self.client,
            execution_id,
            status,
            doc,
            ns,
            self.session_id,
            status in TERMINAL_STATUSES,
            version,
            None,
        )
        return ExecutionCheckpoint.from_proto(resp.checkpoint)

    def _load(self, execution_id: str, expect_workflow_version: str) -> Op[Optional[ExecutionCheckpoint]]:
        ck = yield from _core.latest(self.client, execution_id, expect_workflow_version=expect_workflow_version)
        if ck is None:
            self._seen(execution_id, 0)
            return None
        out = ExecutionCheckpoint.from_proto(ck)
        self._seen(execution_id, out.timestamp_ns)
        return out

    def _history(self, execution_id: str) -> Op[List[ExecutionCheckpoint]]:
        cks = yield from _core.restore(self.client, execution_id)
        return [ExecutionCheckpoint.from_proto(ck) for ck in cks]

    def _list(self, status: Optional[str], updated_before: Any) -> Op[List[ExecutionSummary]]:
        if status is not None and status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
        if status is None:
            turn_status = "any"
        elif status in TERMINAL_STATUSES:
            turn_status = "terminal"
        else:
            turn_status = "open"
        pages = _core.turn_pages(
            self.client, {"status": turn_status, "session_id": self.session_id, "updated_before": updated_before}
        )
        out = []
        for t in (yield from pages.all()):
            if status is not None and t.last_phase != status:
                continue
            out.append(
                ExecutionSummary(
                    execution_id=t.turn_id,
                    status=t.last_phase,
                    checkpoint_count=int(t.checkpoint_count),
                    updated_at=_ts_to_datetime(t.last_timestamp),
                    started_at=_ts_to_datetime(t.first_timestamp),
                    workflow_version=t.workflow_version,
                )
            )
        return out

    def _resumable(self) -> Op[List[ExecutionSummary]]:
        every = yield from self._list(None, None)
        return [s for s in every if not s.terminal]

    def _delete(self, execution_id: str) -> Op[int]:
        n = yield from _core.delete_turn(self.client, execution_id, None)
        with self._lock:
            self._last.pop(execution_id, None)
        return n

    def _cleanup(self, older_than: Optional[_dt.timedelta], status: Optional[str]) -> Op[int]:
        before = None
        if older_than is not None:
            before = _dt.datetime.now(_dt.timezone.utc) - older_than
        n = 0
        for s in (yield from self._list(status, before)):
            yield from self._delete(s.execution_id)
            n += 1
        return n


class CheckpointStore(_StoreLogic):
    """Save/load/list/cleanup of one logical checkpoint per execution, on stepwell.

    Use a dedicated namespace (the client's) or ``session_id`` to keep the
    store's executions apart from other turns: ``list()`` only sees turns of
    the client's namespace, filtered by ``session_id`` when one is given.
    """

    client: Client

    def __init__(
        self,
        client: Client,
        *,
        session_id: str = "",
        workflow_version: str = "",
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        """``clock`` returns the current time in nanoseconds since the epoch
        (default ``time.time_ns``); it stamps saves, subject to the
        per-execution floor described in :meth:`save`."""
        super().__init__(client, session_id=session_id, workflow_version=workflow_version, clock=clock)

    def save(
        self,
        execution_id: str,
        state: Any,
        *,
        status: str = RUNNING,
        step_index: Optional[int] = None,
        step_name: Optional[str] = None,
        error: Optional[BaseException | str | Dict[str, Any]] = None,
        metadata: Optional[Dict[str, Any]] = None,
        workflow_version: Optional[str] = None,
    ) -> ExecutionCheckpoint:
        """Overwrites the execution's checkpoint (appends a newer version).

        ``error`` (an exception, a string or a dict) is preserved as
        ``{"type": …, "message": …}`` so a failed step can be inspected and retried.

        The timestamp is ``clock()``, raised to one nanosecond above the newest
        timestamp this store has seen for the execution (by its saves and
        loads), so a worker whose clock is behind the previous saver's still
        appends the newest version. The first save of an execution this store
        has neither saved nor loaded reads the newest stored timestamp first:
        one extra Restore (newest_first, page_size=1), once per execution.
        """
        return self.client._run(
            self._save(execution_id, state, status, step_index, step_name, error, metadata, workflow_version)
        )

    def load(self, execution_id: str, *, expect_workflow_version: str = "") -> Optional[ExecutionCheckpoint]:
        """The latest checkpoint of the execution, or None if it has none.

        Later saves of the execution are stamped above its timestamp."""
        return self.client._run(self._load(execution_id, expect_workflow_version))

    def history(self, execution_id: str) -> List[ExecutionCheckpoint]:
        """Every saved version, oldest first."""
        return self.client._run(self._history(execution_id))

    def list(self, status: Optional[str] = None, *, updated_before: Any = None) -> List[ExecutionSummary]:
        """Executions whose latest status is ``status`` (all when None), ordered by id."""
        return self.client._run(self._list(status, updated_before))

    def resumable(self) -> List[ExecutionSummary]:
        """Executions to recover at start-up: running, paused or failed."""
        return self.client._run(self._resumable())

    def delete(self, execution_id: str) -> int:
        """Deletes an execution and its whole history; returns the versions deleted."""
        return self.client._run(self._delete(execution_id))

    def cleanup(self, *, older_than: Optional[_dt.timedelta] = None, status: Optional[str] = COMPLETED) -> int:
        """Deletes executions with ``status`` (default completed; None = any) whose
        latest checkpoint is older than ``older_than`` (default: any age).
        Returns the number of executions deleted."""
        return self.client._run(self._cleanup(older_than, status))


class AsyncCheckpointStore(_StoreLogic):
    """The asyncio twin of :class:`CheckpointStore`, on a :class:`stepwell.AsyncClient`:
    the same methods, awaitable, the same logic (the same skew-proof floor:
    a save is stamped above the newest timestamp the store has seen for the
    execution, and an execution it has neither saved nor loaded costs one
    Restore before its first save).
    """

    client: AsyncClient

    def __init__(
        self,
        client: AsyncClient,
        *,
        session_id: str = "",
        workflow_version: str = "",
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        """``clock`` returns the current time in nanoseconds since the epoch
        (default ``time.time_ns``); it stamps saves, subject to the
        per-execution floor described in :meth:`CheckpointStore.save`."""
        super().__init__(client, session_id=session_id, workflow_version=workflow_version, clock=clock)

    async def save(
        self,
        execution_id: str,
        state: Any,
        *,
        status: str = RUNNING,
        step_index: Optional[int] = None,
        step_name: Optional[str] = None,
        error: Optional[BaseException | str | Dict[str, Any]] = None,
        metadata: Optional[Dict[str, Any]] = None,
        workflow_version: Optional[str] = None,
    ) -> ExecutionCheckpoint:
        """Overwrites the execution's checkpoint (appends a newer version);
        see :meth:`CheckpointStore.save`."""
        return await self.client._run(
            self._save(execution_id, state, status, step_index, step_name, error, metadata, workflow_version)
        )

    async def load(self, execution_id: str, *, expect_workflow_version: str = "") -> Optional[ExecutionCheckpoint]:
        """The latest checkpoint of the execution, or None if it has none.

        Later saves of the execution are stamped above its timestamp."""
        return await self.client._run(self._load(execution_id, expect_workflow_version))

    async def history(self, execution_id: str) -> List[ExecutionCheckpoint]:
        """Every saved version, oldest first."""
        return await self.client._run(self._history(execution_id))

    async def list(self, status: Optional[str] = None, *, updated_before: Any = None) -> List[ExecutionSummary]:
        """Executions whose latest status is ``status`` (all when None), ordered by id."""
        return await self.client._run(self._list(status, updated_before))

    async def resumable(self) -> List[ExecutionSummary]:
        """Executions to recover at start-up: running, paused or failed."""
        return await self.client._run(self._resumable())

    async def delete(self, execution_id: str) -> int:
        """Deletes an execution and its whole history; returns the versions deleted."""
        return await self.client._run(self._delete(execution_id))

    async def cleanup(self, *, older_than: Optional[_dt.timedelta] = None, status: Optional[str] = COMPLETED) -> int:
        """Deletes executions with ``status`` (default completed; None = any) whose
        latest checkpoint is older than ``older_than`` (default: any age).
        Returns the number of executions deleted."""
        return await self.client._run(self._cleanup(older_than, status))
