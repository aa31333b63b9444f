"""An HTTP/2 proxy of a test's own between a client and a sidecar, which
does to the next request what the test arms it with: cut its connection as
a crashed sidecar would, reset its stream, hold it, or answer it itself.

It passes every frame through until armed. In the TLS pass it ends the
client's TLS with the test PKI's server certificate (asking for a client
certificate, as the sidecar does) and dials the sidecar with the client
certificate, so that it sees frames; its cuts close the TCP connection
under the TLS without a close_notify, as a crash would. It runs on an event
loop of its own, in a thread, so that blocking tests can use it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading
from typing import Any, List, Optional, Set, Tuple

from conftest import Security

# What the proxy does to the next request (the next HEADERS frame a client sends).
PASS = "pass"
CUT_FIN = "fin"  # drop it and close the connection with a FIN, as the kernel does for a killed sidecar
CUT_RST = "rst"  # drop it and reset the connection, as for a sidecar killed with bytes it had not read
RESET_STREAM = "reset-stream"  # drop it, answer RST_STREAM(CANCEL), then a FIN: a proxy losing the sidecar
HOLD = "hold"  # forward its HEADERS but none of its DATA: the call stays in flight
ANSWER = "answer"  # drop it and answer with the proxy's own trailers-only response, then a FIN

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM = 0x0, 0x1, 0x3


def trailers_only(*fields: Tuple[str, str]) -> bytes:
    """An HPACK header block of literal fields that are never indexed, so
    that it leaves the client's decoding table as it was."""

    def integer(n: int) -> bytes:  # 7-bit prefix, Huffman bit clear
        if n < 127:
            return bytes([n])
        out = [127]
        n -= 127
        while n >= 128:
            out.append(n % 128 | 0x80)
            n >>= 7
        return bytes(out + [n])

    block = b""
    for name, value in fields:
        n, v = name.encode(), value.encode()
        block += b"\x10" + integer(len(n)) + n + integer(len(v)) + v
    return block


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    header = await reader.readexactly(9)
    return header + await reader.readexactly(int.from_bytes(header[:3], "big"))


class _Conn:
    """One client connection and its connection to the sidecar."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.up_reader: Optional[asyncio.StreamReader] = None
        self.up_writer: Optional[asyncio.StreamWriter] = None
        self.held = -1  # the stream whose DATA is dropped (HOLD)

    def raw(self) -> Any:
        """The TCP socket under any TLS."""
        return self.writer.get_extra_info("socket")

    def cut(self, reset: bool) -> None:
        raw = self.raw()
        if raw is None or raw.fileno() < 0 or self.writer.transport.is_closing():
            pass  # already closed (by the client, the sidecar or an earlier cut)
        elif reset:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.writer.transport.abort()
        else:
            raw.shutdown(socket.SHUT_WR)
        if self.up_writer is not None:
            self.up_writer.transport.abort()


class DropProxy:
    def __init__(self, upstream: str, security: Optional[Security]) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._server_tls: Optional[ssl.SSLContext] = None
        self._client_tls: Optional[ssl.SSLContext] = None
        if security is not None:
            self._server_tls, self._client_tls = self._tls(security)
        self._lock = threading.Lock()
        self._mode, self._answer = PASS, b""
        self._applied = threading.Semaphore(0)
        self._conns: Set[_Conn] = set()
        self.requests = 0  # requests (HEADERS frames) clients sent
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = self._run(asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._server_tls))
        self.target = "127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]

    @staticmethod
    def _tls(security: Security) -> Tuple[ssl.SSLContext, ssl.SSLContext]:
        f = security.folder
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(f / "server.pem", f / "server.key")
        server.load_verify_locations(f / "ca.pem")
        server.verify_mode = ssl.CERT_REQUIRED
        server.set_alpn_protocols(["h2"])
        client = ssl.create_default_context(cafile=str(f / "ca.pem"))
        client.load_cert_chain(f / "client.pem", f / "client.key")
        client.set_alpn_protocols(["h2"])
        return server, client

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def arm(self, mode: str, answer: bytes = b"") -> None:
        """Applies ``mode`` to the next request of any connection; ``answer``
        is the header block ANSWER sends (see trailers_only)."""
        with self._lock:
            self._mode, self._answer = mode, answer

    def wait_applied(self, limit: float = 30.0) -> None:
        """Waits (bounded) until the armed mode has met a request."""
        if not self._applied.acquire(timeout=limit):
            raise AssertionError(f"no request reached the proxy within {limit}s")

    def cut_all(self, reset: bool = False) -> None:
        """Closes every client connection now, with an RST when ``reset``,
        else with a FIN: a sidecar that goes away between calls."""

        async def cut() -> None:
            for conn in list(self._conns):
                conn.cut(reset)

        self._run(cut())

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for conn in list(self._conns):
                conn.cut(True)

        self._run(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def __enter__(self) -> "DropProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self) -> Tuple[str, bytes]:
        with self._lock:
            self.requests += 1
            taken = self._mode, self._answer
            self._mode, self._answer = PASS, b""
            return taken

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(reader, writer)
        self._conns.add(conn)
        try:
            conn.up_reader, conn.up_writer = await asyncio.open_connection(
                *self._upstream, ssl=self._client_tls, server_hostname="localhost" if self._client_tls else None
            )
            to_client = asyncio.ensure_future(self._to_client(conn))
            try:
                await self._from_client(conn)
            finally:
                to_client.cancel()
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            self._conns.discard(conn)
            writer.transport.abort()
            if conn.up_writer is not None:
                conn.up_writer.transport.abort()

    async def _to_client(self, conn: _Conn) -> None:
        """Copies the sidecar's frames to the client, each whole, so that the
        proxy can put frames of its own between them."""
        assert conn.up_reader is not None
        try:
            while True:
                conn.writer.write(await _read_frame(conn.up_reader))
                await conn.writer.drain()
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass

    async def _from_client(self, conn: _Conn) -> None:
        assert conn.up_writer is not None
        conn.up_writer.write(await conn.reader.readexactly(len(_PREFACE)))
        while True:
            frame = await _read_frame(conn.reader)
            kind, stream = frame[3], int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF
            if kind == _HEADERS:
                mode, answer = self._take()
                if mode != PASS:
                    if await self._apply(conn, mode, stream, frame, answer):
                        return
                    continue
            if kind == _DATA and stream == conn.held:
                continue
            conn.up_writer.write(frame)

    @staticmethod
    async def _drain(reader: asyncio.StreamReader) -> None:
        while await reader.read(65536):
            pass

    async def _apply(self, conn: _Conn, mode: str, stream: int, frame: bytes, answer: bytes) -> bool:
        """Does ``mode`` to the request whose HEADERS frame is ``frame``;
        True when the connection is over."""
        assert conn.up_writer is not None
        try:
            if mode == HOLD:
                conn.held = stream
                conn.up_writer.write(frame)
                return False
            if mode == RESET_STREAM:
                conn.writer.write(_frame(_RST_STREAM, 0, stream, (0x8).to_bytes(4, "big")))
            elif mode == ANSWER:
                conn.writer.write(_frame(_HEADERS, 0x1 | 0x4, stream, answer))
            await conn.writer.drain()
            conn.cut(mode == CUT_RST)
            if mode != CUT_RST:
                # After the FIN, what the client still sends is read and
                # dropped, so that no unread byte turns it into an RST.
                await asyncio.wait_for(self._drain(conn.reader), 30)
            return True
        finally:
            self._applied.release()
