"""Scalar resources and attributes as the Mesos master keeps and prints them.

Mesos stores scalar values in fixed point with three decimals, so amounts are held here as
integer thousandths ("millis") and arithmetic is exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

Millis = dict[str, int]

# The master flag --min_allocatable_resources defaults to `cpus:0.01|mem:32` (OR).
MIN_ALLOCATABLE: tuple[Millis, ...] = ({"cpus": 10}, {"mem": 32_000})
# /master/state always prints these, even at zero.
STATE_RESOURCES = ("cpus", "gpus", "mem", "disk")


class ResourceError(ValueError):
    pass


def to_millis(value: float) -> int:
    return round(value * 1000)


def from_spec(spec: Mapping[str, float]) -> Millis:
    out: Millis = {}
    for name, value in spec.items():
        if not math.isfinite(value) or value < 0:
            raise ResourceError(f"resource {name} must be finite and non-negative, got {value}")
        out[name] = to_millis(value)
    return out


def parse(items: Iterable[Mapping[str, Any]]) -> tuple[Millis, set[str]]:
    """A Resource list to (amounts, allocation roles named in it); scalars only."""
    total: Millis = {}
    roles: set[str] = set()
    for item in items:
        name = item["name"]
        if item.get("type", "SCALAR") != "SCALAR":
            raise ResourceError(f"the test master supports scalar resources only, got {name}")
        value = float(item.get("scalar", {}).get("value", 0.0))
        if not math.isfinite(value) or value < 0:
            raise ResourceError(f"Invalid scalar resource {name}: {value}")
        total[name] = total.get(name, 0) + to_millis(value)
        allocation = item.get("allocation_info")
        if isinstance(allocation, Mapping) and "role" in allocation:
            roles.add(allocation["role"])
    return total, roles


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Millis:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, 0) + value
    return out


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> Millis:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, 0) - value
    return {name: value for name, value in out.items() if value > 0}


def contains(big: Mapping[str, int], small: Mapping[str, int]) -> bool:
    return all(big.get(name, 0) >= value for name, value in small.items() if value > 0)


def is_empty(res: Mapping[str, int]) -> bool:
    return all(value <= 0 for value in res.values())


def allocatable(res: Mapping[str, int]) -> bool:
    return any(contains(res, minimum) for minimum in MIN_ALLOCATABLE)


def value(millis: int) -> float:
    return millis / 1000


def to_json(res: Mapping[str, int], allocation_role: str | None) -> list[dict[str, Any]]:
    """Offer resources in the pre-refinement format (`role: "*"` for unreserved)."""
    out = []
    for name, amount in res.items():
        if amount <= 0:
            continue
        item: dict[str, Any] = {
            "name": name, "type": "SCALAR", "scalar": {"value": value(amount)}, "role": "*",
        }  # fmt: skip
        if allocation_role is not None:
            item["allocation_info"] = {"role": allocation_role}
        out.append(item)
    return out


def flatten(res: Mapping[str, int]) -> dict[str, float]:
    """The flattened object /master/state prints (`{"cpus": 2.0, "mem": 1024.0, ...}`)."""
    out = {name: 0.0 for name in STATE_RESOURCES}
    for name, amount in res.items():
        out[name] = value(amount)
    return out


def stringify(res: Mapping[str, int], role: str) -> str:
    parts = [f"{n}(allocated: {role}):{value(v):g}" for n, v in res.items() if v > 0]
    return "; ".join(parts) if parts else "{}"


def attributes_json(attributes: Mapping[str, str | float]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, raw in attributes.items():
        if isinstance(raw, str):
            out.append({"name": name, "type": "TEXT", "text": {"value": raw}})
        else:
            out.append({"name": name, "type": "SCALAR", "scalar": {"value": float(raw)}})
    return out
