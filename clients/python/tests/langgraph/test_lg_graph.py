"""Real LangGraph graphs on the stepwell savers: nested subgraphs, interrupts and
resumes, state history and time travel, a crashed worker resumed by a new
process, and a state of 18 MB (five 3 MB channels, 3 MB of pending writes)
with the client's and the sidecar's default 4 MiB messages."""

from __future__ import annotations

import asyncio
import json
import operator
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, Dict, List

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

import lg_graphs
from conftest import Sidecar
from lg_support import (  # noqa: F401  (fixtures)
    lg_namespace,
    lg_sidecar,
    lg_target,
    new_thread,
    thread_config,
)
from stepwell import AsyncClient, Client
from stepwell.langgraph import AsyncStepwellSaver, StepwellSaver

GRAPHS = Path(lg_graphs.__file__)


def shape(history: List[Any]) -> List[Any]:
    """A state history without its ids: each checkpoint's step, source, next
    nodes and values, and the position of its parent in the history."""
    index = {h.config["configurable"]["checkpoint_id"]: i for i, h in enumerate(history)}
    return [
        (
            h.metadata["step"],
            h.metadata["source"],
            h.next,
            h.values,
            index[h.parent_config["configurable"]["checkpoint_id"]] if h.parent_config else None,
        )
        for h in history
    ]


def nested_run(saver: Any, thread: str, resume: Any) -> Dict[str, Any]:
    """Runs the nested graph to its interrupt, resumes it, replays it from
    before its last node, and forks it with an edit there; returns what each
    step gave and the final history's shape."""
    lg_graphs.RUNS.clear()
    graph = lg_graphs.nested_builder().compile(checkpointer=saver)
    config = thread_config(thread)
    out: Dict[str, Any] = {"first": graph.invoke({"log": ["start"]}, config)}
    out["runs_paused"] = dict(lg_graphs.RUNS)
    out["done"] = graph.invoke(Command(resume=resume), config)
    out["runs_done"] = dict(lg_graphs.RUNS)
    history = list(graph.get_state_history(config))
    out["history"] = shape(history)
    before_post = next(h for h in history if h.next == ("post",))
    out["replayed"] = graph.invoke(None, before_post.config)
    out["runs_replayed"] = dict(lg_graphs.RUNS)
    fork = graph.update_state(before_post.config, {"log": ["edited"]})
    out["forked"] = graph.invoke(None, fork)
    out["final_history"] = shape(list(graph.get_state_history(config)))
    out["original_end"] = graph.get_state(history[0].config).values
    for key in ("first",):
        out[key] = {k: v for k, v in out[key].items() if k != "__interrupt__"} | {
            "interrupts": [i.value for i in out[key]["__interrupt__"]]
        }
    return out


def test_nested_subgraphs_interrupt_resume_and_time_travel(lg_target: str, lg_namespace: str) -> None:
    reference = nested_run(InMemorySaver(), "reference", "yes")
    thread = new_thread()
    config = thread_config(thread)
    with StepwellSaver.from_address(lg_target, namespace=lg_namespace) as saver:
        graph = lg_graphs.nested_builder().compile(checkpointer=saver)
        lg_graphs.RUNS.clear()
        first = graph.invoke({"log": ["start"]}, config)
        interrupts = first["__interrupt__"]
        assert len(interrupts) == 1 and interrupts[0].value == {
            "question": "proceed?",
            "seen": ["start", "pre", "middle_pre"],
        }

        # The paused state, read back from the sidecar through both subgraph levels.
        state = graph.get_state(config, subgraphs=True)
        assert state.next == ("middle",)
        middle = state.tasks[0].state
        assert middle.next == ("inner",)
        inner = middle.tasks[0].state
        assert inner.next == ("inner_ask",) and inner.tasks[0].interrupts
        inner_ns = inner.config["configurable"]["checkpoint_ns"]
        assert inner_ns.count("|") == 1 and inner_ns.startswith("middle:") and "|inner:" in inner_ns

        # The innermost namespace is its own scope, listed from the sidecar.
        scoped = list(saver.list(thread_config(thread, checkpoint_ns=inner_ns)))
        assert scoped and all(t.config["configurable"]["checkpoint_ns"] == inner_ns for t in scoped)
        everywhere = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(thread_config(thread))}
        assert "" in everywhere and inner_ns in everywhere and len(everywhere) == 3

        ours = nested_run(saver, new_thread(), "yes")

    # Every step gives what LangGraph's in-memory saver gives.
    assert ours == reference
    # Resuming ran only the interrupted node again; the replay only "post";
    # history is newest first with each checkpoint's parent after it.
    assert ours["runs_paused"] == {"pre": 1, "middle_pre": 1, "inner_ask": 1}
    assert ours["runs_done"] == {"pre": 1, "middle_pre": 1, "inner_ask": 2, "middle_post": 1, "post": 1}
    assert ours["runs_replayed"] == {**ours["runs_done"], "post": 2}
    assert ours["done"]["log"][-3:] == ["answer:yes", "middle_post", "post"]
    assert [h[0] for h in ours["history"]] == [3, 2, 1, 0, -1]
    assert [h[4] for h in ours["history"]] == [1, 2, 3, 4, None]
    assert ours["replayed"] == ours["done"] and ours["forked"]["log"][-2:] == ["edited", "post"]
    assert [(h[0], h[1]) for h in ours["final_history"][:4]] == [(4, "loop"), (3, "update"), (4, "loop"), (3, "fork")]
    assert ours["original_end"] == ours["done"]


def test_async_saver_runs_nested_graph_with_interrupt(lg_target: str, lg_namespace: str) -> None:
    reference = nested_run(InMemorySaver(), "reference", 42)
    lg_graphs.RUNS.clear()
    config = thread_config(new_thread())

    async def run() -> None:
        async with AsyncStepwellSaver.from_address(lg_target, namespace=lg_namespace) as saver:
            graph = lg_graphs.nested_builder().compile(checkpointer=saver)
            first = await graph.ainvoke({"log": ["start"]}, config)
            assert first["__interrupt__"][0].value["question"] == "proceed?"
            state = await graph.aget_state(config, subgraphs=True)
            assert state.tasks[0].state.tasks[0].state.next == ("inner_ask",)
            done = await graph.ainvoke(Command(resume=42), config)
            assert done == reference["done"] and done["log"][-3:] == ["answer:42", "middle_post", "post"]
            history = [h async for h in graph.aget_state_history(config)]
            assert shape(history) == reference["history"]

            # The blocking methods work from another thread, on the saver's loop.
            tup = await asyncio.to_thread(saver.get_tuple, config)
            assert tup is not None and tup.checkpoint["channel_values"]["answer"] == "42"
            listed = await asyncio.to_thread(lambda: list(saver.list(config, limit=2)))
            assert [t.config for t in listed] == [h.config for h in history[:2]]
            # A blocking graph run in another thread, on the async saver.
            sync_config = thread_config(new_thread())
            paused = await asyncio.to_thread(graph.invoke, {"log": ["start"]}, sync_config)
            assert paused["__interrupt__"][0].value["question"] == "proceed?"
            with pytest.raises(asyncio.InvalidStateError):
                saver.get_tuple(config)

    asyncio.run(run())
    assert dict(lg_graphs.RUNS) == {"pre": 2, "middle_pre": 2, "inner_ask": 3, "middle_post": 1, "post": 1}


def run_worker(target: str, namespace: str, thread: str, effects: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(GRAPHS), "--target", target, "--namespace", namespace, "--thread", thread,
         "--effects", str(effects), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_crashed_worker_resumes_in_a_new_process(lg_target: str, lg_namespace: str, tmp_path: Path) -> None:
    thread = new_thread()
    effects = tmp_path / "effects"
    crashed = run_worker(lg_target, lg_namespace, thread, effects, "--crash-in", "c")
    assert crashed.returncode == -9, crashed.stderr
    assert effects.read_text().split() == ["a", "b", "c"]

    # What the dead worker left: the checkpoint after "b", with "c" next.
    with StepwellSaver.from_address(lg_target, namespace=lg_namespace) as saver:
        graph = lg_graphs.chain_builder().compile(checkpointer=saver)
        state = graph.get_state(thread_config(thread))
        assert state.next == ("c",) and state.values["log"] == ["a", "b"]

    resumed = run_worker(lg_target, lg_namespace, thread, effects)
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert out == {"resumed": True, "log": ["a", "b", "c", "d"]}
    # a and b ran once; c, killed in the middle, ran again; d once.
    assert effects.read_text().split() == ["a", "b", "c", "c", "d"]


MB3 = 3 << 20


class BigState(TypedDict, total=False):
    c0: str
    c1: bytes
    c2: str
    c3: bytes
    c4: str
    notes: bytes
    done: Annotated[List[str], operator.add]


def big_graph() -> StateGraph:
    """START -> fill (five channels of 3 MB, text and bytes) -> (note, asks)
    in parallel -> join: "note" writes 3 MB more, and "asks" interrupts in
    the same step, so the paused checkpoint carries 15 MB of channels and
    note's 3 MB as pending writes."""

    def fill(state: BigState) -> BigState:
        text = lambda: os.urandom(MB3 // 2).hex()  # noqa: E731
        return {"c0": text(), "c1": os.urandom(MB3), "c2": text(), "c3": os.urandom(MB3), "c4": text()}

    def note(state: BigState) -> BigState:
        assert all(len(state[c]) == MB3 for c in ("c0", "c1", "c2", "c3", "c4"))  # type: ignore[literal-required]
        return {"notes": os.urandom(MB3), "done": ["note"]}

    def asks(state: BigState) -> BigState:
        return {"done": [f"asks:{interrupt('go?')}"]}

    def join(state: BigState) -> BigState:
        return {"done": ["join"]}

    g = StateGraph(BigState)
    for name, node in (("fill", fill), ("note", note), ("asks", asks), ("join", join)):
        g.add_node(name, node)
    g.add_edge(START, "fill")
    g.add_edge("fill", "note")
    g.add_edge("fill", "asks")
    g.add_edge(["note", "asks"], "join")
    g.add_edge("join", END)
    return g


class CountingClient(Client):
    """Counts the RecordService calls by method name."""

    calls: Dict[str, int]

    def _call(self, method: Any, request: Any, timeout: Any) -> Any:
        name = type(request).__name__
        self.calls[name] = self.calls.get(name, 0) + 1
        return super()._call(method, request, timeout)


class CountingAsyncClient(AsyncClient):
    """Counts the RecordService calls by method name."""

    calls: Dict[str, int]

    async def _call(self, method: Any, request: Any, timeout: Any) -> Any:
        name = type(request).__name__
        self.calls[name] = self.calls.get(name, 0) + 1
        return await super()._call(method, request, timeout)


def check_big_run(first: Any, paused: Any, tup: Any, out: Any, history: List[Any], calls: Dict[str, int]) -> None:
    """What a run of big_graph gives, however it was run: the pause with 15 MB
    of channels and 3 MB of pending writes, read back whole; the resumed
    run's result; a history whose every checkpoint after fill carries the
    15 MB; reads in more than one page each, every page within 4 MiB."""
    channels = ("c0", "c1", "c2", "c3", "c4")
    assert [i.value for i in first["__interrupt__"]] == ["go?"]
    assert paused.next == ("asks",) and all(len(paused.values[c]) == MB3 for c in channels)
    pending = [(w[1], w[2]) for w in tup.pending_writes or []]
    assert ("done", ["note"]) in pending and [len(v) for c, v in pending if c == "notes"] == [MB3]
    assert tup.checkpoint["channel_values"]["c1"] == paused.values["c1"]
    assert sorted(out["done"][:2]) == ["asks:yes", "note"] and out["done"][2] == "join" and len(out["notes"]) == MB3
    assert [h.metadata["step"] for h in history] == [3, 2, 1, 0, -1]
    assert all(all(len(h.values[c]) == MB3 for c in channels) for h in history[:3])
    # A paused checkpoint of 18 MB comes in several pages of at most 4 MiB.
    assert calls["ListRecordsRequest"] > 1


def test_a_state_of_eighteen_megabytes_runs_pauses_and_resumes_with_default_limits(
    lg_target: str, lg_namespace: str
) -> None:
    client = CountingClient(lg_target, namespace=lg_namespace, timeout=120)
    client.calls = {}
    config = thread_config(new_thread())
    with client, StepwellSaver(client) as saver:
        graph = big_graph().compile(checkpointer=saver)
        first = graph.invoke({"done": []}, config)
        client.calls.clear()
        paused = graph.get_state(config)
        calls = dict(client.calls)
        tup = saver.get_tuple(config)
        out = graph.invoke(Command(resume="yes"), config)
        history = list(graph.get_state_history(config))
        check_big_run(first, paused, tup, out, history, calls)

        # A limit stops after its tuples, made up from as many pages as they take.
        three = [t.config["configurable"]["checkpoint_id"] for t in saver.list(config, limit=3)]
        assert three == [h.config["configurable"]["checkpoint_id"] for h in history[:3]]


def test_a_state_of_eighteen_megabytes_runs_pauses_and_resumes_with_default_limits_async(
    lg_target: str, lg_namespace: str
) -> None:
    async def run() -> None:
        client = CountingAsyncClient(lg_target, namespace=lg_namespace, timeout=120)
        client.calls = {}
        config = thread_config(new_thread())
        async with client, AsyncStepwellSaver(client) as saver:
            graph = big_graph().compile(checkpointer=saver)
            first = await graph.ainvoke({"done": []}, config)
            client.calls.clear()
            paused = await graph.aget_state(config)
            calls = dict(client.calls)
            tup = await saver.aget_tuple(config)
            out = await graph.ainvoke(Command(resume="yes"), config)
            history = [h async for h in graph.aget_state_history(config)]
            check_big_run(first, paused, tup, out, history, calls)
            three = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(config, limit=3)]
            assert three == [h.config["configurable"]["checkpoint_id"] for h in history[:3]]

    asyncio.run(run())


class FanState(TypedDict, total=False):
    done: Annotated[List[str], operator.add]


def fan_graph() -> StateGraph:
    """START -> (quick, asks) in parallel -> join: "asks" interrupts after
    "quick" finished in the same step."""

    def quick(state: FanState) -> FanState:
        lg_graphs.RUNS["quick"] += 1
        return {"done": ["quick"]}

    def asks(state: FanState) -> FanState:
        lg_graphs.RUNS["asks"] += 1
        return {"done": [f"asks:{interrupt('go?')}"]}

    def join(state: FanState) -> FanState:
        lg_graphs.RUNS["join"] += 1
        return {"done": ["join"]}

    g = StateGraph(FanState)
    g.add_node("quick", quick)
    g.add_node("asks", asks)
    g.add_node("join", join)
    g.add_edge(START, "quick")
    g.add_edge(START, "asks")
    g.add_edge(["quick", "asks"], "join")
    g.add_edge("join", END)
    return g


def test_finished_parallel_node_is_not_run_again_on_resume(lg_target: str, lg_namespace: str) -> None:
    config = thread_config(new_thread())
    lg_graphs.RUNS.clear()
    with StepwellSaver.from_address(lg_target, namespace=lg_namespace) as saver:
        graph = fan_graph().compile(checkpointer=saver)
        first = graph.invoke({"done": []}, config)
        assert [i.value for i in first["__interrupt__"]] == ["go?"]
        # quick's writes wait as pending writes of the paused step.
        tup = saver.get_tuple(config)
        assert tup is not None and ("done", ["quick"]) in [(w[1], w[2]) for w in tup.pending_writes or []]
        out = graph.invoke(Command(resume="yes"), config)
    assert sorted(out["done"][:2]) == ["asks:yes", "quick"] and out["done"][2] == "join"
    assert dict(lg_graphs.RUNS) == {"quick": 1, "asks": 2, "join": 1}
