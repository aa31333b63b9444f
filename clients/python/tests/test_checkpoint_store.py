"""The CheckpointStore adapter: one logical checkpoint per execution."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from stepwell import CheckpointStore, Client, WorkflowVersionMismatch


def test_save_overwrites_load_latest_and_history(client: Client) -> None:
    store = CheckpointStore(client, workflow_version="1.0.0")
    assert store.load("ex-1") is None
    store.save("ex-1", {"messages": ["hi"]}, step_index=0, step_name="plan")
    store.save("ex-1", {"messages": ["hi", "a"]}, step_index=1, step_name="act")
    last = store.load("ex-1")
    assert (last.status, last.step_index, last.step_name) == ("running", 1, "act")
    assert last.state == {"messages": ["hi", "a"]} and not last.terminal and last.resumable
    hist = store.history("ex-1")
    assert [h.step_index for h in hist] == [0, 1]
    assert hist[0].timestamp_ns < hist[1].timestamp_ns
    with pytest.raises(WorkflowVersionMismatch):
        store.load("ex-1", expect_workflow_version="2.0.0")


def test_failed_keeps_error_and_stays_resumable(client: Client) -> None:
    store = CheckpointStore(client)
    store.save("ex-f", {"x": 1}, step_index=0)
    store.save("ex-f", {"x": 1}, status="failed", step_index=1, step_name="call-llm", error=TimeoutError("llm timed out"))
    f = store.load("ex-f")
    assert f.status == "failed" and f.error == {"type": "TimeoutError", "message": "llm timed out"}
    assert not f.terminal and f.resumable
    assert [s.execution_id for s in store.list("failed")] == ["ex-f"]
    assert [s.execution_id for s in store.resumable()] == ["ex-f"]
    # resume: retry the failed step, then complete
    store.save("ex-f", {"x": 2}, status="completed", step_index=2)
    assert store.load("ex-f").terminal
    assert store.list("failed") == [] and store.resumable() == []
    assert [h.status for h in store.history("ex-f")] == ["running", "failed", "completed"]


def test_list_by_status_and_cleanup(client: Client) -> None:
    store = CheckpointStore(client, session_id="agent-a")
    other = CheckpointStore(client, session_id="agent-b")
    store.save("r", {}, status="running")
    store.save("p", {}, status="paused")
    store.save("c", {}, status="completed")
    other.save("z", {}, status="completed")
    assert [s.execution_id for s in store.list("running")] == ["r"]
    assert [s.execution_id for s in store.list("paused")] == ["p"]
    assert [s.execution_id for s in store.list("completed")] == ["c"]
    assert [(s.execution_id, s.status) for s in store.list()] == [("c", "completed"), ("p", "paused"), ("r", "running")]
    with pytest.raises(ValueError):
        store.save("r", {}, status="weird")
    assert store.cleanup(older_than=dt.timedelta(hours=1)) == 0  # too recent
    assert store.cleanup() == 1  # completed executions of this store only
    assert store.load("c") is None and store.history("c") == []
    assert other.load("z") is not None
    assert store.delete("p") == 1
    assert [s.execution_id for s in store.list()] == ["r"]


HOUR_NS = 3600 * 1_000_000_000


def _behind(offset_ns: int):
    """A clock ``offset_ns`` behind this machine's."""
    return lambda: time.time_ns() - offset_ns


def test_resume_on_a_worker_whose_clock_is_behind_keeps_its_save(client: Client) -> None:
    # Worker B's clock is one hour behind A's: far more than the gap between
    # their saves. B's save must still be the newest version.
    a = CheckpointStore(client)
    b = CheckpointStore(client, clock=_behind(HOUR_NS))
    saved_a = a.save("ex-skew", {"by": "a"}, step_index=0)
    loaded = b.load("ex-skew")
    assert (loaded.state, loaded.timestamp_ns) == ({"by": "a"}, saved_a.timestamp_ns)
    saved_b = b.save("ex-skew", {"by": "b"}, step_index=1)
    assert saved_b.timestamp_ns > saved_a.timestamp_ns
    b.save("ex-skew", {"by": "b"}, status="paused", step_index=2)
    for store in (a, b, CheckpointStore(client)):
        last = store.load("ex-skew")
        assert (last.state, last.step_index, last.status) == ({"by": "b"}, 2, "paused")
    assert [h.step_index for h in a.history("ex-skew")] == [0, 1, 2]
    # A, having loaded B's save, stamps above it too (its own clock is ahead anyway).
    a.save("ex-skew", {"by": "a"}, step_index=3)
    assert a.load("ex-skew").step_index == 3


def test_save_without_load_on_a_worker_whose_clock_is_behind(client: Client) -> None:
    a = CheckpointStore(client)
    b = CheckpointStore(client, clock=_behind(HOUR_NS))
    saved_a = a.save("ex-blind", {"by": "a"}, step_index=0)
    saved_b = b.save("ex-blind", {"by": "b"}, step_index=1)  # b never loaded it
    assert saved_b.timestamp_ns == saved_a.timestamp_ns + 1
    last = CheckpointStore(client).load("ex-blind")
    assert (last.state, last.step_index) == ({"by": "b"}, 1)
    # A clock behind on a fresh execution is used as it is.
    fresh = b.save("ex-fresh", {}, step_index=0)
    assert fresh.timestamp_ns < saved_a.timestamp_ns - HOUR_NS // 2


def test_injected_clock_stamps_saves_strictly_increasing(client: Client) -> None:
    t0 = 1_700_000_000 * 1_000_000_000
    store = CheckpointStore(client, clock=lambda: t0)  # a clock that stands still
    assert store.save("ex-clock", {"n": 0}).timestamp_ns == t0
    assert store.save("ex-clock", {"n": 1}).timestamp_ns == t0 + 1
    # A store that stamps from the same stopped clock and never loaded: above what is stored.
    other = CheckpointStore(client, clock=lambda: t0)
    assert other.save("ex-clock", {"n": 2}).timestamp_ns == t0 + 2
    assert store.load("ex-clock").state == {"n": 2}
    assert store.save("ex-clock", {"n": 3}).timestamp_ns == t0 + 3
    # Deleting forgets the execution: a new one starts from the clock again.
    assert store.delete("ex-clock") == 4
    assert store.save("ex-clock", {"n": 0}).timestamp_ns == t0
