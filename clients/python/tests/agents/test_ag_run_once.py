"""run_once's keys and lease, against a real sidecar: two sessions with one
run key whose model repeats a call id each get their own tool result; a
key that cannot tell sessions apart is warned of; the tool's lease reaches
Begin; and a call that finds its key held by a holder that never completes
logs a WARNING before it waits for that holder's lease."""

from __future__ import annotations

import asyncio
import logging
import warnings
from typing import Any, Callable, List, Optional

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.tool_context import ToolContext

from ag_model import FakeModel, last_output, message, tool_call
from ag_support import ag_namespace, ag_sidecar, ag_target, new_session_id  # noqa: F401  (fixtures)
from stepwell import AsyncClient, Client
from stepwell.agents import StepwellSession, run_once, tool_once_key
from stepwell.v1 import idempotency_pb2 as ip

set_tracing_disabled(True)
RUN_KEY = "support-bot"  # one run key for every session, as a deployment may have


def tool_context(call_id: str) -> ToolContext[Any]:
    return ToolContext(context=None, tool_name="refund", tool_call_id=call_id, tool_arguments="{}")


def refund_agent(session: StepwellSession, effects: List[str]) -> Agent:
    """An agent whose model always calls ``refund`` with the call id ``call-1``."""

    @function_tool
    @run_once(session, run_key=RUN_KEY)
    async def refund(ctx: ToolContext[Any], amount: int) -> str:
        """Refunds the customer."""
        effects.append(session.session_id)
        return f"refunded {amount} to {session.session_id}"

    def respond(items: List[Any]) -> List[Any]:
        out = last_output(items)
        if out is not None:
            return [message(f"done: {out['output']}")]
        return [tool_call("refund", {"amount": 5}, "call-1")]

    return Agent(name="support", instructions="Help.", model=FakeModel(respond), tools=[refund])


def test_two_sessions_with_one_run_key_and_call_id_get_their_own_results(ag_target: str, ag_namespace: str) -> None:
    effects: List[str] = []

    async def main() -> List[str]:
        outputs = []
        for sid in (new_session_id(), new_session_id()):
            async with StepwellSession.from_address(sid, ag_target, namespace=ag_namespace) as session:
                result = await Runner.run(refund_agent(session, effects), "refund me", session=session)
                outputs.append((sid, result.final_output))
        return outputs

    outputs = asyncio.run(main())
    assert [out for _, out in outputs] == [f"done: refunded 5 to {sid}" for sid, _ in outputs]
    assert effects == [sid for sid, _ in outputs]


def test_the_session_id_parameter_scopes_a_clients_keys(ag_target: str, ag_namespace: str) -> None:
    effects: List[str] = []

    def tool_of(client: AsyncClient, sid: str) -> Callable[..., Any]:
        @run_once(client, run_key=RUN_KEY, session_id=lambda ctx: sid)
        async def refund(ctx: ToolContext[Any]) -> str:
            effects.append(sid)
            return f"refunded {sid}"

        return refund

    async def main() -> List[str]:
        async with AsyncClient(ag_target, namespace=ag_namespace) as client:
            return [await tool_of(client, sid)(tool_context("call-1")) for sid in ("s-a", "s-b", "s-a")]

    assert asyncio.run(main()) == ["refunded s-a", "refunded s-b", "refunded s-a"]
    assert effects == ["s-a", "s-b"]
    with Client(ag_target, namespace=ag_namespace) as c:
        assert c.get(tool_once_key(RUN_KEY, "call-1", session_id="s-b")).state == ip.RECORD_STATE_COMPLETED


def test_keys_that_cannot_tell_sessions_apart_are_warned_of(ag_target: str) -> None:
    client = Client(ag_target)
    try:
        with pytest.warns(UserWarning, match="the same in every session"):
            run_once(client, run_key=RUN_KEY)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            run_once(client, run_key=RUN_KEY, session_id="s-1")
            run_once(client, run_key=lambda ctx: "a run's own key")
    finally:
        client.close()


def test_session_keys_are_distinct_and_apart_from_unscoped_ones() -> None:
    assert tool_once_key("r", "c") == "agent-tool:r:c"
    assert tool_once_key("r", "c", session_id="s") == "agent-tool@s:r:c"
    assert tool_once_key("b:r", "c", session_id="a") != tool_once_key("r", "c", session_id="a:b")
    assert tool_once_key("r", "c", session_id="a%3Ab") != tool_once_key("r", "c", session_id="a:b")


class BeginNoting(AsyncClient):
    """An AsyncClient that keeps every BeginRequest it sends."""

    begins: List[ip.BeginRequest]

    async def _call(self, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Any:
        if isinstance(request, ip.BeginRequest):
            self.begins.append(request)
        return await super()._call(method, request, timeout)


def test_the_tools_lease_reaches_begin(ag_target: str, ag_namespace: str) -> None:
    async def main() -> List[ip.BeginRequest]:
        async with BeginNoting(ag_target, namespace=ag_namespace) as client:
            client.begins = []

            @run_once(client, run_key=RUN_KEY, session_id="s-lease", lease=7.5)
            async def refund(ctx: ToolContext[Any]) -> str:
                return "refunded"

            assert await refund(tool_context("call-1")) == "refunded"
            return client.begins

    begins = asyncio.run(main())
    assert [b.lease.ToNanoseconds() for b in begins] == [7_500_000_000]


def test_a_call_held_by_a_dead_holder_logs_that_it_waits(
    ag_target: str, ag_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A holder that Begins the call's key and never completes (a worker
    killed inside the tool): the retry logs a WARNING naming the key, waits
    for the short lease to run out, and runs the tool, told that the
    earlier holder's lease expired."""
    key = tool_once_key(RUN_KEY, "call-1", session_id="s-dead")
    with Client(ag_target, namespace=ag_namespace) as dead:
        assert dead.begin(key, lease=1.0).outcome == ip.BEGIN_OUTCOME_ACQUIRED
    seen: List[bool] = []

    async def main() -> str:
        async with AsyncClient(ag_target, namespace=ag_namespace) as client:

            @run_once(client, run_key=RUN_KEY, session_id="s-dead", lease=1.0)
            async def refund(ctx: ToolContext[Any]) -> str:
                seen.append(True)
                return "refunded"

            return await refund(tool_context("call-1"))

    with caplog.at_level(logging.WARNING, logger="stepwell"):
        assert asyncio.run(main()) == "refunded"
    assert seen == [True]
    waits = [r for r in caplog.records if r.name == "stepwell" and r.levelno == logging.WARNING]
    assert len(waits) == 1 and key in waits[0].getMessage() and "held by another caller" in waits[0].getMessage()
    with Client(ag_target, namespace=ag_namespace) as c:
        record = c.get(key)
        assert record.state == ip.RECORD_STATE_COMPLETED and record.attempt == 2
