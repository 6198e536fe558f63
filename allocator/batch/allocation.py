"""The broker's `Allocation` message (tenant.proto) in protobuf's JSON mapping, reduced to what
a batch run tracks: allocated resources and executors per group and per agent, and grants.

Proto3 JSON leaves out fields at their default and writes int64 as strings, so every field is
optional here and numbers are parsed from either form. snake_case names are accepted too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from allocator.errors import FairbrokerError


@dataclass(frozen=True)
class AllocationSample:
    scheduler: str
    mode: str
    grants_total: int | None
    capacity: dict[str, float]  # summed over agents
    allocated: dict[str, dict[str, float]]  # group -> resource -> amount
    running: dict[str, int]  # group -> running executors
    agent_executors: dict[str, dict[str, int]]  # agent -> group -> executors


def _field(message: Mapping[str, Any], camel: str, default: Any = None) -> Any:
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return message.get(camel, message.get(snake, default))


def _number(value: Any, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise FairbrokerError(f"allocation snapshot: {what} is not a number: {value!r}") from None


def _amounts(message: Mapping[str, Any], camel: str, what: str) -> dict[str, float]:
    raw = _field(message, camel) or {}
    if not isinstance(raw, Mapping):
        raise FairbrokerError(f"allocation snapshot: {what} is not a mapping")
    return {str(k): _number(v, f"{what}.{k}") for k, v in raw.items()}


def _messages(message: Mapping[str, Any], camel: str) -> list[Mapping[str, Any]]:
    raw = _field(message, camel) or []
    if not isinstance(raw, list) or not all(isinstance(m, Mapping) for m in raw):
        raise FairbrokerError(f"allocation snapshot: {camel} is not a list of messages")
    return raw


def parse_allocation(data: Any) -> AllocationSample:
    """An AllocationSample from one snapshot; FairbrokerError names the malformed field."""
    if not isinstance(data, Mapping):
        raise FairbrokerError("allocation snapshot: expected a mapping (Allocation message)")
    broker = _field(data, "broker")
    # A present BrokerInfo with grantsTotal left out means 0 grants; no BrokerInfo, unknown.
    grants = None if broker is None else _field(broker, "grantsTotal", 0)
    broker = broker or {}
    group_of: dict[str, str] = {}
    allocated: dict[str, dict[str, float]] = {}
    running: dict[str, int] = {}
    for t, tenant in enumerate(_messages(data, "tenants")):
        group = str(_field(tenant, "group") or "*")
        group_of[str(_field(tenant, "tenantId", ""))] = group
        held = allocated.setdefault(group, {})
        for resource, amount in _amounts(tenant, "allocated", f"tenants[{t}].allocated").items():
            held[resource] = held.get(resource, 0.0) + amount
        running[group] = running.get(group, 0) + int(
            _number(_field(tenant, "running", 0), f"tenants[{t}].running")
        )
    capacity: dict[str, float] = {}
    agent_executors: dict[str, dict[str, int]] = {}
    for a, agent in enumerate(_messages(data, "agents")):
        for resource, amount in _amounts(agent, "capacity", f"agents[{a}].capacity").items():
            capacity[resource] = capacity.get(resource, 0.0) + amount
        counts: dict[str, int] = {}
        for tenant, n in _amounts(agent, "executors", f"agents[{a}].executors").items():
            group = group_of.get(tenant, "*")
            counts[group] = counts.get(group, 0) + int(n)
        agent_executors[str(_field(agent, "name", f"agent{a}"))] = counts
    return AllocationSample(
        scheduler=str(_field(broker, "scheduler", "")),
        mode=str(_field(broker, "mode", "")),
        grants_total=None if grants is None else int(_number(grants, "broker.grantsTotal")),
        capacity=capacity,
        allocated=allocated,
        running=running,
        agent_executors=agent_executors,
    )
