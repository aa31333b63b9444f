"""Fixtures and helpers of the stepwell.adk tests: the sidecar they run
against and fresh namespaces.

The store is SQLite, or Postgres when STEPWELL_TEST_POSTGRES_URL is set (as
scripts/with-postgres sets it). Every test uses a namespace of its own, so
runs against a shared database never see each other's records. Helper
modules here are named ``adk_*``.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Sidecar, free_port, fresh_namespace


def backend() -> str:
    return "postgres" if os.environ.get("STEPWELL_TEST_POSTGRES_URL") else "sqlite"


def database_url(workdir: Path) -> str:
    url = os.environ.get("STEPWELL_TEST_POSTGRES_URL")
    return url or f"sqlite://{workdir}/adk-{uuid.uuid4().hex[:6]}.db"


@pytest.fixture(scope="session")
def adk_sidecar(workdir: Path) -> Iterator[Sidecar]:
    s = Sidecar(f"127.0.0.1:{free_port()}", workdir, None, database_url=database_url(workdir))
    yield s
    s.stop()


@pytest.fixture
def adk_target(adk_sidecar: Sidecar) -> str:
    return adk_sidecar.target


@pytest.fixture
def adk_namespace() -> str:
    return fresh_namespace("adk")
