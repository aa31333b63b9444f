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

# A state of several MB needs a sidecar and a client that accept such
# messages: the sidecar's request, record and response limits, the client's
# gRPC send and receive limits.
BIG_MESSAGE_BYTES = 64 << 20
BIG_RECORD_BYTES = 16 << 20
BIG_RESPONSE_BYTES = 16 << 20
BIG_SIDECAR_ARGS = [
    "--message-bytes-max", str(BIG_MESSAGE_BYTES),
    "--record-bytes-max", str(BIG_RECORD_BYTES),
    "--response-bytes-max", str(BIG_RESPONSE_BYTES),
]
BIG_CLIENT_OPTIONS = [
    ("grpc.max_send_message_length", BIG_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", BIG_MESSAGE_BYTES),
]


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


@pytest.fixture(scope="session")
def big_sidecar(workdir: Path) -> Iterator[Sidecar]:
    s = start_sidecar(workdir, BIG_SIDECAR_ARGS)
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
