"""The tenant API as a gRPC service, for Python clients.

grpcio's synchronous server hands each call to a worker thread, and a unary call's worker
waits there for the request message; left as it is, a client that opens calls and never
sends them holds every worker, and calls queued behind busy workers run whenever a worker
frees up, however late. So each call is stamped when it arrives (grpcio asks the generic
handler for a call's handler on its polling thread, before the call waits for a worker),
its request must arrive within REQUEST_SECONDS of that (else the call is cancelled), and a
call picked up after its deadline is answered DEADLINE_EXCEEDED without running.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from allocator.broker.api import CALLS, MAX_REQUEST_BYTES, RequestObserver, check_token
from allocator.broker.core import ApiError, Broker
from allocator.broker.grpc_front import CONNECTIONS_PER_ADDRESS, GrpcFront
from allocator.broker.proto import pb
from allocator.broker.tls import TlsFiles

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_CONCURRENT_RPCS = 256
# The server's own deadline, counted from the call's arrival: a call is answered within
# this long (less when the client's deadline is nearer), a call without a deadline
# included; past it, DEADLINE_EXCEEDED having changed nothing.
MAX_CALL_SECONDS = 10.0
# A call's request message must arrive within this long of the call's headers.
REQUEST_SECONDS = 5.0
LATE_RECEIVE_SECONDS = 1.0
WORKERS = 16
# Connections not through the HTTP/2 handshake within this long are closed, and so are
# connections with no call for IDLE_SECONDS (clients reconnect when they next call).
HANDSHAKE_SECONDS = 10
IDLE_SECONDS = 30


def max_connections() -> int:
    """gRPC connections accepted at once: as many as a quarter of the process's descriptor
    limit holds, two descriptors each (the client's and the relay's into the gRPC server,
    grpc_front.py), at most 256. Beyond it, new connections wait in the kernel's backlog
    and use none of the broker's descriptors, so a flood of gRPC connections leaves room
    for /healthz, the tenant HTTP API and the state store."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 256
    return max(8, min(256, soft // 8))


class _Sparse:
    """One log line per `every` seconds for a recurring event, with the count since the last."""

    def __init__(self, message: str, every: float = 10.0) -> None:
        self.message = message
        self.every = every
        self._lock = threading.Lock()
        self._next = 0.0
        self._count = 0

    def __call__(self) -> None:
        with self._lock:
            self._count += 1
            now = time.monotonic()
            if now < self._next:
                return
            count, self._count, self._next = self._count, 0, now + self.every
        log.warning(self.message, count)


_late = _Sparse("gRPC: %d calls not run: their deadline passed before a worker took them")
_unsent = _Sparse(f"gRPC: %d calls cancelled: no request within {REQUEST_SECONDS:g} s")


class _Call:
    """One call's clock: its deadline (monotonic), from its arrival."""

    def __init__(self, arrived: float, context: grpc.ServicerContext) -> None:
        self.arrived = arrived
        remaining = context.time_remaining()  # the client's deadline, if it set one
        client = float("inf") if remaining is None else time.monotonic() + remaining
        self.deadline = min(arrived + MAX_CALL_SECONDS, client)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def expired(self, what: str) -> ApiError:
        took = time.monotonic() - self.arrived
        return ApiError("DEADLINE_EXCEEDED", f"{what} ({took:.1f} s); nothing was done")


def _receive(requests: Iterator[object], context: grpc.ServicerContext, call: _Call) -> object:
    """The call's request message, if it arrives within REQUEST_SECONDS of the call (and its
    deadline); otherwise the call is cancelled and this raises."""
    if call.left() <= 0:
        _late()
        raise call.expired("the call waited for a worker past its deadline")
    # a call taken late gets a moment: its request may have come long ago (then it is read
    # at once), and a silent call costs its worker no more than that moment
    now = time.monotonic()
    until = max(call.arrived + REQUEST_SECONDS, now + LATE_RECEIVE_SECONDS)
    left = min(until, call.deadline) - now
    late = threading.Event()

    def cancel() -> None:
        late.set()
        context.cancel()

    timer = threading.Timer(left, cancel)
    timer.daemon = True
    timer.start()
    try:
        return next(requests)
    except StopIteration:
        raise ApiError("INVALID_ARGUMENT", "no request message") from None
    except grpc.RpcError:  # cancelled: by the timer or by the client
        if late.is_set():
            _unsent()
        raise ApiError("CANCELLED", "the request did not arrive in time") from None
    finally:
        timer.cancel()


def _within_deadline(broker: Broker, call: _Call, run: Callable[[], T]) -> T:
    """`run()` under the broker's lock, if the lock is free before the call's deadline;
    otherwise DEADLINE_EXCEEDED and nothing is done, so a caller that gave up is never
    answered by a change it did not see."""
    left = call.left()
    lock = broker._lock  # reentrant: the broker's own methods take it again
    if left <= 0:
        _late()
        raise call.expired("the call waited for a worker past its deadline")
    if not lock.acquire(timeout=left):
        raise call.expired("the broker was busy past the call's deadline")
    try:
        return run()
    finally:
        lock.release()


SERVICE = "fairbroker.v1.TenantService"


class _Undecodable:
    """A request whose bytes are not its message: answered INVALID_ARGUMENT by the handler
    (grpc's own deserializer failure is INTERNAL, which blames the server)."""

    def __init__(self, error: DecodeError) -> None:
        self.error = error


def _decoder(kind: type[Message]) -> Callable[[bytes], Message | _Undecodable]:
    def decode(data: bytes) -> Message | _Undecodable:
        try:
            return kind.FromString(data)
        except DecodeError as error:
            return _Undecodable(error)

    return decode


class _Servicer:
    def __init__(self, broker: Broker, token: str | None, observer: RequestObserver | None):
        self.broker = broker
        self.token = token
        self._observer = observer

    def observe(self, method: str, code: str) -> None:
        if self._observer is not None:
            self._observer("grpc", method, code)

    def handle(self, name: str, requests: Iterator[object], context, arrived: float):
        call = CALLS[name]
        try:
            clock = _Call(arrived, context)
            request = _receive(requests, context, clock)
            if isinstance(request, _Undecodable):
                raise ApiError(
                    "INVALID_ARGUMENT", f"malformed {name} request: not a {SERVICE} message"
                )
            metadata = dict(context.invocation_metadata())
            check_token(self.token, metadata.get("authorization"))
            standby = self.broker.standby()
            if standby is not None:  # --ha: the standby names the leader
                raise ApiError("UNAVAILABLE", standby)
            reply = _within_deadline(self.broker, clock, lambda: call.handler(self.broker, request))
        except ApiError as error:
            self.observe(name, error.code)
            context.abort(getattr(grpc.StatusCode, error.code), str(error))
        except Exception as error:  # never let one request take the server down
            log.exception("gRPC %s failed", name)
            self.observe(name, "INTERNAL")
            context.abort(grpc.StatusCode.INTERNAL, f"internal error: {error}")
        self.observe(name, "OK")
        return reply


class _Arrivals(grpc.GenericRpcHandler):
    """The service's methods, each call stamped with its arrival. grpcio calls `service` on
    its polling thread as a call's headers arrive, before the call waits for a worker
    (tests/test_http_server.py checks that a call queued past its deadline does not run).
    The methods are taken as request-streaming so that the handler, not grpcio, waits for
    the one request message, with a deadline."""

    def __init__(self, servicer: _Servicer) -> None:
        self._servicer = servicer
        service = pb.DESCRIPTOR.services_by_name[SERVICE.rsplit(".", 1)[1]]
        self._codecs = {
            f"/{SERVICE}/{method.name}": (
                method.name,
                _decoder(CALLS[method.name].request_type),
                getattr(pb, method.output_type.name).SerializeToString,
            )
            for method in service.methods
        }

    def service(self, handler_call_details: grpc.HandlerCallDetails):
        arrived = time.monotonic()
        codec = self._codecs.get(handler_call_details.method)  # type: ignore[attr-defined]
        if codec is None:
            return None
        name, decode, encode = codec
        handle = self._servicer.handle

        def behaviour(requests, context):
            return handle(name, requests, context, arrived)

        return grpc.stream_unary_rpc_method_handler(
            behaviour, request_deserializer=decode, response_serializer=encode
        )


class TenantGrpcServer:
    """The tenant API's gRPC service. Its TCP port belongs to a GrpcFront (grpc_front.py),
    which limits connections per client address and relays them to the gRPC server on a
    private (abstract) Unix socket."""

    def __init__(
        self,
        broker: Broker,
        address: tuple[str, int],
        token: str | None = None,
        observer: RequestObserver | None = None,
        tls: TlsFiles | None = None,
        connections_per_address: int = CONNECTIONS_PER_ADDRESS,
    ) -> None:
        host, port = address
        total = max_connections()
        # binds the TCP port; the gRPC server itself listens on the front's Unix socket
        self._front = GrpcFront(host, port, total, connections_per_address)
        try:
            self._server = self._grpc_server(broker, token, observer, tls, total)
        except BaseException:
            self._front.stop()
            raise
        self.port = self._front.port

    def _grpc_server(
        self,
        broker: Broker,
        token: str | None,
        observer: RequestObserver | None,
        tls: TlsFiles | None,
        total: int,
    ) -> grpc.Server:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="tenant-grpc"),
            # beyond this many calls in flight a call is refused with RESOURCE_EXHAUSTED at
            # once instead of queueing without bound
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
            options=[
                ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                ("grpc.so_reuseport", 0),
                ("grpc.max_concurrent_streams", 100),  # per connection
                ("grpc.max_allowed_incoming_connections", total),  # the front's, again
                ("grpc.server_handshake_timeout_ms", HANDSHAKE_SECONDS * 1000),
                ("grpc.max_connection_idle_ms", IDLE_SECONDS * 1000),
                ("grpc.http2.max_ping_strikes", 2),  # clients that ping-flood are let go
            ],
        )
        server.add_generic_rpc_handlers((_Arrivals(_Servicer(broker, token, observer)),))
        target = self._front.backend_target
        if tls is None:
            bound = server.add_insecure_port(target)
        else:
            bound = server.add_secure_port(target, tls.grpc_credentials())
        if bound == 0:
            raise OSError(f"cannot bind gRPC to {target}")
        return server

    def start(self) -> None:
        self._server.start()
        self._front.start()

    def stop(self) -> None:
        self._front.stop()
        self._server.stop(grace=1).wait(timeout=5)
