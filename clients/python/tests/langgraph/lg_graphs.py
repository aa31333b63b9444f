"""Graphs the stepwell.langgraph tests run: nested subgraphs with an interrupt, and a chain for crash tests.

``nested_graph`` is three levels (outer -> middle -> inner), so the innermost
checkpoints live in a namespace like ``middle:<task>|inner:<task>``; the
inner node asks a human (``interrupt``) and a ``Command(resume=...)``
answers. Every node counts its runs in ``RUNS``, so tests see which nodes ran
again on a resume or a replay.

Run as a script, it is the worker of the crash test: it runs ``chain_graph``
on a thread, appending each node's name to an effects file as the node
starts, and SIGKILLs itself inside the node named by ``--crash-in``.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import signal
import sys
from collections import Counter
from typing import Annotated, Any, Callable, Dict, List, Optional, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

RUNS: Counter[str] = Counter()


class State(TypedDict, total=False):
    log: Annotated[List[str], operator.add]
    answer: str


def _node(name: str) -> Any:
    def run(state: State) -> State:
        RUNS[name] += 1
        return {"log": [name]}

    return run


def _ask(state: State) -> State:
    RUNS["inner_ask"] += 1
    answer = interrupt({"question": "proceed?", "seen": list(state.get("log", []))})
    return {"log": [f"answer:{answer}"], "answer": str(answer)}


def nested_builder() -> StateGraph:
    inner = StateGraph(State)
    inner.add_node("inner_ask", _ask)
    inner.add_edge(START, "inner_ask")
    inner.add_edge("inner_ask", END)

    middle = StateGraph(State)
    middle.add_node("middle_pre", _node("middle_pre"))
    middle.add_node("inner", inner.compile())
    middle.add_node("middle_post", _node("middle_post"))
    middle.add_edge(START, "middle_pre")
    middle.add_edge("middle_pre", "inner")
    middle.add_edge("inner", "middle_post")
    middle.add_edge("middle_post", END)

    outer = StateGraph(State)
    outer.add_node("pre", _node("pre"))
    outer.add_node("middle", middle.compile())
    outer.add_node("post", _node("post"))
    outer.add_edge(START, "pre")
    outer.add_edge("pre", "middle")
    outer.add_edge("middle", "post")
    outer.add_edge("post", END)
    return outer


CHAIN = ["a", "b", "c", "d"]


class ChainState(TypedDict, total=False):
    log: Annotated[List[str], operator.add]


def chain_builder(
    effects: Optional[str] = None, crash_in: Optional[str] = None, hooks: Optional[Dict[str, Callable[[], None]]] = None
) -> StateGraph:
    """a -> b -> c -> d; each node appends its name to ``log`` (and to the
    ``effects`` file), and first calls ``hooks[name]`` if there is one."""

    def make(name: str) -> Any:
        def run(state: ChainState) -> ChainState:
            if hooks and name in hooks:
                hooks[name]()
            if effects:
                with open(effects, "a") as f:
                    f.write(name + "\n")
            if name == crash_in:
                os.kill(os.getpid(), signal.SIGKILL)
            return {"log": [name]}

        return run

    g = StateGraph(ChainState)
    prev = START
    for name in CHAIN:
        g.add_node(name, make(name))
        g.add_edge(prev, name)
        prev = name
    g.add_edge(prev, END)
    return g


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--target", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--thread", required=True)
    p.add_argument("--effects", required=True)
    p.add_argument("--crash-in")
    args = p.parse_args()

    from stepwell.langgraph import StepwellSaver

    config: RunnableConfig = {"configurable": {"thread_id": args.thread}}
    with StepwellSaver.from_address(args.target, namespace=args.namespace) as saver:
        graph = chain_builder(args.effects, args.crash_in).compile(checkpointer=saver)
        # A thread with saved progress resumes from it; a new one starts.
        # Durability "sync": each step's checkpoint is stored before the next
        # step starts, so a crash loses no finished node.
        resume = bool(graph.get_state(config).next)
        out = graph.invoke(None if resume else {"log": []}, config, durability="sync")
    print(json.dumps({"resumed": resume, "log": out["log"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
