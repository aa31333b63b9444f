"""Fixtures and helpers of the stepwell.langgraph tests: the sidecars they run against.

The store is SQLite, or Postgres when STEPWELL_TEST_POSTGRES_URL is set (as
scripts/with-postgres sets it). Every test uses a namespace of its own, so
runs against a shared database never see each other's records. Test modules
import the fixtures they use from here (the tests folder's conftest.py is
the one module named conftest). Helper modules here are named ``lg_*``: the
folder is named like LangGraph's namespace package, and on ``sys.path`` it
joins it, so a file named like one of LangGraph's modules would shadow it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Iterator, List, Optional

import pytest
from langchain_core.runnables import RunnableConfig

from conftest import Sidecar, free_port, fresh_namespace


def backend() -> str:
    return "postgres" if os.environ.get("STEPWELL_TEST_POSTGRES_URL") else "sqlite"


def database_url(workdir: Path) -> str:
    url = os.environ.get("STEPWELL_TEST_POSTGRES_URL")
    return url or f"sqlite://{workdir}/langgraph-{uuid.uuid4().hex[:6]}.db"


def start_sidecar(workdir: Path, extra_args: Optional[List[str]] = None) -> Sidecar:
    return Sidecar(
        f"127.0.0.1:{free_port()}", workdir, None, extra_args=extra_args or [], database_url=database_url(workdir)
    )


@pytest.fixture(scope="session")
def lg_sidecar(workdir: Path) -> Iterator[Sidecar]:
    s = start_sidecar(workdir)
    yield s
    s.stop()


@pytest.fixture
def lg_target(lg_sidecar: Sidecar) -> str:
    return lg_sidecar.target


@pytest.fixture
def lg_namespace() -> str:
    return fresh_namespace("lg")


def thread_config(thread_id: str, **extra: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, **extra}}


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
