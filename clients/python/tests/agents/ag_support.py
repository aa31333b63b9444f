"""Fixtures and helpers of the stepwell.agents tests: the sidecar they run
against, fresh namespaces and session ids.

The store is SQLite, or Postgres when STEPWELL_TEST_POSTGRES_URL is set (as
scripts/with-postgres sets it); clients/python/test runs the folder once on
each. Every test uses a namespace of its own, so runs against a shared
database never see each other's records. Helper modules here are named
``ag_*``, so that none is taken for one of the SDK's modules (the SDK's
package is named ``agents``, like this folder).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from conftest import Sidecar, free_port, fresh_namespace


def backend() -> str:
    return "postgres" if os.environ.get("STEPWELL_TEST_POSTGRES_URL") else "sqlite"


def database_url(workdir: Path) -> str:
    url = os.environ.get("STEPWELL_TEST_POSTGRES_URL")
    return url or f"sqlite://{workdir}/agents-{uuid.uuid4().hex[:6]}.db"


def start_sidecar(workdir: Path, extra_args: Optional[List[str]] = None) -> Sidecar:
    return Sidecar(
        f"127.0.0.1:{free_port()}", workdir, None, extra_args=extra_args or [], database_url=database_url(workdir)
    )


@pytest.fixture(scope="session")
def ag_sidecar(workdir: Path) -> Iterator[Sidecar]:
    s = start_sidecar(workdir)
    yield s
    s.stop()


@pytest.fixture
def ag_target(ag_sidecar: Sidecar) -> str:
    return ag_sidecar.target


@pytest.fixture
def ag_namespace() -> str:
    return fresh_namespace("ag")


def new_session_id() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"
