"""The gRPC port's front door: it accepts the TCP connections, keeps at most `per_address`
of them from one client address and `total` in all, and relays each, byte for byte, to the
gRPC server, which listens on an abstract Unix socket (Linux: a name, no file, so nothing
is left behind however the broker ends).

grpcio accepts its own connections and limits only their total
(grpc.max_allowed_incoming_connections), so one client address could hold every connection
and keep the others out. Here a connection beyond its address's share is reset as soon as it
is accepted, while connections from other addresses still get in; beyond `total`,
connections wait in the kernel's backlog (nothing is accepted until one closes). TLS, HTTP/2
and every deadline stay the gRPC server's: this only moves bytes, and closes the client's
connection when the server closes its side (the handshake and idle deadlines then reach the
client).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import secrets
import socket
import struct
import threading
import time
from collections import Counter

log = logging.getLogger(__name__)

# connections from one client address at once (ServeConfig.grpc_connections_per_address)
CONNECTIONS_PER_ADDRESS = 16
CHUNK = 64 * 1024
CONNECT_SECONDS = 5.0  # to the gRPC server's Unix socket
# accept() failing for want of descriptors (or any reason but the connection's own): tried
# again after this long, the connections waiting in the backlog meanwhile
EXHAUSTED_RETRY_SECONDS = 1.0
LOG_EVERY_SECONDS = 10.0
# accept() errors that concern the one pending connection (Linux passes its network errors
# on), not the listener
_GONE = (
    errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.ENETDOWN, errno.ENOPROTOOPT,
    errno.EHOSTDOWN, errno.ENONET, errno.EHOSTUNREACH, errno.EOPNOTSUPP, errno.ENETUNREACH,
)  # fmt: skip


def client_key(host: str) -> str:
    """The address a connection counts against: IPv4 as it is (IPv4-mapped IPv6 too), IPv6
    by its /64, since one IPv6 client usually holds a whole /64."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on `host` (its first passive address, as `serve`'s start check
    resolves it) and `port` (0: any free port)."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = info[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(1024)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _reset(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0): the kernel keeps nothing of a refused connection."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class _Tally:
    """A recurring event logged at most once per LOG_EVERY_SECONDS, with the count since."""

    def __init__(self, message: str) -> None:
        self.message = message
        self._next = 0.0
        self._count = 0

    def __call__(self, *detail: object) -> None:
        self._count += 1
        now = time.monotonic()
        if now < self._next:
            return
        count, self._count, self._next = self._count, 0, now + LOG_EVERY_SECONDS
        log.warning(self.message, count, *detail)


class GrpcFront:
    """Bound at construction (so a port in use fails there); `start()` runs the relay on a
    thread of its own, `stop()` closes every connection."""

    def __init__(self, host: str, port: int, total: int, per_address: int) -> None:
        if total < 1 or per_address < 1:
            raise ValueError("total and per_address must be at least 1")
        self.total = total
        self.per_address = per_address
        # a local process may connect to it directly, as it may to the TCP port from any
        # 127.x address: the token and TLS hold there too
        self.backend_name = f"fairbroker-grpc-{os.getpid()}-{secrets.token_hex(8)}"
        self._listener = _listen(host, port)
        self.port: int = self._listener.getsockname()[1]
        self._by_address: Counter[str] = Counter()
        self._open = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._refused = _Tally(
            "gRPC: %d connections refused: more than %d at once from one address (last: %s)"
        )
        self._exhausted = _Tally("gRPC: %d accept() failures (last: %s); retried each second")

    @property
    def backend_target(self) -> str:
        """The gRPC server's address (grpcio's `unix-abstract:` form)."""
        return f"unix-abstract:{self.backend_name}"

    def connections(self) -> dict[str, int]:
        """Open connections by client address (a copy; for tests and debugging)."""
        return {key: n for key, n in self._by_address.items() if n}

    # ---- lifetime ------------------------------------------------------------------------
    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._stopping = asyncio.Event()
            ready.set()
            try:
                loop.run_until_complete(self._serve())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="grpc-front", daemon=True)
        self._thread.start()
        ready.wait(5)

    def stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                loop.call_soon_threadsafe(stopping.set)
            self._thread.join(timeout=5)
        self._listener.close()

    # ---- the loop ------------------------------------------------------------------------
    async def _serve(self) -> None:
        assert self._stopping is not None
        relays: set[asyncio.Task[None]] = set()
        freed = asyncio.Event()
        accepting = asyncio.create_task(self._accept(relays, freed))
        await self._stopping.wait()
        accepting.cancel()
        for task in relays:
            task.cancel()
        await asyncio.gather(accepting, *relays, return_exceptions=True)

    async def _accept(self, relays: set[asyncio.Task[None]], freed: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._open >= self.total:  # the rest wait in the backlog
                freed.clear()
                await freed.wait()
                continue
            try:
                client, peer = await loop.sock_accept(self._listener)
            except OSError as error:
                if error.errno in _GONE:  # that connection is gone; the next one may be fine
                    continue
                # out of descriptors (or worse): the connections wait in the backlog
                self._exhausted(error.strerror)
                await asyncio.sleep(EXHAUSTED_RETRY_SECONDS)
                continue
            key = client_key(str(peer[0]))
            if self._by_address[key] >= self.per_address:
                _reset(client)
                self._refused(self.per_address, key)
                continue
            self._by_address[key] += 1
            self._open += 1
            task = asyncio.create_task(self._relay(client, key, freed))
            relays.add(task)
            task.add_done_callback(relays.discard)

    async def _relay(self, client: socket.socket, key: str, freed: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        backend: socket.socket | None = None
        try:
            backend = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # EMFILE: no relay
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            backend.setblocking(False)
            address = "\0" + self.backend_name  # the abstract namespace
            await asyncio.wait_for(loop.sock_connect(backend, address), CONNECT_SECONDS)
            pipes = {
                asyncio.create_task(_pipe(loop, client, backend)),
                asyncio.create_task(_pipe(loop, backend, client)),
            }
            try:
                # either side closing ends the connection (HTTP/2 never half-closes)
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in pipes:
                    task.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
        except (OSError, TimeoutError) as error:
            log.debug("gRPC relay for %s ended: %s", key, error)
        finally:
            if backend is not None:
                backend.close()
            client.close()
            self._by_address[key] -= 1
            if not self._by_address[key]:
                del self._by_address[key]
            self._open -= 1
            freed.set()


async def _pipe(
    loop: asyncio.AbstractEventLoop, source: socket.socket, sink: socket.socket
) -> None:
    """Copy until `source` ends; a reset on either side ends it too."""
    try:
        while data := await loop.sock_recv(source, CHUNK):
            await loop.sock_sendall(sink, data)
    except OSError:
        pass
