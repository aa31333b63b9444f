"""Starts the real stepwell sidecar for the tests."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from stepwell import Client, KeyNotFound, NO_RETRY, StepwellError

REPO = Path(__file__).resolve().parents[3]


def stepwell_bin() -> str:
    env = os.environ.get("STEPWELL_BIN")
    if env:
        return env
    target = os.environ.get("CARGO_TARGET_DIR", "/root/.cache/stepwell/target")
    path = Path(target) / "debug" / "stepwell"
    if not path.exists():
        subprocess.run(
            ["cargo", "build"],
            cwd=REPO,
            env={**os.environ, "CARGO_TARGET_DIR": target},
            check=True,
        )
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sidecar:
    def __init__(self, listen: str, workdir: Path) -> None:
        self.listen = listen
        self.target = listen
        self.log = open(workdir / f"stepwell-{uuid.uuid4().hex[:6]}.log", "w+")
        self.proc = subprocess.Popen(
            [
                stepwell_bin(),
                "serve",
                "--listen",
                listen,
                "--database-url",
                f"sqlite://{workdir}/x-{uuid.uuid4().hex[:6]}.db",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "STEPWELL_LOG": os.environ.get("STEPWELL_LOG", "warn")},
        )
        self._wait_ready()

    def _wait_ready(self, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        with Client(self.target, retry=NO_RETRY, timeout=1.0) as c:
            while True:
                if self.proc.poll() is not None:
                    self.log.seek(0)
                    raise RuntimeError(f"stepwell exited with {self.proc.returncode}:\n{self.log.read()}")
                try:
                    c.get("readiness-probe")
                except KeyNotFound:
                    return
                except StepwellError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("stepwell did not become ready")
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="stepwell-py-") as d:
        yield Path(d)


@pytest.fixture(scope="session")
def sidecar(workdir: Path) -> Iterator[Sidecar]:
    s = Sidecar(f"127.0.0.1:{free_port()}", workdir)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def target(sidecar: Sidecar) -> str:
    return sidecar.target


def fresh_namespace(prefix: str = "py") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def namespace() -> str:
    return fresh_namespace()


@pytest.fixture
def client(target: str, namespace: str) -> Iterator[Client]:
    with Client(target, namespace=namespace) as c:
        yield c
