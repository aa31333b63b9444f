"""The CheckpointStore adapter: one logical checkpoint per execution."""

from __future__ import annotations

import datetime as dt

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
