"""Python client of stepwell, the durable-execution sidecar.

    from stepwell import Client
    with Client("127.0.0.1:50051") as sw:
        sw.checkpoint("run-1", "started", {"step": 1})
        print([ck.phase for ck in sw.restore("run-1")])
"""

from ._common import OnceContext, RetryPolicy, NO_RETRY
from ._security import TLS
from .aio import AsyncClient
from .checkpoint_store import AsyncCheckpointStore, CheckpointStore, ExecutionCheckpoint, ExecutionSummary
from .client import Client
from .errors import (
    CheckpointConflict,
    InvalidArgument,
    KeyNotFound,
    KeyReused,
    LeaseLost,
    MessageTooLarge,
    NotAcquired,
    OnceTimeout,
    OperationFailed,
    Overloaded,
    PermissionDenied,
    RecordExists,
    RecordNotFound,
    ResultMismatch,
    StepwellError,
    StoreFull,
    ThreadBusy,
    Unauthenticated,
    Unavailable,
    WaitCancelled,
    WaitError,
    WaitExpired,
    WaitNotFound,
    WaitSettled,
    WaitTimeout,
    WorkflowVersionMismatch,
)

__all__ = [
    "AsyncCheckpointStore",
    "AsyncClient",
    "CheckpointConflict",
    "CheckpointStore",
    "Client",
    "ExecutionCheckpoint",
    "ExecutionSummary",
    "InvalidArgument",
    "KeyNotFound",
    "KeyReused",
    "LeaseLost",
    "MessageTooLarge",
    "NO_RETRY",
    "NotAcquired",
    "OnceContext",
    "OnceTimeout",
    "OperationFailed",
    "Overloaded",
    "PermissionDenied",
    "RecordExists",
    "RecordNotFound",
    "ResultMismatch",
    "RetryPolicy",
    "StepwellError",
    "StoreFull",
    "TLS",
    "ThreadBusy",
    "Unauthenticated",
    "Unavailable",
    "WaitCancelled",
    "WaitError",
    "WaitExpired",
    "WaitNotFound",
    "WaitSettled",
    "WaitTimeout",
    "WorkflowVersionMismatch",
]
__version__ = "1.3.0"
