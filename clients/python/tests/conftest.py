"""Starts the real stepwell sidecar for the tests."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from stepwell import TLS, Client, KeyNotFound, NO_RETRY, StepwellError

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


def _health_messages() -> Any:
    """grpc.health.v1's HealthCheckRequest and HealthCheckResponse, built from
    their two-field definitions in a pool of their own (no extra package)."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="stepwell_tests/health.proto", package="grpc.health.v1", syntax="proto3")
    fdp.message_type.add(name="HealthCheckRequest").field.add(
        name="service", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL
    )
    resp = fdp.message_type.add(name="HealthCheckResponse")
    status = resp.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=name, number=number)
    resp.field.add(
        name="status",
        number=1,
        type=F.TYPE_ENUM,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
        label=F.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"grpc.health.v1.{n}"))
        for n in ("HealthCheckRequest", "HealthCheckResponse")
    )


_HealthCheckRequest, _HealthCheckResponse = _health_messages()
_SERVING = 1


class Security:
    """The TLS and auth material the test script generated for the second pass.

    The folder holds ``ca.pem``, ``server.pem``/``server.key``, the client's
    ``client.pem``/``client.key``, ``auth.toml``, and the tokens of its two
    principals: ``token`` (admin everywhere) and ``reader-token`` (read only).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.token = (folder / "token").read_text().strip()
        self.reader_token = (folder / "reader-token").read_text().strip()

    def tls(self, *, client_cert: bool = True) -> TLS:
        if not client_cert:
            return TLS(ca=self.folder / "ca.pem")
        return TLS(ca=self.folder / "ca.pem", cert=self.folder / "client.pem", key=self.folder / "client.key")

    def serve_args(self) -> List[str]:
        f = self.folder
        return [
            "--tls-cert", str(f / "server.pem"),
            "--tls-key", str(f / "server.key"),
            "--tls-client-ca", str(f / "ca.pem"),
            "--auth-file", str(f / "auth.toml"),
        ]


def security_from_env() -> Optional[Security]:
    """The second pass of clients/python/test sets STEPWELL_TEST_SECURITY_DIR."""
    folder = os.environ.get("STEPWELL_TEST_SECURITY_DIR")
    return Security(Path(folder)) if folder else None


class Sidecar:
    """A sidecar process; ``extra_args`` go after ``serve``'s own, ``extra_env`` into its environment.

    ``database_url`` is the store (default: a new SQLite file in ``workdir``).
    ``kill()`` and ``start()`` crash it and bring it back on the same store and address.
    """

    def __init__(
        self,
        listen: str,
        workdir: Path,
        security: Optional[Security] = None,
        *,
        extra_args: Sequence[str] = (),
        extra_env: Optional[Dict[str, str]] = None,
        database_url: Optional[str] = None,
    ) -> None:
        self.listen = listen
        self.target = listen
        self.security = security
        # What a client needs to reach this sidecar: nothing in plaintext, the
        # admin token and the client certificate when TLS and auth are on.
        self.connect: Dict[str, Any] = (
            {"token": security.token, "tls": security.tls()} if security is not None else {}
        )
        self.log = open(workdir / f"stepwell-{uuid.uuid4().hex[:6]}.log", "w+")
        self.database_url = database_url or f"sqlite://{workdir}/x-{uuid.uuid4().hex[:6]}.db"
        self._argv = [
            stepwell_bin(),
            "serve",
            "--listen",
            listen,
            "--database-url",
            self.database_url,
            *(security.serve_args() if security is not None else []),
            *extra_args,
        ]
        # No admin listener unless a test asks: sidecars side by side would contend for its port.
        self._env = {
            **os.environ,
            "STEPWELL_LOG": os.environ.get("STEPWELL_LOG", "warn"),
            "STEPWELL_ADMIN_LISTEN": "off",
            **(extra_env or {}),
        }
        self.proc = self._spawn()
        self._wait_ready()

    def _spawn(self) -> "subprocess.Popen[bytes]":
        # Every run of the process appends to the one log.
        return subprocess.Popen(self._argv, stdout=self.log, stderr=subprocess.STDOUT, env=self._env)

    def _exited(self) -> RuntimeError:
        self.log.seek(0)
        return RuntimeError(f"stepwell exited with {self.proc.returncode}:\n{self.log.read()}")

    def kill(self) -> None:
        """Kills the sidecar with SIGKILL, as a crash or the OOM killer would,
        and returns once the process has exited."""
        self.proc.kill()
        self.proc.wait()

    def start(self, limit: float = 60.0) -> None:
        """Starts the killed sidecar again, on the same store and address, and
        returns once its health service answers SERVING (see ``wait_serving``)."""
        if self.proc.poll() is None:
            raise RuntimeError("stepwell is still running; kill() it first")
        self.proc = self._spawn()
        self.wait_serving(limit)

    def wait_serving(self, limit: float = 60.0) -> None:
        """Polls grpc.health.v1.Health/Check (the whole server, service "") on a
        connection of its own until it answers SERVING."""
        tls = self.security.tls() if self.security is not None else None
        if tls is None:
            channel = grpc.insecure_channel(self.target)
        else:
            channel = grpc.secure_channel(self.target, tls.channel_credentials(), options=tls.channel_options())
        metadata = [("authorization", f"Bearer {self.security.token}")] if self.security is not None else None
        deadline = time.monotonic() + limit
        with channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=_HealthCheckRequest.SerializeToString,
                response_deserializer=_HealthCheckResponse.FromString,
            )
            while True:
                if self.proc.poll() is not None:
                    raise self._exited()
                try:
                    if check(_HealthCheckRequest(service=""), timeout=1.0, metadata=metadata).status == _SERVING:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"stepwell's health did not answer SERVING within {limit}s")
                time.sleep(0.05)

    def _wait_ready(self, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        with Client(self.target, retry=NO_RETRY, timeout=1.0, **self.connect) as c:
            while True:
                if self.proc.poll() is not None:
                    raise self._exited()
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
    s = Sidecar(f"127.0.0.1:{free_port()}", workdir, security_from_env())
    yield s
    s.stop()


@pytest.fixture(scope="session")
def target(sidecar: Sidecar) -> str:
    return sidecar.target


@pytest.fixture(scope="session")
def connect(sidecar: Sidecar) -> Dict[str, Any]:
    """The client keyword arguments (token, tls) the session's sidecar needs."""
    return sidecar.connect


def fresh_namespace(prefix: str = "py") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def namespace() -> str:
    return fresh_namespace()


@pytest.fixture
def client(target: str, namespace: str, connect: Dict[str, Any]) -> Iterator[Client]:
    with Client(target, namespace=namespace, **connect) as c:
        yield c
