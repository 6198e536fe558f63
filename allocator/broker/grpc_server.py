"""The tenant API as a gRPC service, for Python clients."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from allocator.broker.api import CALLS, MAX_REQUEST_BYTES, RequestObserver, check_token
from allocator.broker.core import ApiError, Broker
from allocator.broker.proto import pb, pb_grpc
from allocator.broker.tls import TlsFiles

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_CONCURRENT_RPCS = 256
# The server's own deadline: a call waits at most this long for the broker (less when the
# client's deadline is nearer), a call without a deadline included, and then answers
# DEADLINE_EXCEEDED having changed nothing.
MAX_CALL_SECONDS = 10.0


def _within_deadline(broker: Broker, context: grpc.ServicerContext, run: Callable[[], T]) -> T:
    """`run()` under the broker's lock, if the lock is free before the call's deadline (the
    client's, capped at MAX_CALL_SECONDS); otherwise DEADLINE_EXCEEDED and nothing is done,
    so a caller that gave up is never answered by a change it did not see."""
    remaining = context.time_remaining()
    budget = MAX_CALL_SECONDS if remaining is None else min(remaining, MAX_CALL_SECONDS)
    lock = broker._lock  # reentrant: the broker's own methods take it again
    if budget <= 0 or not lock.acquire(timeout=budget):
        raise ApiError(
            "DEADLINE_EXCEEDED",
            f"the broker was busy past the call's deadline ({budget:.1f} s); nothing was done",
        )
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


def _method(name: str):
    call = CALLS[name]

    def handle(self: _Servicer, request, context: grpc.ServicerContext):
        try:
            if isinstance(request, _Undecodable):
                raise ApiError(
                    "INVALID_ARGUMENT", f"malformed {name} request: not a {SERVICE} message"
                )
            metadata = dict(context.invocation_metadata())
            check_token(self.token, metadata.get("authorization"))
            standby = self.broker.standby()
            if standby is not None:  # --ha: the standby names the leader
                raise ApiError("UNAVAILABLE", standby)
            reply = _within_deadline(
                self.broker, context, lambda: call.handler(self.broker, request)
            )
        except ApiError as error:
            self.observe(name, error.code)
            context.abort(getattr(grpc.StatusCode, error.code), str(error))
        except Exception as error:  # never let one request take the server down
            log.exception("gRPC %s failed", name)
            self.observe(name, "INTERNAL")
            context.abort(grpc.StatusCode.INTERNAL, f"internal error: {error}")
        self.observe(name, "OK")
        return reply

    handle.__name__ = name
    return handle


class _Servicer(pb_grpc.TenantServiceServicer):
    def __init__(self, broker: Broker, token: str | None, observer: RequestObserver | None):
        self.broker = broker
        self.token = token
        self._observer = observer

    def observe(self, method: str, code: str) -> None:
        if self._observer is not None:
            self._observer("grpc", method, code)


for _name in CALLS:
    setattr(_Servicer, _name, _method(_name))


def _handlers(servicer: _Servicer) -> dict[str, grpc.RpcMethodHandler]:
    """The service's methods from its descriptor, each decoding its request itself."""
    service = pb.DESCRIPTOR.services_by_name[SERVICE.rsplit(".", 1)[1]]
    handlers = {}
    for method in service.methods:
        reply = getattr(pb, method.output_type.name)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method.name),
            request_deserializer=_decoder(CALLS[method.name].request_type),
            response_serializer=reply.SerializeToString,
        )
    return handlers


class TenantGrpcServer:
    def __init__(
        self,
        broker: Broker,
        address: tuple[str, int],
        token: str | None = None,
        observer: RequestObserver | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="tenant-grpc"),
            # beyond this many calls in flight a call is refused with RESOURCE_EXHAUSTED at
            # once instead of queueing without bound
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
            options=[
                ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                ("grpc.so_reuseport", 0),
                ("grpc.max_concurrent_streams", 100),  # per connection
                ("grpc.max_connection_idle_ms", 300_000),  # idle clients are let go
                ("grpc.http2.max_ping_strikes", 2),  # and so are clients that ping-flood
            ],
        )
        handlers = _handlers(_Servicer(broker, token, observer))
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),)
        )
        host, port = address
        if tls is None:
            self.port = self._server.add_insecure_port(f"{host}:{port}")
        else:
            self.port = self._server.add_secure_port(f"{host}:{port}", tls.grpc_credentials())
        if self.port == 0:
            raise OSError(f"cannot bind gRPC to {host}:{port}")

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=1).wait(timeout=5)
