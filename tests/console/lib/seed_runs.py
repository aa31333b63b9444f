"""Seeds the console's browser tests with runs that live in records, through
the real Python integrations of this repository: a LangGraph thread paused
at ``interrupt()`` and one that ran to its end (StepwellSaver under a
compiled StateGraph), an OpenAI Agents SDK session with items
(StepwellSession), and a Google ADK session with events and session, user
and app state (StepwellSessionService). Usage (the Python client's test
venv): python seed_runs.py TARGET TOKEN NAMESPACE; prints the seeded ids as
JSON."""

import asyncio
import json
import sys
from typing import TypedDict

from google.adk.events import Event
from google.genai import types
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from stepwell import Client
from stepwell.adk import StepwellSessionService
from stepwell.agents import StepwellSession
from stepwell.langgraph import StepwellSaver


class Refund(TypedDict):
    amount: int
    approved: str


def threads(target: str, token: str, namespace: str) -> dict:
    def ask(state: Refund) -> dict:
        return {"approved": interrupt(f"Refund {state['amount']} EUR?")}

    def pay(state: Refund) -> dict:
        return {"amount": state["amount"]}

    graph = StateGraph(Refund)
    graph.add_node("ask", ask)
    graph.add_node("pay", pay)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", "pay")
    graph.add_edge("pay", END)
    plain = StateGraph(Refund)
    plain.add_node("pay", pay)
    plain.add_edge(START, "pay")
    plain.add_edge("pay", END)
    with Client(target, namespace=namespace, token=token) as client:
        saver = StepwellSaver(client)
        graph.compile(checkpointer=saver).invoke({"amount": 40}, {"configurable": {"thread_id": "lg-pending-1"}})
        plain.compile(checkpointer=saver).invoke({"amount": 7}, {"configurable": {"thread_id": "lg-done-1"}})
    return {"pending_thread": "lg-pending-1", "done_thread": "lg-done-1"}


async def sessions(target: str, token: str, namespace: str) -> dict:
    agents = StepwellSession.from_address("agents-session-1", target, namespace=namespace, token=token)
    await agents.add_items(
        [
            {"role": "user", "content": "Where is my order 1042?"},
            {"role": "assistant", "content": "It left the warehouse this morning."},
        ]
    )
    await agents.close()
    adk = StepwellSessionService.from_address(target, namespace=namespace, token=token)
    session = await adk.create_session(
        app_name="shop", user_id="u-7", session_id="adk-1", state={"cart": 2, "user:tier": "gold", "app:region": "eu"}
    )
    said = types.Content(role="user", parts=[types.Part(text="Cancel my subscription")])
    await adk.append_event(session, Event(invocation_id="i-1", author="user", content=said))
    answer = types.Content(role="model", parts=[types.Part(text="Done: it ends on the 30th.")])
    await adk.append_event(session, Event(invocation_id="i-1", author="support_agent", content=answer))
    await adk.close()
    return {"agents_session": "agents-session-1", "adk_turn": "adk:shop/u-7/adk-1"}


def main() -> None:
    target, token, namespace = sys.argv[1:4]
    seeded = threads(target, token, namespace)
    seeded.update(asyncio.run(sessions(target, token, namespace)))
    print(json.dumps(seeded))


if __name__ == "__main__":
    main()
