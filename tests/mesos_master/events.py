"""JSON shapes of scheduler events and the statuses, offers and ids inside them."""

from __future__ import annotations

import base64
import socket
import struct
import uuid
from typing import Any

from . import resources as res
from .state import Agent, Framework, Offer

VERSION = "1.11.0"


def compact(obj: Any) -> Any:
    """stout prints no key for an empty repeated field."""
    if isinstance(obj, dict):
        return {k: compact(v) for k, v in obj.items() if not (isinstance(v, list) and not v)}
    if isinstance(obj, list):
        return [compact(v) for v in obj]
    return obj


def ip_uint32(ip: str) -> int:
    """MasterInfo.ip: the IPv4 address in network byte order, read as a host integer."""
    return int(struct.unpack("<I", socket.inet_aton(ip))[0])


def master_info(master_id: str, ip: str, port: int) -> dict[str, Any]:
    return {
        "id": master_id, "ip": ip_uint32(ip), "port": port, "pid": f"master@{ip}:{port}",
        "hostname": ip, "version": VERSION,
        "address": {"hostname": ip, "ip": ip, "port": port},
        "capabilities": [{"type": "AGENT_UPDATE"}, {"type": "AGENT_DRAINING"}],
    }  # fmt: skip


def new_uuid() -> str:
    """A status update uuid as the v1 JSON carries it: base64 of 16 raw bytes."""
    return base64.b64encode(uuid.uuid4().bytes).decode("ascii")


def subscribed(framework_id: str, heartbeat_s: float, info: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "SUBSCRIBED",
        "subscribed": {
            "framework_id": {"value": framework_id},
            "heartbeat_interval_seconds": float(heartbeat_s),
            "master_info": info,
        },
    }


def heartbeat() -> dict[str, Any]:
    return {"type": "HEARTBEAT"}


def error(message: str) -> dict[str, Any]:
    return {"type": "ERROR", "error": {"message": message}}


def update(status: dict[str, Any]) -> dict[str, Any]:
    return {"type": "UPDATE", "update": {"status": status}}


def rescind(offer_id: str) -> dict[str, Any]:
    return {"type": "RESCIND", "rescind": {"offer_id": {"value": offer_id}}}


def failure(agent_id: str) -> dict[str, Any]:
    return {"type": "FAILURE", "failure": {"agent_id": {"value": agent_id}}}


def offer(offer: Offer, agent: Agent, framework: Framework) -> dict[str, Any]:
    # Allocation info is stripped for frameworks that are not MULTI_ROLE (MESOS-8237).
    role = offer.role if framework.multi_role else None
    body: dict[str, Any] = {
        "id": {"value": offer.id},
        "framework_id": {"value": offer.framework_id},
        "agent_id": {"value": offer.agent_id},
        "hostname": agent.hostname,
        "url": {
            "scheme": "http",
            "address": {"hostname": agent.hostname, "ip": agent.hostname, "port": agent.spec.port},
            "path": "/slave(1)",
        },
        "resources": res.to_json(offer.resources, role),
        "attributes": res.attributes_json(agent.spec.attributes),
    }
    if role is not None:
        body["allocation_info"] = {"role": role}
    return body


def offers(bodies: list[dict[str, Any]]) -> dict[str, Any]:
    # Nested: Event.offers is an `Offers` message wrapping the repeated field.
    return {"type": "OFFERS", "offers": {"offers": bodies}}


def status(
    task_id: str,
    state: str,
    source: str,
    *,
    agent_id: str | None = None,
    executor_id: str | None = None,
    message: str | None = None,
    reason: str | None = None,
    with_uuid: bool = False,
    timestamp: float,
) -> dict[str, Any]:
    body: dict[str, Any] = {"task_id": {"value": task_id}, "state": state, "source": source}
    if message is not None:
        body["message"] = message
    if reason is not None:
        body["reason"] = reason
    if agent_id is not None:
        body["agent_id"] = {"value": agent_id}
    if executor_id is not None:
        body["executor_id"] = {"value": executor_id}
    body["timestamp"] = timestamp
    if with_uuid:
        body["uuid"] = new_uuid()
    return body
