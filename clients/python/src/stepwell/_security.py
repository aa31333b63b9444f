"""The bearer token and TLS options of the clients.

The token is attached by a channel interceptor, so every call made on the
channel carries it: the client's methods, ``once()``, the
:class:`~stepwell.CheckpointStore` and the raw stubs alike. It is held by a
:class:`_Secret`, whose ``repr`` and ``str`` never show it, so printing a
client, an interceptor or a traceback's locals cannot leak it.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

from ._common import channel_target

PemSource = Union[None, str, bytes, "os.PathLike[str]"]

AUTHORIZATION = "authorization"


class _Secret:
    """A string that is redacted wherever it would be printed."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        # Pickling would copy the secret into wherever the bytes end up.
        raise TypeError("a stepwell token cannot be pickled")


def check_token(token: str) -> _Secret:
    """Validates a bearer token without ever putting it into the error message."""
    if not isinstance(token, str):
        raise TypeError("token must be a str")
    if not token:
        raise ValueError("token must not be empty")
    # A header value must be visible ASCII; anything else (a newline above all)
    # would be refused by gRPC or split the header.
    if any(not (0x21 <= ord(ch) <= 0x7E) for ch in token):
        raise ValueError("token must be visible ASCII without spaces")
    return _Secret(token)


def is_local(target: str) -> bool:
    """Whether ``target`` never leaves the machine: a Unix socket, ``localhost``
    or a loopback IP. Anything the client cannot tell (a DNS name) is remote."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    if "://" in target:
        # scheme://authority/endpoint: the endpoint is the address.
        rest = target.split("://", 1)[1]
        target = rest.split("/", 1)[1] if "/" in rest else rest
    elif target.startswith(("ipv4:", "ipv6:")):
        return all(is_local(address) for address in target[5:].split(","))
    if target.startswith("["):
        host = target[1:].split("]", 1)[0]
    elif target.count(":") == 1:
        host = target.split(":", 1)[0]
    else:
        host = target
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_plaintext_token(target: str) -> None:
    """A token goes over the network only inside TLS: refuses a plaintext
    channel carrying one to a target beyond loopback."""
    if not is_local(target):
        raise ValueError(
            f"a token to {target!r}, beyond loopback, needs tls= (or credentials=): it is never sent in the clear"
        )


def _read_pem(source: PemSource, what: str) -> Optional[bytes]:
    """PEM bytes as they are, or the contents of the file a path names."""
    if source is None:
        return None
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    try:
        with open(os.fspath(source), "rb") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"cannot read the TLS {what} {os.fspath(source)!r}: {exc.strerror}") from None


@dataclass(frozen=True)
class TLS:
    """TLS for the connection to the sidecar.

    Each of ``ca``, ``cert`` and ``key`` is a path to a PEM file or the PEM
    bytes themselves.

    Args:
        ca: the CA bundle to trust; ``None`` trusts the system's roots.
        cert: a client certificate chain, for mutual TLS (needs ``key``).
        key: the client certificate's private key (needs ``cert``); it is
            left out of the ``repr``.
        server_name: the name checked against the server's certificate
            when it differs from the target's host.
    """

    ca: PemSource = None
    cert: PemSource = None
    key: PemSource = field(default=None, repr=False)
    server_name: Optional[str] = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("TLS needs both cert and key for a client certificate, or neither")

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """The ``grpc.ChannelCredentials`` of these options (the files are read now)."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read_pem(self.ca, "CA bundle"),
            private_key=_read_pem(self.key, "client key"),
            certificate_chain=_read_pem(self.cert, "client certificate"),
        )

    def channel_options(self) -> List[Tuple[str, Any]]:
        if self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []


def with_authorization(metadata: Optional[Sequence[Tuple[str, Any]]], token: _Secret) -> List[Tuple[str, Any]]:
    """The call's metadata with the bearer token added."""
    return [*(metadata or ()), (AUTHORIZATION, f"Bearer {token.reveal()}")]


def refuse_duplicate_authorization(metadata: Optional[Sequence[Tuple[str, str]]]) -> None:
    """A token and an ``authorization`` entry in ``metadata`` would send two headers."""
    for key, _ in metadata or ():
        if key.lower() == AUTHORIZATION:
            raise ValueError("pass the bearer token as token=, not as authorization metadata as well")


class _CallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    """The sync API's call details are an interface: this is a plain carrier of them."""

    def __init__(self, base: grpc.ClientCallDetails, metadata: List[Tuple[str, Any]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class BearerTokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds ``authorization: Bearer <token>`` to every call of a sync channel."""

    def __init__(self, token: _Secret) -> None:
        self._token = token

    def __repr__(self) -> str:
        return "BearerTokenInterceptor(token=<redacted>)"

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _CallDetails(details, with_authorization(details.metadata, self._token))

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)


class AsyncBearerTokenInterceptor(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Adds ``authorization: Bearer <token>`` to every unary call of a grpc.aio channel."""

    def __init__(self, token: _Secret) -> None:
        self._token = token

    def __repr__(self) -> str:
        return "AsyncBearerTokenInterceptor(token=<redacted>)"

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        metadata = grpc.aio.Metadata(*with_authorization(list(details.metadata or ()), self._token))
        new = grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )
        return await continuation(new, request)


def resolve_credentials(
    tls: Union[None, bool, TLS], credentials: Optional[grpc.ChannelCredentials]
) -> Tuple[Optional[grpc.ChannelCredentials], List[Tuple[str, Any]]]:
    """The channel credentials (None: plaintext) and extra channel options."""
    if tls is not None and tls is not False and credentials is not None:
        raise ValueError("pass either tls= or credentials=, not both")
    if tls is True:
        tls = TLS()
    if isinstance(tls, TLS):
        return tls.channel_credentials(), tls.channel_options()
    if tls is not None and tls is not False:
        raise TypeError("tls must be a stepwell.TLS, True or None")
    return credentials, []


class ChannelPlan(NamedTuple):
    """What a client's channel is made of, as both clients make it."""

    address: str
    credentials: Optional[grpc.ChannelCredentials]
    options: List[Tuple[str, Any]]
    token: Optional[_Secret]


def plan_channel(
    target: str,
    token: Optional[str],
    tls: Union[None, bool, TLS],
    credentials: Optional[grpc.ChannelCredentials],
    metadata: Optional[Sequence[Tuple[str, str]]],
    options: Optional[Sequence[Tuple[str, Any]]],
) -> ChannelPlan:
    """Checks a client's channel arguments (a token only with one source of
    authorization, and never in plaintext beyond this host) and returns
    the address, credentials (None: plaintext), options and token."""
    address, extra = channel_target(target)
    secret = None
    if token is not None:
        secret = check_token(token)
        refuse_duplicate_authorization(metadata)
    credentials, tls_options = resolve_credentials(tls, credentials)
    if secret is not None and credentials is None:
        refuse_plaintext_token(address)
    return ChannelPlan(address, credentials, list(extra) + tls_options + list(options or []), secret)
