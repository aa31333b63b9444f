"""A real agent loop on a StepwellSession, with a fake model (no network):
a multi-turn conversation with a tool call and a handoff to a second agent,
run the same on the SDK's SQLiteSession, and the histories compared."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Dict, List, Tuple

from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled

from ag_model import FakeModel, handoff_call, last_output, last_user_text, message, tool_call
from ag_support import ag_namespace, ag_sidecar, ag_target, new_session_id  # noqa: F401  (fixtures)
from stepwell.agents import StepwellSession

set_tracing_disabled(True)


def build_agents(lookups: List[str]) -> Agent:
    """A triage agent with a lookup tool that hands weather questions to a
    second agent; the model's answers depend on the input it is given, so
    a lost or reordered history changes them."""

    @function_tool
    def lookup(city: str) -> str:
        """Looks a city's weather up."""
        lookups.append(city)
        return f"sunny in {city}"

    def triage(items: List[Any]) -> List[Any]:
        out = last_output(items)
        if out is not None and out["call_id"].startswith("call-lookup"):
            return [handoff_call("weather", "call-handoff-1")]
        text = last_user_text(items)
        if text.startswith("weather in "):
            return [tool_call("lookup", {"city": text[len("weather in "):]}, "call-lookup-1")]
        return [message(f"triage heard {text!r} after {len(items) - 1} earlier items")]

    def weather(items: List[Any]) -> List[Any]:
        forecast = next(i["output"] for i in reversed(items) if i.get("call_id") == "call-lookup-1")
        first = next(i for i in items if i.get("role") == "user")
        if last_user_text(items).startswith("weather in "):
            return [message(f"weather: {forecast}")]
        return [message(f"weather remembers {first['content']!r} and {forecast!r}")]

    weather_agent = Agent(name="weather", instructions="Weather.", model=FakeModel(weather))
    return Agent(name="triage", instructions="Triage.", model=FakeModel(triage), tools=[lookup],
                 handoffs=[weather_agent])


async def converse(session: Any) -> Tuple[List[str], List[str], List[str]]:
    """Three turns, each continuing with the agent the last one ended on."""
    lookups: List[str] = []
    agent = build_agents(lookups)
    outputs, agents_seen = [], []
    for prompt in ("hi there", "weather in Paris", "thanks"):
        result = await Runner.run(agent, prompt, session=session)
        outputs.append(result.final_output)
        agent = result.last_agent
        agents_seen.append(agent.name)
    return outputs, agents_seen, lookups


def without_ids(items: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    # The fake model numbers its messages across the whole process.
    return [{k: v for k, v in item.items() if k != "id"} for item in items]


def test_agent_loop_with_tool_and_handoff(ag_target: str, ag_namespace: str, tmp_path: Path) -> None:
    async def main() -> None:
        sid = new_session_id()
        reference = SQLiteSession(sid, tmp_path / "ref.db")
        want = await converse(reference)
        want_items = await reference.get_items()
        reference.close()
        async with StepwellSession.from_address(sid, ag_target, namespace=ag_namespace) as session:
            got = await converse(session)
            got_items = await session.get_items()
        assert got == want
        outputs, agents_seen, lookups = got
        assert outputs == [
            "triage heard 'hi there' after 0 earlier items",
            "weather: sunny in Paris",
            "weather remembers 'hi there' and 'sunny in Paris'",
        ]
        assert agents_seen == ["triage", "weather", "weather"] and lookups == ["Paris"]
        assert without_ids(got_items) == without_ids(want_items)
        types = [i.get("type", i.get("role")) for i in got_items]
        assert types.count("function_call") == 2 and types.count("function_call_output") == 2
        # A new process would see the same: read back through another session object.
        async with StepwellSession.from_address(sid, ag_target, namespace=ag_namespace) as again:
            assert await again.get_items() == got_items

    asyncio.run(main())
