"""LangGraph's checkpointer conformance suite against both stepwell savers.

AsyncStepwellSaver is validated as it is. The blocking StepwellSaver is
validated through a thin subclass whose async methods run the blocking ones
in a worker thread (asyncio.to_thread), so the code under test is the
blocking saver's. Every capability, base and extended, must be detected and
pass; the report is printed (pytest -s shows it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, Dict, List, Optional

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, EXTENDED_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport, ProgressCallbacks

from conftest import Sidecar, fresh_namespace
from lg_support import backend, lg_sidecar  # noqa: F401  (fixture)
from stepwell.langgraph import AsyncStepwellSaver, StepwellSaver


class ThreadedStepwellSaver(StepwellSaver):
    """StepwellSaver whose async methods call its blocking ones in a worker thread."""

    async def aget_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[CheckpointTuple]:
        it = self.list(config, filter=filter, before=before, limit=limit)
        done = object()
        while (item := await asyncio.to_thread(next, it, done)) is not done:
            yield item  # type: ignore[misc]

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def check(report: CapabilityReport) -> None:
    report.print_report()
    failures: List[str] = [f for r in report.results.values() for f in r.failures]
    assert report.passed_all_base(), failures
    for cap in EXTENDED_CAPABILITIES:
        result = report.results[cap.value]
        assert result.detected, f"{cap.value} not detected"
        assert result.passed is True, (cap.value, result.failures)
    for cap in BASE_CAPABILITIES | EXTENDED_CAPABILITIES:
        assert report.results[cap.value].tests_passed > 0, cap.value
    assert report.conformance_level() == "FULL"


def test_async_saver_conforms(lg_sidecar: Sidecar) -> None:
    # A fresh namespace per capability suite: the suite reuses thread ids.
    @checkpointer_test(name=f"AsyncStepwellSaver ({backend()})")
    async def factory() -> AsyncIterator[AsyncStepwellSaver]:
        async with AsyncStepwellSaver.from_address(lg_sidecar.target, namespace=fresh_namespace("lgc")) as saver:
            yield saver

    check(asyncio.run(validate(factory, progress=ProgressCallbacks.verbose())))


def test_sync_saver_conforms(lg_sidecar: Sidecar) -> None:
    @checkpointer_test(name=f"StepwellSaver ({backend()})")
    async def factory() -> AsyncIterator[StepwellSaver]:
        with ThreadedStepwellSaver.from_address(lg_sidecar.target, namespace=fresh_namespace("lgc")) as saver:
            yield saver

    check(asyncio.run(validate(factory, progress=ProgressCallbacks.verbose())))
