"""The client a framework adapter calls: one passed in, which the adapter
never closes, or one it makes from an address at its first call (inside the
event loop that runs the framework) and closes in ``close()``. Shared by
:mod:`stepwell.agents`' session and :mod:`stepwell.adk`'s session and
memory services."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional, TypeVar

from .aio import AsyncClient

_Self = TypeVar("_Self", bound="OwnedClient")


class OwnedClient:
    """``client``, ``namespace``, ``close()``, ``async with`` and ``_call``
    for an adapter; ``_stub`` names the :class:`AsyncClient` stub its calls go to."""

    _stub = "record_stub"
    timeout: Optional[float]

    def _use_client(self, client: Optional[AsyncClient], namespace: Optional[str], timeout: Optional[float]) -> None:
        """Calls go to ``client`` (until ``_make_client``), in ``namespace``."""
        self._client = client
        self._factory: Optional[Callable[[], AsyncClient]] = None
        self._owns_client = False
        self._namespace = namespace
        self.timeout = timeout

    def _make_client(self: _Self, target: str, namespace: str, client_kwargs: Dict[str, Any]) -> _Self:
        """Makes its own client of ``target`` at the first call; ``close()`` closes it."""
        self._factory = functools.partial(AsyncClient, target, namespace=namespace, **client_kwargs)
        self._owns_client = True
        return self

    @property
    def client(self) -> AsyncClient:
        """The client the adapter calls (made now if the adapter makes its own)."""
        if self._client is None:
            if self._factory is None:
                name = type(self).__name__
                raise ValueError(f"{name} needs a client (or use {name}.from_address)")
            self._client = self._factory()
        return self._client

    @property
    def namespace(self) -> str:
        if self._namespace is not None:
            return self._namespace
        return (self._client.namespace if self._client is not None else "") or "default"

    async def close(self) -> None:
        """Closes the client if the adapter made it; a client passed in stays open."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _call(self, method_name: str, request: Any) -> Any:
        client = self.client
        return await client._call(getattr(getattr(client, self._stub), method_name), request, self.timeout)
