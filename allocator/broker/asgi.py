"""Serving a small ASGI app with uvicorn on its own thread, with production limits.

uvicorn (h11) does the HTTP/1.1 work: strict framing (chunked bodies, one Content-Length,
no request smuggling), a listen backlog, a connection/concurrency limit (503 beyond it),
keep-alive timeouts and a header-size limit. It closes an idle keep-alive connection only
after a first response, so `_Protocol` adds a deadline for each request head: a connection
that has not sent a complete request head within `header_timeout` seconds of opening (or of
its previous response) is closed, which is what stops idle and slowloris connections from
piling up. Request bodies get their own deadline in the app (`read_body`). uvicorn has no
per-connection request cap either: `_Protocol` answers a connection's
`max_requests_per_connection`-th request with `Connection: close` and then closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import struct
import threading
from asyncio.constants import ACCEPT_RETRY_DELAY
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.flow_control import CLOSE_HEADER
from uvicorn.protocols.http.h11_impl import H11Protocol

from allocator.broker.tls import TlsFiles

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class HttpLimits:
    backlog: int = 1024  # pending connections the kernel queues
    max_connections: int = 1000  # beyond this, 503 (uvicorn's limit_concurrency)
    header_timeout: float = 10.0  # seconds for a complete request head
    body_timeout: float = 10.0  # seconds for a complete request body
    keep_alive_timeout: int = 5  # seconds an idle keep-alive connection stays open
    max_header_bytes: int = 16 << 10
    max_body_bytes: int = 1 << 20
    max_requests_per_connection: int = 10_000  # the last one is answered Connection: close
    # seconds an answer may wait for a client that does not read (pipelined requests whose
    # answers fill the socket buffers): then the connection is closed
    write_timeout: float = 10.0


_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, drops the queue


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a deadline for each request head, one for a client to
    take its answers, and a cap on the requests one connection may make."""

    header_timeout = 10.0
    write_timeout = 10.0
    max_requests = 10_000

    def pause_writing(self) -> None:
        super().pause_writing()
        self._cancel_write_deadline()
        self._write_deadline = self.loop.call_later(self.write_timeout, self._write_expired)

    def resume_writing(self) -> None:
        self._cancel_write_deadline()
        super().resume_writing()

    def _cancel_write_deadline(self) -> None:
        deadline = getattr(self, "_write_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._write_deadline = None

    def _write_expired(self) -> None:
        if not self.transport.is_closing():
            log.debug("closing a connection whose client has not read its answers in time")
            # close() would wait for the buffer to drain: never. abort() closes the socket,
            # but the kernel would still hold what it had queued (megabytes on loopback)
            # behind a zero window, FIN-WAIT-1 for minutes; lingering 0 s resets instead.
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            self.transport.abort()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._requests = 0
        self._arm_header_deadline()

    def handle_events(self) -> None:
        # At most one request head is taken per call (h11 pauses until its answer is sent),
        # and its app task has not run yet: the answer's headers can still be decided.
        before = self.cycle
        super().handle_events()
        if self.cycle is not None and self.cycle is not before:
            self._requests += 1
            headers = self.cycle.scope["headers"]
            if self._requests >= self.max_requests and CLOSE_HEADER not in headers:
                # uvicorn answers Connection: close to a request that carries it, and h11
                # then closes the connection once the answer is complete
                headers.append(CLOSE_HEADER)  # type: ignore[attr-defined]

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_deadline()
        self._cancel_write_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        self._cancel_header_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout, self._header_expired)

    def _cancel_header_deadline(self) -> None:
        deadline = getattr(self, "_header_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._header_deadline = None

    def _header_expired(self) -> None:
        # h11 stays IDLE on the client's side until a whole request head has arrived
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.debug("closing a connection that sent no complete request head in time")
            self.transport.close()


class AcceptErrors:
    """An event-loop exception handler: out of file descriptors, asyncio logs every failed
    accept() with its traceback, up to a backlog's worth (1024) each second (100,000 log lines
    in 25 s at 256 fds); this says it once per `every` seconds with a count. The pending
    connections wait in the listen backlog meanwhile. Anything else goes to the default."""

    MESSAGE = "socket.accept() out of system resource"

    def __init__(self, name: str, every: float = 10.0) -> None:
        self.name = name
        self.every = every
        self._next = 0.0
        self._missed = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != self.MESSAGE:
            loop.default_exception_handler(context)
            return
        self._missed += 1
        now = loop.time()
        if now >= self._next:
            log.error(
                "%s: accept() failed %d times: %s (the connections wait in the backlog)",
                self.name, self._missed, context.get("exception"),
            )  # fmt: skip
            self._next, self._missed = now + self.every, 0


_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class _AcceptLoop(asyncio.SelectorEventLoop):
    """asyncio's loop, but an accept() that fails for want of descriptors ends the round of
    accepts. asyncio (3.11) goes on to the backlog's end (1024 tries), scheduling a retry
    for each failure: ~10,000 failed accepts a second out of descriptors, and retries that
    fire on the closed socket at shutdown, a traceback each. Here: one failure, one retry
    (after asyncio's ACCEPT_RETRY_DELAY, 1 s) while the pending connections wait in the
    backlog."""

    def _accept_connection(  # type: ignore[override]
        self, protocol_factory, sock, sslcontext=None, server=None, backlog=100, *timeouts
    ) -> None:
        for _ in range(backlog):
            try:
                conn, address = sock.accept()
                conn.setblocking(False)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # nothing more pending
            except OSError as error:
                if error.errno not in _OUT_OF_RESOURCES:
                    raise
                self.call_exception_handler({"message": AcceptErrors.MESSAGE, "exception": error})
                self._remove_reader(sock.fileno())  # type: ignore[attr-defined]
                self.call_later(
                    ACCEPT_RETRY_DELAY, self._start_serving,  # type: ignore[attr-defined]
                    protocol_factory, sock, sslcontext, server, backlog, *timeouts,
                )  # fmt: skip
                return
            extra = {"peername": address}
            self.create_task(
                self._accept_connection2(  # type: ignore[attr-defined]
                    protocol_factory, conn, extra, sslcontext, server, *timeouts
                )
            )


class _QuietLifecycle(logging.Filter):
    """uvicorn logs its start and stop at INFO once per server, and the broker runs two
    (tenant API and metrics) and says itself when it serves and stops: keep the rest."""

    LINES = ("Started server process", "Finished server process", "Shutting down",
             "Waiting for")  # fmt: skip

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or not record.getMessage().startswith(self.LINES)


logging.getLogger("uvicorn.error").addFilter(_QuietLifecycle())


class AsgiServer:
    """`app` on http://HOST:PORT (port 0: any free port), served from a daemon thread."""

    def __init__(
        self,
        app: App,
        host: str,
        port: int,
        limits: HttpLimits,
        name: str,
        tls: TlsFiles | None = None,
    ) -> None:
        self.limits = limits
        self.name = name
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
            self._socket.listen(limits.backlog)
        except OSError:
            self._socket.close()
            raise
        protocol = type(
            "Protocol",
            (_Protocol,),
            {
                "header_timeout": limits.header_timeout,
                "write_timeout": limits.write_timeout,
                "max_requests": limits.max_requests_per_connection,
            },
        )
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                http=protocol,
                interface="asgi3",
                proxy_headers=False,
                lifespan="off",
                log_config=None,
                access_log=False,
                backlog=limits.backlog,
                limit_concurrency=limits.max_connections,
                limit_max_requests=None,
                timeout_keep_alive=limits.keep_alive_timeout,
                h11_max_incomplete_event_size=limits.max_header_bytes,
                timeout_graceful_shutdown=2,
                server_header=False,
                date_header=False,
                **(tls.uvicorn_options() if tls is not None else {}),  # type: ignore[arg-type]
            )
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """uvicorn's `Server.run` on a loop that stops accepting at the first failed accept and
        logs the failures sparingly (in place of uvicorn's choice: asyncio's loop, or uvloop
        where installed)."""
        with asyncio.Runner(loop_factory=_AcceptLoop) as runner:
            runner.get_loop().set_exception_handler(AcceptErrors(self.name))
            runner.run(self._server.serve(sockets=[self._socket]))

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.close()


DRAIN_LIMIT_BYTES = 16 << 20


async def read_body(receive: Receive, limits: HttpLimits) -> bytes | None:
    """The whole request body within `body_timeout`; None when it is larger than allowed.
    An oversized body is read and dropped up to DRAIN_LIMIT_BYTES, so that the client sees
    the answer rather than a reset connection. Raises TimeoutError when the body does not
    arrive in time."""

    async def read() -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ConnectionError("client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= limits.max_body_bytes:
                chunks.append(chunk)
            if not message.get("more_body") or size > DRAIN_LIMIT_BYTES:
                return b"".join(chunks) if size <= limits.max_body_bytes else None

    return await asyncio.wait_for(read(), limits.body_timeout)


async def respond(send: Send, status: int, body: bytes, content_type: str, close=False) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
