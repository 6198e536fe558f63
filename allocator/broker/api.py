"""The tenant API's calls, once, for both transports (gRPC and HTTP/JSON)."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import Message

from allocator.broker.core import ApiError, Broker
from allocator.broker.proto import pb

MAX_REQUEST_BYTES = 1 << 20  # 1 MiB: a registration is a few hundred bytes


@dataclass(frozen=True)
class Call:
    request_type: type[Message]
    handler: Callable[[Broker, Message], Message]


def _register(broker: Broker, request: pb.RegisterRequest) -> pb.RegisterReply:
    return broker.register(request)


def _heartbeat(broker: Broker, request: pb.TenantRef) -> pb.HeartbeatReply:
    return pb.HeartbeatReply(ok=True, leaving=broker.heartbeat(request.tenant_id))


def _set_target(broker: Broker, request: pb.SetTargetRequest) -> pb.Ack:
    broker.set_target(request.tenant_id, request.total)
    return pb.Ack(ok=True)


def _kill(broker: Broker, request: pb.KillRequest) -> pb.KillReply:
    return pb.KillReply(killed=broker.kill(request.tenant_id, list(request.executor_ids)))


def _unregister(broker: Broker, request: pb.TenantRef) -> pb.Ack:
    broker.unregister(request.tenant_id)
    return pb.Ack(ok=True)


def _allocation(broker: Broker, request: pb.AllocationRequest) -> pb.Allocation:
    return broker.allocation()


def _configure(broker: Broker, request: pb.ConfigureRequest) -> pb.BrokerInfo:
    broker.configure(request)
    return broker.info()


CALLS: dict[str, Call] = {
    "Register": Call(pb.RegisterRequest, _register),
    "Heartbeat": Call(pb.TenantRef, _heartbeat),
    "SetTarget": Call(pb.SetTargetRequest, _set_target),
    "KillExecutors": Call(pb.KillRequest, _kill),
    "Unregister": Call(pb.TenantRef, _unregister),
    "GetAllocation": Call(pb.AllocationRequest, _allocation),
    "Configure": Call(pb.ConfigureRequest, _configure),
}

HTTP_STATUS = {
    "OK": 200,
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "NOT_FOUND": 404,
    "UNIMPLEMENTED": 404,
    "FAILED_PRECONDITION": 409,
    "RESOURCE_EXHAUSTED": 413,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}


def check_token(expected: str | None, authorization: str | None) -> None:
    """Shared-token authentication: `Authorization: Bearer <token>` when a token is set (the
    scheme in any case, as RFC 9110 says; a bare token without it is refused)."""
    if not expected:
        return
    scheme, _, given = (authorization or "").strip().partition(" ")
    given = given.strip()
    if (
        scheme.lower() != "bearer"
        or not given
        or not hmac.compare_digest(given.encode(), expected.encode())
    ):
        raise ApiError("UNAUTHENTICATED", "missing or wrong token (Authorization: Bearer ...)")


RequestObserver = Callable[[str, str, str], None]  # (transport, method, status code)
