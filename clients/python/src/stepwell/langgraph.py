"""LangGraph checkpoint savers backed by stepwell's RecordService, and stores on its MemoryService.

The long-term memory stores, :class:`StepwellStore` and
:class:`AsyncStepwellStore` (LangGraph's ``BaseStore``), live in
:mod:`stepwell._store` and are re-exported here; the rest of this
documentation is the savers'.

:class:`StepwellSaver` (blocking) and :class:`AsyncStepwellSaver` (asyncio)
implement LangGraph's ``BaseCheckpointSaver``: a graph compiled with one keeps
its checkpoints, channel values and pending writes in the stepwell sidecar, so
a run that dies resumes from the sidecar in any process, and the sidecar's
group commit makes every save durable before it is acknowledged.

    from stepwell.langgraph import StepwellSaver

    with StepwellSaver.from_address("127.0.0.1:50051", namespace="agents") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "t-1"}})

Each saver method is one RecordService call (plus, for a fenced saver, the
lease calls described below), unless what it carries does not fit one gRPC
message of 4 MiB: ``get_tuple`` and ``list`` ask for the next page when the
sidecar's response byte budget (or its page size) cut a page short, and a
checkpoint larger than the budget comes cut into pieces over as many pages as
it takes (ListRecords with ``split_entries``), which the saver joins; ``put``
and ``put_writes`` whose records add up to more than ``request_bytes_max``
(4 MiB less 64 KiB) send them in several PutRecords (see below). So a tuple
of any size round-trips with the client's and the sidecar's default limits,
as long as each channel value and each write fits a record
(``--record-bytes-max``, and one message). Filtering by thread, namespace,
id, metadata and ``before``, and the newest-first order, are the sidecar's:
the client never scans.

Mapping of LangGraph's model onto records:

* namespace: the saver's namespace; turn_id: the ``thread_id``; scope: the
  ``checkpoint_ns`` (``""`` for the root graph, ``"node:task|node:task"`` for
  nested subgraphs).
* kind ``"checkpoint"``: id = ``checkpoint_id``; parent_id = the parent
  checkpoint's id; payload and content_type = ``serde.dumps_typed`` of the
  checkpoint *without* ``channel_values`` (the type string is the content
  type); metadata = the JSON of ``get_serializable_checkpoint_metadata``;
  refs = the ids of the blobs of every channel in ``channel_versions``.
  Stored with PUT_MODE_UPSERT.
* kind ``"blob"``: id = ``json.dumps([channel, str(version)])``; payload and
  content_type = ``serde.dumps_typed`` of the channel's value, or content type
  ``"empty"`` and no payload when the channel has no value. A blob is stored
  once per (channel, version): ``put`` sends only the blobs of
  ``new_versions``, with PUT_MODE_INSERT_IF_ABSENT, in the same PutRecords as
  the checkpoint; when they do not fit one request, in requests before the
  checkpoint's, so that the checkpoint is stored after every blob it uses
  (blobs of a put that failed midway are of versions no checkpoint names).
* kind ``"write"``: parent_id = the checkpoint's id; id =
  ``checkpoint_id \\x1f task_path \\x1f task_id \\x1f idx+2**31`` (ten digits),
  so the sidecar's bytewise order of children is LangGraph's
  ``writes_sort_key`` order; metadata = JSON ``{"task_id", "task_path",
  "channel", "idx"}``; payload and content_type = ``serde.dumps_typed`` of the
  value. Writes to the special channels of ``WRITES_IDX_MAP`` (errors,
  interrupts, resumes, scheduled) replace what is stored; a regular write
  keeps the first one stored (PUT_MODE_INSERT_IF_ABSENT), so a task's retried
  writes never change what a resumed run sees. One PutRecords per
  ``put_writes``, or, when its writes do not fit one request, several: then
  its regular writes form a group, each one's id ending in ``\x1f`` and the
  group's random id, its metadata naming the ``group`` and how many writes it
  has (``parts``), and a reader counts a group's writes only once all of them
  are stored, so a put_writes cut short by a crash leaves the task as if it had
  written nothing, and the task runs again.
* ``get_tuple`` is ListRecords of kind ``"checkpoint"`` in the thread and
  namespace (the given id, or the newest), page size 1, with its ``"write"``
  children and ``"blob"`` refs, pieces of one cut across pages joined;
  ``list`` is the same across the filters
  LangGraph passes (``filter`` becomes ``metadata_contains``, ``before`` is
  ``before_id``, ``limit`` the page size).
* ``delete_thread`` deletes the turn; ``delete_for_runs`` deletes the
  checkpoints whose metadata has one of the ``run_id`` values, with their
  writes and the blobs no other checkpoint uses; ``prune`` keeps the newest
  checkpoint of each namespace of each thread (``"keep_latest"``) or deletes
  the threads (``"delete"``); ``copy_thread`` is CopyTurn. Empty lists of runs
  or threads make no call; more than 1000 are sent 1000 a call.
* Channel versions are strings ``"<32-digit counter>.<random fraction>"``, as
  LangGraph's other savers make them.

Fencing (``fenced=True``): before its first put on a thread the saver takes a
lease on the thread through the idempotency service (Begin on
``"langgraph-thread:" + thread_id``, or a SHA-256 of the thread id when that
is over 256 bytes), extends it while puts continue, and sends every
PutRecords with a ``fence`` on that lease: the sidecar refuses it unless the
lease is still this saver's. A second worker that runs the same thread at the
same time gets :class:`stepwell.ThreadBusy` at its first put (or, if it took
the lease over after the first worker's lapsed, the first worker's puts fail
with :class:`stepwell.LeaseLost`), never a silent fork of the thread's
history. ``with saver.thread_lease(thread_id):`` (``async with`` on the async
saver) holds the lease around a run, extending it in the background, and
releases it on exit so another worker may continue the thread at once; a
lease taken implicitly by a put lapses ``lease`` seconds after the last put,
or is released by ``close()``. A put after such a lease lapsed (a run paused
at ``interrupt()`` longer than the lease) takes the thread again if no other
worker leased it in between (the key's next attempt is this saver's), and
otherwise fails with the error of its refused Extend.

Not covered: checkpoints of format version < 4 written by old LangGraph
versions (their pending sends are not migrated from the parent's writes), and
``prune("keep_latest")`` does not preserve the ancestors a ``DeltaChannel``
(beta) needs to rebuild its value. ``prune("keep_latest")`` keeps the newest
checkpoint of every namespace of a thread, the namespaces of subgraph calls
that finished long ago included. Checkpoint metadata goes to the sidecar as
JSON that its filters compare exactly on every store, so its integers must
fit 64 bits: a put whose metadata has a larger one is refused
(INVALID_ARGUMENT), not altered.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Coroutine, Dict, List, Optional, Tuple, TypeVar, cast

import grpc
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ._store import AsyncStepwellStore, StepwellStore
from .aio import AsyncClient
from .client import Client
from .errors import LeaseLost, NotAcquired, StepwellError, ThreadBusy
from .v1 import idempotency_pb2 as ip
from .v1 import records_pb2 as rec

T = TypeVar("T")

__all__ = ["AsyncStepwellSaver", "AsyncStepwellStore", "StepwellSaver", "StepwellStore", "ThreadLease", "thread_lease_key"]

CHECKPOINT_KIND = "checkpoint"
BLOB_KIND = "blob"
WRITE_KIND = "write"
EMPTY = "empty"
# Separates the parts of a write's id; below every printable character, so ids
# compare as LangGraph's (task_path, task_id, idx) tuples do.
SEP = "\x1f"
IDX_OFFSET = 2**31
# The most turns, or metadata filters, one DeleteRecords may carry.
DELETE_BATCH_MAX = 1000
# The sidecar's default --page-size-max: a list limit above it is paged.
PAGE_SIZE_MAX = 10_000
# What one PutRecords carries at most: the sidecar's default
# --message-bytes-max (4 MiB) less room for the request's own fields. A put or
# put_writes whose records add up to more is sent as several requests.
REQUEST_BYTES_MAX = (4 << 20) - (64 << 10)
# A record's framing inside a PutRecordsRequest: its tag and length.
RECORD_FRAMING_BYTES = 8
LEASE_KEY_PREFIX = "langgraph-thread:"
LEASE_KEY_BYTES_MAX = 256
PRUNE_STRATEGIES = ("keep_latest", "delete")


def thread_lease_key(thread_id: str) -> str:
    """The idempotency key a fenced saver leases for ``thread_id``."""
    key = LEASE_KEY_PREFIX + thread_id
    if len(key.encode("utf-8")) <= LEASE_KEY_BYTES_MAX:
        return key
    return "langgraph-thread-sha256:" + hashlib.sha256(thread_id.encode("utf-8")).hexdigest()


def blob_id(channel: str, version: Any) -> str:
    return json.dumps([channel, str(version)])


def write_id(checkpoint_id: str, task_path: str, task_id: str, idx: int) -> str:
    return f"{checkpoint_id}{SEP}{task_path}{SEP}{task_id}{SEP}{idx + IDX_OFFSET:010d}"


def _batches(records: Sequence[rec.Record], budget: int) -> List[List[rec.Record]]:
    """``records`` in order, in runs whose encoded size fits ``budget`` (a
    record larger than it makes a run of its own)."""
    runs: List[List[rec.Record]] = []
    used = 0
    for r in records:
        size = r.ByteSize() + RECORD_FRAMING_BYTES
        if not runs or (runs[-1] and used + size > budget):
            runs.append([])
            used = 0
        runs[-1].append(r)
        used += size
    return runs


class _Pieces:
    """Joins the pieces of the entries a ListRecords with ``split_entries``
    cut across pages: ``feed`` each page in turn; it answers the entries that
    page completed, each as (record, children, refs)."""

    def __init__(self) -> None:
        self.open: Optional[Tuple[rec.Record, List[rec.Record], List[rec.Record]]] = None

    def feed(self, page: rec.ListRecordsResponse) -> List[Tuple[rec.Record, List[rec.Record], List[rec.Record]]]:
        done = []
        for entry in page.entries:
            if entry.continued:
                if self.open is None:
                    raise StepwellError(
                        grpc.StatusCode.INTERNAL, "a continued entry without the entry it continues", "PROTOCOL"
                    )
                self.open[1].extend(entry.children)
                self.open[2].extend(entry.refs)
            else:
                self.open = (entry.record, list(entry.children), list(entry.refs))
            if not entry.cut:
                done.append(self.open)
                self.open = None
        return done


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _chunks(items: Sequence[Any], size: int = DELETE_BATCH_MAX) -> List[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _check_strategy(strategy: str) -> None:
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"unknown prune strategy {strategy!r}: expected one of {PRUNE_STRATEGIES}")


@dataclass
class ThreadLease:
    """A thread's lease as a saver holds it (what ``thread_lease`` yields):
    the idempotency ``key``, the fencing ``token`` every put of the thread
    carries, and ``lost``, set when the background extension found the lease
    taken over (the thread's puts are then refused)."""

    thread_id: str
    key: str
    token: int
    extended_at: float
    # Begin's attempt on the key: a lapsed lease is taken again only when
    # the next attempt is this saver's (no one leased the thread between).
    attempt: int = 0
    # Open thread_lease() blocks; while any is open a heartbeat extends the lease.
    holds: int = 0
    # Set by the heartbeat when Extend found the lease taken over.
    lost: bool = False
    stop: Optional[threading.Event] = None
    thread: Optional[threading.Thread] = None
    task: Optional["asyncio.Task[None]"] = None

    def fence(self) -> rec.Fence:
        return rec.Fence(key=self.key, lease_token=self.token)


class _RecordSaverBase(BaseCheckpointSaver[str]):
    """What the two savers share: the requests they send and how answers become tuples."""

    namespace: str
    fenced: bool
    lease: float
    timeout: Optional[float]
    request_bytes_max: int

    def _init_common(
        self,
        namespace: str,
        serde: Optional[SerializerProtocol],
        fenced: bool,
        lease: float,
        timeout: Optional[float],
        request_bytes_max: int,
    ) -> None:
        BaseCheckpointSaver.__init__(self, serde=serde)
        if lease <= 0:
            raise ValueError("lease must be positive")
        if request_bytes_max <= 0:
            raise ValueError("request_bytes_max must be positive")
        self.namespace = namespace
        self.fenced = fenced
        self.lease = float(lease)
        self.timeout = timeout
        self.request_bytes_max = request_bytes_max
        self._leases: Dict[str, ThreadLease] = {}

    # -- versions -----------------------------------------------------------

    def get_next_version(self, current: Optional[str], channel: None) -> str:
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        next_v = current_v + 1
        next_h = random.random()
        return f"{next_v:032}.{next_h:016}"

    # -- requests -----------------------------------------------------------

    def _put_request(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Tuple[str, List[rec.PutRecordsRequest], RunnableConfig]:
        """The PutRecords of a put: one, or, when its records do not fit one
        request, several, the checkpoint in the last. The blobs are stored
        only if absent and are of versions no stored checkpoint names yet,
        so the requests before the last change nothing a reader sees, and
        the checkpoint appears with every blob it uses already stored."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        checkpoint_ns = str(conf.get("checkpoint_ns") or "")
        parent_id = conf.get("checkpoint_id") or ""
        values = checkpoint.get("channel_values") or {}
        stored: Dict[str, Any] = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        content_type, payload = self.serde.dumps_typed(stored)
        head = [
            rec.Record(
                turn_id=thread_id,
                scope=checkpoint_ns,
                kind=CHECKPOINT_KIND,
                id=checkpoint["id"],
                parent_id=parent_id,
                payload=payload,
                content_type=content_type,
                metadata=_json(get_serializable_checkpoint_metadata(config, metadata)),
                refs=[blob_id(ch, ver) for ch, ver in checkpoint["channel_versions"].items()],
                mode=rec.PUT_MODE_UPSERT,
            )
        ]
        records = [self._blob(thread_id, checkpoint_ns, ch, ver, values) for ch, ver in new_versions.items()]
        next_config: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }
        runs = _batches(records + head, self.request_bytes_max)
        if len(runs) == 1:
            runs = [head + records]
        requests = [rec.PutRecordsRequest(namespace=self.namespace, records=run) for run in runs]
        return thread_id, requests, next_config

    def _blob(
        self, thread_id: str, checkpoint_ns: str, channel: str, version: Any, values: Dict[str, Any]
    ) -> rec.Record:
        """The blob of ``channel`` at ``version``: its value, or none."""
        if channel in values:
            blob_type, blob = self.serde.dumps_typed(values[channel])
        else:
            blob_type, blob = EMPTY, b""
        return rec.Record(
            turn_id=thread_id,
            scope=checkpoint_ns,
            kind=BLOB_KIND,
            id=blob_id(channel, version),
            payload=blob,
            content_type=blob_type,
            mode=rec.PUT_MODE_INSERT_IF_ABSENT,
        )

    def _put_writes_request(
        self,
        config: RunnableConfig,
        writes: Sequence[Tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Tuple[str, List[rec.PutRecordsRequest]]:
        """The PutRecords of a put_writes: one, or, when the writes do not fit
        one request, several. Then the task's regular writes form a group:
        each one's id and metadata name the group and how many writes it has,
        and a reader takes a group's writes only once all of them are stored
        (``_to_tuple``), so a task whose writes were cut short by a crash is
        run again, as if none were stored."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        checkpoint_ns = str(conf.get("checkpoint_ns") or "")
        checkpoint_id = str(conf["checkpoint_id"])
        encoded = []
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            encoded.append((channel, idx, self.serde.dumps_typed(value)))

        def records(group: Optional[str]) -> List[rec.Record]:
            regular = sum(1 for channel, _, _ in encoded if channel not in WRITES_IDX_MAP)
            out = []
            for channel, idx, (content_type, payload) in encoded:
                meta: Dict[str, Any] = {"task_id": task_id, "task_path": task_path, "channel": channel, "idx": idx}
                record_id = write_id(checkpoint_id, task_path, task_id, idx)
                if group is not None and channel not in WRITES_IDX_MAP:
                    meta.update(group=group, parts=regular)
                    record_id += SEP + group
                out.append(
                    rec.Record(
                        turn_id=thread_id,
                        scope=checkpoint_ns,
                        kind=WRITE_KIND,
                        id=record_id,
                        parent_id=checkpoint_id,
                        payload=payload,
                        content_type=content_type,
                        metadata=_json(meta),
                        mode=rec.PUT_MODE_UPSERT if channel in WRITES_IDX_MAP else rec.PUT_MODE_INSERT_IF_ABSENT,
                    )
                )
            return out

        runs = _batches(records(None), self.request_bytes_max)
        if len(runs) > 1:
            runs = _batches(records(uuid.uuid4().hex), self.request_bytes_max)
        return thread_id, [rec.PutRecordsRequest(namespace=self.namespace, records=run) for run in runs]

    def _get_tuple_request(self, config: RunnableConfig) -> rec.ListRecordsRequest:
        conf = config["configurable"]
        return rec.ListRecordsRequest(
            namespace=self.namespace,
            turn_id=str(conf["thread_id"]),
            scope=str(conf.get("checkpoint_ns") or ""),
            has_scope=True,
            kind=CHECKPOINT_KIND,
            id=get_checkpoint_id(config) or "",
            page_size=1,
            children_kind=WRITE_KIND,
            refs_kind=BLOB_KIND,
            split_entries=True,
        )

    def _list_request(
        self,
        config: Optional[RunnableConfig],
        filter: Optional[Dict[str, Any]],
        before: Optional[RunnableConfig],
        limit: Optional[int],
    ) -> rec.ListRecordsRequest:
        req = rec.ListRecordsRequest(
            namespace=self.namespace,
            kind=CHECKPOINT_KIND,
            children_kind=WRITE_KIND,
            refs_kind=BLOB_KIND,
            page_size=min(limit, PAGE_SIZE_MAX) if limit else 0,
            split_entries=True,
        )
        if config:
            conf = config.get("configurable") or {}
            if conf.get("thread_id") is not None:
                req.turn_id = str(conf["thread_id"])
            if conf.get("checkpoint_ns") is not None:
                req.scope = str(conf["checkpoint_ns"])
                req.has_scope = True
            if checkpoint_id := conf.get("checkpoint_id"):
                req.id = str(checkpoint_id)
        if filter:
            req.metadata_contains = _json(filter)
        if before is not None and (before_id := get_checkpoint_id(before)):
            req.before_id = str(before_id)
        return req

    def _delete_thread_request(self, thread_id: str) -> rec.DeleteRecordsRequest:
        return rec.DeleteRecordsRequest(namespace=self.namespace, turn_ids=[str(thread_id)])

    def _delete_for_runs_requests(self, run_ids: Sequence[str]) -> List[rec.DeleteRecordsRequest]:
        return [
            rec.DeleteRecordsRequest(
                namespace=self.namespace,
                kind=CHECKPOINT_KIND,
                metadata_any=[_json({"run_id": str(r)}) for r in chunk],
                children_kind=WRITE_KIND,
                refs_kind=BLOB_KIND,
            )
            for chunk in _chunks(list(run_ids))
        ]

    def _prune_requests(self, thread_ids: Sequence[str], strategy: str) -> List[rec.DeleteRecordsRequest]:
        _check_strategy(strategy)
        out = []
        for chunk in _chunks([str(t) for t in thread_ids]):
            if strategy == "delete":
                out.append(rec.DeleteRecordsRequest(namespace=self.namespace, turn_ids=chunk))
            else:
                out.append(
                    rec.DeleteRecordsRequest(
                        namespace=self.namespace,
                        turn_ids=chunk,
                        kind=CHECKPOINT_KIND,
                        keep_latest=True,
                        children_kind=WRITE_KIND,
                        refs_kind=BLOB_KIND,
                    )
                )
        return out

    def _copy_request(self, source_thread_id: str, target_thread_id: str) -> rec.CopyTurnRequest:
        return rec.CopyTurnRequest(
            namespace=self.namespace, source_turn_id=str(source_thread_id), target_turn_id=str(target_thread_id)
        )

    # -- answers ------------------------------------------------------------

    def _to_tuple(self, entry: Tuple[rec.Record, List[rec.Record], List[rec.Record]]) -> CheckpointTuple:
        r, children, refs = entry
        checkpoint: Any = self.serde.loads_typed((r.content_type, r.payload))
        values: Dict[str, Any] = {}
        for blob in refs:
            if blob.content_type == EMPTY:
                continue
            channel = json.loads(blob.id)[0]
            values[channel] = self.serde.loads_typed((blob.content_type, blob.payload))
        checkpoint["channel_values"] = values
        writes = [(w, json.loads(w.metadata)) for w in children]
        # A group's writes count only once every one of them is stored.
        stored: Dict[Tuple[str, str], int] = {}
        for _, meta in writes:
            if "group" in meta:
                key = (meta["task_id"], meta["group"])
                stored[key] = stored.get(key, 0) + 1
        pending = [
            (meta["task_id"], meta["channel"], self.serde.loads_typed((w.content_type, w.payload)))
            for w, meta in writes
            if "group" not in meta or stored[(meta["task_id"], meta["group"])] == meta["parts"]
        ]
        config: RunnableConfig = {
            "configurable": {"thread_id": r.turn_id, "checkpoint_ns": r.scope, "checkpoint_id": r.id}
        }
        parent: Optional[RunnableConfig] = None
        if r.parent_id:
            parent = {"configurable": {"thread_id": r.turn_id, "checkpoint_ns": r.scope, "checkpoint_id": r.parent_id}}
        metadata = cast(CheckpointMetadata, json.loads(r.metadata) if r.metadata else {})
        return CheckpointTuple(config, checkpoint, metadata, parent, pending)

    # -- fencing ------------------------------------------------------------

    def _leased(self, thread_id: str, r: ip.BeginResponse) -> ThreadLease:
        key = thread_lease_key(thread_id)
        if r.outcome == ip.BEGIN_OUTCOME_ACQUIRED:
            return ThreadLease(thread_id, key, int(r.lease_token), time.monotonic(), attempt=int(r.attempt))
        if r.outcome == ip.BEGIN_OUTCOME_IN_PROGRESS:
            until = r.lease_expires_at.ToJsonString() if r.HasField("lease_expires_at") else ""
            raise ThreadBusy(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"thread {thread_id!r} is being run by another worker"
                + (f" (its lease runs until {until})" if until else ""),
                "IN_PROGRESS",
                metadata={"key": key, "thread_id": thread_id, "lease_expires_at": until},
            )
        raise StepwellError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the lease key {key!r} of thread {thread_id!r} was completed or failed by another user of the key",
            ip.BeginOutcome.Name(r.outcome),
            metadata={"key": key, "thread_id": thread_id},
        )

    def _needs_extend(self, lease: ThreadLease) -> bool:
        return lease.holds == 0 and time.monotonic() - lease.extended_at > self.lease / 3.0

    def _renewed(self, lease: ThreadLease, r: ip.BeginResponse) -> bool:
        """Whether a Begin after a lapsed lease's refused Extend took the
        thread back with no one in between: the key's next attempt is ours,
        so no other worker's put reached the thread since (a run paused at
        interrupt() longer than the lease, say), and the run may go on."""
        return r.outcome == ip.BEGIN_OUTCOME_ACQUIRED and int(r.attempt) == lease.attempt + 1


class StepwellSaver(_RecordSaverBase):
    """A blocking LangGraph checkpoint saver on a stepwell sidecar.

    Args:
        client: the :class:`stepwell.Client` to call through (its retry
            policy, timeout, metadata, token and TLS apply).
        namespace: the stepwell namespace of the checkpoints; defaults to the
            client's.
        serde: LangGraph's serializer (default ``JsonPlusSerializer``).
        fenced: take a lease on each thread before putting to it (see the
            module's documentation).
        lease: the lease, in seconds, when fenced.
        timeout: per-call deadline in seconds; the client's default when None.
        request_bytes_max: the most one PutRecords carries (default 4 MiB
            less 64 KiB, for the sidecar's default --message-bytes-max); a
            put or put_writes with more is sent as several requests.
    """

    def __init__(
        self,
        client: Client,
        *,
        namespace: Optional[str] = None,
        serde: Optional[SerializerProtocol] = None,
        fenced: bool = False,
        lease: float = 30.0,
        timeout: Optional[float] = None,
        request_bytes_max: int = REQUEST_BYTES_MAX,
    ) -> None:
        self._init_common(
            client.namespace if namespace is None else namespace, serde, fenced, lease, timeout, request_bytes_max
        )
        self.client = client
        self._owns_client = False
        self._lock = threading.RLock()

    @classmethod
    def from_address(
        cls,
        target: str,
        *,
        namespace: str = "",
        serde: Optional[SerializerProtocol] = None,
        fenced: bool = False,
        lease: float = 30.0,
        request_bytes_max: int = REQUEST_BYTES_MAX,
        **client_kwargs: Any,
    ) -> "StepwellSaver":
        """A saver with its own :class:`stepwell.Client` of ``target``
        (``client_kwargs`` go to the client); ``close()`` or leaving a
        ``with`` block closes it."""
        saver = cls(
            Client(target, namespace=namespace, **client_kwargs),
            serde=serde,
            fenced=fenced,
            lease=lease,
            request_bytes_max=request_bytes_max,
        )
        saver._owns_client = True
        return saver

    def close(self) -> None:
        """Releases the leases this saver holds; closes the client if the saver made it."""
        with self._lock:
            leases = list(self._leases.values())
            self._leases.clear()
        for lease in leases:
            self._stop_heartbeat(lease)
            self._release(lease)
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> "StepwellSaver":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: Any, request: Any) -> Any:
        return self.client._call(method, request, self.timeout)

    # -- reads --------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        req, pieces = self._get_tuple_request(config), _Pieces()
        while True:
            resp = self._call(self.client.record_stub.ListRecords, req)
            done = pieces.feed(resp)
            if done or pieces.open is None or not resp.next_page_token:
                return self._to_tuple(done[0]) if done else None
            req.page_token = resp.next_page_token

    def list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> Iterator[CheckpointTuple]:
        req, pieces = self._list_request(config, filter, before, limit), _Pieces()
        remaining = limit if limit else None
        while True:
            resp = self._call(self.client.record_stub.ListRecords, req)
            for entry in pieces.feed(resp):
                yield self._to_tuple(entry)
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return
            if not resp.next_page_token:
                return
            req.page_token = resp.next_page_token

    # -- writes -------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, requests, next_config = self._put_request(config, checkpoint, metadata, new_versions)
        for req in requests:
            self._put_fenced(thread_id, req)
        return next_config

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[Tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if not writes:
            return
        thread_id, requests = self._put_writes_request(config, writes, task_id, task_path)
        for req in requests:
            self._put_fenced(thread_id, req)

    def _put_fenced(self, thread_id: str, req: rec.PutRecordsRequest) -> None:
        lease = self._fence(thread_id)
        if lease is not None:
            req.fence.CopyFrom(lease.fence())
        try:
            self._call(self.client.record_stub.PutRecords, req)
        except (LeaseLost, NotAcquired):
            if lease is not None:
                with self._lock:
                    # A lease a put took is forgotten, so a later run asks again
                    # (and learns who holds the thread); a held one stays refused.
                    if lease.holds == 0 and self._leases.get(thread_id) is lease:
                        del self._leases[thread_id]
            raise

    # -- deletes and copies ---------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        self._call(self.client.record_stub.DeleteRecords, self._delete_thread_request(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        for req in self._delete_for_runs_requests(run_ids):
            self._call(self.client.record_stub.DeleteRecords, req)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._call(self.client.record_stub.CopyTurn, self._copy_request(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for req in self._prune_requests(thread_ids, strategy):
            self._call(self.client.record_stub.DeleteRecords, req)

    # -- fencing --------------------------------------------------------------

    def _begin(self, thread_id: str) -> ThreadLease:
        r = self.client.begin(thread_lease_key(thread_id), lease=self.lease, timeout=self.timeout)
        return self._leased(thread_id, r)

    def _fence(self, thread_id: str) -> Optional[ThreadLease]:
        with self._lock:
            lease = self._leases.get(thread_id)
            if lease is None:
                if not self.fenced:
                    return None
                lease = self._begin(thread_id)
                self._leases[thread_id] = lease
            elif self._needs_extend(lease):
                try:
                    self.client.extend(lease.key, lease.token, lease=self.lease, timeout=self.timeout)
                    lease.extended_at = time.monotonic()
                except (LeaseLost, NotAcquired) as err:
                    lease = self._renew(thread_id, lease, err)
            return lease

    def _renew(self, thread_id: str, lease: ThreadLease, err: StepwellError) -> ThreadLease:
        """A lease a put took lapsed: taken again if no one leased the thread
        since; otherwise forgotten (a later run asks again), and the put
        fails with the Extend's error."""
        r = self.client.begin(lease.key, lease=self.lease, timeout=self.timeout)
        if self._renewed(lease, r):
            renewed = self._leased(thread_id, r)
            self._leases[thread_id] = renewed
            return renewed
        del self._leases[thread_id]
        if r.outcome == ip.BEGIN_OUTCOME_ACQUIRED:
            self._release(ThreadLease(thread_id, lease.key, int(r.lease_token), time.monotonic()))
        raise err

    def _release(self, lease: ThreadLease) -> None:
        try:
            self.client.release(lease.key, lease.token, timeout=self.timeout)
        except (LeaseLost, NotAcquired):
            pass  # another worker took it over: nothing of ours to release

    def _stop_heartbeat(self, lease: ThreadLease) -> None:
        if lease.stop is not None and lease.thread is not None:
            lease.stop.set()
            lease.thread.join()
            lease.stop = lease.thread = None

    def _heartbeat(self, lease: ThreadLease, stop: threading.Event) -> None:
        while not stop.wait(self.lease / 3.0):
            try:
                self.client.extend(lease.key, lease.token, lease=self.lease, timeout=self.timeout)
                lease.extended_at = time.monotonic()
            except (LeaseLost, NotAcquired):
                lease.lost = True
                return
            except StepwellError:
                continue  # transient: the next beat tries again

    @contextlib.contextmanager
    def thread_lease(self, thread_id: str) -> Iterator[ThreadLease]:
        """Holds the lease of ``thread_id`` for the block: Begin now (raising
        :class:`stepwell.ThreadBusy` if another worker holds it), extend it in
        a background thread, fence every put of the thread with it, Release it
        (not permanently) on exit. Works on any saver, fenced or not."""
        thread_id = str(thread_id)
        with self._lock:
            lease = self._leases.get(thread_id)
            if lease is None:
                lease = self._begin(thread_id)
                self._leases[thread_id] = lease
            lease.holds += 1
            if lease.holds == 1:
                stop = threading.Event()
                lease.stop = stop
                lease.thread = threading.Thread(
                    target=self._heartbeat, args=(lease, stop), name=f"stepwell-lease-{thread_id}", daemon=True
                )
                lease.thread.start()
        try:
            yield lease
        finally:
            with self._lock:
                lease.holds -= 1
                last = lease.holds == 0
                if last and self._leases.get(thread_id) is lease:
                    del self._leases[thread_id]
            if last:
                self._stop_heartbeat(lease)
                self._release(lease)


class AsyncStepwellSaver(_RecordSaverBase):
    """The asyncio twin of :class:`StepwellSaver`, on a :class:`stepwell.AsyncClient`.

    Create it inside the event loop that runs the graph. Its blocking methods
    (``get_tuple``, ``put``, ...) may be called from other threads: they run
    the async ones on that loop, as LangGraph's async savers do.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        namespace: Optional[str] = None,
        serde: Optional[SerializerProtocol] = None,
        fenced: bool = False,
        lease: float = 30.0,
        timeout: Optional[float] = None,
        request_bytes_max: int = REQUEST_BYTES_MAX,
    ) -> None:
        self._init_common(
            client.namespace if namespace is None else namespace, serde, fenced, lease, timeout, request_bytes_max
        )
        self.client = client
        self._owns_client = False
        self._alock = asyncio.Lock()
        self.loop = asyncio.get_running_loop()

    @classmethod
    def from_address(
        cls,
        target: str,
        *,
        namespace: str = "",
        serde: Optional[SerializerProtocol] = None,
        fenced: bool = False,
        lease: float = 30.0,
        request_bytes_max: int = REQUEST_BYTES_MAX,
        **client_kwargs: Any,
    ) -> "AsyncStepwellSaver":
        """A saver with its own :class:`stepwell.AsyncClient` of ``target``;
        use it as ``async with AsyncStepwellSaver.from_address(...) as saver``
        (or call ``await saver.aclose()``)."""
        saver = cls(
            AsyncClient(target, namespace=namespace, **client_kwargs),
            serde=serde,
            fenced=fenced,
            lease=lease,
            request_bytes_max=request_bytes_max,
        )
        saver._owns_client = True
        return saver

    async def aclose(self) -> None:
        """Releases the leases this saver holds; closes the client if the saver made it."""
        async with self._alock:
            leases = list(self._leases.values())
            self._leases.clear()
        for lease in leases:
            await self._stop_heartbeat(lease)
            await self._release(lease)
        if self._owns_client:
            await self.client.close()

    async def __aenter__(self) -> "AsyncStepwellSaver":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _call(self, method: Any, request: Any) -> Any:
        return await self.client._call(method, request, self.timeout)

    # -- reads --------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        req, pieces = self._get_tuple_request(config), _Pieces()
        while True:
            resp = await self._call(self.client.record_stub.ListRecords, req)
            done = pieces.feed(resp)
            if done or pieces.open is None or not resp.next_page_token:
                return self._to_tuple(done[0]) if done else None
            req.page_token = resp.next_page_token

    async def alist(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[CheckpointTuple]:
        req, pieces = self._list_request(config, filter, before, limit), _Pieces()
        remaining = limit if limit else None
        while True:
            resp = await self._call(self.client.record_stub.ListRecords, req)
            for entry in pieces.feed(resp):
                yield self._to_tuple(entry)
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return
            if not resp.next_page_token:
                return
            req.page_token = resp.next_page_token

    # -- writes -------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, requests, next_config = self._put_request(config, checkpoint, metadata, new_versions)
        for req in requests:
            await self._put_fenced(thread_id, req)
        return next_config

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[Tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if not writes:
            return
        thread_id, requests = self._put_writes_request(config, writes, task_id, task_path)
        for req in requests:
            await self._put_fenced(thread_id, req)

    async def _put_fenced(self, thread_id: str, req: rec.PutRecordsRequest) -> None:
        lease = await self._fence(thread_id)
        if lease is not None:
            req.fence.CopyFrom(lease.fence())
        try:
            await self._call(self.client.record_stub.PutRecords, req)
        except (LeaseLost, NotAcquired):
            if lease is not None and lease.holds == 0 and self._leases.get(thread_id) is lease:
                del self._leases[thread_id]
            raise

    # -- deletes and copies ---------------------------------------------------

    async def adelete_thread(self, thread_id: str) -> None:
        await self._call(self.client.record_stub.DeleteRecords, self._delete_thread_request(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        for req in self._delete_for_runs_requests(run_ids):
            await self._call(self.client.record_stub.DeleteRecords, req)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._call(self.client.record_stub.CopyTurn, self._copy_request(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for req in self._prune_requests(thread_ids, strategy):
            await self._call(self.client.record_stub.DeleteRecords, req)

    # -- fencing --------------------------------------------------------------

    async def _begin(self, thread_id: str) -> ThreadLease:
        r = await self.client.begin(thread_lease_key(thread_id), lease=self.lease, timeout=self.timeout)
        return self._leased(thread_id, r)

    async def _fence(self, thread_id: str) -> Optional[ThreadLease]:
        async with self._alock:
            lease = self._leases.get(thread_id)
            if lease is None:
                if not self.fenced:
                    return None
                lease = await self._begin(thread_id)
                self._leases[thread_id] = lease
            elif self._needs_extend(lease):
                try:
                    await self.client.extend(lease.key, lease.token, lease=self.lease, timeout=self.timeout)
                    lease.extended_at = time.monotonic()
                except (LeaseLost, NotAcquired) as err:
                    lease = await self._renew(thread_id, lease, err)
            return lease

    async def _renew(self, thread_id: str, lease: ThreadLease, err: StepwellError) -> ThreadLease:
        """As :meth:`StepwellSaver._renew`."""
        r = await self.client.begin(lease.key, lease=self.lease, timeout=self.timeout)
        if self._renewed(lease, r):
            renewed = self._leased(thread_id, r)
            self._leases[thread_id] = renewed
            return renewed
        del self._leases[thread_id]
        if r.outcome == ip.BEGIN_OUTCOME_ACQUIRED:
            await self._release(ThreadLease(thread_id, lease.key, int(r.lease_token), time.monotonic()))
        raise err

    async def _release(self, lease: ThreadLease) -> None:
        try:
            await self.client.release(lease.key, lease.token, timeout=self.timeout)
        except (LeaseLost, NotAcquired):
            pass

    async def _stop_heartbeat(self, lease: ThreadLease) -> None:
        task, lease.task = lease.task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _heartbeat(self, lease: ThreadLease) -> None:
        while True:
            await asyncio.sleep(self.lease / 3.0)
            try:
                await self.client.extend(lease.key, lease.token, lease=self.lease, timeout=self.timeout)
                lease.extended_at = time.monotonic()
            except (LeaseLost, NotAcquired):
                lease.lost = True
                return
            except StepwellError:
                continue

    @contextlib.asynccontextmanager
    async def thread_lease(self, thread_id: str) -> AsyncIterator[ThreadLease]:
        """``async with saver.thread_lease(thread_id):`` — like
        :meth:`StepwellSaver.thread_lease`, the heartbeat an asyncio task."""
        thread_id = str(thread_id)
        async with self._alock:
            lease = self._leases.get(thread_id)
            if lease is None:
                lease = await self._begin(thread_id)
                self._leases[thread_id] = lease
            lease.holds += 1
            if lease.holds == 1:
                lease.task = asyncio.ensure_future(self._heartbeat(lease))
        try:
            yield lease
        finally:
            async with self._alock:
                lease.holds -= 1
                last = lease.holds == 0
                if last and self._leases.get(thread_id) is lease:
                    del self._leases[thread_id]
            if last:
                await self._stop_heartbeat(lease)
                await self._release(lease)

    # -- blocking twins, for graphs run with invoke() in another thread --------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            if asyncio.get_running_loop() is self.loop:
                coro.close()
                raise asyncio.InvalidStateError(
                    "Blocking calls to AsyncStepwellSaver are only allowed from another thread than its "
                    "event loop's; in the loop, use the async methods (await graph.ainvoke(...))."
                )
        except RuntimeError:
            pass
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        return self._run(self.aget_tuple(config))

    def list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> Iterator[CheckpointTuple]:
        it = self.alist(config, filter=filter, before=before, limit=limit)

        async def step() -> CheckpointTuple:
            return await it.__anext__()

        while True:
            try:
                yield self._run(step())
            except StopAsyncIteration:
                return

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[Tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._run(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(self.aprune(thread_ids, strategy=strategy))
