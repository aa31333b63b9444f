#!/usr/bin/env python3
"""A small LangGraph agent whose state lives in stepwell.

The graph drafts a refund decision for a support ticket, then stops for a
human's approval (``interrupt``). Its checkpointer is
:class:`stepwell.langgraph.StepwellSaver`, so the paused run is kept by the
sidecar: the approval can come from another process, on another machine,
hours later, and the run continues where it stopped.

    # start: runs until the approval step and exits
    python examples/langgraph_agent.py --target 127.0.0.1:50051 --thread ticket-42 --ticket "Order 42 arrived broken"
    # later, anywhere: approve (or --answer no) and finish
    python examples/langgraph_agent.py --target 127.0.0.1:50051 --thread ticket-42 --answer yes

Needs ``pip install "./clients/python[langgraph]" langgraph`` and a running sidecar.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from stepwell.langgraph import StepwellSaver


class Ticket(TypedDict, total=False):
    text: str
    category: str
    draft: str
    approved: bool
    reply: str


def classify(state: Ticket) -> Ticket:
    text = state["text"].lower()
    category = "refund" if any(w in text for w in ("broken", "refund", "damaged")) else "question"
    return {"category": category}


def draft(state: Ticket) -> Ticket:
    if state["category"] == "refund":
        return {"draft": "We are sorry: a full refund is on its way."}
    return {"draft": "Thanks for asking: an agent will answer shortly."}


def approve(state: Ticket) -> Ticket:
    # Stops the run here until a Command(resume=...) answers.
    answer = interrupt({"approve_reply": state["draft"]})
    return {"approved": str(answer).lower() in ("y", "yes", "true")}


def send(state: Ticket) -> Ticket:
    reply = state["draft"] if state["approved"] else "An agent will follow up on your ticket."
    return {"reply": reply}


def build() -> StateGraph:
    g = StateGraph(Ticket)
    for name, fn in (("classify", classify), ("draft", draft), ("approve", approve), ("send", send)):
        g.add_node(name, fn)
    g.add_edge(START, "classify")
    g.add_edge("classify", "draft")
    g.add_edge("draft", "approve")
    g.add_edge("approve", "send")
    g.add_edge("send", END)
    return g


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description="A LangGraph agent checkpointed in stepwell.")
    p.add_argument("--target", default="127.0.0.1:50051")
    p.add_argument("--namespace", default="")
    p.add_argument("--thread", required=True)
    p.add_argument("--ticket", help="start the thread with this ticket")
    p.add_argument("--answer", help="resume the paused thread with this approval (yes/no)")
    args = p.parse_args(argv)

    config: RunnableConfig = {"configurable": {"thread_id": args.thread}}
    with StepwellSaver.from_address(args.target, namespace=args.namespace) as saver:
        graph = build().compile(checkpointer=saver)
        if args.answer is not None:
            if not graph.get_state(config).next:
                print(f"thread {args.thread} has no paused run", file=sys.stderr)
                return 2
            out = graph.invoke(Command(resume=args.answer), config)
        elif args.ticket is not None:
            out = graph.invoke({"text": args.ticket}, config)
        else:
            p.error("give --ticket or --answer")
        if "__interrupt__" in out:
            print("waiting for approval: " + json.dumps(out["__interrupt__"][0].value))
        else:
            steps = len(list(graph.get_state_history(config)))
            print(f"reply sent: {out['reply']} ({steps} checkpoints)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
